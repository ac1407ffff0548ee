// lower_reduce.cpp: lowerings of reductions and scans: sum, mean, prod, amax/amin,
// max/min along a dim, argmax/argmin, var/std, all/any, logsumexp, vector norms (and
// torch.norm, renorm), cumsum/cumprod, nansum, count_nonzero, aminmax, trace.
//
// Sums of bf16/f16 accumulate in f32 inside the reduce kernel and round once; means,
// variances and norms are computed in f32 (f64 for f64) and rounded by the engine.
#include <ATen/core/Tensor.h>

#include <cmath>

#include "native.h"

namespace torchtpu {
namespace {

std::vector<int64_t> dims_arg(const LowerCtx &ctx, size_t i) {
  if (ctx.args->size() <= i || ctx.arg(i).isNone()) return {};
  if (ctx.arg(i).isInt()) return {ctx.arg(i).toInt()};
  return ctx.arg(i).toIntVector();
}

bool bool_arg(const LowerCtx &ctx, size_t i) { return ctx.arg(i).toBool(); }

int64_t count_of(const tpu_shape_t &s, const std::vector<int64_t> &dims) {
  int64_t n = 1;
  if (dims.empty()) return numel(s);
  for (int64_t d : dims) n *= s.rank ? s.dims[wrap_dim(d, s.rank)] : 1;
  return n;
}

// sum(self, dim, keepdim, dtype): the input is converted to the result dtype first, so
// integer sums are int64 and bf16 sums accumulate in f32 in the kernel.
void sum_out(LowerCtx &ctx) {
  tpu_value_t x = convert(ctx.g, ctx.v(0), ctx.out_dtype());
  ctx.results = {reduce_dims(ctx.g, TPU_REDUCE_SUM, x, dims_arg(ctx, 1), bool_arg(ctx, 2))};
}

void prod_out(LowerCtx &ctx) {  // prod.int_out(self, dim, keepdim, dtype)
  tpu_value_t x = convert(ctx.g, ctx.v(0), ctx.out_dtype());
  ctx.results = {reduce_dims(ctx.g, TPU_REDUCE_PROD, x, dims_arg(ctx, 1), bool_arg(ctx, 2))};
}

void mean_out(LowerCtx &ctx) {  // mean.out(self, dim, keepdim, dtype)
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  auto dims = dims_arg(ctx, 1);
  tpu_value_t s = reduce_dims(ctx.g, TPU_REDUCE_SUM, x, dims, bool_arg(ctx, 2));
  double n = static_cast<double>(count_of(shape_of(ctx.g, x), dims));
  ctx.results = {tpu_graph_binary(ctx.g, TPU_OP_DIV, s, full(ctx.g, dt, shape_of(ctx.g, s), n))};
}

void extreme(LowerCtx &ctx, tpu_reduce_kind_t kind) {  // amax/amin(self, dim[], keepdim)
  ctx.results = {reduce_dims(ctx.g, kind, ctx.v(0), dims_arg(ctx, 1), bool_arg(ctx, 2))};
}
void amax_out(LowerCtx &ctx) { extreme(ctx, TPU_REDUCE_MAX); }
void amin_out(LowerCtx &ctx) { extreme(ctx, TPU_REDUCE_MIN); }

// max.dim_max / min.dim_min(self, dim, keepdim) -> (values, indices)
// (a 0-d self, whose dim the meta kernel checked: its one element, at index 0)
void extreme_dim(LowerCtx &ctx, tpu_reduce_kind_t kind, tpu_reduce_kind_t arg_kind) {
  int64_t dim = ctx.arg(1).toInt();
  bool keep = bool_arg(ctx, 2);
  if (shape_of(ctx.g, ctx.v(0)).rank == 0) {
    ctx.results = {ctx.v(0), full(ctx.g, TPU_I64, ctx.out_shape(1), 0)};
    return;
  }
  ctx.results = {reduce_dims(ctx.g, kind, ctx.v(0), {dim}, keep),
                 reduce_dims(ctx.g, arg_kind, ctx.v(0), {dim}, keep)};
}
void max_dim(LowerCtx &ctx) { extreme_dim(ctx, TPU_REDUCE_MAX, TPU_REDUCE_ARGMAX); }
void min_dim(LowerCtx &ctx) { extreme_dim(ctx, TPU_REDUCE_MIN, TPU_REDUCE_ARGMIN); }

// max() / min() over everything
void max_all(LowerCtx &ctx) { ctx.results = {reduce_dims(ctx.g, TPU_REDUCE_MAX, ctx.v(0), {}, false)}; }
void min_all(LowerCtx &ctx) { ctx.results = {reduce_dims(ctx.g, TPU_REDUCE_MIN, ctx.v(0), {}, false)}; }

// argmax/argmin(self, dim=None, keepdim): no dim means over the flattened tensor.
void arg_extreme(LowerCtx &ctx, tpu_reduce_kind_t kind) {
  tpu_value_t x = ctx.v(0);
  bool keep = bool_arg(ctx, 2);
  if (shape_of(ctx.g, x).rank == 0) {  // the one element is the extreme
    ctx.results = {full(ctx.g, TPU_I64, ctx.out_shape(), 0)};
    return;
  }
  if (ctx.arg(1).isNone()) {
    tpu_shape_t flat{1, {numel(shape_of(ctx.g, x))}};
    tpu_value_t r = reduce_dims(ctx.g, kind, tpu_graph_reshape(ctx.g, x, &flat), {0}, false);
    if (keep) {
      tpu_shape_t ones = ctx.out_shape();
      r = tpu_graph_reshape(ctx.g, r, &ones);
    }
    ctx.results = {r};
    return;
  }
  ctx.results = {reduce_dims(ctx.g, kind, x, {ctx.arg(1).toInt()}, keep)};
}
void argmax_out(LowerCtx &ctx) { arg_extreme(ctx, TPU_REDUCE_ARGMAX); }
void argmin_out(LowerCtx &ctx) { arg_extreme(ctx, TPU_REDUCE_ARGMIN); }

// var/std.correction_out(self, dim, correction, keepdim)
tpu_value_t variance(LowerCtx &ctx, tpu_dtype_t dt, tpu_value_t *mean_out) {
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  auto dims = dims_arg(ctx, 1);
  bool keep = bool_arg(ctx, 3);
  tpu_shape_t xs = shape_of(ctx.g, x);
  double n = static_cast<double>(count_of(xs, dims));
  tpu_value_t sum = reduce_dims(ctx.g, TPU_REDUCE_SUM, x, dims, true);
  tpu_value_t mean = tpu_graph_binary(ctx.g, TPU_OP_DIV, sum, full(ctx.g, dt, shape_of(ctx.g, sum), n));
  tpu_value_t dev = tpu_graph_binary(ctx.g, TPU_OP_SUB, x, broadcast_to(ctx.g, mean, xs));
  tpu_value_t sq = reduce_dims(ctx.g, TPU_REDUCE_SUM, tpu_graph_binary(ctx.g, TPU_OP_MUL, dev, dev),
                               dims, keep);
  tpu_shape_t rs = shape_of(ctx.g, sq);
  tpu_value_t corr = ctx.v(2) == TPU_NO_VALUE ? full(ctx.g, dt, rs, 1)
                                              : broadcast_to(ctx.g, convert(ctx.g, ctx.v(2), dt), rs);
  tpu_value_t denom = tpu_graph_binary(ctx.g, TPU_OP_SUB, full(ctx.g, dt, rs, n), corr);
  denom = tpu_graph_binary(ctx.g, TPU_OP_MAX, denom, full(ctx.g, dt, rs, 0));
  if (mean_out) {
    if (!keep) {
      tpu_shape_t ms = rs;
      mean = tpu_graph_reshape(ctx.g, mean, &ms);
    }
    *mean_out = mean;
  }
  return tpu_graph_binary(ctx.g, TPU_OP_DIV, sq, denom);
}
void var_out(LowerCtx &ctx) { ctx.results = {variance(ctx, compute_dtype(ctx.out_dtype()), nullptr)}; }
void std_out(LowerCtx &ctx) {
  tpu_value_t v = variance(ctx, compute_dtype(ctx.out_dtype()), nullptr);
  ctx.results = {tpu_graph_unary(ctx.g, TPU_OP_SQRT, v)};
}
void var_mean_out(LowerCtx &ctx) {  // -> (var, mean)
  tpu_value_t mean;
  tpu_value_t v = variance(ctx, compute_dtype(ctx.out_dtype()), &mean);
  ctx.results = {v, mean};
}
void std_mean_out(LowerCtx &ctx) {
  tpu_value_t mean;
  tpu_value_t v = variance(ctx, compute_dtype(ctx.out_dtype()), &mean);
  ctx.results = {tpu_graph_unary(ctx.g, TPU_OP_SQRT, v), mean};
}

// all/any(self, dim?, keepdim): on x != 0.
void logical_reduce(LowerCtx &ctx, tpu_reduce_kind_t kind, bool whole) {
  tpu_value_t x = ctx.v(0);
  if (dtype_of(ctx.g, x) != TPU_BOOL) {
    x = tpu_graph_compare(ctx.g, TPU_CMP_NE, x, full(ctx.g, dtype_of(ctx.g, x), shape_of(ctx.g, x), 0));
  }
  if (whole) {
    ctx.results = {reduce_dims(ctx.g, kind, x, {}, false)};
  } else {
    ctx.results = {reduce_dims(ctx.g, kind, x, dims_arg(ctx, 1), bool_arg(ctx, 2))};
  }
}
void all_out(LowerCtx &ctx) { logical_reduce(ctx, TPU_REDUCE_AND, false); }
void all_all(LowerCtx &ctx) { logical_reduce(ctx, TPU_REDUCE_AND, true); }
void any_out(LowerCtx &ctx) { logical_reduce(ctx, TPU_REDUCE_OR, false); }
void any_all(LowerCtx &ctx) { logical_reduce(ctx, TPU_REDUCE_OR, true); }

void logsumexp_out(LowerCtx &ctx) {  // (self, dim[], keepdim)
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  auto dims = dims_arg(ctx, 1);
  tpu_shape_t xs = shape_of(ctx.g, x);
  tpu_value_t m = reduce_dims(ctx.g, TPU_REDUCE_MAX, x, dims, true);
  // an all -inf slice keeps m = -inf; use 0 there so exp(x - m) is 0 rather than NaN
  tpu_value_t finite = tpu_graph_unary(ctx.g, TPU_OP_IS_FINITE, m);
  m = tpu_graph_select(ctx.g, finite, m, full(ctx.g, dt, shape_of(ctx.g, m), 0));
  tpu_value_t e = tpu_graph_unary(ctx.g, TPU_OP_EXP,
                                  tpu_graph_binary(ctx.g, TPU_OP_SUB, x, broadcast_to(ctx.g, m, xs)));
  tpu_value_t s = reduce_dims(ctx.g, TPU_REDUCE_SUM, e, dims, true);
  tpu_value_t r = tpu_graph_binary(ctx.g, TPU_OP_ADD, tpu_graph_unary(ctx.g, TPU_OP_LOG, s), m);
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, r, &out)};
}

