/* kernels_ew_jit.c: times the GPT training step's hottest fused elementwise programs
 * (ew_program.h) interpreted and as machine code (ew_jit.h), one thread, warm cache, pool
 * NULL, and PyTorch CPU's time for the same math (one thread, same shapes, in place / out=
 * where it can). Prints us per call (best of ROUNDS rounds of CALLS calls) and the ratios.
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/kernels_ew_jit.c \
 *      build/release/libtpu.a -pthread -lm -o build/kernels_ew_jit && build/kernels_ew_jit
 *
 * Programs (f32):
 *   adamw update   a (64, 256) parameter, its gradient and both moments, 8 broadcast
 *                  scalars: the new moments stored in place, the new parameter in place
 *                  (14 instructions, the simple ops only)
 *   gelu           x * 0.5 * (1 + erf(x / sqrt 2)) over (8, 32, 256) (erf is called)
 *   gelu backward  dy * (cdf(x) + x * pdf(x)) over (8, 32, 256) (erf and exp are called)
 *   ln tail        (h - mean) * rstd * w + b over (8, 32, 64), rows of 64 packed in blocks
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "tpu/kernels.h"
#include "torch_reference.h"
#include "vtpu/kernels/ew_jit.h"
#include "vtpu/kernels/ew_program.h"

#define ROUNDS 20
#define CALLS 50

enum { ADAMW, GELU, GELU_BWD, LN_TAIL, NPROGS };
static const char *const kNames[NPROGS] = {"adamw update", "gelu", "gelu backward", "ln tail"};

/* r0 p, r1 g, r2 m, r3 v; r4..r11 beta1, 1 - beta1, beta2, 1 - beta2, 1 - lr * wd,
 * sqrt(bias correction 2), eps, lr / bias correction 1 */
static const tpu_ew_program_t kAdamW = {
    .num_inputs = 4, .num_consts = 8,
    .consts = {0.9f, 0.1f, 0.999f, 0.001f, 0.99999f, 0.3f, 1e-8f, 0.004f},
    .num_instrs = 14,
    .instrs = {{TPU_OP_MUL, 12, 2, 4}, {TPU_OP_MUL, 13, 1, 5}, {TPU_OP_ADD, 12, 12, 13},
               {TPU_OP_MUL, 13, 3, 6}, {TPU_OP_MUL, 14, 1, 1}, {TPU_OP_MUL, 14, 14, 7},
               {TPU_OP_ADD, 13, 13, 14}, {TPU_OP_SQRT, 14, 13}, {TPU_OP_DIV, 14, 14, 9},
               {TPU_OP_ADD, 14, 14, 10}, {TPU_OP_DIV, 15, 12, 14}, {TPU_OP_MUL, 15, 15, 11},
               {TPU_OP_MUL, 16, 0, 8}, {TPU_OP_SUB, 16, 16, 15}},
    .result = 16, .num_stores = 2, .stores = {12, 13}};

static const tpu_ew_program_t kGelu = {
    .num_inputs = 1, .num_consts = 3, .consts = {0.70710678f, 1.0f, 0.5f}, .num_instrs = 5,
    .instrs = {{TPU_OP_MUL, 4, 0, 1}, {TPU_OP_ERF, 4, 4}, {TPU_OP_ADD, 4, 4, 2},
               {TPU_OP_MUL, 4, 4, 0}, {TPU_OP_MUL, 4, 4, 3}},
    .result = 4};

/* r0 x, r1 dy; r2..r6 1 / sqrt 2, 1, 0.5, -0.5, 1 / sqrt(2 pi) */
static const tpu_ew_program_t kGeluBwd = {
    .num_inputs = 2, .num_consts = 5, .consts = {0.70710678f, 1.0f, 0.5f, -0.5f, 0.39894228f},
    .num_instrs = 11,
    .instrs = {{TPU_OP_MUL, 7, 0, 2}, {TPU_OP_ERF, 7, 7}, {TPU_OP_ADD, 7, 7, 3},
               {TPU_OP_MUL, 7, 7, 4}, {TPU_OP_MUL, 8, 0, 0}, {TPU_OP_MUL, 8, 8, 5},
               {TPU_OP_EXP, 8, 8}, {TPU_OP_MUL, 8, 8, 6}, {TPU_OP_MUL, 8, 8, 0},
               {TPU_OP_ADD, 7, 7, 8}, {TPU_OP_MUL, 7, 7, 1}},
    .result = 7};

/* r0 h, r1 mean, r2 rstd, r3 w, r4 b */
static const tpu_ew_program_t kLnTail = {
    .num_inputs = 5, .num_instrs = 4,
    .instrs = {{TPU_OP_SUB, 5, 0, 1}, {TPU_OP_MUL, 5, 5, 2}, {TPU_OP_MUL, 5, 5, 3},
               {TPU_OP_ADD, 5, 5, 4}},
    .result = 5};

enum { BIG = 8 * 32 * 256 };

typedef struct mem {
  float *p, *g, *m, *v, *x, *dy, *y, *h, *mean, *rstd, *w, *b, *ho;
  tpu_ew_program_t prog[NPROGS]; /* with or without machine code */
} mem_t;

static tpu_buf_t f32(float *data, int rank, const int64_t *dims, const int64_t *strides) {
  return bench_buf(data, TPU_F32, rank, dims, strides);
}

