"""The lowerings of torchtpu/csrc/lower_special.cpp (lgamma, digamma, polygamma of order 0
and 1, erfc, special.erfcx, special.log_ndtr, special.entr, special.xlog1py) and of
lower_scan.cpp (cummax, cummin, logcumsumexp): natively, forward and backward, against
PyTorch on the CPU.

Tolerances. The CPU calls libm (lgamma, erfc) or ATen's own series (digamma, trigamma,
erfcx); torchtpu composes the same functions from IR ops:
- lgamma: Lanczos' approximation in f32 loses a few ulps of its largest intermediate
  ((x - 0.5) log(x + 6.5), about 1.5x the result), so rtol 1e-5 plus atol 1e-5 near the
  zeros at 1 and 2; f64 within 1e-12.
- digamma and trigamma follow ATen's algorithm step for step: f32 within rtol 1e-5 (2e-4
  next to poles, where the result is 1/(x - pole) and x itself is rounded), f64 1e-12.
- erfc, erfcx and log_ndtr are Cephes' float rationals (3e-8 relative) over an exp whose
  argument is split to stay exact: f32 within rtol 2e-6 (erfcx against the CPU's f64).
- cummax/cummin only move values: exact. logcumsumexp adds in another order than the CPU's
  running sum: rtol 1e-6 (f32), 1e-12 (f64).
bf16/f16 compute in f32 and round once, as the CPU kernels do: within one bf16 rounding.
"""
import pytest
import torch
import torch.distributions as D

import torchtpu
from conftest import compare_with_cpu, no_fallback

GEN = torch.Generator().manual_seed(0)


def check(fn, x, rtol, atol):
    """fn on the CPU and natively on tpu agree (NaN where the CPU has NaN)."""
    got = no_fallback(lambda: fn(x.to("tpu")))
    torch.testing.assert_close(got.cpu(), fn(x), rtol=rtol, atol=atol, equal_nan=True)


def domain(lo, hi, n=2001, extra=(), dtype=torch.float32):
    return torch.cat([torch.linspace(lo, hi, n, dtype=torch.float64),
                      torch.tensor(extra, dtype=torch.float64)]).to(dtype)


EDGES = [0.0, -0.0, 1.0, 2.0, 0.5, -0.5, -2.5, 1e-30, 1e-8, 1e10, 1e30, float("inf"), float("-inf"), float("nan")]
POLES = [-1.0, -2.0, -7.0, -1e10]


@pytest.mark.parametrize("dtype,rtol,atol", [(torch.float32, 1e-5, 1e-5), (torch.float64, 1e-12, 1e-12)])
def test_lgamma(dtype, rtol, atol):
    check(torch.lgamma, domain(-20, 40, extra=EDGES + POLES + [3e38], dtype=dtype), rtol, atol)


@pytest.mark.parametrize("dtype,rtol,atol", [(torch.float32, 1e-5, 1e-5), (torch.float64, 1e-12, 1e-12)])
def test_digamma(dtype, rtol, atol):
    x = domain(-20, 40, extra=EDGES + POLES + [10.0, 9.99, 1e20], dtype=dtype)
    x = x[(x - x.round()).abs() > 1e-3]  # next to poles the result is 1/(x - pole): tested below
    check(torch.digamma, x, rtol, atol)
    check(torch.digamma, torch.tensor(EDGES + POLES + [-3.0001, -0.9999], dtype=dtype), 2e-4, 1e-5)


def test_digamma_signed_zero_and_poles():
    x = torch.tensor([0.0, -0.0, -1.0, -2.0, float("-inf")])
    got = no_fallback(lambda: torch.digamma(x.to("tpu"))).cpu()
    assert got[0] == float("-inf") and got[1] == float("inf") and got[2:].isnan().all()


@pytest.mark.parametrize("dtype,rtol,atol", [(torch.float32, 1e-5, 1e-5), (torch.float64, 1e-12, 1e-12)])
def test_trigamma(dtype, rtol, atol):
    x = domain(-10, 40, extra=[0.5, 0.49, 1e-3, 1e10], dtype=dtype)
    x = x[(x - x.round()).abs() > 1e-2]
    check(lambda t: torch.polygamma(1, t), x, rtol, atol)


