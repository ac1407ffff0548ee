// lower_reorder.cpp: lowerings of the ops that reorder, pick or repeat values along dims:
// sort (stable), topk, kthvalue and median along a dim (on top of the IR's sort/argsort),
// nanmedian, searchsorted and bucketize, repeat, flip, roll, channel_shuffle, constant_pad_nd and
// narrow_copy.
#include <ATen/core/Tensor.h>

#include <cmath>
#include <vector>

#include "lower_ew.h"

namespace torchtpu {
namespace {

// ---- sort / topk -------------------------------------------------------------------------------------

// ctx.results = (values, indices) of |x| sorted along |dim|.
void sort_value(LowerCtx &ctx, tpu_value_t x, int64_t dim, bool descending) {
  tpu_shape_t xs = shape_of(ctx.g, x);
  if (xs.rank == 0) {
    ctx.results = {x, full(ctx.g, TPU_I64, xs, 0)};
    return;
  }
  if (dtype_of(ctx.g, x) == TPU_BOOL) x = convert(ctx.g, x, TPU_U8);
  tpu_sort_attrs_t a{};
  a.dim = static_cast<int>(wrap_dim(dim, xs.rank));
  a.descending = descending;
  a.stable = true;
  ctx.results = {tpu_graph_sort(ctx.g, x, &a), tpu_graph_argsort(ctx.g, x, &a)};
}

void sort_impl(LowerCtx &ctx, int64_t dim, bool descending) {
  sort_value(ctx, ctx.v(0), dim, descending);
}

// sort.stable / sort.values_stable(self, stable, dim, descending)
void sort_stable(LowerCtx &ctx) { sort_impl(ctx, ctx.arg(2).toInt(), ctx.arg(3).toBool()); }
// sort.values(self, dim, descending)
void sort_values(LowerCtx &ctx) { sort_impl(ctx, ctx.arg(1).toInt(), ctx.arg(2).toBool()); }

// topk(self, k, dim, largest, sorted): the first k of a stable sort (ties keep index order).
void topk(LowerCtx &ctx) {
  int64_t k = ctx.arg(1).toInt();
  sort_impl(ctx, ctx.arg(2).toInt(), ctx.arg(3).toBool());
  tpu_shape_t xs = shape_of(ctx.g, ctx.v(0));
  if (xs.rank == 0) return;
  int64_t dim = wrap_dim(ctx.arg(2).toInt(), xs.rank);
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], step[TPU_MAX_RANK];
  for (int d = 0; d < xs.rank; d++) limit[d] = xs.dims[d], step[d] = 1;
  limit[dim] = k;
  for (tpu_value_t &r : ctx.results) r = tpu_graph_slice(ctx.g, r, start, limit, step);
}

// The element at sorted position |k| along |dim| of (values, indices) -> results, reshaped
// to |out| (dim kept as size 1, or dropped).
void pick_sorted(LowerCtx &ctx, int64_t dim, int64_t k, const tpu_shape_t &out) {
  tpu_shape_t s = shape_of(ctx.g, ctx.results[0]);
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], step[TPU_MAX_RANK];
  for (int d = 0; d < s.rank; d++) limit[d] = s.dims[d], step[d] = 1;
  start[dim] = k;
  limit[dim] = k + 1;
  for (tpu_value_t &r : ctx.results) {
    r = tpu_graph_reshape(ctx.g, tpu_graph_slice(ctx.g, r, start, limit, step), &out);
  }
}

// kthvalue(self, k, dim, keepdim) -> (values, indices): NaN counts as the largest value. A
// 0-d self (k == 1: the meta kernel checked it) is its own kthvalue, at index 0.
void kthvalue(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_shape_t xs = shape_of(ctx.g, x);
  if (xs.rank == 0) {
    ctx.results = {x, full(ctx.g, TPU_I64, ctx.out_shape(1), 0)};
    return;
  }
  int64_t dim = wrap_dim(ctx.arg(2).toInt(), xs.rank);
  sort_impl(ctx, dim, false);
  pick_sorted(ctx, dim, ctx.arg(1).toInt() - 1, ctx.out_shape(0));  // out: keepdim or not
}

