"""torch.fft natively (torchtpu/csrc/lower_fft.cpp): aten::_fft_r2c, _fft_c2r and _fft_c2c
as DFT matmuls at HIGHEST precision, checked against the CPU's pocketfft for every
torch.fft entry point, every norm, odd and even lengths, lengths split in four steps and
prime lengths by Bluestein's convolution, several dims, and torch.stft / istft, in strict
and compiled mode, with no CPU fallback.

Tolerances: a DFT of length n sums n products in f32, so its error grows like sqrt(n) eps
times the signal's norm (pocketfft's like log(n) eps): atol 1e-4 on unit-variance signals
up to n = 256 (outputs of size up to sqrt(n) * 16), 1e-10 in f64.
"""
import pytest
import torch

import torchtpu
from conftest import no_fallback, tpu

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.complex64: dict(rtol=1e-4, atol=1e-4),
       torch.float64: dict(rtol=1e-10, atol=1e-10), torch.complex128: dict(rtol=1e-10, atol=1e-10)}


def check(fn, x):
    want = fn(x)
    got = no_fallback(lambda: fn(tpu(x)))
    assert got.device.type == "tpu" and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, **TOL[want.dtype])


def signal(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        real = torch.float32 if dtype == torch.complex64 else torch.float64
        return torch.complex(torch.randn(shape, generator=g, dtype=real),
                             torch.randn(shape, generator=g, dtype=real))
    return torch.randn(shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("norm", [None, "forward", "ortho"])
@pytest.mark.parametrize("n", [1, 7, 16, 33, 300])
def test_one_dim(n, norm):
    x, z = signal((3, n)), signal((3, n), torch.complex64, 1)
    check(lambda t: torch.fft.fft(t, norm=norm), z)
    check(lambda t: torch.fft.ifft(t, norm=norm), z)
    check(lambda t: torch.fft.fft(t, norm=norm), x)  # a real signal
    check(lambda t: torch.fft.rfft(t, norm=norm), x)
    check(lambda t: torch.fft.irfft(t, n=n, norm=norm), torch.fft.rfft(x))
    check(lambda t: torch.fft.hfft(t, n=n, norm=norm), z[:, : n // 2 + 1])
    check(lambda t: torch.fft.ihfft(t, norm=norm), x)


def test_lengths_and_dims():
    x = signal((4, 10, 6))
    check(lambda t: torch.fft.fft(t, dim=1), x)
    check(lambda t: torch.fft.fft(t, n=12, dim=0), x)  # zero-padded
    check(lambda t: torch.fft.fft(t, n=5, dim=-1), x)  # cut
    check(lambda t: torch.fft.irfft(torch.fft.rfft(t, dim=1), n=10, dim=1), x)
    check(lambda t: torch.fft.irfft(t), signal((3, 9), torch.complex64))  # default n = 2 (m - 1)


def test_multi_dim():
    x, z = signal((2, 6, 5)), signal((2, 6, 5), torch.complex64, 2)
    check(torch.fft.fft2, z)
    check(torch.fft.ifft2, z)
    check(lambda t: torch.fft.fftn(t, dim=(0, 2)), z)
    check(torch.fft.rfft2, x)
    check(lambda t: torch.fft.irfft2(t, s=(6, 5)), torch.fft.rfft2(x))
    check(lambda t: torch.fft.rfftn(t, norm="ortho"), x)
    check(lambda t: torch.fft.irfftn(t, s=(2, 6, 5)), torch.fft.rfftn(x))


def test_float64():
    check(torch.fft.fft, signal((3, 20), torch.complex128))
    check(torch.fft.rfft, signal((3, 20), torch.float64))
    check(lambda t: torch.fft.irfft(t, n=20), torch.fft.rfft(signal((3, 20), torch.float64)))


def test_fftshift_and_frequencies():
    check(lambda t: torch.fft.fftshift(torch.fft.fft(t)), signal((4, 8), torch.complex64))
    got = no_fallback(lambda: torch.fft.rfftfreq(10, device="tpu"))
    torch.testing.assert_close(got.cpu(), torch.fft.rfftfreq(10))


def test_stft_and_istft():
    x = signal((2, 400))
    window = torch.hann_window(64)

    def spec(t):
        return torch.stft(t, 64, hop_length=16, window=window.to(t.device), return_complex=True)
    check(spec, x)
    check(lambda s: torch.istft(s, 64, hop_length=16, window=window.to(s.device), length=400),
          spec(x))


def test_gradients_match_the_cpu():
    x = signal((3, 12))
    xc, xt = x.clone().requires_grad_(), tpu(x).requires_grad_()
    (torch.fft.rfft(xc).abs() ** 2).sum().backward()
    no_fallback(lambda: (torch.fft.rfft(xt).abs() ** 2).sum().backward())
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)


def test_spectral_conv_compiled(highest):
    """A Fourier-neural-operator style layer (rfft, a complex weight product, irfft)
    compiled with the tpu backend gives the CPU's result (the product at HIGHEST: at the
    default precision it takes one bf16 pass, as a TPU's MXU does)."""
    w = signal((8, 8, 5), torch.complex64, 3) / 8

    def layer(x, w):
        xf = torch.fft.rfft(x)  # (B, C, 9)
        yf = torch.einsum("bci,coi->boi", xf[..., :5], w)
        out = torch.zeros(x.shape[0], w.shape[1], xf.shape[-1], dtype=xf.dtype, device=x.device)
        out[..., :5] = yf
        return torch.fft.irfft(out, n=x.shape[-1])

    x = signal((4, 8, 16))
    want = layer(x, w)
    fn = torch.compile(layer, backend="tpu")
    fn(tpu(x), tpu(w))
    got = no_fallback(lambda: fn(tpu(x), tpu(w)))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [1500, 2048])
def test_long_transforms_split_in_four_steps(n):
    """Lengths above 1024 as n1 x n2 (1500 = 30 x 50, 2048 = 32 x 64): transforms of the
    columns, twiddles, transforms of the rows. Outputs are up to about sqrt(n) * 4 here, so
    atol scales with it."""
    x, z = signal((2, n)), signal((2, n), torch.complex64, 4)
    tol = dict(rtol=1e-4, atol=2e-4 * n ** 0.5)

    def close(fn, t):
        want = fn(t)
        got = no_fallback(lambda: fn(tpu(t)))
        torch.testing.assert_close(got.cpu(), want, **tol)
    close(torch.fft.fft, z)
    close(torch.fft.ifft, z)
    close(torch.fft.rfft, x)
    close(lambda t: torch.fft.irfft(t, n=n), torch.fft.rfft(x))


@pytest.mark.parametrize("n", [1031, 2062])
def test_lengths_without_a_split_by_bluestein(n):
    """A prime length above 1024 (1031), and one whose prime factor is (2062 = 2 x 1031):
    chirps, a circular convolution of length 2048 or 4096 by split transforms, chirps
    again; along the last dim and another, in complex64 and complex128, and backward.
    The convolution sums about 2n rounded products, so atol scales with sqrt(n) as for the
    split lengths."""
    x, z = signal((2, n)), signal((2, n), torch.complex64, 5)
    tol = dict(rtol=1e-4, atol=2e-4 * n ** 0.5)

    def close(fn, t, **tol):
        want = fn(t)
        got = no_fallback(lambda: fn(tpu(t)))
        torch.testing.assert_close(got.cpu(), want, **tol)
    close(torch.fft.fft, z, **tol)
    close(torch.fft.ifft, z, **tol)
    close(torch.fft.rfft, x, **tol)
    close(lambda t: torch.fft.irfft(t, n=n), torch.fft.rfft(x), **tol)
    close(lambda t: torch.fft.fft(t, dim=0), z.t().contiguous(), **tol)
    close(torch.fft.fft, z.to(torch.complex128), rtol=1e-10, atol=1e-10 * n ** 0.5)
    xt = tpu(x).requires_grad_()
    no_fallback(lambda: torch.fft.rfft(xt).abs().sum().backward())
    xc = x.clone().requires_grad_()
    torch.fft.rfft(xc).abs().sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, **tol)


def test_lengths_beyond_bluestein_take_the_fallback_with_the_cpus_result():
    """A prime above 2^19 would need a convolution longer than two products of 1024."""
    x = signal((524309,))
    torchtpu.reset_fallback_stats()
    got = torch.fft.rfft(tpu(x)).cpu()
    assert torchtpu.fallback_stats()
    torch.testing.assert_close(got, torch.fft.rfft(x), rtol=1e-4, atol=1e-2)
