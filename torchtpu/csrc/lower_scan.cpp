// lower_scan.cpp: lowerings of the scans beyond cumsum/cumprod (lower_reduce.cpp):
//   cummax / cummin   the running extreme (a MAX/MIN scan, NaN sticks) and its index as the
//                     CPU kernel picks it: the last position that reached the running
//                     extreme (ties go to the later element) or the last NaN; the index
//                     is itself a MAX scan of those positions
//   logcumsumexp      log-step prefix (Hillis-Steele): ceil(log2 n) rounds of
//                     y[i] = logaddexp(y[i], y[i - 2^k]), stable at any magnitude
//                     (a global shift by the max would underflow small early terms)
#include <ATen/core/Tensor.h>

#include <cmath>

#include "lower_ew.h"

namespace torchtpu {
namespace {

// cummax / cummin (self, dim) -> (values, indices)
void running_extreme(LowerCtx &ctx, bool max) {
  tpu_value_t x = ctx.v(0);
  tpu_shape_t s = shape_of(ctx.g, x);
  tpu_dtype_t dt = dtype_of(ctx.g, x);
  if (s.rank == 0) {
    ctx.results = {x, full(ctx.g, TPU_I64, s, 0)};
    return;
  }
  const int dim = static_cast<int>(wrap_dim(ctx.arg(1).toInt(), s.rank));
  Ew E{ctx.g, dt, s};
  tpu_value_t run = tpu_graph_scan(ctx.g, max ? TPU_REDUCE_MAX : TPU_REDUCE_MIN, x, dim);
  tpu_value_t reached = E.cmp(TPU_CMP_EQ, x, run);
  if (tpu_dtype_is_float(dt)) reached = E.op(TPU_OP_OR, reached, E.isnan(x));  // every NaN, as on CPU
  tpu_value_t position = tpu_graph_iota(ctx.g, TPU_I64, &s, dim);
  tpu_value_t marked = E.sel(reached, position, full(ctx.g, TPU_I64, s, -1));
  ctx.results = {run, tpu_graph_scan(ctx.g, TPU_REDUCE_MAX, marked, dim)};
}
void cummax(LowerCtx &ctx) { running_extreme(ctx, true); }
void cummin(LowerCtx &ctx) { running_extreme(ctx, false); }

// |y| moved |by| places up |dim|, the first |by| places filled with |fill|
tpu_value_t shifted(const Ew &E, tpu_value_t y, int dim, int64_t by, double fill) {
  const tpu_shape_t &s = E.shape;
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], stride[TPU_MAX_RANK];
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0}, interior[TPU_MAX_RANK] = {0};
  for (int d = 0; d < s.rank; d++) {
    limit[d] = s.dims[d];
    stride[d] = 1;
  }
  limit[dim] -= by;
  lo[dim] = by;
  tpu_value_t kept = tpu_graph_slice(E.g, y, start, limit, stride);
  return tpu_graph_pad(E.g, kept, scalar_const(E.g, E.dt, fill), lo, hi, interior);
}

// logcumsumexp(self, dim)
void logcumsumexp(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t y = operand(ctx, 0, E.dt, E.shape);
  if (E.shape.rank == 0) {
    ctx.results = {y};
    return;
  }
  const int dim = static_cast<int>(wrap_dim(ctx.arg(1).toInt(), E.shape.rank));
  for (int64_t by = 1; by < E.shape.dims[dim]; by *= 2) y = E.logaddexp(y, shifted(E, y, dim, by, -INFINITY));
  ctx.results = {y};
}

LoweringRegistrar registrar({
    {"cummax", cummax},
    {"cummax.out", cummax},
    {"cummin", cummin},
    {"cummin.out", cummin},
    {"logcumsumexp", logcumsumexp},
    {"logcumsumexp.out", logcumsumexp},
});

}  // namespace
}  // namespace torchtpu
