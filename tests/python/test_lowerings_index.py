"""Native lowerings of the indexing ops: torch.gather / scatter / scatter_add /
scatter_reduce("sum"), advanced indexing x[idx] and x[idx] = v (index, index_put_ with and
without accumulate), index_fill / index_copy / index_add, sort / argsort / topk / kthvalue /
median, searchsorted / bucketize, flip, roll, repeat, constant_pad_nd, narrow_copy, stack. Each is compared with
PyTorch on CPU on the same inputs (forward, and backward through autograd where it has
one) and checked not to use the CPU fallback.

Out-of-range indices are never clamped: they raise at the next synchronization in strict
mode and at the op itself in debug mode, naming the op, and the device keeps working.

Tolerances: moving values (gather, indexing, sort, pads) is exact; sums (scatter_add,
index_add, accumulating index_put_, and the gradients that are such sums) are f32 sums in a
different order than CPU: rtol/atol 1e-5. bf16 sums are accumulated in f32 and rounded once,
where CPU rounds after every addition: rtol 2e-2, atol 5e-2.
"""
import pytest
import torch
import torch.nn.functional as F

import torchtpu

from conftest import compare_with_cpu, no_fallback, run_json, tpu


def compare(fn, *args, rtol=1e-5, atol=1e-5, grad=True):
    """fn(dev, *args) on CPU and on tpu (natively): results and gradients agree."""
    def on_device(*a):
        return fn(next(x.device.type for x in a if isinstance(x, torch.Tensor)), *a)
    compare_with_cpu(on_device, *args, rtol=rtol, atol=atol, grad=grad)


def t(dev, data, dtype=None):
    return torch.tensor(data, device=dev, dtype=dtype)


torch.manual_seed(0)
X = torch.randn(5, 6, 7)
SRC = torch.randn(5, 6, 7)
I0 = torch.randint(0, 5, (5, 6, 7))
I1 = torch.randint(0, 6, (3, 4, 5))
I2 = torch.randint(0, 7, (5, 6, 2))
X_NAN = X.clone()
X_NAN[1, 2, 3] = X_NAN[1, 4, 3] = float("nan")           # median: NaN, index of the first NaN
UNIQUE1 = torch.stack([torch.randperm(6)[:4] for _ in range(35)]).view(5, 7, 4).transpose(1, 2).contiguous()

