"""torch.compile(backend="tpu"): whole graphs through the same IR, compiler and cache.

Dynamo captures the Python program, AOTAutograd (with the core-ATen decompositions) splits
it into a forward and a backward ATen graph, and each graph is handed to `_TpuGraph`. A
graph that never touches autograd (an optimizer step, inference under no_grad) skips
AOTAutograd, whose two traces under fake tensors cost most of its compile: `_TpuGraph` runs
Dynamo's graph with the same decompositions applied as it runs (`_Decompose`), and its
attributes (parameters, optimizer state) lifted to inputs, as AOTAutograd would. Then:

* The first call with a given input signature runs the graph once with recording forced
  on (the capture): every ATen op lands in the chip's pending graph through the same
  lowerings eager mode uses, so the whole graph becomes one IR graph, optimized and
  compiled once in C (fusion, memory planning), and cached.
* Later calls with the same signature (dtypes, shapes, strides, aliasing of the inputs)
  replay the plan: bind the input pointers, allocate the outputs, queue one executable.
  No Python runs per op.
* A graph Dynamo traced with dynamic shapes (`dynamic=True`, or the automatic dynamic
  shapes after a size changed) takes its sizes as int arguments: each set of sizes is
  captured once and replayed after, as XLA compiles per shape (up to MAX_SIZE_VARIANTS
  sets per graph; sizes beyond that, and float arguments, run op by op).
* If a graph cannot be captured whole (an op with no lowering runs on the CPU, or a value
  is read on the host), that call still runs correctly, and later calls with that
  signature run the graph op by op in eager mode: a graph break inside the graph.
* A graph that calls collectives (tensor parallelism) is split at them first: each run of
  ops between collectives is captured and replayed as above, and the collectives run
  between them through the process group (_split_at_collectives).

Optimizers: compile the model (and the loss) and step the optimizer eagerly, or compile
the step too with `capturable=True` (the step counter must live on the tpu, not be a CPU
scalar that Dynamo would specialize on). With `fused=True` PyTorch keeps Dynamo out of the
step, which then runs eagerly as the native fused kernel (torchtpu/csrc/fused_adam.cpp).
Over tensor subclasses (FSDP2's DTensor parameters) a graph runs on the subclasses, and its
plan binds and writes the plain tensors they wrap (_inner_tensors).
"""
import itertools
import operator
import os
import sys

import torch
import torch.fx.passes.split_module  # noqa: F401 (_split_at_collectives)
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

from torchtpu import _C, partition

_ids = itertools.count(1)
_seen = []  # (kind, graph nodes, input description) of every graph captured, for the log
_log_recompiles = os.environ.get("TORCHTPU_LOG_RECOMPILES", "0") not in ("", "0")
# Plans per graph traced with dynamic shapes (one per set of sizes); beyond that the graph
# runs op by op for sizes it has not seen.
MAX_SIZE_VARIANTS = 32
LOGGED_CHANGES = 6  # differences a recompile line names
_TENSOR = object()  # an output of a plan's template that is a tensor


def _inner_tensors(args):
    """|args| with each tensor subclass that wraps others (a DTensor: its local shard)
    replaced by the plain tensors it holds, depth first: what a plan reads and writes."""
    out = []
    for a in args:
        if is_traceable_wrapper_subclass(a):
            attrs, _ = a.__tensor_flatten__()  # a DTensor's also names its device mesh
            inner = (getattr(a, name) for name in attrs)
            out.extend(_inner_tensors([t for t in inner if isinstance(t, torch.Tensor)]))
        else:
            out.append(a)
    return out


def _describe(t):
    if isinstance(t, torch.Tensor):
        return (str(t.dtype).replace("torch.", ""), tuple(t.shape), tuple(t.stride()),
                str(t.device))
    return (type(t).__name__, t)


def _keyable(args):
    """Whether every argument that is not a tensor is an int or a bool (the sizes of a graph
    traced with dynamic shapes) or a device mesh (which AOTAutograd passes to a graph over
    DTensors), so that the arguments can key a plan. A float argument (a value Dynamo
    stopped specializing on, a learning rate say) tends to change every call: such a graph
    runs op by op."""
    return all(isinstance(a, torch.Tensor) or type(a) in (int, bool) or _is_mesh(a)
               for a in args)


