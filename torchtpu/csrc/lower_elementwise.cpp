// lower_elementwise.cpp: lowerings of ATen's elementwise ops: arithmetic, comparisons,
// math functions, activations and their backward formulas, where/clamp/lerp, fills.
//
// Structured ops arrive as their .out overload (PyTorch's functional and in-place forms
// call it with an allocated or self out). Math runs in the common dtype of the inputs
// (PyTorch's type promotion), widened to f32 for bf16/f16 like the TPU's vector unit, and
// the engine rounds the result to the output dtype once.
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/result_type.h>

#include <cmath>

#include "lower_ew.h"

namespace torchtpu {
namespace {

// The common dtype PyTorch computes a binary op in (type promotion, wrapped scalars).
at::ScalarType common_type(const LowerCtx &ctx, size_t a, size_t b) {
  const c10::IValue &x = ctx.arg(a), &y = ctx.arg(b);
  if (y.isScalar()) return at::result_type(x.toTensor(), y.toScalar());
  return at::result_type(x.toTensor(), y.toTensor());
}

// Sets up a binary op of args a and b: compute dtype from promotion, result shape.
Ew binary_setup(LowerCtx &ctx, size_t a, size_t b, tpu_value_t *x, tpu_value_t *y) {
  Ew B{ctx.g, compute_dtype(to_tpu_dtype(common_type(ctx, a, b))), ctx.out_shape(), };
  *x = operand(ctx, a, B.dt, B.shape);
  *y = operand(ctx, b, B.dt, B.shape);
  return B;
}

// ---- arithmetic ------------------------------------------------------------------------

void lower_add(LowerCtx &ctx, bool subtract) {  // self (+|-) alpha * other
  tpu_value_t x, y;
  Ew B = binary_setup(ctx, 0, 1, &x, &y);
  tpu_value_t alpha = operand(ctx, 2, B.dt, B.shape);
  tpu_value_t scaled = B.op(TPU_OP_MUL, y, alpha);
  ctx.results = {B.op(subtract ? TPU_OP_SUB : TPU_OP_ADD, x, scaled)};
}
void add_out(LowerCtx &ctx) { lower_add(ctx, false); }
void rsub(LowerCtx &ctx) {  // other - alpha * self
  tpu_value_t x, y;
  Ew B = binary_setup(ctx, 0, 1, &x, &y);
  tpu_value_t alpha = operand(ctx, 2, B.dt, B.shape);
  ctx.results = {B.op(TPU_OP_SUB, y, B.op(TPU_OP_MUL, x, alpha))};
}
void sub_out(LowerCtx &ctx) { lower_add(ctx, true); }

void binary_simple(LowerCtx &ctx, tpu_op_t op) {
  tpu_value_t x, y;
  Ew B = binary_setup(ctx, 0, 1, &x, &y);
  ctx.results = {B.op(op, x, y)};
}
void mul_out(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_MUL); }
void maximum_out(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_MAX); }
void minimum_out(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_MIN); }
void atan2_out(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_ATAN2); }
void fmod_out(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_REM); }
void bitwise_and_out(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_AND); }
void bitwise_or_out(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_OR); }
void bitwise_xor_out(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_XOR); }
// by a negative or too large amount: 0, or the sign fill (the kernels' rule is PyTorch's).
// Shifts of float or bool tensors raise NotImplementedError as on CPU and CUDA, before the
// meta kernel's RuntimeError (a presize hook runs first).
void shift_check(const std::vector<c10::IValue> &args) {
  const c10::IValue &a = args[0], &b = args[1];
  at::ScalarType t = !a.isTensor()  ? at::result_type(b.toTensor(), a.toScalar())
                     : b.isTensor() ? at::result_type(a.toTensor(), b.toTensor())
                                    : at::result_type(a.toTensor(), b.toScalar());
  TORCH_CHECK_NOT_IMPLEMENTED(at::isIntegralType(t, /*includeBool=*/false), "\"shift_tpu\" not implemented for '",
                              c10::toString(t), "'");
}
void shift_left(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_SHIFT_LEFT); }
void shift_right(LowerCtx &ctx) { binary_simple(ctx, TPU_OP_SHIFT_RIGHT); }

