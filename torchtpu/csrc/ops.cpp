// ops.cpp: the ATen kernels every PyTorch device must provide itself, and the boxed
// fallback that runs every other op on the CPU.
//
// Structural ops (registered for PrivateUse1): empty, empty_strided, as_strided, view,
// _reshape_alias, view_as_real, view_as_complex, unfold (Tensor.unfold: a strided view),
// resize_, set_ (4 overloads), _copy_from, _copy_from_and_resize, _local_scalar_dense, record_stream, _assert_async
// (torch._assert_async, multinomial's checks: a synchronizing read of the flag, as the CPU
// kernel does). They are metadata work or copies; the fallback cannot do them because it is
// itself built on them.
//
// The fallback is zero-copy: tpu memory is host memory, so each tpu tensor argument is
// handed to the CPU kernel as a CPU tensor over the same bytes (a "host alias"). In-place
// ops therefore write straight into tpu storage, and a returned view of an argument
// becomes a tpu view of the same storage. Only `out=` arguments go through a CPU copy,
// because the CPU kernel may resize them. Each op warns once by name and is counted
// (torchtpu.fallback_stats()); TORCHTPU_FALLBACK=error turns the fallback off.

#include <ATen/EmptyTensor.h>
#include <c10/util/accumulate.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_assert_async_native.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cost_hooks.h"
#include "device.h"
#include "device_check.h"
#include "fused.h"
#include "native.h"

extern "C" {
#include "bridge.h"
}

namespace torchtpu {
namespace {

c10::DispatchKeySet tpu_keys() { return c10::DispatchKeySet(c10::DispatchKey::PrivateUse1); }

// The tpu device a factory targets: an explicit index, else the current device.
c10::Device resolve_device(std::optional<c10::Device> device) {
  c10::DeviceIndex index = device && device->has_index() ? device->index() : current_device();
  (void)device_at(index);  // throws a clear error for tpu:N that does not exist
  return c10::Device(kTpu, index);
}

void synchronize_if_tpu(const at::Tensor &t) {
  if (t.defined() && t.device().type() == kTpu) synchronize_device(t.device().index());
}

// ---- host aliases ---------------------------------------------------------------------------

// CPU tensors over tpu bytes. One host storage per tpu storage, so that two views of one
// tpu tensor stay views of one CPU storage (overlap checks and aliasing behave as on CPU),
// and a CPU result that aliases a host storage maps back to the tpu storage.
class HostAliases {
 public:
  at::Tensor alias(const at::Tensor &t) {
    c10::Storage host = host_storage(t);
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        std::move(host), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    at::Tensor out(std::move(impl));
    if (t.is_conj()) out._set_conj(true);
    if (t.is_neg()) out._set_neg(true);
    return out;
  }

  // A tpu view with |r|'s metadata if |r| (a CPU tensor) aliases one of our host
  // storages, else an undefined tensor.
  at::Tensor tpu_view_of(const at::Tensor &r) const {
    auto it = to_tpu_.find(r.storage().unsafeGetStorageImpl());
    if (it == to_tpu_.end()) return at::Tensor();
    // The key set of a tensor over that storage (autograd and view keys included).
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        c10::TensorImpl::VIEW, c10::Storage(it->second.storage), it->second.key_set, r.dtype());
    impl->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
    at::Tensor out(std::move(impl));
    if (r.is_conj()) out._set_conj(true);
    if (r.is_neg()) out._set_neg(true);
    return out;
  }

 private:
  struct TpuSide {
    c10::Storage storage;
    c10::DispatchKeySet key_set;
  };

  c10::Storage host_storage(const at::Tensor &t) {
    const c10::Storage &tpu = t.storage();
    auto it = to_host_.find(tpu.unsafeGetStorageImpl());
    if (it != to_host_.end()) return it->second;
    c10::Storage host(c10::Storage::use_byte_size_t(), tpu.nbytes(),
                      c10::DataPtr(tpu.mutable_data(), c10::Device(c10::DeviceType::CPU)),
                      /*allocator=*/nullptr, /*resizable=*/false);
    to_host_.emplace(tpu.unsafeGetStorageImpl(), host);
    to_tpu_.emplace(host.unsafeGetStorageImpl(),
                    TpuSide{tpu, t.key_set().remove(c10::DispatchKey::Conjugate)
                                     .remove(c10::DispatchKey::Negative)});
    return host;
  }

