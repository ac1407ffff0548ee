// lower_pool.cpp: lowerings of 2-D pooling forward and backward: max_pool2d (with
// PyTorch's flat h * W + w indices), avg_pool2d (ceil_mode, count_include_pad,
// divisor_override) and adaptive max and average pooling.
//
// Inputs are (N, C, H, W) or (C, H, W); the leading dims are folded into one plane dim P.
// Sums and averages of bf16/f16 are computed in f32 and rounded once by the engine.
//
//   max_pool2d        one strided slice of the -inf padded input per window tap, a
//                     running (value, index) max in PyTorch's scan order: the first
//                     maximum wins, the last NaN wins (as on CPU), an all -inf window
//                     keeps its first in-bounds element
//   max_pool2d bwd    scatter-add of grad_output into (P, H * W) at the saved indices
//   avg_pool2d        reduce_window SUM / a divisor computed from iotas
//   avg_pool2d bwd    grad / divisor, dilated by the stride (interior padding) and summed
//                     over each window: the transpose of the forward window sum
//   adaptive max      the same running max over each window's taps, gathered from
//                     per-window start rows/cols; backward as max_pool2d's
//   adaptive avg      windows [floor(i H / OH), ceil((i + 1) H / OH)): a reduce_window when
//                     H % OH == 0 (and W % OW == 0), else two products with the (OH, H) and
//                     (OW, W) averaging matrices at HIGHEST precision (about f32)
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "native.h"

namespace torchtpu {
namespace {

struct Pool {
  int64_t k[2], s[2], p[2], d[2];
  int64_t in[2], out[2];  // H, W and OH, OW
  int64_t planes;         // product of the leading dims
};

void pair(const c10::IValue &v, int64_t out[2], int64_t fill) {
  std::vector<int64_t> l = v.isNone() ? std::vector<int64_t>{} : v.toIntVector();
  if (l.empty()) {
    out[0] = out[1] = fill;
  } else if (l.size() == 1) {
    out[0] = out[1] = l[0];
  } else {
    out[0] = l[0];
    out[1] = l[1];
  }
}

// |self_shape| (.., H, W), |out_shape| (.., OH, OW).
Pool pool_dims(const tpu_shape_t &self_shape, const tpu_shape_t &out_shape) {
  if (self_shape.rank != 3 && self_shape.rank != 4) throw Unsupported("pooling needs 3-D or 4-D input");
  Pool p{};
  p.planes = 1;
  for (int d = 0; d < self_shape.rank - 2; d++) p.planes *= self_shape.dims[d];
  for (int i = 0; i < 2; i++) {
    p.in[i] = self_shape.dims[self_shape.rank - 2 + i];
    p.out[i] = out_shape.dims[out_shape.rank - 2 + i];
  }
  return p;
}

// kernel_size, stride (empty: = kernel), padding, [dilation] from argument |at|.
void window_args(const LowerCtx &ctx, size_t at, bool has_dilation, Pool &p) {
  pair(ctx.arg(at), p.k, 1);
  pair(ctx.arg(at + 1), p.s, 0);
  for (int i = 0; i < 2; i++) {
    if (p.s[i] == 0) p.s[i] = p.k[i];
  }
  pair(ctx.arg(at + 2), p.p, 0);
  if (has_dilation) {
    pair(ctx.arg(at + 3), p.d, 1);
  } else {
    p.d[0] = p.d[1] = 1;
  }
}

tpu_value_t planes3(LowerCtx &ctx, tpu_value_t x, const Pool &p, int64_t h, int64_t w) {
  tpu_shape_t s{3, {p.planes, h, w}};
  return tpu_graph_reshape(ctx.g, x, &s);
}

tpu_value_t bin(LowerCtx &ctx, tpu_op_t op, tpu_value_t a, tpu_value_t b) {
  return tpu_graph_binary(ctx.g, op, a, b);
}

// A (n) i64 vector a * iota + b.
tpu_value_t affine(LowerCtx &ctx, int64_t n, int64_t a, int64_t b) {
  tpu_shape_t s{1, {n}};
  tpu_value_t i = tpu_graph_iota(ctx.g, TPU_I64, &s, 0);
  return bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, i, full(ctx.g, TPU_I64, s, static_cast<double>(a))),
             full(ctx.g, TPU_I64, s, static_cast<double>(b)));
}