// pow: float results come from the output dtype (int ** negative float -> float).
void pow_out(LowerCtx &ctx) {
  Ew B = ew_for_result(ctx);
  tpu_value_t x = operand(ctx, 0, B.dt, B.shape), y = operand(ctx, 1, B.dt, B.shape);
  ctx.results = {B.op(TPU_OP_POW, x, y)};
}

// xlogy(x, y) = x * log(y) and special.xlog1py(x, y) = x * log1p(y): 0 where x == 0, NaN
// where y is NaN (PyTorch's definition); the result is float even for integer operands.
void x_times_log(LowerCtx &ctx, tpu_op_t log_op) {
  Ew B = ew_for_result(ctx);
  tpu_value_t x = operand(ctx, 0, B.dt, B.shape), y = operand(ctx, 1, B.dt, B.shape);
  tpu_value_t r = B.sel(B.cmp(TPU_CMP_EQ, x, B.k(0)), B.k(0), B.op(TPU_OP_MUL, x, B.un(log_op, y)));
  ctx.results = {B.sel(B.cmp(TPU_CMP_NE, y, y), y, r)};
}
void xlogy_out(LowerCtx &ctx) { x_times_log(ctx, TPU_OP_LOG); }
void xlog1py_out(LowerCtx &ctx) { x_times_log(ctx, TPU_OP_LOG1P); }

// Python-style remainder: the sign follows the divisor.
void remainder_out(LowerCtx &ctx) {
  tpu_value_t x, y;
  Ew B = binary_setup(ctx, 0, 1, &x, &y);
  tpu_value_t r = B.op(TPU_OP_REM, x, y);
  tpu_value_t zero = B.k(0);
  tpu_value_t fix = B.op(TPU_OP_AND, B.cmp(TPU_CMP_NE, r, zero),
                         B.cmp(TPU_CMP_NE, B.cmp(TPU_CMP_LT, r, zero), B.cmp(TPU_CMP_LT, y, zero)));
  ctx.results = {B.sel(fix, B.op(TPU_OP_ADD, r, y), r)};
}

void div_out(LowerCtx &ctx) {  // true division, or rounding_mode "trunc"/"floor"
  std::string mode;
  if (ctx.args->size() > 3 && ctx.arg(2).isString()) mode = ctx.arg(2).toStringRef();
  tpu_value_t x, y;
  Ew B = binary_setup(ctx, 0, 1, &x, &y);
  if (mode.empty()) {
    B.dt = compute_dtype(ctx.out_dtype());  // int / int -> float
    x = operand(ctx, 0, B.dt, B.shape);
    y = operand(ctx, 1, B.dt, B.shape);
    ctx.results = {B.op(TPU_OP_DIV, x, y)};
  } else if (mode == "trunc") {
    tpu_value_t q = B.op(TPU_OP_DIV, x, y);
    if (tpu_dtype_is_float(B.dt)) {
      q = B.sel(B.cmp(TPU_CMP_LT, q, B.k(0)), B.un(TPU_OP_CEIL, q), B.un(TPU_OP_FLOOR, q));
    }
    ctx.results = {q};
  } else {
    ctx.results = {floor_divide(B, x, y)};
  }
}

void floor_divide(LowerCtx &ctx) {
  tpu_value_t x, y;
  Ew B = binary_setup(ctx, 0, 1, &x, &y);
  ctx.results = {floor_divide(B, x, y)};
}

// self + value * t1 (*|/) t2
void addc(LowerCtx &ctx, tpu_op_t op) {
  Ew B = ew_for_result(ctx);
  tpu_value_t s = operand(ctx, 0, B.dt, B.shape), a = operand(ctx, 1, B.dt, B.shape),
              b = operand(ctx, 2, B.dt, B.shape), v = operand(ctx, 3, B.dt, B.shape);
  ctx.results = {B.op(TPU_OP_ADD, s, B.op(TPU_OP_MUL, v, B.op(op, a, b)))};
}
void addcmul_out(LowerCtx &ctx) { addc(ctx, TPU_OP_MUL); }
void addcdiv_out(LowerCtx &ctx) { addc(ctx, TPU_OP_DIV); }

