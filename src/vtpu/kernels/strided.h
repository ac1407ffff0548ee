/* strided.h: helpers the vTPU kernels share for walking strided buffers (internal).
 *
 * - tpu_buf_check: validates a tpu_buf_t argument (dtype, rank, dims, element count) with
 *   an error naming the kernel and the argument.
 * - element loads and stores that convert any dtype to and from f64 or i64, one element at
 *   a time (for reference kernels and the generic paths; fast paths use typed pointers).
 * - tpu_loop_t: an iteration space of up to TPU_MAX_RANK dims with the element strides of
 *   up to TPU_LOOP_MAX_BUFS buffers over it. tpu_loop_simplify drops size-1 dims and merges
 *   neighbours that are contiguous in every buffer (row-major order is kept), so kernels
 *   iterate few, long dims; tpu_loop_seek / tpu_loop_step walk it with per-buffer offsets.
 *
 * Everything is static inline; only the kernel sources in src/vtpu/kernels include it.
 */
#ifndef TPU_VTPU_KERNELS_STRIDED_H
#define TPU_VTPU_KERNELS_STRIDED_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tpu/dtype.h"
#include "tpu/kernels.h"
#include "tpu/status.h"

/* ---- argument checks ------------------------------------------------------------------ */

/* Checks |b| (non-NULL, valid dtype, rank 0..TPU_MAX_RANK, dims >= 0, element count fits
 * int64, data non-NULL when non-empty) and stores its element count in *out_numel. */
static inline tpu_status_t tpu_buf_check(const tpu_buf_t *b, const char *kernel,
                                         const char *what, int64_t *out_numel) {
  *out_numel = 0;
  if (!b) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s is NULL", kernel, what);
  if (!tpu_dtype_valid(b->dtype)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s has invalid dtype %d", kernel,
                          what, (int)b->dtype);
  }
  if (b->rank < 0 || b->rank > TPU_MAX_RANK) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s has rank %d (0..%d)", kernel, what,
                          b->rank, TPU_MAX_RANK);
  }
  int64_t n = 1;
  for (int d = 0; d < b->rank; d++) {
    if (b->dims[d] < 0) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s dim %d is negative (%lld)",
                            kernel, what, d, (long long)b->dims[d]);
    }
    if (__builtin_mul_overflow(n, b->dims[d], &n)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s element count overflows",
                            kernel, what);
    }
  }
  if (n > 0 && !b->data) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s data is NULL", kernel, what);
  }
  *out_numel = n;
  return TPU_OK;
}

/* Element offset of |idx| (rank entries) under |strides|. */
static inline int64_t tpu_offset_of(int rank, const int64_t *idx, const int64_t *strides) {
  int64_t off = 0;
  for (int d = 0; d < rank; d++) off += idx[d] * strides[d];
  return off;
}

/* ---- element loads and stores ------------------------------------------------------------ */

/* Element |i| (in elements from |base|) as f64. */
static inline double tpu_load_f64(const void *base, tpu_dtype_t dt, int64_t i) {
  switch (dt) {
    case TPU_F32: return ((const float *)base)[i];
    case TPU_F64: return ((const double *)base)[i];
    case TPU_F16: return tpu_f16_to_f32(((const uint16_t *)base)[i]);
    case TPU_BF16: return tpu_bf16_to_f32(((const uint16_t *)base)[i]);
    case TPU_I64: return (double)((const int64_t *)base)[i];
    case TPU_I32: return ((const int32_t *)base)[i];
    case TPU_I16: return ((const int16_t *)base)[i];
    case TPU_I8: return ((const int8_t *)base)[i];
    case TPU_U8: return ((const uint8_t *)base)[i];
    case TPU_BOOL: return ((const uint8_t *)base)[i] != 0;
    default: return 0;
  }
}

