/* ir.h: the IR every way of running a program goes through (eager, fused, compile).
 *
 * A graph is a list of nodes in topological order; a node is one op (src/ir/ops.def),
 * its operands (earlier nodes), its typed attributes, and its one result: a dense,
 * row-major tensor of |dtype| and |shape|. Parameters and outputs may carry strides
 * (the layout of the PyTorch tensors they bind to at run time); everything inside the
 * graph is logical. Shapes and dtypes are inferred by the builder.
 *
 * Building never fails call by call: a builder function that gets a bad request records
 * the first error in the graph (tpu_graph_status) and returns TPU_NO_VALUE, and every
 * builder given TPU_NO_VALUE returns TPU_NO_VALUE, so a lowering can build a whole
 * graph and check once. Memory for nodes and attributes comes from the graph's arena.
 *
 *   tpu_graph_t *g;  tpu_graph_create(tpu_allocator_system(), &g);
 *   tpu_value_t x = tpu_graph_parameter(g, TPU_F32, &shape, NULL);
 *   tpu_value_t y = tpu_graph_unary(g, TPU_OP_EXP, x);
 *   tpu_graph_output(g, y, NULL);
 *   if (tpu_graph_status(g) != TPU_OK) ... tpu_graph_error_message(g) ...
 */
#ifndef TPU_IR_H
#define TPU_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/allocator.h"
#include "tpu/dtype.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MAX_RANK 8
#define TPU_NO_VALUE (-1)

typedef int32_t tpu_value_t; /* index of the node that produces the value */

typedef enum tpu_op {
#define TPU_OP(name, printed, arity, family) TPU_OP_##name,
#include "tpu/ops.def"
#undef TPU_OP
  TPU_OP_COUNT
} tpu_op_t;

typedef enum tpu_op_family {
  TPU_FAMILY_LEAF,
  TPU_FAMILY_UNARY,
  TPU_FAMILY_BINARY,
  TPU_FAMILY_COMPARE,
  TPU_FAMILY_SHAPE,
  TPU_FAMILY_REDUCE,
  TPU_FAMILY_MXU,
  TPU_FAMILY_INDEX,
  TPU_FAMILY_LINALG,
} tpu_op_family_t;

const char *tpu_op_name(tpu_op_t op);          /* "ADD" */
const char *tpu_op_printed_name(tpu_op_t op);  /* "stablehlo.add" */
int tpu_op_arity(tpu_op_t op);                 /* -1: variadic */
tpu_op_family_t tpu_op_family(tpu_op_t op);

typedef struct tpu_shape {
  int rank;                     /* 0 (scalar) .. TPU_MAX_RANK */
  int64_t dims[TPU_MAX_RANK];
} tpu_shape_t;

/* Number of elements (1 for a scalar); false on overflow. */
bool tpu_shape_numel(const tpu_shape_t *shape, int64_t *out_numel);
bool tpu_shape_equal(const tpu_shape_t *a, const tpu_shape_t *b);

/* ---- attributes, one struct per op that has any ------------------------------------ */

typedef enum tpu_compare_dir {
  TPU_CMP_EQ, TPU_CMP_NE, TPU_CMP_LT, TPU_CMP_LE, TPU_CMP_GT, TPU_CMP_GE
} tpu_compare_dir_t;

typedef enum tpu_reduce_kind {
  TPU_REDUCE_SUM, TPU_REDUCE_PROD, TPU_REDUCE_MAX, TPU_REDUCE_MIN,
  TPU_REDUCE_AND, TPU_REDUCE_OR,
  TPU_REDUCE_ARGMAX, TPU_REDUCE_ARGMIN /* REDUCE only: i64 index of the first extreme */
} tpu_reduce_kind_t;

/* MXU precision for f32 operands (bf16 operands always take one pass):
 * DEFAULT one bf16 pass, HIGH three bf16 passes, HIGHEST six (about f32). */
typedef enum tpu_precision {
  TPU_PRECISION_DEFAULT, TPU_PRECISION_HIGH, TPU_PRECISION_HIGHEST
} tpu_precision_t;

typedef enum tpu_rng_dist { TPU_RNG_UNIFORM, TPU_RNG_NORMAL, TPU_RNG_BITS } tpu_rng_dist_t;

