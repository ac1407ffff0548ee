// fused.cpp: the pending graph of fused eager mode and of compile-mode capture (fused.h).
//
// One Pending per chip, guarded by its own (recursive) mutex because autograd records
// backward ops from its device thread. Recording an op costs a lookup per input, an
// inline of the op's cached graph (a few nodes) and a key append; flushing costs one
// cache lookup keyed by everything recorded (the ops' signatures and how their inputs
// and outputs are wired), so a training step that records the same ops in the same order
// runs the same cached executable every time.
#include "fused.h"

#include <ATen/ops/empty.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cost_hooks.h"
#include "device.h"
#include "disk_cache.h"
#include "eager.h"
#include "fused_internal.h"

namespace torchtpu {
namespace fused {

std::atomic<int> g_capturing{0};

Pending &pending(c10::DeviceIndex index) {
  static std::array<std::atomic<Pending *>, 64> all{};  // TORCHTPU_CHIPS is at most 64
  static std::mutex mu;
  TORCH_CHECK(index >= 0 && index < 64, "tpu: no device ", static_cast<int>(index));
  Pending *p = all[index].load(std::memory_order_acquire);
  if (p) return *p;
  std::lock_guard<std::mutex> lock(mu);
  p = all[index].load();
  if (!p) {
    p = new Pending();  // one per chip for the life of the process
    p->index = index;
    all[index].store(p, std::memory_order_release);
  }
  return *p;
}

int device_count() { return tpu_device_count(); }

// ---- statistics ------------------------------------------------------------------------

std::mutex g_stats_mu;
std::map<std::string, uint64_t> g_flush_reasons;
std::atomic<uint64_t> g_ops_recorded{0};
uint64_t g_graphs_run = 0, g_graph_hits = 0, g_graph_misses = 0;

// Ops a pending graph records before it is cut (TORCHTPU_FUSED_MAX_OPS). Cutting every 32
// ops lets the chip run the first part of a forward or backward while the rest records;
// the cuts fall at the same ops every step (counted from the last flush), so the cache
// hits. Measured on the GPT step (2026-11-30, 5 runs each): with 2000 (whole forward and
// backward graphs) a step with a sync took a median 4.5 ms, with 32 3.5 ms, back to back
// the same; the modelled v5e step 443 vs 434 µs.
int max_ops() {
  static const int n = [] {
    const char *v = std::getenv("TORCHTPU_FUSED_MAX_OPS");
    int x = v ? std::atoi(v) : 0;
    return x > 0 ? x : 32;
  }();
  return n;
}

bool debug_views() {
  static const bool on = [] {
    const char *v = std::getenv("TORCHTPU_FUSED_DEBUG");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

template <typename T>
void key_pod(std::vector<unsigned char> &k, const T &v) {
  const auto *c = reinterpret_cast<const unsigned char *>(&v);
  k.insert(k.end(), c, c + sizeof v);
}

void key_geo(std::vector<unsigned char> &k, const Geo &g) {
  key_pod(k, g.offset);
  key_pod(k, g.rank);
  key_pod(k, static_cast<int8_t>(g.dtype));
  for (int i = 0; i < g.rank; i++) {
    key_pod(k, g.sizes[i]);
    key_pod(k, g.strides[i]);
  }
}

void ensure_graph(Pending &p) {
  if (!p.g) check_status(tpu_graph_create(tpu_allocator_system(), &p.g), "tpu fused graph");
}

// The value of tpu tensor |t| in the pending graph: what it last wrote there (or a view
// of it), a parameter already bound to it, or a new parameter. TPU_NO_VALUE if the
// storage was written with a geometry |t| cannot be expressed in (flush first).
tpu_value_t read_tensor(Pending &p, const at::Tensor &t) {
  c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
  Geo geo = geo_of(t);
  auto it = p.storages.find(impl);
  if (it != p.storages.end() && it->second.written) {
    StorageState &st = it->second;
    if (geo == st.geo) return st.value;
    tpu_value_t v = view_of(p.g, st.value, st.geo, geo);
    if (v != TPU_NO_VALUE) {
      p.key.push_back('v');
      key_pod(p.key, st.value);
      key_geo(p.key, st.geo);
      key_geo(p.key, geo);
    }
    return v;
  }
  if (it != p.storages.end()) {
    for (const auto &[g, v] : it->second.reads) {
      if (g == geo) return v;
    }
    for (const auto &[g, v] : it->second.reads) {  // a view of a parameter read before
      tpu_value_t w = view_of(p.g, v, g, geo);
      if (w == TPU_NO_VALUE) continue;
      p.key.push_back('r');
      key_pod(p.key, v);
      key_geo(p.key, g);
      key_geo(p.key, geo);
      return w;
    }
  }
  IrLayout l = ir_layout(t);
  tpu_value_t v = tpu_graph_parameter(p.g, l.dtype, &l.shape, l.dense ? nullptr : l.strides);
  Param q{};
  if (t.device().type() == kTpu) {
    q.storage = t.storage();
    q.byte_offset = t.storage_offset() * static_cast<int64_t>(t.itemsize());
  }
  // A fused graph needs only the storage. Holding the tensor too would keep its TensorImpl
  // referenced, and torch.utils.swap_tensors (nn.Module.to with
  // swap_module_params_on_conversion) refuses tensors referenced elsewhere. A capture keeps
  // it: a plan reads its non-input tensors where they are at each run, and an export
  // returns them.
  if (!q.storage || p.capturing || p.exporting) q.tensor = t;
  p.params.push_back(std::move(q));
  p.storages[impl].reads.emplace_back(geo, v);
  p.key.push_back('p');
  key_geo(p.key, geo);
  return v;
}

// True if writing |t| needs a flush first: its storage was written with another geometry
// that |t| does not cover exactly (a dense reshape of the same elements is a full overwrite).
bool write_conflicts(Pending &p, const at::Tensor &t) {
  auto it = p.storages.find(t.storage().unsafeGetStorageImpl());
  if (it == p.storages.end() || !it->second.written) return false;
  const Geo &w = it->second.geo;
  Geo g = geo_of(t);
  if (w == g) return false;
  return !(g.offset == w.offset && g.dtype == w.dtype && numel_of(g) == numel_of(w) &&
           tpu_ir_strides_dense(g) && tpu_ir_strides_dense(w));
}

void write_tensor(Pending &p, const at::Tensor &t, tpu_value_t v) {
  c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
  StorageState &st = p.storages[impl];
  if (!st.weak) st.weak = t.storage().getWeakStorageImpl();
  st.written = true;
  st.geo = geo_of(t);
  st.value = v;
  st.write_seq = ++p.seq;
}

// A host input of a recorded op: its bytes (a scalar) or the CPU tensor holding it.
tpu_value_t read_host(Pending &p, const tpu_node_t *param, const void *ptr, Inputs &inputs,
                      int rng, int rng_index) {
  // A captured or exported graph takes its scalars as constants (they are fixed in the FX
  // graph), so the compiler folds them; a capture keeps random seeds as parameters.
  if ((p.exporting || (p.capturing && rng == 0)) && param->shape.rank == 0) {
    tpu_dtype_t dt = param->dtype;
    p.key.push_back('k');
    p.key.insert(p.key.end(), static_cast<const unsigned char *>(ptr),
                 static_cast<const unsigned char *>(ptr) + tpu_dtype_size(dt));
    if (tpu_dtype_is_float(dt)) {
      double x = dt == TPU_F64   ? *static_cast<const double *>(ptr)
                 : dt == TPU_F32 ? *static_cast<const float *>(ptr)
                 : dt == TPU_F16 ? static_cast<double>(*static_cast<const c10::Half *>(ptr))
                                 : static_cast<double>(*static_cast<const c10::BFloat16 *>(ptr));
      return tpu_graph_constant(p.g, dt, &param->shape, x);
    }
    int64_t x = 0;
    std::memcpy(&x, ptr, tpu_dtype_size(dt));  // little-endian: low bytes first
    if (dt == TPU_BOOL) return tpu_graph_constant(p.g, dt, &param->shape, x ? 1.0 : 0.0);
    return tpu_graph_constant_int(p.g, dt, &param->shape, x);
  }
  tpu_value_t v = tpu_graph_parameter(p.g, param->dtype, &param->shape, nullptr);
  Param q{};
  q.rng = rng;
  q.rng_index = rng_index;
  int64_t numel = 0;
  tpu_shape_numel(&param->shape, &numel);
  size_t bytes = static_cast<size_t>(numel) * tpu_dtype_size(param->dtype);
  if (bytes <= q.bytes.size()) {  // a scalar (a complex one is a pair: shape (2,))
    std::memcpy(q.bytes.data(), ptr, bytes);
  } else {
    for (const at::Tensor &h : inputs.host_copies) {
      if (h.const_data_ptr() == ptr) q.tensor = h;
    }
    TORCH_INTERNAL_ASSERT(q.tensor.defined(), "tpu fused: host input is not a known tensor");
  }
  p.params.push_back(std::move(q));
  p.key.push_back('h');
  key_pod(p.key, static_cast<int8_t>(rng));
  return v;
}

void count_flush(const char *reason) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  g_flush_reasons[reason]++;
}

tpu_executable_t *compile_pending(Pending &p, const std::vector<unsigned char> &key,
                                  const tpu_compile_options_t &opts) {
  uint64_t hash = tpu_cache_hash(key.data(), key.size());
  tpu_executable_t *exe = tpu_cache_lookup(executable_cache(), key.data(), key.size(), hash);
  std::lock_guard<std::mutex> lock(g_stats_mu);
  if (exe) {
    g_graph_hits++;
    return exe;
  }
  g_graph_misses++;
  std::string what = "fused graph of " + std::to_string(p.num_ops) + " ops";
  tpu_graph_t *loaded = nullptr;
  uint64_t load_ns = 0;
  if ((exe = disk_cache_fetch(key, what, &loaded, nullptr, &load_ns))) {
    tpu_graph_destroy(loaded);  // p.g is the same graph
    tpu_cache_insert(executable_cache(), key.data(), key.size(), hash, exe, load_ns);
    return exe;
  }
  auto start = std::chrono::steady_clock::now();
  if (tpu_graph_status(p.g) != TPU_OK) {
    TORCH_CHECK(false, "tpu fused graph: recording built a bad graph: ",
                tpu_graph_error_message(p.g));
  }
  check_status(tpu_compile(p.g, &opts, tpu_allocator_system(), &exe), "tpu fused graph");
  cost::on_compile(exe, p.g, what.c_str());  // cost hook
  uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now() - start).count());
  tpu_cache_insert(executable_cache(), key.data(), key.size(), hash, exe, ns);
  log_compile(what, exe, ns);
  disk_cache_put(key, p.g, opts);
  return exe;
}

std::string graph_name(const Pending &p) {
  std::string s = "fused graph of " + std::to_string(p.num_ops) + " ops (";
  for (size_t i = 0; i < p.names.size(); i++) s += (i ? ", " : "") + p.names[i];
  return s + (p.names.size() >= 8 ? ", ...)" : ")");
}

void bind_param(const Param &q, const std::vector<uint64_t> *rng_values, Inputs &in) {
  if (q.rng && rng_values) {
    uint64_t x = (*rng_values)[2 * q.rng_index + (q.rng - 1)];
    in.scalar_slot(&x, sizeof x);
  } else if (q.storage) {
    in.ptrs.push_back(const_cast<char *>(static_cast<const char *>(q.storage.data())) + q.byte_offset);
  } else if (!q.tensor.defined()) {
    in.scalar_slot(q.bytes.data(), q.bytes.size());
  } else {
    if (q.tensor.device().type() == c10::DeviceType::CPU) in.host_copies.push_back(q.tensor);
    in.ptrs.push_back(const_cast<void *>(q.tensor.const_data_ptr()));
  }
}

std::vector<LiveWrite> live_writes(Pending &p) {
  std::vector<LiveWrite> out;
  for (auto &[impl, st] : p.storages) {
    if (!st.written) continue;
    auto strong = st.weak->lock();
    if (strong) out.emplace_back(&st, std::move(strong));
  }
  std::sort(out.begin(), out.end(),
            [](const auto &a, const auto &b) { return a.first->write_seq < b.first->write_seq; });
  return out;
}

void add_outputs(Pending &p, const std::vector<LiveWrite> &w, std::vector<unsigned char> &key,
                 std::vector<void *> &ptrs, tpu_compile_options_t &opts,
                 std::vector<int32_t> &alias) {
  alias.assign(w.size(), TPU_OUTPUT_ALIAS_NONE);
  for (size_t i = 0; i < w.size(); i++) {
    const StorageState &st = *w[i].first;
    bool dense = tpu_ir_strides_dense(st.geo);
    check_status(tpu_graph_output(p.g, st.value, dense ? nullptr : st.geo.strides),
                 "tpu fused graph output");
    // no parameter reads the storage (disjoint), some do (overlap), or exactly one, with
    // the written geometry (an in-place update: its exact alias)
    int32_t kind = st.reads.empty() ? TPU_OUTPUT_ALIAS_DISJOINT : TPU_OUTPUT_ALIAS_OVERLAP;
    if (st.reads.size() == 1 && st.reads[0].first == st.geo) {
      kind = tpu_graph_node(p.g, st.reads[0].second)->attrs.param.index;
    }
    alias[i] = kind;
    key.push_back('o');
    key_pod(key, st.value);
    key_pod(key, kind);
    if (!dense) key_geo(key, st.geo);
    ptrs.push_back(static_cast<char *>(w[i].second->mutable_data()) + st.geo.offset);
  }
  opts.output_alias_param = alias.data();
  opts.num_output_alias = static_cast<int32_t>(alias.size());
}

void flush_locked(Pending &p, const char *reason) {
  if (!p.g || p.num_ops == 0) {
    p.reset();
    return;
  }
  if (p.capturing) {
    p.capture_cut = true;
    if (debug_views()) std::fprintf(stderr, "[torchtpu] compile: capture cut by %s\n", reason);
  }
  count_flush(reason);
  auto writes = live_writes(p);
  std::vector<void *> outs;
  tpu_compile_options_t opts{};
  std::vector<int32_t> alias;
  try {
    add_outputs(p, writes, p.key, outs, opts, alias);
    if (!outs.empty()) {
      tpu_executable_t *exe = compile_pending(p, p.key, opts);
      Inputs in;
      for (const Param &q : p.params) bind_param(q, nullptr, in);  // RNG reserved at record
      {
        std::lock_guard<std::mutex> lock(g_stats_mu);
        g_graphs_run++;
      }
      launch_executable(exe, std::move(in), std::move(outs), c10::Device(kTpu, p.index),
                        graph_name(p));
    }
  } catch (...) {
    p.reset();
    throw;
  }
  p.reset();
}

}  // namespace fused

