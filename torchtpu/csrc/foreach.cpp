// foreach.cpp: torch._foreach_* ops on tpu as one program each.
//
// A foreach op whose per-tensor op has a lowering (_foreach_mul_.Scalar: mul.out) runs
// through the native engine as one call: the key covers the whole list, and the graph is
// the per-tensor op's lowering once per element (lower_foreach). A cache hit costs one key
// and one launch (or one record in fused mode) for the list, not a dispatched op per tensor:
// the foreach AdamW step of the GPT example spent about 0.9 ms of host time per step in
// 240 per-tensor ops.
//
// Other foreach ops, and calls whose tensors span chips, whose lists are empty, or whose
// written tensors share memory with other arguments except element for element, run
// PyTorch's generic kernel (the per-tensor loop the CPU runs) under a RecordScope: the
// per-tensor ops are recorded into one pending graph and launched as one cached program.
// In fused mode and compile captures both ways record with the rest.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/ScalarOps.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "device.h"
#include "eager.h"
#include "fused.h"
#include "native.h"

namespace torchtpu {
namespace {

// ---- how a foreach op maps to its per-tensor op ----------------------------------------------

// Where each argument of the per-tensor call for list element i comes from.
enum class Src {
  TensorElem,  // element i of a Tensor[] argument
  ScalarElem,  // element i of a Scalar[] argument, as a Scalar
  WrapElem,    // element i of a Scalar[] argument, as a wrapped-number tensor
  Same,        // the foreach argument itself (a Tensor or a Scalar)
  Wrap,        // a Scalar argument as a wrapped-number tensor (mul.out's `other`)
  Default,     // not a foreach argument: the per-tensor op's default
  Out,         // the per-tensor op's out= tensor
};

struct PerTensor {
  std::optional<c10::OperatorHandle> op;        // the per-tensor .out overload
  const c10::FunctionSchema *schema = nullptr;  // its schema
  LowerFn fn = nullptr;
  bool inplace = false;  // _foreach_mul_: writes list 0; else returns a new list
  std::vector<std::pair<Src, int>> args;  // per per-tensor argument: (source, foreach arg)
};

// |fs|'s arguments mapped onto the per-tensor op |ps| position by position; false if they
// do not fit.
bool map_args(const c10::FunctionSchema &fs, const c10::FunctionSchema &ps, PerTensor *m) {
  const auto &f = fs.arguments(), &p = ps.arguments();
  if (ps.returns().size() != 1 || p.empty() || !p.back().is_out() ||
      classify(p.back()) != ArgKind::Tensor || f.size() >= p.size()) {
    return false;
  }
  m->args.clear();
  for (size_t j = 0; j < p.size(); j++) {
    ArgKind pk = classify(p[j]);
    if (p[j].is_out()) {
      if (j + 1 != p.size()) return false;
      m->args.emplace_back(Src::Out, -1);
      continue;
    }
    if (j >= f.size()) {
      if (!p[j].default_value()) return false;
      m->args.emplace_back(Src::Default, -1);
      continue;
    }
    ArgKind fk = classify(f[j]);
    int i = static_cast<int>(j);
    if (fk == ArgKind::TensorList && pk == ArgKind::Tensor) m->args.emplace_back(Src::TensorElem, i);
    else if (fk == ArgKind::ScalarList && pk == ArgKind::Scalar) m->args.emplace_back(Src::ScalarElem, i);
    else if (fk == ArgKind::ScalarList && pk == ArgKind::Tensor) m->args.emplace_back(Src::WrapElem, i);
    else if (fk == pk && (fk == ArgKind::Tensor || fk == ArgKind::Scalar)) m->args.emplace_back(Src::Same, i);
    else if (fk == ArgKind::Scalar && pk == ArgKind::Tensor) m->args.emplace_back(Src::Wrap, i);
    else return false;
  }
  return true;
}

// The per-tensor op of foreach op |fs| (_foreach_addcmul_.ScalarList: addcmul.out), or
// nullptr if it has none with a lowering. Computed once per op.
const PerTensor *per_tensor_of(const c10::FunctionSchema &fs) {
  static std::mutex mu;
  static std::unordered_map<const c10::FunctionSchema *, std::unique_ptr<PerTensor>> maps;
  std::lock_guard<std::mutex> lock(mu);
  auto it = maps.find(&fs);
  if (it != maps.end()) return it->second.get();
  auto m = std::make_unique<PerTensor>();
  std::string base = fs.name().substr(std::string("aten::_foreach_").size());
  m->inplace = !base.empty() && base.back() == '_';
  if (m->inplace) base.pop_back();
  const std::string &ov = fs.overload_name();
  std::vector<const char *> candidates;
  if (ov.empty()) candidates = {"out"};
  else if (ov == "Scalar" || ov == "ScalarList") candidates = {"Scalar_out", "out", "Tensor_Scalar_out"};
  else if (ov == "List") candidates = {"Tensor_out", "out", "Tensor_Tensor_out"};
  else if (ov == "Tensor") candidates = {"Tensor_out", "out"};
  bool shape_ok = !fs.arguments().empty() && classify(fs.arguments()[0]) == ArgKind::TensorList &&
                  (m->inplace ? fs.returns().empty() : fs.returns().size() == 1);
  for (const auto &a : fs.arguments()) shape_ok = shape_ok && !a.is_out();
  bool found = false;
  for (const char *c : candidates) {
    if (!shape_ok) break;
    LowerFn fn = find_lowering(base + "." + c);
    auto handle = c10::Dispatcher::singleton().findSchema({"aten::" + base, c});
    if (!fn || !handle || !map_args(fs, handle->schema(), m.get())) continue;
    m->fn = fn;
    m->op = handle;
    m->schema = &handle->schema();
    found = true;
    break;
  }
  if (!found) m.reset();
  return maps.emplace(&fs, std::move(m)).first->second.get();
}

// PyTorch's checks of the per-tensor op on one element's arguments |args| (a float result
// cannot be cast to an integer self): its meta kernel raises PyTorch's error. The meta run
// of the foreach op itself does not check them.
void check_element(const PerTensor &m, const std::vector<c10::IValue> &args) {
  torch::jit::Stack meta;
  for (const c10::IValue &a : args) {
    meta.push_back(a.isTensor() ? c10::IValue(to_meta(a.toTensor())) : a);
  }
  m.op->callBoxed(&meta);
  // sub's bool check is in its CPU and CUDA kernels, not in its meta kernel
  if (m.schema->name() == "aten::sub" && args[0].isTensor() && args[1].isTensor()) {
    at::native::sub_check(args[0].toTensor(), args[1].toTensor());
  }
}

// The lowering of every mapped foreach op: the per-tensor op's lowering once per element,
// in one graph. Results (or, in place, updates of list 0) in list order.
void lower_foreach(LowerCtx &ctx) {
  const PerTensor *m = per_tensor_of(*ctx.schema);
  TORCH_INTERNAL_ASSERT(m, ctx.schema->name(), ": no per-tensor op");
  const auto &p = m->schema->arguments();
  auto self = ctx.arg(0).toTensorList();
  for (size_t i = 0; i < self.size(); i++) {
    std::vector<c10::IValue> args;
    LowerCtx sub;
    sub.g = ctx.g;
    sub.schema = m->schema;
    sub.precision = ctx.precision;
    sub.out_meta = {m->inplace ? to_meta(self.get(i)) : ctx.out_meta[i]};
    for (size_t k = 0; k < m->args.size(); k++) {
      auto [src, j] = m->args[k];
      tpu_value_t v = TPU_NO_VALUE;
      switch (src) {
        case Src::TensorElem:
          args.emplace_back(ctx.arg(j).toTensorList().get(i));
          v = ctx.list[j][i];
          break;
        case Src::ScalarElem:
          args.emplace_back(ctx.arg(j).toListRef()[i].toScalar());
          v = ctx.list[j][i];
          break;
        case Src::WrapElem:
          args.emplace_back(at::native::wrapped_scalar_tensor(ctx.arg(j).toListRef()[i].toScalar()));
          v = ctx.list[j][i];
          break;
        case Src::Same:
          args.push_back(ctx.arg(j));
          v = ctx.v(j);
          break;
        case Src::Wrap:
          args.emplace_back(at::native::wrapped_scalar_tensor(ctx.arg(j).toScalar()));
          v = ctx.v(j);
          break;
        case Src::Default: {
          const c10::IValue d = *p[k].default_value();
          args.push_back(d);
          if (d.isDouble() || d.isInt() || d.isBool()) {
            tpu_dtype_t dt = d.isDouble() ? TPU_F64 : d.isBool() ? TPU_BOOL : TPU_I64;
            v = scalar_const(ctx.g, dt, d.toScalar().toDouble());
          }
          break;
        }
        case Src::Out:
          args.emplace_back(sub.out_meta[0]);
          break;
      }
      sub.value.push_back(v);
    }
    check_element(*m, args);
    sub.list.assign(args.size(), {});
    sub.args = &args;
    m->fn(sub);
    TORCH_INTERNAL_ASSERT(sub.results.size() == 1 && sub.updates.empty() &&
                              sub.list_updates.empty(),
                          ctx.schema->name(), ": the per-tensor lowering gave no single result");
    if (m->inplace) ctx.list_updates.push_back({0, i, sub.results[0]});
    else ctx.results.push_back(sub.results[0]);
  }
}

// ---- which way a call runs --------------------------------------------------------------------

// The chip of the first tpu tensor among the arguments, or -1.
c10::DeviceIndex chip_of(const torch::jit::Stack &stack, size_t num_args) {
  for (size_t i = stack.size() - num_args; i < stack.size(); i++) {
    const c10::IValue &a = stack[i];
    if (a.isTensorList()) {
      for (const at::Tensor &t : a.toTensorList()) {
        if (t.defined() && t.device().type() == kTpu) return t.device().index();
      }
    } else if (a.isTensor() && a.toTensor().defined() && a.toTensor().device().type() == kTpu) {
      return a.toTensor().device().index();
    }
  }
  return -1;
}

// True if the call can run natively as one program: a mapped op, non-empty lists of tpu
// tensors of chip |chip|, and (in place) written tensors that share memory with no other
// argument except the same view at the same position of another list.
bool runs_natively(const c10::OperatorHandle &op, const torch::jit::Stack &stack,
                   size_t num_args, c10::DeviceIndex chip) {
  const PerTensor *m = per_tensor_of(op.schema());
  if (!m || native_disabled()) return false;
  const c10::Device dev(kTpu, chip);
  const size_t first = stack.size() - num_args;
  auto self = stack[first].toTensorList();
  std::unordered_map<const c10::StorageImpl *, size_t> written;  // storage -> position
  for (size_t i = 0; i < self.size(); i++) {
    const at::Tensor t = self.get(i);
    if (!t.defined() || t.device() != dev) return false;
    if (m->inplace && !written.emplace(t.storage().unsafeGetStorageImpl(), i).second) {
      return false;  // two written elements share a storage
    }
  }
  if (self.size() == 0) return false;
  for (size_t a = first + 1; a < stack.size(); a++) {
    const c10::IValue &v = stack[a];
    if (v.isTensorList()) {
      auto list = v.toTensorList();
      if (list.size() != self.size()) return false;  // the generic kernel says why
      for (size_t i = 0; i < list.size(); i++) {
        const at::Tensor t = list.get(i);
        if (!t.defined() || t.device() != dev) return false;
        // (past 64 outputs, one that may alias an input cannot be flagged to the compiler)
        auto w = written.find(t.storage().unsafeGetStorageImpl());
        if (w != written.end() && (w->second != i || !t.is_same(self.get(i)) || self.size() > 64)) {
          return false;
        }
      }
    } else if (v.isTensor() && v.toTensor().defined()) {
      const at::Tensor &t = v.toTensor();
      bool cpu_scalar = t.device().type() == c10::DeviceType::CPU && t.dim() == 0;
      if (!cpu_scalar && t.device() != dev) return false;
      if (written.count(t.storage().unsafeGetStorageImpl())) return false;
    }
  }
  return true;
}

void foreach_kernel(const c10::OperatorHandle &op, c10::DispatchKeySet, torch::jit::Stack *stack) {
  // the CPU's entry for the op: the generic list loop (CompositeExplicitAutograd)
  const c10::DispatchKeySet generic(c10::DispatchKey::CPU);
  const size_t num_args = op.schema().arguments().size();
  c10::DeviceIndex chip = chip_of(*stack, num_args);
  if (chip < 0) {
    op.redispatchBoxed(generic, stack);
    return;
  }
  if (runs_natively(op, *stack, num_args, chip)) {
    run_native(op, stack);
    return;
  }
  RecordScope scope(chip, "foreach op");
  op.redispatchBoxed(generic, stack);
  scope.finish();
}

// Registers foreach_kernel for every aten::_foreach_* op whose kernel for the CPU (and, until
// now, for tpu) is the generic CompositeExplicitAutograd one, and lower_foreach as its
// lowering (used when per_tensor_of finds its per-tensor op).
struct Registrar {
  Registrar() {
    static torch::Library *lib = new torch::Library(torch::Library::IMPL, "aten",
                                                    c10::DispatchKey::PrivateUse1, __FILE__,
                                                    __LINE__);
    auto &dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName &name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::_foreach_", 0) != 0) continue;
      auto op = dispatcher.findOp(name);
      if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
        continue;
      }
      std::string full = name.name.substr(6);  // drop "aten::"
      if (!name.overload_name.empty()) full += "." + name.overload_name;
      register_lowering_only(full.c_str(), &lower_foreach);
      lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&foreach_kernel>());
    }
  }
};
Registrar registrar;

}  // namespace
}  // namespace torchtpu
