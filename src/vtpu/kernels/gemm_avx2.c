/* gemm_avx2.c: the AVX2 + FMA f32 GEMM micro-kernel, a (6, 16) tile of C in 12 ymm
 * accumulators (see gemm_kernels.h). Used for exact f32 (HIGHEST, f16) and, with bf16
 * components packed as f32, for DEFAULT/HIGH on CPUs without AVX-512: bf16 x bf16
 * products are exact in f32, so the numerics are the same as vdpbf16ps up to the f32
 * accumulation order.
 */
#include "gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define TPU_AVX2 __attribute__((target("avx2,fma")))
#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)

TPU_AVX2 static void ukernel_f32_6x16(int64_t ksteps, const void *a_, const void *b_, float *c,
                                      int64_t ldc, bool accumulate) {
  const float *a = a_; /* (ksteps, 6) */
  const float *b = b_; /* (ksteps, 16) */
#define DECL(i) __m256 c##i##0, c##i##1;
  ROWS6(DECL)
#undef DECL
  if (accumulate) {
#define LOAD(i)                             \
  c##i##0 = _mm256_loadu_ps(c + (i) * ldc); \
  c##i##1 = _mm256_loadu_ps(c + (i) * ldc + 8);
    ROWS6(LOAD)
#undef LOAD
  } else {
#define ZERO(i)                  \
  c##i##0 = _mm256_setzero_ps(); \
  c##i##1 = _mm256_setzero_ps();
    ROWS6(ZERO)
#undef ZERO
  }
  for (int64_t p = 0; p < ksteps; p++) {
    __m256 b0 = _mm256_loadu_ps(b);
    __m256 b1 = _mm256_loadu_ps(b + 8);
#define STEP(i)                                 \
  {                                             \
    __m256 ai = _mm256_broadcast_ss(a + (i));   \
    c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0); \
    c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1); \
  }
    ROWS6(STEP)
#undef STEP
    a += 6;
    b += 16;
  }
#define STORE(i)                            \
  _mm256_storeu_ps(c + (i) * ldc, c##i##0); \
  _mm256_storeu_ps(c + (i) * ldc + 8, c##i##1);
  ROWS6(STORE)
#undef STORE
}

const tpu_gemm_kernel_t tpu_gemm_kernel_avx2 = {
    "avx2", TPU_GEMM_FORMAT_F32, 6, 16, 256, 96, 512, ukernel_f32_6x16, false,
};

#else

const tpu_gemm_kernel_t tpu_gemm_kernel_avx2 = {
    "avx2", TPU_GEMM_FORMAT_F32, 4, 16, 256, 64, 256, NULL, false,
};

#endif
