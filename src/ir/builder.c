/* builder.c: the graph builder functions of ir.h (tpu_graph_parameter ... tpu_graph_argsort).
 *
 * Each builder fills a node (attributes copied in a canonical form: entries past the
 * operand's rank or past a count are zero, so equal requests hash equally), runs the op's
 * shape rule (shape_rules.c) and appends the node. A bad request records the graph's first
 * error ("<builder name>: <problem>") and returns TPU_NO_VALUE; a TPU_NO_VALUE operand in a
 * graph that already has an error just returns TPU_NO_VALUE.
 */
#include <math.h>
#include <string.h>

#include "ir/graph_internal.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static tpu_node_t node_init(tpu_op_t op) {
  tpu_node_t n;
  memset(&n, 0, sizeof(n));
  n.op = op;
  return n;
}

static const char *name_of(const tpu_node_t *n, char *buf, size_t cap) {
  return tpu_ir_builder_name(n->op, &n->attrs, buf, cap);
}

/* True if operand |i| (value |v|) can be used; otherwise records an error (unless |v| is
 * TPU_NO_VALUE propagating an earlier one) and returns false. */
static bool value_ok(tpu_graph_t *g, const tpu_node_t *n, tpu_value_t v, int i) {
  char name[64];
  if (v == TPU_NO_VALUE) {
    if (g->status == TPU_OK) {
      tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT, "%s: operand %d is TPU_NO_VALUE",
                  name_of(n, name, sizeof(name)), i);
    }
    return false;
  }
  if (v < 0 || v >= g->num_nodes) {
    tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT,
                "%s: operand %d (value %d) is not a value of this graph (%d nodes)",
                name_of(n, name, sizeof(name)), i, (int)v, g->num_nodes);
    return false;
  }
  return true;
}

/* Checks the operands, runs the rule and appends |n| with operands |ops|. */
static tpu_value_t finish(tpu_graph_t *g, tpu_node_t *n, const tpu_value_t *ops, int count) {
  for (int i = 0; i < count; i++) {
    if (!value_ok(g, n, ops[i], i)) return TPU_NO_VALUE;
  }
  n->operands = ops;
  n->num_operands = count;
  char msg[TPU_IR_MESSAGE_CAP];
  tpu_dtype_t dt;
  tpu_shape_t sh;
  tpu_status_t st = tpu_ir_infer(g, n, &dt, &sh, msg, sizeof(msg));
  if (st != TPU_OK) {
    tpu_ir_fail(g, st, "%s", msg);
    return TPU_NO_VALUE;
  }
  n->dtype = dt;
  n->shape = sh;
  return tpu_ir_append_raw(g, n, ops, count);
}

static tpu_value_t bad(tpu_graph_t *g, const tpu_node_t *n, const char *problem) {
  char name[64];
  tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT, "%s: %s", name_of(n, name, sizeof(name)), problem);
  return TPU_NO_VALUE;
}

/* Copies a caller's shape into |n->shape| (zeroing unused dims); false (error recorded)
 * if it is NULL or its rank is out of range. */
static bool take_shape(tpu_graph_t *g, tpu_node_t *n, const tpu_shape_t *shape) {
  char name[64];
  if (!shape) {
    bad(g, n, "shape is NULL");
    return false;
  }
  if (shape->rank < 0 || shape->rank > TPU_MAX_RANK) {
    tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT, "%s: rank %d is outside 0..%d",
                name_of(n, name, sizeof(name)), shape->rank, TPU_MAX_RANK);
    return false;
  }
  memset(&n->shape, 0, sizeof(n->shape));
  n->shape.rank = shape->rank;
  memcpy(n->shape.dims, shape->dims, (size_t)shape->rank * sizeof(int64_t));
  return true;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* Rank of operand |v| after checking it (-1 if unusable; error handled). */
static int rank_of(tpu_graph_t *g, const tpu_node_t *n, tpu_value_t v, int i) {
  if (!value_ok(g, n, v, i)) return -1;
  return g->nodes[v].shape.rank;
}

/* ---- leaves ------------------------------------------------------------------------------ */

