// process_group.cpp: the "tpu" torch.distributed backend, a c10d::Backend subclass.
//
// Why C++ and not a Python ProcessGroup: DDP's reducer, FSDP2 and DTensor's functional
// collectives call the backend from C++ (autograd threads, the c10d op registry); a C++ Backend
// serves them without taking the GIL, and its Work objects and futures are the ones PyTorch's
// own backends return. torch 2.13 ships the c10d headers and torch_cpu exports c10d::Backend;
// pybind11 (from torch's include dir) shares type information with torch._C through its
// cross-module conduit, so the class below is a torch._C._distributed_c10d.Backend to Python.
//
// Transports:
//   shm   (default on one host) src/dist/shm_group.c: a memfd segment, futex waits, liveness.
//   gloo  (TORCHTPU_DIST_TRANSPORT=gloo, or ranks on several hosts): a ProcessGroupGloo made
//         by torchtpu.distributed over the same store; tpu tensors are handed to it as CPU
//         tensors aliasing their memory (tpu memory is host memory), so nothing is copied.
// Every call records a tpu event on the tensors' chips and queues the work on one of three
// worker threads (collectives, sends, receives: a send and a receive never wait for each
// other). The worker waits for the event, runs the transfer, and completes the Work and its
// future with the output tensors (DDP reads them) or with the error. Each collective adds its
// modelled ICI time (include/tpu/interconnect.h) to statistics read by torchtpu.distributed.
#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "native.h"
#include "tpu/collective.h"
#include "tpu/interconnect.h"
#include "tpu/runtime.h"
#include "tpu/shm_group.h"

namespace py = pybind11;
PYBIND11_DECLARE_HOLDER_TYPE(T, c10::intrusive_ptr<T>, true);

namespace torchtpu_dist {
namespace {

// ---- statistics ----------------------------------------------------------------------------

struct KindStats {
  uint64_t count = 0, bytes = 0;
  double modelled_s = 0, wall_s = 0;
};
std::mutex g_stats_mu;
KindStats g_stats[TPU_COLL_KIND_COUNT];

const tpu_chip_spec_t *chip_spec() {
  if (const tpu_runtime_config_t *c = tpu_runtime_config()) return c->chip;
  const tpu_chip_spec_t *s = nullptr;
  const char *name = std::getenv("TORCHTPU_CHIP");
  if (!name || !*name || tpu_chip_spec_find(name, &s) != TPU_OK) tpu_chip_spec_find("v5e", &s);
  return s;
}

// TORCHTPU_DIST_TOPOLOGY ("2x2", "4x4x4") when it has |n| chips, else a ring of n.
tpu_ici_topology_t group_topology(int n) {
  tpu_ici_topology_t t = tpu_ici_topology_ring(n);
  if (const char *env = std::getenv("TORCHTPU_DIST_TOPOLOGY")) {
    tpu_ici_topology_t p{};
    const char *s = env;
    while (*s && p.ndim < TPU_ICI_MAX_DIMS) {
      char *end = nullptr;
      long v = std::strtol(s, &end, 10);
      if (end == s || v < 1 || v > 4096) return t;
      p.dims[p.ndim++] = static_cast<int>(v);
      s = end;
      if (*s == 'x' || *s == 'X') s++;
      else if (*s) return t;
    }
    if (tpu_ici_topology_chips(&p) == n) return p;
  }
  return t;
}

void record_stats(tpu_collective_kind_t kind, uint64_t bytes, const tpu_ici_topology_t &topo,
                  double wall_s) {
  double modelled = 0;
  if (tpu_ici_collective_seconds(kind, bytes, chip_spec(), &topo, &modelled) != TPU_OK) modelled = 0;
  std::lock_guard<std::mutex> lock(g_stats_mu);
  KindStats &k = g_stats[kind];
  k.count++;
  k.bytes += bytes;
  k.modelled_s += modelled;
  k.wall_s += wall_s;
}

// ---- tensors ---------------------------------------------------------------------------------

// The C element type of a tensor for reductions; complex reduces as its real pairs.
tpu_dtype_t reduce_dtype(const at::Tensor &t) {
  try {
    return torchtpu::to_tpu_dtype(c10::toRealValueType(t.scalar_type()));
  } catch (const torchtpu::Unsupported &) {
    TORCH_CHECK(false, "tpu process group: reductions do not support dtype ", t.scalar_type());
  }
}

tpu_coll_op_t reduce_op(const c10d::ReduceOp &op, const at::Tensor &t) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return TPU_RED_SUM;
    case c10d::ReduceOp::AVG: return TPU_RED_AVG;
    case c10d::ReduceOp::PRODUCT: return TPU_RED_PRODUCT;
    case c10d::ReduceOp::MIN: return TPU_RED_MIN;
    case c10d::ReduceOp::MAX: return TPU_RED_MAX;
    case c10d::ReduceOp::BAND: return TPU_RED_BAND;
    case c10d::ReduceOp::BOR: return TPU_RED_BOR;
    case c10d::ReduceOp::BXOR: return TPU_RED_BXOR;
    default: break;
  }
  TORCH_CHECK(false, "tpu process group: ReduceOp ", static_cast<int>(op.op_),
              " is not supported (tensor dtype ", t.scalar_type(), ")");
}

void check_reducible(const at::Tensor &t, tpu_coll_op_t op) {
  tpu_dtype_t dt = reduce_dtype(t);
  TORCH_CHECK(!t.is_complex() || op == TPU_RED_SUM || op == TPU_RED_AVG,
              "tpu process group: ", tpu_coll_op_name(op), " is not defined for complex tensors");
  TORCH_CHECK(tpu_coll_check(dt, op) == TPU_OK, "tpu process group: ", tpu_status_message());
}

