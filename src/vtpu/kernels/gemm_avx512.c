/* gemm_avx512.c: AVX-512 GEMM micro-kernels (vdpbf16ps bf16 pairs, and f32 FMA) and the
 * AVX-512 panel packers for both formats (see gemm_kernels.h for the packed formats).
 *
 * Both micro-kernels hold a (14, 32) f32 tile of C in 28 zmm accumulators; each k step
 * loads two zmm of B and broadcasts one 32-bit value of A per row:
 *   bf16: c[i][j] += a[2p][i] * b[2p][j] + a[2p+1][i] * b[2p+1][j]   (vdpbf16ps, 32 MAC)
 *   f32:  c[i][j] += a[p][i] * b[p][j]                                 (vfmadd, 16 MAC)
 * A tile that overwrites C asks for its 28 cache lines for writing (PREFETCHW), one per k
 * step, while it computes: C is often memory no step has touched for a while (a GEMM's
 * output in a compiled step), and the stores at the end would otherwise wait for each
 * line in turn (the GPT forward graph, its three graphs run in turn: 5% faster).
 * Products of bf16 values are exact in f32; vdpbf16ps adds the two products of a pair
 * into the f32 accumulator with round to nearest even and flushes subnormals, which is
 * within the f32-accumulation-order tolerance of the reference.
 *
 * The bf16 packers have a fast path for the common case, f32 sources at one pass (DEFAULT
 * precision: the hi component only): whole runs of 16 loaded unmasked and converted with
 * vcvtneps2bf16 / vcvtne2ps2bf16 (the same rounding), instead of the general per-lane
 * component code. Other dtypes, passes and the edges take the general path.
 *
 * Compiled with target attributes, so the file builds with the project's generic flags;
 * gemm.c only calls in after tpu_cpu_features() reports the ISA.
 */
#include "gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "gemm_avx512_inl.h"

#define ROWS14(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define MR 14
#define NR 32

/* Line |p| (0 .. 2 MR - 1) of the (MR, NR) f32 tile at c, asked for with write intent. */
#define PREFETCH_C_LINE(c, ldc, p) __builtin_prefetch((c) + ((p) >> 1) * (ldc) + ((p)&1) * 16, 1, 3)

/* ---- micro-kernels ---------------------------------------------------------------------- */

/* The (MR, NR) tile; with |bias| (NR f32), c[i][j] = acc + bias[j] as it is stored: the
 * same f32 add as add_bias_avx512 after the store, without the second pass over the tile. */
TPU_AVX512BF16_INLINE static void tile_bf16_14x32(int64_t ksteps, const void *a_, const void *b_,
                                                  float *c, int64_t ldc, bool accumulate,
                                                  const float *bias) {
  const int32_t *a = a_; /* (ksteps, 14) bf16 pairs */
  const char *b = b_;    /* (ksteps, 32) bf16 pairs: 128 bytes per step */
#define DECL(i) __m512 c##i##0, c##i##1;
  ROWS14(DECL)
#undef DECL
  if (accumulate) {
#define LOAD(i)                             \
  c##i##0 = _mm512_loadu_ps(c + (i) * ldc); \
  c##i##1 = _mm512_loadu_ps(c + (i) * ldc + 16);
    ROWS14(LOAD)
#undef LOAD
  } else {
#define ZERO(i)                  \
  c##i##0 = _mm512_setzero_ps(); \
  c##i##1 = _mm512_setzero_ps();
    ROWS14(ZERO)
#undef ZERO
  }
  const int64_t c_lines = accumulate ? 0 : 2 * MR; /* C lines still to ask for */
  for (int64_t p = 0; p < ksteps; p++) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 64);
    _mm_prefetch(b + 8 * 128, _MM_HINT_T0);
    if (p < c_lines) PREFETCH_C_LINE(c, ldc, p);
#define STEP(i)                                      \
  {                                                  \
    __m512bh ai = (__m512bh)_mm512_set1_epi32(a[i]); \
    c##i##0 = _mm512_dpbf16_ps(c##i##0, ai, b0);     \
    c##i##1 = _mm512_dpbf16_ps(c##i##1, ai, b1);     \
  }
    ROWS14(STEP)