tpu_value_t tpu_graph_parameter(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t *shape,
                                const int64_t *strides) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_PARAMETER);
  n.dtype = dtype;
  if (!take_shape(g, &n, shape)) return TPU_NO_VALUE;
  n.attrs.param.index = g->num_params;
  if (strides && !tpu_ir_strides_are_dense(&n.shape, strides)) { /* dense: stored as dense */
    n.attrs.param.strided = true;
    memcpy(n.attrs.param.strides, strides, (size_t)n.shape.rank * sizeof(int64_t));
  }
  return finish(g, &n, NULL, 0);
}

tpu_value_t tpu_graph_constant(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t *shape,
                               double value) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_CONSTANT);
  n.dtype = dtype;
  if (!take_shape(g, &n, shape)) return TPU_NO_VALUE;
  if (tpu_dtype_is_float(dtype)) {
    n.attrs.constant.value = value;
  } else if (dtype == TPU_BOOL) {
    n.attrs.constant.ivalue = value != 0.0;  /* NaN is true, as in C and PyTorch */
    n.attrs.constant.value = (double)n.attrs.constant.ivalue;
  } else if (tpu_dtype_valid(dtype)) {
    if (!isfinite(value) || value != trunc(value)) {
      char name[64];
      tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT, "%s: value %g is not an integer (dtype %s)",
                  name_of(&n, name, sizeof(name)), value, tpu_dtype_name(dtype));
      return TPU_NO_VALUE;
    }
    if (value < -9223372036854775808.0 || value >= 9223372036854775808.0) {
      char name[64];
      tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT, "%s: value %g does not fit in %s",
                  name_of(&n, name, sizeof(name)), value, tpu_dtype_name(dtype));
      return TPU_NO_VALUE;
    }
    n.attrs.constant.ivalue = (int64_t)value;
    n.attrs.constant.value = value;
  }
  return finish(g, &n, NULL, 0);
}

tpu_value_t tpu_graph_constant_int(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t *shape,
                                   int64_t value) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_CONSTANT);
  n.dtype = dtype;
  if (!take_shape(g, &n, shape)) return TPU_NO_VALUE;
  if (tpu_dtype_is_float(dtype)) {
    n.attrs.constant.value = (double)value;
  } else if (dtype == TPU_BOOL) {
    n.attrs.constant.ivalue = value != 0;
    n.attrs.constant.value = (double)n.attrs.constant.ivalue;
  } else {
    n.attrs.constant.ivalue = value;
    n.attrs.constant.value = (double)value;
  }
  return finish(g, &n, NULL, 0);
}

tpu_value_t tpu_graph_iota(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t *shape,
                           int dim) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_IOTA);
  n.dtype = dtype;
  if (!take_shape(g, &n, shape)) return TPU_NO_VALUE;
  n.attrs.iota.dim = dim;
  return finish(g, &n, NULL, 0);
}

tpu_value_t tpu_graph_rng(tpu_graph_t *g, tpu_rng_dist_t dist, tpu_dtype_t dtype,
                          const tpu_shape_t *shape, tpu_value_t seed, tpu_value_t offset) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_RNG);
  n.dtype = dtype;
  n.attrs.rng.dist = dist;
  tpu_value_t ops[2] = {seed, offset};
  if (!value_ok(g, &n, seed, 0) || !value_ok(g, &n, offset, 1)) return TPU_NO_VALUE;
  if (!take_shape(g, &n, shape)) return TPU_NO_VALUE;
  return finish(g, &n, ops, 2);
}

/* ---- elementwise ---------------------------------------------------------------------- */

tpu_value_t tpu_graph_unary(tpu_graph_t *g, tpu_op_t op, tpu_value_t x) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(op);
  if ((unsigned)op >= TPU_OP_COUNT || tpu_op_family(op) != TPU_FAMILY_UNARY) {
    tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT, "unary: %s is not a unary op", tpu_op_name(op));
    return TPU_NO_VALUE;
  }
  if (op == TPU_OP_CONVERT || op == TPU_OP_BITCAST_CONVERT) {
    tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT,
                "unary: %s needs a result dtype (use tpu_graph_convert or "
                "tpu_graph_bitcast_convert)", tpu_op_name(op));
    return TPU_NO_VALUE;
  }
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_binary(tpu_graph_t *g, tpu_op_t op, tpu_value_t a, tpu_value_t b) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(op);
  if ((unsigned)op >= TPU_OP_COUNT || tpu_op_family(op) != TPU_FAMILY_BINARY ||
      tpu_op_arity(op) != 2) {
    tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT, "binary: %s is not a binary op",
                tpu_op_name(op));
    return TPU_NO_VALUE;
  }
  tpu_value_t ops[2] = {a, b};
  return finish(g, &n, ops, 2);
}