// lerp as PyTorch computes it: weight < 0.5 ? self + w (end - self) : end - (end - self)(1 - w)
void lerp_out(LowerCtx &ctx) {
  Ew B = ew_for_result(ctx);
  tpu_value_t s = operand(ctx, 0, B.dt, B.shape), e = operand(ctx, 1, B.dt, B.shape),
              w = operand(ctx, 2, B.dt, B.shape);
  tpu_value_t diff = B.op(TPU_OP_SUB, e, s);
  tpu_value_t lo = B.op(TPU_OP_ADD, s, B.op(TPU_OP_MUL, w, diff));
  tpu_value_t hi = B.op(TPU_OP_SUB, e, B.op(TPU_OP_MUL, diff, B.op(TPU_OP_SUB, B.k(1), w)));
  tpu_value_t small = B.cmp(TPU_CMP_LT, B.un(TPU_OP_ABS, w), B.k(0.5));
  ctx.results = {B.sel(small, lo, hi)};
}

// ---- comparisons, where, clamp -----------------------------------------------------------

void compare(LowerCtx &ctx, tpu_compare_dir_t dir) {
  tpu_value_t x, y;
  Ew B = binary_setup(ctx, 0, 1, &x, &y);
  ctx.results = {B.cmp(dir, x, y)};
}
void eq_out(LowerCtx &ctx) { compare(ctx, TPU_CMP_EQ); }
void ne_out(LowerCtx &ctx) { compare(ctx, TPU_CMP_NE); }
void lt_out(LowerCtx &ctx) { compare(ctx, TPU_CMP_LT); }
void le_out(LowerCtx &ctx) { compare(ctx, TPU_CMP_LE); }
void gt_out(LowerCtx &ctx) { compare(ctx, TPU_CMP_GT); }
void ge_out(LowerCtx &ctx) { compare(ctx, TPU_CMP_GE); }

void logical(LowerCtx &ctx, tpu_op_t op) {
  tpu_shape_t shape = ctx.out_shape();
  auto as_bool = [&](size_t i) {
    tpu_value_t v = ctx.v(i);
    tpu_value_t b = dtype_of(ctx.g, v) == TPU_BOOL
                        ? v
                        : tpu_graph_compare(ctx.g, TPU_CMP_NE, v,
                                            full(ctx.g, dtype_of(ctx.g, v), shape_of(ctx.g, v), 0));
    return broadcast_to(ctx.g, b, shape);
  };
  ctx.results = {tpu_graph_binary(ctx.g, op, as_bool(0), as_bool(1))};
}
void logical_and_out(LowerCtx &ctx) { logical(ctx, TPU_OP_AND); }
void logical_or_out(LowerCtx &ctx) { logical(ctx, TPU_OP_OR); }
void logical_xor_out(LowerCtx &ctx) { logical(ctx, TPU_OP_XOR); }

void where_self(LowerCtx &ctx) {  // where(condition, self, other)
  tpu_shape_t shape = ctx.out_shape();
  tpu_dtype_t dt = ctx.out_dtype();
  tpu_value_t c = broadcast_to(ctx.g, convert(ctx.g, ctx.v(0), TPU_BOOL), shape);
  ctx.results = {tpu_graph_select(ctx.g, c, operand(ctx, 1, dt, shape), operand(ctx, 2, dt, shape))};
}

// clamp(self, min=None, max=None) with Scalar or Tensor bounds. A NaN in self or in a
// bound gives NaN, as in PyTorch (x < NaN is false, so the NaN bound is selected explicitly).
void clamp_impl(LowerCtx &ctx, int min_arg, int max_arg) {
  Ew B = ew_for_result(ctx);
  tpu_value_t x = operand(ctx, 0, B.dt, B.shape);
  if (min_arg >= 0 && ctx.v(min_arg) != TPU_NO_VALUE) {
    tpu_value_t lo = operand(ctx, min_arg, B.dt, B.shape);
    x = B.sel(B.cmp(TPU_CMP_LT, x, lo), lo, x);
    x = B.sel(B.cmp(TPU_CMP_NE, lo, lo), lo, x);
  }
  if (max_arg >= 0 && ctx.v(max_arg) != TPU_NO_VALUE) {
    tpu_value_t hi = operand(ctx, max_arg, B.dt, B.shape);
    x = B.sel(B.cmp(TPU_CMP_GT, x, hi), hi, x);
    x = B.sel(B.cmp(TPU_CMP_NE, hi, hi), hi, x);
  }
  ctx.results = {x};
}
void clamp_out(LowerCtx &ctx) { clamp_impl(ctx, 1, 2); }
void clamp_min_out(LowerCtx &ctx) { clamp_impl(ctx, 1, -1); }
void clamp_max_out(LowerCtx &ctx) { clamp_impl(ctx, -1, 1); }

