/* reduce_avx512.c: AVX-512 reduction kernels behind tpu_reduce_isa_t (see reduce_internal.h).
 *
 * Compiled for AVX-512 with a target pragma (the rest of the library stays baseline x86-64)
 * and only called when tpu_cpu_features() reports avx512f (+bw, vl, dq).
 * Rows: 8 zmm accumulators (128 f32 lanes) per block, folded as a tree; short rows 16 at a
 * time with their horizontal folds done together (same bits). MAX/MIN track NaN
 * with an unordered-compare mask, since vmaxps/vminps do not propagate NaN.
 * Columns: a tile (up to 128 columns) lives in 8 zmm registers while rows stream by.
 */
#include <math.h>

#include "vtpu/kernels/reduce_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#include <immintrin.h>

static inline __m512 ld_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 ldm_f32(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline __m512 ld_bf16(const uint16_t *p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline __m512 ldm_bf16(const uint16_t *p, __mmask16 m) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* acc op v; MAX/MIN keep a NaN already in acc (vmaxps returns its second operand). */
#define OP_SUM(a, v) _mm512_add_ps((a), (v))
#define OP_PROD(a, v) _mm512_mul_ps((a), (v))
#define OP_MAX(a, v) _mm512_max_ps((v), (a))
#define OP_MIN(a, v) _mm512_min_ps((v), (a))
#define NAN_NONE(v) ((void)0)
#define NAN_TRACK(v) (nanm |= _mm512_cmp_ps_mask((v), (v), _CMP_UNORD_Q))

/* Main loops, 128 elements per step into 8 accumulators. f32: 8 loads. bf16: 4 loads of
 * 32 bf16 each; a 32-bit lane holds two bf16 values, the even one becomes an f32 by a left
 * shift and the odd one by masking the low half (no cross-lane widening needed). */
#define MAIN_F32(OP, NANCHK)                                                           \
  for (; i + 128 <= n; i += 128) {                                                     \
    __m512 v0 = ld_f32(x + i), v1 = ld_f32(x + i + 16), v2 = ld_f32(x + i + 32);       \
    __m512 v3 = ld_f32(x + i + 48), v4 = ld_f32(x + i + 64), v5 = ld_f32(x + i + 80);  \
    __m512 v6 = ld_f32(x + i + 96), v7 = ld_f32(x + i + 112);                          \
    NANCHK(v0); NANCHK(v1); NANCHK(v2); NANCHK(v3);                                    \
    NANCHK(v4); NANCHK(v5); NANCHK(v6); NANCHK(v7);                                    \
    a0 = OP(a0, v0); a1 = OP(a1, v1); a2 = OP(a2, v2); a3 = OP(a3, v3);                \
    a4 = OP(a4, v4); a5 = OP(a5, v5); a6 = OP(a6, v6); a7 = OP(a7, v7);                \
  }
#define BF16_EVEN(w) _mm512_castsi512_ps(_mm512_slli_epi32((w), 16))
#define BF16_ODD(w) _mm512_castsi512_ps(_mm512_and_si512((w), hi16))
#define MAIN_BF16(OP, NANCHK)                                                          \
  const __m512i hi16 = _mm512_set1_epi32((int)0xFFFF0000u);                            \
  for (; i + 128 <= n; i += 128) {                                                     \
    __m512i w0 = _mm512_loadu_si512(x + i), w1 = _mm512_loadu_si512(x + i + 32);       \
    __m512i w2 = _mm512_loadu_si512(x + i + 64), w3 = _mm512_loadu_si512(x + i + 96);  \
    __m512 v0 = BF16_EVEN(w0), v1 = BF16_ODD(w0), v2 = BF16_EVEN(w1);                  \
    __m512 v3 = BF16_ODD(w1), v4 = BF16_EVEN(w2), v5 = BF16_ODD(w2);                   \
    __m512 v6 = BF16_EVEN(w3), v7 = BF16_ODD(w3);                                      \
    NANCHK(v0); NANCHK(v1); NANCHK(v2); NANCHK(v3);                                    \
    NANCHK(v4); NANCHK(v5); NANCHK(v6); NANCHK(v7);                                    \
    a0 = OP(a0, v0); a1 = OP(a1, v1); a2 = OP(a2, v2); a3 = OP(a3, v3);                \
    a4 = OP(a4, v4); a5 = OP(a5, v5); a6 = OP(a6, v6); a7 = OP(a7, v7);                \
  }

/* The body of a row kernel for one kind: the main loop, a 16-wide loop, a masked tail. */
#define ROW_BODY(OP, NANCHK, LD, LDM, HREDUCE, MAIN)                                    \
  {                                                                                    \
    __m512 a0 = id, a1 = id, a2 = id, a3 = id, a4 = id, a5 = id, a6 = id, a7 = id;     \
    __mmask16 nanm = 0;                                                                \
    int64_t i = 0;                                                                     \
    MAIN(OP, NANCHK)                                                                   \
    for (; i + 16 <= n; i += 16) {                                                     \
      __m512 v = LD(x + i);                                                            \
      NANCHK(v);                                                                       \
      a0 = OP(a0, v);                                                                  \
    }                                                                                  \
    if (i < n) {                                                                       \
      __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                                 \
      __m512 v = _mm512_mask_blend_ps(m, id, LDM(x + i, m));                           \
      NANCHK(v);                                                                       \
      a1 = OP(a1, v);                                                                  \
    }                                                                                  \
    a0 = OP(a0, a4); a1 = OP(a1, a5); a2 = OP(a2, a6); a3 = OP(a3, a7);                \
    a0 = OP(a0, a2); a1 = OP(a1, a3); a0 = OP(a0, a1);                                 \
    (void)nanm;                                                                        \
    if (nanm) return NAN;                                                              \
    return HREDUCE(a0);                                                                \
  }

#define ROW_KERNEL(NAME, T, LD, LDM, MAIN)                                             \
  static float NAME(tpu_reduce_kind_t kind, const T *x, int64_t n) {                  \
    const __m512 id = _mm512_set1_ps(tpu_reduce_identity_f32(kind));                  \
    switch (kind) {                                                                    \
      case TPU_REDUCE_SUM: ROW_BODY(OP_SUM, NAN_NONE, LD, LDM, _mm512_reduce_add_ps, MAIN) \
      case TPU_REDUCE_PROD: ROW_BODY(OP_PROD, NAN_NONE, LD, LDM, _mm512_reduce_mul_ps, MAIN) \
      case TPU_REDUCE_MAX: ROW_BODY(OP_MAX, NAN_TRACK, LD, LDM, _mm512_reduce_max_ps, MAIN) \
      case TPU_REDUCE_MIN: ROW_BODY(OP_MIN, NAN_TRACK, LD, LDM, _mm512_reduce_min_ps, MAIN) \
      default: return 0.0f;                                                            \
    }                                                                                  \
  }

ROW_KERNEL(row_f32, float, ld_f32, ldm_f32, MAIN_F32)
ROW_KERNEL(row_bf16, uint16_t, ld_bf16, ldm_bf16, MAIN_BF16)

/* Short rows (n < 128), up to 16 at a time. Each row's 16-lane partial is ROW_BODY's
 * exactly (no main loop below 128; the same ops on the same identity registers). The 16
 * horizontal folds then run together as one transpose-and-fold: _mm512_reduce_*_ps folds
 * upper 8 lanes op lower 8, upper 4 op lower 4, lane j op lane j + 2, lane 0 op lane 1
 * (operands in that order, which matters for MAX/MIN of +0 and -0), and so does each
 * level here with two rows' lanes side by side in a register: 15 vector ops and 30
 * shuffles for 16 rows instead of 16 dependent chains. */
#define RFOLD_SUM(a, b) _mm512_add_ps((a), (b))
#define RFOLD_PROD(a, b) _mm512_mul_ps((a), (b))
#define RFOLD_MAX(a, b) _mm512_max_ps((a), (b))
#define RFOLD_MIN(a, b) _mm512_min_ps((a), (b))
#define ROWS_BODY(OP, NANCHK, FOLD)                                                    \
  {                                                                                    \
    __m512 v[16];                                                                      \
    uint32_t nanrows = 0;                                                              \
    for (int r = 0; r < 16; r++) {                                                     \
      if (r >= nrows) {                                                                \
        v[r] = id;                                                                     \
        continue;                                                                      \
      }                                                                                \
      const float *xr = x + r * ld;                                                    \
      __m512 a0 = id, a1 = id;                                                         \
      __mmask16 nanm = 0;                                                              \
      int64_t i = 0;                                                                   \
      for (; i + 16 <= n; i += 16) {                                                   \
        __m512 t = ld_f32(xr + i);                                                     \
        NANCHK(t);                                                                     \
        a0 = OP(a0, t);                                                                \
      }                                                                                \
      if (i < n) {                                                                     \
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                               \
        __m512 t = _mm512_mask_blend_ps(m, id, ldm_f32(xr + i, m));                    \
        NANCHK(t);                                                                     \
        a1 = OP(a1, t);                                                                \
      }                                                                                \
      __m512 a2 = OP(id, id), a3 = OP(id, id);                                         \
      a0 = OP(a0, id); a1 = OP(a1, id);                                                \
      a0 = OP(a0, a2); a1 = OP(a1, a3); a0 = OP(a0, a1);                               \
      (void)nanm;                                                                      \
      if (nanm) nanrows |= 1u << r;                                                    \
      v[r] = a0;                                                                       \
    }                                                                                  \
    __m512 s[8], q[4], w[2];                                                           \
    for (int k = 0; k < 8; k++) { /* rows 2k, 2k+1: lanes 8..15 op 0..7 */            \
      s[k] = FOLD(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE),                  \
                  _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44));                 \
    }                                                                                  \
    for (int k = 0; k < 4; k++) { /* 128-bit chunk c: row 4k + c, lanes 4..7 op 0..3 */ \
      q[k] = FOLD(_mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], 0xDD),                  \
                  _mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], 0x88));                 \
    }                                                                                  \
    for (int k = 0; k < 2; k++) { /* lane j op lane j + 2 */                           \
      w[k] = FOLD(_mm512_shuffle_ps(q[2 * k], q[2 * k + 1], 0x44),                     \
                  _mm512_shuffle_ps(q[2 * k], q[2 * k + 1], 0xEE));                    \
    }                                                                                  \
    /* lane 0 op lane 1; lane 4c + t then holds row c + 4t */                          \
    __m512 f = FOLD(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD)); \
    f = _mm512_permutexvar_ps(                                                         \
        _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), f);    \
    f = _mm512_mask_mov_ps(f, (__mmask16)nanrows, _mm512_set1_ps(NAN));                \
    if (os == 1) {                                                                     \
      _mm512_mask_storeu_ps(out, (__mmask16)((1u << nrows) - 1u), f);                 \
    } else {                                                                           \
      float res[16];                                                                   \
      _mm512_storeu_ps(res, f);                                                        \
      for (int r = 0; r < nrows; r++) out[r * os] = res[r];                            \
    }                                                                                  \
    return;                                                                            \
  }