#undef STEP
    a += MR;
    b += 128;
  }
  for (int64_t p = ksteps; p < c_lines; p++) PREFETCH_C_LINE(c, ldc, p); /* short K */
  if (bias) {
    const __m512 bias0 = _mm512_loadu_ps(bias), bias1 = _mm512_loadu_ps(bias + 16);
#define ADD_BIAS(i)                          \
  c##i##0 = _mm512_add_ps(c##i##0, bias0); \
  c##i##1 = _mm512_add_ps(c##i##1, bias1);
    ROWS14(ADD_BIAS)
#undef ADD_BIAS
  }
#define STORE(i)                            \
  _mm512_storeu_ps(c + (i) * ldc, c##i##0); \
  _mm512_storeu_ps(c + (i) * ldc + 16, c##i##1);
  ROWS14(STORE)
#undef STORE
}

TPU_AVX512BF16 static void ukernel_bf16_14x32(int64_t ksteps, const void *a, const void *b,
                                              float *c, int64_t ldc, bool accumulate) {
  tile_bf16_14x32(ksteps, a, b, c, ldc, accumulate, NULL);
}

TPU_AVX512BF16 static void ukernel_bf16_14x32_bias(int64_t ksteps, const void *a, const void *b,
                                                   float *c, int64_t ldc, bool accumulate,
                                                   const float *bias) {
  tile_bf16_14x32(ksteps, a, b, c, ldc, accumulate, bias);
}

/* The first |R| rows (1 .. MR - 1) of a bf16 tile: a panel's last rows when M is not a
 * multiple of MR (the GPT step's 256 tokens: 18 panels and 4 rows; 64 features: 4 and 8),
 * written in place instead of computing all MR rows into a local tile and copying R of
 * them back (as costly as a whole panel: M = 64 took as long as M = 70). The packed A
 * panel is still MR wide. Each element goes through the same vdpbf16ps steps as in
 * ukernel_bf16_14x32, so the bits are the same. R is a constant in each instantiation
 * below, so the loops unroll and the 2 R accumulators stay in registers. */
TPU_AVX512BF16_INLINE static void tile_bf16_rows(const int R, int64_t ksteps, const void *a_,
                                                 const void *b_, float *c, int64_t ldc,
                                                 bool accumulate) {
  const int32_t *a = a_; /* (ksteps, MR) bf16 pairs */
  const char *b = b_;    /* (ksteps, NR) bf16 pairs: 128 bytes per step */
  __m512 acc[2 * (MR - 1)];
#pragma GCC unroll 13
  for (int i = 0; i < R; i++) {
    acc[2 * i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc[2 * i + 1] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  const int64_t c_lines = accumulate ? 0 : 2 * R; /* C lines still to ask for */
  for (int64_t p = 0; p < ksteps; p++) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 64);
    _mm_prefetch(b + 8 * 128, _MM_HINT_T0);
    if (p < c_lines) PREFETCH_C_LINE(c, ldc, p);
#pragma GCC unroll 13
    for (int i = 0; i < R; i++) {
      __m512bh ai = (__m512bh)_mm512_set1_epi32(a[i]);
      acc[2 * i] = _mm512_dpbf16_ps(acc[2 * i], ai, b0);
      acc[2 * i + 1] = _mm512_dpbf16_ps(acc[2 * i + 1], ai, b1);
    }
    a += MR;
    b += 128;
  }
  for (int64_t p = ksteps; p < c_lines; p++) PREFETCH_C_LINE(c, ldc, p); /* short K */
#pragma GCC unroll 13
  for (int i = 0; i < R; i++) {
    _mm512_storeu_ps(c + i * ldc, acc[2 * i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc[2 * i + 1]);
  }
}

#define ROWS_CASE(R) \
  case R: tile_bf16_rows(R, ksteps, a, b, c, ldc, accumulate); return;

TPU_AVX512BF16 static void ukernel_bf16_rows(int rows, int64_t ksteps, const void *a,
                                             const void *b, float *c, int64_t ldc,
                                             bool accumulate) {
  switch (rows) {
    ROWS_CASE(1) ROWS_CASE(2) ROWS_CASE(3) ROWS_CASE(4) ROWS_CASE(5) ROWS_CASE(6) ROWS_CASE(7)
    ROWS_CASE(8) ROWS_CASE(9) ROWS_CASE(10) ROWS_CASE(11) ROWS_CASE(12) ROWS_CASE(13)
    default: ukernel_bf16_14x32(ksteps, a, b, c, ldc, accumulate); return;
  }
}
#undef ROWS_CASE

TPU_AVX512 static void ukernel_f32_14x32(int64_t ksteps, const void *a_, const void *b_, float *c,
                                         int64_t ldc, bool accumulate) {
  const float *a = a_; /* (ksteps, 14) */
  const float *b = b_; /* (ksteps, 32) */
#define DECL(i) __m512 c##i##0, c##i##1;
  ROWS14(DECL)
#undef DECL
  if (accumulate) {
#define LOAD(i)                             \
  c##i##0 = _mm512_loadu_ps(c + (i) * ldc); \
  c##i##1 = _mm512_loadu_ps(c + (i) * ldc + 16);
    ROWS14(LOAD)
#undef LOAD
  } else {
#define ZERO(i)                  \
  c##i##0 = _mm512_setzero_ps(); \
  c##i##1 = _mm512_setzero_ps();
    ROWS14(ZERO)
#undef ZERO
  }
  const int64_t c_lines = accumulate ? 0 : 2 * MR; /* C lines still to ask for */
  for (int64_t p = 0; p < ksteps; p++) {
    __m512 b0 = _mm512_loadu_ps(b);
    __m512 b1 = _mm512_loadu_ps(b + 16);
    _mm_prefetch((const char *)(b + 8 * 32), _MM_HINT_T0);
    if (p < c_lines) PREFETCH_C_LINE(c, ldc, p);
#define STEP(i)                                 \
  {                                             \
    __m512 ai = _mm512_set1_ps(a[i]);           \
    c##i##0 = _mm512_fmadd_ps(ai, b0, c##i##0); \
    c##i##1 = _mm512_fmadd_ps(ai, b1, c##i##1); \
  }
    ROWS14(STEP)
#undef STEP
    a += MR;
    b += NR;
  }
  for (int64_t p = ksteps; p < c_lines; p++) PREFETCH_C_LINE(c, ldc, p); /* short K */
#define STORE(i)                            \
  _mm512_storeu_ps(c + (i) * ldc, c##i##0); \
  _mm512_storeu_ps(c + (i) * ldc + 16, c##i##1);
  ROWS14(STORE)
#undef STORE
}

/* c[i][j] += bias[j] on a finished (rows, cols <= 32) tile of f32 C, still in L1: the
 * same f32 adds as the separate epilogue it replaces. */
TPU_AVX512 static void add_bias_avx512(float *c, int64_t ldc, int rows, int cols,
                                       const float *bias) {
  const __mmask16 m0 = first_n(cols < 16 ? cols : 16), m1 = first_n(cols > 16 ? cols - 16 : 0);
  const __m512 b0 = _mm512_maskz_loadu_ps(m0, bias), b1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  for (int i = 0; i < rows; i++) {
    float *r = c + i * ldc;
    _mm512_mask_storeu_ps(r, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, r), b0));
    _mm512_mask_storeu_ps(r + 16, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, r + 16), b1));
  }
}

