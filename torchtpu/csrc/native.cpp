// native.cpp: the native eager engine. Every ATen op with a lowering runs here:
//
//   1. check devices (DeviceCheck) and build the op's signature key: the op, each
//      tensor's dtype/sizes/strides and aliasing, static arguments, the matmul precision;
//   2. look the key up in the executable cache (the hot path ends here on a hit);
//   3. on a miss: run PyTorch's meta kernel (shapes, dtypes, PyTorch's own errors),
//      resize out= tensors if needed, lower to an IR graph, compile, insert;
//   4. allocate the results and enqueue the executable on the chip's stream; the host
//      returns at once (strict mode) or waits for it (debug mode).
// Scalar arguments (at::Scalar) are run-time inputs, not part of the key, so a learning
// rate that changes every step does not recompile. Random ops get a (seed, offset) pair
// from the chip's generator as run-time inputs too.

#include "native.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "cost_hooks.h"
#include "device.h"
#include "device_check.h"
#include "disk_cache.h"
#include "eager.h"
#include "fused.h"

extern "C" {
#include "tpu/compiler.h"
#include "tpu/threadpool.h"
}

namespace torchtpu {
namespace {

// ---- op registry ---------------------------------------------------------------------------

struct OpInfo {
  std::string name;                 // "aten::add.out"
  LowerFn fn = nullptr;             // calls without complex tensors (nullptr: none)
  LowerFn complex_fn = nullptr;     // calls with complex tensors (register_complex_lowering)
  std::vector<ArgKind> kinds;       // per argument
  std::vector<int> return_alias;    // per return: the argument it writes into, or -1
  bool list_return = false;         // one Tensor[] return (a foreach op's results)
  int written_list = -1;            // a TensorList argument the op writes (foreach in-place)
  bool random = false;              // takes (seed, offset) run-time inputs
  bool cpu_indices = false;         // CPU index tensors are allowed (indexing ops)
  bool mask_reads = false;          // x[mask] reads: the result shape depends on the data
  PresizeFn presize = nullptr;      // sizes out= tensors before keying (register_presize)
};

std::unordered_map<std::string, LowerFn> &lowerings() {
  static std::unordered_map<std::string, LowerFn> m;
  return m;
}

std::unordered_map<std::string, LowerFn> &complex_lowerings() {
  static std::unordered_map<std::string, LowerFn> m;
  return m;
}

std::unordered_map<std::string, PresizeFn> &presizers() {
  static std::unordered_map<std::string, PresizeFn> m;
  return m;
}

std::unordered_map<std::string, std::vector<std::string>> &static_scalars() {
  static std::unordered_map<std::string, std::vector<std::string>> m;
  return m;
}

}  // namespace

ArgKind classify(const c10::Argument &arg) {
  const c10::TypePtr &t = arg.real_type();
  auto kind = t->kind();
  if (kind == c10::TypeKind::OptionalType) {
    auto elem = t->castRaw<c10::OptionalType>()->getElementType();
    if (elem->kind() == c10::TypeKind::TensorType) return ArgKind::Tensor;
    if (elem->kind() == c10::TypeKind::GeneratorType) return ArgKind::Generator;
    if (elem->kind() == c10::TypeKind::NumberType) return ArgKind::Scalar;
    return ArgKind::Static;
  }
  if (kind == c10::TypeKind::TensorType) return ArgKind::Tensor;
  if (kind == c10::TypeKind::NumberType) return ArgKind::Scalar;
  if (kind == c10::TypeKind::ListType) {
    auto elem = t->castRaw<c10::ListType>()->getElementType();
    if (elem->kind() == c10::TypeKind::TensorType) return ArgKind::TensorList;
    if (elem->kind() == c10::TypeKind::OptionalType) return ArgKind::OptTensorList;
    if (elem->kind() == c10::TypeKind::NumberType) return ArgKind::ScalarList;
  }
  return ArgKind::Static;
}

namespace {

OpInfo make_info(const c10::OperatorHandle &op, const std::string &short_name, LowerFn fn) {
  OpInfo info;
  const c10::FunctionSchema &s = op.schema();
  info.name = c10::toString(op.operator_name());
  info.fn = fn;
  auto complex = complex_lowerings().find(short_name);
  if (complex != complex_lowerings().end()) info.complex_fn = complex->second;
  auto presize = presizers().find(short_name);
  if (presize != presizers().end()) info.presize = presize->second;
  const auto &fixed = static_scalars()[short_name];
  for (const auto &a : s.arguments()) {
    info.kinds.push_back(a.is_out() && classify(a) == ArgKind::Tensor ? ArgKind::Out
                                                                       : classify(a));
    if (std::find(fixed.begin(), fixed.end(), a.name()) != fixed.end()) {
      info.kinds.back() = ArgKind::Static;
    }
    if (info.kinds.back() == ArgKind::Generator) info.random = true;
    if (info.kinds.back() == ArgKind::TensorList && a.alias_info() && a.alias_info()->isWrite()) {
      info.written_list = static_cast<int>(info.kinds.size() - 1);
    }
  }
  if (op.hasTag(at::Tag::nondeterministic_seeded)) info.random = true;
  info.cpu_indices = accepts_cpu_indices(info.name);
  info.mask_reads = info.cpu_indices && info.name.find("index_put") == std::string::npos;
  for (const auto &r : s.returns()) {
    const c10::TypePtr &rt = r.real_type();
    if (rt->kind() == c10::TypeKind::ListType &&
        rt->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
      info.list_return = true;  // results: one per element, none written into an argument
    }
    int alias = -1;
    if (r.alias_info() && r.alias_info()->isWrite()) {
      for (size_t i = 0; i < s.arguments().size(); i++) {
        const auto &ai = s.arguments()[i].alias_info();
        if (ai && ai->isWrite() && ai->beforeSets() == r.alias_info()->beforeSets()) {
          alias = static_cast<int>(i);
          break;
        }
      }
    }
    info.return_alias.push_back(alias);
  }
  return info;
}

const OpInfo &op_info_slow(const c10::OperatorHandle &op) {
  static std::mutex mu;
  static std::unordered_map<const void *, OpInfo> infos;  // nodes never move
  const void *id = &op.schema();
  std::lock_guard<std::mutex> lock(mu);
  auto it = infos.find(id);
  if (it != infos.end()) return it->second;
  std::string name = op.operator_name().name.substr(6);  // drop "aten::"
  if (!op.operator_name().overload_name.empty()) name += "." + op.operator_name().overload_name;
  auto fn = lowerings().find(name);
  TORCH_INTERNAL_ASSERT(fn != lowerings().end(), "tpu: no lowering registered for ", name);
  return infos.emplace(id, make_info(op, name, fn->second)).first->second;
}

// The hot path: a per-thread cache in front of the shared table.
const OpInfo &op_info(const c10::OperatorHandle &op) {
  thread_local std::unordered_map<const void *, const OpInfo *> cache;
  const void *id = &op.schema();
  auto it = cache.find(id);
  if (it != cache.end()) return *it->second;
  const OpInfo &info = op_info_slow(op);
  cache.emplace(id, &info);
  return info;
}

// ---- signature keys --------------------------------------------------------------------------

// A key is built on every op call: its buffer is the thread's spare one (kept with its
// capacity from the last call), given back when the key dies.
class Key {
 public:
  Key() {
    buf_.swap(spare());
    buf_.clear();
  }
  ~Key() {
    if (buf_.capacity() > spare().capacity()) buf_.swap(spare());
  }
  Key(const Key &) = delete;
  Key &operator=(const Key &) = delete;