def test_polygamma_of_higher_order_runs_on_the_cpu():
    x = torch.linspace(0.5, 5, 10)
    torchtpu.reset_fallback_stats()
    got = torch.polygamma(3, x.to("tpu")).cpu()
    assert "aten::polygamma.out" in torchtpu.fallback_stats()
    torch.testing.assert_close(got, torch.polygamma(3, x))


def test_erfc():
    check(torch.erfc, domain(-10, 10.5, extra=EDGES + [0.999, 1.0, 1.001, 1.999, 2.0, 9.2]), 2e-6, 1e-37)


def test_erfcx():
    """Against the CPU's float64 result: below -6 the CPU's float kernel is 2 exp(x * x) with
    x * x rounded, up to 4e-6 off; torchtpu squares exactly and stays within 2e-7."""
    x = domain(-9, 30, extra=EDGES + [1e20, -9.3])
    got = no_fallback(lambda: torch.special.erfcx(x.to("tpu"))).cpu()
    torch.testing.assert_close(got, torch.special.erfcx(x.double()).float(), rtol=2e-6, atol=0, equal_nan=True)


def test_log_ndtr():
    check(torch.special.log_ndtr, domain(-40, 10, extra=EDGES + [-1.0, -1e10, 1e10]), 2e-6, 1e-7)


def test_erfcx_and_log_ndtr_of_half_types_are_pytorchs_error():
    for fn in (torch.special.erfcx, torch.special.log_ndtr):
        with pytest.raises(NotImplementedError, match="not implemented for 'BFloat16'"):
            fn(torch.ones(3, dtype=torch.bfloat16, device="tpu"))


def test_erfc_family_in_float64_runs_on_the_cpu():
    x = torch.linspace(-5, 5, 11, dtype=torch.float64)
    torchtpu.reset_fallback_stats()
    got = torch.erfc(x.to("tpu")).cpu()
    assert "aten::erfc.out" in torchtpu.fallback_stats()
    torch.testing.assert_close(got, torch.erfc(x), rtol=0, atol=0)


def test_entr_and_xlog1py():
    x = torch.tensor([0.0, -0.0, 1e-30, 0.3, 1.0, 7.0, -1.0, float("inf"), float("nan")])
    check(torch.special.entr, x, 1e-6, 1e-7)
    y = torch.tensor([0.5, float("nan"), -1.0, -2.0, 1e-8, 3.0, 0.0, 1.0, 2.0])
    check(lambda t: torch.special.xlog1py(t, y.to(t.device)), x, 1e-6, 1e-7)
    check(lambda t: torch.special.xlog1py(2.0, t), x, 1e-6, 1e-7)
    check(lambda t: torch.special.xlog1py(t, 3), x, 1e-6, 1e-7)


