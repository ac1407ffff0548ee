# examples/finetune_hf.py (a Hugging Face fine-tuning loop) runs briefly on tpu:
# - in float32 at HIGHEST matmul precision its first steps match the same loop on the CPU
#   to 1e-4 (Adam's first steps are sign-like, so small differences would show at once);
# - with bf16 autocast (its default) it learns, no op leaves the chip, and
#   save_pretrained/from_pretrained give back a model with the same accuracy;
# - as a user runs it: a fresh interpreter, `python examples/finetune_hf.py --steps 2`.
import os
import subprocess
import sys

import pytest
import torch

import torchtpu
from conftest import subprocess_env

pytest.importorskip("transformers")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
sys.path.insert(0, EXAMPLES)
import finetune_hf  # noqa: E402


def test_float32_steps_match_cpu():
    # dropout off: the two devices draw different random numbers
    args = ["--json", "--no-amp", "--dropout", "0", "--steps", "5", "--epochs", "1"]
    cpu = finetune_hf.main(args + ["--device", "cpu"])
    with torch.tpu.precision("highest"):
        tpu = finetune_hf.main(args)
    assert tpu["device"] == "tpu"
    torch.testing.assert_close(torch.tensor(tpu["losses"]), torch.tensor(cpu["losses"]),
                               rtol=1e-4, atol=1e-5)


def test_autocast_finetune_learns_natively(tmp_path):
    torchtpu.reset_fallback_stats()
    out = finetune_hf.main(["--json", "--model", "llama", "--epochs", "3", "--accumulate", "2",
                            "--save", str(tmp_path / "ft")])
    assert torchtpu.fallback_stats() == {}
    assert out["losses"][-1] < out["losses"][0]
    assert out["accuracy"] > 0.6, out["accuracy"]  # chance is about 0.5
    assert out["reloaded_accuracy"] == out["accuracy"]


def test_runs_as_a_script():
    script = os.path.join(EXAMPLES, "finetune_hf.py")
    res = subprocess.run([sys.executable, script, "--steps", "2", "--epochs", "1"],
                         env=subprocess_env(), capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "on tpu" in res.stdout and "eval accuracy" in res.stdout, res.stdout
