/* kernels_ew_small.c: times the elementwise and data-movement kernels on the small tensors
 * of a GPT training step (16K-49K elements, warm cache, one thread, pool NULL), where the
 * cost per row and per call matters more than bandwidth. Prints us per call (best of
 * ROUNDS rounds of CALLS calls each) and, when .venv/bin/python has torch, PyTorch CPU's
 * time for the same op with out= (one thread, same shapes and layouts) and the ratio
 * ours / PyTorch (below 1: we are faster; PyTorch's time includes its eager dispatch).
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/kernels_ew_small.c \
 *      build/release/libtpu.a -pthread -lm -o build/kernels_ew_small && build/kernels_ew_small
 * TORCHTPU_ISA=portable|avx2|avx512 picks the SIMD code.
 *
 * Rows (f32 unless noted; x is (8,4,32,32) = 32768 elements, q is the (8,4,32,16) query
 * view of a qkv split after the head transpose, strides (6144,16,192,1)):
 *   add dense            x + y, the yardstick the others are held to (about 2x of it)
 *   eq scalar / eq dense x == broadcast scalar (rank 4, all strides 0) / x == y -> bool
 *   where bcast pred     where(pred broadcast along the last dim, scalar, y)
 *   mul q * scalar       q * broadcast scalar -> dense (16384 elements)
 *   copy q               q -> dense (16384 elements)
 *   copy dense / fill    49152 elements
 *   all last dim (bool)  AND over the last dim (32) -> (8,4,32); amax last dim the same for MAX
 *   ne bool scalar       bool x != broadcast bool scalar (the safe-softmax mask), 32768
 *   mul kT * scalar      (8,4,16,32) view k^T of the qkv split, strides (6144,16,1,192), times
 *                        a broadcast scalar -> dense (16384 elements)
 *   copy kT 16384        the k^T view above -> dense (a transposing copy)
 *   copy heads 16384     (8,32,4,16) with strides (2048,16,512,1) (attention heads back to
 *                        rows) -> dense
 *   erf 65536            erf of 49152 dense values in [0, 9.9] (the GELU's erf; the kernel
 *                        has no data-dependent branches)
 *   bmm 32x32x16         32 batches of (32,32) @ (32,16) -> (32,32,16), f32 at DEFAULT (bf16
 *                        passes); bmm qk^T 32 batches of (32,16) @ (16,32)^T with the rhs
 *                        transposed (strides (512,1,16)) -> (32,32,32)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "tpu/kernels.h"
#include "torch_reference.h"

#define ROUNDS 20
#define CALLS 100

enum { ADD, EQ_SCALAR, EQ_DENSE, WHERE, MUL_Q, COPY_Q, COPY_DENSE, FILL, ALL_LAST, AMAX_LAST,
       NE_BOOL, MUL_KT, COPY_KT, COPY_HEADS, ERF, BMM_PV, BMM_QK, NROWS };
static const char *const kNames[NROWS] = {
    "add dense 32768",   "eq scalar 32768", "eq dense 32768",     "where bcast pred 32768",
    "mul q * scalar 16384", "copy q 16384", "copy dense 49152",   "fill 49152",
    "all last dim (bool)", "amax last dim", "ne bool scalar 32768", "mul kT * scalar 16384",
    "copy kT 16384", "copy heads 16384", "erf 65536", "bmm 32x32x16", "bmm qk^T 32x32x32"};

typedef struct mem {
  float *x, *y, *o, *qkv, *qo, *f1, *f2, *rf, scalar;
  uint8_t *b, *bo, *pred, *rb, bscalar;
} mem_t;

static tpu_status_t run(int row, void *ctx) {
  static const int64_t d4[4] = {8, 4, 32, 32}, z4[4] = {0, 0, 0, 0}, ps[4] = {128, 32, 1, 0};
  static const int64_t qd[4] = {8, 4, 32, 16}, qs[4] = {6144, 16, 192, 1};
  static const int64_t d1[1] = {49152}, d3[3] = {8, 4, 32};
  static const bool last[4] = {false, false, false, true};
  const mem_t *m = ctx;
  tpu_buf_t x = bench_buf(m->x, TPU_F32, 4, d4, NULL), y = bench_buf(m->y, TPU_F32, 4, d4, NULL);
  tpu_buf_t o = bench_buf(m->o, TPU_F32, 4, d4, NULL), b = bench_buf(m->b, TPU_BOOL, 4, d4, NULL);
  tpu_buf_t sc = bench_buf((void *)&m->scalar, TPU_F32, 4, d4, z4);
  tpu_buf_t pred = bench_buf(m->pred, TPU_BOOL, 4, d4, ps);
  tpu_buf_t q = bench_buf(m->qkv, TPU_F32, 4, qd, qs), qo = bench_buf(m->qo, TPU_F32, 4, qd, NULL);
  tpu_buf_t qsc = bench_buf((void *)&m->scalar, TPU_F32, 4, qd, z4);
  tpu_buf_t f1 = bench_buf(m->f1, TPU_F32, 1, d1, NULL);
  tpu_buf_t f2 = bench_buf(m->f2, TPU_F32, 1, d1, NULL);
  tpu_buf_t rb = bench_buf(m->rb, TPU_BOOL, 3, d3, NULL);
  tpu_buf_t rf = bench_buf(m->rf, TPU_F32, 3, d3, NULL);
  switch (row) {
    case ADD: return tpu_kernel_binary(TPU_OP_ADD, &x, &y, &o, NULL);
    case EQ_SCALAR: return tpu_kernel_compare(TPU_CMP_EQ, &x, &sc, &b, NULL);
    case EQ_DENSE: return tpu_kernel_compare(TPU_CMP_EQ, &x, &y, &b, NULL);
    case WHERE: return tpu_kernel_select(&pred, &sc, &y, &o, NULL);
    case MUL_Q: return tpu_kernel_binary(TPU_OP_MUL, &q, &qsc, &qo, NULL);
    case COPY_Q: return tpu_kernel_copy(&q, &qo, NULL);
    case COPY_DENSE: return tpu_kernel_copy(&f1, &f2, NULL);
    case FILL: return tpu_kernel_fill(&f2, 0.0, 0, NULL);
    case ALL_LAST: return tpu_kernel_reduce(TPU_REDUCE_AND, &b, last, &rb, NULL);
    case AMAX_LAST: return tpu_kernel_reduce(TPU_REDUCE_MAX, &x, last, &rf, NULL);
    case NE_BOOL: {
      tpu_buf_t bs = bench_buf((void *)&m->bscalar, TPU_BOOL, 4, d4, z4);
      tpu_buf_t bo = bench_buf(m->bo, TPU_BOOL, 4, d4, NULL);
      return tpu_kernel_compare(TPU_CMP_NE, &b, &bs, &bo, NULL);
    }
    case MUL_KT: {
      static const int64_t kd[4] = {8, 4, 16, 32}, ks[4] = {6144, 16, 1, 192};
      tpu_buf_t k = bench_buf(m->qkv, TPU_F32, 4, kd, ks);
      tpu_buf_t ko = bench_buf(m->qo, TPU_F32, 4, kd, NULL);
      tpu_buf_t ksc = bench_buf((void *)&m->scalar, TPU_F32, 4, kd, z4);
      return tpu_kernel_binary(TPU_OP_MUL, &k, &ksc, &ko, NULL);
    }
    case COPY_KT: {
      static const int64_t kd[4] = {8, 4, 16, 32}, ks[4] = {6144, 16, 1, 192};
      tpu_buf_t k = bench_buf(m->qkv, TPU_F32, 4, kd, ks);
      tpu_buf_t ko = bench_buf(m->qo, TPU_F32, 4, kd, NULL);
      return tpu_kernel_copy(&k, &ko, NULL);
    }
    case COPY_HEADS: { /* (8,4,32,16) heads back to (8,32,4,16) rows */
      static const int64_t hd[4] = {8, 32, 4, 16}, hs[4] = {2048, 16, 512, 1};
      tpu_buf_t h = bench_buf(m->x, TPU_F32, 4, hd, hs);
      tpu_buf_t ho = bench_buf(m->qo, TPU_F32, 4, hd, NULL);
      return tpu_kernel_copy(&h, &ho, NULL);
    }
    case ERF: return tpu_kernel_unary(TPU_OP_ERF, &f1, &f2, NULL);
    default: {
      static const int64_t ad[3] = {32, 32, 32}, bd[3] = {32, 32, 16};
      tpu_dot_attrs_t at;
      memset(&at, 0, sizeof at);
      at.num_batch = 1;
      at.num_contract = 1;
      at.precision = TPU_PRECISION_DEFAULT;
      /* BMM_PV: (32,32,32) @ (32,32,16) -> (32,32,16); BMM_QK: (32,32,16) q @ k^T where k is
       * (32,32,16) read as (32,16,32) strides (512,1,16): contract q dim 2 with k dim 2 ->
       * (32,32,32) */
      const bool pv = row == BMM_PV;
      tpu_buf_t lhs = bench_buf(pv ? m->x : m->qkv, TPU_F32, 3, pv ? ad : bd, NULL);
      tpu_buf_t rhs = bench_buf(pv ? m->qkv : m->f1, TPU_F32, 3, bd, NULL);
      tpu_buf_t out = bench_buf(m->o, TPU_F32, 3, pv ? bd : ad, NULL);
      at.lhs_contract[0] = 2;
      at.rhs_contract[0] = pv ? 1 : 2;
      return tpu_kernel_dot_general(&at, &lhs, &rhs, &out, NULL);
    }
  }
}