CASES = {
    # gather
    "gather_dim0": (lambda d, x, i: torch.gather(x, 0, i), X, I0),
    "gather_smaller_index": (lambda d, x, i: torch.gather(x, 1, i), X, I1),
    "gather_last_dim": (lambda d, x, i: torch.gather(x, -1, i), X, I2),
    "gather_noncontiguous": (lambda d, x, i: torch.gather(x, 0, i), X.transpose(0, 2),
                             torch.randint(0, 7, (6, 5, 5)).transpose(1, 2)),
    "gather_0d": (lambda d, x, i: torch.gather(x, 0, i), torch.tensor(3.0), torch.tensor(0)),
    "take_along_dim": (lambda d, x, i: torch.take_along_dim(x, i, 1), X, torch.randint(0, 6, (5, 3, 7))),
    # scatter
    "scatter_src": (lambda d, x, i, s: x.scatter(1, i, s), X, UNIQUE1, torch.randn(5, 4, 7)),
    "scatter_value": (lambda d, x, i: x.scatter(0, i, 2.5), X, I0[:1]),
    "scatter_inplace": (lambda d, x, i, s: x.clone().scatter_(1, i, s), X, UNIQUE1, torch.randn(5, 4, 7)),
    "scatter_add": (lambda d, x, i, s: x.scatter_add(0, i, s), X, I0, SRC),
    "scatter_add_inplace": (lambda d, x, i, s: x.clone().scatter_add_(1, i, s), X, I1, torch.randn(3, 4, 5)),
    "scatter_reduce_add": (lambda d, x, i, s: x.scatter(0, i, s, reduce="add"), X, I0, SRC),
    "scatter_reduce_sum": (lambda d, x, i, s: x.scatter_reduce(0, i, s, "sum"), X, I0, SRC),
    "scatter_reduce_sum_exclude_self": (lambda d, x, i, s: x.scatter_reduce(2, i, s, "sum", include_self=False),
                                        X, I2, torch.randn(5, 6, 2)),
    "scatter_add_int": (lambda d, x, i, s: x.scatter_add(0, i, s), torch.arange(10), t("cpu", [1, 1, 3]),
                        t("cpu", [5, 6, 7])),
    # advanced indexing
    "index_dim0_negative": (lambda d, x: x[t(d, [4, 0, -1, 2])], X),
    "index_dim1_2d_index": (lambda d, x: x[:, t(d, [[1, 2], [0, -3]])], X),
    "index_two_separated": (lambda d, x: x[t(d, [1, 2, 3]), :, t(d, [0, 6, 5])], X),
    "index_two_broadcast": (lambda d, x: x[t(d, [[1], [2]]), t(d, [0, 5, 4])], X),
    "index_ellipsis_last": (lambda d, x: x[..., t(d, [6, 0])], X),
    "index_after_slice": (lambda d, x: x[1:4, t(d, [3, 3, 1])], X),
    "index_int32": (lambda d, x: x[t(d, [1, 0], torch.int32)], X),
    "index_0d_tensor": (lambda d, x: x[t(d, 2)], X),
    "index_list": (lambda d, x: x[[0, 2, 4]], X),
    "index_bf16": (lambda d, x: x[t(d, [2, 2, 0])], X.bfloat16()),
    "index_noncontiguous": (lambda d, x: x[:, t(d, [1, 0])], X.transpose(0, 1)),
    # index_put_
    "index_put_pairs": (lambda d, x, v: x.clone().index_put_((t(d, [0, 2, 4]), t(d, [1, 1, 5])), v), X,
                        torch.randn(3, 7)),
    "setitem_broadcast": (lambda d, x, v: _setitem(x, (slice(None), t(d, [1, -3])), v), X, torch.randn(7)),
    "setitem_negative": (lambda d, x, v: _setitem(x, t(d, [1, -1]), v), X, torch.randn(2, 6, 7)),
    "index_put_accumulate": (lambda d, x, v: x.index_put((t(d, [0, 0, 4, 0]),), v, accumulate=True), X,
                             torch.randn(4, 6, 7)),
    "index_put_scalar_value": (lambda d, x: x.index_put((t(d, [0, 2]),), t(d, 5.0)), X),
    "setitem_mask_scalar": (lambda d, x: _setitem(x, x > 0.5, 0.0), X),
    "setitem_mask_2d": (lambda d, x: _setitem(x, x[:, :, 0] > 0, 1.5), X),
    "index_put_mask_accumulate": (lambda d, x: x.index_put((x > 0,), t(d, 2.0), accumulate=True), X),
    # along one dim
    "index_fill": (lambda d, x: x.index_fill(1, t(d, [0, -1, 2]), -2.0), X),
    "index_fill_tensor_value": (lambda d, x: x.clone().index_fill_(2, t(d, [3]), t(d, 7.0)), X),
    "index_copy": (lambda d, x, s: x.index_copy(1, t(d, [5, 0, 2]), s), X, torch.randn(5, 3, 7)),
    "index_copy_inplace": (lambda d, x, s: x.clone().index_copy_(0, t(d, [4, 1]), s), X, torch.randn(2, 6, 7)),
    "index_add": (lambda d, x, s: x.index_add(2, t(d, [0, 0, 6, 3]), s, alpha=0.5), X, torch.randn(5, 6, 4)),
    "index_add_inplace_int": (lambda d, x, s: x.clone().index_add_(0, t(d, [1, 1, 0]), s),
                              torch.arange(6).view(3, 2), torch.ones(3, 2, dtype=torch.long)),
    # sorting
    "sort": (lambda d, x: torch.sort(x, 1), X),
    "sort_descending_stable_ties": (lambda d, x: torch.sort(x, dim=-1, descending=True, stable=True),
                                    torch.randint(0, 3, (4, 9)).float()),
    "sort_int_stable": (lambda d, x: torch.sort(x, dim=0, stable=True), torch.randint(0, 3, (9, 4))),
    "sort_nan_inf": (lambda d, x: torch.sort(x), torch.tensor([3.0, float("nan"), -1.0, float("inf"), 2.0])),
    "sort_bool": (lambda d, x: torch.sort(x, stable=True), torch.tensor([True, False, True, False])),
    "argsort": (lambda d, x: torch.argsort(x, dim=2, descending=True), X),
    "topk": (lambda d, x: torch.topk(x, 3, dim=1), X),
    "topk_smallest": (lambda d, x: torch.topk(x, 2, dim=-1, largest=False), X),
    "kthvalue": (lambda d, x: torch.kthvalue(x, 2, 1), X),
    "median_dim": (lambda d, x: torch.median(x, 1), X),
    "median_nan": (lambda d, x: torch.median(x, 1, keepdim=True), X_NAN),
    # shapes
    "flip": (lambda d, x: torch.flip(x, (0, 2)), X),
    "roll": (lambda d, x: torch.roll(x, (2, -1), (0, 2)), X),
    "roll_flat": (lambda d, x: torch.roll(x, 5), X),
    "pad": (lambda d, x: F.pad(x, (1, 2, 0, 3), value=1.5), X),
    "pad_negative": (lambda d, x: F.pad(x, (-1, 2, 1, -2)), X),
    "pad_int": (lambda d, x: F.pad(x, (1, 1)), torch.arange(6).view(2, 3)),
    "narrow_copy": (lambda d, x: torch.narrow_copy(x, -1, -3, 2), X),
    "repeat": (lambda d, x: x.repeat(2, 1, 1, 3), X),
    "tile": (lambda d, x: x.tile((2,)), X),
    "stack": (lambda d, a, b: torch.stack([a, b], 1), X, SRC),
}


