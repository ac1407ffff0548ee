# torch.autocast("tpu") and torch.amp.GradScaler("tpu").
#
# - Output dtypes of each autocast category (lower precision, fp32, fp32 unless a dtype is
#   given, appended dtype, promote, untouched) follow CUDA's rules, which torchtpu registers
#   (torchtpu/csrc/autocast.cpp); where CPU autocast has the same rule we also check that
#   the tpu and CPU results agree.
# - A small model trains under bf16 autocast on tpu with the same losses as under CPU
#   autocast, to bf16 tolerance (both multiply bf16 and accumulate in f32; summation order
#   differs, so single results can differ by a bf16 ulp and drift a little over steps).
# - GradScaler("tpu") with float16 autocast: trains, skips steps whose gradients overflow,
#   and updates its scale exactly as the CPU GradScaler does; its kernels run natively.
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from conftest import no_fallback

BF16, F32, F16 = torch.bfloat16, torch.float32, torch.float16


def _x(*shape, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype)


# (name, fn over CPU tensors made by _x, inputs, CUDA autocast's result dtype)
_CASES = [
    # lower_precision_fp: run in the autocast dtype
    ("mm", torch.mm, lambda: (_x(4, 8), _x(8, 3)), BF16),
    ("matmul", torch.matmul, lambda: (_x(2, 4, 8), _x(8, 3)), BF16),
    ("bmm", torch.bmm, lambda: (_x(2, 4, 8), _x(2, 8, 3)), BF16),
    ("baddbmm", torch.baddbmm, lambda: (_x(2, 4, 3), _x(2, 4, 8), _x(2, 8, 3)), BF16),
    ("addmm", torch.addmm, lambda: (_x(3), _x(4, 8), _x(8, 3)), BF16),
    ("addmv", torch.addmv, lambda: (_x(4), _x(4, 8), _x(8)), BF16),
    ("mv", torch.mv, lambda: (_x(4, 8), _x(8)), BF16),
    ("linear", F.linear, lambda: (_x(4, 8), _x(3, 8), _x(3)), BF16),
    ("conv1d", F.conv1d, lambda: (_x(2, 3, 9), _x(4, 3, 3)), BF16),
    ("conv2d", F.conv2d, lambda: (_x(2, 3, 6, 6), _x(4, 3, 3, 3)), BF16),
    ("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b), lambda: (_x(4, 8), _x(8, 3)), BF16),
    ("sdpa", F.scaled_dot_product_attention, lambda: (_x(1, 2, 4, 8), _x(1, 2, 4, 8), _x(1, 2, 4, 8)), BF16),
    ("prelu", F.prelu, lambda: (_x(2, 3, 4), _x(3)), BF16),
    # fp32: run in float32 even on bf16 inputs
    ("exp", torch.exp, lambda: (_x(5, dtype=BF16),), F32),
    ("log", torch.log, lambda: (_x(5, dtype=BF16).abs() + 1,), F32),
    ("pow", torch.pow, lambda: (_x(5, dtype=BF16), 2.0), F32),
    ("rsqrt", torch.rsqrt, lambda: (_x(5, dtype=BF16).abs() + 1,), F32),
    ("softplus", F.softplus, lambda: (_x(5, dtype=BF16),), F32),
    ("layer_norm", lambda x: F.layer_norm(x, (8,)), lambda: (_x(4, 8, dtype=BF16),), F32),
    ("rms_norm", lambda x: F.rms_norm(x, (8,)), lambda: (_x(4, 8, dtype=BF16),), F32),
    ("group_norm", lambda x: F.group_norm(x, 2), lambda: (_x(2, 4, 3, dtype=BF16),), F32),
    ("mse_loss", F.mse_loss, lambda: (_x(4, 3, dtype=BF16), _x(4, 3, dtype=BF16, seed=1)), F32),
    ("l1_loss", F.l1_loss, lambda: (_x(4, 3, dtype=BF16), _x(4, 3, dtype=BF16, seed=1)), F32),
    ("nll_loss", F.nll_loss, lambda: (_x(4, 3, dtype=BF16), torch.tensor([0, 2, 1, 0])), F32),
    ("bce_with_logits", F.binary_cross_entropy_with_logits,
     lambda: (_x(4, dtype=BF16), _x(4, dtype=BF16, seed=1).sigmoid()), F32),
    ("cosine_similarity", F.cosine_similarity, lambda: (_x(4, 8, dtype=BF16), _x(4, 8, dtype=BF16, seed=1)), F32),
    ("logsumexp", lambda x: torch.logsumexp(x, 1), lambda: (_x(4, 8, dtype=BF16),), F32),
    # fp32_set_opt_dtype: float32 unless a dtype is given
    ("softmax", lambda x: torch.softmax(x, -1), lambda: (_x(4, 8, dtype=BF16),), F32),
    ("log_softmax", lambda x: torch.log_softmax(x, -1), lambda: (_x(4, 8, dtype=BF16),), F32),
    ("softmax_dtype", lambda x: torch.softmax(x, -1, dtype=torch.float64), lambda: (_x(4, 8, dtype=BF16),), torch.float64),
    ("sum", torch.sum, lambda: (_x(4, 8, dtype=BF16),), F32),
    ("sum_dim", lambda x: x.sum(1), lambda: (_x(4, 8, dtype=BF16),), F32),
    ("prod", torch.prod, lambda: (_x(4, dtype=BF16),), F32),
    ("cumsum", lambda x: torch.cumsum(x, 0), lambda: (_x(4, dtype=BF16),), F32),
    ("vector_norm", torch.linalg.vector_norm, lambda: (_x(4, 8, dtype=BF16),), F32),
    # fp32_append_dtype
    ("norm", torch.norm, lambda: (_x(4, 8, dtype=BF16),), F32),
    # promote: the widest floating input type
    ("addcmul", torch.addcmul, lambda: (_x(4), _x(4, dtype=BF16), _x(4, dtype=BF16, seed=1)), F32),
    ("addcdiv", torch.addcdiv, lambda: (_x(4, dtype=BF16), _x(4), _x(4, seed=1).abs() + 1), F32),
    ("atan2", torch.atan2, lambda: (_x(4, dtype=BF16), _x(4)), F32),
    ("dot", torch.dot, lambda: (_x(4, dtype=BF16), _x(4)), F32),
    ("scatter_add", lambda x, s: x.scatter_add(0, torch.tensor([0, 1, 0], device=x.device), s),
     lambda: (_x(3), _x(3, dtype=BF16)), F32),
    # not on any list: unchanged (ordinary type promotion)
    ("relu_f32", torch.relu, lambda: (_x(5),), F32),
    ("relu_bf16", torch.relu, lambda: (_x(5, dtype=BF16),), BF16),
    ("add_mixed", torch.add, lambda: (_x(5, dtype=BF16), _x(5)), F32),
]

# Ops whose CPU-autocast rule is the same as CUDA's (checked: tpu result == CPU result).
_SAME_ON_CPU = {"mm", "matmul", "bmm", "baddbmm", "addmm", "linear", "conv1d", "conv2d",
                "sdpa", "prelu", "mse_loss", "l1_loss", "nll_loss", "relu_f32", "relu_bf16",
                "add_mixed", "bce_with_logits"}


def _run(fn, args, device):
    args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    with torch.autocast(device, dtype=BF16):
        return fn(*args)


@pytest.mark.parametrize("name,fn,make,expected", _CASES, ids=[c[0] for c in _CASES])
def test_autocast_output_dtype(name, fn, make, expected):
    args = make()
    out = _run(fn, args, "tpu")
    assert out.device.type == "tpu"
    assert out.dtype == expected, f"{name}: {out.dtype}, CUDA autocast gives {expected}"
    if name in _SAME_ON_CPU:
        ref = _run(fn, args, "cpu")
        assert ref.dtype == out.dtype
        tol = 2e-2 if expected == BF16 else 1e-2
        torch.testing.assert_close(out.cpu().float(), ref.float(), rtol=tol, atol=tol)


def test_lower_precision_inputs_are_cast_and_autograd_keeps_param_dtype():
    lin = torch.nn.Linear(8, 4).to("tpu")
    x = torch.randn(3, 8, device="tpu")
    with torch.autocast("tpu", dtype=BF16):
        y = lin(x)
        loss = y.float().pow(2).mean()
    assert y.dtype == BF16
    loss.backward()
    assert lin.weight.grad.dtype == F32 and lin.bias.grad.dtype == F32


def test_disabled_region_and_default_dtype():
    x = torch.randn(4, 4, device="tpu")
    assert torch.get_autocast_dtype("tpu") == BF16
    with torch.autocast("tpu"):  # bfloat16 is the tpu default
        assert torch.is_autocast_enabled("tpu")
        assert (x @ x).dtype == BF16
        with torch.autocast("tpu", enabled=False):
            assert (x @ x).dtype == F32
    assert (x @ x).dtype == F32
    with torch.autocast("tpu", dtype=F16):
        assert (x @ x).dtype == F16


def test_cpu_autocast_does_not_touch_tpu_tensors():
    x = torch.randn(4, 4, device="tpu")
    with torch.autocast("cpu", dtype=BF16):
        assert (x @ x).dtype == F32


def test_amp_supported_dtypes_and_bad_dtype():
    assert set(torch.tpu.get_amp_supported_dtype()) == {BF16, F16}
    assert torch.tpu.is_bf16_supported()
    assert torch.amp.is_autocast_available("tpu")
    with pytest.warns(UserWarning, match="not supported"):
        with torch.autocast("tpu", dtype=torch.float64):
            assert not torch.is_autocast_enabled("tpu")


def test_binary_cross_entropy_is_banned_like_cuda():
    p = torch.rand(4, device="tpu")
    with torch.autocast("tpu", dtype=BF16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, p)


def test_autocast_forward_backward_runs_natively():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 5)).to("tpu")
    x = torch.randn(8, 16, device="tpu")
    t = torch.randint(0, 5, (8,), device="tpu")

    def step():
        with torch.autocast("tpu", dtype=BF16):
            loss = F.cross_entropy(model(x), t)
        loss.backward()
        return loss

    loss = no_fallback(step)
    assert loss.dtype == F32


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 4))


