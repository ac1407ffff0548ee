# tp_mlp.py: a DTensor tensor-parallel MLP (ColwiseParallel then RowwiseParallel) on tpu
# against the same MLP unsharded, forward, backward and three SGD steps; with --compile the
# parallel model and its SGD step run through torch.compile(backend="tpu"), then the model
# under no_grad, and the result also counts the plans each kind of graph replays. Run under torchrun; prints
# "@@OK <rank> <json>".
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import torchtpu
from rank_result import report

torchtpu.set_matmul_precision("highest")  # f32 matmuls as on CPU: compare tightly
mesh = init_device_mesh("tpu", (int(os.environ["WORLD_SIZE"]),))  # initializes the "tpu" group
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(16, 8 * world), nn.ReLU(), nn.Linear(8 * world, 12)).to("tpu")
tp = nn.Sequential(nn.Linear(16, 8 * world), nn.ReLU(), nn.Linear(8 * world, 12)).to("tpu")
tp.load_state_dict(ref.state_dict())
parallelize_module(tp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
w0 = tp[0].weight
assert isinstance(w0, DTensor) and w0.to_local().shape == (8, 16), w0.to_local().shape

opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
opt_tp = torch.optim.SGD(tp.parameters(), lr=0.1)
compiled = "--compile" in sys.argv
tp_forward = torch.compile(tp, backend="tpu") if compiled else tp
tp_step = torch.compile(opt_tp.step, backend="tpu") if compiled else opt_tp.step
worst = 0.0
for step in range(3):
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(step)).to("tpu")
    y_ref, y_tp = ref(x), tp_forward(x)
    y_tp_full = y_tp.full_tensor() if isinstance(y_tp, DTensor) else y_tp
    worst = max(worst, (y_ref - y_tp_full).abs().max().item())
    y_ref.square().sum().backward()
    y_tp_full.square().sum().backward()
    for (n, a), b in zip(ref.named_parameters(), tp.parameters()):
        gb = b.grad.full_tensor() if isinstance(b.grad, DTensor) else b.grad
        diff = (a.grad - gb).abs().max().item()
        assert diff < 1e-4, f"rank {rank} step {step}: grad of {n} differs by {diff}"
    opt_ref.step(), tp_step()
    opt_ref.zero_grad(), opt_tp.zero_grad()
assert worst < 1e-4, f"outputs differ by {worst}"
result = {"max_output_diff": worst}
if compiled:
    import torchtpu.compile as tc
    result["plans"] = {}
    for g in tc.graphs:
        result["plans"][g.kind] = result["plans"].get(g.kind, 0) + g.stats()["plans"]
    # inference under no_grad (a new graph: through AOTAutograd too, split at the all_reduce)
    first = len(tc.graphs)
    with torch.no_grad():
        for step in range(2):
            x = torch.randn(5, 16, generator=torch.Generator().manual_seed(9 + step)).to("tpu")
            y_tp = tp_forward(x)
            y_tp = y_tp.full_tensor() if isinstance(y_tp, DTensor) else y_tp
            result["max_output_diff"] = max(result["max_output_diff"],
                                            (ref(x) - y_tp).abs().max().item())
    result["no_grad_plans"] = sum(g.stats()["plans"] for g in tc.graphs[first:])
report(result)
dist.destroy_process_group()