// (OH) x (OW) -> (OH, OW) combining a row vector and a column vector with |op|.
tpu_value_t outer(LowerCtx &ctx, tpu_op_t op, tpu_value_t rows, tpu_value_t cols) {
  tpu_shape_t r = shape_of(ctx.g, rows), c = shape_of(ctx.g, cols);
  tpu_shape_t s{2, {r.dims[0], c.dims[0]}};
  int64_t d0[1] = {0}, d1[1] = {1};
  return bin(ctx, op, tpu_graph_broadcast_in_dim(ctx.g, rows, &s, d0),
             tpu_graph_broadcast_in_dim(ctx.g, cols, &s, d1));
}

tpu_value_t to_planes(LowerCtx &ctx, tpu_value_t v2, const Pool &p) {  // (OH, OW) -> (P, OH, OW)
  tpu_shape_t s2 = shape_of(ctx.g, v2);
  tpu_shape_t s{3, {p.planes, s2.dims[0], s2.dims[1]}};
  int64_t dims[2] = {1, 2};
  return tpu_graph_broadcast_in_dim(ctx.g, v2, &s, dims);
}

// ---- max pooling ----------------------------------------------------------------------------

// One tap of a running max: |v| wins if it is greater than |*best| or NaN (so the last NaN
// wins, as on CPU), and |*tap| (i32) records the winner's tap number. Selects, not boolean
// and/or, keep this on the fast elementwise paths.
void running_max_step(LowerCtx &ctx, tpu_value_t v, int64_t tap_number, tpu_value_t *best, tpu_value_t *tap) {
  tpu_value_t nan = tpu_graph_compare(ctx.g, TPU_CMP_NE, v, v);
  tpu_value_t take = tpu_graph_select(ctx.g, nan, nan, tpu_graph_compare(ctx.g, TPU_CMP_GT, v, *best));
  *best = tpu_graph_select(ctx.g, take, v, *best);
  tpu_value_t number = full(ctx.g, TPU_I32, shape_of(ctx.g, v), static_cast<double>(tap_number));
  *tap = tpu_graph_select(ctx.g, take, number, *tap);
}

