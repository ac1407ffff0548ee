// lower_distance.cpp: lowerings of torch.cdist's direct path (_cdist_forward, used for
// p != 2 and for small p = 2 problems; larger p = 2 problems take PyTorch's matmul form,
// which runs natively already), of F.pdist (_pdist_forward), and of their backwards.
//
//   x1 (B.., R1, M), x2 (B.., R2, M), batch dims broadcast
//   forward    diff (B.., R1, R2, M) = x1_i - x2_j, then the p-norm over M (vector_norm)
//   backward   grad_x1 (B.., R1, M) = sum over j of grad_ij * d||diff||_p / d x1_i, with the
//              CPU kernel's cases: 0 where the distance is 0, sign(diff) for p = 1, the
//              coordinates that reach the max for p = inf, diff |diff|^(p-2) / dist^(p-1)
//              otherwise (and 0 where diff = 0 for p < 1); all 0 for p = 0
//   pdist      self (N, M): the (N, N) distances, the K = N (N - 1) / 2 pairs i < j kept in
//              row-major order; its backward is cdist's of self against itself with the
//              gradient spread to a symmetric (N, N) matrix
// The CPU kernel takes float32 and float64 only; other dtypes run on the CPU fallback, which
// raises its error.
#include <ATen/core/Tensor.h>

#include <cmath>

#include "lower_ew.h"

