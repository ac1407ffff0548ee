// fused_adam.cpp: torch.optim.Adam / AdamW with fused=True on tpu (_fused_adam_,
// _fused_adamw_, float or tensor lr), run natively instead of through the CPU fallback.
//
// The step of every parameter is recorded under one RecordScope as one pending graph: in
// strict mode one launch per optimizer step (a cached program after the first), in fused
// mode part of the graph being recorded. The common case (f32 tensors, a float lr, no
// GradScaler) records one graph built once per signature; the others compose native ops.
// PyTorch keeps Dynamo out of fused optimizers, so under torch.compile this kernel runs
// eagerly.
//
// Per parameter, in f32 (the math of PyTorch's CPU and CUDA fused kernels):
//   g = grad / grad_scale (if given; written back to grad), -g if maximize
//   Adam: g += weight_decay * param          AdamW: param -= lr * weight_decay * param
//   exp_avg = beta1 * exp_avg + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
//   v = max(max_exp_avg_sq, exp_avg_sq) if amsgrad (stored), else exp_avg_sq
//   param -= lr / (1 - beta1^step) * exp_avg / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// If found_inf (from GradScaler) is non-zero, nothing changes: every update is a select
// between the old and the new value, so the host never waits for the flag. The step
// counters are read, not incremented (the optimizer increments them before the call).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>

#include "device.h"
#include "fused.h"