/* ---- bf16 packer ----------------------------------------------------------------------------- */

/* 16 values (n valid) at |s| + off[j] elements, component |comp|, as u16. */
TPU_AVX512BF16_INLINE static __m256i gather16(const char *s, const int64_t *off, tpu_dtype_t dt,
                                              int n, int comp) {
  if (dt == TPU_BF16) {
    uint16_t t[16] = {0};
    for (int j = 0; j < n && j < 16; j++) t[j] = ((const uint16_t *)(const void *)s)[off[j]];
    return component16_bf16(_mm256_loadu_si256((const __m256i *)t), comp);
  }
  __mmask16 m = first_n(n);
  __m256 lo = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), (__mmask8)m,
                                       _mm512_maskz_loadu_epi64((__mmask8)m, off), s, 4);
  __m256 hi = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), (__mmask8)(m >> 8),
                                       _mm512_maskz_loadu_epi64((__mmask8)(m >> 8), off + 8), s, 4);
  __m512 x = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  return component16(x, comp);
}

/* 16 u16 values of row k and 16 of row k+1 as 16 pairs (u32, low half from row k). */
TPU_AVX512BF16_INLINE static __m512i interleave16(__m256i lo, __m256i hi) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                         _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

/* The hi component (bf16, round to nearest even) of the 16 f32 values at |s0| and at
 * |s1| (the lanes of |m|; zero in the others), as 16 pairs (low half from s0): the same
 * bits as load16 of each. */