def _train_autocast(device, steps=25):
    model = _mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 20, generator=g)
    y = (x[:, :4] * 2).argmax(1)  # a learnable labelling
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(steps):
        with torch.autocast(device, dtype=BF16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_under_autocast_matches_cpu_autocast():
    tpu = _train_autocast("tpu")
    cpu = _train_autocast("cpu")
    assert tpu[-1] < 0.6 * tpu[0], tpu  # it learns
    # bf16 has 8 bits of mantissa (relative step 2^-8 = 0.4%); 25 steps of SGD with momentum
    # amplify one-ulp differences a little, so 3% relative on each loss.
    torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=3e-2, atol=1e-3)


# ---- GradScaler -------------------------------------------------------------------------------

def _train_scaled(device, steps=12, poison_step=5):
    model = _mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=3)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(32, 20, generator=g).to(device)
    y = torch.randint(0, 4, (32,), generator=g).to(device)
    losses, scales, skipped = [], [], []
    for i in range(steps):
        with torch.autocast(device, dtype=F16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        if i == poison_step:  # an overflowed gradient: the step must be skipped
            next(model.parameters()).grad.view(-1)[0] = float("inf")
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        skipped.append(all(torch.equal(b, p.detach().cpu()) for b, p in zip(before, model.parameters())))
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, skipped


def test_grad_scaler_trains_skips_overflow_and_matches_cpu():
    torchtpu.reset_fallback_stats()
    losses, scales, skipped = _train_scaled("tpu")
    stats = torchtpu.fallback_stats()
    assert not any("_amp_" in k for k in stats), stats  # both scaler kernels are native
    cpu_losses, cpu_scales, cpu_skipped = _train_scaled("cpu")
    assert skipped == cpu_skipped and skipped[5] and sum(skipped) == 1
    # backoff halves the scale at the poisoned step; growth doubles it every 3 clean steps
    assert scales == cpu_scales, (scales, cpu_scales)
    assert scales[5] == scales[4] / 2
    assert losses[-1] < losses[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=2e-2, atol=1e-3)


def test_grad_scaler_kernels_directly():
    grads = [torch.tensor([1.0, 2.0], device="tpu"), torch.tensor([4.0], device="tpu", dtype=F16)]
    found = torch.zeros(1, device="tpu")
    inv = torch.full((1,), 0.5, device="tpu")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert found.item() == 0.0
    assert grads[0].tolist() == [0.5, 1.0] and grads[1].item() == 2.0
    grads[0][1] = float("nan")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert found.item() == 1.0
    with pytest.raises(RuntimeError, match="found_inf must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found.double(), inv)

    scale = torch.full((1,), 8.0, device="tpu")
    tracker = torch.zeros(1, dtype=torch.int32, device="tpu")
    clean = torch.zeros(1, device="tpu")
    for expected_scale, expected_tracker in [(8.0, 1), (16.0, 0), (16.0, 1)]:
        out = torch._amp_update_scale_(scale, tracker, clean, 2.0, 0.5, 2)
        assert out is scale or out.data_ptr() == scale.data_ptr()
        assert (scale.item(), tracker.item()) == (expected_scale, expected_tracker)
    torch._amp_update_scale_(scale, tracker, torch.ones(1, device="tpu"), 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (8.0, 0)
    big = torch.full((1,), 3e38, device="tpu")  # growing would overflow: the scale stays
    torch._amp_update_scale_(big, torch.ones(1, dtype=torch.int32, device="tpu"), clean, 2.0, 0.5, 2)
    assert big.item() == pytest.approx(3e38)


def test_torch_tpu_amp_spellings_of_code_written_for_cuda():
    # torch.cuda.amp.X -> torch.tpu.amp.X: the torch.amp objects for "tpu", with CUDA's
    # FutureWarning pointing at the torch.amp spelling; autocast defaults to bfloat16
    a, b = _x(4, 8).to("tpu"), _x(8, 3).to("tpu")
    with pytest.warns(FutureWarning, match=r"torch.amp.autocast\('tpu', args...\)"):
        ctx = torch.tpu.amp.autocast()
    with ctx:
        assert (a @ b).dtype == BF16
        with torch.tpu.amp.autocast(enabled=False):
            assert (a @ b).dtype == F32
    with torch.tpu.amp.autocast(dtype=F16):
        assert (a @ b).dtype == F16
    assert (a @ b).dtype == F32

    from torch.tpu.amp import GradScaler, custom_bwd, custom_fwd  # as from torch.cuda.amp

    with pytest.warns(FutureWarning, match="GradScaler"):
        scaler = GradScaler(init_scale=4.0)
    assert isinstance(scaler, torch.amp.GradScaler) and scaler._device == "tpu"
    w = torch.ones(3, device="tpu", requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.5)
    scaler.scale((w * 2).sum()).backward()
    assert w.grad.tolist() == [8.0, 8.0, 8.0]  # scaled by 4
    scaler.step(opt)  # unscaled to 2 before the step
    scaler.update()
    assert w.detach().cpu().tolist() == [0.0, 0.0, 0.0]

    class Square(torch.autograd.Function):
        @staticmethod
        @custom_fwd(cast_inputs=F32)  # runs in f32 even inside autocast
        def forward(ctx, x):
            ctx.save_for_backward(x)
            assert x.dtype == F32 and not torch.is_autocast_enabled("tpu")
            return x @ x.t()

        @staticmethod
        @custom_bwd
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return (g + g.t()) @ x

    x = _x(3, 4).to("tpu").requires_grad_()
    with torch.autocast("tpu"):
        y = Square.apply(x.to(BF16))
    assert y.dtype == F32
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), 2 * torch.ones(3, 3) @ x.detach().cpu(),
                               rtol=1e-2, atol=1e-2)  # x went through bf16 once
