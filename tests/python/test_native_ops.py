"""Native eager execution: ops lowered to the IR, compiled, cached and run on the vTPU,
checked against PyTorch on CPU (same inputs), and checked not to use the CPU fallback.

Tolerances: elementwise math in f32 follows the vector unit (our vectorized exp/tanh/erf
are within a few ulp of libm): rtol 1e-5. bf16 results are rounded once from f32 math, as
PyTorch's CPU kernels do, so they match within one bf16 ulp (rtol 8e-3). Matmuls at the
default precision round f32 operands to bf16 (one MXU pass): they are compared with an
emulation of exactly that, and at HIGHEST with plain f32.
"""
import subprocess
import sys

import pytest
import torch

import torchtpu
from conftest import no_fallback, tpu


def close(got, want, rtol, atol):
    torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=atol, equal_nan=True)


UNARY = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "expm1": torch.expm1,
    "log": lambda x: torch.log(x.abs() + 0.1), "log1p": lambda x: torch.log1p(x.abs()),
    "sqrt": lambda x: torch.sqrt(x.abs()), "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.1),
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "sin": torch.sin, "cos": torch.cos,
    "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "trunc": torch.trunc, "sign": torch.sign, "reciprocal": lambda x: torch.reciprocal(x + 5),
    "relu": torch.relu, "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu, "leaky_relu": torch.nn.functional.leaky_relu,
    "square": torch.square, "log2": lambda x: torch.log2(x.abs() + 0.1),
}

BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2,
    "pow": lambda a, b: torch.pow(a.abs() + 0.5, b), "remainder": lambda a, b: torch.remainder(a, b + 3),
    "fmod": lambda a, b: torch.fmod(a, b + 3), "floor_div": lambda a, b: torch.div(a, b + 3, rounding_mode="floor"),
    "trunc_div": lambda a, b: torch.div(a, b + 3, rounding_mode="trunc"),
    "eq": torch.eq, "lt": torch.lt, "ge": torch.ge, "where": lambda a, b: torch.where(a > b, a, b),
    "lerp": lambda a, b: torch.lerp(a, b, 0.3), "lerp_hi": lambda a, b: torch.lerp(a, b, 0.7),
    "addcmul": lambda a, b: torch.addcmul(a, a, b, value=0.5),
    "addcdiv": lambda a, b: torch.addcdiv(a, a, b.abs() + 1, value=0.5),
    "clamp": lambda a, b: torch.clamp(a, -0.5, 0.5), "clamp_t": lambda a, b: torch.clamp(a, min=b),
}

