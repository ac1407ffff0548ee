// lower_math.cpp: lowerings of torch's elementwise math functions that the IR has no single op
// for, composed from the ones it has (the way XLA's client library builds them):
//   trigonometric and hyperbolic: atan, asin, acos, sinh, cosh, asinh, acosh, atanh, sinc
//   exponents and logs: exp2, log10, logaddexp, logaddexp2; erfinv
//   float classification and repair: signbit, copysign, nan_to_num, frac, fmax, fmin,
//   heaviside, hypot, round(decimals=), angle (of real numbers)
// Each is written to stay accurate where the textbook formula is not: expm1/log1p forms near
// zero, a scaled form for large magnitudes, and NaN/infinity cases as in C's libm (which
// PyTorch's CPU kernels call). Math runs in f32 for bf16/f16 (the vector unit is 32-bit) and
// the engine rounds the result once.
#include <ATen/core/Tensor.h>

#include <cfloat>
#include <cmath>

#include "lower_ew.h"

namespace torchtpu {
namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLn10 = 2.30258509299404568402;
constexpr double kPi = 3.14159265358979323846;
// Above this magnitude sqrt(x^2 + 1) is |x| in f32 and f64 arithmetic alike: asinh and acosh
// are log(|x|) + log(2) (and x^2 would overflow for large enough x).
constexpr double kSquareNegligible = 1e8;

void atan_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {E.op(TPU_OP_ATAN2, x, E.k(1))};
}

// sqrt(1 - x^2) as sqrt((1 - x)(1 + x)), exact near |x| = 1
tpu_value_t cos_of_asin(const Ew &E, tpu_value_t x) {
  return E.un(TPU_OP_SQRT, E.mul(E.sub(E.k(1), x), E.add(E.k(1), x)));
}

void asin_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {E.op(TPU_OP_ATAN2, x, cos_of_asin(E, x))};
}

void acos_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {E.op(TPU_OP_ATAN2, cos_of_asin(E, x), x)};
}

void sinh_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {sinh_of(E, x)};
}

void cosh_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {cosh_of(E, x)};
}

// log(x) + log(2) for x past kSquareNegligible, where the square-root forms overflow
tpu_value_t log_2x(const Ew &E, tpu_value_t x) { return E.add(E.un(TPU_OP_LOG, x), E.k(kLn2)); }

// asinh(|x|) = log1p(a + a^2 / (1 + sqrt(1 + a^2))), signed
void asinh_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t a = E.un(TPU_OP_ABS, x);
  tpu_value_t a2 = E.mul(a, a);
  tpu_value_t r = E.un(TPU_OP_LOG1P,
                       E.add(a, E.div(a2, E.add(E.k(1), E.un(TPU_OP_SQRT, E.add(E.k(1), a2))))));
  r = E.sel(E.cmp(TPU_CMP_GT, a, E.k(kSquareNegligible)), log_2x(E, a), r);
  ctx.results = {copy_sign(E, r, x)};
}

// acosh(x) = log1p((x - 1) + sqrt((x - 1)(x + 1))); NaN below 1
void acosh_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t xm1 = E.sub(x, E.k(1));
  tpu_value_t r = E.un(TPU_OP_LOG1P, E.add(xm1, E.un(TPU_OP_SQRT, E.mul(xm1, E.add(x, E.k(1))))));
  r = E.sel(E.cmp(TPU_CMP_GT, x, E.k(kSquareNegligible)), log_2x(E, x), r);
  ctx.results = {E.sel(E.cmp(TPU_CMP_LT, x, E.k(1)), E.k(NAN), r)};
}

// atanh(|x|) = log1p(2a / (1 - a)) / 2, signed (inf at 1, NaN past it)
void atanh_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t a = E.un(TPU_OP_ABS, x);
  tpu_value_t r = E.mul(E.k(0.5), E.un(TPU_OP_LOG1P, E.div(E.mul(E.k(2), a), E.sub(E.k(1), a))));
  ctx.results = {copy_sign(E, r, x)};
}

// sinc(x) = sin(pi x) / (pi x), 1 at 0
void sinc_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t px = E.mul(x, E.k(kPi));
  ctx.results = {E.sel(E.cmp(TPU_CMP_EQ, x, E.k(0)), E.k(1), E.div(E.un(TPU_OP_SIN, px), px))};
}

void exp2_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {E.op(TPU_OP_POW, E.k(2), x)};
}

void log10_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {E.div(E.un(TPU_OP_LOG, x), E.k(kLn10))};
}

