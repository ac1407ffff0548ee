"""torch.compile(backend="tpu") under the training recipes a PyTorch user brings along
unchanged from CUDA: dropout, autocast with a GradScaler, gradient clipping with an LR
schedule and a compiled optimizer step, activation checkpointing, modules that update
buffers in forward (BatchNorm's running statistics, a step counter), channels_last
convolutions and nn.TransformerEncoderLayer. Each trains or runs compiled on tpu and is
checked against the same recipe in eager mode on the CPU, with no op through the CPU
fallback.

Tolerances: matmuls run at HIGHEST precision (about f32) where a run is compared over
several steps, so only f32 rounding differs (the decompositions and the kernels sum in
another order); the autocast test is bf16 throughout (8 mantissa bits, about 4e-3
relative per rounding), hence its 3e-2.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import assert_trains_like_cpu, no_fallback, tpu


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled(module):
    """A copy of |module| on the tpu, compiled."""
    return torch.compile(copy.deepcopy(module).to("tpu"), backend="tpu")


def assert_close(got, want, tol):
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=tol, atol=tol)


def test_dropout_masks_are_random_reproducible_and_shared_with_backward():
    drop = torch.compile(lambda x: F.dropout(x, 0.5, training=True), backend="tpu")
    x = torch.ones(256, 64, device="tpu", requires_grad=True)
    torch.manual_seed(1)
    a = no_fallback(lambda: drop(x))
    b = drop(x)
    torch.manual_seed(1)
    a_again = drop(x)
    kept = (a != 0).float().mean().item()
    assert 0.45 < kept < 0.55, kept  # 16384 draws: about 13 standard deviations of slack
    assert set(a.unique().cpu().tolist()) == {0.0, 2.0}  # kept values scaled by 1 / (1 - p)
    assert not torch.equal(a.cpu(), b.cpu()), "two calls drew the same mask"
    assert torch.equal(a.cpu(), a_again.cpu()), "manual_seed did not reproduce the mask"
    # the backward multiplies by the forward's mask, not a new one
    y = drop(x)
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), y.detach().cpu())


def test_autocast_with_grad_scaler_tracks_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,)))] * 5  # one batch: the loss falls

    def train(device, module):
        opt = torch.optim.AdamW(module.parameters(), lr=1e-2)
        scaler = torch.amp.GradScaler(device)
        losses = []
        for x, y in data:
            with torch.autocast(device, dtype=torch.bfloat16):
                out = module(x.to(device))
                assert out.dtype == torch.bfloat16
                loss = F.cross_entropy(out.float(), y.to(device))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            losses.append(loss.item())
        return torch.tensor(losses)

    want = train("cpu", copy.deepcopy(model))
    got = no_fallback(lambda: train("tpu", compiled(model)))
    torch.testing.assert_close(got, want, rtol=3e-2, atol=3e-2)
    assert got[-1] < got[0]


def test_clipping_a_schedule_and_a_compiled_optimizer_step_match_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    data = [torch.randn(6, 8) for _ in range(4)]

    def train(device):
        """The CPU reference steps eagerly; the tpu compiles the model and the step."""
        on_tpu = device == "tpu"
        module = compiled(model) if on_tpu else copy.deepcopy(model)
        opt = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        step = torch.compile(opt.step, backend="tpu") if on_tpu else opt.step
        losses = []
        for x in data:
            loss = module(x.to(device)).pow(2).mean()
            loss.backward()
            nn.utils.clip_grad_norm_(module.parameters(), max_norm=0.1)
            step()
            opt.zero_grad()
            sched.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in module.parameters()]

    assert_trains_like_cpu(train, rtol=1e-5, atol=1e-5)


def test_activation_checkpointing_inside_a_compiled_function():
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
    block_tpu = copy.deepcopy(block).to("tpu")
    loss = torch.compile(lambda x: checkpoint(block_tpu, x, use_reentrant=False).sum(),
                         backend="tpu")
    x = torch.randn(4, 8)
    with torch.tpu.precision("highest"):
        no_fallback(lambda: loss(tpu(x)).backward())
    checkpoint(block, x, use_reentrant=False).sum().backward()
    for g, w in zip(block_tpu.parameters(), block.parameters()):
        assert_close(g.grad, w.grad, 1e-5)


class Counting(nn.Module):
    """Scales its output by how many times forward ran: a buffer updated in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.norm = nn.BatchNorm1d(6)

    def forward(self, x):
        self.calls += 1
        return self.norm(x) * self.calls


def test_buffers_updated_in_forward_are_written_back():
    torch.manual_seed(0)
    module = Counting()
    module_tpu = compiled(module)
    for _ in range(3):
        x = torch.randn(5, 6)
        got = no_fallback(lambda: module_tpu(tpu(x)))
        want = module(x)
    assert_close(got, want, 1e-5)
    inner = module_tpu._orig_mod
    assert inner.calls.item() == 3
    assert_close(inner.norm.running_mean, module.norm.running_mean, 1e-5)
    assert_close(inner.norm.running_var, module.norm.running_var, 1e-5)
    assert inner.norm.num_batches_tracked.item() == 3


def test_channels_last_convolution_forward_and_backward():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3, padding=1).to(memory_format=torch.channels_last)
    conv_tpu = compiled(conv)
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    with torch.tpu.precision("highest"):
        got = no_fallback(lambda: conv_tpu(tpu(x)))
        got.square().sum().backward()
    want = conv(x)
    want.square().sum().backward()
    assert_close(got, want, 1e-4)
    assert_close(conv_tpu._orig_mod.weight.grad, conv.weight.grad, 1e-4)


def test_transformer_encoder_layer_forward_and_backward():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    layer_tpu = compiled(layer)
    x = torch.randn(2, 10, 32)
    with torch.tpu.precision("highest"):
        got = no_fallback(lambda: layer_tpu(tpu(x)))
        got.sum().backward()
    want = layer(x)
    want.sum().backward()
    assert_close(got, want, 1e-4)
    for g, w in zip(layer_tpu._orig_mod.parameters(), layer.parameters()):
        assert_close(g.grad, w.grad, 1e-4)
