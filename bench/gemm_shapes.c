/* gemm_shapes.c: times the matmuls of the GPT example's training step (d_model 64, 4 heads,
 * batch 8 x 32 tokens: the projections, the MLP, the attention batches and their
 * backward products, each in the layout autograd hands over) through
 * tpu_kernel_dot_general at DEFAULT precision (bf16 passes), one thread and with a second
 * thread helping (as a thread waiting in synchronize does), and, when .venv/bin/python has
 * torch, PyTorch CPU's f32 torch.bmm with out= on the same shapes and layouts (one thread).
 * Prints us per call (best of ROUNDS rounds of CALLS calls), the two-thread speed-up, the
 * ratio ours / PyTorch (below 1: we are faster) and the totals. On an AVX2 host these run
 * the direct path (gemm_direct_avx2.c); on AVX512-BF16 the blocked path or, for the
 * attention batches, the small-matrix path.
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/gemm_shapes.c \
 *      build/release/libtpu.a -pthread -lm -o build/gemm_shapes && build/gemm_shapes
 * TORCHTPU_ISA=portable|avx2|avx512 picks the SIMD code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "../tests/c/pool_helper.h" /* a thread lent to a pool, as in synchronize */
#include "tpu/kernels.h"
#include "torch_reference.h"

#define ROUNDS 20
#define CALLS 20

/* C[b] (M, N) = A[b] (M, K) x B[b] (K, N); a_t: A stored (K, M), b_t: B stored (N, K). */
typedef struct shape {
  int64_t b, m, n, k;
  int a_t, b_t;
} shape_t;

static const shape_t kShapes[] = {
    {1, 256, 192, 64, 0, 1},  {1, 256, 64, 64, 0, 1},   {1, 256, 256, 64, 0, 1},
    {1, 256, 64, 256, 0, 1},  {32, 32, 32, 16, 0, 1},   {32, 32, 16, 32, 0, 0},
    {1, 256, 64, 64, 0, 0},   {1, 64, 64, 256, 1, 0},   {1, 256, 64, 256, 0, 0},
    {1, 64, 256, 256, 1, 0},  {1, 256, 256, 64, 0, 0},  {1, 192, 64, 256, 1, 0},
    {1, 256, 64, 192, 0, 0},  {32, 32, 16, 32, 1, 0},   {32, 16, 32, 32, 1, 0},
    {32, 32, 32, 16, 0, 0},   {32, 32, 16, 32, 0, 1},   {1, 256, 64, 256, 1, 0},
};
#define NSHAPES ((int)(sizeof kShapes / sizeof kShapes[0]))

typedef struct mem {
  float *a, *b, *c;
  tpu_pool_t *pool; /* NULL: one thread; else the pool a second thread helps */
} mem_t;

static tpu_status_t run(int row, void *ctx) {
  const mem_t *m = ctx;
  const shape_t *s = &kShapes[row];
  tpu_dot_attrs_t at;
  memset(&at, 0, sizeof at);
  at.num_batch = 1;
  at.num_contract = 1;
  at.lhs_contract[0] = 2;
  at.rhs_contract[0] = 1;
  at.precision = TPU_PRECISION_DEFAULT;
  const int64_t ad[3] = {s->b, s->m, s->k}, as[3] = {s->m * s->k, s->a_t ? 1 : s->k, s->a_t ? s->m : 1};
  const int64_t bd[3] = {s->b, s->k, s->n}, bs[3] = {s->k * s->n, s->b_t ? 1 : s->n, s->b_t ? s->k : 1};
  const int64_t cd[3] = {s->b, s->m, s->n};
  tpu_buf_t a = bench_buf(m->a, TPU_F32, 3, ad, as), b = bench_buf(m->b, TPU_F32, 3, bd, bs);
  tpu_buf_t c = bench_buf(m->c, TPU_F32, 3, cd, NULL);
  return tpu_kernel_dot_general(&at, &a, &b, &c, m->pool);
}

