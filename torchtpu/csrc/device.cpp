// device.cpp: the PyTorch-facing side of a virtual TPU chip, as glue over the C runtime.
//
// Registers, for DeviceType::PrivateUse1 (renamed "tpu" in Python):
//   - the allocator: tensor storage comes from the chip's caching allocator (HBM arena);
//   - the device guard: current device and stream per thread, events on the chip stream;
//   - the hooks: availability, device count, generators, pinned memory, storage resize;
//   - the generator: a CPUGeneratorImpl living on a tpu device, one default per chip.
// It also implements the bridge.h functions module.c calls. All state that matters lives
// in the C runtime (include/tpu/runtime.h); this file keeps only per-thread selections.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <pthread.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "cost_hooks.h"
#include "device.h"
#include "eager.h"
#include "fused.h"

extern "C" {
#include "bridge.h"
#include "tpu/runtime.h"
}

namespace torchtpu {


// ---- runtime and errors ---------------------------------------------------------------

static std::atomic<bool> g_in_bad_fork{false};
static std::atomic<bool> g_initialized{false};

static void on_fork_child() {
  if (g_initialized.load()) g_in_bad_fork.store(true);
}

void check_status(tpu_status_t st, const char *what) {
  if (st == TPU_OK) return;
  std::string msg = tpu_status_message();
  if (msg.empty()) msg = tpu_status_name(st);
  if (st == TPU_ERR_OUT_OF_MEMORY) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, what, ": ", msg);
  }
  TORCH_CHECK(false, what, ": ", msg);
}

void ensure_init() {
  TORCH_CHECK(!g_in_bad_fork.load(),
              "tpu: cannot use the virtual TPU in a forked subprocess whose parent "
              "had initialized it; use the 'spawn' start method");
  if (g_initialized.load(std::memory_order_acquire)) return;
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, on_fork_child); });
  check_status(tpu_runtime_init(), "tpu runtime init");
  g_initialized.store(true, std::memory_order_release);
}

tpu_device_t *device_at(c10::DeviceIndex index) {
  ensure_init();
  tpu_device_t *dev = nullptr;
  check_status(tpu_device_get(index, &dev), "tpu device");
  return dev;
}

static int device_count_noexcept() noexcept {
  if (g_in_bad_fork.load()) return 0;
  return tpu_runtime_init() == TPU_OK ? tpu_device_count() : 0;
}

void synchronize_device(c10::DeviceIndex index) {
  flush_pending(index, "synchronize");
  tpu_status_t st = tpu_stream_synchronize(tpu_device_stream(device_at(index)));
  if (st == TPU_ERR_OUT_OF_RANGE) {  // an index a kernel found out of range: IndexError
    TORCH_CHECK_INDEX(false, tpu_status_message());
  }
  check_status(st, "tpu");
}

static std::atomic<int> g_sync_debug_mode{TPU_SYNC_DEBUG_OFF};

int sync_debug_mode() { return g_sync_debug_mode.load(std::memory_order_relaxed); }

void report_implicit_sync(int mode, const std::string &what) {
  TORCH_CHECK(mode != TPU_SYNC_DEBUG_ERROR, "tpu: ", what,
              " called a synchronizing tpu operation (torch.tpu.set_sync_debug_mode(\"error\"))");
  TORCH_WARN("tpu: ", what,
             " called a synchronizing tpu operation (torch.tpu.set_sync_debug_mode(\"warn\"))");
}

// ---- current device and stream, per thread ----------------------------------------------

static thread_local c10::DeviceIndex t_current_device = 0;
static thread_local std::array<c10::StreamId, TPU_MAX_CHIPS> t_current_stream{};

c10::DeviceIndex current_device() { return t_current_device; }

static void check_index(c10::DeviceIndex index) { (void)device_at(index); }

void set_current_device(c10::DeviceIndex index) {
  check_index(index);
  t_current_device = index;
}

// ---- allocator ---------------------------------------------------------------------------

