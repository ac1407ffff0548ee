"""The lowerings of torchtpu/csrc/lower_linalg.cpp and lower_lu.cpp: torch.linalg.cholesky /
cholesky_ex, linalg.solve_triangular, torch.triangular_solve, cholesky_solve, cholesky_inverse,
and the LU family (linalg.solve, inv, det, slogdet, logdet, lu_factor, lu_solve, linalg.lu,
lu_unpack) run natively (the IR's CHOLESKY, TRIANGULAR_SOLVE, LU, LU_PIVOTS and
LU_PIVOTS_TO_PERMUTATION), forward and backward, batched with broadcasting, in float32 and
float64; singular or non positive-definite inputs give the CPU's info and LinAlgError;
MultivariateNormal (cholesky + solve_triangular) trains like on the CPU; the ops work in fused
and compile mode, and the Cholesky family's StableHLO runs under XLA.

Tolerances: the kernels work in f64 and round once, so float64 agrees with LAPACK to
rounding level (1e-10 on these well-conditioned matrices: A = M M^T + n I has a condition
number of a few tens, general() below about 3). float32 results differ from LAPACK's f32
arithmetic by a few ulps of the condition number times eps: 1e-5 (2e-4 for gradients, which
chain several solves).
The backward formulas also multiply matrices, which the MXU does in bf16 passes by default:
the tests run at HIGHEST precision (f32-exact products), as the training tests do.
"""
import numpy as np
import pytest
import torch

import torchtpu
from conftest import compare_with_cpu as compare, no_fallback, tpu

GEN = torch.Generator().manual_seed(0)
F32 = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-10, atol=1e-10)
TOL = {torch.float32: F32, torch.float64: F64}
GRAD = {torch.float32: dict(rtol=2e-4, atol=2e-4), torch.float64: F64}


@pytest.fixture(autouse=True)
def _highest(highest):
    yield


def assert_same_linalg_error(fn, x):
    """fn(x) raises the same LinAlgError on tpu as on the CPU."""
    with pytest.raises(torch.linalg.LinAlgError) as want:
        fn(x)
    with pytest.raises(torch.linalg.LinAlgError) as got:
        fn(tpu(x))
    assert str(got.value) == str(want.value)


def spd(*shape, dtype=torch.float32):
    m = torch.randn(*shape, generator=GEN, dtype=dtype)
    return m @ m.mT + shape[-1] * torch.eye(shape[-1], dtype=dtype)


def tril_factor(*shape, dtype=torch.float32, upper=False):
    """A well-conditioned triangular matrix: the factor of an SPD matrix."""
    return torch.linalg.cholesky(spd(*shape, dtype=dtype), upper=upper)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (3, 6, 6), (2, 2, 4, 4), (0, 3, 3)])
def test_cholesky(shape, upper, dtype):
    compare(lambda a: torch.linalg.cholesky(a, upper=upper), spd(*shape, dtype=dtype),
            **GRAD[dtype])


def test_cholesky_reads_one_triangle():
    a = spd(4, 4)
    junk = a.clone()
    junk.triu_(1).mul_(100).add_(a.tril())  # the upper triangle is garbage
    got = no_fallback(lambda: torch.linalg.cholesky(tpu(junk)))
    torch.testing.assert_close(got.cpu(), torch.linalg.cholesky(junk), **F32)


def test_cholesky_ex_info_and_error_match_the_cpu():
    a = spd(3, 4, 4, dtype=torch.float64)
    a[1, 1, 1] = -5.0  # the second batch element's leading minor of order 2 fails
    a[2, 0, 0] = float("nan")  # the third fails at once
    l_cpu, info_cpu = torch.linalg.cholesky_ex(a)
    l_tpu, info_tpu = no_fallback(lambda: torch.linalg.cholesky_ex(tpu(a)))
    assert info_tpu.dtype == torch.int32 and info_tpu.device.type == "tpu"
    assert info_tpu.cpu().tolist() == info_cpu.tolist() == [0, 2, 1]
    torch.testing.assert_close(l_tpu[0].cpu(), l_cpu[0], **F64)
    assert_same_linalg_error(torch.linalg.cholesky, a)
    assert_same_linalg_error(lambda x: torch.linalg.cholesky(x[1]), a)
    assert torch.linalg.cholesky(tpu(a[0])).isfinite().all()  # the device still works


def test_cholesky_check_errors_and_low_precision_take_the_cpu_path():
    bad = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.cholesky_ex(tpu(bad), check_errors=True)
    with pytest.raises(RuntimeError) as want:
        torch.linalg.cholesky(spd(3, 3).bfloat16())
    with pytest.raises(RuntimeError) as got:
        torch.linalg.cholesky(tpu(spd(3, 3).bfloat16()))
    assert type(got.value) is type(want.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(upper, left, unit, dtype):
    a = tril_factor(3, 5, 5, dtype=dtype, upper=upper)
    if unit:
        a = a / a.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)  # a unit diagonal keeps it conditioned
    b = torch.randn(3, 5, 2, generator=GEN, dtype=dtype)
    if not left:
        b = b.mT.contiguous()
    compare(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left,
                                                       unitriangular=unit), a, b, **GRAD[dtype])


