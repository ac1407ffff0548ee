/* coll_coll_reduce.c: elementwise reductions for the collectives (dst op= src) and the collectives
 * across the chips of one process (see include/tpu/collective.h).
 *
 * The loops are plain C over restrict pointers so the compiler vectorizes them; they run at
 * memory bandwidth, which is what a collective's reduction is bound by.
 */
#include "tpu/collective.h"

/* The loops below must be vectorized (they run at memory bandwidth only then); -O2 of GCC 12
 * leaves them scalar. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static const char *const kOpNames[TPU_RED_OP_COUNT] = {
    "sum", "avg", "product", "min", "max", "band", "bor", "bxor"};

const char *tpu_coll_op_name(tpu_coll_op_t op) {
  if ((int)op < 0 || op >= TPU_RED_OP_COUNT) return "?";
  return kOpNames[op];
}

tpu_status_t tpu_coll_check(tpu_dtype_t dtype, tpu_coll_op_t op) {
  if (!tpu_dtype_valid(dtype))
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "reduce: invalid dtype %d", (int)dtype);
  if ((int)op < 0 || op >= TPU_RED_OP_COUNT)
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "reduce: invalid op %d", (int)op);
  bool bitwise = op == TPU_RED_BAND || op == TPU_RED_BOR || op == TPU_RED_BXOR;
  if (bitwise && tpu_dtype_is_float(dtype))
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "reduce op %s is not supported for floating point dtype %s",
                          tpu_coll_op_name(op), tpu_dtype_name(dtype));
  return TPU_OK;
}

#define MIN2(a, b) ((b) < (a) ? (b) : (a))
#define MAX2(a, b) ((b) > (a) ? (b) : (a))

/* One typed loop per (type, op); T is the element type. */
#define DEFINE_ARITH(NAME, T)                                                          \
  static __attribute__((unused)) void NAME##_sum(T *restrict d, const T *restrict s, size_t n) {               \
    for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] + s[i]);                            \
  }                                                                                    \
  static __attribute__((unused)) void NAME##_prod(T *restrict d, const T *restrict s, size_t n) {              \
    for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] * s[i]);                            \
  }                                                                                    \
  static __attribute__((unused)) void NAME##_min(T *restrict d, const T *restrict s, size_t n) {               \
    for (size_t i = 0; i < n; i++) d[i] = MIN2(d[i], s[i]);                            \
  }                                                                                    \
  static __attribute__((unused)) void NAME##_max(T *restrict d, const T *restrict s, size_t n) {               \
    for (size_t i = 0; i < n; i++) d[i] = MAX2(d[i], s[i]);                            \
  }
#define DEFINE_BITWISE(NAME, T)                                                        \
  static void NAME##_band(T *restrict d, const T *restrict s, size_t n) {              \
    for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] & s[i]);                            \
  }                                                                                    \
  static void NAME##_bor(T *restrict d, const T *restrict s, size_t n) {               \
    for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] | s[i]);                            \
  }                                                                                    \
  static void NAME##_bxor(T *restrict d, const T *restrict s, size_t n) {              \
    for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] ^ s[i]);                            \
  }

DEFINE_ARITH(f32, float)
DEFINE_ARITH(f64, double)
DEFINE_ARITH(i64, int64_t)
DEFINE_ARITH(i32, int32_t)
DEFINE_ARITH(i16, int16_t)
DEFINE_ARITH(i8, int8_t)
DEFINE_ARITH(u8, uint8_t)
DEFINE_BITWISE(i64, int64_t)
DEFINE_BITWISE(i32, int32_t)
DEFINE_BITWISE(i16, int16_t)
DEFINE_BITWISE(i8, int8_t)
DEFINE_BITWISE(u8, uint8_t)

/* Signed integer sums and products wrap (two's complement), as in PyTorch; computed in the
 * unsigned type so that the wrap is defined behaviour. */
#define DEFINE_WRAP(NAME, T, U)                                                        \
  static void NAME##_wsum(T *restrict d, const T *restrict s, size_t n) {              \
    for (size_t i = 0; i < n; i++) d[i] = (T)(U)((U)d[i] + (U)s[i]);                   \
  }                                                                                    \
  static void NAME##_wprod(T *restrict d, const T *restrict s, size_t n) {             \
    for (size_t i = 0; i < n; i++) d[i] = (T)(U)((U)d[i] * (U)s[i]);                   \
  }
DEFINE_WRAP(i64, int64_t, uint64_t)
DEFINE_WRAP(i32, int32_t, uint32_t)
DEFINE_WRAP(i16, int16_t, uint32_t)
DEFINE_WRAP(i8, int8_t, uint32_t)
DEFINE_WRAP(u8, uint8_t, uint32_t)