// The lower median of |x| along |dim| -> ctx.results (values, indices of shape |out|); a
// NaN along dim makes the median NaN with the index of the first NaN, as in PyTorch.
void median_of(LowerCtx &ctx, tpu_value_t x, int64_t dim, const tpu_shape_t &out) {
  tpu_shape_t xs = shape_of(ctx.g, x);
  if (xs.rank == 0 || !tpu_dtype_is_float(dtype_of(ctx.g, x))) throw Unsupported("median");
  if (xs.dims[dim] == 0) throw Unsupported("median of an empty dim");
  sort_value(ctx, x, dim, false);
  pick_sorted(ctx, dim, (xs.dims[dim] - 1) / 2, out);
  tpu_value_t nan = tpu_graph_compare(ctx.g, TPU_CMP_NE, x, x);
  tpu_value_t any = tpu_graph_reshape(ctx.g, reduce_dims(ctx.g, TPU_REDUCE_OR, nan, {dim}, false), &out);
  tpu_value_t first = reduce_dims(ctx.g, TPU_REDUCE_ARGMAX, convert(ctx.g, nan, TPU_I32), {dim}, false);
  first = tpu_graph_reshape(ctx.g, first, &out);
  tpu_dtype_t dt = dtype_of(ctx.g, ctx.results[0]);
  ctx.results[0] = tpu_graph_select(ctx.g, any, full(ctx.g, dt, out, std::nan("")), ctx.results[0]);
  ctx.results[1] = tpu_graph_select(ctx.g, any, first, ctx.results[1]);
}

// The lower median of the values of |x| along |dim| that are not NaN -> ctx.results
// (values, indices of shape |out|). The stable sort puts NaN last, so with c of them not NaN
// the median sits at sorted position (c - 1) / 2 (0 when all are NaN: the first NaN, as on
// the CPU), picked per row by a one-hot compare (a min over +inf elsewhere keeps -0 and NaN).
void nanmedian_of(LowerCtx &ctx, tpu_value_t x, int64_t dim, const tpu_shape_t &out) {
  tpu_shape_t xs = shape_of(ctx.g, x);
  if (xs.rank == 0 || !tpu_dtype_is_float(dtype_of(ctx.g, x))) throw Unsupported("nanmedian");
  if (xs.dims[dim] == 0) throw Unsupported("nanmedian of an empty dim");
  sort_value(ctx, x, dim, false);
  tpu_value_t valid = tpu_graph_compare(ctx.g, TPU_CMP_EQ, x, x);
  tpu_value_t count = reduce_dims(ctx.g, TPU_REDUCE_SUM, convert(ctx.g, valid, TPU_I64), {dim}, true);
  tpu_shape_t cs = shape_of(ctx.g, count);
  // twice the median's position: max(c - 1, 0); position p holds it when 2p or 2p + 1 does
  tpu_value_t twice = tpu_graph_binary(ctx.g, TPU_OP_MAX, ew2(ctx.g, TPU_OP_SUB, count, scalar_const(ctx.g, TPU_I64, 1), TPU_I64, cs),
                                       full(ctx.g, TPU_I64, cs, 0));
  tpu_value_t t = broadcast_to(ctx.g, twice, xs);
  tpu_value_t p2 = ew2(ctx.g, TPU_OP_MUL, tpu_graph_iota(ctx.g, TPU_I64, &xs, static_cast<int>(dim)),
                       scalar_const(ctx.g, TPU_I64, 2), TPU_I64, xs);
  tpu_value_t p2_1 = ew2(ctx.g, TPU_OP_ADD, p2, scalar_const(ctx.g, TPU_I64, 1), TPU_I64, xs);
  tpu_value_t hit = tpu_graph_binary(ctx.g, TPU_OP_OR, tpu_graph_compare(ctx.g, TPU_CMP_EQ, p2, t),
                                     tpu_graph_compare(ctx.g, TPU_CMP_EQ, p2_1, t));
  tpu_dtype_t dt = dtype_of(ctx.g, ctx.results[0]);
  tpu_value_t v = tpu_graph_select(ctx.g, hit, ctx.results[0], full(ctx.g, dt, xs, INFINITY));
  tpu_value_t i = tpu_graph_select(ctx.g, hit, ctx.results[1], full(ctx.g, TPU_I64, xs, 0));
  ctx.results = {tpu_graph_reshape(ctx.g, reduce_dims(ctx.g, TPU_REDUCE_MIN, v, {dim}, false), &out),
                 tpu_graph_reshape(ctx.g, reduce_dims(ctx.g, TPU_REDUCE_SUM, i, {dim}, false), &out)};
}

