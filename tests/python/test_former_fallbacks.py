"""Calls that used to take the CPU fallback (found with tools/opinfo_report.py --fallbacks)
and now run natively, checked against the CPU with their gradients and errors:
  max/min(dim), kthvalue and index_select of a 0-d tensor (lower_reduce.cpp,
  lower_reorder.cpp, lower_nn.cpp); addbmm (lower_matmul.cpp: one dot_general contracting the
  batch and k); the deprecated torch.cholesky (compound_ops.cpp); searchsorted with a sorter
  and searchsorted.Scalar (lower_reorder.cpp); out-of-place masked_scatter of a self that
  broadcasts to the mask (lower_index.cpp).

Tolerances: float32 rounding (1e-5) for gathers and selections, which are exact; products at
HIGHEST precision (the MXU's default is bf16 passes) sum in another order than the CPU's
BLAS, 1e-4 relative.
"""
import warnings

import pytest
import torch

import torchtpu
from conftest import compare_with_cpu as compare, no_fallback, same_error, tpu

GEN = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=GEN, dtype=dtype)


@pytest.fixture(autouse=True)
def _highest(highest):
    yield


# ---- 0-d tensors ---------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [torch.max, torch.min])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (-1, True)])
def test_extreme_with_dim_of_a_scalar(fn, dim, keepdim):
    compare(lambda x: tuple(fn(x, dim, keepdim)), torch.tensor(2.5))


def test_kthvalue_of_a_scalar():
    compare(lambda x: tuple(torch.kthvalue(x, 1, 0, True)), torch.tensor(-1.5))
    same_error(lambda x: torch.kthvalue(x, 2), torch.tensor(1.0))


def test_index_select_of_a_scalar():
    x = torch.tensor(4.0)
    compare(lambda x, i: torch.index_select(x, 0, i), x, torch.tensor([0]))
    compare(lambda x, i: torch.index_select(x, -1, i), x, torch.tensor(0))
    same_error(lambda x, i: torch.index_select(x, 0, i), x, torch.tensor([0, 0]))


def test_index_select_of_a_scalar_out_of_range_is_an_index_error_at_sync():
    got = torch.index_select(tpu(torch.tensor(4.0)), 0, tpu(torch.tensor([1])))
    with pytest.raises(IndexError, match="index_select"):
        got.cpu()
    assert torch.ones(2, device="tpu").sum().item() == 2  # the device still works


# ---- addbmm ----------------------------------------------------------------------------------

@pytest.mark.parametrize("self_shape", [(3, 5), (5,), (1, 1), ()])
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, -2.0)])
def test_addbmm(self_shape, beta, alpha):
    compare(lambda s, a, b: torch.addbmm(s, a, b, beta=beta, alpha=alpha),
            randn(*self_shape), randn(4, 3, 6), randn(4, 6, 5), rtol=1e-4, atol=1e-4)


def test_addbmm_beta_zero_ignores_nan_and_out():
    s = torch.full((2, 2), float("nan"))
    a, b = randn(3, 2, 4), randn(3, 4, 2)
    compare(lambda s, a, b: torch.addbmm(s, a, b, beta=0), s, a, b, rtol=1e-4, atol=1e-4, grad=False)
    out = tpu(torch.empty(2, 2))
    no_fallback(lambda: torch.addbmm(tpu(s), tpu(a), tpu(b), beta=0, out=out))
    torch.testing.assert_close(out.cpu(), torch.addbmm(s, a, b, beta=0), rtol=1e-4, atol=1e-4)


def test_addbmm_errors():
    same_error(torch.addbmm, randn(3, 5), randn(4, 3, 6), randn(3, 6, 5))
    same_error(torch.addbmm, randn(3, 5), randn(3, 6), randn(4, 6, 5))


# ---- torch.cholesky --------------------------------------------------------------------------

