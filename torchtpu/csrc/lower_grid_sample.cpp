// lower_grid_sample.cpp: lowerings of F.grid_sample: grid_sampler_2d (4-D input; bilinear,
// nearest and bicubic) and grid_sampler_3d (5-D input; bilinear, i.e. trilinear, and nearest),
// with their backwards, zeros, border and reflection padding and either align_corners,
// following ATen's CPU kernels (GridSampler.h, GridSampler.cpp, cpu/GridSamplerKernel.cpp).
//
//   input (N, C, [D,] H, W) is gathered as rows of (N * [D *] H * W, C); grid (N, [Do,] Ho, Wo, K)
//   holds (x, y[, z]) in [-1, 1], K = 2 or 3; each of the L = N * [Do *] Ho * Wo output points
//   reads up to 2^K corner rows (bilinear), one (nearest) or 4 x 4 taps (bicubic)
//   source index   unnormalize ((g + 1) / 2 * (S - 1), or ((g + 1) S - 1) / 2), then border:
//                  clip to [0, S - 1]; reflection: reflect about the edges, then clip;
//                  d(index)/d(g) alongside
//   bilinear       corners floor(ix), floor(ix) + 1 (and y, z), weights the products of the
//                  distances; a corner outside the input reads 0 (selected, so inf/NaN never leak)
//   nearest        the corner round-half-even(ix, iy[, iz])
//   bicubic        the unnormalized index, unpadded; taps floor(ix) - 1 ... floor(ix) + 2 (and y),
//                  each padded on its own (border/reflection), weights the cubic convolution
//                  coefficients (A = -0.75) of t = ix - floor(ix) and of t = iy - floor(iy)
//   backward       grad_input: the weighted grad_output scatter-added at the corners;
//                  grad_grid: the weights' derivatives times the corner values, summed over
//                  channels, times d(index)/d(g); 0 for nearest
//   non-finite g   as on the CPU: the clip of border/reflection padding sends NaN to S - 1 in the
//                  3-D forward (scalar std::min/max) and to 0 in the 2-D forward and at bicubic
//                  taps (vectorized clamps); the 3-D kernel then sends any non-finite index to -100
//                  (out of bounds), the 2-D one keeps it, so NaN weights give NaN (the CPU's 2-D
//                  backward with border/reflection padding and a NaN grid is undefined: it may crash)
// Computed in f32 (f64 for f64); the CPU kernels take float32 and float64 only, so other
// dtypes take the fallback, which raises its error.
#include <ATen/core/Tensor.h>

#include <cmath>
#include <vector>

#include "lower_ew.h"

