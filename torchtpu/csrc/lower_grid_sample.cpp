// lower_grid_sample.cpp: lowerings of F.grid_sample on 4-D inputs (grid_sampler_2d and its
// backward), bilinear and nearest, with zeros, border and reflection padding and either
// align_corners, following ATen's GridSampler.h step for step. Bicubic runs on the CPU fallback.
//
//   input (N, C, H, W) is gathered as rows of (N * H * W, C); grid (N, Ho, Wo, 2) holds
//   (x, y) in [-1, 1]; each of the L = N * Ho * Wo output points reads up to 4 corner rows
//   source index   unnormalize ((g + 1) / 2 * (S - 1), or ((g + 1) S - 1) / 2), then border:
//                  clip to [0, S - 1]; reflection: reflect about the edges, then clip;
//                  non-finite -> -100 (out of bounds); d(index)/d(g) alongside
//   bilinear       corners floor(ix), floor(ix) + 1 (and y), weights from the distances;
//                  a corner outside the input reads 0 (selected, so inf/NaN never leak)
//   nearest        the corner round-half-even(ix, iy)
//   backward       grad_input: the weighted grad_output scatter-added at the corners;
//                  grad_grid (bilinear): the weights' derivatives times the corner values,
//                  summed over channels, times d(index)/d(g); 0 for nearest
// Computed in f32 (f64 for f64); the CPU kernel takes float32 and float64 only, so other
// dtypes take the fallback, which raises its error.
#include <ATen/core/Tensor.h>

#include <cmath>
#include <vector>

#include "lower_ew.h"

