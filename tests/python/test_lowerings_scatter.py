"""Native scatter reductions: scatter_reduce (sum, prod, mean, amax, amin; include_self True
and False) forward and backward, scatter(reduce="add"/"multiply") with a src tensor or a
value, index_reduce (prod, mean, amax, amin) forward and backward, take, put_ (with and
without accumulate), masked_scatter (forward and backward), and torch_geometric-style
message passing (gather rows by edge, scatter_reduce onto nodes) in a small GNN that trains.
Each is compared with PyTorch on CPU and checked not to use the CPU fallback.

Tolerances: max/min and the replaced positions are exact. Sums, means and products run in
f32 in scatter order as the CPU kernel does, but the backward formulas (PyTorch's own
scatter_reduce_backward, composed of native ops) divide and multiply in a different order:
rtol/atol 1e-5 for f32. bf16 sums/products accumulate in f32 and are rounded once where the
CPU rounds after every step: rtol 2e-2, atol 5e-2. The GNN compares losses and weights after
a few SGD steps at HIGHEST matmul precision: 1e-4.

Out-of-range indices raise at the next sync (IndexError, "out of range"), as for gather and
scatter, and the device keeps working.
"""
import pytest
import torch

from conftest import assert_trains_like_cpu, compare_with_cpu, sgd_losses, tpu

REDUCES = ["sum", "prod", "mean", "amax", "amin"]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=5e-2)}


def inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 4, generator=g).to(dtype)
    src = torch.randn(6, 4, generator=g).to(dtype)
    # repeated indices, and rows 3 of columns 0-1 and row 4 of column 3 never hit (untouched)
    idx = torch.tensor([[0, 1, 0, 2], [1, 1, 3, 0], [4, 0, 0, 0], [0, 2, 2, 2], [2, 3, 1, 0],
                        [0, 0, 4, 1]])
    return x, src, idx


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_matches_cpu(reduce, include_self, dtype):
    x, src, idx = inputs(dtype)
    compare_with_cpu(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self),
                     x, idx, src, **TOL[dtype])


@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_along_dim1_in_place_and_smaller_index(reduce):
    x, src, _ = inputs(torch.float32, seed=1)
    idx = torch.tensor([[3, 3, 0], [1, 2, 1], [0, 0, 0]])  # index smaller than src in both dims

    def fn(a, i, s):
        out = a.clone()
        out.scatter_reduce_(1, i, s, reduce, include_self=False)
        return out
    # PyTorch's backward needs src shaped like index (CPU raises too): forward only
    compare_with_cpu(fn, x, idx, src, grad=False)
    compare_with_cpu(fn, x, idx, src[:3, :3])


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_integers(reduce):
    x = torch.tensor([[5, -7, 3], [2, 9, -4]])
    src = torch.tensor([[-3, 4, 8], [7, -5, 1]])
    idx = torch.tensor([[1, 1, 0], [1, 0, 0]])
    for include_self in (True, False):
        compare_with_cpu(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self),
                         x, idx, src)


def test_scatter_reduce_prod_with_zeros_backward():
    """The prod gradient (exclusive products where src or self holds a zero)."""
    x = torch.tensor([1.5, 0.0, 2.0, -1.0])
    src = torch.tensor([0.0, 3.0, 0.0, 2.0, 0.5, 4.0])
    idx = torch.tensor([0, 0, 1, 2, 2, 3])
    for include_self in (True, False):
        compare_with_cpu(lambda a, i, s: a.scatter_reduce(0, i, s, "prod", include_self=include_self),
                         x, idx, src)


def test_scatter_reduce_amax_ties_share_the_gradient():
    x = torch.tensor([1.0, 5.0, 2.0])
    src = torch.tensor([1.0, 1.0, 5.0, 0.5])
    idx = torch.tensor([0, 0, 1, 2])
    for reduce in ("amax", "amin"):
        for include_self in (True, False):
            compare_with_cpu(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self),
                             x, idx, src)


def test_scatter_reduce_nan_propagates_like_cpu():
    x = torch.tensor([1.0, float("nan"), 3.0])
    src = torch.tensor([float("nan"), 2.0, 7.0, -1.0])
    idx = torch.tensor([0, 1, 2, 2])
    for reduce in ("amax", "amin", "sum", "prod", "mean"):
        compare_with_cpu(lambda a, i, s: a.scatter_reduce(0, i, s, reduce), x, idx, src, grad=False)


