/* gemm.h: the MXU engine behind dot_general and convolution (internal to src/vtpu/kernels).
 *
 * Two parts:
 *
 * 1. The MXU numerics, shared by the fast kernels and the naive references so that both
 *    compute the same thing (shared/reference/tpu-hardware.md §2):
 *    - f32 operands at DEFAULT: each element rounded to bf16 (nearest even), products
 *      exact, accumulation in f32.
 *    - f32 at HIGH: x = hi + lo with hi = bf16(x), lo = bf16(x - hi); three bf16 passes
 *      hi*hi, hi*lo, lo*hi, each accumulated in f32 over all of K before the next one
 *      ("pass-major": the same order as three MXU matmuls added up). An inf or NaN
 *      operand enters through hi*hi only (see tpu_mxu_component), so HIGH keeps inf.
 *    - f32 at HIGHEST: exact f32 (f32 products rounded, fma, f32 accumulation). The TPU's
 *      six bf16 passes give about 22 bits; exact f32 gives 24, runs at the host's f32
 *      FMA rate instead of a sixth of its bf16 rate (the HIGHEST speed target needs
 *      that), and is what the issue allows ("six, or exact f32").
 *    - bf16 operands: one pass at every precision (a bf16 value is its own hi; lo = 0),
 *      so bf16 x bf16 products are exact and accumulate in f32.
 *    - f16 operands: TPUs have no f16 MXU path (XLA widens f16 to f32). We keep f16
 *      exact: f16 is widened to f32 exactly and the dot runs as exact f32 at every
 *      precision (f16 x f16 products are exact in f32), like PyTorch CPU's f16 matmul.
 *    - f64 on either side: f64 products and f64 accumulation.
 *    Mixed operands (f32 x bf16) take the passes whose components are not known zero.
 *    The result is rounded once to the output dtype. The fast bf16 path (vcvtneps2bf16,
 *    vdpbf16ps) flushes subnormals to zero, as the TPU does; the references keep them,
 *    a difference far below the f32 accumulation tolerance.
 *
 * 2. A batched GEMM C[b] (M, N) = A[b] (M, K) x B[b] (K, N) over arbitrarily strided
 *    operands: each axis is either affine (stride, elements) or an offset table, so any
 *    dot_general (any batch, contracting and free dims, any strides) maps onto it without
 *    copying the operands first. The fast path packs A and B into panels (bf16 pairs for
 *    the AVX512-BF16 micro-kernel, f32 otherwise), multiplies with a register-blocked
 *    micro-kernel, and splits the (batch, M-block, N-block) tiles over the thread pool.
 *    Kernels by CPU (tpu_cpu_features, TORCHTPU_ISA): bf16 passes on AVX512-BF16 use
 *    vdpbf16ps (32 MAC per instruction); exact f32 and CPUs without BF16 use an f32 FMA
 *    micro-kernel (AVX-512, AVX2, or portable C) on bf16 components widened to f32,
 *    which gives the same products. Batches of small matrices (attention's 32 x 32 x 16)
 *    on AVX512-BF16, and products up to 2^22 multiply-adds on AVX2, skip the panels for
 *    paths with the same bits (gemm_small_avx512.c, gemm_direct_avx2.c). A thread that
 *    runs GEMMs keeps its last workspace (up to 32 MiB) for the next call; it is freed
 *    when the thread exits.
 */
#ifndef TPU_VTPU_KERNELS_GEMM_H
#define TPU_VTPU_KERNELS_GEMM_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tpu/kernels.h"

/* ---- numerics ------------------------------------------------------------------------ */

typedef enum tpu_mxu_mode {
  TPU_MXU_BF16, /* bf16 passes: exact products of bf16 components, f32 accumulation */
  TPU_MXU_F32,  /* exact f32: HIGHEST, and any f16 operand */
  TPU_MXU_F64,  /* f64 products and accumulation */
} tpu_mxu_mode_t;

#define TPU_MXU_MAX_PASSES 3

typedef struct tpu_mxu_plan {
  tpu_mxu_mode_t mode;
  int num_passes;                    /* BF16: 1..3 (pass-major); F32, F64: 1 */
  int8_t a_comp[TPU_MXU_MAX_PASSES]; /* BF16: component of the lhs in pass p (see below) */
  int8_t b_comp[TPU_MXU_MAX_PASSES]; /* same for the rhs */
} tpu_mxu_plan_t;

/* The numerics for lhs dtype |a| x rhs dtype |b| -> |out| at |precision| (see above).
 * Fails with INVALID_ARGUMENT naming |what| for a non-float dtype. */
tpu_status_t tpu_mxu_plan_make(const char *what, tpu_dtype_t a, tpu_dtype_t b, tpu_dtype_t out,
                               tpu_precision_t precision, tpu_mxu_plan_t *out_plan);

static inline float tpu_mxu_bf16_round(float x) { return tpu_bf16_to_f32(tpu_f32_to_bf16(x)); }

