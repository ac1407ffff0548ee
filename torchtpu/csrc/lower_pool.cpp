// lower_pool.cpp: lowerings of 2-D and 3-D pooling forward and backward: max pooling (with
// PyTorch's flat h * W + w and d * H * W + h * W + w indices), average pooling (ceil_mode,
// count_include_pad, divisor_override), adaptive max and average pooling, and max unpooling.
//
// Inputs are (N, C, [D,] H, W) or (C, [D,] H, W); the leading dims are folded into one
// plane dim P, so every graph works on (P, spatial...) with n = 2 or 3 spatial dims. Sums
// and averages of bf16/f16 are computed in f32 and rounded once by the engine.
//
//   max pooling       one strided slice of the -inf padded input per window tap, a
//                     running (value, tap) max in PyTorch's scan order: the first
//                     maximum wins, the last NaN wins (as on CPU), an all -inf window
//                     keeps its first in-bounds element
//   max pooling bwd   scatter-add of grad_output into (P, D * H * W) at the saved indices
//   max unpooling     the same scatter, writing the values into zeros
//   avg pooling       reduce_window SUM / a divisor computed from iotas
//   avg pooling bwd   grad / divisor, dilated by the stride (interior padding) and summed
//                     over each window: the transpose of the forward window sum
//   adaptive max      the same running max over each window's taps, gathered from
//                     per-window starts, one spatial dim at a time; backward as max pooling's
//   adaptive avg      windows [floor(i H / OH), ceil((i + 1) H / OH)): a reduce_window when
//                     every input size is a multiple of its output size, else one product
//                     per spatial dim with its (OH, H) averaging matrix at HIGHEST precision
//                     (about f32)
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "native.h"

