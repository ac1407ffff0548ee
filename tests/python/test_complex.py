"""Complex tensors natively (torchtpu/csrc/lower_complex.cpp, lower_complex_math.cpp):
complex64 / complex128 as (real, imaginary) pairs in the graph, checked against the CPU for
the arithmetic, the elementary functions (branch cuts, infinities and large parts
included), products, comparisons, matmuls, random draws, data movement, the views
(view_as_real / view_as_complex, real / imag), copies, lazy conjugation, and the rotary
embedding of LLaMA-style models (view_as_complex, polar, a complex product, view_as_real)
in strict, fused and compiled mode, forward and backward, with no CPU fallback.

Tolerances: complex products and quotients are a few real operations each, in the
component dtype; the CPU's vectorized kernels order them differently (and may fuse a
multiply-add), so results agree to a few ulps: rtol 1e-5 (complex64), 1e-12 (complex128).
The elementary functions compose a few such operations with the engine's real exp, log,
sin, cos and atan2 (each within an ulp or two), so the same tolerances hold.
"""
import math

import pytest
import torch

import torchtpu
from conftest import no_fallback, tpu

DTYPES = [torch.complex64, torch.complex128]
TOL = {torch.complex64: dict(rtol=1e-5, atol=1e-6), torch.float32: dict(rtol=1e-5, atol=1e-6),
       torch.complex128: dict(rtol=1e-12, atol=1e-13), torch.float64: dict(rtol=1e-12, atol=1e-13),
       torch.bool: dict(rtol=0, atol=0)}


def cplx(shape, dtype, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    return torch.complex(torch.randn(shape, generator=g, dtype=real),
                         torch.randn(shape, generator=g, dtype=real)) * scale


def check(fn, *args):
    """fn on the CPU and natively on tpu: the same dtype, shape and values."""
    want = fn(*args)
    got = no_fallback(lambda: fn(*[tpu(a) if isinstance(a, torch.Tensor) else a for a in args]))
    assert got.device.type == "tpu" and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **TOL[want.dtype])


BINARY = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "sub": lambda a, b: a - b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=-0.5),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, dtype):
    check(BINARY[name], cplx((4, 5), dtype, 1), cplx((4, 5), dtype, 2))
    check(BINARY[name], cplx((3, 1, 5), dtype, 3), cplx((4, 1), dtype, 4))  # broadcasting


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_real_operand(name):
    z, x = cplx((4, 5), torch.complex64, 1), torch.randn(4, 5)
    check(BINARY[name], z, x)
    check(BINARY[name], x, z)
    check(BINARY[name], z, torch.arange(1, 6))  # an integer tensor promoted to complex


def test_python_scalars():
    z = cplx((6,), torch.complex64, 5)
    check(lambda a: a * 2j, z)
    check(lambda a: a + (1 - 3j), z)
    check(lambda a: a * 1.5, z)
    check(lambda a: 2 / a, z)


def test_division_edge_cases():
    """c10::complex's scaled division: huge and tiny divisors, and zero divisors (the parts
    divided by +-0: infinities and NaNs where the CPU has them)."""
    a = torch.tensor([1 + 1j, 1e30 + 1e30j, 1 - 2j, 1 + 1j, 0j, 3 + 0j], dtype=torch.complex64)
    b = torch.tensor([1e-30 + 1e-30j, 1e30 - 1e30j, 0j, 0 + 2j, 0j, 0j], dtype=torch.complex64)
    check(torch.div, a, b)
    check(torch.reciprocal, b)


UNARY = {
    "neg": torch.neg,
    "conj_physical": torch.conj_physical,
    "reciprocal": torch.reciprocal,
    "exp": torch.exp,
    "abs": torch.abs,
    "angle": torch.angle,
    "sgn": torch.sgn,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype):
    z = cplx((3, 7), dtype, 6, scale=2.0)
    z[0, 0] = 0  # sgn and abs of 0, angle of 0
    check(UNARY[name], z)


def test_abs_does_not_overflow():
    """|z| as hypot: parts near the float32 maximum, infinities (inf even beside a NaN)."""
    z = torch.tensor([3e38 + 3e38j, 1e-40 + 1e-40j, complex(math.inf, math.nan),
                      complex(math.nan, 1.0), -4 + 3j], dtype=torch.complex64)
    check(torch.abs, z)


