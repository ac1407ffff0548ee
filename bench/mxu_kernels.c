/* mxu_kernels.c: times tpu_kernel_dot_general on square matmuls (the MXU kernels alone,
 * without PyTorch or the runtime) and prints GFLOP/s, counted as 2*n^3 per matmul
 * whatever the number of bf16 passes.
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -O2 -Iinclude -Isrc bench/mxu_kernels.c build/release/libtpu.a \
 *      -pthread -lm -o build/mxu_kernels && build/mxu_kernels [n ...]
 * Compare with PyTorch in the same session, e.g.
 *   .venv/bin/python -c "import torch,time; a=torch.randn(2048,2048); b=torch.randn(2048,2048);
 *     torch.matmul(a,b); t=time.perf_counter(); [torch.matmul(a,b) for _ in range(5)];
 *     print(2*2048**3*5/(time.perf_counter()-t)/1e9, 'GFLOP/s')"
 * (and torch.nn.functional.conv2d(x, w, padding=1) on (32, 64, 32, 32) x (64, 64, 3, 3)).
 * The machine should be otherwise idle: the numbers are best-of-runs wall-clock rates.
 * TORCHTPU_ISA=portable|avx2|avx512 and TORCHTPU_NUM_THREADS apply.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "tpu/kernels.h"

/* An (n, n) row-major matrix. */
static tpu_buf_t square(void *data, tpu_dtype_t dt, int64_t n) {
  const int64_t dims[2] = {n, n};
  return bench_buf(data, dt, 2, dims, NULL);
}

/* Best-of-reps GFLOP/s of one configuration. */
static double bench(int64_t n, tpu_dtype_t in_dt, tpu_dtype_t out_dt, tpu_precision_t prec,
                    const void *a, const void *b, void *c, tpu_pool_t *pool) {
  tpu_dot_attrs_t at;
  memset(&at, 0, sizeof at);
  at.num_contract = 1;
  at.lhs_contract[0] = 1;
  at.rhs_contract[0] = 0;
  at.precision = prec;
  tpu_buf_t lb = square((void *)a, in_dt, n), rb = square((void *)b, in_dt, n);
  tpu_buf_t ob = square(c, out_dt, n);
  double flops = 2.0 * (double)n * (double)n * (double)n;
  int reps = n <= 1024 ? 10 : 4;
  double best = 1e30;
  for (int r = 0; r < reps + 1; r++) {
    double t0 = bench_now_s();
    if (tpu_kernel_dot_general(&at, &lb, &rb, &ob, pool) != TPU_OK) {
      fprintf(stderr, "dot_general failed: %s\n", tpu_status_message());
      return 0.0;
    }
    double t = bench_now_s() - t0;
    if (r > 0 && t < best) best = t; /* the first run warms up */
  }
  return flops / best / 1e9;
}

/* conv2d NCHW / OIHW, 3x3, stride 1, padding 1 (a ResNet-style layer): GFLOP/s. */
static double bench_conv(int64_t n, int64_t c, int64_t o, int64_t hw, tpu_precision_t prec,
                         tpu_pool_t *pool) {
  tpu_conv_attrs_t at;
  memset(&at, 0, sizeof at);
  at.num_spatial = 2;
  for (int i = 0; i < 2; i++) {
    at.stride[i] = at.lhs_dilation[i] = at.rhs_dilation[i] = 1;
    at.pad_lo[i] = at.pad_hi[i] = 1;
    at.in_spatial[i] = at.k_spatial[i] = at.out_spatial[i] = 2 + i;
  }
  at.feature_group_count = at.batch_group_count = 1;
  at.in_batch = 0, at.in_feature = 1, at.k_out_feature = 0, at.k_in_feature = 1;
  at.out_batch = 0, at.out_feature = 1;
  at.precision = prec;
  const int64_t idims[4] = {n, c, hw, hw}, kdims[4] = {o, c, 3, 3}, odims[4] = {n, o, hw, hw};
  const int64_t *dims[3] = {idims, kdims, odims};
  tpu_buf_t in, k, out, *bufs[3] = {&in, &k, &out};
  for (int b = 0; b < 3; b++) {
    int64_t s = dims[b][0] * dims[b][1] * dims[b][2] * dims[b][3];
    *bufs[b] = bench_buf(calloc((size_t)s, 4), TPU_F32, 4, dims[b], NULL);
    if (!bufs[b]->data) return 0.0;
    for (int64_t i = 0; i < s; i++) ((float *)bufs[b]->data)[i] = (float)rand() / RAND_MAX;
  }
  double flops = 2.0 * n * o * hw * hw * c * 9, best = 1e30;
  for (int r = 0; r < 6; r++) {
    double t0 = bench_now_s();
    if (tpu_kernel_convolution(&at, &in, &k, &out, pool) != TPU_OK) return 0.0;
    double t = bench_now_s() - t0;
    if (r > 0 && t < best) best = t;
  }
  free(in.data), free(k.data), free(out.data);
  return flops / best / 1e9;
}