def _setitem(x, index, value):
    y = x.clone()
    y[index] = value
    return y


NO_DERIVATIVE = {"scatter_reduce_add"}                   # PyTorch has no backward for these


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("name", sorted(CASES))
def test_indexing_matches_cpu(name):
    fn, *args = CASES[name]
    compare(fn, *args, grad=name not in NO_DERIVATIVE)


@pytest.mark.parametrize("name", ["gather_smaller_index", "scatter_add", "index_dim1_2d_index",
                                  "index_put_accumulate", "index_add", "sort", "topk", "roll"])
def test_indexing_bf16(name):
    fn, *args = CASES[name]
    args = [a.bfloat16() if a.is_floating_point() else a for a in args]
    compare(fn, *args, rtol=2e-2, atol=5e-2)


def test_cpu_index_tensors_are_accepted():
    """As on CUDA, index tensors may stay on the CPU for x[idx] and x[idx] = v (the CPU
    tensors stay referenced here until the ops ran: see the report on their lifetime)."""
    idx = torch.tensor([0, 3, -1])
    got = no_fallback(lambda: tpu(X)[idx])
    assert torch.equal(got.cpu(), X[idx])
    y = tpu(X.clone())
    no_fallback(lambda: y.index_put_((idx,), tpu(torch.ones(6, 7)), accumulate=True))
    assert torch.equal(y.cpu(), X.index_put((idx,), torch.ones(6, 7), accumulate=True))


def test_boolean_mask_read():
    """Native (dynamic_shape_ops.cpp; test_dynamic_shape_ops.py has the rest)."""
    y = no_fallback(lambda: tpu(X)[tpu(X) > 0])
    assert torch.equal(y.cpu(), X[X > 0])


OUT_OF_RANGE = {
    "gather": "torch.gather(x, 1, torch.tensor([[6]], device='tpu'))",
    "gather_negative": "torch.gather(x, 1, torch.tensor([[-1]], device='tpu'))",
    "scatter": "x.scatter(0, torch.tensor([[5]], device='tpu'), 1.0)",
    "scatter_add": "x.scatter_add(1, torch.tensor([[9]], device='tpu'), x)",
    "index": "x[torch.tensor([5], device='tpu')]",
    "index_negative": "x[torch.tensor([-6], device='tpu')]",
    "index_put": "x.index_put_((torch.tensor([7], device='tpu'),), torch.tensor(1.0, device='tpu'))",
    "index_fill": "x.index_fill(1, torch.tensor([6], device='tpu'), 0.0)",
    "index_copy": "x.index_copy(0, torch.tensor([-1], device='tpu'), torch.ones(1, 6, device='tpu'))",
    "index_add": "x.index_add(0, torch.tensor([5], device='tpu'), torch.ones(1, 6, device='tpu'))",
}