typedef struct tpu_param_attrs {
  int index;                      /* position in the run's input list */
  bool strided;                   /* false: dense row-major */
  int64_t strides[TPU_MAX_RANK];  /* elements, when strided */
} tpu_param_attrs_t;

typedef struct tpu_constant_attrs {
  double value;       /* splat value for float dtypes (and bool: 0 or 1) */
  int64_t ivalue;     /* splat value for integer dtypes */
} tpu_constant_attrs_t;

typedef struct tpu_iota_attrs { int dim; } tpu_iota_attrs_t;

/* RNG: counter-based Philox4x32-10; element i of the result uses counter offset + i and
 * key seed, so the same (seed, offset) gives the same numbers in every mode.
 * UNIFORM: [0, 1); NORMAL: mean 0, std 1 (Box-Muller); BITS: raw u32 values in i64. */
typedef struct tpu_rng_attrs { tpu_rng_dist_t dist; } tpu_rng_attrs_t;

typedef struct tpu_compare_attrs { tpu_compare_dir_t direction; } tpu_compare_attrs_t;

typedef struct tpu_broadcast_attrs {
  int64_t dims[TPU_MAX_RANK];     /* result dim of each operand dim (operand rank entries) */
} tpu_broadcast_attrs_t;

typedef struct tpu_transpose_attrs { int64_t perm[TPU_MAX_RANK]; } tpu_transpose_attrs_t;

typedef struct tpu_slice_attrs {
  int64_t start[TPU_MAX_RANK], limit[TPU_MAX_RANK], stride[TPU_MAX_RANK];
} tpu_slice_attrs_t;

/* dynamic_slice: the result shape is the slice size; start indices are clamped into
 * range, as in StableHLO (bridges check user indices before building). */
typedef struct tpu_dynamic_slice_attrs { int64_t sizes[TPU_MAX_RANK]; } tpu_dynamic_slice_attrs_t;

typedef struct tpu_concat_attrs { int dim; } tpu_concat_attrs_t;

typedef struct tpu_pad_attrs {
  int64_t lo[TPU_MAX_RANK], hi[TPU_MAX_RANK], interior[TPU_MAX_RANK]; /* lo/hi may be < 0 */
} tpu_pad_attrs_t;

typedef struct tpu_reverse_attrs { bool dims[TPU_MAX_RANK]; } tpu_reverse_attrs_t;

typedef struct tpu_reduce_attrs {
  tpu_reduce_kind_t kind;
  bool dims[TPU_MAX_RANK];        /* reduced operand dims (removed from the result) */
} tpu_reduce_attrs_t;

typedef struct tpu_reduce_window_attrs {
  tpu_reduce_kind_t kind;         /* SUM, PROD, MAX, MIN */
  int64_t window[TPU_MAX_RANK], stride[TPU_MAX_RANK], dilation[TPU_MAX_RANK];
  int64_t pad_lo[TPU_MAX_RANK], pad_hi[TPU_MAX_RANK]; /* padding takes the kind's identity */
} tpu_reduce_window_attrs_t;

typedef struct tpu_scan_attrs {
  tpu_reduce_kind_t kind;         /* SUM, PROD, MAX, MIN: inclusive scan along dim */
  int dim;
} tpu_scan_attrs_t;

typedef struct tpu_dot_attrs {
  int num_batch, num_contract;
  int64_t lhs_batch[TPU_MAX_RANK], rhs_batch[TPU_MAX_RANK];
  int64_t lhs_contract[TPU_MAX_RANK], rhs_contract[TPU_MAX_RANK];
  tpu_precision_t precision;
} tpu_dot_attrs_t;
/* dot_general result: batch dims, then lhs free dims, then rhs free dims (StableHLO). */

typedef struct tpu_conv_attrs {
  int num_spatial;                              /* 1, 2 or 3 */
  int64_t stride[3], pad_lo[3], pad_hi[3], lhs_dilation[3], rhs_dilation[3];
  int64_t feature_group_count, batch_group_count;
  /* dimension numbers: positions of each logical dim in the operand/result */
  int64_t in_batch, in_feature, in_spatial[3];
  int64_t k_out_feature, k_in_feature, k_spatial[3];
  int64_t out_batch, out_feature, out_spatial[3];
  tpu_precision_t precision;
} tpu_conv_attrs_t;

