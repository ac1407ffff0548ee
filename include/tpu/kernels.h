/* kernels.h: the vTPU's compute kernels, the layer the executor (src/compiler) calls.
 *
 * Kernels work on tpu_buf_t: a pointer to element [0,...,0], a dtype, a shape and strides
 * in elements. Strides may be 0 (broadcast) or negative (reverse) on inputs; outputs are
 * written through their strides too (the executor uses that for transposes, slices, pads
 * and concatenation, which are all "copy into a view"). Unless a kernel says otherwise,
 * outputs must not overlap inputs except when they are exactly the same view.
 *
 * Numerics follow the TPU (shared/reference/tpu-hardware.md §2): vector work in f32 (f16
 * and bf16 operands are widened to f32 and the result rounded to nearest even once); the
 * MXU (dot, convolution) multiplies bf16 and accumulates f32, with 1/3/6 bf16 passes for
 * f32 operands at DEFAULT/HIGH/HIGHEST; f64 is computed in f64.
 *
 * Every kernel has a naive reference implementation (tpu_ref_*) beside the fast one,
 * same signature; tests compare them. Fast kernels pick AVX-512 (+BF16), AVX2 or portable
 * code at run time (tpu_cpu_features) and split work over |pool| (NULL: calling thread).
 * Kernels return TPU_OK or an error with a message naming the kernel (bad dtype
 * combination, out-of-range index for gather/scatter with check_bounds).
 */
#ifndef TPU_KERNELS_H
#define TPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/dtype.h"
#include "tpu/ir.h"
#include "tpu/status.h"
#include "tpu/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_buf {
  void *data;                      /* element [0, ..., 0] */
  tpu_dtype_t dtype;
  int rank;
  int64_t dims[TPU_MAX_RANK];
  int64_t strides[TPU_MAX_RANK];   /* elements */
} tpu_buf_t;

/* A dense row-major buffer of |shape| at |data|. */
tpu_buf_t tpu_buf_dense(void *data, tpu_dtype_t dtype, const tpu_shape_t *shape);
bool tpu_buf_is_dense(const tpu_buf_t *b);

/* ---- CPU features ------------------------------------------------------------------- */

typedef struct tpu_cpu_features {
  bool avx2_fma;
  bool avx512f;      /* with avx512bw, avx512vl, avx512dq */
  bool avx512_bf16;  /* vdpbf16ps */
} tpu_cpu_features_t;

/* What this CPU has, masked by TORCHTPU_ISA=portable|avx2|avx512 if set (for tests). */
const tpu_cpu_features_t *tpu_cpu_features(void);

/* ---- elementwise (all dtypes where the op makes sense) ---------------------------------- */

/* out = op(x); UNARY-family ops (CONVERT and BITCAST_CONVERT take out's dtype). */
tpu_status_t tpu_kernel_unary(tpu_op_t op, const tpu_buf_t *x, const tpu_buf_t *out,
                              tpu_pool_t *pool);
/* out = op(a, b); BINARY-family two-operand ops. */
tpu_status_t tpu_kernel_binary(tpu_op_t op, const tpu_buf_t *a, const tpu_buf_t *b,
                               const tpu_buf_t *out, tpu_pool_t *pool);
tpu_status_t tpu_kernel_compare(tpu_compare_dir_t dir, const tpu_buf_t *a, const tpu_buf_t *b,
                                const tpu_buf_t *out, tpu_pool_t *pool);
/* out = pred ? on_true : on_false */
tpu_status_t tpu_kernel_select(const tpu_buf_t *pred, const tpu_buf_t *on_true,
                               const tpu_buf_t *on_false, const tpu_buf_t *out,
                               tpu_pool_t *pool);
/* out = min(max(x, lo), hi) */
tpu_status_t tpu_kernel_clamp(const tpu_buf_t *lo, const tpu_buf_t *x, const tpu_buf_t *hi,
                              const tpu_buf_t *out, tpu_pool_t *pool);
