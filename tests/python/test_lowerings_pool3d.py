"""The 3-D pooling lowerings of torchtpu/csrc/lower_pool.cpp run natively, forward and backward:
max_pool3d_with_indices (PyTorch's flat d * H * W + h * W + w indices, ceil_mode, padding,
dilation), avg_pool3d (ceil_mode, count_include_pad, divisor_override), adaptive_avg_pool3d and
adaptive_max_pool3d; batched and unbatched, odd sizes, float32 and bfloat16, the nn modules, and a
tiny 3-D conv net that trains like on the CPU; and max_unpool2d/3d (the CPU's last write wins where
indices repeat). (The 2-D pooling tests are in test_lowerings_nn.py.)

Tolerances:
- Max pooling and unpooling only move values: forward exact (indices equal); the backward adds the gradients
  of overlapping windows in the CPU's order, float32 within 1e-6.
- Average pooling sums a window in another order than the CPU (reduce_window), and adaptive
  average pooling over sizes that do not divide runs as products at HIGHEST precision (six bf16
  passes, about f32): float32 within 1e-5 for sums of at most a few dozen terms.
- bfloat16: we compute in f32 and round once, the CPU rounds some intermediates: rtol/atol 2e-2
  (a few bf16 ulps).
- The conv net runs its convolutions at HIGHEST precision (see test_lowerings_nn.py) and
  compares after a few SGD steps within 1e-4.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


from conftest import compare_with_cpu as compare, no_fallback, sgd_losses, tpu

GEN = torch.Generator().manual_seed(0)
EXACT = dict(rtol=1e-6, atol=1e-6)
BF16 = dict(rtol=2e-2, atol=2e-2)


def randn(*shape):
    return torch.randn(*shape, generator=GEN)


MAX = {
    "k2": lambda x: F.max_pool3d(x, 2, return_indices=True),
    "k3_s2_p1_ceil": lambda x: F.max_pool3d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
    "anisotropic": lambda x: F.max_pool3d(x, (2, 3, 1), (1, 2, 1), (1, 1, 0), return_indices=True),
    "dilation": lambda x: F.max_pool3d(x, (2, 3, 2), (2, 1, 2), (1, 1, 1), dilation=(2, 2, 3),
                                       return_indices=True),
    "dilation_ceil": lambda x: F.max_pool3d(x, 2, 2, 1, dilation=2, ceil_mode=True, return_indices=True),
}
AVG = {
    "k2": lambda x: F.avg_pool3d(x, 2),
    "k3_s2": lambda x: F.avg_pool3d(x, 3, 2),
    "p1_ceil": lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True),
    "p1_ceil_exclude_pad": lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "anisotropic_exclude_pad": lambda x: F.avg_pool3d(x, (2, 3, 2), (1, 2, 3), (1, 1, 0), count_include_pad=False),
    "divisor_override": lambda x: F.avg_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 1), divisor_override=5),
}
ADAPTIVE = {
    "avg_1": lambda x: F.adaptive_avg_pool3d(x, 1),
    "avg_divisible": lambda x: F.adaptive_avg_pool3d(x, (5, 3, 2)),
    "avg_general": lambda x: F.adaptive_avg_pool3d(x, (2, 4, 3)),
    "avg_upsample": lambda x: F.adaptive_avg_pool3d(x, (7, 8, 5)),
    "avg_none": lambda x: F.adaptive_avg_pool3d(x, (None, 4, None)),
    "max_1": lambda x: F.adaptive_max_pool3d(x, 1, return_indices=True),
    "max_divisible": lambda x: F.adaptive_max_pool3d(x, (5, 3, 2), return_indices=True),
    "max_general": lambda x: F.adaptive_max_pool3d(x, (2, 4, 3), return_indices=True),
    "max_upsample": lambda x: F.adaptive_max_pool3d(x, (7, 8, 5), return_indices=True),
}


@pytest.mark.parametrize("name", sorted(MAX))
def test_max_pool3d(name):
    compare(MAX[name], randn(2, 3, 5, 7, 6), **EXACT)


@pytest.mark.parametrize("name", sorted(AVG))
def test_avg_pool3d(name):
    compare(AVG[name], randn(2, 3, 5, 7, 6))


@pytest.mark.parametrize("name", sorted(ADAPTIVE))
def test_adaptive_pool3d(name):
    compare(ADAPTIVE[name], randn(2, 3, 5, 9, 4))


@pytest.mark.parametrize("name", ["max:k3_s2_p1_ceil", "avg:p1_ceil_exclude_pad", "adaptive:avg_general",
                                  "adaptive:max_general"])
def test_pool3d_unbatched_noncontiguous_and_bf16(name):
    table, key = name.split(":")
    fn = {"max": MAX, "avg": AVG, "adaptive": ADAPTIVE}[table][key]
    x = randn(5, 7, 6, 3).permute(3, 0, 1, 2)  # (C, D, H, W), not contiguous
    compare(fn, x, **(EXACT if table == "max" else {}))
    if table == "avg":  # the CPU has no bfloat16 avg_pool3d: compare with float32 rounded once
        compare_bf16_with_f32_cpu(fn, x.bfloat16())
        compare_bf16_with_f32_cpu(fn, randn(2, 3, 5, 7, 6).bfloat16())
    else:
        compare(fn, x.bfloat16(), **BF16)
        compare(fn, randn(2, 3, 5, 7, 6).bfloat16(), **BF16)


def compare_bf16_with_f32_cpu(fn, x):
    """fn of bfloat16 x on the tpu (no fallback), forward and backward, against fn on the CPU in
    float32 rounded to bfloat16."""
    want_x = x.float().requires_grad_()
    want = fn(want_x)
    cot = torch.randn(want.shape, generator=GEN).bfloat16()
    want.backward(cot.float())
    got_x = tpu(x).requires_grad_()
    got = no_fallback(lambda: fn(got_x))
    no_fallback(lambda: got.backward(tpu(cot)))
    assert got.dtype == torch.bfloat16 and got_x.grad.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu(), want.bfloat16(), **BF16)
    torch.testing.assert_close(got_x.grad.cpu(), want_x.grad.bfloat16(), **BF16)


def test_max_pool3d_ties_nan_and_minus_inf_match_cpu():
    x = torch.randint(0, 3, (2, 2, 5, 6, 7), generator=GEN).float()  # many ties: the first max wins
    x[0, 0, 0, 0, 0] = float("nan")
    x[0, 0, 1, 2, 2] = float("nan")                                 # two NaNs in a window: the last wins
    x[1, 1, :3, :4, :4] = float("-inf")                             # all -inf windows
    for fn in (lambda t: F.max_pool3d(t, 3, 1, 1, return_indices=True),
               lambda t: F.max_pool3d(t, 2, 2, 1, dilation=2, ceil_mode=True, return_indices=True),
               lambda t: F.adaptive_max_pool3d(t, (2, 4, 3), return_indices=True)):
        want = fn(x)
        got = no_fallback(lambda: fn(tpu(x)))
        assert torch.equal(got[1].cpu(), want[1])
        torch.testing.assert_close(got[0].cpu(), want[0], equal_nan=True, rtol=0, atol=0)
    x = torch.randint(0, 3, (2, 2, 5, 6, 7), generator=GEN).float()
    compare(lambda t: F.max_pool3d(t, 3, 2, 1, return_indices=True), x, **EXACT)  # overlapping windows


def test_modules():
    x = randn(2, 3, 6, 7, 5)
    compare(nn.MaxPool3d(3, 2, 1, return_indices=True), x, **EXACT)
    compare(nn.MaxPool3d((2, 2, 3), ceil_mode=True), x, **EXACT)
    compare(nn.AvgPool3d(3, 2, 1, count_include_pad=False), x)
    compare(nn.AdaptiveAvgPool3d((3, 4, 2)), x)
    compare(nn.AdaptiveMaxPool3d((3, 4, 2), return_indices=True), x, **EXACT)


def test_bad_arguments_raise_pytorchs_error_and_the_device_keeps_working():
    x = randn(1, 2, 4, 4, 4)
    for fn in (lambda t: F.max_pool3d(t, 2, padding=2),              # pad above half the kernel
               lambda t: F.avg_pool3d(t, 5),                         # output size would be 0
               lambda t: F.max_pool3d(t, 2, stride=0)):
        with pytest.raises(RuntimeError) as cpu_error:
            fn(x)
        with pytest.raises(type(cpu_error.value)) as tpu_error:
            fn(tpu(x))
        assert str(tpu_error.value) == str(cpu_error.value)
    compare(lambda t: F.max_pool3d(t, 2, return_indices=True), x, **EXACT)



def _video_net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv3d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool3d(2, ceil_mode=True),
        nn.Conv3d(4, 6, 3, padding=1), nn.ReLU(), nn.AvgPool3d((1, 2, 2)),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(6, 5))


def test_tiny_video_net_trains_like_cpu(highest):
    clips, labels = randn(4, 3, 5, 8, 7), torch.randint(0, 5, (4,), generator=GEN)
    losses = {}
    nets = {}
    for device in ("cpu", "tpu"):
        net = _video_net().to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        x, y = clips.to(device), labels.to(device)
        def steps():
            return sgd_losses(opt, lambda: F.cross_entropy(net(x), y), 3)
        losses[device] = steps() if device == "cpu" else no_fallback(steps)
        nets[device] = net
    assert losses["tpu"] == pytest.approx(losses["cpu"], rel=1e-4, abs=1e-4)
    for p_cpu, p_tpu in zip(nets["cpu"].parameters(), nets["tpu"].parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-4)


# ---- max unpooling (2-D and 3-D) -----------------------------------------------------------------

POOL_UNPOOL = {2: (F.max_pool2d, F.max_unpool2d, (2, 3, 8, 10)), 3: (F.max_pool3d, F.max_unpool3d, (2, 3, 6, 8, 4))}


@pytest.mark.parametrize("dims", [2, 3])
def test_max_unpool_inverts_max_pool(dims):
    pool, unpool, shape = POOL_UNPOOL[dims]
    x = randn(*shape)
    vals, idx = pool(x, 3, 2, 1, return_indices=True)  # overlapping windows: repeated indices
    compare(lambda v, i: unpool(v, i, 3, 2, 1, output_size=x.shape[-dims:]), vals, idx, **EXACT)
    x = x[..., :-1]                                     # odd width: a larger output_size than the default
    vals, idx = pool(x, 2, return_indices=True)
    compare(lambda v, i: unpool(v, i, 2, output_size=x.shape[-dims:]), vals, idx, **EXACT)
    x = x[..., :-1]
    vals, idx = pool(x[0], 2, return_indices=True)     # unbatched, default output size
    compare(lambda v, i: unpool(v, i, 2), vals, idx, **EXACT)
    compare(lambda v, i: unpool(v, i, 2), vals.bfloat16(), idx, **EXACT)
    module = nn.MaxUnpool2d(2) if dims == 2 else nn.MaxUnpool3d(2)
    compare(module, vals, idx, **EXACT)


def test_max_unpool_repeated_indices_last_write_wins_like_cpu():
    vals = torch.arange(1.0, 9.0).view(1, 2, 2, 2)
    idx = torch.tensor([[[[0, 0], [5, 3]], [[7, 7], [7, 1]]]])
    compare(lambda v, i: F.max_unpool2d(v, i, 2), vals, idx, **EXACT)


def test_max_unpool_invalid_index_raises_and_the_device_keeps_working():
    vals, idx = torch.ones(1, 1, 2, 2), torch.tensor([[[[0, 1], [2, 16]]]])
    with pytest.raises(RuntimeError, match="Found an invalid max index"):
        F.max_unpool2d(vals, idx, 2)
    with pytest.raises((IndexError, RuntimeError), match="out of range"):  # found on the chip
        F.max_unpool2d(tpu(vals), tpu(idx), 2).cpu()
    compare(lambda v, i: F.max_unpool2d(v, i, 2), vals, idx.clamp(max=15), **EXACT)
