// lower_complex_math.cpp: the elementary functions of complex64 / complex128 tensors, as
// real ops on the (real, imaginary) parts (lower_complex.h): exp, exp2, log, log2, log10,
// log1p, expm1, pow, sqrt, rsqrt, sigmoid; sin, cos, tan, sinc, sinh, cosh, tanh; asin,
// acos, atan, asinh, acosh, atanh; the backward kernels of sigmoid and tanh (the others'
// gradients are formulas of these).
//
// The CPU computes these with the C library's complex functions (glibc's casin, ctanh, ...)
// or c10/util/complex_math.h's formulas (log1p, expm1). The formulas here are written to
// stay accurate where the textbook ones are not: near zero (expm1 / log1p forms), near the
// branch points of the inverse functions (Hull, Fairgrieve and Tang's decomposition), and
// for large parts (scaled forms where squares or sinh^2 would overflow). Branch cuts follow
// C99: on a cut the sign of the zero imaginary part picks the side.
#include <cfloat>

#include "lower_complex.h"

namespace torchtpu {
namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLn10 = 2.30258509299404568402;

// z times i, and z times -i
Cx times_i(const Cew &e, const Cx &z) { return {e.un(TPU_OP_NEG, z.im), z.re}; }
Cx times_minus_i(const Cew &e, const Cx &z) { return {z.im, e.un(TPU_OP_NEG, z.re)}; }

using CxFn = Cx (*)(const Cew &, const Cx &);

template <CxFn F>
void of_z(LowerCtx &ctx) {  // F(z)
  Cew e = cew_of(ctx);
  set_complex(ctx, F(e, e.arg(ctx, 0)));
}

template <CxFn F>
void of_iz(LowerCtx &ctx) {  // F(iz): cos z = cosh(iz)
  Cew e = cew_of(ctx);
  set_complex(ctx, F(e, times_i(e, e.arg(ctx, 0))));
}

template <CxFn F>
void rotated(LowerCtx &ctx) {  // -i F(iz): sin, tan, asinh, atan from sinh, tanh, asin, atanh
  Cew e = cew_of(ctx);
  set_complex(ctx, times_minus_i(e, F(e, times_i(e, e.arg(ctx, 0)))));
}

// ---- exponentials and logarithms --------------------------------------------------------

void exp_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  set_complex(ctx, e.exp(e.arg(ctx, 0)));
}

void log_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  set_complex(ctx, e.log(e.arg(ctx, 0)));
}

void exp2_out(LowerCtx &ctx) {  // e^(z log 2), as the CPU's exp2 of a complex number
  Cew e = cew_of(ctx);
  set_complex(ctx, e.exp(e.scale(e.arg(ctx, 0), e.k(kLn2))));
}

// log z / log(base), divided as the CPU's std::log10 and c10's log2 of a complex number
template <int Base>
void log_base_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx l = e.log(e.arg(ctx, 0));
  tpu_value_t ln = e.k(Base == 10 ? kLn10 : kLn2);
  set_complex(ctx, {e.div(l.re, ln), e.div(l.im, ln)});
}

// log(1 + z) as c10's log1p: theta = atan2(b, 1 + a); for |z| < 0.5 the real part is
// log1p(a (2 + a) + b^2) / 2 (a if that underflows to 0), else log |1 + z|
void log1p_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  tpu_value_t a1 = e.add(z.re, e.k(1));
  tpu_value_t theta = e.op(TPU_OP_ATAN2, z.im, a1);
  tpu_value_t r = e.add(e.mul(z.re, e.add(e.k(2), z.re)), e.mul(z.im, z.im));
  tpu_value_t small = e.sel(e.cmp(TPU_CMP_EQ, r, e.k(0)), z.re,
                            e.mul(e.k(0.5), e.un(TPU_OP_LOG1P, r)));
  tpu_value_t large = e.un(TPU_OP_LOG, e.abs({a1, z.im}));
  set_complex(ctx, {e.sel(e.cmp(TPU_CMP_LT, e.abs(z), e.k(0.5)), small, large), theta});
}

