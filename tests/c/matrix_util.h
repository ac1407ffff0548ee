/* matrix_util.h: what the matrix kernel tests share (test_kernels_qr.c, _eigh.c, _svd.c):
 * a repeatable random stream and batches of row- or column-major f32/f64 matrices.
 * Everything is static: each test binary has its own copy (and its own random stream). */
#ifndef TPU_TESTS_MATRIX_UTIL_H
#define TPU_TESTS_MATRIX_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/kernels.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static inline double drand(void) { /* xorshift64, in [-1, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 4503599627370496.0 - 1.0;
}

/* batch x rows x cols, row-major, or column-major per matrix with |colmajor| */
static inline tpu_buf_t matrices(void *data, tpu_dtype_t dt, int64_t batch, int64_t rows,
                                 int64_t cols, bool colmajor) {
  tpu_buf_t b = {.data = data, .dtype = dt, .rank = 3, .dims = {batch, rows, cols},
                 .strides = {rows * cols, colmajor ? 1 : cols, colmajor ? rows : 1}};
  return b;
}

/* Element (r, c) of matrix m of the rank-3 f32 or f64 |b|. */
static inline double at(const tpu_buf_t *b, int64_t m, int64_t r, int64_t c) {
  int64_t i = m * b->strides[0] + r * b->strides[1] + c * b->strides[2];
  return b->dtype == TPU_F64 ? ((const double *)b->data)[i] : ((const float *)b->data)[i];
}

static inline void set(const tpu_buf_t *b, int64_t m, int64_t r, int64_t c, double v) {
  int64_t i = m * b->strides[0] + r * b->strides[1] + c * b->strides[2];
  if (b->dtype == TPU_F64) ((double *)b->data)[i] = v;
  else ((float *)b->data)[i] = (float)v;
}

#endif /* TPU_TESTS_MATRIX_UTIL_H */
