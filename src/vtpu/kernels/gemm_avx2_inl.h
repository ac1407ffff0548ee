/* gemm_avx2_inl.h: inline AVX2 helpers shared by the AVX2 GEMM packers (gemm_avx2.c) and
 * the direct path (gemm_direct_avx2.c): the target attribute, bf16 components of 8 f32
 * values with tpu_mxu_component's exact bits, 8-lane loads and stores with tails, and an
 * 8 x 8 transpose. Include only from x86-64 GCC/Clang code, after <immintrin.h>.
 */
#ifndef TPU_VTPU_KERNELS_GEMM_AVX2_INL_H
#define TPU_VTPU_KERNELS_GEMM_AVX2_INL_H

#include <string.h>

#include "gemm_kernels.h"

#define TPU_AVX2 __attribute__((target("avx2,fma")))
#define TPU_AVX2_INLINE TPU_AVX2 __attribute__((always_inline)) inline

/* Lanes [0, n) set. */
TPU_AVX2_INLINE static __m256i first_n8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* bf16(x) as f32, round to nearest even as tpu_f32_to_bf16 (NaN quieted, no flush). */
TPU_AVX2_INLINE static __m256 round_bf16(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
  return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/* Component |comp| of 8 f32 values (tpu_mxu_component; -1: the value itself). */
TPU_AVX2_INLINE static __m256 component8(__m256 x, int comp) {
  if (comp < 0) return x;
  __m256 hi = round_bf16(x);
  if (comp == 0) return hi;
  __m256i exp = _mm256_set1_epi32(0x7f800000);
  __m256i e = _mm256_and_si256(_mm256_castps_si256(hi), exp);
  __m256 finite = _mm256_castsi256_ps(_mm256_xor_si256(_mm256_cmpeq_epi32(e, exp),
                                                       _mm256_set1_epi32(-1)));
  if (comp == 2) return _mm256_and_ps(hi, finite);
  return round_bf16(_mm256_and_ps(_mm256_sub_ps(x, hi), finite));
}

/* |n| (0 .. 8) contiguous f32 or bf16 values at |s| widened to f32, zeros after them. */
TPU_AVX2_INLINE static __m256 load8(const char *s, tpu_dtype_t dt, int n) {
  if (dt == TPU_F32) {
    if (n == 8) return _mm256_loadu_ps((const float *)(const void *)s);
    return _mm256_maskload_ps((const float *)(const void *)s, first_n8(n));
  }
  uint16_t h[8] = {0};
  memcpy(h, s, (size_t)n * 2);
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)h));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Stores lanes [0, n) of v at |d| in pieces of 4, 2 and 1 (vmaskmovps stores are
 * microcoded on AMD, and a spill to memcpy stalls store forwarding). */
TPU_AVX2_INLINE static void store8(float *d, __m256 v, int n) {
  if (n == 8) {
    _mm256_storeu_ps(d, v);
    return;
  }
  __m128 part = _mm256_castps256_ps128(v);
  if (n >= 4) {
    _mm_storeu_ps(d, part);
    part = _mm256_extractf128_ps(v, 1);
    d += 4, n -= 4;
  }
  if (n >= 2) {
    _mm_storel_pi((__m64 *)(void *)d, part);
    part = _mm_movehl_ps(part, part);
    d += 2, n -= 2;
  }
  if (n == 1) _mm_store_ss(d, part);
}

/* r[j][i] <- r[i][j]. */
TPU_AVX2_INLINE static void transpose8x8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
    t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {
    s[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);
    s[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xee);
    s[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44);
    s[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xee);
  }
  for (int j = 0; j < 4; j++) {
    r[j] = _mm256_permute2f128_ps(s[j], s[j + 4], 0x20);
    r[j + 4] = _mm256_permute2f128_ps(s[j], s[j + 4], 0x31);
  }
}

#endif /* TPU_VTPU_KERNELS_GEMM_AVX2_INL_H */