  std::unordered_map<const c10::StorageImpl *, c10::Storage> to_host_;
  std::unordered_map<const c10::StorageImpl *, TpuSide> to_tpu_;
};

// ---- structural ops --------------------------------------------------------------------------

at::Tensor tpu_empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                     std::optional<at::Layout> layout, std::optional<c10::Device> device,
                     std::optional<bool> /*pin_memory*/,
                     std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "tpu: only strided tensors are supported, got layout ", *layout);
  c10::Device dev = resolve_device(device);
  c10::DeviceGuard guard(dev);
  cost::ShapeScope shape(size, c10::dtype_or_default(dtype));  // names the allocation (OOM)
  return at::detail::empty_generic(size, allocator(), tpu_keys(),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor tpu_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                             std::optional<at::ScalarType> dtype,
                             std::optional<at::Layout> layout,
                             std::optional<c10::Device> device,
                             std::optional<bool> /*pin_memory*/) {
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "tpu: only strided tensors are supported, got layout ", *layout);
  c10::Device dev = resolve_device(device);
  c10::DeviceGuard guard(dev);
  cost::ShapeScope shape(size, c10::dtype_or_default(dtype));  // names the allocation (OOM)
  return at::detail::empty_strided_generic(size, stride, allocator(), tpu_keys(),
                                           c10::dtype_or_default(dtype));
}