TOL = {torch.float32: (1e-5, 1e-6), torch.bfloat16: (8e-3, 1e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype):
    fn = UNARY[name]
    x = (torch.randn(37, 53) * 2).to(dtype)
    got = no_fallback(lambda: fn(tpu(x)))
    close(got, fn(x), *TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast_noncontiguous(name, dtype):
    fn = BINARY[name]
    a = torch.randn(64, 48).to(dtype).t()          # non-contiguous (48, 64)
    b = torch.randn(64).to(dtype)                  # broadcast along rows
    got = no_fallback(lambda: fn(tpu(a), tpu(b)))
    rtol, atol = TOL[dtype]
    if name == "add_alpha" and dtype == torch.bfloat16:
        # PyTorch's CPU kernel rounds alpha * b to bf16 before adding (two roundings);
        # we compute a + alpha * b in f32 and round once, as CUDA does: up to 2 ulp apart
        rtol = 1.6e-2
    close(got, fn(a, b), rtol, atol)


@pytest.mark.parametrize("op", ["add", "mul", "sub", "floor_divide", "remainder", "bitwise_and", "maximum"])
def test_integer_arithmetic_is_exact(op):
    a = torch.randint(-100, 100, (500,))
    b = torch.randint(1, 50, (500,))
    fn = getattr(torch, op)
    got = no_fallback(lambda: fn(tpu(a), tpu(b)))
    assert torch.equal(got.cpu(), fn(a, b))


def test_type_promotion_and_scalars():
    a = torch.arange(10, dtype=torch.int32)
    b = torch.linspace(0, 1, 10)
    for fn in (lambda x, y: x + y, lambda x, y: x * 2.5, lambda x, y: x / 3, lambda x, y: y * x,
               lambda x, y: x + torch.tensor(1.5), lambda x, y: (x > 4) & (y < 0.5)):
        got = no_fallback(lambda: fn(tpu(a), tpu(b)))
        want = fn(a, b)
        assert got.dtype == want.dtype
        close(got, want, 1e-6, 1e-6)


def test_inplace_and_out_variants_write_through_views():
    base = torch.randn(8, 8)
    t = tpu(base.clone())
    no_fallback(lambda: t[:, 2:5].mul_(3).add_(1))
    want = base.clone()
    want[:, 2:5].mul_(3).add_(1)
    close(t, want, 1e-6, 1e-6)
    out = tpu(torch.empty(8, 8))
    no_fallback(lambda: torch.add(tpu(base), 1, out=out))
    close(out, base + 1, 1e-6, 1e-6)
    wrong = tpu(torch.empty(3))                     # resized like on CPU
    with pytest.warns(UserWarning):
        torch.mul(tpu(base), 2, out=wrong)
    close(wrong, base * 2, 1e-6, 1e-6)


REDUCTIONS = {
    "sum": lambda x: x.sum(), "sum_dim": lambda x: x.sum(1), "sum_keep": lambda x: x.sum((0, 2), keepdim=True),
    "mean": lambda x: x.mean(-1), "amax": lambda x: x.amax(0), "amin": lambda x: x.amin((1, 2)),
    "max_dim": lambda x: x.max(1).values, "argmax": lambda x: x.argmax(2), "argmax_all": lambda x: x.argmax(),
    "argmin": lambda x: x.argmin(1), "var": lambda x: x.var(1), "std": lambda x: x.std((0, 1)),
    "var0": lambda x: x.var(1, correction=0), "norm": lambda x: x.norm(dim=1), "prod": lambda x: x.prod(1),
    "logsumexp": lambda x: x.logsumexp(2), "cumsum": lambda x: x.cumsum(1), "all": lambda x: (x > -3).all(),
    "any": lambda x: (x > 2).any(1), "softmax": lambda x: x.softmax(-1), "log_softmax": lambda x: x.log_softmax(1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name, dtype):
    fn = REDUCTIONS[name]
    x = torch.randn(6, 40, 33).to(dtype)
    got = no_fallback(lambda: fn(tpu(x)))
    rtol, atol = (2e-5, 1e-5) if dtype == torch.float32 else (2e-2, 2e-2)
    close(got, fn(x), rtol, atol)


def bf16_matmul_reference(a, b):
    """What one MXU pass computes: bf16-rounded operands, products summed in f32 (f64 here)."""
    return (a.bfloat16().double() @ b.bfloat16().double()).float()


def test_matmul_default_precision_is_one_bf16_pass():
    a, b = torch.randn(64, 200), torch.randn(200, 48)
    got = no_fallback(lambda: tpu(a) @ tpu(b)).cpu()
    ref = bf16_matmul_reference(a, b)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-4)
    assert (got - a @ b).abs().max() > 1e-3, "DEFAULT should not be exact f32"


def test_matmul_highest_is_f32():
    a, b = torch.randn(64, 200), torch.randn(200, 48)
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        got = no_fallback(lambda: tpu(a) @ tpu(b)).cpu()
    torch.testing.assert_close(got, a @ b, rtol=1e-5, atol=1e-4)
    torchtpu.set_matmul_precision("high")
    try:
        high = (tpu(a) @ tpu(b)).cpu()
        err_high = (high - a @ b).abs().max()
        err_default = (bf16_matmul_reference(a, b) - a @ b).abs().max()
        assert err_high < err_default / 20
    finally:
        torchtpu.set_matmul_precision("default")


def test_torch_set_float32_matmul_precision_maps_onto_tpu():
    torch.set_float32_matmul_precision("highest")
    try:
        assert torchtpu.get_matmul_precision() == "highest"
        torch.set_float32_matmul_precision("medium")
        assert torchtpu.get_matmul_precision() == "default"
    finally:
        torchtpu.set_matmul_precision("default")
        torch.set_float32_matmul_precision("highest")
        torchtpu.set_matmul_precision("default")


@pytest.mark.parametrize("fn", [
    lambda a, b, c: torch.addmm(c[0], a, b), lambda a, b, c: torch.nn.functional.linear(a, b.t(), c[0]),
    lambda a, b, c: torch.bmm(a.expand(3, -1, -1), b.expand(3, -1, -1)),
    lambda a, b, c: a.t() @ a, lambda a, b, c: a @ b[:, 0],
])
def test_matmul_family(fn):
    a, b, c = torch.randn(16, 17), torch.randn(17, 9), torch.randn(4, 9)
    with torch.tpu.precision("highest"):
        got = no_fallback(lambda: fn(tpu(a), tpu(b), tpu(c)))
    close(got, fn(a, b, c), 1e-5, 1e-4)


def test_bf16_matmul_accumulates_in_f32():
    a, b = torch.randn(32, 1024).bfloat16(), torch.randn(1024, 16).bfloat16()
    got = no_fallback(lambda: tpu(a) @ tpu(b)).cpu()
    want = (a.double() @ b.double()).bfloat16()     # exact products, one rounding
    assert (got.float() - want.float()).abs().max() <= 2 ** -7 * want.float().abs().max()


BF16_ROUNDED_ONCE = {
    "addmm": lambda x, w, b: torch.addmm(x[0, :8, :8], x[0, :8], x[0, :8].T, beta=-4.775, alpha=2.0315),
    "linear_with_bias": lambda x, w, b: torch.nn.functional.linear(x, w, b),
    "baddbmm": lambda x, w, b: torch.baddbmm(x[:, :, :8], x, x.transpose(1, 2)[:, :, :8],
                                             beta=0.5, alpha=1.5),
    "mean": lambda x, w, b: x.mean((0, 2)),
}


@pytest.mark.parametrize("name", sorted(BF16_ROUNDED_ONCE))
def test_bf16_epilogues_round_once_like_the_cpu(name):
    # an f32 product or sum with an epilogue (beta * self + alpha * product, a bias, / n)
    # is rounded to bf16 once, at the end, as on the CPU: bit for bit (a fused kernel once
    # stored the product in the bf16 output before its epilogue read it)
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 16, 33).bfloat16(), torch.randn(8, 33).bfloat16(), torch.randn(8).bfloat16()
    fn = BF16_ROUNDED_ONCE[name]
    assert torch.equal(no_fallback(lambda: fn(tpu(x), tpu(w), tpu(b))).cpu(), fn(x, w, b))


def test_layer_norm_cross_entropy_and_backward():
    x = torch.randn(4, 10, 32, requires_grad=True)
    ln = torch.nn.LayerNorm(32)
    target = torch.randint(0, 32, (40,))
    xt = x.detach().to("tpu").requires_grad_()
    lnt = torch.nn.LayerNorm(32).to("tpu")
    lnt.load_state_dict(ln.state_dict())

    def loss_of(x_, ln_, t_):
        return torch.nn.functional.cross_entropy(ln_(x_).reshape(40, 32) * 3, t_)

    loss = loss_of(x, ln, target)
    loss.backward()
    lt = no_fallback(lambda: loss_of(xt, lnt, tpu(target)))
    no_fallback(lambda: lt.backward())
    close(lt, loss.detach(), 1e-5, 1e-5)
    close(xt.grad, x.grad, 1e-4, 1e-5)
    close(lnt.weight.grad, ln.weight.grad, 1e-4, 1e-5)


def test_cache_hits_after_the_first_call():
    x = tpu(torch.randn(123, 7))
    torch.sin(x)  # compile
    before = torchtpu.cache_stats()
    for _ in range(5):
        torch.sin(x)
    after = torchtpu.cache_stats()
    assert after["misses"] == before["misses"]
    assert after["hits"] >= before["hits"] + 5


def test_arange_sizes_its_out_before_the_lookup():
    # at::arange hands arange.start_out an empty out= tensor; sized first (PyTorch's rule),
    # a repeated arange is one cache hit, not a miss and a meta kernel run every call
    for args in [(7,), (2, 9, 3), (0.5, 3.0, 0.25), (10, 0, -3), (-4, 4, 1.5)]:
        got, want = torch.arange(*args, device="tpu"), torch.arange(*args)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want), args
    torch.arange(29, device="tpu")
    before = torchtpu.cache_stats()
    for _ in range(4):
        torch.arange(29, device="tpu")
    after = torchtpu.cache_stats()
    assert after["misses"] == before["misses"]
    assert after["hits"] == before["hits"] + 4
    for bad, message in [((0, 5, 0), "step must be nonzero"),
                         ((5, 0, 1), "upper bound and lower bound inconsistent"),
                         ((0, float("inf")), "unsupported range")]:
        with pytest.raises(RuntimeError, match=message):
            torch.arange(*bad, device="tpu")
    assert torch.equal(torch.arange(3, device="tpu").cpu(), torch.arange(3))


