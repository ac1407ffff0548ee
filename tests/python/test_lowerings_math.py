"""The lowerings of torchtpu/csrc/lower_math.cpp (tan, atan, asin, acos, sinh, cosh, asinh,
acosh, atanh, sinc, exp2, log10, logaddexp(2), signbit, copysign, nan_to_num, frac,
fmax/fmin, heaviside, hypot, round(decimals=)) run natively and match the CPU over their
domains, at their edges (0, +-1, large magnitudes, infinities, NaN, -0.0) and in their
gradients (autograd's formulas call these and other native ops).

Tolerances: these are compositions of a few float32 operations (the TPU's vector unit is
32-bit), each within an ulp or two of libm, so float32 agrees with the CPU within rtol 4e-6
(about 32 ulps; most are within 4); float64 within 1e-12; bfloat16 within one bfloat16
rounding (rtol 8e-3) since the math runs in float32 and rounds once.
"""
import pytest
import torch

from conftest import bits, compare_with_cpu, no_fallback, tpu

GEN = torch.Generator().manual_seed(0)
EDGES = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30, 1e-7,
         0.5, -0.5, 30.0, -30.0, 88.5, -88.5, 1e20, -1e20]


def inputs(lo, hi, edges=EDGES, n=200):
    return torch.cat([torch.rand(n, generator=GEN) * (hi - lo) + lo, torch.tensor(edges)])


UNARY = {  # name: (fn, inputs over its domain)
    "tan": (torch.tan, inputs(-1.5, 1.5)),
    "atan": (torch.atan, inputs(-50, 50)),
    "asin": (torch.asin, inputs(-1, 1, EDGES + [0.9999999, -0.9999999, 1.5])),
    "acos": (torch.acos, inputs(-1, 1, EDGES + [0.9999999, -0.9999999, 1.5])),
    "sinh": (torch.sinh, inputs(-20, 20, EDGES + [89.2, -89.2, 1e-3])),
    "cosh": (torch.cosh, inputs(-20, 20, EDGES + [89.2, -89.2, 1e-3])),
    "asinh": (torch.asinh, inputs(-100, 100, EDGES + [1e-3, 3e38])),
    "acosh": (torch.acosh, inputs(1, 100, EDGES + [1.0000001, 3e38, 0.5])),
    "atanh": (torch.atanh, inputs(-1, 1, EDGES + [0.9999999, -0.9999999, 1e-3])),
    "sinc": (torch.sinc, inputs(-5, 5, EDGES + [2.0, -3.0])),  # its gradient cancels: rtol 2e-5
    "exp2": (torch.exp2, inputs(-60, 60, EDGES + [127.5, -149.0, 128.0])),
    "log10": (torch.log10, inputs(0, 1000, EDGES + [1e-38, 10.0, 1000.0])),
    "frac": (torch.frac, inputs(-100, 100, EDGES + [2.5, -2.5, 1e7 + 0.5])),
    "signbit": (torch.signbit, inputs(-1, 1)),
    "nan_to_num": (torch.nan_to_num, inputs(-1, 1)),
    "nan_to_num_given": (lambda x: torch.nan_to_num(x, nan=2.0, posinf=9.0, neginf=-9.0), inputs(-1, 1)),
    "round_2": (lambda x: torch.round(x, decimals=2), inputs(-10, 10, EDGES + [0.125, 0.135, -2.675])),
    "round_-1": (lambda x: torch.round(x, decimals=-1), inputs(-100, 100, EDGES + [25.0, 35.0, -15.0])),
}
GRADLESS = {"signbit", "frac"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32(name):
    fn, x = UNARY[name]
    compare_with_cpu(fn, x, rtol=2e-5 if name == "sinc" else 4e-6, atol=1e-30, grad=name not in GRADLESS)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float64_and_bfloat16(name):
    fn, x = UNARY[name]
    compare_with_cpu(fn, x.double(), rtol=1e-12, atol=1e-300, grad=False)
    compare_with_cpu(fn, x.bfloat16(), rtol=8e-3, atol=1e-30, grad=False)


def test_integer_inputs_promote_to_float():
    x = torch.arange(-3, 4)
    for fn in (torch.atan, torch.sinh, torch.asinh, torch.exp2, torch.sinc, torch.signbit):
        compare_with_cpu(fn, x, rtol=4e-6, atol=1e-7)
    compare_with_cpu(torch.nan_to_num, x)  # integers pass through


def test_signed_zero_and_nan_sign():
    x = torch.tensor([0.0, -0.0, float("nan"), -float("nan"), -1.0])
    assert no_fallback(lambda: torch.signbit(tpu(x))).cpu().tolist() == torch.signbit(x).tolist()
    for fn in (torch.sinh, torch.asinh, torch.atanh, torch.tan, torch.atan):
        assert torch.equal(bits(no_fallback(lambda: fn(tpu(x[:2])))), bits(fn(x[:2]))), fn


def test_nan_to_num_uses_the_dtype_limits():
    x = torch.tensor([float("inf"), -float("inf"), float("nan"), 1.5])
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        got = no_fallback(lambda: torch.nan_to_num(tpu(x.to(dtype))))
        assert torch.equal(got.cpu(), torch.nan_to_num(x.to(dtype))), dtype


PAIRS = torch.tensor([[float("nan"), 1.0], [1.0, float("nan")], [float("inf"), float("nan")],
                      [float("inf"), float("inf")], [-float("inf"), -float("inf")], [float("inf"), -float("inf")],
                      [0.0, -0.0], [-0.0, 0.0], [0.0, 0.0], [3.0, 4.0], [1e30, 1e30], [1e-30, 1e-30],
                      [-2.0, 5.0], [100.0, -100.0], [1e-45, 0.0]])
BINARY = {
    "logaddexp": torch.logaddexp,
    "logaddexp2": torch.logaddexp2,
    "copysign": torch.copysign,
    "fmax": torch.fmax,
    "fmin": torch.fmin,
    "hypot": torch.hypot,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name):
    fn = BINARY[name]
    a, b = torch.randn(2, 64, generator=GEN) * 20
    for x, y in ((PAIRS[:, 0], PAIRS[:, 1]), (a, b)):
        compare_with_cpu(fn, x, y, rtol=4e-6, atol=1e-37)
        compare_with_cpu(fn, x.double(), y.double(), rtol=1e-12, atol=1e-300, grad=False)
    compare_with_cpu(fn, a.view(8, 8), b[:8], rtol=4e-6, atol=1e-37)  # broadcast
    compare_with_cpu(fn, a.bfloat16(), b.bfloat16(), rtol=8e-3, atol=1e-30, grad=False)


def test_heaviside():
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, float("nan"), float("inf")])
    compare_with_cpu(torch.heaviside, x, torch.full((6,), 0.25), grad=False)
    compare_with_cpu(torch.heaviside, torch.tensor([-2, 0, 5]), torch.tensor([7]), grad=False)


