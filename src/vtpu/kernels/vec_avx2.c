/* vec_avx2.c: the vec.h loops for AVX2 + FMA: 8 f32 lanes, masks as all-ones lanes.
 *
 * The target is set per function by pragma (no per-file Makefile flags); vec_select.c
 * only picks this table when cpuid reports AVX2 and FMA. Builds that cannot target x86
 * AVX2 get a NULL table.
 */
#include "vtpu/kernels/vec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

#include <immintrin.h>

#include "vtpu/kernels/gemm_avx2_inl.h" /* transpose8x8 */

#define VEC_W 8
#define VEC_NAME "avx2"
#define VEC_ISA TPU_ISA_AVX2
#define VEC_TABLE tpu_vec_ops_avx2
typedef __m256 vf;
typedef __m256i vi;
typedef __m256 vm;

static inline vf vf_set(float a) { return _mm256_set1_ps(a); }
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vf_sqrt(vf a) { return _mm256_sqrt_ps(a); }
static inline vf vf_or(vf a, vf b) { return _mm256_or_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_fnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
static inline vm vf_lt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vm vf_eq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline vm vf_unord(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
static inline vm vf_ne(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
static inline vm vf_le(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
static inline vm vf_gt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline vm vf_ge(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline void vm_store_u8(uint8_t *p, vm m) { /* all-ones lanes -> 1, packed to bytes */
  __m256i b = _mm256_srli_epi32(_mm256_castps_si256(m), 31);
  __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  _mm_storel_epi64((__m128i *)p, _mm_packus_epi16(w, w));
}
static inline vm vm_load_u8(const uint8_t *p) {
  __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(b, _mm256_setzero_si256()));
}
static inline __m256i lanes_below(int64_t m) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf vf_load_n(const float *p, int64_t m) { return _mm256_maskload_ps(p, lanes_below(m)); }
static inline void vf_store_n(float *p, vf v, int64_t m) { _mm256_maskstore_ps(p, lanes_below(m), v); }
static inline vf vf_sel(vm m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }
static inline vi vi_sel(vm m, vi a, vi b) {
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_castsi256_ps(a), m));
}
static inline vi vi_set(int32_t a) { return _mm256_set1_epi32(a); }
static inline vi vi_add(vi a, vi b) { return _mm256_add_epi32(a, b); }
static inline vi vi_sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
static inline vi vi_and(vi a, vi b) { return _mm256_and_si256(a, b); }
static inline vi vi_or(vi a, vi b) { return _mm256_or_si256(a, b); }
static inline vi vi_xor(vi a, vi b) { return _mm256_xor_si256(a, b); }
#define vi_sll(a, c) _mm256_slli_epi32((a), (c))
#define vi_srl(a, c) _mm256_srli_epi32((a), (c))
#define vi_sra(a, c) _mm256_srai_epi32((a), (c))
static inline vi vf_as_vi(vf a) { return _mm256_castps_si256(a); }
static inline vf vi_as_vf(vi a) { return _mm256_castsi256_ps(a); }
static inline vf vi_to_vf(vi a) { return _mm256_cvtepi32_ps(a); }
static inline vi vf_trunc_vi(vf a) { return _mm256_cvttps_epi32(a); }
static inline vf vf_lut16(const float *t, vi i) { /* two 8-entry permutes, bit 3 picks */
  vf lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t), i);
  vf hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t + 8), i);
  return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
}
static inline vi vi_load_u16(const uint16_t *p) {
  return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
}
static inline void vi_store_u16(uint16_t *p, vi v) {
  /* values are < 2^16: packus keeps them; it packs within 128-bit lanes, so reorder */
  __m256i packed = _mm256_packus_epi32(v, v);
  packed = _mm256_permute4x64_epi64(packed, 0x08);
  _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}
static inline vi vi_load_u16_n(const uint16_t *p, int64_t m) {
  uint16_t t[8] = {0};
  for (int64_t j = 0; j < m; j++) t[j] = p[j];
  return vi_load_u16(t);
}
static inline void vi_store_u16_n(uint16_t *p, vi v, int64_t m) {
  uint16_t t[8];
  vi_store_u16(t, v);
  for (int64_t j = 0; j < m; j++) p[j] = t[j];
}
#define VEC_CAN_STREAM 1
static inline void vf_stream(float *p, vf v) { _mm256_stream_ps(p, v); }        /* 32B aligned */
static inline void vi_stream_u16(uint16_t *p, vi v) {                           /* 16B aligned */
  __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
  _mm_stream_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}
static inline void vec_sfence(void) { _mm_sfence(); }
static inline vi vi_load_u32(const uint32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void vi_store_u32(uint32_t *p, vi v) { _mm256_storeu_si256((__m256i *)p, v); }
static inline void vi_mulhilo(vi a, uint32_t m, vi *hi, vi *lo) {
  __m256i mv = _mm256_set1_epi32((int32_t)m);
  __m256i even = _mm256_mul_epu32(a, mv);
  __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), mv);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/* vec.h's transpose_u32: 8 x 8 blocks (8 loads down the columns, 8 stores along the rows),
 * the edges element by element. */
void tpu_vec_transpose_u32_avx2(uint32_t *dst, int64_t ld, const uint32_t *src, int64_t s_col,
                                int64_t rows, int64_t cols) {
  const int64_t rb = rows / 8 * 8, cb = cols / 8 * 8;
  for (int64_t c0 = 0; c0 < cb; c0 += 8) {
    for (int64_t r0 = 0; r0 < rb; r0 += 8) {
      __m256 v[8];
      for (int j = 0; j < 8; j++) v[j] = _mm256_loadu_ps((const float *)(const void *)(src + r0 + (c0 + j) * s_col));
      transpose8x8(v);
      for (int i = 0; i < 8; i++) _mm256_storeu_ps((float *)(void *)(dst + (r0 + i) * ld + c0), v[i]);
    }
    for (int64_t r = rb; r < rows; r++) {
      for (int64_t c = c0; c < c0 + 8; c++) dst[r * ld + c] = src[r + c * s_col];
    }
  }
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = cb; c < cols; c++) dst[r * ld + c] = src[r + c * s_col];
  }
}
#define VEC_TRANSPOSE_U32 tpu_vec_transpose_u32_avx2

#include "vtpu/kernels/vec_impl.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
const tpu_vec_ops_t *tpu_vec_ops_avx2(void) { return NULL; }
#endif