  void bytes(const void *p, size_t n) {
    size_t at = buf_.size();
    buf_.resize(at + n);
    std::memcpy(buf_.data() + at, p, n);
  }
  template <typename T>
  void pod(const T &v) {
    bytes(&v, sizeof v);
  }
  void tensor_meta(const at::Tensor &t) {
    pod(static_cast<int8_t>(t.scalar_type()));
    pod(static_cast<int8_t>(t.is_conj() | t.is_neg() << 1));  // lazy conjugation / negation
    pod(static_cast<int8_t>(t.dim()));
    for (int64_t d : t.sizes()) pod(d);
    for (int64_t s : t.strides()) pod(s);
  }
  const std::vector<unsigned char> &data() const { return buf_; }
  void clear() {
    buf_.clear();
    buf_.reserve(256);
  }

 private:
  static std::vector<unsigned char> &spare() {
    thread_local std::vector<unsigned char> buf;
    return buf;
  }
  std::vector<unsigned char> buf_;
};

void add_static(Key &k, const c10::IValue &v) {
  if (v.isNone()) {
    k.pod('N');
  } else if (v.isInt()) {
    k.pod('i');
    k.pod(v.toInt());
  } else if (v.isDouble()) {
    k.pod('d');
    k.pod(v.toDouble());
  } else if (v.isBool()) {
    k.pod('b');
    k.pod(v.toBool());
  } else if (v.isString()) {
    k.pod('s');
    const std::string &s = v.toStringRef();
    k.pod(s.size());
    k.bytes(s.data(), s.size());
  } else if (v.isIntList()) {
    k.pod('I');
    auto l = v.toIntList();
    k.pod(l.size());
    for (int64_t x : l) k.pod(x);
  } else if (v.isDoubleList()) {
    k.pod('D');
    auto l = v.toDoubleList();
    k.pod(l.size());
    for (double x : l) k.pod(x);
  } else if (v.isBoolList()) {
    k.pod('B');
    auto l = v.toBoolList();
    k.pod(l.size());
    for (bool x : l) k.pod(x);
  } else if (v.isDevice()) {
    k.pod('v');
    k.pod(static_cast<int8_t>(v.toDevice().type()));
  } else {
    throw Unsupported(std::string("argument of type ") + v.tagKind());
  }
}

// A Scalar argument whose value is 0 or 1 is part of the signature and a constant of the
// graph (as PyTorch/XLA does), so `add(x, y, alpha=1)` or `addmm(beta=1)` fold to the plain
// op instead of multiplying by a run-time 1. Other values stay run-time inputs, so a
// changing learning rate never recompiles. Returns 0 (run-time), 1 (zero) or 2 (one).
int special_scalar(const at::Scalar &s) {
  if (s.isBoolean() || s.isComplex()) return 0;
  if (s.isFloatingPoint()) {
    double d = s.toDouble();
    if (d == 0.0 && !std::signbit(d)) return 1;
    return d == 1.0 ? 2 : 0;
  }
  int64_t x = s.toLong();
  return x == 0 ? 1 : x == 1 ? 2 : 0;
}

bool is_cpu_scalar(const at::Tensor &t) {
  return t.defined() && t.device().type() == c10::DeviceType::CPU && t.dim() == 0;
}

// Where an argument tensor shares memory with an output tensor: 0 none, 1 the same view,
// 2 other overlap.
int alias_kind(const at::Tensor &in, const at::Tensor &out) {
  if (!in.defined() || !out.defined() || in.device() != out.device()) return 0;
  if (!in.storage().is_alias_of(out.storage())) return 0;
  if (in.data_ptr() == out.data_ptr() && in.sizes() == out.sizes() &&
      in.strides() == out.strides() && in.dtype() == out.dtype()) {
    return 1;
  }
  return 2;
}

// ---- the call -------------------------------------------------------------------------------

struct Call {
  const OpInfo *info;
  std::vector<c10::IValue> args;
  std::vector<at::Tensor> outs;       // per return: the tensor it writes (existing or new)
  c10::Device device{kTpu, 0};
  tpu_precision_t precision;
  Key key;

  const at::Tensor *out_target(size_t r) const {
    if (info->list_return) return nullptr;
    int a = info->return_alias[r];
    return a >= 0 && args[a].isTensor() ? &args[a].toTensor() : nullptr;
  }