def test_cases_the_graph_builders_reject_run_on_the_cpu():
    # ceil/floor of an integer tensor and an integer matmul have no tpu kernel: the lowering's
    # graph records the builder's error and the call runs through the CPU fallback (it used
    # to fail an internal assert), for a foreach op over such tensors too
    x, y = torch.tensor([[1, -2, 3], [4, 5, -6]]), torch.tensor([[1, 2], [3, 4], [5, 6]])
    assert torch.equal(torch.ceil(tpu(x)).cpu(), x)
    assert torch.equal(torch.floor(tpu(x)).cpu(), x)
    assert torch.equal(torch.mm(tpu(x), tpu(y)).cpu(), torch.mm(x, y))
    got = torch._foreach_ceil([tpu(x), tpu(y)])
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got, [x, y]))
    assert torch.equal((tpu(x) * 2).cpu(), x * 2)  # the device still works


def test_changing_scalars_do_not_recompile():
    x = tpu(torch.randn(50))
    x.mul(0.5)
    before = torchtpu.cache_stats()["misses"]
    for lr in (0.1, 0.01, 0.001):
        x.mul(lr)
    assert torchtpu.cache_stats()["misses"] == before


def test_scalars_zero_and_one_are_constants_with_ieee_semantics():
    # 0 and 1 are part of the signature and fold (add alpha=1 is a plain add), so each
    # compiles its own program while other values share one; inf and NaN must still
    # behave as on the CPU (0 * inf is NaN, addmm with beta=0 ignores NaN in its input)
    x = torch.tensor([1.0, -2.0, float("inf"), float("nan"), -0.0, 3.5])
    y = torch.tensor([float("inf"), 0.5, -1.0, 2.0, float("nan"), -0.0])
    xt, yt = tpu(x), tpu(y)
    cases = {
        "add": lambda a, b, s: torch.add(a, b, alpha=s),
        "sub": lambda a, b, s: torch.sub(a, b, alpha=s),
        "mul": lambda a, b, s: a * s,
        "div": lambda a, b, s: a / s if s else a / 2,
        "pow": lambda a, b, s: a.pow(s),
        "lerp": lambda a, b, s: torch.lerp(a, b, s),
        "addcmul": lambda a, b, s: torch.addcmul(a, a, b, value=s),
        "clamp": lambda a, b, s: torch.clamp(a, min=s),
        "rsub": lambda a, b, s: torch.rsub(a, b, alpha=s),
    }
    def run():
        for name, f in cases.items():
            for s in (0, 1, 0.0, 1.0, 2.5):
                close(f(xt, yt, s), f(x, y, s), 1e-6, 0)
        m = torch.tensor([[float("nan"), 1.0], [2.0, float("inf")]])
        a, b = torch.randn(2, 3), torch.randn(3, 2)
        for beta, alpha in ((0, 1), (1, 1), (0, 0), (1, 0.5)):
            torch.testing.assert_close(torch.addmm(tpu(m), tpu(a), tpu(b), beta=beta, alpha=alpha).cpu(),
                                       torch.addmm(m, a, b, beta=beta, alpha=alpha),
                                       rtol=1e-2, atol=1e-2, equal_nan=True)
    no_fallback(run)
    a, b = tpu(torch.randn(17, 3)), tpu(torch.randn(17, 3))  # a shape not seen before
    misses = lambda: torchtpu.cache_stats()["misses"]  # noqa: E731
    m0 = misses()
    a.add(b, alpha=2.0)
    a.add(b, alpha=3.0)  # a run-time value: the same program
    assert misses() == m0 + 1
    a.add(b, alpha=1.0)  # a constant: a program of its own, then cached
    a.add(b, alpha=1.0)
    assert misses() == m0 + 2