@pytest.mark.parametrize("fn", [torch.lgamma, torch.digamma, torch.erfc, torch.special.entr,
                                lambda t: torch.polygamma(1, t)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_rounds_once(fn, dtype):
    x = domain(0.05, 8, n=500, dtype=dtype)
    check(fn, x, 1e-2, 1e-2)


def test_gradients():
    x = torch.rand(40, generator=GEN) * 6 + 0.1
    compare_with_cpu(torch.lgamma, x, rtol=1e-5, atol=1e-5)      # digamma
    compare_with_cpu(torch.digamma, x, rtol=1e-4, atol=1e-5)     # trigamma
    compare_with_cpu(torch.erfc, x - 3, rtol=1e-5, atol=1e-6)
    compare_with_cpu(torch.special.erfcx, x - 3, rtol=1e-5, atol=1e-6)
    compare_with_cpu(lambda t: torch.mvlgamma(t + 2, 3), x, rtol=1e-5, atol=1e-5)


def test_in_place():
    x = torch.rand(5, 7, generator=GEN) * 4 + 0.2
    for name in ("lgamma_", "digamma_", "erfc_"):
        got = no_fallback(lambda: getattr(x.to("tpu"), name)())
        torch.testing.assert_close(got.cpu(), getattr(x.clone(), name)(), rtol=1e-5, atol=1e-5)


def test_distributions_log_prob_and_gradients():
    """log_prob of the distributions built on lgamma/digamma, and its gradients with
    respect to the parameters, natively."""
    conc = torch.rand(6, generator=GEN) + 0.5
    rate = torch.rand(6, generator=GEN) + 0.5
    value = torch.rand(6, generator=GEN) * 0.8 + 0.1
    compare_with_cpu(lambda c, r, v: D.Gamma(c, r).log_prob(v), conc, rate, value, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda a, b, v: D.Beta(a, b).log_prob(v), conc, rate, value, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda a, v: D.Dirichlet(a).log_prob(v / v.sum()), conc, value, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda df, v: D.StudentT(df).log_prob(v), conc * 3, value, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda r: D.Poisson(r).log_prob(torch.arange(6.0, device=r.device)), rate * 4,
                     rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda a, b: D.Gamma(a, b).entropy(), conc, rate, rtol=1e-5, atol=1e-5)
    compare_with_cpu(lambda a, b: D.kl_divergence(D.Beta(a, b), D.Beta(b, a)), conc, rate, rtol=1e-4, atol=1e-5)


# ---- scans ----------------------------------------------------------------------------------

SCAN_CASES = [
    torch.tensor([3.0, 1.0, 3.0, 5.0, 5.0, 2.0, float("nan"), 9.0, float("nan"), 1.0]),  # ties, NaN
    torch.tensor([float("-inf"), float("-inf"), 2.0, float("inf"), -1.0]),
    torch.tensor([[1.0, 5.0, 2.0], [4.0, 0.0, 9.0], [4.0, 7.0, -1.0]]),
    torch.randint(-3, 3, (4, 9), generator=GEN),                   # many ties, int64
    torch.tensor(2.5),                                             # rank 0
    torch.randn(3, 1, 5, generator=GEN).bfloat16(),
]


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
@pytest.mark.parametrize("case", range(len(SCAN_CASES)))
def test_cummax_cummin_values_and_indices(op, case):
    x = SCAN_CASES[case]
    for dim in range(-x.dim(), x.dim()) if x.dim() else [0]:
        values, indices = no_fallback(lambda: op(x.to("tpu"), dim))
        want = op(x, dim)
        torch.testing.assert_close(values.cpu(), want.values, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(indices.cpu(), want.indices), (dim, indices.cpu(), want.indices)


def test_cummax_gradient_and_out():
    x = torch.randn(4, 6, generator=GEN)
    compare_with_cpu(lambda t: torch.cummax(t, 1).values, x)
    compare_with_cpu(lambda t: torch.cummin(t, 0).values * 2, x)
    values, indices = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    no_fallback(lambda: torch.cummax(x.to("tpu"), 1, out=(values, indices)))
    assert torch.equal(indices.cpu(), torch.cummax(x, 1).indices)


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
@pytest.mark.parametrize("n", [1, 2, 7, 64, 100])
def test_logcumsumexp(dtype, rtol, n):
    x = (torch.randn(3, n, generator=GEN) * 10).to(dtype)
    check(lambda t: torch.logcumsumexp(t, 1), x, rtol, 1e-6)
    check(lambda t: torch.logcumsumexp(t, 0), x, rtol, 1e-6)


def test_logcumsumexp_extremes():
    """Terms thousands apart (a shift by the global max would make the early ones -inf),
    infinities and NaN."""
    x = torch.tensor([-1000.0, 0.0, 1000.0, float("-inf"), -1000.0, float("inf"), 3.0])
    check(lambda t: torch.logcumsumexp(t, 0), x, 1e-6, 1e-6)
    check(lambda t: torch.logcumsumexp(t, 0), torch.tensor([float("-inf")] * 3 + [1.0, float("nan"), 2.0]), 1e-6, 1e-6)


def test_logcumsumexp_gradient_and_half():
    x = torch.randn(5, 33, generator=GEN)
    compare_with_cpu(lambda t: torch.logcumsumexp(t, 1), x, rtol=1e-5, atol=1e-5)
    check(lambda t: torch.logcumsumexp(t, 1), x.bfloat16(), 2e-2, 2e-2)
