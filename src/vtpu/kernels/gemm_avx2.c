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

/* ---- packers ------------------------------------------------------------------------------ */

/* Lanes [0, n) set. */
TPU_AVX2 static inline __m256i first_n8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* bf16(x) as f32, round to nearest even as tpu_f32_to_bf16 (NaN quieted, no flush). */
TPU_AVX2 static inline __m256 round_bf16(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
  return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/* Component |comp| of 8 f32 values (tpu_mxu_component; -1: the value itself). */
TPU_AVX2 static inline __m256 component8(__m256 x, int comp) {
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
TPU_AVX2 static inline __m256 load8(const char *s, tpu_dtype_t dt, int n) {
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
TPU_AVX2 static inline void store8(float *d, __m256 v, int n) {
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
TPU_AVX2 static inline void transpose8x8(__m256 r[8]) {
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
    tpu_gemm_pack_panel_f32_avx2, tpu_gemm_pack_rows_f32_avx2,
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
    "avx2", TPU_GEMM_FORMAT_F32, 4, 16, 256, 64, 256, NULL, NULL, NULL,
};

#endif
