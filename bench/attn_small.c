/* attn_small.c: times the small batched matmuls and short-row reductions of one attention
 * layer of a GPT training step (B*H = 32 heads of T = 32 tokens, head dim 16; layer-norm
 * rows of 64), warm cache, one thread (pool NULL): the per-batch and per-row overheads
 * these shapes expose. Prints us per call (best of ROUNDS rounds of CALLS calls each) and,
 * when .venv/bin/python has torch, PyTorch CPU's time for the same op with out= (one
 * thread) and the ratio ours / PyTorch.
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/attn_small.c \
 *      build/release/libtpu.a -pthread -lm -o build/attn_small && build/attn_small
 * TORCHTPU_ISA=portable|avx2|avx512 picks the SIMD code.
 *
 * Rows (f32; matmuls at DEFAULT precision, i.e. one bf16 pass):
 *   qk^T       32 x (32,16) @ (16,32): q @ k^T, rhs contracted on its last dim (also the
 *              backward's dO @ v^T)
 *   pv         32 x (32,32) @ (32,16): att @ v (also the backward's dS @ k)
 *   p^T dO     32 x (32,32)^T @ (32,16): lhs contracted on its dim 1, i.e. read through
 *              strides (1024,1,32) (the backward's att^T @ dO and dS^T @ q)
 *   sum/max 32 (8,4,32,32) -> (8,4,32) over the last dim (softmax row sum / max)
 *   sum 64     (8,32,64) -> (8,32) over the last dim (layer-norm mean)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "tpu/kernels.h"
#include "torch_reference.h"

#define ROUNDS 20
#define CALLS 100

enum { QKT, PV, PTDO, SUM32, MAX32, SUM64, NROWS };
static const char *const kNames[NROWS] = {"bmm qk^T 32x(32,16)@(16,32)",
                                          "bmm pv 32x(32,32)@(32,16)",
                                          "bmm p^T dO 32x(32,32)^T@(32,16)",
                                          "sum last dim 32 (32768)",
                                          "max last dim 32 (32768)",
                                          "sum last dim 64 (16384)"};

typedef struct mem {
  float *x, *y, *o;
} mem_t;

static tpu_status_t run(int row, void *ctx) {
  static const int64_t d32[3] = {32, 32, 32}, d16[3] = {32, 32, 16};
  static const bool last4[4] = {false, false, false, true}, last3[3] = {false, false, true};
  const mem_t *m = ctx;
  tpu_dot_attrs_t at;
  memset(&at, 0, sizeof at);
  at.num_batch = 1;
  at.num_contract = 1;
  at.precision = TPU_PRECISION_DEFAULT;
  switch (row) {
    case QKT: { /* (32,32,16) x (32,32,16) contracting dim 2 of both -> (32,32,32) */
      tpu_buf_t q = bench_buf(m->x, TPU_F32, 3, d16, NULL);
      tpu_buf_t k = bench_buf(m->y, TPU_F32, 3, d16, NULL);
      tpu_buf_t out = bench_buf(m->o, TPU_F32, 3, d32, NULL);
      at.lhs_contract[0] = 2;
      at.rhs_contract[0] = 2;
      return tpu_kernel_dot_general(&at, &q, &k, &out, NULL);
    }
    case PV:
    case PTDO: { /* (32,32,32) x (32,32,16) contracting lhs dim 2 (or 1) with rhs dim 1 */
      tpu_buf_t p = bench_buf(m->x, TPU_F32, 3, d32, NULL);
      tpu_buf_t v = bench_buf(m->y, TPU_F32, 3, d16, NULL);
      tpu_buf_t out = bench_buf(m->o, TPU_F32, 3, d16, NULL);
      at.lhs_contract[0] = row == PV ? 2 : 1;
      at.rhs_contract[0] = 1;
      return tpu_kernel_dot_general(&at, &p, &v, &out, NULL);
    }
    case SUM32:
    case MAX32: {
      static const int64_t d4[4] = {8, 4, 32, 32}, d3[3] = {8, 4, 32};
      tpu_buf_t in = bench_buf(m->x, TPU_F32, 4, d4, NULL);
      tpu_buf_t out = bench_buf(m->o, TPU_F32, 3, d3, NULL);
      return tpu_kernel_reduce(row == SUM32 ? TPU_REDUCE_SUM : TPU_REDUCE_MAX, &in, last4, &out,
                               NULL);
    }
    default: {
      static const int64_t d3[3] = {8, 32, 64}, d2[2] = {8, 32};
      tpu_buf_t in = bench_buf(m->x, TPU_F32, 3, d3, NULL);
      tpu_buf_t out = bench_buf(m->o, TPU_F32, 2, d2, NULL);
      return tpu_kernel_reduce(TPU_REDUCE_SUM, &in, last3, &out, NULL);
    }
  }
}

static const char *kTorchScript =
    "import torch,time\n"
    "torch.set_num_threads(1)\n"
    "p=torch.randn(32,32,32);v=torch.randn(32,32,16);o16=torch.empty(32,32,16)\n"
    "q=torch.randn(32,32,16);k=torch.randn(32,32,16);o32=torch.empty(32,32,32)\n"
    "x=torch.randn(8,4,32,32);r3=torch.empty(8,4,32);l=torch.randn(8,32,64);r2=torch.empty(8,32)\n"
    "rows=[lambda:torch.bmm(q,k.transpose(1,2),out=o32),lambda:torch.bmm(p,v,out=o16),\n"
    " lambda:torch.bmm(p.transpose(1,2),v,out=o16),lambda:torch.sum(x,3,out=r3),\n"
    " lambda:torch.amax(x,3,out=r3),lambda:torch.sum(l,2,out=r2)]\n"
    BENCH_TORCH_BEST_OF(ROUNDS, CALLS);

int main(int argc, char **argv) {
  mem_t m = {calloc(32768, 4), calloc(32768, 4), calloc(32768, 4)};
  if (!m.x || !m.y || !m.o) return 1;
  srand(1);
  for (int i = 0; i < 32768; i++) {
    m.x[i] = (float)(rand() % 1000) / 100.0f - 5.0f;
    m.y[i] = (float)(rand() % 1000) / 100.0f - 5.0f;
  }
  int only = argc > 1 ? atoi(argv[1]) : -1; /* one row only (for perf) */
  double ours[NROWS], torch[NROWS];
  for (int r = 0; r < NROWS; r++) {
    ours[r] = 0;
    if (only >= 0 && r != only) continue;
    ours[r] = bench_case_us(run, r, &m, kNames[r], only >= 0 ? 50 * ROUNDS : ROUNDS, CALLS);
    if (ours[r] < 0) return 1;
  }
  int have_torch =
      only < 0 && torch_reference_us(kTorchScript, "build/attn_small_torch.py", NROWS, torch);
  const tpu_cpu_features_t *f = tpu_cpu_features();
  printf("attention-sized kernels, one thread, us per call (best of %d x %d); ISA %s%s\n", ROUNDS,
         CALLS, f->avx512f ? "avx512" : f->avx2_fma ? "avx2" : "portable",
         f->avx512_bf16 ? "+bf16" : "");
  printf("%-34s %8s", "op", "ours");
  if (have_torch) printf(" %8s %7s", "torch", "ratio");
  printf("\n");
  for (int r = 0; r < NROWS; r++) {
    printf("%-34s %8.2f", kNames[r], ours[r]);
    if (have_torch) printf(" %8.2f %6.2fx", torch[r], ours[r] / torch[r]);
    printf("\n");
  }
  free(m.x);
  free(m.y);
  free(m.o);
  return 0;
}
