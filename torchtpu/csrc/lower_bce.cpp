// lower_bce.cpp: F.binary_cross_entropy / nn.BCELoss (GAN discriminators, VAEs) natively,
// forward and backward, with the CPU kernel's formulas:
//   loss      = (y - 1) max(log1p(-x), -100) - y max(log(x), -100), times weight, reduced
//   grad      = g (x - y) / max((1 - x) x, 1e-12), times weight (/ numel for the mean)
// The CPU kernel raises when an input or target lies outside [0, 1] (NaN included). The
// forward here checks the same before it runs: a reduction on the chip and a synchronizing
// read of the flag (CUDA asserts on the device instead), so a bad input raises PyTorch's
// error at the call.
#include <ATen/core/Tensor.h>
#include <ATen/ops/stack.h>
#include <torch/library.h>

#include "eager.h"
#include "lower_ew.h"

namespace torchtpu {
namespace {

constexpr double kLogFloor = -100;   // the CPU kernel's clamp of log(x) and log1p(-x)
constexpr double kGradEps = 1e-12;   // its floor of x (1 - x) in the backward

// (self, target, weight?, reduction): argument |w| scales |v| when present.
tpu_value_t weighted(LowerCtx &ctx, const Ew &E, tpu_value_t v, size_t w) {
  return ctx.v(w) == TPU_NO_VALUE ? v : E.mul(v, operand(ctx, w, E.dt, E.shape));
}

// binary_cross_entropy(self, target, weight?, reduction)
void bce_forward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_shape_t in = to_shape(ctx.tensor(0).sizes());
  Ew E{ctx.g, dt, in};
  tpu_value_t x = operand(ctx, 0, dt, in), y = operand(ctx, 1, dt, in);
  tpu_value_t log_x = E.op(TPU_OP_MAX, E.un(TPU_OP_LOG, x), E.k(kLogFloor));
  tpu_value_t log_1mx = E.op(TPU_OP_MAX, E.un(TPU_OP_LOG1P, E.un(TPU_OP_NEG, x)), E.k(kLogFloor));
  tpu_value_t loss = E.sub(E.mul(E.sub(y, E.k(1)), log_1mx), E.mul(y, log_x));
  ctx.results = {reduce_loss(ctx.g, weighted(ctx, E, loss, 2), ctx.arg(3).toInt())};
}

// binary_cross_entropy_backward(grad_output, self, target, weight?, reduction)
void bce_backward(LowerCtx &ctx) {
  Ew E = ew_for_result(ctx);
  tpu_value_t g = operand(ctx, 0, E.dt, E.shape);
  tpu_value_t x = operand(ctx, 1, E.dt, E.shape), y = operand(ctx, 2, E.dt, E.shape);
  tpu_value_t denom = E.op(TPU_OP_MAX, E.mul(E.sub(E.k(1), x), x), E.k(kGradEps));
  tpu_value_t grad = weighted(ctx, E, E.div(E.mul(g, E.sub(x, y)), denom), 3);
  if (ctx.arg(4).toInt() == 1) grad = E.div(grad, E.k(static_cast<double>(numel(E.shape))));
  ctx.results = {grad};
}

// A 0-D bool on the chip: every element of |t| is in [0, 1] (true when empty).
at::Tensor in_unit_interval(const at::Tensor &t) { return t.ge(0).logical_and(t.le(1)).all(); }

void bce_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  if (native_disabled()) {
    run_cpu_fallback(op, stack);
    return;
  }
  auto args = torch::jit::last(*stack, op.schema().arguments().size());
  // both flags in one synchronizing read
  const at::Tensor flags = at::stack({in_unit_interval(args[0].toTensor()), in_unit_interval(args[1].toTensor())}).cpu();
  TORCH_CHECK(flags[0].item<bool>(), "all elements of input should be between 0 and 1");
  TORCH_CHECK(flags[1].item<bool>(), "all elements of target should be between 0 and 1");
  run_native(op, stack);
}

struct Registrar {
  Registrar() {
    register_lowering("binary_cross_entropy_backward", bce_backward);
    register_lowering("binary_cross_entropy_backward.grad_input", bce_backward);
    static torch::Library *lib = new torch::Library(torch::Library::IMPL, "aten",
                                                    c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    for (const char *name : {"binary_cross_entropy", "binary_cross_entropy.out"}) {
      register_lowering_only(name, bce_forward);
      lib->impl(name, torch::CppFunction::makeFromBoxedFunction<&bce_kernel>());
    }
  }
};
Registrar registrar;

}  // namespace
}  // namespace torchtpu
