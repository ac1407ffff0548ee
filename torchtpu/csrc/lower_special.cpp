// lower_special.cpp: lowerings of the special functions that probability distributions and
// their gradients use (lgamma, digamma, polygamma of order 0 and 1) and of the complementary
// error function family (erfc, special.erfcx, special.log_ndtr), plus special.entr.
//
//   lgamma      Lanczos' approximation (g = 7, 9 terms: about 1e-15 relative in f64) for
//               x >= 0.5, the reflection formula below; +inf at poles and at +-inf
//   digamma     ATen's own algorithm (calc_digamma): reflection for x < 0, the recurrence
//               psi(x) = psi(x + 1) - 1/x up to x >= 10, then the asymptotic series
//   trigamma    ATen's calc_trigamma, step for step (polygamma(1, x), digamma's derivative)
//   erfc        1 - erf(x) for |x| < 1, else exp(-x^2) P(1/x^2) / x (Cephes' erfcf
//               rationals, about 3e-8 relative), exp(-x^2) from a split square
//   erfcx       exp(x^2) erfc(x): P(1/x^2) / x for x >= 1, no exponential at all
//   log_ndtr    ATen's calc_log_ndtr over the two above
// The erfc family is float32-accurate only, so a float64 call of it runs on the CPU
// fallback; everything else is float64-accurate. bf16/f16 compute in f32 and round once.
#include <ATen/core/Tensor.h>

#include <cmath>

#include "lower_ew.h"

namespace torchtpu {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kLogPi = 1.14472988584940017414;
constexpr double kHalfLog2Pi = 0.91893853320467274178;

// log|Gamma(x)| for x >= 0.5: Lanczos with g = 7 and the usual 9 coefficients
tpu_value_t lanczos_lgamma(const Ew &E, tpu_value_t x) {
  static const double c[] = {0.99999999999980993,  676.5203681218851,     -1259.1392167224028,
                             771.32342877765313,   -176.61502916214059,   12.507343278686905,
                             -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7};
  const double g = 7;
  tpu_value_t z = E.sub(x, E.k(1));
  tpu_value_t a = E.k(c[0]);
  for (int i = 1; i < 9; i++) a = E.add(a, E.div(E.k(c[i]), E.add(z, E.k(i))));
  tpu_value_t t = E.add(z, E.k(g + 0.5));
  tpu_value_t r = E.sub(E.mul(E.add(z, E.k(0.5)), E.un(TPU_OP_LOG, t)), t);
  return E.add(E.add(E.k(kHalfLog2Pi), r), E.un(TPU_OP_LOG, a));
}

// lgamma(x); below 0.5 by reflection: log(pi / |sin(pi x)|) - lgamma(1 - x), with
// |sin(pi x)| = sin(pi d) for d = |x - round(x)| in [0, 0.5] (exact argument reduction)
void lgamma_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t reflect = E.cmp(TPU_CMP_LT, x, E.k(0.5));
  tpu_value_t direct = lanczos_lgamma(E, E.sel(reflect, E.sub(E.k(1), x), x));
  tpu_value_t d = E.un(TPU_OP_ABS, E.sub(x, E.un(TPU_OP_FLOOR, E.add(x, E.k(0.5)))));
  tpu_value_t log_sin = E.un(TPU_OP_LOG, E.un(TPU_OP_SIN, E.mul(d, E.k(kPi))));
  tpu_value_t reflected = E.sub(E.sub(E.k(kLogPi), log_sin), direct);
  ctx.results = {E.sel(E.isinf(x), E.k(INFINITY), E.sel(reflect, reflected, direct))};
}