// max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
void max_pool2d(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_dtype_t dt = dtype_of(ctx.g, x);
  if (!tpu_dtype_is_float(dt)) throw Unsupported("max_pool2d of integers");
  Pool p = pool_dims(shape_of(ctx.g, x), ctx.out_shape(0));
  window_args(ctx, 1, true, p);
  int64_t H = p.in[0], W = p.in[1], OH = p.out[0], OW = p.out[1];
  x = planes3(ctx, x, p, H, W);
  // pad with -inf so that every strided slice below stays in range
  int64_t lo[3] = {0, p.p[0], p.p[1]}, hi[3] = {0, 0, 0}, interior[3] = {0, 0, 0};
  for (int i = 0; i < 2; i++) {
    int64_t need = (p.out[i] - 1) * p.s[i] + (p.k[i] - 1) * p.d[i] + 1 - p.in[i] - p.p[i];
    hi[1 + i] = need > 0 ? need : 0;
  }
  tpu_value_t ninf = scalar_const(ctx.g, dt, -std::numeric_limits<double>::infinity());
  tpu_value_t xp = tpu_graph_pad(ctx.g, x, ninf, lo, hi, interior);
  tpu_shape_t o3{3, {p.planes, OH, OW}};
  tpu_value_t best = full(ctx.g, dt, o3, -std::numeric_limits<double>::infinity());
  // input row/col of each window's first tap: oh * s - p (OH) and ow * s - p (OW)
  tpu_value_t row0 = affine(ctx, OH, p.s[0], -p.p[0]), col0 = affine(ctx, OW, p.s[1], -p.p[1]);
  // The winning tap t = a * kW + b is tracked (i32) and turned into h * W + w at the end.
  // It starts at the window's first in-bounds tap, ceil(max(-start, 0) / d) per axis, as
  // PyTorch's CPU kernel does (and stays there when every tap is -inf).
  auto first_tap = [&](tpu_value_t start, int64_t d) {
    tpu_shape_t vs = shape_of(ctx.g, start);
    auto c = [&](int64_t v) { return full(ctx.g, TPU_I64, vs, static_cast<double>(v)); };
    tpu_value_t before = bin(ctx, TPU_OP_MAX, tpu_graph_unary(ctx.g, TPU_OP_NEG, start), c(0));
    return bin(ctx, TPU_OP_DIV, bin(ctx, TPU_OP_ADD, before, c(d - 1)), c(d));
  };
  tpu_value_t ta = first_tap(row0, p.d[0]), tb = first_tap(col0, p.d[1]);
  ta = bin(ctx, TPU_OP_MUL, ta, full(ctx.g, TPU_I64, shape_of(ctx.g, ta), static_cast<double>(p.k[1])));
  tpu_value_t tap = to_planes(ctx, convert(ctx.g, outer(ctx, TPU_OP_ADD, ta, tb), TPU_I32), p);
  // One strided slice per window tap, in PyTorch's scan order.
  for (int64_t a = 0; a < p.k[0]; a++) {
    for (int64_t b = 0; b < p.k[1]; b++) {
      int64_t start[3] = {0, a * p.d[0], b * p.d[1]};
      int64_t limit[3] = {p.planes, start[1] + (OH - 1) * p.s[0] + 1, start[2] + (OW - 1) * p.s[1] + 1};
      int64_t step[3] = {1, p.s[0], p.s[1]};
      tpu_value_t v = tpu_graph_slice(ctx.g, xp, start, limit, step);
      running_max_step(ctx, v, a * p.k[1] + b, &best, &tap);
    }
  }
  // h = row0 + (t / kW) * dH, w = col0 + (t % kW) * dW, index h * W + w
  tap = convert(ctx.g, tap, TPU_I64);
  auto c3 = [&](int64_t v) { return full(ctx.g, TPU_I64, o3, static_cast<double>(v)); };
  int64_t at_h[1] = {1}, at_w[1] = {2};
  tpu_value_t h = bin(ctx, TPU_OP_ADD, tpu_graph_broadcast_in_dim(ctx.g, row0, &o3, at_h),
                      bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_DIV, tap, c3(p.k[1])), c3(p.d[0])));
  tpu_value_t w = bin(ctx, TPU_OP_ADD, tpu_graph_broadcast_in_dim(ctx.g, col0, &o3, at_w),
                      bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_REM, tap, c3(p.k[1])), c3(p.d[1])));
  tpu_value_t idx = bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, h, c3(W)), w);
  tpu_shape_t out = ctx.out_shape(0);
  ctx.results = {tpu_graph_reshape(ctx.g, best, &out), tpu_graph_reshape(ctx.g, idx, &out)};
}

// The backward of a max pooling (grad_output argument 0, self argument 1): grad_output
// scatter-added into (P, H * W) at the saved indices (argument |indices|).
void scatter_at_max_indices(LowerCtx &ctx, size_t indices) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_shape_t self_shape = shape_of(ctx.g, ctx.v(1)), gs = shape_of(ctx.g, ctx.v(0));
  Pool p = pool_dims(self_shape, gs);
  int64_t L = p.out[0] * p.out[1], HW = p.in[0] * p.in[1];
  tpu_shape_t pl{2, {p.planes, L}}, pl1{3, {p.planes, L, 1}};
  tpu_value_t g = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(0), dt), &pl);
  tpu_value_t idx = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(indices), TPU_I64), &pl1);
  tpu_value_t plane = tpu_graph_iota(ctx.g, TPU_I64, &pl1, 0);
  tpu_value_t pair_[2] = {plane, idx};
  tpu_value_t where = tpu_graph_concatenate(ctx.g, pair_, 2, 2);  // (P, L, 2)
  tpu_scatter_attrs_t a{};
  a.num_update_window_dims = 0;
  a.num_inserted_window_dims = 2;
  a.inserted_window_dims[0] = 0;
  a.inserted_window_dims[1] = 1;
  a.num_scatter_dims = 2;
  a.scatter_dims_to_operand_dims[0] = 0;
  a.scatter_dims_to_operand_dims[1] = 1;
  a.index_vector_dim = 2;
  a.kind = TPU_SCATTER_ADD;
  a.check_bounds = true;
  tpu_shape_t flat{2, {p.planes, HW}};
  tpu_value_t r = tpu_graph_scatter(ctx.g, full(ctx.g, dt, flat, 0), where, g, &a);
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, r, &out)};
}

