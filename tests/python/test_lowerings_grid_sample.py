"""The lowerings of torchtpu/csrc/lower_grid_sample.cpp: F.grid_sample on 4-D inputs
(grid_sampler_2d and its backward: bilinear, nearest and bicubic) and on 5-D inputs
(grid_sampler_3d and its backward: bilinear, i.e. trilinear, and nearest), zeros / border /
reflection padding, align_corners True and False, against PyTorch on the CPU: outputs and both
gradients (input and grid), with no op on the CPU fallback.

The grid covers [-1.3, 1.3] (bicubic: [-1.6, 1.6]), so points fall outside the input and
reflect or clip; special grids put points exactly on the edges and corners and on non-finite
values. The corners' (taps') weighted sums run in another order than the CPU kernel, and the
backward adds the contributions to an input pixel in another order: float32 within 1e-5,
float64 within 1e-12. Nearest moves values (exact forward); its grid gradient is 0, as on the
CPU. Half types run on the CPU fallback.
"""
import pytest
import torch
import torch.nn.functional as F

from conftest import assert_trains_like_cpu, compare_with_cpu, no_fallback, same_error, sgd_losses

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


def test_half_types_take_the_cpu_path():
    x, g = torch.randn(1, 2, 4, 4, generator=GEN), grid(1, 3, 3)
    for dtype, mode in [(torch.bfloat16, "bilinear"), (torch.float16, "bicubic")]:
        want = F.grid_sample(x.to(dtype), g.to(dtype), mode=mode, align_corners=False)
        got = F.grid_sample(x.to(dtype).to("tpu"), g.to(dtype).to("tpu"), mode=mode, align_corners=False)
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


PADDINGS = ["zeros", "border", "reflection"]


def sampler(mode, padding, align):
    return lambda t, gr: F.grid_sample(t, gr, mode=mode, padding_mode=padding, align_corners=align)


def grid3d(n, do, ho, wo, dtype=torch.float32, reach=1.3):
    return ((torch.rand(n, do, ho, wo, 3, generator=GEN, dtype=torch.float64) * 2 - 1) * reach).to(dtype)


EDGES = [-1.0, 1.0, 0.0, -1.3, 1.3, 2.7, -3.1, 0.5, -0.5, 5.0]  # edges, centre, outside, far


