/* module.c: torchtpu._C, the CPython module over the C runtime and the C++ bridge.
 *
 * Plain CPython C API (no pybind11): devices, synchronization, memory statistics,
 * chip properties, random state and fallback controls. Python-level policy (names
 * that mirror torch.cuda, argument defaults) lives in the torchtpu Python modules.
 * Errors: RuntimeError with the runtime's message; torch.OutOfMemoryError is raised
 * from C++ kernels, not here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>

#include "bridge.h"
#include "tpu/runtime.h"

/* ---- helpers ---------------------------------------------------------------------- */

static PyObject *raise_bridge_error(void) {
  PyErr_SetString(PyExc_RuntimeError, tpu_status_message());
  return NULL;
}

/* Raises the exception a bridge error code names (see bridge.h). */
static PyObject *raise_bridge_code(int rc) {
  if (rc == TPU_BRIDGE_ERR_INDEX) {
    PyErr_SetString(PyExc_IndexError, tpu_status_message());
    return NULL;
  }
  if (rc == TPU_BRIDGE_ERR_OOM) {
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *oom = torch ? PyObject_GetAttrString(torch, "OutOfMemoryError") : NULL;
    Py_XDECREF(torch);
    if (oom) {
      PyErr_SetString(oom, tpu_status_message());
      Py_DECREF(oom);
      return NULL;
    }
    PyErr_Clear();
  }
  return raise_bridge_error();
}

/* Resolves an optional index argument (-1 = current device) to a valid device. */
static int device_arg(int index, tpu_device_t **out_dev) {
  if (tpu_bridge_init() != 0) return -1;
  if (index < 0) index = tpu_bridge_current_device();
  if (tpu_device_get(index, out_dev) != TPU_OK) return -1;
  return 0;
}

/* ---- devices ------------------------------------------------------------------------- */

static PyObject *py_init(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  if (tpu_bridge_init() != 0) return raise_bridge_error();
  Py_RETURN_NONE;
}

static PyObject *py_device_count(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  if (tpu_bridge_in_bad_fork() || tpu_bridge_init() != 0) return PyLong_FromLong(0);
  return PyLong_FromLong(tpu_device_count());
}

static PyObject *py_init_error(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  if (tpu_bridge_init() == 0) Py_RETURN_NONE;
  return PyUnicode_FromString(tpu_status_message());
}

static PyObject *py_is_initialized(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return PyBool_FromLong(tpu_runtime_config() != NULL);
}

static PyObject *py_is_in_bad_fork(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return PyBool_FromLong(tpu_bridge_in_bad_fork());
}

static PyObject *py_current_device(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return PyLong_FromLong(tpu_bridge_current_device());
}

static PyObject *py_set_device(PyObject *self, PyObject *args) {
  (void)self;
  int index;
  if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
  if (tpu_bridge_set_device(index) != 0) return raise_bridge_error();
  Py_RETURN_NONE;
}

static PyObject *py_synchronize(PyObject *self, PyObject *args) {
  (void)self;
  int index = -1;
  if (!PyArg_ParseTuple(args, "|i", &index)) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = tpu_bridge_synchronize(index);
  Py_END_ALLOW_THREADS
  if (rc != 0) return raise_bridge_code(rc);
  Py_RETURN_NONE;
}

/* ---- chip properties and memory ---------------------------------------------------------- */

static int dict_set(PyObject *d, const char *key, PyObject *value) {
  if (!value) return -1;
  int rc = PyDict_SetItemString(d, key, value);
  Py_DECREF(value);
  return rc;
}