// max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
// dilation, ceil_mode, indices)
void max_pool2d_backward(LowerCtx &ctx) { scatter_at_max_indices(ctx, 7); }

// adaptive_max_pool2d_backward(grad_output, self, indices)
void adaptive_max_pool2d_backward(LowerCtx &ctx) { scatter_at_max_indices(ctx, 2); }

// adaptive_max_pool2d(self, output_size) -> (values, indices): window i of an axis of size
// H spans [floor(i H / OH), ceil((i + 1) H / OH)). Its taps are gathered at start + a for a
// below the longest window, the ones past a window's end masked to -inf; the running max
// keeps max_pool2d's order and NaN rule, starting from the window's first element.
void adaptive_max_pool2d(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_dtype_t dt = dtype_of(ctx.g, x);
  if (!tpu_dtype_is_float(dt)) throw Unsupported("adaptive_max_pool2d of integers");
  Pool p = pool_dims(shape_of(ctx.g, x), ctx.out_shape(0));
  if (p.out[0] == 0 || p.out[1] == 0 || p.planes == 0) throw Unsupported("empty adaptive pooling");
  x = planes3(ctx, x, p, p.in[0], p.in[1]);
  int64_t longest[2];
  tpu_value_t start[2], len[2];
  for (int i = 0; i < 2; i++) {
    longest[i] = 0;
    for (int64_t o = 0; o < p.out[i]; o++) {
      const int64_t first = (o * p.in[i]) / p.out[i], end = ((o + 1) * p.in[i] + p.out[i] - 1) / p.out[i];
      longest[i] = std::max(longest[i], end - first);
    }
    // the same start = floor(o H / OH) and length per window, from an iota (exact in i64)
    tpu_shape_t s{1, {p.out[i]}};
    auto c = [&](int64_t v) { return full(ctx.g, TPU_I64, s, static_cast<double>(v)); };
    tpu_value_t o = tpu_graph_iota(ctx.g, TPU_I64, &s, 0);
    start[i] = bin(ctx, TPU_OP_DIV, bin(ctx, TPU_OP_MUL, o, c(p.in[i])), c(p.out[i]));
    tpu_value_t end = bin(ctx, TPU_OP_DIV, bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_ADD, o, c(1)), c(p.in[i])),
                                                 c(p.out[i] - 1)), c(p.out[i]));
    len[i] = bin(ctx, TPU_OP_SUB, end, start[i]);
  }
  // tap k of every window along axis i: its input index start + k (clamped into the input)
  // and whether the window reaches it (k < length)
  auto window_tap = [&](int i, int64_t k, tpu_value_t *index, tpu_value_t *inside) {
    tpu_shape_t s = shape_of(ctx.g, start[i]);
    tpu_value_t kk = full(ctx.g, TPU_I64, s, static_cast<double>(k));
    *index = bin(ctx, TPU_OP_MIN, bin(ctx, TPU_OP_ADD, start[i], kk), full(ctx.g, TPU_I64, s, static_cast<double>(p.in[i] - 1)));
    *inside = tpu_graph_compare(ctx.g, TPU_CMP_LT, kk, len[i]);
  };
  tpu_shape_t o3{3, {p.planes, p.out[0], p.out[1]}};
  tpu_value_t ninf = full(ctx.g, dt, o3, -std::numeric_limits<double>::infinity());
  tpu_value_t best = ninf;
  tpu_value_t tap = full(ctx.g, TPU_I32, o3, 0);
  for (int64_t a = 0; a < longest[0]; a++) {
    tpu_value_t rows, row_ok;
    window_tap(0, a, &rows, &row_ok);
    tpu_value_t xr = gather_slices(ctx.g, x, 1, rows);  // (P, OH, W)
    for (int64_t b = 0; b < longest[1]; b++) {
      tpu_value_t cols, col_ok;
      window_tap(1, b, &cols, &col_ok);
      tpu_value_t v = gather_slices(ctx.g, xr, 2, cols);  // (P, OH, OW)
      v = tpu_graph_select(ctx.g, to_planes(ctx, outer(ctx, TPU_OP_AND, row_ok, col_ok), p), v, ninf);
      running_max_step(ctx, v, a * longest[1] + b, &best, &tap);
    }
  }
  // index (start_h + t / KW) * W + start_w + t % KW
  tap = convert(ctx.g, tap, TPU_I64);
  auto c3 = [&](int64_t v) { return full(ctx.g, TPU_I64, o3, static_cast<double>(v)); };
  int64_t at_h[1] = {1}, at_w[1] = {2};
  tpu_value_t h = bin(ctx, TPU_OP_ADD, tpu_graph_broadcast_in_dim(ctx.g, start[0], &o3, at_h),
                      bin(ctx, TPU_OP_DIV, tap, c3(longest[1])));
  tpu_value_t w = bin(ctx, TPU_OP_ADD, tpu_graph_broadcast_in_dim(ctx.g, start[1], &o3, at_w),
                      bin(ctx, TPU_OP_REM, tap, c3(longest[1])));
  tpu_value_t idx = bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, h, c3(p.in[1])), w);
  tpu_shape_t out = ctx.out_shape(0);
  ctx.results = {tpu_graph_reshape(ctx.g, best, &out), tpu_graph_reshape(ctx.g, idx, &out)};
}

