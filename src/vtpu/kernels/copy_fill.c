/* copy_fill.c: tpu_kernel_copy, tpu_kernel_fill, tpu_kernel_iota (include/tpu/kernels.h).
 *
 * copy moves elements of one dtype between any two layouts (x may broadcast); segments
 * contiguous on both sides are memcpy'd, the rest is copied element by element in the
 * order that writes the output forward. fill writes one value (converted once, with the
 * CONVERT semantics of ew_scalar.h). iota writes each element's index along |dim|,
 * converted like an i64 value.
 */
#include <stdio.h>

#include "vtpu/kernels/ew.h"

/* ---- copy ------------------------------------------------------------------------------------ */

typedef struct copy_ctx { size_t size; } copy_ctx;

#define COPY_LOOP(T)                                                    \
  do {                                                                  \
    if (si == 0) {                                                      \
      T v;                                                              \
      memcpy(&v, in, sizeof v);                                         \
      for (int64_t i = 0; i < n; i++) memcpy(out + i * so, &v, sizeof v); \
    } else {                                                            \
      for (int64_t i = 0; i < n; i++) {                                 \
        T v;                                                            \
        memcpy(&v, in + i * si, sizeof v);                              \
        memcpy(out + i * so, &v, sizeof v);                             \
      }                                                                 \
    }                                                                   \
  } while (0)

static void copy_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                      int64_t pos) {
  (void)pos;
  const size_t size = ((const copy_ctx *)arg)->size;
  char *out = ptrs[0];
  const char *in = ptrs[1];
  const int64_t so = strides[0], si = strides[1];
  if (so == (int64_t)size && si == (int64_t)size) {
    if (out != in) memmove(out, in, (size_t)n * size);
    return;
  }
  switch (size) {
    case 1: COPY_LOOP(uint8_t); break;
    case 2: COPY_LOOP(uint16_t); break;
    case 4: COPY_LOOP(uint32_t); break;
    default: COPY_LOOP(uint64_t); break;
  }
}

tpu_status_t tpu_kernel_copy(const tpu_buf_t *x, const tpu_buf_t *out, tpu_pool_t *pool) {
  const tpu_buf_t *ins[1] = {x};
  const char *names[2] = {"out", "x"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, "kernel_copy", out, ins, names, 1, false));
  if (x->dtype != out->dtype) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "kernel_copy: x is %s but out is %s (copy keeps the dtype; CONVERT "
                          "changes it)",
                          tpu_dtype_name(x->dtype), tpu_dtype_name(out->dtype));
  }
  copy_ctx c = {tpu_dtype_size(out->dtype)};
  tpu_ew_iter_run(&it, pool, copy_loop, &c);
  return TPU_OK;
}

/* ---- fill --------------------------------------------------------------------------------------- */

typedef struct fill_ctx {
  size_t size;
  unsigned char bytes[8];
} fill_ctx;

#define FILL_LOOP(T)                                                    \
  do {                                                                  \
    T v;                                                                \
    memcpy(&v, c->bytes, sizeof v);                                     \
    if (so == (int64_t)sizeof v) {                                      \
      T *o = (T *)(void *)out;                                          \
      for (int64_t i = 0; i < n; i++) o[i] = v;                         \
    } else {                                                            \
      for (int64_t i = 0; i < n; i++) memcpy(out + i * so, &v, sizeof v); \
    }                                                                   \
  } while (0)

static void fill_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                      int64_t pos) {
  (void)pos;
  const fill_ctx *c = arg;
  char *out = ptrs[0];
  const int64_t so = strides[0];
  switch (c->size) {
    case 1:
      if (so == 1) {
        memset(out, c->bytes[0], (size_t)n);
      } else {
        for (int64_t i = 0; i < n; i++) out[i * so] = (char)c->bytes[0];
      }
      break;
    case 2: FILL_LOOP(uint16_t); break;
    case 4: FILL_LOOP(uint32_t); break;
    default: FILL_LOOP(uint64_t); break;
  }
}

tpu_status_t tpu_kernel_fill(const tpu_buf_t *out, double value, int64_t ivalue,
                             tpu_pool_t *pool) {
  const char *names[1] = {"out"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, "kernel_fill", out, NULL, names, 0, false));
  fill_ctx c;
  memset(&c, 0, sizeof c);
  c.size = tpu_dtype_size(out->dtype);
  if (tpu_dtype_is_float(out->dtype)) {
    tpu_ew_store_f64(c.bytes, out->dtype, value);
  } else {
    tpu_ew_store_i64(c.bytes, out->dtype, ivalue);
  }
  tpu_ew_iter_run(&it, pool, fill_loop, &c);
  return TPU_OK;
}

/* ---- iota ---------------------------------------------------------------------------------------- */

typedef struct iota_ctx {
  const tpu_vec_ops_t *v;
  tpu_dtype_t dt;
  int64_t inner; /* elements per step of the index along dim (product of later dims) */
  int64_t extent; /* size of dim */
} iota_ctx;

static void iota_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                      int64_t pos) {
  const iota_ctx *c = arg;
  int64_t k = (pos / c->inner) % c->extent, r = pos % c->inner;
  tpu_ew_block_t blk;
  for (int64_t i = 0; i < n; i += TPU_EW_BLOCK) {
    int64_t m = n - i < TPU_EW_BLOCK ? n - i : TPU_EW_BLOCK;
    for (int64_t j = 0; j < m; j++) {
      blk.i[j] = k;
      if (++r == c->inner) {
        r = 0;
        if (++k == c->extent) k = 0;
      }
    }
    tpu_ew_store(c->v, TPU_CT_I64, blk.i, 1, ptrs[0] + i * strides[0], strides[0], c->dt, m);
  }
}

tpu_status_t tpu_kernel_iota(const tpu_buf_t *out, int dim, tpu_pool_t *pool) {
  const char *names[1] = {"out"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, "kernel_iota", out, NULL, names, 0, true));
  if (dim < 0 || dim >= out->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "kernel_iota: dim %d for a rank-%d out",
                          dim, out->rank);
  }
  iota_ctx c = {tpu_vec_ops(), out->dtype, 1, out->dims[dim]};
  for (int d = dim + 1; d < out->rank; d++) c.inner *= out->dims[d]; /* <= numel: no overflow */
  tpu_ew_iter_run(&it, pool, iota_loop, &c);
  return TPU_OK;
}
