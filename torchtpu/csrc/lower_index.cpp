// lower_index.cpp: lowerings of the indexing ops: gather, scatter (src, value, add,
// reduce="add"/"multiply"), scatter_reduce (sum, prod, mean, amax, amin, with or without
// self), advanced indexing x[i, j] (index, _unsafe_index), index_put_ (_index_put_impl_),
// index_fill, index_copy, index_add, index_reduce, take, put_, masked_scatter (and its
// backward). Sorting and data movement (sort, topk, flip, roll, ...) are lower_reorder.cpp.
//
// Indices are never clamped: every gather/scatter of user indices sets check_bounds, so an
// out-of-range index is an IndexError naming the op at the next sync (at the op itself in
// debug mode). Advanced indexing (x[idx], x[idx] = v, index_fill) wraps negative indices
// first, as PyTorch does; torch.gather/scatter/index_copy/index_add do not (a negative
// index is an error there too).
//
// Boolean-mask indexing x[mask] (index.Tensor with bool/uint8 indices) has a data-dependent
// result shape: mask_index_kernel (dynamic_shape_ops.cpp) turns each mask into the columns
// of its nonzero() first, and so for x[mask] = v (_index_put_impl_) unless v has one element,
// which is native as it is (a select).
//
// Sums and products (scatter_add, scatter_reduce sum/prod/mean, index_add, index_reduce,
// accumulating index_put_) of bf16/f16 accumulate in f32 and are rounded once; replacing
// and max/min scatters move values in their own dtype (the IR's scatter combiners REPLACE,
// ADD, MUL, MAX, MIN; MAX/MIN keep NaN as the CPU kernel does).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "dynamic_shape_ops.h"
#include "eager.h"
#include "lower_ew.h"
#include "native.h"

namespace torchtpu {
namespace {

tpu_value_t bin(LowerCtx &ctx, tpu_op_t op, tpu_value_t a, tpu_value_t b) {
  return tpu_graph_binary(ctx.g, op, a, b);
}

tpu_shape_t append_dim(tpu_shape_t s, int64_t n) {
  if (s.rank >= TPU_MAX_RANK) throw Unsupported("rank above 8");
  s.dims[s.rank++] = n;
  return s;
}

// Index values as i64, negative ones wrapped by |size| (advanced indexing semantics).
tpu_value_t wrap_negative(LowerCtx &ctx, tpu_value_t idx, int64_t size) {
  idx = convert(ctx.g, idx, TPU_I64);
  tpu_shape_t s = shape_of(ctx.g, idx);
  tpu_value_t neg = tpu_graph_compare(ctx.g, TPU_CMP_LT, idx, full(ctx.g, TPU_I64, s, 0));
  return tpu_graph_select(ctx.g, neg, bin(ctx, TPU_OP_ADD, idx, full(ctx.g, TPU_I64, s, static_cast<double>(size))), idx);
}

// ---- gather / scatter along a dim (torch.gather, torch.scatter) ------------------------------

// The full coordinates (index.shape..., r) of an elementwise gather/scatter along |dim|:
// coordinate d is the position itself except along |dim|, where it is the index value.
tpu_value_t coordinates(LowerCtx &ctx, tpu_value_t index, int64_t dim, int rank) {
  tpu_shape_t is = shape_of(ctx.g, index);
  tpu_shape_t one = append_dim(is, 1);
  std::vector<tpu_value_t> parts;
  for (int d = 0; d < rank; d++) {
    tpu_value_t c = d == dim ? convert(ctx.g, index, TPU_I64) : tpu_graph_iota(ctx.g, TPU_I64, &is, d);
    parts.push_back(tpu_graph_reshape(ctx.g, c, &one));
  }
  if (parts.size() == 1) return parts[0];
  return tpu_graph_concatenate(ctx.g, parts.data(), static_cast<int>(parts.size()), is.rank);
}

// self and index as rank >= 1 (PyTorch allows 0-d tensors here).
void at_least_1d(LowerCtx &ctx, tpu_value_t &v) {
  if (shape_of(ctx.g, v).rank == 0) {
    tpu_shape_t one{1, {1}};
    v = tpu_graph_reshape(ctx.g, v, &one);
  }
}

// gather(self, dim, index, sparse_grad)
void gather(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0), index = ctx.v(2);
  at_least_1d(ctx, x);
  at_least_1d(ctx, index);
  tpu_shape_t xs = shape_of(ctx.g, x), out = ctx.out_shape();
  if (numel(out) == 0) {
    ctx.results = {full(ctx.g, dtype_of(ctx.g, x), out, 0)};
    return;
  }
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), xs.rank);
  tpu_value_t where = coordinates(ctx, index, dim, xs.rank);
  tpu_gather_attrs_t a{};
  a.num_offset_dims = 0;
  a.num_collapsed = a.num_start_index_map = xs.rank;
  for (int d = 0; d < xs.rank; d++) {
    a.collapsed_slice_dims[d] = a.start_index_map[d] = d;
    a.slice_sizes[d] = 1;
  }
  a.index_vector_dim = shape_of(ctx.g, index).rank;
  a.check_bounds = true;
  ctx.results = {tpu_graph_reshape(ctx.g, tpu_graph_gather(ctx.g, x, where, &a), &out)};
}