namespace torchtpu {
namespace {

constexpr int kMaxSpatial = 3;

struct Pool {
  int n;                            // spatial dims: 2 or 3
  int64_t k[kMaxSpatial], s[kMaxSpatial], p[kMaxSpatial], d[kMaxSpatial];
  int64_t in[kMaxSpatial], out[kMaxSpatial];  // ([D,] H, W) and ([OD,] OH, OW)
  int64_t planes;                   // product of the leading dims
};

// An int[n] argument: empty (or None) -> |fill|, one value -> repeated.
void ints(const c10::IValue &v, int n, int64_t out[kMaxSpatial], int64_t fill) {
  std::vector<int64_t> l = v.isNone() ? std::vector<int64_t>{} : v.toIntVector();
  for (int i = 0; i < n; i++) out[i] = l.empty() ? fill : l.size() == 1 ? l[0] : l[i];
}

// |self_shape| (.., [D,] H, W), |out_shape| (.., [OD,] OH, OW), n spatial dims.
Pool pool_dims(const tpu_shape_t &self_shape, const tpu_shape_t &out_shape, int n) {
  if (self_shape.rank != n + 1 && self_shape.rank != n + 2) throw Unsupported("pooling input rank");
  Pool p{};
  p.n = n;
  p.planes = 1;
  for (int d = 0; d < self_shape.rank - n; d++) p.planes *= self_shape.dims[d];
  for (int i = 0; i < n; i++) {
    p.in[i] = self_shape.dims[self_shape.rank - n + i];
    p.out[i] = out_shape.dims[out_shape.rank - n + i];
  }
  return p;
}

// kernel_size, stride (empty: = kernel), padding, [dilation] from argument |at|.
void window_args(const LowerCtx &ctx, size_t at, bool has_dilation, Pool &p) {
  ints(ctx.arg(at), p.n, p.k, 1);
  ints(ctx.arg(at + 1), p.n, p.s, 0);
  for (int i = 0; i < p.n; i++) {
    if (p.s[i] == 0) p.s[i] = p.k[i];
  }
  ints(ctx.arg(at + 2), p.n, p.p, 0);
  if (has_dilation) {
    ints(ctx.arg(at + 3), p.n, p.d, 1);
  } else {
    std::fill(p.d, p.d + p.n, 1);
  }
}

// (P, sizes[0], .., sizes[n - 1])
tpu_shape_t planes_shape(const Pool &p, const int64_t *sizes) {
  tpu_shape_t s{p.n + 1, {p.planes}};
  std::copy(sizes, sizes + p.n, s.dims + 1);
  return s;
}

tpu_value_t to_planes_shape(LowerCtx &ctx, tpu_value_t x, const Pool &p, const int64_t *sizes) {
  tpu_shape_t s = planes_shape(p, sizes);
  return tpu_graph_reshape(ctx.g, x, &s);
}

// The number of elements of |v[0..n)|.
int64_t product(const int64_t *v, int n) {
  int64_t r = 1;
  for (int i = 0; i < n; i++) r *= v[i];
  return r;
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

// (O0) x .. x (On-1) -> (O0, .., On-1): one vector per dim, combined with |op|.
tpu_value_t outer(LowerCtx &ctx, tpu_op_t op, const tpu_value_t *v, int n) {
  tpu_shape_t s{n, {}};
  for (int i = 0; i < n; i++) s.dims[i] = shape_of(ctx.g, v[i]).dims[0];
  tpu_value_t r = TPU_NO_VALUE;
  for (int i = 0; i < n; i++) {
    int64_t at[1] = {i};
    tpu_value_t b = tpu_graph_broadcast_in_dim(ctx.g, v[i], &s, at);
    r = i == 0 ? b : bin(ctx, op, r, b);
  }
  return r;
}

// (O...) -> (P, O...)
tpu_value_t to_planes(LowerCtx &ctx, tpu_value_t v, const Pool &p) {
  tpu_shape_t vs = shape_of(ctx.g, v);
  tpu_shape_t s = planes_shape(p, vs.dims);
  int64_t dims[kMaxSpatial] = {1, 2, 3};
  return tpu_graph_broadcast_in_dim(ctx.g, v, &s, dims);
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

// The flat input index (P, O...) i64 of each window's winning tap |tap| (P, O...) i32: tap
// t = sum over dims of a_i * (taps[i + 1] * .. * taps[n - 1]) is at input position
// start[i] + a_i * step[i] along dim i (start (O_i) i64), flattened row-major over p.in.
tpu_value_t flat_index(LowerCtx &ctx, tpu_value_t tap, const tpu_value_t *start, const int64_t *taps,
                       const int64_t *step, const Pool &p) {
  tap = convert(ctx.g, tap, TPU_I64);
  tpu_shape_t os = planes_shape(p, p.out);
  auto c = [&](int64_t v) { return full(ctx.g, TPU_I64, os, static_cast<double>(v)); };
  tpu_value_t idx = c(0);
  for (int i = 0; i < p.n; i++) {
    int64_t at[1] = {1 + i};
    tpu_value_t a = bin(ctx, TPU_OP_REM, bin(ctx, TPU_OP_DIV, tap, c(product(taps + i + 1, p.n - i - 1))), c(taps[i]));
    tpu_value_t pos = bin(ctx, TPU_OP_ADD, tpu_graph_broadcast_in_dim(ctx.g, start[i], &os, at),
                          bin(ctx, TPU_OP_MUL, a, c(step[i])));
    idx = bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, idx, c(p.in[i])), pos);
  }
  return idx;
}

// max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
template <int N>
void max_pool(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_dtype_t dt = dtype_of(ctx.g, x);
  if (!tpu_dtype_is_float(dt)) throw Unsupported("max pooling of integers");
  Pool p = pool_dims(shape_of(ctx.g, x), ctx.out_shape(0), N);
  window_args(ctx, 1, true, p);
  x = to_planes_shape(ctx, x, p, p.in);
  // pad with -inf so that every strided slice below stays in range
  int64_t lo[N + 1] = {0}, hi[N + 1] = {0}, interior[N + 1] = {0};
  for (int i = 0; i < N; i++) {
    lo[1 + i] = p.p[i];
    int64_t need = (p.out[i] - 1) * p.s[i] + (p.k[i] - 1) * p.d[i] + 1 - p.in[i] - p.p[i];
    hi[1 + i] = need > 0 ? need : 0;
  }
  tpu_value_t ninf = scalar_const(ctx.g, dt, -std::numeric_limits<double>::infinity());
  tpu_value_t xp = tpu_graph_pad(ctx.g, x, ninf, lo, hi, interior);
  tpu_shape_t os = planes_shape(p, p.out);
  tpu_value_t best = full(ctx.g, dt, os, -std::numeric_limits<double>::infinity());
  // Per dim: the input position of each window's first tap, o * s - p (O), and its first
  // in-bounds tap ceil(max(-start, 0) / d) scaled to its place in the flat tap number. The
  // winning tap (i32) starts there, as PyTorch's CPU kernel does (and stays there when
  // every tap is -inf).
  tpu_value_t start[N], first[N];
  for (int i = 0; i < N; i++) {
    start[i] = affine(ctx, p.out[i], p.s[i], -p.p[i]);
    tpu_shape_t vs = shape_of(ctx.g, start[i]);
    auto c = [&](int64_t v) { return full(ctx.g, TPU_I64, vs, static_cast<double>(v)); };
    tpu_value_t before = bin(ctx, TPU_OP_MAX, tpu_graph_unary(ctx.g, TPU_OP_NEG, start[i]), c(0));
    first[i] = bin(ctx, TPU_OP_DIV, bin(ctx, TPU_OP_ADD, before, c(p.d[i] - 1)), c(p.d[i]));
    first[i] = bin(ctx, TPU_OP_MUL, first[i], c(product(p.k + i + 1, N - i - 1)));
  }
  tpu_value_t tap = to_planes(ctx, convert(ctx.g, outer(ctx, TPU_OP_ADD, first, N), TPU_I32), p);
  // One strided slice per window tap, in PyTorch's scan order (last dim fastest).
  const int64_t taps = product(p.k, N);
  for (int64_t t = 0; t < taps; t++) {
    int64_t begin[N + 1] = {0}, limit[N + 1] = {p.planes}, step[N + 1] = {1};
    for (int i = 0; i < N; i++) {
      const int64_t a = (t / product(p.k + i + 1, N - i - 1)) % p.k[i];
      begin[1 + i] = a * p.d[i];
      limit[1 + i] = begin[1 + i] + (p.out[i] - 1) * p.s[i] + 1;
      step[1 + i] = p.s[i];
    }
    running_max_step(ctx, tpu_graph_slice(ctx.g, xp, begin, limit, step), t, &best, &tap);
  }
  tpu_shape_t out = ctx.out_shape(0);
  tpu_value_t idx = flat_index(ctx, tap, start, p.k, p.d, p);
  ctx.results = {tpu_graph_reshape(ctx.g, best, &out), tpu_graph_reshape(ctx.g, idx, &out)};
}

// (P, M) |base| with |values| (P, L) written (REPLACE) or added (ADD) at positions |idx|
// (P, L) of their plane; out-of-range indices are errors.
tpu_value_t scatter_in_planes(LowerCtx &ctx, tpu_value_t base, tpu_value_t values, tpu_value_t idx,
                              tpu_scatter_kind_t kind) {
  tpu_shape_t vs = shape_of(ctx.g, values);
  tpu_shape_t pl1{3, {vs.dims[0], vs.dims[1], 1}};
  tpu_value_t pair_[2] = {tpu_graph_iota(ctx.g, TPU_I64, &pl1, 0), tpu_graph_reshape(ctx.g, convert(ctx.g, idx, TPU_I64), &pl1)};
  tpu_value_t where = tpu_graph_concatenate(ctx.g, pair_, 2, 2);  // (P, L, 2): (plane, index)
  tpu_scatter_attrs_t a{};
  a.num_update_window_dims = 0;
  a.num_inserted_window_dims = 2;
  a.inserted_window_dims[0] = 0;
  a.inserted_window_dims[1] = 1;
  a.num_scatter_dims = 2;
  a.scatter_dims_to_operand_dims[0] = 0;
  a.scatter_dims_to_operand_dims[1] = 1;
  a.index_vector_dim = 2;
  a.kind = kind;
  a.check_bounds = true;
  return tpu_graph_scatter(ctx.g, base, where, values, &a);
}

// The backward of a max pooling over N dims (grad_output argument 0, self argument 1):
// grad_output scatter-added into (P, D * H * W) at the saved indices (argument |indices|).
template <int N, size_t indices>
void scatter_at_max_indices(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  Pool p = pool_dims(shape_of(ctx.g, ctx.v(1)), shape_of(ctx.g, ctx.v(0)), N);
  tpu_shape_t pl{2, {p.planes, product(p.out, N)}}, flat{2, {p.planes, product(p.in, N)}};
  tpu_value_t g = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(0), dt), &pl);
  tpu_value_t idx = tpu_graph_reshape(ctx.g, ctx.v(indices), &pl);
  tpu_value_t r = scatter_in_planes(ctx, full(ctx.g, dt, flat, 0), g, idx, TPU_SCATTER_ADD);
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, r, &out)};
}