tpu_value_t tpu_graph_compare(tpu_graph_t *g, tpu_compare_dir_t dir, tpu_value_t a,
                              tpu_value_t b) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_COMPARE);
  n.attrs.compare.direction = dir;
  tpu_value_t ops[2] = {a, b};
  return finish(g, &n, ops, 2);
}

tpu_value_t tpu_graph_select(tpu_graph_t *g, tpu_value_t pred, tpu_value_t on_true,
                             tpu_value_t on_false) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_SELECT);
  tpu_value_t ops[3] = {pred, on_true, on_false};
  return finish(g, &n, ops, 3);
}

tpu_value_t tpu_graph_clamp(tpu_graph_t *g, tpu_value_t lo, tpu_value_t x, tpu_value_t hi) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_CLAMP);
  tpu_value_t ops[3] = {lo, x, hi};
  return finish(g, &n, ops, 3);
}

tpu_value_t tpu_graph_convert(tpu_graph_t *g, tpu_value_t x, tpu_dtype_t dtype) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_CONVERT);
  n.dtype = dtype;
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_bitcast_convert(tpu_graph_t *g, tpu_value_t x, tpu_dtype_t dtype) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_BITCAST_CONVERT);
  n.dtype = dtype;
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

/* ---- data movement ------------------------------------------------------------------------ */

tpu_value_t tpu_graph_broadcast_in_dim(tpu_graph_t *g, tpu_value_t x, const tpu_shape_t *shape,
                                       const int64_t *dims) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_BROADCAST_IN_DIM);
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  if (!take_shape(g, &n, shape)) return TPU_NO_VALUE;
  if (r > 0 && !dims) return bad(g, &n, "dims is NULL");
  if (r > 0) memcpy(n.attrs.broadcast.dims, dims, (size_t)r * sizeof(int64_t));
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_reshape(tpu_graph_t *g, tpu_value_t x, const tpu_shape_t *shape) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_RESHAPE);
  if (!value_ok(g, &n, x, 0)) return TPU_NO_VALUE;
  if (!take_shape(g, &n, shape)) return TPU_NO_VALUE;
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_transpose(tpu_graph_t *g, tpu_value_t x, const int64_t *perm) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_TRANSPOSE);
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  if (r > 0 && !perm) return bad(g, &n, "perm is NULL");
  if (r > 0) memcpy(n.attrs.transpose.perm, perm, (size_t)r * sizeof(int64_t));
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_slice(tpu_graph_t *g, tpu_value_t x, const int64_t *start,
                            const int64_t *limit, const int64_t *stride) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_SLICE);
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  if (r > 0 && (!start || !limit)) return bad(g, &n, "start or limit is NULL");
  for (int d = 0; d < r; d++) {
    n.attrs.slice.start[d] = start[d];
    n.attrs.slice.limit[d] = limit[d];
    n.attrs.slice.stride[d] = stride ? stride[d] : 1;
  }
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_dynamic_slice(tpu_graph_t *g, tpu_value_t x, const tpu_value_t *starts,
                                    const int64_t *sizes) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_DYNAMIC_SLICE);
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  if (r > 0 && (!starts || !sizes)) return bad(g, &n, "starts or sizes is NULL");
  tpu_value_t ops[1 + TPU_MAX_RANK];
  ops[0] = x;
  for (int d = 0; d < r; d++) {
    ops[1 + d] = starts[d];
    n.attrs.dynamic_slice.sizes[d] = sizes[d];
  }
  return finish(g, &n, ops, 1 + r);
}

