// native.h: how an ATen op runs natively on the vTPU: lowered to an IR graph, compiled
// once per signature, cached, and run on the chip's stream (native.cpp is the engine).
//
// A lowering (lower_*.cpp) gets a LowerCtx: the op's arguments, one IR parameter per
// tensor argument and per runtime scalar, and the shapes/dtypes PyTorch's meta kernel
// computed for the results. It builds the graph and sets ctx.results. It never sees data:
// the same graph serves every call with the same signature. A lowering that cannot handle
// a case throws Unsupported, and the call runs through the CPU fallback instead.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

extern "C" {
#include "tpu/compiler.h"
#include "tpu/ir.h"
}

namespace torchtpu {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// Thrown by a lowering for a case it does not cover (the call falls back to the CPU).
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How the engine treats an argument, from its schema type (classify). Out: an out= tensor
// (written, never read: no parameter; set by the engine, never by classify). Tensor: read
// (and maybe written). ScalarList: run-time scalars, one per element (a foreach op's
// per-tensor scalars). Static: part of the signature.
enum class ArgKind { Tensor, Out, TensorList, OptTensorList, Scalar, ScalarList, Generator, Static };
ArgKind classify(const c10::Argument &arg);

// The meta twin of an argument. Wrapped Python numbers stay as they are (meta kernels
// read their value for type promotion); other tensors become meta tensors.
at::Tensor to_meta(const at::Tensor &t);

struct LowerCtx {
  tpu_graph_t *g = nullptr;
  const c10::FunctionSchema *schema = nullptr;
  const std::vector<c10::IValue> *args = nullptr;  // the call's arguments (tpu tensors)
  // Per argument: its IR value (tensor or runtime scalar), TPU_NO_VALUE otherwise.
  std::vector<tpu_value_t> value;
  // Per TensorList argument: the IR values of its elements.
  std::vector<std::vector<tpu_value_t>> list;
  // Per result: a meta tensor with PyTorch's shape, dtype and strides for it.
  std::vector<at::Tensor> out_meta;
  // Set by the lowering: the IR value of each result (converted to its dtype), or
  // TPU_NO_VALUE for a result PyTorch leaves undefined (out_meta[i] undefined).
  std::vector<tpu_value_t> results;
  // Set by the lowering: new values of mutated arguments that are not results
  // (batch norm's running statistics): (argument index, value).
  std::vector<std::pair<size_t, tpu_value_t>> updates;
  // Set by the lowering of an in-place list op (torch._foreach_mul_): new values of the
  // elements of a TensorList argument.
  struct ListUpdate {
    size_t arg, elem;
    tpu_value_t value;
  };
  std::vector<ListUpdate> list_updates;
  tpu_precision_t precision = TPU_PRECISION_DEFAULT;

  const c10::IValue &arg(size_t i) const { return (*args)[i]; }
  const at::Tensor &tensor(size_t i) const { return (*args)[i].toTensor(); }
  tpu_value_t v(size_t i) const { return value[i]; }
  tpu_dtype_t out_dtype(size_t i = 0) const;
  tpu_shape_t out_shape(size_t i = 0) const;
};

using LowerFn = void (*)(LowerCtx &);

// Registers |fn| as the native kernel of |op_name| ("add.out": an aten overload).
void register_lowering(const char *op_name, LowerFn fn);
// Registers |fn| as |op_name|'s lowering without making native_kernel its tpu kernel: the
// op's own kernel decides per call whether to run it natively (foreach.cpp).
void register_lowering_only(const char *op_name, LowerFn fn);
// The lowering registered for |op_name|, or nullptr. Call after static initialization.
LowerFn find_lowering(const std::string &op_name);
// Runs a call of an op with a lowering through the native engine (key, cache, compile on a
// miss, launch or record).
void run_native(const c10::OperatorHandle &op, torch::jit::Stack *stack);
// Runs a call on the CPU through the boxed fallback (ops.cpp): host aliases of the tpu
// arguments, counted in torchtpu.fallback_stats().
void run_cpu_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack);

