"""The lowerings of torchtpu/csrc/lower_qr.cpp: torch.linalg.qr (every mode), torch.geqrf,
torch.linalg.householder_product (torch.orgqr) and torch.ormqr run natively (the IR's GEQRF,
GEQRF_TAU and HOUSEHOLDER_PRODUCT), forward and backward, batched, tall, square and wide, in
float32 and float64, with the CPU's signs (the same Householder convention as LAPACK);
nn.init.orthogonal_ and the householder orthogonal parametrization run on the device and the
latter trains like on the CPU; the ops work in fused and compile mode and export as custom
calls; bad input raises the CPU's errors.

Tolerances: the kernels work in f64 and round once, so float64 agrees with LAPACK to rounding
level (1e-10 on these random Gaussian matrices, condition numbers of a few tens at most).
float32 results differ from LAPACK's blocked f32 arithmetic by a few ulps times the condition
number: 1e-5 (2e-4 for gradients, which chain products and triangular solves). The backward
formulas multiply matrices, which the MXU does in bf16 passes by default: the tests run at
HIGHEST precision (f32-exact products), as the training tests do.
"""
import pytest
import torch

import torchtpu
from conftest import (assert_trains_like_cpu, compare_with_cpu as compare, no_fallback, same_error,
                      tpu)

GEN = torch.Generator().manual_seed(0)
F32 = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-10, atol=1e-10)
GRAD = {torch.float32: dict(rtol=2e-4, atol=2e-4), torch.float64: F64}

SHAPES = [(1, 1), (5, 5), (7, 4), (4, 7), (3, 6, 2), (2, 2, 3, 5), (0, 3, 3), (3, 0), (0, 4)]


@pytest.fixture(autouse=True)
def _highest(highest):
    yield


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=GEN, dtype=dtype)


def differentiable(mode, shape):
    """Where the CPU's linalg.qr has a derivative: not for mode "r" (no Q) nor for a tall
    complete QR."""
    return mode == "reduced" or (mode == "complete" and shape[-2] <= shape[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@pytest.mark.parametrize("shape", SHAPES)
def test_linalg_qr(shape, mode, dtype):
    compare(lambda a: torch.linalg.qr(a, mode=mode), randn(*shape, dtype=dtype),
            grad=differentiable(mode, shape) and 0 not in shape, **GRAD[dtype])


def test_qr_of_a_zero_column_and_strided_input():
    a = randn(6, 4, dtype=torch.float64)
    a[:, 2] = 0  # a zero column: its reflector is the identity (tau 0), as LAPACK leaves it
    compare(torch.geqrf, a, grad=False, **F64)
    compare(torch.linalg.qr, a, grad=False, **F64)
    wide = randn(5, 8)
    compare(torch.linalg.qr, wide.mT, **GRAD[torch.float32])  # a transposed (strided) operand
    compare(torch.linalg.qr, wide[:, ::2], **GRAD[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (6, 6), (7, 3), (3, 7), (2, 5, 4)])
def test_geqrf(shape, dtype):
    compare(torch.geqrf, randn(*shape, dtype=dtype), grad=False, **GRAD[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,k", [((1, 1), 1), ((5, 5), 5), ((7, 4), 4), ((7, 4), 2),
                                     ((3, 6, 3), 3), ((6, 3), 0)])
def test_householder_product(shape, k, dtype):
    packed, tau = torch.geqrf(randn(*shape, dtype=dtype))
    tau = tau[..., :k].contiguous()
    compare(torch.linalg.householder_product, packed, tau, **GRAD[dtype])
    compare(torch.orgqr, packed, tau, grad=False, **GRAD[dtype])


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("shape", [(5, 5), (6, 3), (2, 4, 4)])
def test_ormqr(shape, left, transpose):
    packed, tau = torch.geqrf(randn(*shape, dtype=torch.float64))
    m = shape[-2]
    other = randn(*shape[:-2], m, 3, dtype=torch.float64) if left else \
        randn(*shape[:-2], 2, m, dtype=torch.float64)
    compare(lambda v, t, c: torch.ormqr(v, t, c, left=left, transpose=transpose),
            packed, tau, other, **F64)


def test_orthogonal_init_runs_on_the_device():
    for rows, cols in [(4, 9), (9, 4), (6, 6)]:
        w = torch.empty(rows, cols, device="tpu")
        no_fallback(lambda: torch.nn.init.orthogonal_(w, gain=2.0))
        w = w.cpu().double()
        gram = w @ w.mT if rows <= cols else w.mT @ w
        torch.testing.assert_close(gram, 4 * torch.eye(min(rows, cols), dtype=torch.float64),
                                   rtol=1e-5, atol=1e-5)


def test_householder_orthogonal_parametrization_trains_like_cpu():
    """nn.utils.parametrizations.orthogonal of a non-square weight is householder_product
    of the weight's lower triangle, differentiated every step."""
    def train(device):
        torch.manual_seed(0)
        lin = torch.nn.Linear(4, 6, bias=False)
        torch.nn.utils.parametrizations.orthogonal(lin, orthogonal_map="householder")
        lin = lin.to(device)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1)).to(device)
        losses = []
        for _ in range(5):
            opt.zero_grad()
            loss = (lin(x) - 1).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return [v.item() for v in losses], [p.detach().cpu() for p in lin.parameters()]
    assert_trains_like_cpu(train)


