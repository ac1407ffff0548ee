/* gemm_small_avx512.c: the small-matrix path of the bf16 GEMM on AVX512-BF16, for batches
 * of small matrices (M <= 64, N <= 32, at most 64 packed k steps: attention's q @ k^T and
 * att @ v at 32 x 32 x 16), where the blocked driver's per-batch panel packing, edge
 * tiles and task bookkeeping cost more than the multiplies themselves.
 *
 * Per batch, both operands are converted to bf16 pairs (u32: pair (k, k+1), low half k)
 * in the layout their source makes cheap, then multiplied from there:
 *   A  k contiguous: (M, Q) pairs, row by row (a row's bf16 values are its pairs);
 *      M contiguous: (Q, M) pairs, source rows k and k+1 interleaved;
 *   B  N contiguous: (Q, N) pairs, rows k and k+1 interleaved;
 *      k contiguous: (N, Q) pairs row by row, then transposed into (Q, N) (in registers
 *      for Q <= 8, e.g. head dim 16; with gathers above).
 * Q counts packed k steps exactly as the blocked path does (gemm_kernels.h): pass-major,
 * each pass's K rounded up to even with a zero. A register-blocked kernel keeps R rows x
 * 16 or 32 columns of C in zmm accumulators (R <= 28 or 14; M is split into near-equal
 * row blocks) and stores them straight into C (f32, unit column stride) or through a
 * tile otherwise. Each element of C is the same chain of vdpbf16ps from zero over
 * q = 0 .. Q-1 on the same pairs as in the blocked path's (14, 32) micro-kernel, so the
 * results are the same bits.
 */
#include "gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "gemm_avx512_inl.h"

#define SM_MAXM 64 /* rows of C */
#define SM_MAXN 32 /* columns of C */
#define SM_MAXQ 64 /* packed k steps (pairs over all passes) */

typedef struct small_ctx {
  const tpu_gemm_t *g;
  int64_t M, N, K, kpass, Q;
  int passes;
  bool a_kc;     /* A packed (M, Q) from k-contiguous rows; else (Q, M) */
  bool b_kc;     /* B k-contiguous: (N, Q) then gathered; else (Q, N) directly */
  bool c_direct; /* C f32 with unit column stride and affine rows */
} small_ctx;

/* ---- conversion into bf16 pairs ------------------------------------------------------------ */

/* W rows (element stride |ws| between rows), each K contiguous values, into (W, rs) u32
 * pairs: row w's u16 entries p * kpass + k for every pass p (zero for k >= K). */