@pytest.mark.parametrize("name", sorted(OUT_OF_RANGE))
def test_out_of_range_index_raises_at_sync_and_device_survives(name):
    x = tpu(torch.randn(5, 6))
    torch.tpu.synchronize()
    with pytest.raises((IndexError, RuntimeError), match="out of range"):
        eval(OUT_OF_RANGE[name], {"torch": torch, "x": x})
        torch.tpu.synchronize()
    assert (x + 1).sum().item() == pytest.approx((x.cpu() + 1).sum().item(), rel=1e-5)


def test_out_of_range_index_raises_at_the_op_in_debug_mode():
    code = """
        import torch, torchtpu
        x = torch.randn(5, 6, device="tpu")
        result = {}
        for name, expr in %r.items():
            try:
                eval(expr, {"torch": torch, "x": x})
                result[name] = "no error at the op"
            except IndexError as e:
                result[name] = "IndexError" if "out of range" in str(e) else str(e)
            except Exception as e:
                result[name] = type(e).__name__ + ": " + str(e)
        result["after"] = (x * 2).sum().item() is not None
        emit(result)
    """ % OUT_OF_RANGE
    result = run_json(code, {"TORCHTPU_EAGER": "debug"})
    assert result == {**{k: "IndexError" for k in OUT_OF_RANGE}, "after": True}


def test_cpu_index_tensor_is_read_at_call_time():
    # the index tensor may be freed or overwritten right after the call (strict mode)
    x = tpu(torch.arange(10.0))
    idx = torch.tensor([0, 3])
    y = x[idx]
    idx.fill_(9)
    del idx
    assert y.cpu().tolist() == [0.0, 3.0]


def test_explicit_generator_is_honoured():
    g = torch.Generator(device="tpu")
    g.manual_seed(5)
    a = torch.rand(100, device="tpu", generator=g)
    g.manual_seed(5)
    b = torch.rand(100, device="tpu", generator=g)
    c = torch.rand(100, device="tpu")
    assert torch.equal(a.cpu(), b.cpu()) and not torch.equal(a.cpu(), c.cpu())
    with pytest.raises(RuntimeError, match="tpu"):
        torch.rand(3, device="tpu", generator=torch.Generator())


def test_searchsorted_and_bucketize():
    """Insertion points as the CPU's binary search gives them (ties at both sides, values past
    either end, NaN past the end), 1-D and batched boundaries, both sides, int32 and int64."""
    seeded = torch.Generator().manual_seed(6)
    s = torch.tensor([1.0, 2.0, 2.0, 3.0, 5.0])
    v = torch.tensor([[0.5, 2.0, float("nan"), 5.0], [3.0, 9.0, 1.0, -1.0]])
    rows = torch.rand(3, 7, generator=seeded).sort().values
    vals = torch.rand(3, 4, generator=seeded)
    for right in (False, True):
        for i32 in (False, True):
            compare(lambda d, a, b: torch.searchsorted(a, b, right=right, out_int32=i32), s, v, grad=False)
            compare(lambda d, a, b: torch.bucketize(a, b, right=right, out_int32=i32), v, s, grad=False)
            compare(lambda d, a, b: torch.searchsorted(a, b, right=right, out_int32=i32), rows, vals, grad=False)
    compare(lambda d, a, b: torch.searchsorted(a, b, side="right"), s, v, grad=False)
    ints = torch.tensor([0, 10, 20, 30])
    compare(lambda d, a, b: torch.bucketize(a, b), torch.tensor([-5, 0, 15, 30, 31]), ints, grad=False)