// What a scatter does where its updates land: replace, or one of scatter_reduce's
// reductions (scatter's legacy "add"/"multiply" are Sum/Prod).
enum class Combine { Replace, Sum, Prod, Mean, Max, Min };

Combine parse_combine(const std::string &reduce) {
  if (reduce == "sum" || reduce == "add") return Combine::Sum;
  if (reduce == "prod" || reduce == "multiply") return Combine::Prod;
  if (reduce == "mean") return Combine::Mean;
  if (reduce == "amax") return Combine::Max;
  if (reduce == "amin") return Combine::Min;
  throw Unsupported("scatter reduce " + reduce);  // the meta kernel rejects it first
}

tpu_scatter_kind_t kind_of(Combine how) {
  switch (how) {
    case Combine::Replace: return TPU_SCATTER_REPLACE;
    case Combine::Sum:
    case Combine::Mean: return TPU_SCATTER_ADD;
    case Combine::Prod: return TPU_SCATTER_MUL;
    case Combine::Max: return TPU_SCATTER_MAX;
    case Combine::Min: return TPU_SCATTER_MIN;
  }
  return TPU_SCATTER_REPLACE;
}

// The dtype a scatter of |how| runs in: sums and products of bf16/f16 in f32 (rounded once
// at the end), replacing and max/min in the result's own dtype (exact).
tpu_dtype_t combine_dtype(Combine how, tpu_dtype_t out) {
  bool arithmetic = how == Combine::Sum || how == Combine::Mean || how == Combine::Prod;
  if (how != Combine::Replace && out == TPU_BOOL) throw Unsupported("scatter reduction of bool");
  return arithmetic ? compute_dtype(out) : out;
}

// One scatter of |updates| onto |x| with the given combiner (positions fixed by the caller).
using ScatterFn = std::function<tpu_value_t(tpu_value_t x, tpu_value_t updates, tpu_scatter_kind_t)>;

// x with |updates| reduced onto it by |how| (x and updates in combine_dtype). Without
// |include_self| the positions updates land on start from the reduction's identity (0, 1;
// for max/min one of the updates itself); untouched positions keep x. Mean divides by the
// number of values reduced (1 where none), flooring for integers, as PyTorch's CPU kernel.
tpu_value_t reduce_onto(tpu_graph_t *g, tpu_value_t x, tpu_value_t updates, Combine how,
                        bool include_self, const ScatterFn &scatter) {
  tpu_dtype_t dt = dtype_of(g, x);
  tpu_shape_t xs = shape_of(g, x), us = shape_of(g, updates);
  if (!include_self && how != Combine::Replace) {
    bool extreme = how == Combine::Max || how == Combine::Min;
    tpu_value_t start = extreme ? updates : full(g, dt, us, how == Combine::Prod ? 1 : 0);
    x = scatter(x, start, TPU_SCATTER_REPLACE);
  }
  x = scatter(x, updates, kind_of(how));
  if (how != Combine::Mean) return x;
  tpu_value_t count = scatter(full(g, dt, xs, include_self ? 1 : 0), full(g, dt, us, 1), TPU_SCATTER_ADD);
  Ew B{g, dt, xs};
  count = B.sel(B.cmp(TPU_CMP_EQ, count, B.k(0)), B.k(1), count);
  return tpu_dtype_is_float(dt) ? B.div(x, count) : floor_divide(B, x, count);
}