def test_polar_and_complex():
    r, t = torch.rand(5, 3) + 0.1, torch.randn(5, 3)
    check(torch.polar, r, t)
    check(torch.complex, r, t)
    check(torch.polar, r.double(), t.double())


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions(dtype):
    z = cplx((4, 6, 5), dtype, 7)
    check(lambda a: a.sum(), z)
    check(lambda a: a.sum(1), z)
    check(lambda a: a.sum((0, -1), keepdim=True), z)
    check(lambda a: a.mean(), z)
    check(lambda a: a.mean(-1), z)


def test_fill_and_zeros():
    check(lambda a: a.fill_(2.5), cplx((3, 4), torch.complex64))
    got = no_fallback(lambda: torch.zeros(3, 2, dtype=torch.complex64, device="tpu"))
    assert got.dtype == torch.complex64 and torch.equal(got.cpu(), torch.zeros(3, 2, dtype=torch.complex64))


def test_views_alias_the_storage():
    """view_as_real / view_as_complex, real and imag are views: writes through either side
    reach the other, as on the CPU."""
    def run(device):
        x = torch.zeros(2, 3, 2, device=device)
        z = torch.view_as_complex(x)
        z[0, 1] = 1 + 2j
        torch.view_as_real(z)[1, 2, 1] = 7
        z.imag[1, 0] = -3
        z.real.add_(0.5)
        return x
    want = run("cpu")
    got = no_fallback(lambda: run("tpu"))
    assert torch.equal(got.cpu(), want)


def test_copies():
    z = cplx((4, 3), torch.complex64, 8)
    on = no_fallback(lambda: z.to("tpu"))  # host to device
    assert torch.equal(on.cpu(), z)
    check(lambda a: a.to(torch.complex128), z)
    check(lambda a: a.t().contiguous(), z)
    check(lambda a: a.to(torch.complex64), torch.randn(4, 3))  # real -> complex: (x, 0)
    check(lambda a: a[:, 1:].clone(), z)


def test_complex_to_real_copy_warns_as_the_cpu_does():
    z = tpu(cplx((3,), torch.complex64, 9))
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        r = z.to(torch.float32)
    assert torch.equal(r.cpu(), z.cpu().real)


def test_lazy_conjugation():
    """torch.conj is a lazy view (the conjugate bit): reading it, copying it, and a product
    with it give the conjugate's values, natively."""
    z, w = cplx((4, 5), torch.complex64, 10), cplx((4, 5), torch.complex64, 11)
    check(lambda a, b: a.conj() * b, z, w)
    check(lambda a: a.conj().clone(), z)
    check(lambda a: a.conj().imag.clone(), z)  # the negative bit of a conjugate's imag
    check(lambda a: torch.view_as_real(a.conj().resolve_conj()), z)