at::Tensor tpu_as_strided(const at::Tensor &self, c10::IntArrayRef size,
                          c10::IntArrayRef stride, std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor tpu_view(const at::Tensor &self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor tpu_reshape_alias(const at::Tensor &self, c10::IntArrayRef size,
                             c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor &tpu_resize_(const at::Tensor &self, c10::IntArrayRef size,
                              std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());  // new storage comes from self's chip
  int64_t numel = c10::multiply_integers(size);
  size_t needed = static_cast<size_t>(self.storage_offset() + numel) * self.itemsize();
  size_t have = self.storage().nbytes();
  if (have > 0 && have < needed) {  // the storage grows: its old bytes are copied on the host
    check_implicit_sync([] { return std::string("aten::resize_ (growing a storage)"); });
    flush_if_pending(self, "resize");
    synchronize_if_tpu(self);
  }
  return at::native::resize_(self, size, memory_format);
}

at::Tensor &tpu_set_storage_offset(at::Tensor &self, c10::Storage source, int64_t offset,
                                   c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, std::move(source), offset, size, stride);
}

at::Tensor &tpu_set_storage(at::Tensor &self, c10::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor &tpu_set_tensor(at::Tensor &self, const at::Tensor &source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor &tpu_set_empty(at::Tensor &self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, allocator(), /*resizable=*/true);
  return at::native::set_storage_cpu_(self, std::move(storage), 0, {0}, {});
}

// Copies between cpu and tpu, or between chips: both sides are host memory, so the CPU
// copy kernel does the work (dtype conversion, strides, broadcasting) on host aliases.
at::Tensor tpu_copy_from(const at::Tensor &self, const at::Tensor &dst, bool /*non_blocking*/) {
  for (const at::Tensor *t : {&self, &dst}) {
    c10::DeviceType type = t->device().type();
    TORCH_CHECK(type == kTpu || type == c10::DeviceType::CPU, "copy_: cannot copy between ",
                self.device(), " and ", dst.device(), "; tpu copies to and from cpu and tpu");
  }
  if (native_copy(self, dst)) return dst;
  check_implicit_sync(
      [&] { return "aten::copy_ from " + self.device().str() + " to " + dst.device().str(); });
  if (dst.device().type() == c10::DeviceType::CPU) flush_pending(self.device().index(), "copy to host");
  flush_if_pending(dst, "copy");
  synchronize_if_tpu(self);
  synchronize_if_tpu(dst);
  HostAliases host;
  at::Tensor src_h = self.device().type() == kTpu ? host.alias(self) : self;
  at::Tensor dst_h = dst.device().type() == kTpu ? host.alias(dst) : dst;
  dst_h.copy_(src_h);
  return dst;
}

at::Tensor tpu_copy_from_and_resize(const at::Tensor &self, const at::Tensor &dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return tpu_copy_from(self, dst, false);
}

at::Scalar tpu_local_scalar_dense(const at::Tensor &self) {
  check_implicit_sync([] { return std::string("aten::_local_scalar_dense (Tensor.item())"); });
  if (self.device().type() == kTpu) flush_pending(self.device().index(), "item");
  synchronize_if_tpu(self);
  HostAliases host;
  return at::_local_scalar_dense(host.alias(self));
}

// All of a chip's streams run in order on one queue, so a block is never reused early.
void tpu_record_stream(at::Tensor &, c10::Stream) {}

// ---- the CPU fallback ------------------------------------------------------------------------

std::atomic<int> g_fallback_mode{TPU_FALLBACK_WARN};
std::mutex g_stats_mu;
std::unordered_map<std::string, uint64_t> g_fallback_counts;  // op name -> calls
std::unordered_set<std::string> g_warned;                     // ops warned about

bool is_generator_arg(const c10::Argument &arg) {
  auto opt = arg.type()->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

void count_and_maybe_warn(const std::string &name) {
  int mode = g_fallback_mode.load();
  TORCH_CHECK_NOT_IMPLEMENTED(mode != TPU_FALLBACK_ERROR, "tpu: ", name,
                              " has no native tpu kernel yet, and TORCHTPU_FALLBACK=error "
                              "forbids running it on the CPU");
  bool first;
  {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    g_fallback_counts[name]++;
    first = g_warned.insert(name).second;
  }
  if (first && mode == TPU_FALLBACK_WARN) {
    TORCH_WARN("tpu: ", name, " has no native tpu kernel yet; it runs on the CPU "
               "(warned once per op; torchtpu.fallback_stats() counts the calls, "
               "TORCHTPU_FALLBACK=error makes this an error)");
  }
}

// The CPU engine part of a tpu generator's state (without the Philox offset).
at::Tensor cpu_engine_state(const at::Generator &tpu) {
  return at::Tensor(tpu.get<at::CPUGeneratorImpl>()->at::CPUGeneratorImpl::get_state());
}

// One fallback call: the arguments as they were, and what replaced them.
struct FallbackCall {
  HostAliases host;
  std::unordered_map<const c10::TensorImpl *, at::Tensor> alias_to_tpu;  // host alias -> tpu
  std::vector<std::pair<at::Tensor, at::Tensor>> outs;  // (tpu out arg, CPU copy)
  std::vector<std::pair<at::Generator, at::Generator>> gens;  // (tpu gen, CPU stand-in)
  c10::Device device{kTpu, 0};
  at::Tensor saved_cpu_state;  // the CPU default generator's own state, while swapped out

  at::Tensor to_host(const at::Tensor &t, bool is_out) {
    if (!t.defined() || t.device().type() != kTpu) return t;
    at::Tensor h = host.alias(t);
    if (is_out) {
      h = h.clone(at::MemoryFormat::Preserve);  // the CPU kernel may resize an out= tensor
      outs.emplace_back(t, h);
    }
    alias_to_tpu.emplace(h.unsafeGetTensorImpl(), t);
    return h;
  }

  // A CPU generator carrying the state of |tpu_gen| (the device default if undefined).
  at::Generator host_generator(std::optional<at::Generator> tpu_gen) {
    at::Generator gen = tpu_gen && tpu_gen->defined() ? *tpu_gen : default_generator(device.index());
    if (gen.device().type() != kTpu) return gen;
    at::Generator cpu = at::detail::createCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    cpu.set_state(cpu_engine_state(gen));
    gens.emplace_back(gen, cpu);
    return cpu;
  }

  // Maps a CPU result back to the tpu: an argument itself, a view of an argument's
  // storage, or a new tpu tensor holding a copy.
  at::Tensor to_tpu(const at::Tensor &r) {
    if (!r.defined() || r.device().type() != c10::DeviceType::CPU) return r;
    auto it = alias_to_tpu.find(r.unsafeGetTensorImpl());
    if (it != alias_to_tpu.end()) return it->second;
    at::Tensor view = host.tpu_view_of(r);
    if (view.defined()) return view;
    c10::DeviceGuard guard(device);
    at::Tensor out = r.is_non_overlapping_and_dense()
                         ? tpu_empty_strided(r.sizes(), r.strides(), r.scalar_type(),
                                             std::nullopt, device, std::nullopt)
                         : tpu_empty(r.sizes(), r.scalar_type(), std::nullopt, device,
                                     std::nullopt, std::nullopt);
    HostAliases out_host;
    out_host.alias(out).copy_(r);
    return out;
  }

  // For random ops without a Generator argument (native_dropout): the CPU kernel draws
  // from the CPU default generator, so it carries the tpu generator's state meanwhile.
  void swap_in_default_generator() {
    at::Generator tpu = default_generator(device.index());
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock_cpu(cpu.mutex());
    std::lock_guard<std::mutex> lock_tpu(tpu.mutex());
    saved_cpu_state = cpu.get_state();
    cpu.set_state(cpu_engine_state(tpu));
    gens.emplace_back(tpu, cpu);
  }

  void write_back() {
    for (auto &[tpu, cpu] : outs) {
      if (tpu.sizes() != cpu.sizes()) tpu.resize_(cpu.sizes());
      HostAliases fresh;  // resize may have replaced the storage
      fresh.alias(tpu).copy_(cpu);
    }
    for (auto &[tpu, cpu] : gens) {
      std::lock_guard<std::mutex> lock(tpu.mutex());
      at::Tensor state = cpu.get_state();
      tpu.get<at::CPUGeneratorImpl>()->at::CPUGeneratorImpl::set_state(
          *state.unsafeGetTensorImpl());
    }
    if (saved_cpu_state.defined()) {
      at::Generator cpu = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(cpu.mutex());
      cpu.set_state(saved_cpu_state);
    }
  }
};

void tpu_fallback_impl(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  cost::OpScope op_scope(op.schema().name().c_str());  // names allocations (OOM report)
  const c10::FunctionSchema &schema = op.schema();
  const std::string name = c10::toString(op.operator_name());
  check_implicit_sync([&] { return name + " (CPU fallback)"; });
  count_and_maybe_warn(name);

  const size_t num_args = schema.arguments().size();
  auto args = torch::jit::last(stack, num_args);

  // Pass 1: devices.
  DeviceCheck check(name, accepts_cpu_indices(name));
  for (const c10::IValue &v : args) {
    if (v.isTensor()) {
      check.tensor(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor &t : v.toTensorVector()) check.tensor(t);
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
        if (t) check.tensor(*t);
      }
    } else if (v.isDevice()) {
      check.device_arg(v.toDevice());
    }
  }
  FallbackCall call;
  call.device = check.finish();

  // Pass 2: replace tpu arguments with their CPU stand-ins, in place on the stack.
  const size_t base = stack->size() - num_args;
  bool has_generator_arg = false;
  for (size_t i = 0; i < num_args; i++) {
    const c10::Argument &arg = schema.arguments()[i];
    c10::IValue &v = (*stack)[base + i];
    if (v.isTensor()) {
      v = call.to_host(v.toTensor(), arg.is_out());
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> list = v.toTensorVector();
      for (auto &t : list) t = call.to_host(t, arg.is_out());
      v = c10::IValue(list);
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) {
        list.push_back(t ? std::optional<at::Tensor>(call.to_host(*t, false)) : std::nullopt);
      }
      v = c10::IValue(list);
    } else if (v.isDevice() && v.toDevice().type() == kTpu) {
      v = c10::IValue(c10::Device(c10::DeviceType::CPU));
    } else if (is_generator_arg(arg)) {
      has_generator_arg = true;
      v = c10::IValue(call.host_generator(v.isGenerator() ? std::optional(v.toGenerator())
                                                          : std::nullopt));
    }
  }

  if (!has_generator_arg && op.hasTag(at::Tag::nondeterministic_seeded)) {
    call.swap_in_default_generator();
  }

  flush_pending(-1, "fallback");  // the CPU reads and writes memory the pending graphs own
  synchronize_device(call.device.index());
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  call.write_back();

  // Pass 3: results back to the tpu.
  const size_t num_returns = schema.returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); i++) {
    c10::IValue &v = (*stack)[i];
    if (v.isTensor()) {
      v = call.to_tpu(v.toTensor());
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> list = v.toTensorVector();
      for (auto &t : list) t = call.to_tpu(t);
      v = c10::IValue(list);
    }
  }
}