int main(int argc, char **argv) {
  int64_t sizes[8] = {1024, 2048};
  int nsizes = 2;
  if (argc > 1) {
    nsizes = 0;
    for (int i = 1; i < argc && nsizes < 8; i++) sizes[nsizes++] = atoll(argv[i]);
  }
  tpu_pool_t *pool;
  if (tpu_pool_default(&pool) != TPU_OK) return 1;
  const tpu_cpu_features_t *f = tpu_cpu_features();
  printf("threads %d, avx2_fma %d, avx512f %d, avx512_bf16 %d\n", tpu_pool_num_threads(pool),
         f->avx2_fma, f->avx512f, f->avx512_bf16);
  printf("%6s %10s %10s %10s %12s %12s\n", "n", "DEFAULT", "HIGH", "HIGHEST", "bf16->f32",
         "bf16->bf16");
  for (int s = 0; s < nsizes; s++) {
    int64_t n = sizes[s];
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * 4), *b = malloc(nn * 4), *c = malloc(nn * 4);
    uint16_t *ah = malloc(nn * 2), *bh = malloc(nn * 2), *ch = malloc(nn * 2);
    if (!a || !b || !c || !ah || !bh || !ch) return 1;
    srand(1);
    for (size_t i = 0; i < nn; i++) {
      a[i] = (float)rand() / RAND_MAX - 0.5f;
      b[i] = (float)rand() / RAND_MAX - 0.5f;
      ah[i] = tpu_f32_to_bf16(a[i]);
      bh[i] = tpu_f32_to_bf16(b[i]);
    }
    double gd = bench(n, TPU_F32, TPU_F32, TPU_PRECISION_DEFAULT, a, b, c, pool);
    double gh = bench(n, TPU_F32, TPU_F32, TPU_PRECISION_HIGH, a, b, c, pool);
    double gx = bench(n, TPU_F32, TPU_F32, TPU_PRECISION_HIGHEST, a, b, c, pool);
    double gb = bench(n, TPU_BF16, TPU_F32, TPU_PRECISION_DEFAULT, ah, bh, c, pool);
    double gbb = bench(n, TPU_BF16, TPU_BF16, TPU_PRECISION_DEFAULT, ah, bh, ch, pool);
    printf("%6lld %10.1f %10.1f %10.1f %12.1f %12.1f   GFLOP/s\n", (long long)n, gd, gh, gx, gb,
           gbb);
    free(a), free(b), free(c), free(ah), free(bh), free(ch);
  }
  printf(
      "conv2d 3x3 pad 1, (32, 64, 32, 32) x (64, 64, 3, 3): DEFAULT %.1f, HIGHEST %.1f GFLOP/s\n",
      bench_conv(32, 64, 64, 32, TPU_PRECISION_DEFAULT, pool),
      bench_conv(32, 64, 64, 32, TPU_PRECISION_HIGHEST, pool));
  return 0;
}
