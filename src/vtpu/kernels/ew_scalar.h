/* ew_scalar.h: what each elementwise op means, one element at a time (internal).
 *
 * The single definition of the elementwise semantics: the reference kernels (ref.c) are
 * loops over these functions, and the fast kernels use them wherever they have no SIMD
 * loop. Values travel in one of three compute types: f32 (for f32, f16, bf16: TPU vector
 * numerics, rounded once to the narrow type on store), f64, and i64 (integers and bool).
 *
 * Semantics where C or StableHLO leave a choice, chosen to match PyTorch on x86:
 *   - integer arithmetic wraps (two's complement); DIV truncates, x/0 = -1 (all ones),
 *     MIN/-1 = MIN; REM has the dividend's sign, x%0 = x, MIN%-1 = 0 (StableHLO).
 *   - integer POW by squaring (wrapping); a negative exponent gives 1 for base 1, +-1 for
 *     base -1, else 0 (XLA; PyTorch gives the same, e.g. 2**-1 = 0).
 *   - SHIFT_LEFT / SHIFT_RIGHT (arithmetic) by a negative or >= width amount give 0 /
 *     the sign fill (PyTorch).
 *   - bool: ADD and MAX are OR, MUL and MIN are AND; AND OR XOR NOT are logical.
 *   - MAX/MIN propagate NaN; -0 orders below +0.
 *   - SIGN as PyTorch: -1, 0 or 1; sign(NaN) = 0, sign(-0) = +0; bool and ui8 0/1.
 *   - CONVERT: float -> integer truncates toward zero; values that do not fit (and NaN)
 *     become what x86 PyTorch gives: INT64_MIN for i64 (then wrapped for ui8), INT32_MIN
 *     for i32 (then wrapped for i16, i8). float -> bool is x != 0 (NaN is true);
 *     bool -> number is 0/1; integer -> integer wraps; f64 and integers reach f16/bf16
 *     through f32 (as PyTorch's casts do), each step rounding to nearest even.
 */
#ifndef TPU_VTPU_KERNELS_EW_SCALAR_H
#define TPU_VTPU_KERNELS_EW_SCALAR_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tpu/dtype.h"
#include "tpu/ir.h"

typedef enum tpu_ct { TPU_CT_F32, TPU_CT_F64, TPU_CT_I64 } tpu_ct_t;

static inline tpu_ct_t tpu_ct_of(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_F32: case TPU_F16: case TPU_BF16: return TPU_CT_F32;
    case TPU_F64: return TPU_CT_F64;
    default: return TPU_CT_I64;
  }
}

static inline size_t tpu_ct_size(tpu_ct_t ct) { return ct == TPU_CT_F32 ? 4 : 8; }

/* ---- which op runs on which dtype ----------------------------------------------------- */

/* UNARY-family ops except CONVERT and BITCAST_CONVERT (checked by the kernels). */
static inline bool tpu_ew_unary_supported(tpu_op_t op, tpu_dtype_t dt) {
  bool is_float = tpu_dtype_is_float(dt), is_bool = dt == TPU_BOOL;
  switch (op) {
    case TPU_OP_EXP: case TPU_OP_EXPM1: case TPU_OP_LOG: case TPU_OP_LOG1P:
    case TPU_OP_SQRT: case TPU_OP_RSQRT: case TPU_OP_TANH: case TPU_OP_LOGISTIC:
    case TPU_OP_SIN: case TPU_OP_COS: case TPU_OP_TAN: case TPU_OP_ERF:
      return is_float;
    case TPU_OP_ABS: case TPU_OP_NEG: case TPU_OP_FLOOR: case TPU_OP_CEIL:
    case TPU_OP_ROUND_EVEN:
      return !is_bool;
    case TPU_OP_SIGN: case TPU_OP_IS_FINITE:
      return true;
    case TPU_OP_NOT:
      return !is_float;
    default:
      return false;
  }
}

static inline bool tpu_ew_binary_supported(tpu_op_t op, tpu_dtype_t dt) {
  bool is_float = tpu_dtype_is_float(dt), is_bool = dt == TPU_BOOL;
  switch (op) {
    case TPU_OP_ADD: case TPU_OP_MUL: case TPU_OP_MAX: case TPU_OP_MIN:
      return true;
    case TPU_OP_SUB: case TPU_OP_DIV: case TPU_OP_REM: case TPU_OP_POW:
      return !is_bool;
    case TPU_OP_AND: case TPU_OP_OR: case TPU_OP_XOR:
      return !is_float;
    case TPU_OP_SHIFT_LEFT: case TPU_OP_SHIFT_RIGHT:
      return !is_float && !is_bool;
    case TPU_OP_ATAN2:
      return is_float;
    default:
      return false;
  }
}

/* ---- floating point ------------------------------------------------------------------------- */

static inline float tpu_ew_bits_and_f32(float a, float b, bool use_or) {
  uint32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  x = use_or ? x | y : x & y;
  memcpy(&a, &x, 4);
  return a;
}