static PyObject *py_device_properties(PyObject *self, PyObject *args) {
  (void)self;
  int index = -1;
  tpu_device_t *dev;
  if (!PyArg_ParseTuple(args, "|i", &index)) return NULL;
  if (device_arg(index, &dev) != 0) return raise_bridge_error();
  const tpu_chip_spec_t *s = tpu_device_spec(dev);
  const tpu_runtime_config_t *cfg = tpu_runtime_config();
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  PyObject *topo = PyTuple_New(cfg->topology_ndim);
  if (!topo) goto fail;
  for (int i = 0; i < cfg->topology_ndim; i++) {
    PyTuple_SET_ITEM(topo, i, PyLong_FromLong(cfg->topology[i]));
  }
  if (dict_set(d, "index", PyLong_FromLong(tpu_device_index(dev))) ||
      dict_set(d, "chip", PyUnicode_FromString(s->name)) ||
      dict_set(d, "marketing_name", PyUnicode_FromString(s->marketing_name)) ||
      dict_set(d, "total_memory", PyLong_FromUnsignedLongLong(s->hbm_bytes)) ||
      dict_set(d, "hbm_bandwidth", PyFloat_FromDouble(s->hbm_bytes_per_s)) ||
      dict_set(d, "peak_bf16_flops", PyFloat_FromDouble(s->peak_bf16_flops)) ||
      dict_set(d, "tensorcores", PyLong_FromLong(s->tensorcores)) ||
      dict_set(d, "mxu_count", PyLong_FromLong(s->mxu_count)) ||
      dict_set(d, "mxu_dim", PyLong_FromLong(s->mxu_dim)) ||
      dict_set(d, "vmem_bytes", PyLong_FromUnsignedLongLong(s->vmem_bytes)) ||
      dict_set(d, "ici_links", PyLong_FromLong(s->ici_links)) ||
      dict_set(d, "ici_link_bandwidth", PyFloat_FromDouble(s->ici_link_bytes_per_s)) ||
      dict_set(d, "torus_dims", PyLong_FromLong(s->torus_dims)) ||
      dict_set(d, "chip_count", PyLong_FromLong(cfg->chip_count)) ||
      dict_set(d, "topology", topo)) {
    goto fail;
  }
  return d;
fail:
  Py_DECREF(d);
  return NULL;
}

static PyObject *py_memory_stats(PyObject *self, PyObject *args) {
  (void)self;
  int index = -1;
  tpu_device_t *dev;
  if (!PyArg_ParseTuple(args, "|i", &index)) return NULL;
  if (device_arg(index, &dev) != 0) return raise_bridge_error();
  tpu_memory_stats_t st;
  tpu_caching_get_stats(tpu_device_allocator(dev), &st);
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  const struct { const char *key; uint64_t value; } rows[] = {
      {"allocated_bytes", st.allocated_bytes},
      {"allocated_bytes_peak", st.allocated_bytes_peak},
      {"reserved_bytes", st.reserved_bytes},
      {"reserved_bytes_peak", st.reserved_bytes_peak},
      {"requested_bytes", st.requested_bytes},
      {"active_blocks", st.active_blocks},
      {"cached_blocks", st.cached_blocks},
      {"alloc_count", st.alloc_count},
      {"free_count", st.free_count},
      {"cache_hits", st.cache_hits},
      {"arena_allocs", st.arena_allocs},
      {"cache_flushes", st.cache_flushes},
      {"num_ooms", st.num_ooms},
      {"capacity_bytes", st.capacity_bytes},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (dict_set(d, rows[i].key, PyLong_FromUnsignedLongLong(rows[i].value))) {
      Py_DECREF(d);
      return NULL;
    }
  }
  return d;
}

static PyObject *py_reset_peak_memory_stats(PyObject *self, PyObject *args) {
  (void)self;
  int index = -1;
  tpu_device_t *dev;
  if (!PyArg_ParseTuple(args, "|i", &index)) return NULL;
  if (device_arg(index, &dev) != 0) return raise_bridge_error();
  tpu_caching_reset_peak(tpu_device_allocator(dev));
  Py_RETURN_NONE;
}

/* The cap on a chip's reserved bytes (torch.tpu.set_per_process_memory_fraction). */
static PyObject *py_set_memory_limit(PyObject *self, PyObject *args) {
  (void)self;
  int index;
  unsigned long long bytes;
  tpu_device_t *dev;
  if (!PyArg_ParseTuple(args, "iK", &index, &bytes)) return NULL;
  if (device_arg(index, &dev) != 0) return raise_bridge_error();
  tpu_caching_allocator_set_limit(tpu_device_allocator(dev), bytes);
  Py_RETURN_NONE;
}

static PyObject *py_memory_limit(PyObject *self, PyObject *args) {
  (void)self;
  int index;
  tpu_device_t *dev;
  if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
  if (device_arg(index, &dev) != 0) return raise_bridge_error();
  return PyLong_FromUnsignedLongLong(tpu_caching_allocator_limit(tpu_device_allocator(dev)));
}