tpu_value_t tpu_graph_dynamic_update_slice(tpu_graph_t *g, tpu_value_t x, tpu_value_t update,
                                           const tpu_value_t *starts) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_DYNAMIC_UPDATE_SLICE);
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  if (r > 0 && !starts) return bad(g, &n, "starts is NULL");
  tpu_value_t ops[2 + TPU_MAX_RANK];
  ops[0] = x;
  ops[1] = update;
  for (int d = 0; d < r; d++) ops[2 + d] = starts[d];
  return finish(g, &n, ops, 2 + r);
}

tpu_value_t tpu_graph_concatenate(tpu_graph_t *g, const tpu_value_t *xs, int n_xs, int dim) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_CONCATENATE);
  n.attrs.concat.dim = dim;
  if (n_xs < 1 || !xs) return bad(g, &n, "needs at least one operand");
  return finish(g, &n, xs, n_xs);
}

tpu_value_t tpu_graph_pad(tpu_graph_t *g, tpu_value_t x, tpu_value_t value, const int64_t *lo,
                          const int64_t *hi, const int64_t *interior) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_PAD);
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  for (int d = 0; d < r; d++) {
    n.attrs.pad.lo[d] = lo ? lo[d] : 0;
    n.attrs.pad.hi[d] = hi ? hi[d] : 0;
    n.attrs.pad.interior[d] = interior ? interior[d] : 0;
  }
  tpu_value_t ops[2] = {x, value};
  return finish(g, &n, ops, 2);
}

tpu_value_t tpu_graph_reverse(tpu_graph_t *g, tpu_value_t x, const bool *dims) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_REVERSE);
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  for (int d = 0; d < r && dims; d++) n.attrs.reverse.dims[d] = dims[d];
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

/* ---- reductions ------------------------------------------------------------------------ */

tpu_value_t tpu_graph_reduce(tpu_graph_t *g, tpu_reduce_kind_t kind, tpu_value_t x,
                             const bool *dims) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_REDUCE);
  n.attrs.reduce.kind = kind;
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  if (r > 0 && !dims) return bad(g, &n, "dims is NULL");
  for (int d = 0; d < r; d++) n.attrs.reduce.dims[d] = dims[d];
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_reduce_window(tpu_graph_t *g, tpu_value_t x,
                                    const tpu_reduce_window_attrs_t *attrs) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_REDUCE_WINDOW);
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  if (!attrs) return bad(g, &n, "attrs is NULL");
  tpu_reduce_window_attrs_t *a = &n.attrs.reduce_window;
  a->kind = attrs->kind;
  for (int d = 0; d < r; d++) {
    a->window[d] = attrs->window[d];
    a->stride[d] = attrs->stride[d];
    a->dilation[d] = attrs->dilation[d];
    a->pad_lo[d] = attrs->pad_lo[d];
    a->pad_hi[d] = attrs->pad_hi[d];
  }
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_scan(tpu_graph_t *g, tpu_reduce_kind_t kind, tpu_value_t x, int dim) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_SCAN);
  n.attrs.scan.kind = kind;
  n.attrs.scan.dim = dim;
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

/* ---- MXU --------------------------------------------------------------------------------- */

tpu_value_t tpu_graph_dot_general(tpu_graph_t *g, tpu_value_t lhs, tpu_value_t rhs,
                                  const tpu_dot_attrs_t *attrs, tpu_dtype_t result_dtype) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_DOT_GENERAL);
  n.dtype = result_dtype;
  if (!attrs) return bad(g, &n, "attrs is NULL");
  tpu_dot_attrs_t *a = &n.attrs.dot;
  a->num_batch = attrs->num_batch;
  a->num_contract = attrs->num_contract;
  a->precision = attrs->precision;
  int nb = clampi(attrs->num_batch, 0, TPU_MAX_RANK);
  int nc = clampi(attrs->num_contract, 0, TPU_MAX_RANK);
  for (int i = 0; i < nb; i++) {
    a->lhs_batch[i] = attrs->lhs_batch[i];
    a->rhs_batch[i] = attrs->rhs_batch[i];
  }
  for (int i = 0; i < nc; i++) {
    a->lhs_contract[i] = attrs->lhs_contract[i];
    a->rhs_contract[i] = attrs->rhs_contract[i];
  }
  tpu_value_t ops[2] = {lhs, rhs};
  return finish(g, &n, ops, 2);
}