def test_unsupported_ops_still_run_correctly():
    """A complex op without a lowering (logcumsumexp here) runs on the CPU fallback with the
    CPU's result, and so does a movement op with a real data operand (promoted on the CPU)."""
    z = cplx((3, 4), torch.complex64, 12)
    torch.testing.assert_close(torch.logcumsumexp(tpu(z), 1).cpu(), torch.logcumsumexp(z, 1))
    m, x = torch.rand(3, 4) > 0.5, torch.randn(3, 4)
    torch.testing.assert_close(torch.where(tpu(m), tpu(z), tpu(x)).cpu(), torch.where(m, z, x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(dtype, highest):
    """(A + Bi)(C + Di) as one real product [A | B] [[C, D], [-D, C]] (at HIGHEST here: the
    default precision is one bf16 pass, as on the MXU)."""
    check(torch.mm, cplx((5, 7), dtype, 15), cplx((7, 3), dtype, 16))
    check(torch.bmm, cplx((2, 5, 7), dtype, 17), cplx((2, 7, 3), dtype, 18))
    check(lambda a, b: a @ b, cplx((2, 4, 6), dtype, 19), cplx((6, 2), dtype, 20))
    check(lambda a, b: torch.einsum("bci,coi->boi", a, b), cplx((2, 3, 5), dtype, 21),
          cplx((3, 4, 5), dtype, 22))
    check(torch.dot, cplx((9,), dtype, 23), cplx((9,), dtype, 24))
    check(torch.vdot, cplx((9,), dtype, 23), cplx((9,), dtype, 24))  # conj(a) b
    check(lambda a, b: torch.vdot(a, b, out=torch.empty((), dtype=dtype, device=a.device)),
          cplx((9,), dtype, 25), cplx((9,), dtype, 26))


MOVEMENTS = {
    "roll": lambda z: torch.roll(z, (1, -2), (0, 1)),
    "flip": lambda z: torch.flip(z, (1,)),
    "repeat": lambda z: z.repeat(2, 1, 3),
    "cat": lambda z: torch.cat([z, z * 2], dim=-1),
    "stack": lambda z: torch.stack([z, -z]),
    "index_select": lambda z: torch.index_select(z, 1, torch.tensor([3, 0, 3], device=z.device)),
    "gather": lambda z: torch.gather(z, 1, torch.tensor([[0, 2], [1, 1], [3, 0]], device=z.device)),
    "where": lambda z: torch.where(z.real > 0, z, -z),
    "tril": lambda z: torch.tril(z),
    "triu": lambda z: torch.triu(z, 1),
    "pad": lambda z: torch.nn.functional.pad(z, (1, 2)),
    "narrow_copy": lambda z: z.narrow_copy(1, 1, 2),
}


@pytest.mark.parametrize("name", sorted(MOVEMENTS))
def test_data_movement(name):
    """Ops that only move elements run their real lowerings on each part."""
    check(MOVEMENTS[name], cplx((3, 4), torch.complex64, 23))


def freqs_cis(dim, end, device):
    freqs = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=device).float() / dim))
    return torch.polar(torch.ones(end, dim // 2, device=device),
                       torch.outer(torch.arange(end, device=device).float(), freqs))


def rotary(x, freqs):
    """LLaMA's apply_rotary_emb: (B, T, H, D) rotated pairwise by the position's angles."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs.view(1, xc.shape[1], 1, xc.shape[-1])).flatten(3).type_as(x)


def rotary_loss(x, w, freqs):
    return (rotary(x @ w, freqs) ** 2).mean()


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
def test_rotary_embedding_trains_natively(mode):
    """Forward and backward of a rotary embedding on tpu equal the CPU's, with nothing on
    the fallback (the backward multiplies by the conjugate of the angles: a lazy view)."""
    torch.manual_seed(0)
    x, w = torch.randn(2, 8, 4, 16), torch.randn(16, 16) / 4
    want_w = w.clone().requires_grad_()
    want = rotary_loss(x, want_w, freqs_cis(16, 8, "cpu"))
    want.backward()
    fn = torch.compile(rotary_loss, backend="tpu") if mode == "compiled" else rotary_loss
    precision = torchtpu.get_matmul_precision()
    torchtpu.set_matmul_precision("highest")
    torchtpu.set_eager_mode("fused" if mode == "fused" else "strict")
    try:
        got_w = tpu(w).requires_grad_()
        freqs = freqs_cis(16, 8, "tpu")

        def step():
            loss = fn(tpu(x), got_w, freqs)
            loss.backward()
            return loss
        if mode == "compiled":
            step()  # the first call captures; the second replays the compiled plans
            got_w.grad = None
        got = no_fallback(step)
    finally:
        torchtpu.set_eager_mode("strict")
        torchtpu.set_matmul_precision(precision)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_w.grad.cpu(), want_w.grad, rtol=1e-4, atol=1e-6)


def test_complex_scalars_in_fused_mode():
    """Python complex numbers are run-time (real, imaginary) pairs, in fused mode too."""
    z = cplx((5, 3), torch.complex64, 14)
    torchtpu.set_eager_mode("fused")
    try:
        check(lambda a: (a * 2j + (1 - 1j)) / (3 + 4j), z)
        check(lambda a: torch.add(a, a, alpha=0.5j), z)
    finally:
        torchtpu.set_eager_mode("strict")


def test_complex_fill_of_a_real_tensor_is_the_cpus_error():
    from conftest import same_error
    same_error(lambda x: x.fill_(1j), torch.zeros(3))


COMPLEX_PROGRAM = """
import torch, torchtpu
z = torch.view_as_complex(torch.arange(12, dtype=torch.float32).reshape(3, 2, 2)).to("tpu")
w = (z * (2 - 1j)).t() * 1.5  # a complex result, and one laid out with strides
emit({"w": torch.view_as_real(w.cpu()).tolist(), "dtype": str(w.dtype),
      "stride": list(w.stride()), "stats": torchtpu.cache_stats()})
"""


def test_complex_results_load_from_the_disk_cache(tmp_path):
    """A second process builds complex results from the programs on disk: the disk entry
    records which outputs are complex pairs."""
    from conftest import run_json
    env = {"TORCHTPU_CACHE_DIR": str(tmp_path / "cache")}
    cold = run_json(COMPLEX_PROGRAM, env)
    warm = run_json(COMPLEX_PROGRAM, env)
    z = torch.view_as_complex(torch.arange(12, dtype=torch.float32).reshape(3, 2, 2))
    want = (z * (2 - 1j)).t() * 1.5
    assert warm["stats"]["disk_hits"] > 0 and warm["stats"]["disk_errors"] == 0, warm["stats"]
    for run in (cold, warm):
        assert run["dtype"] == "torch.complex64"
        assert run["w"] == torch.view_as_real(want).tolist()


MATH = {
    "log": torch.log,
    "log2": torch.log2,
    "log10": torch.log10,
    "log1p": torch.log1p,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "sin": torch.sin,
    "cos": torch.cos,
    "tan": torch.tan,
    "sinc": torch.sinc,
    "sinh": torch.sinh,
    "cosh": torch.cosh,
    "tanh": torch.tanh,
    "asin": torch.asin,
    "acos": torch.acos,
    "atan": torch.atan,
    "asinh": torch.asinh,
    "acosh": torch.acosh,
    "atanh": torch.atanh,
    "isnan": torch.isnan,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(MATH))
def test_math(name, dtype):
    z = cplx((4, 6), dtype, 24, scale=1.5)
    z[0, :4] = torch.tensor([0, -2 + 0j, -2 - 0j, complex(math.nan, 1)], dtype=dtype)  # branch cut, NaN
    z[1, 0] = 1e-9 + 1e-9j  # sinh of a tiny imaginary part
    check(MATH[name], z)


# Where the textbook formulas overflow, cancel or pick the wrong side of a cut: parts past
# e^88 (exp, sinh, cosh of complex64), past the square root of the largest float (the
# inverse functions' squares), tanh's real part past 44, values beside the branch points
# +-1 and +-i, on the cuts with either sign of zero, infinities and NaNs.
EXTREMES = [
    1, -1, 1j, -1j, 2, -2, 0.5, -0.5, 2j, -2j, 1e-9 + 1e-9j, 1e-30j, 1 + 1e-7j, 1 - 1e-7j,
    -1 + 1e-7j, 1e-7 + 1j, complex(3, -0.0), complex(-3, -0.0), complex(0.5, -0.0),
    complex(-0.5, -0.0), complex(0, 3), complex(-0.0, -3), 50 + 1j, -50 + 1j, 100 + 0.5j,
    1 + 50j, 1 - 100j, 1e10 + 1e10j, -1e10 + 1e-10j, 1e20 + 1j, 1 + 1e20j, 1e30 - 1e30j,
    89 + 0.5j, -89.5 + 1j, 0.99 + 0.01j, 1.01 + 0.01j, complex(math.pi / 2, 0),
    complex(0, math.pi / 2), 20 + 20j, complex(math.nan, 1), complex(1, math.nan),
    complex(math.inf, 1), complex(1, math.inf), complex(-math.inf, 2), complex(-0.0, 0),
    complex(-0.0, -0.0),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(set(MATH) - {"isnan"}) + ["exp"])
def test_math_extremes(name, dtype):
    fn = torch.exp if name == "exp" else MATH[name]
    check(fn, torch.tensor(EXTREMES, dtype=dtype))


GRADIENTS = {**{k: v for k, v in MATH.items() if k != "isnan"}, "sigmoid": torch.sigmoid,
             "exp": torch.exp, "prod": lambda a: a.prod(), "prod_dim": lambda a: a.prod(1),
             "cumprod": lambda a: a.cumprod(1)}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradients(name):
    """Backward of the elementary functions and products natively (autograd's complex
    formulas: conjugates of the derivatives, tanh's and sigmoid's backward kernels)."""
    fn = GRADIENTS[name]
    z = cplx((3, 4), torch.complex64, 29, scale=0.8)
    a = z.clone().requires_grad_()
    fn(a).abs().sum().backward()

    def run():
        b = tpu(z).requires_grad_()
        fn(b).abs().sum().backward()
        return b.grad
    torch.testing.assert_close(no_fallback(run).cpu(), a.grad, **TOL[torch.complex64])


@pytest.mark.parametrize("dtype", DTYPES)
def test_products(dtype):
    """prod and cumprod: trees of complex products (no REDUCE or SCAN kind multiplies
    complex numbers); odd lengths pad with 1, an empty product is 1."""
    z = cplx((4, 7, 5), dtype, 28, scale=0.9)
    check(lambda a: a.prod(), z)
    check(lambda a: a.prod(1), z)
    check(lambda a: a.prod(-1, keepdim=True), z)
    check(lambda a: a[:, :0].prod(1), z)
    check(lambda a: a[1, 2, 3].prod(), z)
    check(lambda a: a[1, 2, 3].prod(0), z)  # a 0-d tensor along "dim 0"
    check(lambda a: a[1, 2, 3].prod(-1, keepdim=True), z)
    for dim in (0, 1, -1):
        check(lambda a: a.cumprod(dim), z)
    check(lambda a: a.flatten().cumprod(0), z)  # 140 values: 8 doubling steps
    check(lambda a: a[0, 0, 0].cumprod(0), z)
    check(torch.trace, z[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_random_draws(dtype):
    """randn and rand of complex dtypes natively: randn's parts each have variance 1/2 (so
    the values have variance 1) as on the CPU, rand's parts are uniform in [0, 1); a
    complex draw takes two numbers per value from the generator, so the next draw's
    numbers are new (a generator advanced by one number per value would hand half of them
    out again)."""
    n = 100000
    torch.manual_seed(0)
    z, w = no_fallback(lambda: (torch.randn(n, dtype=dtype, device="tpu"),
                                torch.randn(n, dtype=dtype, device="tpu")))
    u = no_fallback(lambda: torch.rand(n, dtype=dtype, device="tpu"))
    assert z.dtype == u.dtype == dtype
    zr, wr, ur = (torch.view_as_real(t.cpu()) for t in (z, w, u))
    for part in (0, 1):
        assert abs(zr[:, part].var().item() - 0.5) < 0.02
        assert abs(zr[:, part].mean().item()) < 0.02
        assert 0 <= ur[:, part].min().item() and ur[:, part].max().item() < 1
        assert abs(ur[:, part].mean().item() - 0.5) < 0.01
    # equal float32 values by chance: under 1%; handed out twice: half of them
    assert torch.isin(wr.flatten(), zr.flatten()).sum().item() < 0.02 * n
    m = no_fallback(lambda: torch.empty(n, dtype=dtype, device="tpu").normal_(2.0, 3.0)).cpu()
    assert abs(m.real.mean().item() - 2) < 0.05 and abs(m.imag.mean().item() - 2) < 0.05
    assert abs(m.var().item() - 9) < 0.3


def test_comparisons():
    z = cplx((3, 4), torch.complex64, 25)
    w = z.clone()
    w[0, 1] += 1j
    check(lambda a, b: a == b, z, w)
    check(lambda a, b: a != b, z, w)
    check(lambda a: a == (z[1, 2].item()), z)  # a Python complex number
    check(lambda a, b: a == b, z, z.real)  # a real operand as (x, 0)


def test_pow_sigmoid_norm_cumsum():
    z, w = cplx((3, 5), torch.complex64, 26), cplx((3, 5), torch.complex64, 27)
    z[0, 0] = 0
    check(lambda a: a ** 2, z)
    check(lambda a: a ** torch.arange(5.0, device=a.device), z)  # 0 ** 0 is NaN, as cpow
    check(lambda a: a ** 0.5, z)
    check(lambda a: a ** (1 + 1j), z)
    check(lambda a: a ** torch.zeros(5, dtype=torch.complex64, device=a.device), z)
    check(lambda a, b: a ** b, z, w)
    check(lambda a: 2 ** a, z)
    check(torch.sigmoid, z)
    check(torch.linalg.vector_norm, z)
    check(lambda a: torch.linalg.vector_norm(a, 1, dim=1, keepdim=True), z)
    check(lambda a: torch.linalg.norm(a), z)
    check(lambda a: torch.cumsum(a, 1), z)