  void build_key() {
    key.clear();
    // the op by name, not by address: keys are the same in every process (disk cache)
    key.pod('E');
    key.pod(static_cast<uint16_t>(info->name.size()));
    key.bytes(info->name.data(), info->name.size());
    key.pod(static_cast<int8_t>(precision));
    for (size_t i = 0; i < args.size(); i++) {
      const c10::IValue &v = args[i];
      switch (info->kinds[i]) {
        case ArgKind::Out:
          key.pod('o');
          key.tensor_meta(v.toTensor());
          break;
        case ArgKind::Tensor:
          if (!v.isTensor() || !v.toTensor().defined()) {
            key.pod('n');
          } else if (is_cpu_scalar(v.toTensor())) {
            key.pod('c');
            key.pod(static_cast<int8_t>(v.toTensor().scalar_type()));
          } else {
            key.pod('t');
            key.tensor_meta(v.toTensor());
          }
          break;
        case ArgKind::TensorList: {
          auto list = v.toTensorList();
          key.pod('L');
          key.pod(list.size());
          for (const at::Tensor &t : list) key.tensor_meta(t);
          break;
        }
        case ArgKind::OptTensorList: {
          auto list = v.toOptionalTensorList();
          key.pod('O');
          key.pod(list.size());
          for (const std::optional<at::Tensor> t : list) {
            if (t && t->defined()) key.tensor_meta(*t);
            else key.pod('n');
          }
          break;
        }
        case ArgKind::Scalar:
          if (v.isNone()) {
            key.pod('N');
          } else {
            at::Scalar s = v.toScalar();
            key.pod(s.isComplex() ? 'z' : s.isFloatingPoint() ? 'f' : s.isBoolean() ? 'b' : 'i');
            key.pod(static_cast<int8_t>(special_scalar(s)));
          }
          break;
        case ArgKind::ScalarList: {  // every element a run-time input, even 0 and 1
          auto list = v.toListRef();
          key.pod('S');
          key.pod(list.size());
          for (const c10::IValue &e : list) {
            if (e.isComplexDouble()) throw Unsupported("complex scalar");
            key.pod(e.isDouble() ? 'f' : e.isBool() ? 'b' : 'i');
          }
          break;
        }
        case ArgKind::Generator:
          break;
        case ArgKind::Static:
          add_static(key, v);
          break;
      }
    }
    // a written list (foreach in-place): how each element overlaps the elements at its
    // position in the other lists (foreach.cpp runs other overlaps the generic way)
    if (info->written_list >= 0) {
      auto w = args[info->written_list].toTensorList();
      for (size_t i = 0; i < args.size(); i++) {
        if (static_cast<int>(i) == info->written_list || !args[i].isTensorList()) continue;
        auto l = args[i].toTensorList();
        for (size_t e = 0; e < l.size() && e < w.size(); e++) {
          key.pod(static_cast<int8_t>(alias_kind(l[e], w[e])));
        }
      }
    }
    // aliasing between written tensors and every tensor argument
    for (size_t r = 0; r < info->return_alias.size(); r++) {
      const at::Tensor *o = out_target(r);
      if (!o) continue;
      for (size_t i = 0; i < args.size(); i++) {
        if (static_cast<int>(i) == info->return_alias[r]) continue;
        if (args[i].isTensor()) key.pod(static_cast<int8_t>(alias_kind(args[i].toTensor(), *o)));
        if (args[i].isTensorList()) {
          for (const at::Tensor &t : args[i].toTensorList()) {
            key.pod(static_cast<int8_t>(alias_kind(t, *o)));
          }
        }
      }
    }
  }
};

// The value tensor |t| holds, from |v| (its memory, laid out as IrLayout says): a lazily
// conjugated view (torch.conj) has its imaginary parts negated, a lazily negated one
// (torch._neg_view, the imaginary part of a conjugate) all of it.
tpu_value_t resolve_bits(tpu_graph_t *g, const at::Tensor &t, tpu_value_t v) {
  if (t.is_conj() && is_complex_pair(t.scalar_type())) {
    v = complex_join(g, complex_part(g, v, 0),
                     tpu_graph_unary(g, TPU_OP_NEG, complex_part(g, v, 1)));
  }
  if (t.is_neg()) v = tpu_graph_unary(g, TPU_OP_NEG, v);
  return v;
}

// Builds the parameters of a graph in argument order. The order here and in
// collect_inputs must agree: tensors, CPU scalars and Scalars as they come; the
// (seed, offset) pair of random ops last.
void add_params(LowerCtx &ctx, const Call &call) {
  tpu_graph_t *g = ctx.g;
  ctx.value.assign(call.args.size(), TPU_NO_VALUE);
  ctx.list.assign(call.args.size(), {});
  for (size_t i = 0; i < call.args.size(); i++) {
    const c10::IValue &v = call.args[i];
    auto param_of = [&](const at::Tensor &t) -> tpu_value_t {
      IrLayout l = ir_layout(t);
      return resolve_bits(g, t, tpu_graph_parameter(g, l.dtype, &l.shape,
                                                    is_cpu_scalar(t) || l.dense ? nullptr : l.strides));
    };
    switch (call.info->kinds[i]) {
      case ArgKind::Tensor:
        if (v.isTensor() && v.toTensor().defined()) ctx.value[i] = param_of(v.toTensor());
        break;
      case ArgKind::TensorList:
        for (const at::Tensor &t : v.toTensorList()) ctx.list[i].push_back(param_of(t));
        break;
      case ArgKind::OptTensorList:
        for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
          ctx.list[i].push_back(t && t->defined() ? param_of(*t) : TPU_NO_VALUE);
        }
        break;
      case ArgKind::ScalarList:
        for (const c10::IValue &e : v.toListRef()) {
          tpu_dtype_t dt = e.isDouble() ? TPU_F64 : e.isBool() ? TPU_BOOL : TPU_I64;
          tpu_shape_t scalar{};
          ctx.list[i].push_back(tpu_graph_parameter(g, dt, &scalar, nullptr));
        }
        break;
      case ArgKind::Scalar:
        if (!v.isNone()) {
          at::Scalar s = v.toScalar();
          tpu_dtype_t dt = s.isFloatingPoint() ? TPU_F64 : s.isBoolean() ? TPU_BOOL : TPU_I64;
          int special = special_scalar(s);
          if (s.isComplex()) {  // (real, imaginary) f64: a pair, as complex tensors are
            tpu_shape_t pair{};
            pair.rank = 1;
            pair.dims[0] = 2;
            ctx.value[i] = tpu_graph_parameter(g, TPU_F64, &pair, nullptr);
          } else if (special) {
            ctx.value[i] = scalar_const(g, dt, special == 2 ? 1.0 : 0.0);
          } else {
            tpu_shape_t scalar{};
            ctx.value[i] = tpu_graph_parameter(g, dt, &scalar, nullptr);
          }
        }
        break;
      default:
        break;
    }
  }
}

// |tensors| (if given) receives per input the tpu tensor it reads, or an undefined tensor
// for a host input (a scalar or a CPU tensor).
void collect_inputs(const Call &call, Inputs &in, uint64_t seed, uint64_t offset,
                    c10::SmallVectorImpl<at::Tensor> *tensors) {
  auto add_tensor = [&](const at::Tensor &t) {
    if (is_cpu_scalar(t)) {
      in.scalar_slot(t.const_data_ptr(), t.element_size());
    } else if (t.device().type() == c10::DeviceType::CPU) {
      // a CPU index tensor: copied now, as CUDA reads it at call time; the task owns it
      in.host_copies.push_back(at::empty_strided(t.sizes(), t.strides(), t.options()).copy_(t));
      in.ptrs.push_back(in.host_copies.back().data_ptr());
    } else {
      in.ptrs.push_back(const_cast<void *>(t.const_data_ptr()));
    }
    if (tensors) tensors->resize(in.ptrs.size());
    if (tensors && t.device().type() == kTpu) tensors->back() = t;
  };
  auto add_scalar = [&](const at::Scalar &s) {
    if (s.isComplex()) {
      const c10::complex<double> z = s.toComplexDouble();
      const double parts[2] = {z.real(), z.imag()};
      in.scalar_slot(parts, sizeof parts);
    } else if (s.isFloatingPoint()) {
      double d = s.toDouble();
      in.scalar_slot(&d, sizeof d);
    } else if (s.isBoolean()) {
      uint8_t b = s.toBool();
      in.scalar_slot(&b, 1);
    } else {
      int64_t x = s.toLong();
      in.scalar_slot(&x, sizeof x);
    }
  };
  for (size_t i = 0; i < call.args.size(); i++) {
    const c10::IValue &v = call.args[i];
    switch (call.info->kinds[i]) {
      case ArgKind::Tensor:
        if (v.isTensor() && v.toTensor().defined()) add_tensor(v.toTensor());
        break;
      case ArgKind::TensorList:
        for (const at::Tensor &t : v.toTensorList()) add_tensor(t);
        break;
      case ArgKind::OptTensorList:
        for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
          if (t && t->defined()) add_tensor(*t);
        }
        break;
      case ArgKind::Scalar:
        if (!v.isNone() && !special_scalar(v.toScalar())) {  // 0 and 1 are constants
          add_scalar(v.toScalar());
        }
        break;
      case ArgKind::ScalarList:
        for (const c10::IValue &e : v.toListRef()) add_scalar(e.toScalar());
        break;
      default:
        break;
    }
  }
  if (call.info->random) {
    in.scalar_slot(&seed, sizeof seed);
    in.scalar_slot(&offset, sizeof offset);
  }
  if (tensors) tensors->resize(in.ptrs.size());
}

}  // namespace