// max_unpool2d(self, indices, output_size), max_unpool3d(self, indices, output_size, stride,
// padding): self's values written at their flat indices into zeros of (P, [OD *] OH * OW),
// in order, so that the last write wins where indices repeat (as on CPU).
template <int N>
void max_unpool(LowerCtx &ctx) {
  tpu_dtype_t dt = ctx.out_dtype();
  tpu_shape_t out = ctx.out_shape();
  tpu_shape_t self_shape = shape_of(ctx.g, ctx.v(0));
  if (numel(self_shape) == 0 || numel(out) == 0) {
    ctx.results = {full(ctx.g, dt, out, 0)};
    return;
  }
  Pool p = pool_dims(out, self_shape, N);  // in: the unpooled sizes, out: self's
  tpu_shape_t pl{2, {p.planes, product(p.out, N)}}, flat{2, {p.planes, product(p.in, N)}};
  tpu_value_t v = tpu_graph_reshape(ctx.g, ctx.v(0), &pl);
  tpu_value_t idx = tpu_graph_reshape(ctx.g, ctx.v(1), &pl);
  tpu_value_t r = scatter_in_planes(ctx, full(ctx.g, dt, flat, 0), v, idx, TPU_SCATTER_REPLACE);
  ctx.results = {tpu_graph_reshape(ctx.g, r, &out)};
}