def test_fused_mode_and_compile():
    a = randn(3, 5, 4)
    want = torch.linalg.qr(a)
    torchtpu.set_eager_mode("fused")
    try:
        torchtpu.reset_fused_stats()
        q, r = torch.linalg.qr(tpu(a))
        x = (q @ r).sum(-1)
        torch.testing.assert_close(q.cpu(), want.Q, **F32)
        torch.testing.assert_close(x.cpu(), a.sum(-1), **F32)
        assert "flush:view" not in torchtpu.fused_stats()
    finally:
        torchtpu.set_eager_mode("strict")

    def fn(m):
        q, r = torch.linalg.qr(m)
        return q.abs().sum() + r.diagonal(dim1=-2, dim2=-1).square().sum()
    got = no_fallback(lambda: torch.compile(fn, backend="tpu")(tpu(a)))
    torch.testing.assert_close(got.cpu(), fn(a), **F32)


def test_export_prints_custom_calls():
    text = torchtpu.export(lambda m: torch.linalg.qr(m), (tpu(randn(5, 3)),)).text
    assert 'call_target_name = "torchtpu.geqrf"' in text
    assert 'call_target_name = "torchtpu.householder_product"' in text


def test_errors_match_the_cpu():
    # PyTorch's meta kernel names the dtype "torch.int64" where the CPU's says "Long"
    same_error(torch.linalg.qr, torch.ones(3, 3, dtype=torch.int64), upto="Got")
    same_error(lambda a: torch.linalg.qr(a, mode="bogus"), randn(3, 3))
    same_error(torch.linalg.qr, randn(3))
    same_error(torch.linalg.qr, randn(3, 3).bfloat16())
    same_error(torch.linalg.householder_product, randn(3, 5), randn(2))  # fewer rows
    same_error(torch.linalg.householder_product, randn(5, 3), randn(4))  # tau too long
    same_error(torch.geqrf, randn(4))
    # the device still works
    compare(torch.linalg.qr, randn(4, 3), **GRAD[torch.float32])


def test_matrices_above_the_native_size_limit_take_the_fallback():
    """A factorization above 2^24 multiply-adds per matrix (lower_linalg.h) runs on the CPU's
    LAPACK, which is several times faster at that size than the unblocked kernels; at the
    limit it is native."""
    at_limit = randn(256, 256)
    no_fallback(lambda: torch.linalg.qr(tpu(at_limit)))
    for fn, a in [(torch.linalg.qr, randn(500, 200)), (torch.linalg.inv, randn(260, 260)),
                  (torch.linalg.cholesky, torch.eye(260))]:
        torchtpu.reset_fallback_stats()
        got = fn(tpu(a))
        assert torchtpu.fallback_stats(), fn
        want = fn(a)
        for g, w in zip(got if isinstance(got, tuple) else [got],
                        want if isinstance(want, tuple) else [want]):
            torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
