// compound_ops.cpp: tpu kernels of ops that are other tpu ops put together, registered for
// PrivateUse1 so that they do not take the CPU fallback:
//   equal                  same size and (a == b).all(), read back: torch.equal gives a
//                          Python bool, so it synchronizes, as on CUDA; dtypes promote and NaN
//                          is unequal to itself, as on the CPU
//   _efficientzerotensor   the zeros that autograd formulas (sgn, ...) use for a zero
//                          gradient; a plain zero-filled tensor, which behaves the same to
//                          every reader (the storage-free ZeroTensor is an optimization)
//   cholesky               the deprecated torch.cholesky as the CPU computes it:
//                          linalg_cholesky_ex, then its info checked under the name
//                          "cholesky" (one synchronizing read, as torch.linalg.cholesky);
//                          f32/f64 only, other dtypes take the fallback (the CPU's error)
//   kaiser_window          i0(beta sqrt(|1 - ((n - a) / a)^2|)) / i0(beta), a = (N - 1) / 2,
//                          in the CPU kernel's arithmetic (its dtype, float for half types);
//                          PyTorch's own implementation calls a CPU/CUDA-only DispatchStub
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "eager.h"
#include "native.h"

namespace torchtpu {
namespace {

bool tpu_equal(const at::Tensor &self, const at::Tensor &other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (!self.is_same_size(other)) return false;
  return at::eq(self, other).all().item<bool>();
}

at::Tensor tpu_efficientzerotensor(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                   std::optional<at::Layout> layout, std::optional<at::Device> device,
                                   std::optional<bool> pin_memory) {
  return at::zeros_symint(size, at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory));
}

// cholesky(self, upper) and cholesky.out(self, upper, *, out)
void cholesky_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const size_t num_args = op.schema().arguments().size();
  const at::Tensor self = torch::jit::peek(*stack, 0, num_args).toTensor();
  const at::ScalarType t = self.scalar_type();
  if (native_disabled() || (t != at::kFloat && t != at::kDouble)) {
    run_cpu_fallback(op, stack);
    return;
  }
  TORCH_WARN_ONCE(
      "torch.cholesky is deprecated in favor of torch.linalg.cholesky and will be removed in a "
      "future PyTorch release.\nL = torch.cholesky(A)\nshould be replaced with\n"
      "L = torch.linalg.cholesky(A)\nand\nU = torch.cholesky(A, upper=True)\nshould be "
      "replaced with\nU = torch.linalg.cholesky(A).mH\nThis transform will produce "
      "equivalent results for all valid (symmetric positive definite) inputs.");
  TORCH_CHECK(self.dim() >= 2, "cholesky: The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK(self.size(-1) == self.size(-2),
              "cholesky: A must be batches of square matrices, but they are ", self.size(-2),
              " by ", self.size(-1), " matrices");
  const bool upper = torch::jit::peek(*stack, 1, num_args).toBool();
  auto [factor, info] = at::linalg_cholesky_ex(self, upper, /*check_errors=*/false);
  at::_linalg_check_errors(info, "cholesky", self.dim() == 2);
  if (num_args == 3) {  // cholesky.out
    at::Tensor out = torch::jit::peek(*stack, 2, num_args).toTensor();
    at::native::resize_output(out, factor.sizes());
    out.copy_(factor);
    factor = out;
  }
  torch::jit::drop(*stack, num_args);
  torch::jit::push(*stack, std::move(factor));
}

at::Tensor tpu_kaiser_window(int64_t window_length, bool periodic, double beta,
                             std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                             std::optional<at::Device> device, std::optional<bool> pin_memory) {
  auto options = at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory);
  const at::ScalarType t = c10::typeMetaToScalarType(options.dtype());
  TORCH_CHECK(options.layout() != at::kSparse, "kaiser_window is not implemented for sparse types, got: ", options);
  TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t),
              "kaiser_window expects floating point dtypes, got: ", options);
  TORCH_CHECK(window_length >= 0, "kaiser_window requires non-negative window_length, got window_length=",
              window_length);
  if (window_length == 0) return at::empty({0}, options);
  if (window_length == 1) return at::ones({1}, options);
  const int64_t n = periodic ? window_length + 1 : window_length;
  const at::ScalarType math = t == at::kDouble ? at::kDouble : at::kFloat;  // the kernel's opmath
  const auto math_options = options.dtype(math);
  const double alpha = static_cast<double>(n - 1) / 2.0;
  at::Tensor x = at::arange(n, math_options).sub_(alpha).div_(alpha);
  at::Tensor arg = at::sqrt(at::abs(at::rsub(x.pow(2), 1))).mul_(beta);
  at::Tensor w = at::i0(arg).div_(at::i0(at::scalar_tensor(beta, math_options))).to(t);
  return periodic ? w.narrow(0, 0, window_length) : w;
}

// kaiser_window(N) and kaiser_window.periodic(N, periodic): PyTorch's defaults (periodic,
// beta 12); their CompositeExplicit kernels call kaiser_window.beta's directly, not through
// the dispatcher
at::Tensor tpu_kaiser_window_periodic(int64_t window_length, bool periodic,
                                      std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                                      std::optional<at::Device> device, std::optional<bool> pin_memory) {
  return tpu_kaiser_window(window_length, periodic, 12.0, dtype, layout, device, pin_memory);
}
at::Tensor tpu_kaiser_window_default(int64_t window_length, std::optional<at::ScalarType> dtype,
                                     std::optional<at::Layout> layout, std::optional<at::Device> device,
                                     std::optional<bool> pin_memory) {
  return tpu_kaiser_window(window_length, true, 12.0, dtype, layout, device, pin_memory);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("equal", TORCH_FN(tpu_equal));
  m.impl("kaiser_window", TORCH_FN(tpu_kaiser_window_default));
  m.impl("kaiser_window.periodic", TORCH_FN(tpu_kaiser_window_periodic));
  m.impl("kaiser_window.beta", TORCH_FN(tpu_kaiser_window));
  m.impl("_efficientzerotensor", TORCH_FN(tpu_efficientzerotensor));
  m.impl("cholesky", torch::CppFunction::makeFromBoxedFunction<&cholesky_kernel>());
  m.impl("cholesky.out", torch::CppFunction::makeFromBoxedFunction<&cholesky_kernel>());
}

}  // namespace
}  // namespace torchtpu