def edge_grid(k, shape):
    """A grid of `shape` points (k coordinates each) that runs through every pair of EDGES
    values on x and the last axis (3-D: y equal to x)."""
    e = torch.tensor(EDGES, dtype=torch.float64)
    a, b = torch.meshgrid(e, e, indexing="ij")
    pts = torch.empty((a.numel(), k), dtype=torch.float64)
    pts[:, :k - 1], pts[:, k - 1] = a.flatten()[:, None], b.flatten()
    return pts.reshape(shape + (k,))


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_bicubic_matches_cpu(padding, align):
    x = torch.randn(2, 3, 5, 7, generator=GEN)
    compare_with_cpu(sampler("bicubic", padding, align), x, grid(2, 4, 6, reach=1.6), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_2d_points_on_edges_and_outside(mode, padding, align):
    x = torch.randn(1, 2, 4, 5, generator=GEN)
    compare_with_cpu(sampler(mode, padding, align), x, edge_grid(2, (1, 10, 10)).float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_3d_matches_cpu(mode, padding, align):
    x = torch.randn(2, 3, 4, 5, 6, generator=GEN)
    compare_with_cpu(sampler(mode, padding, align), x, grid3d(2, 3, 4, 5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_3d_points_on_edges_and_outside(mode, padding, align):
    x = torch.randn(1, 2, 3, 4, 5, generator=GEN)
    compare_with_cpu(sampler(mode, padding, align), x, edge_grid(3, (1, 5, 4, 5)).float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [("bicubic", 4), ("bilinear", 5), ("nearest", 5)])
@pytest.mark.parametrize("padding", PADDINGS)
def test_float64_bicubic_and_3d(case, padding):
    mode, rank = case
    if rank == 4:
        x, g = torch.randn(2, 2, 4, 5, generator=GEN, dtype=torch.float64), grid(2, 3, 4, torch.float64, 1.6)
    else:
        x, g = torch.randn(1, 2, 3, 4, 5, generator=GEN, dtype=torch.float64), grid3d(1, 2, 3, 4, torch.float64)
    for align in (False, True):
        compare_with_cpu(sampler(mode, padding, align), x, g, rtol=1e-12, atol=1e-12)


def test_3d_size_one_dims():
    x = torch.randn(1, 2, 1, 3, 1, generator=GEN)
    for padding in PADDINGS:
        for align in (False, True):
            compare_with_cpu(sampler("bilinear", padding, align), x, grid3d(1, 2, 2, 3), rtol=1e-5, atol=1e-5)


NON_FINITE = [float("nan"), float("inf"), -float("inf")]


def non_finite_grid(k):
    """Points with one coordinate NaN or +-inf, the others finite (one point per case)."""
    rows = [[v if j == i else 0.3 for j in range(k)] for v in NON_FINITE for i in range(k)]
    return torch.tensor(rows + [[0.1] * k])  # (P, k)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_3d_non_finite_grid(mode, padding, align):
    """The 3-D CPU kernel sends NaN to the last pixel after a border/reflection clip in the
    forward, and non-finite indices out of bounds; the backward reads nothing there."""
    x = torch.randn(1, 2, 3, 4, 5, generator=GEN)
    compare_with_cpu(sampler(mode, padding, align), x, non_finite_grid(3).reshape(1, 1, 1, -1, 3))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("align", [False, True])
def test_2d_non_finite_grid(mode, align):
    """Zeros padding: the 2-D CPU kernel keeps a NaN index, so NaN weights give NaN (bilinear,
    bicubic) and the input gradient gets nothing."""
    x = torch.randn(1, 2, 4, 5, generator=GEN)
    compare_with_cpu(sampler(mode, "zeros", align), x, non_finite_grid(2).reshape(1, 1, -1, 2))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["border", "reflection"])
def test_2d_non_finite_grid_forward_clips_nan_to_zero(mode, padding):
    """Forward only: the CPU's 2-D backward with these paddings and a NaN grid is undefined."""
    x = torch.randn(1, 2, 4, 5, generator=GEN)
    compare_with_cpu(sampler(mode, padding, False), x, non_finite_grid(2).reshape(1, 1, -1, 2), grad=False)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_bicubic_and_3d_train_like_cpu(mode):
    """A few SGD steps on an input and a grid through grid_sample (bicubic 2-D, trilinear 3-D)."""
    x0 = torch.randn(2, 3, 5, 6, generator=GEN) if mode == "bicubic" else torch.randn(2, 3, 3, 4, 5, generator=GEN)
    g0 = grid(2, 4, 4) if mode == "bicubic" else grid3d(2, 2, 3, 3)
    target = torch.randn(x0.shape[:2] + g0.shape[1:-1], generator=GEN)

    def train(device):
        x, g = x0.clone().to(device).requires_grad_(), g0.clone().to(device).requires_grad_()
        opt = torch.optim.SGD([x, g], lr=0.05)
        losses = sgd_losses(opt, lambda: F.mse_loss(F.grid_sample(x, g, mode=mode, padding_mode="border",
                                                                  align_corners=False), target.to(device)), 3)
        return losses, [x.detach().cpu(), g.detach().cpu()]
    assert_trains_like_cpu(train, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shapes", [
    ((1, 2, 4, 4), (1, 3, 3, 3), "bilinear"),     # grid's last dim is not 2
    ((1, 2, 3, 4, 4), (1, 2, 3, 3, 2), "bilinear"),  # nor 3
    ((1, 2, 3, 4, 4), (1, 2, 3, 3, 3), "bicubic"),  # bicubic needs 4-D input
    ((1, 2, 4, 4), (2, 3, 3, 2), "nearest"),      # batch sizes differ
    ((1, 2, 3, 4, 4), (2, 2, 3, 3, 3), "nearest"),  # (3-D)
    ((1, 2, 0, 4), (1, 3, 3, 2), "bicubic"),      # an empty spatial dimension
    ((1, 2, 4, 4), (1, 1, 3, 3, 2), "bilinear"),  # grid of another rank
])
def test_errors_match_cpu(shapes):
    xs, gs, mode = shapes
    same_error(lambda t, gr: F.grid_sample(t, gr, mode=mode, align_corners=False), torch.randn(xs), torch.zeros(gs))
