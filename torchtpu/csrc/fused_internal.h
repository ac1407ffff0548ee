// fused_internal.h: the pending graph's state, shared by fused.cpp (recording and
// flushing) and capture.cpp (compile mode's plans). Not used elsewhere.
#pragma once

#include <c10/core/StorageImpl.h>

#include <array>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fused.h"
#include "fused_view.h"

namespace torchtpu {
namespace fused {

using WeakStorage = c10::weak_intrusive_ptr<c10::StorageImpl>;

// One parameter of the pending graph.
struct Param {
  at::Tensor tensor;                   // a CPU tensor, or a tpu tensor in a capture
  std::array<unsigned char, 16> bytes; // a host scalar, when tensor and storage are undefined
  int rng = 0;                         // 1: seed, 2: offset of rngs[rng_index]
  int rng_index = -1;
  // A tpu tensor's bytes as they were when it was read: its storage (kept alive) and byte
  // offset. They stay put when the tensor is re-pointed before the graph runs
  // (`t.data = other`, which nn.Module.to(dtype) does to every parameter). Empty in a
  // compile plan's non-input parameters, which each run reads where |tensor| is then.
  c10::Storage storage;
  int64_t byte_offset = 0;
};

struct StorageState {
  std::optional<WeakStorage> weak;  // set once written: results that die are not written
  bool written = false;
  Geo geo;                          // of the latest write
  tpu_value_t value = TPU_NO_VALUE; // the latest value written
  uint64_t write_seq = 0;
  std::vector<std::pair<Geo, tpu_value_t>> reads;  // parameters over this storage
};

struct Pending {
  std::recursive_mutex mu;
  c10::DeviceIndex index = 0;
  tpu_graph_t *g = nullptr;
  std::vector<Param> params;
  std::vector<RngUse> rngs;
  std::unordered_map<c10::StorageImpl *, StorageState> storages;
  std::vector<unsigned char> key;
  std::vector<std::string> names;  // distinct op names, for error messages
  int num_ops = 0;
  uint64_t seq = 0;
  bool capturing = false;
  bool exporting = false;  // scalars become constants (torchtpu.export)
  bool capture_cut = false;
  std::thread::id recorder;        // the thread that recorded the pending ops
  int recorder_task = -1;          // and the backward it recorded them in (-1: none)
  std::vector<tpu_value_t> values;  // record_op scratch: the values of an op's inputs
  std::vector<tpu_value_t> map;     // inline scratch

  // Forgets what was recorded. The graph is emptied, not destroyed: the next one reuses
  // its storage (a new graph of thousands of nodes costs page faults as it grows).
  void reset() {
    tpu_graph_clear(g);
    params.clear();
    rngs.clear();
    storages.clear();
    key.clear();
    names.clear();
    num_ops = 0;
  }
};

extern std::atomic<int> g_capturing;

// The pending graph of chip |index| (created on first use).
Pending &pending(c10::DeviceIndex index);

// The live written storages of |p| in write order, with a strong reference each.
using LiveWrite = std::pair<StorageState *, c10::intrusive_ptr<c10::StorageImpl>>;
std::vector<LiveWrite> live_writes(Pending &p);

// Marks |w| as the outputs of p's graph, extends |key| with them, and fills the output
// pointers and the aliasing options: an output whose storage was read through exactly one
// parameter, with the geometry it is written with, is that parameter's exact alias (kept
// in |alias|, which opts points at); one read otherwise may alias its inputs.
void add_outputs(Pending &p, const std::vector<LiveWrite> &w, std::vector<unsigned char> &key,
                 std::vector<void *> &ptrs, tpu_compile_options_t &opts,
                 std::vector<int32_t> &alias);

// The executable for p's graph under |key|: from the cache, or compiled and inserted.
tpu_executable_t *compile_pending(Pending &p, const std::vector<unsigned char> &key,
                                  const tpu_compile_options_t &opts);

// The value of tpu tensor |t| in p's graph (see fused.cpp); TPU_NO_VALUE if it cannot be
// expressed without a flush.
tpu_value_t read_tensor(Pending &p, const at::Tensor &t);
void ensure_graph(Pending &p);

// Queues p's graph (a flush); resets p. |reason| goes to the statistics.
void flush_locked(Pending &p, const char *reason);

// Appends the run-time input of parameter |q|; an RNG parameter takes its seed or offset
// from |rng_values| (two per RngUse) if given, else the value reserved at record time.
void bind_param(const Param &q, const std::vector<uint64_t> *rng_values, Inputs &in);

// "fused graph of N ops (aten::a, ...)": names a run in errors.
std::string graph_name(const Pending &p);

}  // namespace fused
}  // namespace torchtpu
