"""The lowerings of torchtpu/csrc/lower_grid_sample.cpp: F.grid_sample on 4-D inputs
(grid_sampler_2d and its backward), bilinear and nearest, zeros / border / reflection
padding, align_corners True and False, against PyTorch on the CPU.

The grid covers [-1.3, 1.3], so points fall outside the input and reflect or clip. Bilinear
sums four weighted corners in another order than the CPU kernel, and the backward adds the
contributions to an input pixel in another order: float32 within 1e-5, float64 within 1e-12.
Nearest moves values (exact forward); its grid gradient is 0, as on the CPU. Bicubic and
half types run on the CPU fallback.
"""
import pytest
import torch
import torch.nn.functional as F

from conftest import compare_with_cpu, no_fallback

GEN = torch.Generator().manual_seed(0)


def grid(n, ho, wo, dtype=torch.float32, reach=1.3):
    return ((torch.rand(n, ho, wo, 2, generator=GEN, dtype=torch.float64) * 2 - 1) * reach).to(dtype)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_matches_cpu(mode, padding, align):
    x = torch.randn(2, 3, 5, 7, generator=GEN)
    g = grid(2, 4, 6)

    def fn(t, gr):
        return F.grid_sample(t, gr, mode=mode, padding_mode=padding, align_corners=align)
    compare_with_cpu(fn, x, g, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padding", ["zeros", "reflection"])
def test_float64_and_size_one_dims(padding):
    x = torch.randn(1, 2, 1, 4, generator=GEN, dtype=torch.float64)
    compare_with_cpu(lambda t, gr: F.grid_sample(t, gr, padding_mode=padding, align_corners=True), x,
                     grid(1, 3, 3, torch.float64), rtol=1e-12, atol=1e-12)
    compare_with_cpu(lambda t, gr: F.grid_sample(t, gr, padding_mode=padding, align_corners=False), x,
                     grid(1, 3, 3, torch.float64), rtol=1e-12, atol=1e-12)


def test_grid_points_on_pixel_centers_copy_the_input():
    """align_corners=True and a grid on the pixel centers give the input back exactly."""
    x = torch.randn(1, 2, 4, 5, generator=GEN)
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, 4), torch.linspace(-1, 1, 5), indexing="ij")
    g = torch.stack([xs, ys], -1)[None]
    got = no_fallback(lambda: F.grid_sample(x.to("tpu"), g.to("tpu"), align_corners=True))
    torch.testing.assert_close(got.cpu(), x, rtol=0, atol=1e-6)


def test_infinities_in_the_input_outside_the_grid_do_not_leak():
    x = torch.randn(1, 1, 3, 3, generator=GEN)
    x[0, 0, 0, 0] = float("inf")
    g = torch.tensor([[[[0.9, 0.9], [0.5, -0.2]]]])  # neither point reads pixel (0, 0)
    compare_with_cpu(lambda t, gr: F.grid_sample(t, gr, align_corners=True), x, g, grad=False)


def test_spatial_transformer_trains_like_cpu(highest):
    """An affine spatial transformer (affine_grid + grid_sample) learns its transform."""
    images = torch.randn(4, 3, 8, 8, generator=GEN)
    target = torch.roll(images, 1, dims=3)
    result = {}
    for device in ("cpu", "tpu"):
        theta = torch.tensor([[1.0, 0.1, 0.05], [-0.1, 1.0, 0.0]]).repeat(4, 1, 1).to(device).requires_grad_()
        opt = torch.optim.SGD([theta], lr=0.1)
        x, y = images.to(device), target.to(device)

        def steps():
            losses = []
            for _ in range(4):
                opt.zero_grad()
                out = F.grid_sample(x, F.affine_grid(theta, x.shape, align_corners=False), align_corners=False)
                loss = F.mse_loss(out, y)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            return [v.item() for v in losses]
        result[device] = (steps() if device == "cpu" else no_fallback(steps), theta)
    assert result["tpu"][0] == pytest.approx(result["cpu"][0], rel=1e-5, abs=1e-6)
    torch.testing.assert_close(result["tpu"][1].detach().cpu(), result["cpu"][1].detach(), rtol=1e-5, atol=1e-6)


def test_bicubic_and_half_types_take_the_cpu_path():
    x, g = torch.randn(1, 2, 4, 4, generator=GEN), grid(1, 3, 3)
    for dtype, mode in [(torch.float32, "bicubic"), (torch.bfloat16, "bilinear")]:
        want = F.grid_sample(x.to(dtype), g.to(dtype), mode=mode, align_corners=False)
        got = F.grid_sample(x.to(dtype).to("tpu"), g.to(dtype).to("tpu"), mode=mode, align_corners=False)
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
