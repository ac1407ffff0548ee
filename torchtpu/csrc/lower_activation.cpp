// lower_activation.cpp: lowerings of the activation functions of torch.nn beyond ReLU, GELU
// and SiLU (lower_elementwise.cpp), with their backward formulas:
//   elu (nn.ELU, SELU, CELU: all three are elu with other coefficients), glu,
//   hardtanh (nn.Hardtanh, ReLU6), hardswish, hardsigmoid (MobileNetV3), mish,
//   softshrink, hardshrink, threshold, logit.
// The formulas and their NaN, infinity and signed-zero cases are those of ATen's CPU kernels
// (aten/src/ATen/native/cpu/Activation.cpp and UnaryOpsKernel.cpp): comparisons are written
// so that a NaN takes the same branch as there. Math runs in f32 for bf16/f16 (the vector
// unit is 32-bit) and the engine rounds the result once.
#include <ATen/core/Tensor.h>

#include "lower_ew.h"

namespace torchtpu {
namespace {

// ELU's coefficients from its (alpha, scale, input_scale) arguments at |first|:
// neg = alpha * scale, pos = scale, input = input_scale (as ATen names them).
struct EluCoefs {
  tpu_value_t neg, pos, input;
};
EluCoefs elu_coefs(LowerCtx &ctx, const Ew &E, size_t first) {
  tpu_value_t scale = operand(ctx, first + 1, E.dt, E.shape);
  return {E.mul(operand(ctx, first, E.dt, E.shape), scale), scale, operand(ctx, first + 2, E.dt, E.shape)};
}

// elu.out(self, alpha, scale, input_scale, out):
//   x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale
void elu_out(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  EluCoefs c = elu_coefs(ctx, E, 1);
  tpu_value_t neg = E.mul(E.un(TPU_OP_EXPM1, E.mul(x, c.input)), c.neg);
  ctx.results = {E.sel(E.cmp(TPU_CMP_LE, x, E.k(0)), neg, E.mul(x, c.pos))};
}

// elu_backward.grad_input(grad_output, alpha, scale, input_scale, is_result, self_or_result):
//   from the result y: y <= 0 ? dy * input_scale * (y + alpha * scale) : dy * scale
//   from the input x:  x <= 0 ? dy * input_scale * alpha * scale * exp(x * input_scale)
//                             : dy * scale
void elu_backward(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, E.dt, E.shape);
  EluCoefs c = elu_coefs(ctx, E, 1);
  const bool is_result = ctx.arg(4).toBool();
  tpu_value_t v = operand(ctx, 5, E.dt, E.shape);
  tpu_value_t neg = is_result ? E.mul(E.mul(dy, c.input), E.add(v, c.neg))
                              : E.mul(E.mul(E.mul(dy, c.input), c.neg), E.un(TPU_OP_EXP, E.mul(v, c.input)));
  ctx.results = {E.sel(E.cmp(TPU_CMP_LE, v, E.k(0)), neg, E.mul(dy, c.pos))};
}

// The two halves of |x| along |dim| (glu's a and b).
std::pair<tpu_value_t, tpu_value_t> halves(tpu_graph_t *g, tpu_value_t x, int64_t dim) {
  tpu_shape_t s = shape_of(g, x);
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], stride[TPU_MAX_RANK];
  for (int d = 0; d < s.rank; d++) limit[d] = s.dims[d], stride[d] = 1;
  const int64_t half = s.dims[dim] / 2;
  limit[dim] = half;
  tpu_value_t a = tpu_graph_slice(g, x, start, limit, stride);
  start[dim] = half;
  limit[dim] = 2 * half;
  return {a, tpu_graph_slice(g, x, start, limit, stride)};
}

// glu.out(self, dim, out): a * sigmoid(b), a and b the halves of self along dim (PyTorch's
// meta kernel has checked that the size is even).
void glu_out(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t x = convert(ctx.g, ctx.v(0), E.dt);
  auto [a, b] = halves(ctx.g, x, wrap_dim(ctx.arg(1).toInt(), ctx.tensor(0).dim()));
  ctx.results = {E.mul(a, E.un(TPU_OP_LOGISTIC, b))};
}

