// lower_complex.cpp: complex64 / complex128 arithmetic on the vTPU. The IR has no complex
// dtype (nor has the TPU's vector unit): a complex tensor is a graph value of its real
// and imaginary parts as a trailing dim of 2 (IrLayout, native.h), and these lowerings
// split it into the two parts, compute with real ops in the component dtype (f32 / f64),
// and join the parts again. The formulas are the CPU's (c10/util/complex.h): a real operand
// of a complex op is promoted to (x, 0) first, as type promotion does there, so
// infinities and NaNs propagate the same way.
//
// Covered: add, sub (with alpha), mul, div, neg, conj_physical, reciprocal, exp, log, pow,
// sqrt, sin, cos, sigmoid, abs, angle, sgn, isnan, eq, ne, linalg_vector_norm, polar, complex, fill_, zero_, sum, mean, mm and bmm (so matmul), and data
// movement through the real lowerings (roll, flip, cat, index_select, gather, where, ...);
// torch.fft is lower_fft.cpp's. view_as_real / view_as_complex (and so real / imag) are
// views (ops.cpp); copies between complex dtypes and from real ones are native_copy's.
#include <ATen/ops/empty_strided.h>

#include <cmath>
#include <string>

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
  // e^a (cos b, sin b)
  Cx exp(const Cx &z) const {
    tpu_value_t m = un(TPU_OP_EXP, z.re);
    return {Ew::mul(m, un(TPU_OP_COS, z.im)), Ew::mul(m, un(TPU_OP_SIN, z.im))};
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

void exp_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  set_complex(ctx, e.exp(e.arg(ctx, 0)));
}

void sgn_out(LowerCtx &ctx) {  // z / |z|, 0 for 0
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  tpu_value_t a = e.abs(z);
  tpu_value_t zero = e.cmp(TPU_CMP_EQ, a, e.k(0));
  set_complex(ctx, {e.sel(zero, e.k(0), e.div(z.re, a)), e.sel(zero, e.k(0), e.div(z.im, a))});
}

void log_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  set_complex(ctx, e.log(e.arg(ctx, 0)));
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

// The principal square root: t = sqrt((|z| + |a|) / 2); (t, b / 2t) for a >= 0, else
// (|b| / 2t, t with b's sign); sqrt(0 + bi) of b = 0 is (0, b)
void sqrt_out(LowerCtx &ctx) {
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  tpu_value_t t = e.un(TPU_OP_SQRT, e.mul(e.add(e.abs(z), e.un(TPU_OP_ABS, z.re)), e.k(0.5)));
  tpu_value_t q = e.div(z.im, e.add(t, t));
  tpu_value_t signed_t = e.sel(e.signbit(z.im), e.un(TPU_OP_NEG, t), t);
  tpu_value_t pos = e.cmp(TPU_CMP_GE, z.re, e.k(0));
  Cx r{e.sel(pos, t, e.un(TPU_OP_ABS, q)), e.sel(pos, q, signed_t)};
  tpu_value_t zero = e.cmp(TPU_CMP_EQ, t, e.k(0));
  set_complex(ctx, {e.sel(zero, e.k(0), r.re), e.sel(zero, z.im, r.im)});
}

// cosh b and sinh b of the imaginary parts: (e^b + e^-b) / 2 and (expm1 b - expm1 -b) / 2
// (no cancellation for small b)
std::pair<tpu_value_t, tpu_value_t> cosh_sinh(const Cew &e, tpu_value_t b) {
  tpu_value_t nb = e.un(TPU_OP_NEG, b), half = e.k(0.5);
  return {e.mul(e.add(e.un(TPU_OP_EXP, b), e.un(TPU_OP_EXP, nb)), half),
          e.mul(e.sub(e.un(TPU_OP_EXPM1, b), e.un(TPU_OP_EXPM1, nb)), half)};
}

void sin_out(LowerCtx &ctx) {  // (sin a cosh b, cos a sinh b)
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  auto [ch, sh] = cosh_sinh(e, z.im);
  set_complex(ctx, {e.mul(e.un(TPU_OP_SIN, z.re), ch), e.mul(e.un(TPU_OP_COS, z.re), sh)});
}

