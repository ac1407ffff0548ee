"""torch._foreach_* ops as one native call (torchtpu/csrc/foreach.cpp): the whole list is one
cache lookup and one program, with the same bits as the per-tensor ops on tpu and PyTorch's
results on the CPU; calls whose written tensors overlap other arguments take the per-tensor
way and keep PyTorch's sequential semantics."""
import pytest
import torch

import torchtpu
import torchtpu.report as report
from conftest import no_fallback

SHAPES = [(7, 5), (33,), (4, 3, 2), (1,), (2, 8)]


def lists(device, n=3, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = [[(torch.randn(s, generator=g).abs() + 0.5).to(dtype) for s in SHAPES] for _ in range(n)]
    return [[t.to(device) for t in ts] for ts in out]


# name: (foreach call, the same as per-tensor ops); xs is written in place, ys and zs are read
CALLS = {
    "mul_ scalar": (lambda xs, ys, zs: torch._foreach_mul_(xs, 0.75),
                    lambda xs, ys, zs: [x.mul_(0.75) for x in xs]),
    "add_ list alpha": (lambda xs, ys, zs: torch._foreach_add_(xs, ys, alpha=-0.5),
                        lambda xs, ys, zs: [x.add_(y, alpha=-0.5) for x, y in zip(xs, ys)]),
    "lerp_ scalar": (lambda xs, ys, zs: torch._foreach_lerp_(xs, ys, 0.1),
                     lambda xs, ys, zs: [x.lerp_(y, 0.1) for x, y in zip(xs, ys)]),
    "addcmul_ scalar": (lambda xs, ys, zs: torch._foreach_addcmul_(xs, ys, ys, 0.001),
                        lambda xs, ys, zs: [x.addcmul_(y, y, value=0.001) for x, y in zip(xs, ys)]),
    "addcdiv_ scalar list": (
        lambda xs, ys, zs: torch._foreach_addcdiv_(xs, ys, zs, [0.1, -0.2, 0.3, 0.4, -0.5]),
        lambda xs, ys, zs: [x.addcdiv_(y, z, value=v)
                            for x, y, z, v in zip(xs, ys, zs, [0.1, -0.2, 0.3, 0.4, -0.5])]),
    "div_ scalar list": (lambda xs, ys, zs: torch._foreach_div_(xs, [3.0, 0.5, 7.0, 2.0, 1.5]),
                         lambda xs, ys, zs: [x.div_(v) for x, v in zip(xs, [3.0, 0.5, 7.0, 2.0, 1.5])]),
    "sqrt": (lambda xs, ys, zs: torch._foreach_sqrt(ys),
             lambda xs, ys, zs: [y.sqrt() for y in ys]),
    "add scalar": (lambda xs, ys, zs: torch._foreach_add(ys, 1e-8),
                   lambda xs, ys, zs: [y.add(1e-8) for y in ys]),
    "maximum list": (lambda xs, ys, zs: torch._foreach_maximum(ys, zs),
                     lambda xs, ys, zs: [torch.maximum(y, z) for y, z in zip(ys, zs)]),
}


def cache_hits():
    return torchtpu.cache_stats()["hits"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(CALLS))
def test_one_call_one_program_same_bits_as_per_tensor_ops(name, dtype):
    call, per_tensor = CALLS[name]
    call(*lists("tpu", dtype=dtype))  # compiles
    torch.tpu.synchronize()
    dev, ref, cpu = lists("tpu", dtype=dtype), lists("tpu", dtype=dtype), lists("cpu", dtype=dtype)
    hits, launches = cache_hits(), report.totals()["launches"]
    got = no_fallback(lambda: call(*dev))
    # the whole list: one signature looked up, one program run (the per-tensor way looks
    # up one per tensor)
    assert cache_hits() - hits == 1
    assert report.totals()["launches"] - launches == 1
    want = per_tensor(*ref)
    expect = call(*cpu)
    if got is None:  # in place: the updated list
        got, want, expect = dev[0], ref[0], cpu[0]
    for g, w, e in zip(got, want, expect):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert torch.equal(g.cpu(), w.cpu())  # the same lowering, element by element
        tol = 1e-6 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(g.cpu(), e, rtol=tol, atol=tol)


def test_changing_scalars_never_recompile():
    xs = lists("tpu")[0]
    torch._foreach_div_(xs, [2.0, 3.0, 4.0, 5.0, 6.0])
    torch._foreach_mul_(xs, 0.9)
    misses = torchtpu.cache_stats()["misses"]
    for k in range(3):  # AdamW's bias corrections change every step
        torch._foreach_div_(xs, [1.5 + k, 0.25 * k + 0.1, 7.0, 1.0, 0.0 + k + 0.5])
        torch._foreach_mul_(xs, 0.5 + k)
    torch.tpu.synchronize()
    assert torchtpu.cache_stats()["misses"] == misses


@pytest.mark.parametrize("case", ["same list", "swapped", "repeated", "other aliases self"])
def test_overlapping_arguments_keep_the_per_tensor_semantics(case):
    def run(device, call=True):
        xs, ys = lists(device, n=2)
        a, b = xs[0], ys[0]  # both (7, 5)
        s = torch.tensor(1.5, device=device)
        if not call:
            return []
        if case == "same list":  # element for element: natively, x + x
            xs = [a, b]
            torch._foreach_add_(xs, xs)
        elif case == "swapped":  # a += b, then b += (new) a
            torch._foreach_add_([a, b], [b, a])
        elif case == "repeated":  # a is scaled twice
            torch._foreach_mul_([a, a, b], 3.0)
        else:  # the Tensor overload reads a tensor the list writes first: s *= s; b *= s
            torch._foreach_mul_([s, b], s)
        return [a, b, s]

    def lookups(fn):
        torch.tpu.synchronize()
        hits = cache_hits()
        out = fn()
        torch.tpu.synchronize()
        return cache_hits() - hits, out
    run("tpu")  # compiles
    setup, _ = lookups(lambda: run("tpu", call=False))  # the copies that make the inputs
    n, got = lookups(lambda: no_fallback(lambda: run("tpu")))
    for g, want in zip(got, run("cpu")):
        torch.testing.assert_close(g.cpu(), want, rtol=1e-6, atol=1e-6)
    # one program lookup for the native call; the per-tensor way looks up each element's op
    if case == "same list":
        assert n == setup + 1
    else:
        assert n > setup + 1


def test_mixed_dtypes_and_a_cpu_scalar_tensor():
    def run(device):
        xs = [t.to(device) for t in (torch.ones(3), torch.ones(2, dtype=torch.bfloat16) * 2)]
        torch._foreach_add_(xs, torch.tensor(0.5), alpha=2)  # a CPU scalar tensor
        return xs
    for got, want in zip(no_fallback(lambda: run("tpu")), run("cpu")):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)


def test_errors_match_pytorch_and_the_device_still_works():
    xs, ys, _ = lists("tpu")
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_add_(xs, ys[:2])
    ints = [torch.ones(3, dtype=torch.int64, device="tpu")]
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch._foreach_mul_(ints, 0.5)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor"):
        torch._foreach_sub(xs, True)
    torch._foreach_mul_(xs, 2.0)
    assert torch.equal(xs[0].cpu(), lists("cpu")[0][0] * 2)


def test_fused_mode_records_the_same_bits():
    def run(mode):
        torchtpu.set_eager_mode(mode)
        try:
            xs, ys, zs = lists("tpu")
            torch._foreach_lerp_(xs, ys, 0.1)
            torch._foreach_addcmul_(zs, ys, ys, 0.01)
            r = torch._foreach_sqrt(zs)
            torch._foreach_addcdiv_(xs, ys, r, [-1e-3] * len(xs))
            return [x.cpu() for x in xs]
        finally:
            torchtpu.set_eager_mode("strict")
    for s, f in zip(run("strict"), run("fused")):
        assert torch.equal(s, f)
