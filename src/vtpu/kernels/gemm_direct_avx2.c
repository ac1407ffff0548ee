/* gemm_direct_avx2.c: the direct path of the AVX2 GEMM, for small and mid-size products
 * (attention's 32 x 32 x 16 batches, a small model's 256 x 64 x 256 layers), where the
 * blocked driver's panels cost as much as the multiplies: on a CPU without AVX-512 the
 * panel packer's 8 x 8 transposes and per-panel bookkeeping took as long as the
 * micro-kernel on the GPT example's step.
 *
 * Each operand is converted once into its bf16 components as f32 (or copied, in exact f32
 * mode) in the layout its source already has, so the conversion is a contiguous sweep:
 *   A  k contiguous: (M, Q) rows;   M contiguous: (Q, M) rows;
 *   B  N contiguous: (Q, ldb) rows (zeros after N up to a multiple of 8);
 *      k contiguous: (N, K) rows transposed 8 x 8 into (Q, ldb).
 * The kernel walks down the (Q, M) and (Q, ldb) layouts a row per k step, so their row
 * strides are padded to an odd number of cache lines (row_stride): at 1 KiB (N = 256) the
 * rows of a k loop fell into 4 of the 64 sets of a 32 KiB 8-way L1 and evicted each other
 * (AVX2 EPYC, 2026-12-07, bench/gemm_shapes.c: 256 x 256 x 64 with B^T 103 -> 98 us,
 * 64 x 256 x 256 with A^T 113 -> 107).
 * Q counts packed k steps as the blocked path does (gemm_kernels.h): pass-major, Q =
 * passes x K. A register-blocked kernel keeps R <= 6 rows x 8 or 16 columns of C in ymm
 * accumulators, broadcasting A from either layout, and stores them straight into C (f32,
 * unit column stride, affine rows) or through a tile. Each element of C is one fma chain
 * from zero over q = 0 .. Q-1 on the same components as the blocked path's (6, 16)
 * micro-kernel (whose kc blocks continue the chain through C exactly), so the results are
 * the same bits. A bias is added to the accumulators as they are stored, after the chain,
 * as the blocked path adds it to a finished tile.
 *
 * Work is split in two phases over the team: converting (items: chunks of rows or k of
 * each operand of each batch), then multiplying (tasks: batch x 48-row chunk x column
 * chunk). Batches go in groups whose converted operands fit kGroupBytes.
 */
#include "gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdatomic.h>

#include "gemm_avx2_inl.h"

/* Per batch: the path's limits. Above them the blocked path's cache blocking wins (on an
 * AVX2 EPYC, 2026-12-01: direct 34 vs blocked 30 GMAC/s at 256 x 64 x 256, 32 vs 40 at
 * 512 x 256 x 128). */
static const size_t kMaxBatchBytes = (size_t)512 << 10; /* converted A + B */
static const int64_t kMaxBatchWork = (int64_t)1 << 22;  /* multiply-adds, all passes */
static const size_t kGroupBytes = (size_t)1 << 20;      /* converted operands per group */
static const int64_t kConvChunk = 32;                    /* rows or k per conversion item */
static const int64_t kRowChunk = 48;                     /* rows of C per task */

typedef struct direct_ctx {
  const tpu_gemm_t *g;
  int64_t M, N, K, Q; /* Q = passes x K converted k steps */
  int64_t lda;        /* converted A row stride: Q (k contiguous), else row_stride(M) */
  int64_t ldb;        /* converted B row stride: row_stride(N) */
  int passes;
  const int8_t *a_comp, *b_comp; /* (passes,) components; NULL: raw values (exact f32) */
  bool a_kc;                     /* A k-contiguous: (M, Q); else M-contiguous: (Q, M) */
  bool b_kc;                     /* B k-contiguous: transposed; else N-contiguous */
  bool c_direct;                 /* C f32, unit column stride, affine rows */
  int64_t a_elems, b_elems;      /* converted floats per batch */
  float *ws;                     /* (group, a_elems + b_elems) */
  int64_t b0, nb;                /* the current batch group */
  int64_t a_items, b_items;      /* conversion items per batch */
  int64_t row_tasks, col_tasks, col_chunk; /* multiplication tasks per batch */
  atomic_int_fast64_t next;      /* the next item or task to claim */
  int64_t count;                 /* items or tasks in the current phase */
} direct_ctx;

