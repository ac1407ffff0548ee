/* kernels_fused_rows.c: times fused elementwise programs (ew_program.h) and row reductions
 * on the short rows of a GPT training step's softmax and layer norm (inner dim 32 or 64,
 * operands broadcast along it), one thread, warm cache, pool NULL. Each program has its
 * machine code (ew_jit.h) as the compiler gives a fused step's programs; TORCHTPU_EW_JIT=0
 * times the interpreter instead. Prints us per call (best of ROUNDS rounds of CALLS calls)
 * and, when .venv/bin/python has torch, PyTorch CPU's time for the same math with out=
 * where it has one (one thread, same shapes), and the ratio.
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/kernels_fused_rows.c \
 *      build/release/libtpu.a -pthread -lm -o build/kernels_fused_rows && build/kernels_fused_rows
 *
 * Rows (f32; x is (8,4,32,32) attention scores, h is (8,32,64) activations):
 *   scores scale+mask    where(causal (32,32), -inf, x * scale): the scores' epilogue
 *   softmax div+select   where(pred (8,4,32,1), 0, e / s (8,4,32,1)): the softmax's last step
 *   softmax sub+exp      exp(x - m (8,4,32,1)): the softmax's numerator
 *   sum last dim 32      sum of e over the last dim -> (8,4,32)
 *   softmax (3 calls)    amax, sub+exp, sum, div+select: the whole softmax, torch.softmax beside
 *   ln tail              (h - mean) * rstd * w (64) + b (64), mean and rstd (8,32,1)
 *   ln centred square    (h - mean)^2 -> the variance's operand
 *   sum last dim 64      sum of h over the last dim -> (8,32)
 *   layer norm (4 calls) sum, centred square, sum, tail: torch.layer_norm beside
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "tpu/kernels.h"
#include "torch_reference.h"
#include "vtpu/kernels/ew_jit.h"
#include "vtpu/kernels/ew_program.h"

#define ROUNDS 20
#define CALLS 100

/* A dense row-major buffer, dims with a trailing 1 kept (broadcast along it). */
static tpu_buf_t dense(void *data, tpu_dtype_t dt, int rank, const int64_t *dims) {
  return bench_buf(data, dt, rank, dims, NULL);
}

enum { SC_MASK, SM_DIVSEL, SM_SUBEXP, SUM32, SOFTMAX, LN_TAIL, LN_SQ, SUM64, LAYERNORM, NROWS };
static const char *const kNames[NROWS] = {
    "scores scale+mask", "softmax div+select", "softmax sub+exp",   "sum last dim 32",
    "softmax (3 calls)", "ln tail",            "ln centred square", "sum last dim 64",
    "layer norm (4 calls)"};

/* where(pred, 0, e / s): inputs e, s, pred (r0-r2), the constant 0 (r3) */
static tpu_ew_program_t kDivSel = {
    .num_inputs = 3, .num_consts = 1, .consts = {0.0f}, .num_instrs = 2,
    .instrs = {{TPU_OP_DIV, 4, 0, 1}, {TPU_OP_SELECT, 4, 2, 3, 4}}, .result = 4};
/* where(mask, -inf, x * scale): inputs x, mask (r0, r1; mask (32,32) broadcast over the
 * heads), constants scale, -inf (r2, r3): the attention scores' scale and causal mask */
static tpu_ew_program_t kScaleMask = {
    .num_inputs = 2, .num_consts = 2, .consts = {0.25f, -INFINITY}, .num_instrs = 2,
    .instrs = {{TPU_OP_MUL, 4, 0, 2}, {TPU_OP_SELECT, 5, 1, 3, 4}}, .result = 5};
static tpu_ew_program_t kSubExp = {
    .num_inputs = 2, .num_instrs = 2,
    .instrs = {{TPU_OP_SUB, 2, 0, 1}, {TPU_OP_EXP, 2, 2, 0}}, .result = 2};
static tpu_ew_program_t kLnTail = {
    .num_inputs = 5, .num_instrs = 4,
    .instrs = {{TPU_OP_SUB, 5, 0, 1}, {TPU_OP_MUL, 5, 5, 2},
               {TPU_OP_MUL, 5, 5, 3}, {TPU_OP_ADD, 5, 5, 4}},
    .result = 5};
static tpu_ew_program_t kLnSq = {
    .num_inputs = 2, .num_instrs = 2,
    .instrs = {{TPU_OP_SUB, 2, 0, 1}, {TPU_OP_MUL, 2, 2, 2}}, .result = 2};

