// eager.cpp: eager-mode settings (see eager.h).
#include "eager.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace torchtpu {

static EagerMode mode_from_env() {
  const char *blocking = std::getenv("TPU_LAUNCH_BLOCKING");
  if (blocking && std::strcmp(blocking, "1") == 0) return EagerMode::Debug;
  const char *m = std::getenv("TORCHTPU_EAGER");
  if (!m || !*m || std::strcmp(m, "strict") == 0) return EagerMode::Strict;
  if (std::strcmp(m, "debug") == 0) return EagerMode::Debug;
  if (std::strcmp(m, "fused") == 0) return EagerMode::Fused;
  TORCH_CHECK(false, "TORCHTPU_EAGER=\"", m, "\": expected strict, debug or fused");
}

static std::atomic<int> g_mode{-1};

EagerMode eager_mode() {
  int m = g_mode.load(std::memory_order_relaxed);
  if (m < 0) {
    m = static_cast<int>(mode_from_env());
    g_mode.store(m);
  }
  return static_cast<EagerMode>(m);
}

void set_eager_mode(EagerMode mode) { g_mode.store(static_cast<int>(mode)); }

bool native_disabled() {
  const char *v = std::getenv("TORCHTPU_NATIVE");
  return v && std::strcmp(v, "0") == 0;
}

static std::atomic<int> g_precision{TPU_PRECISION_DEFAULT};

tpu_precision_t current_precision() { return static_cast<tpu_precision_t>(g_precision.load()); }

void set_precision(tpu_precision_t p) { g_precision.store(p); }

bool log_recompiles() {
  static const bool enabled = [] {
    const char *v = std::getenv("TORCHTPU_LOG_RECOMPILES");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

void log_compile(const std::string &op, const tpu_executable_t *exe, uint64_t ns) {
  if (!log_recompiles()) return;
  std::fprintf(stderr, "[torchtpu] compiled %s: %d steps, %zu scratch bytes, %.3f ms\n",
               op.c_str(), tpu_executable_num_steps(exe), tpu_executable_scratch_bytes(exe),
               static_cast<double>(ns) / 1e6);
}

void log_signature(const std::string &op, const ArgDescription &args) {
  if (!log_recompiles()) return;
  static std::mutex mu;
  static std::unordered_map<std::string, std::vector<ArgDescription>> seen;
  std::lock_guard<std::mutex> lock(mu);
  auto &prior = seen[op];
  std::string why;
  if (prior.empty()) {
    why = "first signature";
  } else {
    // the closest signature compiled before: fewest arguments that differ
    const ArgDescription *best = nullptr;
    size_t best_diff = SIZE_MAX;
    for (const ArgDescription &p : prior) {
      size_t diff = 0;
      for (size_t i = 0; i < std::max(p.size(), args.size()); i++) {
        diff += i >= p.size() || i >= args.size() || p[i] != args[i];
      }
      if (diff < best_diff) best_diff = diff, best = &p;
    }
    for (size_t i = 0; i < args.size() && best; i++) {
      if (i < best->size() && (*best)[i] == args[i]) continue;
      std::string old = i < best->size() ? (*best)[i].second : "(none)";
      if (!why.empty()) why += "; ";
      why += args[i].first + ": " + old + " -> " + args[i].second;
    }
    if (why.empty()) why = "same arguments (another thread compiled it too)";
  }
  std::fprintf(stderr, "[torchtpu] cache miss %s: %s\n", op.c_str(), why.c_str());
  prior.push_back(args);
}

}  // namespace torchtpu

extern "C" {
#include "bridge.h"
}

void tpu_bridge_set_precision(int p) {
  torchtpu::set_precision(static_cast<tpu_precision_t>(p));
}
int tpu_bridge_get_precision(void) { return torchtpu::current_precision(); }
int tpu_bridge_eager_mode(void) { return static_cast<int>(torchtpu::eager_mode()); }
void tpu_bridge_set_eager_mode(int mode) {
  torchtpu::set_eager_mode(static_cast<torchtpu::EagerMode>(mode));
}
void tpu_bridge_cache_stats(uint64_t *hits, uint64_t *misses, uint64_t *entries,
                            uint64_t *compile_ns) {
  torchtpu::eager_cache_stats(hits, misses, entries, compile_ns);
}

namespace torchtpu {

at::ScalarType to_scalar_type(tpu_dtype_t t) {
  switch (t) {
    case TPU_F32: return at::kFloat;
    case TPU_F64: return at::kDouble;
    case TPU_F16: return at::kHalf;
    case TPU_BF16: return at::kBFloat16;
    case TPU_I64: return at::kLong;
    case TPU_I32: return at::kInt;
    case TPU_I16: return at::kShort;
    case TPU_I8: return at::kChar;
    case TPU_U8: return at::kByte;
    case TPU_BOOL: return at::kBool;
    default: TORCH_CHECK(false, "tpu: invalid dtype ", static_cast<int>(t));
  }
}

}  // namespace torchtpu
