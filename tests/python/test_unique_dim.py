"""torch.unique(dim=) and torch.unique_consecutive (flat and with dim=) natively on tpu
(unique_ops.cpp: aten::unique_dim, unique_consecutive, unique_dim_consecutive, one
synchronizing read of the number of unique slices). Values, inverse and counts are compared
with PyTorch on CPU bit for bit (so a -0.0 kept where the CPU keeps 0.0 fails) for 1-D, 2-D
and 3-D inputs along several dims (negative too), every flag combination, duplicates adjacent
and apart, all equal, all distinct, empty inputs and 0-size dims, integer, bool and float
dtypes with NaN and signed zeros, and checked not to use the CPU fallback; the two cases that
take it on purpose (unique(dim=) of rows holding a NaN, which the CPU's std::sort does not
order, and of more than 16 rows equal but for a zero's sign) still give the CPU's results.
Errors have the CPU's type and message; fused eager mode gives the same results.
"""
import pytest
import torch

import torchtpu

from conftest import assert_bits_equal, fallback_ops, no_fallback, same_error, tpu

NAN = float("nan")
SEED = torch.Generator().manual_seed(7)

# (name, tensor, dims to take unique along)
CASES = [
    ("1d_int", torch.tensor([3, 1, 1, 2, 3, 3, 0, 1]), [0, -1]),
    ("2d_rows", torch.tensor([[1, 2, 0], [1, 2, 0], [0, 5, 1], [1, 2, 0], [0, 5, 1], [1, 1, 9]]), [0, 1, -2]),
    ("2d_random", torch.randint(0, 3, (40, 3), generator=SEED), [0, 1, -1]),
    ("2d_wide", torch.randint(0, 2, (6, 37), generator=SEED), [0, 1]),
    ("3d", torch.randint(0, 2, (4, 3, 5), generator=SEED), [0, 1, 2, -1, -3]),
    ("all_equal", torch.full((5, 4), 7.0), [0, 1]),
    ("all_distinct", torch.arange(24.0).reshape(4, 6).flip(0), [0, 1]),
    ("bool", torch.tensor([[True, False], [True, False], [False, False], [True, True]]), [0, 1]),
    ("int32", torch.randint(-50, 50, (9, 2), generator=SEED).to(torch.int32), [0, 1]),
    ("uint8", torch.randint(0, 4, (10, 2), generator=SEED).to(torch.uint8), [0]),
    ("f64", torch.randint(-2, 2, (12, 3), generator=SEED).double() / 3, [0, 1]),
    ("f32", (torch.randn(30, 2, generator=SEED) * 2).round() / 2 + 0.0, [0, 1]),  # no -0.0
    ("bf16", torch.randint(-2, 2, (8, 3), generator=SEED).to(torch.bfloat16), [0, 1]),
    ("f16", torch.randint(-2, 2, (8, 3), generator=SEED).to(torch.float16), [0]),
    # up to 16 rows equal but for a zero's sign: the first in the input is kept, as on the CPU
    ("signed_zeros", torch.tensor([[0.0, 1.0], [-0.0, 1.0], [2.0, -0.0], [2.0, 0.0], [-0.0, -0.0],
                                   [0.0, 0.0], [-1.0, 0.0]]), [0, 1]),
    ("one_row", torch.tensor([[4.0, 5.0, 6.0]]), [0, 1]),
    ("empty_rows", torch.zeros(0, 3), [0]),
    ("empty_cols", torch.zeros(3, 0, dtype=torch.int64), [1, -1]),
    ("empty_3d", torch.zeros(2, 0, 3), [1]),
    ("empty_1d", torch.zeros(0), [0]),
]
IDS = [c[0] for c in CASES]
DIM_CASES = [(x, d) for _, x, dims in CASES for d in dims]
DIM_IDS = [f"{name}-dim{d}" for name, _, dims in CASES for d in dims]


def check(fn, x):
    """fn on tpu, natively, gives the CPU's tensors bit for bit."""
    want = fn(x)
    got = no_fallback(lambda: fn(tpu(x)))
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == "tpu"
        assert_bits_equal(g.cpu(), w)


@pytest.mark.parametrize("x, dim", DIM_CASES, ids=DIM_IDS)
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("counts", [False, True])
@pytest.mark.parametrize("consecutive", [False, True], ids=["unique", "consecutive"])
def test_unique_along_dim(x, dim, inverse, counts, consecutive):
    fn = torch.unique_consecutive if consecutive else torch.unique
    check(lambda v: fn(v, dim=dim, return_inverse=inverse, return_counts=counts), x)


@pytest.mark.parametrize("x", [
    torch.tensor([1.0, NAN, NAN, 2.0, 2.0, -0.0, 0.0, 0.0, -0.0, NAN]),
    torch.tensor([[1, 1, 2], [2, 2, 1]]), torch.tensor([True, True, False, True]),
    torch.zeros(0, 4), torch.tensor(5.0), torch.arange(10).flip(0),
], ids=["nan_signed_zeros", "2d", "bool", "empty", "scalar", "distinct"])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("counts", [False, True])
def test_unique_consecutive_flat(x, inverse, counts):
    check(lambda v: torch.unique_consecutive(v, return_inverse=inverse, return_counts=counts), x)


