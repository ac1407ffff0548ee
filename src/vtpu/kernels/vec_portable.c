/* vec_portable.c: the vec.h loops in plain C, one lane at a time: the fallback on any CPU
 * and the baseline the SIMD tables are tested against. Same algorithms as vec_impl.h says,
 * with a*b + c in two roundings where the SIMD tables fuse them.
 */
#include <math.h>

#include "vtpu/kernels/vec.h"

#define VEC_W 1
#define VEC_NAME "portable"
#define VEC_ISA TPU_ISA_PORTABLE
#define VEC_TABLE tpu_vec_ops_portable
typedef float vf;
typedef int32_t vi;
typedef bool vm;

static inline uint32_t bits_of(float a) { uint32_t u; memcpy(&u, &a, 4); return u; }
static inline float float_of(uint32_t u) { float a; memcpy(&a, &u, 4); return a; }

static inline vf vf_set(float a) { return a; }
static inline vf vf_load(const float *p) { return *p; }
static inline void vf_store(float *p, vf v) { *p = v; }
static inline vf vf_add(vf a, vf b) { return a + b; }
static inline vf vf_sub(vf a, vf b) { return a - b; }
static inline vf vf_mul(vf a, vf b) { return a * b; }
static inline vf vf_div(vf a, vf b) { return a / b; }
static inline vf vf_min(vf a, vf b) { return a < b ? a : b; }
static inline vf vf_max(vf a, vf b) { return a > b ? a : b; }
static inline vf vf_sqrt(vf a) { return sqrtf(a); }
static inline vf vf_or(vf a, vf b) { return float_of(bits_of(a) | bits_of(b)); }
static inline vf vf_fma(vf a, vf b, vf c) { return a * b + c; }
static inline vf vf_fnma(vf a, vf b, vf c) { return c - a * b; }
static inline vm vf_lt(vf a, vf b) { return a < b; }
static inline vm vf_eq(vf a, vf b) { return a == b; }
static inline vm vf_ne(vf a, vf b) { return a != b; }
static inline vm vf_le(vf a, vf b) { return a <= b; }
static inline vm vf_gt(vf a, vf b) { return a > b; }
static inline vm vf_ge(vf a, vf b) { return a >= b; }
static inline void vm_store_u8(uint8_t *p, vm m) { *p = m; }
static inline vm vm_load_u8(const uint8_t *p) { return *p != 0; }
static inline vm vf_unord(vf a, vf b) { return a != a || b != b; }
static inline vf vf_sel(vm m, vf a, vf b) { return m ? a : b; }
static inline vi vi_sel(vm m, vi a, vi b) { return m ? a : b; }
static inline vi vi_set(int32_t a) { return a; }
static inline vi vi_add(vi a, vi b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
static inline vi vi_sub(vi a, vi b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static inline vi vi_and(vi a, vi b) { return a & b; }
static inline vi vi_or(vi a, vi b) { return a | b; }
static inline vi vi_xor(vi a, vi b) { return a ^ b; }
static inline vi vi_sll(vi a, int c) { return (int32_t)((uint32_t)a << c); }
static inline vi vi_srl(vi a, int c) { return (int32_t)((uint32_t)a >> c); }
static inline vi vi_sra(vi a, int c) { return a < 0 ? ~(int32_t)(~(uint32_t)a >> c) : a >> c; }
static inline vi vf_as_vi(vf a) { return (int32_t)bits_of(a); }
static inline vf vi_as_vf(vi a) { return float_of((uint32_t)a); }
static inline vf vi_to_vf(vi a) { return (float)a; }
static inline vi vf_trunc_vi(vf a) { /* as cvttps2dq: INT32_MIN for NaN and out of range */
  return a > -2147483904.0f && a < 2147483648.0f ? (int32_t)a : INT32_MIN;
}
static inline vf vf_lut16(const float *t, vi i) { return t[i & 15]; }
static inline vi vi_load_u16(const uint16_t *p) { return *p; }
/* one lane: there are no partial vectors (m is always 0), so these are never reached */
static inline vf vf_load_n(const float *p, int64_t m) { return m ? *p : 0.0f; }
static inline void vf_store_n(float *p, vf v, int64_t m) { if (m) *p = v; }
static inline vi vi_load_u16_n(const uint16_t *p, int64_t m) { return m ? *p : 0; }
static inline void vi_store_u16_n(uint16_t *p, vi v, int64_t m) { if (m) *p = (uint16_t)v; }
static inline void vi_store_u16(uint16_t *p, vi v) { *p = (uint16_t)v; }
#define VEC_CAN_STREAM 0 /* no non-temporal stores: streaming entries store normally */
static inline void vf_stream(float *p, vf v) { *p = v; }
static inline void vi_stream_u16(uint16_t *p, vi v) { *p = (uint16_t)v; }
static inline void vec_sfence(void) {}
static inline vi vi_load_u32(const uint32_t *p) { return (int32_t)*p; }
static inline void vi_store_u32(uint32_t *p, vi v) { *p = (uint32_t)v; }
static inline void vi_mulhilo(vi a, uint32_t m, vi *hi, vi *lo) {
  uint64_t p = (uint64_t)(uint32_t)a * m;
  *hi = (int32_t)(uint32_t)(p >> 32);
  *lo = (int32_t)(uint32_t)p;
}

#include "vtpu/kernels/vec_impl.h"
