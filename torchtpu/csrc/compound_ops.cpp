// compound_ops.cpp: tpu kernels of ops that are other tpu ops put together, registered for
// PrivateUse1 so that they do not take the CPU fallback:
//   equal                  same size and (a == b).all(), read back: torch.equal gives a
//                          Python bool, so it synchronizes, as on CUDA; dtypes promote and NaN
//                          is unequal to itself, as on the CPU
//   _efficientzerotensor   the zeros that autograd formulas (sgn, ...) use for a zero
//                          gradient; a plain zero-filled tensor, which behaves the same to
//                          every reader (the storage-free ZeroTensor is an optimization)
#include <ATen/ATen.h>
#include <torch/library.h>

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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("equal", TORCH_FN(tpu_equal));
  m.impl("_efficientzerotensor", TORCH_FN(tpu_efficientzerotensor));
}

}  // namespace
}  // namespace torchtpu
