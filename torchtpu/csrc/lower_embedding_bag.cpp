// lower_embedding_bag.cpp: nn.EmbeddingBag / F.embedding_bag natively: _embedding_bag and
// _embedding_bag_forward_only (mode sum, mean or max; per_sample_weights; include_last_offset;
// padding_idx), the weight gradient (_embedding_bag_backward, _embedding_bag_dense_backward)
// and the per_sample_weights gradient (_embedding_bag_per_sample_weights_backward).
//
// No data-dependent shapes: the bag of each index (offset2bag) is the prefix sum of the bag
// starts marked in an (N + 1) vector, so one graph serves all offsets of one length. Bags
// are scatters of the looked-up rows onto (B, D): ADD for sum/mean (in f32 for bf16/f16
// weights, in index order as the CPU kernel adds), MAX for max.
//
// The extra outputs have the shapes of PyTorch's meta kernel (the CUDA ones) and the values
// the CPU kernel gives for mean and max, which the backward reads: offset2bag (N), the bag
// of each index; bag_size (M = offsets' length), the non-padding indices per bag (0 for the
// last entry with include_last_offset); max_indices (B, D) in max mode, the weight row
// holding each maximum (the first one on ties, 0 for an empty bag), else (0). An empty bag
// is 0 in every mode.
//
// Out-of-range indices or offsets are IndexErrors at the next sync (bounds-checked
// gather/scatter, as in lower_index.cpp). scale_grad_by_freq and sparse gradients fall back.
#include <ATen/core/Tensor.h>

#include <limits>

#include "native.h"

