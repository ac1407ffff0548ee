"""Small ops that used to take the CPU fallback and now run natively: bit shifts (<<, >>,
torch.bitwise_left/right_shift), torch.linalg.cross, torch.vdot, torch.renorm, torch.angle,
F.channel_shuffle, torch.equal and the zero tensors of autograd formulas (sgn's backward).

Shifts, angle, channel_shuffle and equal are exact. cross is two products and a difference
per element, in another order than the CPU's: 1e-6. vdot and renorm sum in another order:
1e-5.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu
from conftest import compare_with_cpu, no_fallback

GEN = torch.Generator().manual_seed(0)



@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_shifts_match_the_cpu(dtype):
    info = torch.iinfo(dtype)
    x = torch.tensor([0, 1, -1, 5, info.max, info.min, 77, -77], dtype=torch.int64).clamp(info.min, info.max).to(dtype)
    amounts = torch.tensor([0, 1, 3, 7, 8, 15, 16, 1], dtype=dtype)
    for fn in (lambda a, b: a << b, lambda a, b: a >> b, torch.bitwise_left_shift, torch.bitwise_right_shift,
               lambda a, b: a << 3, lambda a, b: a >> 2, lambda a, b: torch.bitwise_left_shift(a, 1)):
        got = no_fallback(lambda: fn(x.to("tpu"), amounts.to("tpu")))
        assert torch.equal(got.cpu(), fn(x, amounts))
    y = x.to("tpu")
    no_fallback(lambda: y.__ilshift__(2))
    assert torch.equal(y.cpu(), x << 2)


def test_shifts_by_the_width_or_more():
    x = torch.tensor([5, -5, 1, -1], dtype=torch.int32)
    for n in (31, 32, 40):
        assert torch.equal(no_fallback(lambda: x.to("tpu") << n).cpu(), x << n)
        assert torch.equal(no_fallback(lambda: x.to("tpu") >> n).cpu(), x >> n)


def test_shift_of_a_float_is_pytorchs_error():
    for fn in (lambda a: a << 1, lambda a: a >> a, lambda a: torch.bitwise_left_shift(3, a),
               lambda a: a.long() << 1.5):
        with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
            fn(torch.ones(3, device="tpu"))
    assert (torch.ones(3, dtype=torch.long, device="tpu") << 1).cpu().tolist() == [2, 2, 2]


@pytest.mark.parametrize("shapes,dim", [(((5, 3), (5, 3)), -1), (((3, 4), (3, 4)), 0),
                                         (((2, 1, 3), (1, 4, 3)), -1)])  # broadcast
def test_linalg_cross(shapes, dim):
    a, b = (torch.randn(s, generator=GEN) for s in shapes)
    compare_with_cpu(lambda x, y: torch.linalg.cross(x, y, dim=dim), a, b, rtol=1e-6, atol=1e-6)
    compare_with_cpu(lambda x, y: torch.cross(x, y, dim=dim), a, b, rtol=1e-6, atol=1e-6)


def test_vdot_and_renorm(highest):
    a, b = torch.randn(50, generator=GEN), torch.randn(50, generator=GEN)
    compare_with_cpu(torch.vdot, a, b, rtol=1e-5, atol=1e-5)
    x = torch.randn(4, 5, 6, generator=GEN)
    for p, dim, maxnorm in [(2, 0, 1.0), (1, 1, 3.0), (3, -1, 0.5), (float("inf"), 2, 1.0), (2, 0, 100.0)]:
        compare_with_cpu(lambda t: torch.renorm(t, p, dim, maxnorm), x, rtol=1e-5, atol=1e-6)
    compare_with_cpu(lambda t: torch.renorm(t, 2, 1, 1.0), x.bfloat16(), rtol=2e-2, atol=2e-2)


def test_renorm_maxnorm_changes_without_recompiling():
    """maxnorm is a run-time input (except 0 and 1, which the engine makes constants)."""
    x = torch.randn(3, 4, generator=GEN).to("tpu")
    torch.renorm(x, 2, 0, 0.3)
    before = torchtpu.cache_stats()["misses"]
    for m in (0.5, 0.7, 2.0):
        torch.testing.assert_close(torch.renorm(x, 2, 0, m).cpu(), torch.renorm(x.cpu(), 2, 0, m))
    assert torchtpu.cache_stats()["misses"] == before


def test_angle_of_real_numbers():
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, float("-inf"), float("inf"), float("nan")])
    compare_with_cpu(torch.angle, x, rtol=0, atol=0)
    got = no_fallback(lambda: torch.angle(torch.tensor([-3, 0, 4], device="tpu")))
    torch.testing.assert_close(got.cpu(), torch.angle(torch.tensor([-3, 0, 4])))


def test_channel_shuffle():
    x = torch.randn(2, 6, 3, 4, generator=GEN)
    compare_with_cpu(lambda t: F.channel_shuffle(t, 3), x, rtol=0, atol=0)
    compare_with_cpu(nn.ChannelShuffle(2), x, rtol=0, atol=0)
    compare_with_cpu(lambda t: F.channel_shuffle(t, 2), torch.randn(3, 4, 5, generator=GEN), rtol=0, atol=0)


def test_equal():
    a = torch.tensor([1.0, 2.0, float("nan")])
    for x, y in [(a[:2], a[:2].clone()), (a, a), (a, a.clone()), (a[:2], a[1:]), (a, a[:2]),
                 (torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))]:
        got = no_fallback(lambda: torch.equal(x.to("tpu"), y.to("tpu")))
        assert got is torch.equal(x, y), (x, y)
    with pytest.raises(RuntimeError, match="Cannot compare two tensors on different devices"):
        torch.equal(a.to("tpu"), a)


def test_cov_and_sgn_backward_run_natively(highest):
    """torch.cov calls torch.equal; sgn's backward builds an _efficientzerotensor."""
    x = torch.randn(3, 10, generator=GEN)
    compare_with_cpu(torch.cov, x, rtol=1e-5, atol=1e-6)
    compare_with_cpu(torch.corrcoef, x, rtol=1e-5, atol=1e-6)
    compare_with_cpu(lambda t: torch.sgn(t) * t, x, rtol=0, atol=0)