def _is_mesh(a):
    mesh = getattr(torch.distributed, "device_mesh", None)
    return mesh is not None and isinstance(a, mesh.DeviceMesh)


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
        elif len(a) == len(b) == 2 and a[0] == b[0]:  # an int, float or bool argument
            out.append(f"input {i}: {a[0]} {a[1]} -> {b[1]}")
        else:
            out.append(f"input {i}: {a} -> {b}")
    return out


class _TpuGraph:
    """One graph compiled for tpu: an AOTAutograd forward or backward, or a graph without
    autograd as Dynamo traced it (inference, see _direct)."""

    def __init__(self, gm, kind, lifted=None):
        self.gm = gm
        self.kind = kind
        self.fn_id = next(_ids)  # the plans of calls with tensor arguments only
        self.nodes = len(gm.graph.nodes)
        self.eager = set()      # signatures that could not be captured whole
        self._boxed_call = True  # AOTAutograd passes one list of arguments
        # lifted: given for Dynamo's own graph (no AOTAutograd, see _direct): the tensors
        # it reads as attributes (parameters, optimizer state), inputs of the plan ahead
        # of the arguments as AOTAutograd would lift them; its runs apply the decompositions
        self.direct = lifted is not None
        self.lifted = list(lifted or ())
        # a graph traced with dynamic shapes takes the sizes as int arguments: each set of
        # argument values (a signature, _describe) gets plans of its own, under its own id
        self.variants = {}
        self.templates = {}  # plan id -> its outputs: _TENSOR, None, or an int
        # whether tensor-only calls also key plans on their signature: once two captures
        # under fn_id returned different outputs (ints that follow from the input shapes),
        # one id cannot replay both
        self.by_signature = False
        # whether every argument is a tensor by the graph's own inputs (AOTAutograd records
        # each placeholder's value), so that a call need not check (7 us for 90 arguments)
        examples = [n.meta.get("val", n.meta.get("example_value"))
                    for n in gm.graph.nodes if n.op == "placeholder"]
        # (not a graph with effect tokens: AOTAutograd passes None for each token at run
        # time, though its placeholder's value is a tensor)
        self.tensor_args = (all(isinstance(v, torch.Tensor) for v in examples) and not any(
            n.target is torch.ops.higher_order.with_effects for n in gm.graph.nodes))
        # a graph Dynamo traced over tensor subclasses (an optimizer step over FSDP2's
        # DTensor parameters; AOTAutograd's graphs see the inner tensors already) runs on
        # the subclasses, which compute on the tensors they wrap: those are what a plan
        # binds and writes in place, so its calls pass them (_inner_tensors)
        self.wrapped = any(is_traceable_wrapper_subclass(v) for v in examples + self.lifted)
        self.latest = self.fn_id  # the plan id captured last (stats, describe)

    def _run(self, args):
        if not self.direct:
            return self.gm(*args)
        with _Decompose():
            return self.gm(*args[len(self.lifted):])

    def __call__(self, args):
        args = self.lifted + list(args)
        if not self.by_signature and (self.tensor_args or
                                      all(isinstance(a, torch.Tensor) for a in args)):
            tensors = _inner_tensors(args) if self.wrapped else args
            # replay checks the devices itself (every input on one chip), faster than Python
            outs = _C._replay(self.fn_id, tensors)
            if outs is not None:
                return self._rebuild(self.fn_id, outs)
            fn, desc = self.fn_id, None
        else:
            desc = tuple(_describe(a) for a in args)
            fn = self.variants.get(desc)
            tensors = _inner_tensors(a for a in args if isinstance(a, torch.Tensor))
            if fn is not None:
                outs = _C._replay(fn, tensors)
                if outs is not None:
                    return self._rebuild(fn, outs)
            elif len(self.variants) >= MAX_SIZE_VARIANTS or not _keyable(args):
                return self._run(args)  # sizes that keep changing: op by op
        device = self._device_of(tensors)
        if device is None:
            return self._run(args)
        desc = desc or tuple(_describe(a) for a in args)
        if desc in self.eager:
            return self._run(args)
        if fn is None:
            fn = self.variants[desc] = next(_ids)
        self._log_capture(desc)
        torch.ops.torchtpu.capture_begin(device, tensors, False)
        try:
            result = self._run(args)
        except BaseException:
            torch.ops.torchtpu.capture_abort(device)
            raise
        flat = list(result) if isinstance(result, (list, tuple)) else [result]
        outs = [o for o in flat if isinstance(o, torch.Tensor)]
        # ints among the outputs: sizes a forward saves for its backward, which follow from
        # the signature, so a replay returns them as captured, like the device meshes that
        # a graph over DTensors passes through; a plan returns plain tensors: a subclass
        # among the outputs runs op by op
        template = [_TENSOR if isinstance(o, torch.Tensor) else o for o in flat]
        replayable = (all(o is None or o is _TENSOR or type(o) is int or _is_mesh(o)
                          for o in template)
                      and not any(is_traceable_wrapper_subclass(o) for o in outs))
        built = torch.ops.torchtpu.capture_end(device, fn, tensors, _inner_tensors(outs))
        if built and replayable and self.templates.get(fn, template) == template:
            self.templates[fn] = template
            self.latest = fn
            _seen.append((self.kind, self.nodes, desc))
            return result
        # a plan built now stays under fn, whose template it does not match: no call may
        # reach it through fn again
        if fn != self.fn_id:
            del self.variants[desc]
        elif built:
            self.by_signature = True
            if replayable:
                return result  # the next call captures this signature under its own id
        self.eager.add(desc)
        return result

    @staticmethod
    def _device_of(tensors):
        """The tpu index all of |tensors| are on, or None."""
        index = None
        for a in tensors:
            if a.device.type != "tpu":
                return None
            if index is None:
                index = a.device.index
            elif a.device.index != index:
                return None
        return index

    def _rebuild(self, fn, outs):
        it = iter(outs)
        return [next(it) if o is _TENSOR else o for o in self.templates[fn]]

    def stats(self):
        """The latest plan: plans, steps, scratch_bytes (planned peak of intermediates),
        unplanned_bytes (their sum without reuse), nodes (captured IR graph), kernels
        (launches per run after fusion), fused (kernels that compute several ops),
        two_threads (1: its steps run on two threads while a thread waiting in synchronize
        helps, by a schedule made at compile time), and the host time of its runs so far on
        the virtual TPU: alone_runs and alone_ns (runs begun with no thread waiting in
        synchronize to help: one core), helped_runs and helped_ns (two cores), and
        joined_runs: runs begun alone that a thread starting to wait during the run joined."""
        keys = ("plans", "steps", "scratch_bytes", "unplanned_bytes", "nodes", "kernels",
                "fused", "two_threads", "alone_runs", "alone_ns", "helped_runs", "helped_ns",
                "joined_runs")
        return dict(zip(keys, torch.ops.torchtpu.plan_stats(self.latest)))

    def describe(self):
        """The compiled program, one line per kernel ("FUSED(SUB,MUL,...) f32[8,64] -> ...")."""
        return torch.ops.torchtpu.plan_describe(self.latest)

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
        changes = changed_inputs(closest, desc)
        why = "; ".join(changes[:LOGGED_CHANGES]) or "same inputs"
        if len(changes) > LOGGED_CHANGES:  # a new size changes most of a backward's inputs
            why += f"; and {len(changes) - LOGGED_CHANGES} more"
        print(f"[torchtpu] recompile: {self.kind} graph #{self.fn_id}: {why}", file=sys.stderr)