static const char *src_at(const tpu_gemm_matrix_t *m, int64_t b) {
  return (const char *)m->data +
         tpu_gemm_axis_offset(&m->batch, b) * (int64_t)tpu_dtype_size(m->dtype);
}

static int comp_of(const int8_t *comp, int p) { return comp ? comp[p] : -1; }

/* ---- conversion ------------------------------------------------------------------------- */

/* |n| contiguous source values at |s| as component |comp| into d[0, n), zeros into
 * d[n, pad). Whole vectors of f32 at DEFAULT (or exact f32) take a loop of their own. */
TPU_AVX2_INLINE static void convert_run(const char *s, tpu_dtype_t dt, int64_t n, int comp,
                                        float *d, int64_t pad) {
  int64_t i = 0;
  if (dt == TPU_F32 && comp <= 0) {
    const float *f = (const float *)(const void *)s;
    if (comp < 0) {
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_loadu_ps(f + i));
    } else {
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, round_bf16(_mm256_loadu_ps(f + i)));
    }
  }
  int64_t es = (int64_t)tpu_dtype_size(dt);
  for (; i < pad; i += 8) {
    int k = n - i <= 0 ? 0 : n - i < 8 ? (int)(n - i) : 8;
    int m = pad - i < 8 ? (int)(pad - i) : 8;
    store8(d + i, k ? component8(load8(s + i * es, dt, k), comp) : _mm256_setzero_ps(), m);
  }
}

/* Source rows [r0, r1) (element stride |rs| between rows) of |len| contiguous values each,
 * into rows of |dst| with stride |ld|: row r gets the values of pass p at p * len + i. */
TPU_AVX2 static void convert_rows(const char *src, tpu_dtype_t dt, int64_t rs, int64_t len,
                                  int64_t r0, int64_t r1, int passes, const int8_t *comp,
                                  float *dst, int64_t ld) {
  int64_t es = (int64_t)tpu_dtype_size(dt);
  if (passes == 1 && rs == len && ld == len) { /* contiguous rows: one run */
    convert_run(src + r0 * rs * es, dt, (r1 - r0) * len, comp_of(comp, 0), dst + r0 * ld,
                (r1 - r0) * len);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    for (int p = 0; p < passes; p++) {
      convert_run(src + r * rs * es, dt, len, comp_of(comp, p), dst + r * ld + p * len, len);
    }
  }
}

/* Source rows k in [k0, k1) (element stride |ks|) of |width| contiguous values each, into
 * rows p * K + k of |dst| (stride |ld|), each written up to |pad| values (zeros past
 * |width|; pad <= ld). */
TPU_AVX2 static void convert_by_k(const char *src, tpu_dtype_t dt, int64_t ks, int64_t width,
                                  int64_t K, int64_t k0, int64_t k1, int passes,
                                  const int8_t *comp, float *dst, int64_t ld, int64_t pad) {
  int64_t es = (int64_t)tpu_dtype_size(dt);
  if (passes == 1 && ks == width && pad == width && ld == width) { /* contiguous: one run */
    convert_run(src + k0 * ks * es, dt, (k1 - k0) * width, comp_of(comp, 0), dst + k0 * ld,
                (k1 - k0) * width);
    return;
  }
  for (int64_t k = k0; k < k1; k++) {
    for (int p = 0; p < passes; p++) {
      convert_run(src + k * ks * es, dt, width, comp_of(comp, p), dst + (p * K + k) * ld, pad);
    }
  }
}

/* B stored k-contiguous: source rows n in [n0, n1) (n0 a multiple of 8; element stride
 * |ns|) of K values, transposed 8 x 8 into rows p * K + k of |dst| (stride ld, a multiple
 * of 8), columns [n0, n1 rounded up to 8) (zeros past N). */