/* gather/scatter: StableHLO dimension numbers. check_bounds (our extension, not printed):
 * an out-of-range index is a run-time error (TPU_ERR_OUT_OF_RANGE naming the index)
 * instead of StableHLO's clamping, as PyTorch requires. */
typedef struct tpu_gather_attrs {
  int num_offset_dims, num_collapsed, num_start_index_map;
  int64_t offset_dims[TPU_MAX_RANK];
  int64_t collapsed_slice_dims[TPU_MAX_RANK];
  int64_t start_index_map[TPU_MAX_RANK];
  int64_t index_vector_dim;
  int64_t slice_sizes[TPU_MAX_RANK];
  bool check_bounds;
} tpu_gather_attrs_t;

/* How an update combines with the element it lands on. MUL/MAX/MIN (scatter_reduce prod,
 * amax, amin): MAX/MIN propagate NaN from either side; bool MUL/MIN are AND, MAX is OR. */
typedef enum tpu_scatter_kind {
  TPU_SCATTER_REPLACE, TPU_SCATTER_ADD, TPU_SCATTER_MUL, TPU_SCATTER_MAX, TPU_SCATTER_MIN
} tpu_scatter_kind_t;

typedef struct tpu_scatter_attrs {
  int num_update_window_dims, num_inserted_window_dims, num_scatter_dims;
  int64_t update_window_dims[TPU_MAX_RANK];
  int64_t inserted_window_dims[TPU_MAX_RANK];
  int64_t scatter_dims_to_operand_dims[TPU_MAX_RANK];
  int64_t index_vector_dim;
  tpu_scatter_kind_t kind;
  bool check_bounds;
} tpu_scatter_attrs_t;

typedef struct tpu_sort_attrs {
  int dim;
  bool descending;
  bool stable;
} tpu_sort_attrs_t;

/* CHOLESKY: a = L L^T (lower) or U^T U; reads only that triangle of a and writes 0 in
 * the other. Where a leading minor is not positive definite (or a pivot is NaN), that
 * pivot's column and everything right of it and below it are NaN. */
typedef struct tpu_cholesky_attrs { bool lower; } tpu_cholesky_attrs_t;

/* TRIANGULAR_SOLVE: x with op(a) x = b (left_side) or x op(a) = b, op(a) = a or a^T
 * (transpose_a); a is read only in its lower or upper triangle, its diagonal taken as 1
 * with unit_diagonal. a: [..., n, n]; b and the result: [..., n, k] (left) or [..., k, n]
 * with the same batch dims as a. */
typedef struct tpu_triangular_solve_attrs {
  bool left_side, lower, unit_diagonal, transpose_a;
} tpu_triangular_solve_attrs_t;

/* LU (packed factors: L below the diagonal with its unit diagonal implied, U on and above)
 * and LU_PIVOTS (i32 [..., n]: row j was swapped with row pivots[j] - 1, LAPACK's getrf) of
 * a [..., n, n] with partial pivoting: the first row of largest magnitude in the column.
 * A zero pivot is left in place without scaling (U has a zero on its diagonal there).
 * LU_PIVOTS_TO_PERMUTATION: pivots i32 [..., k] -> perm i32 [..., size] with
 * (P a)[i] = a[perm[i]], the swaps applied in order to 0 .. size-1. */
typedef struct tpu_lu_permutation_attrs { int64_t size; } tpu_lu_permutation_attrs_t;