graphs = []  # every _TpuGraph made in this process (for tests and statistics)


def _new_graph(gm, kind, lifted=None):
    """A _TpuGraph for |gm|, recorded in graphs."""
    g = _TpuGraph(gm, kind, lifted)
    graphs.append(g)
    return g


def _input_value(gm, node):
    """What a placeholder or get_attr node of Dynamo's graph |gm| reads: the placeholder's
    example value, the attribute itself."""
    if node.op == "get_attr":
        return operator.attrgetter(node.target)(gm)
    return node.meta.get("example_value")


# Collectives a graph over DTensors calls (tensor parallelism): they run on the host, through
# the process group, so a plan cannot hold them (_split_at_collectives).
_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional", "_c10d_functional_autograd")


def _is_collective(node):
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and node.target.namespace in _COLLECTIVE_NAMESPACES)


class _Boxed:
    """A graph module called as AOTAutograd calls a compiled graph: one list of arguments."""

    def __init__(self, gm):
        self.gm = gm
        self._boxed_call = True  # per instance: Dynamo's wrappers copy the instance's dict

    def __call__(self, args):
        return self.gm(*args)


class _PlanModule(torch.nn.Module):
    """A part of a split graph, replayed as a plan: called with the arguments one by one."""

    def __init__(self, part):
        super().__init__()
        self.part = part  # a _TpuGraph

    def forward(self, *args):
        return self.part(args)


