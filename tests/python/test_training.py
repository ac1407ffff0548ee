# Training on tpu matches training on cpu: an MLP with the same initial weights and data is
# trained 20 steps with AdamW (default, for-loop and foreach implementations) and with SGD with
# momentum, on cpu and on tpu; losses agree within 1e-6 at every step and the final weights
# agree too. Gradients and optimizer state live on tpu. fallback_stats() counts the ops that
# ran through the cpu fallback, and its counts grow with more training.
import copy

import pytest
import torch
import torch.nn.functional as F

import torchtpu

from conftest import fallback_ops, run_python_many

TPU0 = torch.device("tpu", 0)
STEPS = 20


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.GELU(),
        torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 4))


def _data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 16, generator=g)
    y = torch.randn(128, 4, generator=g)
    return x, y


def _train(model, make_opt, device):
    x, y = _data()
    x, y = x.to(device), y.to(device)
    opt = make_opt(model.parameters())
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, opt


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05),
    "adamw_forloop": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05, foreach=False),
    "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05, foreach=True),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=5e-2, momentum=0.9, nesterov=True,
                                               weight_decay=1e-4),
}


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_training_matches_cpu(opt_name):
    cpu_model = _mlp()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    for p, q in zip(cpu_model.parameters(), tpu_model.parameters()):
        assert q.device == TPU0 and torch.equal(p.detach(), q.detach().cpu())

    cpu_losses, _ = _train(cpu_model, OPTIMIZERS[opt_name], "cpu")
    tpu_losses, tpu_opt = _train(tpu_model, OPTIMIZERS[opt_name], "tpu")

    assert cpu_losses[-1] < cpu_losses[0]          # the model does learn
    diffs = [abs(a - b) for a, b in zip(cpu_losses, tpu_losses)]
    assert max(diffs) <= 1e-6, f"losses cpu={cpu_losses} tpu={tpu_losses}"
    for (name, p), q in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        assert q.device == TPU0
        assert q.grad is not None and q.grad.device == TPU0, name
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-6, atol=1e-6,
                                   msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-6, atol=1e-6)
    for state in tpu_opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                assert v.device == TPU0


def test_fallback_stats_count_training_ops():
    stats = torchtpu.fallback_stats()
    assert isinstance(stats, dict)
    model = _mlp().tpu()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = (t.tpu() for t in _data())

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()

    step()
    before = torchtpu.fallback_stats()
    assert before, "no op went through the fallback"
    for k, v in before.items():
        assert isinstance(k, str) and k.startswith("aten::"), k
        assert isinstance(v, int) and v > 0, (k, v)
    step()
    step()
    after = torchtpu.fallback_stats()
    assert sum(after.values()) > sum(before.values())
    assert all(after.get(k, 0) >= v for k, v in before.items())
    grown = [k for k, v in before.items() if after[k] > v]
    assert grown, "no op count increased"


def test_reset_fallback_stats():
    # an op no backend is likely to implement natively soon
    op = torch.special.scaled_modified_bessel_k0
    name = "special_scaled_modified_bessel_k0"
    x = torch.rand(10, device="tpu") + 0.5
    op(x)
    assert fallback_ops(torchtpu.fallback_stats(), name) >= 1
    torchtpu.reset_fallback_stats()
    assert sum(torchtpu.fallback_stats().values()) == 0
    op(x)
    op(x)
    op(x)
    assert fallback_ops(torchtpu.fallback_stats(), name) == 3
    torch.testing.assert_close(op(x).cpu(), op(x.cpu()))


_BACKWARD_THEN_EXIT = """
import torch
m = torch.nn.Linear(4, 2).tpu()
m(torch.randn(3, 4, device="tpu")).sum().backward()
torch.tpu.synchronize()
emit(str(m.weight.grad.device))
"""


def test_process_with_backward_exits_cleanly():
    # a script that trains on tpu must not crash at interpreter exit (several runs, since
    # shutdown races are timing dependent)
    for res in run_python_many([(_BACKWARD_THEN_EXIT, None)] * 3 +
                               [(_BACKWARD_THEN_EXIT, {"TORCHTPU_CHIPS": "2"})] * 3):
        assert res.json == ["tpu:0"], res.describe()
        assert res.returncode == 0, res.describe()
