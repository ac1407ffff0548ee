// lower_util.cpp: helpers every lowering uses (dtype and shape conversion, broadcasting,
// constants, reductions over PyTorch-style dims). See native.h.
#include <cmath>

#include "native.h"

#include <algorithm>

namespace torchtpu {

tpu_dtype_t to_tpu_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return TPU_F32;
    case at::kDouble: return TPU_F64;
    case at::kHalf: return TPU_F16;
    case at::kBFloat16: return TPU_BF16;
    case at::kLong: return TPU_I64;
    case at::kInt: return TPU_I32;
    case at::kShort: return TPU_I16;
    case at::kChar: return TPU_I8;
    case at::kByte: return TPU_U8;
    case at::kBool: return TPU_BOOL;
    default: throw Unsupported(std::string("dtype ") + c10::toString(t));
  }
}

bool is_complex_pair(at::ScalarType t) { return t == at::kComplexFloat || t == at::kComplexDouble; }

IrLayout ir_layout(const at::Tensor &t) {
  IrLayout l{};
  const bool pair = is_complex_pair(t.scalar_type());
  l.dtype = pair ? (t.scalar_type() == at::kComplexFloat ? TPU_F32 : TPU_F64)
                 : to_tpu_dtype(t.scalar_type());
  if (pair && t.dim() >= TPU_MAX_RANK) throw Unsupported("complex tensor of rank 8");
  l.shape = to_shape(t.sizes());
  for (int d = 0; d < l.shape.rank; d++) l.strides[d] = t.strides()[d] * (pair ? 2 : 1);
  if (pair) {
    l.shape.dims[l.shape.rank] = 2;
    l.strides[l.shape.rank] = 1;
    l.shape.rank++;
  }
  l.dense = t.is_contiguous();
  return l;
}

tpu_value_t complex_part(tpu_graph_t *g, tpu_value_t pair, int k) {
  tpu_shape_t s = shape_of(g, pair);
  int64_t start[TPU_MAX_RANK] = {}, limit[TPU_MAX_RANK], stride[TPU_MAX_RANK];
  for (int d = 0; d < s.rank; d++) limit[d] = s.dims[d], stride[d] = 1;
  start[s.rank - 1] = k;
  limit[s.rank - 1] = k + 1;
  tpu_value_t v = tpu_graph_slice(g, pair, start, limit, stride);
  s.rank--;
  return tpu_graph_reshape(g, v, &s);
}

tpu_value_t complex_join(tpu_graph_t *g, tpu_value_t re, tpu_value_t im) {
  tpu_shape_t s = shape_of(g, re);
  s.dims[s.rank++] = 1;
  const tpu_value_t parts[2] = {tpu_graph_reshape(g, re, &s), tpu_graph_reshape(g, im, &s)};
  return tpu_graph_concatenate(g, parts, 2, s.rank - 1);
}

tpu_shape_t to_shape(c10::IntArrayRef sizes) {
  if (sizes.size() > TPU_MAX_RANK) throw Unsupported("rank above 8");
  tpu_shape_t s{};
  s.rank = static_cast<int>(sizes.size());
  std::copy(sizes.begin(), sizes.end(), s.dims);
  return s;
}

tpu_shape_t shape_of(const tpu_graph_t *g, tpu_value_t v) {
  const tpu_node_t *n = tpu_graph_node(g, v);
  if (!n) return tpu_shape_t{};
  return n->shape;
}

tpu_dtype_t dtype_of(const tpu_graph_t *g, tpu_value_t v) {
  const tpu_node_t *n = tpu_graph_node(g, v);
  return n ? n->dtype : TPU_F32;
}

tpu_dtype_t LowerCtx::out_dtype(size_t i) const { return to_tpu_dtype(out_meta[i].scalar_type()); }
tpu_shape_t LowerCtx::out_shape(size_t i) const { return to_shape(out_meta[i].sizes()); }

tpu_value_t convert(tpu_graph_t *g, tpu_value_t v, tpu_dtype_t dtype) {
  if (v == TPU_NO_VALUE || dtype_of(g, v) == dtype) return v;
  return tpu_graph_convert(g, v, dtype);
}

