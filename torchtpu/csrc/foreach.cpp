// foreach.cpp: torch._foreach_* ops on tpu as one program each.
//
// PyTorch's generic foreach kernels (the ones the CPU runs) loop over the list and call the
// per-tensor op, which on tpu would be one launch per tensor: the default (foreach) AdamW
// step of the GPT example took 232 launches. Every _foreach_ op with such a kernel gets a
// tpu kernel that runs that same generic kernel under a RecordScope, so the per-tensor ops
// are recorded into one pending graph and launched as one cached program: one launch per
// foreach op, as CUDA's multi-tensor kernels give. In fused mode and compile captures the
// ops are simply recorded with the rest.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

#include "device.h"
#include "fused.h"

namespace torchtpu {
namespace {

// The chip of the first tpu tensor among the arguments, or -1.
c10::DeviceIndex chip_of(const torch::jit::Stack &stack, size_t num_args) {
  for (size_t i = stack.size() - num_args; i < stack.size(); i++) {
    const c10::IValue &a = stack[i];
    if (a.isTensorList()) {
      for (const at::Tensor &t : a.toTensorList()) {
        if (t.defined() && t.device().type() == kTpu) return t.device().index();
      }
    } else if (a.isTensor() && a.toTensor().defined() && a.toTensor().device().type() == kTpu) {
      return a.toTensor().device().index();
    }
  }
  return -1;
}

void foreach_kernel(const c10::OperatorHandle &op, c10::DispatchKeySet, torch::jit::Stack *stack) {
  // the CPU's entry for the op: the generic list loop (CompositeExplicitAutograd)
  const c10::DispatchKeySet generic(c10::DispatchKey::CPU);
  c10::DeviceIndex chip = chip_of(*stack, op.schema().arguments().size());
  if (chip < 0) {
    op.redispatchBoxed(generic, stack);
    return;
  }
  RecordScope scope(chip, "foreach op");
  op.redispatchBoxed(generic, stack);
  scope.finish();
}

// Registers foreach_kernel for every aten::_foreach_* op whose kernel for the CPU (and, until
// now, for tpu) is the generic CompositeExplicitAutograd one.
struct Registrar {
  Registrar() {
    static torch::Library *lib = new torch::Library(torch::Library::IMPL, "aten",
                                                    c10::DispatchKey::PrivateUse1, __FILE__,
                                                    __LINE__);
    auto &dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName &name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::_foreach_", 0) != 0) continue;
      auto op = dispatcher.findOp(name);
      if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
        continue;
      }
      std::string full = name.name.substr(6);  // drop "aten::"
      if (!name.overload_name.empty()) full += "." + name.overload_name;
      lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&foreach_kernel>());
    }
  }
};
Registrar registrar;

}  // namespace
}  // namespace torchtpu