// e^z - 1 as c10's expm1: (expm1(a) cos b - 2 sin^2(b / 2), e^a sin b)
void expm1_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  tpu_value_t h = e.un(TPU_OP_SIN, e.mul(z.im, e.k(0.5)));
  tpu_value_t re = e.sub(e.mul(e.un(TPU_OP_EXPM1, z.re), e.un(TPU_OP_COS, z.im)),
                         e.mul(e.k(2), e.mul(h, h)));
  set_complex(ctx, {re, e.mul(e.un(TPU_OP_EXP, z.re), e.un(TPU_OP_SIN, z.im))});
}

// pow.Tensor_Tensor_out / Tensor_Scalar_out / Scalar_out: e^(w log z), as the CPU's
// cpow. A real exponent scales log z's parts (no cross terms with its zero imaginary part).
// 0^w, where log 0 = -inf makes the products 0 * inf: 0 for w with a positive real part,
// NaN otherwise (C99's special values, which the CPU's cpow follows).
void pow_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  const c10::IValue &w = ctx.arg(1);
  const bool real_w = w.isTensor() ? !is_complex_pair(w.toTensor().scalar_type())
                                   : !w.toScalar().isComplex();
  Cx z = e.arg(ctx, 0);
  Cx p = e.exp(real_w ? e.scale(e.log(z), e.arg(ctx, 1).re) : e.mul(e.arg(ctx, 1), e.log(z)));
  tpu_value_t zero = tpu_graph_binary(ctx.g, TPU_OP_AND, e.cmp(TPU_CMP_EQ, z.re, e.k(0)),
                                      e.cmp(TPU_CMP_EQ, z.im, e.k(0)));
  tpu_value_t at_zero = e.sel(e.cmp(TPU_CMP_GT, e.arg(ctx, 1).re, e.k(0)), e.k(0), e.k(NAN));
  set_complex(ctx, {e.sel(zero, at_zero, p.re), e.sel(zero, at_zero, p.im)});
}

void sigmoid_out(LowerCtx &ctx) {  // 1 / (1 + e^-z)
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  Cx d = e.exp({e.un(TPU_OP_NEG, z.re), e.un(TPU_OP_NEG, z.im)});
  set_complex(ctx, e.div({e.k(1), e.k(0)}, {e.add(e.k(1), d.re), d.im}));
}

// sigmoid_backward.grad_input(grad_output, output): grad conj((1 - y) y), as the CPU's
void sigmoid_backward_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx y = e.arg(ctx, 1);
  Cx d = e.mul({e.sub(e.k(1), y.re), e.un(TPU_OP_NEG, y.im)}, y);
  set_complex(ctx, e.mul(e.arg(ctx, 0), {d.re, e.un(TPU_OP_NEG, d.im)}));
}

// The principal square root: t = sqrt((|z| + |a|) / 2); (t, b / 2t) for a >= 0, else
// (|b| / 2t, t with b's sign); sqrt(0 + bi) of b = 0 is (0, b), of an infinite b (inf, b)
Cx sqrt_of(const Cew &e, const Cx &z) {
  tpu_value_t t = e.un(TPU_OP_SQRT, e.mul(e.add(e.abs(z), e.un(TPU_OP_ABS, z.re)), e.k(0.5)));
  tpu_value_t q = e.div(z.im, e.add(t, t));
  tpu_value_t pos = e.cmp(TPU_CMP_GE, z.re, e.k(0));
  Cx r{e.sel(pos, t, e.un(TPU_OP_ABS, q)), e.sel(pos, q, copy_sign(e, t, z.im))};
  tpu_value_t zero = e.cmp(TPU_CMP_EQ, t, e.k(0)), inf = e.isinf(z.im);
  return {e.sel(inf, e.k(INFINITY), e.sel(zero, e.k(0), r.re)),
          e.sel(e.op(TPU_OP_OR, zero, inf), z.im, r.im)};
}