// linalg_vector_norm.out(self, ord (static), dim?, keepdim, dtype?)
void vector_norm_out(LowerCtx &ctx) {
  double ord = ctx.arg(1).toScalar().toDouble();
  ctx.results = {vector_norm(ctx.g, ctx.v(0), compute_dtype(ctx.out_dtype()), ord, dims_arg(ctx, 2),
                             bool_arg(ctx, 3))};
}

// torch.norm's overloads (torch.dist, F.pairwise_distance): norm.out / norm.dtype_out
// (self, p?, dim, keepdim, ...) and norm.Scalar_out / norm.ScalarOpt_dtype_out (self, p?,
// ...) over all dims. p (static) defaults to 2.
void norm_out(LowerCtx &ctx) {
  const double p = ctx.arg(1).isNone() ? 2.0 : ctx.arg(1).toScalar().toDouble();
  const bool over_dims = ctx.args->size() > 3 && ctx.arg(3).isBool();
  std::vector<int64_t> dims = over_dims ? dims_arg(ctx, 2) : std::vector<int64_t>{};
  ctx.results = {vector_norm(ctx.g, ctx.v(0), compute_dtype(ctx.out_dtype()), p, dims,
                             over_dims && bool_arg(ctx, 3))};
}

// nansum(self, dim?, keepdim, dtype?): sum with NaNs counted as 0
void nansum_out(LowerCtx &ctx) {
  tpu_value_t x = convert(ctx.g, ctx.v(0), ctx.out_dtype());
  if (tpu_dtype_is_float(dtype_of(ctx.g, x))) {
    tpu_shape_t s = shape_of(ctx.g, x);
    tpu_value_t nan = tpu_graph_compare(ctx.g, TPU_CMP_NE, x, x);
    x = tpu_graph_select(ctx.g, nan, full(ctx.g, dtype_of(ctx.g, x), s, 0), x);
  }
  ctx.results = {reduce_dims(ctx.g, TPU_REDUCE_SUM, x, dims_arg(ctx, 1), bool_arg(ctx, 2))};
}