def test_solve_triangular_broadcasts_batch_dims_and_writes_out():
    a = tril_factor(2, 1, 4, 4)
    b = torch.randn(3, 4, 2, generator=GEN)
    compare(lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), a, b,
            **GRAD[torch.float32])
    out = torch.empty(2, 3, 4, 2, device="tpu")
    no_fallback(lambda: torch.linalg.solve_triangular(tpu(a), tpu(b), upper=False, out=out))
    torch.testing.assert_close(out.cpu(), torch.linalg.solve_triangular(a, b, upper=False), **F32)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("upper", [False, True])
def test_legacy_triangular_solve(upper, transpose):
    a = tril_factor(2, 4, 4, upper=upper)
    b = torch.randn(2, 4, 3, generator=GEN)
    compare(lambda b, a: torch.triangular_solve(b, a, upper=upper, transpose=transpose), b, a,
            **GRAD[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(upper, dtype):
    f = tril_factor(2, 5, 5, dtype=dtype, upper=upper)
    b = torch.randn(1, 5, 3, generator=GEN, dtype=dtype)  # broadcast against f's batch
    compare(lambda b, f: torch.cholesky_solve(b, f, upper=upper), b, f, **GRAD[dtype])
    compare(lambda f: torch.cholesky_inverse(f, upper=upper), f[0], **GRAD[dtype])


def test_multivariate_normal_trains_like_on_the_cpu():
    """A Gaussian's mean and Cholesky factor fitted by maximum likelihood: log_prob is a
    solve_triangular, the parametrization a cholesky of a covariance."""
    data = torch.randn(64, 3, generator=GEN) @ torch.tensor([[2.0, 0, 0], [1, 1, 0], [0, 0.5, 0.3]])

    def train(device):
        mean = torch.zeros(3, device=device, requires_grad=True)
        raw = torch.eye(3, device=device).clone().requires_grad_(True)
        opt = torch.optim.SGD([mean, raw], lr=0.01)
        x = data.to(device)
        losses = []
        for _ in range(5):
            cov = raw @ raw.mT + 0.1 * torch.eye(3, device=device)
            dist = torch.distributions.MultivariateNormal(mean, covariance_matrix=cov)
            loss = -dist.log_prob(x).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return [v.item() for v in losses], [mean.detach().cpu(), raw.detach().cpu()]

    want_losses, want = train("cpu")
    got_losses, got = no_fallback(lambda: train("tpu"))
    assert got_losses == pytest.approx(want_losses, rel=1e-4)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def fit_step(a, b):
    l, info = torch.linalg.cholesky_ex(a)
    # l.mT: a row-major read of the column-major factor (LAPACK's layout, which the meta
    # kernel gives L), which the pending graph expresses as a transpose
    return torch.cholesky_solve(b, l), info, torch.linalg.solve_triangular(l.mT, b, upper=True)


def test_fused_and_compiled_modes():
    a, b = spd(2, 4, 4), torch.randn(2, 4, 3, generator=GEN)
    want = fit_step(a, b)
    torchtpu.set_eager_mode("fused")
    try:
        torchtpu.reset_fused_stats()
        got = no_fallback(lambda: fit_step(tpu(a), tpu(b)))
        assert "flush:view" not in torchtpu.fused_stats()
    finally:
        torchtpu.set_eager_mode("strict")
    for w, g in zip(want, got):
        torch.testing.assert_close(g.cpu(), w, **F32)
    compiled = torch.compile(fit_step, backend="tpu", fullgraph=True)
    got = no_fallback(lambda: compiled(tpu(a), tpu(b)))
    for w, g in zip(want, got):
        torch.testing.assert_close(g.cpu(), w, **F32)


def test_export_runs_under_xla():
    from test_compile import run_xla
    a = spd(2, 4, 4, dtype=torch.float64)
    b = torch.randn(2, 4, 3, generator=GEN, dtype=torch.float64)

    def fn(a, b):
        l = torch.linalg.cholesky_ex(a)[0]
        return l, torch.linalg.solve_triangular(l, b, upper=False, left=True), \
            torch.linalg.solve_triangular(l.mT, b.mT, upper=True, left=False)

    prog = torchtpu.export(fn, (tpu(a), tpu(b)))
    assert '"stablehlo.cholesky"' in prog.text and '"stablehlo.triangular_solve"' in prog.text
    got = run_xla(prog.text, prog.arguments(a, b))
    for g, w in zip(got, fn(a, b)):
        np.testing.assert_allclose(g, w.numpy(), **F64)


# ---- the LU family (lower_lu.cpp) -------------------------------------------------------------

def general(*shape, dtype=torch.float32):
    """Well-conditioned random matrices: the eigenvalues of randn(n, n) / sqrt(n) fill about
    the unit disk (the circular law), so 2 I + that keeps them in |z - 2| <= ~1."""
    n = shape[-1]
    m = torch.randn(*shape, generator=GEN, dtype=dtype) / max(n, 1) ** 0.5
    return m + 2 * torch.eye(n, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (3, 6, 6), (2, 1, 4, 4), (0, 3, 3)])
def test_solve_inv_det_slogdet(shape, dtype):
    a = general(*shape, dtype=dtype)
    b = torch.randn(*shape[:-1], 2, generator=GEN, dtype=dtype)
    tol = GRAD[dtype]
    compare(lambda a, b: torch.linalg.solve(a, b), a, b, **tol)
    compare(lambda a: torch.linalg.inv(a), a, **tol)
    compare(lambda a: torch.linalg.det(a), a, **tol)
    compare(lambda a: torch.linalg.slogdet(a), a, **tol)
    compare(lambda a: torch.logdet(a @ a.mT), a, **tol)


@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("left", [True, False])
def test_solve_layouts_vectors_and_broadcasting(left, contiguous):
    """The CPU factors A^T for a contiguous A and A otherwise; the LU it returns and the
    backward follow that choice, so both layouts are compared, with gradients."""
    a = general(2, 1, 4, 4)
    if not contiguous:
        a = a.mT.contiguous().mT
    b = torch.randn(3, 4, 2, generator=GEN)
    if not left:
        b = b.mT.contiguous()
    compare(lambda a, b: torch.linalg.solve(a, b, left=left), a, b, **GRAD[torch.float32])
    compare(lambda a: torch.linalg.det(a), a, **GRAD[torch.float32])
    if left:
        compare(lambda a, v: torch.linalg.solve(a, v), a[0, 0], b[0, :, 0], **GRAD[torch.float32])
        compare(lambda a, v: torch.linalg.solve(a, v), a, b[0, :, 0], **GRAD[torch.float32])


@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("left", [True, False])
def test_lu_factor_solve_unpack(left, adjoint):
    a = general(3, 5, 5)
    compare(lambda a: torch.linalg.lu_factor(a), a, **GRAD[torch.float32])
    lu, piv = torch.linalg.lu_factor(a)
    b = torch.randn(3, 5, 2, generator=GEN)
    if not left:
        b = b.mT.contiguous()
    compare(lambda lu, b: torch.linalg.lu_solve(lu, piv.to(lu.device), b, left=left,
                                                adjoint=adjoint), lu, b, **GRAD[torch.float32])
    compare(lambda a: torch.linalg.lu(a), a, **GRAD[torch.float32])
    compare(lambda lu: torch.lu_unpack(lu, piv.to(lu.device)), lu, **GRAD[torch.float32])


def test_singular_matrices_match_the_cpu():
    s = torch.tensor([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]]], dtype=torch.float64)
    _, _, info = torch.linalg.lu_factor_ex(s)
    _, _, info_tpu = no_fallback(lambda: torch.linalg.lu_factor_ex(tpu(s)))
    assert info_tpu.cpu().tolist() == info.tolist() == [2, 0]
    det = no_fallback(lambda: torch.linalg.det(tpu(s)))
    assert det.cpu().tolist() == torch.linalg.det(s).tolist()
    sign, logabs = no_fallback(lambda: torch.linalg.slogdet(tpu(s)))
    assert sign.cpu().tolist() == [0.0, 1.0] and logabs[0].item() == float("-inf")
    assert_same_linalg_error(torch.linalg.inv, s)
    assert_same_linalg_error(lambda x: torch.linalg.solve(x, torch.ones_like(x[..., :1])), s)
    assert torch.linalg.inv(tpu(s[1])).isfinite().all()  # the device still works