TPU_AVX2 static void convert_transposed(const char *src, tpu_dtype_t dt, int64_t ns, int64_t N,
                                        int64_t K, int64_t n0, int64_t n1, int passes,
                                        const int8_t *comp, float *dst, int64_t ld) {
  int64_t es = (int64_t)tpu_dtype_size(dt);
  for (int64_t j = n0; j < n1; j += 8) {
    for (int64_t k = 0; k < K; k += 8) {
      int n = K - k < 8 ? (int)(K - k) : 8;
      if (dt == TPU_F32 && passes == 1 && comp_of(comp, 0) <= 0 && n == 8 && j + 8 <= N) {
        const float *f = (const float *)(const void *)src + j * ns + k; /* a whole block */
        bool round = comp_of(comp, 0) == 0;
        __m256 r[8];
        for (int i = 0; i < 8; i++) {
          __m256 v = _mm256_loadu_ps(f + i * ns);
          r[i] = round ? round_bf16(v) : v;
        }
        transpose8x8(r);
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + (k + i) * ld + j, r[i]);
        continue;
      }
      __m256 x[8];
      for (int i = 0; i < 8; i++) {
        x[i] = j + i < N ? load8(src + ((j + i) * ns + k) * es, dt, n) : _mm256_setzero_ps();
      }
      for (int p = 0; p < passes; p++) {
        int c = comp_of(comp, p);
        __m256 r[8];
        for (int i = 0; i < 8; i++) r[i] = component8(x[i], c);
        transpose8x8(r);
        for (int i = 0; i < n; i++) _mm256_storeu_ps(dst + (p * K + k + i) * ld + j, r[i]);
      }
    }
  }
}

/* Conversion item |it| of the current group. */
static void convert_item(direct_ctx *x, int64_t it) {
  const tpu_gemm_t *g = x->g;
  int64_t per = x->a_items + x->b_items, bl = it / per, r = it % per;
  float *a = x->ws + bl * (x->a_elems + x->b_elems), *b = a + x->a_elems;
  if (r < x->a_items) {
    const char *s = src_at(&g->a, x->b0 + bl);
    int64_t lo = r * kConvChunk;
    if (x->a_kc) {
      int64_t hi = lo + kConvChunk < x->M ? lo + kConvChunk : x->M;
      convert_rows(s, g->a.dtype, g->a.rows.stride, x->K, lo, hi, x->passes, x->a_comp, a,
                   x->Q);
    } else {
      int64_t hi = lo + kConvChunk < x->K ? lo + kConvChunk : x->K;
      convert_by_k(s, g->a.dtype, g->a.cols.stride, x->M, x->K, lo, hi, x->passes, x->a_comp,
                   a, x->lda, x->M);
    }
    return;
  }
  const char *s = src_at(&g->b, x->b0 + bl);
  int64_t lo = (r - x->a_items) * kConvChunk;
  if (x->b_kc) {
    int64_t hi = lo + kConvChunk < x->N ? lo + kConvChunk : x->N;
    convert_transposed(s, g->b.dtype, g->b.cols.stride, x->N, x->K, lo, hi, x->passes,
                       x->b_comp, b, x->ldb);
  } else {
    int64_t hi = lo + kConvChunk < x->K ? lo + kConvChunk : x->K;
    convert_by_k(s, g->b.dtype, g->b.rows.stride, x->N, x->K, lo, hi, x->passes, x->b_comp, b,
                 x->ldb, (x->N + 7) / 8 * 8);
  }
}

static void convert_slot(void *arg, int64_t begin, int64_t end) {
  direct_ctx *x = arg;
  (void)begin, (void)end;
  for (int64_t it; (it = atomic_fetch_add(&x->next, 1)) < x->count;) convert_item(x, it);
}

/* ---- the register-blocked kernel ---------------------------------------------------------- */

/* C rows [0, R) x columns [0, 8 * NV) (only |nlast| lanes of the last vector stored) =
 * sum over q of A(r, q) B(q, j) (+ bias[j] when |bias|, its 8 * (NV - 1) + nlast values):
 * A(r, q) at ap[r * lda + q] (a_kc) or ap[q * lda + r], B row q at bp + q * ldb. R, NV and
 * a_kc are compile-time constants in every instance. */