static float half_get(tpu_dtype_t dt, uint16_t h) {
  return dt == TPU_BF16 ? tpu_bf16_to_f32(h) : tpu_f16_to_f32(h);
}
static uint16_t half_put(tpu_dtype_t dt, float f) {
  return dt == TPU_BF16 ? tpu_f32_to_bf16(f) : tpu_f32_to_f16(f);
}

static void reduce_half(tpu_dtype_t dt, tpu_coll_op_t op, uint16_t *restrict d,
                        const uint16_t *restrict s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float a = half_get(dt, d[i]), b = half_get(dt, s[i]), r;
    switch (op) {
      case TPU_RED_PRODUCT: r = a * b; break;
      case TPU_RED_MIN: r = (b < a || b != b) ? b : a; break;
      case TPU_RED_MAX: r = (b > a || b != b) ? b : a; break;
      default: r = a + b; break;
    }
    d[i] = half_put(dt, r);
  }
}

/* min/max of floats propagate NaN, as torch.minimum/maximum. */
#define DEFINE_FMINMAX(NAME, T)                                                        \
  static void NAME##_nmin(T *restrict d, const T *restrict s, size_t n) {              \
    for (size_t i = 0; i < n; i++) d[i] = (s[i] < d[i] || s[i] != s[i]) ? s[i] : d[i]; \
  }                                                                                    \
  static void NAME##_nmax(T *restrict d, const T *restrict s, size_t n) {              \
    for (size_t i = 0; i < n; i++) d[i] = (s[i] > d[i] || s[i] != s[i]) ? s[i] : d[i]; \
  }
DEFINE_FMINMAX(f32, float)
DEFINE_FMINMAX(f64, double)

#define DISPATCH_INT(NAME, T)                                                   \
  do {                                                                          \
    T *d = (T *)dst;                                                            \
    const T *s = (const T *)src;                                                \
    switch (op) {                                                               \
      case TPU_RED_SUM: case TPU_RED_AVG: NAME##_wsum(d, s, n); return;         \
      case TPU_RED_PRODUCT: NAME##_wprod(d, s, n); return;                      \
      case TPU_RED_MIN: NAME##_min(d, s, n); return;                            \
      case TPU_RED_MAX: NAME##_max(d, s, n); return;                            \
      case TPU_RED_BAND: NAME##_band(d, s, n); return;                          \
      case TPU_RED_BOR: NAME##_bor(d, s, n); return;                            \
      case TPU_RED_BXOR: NAME##_bxor(d, s, n); return;                          \
      default: return;                                                          \
    }                                                                           \
  } while (0)

#define DISPATCH_FLOAT(NAME, T)                                                 \
  do {                                                                          \
    T *d = (T *)dst;                                                            \
    const T *s = (const T *)src;                                                \
    switch (op) {                                                               \
      case TPU_RED_SUM: case TPU_RED_AVG: NAME##_sum(d, s, n); return;          \
      case TPU_RED_PRODUCT: NAME##_prod(d, s, n); return;                       \
      case TPU_RED_MIN: NAME##_nmin(d, s, n); return;                           \
      case TPU_RED_MAX: NAME##_nmax(d, s, n); return;                           \
      default: return;                                                          \
    }                                                                           \
  } while (0)

void tpu_coll_reduce(tpu_dtype_t dtype, tpu_coll_op_t op, void *dst, const void *src,
                     size_t n) {
  if (n == 0 || tpu_coll_check(dtype, op) != TPU_OK) return;
  switch (dtype) {
    case TPU_F32: DISPATCH_FLOAT(f32, float);
    case TPU_F64: DISPATCH_FLOAT(f64, double);
    case TPU_F16:
    case TPU_BF16: reduce_half(dtype, op, (uint16_t *)dst, (const uint16_t *)src, n); return;
    case TPU_I64: DISPATCH_INT(i64, int64_t);
    case TPU_I32: DISPATCH_INT(i32, int32_t);
    case TPU_I16: DISPATCH_INT(i16, int16_t);
    case TPU_I8: DISPATCH_INT(i8, int8_t);
    case TPU_U8: DISPATCH_INT(u8, uint8_t);
    case TPU_BOOL: {
      /* bool: sum/max/bor = or, product/min/band = and, bxor = xor; results stay 0/1. */
      uint8_t *d = (uint8_t *)dst;
      const uint8_t *s = (const uint8_t *)src;
      if (op == TPU_RED_PRODUCT || op == TPU_RED_MIN || op == TPU_RED_BAND)
        for (size_t i = 0; i < n; i++) d[i] = (uint8_t)(d[i] && s[i]);
      else if (op == TPU_RED_BXOR)
        for (size_t i = 0; i < n; i++) d[i] = (uint8_t)((d[i] != 0) ^ (s[i] != 0));
      else
        for (size_t i = 0; i < n; i++) d[i] = (uint8_t)(d[i] || s[i]);
      return;
    }
    default: return;
  }
}

