// lower_ew.h: a small builder for elementwise lowerings (lower_elementwise.cpp,
// lower_activation.cpp, lower_math.cpp, lower_compat.cpp): operands converted to one compute
// dtype and broadcast to the result shape, and short names for the IR's elementwise ops.
#pragma once

#include <cmath>
#include <initializer_list>
#include <vector>

#include "native.h"

namespace torchtpu {

// Argument |i| (tensor or run-time Scalar) in |dtype| broadcast to |shape|.
inline tpu_value_t operand(LowerCtx &ctx, size_t i, tpu_dtype_t dtype, const tpu_shape_t &shape) {
  return broadcast_to(ctx.g, convert(ctx.g, ctx.v(i), dtype), shape);
}

// Elementwise graph building in one compute dtype |dt| over one result |shape|.
struct Ew {
  tpu_graph_t *g;
  tpu_dtype_t dt;
  tpu_shape_t shape;

  tpu_value_t op(tpu_op_t o, tpu_value_t a, tpu_value_t b) const {
    return tpu_graph_binary(g, o, a, b);
  }
  tpu_value_t un(tpu_op_t o, tpu_value_t a) const { return tpu_graph_unary(g, o, a); }
  tpu_value_t k(double c) const { return full(g, dt, shape, c); }  // a constant
  tpu_value_t cmp(tpu_compare_dir_t d, tpu_value_t a, tpu_value_t b) const {
    return tpu_graph_compare(g, d, a, b);
  }
  tpu_value_t sel(tpu_value_t p, tpu_value_t a, tpu_value_t b) const {
    return tpu_graph_select(g, p, a, b);
  }
  tpu_value_t add(tpu_value_t a, tpu_value_t b) const { return op(TPU_OP_ADD, a, b); }
  tpu_value_t sub(tpu_value_t a, tpu_value_t b) const { return op(TPU_OP_SUB, a, b); }
  tpu_value_t mul(tpu_value_t a, tpu_value_t b) const { return op(TPU_OP_MUL, a, b); }
  tpu_value_t div(tpu_value_t a, tpu_value_t b) const { return op(TPU_OP_DIV, a, b); }
  tpu_value_t isnan(tpu_value_t a) const { return cmp(TPU_CMP_NE, a, a); }
  tpu_value_t isinf(tpu_value_t a) const { return cmp(TPU_CMP_EQ, un(TPU_OP_ABS, a), k(INFINITY)); }
  // true where the sign bit of |x| is set (-0.0 and negative NaNs included); |x| may have
  // another dtype than dt
  tpu_value_t signbit(tpu_value_t x) const {
    tpu_dtype_t xt = dtype_of(g, x);
    if (!tpu_dtype_is_float(xt)) return cmp(TPU_CMP_LT, x, full(g, xt, shape, 0));
    if (xt != TPU_F64) x = convert(g, x, TPU_F32);  // widening keeps the sign bit
    tpu_dtype_t bits = xt == TPU_F64 ? TPU_I64 : TPU_I32;
    return cmp(TPU_CMP_LT, tpu_graph_bitcast_convert(g, x, bits), full(g, bits, shape, 0));
  }
  // Horner's rule: c[0] w^(n-1) + ... + c[n-1]
  tpu_value_t poly(tpu_value_t w, std::initializer_list<double> c) const {
    return poly(w, c.begin(), c.size());
  }
  tpu_value_t poly(tpu_value_t w, const std::vector<double> &c) const {
    return poly(w, c.data(), c.size());
  }
  tpu_value_t poly(tpu_value_t w, const double *c, size_t n) const {
    tpu_value_t p = k(c[0]);
    for (size_t i = 1; i < n; i++) p = add(k(c[i]), mul(p, w));
    return p;
  }
  // log(exp(a) + exp(b)) = max + log1p(exp(-|a - b|)), a when both are the same infinity;
  // with |base2|, log2(2^a + 2^b) = max + log1p(2^-|a - b|) / log(2)
  tpu_value_t logaddexp(tpu_value_t a, tpu_value_t b, bool base2 = false) const {
    tpu_value_t m = op(TPU_OP_MAX, a, b);
    tpu_value_t d = un(TPU_OP_NEG, un(TPU_OP_ABS, sub(a, b)));
    tpu_value_t r = base2 ? add(m, mul(un(TPU_OP_LOG1P, op(TPU_OP_POW, k(2), d)), k(1 / M_LN2)))
                          : add(m, un(TPU_OP_LOG1P, un(TPU_OP_EXP, d)));
    return sel(op(TPU_OP_AND, isinf(a), cmp(TPU_CMP_EQ, a, b)), a, r);
  }
  // x clamped to [lo, hi] by selects, so that a NaN or -0.0 in x stays as it is
  tpu_value_t clamp(tpu_value_t x, tpu_value_t lo, tpu_value_t hi) const {
    x = sel(cmp(TPU_CMP_LT, x, lo), lo, x);
    return sel(cmp(TPU_CMP_GT, x, hi), hi, x);
  }
};

// |magnitude| with the sign bit of |sign|
inline tpu_value_t copy_sign(const Ew &E, tpu_value_t magnitude, tpu_value_t sign) {
  tpu_value_t m = E.un(TPU_OP_ABS, magnitude);
  return E.sel(E.signbit(sign), E.un(TPU_OP_NEG, m), m);
}

// Above this magnitude sinh and cosh are exp(|x|) / 2 to the last bit, computed as
// (exp(|x|/2) / 2) * exp(|x|/2) so that it does not overflow before the result does.
constexpr double kHyperbolicLarge = 20;

// exp(a) / 2 for a >= kHyperbolicLarge, without overflowing early
inline tpu_value_t half_exp_large(const Ew &E, tpu_value_t a) {
  tpu_value_t h = E.un(TPU_OP_EXP, E.mul(a, E.k(0.5)));
  return E.mul(E.mul(h, E.k(0.5)), h);
}

// sinh(x): (e + e / (e + 1)) / 2 with e = expm1(|x|) (no cancellation near 0), signed
inline tpu_value_t sinh_of(const Ew &E, tpu_value_t x) {
  tpu_value_t a = E.un(TPU_OP_ABS, x);
  tpu_value_t e = E.un(TPU_OP_EXPM1, a);
  tpu_value_t r = E.mul(E.k(0.5), E.add(e, E.div(e, E.add(e, E.k(1)))));
  r = E.sel(E.cmp(TPU_CMP_GT, a, E.k(kHyperbolicLarge)), half_exp_large(E, a), r);
  return copy_sign(E, r, x);
}

// cosh(x): (e + 1 / e) / 2 with e = exp(|x|)
inline tpu_value_t cosh_of(const Ew &E, tpu_value_t x) {
  tpu_value_t a = E.un(TPU_OP_ABS, x);
  tpu_value_t e = E.un(TPU_OP_EXP, a);
  tpu_value_t r = E.mul(E.k(0.5), E.add(e, E.div(E.k(1), e)));
  return E.sel(E.cmp(TPU_CMP_GT, a, E.k(kHyperbolicLarge)), half_exp_large(E, a), r);
}

// Floor division as PyTorch defines it for floats and ints.
inline tpu_value_t floor_divide(const Ew &B, tpu_value_t x, tpu_value_t y) {
  if (tpu_dtype_is_float(B.dt)) return B.un(TPU_OP_FLOOR, B.op(TPU_OP_DIV, x, y));
  tpu_value_t q = B.op(TPU_OP_DIV, x, y);  // truncating
  tpu_value_t zero = B.k(0);
  tpu_value_t inexact = B.cmp(TPU_CMP_NE, B.op(TPU_OP_REM, x, y), zero);
  tpu_value_t signs = B.cmp(TPU_CMP_NE, B.cmp(TPU_CMP_LT, x, zero), B.cmp(TPU_CMP_LT, y, zero));
  return B.sel(B.op(TPU_OP_AND, inexact, signs), B.op(TPU_OP_SUB, q, B.k(1)), q);
}

// The builder for result |i| of |ctx|: its compute dtype (f32 for bf16/f16) and shape.
inline Ew ew_for_result(const LowerCtx &ctx, size_t i = 0) {
  return Ew{ctx.g, compute_dtype(ctx.out_dtype(i)), ctx.out_shape(i)};
}

// A unary op's builder (*E, for result 0) and its argument 0 in E's dtype and shape.
inline tpu_value_t unary_input(LowerCtx &ctx, Ew *E) {
  *E = ew_for_result(ctx);
  return operand(ctx, 0, E->dt, E->shape);
}

// unary_input for ops whose CPU kernel takes float32 and float64 only: other result dtypes
// are Unsupported (the fallback gives the CPU's behaviour)
inline tpu_value_t f32_f64_input(LowerCtx &ctx, Ew *E, const char *op) {
  tpu_value_t x = unary_input(ctx, E);
  if (ctx.out_dtype() != TPU_F32 && ctx.out_dtype() != TPU_F64) throw Unsupported(std::string(op) + " in this dtype");
  return x;
}

// ctx.results = {f(x)} for such an op
inline void f32_f64_unary(LowerCtx &ctx, const char *op, tpu_value_t (*f)(const Ew &, tpu_value_t)) {
  Ew E;
  tpu_value_t x = f32_f64_input(ctx, &E, op);
  ctx.results = {f(E, x)};
}

}  // namespace torchtpu