// digamma(x) as ATen's calc_digamma computes it
tpu_value_t digamma(const Ew &E, tpu_value_t x) {
  const double psi_10 = 2.25175258906672110764;  // digamma(10)
  tpu_value_t negative = E.cmp(TPU_CMP_LT, x, E.k(0));
  tpu_value_t whole = E.sel(negative, E.un(TPU_OP_CEIL, x), E.un(TPU_OP_FLOOR, x));
  // pi / tan(pi x): tan has period pi, so x is reduced exactly to [-0.5, 0.5] first, which
  // keeps pi x accurate next to the poles
  tpu_value_t reduced = E.sub(x, E.un(TPU_OP_FLOOR, E.add(x, E.k(0.5))));
  tpu_value_t pi_over_tan = E.div(E.k(kPi), E.un(TPU_OP_TAN, E.mul(reduced, E.k(kPi))));
  tpu_value_t y = E.sel(negative, E.sub(E.k(1), x), x);
  tpu_value_t sum = E.k(0);
  for (int i = 0; i < 10; i++) {  // while (y < 10) { sum -= 1 / y; y += 1; }
    tpu_value_t below = E.cmp(TPU_CMP_LT, y, E.k(10));
    sum = E.sel(below, E.sub(sum, E.div(E.k(1), y)), sum);
    y = E.sel(below, E.add(y, E.k(1)), y);
  }
  tpu_value_t z = E.div(E.k(1), E.mul(y, y));
  tpu_value_t series = E.mul(z, E.poly(z, {8.33333333333333333333E-2, -2.10927960927960927961E-2,
                                           7.57575757575757575758E-3, -4.16666666666666666667E-3,
                                           3.96825396825396825397E-3, -8.33333333333333333333E-3,
                                           8.33333333333333333333E-2}));
  series = E.sel(E.cmp(TPU_CMP_LT, y, E.k(1e17)), series, E.k(0));
  tpu_value_t r = E.sub(E.sub(E.add(sum, E.un(TPU_OP_LOG, y)), E.div(E.k(0.5), y)), series);
  r = E.sel(E.cmp(TPU_CMP_EQ, y, E.k(10)), E.add(sum, E.k(psi_10)), r);
  r = E.sel(negative, E.sub(r, pi_over_tan), r);
  r = E.sel(E.op(TPU_OP_AND, negative, E.cmp(TPU_CMP_EQ, x, whole)), E.k(NAN), r);
  tpu_value_t signed_inf = E.sel(E.signbit(x), E.k(INFINITY), E.k(-INFINITY));
  return E.sel(E.cmp(TPU_CMP_EQ, x, E.k(0)), signed_inf, r);
}

// trigamma(x) as ATen's calc_trigamma computes it (including its sign for x < 0.5)
tpu_value_t trigamma(const Ew &E, tpu_value_t x) {
  tpu_value_t reflect = E.cmp(TPU_CMP_LT, x, E.k(0.5));
  tpu_value_t s = E.un(TPU_OP_SIN, E.mul(x, E.k(kPi)));
  tpu_value_t sum = E.sel(reflect, E.un(TPU_OP_NEG, E.div(E.k(kPi * kPi), E.mul(s, s))), E.k(0));
  tpu_value_t y = E.sel(reflect, E.sub(E.k(1), x), x);
  for (int i = 0; i < 6; i++) {
    sum = E.add(sum, E.div(E.k(1), E.mul(y, y)));
    y = E.add(y, E.k(1));
  }
  tpu_value_t ixx = E.div(E.k(1), E.mul(y, y));
  tpu_value_t tail = E.mul(ixx, E.sub(E.k(1.0 / 6), E.mul(ixx, E.sub(E.k(1.0 / 30), E.mul(ixx, E.k(1.0 / 42))))));
  tail = E.add(E.add(E.k(1), E.div(E.k(1), E.mul(y, E.k(2)))), tail);
  sum = E.add(sum, E.div(tail, y));
  return E.sel(reflect, E.un(TPU_OP_NEG, sum), sum);
}

void digamma_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {digamma(E, x)};
}

// polygamma.out(int n, Tensor self, *, Tensor(a!) out): orders 0 and 1 (higher orders need
// the Hurwitz zeta function and run on the CPU fallback)
void polygamma_out(LowerCtx &ctx) {
  const int64_t n = ctx.arg(0).toInt();
  if (n != 0 && n != 1) throw Unsupported("polygamma of order above 1");
  Ew E = ew_for_result(ctx);
  tpu_value_t x = operand(ctx, 1, E.dt, E.shape);
  ctx.results = {n == 0 ? digamma(E, x) : trigamma(E, x)};
}

// The erfc family's argument: f32 arithmetic only (see the top of the file). |cpu_dtypes|:
// bf16/f16 too (erfc), or f32 only (erfcx, log_ndtr: the CPU raises its NotImplementedError
// for half types, which the fallback then raises too).
tpu_value_t f32_only_input(LowerCtx &ctx, Ew *E, const char *op, bool half_types) {
  tpu_value_t x = unary_input(ctx, E);
  const tpu_dtype_t out = ctx.out_dtype();
  if (E->dt != TPU_F32 || (!half_types && out != TPU_F32)) throw Unsupported(std::string(op) + " in this dtype");
  return x;
}