void sqrt_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  set_complex(ctx, sqrt_of(e, e.arg(ctx, 0)));
}

void rsqrt_out(LowerCtx &ctx) {  // 1 / sqrt(z), as the CPU divides
  Cew e = cew_of(ctx);
  set_complex(ctx, e.div({e.k(1), e.k(0)}, sqrt_of(e, e.arg(ctx, 0))));
}

// ---- trigonometric and hyperbolic ----------------------------------------------------------

// f(a) t for f = sinh (odd) or cosh of a real part a and a factor t (cos b or sin b),
// without overflowing before the product does: past kHyperbolicLarge, (e^(|a|/2) t / 2)
// e^(|a|/2), signed for sinh
tpu_value_t hyperbolic_times(const Cew &e, tpu_value_t a, tpu_value_t t, bool odd) {
  tpu_value_t ax = e.un(TPU_OP_ABS, a);
  tpu_value_t h = e.un(TPU_OP_EXP, e.mul(ax, e.k(0.5)));
  tpu_value_t big = e.mul(e.mul(h, e.mul(t, e.k(0.5))), h);
  if (odd) big = e.sel(e.signbit(a), e.un(TPU_OP_NEG, big), big);
  tpu_value_t small = e.mul(odd ? sinh_of(e, a) : cosh_of(e, a), t);
  return e.sel(e.cmp(TPU_CMP_GT, ax, e.k(kHyperbolicLarge)), big, small);
}

// sinh(a + bi) = (sinh a cos b, cosh a sin b)
Cx sinh_cx(const Cew &e, const Cx &z) {
  return {hyperbolic_times(e, z.re, e.un(TPU_OP_COS, z.im), true),
          hyperbolic_times(e, z.re, e.un(TPU_OP_SIN, z.im), false)};
}

// cosh(a + bi) = (cosh a cos b, sinh a sin b)
Cx cosh_cx(const Cew &e, const Cx &z) {
  return {hyperbolic_times(e, z.re, e.un(TPU_OP_COS, z.im), false),
          hyperbolic_times(e, z.re, e.un(TPU_OP_SIN, z.im), true)};
}

// tanh(a + bi) = (sinh a cosh a, sin b cos b) / (sinh^2 a + cos^2 b), as glibc's ctanh;
// past the magnitude where sinh^2 a would overflow, (sign of a, 4 sin b cos b e^-2|a|)
Cx tanh_cx(const Cew &e, const Cx &z) {
  const double large = (e.dt == TPU_F64 ? DBL_MAX_EXP - 1 : FLT_MAX_EXP - 1) * kLn2 / 2;
  tpu_value_t sa = sinh_of(e, z.re), ca = cosh_of(e, z.re);
  tpu_value_t sb = e.un(TPU_OP_SIN, z.im), cb = e.un(TPU_OP_COS, z.im);
  tpu_value_t den = e.add(e.mul(sa, sa), e.mul(cb, cb));
  tpu_value_t sbcb = e.mul(sb, cb), ax = e.un(TPU_OP_ABS, z.re);
  tpu_value_t big = e.cmp(TPU_CMP_GT, ax, e.k(large));
  tpu_value_t im_big = e.mul(e.mul(e.k(4), sbcb), e.un(TPU_OP_EXP, e.mul(ax, e.k(-2))));
  return {e.sel(big, copy_sign(e, e.k(1), z.re), e.div(e.mul(sa, ca), den)),
          e.sel(big, im_big, e.div(sbcb, den))};
}

// tanh_backward.grad_input(grad_output, output): grad conj(1 - y^2), as the CPU's
void tanh_backward_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx y = e.arg(ctx, 1);
  Cx y2 = e.mul(y, y);
  set_complex(ctx, e.mul(e.arg(ctx, 0), {e.sub(e.k(1), y2.re), y2.im}));
}

