// multinomial.cpp: torch.multinomial on the device (sampling in generate(do_sample=True),
// torch.distributions.Categorical). Sampling without replacement and single draws run
// PyTorch's own device-generic kernel: it checks the probabilities (as CUDA does: a
// synchronizing read of their min, max and row sums), then races exponentials, taking
// argmax / top-k of p / q with q ~ Exp(1) from the chip's generator. Several draws with
// replacement (a CPU/CUDA-only kernel in PyTorch) race one exponential per draw and
// category, argmax(p / q) over the categories, after the same checks; past 2^24 draws x
// categories, where that noise tensor would be large, they run through the CPU fallback.
// Every step is a native op.
#include <ATen/core/Tensor.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/multinomial_native.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "eager.h"
#include "native.h"

namespace torchtpu {
namespace {

constexpr int64_t kMaxRaceElements = int64_t(1) << 24;

// Several draws with replacement: (C) or (R, C) probabilities -> (n) or (R, n) indices.
at::Tensor draws_with_replacement(const at::Tensor &p, int64_t n, const std::optional<at::Generator> &gen) {
  // PyTorch's own checks and messages, as its kernel runs them before the draws
  at::Tensor probs = p.dim() == 1 ? p.unsqueeze(0) : p;
  TORCH_CHECK(probs.max().lt(INFINITY).logical_and(probs.min().ge(0)).item<bool>(),
              "probability tensor contains either `inf`, `nan` or element < 0");
  TORCH_CHECK(!probs.sum(1).eq(0).any().item<bool>(),
              "invalid multinomial distribution (sum of probabilities <= 0)");
  at::Tensor q = at::empty({probs.size(0), n, probs.size(1)}, probs.options()).exponential_(1, gen);
  at::Tensor draws = at::argmax(probs.unsqueeze(1).div(q), -1);
  return p.dim() == 1 ? draws.squeeze(0) : draws;
}

// multinomial(self, num_samples, replacement, generator) and multinomial.out(..., out)
void multinomial_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const size_t n = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, n);
  const int64_t samples = args[1].toInt();
  const bool replacement = args[2].toBool();
  const at::Tensor self = args[0].toTensor();
  const bool race = !replacement || samples == 1;
  const bool race_each = !race && self.dim() >= 1 && self.dim() <= 2 && self.is_floating_point() &&
                         self.numel() > 0 && samples <= kMaxRaceElements / self.numel();
  if (native_disabled() || (!race && !race_each)) {
    run_cpu_fallback(op, stack);
    return;
  }
  const std::optional<at::Generator> gen = args[3].toOptional<at::Generator>();
  at::Tensor result;
  if (race) {
    if (n == 5) {
      result = args[4].toTensor();
      at::native::multinomial_out(self, samples, replacement, gen, result);
    } else {
      result = at::native::multinomial(self, samples, replacement, gen);
    }
  } else {
    result = draws_with_replacement(self, samples, gen);
    if (n == 5) {
      at::Tensor out = args[4].toTensor();
      at::native::resize_output(out, result.sizes());
      out.copy_(result);
      result = out;
    }
  }
  torch::jit::drop(*stack, n);
  torch::jit::push(*stack, result);
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("multinomial", torch::CppFunction::makeFromBoxedFunction<&torchtpu::multinomial_kernel>());
  m.impl("multinomial.out", torch::CppFunction::makeFromBoxedFunction<&torchtpu::multinomial_kernel>());
}