/* Component |c| of the bf16 split of x = hi + lo:
 *   0: hi = bf16(x)
 *   1: lo = bf16(x - hi) (x - hi is exact in f32); 0 when hi is inf or NaN
 *   2: hi as the cross passes use it: 0 when hi is inf or NaN
 * The cross passes (hi*lo, lo*hi) thus never multiply inf by 0: an inf or NaN operand
 * reaches the result through the hi*hi pass only, as it would in one f32 product. */
static inline float tpu_mxu_component(float x, int c) {
  float hi = tpu_mxu_bf16_round(x);
  if (c == 0) return hi;
  if (!isfinite(hi)) return 0.0f;
  return c == 2 ? hi : tpu_mxu_bf16_round(x - hi);
}

/* Element |off| (elements) of a float buffer, widened. */
static inline float tpu_mxu_load_f32(const void *base, tpu_dtype_t dt, int64_t off) {
  switch (dt) {
    case TPU_F32:
      return ((const float *)base)[off];
    case TPU_BF16:
      return tpu_bf16_to_f32(((const uint16_t *)base)[off]);
    case TPU_F16:
      return tpu_f16_to_f32(((const uint16_t *)base)[off]);
    case TPU_F64:
      return (float)((const double *)base)[off];
    default:
      return 0.0f;
  }
}

static inline double tpu_mxu_load_f64(const void *base, tpu_dtype_t dt, int64_t off) {
  if (dt == TPU_F64) return ((const double *)base)[off];
  return (double)tpu_mxu_load_f32(base, dt, off); /* f32, bf16, f16 widen exactly */
}

/* Rounds an f32 accumulator once into a float buffer. */
static inline void tpu_mxu_store_f32(void *base, tpu_dtype_t dt, int64_t off, float v) {
  switch (dt) {
    case TPU_F32:
      ((float *)base)[off] = v;
      break;
    case TPU_BF16:
      ((uint16_t *)base)[off] = tpu_f32_to_bf16(v);
      break;
    case TPU_F16:
      ((uint16_t *)base)[off] = tpu_f32_to_f16(v);
      break;
    case TPU_F64:
      ((double *)base)[off] = (double)v;
      break;
    default:
      break;
  }
}

/* An f64 accumulator into a float buffer (bf16 and f16 go through f32: two roundings). */
static inline void tpu_mxu_store_f64(void *base, tpu_dtype_t dt, int64_t off, double v) {
  if (dt == TPU_F64) {
    ((double *)base)[off] = v;
  } else {
    tpu_mxu_store_f32(base, dt, off, (float)v);
  }
}

/* ---- batched strided GEMM -------------------------------------------------------------- */

typedef struct tpu_gemm_axis {
  int64_t size;
  int64_t stride;         /* elements between consecutive indices, when offsets is NULL */
  const int64_t *offsets; /* (size,) element offsets, or NULL */
} tpu_gemm_axis_t;

static inline int64_t tpu_gemm_axis_offset(const tpu_gemm_axis_t *ax, int64_t i) {
  return ax->offsets ? ax->offsets[i] : i * ax->stride;
}

/* A matrix operand: element (b, r, c) is at data + batch(b) + rows(r) + cols(c). */
typedef struct tpu_gemm_matrix {
  void *data; /* element (0, 0, 0) (read-only for A and B) */
  tpu_dtype_t dtype;
  tpu_gemm_axis_t batch, rows, cols; /* A: (B, M, K); B: (B, K, N); C: (B, M, N) */
} tpu_gemm_matrix_t;

typedef struct tpu_gemm {
  const char *what;          /* kernel name for error messages ("dot_general") */
  tpu_gemm_matrix_t a, b, c; /* same batch size; C must not overlap A or B */
  tpu_mxu_plan_t plan;
  /* NULL, or (N,) f32 values added to every row of an f32 C after the product (one f32
   * add of the rounded product: the bits of a separate ADD), while each tile is still in
   * L1 (a linear layer's bias) */
  const float *bias;
} tpu_gemm_t;

/* C = A x B (+ bias) with plan's numerics, on |pool| (NULL: calling thread). K = 0 writes
 * zeros (plus the bias). */
tpu_status_t tpu_gemm_run(const tpu_gemm_t *g, tpu_pool_t *pool);

/* Naive triple loop with the same numerics, pass-major, k ascending (tests, references;
 * C = A x B: no caller gives it a bias). */
tpu_status_t tpu_gemm_ref(const tpu_gemm_t *g);

/* Builds an axis over the row-major multi-index of |n| dims (sizes |dims|, element
 * strides |strides|): affine when the dims merge into one stride, else an offset table
 * allocated with malloc into |*owned| (free it after use). Size math is overflow-checked. */
tpu_status_t tpu_gemm_axis_make(const char *what, int n, const int64_t *dims,
                                const int64_t *strides, tpu_gemm_axis_t *out_axis, int64_t **owned);

#endif /* TPU_VTPU_KERNELS_GEMM_H */