// adaptive_max_pool{2,3}d(self, output_size) -> (values, indices): window o of a dim of
// size H spans [floor(o H / OH), ceil((o + 1) H / OH)). Its taps are gathered at start + a
// for a below the longest window, one spatial dim at a time, the ones past a window's end
// masked to -inf; the running max keeps max pooling's order and NaN rule, starting from
// the window's first element.
struct AdaptiveMax {
  LowerCtx &ctx;
  const Pool &p;
  int64_t longest[kMaxSpatial] = {0, 0, 0};       // taps of the longest window, per dim
  tpu_value_t start[kMaxSpatial], len[kMaxSpatial];  // (O_i) i64 per window
  tpu_value_t inside[kMaxSpatial];  // (O_i) bool: the visited tap of dim i is in its window
  tpu_value_t ninf, best, tap;      // (P, O...)

  AdaptiveMax(LowerCtx &c, const Pool &pool, tpu_dtype_t dt) : ctx(c), p(pool) {
    for (int i = 0; i < p.n; i++) {
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
    tpu_shape_t os = planes_shape(p, p.out);
    ninf = best = full(ctx.g, dt, os, -std::numeric_limits<double>::infinity());
    tap = full(ctx.g, TPU_I32, os, 0);
  }

  // Tap a of every window along dim i: its input index start + a (clamped into the
  // input), and in inside[i] whether the window reaches it (a < length).
  tpu_value_t window_tap(int i, int64_t a) {
    tpu_shape_t s = shape_of(ctx.g, start[i]);
    tpu_value_t aa = full(ctx.g, TPU_I64, s, static_cast<double>(a));
    inside[i] = tpu_graph_compare(ctx.g, TPU_CMP_LT, aa, len[i]);
    return bin(ctx, TPU_OP_MIN, bin(ctx, TPU_OP_ADD, start[i], aa), full(ctx.g, TPU_I64, s, static_cast<double>(p.in[i] - 1)));
  }

  // Runs the max over the taps of dims i.. of |xv| (P, O_0, .., O_i-1, in_i, ..), whose
  // taps along the dims before i make the flat tap number |t| so far.
  void visit(int i, tpu_value_t xv, int64_t t) {
    if (i == p.n) {
      tpu_value_t ok = to_planes(ctx, outer(ctx, TPU_OP_AND, inside, p.n), p);
      running_max_step(ctx, tpu_graph_select(ctx.g, ok, xv, ninf), t, &best, &tap);
      return;
    }
    for (int64_t a = 0; a < longest[i]; a++) {
      visit(i + 1, gather_slices(ctx.g, xv, 1 + i, window_tap(i, a)), t * longest[i] + a);
    }
  }
};

template <int N>
void adaptive_max_pool(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_dtype_t dt = dtype_of(ctx.g, x);
  if (!tpu_dtype_is_float(dt)) throw Unsupported("adaptive max pooling of integers");
  Pool p = pool_dims(shape_of(ctx.g, x), ctx.out_shape(0), N);
  if (product(p.out, N) == 0 || p.planes == 0) throw Unsupported("empty adaptive pooling");
  AdaptiveMax A(ctx, p, dt);
  A.visit(0, to_planes_shape(ctx, x, p, p.in), 0);
  const int64_t ones[kMaxSpatial] = {1, 1, 1};
  tpu_shape_t out = ctx.out_shape(0);
  tpu_value_t idx = flat_index(ctx, A.tap, A.start, A.longest, ones, p);
  ctx.results = {tpu_graph_reshape(ctx.g, A.best, &out), tpu_graph_reshape(ctx.g, idx, &out)};
}

// ---- average pooling -----------------------------------------------------------------------

// The (O...) divisor of each window, in |dt|.
tpu_value_t avg_divisor(LowerCtx &ctx, const Pool &p, bool count_include_pad,
                        const c10::IValue &divisor_override, tpu_dtype_t dt) {
  tpu_shape_t os{p.n, {}};
  std::copy(p.out, p.out + p.n, os.dims);
  if (!divisor_override.isNone()) return full(ctx.g, dt, os, static_cast<double>(divisor_override.toInt()));
  tpu_value_t len[kMaxSpatial];
  for (int i = 0; i < p.n; i++) {
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
  return convert(ctx.g, outer(ctx, TPU_OP_MUL, len, p.n), dt);
}

// A reduce_window SUM over the spatial dims of (P, ...) with |window| and |stride| per
// spatial dim (the plane dim is not windowed), no padding.
tpu_reduce_window_attrs_t window_sum(const Pool &p, const int64_t *window, const int64_t *stride) {
  tpu_reduce_window_attrs_t a{};
  a.kind = TPU_REDUCE_SUM;
  a.window[0] = a.stride[0] = a.dilation[0] = 1;
  for (int i = 0; i < p.n; i++) {
    a.window[1 + i] = window[i];
    a.stride[1 + i] = stride[i];
    a.dilation[1 + i] = 1;
  }
  return a;
}

// avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override)
template <int N>
void avg_pool(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  Pool p = pool_dims(shape_of(ctx.g, x), ctx.out_shape(), N);
  window_args(ctx, 1, false, p);
  x = to_planes_shape(ctx, x, p, p.in);
  tpu_reduce_window_attrs_t a = window_sum(p, p.k, p.s);
  for (int i = 0; i < N; i++) {
    a.pad_lo[1 + i] = p.p[i];
    int64_t need = (p.out[i] - 1) * p.s[i] + p.k[i] - p.in[i] - p.p[i];
    a.pad_hi[1 + i] = need > p.p[i] ? need : p.p[i];
  }
  tpu_value_t sum = tpu_graph_reduce_window(ctx.g, x, &a);  // (P, O...) or longer
  tpu_shape_t os = planes_shape(p, p.out);
  tpu_shape_t ss = shape_of(ctx.g, sum);
  if (!tpu_shape_equal(&ss, &os)) {
    int64_t begin[N + 1] = {0}, step[N + 1];
    std::fill(step, step + N + 1, 1);
    sum = tpu_graph_slice(ctx.g, sum, begin, os.dims, step);
  }
  tpu_value_t div = to_planes(ctx, avg_divisor(ctx, p, ctx.arg(5).toBool(), ctx.arg(6), dt), p);
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, bin(ctx, TPU_OP_DIV, sum, div), &out)};
}

