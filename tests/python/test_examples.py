"""The examples (MLP, CNN with batch norm, GPT-style decoder) train natively on tpu: zero
ops through the CPU fallback, and losses that track PyTorch on CPU from the same initial
weights and data.

Tolerance: at the TPU's DEFAULT matmul precision every matmul/conv rounds f32 operands to
bf16 once (relative error ~2^-9 per product), so per-step losses agree within a few
percent; at HIGHEST (about f32) the first steps agree within 1e-4.
"""
import os
import sys

import pytest
import torch

import torchtpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import train_cnn  # noqa: E402
import train_gpt  # noqa: E402
import train_mlp  # noqa: E402

EXAMPLES = {
    "mlp": lambda device: train_mlp.train(8, device),
    "cnn": lambda device: train_cnn.train(6, device),
    "gpt": lambda device: train_gpt.train(8, device, quiet=True),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_trains_natively_and_tracks_cpu(name):
    cpu = EXAMPLES[name]("cpu")
    torchtpu.reset_fallback_stats()
    tpu = EXAMPLES[name]("tpu")
    assert torchtpu.fallback_stats() == {}, f"{name} used the CPU fallback"
    for step, (a, b) in enumerate(zip(cpu, tpu)):
        assert abs(a - b) <= 3e-2 * max(abs(a), 0.1), (name, step, cpu, tpu)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_at_highest_precision_matches_cpu(name):
    cpu = EXAMPLES[name]("cpu")
    with torch.tpu.precision("highest"):
        tpu = EXAMPLES[name]("tpu")
    for step, (a, b) in enumerate(zip(cpu[:2], tpu[:2])):
        assert abs(a - b) <= 1e-4 * max(abs(a), 1.0), (name, step, cpu, tpu)
