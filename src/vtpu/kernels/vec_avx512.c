/* vec_avx512.c: the vec.h loops for AVX-512 (F, BW, VL, DQ): 16 f32 lanes, mask registers.
 *
 * The target is set per function by pragma, so the Makefile needs no per-file flags and
 * the library still runs on CPUs without AVX-512 (vec_select.c only picks this table
 * when cpuid says so). Builds that cannot target x86 AVX-512 get a NULL table.
 */
#include "vtpu/kernels/vec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#endif

#include <immintrin.h>

#define VEC_W 16
#define VEC_NAME "avx512"
#define VEC_ISA TPU_ISA_AVX512
#define VEC_TABLE tpu_vec_ops_avx512
typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vm;

static inline vf vf_set(float a) { return _mm512_set1_ps(a); }
static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vf_sqrt(vf a) { return _mm512_sqrt_ps(a); }
static inline vf vf_or(vf a, vf b) { return _mm512_or_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_fnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
#define VEC_HAS_SCALEF 1
static inline vf vf_scalef(vf y, vf n) { return _mm512_scalef_ps(y, n); }
static inline vm vf_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline vm vf_eq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline vm vf_unord(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
static inline vm vf_ne(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
static inline vm vf_le(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
static inline vm vf_gt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline vm vf_ge(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline void vm_store_u8(uint8_t *p, vm m) {
  _mm_storeu_si128((__m128i *)p, _mm_maskz_set1_epi8(m, 1));
}
static inline vm vm_load_u8(const uint8_t *p) {
  __m128i b = _mm_loadu_si128((const __m128i *)p);
  return _mm_test_epi8_mask(b, b);
}
static inline __mmask16 lanes_below(int64_t m) { return (__mmask16)((1u << m) - 1); }
static inline vf vf_load_n(const float *p, int64_t m) { return _mm512_maskz_loadu_ps(lanes_below(m), p); }
static inline void vf_store_n(float *p, vf v, int64_t m) { _mm512_mask_storeu_ps(p, lanes_below(m), v); }
static inline vf vf_sel(vm m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); }
static inline vi vi_sel(vm m, vi a, vi b) { return _mm512_mask_blend_epi32(m, b, a); }
static inline vi vi_set(int32_t a) { return _mm512_set1_epi32(a); }
static inline vi vi_add(vi a, vi b) { return _mm512_add_epi32(a, b); }
static inline vi vi_sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
static inline vi vi_and(vi a, vi b) { return _mm512_and_si512(a, b); }
static inline vi vi_or(vi a, vi b) { return _mm512_or_si512(a, b); }
static inline vi vi_xor(vi a, vi b) { return _mm512_xor_si512(a, b); }
#define vi_sll(a, c) _mm512_slli_epi32((a), (c))
#define vi_srl(a, c) _mm512_srli_epi32((a), (c))
#define vi_sra(a, c) _mm512_srai_epi32((a), (c))
static inline vi vf_as_vi(vf a) { return _mm512_castps_si512(a); }
static inline vf vi_as_vf(vi a) { return _mm512_castsi512_ps(a); }
static inline vf vi_to_vf(vi a) { return _mm512_cvtepi32_ps(a); }
static inline vi vf_trunc_vi(vf a) { return _mm512_cvttps_epi32(a); }
static inline vf vf_lut16(const float *t, vi i) { return _mm512_permutexvar_ps(i, _mm512_loadu_ps(t)); }
static inline vi vi_load_u16(const uint16_t *p) {
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
}
static inline void vi_store_u16(uint16_t *p, vi v) {
  _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(v));
}
static inline vi vi_load_u16_n(const uint16_t *p, int64_t m) {
  return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes_below(m), p));
}
static inline void vi_store_u16_n(uint16_t *p, vi v, int64_t m) {
  _mm256_mask_storeu_epi16(p, lanes_below(m), _mm512_cvtepi32_epi16(v));
}
#define VEC_CAN_STREAM 1
static inline void vf_stream(float *p, vf v) { _mm512_stream_ps(p, v); }        /* 64B aligned */
static inline void vi_stream_u16(uint16_t *p, vi v) {                           /* 32B aligned */
  _mm256_stream_si256((__m256i *)p, _mm512_cvtepi32_epi16(v));
}
static inline void vec_sfence(void) { _mm_sfence(); }
static inline vi vi_load_u32(const uint32_t *p) { return _mm512_loadu_si512(p); }
static inline void vi_store_u32(uint32_t *p, vi v) { _mm512_storeu_si512(p, v); }
static inline void vi_mulhilo(vi a, uint32_t m, vi *hi, vi *lo) {
  __m512i mv = _mm512_set1_epi32((int32_t)m);
  __m512i even = _mm512_mul_epu32(a, mv);
  __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), mv);
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

#define VEC_TRANSPOSE_U32 tpu_vec_transpose_u32_avx2 /* AVX-512 CPUs have AVX2 */
#include "vtpu/kernels/vec_impl.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
const tpu_vec_ops_t *tpu_vec_ops_avx512(void) { return NULL; }
#endif