def test_shape_errors_are_pytorch_errors_and_device_keeps_working():
    a, b = tpu(torch.randn(3, 4)), tpu(torch.randn(5, 4))
    with pytest.raises(RuntimeError, match="size of tensor a"):
        a + b
    with pytest.raises(RuntimeError, match="cannot be multiplied|mat1 and mat2"):
        a @ b
    close(a + 1, a.cpu() + 1, 1e-6, 1e-6)


def test_out_of_range_index_raises_at_next_sync_naming_the_op():
    table = tpu(torch.randn(10, 4))
    bad = tpu(torch.tensor([1, 12]))
    r = torch.index_select(table, 0, bad)  # strict mode: queued, not raised yet
    with pytest.raises(IndexError, match="index_select"):
        torch.tpu.synchronize()
    del r
    good = torch.index_select(table, 0, tpu(torch.tensor([1, 2])))
    close(good, table.cpu()[[1, 2]], 0, 0)


def test_debug_mode_raises_at_the_op():
    code = (
        "import torch\n"
        "t = torch.randn(10, 4, device='tpu')\n"
        "try:\n"
        "    torch.index_select(t, 0, torch.tensor([12], device='tpu'))\n"
        "    print('NO ERROR')\n"
        "except IndexError as e:\n"
        "    print('RAISED', 'index_select' in str(e))\n"
        "print((t + 1).sum().item() == (t.cpu() + 1).sum().item() or 'close')\n"
    )
    env = dict(__import__("os").environ, TORCHTPU_EAGER="debug")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "RAISED True" in out.stdout, out.stdout + out.stderr