// Registers |fn| as the lowering of |op_name| for calls with a complex tensor (argument or
// result). Such calls never reach the op's real lowering: an op without a complex lowering
// runs them on the CPU. See IrLayout for how complex tensors appear in the graph.
void register_complex_lowering(const char *op_name, LowerFn fn);

// Runs the registrations of one lower_*.cpp file at library load.
struct LoweringRegistrar {
  LoweringRegistrar(std::initializer_list<std::pair<const char *, LowerFn>> entries) {
    for (const auto &e : entries) register_lowering(e.first, e.second);
  }
};

// The run-time inputs of one executable run, in parameter order: device pointers, host
// scalar values, and host tensors the run reads (kept alive until it has run).
struct Inputs {
  c10::SmallVector<void *, 8> ptrs;  // inline: an op has a few inputs
  std::deque<std::array<unsigned char, 16>> slots;  // scalar values (addresses are stable)
  std::vector<at::Tensor> host_copies;              // CPU tensors read at run time
  void scalar_slot(const void *value, size_t n);    // appends a slot and its pointer
};

// Queues one run of |exe| on chip |device|'s stream with scratch memory. Takes over the
// caller's reference to |exe|; |name| names the run in a deferred error.
void launch_executable(tpu_executable_t *exe, Inputs inputs, std::vector<void *> outputs,
                       c10::Device device, const std::string &name);

// The cached executable cache shared by eager, fused and compile mode.
tpu_cache_t *executable_cache();

// Copies |src| (a tpu tensor on dst's chip, or a CPU tensor) into tpu tensor |dst| on the
// chip's stream, converting dtype and broadcasting. False if the case is not handled
// (the caller copies on the host instead).
bool native_copy(const at::Tensor &src, const at::Tensor &dst);

// Makes the Scalar argument |arg| of |op_name| part of the signature instead of a run-time
// input, for lowerings whose graph depends on its value (the `ord` of a norm).
void register_static_scalar(const char *op_name, const char *arg);

// Registers |fn| to size |op_name|'s out= tensors from its arguments, as PyTorch's kernel
// would, before the call is keyed (arange's out starts empty: without it every call would
// miss once and run the meta kernel to learn the size).
using PresizeFn = void (*)(const std::vector<c10::IValue> &args);
void register_presize(const char *op_name, PresizeFn fn);

// ---- helpers for lowerings ----------------------------------------------------------------

// Destroys an owned graph: std::unique_ptr<tpu_graph_t, GraphDeleter>.
struct GraphDeleter {
  void operator()(tpu_graph_t *g) const { tpu_graph_destroy(g); }
};

tpu_dtype_t to_tpu_dtype(at::ScalarType t);  // throws Unsupported (complex, quantized, ...)

// How a tensor appears in an IR graph: dtype, shape and strides (elements). The IR has no
// complex dtype: a complex64 / complex128 tensor is its real view (torch.view_as_real), the
// f32 / f64 components with a trailing dim of 2 (real, imaginary) and doubled strides.
struct IrLayout {
  tpu_dtype_t dtype;
  tpu_shape_t shape;
  int64_t strides[TPU_MAX_RANK];
  bool dense;  // row-major dense (the graph needs no strides)
};
// Throws Unsupported for dtypes the IR lacks (complex32, quantized) and for complex
// tensors of rank TPU_MAX_RANK (no room for the pair dim).
IrLayout ir_layout(const at::Tensor &t);
// complex64 or complex128: the dtypes ir_layout lays out as pairs.
bool is_complex_pair(at::ScalarType t);
// Part |k| (0 real, 1 imaginary) of a pair value (..., 2), without the pair dim.
tpu_value_t complex_part(tpu_graph_t *g, tpu_value_t pair, int k);
// The pair value (..., 2) of a real and an imaginary part of one shape.
tpu_value_t complex_join(tpu_graph_t *g, tpu_value_t re, tpu_value_t im);
tpu_shape_t to_shape(c10::IntArrayRef sizes);
tpu_shape_t shape_of(const tpu_graph_t *g, tpu_value_t v);
tpu_dtype_t dtype_of(const tpu_graph_t *g, tpu_value_t v);