// ---- average pooling -----------------------------------------------------------------------

// The (OH, OW) divisor of each window, in |dt|.
tpu_value_t avg_divisor(LowerCtx &ctx, const Pool &p, bool count_include_pad,
                        const c10::IValue &divisor_override, tpu_dtype_t dt) {
  tpu_shape_t o2{2, {p.out[0], p.out[1]}};
  if (!divisor_override.isNone()) return full(ctx.g, dt, o2, static_cast<double>(divisor_override.toInt()));
  tpu_value_t len[2];
  for (int i = 0; i < 2; i++) {
    tpu_shape_t s{1, {p.out[i]}};
    auto c = [&](double v) { return full(ctx.g, TPU_I64, s, v); };
    tpu_value_t start = affine(ctx, p.out[i], p.s[i], -p.p[i]);
    tpu_value_t end = bin(ctx, TPU_OP_MIN, bin(ctx, TPU_OP_ADD, start, c(static_cast<double>(p.k[i]))),
                          c(static_cast<double>(p.in[i] + p.p[i])));
    if (count_include_pad) {
      len[i] = bin(ctx, TPU_OP_SUB, end, start);
    } else {
      len[i] = bin(ctx, TPU_OP_SUB, bin(ctx, TPU_OP_MIN, end, c(static_cast<double>(p.in[i]))),
                   bin(ctx, TPU_OP_MAX, start, c(0)));
    }
  }
  return convert(ctx.g, outer(ctx, TPU_OP_MUL, len[0], len[1]), dt);
}

// avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override)
void avg_pool2d(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  Pool p = pool_dims(shape_of(ctx.g, x), ctx.out_shape());
  window_args(ctx, 1, false, p);
  x = planes3(ctx, x, p, p.in[0], p.in[1]);
  tpu_reduce_window_attrs_t a{};
  a.kind = TPU_REDUCE_SUM;
  a.window[0] = a.stride[0] = a.dilation[0] = 1;
  for (int i = 0; i < 2; i++) {
    a.window[1 + i] = p.k[i];
    a.stride[1 + i] = p.s[i];
    a.dilation[1 + i] = 1;
    a.pad_lo[1 + i] = p.p[i];
    int64_t need = (p.out[i] - 1) * p.s[i] + p.k[i] - p.in[i] - p.p[i];
    a.pad_hi[1 + i] = need > p.p[i] ? need : p.p[i];
  }
  tpu_value_t sum = tpu_graph_reduce_window(ctx.g, x, &a);
  tpu_shape_t ss = shape_of(ctx.g, sum);
  if (ss.dims[1] != p.out[0] || ss.dims[2] != p.out[1]) {
    int64_t start[3] = {0, 0, 0}, limit[3] = {p.planes, p.out[0], p.out[1]}, step[3] = {1, 1, 1};
    sum = tpu_graph_slice(ctx.g, sum, start, limit, step);
  }
  tpu_value_t div = to_planes(ctx, avg_divisor(ctx, p, ctx.arg(5).toBool(), ctx.arg(6), dt), p);
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, bin(ctx, TPU_OP_DIV, sum, div), &out)};
}