// median.dim / nanmedian.dim(self, dim, keepdim) -> (values, indices)
void median_along(LowerCtx &ctx, bool skip_nan) {
  tpu_value_t x = ctx.v(0);
  int64_t rank = shape_of(ctx.g, x).rank;
  if (rank == 0) {  // the value itself, at index 0
    ctx.results = {x, full(ctx.g, TPU_I64, shape_of(ctx.g, x), 0)};
    return;
  }
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), rank);
  tpu_shape_t out = ctx.out_shape(0);  // with dim as 1 or without it (keepdim)
  if (skip_nan) nanmedian_of(ctx, x, dim, out);
  else median_of(ctx, x, dim, out);
}
void median_dim(LowerCtx &ctx) { median_along(ctx, false); }
void nanmedian_dim(LowerCtx &ctx) { median_along(ctx, true); }

// median(self) / nanmedian(self): over all elements, the value only.
void median_all(LowerCtx &ctx, bool skip_nan) {
  tpu_shape_t flat{};
  flat.rank = 1;
  flat.dims[0] = numel(shape_of(ctx.g, ctx.v(0)));
  tpu_value_t x = tpu_graph_reshape(ctx.g, ctx.v(0), &flat);
  tpu_shape_t scalar{};
  if (skip_nan) nanmedian_of(ctx, x, 0, scalar);
  else median_of(ctx, x, 0, scalar);
  ctx.results.resize(1);
}
void median_all_values(LowerCtx &ctx) { median_all(ctx, false); }
void nanmedian_all(LowerCtx &ctx) { median_all(ctx, true); }

// ---- shapes ------------------------------------------------------------------------------------------

// repeat(self, repeats): x broadcast to (.., r_i, d_i, ..) (a repeat axis only where r_i > 1),
// then merged to (.., r_i * d_i, ..).
void repeat(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_shape_t xs = shape_of(ctx.g, x);
  std::vector<int64_t> reps = ctx.arg(1).toIntVector();
  int n = static_cast<int>(reps.size());
  if (n < xs.rank) throw Unsupported("repeat: fewer repeats than dims");
  tpu_shape_t big{};
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < n; i++) {
    int src = i - (n - xs.rank);  // x's dim, or < 0 for a new leading dim
    if (reps[i] != 1 || src < 0) {
      if (big.rank >= TPU_MAX_RANK) throw Unsupported("repeat: rank above 8");
      big.dims[big.rank++] = reps[i];
    }
    if (src >= 0) {
      if (big.rank >= TPU_MAX_RANK) throw Unsupported("repeat: rank above 8");
      dims[src] = big.rank;
      big.dims[big.rank++] = xs.dims[src];
    }
  }
  tpu_value_t b = tpu_graph_broadcast_in_dim(ctx.g, x, &big, dims);
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, b, &out)};
}

void flip(LowerCtx &ctx) {  // flip(self, dims)
  tpu_value_t x = ctx.v(0);
  tpu_shape_t xs = shape_of(ctx.g, x);
  if (xs.rank == 0) {
    ctx.results = {x};
    return;
  }
  bool dims[TPU_MAX_RANK] = {false};
  for (int64_t d : ctx.arg(1).toIntVector()) dims[wrap_dim(d, xs.rank)] = true;
  ctx.results = {tpu_graph_reverse(ctx.g, x, dims)};
}

tpu_value_t roll_dim(LowerCtx &ctx, tpu_value_t x, int64_t shift, int64_t dim) {
  tpu_shape_t s = shape_of(ctx.g, x);
  int64_t n = s.dims[dim];
  if (n == 0) return x;
  int64_t k = ((shift % n) + n) % n;
  if (k == 0) return x;
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], step[TPU_MAX_RANK];
  for (int d = 0; d < s.rank; d++) limit[d] = s.dims[d], step[d] = 1;
  start[dim] = n - k;
  tpu_value_t tail = tpu_graph_slice(ctx.g, x, start, limit, step);
  start[dim] = 0;
  limit[dim] = n - k;
  tpu_value_t head = tpu_graph_slice(ctx.g, x, start, limit, step);
  tpu_value_t parts[2] = {tail, head};
  return tpu_graph_concatenate(ctx.g, parts, 2, static_cast<int>(dim));
}

