// lower_random.cpp: lowerings of the random ops: uniform_ and normal_ (of complex tensors
// too), normal with tensor mean/std, random_ (three overloads), bernoulli (in place,
// functional, out=), native_dropout and its backward, exponential_, log_normal_, cauchy_,
// geometric_ and randperm. rand/randn/randint and nn.init reach these through PyTorch's
// composites (empty + uniform_/normal_/random_).
//
// Every draw is an RNG node (counter-based Philox4x32-10, ir.h): the engine gives each
// random op a (seed, offset) pair from the chip's generator as two run-time i64 inputs
// (the last two graph parameters) and advances the offset by the op's result size (two
// numbers per complex value), so torch.manual_seed(s) gives the same numbers on every run,
// in every eager mode, and the executable is reused across calls. The numbers are not the
// CPU generator's numbers (PyTorch's CPU uses mt19937, CUDA its own Philox mapping): only
// their distributions agree.
//
// Values are computed in f32 (f64 for f64) and rounded once by the engine; integer draws
// take 32 random bits (a second Philox stream, keyed by seed ^ 0x5DEECE66D, supplies the
// high bits when the range needs more than 32).
#include <ATen/core/Tensor.h>

#include <cmath>

#include "lower_complex.h"

namespace torchtpu {
namespace {

tpu_value_t bin(LowerCtx &ctx, tpu_op_t op, tpu_value_t a, tpu_value_t b) {
  return tpu_graph_binary(ctx.g, op, a, b);
}

// The (seed, offset) inputs the engine appends after the argument parameters.
struct Rng {
  tpu_value_t seed = TPU_NO_VALUE, offset = TPU_NO_VALUE;
};

Rng rng_inputs(const LowerCtx &ctx) {
  Rng r;
  int np = tpu_graph_num_params(ctx.g);
  for (int i = 0; i < tpu_graph_num_nodes(ctx.g); i++) {
    const tpu_node_t *n = tpu_graph_node(ctx.g, i);
    if (n->op != TPU_OP_PARAMETER || n->dtype != TPU_I64 || n->shape.rank != 0) continue;
    if (n->attrs.param.index == np - 2) r.seed = i;
    if (n->attrs.param.index == np - 1) r.offset = i;
  }
  if (r.seed == TPU_NO_VALUE || r.offset == TPU_NO_VALUE) {
    throw Unsupported("random op without (seed, offset) inputs");
  }
  return r;
}

// An f32 (f64 for f64) draw of |dist| with result |r|'s shape.
tpu_value_t draw(LowerCtx &ctx, tpu_rng_dist_t dist, size_t r = 0) {
  Rng in = rng_inputs(ctx);
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype(r));
  if (!tpu_dtype_is_float(dt)) dt = TPU_F32;
  tpu_shape_t s = ctx.out_shape(r);
  return tpu_graph_rng(ctx.g, dist, dt, &s, in.seed, in.offset);
}

// Uniform 32-bit integers in [0, 2^32) as i64; |stream| 1 uses a second key.
tpu_value_t bits32(LowerCtx &ctx, int stream) {
  Rng in = rng_inputs(ctx);
  tpu_shape_t s = ctx.out_shape();
  tpu_value_t seed = in.seed;
  if (stream) seed = bin(ctx, TPU_OP_XOR, seed, scalar_const(ctx.g, TPU_I64, 0x5DEECE66D));
  return tpu_graph_rng(ctx.g, TPU_RNG_BITS, TPU_I64, &s, seed, in.offset);
}

tpu_value_t cst(LowerCtx &ctx, tpu_value_t like, double v) {
  return full(ctx.g, dtype_of(ctx.g, like), shape_of(ctx.g, like), v);
}

// uniform_(self, from, to): as PyTorch's CPU kernel, u takes as many random bits as the
// result dtype holds (8 for bf16), so rand() of bf16 stays below 1 after rounding.
void uniform(LowerCtx &ctx) {
  double from = ctx.arg(1).toDouble(), to = ctx.arg(2).toDouble();
  Rng in = rng_inputs(ctx);
  tpu_shape_t s = ctx.out_shape();
  tpu_dtype_t dt = ctx.out_dtype();
  if (!tpu_dtype_is_float(dt)) throw Unsupported("uniform_ of integers");
  tpu_value_t u = convert(ctx.g, tpu_graph_rng(ctx.g, TPU_RNG_UNIFORM, dt, &s, in.seed, in.offset), compute_dtype(dt));
  ctx.results = {bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, u, cst(ctx, u, to - from)), cst(ctx, u, from))};
}