// grad (P, O...) of a window sum (windows k, stride s, padding p) -> (P, in...).
tpu_value_t window_sum_transpose(LowerCtx &ctx, tpu_value_t g, const Pool &p) {
  tpu_dtype_t dt = dtype_of(ctx.g, g);
  int64_t lo[kMaxSpatial + 1] = {0}, hi[kMaxSpatial + 1] = {0}, interior[kMaxSpatial + 1] = {0};
  for (int i = 0; i < p.n; i++) {
    lo[1 + i] = p.k[i] - 1;
    int64_t need = p.p[i] + p.in[i] - (p.out[i] - 1) * p.s[i] - 1;
    hi[1 + i] = need > 0 ? need : 0;
    interior[1 + i] = p.s[i] - 1;
  }
  tpu_value_t buf = tpu_graph_pad(ctx.g, g, scalar_const(ctx.g, dt, 0), lo, hi, interior);
  const int64_t ones[kMaxSpatial] = {1, 1, 1};
  tpu_reduce_window_attrs_t a = window_sum(p, p.k, ones);
  tpu_value_t r = tpu_graph_reduce_window(ctx.g, buf, &a);  // r[j] = grad of padded position j
  int64_t begin[kMaxSpatial + 1] = {0}, limit[kMaxSpatial + 1] = {p.planes}, step[kMaxSpatial + 1] = {1, 1, 1, 1};
  for (int i = 0; i < p.n; i++) {
    begin[1 + i] = p.p[i];
    limit[1 + i] = p.p[i] + p.in[i];
  }
  return tpu_graph_slice(ctx.g, r, begin, limit, step);
}

// avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
// count_include_pad, divisor_override)
template <int N>
void avg_pool_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = convert(ctx.g, ctx.v(0), dt);
  Pool p = pool_dims(shape_of(ctx.g, ctx.v(1)), shape_of(ctx.g, g), N);
  window_args(ctx, 2, false, p);
  g = to_planes_shape(ctx, g, p, p.out);
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

// (P, A, ...) x (M, A or ...): contracts lhs dim 1 with rhs dim |rd| (the result's new dim
// goes last), at HIGHEST precision.
tpu_value_t contract(LowerCtx &ctx, tpu_value_t lhs, tpu_value_t rhs, int rd) {
  tpu_dot_attrs_t a{};
  a.num_contract = 1;
  a.lhs_contract[0] = 1;
  a.rhs_contract[0] = rd;
  a.precision = TPU_PRECISION_HIGHEST;
  return tpu_graph_dot_general(ctx.g, lhs, rhs, &a, dtype_of(ctx.g, lhs));
}

// (P, A_0, .., A_n-1) -> (P, B_0, .., B_n-1): one product per spatial dim with its
// averaging matrix (from (A_i) to (B_i); |backward|: its transpose); each product moves
// the new dim last, so after n of them the dims are in order again.
tpu_value_t adaptive_products(LowerCtx &ctx, tpu_value_t v, const Pool &p, bool backward, tpu_dtype_t dt) {
  for (int i = 0; i < p.n; i++) {
    v = contract(ctx, v, adaptive_matrix(ctx, p.out[i], p.in[i], dt), backward ? 0 : 1);
  }
  return v;
}

bool divisible(const Pool &p) {
  for (int i = 0; i < p.n; i++) {
    if (p.in[i] % p.out[i] != 0) return false;
  }
  return true;
}

// _adaptive_avg_pool{2,3}d(self, output_size)
template <int N>
void adaptive_avg_pool(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  Pool p = pool_dims(shape_of(ctx.g, x), ctx.out_shape(), N);
  if (product(p.out, N) == 0) throw Unsupported("empty adaptive pooling");
  x = to_planes_shape(ctx, x, p, p.in);
  tpu_value_t y;
  if (divisible(p)) {
    int64_t k[kMaxSpatial];
    for (int i = 0; i < N; i++) k[i] = p.in[i] / p.out[i];
    tpu_reduce_window_attrs_t a = window_sum(p, k, k);
    y = tpu_graph_reduce_window(ctx.g, x, &a);
    y = bin(ctx, TPU_OP_DIV, y, full(ctx.g, dt, shape_of(ctx.g, y), static_cast<double>(product(k, N))));
  } else {
    y = adaptive_products(ctx, x, p, false, dt);
  }
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, y, &out)};
}