// glu_backward(grad_output, self, dim): (dy * s, dy * a * s * (1 - s)) joined along dim,
// s = sigmoid(b).
void glu_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  const int64_t dim = wrap_dim(ctx.arg(2).toInt(), ctx.tensor(1).dim());
  auto [a, b] = halves(ctx.g, convert(ctx.g, ctx.v(1), dt), dim);
  Ew E{ctx.g, dt, shape_of(ctx.g, a)};
  tpu_value_t dy = convert(ctx.g, ctx.v(0), dt);
  tpu_value_t s = E.un(TPU_OP_LOGISTIC, b);
  tpu_value_t parts[2] = {E.mul(s, dy), E.mul(E.mul(E.mul(E.sub(E.k(1), s), s), a), dy)};
  ctx.results = {tpu_graph_concatenate(ctx.g, parts, 2, static_cast<int>(dim))};
}

// hardtanh(self, min_val, max_val): clamp, keeping NaN and -0 as the CPU does.
void hardtanh(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {E.clamp(x, operand(ctx, 1, E.dt, E.shape), operand(ctx, 2, E.dt, E.shape))};
}

// hardtanh_backward(grad_output, self, min_val, max_val): x <= min || x >= max ? 0 : dy
void hardtanh_backward(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, E.dt, E.shape), x = operand(ctx, 1, E.dt, E.shape);
  tpu_value_t lo = operand(ctx, 2, E.dt, E.shape), hi = operand(ctx, 3, E.dt, E.shape);
  tpu_value_t outside = E.op(TPU_OP_OR, E.cmp(TPU_CMP_LE, x, lo), E.cmp(TPU_CMP_GE, x, hi));
  ctx.results = {E.sel(outside, E.k(0), dy)};
}

// min(max(x + 3, 0), 6), NaN kept
tpu_value_t relu6_of_x_plus_3(const Ew &E, tpu_value_t x) { return E.clamp(E.add(x, E.k(3)), E.k(0), E.k(6)); }

// hardswish(self): x * min(max(x + 3, 0), 6) / 6
void hardswish(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {E.div(E.mul(x, relu6_of_x_plus_3(E, x)), E.k(6))};
}

// hardswish_backward(grad_output, self): x <= -3 ? 0 : x < 3 ? dy * (x / 3 + 0.5) : dy
void hardswish_backward(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, E.dt, E.shape), x = operand(ctx, 1, E.dt, E.shape);
  tpu_value_t mid = E.mul(dy, E.add(E.div(x, E.k(3)), E.k(0.5)));
  ctx.results = {E.sel(E.cmp(TPU_CMP_LE, x, E.k(-3)), E.k(0),
                       E.sel(E.cmp(TPU_CMP_LT, x, E.k(3)), mid, dy))};
}

// hardsigmoid.out(self): min(max(x + 3, 0), 6) / 6
void hardsigmoid(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {E.div(relu6_of_x_plus_3(E, x), E.k(6))};
}

// hardsigmoid_backward(grad_output, self): -3 < x < 3 ? dy / 6 : 0
void hardsigmoid_backward(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, E.dt, E.shape), x = operand(ctx, 1, E.dt, E.shape);
  tpu_value_t inside = E.op(TPU_OP_AND, E.cmp(TPU_CMP_GT, x, E.k(-3)), E.cmp(TPU_CMP_LT, x, E.k(3)));
  ctx.results = {E.sel(inside, E.div(dy, E.k(6)), E.k(0))};
}

// mish.out(self): x * tanh(log1p(exp(x))) (its backward is a composite of native ops)
void mish(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  ctx.results = {E.mul(x, E.un(TPU_OP_TANH, E.un(TPU_OP_LOG1P, E.un(TPU_OP_EXP, x))))};
}

// -lambd <= x <= lambd (false for NaN)
tpu_value_t within(const Ew &E, tpu_value_t x, tpu_value_t lambd) {
  return E.op(TPU_OP_AND, E.cmp(TPU_CMP_GE, x, E.un(TPU_OP_NEG, lambd)), E.cmp(TPU_CMP_LE, x, lambd));
}

// softshrink(self, lambd): x > l ? x - l : x < -l ? x + l : x * 0 (NaN and -0 kept)
void softshrink(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t x = operand(ctx, 0, E.dt, E.shape), l = operand(ctx, 1, E.dt, E.shape);
  tpu_value_t low = E.sel(E.cmp(TPU_CMP_LT, x, E.un(TPU_OP_NEG, l)), E.add(x, l), E.mul(x, E.k(0)));
  ctx.results = {E.sel(E.cmp(TPU_CMP_GT, x, l), E.sub(x, l), low)};
}