namespace torchtpu {
namespace {

struct AdamConfig {
  bool adamw;
  double beta1, beta2, weight_decay, eps;
  bool amsgrad, maximize;
};

void check_lists(const char *op, at::TensorList params, at::TensorList grads,
                 at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                 at::TensorList max_exp_avg_sqs, at::TensorList steps, bool amsgrad) {
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n &&
                  steps.size() == n,
              op, ": params, grads, exp_avgs, exp_avg_sqs and state_steps must have the same "
              "length, got ", n, ", ", grads.size(), ", ", exp_avgs.size(), ", ",
              exp_avg_sqs.size(), ", ", steps.size());
  TORCH_CHECK(max_exp_avg_sqs.size() == (amsgrad ? n : 0), op, ": max_exp_avg_sqs must hold ",
              amsgrad ? "one tensor per parameter" : "no tensors", " with amsgrad=", amsgrad,
              ", got ", max_exp_avg_sqs.size(), " for ", n, " parameters");
  for (size_t i = 0; i < n; i++) {
    const at::Tensor &p = params[i];
    TORCH_CHECK(p.device().type() == kTpu, op, ": parameter ", i, " is on ", p.device());
    TORCH_CHECK(at::isFloatingType(p.scalar_type()), op, ": parameter ", i, " has dtype ",
                p.scalar_type(), " (a floating type is required)");
    auto same = [&](const at::Tensor &t, const char *what) {
      TORCH_CHECK(t.device() == p.device(), op, ": ", what, " ", i, " is on ", t.device(),
                  ", its parameter on ", p.device());
      TORCH_CHECK(t.sizes() == p.sizes(), op, ": ", what, " ", i, " has shape ", t.sizes(),
                  ", its parameter ", p.sizes());
    };
    same(grads[i], "grad");
    same(exp_avgs[i], "exp_avg");
    same(exp_avg_sqs[i], "exp_avg_sq");
    if (amsgrad) same(max_exp_avg_sqs[i], "max_exp_avg_sq");
    TORCH_CHECK(steps[i].numel() == 1 && steps[i].device() == p.device(), op, ": state_step ",
                i, " must be a one-element tensor on ", p.device(), " (got ", steps[i].numel(),
                " elements on ", steps[i].device(), ")");
  }
}

// ---- the common case as one graph ----------------------------------------------------------
// f32 tensors, a float lr, no GradScaler: the step of every parameter is built once per
// signature as one graph (parameters: per tensor p, grad, exp_avg, exp_avg_sq[, max], step;
// then the hyperparameters as f32 scalars) and recorded as one op, which costs the host one
// record instead of about 25 dispatched ops per parameter.

enum Hyper { kLr, kBeta1, kOneMinusBeta1, kBeta2, kOneMinusBeta2, kWeightDecay, kEps, kNumHyper };

// The same math, in the same order, as adam_step below.
tpu_graph_t *build_adam_graph(const AdamConfig &c, at::TensorList params) {
  tpu_graph_t *g = nullptr;
  check_status(tpu_graph_create(tpu_allocator_system(), &g), "fused adam graph");
  std::unique_ptr<tpu_graph_t, GraphDeleter> owner(g);
  const int per = c.amsgrad ? 6 : 5;
  std::vector<tpu_value_t> in;
  for (const at::Tensor &p : params) {
    tpu_shape_t shape = to_shape(p.sizes()), scalar = to_shape({});
    for (int k = 0; k < per; k++) {
      in.push_back(tpu_graph_parameter(g, TPU_F32, k == per - 1 ? &scalar : &shape, nullptr));
    }
  }
  tpu_value_t hyper[kNumHyper];
  const tpu_shape_t scalar = to_shape({});
  for (auto &h : hyper) h = tpu_graph_parameter(g, TPU_F32, &scalar, nullptr);
  auto op = [&](tpu_op_t o, tpu_value_t a, tpu_value_t b) { return tpu_graph_binary(g, o, a, b); };
  std::vector<tpu_value_t> outs;
  for (size_t i = 0; i < params.size(); i++) {
    const tpu_value_t *t = &in[i * per];
    const tpu_shape_t shape = to_shape(params[i].sizes());
    auto bc = [&](tpu_value_t s) { return broadcast_to(g, s, shape); };
    tpu_value_t p = t[0], grad = t[1], m = t[2], v = t[3], step = t[per - 1];
    if (c.maximize) grad = tpu_graph_unary(g, TPU_OP_NEG, grad);
    if (c.weight_decay != 0) {
      tpu_value_t decay = op(TPU_OP_MUL, p, bc(hyper[kWeightDecay]));
      if (c.adamw) p = op(TPU_OP_SUB, p, op(TPU_OP_MUL, decay, bc(hyper[kLr])));
      else grad = op(TPU_OP_ADD, grad, decay);
    }
    m = op(TPU_OP_ADD, op(TPU_OP_MUL, m, bc(hyper[kBeta1])),
           op(TPU_OP_MUL, bc(hyper[kOneMinusBeta1]), grad));
    v = op(TPU_OP_ADD, op(TPU_OP_MUL, v, bc(hyper[kBeta2])),
           op(TPU_OP_MUL, op(TPU_OP_MUL, bc(hyper[kOneMinusBeta2]), grad), grad));
    outs.push_back(m);
    outs.push_back(v);
    if (c.amsgrad) {
      v = op(TPU_OP_MAX, t[4], v);
      outs.push_back(v);
    }
    tpu_value_t one = full(g, TPU_F32, scalar, 1);
    tpu_value_t bias1 = op(TPU_OP_SUB, one, op(TPU_OP_POW, hyper[kBeta1], step));
    tpu_value_t bias2_sqrt =
        tpu_graph_unary(g, TPU_OP_SQRT, op(TPU_OP_SUB, one, op(TPU_OP_POW, hyper[kBeta2], step)));
    tpu_value_t denom = op(TPU_OP_ADD, op(TPU_OP_DIV, tpu_graph_unary(g, TPU_OP_SQRT, v),
                                          bc(bias2_sqrt)),
                           bc(hyper[kEps]));
    tpu_value_t step_size = op(TPU_OP_MUL, op(TPU_OP_DIV, one, bias1), hyper[kLr]);
    outs.push_back(op(TPU_OP_SUB, p, op(TPU_OP_DIV, op(TPU_OP_MUL, bc(step_size), m), denom)));
  }
  for (tpu_value_t o : outs) check_status(tpu_graph_output(g, o, nullptr), "fused adam graph");
  if (tpu_graph_status(g) != TPU_OK) {
    TORCH_CHECK(false, "fused adam: building the graph failed: ", tpu_graph_error_message(g));
  }
  return owner.release();
}

// The signature of build_adam_graph's result: configuration and parameter shapes.
std::vector<unsigned char> adam_key(const AdamConfig &c, at::TensorList params) {
  std::vector<unsigned char> key = {'A', c.adamw, c.amsgrad, c.maximize, c.weight_decay != 0};
  for (const at::Tensor &p : params) {
    key.push_back(static_cast<unsigned char>(p.dim()));
    for (int64_t d : p.sizes()) {
      const auto *b = reinterpret_cast<const unsigned char *>(&d);
      key.insert(key.end(), b, b + sizeof d);
    }
  }
  return key;
}

const OpGraph &adam_graph(const AdamConfig &c, at::TensorList params,
                          const std::vector<unsigned char> &key) {
  struct Slot {
    std::unique_ptr<tpu_graph_t, GraphDeleter> owner;
    OpGraph op;
  };
  static std::mutex mu;
  static std::map<std::vector<unsigned char>, Slot> graphs;  // nodes never move
  std::lock_guard<std::mutex> lock(mu);
  Slot &slot = graphs[key];
  if (!slot.owner) {
    slot.owner.reset(build_adam_graph(c, params));
    slot.op = OpGraph(slot.owner.get());
  }
  return slot.op;
}

bool one_graph_case(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                    at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                    at::TensorList steps) {
  for (at::TensorList l : {params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps}) {
    for (const at::Tensor &t : l) {
      if (t.scalar_type() != at::kFloat) return false;
    }
  }
  for (const at::Tensor &t : steps) {
    if (t.dim() != 0) return false;
  }
  return true;
}

void record_adam_graph(const char *op, const AdamConfig &c, at::TensorList params,
                       at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                       at::TensorList max_exp_avg_sqs, at::TensorList steps, double lr) {
  std::vector<unsigned char> key = adam_key(c, params);
  const OpGraph &graph = adam_graph(c, params, key);
  Inputs inputs;
  std::vector<at::Tensor> tensors, outputs;
  for (size_t i = 0; i < params.size(); i++) {
    std::vector<at::Tensor> ins = {params[i], grads[i], exp_avgs[i], exp_avg_sqs[i]};
    if (c.amsgrad) ins.push_back(max_exp_avg_sqs[i]);
    ins.push_back(steps[i]);
    for (const at::Tensor &t : ins) {
      inputs.ptrs.push_back(const_cast<void *>(t.const_data_ptr()));
      tensors.push_back(t);
    }
    outputs.push_back(exp_avgs[i]);
    outputs.push_back(exp_avg_sqs[i]);
    if (c.amsgrad) outputs.push_back(max_exp_avg_sqs[i]);
    outputs.push_back(params[i]);
  }
  const double hyper[kNumHyper] = {lr, c.beta1, 1 - c.beta1, c.beta2, 1 - c.beta2,
                                   c.weight_decay, c.eps};
  for (double h : hyper) {
    float f = static_cast<float>(h);
    inputs.scalar_slot(&f, sizeof f);
    tensors.emplace_back();
  }
  const c10::Device device = params[0].device();
  RecordScope scope(device.index(), "fused optimizer step");
  record_op(device, op, key, graph, inputs, tensors, outputs, RngUse{});
  scope.finish();
}

// dst = value (in dst's dtype), unless |keep| (found_inf) is set.
void store(const at::Tensor &dst, const at::Tensor &value, const std::optional<at::Tensor> &keep) {
  at::Tensor v = value.to(dst.scalar_type());
  const_cast<at::Tensor &>(dst).copy_(keep ? at::where(*keep, dst, v) : v);
}

void adam_step(const char *op, const AdamConfig &c, at::TensorList params, at::TensorList grads,
               at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
               at::TensorList max_exp_avg_sqs, at::TensorList steps,
               const std::optional<at::Tensor> &lr_tensor, double lr,
               const std::optional<at::Tensor> &grad_scale,
               const std::optional<at::Tensor> &found_inf) {
  check_lists(op, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, c.amsgrad);
  if (params.empty()) return;
  if (!lr_tensor && !grad_scale && !found_inf &&
      one_graph_case(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps)) {
    record_adam_graph(op, c, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr);
    return;
  }
  const c10::Device device = params[0].device();
  RecordScope scope(device.index(), "fused optimizer step");
  std::optional<at::Tensor> skip;  // () bool: GradScaler found an inf or NaN
  if (found_inf) skip = found_inf->to(device).reshape({}).ne(0);
  at::Tensor inv_scale;
  if (grad_scale) inv_scale = grad_scale->to(device, at::kFloat).reshape({}).reciprocal();
  // x * lr: a scalar of the graph, or the () f32 lr tensor on the chip
  at::Tensor lr32;
  if (lr_tensor) lr32 = lr_tensor->to(device, at::kFloat).reshape({});
  auto times_lr = [&](const at::Tensor &x) { return lr_tensor ? x * lr32 : x * lr; };
  for (size_t i = 0; i < params.size(); i++) {
    at::Tensor p = params[i].to(at::kFloat), g = grads[i].to(at::kFloat);
    if (grad_scale) {
      g = g * inv_scale;
      store(grads[i], g, skip);
    }
    if (c.maximize) g = -g;
    if (c.weight_decay != 0) {
      if (c.adamw) p = p - times_lr(p * c.weight_decay);
      else g = g + c.weight_decay * p;
    }
    at::Tensor m = exp_avgs[i].to(at::kFloat) * c.beta1 + (1 - c.beta1) * g;
    at::Tensor v = exp_avg_sqs[i].to(at::kFloat) * c.beta2 + (1 - c.beta2) * g * g;
    store(exp_avgs[i], m, skip);
    store(exp_avg_sqs[i], v, skip);
    if (c.amsgrad) {
      v = at::maximum(max_exp_avg_sqs[i].to(at::kFloat), v);
      store(max_exp_avg_sqs[i], v, skip);
    }
    at::Tensor step = steps[i].to(at::kFloat).reshape({});
    at::Tensor bias1 = 1 - at::pow(c.beta1, step);
    at::Tensor bias2_sqrt = (1 - at::pow(c.beta2, step)).sqrt();
    at::Tensor denom = v.sqrt() / bias2_sqrt + c.eps;
    store(params[i], p - times_lr(bias1.reciprocal()) * m / denom, skip);
  }
  scope.finish();
}

template <bool AdamW>
void fused_adam_float_lr(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                         at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                         at::TensorList steps, double lr, double beta1, double beta2,
                         double weight_decay, double eps, bool amsgrad, bool maximize,
                         const std::optional<at::Tensor> &grad_scale,
                         const std::optional<at::Tensor> &found_inf) {
  adam_step(AdamW ? "_fused_adamw_" : "_fused_adam_",
            {AdamW, beta1, beta2, weight_decay, eps, amsgrad, maximize}, params, grads, exp_avgs,
            exp_avg_sqs, max_exp_avg_sqs, steps, std::nullopt, lr, grad_scale, found_inf);
}

template <bool AdamW>
void fused_adam_tensor_lr(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                          at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                          at::TensorList steps, const at::Tensor &lr, double beta1, double beta2,
                          double weight_decay, double eps, bool amsgrad, bool maximize,
                          const std::optional<at::Tensor> &grad_scale,
                          const std::optional<at::Tensor> &found_inf) {
  TORCH_CHECK(lr.numel() == 1, AdamW ? "_fused_adamw_" : "_fused_adam_",
              ": lr must be a one-element tensor, got ", lr.numel(), " elements");
  adam_step(AdamW ? "_fused_adamw_" : "_fused_adam_",
            {AdamW, beta1, beta2, weight_decay, eps, amsgrad, maximize}, params, grads, exp_avgs,
            exp_avg_sqs, max_exp_avg_sqs, steps, lr, 0.0, grad_scale, found_inf);
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adam_", TORCH_FN(torchtpu::fused_adam_float_lr<false>));
  m.impl("_fused_adam_.tensor_lr", TORCH_FN(torchtpu::fused_adam_tensor_lr<false>));
  m.impl("_fused_adamw_", TORCH_FN(torchtpu::fused_adam_float_lr<true>));
  m.impl("_fused_adamw_.tensor_lr", TORCH_FN(torchtpu::fused_adam_tensor_lr<true>));
}