// count_nonzero.dim_IntList(self, dim[]): int64 counts of x != 0 (an empty dim list counts all)
void count_nonzero(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_value_t nz = tpu_graph_compare(ctx.g, TPU_CMP_NE, x, full(ctx.g, dtype_of(ctx.g, x), shape_of(ctx.g, x), 0));
  ctx.results = {reduce_dims(ctx.g, TPU_REDUCE_SUM, convert(ctx.g, nz, TPU_I64), dims_arg(ctx, 1), false)};
}

// aminmax.out(self, dim?, keepdim) -> (min, max)
void aminmax_out(LowerCtx &ctx) {
  auto dims = dims_arg(ctx, 1);
  bool keep = bool_arg(ctx, 2);
  ctx.results = {reduce_dims(ctx.g, TPU_REDUCE_MIN, ctx.v(0), dims, keep),
                 reduce_dims(ctx.g, TPU_REDUCE_MAX, ctx.v(0), dims, keep)};
}

// trace(self): the sum of the main diagonal of a matrix, in the result dtype (int64 for
// integers)
void trace(LowerCtx &ctx) {
  tpu_value_t x = convert(ctx.g, ctx.v(0), ctx.out_dtype());
  tpu_shape_t s = shape_of(ctx.g, x);
  if (s.rank != 2) throw Unsupported("trace of a tensor that is not a matrix");
  x = tpu_graph_select(ctx.g, main_diagonal(ctx.g, s), x, full(ctx.g, dtype_of(ctx.g, x), s, 0));
  ctx.results = {reduce_dims(ctx.g, TPU_REDUCE_SUM, x, {}, false)};
}