static void tpu_delete(void *ptr) {
  if (!ptr) return;
  int index = tpu_device_of_ptr(ptr);
  tpu_device_t *dev = nullptr;
  if (index < 0 || tpu_device_get(index, &dev) != TPU_OK) return;  // runtime already shut down
  tpu_caching_free(tpu_device_allocator(dev), ptr);
}

namespace cost {
std::string oom_report(tpu_caching_allocator_t *ca, int device);  // cost.cpp
}

struct TpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex index = current_device();
    tpu_device_t *dev = device_at(index);
    void *ptr = nullptr;
    // The block remembers which op allocated it and for what tensor (thread-local context
    // set by the engine and by empty/empty_strided), for out-of-memory reports.
    const cost::AllocContext &ctx = cost::alloc_context();
    tpu_alloc_tag_t tag;
    tag.op = ctx.op;
    tag.dtype = nullptr;
    tag.rank = -1;
    if (ctx.sizes && ctx.rank <= TPU_ALLOC_TAG_MAX_RANK) {
      tag.dtype = c10::toString(ctx.dtype);
      tag.rank = static_cast<int>(ctx.rank);
      std::memcpy(tag.dims, ctx.sizes, ctx.rank * sizeof(int64_t));
    }
    tpu_status_t st = tpu_caching_alloc_tagged(tpu_device_allocator(dev), nbytes, &tag, &ptr);
    if (st == TPU_ERR_OUT_OF_MEMORY) {
      std::string msg = tpu_status_message();
      msg += cost::oom_report(tpu_device_allocator(dev), index);
      // named by the op allocating (an eager op, a compiled plan) when there is one
      TORCH_CHECK_WITH(OutOfMemoryError, false, ctx.op ? ctx.op : "", ctx.op ? ": " : "",
                       "tpu allocate: ", msg);
    }
    check_status(st, "tpu allocate");
    if (!ctx.op) {  // the op that fills it is not known yet: the next op names it
      cost::AllocContext &c = cost::alloc_context();
      c.pending = ptr;
      c.pending_allocator = tpu_device_allocator(dev);
    }
    return {ptr, ptr, &tpu_delete, c10::Device(kTpu, index)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tpu_delete; }
  void copy_data(void *dest, const void *src, std::size_t count) const override {
    // Device memory is host memory; wait for queued work that may touch either side.
    check_implicit_sync([] { return std::string("storage copy"); });
    check_status(tpu_runtime_synchronize_all(), "tpu copy_data");
    if (count) std::memcpy(dest, src, count);
  }
};

static TpuAllocator g_allocator;
REGISTER_ALLOCATOR(kTpu, &g_allocator);

c10::Allocator *allocator() { return &g_allocator; }

// Pinned host memory: host memory is already what the chip reads, so pinning only has
// to be remembered, for Tensor.is_pinned() and DataLoader(pin_memory=True).
struct PinnedAllocator final : c10::Allocator {
  std::mutex mu;
  std::unordered_set<const void *> live;

  static void pinned_delete(void *ptr);
  c10::DataPtr allocate(size_t nbytes) override {
    void *ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;  // throws on failure
    std::lock_guard<std::mutex> lock(mu);
    live.insert(ptr);
    return {ptr, ptr, &pinned_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_delete; }
  void copy_data(void *dest, const void *src, std::size_t count) const override {
    if (count) std::memcpy(dest, src, count);
  }
  bool contains(const void *ptr) {
    std::lock_guard<std::mutex> lock(mu);
    return live.count(ptr) != 0;
  }
};

static PinnedAllocator g_pinned;

void PinnedAllocator::pinned_delete(void *ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(g_pinned.mu);
    g_pinned.live.erase(ptr);
  }
  c10::free_cpu(ptr);
}

// ---- generator ------------------------------------------------------------------------------