using namespace fused;

OpGraph::OpGraph(const tpu_graph_t *g)
    : graph(g), params(tpu_graph_num_params(g), nullptr), used(params.size(), false) {
  auto mark = [&](tpu_value_t v) {
    const tpu_node_t *n = tpu_graph_node(g, v);
    if (n && n->op == TPU_OP_PARAMETER) used[n->attrs.param.index] = true;
  };
  for (int v = 0; v < tpu_graph_num_nodes(g); v++) {
    const tpu_node_t *n = tpu_graph_node(g, v);
    if (n->op == TPU_OP_PARAMETER) params[n->attrs.param.index] = n;
    for (int i = 0; i < n->num_operands; i++) mark(n->operands[i]);
  }
  for (int i = 0; i < tpu_graph_num_outputs(g); i++) mark(tpu_graph_output_value(g, i));
}

namespace {
thread_local int t_record_scopes = 0;  // RecordScopes alive on this thread
thread_local int t_whole_scopes = 0;   // of them, those the size limit must not cut
}  // namespace

bool capturing(c10::DeviceIndex index) {
  return g_capturing.load(std::memory_order_relaxed) > 0 && pending(index).capturing;
}

bool recording(c10::DeviceIndex index) {
  if (t_record_scopes > 0 || capturing(index)) return true;
  return eager_mode() == EagerMode::Fused;
}