void roll(LowerCtx &ctx) {  // roll(self, shifts, dims)
  tpu_value_t x = ctx.v(0);
  tpu_shape_t xs = shape_of(ctx.g, x);
  std::vector<int64_t> shifts = ctx.arg(1).toIntVector(), dims = ctx.arg(2).toIntVector();
  if (dims.empty()) {
    if (shifts.size() != 1) throw Unsupported("roll shifts");
    tpu_shape_t flat{1, {numel(xs)}};
    tpu_value_t r = roll_dim(ctx, tpu_graph_reshape(ctx.g, x, &flat), shifts[0], 0);
    ctx.results = {tpu_graph_reshape(ctx.g, r, &xs)};
    return;
  }
  if (shifts.size() != dims.size()) throw Unsupported("roll shifts and dims differ in length");
  for (size_t i = 0; i < dims.size(); i++) x = roll_dim(ctx, x, shifts[i], wrap_dim(dims[i], xs.rank));
  ctx.results = {x};
}

// channel_shuffle(self, groups): (N, C, *) viewed as (N, g, C / g, *), the two group dims
// swapped, viewed back (the meta kernel checks that g divides C)
void channel_shuffle(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_shape_t xs = shape_of(ctx.g, x);
  const int64_t groups = ctx.arg(1).toInt();
  if (xs.rank < 2 || xs.rank + 1 > TPU_MAX_RANK) throw Unsupported("channel_shuffle rank");
  tpu_shape_t split{xs.rank + 1, {xs.dims[0], groups, xs.dims[1] / groups}};
  int64_t perm[TPU_MAX_RANK] = {0, 2, 1};
  for (int d = 2; d < xs.rank; d++) {
    split.dims[d + 1] = xs.dims[d];
    perm[d + 1] = d + 1;
  }
  tpu_value_t t = tpu_graph_transpose(ctx.g, tpu_graph_reshape(ctx.g, x, &split), perm);
  ctx.results = {tpu_graph_reshape(ctx.g, t, &xs)};
}

// constant_pad_nd(self, pad, value): pad pairs (lo, hi) from the last dim backwards; negative
// entries crop.
void constant_pad_nd(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_shape_t xs = shape_of(ctx.g, x);
  std::vector<int64_t> pad = ctx.arg(1).toIntVector();
  if (pad.size() % 2 != 0 || static_cast<int>(pad.size() / 2) > xs.rank) throw Unsupported("pad length");
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0}, interior[TPU_MAX_RANK] = {0};
  for (size_t i = 0; i < pad.size() / 2; i++) {
    int d = xs.rank - 1 - static_cast<int>(i);
    lo[d] = pad[2 * i];
    hi[d] = pad[2 * i + 1];
  }
  tpu_value_t value = convert(ctx.g, ctx.v(2), dtype_of(ctx.g, x));
  ctx.results = {tpu_graph_pad(ctx.g, x, value, lo, hi, interior)};
}

// narrow_copy(self, dim, start, length)
void narrow_copy(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_shape_t xs = shape_of(ctx.g, x);
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), xs.rank);
  int64_t start = ctx.arg(2).toInt(), length = ctx.arg(3).toInt();
  if (start < 0) start += xs.dims[dim];
  int64_t st[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], step[TPU_MAX_RANK];
  for (int d = 0; d < xs.rank; d++) limit[d] = xs.dims[d], step[d] = 1;
  st[dim] = start;
  limit[dim] = start + length;
  ctx.results = {tpu_graph_slice(ctx.g, x, st, limit, step)};
}

// ---- searchsorted / bucketize -------------------------------------------------------------------------

// Boundaries per row past which insertion_points searches instead of comparing every value
// with every boundary (a compare and a sum fuse into one pass, cheaper for short rows).
constexpr int64_t kSearchedBoundaries = 64;