static PyObject *py_empty_cache(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  if (tpu_bridge_init() != 0) return raise_bridge_error();
  for (int i = 0; i < tpu_device_count(); i++) {
    tpu_device_t *dev;
    if (tpu_device_get(i, &dev) == TPU_OK) tpu_caching_empty_cache(tpu_device_allocator(dev));
  }
  Py_RETURN_NONE;
}

/* ---- random state ------------------------------------------------------------------------ */

static PyObject *py_manual_seed(PyObject *self, PyObject *args) {
  (void)self;
  int index;
  unsigned long long seed;
  if (!PyArg_ParseTuple(args, "iK", &index, &seed)) return NULL;
  if (tpu_bridge_manual_seed(index, seed) != 0) return raise_bridge_error();
  Py_RETURN_NONE;
}

static PyObject *py_seed(PyObject *self, PyObject *args) {
  (void)self;
  int index;
  uint64_t seed;
  if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
  if (tpu_bridge_seed(index, &seed) != 0) return raise_bridge_error();
  return PyLong_FromUnsignedLongLong(seed);
}

static PyObject *py_initial_seed(PyObject *self, PyObject *args) {
  (void)self;
  int index;
  uint64_t seed;
  if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
  if (tpu_bridge_initial_seed(index, &seed) != 0) return raise_bridge_error();
  return PyLong_FromUnsignedLongLong(seed);
}

static PyObject *py_get_rng_state(PyObject *self, PyObject *args) {
  (void)self;
  int index;
  size_t size = 0;
  if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
  if (tpu_bridge_get_rng_state(index, NULL, &size) != 0) return raise_bridge_error();
  PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
  if (!bytes) return NULL;
  if (tpu_bridge_get_rng_state(index, (uint8_t *)PyBytes_AS_STRING(bytes), &size) != 0) {
    Py_DECREF(bytes);
    return raise_bridge_error();
  }
  return bytes;
}

static PyObject *py_set_rng_state(PyObject *self, PyObject *args) {
  (void)self;
  int index;
  Py_buffer buf;
  if (!PyArg_ParseTuple(args, "iy*", &index, &buf)) return NULL;
  int rc = tpu_bridge_set_rng_state(index, buf.buf, (size_t)buf.len);
  PyBuffer_Release(&buf);
  if (rc != 0) return raise_bridge_error();
  Py_RETURN_NONE;
}

/* ---- fallback ------------------------------------------------------------------------------- */

static PyObject *py_set_fallback_mode(PyObject *self, PyObject *args) {
  (void)self;
  int mode;
  if (!PyArg_ParseTuple(args, "i", &mode)) return NULL;
  if (mode < TPU_FALLBACK_WARN || mode > TPU_FALLBACK_ERROR) {
    PyErr_Format(PyExc_ValueError, "fallback mode must be 0, 1 or 2, got %d", mode);
    return NULL;
  }
  tpu_bridge_set_fallback_mode(mode);
  Py_RETURN_NONE;
}

static PyObject *py_get_fallback_mode(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return PyLong_FromLong(tpu_bridge_get_fallback_mode());
}

/* ---- sync debug mode ------------------------------------------------------------------------ */

static PyObject *py_set_sync_debug_mode(PyObject *self, PyObject *args) {
  (void)self;
  int mode;
  if (!PyArg_ParseTuple(args, "i", &mode)) return NULL;
  if (mode < TPU_SYNC_DEBUG_OFF || mode > TPU_SYNC_DEBUG_ERROR) {
    PyErr_Format(PyExc_RuntimeError, "invalid value of debug_mode, expected one of 0,1,2, got %d",
                 mode);
    return NULL;
  }
  tpu_bridge_set_sync_debug_mode(mode);
  Py_RETURN_NONE;
}

static PyObject *py_get_sync_debug_mode(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return PyLong_FromLong(tpu_bridge_get_sync_debug_mode());
}

typedef struct stats_ctx {
  PyObject *dict;
  int failed;
} stats_ctx;