at::Tensor to_meta(const at::Tensor &t) {
  if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

namespace {

// Runs PyTorch's meta kernel: result shapes/dtypes/strides, and PyTorch's own errors.
std::vector<at::Tensor> meta_run(const c10::OperatorHandle &op, const Call &call) {
  torch::jit::Stack stack;
  for (size_t i = 0; i < call.args.size(); i++) {
    const c10::IValue &v = call.args[i];
    switch (call.info->kinds[i]) {
      case ArgKind::Tensor:
      case ArgKind::Out:
        stack.emplace_back(v.isTensor() ? c10::IValue(to_meta(v.toTensor())) : v);
        break;
      case ArgKind::TensorList: {
        std::vector<at::Tensor> l;
        for (const at::Tensor &t : v.toTensorList()) l.push_back(to_meta(t));
        stack.emplace_back(l);
        break;
      }
      case ArgKind::OptTensorList: {
        c10::List<std::optional<at::Tensor>> l;
        for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
          l.push_back(t ? std::optional<at::Tensor>(to_meta(*t)) : std::nullopt);
        }
        stack.emplace_back(l);
        break;
      }
      case ArgKind::Static:
        if (v.isDevice() && v.toDevice().type() == kTpu) {
          stack.emplace_back(c10::Device(c10::kMeta));
          break;
        }
        stack.push_back(v);
        break;
      default:
        stack.push_back(v);
        break;
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
  std::vector<at::Tensor> outs;
  for (const c10::IValue &r : stack) {
    if (r.isNone()) {
      outs.emplace_back();  // an undefined result (e.g. a gradient nobody asked for)
    } else if (r.isTensor()) {
      outs.push_back(r.toTensor());
    } else if (r.isTensorList()) {  // a foreach op's results, one output each
      for (const at::Tensor &t : r.toTensorList()) outs.push_back(t);
    } else {
      throw Unsupported("non-tensor result");
    }
  }
  return outs;
}

bool graph_is_elementwise(const tpu_graph_t *g) {
  for (int i = 0; i < tpu_graph_num_nodes(g); i++) {
    tpu_op_t op = tpu_graph_node(g, i)->op;
    switch (tpu_op_family(op)) {
      case TPU_FAMILY_UNARY:
      case TPU_FAMILY_BINARY:
      case TPU_FAMILY_COMPARE:
        break;
      case TPU_FAMILY_LEAF:
        if (op == TPU_OP_RNG) return false;
        break;
      default:
        if (op != TPU_OP_BROADCAST_IN_DIM && op != TPU_OP_RESHAPE) return false;
    }
  }
  return true;
}

// What the engine must remember about an executable beyond the C program: which results
// are undefined, and which arguments receive the trailing outputs (updates).
struct ProgramInfo {
  std::vector<bool> undefined;        // per return (per element of a Tensor[] return)
  std::vector<bool> complex;          // per defined return: a complex tensor, whose output
                                      // holds its (real, imaginary) pairs (IrLayout)
  std::vector<uint64_t> update_args;  // outputs after the defined returns write these
                                      // (update_code: an argument or a list element)
  OpGraph graph;  // the lowered graph, which fused mode inlines
};

// An update's target as one number: argument |arg| (elem < 0) or element |elem| of the
// TensorList argument |arg|.
uint64_t update_code(size_t arg, int64_t elem = -1) {
  return static_cast<uint64_t>(arg) | (static_cast<uint64_t>(elem + 1) << 32);
}

at::Tensor update_target(const Call &call, uint64_t code) {
  const c10::IValue &v = call.args[code & 0xffffffffu];
  if (code >> 32 == 0) return v.toTensor();
  return v.toTensorList().get((code >> 32) - 1);
}

// The results a call returns: one per element of its first list for a Tensor[] return.
size_t num_results(const Call &call) {
  if (!call.info->list_return) return call.info->return_alias.size();
  for (const c10::IValue &v : call.args) {
    if (v.isTensorList()) return v.toTensorList().size();
  }
  return 0;
}

std::mutex g_programs_mu;
std::unordered_map<const tpu_executable_t *, ProgramInfo> g_programs;

// ProgramInfo's fields as the disk cache's extra bytes: u32 count, one byte per undefined
// flag; u32 count, one byte per complex flag; u32 count, u64 per update (update_code).
std::vector<unsigned char> encode_program(const ProgramInfo &prog) {
  std::vector<unsigned char> out;
  auto put = [&](const void *p, size_t n) {
    out.insert(out.end(), static_cast<const unsigned char *>(p),
               static_cast<const unsigned char *>(p) + n);
  };
  uint32_t n = static_cast<uint32_t>(prog.undefined.size());
  put(&n, sizeof n);
  for (bool u : prog.undefined) out.push_back(u ? 1 : 0);
  n = static_cast<uint32_t>(prog.complex.size());
  put(&n, sizeof n);
  for (bool c : prog.complex) out.push_back(c ? 1 : 0);
  n = static_cast<uint32_t>(prog.update_args.size());
  put(&n, sizeof n);
  for (uint64_t x : prog.update_args) put(&x, sizeof x);
  return out;
}

// The inverse, checked against the call it must serve: false if the bytes do not fit.
bool decode_program(const std::vector<unsigned char> &in, size_t num_returns, size_t num_args,
                    int num_outputs, ProgramInfo *prog) {
  size_t pos = 0;
  auto get = [&](void *p, size_t n) {
    if (in.size() - pos < n) return false;
    std::memcpy(p, in.data() + pos, n);
    pos += n;
    return true;
  };
  uint32_t n = 0;
  if (!get(&n, sizeof n) || n != num_returns) return false;
  int defined = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint8_t u = 0;
    if (!get(&u, 1) || u > 1) return false;
    prog->undefined.push_back(u == 1);
    defined += u == 0;
  }
  if (!get(&n, sizeof n) || n != static_cast<uint32_t>(defined)) return false;
  for (uint32_t i = 0; i < n; i++) {
    uint8_t c = 0;
    if (!get(&c, 1) || c > 1) return false;
    prog->complex.push_back(c == 1);
  }
  if (!get(&n, sizeof n) || n > in.size()) return false;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t a = 0;
    if (!get(&a, sizeof a) || (a & 0xffffffffu) >= num_args) return false;
    prog->update_args.push_back(a);
  }
  return pos == in.size() && defined + static_cast<int>(n) == num_outputs;
}

// Entries are never erased (cached executables live for the process), so the pointer
// stays valid without the lock.
const ProgramInfo *program_info(const tpu_executable_t *exe) {
  static const ProgramInfo none;
  std::lock_guard<std::mutex> lock(g_programs_mu);
  auto it = g_programs.find(exe);
  return it == g_programs.end() ? &none : &it->second;
}


std::mutex g_unsupported_mu;
std::unordered_set<std::string> g_unsupported;  // keys that run through the fallback

std::string key_string(const Key &k) {
  return std::string(k.data().begin(), k.data().end());
}

std::string describe_tensor(const at::Tensor &t) {
  std::ostringstream os;
  if (!t.defined()) return "None";
  os << c10::toString(t.scalar_type()) << t.sizes();
  if (!t.is_contiguous()) os << " strides " << t.strides();
  if (t.device().type() != kTpu) os << " on " << t.device();
  return os.str();
}

// What the cache key saw of each argument, for TORCHTPU_LOG_RECOMPILES.
ArgDescription describe_call(const c10::FunctionSchema &schema, const Call &call) {
  ArgDescription out;
  for (size_t i = 0; i < call.args.size(); i++) {
    const c10::IValue &v = call.args[i];
    std::ostringstream os;
    switch (call.info->kinds[i]) {
      case ArgKind::Tensor:
      case ArgKind::Out:
        os << (v.isTensor() ? describe_tensor(v.toTensor()) : "None");
        break;
      case ArgKind::TensorList:
      case ArgKind::OptTensorList:
        os << "[";
        for (const c10::IValue &e : v.toListRef()) {
          os << (e.isTensor() ? describe_tensor(e.toTensor()) : "None") << " ";
        }
        os << "]";
        break;
      case ArgKind::ScalarList:
        os << "[" << v.toListRef().size() << " scalars]";
        break;
      case ArgKind::Scalar:
        if (v.isNone()) {
          os << "None";
        } else {
          const at::Scalar s = v.toScalar();
          os << (s.isFloatingPoint() ? "float" : "int") << " scalar";
          if (special_scalar(s)) os << " " << (special_scalar(s) == 2 ? 1 : 0);
        }
        break;
      case ArgKind::Generator:
        continue;
      case ArgKind::Static:
        os << v;
        break;
    }
    out.emplace_back(schema.arguments()[i].name(), os.str());
  }
  out.emplace_back("precision", std::to_string(static_cast<int>(call.precision)));
  return out;
}

// Whether a tensor or Scalar argument or a result of the call is complex (its lowering is
// then the op's complex lowering).
bool involves_complex(const Call &call, const std::vector<at::Tensor> &metas) {
  auto complex = [](const at::Tensor &t) {
    return t.defined() && is_complex_pair(t.scalar_type());
  };
  for (const at::Tensor &m : metas) {
    if (complex(m)) return true;
  }
  for (const c10::IValue &v : call.args) {
    if (v.isTensor() && complex(v.toTensor())) return true;
    if (v.isScalar() && v.toScalar().isComplex()) return true;
    if (v.isTensorList()) {
      for (const at::Tensor &t : v.toTensorList()) {
        if (complex(t)) return true;
      }
    }
    if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
        if (t && complex(*t)) return true;
      }
    }
  }
  return false;
}

