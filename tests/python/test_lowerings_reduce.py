"""Native reductions added beside sum/mean/var (torchtpu/csrc/lower_reduce.cpp): torch.norm
in all its overloads (torch.dist, F.pairwise_distance), nansum, count_nonzero, aminmax and
trace, compared with the CPU on the same inputs, with gradients where they have one.

Tolerances: float32 sums in a different order than the CPU's: rtol 1e-5; integer results
and min/max are exact.
"""
import pytest
import torch
import torch.nn.functional as F

from conftest import compare_with_cpu

GEN = torch.Generator().manual_seed(0)
X = torch.randn(4, 5, 6, generator=GEN)


@pytest.mark.parametrize("p", [None, 1, 2, 3, 0.5, float("inf"), -float("inf"), 0])
def test_norm_overloads(p):
    compare_with_cpu(lambda x: torch.norm(x, p) if p is not None else torch.norm(x), X, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda x: torch.norm(x, p, dim=1), X, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda x: torch.norm(x, p, dim=(0, 2), keepdim=True), X, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda x: torch.norm(x, p, dim=-1, dtype=torch.float64), X, rtol=1e-5, atol=1e-5)


def test_dist_and_pairwise_distance():
    y = torch.randn(4, 5, 6, generator=GEN)
    compare_with_cpu(torch.dist, X, y, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda a, b: torch.dist(a, b, 3), X, y, rtol=1e-5, atol=1e-5)
    compare_with_cpu(F.pairwise_distance, X[0], y[0], rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda a, b: F.pairwise_distance(a, b, p=1, keepdim=True), X[0], y[0], rtol=1e-5, atol=1e-5)


def test_nansum():
    x = X.clone()
    x[0, 1, :3] = float("nan")
    x[2, :, 4] = float("nan")
    compare_with_cpu(torch.nansum, x, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda t: torch.nansum(t, dim=1), x, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda t: torch.nansum(t, dim=(0, 2), keepdim=True), x, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda t: torch.nansum(t, 0), torch.arange(12).view(3, 4))
    compare_with_cpu(lambda t: torch.nansum(t, 1, dtype=torch.float64), x.bfloat16(), rtol=1e-2, atol=1e-2, grad=False)


def test_count_nonzero():
    x = (X > 0.3) * X
    compare_with_cpu(torch.count_nonzero, x)
    compare_with_cpu(lambda t: torch.count_nonzero(t, dim=1), x)
    compare_with_cpu(lambda t: torch.count_nonzero(t, dim=(0, 2)), x)
    compare_with_cpu(torch.count_nonzero, torch.tensor([[True, False], [True, True]]))


def test_aminmax():
    compare_with_cpu(lambda t: tuple(torch.aminmax(t)), X)
    compare_with_cpu(lambda t: tuple(torch.aminmax(t, dim=1)), X)
    compare_with_cpu(lambda t: tuple(torch.aminmax(t, dim=-1, keepdim=True)), X)
    compare_with_cpu(lambda t: tuple(torch.aminmax(t, dim=0)), torch.randint(-9, 9, (5, 3), generator=GEN))


def test_trace():
    compare_with_cpu(torch.trace, X[0], rtol=1e-6, atol=1e-6)
    compare_with_cpu(torch.trace, X[0].t(), rtol=1e-6, atol=1e-6)
    compare_with_cpu(torch.trace, torch.arange(12, dtype=torch.int32).view(3, 4))
    with pytest.raises(RuntimeError, match="trace: expected a matrix"):
        torch.trace(X.to("tpu"))