RecordScope::RecordScope(c10::DeviceIndex index, const char *reason, bool whole)
    : index_(index), reason_(reason), whole_(whole) {
  t_record_scopes++;
  if (whole_) t_whole_scopes++;
}

void RecordScope::finish() {
  if (!open_) return;
  open_ = false;
  if (whole_) t_whole_scopes--;
  if (--t_record_scopes > 0 || recording(index_)) return;  // the enclosing mode flushes
  flush_pending(-1, reason_);  // every chip: a list may hold tensors of several
}

RecordScope::~RecordScope() {
  try {
    finish();
  } catch (...) {  // only on an exception's way out: that exception is the one reported
  }
}

void record_op(c10::Device device, const std::string &name, const std::vector<unsigned char> &key,
               const OpGraph &op, Inputs &inputs,
               c10::ArrayRef<at::Tensor> tensors, c10::ArrayRef<at::Tensor> outputs,
               const RngUse &rng) {
  Pending &p = pending(device.index());
  std::lock_guard<std::recursive_mutex> lock(p.mu);
  // A training step records its forward outside the autograd engine and its backward
  // inside it (on the calling thread: torchtpu turns the engine's device threads off, see
  // __init__.py; or on an engine thread where the user turned them back on): cutting
  // where the recording thread or backward changes gives the same cut points every step
  // (the cache hits), and the forward graph then runs on the chip while the backward is
  // being recorded.
  const int task = torch::autograd::get_current_graph_task_id();
  if (p.num_ops > 0 && !p.capturing &&
      (p.recorder != std::this_thread::get_id() || p.recorder_task != task)) {
    flush_locked(p, "forward/backward switch");
  }
  p.recorder = std::this_thread::get_id();
  p.recorder_task = task;
  const tpu_graph_t *op_graph = op.graph;
  const auto &params = op.params;
  TORCH_INTERNAL_ASSERT(params.size() == inputs.ptrs.size(), name, ": ", params.size(),
                        " parameters for ", inputs.ptrs.size(), " inputs");
  // a tensor the op only overwrites is not read: reading it would make it a parameter of
  // the pending graph, which would keep it alive (an output of a dead temporary)
  const auto &used = op.used;
  std::vector<tpu_value_t> &values = p.values;
  values.assign(params.size(), TPU_NO_VALUE);
  for (int attempt = 0;; attempt++) {
    ensure_graph(p);
    bool conflict = false;
    for (const at::Tensor &o : outputs) conflict = conflict || write_conflicts(p, o);
    size_t key_mark = p.key.size();
    for (size_t i = 0; i < params.size() && !conflict; i++) {
      if (tensors[i].defined() && used[i]) {
        values[i] = read_tensor(p, tensors[i]);
        conflict = values[i] == TPU_NO_VALUE;
      }
    }
    if (!conflict) break;
    if (debug_views()) {
      std::fprintf(stderr, "[torchtpu] fused: %s reads or writes a view the pending graph "
                   "cannot express; flushing\n", name.c_str());
      auto show = [&](const char *what, const at::Tensor &t) {
        auto it = p.storages.find(t.storage().unsafeGetStorageImpl());
        if (it == p.storages.end() || !it->second.written) return;
        const Geo &w = it->second.geo;
        std::fprintf(stderr, "  %s: offset %lld sizes %s strides %s; written as offset %lld "
                     "sizes %s strides %s\n", what, (long long)(t.storage_offset() * t.itemsize()),
                     c10::str(t.sizes()).c_str(), c10::str(t.strides()).c_str(),
                     (long long)w.offset, c10::str(c10::IntArrayRef(w.sizes, w.rank)).c_str(),
                     c10::str(c10::IntArrayRef(w.strides, w.rank)).c_str());
      };
      for (const at::Tensor &o : outputs) show("output", o);
      for (const at::Tensor &t : tensors) if (t.defined()) show("input", t);
    }
    p.key.resize(key_mark);
    TORCH_INTERNAL_ASSERT(attempt == 0, name, ": cannot record after a flush");
    flush_locked(p, "view");
  }
  // which values the op reads: the key so far fixes the graph built so far (its value ids
  // included), but a read of a value already there (a parameter read before, or what a
  // tensor last wrote) adds nothing to it, so without this, b / a would hit a / b's
  // executable
  for (size_t i = 0; i < params.size(); i++) {
    if (!tensors[i].defined() || !used[i]) continue;
    p.key.push_back('a');
    key_pod(p.key, values[i]);
  }
  // host inputs: scalars, CPU index tensors, and the (seed, offset) of random ops
  int rng_index = -1;
  if (rng.used) {
    rng_index = static_cast<int>(p.rngs.size());
    p.rngs.push_back(rng);
  }
  for (size_t i = 0; i < params.size(); i++) {
    if (tensors[i].defined()) continue;
    int which = rng.used && i + 2 >= params.size() ? static_cast<int>(i + 3 - params.size()) : 0;
    values[i] = read_host(p, params[i], inputs.ptrs[i], inputs, which, which ? rng_index : -1);
  }
  p.map.assign(tpu_graph_num_nodes(op_graph), TPU_NO_VALUE);
  tpu_status_t st = tpu_graph_inline(p.g, op_graph, values.data(), p.map.data());
  if (st != TPU_OK) {
    std::string msg = tpu_graph_error_message(p.g);
    p.reset();
    TORCH_CHECK(false, name, ": recording into the fused graph failed: ", msg);
  }
  p.key.push_back('#');
  key_pod(p.key, key.size());
  p.key.insert(p.key.end(), key.begin(), key.end());
  TORCH_INTERNAL_ASSERT(static_cast<int>(outputs.size()) == tpu_graph_num_outputs(op_graph));
  for (size_t j = 0; j < outputs.size(); j++) {
    write_tensor(p, outputs[j], p.map[tpu_graph_output_value(op_graph, static_cast<int>(j))]);
  }
  p.num_ops++;
  if (p.names.size() < 8 && std::find(p.names.begin(), p.names.end(), name) == p.names.end()) {
    p.names.push_back(name);
  }
  g_ops_recorded.fetch_add(1, std::memory_order_relaxed);
  if (p.num_ops >= max_ops() && !p.capturing && t_whole_scopes == 0) {
    flush_locked(p, "size limit");
  }
}