// x with updates (index-shaped) combined by |kind| at the coordinates of |index| along |dim|.
tpu_value_t scatter_elements(LowerCtx &ctx, tpu_value_t x, int64_t dim, tpu_value_t index,
                             tpu_value_t updates, tpu_scatter_kind_t kind) {
  tpu_shape_t xs = shape_of(ctx.g, x);
  tpu_value_t where = coordinates(ctx, index, dim, xs.rank);
  tpu_scatter_attrs_t a{};
  a.num_update_window_dims = 0;
  a.num_inserted_window_dims = a.num_scatter_dims = xs.rank;
  for (int d = 0; d < xs.rank; d++) a.inserted_window_dims[d] = a.scatter_dims_to_operand_dims[d] = d;
  a.index_vector_dim = shape_of(ctx.g, index).rank;
  a.kind = kind;
  a.check_bounds = true;
  return tpu_graph_scatter(ctx.g, x, where, updates, &a);
}

// The leading index-shaped block of src (src may be larger than index in every dim).
tpu_value_t crop_to(LowerCtx &ctx, tpu_value_t src, const tpu_shape_t &is) {
  tpu_shape_t ss = shape_of(ctx.g, src);
  if (tpu_shape_equal(&ss, &is)) return src;
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], step[TPU_MAX_RANK];
  for (int d = 0; d < is.rank; d++) limit[d] = is.dims[d], step[d] = 1;
  return tpu_graph_slice(ctx.g, src, start, limit, step);
}

// scatter(self, dim, index, src | value [, reduce]), scatter_add, scatter_reduce: argument 3
// is a tensor (src) or a Scalar (value); |how| combines it with self (see reduce_onto).
void scatter_impl(LowerCtx &ctx, Combine how, bool include_self = true) {
  tpu_dtype_t out_dt = ctx.out_dtype();
  tpu_dtype_t dt = combine_dtype(how, out_dt);
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt), index = ctx.v(2);
  at_least_1d(ctx, x);
  at_least_1d(ctx, index);
  tpu_shape_t xs = shape_of(ctx.g, x), is = shape_of(ctx.g, index), out = ctx.out_shape();
  if (numel(is) == 0) {
    ctx.results = {convert(ctx.g, tpu_graph_reshape(ctx.g, x, &out), out_dt)};
    return;
  }
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), xs.rank);
  tpu_value_t updates;
  if (ctx.arg(3).isTensor()) {
    tpu_value_t src = convert(ctx.g, ctx.v(3), dt);
    at_least_1d(ctx, src);
    updates = crop_to(ctx, src, is);
  } else {
    updates = broadcast_to(ctx.g, convert(ctx.g, ctx.v(3), dt), is);
  }
  auto scatter = [&](tpu_value_t to, tpu_value_t upd, tpu_scatter_kind_t kind) {
    return scatter_elements(ctx, to, dim, index, upd, kind);
  };
  tpu_value_t r = reduce_onto(ctx.g, x, updates, how, include_self, scatter);
  ctx.results = {convert(ctx.g, tpu_graph_reshape(ctx.g, r, &out), out_dt)};
}

void scatter_replace(LowerCtx &ctx) { scatter_impl(ctx, Combine::Replace); }
void scatter_add(LowerCtx &ctx) { scatter_impl(ctx, Combine::Sum); }

// scatter.reduce / scatter.value_reduce (self, dim, index, src|value, reduce): "add" or
// "multiply".
void scatter_reduce_legacy(LowerCtx &ctx) { scatter_impl(ctx, parse_combine(ctx.arg(4).toStringRef())); }

// scatter_reduce.two(self, dim, index, src, reduce, include_self): sum, prod, mean, amax, amin.
void scatter_reduce_two(LowerCtx &ctx) {
  scatter_impl(ctx, parse_combine(ctx.arg(4).toStringRef()), ctx.arg(5).toBool());
}

// ---- along one dim with whole slices (index_fill, index_copy, index_add) ------------------------

tpu_shape_t slices_shape(const tpu_shape_t &xs, int64_t dim, int64_t n) {  // (n, others...)
  tpu_shape_t s{};
  s.rank = xs.rank;
  s.dims[0] = n;
  for (int d = 0, k = 1; d < xs.rank; d++) {
    if (d != dim) s.dims[k++] = xs.dims[d];
  }
  return s;
}