// exp(sign * x^2) without the rounding error of x^2 (up to 2 x^2 ulp of the result): x = h + l
// with h on a 1/256 grid, so h^2 is exact for |x| < 16, and x^2 = h^2 + l (x + h). Beyond 16
// the result is 0 or infinite in f32 either way.
tpu_value_t exp_square(const Ew &E, tpu_value_t x, double sign) {
  tpu_value_t exact = E.cmp(TPU_CMP_LT, E.un(TPU_OP_ABS, x), E.k(16));
  tpu_value_t h = E.div(E.un(TPU_OP_FLOOR, E.add(E.mul(x, E.k(256)), E.k(0.5))), E.k(256));
  h = E.sel(exact, h, x);
  tpu_value_t rest = E.sel(exact, E.mul(E.sub(x, h), E.add(x, h)), E.k(0));
  return E.mul(E.un(TPU_OP_EXP, E.mul(E.mul(h, h), E.k(sign))), E.un(TPU_OP_EXP, E.mul(rest, E.k(sign))));
}

// exp(x^2) erfc(x) for x >= 1 (elsewhere any finite value): Cephes' rationals in 1/x^2
tpu_value_t erfcx_tail(const Ew &E, tpu_value_t x) {
  tpu_value_t q = E.div(E.k(1), x), w = E.mul(q, q);
  tpu_value_t below_2 = E.poly(w, {2.326819970068386E-2, -1.387039388740657E-1, 3.687424674597105E-1,
                                   -5.824733027278666E-1, 6.210004621745983E-1, -4.944515323274145E-1,
                                   3.404879937665872E-1, -2.741127028184656E-1, 5.638259427386472E-1});
  tpu_value_t above_2 = E.poly(w, {-1.047766399936249E+1, 1.297719955372516E+1, -7.495518717768503E+0,
                                   2.921019019210786E+0, -1.015265279202700E+0, 4.218463358204948E-1,
                                   -2.820767439740514E-1, 5.641895067754075E-1});
  return E.mul(q, E.sel(E.cmp(TPU_CMP_LT, x, E.k(2)), below_2, above_2));
}

tpu_value_t erfc(const Ew &E, tpu_value_t x) {
  tpu_value_t a = E.un(TPU_OP_ABS, x);
  tpu_value_t tail = E.mul(exp_square(E, a, -1), erfcx_tail(E, a));
  tail = E.sel(E.cmp(TPU_CMP_LT, x, E.k(0)), E.sub(E.k(2), tail), tail);
  return E.sel(E.cmp(TPU_CMP_LT, a, E.k(1)), E.sub(E.k(1), E.un(TPU_OP_ERF, x)), tail);
}

tpu_value_t erfcx(const Ew &E, tpu_value_t x) {
  tpu_value_t near = E.mul(exp_square(E, x, 1), erfc(E, x));
  return E.sel(E.cmp(TPU_CMP_LT, x, E.k(1)), near, erfcx_tail(E, x));
}

void erfc_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = f32_only_input(ctx, &E, "erfc", true);
  ctx.results = {erfc(E, x)};
}

void erfcx_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = f32_only_input(ctx, &E, "special_erfcx", false);
  ctx.results = {erfcx(E, x)};
}

// log_ndtr(x) = log(Phi(x)): log(erfcx(-t) / 2) - t^2 below -1, else log1p(-erfc(t) / 2), t = x/sqrt(2)
void log_ndtr_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = f32_only_input(ctx, &E, "special_log_ndtr", false);
  tpu_value_t t = E.mul(x, E.k(M_SQRT1_2));
  tpu_value_t low = E.sub(E.un(TPU_OP_LOG, E.mul(erfcx(E, E.un(TPU_OP_NEG, t)), E.k(0.5))), E.mul(t, t));
  tpu_value_t high = E.un(TPU_OP_LOG1P, E.mul(erfc(E, t), E.k(-0.5)));
  ctx.results = {E.sel(E.cmp(TPU_CMP_LT, x, E.k(-1)), low, high)};
}

// entr(x) = -x log(x) for x > 0, 0 at 0, -inf below, NaN for NaN
void entr_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t r = E.un(TPU_OP_NEG, E.mul(x, E.un(TPU_OP_LOG, x)));
  r = E.sel(E.cmp(TPU_CMP_EQ, x, E.k(0)), E.k(0), r);
  ctx.results = {E.sel(E.cmp(TPU_CMP_LT, x, E.k(0)), E.k(-INFINITY), r)};
}

LoweringRegistrar registrar({
    {"lgamma.out", lgamma_out},
    {"digamma.out", digamma_out},
    {"polygamma.out", polygamma_out},
    {"erfc.out", erfc_out},
    {"special_erfcx.out", erfcx_out},
    {"special_log_ndtr.out", log_ndtr_out},
    {"special_entr.out", entr_out},
});

}  // namespace
}  // namespace torchtpu