namespace torchtpu {
namespace {

enum Mode { kSum = 0, kMean = 1, kMax = 2 };

tpu_value_t slice0(tpu_graph_t *g, tpu_value_t v, int64_t n) {  // v[:n] along dim 0
  tpu_shape_t s = shape_of(g, v);
  if (s.dims[0] == n) return v;
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], step[TPU_MAX_RANK];
  for (int d = 0; d < s.rank; d++) limit[d] = s.dims[d], step[d] = 1;
  limit[0] = n;
  return tpu_graph_slice(g, v, start, limit, step);
}

tpu_value_t flat_i64(tpu_graph_t *g, tpu_value_t v) {  // (numel) i64
  tpu_shape_t flat{1, {numel(shape_of(g, v))}};
  return tpu_graph_reshape(g, convert(g, v, TPU_I64), &flat);
}

// (n) -> (n, d): |v| repeated along a new last dim.
tpu_value_t per_row(tpu_graph_t *g, tpu_value_t v, int64_t d) {
  tpu_shape_t s = shape_of(g, v);
  tpu_shape_t wide{2, {s.dims[0], d}};
  int64_t dims[1] = {0};
  return tpu_graph_broadcast_in_dim(g, v, &wide, dims);
}

// The bag of each of |n| indices (n) i64 from the first |b| offsets: bag starts marked in
// an (n + 1) vector (an offset may be n: an empty last bag), prefix-summed, minus one.
tpu_value_t offset2bag(tpu_graph_t *g, tpu_value_t offsets, int64_t b, int64_t n) {
  tpu_value_t starts = slice0(g, flat_i64(g, offsets), b);  // (b)
  tpu_shape_t marks_shape{1, {n + 1}}, bs{1, {b}}, ns{1, {n}};
  tpu_value_t marks = scatter_slices(g, full(g, TPU_I64, marks_shape, 0), 0, starts,
                                     full(g, TPU_I64, bs, 1), TPU_SCATTER_ADD);
  tpu_value_t bag = slice0(g, tpu_graph_scan(g, TPU_REDUCE_SUM, marks, 0), n);
  return tpu_graph_binary(g, TPU_OP_SUB, bag, full(g, TPU_I64, ns, 1));
}

// (n) bool: the index is not padding_idx (all true for padding_idx < 0).
tpu_value_t not_padding(tpu_graph_t *g, tpu_value_t idx, int64_t padding_idx) {
  tpu_shape_t s = shape_of(g, idx);
  if (padding_idx < 0) return full(g, TPU_BOOL, s, 1);
  return tpu_graph_compare(g, TPU_CMP_NE, idx, full(g, TPU_I64, s, static_cast<double>(padding_idx)));
}

// (b, d) max of each bag and the weight row (idx value) holding it: the first index i whose
// row equals the bag's max (a MIN scatter of positions, n where none), looked up in idx.
void bag_max(tpu_graph_t *g, tpu_value_t rows, tpu_value_t idx, tpu_value_t bag, tpu_value_t keep,
             int64_t b, tpu_value_t *max, tpu_value_t *argmax) {
  tpu_shape_t rs = shape_of(g, rows);  // (n, d)
  int64_t n = rs.dims[0], d = rs.dims[1];
  tpu_dtype_t dt = dtype_of(g, rows);
  tpu_shape_t out{2, {b, d}};
  const double inf = std::numeric_limits<double>::infinity();
  tpu_value_t keep2 = per_row(g, keep, d);
  tpu_value_t upd = tpu_graph_select(g, keep2, rows, full(g, dt, rs, -inf));
  *max = scatter_slices(g, full(g, dt, out, -inf), 0, bag, upd, TPU_SCATTER_MAX);
  tpu_value_t at_max = tpu_graph_compare(g, TPU_CMP_EQ, rows, gather_slices(g, *max, 0, bag));
  at_max = tpu_graph_binary(g, TPU_OP_AND, at_max, keep2);
  tpu_value_t pos = tpu_graph_select(g, at_max, tpu_graph_iota(g, TPU_I64, &rs, 0), full(g, TPU_I64, rs, static_cast<double>(n)));
  tpu_value_t first = scatter_slices(g, full(g, TPU_I64, out, static_cast<double>(n)), 0, bag, pos, TPU_SCATTER_MIN);
  tpu_shape_t one{1, {1}}, flat{1, {b * d}};
  tpu_value_t parts[2] = {idx, full(g, TPU_I64, one, 0)};  // position n (no max) -> row 0
  tpu_value_t idx0 = tpu_graph_concatenate(g, parts, 2, 0);
  tpu_value_t rows_at = gather_slices(g, idx0, 0, tpu_graph_reshape(g, first, &flat));
  *argmax = tpu_graph_reshape(g, rows_at, &out);
}

// _embedding_bag / _embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq,
// mode, sparse, per_sample_weights, include_last_offset, padding_idx)
//   -> (output (B, D), offset2bag (N), bag_size (M), max_indices (B, D) or (0))
void embedding_bag(LowerCtx &ctx) {
  tpu_graph_t *g = ctx.g;
  if (shape_of(g, ctx.v(1)).rank != 1 || shape_of(g, ctx.v(2)).rank != 1) throw Unsupported("embedding_bag: 2-D indices");
  const int64_t mode = ctx.arg(4).toInt(), padding_idx = ctx.arg(8).toInt();
  tpu_shape_t out = ctx.out_shape(0);
  const int64_t b = out.dims[0], d = out.dims[1];
  const int64_t n = shape_of(g, ctx.v(1)).dims[0], m = shape_of(g, ctx.v(2)).dims[0];
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype(0));
  if (b == 0) throw Unsupported("embedding_bag without bags");
  tpu_shape_t bs{1, {b}}, ms{1, {m}};
  tpu_value_t extra = full(g, ctx.out_dtype(3), ctx.out_shape(3), 0);
  if (n == 0) {
    ctx.results = {full(g, ctx.out_dtype(0), out, 0), full(g, ctx.out_dtype(1), ctx.out_shape(1), 0),
                   full(g, ctx.out_dtype(2), ms, 0), extra};
    return;
  }
  tpu_value_t idx = flat_i64(g, ctx.v(1));                     // (N)
  tpu_value_t bag = offset2bag(g, ctx.v(2), b, n);             // (N)
  tpu_value_t keep = not_padding(g, idx, padding_idx);         // (N)
  tpu_value_t size = scatter_slices(g, full(g, TPU_I64, bs, 0), 0, bag, convert(g, keep, TPU_I64), TPU_SCATTER_ADD);
  tpu_value_t rows = convert(g, gather_slices(g, ctx.v(0), 0, idx), dt);  // (N, D)
  tpu_shape_t rs = shape_of(g, rows);
  if (ctx.v(6) != TPU_NO_VALUE) rows = tpu_graph_binary(g, TPU_OP_MUL, rows, per_row(g, convert(g, ctx.v(6), dt), d));
  tpu_value_t empty = per_row(g, tpu_graph_compare(g, TPU_CMP_EQ, size, full(g, TPU_I64, bs, 0)), d);  // (B, D)
  tpu_value_t r;
  if (mode == kMax) {
    bag_max(g, rows, idx, bag, keep, b, &r, &extra);
    extra = convert(g, tpu_graph_select(g, empty, full(g, TPU_I64, out, 0), extra), ctx.out_dtype(3));
  } else {
    rows = tpu_graph_select(g, per_row(g, keep, d), rows, full(g, dt, rs, 0));
    r = scatter_slices(g, full(g, dt, out, 0), 0, bag, rows, TPU_SCATTER_ADD);
    if (mode == kMean) {
      tpu_value_t count = tpu_graph_select(g, empty, full(g, dt, out, 1), per_row(g, convert(g, size, dt), d));
      r = tpu_graph_binary(g, TPU_OP_DIV, r, count);
    }
  }
  r = tpu_graph_select(g, empty, full(g, dt, out, 0), r);
  tpu_value_t sizes = size;
  if (m > b) {  // include_last_offset: the last entry is 0
    tpu_shape_t rest{1, {m - b}};
    tpu_value_t parts[2] = {size, full(g, TPU_I64, rest, 0)};
    sizes = tpu_graph_concatenate(g, parts, 2, 0);
  }
  ctx.results = {convert(g, r, ctx.out_dtype(0)), convert(g, bag, ctx.out_dtype(1)),
                 convert(g, sizes, ctx.out_dtype(2)), extra};
}