def _split_at_collectives(gm, kind):
    """A graph that calls collectives, as parts: the runs of ops between collectives become
    plans of their own (_TpuGraph), and the collectives run between them as eager ops. So a
    tensor-parallel layer is a plan, an all_reduce, a plan, as XLA would place the collective
    between two fusions. None when the graph calls none."""
    if not any(_is_collective(n) for n in gm.graph.nodes):
        return None
    part, collective, parts = 0, None, {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        here = _is_collective(node)
        if collective is not None and here != collective:
            part += 1
        collective = here
        parts[node] = (part, here)
    split = torch.fx.passes.split_module.split_module(
        gm, None, lambda node: parts[node][0], keep_original_order=True, tuple_return=True)
    computing = {p for p, here in parts.values() if not here}
    for name, sub in list(split.named_children()):
        if int(name.rsplit("_", 1)[1]) in computing:
            setattr(split, name, _PlanModule(_new_graph(sub, kind)))
    return _Boxed(split)


def _compiler(kind):
    def compile_graph(gm, example_inputs):
        split = _split_at_collectives(gm, kind)
        return split if split is not None else _new_graph(gm, kind)
    return compile_graph


_decompositions = core_aten_decompositions()

aot_backend = aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"),
                           inference_compiler=_compiler("inference"),
                           decompositions=_decompositions,
                           # what the forward saves: the default partitioner, after a
                           # rewrite that lets GELU's backward reuse the forward's erf
                           partition_fn=partition.partition,
                           # in-place updates of graph inputs (an optimizer step) stay in
                           # the graph as copy_ into the input, which capture turns into
                           # outputs written straight into the inputs' memory; without
                           # this, AOTAutograd copies every mutated input back eagerly
                           # after the graph (116 extra launches per AdamW step of GPT)
                           keep_inference_input_mutations=True)


def _functional(op):
    """aten.add_.Tensor -> aten.add.Tensor when the functional form has a decomposition
    (functionalization turns an in-place op into it, then AOTAutograd decomposes it). Not
    for an in-place view op (squeeze_, t_, ...: torch.Tag.inplace_view), which changes the
    tensor's shape rather than its values: copying its functional result back would
    broadcast it into the old shape (matmul of a vector squeezes its product this way)."""
    packet, _, overload = op.__name__.partition(".")
    first = op._schema.arguments[0] if op._schema.arguments else None
    if (not packet.endswith("_") or packet.endswith("__") or first is None
            or first.alias_info is None or not first.alias_info.is_write
            or torch.Tag.inplace_view in op.tags):
        return None
    functional = getattr(getattr(torch.ops.aten, packet[:-1], None), overload, None)
    return functional if functional in _decompositions else None