tpu_value_t flat_index(LowerCtx &ctx, tpu_value_t index) {
  tpu_shape_t s = shape_of(ctx.g, index);
  tpu_shape_t flat{1, {numel(s)}};
  return tpu_graph_reshape(ctx.g, convert(ctx.g, index, TPU_I64), &flat);
}

// index_fill(self, dim, index, value): value a Scalar or a 0-d tensor; negative indices wrap.
void index_fill(LowerCtx &ctx) {
  tpu_dtype_t dt = ctx.out_dtype();
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  at_least_1d(ctx, x);
  tpu_shape_t xs = shape_of(ctx.g, x), out = ctx.out_shape();
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), xs.rank);
  tpu_value_t index = wrap_negative(ctx, flat_index(ctx, ctx.v(2)), xs.dims[dim]);
  int64_t n = shape_of(ctx.g, index).dims[0];
  if (n == 0) {
    ctx.results = {tpu_graph_reshape(ctx.g, x, &out)};
    return;
  }
  tpu_value_t value = convert(ctx.g, ctx.v(3), dt);
  if (shape_of(ctx.g, value).rank != 0) throw Unsupported("index_fill with a non-scalar value");
  tpu_value_t updates = broadcast_to(ctx.g, value, slices_shape(xs, dim, n));
  ctx.results = {tpu_graph_reshape(ctx.g, scatter_slices(ctx.g, x, dim, index, updates, false), &out)};
}

// index_copy(self, dim, index, source), index_add(self, dim, index, source, alpha) and
// index_reduce(self, dim, index, source, reduce, include_self): whole slices of source
// combined into self along |dim| (see reduce_onto).
void index_combine(LowerCtx &ctx, Combine how, bool include_self = true) {
  tpu_dtype_t out_dt = ctx.out_dtype(), dt = combine_dtype(how, out_dt);
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt), src = convert(ctx.g, ctx.v(3), dt);
  at_least_1d(ctx, x);
  tpu_shape_t xs = shape_of(ctx.g, x), out = ctx.out_shape();
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), xs.rank);
  tpu_value_t index = flat_index(ctx, ctx.v(2));
  int64_t n = shape_of(ctx.g, index).dims[0];
  if (n == 0) {
    ctx.results = {convert(ctx.g, tpu_graph_reshape(ctx.g, x, &out), out_dt)};
    return;
  }
  tpu_shape_t full_src = xs;
  full_src.dims[dim] = n;
  if (numel(shape_of(ctx.g, src)) != numel(full_src)) throw Unsupported("index_copy/add source shape");
  src = tpu_graph_reshape(ctx.g, src, &full_src);
  tpu_value_t updates = dim_first(ctx.g, src, dim);  // (n, the other dims of x)
  if (how == Combine::Sum && ctx.v(4) != TPU_NO_VALUE) {  // index_add's alpha
    updates = bin(ctx, TPU_OP_MUL, updates, broadcast_to(ctx.g, convert(ctx.g, ctx.v(4), dt), shape_of(ctx.g, updates)));
  }
  auto scatter = [&](tpu_value_t to, tpu_value_t upd, tpu_scatter_kind_t kind) {
    return scatter_slices(ctx.g, to, dim, index, upd, kind);
  };
  tpu_value_t r = reduce_onto(ctx.g, x, updates, how, include_self, scatter);
  ctx.results = {convert(ctx.g, tpu_graph_reshape(ctx.g, r, &out), out_dt)};
}
void index_copy(LowerCtx &ctx) { index_combine(ctx, Combine::Replace); }
void index_add(LowerCtx &ctx) { index_combine(ctx, Combine::Sum); }
void index_reduce(LowerCtx &ctx) {  // no "sum": the CPU kernel's error, through the fallback
  Combine how = parse_combine(ctx.arg(4).toStringRef());
  if (how == Combine::Sum) throw Unsupported("index_reduce sum");
  index_combine(ctx, how, ctx.arg(5).toBool());
}

// ---- flat positions (take, put_, masked_scatter_) -----------------------------------------

// (numel) view of |v|.
tpu_value_t flatten(LowerCtx &ctx, tpu_value_t v) {
  tpu_shape_t flat{1, {numel(shape_of(ctx.g, v))}};
  return tpu_graph_reshape(ctx.g, v, &flat);
}