// ---- unary math ----------------------------------------------------------------------------

template <tpu_op_t OP>
void unary_out(LowerCtx &ctx) {
  Ew B;
  tpu_value_t x = unary_input(ctx, &B);
  ctx.results = {B.un(OP, x)};
}

void reciprocal_out(LowerCtx &ctx) {
  Ew B;
  tpu_value_t x = unary_input(ctx, &B);
  ctx.results = {B.op(TPU_OP_DIV, B.k(1), x)};
}

void log2_out(LowerCtx &ctx) {
  Ew B;
  tpu_value_t x = unary_input(ctx, &B);
  ctx.results = {B.op(TPU_OP_MUL, B.un(TPU_OP_LOG, x), B.k(1.0 / std::log(2.0)))};
}

void trunc_out(LowerCtx &ctx) {
  Ew B;
  tpu_value_t x = unary_input(ctx, &B);
  if (!tpu_dtype_is_float(B.dt)) {
    ctx.results = {x};
    return;
  }
  ctx.results = {B.sel(B.cmp(TPU_CMP_LT, x, B.k(0)), B.un(TPU_OP_CEIL, x), B.un(TPU_OP_FLOOR, x))};
}

void round_out(LowerCtx &ctx) {  // round half to even, as torch.round (decimals=0)
  Ew B;
  tpu_value_t x = unary_input(ctx, &B);
  ctx.results = {tpu_dtype_is_float(B.dt) ? B.un(TPU_OP_ROUND_EVEN, x) : x};
}

void logical_not_out(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  tpu_value_t b = tpu_graph_compare(ctx.g, TPU_CMP_EQ, x,
                                    full(ctx.g, dtype_of(ctx.g, x), shape_of(ctx.g, x), 0));
  ctx.results = {b};
}

void bitwise_not_out(LowerCtx &ctx) { ctx.results = {tpu_graph_unary(ctx.g, TPU_OP_NOT, ctx.v(0))}; }

void isinf_sign(LowerCtx &ctx, double inf) {
  tpu_value_t x = ctx.v(0);
  tpu_dtype_t dt = dtype_of(ctx.g, x);
  if (!tpu_dtype_is_float(dt)) {
    ctx.results = {full(ctx.g, TPU_BOOL, shape_of(ctx.g, x), 0)};
    return;
  }
  ctx.results = {tpu_graph_compare(ctx.g, TPU_CMP_EQ, x, full(ctx.g, dt, shape_of(ctx.g, x), inf))};
}
void isneginf_out(LowerCtx &ctx) { isinf_sign(ctx, -INFINITY); }
void isposinf_out(LowerCtx &ctx) { isinf_sign(ctx, INFINITY); }

void isnan(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  ctx.results = {tpu_graph_compare(ctx.g, TPU_CMP_NE, x, x)};
}

// ---- activations and their gradients --------------------------------------------------------

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

bool gelu_tanh(const LowerCtx &ctx, size_t arg) {
  return ctx.args->size() > arg && ctx.arg(arg).isString() && ctx.arg(arg).toStringRef() == "tanh";
}

void gelu_out(LowerCtx &ctx) {
  Ew B;
  tpu_value_t x = unary_input(ctx, &B);
  tpu_value_t half_x = B.op(TPU_OP_MUL, x, B.k(0.5));
  tpu_value_t inner;
  if (gelu_tanh(ctx, 1)) {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    tpu_value_t x3 = B.op(TPU_OP_MUL, B.op(TPU_OP_MUL, x, x), x);
    tpu_value_t u = B.op(TPU_OP_MUL, B.k(kSqrt2OverPi),
                         B.op(TPU_OP_ADD, x, B.op(TPU_OP_MUL, B.k(0.044715), x3)));
    inner = B.un(TPU_OP_TANH, u);
  } else {  // 0.5 x (1 + erf(x / sqrt 2))
    inner = B.un(TPU_OP_ERF, B.op(TPU_OP_MUL, x, B.k(kSqrt1_2)));
  }
  ctx.results = {B.op(TPU_OP_MUL, half_x, B.op(TPU_OP_ADD, B.k(1), inner))};
}