/* GEQRF: the Householder QR of a [..., m, n] as LAPACK's geqrf stores it, in one result
 * [..., m + 1, n]: its first m rows are R on and above the diagonal and below it the
 * vectors v_i (v_i[i] = 1 implied); its last row holds tau in its first k = min(m, n)
 * entries (then zeros): a = Q R, Q = H_0 H_1 ... H_{k-1}, H_i = I - tau_i v_i v_i^T.
 * Each reflector makes R's diagonal element -sign(a_ii) * norm (LAPACK's dlarfg); a column
 * already zero below the diagonal gets tau = 0. HOUSEHOLDER_PRODUCT (v [..., m, n], m >= n;
 * tau [..., k], k <= n): the first n columns of H_0 ... H_{k-1} (LAPACK's orgqr), reading v
 * only below the diagonal of its first k columns.
 * EIGH: the eigendecomposition a = V diag(w) V^T of symmetric a [..., n, n], reading only
 * its lower triangle, in one result [..., n + 1, n]: its first n rows are V (column j is
 * the unit eigenvector of w_j), its last row is w in ascending order. Eigenvectors are
 * unique only up to sign (and within repeated eigenvalues up to rotation): the ones given
 * are the Jacobi method's (eigh.c), not LAPACK's. A matrix with a NaN or an infinity gives
 * NaN throughout.
 * SVD: the thin singular value decomposition a = U diag(s) V^T of a [..., m, n], m >= n, in
 * one result [..., m + n + 1, n]: rows 0..m-1 are U (orthonormal columns), rows m..m+n-1
 * are V (n x n orthogonal; V^T is PyTorch's Vh), the last row is s, descending and >= 0.
 * Each pair of singular vectors is unique only up to a common sign (and within repeated
 * singular values up to rotation): the ones given are the one-sided Jacobi method's
 * (svd.c), not LAPACK's. A matrix with a NaN or an infinity gives NaN throughout. */

typedef union tpu_attrs {
  tpu_param_attrs_t param;
  tpu_constant_attrs_t constant;
  tpu_iota_attrs_t iota;
  tpu_rng_attrs_t rng;
  tpu_compare_attrs_t compare;
  tpu_broadcast_attrs_t broadcast;
  tpu_transpose_attrs_t transpose;
  tpu_slice_attrs_t slice;
  tpu_dynamic_slice_attrs_t dynamic_slice;
  tpu_concat_attrs_t concat;
  tpu_pad_attrs_t pad;
  tpu_reverse_attrs_t reverse;
  tpu_reduce_attrs_t reduce;
  tpu_reduce_window_attrs_t reduce_window;
  tpu_scan_attrs_t scan;
  tpu_dot_attrs_t dot;
  tpu_conv_attrs_t conv;
  tpu_gather_attrs_t gather;
  tpu_scatter_attrs_t scatter;
  tpu_sort_attrs_t sort;
  tpu_cholesky_attrs_t cholesky;
  tpu_triangular_solve_attrs_t triangular_solve;
  tpu_lu_permutation_attrs_t lu_permutation;
} tpu_attrs_t;

typedef struct tpu_node {
  tpu_op_t op;
  tpu_dtype_t dtype;            /* of the result */
  tpu_shape_t shape;            /* of the result */
  int num_operands;
  const tpu_value_t *operands;  /* in the graph's arena */
  tpu_attrs_t attrs;            /* the member named after the op, if any */
} tpu_node_t;

typedef struct tpu_graph tpu_graph_t;

/* ---- graph ------------------------------------------------------------------------------- */

tpu_status_t tpu_graph_create(tpu_allocator_t host, tpu_graph_t **out_graph);
void tpu_graph_destroy(tpu_graph_t *g);  /* NULL is ignored */
/* Empties |g| for reuse (no nodes, parameters or outputs, no error) and keeps its node and
 * output arrays and newest arena chunk, up to a few MiB, so a graph rebuilt at about the
 * same size allocates nothing. NULL is ignored. */
void tpu_graph_clear(tpu_graph_t *g);

/* The first error a builder call recorded (TPU_OK if none) and its message. */
tpu_status_t tpu_graph_status(const tpu_graph_t *g);
const char *tpu_graph_error_message(const tpu_graph_t *g);

int tpu_graph_num_nodes(const tpu_graph_t *g);
const tpu_node_t *tpu_graph_node(const tpu_graph_t *g, tpu_value_t v); /* NULL if invalid */
int tpu_graph_num_params(const tpu_graph_t *g);
int tpu_graph_num_outputs(const tpu_graph_t *g);
tpu_value_t tpu_graph_output_value(const tpu_graph_t *g, int i);
/* Layout of output |i|: false if dense, else strides (elements) copied to out_strides. */
bool tpu_graph_output_strides(const tpu_graph_t *g, int i, int64_t out_strides[TPU_MAX_RANK]);

/* Checks every invariant the builder enforces (operands precede users, shapes and dtypes
 * match the inference rules, attributes in range, parameter indices 0..n-1 unique). */
tpu_status_t tpu_graph_verify(const tpu_graph_t *g);

