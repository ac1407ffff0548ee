// disk_cache.cpp: TORCHTPU_CACHE_DIR glue over the C disk cache (see disk_cache.h).
#include "disk_cache.h"

#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "cost_hooks.h"
#include "eager.h"

extern "C" {
#include "bridge.h"
#include "tpu/disk_cache.h"
}

namespace torchtpu {
namespace {

std::atomic<uint64_t> g_extra_errors{0};

// A hash of the file this code was loaded from: any rebuild of the bridge or the core
// (lowerings, shape rules, key layout) changes it, so stale entries are never read.
uint64_t build_tag() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void *>(&build_tag), &info) || !info.dli_fname) return 0;
  std::ifstream f(info.dli_fname, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return 0;
  return tpu_cache_hash(bytes.data(), bytes.size()) ^ tpu_graph_serial_tag();
}

tpu_disk_cache_t *open_from_env() {
  const char *dir = std::getenv("TORCHTPU_CACHE_DIR");
  if (!dir || !*dir) return nullptr;
  uint64_t tag = build_tag();
  tpu_disk_cache_t *c = nullptr;
  tpu_status_t st = tag ? tpu_disk_cache_open(dir, tag, tpu_allocator_system(), &c)
                        : tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "cannot identify this build");
  if (st != TPU_OK) {
    TORCH_WARN("torchtpu: TORCHTPU_CACHE_DIR=", dir, " is not usable (", tpu_status_message(),
               "); the persistent executable cache is off for this process");
    return nullptr;
  }
  return c;
}

tpu_disk_cache_t *cache() {
  static tpu_disk_cache_t *c = open_from_env();  // lives for the process
  return c;
}

}  // namespace

bool disk_cache_enabled() { return cache() != nullptr; }

tpu_executable_t *disk_cache_fetch(const std::vector<unsigned char> &key, const std::string &what,
                                   tpu_graph_t **out_graph, std::vector<unsigned char> *extra,
                                   uint64_t *out_ns) {
  tpu_disk_cache_t *c = cache();
  if (!c) return nullptr;
  auto start = std::chrono::steady_clock::now();
  tpu_disk_entry_t e{};
  if (!tpu_disk_cache_load(c, key.data(), key.size(), &e)) return nullptr;
  tpu_executable_t *exe = nullptr;
  if (tpu_compile(e.graph, &e.options, tpu_allocator_system(), &exe) != TPU_OK) {
    tpu_disk_entry_free(c, &e);  // verified but not compilable: not ours to trust
    g_extra_errors++;
    return nullptr;
  }
  cost::on_compile(exe, e.graph, what.c_str());  // cost hook: modelled time per gen
  if (extra) extra->assign(e.extra, e.extra + e.extra_len);
  *out_graph = e.graph;
  e.graph = nullptr;
  tpu_disk_entry_free(c, &e);
  uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now() - start).count());
  if (out_ns) *out_ns = ns;
  if (log_recompiles()) {
    std::fprintf(stderr, "[torchtpu] loaded %s from the disk cache: %d steps, %.3f ms\n",
                 what.c_str(), tpu_executable_num_steps(exe), static_cast<double>(ns) / 1e6);
  }
  return exe;
}

void disk_cache_put(const std::vector<unsigned char> &key, const tpu_graph_t *g,
                    const tpu_compile_options_t &opts, const std::vector<unsigned char> &extra) {
  tpu_disk_cache_t *c = cache();
  if (!c) return;
  if (tpu_disk_cache_store(c, key.data(), key.size(), g, &opts, extra.data(), extra.size()) !=
      TPU_OK) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      TORCH_WARN("torchtpu: cannot write to TORCHTPU_CACHE_DIR (", tpu_status_message(),
                 "); later failures are only counted (torchtpu.cache_stats()['disk_errors'])");
    }
  }
}

void disk_cache_count_error() { g_extra_errors++; }

}  // namespace torchtpu

int tpu_bridge_disk_cache_stats(uint64_t *hits, uint64_t *misses, uint64_t *writes,
                                uint64_t *errors) {
  tpu_disk_cache_t *c = torchtpu::cache();
  tpu_disk_cache_stats_t s{};
  if (c) tpu_disk_cache_get_stats(c, &s);
  *hits = s.hits;
  *misses = s.misses;
  *writes = s.writes;
  *errors = s.errors + torchtpu::g_extra_errors.load();
  return c != nullptr;
}
