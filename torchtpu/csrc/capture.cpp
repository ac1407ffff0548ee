// capture.cpp: compile mode's plans (fused.h: capture_begin / capture_end / replay).
//
// torch.compile(backend="tpu") hands each AOTAutograd graph (forward, backward) to
// torchtpu/compile.py, which runs it once with recording forced on: every op of the graph
// lands in the chip's pending graph, so the whole graph becomes one IR graph, compiled
// once. The plan remembers where each parameter comes from (an input of the compiled
// function at a byte offset, a constant tensor, a scalar, or fresh random numbers) and
// where each output goes (a new storage, or an input it mutates), so that later calls
// with the same input signature only bind pointers and queue one executable: no Python
// per op, no lowering, no cache lookup.
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "cost_hooks.h"
#include "device.h"
#include "eager.h"
#include "fused_internal.h"

namespace torchtpu {
namespace {

using namespace fused;

struct PlanParam {
  enum Kind { Input, Constant } kind = Constant;
  int input = -1;
  int64_t delta = 0;  // bytes from the input's data pointer
  Param param;        // Constant: the tensor, scalar or RNG use
};

struct PlanOutput {
  bool to_input = false;
  int index = -1;      // input, or fresh storage group
  int64_t offset = 0;  // bytes: from the input's data pointer, or from the group's start
};

struct PlanResult {
  enum Kind { Group, InputView, Constant } kind = Constant;
  int index = -1;
  at::Tensor constant;
  at::ScalarType dtype = at::kFloat;
  int64_t offset = 0;  // bytes from the group's start, or from the input's data pointer
  std::vector<int64_t> sizes, strides;
};

struct Plan {
  std::vector<int64_t> signature;
  c10::DeviceIndex device = 0;
  tpu_executable_t *exe = nullptr;  // owned (one reference)
  std::string name;
  std::vector<PlanParam> params;
  std::vector<RngUse> rngs;
  std::vector<PlanOutput> outputs;
  std::vector<size_t> group_bytes;
  std::vector<PlanResult> results;
  int64_t num_nodes = 0;  // of the captured graph, before optimization
};

std::mutex g_plans_mu;
std::unordered_map<int64_t, std::vector<std::unique_ptr<Plan>>> g_plans;  // never erased

// dtype, sizes, strides of each input, and which earlier input shares its storage, into
// |s| (cleared first). A replay computes this for every call (an AdamW step has 150
// inputs), so it allocates nothing once |s| and the thread's |by_data| have grown:
// |by_data| holds (storage data, input index) sorted, to find the first input on each
// storage.
void signature_of(at::TensorList inputs, std::vector<int64_t> &s) {
  thread_local std::vector<std::pair<const void *, size_t>> by_data;
  s.clear();
  by_data.clear();
  for (size_t i = 0; i < inputs.size(); i++) by_data.emplace_back(inputs[i].storage().data(), i);
  std::sort(by_data.begin(), by_data.end());
  auto first_on_storage = [&](const void *data) {
    auto it = std::lower_bound(by_data.begin(), by_data.end(), std::make_pair(data, size_t{0}));
    return it->second;  // present: every input's data was added
  };
  for (size_t i = 0; i < inputs.size(); i++) {
    const at::Tensor &t = inputs[i];
    s.push_back(static_cast<int64_t>(t.scalar_type()));
    s.push_back(t.dim());
    for (int64_t d : t.sizes()) s.push_back(d);
    for (int64_t d : t.strides()) s.push_back(d);
    const void *data = t.storage().data();
    size_t first = data ? first_on_storage(data) : i;
    if (first == i) {
      s.push_back(-1);
      continue;
    }
    s.push_back(static_cast<int64_t>(first));
    s.push_back(t.storage_offset() - inputs[first].storage_offset());
  }
}

const char *data_of(const at::Tensor &t) { return static_cast<const char *>(t.const_data_ptr()); }

// Builds the plan from the pending graph after a capture; nullptr if some tensor cannot be
// placed (the caller flushes instead).
std::unique_ptr<Plan> build_plan(Pending &p, const std::vector<at::Tensor> &inputs,
                                 const std::vector<at::Tensor> &results,
                                 const std::vector<LiveWrite> &writes) {
  auto plan = std::make_unique<Plan>();
  plan->device = p.index;
  plan->rngs = p.rngs;
  std::unordered_map<const c10::StorageImpl *, int> input_of;
  for (size_t i = inputs.size(); i-- > 0;) {
    input_of[inputs[i].storage().unsafeGetStorageImpl()] = static_cast<int>(i);
  }
  for (const Param &q : p.params) {
    PlanParam pp;
    pp.param = q;
    // a plan runs many times: a tensor that is not an input is read where it is then
    pp.param.storage = c10::Storage();
    if (q.storage) {
      auto it = input_of.find(q.storage.unsafeGetStorageImpl());
      if (it != input_of.end()) {
        pp.kind = PlanParam::Input;
        pp.input = it->second;
        pp.delta = static_cast<const char *>(q.storage.data()) + q.byte_offset -
                   data_of(inputs[it->second]);
        pp.param.tensor = at::Tensor();
      }
    }
    plan->params.push_back(std::move(pp));
  }
  std::unordered_map<const c10::StorageImpl *, int> group_of;
  for (const LiveWrite &w : writes) {
    const c10::StorageImpl *impl = w.second.get();
    PlanOutput o;
    auto it = input_of.find(impl);
    if (it != input_of.end()) {
      o.to_input = true;
      o.index = it->second;
      o.offset = w.first->geo.offset -
                 inputs[it->second].storage_offset() * inputs[it->second].itemsize();
    } else {
      // a tensor the graph read and then wrote that is not an input (one held inside
      // another, say): a replay would write a fresh copy and the update would be lost
      if (!w.first->reads.empty()) return nullptr;
      auto [g, fresh] = group_of.emplace(impl, static_cast<int>(plan->group_bytes.size()));
      if (fresh) plan->group_bytes.push_back(impl->nbytes());
      o.index = g->second;
      o.offset = w.first->geo.offset;
    }
    plan->outputs.push_back(o);
  }
  for (const at::Tensor &t : results) {
    PlanResult r;
    r.dtype = t.scalar_type();
    r.sizes = t.sizes().vec();
    r.strides = t.strides().vec();
    const c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
    auto g = group_of.find(impl);
    auto in = input_of.find(impl);
    if (g != group_of.end()) {
      r.kind = PlanResult::Group;
      r.index = g->second;
      r.offset = t.storage_offset() * t.itemsize();
    } else if (in != input_of.end()) {
      r.kind = PlanResult::InputView;
      r.index = in->second;
      r.offset = data_of(t) - data_of(inputs[in->second]);
    } else {
      auto st = p.storages.find(const_cast<c10::StorageImpl *>(impl));
      if (st != p.storages.end() && st->second.written) return nullptr;  // written, now dead
      r.kind = PlanResult::Constant;
      r.constant = t;
    }
    plan->results.push_back(std::move(r));
  }
  return plan;
}

// A tensor of the plan's result |r| over |storage| (a tpu storage), |byte_offset| bytes
// into it. Made directly, as at::empty makes a tensor (its key set from the backend key),
// not by at::empty and set_: two dispatched ops per result, 58 for a GPT forward.
at::Tensor result_tensor(const PlanResult &r, const c10::Storage &storage, int64_t byte_offset) {
  int64_t item = static_cast<int64_t>(c10::elementSize(r.dtype));
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(r.dtype));
  impl->set_sizes_and_strides(r.sizes, r.strides, byte_offset / item);
  return at::Tensor(std::move(impl));
}

// Queues one run of |plan| over |inputs|; fills |results| (new tensors for fresh outputs).
void run_plan(const Plan &plan, at::TensorList inputs,
              const std::vector<void *> *capture_outputs, std::vector<at::Tensor> *results) {
  Inputs in;
  std::vector<uint64_t> rng_values;
  for (const RngUse &r : plan.rngs) {
    uint64_t seed = 0, offset = 0;
    reserve_philox(plan.device, r.gen, r.count, &seed, &offset);
    rng_values.push_back(seed);
    rng_values.push_back(offset);
  }
  for (const PlanParam &pp : plan.params) {
    if (pp.kind == PlanParam::Input) {
      in.ptrs.push_back(const_cast<char *>(data_of(inputs[pp.input]) + pp.delta));
    } else {
      bind_param(pp.param, capture_outputs ? nullptr : &rng_values, in);
    }
  }
  std::vector<void *> outs;
  // fresh storages for the outputs, alive until the results hold them: the executable
  // writes every output, even one no result keeps (its memory is then freed in stream
  // order, after the run, like the scratch block)
  std::vector<c10::Storage> groups;
  if (capture_outputs) {
    outs = *capture_outputs;
  } else {
    // straight from the allocator (not at::empty: a dispatched op and a tensor per group,
    // half of a GPT forward's replay), on the plan's chip, named by the plan in OOM reports
    c10::DeviceGuard guard(c10::Device(kTpu, plan.device));
    cost::OpScope scope(plan.name.c_str());  // plans live for the process
    for (size_t bytes : plan.group_bytes) {
      groups.emplace_back(c10::Storage::use_byte_size_t(), bytes, allocator(),
                          /*resizable=*/true);
    }
    for (const PlanOutput &o : plan.outputs) {
      char *base = o.to_input ? const_cast<char *>(data_of(inputs[o.index]))
                              : static_cast<char *>(groups[o.index].mutable_data());
      outs.push_back(base + o.offset);
    }
  }
  tpu_executable_retain(plan.exe);
  launch_executable(plan.exe, std::move(in), std::move(outs), c10::Device(kTpu, plan.device),
                    plan.name);
  // the result tensors after the launch (~20 us for a GPT forward's 58): the kernels start
  // first; |groups| holds the output storages meanwhile
  if (!capture_outputs) {
    for (const PlanResult &r : plan.results) {
      switch (r.kind) {
        case PlanResult::Group:
          results->push_back(result_tensor(r, groups[r.index], r.offset));
          break;
        case PlanResult::InputView: {
          const at::Tensor &base = inputs[r.index];
          int64_t off = base.storage_offset() * base.itemsize() + r.offset;
          results->push_back(result_tensor(r, base.storage(), off));
          break;
        }
        case PlanResult::Constant:
          results->push_back(r.constant);
          break;
      }
    }
  }
  if (eager_mode() == EagerMode::Debug) synchronize_device(plan.device);
}

}  // namespace