void gelu_backward_out(LowerCtx &ctx) {  // (grad_output, self, approximate, grad_input)
  Ew B = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, B.dt, B.shape), x = operand(ctx, 1, B.dt, B.shape);
  tpu_value_t d;
  if (gelu_tanh(ctx, 2)) {
    tpu_value_t x2 = B.op(TPU_OP_MUL, x, x);
    tpu_value_t u = B.op(TPU_OP_MUL, B.k(kSqrt2OverPi),
                         B.op(TPU_OP_ADD, x, B.op(TPU_OP_MUL, B.k(0.044715), B.op(TPU_OP_MUL, x2, x))));
    tpu_value_t t = B.un(TPU_OP_TANH, u);
    tpu_value_t du = B.op(TPU_OP_MUL, B.k(kSqrt2OverPi),
                          B.op(TPU_OP_ADD, B.k(1), B.op(TPU_OP_MUL, B.k(3 * 0.044715), x2)));
    tpu_value_t sech2 = B.op(TPU_OP_SUB, B.k(1), B.op(TPU_OP_MUL, t, t));
    tpu_value_t left = B.op(TPU_OP_MUL, B.k(0.5), B.op(TPU_OP_ADD, B.k(1), t));
    tpu_value_t right = B.op(TPU_OP_MUL, B.op(TPU_OP_MUL, B.k(0.5), x), B.op(TPU_OP_MUL, sech2, du));
    d = B.op(TPU_OP_ADD, left, right);
  } else {  // Phi(x) + x phi(x)
    tpu_value_t cdf = B.op(TPU_OP_MUL, B.k(0.5),
                           B.op(TPU_OP_ADD, B.k(1), B.un(TPU_OP_ERF, B.op(TPU_OP_MUL, x, B.k(kSqrt1_2)))));
    tpu_value_t pdf = B.op(TPU_OP_MUL, B.k(kInvSqrt2Pi),
                           B.un(TPU_OP_EXP, B.op(TPU_OP_MUL, B.k(-0.5), B.op(TPU_OP_MUL, x, x))));
    d = B.op(TPU_OP_ADD, cdf, B.op(TPU_OP_MUL, x, pdf));
  }
  ctx.results = {B.op(TPU_OP_MUL, dy, d)};
}

void relu(LowerCtx &ctx) {
  Ew B;
  tpu_value_t x = unary_input(ctx, &B);
  tpu_value_t zero = B.k(0);
  ctx.results = {B.sel(B.cmp(TPU_CMP_GT, x, zero), x, B.sel(B.cmp(TPU_CMP_NE, x, x), x, zero))};
}

void silu_out(LowerCtx &ctx) {
  Ew B;
  tpu_value_t x = unary_input(ctx, &B);
  ctx.results = {B.op(TPU_OP_MUL, x, B.un(TPU_OP_LOGISTIC, x))};
}

void silu_backward_out(LowerCtx &ctx) {  // dy * s (1 + x (1 - s))
  Ew B = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, B.dt, B.shape), x = operand(ctx, 1, B.dt, B.shape);
  tpu_value_t s = B.un(TPU_OP_LOGISTIC, x);
  tpu_value_t d = B.op(TPU_OP_MUL, s,
                       B.op(TPU_OP_ADD, B.k(1), B.op(TPU_OP_MUL, x, B.op(TPU_OP_SUB, B.k(1), s))));
  ctx.results = {B.op(TPU_OP_MUL, dy, d)};
}

void sigmoid_backward_out(LowerCtx &ctx) {  // dy * y (1 - y)
  Ew B = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, B.dt, B.shape), y = operand(ctx, 1, B.dt, B.shape);
  ctx.results = {B.op(TPU_OP_MUL, dy, B.op(TPU_OP_MUL, y, B.op(TPU_OP_SUB, B.k(1), y)))};
}

