// cost_hooks.h: the few calls the eager engine and the allocator make into the cost model
// and the memory attribution (cost.cpp). Each hook is one line at its call site, marked
// "cost hook", so the engine stays readable.
//
//   - on_compile(exe, graph, name): costs the graph on every generation once, at compile
//     time (include/tpu/cost.h), and remembers the cost under the executable;
//   - on_launch(device, exe): advances the chip's modelled clocks by the executable's cost;
//   - OpScope: names the op running on this thread, so that allocations made for it can
//     be attributed in out-of-memory reports; ShapeScope: the shape of the tensor being
//     allocated (set by the empty/empty_strided kernels).
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

extern "C" {
#include "tpu/caching_allocator.h"
#include "tpu/compiler.h"
#include "tpu/ir.h"
}

namespace torchtpu::cost {

void on_compile(const tpu_executable_t *exe, const tpu_graph_t *g, const char *name);
void on_launch(int device, const tpu_executable_t *exe);

struct AllocContext {
  const char *op = nullptr;            // lives for the process (an op schema's name)
  const int64_t *sizes = nullptr;      // valid while a ShapeScope is open
  size_t rank = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  // The last allocation made outside any op (a composite kernel's empty() before the out=
  // kernel that fills it): the next op on this thread names it. The allocator lives as
  // long as the runtime, which the bridge never shuts down.
  const void *pending = nullptr;
  tpu_caching_allocator_t *pending_allocator = nullptr;
};
AllocContext &alloc_context();         // this thread's
void name_pending(AllocContext &ctx, const char *op);  // tags ctx.pending with |op|

// Names the op that runs on this thread while in scope (unless an outer scope named one).
struct OpScope {
  explicit OpScope(const char *op) : ctx_(alloc_context()), saved_(ctx_.op) {
    if (saved_) return;
    ctx_.op = op;
    if (ctx_.pending) name_pending(ctx_, op);
  }
  ~OpScope() { ctx_.op = saved_; }
  OpScope(const OpScope &) = delete;
  OpScope &operator=(const OpScope &) = delete;

 private:
  AllocContext &ctx_;
  const char *saved_;
};

// The tensor an allocation is for, while in scope.
struct ShapeScope {
  ShapeScope(c10::IntArrayRef sizes, c10::ScalarType dtype) : ctx_(alloc_context()) {
    ctx_.sizes = sizes.data();
    ctx_.rank = sizes.size();
    ctx_.dtype = dtype;
  }
  ~ShapeScope() {
    ctx_.sizes = nullptr;
    ctx_.rank = 0;
  }
  ShapeScope(const ShapeScope &) = delete;
  ShapeScope &operator=(const ShapeScope &) = delete;

 private:
  AllocContext &ctx_;
};

}  // namespace torchtpu::cost
