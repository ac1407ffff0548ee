// lower_bessel_jy.cpp: lowerings of the Bessel functions of the first and second kind,
// special.bessel_j0, _j1, _y0, _y1, and special.spherical_bessel_j0, as ATen's CPU kernels
// compute them (Cephes' rationals, bessel_coefficients.h, by Horner's rule: Ew::poly):
//
//   |x| <= 5   J0 = (x^2 - r1)(x^2 - r2) RP(x^2) / RQ(x^2) (1 - x^2/4 below 1e-5),
//              J1 = RP/RQ x (x^2 - r1)(x^2 - r2), odd; Y0 = YP/YQ + 2/pi log(x) J0(x),
//              Y1 = x YP/YQ + 2/pi (J1(x) log(x) - 1/x); Y is -inf at 0 and NaN below
//   |x| > 5    sqrt(2 / (pi x)) (P cos(x - phase) - 5/x Q sin(x - phase)) for J (sin/cos
//              swapped and + for Y), P = PP/PQ and Q = QP/QQ in 25/x^2, phase pi/4 or 3pi/4
//   spherical_bessel_j0   sin(x)/x, a Taylor polynomial below 0.5, 0 at infinities
// Both ranges are computed and one selected, in f32 (bf16/f16 rounded once, as the CPU
// upcasts) or f64. Only float dtypes lower: these CPU kernels take float32 and float64
// (integers promote); other calls take the fallback, which gives the CPU's behaviour.
#include <ATen/core/Tensor.h>

#include <cmath>
#include <vector>

#include "bessel_coefficients.h"
#include "lower_ew.h"

