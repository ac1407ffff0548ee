// lower_lu.cpp: lowerings of the LU family onto the IR's LU, LU_PIVOTS (LAPACK's getrf:
// partial pivoting, 1-based i32 pivots), LU_PIVOTS_TO_PERMUTATION and TRIANGULAR_SOLVE
// (kernels in linalg.c). With perm the pivots' permutation, L U = A[perm] (rows gathered),
// so A x = b is U x = L^-1 b[perm], and A^T x = b is x[perm] = L^-T U^-T b. Like the
// CPU kernels, det and slogdet factor A^T when A is contiguous (factored).
//   linalg_lu_factor_ex  (LU, pivots, info: 1 + the first zero pivot, or 0)
//   linalg_lu_solve      left/right, adjoint, batch dims broadcast
//   _linalg_solve_ex     torch.linalg.solve: (result, LU, pivots, info); vector right sides
//   linalg_inv_ex        torch.linalg.inv: the solve with B = I
//   _linalg_det          torch.linalg.det: prod(diag U) times the pivots' parity
//   _linalg_slogdet      torch.linalg.slogdet / logdet: sign and sum(log |diag U|)
//   linalg_lu, lu_unpack (P, L, U) with A = P L U
// Square matrices in f32/f64 only: rectangular LU, pivot=False, check_errors=True and
// other dtypes take the CPU fallback (which gives PyTorch's errors). Each op computes the
// factorization once per output it needs (LU, LU_PIVOTS), as SORT and ARGSORT do.
#include <ATen/core/Tensor.h>

#include "lower_linalg.h"

