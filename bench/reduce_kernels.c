/* reduce_kernels.c: times tpu_kernel_reduce (the reduction kernels alone, without PyTorch or
 * the runtime) on 64 MiB tensors and prints GB/s of input read (best of the repetitions).
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -O2 -Iinclude -Isrc bench/reduce_kernels.c build/release/libtpu.a \
 *      -pthread -lm -o build/reduce_kernels && build/reduce_kernels
 * Compare with PyTorch in the same session (same sizes, best of 20):
 *   .venv/bin/python -c "import torch,time
 *   x=torch.rand(16*2**20); m=x.view(4096,4096); b=x.bfloat16()
 *   for name,f,nb in [('sum all f32',lambda:x.sum(),x.nbytes),('sum rows f32',lambda:m.sum(1),x.nbytes),
 *     ('sum cols f32',lambda:m.sum(0),x.nbytes),('amax all f32',lambda:x.amax(),x.nbytes),
 *     ('sum all bf16',lambda:b.sum(),b.nbytes)]:
 *     f(); ts=[]
 *     for _ in range(20): t=time.perf_counter(); f(); ts.append(time.perf_counter()-t)
 *     print(f'{name:14s} {nb/min(ts)/1e9:6.1f} GB/s')"
 * TORCHTPU_ISA=portable|avx2|avx512 and TORCHTPU_NUM_THREADS apply.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "tpu/kernels.h"

#define N (16 * 1024 * 1024) /* 64 MiB of f32 */
#define REPS 20

/* Best-of-REPS GB/s of one reduction (bytes = input size). */
static double bench(const char *name, tpu_reduce_kind_t kind, const tpu_buf_t *x,
                    const bool *dims, const tpu_buf_t *out, tpu_pool_t *pool) {
  double best = 1e30;
  size_t bytes = (size_t)N * tpu_dtype_size(x->dtype);
  for (int r = 0; r <= REPS; r++) {
    double t = bench_now_s();
    if (tpu_kernel_reduce(kind, x, dims, out, pool) != TPU_OK) {
      fprintf(stderr, "%s: %s\n", name, tpu_status_message());
      return 0;
    }
    t = bench_now_s() - t;
    if (r > 0 && t < best) best = t; /* the first run warms up */
  }
  double gbs = (double)bytes / best / 1e9;
  printf("%-14s %6.1f GB/s  (%.2f ms)\n", name, gbs, best * 1e3);
  return gbs;
}

int main(void) {
  tpu_pool_t *pool;
  if (tpu_pool_default(&pool) != TPU_OK) {
    fprintf(stderr, "pool: %s\n", tpu_status_message());
    return 1;
  }
  float *x = malloc(sizeof(float) * N);
  uint16_t *xb = malloc(sizeof(uint16_t) * N);
  float *out = malloc(sizeof(float) * 4096);
  if (!x || !xb || !out) return 1;
  for (int64_t i = 0; i < N; i++) {
    x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    xb[i] = tpu_f32_to_bf16(x[i]);
  }
  printf("threads %d, isa %s%s\n", tpu_pool_num_threads(pool),
         tpu_cpu_features()->avx512f ? "avx512" : tpu_cpu_features()->avx2_fma ? "avx2" : "",
         tpu_cpu_features()->avx2_fma ? "" : "portable");
  int64_t n = N, mat[2] = {4096, 4096}, rows = 4096;
  tpu_buf_t flat = bench_buf(x, TPU_F32, 1, &n, NULL), m = bench_buf(x, TPU_F32, 2, mat, NULL);
  tpu_buf_t flatb = bench_buf(xb, TPU_BF16, 1, &n, NULL);
  tpu_buf_t scalar = bench_buf(out, TPU_F32, 0, NULL, NULL);
  tpu_buf_t vec = bench_buf(out, TPU_F32, 1, &rows, NULL);
  bool all[1] = {true}, last[2] = {false, true}, first[2] = {true, false};
  bench("sum all f32", TPU_REDUCE_SUM, &flat, all, &scalar, pool);
  bench("sum rows f32", TPU_REDUCE_SUM, &m, last, &vec, pool);
  bench("sum cols f32", TPU_REDUCE_SUM, &m, first, &vec, pool);
  bench("amax all f32", TPU_REDUCE_MAX, &flat, all, &scalar, pool);
  bench("sum all bf16", TPU_REDUCE_SUM, &flatb, all, &scalar, pool);
  free(x);
  free(xb);
  free(out);
  return 0;
}