TPU_AVX512BF16_INLINE static __m512i pairs_f32(const float *s0, const float *s1, __mmask16 m) {
  return interleave16((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, s0)),
                      (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, s1)));
}

/* Rows k and k+1 of the panel are read along w, converted, zero-extended and interleaved
 * into pairs. Each run of 16 along w is loaded directly when it is contiguous in memory
 * (unit stride, or a table whose 16 offsets are consecutive: an output row of an implicit
 * im2col), and gathered otherwise. */
TPU_AVX512BF16 static void pack_bf16_rows(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                          int64_t kpass, int64_t kb, int64_t ke, uint32_t *d) {
  const tpu_gemm_axis_t *wax = src->w, *kax = src->k;
  int64_t K = kax->size;
  int wn = (int)(wax->size - w0 < width ? wax->size - w0 : width);
  int64_t es = (int64_t)tpu_dtype_size(src->dtype);
  const char *base = src->data;
  int64_t woff[64 + 16] = {0}; /* w offsets of the panel's rows */
  bool run[4];                 /* run i/16 is contiguous */
  tpu_gemm_panel_runs(wax, w0, wn, width, 16, woff, run);
  for (int p = 0; p < src->num_passes; p++) {
    int c = src->comp[p];
    const bool f32_hi = src->dtype == TPU_F32 && c == 0;
    for (int64_t k = kb; k < ke; k += 2) {
      uint32_t *row = d + ((int64_t)p * kpass + k) / 2 * width;
      const char *s0 = k < K ? base + tpu_gemm_axis_offset(kax, k) * es : NULL;
      const char *s1 = k + 1 < K ? base + tpu_gemm_axis_offset(kax, k + 1) * es : NULL;
      for (int i = 0; i < width; i += 16) {
        int n = wn - i;
        __m512i v;
        if (f32_hi && n >= 16 && s1 && run[i / 16]) { /* a whole contiguous run */
          v = pairs_f32((const float *)(const void *)s0 + woff[i],
                        (const float *)(const void *)s1 + woff[i], 0xffff);
        } else {
          __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
          if (n > 0 && s0) {
            lo = run[i / 16] ? load16(s0 + woff[i] * es, src->dtype, n, c)
                             : gather16(s0, woff + i, src->dtype, n, c);
          }
          if (n > 0 && s1) {
            hi = run[i / 16] ? load16(s1 + woff[i] * es, src->dtype, n, c)
                             : gather16(s1, woff + i, src->dtype, n, c);
          }
          v = interleave16(lo, hi);
        }
        _mm512_mask_storeu_epi32(row + i, first_n(width - i), v);
      }
    }
  }
}

/* r[i] = row i of a 16 x 16 block of u32 becomes r[j] = column j: pairs of rows
 * interleaved 32 then 64 bits at a time within each 128-bit lane, then the 4 x 4 grid of
 * 128-bit lanes transposed (64 shuffles instead of 256 scalar moves). The loops are
 * unrolled so that the 16 rows stay in registers (rolled, GCC spilled them: the k-contiguous
 * packer ran at half the speed). */
