"""The lowering of torchtpu/csrc/lower_svd.cpp: torch.linalg.svd, svdvals and torch.svd run
natively (the IR's SVD, the one-sided Jacobi method), forward and backward, tall, wide and
square, batched, float32 and float64; so do pinv, matrix_rank, matrix_norm(ord=2) and cond,
which are built on them. A NaN raises the CPU's LinAlgError; fused and
compile mode; export as a custom call; full U or V of a non-square matrix and matrices above
the native size take the CPU fallback.

Singular vectors are unique only up to a common sign per pair (PyTorch's documentation says
so; our Jacobi method and LAPACK choose differently), so U's columns are compared after
aligning each one's sign with the CPU's, and V's with the same signs; gradients through
losses that do not depend on the signs (S and U Vh). The random matrices have well separated
singular values, so the vectors are otherwise unique.

Tolerances: the kernel works in f64 and rounds once, so float64 agrees with LAPACK to
rounding level times the size (1e-10); float32 to 1e-4 (vectors and gradients divide by
singular-value gaps). Backward formulas multiply matrices, which the MXU does in bf16
passes by default: the tests run at HIGHEST precision.
"""
import pytest
import torch

import torchtpu
from conftest import compare_with_cpu as compare, no_fallback, same_error, tpu

GEN = torch.Generator().manual_seed(0)
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}

SHAPES = [(1, 1), (2, 2), (5, 3), (3, 5), (4, 4), (2, 6, 3), (2, 3, 6), (3, 2, 2, 5), (32, 20),
          (0, 3), (3, 0), (2, 0, 4)]


@pytest.fixture(autouse=True)
def _highest(highest):
    yield


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=GEN, dtype=dtype)


def signs(u, ref):
    """Per column of u, the sign that makes its dot product with ref's column positive."""
    s = torch.sign((u * ref).sum(-2, keepdim=True))
    return torch.where(s == 0, torch.ones_like(s), s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_svd_matches_the_cpu_up_to_signs(shape, dtype):
    a = randn(*shape, dtype=dtype)
    full = shape[-1] == shape[-2]  # full U and V of a square matrix are the reduced ones
    u, s, vh = torch.linalg.svd(a, full_matrices=full)
    ut, st, vht = no_fallback(lambda: torch.linalg.svd(tpu(a), full_matrices=full))
    assert ut.device.type == "tpu" and ut.shape == u.shape and vht.shape == vh.shape
    torch.testing.assert_close(st.cpu(), s, **TOL[dtype])
    sg = signs(ut.cpu(), u)
    torch.testing.assert_close(ut.cpu() * sg, u, **TOL[dtype])
    torch.testing.assert_close(vht.cpu() * sg.mT, vh, **TOL[dtype])
    torch.testing.assert_close(no_fallback(lambda: torch.linalg.svdvals(tpu(a))).cpu(), s,
                               **TOL[dtype])
    if a.numel():  # U diag(S) Vh is A
        torch.testing.assert_close((ut * st.unsqueeze(-2) @ vht).cpu(), a, **TOL[dtype])


def test_torch_svd_gives_v():
    a = randn(6, 4, dtype=torch.float64)
    u, s, v = torch.svd(a)
    ut, st, vt = no_fallback(lambda: torch.svd(tpu(a)))
    sg = signs(ut.cpu(), u)
    torch.testing.assert_close(st.cpu(), s)
    torch.testing.assert_close(vt.cpu() * sg, v)
    _, st, _ = torch.svd(tpu(a), compute_uv=False)
    torch.testing.assert_close(st.cpu(), s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (4, 3), (3, 4), (2, 5, 5)])
def test_gradients_of_sign_free_losses(shape, dtype):
    def fn(a):
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        return s, u @ vh
    compare(fn, randn(*shape, dtype=dtype), **TOL[dtype])
    compare(torch.linalg.svdvals, randn(*shape, dtype=dtype), **TOL[dtype])