namespace torchtpu {
namespace {

enum Interp { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };
constexpr double kCubicA = -0.75;  // ATen's cubic convolution parameter

struct Axis {
  tpu_value_t index;  // source coordinate (L)
  tpu_value_t grad;   // d index / d grid coordinate (L)
};

// Where the clip of border and reflection padding sends NaN: the 3-D forward's
// std::min(size - 1, std::max(x, 0)) to size - 1, the 2-D forward's and bicubic taps'
// clamp_max(size - 1, clamp_min(0, x)) to 0; the backwards' clips keep it.
enum NanClip { kKeepNan, kNanToZero, kNanToEdge };

// ATen's compute_coordinates(_set_grad) on |a| for an axis of size |size|: border clips,
// reflection reflects about the edges and clips.
Axis pad(const Ew &E, Axis a, int64_t size, int padding, bool align, NanClip nan) {
  const double s = static_cast<double>(size);
  tpu_value_t u = a.index, grad = a.grad;
  if (padding == kReflection) {
    const double lo2 = align ? 0 : -1, hi2 = align ? 2 * (s - 1) : 2 * s - 1;
    if (lo2 == hi2) {
      u = E.k(0);
      grad = E.k(0);
    } else {
      const double min = lo2 / 2, span = (hi2 - lo2) / 2;
      tpu_value_t d = E.sub(u, E.k(min));
      tpu_value_t negative = E.cmp(TPU_CMP_LT, d, E.k(0));
      tpu_value_t abs = E.un(TPU_OP_ABS, d);
      tpu_value_t extra = E.op(TPU_OP_REM, abs, E.k(span));
      tpu_value_t flips = E.un(TPU_OP_FLOOR, E.div(abs, E.k(span)));
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
    if (nan != kKeepNan) u = E.sel(E.isnan(u), E.k(nan == kNanToEdge ? s - 1 : 0), u);
  }
  return {u, grad};
}

// ATen's grid_sampler_compute_source_index(_set_grad) for one axis of size |size|, unnormalized
// as the 3-D kernel does ((g + 1) S - 1) / 2) or as the 2-D one ((g + 1) (S / 2) - 0.5); bicubic
// only unnormalizes (its taps are padded one by one).
Axis source_index(const Ew &E, tpu_value_t coord, int64_t size, int interp, int padding, bool align,
                  bool three_d, bool forward) {
  const double s = static_cast<double>(size);
  tpu_value_t u = E.mul(E.add(coord, E.k(1)), E.k(align ? (s - 1) / 2 : s / 2));
  if (!align) u = three_d ? E.div(E.sub(E.mul(E.add(coord, E.k(1)), E.k(s)), E.k(1)), E.k(2)) : E.sub(u, E.k(0.5));
  Axis a{u, E.k(align ? (s - 1) / 2 : s / 2)};
  if (interp == kBicubic) return a;
  a = pad(E, a, size, padding, align, !forward ? kKeepNan : three_d ? kNanToEdge : kNanToZero);
  if (three_d) a.index = E.sel(E.un(TPU_OP_IS_FINITE, a.index), a.index, E.k(-100));
  return a;
}

// The shared setup of forward and backward, for K = 2 or 3 spatial dimensions.
struct Sampler {
  Ew E;                      // over (L) in the compute dtype
  int64_t n, c;
  int dims;                  // K
  int64_t size[3];           // input extent along x, y, z: W, H, D
  std::vector<int64_t> out;  // (N, [Do,] Ho, Wo)
  int interp, padding;
  bool align;
  tpu_value_t rows;          // input as (N * [D *] H * W, C)
  tpu_value_t base;          // (L) i64: n * [D *] H * W of each point
  Axis axis[3];              // x, y, z
};

Sampler setup(LowerCtx &ctx, size_t input_arg, size_t grid_arg, size_t mode_arg, bool forward) {
  tpu_graph_t *g = ctx.g;
  tpu_dtype_t dt = dtype_of(g, ctx.v(input_arg));
  tpu_shape_t is = shape_of(g, ctx.v(input_arg)), gs = shape_of(g, ctx.v(grid_arg));
  const int dims = is.rank - 2;
  if (dt != TPU_F32 && dt != TPU_F64) throw Unsupported("grid_sampler in this dtype");
  const int interp = static_cast<int>(ctx.arg(mode_arg).toInt());
  if (interp == kBicubic && dims == 3) throw Unsupported("bicubic grid_sampler_3d");
  Sampler S{Ew{g, dt, tpu_shape_t{1, {1}}}, is.dims[0], is.dims[1], dims, {1, 1, 1}, {}, interp,
            static_cast<int>(ctx.arg(mode_arg + 1).toInt()), ctx.arg(mode_arg + 2).toBool(),
            TPU_NO_VALUE, TPU_NO_VALUE, {}};
  int64_t points = 1, pixels = 1;
  for (int d = 0; d <= dims; d++) {
    S.out.push_back(gs.dims[d]);
    points *= gs.dims[d];
  }
  for (int k = 0; k < dims; k++) {
    S.size[k] = is.dims[is.rank - 1 - k];
    pixels *= S.size[k];
  }
  S.E.shape = tpu_shape_t{1, {points}};
  int64_t to_last[5] = {0};  // (N, C, ...) -> (N, ..., C)
  for (int d = 1; d <= dims; d++) to_last[d] = d + 1;
  to_last[dims + 1] = 1;
  tpu_shape_t rows{2, {S.n * pixels, S.c}};
  S.rows = tpu_graph_reshape(g, tpu_graph_transpose(g, ctx.v(input_arg), to_last), &rows);
  tpu_shape_t grid_points{dims + 1, {}};
  for (int d = 0; d <= dims; d++) grid_points.dims[d] = S.out[d];
  tpu_value_t batch = tpu_graph_reshape(g, tpu_graph_iota(g, TPU_I64, &grid_points, 0), &S.E.shape);
  S.base = tpu_graph_binary(g, TPU_OP_MUL, batch, full(g, TPU_I64, S.E.shape, static_cast<double>(pixels)));
  for (int k = 0; k < dims; k++) {  // grid[..., k] as (L)
    int64_t start[5] = {0}, limit[5], stride[5] = {1, 1, 1, 1, 1};
    for (int d = 0; d <= dims; d++) limit[d] = gs.dims[d];
    start[dims + 1] = k;
    limit[dims + 1] = k + 1;
    tpu_value_t coord = tpu_graph_reshape(g, tpu_graph_slice(g, ctx.v(grid_arg), start, limit, stride), &S.E.shape);
    S.axis[k] = source_index(S.E, coord, S.size[k], interp, S.padding, S.align, dims == 3, forward);
  }
  return S;
}

// One corner (or tap) read: its row of |rows| for each point and whether it is inside.
struct Corner {
  tpu_value_t weight;      // (L)
  tpu_value_t dweight[3];  // d weight / d index along x, y, z (L); TPU_NO_VALUE for 0
  tpu_value_t row;         // (L) i64, 0 where outside
  tpu_value_t inside;      // (L) bool
};

Corner corner(const Sampler &S, const tpu_value_t *at, tpu_value_t weight) {
  const Ew &E = S.E;
  Ew I{E.g, TPU_I64, E.shape};
  tpu_value_t inside = TPU_NO_VALUE;
  for (int k = 0; k < S.dims; k++) {
    tpu_value_t in = E.op(TPU_OP_AND, E.cmp(TPU_CMP_GE, at[k], E.k(0)), E.cmp(TPU_CMP_LE, at[k], E.k(S.size[k] - 1)));
    inside = k == 0 ? in : E.op(TPU_OP_AND, inside, in);
  }
  tpu_value_t row = S.base;
  int64_t stride = 1;
  for (int k = 0; k < S.dims; k++) {
    tpu_value_t index = convert(E.g, E.sel(inside, at[k], E.k(0)), TPU_I64);
    row = I.add(row, I.mul(index, I.k(static_cast<double>(stride))));
    stride *= S.size[k];
  }
  return {weight, {TPU_NO_VALUE, TPU_NO_VALUE, TPU_NO_VALUE}, row, inside};
}

// ATen's cubic convolution coefficients of the 4 taps at distance t (in [0, 1)) past the
// second, and (|grad|) their derivatives with respect to the distance -1 - t, -t, 1 - t, 2 - t
// of each tap, which are minus the derivatives with respect to t.
void cubic_coefficients(const Ew &E, tpu_value_t t, tpu_value_t c[4], bool grad) {
  const double A = kCubicA;
  const tpu_value_t far[2] = {E.add(t, E.k(1)), E.sub(E.k(2), t)};  // taps 0 and 3: 1 < x < 2
  const tpu_value_t near[2] = {t, E.sub(E.k(1), t)};                // taps 1 and 2: x <= 1
  if (!grad) {
    for (int i = 0; i < 2; i++) {
      c[i ? 3 : 0] = E.poly(far[i], {A, -5 * A, 8 * A, -4 * A});
      c[i ? 2 : 1] = E.poly(near[i], {A + 2, -(A + 3), 0, 1});
    }
    return;
  }
  const tpu_value_t x[4] = {E.un(TPU_OP_NEG, far[0]), E.un(TPU_OP_NEG, t), near[1], far[1]};
  c[0] = E.poly(x[0], {-3 * A, -10 * A, -8 * A});
  c[1] = E.mul(E.poly(x[1], {-3 * (A + 2), -2 * (A + 3)}), x[1]);
  c[2] = E.mul(E.poly(x[2], {3 * (A + 2), -2 * (A + 3)}), x[2]);
  c[3] = E.poly(x[3], {3 * A, -10 * A, 8 * A});
}

std::vector<Corner> corners(const Sampler &S) {
  const Ew &E = S.E;
  std::vector<Corner> out;
  if (S.interp == kNearest) {
    tpu_value_t at[3];
    for (int k = 0; k < S.dims; k++) at[k] = E.un(TPU_OP_ROUND_EVEN, S.axis[k].index);
    out.push_back(corner(S, at, E.k(1)));
  } else if (S.interp == kBilinear) {  // x fastest: nw, ne, sw, se (then the far z plane)
    tpu_value_t lo[3], hi[3], w[3][2];   // w[k][0]: weight of lo along k, w[k][1]: of hi
    for (int k = 0; k < S.dims; k++) {
      lo[k] = E.un(TPU_OP_FLOOR, S.axis[k].index);
      hi[k] = E.add(lo[k], E.k(1));
      w[k][1] = E.sub(S.axis[k].index, lo[k]);  // 2-D: 1 - (ix - floor(ix)), 3-D: floor(ix) + 1 - ix
      w[k][0] = S.dims == 2 ? E.sub(E.k(1), w[k][1]) : E.sub(hi[k], S.axis[k].index);
    }
    for (int m = 0; m < (1 << S.dims); m++) {
      tpu_value_t at[3], weight = TPU_NO_VALUE;
      for (int k = 0; k < S.dims; k++) {
        const int b = (m >> k) & 1;
        at[k] = b ? hi[k] : lo[k];
        weight = k == 0 ? w[k][b] : E.mul(weight, w[k][b]);
      }
      Corner c = corner(S, at, weight);
      for (int k = 0; k < S.dims; k++) {  // +-1 times the other axes' weights
        tpu_value_t d = TPU_NO_VALUE;
        for (int j = 0; j < S.dims; j++) {
          if (j != k) d = d == TPU_NO_VALUE ? w[j][(m >> j) & 1] : E.mul(d, w[j][(m >> j) & 1]);
        }
        c.dweight[k] = (m >> k) & 1 ? d : E.un(TPU_OP_NEG, d);
      }
      out.push_back(c);
    }
  } else {  // bicubic, 2-D: y outer, x inner, as the CPU reads them
    tpu_value_t lo[2], cf[2][4], dc[2][4];
    for (int k = 0; k < 2; k++) {
      lo[k] = E.un(TPU_OP_FLOOR, S.axis[k].index);
      tpu_value_t t = E.sub(S.axis[k].index, lo[k]);
      cubic_coefficients(E, t, cf[k], false);
      cubic_coefficients(E, t, dc[k], true);
    }
    for (int j = 0; j < 4; j++) {
      for (int i = 0; i < 4; i++) {
        tpu_value_t at[2];
        const int tap[2] = {i, j};
        for (int k = 0; k < 2; k++) {
          Axis a = pad(E, {E.add(lo[k], E.k(tap[k] - 1)), E.k(0)}, S.size[k], S.padding, S.align, kNanToZero);
          at[k] = a.index;
        }
        Corner c = corner(S, at, E.mul(cf[0][i], cf[1][j]));
        c.dweight[0] = E.un(TPU_OP_NEG, E.mul(dc[0][i], cf[1][j]));
        c.dweight[1] = E.un(TPU_OP_NEG, E.mul(cf[0][i], dc[1][j]));
        out.push_back(c);
      }
    }
  }
  return out;
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

// (M, C) -> (N, C, |spatial|...) for M = N * prod(spatial)
tpu_value_t channels_first(const Sampler &S, tpu_value_t v, const int64_t *spatial) {
  tpu_shape_t last{S.dims + 2, {S.n}};
  int64_t perm[5] = {0, S.dims + 1};
  for (int d = 0; d < S.dims; d++) {
    last.dims[d + 1] = spatial[d];
    perm[d + 2] = d + 1;
  }
  last.dims[S.dims + 1] = S.c;
  return tpu_graph_transpose(S.E.g, tpu_graph_reshape(S.E.g, v, &last), perm);
}

// grid_sampler_2d/3d(input, grid, interpolation_mode, padding_mode, align_corners)
void grid_sampler(LowerCtx &ctx) {
  Sampler S = setup(ctx, 0, 1, 2, true);
  tpu_value_t out = TPU_NO_VALUE;
  for (const Corner &k : corners(S)) {
    tpu_value_t term = tpu_graph_binary(ctx.g, TPU_OP_MUL, read(S, k), per_channel(S, k.weight));
    out = out == TPU_NO_VALUE ? term : tpu_graph_binary(ctx.g, TPU_OP_ADD, out, term);
  }
  ctx.results = {channels_first(S, out, S.out.data() + 1)};
}

// grid_sampler_2d/3d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
// align_corners, output_mask) -> (grad_input, grad_grid)
void grid_sampler_backward(LowerCtx &ctx) {
  Sampler S = setup(ctx, 1, 2, 3, false);
  const Ew &E = S.E;
  tpu_graph_t *g = ctx.g;
  int64_t to_last[5] = {0};
  for (int d = 1; d <= S.dims; d++) to_last[d] = d + 1;
  to_last[S.dims + 1] = 1;
  tpu_shape_t lc{2, {E.shape.dims[0], S.c}};
  tpu_value_t go = tpu_graph_reshape(g, tpu_graph_transpose(g, convert(g, ctx.v(0), E.dt), to_last), &lc);
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
    int64_t pixels = 1, spatial[3];
    for (int d = 0; d < S.dims; d++) pixels *= spatial[d] = S.size[S.dims - 1 - d];
    tpu_shape_t flat{2, {S.n * pixels, S.c}};
    grad_input = channels_first(S, scatter_slices(g, full(g, E.dt, flat, 0), 0, all_rows, all_updates, true), spatial);
  }
  tpu_value_t grad[3] = {E.k(0), E.k(0), E.k(0)};
  const bool over_c[2] = {false, true};
  for (const Corner &k : ks) {
    if (k.dweight[0] == TPU_NO_VALUE) continue;  // nearest
    tpu_value_t s = tpu_graph_reduce(g, TPU_REDUCE_SUM, tpu_graph_binary(g, TPU_OP_MUL, go, read(S, k)), over_c);
    for (int d = 0; d < S.dims; d++) grad[d] = E.add(grad[d], E.mul(k.dweight[d], s));
  }
  tpu_shape_t point{S.dims + 2, {}};
  for (int d = 0; d <= S.dims; d++) point.dims[d] = S.out[d];
  point.dims[S.dims + 1] = 1;
  tpu_value_t parts[3];
  for (int d = 0; d < S.dims; d++) parts[d] = tpu_graph_reshape(g, E.mul(grad[d], S.axis[d].grad), &point);
  ctx.results = {grad_input, tpu_graph_concatenate(g, parts, S.dims, S.dims + 1)};
}

LoweringRegistrar registrar({
    {"grid_sampler_2d", grid_sampler},
    {"grid_sampler_2d_backward", grid_sampler_backward},
    {"grid_sampler_3d", grid_sampler},
    {"grid_sampler_3d_backward", grid_sampler_backward},
});

}  // namespace
}  // namespace torchtpu