// sinc z = sin(pi z) / (pi z), 1 at 0, as the CPU's
void sinc_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  Cx p = e.scale(z, e.k(M_PI));
  Cx q = e.div(times_minus_i(e, sinh_cx(e, times_i(e, p))), p);
  tpu_value_t zero = e.op(TPU_OP_AND, e.cmp(TPU_CMP_EQ, z.re, e.k(0)),
                          e.cmp(TPU_CMP_EQ, z.im, e.k(0)));
  set_complex(ctx, {e.sel(zero, e.k(1), q.re), e.sel(zero, e.k(0), q.im)});
}

// ---- inverse trigonometric and hyperbolic ----------------------------------------------

// For z = a + bi, x = |a|, y = |b|, Hull, Fairgrieve and Tang (1997): with r = |z + 1|,
// s = |z - 1| and A = (r + s) / 2 >= 1, asin z = (asin(a / A), sign(b) acosh A) and
// acos z = (acos(a / A), -sign(b) acosh A). |d| is sqrt(A^2 - x^2) (so asin(x / A) =
// atan2(x, d) and acos(a / A) = atan2(d, a)) and |l| is acosh A = log1p(A-1 + sqrt((A-1)
// (A+1))), A - x and A - 1 computed from r - (x + 1) = y^2 / (r + x + 1) and s - |1 - x|
// without cancellation. Past kBig, where y^2 would overflow, A is |z| to working precision:
// d = y and l = log 2|z|.
struct AsinParts {
  tpu_value_t d, l;
};

AsinParts asin_parts(const Cew &e, const Cx &z) {
  const double big_at = e.dt == TPU_F64 ? 1e150 : 1e18;
  tpu_value_t x = e.un(TPU_OP_ABS, z.re), y = e.un(TPU_OP_ABS, z.im);
  tpu_value_t y2 = e.mul(y, y), one = e.k(1), half = e.k(0.5);
  tpu_value_t r = e.abs({e.add(x, one), y}), s = e.abs({e.sub(x, one), y});
  tpu_value_t A = e.mul(half, e.add(r, s));
  tpu_value_t r_part = e.div(y2, e.add(e.add(r, x), one));  // r - (x + 1)
  tpu_value_t s_plus = e.add(s, e.sub(x, one));              // s + (x - 1)
  tpu_value_t s_minus = e.sub(s, e.sub(x, one));             // s - (x - 1)
  // y^2 / (s + |x - 1|): the other of s +- (x - 1), 0 when y is (so also at z = +-1)
  auto y2_over = [&](tpu_value_t den) {
    return e.sel(e.cmp(TPU_CMP_EQ, y2, e.k(0)), e.k(0), e.div(y2, den));
  };
  tpu_value_t inside = e.cmp(TPU_CMP_LE, x, one);
  tpu_value_t a_minus_x = e.mul(half, e.add(r_part, e.sel(inside, s_minus, y2_over(s_plus))));
  tpu_value_t a_minus_1 = e.mul(half, e.add(r_part, e.sel(inside, y2_over(s_minus), s_plus)));
  tpu_value_t d = e.un(TPU_OP_SQRT, e.mul(a_minus_x, e.add(A, x)));
  tpu_value_t l = e.un(TPU_OP_LOG1P,
                       e.add(a_minus_1, e.un(TPU_OP_SQRT, e.mul(a_minus_1, e.add(A, one)))));
  tpu_value_t big = e.cmp(TPU_CMP_GT, e.op(TPU_OP_MAX, x, y), e.k(big_at));
  return {e.sel(big, y, d), e.sel(big, e.add(e.un(TPU_OP_LOG, e.abs(z)), e.k(kLn2)), l)};
}