static tpu_status_t run(int which, void *ctx) {
  mem_t *m = ctx;
  const int64_t pd[2] = {64, 256}, xd[3] = {8, 32, 256}, hd[3] = {8, 32, 64};
  switch (which) {
    case ADAMW: {
      tpu_buf_t p = f32(m->p, 2, pd, NULL), g = f32(m->g, 2, pd, NULL);
      tpu_buf_t mo = f32(m->m, 2, pd, NULL), v = f32(m->v, 2, pd, NULL);
      const tpu_buf_t *ins[4] = {&p, &g, &mo, &v}, *extra[2] = {&mo, &v};
      return tpu_kernel_ew_program_stores(&m->prog[ADAMW], ins, &p, extra, NULL);
    }
    case GELU: {
      tpu_buf_t x = f32(m->x, 3, xd, NULL), y = f32(m->y, 3, xd, NULL);
      const tpu_buf_t *ins[1] = {&x};
      return tpu_kernel_ew_program(&m->prog[GELU], ins, &y, NULL);
    }
    case GELU_BWD: {
      tpu_buf_t x = f32(m->x, 3, xd, NULL), dy = f32(m->dy, 3, xd, NULL);
      tpu_buf_t y = f32(m->y, 3, xd, NULL);
      const tpu_buf_t *ins[2] = {&x, &dy};
      return tpu_kernel_ew_program(&m->prog[GELU_BWD], ins, &y, NULL);
    }
    default: { /* mean and rstd (8, 32, 1), w and b (64) broadcast to (8, 32, 64) */
      const int64_t row[3] = {32, 1, 0}, col[3] = {0, 0, 1};
      tpu_buf_t h = f32(m->h, 3, hd, NULL), ho = f32(m->ho, 3, hd, NULL);
      tpu_buf_t mean = f32(m->mean, 3, hd, row), rstd = f32(m->rstd, 3, hd, row);
      tpu_buf_t w = f32(m->w, 3, hd, col), b = f32(m->b, 3, hd, col);
      const tpu_buf_t *ins[5] = {&h, &mean, &rstd, &w, &b};
      return tpu_kernel_ew_program(&m->prog[LN_TAIL], ins, &ho, NULL);
    }
  }
}

static const char kTorchScript[] =
    "import torch,time\n"
    "torch.set_num_threads(1)\n"
    "p=torch.randn(64,256);g=torch.randn(64,256);m=torch.randn(64,256);v=torch.rand(64,256)\n"
    "d=torch.empty(64,256)\n"
    "def adamw():\n"
    "  m.mul_(0.9).add_(g,alpha=0.1);v.mul_(0.999).addcmul_(g,g,value=0.001)\n"
    "  torch.sqrt(v,out=d);d.div_(0.3).add_(1e-8);p.mul_(0.99999).addcdiv_(m,d,value=-0.004)\n"
    "x=torch.randn(8,32,256);dy=torch.randn(8,32,256);y=torch.empty(8,32,256)\n"
    "h=torch.randn(8,32,64);ho=torch.empty(8,32,64);mean=torch.randn(8,32,1)\n"
    "rstd=torch.rand(8,32,1);w=torch.randn(64);b=torch.randn(64)\n"
    "def ln_tail():\n"
    "  torch.sub(h,mean,out=ho);ho.mul_(rstd).mul_(w).add_(b)\n"
    "rows=[adamw,lambda:torch.nn.functional.gelu(x),\n"
    " lambda:torch.ops.aten.gelu_backward(dy,x),ln_tail]\n"
    BENCH_TORCH_BEST_OF(ROUNDS, CALLS);

int main(void) {
  mem_t m;
  float **fs[] = {&m.p, &m.g, &m.m, &m.v, &m.x, &m.dy, &m.y, &m.h, &m.mean, &m.rstd, &m.w,
                  &m.b, &m.ho};
  const size_t fn[] = {16384, 16384, 16384, 16384, BIG, BIG, BIG, 16384, 256, 256, 64, 64,
                       16384};
  for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) {
    *fs[i] = malloc(fn[i] * 4);
    if (!*fs[i]) return 1;
    for (size_t j = 0; j < fn[i]; j++) (*fs[i])[j] = (float)(rand() % 64) / 16.0f - 1.0f;
  }
  for (int j = 0; j < 16384; j++) m.v[j] = fabsf(m.v[j]);
  const tpu_ew_program_t *progs[NPROGS] = {&kAdamW, &kGelu, &kGeluBwd, &kLnTail};
  double interp[NPROGS], jit[NPROGS], torch[NPROGS];
  bool have_jit = true;
  for (int r = 0; r < NPROGS; r++) {
    m.prog[r] = *progs[r];
    interp[r] = bench_case_us(run, r, &m, kNames[r], ROUNDS, CALLS);
    m.prog[r].jit = tpu_ew_jit_new(progs[r]);
    have_jit &= m.prog[r].jit != NULL;
    jit[r] = bench_case_us(run, r, &m, kNames[r], ROUNDS, CALLS);
    tpu_ew_jit_free(m.prog[r].jit);
    if (interp[r] < 0 || jit[r] < 0) return 1;
  }
  int have_torch =
      torch_reference_us(kTorchScript, "build/kernels_ew_jit_torch.py", NPROGS, torch);
  printf("fused elementwise programs, one thread, us per call (best of %d x %d)%s\n", ROUNDS,
         CALLS, have_jit ? "" : " (no JIT on this machine: both columns interpret)");
  printf("%-16s %8s %8s %9s", "program", "interp", "jit", "interp/jit");
  if (have_torch) printf(" %8s %9s", "torch", "torch/jit");
  printf("\n");
  for (int r = 0; r < NPROGS; r++) {
    printf("%-16s %8.2f %8.2f %8.2fx", kNames[r], interp[r], jit[r], interp[r] / jit[r]);
    if (have_torch) printf(" %8.2f %8.2fx", torch[r], torch[r] / jit[r]);
    printf("\n");
  }
  if (!have_torch) printf("(PyTorch not found at .venv/bin/python: no comparison)\n");
  for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) free(*fs[i]);
  return 0;
}
