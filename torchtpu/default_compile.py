"""torch.compile(model) with no backend argument compiles tpu graphs with torchtpu.

The default backend is Inductor. Inductor's "tpu" device generates Pallas kernels for
Google's `torch_tpu` package, which is not this one: on our tensors it fails with
"No module named 'torch_tpu'". A CUDA program calls `torch.compile(model)` and nothing
more, so a graph that computes on tpu goes to `torch.compile(backend="tpu")` instead. Every
other graph still goes to Inductor, unchanged. torch.compile has already checked the
mode and options against Inductor's. This backend compiles every mode the same way:
see torchtpu.compile.check_settings.

The hook wraps the __call__ of torch's Inductor wrapper (the object that torch.compile
makes for backend="inductor"). Importing Dynamo or Inductor here would add seconds to
`import torch`; the wrapper class is already loaded.
"""
import torch
import torch.utils._pytree as pytree


def computes_on_tpu(gm, example_inputs) -> bool:
    """Whether a Dynamo graph computes on tpu: an input, or any value it makes, is a tpu
    tensor (fake tensors carry their device)."""
    def on_tpu(v):
        return isinstance(v, torch.Tensor) and v.device.type == "tpu"
    if any(on_tpu(x) for x in example_inputs):
        return True
    graph = getattr(gm, "graph", None)
    for node in graph.nodes if graph is not None else ():
        if any(on_tpu(v) for v in pytree.tree_leaves(node.meta.get("example_value"))):
            return True
    return False


def install() -> None:
    """Sends torch.compile's default (Inductor) graphs that compute on tpu to
    torchtpu.compile.tpu_backend. Idempotent. Without torch's wrapper class (another
    PyTorch version) it changes nothing."""
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper is None or getattr(wrapper.__call__, "torchtpu_route", False):
        return
    inductor_call = wrapper.__call__

    def call(self, model_, inputs_, *args, **kwargs):
        if computes_on_tpu(model_, inputs_):
            from torchtpu.compile import tpu_backend
            return tpu_backend(model_, inputs_)
        return inductor_call(self, model_, inputs_, *args, **kwargs)

    call.torchtpu_route = True
    wrapper.__call__ = call
