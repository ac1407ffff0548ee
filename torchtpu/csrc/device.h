// device.h: what the bridge's translation units share about tpu devices (device.cpp
// defines it): runtime initialization, status-to-exception mapping, the current device,
// the allocator and the default generators.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <string>

extern "C" {
#include "tpu/runtime.h"
}

namespace torchtpu {

// Throws the PyTorch exception for a failed C call: torch.OutOfMemoryError for
// TPU_ERR_OUT_OF_MEMORY, RuntimeError otherwise; |what| names the operation.
void check_status(tpu_status_t st, const char *what);

// Initializes the runtime (throws with the configuration error, e.g. a bad TORCHTPU_CHIP).
void ensure_init();
// The device |index| (throws if it does not exist).
tpu_device_t *device_at(c10::DeviceIndex index);
// Waits for the chip's stream; throws a deferred device error naming the op.
void synchronize_device(c10::DeviceIndex index);
// Called before an op waits for a chip the user did not ask to wait for: warns or raises
// RuntimeError naming the op (what(), a std::string) as torch.tpu.set_sync_debug_mode
// asks, as CUDA's does. what() is called only then.
int sync_debug_mode();
void report_implicit_sync(int mode, const std::string &what);
template <typename What>
void check_implicit_sync(What &&what) {
  if (const int mode = sync_debug_mode()) report_implicit_sync(mode, what());
}

c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

c10::Allocator *allocator();
const at::Generator &default_generator(c10::DeviceIndex index);

}  // namespace torchtpu