def test_scatter_reduce_empty_index_and_scalar():
    x = torch.randn(3, 2)
    compare_with_cpu(lambda a, i, s: a.scatter_reduce(0, i, s, "amax"), x,
                     torch.zeros(0, 2, dtype=torch.long), torch.randn(0, 2))
    compare_with_cpu(lambda a, i, s: a.scatter_reduce(0, i, s, "mean", include_self=False),
                     torch.tensor(2.0), torch.tensor(0), torch.tensor(5.0))


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_legacy_reduce(reduce):
    x, src, idx = inputs(torch.float32, seed=2)
    compare_with_cpu(lambda a, i, s: a.scatter(0, i, s, reduce=reduce), x, idx, src, grad=False)
    compare_with_cpu(lambda a, i: a.scatter(1, i, 1.5, reduce=reduce), x, idx[:5, :3] % 4, grad=False)
    compare_with_cpu(lambda a, i, s: a.clone().scatter_(0, i, s, reduce=reduce), x, idx, src, grad=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce_matches_cpu(reduce, include_self, dtype):
    g = torch.Generator().manual_seed(3)
    idx = torch.tensor([0, 4, 0, 1, 1, 0])  # repeated; 2 and 3 untouched
    x0, src0 = torch.randn(5, 3, 2, generator=g).to(dtype), torch.randn(6, 3, 2, generator=g).to(dtype)
    x2, src2 = torch.randn(2, 3, 5, generator=g).to(dtype), torch.randn(2, 3, 6, generator=g).to(dtype)
    for dim, x, src in ((0, x0, src0), (2, x2, src2)):
        compare_with_cpu(lambda a, i, s: a.index_reduce(dim, i, s, reduce, include_self=include_self),
                         x, idx, src, **TOL[dtype])


def test_out_of_range_index_raises_and_device_survives():
    x = tpu(torch.randn(5, 4))
    torch.tpu.synchronize()
    for expr in ["x.scatter_reduce(0, torch.tensor([[5]], device='tpu'), x, 'amax')",
                 "x.scatter_reduce(1, torch.tensor([[-1]], device='tpu'), x, 'mean')",
                 "x.index_reduce(0, torch.tensor([7], device='tpu'), x[:1], 'prod')"]:
        with pytest.raises((IndexError, RuntimeError), match="out of range"):
            eval(expr, {"torch": torch, "x": x})
            torch.tpu.synchronize()
        assert (x + 1).sum().item() == pytest.approx((x.cpu() + 1).sum().item(), rel=1e-5)


@pytest.mark.parametrize("call", [
    lambda x, i: x.scatter_reduce(0, i, x[:2], "foo"),
    lambda x, i: x.index_reduce(0, i, x[:2], "sum"),
])
def test_bad_reduce_name_is_the_cpu_error(call):
    x = torch.randn(3)
    i = torch.tensor([0, 1])
    with pytest.raises(RuntimeError) as cpu_err:
        call(x, i)
    with pytest.raises(RuntimeError) as tpu_err:
        call(tpu(x), tpu(i))
        torch.tpu.synchronize()
    # scatter_reduce's meta kernel words it without ", got foo"; same type and start
    def words(e):
        return str(e.value).split(", got")[0].rstrip(".")
    assert words(tpu_err) == words(cpu_err)
    assert (tpu(x) + 1).sum().item() == pytest.approx((x + 1).sum().item(), rel=1e-5)


# ---- take, put_, masked_scatter ----------------------------------------------------------------

def test_take_matches_cpu():
    x = torch.randn(4, 5)
    compare_with_cpu(lambda a, i: a.take(i), x, torch.tensor([[0, 19, -1], [-20, 7, 7]]))
    compare_with_cpu(lambda a, i: a.take(i), x.bfloat16(), torch.tensor([3, 3, -2]))
    compare_with_cpu(lambda a, i: a.take(i), x, torch.zeros(0, dtype=torch.long))


@pytest.mark.parametrize("accumulate", [False, True])
def test_put_matches_cpu(accumulate):
    x = torch.randn(3, 4)
    idx = torch.tensor([[0, -1], [5, 5]]) if accumulate else torch.tensor([[0, -1], [5, 6]])
    src = torch.randn(2, 2)
    compare_with_cpu(lambda a, i, s: a.put(i, s, accumulate=accumulate), x, idx, src)
    compare_with_cpu(lambda a, i, s: a.clone().put_(i, s, accumulate=accumulate), x.bfloat16(), idx,
                     src.bfloat16(), **TOL[torch.bfloat16])
    compare_with_cpu(lambda a, i, s: a.clone().put_(i, s, accumulate=accumulate), torch.arange(12),
                     idx, torch.tensor([[7, 8], [9, 10]]))


def test_masked_scatter_matches_cpu():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4, 5, generator=g)
    mask = torch.randn(4, 5, generator=g) > 0
    src = torch.randn(6, 4, generator=g)  # more elements than Trues: the rest is unused
    compare_with_cpu(lambda a, m, s: a.masked_scatter(m, s), x, mask, src)
    compare_with_cpu(lambda a, m, s: a.clone().masked_scatter_(m, s), x, mask[0], src)  # broadcast mask
    compare_with_cpu(lambda a, m, s: a.masked_scatter(m, s), x, torch.zeros(4, 5, dtype=torch.bool), src)
    compare_with_cpu(lambda a, m, s: a.masked_scatter(m, s), x.bfloat16(), mask, src.bfloat16())


# ---- message passing -------------------------------------------------------------------------

def aggregate(h, edges, reduce):
    """torch_geometric-style: messages h[src] scattered onto dst nodes by reduce."""
    src, dst = edges
    msg = h.index_select(0, src)
    index = dst.unsqueeze(1).expand_as(msg)
    out = torch.zeros_like(h)
    return out.scatter_reduce(0, index, msg, reduce, include_self=False)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax"])
def test_message_passing_matches_cpu(reduce):
    g = torch.Generator().manual_seed(4)
    h = torch.randn(7, 5, generator=g)
    edges = torch.randint(0, 6, (2, 20), generator=g)  # node 6 receives nothing
    compare_with_cpu(lambda x, e: aggregate(x, e, reduce), h, edges)


class GNN(torch.nn.Module):
    """Two message-passing layers (mean aggregation) and a linear readout."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, x, edges):
        x = torch.relu(self.l1(x + aggregate(x, edges, "mean")))
        x = torch.relu(self.l2(x + aggregate(x, edges, "amax")))
        return self.out(x)


def train(device, steps=4):
    torch.manual_seed(5)
    model = GNN().to(device)
    x = torch.randn(12, 8).to(device)
    edges = torch.randint(0, 12, (2, 40)).to(device)
    y = torch.randint(0, 3, (12,)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = sgd_losses(opt, lambda: torch.nn.functional.cross_entropy(model(x, edges), y), steps)
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_gnn_trains_natively_like_cpu():
    assert_trains_like_cpu(train)