void capture_begin(c10::DeviceIndex index, const std::vector<at::Tensor> &inputs,
                   bool exporting) {
  flush_pending(index, "compile");
  Pending &p = pending(index);
  std::lock_guard<std::recursive_mutex> lock(p.mu);
  p.capturing = true;
  p.capture_cut = false;
  p.exporting = exporting;
  g_capturing++;
  // the inputs are the graph's first parameters, in order; reads of views of them become
  // view ops on these values
  ensure_graph(p);
  for (const at::Tensor &t : inputs) {
    if (t.device() == c10::Device(kTpu, index)) read_tensor(p, t);
  }
}

// Ends the capture state of |p| (its lock held).
void end_capture(Pending &p) {
  TORCH_CHECK(p.capturing, "torchtpu: capture ended without capture_begin");
  p.capturing = false;
  p.exporting = false;
  g_capturing--;
}

void capture_abort(c10::DeviceIndex index) {
  Pending &p = pending(index);
  std::lock_guard<std::recursive_mutex> lock(p.mu);
  end_capture(p);
  flush_locked(p, "compile: error");
}

bool capture_end(c10::DeviceIndex index, int64_t fn, const std::vector<at::Tensor> &inputs,
                 const std::vector<at::Tensor> &outputs) {
  Pending &p = pending(index);
  std::lock_guard<std::recursive_mutex> lock(p.mu);
  end_capture(p);
  if (p.capture_cut || p.num_ops == 0) {
    flush_locked(p, "compile: graph break");
    return false;
  }
  auto writes = live_writes(p);
  std::unique_ptr<Plan> plan = build_plan(p, inputs, outputs, writes);
  if (!plan) {
    flush_locked(p, "compile: unplaced tensor");
    return false;
  }
  std::vector<unsigned char> key = p.key;
  std::vector<void *> outs;
  tpu_compile_options_t opts{};
  std::vector<int32_t> alias;
  try {
    add_outputs(p, writes, key, outs, opts, alias);
    plan->exe = compile_pending(p, key, opts);
    plan->name = "compiled " + graph_name(p);
    plan->num_nodes = tpu_graph_num_nodes(p.g);
    signature_of(inputs, plan->signature);
    run_plan(*plan, inputs, &outs, nullptr);
  } catch (...) {
    p.reset();
    throw;
  }
  p.reset();
  std::lock_guard<std::mutex> plock(g_plans_mu);
  g_plans[fn].push_back(std::move(plan));
  return true;
}