void cos_out(LowerCtx &ctx) {  // (cos a cosh b, -sin a sinh b)
  Cew e = cew_of(ctx);
  Cx z = e.arg(ctx, 0);
  auto [ch, sh] = cosh_sinh(e, z.im);
  set_complex(ctx, {e.mul(e.un(TPU_OP_COS, z.re), ch),
                    e.un(TPU_OP_NEG, e.mul(e.un(TPU_OP_SIN, z.re), sh))});
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

void isnan_out(LowerCtx &ctx) {  // either part NaN
  Cew e = real_result(ctx);
  Cx z = e.arg(ctx, 0);
  ctx.results = {tpu_graph_binary(ctx.g, TPU_OP_OR, e.isnan(z.re), e.isnan(z.im))};
}

// eq / ne: both parts equal (a real operand compares with (x, 0))
template <bool kEqual>
void equal_out(LowerCtx &ctx) {
  auto complex_type = [&](size_t i) {
    const c10::IValue &a = ctx.arg(i);
    return a.isTensor() && is_complex_pair(a.toTensor().scalar_type()) ? a.toTensor().scalar_type()
                                                                        : at::kFloat;
  };
  at::ScalarType t = complex_type(0) != at::kFloat ? complex_type(0) : complex_type(1);
  if (t == at::kFloat) throw Unsupported("complex comparison of real tensors");
  Cew e{{ctx.g, component_dtype(t), ctx.out_shape(0)}};
  Cx x = e.arg(ctx, 0), y = e.arg(ctx, 1);
  tpu_value_t same = tpu_graph_binary(ctx.g, TPU_OP_AND, e.cmp(TPU_CMP_EQ, x.re, y.re),
                                      e.cmp(TPU_CMP_EQ, x.im, y.im));
  ctx.results = {kEqual ? same : tpu_graph_unary(ctx.g, TPU_OP_NOT, same)};
}

// linalg_vector_norm.out(self, ord (static), dim?, keepdim, dtype?): the norm of |z|
void vector_norm_out(LowerCtx &ctx) {
  Cew e = real_result(ctx);
  Cew whole{{ctx.g, e.dt, shape_of(ctx.g, complex_part(ctx.g, ctx.v(0), 0))}};
  std::vector<int64_t> dims;
  if (!ctx.arg(2).isNone()) dims = ctx.arg(2).toIntList().vec();
  ctx.results = {vector_norm(ctx.g, whole.abs(whole.arg(ctx, 0)), e.dt,
                             ctx.arg(1).toScalar().toDouble(), dims, ctx.arg(3).toBool())};
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

// mm.out(self, mat2, out), bmm.out(self, mat2, out): (A + Bi)(C + Di) as one real product
// at the current precision, [A | B] (..., M, 2K) @ [[C, D], [-D, C]] (..., 2K, 2N) =
// [AC - BD | AD + BC]
void matmul_out(LowerCtx &ctx, int batch) {
  tpu_graph_t *g = ctx.g;
  tpu_dtype_t dt = component_dtype(ctx.out_meta[0].scalar_type());
  if (!is_complex_pair(ctx.tensor(0).scalar_type()) || !is_complex_pair(ctx.tensor(1).scalar_type())) {
    throw Unsupported("complex matmul of a real operand");
  }
  tpu_value_t a = convert(g, ctx.v(0), dt), b = convert(g, ctx.v(1), dt);
  auto cat = [&](tpu_value_t x, tpu_value_t y, int dim) {
    const tpu_value_t xs[2] = {x, y};
    return tpu_graph_concatenate(g, xs, 2, dim);
  };
  const int rank = batch + 2;
  tpu_value_t c = complex_part(g, b, 0), d = complex_part(g, b, 1);
  tpu_value_t lhs = cat(complex_part(g, a, 0), complex_part(g, a, 1), rank - 1);
  tpu_value_t rhs = cat(cat(c, d, rank - 1), cat(tpu_graph_unary(g, TPU_OP_NEG, d), c, rank - 1),
                        rank - 2);
  tpu_dot_attrs_t attrs{};
  attrs.num_batch = batch;
  for (int i = 0; i < batch; i++) attrs.lhs_batch[i] = attrs.rhs_batch[i] = i;
  attrs.num_contract = 1;
  attrs.lhs_contract[0] = rank - 1;
  attrs.rhs_contract[0] = rank - 2;
  attrs.precision = ctx.precision;
  tpu_value_t y = tpu_graph_dot_general(g, lhs, rhs, &attrs, dt);
  tpu_shape_t s = shape_of(g, y);
  const int64_t n = s.dims[rank - 1] / 2;
  int64_t lo[TPU_MAX_RANK] = {}, hi[TPU_MAX_RANK], st[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) hi[i] = s.dims[i], st[i] = 1;
  hi[rank - 1] = n;
  tpu_value_t re = tpu_graph_slice(g, y, lo, hi, st);
  lo[rank - 1] = n;
  hi[rank - 1] = 2 * n;
  tpu_value_t im = tpu_graph_slice(g, y, lo, hi, st);
  ctx.results = {complex_join(g, re, im)};
}

void mm_out(LowerCtx &ctx) { matmul_out(ctx, 0); }
void bmm_out(LowerCtx &ctx) { matmul_out(ctx, 1); }

// Data movement (each result element a copy of one input element, or zero) and cumsum
// (a sum, linear in each part): the op's real lowering applied to the real parts and to
// the imaginary parts, joined. |data| lists the arguments moved (which must be complex;
// the others are indices, masks, sizes).
struct Movement {
  const char *op;
  std::initializer_list<int> data;
};
const Movement kMovements[] = {
    {"roll", {0}}, {"roll.out", {0}}, {"flip", {0}}, {"flip.out", {0}},
    {"repeat", {0}}, {"repeat.out", {0}}, {"narrow_copy", {0}}, {"narrow_copy.out", {0}},
    {"tril.out", {0}}, {"triu.out", {0}}, {"index_select", {0}}, {"index_select.out", {0}},
    {"gather", {0}}, {"gather.out", {0}}, {"cat.out", {0}}, {"where.self", {1, 2}},
    {"where.self_out", {1, 2}}, {"constant_pad_nd", {0}}, {"constant_pad_nd.out", {0}},
    {"cumsum.out", {0}},
};

void by_parts(LowerCtx &ctx) {
  const c10::OperatorName &on = ctx.schema->operator_name();
  std::string name = on.name.substr(6) + (on.overload_name.empty() ? "" : "." + on.overload_name);
  const Movement *mv = nullptr;
  for (const Movement &m : kMovements) {
    if (name == m.op) mv = &m;
  }
  LowerFn real = find_lowering(name);
  if (!mv || !real) throw Unsupported("complex " + name);
  auto complex_tensor = [](const at::Tensor &t) { return is_complex_pair(t.scalar_type()); };
  for (int i : mv->data) {
    const c10::IValue &a = ctx.arg(i);
    if (a.isTensor() && !complex_tensor(a.toTensor())) throw Unsupported("real data");
    if (a.isTensorList()) {
      for (const at::Tensor &t : a.toTensorList()) {
        if (!complex_tensor(t)) throw Unsupported("real data");
      }
    }
  }
  if (name.rfind("constant_pad_nd", 0) == 0 && ctx.arg(2).toScalar().toComplexDouble() != c10::complex<double>(0, 0)) {
    throw Unsupported("complex pad value");  // the parts would both get it
  }
  LowerCtx c = ctx;
  for (at::Tensor &m : c.out_meta) {
    if (!m.defined() || !complex_tensor(m)) throw Unsupported("a real result");
    m = at::empty_strided(m.sizes(), m.strides(),
                          m.options().dtype(m.scalar_type() == at::kComplexFloat ? at::kFloat
                                                                                 : at::kDouble));
  }
  std::vector<tpu_value_t> parts[2];
  for (int k = 0; k < 2; k++) {
    for (int i : mv->data) {
      if (ctx.arg(i).isTensor()) c.value[i] = complex_part(ctx.g, ctx.v(i), k);
      for (size_t e = 0; e < ctx.list[i].size(); e++) {
        c.list[i][e] = complex_part(ctx.g, ctx.list[i][e], k);
      }
    }
    c.results.clear();
    real(c);
    if (!c.updates.empty() || !c.list_updates.empty()) throw Unsupported("updates");
    parts[k] = c.results;
  }
  ctx.results.clear();
  for (size_t r = 0; r < parts[0].size(); r++) {
    ctx.results.push_back(complex_join(ctx.g, parts[0][r], parts[1][r]));
  }
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
      {"log.out", log_out},
      {"pow.Tensor_Tensor_out", pow_out},
      {"pow.Tensor_Scalar_out", pow_out},
      {"pow.Scalar_out", pow_out},
      {"sigmoid.out", sigmoid_out},
      {"linalg_vector_norm.out", vector_norm_out},
      {"sqrt.out", sqrt_out},
      {"sin.out", sin_out},
      {"cos.out", cos_out},
      {"isnan", isnan_out},
      {"eq.Tensor_out", equal_out<true>},
      {"eq.Scalar_out", equal_out<true>},
      {"ne.Tensor_out", equal_out<false>},
      {"ne.Scalar_out", equal_out<false>},
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
      {"mm.out", mm_out},
      {"bmm.out", bmm_out},
  };
  for (const auto &[op, fn] : ops) register_complex_lowering(op, fn);
  for (const Movement &m : kMovements) register_complex_lowering(m.op, by_parts);
  return true;
}();

}  // namespace
}  // namespace torchtpu