void tanh_backward_out(LowerCtx &ctx) {  // dy * (1 - y^2)
  Ew B = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, B.dt, B.shape), y = operand(ctx, 1, B.dt, B.shape);
  ctx.results = {B.op(TPU_OP_MUL, dy, B.op(TPU_OP_SUB, B.k(1), B.op(TPU_OP_MUL, y, y)))};
}

void threshold_backward_out(LowerCtx &ctx) {  // (grad_output, self, threshold)
  Ew B = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, B.dt, B.shape), x = operand(ctx, 1, B.dt, B.shape);
  tpu_value_t t = operand(ctx, 2, B.dt, B.shape);
  ctx.results = {B.sel(B.cmp(TPU_CMP_LE, x, t), B.k(0), dy)};
}

void leaky_relu_out(LowerCtx &ctx) {  // (self, negative_slope)
  Ew B;
  tpu_value_t x = unary_input(ctx, &B);
  tpu_value_t slope = operand(ctx, 1, B.dt, B.shape);
  ctx.results = {B.sel(B.cmp(TPU_CMP_GT, x, B.k(0)), x, B.op(TPU_OP_MUL, x, slope))};
}

void leaky_relu_backward_out(LowerCtx &ctx) {  // (grad_output, self, slope, self_is_result)
  Ew B = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, B.dt, B.shape), x = operand(ctx, 1, B.dt, B.shape);
  tpu_value_t slope = operand(ctx, 2, B.dt, B.shape);
  ctx.results = {B.sel(B.cmp(TPU_CMP_GT, x, B.k(0)), dy, B.op(TPU_OP_MUL, dy, slope))};
}

// ---- fills ------------------------------------------------------------------------------------

void fill_scalar(LowerCtx &ctx) {  // fill_(self, value)
  tpu_dtype_t dt = ctx.out_dtype();
  ctx.results = {operand(ctx, 1, dt, ctx.out_shape())};
}

void zero_(LowerCtx &ctx) { ctx.results = {full(ctx.g, ctx.out_dtype(), ctx.out_shape(), 0)}; }

void masked_fill(LowerCtx &ctx) {  // masked_fill_(self, mask, value)
  tpu_dtype_t dt = ctx.out_dtype();
  tpu_shape_t shape = ctx.out_shape();
  tpu_value_t mask = broadcast_to(ctx.g, ctx.v(1), shape);
  ctx.results = {tpu_graph_select(ctx.g, mask, operand(ctx, 2, dt, shape), ctx.v(0))};
}

[[maybe_unused]] const bool registered_shifts = [] {
  const std::pair<const char *, LowerFn> shifts[] = {
      {"bitwise_left_shift.Tensor_out", shift_left},   {"bitwise_left_shift.Tensor_Scalar_out", shift_left},
      {"bitwise_left_shift.Scalar_Tensor_out", shift_left},
      {"bitwise_right_shift.Tensor_out", shift_right}, {"bitwise_right_shift.Tensor_Scalar_out", shift_right},
      {"bitwise_right_shift.Scalar_Tensor_out", shift_right},
      {"__lshift__.Scalar", shift_left},   {"__lshift__.Tensor", shift_left},
      {"__ilshift__.Scalar", shift_left},  {"__ilshift__.Tensor", shift_left},
      {"__rshift__.Scalar", shift_right},  {"__rshift__.Tensor", shift_right},
      {"__irshift__.Scalar", shift_right}, {"__irshift__.Tensor", shift_right},
  };
  for (const auto &[op, fn] : shifts) {
    register_lowering(op, fn);
    register_presize(op, shift_check);
  }
  return true;
}();

