"""torch.histc on tpu (torchtpu/csrc/histc.cpp): native tpu ops, no CPU fallback, the CPU's
counts exactly (every element in the CPU's bin, including values on bin edges, at the
range's ends, outside it and NaN), its range inference from the data, its errors; fused
mode and torch.compile; half-precision and integer inputs take the CPU fallback.

Counts are exact small integers, so results are compared with rtol = atol = 0.
"""
import pytest
import torch

import torchtpu
from conftest import no_fallback, tpu

GEN = torch.Generator().manual_seed(0)


def same(got, want):
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bins,lo,hi", [(10, 0, 1), (7, -2.5, 3.0), (100, 0, 0), (3, 1, 1),
                                        (1, -1, 1), (64, -0.3, 0.9)])
def test_random_values_match_the_cpu(dtype, bins, lo, hi):
    x = torch.randn(4, 257, generator=GEN, dtype=dtype)
    same(no_fallback(lambda: torch.histc(tpu(x), bins=bins, min=lo, max=hi)),
         torch.histc(x, bins=bins, min=lo, max=hi))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_edges_ends_outside_and_nan(dtype):
    # every bin edge of [0, 1] in 10 bins and its neighbours in the dtype, the ends, values
    # outside, NaN and infinities
    edges = torch.linspace(0, 1, 11, dtype=dtype)
    x = torch.cat([edges, torch.nextafter(edges, edges - 1), torch.nextafter(edges, edges + 1),
                   torch.tensor([-1e-30, 1 + 1e-7, 2.0, -3.0, float("nan"), float("inf"),
                                 -float("inf")], dtype=dtype)])
    same(no_fallback(lambda: torch.histc(tpu(x), bins=10, min=0, max=1)),
         torch.histc(x, bins=10, min=0, max=1))
    # thirds: edges that are not exact in binary
    y = torch.arange(-30, 31, dtype=dtype) / 30
    same(torch.histc(tpu(y), bins=3, min=-1, max=1), torch.histc(y, bins=3, min=-1, max=1))


def test_range_from_the_data_and_degenerate_ranges():
    x = torch.randn(1000, generator=GEN) * 5
    same(no_fallback(lambda: torch.histc(tpu(x), bins=17)), torch.histc(x, bins=17))
    same(torch.histc(tpu(x), bins=17, min=2, max=2), torch.histc(x, bins=17, min=2, max=2))
    for data in (torch.full((5,), 3.0), torch.zeros(4), torch.tensor([])):  # widened by 1
        same(torch.histc(tpu(data), bins=4), torch.histc(data, bins=4))
    same(torch.histc(tpu(torch.tensor([])), bins=4, min=0, max=1),
         torch.histc(torch.tensor([]), bins=4, min=0, max=1))


def test_out_variant_and_strided_input():
    x = torch.randn(6, 8, generator=GEN)
    out = torch.empty(0, device="tpu")
    r = torch.histc(tpu(x)[:, ::3], bins=5, min=-1, max=1, out=out)
    assert r is out
    same(out, torch.histc(x[:, ::3], bins=5, min=-1, max=1))


def test_errors_match_the_cpu_and_the_device_still_works():
    x = torch.randn(10, generator=GEN)
    for kwargs in (dict(bins=0), dict(bins=-3), dict(min=3, max=1),
                   dict(min=float("inf"), max=1)):
        with pytest.raises(RuntimeError) as want:
            torch.histc(x, **kwargs)
        with pytest.raises(RuntimeError) as got:
            torch.histc(tpu(x), **kwargs)
        assert str(got.value) == str(want.value)
    for data in (torch.tensor([1.0, float("inf")]), torch.tensor([float("nan"), 1.0])):
        with pytest.raises(RuntimeError, match="is not finite"):
            torch.histc(data)
        with pytest.raises(RuntimeError, match="is not finite"):
            torch.histc(tpu(data))
    same(torch.histc(tpu(x), bins=3, min=-1, max=1), torch.histc(x, bins=3, min=-1, max=1))


def test_half_precision_and_integers_take_the_fallback():
    torchtpu.reset_fallback_stats()
    x = torch.randn(50, generator=GEN).to(torch.bfloat16)
    same(torch.histc(tpu(x), bins=4, min=-1, max=1), torch.histc(x, bins=4, min=-1, max=1))
    assert torchtpu.fallback_stats()
    with pytest.raises(NotImplementedError):
        torch.histc(tpu(torch.arange(5)), bins=2)


def test_fused_mode_and_compile():
    x = torch.randn(300, generator=GEN)
    want = torch.histc(x * 2, bins=8, min=-3, max=3)
    torchtpu.set_eager_mode("fused")
    try:
        torchtpu.reset_fused_stats()
        got = torch.histc(tpu(x) * 2, bins=8, min=-3, max=3)
        assert "flush:fallback" not in torchtpu.fused_stats()
        same(got, want)
    finally:
        torchtpu.set_eager_mode("strict")

    def fn(t):
        return torch.histc(t * 2, bins=8, min=-3, max=3)
    same(no_fallback(lambda: torch.compile(fn, backend="tpu")(tpu(x))), want)
