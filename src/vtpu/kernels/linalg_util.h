/* linalg_util.h: what the matrix kernels share (internal; linalg.c: Cholesky, triangular
 * solve, LU; qr.c: Householder QR): the batch walk over [..., rows, cols] matrices, the
 * argument checks, the f64 vector loops every factorization runs on, and the rescaling and
 * NaN fill of the Jacobi kernels (eigh.c, svd.c).
 *
 * Everything is static inline; only the kernel sources in src/vtpu/kernels include it.
 */
#ifndef TPU_VTPU_KERNELS_LINALG_UTIL_H
#define TPU_VTPU_KERNELS_LINALG_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "vtpu/kernels/strided.h"

/* A batch of matrices: per batch index the element offset of each buffer's [.., 0, 0]
 * (b and out may be NULL; LU passes its pivots as b, QR its tau). */
typedef struct matrices {
  tpu_loop_t batch; /* buffers: 0 = a, 1 = b, 2 = out */
  int64_t n, k;     /* a is n x n; b and out n x k as seen by the solve */
  int64_t rows;     /* QR: a and out are rows x n */
  int64_t a_row, a_col, b_row, b_col, o_row, o_col; /* element strides */
} matrices_t;

static inline void batch_of(matrices_t *m, const tpu_buf_t *a, const tpu_buf_t *b,
                            const tpu_buf_t *out) {
  int r = a->rank;
  m->batch.nbufs = 3;
  m->batch.rank = r - 2;
  for (int d = 0; d < r - 2; d++) {
    m->batch.dims[d] = a->dims[d];
    m->batch.strides[0][d] = a->strides[d];
    m->batch.strides[1][d] = b ? b->strides[d] : 0;
    m->batch.strides[2][d] = out ? out->strides[d] : 0;
  }
  tpu_loop_simplify(&m->batch);
}

/* Parallel-for grain: matrices per chunk for about 64K multiply-adds, x * y * z per matrix. */
static inline int64_t grain_for(int64_t x, int64_t y, int64_t z) {
  int64_t per;
  if (__builtin_mul_overflow(x, y, &per) || __builtin_mul_overflow(per, z, &per)) return 1;
  return per >= 65536 ? 1 : 65536 / (per + 1);
}

static inline int64_t batch_count(const tpu_buf_t *a) {
  int64_t n = 1;
  for (int d = 0; d < a->rank - 2; d++) n *= a->dims[d];
  return n;
}

/* |a|: a valid buffer of float matrices (rank >= 2), square if |square|, whose f64
 * workspace of 2 matrices fits a size_t; *count = its elements. */
static inline tpu_status_t check_matrices(const char *k, const tpu_buf_t *a, const char *what,
                                          bool square, int64_t *count) {
  TPU_RETURN_IF_ERROR(tpu_buf_check(a, k, what, count));
  if (!tpu_dtype_is_float(a->dtype)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s is %s, expected a float dtype", k,
                          what, tpu_dtype_name(a->dtype));
  }
  if (a->rank < 2 || (square && a->dims[a->rank - 1] != a->dims[a->rank - 2])) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s must be %smatrices", k, what,
                          square ? "square " : "");
  }
  int64_t rows = a->dims[a->rank - 2], cols = a->dims[a->rank - 1], bytes;
  if (__builtin_mul_overflow(rows, cols, &bytes) || __builtin_mul_overflow(bytes, 16, &bytes) ||
      (uint64_t)bytes > SIZE_MAX) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s matrices of %lld x %lld are too "
                          "large", k, what, (long long)rows, (long long)cols);
  }
  return TPU_OK;
}

static inline tpu_status_t check_same_dims(const char *k, const tpu_buf_t *x,
                                           const tpu_buf_t *o) {
  if (o->rank != x->rank || o->dtype != x->dtype) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out must have the operand's rank and "
                          "dtype", k);
  }
  for (int d = 0; d < x->rank; d++) {
    if (o->dims[d] != x->dims[d]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out dim %d is %lld, expected %lld", k,
                            d, (long long)o->dims[d], (long long)x->dims[d]);
    }
  }
  return TPU_OK;
}

/* x . y over n elements in four independent partial sums (one chain of dependent adds
 * would wait on each add's latency). */
static inline double dot(const double *x, const double *y, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += x[k] * y[k];
    s1 += x[k + 1] * y[k + 1];
    s2 += x[k + 2] * y[k + 2];
    s3 += x[k + 3] * y[k + 3];
  }
  for (; k < n; k++) s0 += x[k] * y[k];
  return (s0 + s1) + (s2 + s3);
}

/* y -= a x over n elements, two doubles per vector (GCC/Clang vector extensions: SSE2 on
 * x86-64, NEON on arm64), so that the trailing updates run at vector width. */
static inline void sub_scaled(double *y, const double *x, double a, int64_t n) {
  typedef double v2d __attribute__((vector_size(16)));
  const v2d av = {a, a};
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    v2d x0, x1, y0, y1;
    memcpy(&x0, x + c, 16);
    memcpy(&x1, x + c + 2, 16);
    memcpy(&y0, y + c, 16);
    memcpy(&y1, y + c + 2, 16);
    y0 -= av * x0;
    y1 -= av * x1;
    memcpy(y + c, &y0, 16);
    memcpy(y + c + 2, &y1, 16);
  }
  for (; c < n; c++) y[c] -= a * x[c];
}

/* Divides the |count| values of |w| by a power of two when their largest magnitude |big| is
 * outside [2^-400, 2^400], so that no square or product of two of them overflows or
 * underflows; returns the factor that undoes it (1 when nothing was divided). */
static inline double rescale_pow2(double *w, int64_t count, double big) {
  if (!(big > 0x1p400 || (big > 0 && big < 0x1p-400))) return 1;
  int e;
  frexp(big, &e);
  const double scale = ldexp(1.0, e);
  for (int64_t i = 0; i < count; i++) w[i] /= scale;
  return scale;
}

/* Sets every element of the rows x cols matrix of |out| at element offset |off| (element
 * strides rs, cs) to |v|: a matrix with no result (NaN for a NaN input). */
static inline void fill_matrix(const tpu_buf_t *out, int64_t off, int64_t rows, int64_t cols,
                               int64_t rs, int64_t cs, double v) {
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      tpu_store_f64(out->data, out->dtype, off + r * rs + c * cs, v);
    }
  }
}

#endif /* TPU_VTPU_KERNELS_LINALG_UTIL_H */
