/* reduce_internal.h: what the reduce*.c files share (internal to src/vtpu/kernels).
 *
 * tpu_kernel_reduce (reduce.c) validates its arguments and builds a tpu_reduce_plan_t: the
 * kept dims (iterated over outputs) and the reduced dims (iterated per output), each
 * simplified (size-1 dims dropped, contiguous dims merged). Two engines run a plan:
 *
 *   reduce_lines.c  any plan. Per output, the reduced elements are cut into leaf blocks of
 *                   at most TPU_RED_BLOCK elements (read in place when the innermost reduced
 *                   dim is contiguous, else gathered into a scratch block). A block is
 *                   reduced by an ISA kernel (f32 arithmetic for f32/f16/bf16) and blocks
 *                   are combined pairwise (a binary-counter tree), so sums are accurate and
 *                   results do not depend on the number of threads.
 *   reduce_cols.c   the "column" case: the innermost kept dim is contiguous and one
 *                   reduced dim lies outside it (x.sum(0) on a row-major matrix). Tiles of
 *                   up to TPU_RED_COL_WMAX columns accumulate TPU_RED_COL_RB rows in
 *                   sequence (in registers), then combine pairwise.
 *
 * ISA kernels (portable, AVX2, AVX-512) live in reduce_portable.c, reduce_avx2.c and
 * reduce_avx512.c behind tpu_reduce_isa_t; tpu_reduce_isa() picks one at run time.
 */
#ifndef TPU_VTPU_KERNELS_REDUCE_INTERNAL_H
#define TPU_VTPU_KERNELS_REDUCE_INTERNAL_H

#include <stdint.h>

#include "tpu/kernels.h"
#include "vtpu/kernels/strided.h"

#define TPU_RED_BLOCK 4096   /* elements per leaf block of the lines engine */
/* columns per tile of the columns engine: what the ISA col kernels keep in registers (the
 * 16 KiB tiles of f32 they once took, through an L1 array, were 25% slower at 256 columns) */
#define TPU_RED_COL_WMAX 128
#define TPU_RED_COL_RB 64    /* rows accumulated in sequence before pairwise combining */

/* ---- ISA kernels: SUM, PROD, MAX, MIN in f32 arithmetic; MAX/MIN propagate NaN ---------- */

typedef struct tpu_reduce_isa {
  const char *name; /* "portable", "avx2", "avx512" */
  /* x[0] op x[1] op ... op x[n-1], 1 <= n <= TPU_RED_BLOCK (any order within the block). */
  float (*row_f32)(tpu_reduce_kind_t kind, const float *x, int64_t n);
  float (*row_bf16)(tpu_reduce_kind_t kind, const uint16_t *x, int64_t n);
  /* out[r * os] = row_f32(kind, x + r * ld, n) bit for bit, for r < nrows (1 <= nrows <=
   * 16) and short rows (1 <= n < 128): the rows' horizontal folds run together. NULL where
   * an ISA has none (callers then go row by row). */
  void (*rows_f32)(tpu_reduce_kind_t kind, const float *x, int64_t ld, int nrows, int64_t n,
                   float *out, int64_t os);
  /* acc[j] = acc[j] op x[i * ld + j] for i = 0 .. rows-1 in order, j < w
   * (1 <= w <= TPU_RED_COL_WMAX: the tile stays in registers). */
  void (*col_f32)(tpu_reduce_kind_t kind, const float *x, int64_t ld, int64_t rows,
                  int64_t w, float *acc);
  void (*col_bf16)(tpu_reduce_kind_t kind, const uint16_t *x, int64_t ld, int64_t rows,
                   int64_t w, float *acc);
  /* out[i] = (f32) x[i] for IEEE half x. */
  void (*f16_to_f32)(const uint16_t *x, int64_t n, float *out);
} tpu_reduce_isa_t;

