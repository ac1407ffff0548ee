// lower_complex.h: complex values in lowerings (lower_complex.cpp, lower_complex_math.cpp).
// The IR has no complex dtype: a complex tensor is a graph value of its real and imaginary
// parts as a trailing dim of 2 (IrLayout, native.h). A lowering splits it into the parts
// (Cx), computes with real ops in the component dtype (Cew: f32 for complex64, f64 for
// complex128) and joins the parts again (set_complex).
#ifndef TORCHTPU_LOWER_COMPLEX_H
#define TORCHTPU_LOWER_COMPLEX_H

#include <cmath>
#include <string>

#include "lower_ew.h"
#include "native.h"

namespace torchtpu {

// A complex value of the graph as its two parts, each of shape |shape| (the complex
// tensor's) in the component dtype.
struct Cx {
  tpu_value_t re, im;
};

inline tpu_dtype_t component_dtype(at::ScalarType t) {
  if (t == at::kComplexFloat) return TPU_F32;
  if (t == at::kComplexDouble) return TPU_F64;
  throw Unsupported(std::string("complex lowering of ") + c10::toString(t));
}

// Complex arithmetic over one result shape in one component dtype.
struct Cew : Ew {
  using Ew::add;
  using Ew::div;
  using Ew::mul;
  using Ew::sub;
  // Argument |i| of the call as a complex operand broadcast to the result shape: a
  // complex tensor's or Scalar's parts, or a real tensor or Scalar as (x, 0).
  Cx arg(LowerCtx &ctx, size_t i) const {
    const c10::IValue &a = ctx.arg(i);
    if ((a.isTensor() && is_complex_pair(a.toTensor().scalar_type())) ||
        (a.isScalar() && a.toScalar().isComplex())) {  // a complex Scalar: an f64 pair
      return {bcast(complex_part(g, ctx.v(i), 0)), bcast(complex_part(g, ctx.v(i), 1))};
    }
    return {operand(ctx, i, dt, shape), k(0)};
  }
  tpu_value_t bcast(tpu_value_t v) const { return broadcast_to(g, convert(g, v, dt), shape); }

  Cx add(const Cx &a, const Cx &b) const { return {Ew::add(a.re, b.re), Ew::add(a.im, b.im)}; }
  Cx sub(const Cx &a, const Cx &b) const { return {Ew::sub(a.re, b.re), Ew::sub(a.im, b.im)}; }
  Cx scale(const Cx &a, tpu_value_t s) const { return {Ew::mul(a.re, s), Ew::mul(a.im, s)}; }
  // (a + bi)(c + di) = (ac - bd) + (ad + bc)i
  Cx mul(const Cx &a, const Cx &b) const {
    return {Ew::sub(Ew::mul(a.re, b.re), Ew::mul(a.im, b.im)),
            Ew::add(Ew::mul(a.re, b.im), Ew::mul(a.im, b.re))};
  }
  // c10::complex's operator/ (numpy's): scaled by the larger of |c| and |d| against
  // overflow; a zero divisor divides the parts by +-0 (complex inf or NaN)
  Cx div(const Cx &a, const Cx &b) const {
    tpu_value_t ac = un(TPU_OP_ABS, b.re), ad = un(TPU_OP_ABS, b.im);
    tpu_value_t c_big = cmp(TPU_CMP_GE, ac, ad);
    tpu_value_t both_zero = tpu_graph_binary(g, TPU_OP_AND, cmp(TPU_CMP_EQ, ac, k(0)),
                                             cmp(TPU_CMP_EQ, ad, k(0)));
    // |c| >= |d|: rat = d / c, scl = 1 / (c + d rat), ((a + b rat) scl, (b - a rat) scl)
    tpu_value_t rat1 = Ew::div(b.im, b.re);
    tpu_value_t scl1 = Ew::div(k(1), Ew::add(b.re, Ew::mul(b.im, rat1)));
    Cx q1{Ew::mul(Ew::add(a.re, Ew::mul(a.im, rat1)), scl1),
          Ew::mul(Ew::sub(a.im, Ew::mul(a.re, rat1)), scl1)};
    // else: rat = c / d, scl = 1 / (d + c rat), ((a rat + b) scl, (b rat - a) scl)
    tpu_value_t rat2 = Ew::div(b.re, b.im);
    tpu_value_t scl2 = Ew::div(k(1), Ew::add(b.im, Ew::mul(b.re, rat2)));
    Cx q2{Ew::mul(Ew::add(Ew::mul(a.re, rat2), a.im), scl2),
          Ew::mul(Ew::sub(Ew::mul(a.im, rat2), a.re), scl2)};
    Cx q0{Ew::div(a.re, ac), Ew::div(a.im, ad)};
    return {sel(both_zero, q0.re, sel(c_big, q1.re, q2.re)),
            sel(both_zero, q0.im, sel(c_big, q1.im, q2.im))};
  }
  // e^a (cos b, sin b); past log(max) of the dtype, where e^a overflows before the
  // product may, (e^(a/2) cos b) e^(a/2) and the same for sin b
  Cx exp(const Cx &z) const {
    tpu_value_t m = un(TPU_OP_EXP, z.re), h = un(TPU_OP_EXP, Ew::mul(z.re, k(0.5)));
    tpu_value_t big = cmp(TPU_CMP_GT, z.re, k(dt == TPU_F64 ? 709 : 88));
    auto times = [&](tpu_value_t t) {
      return sel(big, Ew::mul(Ew::mul(h, t), h), Ew::mul(m, t));
    };
    return {times(un(TPU_OP_COS, z.im)), times(un(TPU_OP_SIN, z.im))};
  }
  // (log |z|, arg z)
  Cx log(const Cx &z) const { return {un(TPU_OP_LOG, abs(z)), op(TPU_OP_ATAN2, z.im, z.re)}; }
  // |z| as std::hypot: the larger part times sqrt(1 + (smaller / larger)^2); infinite if
  // either part is (even with a NaN in the other), 0 for 0
  tpu_value_t abs(const Cx &z) const {
    tpu_value_t x = un(TPU_OP_ABS, z.re), y = un(TPU_OP_ABS, z.im);
    tpu_value_t hi = op(TPU_OP_MAX, x, y), lo = op(TPU_OP_MIN, x, y);
    tpu_value_t r = Ew::div(lo, hi);
    tpu_value_t h = Ew::mul(hi, un(TPU_OP_SQRT, Ew::add(k(1), Ew::mul(r, r))));
    h = sel(cmp(TPU_CMP_EQ, hi, k(0)), k(0), h);
    tpu_value_t inf = tpu_graph_binary(g, TPU_OP_OR, isinf(z.re), isinf(z.im));
    return sel(inf, k(INFINITY), h);
  }
};

inline Cew cew_of(LowerCtx &ctx, size_t out = 0) {
  return Cew{{ctx.g, component_dtype(ctx.out_meta[out].scalar_type()), ctx.out_shape(out)}};
}

// The result as a pair value.
inline void set_complex(LowerCtx &ctx, const Cx &z, size_t out = 0) {
  ctx.results.assign(ctx.out_meta.size(), TPU_NO_VALUE);
  ctx.results[out] = complex_join(ctx.g, z.re, z.im);
}

}  // namespace torchtpu

#endif  // TORCHTPU_LOWER_COMPLEX_H