void flush_pending(int index, const char *reason) {
  if (index < 0) {
    for (int i = 0; i < device_count(); i++) flush_pending(i, reason);
    return;
  }
  Pending &p = pending(static_cast<c10::DeviceIndex>(index));
  std::lock_guard<std::recursive_mutex> lock(p.mu);
  if (p.num_ops) flush_locked(p, reason);
}

void flush_if_pending(const at::Tensor &t, const char *reason) {
  if (!t.defined() || t.device().type() != kTpu || !t.has_storage()) return;
  Pending &p = pending(t.device().index());
  std::lock_guard<std::recursive_mutex> lock(p.mu);
  if (p.num_ops && p.storages.count(t.storage().unsafeGetStorageImpl())) flush_locked(p, reason);
}

}  // namespace torchtpu

extern "C" {
#include "bridge.h"
}

void tpu_bridge_fused_stats(void (*fn)(void *ctx, const char *name, uint64_t count), void *ctx) {
  using namespace torchtpu::fused;
  std::map<std::string, uint64_t> reasons;
  uint64_t ops, graphs, hits, misses;
  {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    reasons = g_flush_reasons;
    ops = g_ops_recorded;
    graphs = g_graphs_run;
    hits = g_graph_hits;
    misses = g_graph_misses;
  }
  fn(ctx, "ops_recorded", ops);
  fn(ctx, "graphs_run", graphs);
  fn(ctx, "graph_cache_hits", hits);
  fn(ctx, "graph_cache_misses", misses);
  for (const auto &[reason, n] : reasons) fn(ctx, ("flush:" + reason).c_str(), n);
}

void tpu_bridge_reset_fused_stats(void) {
  using namespace torchtpu::fused;
  std::lock_guard<std::mutex> lock(g_stats_mu);
  g_flush_reasons.clear();
  g_ops_recorded = 0;
  g_graphs_run = g_graph_hits = g_graph_misses = 0;
}
