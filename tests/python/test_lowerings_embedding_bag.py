"""Native nn.EmbeddingBag / F.embedding_bag: _embedding_bag and _embedding_bag_forward_only
(mode sum, mean, max; offsets or 2-D input; per_sample_weights; include_last_offset;
padding_idx; empty bags) and their backward (_embedding_bag_backward for the weight,
_embedding_bag_per_sample_weights_backward), compared with PyTorch on CPU and checked not to
use the CPU fallback; the extra outputs (offset2bag, bag_size, max_indices) are compared with
the CPU's where their shapes agree (mean and max); and a small recsys model trains.

Tolerances: max is exact. Sums and means add the rows in index order in f32 as the CPU does;
per-sample weights multiply then add where the CPU may fuse (FMA): rtol/atol 1e-5. bf16
sums accumulate in f32 and round once: rtol 2e-2, atol 5e-2. The recsys model compares losses
and weights after a few SGD steps at HIGHEST matmul precision: 1e-4.
"""
import pytest
import torch
import torch.nn.functional as F

from conftest import assert_trains_like_cpu, compare_with_cpu, no_fallback, sgd_losses, tpu

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=5e-2)}
INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 4, 4])  # repeated rows; row 0, 6-8 unused
OFFSETS = torch.tensor([0, 4, 4, 7])                    # bag 1 is empty


def weight(dtype=torch.float32, seed=0):
    return torch.randn(10, 3, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_offsets_match_cpu(mode, dtype):
    compare_with_cpu(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), weight(dtype), INDICES,
                     OFFSETS, **TOL[dtype])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_include_last_offset_and_padding_idx(mode):
    offsets = torch.tensor([0, 4, 4, 7, 10])
    for padding_idx in (None, 4, 2):
        compare_with_cpu(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, include_last_offset=True,
                                                         padding_idx=padding_idx),
                         weight(), INDICES, offsets)
    # a bag of padding only is empty
    compare_with_cpu(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=4), weight(),
                     torch.tensor([4, 4, 1, 4]), torch.tensor([0, 2]))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_2d_input_and_module(mode):
    compare_with_cpu(lambda w, i: F.embedding_bag(i, w, mode=mode), weight(), INDICES.view(5, 2))
    bag = torch.nn.EmbeddingBag(10, 3, mode=mode)
    compare_with_cpu(lambda w, i: torch.func.functional_call(bag, {"weight": w}, (i,)), weight(seed=1),
                     INDICES.view(2, 5))


def test_per_sample_weights():
    psw = torch.randn(10, generator=torch.Generator().manual_seed(2))
    for padding_idx in (None, 4):
        compare_with_cpu(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p,
                                                            padding_idx=padding_idx),
                         weight(), INDICES, OFFSETS, psw)
    compare_with_cpu(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
                     weight(torch.bfloat16), INDICES, OFFSETS, psw.bfloat16(), **TOL[torch.bfloat16])


def test_int32_indices_and_no_grad_forward_only():
    compare_with_cpu(lambda w, i, o: F.embedding_bag(i, w, o, mode="mean"), weight(), INDICES.int(),
                     OFFSETS.int())
    w = weight()
    with torch.no_grad():
        want = F.embedding_bag(INDICES, w, OFFSETS, mode="max")
        got = no_fallback(lambda: F.embedding_bag(tpu(INDICES), tpu(w), tpu(OFFSETS), mode="max"))
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("mode", [1, 2])
def test_extra_outputs_match_cpu(mode):
    """offset2bag, bag_size and max_indices: what the CPU kernel returns (mean and max)."""
    w = weight()
    for padding_idx in (-1, 4):
        want = torch.ops.aten._embedding_bag(w, INDICES, OFFSETS, False, mode, False, None, False,
                                             padding_idx)
        got = no_fallback(lambda: torch.ops.aten._embedding_bag(
            tpu(w), tpu(INDICES), tpu(OFFSETS), False, mode, False, None, False, padding_idx))
        # in mean mode the CPU's max_indices is a copy of bag_size; ours is empty (the meta shape)
        for g, c in list(zip(got, want))[:4 if mode == 2 else 3]:
            torch.testing.assert_close(g.cpu(), c, rtol=0, atol=0)


def test_empty_input():
    compare_with_cpu(lambda w, i, o: F.embedding_bag(i, w, o, mode="mean"), weight(),
                     torch.zeros(0, dtype=torch.long), torch.tensor([0, 0]))


def test_out_of_range_index_raises_and_device_survives():
    w = tpu(weight())
    torch.tpu.synchronize()
    with pytest.raises((IndexError, RuntimeError), match="out of range"):
        F.embedding_bag(tpu(torch.tensor([1, 10])), w, tpu(torch.tensor([0])))
        torch.tpu.synchronize()
    assert (w + 1).sum().item() == pytest.approx((w.cpu() + 1).sum().item(), rel=1e-5)


def test_bad_mode_argument_is_the_cpu_error():
    w, psw = weight(), torch.ones(10)
    with pytest.raises(Exception) as cpu_err:
        F.embedding_bag(INDICES, w, OFFSETS, mode="mean", per_sample_weights=psw)
    with pytest.raises(Exception) as tpu_err:
        F.embedding_bag(tpu(INDICES), tpu(w), tpu(OFFSETS), mode="mean", per_sample_weights=tpu(psw))
    assert type(tpu_err.value) is type(cpu_err.value) and str(tpu_err.value) == str(cpu_err.value)


class Recsys(torch.nn.Module):
    """Two sparse features (EmbeddingBag sum with weights, and mean) and an MLP."""

    def __init__(self):
        super().__init__()
        self.user = torch.nn.EmbeddingBag(50, 8, mode="sum")
        self.item = torch.nn.EmbeddingBag(40, 8, mode="mean", padding_idx=0)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def forward(self, u, uo, uw, i):
        return self.mlp(torch.cat([self.user(u, uo, per_sample_weights=uw), self.item(i)], 1)).squeeze(1)


def train(device, steps=4):
    torch.manual_seed(6)
    model = Recsys().to(device)
    u = torch.randint(0, 50, (30,)).to(device)
    uo = torch.tensor([0, 3, 3, 10, 12, 20, 25, 29]).to(device)
    uw = torch.rand(30).to(device)
    i = torch.randint(0, 40, (8, 4)).to(device)
    y = torch.rand(8).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = sgd_losses(opt, lambda: F.binary_cross_entropy_with_logits(model(u, uo, uw, i), y), steps)
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_recsys_trains_natively_like_cpu():
    assert_trains_like_cpu(train)
