// lower_compat.cpp: lowerings for ops that real model code reaches and that used to run
// through the CPU fallback:
//   isin.Tensor_Tensor_out     Hugging Face generate() (stopping criteria: eos in ids)
//   softplus.out, softplus_backward.grad_input
//   log_sigmoid_forward(.output), log_sigmoid_backward(.grad_input)   (F.logsigmoid, DPO-style
//                                                                       losses, BCE with logits)
//   clamp_min.Tensor_out, clamp_max.Tensor_out   (x.clamp(min=tensor), cosine_similarity)
//   _prelu_kernel, _prelu_kernel_backward         (nn.PReLU; the weight arrives broadcastable)
//   prod, prod.out                                (x.prod(): under autocast it runs in f32)
// Math runs in f32 for bf16/f16 (the vector unit is 32-bit) and the engine rounds once.
#include <ATen/core/Tensor.h>
#include <ATen/ops/result_type.h>

#include "lower_ew.h"

namespace torchtpu {
namespace {

tpu_value_t bin(LowerCtx &ctx, tpu_op_t op, tpu_value_t a, tpu_value_t b) {
  return tpu_graph_binary(ctx.g, op, a, b);
}
tpu_value_t un(LowerCtx &ctx, tpu_op_t op, tpu_value_t a) { return tpu_graph_unary(ctx.g, op, a); }

// ---- isin -------------------------------------------------------------------------------

// isin.Tensor_Tensor_out(elements, test_elements, assume_unique, invert, out): each element
// compared with every test element (elements x tests booleans), then OR over the tests.
void isin_out(LowerCtx &ctx) {
  const at::Tensor &e = ctx.tensor(0), &t = ctx.tensor(1);
  if (e.numel() * std::max<int64_t>(t.numel(), 1) > (int64_t(1) << 24)) {
    throw Unsupported("isin: too many element x test pairs for the brute-force lowering");
  }
  const bool invert = ctx.arg(3).toBool();
  tpu_shape_t out = ctx.out_shape();
  if (t.numel() == 0) {
    ctx.results = {full(ctx.g, TPU_BOOL, out, invert ? 1 : 0)};
    return;
  }
  if (out.rank >= TPU_MAX_RANK) throw Unsupported("isin: elements of the maximum rank");
  tpu_dtype_t dt = to_tpu_dtype(at::result_type(e, t));
  tpu_shape_t pairs = out;  // (elements..., tests)
  pairs.dims[pairs.rank++] = t.numel();
  int64_t edims[TPU_MAX_RANK], tdim[1] = {out.rank};
  for (int i = 0; i < out.rank; i++) edims[i] = i;
  tpu_shape_t flat{};
  flat.rank = 1;
  flat.dims[0] = t.numel();
  tpu_value_t ev = convert(ctx.g, ctx.v(0), dt);
  tpu_value_t tv = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(1), dt), &flat);
  tpu_value_t eb = tpu_graph_broadcast_in_dim(ctx.g, ev, &pairs, edims);
  tpu_value_t tb = tpu_graph_broadcast_in_dim(ctx.g, tv, &pairs, tdim);
  tpu_value_t eq = tpu_graph_compare(ctx.g, TPU_CMP_EQ, eb, tb);
  tpu_value_t any = reduce_dims(ctx.g, TPU_REDUCE_OR, eq, {out.rank}, false);
  ctx.results = {invert ? un(ctx, TPU_OP_NOT, any) : any};
}

// ---- softplus ---------------------------------------------------------------------------

// softplus.out(self, beta, threshold, out): x if x*beta > threshold else log1p(exp(x*beta))/beta
void softplus_out(LowerCtx &ctx) {
  tpu_shape_t s = ctx.out_shape();
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = operand(ctx, 0, dt, s), beta = operand(ctx, 1, dt, s);
  tpu_value_t thr = operand(ctx, 2, dt, s);
  tpu_value_t xb = bin(ctx, TPU_OP_MUL, x, beta);
  tpu_value_t soft = bin(ctx, TPU_OP_DIV, un(ctx, TPU_OP_LOG1P, un(ctx, TPU_OP_EXP, xb)), beta);
  ctx.results = {tpu_graph_select(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_GT, xb, thr), x, soft)};
}

// softplus_backward.grad_input(grad_output, self, beta, threshold, grad_input):
// grad * (1 if x*beta > threshold else sigmoid(x*beta))
void softplus_backward(LowerCtx &ctx) {
  tpu_shape_t s = ctx.out_shape();
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = operand(ctx, 0, dt, s), x = operand(ctx, 1, dt, s);
  tpu_value_t beta = operand(ctx, 2, dt, s), thr = operand(ctx, 3, dt, s);
  tpu_value_t xb = bin(ctx, TPU_OP_MUL, x, beta);
  tpu_value_t scaled = bin(ctx, TPU_OP_MUL, g, un(ctx, TPU_OP_LOGISTIC, xb));
  ctx.results = {tpu_graph_select(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_GT, xb, thr), g, scaled)};
}

// ---- log_sigmoid ------------------------------------------------------------------------

