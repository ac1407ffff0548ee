"""The lowering of torchtpu/csrc/lower_eigh.cpp: torch.linalg.eigh and eigvalsh run natively
(the IR's EIGH, the Jacobi method), forward and backward, batched, both triangles, float32
and float64; a NaN raises the CPU's LinAlgError; fused and compile mode; export as a custom
call; matrices above the native size take the CPU fallback.

Eigenvectors are unique only up to sign (PyTorch's documentation says so; our Jacobi method
and LAPACK choose differently), so eigenvectors are compared after aligning each one's sign
with the CPU's, and gradients through losses that do not depend on the signs (functions of
the eigenvalues and of v * v, which backward formulas handle exactly as PyTorch's docs ask).
The random matrices here have well separated eigenvalues, so the vectors are otherwise unique.

Tolerances: the kernel works in f64 and rounds once, so float64 agrees with LAPACK to rounding
level times n (1e-10); float32 eigenvalues to a few ulps of the largest (1e-5), and vectors
and gradients, which divide by eigenvalue gaps, to 1e-4. Backward formulas multiply matrices,
which the MXU does in bf16 passes by default: the tests run at HIGHEST precision.
"""
import pytest
import torch

import torchtpu
from conftest import compare_with_cpu as compare, no_fallback, same_error, tpu

GEN = torch.Generator().manual_seed(0)
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}

SHAPES = [(1, 1), (2, 2), (5, 5), (3, 4, 4), (2, 2, 6, 6), (32, 32), (0, 3, 3), (2, 0, 0)]


@pytest.fixture(autouse=True)
def _highest(highest):
    yield


def symmetric(*shape, dtype=torch.float32):
    a = torch.randn(*shape, generator=GEN, dtype=dtype)
    return a + a.mT


def aligned(v, ref):
    """v's columns times the sign that makes each one's dot product with ref's positive."""
    signs = torch.sign((v * ref).sum(-2, keepdim=True))
    return v * torch.where(signs == 0, torch.ones_like(signs), signs)


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_eigh_matches_the_cpu_up_to_signs(shape, dtype, uplo):
    a = symmetric(*shape, dtype=dtype)
    a = a + torch.randn(*shape, generator=GEN, dtype=dtype).triu(1)  # the other triangle: unread
    w, v = torch.linalg.eigh(a, UPLO=uplo)
    wt, vt = no_fallback(lambda: torch.linalg.eigh(tpu(a), UPLO=uplo))
    assert wt.device.type == "tpu" and wt.shape == w.shape
    assert vt.stride() == v.stride() or v.numel() == 0  # (an empty tensor's strides are moot)
    torch.testing.assert_close(wt.cpu(), w, **TOL[dtype])
    torch.testing.assert_close(aligned(vt.cpu(), v), v, **TOL[dtype])
    torch.testing.assert_close(no_fallback(lambda: torch.linalg.eigvalsh(tpu(a), UPLO=uplo)).cpu(),
                               w, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 5, 5)])
def test_gradients_of_sign_free_losses(shape, dtype):
    def fn(a):
        w, v = torch.linalg.eigh(a)
        return w, v * v
    compare(fn, symmetric(*shape, dtype=dtype), **TOL[dtype])
    compare(torch.linalg.eigvalsh, symmetric(*shape, dtype=dtype), **TOL[dtype])


def test_repeated_eigenvalues_and_strided_input():
    eye = torch.eye(4, dtype=torch.float64)
    w, v = no_fallback(lambda: torch.linalg.eigh(tpu(3 * eye)))
    torch.testing.assert_close(w.cpu(), torch.full((4,), 3.0, dtype=torch.float64))
    torch.testing.assert_close(v.cpu().mT @ v.cpu(), eye)
    a = symmetric(6, 6, dtype=torch.float64)
    torch.testing.assert_close(no_fallback(lambda: torch.linalg.eigvalsh(tpu(a)[::2, ::2])).cpu(),
                               torch.linalg.eigvalsh(a[::2, ::2]), **TOL[torch.float64])


def test_nan_raises_the_cpu_error_and_the_device_still_works():
    for shape in [(3, 3), (2, 3, 3)]:
        a = symmetric(*shape)
        a[..., 1, 0] = float("nan")
        with pytest.raises(torch.linalg.LinAlgError) as want:
            torch.linalg.eigh(a)
        with pytest.raises(torch.linalg.LinAlgError) as got:
            torch.linalg.eigh(tpu(a))
        # LAPACK's error code counts what did not converge; ours the NaN eigenvalues
        assert str(got.value).split("error code")[0] == str(want.value).split("error code")[0]
        with pytest.raises(torch.linalg.LinAlgError):
            torch.linalg.eigvalsh(tpu(a))
    a = symmetric(3, 3)
    torch.testing.assert_close(torch.linalg.eigvalsh(tpu(a)).cpu(), torch.linalg.eigvalsh(a),
                               **TOL[torch.float32])


def test_other_errors_match_the_cpu():
    same_error(torch.linalg.eigh, torch.ones(3, 4))
    same_error(torch.linalg.eigh, torch.ones(3))
    same_error(torch.linalg.eigh, torch.ones(3, 3, dtype=torch.bfloat16))
    same_error(lambda x: torch.linalg.eigh(x, UPLO="X"), torch.ones(3, 3))


def test_fused_mode_compile_and_export():
    a = symmetric(3, 5, 5)
    w = torch.linalg.eigvalsh(a)
    torchtpu.set_eager_mode("fused")
    try:
        got = torch.linalg.eigvalsh(tpu(a)) * 2
        torch.testing.assert_close(got.cpu(), 2 * w, **TOL[torch.float32])
    finally:
        torchtpu.set_eager_mode("strict")

    def fn(m):
        w, v = torch.linalg.eigh(m)
        return w.sum(-1) + (v * v).sum((-2, -1))
    got = no_fallback(lambda: torch.compile(fn, backend="tpu")(tpu(a)))
    torch.testing.assert_close(got.cpu(), fn(a), **TOL[torch.float32])
    text = torchtpu.export(torch.linalg.eigh, (tpu(a),)).text
    assert 'call_target_name = "torchtpu.eigh"' in text


def test_matrices_above_the_native_size_take_the_fallback():
    """Past 32 x 32 the Jacobi kernel is several times slower than LAPACK (lower_eigh.cpp):
    those run on the CPU, with the CPU's exact results."""
    a = symmetric(33, 33)
    torchtpu.reset_fallback_stats()
    w, v = torch.linalg.eigh(tpu(a))
    assert torchtpu.fallback_stats()
    want = torch.linalg.eigh(a)
    torch.testing.assert_close(w.cpu(), want[0], rtol=0, atol=0)
    torch.testing.assert_close(v.cpu(), want[1], rtol=0, atol=0)
