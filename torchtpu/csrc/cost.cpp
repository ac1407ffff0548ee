// cost.cpp: the bridge side of the cost model and of memory attribution.
//
//   - executables get their cost at compile time (tpu_cost_entry_create: every generation
//     at once), kept in a table keyed by executable (cached executables live for the
//     process); a launch finds it through a per-thread cache and advances the chip's
//     modelled clocks (tpu_cost_launch);
//   - the per-thread AllocContext (op name, tensor shape) that the allocator copies into
//     its block tags, and the out-of-memory report built from those tags;
//   - the torchtpu._C functions over include/tpu/cost.h (added to the module by module.c):
//     _cost_totals, _cost_entries, _cost_timeline, _cost_record, _cost_set_detail, ...
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cost_hooks.h"

extern "C" {
#include "tpu/caching_allocator.h"
#include "tpu/cost.h"
#include "tpu/runtime.h"
}

static_assert(TPU_COST_MAX_CHIPS == TPU_MAX_CHIPS, "one clock per chip");

namespace torchtpu::cost {

namespace {

std::mutex g_mu;
std::unordered_map<const tpu_executable_t *, tpu_cost_entry_t *> g_by_exe;
std::atomic<uint64_t> g_epoch{1};

// A launch's lookup: a direct-mapped per-thread cache (a few ns) in front of the table.
tpu_cost_entry_t *find_entry(const tpu_executable_t *exe) {
  struct Slot {
    const tpu_executable_t *exe;
    tpu_cost_entry_t *entry;
    uint64_t epoch;
  };
  thread_local Slot cache[256] = {};
  Slot &slot = cache[(reinterpret_cast<uintptr_t>(exe) >> 6) & 255];
  // every compile starts a new epoch: an executable freed and another compiled at the same
  // address never finds the old entry
  uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  if (slot.exe == exe && slot.epoch == epoch) return slot.entry;
  tpu_cost_entry_t *e = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_by_exe.find(exe);
    if (it != g_by_exe.end()) e = it->second;
  }
  if (e) slot = {exe, e, epoch};
  return e;
}

}  // namespace

void on_compile(const tpu_executable_t *exe, const tpu_graph_t *g, const char *name) {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const tpu_runtime_config_t *cfg = tpu_runtime_config()) {
      tpu_cost_set_active_gen(cfg->chip->gen);
    }
  });
  tpu_cost_entry_t *e = nullptr;
  if (tpu_cost_entry_create(g, name, &e) != TPU_OK) return;  // no cost: the op still runs
  std::lock_guard<std::mutex> lock(g_mu);
  g_by_exe[exe] = e;
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
}

void on_launch(int device, const tpu_executable_t *exe) {
  if (tpu_cost_entry_t *e = find_entry(exe)) tpu_cost_launch(device, e);
}

AllocContext &alloc_context() {
  thread_local AllocContext ctx;
  return ctx;
}

void name_pending(AllocContext &ctx, const char *op) {
  tpu_caching_set_tag_op(ctx.pending_allocator, ctx.pending, op);
  ctx.pending = nullptr;
}

// "\nlargest live tensors on tpu:0: 1.00 GiB f32[16384, 16384] from aten::mm; ..."
std::string oom_report(tpu_caching_allocator_t *ca, int device) {
  tpu_live_block_t top[6];
  size_t n = tpu_caching_largest_live(ca, top, 6);
  if (n == 0) return "";
  std::string out = "\nLargest live tensors on tpu:" + std::to_string(device) + ":";
  for (size_t i = 0; i < n; i++) {
    char size[32];
    out += "\n  ";
    out += tpu_format_bytes(top[i].requested, size, sizeof size);
    if (top[i].tag.rank >= 0) {
      out += "  ";
      out += top[i].tag.dtype ? top[i].tag.dtype : "?";
      out += "[";
      for (int d = 0; d < top[i].tag.rank; d++) {
        out += (d ? ", " : "") + std::to_string(top[i].tag.dims[d]);
      }
      out += "]";
    }
    out += "  created by ";
    out += top[i].tag.op ? top[i].tag.op : "no op yet (an empty tensor, e.g. torch.empty)";
  }
  return out;
}

}  // namespace torchtpu::cost

// ---- torchtpu._C functions ---------------------------------------------------------------