/* PyTorch's rows, built from kShapes: torch.bmm(A, B, out=C) with the same layouts. */
static int torch_script(char *buf, size_t cap) {
  size_t used = (size_t)snprintf(buf, cap,
                                 "import torch,time\ntorch.set_num_threads(1)\n"
                                 "def mk(b,m,n,k,at,bt):\n"
                                 "  A=torch.randn(b,k,m).transpose(1,2) if at else torch.randn(b,m,k)\n"
                                 "  B=torch.randn(b,n,k).transpose(1,2) if bt else torch.randn(b,k,n)\n"
                                 "  C=torch.empty(b,m,n)\n"
                                 "  return lambda:torch.bmm(A,B,out=C)\n"
                                 "rows=[");
  for (int r = 0; r < NSHAPES && used < cap; r++) {
    const shape_t *s = &kShapes[r];
    used += (size_t)snprintf(buf + used, cap - used, "mk(%lld,%lld,%lld,%lld,%d,%d),",
                             (long long)s->b, (long long)s->m, (long long)s->n, (long long)s->k,
                             s->a_t, s->b_t);
  }
  if (used < cap) used += (size_t)snprintf(buf + used, cap - used, "]\n%s", BENCH_TORCH_BEST_OF(ROUNDS, CALLS));
  return used < cap;
}

int main(void) {
  mem_t m = {malloc((size_t)1 << 20), malloc((size_t)1 << 20), malloc((size_t)1 << 20), NULL};
  if (!m.a || !m.b || !m.c) return 1;
  srand(1);
  for (int i = 0; i < (1 << 18); i++) {
    m.a[i] = (float)rand() / RAND_MAX - 0.5f;
    m.b[i] = (float)rand() / RAND_MAX - 0.5f;
  }
  double ours[NSHAPES], helped[NSHAPES], torch[NSHAPES];
  for (int r = 0; r < NSHAPES; r++) {
    ours[r] = bench_case_us(run, r, &m, "dot_general", ROUNDS, CALLS);
    if (ours[r] < 0) return 1;
  }
  pool_helper helper;
  if (tpu_pool_create(1, tpu_allocator_system(), &m.pool) != TPU_OK ||
      pool_helper_start(&helper, m.pool) != 0) {
    return 1;
  }
  for (int r = 0; r < NSHAPES; r++) {
    helped[r] = bench_case_us(run, r, &m, "dot_general", ROUNDS, CALLS);
    if (helped[r] < 0) return 1;
  }
  pool_helper_stop(&helper);
  tpu_pool_destroy(m.pool);
  static char script[4096];
  int have_torch = torch_script(script, sizeof script) &&
                   torch_reference_us(script, "build/gemm_shapes_torch.py", NSHAPES, torch);
  const tpu_cpu_features_t *f = tpu_cpu_features();
  printf("GPT-step matmuls, one thread, us per call (best of %d x %d); ISA %s\n", ROUNDS, CALLS,
         f->avx512_bf16 ? "avx512-bf16" : f->avx512f ? "avx512" : f->avx2_fma ? "avx2" : "portable");
  printf("%-30s %8s %9s %8s %7s", "batch x M x N x K (A^T, B^T)", "ours", "GMAC/s", "helped",
         "1t/2t");
  if (have_torch) printf(" %8s %7s", "torch", "ratio");
  printf("\n");
  double sum_ours = 0, sum_helped = 0, sum_torch = 0;
  for (int r = 0; r < NSHAPES; r++) {
    const shape_t *s = &kShapes[r];
    char name[64];
    snprintf(name, sizeof name, "%lld x %lld x %lld x %lld%s%s", (long long)s->b, (long long)s->m,
             (long long)s->n, (long long)s->k, s->a_t ? " A^T" : "", s->b_t ? " B^T" : "");
    double macs = (double)s->b * (double)s->m * (double)s->n * (double)s->k;
    printf("%-30s %8.2f %9.1f %8.2f %6.2fx", name, ours[r], macs / ours[r] / 1e3, helped[r],
           ours[r] / helped[r]);
    if (have_torch) printf(" %8.2f %6.2fx", torch[r], ours[r] / torch[r]);
    printf("\n");
    sum_ours += ours[r];
    sum_helped += helped[r];
    sum_torch += have_torch ? torch[r] : 0;
  }
  printf("%-30s %8.1f %9s %8.1f %6.2fx", "total", sum_ours, "", sum_helped, sum_ours / sum_helped);
  if (have_torch) printf(" %18.1f %6.2fx", sum_torch, sum_ours / sum_torch);
  printf("\n");
  if (!have_torch) printf("(PyTorch not found at .venv/bin/python: no comparison)\n");
  free(m.a), free(m.b), free(m.c);
  return 0;
}