static inline double tpu_ew_bits_and_f64(double a, double b, bool use_or) {
  uint64_t x, y;
  memcpy(&x, &a, 8);
  memcpy(&y, &b, 8);
  x = use_or ? x | y : x & y;
  memcpy(&a, &x, 8);
  return a;
}

/* One definition for f32 (libm's f-suffixed functions) and f64. */
#define TPU_EW_FLOAT_OPS(T, SFX, BITS)                                                    \
  static inline T tpu_ew_unary_##T(tpu_op_t op, T x) {                                     \
    switch (op) {                                                                          \
      case TPU_OP_ABS: return fabs##SFX(x);                                                \
      case TPU_OP_NEG: return -x;                                                          \
      case TPU_OP_EXP: return exp##SFX(x);                                                 \
      case TPU_OP_EXPM1: return expm1##SFX(x);                                             \
      case TPU_OP_LOG: return log##SFX(x);                                                 \
      case TPU_OP_LOG1P: return log1p##SFX(x);                                             \
      case TPU_OP_SQRT: return sqrt##SFX(x);                                               \
      case TPU_OP_RSQRT: return (T)1 / sqrt##SFX(x);                                       \
      case TPU_OP_TANH: return tanh##SFX(x);                                               \
      case TPU_OP_LOGISTIC: {                                                              \
        if (x >= 0) return (T)1 / ((T)1 + exp##SFX(-x));                                   \
        T e = exp##SFX(x);                                                                 \
        return e / ((T)1 + e);                                                             \
      }                                                                                    \
      case TPU_OP_SIN: return sin##SFX(x);                                                 \
      case TPU_OP_COS: return cos##SFX(x);                                                 \
      case TPU_OP_TAN: return tan##SFX(x);                                                 \
      case TPU_OP_ERF: return erf##SFX(x);                                                 \
      case TPU_OP_FLOOR: return floor##SFX(x);                                             \
      case TPU_OP_CEIL: return ceil##SFX(x);                                               \
      case TPU_OP_ROUND_EVEN: return nearbyint##SFX(x);                                    \
      case TPU_OP_SIGN: return (T)((x > 0) - (x < 0));                                     \
      default: return x;                                                                   \
    }                                                                                      \
  }                                                                                        \
  static inline T tpu_ew_binary_##T(tpu_op_t op, T a, T b) {                               \
    switch (op) {                                                                          \
      case TPU_OP_ADD: return a + b;                                                       \
      case TPU_OP_SUB: return a - b;                                                       \
      case TPU_OP_MUL: return a * b;                                                       \
      case TPU_OP_DIV: return a / b;                                                       \
      case TPU_OP_REM: return fmod##SFX(a, b);                                             \
      case TPU_OP_POW: return pow##SFX(a, b);                                              \
      case TPU_OP_ATAN2: return atan2##SFX(a, b);                                          \
      case TPU_OP_MAX:                                                                     \
        if (a != a || b != b) return a + b;                                                \
        if (a == b) return tpu_ew_bits_and_##BITS(a, b, false);                            \
        return a > b ? a : b;                                                              \
      case TPU_OP_MIN:                                                                     \
        if (a != a || b != b) return a + b;                                                \
        if (a == b) return tpu_ew_bits_and_##BITS(a, b, true);                             \
        return a < b ? a : b;                                                              \
      default: return a;                                                                   \
    }                                                                                      \
  }

TPU_EW_FLOAT_OPS(float, f, f32)
TPU_EW_FLOAT_OPS(double, , f64)
#undef TPU_EW_FLOAT_OPS

/* ---- integers and bool (values held in i64) ------------------------------------------------- */

static inline int64_t tpu_ew_wrap_neg(int64_t x) { return (int64_t)(0 - (uint64_t)x); }

static inline int64_t tpu_ew_ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, base = (uint64_t)a, e = (uint64_t)b;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return (int64_t)r;
}

static inline int64_t tpu_ew_unary_i64(tpu_op_t op, tpu_dtype_t dt, int64_t x) {
  switch (op) {
    case TPU_OP_ABS: return x < 0 ? tpu_ew_wrap_neg(x) : x;
    case TPU_OP_NEG: return tpu_ew_wrap_neg(x);
    case TPU_OP_SIGN: return (x > 0) - (x < 0);
    case TPU_OP_NOT: return dt == TPU_BOOL ? !x : ~x;
    default: return x; /* FLOOR, CEIL, ROUND_EVEN: integers are already whole */
  }
}