namespace torchtpu {
namespace {

enum Interp { kBilinear = 0, kNearest = 1 };
enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

struct Axis {
  tpu_value_t index;  // source coordinate (L)
  tpu_value_t grad;   // d index / d grid coordinate (L)
};

// ATen's grid_sampler_compute_source_index_set_grad for one axis of size |size|
Axis source_index(const Ew &E, tpu_value_t coord, int64_t size, int padding, bool align) {
  const double s = static_cast<double>(size);
  tpu_value_t u = align ? E.mul(E.add(coord, E.k(1)), E.k((s - 1) / 2))
                        : E.div(E.sub(E.mul(E.add(coord, E.k(1)), E.k(s)), E.k(1)), E.k(2));
  tpu_value_t grad = E.k(align ? (s - 1) / 2 : s / 2);
  if (padding == kReflection) {
    const double lo2 = align ? 0 : -1, hi2 = align ? 2 * (s - 1) : 2 * s - 1;
    if (lo2 == hi2) {
      u = E.k(0);
      grad = E.k(0);
    } else {
      const double min = lo2 / 2, span = (hi2 - lo2) / 2;
      tpu_value_t d = E.sub(u, E.k(min));
      tpu_value_t negative = E.cmp(TPU_CMP_LT, d, E.k(0));
      tpu_value_t a = E.un(TPU_OP_ABS, d);
      tpu_value_t extra = E.op(TPU_OP_REM, a, E.k(span));
      tpu_value_t flips = E.un(TPU_OP_FLOOR, E.div(a, E.k(span)));
      tpu_value_t even = E.cmp(TPU_CMP_EQ, E.op(TPU_OP_REM, flips, E.k(2)), E.k(0));
      u = E.sel(even, E.add(extra, E.k(min)), E.add(E.sub(E.k(span), extra), E.k(min)));
      tpu_value_t sign = E.sel(E.op(TPU_OP_XOR, negative, E.un(TPU_OP_NOT, even)), E.k(-1), E.k(1));
      grad = E.mul(grad, sign);
    }
  }
  if (padding != kZeros) {  // clip to [0, size - 1]; no gradient where clipped
    tpu_value_t inside = E.op(TPU_OP_AND, E.cmp(TPU_CMP_GT, u, E.k(0)), E.cmp(TPU_CMP_LT, u, E.k(s - 1)));
    grad = E.sel(inside, grad, E.k(0));
    u = E.clamp(u, E.k(0), E.k(s - 1));
  }
  u = E.sel(tpu_graph_unary(E.g, TPU_OP_IS_FINITE, u), u, E.k(-100));
  return {u, grad};
}

// The shared setup of forward and backward.
struct Sampler {
  Ew E;                     // over (L) in the compute dtype
  int64_t n, c, h, w, ho, wo;
  int interp;
  tpu_value_t rows;         // input as (N * H * W, C)
  tpu_value_t base;         // (L) i64: n * H * W of each point
  Axis x, y;
};

Sampler setup(LowerCtx &ctx, size_t input_arg, size_t grid_arg, size_t mode_arg) {
  tpu_dtype_t dt = dtype_of(ctx.g, ctx.v(input_arg));
  if (dt != TPU_F32 && dt != TPU_F64) throw Unsupported("grid_sampler_2d in this dtype");
  const int interp = static_cast<int>(ctx.arg(mode_arg).toInt());
  if (interp != kBilinear && interp != kNearest) throw Unsupported("bicubic grid_sampler_2d");
  const int padding = static_cast<int>(ctx.arg(mode_arg + 1).toInt());
  const bool align = ctx.arg(mode_arg + 2).toBool();
  tpu_shape_t is = shape_of(ctx.g, ctx.v(input_arg)), gs = shape_of(ctx.g, ctx.v(grid_arg));
  Sampler S{Ew{ctx.g, dt, tpu_shape_t{1, {gs.dims[0] * gs.dims[1] * gs.dims[2]}}},
            is.dims[0], is.dims[1], is.dims[2], is.dims[3], gs.dims[1], gs.dims[2], interp,
            TPU_NO_VALUE, TPU_NO_VALUE, {}, {}};
  const int64_t nhwc[4] = {0, 2, 3, 1};
  tpu_shape_t rows{2, {S.n * S.h * S.w, S.c}};
  S.rows = tpu_graph_reshape(ctx.g, tpu_graph_transpose(ctx.g, ctx.v(input_arg), nhwc), &rows);
  tpu_shape_t points{3, {S.n, S.ho, S.wo}};
  tpu_value_t batch = tpu_graph_reshape(ctx.g, tpu_graph_iota(ctx.g, TPU_I64, &points, 0), &S.E.shape);
  S.base = tpu_graph_binary(ctx.g, TPU_OP_MUL, batch, full(ctx.g, TPU_I64, S.E.shape, static_cast<double>(S.h * S.w)));
  auto coordinate = [&](int64_t k) {  // grid[..., k] as (L)
    int64_t start[4] = {0, 0, 0, k}, limit[4] = {gs.dims[0], gs.dims[1], gs.dims[2], k + 1}, stride[4] = {1, 1, 1, 1};
    return tpu_graph_reshape(ctx.g, tpu_graph_slice(ctx.g, ctx.v(grid_arg), start, limit, stride), &S.E.shape);
  };
  S.x = source_index(S.E, coordinate(0), S.w, padding, align);
  S.y = source_index(S.E, coordinate(1), S.h, padding, align);
  return S;
}

// One corner read: its row of |rows| for each point (clamped in range) and whether it is inside.
struct Corner {
  tpu_value_t cx, cy;    // corner coordinates (L), float
  tpu_value_t weight;    // (L)
  tpu_value_t row;       // (L) i64
  tpu_value_t inside;    // (L) bool
};

Corner corner(const Sampler &S, tpu_value_t cx, tpu_value_t cy, tpu_value_t weight) {
  const Ew &E = S.E;
  tpu_value_t inside = E.op(TPU_OP_AND,
                            E.op(TPU_OP_AND, E.cmp(TPU_CMP_GE, cx, E.k(0)), E.cmp(TPU_CMP_LE, cx, E.k(S.w - 1))),
                            E.op(TPU_OP_AND, E.cmp(TPU_CMP_GE, cy, E.k(0)), E.cmp(TPU_CMP_LE, cy, E.k(S.h - 1))));
  auto index = [&](tpu_value_t v, int64_t size) {
    return convert(E.g, E.clamp(v, E.k(0), E.k(size - 1)), TPU_I64);
  };
  Ew I{E.g, TPU_I64, E.shape};
  tpu_value_t row = I.add(S.base, I.add(I.mul(index(cy, S.h), I.k(S.w)), index(cx, S.w)));
  return {cx, cy, weight, row, inside};
}

std::vector<Corner> corners(const Sampler &S) {
  const Ew &E = S.E;
  if (S.interp == kNearest) {
    return {corner(S, E.un(TPU_OP_ROUND_EVEN, S.x.index), E.un(TPU_OP_ROUND_EVEN, S.y.index), E.k(1))};
  }
  tpu_value_t x0 = E.un(TPU_OP_FLOOR, S.x.index), y0 = E.un(TPU_OP_FLOOR, S.y.index);
  tpu_value_t x1 = E.add(x0, E.k(1)), y1 = E.add(y0, E.k(1));
  tpu_value_t east = E.sub(x1, S.x.index), west = E.sub(S.x.index, x0);  // weights of x0, x1
  tpu_value_t south = E.sub(y1, S.y.index), north = E.sub(S.y.index, y0);
  return {corner(S, x0, y0, E.mul(east, south)), corner(S, x1, y0, E.mul(west, south)),
          corner(S, x0, y1, E.mul(east, north)), corner(S, x1, y1, E.mul(west, north))};
}

// (L) -> (L, C)
tpu_value_t per_channel(const Sampler &S, tpu_value_t v) {
  tpu_shape_t lc{2, {S.E.shape.dims[0], S.c}};
  const int64_t dims[1] = {0};
  return tpu_graph_broadcast_in_dim(S.E.g, v, &lc, dims);
}

// The corner's rows of the input (L, C), 0 outside
tpu_value_t read(const Sampler &S, const Corner &k) {
  tpu_value_t v = gather_slices(S.E.g, S.rows, 0, k.row);
  return tpu_graph_select(S.E.g, per_channel(S, k.inside), v, full(S.E.g, S.E.dt, shape_of(S.E.g, v), 0));
}

// (L, C) -> (N, C, Ho, Wo)
tpu_value_t to_nchw(const Sampler &S, tpu_value_t v) {
  tpu_shape_t nhwc{4, {S.n, S.ho, S.wo, S.c}};
  const int64_t perm[4] = {0, 3, 1, 2};
  return tpu_graph_transpose(S.E.g, tpu_graph_reshape(S.E.g, v, &nhwc), perm);
}

// grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)
void grid_sampler_2d(LowerCtx &ctx) {
  Sampler S = setup(ctx, 0, 1, 2);
  tpu_value_t out = TPU_NO_VALUE;
  for (const Corner &k : corners(S)) {
    tpu_value_t term = tpu_graph_binary(ctx.g, TPU_OP_MUL, read(S, k), per_channel(S, k.weight));
    out = out == TPU_NO_VALUE ? term : tpu_graph_binary(ctx.g, TPU_OP_ADD, out, term);
  }
  ctx.results = {to_nchw(S, out)};
}

// grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
// align_corners, output_mask) -> (grad_input, grad_grid)
void grid_sampler_2d_backward(LowerCtx &ctx) {
  Sampler S = setup(ctx, 1, 2, 3);
  const Ew &E = S.E;
  tpu_graph_t *g = ctx.g;
  const int64_t nhwc[4] = {0, 2, 3, 1};
  tpu_shape_t lc{2, {E.shape.dims[0], S.c}};
  tpu_value_t go = tpu_graph_reshape(g, tpu_graph_transpose(g, convert(g, ctx.v(0), E.dt), nhwc), &lc);
  std::vector<Corner> ks = corners(S);
  tpu_value_t grad_input = TPU_NO_VALUE;
  if (ctx.out_meta[0].defined()) {
    std::vector<tpu_value_t> rows, updates;
    for (const Corner &k : ks) {
      tpu_value_t u = tpu_graph_binary(g, TPU_OP_MUL, go, per_channel(S, k.weight));
      updates.push_back(tpu_graph_select(g, per_channel(S, k.inside), u, full(g, E.dt, lc, 0)));
      rows.push_back(k.row);
    }
    tpu_value_t all_rows = tpu_graph_concatenate(g, rows.data(), static_cast<int>(rows.size()), 0);
    tpu_value_t all_updates = tpu_graph_concatenate(g, updates.data(), static_cast<int>(updates.size()), 0);
    tpu_shape_t flat{2, {S.n * S.h * S.w, S.c}}, image{4, {S.n, S.h, S.w, S.c}};
    tpu_value_t sum = scatter_slices(g, full(g, E.dt, flat, 0), 0, all_rows, all_updates, true);
    const int64_t nchw[4] = {0, 3, 1, 2};
    grad_input = tpu_graph_transpose(g, tpu_graph_reshape(g, sum, &image), nchw);
  }
  tpu_value_t gx = E.k(0), gy = E.k(0);
  if (S.interp == kBilinear) {  // d weight / d ix and d iy per corner: nw, ne, sw, se
    tpu_value_t south = E.sub(E.add(E.un(TPU_OP_FLOOR, S.y.index), E.k(1)), S.y.index);
    tpu_value_t north = E.sub(S.y.index, E.un(TPU_OP_FLOOR, S.y.index));
    tpu_value_t east = E.sub(E.add(E.un(TPU_OP_FLOOR, S.x.index), E.k(1)), S.x.index);
    tpu_value_t west = E.sub(S.x.index, E.un(TPU_OP_FLOOR, S.x.index));
    const tpu_value_t dx[4] = {E.un(TPU_OP_NEG, south), south, E.un(TPU_OP_NEG, north), north};
    const tpu_value_t dy[4] = {E.un(TPU_OP_NEG, east), E.un(TPU_OP_NEG, west), east, west};
    const bool over_c[2] = {false, true};
    for (size_t i = 0; i < ks.size(); i++) {
      tpu_value_t s = tpu_graph_reduce(g, TPU_REDUCE_SUM, tpu_graph_binary(g, TPU_OP_MUL, go, read(S, ks[i])), over_c);
      gx = E.add(gx, E.mul(dx[i], s));
      gy = E.add(gy, E.mul(dy[i], s));
    }
  }
  tpu_shape_t point{4, {S.n, S.ho, S.wo, 1}};
  tpu_value_t parts[2] = {tpu_graph_reshape(g, E.mul(gx, S.x.grad), &point),
                          tpu_graph_reshape(g, E.mul(gy, S.y.grad), &point)};
  ctx.results = {grad_input, tpu_graph_concatenate(g, parts, 2, 3)};
}

LoweringRegistrar registrar({
    {"grid_sampler_2d", grid_sampler_2d},
    {"grid_sampler_2d_backward", grid_sampler_2d_backward},
});

}  // namespace
}  // namespace torchtpu