/* out = x (same dtype; any strides: transpose, broadcast, slice, reverse, pad interior). */
tpu_status_t tpu_kernel_copy(const tpu_buf_t *x, const tpu_buf_t *out, tpu_pool_t *pool);
/* out[...] = value (float dtypes use value, integer and bool dtypes ivalue). */
tpu_status_t tpu_kernel_fill(const tpu_buf_t *out, double value, int64_t ivalue,
                             tpu_pool_t *pool);
tpu_status_t tpu_kernel_iota(const tpu_buf_t *out, int dim, tpu_pool_t *pool);
/* Philox4x32-10 with key |seed| and counter |offset| + linear index (see ir.h RNG). */
tpu_status_t tpu_kernel_rng(tpu_rng_dist_t dist, uint64_t seed, uint64_t offset,
                            const tpu_buf_t *out, tpu_pool_t *pool);

/* ---- reductions ---------------------------------------------------------------------- */

/* out has x's shape without the reduced dims. Floating sums accumulate in f32 (f64 for
 * f64), integer sums in i64; ARGMAX/ARGMIN write i64 (first index of the extreme; NaN
 * counts as the extreme, as in PyTorch). */
tpu_status_t tpu_kernel_reduce(tpu_reduce_kind_t kind, const tpu_buf_t *x, const bool *dims,
                               const tpu_buf_t *out, tpu_pool_t *pool);
tpu_status_t tpu_kernel_reduce_window(const tpu_reduce_window_attrs_t *attrs,
                                      const tpu_buf_t *x, const tpu_buf_t *out,
                                      tpu_pool_t *pool);
tpu_status_t tpu_kernel_scan(tpu_reduce_kind_t kind, int dim, const tpu_buf_t *x,
                             const tpu_buf_t *out, tpu_pool_t *pool);

/* ---- MXU ------------------------------------------------------------------------------- */

/* StableHLO dot_general; lhs, rhs, out in f32, bf16, f16 or f64 (out may differ, e.g.
 * bf16 x bf16 -> f32). Accumulation is f32 (f64 for f64) and the result is rounded once. */
tpu_status_t tpu_kernel_dot_general(const tpu_dot_attrs_t *attrs, const tpu_buf_t *lhs,
                                    const tpu_buf_t *rhs, const tpu_buf_t *out,
                                    tpu_pool_t *pool);
/* out = dot_general(lhs, rhs) + bias, out and bias f32: the product rounded to f32, then one
 * add, the bits of the two ops in turn. bias has out's dims (broadcast strides allowed; it
 * may not overlap out). When it is one value per column (the rhs free dims, out's last:
 * stride 0 over the batch and lhs free dims, dense over the rest) the add is done on each
 * tile of the product while it is in cache (a linear layer's bias); else after, as a
 * binary ADD. */
tpu_status_t tpu_kernel_dot_general_bias(const tpu_dot_attrs_t *attrs, const tpu_buf_t *lhs,
                                         const tpu_buf_t *rhs, const tpu_buf_t *bias,
                                         const tpu_buf_t *out, tpu_pool_t *pool);
tpu_status_t tpu_kernel_convolution(const tpu_conv_attrs_t *attrs, const tpu_buf_t *input,
                                    const tpu_buf_t *kernel, const tpu_buf_t *out,
                                    tpu_pool_t *pool);

/* ---- indexing ------------------------------------------------------------------------- */

tpu_status_t tpu_kernel_gather(const tpu_gather_attrs_t *attrs, const tpu_buf_t *x,
                               const tpu_buf_t *indices, const tpu_buf_t *out,
                               tpu_pool_t *pool);
/* out starts as a copy of x (the executor may pass x == out to update in place). */
tpu_status_t tpu_kernel_scatter(const tpu_scatter_attrs_t *attrs, const tpu_buf_t *x,
                                const tpu_buf_t *indices, const tpu_buf_t *updates,
                                const tpu_buf_t *out, tpu_pool_t *pool);