namespace {

PyObject *cost_dict(const tpu_cost_t &c) {
  return Py_BuildValue(
      "{s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:i,s:i,s:i,s:i,s:L,s:L,s:L,s:L,s:d}",
      "seconds", c.seconds, "mxu_seconds", c.mxu_seconds, "hbm_seconds", c.hbm_seconds,
      "overhead_seconds", c.overhead_seconds, "flops", c.flops, "mxu_flops", c.mxu_flops,
      "vpu_flops", c.vpu_flops, "bytes", c.bytes, "bytes_unpadded", c.bytes_unpadded,
      "kernels", c.kernels, "mxu_kernels", c.mxu_kernels, "compute_bound_kernels",
      c.compute_bound_kernels, "passes", c.passes, "pad_batch", (long long)c.pad_batch,
      "pad_m", (long long)c.pad_m, "pad_k", (long long)c.pad_k, "pad_n", (long long)c.pad_n,
      "pad_waste_flops", c.pad_waste_flops);
}

PyObject *gen_list(const double *v) {
  PyObject *l = PyList_New(TPU_CHIP_GEN_COUNT);
  if (!l) return nullptr;
  for (int i = 0; i < TPU_CHIP_GEN_COUNT; i++) PyList_SET_ITEM(l, i, PyFloat_FromDouble(v[i]));
  return l;
}

PyObject *py_cost_totals(PyObject *, PyObject *args) {
  int device = 0;
  if (!PyArg_ParseTuple(args, "i", &device)) return nullptr;
  tpu_cost_chip_totals_t t;
  tpu_cost_chip_totals(device, &t);
  PyObject *clock = gen_list(t.clock);
  if (!clock) return nullptr;
  return Py_BuildValue("{s:N,s:d,s:d,s:K}", "clock", clock, "flops", t.flops, "bytes", t.bytes,
                       "launches", (unsigned long long)t.launches);
}

PyObject *py_cost_entries(PyObject *, PyObject *) {
  PyObject *out = PyList_New(0);
  if (!out) return nullptr;
  for (tpu_cost_entry_t *e = tpu_cost_entries(); e; e = e->next) {
    PyObject *costs = PyList_New(TPU_CHIP_GEN_COUNT);
    if (!costs) return Py_DECREF(out), nullptr;
    for (int g = 0; g < TPU_CHIP_GEN_COUNT; g++) {
      PyObject *d = cost_dict(e->cost[g]);
      if (!d) return Py_DECREF(costs), Py_DECREF(out), nullptr;
      PyList_SET_ITEM(costs, g, d);
    }
    PyObject *item = Py_BuildValue("{s:K,s:s,s:K,s:N}", "id", (unsigned long long)e->id,
                                   "name", e->name, "launches",
                                   (unsigned long long)__atomic_load_n(&e->launches,
                                                                       __ATOMIC_RELAXED),
                                   "cost", costs);
    if (!item || PyList_Append(out, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return out;
}

// [(device, entry_id or 0, name, start_s, end_s, flops, bytes, host_ns), ...] from |first|.
PyObject *py_cost_timeline(PyObject *, PyObject *args) {
  Py_ssize_t first = 0;
  if (!PyArg_ParseTuple(args, "|n", &first)) return nullptr;
  if (first < 0) first = 0;
  std::vector<tpu_cost_event_t> ev(4096);
  size_t avail = tpu_cost_timeline(static_cast<size_t>(first), ev.data(), ev.size());
  if (avail > ev.size()) {
    ev.resize(avail + 1024);
    avail = tpu_cost_timeline(static_cast<size_t>(first), ev.data(), ev.size());
  }
  size_t n = std::min(avail, ev.size());
  PyObject *out = PyList_New(static_cast<Py_ssize_t>(n));
  if (!out) return nullptr;
  for (size_t i = 0; i < n; i++) {
    const tpu_cost_event_t &e = ev[i];
    PyObject *t = Py_BuildValue("(iKsddddK)", e.device,
                                (unsigned long long)(e.entry ? e.entry->id : 0),
                                e.entry ? e.entry->name : e.name, e.start, e.end, e.flops,
                                e.bytes, (unsigned long long)e.host_ns);
    if (!t) return Py_DECREF(out), nullptr;
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), t);
  }
  return out;
}

PyObject *py_cost_timeline_len(PyObject *, PyObject *) {
  return PyLong_FromSize_t(tpu_cost_timeline(0, nullptr, 0));
}

PyObject *py_cost_record(PyObject *, PyObject *args) {
  int device;
  const char *name;
  double seconds, flops = 0, bytes = 0;
  PyObject *per_gen = Py_None;
  if (!PyArg_ParseTuple(args, "isd|ddO", &device, &name, &seconds, &flops, &bytes, &per_gen)) {
    return nullptr;
  }
  double s[TPU_CHIP_GEN_COUNT];
  const double *ps = nullptr;
  if (per_gen != Py_None) {
    PyObject *seq = PySequence_Fast(per_gen, "seconds_per_gen must be a sequence");
    if (!seq) return nullptr;
    if (PySequence_Fast_GET_SIZE(seq) != TPU_CHIP_GEN_COUNT) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "seconds_per_gen needs %d values (v4, v5e, v5p, v6e, v7)",
                   TPU_CHIP_GEN_COUNT);
      return nullptr;
    }
    for (int i = 0; i < TPU_CHIP_GEN_COUNT; i++) {
      s[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) return nullptr;
    ps = s;
  }
  if (tpu_cost_record(device, name, seconds, flops, bytes, ps) != TPU_OK) {
    PyErr_SetString(PyExc_ValueError, tpu_status_message());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject *py_cost_set_detail(PyObject *, PyObject *args) {
  int on;
  if (!PyArg_ParseTuple(args, "p", &on)) return nullptr;
  bool was = tpu_cost_detail();
  tpu_cost_set_detail(on != 0);
  return PyBool_FromLong(was);
}

PyObject *py_cost_detail(PyObject *, PyObject *) { return PyBool_FromLong(tpu_cost_detail()); }

PyObject *py_cost_reset(PyObject *, PyObject *) {
  tpu_cost_reset();
  Py_RETURN_NONE;
}

PyObject *py_cost_host_ns(PyObject *, PyObject *) {
  return PyLong_FromUnsignedLongLong(tpu_cost_host_ns());
}

PyObject *py_cost_active_gen(PyObject *, PyObject *) {
  return PyLong_FromLong(static_cast<long>(tpu_cost_active_gen()));
}

// Chip table as dicts, by generation index: what the report needs for every generation.
PyObject *py_chip_specs(PyObject *, PyObject *) {
  PyObject *out = PyList_New(TPU_CHIP_GEN_COUNT);
  if (!out) return nullptr;
  for (int g = 0; g < TPU_CHIP_GEN_COUNT; g++) {
    const tpu_chip_spec_t *s = tpu_chip_spec(static_cast<tpu_chip_gen_t>(g));
    PyObject *d = Py_BuildValue(
        "{s:s,s:s,s:K,s:d,s:d,s:i,s:i,s:i,s:s,s:s,s:s}", "name", s->name, "marketing_name",
        s->marketing_name, "hbm_bytes", (unsigned long long)s->hbm_bytes, "hbm_bytes_per_s",
        s->hbm_bytes_per_s, "peak_bf16_flops", s->peak_bf16_flops, "mxu_count", s->mxu_count,
        "mxu_dim", s->mxu_dim, "tensorcores", s->tensorcores, "src_hbm", s->src.hbm,
        "src_peak", s->src.peak, "src_mxu", s->src.mxu);
    if (!d) return Py_DECREF(out), nullptr;
    PyList_SET_ITEM(out, g, d);
  }
  return out;
}

}  // namespace

extern "C" {
PyMethodDef tpu_cost_methods[] = {
    {"_cost_totals", py_cost_totals, METH_VARARGS, "A chip's modelled clocks and totals."},
    {"_cost_entries", py_cost_entries, METH_NOARGS, "Every executable's cost per generation."},
    {"_cost_timeline", py_cost_timeline, METH_VARARGS, "Timeline events from an index."},
    {"_cost_timeline_len", py_cost_timeline_len, METH_NOARGS, "Timeline events so far."},
    {"_cost_record", py_cost_record, METH_VARARGS, "Add modelled work to a chip's timeline."},
    {"_cost_set_detail", py_cost_set_detail, METH_VARARGS, "Timeline and counts on/off."},
    {"_cost_detail", py_cost_detail, METH_NOARGS, "True while detail is recorded."},
    {"_cost_reset", py_cost_reset, METH_NOARGS, "Zero clocks, totals and timeline."},
    {"_cost_host_ns", py_cost_host_ns, METH_NOARGS, "The timeline's host clock (ns)."},
    {"_cost_active_gen", py_cost_active_gen, METH_NOARGS, "Generation index of the chips."},
    {"_chip_specs", py_chip_specs, METH_NOARGS, "The chip table, by generation index."},
    {nullptr, nullptr, 0, nullptr},
};
}
