// compat.cpp: behaviour that device-generic PyTorch code relies on, where PyTorch core
// decides by a list of built-in backends that PrivateUse1 is not on.
//
// _has_compatible_shallow_copy_type: `param.data = t` and nn.Module.to()/.cpu() move a
// parameter in place (the same Python object) only if its TensorImpl may be shallow-copied
// from the converted tensor. Core allows that between dense CPU, CUDA, MPS, HIP, XPU, HPU
// and MTIA tensors, not PrivateUse1 (c10/core/TensorImpl.h says a PrivateUse1 backend
// should override this operator, as PyTorch's OpenReg example does). Without it,
// `model.to("tpu")` replaces each parameter by a new one per module, which silently unties
// tied weights: GPT-2's lm_head and wte, BERT's MLM decoder and word embeddings, ... then
// train as two separate tensors. Dense tpu tensors are plain TensorImpls over host memory,
// like CPU tensors, so a shallow copy between the two is sound.

#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace torchtpu {
namespace {

bool is_dense_cpu_or_tpu(c10::DispatchKeySet ks) {
  constexpr auto backends = c10::DispatchKeySet(
      {c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
  return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && ks.has_any(backends);
}

bool has_compatible_shallow_copy_type(const at::Tensor &self, const at::Tensor &from) {
  // What core allows (same key set, dense/sparse pairs of its backends), plus cpu <-> tpu.
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  return is_dense_cpu_or_tpu(self.key_set()) && is_dense_cpu_or_tpu(from.key_set());
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type",
         TORCH_FN(torchtpu::has_compatible_shallow_copy_type));
}