// take(self, index): self.flatten()[index], index of any shape; negative indices wrap.
void take(LowerCtx &ctx) {
  tpu_value_t x = flatten(ctx, ctx.v(0));
  tpu_shape_t out = ctx.out_shape();
  if (numel(out) == 0) {
    ctx.results = {full(ctx.g, ctx.out_dtype(), out, 0)};
    return;
  }
  tpu_value_t index = wrap_negative(ctx, flat_index(ctx, ctx.v(1)), numel(shape_of(ctx.g, x)));
  ctx.results = {tpu_graph_reshape(ctx.g, gather_slices(ctx.g, x, 0, index), &out)};
}

// put_(self, index, source, accumulate): self.flatten()[index] = source.flatten() (+= with
// accumulate, in f32 for bf16/f16); negative indices wrap; the last write wins.
void put(LowerCtx &ctx) {
  Combine how = ctx.arg(3).toBool() ? Combine::Sum : Combine::Replace;
  tpu_dtype_t out_dt = ctx.out_dtype(), dt = combine_dtype(how, out_dt);
  tpu_shape_t out = ctx.out_shape();
  tpu_value_t x = flatten(ctx, convert(ctx.g, ctx.v(0), dt));
  tpu_value_t index = wrap_negative(ctx, flat_index(ctx, ctx.v(1)), numel(out));
  if (shape_of(ctx.g, index).dims[0] != 0) {
    tpu_value_t src = flatten(ctx, convert(ctx.g, ctx.v(2), dt));
    x = scatter_slices(ctx.g, x, 0, index, src, kind_of(how));
  }
  ctx.results = {convert(ctx.g, tpu_graph_reshape(ctx.g, x, &out), out_dt)};
}

// The source position of each True of |mask| (flat, row-major): its prefix count minus one;
// -1 before the first True.
tpu_value_t true_positions(LowerCtx &ctx, tpu_value_t mask) {
  tpu_value_t m = convert(ctx.g, flatten(ctx, mask), TPU_I64);
  tpu_shape_t s = shape_of(ctx.g, m);
  return bin(ctx, TPU_OP_SUB, tpu_graph_scan(ctx.g, TPU_REDUCE_SUM, m, 0), full(ctx.g, TPU_I64, s, 1));
}

// masked_scatter_(self, mask, source): the Trues of mask (broadcast to self; masked_scatter
// broadcasts self and mask to each other), in row-major
// order, take source's elements in order; positions come from a prefix sum of the mask, so
// the graph has no data-dependent shape. Too small a source is an out-of-range IndexError.
void masked_scatter(LowerCtx &ctx) {
  tpu_shape_t out = ctx.out_shape();
  tpu_dtype_t dt = ctx.out_dtype();
  tpu_value_t x = broadcast_to(ctx.g, convert(ctx.g, ctx.v(0), dt), out);  // masked_scatter expands self
  tpu_value_t mask = broadcast_to(ctx.g, ctx.v(1), out);
  tpu_value_t src = flatten(ctx, convert(ctx.g, ctx.v(2), dt));
  if (numel(out) == 0 || numel(shape_of(ctx.g, src)) == 0) throw Unsupported("masked_scatter with nothing to scatter");
  tpu_value_t pos = true_positions(ctx, mask);
  tpu_shape_t ps = shape_of(ctx.g, pos);
  tpu_value_t bmask = tpu_graph_reshape(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_NE, mask, full(ctx.g, dtype_of(ctx.g, mask), out, 0)), &ps);
  pos = tpu_graph_select(ctx.g, bmask, pos, full(ctx.g, TPU_I64, ps, 0));  // False: any valid position
  tpu_value_t vals = tpu_graph_reshape(ctx.g, gather_slices(ctx.g, src, 0, pos), &out);
  ctx.results = {tpu_graph_select(ctx.g, tpu_graph_reshape(ctx.g, bmask, &out), vals, x)};
}

