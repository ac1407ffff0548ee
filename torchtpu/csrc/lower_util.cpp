// lower_util.cpp: helpers every lowering uses (dtype and shape conversion, broadcasting,
// constants, reductions over PyTorch-style dims). See native.h.
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

tpu_dtype_t compute_dtype(tpu_dtype_t t) {
  return (t == TPU_BF16 || t == TPU_F16) ? TPU_F32 : t;
}

}  // namespace torchtpu
