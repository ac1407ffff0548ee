"""Ops whose result shape depends on the values, run natively with one synchronizing read of a
count (dynamic_shape_ops.cpp): torch.nonzero (and what is built on it: argwhere,
torch.where(cond), nonzero(as_tuple=True)), torch.masked_select, boolean-mask indexing
x[mask] and x[mask] = values, and their gradients; torch.unique and unique_consecutive
(inverse, counts; unique_ops.cpp, whose dim= cases test_unique_dim.py covers),
torch.bincount, torch.repeat_interleave with a tensor of repeats. Each is compared with PyTorch on CPU on
the same inputs and checked not to use the CPU fallback; moving values is exact, so results
match bit for bit. Printing a tpu tensor (PyTorch's formatter calls masked_select) no longer
falls back either.
"""
import pytest
import torch

import torchtpu

from conftest import compare_with_cpu, no_fallback, tpu

X = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("x", [
    X, X > 0, (X * 3).to(torch.int32), X.to(torch.bfloat16), X[:, ::2], X.t(),
    torch.randn(2, 3, 4) > 0, torch.tensor(3.0), torch.tensor(0.0), torch.zeros(0, 3),
    torch.zeros(4, 5), torch.ones(7, dtype=torch.bool),
], ids=["f32", "bool", "int32", "bf16", "strided", "transposed", "3d", "scalar", "scalar_zero",
        "empty", "all_false", "all_true"])
def test_nonzero(x):
    got = no_fallback(lambda: torch.nonzero(tpu(x)))
    assert got.dtype == torch.int64 and torch.equal(got.cpu(), torch.nonzero(x))


def test_nonzero_built_ons():
    t = tpu(X)
    for fn in [torch.argwhere, lambda v: torch.where(v > 0), lambda v: torch.nonzero(v > 0, as_tuple=True),
               lambda v: (v > 0).nonzero()]:
        got, want = no_fallback(lambda: fn(t)), fn(X)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want))


@pytest.mark.parametrize("shapes", [((5, 6), (5, 6)), ((5, 6), (6,)), ((1, 6), (5, 1)), ((0, 6), (0, 6))])
def test_masked_select(shapes):
    seeded = torch.Generator().manual_seed(1)
    x = torch.randn(shapes[0], generator=seeded)
    mask = torch.randn(shapes[1], generator=seeded) > 0
    # values move exactly; a broadcast x's gradient is an f32 sum in another order
    # (an empty x's gradient is masked_scatter_ on empty tensors: the CPU fallback)
    compare_with_cpu(torch.masked_select, x, mask, rtol=1e-5, atol=1e-5, grad=x.numel() > 0)


def test_boolean_mask_indexing():
    m_rows = torch.tensor([True, False, True, True, False])
    m_cols = torch.tensor([False, True, True, False, True, True])
    cases = [
        lambda x: x[x > 0],
        lambda x: x[tpu(m_rows) if x.device.type == "tpu" else m_rows],
        lambda x: x[m_rows],  # a CPU mask indexing a tpu tensor, as on CUDA
        lambda x: x[:, m_cols.to(x.device)],
        lambda x: x[1:, m_cols.to(x.device)] * 2,
        lambda x: x[m_rows.to(x.device), 2:4],
        lambda x: x.reshape(5, 2, 3)[(x.reshape(5, 2, 3) > 0)],
        lambda x: x.reshape(5, 2, 3)[:, (torch.arange(6).reshape(2, 3) % 2 == 0).to(x.device)],
        lambda x: x[m_rows.to(x.device)][:, torch.tensor([0, 5]).to(x.device)],
    ]
    for fn in cases:
        compare_with_cpu(fn, X, rtol=0, atol=0)


def test_boolean_mask_assignment():
    def put(x, values):
        y = x.clone()
        y[x > 0] = values
        return y

    def accumulate(x, values):
        y = x.clone()
        m = (x > 0).to(x.device)
        return y.index_put((m,), values, accumulate=True)
    n = int((X > 0).sum())
    for fn in [put, accumulate]:
        compare_with_cpu(fn, X, torch.randn(n))
    # one value stays a native select, with no read of the count
    y = tpu(X.clone())
    no_fallback(lambda: y.__setitem__(y < 0, 0.0))
    assert torch.equal(y.cpu(), X.clamp(min=0))