// A tpu chip's generator. Native random ops use counter-based Philox: (seed, offset),
// where offset counts the numbers drawn so far; the CPU fallback's random ops use the
// inherited CPU engine (its state is lent to a CPU generator for the call, see ops.cpp).
// The state (get_state/set_state, torch.tpu.get_rng_state) holds both.
struct TpuGenerator final : at::CPUGeneratorImpl {
  explicit TpuGenerator(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val)
      : at::CPUGeneratorImpl(seed) {
    device_ = c10::Device(kTpu, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }

  uint64_t philox_offset = 0;

  void set_current_seed(uint64_t seed) override {
    at::CPUGeneratorImpl::set_current_seed(seed);
    philox_offset = 0;
  }
  void set_offset(uint64_t offset) override { philox_offset = offset; }
  uint64_t get_offset() const override { return philox_offset; }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto cpu = at::CPUGeneratorImpl::get_state();
    size_t n = cpu->storage().nbytes();
    at::Tensor state = at::empty({static_cast<int64_t>(n + 8)}, at::kByte);
    std::memcpy(state.data_ptr(), cpu->storage().data(), n);
    std::memcpy(static_cast<char *>(state.data_ptr()) + n, &philox_offset, 8);
    return state.getIntrusivePtr();
  }
  void set_state(const c10::TensorImpl &new_state) override {
    size_t n = new_state.storage().nbytes();
    TORCH_CHECK(n > 8, "tpu generator: RNG state is too small (", n, " bytes)");
    at::Tensor cpu = at::empty({static_cast<int64_t>(n - 8)}, at::kByte);
    std::memcpy(cpu.data_ptr(), new_state.storage().data(), n - 8);
    at::CPUGeneratorImpl::set_state(*cpu.unsafeGetTensorImpl());
    std::memcpy(&philox_offset, static_cast<const char *>(new_state.storage().data()) + n - 8, 8);
  }

 private:
  TpuGenerator *clone_impl() const override {
    auto *gen = new TpuGenerator(device_.index());
    gen->set_state(*get_state());
    return gen;
  }
};

const at::Generator &default_generator(c10::DeviceIndex index) {
  static std::once_flag once;
  static std::vector<at::Generator> gens;
  ensure_init();
  std::call_once(once, [] {
    for (int i = 0; i < tpu_device_count(); i++) gens.push_back(at::make_generator<TpuGenerator>(i));
  });
  if (index < 0) index = current_device();
  check_index(index);
  return gens[index];
}

// ---- device guard: devices, streams, events --------------------------------------------

// Every PyTorch stream id of a chip runs on the chip's one in-order C stream, so any
// order PyTorch asks for (record/wait between streams) holds by construction.
static std::atomic<c10::StreamId> g_next_stream_id{1};

static tpu_stream_t *chip_stream(c10::DeviceIndex index) {
  return tpu_device_stream(device_at(index));
}

struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "tpu guard got a ", d.type(), " device");
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "tpu guard got a ", d.type(), " device");
    set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < TPU_MAX_CHIPS) t_current_device = d.index();
  }

  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, d, t_current_stream[d.index()]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return getNewStream(d, 0);
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    check_index(d.index());
    return c10::Stream(c10::Stream::UNSAFE, d, g_next_stream_id.fetch_add(1));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    check_index(s.device_index());
    c10::StreamId old = t_current_stream[s.device_index()];
    t_current_stream[s.device_index()] = s.id();
    return c10::Stream(c10::Stream::UNSAFE, s.device(), old);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_noexcept());
  }

  void record(void **event, const c10::Stream &stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "tpu event: recording on tpu:", (int)stream.device_index(),
                " an event that belongs to tpu:", (int)device_index);
    flush_pending(stream.device_index(), "event record");  // the event follows recorded ops
    tpu_stream_t *s = chip_stream(stream.device_index());
    if (*event == nullptr) {
      tpu_event_t *ev = nullptr;
      check_status(tpu_event_create(tpu_allocator_system(), &ev), "tpu event create");
      *event = ev;
    }
    check_status(tpu_event_record(static_cast<tpu_event_t *>(*event), s), "tpu event record");
  }
  void block(void *event, const c10::Stream &stream) const override {
    if (!event) return;
    check_status(tpu_stream_wait_event(chip_stream(stream.device_index()),
                                       static_cast<tpu_event_t *>(event)),
                 "tpu stream wait_event");
  }
  bool queryEvent(void *event) const override {
    return !event || tpu_event_query(static_cast<tpu_event_t *>(event));
  }
  void destroyEvent(void *event, const c10::DeviceIndex) const noexcept override {
    tpu_event_destroy(static_cast<tpu_event_t *>(event));
  }
  void synchronizeEvent(void *event) const override {
    if (event) tpu_event_synchronize(static_cast<tpu_event_t *>(event));
  }
  double elapsedTime(void *start, void *end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "tpu Event.elapsed_time: both events must be recorded first");
    double ms = 0;
    check_status(tpu_event_elapsed_ms(static_cast<tpu_event_t *>(start),
                                      static_cast<tpu_event_t *>(end), &ms),
                 "tpu Event.elapsed_time");
    return ms;
  }

  bool queryStream(const c10::Stream &stream) const override {
    return tpu_stream_query(chip_stream(stream.device_index()));
  }
  void synchronizeStream(const c10::Stream &stream) const override {
    synchronize_device(stream.device_index());
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    synchronize_device(index);
  }
  void recordDataPtrOnStream(const c10::DataPtr &, const c10::Stream &) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

// ---- hooks -----------------------------------------------------------------------------------

struct TpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_noexcept() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return g_initialized.load() && index >= 0 && index < tpu_device_count();
  }
  void init() const override { ensure_init(); }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count_noexcept());
  }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    c10::DeviceIndex old = current_device();
    if (index >= 0 && index != old) set_current_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  const at::Generator &getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = current_device();
    check_index(index);
    return at::make_generator<TpuGenerator>(index);
  }
  c10::Device getDeviceFromPtr(void *data) const override {
    int index = tpu_device_of_ptr(data);
    TORCH_CHECK(index >= 0, "pointer ", data, " is not in the memory of any tpu chip");
    return c10::Device(kTpu, static_cast<c10::DeviceIndex>(index));
  }
  bool isPinnedPtr(const void *data) const override { return g_pinned.contains(data); }
  c10::Allocator *getPinnedMemoryAllocator() const override { return &g_pinned; }

  // untyped_storage().resize_(n), which FSDP2 uses to free and refill parameters.
  void resizePrivateUse1Bytes(const c10::Storage &storage, size_t newsize) const override {
    c10::StorageImpl *impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "tpu: trying to resize storage that is not resizable");
    if (std::min(newsize, impl->nbytes()) > 0) {
      check_implicit_sync([] { return std::string("untyped_storage().resize_"); });
    }
    c10::DeviceIndex index = impl->device().index();
    c10::DeviceIndex saved = current_device();
    set_current_device(index);
    c10::DataPtr fresh;
    try {
      fresh = g_allocator.allocate(newsize);
    } catch (...) {
      t_current_device = saved;
      throw;
    }
    t_current_device = saved;
    size_t keep = std::min(newsize, impl->nbytes());
    if (keep) {
      synchronize_device(index);
      std::memcpy(fresh.get(), impl->data(), keep);
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

static bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  return true;
}();

}  // namespace torchtpu

// ---- bridge.h ----------------------------------------------------------------------------------

using namespace torchtpu;

// Runs |fn|, turning a C++ exception into a TPU_BRIDGE_ERR_* code and the thread's tpu
// status message (the message without PyTorch's C++ backtrace).
template <typename F>
static int guarded(F fn) {
  try {
    fn();
    return 0;
  } catch (const c10::IndexError &e) {
    tpu_status_set(TPU_ERR_OUT_OF_RANGE, "%s", e.what_without_backtrace());
    return TPU_BRIDGE_ERR_INDEX;
  } catch (const c10::OutOfMemoryError &e) {
    tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s", e.what_without_backtrace());
    return TPU_BRIDGE_ERR_OOM;
  } catch (const c10::Error &e) {
    tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s", e.what_without_backtrace());
    return TPU_BRIDGE_ERR_RUNTIME;
  } catch (const std::exception &e) {
    tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s", e.what());
    return TPU_BRIDGE_ERR_RUNTIME;
  }
}

