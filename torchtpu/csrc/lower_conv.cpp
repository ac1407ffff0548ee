// lower_conv.cpp: lowerings of convolution forward and backward (1-D, 2-D and 3-D, groups,
// strides, padding, dilation, transposed convolution) through PyTorch's hook for
// out-of-tree backends: conv1d/2d/3d and conv_transpose* reach aten::convolution, whose
// backend selection sends a PrivateUse1 input to convolution_overrideable (and its
// autograd formula to convolution_backward_overrideable). 1-D convolutions arrive as 2-D
// with a height of 1 (PyTorch's _convolution views them so).
//
// Layouts are PyTorch's: input/output (N, C, spatial...), weight (O, I/groups, k...) and,
// for transposed convolution, weight (I, O/groups, k...). Everything is one StableHLO
// convolution at the current matmul precision (f32 operands: 1/3/6 bf16 passes; bf16
// operands one pass), accumulated in f32 and rounded once by the engine.
//
//   grad_input  = conv(grad_output dilated by stride, weight flipped with I/O swapped)
//   grad_weight = conv(input with batch/feature swapped, grad_output as the kernel,
//                      window dilation = stride, stride = dilation), one per group
//   transposed forward = the grad_input formula; transposed backward swaps the roles.
//
// PyTorch's composite kernel for convolution_overrideable (which also serves the Meta
// key) throws NotImplementedError, so this file registers Meta kernels for the two
// hooks too: the engine runs them to learn result shapes.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

#include "native.h"