// normal_(self, mean, std)
void normal(LowerCtx &ctx) {
  double mean = ctx.arg(1).toDouble(), std = ctx.arg(2).toDouble();
  tpu_value_t n = draw(ctx, TPU_RNG_NORMAL);
  ctx.results = {bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, n, cst(ctx, n, std)), cst(ctx, n, mean))};
}

// uniform_ and normal_ of a complex tensor, as the CPU's: they fill its real view (the
// (..., 2) pairs the graph holds) with the real draw, normal_'s std divided by sqrt(2) so
// that the complex value's variance is std^2; the mean goes to both parts
template <bool Normal>
void complex_fill(LowerCtx &ctx) {
  double a = ctx.arg(1).toDouble(), b = ctx.arg(2).toDouble();
  Rng in = rng_inputs(ctx);
  tpu_dtype_t dt = component_dtype(ctx.out_meta[0].scalar_type());
  tpu_shape_t s = ctx.out_shape();
  if (s.rank >= TPU_MAX_RANK) throw Unsupported("complex rank above 7");
  s.dims[s.rank++] = 2;
  tpu_value_t r = tpu_graph_rng(ctx.g, Normal ? TPU_RNG_NORMAL : TPU_RNG_UNIFORM, dt, &s,
                                in.seed, in.offset);
  double scale = Normal ? b / std::sqrt(2.0) : b - a;
  ctx.results = {bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, r, cst(ctx, r, scale)), cst(ctx, r, a))};
}

// normal.Tensor_float(mean, std) / float_Tensor / Tensor_Tensor (and out=): mean + std * N(0, 1)
// with mean and std broadcast to the result.
void normal_tensors(LowerCtx &ctx) {
  tpu_value_t n = draw(ctx, TPU_RNG_NORMAL);
  tpu_shape_t s = shape_of(ctx.g, n);
  tpu_dtype_t dt = dtype_of(ctx.g, n);
  auto operand = [&](size_t i) {
    return ctx.arg(i).isTensor() ? broadcast_to(ctx.g, convert(ctx.g, ctx.v(i), dt), s)
                                 : full(ctx.g, dt, s, ctx.arg(i).toDouble());
  };
  ctx.results = {bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, n, operand(1)), operand(0))};
}

// log_normal_(self, mean, std): exp(mean + std * N(0, 1))
void log_normal(LowerCtx &ctx) {
  double mean = ctx.arg(1).toDouble(), std = ctx.arg(2).toDouble();
  tpu_value_t n = draw(ctx, TPU_RNG_NORMAL);
  n = bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, n, cst(ctx, n, std)), cst(ctx, n, mean));
  ctx.results = {tpu_graph_unary(ctx.g, TPU_OP_EXP, n)};
}

// exponential_(self, lambd): -log(1 - u) / lambd, u in [0, 1)
void exponential(LowerCtx &ctx) {
  double lambd = ctx.arg(1).toDouble();
  tpu_value_t u = draw(ctx, TPU_RNG_UNIFORM);
  tpu_value_t l = tpu_graph_unary(ctx.g, TPU_OP_LOG1P, tpu_graph_unary(ctx.g, TPU_OP_NEG, u));
  ctx.results = {bin(ctx, TPU_OP_DIV, tpu_graph_unary(ctx.g, TPU_OP_NEG, l), cst(ctx, l, lambd))};
}

// cauchy_(self, median, sigma): median + sigma * tan(pi (u - 1/2))
void cauchy(LowerCtx &ctx) {
  double median = ctx.arg(1).toDouble(), sigma = ctx.arg(2).toDouble();
  tpu_value_t u = draw(ctx, TPU_RNG_UNIFORM);
  tpu_value_t centered = bin(ctx, TPU_OP_SUB, u, cst(ctx, u, 0.5));
  tpu_value_t t = tpu_graph_unary(ctx.g, TPU_OP_TAN, bin(ctx, TPU_OP_MUL, centered, cst(ctx, u, 3.14159265358979323846)));
  ctx.results = {bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, t, cst(ctx, t, sigma)), cst(ctx, t, median))};
}