def test_aten_ops_return_inverse_and_counts_unasked():
    # along a dim the CPU kernels fill the inverse and counts whatever the flags say (and a
    # 1-D self with dim=0 takes the flat kernel, which leaves them empty)
    x = torch.tensor([[1, 2], [1, 2], [0, 3], [1, 2]])
    aten = torch.ops.aten
    for fn in [lambda v: aten.unique_dim(v, 0, True, False, False),
               lambda v: aten.unique_dim(v, 1, False, False, False),
               lambda v: aten.unique_dim_consecutive(v, 0, False, False),
               lambda v: aten.unique_consecutive(v, False, False, 0),
               lambda v: aten.unique_consecutive(v, False, True, -1),
               lambda v: aten.unique_consecutive(v[0], False, False, 0),
               lambda v: aten.unique_consecutive(v[0], False, False, -1),
               lambda v: aten._unique2(v, False, True, False)]:
        check(fn, x)


def test_nan_rows():
    # unique_consecutive: a row holding a NaN equals no row, itself included (at::equal)
    x = torch.tensor([[1.0, NAN], [1.0, NAN], [0.0, 0.0], [-0.0, 0.0], [NAN, 1.0], [2.0, 2.0], [2.0, 2.0]])
    for dim in [0, 1]:
        check(lambda v: torch.unique_consecutive(v, dim=dim, return_inverse=True, return_counts=True), x)
    # unique: the CPU's std::sort puts such rows where its algorithm happens to leave them, so
    # the call goes to the CPU (on purpose) and gives its results
    for dim in [0, 1]:
        want = torch.unique(x, dim=dim, return_inverse=True, return_counts=True)
        torchtpu.reset_fallback_stats()
        got = torch.unique(tpu(x), dim=dim, return_inverse=True, return_counts=True)
        assert fallback_ops(torchtpu.fallback_stats(), "unique_dim") == 1
        for g, w in zip(got, want):
            assert g.device.type == "tpu"
            assert_bits_equal(g.cpu(), w)


def test_signed_zero_ties_above_16_rows():
    rows = torch.randint(0, 3, (40, 3), generator=torch.Generator().manual_seed(8)).float() - 1
    # no ties in a zero's sign: native, though there are more than 16 rows
    check(lambda v: torch.unique(v, dim=0, return_inverse=True, return_counts=True), rows)
    # ties: which row the CPU's introsort keeps is its own; the call goes to the CPU
    mixed = rows.clone()
    mixed[::3] = torch.where(mixed[::3] == 0, -0.0, mixed[::3])  # every third row's zeros -0.0
    want = torch.unique(mixed, dim=0, return_inverse=True, return_counts=True)
    torchtpu.reset_fallback_stats()
    got = torch.unique(tpu(mixed), dim=0, return_inverse=True, return_counts=True)
    assert fallback_ops(torchtpu.fallback_stats(), "unique_dim") == 1
    for g, w in zip(got, want):
        assert_bits_equal(g.cpu(), w)


def test_errors_match_cpu():
    x = torch.randint(0, 3, (4, 3))
    for bad in [lambda v: torch.unique(v, dim=2), lambda v: torch.unique(v, dim=-3),
                lambda v: torch.unique_consecutive(v, dim=2),
                lambda v: torch.unique_consecutive(v, dim=-3),
                lambda v: torch.unique(v.sum(), dim=0), lambda v: torch.unique_consecutive(v.sum(), dim=-1),
                lambda v: torch.unique(v[:0], dim=1), lambda v: torch.unique_consecutive(v[:0], dim=1),
                lambda v: torch.unique(v[:0, :0], dim=0), lambda v: torch.unique(v[:0, :0], dim=5),
                lambda v: torch.unique_consecutive(v[:, :0, None][:0], dim=0),
                lambda v: torch.unique(v.to(torch.complex64), dim=0),
                lambda v: torch.unique_consecutive(v.to(torch.complex64), dim=1),
                lambda v: torch.unique_consecutive(v.to(torch.complex64)),
                lambda v: torch.unique_consecutive(v[0].to(torch.complex64), dim=0),
                lambda v: torch.unique(v.to(torch.complex64))]:
        same_error(bad, x)
    assert torch.equal(torch.unique(tpu(x), dim=0).cpu(), torch.unique(x, dim=0))  # still works


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_fused_mode(dim, request):
    torchtpu.set_eager_mode("fused")
    request.addfinalizer(lambda: torchtpu.set_eager_mode("strict"))
    x = torch.tensor([[1, 2], [1, 2], [0, 3], [1, 2], [0, 3], [0, 3]])

    def fn(v):
        y = v * 2 + 1  # deferred, then the read flushes it
        a = torch.unique(y, dim=dim, return_inverse=True, return_counts=True)
        b = torch.unique_consecutive(y, dim=dim, return_inverse=True, return_counts=True)
        return tuple(t + 0 for t in a + b)
    check(fn, x)
