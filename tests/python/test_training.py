# Training on tpu matches training on cpu: an MLP with the same initial weights and data is
# trained 20 steps with AdamW (default, for-loop and foreach implementations) and with SGD with
# momentum, on cpu and on tpu, natively (no op through the CPU fallback). At HIGHEST matmul
# precision (about f32) the first loss agrees within 1e-5; later ones within 2e-3, because the
# optimizers amplify last-bit differences in accumulation order step after step (Adam divides
# by the root of small second moments). At the TPU's DEFAULT precision (one bf16 pass) the
# losses stay within 2e-2. Gradients and optimizer state
# live on tpu. fallback_stats() counts the ops that do run through the cpu fallback.
import copy
import threading

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
    torchtpu.reset_fallback_stats()
    with torch.tpu.precision("highest"):
        tpu_losses, tpu_opt = _train(tpu_model, OPTIMIZERS[opt_name], "tpu")
    assert torchtpu.fallback_stats() == {}, "training used the CPU fallback"

    assert cpu_losses[-1] < cpu_losses[0]          # the model does learn
    diffs = [abs(a - b) / abs(a) for a, b in zip(cpu_losses, tpu_losses)]
    assert diffs[0] <= 1e-5 and max(diffs) <= 2e-3, f"losses cpu={cpu_losses} tpu={tpu_losses}"
    for (name, p), q in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        assert q.device == TPU0
        assert q.grad is not None and q.grad.device == TPU0, name
        diff = (q.detach().cpu() - p.detach()).abs()
        if opt_name.startswith("sgd"):
            assert diff.max() <= 1e-4, (name, diff.max())
        else:  # Adam's sign-like steps flip on near-zero gradients: compare on average
            assert diff.mean() <= 1e-3, (name, diff.mean())
    for state in tpu_opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                assert v.device == TPU0


def test_one_step_gradients_match_cpu_at_highest():
    cpu_model = _mlp()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    x, y = _data()
    F.mse_loss(cpu_model(x), y).backward()
    with torch.tpu.precision("highest"):
        F.mse_loss(tpu_model(x.tpu()), y.tpu()).backward()
    for (name, p), q in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-6,
                                   msg=lambda m: f"{name}: {m}")


def test_training_at_default_precision_tracks_cpu():
    cpu_model = _mlp()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    opt = OPTIMIZERS["adamw"]
    cpu_losses, _ = _train(cpu_model, opt, "cpu")
    tpu_losses, _ = _train(tpu_model, opt, "tpu")   # one bf16 MXU pass per matmul
    diffs = [abs(a - b) / abs(a) for a, b in zip(cpu_losses, tpu_losses)]
    assert max(diffs) <= 2e-2, f"losses cpu={cpu_losses} tpu={tpu_losses}"
    assert max(diffs) > 0, "DEFAULT precision should not be bit-identical to f32"


def test_fallback_stats_count_calls():
    x = torch.rand(10, device="tpu") + 0.5
    before = torchtpu.fallback_stats()
    for _ in range(3):
        torch.special.airy_ai(x)
    after = torchtpu.fallback_stats()
    for k, v in after.items():
        assert isinstance(k, str) and k.startswith("aten::"), k
        assert isinstance(v, int) and v > 0, (k, v)
    grown = [k for k, v in after.items() if v > before.get(k, 0)]
    assert grown and all("airy" in k for k in grown)
    assert sum(after.values()) == sum(before.values()) + 3


def test_reset_fallback_stats():
    # an op no backend is likely to implement natively soon
    op = torch.special.airy_ai
    name = "special_airy_ai"
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


def _backward_thread():
    """The thread a tpu backward's hook runs on."""
    x = torch.randn(4, 4, device="tpu", requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(threading.get_ident()) or g)
    (x * 2).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((4, 4), 2.0))
    return seen[0]


def test_backward_runs_on_the_calling_thread():
    # importing torchtpu turns the autograd engine's device threads off for the importing
    # thread: a tpu backward runs where backward() is called (no thread hand-offs), and
    # turning them back on is the user's choice, as with any device
    assert not torch.autograd.is_multithreading_enabled()
    assert _backward_thread() == threading.get_ident()
    with torch.autograd.set_multithreading_enabled(True):
        assert _backward_thread() != threading.get_ident()
    assert _backward_thread() == threading.get_ident()


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