// geometric_(self, p): ceil(log(1 - u) / log(1 - p)), at least 1
void geometric(LowerCtx &ctx) {
  double p = ctx.arg(1).toDouble();
  tpu_value_t u = draw(ctx, TPU_RNG_UNIFORM);
  tpu_value_t l = tpu_graph_unary(ctx.g, TPU_OP_LOG1P, tpu_graph_unary(ctx.g, TPU_OP_NEG, u));
  tpu_value_t k = tpu_graph_unary(ctx.g, TPU_OP_CEIL, bin(ctx, TPU_OP_DIV, l, cst(ctx, l, std::log1p(-p))));
  ctx.results = {bin(ctx, TPU_OP_MAX, k, cst(ctx, k, 1))};
}

// ---- integers --------------------------------------------------------------------------------

// The largest value random_ draws for the result dtype when no upper bound is given:
// 2^digits for floats (every integer up to it is exact), the max for integers.
uint64_t default_top(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_F32: return 1ull << 24;
    case TPU_F64: return 1ull << 53;
    case TPU_BF16: return 1ull << 8;
    case TPU_F16: return 1ull << 11;
    case TPU_I64: return (1ull << 63) - 1;
    case TPU_I32: return (1ull << 31) - 1;
    case TPU_I16: return (1ull << 15) - 1;
    case TPU_I8: return (1ull << 7) - 1;
    case TPU_U8: return 255;
    case TPU_BOOL: return 1;
    default: throw Unsupported("random_ dtype");
  }
}

// from + (uniform integer in [0, range)), range in [1, 2^63], as i64.
void random_range(LowerCtx &ctx, int64_t from, uint64_t range) {
  if (range == 0) throw Unsupported("random_ of an empty range");
  tpu_value_t v = bits32(ctx, 0);
  if (range > (1ull << 32)) {  // 63 random bits
    tpu_value_t hi = bin(ctx, TPU_OP_AND, bits32(ctx, 1), cst(ctx, v, 0x7fffffff));
    v = bin(ctx, TPU_OP_OR, bin(ctx, TPU_OP_SHIFT_LEFT, hi, cst(ctx, v, 32)), v);
  }
  if (range < (1ull << 63) && range != (1ull << 32)) {
    tpu_shape_t scalar{};
    tpu_value_t r = tpu_graph_constant_int(ctx.g, TPU_I64, &scalar, static_cast<int64_t>(range));
    v = bin(ctx, TPU_OP_REM, v, broadcast_to(ctx.g, r, shape_of(ctx.g, v)));
  }
  if (from != 0) {
    tpu_shape_t scalar{};
    tpu_value_t f = tpu_graph_constant_int(ctx.g, TPU_I64, &scalar, from);
    v = bin(ctx, TPU_OP_ADD, v, broadcast_to(ctx.g, f, shape_of(ctx.g, v)));
  }
  ctx.results = {v};
}

// random_.from(self, from, to?)
void random_from(LowerCtx &ctx) {
  int64_t from = ctx.arg(1).toInt();
  if (ctx.arg(2).isNone()) {
    uint64_t top = default_top(ctx.out_dtype());
    random_range(ctx, from, top - static_cast<uint64_t>(from) + 1);
  } else {
    random_range(ctx, from, static_cast<uint64_t>(ctx.arg(2).toInt() - from));
  }
}

void random_to(LowerCtx &ctx) { random_range(ctx, 0, static_cast<uint64_t>(ctx.arg(1).toInt())); }

void random_full(LowerCtx &ctx) {  // random_(self): [0, default_top]
  random_range(ctx, 0, default_top(ctx.out_dtype()) + 1);
}

// ---- bernoulli and dropout ----------------------------------------------------------------------

// bernoulli_.float(self, p) / bernoulli.p(self, p): u < p
void bernoulli_scalar(LowerCtx &ctx) {
  tpu_value_t u = draw(ctx, TPU_RNG_UNIFORM);
  ctx.results = {tpu_graph_compare(ctx.g, TPU_CMP_LT, u, cst(ctx, u, ctx.arg(1).toDouble()))};
}