// Lowers and compiles one call (the cache missed). Returns nullptr if unsupported.
tpu_executable_t *compile_call(const c10::OperatorHandle &op, Call &call,
                               const std::vector<at::Tensor> &metas) {
  if (log_recompiles()) log_signature(call.info->name, describe_call(op.schema(), call));
  auto start = std::chrono::steady_clock::now();
  tpu_graph_t *raw = nullptr;
  check_status(tpu_graph_create(tpu_allocator_system(), &raw), "tpu graph");
  std::unique_ptr<tpu_graph_t, GraphDeleter> g(raw);
  LowerCtx ctx;
  ctx.g = raw;
  ctx.schema = &op.schema();
  ctx.args = &call.args;
  ctx.precision = call.precision;
  ctx.out_meta = metas;
  for (size_t r = 0; r < metas.size(); r++) {
    if (const at::Tensor *o = call.out_target(r)) ctx.out_meta[r] = to_meta(*o);
  }
  add_params(ctx, call);
  if (call.info->random) {
    tpu_shape_t scalar{};
    tpu_graph_parameter(raw, TPU_I64, &scalar, nullptr);  // seed
    tpu_graph_parameter(raw, TPU_I64, &scalar, nullptr);  // offset
  }
  LowerFn fn = involves_complex(call, metas) ? call.info->complex_fn : call.info->fn;
  if (!fn) throw Unsupported("complex tensors");
  fn(ctx);
  TORCH_INTERNAL_ASSERT(ctx.results.size() == metas.size(), call.info->name,
                        ": lowering set ", ctx.results.size(), " results, expected ",
                        metas.size());
  tpu_compile_options_t opts{};
  std::vector<int32_t> alias;  // per output: exact alias (opts points at it)
  bool elementwise = graph_is_elementwise(raw);
  ProgramInfo prog;
  int out_index = 0;
  // |target|: the tensor output |out_index| writes, if it exists already (out=, self,
  // mutated argument or list element) with |target_arg| its argument index.
  auto add_output = [&](tpu_value_t v, const at::Tensor &layout, const at::Tensor *target,
                        int target_arg) {
    IrLayout l = ir_layout(layout);
    if (target && (target->is_conj() || target->is_neg())) {
      throw Unsupported("writes through a lazily conjugated or negated view");
    }
    v = convert(raw, v, l.dtype);
    check_status(tpu_graph_output(raw, v, l.dense ? nullptr : l.strides), "tpu graph output");
    alias.push_back(TPU_OUTPUT_ALIAS_NONE);
    if (target) {
      // The producer may write the output directly unless another argument shares its
      // memory, or (for graphs that are not purely elementwise) the written tensor is
      // itself read, as self of an in-place op or an input that is the same view. When
      // exactly one tensor argument overlaps it, as the same view, that parameter is the
      // output's exact alias: the compiler writes in place when no later step reads it.
      int kind = 0, overlaps = 0;
      tpu_value_t same_view = TPU_NO_VALUE;
      auto overlap = [&](const at::Tensor &t, tpu_value_t value) {
        int k = alias_kind(t, *target);
        kind = std::max(kind, k);
        overlaps += k != 0;
        if (k == 1) same_view = value;
      };
      for (size_t i = 0; i < call.args.size(); i++) {
        ArgKind ak = call.info->kinds[i];
        if (ak == ArgKind::Tensor && call.args[i].isTensor()) {
          overlap(call.args[i].toTensor(), ctx.value[i]);
        } else if (ak == ArgKind::TensorList) {
          auto list = call.args[i].toTensorList();
          for (size_t e = 0; e < list.size(); e++) overlap(list[e], ctx.list[i][e]);
        } else if (ak == ArgKind::Out && static_cast<int>(i) != target_arg) {
          overlap(call.args[i].toTensor(), TPU_NO_VALUE);  // written, not read: no exact alias
        }
      }
      tpu_value_t param = overlaps == 1 && kind == 1 ? same_view : TPU_NO_VALUE;
      if (param != TPU_NO_VALUE && tpu_graph_node(raw, param)->op == TPU_OP_PARAMETER) {
        alias.back() = tpu_graph_node(raw, param)->attrs.param.index;
      } else if (kind == 2 || (kind == 1 && !elementwise)) {
        TORCH_CHECK(out_index < 64, call.info->name, ": output ", out_index,
                    " may alias an input; at most 64 such outputs");
        opts.output_may_alias_input |= 1ull << out_index;
      }
    }
    out_index++;
  };
  // a case the lowering's builders reject (ceil of an integer tensor): the CPU runs it
  if (tpu_graph_status(raw) != TPU_OK) throw Unsupported(tpu_graph_error_message(raw));
  for (size_t r = 0; r < metas.size(); r++) {
    prog.undefined.push_back(!ctx.out_meta[r].defined());
    if (!ctx.out_meta[r].defined()) continue;
    prog.complex.push_back(is_complex_pair(ctx.out_meta[r].scalar_type()));
    TORCH_INTERNAL_ASSERT(ctx.results[r] != TPU_NO_VALUE, call.info->name,
                          ": lowering left result ", r, " unset");
    add_output(ctx.results[r], ctx.out_meta[r], call.out_target(r),
               call.info->list_return ? -1 : call.info->return_alias[r]);
  }
  for (const auto &[arg, v] : ctx.updates) {
    const at::Tensor &t = call.args[arg].toTensor();
    add_output(v, t, &t, static_cast<int>(arg));
    prog.update_args.push_back(update_code(arg));
  }
  for (const LowerCtx::ListUpdate &u : ctx.list_updates) {
    const at::Tensor t = call.args[u.arg].toTensorList().get(u.elem);
    add_output(u.value, t, &t, static_cast<int>(u.arg));
    prog.update_args.push_back(update_code(u.arg, static_cast<int64_t>(u.elem)));
  }
  if (tpu_graph_status(raw) != TPU_OK) {
    TORCH_CHECK(false, call.info->name, ": lowering built a bad graph: ",
                tpu_graph_error_message(raw));
  }
  opts.output_alias_param = alias.data();
  opts.num_output_alias = static_cast<int32_t>(alias.size());
  tpu_executable_t *exe = nullptr;
  check_status(tpu_compile(raw, &opts, tpu_allocator_system(), &exe), call.info->name.c_str());
  cost::on_compile(exe, raw, call.info->name.c_str());  // cost hook: modelled time per gen
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::now() - start).count();
  disk_cache_put(call.key.data(), raw, opts, encode_program(prog));
  prog.graph = OpGraph(g.release());  // kept with the executable, for the life of the process
  {
    std::lock_guard<std::mutex> lock(g_programs_mu);
    g_programs[exe] = prog;
  }
  const auto &k = call.key.data();
  tpu_cache_insert(executable_cache(), k.data(), k.size(), tpu_cache_hash(k.data(), k.size()), exe,
                   static_cast<uint64_t>(ns));
  log_compile(call.info->name, exe, static_cast<uint64_t>(ns));
  return exe;
}