namespace torchtpu {
namespace {

// |x| (b.., R, M) as (B.., R, 1, M) (|pair_dim| = rank - 2) or (B.., 1, R, M) (rank - 3),
// broadcast to |pairs| (B.., R1, R2, M)
tpu_value_t spread(tpu_graph_t *g, tpu_value_t x, const tpu_shape_t &pairs, int pair_dim) {
  tpu_shape_t rows = pairs;  // (B.., R, M) in the broadcast batch
  for (int d = pair_dim; d < pairs.rank - 1; d++) rows.dims[d] = pairs.dims[d + 1];
  rows.rank = pairs.rank - 1;
  tpu_shape_t one = pairs;
  one.dims[pair_dim] = 1;
  return broadcast_to(g, tpu_graph_reshape(g, broadcast_to(g, x, rows), &one), pairs);
}

// diff = x1_i - x2_j, shape (B.., R1, R2, M) for distances of |dist_shape| (B.., R1, R2), in |dt|
tpu_value_t pair_differences(tpu_graph_t *g, tpu_value_t x1, tpu_value_t x2, tpu_dtype_t dt,
                             const tpu_shape_t &dist_shape) {
  const tpu_shape_t s1 = shape_of(g, x1);
  tpu_shape_t pairs = dist_shape;
  pairs.rank = dist_shape.rank + 1;
  pairs.dims[dist_shape.rank] = s1.dims[s1.rank - 1];
  tpu_value_t a = spread(g, convert(g, x1, dt), pairs, pairs.rank - 2);
  tpu_value_t b = spread(g, convert(g, x2, dt), pairs, pairs.rank - 3);
  return tpu_graph_binary(g, TPU_OP_SUB, a, b);
}

tpu_dtype_t checked_dtype(const LowerCtx &ctx) {
  tpu_dtype_t dt = ctx.out_dtype();
  if (dt != TPU_F32 && dt != TPU_F64) throw Unsupported("cdist in this dtype");
  return dt;
}

// _cdist_forward(x1, x2, p, compute_mode) -> (B.., R1, R2)
void cdist_forward(LowerCtx &ctx) {
  tpu_dtype_t dt = checked_dtype(ctx);
  tpu_shape_t out = ctx.out_shape();
  tpu_value_t diff = pair_differences(ctx.g, ctx.v(0), ctx.v(1), dt, out);
  const int64_t last = out.rank;
  ctx.results = {vector_norm(ctx.g, diff, dt, ctx.arg(2).toDouble(), {last}, false)};
}

// d/d x1 of sum_ij grad_ij ||x1_i - x2_j||_p: grad and dist (B.., R1, R2), x1 (B.., R1, M),
// x2 (B.., R2, M) -> (B.., R1, M)
tpu_value_t distance_gradient(tpu_graph_t *g, tpu_dtype_t dt, double p, tpu_value_t grad, tpu_value_t x1,
                              tpu_value_t x2, tpu_value_t dist) {
  tpu_shape_t dist_shape = shape_of(g, dist);
  tpu_value_t diff = pair_differences(g, x1, x2, dt, dist_shape);
  tpu_shape_t pairs = shape_of(g, diff);
  Ew E{g, dt, pairs};
  tpu_shape_t with_m = dist_shape;  // (B.., R1, R2, 1)
  with_m.rank++;
  with_m.dims[dist_shape.rank] = 1;
  auto per_pair = [&](tpu_value_t v) {
    return broadcast_to(g, tpu_graph_reshape(g, convert(g, v, dt), &with_m), pairs);
  };
  grad = per_pair(grad);
  dist = per_pair(dist);
  tpu_value_t sign = E.un(TPU_OP_SIGN, diff), absdiff = E.un(TPU_OP_ABS, diff);
  tpu_value_t term;
  if (p == 0) {
    term = E.k(0);
  } else if (p == 1) {
    term = E.mul(grad, sign);
  } else if (std::isinf(p)) {
    term = E.sel(E.cmp(TPU_CMP_EQ, absdiff, dist), E.mul(grad, sign), E.k(0));
  } else {
    tpu_value_t scaled = E.div(E.mul(grad, E.op(TPU_OP_POW, absdiff, E.k(p - 1))), E.op(TPU_OP_POW, dist, E.k(p - 1)));
    term = E.mul(sign, scaled);
    if (p < 1) term = E.sel(E.cmp(TPU_CMP_EQ, diff, E.k(0)), E.k(0), term);
    term = E.sel(E.cmp(TPU_CMP_EQ, dist, E.k(0)), E.k(0), term);
  }
  const int64_t r2 = pairs.rank - 2;
  return reduce_dims(g, TPU_REDUCE_SUM, term, {r2}, false);
}

// _cdist_backward(grad, x1, x2, p, cdist) -> (B.., R1, M), the gradient for x1
void cdist_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = checked_dtype(ctx);
  ctx.results = {distance_gradient(ctx.g, dt, ctx.arg(3).toDouble(), ctx.v(0), ctx.v(1), ctx.v(2), ctx.v(4))};
}

// (N, N) i64: the position k of pair (min(i, j), max(i, j)) in pdist's row-major list of the
// K = N (N - 1) / 2 pairs i < j; |diagonal| on the diagonal and, unless |symmetric|, below it
tpu_value_t pair_positions(tpu_graph_t *g, int64_t n, bool symmetric, int64_t diagonal) {
  tpu_shape_t s{2, {n, n}};
  Ew E{g, TPU_I64, s};
  tpu_value_t i = tpu_graph_iota(g, TPU_I64, &s, 0), j = tpu_graph_iota(g, TPU_I64, &s, 1);
  tpu_value_t lo = E.op(TPU_OP_MIN, i, j), hi = E.op(TPU_OP_MAX, i, j);
  tpu_value_t row_start = E.div(E.mul(lo, E.sub(E.k(2 * n - 1), lo)), E.k(2));
  tpu_value_t k = E.add(row_start, E.sub(E.sub(hi, lo), E.k(1)));
  return E.sel(E.cmp(symmetric ? TPU_CMP_NE : TPU_CMP_LT, i, j), k, E.k(static_cast<double>(diagonal)));
}

// _pdist_forward(self (N, M), p) -> (K): the full (N, N) distances, the pairs i < j scattered
// to their positions (the others to a spare slot K, dropped)
void pdist_forward(LowerCtx &ctx) {
  tpu_dtype_t dt = checked_dtype(ctx);
  const int64_t n = shape_of(ctx.g, ctx.v(0)).dims[0], k = n * (n - 1) / 2;
  if (k == 0) throw Unsupported("pdist of fewer than 2 rows");
  tpu_shape_t square{2, {n, n}}, flat{1, {n * n}}, spare{1, {k + 1}};
  tpu_value_t x = ctx.v(0);
  tpu_value_t dist = vector_norm(ctx.g, pair_differences(ctx.g, x, x, dt, square), dt, ctx.arg(1).toDouble(), {2}, false);
  tpu_value_t at = tpu_graph_reshape(ctx.g, pair_positions(ctx.g, n, false, k), &flat);
  tpu_value_t all = scatter_slices(ctx.g, full(ctx.g, dt, spare, 0), 0, at, tpu_graph_reshape(ctx.g, dist, &flat), false);
  int64_t start = 0, limit = k, stride = 1;
  ctx.results = {tpu_graph_slice(ctx.g, all, &start, &limit, &stride)};
}

// _pdist_backward(grad (K), self (N, M), p, pdist (K)) -> (N, M): grad and distances spread
// to symmetric (N, N) matrices (0 on the diagonal), then cdist's gradient of self against itself
void pdist_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = checked_dtype(ctx);
  const int64_t n = shape_of(ctx.g, ctx.v(1)).dims[0], k = n * (n - 1) / 2;
  if (k == 0) throw Unsupported("pdist of fewer than 2 rows");
  tpu_shape_t square{2, {n, n}}, flat{1, {n * n}}, one{1, {1}};
  tpu_value_t at = tpu_graph_reshape(ctx.g, pair_positions(ctx.g, n, true, k), &flat);
  auto square_of = [&](tpu_value_t pairs) {  // (K) -> (N, N), 0 at the spare slot K
    tpu_value_t parts[2] = {convert(ctx.g, pairs, dt), full(ctx.g, dt, one, 0)};
    tpu_value_t padded = tpu_graph_concatenate(ctx.g, parts, 2, 0);
    return tpu_graph_reshape(ctx.g, gather_slices(ctx.g, padded, 0, at), &square);
  };
  ctx.results = {distance_gradient(ctx.g, dt, ctx.arg(2).toDouble(), square_of(ctx.v(0)), ctx.v(1), ctx.v(1),
                                   square_of(ctx.v(3)))};
}

LoweringRegistrar registrar({
    {"_cdist_forward", cdist_forward},
    {"_cdist_backward", cdist_backward},
    {"_pdist_forward", pdist_forward},
    {"_pdist_backward", pdist_backward},
});

}  // namespace
}  // namespace torchtpu