/* StableHLO MLIR text of the graph as `module @|name| { func.func public @main(...) }`
 * (|name| NULL or "": "graph"), NUL-terminated, allocated with |host| (free with
 * host.free). The graph must verify; strides and check_bounds are not printed. */
tpu_status_t tpu_graph_print_stablehlo(const tpu_graph_t *g, const char *name,
                                       tpu_allocator_t host, char **out_text,
                                       size_t *out_len);

/* A 64-bit structural hash of the graph (ops, attributes, dtypes, shapes, layouts). */
uint64_t tpu_graph_hash(const tpu_graph_t *g);

/* ---- serialization (src/ir/serialize.c) ---------------------------------------------- */

/* The graph as bytes (every node, attribute, constant, parameter and output layout), with a
 * header carrying a format version, tpu_graph_serial_tag() and a checksum. Allocated with
 * |host| (free with tpu_allocator_free). The graph must have no build error. */
tpu_status_t tpu_graph_serialize(const tpu_graph_t *g, tpu_allocator_t host,
                                 unsigned char **out_bytes, size_t *out_len);
/* The graph |bytes| hold, verified (tpu_graph_verify). Bytes that are truncated, corrupted,
 * or from a build with another tag give an error status (never a crash or an overread). */
tpu_status_t tpu_graph_deserialize(const void *bytes, size_t len, tpu_allocator_t host,
                                   tpu_graph_t **out_graph);
/* Hash of what serialized bytes depend on (format version, op table, dtypes, byte order). */
uint64_t tpu_graph_serial_tag(void);

/* ---- builder --------------------------------------------------------------------------- */

/* Parameter |index| is assigned in call order (0, 1, ...). strides: NULL = dense (strides
 * that are row-major for |shape| are recorded as dense too). */
tpu_value_t tpu_graph_parameter(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t *shape,
                                const int64_t *strides);
tpu_value_t tpu_graph_constant(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t *shape,
                               double value);
tpu_value_t tpu_graph_constant_int(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t *shape,
                                   int64_t value);
tpu_value_t tpu_graph_iota(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t *shape, int dim);
/* seed and offset: i64 scalars (usually parameters, so the executable is reused). */
tpu_value_t tpu_graph_rng(tpu_graph_t *g, tpu_rng_dist_t dist, tpu_dtype_t dtype,
                          const tpu_shape_t *shape, tpu_value_t seed, tpu_value_t offset);

tpu_value_t tpu_graph_unary(tpu_graph_t *g, tpu_op_t op, tpu_value_t x);
tpu_value_t tpu_graph_binary(tpu_graph_t *g, tpu_op_t op, tpu_value_t a, tpu_value_t b);
tpu_value_t tpu_graph_compare(tpu_graph_t *g, tpu_compare_dir_t dir, tpu_value_t a,
                              tpu_value_t b);
tpu_value_t tpu_graph_select(tpu_graph_t *g, tpu_value_t pred, tpu_value_t on_true,
                             tpu_value_t on_false);
tpu_value_t tpu_graph_clamp(tpu_graph_t *g, tpu_value_t lo, tpu_value_t x, tpu_value_t hi);
tpu_value_t tpu_graph_convert(tpu_graph_t *g, tpu_value_t x, tpu_dtype_t dtype);
tpu_value_t tpu_graph_bitcast_convert(tpu_graph_t *g, tpu_value_t x, tpu_dtype_t dtype);

tpu_value_t tpu_graph_broadcast_in_dim(tpu_graph_t *g, tpu_value_t x, const tpu_shape_t *shape,
                                       const int64_t *dims);
tpu_value_t tpu_graph_reshape(tpu_graph_t *g, tpu_value_t x, const tpu_shape_t *shape);
tpu_value_t tpu_graph_transpose(tpu_graph_t *g, tpu_value_t x, const int64_t *perm);
tpu_value_t tpu_graph_slice(tpu_graph_t *g, tpu_value_t x, const int64_t *start,
                            const int64_t *limit, const int64_t *stride);
tpu_value_t tpu_graph_dynamic_slice(tpu_graph_t *g, tpu_value_t x, const tpu_value_t *starts,
                                    const int64_t *sizes);
tpu_value_t tpu_graph_dynamic_update_slice(tpu_graph_t *g, tpu_value_t x, tpu_value_t update,
                                           const tpu_value_t *starts);
