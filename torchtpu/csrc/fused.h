// fused.h: the pending graph of fused eager mode (TORCHTPU_EAGER=fused) and of compile
// mode's capture. Instead of launching each op, the engine records it: the op's cached
// one-op graph is inlined into a pending graph per chip, its inputs bound to values the
// pending graph already computes (or to new parameters), its results written to tensors
// whose memory is filled when the pending graph runs. The pending graph is compiled
// through the same compiler and cache as everything else and run when a value is needed
// (a flush): .item(), .cpu(), a CPU fallback op, synchronize(), an optimizer step, a size
// limit, or a view the IR cannot express.
//
// Tensors are tracked per storage. A storage the pending graph writes holds its latest
// value and the geometry (offset, sizes, strides, dtype) it was written with; reads with
// the same geometry, or a strided sub-view of it, use the value; anything else flushes
// first. Storages read but not written become parameters (the tensor is kept alive until
// the run is queued); written storages are held weakly, so a result that dies before the
// flush is never written to memory at all.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "native.h"

namespace torchtpu {

// True if ops on chip |index| are recorded (fused mode, or a compile capture).
bool recording(c10::DeviceIndex index);
// True while a compile capture or torchtpu.export records chip |index|'s ops: a value
// read on the host then cuts the capture (or fails the export).
bool capturing(c10::DeviceIndex index);

// One recorded op's random-number use: the last two inputs are its (seed, offset).
struct RngUse {
  bool used = false;
  std::optional<at::Generator> gen;
  int64_t count = 0;
};

// A one-op graph as record_op inlines it: the graph (never changed again, and kept by
// its owner for the life of the process) and what recording reads of it, computed once.
struct OpGraph {
  OpGraph() = default;
  explicit OpGraph(const tpu_graph_t *g);
  const tpu_graph_t *graph = nullptr;
  std::vector<const tpu_node_t *> params;  // the parameter nodes, by index
  // Per parameter: whether a node or an output of the graph uses it. An op that
  // overwrites an argument without reading it (fill_, zero_) leaves that parameter unused.
  std::vector<bool> used;
};

// Records one op run. |op|: its cached one-op graph (parameters in input order);
// |key|: its signature; |tensors|[i]: the tpu tensor input i reads, or nullptr for a host
// input at inputs.ptrs[i]; |outputs|: the tensors its graph outputs write, in order.
void record_op(c10::Device device, const std::string &name, const std::vector<unsigned char> &key,
               const OpGraph &op, Inputs &inputs,
               c10::ArrayRef<at::Tensor> tensors, c10::ArrayRef<at::Tensor> outputs,
               const RngUse &rng);

// Compiles and queues the pending graph of chip |index| (every chip if index < 0).
// |reason| is counted in the statistics ("item", "fallback", "optimizer step", ...).
void flush_pending(int index, const char *reason);
// Flushes |t|'s chip if the pending graph reads or writes |t|'s storage.
void flush_if_pending(const at::Tensor &t, const char *reason);

// While a RecordScope lives, the calling thread's ops are recorded whatever the eager mode,
// so a composite kernel (fused AdamW) becomes one program. finish() ends the scope: when
// the outermost scope ends and chip |index| does not record anyway (strict or debug mode),
// it flushes the pending graphs of every chip (|reason| in the statistics). A scope left by an exception flushes what was recorded,
// as strict mode would already have run it, and lets the exception propagate.
// |whole|: the size limit (TORCHTPU_FUSED_MAX_OPS) does not cut the graph while the scope
// lives: the scope's ops (fused attention's 17 forward, 24 backward) are one program in
// strict mode whatever the limit, and in fused mode they join the pending graph whole, the
// next op after the scope cutting. (Letting the limit cut inside attention's backward in
// fused mode made the GPT step's modelled v5e time 368 instead of 352 µs.)
class RecordScope {
 public:
  RecordScope(c10::DeviceIndex index, const char *reason, bool whole = false);
  ~RecordScope();
  void finish();
  RecordScope(const RecordScope &) = delete;
  RecordScope &operator=(const RecordScope &) = delete;

 private:
  c10::DeviceIndex index_;
  const char *reason_;
  bool whole_;
  bool open_ = true;
};

// ---- compile mode -----------------------------------------------------------------------
// capture_begin flushes, makes |inputs| the first parameters of the chip's pending graph,
// then records every op on chip |index| until capture_end, which
// turns the recorded graph into a replayable plan for compiled function |fn| keyed by its
// inputs' signature, and runs it once for the call being captured. If the capture was cut
// (an op ran on the CPU, a value was read), the call ran correctly through fused execution
// instead and capture_end returns false.
void capture_begin(c10::DeviceIndex index, const std::vector<at::Tensor> &inputs,
                   bool exporting);
bool capture_end(c10::DeviceIndex index, int64_t fn, const std::vector<at::Tensor> &inputs,
                 const std::vector<at::Tensor> &outputs);
// Ends a capture whose function raised: what was recorded runs (a flush).
void capture_abort(c10::DeviceIndex index);
// Ends a capture started with exporting=true without running it: the StableHLO text of
// the graph from the inputs to |outputs|. The program's parameters are the inputs, then
// |constants| (tensors it read that are not inputs).
std::string capture_export(c10::DeviceIndex index, const std::vector<at::Tensor> &outputs,
                           const std::string &name, std::vector<at::Tensor> *constants);
// Runs |fn|'s plan for these inputs: false if there is none for their signature and chip
// (also when they are not all tpu tensors on one chip).
bool replay(int64_t fn, at::TensorList inputs, std::vector<at::Tensor> *outputs);

}  // namespace torchtpu