class _Decompose(TorchDispatchMode):
    """The core-ATen decompositions AOTAutograd applies, applied while a graph runs
    directly: an op with a decomposition (or an in-place op whose functional form has one)
    runs as its decomposition, so the ops our lowerings see, and the results, are those of
    the AOTAutograd path."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        decomposition = _decompositions.get(func)
        if decomposition is not None:
            with self:
                out = decomposition(*args, **kwargs)
            if out is not NotImplemented:
                return out
        functional = _functional(func)
        if functional is not None and isinstance(args[0], torch.Tensor):
            with self:
                out = _decompositions[functional](*args, **kwargs)
            if out is not NotImplemented:
                return args[0].copy_(out)
        return func(*args, **kwargs)


def _without_autograd(gm):
    """Whether running Dynamo's graph can never touch autograd: no output requires grad,
    nothing in the graph changes the grad mode or calls a higher-order op, and if grad is
    enabled (Dynamo guards the mode it compiled for) no tensor the graph reads requires it."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and (
                node.target is torch._C._set_grad_enabled
                or isinstance(node.target, torch._ops.HigherOrderOperator)):
            return False
        if node.op == "output":
            outs = torch.fx.node.map_arg(node.args, lambda n: n.meta.get("example_value"))
            outs = torch.utils._pytree.tree_leaves(outs)
            if any(isinstance(v, torch.Tensor) and v.requires_grad for v in outs):
                return False
        elif node.op in ("placeholder", "get_attr") and torch.is_grad_enabled():
            v = _input_value(gm, node)
            if isinstance(v, torch.Tensor) and v.requires_grad:
                return False
    return True


def _direct(gm):
    """A graph without autograd (an optimizer step, inference under no_grad) goes to
    _TpuGraph as Dynamo traced it: AOTAutograd would only functionalize it, decompose it
    (which _Decompose does as it runs) and lift its attributes, and tracing it twice
    under fake tensors were half of the first compiled GPT step (AdamW's: 1.6 s -> 0.8 s)."""
    lifted = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            v = _input_value(gm, node)
            if isinstance(v, torch.Tensor):
                lifted.append(v)
    g = _new_graph(gm, "inference", lifted)

    def run(*args):
        return g(args)
    return run


def check_settings(mode=None, options=None):
    """torch.compile's `mode` and `options`, accepted as a CUDA program passes them.
    Every mode Inductor knows compiles the same way here: replaying a plan already gives
    one launch per graph and no Python per op, which is what "reduce-overhead" asks of
    CUDA graphs. Options are Inductor's config names; they are accepted and have no effect.
    An unknown mode or option name raises a RuntimeError, as Inductor does."""
    if not mode and not options:
        return
    import torch._inductor as inductor  # only here: importing it takes a second or two
    if mode:
        inductor.list_mode_options(mode)  # RuntimeError: "Unrecognized mode=..."
    known = inductor.config.get_config_copy()
    for key in options or {}:
        if key.replace("-", "_") not in known:
            raise RuntimeError(f"torch.compile(backend=\"tpu\"): unexpected optimization "
                               f"option {key!r} (the options are Inductor's config names: "
                               f"torch._inductor.list_options())")


def _reads_subclasses_only(gm):
    """Whether Dynamo's graph takes tensor subclasses (DTensors) and updates none of its
    inputs in place (no op whose name ends in one underscore)."""
    subclass = False
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            subclass |= is_traceable_wrapper_subclass(_input_value(gm, node))
        elif node.op in ("call_function", "call_method"):
            name = node.target if isinstance(node.target, str) else getattr(
                node.target, "__name__", "")
            if name.endswith("_") and not name.endswith("__"):
                return False
    return subclass


def tpu_backend(gm, example_inputs, mode=None, options=None):
    """torch.compile(backend="tpu"): AOTAutograd for graphs that need autograd (a forward
    and its backward), Dynamo's graph directly for the others, except a graph over DTensors
    that updates nothing (inference of a tensor-parallel model): AOTAutograd turns its
    DTensor ops into plain ops and the collectives they imply, so that it splits into plans
    around them (_split_at_collectives); run directly, a collective would cut its capture.
    (An optimizer step over FSDP2's DTensor parameters runs directly: its ops are local.)
    `mode` and `options` are torch.compile's (check_settings)."""
    check_settings(mode, options)
    if _without_autograd(gm) and not _reads_subclasses_only(gm):
        return _direct(gm)
    return aot_backend(gm, example_inputs)