namespace torchtpu {
namespace {

constexpr double kTwoOverPi = 0.636619772367581343075535053490057448;
constexpr double kSqrtTwoOverPi = 0.797884560802865355879892119868763737;
constexpr double kQuarterPi = 0.785398163397448309615660845819875721;
constexpr double kThreeQuarterPi = 2.356194490192344928846982537459627163;

struct Tables {
  const std::vector<double> &pp, &pq, &qp, &qq;
};

// The asymptotic form for x > 5: sqrt(2 / (pi x)) (P trig1(x - phase) -+ 5/x Q trig2(..)),
// w = 25/x^2 (order 0) or 5/x * 5/x (order 1: the CPU's j1/y1 form it so)
tpu_value_t asymptotic(const Ew &E, tpu_value_t x, const Tables &t, int order, bool second_kind) {
  tpu_value_t w = order == 0 ? E.div(E.k(25), E.mul(x, x))
                             : E.mul(E.div(E.k(5), x), E.div(E.k(5), x));
  tpu_value_t p = E.div(E.poly(w, t.pp), E.poly(w, t.pq));
  tpu_value_t q = E.div(E.poly(w, t.qp), E.poly(w, t.qq));
  tpu_value_t shifted = E.sub(x, E.k(order == 0 ? kQuarterPi : kThreeQuarterPi));
  tpu_value_t c = E.un(TPU_OP_COS, shifted), s = E.un(TPU_OP_SIN, shifted);
  tpu_value_t five_q = E.mul(E.div(E.k(5), x), q);
  tpu_value_t r = second_kind ? E.add(E.mul(p, s), E.mul(five_q, c)) : E.sub(E.mul(p, c), E.mul(five_q, s));
  return E.div(E.mul(r, E.k(kSqrtTwoOverPi)), E.un(TPU_OP_SQRT, x));
}

// J0(|x|)
tpu_value_t j0(const Ew &E, tpu_value_t x) {
  tpu_value_t a = E.un(TPU_OP_ABS, x), z = E.mul(a, a);
  tpu_value_t near = E.div(E.mul(E.mul(E.sub(z, E.k(5.78318596294678452118e+00)),
                                       E.sub(z, E.k(3.04712623436620863991e+01))),
                                 E.poly(z, kJ0RP)),
                           E.poly(z, kJ0RQ));
  near = E.sel(E.cmp(TPU_CMP_LT, a, E.k(0.00001)), E.sub(E.k(1), E.div(z, E.k(4))), near);
  tpu_value_t far = asymptotic(E, a, {kJ0PP, kJ0PQ, kJ0QP, kJ0QQ}, 0, false);
  return E.sel(E.cmp(TPU_CMP_LE, a, E.k(5)), near, far);
}

// J1(x), odd
tpu_value_t j1(const Ew &E, tpu_value_t x) {
  tpu_value_t a = E.un(TPU_OP_ABS, x), z = E.mul(a, a);
  tpu_value_t near = E.mul(E.mul(E.mul(E.div(E.poly(z, kJ1RP), E.poly(z, kJ1RQ)), a),
                                 E.sub(z, E.k(1.46819706421238932572e+01))),
                           E.sub(z, E.k(4.92184563216946036703e+01)));
  tpu_value_t far = asymptotic(E, a, {kJ1PP, kJ1PQ, kJ1QP, kJ1QQ}, 1, false);
  tpu_value_t r = E.sel(E.cmp(TPU_CMP_LE, a, E.k(5)), near, far);
  return E.sel(E.cmp(TPU_CMP_LT, x, E.k(0)), E.un(TPU_OP_NEG, r), r);
}

// Y0 or Y1 of x: -inf at 0, NaN below
tpu_value_t y(const Ew &E, tpu_value_t x, int order) {
  tpu_value_t z = E.mul(x, x), log_x = E.un(TPU_OP_LOG, x);
  tpu_value_t near, far;
  if (order == 0) {
    near = E.add(E.div(E.poly(z, kY0YP), E.poly(z, kY0YQ)),
                 E.mul(E.mul(E.k(kTwoOverPi), log_x), j0(E, x)));
    far = asymptotic(E, x, {kY0PP, kY0PQ, kY0QP, kY0QQ}, 0, true);
  } else {
    near = E.add(E.mul(x, E.div(E.poly(z, kY1YP), E.poly(z, kY1YQ))),
                 E.mul(E.k(kTwoOverPi), E.sub(E.mul(j1(E, x), log_x), E.div(E.k(1), x))));
    far = asymptotic(E, x, {kY1PP, kY1PQ, kY1QP, kY1QQ}, 1, true);
  }
  tpu_value_t r = E.sel(E.cmp(TPU_CMP_LE, x, E.k(5)), near, far);
  r = E.sel(E.cmp(TPU_CMP_LT, x, E.k(0)), E.k(NAN), r);
  return E.sel(E.cmp(TPU_CMP_EQ, x, E.k(0)), E.k(-INFINITY), r);
}

tpu_value_t y0(const Ew &E, tpu_value_t x) { return y(E, x, 0); }
tpu_value_t y1(const Ew &E, tpu_value_t x) { return y(E, x, 1); }

void j0_out(LowerCtx &ctx) { f32_f64_unary(ctx, "special_bessel_j0", j0); }
void j1_out(LowerCtx &ctx) { f32_f64_unary(ctx, "special_bessel_j1", j1); }
void y0_out(LowerCtx &ctx) { f32_f64_unary(ctx, "special_bessel_y0", y0); }
void y1_out(LowerCtx &ctx) { f32_f64_unary(ctx, "special_bessel_y1", y1); }

// sin(x)/x; below |x| = 0.5 its Taylor polynomial in x^2 (the CPU's nesting); 0 at +-inf
void spherical_j0_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = f32_f64_input(ctx, &E, "special_spherical_bessel_j0");
  tpu_value_t near = E.poly(E.mul(x, x), {1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0,
                                           -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0, 1.0});
  tpu_value_t r = E.sel(E.cmp(TPU_CMP_LT, E.un(TPU_OP_ABS, x), E.k(0.5)), near,
                        E.div(E.un(TPU_OP_SIN, x), x));
  ctx.results = {E.sel(E.isinf(x), E.k(0), r)};
}

LoweringRegistrar registrar({
    {"special_bessel_j0.out", j0_out},
    {"special_bessel_j1.out", j1_out},
    {"special_bessel_y0.out", y0_out},
    {"special_bessel_y1.out", y1_out},
    {"special_spherical_bessel_j0.out", spherical_j0_out},
});

}  // namespace
}  // namespace torchtpu