std::string capture_export(c10::DeviceIndex index, const std::vector<at::Tensor> &outputs,
                           const std::string &name, std::vector<at::Tensor> *constants) {
  Pending &p = pending(index);
  std::lock_guard<std::recursive_mutex> lock(p.mu);
  bool cut = p.capture_cut;
  end_capture(p);
  struct Reset {
    Pending &p;
    ~Reset() { p.reset(); }
  } reset{p};
  TORCH_CHECK(!cut, "torchtpu.export: the program could not be captured as one graph (an op "
              "ran on the CPU or a value was read on the host; see torchtpu.fused_stats())");
  ensure_graph(p);
  for (const at::Tensor &t : outputs) {
    TORCH_CHECK(t.device() == c10::Device(kTpu, index), "torchtpu.export: output on ", t.device());
    tpu_value_t v = read_tensor(p, t);
    TORCH_CHECK(v != TPU_NO_VALUE, "torchtpu.export: an output is a view the graph cannot express");
    check_status(tpu_graph_output(p.g, v, nullptr), "torchtpu.export");
  }
  for (const Param &q : p.params) {
    TORCH_CHECK(q.tensor.defined(), "torchtpu.export: a random op's seed is not exportable");
    constants->push_back(q.tensor);
  }
  char *text = nullptr;
  size_t len = 0;
  check_status(tpu_graph_print_stablehlo(p.g, name.c_str(), tpu_allocator_system(), &text, &len),
               "torchtpu.export");
  std::string out(text, len);
  tpu_allocator_system().free(tpu_allocator_system().self, text);
  return out;
}