// erfinv(y): M. Giles' single-precision approximation ("Approximating the erfinv function",
// GPU Computing Gems, 2011; XLA's float erfinv), a polynomial in w = -log(1 - y^2) on two
// ranges, then Newton steps on erf(x) = y, as PyTorch's calc_erfinv refines its own starting
// point: two for f32, three to bring f64 to full precision in the tails. +-inf at +-1, NaN
// beyond.
void erfinv_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t y = unary_input(ctx, &E);
  tpu_value_t w = E.un(TPU_OP_NEG, E.un(TPU_OP_LOG, E.mul(E.sub(E.k(1), y), E.add(E.k(1), y))));
  tpu_value_t central = E.poly(E.sub(w, E.k(2.5)),
                                   {2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                                    0.00021858087, -0.00125372503, -0.00417768164, 0.246640727,
                                    1.50140941});
  tpu_value_t tail = E.poly(E.sub(E.un(TPU_OP_SQRT, w), E.k(3)),
                                {-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                                 0.00573950773, -0.0076224613, 0.00943887047, 1.00167406,
                                 2.83297682});
  tpu_value_t x = E.mul(E.sel(E.cmp(TPU_CMP_LT, w, E.k(5)), central, tail), y);
  const double two_over_sqrt_pi = 1.12837916709551257390;
  const int newton_steps = E.dt == TPU_F64 ? 3 : 2;
  for (int step = 0; step < newton_steps; step++) {  // x -= (erf(x) - y) / erf'(x)
    tpu_value_t slope = E.mul(E.k(two_over_sqrt_pi), E.un(TPU_OP_EXP, E.un(TPU_OP_NEG, E.mul(x, x))));
    x = E.sub(x, E.div(E.sub(E.un(TPU_OP_ERF, x), y), slope));
  }
  tpu_value_t edge = E.cmp(TPU_CMP_EQ, E.un(TPU_OP_ABS, y), E.k(1));
  ctx.results = {E.sel(edge, E.mul(y, E.k(INFINITY)), x)};
}

// Binary op on arguments 0 and 1 in the result's compute dtype (the promoted dtype, or the
// float dtype of an op whose result is always float).
struct TwoArgs {
  Ew E;
  tpu_value_t a, b;
};
TwoArgs binary(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  return {E, operand(ctx, 0, E.dt, E.shape), operand(ctx, 1, E.dt, E.shape)};
}

// logaddexp in base e or (logaddexp2) base 2
void logaddexp_base(LowerCtx &ctx, bool base2) {
  auto [E, a, b] = binary(ctx);
  ctx.results = {E.logaddexp(a, b, base2)};
}
void logaddexp_out(LowerCtx &ctx) { logaddexp_base(ctx, false); }
void logaddexp2_out(LowerCtx &ctx) { logaddexp_base(ctx, true); }

void signbit_out(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  Ew E{ctx.g, dtype_of(ctx.g, x), ctx.out_shape()};
  ctx.results = {E.signbit(x)};
}

void copysign_out(LowerCtx &ctx) {
  auto [E, a, b] = binary(ctx);
  ctx.results = {copy_sign(E, a, b)};
}

// The largest finite value of a float dtype.
double max_finite(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_F64: return DBL_MAX;
    case TPU_F32: return FLT_MAX;
    case TPU_BF16: return 3.38953138925153547590470800371487866880e+38;
    case TPU_F16: return 65504.0;
    default: throw Unsupported("nan_to_num: not a float dtype");
  }
}

// nan_to_num(self, nan, posinf, neginf): the replacements default to 0 and the dtype's
// largest and lowest finite values; integers are returned as they are.
void nan_to_num_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_dtype_t dt = ctx.out_dtype();
  if (!tpu_dtype_is_float(dt)) {
    ctx.results = {x};
    return;
  }
  auto given = [&](size_t i, double fallback) {
    return ctx.arg(i).isNone() ? fallback : ctx.arg(i).toDouble();
  };
  const double nan = given(1, 0), posinf = given(2, max_finite(dt)), neginf = given(3, -max_finite(dt));
  x = E.sel(E.isnan(x), E.k(nan), x);
  x = E.sel(E.cmp(TPU_CMP_EQ, x, E.k(INFINITY)), E.k(posinf), x);
  ctx.results = {E.sel(E.cmp(TPU_CMP_EQ, x, E.k(-INFINITY)), E.k(neginf), x)};
}

// frac(x) = x - trunc(x)
void frac_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t t = E.sel(E.cmp(TPU_CMP_LT, x, E.k(0)), E.un(TPU_OP_CEIL, x), E.un(TPU_OP_FLOOR, x));
  ctx.results = {E.sub(x, t)};
}