Cx asin_cx(const Cew &e, const Cx &z) {
  AsinParts p = asin_parts(e, z);
  tpu_value_t re = e.op(TPU_OP_ATAN2, e.un(TPU_OP_ABS, z.re), p.d);
  return {copy_sign(e, re, z.re), copy_sign(e, p.l, z.im)};
}

// atanh z = (log1p(4x / ((1 - x)^2 + y^2)) / 4 with a's sign, atan2(2b, (1 - a)(1 + a) -
// b^2) / 2); of an infinite part (0 with a's sign, pi/2 with b's sign), as C99's catanh
Cx atanh_cx(const Cew &e, const Cx &z) {
  tpu_value_t x = e.un(TPU_OP_ABS, z.re), one = e.k(1);
  tpu_value_t omx = e.sub(one, x);
  tpu_value_t den = e.add(e.mul(omx, omx), e.mul(z.im, z.im));
  tpu_value_t re = e.mul(e.k(0.25), e.un(TPU_OP_LOG1P, e.div(e.mul(e.k(4), x), den)));
  tpu_value_t t = e.sub(e.mul(e.sub(one, z.re), e.add(one, z.re)), e.mul(z.im, z.im));
  tpu_value_t im = e.mul(e.k(0.5), e.op(TPU_OP_ATAN2, e.mul(e.k(2), z.im), t));
  tpu_value_t inf = e.op(TPU_OP_OR, e.isinf(z.re), e.isinf(z.im));
  return {copy_sign(e, e.sel(inf, e.k(0), re), z.re),
          e.sel(inf, copy_sign(e, e.k(M_PI / 2), z.im), im)};
}

void acos_out(LowerCtx &ctx) {  // (atan2(d, a), -sign(b) l)
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  AsinParts p = asin_parts(e, z);
  set_complex(ctx, {e.op(TPU_OP_ATAN2, p.d, z.re), copy_sign(e, p.l, e.un(TPU_OP_NEG, z.im))});
}

// acosh z = (l, sign(b) acos(a / A)): i acos z or -i acos z, whichever has a real part >= 0
void acosh_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  AsinParts p = asin_parts(e, z);
  set_complex(ctx, {p.l, copy_sign(e, e.op(TPU_OP_ATAN2, p.d, z.re), z.im)});
}

[[maybe_unused]] const bool registered = [] {
  const std::pair<const char *, LowerFn> ops[] = {
      {"exp.out", exp_out},
      {"exp2.out", exp2_out},
      {"log.out", log_out},
      {"log2.out", log_base_out<2>},
      {"log10.out", log_base_out<10>},
      {"log1p.out", log1p_out},
      {"expm1.out", expm1_out},
      {"pow.Tensor_Tensor_out", pow_out},
      {"pow.Tensor_Scalar_out", pow_out},
      {"pow.Scalar_out", pow_out},
      {"sigmoid.out", sigmoid_out},
      {"sigmoid_backward.grad_input", sigmoid_backward_out},
      {"sqrt.out", sqrt_out},
      {"rsqrt.out", rsqrt_out},
      {"sin.out", rotated<sinh_cx>},
      {"cos.out", of_iz<cosh_cx>},
      {"sinc.out", sinc_out},
      {"tan.out", rotated<tanh_cx>},
      {"sinh.out", of_z<sinh_cx>},
      {"cosh.out", of_z<cosh_cx>},
      {"tanh.out", of_z<tanh_cx>},
      {"tanh_backward.grad_input", tanh_backward_out},
      {"asin.out", of_z<asin_cx>},
      {"acos.out", acos_out},
      {"atan.out", rotated<atanh_cx>},
      {"asinh.out", rotated<asin_cx>},
      {"acosh.out", acosh_out},
      {"atanh.out", of_z<atanh_cx>},
  };
  for (const auto &[op, fn] : ops) register_complex_lowering(op, fn);
  return true;
}();

}  // namespace
}  // namespace torchtpu