/* PyTorch's us per call per row, one thread, from one python process. */
static const char *kTorchScript =
    "import torch,time\n"
    "torch.set_num_threads(1)\n"
    "x=torch.randn(8,4,32,32);y=torch.randn(8,4,32,32);o=torch.empty(8,4,32,32)\n"
    "b=torch.empty(8,4,32,32,dtype=torch.bool);s=torch.zeros(()).expand(8,4,32,32)\n"
    "p=(torch.rand(8,4,32,1)>0.5).expand(8,4,32,32)\n"
    "qkv=torch.randn(49152);q=qkv.as_strided((8,4,32,16),(6144,16,192,1));qo=torch.empty(8,4,32,16)\n"
    "qs=torch.zeros(()).expand(8,4,32,16)\n"
    "f1=torch.randn(49152);f2=torch.empty(49152)\n"
    "rb=torch.empty(8,4,32,dtype=torch.bool);rf=torch.empty(8,4,32);bb=x>0\n"
    "bt=torch.ones((),dtype=torch.bool).expand(8,4,32,32)\n"
    "kt=qkv.as_strided((8,4,16,32),(6144,16,1,192));ko=torch.empty(8,4,16,32)\n"
    "ks=torch.zeros(()).expand(8,4,16,32)\n"
    "a3=torch.randn(32,32,32);b3=torch.randn(32,32,16);o3=torch.empty(32,32,16)\n"
    "q3=torch.randn(32,32,16);k3=torch.randn(32,32,16);o4=torch.empty(32,32,32)\n"
    "rows=[lambda:torch.add(x,y,out=o),lambda:torch.eq(x,s,out=b),lambda:torch.eq(x,y,out=b),\n"
    " lambda:torch.where(p,s,y,out=o),lambda:torch.mul(q,qs,out=qo),lambda:qo.copy_(q),\n"
    " lambda:f2.copy_(f1),lambda:f2.fill_(0.0),lambda:torch.all(bb,3,out=rb),\n"
    " lambda:torch.amax(x,3,out=rf),lambda:torch.ne(bb,bt,out=b),lambda:torch.mul(kt,ks,out=ko),\n"
    " lambda:ko.copy_(kt),lambda:qo.view(8,32,4,16).copy_(x.view(-1)[:16384].as_strided((8,32,4,16),(2048,16,512,1))),\n"
    " lambda:torch.erf(f1,out=f2),lambda:torch.bmm(a3,b3,out=o3),\n"
    " lambda:torch.bmm(q3,k3.transpose(1,2),out=o4)]\n"
    BENCH_TORCH_BEST_OF(ROUNDS, CALLS);