// grad (P, OH, OW) of a window sum (windows k, stride s, padding p) -> (P, H, W).
tpu_value_t window_sum_transpose(LowerCtx &ctx, tpu_value_t g, const Pool &p) {
  tpu_dtype_t dt = dtype_of(ctx.g, g);
  int64_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0}, interior[3] = {0, 0, 0};
  for (int i = 0; i < 2; i++) {
    lo[1 + i] = p.k[i] - 1;
    int64_t need = p.p[i] + p.in[i] - (p.out[i] - 1) * p.s[i] - 1;
    hi[1 + i] = need > 0 ? need : 0;
    interior[1 + i] = p.s[i] - 1;
  }
  tpu_value_t buf = tpu_graph_pad(ctx.g, g, scalar_const(ctx.g, dt, 0), lo, hi, interior);
  tpu_reduce_window_attrs_t a{};
  a.kind = TPU_REDUCE_SUM;
  for (int d = 0; d < 3; d++) a.window[d] = a.stride[d] = a.dilation[d] = 1;
  a.window[1] = p.k[0];
  a.window[2] = p.k[1];
  tpu_value_t r = tpu_graph_reduce_window(ctx.g, buf, &a);  // r[j] = grad of padded row j
  int64_t start[3] = {0, p.p[0], p.p[1]};
  int64_t limit[3] = {p.planes, p.p[0] + p.in[0], p.p[1] + p.in[1]}, step[3] = {1, 1, 1};
  return tpu_graph_slice(ctx.g, r, start, limit, step);
}

// avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
// count_include_pad, divisor_override)
void avg_pool2d_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = convert(ctx.g, ctx.v(0), dt);
  Pool p = pool_dims(shape_of(ctx.g, ctx.v(1)), shape_of(ctx.g, g));
  window_args(ctx, 2, false, p);
  g = planes3(ctx, g, p, p.out[0], p.out[1]);
  tpu_value_t div = to_planes(ctx, avg_divisor(ctx, p, ctx.arg(6).toBool(), ctx.arg(7), dt), p);
  tpu_value_t r = window_sum_transpose(ctx, bin(ctx, TPU_OP_DIV, g, div), p);
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, r, &out)};
}

// ---- adaptive average pooling ------------------------------------------------------------------

// (out, in) averaging matrix: row i averages [floor(i in / out), ceil((i + 1) in / out)).
tpu_value_t adaptive_matrix(LowerCtx &ctx, int64_t out, int64_t in, tpu_dtype_t dt) {
  tpu_shape_t s{2, {out, in}};
  auto c = [&](double v) { return full(ctx.g, TPU_I64, s, v); };
  tpu_value_t i = tpu_graph_iota(ctx.g, TPU_I64, &s, 0), j = tpu_graph_iota(ctx.g, TPU_I64, &s, 1);
  tpu_value_t start = bin(ctx, TPU_OP_DIV, bin(ctx, TPU_OP_MUL, i, c(static_cast<double>(in))), c(static_cast<double>(out)));
  tpu_value_t end = bin(ctx, TPU_OP_DIV,
                        bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_ADD, i, c(1)), c(static_cast<double>(in))),
                            c(static_cast<double>(out - 1))),
                        c(static_cast<double>(out)));
  tpu_value_t inside = bin(ctx, TPU_OP_AND, tpu_graph_compare(ctx.g, TPU_CMP_GE, j, start),
                           tpu_graph_compare(ctx.g, TPU_CMP_LT, j, end));
  tpu_value_t w = bin(ctx, TPU_OP_DIV, full(ctx.g, dt, s, 1), convert(ctx.g, bin(ctx, TPU_OP_SUB, end, start), dt));
  return tpu_graph_select(ctx.g, inside, w, full(ctx.g, dt, s, 0));
}

// (P, A, B) x (M, A or B): contracts lhs dim |ld| with rhs dim |rd|, at HIGHEST precision.
tpu_value_t contract(LowerCtx &ctx, tpu_value_t lhs, tpu_value_t rhs, int ld, int rd) {
  tpu_dot_attrs_t a{};
  a.num_contract = 1;
  a.lhs_contract[0] = ld;
  a.rhs_contract[0] = rd;
  a.precision = TPU_PRECISION_HIGHEST;
  return tpu_graph_dot_general(ctx.g, lhs, rhs, &a, dtype_of(ctx.g, lhs));
}

bool divisible(const Pool &p) { return p.in[0] % p.out[0] == 0 && p.in[1] % p.out[1] == 0; }

