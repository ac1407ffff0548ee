"""The lowerings of torchtpu/csrc/lower_pad.cpp: F.pad's "reflect" and "replicate" modes
(nn.ReflectionPad1d-3d, nn.ReplicationPad1d-3d) run natively, forward and backward, batched
and unbatched, with asymmetric and negative (cropping) padding, in float32 and bfloat16.

Padding only moves values, so the forward is exact. The backward adds the gradients of the
copies of a value in a different order than the CPU: float32 within 1e-6; bfloat16
gradients accumulate in float32 and round once, the CPU's in bfloat16 (rtol 2e-2).
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import compare_with_cpu

GEN = torch.Generator().manual_seed(0)
CASES = [  # (input shape, padding)
    ((2, 3, 7), (2, 3)),
    ((3, 7), (3, 1)),            # unbatched
    ((2, 3, 7), (0, 0)),
    ((2, 3, 7), (-2, 1)),        # crop on the left
    ((2, 2, 5, 6), (1, 2, 3, 0)),
    ((2, 5, 6), (4, 4, 2, 2)),   # unbatched 2-D, padding up to size - 1
    ((1, 2, 5, 6), (-1, 2, 1, -3)),
    ((1, 2, 3, 4, 5), (1, 2, 2, 1, 1, 0)),
    ((2, 3, 4, 5), (1, 1, 2, 2, 1, 2)),  # unbatched 3-D
]


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,padding", CASES)
def test_pad_matches_cpu(mode, shape, padding):
    x = torch.randn(shape, generator=GEN)
    compare_with_cpu(lambda t: F.pad(t, padding, mode=mode), x, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_bf16_and_modules(mode):
    x = torch.randn(2, 3, 6, 7, generator=GEN)
    compare_with_cpu(lambda t: F.pad(t, (3, 2, 1, 4), mode=mode), x.bfloat16(), rtol=2e-2, atol=2e-2)
    module = nn.ReflectionPad2d(2) if mode == "reflect" else nn.ReplicationPad2d((1, 0, 2, 3))
    compare_with_cpu(module, x, rtol=1e-6, atol=1e-6)


def test_reflection_padding_too_large_is_pytorchs_error():
    x = torch.randn(1, 2, 4, device="tpu")
    with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding input dimension"):
        F.pad(x, (4, 0), mode="reflect")
    assert F.pad(x, (3, 0), mode="reflect").shape == (1, 2, 7)


def test_integer_tensors():
    x = torch.arange(24).view(2, 3, 4)
    compare_with_cpu(lambda t: F.pad(t, (2, 1), mode="reflect"), x)
    compare_with_cpu(lambda t: F.pad(t, (2, 1, 1, 1), mode="replicate"), x)