def test_fmax_fmin_integers():
    a, b = torch.tensor([1, -5, 7]), torch.tensor([3, -9, 7])
    compare_with_cpu(torch.fmax, a, b)
    compare_with_cpu(torch.fmin, a, b)


def test_copysign_of_scalars_and_integers():
    compare_with_cpu(lambda x: torch.copysign(x, -1.0), torch.tensor([1.0, -2.0, 0.0]))
    compare_with_cpu(torch.copysign, torch.tensor([1, -2, 3]), torch.tensor([-1.0, 0.0, -0.0]))


def test_inplace_forms():
    def fn(x):
        y = x * 1.0
        y.sinh_().atan_().exp2_()
        return y.frac_() if not y.requires_grad else y
    compare_with_cpu(fn, inputs(-2, 2, []), rtol=4e-6, atol=1e-7)
    compare_with_cpu(fn, inputs(-2, 2, []), rtol=4e-6, atol=1e-7, grad=False)


def test_erfinv():
    y = inputs(-1, 1, [0.0, -0.0, 1.0, -1.0, 1.5, -2.0, float("nan"), 0.9999999, -0.9999999, 1e-30,
                       0.5, 0.99, 0.999999, -1e-7])
    # the gradient is exp(erfinv(y)^2) sqrt(pi) / 2: an ulp in erfinv(y) ~ 3 is 2e-5 in it
    compare_with_cpu(torch.erfinv, y, rtol=2e-5, atol=1e-30)
    compare_with_cpu(torch.erfinv, y, rtol=4e-6, atol=1e-30, grad=False)
    # near +-1 erfinv is ill-conditioned (erf' ~ 1e-6 at 3.7): both refine with Newton steps
    # on erf, whose last-bit error becomes 1e-11 relative there
    compare_with_cpu(torch.erfinv, y.double(), rtol=1e-10, atol=1e-300, grad=False)
    compare_with_cpu(torch.erfinv, y.bfloat16(), rtol=8e-3, atol=1e-30, grad=False)


def test_trunc_normal_init_runs_on_the_device():
    # nn.init.trunc_normal_ (ViT and friends) draws uniforms and maps them through erfinv_
    w = torch.empty(64, 64, device="tpu")
    no_fallback(lambda: torch.nn.init.trunc_normal_(w, std=0.02, a=-0.04, b=0.04))
    assert w.abs().max().item() <= 0.04 and 0.01 < w.std().item() < 0.02