// _adaptive_avg_pool{2,3}d_backward(grad_output, self)
template <int N>
void adaptive_avg_pool_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = convert(ctx.g, ctx.v(0), dt);
  Pool p = pool_dims(shape_of(ctx.g, ctx.v(1)), shape_of(ctx.g, g), N);
  if (product(p.out, N) == 0) throw Unsupported("empty adaptive pooling");
  g = to_planes_shape(ctx, g, p, p.out);
  tpu_value_t r;
  if (divisible(p)) {
    // each gradient spread evenly over its window: (P, O_0, k_0, O_1, k_1, ..)
    tpu_shape_t wide{1 + 2 * N, {p.planes}};
    int64_t dims[1 + kMaxSpatial] = {0};
    int64_t k[kMaxSpatial];
    for (int i = 0; i < N; i++) {
      k[i] = p.in[i] / p.out[i];
      wide.dims[1 + 2 * i] = p.out[i];
      wide.dims[2 + 2 * i] = k[i];
      dims[1 + i] = 1 + 2 * i;
    }
    g = bin(ctx, TPU_OP_DIV, g, full(ctx.g, dt, shape_of(ctx.g, g), static_cast<double>(product(k, N))));
    r = tpu_graph_broadcast_in_dim(ctx.g, g, &wide, dims);
  } else {
    r = adaptive_products(ctx, g, p, true, dt);
  }
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, r, &out)};
}

LoweringRegistrar registrar({
    {"max_pool2d_with_indices", max_pool<2>},
    {"max_pool2d_with_indices.out", max_pool<2>},
    {"max_pool2d_with_indices_backward", scatter_at_max_indices<2, 7>},
    {"max_pool2d_with_indices_backward.grad_input", scatter_at_max_indices<2, 7>},
    {"max_pool3d_with_indices", max_pool<3>},
    {"max_pool3d_with_indices.out", max_pool<3>},
    {"max_pool3d_with_indices_backward", scatter_at_max_indices<3, 7>},
    {"max_pool3d_with_indices_backward.grad_input", scatter_at_max_indices<3, 7>},
    {"avg_pool2d", avg_pool<2>},
    {"avg_pool2d.out", avg_pool<2>},
    {"avg_pool2d_backward", avg_pool_backward<2>},
    {"avg_pool2d_backward.grad_input", avg_pool_backward<2>},
    {"avg_pool3d", avg_pool<3>},
    {"avg_pool3d.out", avg_pool<3>},
    {"avg_pool3d_backward", avg_pool_backward<3>},
    {"avg_pool3d_backward.grad_input", avg_pool_backward<3>},
    {"_adaptive_avg_pool2d", adaptive_avg_pool<2>},
    {"_adaptive_avg_pool2d.out", adaptive_avg_pool<2>},
    {"_adaptive_avg_pool2d_backward", adaptive_avg_pool_backward<2>},
    {"_adaptive_avg_pool2d_backward.out", adaptive_avg_pool_backward<2>},
    {"_adaptive_avg_pool3d", adaptive_avg_pool<3>},
    {"_adaptive_avg_pool3d.out", adaptive_avg_pool<3>},
    {"_adaptive_avg_pool3d_backward", adaptive_avg_pool_backward<3>},
    {"_adaptive_avg_pool3d_backward.out", adaptive_avg_pool_backward<3>},
    {"adaptive_max_pool2d", adaptive_max_pool<2>},
    {"adaptive_max_pool2d.out", adaptive_max_pool<2>},
    {"adaptive_max_pool2d_backward", scatter_at_max_indices<2, 2>},
    {"adaptive_max_pool2d_backward.grad_input", scatter_at_max_indices<2, 2>},
    {"adaptive_max_pool3d", adaptive_max_pool<3>},
    {"adaptive_max_pool3d.out", adaptive_max_pool<3>},
    {"adaptive_max_pool3d_backward", scatter_at_max_indices<3, 2>},
    {"adaptive_max_pool3d_backward.grad_input", scatter_at_max_indices<3, 2>},
    {"max_unpool2d", max_unpool<2>},
    {"max_unpool2d.out", max_unpool<2>},
    {"max_unpool3d", max_unpool<3>},
    {"max_unpool3d.out", max_unpool<3>},
});

}  // namespace
}  // namespace torchtpu