def test_cross_entropy_bad_target_is_index_error():
    logits = tpu(torch.randn(4, 3))
    with pytest.raises(IndexError):
        torch.nn.functional.cross_entropy(logits, tpu(torch.tensor([0, 1, 5, 2])))
        torch.tpu.synchronize()
    assert torch.nn.functional.cross_entropy(logits, tpu(torch.tensor([0, 1, 2, 2]))).item() > 0


def test_conjugate_views_copy_without_recursing():
    # _copy_from must not go through the conjugate fallback (which copies again): a crash
    # found by running all of op_db (torch.fft.hfft on tpu)
    c = torch.randn(6, dtype=torch.complex64)
    t = tpu(c)
    assert torch.equal(t.conj().cpu(), c.conj())
    assert torch.equal(t.conj().clone().cpu(), c.conj().resolve_conj())
    x = torch.randn(5)
    torch.testing.assert_close(torch.fft.hfft(tpu(x)).cpu(), torch.fft.hfft(x))


def test_copy_into_an_aliasing_view_of_another_dtype():
    # the copy converts through scratch memory, which the copy task must allocate
    b = torch.randn(8).bfloat16()
    v = tpu(b).view(torch.int16)
    v.copy_(v.view(torch.bfloat16))
    torch.tpu.synchronize()
    assert torch.equal(v.cpu(), b.view(torch.int16).clone().copy_(b))