TPU_AVX512BF16 static void pairs_by_row(const char *base, tpu_dtype_t dt, int64_t ws, int64_t W,
                                        int64_t K, int64_t kpass, int passes, const int8_t *comp,
                                        uint32_t *dst, int64_t rs) {
  int64_t es = (int64_t)tpu_dtype_size(dt);
  if (dt == TPU_F32 && passes == 1 && comp[0] == 0) { /* one DEFAULT pass: 32 values a step */
    const float *f = (const float *)(const void *)base;
    for (int64_t k = 0; k < kpass; k += 32) {
      __mmask16 mlo = first_n((int)(K - k)), mhi = first_n((int)(K - k - 16));
      int left = (int)(kpass - k);
      __mmask32 m = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1u);
      for (int64_t w = 0; w < W; w++) {
        const float *row = f + w * ws + k;
        __m512 lo = _mm512_maskz_loadu_ps(mlo, row), hi = _mm512_maskz_loadu_ps(mhi, row + 16);
        _mm512_mask_storeu_epi16((uint16_t *)(void *)(dst + w * rs) + k, m,
                                 (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
    }
    return;
  }
  for (int64_t w = 0; w < W; w++) {
    const char *row = base + w * ws * es;
    uint16_t *d = (uint16_t *)(void *)(dst + w * rs);
    for (int p = 0; p < passes; p++) {
      for (int64_t k = 0; k < kpass; k += 16) {
        int n = K - k >= 16 ? 16 : (int)(K - k);
        __m256i v = n > 0 ? load16(row + k * es, dt, n, comp[p]) : _mm256_setzero_si256();
        _mm256_mask_storeu_epi16(d + p * kpass + k, first_n((int)(kpass - k)), v);
      }
    }
  }
}

/* Source rows k (element stride |ks| between them), each W contiguous values, into
 * (Q, ld) u32 pairs: entry (q, w) pairs rows k, k+1 of pass p where 2q = p * kpass + k.
 * Writes whole runs of 16 (zeros past W): ld >= W rounded up to 16. */
TPU_AVX512BF16 static void pairs_by_k(const char *base, tpu_dtype_t dt, int64_t ks, int64_t W,
                                      int64_t K, int64_t kpass, int passes, const int8_t *comp,
                                      uint32_t *dst, int64_t ld) {
  int64_t es = (int64_t)tpu_dtype_size(dt);
  for (int p = 0; p < passes; p++) {
    for (int64_t k = 0; k < kpass; k += 2) {
      uint32_t *d = dst + (p * kpass + k) / 2 * ld;
      const char *s0 = k < K ? base + k * ks * es : NULL;
      const char *s1 = k + 1 < K ? base + (k + 1) * ks * es : NULL;
      for (int64_t i = 0; i < W; i += 16) {
        int n = W - i >= 16 ? 16 : (int)(W - i);
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
        if (s0) lo = _mm512_cvtepu16_epi32(load16(s0 + i * es, dt, n, comp[p]));
        if (s1) hi = _mm512_cvtepu16_epi32(load16(s1 + i * es, dt, n, comp[p]));
        _mm512_storeu_si512(d + i, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    }
  }
}

/* (N, SM_MAXQ) pairs into (Q, SM_MAXN), zeros past N. */
TPU_AVX512 static void transpose_pairs(const uint32_t *t, int64_t N, int64_t Q, uint32_t *dst) {
  const __m512i idx =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(SM_MAXQ));
  for (int64_t q = 0; q < Q; q++) {
    for (int64_t j = 0; j < SM_MAXN && j < N + 15; j += 16) {
      __mmask16 m = first_n((int)(N - j));
      __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx,
                                              t + j * SM_MAXQ + q, 4);
      _mm512_storeu_si512(dst + q * SM_MAXN + j, v);
    }
  }
}

/* (N, 8) pairs (rows of 8 contiguous, zeros past Q and N up to a multiple of 16 rows)
 * into (Q, SM_MAXN) for Q <= 8: each 16 x 8 block transposed in registers by three
 * rounds of two-source permutes (rows of 4 -> 8 -> 16 per q). */
TPU_AVX512 static void transpose_pairs8(const uint32_t *t, int64_t N, int64_t Q, uint32_t *dst) {
  static const int32_t k1[2][16] = { /* (q 0-3 | 4-7) x rows 0-3 of two registers */
      {0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27},
      {4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31}};
  static const int32_t k2[2][16] = { /* q pair (0 | 1) of 4 x rows 0-3, 4-7 */
      {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23},
      {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31}};
  static const int32_t k3[2][16] = { /* q (0 | 1) of 2 x rows 0-7, 8-15 */
      {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
      {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}};
  __m512i i1[2], i2[2], i3[2];
  for (int h = 0; h < 2; h++) {
    i1[h] = _mm512_loadu_si512(k1[h]);
    i2[h] = _mm512_loadu_si512(k2[h]);
    i3[h] = _mm512_loadu_si512(k3[h]);
  }
  for (int64_t j0 = 0; j0 < N; j0 += 16) {
    __m512i r[8], x[8], ylo[4], yhi[4];
    for (int m = 0; m < 8; m++) r[m] = _mm512_loadu_si512(t + j0 * 8 + 16 * m);
    for (int p = 0; p < 4; p++) { /* x[2p + qb]: q 4qb..4qb+3 of rows 4p..4p+3 */
      x[2 * p] = _mm512_permutex2var_epi32(r[2 * p], i1[0], r[2 * p + 1]);
      x[2 * p + 1] = _mm512_permutex2var_epi32(r[2 * p], i1[1], r[2 * p + 1]);
    }
    for (int c = 0; c < 4; c++) { /* q 2c, 2c+1 of rows 0-7 and 8-15 */
      int qb = c / 2, h = c % 2;
      ylo[c] = _mm512_permutex2var_epi32(x[qb], i2[h], x[2 + qb]);
      yhi[c] = _mm512_permutex2var_epi32(x[4 + qb], i2[h], x[6 + qb]);
    }
    for (int64_t q = 0; q < Q; q++) {
      _mm512_storeu_si512(dst + q * SM_MAXN + j0,
                          _mm512_permutex2var_epi32(ylo[q / 2], i3[q % 2], yhi[q / 2]));
    }
  }
}

/* ---- the register-blocked kernel ----------------------------------------------------------- */

/* C rows [0, R) x columns [0, 16 * NV) (columns past the mask |mlast| of the last vector
 * are not stored) = sum over q of pairs: A pair (r, q) at ap[r * SM_MAXQ + q] (a_kc) or
 * ap[q * SM_MAXM + r], B pairs of step q at bp + q * SM_MAXN. R, NV and a_kc are
 * compile-time constants in every instance. */
TPU_AVX512BF16_INLINE static void block(const int R, const int NV, const bool a_kc, int64_t Q,
                                        const uint32_t *ap, const uint32_t *bp, float *c,
                                        int64_t ldc, __mmask16 mlast) {
  __m512 acc[28][2];
#pragma GCC unroll 28
  for (int r = 0; r < R; r++) {
    acc[r][0] = _mm512_setzero_ps();
    acc[r][1] = _mm512_setzero_ps();
  }
  for (int64_t q = 0; q < Q; q++) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * SM_MAXN);
    __m512bh b1 = NV == 2 ? (__m512bh)_mm512_loadu_si512(bp + q * SM_MAXN + 16) : b0;
#pragma GCC unroll 28
    for (int r = 0; r < R; r++) {
      __m512bh a = (__m512bh)_mm512_set1_epi32((int)(a_kc ? ap[r * SM_MAXQ + q] : ap[q * SM_MAXM + r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
      if (NV == 2) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
    }
  }
#pragma GCC unroll 28
  for (int r = 0; r < R; r++) {
    if (NV == 1) {
      _mm512_mask_storeu_ps(c + r * ldc, mlast, acc[r][0]);
    } else {
      _mm512_storeu_ps(c + r * ldc, acc[r][0]);
      _mm512_mask_storeu_ps(c + r * ldc + 16, mlast, acc[r][1]);
    }
  }
}

typedef void (*block_fn)(int64_t Q, const uint32_t *ap, const uint32_t *bp, float *c, int64_t ldc,
                         __mmask16 mlast);

#define BLOCK_FN(R, NV, AKC)                                                                  \
  TPU_AVX512BF16 static void block_##R##_##NV##_##AKC(int64_t Q, const uint32_t *ap,         \
                                                      const uint32_t *bp, float *c,           \
                                                      int64_t ldc, __mmask16 mlast) {         \
    block(R, NV, AKC, Q, ap, bp, c, ldc, mlast);                                              \
  }
#define BLOCK_FNS(R) BLOCK_FN(R, 1, 0) BLOCK_FN(R, 1, 1) BLOCK_FN(R, 2, 0) BLOCK_FN(R, 2, 1)
#define ROWS_1_14(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14)
#define ROWS_15_28(X) \
  X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28)
#define BLOCK_FNS1(R) BLOCK_FN(R, 1, 0) BLOCK_FN(R, 1, 1)
ROWS_1_14(BLOCK_FNS)
ROWS_15_28(BLOCK_FNS1)

/* kBlocks[NV - 1][a_kc][R - 1] */
#define ENTRY(R, NV, AKC) block_##R##_##NV##_##AKC,
#define E10(R) ENTRY(R, 1, 0)
#define E11(R) ENTRY(R, 1, 1)
#define E20(R) ENTRY(R, 2, 0)
#define E21(R) ENTRY(R, 2, 1)
static const block_fn kBlocks[2][2][28] = {
    {{ROWS_1_14(E10) ROWS_15_28(E10)}, {ROWS_1_14(E11) ROWS_15_28(E11)}},
    {{ROWS_1_14(E20)}, {ROWS_1_14(E21)}},
};

/* ---- driver -------------------------------------------------------------------------------- */

static const void *at(const tpu_gemm_matrix_t *m, int64_t off) {
  return (const char *)m->data + off * (int64_t)tpu_dtype_size(m->dtype);
}

/* Batches [b0, b1). */
static void small_batches(void *arg, int64_t b0, int64_t b1) {
  const small_ctx *x = arg;
  const tpu_gemm_t *g = x->g;
  _Alignas(64) uint32_t apk[SM_MAXM * SM_MAXQ];  /* (M, Q) or (Q, M) pairs */
  _Alignas(64) uint32_t bpk[SM_MAXQ * SM_MAXN];  /* (Q, N) pairs */
  _Alignas(64) uint32_t bt[SM_MAXN * SM_MAXQ];   /* (N, Q) pairs before the transpose */
  if (x->b_kc && x->Q <= 8) memset(bt, 0, SM_MAXN * 8 * sizeof(uint32_t)); /* zero past Q, N */
  _Alignas(64) float tile[SM_MAXM * SM_MAXN];    /* (M, N) C when not direct */
  int NV = x->N > 16 ? 2 : 1;
  int rmax = NV == 2 ? 14 : 28;
  int64_t nblk = (x->M + rmax - 1) / rmax;
  __mmask16 mlast = first_n((int)(x->N - 16 * (NV - 1)));
  const block_fn *fns = kBlocks[NV - 1][x->a_kc];
  for (int64_t b = b0; b < b1; b++) {
    const char *a = at(&g->a, tpu_gemm_axis_offset(&g->a.batch, b));
    const char *bsrc = at(&g->b, tpu_gemm_axis_offset(&g->b.batch, b));
    if (x->a_kc) {
      pairs_by_row(a, g->a.dtype, g->a.rows.stride, x->M, x->K, x->kpass, x->passes,
                   g->plan.a_comp, apk, SM_MAXQ);
    } else {
      pairs_by_k(a, g->a.dtype, g->a.cols.stride, x->M, x->K, x->kpass, x->passes, g->plan.a_comp,
                 apk, SM_MAXM);
    }
    if (x->b_kc && x->Q <= 8) {
      pairs_by_row(bsrc, g->b.dtype, g->b.cols.stride, x->N, x->K, x->kpass, x->passes,
                   g->plan.b_comp, bt, 8);
      transpose_pairs8(bt, x->N, x->Q, bpk);
    } else if (x->b_kc) {
      pairs_by_row(bsrc, g->b.dtype, g->b.cols.stride, x->N, x->K, x->kpass, x->passes,
                   g->plan.b_comp, bt, SM_MAXQ);
      transpose_pairs(bt, x->N, x->Q, bpk);
    } else {
      pairs_by_k(bsrc, g->b.dtype, g->b.rows.stride, x->N, x->K, x->kpass, x->passes,
                 g->plan.b_comp, bpk, SM_MAXN);
    }
    float *c;
    int64_t ldc;
    if (x->c_direct) {
      c = (float *)g->c.data + tpu_gemm_axis_offset(&g->c.batch, b);
      ldc = g->c.rows.stride;
    } else {
      c = tile;
      ldc = SM_MAXN;
    }
    for (int64_t blk = 0, i0 = 0; blk < nblk; blk++) {
      int64_t R = x->M / nblk + (blk < x->M % nblk);
      const uint32_t *ap = x->a_kc ? apk + i0 * SM_MAXQ : apk + i0;
      fns[R - 1](x->Q, ap, bpk, c + i0 * ldc, ldc, mlast);
      i0 += R;
    }
    if (!x->c_direct) {
      int64_t cb = tpu_gemm_axis_offset(&g->c.batch, b);
      for (int64_t i = 0; i < x->M; i++) {
        int64_t ro = cb + tpu_gemm_axis_offset(&g->c.rows, i);
        for (int64_t j = 0; j < x->N; j++) {
          tpu_mxu_store_f32(g->c.data, g->c.dtype, ro + tpu_gemm_axis_offset(&g->c.cols, j),
                            tile[i * SM_MAXN + j]);
        }
      }
    }
  }
}

bool tpu_gemm_small_run(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                        const tpu_gemm_team_t *team) {
  if (kern != &tpu_gemm_kernel_avx512_bf16 || !tpu_cpu_features()->avx512_bf16) return false;
  if (g->plan.mode != TPU_MXU_BF16) return false;
  if ((g->a.dtype != TPU_F32 && g->a.dtype != TPU_BF16) ||
      (g->b.dtype != TPU_F32 && g->b.dtype != TPU_BF16)) {
    return false;
  }
  small_ctx x = {.g = g, .M = g->a.rows.size, .N = g->b.cols.size, .K = g->a.cols.size};
  x.passes = g->plan.num_passes;
  if (x.M < 1 || x.M > SM_MAXM || x.N < 1 || x.N > SM_MAXN || x.K < 1 || x.K > 2 * SM_MAXQ) {
    return false;
  }
  x.kpass = x.K + (x.K & 1);
  x.Q = x.passes * x.kpass / 2;
  if (x.Q > SM_MAXQ) return false;
  const tpu_gemm_axis_t *ar = &g->a.rows, *ac = &g->a.cols, *br = &g->b.rows, *bc = &g->b.cols;
  if (ar->offsets || ac->offsets || br->offsets || bc->offsets) return false;
  /* a dim of size 1 is contiguous whatever its stride */
  if (ac->stride == 1 || x.K == 1) {
    x.a_kc = true;
  } else if (ar->stride != 1 && x.M != 1) {
    return false;
  }
  if (bc->stride == 1 || x.N == 1) {
    x.b_kc = false;
  } else if (br->stride == 1 || x.K == 1) {
    x.b_kc = true;
  } else {
    return false;
  }
  x.c_direct = g->c.dtype == TPU_F32 && !g->c.rows.offsets && !g->c.cols.offsets &&
               (g->c.cols.stride == 1 || x.N == 1);
  int64_t per = x.M * x.N * x.K * x.passes; /* multiply-adds per batch */
  /* chunks of 2^20 multiply-adds for woken workers, 2^17 (a few microseconds) for helpers */
  int64_t chunk_work = (int64_t)1 << (team && team->helpers_only ? 17 : 20);
  tpu_gemm_team_for(team, g->c.batch.size, 1 + chunk_work / per, small_batches, &x);
  return true;
}

#else /* not x86-64 GCC/Clang */

bool tpu_gemm_small_run(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                        const tpu_gemm_team_t *team) {
  (void)g, (void)kern, (void)team;
  return false;
}

#endif