tpu_value_t broadcast_to(tpu_graph_t *g, tpu_value_t v, const tpu_shape_t &shape) {
  if (v == TPU_NO_VALUE) return v;
  tpu_shape_t in = shape_of(g, v);
  if (tpu_shape_equal(&in, &shape)) return v;
  if (in.rank > shape.rank) throw Unsupported("broadcast to a lower rank");
  int64_t dims[TPU_MAX_RANK];
  for (int k = 0; k < in.rank; k++) dims[k] = shape.rank - in.rank + k;
  return tpu_graph_broadcast_in_dim(g, v, &shape, dims);
}

tpu_value_t scalar_const(tpu_graph_t *g, tpu_dtype_t dtype, double value) {
  tpu_shape_t scalar{};
  if (tpu_dtype_is_float(dtype) || dtype == TPU_BOOL) {
    return tpu_graph_constant(g, dtype, &scalar, value);
  }
  return tpu_graph_constant_int(g, dtype, &scalar, static_cast<int64_t>(value));
}

tpu_value_t full(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t &shape, double value) {
  return broadcast_to(g, scalar_const(g, dtype, value), shape);
}

tpu_value_t ew2(tpu_graph_t *g, tpu_op_t op, tpu_value_t a, tpu_value_t b, tpu_dtype_t dtype,
                const tpu_shape_t &shape) {
  return tpu_graph_binary(g, op, broadcast_to(g, convert(g, a, dtype), shape),
                          broadcast_to(g, convert(g, b, dtype), shape));
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t r = rank > 0 ? rank : 1;
  if (dim < -r || dim >= r) throw Unsupported("dim out of range");
  return dim < 0 ? dim + r : dim;
}

tpu_value_t reduce_dims(tpu_graph_t *g, tpu_reduce_kind_t kind, tpu_value_t x,
                        c10::IntArrayRef dims, bool keepdim) {
  tpu_shape_t s = shape_of(g, x);
  bool mask[TPU_MAX_RANK] = {false};
  if (dims.empty()) {
    for (int d = 0; d < s.rank; d++) mask[d] = true;
  } else {
    for (int64_t d : dims) {
      if (s.rank == 0) continue;  // reducing a scalar over dim 0/-1 is the identity
      mask[wrap_dim(d, s.rank)] = true;
    }
  }
  tpu_value_t r = tpu_graph_reduce(g, kind, x, mask);
  if (!keepdim) return r;
  tpu_shape_t kept = s;
  for (int d = 0; d < s.rank; d++) {
    if (mask[d]) kept.dims[d] = 1;
  }
  return tpu_graph_reshape(g, r, &kept);
}

int64_t numel(const tpu_shape_t &s) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; d++) n *= s.dims[d];
  return n;
}

tpu_value_t gather_slices(tpu_graph_t *g, tpu_value_t x, int64_t dim, tpu_value_t index) {
  tpu_shape_t xs = shape_of(g, x), is = shape_of(g, index);
  if (is.rank == 0) {
    tpu_shape_t one{1, {1}};
    index = tpu_graph_reshape(g, index, &one);
  }
  if (xs.rank == 0) throw Unsupported("index_select of a scalar");
  tpu_gather_attrs_t a{};
  dim = wrap_dim(dim, xs.rank);
  for (int d = 0, k = 0; d < xs.rank; d++) {
    if (d != dim) a.offset_dims[k++] = d;
    a.slice_sizes[d] = d == dim ? 1 : xs.dims[d];
  }
  a.num_offset_dims = xs.rank - 1;
  a.num_collapsed = 1;
  a.collapsed_slice_dims[0] = dim;
  a.num_start_index_map = 1;
  a.start_index_map[0] = dim;
  a.index_vector_dim = 1;
  a.check_bounds = true;
  return tpu_graph_gather(g, x, index, &a);
}

tpu_value_t scatter_slices(tpu_graph_t *g, tpu_value_t x, int64_t dim, tpu_value_t index,
                           tpu_value_t updates, bool add) {
  return scatter_slices(g, x, dim, index, updates, add ? TPU_SCATTER_ADD : TPU_SCATTER_REPLACE);
}

