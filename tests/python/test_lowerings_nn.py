"""Native lowerings of the neural-network ops: convolution (1-D/2-D/3-D, groups, stride,
padding, dilation, transposed) forward and backward, pooling (max with indices, avg,
adaptive avg) forward and backward, batch norm (train/eval, running statistics, the
overloads torch.compile uses), group norm, rms norm, and the random ops (rand/randn/randint, uniform_, normal_, random_,
bernoulli, dropout, exponential_, randperm, ...). Each is compared with PyTorch on CPU on
the same inputs, forward and backward through autograd, and checked not to use the CPU
fallback.

Tolerances:
- Convolutions run on the MXU. At DEFAULT precision f32 operands are rounded to bf16 (one
  pass), so these tests set HIGHEST (six bf16 passes, about f32; process-wide, because
  autograd runs backward on its own thread) and compare with rtol/atol 1e-4 (sums of up to
  a few hundred products); one test checks DEFAULT against a relative tolerance of ~1e-2.
- Pooling and normalization are vector work in f32: 1e-5 (max pooling is exact), 1e-4
  for normalization (two-pass statistics in a different summation order than CPU).
- bf16 results are rounded once from f32 math; CPU rounds intermediates too, so bf16
  comparisons allow a few bf16 ulps (rtol 2e-2, atol 2e-2 to 5e-2).
- Random ops do not reproduce the CPU generator's numbers (our generator is counter-based
  Philox; see torchtpu/csrc/lower_random.cpp): they are checked for reproducibility under
  manual_seed, for their ranges, and for their moments within ~6 standard errors.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


from conftest import compare_with_cpu as compare, no_fallback, run_json, tpu

# padding="same" with an even kernel pads asymmetrically (PyTorch warns that it copies)
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")



# ---- convolution ------------------------------------------------------------------------------

CONVS = {
    "2d": (lambda x, w, b: F.conv2d(x, w, b), (2, 3, 9, 9), (4, 3, 3, 3)),
    "2d_stride_pad": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), (2, 3, 9, 10), (4, 3, 3, 3)),
    "2d_asym_dilation": (lambda x, w, b: F.conv2d(x, w, b, stride=(2, 3), padding=(1, 2), dilation=2),
                         (2, 3, 11, 12), (4, 3, 3, 2)),
    "2d_groups": (lambda x, w, b: F.conv2d(x, w, b, stride=2, groups=2), (2, 6, 10, 8), (4, 3, 3, 2)),
    "2d_depthwise": (lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=6), (2, 6, 7, 7), (6, 1, 3, 3)),
    "2d_same": (lambda x, w, b: F.conv2d(x, w, b, padding="same"), (2, 3, 8, 8), (4, 3, 4, 4)),
    "1d": (lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), (2, 3, 11), (5, 3, 4)),
    "3d": (lambda x, w, b: F.conv3d(x, w, b, stride=2, padding=1), (1, 2, 5, 6, 7), (3, 2, 3, 3, 3)),
    "transpose_2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
                     (2, 4, 5, 5), (4, 3, 3, 3)),
    "transpose_2d_groups_dilation": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(2, 1), padding=(0, 1),
                                                                        dilation=2, groups=2),
                                     (2, 4, 5, 6), (4, 3, 3, 2)),
    "transpose_1d": (lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3), (2, 3, 7), (3, 2, 4)),
    # an output_padding past the stride (allowed below the dilation): the input gradient's
    # convolution yields positions past the input, which it must drop
    "transpose_2d_groups_output_padding_past_stride": (
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(3, 2), padding=(1, 2), output_padding=(2, 3),
                                           groups=2, dilation=(4, 4)),
        (2, 2, 4, 4), (2, 2, 4, 5)),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_convolution_forward_backward(name, highest):
    fn, xs, ws = CONVS[name]
    torch.manual_seed(0)
    transposed = name.startswith("transpose")
    groups = 2 if "groups" in name else 6 if "depthwise" in name else 1
    channels = ws[1] * groups if transposed else ws[0]
    compare(fn, torch.randn(xs), torch.randn(ws), torch.randn(channels), rtol=1e-4, atol=1e-4)


def test_convolution_noncontiguous_input_and_no_bias(highest):
    x = torch.randn(2, 9, 9, 3).permute(0, 3, 1, 2)          # channels-last strides
    compare(lambda x, w: F.conv2d(x, w, padding=1), x, torch.randn(4, 3, 3, 3), rtol=1e-4, atol=1e-4)


def test_convolution_default_precision_rounds_to_bf16():
    x, w = torch.randn(2, 8, 12, 12), torch.randn(16, 8, 3, 3)
    got = no_fallback(lambda: F.conv2d(tpu(x), tpu(w))).cpu()
    # one MXU pass: bf16-rounded operands, f32 accumulation
    torch.testing.assert_close(got, F.conv2d(x.bfloat16().double(), w.bfloat16().double()).float(),
                               rtol=1e-5, atol=1e-4)
    assert (got - F.conv2d(x, w)).abs().max() > 1e-3, "DEFAULT should not be exact f32"
    torch.testing.assert_close(got, F.conv2d(x, w), rtol=1e-2, atol=1e-1)


def test_convolution_bf16():
    compare(lambda x, w, b: F.conv2d(x, w, b, padding=1), torch.randn(2, 3, 8, 8).bfloat16(),
            torch.randn(4, 3, 3, 3).bfloat16(), torch.randn(4).bfloat16(), rtol=2e-2, atol=1e-1)


def test_convolution_shape_errors_are_pytorchs():
    with pytest.raises(RuntimeError):
        F.conv2d(tpu(torch.randn(1, 3, 2, 2)), tpu(torch.randn(4, 3, 3, 3)))
    with pytest.raises(RuntimeError):
        F.conv2d(tpu(torch.randn(1, 4, 5, 5)), tpu(torch.randn(4, 3, 3, 3)))


# ---- pooling ------------------------------------------------------------------------------------

POOLS = {
    "max_2": lambda x: F.max_pool2d(x, 2, return_indices=True),
    "max_3_s2_p1_ceil": lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
    "max_dilation": lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 1), dilation=(2, 3), return_indices=True),
    "avg_3_s2": lambda x: F.avg_pool2d(x, 3, 2),
    "avg_p1_ceil": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
    "avg_p1_ceil_exclude_pad": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg_divisor_override": lambda x: F.avg_pool2d(x, (2, 3), (1, 2), (1, 1), divisor_override=5),
    "adaptive_1": lambda x: F.adaptive_avg_pool2d(x, 1),
    "adaptive_divisible": lambda x: F.adaptive_avg_pool2d(x, (3, 5)),
    "adaptive_general": lambda x: F.adaptive_avg_pool2d(x, (4, 3)),
    "adaptive_upsample": lambda x: F.adaptive_avg_pool2d(x, (11, 13)),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pooling_forward_backward(name):
    torch.manual_seed(0)
    compare(POOLS[name], torch.randn(2, 3, 9, 10))


@pytest.mark.parametrize("name", ["max_2", "avg_3_s2", "adaptive_general"])
def test_pooling_bf16_unbatched_noncontiguous(name):
    x = torch.randn(9, 10, 3).permute(2, 0, 1)                # (C, H, W), not contiguous
    compare(POOLS[name], x)
    compare(POOLS[name], x.bfloat16(), rtol=2e-2, atol=2e-2)


def test_max_pool_ties_nan_and_minus_inf_match_cpu():
    x = torch.randint(0, 3, (2, 2, 8, 9)).float()              # many ties: the first max wins
    x[0, 0, 0, 0] = float("nan")
    x[0, 0, 2, 2] = float("nan")                               # two NaNs in a window: the last wins
    x[1, 1, :4, :4] = float("-inf")                            # all -inf windows
    compare(lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True), x, grad=False)
    x = torch.randint(0, 3, (2, 2, 8, 9)).float()
    compare(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x)   # overlapping windows


# ---- normalization ------------------------------------------------------------------------------

def _bn_train(x, w, b, rm, rv):
    return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2, eps=1e-3), rm, rv


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (8, 3), (2, 3, 4, 5, 2)])
def test_batch_norm_training_updates_running_stats(shape):
    torch.manual_seed(0)
    x, w, b = torch.randn(shape), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    compare(_bn_train, x, w, b, rm, rv, rtol=1e-4, atol=1e-4, nograd=(3, 4))


def test_batch_norm_variants():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 5, 6), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    tol = dict(rtol=1e-4, atol=1e-4)
    compare(lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, training=False), x, w, b, rm, rv,
            nograd=(3, 4), **tol)
    compare(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b, **tol)
    compare(lambda x, rm, rv: F.batch_norm(x, rm, rv, training=True), x, rm, rv, nograd=(1, 2), **tol)
    compare(_bn_train, torch.randn(4, 5, 6, 3).permute(0, 3, 1, 2), w, b, rm, rv, nograd=(3, 4), **tol)
    compare(lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, training=True), x.bfloat16(), w, b, rm, rv,
            nograd=(3, 4), rtol=2e-2, atol=2e-2)


def test_batch_norm_overloads_of_compile_and_export():
    """_native_batch_norm_legit (and .no_stats, _no_training) and batch_norm_backward."""
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 5, 6), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    aten = torch.ops.aten
    tol = dict(rtol=1e-4, atol=1e-4, grad=False)
    compare(lambda x, w, b, rm, rv: (*aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5), rm, rv),
            x, w, b, rm, rv, **tol)
    compare(lambda x, w, b: aten._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5), x, w, b, **tol)
    compare(lambda x, w, b, rm, rv: aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)[0],
            x, w, b, rm, rv, **tol)
    mean, invstd = x.mean((0, 2, 3)), x.var((0, 2, 3), unbiased=False).add(1e-5).rsqrt()
    compare(lambda g, x, w, rm, rv, m, i: aten.batch_norm_backward(g, x, w, rm, rv, m, i, True, 1e-5,
                                                                  [True, True, True], torch.empty(0, device=x.device)),
            torch.randn(4, 3, 5, 6), x, w, rm, rv, mean, invstd, **tol)


def test_batch_norm_module_matches_cpu_over_steps():
    torch.manual_seed(0)
    cpu = torch.nn.BatchNorm2d(3, momentum=0.3)
    dev = torch.nn.BatchNorm2d(3, momentum=0.3).to("tpu")
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5)
        cpu(x)
        no_fallback(lambda: dev(tpu(x)))
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var, rtol=1e-5, atol=1e-6)
    assert dev.num_batches_tracked.item() == 3
    cpu.eval(), dev.eval()
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(no_fallback(lambda: dev(tpu(x))).cpu(), cpu(x), rtol=1e-5, atol=1e-5)


def test_group_norm():
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 6, 4, 5), torch.randn(6), torch.randn(6)
    tol = dict(rtol=1e-4, atol=1e-4)
    compare(lambda x, w, b: F.group_norm(x, 3, w, b, eps=1e-4), x, w, b, **tol)
    compare(lambda x: F.group_norm(x, 2), x, **tol)
    compare(lambda x, w, b: F.group_norm(x, 3, w, b), torch.randn(4, 6), w, b, **tol)
    compare(lambda x, w, b: F.group_norm(x, 3, w, b), x.bfloat16(), w.bfloat16(), b.bfloat16(),
            rtol=2e-2, atol=3e-2)


def test_rms_norm():
    torch.manual_seed(0)
    x = torch.randn(3, 6, 4, 5)
    compare(lambda x, w: F.rms_norm(x, (5,), w, eps=1e-5), x, torch.randn(5), rtol=1e-4, atol=1e-4)
    compare(lambda x, w: F.rms_norm(x, (4, 5), w), x, torch.randn(4, 5), rtol=1e-4, atol=1e-4)
    compare(lambda x, w: F.rms_norm(x, (5,), w), x.bfloat16(), torch.randn(5).bfloat16(), rtol=2e-2, atol=2e-2)


def test_small_cnn_trains_like_cpu(highest):
    """conv + batch norm + relu + max/adaptive pooling + cross entropy, 4 SGD steps."""
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, stride=2, groups=2),
            torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.AvgPool2d(2, ceil_mode=True),
            torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(32, 4))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 3, 16, 16, generator=g), torch.randint(0, 4, (16,), generator=g)

    def train(device):
        m = model().to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        losses = []
        for _ in range(4):
            loss = F.cross_entropy(m(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, m

    want, cpu_model = train("cpu")
    got, tpu_model = no_fallback(lambda: train("tpu"))
    assert got == pytest.approx(want, rel=1e-4, abs=1e-4)
    for a, b in zip(cpu_model.state_dict().values(), tpu_model.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-3, atol=1e-4)


# ---- upsampling ---------------------------------------------------------------------------------

UPSAMPLE_SHAPES = {1: (2, 3, 7), 2: (2, 3, 5, 6), 3: (1, 2, 3, 4, 5)}
LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}


def upsample_cases():
    for k, shape in UPSAMPLE_SHAPES.items():
        sizes = {"x2": dict(scale_factor=2), "x1.7": dict(scale_factor=1.7),
                 "up": dict(size=tuple(s + 3 for s in shape[2:])),
                 "down": dict(size=tuple(max(1, s - 2) for s in shape[2:])),
                 "same": dict(size=shape[2:])}
        for size, kw in sizes.items():
            yield pytest.param(shape, "nearest", kw, {}, id=f"{k}d-nearest-{size}")
            yield pytest.param(shape, "nearest-exact", kw, {}, id=f"{k}d-nearest-exact-{size}")
            for ac in (False, True):
                yield pytest.param(shape, LINEAR[k], kw, dict(align_corners=ac),
                                   id=f"{k}d-{LINEAR[k]}-{size}-align{int(ac)}")
                if k == 2:
                    yield pytest.param(shape, "bicubic", kw, dict(align_corners=ac),
                                       id=f"2d-bicubic-{size}-align{int(ac)}")


@pytest.mark.parametrize("shape,mode,size,extra", upsample_cases())
def test_upsample_forward_backward(shape, mode, size, extra):
    # the same source pixels as the CPU (indices from the same f32 formulas); linear
    # weights differ from the CPU's by an ulp at most (it may fuse a multiply-add), and the
    # backward sums one dim at a time: 1e-5
    torch.manual_seed(0)
    compare(lambda x: F.interpolate(x, mode=mode, **size, **extra), torch.randn(shape))


def test_upsample_nearest_is_exact_for_images_and_bf16():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6)
    for kw in (dict(scale_factor=2), dict(scale_factor=1.7), dict(size=(9, 4))):
        assert torch.equal(no_fallback(lambda: F.interpolate(tpu(x), **kw)).cpu(), F.interpolate(x, **kw))
    u8 = torch.randint(0, 255, (1, 3, 4, 4), dtype=torch.uint8)
    assert torch.equal(no_fallback(lambda: F.interpolate(tpu(u8), scale_factor=3)).cpu(),
                       F.interpolate(u8, scale_factor=3))
    xb = x.bfloat16().to(memory_format=torch.channels_last)
    compare(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), xb, rtol=2e-2, atol=2e-2)
    compare(lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), xb, rtol=2e-2, atol=3e-2)


def test_bicubic_resize_of_position_embeddings():
    # timm's resample_abs_pos_embed: a (1, D, 14, 14) grid to (1, D, 16, 16), and back down
    pos = torch.randn(1, 32, 14, 14, generator=torch.Generator().manual_seed(5))
    compare(lambda p: F.interpolate(p, size=(16, 16), mode="bicubic", align_corners=False), pos)
    compare(lambda p: F.interpolate(p, size=(7, 9), mode="bicubic", antialias=False), pos)


# ---- losses -------------------------------------------------------------------------------------

LOSSES = {
    "smooth_l1": lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.5),
    "smooth_l1-beta0": lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.0),
    "huber": lambda x, y, r: F.huber_loss(x, y, reduction=r, delta=0.7),
    "l1": lambda x, y, r: F.l1_loss(x, y, reduction=r),
    "kl_div": lambda x, y, r: F.kl_div(F.log_softmax(x, -1), F.softmax(y, -1),
                                      reduction="batchmean" if r == "mean" else r),
}


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_losses_forward_backward(name, reduction):
    # elementwise f32 maths and one sum: 1e-5; the kinks (|x - y| = beta or delta, x = y
    # for l1) are exact comparisons on the same f32 difference as the CPU's
    torch.manual_seed(0)
    x, y = torch.randn(6, 7), torch.randn(6, 7)
    x[0, :3] = y[0, :3]  # x = y: the gradient of |x - y| there is 0
    compare(lambda x, y: LOSSES[name](x, y, reduction), x, y)


def test_losses_bf16():
    torch.manual_seed(0)
    x, y = torch.randn(6, 7).bfloat16(), torch.randn(6, 7).bfloat16()
    for name in ("smooth_l1", "huber"):
        compare(lambda x, y: LOSSES[name](x, y, "mean"), x, y, rtol=2e-2, atol=2e-2)


def test_xlogy_zero_nan_and_scalars():
    x = torch.tensor([0.0, 0.0, 1.0, 2.0, -1.0, 0.0])
    y = torch.tensor([0.0, float("nan"), 0.0, 3.0, 2.0, float("inf")])
    for args in ((x, y), (2.0, y), (x, 3.0), (torch.tensor([0, 1, 2]), torch.tensor([1, 2, 3]))):
        want = torch.xlogy(*args)
        got = no_fallback(lambda: torch.xlogy(*[tpu(a) if isinstance(a, torch.Tensor) else a for a in args]))
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)


# ---- random -------------------------------------------------------------------------------------

N = 200_000

RANDOM = {
    "rand": lambda: torch.rand(N, device="tpu"),
    "rand_bf16": lambda: torch.rand(N, device="tpu", dtype=torch.bfloat16),
    "rand_f64": lambda: torch.rand(N, device="tpu", dtype=torch.float64),
    "randn": lambda: torch.randn(N, device="tpu"),
    "randn_bf16": lambda: torch.randn(N, device="tpu", dtype=torch.bfloat16),
    "uniform_": lambda: torch.empty(N, device="tpu").uniform_(-2, 3),
    "normal_": lambda: torch.empty(N, device="tpu").normal_(1, 3),
    "normal_tensor_mean": lambda: torch.normal(torch.full((N,), 2.0, device="tpu"), 0.5),
    "normal_tensors": lambda: torch.normal(torch.zeros(N, device="tpu"), torch.full((N,), 2.0, device="tpu")),
    "randint": lambda: torch.randint(3, 10, (N,), device="tpu"),
    "randint_wide": lambda: torch.randint(-2**40, 2**40, (N,), device="tpu"),
    "random_int64": lambda: torch.empty(N, device="tpu", dtype=torch.int64).random_(),
    "random_f32": lambda: torch.empty(N, device="tpu").random_(),
    "random_to": lambda: torch.empty(N, device="tpu").random_(7),
    "random_uint8": lambda: torch.empty(N, device="tpu", dtype=torch.uint8).random_(),
    "random_bool": lambda: torch.empty(N, device="tpu", dtype=torch.bool).random_(),
    "bernoulli_p": lambda: torch.empty(N, device="tpu").bernoulli_(0.3),
    "bernoulli_tensor": lambda: torch.empty(N, device="tpu").bernoulli_(torch.full((N,), 0.7, device="tpu")),
    "bernoulli": lambda: torch.bernoulli(torch.full((N,), 0.25, device="tpu")),
    "exponential_": lambda: torch.empty(N, device="tpu").exponential_(2.0),
    "log_normal_": lambda: torch.empty(N, device="tpu").log_normal_(0, 0.5),
    "geometric_": lambda: torch.empty(N, device="tpu").geometric_(0.25),
    "cauchy_": lambda: torch.empty(N, device="tpu").cauchy_(),
    "randperm": lambda: torch.randperm(5000, device="tpu"),
    "dropout": lambda: F.dropout(torch.ones(N, device="tpu"), 0.2),
}

# (low, high) bounds and (mean, std) of each distribution (None: not checked)
EXPECT = {
    "rand": ((0, 1), (0.5, 12 ** -0.5)), "rand_bf16": ((0, 1), (0.5, 12 ** -0.5)),
    "rand_f64": ((0, 1), (0.5, 12 ** -0.5)), "randn": (None, (0, 1)), "randn_bf16": (None, (0, 1)),
    "uniform_": ((-2, 3), (0.5, 5 / 12 ** 0.5)), "normal_": (None, (1, 3)),
    "normal_tensor_mean": (None, (2, 0.5)), "normal_tensors": (None, (0, 2)),
    "randint": ((3, 10), (6, (48 / 12) ** 0.5)), "randint_wide": ((-2**40, 2**40), (0, 2**41 / 12 ** 0.5)),
    "random_int64": ((0, 2**63), (2**62, 2**63 / 12 ** 0.5)), "random_f32": ((0, 2**24 + 1), (2**23, 2**24 / 12 ** 0.5)),
    "random_to": ((0, 7), (3, 2)), "random_uint8": ((0, 256), (127.5, (256**2 / 12) ** 0.5)),
    "random_bool": ((0, 2), (0.5, 0.5)), "bernoulli_p": ((0, 2), (0.3, 0.21 ** 0.5)),
    "bernoulli_tensor": ((0, 2), (0.7, 0.21 ** 0.5)), "bernoulli": ((0, 2), (0.25, 0.1875 ** 0.5)),
    "exponential_": ((0, None), (0.5, 0.5)), "log_normal_": ((0, None), (1.1331, 0.6039)),
    "geometric_": ((1, None), (4, 12 ** 0.5)), "cauchy_": (None, None), "randperm": ((0, 5000), None),
    "dropout": ((0, 1.25 + 1e-6), (1, 0.5)),
}


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_reproducible_in_range_and_distributed(name):
    fn = RANDOM[name]
    torch.manual_seed(123)
    a = no_fallback(fn).cpu()
    torch.manual_seed(123)
    b = fn().cpu()
    c = fn().cpu()
    assert torch.equal(a, b), "manual_seed must reproduce the numbers"
    assert not torch.equal(b, c), "consecutive draws must differ"
    bounds, moments = EXPECT[name]
    v = a.double()
    if bounds:
        lo, hi = bounds
        assert v.min() >= lo
        if hi is not None:
            assert v.max() < hi
    if moments:
        mean, std = moments
        assert abs(v.mean().item() - mean) < 6 * std / len(v) ** 0.5 + 1e-12 * abs(mean)
        assert abs(v.std().item() - std) < 0.02 * std


def test_randperm_is_a_permutation():
    p = no_fallback(lambda: torch.randperm(3000, device="tpu")).cpu()
    assert torch.equal(p.sort().values, torch.arange(3000))


def test_dropout_mask_scale_backward_and_eval():
    x = torch.randn(10_000, device="tpu", requires_grad=True)
    y = no_fallback(lambda: F.dropout(x, 0.3))
    no_fallback(lambda: y.sum().backward())
    kept = (y != 0).cpu()
    assert 0.65 < kept.float().mean() < 0.75
    torch.testing.assert_close(y.detach().cpu()[kept], x.detach().cpu()[kept] / 0.7)
    assert torch.equal((x.grad != 0).cpu(), kept)
    torch.testing.assert_close(x.grad.cpu()[kept], torch.full((int(kept.sum()),), 1 / 0.7))
    assert torch.equal(no_fallback(lambda: F.dropout(x, 0.3, training=False)).cpu(), x.detach().cpu())
    assert torch.equal(no_fallback(lambda: F.dropout(x, 1.0)).cpu(), torch.zeros(10_000))
    out, mask = torch.ops.aten.native_dropout(tpu(torch.ones(4, 5)), 0.5, False)
    assert torch.equal(out.cpu(), torch.ones(4, 5)) and mask.dtype == torch.bool and bool(mask.all())


def test_random_numbers_are_the_same_in_debug_mode():
    """The numbers come from (seed, offset) alone: strict and debug eager agree."""
    code = """
        import torch, torchtpu
        torch.manual_seed(7)
        a = torch.rand(1000, device="tpu")
        b = torch.randn(1000, device="tpu", dtype=torch.bfloat16)
        c = torch.nn.functional.dropout(torch.ones(1000, device="tpu"), 0.5)
        emit([a.sum().item(), b.float().sum().item(), c.sum().item()])
    """
    strict = run_json(code)
    debug = run_json(code, {"TORCHTPU_EAGER": "debug"})
    assert strict == debug


@pytest.mark.parametrize("weight,ignore_index,reduction", [
    (False, -100, "mean"), (True, -100, "mean"), (False, 1, "mean"), (True, 2, "sum"), (True, 0, "none"),
])
def test_cross_entropy_over_images(weight, ignore_index, reduction):
    # (B, C, H, W) logits against (B, H, W) labels: nll_loss2d, as in semantic segmentation
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 3, 5, generator=gen)
    target = torch.randint(0, 4, (2, 3, 5), generator=gen)
    w = torch.rand(4, generator=gen) if weight else None
    compare(lambda t, y, ww: F.cross_entropy(t, y, weight=ww, ignore_index=ignore_index, reduction=reduction),
            x, target, w, rtol=1e-5, atol=1e-6, nograd=(2,))
    compare(lambda t, y: F.nll_loss(t.log_softmax(1), y, reduction=reduction), x[:, :, :, :1].squeeze(-1),
            target[:, :, 0], rtol=1e-5, atol=1e-6)  # the (B, C, L) form


def test_cross_entropy_over_volumes_and_bf16():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 2, 3, 4, generator=gen)  # (B, C, D, H, W): PyTorch reshapes to 2-D
    target = torch.randint(0, 3, (2, 2, 3, 4), generator=gen)
    compare(F.cross_entropy, x, target, rtol=1e-5, atol=1e-6)
    compare(F.cross_entropy, x[:, :, 0].bfloat16(), target[:, 0], rtol=2e-2, atol=2e-2)


def test_eye():
    for args in ((3,), (2, 5), (4, 1), (0,), (3, 0)):
        for dtype in (torch.float32, torch.int64, torch.bool, torch.bfloat16):
            got = no_fallback(lambda: torch.eye(*args, dtype=dtype, device="tpu"))
            assert got.dtype == dtype and torch.equal(got.cpu(), torch.eye(*args, dtype=dtype)), (args, dtype)
    with pytest.raises(RuntimeError, match="n must be greater or equal to 0, got -1"):
        torch.eye(-1, device="tpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_linspace_and_logspace(dtype):
    for start, end, steps in ((0, 1, 5), (-3.5, 7.25, 11), (2, -2, 4), (1.5, 1.5, 3), (0, 10, 1), (0, 1, 0)):
        if dtype == torch.int64 and (start != int(start) or end != int(end)):
            continue
        # the CPU kernel's start + step * i compiles to a fused multiply-add: an ulp apart
        got = no_fallback(lambda: torch.linspace(start, end, steps, dtype=dtype, device="tpu"))
        torch.testing.assert_close(got.cpu(), torch.linspace(start, end, steps, dtype=dtype), rtol=1e-6, atol=1e-6)
        if dtype != torch.int64:
            got = no_fallback(lambda: torch.logspace(start, end, steps, base=2.0, dtype=dtype, device="tpu"))
            torch.testing.assert_close(got.cpu(), torch.logspace(start, end, steps, base=2.0, dtype=dtype),
                                       rtol=1e-6, atol=0)


def test_multinomial_draws_natively_with_pytorchs_checks():
    p = torch.tensor([[0.1, 0.2, 0.7, 0.0], [0.5, 0.0, 0.25, 0.25]])
    torch.manual_seed(0)
    draws = no_fallback(lambda: torch.multinomial(tpu(p).repeat(2000, 1), 1)).cpu().view(2000, 2)
    for row in range(2):  # frequencies within ~5 standard errors of the probabilities
        freq = torch.bincount(draws[:, row], minlength=4).double() / 2000
        assert (freq - p[row].double()).abs().max() < 5 * (0.25 / 2000) ** 0.5, freq
    without = no_fallback(lambda: torch.multinomial(tpu(p).repeat(50, 1), 3)).cpu()
    assert all(len(set(r)) == 3 and p[i % 2][r].gt(0).all() for i, r in enumerate(without.tolist()))
    torch.manual_seed(1)
    a = torch.multinomial(tpu(p), 2).cpu()
    torch.manual_seed(1)
    assert torch.equal(torch.multinomial(tpu(p), 2).cpu(), a)
    # several draws with replacement: one exponential race per draw
    draws = no_fallback(lambda: torch.multinomial(tpu(p), 2000, replacement=True)).cpu()
    for row in range(2):
        freq = torch.bincount(draws[row], minlength=4).double() / 2000
        assert (freq - p[row].double()).abs().max() < 5 * (0.25 / 2000) ** 0.5, freq
    assert no_fallback(lambda: torch.multinomial(tpu(p[0]), 3, replacement=True)).shape == (3,)
    out = torch.empty(0, dtype=torch.long, device="tpu")
    torch.multinomial(tpu(p), 4, replacement=True, out=out)
    assert out.shape == (2, 4) and p.gather(1, out.cpu()).gt(0).all()
    for bad, msg in ((torch.tensor([0.5, -0.1]), "element < 0"), (torch.tensor([float("nan"), 1.0]), "nan"),
                     (torch.zeros(2), "sum of probabilities <= 0")):
        for n, replacement in ((1, False), (3, True)):
            with pytest.raises(RuntimeError, match=msg):
                torch.multinomial(tpu(bad), n, replacement=replacement)
    assert no_fallback(lambda: torch.distributions.Categorical(probs=tpu(p)).sample((3,))).shape == (3, 2)


def test_assert_async_reads_the_flag():
    with pytest.raises(RuntimeError, match="custom message"):
        torch._assert_async(torch.tensor(0, device="tpu"), "custom message")
    no_fallback(lambda: torch._assert_async(torch.tensor(True, device="tpu")))
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        torch._assert_async(torch.tensor([1, 2], device="tpu"))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    gen = torch.Generator().manual_seed(6)
    x = torch.rand(4, 5, generator=gen).clamp(1e-3, 1 - 1e-3)
    x[0, :2] = torch.tensor([0.0, 1.0])  # the log clamps at -100 and the gradient's floor
    y = torch.rand(4, 5, generator=gen)
    w = torch.rand(5, generator=gen) if weighted else None
    compare(lambda a, b, c: F.binary_cross_entropy(a, b, weight=c, reduction=reduction), x, y, w,
            rtol=1e-5, atol=1e-6, nograd=(1, 2))
    compare(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), x[1:].bfloat16(), y[1:].bfloat16(),
            rtol=2e-2, atol=2e-2, nograd=(1,))
    compare(lambda a, b: nn.BCELoss()(torch.sigmoid(a), b), torch.randn(3, 4, generator=gen), y[:3, :4], nograd=(1,))


def test_binary_cross_entropy_checks_its_inputs_like_the_cpu():
    half = torch.full((2,), 0.5, device="tpu")
    for x, y, msg in ((torch.tensor([0.5, 1.5]), half, "input"), (torch.tensor([float("nan"), 0.5]), half, "input"),
                      (half, torch.tensor([2.0, 0.0]), "target")):
        with pytest.raises(RuntimeError, match=f"all elements of {msg} should be between 0 and 1"):
            F.binary_cross_entropy(tpu(x), tpu(y))
    assert F.binary_cross_entropy(half, half).item() == pytest.approx(0.6931472)


@pytest.mark.parametrize("shape,size", [((2, 3, 7, 9), (3, 4)), ((3, 5, 5), (5, 5)), ((1, 2, 8, 6), (4, 3)),
                                        ((2, 2, 5, 7), (1, 1)), ((1, 1, 4, 4), (6, 5))])
def test_adaptive_max_pool2d(shape, size):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(8))
    compare(lambda t: F.adaptive_max_pool2d(t, size, return_indices=True), x)
    compare(lambda t: F.adaptive_max_pool2d(t, size), x.bfloat16(), rtol=2e-2, atol=2e-2)


def test_adaptive_max_pool2d_ties_nan_and_minus_inf_match_cpu():
    x = torch.tensor([[[[1.0, 1.0, 0.0], [float("nan"), 2.0, float("nan")], [-float("inf")] * 3]]])
    want = F.adaptive_max_pool2d(x, (2, 2), return_indices=True)
    got = no_fallback(lambda: F.adaptive_max_pool2d(tpu(x), (2, 2), return_indices=True))
    assert torch.equal(got[1].cpu(), want[1])
    torch.testing.assert_close(got[0].cpu(), want[0], equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0])
def test_embedding_max_norm_renormalizes_in_place(norm_type):
    gen = torch.Generator().manual_seed(9)
    weight = torch.randn(10, 4, generator=gen) * 2
    idx = torch.tensor([[1, 3, 3], [7, 1, 0]])  # repeated rows are rescaled once
    want_w = weight.clone()
    want = F.embedding(idx, want_w, max_norm=1.5, norm_type=norm_type)
    got_w = tpu(weight)
    got = no_fallback(lambda: F.embedding(tpu(idx), got_w, max_norm=1.5, norm_type=norm_type))
    torch.testing.assert_close(got_w.cpu(), want_w, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)


def test_embedding_module_with_max_norm_trains_like_cpu():
    torch.manual_seed(0)
    emb = nn.Embedding(12, 5, max_norm=1.0)
    idx = torch.tensor([[0, 4, 4, 11], [2, 0, 7, 3]])

    def fn(w):
        return F.embedding(idx.to(w.device), w, max_norm=1.0).square().sum(-1)

    compare(fn, emb.weight.detach() * 3, rtol=1e-5, atol=1e-5)