TPU_AVX512BF16_INLINE static void transpose16x16(__m512i r[16]) {
  __m512i t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  /* u[4g + c]: lane L holds column 4L + c of rows 4g .. 4g+3 */
#pragma GCC unroll 4
  for (int g = 0; g < 4; g++) {
    __m512i *q = t + 4 * g;
    u[4 * g + 0] = _mm512_unpacklo_epi64(q[0], q[2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(q[0], q[2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(q[1], q[3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(q[1], q[3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    __m512i s0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88); /* lanes 0, 2 of each */
    __m512i s1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd); /* lanes 1, 3 */
    __m512i s2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
    __m512i s3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_i32x4(s0, s2, 0x88);      /* column c      (lane 0) */
    r[4 + c] = _mm512_shuffle_i32x4(s1, s3, 0x88);  /* column 4 + c  (lane 1) */
    r[8 + c] = _mm512_shuffle_i32x4(s0, s2, 0xdd);  /* column 8 + c  (lane 2) */
    r[12 + c] = _mm512_shuffle_i32x4(s1, s3, 0xdd); /* column 12 + c (lane 3) */
  }
}

/* k contiguous: 32 consecutive k of each row become 16 pairs, one zmm per row; blocks of
 * 16 rows are transposed in registers into the panel's (16, width) rows. */
TPU_AVX512BF16 static void pack_bf16_cols(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                          int64_t kpass, int64_t kb, int64_t ke, uint32_t *d) {
  const tpu_gemm_axis_t *wax = src->w;
  int64_t K = src->k->size;
  int wn = (int)(wax->size - w0 < width ? wax->size - w0 : width);
  int64_t es = (int64_t)tpu_dtype_size(src->dtype);
  const char *rows[64];
  for (int i = 0; i < wn; i++) {
    rows[i] = (const char *)src->data + tpu_gemm_axis_offset(wax, w0 + i) * es;
  }
  for (int p = 0; p < src->num_passes; p++) {
    int c = src->comp[p];
    const bool f32_hi = src->dtype == TPU_F32 && c == 0;
    uint32_t *dp = d + (int64_t)p * kpass / 2 * width;
    for (int64_t k = kb; k < ke; k += 32) {
      int64_t left = K - k;
      int n0 = left <= 0 ? 0 : left >= 16 ? 16 : (int)left;
      int n1 = left <= 16 ? 0 : left >= 32 ? 16 : (int)(left - 16);
      int pairs = (ke - k) / 2 < 16 ? (int)((ke - k) / 2) : 16;
      uint32_t *out = dp + k / 2 * width;
      const __mmask16 m0 = first_n(n0), m1 = first_n(n1);
      for (int i0 = 0; i0 < width; i0 += 16) {
        __m512i r[16]; /* row i0 + i: its 16 pairs */
        const int nv = wn - i0; /* rows of this block that exist */
        if (f32_hi) { /* 32 k of a row in one two-source conversion: its pairs in place */
#pragma GCC unroll 16
          for (int i = 0; i < 16; i++) {
            const float *x = (const float *)(const void *)rows[i < nv ? i0 + i : 0] + k;
            __m512 lo = _mm512_maskz_loadu_ps(i < nv ? m0 : 0, x);
            __m512 hi = _mm512_maskz_loadu_ps(i < nv ? m1 : 0, x + 16);
            r[i] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
          }
        } else {
          for (int i = 0; i < 16; i++) {
            __m256i v0 = _mm256_setzero_si256(), v1 = _mm256_setzero_si256();
            if (i < nv && n0) v0 = load16(rows[i0 + i] + k * es, src->dtype, n0, c);
            if (i < nv && n1) v1 = load16(rows[i0 + i] + (k + 16) * es, src->dtype, n1, c);
            r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(v0), v1, 1);
          }
        }
        transpose16x16(r);
        __mmask16 m = first_n(width - i0);
#pragma GCC unroll 16
        for (int j = 0; j < pairs; j++) _mm512_mask_storeu_epi32(out + j * width + i0, m, r[j]);
      }
    }
  }
}

bool tpu_gemm_pack_panel_bf16_avx512(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                     int64_t kpass, int64_t kb, int64_t ke, void *dst) {
  if (src->dtype != TPU_F32 && src->dtype != TPU_BF16) return false;
  if (width > 64 || !tpu_cpu_features()->avx512_bf16) return false;
  if (tpu_gemm_panel_reads_rows(src)) {
    pack_bf16_rows(src, w0, width, kpass, kb, ke, dst);
  } else {
    pack_bf16_cols(src, w0, width, kpass, kb, ke, dst);
  }
  return true;
}

/* ---- f32 packer --------------------------------------------------------------------------- */

/* bf16(x) as f32, round to nearest even exactly as tpu_f32_to_bf16 (no flush), AVX-512F. */
TPU_AVX512_INLINE static __m512 round_bf16(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000)); /* quiet NaN */
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}

/* Component |comp| of 16 f32 values (gemm.h; -1: the value itself). */
TPU_AVX512_INLINE static __m512 component16_f32(__m512 x, int comp) {
  if (comp < 0) return x;
  __m512 hi = round_bf16(x);
  if (comp == 0) return hi;
  __mmask16 finite = (__mmask16)~_mm512_fpclass_ps_mask(hi, 0x99);
  if (comp == 2) return _mm512_maskz_mov_ps(finite, hi);
  return round_bf16(_mm512_maskz_sub_ps(finite, x, hi));
}

/* 16 values widened to f32 (n valid): contiguous at |s|, or at s + off[j] when off. */
TPU_AVX512_INLINE static __m512 load16_f32(const char *s, const int64_t *off, tpu_dtype_t dt,
                                           int n) {
  __mmask16 m = first_n(n);
  if (dt == TPU_F32) {
    if (!off) return _mm512_maskz_loadu_ps(m, s);
    __m256 lo = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), (__mmask8)m,
                                         _mm512_maskz_loadu_epi64((__mmask8)m, off), s, 4);
    __m256 hi =
        _mm512_mask_i64gather_ps(_mm256_setzero_ps(), (__mmask8)(m >> 8),
                                 _mm512_maskz_loadu_epi64((__mmask8)(m >> 8), off + 8), s, 4);
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  }
  __m256i h;
  if (off) {
    uint16_t t[16] = {0};
    for (int j = 0; j < n && j < 16; j++) t[j] = ((const uint16_t *)(const void *)s)[off[j]];
    h = _mm256_loadu_si256((const __m256i *)t);
  } else {
    h = _mm256_maskz_loadu_epi16(m, s);
  }
  if (dt == TPU_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16 */
}

TPU_AVX512 static void pack_f32(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                int64_t kpass, int64_t kb, int64_t ke, float *d) {
  const tpu_gemm_axis_t *wax = src->w, *kax = src->k;
  int64_t K = kax->size;
  int wn = (int)(wax->size - w0 < width ? wax->size - w0 : width);
  int64_t es = (int64_t)tpu_dtype_size(src->dtype);
  const char *base = src->data;
  if (!tpu_gemm_panel_reads_rows(src)) {
    /* k contiguous: 16 consecutive k of one row, scattered down the panel */
    __m512i vidx =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(width));
    for (int p = 0; p < src->num_passes; p++) {
      int c = src->comp ? src->comp[p] : -1;
      float *dp = d + (int64_t)p * kpass * width;
      for (int i = 0; i < width; i++) {
        const char *row = i < wn ? base + tpu_gemm_axis_offset(wax, w0 + i) * es : NULL;
        for (int64_t k = kb; k < ke; k += 16) {
          int64_t left = K - k;
          int n = !row || left <= 0 ? 0 : left >= 16 ? 16 : (int)left;
          __m512 v = n ? component16_f32(load16_f32(row + k * es, NULL, src->dtype, n), c)
                       : _mm512_setzero_ps();
          int steps = ke - k < 16 ? (int)(ke - k) : 16;
          _mm512_mask_i32scatter_ps(dp + k * width + i, first_n(steps), vidx, v, 4);
        }
      }
    }
    return;
  }
  int64_t woff[64 + 16] = {0};
  bool run[4];
  tpu_gemm_panel_runs(wax, w0, wn, width, 16, woff, run);
  for (int p = 0; p < src->num_passes; p++) {
    int c = src->comp ? src->comp[p] : -1;
    for (int64_t k = kb; k < ke; k++) {
      float *row = d + ((int64_t)p * kpass + k) * width;
      const char *s = k < K ? base + tpu_gemm_axis_offset(kax, k) * es : NULL;
      for (int i = 0; i < width; i += 16) {
        int n = wn - i;
        __m512 v = _mm512_setzero_ps();
        if (n > 0 && s) {
          v = component16_f32(run[i / 16] ? load16_f32(s + woff[i] * es, NULL, src->dtype, n)
                                          : load16_f32(s, woff + i, src->dtype, n),
                              c);
        }
        _mm512_mask_storeu_ps(row + i, first_n(width - i), v);
      }
    }
  }
}

bool tpu_gemm_pack_panel_f32_avx512(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                    int64_t kpass, int64_t kb, int64_t ke, void *dst) {
  if (src->dtype != TPU_F32 && src->dtype != TPU_BF16 && src->dtype != TPU_F16) return false;
  if (width > 64 || !tpu_cpu_features()->avx512f) return false;
  pack_f32(src, w0, width, kpass, kb, ke, dst);
  return true;
}

/* ---- whole-row packer: every panel of a w-contiguous source in one sweep ------------------ */

/* Pairs of source rows pack_rows_bf16 asks for ahead of the pair it packs: the rows are a
 * GEMM's first touch of its operand, often out of cache (the backward graph's activations
 * and gradients; there, with its graphs run in turn, 2% faster). */
#define PACK_AHEAD 2

/* One pair of f32 rows (r0 = row k, r1 = row k + 1, |W| values each), the hi component, into
 * the pair row |row| of all |npanels| panels (zeros past W): per panel, runs of 16 loaded
 * (masked past W), converted and interleaved, and stored with the panel's width as mask.
 * |n0|, |n1|: the rows asked for ahead (NULL: none). The common case of pack_rows_bf16,
 * kept out of its general loop, where the compiler spilled the loaded vectors to the
 * stack: about 2x faster (0.19-0.34 -> 0.10-0.17 ns per element on the GPT step's shapes). */
TPU_AVX512BF16 static void pack_pair_f32(const float *r0, const float *r1, const char *n0,
                                         const char *n1, int64_t W, int width,
                                         int64_t npanels, uint32_t *row,
                                         int64_t panel_stride) {
  __mmask16 store[4]; /* per run of 16 of a panel row: its lanes inside the panel */
  for (int i = 0; i < width; i += 16) store[i / 16] = first_n(width - i < 16 ? width - i : 16);
  for (int64_t pi = 0; pi < npanels; pi++) {
    uint32_t *d = row + pi * panel_stride;
    for (int i = 0; i < width; i += 16) {
      const int64_t w = pi * width + i;
      const int64_t left = W - w;
      const __mmask16 valid = left >= 16 ? (__mmask16)0xffff : first_n(left > 0 ? (int)left : 0);
      if (n0 && left > 0) {
        _mm_prefetch(n0 + w * 4, _MM_HINT_T0);
        _mm_prefetch(n1 + w * 4, _MM_HINT_T0);
      }
      _mm512_mask_storeu_epi32(d + i, store[i / 16], pairs_f32(r0 + w, r1 + w, valid));
    }
  }
}

/* For each k (pair) of [kb, ke), reads the source rows from end to end and writes each run
 * of up to 16 into its panel: two sequential read streams instead of one short strided
 * read per panel and row. Panel i (w from i * width) is at dst + i * panel_stride entries;
 * a width that is not a multiple of 16 ends each panel row with a shorter run. Pairs of
 * f32 rows at one pass go through pack_pair_f32; the rest (bf16, other passes, the last odd
 * row) through the general loop here. */
TPU_AVX512BF16 static void pack_rows_bf16(const tpu_gemm_panel_src_t *src, int width,
                                          int64_t npanels, int64_t kpass, int64_t kb, int64_t ke,
                                          uint32_t *dst, int64_t panel_stride) {
  int64_t W = src->w->size, K = src->k->size, es = (int64_t)tpu_dtype_size(src->dtype);
  const char *base = src->data;
  for (int p = 0; p < src->num_passes; p++) {
    int c = src->comp[p];
    const bool f32_hi = src->dtype == TPU_F32 && c == 0;
    for (int64_t k = kb; k < ke; k += 2) {
      uint32_t *row = dst + ((int64_t)p * kpass + k) / 2 * width;
      /* a row past K reads nothing (no lanes): any valid address will do */
      const char *s0 = base + (k < K ? tpu_gemm_axis_offset(src->k, k) * es : 0);
      const char *s1 = base + (k + 1 < K ? tpu_gemm_axis_offset(src->k, k + 1) * es : 0);
      /* the pair of rows PACK_AHEAD pairs on, asked for while this one is packed */
      const int64_t kn = k + 2 * PACK_AHEAD;
      const char *n0 = kn + 1 < K ? base + tpu_gemm_axis_offset(src->k, kn) * es : NULL;
      const char *n1 = kn + 1 < K ? base + tpu_gemm_axis_offset(src->k, kn + 1) * es : NULL;
      if (f32_hi && k + 1 < K) {
        pack_pair_f32((const float *)(const void *)s0, (const float *)(const void *)s1, n0, n1,
                      W, width, npanels, row, panel_stride);
        continue;
      }
      for (int64_t pi = 0; pi < npanels; pi++) {
        uint32_t *d = row + pi * panel_stride;
        for (int i = 0; i < width; i += 16) {
          int64_t w = pi * width + i;
          if (n0 && w < W) {
            _mm_prefetch(n0 + w * es, _MM_HINT_T0);
            _mm_prefetch(n1 + w * es, _MM_HINT_T0);
          }
          int n = W - w >= 16 ? 16 : W - w <= 0 ? 0 : (int)(W - w);
          __m256i lo = load16(s0 + w * es, src->dtype, k < K ? n : 0, c);
          __m256i hi = load16(s1 + w * es, src->dtype, k + 1 < K ? n : 0, c);
          _mm512_mask_storeu_epi32(d + i, first_n(width - i), interleave16(lo, hi));
        }
      }
    }
  }
}

TPU_AVX512 static void pack_rows_f32(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
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
        for (int i = 0; i < width; i += 16) {
          int64_t w = pi * width + i;
          int n = W - w >= 16 ? 16 : (int)(W - w);
          __m512 v = _mm512_setzero_ps();
          if (n > 0 && s) v = component16_f32(load16_f32(s + w * es, NULL, src->dtype, n), c);
          _mm512_storeu_ps(d + i, v);
        }
      }
    }
  }
}

