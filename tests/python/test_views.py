# Views of tpu tensors alias real storage, as on cpu and cuda: every view op gives a tensor with
# the same untyped storage (same data_ptr) and the same sizes, strides and storage offset as
# the same view on cpu; in-place writes through a view show in the base and writes to the base
# show in the view; reshape of a non-viewable tensor copies, as on cpu; resize_, set_ and
# storage resizing (used by FSDP2) work; out-of-bounds as_strided and impossible views raise
# RuntimeError as on cpu, and the device keeps working afterwards.
import pytest
import torch

from conftest import no_fallback, storage_ptr

TPU0 = torch.device("tpu", 0)


def base2d():
    return torch.arange(24, dtype=torch.float32).reshape(4, 6)


def base3d():
    return torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)


def basec():
    return torch.view_as_complex(torch.arange(48, dtype=torch.float32).reshape(4, 6, 2))


# name -> (base maker, view function, writable through the view)
VIEWS = {
    "view": (base2d, lambda b: b.view(6, 4), True),
    "view_flat": (base2d, lambda b: b.view(-1), True),
    "slice_rows": (base2d, lambda b: b[1:3], True),
    "slice_cols": (base2d, lambda b: b[:, 2:5], True),
    "slice_step": (base2d, lambda b: b[::2, 1::3], True),
    "select_row": (base2d, lambda b: b[2], True),
    "select_col": (base2d, lambda b: b[:, 4], True),
    "transpose": (base2d, lambda b: b.transpose(0, 1), True),
    "t": (base2d, lambda b: b.t(), True),
    "permute": (base3d, lambda b: b.permute(2, 0, 1), True),
    "movedim": (base3d, lambda b: b.movedim(0, 2), True),
    "expand": (base2d, lambda b: b[1:2].expand(5, 6), False),
    "narrow": (base2d, lambda b: b.narrow(1, 2, 3), True),
    "unbind_rows": (base2d, lambda b: b.unbind(0)[2], True),
    "unbind_cols": (base2d, lambda b: b.unbind(1)[5], True),
    "as_strided": (base2d, lambda b: b.as_strided((3, 3), (5, 2), 1), True),
    "reshape": (base2d, lambda b: b.reshape(3, 8), True),
    "flatten": (base3d, lambda b: b.flatten(), True),
    "unsqueeze": (base2d, lambda b: b.unsqueeze(1), True),
    "squeeze": (base2d, lambda b: b.view(4, 1, 6).squeeze(1), True),
    "diagonal": (base2d, lambda b: b.diagonal(offset=1), True),
    "split": (base2d, lambda b: b.split(2, dim=1)[1], True),
    "chunk": (base2d, lambda b: b.chunk(2, dim=0)[1], True),
    "view_dtype": (base2d, lambda b: b.view(torch.int32), True),
    "unfold": (base2d, lambda b: b.unfold(1, 3, 3), True),
    "chain": (base3d, lambda b: b[1:].transpose(1, 2)[:, 1:, ::2].unsqueeze(0), True),
    "none_ellipsis": (base3d, lambda b: b[None, ..., 1:3], True),
    "view_as_real": (basec, torch.view_as_real, True),
    "real": (basec, lambda b: b.real, True),
    "imag": (basec, lambda b: b.imag, True),
}


def pair(name):
    make, fn, _ = VIEWS[name]
    bc = make()
    bt = bc.to("tpu")
    return bc, bt, fn


@pytest.mark.parametrize("name", [n for n, (make, _, _) in VIEWS.items() if make is not basec])
def test_view_is_made_on_the_device(name):
    make, fn, _ = VIEWS[name]
    base = make().to("tpu")
    no_fallback(lambda: fn(base))


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_shares_storage(name):
    bc, bt, fn = pair(name)
    vc, vt = fn(bc), fn(bt)
    assert vt.device == TPU0
    assert storage_ptr(vt) == storage_ptr(bt), "view does not alias the base's storage"
    assert vt.untyped_storage().nbytes() == bt.untyped_storage().nbytes()
    assert vt._is_view() == vc._is_view()
    assert (vt.shape, vt.stride(), vt.storage_offset()) == \
        (vc.shape, vc.stride(), vc.storage_offset())
    assert vt.data_ptr() - bt.data_ptr() == vc.data_ptr() - bc.data_ptr()
    assert torch.equal(vt.cpu(), vc)


@pytest.mark.parametrize("name", [n for n, (_, _, w) in VIEWS.items() if w])
def test_write_through_view_shows_in_base(name):
    bc, bt, fn = pair(name)
    fn(bc).mul_(-3)
    fn(bt).mul_(-3)
    assert torch.equal(bt.cpu(), bc)
    fn(bc).fill_(7)
    fn(bt).fill_(7)
    assert torch.equal(bt.cpu(), bc)


@pytest.mark.parametrize("name", list(VIEWS))
def test_write_to_base_shows_in_view(name):
    bc, bt, fn = pair(name)
    vc, vt = fn(bc), fn(bt)
    bc.add_(100)
    bt.add_(100)
    assert torch.equal(vt.cpu(), vc)
    bc.zero_()
    bt.zero_()
    assert torch.equal(vt.cpu(), vc)