tpu_value_t tpu_graph_convolution(tpu_graph_t *g, tpu_value_t input, tpu_value_t kernel,
                                  const tpu_conv_attrs_t *attrs, tpu_dtype_t result_dtype) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_CONVOLUTION);
  n.dtype = result_dtype;
  if (!attrs) return bad(g, &n, "attrs is NULL");
  tpu_conv_attrs_t *a = &n.attrs.conv;
  a->num_spatial = attrs->num_spatial;
  a->feature_group_count = attrs->feature_group_count;
  a->batch_group_count = attrs->batch_group_count;
  a->in_batch = attrs->in_batch;
  a->in_feature = attrs->in_feature;
  a->k_out_feature = attrs->k_out_feature;
  a->k_in_feature = attrs->k_in_feature;
  a->out_batch = attrs->out_batch;
  a->out_feature = attrs->out_feature;
  a->precision = attrs->precision;
  int ns = clampi(attrs->num_spatial, 0, 3);
  for (int i = 0; i < ns; i++) {
    a->stride[i] = attrs->stride[i];
    a->pad_lo[i] = attrs->pad_lo[i];
    a->pad_hi[i] = attrs->pad_hi[i];
    a->lhs_dilation[i] = attrs->lhs_dilation[i];
    a->rhs_dilation[i] = attrs->rhs_dilation[i];
    a->in_spatial[i] = attrs->in_spatial[i];
    a->k_spatial[i] = attrs->k_spatial[i];
    a->out_spatial[i] = attrs->out_spatial[i];
  }
  tpu_value_t ops[2] = {input, kernel};
  return finish(g, &n, ops, 2);
}

/* ---- indexing --------------------------------------------------------------------------- */

tpu_value_t tpu_graph_gather(tpu_graph_t *g, tpu_value_t x, tpu_value_t indices,
                             const tpu_gather_attrs_t *attrs) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_GATHER);
  int r = rank_of(g, &n, x, 0);
  if (r < 0) return TPU_NO_VALUE;
  if (!attrs) return bad(g, &n, "attrs is NULL");
  tpu_gather_attrs_t *a = &n.attrs.gather;
  a->num_offset_dims = attrs->num_offset_dims;
  a->num_collapsed = attrs->num_collapsed;
  a->num_start_index_map = attrs->num_start_index_map;
  a->index_vector_dim = attrs->index_vector_dim;
  a->check_bounds = attrs->check_bounds;
  for (int i = 0; i < clampi(attrs->num_offset_dims, 0, TPU_MAX_RANK); i++) {
    a->offset_dims[i] = attrs->offset_dims[i];
  }
  for (int i = 0; i < clampi(attrs->num_collapsed, 0, TPU_MAX_RANK); i++) {
    a->collapsed_slice_dims[i] = attrs->collapsed_slice_dims[i];
  }
  for (int i = 0; i < clampi(attrs->num_start_index_map, 0, TPU_MAX_RANK); i++) {
    a->start_index_map[i] = attrs->start_index_map[i];
  }
  for (int d = 0; d < r; d++) a->slice_sizes[d] = attrs->slice_sizes[d];
  tpu_value_t ops[2] = {x, indices};
  return finish(g, &n, ops, 2);
}