typedef struct mem {
  float *x, *e, *o, *m, *s, *h, *ho, *hs, *mean, *rstd, *w, *b;
  uint8_t *pred, *causal;
} mem_t;

static tpu_status_t run(int row, void *ctx) {
  static const int64_t d4[4] = {8, 4, 32, 32}, r4[4] = {8, 4, 32, 1}, s3[3] = {8, 4, 32};
  static const int64_t d3[3] = {8, 32, 64}, r3[3] = {8, 32, 1}, w3[3] = {1, 1, 64};
  static const int64_t h2[2] = {8, 32};
  static const bool last4[4] = {false, false, false, true}, last3[3] = {false, false, true};
  const mem_t *m = ctx;
  tpu_buf_t x = dense(m->x, TPU_F32, 4, d4), e = dense(m->e, TPU_F32, 4, d4);
  tpu_buf_t o = dense(m->o, TPU_F32, 4, d4), mx = dense(m->m, TPU_F32, 4, r4);
  tpu_buf_t s = dense(m->s, TPU_F32, 4, r4), p = dense(m->pred, TPU_BOOL, 4, r4);
  tpu_buf_t cm = dense(m->causal, TPU_BOOL, 4, d4);
  cm.strides[0] = cm.strides[1] = 0;
  tpu_buf_t s_red = dense(m->s, TPU_F32, 3, s3), m_red = dense(m->m, TPU_F32, 3, s3);
  tpu_buf_t h = dense(m->h, TPU_F32, 3, d3), ho = dense(m->ho, TPU_F32, 3, d3);
  tpu_buf_t hs = dense(m->hs, TPU_F32, 3, d3), mean = dense(m->mean, TPU_F32, 3, r3);
  tpu_buf_t rstd = dense(m->rstd, TPU_F32, 3, r3), w = dense(m->w, TPU_F32, 3, w3);
  tpu_buf_t b = dense(m->b, TPU_F32, 3, w3), mean_red = dense(m->mean, TPU_F32, 2, h2);
  tpu_buf_t rstd_red = dense(m->rstd, TPU_F32, 2, h2);
  w.strides[0] = w.strides[1] = 0;
  b.strides[0] = b.strides[1] = 0;
  const tpu_buf_t *ds[3] = {&e, &s, &p}, *se[2] = {&x, &mx}, *sm[2] = {&e, &cm};
  const tpu_buf_t *lt[5] = {&h, &mean, &rstd, &w, &b}, *lq[2] = {&h, &mean};
  switch (row) {
    case SC_MASK: return tpu_kernel_ew_program(&kScaleMask, sm, &o, NULL);
    case SM_DIVSEL: return tpu_kernel_ew_program(&kDivSel, ds, &o, NULL);
    case SM_SUBEXP: return tpu_kernel_ew_program(&kSubExp, se, &e, NULL);
    case SUM32: return tpu_kernel_reduce(TPU_REDUCE_SUM, &e, last4, &s_red, NULL);
    case SOFTMAX:
      TPU_RETURN_IF_ERROR(tpu_kernel_reduce(TPU_REDUCE_MAX, &x, last4, &m_red, NULL));
      TPU_RETURN_IF_ERROR(tpu_kernel_ew_program(&kSubExp, se, &e, NULL));
      TPU_RETURN_IF_ERROR(tpu_kernel_reduce(TPU_REDUCE_SUM, &e, last4, &s_red, NULL));
      return tpu_kernel_ew_program(&kDivSel, ds, &o, NULL);
    case LN_TAIL: return tpu_kernel_ew_program(&kLnTail, lt, &ho, NULL);
    case LN_SQ: return tpu_kernel_ew_program(&kLnSq, lq, &hs, NULL);
    case SUM64: return tpu_kernel_reduce(TPU_REDUCE_SUM, &h, last3, &mean_red, NULL);
    default:
      TPU_RETURN_IF_ERROR(tpu_kernel_reduce(TPU_REDUCE_SUM, &h, last3, &mean_red, NULL));
      TPU_RETURN_IF_ERROR(tpu_kernel_ew_program(&kLnSq, lq, &hs, NULL));
      TPU_RETURN_IF_ERROR(tpu_kernel_reduce(TPU_REDUCE_SUM, &hs, last3, &rstd_red, NULL));
      return tpu_kernel_ew_program(&kLnTail, lt, &ho, NULL);
  }
}