// masked_scatter_backward(grad_output, mask, sizes): source's gradient (sizes): element j is
// grad at the j-th True of mask, 0 past the last True. Trues scatter to their position,
// Falses to a spare slot at the end that is dropped.
void masked_scatter_backward(LowerCtx &ctx) {
  tpu_shape_t out = ctx.out_shape(), gs = shape_of(ctx.g, ctx.v(0));
  tpu_dtype_t dt = ctx.out_dtype();
  const int64_t n = numel(out);
  tpu_value_t mask = broadcast_to(ctx.g, ctx.v(1), gs);
  tpu_value_t pos = true_positions(ctx, mask);
  tpu_shape_t ps = shape_of(ctx.g, pos);
  tpu_value_t bmask = tpu_graph_reshape(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_NE, mask, full(ctx.g, dtype_of(ctx.g, mask), gs, 0)), &ps);
  pos = tpu_graph_select(ctx.g, bmask, pos, full(ctx.g, TPU_I64, ps, static_cast<double>(n)));
  tpu_shape_t spare{1, {n + 1}};
  tpu_value_t r = scatter_slices(ctx.g, full(ctx.g, dt, spare, 0), 0, pos, flatten(ctx, convert(ctx.g, ctx.v(0), dt)), TPU_SCATTER_REPLACE);
  int64_t start[1] = {0}, limit[1] = {n}, step[1] = {1};
  ctx.results = {tpu_graph_reshape(ctx.g, tpu_graph_slice(ctx.g, r, start, limit, step), &out)};
}

// ---- advanced indexing ---------------------------------------------------------------------------

// x[indices] as a StableHLO gather: the index tensors (None entries skipped) broadcast to
// one shape B and stacked into (B..., m) coordinates of the indexed dims D; the result is
// x's dims before D, then B, then the dims after D, or B first if D is not contiguous.
struct Advanced {
  std::vector<int64_t> dims;    // D
  tpu_value_t where = TPU_NO_VALUE;  // (B..., m) i64
  tpu_shape_t batch{};          // B
  tpu_shape_t result{};         // the shape of x[indices]
  std::vector<int64_t> window_pos;  // result position of each non-indexed dim of x
};

void reject_masks(const LowerCtx &ctx, size_t arg) {
  for (const std::optional<at::Tensor> t : ctx.arg(arg).toOptionalTensorList()) {
    if (t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte)) {
      throw Unsupported("boolean mask index (data-dependent shape)");
    }
  }
}

Advanced advanced(LowerCtx &ctx, const tpu_shape_t &xs, const std::vector<tpu_value_t> &list) {
  Advanced a;
  std::vector<tpu_value_t> idx;
  for (size_t k = 0; k < list.size(); k++) {
    if (list[k] == TPU_NO_VALUE) continue;
    if (static_cast<int>(k) >= xs.rank) throw Unsupported("too many indices");
    a.dims.push_back(static_cast<int64_t>(k));
    idx.push_back(list[k]);
  }
  if (idx.empty()) throw Unsupported("indexing without index tensors");
  // broadcast shape of the index tensors
  tpu_shape_t b{};
  for (tpu_value_t v : idx) {
    tpu_shape_t s = shape_of(ctx.g, v);
    if (s.rank > b.rank) {
      tpu_shape_t nb{};
      nb.rank = s.rank;
      for (int d = 0; d < s.rank; d++) nb.dims[d] = 1;
      for (int d = 0; d < b.rank; d++) nb.dims[s.rank - b.rank + d] = b.dims[d];
      b = nb;
    }
    for (int d = 0; d < s.rank; d++) {
      int64_t &bd = b.dims[b.rank - s.rank + d];
      if (bd == 1) bd = s.dims[d];
      else if (s.dims[d] != 1 && s.dims[d] != bd) throw Unsupported("index shapes do not broadcast");
    }
  }
  a.batch = b;
  tpu_shape_t b1 = append_dim(b, 1);
  std::vector<tpu_value_t> parts;
  for (size_t i = 0; i < idx.size(); i++) {
    tpu_value_t v = wrap_negative(ctx, idx[i], xs.dims[a.dims[i]]);
    parts.push_back(tpu_graph_reshape(ctx.g, broadcast_to(ctx.g, v, b), &b1));
  }
  a.where = parts.size() == 1 ? parts[0]
                              : tpu_graph_concatenate(ctx.g, parts.data(), static_cast<int>(parts.size()), b.rank);
  bool contiguous = a.dims.back() - a.dims.front() + 1 == static_cast<int64_t>(a.dims.size());
  int64_t batch_at = contiguous ? a.dims.front() : 0;
  a.result.rank = b.rank + xs.rank - static_cast<int>(a.dims.size());
  if (a.result.rank > TPU_MAX_RANK) throw Unsupported("rank above 8");
  int pos = 0;
  for (int d = 0; d < xs.rank; d++) {
    if (std::find(a.dims.begin(), a.dims.end(), d) != a.dims.end()) continue;
    if (pos == batch_at) pos += b.rank;  // the batch dims go here
    a.window_pos.push_back(pos);
    a.result.dims[pos++] = xs.dims[d];
  }
  for (int d = 0; d < b.rank; d++) a.result.dims[batch_at + d] = b.dims[d];
  return a;
}