// fmax / fmin: like maximum / minimum, but a NaN loses to a number
void fmax_fmin(LowerCtx &ctx, tpu_op_t op) {
  auto [E, a, b] = binary(ctx);
  tpu_value_t r = E.op(op, a, b);
  if (tpu_dtype_is_float(E.dt)) r = E.sel(E.isnan(a), b, E.sel(E.isnan(b), a, r));
  ctx.results = {r};
}
void fmax_out(LowerCtx &ctx) { fmax_fmin(ctx, TPU_OP_MAX); }
void fmin_out(LowerCtx &ctx) { fmax_fmin(ctx, TPU_OP_MIN); }

// heaviside(self, values): values where x == 0, else x > 0 (0 for NaN)
void heaviside_out(LowerCtx &ctx) {
  auto [E, x, v] = binary(ctx);
  if (E.dt == TPU_BOOL) throw Unsupported("heaviside of bool tensors");
  tpu_value_t step = E.sel(E.cmp(TPU_CMP_GT, x, E.k(0)), E.k(1), E.k(0));
  ctx.results = {E.sel(E.cmp(TPU_CMP_EQ, x, E.k(0)), v, step)};
}

// hypot(a, b) = m sqrt(1 + (n / m)^2), m = max(|a|, |b|), n = min: no overflow or underflow
// in the squares. 0 when both are 0; infinity when either is infinite, even with a NaN.
void hypot_out(LowerCtx &ctx) {
  auto [E, a, b] = binary(ctx);
  tpu_value_t x = E.un(TPU_OP_ABS, a), y = E.un(TPU_OP_ABS, b);
  tpu_value_t m = E.op(TPU_OP_MAX, x, y), n = E.op(TPU_OP_MIN, x, y);
  tpu_value_t q = E.div(n, m);
  tpu_value_t r = E.mul(m, E.un(TPU_OP_SQRT, E.add(E.k(1), E.mul(q, q))));
  r = E.sel(E.cmp(TPU_CMP_EQ, m, E.k(0)), E.k(0), r);
  ctx.results = {E.sel(E.op(TPU_OP_OR, E.isinf(a), E.isinf(b)), E.k(INFINITY), r)};
}

// angle of a real number: pi below 0, else 0 (NaN stays NaN); float for integers
void angle(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t r = E.sel(E.cmp(TPU_CMP_LT, x, E.k(0)), E.k(kPi), E.k(0));
  ctx.results = {tpu_dtype_is_float(E.dt) ? E.sel(E.isnan(x), x, r) : r};
}

// round.decimals_out(self, decimals, out): round half to even at 10^-decimals, as ATen:
// rint(x * 10^d) / 10^d, or for negative d rint(x / 10^-d) * 10^-d.
void round_decimals(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  const int64_t d = ctx.arg(1).toInt();
  if (!tpu_dtype_is_float(E.dt)) throw Unsupported("round with decimals of an integer tensor");
  tpu_value_t p = E.k(std::pow(10.0, static_cast<double>(d < 0 ? -d : d)));
  tpu_value_t r = d >= 0 ? E.div(E.un(TPU_OP_ROUND_EVEN, E.mul(x, p)), p)
                         : E.mul(E.un(TPU_OP_ROUND_EVEN, E.div(x, p)), p);
  ctx.results = {r};
}

LoweringRegistrar registrar({
    {"atan.out", atan_out},
    {"asin.out", asin_out},
    {"acos.out", acos_out},
    {"sinh.out", sinh_out},
    {"cosh.out", cosh_out},
    {"asinh.out", asinh_out},
    {"acosh.out", acosh_out},
    {"atanh.out", atanh_out},
    {"sinc.out", sinc_out},
    {"exp2.out", exp2_out},
    {"log10.out", log10_out},
    {"erfinv.out", erfinv_out},
    {"logaddexp.out", logaddexp_out},
    {"logaddexp2.out", logaddexp2_out},
    {"signbit.out", signbit_out},
    {"copysign.out", copysign_out},
    {"nan_to_num.out", nan_to_num_out},
    {"frac.out", frac_out},
    {"fmax.out", fmax_out},
    {"fmin.out", fmin_out},
    {"heaviside.out", heaviside_out},
    {"hypot.out", hypot_out},
    {"round.decimals_out", round_decimals},
    {"angle", angle},
    {"angle.out", angle},
});

}  // namespace
}  // namespace torchtpu