// |v| converted to |dtype| (no node if it already is).
tpu_value_t convert(tpu_graph_t *g, tpu_value_t v, tpu_dtype_t dtype);
// |v| broadcast (numpy rules, right-aligned) to |shape|.
tpu_value_t broadcast_to(tpu_graph_t *g, tpu_value_t v, const tpu_shape_t &shape);
// A scalar constant of |dtype| broadcast to |shape|.
tpu_value_t full(tpu_graph_t *g, tpu_dtype_t dtype, const tpu_shape_t &shape, double value);
tpu_value_t scalar_const(tpu_graph_t *g, tpu_dtype_t dtype, double value);
// Elementwise op on operands converted to |dtype| and broadcast to |shape|.
tpu_value_t ew2(tpu_graph_t *g, tpu_op_t op, tpu_value_t a, tpu_value_t b, tpu_dtype_t dtype,
                const tpu_shape_t &shape);
// Reduction over |dims| (negative dims wrap), optionally keeping them as size 1.
tpu_value_t reduce_dims(tpu_graph_t *g, tpu_reduce_kind_t kind, tpu_value_t x,
                        c10::IntArrayRef dims, bool keepdim);
// The number of elements of |s| (1 for a scalar).
int64_t numel(const tpu_shape_t &s);
// x.index_select(dim, index) as a bounds-checked gather; index is 0-D or 1-D.
tpu_value_t gather_slices(tpu_graph_t *g, tpu_value_t x, int64_t dim, tpu_value_t index);
// x with the slices x.select(dim, index[i]) replaced by (or, with |add|, added to)
// updates[i]: index (L) i64, updates (L, the other dims of x in order); bounds-checked.
tpu_value_t scatter_slices(tpu_graph_t *g, tpu_value_t x, int64_t dim, tpu_value_t index,
                           tpu_value_t updates, bool add);
// The same with any combiner (index_reduce's MUL/MAX/MIN).
tpu_value_t scatter_slices(tpu_graph_t *g, tpu_value_t x, int64_t dim, tpu_value_t index,
                           tpu_value_t updates, tpu_scatter_kind_t kind);
// (..., L at dim, ...) -> (L, ...): moves |dim| to the front.
tpu_value_t dim_first(tpu_graph_t *g, tpu_value_t v, int64_t dim);
// The |ord|-norm of |x| (converted to |dt| first) over |dims| (all when empty): max/min
// of |x| for +-inf, the count of non-zeros for 0, else (sum |x|^ord)^(1/ord).
tpu_value_t vector_norm(tpu_graph_t *g, tpu_value_t x, tpu_dtype_t dt, double ord,
                        c10::IntArrayRef dims, bool keepdim);
// A loss's reduction: 0 none, 1 mean (over all elements), 2 sum.
tpu_value_t reduce_loss(tpu_graph_t *g, tpu_value_t loss, int64_t reduction);
// (rows, cols) bool of |shape|'s last two dims: true where row |dir| col holds (GE: the lower
// triangle with the diagonal, GT: strictly lower, LE: upper, ...).
tpu_value_t triangle_mask(tpu_graph_t *g, const tpu_shape_t &shape, tpu_compare_dir_t dir);
// The same, true on the main diagonal (EQ).
tpu_value_t main_diagonal(tpu_graph_t *g, const tpu_shape_t &shape);
// Normalizes a possibly negative dim for a rank-|rank| tensor.
int64_t wrap_dim(int64_t dim, int64_t rank);
// The compute dtype for elementwise math on |t|: f32 for bf16/f16 (TPU vector units
// are 32-bit), else the dtype itself.
tpu_dtype_t compute_dtype(tpu_dtype_t t);

}  // namespace torchtpu