# ---- distances (lower_distance.cpp) ----------------------------------------------------------

@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist_direct_path(p):
    """Small problems (at most 25 rows) take the direct path for every p."""
    x1, x2 = torch.randn(2, 7, 5, generator=GEN), torch.randn(2, 4, 5, generator=GEN)
    x2[0, 1] = x1[0, 2]  # a zero distance: its gradient is 0
    compare_with_cpu(lambda a, b: torch.cdist(a, b, p=p), x1, x2, rtol=1e-5, atol=1e-5)


def test_cdist_broadcasts_batches_and_grows_past_the_direct_path():
    x1, x2 = torch.randn(3, 1, 6, 4, generator=GEN), torch.randn(5, 9, 4, generator=GEN)
    compare_with_cpu(lambda a, b: torch.cdist(a, b, p=1.0), x1, x2, rtol=1e-5, atol=1e-5)
    big1, big2 = torch.randn(40, 8, generator=GEN), torch.randn(30, 8, generator=GEN)
    compare_with_cpu(lambda a, b: torch.cdist(a, b, p=3.0), big1, big2, rtol=1e-5, atol=1e-5)


def test_cdist_of_half_types_is_pytorchs_error():
    a = torch.randn(3, 4, generator=GEN).bfloat16()
    with pytest.raises(RuntimeError) as cpu_error:
        torch.cdist(a, a, p=1.0)
    with pytest.raises(type(cpu_error.value)):
        torch.cdist(a.to("tpu"), a.to("tpu"), p=1.0)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 2.5, float("inf")])
def test_pdist(p):
    x = torch.randn(7, 3, generator=GEN)
    x[4] = x[1]  # a zero distance
    compare_with_cpu(lambda t: F.pdist(t, p=p), x, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda t: F.pdist(t, p=p), torch.randn(2, 5, generator=GEN, dtype=torch.float64),
                     rtol=1e-12, atol=1e-12)