tpu_value_t tpu_graph_concatenate(tpu_graph_t *g, const tpu_value_t *xs, int n, int dim);
tpu_value_t tpu_graph_pad(tpu_graph_t *g, tpu_value_t x, tpu_value_t value, const int64_t *lo,
                          const int64_t *hi, const int64_t *interior);
tpu_value_t tpu_graph_reverse(tpu_graph_t *g, tpu_value_t x, const bool *dims);

tpu_value_t tpu_graph_reduce(tpu_graph_t *g, tpu_reduce_kind_t kind, tpu_value_t x,
                             const bool *dims);
tpu_value_t tpu_graph_reduce_window(tpu_graph_t *g, tpu_value_t x,
                                    const tpu_reduce_window_attrs_t *attrs);
tpu_value_t tpu_graph_scan(tpu_graph_t *g, tpu_reduce_kind_t kind, tpu_value_t x, int dim);

tpu_value_t tpu_graph_dot_general(tpu_graph_t *g, tpu_value_t lhs, tpu_value_t rhs,
                                  const tpu_dot_attrs_t *attrs, tpu_dtype_t result_dtype);
tpu_value_t tpu_graph_convolution(tpu_graph_t *g, tpu_value_t input, tpu_value_t kernel,
                                  const tpu_conv_attrs_t *attrs, tpu_dtype_t result_dtype);

tpu_value_t tpu_graph_gather(tpu_graph_t *g, tpu_value_t x, tpu_value_t indices,
                             const tpu_gather_attrs_t *attrs);
tpu_value_t tpu_graph_scatter(tpu_graph_t *g, tpu_value_t x, tpu_value_t indices,
                              tpu_value_t updates, const tpu_scatter_attrs_t *attrs);
tpu_value_t tpu_graph_sort(tpu_graph_t *g, tpu_value_t x, const tpu_sort_attrs_t *attrs);
tpu_value_t tpu_graph_argsort(tpu_graph_t *g, tpu_value_t x, const tpu_sort_attrs_t *attrs);

tpu_value_t tpu_graph_cholesky(tpu_graph_t *g, tpu_value_t a, bool lower);
tpu_value_t tpu_graph_triangular_solve(tpu_graph_t *g, tpu_value_t a, tpu_value_t b,
                                       const tpu_triangular_solve_attrs_t *attrs);
tpu_value_t tpu_graph_lu(tpu_graph_t *g, tpu_value_t a);
tpu_value_t tpu_graph_lu_pivots(tpu_graph_t *g, tpu_value_t a);
tpu_value_t tpu_graph_lu_pivots_to_permutation(tpu_graph_t *g, tpu_value_t pivots, int64_t size);
tpu_value_t tpu_graph_geqrf(tpu_graph_t *g, tpu_value_t a);
tpu_value_t tpu_graph_householder_product(tpu_graph_t *g, tpu_value_t v, tpu_value_t tau);
tpu_value_t tpu_graph_eigh(tpu_graph_t *g, tpu_value_t a);
tpu_value_t tpu_graph_svd(tpu_graph_t *g, tpu_value_t a);

/* Copies every node of |src| (a well-typed graph: built by the builders, or deserialized)
 * except its parameters into |dst|, with its type in |src| (which the shape rules would
 * give it again): parameter i of |src| becomes param_values[i] (a value of |dst| of
 * the same dtype and shape; strides do not matter), or TPU_NO_VALUE for a parameter no
 * node of |src| uses (an argument the op overwrites without reading, as fill_'s self), and
 * out_values[v] (an array of tpu_graph_num_nodes(src) entries) receives the |dst| value of
 * each node v of |src|.
 * Outputs of |src| are not marked as outputs of |dst|. Errors are recorded in |dst|. */
tpu_status_t tpu_graph_inline(tpu_graph_t *dst, const tpu_graph_t *src,
                              const tpu_value_t *param_values, tpu_value_t *out_values);

/* Marks |v| as the next output (0, 1, ...). strides: NULL = dense (row-major strides are
 * recorded as dense). */
tpu_status_t tpu_graph_output(tpu_graph_t *g, tpu_value_t v, const int64_t *strides);

#ifdef __cplusplus
}
#endif
#endif /* TPU_IR_H */