// The insertion points by binary search, as the CPU finds them: per value, the number of
// boundaries b with !(b >= v) (left) or !(b > v) (right), found in ceil(log2(S + 1))
// rounds over all values at once: a round tries to move each value's count up by the
// round's power of two and does where the boundary it reads (a gather from the flattened
// rows) is still before the value. |seq| is (S) or (*B, S), |values| (*B, M) or any shape.
tpu_value_t searched_points(tpu_graph_t *g, tpu_value_t seq, tpu_value_t values, bool right,
                            tpu_dtype_t out) {
  const tpu_shape_t ss = shape_of(g, seq), vs = shape_of(g, values);
  const int64_t nb = ss.dims[ss.rank - 1], n = numel(vs);
  const tpu_shape_t flat_seq{1, {numel(ss)}}, flat{1, {n}};
  tpu_value_t rows = tpu_graph_reshape(g, seq, &flat_seq);
  tpu_value_t v = tpu_graph_reshape(g, values, &flat);
  auto i64 = [&](double x) { return full(g, TPU_I64, flat, x); };
  // where each value's row starts in |rows|: (flat index / M) * S for batched rows
  tpu_value_t base = i64(0);
  if (ss.rank > 1) {
    const int64_t m = vs.dims[vs.rank - 1];
    tpu_value_t row = tpu_graph_binary(g, TPU_OP_DIV, tpu_graph_iota(g, TPU_I64, &flat, 0), i64(m));
    base = tpu_graph_binary(g, TPU_OP_MUL, row, i64(nb));
  }
  tpu_value_t count = i64(0);
  int64_t step = 1;
  while (step * 2 <= nb) step *= 2;
  for (; step > 0; step /= 2) {
    tpu_value_t cand = tpu_graph_binary(g, TPU_OP_ADD, count, i64(step));
    tpu_value_t fits = tpu_graph_compare(g, TPU_CMP_LE, cand, i64(nb));
    tpu_value_t at = tpu_graph_binary(g, TPU_OP_ADD, base,
                                      tpu_graph_binary(g, TPU_OP_MIN, cand, i64(nb)));
    tpu_value_t b = gather_slices(g, rows, 0, tpu_graph_binary(g, TPU_OP_SUB, at, i64(1)));
    tpu_value_t past = tpu_graph_compare(g, right ? TPU_CMP_GT : TPU_CMP_GE, b, v);
    count = tpu_graph_select(g, fits, tpu_graph_select(g, past, count, cand), count);
  }
  return tpu_graph_reshape(g, convert(g, count, out), &vs);
}

// The insertion points of |values| in the sorted last dim of |seq| (1-D, or the same leading
// dims as values): the count of boundaries b with !(b >= v) (left; the CPU's lower bound)
// or !(b > v) (right), so a NaN value lands past the end as in the CPU's binary search.
// Short rows: one compare of every value with every boundary, then a sum; longer ones (or
// values x boundaries above 2^26): a binary search (searched_points).
tpu_value_t insertion_points(LowerCtx &ctx, tpu_value_t seq, tpu_value_t values, bool right,
                             bool out_int32) {
  tpu_shape_t ss = shape_of(ctx.g, seq), vs = shape_of(ctx.g, values);
  if (dtype_of(ctx.g, seq) != dtype_of(ctx.g, values)) throw Unsupported("searchsorted dtypes differ");
  if (ss.rank == 0 || vs.rank + 1 > TPU_MAX_RANK) throw Unsupported("searchsorted ranks");
  if (ss.rank > 1 && ss.rank != vs.rank) throw Unsupported("searchsorted leading dims");
  int64_t nb = ss.dims[ss.rank - 1];
  tpu_dtype_t dt = out_int32 ? TPU_I32 : TPU_I64;
  tpu_shape_t cs = vs;  // values, then the boundaries
  cs.dims[cs.rank++] = nb;
  if (nb > kSearchedBoundaries || numel(cs) > (int64_t{1} << 26)) {
    if (numel(vs) == 0 || nb == 0) return full(ctx.g, dt, vs, 0);
    return searched_points(ctx.g, seq, values, right, dt);
  }
  tpu_shape_t seq_shape = cs;  // (1, .., 1, S) or (*B, 1, S)
  for (int d = 0; d < cs.rank - 1; d++) seq_shape.dims[d] = 1;
  if (ss.rank > 1) {
    for (int d = 0; d < ss.rank - 1; d++) seq_shape.dims[d] = ss.dims[d];
  }
  tpu_value_t b = broadcast_to(ctx.g, tpu_graph_reshape(ctx.g, seq, &seq_shape), cs);
  tpu_shape_t v1 = vs;
  v1.dims[v1.rank++] = 1;
  tpu_value_t v = broadcast_to(ctx.g, tpu_graph_reshape(ctx.g, values, &v1), cs);
  tpu_value_t past = tpu_graph_compare(ctx.g, right ? TPU_CMP_GT : TPU_CMP_GE, b, v);
  tpu_value_t before = tpu_graph_select(ctx.g, past, full(ctx.g, dt, cs, 0), full(ctx.g, dt, cs, 1));
  return reduce_dims(ctx.g, TPU_REDUCE_SUM, before, {static_cast<int64_t>(cs.rank - 1)}, false);
}