/* PyTorch's us per call per row, one thread, from one python process. */
static const char *kTorchScript =
    "import torch,time\n"
    "torch.set_num_threads(1)\n"
    "x=torch.randn(8,4,32,32);e=torch.randn(8,4,32,32);o=torch.empty(8,4,32,32)\n"
    "m=torch.randn(8,4,32,1);s=torch.rand(8,4,32,1)+1;p=torch.rand(8,4,32,1)>0.9\n"
    "z=torch.zeros(());s3=torch.empty(8,4,32)\n"
    "h=torch.randn(8,32,64);ho=torch.empty(8,32,64);mean=torch.randn(8,32,1);rstd=torch.rand(8,32,1)\n"
    "w=torch.randn(64);b=torch.randn(64);m2=torch.empty(8,32)\n"
    "def ln_tail():\n"
    "  torch.sub(h,mean,out=ho);ho.mul_(rstd).mul_(w).add_(b)\n"
    "def ln_sq():\n"
    "  torch.sub(h,mean,out=ho);ho.mul_(ho)\n"
    "c=torch.ones(32,32,dtype=torch.bool).triu(1);ninf=torch.tensor(float('-inf'))\n"
    "rows=[lambda:torch.where(c,ninf,torch.mul(e,0.25,out=o),out=o),\n"
    " lambda:torch.where(p,z,torch.div(e,s,out=o),out=o),\n"
    " lambda:torch.exp(torch.sub(x,m,out=e),out=e),lambda:torch.sum(e,3,out=s3),\n"
    " lambda:torch.softmax(x,3),ln_tail,ln_sq,lambda:torch.sum(h,2,out=m2),\n"
    " lambda:torch.layer_norm(h,(64,),w,b)]\n"
    BENCH_TORCH_BEST_OF(ROUNDS, CALLS);

int main(int argc, char **argv) {
  /* an argument picks one row and runs it for that many seconds (for perf record) */
  int only = argc > 2 ? atoi(argv[1]) : -1;
  double secs = argc > 2 ? atof(argv[2]) : 0;
  mem_t m;
  float **fs[] = {&m.x, &m.e, &m.o, &m.m, &m.s, &m.h, &m.ho, &m.hs, &m.mean, &m.rstd, &m.w, &m.b};
  const size_t fn[] = {32768, 32768, 32768, 1024, 1024, 16384, 16384, 16384, 256, 256, 64, 64};
  for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) {
    *fs[i] = malloc(fn[i] * 4);
    if (!*fs[i]) return 1;
    for (size_t j = 0; j < fn[i]; j++) (*fs[i])[j] = (float)(rand() % 64) / 16.0f - 1.0f;
  }
  m.pred = calloc(1024, 1);
  m.causal = calloc(1024, 1);
  if (!m.pred || !m.causal) return 1;
  for (int i = 0; i < 32; i++)
    for (int j = i + 1; j < 32; j++) m.causal[i * 32 + j] = 1;
  for (int i = 0; i < 1024; i++) m.pred[i] = (uint8_t)(rand() % 16 == 0);
  /* machine code for each program, as the compiler gives its fused steps (NULL where the
   * JIT is off or the CPU has no AVX-512: the interpreter runs them) */
  tpu_ew_program_t *progs[] = {&kScaleMask, &kDivSel, &kSubExp, &kLnTail, &kLnSq};
  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
    progs[i]->jit = tpu_ew_jit_new(progs[i]);
  }
  if (only >= 0) {
    double end = bench_now_s() + secs;
    while (bench_now_s() < end) {
      for (int c = 0; c < CALLS; c++) {
        if (run(only, &m) != TPU_OK) return 1;
      }
    }
    return 0;
  }
  double ours[NROWS], torch[NROWS];
  for (int r = 0; r < NROWS; r++) {
    ours[r] = bench_case_us(run, r, &m, kNames[r], ROUNDS, CALLS);
    if (ours[r] < 0) return 1;
  }
  int have_torch =
      torch_reference_us(kTorchScript, "build/kernels_fused_rows_torch.py", NROWS, torch);
  printf("fused short-row kernels, one thread, us per call (best of %d x %d)\n", ROUNDS, CALLS);
  printf("%-24s %8s", "op", "ours");
  if (have_torch) printf(" %8s %7s", "torch", "ratio");
  printf("\n");
  for (int r = 0; r < NROWS; r++) {
    printf("%-24s %8.2f", kNames[r], ours[r]);
    if (have_torch) printf(" %8.2f %6.2fx", torch[r], ours[r] / torch[r]);
    printf("\n");
  }
  if (!have_torch) printf("(PyTorch not found at .venv/bin/python: no comparison)\n");
  for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) free(*fs[i]);
  free(m.pred);
  free(m.causal);
  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
    tpu_ew_jit_free(progs[i]->jit);
  }
  return 0;
}
