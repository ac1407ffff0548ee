// lower_bessel.cpp: lowerings of the modified Bessel functions, as ATen's CPU kernels compute
// them (the Cephes Math Library's Chebyshev expansions, bessel_coefficients.h):
//
//   i0, special.i0e           I0(x) and exp(-|x|) I0(x): on |x| <= 8 a series in x/2 - 2,
//                             beyond it one in 32/|x| - 2 over sqrt(|x|)
//   special.i1, special.i1e   I1(x) and exp(-|x|) I1(x) the same way, odd in x; float32
//                             uses ATen's shorter float tables
//   special.modified_bessel_i0, _i1        I0 and I1 again, as those kernels order the
//                             products (i1's tables are the double ones in every dtype)
//   special.modified_bessel_k0, _k1, special.scaled_modified_bessel_k0, _k1
//                             K0, K1 (and exp(x) times them): on (0, 2] a series in x^2 - 2
//                             plus log(x / 2) I0 or I1, beyond it one in 8/x - 2; +inf at 0,
//                             NaN below
// Each is one elementwise program of the Clenshaw recurrence (chebyshev below), with both
// ranges computed and one selected, in f32 (bf16/f16 rounded once, as the CPU upcasts) or
// f64. The modified_bessel family has no half-precision CPU kernel: those calls take the
// fallback, which raises its error.
#include <ATen/core/Tensor.h>

#include <cmath>
#include <vector>

#include "bessel_coefficients.h"
#include "lower_ew.h"

namespace torchtpu {
namespace {

// Cephes' chbevl: sum of c[i] T_i(y / 2), by Clenshaw's recurrence in the CPU's order
tpu_value_t chebyshev(const Ew &E, tpu_value_t y, const std::vector<double> &c) {
  tpu_value_t b0 = E.k(c[0]), b1 = E.k(0), b2 = E.k(0);
  for (size_t i = 1; i < c.size(); i++) {
    b2 = b1;
    b1 = b0;
    b0 = E.add(E.sub(E.mul(y, b1), b2), E.k(c[i]));
  }
  return E.mul(E.k(0.5), E.sub(b0, b2));
}

// The two series of I0 or I1 at |x|: exp(-|x|) I(|x|) times |x| (I1, small range) or over
// sqrt(|x|) (large range), exactly as calc_i0e / calc_i1e form them
struct Series {
  tpu_value_t small, large, is_small;
};
Series series(const Ew &E, tpu_value_t a, const std::vector<double> &A, const std::vector<double> &B) {
  tpu_value_t ys = E.sub(E.div(a, E.k(2)), E.k(2));
  tpu_value_t yl = E.sub(E.div(E.k(32), a), E.k(2));
  return {chebyshev(E, ys, A), chebyshev(E, yl, B), E.cmp(TPU_CMP_LE, a, E.k(8))};
}

const std::vector<double> &i1_table(const Ew &E, bool large) {
  if (E.dt == TPU_F64) return large ? kI1eB : kI1eA;
  return large ? kI1eBf : kI1eAf;
}

tpu_value_t odd(const Ew &E, tpu_value_t x, tpu_value_t r) {
  return E.sel(E.cmp(TPU_CMP_LT, x, E.k(0)), E.un(TPU_OP_NEG, r), r);
}

// i0(x): exp(|x|) * series, over sqrt(|x|) beyond 8 (calc_i0)
tpu_value_t i0(const Ew &E, tpu_value_t x) {
  tpu_value_t a = E.un(TPU_OP_ABS, x), e = E.un(TPU_OP_EXP, a);
  Series s = series(E, a, kI0eA, kI0eB);
  return E.sel(s.is_small, E.mul(e, s.small), E.div(E.mul(e, s.large), E.un(TPU_OP_SQRT, a)));
}

// I1 as modified_bessel_i1_forward orders it: series * |x| * exp(|x|), or exp * series / sqrt
tpu_value_t modified_i1(const Ew &E, tpu_value_t x) {
  tpu_value_t a = E.un(TPU_OP_ABS, x), e = E.un(TPU_OP_EXP, a);
  Series s = series(E, a, kI1eA, kI1eB);
  tpu_value_t r = E.sel(s.is_small, E.mul(E.mul(s.small, a), e),
                        E.div(E.mul(e, s.large), E.un(TPU_OP_SQRT, a)));
  return odd(E, x, r);
}

void i0_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {i0(E, x)};
}

void i0e_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t a = E.un(TPU_OP_ABS, x);
  Series s = series(E, a, kI0eA, kI0eB);
  ctx.results = {E.sel(s.is_small, s.small, E.div(s.large, E.un(TPU_OP_SQRT, a)))};
}