/* Sorts along attrs->dim; NaN sorts as the largest value, as in PyTorch. */
tpu_status_t tpu_kernel_sort(const tpu_sort_attrs_t *attrs, const tpu_buf_t *x,
                             const tpu_buf_t *out_values, const tpu_buf_t *out_indices,
                             tpu_pool_t *pool); /* either output may be NULL */

/* ---- linear algebra (f64 workspace per matrix; any float dtype) ---------------------------- */

/* out = the Cholesky factor of each matrix of a [..., n, n] (tpu_cholesky_attrs_t). */
tpu_status_t tpu_kernel_cholesky(bool lower, const tpu_buf_t *a, const tpu_buf_t *out,
                                 tpu_pool_t *pool);
/* out = x with op(a) x = b or x op(a) = b (tpu_triangular_solve_attrs_t). */
tpu_status_t tpu_kernel_triangular_solve(const tpu_triangular_solve_attrs_t *attrs,
                                         const tpu_buf_t *a, const tpu_buf_t *b,
                                         const tpu_buf_t *out, tpu_pool_t *pool);
/* out_lu (a's dtype) and out_pivots (i32 [..., n]) of a [..., n, n] (the IR's LU and
 * LU_PIVOTS, described in ir.h); either may be NULL. */
tpu_status_t tpu_kernel_lu(const tpu_buf_t *a, const tpu_buf_t *out_lu,
                           const tpu_buf_t *out_pivots, tpu_pool_t *pool);
/* out [..., m + 1, n] = the packed factors and tau of a [..., m, n] (the IR's GEQRF,
 * described in ir.h). */
tpu_status_t tpu_kernel_geqrf(const tpu_buf_t *a, const tpu_buf_t *out, tpu_pool_t *pool);
/* out (v's dims) = the first n columns of the product of the reflectors in v [..., m, n]
 * (m >= n) and tau [..., k] (k <= n): the IR's HOUSEHOLDER_PRODUCT. */
tpu_status_t tpu_kernel_householder_product(const tpu_buf_t *v, const tpu_buf_t *tau,
                                            const tpu_buf_t *out, tpu_pool_t *pool);
/* out [..., n + 1, n] = the eigenvectors and eigenvalues of symmetric a [..., n, n] (the
 * IR's EIGH, described in ir.h). */
tpu_status_t tpu_kernel_eigh(const tpu_buf_t *a, const tpu_buf_t *out, tpu_pool_t *pool);
/* out [..., m + n + 1, n] = U, V and s of a [..., m, n], m >= n (the IR's SVD, described in
 * ir.h). */
tpu_status_t tpu_kernel_svd(const tpu_buf_t *a, const tpu_buf_t *out, tpu_pool_t *pool);
/* perm (i32 [..., size]) from pivots (i32 [..., k], 1-based); a pivot outside 1..size gives
 * TPU_ERR_OUT_OF_RANGE. */
tpu_status_t tpu_kernel_lu_pivots_to_permutation(const tpu_buf_t *pivots, const tpu_buf_t *perm,
                                                 tpu_pool_t *pool);

/* ---- naive references (same contracts, single-threaded, obvious loops) ---------------- */

tpu_status_t tpu_ref_unary(tpu_op_t op, const tpu_buf_t *x, const tpu_buf_t *out);
tpu_status_t tpu_ref_binary(tpu_op_t op, const tpu_buf_t *a, const tpu_buf_t *b,
                            const tpu_buf_t *out);
tpu_status_t tpu_ref_reduce(tpu_reduce_kind_t kind, const tpu_buf_t *x, const bool *dims,
                            const tpu_buf_t *out);
tpu_status_t tpu_ref_dot_general(const tpu_dot_attrs_t *attrs, const tpu_buf_t *lhs,
                                 const tpu_buf_t *rhs, const tpu_buf_t *out);
tpu_status_t tpu_ref_convolution(const tpu_conv_attrs_t *attrs, const tpu_buf_t *input,
                                 const tpu_buf_t *kernel, const tpu_buf_t *out);

#ifdef __cplusplus
}
#endif
#endif /* TPU_KERNELS_H */