bool tpu_gemm_pack_rows_bf16_avx512(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                    int64_t kpass, int64_t kb, int64_t ke, void *dst,
                                    int64_t panel_stride) {
  if (src->w->offsets || src->w->stride != 1 || width > 64) return false;
  if (!tpu_cpu_features()->avx512_bf16 || (src->dtype != TPU_F32 && src->dtype != TPU_BF16)) {
    return false;
  }
  pack_rows_bf16(src, width, npanels, kpass, kb, ke, dst, panel_stride);
  return true;
}

bool tpu_gemm_pack_rows_f32_avx512(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                   int64_t kpass, int64_t kb, int64_t ke, void *dst,
                                   int64_t panel_stride) {
  if (src->w->offsets || src->w->stride != 1 || width % 16 != 0) return false;
  if (!tpu_cpu_features()->avx512f ||
      (src->dtype != TPU_F32 && src->dtype != TPU_BF16 && src->dtype != TPU_F16)) {
    return false;
  }
  pack_rows_f32(src, width, npanels, kpass, kb, ke, dst, panel_stride);
  return true;
}

const tpu_gemm_kernel_t tpu_gemm_kernel_avx512_bf16 = {
    "avx512_bf16", TPU_GEMM_FORMAT_BF16, MR, NR, 256, 112, 512, ukernel_bf16_14x32,
    tpu_gemm_pack_panel_bf16_avx512, tpu_gemm_pack_rows_bf16_avx512, ukernel_bf16_rows,
    add_bias_avx512, ukernel_bf16_14x32_bias,
};
const tpu_gemm_kernel_t tpu_gemm_kernel_avx512 = {
    "avx512", TPU_GEMM_FORMAT_F32, MR, NR, 512, 224, 512, ukernel_f32_14x32,
    tpu_gemm_pack_panel_f32_avx512, tpu_gemm_pack_rows_f32_avx512, NULL, add_bias_avx512, NULL,
};