// The call's program as an earlier process compiled it (TORCHTPU_CACHE_DIR): no meta
// kernel, no lowering, only a compile of the stored graph. nullptr if there is none.
tpu_executable_t *load_call(const Call &call) {
  if (!disk_cache_enabled()) return nullptr;
  tpu_graph_t *raw = nullptr;
  std::vector<unsigned char> extra;
  uint64_t ns = 0;
  tpu_executable_t *exe = disk_cache_fetch(call.key.data(), call.info->name, &raw, &extra, &ns);
  if (!exe) return nullptr;
  std::unique_ptr<tpu_graph_t, GraphDeleter> g(raw);
  ProgramInfo prog;
  if (!decode_program(extra, num_results(call), call.args.size(),
                      tpu_executable_num_outputs(exe), &prog)) {
    tpu_executable_release(exe);
    disk_cache_count_error();
    return nullptr;
  }
  prog.graph = OpGraph(g.release());  // kept with the executable, for the life of the process
  {
    std::lock_guard<std::mutex> lock(g_programs_mu);
    g_programs[exe] = prog;
  }
  const auto &k = call.key.data();
  tpu_cache_insert(executable_cache(), k.data(), k.size(), tpu_cache_hash(k.data(), k.size()), exe,
                   ns);
  return exe;
}

struct RunTask {
  tpu_executable_t *exe;
  Inputs inputs;
  std::vector<void *> outputs;
  void *scratch;
};

tpu_status_t run_task(void *arg) {
  auto *t = static_cast<RunTask *>(arg);
  tpu_pool_t *pool = nullptr;
  TPU_RETURN_IF_ERROR(tpu_pool_default(&pool));
  return tpu_executable_run(t->exe, t->inputs.ptrs.data(), t->outputs.data(), t->scratch, pool);
}

void release_task(void *arg) {
  auto *t = static_cast<RunTask *>(arg);
  tpu_executable_release(t->exe);
  delete t;
}