TPU_AVX2_INLINE static void block(const int R, const int NV, const bool a_kc, int64_t Q,
                                  const float *ap, int64_t lda, const float *bp, int64_t ldb,
                                  const float *bias, float *c, int64_t ldc, int nlast) {
  __m256 acc[6][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; r++) {
    acc[r][0] = _mm256_setzero_ps();
    acc[r][1] = _mm256_setzero_ps();
  }
  for (int64_t q = 0; q < Q; q++) {
    __m256 b0 = _mm256_loadu_ps(bp + q * ldb);
    __m256 b1 = NV == 2 ? _mm256_loadu_ps(bp + q * ldb + 8) : b0;
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      __m256 a = _mm256_broadcast_ss(a_kc ? ap + r * lda + q : ap + q * lda + r);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      if (NV == 2) acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  if (bias) {
    __m256 v0 = NV == 1 ? load8((const char *)bias, TPU_F32, nlast) : _mm256_loadu_ps(bias);
    __m256 v1 = NV == 2 ? load8((const char *)(bias + 8), TPU_F32, nlast) : v0;
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      acc[r][0] = _mm256_add_ps(acc[r][0], v0);
      if (NV == 2) acc[r][1] = _mm256_add_ps(acc[r][1], v1);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; r++) {
    if (NV == 1) {
      store8(c + r * ldc, acc[r][0], nlast);
    } else {
      _mm256_storeu_ps(c + r * ldc, acc[r][0]);
      store8(c + r * ldc + 8, acc[r][1], nlast);
    }
  }
}

typedef void (*block_fn)(int64_t Q, const float *ap, int64_t lda, const float *bp, int64_t ldb,
                         const float *bias, float *c, int64_t ldc, int nlast);

#define BLOCK_FN(R, NV, AKC)                                                                   \
  TPU_AVX2 static void block_##R##_##NV##_##AKC(int64_t Q, const float *ap, int64_t lda,      \
                                                const float *bp, int64_t ldb,                 \
                                                const float *bias, float *c, int64_t ldc,     \
                                                int nlast) {                                  \
    block(R, NV, AKC, Q, ap, lda, bp, ldb, bias, c, ldc, nlast);                               \
  }
#define BLOCK_FNS(R) BLOCK_FN(R, 1, 0) BLOCK_FN(R, 1, 1) BLOCK_FN(R, 2, 0) BLOCK_FN(R, 2, 1)
BLOCK_FNS(1) BLOCK_FNS(2) BLOCK_FNS(3) BLOCK_FNS(4) BLOCK_FNS(5) BLOCK_FNS(6)