// index.Tensor(self, indices) / _unsafe_index.Tensor
void index(LowerCtx &ctx) {
  reject_masks(ctx, 1);
  tpu_value_t x = ctx.v(0);
  tpu_shape_t xs = shape_of(ctx.g, x), out = ctx.out_shape();
  Advanced adv = advanced(ctx, xs, ctx.list[1]);
  if (numel(out) == 0) {
    ctx.results = {full(ctx.g, dtype_of(ctx.g, x), out, 0)};
    return;
  }
  tpu_gather_attrs_t a{};
  a.num_offset_dims = static_cast<int>(adv.window_pos.size());
  for (size_t i = 0; i < adv.window_pos.size(); i++) a.offset_dims[i] = adv.window_pos[i];
  a.num_collapsed = a.num_start_index_map = static_cast<int>(adv.dims.size());
  for (size_t i = 0; i < adv.dims.size(); i++) a.collapsed_slice_dims[i] = a.start_index_map[i] = adv.dims[i];
  for (int d = 0; d < xs.rank; d++) a.slice_sizes[d] = xs.dims[d];
  for (int64_t d : adv.dims) a.slice_sizes[d] = 1;
  a.index_vector_dim = adv.batch.rank;
  a.check_bounds = true;
  tpu_value_t r = tpu_graph_gather(ctx.g, x, adv.where, &a);
  ctx.results = {tpu_graph_reshape(ctx.g, r, &out)};
}

// x[mask] = v (accumulate: +=) for one boolean mask index and a one-element v: a select.
bool index_put_mask(LowerCtx &ctx, tpu_value_t x, tpu_value_t values, bool accumulate, tpu_dtype_t dt) {
  int mask_at = -1, count = 0, k = 0;
  bool is_mask = false;
  for (const std::optional<at::Tensor> t : ctx.arg(1).toOptionalTensorList()) {
    if (t && t->defined()) {
      count++;
      mask_at = k;
      is_mask = t->scalar_type() == at::kBool || t->scalar_type() == at::kByte;
    }
    k++;
  }
  if (!is_mask) return false;
  if (count != 1 || numel(shape_of(ctx.g, values)) != 1) throw Unsupported("boolean mask index_put_");
  tpu_shape_t xs = shape_of(ctx.g, x);
  tpu_value_t m = ctx.list[1][mask_at];
  tpu_shape_t ms = shape_of(ctx.g, m);
  if (mask_at + ms.rank > xs.rank) throw Unsupported("mask rank");
  for (int d = 0; d < ms.rank; d++) {
    if (ms.dims[d] != xs.dims[mask_at + d]) throw Unsupported("mask shape");  // PyTorch's IndexError
  }
  int64_t dims[TPU_MAX_RANK];
  for (int d = 0; d < ms.rank; d++) dims[d] = mask_at + d;
  m = tpu_graph_compare(ctx.g, TPU_CMP_NE, m, full(ctx.g, dtype_of(ctx.g, m), ms, 0));
  m = tpu_graph_broadcast_in_dim(ctx.g, m, &xs, dims);
  tpu_shape_t scalar{};
  tpu_value_t v = broadcast_to(ctx.g, tpu_graph_reshape(ctx.g, convert(ctx.g, values, dt), &scalar), xs);
  if (accumulate) v = bin(ctx, TPU_OP_ADD, x, v);
  ctx.results = {tpu_graph_select(ctx.g, m, v, x)};
  return true;
}