namespace torchtpu {
namespace {

struct ConvParams {
  int ns = 0;                            // spatial dims
  std::vector<int64_t> stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool transposed = false;
};

std::vector<int64_t> expand(const c10::IValue &v, int ns, int64_t fill) {
  std::vector<int64_t> r = v.toIntVector();
  if (r.size() == 1 && ns > 1) r.assign(ns, r[0]);
  if (r.empty()) r.assign(ns, fill);
  if (static_cast<int>(r.size()) != ns) throw Unsupported("convolution parameter length");
  return r;
}

// Arguments (stride, padding, dilation, transposed, output_padding, groups) start at |at|.
ConvParams conv_params(const std::vector<c10::IValue> &args, size_t at, int rank) {
  ConvParams p;
  p.ns = rank - 2;
  if (p.ns < 1 || p.ns > 3) throw Unsupported("convolution needs 1 to 3 spatial dims");
  p.stride = expand(args[at], p.ns, 1);
  p.padding = expand(args[at + 1], p.ns, 0);
  p.dilation = expand(args[at + 2], p.ns, 1);
  p.transposed = args[at + 3].toBool();
  p.output_padding = expand(args[at + 4], p.ns, 0);
  p.groups = args[at + 5].toInt();
  if (p.groups < 1) throw Unsupported("groups < 1");
  return p;
}

// A convolution with PyTorch's layouts: x (N, C, s...), w (O, C/groups, k...).
tpu_value_t conv(LowerCtx &ctx, tpu_value_t x, tpu_value_t w, int ns,
                 const std::vector<int64_t> &stride, const std::vector<int64_t> &pad_lo,
                 const std::vector<int64_t> &pad_hi, const std::vector<int64_t> &lhs_dilation,
                 const std::vector<int64_t> &rhs_dilation, int64_t groups, tpu_dtype_t acc) {
  tpu_conv_attrs_t a{};
  a.num_spatial = ns;
  for (int i = 0; i < ns; i++) {
    a.stride[i] = stride[i];
    a.pad_lo[i] = pad_lo[i];
    a.pad_hi[i] = pad_hi[i];
    a.lhs_dilation[i] = lhs_dilation[i];
    a.rhs_dilation[i] = rhs_dilation[i];
    a.in_spatial[i] = a.k_spatial[i] = a.out_spatial[i] = 2 + i;
  }
  a.feature_group_count = groups;
  a.batch_group_count = 1;
  a.in_batch = 0;
  a.in_feature = 1;
  a.k_out_feature = 0;
  a.k_in_feature = 1;
  a.out_batch = 0;
  a.out_feature = 1;
  a.precision = ctx.precision;
  return tpu_graph_convolution(ctx.g, x, w, &a, acc);
}

// w (G*A, B, k...) -> (G*B, A, k...): swaps the two feature dims within each group.
tpu_value_t swap_group_features(LowerCtx &ctx, tpu_value_t w, int64_t groups) {
  tpu_shape_t s = shape_of(ctx.g, w);
  int64_t a = s.dims[0] / groups, b = s.dims[1];
  if (groups == 1) {
    int64_t perm[TPU_MAX_RANK];
    for (int d = 0; d < s.rank; d++) perm[d] = d;
    perm[0] = 1;
    perm[1] = 0;
    return tpu_graph_transpose(ctx.g, w, perm);
  }
  tpu_shape_t split{};
  split.rank = s.rank + 1;
  split.dims[0] = groups;
  split.dims[1] = a;
  split.dims[2] = b;
  for (int d = 2; d < s.rank; d++) split.dims[d + 1] = s.dims[d];
  tpu_value_t v = tpu_graph_reshape(ctx.g, w, &split);
  int64_t perm[TPU_MAX_RANK];
  for (int d = 0; d < split.rank; d++) perm[d] = d;
  perm[1] = 2;
  perm[2] = 1;
  v = tpu_graph_transpose(ctx.g, v, perm);
  tpu_shape_t merged = s;
  merged.dims[0] = groups * b;
  merged.dims[1] = a;
  return tpu_graph_reshape(ctx.g, v, &merged);
}

tpu_value_t flip_spatial(LowerCtx &ctx, tpu_value_t w) {
  tpu_shape_t s = shape_of(ctx.g, w);
  bool dims[TPU_MAX_RANK] = {false};
  for (int d = 2; d < s.rank; d++) dims[d] = true;
  return tpu_graph_reverse(ctx.g, w, dims);
}

// The gradient of conv(x, w) with respect to x, for x of spatial sizes |in_sizes|:
// dy (N, O, out...) and w (O, C/groups, k...) -> (N, C, in...).
tpu_value_t input_grad(LowerCtx &ctx, tpu_value_t dy, tpu_value_t w, const ConvParams &p,
                       const std::vector<int64_t> &in_sizes, tpu_dtype_t acc) {
  tpu_shape_t ds = shape_of(ctx.g, dy), ws = shape_of(ctx.g, w);
  tpu_value_t k = flip_spatial(ctx, swap_group_features(ctx, w, p.groups));
  std::vector<int64_t> lo(p.ns), hi(p.ns), ones(p.ns, 1);
  for (int i = 0; i < p.ns; i++) {
    int64_t kd = p.dilation[i] * (ws.dims[2 + i] - 1);
    lo[i] = kd - p.padding[i];
    hi[i] = in_sizes[i] - 1 + p.padding[i] - (ds.dims[2 + i] - 1) * p.stride[i];
  }
  return conv(ctx, dy, k, p.ns, ones, lo, hi, p.stride, p.dilation, p.groups, acc);
}

// The gradient of conv(x, w) with respect to w (O, C/groups, k...), for x (N, C, in...)
// and dy (N, O, out...): per group, a convolution over the batch (N becomes the feature
// dim that is contracted, C the batch dim of the result).
tpu_value_t weight_grad(LowerCtx &ctx, tpu_value_t x, tpu_value_t dy, const ConvParams &p,
                        const std::vector<int64_t> &k_sizes, tpu_dtype_t acc) {
  tpu_shape_t xs = shape_of(ctx.g, x), ds = shape_of(ctx.g, dy);
  std::vector<int64_t> lo(p.ns), hi(p.ns), ones(p.ns, 1);
  for (int i = 0; i < p.ns; i++) {
    int64_t span = xs.dims[2 + i] + 2 * p.padding[i] - p.dilation[i] * (k_sizes[i] - 1) - 1;
    int64_t rem = span - (ds.dims[2 + i] - 1) * p.stride[i];  // rows the forward never read
    lo[i] = p.padding[i];
    hi[i] = p.padding[i] - rem;
  }
  int64_t cg = xs.dims[1] / p.groups, og = ds.dims[1] / p.groups;
  std::vector<tpu_value_t> parts;
  for (int64_t g = 0; g < p.groups; g++) {
    tpu_value_t xg = x, dg = dy;
    if (p.groups > 1) {
      int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], step[TPU_MAX_RANK];
      for (int d = 0; d < xs.rank; d++) limit[d] = xs.dims[d], step[d] = 1;
      start[1] = g * cg;
      limit[1] = (g + 1) * cg;
      xg = tpu_graph_slice(ctx.g, x, start, limit, step);
      for (int d = 0; d < ds.rank; d++) limit[d] = ds.dims[d];
      start[1] = g * og;
      limit[1] = (g + 1) * og;
      dg = tpu_graph_slice(ctx.g, dy, start, limit, step);
    }
    tpu_conv_attrs_t a{};
    a.num_spatial = p.ns;
    for (int i = 0; i < p.ns; i++) {
      a.stride[i] = p.dilation[i];
      a.pad_lo[i] = lo[i];
      a.pad_hi[i] = hi[i];
      a.lhs_dilation[i] = 1;
      a.rhs_dilation[i] = p.stride[i];
      a.in_spatial[i] = a.k_spatial[i] = a.out_spatial[i] = 2 + i;
    }
    a.feature_group_count = a.batch_group_count = 1;
    a.in_batch = 1;       // x's channels play the batch
    a.in_feature = 0;     // x's batch is contracted
    a.k_in_feature = 0;   // dy's batch
    a.k_out_feature = 1;  // dy's channels
    a.out_batch = 1;      // result (O_g, C_g, k...)
    a.out_feature = 0;
    a.precision = ctx.precision;
    parts.push_back(tpu_graph_convolution(ctx.g, xg, dg, &a, acc));
  }
  if (parts.size() == 1) return parts[0];
  return tpu_graph_concatenate(ctx.g, parts.data(), static_cast<int>(parts.size()), 0);
}

std::vector<int64_t> spatial(const tpu_shape_t &s) {
  return std::vector<int64_t>(s.dims + 2, s.dims + s.rank);
}

// Both operands in one float dtype (PyTorch requires input and weight to agree).
tpu_dtype_t operand_dtype(LowerCtx &ctx, size_t i) {
  tpu_dtype_t dt = to_tpu_dtype(ctx.tensor(i).scalar_type());
  if (!tpu_dtype_is_float(dt)) throw Unsupported("integer convolution");
  return dt;
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups)
void convolution(LowerCtx &ctx) {
  tpu_dtype_t dt = operand_dtype(ctx, 0);
  tpu_dtype_t acc = compute_dtype(ctx.out_dtype());
  tpu_value_t x = ctx.v(0), w = convert(ctx.g, ctx.v(1), dt);
  tpu_shape_t xs = shape_of(ctx.g, x), out = ctx.out_shape();
  ConvParams p = conv_params(*ctx.args, 3, xs.rank);
  tpu_value_t y;
  if (!p.transposed) {
    std::vector<int64_t> ones(p.ns, 1);
    y = conv(ctx, x, w, p.ns, p.stride, p.padding, p.padding, ones, p.dilation, p.groups, acc);
  } else {
    // conv_transpose(x, w) is the input gradient of conv(., w) for an input of the
    // transposed convolution's output size (output_padding included).
    y = input_grad(ctx, x, w, p, spatial(out), acc);
  }
  if (ctx.v(2) != TPU_NO_VALUE) {
    int64_t dims[1] = {1};
    tpu_value_t b = tpu_graph_broadcast_in_dim(ctx.g, convert(ctx.g, ctx.v(2), acc), &out, dims);
    y = tpu_graph_binary(ctx.g, TPU_OP_ADD, y, b);
  }
  ctx.results = {y};
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
void convolution_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = operand_dtype(ctx, 1);
  tpu_value_t dy = convert(ctx.g, ctx.v(0), dt), x = ctx.v(1), w = convert(ctx.g, ctx.v(2), dt);
  tpu_shape_t xs = shape_of(ctx.g, x), ws = shape_of(ctx.g, w);
  ConvParams p = conv_params(*ctx.args, 3, xs.rank);
  ctx.results.assign(3, TPU_NO_VALUE);
  if (ctx.out_meta[0].defined()) {
    tpu_dtype_t acc = compute_dtype(ctx.out_dtype(0));
    if (!p.transposed) {
      ctx.results[0] = input_grad(ctx, dy, w, p, spatial(xs), acc);
    } else {  // the transposed convolution's input gradient is the ordinary convolution
      std::vector<int64_t> ones(p.ns, 1);
      tpu_value_t gi = conv(ctx, dy, w, p.ns, p.stride, p.padding, p.padding, ones,
                            p.dilation, p.groups, acc);
      // an output_padding of a stride or more (allowed below the dilation) leaves whole
      // strides of dy past the last input position: the convolution then yields
      // output_padding / stride more positions, which no input has
      tpu_shape_t gs = shape_of(ctx.g, gi);
      bool extra = false;
      int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], step[TPU_MAX_RANK];
      for (int d = 0; d < gs.rank; d++) {
        limit[d] = d < 2 ? gs.dims[d] : xs.dims[d];
        step[d] = 1;
        extra = extra || limit[d] != gs.dims[d];
      }
      ctx.results[0] = extra ? tpu_graph_slice(ctx.g, gi, start, limit, step) : gi;
    }
  }
  if (ctx.out_meta[1].defined()) {
    tpu_dtype_t acc = compute_dtype(ctx.out_dtype(1));
    ctx.results[1] = p.transposed ? weight_grad(ctx, dy, x, p, spatial(ws), acc)
                                  : weight_grad(ctx, x, dy, p, spatial(ws), acc);
  }
  if (ctx.out_meta[2].defined()) {
    tpu_dtype_t acc = compute_dtype(ctx.out_dtype(2));
    tpu_shape_t ds = shape_of(ctx.g, dy);
    std::vector<int64_t> dims;
    for (int d = 0; d < ds.rank; d++) {
      if (d != 1) dims.push_back(d);
    }
    ctx.results[2] = reduce_dims(ctx.g, TPU_REDUCE_SUM, convert(ctx.g, dy, acc), dims, false);
  }
}

