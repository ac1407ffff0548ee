/* dtype.h: element types of the virtual TPU, their sizes and names, and the bf16/f16
 * conversions (round to nearest even, as the TPU converts f32 to bf16).
 *
 * The names are StableHLO's element types (f32, bf16, i64, ui8, i1, ...). Complex types
 * are not native: PyTorch complex ops run through the CPU fallback.
 */
#ifndef TPU_DTYPE_H
#define TPU_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_dtype {
  TPU_F32 = 0,
  TPU_F64,
  TPU_F16,
  TPU_BF16,
  TPU_I64,
  TPU_I32,
  TPU_I16,
  TPU_I8,
  TPU_U8,
  TPU_BOOL, /* one byte per element, 0 or 1 (PyTorch's layout) */
  TPU_DTYPE_COUNT
} tpu_dtype_t;

size_t tpu_dtype_size(tpu_dtype_t dtype);       /* bytes per element; 0 if invalid */
const char *tpu_dtype_name(tpu_dtype_t dtype);  /* "f32", "bf16", "ui8", "i1", ... */
bool tpu_dtype_is_float(tpu_dtype_t dtype);     /* f32, f64, f16, bf16 */
bool tpu_dtype_is_integer(tpu_dtype_t dtype);   /* signed or unsigned ints, not bool */
bool tpu_dtype_valid(tpu_dtype_t dtype);

/* f32 -> bf16, round to nearest even; NaN stays NaN (quiet). */
static inline uint16_t tpu_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float tpu_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* f32 <-> IEEE half, round to nearest even (subnormals, inf and NaN handled). */
uint16_t tpu_f32_to_f16(float f);
float tpu_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif /* TPU_DTYPE_H */