size_t reduce_count(const at::Tensor &t) {
  return static_cast<size_t>(t.numel()) * (t.is_complex() ? 2 : 1);
}

std::string label(const at::Tensor &t) {
  std::string s(c10::getDtypeNames(t.scalar_type()).first);  // "float32", as torch prints
  s += "[";
  for (int64_t i = 0; i < t.dim(); i++) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

void check_device(const at::Tensor &t) {
  TORCH_CHECK(t.device().is_cpu() || t.device().is_privateuseone(),
              "tpu process group: tensors must be on tpu or cpu, got ", t.device());
  TORCH_CHECK(!t.is_sparse(), "tpu process group: sparse tensors are not supported");
}

void check_same(const at::Tensor &a, const at::Tensor &b, const char *what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "tpu process group: ", what,
              ": dtypes differ (", a.scalar_type(), " and ", b.scalar_type(), ")");
  check_device(a);
  check_device(b);
}

// A CPU tensor aliasing the memory of |t| (tpu memory is host memory).
at::Tensor cpu_alias(const at::Tensor &t) {
  if (t.device().is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// Events recorded on the current streams of the tpu chips of |tensors|: the worker waits for
// them before it reads or writes, so the work queued before the call has run.
struct Ready {
  std::vector<std::shared_ptr<c10::Event>> events;
  void wait() const {
    for (const auto &e : events) e->synchronize();
  }
};

Ready ready_for(const std::vector<at::Tensor> &tensors) {
  Ready r;
  std::vector<int> seen;
  for (const auto &t : tensors) {
    if (!t.defined() || !t.device().is_privateuseone()) continue;
    int idx = t.device().index();
    bool dup = false;
    for (int s : seen) dup |= s == idx;
    if (dup) continue;
    seen.push_back(idx);
    auto *impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
    auto ev = std::make_shared<c10::Event>(c10::DeviceType::PrivateUse1);
    ev->record(impl->getStream(t.device()));
    r.events.push_back(std::move(ev));
  }
  return r;
}

[[noreturn]] void throw_status(tpu_status_t st) {
  std::string msg = tpu_status_message();
  if (st == TPU_ERR_UNAVAILABLE) throw c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, msg);
  TORCH_CHECK(false, msg);
}

void check_c(tpu_status_t st) {
  if (st != TPU_OK) throw_status(st);
}

// ---- work ----------------------------------------------------------------------------------

class TpuWork : public c10d::Work {
 public:
  TpuWork(int rank, c10d::OpType type, const char *title, std::vector<at::Tensor> outputs)
      : Work(rank, type, title),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

  void complete(std::exception_ptr error) {
    finish(error);
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Work of a coalesced block: done when every member is.
class CoalescedWork : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<c10::intrusive_ptr<TpuWork>> works)
      : Work(rank, c10d::OpType::COALESCED, "tpu:coalesced"),
        works_(std::move(works)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    if (works_.empty()) {
      finish(nullptr);
      future_->markCompleted(c10::IValue(std::vector<at::Tensor>()));
      return;
    }
    auto left = std::make_shared<std::atomic<size_t>>(works_.size());
    auto fut = future_;
    for (auto &w : works_) {
      w->getFuture()->addCallback([left, fut](c10::ivalue::Future &f) {
        if (f.hasError() && !fut->completed()) {
          try {
            fut->setErrorIfNeeded(f.exception_ptr());
          } catch (...) {
          }
        }
        if (--*left == 0 && !fut->completed())
          fut->markCompleted(c10::IValue(std::vector<at::Tensor>()));
      });
    }
  }
  bool isCompleted() override {
    for (auto &w : works_)
      if (!w->isCompleted()) return false;
    return true;
  }
  bool isSuccess() const override {
    for (auto &w : works_)
      if (!w->isSuccess()) return false;
    return true;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (auto &w : works_) w->wait(timeout);
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<c10::intrusive_ptr<TpuWork>> works_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// One worker thread running queued jobs in order.
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

// ---- the backend ---------------------------------------------------------------------------

class TpuBackend : public c10d::Backend {
 public:
  TpuBackend(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size, double timeout_s,
             c10::intrusive_ptr<c10d::Backend> gloo, std::string group_name)
      : Backend(rank, size),
        gloo_(std::move(gloo)),
        group_name_(std::move(group_name)),
        timeout_s_(timeout_s),
        topo_(group_topology(size)) {
    if (!gloo_) connect_shm(store);
    // Several processes share this host's cores: a waiter spinning to help its own
    // kernels would take a core from a peer that the collective waits for.
    if (size > 1) tpu_runtime_set_helping(false);
  }

  ~TpuBackend() override {
    // Workers first: they may still be using the group.
    coll_.reset();
    send_.reset();
    recv_.reset();
    tpu_shm_group_close(shm_);
  }

  const std::string getBackendName() const override { return "tpu"; }
  std::string transport() const { return gloo_ ? "gloo" : "shm"; }
  bool supportsCoalescing() const override { return true; }
  c10::intrusive_ptr<Options> getBackendOptions() override {
    auto opts = c10::make_intrusive<Options>(
        "tpu", std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
    opts->group_name = group_name_;
    return opts;
  }
  void setTimeout(std::chrono::milliseconds timeout) override {
    timeout_s_ = static_cast<double>(timeout.count()) / 1000.0;
    if (shm_) tpu_shm_group_set_timeout(shm_, timeout_s_);
  }
  void startCoalescing() override {
    std::lock_guard<std::mutex> lock(coalesce_mu_);
    coalescing_ = true;
    coalesced_.clear();
  }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    std::lock_guard<std::mutex> lock(coalesce_mu_);
    coalescing_ = false;
    auto w = c10::make_intrusive<CoalescedWork>(getRank(), std::move(coalesced_));
    coalesced_.clear();
    return w;
  }

  // -- collectives --

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override {
    for (auto &t : tensors) {
      check_device(t);
      check_reducible(t, reduce_op(opts.reduceOp, t));
    }
    auto op = opts.reduceOp;
    return enqueue(coll_.get(), c10d::OpType::ALLREDUCE, "tpu:all_reduce", tensors, tensors,
                   [this, tensors, op]() {
      for (const auto &t : tensors) {
        tpu_coll_op_t o = reduce_op(op, t);
        if (gloo_) {
          gloo_call_reduce(t, o, [&](std::vector<at::Tensor> &v, c10d::ReduceOp r) {
            c10d::AllreduceOptions g;
            g.reduceOp = r;
            return gloo_->allreduce(v, g);
          });
        } else {
          with_contiguous(t, [&](const at::Tensor &c) {
            tpu_shm_group_set_next_label(shm_, label(t).c_str());
            check_c(tpu_shm_all_reduce(shm_, c.data_ptr(), c.data_ptr(), reduce_count(c),
                                       reduce_dtype(c), o));
          });
        }
        stat(TPU_COLL_ALL_REDUCE, t.nbytes());
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override {
    c10d::AllreduceOptions o;
    o.reduceOp = opts.reduceOp;
    return allreduce(tensors, o);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override {
    for (auto &t : tensors) check_device(t);
    int root = static_cast<int>(opts.rootRank);
    TORCH_CHECK(root >= 0 && root < getSize(), "tpu process group: broadcast root ", root,
                " is not a rank of this group of ", getSize());
    return enqueue(coll_.get(), c10d::OpType::BROADCAST, "tpu:broadcast", tensors, tensors,
                   [this, tensors, root]() {
      for (const auto &t : tensors) {
        if (gloo_) {
          std::vector<at::Tensor> v{cpu_alias(t)};
          c10d::BroadcastOptions g;
          g.rootRank = root;
          gloo_->broadcast(v, g)->wait();
        } else {
          with_contiguous(t, [&](const at::Tensor &c) {
            tpu_shm_group_set_next_label(shm_, label(t).c_str());
            check_c(tpu_shm_broadcast(shm_, c.data_ptr(), c.nbytes(), root));
          });
        }
        stat(TPU_COLL_BROADCAST, t.nbytes());
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &out, at::Tensor &in,
                                                 const c10d::AllgatherOptions &) override {
    check_same(out, in, "all_gather_into_tensor");
    TORCH_CHECK(out.numel() == in.numel() * getSize(),
                "tpu process group: all_gather_into_tensor: output has ", out.numel(),
                " elements, expected ", getSize(), " x ", in.numel());
    std::vector<at::Tensor> ins{in}, outs{out};
    return enqueue(coll_.get(), c10d::OpType::_ALLGATHER_BASE, "tpu:all_gather_into_tensor",
                   ins, outs, [this, in, out]() { gather_one(in, out); });
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor> &outs, std::vector<at::Tensor> &ins,
      const c10d::AllgatherOptions &) override {
    TORCH_CHECK(outs.size() == ins.size(), "tpu process group: all_gather coalesced: ",
                outs.size(), " outputs for ", ins.size(), " inputs");
    for (size_t i = 0; i < ins.size(); i++) {
      check_same(outs[i], ins[i], "all_gather_into_tensor");
      TORCH_CHECK(outs[i].numel() == ins[i].numel() * getSize(),
                  "tpu process group: all_gather_into_tensor: output has ", outs[i].numel(),
                  " elements, expected ", getSize(), " x ", ins[i].numel());
    }
    return enqueue(coll_.get(), c10d::OpType::COALESCED, "tpu:all_gather_coalesced", ins, outs,
                   [this, ins, outs]() {
      for (size_t i = 0; i < ins.size(); i++) gather_one(ins[i], outs[i]);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "tpu process group: all_gather takes one input and one output list per process");
    const at::Tensor in = inputs[0];
    std::vector<at::Tensor> outs = outputs[0];
    TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "tpu process group: all_gather: ",
                outs.size(), " output tensors for a group of ", getSize());
    for (auto &o : outs) {
      check_same(o, in, "all_gather");
      TORCH_CHECK(o.numel() == in.numel(), "tpu process group: all_gather: output ",
                  label(o), " does not match input ", label(in));
    }
    std::vector<at::Tensor> ins{in};
    return enqueue(coll_.get(), c10d::OpType::ALLGATHER, "tpu:all_gather", ins, outs,
                   [this, in, outs]() {
      at::Tensor flat = at::empty({getSize() * in.numel()}, in.options().device(at::kCPU));
      gather_one(in, flat);
      auto parts = flat.chunk(getSize());
      for (int r = 0; r < getSize(); r++) cpu_alias(outs[r]).copy_(parts[r].view(outs[r].sizes()));
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>> &output_lists, std::vector<at::Tensor> &inputs,
      const c10d::AllgatherOptions &opts) override {
    TORCH_CHECK(output_lists.size() == inputs.size(), "tpu process group: all_gather_coalesced: ",
                output_lists.size(), " output lists for ", inputs.size(), " inputs");
    std::vector<c10::intrusive_ptr<TpuWork>> works;
    for (size_t i = 0; i < inputs.size(); i++) {
      std::vector<std::vector<at::Tensor>> o{output_lists[i]};
      std::vector<at::Tensor> in{inputs[i]};
      works.push_back(c10::static_intrusive_pointer_cast<TpuWork>(allgather(o, in, opts)));
    }
    return c10::make_intrusive<CoalescedWork>(getRank(), std::move(works));
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor &out, at::Tensor &in, const c10d::ReduceScatterOptions &opts) override {
    check_same(out, in, "reduce_scatter_tensor");
    check_reducible(in, reduce_op(opts.reduceOp, in));
    TORCH_CHECK(in.numel() == out.numel() * getSize(),
                "tpu process group: reduce_scatter_tensor: input has ", in.numel(),
                " elements, expected ", getSize(), " x ", out.numel());
    std::vector<at::Tensor> ins{in}, outs{out};
    auto op = opts.reduceOp;
    return enqueue(coll_.get(), c10d::OpType::_REDUCE_SCATTER_BASE, "tpu:reduce_scatter_tensor",
                   ins, outs, [this, in, out, op]() { scatter_one(in, out, op); });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor> &outs, std::vector<at::Tensor> &ins,
      const c10d::ReduceScatterOptions &opts) override {
    TORCH_CHECK(outs.size() == ins.size(), "tpu process group: reduce_scatter coalesced: ",
                outs.size(), " outputs for ", ins.size(), " inputs");
    for (size_t i = 0; i < ins.size(); i++) {
      check_same(outs[i], ins[i], "reduce_scatter_tensor");
      check_reducible(ins[i], reduce_op(opts.reduceOp, ins[i]));
      TORCH_CHECK(ins[i].numel() == outs[i].numel() * getSize(),
                  "tpu process group: reduce_scatter_tensor: input has ", ins[i].numel(),
                  " elements, expected ", getSize(), " x ", outs[i].numel());
    }
    auto op = opts.reduceOp;
    return enqueue(coll_.get(), c10d::OpType::COALESCED, "tpu:reduce_scatter_coalesced", ins,
                   outs, [this, ins, outs, op]() {
      for (size_t i = 0; i < ins.size(); i++) scatter_one(ins[i], outs[i], op);
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override {
    TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
                "tpu process group: reduce_scatter takes one output and one input list");
    at::Tensor out = outputs[0];
    std::vector<at::Tensor> ins = inputs[0];
    TORCH_CHECK(static_cast<int>(ins.size()) == getSize(), "tpu process group: reduce_scatter: ",
                ins.size(), " input tensors for a group of ", getSize());
    for (auto &i : ins) {
      check_same(out, i, "reduce_scatter");
      TORCH_CHECK(i.numel() == out.numel(), "tpu process group: reduce_scatter: input ",
                  label(i), " does not match output ", label(out));
    }
    check_reducible(out, reduce_op(opts.reduceOp, out));
    auto op = opts.reduceOp;
    std::vector<at::Tensor> outs{out};
    return enqueue(coll_.get(), c10d::OpType::REDUCE_SCATTER, "tpu:reduce_scatter", ins, outs,
                   [this, ins, out, op]() {
      std::vector<at::Tensor> aliases;
      for (auto &i : ins) aliases.push_back(cpu_alias(i).reshape({-1}));
      at::Tensor flat = at::cat(aliases);
      scatter_one(flat, out, op);
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &out, at::Tensor &in,
                                               std::vector<int64_t> &out_splits,
                                               std::vector<int64_t> &in_splits,
                                               const c10d::AllToAllOptions &) override {
    check_same(out, in, "all_to_all_single");
    auto send = split_bytes(in, in_splits, "input");
    auto recv = split_bytes(out, out_splits, "output");
    std::vector<at::Tensor> ins{in}, outs{out};
    return enqueue(coll_.get(), c10d::OpType::ALLTOALL_BASE, "tpu:all_to_all_single", ins, outs,
                   [this, in, out, out_splits, in_splits, send, recv]() {
      if (gloo_) {
        at::Tensor o = cpu_alias(out), i = cpu_alias(in);
        std::vector<int64_t> os = out_splits, is = in_splits;
        gloo_->alltoall_base(o, i, os, is, c10d::AllToAllOptions())->wait();
      } else {
        with_contiguous(out, [&](const at::Tensor &oc) {
          at::Tensor ic = in.contiguous();
          check_c(tpu_shm_all_to_all(shm_, ic.data_ptr(), send.first.data(), send.second.data(),
                                     oc.data_ptr(), recv.first.data(), recv.second.data()));
        });
      }
      stat(TPU_COLL_ALL_TO_ALL, in.nbytes() * static_cast<uint64_t>(getSize()));
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outs,
                                          std::vector<at::Tensor> &ins,
                                          const c10d::AllToAllOptions &) override {
    TORCH_CHECK(static_cast<int>(outs.size()) == getSize() &&
                    static_cast<int>(ins.size()) == getSize(),
                "tpu process group: all_to_all needs one input and one output tensor per rank");
    for (int r = 0; r < getSize(); r++) check_same(outs[r], ins[r], "all_to_all");
    // Staged through flat CPU buffers with per-rank sizes.
    std::vector<int64_t> in_splits, out_splits;
    for (int r = 0; r < getSize(); r++) {
      in_splits.push_back(ins[r].numel());
      out_splits.push_back(outs[r].numel());
    }
    auto work_ins = ins, work_outs = outs;
    return enqueue(coll_.get(), c10d::OpType::ALLTOALL, "tpu:all_to_all", ins, outs,
                   [this, work_ins, work_outs, in_splits, out_splits]() mutable {
      std::vector<at::Tensor> parts;
      for (auto &t : work_ins) parts.push_back(cpu_alias(t).reshape({-1}));
      at::Tensor in = at::cat(parts);
      int64_t total = 0;
      for (auto s : out_splits) total += s;
      at::Tensor out = at::empty({total}, in.options());
      run_all_to_all_flat(out, in, out_splits, in_splits);
      int64_t off = 0;
      for (size_t r = 0; r < work_outs.size(); r++) {
        cpu_alias(work_outs[r]).copy_(out.narrow(0, off, out_splits[r]).view(work_outs[r].sizes()));
        off += out_splits[r];
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override {
    std::vector<at::Tensor> none;
    return enqueue(coll_.get(), c10d::OpType::BARRIER, "tpu:barrier", none, none, [this]() {
      if (gloo_)
        gloo_->barrier(c10d::BarrierOptions())->wait();
      else
        check_c(tpu_shm_barrier(shm_));
      stat(TPU_COLL_BARRIER, 0);
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override {
    // An all_reduce into a temporary; only the root keeps the result.
    for (auto &t : tensors) {
      check_device(t);
      check_reducible(t, reduce_op(opts.reduceOp, t));
    }
    int root = static_cast<int>(opts.rootRank);
    auto op = opts.reduceOp;
    return enqueue(coll_.get(), c10d::OpType::REDUCE, "tpu:reduce", tensors, tensors,
                   [this, tensors, root, op]() {
      for (const auto &t : tensors) {
        at::Tensor tmp = cpu_alias(t).clone(at::MemoryFormat::Contiguous);
        if (gloo_) {
          gloo_call_reduce(tmp, reduce_op(op, t), [&](std::vector<at::Tensor> &v, c10d::ReduceOp r) {
            c10d::AllreduceOptions g;
            g.reduceOp = r;
            return gloo_->allreduce(v, g);
          });
        } else {
          tpu_shm_group_set_next_label(shm_, label(t).c_str());
          check_c(tpu_shm_all_reduce(shm_, tmp.data_ptr(), tmp.data_ptr(), reduce_count(tmp),
                                     reduce_dtype(tmp), reduce_op(op, t)));
        }
        if (getRank() == root) cpu_alias(t).copy_(tmp);
        stat(TPU_COLL_ALL_REDUCE, t.nbytes());
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts) override {
    TORCH_CHECK(inputs.size() == 1, "tpu process group: gather takes one input tensor");
    at::Tensor in = inputs[0];
    check_device(in);
    int root = static_cast<int>(opts.rootRank);
    std::vector<at::Tensor> outs = getRank() == root && !outputs.empty() ? outputs[0]
                                                                        : std::vector<at::Tensor>();
    TORCH_CHECK(getRank() != root || static_cast<int>(outs.size()) == getSize(),
                "tpu process group: gather: the root needs ", getSize(), " output tensors");
    std::vector<at::Tensor> ins{in};
    return enqueue(coll_.get(), c10d::OpType::GATHER, "tpu:gather", ins, outs,
                   [this, in, outs]() {
      at::Tensor flat = at::empty({getSize() * in.numel()}, in.options().device(at::kCPU));
      gather_one(in, flat);
      auto parts = flat.chunk(getSize());
      for (size_t r = 0; r < outs.size(); r++) cpu_alias(outs[r]).copy_(parts[r].view(outs[r].sizes()));
    });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override {
    TORCH_CHECK(outputs.size() == 1, "tpu process group: scatter takes one output tensor");
    at::Tensor out = outputs[0];
    check_device(out);
    int root = static_cast<int>(opts.rootRank);
    std::vector<at::Tensor> ins = getRank() == root && !inputs.empty() ? inputs[0]
                                                                      : std::vector<at::Tensor>();
    TORCH_CHECK(getRank() != root || static_cast<int>(ins.size()) == getSize(),
                "tpu process group: scatter: the root needs ", getSize(), " input tensors");
    std::vector<at::Tensor> outs{out};
    return enqueue(coll_.get(), c10d::OpType::SCATTER, "tpu:scatter", ins, outs,
                   [this, ins, out, root]() {
      // The root broadcasts the concatenation; every rank keeps its part.
      at::Tensor flat = at::empty({getSize() * out.numel()}, out.options().device(at::kCPU));
      if (getRank() == root) {
        std::vector<at::Tensor> parts;
        for (auto &t : ins) parts.push_back(cpu_alias(t).reshape({-1}));
        flat.copy_(at::cat(parts));
      }
      if (gloo_) {
        std::vector<at::Tensor> v{flat};
        c10d::BroadcastOptions g;
        g.rootRank = root;
        gloo_->broadcast(v, g)->wait();
      } else {
        tpu_shm_group_set_next_label(shm_, label(flat).c_str());
        check_c(tpu_shm_broadcast(shm_, flat.data_ptr(), flat.nbytes(), root));
      }
      cpu_alias(out).copy_(flat.chunk(getSize())[getRank()].view(out.sizes()));
      stat(TPU_COLL_BROADCAST, flat.nbytes());
    });
  }

  // -- point to point --

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst,
                                      int tag) override {
    TORCH_CHECK(tensors.size() == 1, "tpu process group: send takes one tensor");
    check_device(tensors[0]);
    check_peer(dst, "send");
    at::Tensor t = tensors[0];
    return enqueue(send_.get(), c10d::OpType::SEND, "tpu:send", tensors, tensors,
                   [this, t, dst, tag]() {
      if (gloo_) {
        std::vector<at::Tensor> v{cpu_alias(t).contiguous()};
        gloo_->send(v, dst, tag)->wait();
      } else {
        at::Tensor c = cpu_alias(t).contiguous();
        check_c(tpu_shm_send(shm_, c.data_ptr(), c.nbytes(), dst, tag));
      }
      stat(TPU_COLL_SEND_RECV, t.nbytes());
    });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src,
                                      int tag) override {
    TORCH_CHECK(tensors.size() == 1, "tpu process group: recv takes one tensor");
    check_device(tensors[0]);
    check_peer(src, "recv");
    at::Tensor t = tensors[0];
    return enqueue(recv_.get(), c10d::OpType::RECV, "tpu:recv", tensors, tensors,
                   [this, t, src, tag]() {
      with_contiguous(t, [&](const at::Tensor &c) {
        if (gloo_) {
          std::vector<at::Tensor> v{c};
          gloo_->recv(v, src, tag)->wait();
        } else {
          check_c(tpu_shm_recv(shm_, c.data_ptr(), c.nbytes(), src, tag));
        }
      });
    });
  }

 private:
  void connect_shm(const c10::intrusive_ptr<c10d::Store> &store) {
    tpu_shm_group_options_t opts{};
    opts.timeout_s = timeout_s_;
    if (const char *s = std::getenv("TORCHTPU_DIST_SLOT_BYTES")) opts.slot_bytes = std::strtoull(s, nullptr, 10);
    const std::string key = "torchtpu/shm_segment";
    tpu_status_t st;
    if (getRank() == 0) {
      int fd = -1;
      st = tpu_shm_group_create(getSize(), &opts, &shm_, &fd);
      std::string value = st == TPU_OK ? std::to_string(getpid()) + ":" + std::to_string(fd)
                                       : std::string("error:") + tpu_status_message();
      store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
      if (st != TPU_OK) throw_status(st);
    } else {
      std::vector<uint8_t> raw = store->get(key);
      std::string value(raw.begin(), raw.end());
      TORCH_CHECK(value.rfind("error:", 0) != 0, "tpu process group: rank 0 could not create the "
                  "shared-memory segment: ", value.substr(6));
      int pid = 0, fd = -1;
      TORCH_CHECK(std::sscanf(value.c_str(), "%d:%d", &pid, &fd) == 2,
                  "tpu process group: bad segment address '", value, "' in the store");
      st = tpu_shm_group_attach(pid, fd, getRank(), getSize(), &opts, &shm_);
      if (st != TPU_OK) throw_status(st);
    }
    st = tpu_shm_group_seal(shm_);
    if (st != TPU_OK) throw_status(st);
  }

  void check_peer(int peer, const char *what) {
    TORCH_CHECK(peer >= 0 && peer < getSize() && peer != getRank(), "tpu process group: ", what,
                ": peer rank ", peer, " is not another rank of this group of ", getSize());
  }

  // Runs fn on a contiguous version of t (t itself when contiguous) and copies back.
  template <typename Fn>
  void with_contiguous(const at::Tensor &t, Fn fn) {
    at::Tensor a = cpu_alias(t);
    if (a.is_contiguous()) {
      fn(a);
      return;
    }
    at::Tensor c = a.contiguous();
    fn(c);
    a.copy_(c);
  }

  // gloo has no AVG: SUM, then divide.
  template <typename Call>
  void gloo_call_reduce(const at::Tensor &t, tpu_coll_op_t op, Call call) {
    at::Tensor a = cpu_alias(t);
    std::vector<at::Tensor> v{a};
    c10d::ReduceOp r = op == TPU_RED_AVG ? c10d::ReduceOp(c10d::ReduceOp::SUM)
                                         : c10d::ReduceOp(static_cast<c10d::ReduceOp::RedOpType>(
                                               op == TPU_RED_SUM ? c10d::ReduceOp::SUM
                                               : op == TPU_RED_PRODUCT ? c10d::ReduceOp::PRODUCT
                                               : op == TPU_RED_MIN ? c10d::ReduceOp::MIN
                                               : op == TPU_RED_MAX ? c10d::ReduceOp::MAX
                                               : op == TPU_RED_BAND ? c10d::ReduceOp::BAND
                                               : op == TPU_RED_BOR ? c10d::ReduceOp::BOR
                                                                   : c10d::ReduceOp::BXOR));
    call(v, r)->wait();
    if (op == TPU_RED_AVG) {
      if (a.is_floating_point() || a.is_complex())
        a.div_(getSize());
      else
        a.copy_(at::div(a, getSize(), "trunc"));
    }
  }

  void gather_one(const at::Tensor &in, const at::Tensor &out) {
    if (gloo_) {
      at::Tensor i = cpu_alias(in).contiguous().view({-1});
      with_contiguous(out, [&](const at::Tensor &oc) {
        at::Tensor o = oc.view({-1});
        gloo_->_allgather_base(o, i, c10d::AllgatherOptions())->wait();
      });
    } else {
      at::Tensor ic = cpu_alias(in).contiguous();
      with_contiguous(out, [&](const at::Tensor &oc) {
        tpu_shm_group_set_next_label(shm_, label(in).c_str());
        check_c(tpu_shm_all_gather(shm_, ic.data_ptr(), oc.data_ptr(), ic.nbytes()));
      });
    }
    stat(TPU_COLL_ALL_GATHER, out.nbytes());
  }

  void scatter_one(const at::Tensor &in, const at::Tensor &out, const c10d::ReduceOp &op) {
    tpu_coll_op_t o = reduce_op(op, out);
    if (gloo_) {
      at::Tensor i = cpu_alias(in).contiguous().view({-1});
      with_contiguous(out, [&](const at::Tensor &oc) {
        at::Tensor a = oc.view({-1});
        c10d::ReduceScatterOptions g;
        g.reduceOp = o == TPU_RED_AVG ? c10d::ReduceOp(c10d::ReduceOp::SUM) : op;
        gloo_->_reduce_scatter_base(a, i, g)->wait();
        if (o == TPU_RED_AVG) {
          if (a.is_floating_point() || a.is_complex()) a.div_(getSize());
          else a.copy_(at::div(a, getSize(), "trunc"));
        }
      });
    } else {
      at::Tensor ic = cpu_alias(in).contiguous();
      with_contiguous(out, [&](const at::Tensor &oc) {
        tpu_shm_group_set_next_label(shm_, label(in).c_str());
        check_c(tpu_shm_reduce_scatter(shm_, ic.data_ptr(), oc.data_ptr(), reduce_count(oc),
                                       reduce_dtype(oc), o));
      });
    }
    stat(TPU_COLL_REDUCE_SCATTER, in.nbytes());
  }

  // Byte sizes and offsets of the rows of dim 0 going to / coming from each rank.
  std::pair<std::vector<size_t>, std::vector<size_t>> split_bytes(
      const at::Tensor &t, const std::vector<int64_t> &splits, const char *what) {
    int64_t rows = t.dim() ? t.size(0) : 1;
    size_t row_bytes = rows ? t.nbytes() / static_cast<size_t>(rows) : 0;
    std::vector<size_t> bytes(getSize()), offs(getSize());
    if (splits.empty()) {
      TORCH_CHECK(rows % getSize() == 0, "tpu process group: all_to_all_single: ", what,
                  " dim 0 (", rows, ") is not divisible by the group size ", getSize());
      for (int r = 0; r < getSize(); r++) bytes[r] = row_bytes * static_cast<size_t>(rows / getSize());
    } else {
      TORCH_CHECK(static_cast<int>(splits.size()) == getSize(),
                  "tpu process group: all_to_all_single: ", splits.size(), " ", what,
                  " split sizes for a group of ", getSize());
      int64_t sum = 0;
      for (int r = 0; r < getSize(); r++) {
        TORCH_CHECK(splits[r] >= 0, "tpu process group: negative split size");
        sum += splits[r];
        bytes[r] = row_bytes * static_cast<size_t>(splits[r]);
      }
      TORCH_CHECK(sum == rows, "tpu process group: all_to_all_single: ", what,
                  " split sizes sum to ", sum, " but dim 0 is ", rows);
    }
    size_t off = 0;
    for (int r = 0; r < getSize(); r++) {
      offs[r] = off;
      off += bytes[r];
    }
    return {bytes, offs};
  }

  void run_all_to_all_flat(at::Tensor &out, at::Tensor &in, std::vector<int64_t> out_splits,
                           std::vector<int64_t> in_splits) {
    if (gloo_) {
      gloo_->alltoall_base(out, in, out_splits, in_splits, c10d::AllToAllOptions())->wait();
    } else {
      auto send = split_bytes(in, in_splits, "input");
      auto recv = split_bytes(out, out_splits, "output");
      check_c(tpu_shm_all_to_all(shm_, in.data_ptr(), send.first.data(), send.second.data(),
                                 out.data_ptr(), recv.first.data(), recv.second.data()));
    }
    stat(TPU_COLL_ALL_TO_ALL, in.nbytes() * static_cast<uint64_t>(getSize()));
  }

  void stat(tpu_collective_kind_t kind, uint64_t bytes) {
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - job_start_).count();
    record_stats(kind, bytes, topo_, wall);
  }

  c10::intrusive_ptr<c10d::Work> enqueue(Worker *worker, c10d::OpType type, const char *title,
                                         const std::vector<at::Tensor> &inputs,
                                         const std::vector<at::Tensor> &outputs,
                                         std::function<void()> body) {
    auto work = c10::make_intrusive<TpuWork>(getRank(), type, title, outputs);
    std::vector<at::Tensor> all = inputs;
    all.insert(all.end(), outputs.begin(), outputs.end());
    Ready ready = ready_for(all);
    worker->push([this, work, ready, body = std::move(body)]() {
      std::exception_ptr error;
      try {
        ready.wait();
        job_start_ = std::chrono::steady_clock::now();
        body();
      } catch (...) {
        error = std::current_exception();
      }
      work->complete(error);
    });
    {
      std::lock_guard<std::mutex> lock(coalesce_mu_);
      if (coalescing_) coalesced_.push_back(work);
    }
    return work;
  }

  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::string group_name_;
  double timeout_s_;
  tpu_ici_topology_t topo_;
  tpu_shm_group_t *shm_ = nullptr;
  // Set by each worker thread for its own job (stat() runs on the same thread).
  static thread_local std::chrono::steady_clock::time_point job_start_;
  std::unique_ptr<Worker> coll_ = std::make_unique<Worker>();
  std::unique_ptr<Worker> send_ = std::make_unique<Worker>();
  std::unique_ptr<Worker> recv_ = std::make_unique<Worker>();
  std::mutex coalesce_mu_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<TpuWork>> coalesced_;
};

thread_local std::chrono::steady_clock::time_point TpuBackend::job_start_;

// ---- collectives across the chips of this process --------------------------------------------

tpu_dtype_t dtype_from_name(const std::string &name) {
  static const std::pair<const char *, tpu_dtype_t> kNames[] = {
      {"torch.float32", TPU_F32}, {"torch.float64", TPU_F64}, {"torch.float16", TPU_F16},
      {"torch.bfloat16", TPU_BF16}, {"torch.int64", TPU_I64},  {"torch.int32", TPU_I32},
      {"torch.int16", TPU_I16},   {"torch.int8", TPU_I8},     {"torch.uint8", TPU_U8},
      {"torch.bool", TPU_BOOL}};
  for (const auto &p : kNames)
    if (name == p.first) return p.second;
  throw py::type_error("chip collectives do not support dtype " + name);
}

tpu_ici_topology_t chips_topology(int n) {
  const tpu_runtime_config_t *c = tpu_runtime_config();
  if (c && c->chip_count == n) {
    tpu_ici_topology_t t{};
    t.ndim = c->topology_ndim;
    for (int i = 0; i < t.ndim; i++) t.dims[i] = c->topology[i];
    return t;
  }
  return tpu_ici_topology_ring(n);
}

void check_py(tpu_status_t st) {
  if (st == TPU_ERR_OUT_OF_RANGE) throw py::index_error(tpu_status_message());
  if (st == TPU_ERR_INVALID_ARGUMENT) throw py::value_error(tpu_status_message());
  if (st != TPU_OK) throw std::runtime_error(tpu_status_message());
}

template <typename T>
std::vector<T *> as_ptrs(const std::vector<uintptr_t> &v) {
  std::vector<T *> out;
  for (uintptr_t p : v) out.push_back(reinterpret_cast<T *>(p));
  return out;
}

}  // namespace

void define_module(py::module_ &m) {
  py::class_<TpuBackend, c10d::Backend, c10::intrusive_ptr<TpuBackend>>(m, "TpuBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                       double timeout_s, std::optional<c10::intrusive_ptr<c10d::Backend>> gloo,
                       const std::string &group_name) {
             return c10::make_intrusive<TpuBackend>(store, rank, size, timeout_s,
                                                    gloo ? *gloo : nullptr, group_name);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
           py::arg("gloo") = py::none(), py::arg("group_name") = "",
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("transport", &TpuBackend::transport);

  m.def("stats", []() {
    py::dict out;
    std::lock_guard<std::mutex> lock(g_stats_mu);
    for (int k = 0; k < TPU_COLL_KIND_COUNT; k++) {
      const KindStats &s = g_stats[k];
      py::dict d;
      d["count"] = s.count;
      d["bytes"] = s.bytes;
      d["modelled_seconds"] = s.modelled_s;
      d["wall_seconds"] = s.wall_s;
      out[tpu_collective_kind_name(static_cast<tpu_collective_kind_t>(k))] = d;
    }
    return out;
  });
  m.def("reset_stats", []() {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    for (auto &s : g_stats) s = KindStats();
  });
  m.def("collective_seconds", [](const std::string &kind, uint64_t bytes, const std::string &chip,
                                 std::vector<int> dims) {
    int k = 0;
    while (k < TPU_COLL_KIND_COUNT &&
           kind != tpu_collective_kind_name(static_cast<tpu_collective_kind_t>(k)))
      k++;
    if (k == TPU_COLL_KIND_COUNT) throw py::value_error("unknown collective kind '" + kind + "'");
    const tpu_chip_spec_t *spec = chip.empty() ? chip_spec() : nullptr;
    if (!spec) check_py(tpu_chip_spec_find(chip.c_str(), &spec));
    if (dims.empty() || dims.size() > TPU_ICI_MAX_DIMS)
      throw py::value_error("topology needs 1 to 3 dimensions");
    tpu_ici_topology_t t{};
    t.ndim = static_cast<int>(dims.size());
    for (size_t i = 0; i < dims.size(); i++) t.dims[i] = dims[i];
    double s = 0;
    check_py(tpu_ici_collective_seconds(static_cast<tpu_collective_kind_t>(k), bytes, spec, &t, &s));
    return s;
  });
  // Chip collectives: buffers as data pointers (the Python side synchronized the chips).
  m.def("all_reduce_chips", [](std::vector<uintptr_t> ptrs, size_t count, const std::string &dtype,
                               int op) {
    auto bufs = as_ptrs<void>(ptrs);
    tpu_dtype_t dt = dtype_from_name(dtype);
    auto t0 = std::chrono::steady_clock::now();
    check_py(tpu_local_all_reduce(bufs.data(), static_cast<int>(bufs.size()), count, dt,
                                  static_cast<tpu_coll_op_t>(op)));
    record_stats(TPU_COLL_ALL_REDUCE, count * tpu_dtype_size(dt), chips_topology(static_cast<int>(bufs.size())),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
  m.def("broadcast_chips", [](std::vector<uintptr_t> ptrs, size_t bytes, int root) {
    auto bufs = as_ptrs<void>(ptrs);
    auto t0 = std::chrono::steady_clock::now();
    check_py(tpu_local_broadcast(bufs.data(), static_cast<int>(bufs.size()), bytes, root));
    record_stats(TPU_COLL_BROADCAST, bytes, chips_topology(static_cast<int>(bufs.size())),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
  m.def("all_gather_chips", [](std::vector<uintptr_t> ins, std::vector<uintptr_t> outs,
                               size_t bytes) {
    auto i = as_ptrs<const void>(ins);
    auto o = as_ptrs<void>(outs);
    auto t0 = std::chrono::steady_clock::now();
    check_py(tpu_local_all_gather(i.data(), o.data(), static_cast<int>(i.size()), bytes));
    record_stats(TPU_COLL_ALL_GATHER, bytes * i.size(), chips_topology(static_cast<int>(i.size())),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
  m.def("reduce_scatter_chips", [](std::vector<uintptr_t> ins, std::vector<uintptr_t> outs,
                                   size_t count, const std::string &dtype, int op) {
    auto i = as_ptrs<const void>(ins);
    auto o = as_ptrs<void>(outs);
    tpu_dtype_t dt = dtype_from_name(dtype);
    auto t0 = std::chrono::steady_clock::now();
    check_py(tpu_local_reduce_scatter(i.data(), o.data(), static_cast<int>(i.size()), count, dt,
                                      static_cast<tpu_coll_op_t>(op)));
    record_stats(TPU_COLL_REDUCE_SCATTER, count * tpu_dtype_size(dt) * i.size(),
                 chips_topology(static_cast<int>(i.size())),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
}

}  // namespace torchtpu_dist

// The module torchtpu._C._dist_module() returns (see module.c).
extern "C" PyObject *tpu_dist_make_module(void) {
  try {
    static PyModuleDef def = {PyModuleDef_HEAD_INIT, "torchtpu._C._dist", nullptr, -1, nullptr,
                              nullptr, nullptr, nullptr, nullptr};
    static PyObject *cached = nullptr;
    if (cached) {
      Py_INCREF(cached);
      return cached;
    }
    py::module_ m = py::module_::create_extension_module("torchtpu._C._dist", nullptr, &def);
    torchtpu_dist::define_module(m);
    cached = m.ptr();
    Py_INCREF(cached);  // kept for the process
    Py_INCREF(cached);
    return cached;
  } catch (py::error_already_set &e) {
    e.restore();
    return nullptr;
  } catch (const std::exception &e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}