int main(void) {
  mem_t m;
  m.x = calloc(32768, 4);
  m.y = calloc(32768, 4);
  m.o = calloc(32768, 4);
  m.qkv = calloc(49152, 4);
  m.qo = calloc(16384, 4);
  m.f1 = calloc(49152, 4);
  m.f2 = calloc(49152, 4);
  m.rf = calloc(1024, 4);
  m.b = calloc(32768, 1);
  m.bo = calloc(32768, 1);
  m.bscalar = 1;
  m.pred = calloc(1024, 1);
  m.rb = calloc(1024, 1);
  m.scalar = 0.5f;
  if (!m.x || !m.y || !m.o || !m.qkv || !m.qo || !m.f1 || !m.f2 || !m.rf || !m.b || !m.bo || !m.pred ||
      !m.rb) {
    return 1;
  }
  srand(1);
  for (int i = 0; i < 32768; i++) {
    m.x[i] = (float)(rand() % 8) - 4.0f;
    m.y[i] = (float)(rand() % 8) - 4.0f;
    m.b[i] = (uint8_t)(rand() % 64 != 0);
  }
  for (int i = 0; i < 1024; i++) m.pred[i] = (uint8_t)(rand() % 2);
  for (int i = 0; i < 49152; i++) m.qkv[i] = m.f1[i] = (float)(rand() % 100) / 10.0f;
  double ours[NROWS], torch[NROWS];
  for (int r = 0; r < NROWS; r++) {
    ours[r] = bench_case_us(run, r, &m, kNames[r], ROUNDS, CALLS);
    if (ours[r] < 0) return 1;
  }
  int have_torch =
      torch_reference_us(kTorchScript, "build/kernels_ew_small_torch.py", NROWS, torch);
  const tpu_cpu_features_t *f = tpu_cpu_features();
  printf("small elementwise kernels, one thread, us per call (best of %d x %d); ISA %s\n", ROUNDS,
         CALLS, f->avx512f ? "avx512" : f->avx2_fma ? "avx2" : "portable");
  printf("%-24s %8s %8s", "op", "ours", "/ add");
  if (have_torch) printf(" %8s %7s", "torch", "ratio");
  printf("\n");
  for (int r = 0; r < NROWS; r++) {
    printf("%-24s %8.2f %7.2fx", kNames[r], ours[r], ours[r] / ours[ADD]);
    if (have_torch) printf(" %8.2f %6.2fx", torch[r], ours[r] / torch[r]);
    printf("\n");
  }
  if (!have_torch) printf("(PyTorch not found at .venv/bin/python: no comparison)\n");
  free(m.x);
  free(m.y);
  free(m.o);
  free(m.qkv);
  free(m.qo);
  free(m.f1);
  free(m.f2);
  free(m.rf);
  free(m.b);
  free(m.bo);
  free(m.pred);
  free(m.rb);
  return 0;
}