// PyTorch's meta kernel for trace words its error without the op's name; the CPU kernel's
// check runs first instead (a presize hook runs before every call is keyed).
void trace_check(const std::vector<c10::IValue> &args) {
  const int64_t dim = args[0].toTensor().dim();
  TORCH_CHECK(dim == 2, "trace: expected a matrix, but got tensor with dim ", dim);
}

void cumulative(LowerCtx &ctx, tpu_reduce_kind_t kind) {  // (self, dim, dtype)
  tpu_value_t x = convert(ctx.g, ctx.v(0), compute_dtype(ctx.out_dtype()));
  tpu_shape_t s = shape_of(ctx.g, x);
  if (s.rank == 0) {
    ctx.results = {x};
    return;
  }
  ctx.results = {tpu_graph_scan(ctx.g, kind, x, static_cast<int>(wrap_dim(ctx.arg(1).toInt(), s.rank)))};
}
// renorm(self, p, dim, maxnorm): each slice along |dim| whose p-norm exceeds maxnorm scaled by
// maxnorm / (norm + 1e-7), as ATen's renorm_scale_factor
void renorm_out(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_shape_t s = ctx.out_shape();
  const double p = ctx.arg(1).toScalar().toDouble();
  std::vector<int64_t> others;
  for (int64_t d = 0; d < s.rank; d++) {
    if (d != wrap_dim(ctx.arg(2).toInt(), s.rank)) others.push_back(d);
  }
  tpu_value_t norm = broadcast_to(ctx.g, vector_norm(ctx.g, ctx.v(0), dt, p, others, true), s);
  tpu_value_t maxnorm = broadcast_to(ctx.g, convert(ctx.g, ctx.v(3), dt), s);
  tpu_value_t scale = tpu_graph_binary(ctx.g, TPU_OP_DIV, maxnorm,
                                       tpu_graph_binary(ctx.g, TPU_OP_ADD, norm, full(ctx.g, dt, s, 1e-7)));
  tpu_value_t over = tpu_graph_compare(ctx.g, TPU_CMP_GT, norm, maxnorm);
  tpu_value_t factor = tpu_graph_select(ctx.g, over, scale, full(ctx.g, dt, s, 1));
  ctx.results = {tpu_graph_binary(ctx.g, TPU_OP_MUL, convert(ctx.g, ctx.v(0), dt), factor)};
}