// log_sigmoid_forward(self) -> (output, buffer): output = min(x, 0) - log1p(exp(-|x|)); the
// buffer holds exp(-|x|) as on the CPU (our backward does not need it, but a backward that
// took the CPU fallback would read it).
void log_sigmoid_forward(LowerCtx &ctx) {
  tpu_shape_t s = ctx.out_shape();
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = operand(ctx, 0, dt, s);
  tpu_value_t e = un(ctx, TPU_OP_EXP, un(ctx, TPU_OP_NEG, un(ctx, TPU_OP_ABS, x)));
  tpu_value_t m = bin(ctx, TPU_OP_MIN, x, full(ctx.g, dt, s, 0));
  ctx.results = {bin(ctx, TPU_OP_SUB, m, un(ctx, TPU_OP_LOG1P, e)), e};
}

// log_sigmoid_backward(grad_output, self, buffer) = grad * sigmoid(-x)
void log_sigmoid_backward(LowerCtx &ctx) {
  tpu_shape_t s = ctx.out_shape();
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = operand(ctx, 0, dt, s), x = operand(ctx, 1, dt, s);
  ctx.results = {bin(ctx, TPU_OP_MUL, g, un(ctx, TPU_OP_LOGISTIC, un(ctx, TPU_OP_NEG, x)))};
}

// ---- clamp with tensor bounds -----------------------------------------------------------

// (self, bound, out): a NaN in either operand gives NaN, as in PyTorch (the select keeps it
// explicit whatever the max/min kernel does with a NaN in its second operand).
void clamp_tensor(LowerCtx &ctx, tpu_op_t op) {
  tpu_shape_t s = ctx.out_shape();
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = operand(ctx, 0, dt, s), b = operand(ctx, 1, dt, s);
  tpu_value_t r = bin(ctx, op, x, b);
  r = tpu_graph_select(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_NE, b, b), b, r);
  r = tpu_graph_select(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_NE, x, x), x, r);
  ctx.results = {r};
}
void clamp_min_tensor(LowerCtx &ctx) { clamp_tensor(ctx, TPU_OP_MAX); }
void clamp_max_tensor(LowerCtx &ctx) { clamp_tensor(ctx, TPU_OP_MIN); }

// ---- prelu ------------------------------------------------------------------------------

// _prelu_kernel(self, weight): x > 0 ? x : w * x (weight already broadcastable to self)
void prelu(LowerCtx &ctx) {
  tpu_shape_t s = ctx.out_shape();
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = operand(ctx, 0, dt, s), w = operand(ctx, 1, dt, s);
  tpu_value_t pos = tpu_graph_compare(ctx.g, TPU_CMP_GT, x, full(ctx.g, dt, s, 0));
  ctx.results = {tpu_graph_select(ctx.g, pos, x, bin(ctx, TPU_OP_MUL, w, x))};
}

// _prelu_kernel_backward(grad, self, weight) -> (grad_input, grad_weight), both of self's
// shape (the composite sums grad_weight down to the weight's shape).
void prelu_backward(LowerCtx &ctx) {
  tpu_shape_t s = ctx.out_shape(0);
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype(0));
  tpu_value_t g = operand(ctx, 0, dt, s), x = operand(ctx, 1, dt, s), w = operand(ctx, 2, dt, s);
  tpu_value_t zero = full(ctx.g, dt, s, 0);
  tpu_value_t pos = tpu_graph_compare(ctx.g, TPU_CMP_GT, x, zero);
  ctx.results = {tpu_graph_select(ctx.g, pos, g, bin(ctx, TPU_OP_MUL, w, g)),
                 tpu_graph_select(ctx.g, pos, zero, bin(ctx, TPU_OP_MUL, x, g))};
}

// ---- prod over all elements ----------------------------------------------------------

// prod(self, dtype) and prod.out(self, dtype, out): the product in the result's dtype (f32
// for bf16/f16); the dim form (prod.int_out) is in lower_reduce.cpp.
void prod_all(LowerCtx &ctx) {
  tpu_value_t x = convert(ctx.g, ctx.v(0), compute_dtype(ctx.out_dtype()));
  ctx.results = {reduce_dims(ctx.g, TPU_REDUCE_PROD, x, {}, false)};
}

LoweringRegistrar registrar({
    {"prod", prod_all},
    {"prod.out", prod_all},
    {"isin.Tensor_Tensor_out", isin_out},
    {"softplus.out", softplus_out},
    {"softplus_backward.grad_input", softplus_backward},
    {"log_sigmoid_forward", log_sigmoid_forward},
    {"log_sigmoid_forward.output", log_sigmoid_forward},
    {"log_sigmoid_backward", log_sigmoid_backward},
    {"log_sigmoid_backward.grad_input", log_sigmoid_backward},
    {"clamp_min.Tensor_out", clamp_min_tensor},
    {"clamp_max.Tensor_out", clamp_max_tensor},
    {"_prelu_kernel", prelu},
    {"_prelu_kernel_backward", prelu_backward},
});

}  // namespace
}  // namespace torchtpu