static inline int64_t tpu_ew_binary_i64(tpu_op_t op, tpu_dtype_t dt, int64_t a, int64_t b) {
  int bits = (int)(8 * tpu_dtype_size(dt));
  switch (op) {
    case TPU_OP_ADD: return dt == TPU_BOOL ? (a | b) : (int64_t)((uint64_t)a + (uint64_t)b);
    case TPU_OP_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    case TPU_OP_MUL: return dt == TPU_BOOL ? (a & b) : (int64_t)((uint64_t)a * (uint64_t)b);
    case TPU_OP_DIV:
      if (b == 0) return -1;
      if (b == -1) return tpu_ew_wrap_neg(a);
      return a / b;
    case TPU_OP_REM:
      if (b == 0) return a;
      if (b == -1) return 0;
      return a % b;
    case TPU_OP_POW: return tpu_ew_ipow(a, b);
    case TPU_OP_MAX: return a > b ? a : b;
    case TPU_OP_MIN: return a < b ? a : b;
    case TPU_OP_AND: return a & b;
    case TPU_OP_OR: return a | b;
    case TPU_OP_XOR: return a ^ b;
    case TPU_OP_SHIFT_LEFT:
      if (b < 0 || b >= bits) return 0;
      return (int64_t)((uint64_t)a << b);
    case TPU_OP_SHIFT_RIGHT:
      if (b < 0 || b >= bits) return a < 0 ? -1 : 0;
      return a < 0 ? ~(int64_t)(~(uint64_t)a >> b) : a >> b;
    default: return a;
  }
}

/* ---- compare --------------------------------------------------------------------------------- */

#define TPU_EW_COMPARE(T)                                                     \
  static inline bool tpu_ew_compare_##T(tpu_compare_dir_t dir, T a, T b) {    \
    switch (dir) {                                                            \
      case TPU_CMP_EQ: return a == b;                                         \
      case TPU_CMP_NE: return a != b;                                         \
      case TPU_CMP_LT: return a < b;                                          \
      case TPU_CMP_LE: return a <= b;                                         \
      case TPU_CMP_GT: return a > b;                                          \
      default: return a >= b;                                                 \
    }                                                                         \
  }
TPU_EW_COMPARE(float)
TPU_EW_COMPARE(double)
TPU_EW_COMPARE(int64_t)
#undef TPU_EW_COMPARE

/* ---- element loads and stores with the CONVERT semantics -------------------------------------- */

static inline float tpu_ew_load_f32(const void *p, tpu_dtype_t dt) {
  uint16_t h;
  switch (dt) {
    case TPU_F16: memcpy(&h, p, 2); return tpu_f16_to_f32(h);
    case TPU_BF16: memcpy(&h, p, 2); return tpu_bf16_to_f32(h);
    default: { float f; memcpy(&f, p, 4); return f; }
  }
}

static inline int64_t tpu_ew_load_i64(const void *p, tpu_dtype_t dt) {
  switch (dt) {
    case TPU_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case TPU_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case TPU_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TPU_I8: return *(const int8_t *)p;
    case TPU_U8: return *(const uint8_t *)p;
    default: return *(const uint8_t *)p != 0; /* bool */
  }
}

/* x86 cvttsd2si: truncation, or INT64_MIN / INT32_MIN when out of range or NaN. */
static inline int64_t tpu_ew_f64_to_i64(double v) {
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return INT64_MIN;
  return (int64_t)v;
}
static inline int32_t tpu_ew_f64_to_i32(double v) {
  if (!(v > -2147483649.0 && v < 2147483648.0)) return INT32_MIN;
  return (int32_t)v;
}

static inline void tpu_ew_store_i64(void *p, tpu_dtype_t dt, int64_t v);

/* A float value (f32 or f64 compute) stored into any dtype. */
static inline void tpu_ew_store_f64(void *p, tpu_dtype_t dt, double v) {
  uint16_t h;
  switch (dt) {
    case TPU_F32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case TPU_F64: memcpy(p, &v, 8); return;
    case TPU_F16: h = tpu_f32_to_f16((float)v); memcpy(p, &h, 2); return;
    case TPU_BF16: h = tpu_f32_to_bf16((float)v); memcpy(p, &h, 2); return;
    case TPU_BOOL: *(uint8_t *)p = v != 0; return;
    case TPU_I64: case TPU_U8: tpu_ew_store_i64(p, dt, tpu_ew_f64_to_i64(v)); return;
    default: tpu_ew_store_i64(p, dt, tpu_ew_f64_to_i32(v)); return;
  }
}

/* An integer value stored into any dtype (narrower integers wrap). */
static inline void tpu_ew_store_i64(void *p, tpu_dtype_t dt, int64_t v) {
  uint64_t u = (uint64_t)v;
  switch (dt) {
    case TPU_I64: memcpy(p, &v, 8); return;
    case TPU_I32: { int32_t x = (int32_t)(uint32_t)u; memcpy(p, &x, 4); return; }
    case TPU_I16: { int16_t x = (int16_t)(uint16_t)u; memcpy(p, &x, 2); return; }
    case TPU_I8: *(int8_t *)p = (int8_t)(uint8_t)u; return;
    case TPU_U8: *(uint8_t *)p = (uint8_t)u; return;
    case TPU_BOOL: *(uint8_t *)p = v != 0; return;
    case TPU_F64: { double d = (double)v; memcpy(p, &d, 8); return; }
    default: tpu_ew_store_f64(p, dt, (double)(float)v); return; /* through f32 */
  }
}

#endif /* TPU_VTPU_KERNELS_EW_SCALAR_H */