def spd(*batch, n=4, dtype=torch.float32):
    a = randn(*batch, n, n, dtype=dtype)
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("batch", [(), (3,), (2, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cholesky(upper, batch, dtype):
    warnings.simplefilter("ignore")  # the deprecation warning, as on the CPU
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    # a symmetric input whose gradient stays symmetric: cholesky reads one triangle
    compare(lambda a: torch.cholesky((a + a.mT) / 2, upper), spd(*batch, dtype=dtype),
            rtol=tol, atol=tol)


def test_cholesky_out():
    warnings.simplefilter("ignore")
    a = spd(2)
    out = tpu(torch.empty(0))
    no_fallback(lambda: torch.cholesky(tpu(a), out=out))
    torch.testing.assert_close(out.cpu(), torch.cholesky(a), rtol=1e-4, atol=1e-4)


def test_cholesky_errors():
    warnings.simplefilter("ignore")
    indefinite = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    same_error(torch.cholesky, indefinite)
    same_error(torch.cholesky, torch.stack([spd(n=2), indefinite]))  # names the batch element
    same_error(torch.cholesky, torch.ones(3))
    same_error(torch.cholesky, torch.ones(2, 3))
    same_error(torch.cholesky, torch.ones(2, 2, dtype=torch.int64))  # through the fallback


# ---- searchsorted ----------------------------------------------------------------------------

@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("out_int32", [False, True])
def test_searchsorted_with_a_sorter(side, out_int32):
    seq = torch.tensor([3.0, 1.0, 2.0, 2.0, 9.0])
    values = torch.tensor([[2.0, 0.0, 9.0], [2.5, 10.0, 1.0]])
    sorter = torch.argsort(seq)
    compare(lambda s, v, o: torch.searchsorted(s, v, side=side, out_int32=out_int32, sorter=o),
            seq, values, sorter, grad=False)
    batched = randn(2, 7)
    compare(lambda s, v, o: torch.searchsorted(s, v, side=side, sorter=o),
            batched, randn(2, 4), torch.argsort(batched, dim=-1), grad=False)


def test_searchsorted_with_a_long_sorted_row():  # the binary search (past 64 boundaries)
    seq = randn(100)
    compare(lambda s, v, o: torch.searchsorted(s, v, sorter=o), seq, randn(30),
            torch.argsort(seq), grad=False)


def test_searchsorted_sorter_errors():
    seq = torch.tensor([3.0, 1.0, 2.0])
    values = torch.tensor([2.5])
    same_error(lambda s, v, o: torch.searchsorted(s, v, sorter=o), seq, values,
               torch.tensor([0, 1]))  # the meta kernel's size check
    same_error(lambda s, v, o: torch.searchsorted(s, v, sorter=o), seq, values,
               torch.tensor([1, 2, 0], dtype=torch.int32))  # the CPU's dtype check, on the fallback
    got = torch.searchsorted(tpu(seq), tpu(values), sorter=tpu(torch.tensor([1, 2, 3])))
    with pytest.raises(IndexError, match="searchsorted"):  # out of the row: at the next sync
        got.cpu()
    assert torch.ones(2, device="tpu").sum().item() == 2


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_scalar(right):
    seq = torch.tensor([1.0, 2.0, 2.0, 3.5])
    for v in (2.0, 0.1, 3.5, 7.0, float("nan")):
        compare(lambda s: torch.searchsorted(s, v, right=right), seq, grad=False)
    compare(lambda s, o: torch.searchsorted(s, 2.5, sorter=o), torch.tensor([3.0, 1.0, 2.0]),
            torch.tensor([1, 2, 0]), grad=False)


# ---- masked_scatter --------------------------------------------------------------------------

def test_masked_scatter_broadcasts_self():
    mask = torch.rand(4, 5, generator=GEN) > 0.5
    compare(lambda x, s: torch.masked_scatter(x, mask.to(x.device), s), randn(5), randn(4, 5))
    compare(lambda x, s: torch.masked_scatter(x, mask.to(x.device)[:1], s), randn(4, 1), randn(20))
