/* gemm_avx2.c: the AVX2 + FMA f32 GEMM micro-kernel, a (6, 16) tile of C in 12 ymm
 * accumulators, and the AVX2 packers for its F32 format (see gemm_kernels.h). Used for
 * exact f32 (HIGHEST, f16) and, with bf16 components packed as f32, for DEFAULT/HIGH on
 * CPUs without AVX-512: bf16 x bf16 products are exact in f32, so the numerics are the
 * same as vdpbf16ps up to the f32 accumulation order. The packers round the components
 * eight at a time (tpu_mxu_component's bits); the portable packer took a quarter of a
 * small model's training step on such a CPU.
 */
#include "gemm_kernels.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "gemm_avx2_inl.h"

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

/* ---- packers ------------------------------------------------------------------------------ */

/* |n| values at s + off[j] (elements) widened to f32, zeros after them. */
static inline void gather8(float t[8], const char *s, const int64_t *off, tpu_dtype_t dt, int n) {
  for (int j = 0; j < 8; j++) t[j] = j < n ? tpu_mxu_load_f32(s, dt, off[j]) : 0.0f;
}

TPU_AVX2 static void pack_f32(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                              int64_t kpass, int64_t kb, int64_t ke, float *d) {
  const tpu_gemm_axis_t *wax = src->w, *kax = src->k;
  int64_t K = kax->size, es = (int64_t)tpu_dtype_size(src->dtype);
  int wn = (int)(wax->size - w0 < width ? wax->size - w0 : width); /* valid rows */
  const char *base = src->data;
  if (!tpu_gemm_panel_reads_rows(src)) {
    /* k contiguous: 8 k of 8 panel rows at a time, transposed into 8 panel rows of 8 */
    for (int p = 0; p < src->num_passes; p++) {
      int c = src->comp ? src->comp[p] : -1;
      float *dp = d + (int64_t)p * kpass * width;
      for (int i0 = 0; i0 < width; i0 += 8) {
        int cols = width - i0 < 8 ? width - i0 : 8;
        const char *rows[8];
        for (int j = 0; j < 8; j++) {
          int i = i0 + j;
          rows[j] = i < wn && j < cols ? base + tpu_gemm_axis_offset(wax, w0 + i) * es : NULL;
        }
        for (int64_t k = kb; k < ke; k += 8) {
          int64_t left = K - k;
          int n = left <= 0 ? 0 : left >= 8 ? 8 : (int)left;
          __m256 r[8];
          for (int j = 0; j < 8; j++) {
            r[j] = rows[j] && n ? component8(load8(rows[j] + k * es, src->dtype, n), c)
                                : _mm256_setzero_ps();
          }
          transpose8x8(r);
          int steps = ke - k < 8 ? (int)(ke - k) : 8;
          for (int j = 0; j < steps; j++) store8(dp + (k + j) * width + i0, r[j], cols);
        }
      }
    }
    return;
  }
  /* along w: runs of 8 consecutive w are loaded, other rows gathered one by one */
  int64_t woff[64 + 8] = {0};
  bool run[8];
  tpu_gemm_panel_runs(wax, w0, wn, width, 8, woff, run);
  for (int p = 0; p < src->num_passes; p++) {
    int c = src->comp ? src->comp[p] : -1;
    for (int64_t k = kb; k < ke; k++) {
      float *row = d + ((int64_t)p * kpass + k) * width;
      const char *s = k < K ? base + tpu_gemm_axis_offset(kax, k) * es : NULL;
      for (int i = 0; i < width; i += 8) {
        int n = wn - i < 8 ? wn - i : 8;
        __m256 v = _mm256_setzero_ps();
        if (n > 0 && s) {
          if (run[i / 8]) {
            v = load8(s + woff[i] * es, src->dtype, n);
          } else {
            float t[8];
            gather8(t, s, woff + i, src->dtype, n);
            v = _mm256_loadu_ps(t);
          }
          v = component8(v, c);
        }
        store8(row + i, v, width - i < 8 ? width - i : 8);
      }
    }
  }
}

bool tpu_gemm_pack_panel_f32_avx2(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                  int64_t kpass, int64_t kb, int64_t ke, void *dst) {
  if (src->dtype != TPU_F32 && src->dtype != TPU_BF16) return false;
  if (width > 64 || !tpu_cpu_features()->avx2_fma) return false;
  pack_f32(src, w0, width, kpass, kb, ke, dst);
  return true;
}

TPU_AVX2 static void pack_rows_f32(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                   int64_t kpass, int64_t kb, int64_t ke, float *dst,
                                   int64_t panel_stride) {
  int64_t W = src->w->size, K = src->k->size, es = (int64_t)tpu_dtype_size(src->dtype);
  const char *base = src->data;
  for (int p = 0; p < src->num_passes; p++) {
    int c = src->comp ? src->comp[p] : -1;
    for (int64_t k = kb; k < ke; k++) {
      int64_t row = ((int64_t)p * kpass + k) * width;
      const char *s = k < K ? base + tpu_gemm_axis_offset(src->k, k) * es : NULL;
      for (int64_t pi = 0; pi < npanels; pi++) {
        float *d = dst + pi * panel_stride + row;
        for (int i = 0; i < width; i += 8) {
          int64_t w = pi * width + i;
          int n = W - w >= 8 ? 8 : (int)(W - w);
          __m256 v = _mm256_setzero_ps();
          if (n > 0 && s) v = component8(load8(s + w * es, src->dtype, n), c);
          _mm256_storeu_ps(d + i, v);
        }
      }
    }
  }
}

bool tpu_gemm_pack_rows_f32_avx2(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                 int64_t kpass, int64_t kb, int64_t ke, void *dst,
                                 int64_t panel_stride) {
  if (src->w->offsets || src->w->stride != 1 || width % 8 != 0) return false;
  if (!tpu_cpu_features()->avx2_fma || (src->dtype != TPU_F32 && src->dtype != TPU_BF16)) {
    return false;
  }
  pack_rows_f32(src, width, npanels, kpass, kb, ke, dst, panel_stride);
  return true;
}

const tpu_gemm_kernel_t tpu_gemm_kernel_avx2 = {
    "avx2", TPU_GEMM_FORMAT_F32, 6, 16, 256, 96, 512, ukernel_f32_6x16,
    tpu_gemm_pack_panel_f32_avx2, tpu_gemm_pack_rows_f32_avx2, NULL, NULL, NULL,
};

#else

bool tpu_gemm_pack_panel_f32_avx2(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                  int64_t kpass, int64_t kb, int64_t ke, void *dst) {
  (void)src, (void)w0, (void)width, (void)kpass, (void)kb, (void)ke, (void)dst;
  return false;
}
bool tpu_gemm_pack_rows_f32_avx2(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                 int64_t kpass, int64_t kb, int64_t ke, void *dst,
                                 int64_t panel_stride) {
  (void)src, (void)width, (void)npanels, (void)kpass, (void)kb, (void)ke, (void)dst;
  (void)panel_stride;
  return false;
}

const tpu_gemm_kernel_t tpu_gemm_kernel_avx2 = {
    "avx2", TPU_GEMM_FORMAT_F32, 4, 16, 256, 64, 256, NULL, NULL, NULL, NULL, NULL, NULL,
};

#endif
