// fused_adam.cpp: torch.optim.Adam / AdamW with fused=True on tpu (_fused_adam_,
// _fused_adamw_, float or tensor lr), run natively instead of through the CPU fallback.
//
// The kernel is composed of native ops recorded under one RecordScope, so the whole step of
// every parameter is one pending graph: in strict mode one launch per optimizer step (a
// cached program after the first), in fused mode and in a compile capture part of the
// graph being recorded. torch.compile traces the step as this one op, which keeps Dynamo's
// work small.
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