// _adaptive_avg_pool2d(self, output_size)
void adaptive_avg_pool2d(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  Pool p = pool_dims(shape_of(ctx.g, x), ctx.out_shape());
  if (p.out[0] == 0 || p.out[1] == 0) throw Unsupported("empty adaptive pooling");
  x = planes3(ctx, x, p, p.in[0], p.in[1]);
  tpu_value_t y;
  if (divisible(p)) {
    tpu_reduce_window_attrs_t a{};
    a.kind = TPU_REDUCE_SUM;
    a.window[0] = a.stride[0] = a.dilation[0] = 1;
    for (int i = 0; i < 2; i++) {
      a.window[1 + i] = a.stride[1 + i] = p.in[i] / p.out[i];
      a.dilation[1 + i] = 1;
    }
    y = tpu_graph_reduce_window(ctx.g, x, &a);
    tpu_shape_t ys = shape_of(ctx.g, y);
    y = bin(ctx, TPU_OP_DIV, y, full(ctx.g, dt, ys, static_cast<double>(a.window[1] * a.window[2])));
  } else {
    tpu_value_t ah = adaptive_matrix(ctx, p.out[0], p.in[0], dt);
    tpu_value_t aw = adaptive_matrix(ctx, p.out[1], p.in[1], dt);
    y = contract(ctx, x, ah, 1, 1);  // (P, W, OH)
    y = contract(ctx, y, aw, 1, 1);  // (P, OH, OW)
  }
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, y, &out)};
}

// _adaptive_avg_pool2d_backward(grad_output, self)
void adaptive_avg_pool2d_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = convert(ctx.g, ctx.v(0), dt);
  Pool p = pool_dims(shape_of(ctx.g, ctx.v(1)), shape_of(ctx.g, g));
  if (p.out[0] == 0 || p.out[1] == 0) throw Unsupported("empty adaptive pooling");
  g = planes3(ctx, g, p, p.out[0], p.out[1]);
  tpu_value_t r;
  if (divisible(p)) {
    int64_t kh = p.in[0] / p.out[0], kw = p.in[1] / p.out[1];
    g = bin(ctx, TPU_OP_DIV, g, full(ctx.g, dt, shape_of(ctx.g, g), static_cast<double>(kh * kw)));
    tpu_shape_t s5{5, {p.planes, p.out[0], kh, p.out[1], kw}};
    int64_t dims[3] = {0, 1, 3};
    r = tpu_graph_broadcast_in_dim(ctx.g, g, &s5, dims);
    tpu_shape_t s3{3, {p.planes, p.in[0], p.in[1]}};
    r = tpu_graph_reshape(ctx.g, r, &s3);
  } else {
    tpu_value_t ah = adaptive_matrix(ctx, p.out[0], p.in[0], dt);
    tpu_value_t aw = adaptive_matrix(ctx, p.out[1], p.in[1], dt);
    r = contract(ctx, g, ah, 1, 0);  // (P, OW, H)
    r = contract(ctx, r, aw, 1, 0);  // (P, H, W)
  }
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, r, &out)};
}

LoweringRegistrar registrar({
    {"max_pool2d_with_indices", max_pool2d},
    {"max_pool2d_with_indices.out", max_pool2d},
    {"max_pool2d_with_indices_backward", max_pool2d_backward},
    {"max_pool2d_with_indices_backward.grad_input", max_pool2d_backward},
    {"avg_pool2d", avg_pool2d},
    {"avg_pool2d.out", avg_pool2d},
    {"avg_pool2d_backward", avg_pool2d_backward},
    {"avg_pool2d_backward.grad_input", avg_pool2d_backward},
    {"_adaptive_avg_pool2d", adaptive_avg_pool2d},
    {"_adaptive_avg_pool2d.out", adaptive_avg_pool2d},
    {"_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward},
    {"_adaptive_avg_pool2d_backward.out", adaptive_avg_pool2d_backward},
    {"adaptive_max_pool2d", adaptive_max_pool2d},
    {"adaptive_max_pool2d.out", adaptive_max_pool2d},
    {"adaptive_max_pool2d_backward", adaptive_max_pool2d_backward},
    {"adaptive_max_pool2d_backward.grad_input", adaptive_max_pool2d_backward},
});

}  // namespace
}  // namespace torchtpu
