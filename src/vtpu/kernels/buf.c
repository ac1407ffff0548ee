/* buf.c: tpu_buf_t constructors and layout queries (include/tpu/kernels.h). */
#include <string.h>

#include "tpu/kernels.h"

tpu_buf_t tpu_buf_dense(void *data, tpu_dtype_t dtype, const tpu_shape_t *shape) {
  tpu_buf_t b;
  memset(&b, 0, sizeof b);
  b.data = data;
  b.dtype = dtype;
  int rank = shape ? shape->rank : 0;
  if (rank < 0 || rank > TPU_MAX_RANK) rank = 0; /* invalid shapes give a scalar view */
  b.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    b.dims[d] = shape->dims[d];
    b.strides[d] = stride;
    /* an overflowing product only happens for shapes no kernel accepts; keep it defined */
    if (shape->dims[d] > 0 && __builtin_mul_overflow(stride, shape->dims[d], &stride)) {
      stride = INT64_MAX;
    }
  }
  return b;
}

/* Dense: row-major contiguous, where dims of size 1 may have any stride (they are never
 * stepped over) and an empty buffer counts as dense. */
bool tpu_buf_is_dense(const tpu_buf_t *b) {
  if (!b || b->rank < 0 || b->rank > TPU_MAX_RANK) return false;
  for (int d = 0; d < b->rank; d++) {
    if (b->dims[d] == 0) return true;
  }
  int64_t expect = 1;
  for (int d = b->rank - 1; d >= 0; d--) {
    if (b->dims[d] == 1) continue;
    if (b->strides[d] != expect) return false;
    if (__builtin_mul_overflow(expect, b->dims[d], &expect)) return false;
  }
  return true;
}
