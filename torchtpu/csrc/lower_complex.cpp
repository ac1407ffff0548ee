// lower_complex.cpp: complex64 / complex128 arithmetic on the vTPU. The IR has no complex
// dtype (nor has the TPU's vector unit): a complex tensor is a graph value of its real
// and imaginary parts as a trailing dim of 2 (IrLayout, native.h), and these lowerings
// split it into the two parts, compute with real ops in the component dtype (f32 / f64),
// and join the parts again. The formulas are the CPU's (c10/util/complex.h): a real operand
// of a complex op is promoted to (x, 0) first, as type promotion does there, so
// infinities and NaNs propagate the same way.
//
// Covered: add, sub (with alpha), mul, div, neg, conj_physical, reciprocal, exp, abs,
// angle, sgn, polar, complex, fill_, zero_, sum and mean. view_as_real / view_as_complex (and so
// real / imag) are views (ops.cpp); copies between complex dtypes and from real ones are
// native_copy's.
#include <cmath>

#include "lower_ew.h"
#include "native.h"

namespace torchtpu {
namespace {

// A complex value of the graph as its two parts, each of shape |shape| (the complex
// tensor's) in the component dtype.
struct Cx {
  tpu_value_t re, im;
};

tpu_dtype_t component_dtype(at::ScalarType t) {
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

Cew cew_of(LowerCtx &ctx, size_t out = 0) {
  return Cew{{ctx.g, component_dtype(ctx.out_meta[out].scalar_type()), ctx.out_shape(out)}};
}

// The result as a pair value.
void set_complex(LowerCtx &ctx, const Cx &z, size_t out = 0) {
  ctx.results.assign(ctx.out_meta.size(), TPU_NO_VALUE);
  ctx.results[out] = complex_join(ctx.g, z.re, z.im);
}

// alpha (argument |i|) times |b|, or |b| when it is absent (a constant 1 folds away).
Cx times_alpha(LowerCtx &ctx, const Cew &e, size_t i, const Cx &b) {
  if (ctx.args->size() <= i || ctx.arg(i).isNone() || ctx.v(i) == TPU_NO_VALUE) return b;
  if (ctx.arg(i).toScalar().isComplex()) return e.mul(e.arg(ctx, i), b);
  return e.scale(b, operand(ctx, i, e.dt, e.shape));
}

void add_out(LowerCtx &ctx) {  // add.out(self, other, alpha, out)
  Cew e = cew_of(ctx);
  set_complex(ctx, e.add(e.arg(ctx, 0), times_alpha(ctx, e, 2, e.arg(ctx, 1))));
}

void sub_out(LowerCtx &ctx) {  // sub.out(self, other, alpha, out)
  Cew e = cew_of(ctx);
  set_complex(ctx, e.sub(e.arg(ctx, 0), times_alpha(ctx, e, 2, e.arg(ctx, 1))));
}

void mul_out(LowerCtx &ctx) {  // mul.out(self, other, out)
  Cew e = cew_of(ctx);
  set_complex(ctx, e.mul(e.arg(ctx, 0), e.arg(ctx, 1)));
}

void div_out(LowerCtx &ctx) {  // div.out(self, other, out) (PyTorch rejects a rounding mode)
  Cew e = cew_of(ctx);
  set_complex(ctx, e.div(e.arg(ctx, 0), e.arg(ctx, 1)));
}

void reciprocal_out(LowerCtx &ctx) {  // 1 / z, as the CPU divides
  Cew e = cew_of(ctx);
  set_complex(ctx, e.div(Cx{e.k(1), e.k(0)}, e.arg(ctx, 0)));
}

void neg_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  set_complex(ctx, {e.un(TPU_OP_NEG, z.re), e.un(TPU_OP_NEG, z.im)});
}

void conj_physical_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  set_complex(ctx, {z.re, e.un(TPU_OP_NEG, z.im)});
}

void exp_out(LowerCtx &ctx) {  // e^a (cos b, sin b)
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  tpu_value_t m = e.un(TPU_OP_EXP, z.re);
  set_complex(ctx, {e.mul(m, e.un(TPU_OP_COS, z.im)), e.mul(m, e.un(TPU_OP_SIN, z.im))});
}

void sgn_out(LowerCtx &ctx) {  // z / |z|, 0 for 0
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  tpu_value_t a = e.abs(z);
  tpu_value_t zero = e.cmp(TPU_CMP_EQ, a, e.k(0));
  set_complex(ctx, {e.sel(zero, e.k(0), e.div(z.re, a)), e.sel(zero, e.k(0), e.div(z.im, a))});
}

// A real result of a complex input (abs, angle): the input's component dtype.
Cew real_result(LowerCtx &ctx) {
  return Cew{{ctx.g, component_dtype(ctx.tensor(0).scalar_type()), ctx.out_shape(0)}};
}

void abs_out(LowerCtx &ctx) {
  Cew e = real_result(ctx);
  ctx.results = {e.abs(e.arg(ctx, 0))};
}

void angle_out(LowerCtx &ctx) {  // atan2(imag, real)
  Cew e = real_result(ctx);
  Cx z = e.arg(ctx, 0);
  ctx.results = {e.op(TPU_OP_ATAN2, z.im, z.re)};
}

void polar_out(LowerCtx &ctx) {  // polar.out(abs, angle, out): abs (cos angle, sin angle)
  Cew e = cew_of(ctx);
  tpu_value_t r = operand(ctx, 0, e.dt, e.shape), t = operand(ctx, 1, e.dt, e.shape);
  set_complex(ctx, {e.mul(r, e.un(TPU_OP_COS, t)), e.mul(r, e.un(TPU_OP_SIN, t))});
}

void complex_out(LowerCtx &ctx) {  // complex.out(real, imag, out)
  Cew e = cew_of(ctx);
  set_complex(ctx, {operand(ctx, 0, e.dt, e.shape), operand(ctx, 1, e.dt, e.shape)});
}

void zero_(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  set_complex(ctx, {e.k(0), e.k(0)});
}

void fill_scalar(LowerCtx &ctx) {  // fill_(self, value)
  Cew e = cew_of(ctx);
  set_complex(ctx, e.arg(ctx, 1));
}

// sum / mean over |dims| of the parts, in the result's component dtype.
Cx reduce_parts(LowerCtx &ctx, c10::IntArrayRef dims, bool keepdim) {
  tpu_dtype_t dt = component_dtype(ctx.out_meta[0].scalar_type());
  tpu_value_t v = convert(ctx.g, ctx.v(0), dt);
  tpu_value_t re = complex_part(ctx.g, v, 0), im = complex_part(ctx.g, v, 1);
  std::vector<int64_t> all;
  if (dims.empty()) {  // every dim
    for (int64_t d = 0; d < shape_of(ctx.g, re).rank; d++) all.push_back(d);
    dims = all;
  }
  return {reduce_dims(ctx.g, TPU_REDUCE_SUM, re, dims, keepdim),
          reduce_dims(ctx.g, TPU_REDUCE_SUM, im, dims, keepdim)};
}

void sum_out(LowerCtx &ctx) {  // sum.IntList_out(self, dim, keepdim, dtype, out)
  if (!is_complex_pair(ctx.tensor(0).scalar_type())) throw Unsupported("complex sum of real");
  std::vector<int64_t> dims = ctx.arg(1).isNone() ? std::vector<int64_t>{}
                                                  : ctx.arg(1).toIntList().vec();
  set_complex(ctx, reduce_parts(ctx, dims, ctx.arg(2).toBool()));
}

void mean_out(LowerCtx &ctx) {  // mean.out(self, dim, keepdim, dtype, out)
  if (!is_complex_pair(ctx.tensor(0).scalar_type())) throw Unsupported("complex mean of real");
  std::vector<int64_t> dims = ctx.arg(1).isNone() ? std::vector<int64_t>{}
                                                  : ctx.arg(1).toIntList().vec();
  Cx s = reduce_parts(ctx, dims, ctx.arg(2).toBool());
  const int64_t in = ctx.tensor(0).numel(), out = ctx.out_meta[0].numel();
  double n = out == 0 ? 0.0 : static_cast<double>(in) / static_cast<double>(out);
  if (in == 0) n = 0.0;  // the mean of nothing: 0 / 0, NaN as on the CPU
  tpu_dtype_t dt = dtype_of(ctx.g, s.re);
  tpu_shape_t sh = shape_of(ctx.g, s.re);
  tpu_value_t count = full(ctx.g, dt, sh, n);
  set_complex(ctx, {tpu_graph_binary(ctx.g, TPU_OP_DIV, s.re, count),
                    tpu_graph_binary(ctx.g, TPU_OP_DIV, s.im, count)});
}

[[maybe_unused]] const bool registered = [] {
  const std::pair<const char *, LowerFn> ops[] = {
      {"add.out", add_out},
      {"sub.out", sub_out},
      {"mul.out", mul_out},
      {"div.out", div_out},
      {"reciprocal.out", reciprocal_out},
      {"neg.out", neg_out},
      {"conj_physical.out", conj_physical_out},
      {"exp.out", exp_out},
      {"sgn.out", sgn_out},
      {"abs.out", abs_out},
      {"angle", angle_out},
      {"angle.out", angle_out},
      {"polar.out", polar_out},
      {"complex.out", complex_out},
      {"fill_.Scalar", fill_scalar},
      {"zero_", zero_},
      {"sum.IntList_out", sum_out},
      {"mean.out", mean_out},
  };
  for (const auto &[op, fn] : ops) register_complex_lowering(op, fn);
  return true;
}();

}  // namespace
}  // namespace torchtpu