// ---- Meta kernels (result shapes for the engine) --------------------------------------------

std::vector<int64_t> conv_output_size(const at::Tensor &input, const at::Tensor &weight,
                                      const ConvParams &p) {
  std::vector<int64_t> sizes{input.size(0),
                             p.transposed ? weight.size(1) * p.groups : weight.size(0)};
  for (int i = 0; i < p.ns; i++) {
    int64_t in = input.size(2 + i), k = weight.size(2 + i);
    int64_t o = p.transposed
                    ? (in - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (k - 1) +
                          p.output_padding[i] + 1
                    : (in + 2 * p.padding[i] - p.dilation[i] * (k - 1) - 1) / p.stride[i] + 1;
    TORCH_CHECK(o > 0, "convolution: the output size ", o, " of spatial dim ", i,
                " is too small (input ", input.sizes(), ", weight ", weight.sizes(), ")");
    sizes.push_back(o);
  }
  return sizes;
}

void conv_meta(const c10::OperatorHandle &, torch::jit::Stack *stack) {
  auto args = torch::jit::last(*stack, 9).vec();
  const at::Tensor &input = args[0].toTensor(), &weight = args[1].toTensor();
  TORCH_CHECK(input.dim() >= 3 && input.dim() == weight.dim(),
              "convolution: expected input and weight of equal rank >= 3, got ",
              input.sizes(), " and ", weight.sizes());
  ConvParams p = conv_params(args, 3, static_cast<int>(input.dim()));
  auto out = at::empty(conv_output_size(input, weight, p),
                       input.options().memory_format(input.suggest_memory_format()));
  torch::jit::drop(*stack, 9);
  torch::jit::push(*stack, out);
}

void conv_backward_meta(const c10::OperatorHandle &, torch::jit::Stack *stack) {
  auto args = torch::jit::last(*stack, 10).vec();
  const at::Tensor &input = args[1].toTensor(), &weight = args[2].toTensor();
  auto mask = args[9].toBoolList();
  ConvParams p = conv_params(args, 3, static_cast<int>(input.dim()));
  at::Tensor gi, gw, gb;
  if (mask[0]) gi = at::empty(input.sizes(), input.options().memory_format(input.suggest_memory_format()));
  if (mask[1]) gw = at::empty(weight.sizes(), weight.options());
  if (mask[2]) {
    gb = at::empty({p.transposed ? weight.size(1) * p.groups : weight.size(0)}, weight.options());
  }
  torch::jit::drop(*stack, 10);
  torch::jit::push(*stack, gi, gw, gb);
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&conv_meta>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&conv_backward_meta>());
}

LoweringRegistrar registrar({
    {"convolution_overrideable", convolution},
    {"convolution_backward_overrideable", convolution_backward},
});

}  // namespace
}  // namespace torchtpu