LoweringRegistrar registrar({
    {"add.out", add_out},
    {"sub.out", sub_out},
    {"rsub.Tensor", rsub},
    {"rsub.Scalar", rsub},
    {"mul.out", mul_out},
    {"div.out", div_out},
    {"div.out_mode", div_out},
    {"floor_divide", floor_divide},
    {"floor_divide.out", floor_divide},
    {"maximum.out", maximum_out},
    {"minimum.out", minimum_out},
    {"atan2.out", atan2_out},
    {"fmod.Tensor_out", fmod_out},
    {"remainder.Tensor_out", remainder_out},
    {"pow.Tensor_Tensor_out", pow_out},
    {"pow.Tensor_Scalar_out", pow_out},
    {"pow.Scalar_out", pow_out},
    {"xlogy.OutTensor", xlogy_out},
    {"xlogy.OutScalar_Self", xlogy_out},
    {"xlogy.OutScalar_Other", xlogy_out},
    {"special_xlog1py.out", xlog1py_out},
    {"special_xlog1py.self_scalar_out", xlog1py_out},
    {"special_xlog1py.other_scalar_out", xlog1py_out},
    {"bitwise_and.Tensor_out", bitwise_and_out},
    {"bitwise_or.Tensor_out", bitwise_or_out},
    {"bitwise_xor.Tensor_out", bitwise_xor_out},
    {"logical_and.out", logical_and_out},
    {"logical_or.out", logical_or_out},
    {"logical_xor.out", logical_xor_out},
    {"addcmul.out", addcmul_out},
    {"addcdiv.out", addcdiv_out},
    {"lerp.Scalar_out", lerp_out},
    {"lerp.Tensor_out", lerp_out},
    {"eq.Tensor_out", eq_out},
    {"eq.Scalar_out", eq_out},
    {"ne.Tensor_out", ne_out},
    {"ne.Scalar_out", ne_out},
    {"lt.Tensor_out", lt_out},
    {"lt.Scalar_out", lt_out},
    {"le.Tensor_out", le_out},
    {"le.Scalar_out", le_out},
    {"gt.Tensor_out", gt_out},
    {"gt.Scalar_out", gt_out},
    {"ge.Tensor_out", ge_out},
    {"ge.Scalar_out", ge_out},
    {"where.self", where_self},
    {"where.self_out", where_self},
    {"clamp.out", clamp_out},
    {"clamp.Tensor_out", clamp_out},
    {"clamp_min.out", clamp_min_out},
    {"clamp_max.out", clamp_max_out},
    {"abs.out", unary_out<TPU_OP_ABS>},
    {"neg.out", unary_out<TPU_OP_NEG>},
    {"exp.out", unary_out<TPU_OP_EXP>},
    {"expm1.out", unary_out<TPU_OP_EXPM1>},
    {"log.out", unary_out<TPU_OP_LOG>},
    {"log1p.out", unary_out<TPU_OP_LOG1P>},
    {"log2.out", log2_out},
    {"sqrt.out", unary_out<TPU_OP_SQRT>},
    {"rsqrt.out", unary_out<TPU_OP_RSQRT>},
    {"tanh.out", unary_out<TPU_OP_TANH>},
    {"sigmoid.out", unary_out<TPU_OP_LOGISTIC>},
    {"sin.out", unary_out<TPU_OP_SIN>},
    {"cos.out", unary_out<TPU_OP_COS>},
    {"tan.out", unary_out<TPU_OP_TAN>},
    {"erf.out", unary_out<TPU_OP_ERF>},
    {"floor.out", unary_out<TPU_OP_FLOOR>},
    {"ceil.out", unary_out<TPU_OP_CEIL>},
    {"sign.out", unary_out<TPU_OP_SIGN>},
    {"sgn.out", unary_out<TPU_OP_SIGN>},  // sign for real dtypes (complex has no lowering)
    {"trunc.out", trunc_out},
    {"round.out", round_out},
    {"reciprocal.out", reciprocal_out},
    {"logical_not.out", logical_not_out},
    {"bitwise_not.out", bitwise_not_out},
    {"isneginf.out", isneginf_out},
    {"isposinf.out", isposinf_out},
    {"isnan", isnan},
    {"relu", relu},
    {"relu_", relu},
    {"gelu.out", gelu_out},
    {"gelu_backward.grad_input", gelu_backward_out},
    {"silu.out", silu_out},
    {"silu_backward.grad_input", silu_backward_out},
    {"sigmoid_backward.grad_input", sigmoid_backward_out},
    {"tanh_backward.grad_input", tanh_backward_out},
    {"threshold_backward.grad_input", threshold_backward_out},
    {"leaky_relu.out", leaky_relu_out},
    {"leaky_relu_backward.grad_input", leaky_relu_backward_out},
    {"fill_.Scalar", fill_scalar},
    {"fill_.Tensor", fill_scalar},
    {"zero_", zero_},
    {"masked_fill_.Scalar", masked_fill},
    {"masked_fill_.Tensor", masked_fill},
});

}  // namespace
}  // namespace torchtpu
