# examples/device_generic.py, a training script written against torch.accelerator (no tpu
# in it), runs unchanged on tpu and matches the same script on the CPU:
# - the accelerator it picks is the tpu, and no op leaves the chip;
# - with dropout off and torch.set_float32_matmul_precision("highest") (which the tpu maps
#   to its HIGHEST, about float32), the per-step losses equal the CPU's to 1e-4 relative;
#   with bf16 autocast to 3e-2 (bf16 rounding, summed in a different order);
# - a run interrupted after 2 of 4 epochs and resumed from its torch.save checkpoint (model,
#   optimizer, LR scheduler, RNG states) gives exactly the losses of an uninterrupted run,
#   with dropout on and activation checkpointing recomputing the dropout masks;
# - as a user would run it: a fresh interpreter, `python examples/device_generic.py`.
import os
import subprocess
import sys

import pytest
import torch

import torchtpu
from conftest import subprocess_env

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
sys.path.insert(0, EXAMPLES)
import device_generic  # noqa: E402


@pytest.fixture
def restore_precision():
    """The script may call torch.set_float32_matmul_precision, which is process-wide."""
    torch_prec, tpu_prec = torch.get_float32_matmul_precision(), torchtpu.get_matmul_precision()
    yield
    torch.set_float32_matmul_precision(torch_prec)
    torchtpu.set_matmul_precision(tpu_prec)


def run(*argv):
    return device_generic.train(["--json", "--epochs", "2", *argv])


def test_picks_the_tpu_and_stays_on_it():
    assert device_generic.pick_device() == torch.device("tpu")
    torchtpu.reset_fallback_stats()
    out = run()
    assert out["device"] == "tpu"
    assert torchtpu.fallback_stats() == {}
    assert out["losses"][-1] < out["losses"][0]


def test_losses_match_cpu(restore_precision):
    common = ("--dropout", "0", "--matmul-precision", "highest")
    cpu, tpu = run("--device", "cpu", *common), run(*common)
    assert cpu["device"] == "cpu" and tpu["device"] == "tpu"
    torch.testing.assert_close(torch.tensor(tpu["losses"]), torch.tensor(cpu["losses"]),
                               rtol=1e-4, atol=1e-5)
    assert tpu["losses"][-1] < 0.5 * tpu["losses"][0]


def test_losses_match_cpu_under_autocast():
    cpu, tpu = run("--device", "cpu", "--dropout", "0", "--amp"), run("--dropout", "0", "--amp")
    torch.testing.assert_close(torch.tensor(tpu["losses"]), torch.tensor(cpu["losses"]),
                               rtol=3e-2, atol=1e-3)


def test_resume_from_checkpoint_gives_the_same_losses(tmp_path):
    ck = str(tmp_path / "ck.pt")
    full = run("--epochs", "4", "--dropout", "0.2")
    first = run("--epochs", "4", "--dropout", "0.2", "--stop-after", "2", "--checkpoint", ck)
    assert len(first["losses"]) == len(full["losses"]) // 2
    state = torch.load(ck, map_location="cpu", weights_only=True)
    assert state["epoch"] == 2 and state["rng"]["device"].dtype == torch.uint8
    second = run("--epochs", "4", "--dropout", "0.2", "--resume", ck)
    assert first["losses"] + second["losses"] == full["losses"]
    assert second["accuracy"] == full["accuracy"]


def test_runs_as_a_script():
    script = os.path.join(EXAMPLES, "device_generic.py")
    res = subprocess.run([sys.executable, script, "--epochs", "1"], env=subprocess_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "epoch 1/1" in res.stdout and "on tpu" in res.stdout, res.stdout
    assert "fallback" not in res.stderr, res.stderr[-3000:]


def test_module_to_moves_parameters_in_place_and_keeps_ties():
    """As on CUDA, Module.to()/.cpu() and `param.data = t` keep the Parameter objects, so
    tied weights stay tied and optimizers built before the move keep working."""
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    before = [id(p) for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to("tpu")
    assert [id(p) for p in model.parameters()] == before
    assert emb.weight is head.weight and emb.weight.device.type == "tpu"
    ids = torch.tensor([[1, 2, 3]], device="tpu")
    head(emb(ids)).sum().backward()
    opt.step()  # the optimizer holds the moved parameters
    model.cpu()
    assert emb.weight is head.weight and emb.weight.device.type == "cpu"
    p = torch.nn.Parameter(torch.ones(3))
    p.data = torch.zeros(3, device="tpu")
    assert p.device.type == "tpu" and isinstance(p, torch.nn.Parameter)
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        p.data = torch.zeros(3, dtype=torch.complex64).to_sparse()