// _index_put_impl_(self, indices, values, accumulate, unsafe)
void index_put(LowerCtx &ctx) {
  bool accumulate = ctx.arg(3).toBool();
  tpu_dtype_t dt = accumulate ? compute_dtype(ctx.out_dtype()) : ctx.out_dtype();
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  if (index_put_mask(ctx, x, ctx.v(2), accumulate, dt)) return;
  tpu_shape_t xs = shape_of(ctx.g, x);
  Advanced adv = advanced(ctx, xs, ctx.list[1]);
  if (numel(adv.result) == 0) {
    ctx.results = {x};
    return;
  }
  tpu_value_t v = convert(ctx.g, ctx.v(2), dt);
  tpu_shape_t vs = shape_of(ctx.g, v);
  if (vs.rank > adv.result.rank) {  // leading 1s are allowed
    tpu_shape_t trimmed{};
    trimmed.rank = adv.result.rank;
    for (int d = 0; d < trimmed.rank; d++) trimmed.dims[d] = vs.dims[vs.rank - trimmed.rank + d];
    v = tpu_graph_reshape(ctx.g, v, &trimmed);
  }
  v = broadcast_to(ctx.g, v, adv.result);
  tpu_scatter_attrs_t a{};
  a.num_update_window_dims = static_cast<int>(adv.window_pos.size());
  for (size_t i = 0; i < adv.window_pos.size(); i++) a.update_window_dims[i] = adv.window_pos[i];
  a.num_inserted_window_dims = a.num_scatter_dims = static_cast<int>(adv.dims.size());
  for (size_t i = 0; i < adv.dims.size(); i++) a.inserted_window_dims[i] = a.scatter_dims_to_operand_dims[i] = adv.dims[i];
  a.index_vector_dim = adv.batch.rank;
  a.kind = accumulate ? TPU_SCATTER_ADD : TPU_SCATTER_REPLACE;
  a.check_bounds = true;
  ctx.results = {tpu_graph_scatter(ctx.g, x, adv.where, v, &a)};
}

LoweringRegistrar registrar({
    {"gather", gather},
    {"gather.out", gather},
    {"scatter.src", scatter_replace},
    {"scatter.src_out", scatter_replace},
    {"scatter_.src", scatter_replace},
    {"scatter.value", scatter_replace},
    {"scatter.value_out", scatter_replace},
    {"scatter_.value", scatter_replace},
    {"scatter_add", scatter_add},
    {"scatter_add.out", scatter_add},
    {"scatter_add_", scatter_add},
    {"scatter.reduce", scatter_reduce_legacy},
    {"scatter.reduce_out", scatter_reduce_legacy},
    {"scatter_.reduce", scatter_reduce_legacy},
    {"scatter.value_reduce", scatter_reduce_legacy},
    {"scatter.value_reduce_out", scatter_reduce_legacy},
    {"scatter_.value_reduce", scatter_reduce_legacy},
    {"scatter_reduce.two", scatter_reduce_two},
    {"scatter_reduce.two_out", scatter_reduce_two},
    {"scatter_reduce_.two", scatter_reduce_two},
    {"take", take},
    {"take.out", take},
    {"put_", put},
    {"masked_scatter_", masked_scatter},
    {"masked_scatter", masked_scatter},
    {"masked_scatter.out", masked_scatter},
    {"masked_scatter_backward", masked_scatter_backward},
    {"index.Tensor_out", index},
    {"_unsafe_index.Tensor", index},
    {"index_fill_.int_Scalar", index_fill},
    {"index_fill_.int_Tensor", index_fill},
    {"index_fill.int_Scalar", index_fill},
    {"index_fill.int_Tensor", index_fill},
    {"index_fill.int_Scalar_out", index_fill},
    {"index_fill.int_Tensor_out", index_fill},
    {"index_copy", index_copy},
    {"index_copy.out", index_copy},
    {"index_copy_", index_copy},
    {"index_add", index_add},
    {"index_add.out", index_add},
    {"index_add_", index_add},
    {"index_reduce", index_reduce},
    {"index_reduce.out", index_reduce},
    {"index_reduce_", index_reduce},
});

// x[idx] and x[idx] = v: mask_index_kernel replaces mask indices, then runs these lowerings.
struct IndexRegistrar {
  IndexRegistrar() {
    register_lowering_only("index.Tensor", index);
    register_lowering_only("_index_put_impl_", index_put);
    if (native_disabled()) return;
    static torch::Library *lib = new torch::Library(torch::Library::IMPL, "aten",
                                                    c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    for (const char *name : {"index.Tensor", "_index_put_impl_"}) {
      lib->impl(name, torch::CppFunction::makeFromBoxedFunction<&mask_index_kernel>());
    }
  }
};
IndexRegistrar index_registrar;

}  // namespace
}  // namespace torchtpu
