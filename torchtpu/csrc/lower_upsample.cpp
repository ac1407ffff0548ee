// lower_upsample.cpp: lowerings of F.interpolate's nearest, nearest-exact and (bi/tri)linear
// modes over 1, 2 or 3 spatial dims and its bicubic mode over 2, forward and backward
// (nn.Upsample, U-Nets, FPNs; bicubic: resizing a ViT's position embeddings).
//
// All are separable: one spatial dim at a time, last dim first, as PyTorch's CPU kernel
// nests its loops (the last dim's taps are combined first). Per dim, the source indices
// and weights are computed in the graph from an iota, in f32 (f64 for f64 tensors), with
// the formulas of ATen's UpSample.h (nearest_idx, area_pixel_compute_source_index,
// guard_index_and_lambda, get_cubic_upsample_coefficients), so they pick the same source
// pixels as the CPU.
//   nearest:   y[o] = x[i(o)]                   (a gather of whole slices along the dim)
//   linear:    y[o] = x[i0(o)] w0(o) + x[i1(o)] w1(o)
//   cubic:     y[o] = sum over k < 4 of x[clamp(i(o) - 1 + k)] wk(o), Keys' kernel, A = -0.75
// A backward scatters each output slice back, adding, to the slices it came from, one dim
// at a time in the reverse order; bf16/f16 gradients accumulate in f32.
#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "native.h"

