// lower_linalg.cpp: lowerings of the Cholesky family onto the IR's CHOLESKY and
// TRIANGULAR_SOLVE (StableHLO's cholesky and triangular_solve; kernels in linalg.c); it
// also defines lower_linalg.h's diagonal() and first_failure_info(). The ops:
//   linalg_cholesky_ex       L (the other triangle masked to 0, which StableHLO leaves
//                            undefined) and info: 0, or the order of the first leading
//                            minor that is not positive definite (the kernel writes NaN
//                            from that pivot on). torch.linalg.cholesky reads info in
//                            _linalg_check_errors, one synchronizing read as on CUDA.
//                            check_errors=True takes the CPU fallback, which raises.
//   linalg_solve_triangular  A X = B or X A = B, batch dims broadcast
//   triangular_solve         op(A) X = B (the legacy API), with A's broadcast copy
//   _cholesky_solve_helper   A X = B from A's factor: two triangular solves
//   cholesky_inverse         A^-1 from A's factor: the same with B = I
// Only f32 and f64 lower (the CPU kernels reject bf16/f16; those calls take the fallback,
// which gives the CPU's error). Their backward formulas use these same ops and matmuls.
#include <ATen/core/Tensor.h>

#include "lower_linalg.h"

namespace torchtpu {

tpu_value_t diagonal(tpu_graph_t *g, tpu_value_t m) {
  tpu_shape_t s = shape_of(g, m), flat = s, diag = s;
  const int64_t n = s.dims[s.rank - 1];
  flat.rank = diag.rank = s.rank - 1;
  flat.dims[flat.rank - 1] = n * n;
  diag.dims[diag.rank - 1] = n;
  if (n == 0) return full(g, dtype_of(g, m), diag, 0);
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], stride[TPU_MAX_RANK];
  for (int d = 0; d < flat.rank; d++) {
    limit[d] = flat.dims[d];
    stride[d] = 1;
  }
  stride[flat.rank - 1] = n + 1;
  return tpu_graph_slice(g, tpu_graph_reshape(g, m, &flat), start, limit, stride);
}

tpu_value_t first_failure_info(tpu_graph_t *g, tpu_value_t m, const tpu_shape_t &info_shape,
                               tpu_compare_dir_t nan_or_zero) {
  tpu_value_t d = diagonal(g, m);
  tpu_shape_t ds = shape_of(g, d);
  const int64_t n = ds.dims[ds.rank - 1];
  if (n == 0) return full(g, TPU_I32, info_shape, 0);
  tpu_value_t other = nan_or_zero == TPU_CMP_NE ? d : full(g, dtype_of(g, d), ds, 0);
  Ew I{g, TPU_I32, ds};
  tpu_value_t pivot = tpu_graph_iota(g, TPU_I32, &ds, ds.rank - 1);
  tpu_value_t failed = I.sel(tpu_graph_compare(g, nan_or_zero, d, other), pivot, I.k(n));
  tpu_value_t first = reduce_dims(g, TPU_REDUCE_MIN, failed, {-1}, false);
  Ew R{g, TPU_I32, info_shape};
  return R.sel(R.cmp(TPU_CMP_EQ, first, R.k(n)), R.k(0), R.add(first, R.k(1)));
}

namespace {

// linalg_cholesky_ex(self, *, upper, check_errors) -> (L, info)
void cholesky_ex(LowerCtx &ctx) {
  if (ctx.arg(2).toBool()) throw Unsupported("linalg_cholesky_ex(check_errors=True)");
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg_cholesky_ex");
  const bool lower = !ctx.arg(1).toBool();
  tpu_graph_t *g = ctx.g;
  tpu_value_t a = ctx.v(0);
  tpu_shape_t s = shape_of(g, a);
  tpu_value_t kept = triangle_mask(g, s, lower ? TPU_CMP_GE : TPU_CMP_LE);
  tpu_value_t l = tpu_graph_select(g, kept, tpu_graph_cholesky(g, a, lower), full(g, dt, s, 0));
  // info: 1 + the first NaN pivot (the kernel writes NaN from the failed one on), or 0
  ctx.results = {l, first_failure_info(g, l, ctx.out_shape(1), TPU_CMP_NE)};
}

// linalg_solve_triangular(self, B, *, upper, left, unitriangular)
void solve_triangular(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg_solve_triangular");
  tpu_shape_t out = ctx.out_shape();
  if (ctx.out_dtype() != dt || dtype_of(ctx.g, ctx.v(1)) != dt) {
    throw Unsupported("linalg_solve_triangular with mixed dtypes");
  }
  const bool left = ctx.arg(3).toBool();
  const int64_t n = out.dims[out.rank - (left ? 2 : 1)];
  tpu_value_t a = broadcast_to(ctx.g, ctx.v(0), with_matrix(out, n, n));
  tpu_value_t b = broadcast_to(ctx.g, ctx.v(1), out);
  ctx.results = {solve(ctx.g, a, b, left, !ctx.arg(2).toBool(), ctx.arg(4).toBool(), false)};
}

// triangular_solve(self (B), A, upper, transpose, unitriangular) -> (X, A broadcast)
void triangular_solve(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 1, "triangular_solve");
  if (dtype_of(ctx.g, ctx.v(0)) != dt) throw Unsupported("triangular_solve with mixed dtypes");
  tpu_value_t a = broadcast_to(ctx.g, ctx.v(1), ctx.out_shape(1));
  tpu_value_t b = broadcast_to(ctx.g, ctx.v(0), ctx.out_shape(0));
  ctx.results = {solve(ctx.g, a, b, true, !ctx.arg(2).toBool(), ctx.arg(4).toBool(),
                       ctx.arg(3).toBool()),
                 a};
}

// A^-1 b for A = L L^T (|upper|: U^T U) given its factor |f|: L y = b, then L^T x = y.
tpu_value_t solve_with_factor(tpu_graph_t *g, tpu_value_t f, tpu_value_t b, bool upper) {
  tpu_value_t y = solve(g, f, b, true, !upper, false, upper);
  return solve(g, f, y, true, !upper, false, !upper);
}

// _cholesky_solve_helper(self (B), A (the factor), upper): batch dims already broadcast
void cholesky_solve_helper(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 1, "cholesky_solve");
  if (dtype_of(ctx.g, ctx.v(0)) != dt) throw Unsupported("cholesky_solve with mixed dtypes");
  ctx.results = {solve_with_factor(ctx.g, ctx.v(1), ctx.v(0), ctx.arg(2).toBool())};
}

// cholesky_inverse(self (the factor), upper)
void cholesky_inverse(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "cholesky_inverse");
  tpu_graph_t *g = ctx.g;
  tpu_shape_t s = shape_of(g, ctx.v(0));
  if (s.rank < 2) throw Unsupported("cholesky_inverse of a non-matrix");
  tpu_value_t eye = identity(g, dt, s);
  ctx.results = {solve_with_factor(g, ctx.v(0), eye, ctx.arg(1).toBool())};
}

LoweringRegistrar registrar({
    {"linalg_cholesky_ex", cholesky_ex},
    {"linalg_cholesky_ex.L", cholesky_ex},
    {"linalg_solve_triangular", solve_triangular},
    {"linalg_solve_triangular.out", solve_triangular},
    {"triangular_solve", triangular_solve},
    {"triangular_solve.X", triangular_solve},
    {"_cholesky_solve_helper", cholesky_solve_helper},
    {"cholesky_inverse", cholesky_inverse},
    {"cholesky_inverse.out", cholesky_inverse},
});

}  // namespace
}  // namespace torchtpu
