/* reduce_avx2.c: AVX2 reduction kernels behind tpu_reduce_isa_t (see reduce_internal.h).
 *
 * Compiled for AVX2+FMA+F16C with a target pragma and only called when tpu_cpu_features()
 * reports avx2_fma. Same structure as reduce_avx512.c with 8-lane vectors: rows use 8 ymm
 * accumulators, short rows (softmax, layer norm) go 8 at a time with their horizontal
 * folds transposed together, columns take 64 columns (8 ymm) at a time down the rows (a
 * tile is at most 128 wide). Tails go through a small identity-padded buffer. MAX/MIN track
 * NaN with an unordered compare.
 */
#include <math.h>

#include "vtpu/kernels/reduce_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

static inline __m256 ld_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 ld_bf16(const uint16_t *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
/* The first |n| < 8 elements, the rest filled with |id|. */
static inline __m256 ldt_f32(const float *p, int64_t n, float id) {
  float t[8];
  for (int i = 0; i < 8; i++) t[i] = i < n ? p[i] : id;
  return _mm256_loadu_ps(t);
}
static inline __m256 ldt_bf16(const uint16_t *p, int64_t n, float id) {
  float t[8];
  for (int i = 0; i < 8; i++) t[i] = i < n ? tpu_bf16_to_f32(p[i]) : id;
  return _mm256_loadu_ps(t);
}

#define OP_SUM(a, v) _mm256_add_ps((a), (v))
#define OP_PROD(a, v) _mm256_mul_ps((a), (v))
#define OP_MAX(a, v) _mm256_max_ps((v), (a)) /* keeps a NaN already in a */
#define OP_MIN(a, v) _mm256_min_ps((v), (a))
#define NAN_NONE(m, v) ((void)0)
#define NAN_TRACK(m, v) ((m) = _mm256_or_ps((m), _mm256_cmp_ps((v), (v), _CMP_UNORD_Q)))

static inline float hfold(tpu_reduce_kind_t kind, __m256 v) {
  float t[8];
  _mm256_storeu_ps(t, v);
  for (int w = 4; w >= 1; w /= 2) {
    for (int i = 0; i < w; i++) t[i] = tpu_reduce_combine_f32(kind, t[i], t[i + w]);
  }
  return t[0];
}

/* One row's 8-lane partial |acc| before the horizontal fold, and in |nanm| a lane mask of
 * the NaNs MAX/MIN met. */
#define ROW_PARTIAL(OP, NANCHK, LD, LDT, acc, nanm)                                    \
  {                                                                                    \
    __m256 a0 = id, a1 = id, a2 = id, a3 = id, a4 = id, a5 = id, a6 = id, a7 = id;     \
    int64_t i = 0;                                                                     \
    for (; i + 64 <= n; i += 64) {                                                     \
      __m256 v0 = LD(x + i), v1 = LD(x + i + 8), v2 = LD(x + i + 16);                  \
      __m256 v3 = LD(x + i + 24), v4 = LD(x + i + 32), v5 = LD(x + i + 40);            \
      __m256 v6 = LD(x + i + 48), v7 = LD(x + i + 56);                                 \
      NANCHK(nanm, v0); NANCHK(nanm, v1); NANCHK(nanm, v2); NANCHK(nanm, v3);          \
      NANCHK(nanm, v4); NANCHK(nanm, v5); NANCHK(nanm, v6); NANCHK(nanm, v7);          \
      a0 = OP(a0, v0); a1 = OP(a1, v1); a2 = OP(a2, v2); a3 = OP(a3, v3);              \
      a4 = OP(a4, v4); a5 = OP(a5, v5); a6 = OP(a6, v6); a7 = OP(a7, v7);              \
    }                                                                                  \
    for (; i + 8 <= n; i += 8) {                                                       \
      __m256 v = LD(x + i);                                                            \
      NANCHK(nanm, v);                                                                 \
      a0 = OP(a0, v);                                                                  \
    }                                                                                  \
    if (i < n) {                                                                       \
      __m256 v = LDT(x + i, n - i, idf);                                               \
      NANCHK(nanm, v);                                                                 \
      a1 = OP(a1, v);                                                                  \
    }                                                                                  \
    a0 = OP(a0, a4); a1 = OP(a1, a5); a2 = OP(a2, a6); a3 = OP(a3, a7);                \
    a0 = OP(a0, a2); a1 = OP(a1, a3);                                                  \
    acc = OP(a0, a1);                                                                  \
  }

#define ROW_BODY(OP, NANCHK, LD, LDT)                                                  \
  {                                                                                    \
    __m256 acc, nanm = _mm256_setzero_ps();                                            \
    ROW_PARTIAL(OP, NANCHK, LD, LDT, acc, nanm)                                        \
    if (_mm256_movemask_ps(nanm)) return NAN;                                          \
    return hfold(kind, acc);                                                           \
  }

#define ROW_KERNEL(NAME, T, LD, LDT)                                                   \
  static float NAME(tpu_reduce_kind_t kind, const T *x, int64_t n) {                  \
    const float idf = tpu_reduce_identity_f32(kind);                                   \
    const __m256 id = _mm256_set1_ps(idf);                                             \
    switch (kind) {                                                                    \
      case TPU_REDUCE_SUM: ROW_BODY(OP_SUM, NAN_NONE, LD, LDT)                         \
      case TPU_REDUCE_PROD: ROW_BODY(OP_PROD, NAN_NONE, LD, LDT)                       \
      case TPU_REDUCE_MAX: ROW_BODY(OP_MAX, NAN_TRACK, LD, LDT)                        \
      case TPU_REDUCE_MIN: ROW_BODY(OP_MIN, NAN_TRACK, LD, LDT)                        \
      default: return 0.0f;                                                            \
    }                                                                                  \
  }

ROW_KERNEL(row_f32, float, ld_f32, ldt_f32)
ROW_KERNEL(row_bf16, uint16_t, ld_bf16, ldt_bf16)

/* Short rows (n < 128), 8 at a time. Each row's partial is ROW_PARTIAL's, as row_f32 has
 * it; the 8 horizontal folds then run together as one transpose-and-fold. hfold folds
 * lane i op lane i + 4, then i op i + 2, then 0 op 1 (the lower lane the first operand,
 * which matters for MAX/MIN of +0 and -0), and so does each level here with two rows'
 * lanes side by side in a register: 7 vector ops and 15 shuffles for 8 rows instead of 8
 * stores and 56 scalar combines. */
#define ROWS_BODY(OP, NANCHK)                                                          \
  {                                                                                    \
    for (int r0 = 0; r0 < nrows; r0 += 8) {                                            \
      __m256 part[8];                                                                  \
      unsigned nanrows = 0;                                                            \
      for (int r = 0; r < 8; r++) {                                                    \
        part[r] = id;                                                                  \
        if (r0 + r >= nrows) continue;                                                 \
        const float *x = rows + (r0 + r) * ld;                                         \
        __m256 nanm = _mm256_setzero_ps();                                             \
        ROW_PARTIAL(OP, NANCHK, ld_f32, ldt_f32, part[r], nanm)                        \
        if (_mm256_movemask_ps(nanm)) nanrows |= 1u << r;                              \
      }                                                                                \
      __m256 s[4], q[2];                                                               \
      for (int k = 0; k < 4; k++) { /* 128-bit half h: row 2k + h, lanes 4..7 op 0..3 */ \
        s[k] = OP(_mm256_permute2f128_ps(part[2 * k], part[2 * k + 1], 0x20),          \
                  _mm256_permute2f128_ps(part[2 * k], part[2 * k + 1], 0x31));         \
      }                                                                                \
      for (int k = 0; k < 2; k++) { /* lane j op lane j + 2 */                         \
        q[k] = OP(_mm256_shuffle_ps(s[2 * k], s[2 * k + 1], 0x44),                     \
                  _mm256_shuffle_ps(s[2 * k], s[2 * k + 1], 0xEE));                    \
      }                                                                                \
      /* lane 0 op lane 1: rows 0, 2, 4, 6 in the low half, 1, 3, 5, 7 in the high */  \
      __m256 f = OP(_mm256_shuffle_ps(q[0], q[1], 0x88),                               \
                    _mm256_shuffle_ps(q[0], q[1], 0xDD));                              \
      f = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));      \
      float res[8];                                                                    \
      _mm256_storeu_ps(res, f);                                                        \
      for (int r = 0; r < 8 && r0 + r < nrows; r++) {                                  \
        out[(r0 + r) * os] = (nanrows >> r) & 1 ? NAN : res[r];                        \
      }                                                                                \
    }                                                                                  \
    return;                                                                            \
  }