void tpu_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  tpu_fallback_impl(op, stack);
}

}  // namespace

void run_cpu_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  tpu_fallback_impl(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(tpu_empty));
  m.impl("empty_strided", TORCH_FN(tpu_empty_strided));
  m.impl("as_strided", TORCH_FN(tpu_as_strided));
  m.impl("view", TORCH_FN(tpu_view));
  m.impl("_reshape_alias", TORCH_FN(tpu_reshape_alias));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("resize_", TORCH_FN(tpu_resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(tpu_set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(tpu_set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(tpu_set_tensor));
  m.impl("set_", TORCH_FN(tpu_set_empty));
  m.impl("_copy_from", TORCH_FN(tpu_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(tpu_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(tpu_local_scalar_dense));
  m.impl("record_stream", TORCH_FN(tpu_record_stream));
  m.impl("_assert_async", TORCH_FN(at::native::_assert_async_cpu));
  m.impl("_assert_async.msg", TORCH_FN(at::native::_assert_async_msg_cpu));
}

// _copy_from resolves the conjugate and negative bits itself (host aliases carry them into
// the CPU copy), so those keys' materializing fallbacks, which would clone and so copy
// again, must fall through here.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>());
}

}  // namespace torchtpu

// ---- bridge.h: fallback controls -------------------------------------------------------------

extern "C" {

void tpu_bridge_set_fallback_mode(int mode) { torchtpu::g_fallback_mode.store(mode); }
int tpu_bridge_get_fallback_mode(void) { return torchtpu::g_fallback_mode.load(); }

void tpu_bridge_fallback_stats(void (*fn)(void *ctx, const char *op, uint64_t count), void *ctx) {
  std::vector<std::pair<std::string, uint64_t>> copy;
  {
    std::lock_guard<std::mutex> lock(torchtpu::g_stats_mu);
    copy.assign(torchtpu::g_fallback_counts.begin(), torchtpu::g_fallback_counts.end());
  }
  for (const auto &[op, count] : copy) fn(ctx, op.c_str(), count);
}

void tpu_bridge_reset_fallback_stats(void) {
  std::lock_guard<std::mutex> lock(torchtpu::g_stats_mu);
  torchtpu::g_fallback_counts.clear();
}

}  // extern "C"