// u < p for a probability tensor p broadcast to the result.
void bernoulli_of(LowerCtx &ctx, tpu_value_t p) {
  tpu_value_t u = draw(ctx, TPU_RNG_UNIFORM);
  tpu_shape_t s = shape_of(ctx.g, u);
  tpu_dtype_t pdt = compute_dtype(dtype_of(ctx.g, p));
  if (!tpu_dtype_is_float(pdt)) pdt = TPU_F32;
  u = convert(ctx.g, u, pdt);
  ctx.results = {tpu_graph_compare(ctx.g, TPU_CMP_LT, u, broadcast_to(ctx.g, convert(ctx.g, p, pdt), s))};
}

void bernoulli_tensor(LowerCtx &ctx) { bernoulli_of(ctx, ctx.v(1)); }  // (self, p)
void bernoulli_self(LowerCtx &ctx) { bernoulli_of(ctx, ctx.v(0)); }    // bernoulli(self)

// native_dropout(input, p, train?) -> (input * mask / (1 - p), mask); train None means
// training, as in PyTorch.
void native_dropout(LowerCtx &ctx) {
  double p = ctx.arg(1).toDouble();
  bool train = ctx.arg(2).isNone() || ctx.arg(2).toBool();
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype(0));
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  tpu_shape_t s = shape_of(ctx.g, x);
  if (!train) {
    ctx.results = {x, full(ctx.g, TPU_BOOL, s, 1)};
    return;
  }
  tpu_value_t u = draw(ctx, TPU_RNG_UNIFORM, 1);
  tpu_value_t keep = tpu_graph_compare(ctx.g, TPU_CMP_LT, u, cst(ctx, u, 1 - p));
  double scale = p >= 1 ? 0 : 1 / (1 - p);
  tpu_value_t y = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, x, convert(ctx.g, keep, dt)), full(ctx.g, dt, s, scale));
  ctx.results = {y, keep};
}

// native_dropout_backward(grad_output, mask, scale)
void native_dropout_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = convert(ctx.g, ctx.v(0), dt);
  tpu_shape_t s = shape_of(ctx.g, g);
  tpu_value_t m = broadcast_to(ctx.g, convert(ctx.g, ctx.v(1), dt), s);
  ctx.results = {bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, g, m), full(ctx.g, dt, s, ctx.arg(2).toDouble()))};
}

// randperm.generator_out(n, generator, out): the order of n random 32-bit keys (a stable
// sort, so equal keys still give a permutation).
void randperm(LowerCtx &ctx) {
  tpu_shape_t s = ctx.out_shape();
  if (s.rank != 1 || s.dims[0] == 0) throw Unsupported("randperm shape");
  tpu_value_t keys = bits32(ctx, 0);
  tpu_sort_attrs_t a{};
  a.dim = 0;
  a.stable = true;
  ctx.results = {tpu_graph_argsort(ctx.g, keys, &a)};
}

LoweringRegistrar registrar({
    {"uniform_", uniform},
    {"normal_", normal},
    {"normal.Tensor_float", normal_tensors},
    {"normal.Tensor_float_out", normal_tensors},
    {"normal.float_Tensor", normal_tensors},
    {"normal.float_Tensor_out", normal_tensors},
    {"normal.Tensor_Tensor", normal_tensors},
    {"normal.Tensor_Tensor_out", normal_tensors},
    {"log_normal_", log_normal},
    {"exponential_", exponential},
    {"cauchy_", cauchy},
    {"geometric_", geometric},
    {"random_.from", random_from},
    {"random_.to", random_to},
    {"random_", random_full},
    {"bernoulli_.float", bernoulli_scalar},
    {"bernoulli.p", bernoulli_scalar},
    {"bernoulli.float_out", bernoulli_scalar},
    {"bernoulli_.Tensor", bernoulli_tensor},
    {"bernoulli.Tensor", bernoulli_tensor},
    {"bernoulli.Tensor_out", bernoulli_tensor},
    {"bernoulli", bernoulli_self},
    {"bernoulli.out", bernoulli_self},
    {"native_dropout", native_dropout},
    {"native_dropout_backward", native_dropout_backward},
    {"native_dropout_backward.out", native_dropout_backward},
    {"randperm.generator_out", randperm},
});

[[maybe_unused]] const bool complex_registered = [] {
  register_complex_lowering("uniform_", complex_fill<false>);
  register_complex_lowering("normal_", complex_fill<true>);
  return true;
}();

}  // namespace
}  // namespace torchtpu