void tpu_coll_scale(tpu_dtype_t dtype, void *dst, size_t n, int divisor) {
  if (divisor == 0 || divisor == 1) return;
  switch (dtype) {
    case TPU_F32: {
      float *d = (float *)dst, k = (float)divisor;
      for (size_t i = 0; i < n; i++) d[i] /= k;
      return;
    }
    case TPU_F64: {
      double *d = (double *)dst, k = divisor;
      for (size_t i = 0; i < n; i++) d[i] /= k;
      return;
    }
    case TPU_F16:
    case TPU_BF16: {
      uint16_t *d = (uint16_t *)dst;
      for (size_t i = 0; i < n; i++)
        d[i] = half_put(dtype, half_get(dtype, d[i]) / (float)divisor);
      return;
    }
#define SCALE_INT(DT, T)                                      \
    case DT: {                                                \
      T *d = (T *)dst;                                        \
      for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] / divisor); \
      return;                                                 \
    }
    SCALE_INT(TPU_I64, int64_t)
    SCALE_INT(TPU_I32, int32_t)
    SCALE_INT(TPU_I16, int16_t)
    SCALE_INT(TPU_I8, int8_t)
    SCALE_INT(TPU_U8, uint8_t)
#undef SCALE_INT
    default: return; /* bool: avg of 0/1 values is left as the "or" */
  }
}

/* ---- collectives across the chips of one process ---------------------------------------- */

static tpu_status_t check_chips(const void *bufs, int nchips, const char *what) {
  if (!bufs || nchips < 1)
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: need at least one chip buffer", what);
  return TPU_OK;
}

tpu_status_t tpu_local_all_reduce(void *const bufs[], int nchips, size_t count,
                                  tpu_dtype_t dtype, tpu_coll_op_t op) {
  TPU_RETURN_IF_ERROR(check_chips(bufs, nchips, "all_reduce_chips"));
  TPU_RETURN_IF_ERROR(tpu_coll_check(dtype, op));
  size_t es = tpu_dtype_size(dtype);
  /* Blocks of 64 KiB keep the partial result in cache while each chip's block is added. */
  size_t block = (64u << 10) / es;
  for (size_t off = 0; off < count; off += block) {
    size_t n = MIN2(block, count - off);
    char *acc = (char *)bufs[0] + off * es;
    for (int c = 1; c < nchips; c++)
      tpu_coll_reduce(dtype, op, acc, (const char *)bufs[c] + off * es, n);
    if (op == TPU_RED_AVG) tpu_coll_scale(dtype, acc, n, nchips);
    for (int c = 1; c < nchips; c++) memcpy((char *)bufs[c] + off * es, acc, n * es);
  }
  return TPU_OK;
}

tpu_status_t tpu_local_broadcast(void *const bufs[], int nchips, size_t bytes, int root) {
  TPU_RETURN_IF_ERROR(check_chips(bufs, nchips, "broadcast_chips"));
  if (root < 0 || root >= nchips)
    return tpu_status_set(TPU_ERR_OUT_OF_RANGE, "broadcast_chips: root %d not in %d chips",
                          root, nchips);
  for (int c = 0; c < nchips; c++)
    if (c != root && bytes) memcpy(bufs[c], bufs[root], bytes);
  return TPU_OK;
}

tpu_status_t tpu_local_all_gather(const void *const ins[], void *const outs[], int nchips,
                                  size_t bytes_per_chip) {
  TPU_RETURN_IF_ERROR(check_chips(ins, nchips, "all_gather_chips"));
  TPU_RETURN_IF_ERROR(check_chips(outs, nchips, "all_gather_chips"));
  if (bytes_per_chip == 0) return TPU_OK;
  for (int c = 0; c < nchips; c++)
    for (int k = 0; k < nchips; k++)
      memcpy((char *)outs[c] + (size_t)k * bytes_per_chip, ins[k], bytes_per_chip);
  return TPU_OK;
}

tpu_status_t tpu_local_reduce_scatter(const void *const ins[], void *const outs[], int nchips,
                                      size_t count, tpu_dtype_t dtype, tpu_coll_op_t op) {
  TPU_RETURN_IF_ERROR(check_chips(ins, nchips, "reduce_scatter_chips"));
  TPU_RETURN_IF_ERROR(check_chips(outs, nchips, "reduce_scatter_chips"));
  TPU_RETURN_IF_ERROR(tpu_coll_check(dtype, op));
  size_t es = tpu_dtype_size(dtype), bytes = count * es;
  if (bytes == 0) return TPU_OK;
  for (int c = 0; c < nchips; c++) {
    char *out = (char *)outs[c];
    memcpy(out, (const char *)ins[0] + (size_t)c * bytes, bytes);
    for (int k = 1; k < nchips; k++)
      tpu_coll_reduce(dtype, op, out, (const char *)ins[k] + (size_t)c * bytes, count);
    if (op == TPU_RED_AVG) tpu_coll_scale(dtype, out, count, nchips);
  }
  return TPU_OK;
}
