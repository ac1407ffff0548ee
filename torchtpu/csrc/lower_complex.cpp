// lower_complex.cpp: complex64 / complex128 arithmetic on the vTPU, as (real, imaginary)
// pairs (lower_complex.h). The formulas are the CPU's (c10/util/complex.h): a real operand
// of a complex op is promoted to (x, 0) first, as type promotion does there, so
// infinities and NaNs propagate the same way.
//
// Covered: add, sub (with alpha), mul, div, neg, conj_physical, reciprocal, abs, angle,
// sgn, isnan, eq, ne, linalg_vector_norm, polar, complex, fill_, zero_, sum, mean, prod,
// cumprod, mm, bmm (so matmul), dot, vdot, and data movement through the real lowerings
// (roll, flip, cat, index_select, gather, where, ...). The elementary functions (exp, log,
// pow, sqrt, the trigonometric and hyperbolic functions and their inverses) are
// lower_complex_math.cpp's; torch.fft is lower_fft.cpp's. view_as_real / view_as_complex
// (and so real / imag) are views (ops.cpp); copies between complex dtypes and from real
// ones are native_copy's.
#include <ATen/ops/empty_strided.h>

#include <cmath>
#include <string>

#include "lower_complex.h"

namespace torchtpu {
namespace {

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
// Argument 0's parts converted to |dt|.
Cx input_parts(LowerCtx &ctx, tpu_dtype_t dt) {
  tpu_value_t v = convert(ctx.g, ctx.v(0), dt);
  return {complex_part(ctx.g, v, 0), complex_part(ctx.g, v, 1)};
}

Cx reduce_parts(LowerCtx &ctx, c10::IntArrayRef dims, bool keepdim) {
  Cx z = input_parts(ctx, component_dtype(ctx.out_meta[0].scalar_type()));
  tpu_value_t re = z.re, im = z.im;
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

// ---- products: complex multiplication is no REDUCE or SCAN kind, so they are trees of
// elementwise complex products over slices (log2 n levels)

// Parts |z| sliced to [lo, hi) along |dim|.
Cx slice_dim(tpu_graph_t *g, const Cx &z, int dim, int64_t lo, int64_t hi) {
  tpu_shape_t s = shape_of(g, z.re);
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], stride[TPU_MAX_RANK];
  for (int d = 0; d < s.rank; d++) limit[d] = s.dims[d], stride[d] = 1;
  start[dim] = lo;
  limit[dim] = hi;
  return {tpu_graph_slice(g, z.re, start, limit, stride),
          tpu_graph_slice(g, z.im, start, limit, stride)};
}

// Parts |z| padded along |dim| with |lo| values before and |hi| after, each 1 (1 + 0i).
Cx pad_ones(tpu_graph_t *g, tpu_dtype_t dt, const Cx &z, int dim, int64_t lo, int64_t hi) {
  int64_t l[TPU_MAX_RANK] = {0}, h[TPU_MAX_RANK] = {0}, in[TPU_MAX_RANK] = {0};
  l[dim] = lo;
  h[dim] = hi;
  return {tpu_graph_pad(g, z.re, scalar_const(g, dt, 1), l, h, in),
          tpu_graph_pad(g, z.im, scalar_const(g, dt, 0), l, h, in)};
}

Cx mul_parts(tpu_graph_t *g, tpu_dtype_t dt, const Cx &a, const Cx &b) {
  return Cew{{g, dt, shape_of(g, a.re)}}.mul(a, b);
}

// The product along |dim|, kept as a dim of 1: the first half of the values times the
// second (padded with a 1 to an even count) until one is left; 1 for none.
Cx product_along(tpu_graph_t *g, tpu_dtype_t dt, Cx z, int dim) {
  int64_t n = shape_of(g, z.re).dims[dim];
  if (n == 0) return pad_ones(g, dt, z, dim, 0, 1);
  for (; n > 1; n = (n + 1) / 2) {
    if (n % 2) z = pad_ones(g, dt, z, dim, 0, 1);
    int64_t h = (n + 1) / 2;
    z = mul_parts(g, dt, slice_dim(g, z, dim, 0, h), slice_dim(g, z, dim, h, 2 * h));
  }
  return z;
}

// prod(self, dtype), prod.out, prod.int_out(self, dim, keepdim, dtype, out)
void prod_out(LowerCtx &ctx) {
  if (!is_complex_pair(ctx.tensor(0).scalar_type())) throw Unsupported("complex prod of real");
  const bool by_dim = ctx.schema->overload_name() == "int_out";
  tpu_dtype_t dt = component_dtype(ctx.out_meta[0].scalar_type());
  Cx z = input_parts(ctx, dt);
  const int rank = shape_of(ctx.g, z.re).rank;
  std::vector<bool> reduced(rank, !by_dim);  // a 0-d tensor is its own product
  if (by_dim && rank > 0) reduced[wrap_dim(ctx.arg(1).toInt(), rank)] = true;
  for (int d = 0; d < rank; d++) {
    if (reduced[d]) z = product_along(ctx.g, dt, z, d);
  }
  if (!(by_dim && ctx.arg(2).toBool())) {  // drop the reduced dims
    tpu_shape_t out = ctx.out_shape(0);
    z = {tpu_graph_reshape(ctx.g, z.re, &out), tpu_graph_reshape(ctx.g, z.im, &out)};
  }
  set_complex(ctx, z);
}

// cumprod.out(self, dim, dtype, out): Hillis and Steele's scan, each value times the running
// product |shift| places before it (1 before the start) for shift = 1, 2, 4, ...
void cumprod_out(LowerCtx &ctx) {
  if (!is_complex_pair(ctx.tensor(0).scalar_type())) throw Unsupported("complex cumprod of real");
  tpu_dtype_t dt = component_dtype(ctx.out_meta[0].scalar_type());
  Cx z = input_parts(ctx, dt);
  tpu_shape_t s = shape_of(ctx.g, z.re);
  if (s.rank > 0) {
    int dim = static_cast<int>(wrap_dim(ctx.arg(1).toInt(), s.rank));
    int64_t n = s.dims[dim];
    for (int64_t shift = 1; shift < n; shift *= 2) {
      z = mul_parts(ctx.g, dt, z, pad_ones(ctx.g, dt, slice_dim(ctx.g, z, dim, 0, n - shift), dim,
                                           shift, 0));
    }
  }
  set_complex(ctx, z);
}

// (A + Bi)(C + Di) of pairs a (..., M, K, 2) and b (..., K, N, 2) in |dt| with |batch|
// leading batch dims, as one real product at |precision|: [A | B] (..., M, 2K) @
// [[C, D], [-D, C]] (..., 2K, 2N) = [AC - BD | AD + BC]; the pair (..., M, N, 2)
tpu_value_t complex_matmul(tpu_graph_t *g, tpu_value_t a, tpu_value_t b, int batch,
                           tpu_precision_t precision, tpu_dtype_t dt) {
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
  attrs.precision = precision;
  tpu_value_t y = tpu_graph_dot_general(g, lhs, rhs, &attrs, dt);
  tpu_shape_t s = shape_of(g, y);
  const int64_t n = s.dims[rank - 1] / 2;
  int64_t lo[TPU_MAX_RANK] = {}, hi[TPU_MAX_RANK], st[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) hi[i] = s.dims[i], st[i] = 1;
  hi[rank - 1] = n;
  tpu_value_t re = tpu_graph_slice(g, y, lo, hi, st);
  lo[rank - 1] = n;
  hi[rank - 1] = 2 * n;
  return complex_join(g, re, tpu_graph_slice(g, y, lo, hi, st));
}

// The two complex operands converted to the result's component dtype.
std::pair<tpu_value_t, tpu_value_t> complex_operands(LowerCtx &ctx, tpu_dtype_t dt) {
  if (!is_complex_pair(ctx.tensor(0).scalar_type()) ||
      !is_complex_pair(ctx.tensor(1).scalar_type())) {
    throw Unsupported("complex product of a real operand");
  }
  return {convert(ctx.g, ctx.v(0), dt), convert(ctx.g, ctx.v(1), dt)};
}

// mm.out(self, mat2, out), bmm.out(self, mat2, out)
void matmul_out(LowerCtx &ctx, int batch) {
  tpu_dtype_t dt = component_dtype(ctx.out_meta[0].scalar_type());
  auto [a, b] = complex_operands(ctx, dt);
  ctx.results = {complex_matmul(ctx.g, a, b, batch, ctx.precision, dt)};
}

// dot(self, other) = sum a b, vdot (and vdot.out) = sum conj(a) b: a (1, n) @ b (n, 1)
template <bool Conjugate>
void dot_out(LowerCtx &ctx) {
  tpu_graph_t *g = ctx.g;
  tpu_dtype_t dt = component_dtype(ctx.out_meta[0].scalar_type());
  auto [a, b] = complex_operands(ctx, dt);
  if (Conjugate) {
    a = complex_join(g, complex_part(g, a, 0), tpu_graph_unary(g, TPU_OP_NEG, complex_part(g, a, 1)));
  }
  const int64_t n = shape_of(g, a).dims[0];
  tpu_shape_t row{}, col{}, scalar{};
  row.rank = col.rank = 3;
  row.dims[0] = col.dims[1] = 1;
  row.dims[1] = col.dims[0] = n;
  row.dims[2] = col.dims[2] = 2;
  scalar.rank = 1;
  scalar.dims[0] = 2;
  tpu_value_t y = complex_matmul(g, tpu_graph_reshape(g, a, &row), tpu_graph_reshape(g, b, &col),
                                 0, ctx.precision, dt);
  ctx.results = {tpu_graph_reshape(g, y, &scalar)};
}

void mm_out(LowerCtx &ctx) { matmul_out(ctx, 0); }
void bmm_out(LowerCtx &ctx) { matmul_out(ctx, 1); }

// Data movement (each result element a copy of one input element, or zero), cumsum and
// trace (sums, linear in each part): the op's real lowering applied to the real parts and to
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
    {"cumsum.out", {0}}, {"trace", {0}},
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
      {"linalg_vector_norm.out", vector_norm_out},
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
      {"prod", prod_out},
      {"prod.out", prod_out},
      {"prod.int_out", prod_out},
      {"cumprod.out", cumprod_out},
      {"mm.out", mm_out},
      {"bmm.out", bmm_out},
      {"dot", dot_out<false>},
      {"vdot", dot_out<true>},
      {"vdot.out", dot_out<true>},
  };
  for (const auto &[op, fn] : ops) register_complex_lowering(op, fn);
  for (const Movement &m : kMovements) register_complex_lowering(m.op, by_parts);
  return true;
}();

}  // namespace
}  // namespace torchtpu