// True if an index argument is a boolean or byte mask (x[mask]): the result's shape
// depends on the data, which a compiled program cannot know.
bool has_mask_index(const std::vector<c10::IValue> &args) {
  for (const c10::IValue &v : args) {
    if (!v.isOptionalTensorList()) continue;
    for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
      if (t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte)) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

// Allocates the task's scratch, queues it on the chip's stream, and frees the scratch at
// once: later users of that memory are queued behind this task (stream order).
void launch_executable(tpu_executable_t *exe, Inputs inputs, std::vector<void *> outputs,
                       c10::Device device, const std::string &name) {
  auto *task = new RunTask{exe, std::move(inputs), std::move(outputs), nullptr};
  tpu_device_t *dev = device_at(device.index());
  size_t scratch_bytes = tpu_executable_scratch_bytes(task->exe);
  if (scratch_bytes) {
    tpu_status_t st = tpu_caching_alloc(tpu_device_allocator(dev), scratch_bytes, &task->scratch);
    if (st != TPU_OK) {
      release_task(task);
      check_status(st, name.c_str());
    }
  }
  cost::on_launch(device.index(), task->exe);  // cost hook: advance the modelled clock
  void *scratch = task->scratch;
  tpu_task_t t{run_task, release_task, task, name.c_str()};  // the stream copies the name
  tpu_status_t st = tpu_stream_enqueue(tpu_device_stream(dev), &t);
  if (scratch) tpu_caching_free(tpu_device_allocator(dev), scratch);
  if (st != TPU_OK) {
    release_task(task);  // a failed enqueue leaves the task with us
    check_status(st, name.c_str());
  }
}

tpu_cache_t *executable_cache() {
  static tpu_cache_t *cache = [] {
    tpu_cache_t *c = nullptr;
    check_status(tpu_cache_create(tpu_allocator_system(), &c), "tpu cache");
    return c;
  }();
  return cache;
}

void Inputs::scalar_slot(const void *value, size_t n) {
  slots.emplace_back();
  std::memcpy(slots.back().data(), value, n);
  ptrs.push_back(slots.back().data());
}

namespace {

void native_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const OpInfo &info = op_info(op);
  cost::OpScope op_scope(info.name.c_str());  // cost hook: names allocations (OOM report)
  Call call;
  call.info = &info;
  const size_t num_args = op.schema().arguments().size();
  call.args.assign(stack->end() - num_args, stack->end());
  call.precision = current_precision();

  DeviceCheck check(info.name, info.cpu_indices);
  for (const c10::IValue &v : call.args) {
    if (v.isTensor()) check.tensor(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor &t : v.toTensorList()) check.tensor(t);
    else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
        if (t) check.tensor(*t);
      }
    } else if (v.isDevice()) check.device_arg(v.toDevice());
  }
  call.device = check.finish();
  c10::DeviceGuard guard(call.device);
  if (info.mask_reads && has_mask_index(call.args)) {  // result shape depends on the data
    run_cpu_fallback(op, stack);
    return;
  }

  if (info.presize) info.presize(call.args);
  tpu_executable_t *exe = nullptr;
  try {
    call.build_key();
  } catch (const Unsupported &) {
    run_cpu_fallback(op, stack);
    return;
  }
  for (int attempt = 0; attempt < 2 && !exe; attempt++) {
    const auto &k = call.key.data();
    exe = tpu_cache_lookup(executable_cache(), k.data(), k.size(), tpu_cache_hash(k.data(), k.size()));
    if (exe) break;
    {
      std::lock_guard<std::mutex> lock(g_unsupported_mu);
      if (g_unsupported.count(key_string(call.key))) {
        run_cpu_fallback(op, stack);
        return;
      }
    }
    if ((exe = load_call(call))) break;
    std::vector<at::Tensor> metas;
    try {
      metas = meta_run(op, call);
    } catch (const Unsupported &) {
      metas.clear();
    } catch (const c10::NotImplementedError &) {
      metas.clear();  // no meta kernel for this op
    }
    if (metas.empty() && !op.schema().returns().empty()) {
      std::lock_guard<std::mutex> lock(g_unsupported_mu);
      g_unsupported.insert(key_string(call.key));
      run_cpu_fallback(op, stack);
      return;
    }
    // out= tensors of the wrong size are resized (PyTorch's resize_output rules), which
    // changes the signature: look again.
    bool resized = false;
    for (size_t r = 0; r < metas.size(); r++) {
      const at::Tensor *o = call.out_target(r);
      if (o && o->sizes() != metas[r].sizes()) {
        at::native::resize_output(*o, metas[r].sizes());
        resized = true;
      }
    }
    if (resized) {
      call.build_key();
      continue;
    }
    try {
      exe = compile_call(op, call, metas);
    } catch (const Unsupported &) {
      std::lock_guard<std::mutex> lock(g_unsupported_mu);
      g_unsupported.insert(key_string(call.key));
      run_cpu_fallback(op, stack);
      return;
    }
  }
  TORCH_INTERNAL_ASSERT(exe, info.name, ": no executable");

  // results: the written argument, or a new tensor laid out as compiled
  const ProgramInfo &prog = *program_info(exe);
  const size_t num_returns = info.list_return ? prog.undefined.size() : info.return_alias.size();
  c10::SmallVector<at::Tensor, 4> results(num_returns);
  int out_index = 0;
  for (size_t r = 0; r < num_returns; r++) {
    if (r < prog.undefined.size() && prog.undefined[r]) continue;
    if (const at::Tensor *o = call.out_target(r)) {
      results[r] = *o;
    } else {
      const tpu_shape_t *s = tpu_executable_output_shape(exe, out_index);
      at::ScalarType dt = to_scalar_type(tpu_executable_output_dtype(exe, out_index));
      // a complex result: the output's pairs, without their dim, in complex elements
      const bool pair = static_cast<size_t>(out_index) < prog.complex.size() &&
                        prog.complex[out_index];
      const int rank = s->rank - (pair ? 1 : 0);
      if (pair) dt = dt == at::kFloat ? at::kComplexFloat : at::kComplexDouble;
      c10::IntArrayRef sizes(s->dims, rank);
      int64_t st[TPU_MAX_RANK];
      auto options = at::TensorOptions().dtype(dt).device(call.device);
      if (tpu_executable_output_strides(exe, out_index, st)) {
        for (int d = 0; pair && d < rank; d++) st[d] /= 2;
        results[r] = at::empty_strided(sizes, c10::IntArrayRef(st, rank), options);
      } else {
        results[r] = at::empty(sizes, options);
      }
    }
    out_index++;
  }
  uint64_t seed = 0, offset = 0;
  RngUse rng;
  if (info.random) {
    int64_t numel = 0;
    for (const at::Tensor &t : results) {  // a complex value draws one number per part
      numel += t.defined() ? t.numel() * (t.is_complex() ? 2 : 1) : 0;
    }
    for (size_t i = 0; i < call.args.size(); i++) {
      if (info.kinds[i] == ArgKind::Generator && call.args[i].isGenerator()) {
        rng.gen = call.args[i].toGenerator();
      }
    }
    rng.used = true;
    rng.count = numel;
    reserve_philox(call.device.index(), rng.gen, numel, &seed, &offset);
  }
  Inputs inputs;
  if (recording(call.device.index())) {
    c10::SmallVector<at::Tensor, 8> tensors, written;  // read per input; written per output
    collect_inputs(call, inputs, seed, offset, &tensors);
    for (const at::Tensor &t : results) {
      if (t.defined()) written.push_back(t);
    }
    for (uint64_t u : prog.update_args) written.push_back(update_target(call, u));
    record_op(call.device, info.name, call.key.data(), prog.graph, inputs, tensors, written, rng);
  } else {
    collect_inputs(call, inputs, seed, offset, nullptr);
    std::vector<void *> outputs;
    for (size_t r = 0; r < num_returns; r++) {
      if (r < prog.undefined.size() && prog.undefined[r]) continue;
      outputs.push_back(results[r].data_ptr());
    }
    for (uint64_t u : prog.update_args) outputs.push_back(update_target(call, u).data_ptr());
    launch_executable(exe, std::move(inputs), std::move(outputs), call.device, info.name);
    if (eager_mode() == EagerMode::Debug) synchronize_device(call.device.index());
    exe = nullptr;
  }
  if (exe) tpu_executable_release(exe);

  torch::jit::drop(*stack, num_args);
  if (info.list_return) {
    stack->emplace_back(c10::List<at::Tensor>(std::vector<at::Tensor>(results.begin(), results.end())));
    return;
  }
  for (at::Tensor &r : results) stack->emplace_back(std::move(r));
}

// ---- copies ---------------------------------------------------------------------------------

// A copy into a tpu tensor, as a program: convert to dst's dtype, broadcast to its shape,
// write through its strides. |src| is a tpu tensor on dst's chip, or (for host-to-device
// copies) a contiguous CPU snapshot the task keeps alive.
std::vector<unsigned char> copy_key(const at::Tensor &src, const at::Tensor &dst,
                                    bool src_on_host) {
  Key key;
  key.pod('C');
  key.pod(src_on_host);
  key.tensor_meta(src);
  key.tensor_meta(dst);
  key.pod(static_cast<int8_t>(alias_kind(src, dst)));
  return key.data();
}