void torchtpu::reserve_philox(c10::DeviceIndex index, const std::optional<at::Generator> &g,
                              int64_t count, uint64_t *seed, uint64_t *offset) {
  at::Generator gen = g && g->defined() ? *g : default_generator(index);
  TORCH_CHECK(gen.device().type() == kTpu, "Expected a 'tpu' device type for generator but found '",
              gen.device().type(), "'");
  std::lock_guard<std::mutex> lock(gen.mutex());
  auto *impl = gen.get<TpuGenerator>();
  *seed = impl->current_seed();
  *offset = impl->philox_offset;
  impl->philox_offset += static_cast<uint64_t>((count + 3) / 4 * 4);
}

extern "C" {

int tpu_bridge_init(void) { return guarded([] { ensure_init(); }); }
int tpu_bridge_in_bad_fork(void) { return g_in_bad_fork.load() ? 1 : 0; }
int tpu_bridge_current_device(void) { return current_device(); }
int tpu_bridge_set_device(int index) {
  return guarded([index] { set_current_device(static_cast<c10::DeviceIndex>(index)); });
}

void tpu_bridge_set_sync_debug_mode(int mode) { torchtpu::g_sync_debug_mode.store(mode); }
int tpu_bridge_get_sync_debug_mode(void) { return torchtpu::g_sync_debug_mode.load(); }

int tpu_bridge_synchronize(int index) {
  return guarded([index] {
    ensure_init();
    if (index >= 0) {
      synchronize_device(static_cast<c10::DeviceIndex>(index));
    } else {
      flush_pending(-1, "synchronize");
      check_status(tpu_runtime_synchronize_all(), "tpu synchronize");
    }
  });
}

int tpu_bridge_flush(int index, const char *reason) {
  return guarded([index, reason] {
    ensure_init();
    flush_pending(index, reason);
  });
}

static at::CPUGeneratorImpl *gen_impl(int index) {
  return default_generator(static_cast<c10::DeviceIndex>(index)).get<at::CPUGeneratorImpl>();
}

int tpu_bridge_manual_seed(int index, uint64_t seed) {
  return guarded([=] {
    at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(index));
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.get<at::CPUGeneratorImpl>()->set_current_seed(seed);
  });
}

int tpu_bridge_seed(int index, uint64_t *out_seed) {
  return guarded([=] {
    at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(index));
    std::lock_guard<std::mutex> lock(gen.mutex());
    *out_seed = gen.get<at::CPUGeneratorImpl>()->seed();
  });
}

int tpu_bridge_initial_seed(int index, uint64_t *out_seed) {
  return guarded([=] { *out_seed = gen_impl(index)->current_seed(); });
}

int tpu_bridge_get_rng_state(int index, uint8_t *buf, size_t *inout_size) {
  return guarded([=] {
    at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(index));
    std::lock_guard<std::mutex> lock(gen.mutex());
    auto state = gen.get<at::CPUGeneratorImpl>()->get_state();
    size_t n = state->storage().nbytes();
    if (buf) {
      TORCH_CHECK(*inout_size >= n, "rng state buffer too small");
      std::memcpy(buf, state->storage().data(), n);
    }
    *inout_size = n;
  });
}

int tpu_bridge_set_rng_state(int index, const uint8_t *buf, size_t size) {
  return guarded([=] {
    at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(index));
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Tensor state = at::empty({static_cast<int64_t>(size)}, at::kByte);
    std::memcpy(state.data_ptr(), buf, size);
    gen.get<at::CPUGeneratorImpl>()->set_state(*state.unsafeGetTensorImpl());
  });
}

}  // extern "C"
