"""The lowerings of torchtpu/csrc/lower_fold.cpp: im2col and col2im (F.unfold / F.fold, nn.Unfold /
nn.Fold) run natively, forward and backward (each is the other's backward), batched, unbatched
and with an empty batch, with kernel, dilation, padding and stride per dim, overlapping and
non-overlapping blocks, in float32 and bfloat16; a patch embedding built on F.unfold trains like
on the CPU.

Tolerances: unfold only moves values, so it is exact. fold adds the values of the blocks that
overlap a pixel in the CPU's order (tap order), so float32 agrees within 1e-6 (rounding-level
slack). bfloat16 fold sums in f32 and rounds once where the CPU rounds every add: rtol/atol 2e-2
(a few bf16 ulps). The patch-embedding model runs its matmuls at HIGHEST precision (about f32)
and is compared after a few SGD steps within 1e-4.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


from conftest import compare_with_cpu as compare, no_fallback, sgd_losses, tpu

GEN = torch.Generator().manual_seed(0)
EXACT = dict(rtol=1e-6, atol=1e-6)
BF16 = dict(rtol=2e-2, atol=2e-2)

# (image (H, W), kernel, dilation, padding, stride)
CASES = {
    "k3": ((7, 8), 3, 1, 0, 1),
    "k3_p1": ((7, 8), 3, 1, 1, 1),
    "anisotropic": ((9, 8), (2, 3), (2, 1), (1, 2), (2, 3)),
    "patches": ((16, 12), 4, 1, 0, 4),           # non-overlapping: a patch embedding
    "patches_ragged": ((17, 14), (4, 5), 1, 0, (4, 5)),  # the last rows/cols belong to no block
    "k1": ((5, 6), 1, 1, 0, 1),
    "dilated_strided": ((11, 10), 3, 2, 2, 2),
}


def randn(*shape):
    return torch.randn(*shape, generator=GEN)


def _kwargs(case):
    _, k, d, p, s = CASES[case]
    return dict(kernel_size=k, dilation=d, padding=p, stride=s)


def _fold_input_shape(case, batch):
    (h, w), *_ = CASES[case]
    cols = F.unfold(torch.zeros(1, 3, h, w), **_kwargs(case))
    return (batch, *cols.shape[1:]) if batch else tuple(cols.shape[1:])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("batch", [2, None])
def test_unfold(case, batch):
    (h, w), *_ = CASES[case]
    x = randn(batch, 3, h, w) if batch else randn(3, h, w)
    compare(lambda t: F.unfold(t, **_kwargs(case)), x, **EXACT)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("batch", [2, None])
def test_fold(case, batch):
    size = CASES[case][0]
    compare(lambda t: F.fold(t, size, **_kwargs(case)), randn(*_fold_input_shape(case, batch)), **EXACT)


@pytest.mark.parametrize("case", ["k3_p1", "anisotropic", "patches"])
def test_bf16_and_noncontiguous(case):
    (h, w), *_ = CASES[case]
    x = randn(h, w, 3, 2).permute(3, 2, 0, 1)  # (2, 3, H, W), not contiguous
    compare(lambda t: F.unfold(t, **_kwargs(case)), x, **EXACT)
    compare(lambda t: F.unfold(t, **_kwargs(case)), x.bfloat16(), **BF16)
    cols = randn(*_fold_input_shape(case, 2)).bfloat16()
    compare(lambda t: F.fold(t, (h, w), **_kwargs(case)), cols, **BF16)


def test_fold_of_unfold_counts_overlaps_and_empty_batch():
    x = randn(2, 3, 7, 8)
    compare(lambda t: F.fold(F.unfold(t, 3, padding=1), (7, 8), 3, padding=1), x, **EXACT)
    compare(lambda t: F.unfold(t, 2), randn(0, 3, 5, 5))
    compare(lambda t: F.fold(t, (5, 5), 2), randn(0, 12, 16))


def test_modules():
    x = randn(2, 4, 9, 10)
    compare(nn.Unfold((3, 2), dilation=(1, 2), padding=1, stride=(2, 1)), x, **EXACT)
    compare(nn.Fold((9, 10), (3, 2), dilation=(1, 2), padding=1, stride=(2, 1)),
            randn(2, 24, 50), **EXACT)


def test_bad_arguments_raise_pytorchs_error_and_the_device_keeps_working():
    for fn, x in ((lambda t: F.fold(t, (6, 6), 3), randn(2, 27, 15)),    # wrong number of blocks
                  (lambda t: F.fold(t, (6, 6), 3), randn(2, 26, 16)),    # not a multiple of K
                  (lambda t: F.fold(t, (6, 6), 3, stride=0), randn(2, 27, 16)),
                  (lambda t: F.unfold(t, 5), randn(2, 3, 4, 4)),         # no block fits
                  (lambda t: F.unfold(t, 2), randn(2, 0, 4, 4))):        # no channels
        with pytest.raises(RuntimeError) as cpu_error:
            fn(x)
        with pytest.raises(type(cpu_error.value)) as tpu_error:
            fn(tpu(x))
        assert str(tpu_error.value) == str(cpu_error.value)
    compare(lambda t: F.unfold(t, 2), randn(1, 2, 4, 4), **EXACT)



class PatchEmbed(nn.Module):
    """ViT-style: 4x4 patches by F.unfold, a linear embedding, mean over patches, a classifier."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Linear(3 * 16, 8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        patches = F.unfold(x, 4, stride=4).transpose(1, 2)  # (B, L, C * 16)
        return self.head(F.gelu(self.embed(patches)).mean(1))


def test_patch_embedding_trains_like_cpu(highest):
    images, labels = randn(4, 3, 12, 16), torch.randint(0, 5, (4,), generator=GEN)
    result = {}
    for device in ("cpu", "tpu"):
        net = PatchEmbed().to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        x, y = images.detach().to(device).requires_grad_(), labels.to(device)
        def steps():
            return sgd_losses(opt, lambda: F.cross_entropy(net(x), y), 3)
        result[device] = (steps() if device == "cpu" else no_fallback(steps), net, x.grad)
    assert result["tpu"][0] == pytest.approx(result["cpu"][0], rel=1e-4, abs=1e-4)
    for p_cpu, p_tpu in zip(result["cpu"][1].parameters(), result["tpu"][1].parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(result["tpu"][2].cpu(), result["cpu"][2], rtol=1e-4, atol=1e-4)
