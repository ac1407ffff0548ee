"""torch.compile(backend="tpu"): whole graphs through the same IR, compiler and cache.

Dynamo captures the Python program, AOTAutograd (with the core-ATen decompositions) splits
it into a forward and a backward ATen graph, and each graph is handed to `_TpuGraph`:

* The first call with a given input signature runs the graph once with recording forced
  on (the capture): every ATen op lands in the chip's pending graph through the same
  lowerings eager mode uses, so the whole graph becomes one IR graph, optimized and
  compiled once in C (fusion, memory planning), and cached.
* Later calls with the same signature (dtypes, shapes, strides, aliasing of the inputs)
  replay the plan: bind the input pointers, allocate the outputs, queue one executable.
  No Python runs per op.
* If a graph cannot be captured whole (an op with no lowering runs on the CPU, or a value
  is read on the host), that call still runs correctly, and later calls with that
  signature run the graph op by op in eager mode: a graph break inside the graph.

Optimizers: compile the model (and the loss) and step the optimizer eagerly, or compile
the step too with `capturable=True` (the step counter must live on the tpu, not be a CPU
scalar that Dynamo would specialize on). With `fused=True` PyTorch keeps Dynamo out of the
step, which then runs eagerly as the native fused kernel (torchtpu/csrc/fused_adam.cpp).
"""
import itertools
import os
import sys

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd

_ids = itertools.count(1)
_seen = []  # (kind, graph nodes, input description) of every graph captured, for the log
_log_recompiles = os.environ.get("TORCHTPU_LOG_RECOMPILES", "0") not in ("", "0")


def _describe(t):
    if isinstance(t, torch.Tensor):
        return (str(t.dtype).replace("torch.", ""), tuple(t.shape), tuple(t.stride()),
                str(t.device))
    return (type(t).__name__, t)


def changed_inputs(old, new):
    """What differs between two input descriptions: ["input 2: shape (8, 16) -> (4, 16)"]."""
    fields = ("dtype", "shape", "layout (strides)", "device")
    out = []
    if len(old) != len(new):
        out.append(f"number of inputs {len(old)} -> {len(new)}")
    for i, (a, b) in enumerate(zip(old, new)):
        if a == b:
            continue
        if len(a) == len(b) == 4:
            for name, x, y in zip(fields, a, b):
                if x != y:
                    out.append(f"input {i}: {name} {x} -> {y}")
        else:
            out.append(f"input {i}: {a} -> {b}")
    return out


class _TpuGraph:
    """One AOTAutograd graph (forward or backward) compiled for tpu."""

    def __init__(self, gm, kind):
        self.gm = gm
        self.kind = kind
        self.fn_id = next(_ids)
        self.nodes = len(gm.graph.nodes)
        self.eager = set()      # signatures that could not be captured whole
        self._boxed_call = True  # AOTAutograd passes one list of arguments

    def __call__(self, args):
        args = list(args)
        device = self._device_of(args)
        if device is None:
            return self.gm(*args)
        ok, outs = torch.ops.torchtpu.replay(self.fn_id, args)
        if ok:
            return self._rebuild(outs)
        desc = tuple(_describe(a) for a in args)
        if desc in self.eager:
            return self.gm(*args)
        self._log_capture(desc)
        torch.ops.torchtpu.capture_begin(device, args, False)
        try:
            result = self.gm(*args)
        except BaseException:
            torch.ops.torchtpu.capture_abort(device)
            raise
        flat = list(result) if isinstance(result, (list, tuple)) else [result]
        tensors = [o for o in flat if isinstance(o, torch.Tensor)]
        replayable = all(o is None or isinstance(o, torch.Tensor) for o in flat)
        built = torch.ops.torchtpu.capture_end(device, self.fn_id, args, tensors)
        if built and replayable:
            self.template = [isinstance(o, torch.Tensor) for o in flat]
            _seen.append((self.kind, self.nodes, desc))
        else:
            self.eager.add(desc)
        return result

    @staticmethod
    def _device_of(args):
        index = None
        for a in args:
            if not isinstance(a, torch.Tensor) or a.device.type != "tpu":
                return None
            if index is None:
                index = a.device.index
            elif a.device.index != index:
                return None
        return index

    def _rebuild(self, outs):
        it = iter(outs)
        return [next(it) if is_tensor else None for is_tensor in self.template]

    def stats(self):
        """The latest plan: plans, steps, scratch_bytes (planned peak of intermediates),
        unplanned_bytes (their sum without reuse), nodes (captured IR graph), kernels
        (launches per run after fusion), fused (kernels that compute several ops)."""
        keys = ("plans", "steps", "scratch_bytes", "unplanned_bytes", "nodes", "kernels",
                "fused")
        return dict(zip(keys, torch.ops.torchtpu.plan_stats(self.fn_id)))

    def describe(self):
        """The compiled program, one line per kernel ("FUSED(SUB,MUL,...) f32[8,64] -> ...")."""
        return torch.ops.torchtpu.plan_describe(self.fn_id)

    def _log_capture(self, desc):
        """TORCHTPU_LOG_RECOMPILES=1: one line per capture; for a recompile (Dynamo guard
        failure or a new input signature), what changed against the closest graph seen."""
        if not _log_recompiles:
            return
        similar = [d for kind, nodes, d in _seen if kind == self.kind and nodes == self.nodes]
        if not similar:
            print(f"[torchtpu] compile: {self.kind} graph #{self.fn_id} ({self.nodes} FX nodes)",
                  file=sys.stderr)
            return
        closest = min(similar, key=lambda old: len(changed_inputs(old, desc)))
        why = "; ".join(changed_inputs(closest, desc)) or "same inputs"
        print(f"[torchtpu] recompile: {self.kind} graph #{self.fn_id}: {why}", file=sys.stderr)


graphs = []  # every _TpuGraph made in this process (for tests and statistics)


def _compiler(kind):
    def compile_graph(gm, example_inputs):
        g = _TpuGraph(gm, kind)
        graphs.append(g)
        return g
    return compile_graph


tpu_backend = aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"),
                           inference_compiler=_compiler("inference"),
                           decompositions=core_aten_decompositions(),
                           # in-place updates of graph inputs (an optimizer step) stay in
                           # the graph as copy_ into the input, which capture turns into
                           # outputs written straight into the inputs' memory; without
                           # this, AOTAutograd copies every mutated input back eagerly
                           # after the graph (116 extra launches per AdamW step of GPT)
                           keep_inference_input_mutations=True)
