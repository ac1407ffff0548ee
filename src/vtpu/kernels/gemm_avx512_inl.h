/* gemm_avx512_inl.h: inline AVX512-BF16 helpers shared by the GEMM packers
 * (gemm_avx512.c) and the small-matrix path (gemm_small_avx512.c): target attributes,
 * tail masks, and the conversion of 16 source values into one bf16 component (gemm.h).
 * Include only from x86-64 GCC/Clang code, after <immintrin.h>.
 */
#ifndef TPU_VTPU_KERNELS_GEMM_AVX512_INL_H
#define TPU_VTPU_KERNELS_GEMM_AVX512_INL_H

#include "gemm_kernels.h"

/* prfchw: PREFETCHW (every AVX-512 CPU has it), for the micro-kernels' C tiles */
#define TPU_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,prfchw")))
#define TPU_AVX512BF16 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,prfchw")))
#define TPU_AVX512BF16_INLINE TPU_AVX512BF16 __attribute__((always_inline)) inline
#define TPU_AVX512_INLINE TPU_AVX512 __attribute__((always_inline)) inline

/* ---- bf16 components --------------------------------------------------------------------- */

/* bf16 component |comp| (gemm.h) of 16 f32 values, as 16 u16 (subnormals flush, as
 * vcvtneps2bf16 does). */
TPU_AVX512BF16_INLINE static __m256i component16(__m512 x, int comp) {
  __m256i hi = (__m256i)_mm512_cvtneps_pbh(x);
  if (comp == 0) return hi;
  __m512 hif = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
  __mmask16 finite = (__mmask16)~_mm512_fpclass_ps_mask(hif, 0x99); /* not NaN or +-inf */
  if (comp == 2) return _mm256_maskz_mov_epi16(finite, hi);
  return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_sub_ps(finite, x, hif));
}

/* The same for 16 bf16 values (exact: no rounding, no flush). */
TPU_AVX512BF16_INLINE static __m256i component16_bf16(__m256i h, int comp) {
  if (comp == 0) return h;
  if (comp == 1) return _mm256_setzero_si256();
  __m256i e = _mm256_set1_epi16(0x7f80);
  return _mm256_maskz_mov_epi16(_mm256_cmpneq_epi16_mask(_mm256_and_si256(h, e), e), h);
}

static inline __mmask16 first_n(int n) {
  return (__mmask16)(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1);
}

/* 16 values (n valid) at |s|, element stride 1, component |comp|, as u16. */
TPU_AVX512BF16_INLINE static __m256i load16(const char *s, tpu_dtype_t dt, int n, int comp) {
  if (dt == TPU_BF16) return component16_bf16(_mm256_maskz_loadu_epi16(first_n(n), s), comp);
  return component16(_mm512_maskz_loadu_ps(first_n(n), s), comp);
}

#endif /* TPU_VTPU_KERNELS_GEMM_AVX512_INL_H */