static void rows_f32(tpu_reduce_kind_t kind, const float *rows, int64_t ld, int nrows,
                     int64_t n, float *out, int64_t os) {
  const float idf = tpu_reduce_identity_f32(kind);
  const __m256 id = _mm256_set1_ps(idf);
  switch (kind) {
    case TPU_REDUCE_SUM: ROWS_BODY(OP_SUM, NAN_NONE)
    case TPU_REDUCE_PROD: ROWS_BODY(OP_PROD, NAN_NONE)
    case TPU_REDUCE_MAX: ROWS_BODY(OP_MAX, NAN_TRACK)
    case TPU_REDUCE_MIN: ROWS_BODY(OP_MIN, NAN_TRACK)
    default: return;
  }
}

/* Columns: 64 at a time in 8 registers, then 8 at a time, then a padded tail vector. */
#define COL_STEP(k, OP, NANCHK, LD)                                                    \
  {                                                                                    \
    __m256 v = LD(row + 8 * (k));                                                      \
    NANCHK(n##k, v);                                                                   \
    a##k = OP(a##k, v);                                                                \
  }
#define COL_BODY(OP, NANCHK, LD, LDT, T)                                               \
  {                                                                                    \
    int64_t j = 0;                                                                     \
    for (; j + 64 <= w; j += 64) {                                                     \
      float *c = acc + j;                                                              \
      __m256 a0 = _mm256_loadu_ps(c), a1 = _mm256_loadu_ps(c + 8);                     \
      __m256 a2 = _mm256_loadu_ps(c + 16), a3 = _mm256_loadu_ps(c + 24);              \
      __m256 a4 = _mm256_loadu_ps(c + 32), a5 = _mm256_loadu_ps(c + 40);               \
      __m256 a6 = _mm256_loadu_ps(c + 48), a7 = _mm256_loadu_ps(c + 56);               \
      __m256 n0 = _mm256_setzero_ps(), n1 = n0, n2 = n0, n3 = n0, n4 = n0, n5 = n0;    \
      __m256 n6 = n0, n7 = n0;                                                         \
      for (int64_t r = 0; r < rows; r++) {                                             \
        const T *row = x + r * ld + j;                                                 \
        COL_STEP(0, OP, NANCHK, LD) COL_STEP(1, OP, NANCHK, LD)                        \
        COL_STEP(2, OP, NANCHK, LD) COL_STEP(3, OP, NANCHK, LD)                        \
        COL_STEP(4, OP, NANCHK, LD) COL_STEP(5, OP, NANCHK, LD)                        \
        COL_STEP(6, OP, NANCHK, LD) COL_STEP(7, OP, NANCHK, LD)                        \
      }                                                                                \
      const __m256 qnan = _mm256_set1_ps(NAN);                                         \
      _mm256_storeu_ps(c, _mm256_blendv_ps(a0, qnan, n0));                             \
      _mm256_storeu_ps(c + 8, _mm256_blendv_ps(a1, qnan, n1));                         \
      _mm256_storeu_ps(c + 16, _mm256_blendv_ps(a2, qnan, n2));                        \
      _mm256_storeu_ps(c + 24, _mm256_blendv_ps(a3, qnan, n3));                        \
      _mm256_storeu_ps(c + 32, _mm256_blendv_ps(a4, qnan, n4));                        \
      _mm256_storeu_ps(c + 40, _mm256_blendv_ps(a5, qnan, n5));                        \
      _mm256_storeu_ps(c + 48, _mm256_blendv_ps(a6, qnan, n6));                        \
      _mm256_storeu_ps(c + 56, _mm256_blendv_ps(a7, qnan, n7));                        \
    }                                                                                  \
    for (; j < w; j += 8) {                                                            \
      int64_t left = w - j < 8 ? w - j : 8;                                            \
      __m256 a = ldt_f32(acc + j, left, 0.0f);                                             \
      __m256 nm = _mm256_setzero_ps();                                                 \
      for (int64_t r = 0; r < rows; r++) {                                             \
        const T *row = x + r * ld + j;                                                 \
        __m256 v = left == 8 ? LD(row) : LDT(row, left, idf);                          \
        NANCHK(nm, v);                                                                 \
        a = OP(a, v);                                                                  \
      }                                                                                \
      float t[8];                                                                      \
      _mm256_storeu_ps(t, _mm256_blendv_ps(a, _mm256_set1_ps(NAN), nm));              \
      for (int64_t k = 0; k < left; k++) acc[j + k] = t[k];                            \
    }                                                                                  \
    return;                                                                            \
  }

#define COL_KERNEL(NAME, T, LD, LDT)                                                   \
  static void NAME(tpu_reduce_kind_t kind, const T *x, int64_t ld, int64_t rows,      \
                   int64_t w, float *acc) {                                            \
    const float idf = tpu_reduce_identity_f32(kind);                                   \
    switch (kind) {                                                                    \
      case TPU_REDUCE_SUM: COL_BODY(OP_SUM, NAN_NONE, LD, LDT, T)                      \
      case TPU_REDUCE_PROD: COL_BODY(OP_PROD, NAN_NONE, LD, LDT, T)                    \
      case TPU_REDUCE_MAX: COL_BODY(OP_MAX, NAN_TRACK, LD, LDT, T)                     \
      case TPU_REDUCE_MIN: COL_BODY(OP_MIN, NAN_TRACK, LD, LDT, T)                     \
      default: return;                                                                 \
    }                                                                                  \
  }

COL_KERNEL(col_f32, float, ld_f32, ldt_f32)
COL_KERNEL(col_bf16, uint16_t, ld_bf16, ldt_bf16)

static void f16_to_f32(const uint16_t *x, int64_t n, float *out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
  }
  for (; i < n; i++) out[i] = tpu_f16_to_f32(x[i]);
}

static const tpu_reduce_isa_t kAvx2 = {
    .name = "avx2",
    .row_f32 = row_f32,
    .row_bf16 = row_bf16,
    .rows_f32 = rows_f32,
    .col_f32 = col_f32,
    .col_bf16 = col_bf16,
    .f16_to_f32 = f16_to_f32,
};

#pragma GCC pop_options

const tpu_reduce_isa_t *tpu_reduce_isa_avx2(void) { return &kAvx2; }

#else

const tpu_reduce_isa_t *tpu_reduce_isa_avx2(void) { return NULL; }

#endif