static void add_stat(void *ctx_, const char *op, uint64_t count) {
  stats_ctx *ctx = ctx_;
  if (ctx->failed) return;
  PyObject *v = PyLong_FromUnsignedLongLong(count);
  if (!v || PyDict_SetItemString(ctx->dict, op, v)) ctx->failed = 1;
  Py_XDECREF(v);
}

static PyObject *py_fallback_stats(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  stats_ctx ctx = {PyDict_New(), 0};
  if (!ctx.dict) return NULL;
  tpu_bridge_fallback_stats(add_stat, &ctx);
  if (ctx.failed) {
    Py_DECREF(ctx.dict);
    return NULL;
  }
  return ctx.dict;
}

static PyObject *py_reset_fallback_stats(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  tpu_bridge_reset_fallback_stats();
  Py_RETURN_NONE;
}

/* ---- eager execution -------------------------------------------------------------------- */

static PyObject *py_set_precision(PyObject *self, PyObject *args) {
  (void)self;
  int p;
  if (!PyArg_ParseTuple(args, "i", &p)) return NULL;
  if (p < 0 || p > 2) {
    PyErr_Format(PyExc_ValueError, "precision must be 0, 1 or 2, got %d", p);
    return NULL;
  }
  tpu_bridge_set_precision(p);
  Py_RETURN_NONE;
}

static PyObject *py_get_precision(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return PyLong_FromLong(tpu_bridge_get_precision());
}

static PyObject *py_eager_mode(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return PyLong_FromLong(tpu_bridge_eager_mode());
}

static PyObject *py_set_eager_mode(PyObject *self, PyObject *args) {
  (void)self;
  int m;
  if (!PyArg_ParseTuple(args, "i", &m)) return NULL;
  tpu_bridge_set_eager_mode(m);
  Py_RETURN_NONE;
}

static PyObject *py_fused_stats(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  stats_ctx ctx = {PyDict_New(), 0};
  if (!ctx.dict) return NULL;
  tpu_bridge_fused_stats(add_stat, &ctx);
  if (ctx.failed) {
    Py_DECREF(ctx.dict);
    return NULL;
  }
  return ctx.dict;
}

static PyObject *py_reset_fused_stats(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  tpu_bridge_reset_fused_stats();
  Py_RETURN_NONE;
}

/* Reasons passed from Python are interned here (the bridge keeps the pointer). */
static PyObject *py_flush(PyObject *self, PyObject *args) {
  (void)self;
  int index;
  PyObject *reason;
  if (!PyArg_ParseTuple(args, "iU", &index, &reason)) return NULL;
  PyUnicode_InternInPlace(&reason);
  Py_INCREF(reason); /* interned strings live as long as this reference: forever */
  const char *r = PyUnicode_AsUTF8(reason);
  if (!r) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = tpu_bridge_flush(index, r);
  Py_END_ALLOW_THREADS
  if (rc) return raise_bridge_code(rc);
  Py_RETURN_NONE;
}

static PyObject *py_cache_stats(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  uint64_t hits, misses, entries, ns;
  uint64_t dhits, dmisses, dwrites, derrors;
  tpu_bridge_cache_stats(&hits, &misses, &entries, &ns);
  int disk = tpu_bridge_disk_cache_stats(&dhits, &dmisses, &dwrites, &derrors);
  return Py_BuildValue("{s:K,s:K,s:K,s:d,s:O,s:K,s:K,s:K,s:K}", "hits",
                       (unsigned long long)hits, "misses", (unsigned long long)misses,
                       "entries", (unsigned long long)entries, "compile_seconds",
                       (double)ns / 1e9, "disk", disk ? Py_True : Py_False, "disk_hits",
                       (unsigned long long)dhits, "disk_misses", (unsigned long long)dmisses,
                       "disk_writes", (unsigned long long)dwrites, "disk_errors",
                       (unsigned long long)derrors);
}

/* ---- distributed (process_group.cpp, a pybind11 module) ----------------------------------------- */

PyObject *tpu_dist_make_module(void);

static PyObject *py_dist_module(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return tpu_dist_make_module();
}

