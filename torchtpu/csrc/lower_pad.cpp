// lower_pad.cpp: lowerings of F.pad's "reflect" and "replicate" modes (nn.ReflectionPad1d-3d,
// nn.ReplicationPad1d-3d: style-transfer and GAN generators, audio models), forward and
// backward. ("constant" pads with the IR's pad op and "circular" is a composite of slices.)
//
// Padding is separable: each padded dim is a gather of whole slices, by source indices
// computed in the graph from an iota. For output position i of a dim of input size n with
// left padding p (negative padding crops; the indices cover it too), j = i - p and
//   reflect:   n - 1 - |n - 1 - |j||   (mirror at both edges, the edge itself not repeated)
//   replicate: clamp(j, 0, n - 1)
// padding lists the last dim first: (left, right, top, bottom, front, back).
// The backward scatters each gradient slice back, adding, to the slice it came from, one
// dim at a time; bf16/f16 gradients accumulate in f32.
#include <ATen/core/Tensor.h>

#include "native.h"

namespace torchtpu {
namespace {

enum class Mode { Reflect, Replicate };

// The source index (out) i64 of each output position along one dim.
tpu_value_t source_index(tpu_graph_t *g, Mode mode, int64_t n, int64_t left, int64_t out) {
  tpu_shape_t s{1, {out}};
  auto k = [&](int64_t v) { return full(g, TPU_I64, s, static_cast<double>(v)); };
  auto op = [&](tpu_op_t o, tpu_value_t a, tpu_value_t b) { return tpu_graph_binary(g, o, a, b); };
  tpu_value_t j = op(TPU_OP_SUB, tpu_graph_iota(g, TPU_I64, &s, 0), k(left));
  if (mode == Mode::Replicate) return op(TPU_OP_MIN, op(TPU_OP_MAX, j, k(0)), k(n - 1));
  tpu_value_t inner = tpu_graph_unary(g, TPU_OP_ABS, op(TPU_OP_SUB, k(n - 1), tpu_graph_unary(g, TPU_OP_ABS, j)));
  return op(TPU_OP_SUB, k(n - 1), inner);
}

// (self, padding): one gather per padded dim.
template <Mode M>
void pad_forward(LowerCtx &ctx) {
  const std::vector<int64_t> padding = ctx.arg(1).toIntVector();
  tpu_value_t x = ctx.v(0);
  const tpu_shape_t in = shape_of(ctx.g, x);
  const int num_dims = static_cast<int>(padding.size() / 2);
  for (int k = 0; k < num_dims; k++) {
    const int dim = in.rank - 1 - k;
    const int64_t n = in.dims[dim], left = padding[2 * k], right = padding[2 * k + 1];
    tpu_value_t index = source_index(ctx.g, M, n, left, n + left + right);
    x = gather_slices(ctx.g, x, dim, index);
  }
  ctx.results = {x};
}

// (grad_output, self, padding): one scatter-add per padded dim, back to self's shape.
template <Mode M>
void pad_backward(LowerCtx &ctx) {
  const std::vector<int64_t> padding = ctx.arg(2).toIntVector();
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t grad = convert(ctx.g, ctx.v(0), dt);
  const tpu_shape_t in = ctx.out_shape();
  const int num_dims = static_cast<int>(padding.size() / 2);
  for (int k = 0; k < num_dims; k++) {
    const int dim = in.rank - 1 - k;
    tpu_shape_t s = shape_of(ctx.g, grad);
    const int64_t n = in.dims[dim], left = padding[2 * k];
    tpu_value_t index = source_index(ctx.g, M, n, left, s.dims[dim]);
    s.dims[dim] = n;
    grad = scatter_slices(ctx.g, full(ctx.g, dt, s, 0), dim, index, dim_first(ctx.g, grad, dim), true);
  }
  ctx.results = {grad};
}

LoweringRegistrar registrar({
    {"reflection_pad1d", pad_forward<Mode::Reflect>},
    {"reflection_pad1d.out", pad_forward<Mode::Reflect>},
    {"reflection_pad2d", pad_forward<Mode::Reflect>},
    {"reflection_pad2d.out", pad_forward<Mode::Reflect>},
    {"reflection_pad3d", pad_forward<Mode::Reflect>},
    {"reflection_pad3d.out", pad_forward<Mode::Reflect>},
    {"reflection_pad1d_backward", pad_backward<Mode::Reflect>},
    {"reflection_pad1d_backward.grad_input", pad_backward<Mode::Reflect>},
    {"reflection_pad2d_backward", pad_backward<Mode::Reflect>},
    {"reflection_pad2d_backward.grad_input", pad_backward<Mode::Reflect>},
    {"reflection_pad3d_backward", pad_backward<Mode::Reflect>},
    {"reflection_pad3d_backward.grad_input", pad_backward<Mode::Reflect>},
    {"replication_pad1d", pad_forward<Mode::Replicate>},
    {"replication_pad1d.out", pad_forward<Mode::Replicate>},
    {"replication_pad2d", pad_forward<Mode::Replicate>},
    {"replication_pad2d.out", pad_forward<Mode::Replicate>},
    {"replication_pad3d", pad_forward<Mode::Replicate>},
    {"replication_pad3d.out", pad_forward<Mode::Replicate>},
    {"replication_pad1d_backward", pad_backward<Mode::Replicate>},
    {"replication_pad1d_backward.grad_input", pad_backward<Mode::Replicate>},
    {"replication_pad2d_backward", pad_backward<Mode::Replicate>},
    {"replication_pad2d_backward.grad_input", pad_backward<Mode::Replicate>},
    {"replication_pad3d_backward", pad_backward<Mode::Replicate>},
    {"replication_pad3d_backward.grad_input", pad_backward<Mode::Replicate>},
});

}  // namespace
}  // namespace torchtpu