/* f64 -> i64 without undefined behaviour: truncates, saturates, NaN -> 0. */
static inline int64_t tpu_f64_to_i64_sat(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

/* Element |i| as i64 (floats truncate and saturate). */
static inline int64_t tpu_load_i64(const void *base, tpu_dtype_t dt, int64_t i) {
  switch (dt) {
    case TPU_I64: return ((const int64_t *)base)[i];
    case TPU_I32: return ((const int32_t *)base)[i];
    case TPU_I16: return ((const int16_t *)base)[i];
    case TPU_I8: return ((const int8_t *)base)[i];
    case TPU_U8: return ((const uint8_t *)base)[i];
    case TPU_BOOL: return ((const uint8_t *)base)[i] != 0;
    default: return tpu_f64_to_i64_sat(tpu_load_f64(base, dt, i));
  }
}

/* Whether element |i| is non-zero (NaN counts as true, as in PyTorch's any/all). */
static inline bool tpu_load_truth(const void *base, tpu_dtype_t dt, int64_t i) {
  if (tpu_dtype_is_float(dt)) return tpu_load_f64(base, dt, i) != 0.0;
  return tpu_load_i64(base, dt, i) != 0;
}

/* Stores |v| as element |i|: floats round (bf16/f16 to nearest even via f32), integers
 * truncate and wrap into the dtype, bool is v != 0. */
static inline void tpu_store_f64(void *base, tpu_dtype_t dt, int64_t i, double v) {
  switch (dt) {
    case TPU_F32: ((float *)base)[i] = (float)v; return;
    case TPU_F64: ((double *)base)[i] = v; return;
    case TPU_F16: ((uint16_t *)base)[i] = tpu_f32_to_f16((float)v); return;
    case TPU_BF16: ((uint16_t *)base)[i] = tpu_f32_to_bf16((float)v); return;
    case TPU_BOOL: ((uint8_t *)base)[i] = v != 0.0; return;
    default: break;
  }
  uint64_t u = (uint64_t)tpu_f64_to_i64_sat(v);
  switch (dt) {
    case TPU_I64: ((int64_t *)base)[i] = (int64_t)u; return;
    case TPU_I32: ((int32_t *)base)[i] = (int32_t)(uint32_t)u; return;
    case TPU_I16: ((int16_t *)base)[i] = (int16_t)(uint16_t)u; return;
    case TPU_I8: ((int8_t *)base)[i] = (int8_t)(uint8_t)u; return;
    case TPU_U8: ((uint8_t *)base)[i] = (uint8_t)u; return;
    default: return;
  }
}

/* Stores the integer |v| as element |i| (wrapping into narrower integer dtypes). */
static inline void tpu_store_i64(void *base, tpu_dtype_t dt, int64_t i, int64_t v) {
  uint64_t u = (uint64_t)v;
  switch (dt) {
    case TPU_I64: ((int64_t *)base)[i] = v; return;
    case TPU_I32: ((int32_t *)base)[i] = (int32_t)(uint32_t)u; return;
    case TPU_I16: ((int16_t *)base)[i] = (int16_t)(uint16_t)u; return;
    case TPU_I8: ((int8_t *)base)[i] = (int8_t)(uint8_t)u; return;
    case TPU_U8: ((uint8_t *)base)[i] = (uint8_t)u; return;
    case TPU_BOOL: ((uint8_t *)base)[i] = v != 0; return;
    default: tpu_store_f64(base, dt, i, (double)v); return;
  }
}

/* Copies one element of |size| bytes (1, 2, 4 or 8) from src[si] to dst[di]. */
static inline void tpu_copy_elem(void *dst, int64_t di, const void *src, int64_t si,
                                 size_t size) {
  switch (size) {
    case 1: ((uint8_t *)dst)[di] = ((const uint8_t *)src)[si]; return;
    case 2: ((uint16_t *)dst)[di] = ((const uint16_t *)src)[si]; return;
    case 4: ((uint32_t *)dst)[di] = ((const uint32_t *)src)[si]; return;
    default: ((uint64_t *)dst)[di] = ((const uint64_t *)src)[si]; return;
  }
}

/* ---- loop nests ---------------------------------------------------------------------------- */

#define TPU_LOOP_MAX_BUFS 4

typedef struct tpu_loop {
  int rank;                                          /* dims, outermost first */
  int nbufs;
  int64_t dims[TPU_MAX_RANK];
  int64_t strides[TPU_LOOP_MAX_BUFS][TPU_MAX_RANK];  /* elements, per buffer */
} tpu_loop_t;

static inline int64_t tpu_loop_numel(const tpu_loop_t *l) {
  int64_t n = 1;
  for (int d = 0; d < l->rank; d++) n *= l->dims[d];
  return n;
}

/* Drops size-1 dims and merges dim d into d+1 where every buffer has
 * strides[d] == strides[d+1] * dims[d+1]. Row-major visiting order is unchanged. */
static inline void tpu_loop_simplify(tpu_loop_t *l) {
  int r = 0;
  for (int d = 0; d < l->rank; d++) {
    if (l->dims[d] == 1) continue;
    bool merge = r > 0;
    for (int b = 0; merge && b < l->nbufs; b++) {
      merge = l->strides[b][r - 1] == l->strides[b][d] * l->dims[d];
    }
    if (merge) {
      l->dims[r - 1] *= l->dims[d];
      for (int b = 0; b < l->nbufs; b++) l->strides[b][r - 1] = l->strides[b][d];
    } else {
      l->dims[r] = l->dims[d];
      for (int b = 0; b < l->nbufs; b++) l->strides[b][r] = l->strides[b][d];
      r++;
    }
  }
  l->rank = r;
}

/* A position in a loop nest: the index per dim and the offset per buffer. */
typedef struct tpu_loop_pos {
  int64_t idx[TPU_MAX_RANK];
  int64_t off[TPU_LOOP_MAX_BUFS];
} tpu_loop_pos_t;

/* Sets |p| to the row-major linear position |linear| over the first |rank| dims. */
static inline void tpu_loop_seek(const tpu_loop_t *l, int rank, int64_t linear,
                                 tpu_loop_pos_t *p) {
  for (int b = 0; b < l->nbufs; b++) p->off[b] = 0;
  for (int d = rank - 1; d >= 0; d--) {
    int64_t n = l->dims[d];
    p->idx[d] = n ? linear % n : 0;
    linear = n ? linear / n : 0;
    for (int b = 0; b < l->nbufs; b++) p->off[b] += p->idx[d] * l->strides[b][d];
  }
}

/* Advances |p| by one step over the first |rank| dims (row-major). */
static inline void tpu_loop_step(const tpu_loop_t *l, int rank, tpu_loop_pos_t *p) {
  for (int d = rank - 1; d >= 0; d--) {
    if (++p->idx[d] < l->dims[d]) {
      for (int b = 0; b < l->nbufs; b++) p->off[b] += l->strides[b][d];
      return;
    }
    p->idx[d] = 0;
    for (int b = 0; b < l->nbufs; b++) p->off[b] -= (l->dims[d] - 1) * l->strides[b][d];
  }
}

/* Fills a loop over |b|'s dims with |b| as buffer |which|. */
static inline void tpu_loop_set_buf(tpu_loop_t *l, int which, const tpu_buf_t *b) {
  for (int d = 0; d < b->rank; d++) l->strides[which][d] = b->strides[d];
}

#endif /* TPU_VTPU_KERNELS_STRIDED_H */
