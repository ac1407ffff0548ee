// lower_linalg.h: what the linear-algebra lowerings share (lower_linalg.cpp: the Cholesky
// family; lower_lu.cpp: the LU family; lower_qr.cpp: the QR family; lower_eigh.cpp, lower_svd.cpp).
#pragma once

#include <algorithm>
#include <string>
#include <utility>

#include "lower_ew.h"

namespace torchtpu {

// Matrices [..., m, n] whose factorization costs more than this many multiply-adds each
// (m n min(m, n): 256 x 256) take the CPU fallback: the kernels are unblocked f64 loops,
// 5-10x slower than LAPACK's blocked ones at that size, so past it the fallback's round trip
// costs less than the difference (a 1024 x 1024 nn.init.orthogonal_ would take half a
// second natively).
constexpr double kLinalgNativeWork = 16777216.0;

// Checks argument |arg|, the matrices op factors or solves with: f32 or f64 (other dtypes
// take the CPU fallback, whose kernels give PyTorch's errors for bf16/f16) and within
// kLinalgNativeWork. Returns its dtype.
inline tpu_dtype_t linalg_operand(const LowerCtx &ctx, size_t arg, const char *op) {
  tpu_dtype_t dt = dtype_of(ctx.g, ctx.v(arg));
  if (dt != TPU_F32 && dt != TPU_F64) {
    throw Unsupported(std::string(op) + " of a non-f32/f64 tensor");
  }
  tpu_shape_t s = shape_of(ctx.g, ctx.v(arg));
  if (s.rank >= 2) {
    double m = static_cast<double>(s.dims[s.rank - 2]), n = static_cast<double>(s.dims[s.rank - 1]);
    if (m * n * std::min(m, n) > kLinalgNativeWork) {
      throw Unsupported(std::string(op) + " of matrices above the native size limit");
    }
  }
  return dt;
}

// |shape| with its last two dims replaced by |rows| x |cols|.
inline tpu_shape_t with_matrix(tpu_shape_t shape, int64_t rows, int64_t cols) {
  shape.dims[shape.rank - 2] = rows;
  shape.dims[shape.rank - 1] = cols;
  return shape;
}

// |x| [..., r, c] -> [..., c, r]
inline tpu_value_t transposed(tpu_graph_t *g, tpu_value_t x) {
  tpu_shape_t s = shape_of(g, x);
  int64_t perm[TPU_MAX_RANK];
  for (int d = 0; d < s.rank; d++) perm[d] = d;
  std::swap(perm[s.rank - 1], perm[s.rank - 2]);
  return tpu_graph_transpose(g, x, perm);
}

// Rows first_row .. first_row + rows - 1 and the first |cols| columns of matrices |x|.
inline tpu_value_t block(tpu_graph_t *g, tpu_value_t x, int64_t first_row, int64_t rows,
                         int64_t cols) {
  tpu_shape_t s = shape_of(g, x);
  if (first_row == 0 && s.dims[s.rank - 2] == rows && s.dims[s.rank - 1] == cols) return x;
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], stride[TPU_MAX_RANK];
  for (int d = 0; d < s.rank; d++) {
    limit[d] = s.dims[d];
    stride[d] = 1;
  }
  start[s.rank - 2] = first_row;
  limit[s.rank - 2] = first_row + rows;
  limit[s.rank - 1] = cols;
  return tpu_graph_slice(g, x, start, limit, stride);
}

// Rows first_row .. first_row + rows - 1 of matrices |x|.
inline tpu_value_t rows_of(tpu_graph_t *g, tpu_value_t x, int64_t first_row, int64_t rows) {
  tpu_shape_t s = shape_of(g, x);
  return block(g, x, first_row, rows, s.dims[s.rank - 1]);
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
