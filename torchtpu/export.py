"""torchtpu.export: a PyTorch function or module as a StableHLO program, the format real
TPUs consume (through XLA).

    prog = torchtpu.export(model, (x,))
    prog.text          # StableHLO MLIR text: module @main { func.func public @main(...) }
    prog.constants     # tensors the program reads besides its inputs (parameters, buffers)
    prog.arguments(x)  # numpy arrays for every func argument: the inputs, then the constants

The function is traced with make_fx (fake tensors, core-ATen decompositions), so autograd
inside it (torch.autograd.grad) is traced too: a training step's forward and backward
export as one program. The traced graph then runs once on the virtual TPU with recording
forced on and export mode set, so it goes through the same lowerings as eager and compile
mode; scalars become constants, and the recorded graph is printed instead of run.
"""
from dataclasses import dataclass, field

import torch
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten


@dataclass
class ExportedProgram:
    text: str
    num_inputs: int
    constants: list = field(default_factory=list)

    def arguments(self, *args):
        """numpy arrays for the program's arguments: |args| (as given to export), then the
        constants."""
        flat, _ = tree_flatten(args)
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        if len(tensors) != self.num_inputs:
            raise ValueError(f"torchtpu.export: expected {self.num_inputs} tensor inputs, "
                             f"got {len(tensors)}")
        return [t.detach().cpu().numpy() for t in tensors + list(self.constants)]


def export(fn, example_args, *, name="main", device="tpu"):
    """Traces |fn| (a function or nn.Module) on |example_args| and returns its
    ExportedProgram. Tensor arguments may be on the CPU or the tpu; module parameters and
    buffers should be on the tpu (they become constants)."""
    device = torch.device(device)
    if device.index is None:
        device = torch.device("tpu", torch.tpu.current_device())
    flat, spec = tree_flatten(tuple(example_args))
    inputs = [a.to(device) if isinstance(a, torch.Tensor) else a for a in flat]
    tensor_pos = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]

    def flat_fn(*tensors):
        values = list(inputs)
        for i, t in zip(tensor_pos, tensors):
            values[i] = t
        args = torch.utils._pytree.tree_unflatten(values, spec)
        out, _ = tree_flatten(fn(*args))
        return [o for o in out if isinstance(o, torch.Tensor)]

    tensors = [inputs[i] for i in tensor_pos]
    gm = make_fx(flat_fn, decomposition_table=core_aten_decompositions(),
                 tracing_mode="fake", _allow_non_fake_inputs=True)(*tensors)
    torch.tpu.synchronize(device)
    torch.ops.torchtpu.capture_begin(device.index, tensors, True)
    try:
        outputs = gm(*tensors)
    except BaseException:
        torch.ops.torchtpu.capture_abort(device.index)
        raise
    text, params = torch.ops.torchtpu.capture_export(device.index, list(outputs), name)
    return ExportedProgram(text=text, num_inputs=len(tensors), constants=params[len(tensors):])