/* ---- module ------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"_init", py_init, METH_NOARGS, "Initialize the runtime (raises on a bad configuration)."},
    {"_init_error", py_init_error, METH_NOARGS, "The configuration error, or None."},
    {"_device_count", py_device_count, METH_NOARGS, "Number of chips (0 if unusable)."},
    {"_is_initialized", py_is_initialized, METH_NOARGS, "True once the chips exist."},
    {"_is_in_bad_fork", py_is_in_bad_fork, METH_NOARGS, "True in a forked child."},
    {"_current_device", py_current_device, METH_NOARGS, "This thread's device index."},
    {"_set_device", py_set_device, METH_VARARGS, "Set this thread's device index."},
    {"_synchronize", py_synchronize, METH_VARARGS, "Wait for a chip (-1: all chips)."},
    {"_device_properties", py_device_properties, METH_VARARGS, "Chip spec as a dict."},
    {"_memory_stats", py_memory_stats, METH_VARARGS, "Allocator statistics as a dict."},
    {"_reset_peak_memory_stats", py_reset_peak_memory_stats, METH_VARARGS, "Reset peaks."},
    {"_set_memory_limit", py_set_memory_limit, METH_VARARGS, "Cap a chip's reserved bytes."},
    {"_memory_limit", py_memory_limit, METH_VARARGS, "A chip's cap on reserved bytes."},
    {"_empty_cache", py_empty_cache, METH_NOARGS, "Release cached blocks of every chip."},
    {"_manual_seed", py_manual_seed, METH_VARARGS, "Seed a chip's default generator."},
    {"_seed", py_seed, METH_VARARGS, "Seed a chip's generator non-deterministically."},
    {"_initial_seed", py_initial_seed, METH_VARARGS, "A chip generator's seed."},
    {"_get_rng_state", py_get_rng_state, METH_VARARGS, "A chip generator's state (bytes)."},
    {"_set_rng_state", py_set_rng_state, METH_VARARGS, "Restore a chip generator's state."},
    {"_set_fallback_mode", py_set_fallback_mode, METH_VARARGS, "0 warn, 1 silent, 2 error."},
    {"_get_fallback_mode", py_get_fallback_mode, METH_NOARGS, "0 warn, 1 silent, 2 error."},
    {"_fallback_stats", py_fallback_stats, METH_NOARGS, "{op name: CPU fallback calls}."},
    {"_set_sync_debug_mode", py_set_sync_debug_mode, METH_VARARGS, "0 off, 1 warn, 2 error."},
    {"_get_sync_debug_mode", py_get_sync_debug_mode, METH_NOARGS, "0 off, 1 warn, 2 error."},
    {"_reset_fallback_stats", py_reset_fallback_stats, METH_NOARGS, "Zero the counters."},
    {"_set_precision", py_set_precision, METH_VARARGS, "Matmul precision 0/1/2."},
    {"_get_precision", py_get_precision, METH_NOARGS, "Current matmul precision."},
    {"_eager_mode", py_eager_mode, METH_NOARGS, "0 strict, 1 debug, 2 fused."},
    {"_set_eager_mode", py_set_eager_mode, METH_VARARGS, "0 strict, 1 debug, 2 fused."},
    {"_fused_stats", py_fused_stats, METH_NOARGS, "Fused eager statistics as a dict."},
    {"_reset_fused_stats", py_reset_fused_stats, METH_NOARGS, "Zero the fused statistics."},
    {"_flush", py_flush, METH_VARARGS, "Run the pending graph of a chip (-1: all)."},
    {"_cache_stats", py_cache_stats, METH_NOARGS, "Eager executable cache statistics."},
    {"_dist_module", py_dist_module, METH_NOARGS, "The distributed backend's module."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torchtpu._C", "The virtual TPU runtime and PyTorch bridge.", -1,
    methods, NULL, NULL, NULL, NULL,
};

/* The cost model's functions (torchtpu/csrc/cost.cpp) and compile mode's replay
 * (torchtpu/csrc/replay_py.cpp). */
extern PyMethodDef tpu_cost_methods[];
extern PyMethodDef tpu_replay_methods[];

PyMODINIT_FUNC PyInit__C(void) {
  PyObject *m = PyModule_Create(&module);
  if (m && (PyModule_AddFunctions(m, tpu_cost_methods) < 0 ||
            PyModule_AddFunctions(m, tpu_replay_methods) < 0)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
