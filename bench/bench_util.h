/* bench_util.h: the helpers the C kernel benchmarks share: a monotonic clock, a tpu_buf_t
 * view builder, the best-of-rounds timer for a numbered case, and the same timer written
 * in Python for the PyTorch column (torch_reference.h). Header-only: each benchmark is one
 * translation unit built by the command in its header. */
#ifndef TPU_BENCH_BENCH_UTIL_H
#define TPU_BENCH_BENCH_UTIL_H

#include <stdio.h>
#include <time.h>

#include "tpu/kernels.h"

/* Seconds on the monotonic clock. */
static inline double bench_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A view of |data| with |rank| dims and |strides| (elements); NULL strides: row-major. */
static inline tpu_buf_t bench_buf(void *data, tpu_dtype_t dt, int rank, const int64_t *dims,
                                  const int64_t *strides) {
  tpu_shape_t shape = {.rank = rank};
  for (int d = 0; d < rank; d++) shape.dims[d] = dims[d];
  tpu_buf_t b = tpu_buf_dense(data, dt, &shape);
  for (int d = 0; strides && d < rank; d++) b.strides[d] = strides[d];
  return b;
}

/* One call of case |index| of a benchmark; |ctx| holds its buffers. */
typedef tpu_status_t (*bench_case_fn)(int index, void *ctx);

/* us per call of fn(index, ctx): after one untimed call (the warm-up), the best of |rounds|
 * rounds of |calls| calls each. On an error prints "name: message" to stderr and returns
 * -1. */
static inline double bench_case_us(bench_case_fn fn, int index, void *ctx, const char *name,
                                   int rounds, int calls) {
  double best = 1e30;
  for (int round = 0; round <= rounds; round++) { /* round 0: one call, the warm-up */
    int n = round ? calls : 1;
    double t = bench_now_s();
    for (int c = 0; c < n; c++) {
      if (fn(index, ctx) != TPU_OK) {
        fprintf(stderr, "%s: %s\n", name, tpu_status_message());
        return -1;
      }
    }
    t = (bench_now_s() - t) / n;
    if (round && t < best) best = t;
  }
  return best * 1e6;
}

/* The end of a torch_reference_us script: bench_case_us in Python (one warm-up call, the best
 * of |rounds| rounds of |calls| calls) over the callables in the list `rows`, printing us per
 * call, one line per row. */
#define BENCH_TORCH_BEST_OF(rounds, calls) BENCH_TORCH_BEST_OF_(rounds, calls)
#define BENCH_TORCH_BEST_OF_(rounds, calls)                  \
  "for f in rows:\n"                                         \
  "  f();best=1e9\n"                                         \
  "  for _ in range(" #rounds "):\n"                         \
  "    t=time.perf_counter()\n"                              \
  "    for _ in range(" #calls "): f()\n"                    \
  "    best=min(best,(time.perf_counter()-t)/" #calls ")\n" \
  "  print(best*1e6)\n"

#endif /* TPU_BENCH_BENCH_UTIL_H */