def test_unbind_and_split_all_alias():
    bt = base2d().to("tpu")
    for parts in [bt.unbind(0), bt.unbind(1), bt.split(2, 1), bt.chunk(3, 0)]:
        for p in parts:
            assert storage_ptr(p) == storage_ptr(bt)
    cols = bt.unbind(1)
    cols[3].fill_(-1)
    ref = base2d()
    ref[:, 3] = -1
    assert torch.equal(bt.cpu(), ref)


def test_index_assignment_through_views():
    bc, bt = base2d(), base2d().to("tpu")
    for b in (bc, bt):
        b[1:3, ::2] = 5.0
        b[:, 0] = torch.arange(4, dtype=torch.float32) * 10     # cpu values into tpu: a copy
        b.t()[5, 1:] = -2.0
        b[3][2] = 99.0
    assert torch.equal(bt.cpu(), bc)


def test_views_of_views_keep_the_storage_alive():
    bt = base2d().to("tpu")
    v = bt[1:].t()
    ptr = storage_ptr(bt)
    del bt
    w = v[2:]
    assert storage_ptr(w) == ptr
    w.fill_(0)
    ref = base2d()[1:].t().clone()
    ref[2:] = 0
    assert torch.equal(v.cpu(), ref)


def test_reshape_of_noncontiguous_copies_like_cpu():
    bc, bt = base2d(), base2d().to("tpu")
    rc, rt = bc.t().reshape(-1), bt.t().reshape(-1)
    assert (storage_ptr(rc) == storage_ptr(bc)) == (storage_ptr(rt) == storage_ptr(bt))
    assert storage_ptr(rt) != storage_ptr(bt)
    assert torch.equal(rt.cpu(), rc)
    ct = bt.t().contiguous()
    assert storage_ptr(ct) != storage_ptr(bt) and ct.is_contiguous()
    assert torch.equal(ct.cpu(), bc.t())
    assert bt.contiguous() is bt


# ----------------------------------------------------------------------------- resize_, set_

def test_resize_():
    x = torch.empty(0, device="tpu")
    x.resize_(10, 10)
    assert x.shape == (10, 10) and x.device == TPU0
    assert x.untyped_storage().nbytes() >= 400
    x.fill_(2)
    assert x.sum().item() == 200
    y = torch.arange(6, dtype=torch.float32, device="tpu")
    y.resize_(3, 4)              # grows: the old elements stay in place
    assert y.shape == (3, 4)
    assert torch.equal(y.reshape(-1)[:6].cpu(), torch.arange(6, dtype=torch.float32))
    y.resize_(2)                 # shrinks: the storage is kept
    assert torch.equal(y.cpu(), torch.tensor([0.0, 1.0]))


def test_set_():
    bc, bt = base2d(), base2d().to("tpu")
    zt, zc = torch.empty(0, device="tpu"), torch.empty(0)
    zt.set_(bt)
    zc.set_(bc)
    assert storage_ptr(zt) == storage_ptr(bt) and zt.shape == bt.shape
    zt.set_(bt.untyped_storage(), 2, (2, 3), (6, 1))
    zc.set_(bc.untyped_storage(), 2, (2, 3), (6, 1))
    assert storage_ptr(zt) == storage_ptr(bt)
    assert torch.equal(zt.cpu(), zc)
    zt.fill_(-5)
    zc.fill_(-5)
    assert torch.equal(bt.cpu(), bc)
    wt = torch.empty(0, device="tpu")
    wt.set_(bt.untyped_storage())
    assert wt.shape == (24,) and torch.equal(wt.cpu(), bc.reshape(-1))


def test_untyped_storage_resize():
    # FSDP2 frees and re-allocates parameter storage in place
    ref = torch.randn(100)
    t = ref.to("tpu")
    s = t.untyped_storage()
    n = s.nbytes()
    assert n == 400
    s.resize_(0)
    assert t.untyped_storage().nbytes() == 0
    s.resize_(n)
    assert t.untyped_storage().nbytes() == n
    t.copy_(ref)
    assert torch.equal(t.cpu(), ref)
    assert torch.equal((t * 2).cpu(), ref * 2)


# ----------------------------------------------------------------------------- bad views

BAD_VIEWS = [
    (lambda d: torch.zeros(10, device=d).as_strided((10, 10), (10, 1)), "out of bounds"),
    (lambda d: torch.zeros(10, device=d).as_strided((2,), (1,), 9), "out of bounds"),
    (lambda d: torch.zeros(4, 6, device=d).t().view(24), "view size is not compatible"),
    (lambda d: torch.zeros(4, 6, device=d).view(5), "is invalid for input of size"),
    (lambda d: torch.zeros(3, device=d).view(torch.float64), "divisible by 2"),
]


@pytest.mark.parametrize("case", range(len(BAD_VIEWS)))
def test_bad_views_raise_like_cpu(case):
    f, phrase = BAD_VIEWS[case]
    with pytest.raises(RuntimeError, match=phrase):
        f("cpu")
    with pytest.raises(RuntimeError, match=phrase):
        f("tpu")
    # the device still works
    x = torch.arange(5.0, device="tpu")
    assert torch.equal((x * 2).cpu(), torch.arange(5.0) * 2)