static void rows_f32(tpu_reduce_kind_t kind, const float *x, int64_t ld, int nrows, int64_t n,
                     float *out, int64_t os) {
  const __m512 id = _mm512_set1_ps(tpu_reduce_identity_f32(kind));
  switch (kind) {
    case TPU_REDUCE_SUM: ROWS_BODY(OP_SUM, NAN_NONE, RFOLD_SUM)
    case TPU_REDUCE_PROD: ROWS_BODY(OP_PROD, NAN_NONE, RFOLD_PROD)
    case TPU_REDUCE_MAX: ROWS_BODY(OP_MAX, NAN_TRACK, RFOLD_MAX)
    case TPU_REDUCE_MIN: ROWS_BODY(OP_MIN, NAN_TRACK, RFOLD_MIN)
    default: return;
  }
}

/* Columns, full 128-wide tile: acc in 8 named registers, one NaN mask per register. */
#define COL_LOAD_ACC(k) __m512 a##k = _mm512_loadu_ps(acc + 16 * (k)); __mmask16 n##k = 0;
#define COL_STEP(k, OP, NANCHK, LD)                                                    \
  {                                                                                    \
    __m512 v = LD(row + 16 * (k));                                                     \
    NANCHK(n##k, v);                                                                   \
    a##k = OP(a##k, v);                                                                \
  }
#define COL_STORE(k)                                                                   \
  _mm512_storeu_ps(acc + 16 * (k), _mm512_mask_mov_ps(a##k, n##k, _mm512_set1_ps(NAN)));
#define COL_REP8(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define COL_FULL(OP, NANCHK, LD, T)                                                    \
  {                                                                                    \
    COL_REP8(COL_LOAD_ACC)                                                             \
    for (int64_t r = 0; r < rows; r++) {                                               \
      const T *row = x + r * ld;                                                       \
      COL_STEP(0, OP, NANCHK, LD) COL_STEP(1, OP, NANCHK, LD)                          \
      COL_STEP(2, OP, NANCHK, LD) COL_STEP(3, OP, NANCHK, LD)                          \
      COL_STEP(4, OP, NANCHK, LD) COL_STEP(5, OP, NANCHK, LD)                          \
      COL_STEP(6, OP, NANCHK, LD) COL_STEP(7, OP, NANCHK, LD)                          \
    }                                                                                  \
    COL_REP8(COL_STORE)                                                                \
    return;                                                                            \
  }

/* Columns, any width: one 16-lane vector at a time down all rows. */
#define COL_PART(OP, NANCHK, LDM)                                                      \
  {                                                                                    \
    for (int64_t j = 0; j < w; j += 16) {                                              \
      int64_t left = w - j < 16 ? w - j : 16;                                          \
      __mmask16 m = (__mmask16)((1u << left) - 1u);                                    \
      __m512 a = _mm512_maskz_loadu_ps(m, acc + j);                                    \
      __mmask16 nmask = 0;                                                             \
      for (int64_t r = 0; r < rows; r++) {                                             \
        __m512 v = _mm512_mask_blend_ps(m, id, LDM(x + r * ld + j, m));                \
        NANCHK(nmask, v);                                                              \
        a = OP(a, v);                                                                  \
      }                                                                                \
      a = _mm512_mask_mov_ps(a, nmask, _mm512_set1_ps(NAN));                           \
      _mm512_mask_storeu_ps(acc + j, m, a);                                            \
    }                                                                                  \
    return;                                                                            \
  }

#define CNAN_NONE(m, v) ((void)0)
#define CNAN_TRACK(m, v) ((m) |= _mm512_cmp_ps_mask((v), (v), _CMP_UNORD_Q))

#define COL_KERNEL(NAME, T, LD, LDM)                                                   \
  static void NAME(tpu_reduce_kind_t kind, const T *x, int64_t ld, int64_t rows,      \
                   int64_t w, float *acc) {                                            \
    const __m512 id = _mm512_set1_ps(tpu_reduce_identity_f32(kind));                  \
    (void)id;                                                                          \
    if (w == 128) {                                                                    \
      switch (kind) {                                                                  \
        case TPU_REDUCE_SUM: COL_FULL(OP_SUM, CNAN_NONE, LD, T)                           \
        case TPU_REDUCE_PROD: COL_FULL(OP_PROD, CNAN_NONE, LD, T)                         \
        case TPU_REDUCE_MAX: COL_FULL(OP_MAX, CNAN_TRACK, LD, T)                          \
        case TPU_REDUCE_MIN: COL_FULL(OP_MIN, CNAN_TRACK, LD, T)                          \
        default: return;                                                               \
      }                                                                                \
    }                                                                                  \
    switch (kind) {                                                                    \
      case TPU_REDUCE_SUM: COL_PART(OP_SUM, CNAN_NONE, LDM)                            \
      case TPU_REDUCE_PROD: COL_PART(OP_PROD, CNAN_NONE, LDM)                          \
      case TPU_REDUCE_MAX: COL_PART(OP_MAX, CNAN_TRACK, LDM)                           \
      case TPU_REDUCE_MIN: COL_PART(OP_MIN, CNAN_TRACK, LDM)                           \
      default: return;                                                                 \
    }                                                                                  \
  }

COL_KERNEL(col_f32, float, ld_f32, ldm_f32)
COL_KERNEL(col_bf16, uint16_t, ld_bf16, ldm_bf16)

static void f16_to_f32(const uint16_t *x, int64_t n, float *out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
  }
  for (; i < n; i++) out[i] = tpu_f16_to_f32(x[i]);
}

static const tpu_reduce_isa_t kAvx512 = {
    .name = "avx512",
    .row_f32 = row_f32,
    .row_bf16 = row_bf16,
    .rows_f32 = rows_f32,
    .col_f32 = col_f32,
    .col_bf16 = col_bf16,
    .f16_to_f32 = f16_to_f32,
};

#pragma GCC pop_options

const tpu_reduce_isa_t *tpu_reduce_isa_avx512(void) { return &kAvx512; }

#else

const tpu_reduce_isa_t *tpu_reduce_isa_avx512(void) { return NULL; }

#endif
