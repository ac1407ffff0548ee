// lower_linalg.h: what the linear-algebra lowerings share (lower_linalg.cpp: the Cholesky
// family; lower_lu.cpp: the LU family).
#pragma once

#include <string>

#include "lower_ew.h"

namespace torchtpu {

// Argument |arg|'s dtype, f32 or f64; other dtypes take the CPU fallback (whose kernels
// give PyTorch's errors for bf16/f16).
inline tpu_dtype_t linalg_dtype(const LowerCtx &ctx, size_t arg, const char *op) {
  tpu_dtype_t dt = dtype_of(ctx.g, ctx.v(arg));
  if (dt != TPU_F32 && dt != TPU_F64) {
    throw Unsupported(std::string(op) + " of a non-f32/f64 tensor");
  }
  return dt;
}

// |shape| with its last two dims replaced by |rows| x |cols|.
inline tpu_shape_t with_matrix(tpu_shape_t shape, int64_t rows, int64_t cols) {
  shape.dims[shape.rank - 2] = rows;
  shape.dims[shape.rank - 1] = cols;
  return shape;
}

// Identity matrices of |s| in |dt|.
inline tpu_value_t identity(tpu_graph_t *g, tpu_dtype_t dt, const tpu_shape_t &s) {
  return tpu_graph_convert(g, main_diagonal(g, s), dt);
}

inline tpu_value_t solve(tpu_graph_t *g, tpu_value_t a, tpu_value_t b, bool left, bool lower,
                         bool unit, bool transpose) {
  tpu_triangular_solve_attrs_t attrs = {left, lower, unit, transpose};
  return tpu_graph_triangular_solve(g, a, b, &attrs);
}

// The diagonals of matrices |m| [..., n, n] -> [..., n]: every (n+1)-th element.
tpu_value_t diagonal(tpu_graph_t *g, tpu_value_t m);

// LAPACK's info (i32 of |info_shape|): 1 + the first diagonal element d of the factors |m|
// with compare(d, d or 0) true (NE: NaN, Cholesky's failed pivot; EQ: LU's zero pivot),
// or 0.
tpu_value_t first_failure_info(tpu_graph_t *g, tpu_value_t m, const tpu_shape_t &info_shape,
                               tpu_compare_dir_t nan_or_zero);

}  // namespace torchtpu
