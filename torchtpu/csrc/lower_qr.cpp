// lower_qr.cpp: lowerings of the QR family onto the IR's GEQRF (LAPACK's geqrf: the packed
// factors with tau as one more row) and HOUSEHOLDER_PRODUCT (orgqr; kernels in qr.c). The
// CPU computes torch.linalg.qr the same way (geqrf, then orgqr on the reflectors), so Q and
// R come out with the CPU's signs, not only up to them.
//   geqrf                        (a, tau): R and the reflectors packed, and their scales
//   linalg_householder_product   Q's first n columns from the reflectors (torch.orgqr)
//   linalg_qr                    mode "reduced" (Q m x k, R k x n), "complete" (Q m x m,
//                                R m x n) or "r" (R only, Q empty), k = min(m, n)
//   ormqr                        Q C, Q^T C, C Q or C Q^T with Q from the reflectors
// f32 and f64 only, and matrices within kLinalgNativeWork (lower_linalg.h): the others take
// the CPU fallback (which gives PyTorch's errors). The
// backward formulas of linalg_qr and householder_product are matmuls, triangular solves and
// masks, all native. nn.init.orthogonal_ is linalg.qr, so it runs on the device too.
#include <ATen/core/Tensor.h>

#include "lower_linalg.h"

namespace torchtpu {
namespace {

tpu_value_t leading_block(tpu_graph_t *g, tpu_value_t x, int64_t rows, int64_t cols) {
  return block(g, x, 0, rows, cols);
}

// The QR of matrices a [..., m, n]: geqrf's packed factors [..., m, n] and tau [..., k],
// both from one GEQRF.
struct Factors {
  tpu_value_t packed, tau;
};

Factors factor(tpu_graph_t *g, tpu_value_t a) {
  tpu_shape_t s = shape_of(g, a);
  const int64_t m = s.dims[s.rank - 2], n = s.dims[s.rank - 1], k = std::min(m, n);
  tpu_value_t f = tpu_graph_geqrf(g, a);
  tpu_shape_t tau_shape = s;
  tau_shape.rank--;
  tau_shape.dims[tau_shape.rank - 1] = k;
  return {leading_block(g, f, m, n), tpu_graph_reshape(g, block(g, f, m, 1, k), &tau_shape)};
}

// |x| [..., r, c] with zero columns appended up to |cols|.
tpu_value_t zero_columns_to(tpu_graph_t *g, tpu_value_t x, int64_t cols) {
  tpu_shape_t s = shape_of(g, x);
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0}, interior[TPU_MAX_RANK] = {0};
  hi[s.rank - 1] = cols - s.dims[s.rank - 1];
  if (hi[s.rank - 1] == 0) return x;
  return tpu_graph_pad(g, x, scalar_const(g, dtype_of(g, x), 0), lo, hi, interior);
}

// The upper triangle of |x| (on and above the diagonal), zeros below.
tpu_value_t upper(tpu_graph_t *g, tpu_value_t x) {
  tpu_shape_t s = shape_of(g, x);
  Ew E{g, dtype_of(g, x), s};
  return E.sel(triangle_mask(g, s, TPU_CMP_LE), x, E.k(0));
}

// Q [..., m, m] (|full|) or its first n columns, from reflectors |v| [..., m, n] and tau.
tpu_value_t form_q(tpu_graph_t *g, tpu_value_t v, tpu_value_t tau, bool full) {
  tpu_shape_t s = shape_of(g, v);
  const int64_t m = s.dims[s.rank - 2], n = s.dims[s.rank - 1];
  if (full) v = zero_columns_to(g, v, m);
  else if (n > m) v = leading_block(g, v, m, m);  // a wide QR's reflectors: its first m columns
  return tpu_graph_householder_product(g, v, tau);
}

// geqrf(self) -> (a, tau)
void geqrf(LowerCtx &ctx) {
  linalg_operand(ctx, 0, "geqrf");
  Factors f = factor(ctx.g, ctx.v(0));
  ctx.results = {f.packed, f.tau};
}

// linalg_householder_product(input, tau)
void householder_product(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg.householder_product");
  if (dtype_of(ctx.g, ctx.v(1)) != dt) {
    throw Unsupported("linalg.householder_product with mixed dtypes");  // CPU: its error
  }
  tpu_shape_t s = shape_of(ctx.g, ctx.v(0)), t = shape_of(ctx.g, ctx.v(1));
  // the CPU's checks (m >= n >= k, tau's batch dims) raise from the fallback
  if (s.rank < 2 || t.rank != s.rank - 1 || s.dims[s.rank - 2] < s.dims[s.rank - 1] ||
      t.dims[t.rank - 1] > s.dims[s.rank - 1]) {
    throw Unsupported("linalg.householder_product of mismatched operands");
  }
  for (int d = 0; d < s.rank - 2; d++) {
    if (t.dims[d] != s.dims[d]) throw Unsupported("linalg.householder_product batch dims");
  }
  ctx.results = {tpu_graph_householder_product(ctx.g, ctx.v(0), ctx.v(1))};
}

// linalg_qr(A, mode) -> (Q, R)
void qr(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg.qr");
  const std::string &mode = ctx.arg(1).toStringRef();
  if (mode != "reduced" && mode != "complete" && mode != "r") {
    throw Unsupported("linalg.qr mode " + mode);  // the CPU fallback raises its error
  }
  tpu_graph_t *g = ctx.g;
  tpu_value_t a = ctx.v(0);
  tpu_shape_t s = shape_of(g, a);
  const int64_t m = s.dims[s.rank - 2], n = s.dims[s.rank - 1], k = std::min(m, n);
  Factors f = factor(g, a);
  const int64_t r_rows = mode == "complete" ? m : k;
  ctx.results = {full(g, dt, ctx.out_shape(0), 0), upper(g, leading_block(g, f.packed, r_rows, n))};
  if (mode != "r" && numel(s) > 0) {
    ctx.results[0] = form_q(g, f.packed, f.tau, mode == "complete");
  } else if (mode != "r") {  // empty A: Q is the identity's columns
    ctx.results[0] = identity(g, dt, ctx.out_shape(0));
  }
}

// ormqr(input, tau, other, left, transpose): op(Q) C (left) or C op(Q), Q m x m from the
// reflectors input [..., m, k'] and tau [..., k]
void ormqr(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "ormqr");
  tpu_graph_t *g = ctx.g;
  tpu_shape_t s = shape_of(g, ctx.v(0)), t = shape_of(g, ctx.v(1)), c = shape_of(g, ctx.v(2));
  if (dtype_of(g, ctx.v(1)) != dt || dtype_of(g, ctx.v(2)) != dt || c.rank != s.rank ||
      t.rank != s.rank - 1 || s.dims[s.rank - 2] < t.dims[t.rank - 1] ||
      s.dims[s.rank - 1] < t.dims[t.rank - 1]) {  // tau longer than the reflectors
    throw Unsupported("ormqr of mismatched operands");  // the CPU fallback raises its error
  }
  const bool left = ctx.arg(3).toBool(), transpose = ctx.arg(4).toBool();
  const int64_t m = s.dims[s.rank - 2];
  if (c.dims[c.rank - (left ? 2 : 1)] != m) throw Unsupported("ormqr of mismatched operands");
  for (int d = 0; d < s.rank - 2; d++) {
    if (t.dims[d] != s.dims[d] || c.dims[d] != s.dims[d]) throw Unsupported("ormqr batch dims");
  }
  if (numel(c) == 0) {
    ctx.results = {full(g, dt, ctx.out_shape(), 0)};
    return;
  }
  tpu_value_t v = leading_block(g, ctx.v(0), m, std::min(m, s.dims[s.rank - 1]));
  tpu_value_t q = tpu_graph_householder_product(g, zero_columns_to(g, v, m), ctx.v(1));
  tpu_value_t lhs = left ? q : ctx.v(2), rhs = left ? ctx.v(2) : q;
  // a batched product over the leading dims in full f32 (LAPACK's ormqr is not an MXU
  // matmul): Q^T C contracts Q's rows, C Q^T C's columns with Q's columns; the result has
  // lhs's free dim first, as wanted
  tpu_dot_attrs_t d{};
  const int r = s.rank;
  d.num_batch = r - 2;
  for (int i = 0; i < r - 2; i++) d.lhs_batch[i] = d.rhs_batch[i] = i;
  d.num_contract = 1;
  d.lhs_contract[0] = left && transpose ? r - 2 : r - 1;
  d.rhs_contract[0] = !left && transpose ? r - 1 : r - 2;
  d.precision = TPU_PRECISION_HIGHEST;
  ctx.results = {tpu_graph_dot_general(g, lhs, rhs, &d, dt)};
}

LoweringRegistrar registrar({
    {"geqrf", geqrf},
    {"geqrf.a", geqrf},
    {"linalg_householder_product", householder_product},
    {"linalg_householder_product.out", householder_product},
    {"linalg_qr", qr},
    {"linalg_qr.out", qr},
    {"ormqr", ormqr},
    {"ormqr.out", ormqr},
});

}  // namespace
}  // namespace torchtpu