namespace torchtpu {
namespace {

enum class Mode { Nearest, NearestExact, Linear, Cubic };

// One spatial dim: input size, output size, and the scale the user passed (if any).
struct Axis {
  int64_t in, out;
  std::optional<double> scale;
};

// The source coordinates of one axis: per tap an index vector (O) i64 and, unless nearest
// (one tap, no weight), a weight vector (O).
struct Taps {
  std::vector<tpu_value_t> index, weight;
};

// compute_scales_value<T>: 1 / scale when the user gave one, else in / out, in T.
template <typename T>
T scales_value(const Axis &a) {
  if (a.scale && *a.scale > 0) return static_cast<T>(1.0 / *a.scale);
  return static_cast<T>(a.in) / static_cast<T>(a.out);
}

// area_pixel_compute_scale<T>: the source step per output pixel.
template <typename T>
T area_scale(const Axis &a, bool align_corners) {
  if (!align_corners) return scales_value<T>(a);
  return a.out > 1 ? static_cast<T>(a.in - 1) / static_cast<T>(a.out - 1) : static_cast<T>(0);
}

tpu_value_t vec_const(tpu_graph_t *g, tpu_dtype_t dt, int64_t n, double v) {
  tpu_shape_t s{1, {n}};
  return full(g, dt, s, v);
}

Taps taps(tpu_graph_t *g, const Axis &a, Mode mode, bool align_corners, tpu_dtype_t dt) {
  tpu_shape_t s{1, {a.out}};
  tpu_value_t o = tpu_graph_iota(g, dt, &s, 0);
  auto k = [&](double v) { return vec_const(g, dt, a.out, v); };
  auto op = [&](tpu_op_t op, tpu_value_t x, tpu_value_t y) { return tpu_graph_binary(g, op, x, y); };
  tpu_value_t last = k(static_cast<double>(a.in - 1));
  Taps t;
  if (mode == Mode::Nearest || mode == Mode::NearestExact) {
    // nearest_idx: the same size and an exact 2x keep integer maths; else floor(o * scale)
    // (nearest-exact: floor((o + 0.5) * scale)), clamped to the last pixel
    double scale = mode == Mode::Nearest && a.out == a.in       ? 1.0
                   : mode == Mode::Nearest && a.out == 2 * a.in ? 0.5
                                                                : scales_value<float>(a);
    tpu_value_t src = mode == Mode::NearestExact ? op(TPU_OP_ADD, o, k(0.5)) : o;
    src = op(TPU_OP_MIN, tpu_graph_unary(g, TPU_OP_FLOOR, op(TPU_OP_MUL, src, k(scale))), last);
    t.index = {convert(g, src, TPU_I64)};
    return t;
  }
  if (mode == Mode::Linear && a.out == a.in) {  // both taps on the same pixel
    tpu_value_t i = convert(g, o, TPU_I64);
    t.index = {i, i};
    t.weight = {k(1), k(0)};
    return t;
  }
  // area_pixel_compute_source_index (cubic: not clamped at 0), then guard_index_and_lambda
  double ratio = dt == TPU_F64 ? area_scale<double>(a, align_corners) : area_scale<float>(a, align_corners);
  tpu_value_t real;
  if (align_corners) {
    real = op(TPU_OP_MUL, k(ratio), o);
  } else {
    real = op(TPU_OP_SUB, op(TPU_OP_MUL, k(ratio), op(TPU_OP_ADD, o, k(0.5))), k(0.5));
    if (mode == Mode::Linear) real = op(TPU_OP_MAX, real, k(0));
  }
  tpu_value_t i0 = op(TPU_OP_MIN, tpu_graph_unary(g, TPU_OP_FLOOR, real), last);
  tpu_value_t lambda1 = op(TPU_OP_MIN, op(TPU_OP_MAX, op(TPU_OP_SUB, real, i0), k(0)), k(1));
  if (mode == Mode::Cubic) {
    // taps i0 - 1 .. i0 + 2 clamped to the image; get_cubic_upsample_coefficients
    for (int j = -1; j <= 2; j++) {
      tpu_value_t i = op(TPU_OP_MIN, op(TPU_OP_MAX, op(TPU_OP_ADD, i0, k(j)), k(0)), last);
      t.index.push_back(convert(g, i, TPU_I64));
    }
    const double A = -0.75;
    auto near = [&](tpu_value_t x) {  // ((A + 2) x - (A + 3)) x x + 1, for |x| <= 1
      tpu_value_t r = op(TPU_OP_SUB, op(TPU_OP_MUL, k(A + 2), x), k(A + 3));
      return op(TPU_OP_ADD, op(TPU_OP_MUL, op(TPU_OP_MUL, r, x), x), k(1));
    };
    auto far = [&](tpu_value_t x) {  // ((A x - 5 A) x + 8 A) x - 4 A, for 1 < |x| < 2
      tpu_value_t r = op(TPU_OP_SUB, op(TPU_OP_MUL, k(A), x), k(5 * A));
      r = op(TPU_OP_ADD, op(TPU_OP_MUL, r, x), k(8 * A));
      return op(TPU_OP_SUB, op(TPU_OP_MUL, r, x), k(4 * A));
    };
    tpu_value_t rest = op(TPU_OP_SUB, k(1), lambda1);
    t.weight = {far(op(TPU_OP_ADD, lambda1, k(1))), near(lambda1), near(rest),
                far(op(TPU_OP_ADD, rest, k(1)))};
    return t;
  }
  tpu_value_t step = tpu_graph_select(g, tpu_graph_compare(g, TPU_CMP_LT, i0, last), k(1), k(0));
  t.index = {convert(g, i0, TPU_I64), convert(g, op(TPU_OP_ADD, i0, step), TPU_I64)};
  t.weight = {op(TPU_OP_SUB, k(1), lambda1), lambda1};
  return t;
}

// Weights (O) broadcast along |dim| of |shape|.
tpu_value_t along(tpu_graph_t *g, tpu_value_t w, const tpu_shape_t &shape, int64_t dim) {
  const int64_t dims[1] = {dim};
  return tpu_graph_broadcast_in_dim(g, w, &shape, dims);
}

// sum over taps of x[index] * weight along |dim|, in tap order
tpu_value_t resample_axis(tpu_graph_t *g, tpu_value_t x, int64_t dim, const Taps &t) {
  if (t.weight.empty()) return gather_slices(g, x, dim, t.index[0]);
  tpu_value_t sum = TPU_NO_VALUE;
  for (size_t j = 0; j < t.index.size(); j++) {
    tpu_value_t y = gather_slices(g, x, dim, t.index[j]);
    y = tpu_graph_binary(g, TPU_OP_MUL, y, along(g, t.weight[j], shape_of(g, y), dim));
    sum = j == 0 ? y : tpu_graph_binary(g, TPU_OP_ADD, sum, y);
  }
  return sum;
}

// The gradient of resample_axis: |gy| (..., O at dim, ...) -> (..., in at dim, ...).
tpu_value_t resample_axis_backward(tpu_graph_t *g, tpu_value_t gy, int64_t dim, int64_t in,
                                   const Taps &t) {
  tpu_shape_t s = shape_of(g, gy);
  tpu_shape_t xs = s;
  xs.dims[dim] = in;
  tpu_value_t gx = full(g, dtype_of(g, gy), xs, 0);
  if (t.weight.empty()) return scatter_slices(g, gx, dim, t.index[0], dim_first(g, gy, dim), true);
  for (size_t j = 0; j < t.index.size(); j++) {
    tpu_value_t gj = tpu_graph_binary(g, TPU_OP_MUL, gy, along(g, t.weight[j], s, dim));
    gx = scatter_slices(g, gx, dim, t.index[j], dim_first(g, gj, dim), true);
  }
  return gx;
}

// The spatial axes of a call: sizes from output_size (argument 1) and the input (or, for a
// backward, input_size, argument 2); scales from argument |first_scale| on (None or float).
std::vector<Axis> axes_of(LowerCtx &ctx, const c10::IntArrayRef in_sizes, size_t first_scale) {
  std::vector<int64_t> out = ctx.arg(1).toIntVector();
  size_t k = out.size();
  if (in_sizes.size() != k + 2) throw Unsupported("upsample of a tensor without batch and channel dims");
  std::vector<Axis> axes;
  for (size_t d = 0; d < k; d++) {
    const c10::IValue &s = ctx.arg(first_scale + d);
    axes.push_back(Axis{in_sizes[2 + d], out[d], s.isNone() ? std::nullopt : std::optional<double>(s.toDouble())});
  }
  return axes;
}

template <Mode M>
void upsample(LowerCtx &ctx) {
  const bool weighted = M == Mode::Linear || M == Mode::Cubic;  // (..., align_corners, scales)
  std::vector<Axis> axes = axes_of(ctx, ctx.tensor(0).sizes(), weighted ? 3 : 2);
  bool align = weighted && ctx.arg(2).toBool();
  tpu_dtype_t out = ctx.out_dtype(), dt = compute_dtype(out);
  tpu_value_t x = weighted ? convert(ctx.g, ctx.v(0), dt) : ctx.v(0);  // nearest only moves values
  tpu_dtype_t index_dt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  for (size_t d = axes.size(); d-- > 0;) {
    x = resample_axis(ctx.g, x, static_cast<int64_t>(2 + d), taps(ctx.g, axes[d], M, align, index_dt));
  }
  ctx.results = {convert(ctx.g, x, out)};
}

template <Mode M>
void upsample_backward(LowerCtx &ctx) {
  const bool weighted = M == Mode::Linear || M == Mode::Cubic;
  std::vector<int64_t> in_sizes = ctx.arg(2).toIntVector();
  std::vector<Axis> axes = axes_of(ctx, in_sizes, weighted ? 4 : 3);
  bool align = weighted && ctx.arg(3).toBool();
  tpu_dtype_t out = ctx.out_dtype(), dt = compute_dtype(out);
  tpu_value_t gy = convert(ctx.g, ctx.v(0), dt);
  tpu_dtype_t index_dt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  for (size_t d = 0; d < axes.size(); d++) {
    gy = resample_axis_backward(ctx.g, gy, static_cast<int64_t>(2 + d), axes[d].in,
                                taps(ctx.g, axes[d], M, align, index_dt));
  }
  ctx.results = {convert(ctx.g, gy, out)};
}

LoweringRegistrar registrar({
    {"upsample_nearest1d.out", upsample<Mode::Nearest>},
    {"upsample_nearest2d.out", upsample<Mode::Nearest>},
    {"upsample_nearest3d.out", upsample<Mode::Nearest>},
    {"upsample_nearest1d_backward.grad_input", upsample_backward<Mode::Nearest>},
    {"upsample_nearest2d_backward.grad_input", upsample_backward<Mode::Nearest>},
    {"upsample_nearest3d_backward.grad_input", upsample_backward<Mode::Nearest>},
    {"_upsample_nearest_exact1d.out", upsample<Mode::NearestExact>},
    {"_upsample_nearest_exact2d.out", upsample<Mode::NearestExact>},
    {"_upsample_nearest_exact3d.out", upsample<Mode::NearestExact>},
    {"_upsample_nearest_exact1d_backward.grad_input", upsample_backward<Mode::NearestExact>},
    {"_upsample_nearest_exact2d_backward.grad_input", upsample_backward<Mode::NearestExact>},
    {"_upsample_nearest_exact3d_backward.grad_input", upsample_backward<Mode::NearestExact>},
    {"upsample_linear1d.out", upsample<Mode::Linear>},
    {"upsample_bilinear2d.out", upsample<Mode::Linear>},
    {"upsample_trilinear3d.out", upsample<Mode::Linear>},
    {"upsample_linear1d_backward.grad_input", upsample_backward<Mode::Linear>},
    {"upsample_bilinear2d_backward.grad_input", upsample_backward<Mode::Linear>},
    {"upsample_trilinear3d_backward.grad_input", upsample_backward<Mode::Linear>},
    {"upsample_bicubic2d.out", upsample<Mode::Cubic>},
    {"upsample_bicubic2d_backward.grad_input", upsample_backward<Mode::Cubic>},
});

}  // namespace
}  // namespace torchtpu
