// device_check.h: the device rules every tpu kernel applies to its arguments, as CUDA
// kernels do: all tensors on one tpu chip; CPU tensors only as 0-dim scalars (and as
// index tensors of indexing ops). Used by the native engine and the CPU fallback.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <optional>
#include <string>

#include "device.h"

namespace torchtpu {

// Ops whose index tensors may stay on the CPU, as on CUDA.
inline bool accepts_cpu_indices(const std::string &name) {
  return name.rfind("aten::index", 0) == 0 || name.rfind("aten::_index_put_impl_", 0) == 0 ||
         name.rfind("aten::_unsafe_index", 0) == 0;
}

// Checks the devices of one op's tensors the way CUDA kernels do and finds the tpu device.
class DeviceCheck {
 public:
  DeviceCheck(const std::string &op, bool cpu_indices) : op_(op), cpu_indices_(cpu_indices) {}

  void tensor(const at::Tensor &t) {
    if (!t.defined()) return;
    c10::Device d = t.device();
    if (d.type() == c10::DeviceType::PrivateUse1) {
      if (!device_) device_ = d;
      else if (*device_ != d) mismatch(*device_, d);
    } else if (d.type() == c10::DeviceType::CPU) {
      if (t.dim() > 0 && !cpu_indices_) cpu_ = true;
    } else {
      TORCH_CHECK(false, op_, ": tensors on ", d, " cannot be mixed with tpu tensors");
    }
  }
  void device_arg(const c10::Device &d) {
    if (d.type() == c10::DeviceType::PrivateUse1 && !device_) {
      c10::DeviceIndex i = d.has_index() ? d.index() : current_device();
      (void)device_at(i);
      device_ = c10::Device(d.type(), i);
    }
  }
  // The tpu device of the op, after every argument was seen.
  c10::Device finish() {
    if (!device_) device_ = c10::Device(c10::DeviceType::PrivateUse1, current_device());
    if (cpu_) mismatch(*device_, c10::Device(c10::DeviceType::CPU));
    return *device_;
  }

 private:
  [[noreturn]] void mismatch(const c10::Device &a, const c10::Device &b) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", a, " and ", b, "! (when checking arguments for ", op_, ")");
  }
  const std::string &op_;
  bool cpu_indices_;
  bool cpu_ = false;
  std::optional<c10::Device> device_;
};

}  // namespace torchtpu