void cumsum_out(LowerCtx &ctx) { cumulative(ctx, TPU_REDUCE_SUM); }
void cumprod_out(LowerCtx &ctx) { cumulative(ctx, TPU_REDUCE_PROD); }

[[maybe_unused]] const bool registered_hooks = [] {
  register_static_scalar("linalg_vector_norm.out", "ord");
  for (const char *op : {"norm.out", "norm.dtype_out", "norm.Scalar_out", "norm.ScalarOpt_dtype_out"}) {
    register_static_scalar(op, "p");
  }
  register_static_scalar("renorm.out", "p");
  register_presize("trace", trace_check);
  register_presize("trace.out", trace_check);
  return true;
}();

LoweringRegistrar registrar({
    {"sum.IntList_out", sum_out},
    {"prod.int_out", prod_out},
    {"mean.out", mean_out},
    {"amax.out", amax_out},
    {"amin.out", amin_out},
    {"max.dim_max", max_dim},
    {"min.dim_min", min_dim},
    {"max", max_all},
    {"min", min_all},
    {"argmax.out", argmax_out},
    {"argmin.out", argmin_out},
    {"var.correction_out", var_out},
    {"var.correction", var_out},
    {"std.correction_out", std_out},
    {"std.correction", std_out},
    {"var_mean.correction_out", var_mean_out},
    {"var_mean.correction", var_mean_out},
    {"std_mean.correction_out", std_mean_out},
    {"std_mean.correction", std_mean_out},
    {"all.out", all_out},
    {"all.dims_out", all_out},
    {"all.all_out", all_all},
    {"any.out", any_out},
    {"any.dims_out", any_out},
    {"any.all_out", any_all},
    {"logsumexp.out", logsumexp_out},
    {"linalg_vector_norm.out", vector_norm_out},
    {"norm.out", norm_out},
    {"norm.dtype_out", norm_out},
    {"norm.Scalar_out", norm_out},
    {"norm.ScalarOpt_dtype_out", norm_out},
    {"nansum", nansum_out},
    {"nansum.out", nansum_out},
    {"count_nonzero.dim_IntList", count_nonzero},
    {"count_nonzero.dim_IntList_out", count_nonzero},
    {"aminmax.out", aminmax_out},
    {"trace", trace},
    {"trace.out", trace},
    {"renorm.out", renorm_out},
    {"cumsum.out", cumsum_out},
    {"cumprod.out", cumprod_out},
});

}  // namespace
}  // namespace torchtpu
