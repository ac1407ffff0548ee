/* dtype.c: element type sizes and names, and the f16 conversions (bf16 is inline in dtype.h). */
#include "tpu/dtype.h"

static const struct {
  size_t size;
  const char *name;
} kDtypes[TPU_DTYPE_COUNT] = {
    [TPU_F32] = {4, "f32"}, [TPU_F64] = {8, "f64"},  [TPU_F16] = {2, "f16"},
    [TPU_BF16] = {2, "bf16"}, [TPU_I64] = {8, "i64"}, [TPU_I32] = {4, "i32"},
    [TPU_I16] = {2, "i16"}, [TPU_I8] = {1, "i8"},     [TPU_U8] = {1, "ui8"},
    [TPU_BOOL] = {1, "i1"},
};

bool tpu_dtype_valid(tpu_dtype_t dtype) { return (unsigned)dtype < TPU_DTYPE_COUNT; }

size_t tpu_dtype_size(tpu_dtype_t dtype) {
  return tpu_dtype_valid(dtype) ? kDtypes[dtype].size : 0;
}

const char *tpu_dtype_name(tpu_dtype_t dtype) {
  return tpu_dtype_valid(dtype) ? kDtypes[dtype].name : "invalid";
}

bool tpu_dtype_is_float(tpu_dtype_t dtype) {
  return dtype == TPU_F32 || dtype == TPU_F64 || dtype == TPU_F16 || dtype == TPU_BF16;
}

bool tpu_dtype_is_integer(tpu_dtype_t dtype) {
  return dtype == TPU_I64 || dtype == TPU_I32 || dtype == TPU_I16 || dtype == TPU_I8 ||
         dtype == TPU_U8;
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
uint16_t tpu_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu >= 0x7f800000u) {                        /* inf or NaN */
    return (uint16_t)(sign | 0x7c00u | (absu > 0x7f800000u ? 0x200u : 0));
  }
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
  if (absu < 0x38800000u) {                          /* below 2^-14: f16 subnormal or 0 */
    if (absu < 0x33000000u) return (uint16_t)sign;   /* below 2^-25: rounds to 0 */
    uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(absu >> 23);             /* 14..24 */
    uint32_t half = 1u << (shift - 1);
    uint32_t rest = mant & ((1u << shift) - 1);
    uint32_t r = mant >> shift;
    if (rest > half || (rest == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = absu - 0x38000000u;                   /* rebias 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);                    /* round to nearest even */
  return (uint16_t)(sign | (r >> 13));
}

float tpu_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {                                         /* subnormal: normalize */
      int e = -1;
      do {
        mant <<= 1;
        e++;
      } while (!(mant & 0x400u));
      u = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}