// |seq| in the order |sorter| (int64, seq's shape: the meta kernel checked it) gives along
// its last dim: one gather from the flattened rows. A sorter index outside the row is the
// gather's out-of-range IndexError (the CPU raises a RuntimeError; CUDA does not check).
tpu_value_t sorted_by(LowerCtx &ctx, tpu_value_t seq, tpu_value_t sorter) {
  if (dtype_of(ctx.g, sorter) != TPU_I64) throw Unsupported("searchsorted with a non-int64 sorter");
  const tpu_shape_t ss = shape_of(ctx.g, seq);
  const int64_t n = numel(ss), row = ss.dims[ss.rank - 1];
  if (n == 0) return seq;
  const tpu_shape_t flat{1, {n}};
  Ew I{ctx.g, TPU_I64, flat};
  tpu_value_t p = tpu_graph_iota(ctx.g, TPU_I64, &flat, 0);
  tpu_value_t row_start = I.mul(I.div(p, I.k(row)), I.k(row));
  tpu_value_t i = tpu_graph_reshape(ctx.g, sorter, &flat);
  tpu_value_t outside = I.k(static_cast<double>(n));  // an index outside the row reads past the end
  tpu_value_t at = I.sel(I.cmp(TPU_CMP_LT, i, I.k(0)), outside,
                         I.sel(I.cmp(TPU_CMP_GE, i, I.k(row)), outside, I.add(row_start, i)));
  tpu_value_t v = gather_slices(ctx.g, tpu_graph_reshape(ctx.g, seq, &flat), 0, at);
  return tpu_graph_reshape(ctx.g, v, &ss);
}

// searchsorted.Tensor(sorted_sequence, self, *, out_int32, right, side, sorter) and
// searchsorted.Scalar (self a number, converted to the sequence's float dtype as the CPU's
// type promotion does; integer sequences take the fallback)
void searchsorted(LowerCtx &ctx) {
  bool right = ctx.arg(3).toBool();
  if (!ctx.arg(4).isNone()) right = ctx.arg(4).toStringRef() == "right";
  tpu_value_t seq = ctx.v(0), values = ctx.v(1);
  if (!ctx.arg(5).isNone()) seq = sorted_by(ctx, seq, ctx.v(5));
  if (ctx.arg(1).isScalar()) {
    const tpu_dtype_t dt = dtype_of(ctx.g, seq);
    if (!tpu_dtype_is_float(dt)) throw Unsupported("searchsorted.Scalar of an integer sequence");
    values = convert(ctx.g, values, dt);
  }
  ctx.results = {insertion_points(ctx, seq, values, right, ctx.arg(2).toBool())};
}

// bucketize.Tensor(self, boundaries, *, out_int32, right): searchsorted(boundaries, self)
void bucketize(LowerCtx &ctx) {
  ctx.results = {insertion_points(ctx, ctx.v(1), ctx.v(0), ctx.arg(3).toBool(), ctx.arg(2).toBool())};
}

LoweringRegistrar registrar({
    {"searchsorted.Tensor", searchsorted},
    {"searchsorted.Tensor_out", searchsorted},
    {"searchsorted.Scalar", searchsorted},
    {"searchsorted.Scalar_out", searchsorted},
    {"bucketize.Tensor", bucketize},
    {"bucketize.Tensor_out", bucketize},
    {"channel_shuffle", channel_shuffle},
    {"native_channel_shuffle", channel_shuffle},
    {"sort.stable", sort_stable},
    {"sort.values_stable", sort_stable},
    {"sort.values", sort_values},
    {"topk", topk},
    {"topk.values", topk},
    {"kthvalue", kthvalue},
    {"kthvalue.values", kthvalue},
    {"median.dim", median_dim},
    {"median.dim_values", median_dim},
    {"median", median_all_values},
    {"nanmedian", nanmedian_all},
    {"nanmedian.dim", nanmedian_dim},
    {"nanmedian.dim_values", nanmedian_dim},
    {"repeat", repeat},
    {"repeat.out", repeat},
    {"flip", flip},
    {"flip.out", flip},
    {"roll", roll},
    {"roll.out", roll},
    {"constant_pad_nd", constant_pad_nd},
    {"constant_pad_nd.out", constant_pad_nd},
    {"narrow_copy", narrow_copy},
    {"narrow_copy.out", narrow_copy},
});

}  // namespace
}  // namespace torchtpu