tpu_value_t scatter_slices(tpu_graph_t *g, tpu_value_t x, int64_t dim, tpu_value_t index,
                           tpu_value_t updates, tpu_scatter_kind_t kind) {
  tpu_shape_t xs = shape_of(g, x);
  tpu_shape_t is = shape_of(g, index);
  tpu_scatter_attrs_t a{};
  a.num_update_window_dims = xs.rank - 1;
  for (int d = 0; d < xs.rank - 1; d++) a.update_window_dims[d] = d + 1;
  a.num_inserted_window_dims = 1;
  a.inserted_window_dims[0] = dim;
  a.num_scatter_dims = 1;
  a.scatter_dims_to_operand_dims[0] = dim;
  a.index_vector_dim = is.rank;  // (L): one coordinate per update row
  a.kind = kind;
  a.check_bounds = true;
  return tpu_graph_scatter(g, x, index, updates, &a);
}

tpu_value_t dim_first(tpu_graph_t *g, tpu_value_t v, int64_t dim) {
  tpu_shape_t s = shape_of(g, v);
  if (dim == 0) return v;
  int64_t perm[TPU_MAX_RANK];
  perm[0] = dim;
  for (int d = 0, k = 1; d < s.rank; d++) {
    if (d != dim) perm[k++] = d;
  }
  return tpu_graph_transpose(g, v, perm);
}

tpu_value_t vector_norm(tpu_graph_t *g, tpu_value_t x, tpu_dtype_t dt, double ord,
                        c10::IntArrayRef dims, bool keepdim) {
  x = tpu_graph_unary(g, TPU_OP_ABS, convert(g, x, dt));
  if (std::isinf(ord)) return reduce_dims(g, ord > 0 ? TPU_REDUCE_MAX : TPU_REDUCE_MIN, x, dims, keepdim);
  if (ord == 0) {
    tpu_value_t nz = tpu_graph_compare(g, TPU_CMP_NE, x, full(g, dt, shape_of(g, x), 0));
    return reduce_dims(g, TPU_REDUCE_SUM, convert(g, nz, dt), dims, keepdim);
  }
  if (ord == 1) return reduce_dims(g, TPU_REDUCE_SUM, x, dims, keepdim);
  if (ord == 2) {
    tpu_value_t r = reduce_dims(g, TPU_REDUCE_SUM, tpu_graph_binary(g, TPU_OP_MUL, x, x), dims, keepdim);
    return tpu_graph_unary(g, TPU_OP_SQRT, r);
  }
  tpu_value_t p = tpu_graph_binary(g, TPU_OP_POW, x, full(g, dt, shape_of(g, x), ord));
  tpu_value_t r = reduce_dims(g, TPU_REDUCE_SUM, p, dims, keepdim);
  return tpu_graph_binary(g, TPU_OP_POW, r, full(g, dt, shape_of(g, r), 1.0 / ord));
}

tpu_value_t reduce_loss(tpu_graph_t *g, tpu_value_t loss, int64_t reduction) {
  if (reduction == 0) return loss;
  tpu_dtype_t dt = dtype_of(g, loss);
  double n = static_cast<double>(numel(shape_of(g, loss)));
  tpu_value_t sum = reduce_dims(g, TPU_REDUCE_SUM, loss, {}, false);
  return reduction == 1 ? tpu_graph_binary(g, TPU_OP_DIV, sum, full(g, dt, tpu_shape_t{}, n)) : sum;
}

tpu_value_t triangle_mask(tpu_graph_t *g, const tpu_shape_t &shape, tpu_compare_dir_t dir) {
  return tpu_graph_compare(g, dir, tpu_graph_iota(g, TPU_I64, &shape, shape.rank - 2),
                           tpu_graph_iota(g, TPU_I64, &shape, shape.rank - 1));
}

tpu_value_t main_diagonal(tpu_graph_t *g, const tpu_shape_t &shape) {
  return triangle_mask(g, shape, TPU_CMP_EQ);
}

tpu_dtype_t compute_dtype(tpu_dtype_t t) {
  return (t == TPU_BF16 || t == TPU_F16) ? TPU_F32 : t;
}

}  // namespace torchtpu