namespace torchtpu {
namespace {

int64_t matrix_size(const tpu_shape_t &s) { return s.dims[s.rank - 1]; }

void require_square(LowerCtx &ctx, size_t arg, const char *op) {
  tpu_shape_t s = shape_of(ctx.g, ctx.v(arg));
  if (s.rank < 2 || s.dims[s.rank - 1] != s.dims[s.rank - 2]) {
    throw Unsupported(std::string(op) + " of non-square matrices");
  }
}

// The batch dims of |s| (all but the last |matrix_dims|) followed by |tail|.
tpu_shape_t batch_then(const tpu_shape_t &s, int matrix_dims, std::initializer_list<int64_t> tail) {
  tpu_shape_t r = s;
  r.rank = s.rank - matrix_dims;
  for (int64_t t : tail) r.dims[r.rank++] = t;
  return r;
}

// out[..., i, :] = b[..., perm[i], :] for b [..., n, k] and perm (integers) [..., n].
tpu_value_t permute_rows(tpu_graph_t *g, tpu_value_t b, tpu_value_t perm) {
  tpu_shape_t s = shape_of(g, b);
  if (numel(s) == 0) return b;
  const int64_t n = s.dims[s.rank - 2], k = s.dims[s.rank - 1], batch = numel(s) / (n * k);
  tpu_shape_t rows{2, {batch * n, k}}, grid{2, {batch, n}}, flat{1, {batch * n}};
  tpu_value_t index = tpu_graph_reshape(g, tpu_graph_convert(g, perm, TPU_I64), &grid);
  Ew I{g, TPU_I64, grid};
  index = I.add(index, I.mul(tpu_graph_iota(g, TPU_I64, &grid, 0), I.k(static_cast<double>(n))));
  tpu_value_t picked =
      gather_slices(g, tpu_graph_reshape(g, b, &rows), 0, tpu_graph_reshape(g, index, &flat));
  return tpu_graph_reshape(g, picked, &s);
}

// x with A x = b (A^T x = b with |transpose|) from A's factors |lu| and permutation |perm|
// (i32 [..., n]); lu, perm and b share their batch dims.
tpu_value_t lu_solve_left(tpu_graph_t *g, tpu_value_t lu, tpu_value_t perm, tpu_value_t b,
                          bool transpose) {
  if (!transpose) {
    tpu_value_t y = solve(g, lu, permute_rows(g, b, perm), true, true, true, false);
    return solve(g, lu, y, true, false, false, false);
  }
  tpu_value_t y = solve(g, lu, b, true, false, false, true);
  tpu_value_t z = solve(g, lu, y, true, true, true, true);
  tpu_shape_t ps = shape_of(g, perm);
  tpu_sort_attrs_t inverse{ps.rank - 1, false, true};  // argsort of a permutation inverts it
  return permute_rows(g, z, tpu_graph_argsort(g, perm, &inverse));
}

// X with op(A) X = B (left) or X op(A) = B, op(A) = A or A^T (adjoint), from A's factors;
// lu [..., n, n], perm [..., n] and b with the same batch dims.
tpu_value_t lu_solve_any(tpu_graph_t *g, tpu_value_t lu, tpu_value_t perm, tpu_value_t b,
                         bool left, bool adjoint) {
  if (left) return lu_solve_left(g, lu, perm, b, adjoint);
  // X A = B <=> A^T X^T = B^T; X A^T = B <=> A X^T = B^T
  return transposed(g, lu_solve_left(g, lu, perm, transposed(g, b), !adjoint));
}

tpu_value_t permutation_of(tpu_graph_t *g, tpu_value_t pivots, int64_t n) {
  return tpu_graph_lu_pivots_to_permutation(g, convert(g, pivots, TPU_I32), n);
}

// The matrix PyTorch's CPU kernels factor for det and slogdet: A^T when A is contiguous
// (LAPACK wants column-major input, and A^T's is A's memory; det(A^T) = det(A)), else A.
// The LU and pivots they return say which, and the backward formulas read them that way
// (they check A.is_contiguous() again), so the lowerings factor the same matrix.
// (linalg.solve factors A itself.)
tpu_value_t factored(const LowerCtx &ctx, tpu_value_t a) {
  return ctx.tensor(0).is_contiguous() ? transposed(ctx.g, a) : a;
}

// linalg_lu_factor_ex(A, *, pivot, check_errors) -> (LU, pivots, info)
void lu_factor_ex(LowerCtx &ctx) {
  if (!ctx.arg(1).toBool() || ctx.arg(2).toBool()) {
    throw Unsupported("linalg_lu_factor_ex(pivot=False or check_errors=True)");
  }
  linalg_operand(ctx, 0, "linalg_lu_factor_ex");
  require_square(ctx, 0, "linalg_lu_factor_ex");
  tpu_value_t lu = tpu_graph_lu(ctx.g, ctx.v(0));
  ctx.results = {lu, tpu_graph_lu_pivots(ctx.g, ctx.v(0)),
                 first_failure_info(ctx.g, lu, ctx.out_shape(2), TPU_CMP_EQ)};
}

// linalg_lu_solve(LU, pivots, B, *, left, adjoint)
void lu_solve(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg_lu_solve");
  require_square(ctx, 0, "linalg_lu_solve");
  if (dtype_of(ctx.g, ctx.v(2)) != dt) throw Unsupported("linalg_lu_solve with mixed dtypes");
  tpu_graph_t *g = ctx.g;
  const bool left = ctx.arg(3).toBool();
  tpu_shape_t out = ctx.out_shape();
  const int64_t n = matrix_size(shape_of(g, ctx.v(0)));
  tpu_value_t lu = broadcast_to(g, ctx.v(0), with_matrix(out, n, n));
  tpu_value_t perm = broadcast_to(g, permutation_of(g, ctx.v(1), n), batch_then(out, 2, {n}));
  ctx.results = {lu_solve_any(g, lu, perm, broadcast_to(g, ctx.v(2), out), left,
                              ctx.arg(4).toBool())};
}

// _linalg_solve_ex(A, B, *, left, check_errors) -> (result, LU, pivots, info)
void solve_ex(LowerCtx &ctx) {
  if (ctx.arg(3).toBool()) throw Unsupported("_linalg_solve_ex(check_errors=True)");
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg.solve");
  require_square(ctx, 0, "linalg.solve");
  if (dtype_of(ctx.g, ctx.v(1)) != dt || ctx.out_dtype() != dt) {
    throw Unsupported("linalg.solve with mixed dtypes");
  }
  tpu_graph_t *g = ctx.g;
  const bool left = ctx.arg(2).toBool();
  tpu_shape_t out = ctx.out_shape(0), lu_shape = ctx.out_shape(1);
  const int64_t n = matrix_size(lu_shape);
  tpu_value_t a = broadcast_to(g, ctx.v(0), lu_shape);
  tpu_value_t lu = tpu_graph_lu(g, a), pivots = tpu_graph_lu_pivots(g, a);
  // a vector right side (result [..., n]) is a one-column matrix
  const bool vector = out.rank == lu_shape.rank - 1;
  tpu_shape_t b_shape = vector ? batch_then(out, 1, {n, 1}) : out;
  if (vector && !left) throw Unsupported("linalg.solve(left=False) of a vector");
  tpu_value_t b = tpu_graph_reshape(g, broadcast_to(g, ctx.v(1), out), &b_shape);
  tpu_shape_t batch_lu = with_matrix(b_shape, n, n);
  tpu_value_t perm = broadcast_to(g, permutation_of(g, pivots, n), batch_then(batch_lu, 2, {n}));
  tpu_value_t x = lu_solve_any(g, broadcast_to(g, lu, batch_lu), perm, b, left, false);
  ctx.results = {tpu_graph_reshape(g, x, &out), lu, pivots,
                 first_failure_info(g, lu, ctx.out_shape(3), TPU_CMP_EQ)};
}

// linalg_inv_ex(A, *, check_errors) -> (inverse, info)
void inv_ex(LowerCtx &ctx) {
  if (ctx.arg(1).toBool()) throw Unsupported("linalg_inv_ex(check_errors=True)");
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg.inv");
  require_square(ctx, 0, "linalg.inv");
  tpu_graph_t *g = ctx.g;
  tpu_value_t a = ctx.v(0);
  tpu_shape_t s = shape_of(g, a);
  tpu_value_t lu = tpu_graph_lu(g, a);
  tpu_value_t perm = permutation_of(g, tpu_graph_lu_pivots(g, a), matrix_size(s));
  ctx.results = {lu_solve_left(g, lu, perm, identity(g, dt, s), false),
                 first_failure_info(g, lu, ctx.out_shape(1), TPU_CMP_EQ)};
}

// +1 or -1 (in |dt|, [...]) for an even or odd number of row swaps in |pivots| [..., n]
tpu_value_t pivot_sign(tpu_graph_t *g, tpu_value_t pivots, tpu_dtype_t dt) {
  tpu_shape_t ps = shape_of(g, pivots);
  Ew I{g, TPU_I32, ps};
  tpu_value_t row = I.add(tpu_graph_iota(g, TPU_I32, &ps, ps.rank - 1), I.k(1));
  tpu_value_t swapped = tpu_graph_convert(g, I.cmp(TPU_CMP_NE, pivots, row), TPU_I32);
  tpu_value_t swaps = reduce_dims(g, TPU_REDUCE_SUM, swapped, {-1}, false);
  Ew B{g, TPU_I32, shape_of(g, swaps)};
  tpu_value_t odd = B.op(TPU_OP_REM, swaps, B.k(2));
  Ew F{g, dt, shape_of(g, swaps)};
  return F.sub(F.k(1), F.mul(F.k(2), tpu_graph_convert(g, odd, dt)));
}

// _linalg_det(A) -> (det, LU, pivots)
void det(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg.det");
  require_square(ctx, 0, "linalg.det");
  tpu_graph_t *g = ctx.g;
  tpu_value_t a = factored(ctx, ctx.v(0));  // det(A^T) = det(A)
  tpu_value_t lu = tpu_graph_lu(g, a), pivots = tpu_graph_lu_pivots(g, a);
  tpu_value_t d = reduce_dims(g, TPU_REDUCE_PROD, diagonal(g, lu), {-1}, false);
  ctx.results = {tpu_graph_binary(g, TPU_OP_MUL, d, pivot_sign(g, pivots, dt)), lu, pivots};
}

// _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots)
void slogdet(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg.slogdet");
  require_square(ctx, 0, "linalg.slogdet");
  tpu_graph_t *g = ctx.g;
  tpu_value_t a = factored(ctx, ctx.v(0));
  tpu_value_t lu = tpu_graph_lu(g, a), pivots = tpu_graph_lu_pivots(g, a);
  tpu_value_t d = diagonal(g, lu);
  tpu_value_t signs = tpu_graph_unary(g, TPU_OP_SIGN, d);
  tpu_value_t sign = reduce_dims(g, TPU_REDUCE_PROD, signs, {-1}, false);
  sign = tpu_graph_binary(g, TPU_OP_MUL, sign, pivot_sign(g, pivots, dt));
  tpu_value_t logabs = tpu_graph_unary(g, TPU_OP_LOG, tpu_graph_unary(g, TPU_OP_ABS, d));
  ctx.results = {sign, reduce_dims(g, TPU_REDUCE_SUM, logabs, {-1}, false), lu, pivots};
}

// (P, L, U) with A = P L U from A's factors |lu| and pivots; P alone or L and U alone
// (the others empty, as PyTorch leaves them) when |data| or |pivots_too| is false.
void unpack(LowerCtx &ctx, tpu_value_t lu, tpu_value_t pivots, bool data = true,
            bool pivots_too = true) {
  tpu_graph_t *g = ctx.g;
  tpu_shape_t s = shape_of(g, lu);
  tpu_dtype_t dt = dtype_of(g, lu);
  const int64_t n = matrix_size(s);
  ctx.results = {full(g, dt, ctx.out_shape(0), 0), full(g, dt, ctx.out_shape(1), 0),
                 full(g, dt, ctx.out_shape(2), 0)};
  if (pivots_too) {
    // P[i][j] = 1 where perm[j] == i: row j of L U is row perm[j] of A
    tpu_shape_t cols = batch_then(s, 2, {1, n});
    tpu_value_t perm_row = tpu_graph_reshape(g, permutation_of(g, pivots, n), &cols);
    tpu_value_t row = tpu_graph_iota(g, TPU_I32, &s, s.rank - 2);
    ctx.results[0] = tpu_graph_convert(
        g, tpu_graph_compare(g, TPU_CMP_EQ, broadcast_to(g, perm_row, s), row), dt);
  }
  if (data) {
    Ew E{g, dt, s};
    tpu_value_t below = E.sel(triangle_mask(g, s, TPU_CMP_GT), lu, E.k(0));
    ctx.results[1] = E.add(below, identity(g, dt, s));
    ctx.results[2] = E.sel(triangle_mask(g, s, TPU_CMP_LE), lu, E.k(0));
  }
}

// linalg_lu(A, *, pivot) -> (P, L, U)
void lu(LowerCtx &ctx) {
  if (!ctx.arg(1).toBool()) throw Unsupported("linalg_lu(pivot=False)");
  linalg_operand(ctx, 0, "linalg.lu");
  require_square(ctx, 0, "linalg.lu");
  unpack(ctx, tpu_graph_lu(ctx.g, ctx.v(0)), tpu_graph_lu_pivots(ctx.g, ctx.v(0)));
}

// lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U)
void lu_unpack(LowerCtx &ctx) {
  linalg_operand(ctx, 0, "lu_unpack");
  require_square(ctx, 0, "lu_unpack");
  unpack(ctx, ctx.v(0), ctx.v(1), ctx.arg(2).toBool(), ctx.arg(3).toBool());
}

LoweringRegistrar registrar({
    {"linalg_lu_factor_ex", lu_factor_ex},
    {"linalg_lu_factor_ex.out", lu_factor_ex},
    {"linalg_lu_solve", lu_solve},
    {"linalg_lu_solve.out", lu_solve},
    {"_linalg_solve_ex", solve_ex},
    {"_linalg_solve_ex.result", solve_ex},
    {"linalg_inv_ex", inv_ex},
    {"linalg_inv_ex.inverse", inv_ex},
    {"_linalg_det", det},
    {"_linalg_det.result", det},
    {"_linalg_slogdet", slogdet},
    {"_linalg_slogdet.sign", slogdet},
    {"linalg_lu", lu},
    {"linalg_lu.out", lu},
    {"lu_unpack", lu_unpack},
    {"lu_unpack.out", lu_unpack},
});

}  // namespace
}  // namespace torchtpu
