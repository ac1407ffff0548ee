// device.h: what the bridge's translation units share about tpu devices (device.cpp
// defines it): runtime initialization, status-to-exception mapping, the current device,
// the allocator and the default generators.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

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

c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

c10::Allocator *allocator();
const at::Generator &default_generator(c10::DeviceIndex index);

}  // namespace torchtpu