bool tpu_gemm_have_x86_kernels(void) { return true; }

#else /* not x86-64 GCC/Clang: the portable kernel only */

bool tpu_gemm_pack_panel_bf16_avx512(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                     int64_t kpass, int64_t kb, int64_t ke, void *dst) {
  (void)src, (void)w0, (void)width, (void)kpass, (void)kb, (void)ke, (void)dst;
  return false;
}
bool tpu_gemm_pack_panel_f32_avx512(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                    int64_t kpass, int64_t kb, int64_t ke, void *dst) {
  (void)src, (void)w0, (void)width, (void)kpass, (void)kb, (void)ke, (void)dst;
  return false;
}

bool tpu_gemm_pack_rows_bf16_avx512(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                    int64_t kpass, int64_t kb, int64_t ke, void *dst,
                                    int64_t panel_stride) {
  (void)src, (void)width, (void)npanels, (void)kpass, (void)kb, (void)ke, (void)dst;
  (void)panel_stride;
  return false;
}
bool tpu_gemm_pack_rows_f32_avx512(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                   int64_t kpass, int64_t kb, int64_t ke, void *dst,
                                   int64_t panel_stride) {
  (void)src, (void)width, (void)npanels, (void)kpass, (void)kb, (void)ke, (void)dst;
  (void)panel_stride;
  return false;
}

const tpu_gemm_kernel_t tpu_gemm_kernel_avx512_bf16 = {
    "avx512_bf16", TPU_GEMM_FORMAT_F32, 4, 16, 256, 64, 256, NULL, NULL, NULL, NULL, NULL,
    NULL,
};
const tpu_gemm_kernel_t tpu_gemm_kernel_avx512 = {
    "avx512", TPU_GEMM_FORMAT_F32, 4, 16, 256, 64, 256, NULL, NULL, NULL, NULL, NULL, NULL,
};
bool tpu_gemm_have_x86_kernels(void) { return false; }

#endif