// i1 (calc_i1: exp * |x| * series, or exp * series / sqrt) and i1e (without the exp)
void i1_impl(LowerCtx &ctx, bool scaled) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t a = E.un(TPU_OP_ABS, x);
  Series s = series(E, a, i1_table(E, false), i1_table(E, true));
  tpu_value_t small = s.small, large = E.div(s.large, E.un(TPU_OP_SQRT, a));
  if (scaled) {
    small = E.mul(small, a);
  } else {
    tpu_value_t e = E.un(TPU_OP_EXP, a);
    small = E.mul(E.mul(e, a), small);
    large = E.div(E.mul(e, s.large), E.un(TPU_OP_SQRT, a));
  }
  ctx.results = {odd(E, x, E.sel(s.is_small, small, large))};
}
void i1_out(LowerCtx &ctx) { i1_impl(ctx, false); }
void i1e_out(LowerCtx &ctx) { i1_impl(ctx, true); }

void modified_i0_out(LowerCtx &ctx) { f32_f64_unary(ctx, "special_modified_bessel_i0", i0); }
void modified_i1_out(LowerCtx &ctx) { f32_f64_unary(ctx, "special_modified_bessel_i1", modified_i1); }

// K0 or K1 (order 0 or 1), times exp(x) when |scaled|:
//   x <= 2   order 0: series(x^2 - 2) - log(x/2) I0(x); order 1: log(x/2) I1(x) + series / x
//   x > 2    series(8/x - 2) / sqrt(x), times exp(-x) unless scaled
void k_impl(LowerCtx &ctx, int order, bool scaled, const char *op) {
  Ew E;
  tpu_value_t x = f32_f64_input(ctx, &E, op);
  const std::vector<double> &A = order == 0 ? kK0A : kK1A, &B = order == 0 ? kK0B : kK1B;
  tpu_value_t log_half = E.un(TPU_OP_LOG, E.mul(E.k(0.5), x));
  tpu_value_t near = chebyshev(E, E.sub(E.mul(x, x), E.k(2)), A);
  near = order == 0 ? E.sub(near, E.mul(log_half, i0(E, x)))
                    : E.add(E.mul(log_half, modified_i1(E, x)), E.div(near, x));
  tpu_value_t far = chebyshev(E, E.sub(E.div(E.k(8), x), E.k(2)), B);
  if (scaled) {
    near = E.mul(near, E.un(TPU_OP_EXP, x));
    far = E.div(far, E.un(TPU_OP_SQRT, x));
  } else {
    far = E.div(E.mul(E.un(TPU_OP_EXP, E.un(TPU_OP_NEG, x)), far), E.un(TPU_OP_SQRT, x));
  }
  tpu_value_t r = E.sel(E.cmp(TPU_CMP_LE, x, E.k(2)), near, far);
  r = E.sel(E.cmp(TPU_CMP_LT, x, E.k(0)), E.k(NAN), r);
  ctx.results = {E.sel(E.cmp(TPU_CMP_EQ, x, E.k(0)), E.k(INFINITY), r)};
}
void k0_out(LowerCtx &ctx) { k_impl(ctx, 0, false, "special_modified_bessel_k0"); }
void k1_out(LowerCtx &ctx) { k_impl(ctx, 1, false, "special_modified_bessel_k1"); }
void scaled_k0_out(LowerCtx &ctx) { k_impl(ctx, 0, true, "special_scaled_modified_bessel_k0"); }
void scaled_k1_out(LowerCtx &ctx) { k_impl(ctx, 1, true, "special_scaled_modified_bessel_k1"); }

LoweringRegistrar registrar({
    {"i0.out", i0_out},
    {"special_i0e.out", i0e_out},
    {"special_i1.out", i1_out},
    {"special_i1e.out", i1e_out},
    {"special_modified_bessel_i0.out", modified_i0_out},
    {"special_modified_bessel_i1.out", modified_i1_out},
    {"special_modified_bessel_k0.out", k0_out},
    {"special_modified_bessel_k1.out", k1_out},
    {"special_scaled_modified_bessel_k0.out", scaled_k0_out},
    {"special_scaled_modified_bessel_k1.out", scaled_k1_out},
});

}  // namespace
}  // namespace torchtpu