def test_ops_built_on_svd():
    a = randn(5, 3, dtype=torch.float64)
    for fn in (torch.linalg.pinv, torch.linalg.matrix_rank, torch.linalg.cond,
               lambda x: torch.linalg.matrix_norm(x, ord=2),
               lambda x: torch.linalg.matrix_norm(x, ord="nuc")):
        torch.testing.assert_close(no_fallback(lambda: fn(tpu(a))).cpu(), fn(a),
                                   **TOL[torch.float64])
    low_rank = randn(6, 2, dtype=torch.float64) @ randn(2, 5, dtype=torch.float64)
    assert torch.linalg.matrix_rank(tpu(low_rank)).item() == 2


def test_rank_deficient_matrices_keep_orthonormal_vectors():
    for a in (torch.zeros(4, 3, dtype=torch.float64), torch.ones(5, 4, dtype=torch.float64),
              torch.eye(3, dtype=torch.float64)):
        u, s, vh = no_fallback(lambda: torch.linalg.svd(tpu(a), full_matrices=False))
        u, s, vh = u.cpu(), s.cpu(), vh.cpu()
        torch.testing.assert_close(s, torch.linalg.svdvals(a), **TOL[torch.float64])
        eye = torch.eye(s.shape[-1], dtype=torch.float64)
        torch.testing.assert_close(u.mT @ u, eye, **TOL[torch.float64])
        torch.testing.assert_close(vh @ vh.mT, eye, **TOL[torch.float64])
        torch.testing.assert_close(u * s @ vh, a, **TOL[torch.float64])


def test_nan_raises_the_cpu_error_and_infinity_gives_nan():
    a = randn(3, 3)
    a[1, 0] = float("nan")
    batch = torch.stack([torch.eye(3), a])
    for x in (a, batch):
        for fn in (torch.linalg.svd, torch.linalg.svdvals):
            with pytest.raises(torch.linalg.LinAlgError) as want:
                fn(x)
            with pytest.raises(torch.linalg.LinAlgError) as got:
                fn(tpu(x))
            assert str(got.value) == str(want.value)
    a[1, 0] = float("inf")
    batch = torch.stack([torch.eye(3), a])
    want, got = torch.linalg.svdvals(batch), torch.linalg.svdvals(tpu(batch)).cpu()
    assert got[1].isnan().all() and want[1].isnan().all()
    torch.testing.assert_close(got[0], want[0])


def test_other_errors_match_the_cpu():
    same_error(torch.linalg.svd, torch.ones(3))
    # PyTorch's meta kernel names the dtype "torch.int64" where the CPU's says "Long"
    same_error(torch.linalg.svd, torch.ones(3, 3, dtype=torch.long), upto="Got")
    same_error(lambda x: torch.linalg.svd(x, driver="gesvd"), torch.ones(3, 3))


def test_fused_mode_compile_and_export():
    a = randn(3, 5, 4)
    s = torch.linalg.svdvals(a)
    torchtpu.set_eager_mode("fused")
    try:
        got = torch.linalg.svdvals(tpu(a)) * 2
        torch.testing.assert_close(got.cpu(), 2 * s, **TOL[torch.float32])
    finally:
        torchtpu.set_eager_mode("strict")

    def fn(m):
        u, s, vh = torch.linalg.svd(m, full_matrices=False)
        return s.sum(-1) + (u @ vh).sum((-2, -1))
    got = no_fallback(lambda: torch.compile(fn, backend="tpu")(tpu(a)))
    torch.testing.assert_close(got.cpu(), fn(a), **TOL[torch.float32])
    text = torchtpu.export(lambda m: torch.linalg.svd(m, full_matrices=False), (tpu(a),)).text
    assert 'call_target_name = "torchtpu.svd"' in text


def test_full_vectors_of_non_square_and_large_matrices_take_the_fallback():
    """Full U of a tall matrix needs a basis of U's complement, and past 32^3 multiply-adds
    the Jacobi kernel is several times slower than LAPACK (lower_svd.cpp): those run on the
    CPU, with the CPU's exact results."""
    for a, full in ((randn(5, 3), True), (randn(33, 32), False), (randn(2, 40, 40), False)):
        torchtpu.reset_fallback_stats()
        got = torch.linalg.svd(tpu(a), full_matrices=full)
        assert torchtpu.fallback_stats()
        for g, w in zip(got, torch.linalg.svd(a, full_matrices=full)):
            torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