def test_mask_errors_match_cpu():
    t = tpu(X)
    for bad in [lambda x: x[torch.ones(6, dtype=torch.bool, device=x.device)],
                lambda x: x[torch.ones(5, 6, 2, dtype=torch.bool, device=x.device)],
                lambda x: torch.masked_select(x, torch.ones(5, 6, device=x.device)),
                lambda x: torch.masked_select(x, torch.ones(4, 6, dtype=torch.bool, device=x.device))]:
        with pytest.raises(Exception) as want:
            bad(X)
        with pytest.raises(type(want.value)) as got:
            bad(t)
        assert str(got.value) == str(want.value)
    assert torch.equal((t[t > 0] * 1).cpu(), X[X > 0])  # the device still works


@pytest.mark.parametrize("x", [
    torch.tensor([3.0, 1.0, float("nan"), 1.0, float("nan"), 2.0, 3.0]),
    torch.randint(0, 5, (4, 6), generator=torch.Generator().manual_seed(2)),
    torch.randint(-3, 3, (50,), generator=torch.Generator().manual_seed(3)).to(torch.int32),
    torch.tensor([7.0]), torch.zeros(0), torch.zeros(0, 3), torch.full((9,), 2.0),
], ids=["nan", "2d", "int32", "one", "empty", "empty_2d", "all_equal"])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("counts", [False, True])
@pytest.mark.parametrize("unique", [torch.unique, torch.unique_consecutive])
def test_unique(x, inverse, counts, unique):
    def run(v):
        out = unique(v, return_inverse=inverse, return_counts=counts)
        return out if isinstance(out, tuple) else (out,)
    want = run(x)
    got = no_fallback(lambda: run(tpu(x)))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g.cpu(), w) or torch.allclose(g.cpu(), w, equal_nan=True)


def test_bincount():
    x = torch.randint(0, 9, (40,), generator=torch.Generator().manual_seed(4))
    w = torch.rand(40, generator=torch.Generator().manual_seed(5))
    for fn in [lambda v, u: torch.bincount(v), lambda v, u: torch.bincount(v, minlength=20),
               lambda v, u: torch.bincount(v, u), lambda v, u: torch.bincount(v, u.double()),
               lambda v, u: torch.bincount(v, (u * 10).to(torch.int64)),
               lambda v, u: torch.bincount(v[:0], minlength=3),
               lambda v, u: torch.bincount(v.to(torch.int32))]:
        want = fn(x, w)
        got = no_fallback(lambda: fn(tpu(x), tpu(w)))
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)  # sums in another order


def test_repeat_interleave_with_tensor_repeats():
    x = torch.randn(4, 3)
    r = torch.tensor([2, 0, 3, 1])
    for fn in [lambda v, k: torch.repeat_interleave(k), lambda v, k: torch.repeat_interleave(v, k, dim=0),
               lambda v, k: torch.repeat_interleave(v, k[:3], dim=1),
               lambda v, k: torch.repeat_interleave(v, k, dim=0, output_size=6),
               lambda v, k: torch.repeat_interleave(k[1:2])]:
        want = fn(x, r)
        got = no_fallback(lambda: fn(tpu(x), tpu(r)))
        assert torch.equal(got.cpu(), want)


def test_count_read_errors_match_cpu():
    for bad in [lambda d: torch.bincount(torch.tensor([-1, 2], device=d)),
                lambda d: torch.bincount(torch.tensor([[1]], device=d)),
                lambda d: torch.bincount(torch.tensor([1.0], device=d)),
                lambda d: torch.bincount(torch.tensor([1], device=d), minlength=-1),
                lambda d: torch.bincount(torch.tensor([1, 2], device=d), torch.ones(3, device=d)),
                lambda d: torch.repeat_interleave(torch.tensor([1, -1], device=d)),
                lambda d: torch.repeat_interleave(torch.tensor([[1, 2]], device=d))]:
        with pytest.raises(Exception) as want:
            bad("cpu")
        with pytest.raises(type(want.value)) as got:
            bad("tpu")
        assert str(got.value) == str(want.value)
    assert torch.bincount(torch.tensor([1, 1], device="tpu")).cpu().tolist() == [0, 2]


def test_printing_does_not_fall_back():
    t = tpu(X)
    text = no_fallback(lambda: str(t))
    assert text.startswith("tensor([[") and "device='tpu:0'" in text


def test_fused_mode_reads_the_count_once(request):
    torchtpu.set_eager_mode("fused")
    request.addfinalizer(lambda: torchtpu.set_eager_mode("strict"))
    torchtpu.reset_fused_stats()
    x = tpu(X) * 2  # recorded
    got = no_fallback(lambda: x[x > 1])
    assert torch.equal(got.cpu(), (X * 2)[X * 2 > 1])
    stats = torchtpu.fused_stats()
    assert stats.get("flush:fallback", 0) == 0