bool replay(int64_t fn, at::TensorList inputs, std::vector<at::Tensor> *outputs) {
  // a plan runs on one chip: inputs elsewhere (or on several chips) have none
  c10::DeviceIndex device = -1;
  for (const at::Tensor &t : inputs) {
    if (t.device().type() != kTpu || (device >= 0 && t.device().index() != device)) return false;
    device = t.device().index();
  }
  const Plan *plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    auto it = g_plans.find(fn);
    if (it == g_plans.end()) return false;
    thread_local std::vector<int64_t> sig;
    signature_of(inputs, sig);
    for (const auto &pl : it->second) {
      if (pl->device == device && pl->signature == sig) plan = pl.get();
    }
  }
  if (!plan) return false;
  flush_pending(plan->device, "compiled graph");
  run_plan(*plan, inputs, nullptr, outputs);
  return true;
}

namespace {

// [plans, steps, scratch bytes, unplanned bytes, graph nodes, kernels, fused kernels, two
// threads (0 or 1), runs alone, their host ns, runs with a helper, their host ns, runs alone
// that a helper joined later] of |fn|'s latest plan.
std::vector<int64_t> op_plan_stats(int64_t fn) {
  std::lock_guard<std::mutex> lock(g_plans_mu);
  auto it = g_plans.find(fn);
  if (it == g_plans.end() || it->second.empty()) return std::vector<int64_t>(13, 0);
  const Plan &p = *it->second.back();
  tpu_executable_run_stats_t runs;
  tpu_executable_run_stats(p.exe, &runs);
  return {static_cast<int64_t>(it->second.size()), tpu_executable_num_steps(p.exe),
          static_cast<int64_t>(tpu_executable_scratch_bytes(p.exe)),
          static_cast<int64_t>(tpu_executable_unplanned_bytes(p.exe)), p.num_nodes,
          tpu_executable_num_kernels(p.exe), tpu_executable_num_fused(p.exe),
          tpu_executable_two_threads(p.exe) ? 1 : 0, static_cast<int64_t>(runs.alone_runs),
          static_cast<int64_t>(runs.alone_ns), static_cast<int64_t>(runs.helped_runs),
          static_cast<int64_t>(runs.helped_ns), static_cast<int64_t>(runs.joined_runs)};
}

// The compiled steps of |fn|'s latest plan, one line each (tpu_executable_describe).
std::string op_plan_describe(int64_t fn) {
  std::lock_guard<std::mutex> lock(g_plans_mu);
  auto it = g_plans.find(fn);
  if (it == g_plans.end() || it->second.empty()) return "";
  char *text = nullptr;
  size_t len = 0;
  check_status(tpu_executable_describe(it->second.back()->exe, tpu_allocator_system(), &text, &len),
               "plan_describe");
  std::string out(text, len);
  tpu_allocator_system().free(tpu_allocator_system().self, text);
  return out;
}

void op_capture_begin(int64_t device, at::TensorList inputs, bool exporting) {
  capture_begin(static_cast<c10::DeviceIndex>(device), inputs.vec(), exporting);
}

std::tuple<std::string, std::vector<at::Tensor>> op_capture_export(int64_t device,
                                                                   at::TensorList outputs,
                                                                   c10::string_view name) {
  std::vector<at::Tensor> params;
  std::string text = capture_export(static_cast<c10::DeviceIndex>(device), outputs.vec(),
                                    std::string(name), &params);
  return {text, params};
}

void op_capture_abort(int64_t device) { capture_abort(static_cast<c10::DeviceIndex>(device)); }

bool op_capture_end(int64_t device, int64_t fn, at::TensorList inputs, at::TensorList outputs) {
  return capture_end(static_cast<c10::DeviceIndex>(device), fn, inputs.vec(), outputs.vec());
}


}  // namespace

TORCH_LIBRARY(torchtpu, m) {
  m.def("capture_begin(int device, Tensor[] inputs, bool exporting) -> ()", &op_capture_begin);
  m.def("capture_export(int device, Tensor[] outputs, str name) -> (str, Tensor[])",
        &op_capture_export);
  m.def("capture_abort(int device) -> ()", &op_capture_abort);
  m.def("capture_end(int device, int fn, Tensor[] inputs, Tensor[] outputs) -> bool",
        &op_capture_end);
  m.def("plan_stats(int fn) -> int[]", &op_plan_stats);
  m.def("plan_describe(int fn) -> str", &op_plan_describe);
}

}  // namespace torchtpu
