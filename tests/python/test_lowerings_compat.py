# The lowerings of torchtpu/csrc/lower_compat.cpp (ops that model code reaches: isin for
# generate(), softplus, logsigmoid, clamp with tensor bounds, PReLU, prod) run natively and match
# the CPU, forward and backward, in float32 and bfloat16.
import pytest
import torch
import torch.nn.functional as F

from conftest import no_fallback


def _grad_check(fn, *inputs, dtype=torch.float32, tol=1e-5):
    cpu = [x.to(dtype).detach().requires_grad_(x.is_floating_point()) for x in inputs]
    tpu = [x.to(dtype).to("tpu").detach().requires_grad_(x.is_floating_point()) for x in inputs]
    ref = fn(*cpu)
    ref.backward(torch.ones_like(ref))

    def run():
        out = fn(*tpu)
        out.backward(torch.ones_like(out))
        return out

    out = no_fallback(run)
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out.cpu(), ref.detach(), rtol=tol, atol=tol, equal_nan=True)
    for a, b in zip(tpu, cpu):
        if b.grad is not None:
            torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=tol, atol=tol, equal_nan=True)


X = torch.tensor([-30.0, -3.0, -0.5, 0.0, 0.25, 2.0, 15.0, 40.0])


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_softplus(dtype, tol):
    _grad_check(F.softplus, X, dtype=dtype, tol=tol)
    _grad_check(lambda x: F.softplus(x, beta=2.0, threshold=5.0), X, dtype=dtype, tol=tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_logsigmoid(dtype, tol):
    _grad_check(F.logsigmoid, X, dtype=dtype, tol=tol)


def test_logsigmoid_buffer_matches_cpu():
    out, buf = no_fallback(lambda: torch.ops.aten.log_sigmoid_forward(X.to("tpu")))
    ref_out, ref_buf = torch.ops.aten.log_sigmoid_forward(X)
    torch.testing.assert_close(buf.cpu(), ref_buf)
    torch.testing.assert_close(out.cpu(), ref_out)


def test_clamp_with_tensor_bounds():
    lo = torch.tensor([0.0, -1.0, 0.0, float("nan"), 0.0, 3.0, 0.0, 0.0])
    _grad_check(lambda x, b: x.clamp(min=b), X, lo)
    _grad_check(lambda x, b: x.clamp(max=b), X, lo)
    _grad_check(lambda x, b: torch.clamp_min(x, b), X.view(2, 4), lo[:4])  # broadcast
    _grad_check(lambda x, b: torch.clamp_max(x, b), X, lo)
    _grad_check(lambda x: x.clamp(min=float("nan")), X)  # a NaN bound gives NaN
    _grad_check(lambda x, a, b: x.clamp(a, b), X, lo, lo + 1)


def test_prelu():
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    w = torch.tensor([0.25, -0.5, 1.5])
    _grad_check(F.prelu, x, w)
    _grad_check(F.prelu, x, torch.tensor([0.1]))


@pytest.mark.parametrize("invert", [False, True])
def test_isin(invert):
    e = torch.tensor([[1, 5, 7], [0, 2, 5]])
    t = torch.tensor([5, 0, 9])
    out = no_fallback(lambda: torch.isin(e.to("tpu"), t.to("tpu"), invert=invert))
    assert torch.equal(out.cpu(), torch.isin(e, t, invert=invert))
    f = torch.tensor([0.5, 1.0, float("nan")])
    out = no_fallback(lambda: torch.isin(f.to("tpu"), torch.tensor([1.0, float("nan")], device="tpu")))
    assert out.cpu().tolist() == [False, True, False]  # NaN is never equal
    empty = torch.isin(e.to("tpu"), torch.tensor([], dtype=torch.long, device="tpu"), invert=invert)
    assert empty.cpu().all().item() is invert


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_prod_over_all_elements(dtype):
    x = torch.tensor([[1.5, -2.0, 0.5], [3.0, 1.25, -1.0]]).to(dtype)
    if dtype == torch.int64:
        x = torch.tensor([[2, -3, 1], [4, 1, -1]])
    out = no_fallback(lambda: x.to("tpu").prod())
    assert out.dtype == x.prod().dtype
    torch.testing.assert_close(out.cpu(), x.prod())
    out = no_fallback(lambda: x.to("tpu").prod(dtype=torch.float32))
    torch.testing.assert_close(out.cpu(), x.prod(dtype=torch.float32))
