// eager.h: the settings eager execution reads on every op: the eager mode
// (TORCHTPU_EAGER, TPU_LAUNCH_BLOCKING), the matmul precision (torch.tpu.precision,
// torchtpu.set_matmul_precision), compile logging, and the random-number offsets.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include "tpu/compiler.h"
#include "tpu/ir.h"
}

namespace torchtpu {

enum class EagerMode { Strict, Debug, Fused };

// TORCHTPU_EAGER=strict (default) | debug | fused; TPU_LAUNCH_BLOCKING=1 means debug.
EagerMode eager_mode();
void set_eager_mode(EagerMode mode);

// TORCHTPU_NATIVE=0 disables native kernels (every op takes the CPU fallback).
bool native_disabled();

// The precision of f32 matmuls and convolutions. Process-wide, not per thread: the
// backward pass runs on autograd's device threads and must see the same setting.
tpu_precision_t current_precision();
void set_precision(tpu_precision_t p);

// TORCHTPU_LOG_RECOMPILES=1: a line per compile, and per cache miss of an op what changed
// against the closest signature compiled before for that op.
bool log_recompiles();
void log_compile(const std::string &op, const tpu_executable_t *exe, uint64_t ns);
// One (argument name, "f32[8,16] strides [16,1]" or a static value) per argument.
using ArgDescription = std::vector<std::pair<std::string, std::string>>;
void log_signature(const std::string &op, const ArgDescription &args);

// Reserves |count| random numbers of |gen| (if given, a tpu generator) or else chip
// |index|'s default generator: the (seed, offset) the kernel must use. Advances the offset.
void reserve_philox(c10::DeviceIndex index, const std::optional<at::Generator> &gen,
                    int64_t count, uint64_t *seed, uint64_t *offset);

at::ScalarType to_scalar_type(tpu_dtype_t t);

// Statistics of the eager executable cache.
void eager_cache_stats(uint64_t *hits, uint64_t *misses, uint64_t *entries,
                       uint64_t *compile_ns);

}  // namespace torchtpu