/* kBlocks[NV - 1][a_kc][R - 1] */
#define ENTRIES(NV, AKC)                                                                       \
  {block_1_##NV##_##AKC, block_2_##NV##_##AKC, block_3_##NV##_##AKC, block_4_##NV##_##AKC,     \
   block_5_##NV##_##AKC, block_6_##NV##_##AKC}
static const block_fn kBlocks[2][2][6] = {{ENTRIES(1, 0), ENTRIES(1, 1)},
                                          {ENTRIES(2, 0), ENTRIES(2, 1)}};

/* ---- multiplication ------------------------------------------------------------------------ */

/* Rounds an (R, n) f32 tile (row stride 16) into C at rows i0.., columns j0.. of batch b. */
static void store_tile(const tpu_gemm_t *g, int64_t b, int64_t i0, int64_t j0, int R, int n,
                       const float *t) {
  const tpu_gemm_matrix_t *c = &g->c;
  int64_t base = tpu_gemm_axis_offset(&c->batch, b);
  for (int i = 0; i < R; i++) {
    int64_t ro = base + tpu_gemm_axis_offset(&c->rows, i0 + i);
    for (int j = 0; j < n; j++) {
      tpu_mxu_store_f32(c->data, c->dtype, ro + tpu_gemm_axis_offset(&c->cols, j0 + j),
                        t[i * 16 + j]);
    }
  }
}

/* Task |t|: rows [i0, i1) x columns [j0, j1) of C for one batch of the group. */
static void multiply_task(direct_ctx *x, int64_t t) {
  const tpu_gemm_t *g = x->g;
  int64_t per = x->row_tasks * x->col_tasks, bl = t / per, r = t % per;
  int64_t i0 = r / x->col_tasks * kRowChunk, j0 = r % x->col_tasks * x->col_chunk;
  int64_t i1 = i0 + kRowChunk < x->M ? i0 + kRowChunk : x->M;
  int64_t j1 = j0 + x->col_chunk < x->N ? j0 + x->col_chunk : x->N;
  const float *a = x->ws + bl * (x->a_elems + x->b_elems), *b = a + x->a_elems;
  int64_t lda = x->lda;
  int64_t rows = i1 - i0, nblk = (rows + 5) / 6; /* near-equal blocks of at most 6 rows */
  float *cb = NULL;
  int64_t ldc = 16;
  if (x->c_direct) {
    cb = (float *)g->c.data + tpu_gemm_axis_offset(&g->c.batch, x->b0 + bl);
    ldc = g->c.rows.stride;
  }
  float tile[6 * 16];
  for (int64_t j = j0; j < j1; j += 16) {
    int NV = j1 - j > 8 ? 2 : 1;
    int nlast = (int)(j1 - j - 8 * (NV - 1) < 8 ? j1 - j - 8 * (NV - 1) : 8);
    const block_fn *fns = kBlocks[NV - 1][x->a_kc];
    const float *bias = g->bias ? g->bias + j : NULL; /* (N,) added to every row of C */
    for (int64_t blk = 0, i = i0; blk < nblk; blk++) {
      int R = (int)(rows / nblk + (blk < rows % nblk));
      const float *ap = x->a_kc ? a + i * lda : a + i;
      if (cb) {
        fns[R - 1](x->Q, ap, lda, b + j, x->ldb, bias, cb + i * ldc + j, ldc, nlast);
      } else {
        fns[R - 1](x->Q, ap, lda, b + j, x->ldb, bias, tile, 16, nlast);
        store_tile(g, x->b0 + bl, i, j, R, 8 * (NV - 1) + nlast, tile);
      }
      i += R;
    }
  }
}

static void multiply_slot(void *arg, int64_t begin, int64_t end) {
  direct_ctx *x = arg;
  (void)begin, (void)end;
  for (int64_t t; (t = atomic_fetch_add(&x->next, 1)) < x->count;) multiply_task(x, t);
}

/* ---- entry -------------------------------------------------------------------------------- */

/* Floats between the rows of a converted operand |n| values wide: whole 64-byte lines, an
 * odd number of them, so that the rows a k loop reads spread over all the L1's sets. */
static int64_t row_stride(int64_t n) {
  int64_t lines = (n + 15) / 16;
  return (lines | 1) * 16;
}

/* Whether |g|'s operands suit the path (see tpu_gemm_direct_run); fills the layout. */
static bool plan_direct(const tpu_gemm_t *g, direct_ctx *x) {
  if ((g->a.dtype != TPU_F32 && g->a.dtype != TPU_BF16) ||
      (g->b.dtype != TPU_F32 && g->b.dtype != TPU_BF16)) {
    return false;
  }
  const tpu_gemm_axis_t *ar = &g->a.rows, *ac = &g->a.cols, *br = &g->b.rows, *bc = &g->b.cols;
  if (ar->offsets || ac->offsets || br->offsets || bc->offsets) return false;
  x->M = ar->size, x->N = bc->size, x->K = ac->size;
  /* a dim of size 1 is contiguous whatever its stride */
  if (ac->stride == 1 || x->K == 1) {
    x->a_kc = true;
  } else if (ar->stride != 1 && x->M != 1) {
    return false;
  }
  if (bc->stride == 1 || x->N == 1) {
    x->b_kc = false;
  } else if (br->stride == 1 || x->K == 1) {
    x->b_kc = true;
  } else {
    return false;
  }
  x->passes = g->plan.mode == TPU_MXU_BF16 ? g->plan.num_passes : 1;
  x->a_comp = g->plan.mode == TPU_MXU_BF16 ? g->plan.a_comp : NULL;
  x->b_comp = g->plan.mode == TPU_MXU_BF16 ? g->plan.b_comp : NULL;
  /* sizes are bounded before any product can overflow: M, N, K <= 2^17 */
  const int64_t kDimMax = (int64_t)1 << 17;
  if (x->M > kDimMax || x->N > kDimMax || x->K > kDimMax) return false;
  x->Q = x->passes * x->K;
  x->lda = x->a_kc ? x->Q : row_stride(x->M);
  x->ldb = row_stride(x->N);
  x->a_elems = ((x->a_kc ? x->M : x->lda) * x->Q + 15) / 16 * 16; /* 64-byte aligned */
  x->b_elems = (x->Q * x->ldb + 15) / 16 * 16;
  return (size_t)(x->a_elems + x->b_elems) * 4 <= kMaxBatchBytes &&
         x->M * x->N * x->Q <= kMaxBatchWork;
}

bool tpu_gemm_direct_run(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                         const tpu_gemm_team_t *team) {
  if (kern != &tpu_gemm_kernel_avx2 || !tpu_cpu_features()->avx2_fma) return false;
  if (g->plan.mode != TPU_MXU_BF16 && g->plan.mode != TPU_MXU_F32) return false;
  direct_ctx x;
  memset(&x, 0, sizeof x);
  x.g = g;
  if (!plan_direct(g, &x)) return false;
  size_t per_batch = (size_t)(x.a_elems + x.b_elems) * 4;
  int64_t group = (int64_t)(kGroupBytes / per_batch);
  if (group < 1) group = 1;
  if (group > g->c.batch.size) group = g->c.batch.size;
  tpu_gemm_ws_t *owner;
  x.ws = tpu_gemm_workspace_get((size_t)group * per_batch, &owner);
  if (!x.ws) return false; /* the blocked path reports the shortage */
  x.c_direct = g->c.dtype == TPU_F32 && !g->c.rows.offsets && !g->c.cols.offsets &&
               (g->c.cols.stride == 1 || x.N == 1);
  x.a_items = ((x.a_kc ? x.M : x.K) + kConvChunk - 1) / kConvChunk;
  x.b_items = ((x.b_kc ? x.N : x.K) + kConvChunk - 1) / kConvChunk;
  x.row_tasks = (x.M + kRowChunk - 1) / kRowChunk;
  /* columns in chunks of 16, split further when the team would get under 4 tasks each */
  int slots = team ? team->threads : 1;
  x.col_chunk = (x.N + 15) / 16 * 16;
  while (x.col_chunk > 16 && group * x.row_tasks * ((x.N + x.col_chunk - 1) / x.col_chunk) <
                                 4 * (int64_t)slots) {
    x.col_chunk = (x.col_chunk / 2 + 15) / 16 * 16;
  }
  x.col_tasks = (x.N + x.col_chunk - 1) / x.col_chunk;
  for (int64_t b0 = 0; b0 < g->c.batch.size; b0 += group) {
    x.b0 = b0;
    x.nb = g->c.batch.size - b0 < group ? g->c.batch.size - b0 : group;
    x.count = x.nb * (x.a_items + x.b_items);
    atomic_store(&x.next, 0);
    tpu_gemm_team_for(team, slots, 1, convert_slot, &x);
    x.count = x.nb * x.row_tasks * x.col_tasks;
    atomic_store(&x.next, 0);
    tpu_gemm_team_for(team, slots, 1, multiply_slot, &x);
  }
  tpu_gemm_workspace_put(x.ws, owner);
  return true;
}

#else /* not x86-64 GCC/Clang */

bool tpu_gemm_direct_run(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                         const tpu_gemm_team_t *team) {
  (void)g, (void)kern, (void)team;
  return false;
}

#endif