def test_lu_falls_back_for_what_it_does_not_lower():
    rect = torch.randn(3, 5, generator=GEN)
    lu, piv = torch.linalg.lu_factor(tpu(rect))  # rectangular: the CPU path, same answer
    want_lu, want_piv = torch.linalg.lu_factor(rect)
    torch.testing.assert_close(lu.cpu(), want_lu)
    assert piv.cpu().tolist() == want_piv.tolist()


def test_lu_family_in_fused_and_compiled_modes():
    a, b = general(2, 4, 4), torch.randn(2, 4, 3, generator=GEN)

    def fn(a, b):
        return torch.linalg.solve(a, b), torch.linalg.inv(a), torch.linalg.slogdet(a)[1]

    want = fn(a, b)
    torchtpu.set_eager_mode("fused")
    try:
        got = no_fallback(lambda: fn(tpu(a), tpu(b)))
    finally:
        torchtpu.set_eager_mode("strict")
    for w, g in zip(want, got):
        torch.testing.assert_close(g.cpu(), w, **F32)
    compiled = torch.compile(lambda a, b: torch.linalg.solve_ex(a, b)[0], backend="tpu")
    torch.testing.assert_close(no_fallback(lambda: compiled(tpu(a), tpu(b))).cpu(), want[0], **F32)
