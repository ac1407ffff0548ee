"""Every optimizer of PyTorch's optimizer database (torch.testing's optim_db), each of its
configurations, stepped on tpu (eager, and its step compiled with backend="tpu", with
capturable=True where the optimizer has it) against the same optimizer on CPU: three
steps over parameters of several ranks, the parameters compared after them.

LBFGS (a closure that re-evaluates the loss) and SparseAdam (sparse gradients) are not
here; Muon, which takes matrices only, gets matrices (its Newton-Schulz iteration runs in
bfloat16 addmm: it matches the CPU's since bf16 epilogues round once, and missed by up to
1.3e-3 before).
"""
import pytest
import torch
from torch.testing._internal.common_optimizers import optim_db

SKIPPED = {"LBFGS", "SparseAdam"}
INFOS = [info for info in optim_db if info.optim_cls.__name__ not in SKIPPED]


def configs(info):
    # tensor-valued settings (a tensor lr) belong to the CPU tensors they were made with
    return [c.kwargs for c in info.optim_inputs_func(device="cpu")
            if not any(isinstance(v, torch.Tensor) for v in c.kwargs.values())]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("info", INFOS, ids=[i.optim_cls.__name__ for i in INFOS])
def test_optimizer_steps_match_cpu(info, compiled):
    cls = info.optim_cls
    shapes = [(4, 3), (3, 5)] if cls.__name__ == "Muon" else [(4, 3), (3,), (2, 2, 2)]
    for kwargs in configs(info):
        torch.manual_seed(0)
        params = [torch.randn(s, requires_grad=True) for s in shapes]
        on_tpu = [p.detach().to("tpu").requires_grad_() for p in params]
        tpu_kwargs = dict(kwargs)
        if compiled and info.has_capturable_arg:
            tpu_kwargs["capturable"] = True  # the step counters stay on the chip
        reference, optimizer = cls(params, **kwargs), cls(on_tpu, **tpu_kwargs)
        step = torch.compile(optimizer.step, backend="tpu") if compiled else optimizer.step
        for _ in range(3):
            grads = [torch.randn(s) for s in shapes]
            for p, q, g in zip(params, on_tpu, grads):
                p.grad, q.grad = g.clone(), g.to("tpu")
            reference.step()
            with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
                step()
        for p, q in zip(params, on_tpu):
            torch.testing.assert_close(q.detach().cpu(), p.detach(), atol=1e-5, rtol=1e-5,
                                       msg=lambda m: f"{cls.__name__}({tpu_kwargs}): {m}")