tpu_value_t tpu_graph_scatter(tpu_graph_t *g, tpu_value_t x, tpu_value_t indices,
                              tpu_value_t updates, const tpu_scatter_attrs_t *attrs) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_SCATTER);
  if (!attrs) return bad(g, &n, "attrs is NULL");
  tpu_scatter_attrs_t *a = &n.attrs.scatter;
  a->num_update_window_dims = attrs->num_update_window_dims;
  a->num_inserted_window_dims = attrs->num_inserted_window_dims;
  a->num_scatter_dims = attrs->num_scatter_dims;
  a->index_vector_dim = attrs->index_vector_dim;
  a->kind = attrs->kind;
  a->check_bounds = attrs->check_bounds;
  for (int i = 0; i < clampi(attrs->num_update_window_dims, 0, TPU_MAX_RANK); i++) {
    a->update_window_dims[i] = attrs->update_window_dims[i];
  }
  for (int i = 0; i < clampi(attrs->num_inserted_window_dims, 0, TPU_MAX_RANK); i++) {
    a->inserted_window_dims[i] = attrs->inserted_window_dims[i];
  }
  for (int i = 0; i < clampi(attrs->num_scatter_dims, 0, TPU_MAX_RANK); i++) {
    a->scatter_dims_to_operand_dims[i] = attrs->scatter_dims_to_operand_dims[i];
  }
  tpu_value_t ops[3] = {x, indices, updates};
  return finish(g, &n, ops, 3);
}

static tpu_value_t sort_like(tpu_graph_t *g, tpu_op_t op, tpu_value_t x,
                             const tpu_sort_attrs_t *attrs) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(op);
  if (!attrs) return bad(g, &n, "attrs is NULL");
  n.attrs.sort.dim = attrs->dim;
  n.attrs.sort.descending = attrs->descending;
  n.attrs.sort.stable = attrs->stable;
  tpu_value_t ops[1] = {x};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_sort(tpu_graph_t *g, tpu_value_t x, const tpu_sort_attrs_t *attrs) {
  return sort_like(g, TPU_OP_SORT, x, attrs);
}

tpu_value_t tpu_graph_argsort(tpu_graph_t *g, tpu_value_t x, const tpu_sort_attrs_t *attrs) {
  return sort_like(g, TPU_OP_ARGSORT, x, attrs);
}

/* ---- linear algebra ----------------------------------------------------------------------- */

tpu_value_t tpu_graph_cholesky(tpu_graph_t *g, tpu_value_t a, bool lower) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_CHOLESKY);
  n.attrs.cholesky.lower = lower;
  tpu_value_t ops[1] = {a};
  return finish(g, &n, ops, 1);
}

static tpu_value_t unary_linalg(tpu_graph_t *g, tpu_op_t op, tpu_value_t a) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(op);
  tpu_value_t ops[1] = {a};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_lu(tpu_graph_t *g, tpu_value_t a) { return unary_linalg(g, TPU_OP_LU, a); }

tpu_value_t tpu_graph_lu_pivots(tpu_graph_t *g, tpu_value_t a) {
  return unary_linalg(g, TPU_OP_LU_PIVOTS, a);
}

tpu_value_t tpu_graph_geqrf(tpu_graph_t *g, tpu_value_t a) {
  return unary_linalg(g, TPU_OP_GEQRF, a);
}

tpu_value_t tpu_graph_eigh(tpu_graph_t *g, tpu_value_t a) {
  return unary_linalg(g, TPU_OP_EIGH, a);
}

tpu_value_t tpu_graph_svd(tpu_graph_t *g, tpu_value_t a) {
  return unary_linalg(g, TPU_OP_SVD, a);
}

tpu_value_t tpu_graph_householder_product(tpu_graph_t *g, tpu_value_t v, tpu_value_t tau) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_HOUSEHOLDER_PRODUCT);
  tpu_value_t ops[2] = {v, tau};
  return finish(g, &n, ops, 2);
}

tpu_value_t tpu_graph_lu_pivots_to_permutation(tpu_graph_t *g, tpu_value_t pivots, int64_t size) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_LU_PIVOTS_TO_PERMUTATION);
  n.attrs.lu_permutation.size = size;
  tpu_value_t ops[1] = {pivots};
  return finish(g, &n, ops, 1);
}

tpu_value_t tpu_graph_triangular_solve(tpu_graph_t *g, tpu_value_t a, tpu_value_t b,
                                       const tpu_triangular_solve_attrs_t *attrs) {
  if (!g) return TPU_NO_VALUE;
  tpu_node_t n = node_init(TPU_OP_TRIANGULAR_SOLVE);
  if (!attrs) return bad(g, &n, "attrs is NULL");
  n.attrs.triangular_solve = *attrs;
  tpu_value_t ops[2] = {a, b};
  return finish(g, &n, ops, 2);
}