// Where the weight-gradient ops keep their arguments.
struct GradArgs {
  size_t grad, indices, offset2bag, bag_size, max_indices, num_weights, scale, mode, psw, padding;
};

// The dense weight gradient (num_weights, D): sum/mean add each index's bag gradient
// (times its per-sample weight, over its bag's size for mean) to its row, padding rows
// excepted; max adds each bag's gradient to the rows that held its maxima (empty bags
// excepted, as the CPU kernel skips them).
void bag_weight_grad(LowerCtx &ctx, const GradArgs &a) {
  tpu_graph_t *g = ctx.g;
  if (ctx.arg(a.scale).toBool()) throw Unsupported("embedding_bag scale_grad_by_freq");
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t grad = convert(g, ctx.v(a.grad), dt);  // (B, D)
  tpu_shape_t gs = shape_of(g, grad), out = ctx.out_shape();
  const int64_t b = gs.dims[0], d = gs.dims[1];
  tpu_value_t size = slice0(g, convert(g, ctx.v(a.bag_size), TPU_I64), b);  // (B)
  tpu_value_t nonempty = tpu_graph_compare(g, TPU_CMP_GT, size, full(g, TPU_I64, shape_of(g, size), 0));
  if (ctx.arg(a.mode).toInt() == kMax) {  // flat (V * D) positions row * D + column
    tpu_value_t rows = convert(g, ctx.v(a.max_indices), TPU_I64);  // (B, D)
    tpu_value_t lin = tpu_graph_binary(g, TPU_OP_ADD, tpu_graph_binary(g, TPU_OP_MUL, rows, full(g, TPU_I64, gs, static_cast<double>(d))),
                                       tpu_graph_iota(g, TPU_I64, &gs, 1));
    tpu_value_t upd = tpu_graph_select(g, per_row(g, nonempty, d), grad, full(g, dt, gs, 0));
    tpu_shape_t vflat{1, {numel(out)}}, bflat{1, {b * d}};
    tpu_value_t gw = scatter_slices(g, full(g, dt, vflat, 0), 0, tpu_graph_reshape(g, lin, &bflat),
                                    tpu_graph_reshape(g, upd, &bflat), TPU_SCATTER_ADD);
    ctx.results = {convert(g, tpu_graph_reshape(g, gw, &out), ctx.out_dtype())};
    return;
  }
  tpu_value_t idx = flat_i64(g, ctx.v(a.indices));
  const int64_t n = shape_of(g, idx).dims[0];
  if (n == 0) {
    ctx.results = {full(g, ctx.out_dtype(), out, 0)};
    return;
  }
  tpu_value_t bag = flat_i64(g, ctx.v(a.offset2bag));
  tpu_value_t rows = gather_slices(g, grad, 0, bag);  // (N, D)
  tpu_shape_t rs = shape_of(g, rows);
  if (ctx.arg(a.mode).toInt() == kMean) {
    tpu_value_t count = convert(g, gather_slices(g, size, 0, bag), dt);  // (N), >= 1 for kept rows
    tpu_shape_t ns{1, {n}};
    count = tpu_graph_select(g, tpu_graph_compare(g, TPU_CMP_EQ, count, full(g, dt, ns, 0)), full(g, dt, ns, 1), count);
    rows = tpu_graph_binary(g, TPU_OP_DIV, rows, per_row(g, count, d));
  }
  if (ctx.v(a.psw) != TPU_NO_VALUE) rows = tpu_graph_binary(g, TPU_OP_MUL, rows, per_row(g, convert(g, ctx.v(a.psw), dt), d));
  tpu_value_t keep = not_padding(g, idx, ctx.arg(a.padding).toInt());
  rows = tpu_graph_select(g, per_row(g, keep, d), rows, full(g, dt, rs, 0));
  tpu_value_t gw = scatter_slices(g, full(g, dt, out, 0), 0, idx, rows, TPU_SCATTER_ADD);
  ctx.results = {convert(g, gw, ctx.out_dtype())};
}

// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
// num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)
void embedding_bag_backward(LowerCtx &ctx) {
  if (ctx.arg(9).toBool()) throw Unsupported("embedding_bag sparse gradient");
  bag_weight_grad(ctx, {0, 1, 3, 4, 5, 6, 7, 8, 10, 11});
}

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
// num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx)
void embedding_bag_dense_backward(LowerCtx &ctx) { bag_weight_grad(ctx, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}); }

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag,
// mode, padding_idx) -> (N): grad[bag[i]] . weight[indices[i]], 0 for padding (mode sum).
void embedding_bag_psw_backward(LowerCtx &ctx) {
  tpu_graph_t *g = ctx.g;
  if (ctx.arg(5).toInt() != kSum) throw Unsupported("per_sample_weights with mode != sum");
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t idx = flat_i64(g, ctx.v(2));
  tpu_shape_t ns = shape_of(g, idx);
  if (ns.dims[0] == 0) {
    ctx.results = {full(g, ctx.out_dtype(), ctx.out_shape(), 0)};
    return;
  }
  tpu_value_t rows = convert(g, gather_slices(g, ctx.v(1), 0, idx), dt);                    // (N, D)
  tpu_value_t grads = convert(g, gather_slices(g, ctx.v(0), 0, flat_i64(g, ctx.v(4))), dt);  // (N, D)
  tpu_value_t dot = reduce_dims(g, TPU_REDUCE_SUM, tpu_graph_binary(g, TPU_OP_MUL, rows, grads), {1}, false);
  dot = tpu_graph_select(g, not_padding(g, idx, ctx.arg(6).toInt()), dot, full(g, dt, ns, 0));
  ctx.results = {convert(g, dot, ctx.out_dtype())};
}

LoweringRegistrar registrar({
    {"_embedding_bag", embedding_bag},
    {"_embedding_bag_forward_only", embedding_bag},
    {"_embedding_bag_backward", embedding_bag_backward},
    {"_embedding_bag_dense_backward", embedding_bag_dense_backward},
    {"_embedding_bag_per_sample_weights_backward", embedding_bag_psw_backward},
});

}  // namespace
}  // namespace torchtpu
