"""The lowerings of torchtpu/csrc/lower_activation.cpp (ELU/SELU/CELU, GLU, Hardtanh/ReLU6,
Hardswish, Hardsigmoid, Mish, Softshrink, Hardshrink, Threshold, logit) run natively and
match the CPU, forward and backward, including NaN, infinities and signed zeros.

Tolerances: float32 math with exp/tanh/log1p in it agrees within a few ulps (rtol 1e-6,
atol 1e-7); the piecewise-linear ones are exact. bfloat16 results are rounded once from
float32 math; the CPU rounds some intermediates to bfloat16 too (Mish's backward is a
composite of bfloat16 ops on both): within a few bfloat16 ulps (rtol 2e-2).
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu

from conftest import compare_with_cpu, no_fallback, tpu

SPECIAL = torch.tensor([float("nan"), float("inf"), -float("inf"), -3.0, 3.0, 0.5, -0.5, 0.0, -0.0,
                        6.0, -1.0, 1.0, 2.9999, -2.9999])
RANDOM = torch.randn(4, 37, generator=torch.Generator().manual_seed(0)) * 4

ACTIVATIONS = {
    "elu": F.elu,
    "elu_alpha": lambda x: F.elu(x, alpha=0.7),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, alpha=1.5),
    "hardtanh": lambda x: F.hardtanh(x, -2.0, 1.5),
    "relu6": F.relu6,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "mish": F.mish,
    "softshrink": lambda x: F.softshrink(x, 0.5),
    "hardshrink": lambda x: F.hardshrink(x, 0.5),
    "threshold": lambda x: F.threshold(x, 0.5, -7.0),
}
EXACT = {"hardtanh", "relu6", "softshrink", "hardshrink", "threshold"}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_matches_cpu(name):
    tol = 0.0 if name in EXACT else 1e-6
    for x in (SPECIAL, RANDOM):
        compare_with_cpu(ACTIVATIONS[name], x, rtol=tol, atol=tol and 1e-7)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_bf16(name):
    compare_with_cpu(ACTIVATIONS[name], RANDOM.bfloat16(), rtol=2e-2, atol=2e-2)


def test_elu_backward_from_the_result_of_an_inplace_elu():
    # F.elu(x, inplace=True) saves its result, so its backward is elu_backward(is_result=True)
    def fn(x):
        y = x * 1.0
        F.elu_(y, alpha=0.3)
        return y
    compare_with_cpu(fn, RANDOM, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("module", [nn.ReLU6(inplace=True), nn.Hardswish(inplace=True),
                                    nn.Hardsigmoid(inplace=True), nn.ELU(inplace=True),
                                    nn.SELU(inplace=True), nn.Mish(inplace=True)],
                         ids=lambda m: type(m).__name__)
def test_inplace_modules(module):
    def fn(x):
        y = x * 2.0
        out = module(y)
        assert out is y
        return out
    # the backward of an in-place ELU reads its result y (y + alpha cancels for very negative
    # x, so one ulp of difference in y is an absolute 1e-7 of difference in the gradient)
    compare_with_cpu(fn, RANDOM, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_glu(dim):
    x = torch.randn(4, 6, 8, generator=torch.Generator().manual_seed(1))
    compare_with_cpu(lambda t: F.glu(t, dim), x, rtol=1e-6, atol=1e-7)
    compare_with_cpu(lambda t: F.glu(t, dim), x.bfloat16(), rtol=2e-2, atol=2e-2)


def test_glu_odd_size_is_pytorchs_error():
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        F.glu(torch.randn(3, 5, device="tpu"), -1)
    assert torch.equal(F.glu(tpu(torch.ones(2, 4)), -1).cpu(), F.glu(torch.ones(2, 4), -1))


@pytest.mark.parametrize("eps", [None, 1e-6, 0.2])
def test_logit(eps):
    x = torch.tensor([float("nan"), -0.5, 0.0, 1e-7, 0.1, 0.5, 0.9, 1.0, 1.5])
    compare_with_cpu(lambda t: torch.logit(t, eps), x, rtol=1e-6, atol=1e-7)
    compare_with_cpu(lambda t: torch.logit(t, eps), torch.rand(50, generator=torch.Generator().manual_seed(2)),
                     rtol=1e-6, atol=1e-6)


def test_integer_threshold_and_hardtanh_keep_the_dtype():
    x = torch.arange(-5, 6)
    compare_with_cpu(lambda t: F.threshold(t, 1, 9), x)
    compare_with_cpu(lambda t: F.hardtanh(t, -2, 3), x)


def test_mobilenet_block_matches_cpu():
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Hardswish(), nn.Conv2d(8, 8, 1),
                          nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4), nn.Hardsigmoid())
    names = [n for n, _ in block.named_parameters()]

    def fn(x, *params):
        return torch.func.functional_call(block, dict(zip(names, params)), (x,))

    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        compare_with_cpu(fn, torch.randn(2, 3, 8, 8), *[p.detach() for p in block.parameters()],
                         rtol=1e-5, atol=1e-5)


def test_a_segmentation_net_trains_the_same_in_fused_mode():
    # these lowerings (and reflect padding, bicubic upsampling, cross_entropy over images,
    # logaddexp, torch.norm) recorded into fused graphs give strict mode's bits
    def train(mode):
        torchtpu.set_eager_mode(mode)
        try:
            torch.manual_seed(0)
            net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Hardswish(), nn.ReflectionPad2d(1), nn.Conv2d(8, 4, 3),
                                nn.ELU(), nn.Upsample(scale_factor=2, mode="bicubic"), nn.Mish(),
                                nn.Conv2d(4, 3, 1)).to("tpu")
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            x, y = torch.randn(2, 3, 10, 10).to("tpu"), torch.randint(0, 3, (2, 16, 16)).to("tpu")
            losses = []
            for _ in range(3):
                out = net(x)
                loss = F.cross_entropy(out, y) + torch.logaddexp(out, out.flip(1)).mean() * 0.01 + torch.norm(out) * 1e-3
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
            return losses, [p.detach().cpu() for p in net.parameters()]
        finally:
            torchtpu.set_eager_mode("strict")

    strict, fused = no_fallback(lambda: train("strict")), no_fallback(lambda: train("fused"))
    assert strict[0] == fused[0]
    assert all(torch.equal(a, b) for a, b in zip(strict[1], fused[1]))