// hardshrink(self, lambd): -l <= x <= l ? 0 : x
void hardshrink(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t x = operand(ctx, 0, E.dt, E.shape), l = operand(ctx, 1, E.dt, E.shape);
  ctx.results = {E.sel(within(E, x, l), E.k(0), x)};
}

// softshrink_backward and hardshrink_backward(grad, self, lambd): -l <= x <= l ? 0 : grad
void shrink_backward(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, E.dt, E.shape), x = operand(ctx, 1, E.dt, E.shape);
  ctx.results = {E.sel(within(E, x, operand(ctx, 2, E.dt, E.shape)), E.k(0), dy)};
}

// threshold.out(self, threshold, value): x <= threshold ? value : x. In the input's own
// dtype (integers compare exactly).
void threshold(LowerCtx &ctx) {
  Ew E;
  tpu_value_t x = unary_input(ctx, &E);
  tpu_value_t t = operand(ctx, 1, E.dt, E.shape), v = operand(ctx, 2, E.dt, E.shape);
  ctx.results = {E.sel(E.cmp(TPU_CMP_LE, x, t), v, x)};
}

// The optional eps of logit, or a negative value for none.
double logit_eps(const LowerCtx &ctx, size_t arg) {
  return ctx.arg(arg).isNone() ? -1.0 : ctx.arg(arg).toDouble();
}

// logit(self, eps): log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps is given
void logit(LowerCtx &ctx) {
  Ew E;
  tpu_value_t z = unary_input(ctx, &E);
  const double eps = logit_eps(ctx, 1);
  if (eps >= 0) z = E.clamp(z, E.k(eps), E.k(1 - eps));
  ctx.results = {E.un(TPU_OP_LOG, E.div(z, E.sub(E.k(1), z)))};
}

// logit_backward(grad_output, self, eps): dy / (x (1 - x)) inside the range; outside it
// NaN (no eps: [0, 1]) or 0 (eps: [eps, 1 - eps])
void logit_backward(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t dy = operand(ctx, 0, E.dt, E.shape), x = operand(ctx, 1, E.dt, E.shape);
  const double eps = logit_eps(ctx, 2);
  const double lo = eps >= 0 ? eps : 0, hi = eps >= 0 ? 1 - eps : 1;
  tpu_value_t outside = E.op(TPU_OP_OR, E.cmp(TPU_CMP_LT, x, E.k(lo)), E.cmp(TPU_CMP_GT, x, E.k(hi)));
  tpu_value_t inside = E.div(dy, E.mul(x, E.sub(E.k(1), x)));
  ctx.results = {E.sel(outside, E.k(eps >= 0 ? 0.0 : NAN), inside)};
}

LoweringRegistrar registrar({
    {"elu.out", elu_out},
    {"elu_backward.grad_input", elu_backward},
    {"glu.out", glu_out},
    {"glu_backward", glu_backward},
    {"glu_backward.grad_input", glu_backward},
    {"hardtanh", hardtanh},
    {"hardtanh.out", hardtanh},
    {"hardtanh_", hardtanh},
    {"hardtanh_backward", hardtanh_backward},
    {"hardtanh_backward.grad_input", hardtanh_backward},
    {"hardswish", hardswish},
    {"hardswish.out", hardswish},
    {"hardswish_", hardswish},
    {"hardswish_backward", hardswish_backward},
    {"hardswish_backward.out", hardswish_backward},
    {"hardsigmoid.out", hardsigmoid},
    {"hardsigmoid_backward.grad_input", hardsigmoid_backward},
    {"mish.out", mish},
    {"softshrink.out", softshrink},
    {"softshrink_backward.grad_input", shrink_backward},
    {"hardshrink.out", hardshrink},
    {"hardshrink_backward.grad_input", shrink_backward},
    {"threshold.out", threshold},
    {"logit", logit},
    {"logit.out", logit},
    {"logit_backward", logit_backward},
    {"logit_backward.grad_input", logit_backward},
});

}  // namespace
}  // namespace torchtpu