@pytest.mark.parametrize("boundaries", [65, 100, 2049])
def test_searchsorted_by_binary_search(boundaries):
    """Past 64 boundaries a row is searched (lower_reorder.cpp's searched_points): the CPU's
    results with ties, values on every boundary, NaN and values past both ends, 1-D and
    batched rows, int32 and int64 results, integer boundaries."""
    g = torch.Generator().manual_seed(boundaries)
    s = torch.rand(boundaries, generator=g).sort().values
    s[3] = s[4] = s[5]
    v = torch.cat([torch.rand(500, generator=g), s, torch.tensor([float("nan"), -1.0, 2.0])])
    rows = torch.rand(3, boundaries, generator=g).sort().values
    vals = torch.rand(3, 40, generator=g)
    ints = torch.arange(0, 3 * boundaries, 3)
    ivals = torch.randint(-5, 3 * boundaries + 5, (2, 150), generator=g)
    for right in (False, True):
        for i32 in (False, True):
            for a, b in ((s, v), (rows, vals), (ints, ivals)):
                want = torch.searchsorted(a, b, right=right, out_int32=i32)
                got = no_fallback(lambda: torch.searchsorted(a.to("tpu"), b.to("tpu"), right=right,
                                                             out_int32=i32))
                assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
            want = torch.bucketize(v, s, right=right, out_int32=i32)
            assert torch.equal(torch.bucketize(v.to("tpu"), s.to("tpu"), right=right,
                                               out_int32=i32).cpu(), want)
    assert torch.equal(torch.searchsorted(s.to("tpu"), torch.tensor(0.5).to("tpu")).cpu(),
                       torch.searchsorted(s, torch.tensor(0.5)))
    empty = torch.empty(0)
    assert torch.searchsorted(s.to("tpu"), empty.to("tpu")).shape == (0,)


def test_histogram_observer_calibrates_on_the_device():
    """torch.ao's HistogramObserver (histc, and a bucketize of 262144 bin midpoints into
    2049 boundaries) runs without the CPU fallback and gives the CPU's histogram and qparams."""
    from torch.ao.quantization.observer import HistogramObserver
    g = torch.Generator().manual_seed(3)
    dev, cpu = HistogramObserver().to("tpu"), HistogramObserver()
    for _ in range(3):
        x = torch.randn(64, 32, generator=g)
        no_fallback(lambda: dev(x.to("tpu")))
        cpu(x)
    torch.testing.assert_close(dev.histogram.cpu(), cpu.histogram, rtol=1e-6, atol=1e-6)
    for got, want in zip(dev.calculate_qparams(), cpu.calculate_qparams()):
        torch.testing.assert_close(got.cpu(), want)


def assert_same_values(got, want):
    """Exactly equal, -0 apart from +0, any NaN equal to any NaN (payloads differ)."""
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got.signbit() | got.isnan(), want.signbit() | want.isnan())


def test_nanmedian_and_median_of_everything():
    """nanmedian: the lower median of the values that are not NaN (an all-NaN row gives NaN at
    the first index), the CPU's indices for ties (a stable order), -0 kept; median() and
    nanmedian() over all elements."""
    nan = float("nan")
    x = torch.tensor([[nan, nan, nan], [3.0, nan, 1.0], [2.0, 1.0, 5.0], [nan, 4.0, nan], [-0.0, nan, 1.0],
                      [4.0, 1.0, 1.0]])
    r = torch.randn(7, 9, generator=torch.Generator().manual_seed(7))
    r[r > 1] = nan
    for t in (x, r, x.to(torch.bfloat16)):
        for dim in (0, 1, -1):
            for keepdim in (False, True):
                want = torch.nanmedian(t, dim, keepdim=keepdim)
                got = no_fallback(lambda: torch.nanmedian(tpu(t), dim, keepdim=keepdim))
                assert torch.equal(got.indices.cpu(), want.indices)
                assert_same_values(got.values, want.values)
    for t in (x, r, X, torch.tensor([nan, nan]), torch.tensor(3.0)):
        for fn in (torch.median, torch.nanmedian):
            assert_same_values(no_fallback(lambda: fn(tpu(t))), fn(t))
    compare(lambda d, a: torch.nanmedian(a, 1).values, X)  # gradient flows to the median
