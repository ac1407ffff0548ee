// replay_py.cpp: torchtpu._C._replay, compile mode's per-call entry (fused.h: replay).
//
// A compiled call hands its tensors straight to replay() through the CPython API rather
// than as a dispatcher op: boxing a Tensor[] argument into IValues and the results back
// cost ~0.09 us per tensor (15 us of an AdamW step's 150 inputs), a sizeable part of a
// small model's step. Errors from replay (out of memory, a bad input) surface as the
// Python exceptions torch raises for them.
#include <Python.h>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <vector>

#include "fused.h"

namespace {

// _replay(fn, tensors) -> list of result tensors, or None when no plan of |fn| fits them
PyObject *py_replay(PyObject *self, PyObject *args) {
  (void)self;
  HANDLE_TH_ERRORS
  long long fn = 0;
  PyObject *seq = nullptr;
  if (!PyArg_ParseTuple(args, "LO", &fn, &seq)) return nullptr;
  PyObject *fast = PySequence_Fast(seq, "_replay: tensors must be a list or tuple");
  if (!fast) return nullptr;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject **items = PySequence_Fast_ITEMS(fast);
  std::vector<at::Tensor> inputs;
  inputs.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; i++) {
    if (!THPVariable_Check(items[i])) {
      PyErr_Format(PyExc_TypeError, "_replay: argument %zd is %s, not a tensor", i,
                   Py_TYPE(items[i])->tp_name);
      Py_DECREF(fast);
      return nullptr;
    }
    inputs.push_back(THPVariable_Unpack(items[i]));
  }
  Py_DECREF(fast);
  std::vector<at::Tensor> outputs;
  if (!torchtpu::replay(fn, inputs, &outputs)) Py_RETURN_NONE;
  PyObject *list = PyList_New(static_cast<Py_ssize_t>(outputs.size()));
  if (!list) return nullptr;
  for (size_t i = 0; i < outputs.size(); i++) {
    PyObject *t = THPVariable_Wrap(std::move(outputs[i]));
    if (!t) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), t);
  }
  return list;
  END_HANDLE_TH_ERRORS
}

}  // namespace

extern "C" {
PyMethodDef tpu_replay_methods[] = {
    {"_replay", py_replay, METH_VARARGS,
     "Run compiled function fn's plan for these tensors: its results, or None."},
    {nullptr, nullptr, 0, nullptr},
};
}