tpu_executable_t *copy_program(const at::Tensor &src, const at::Tensor &dst, bool src_on_host) {
  const std::vector<unsigned char> k = copy_key(src, dst, src_on_host);
  uint64_t hash = tpu_cache_hash(k.data(), k.size());
  tpu_executable_t *exe = tpu_cache_lookup(executable_cache(), k.data(), k.size(), hash);
  if (exe) return exe;
  tpu_graph_t *loaded = nullptr;
  uint64_t load_ns = 0;
  if ((exe = disk_cache_fetch(k, "aten::copy_", &loaded, nullptr, &load_ns))) {
    {
      std::lock_guard<std::mutex> lock(g_programs_mu);
      g_programs[exe].graph = OpGraph(loaded);  // kept with the executable, for life
    }
    tpu_cache_insert(executable_cache(), k.data(), k.size(), hash, exe, load_ns);
    return exe;
  }
  auto start = std::chrono::steady_clock::now();
  tpu_graph_t *raw = nullptr;
  check_status(tpu_graph_create(tpu_allocator_system(), &raw), "tpu graph");
  std::unique_ptr<tpu_graph_t, GraphDeleter> g(raw);
  // complex tensors as (real, imaginary) pairs (IrLayout); a real source gets zeros as its
  // imaginary parts
  IrLayout sl = ir_layout(src), dl = ir_layout(dst);
  tpu_value_t v = tpu_graph_parameter(raw, sl.dtype, &sl.shape, sl.dense ? nullptr : sl.strides);
  v = convert(raw, resolve_bits(raw, src, v), dl.dtype);
  if (is_complex_pair(dst.scalar_type()) && !is_complex_pair(src.scalar_type())) {
    tpu_shape_t one = sl.shape;
    one.dims[one.rank++] = 1;
    const tpu_value_t parts[2] = {tpu_graph_reshape(raw, v, &one), full(raw, dl.dtype, one, 0.0)};
    v = tpu_graph_concatenate(raw, parts, 2, one.rank - 1);
  }
  v = broadcast_to(raw, v, dl.shape);
  check_status(tpu_graph_output(raw, v, dl.dense ? nullptr : dl.strides), "copy_");
  tpu_compile_options_t opts{};
  const int32_t same_view = 0;  // dst is src: the parameter's exact alias (nothing to do)
  if (alias_kind(src, dst) == 1 && !src_on_host) {
    opts.output_alias_param = &same_view;
    opts.num_output_alias = 1;
  } else if (alias_kind(src, dst)) {
    opts.output_may_alias_input = 1;
  }
  check_status(tpu_compile(raw, &opts, tpu_allocator_system(), &exe), "copy_");
  cost::on_compile(exe, raw, "aten::copy_");  // cost hook: modelled time per gen
  uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now() - start).count());
  tpu_cache_insert(executable_cache(), k.data(), k.size(), hash, exe, ns);
  log_compile("copy_", exe, ns);
  disk_cache_put(k, raw, opts);
  {
    std::lock_guard<std::mutex> lock(g_programs_mu);
    g_programs[exe].graph = OpGraph(g.release());
  }
  return exe;
}

}  // namespace

bool native_copy(const at::Tensor &src, const at::Tensor &dst) {
  if (native_disabled() || dst.device().type() != kTpu || dst.numel() == 0) return false;
  bool from_host = src.device().type() == c10::DeviceType::CPU;
  // a lazily conjugated or negated tpu source: the program resolves the bits
  // (resolve_bits); a host one goes through the host copy, which resolves them there
  if (from_host && (src.is_conj() || src.is_neg())) return false;
  if (!from_host && src.device() != dst.device()) return false;
  at::Tensor source = src;
  if (from_host) {
    // snapshot the host data: the caller may overwrite it once copy_ returns
    source = src.contiguous();
    if (source.data_ptr() == src.data_ptr()) source = src.clone();
  }
  tpu_executable_t *exe;
  try {
    // complex into real discards the imaginary parts with a warning: the CPU's copy says so
    if (is_complex_pair(source.scalar_type()) && !is_complex_pair(dst.scalar_type())) {
      return false;
    }
    ir_layout(source);
    ir_layout(dst);
    if (dst.is_conj() || dst.is_neg()) return false;  // written through a lazy view
    exe = copy_program(source, dst, from_host);
  } catch (const Unsupported &) {
    return false;
  }
  c10::DeviceGuard guard(dst.device());
  cost::OpScope op_scope("aten::copy_");  // cost hook: names allocations (OOM report)
  Inputs inputs;
  if (from_host) inputs.host_copies.push_back(source);
  inputs.ptrs.push_back(const_cast<void *>(source.const_data_ptr()));
  if (recording(dst.device().index())) {
    if (from_host) {
      flush_if_pending(dst, "copy from host");  // the copy runs now, before pending reads
    } else {
      const ProgramInfo &prog = *program_info(exe);
      record_op(dst.device(), "aten::copy_", copy_key(source, dst, false), prog.graph, inputs,
                {source}, {dst}, RngUse{});
      tpu_executable_release(exe);
      return true;
    }
  }
  // scratch too: an aliased copy converts via it
  launch_executable(exe, std::move(inputs), {dst.data_ptr()}, dst.device(), "aten::copy_");
  if (eager_mode() == EagerMode::Debug) synchronize_device(dst.device().index());
  return true;
}

namespace {

// Makes native_kernel |op_name|'s tpu kernel (once: an op may have a real and a complex
// lowering, registered in either order).
void register_native_kernel(const char *op_name) {
  static torch::Library *lib = new torch::Library(torch::Library::IMPL, "aten",
                                                  c10::DispatchKey::PrivateUse1, __FILE__,
                                                  __LINE__);
  static std::unordered_set<std::string> registered;
  if (native_disabled() || !registered.insert(op_name).second) return;
  lib->impl(op_name, torch::CppFunction::makeFromBoxedFunction<&native_kernel>());
}

}  // namespace

void register_lowering(const char *op_name, LowerFn fn) {
  lowerings()[op_name] = fn;
  register_native_kernel(op_name);
}

void register_complex_lowering(const char *op_name, LowerFn fn) {
  complex_lowerings()[op_name] = fn;
  lowerings().emplace(op_name, nullptr);  // no real lowering unless one is registered
  register_native_kernel(op_name);
}

void register_lowering_only(const char *op_name, LowerFn fn) { lowerings()[op_name] = fn; }

LowerFn find_lowering(const std::string &op_name) {
  auto it = lowerings().find(op_name);
  return it == lowerings().end() ? nullptr : it->second;
}

void run_native(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  native_kernel(op, stack);
}

void register_presize(const char *op_name, PresizeFn fn) { presizers()[op_name] = fn; }

void register_static_scalar(const char *op_name, const char *arg) {
  static_scalars()[op_name].push_back(arg);
}

void eager_cache_stats(uint64_t *hits, uint64_t *misses, uint64_t *entries,
                       uint64_t *compile_ns) {
  tpu_cache_stats_t s;
  tpu_cache_get_stats(executable_cache(), &s);
  *hits = s.hits;
  *misses = s.misses;
  *entries = s.entries;
  *compile_ns = s.compile_ns;
}

}  // namespace torchtpu