const tpu_reduce_isa_t *tpu_reduce_isa_portable(void);
const tpu_reduce_isa_t *tpu_reduce_isa_avx2(void);   /* NULL where not built (non-x86) */
const tpu_reduce_isa_t *tpu_reduce_isa_avx512(void); /* NULL where not built (non-x86) */
/* The table the kernels use: the one forced by tpu_reduce_isa_force, else the best for
 * this CPU (tpu_cpu_features, so TORCHTPU_ISA applies). */
const tpu_reduce_isa_t *tpu_reduce_isa(void);
/* Tests: make the reduction kernels use |isa| (NULL: automatic). Not while kernels run. */
void tpu_reduce_isa_force(const tpu_reduce_isa_t *isa);

/* The identity of SUM/PROD/MAX/MIN in f32 (MAX: -inf, MIN: +inf). */
static inline float tpu_reduce_identity_f32(tpu_reduce_kind_t kind) {
  switch (kind) {
    case TPU_REDUCE_PROD: return 1.0f;
    case TPU_REDUCE_MAX: return -INFINITY;
    case TPU_REDUCE_MIN: return INFINITY;
    default: return 0.0f;
  }
}

/* a op b for SUM/PROD/MAX/MIN in f32; MAX/MIN return NaN if either is NaN. */
static inline float tpu_reduce_combine_f32(tpu_reduce_kind_t kind, float a, float b) {
  switch (kind) {
    case TPU_REDUCE_SUM: return a + b;
    case TPU_REDUCE_PROD: return a * b;
    case TPU_REDUCE_MAX: return (a != a || b != b) ? a + b : (b > a ? b : a);
    case TPU_REDUCE_MIN: return (a != a || b != b) ? a + b : (b < a ? b : a);
    default: return a;
  }
}

/* ---- plans ------------------------------------------------------------------------------ */

/* Accumulation class: f32 (f32, f16, bf16 inputs), f64, or i64 (integers and bool, and
 * AND/OR of any dtype: bitwise on integers as StableHLO, on 0/1 truth values for floats). */
typedef enum tpu_reduce_class { TPU_RCLS_F32, TPU_RCLS_F64, TPU_RCLS_I64 } tpu_reduce_class_t;

typedef struct tpu_reduce_plan {
  tpu_reduce_kind_t kind;
  tpu_reduce_class_t cls;
  const tpu_buf_t *x, *out;
  const tpu_reduce_isa_t *isa;
  tpu_pool_t *pool;
  int num_threads;
  tpu_loop_t kept;  /* buffers: 0 = x, 1 = out; outermost first */
  tpu_loop_t red;   /* buffer 0 = x; innermost = the dim read in sequence */
  int64_t m;        /* outputs (product of kept dims), >= 1 */
  int64_t n;        /* reduced elements per output, >= 1 */
} tpu_reduce_plan_t;

/* Checks tpu_kernel_reduce / tpu_ref_reduce arguments (|name| prefixes messages): buffers,
 * kind, out's shape = x's shape without the reduced dims, ARGMAX/ARGMIN out an integer
 * dtype. Stores the output count and the reduced count per output. */
tpu_status_t tpu_reduce_check(const char *name, tpu_reduce_kind_t kind, const tpu_buf_t *x,
                              const bool *dims, const tpu_buf_t *out, int64_t *out_m,
                              int64_t *out_n);
/* Writes |kind|'s identity into every element of out (the result of an empty reduction);
 * ARGMAX/ARGMIN have none: an error naming |name|. */
tpu_status_t tpu_reduce_fill_identity(const char *name, tpu_reduce_kind_t kind,
                                      const tpu_buf_t *out);

/* Whether the columns engine handles |p| (f32/bf16 SUM..MIN, contiguous inner kept dim). */
bool tpu_reduce_cols_applies(const tpu_reduce_plan_t *p);
tpu_status_t tpu_reduce_cols(const tpu_reduce_plan_t *p);
tpu_status_t tpu_reduce_lines(const tpu_reduce_plan_t *p);

#endif /* TPU_VTPU_KERNELS_REDUCE_INTERNAL_H */
