# Copies between cpu and tpu, and on tpu: .to("tpu") / .cpu() round trips are bit-exact for
# every supported dtype (random bit patterns, so NaN payloads, signed zeros, subnormals and
# infinities are covered), from and to non-contiguous tensors (transposed, step-sliced,
# expanded, offset); tpu->tpu copies; copy_ with dtype conversion (compared bit for bit with
# the same conversion on cpu); non_blocking copies; pinned memory; factory functions; .item().
import pytest
import torch

from conftest import assert_bits_equal, bits, storage_ptr

TPU0 = torch.device("tpu", 0)

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
          torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64]
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def sample(dtype, shape=(37, 53), seed=0):
    """A cpu tensor of dtype with random bit patterns (every float class included)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.view_as_complex(sample(torch.float32, tuple(shape) + (2,), seed))
    if dtype.is_floating_point:
        itype = _INT_OF_SIZE[torch.finfo(dtype).bits // 8]
        info = torch.iinfo(itype)
        return torch.randint(info.min, info.max, shape, dtype=itype, generator=g).view(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, dtype=dtype, generator=g)


def special_values(dtype):
    f = torch.finfo(dtype)
    vals = torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"),
                         f.max, -f.max, f.tiny, f.smallest_normal / 4, -f.smallest_normal / 4,
                         f.eps, 1 / 3], dtype=torch.float64).to(dtype)
    # a NaN with a payload and the sign bit set
    itype = _INT_OF_SIZE[vals.element_size()]
    payload_nan = {torch.float32: -4194303, torch.float64: -2251799813685247,
                   torch.bfloat16: -63, torch.float16: -511}[dtype]
    nan = torch.tensor([payload_nan], dtype=itype).view(dtype)
    assert torch.isnan(nan).all()
    return torch.cat([vals, nan])


# ----------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_bit_exact(dtype):
    x = sample(dtype)
    t = x.to("tpu")
    assert t.device == TPU0 and t.dtype == dtype and t.shape == x.shape
    assert t.is_contiguous()
    assert_bits_equal(t.cpu(), x)
    assert_bits_equal(t.to("cpu"), x)
    assert_bits_equal(x.tpu().to(torch.device("cpu")), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_roundtrip_special_values(dtype):
    x = special_values(dtype)
    assert_bits_equal(x.to("tpu").cpu(), x)
    assert_bits_equal(torch.tensor(x.tolist(), dtype=dtype, device="tpu").cpu(),
                      torch.tensor(x.tolist(), dtype=dtype))


def test_roundtrip_shapes():
    for x in [torch.tensor(3.25), torch.empty(0, 5), torch.ones(1), sample(torch.int8, (7,)),
              sample(torch.float32, (3, 1, 4, 1, 5)), sample(torch.float32, (3_000_001,))]:
        t = x.to("tpu")
        assert t.shape == x.shape and t.device == TPU0
        assert_bits_equal(t.cpu(), x)


def test_blocking_copy_snapshots_the_source():
    # after a blocking .to("tpu") returns, the host source may be changed at once
    x = torch.randn(1 << 20)
    ref = x.clone()
    t = x.to("tpu")
    x.fill_(0)
    assert_bits_equal(t.cpu(), ref)
    # and the tpu tensor may be changed right after a blocking .cpu()
    back = t.cpu()
    t.fill_(1)
    assert_bits_equal(back, ref)


# ----------------------------------------------------------------------------- non-contiguous

NONCONTIG = {
    "transposed": lambda x: x.t(),
    "step_sliced": lambda x: x[1::3, ::2],
    "expanded": lambda x: x[:, :1].expand(-1, 9),
    "offset": lambda x: x[5:, 7:],
    "permuted_3d": lambda x: x.reshape(37, 53, 1).expand(37, 53, 2).permute(2, 1, 0),
    "column": lambda x: x[:, 3],
}


@pytest.mark.parametrize("kind", list(NONCONTIG))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_noncontiguous_cpu_to_tpu(dtype, kind):
    src = NONCONTIG[kind](sample(dtype, seed=1))
    assert_bits_equal(src.to("tpu").cpu(), src.contiguous())


@pytest.mark.parametrize("kind", list(NONCONTIG))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex64], ids=str)
def test_noncontiguous_tpu_to_cpu(dtype, kind):
    x = sample(dtype, seed=2)
    t = x.to("tpu")
    v = NONCONTIG[kind](t)
    assert v.device == TPU0
    assert_bits_equal(v.cpu(), NONCONTIG[kind](x).contiguous())
    assert_bits_equal(v.contiguous().cpu(), NONCONTIG[kind](x).contiguous())
    assert_bits_equal(v.clone().cpu(), NONCONTIG[kind](x).contiguous())


def test_to_preserves_dense_strides_like_cpu():
    x = sample(torch.float32, (6, 10))
    for src in [x.t(), x.reshape(2, 3, 10).permute(2, 0, 1)]:
        t = src.to("tpu")
        assert t.stride() == src.clone().stride()
        assert t.shape == src.shape
        assert_bits_equal(t.cpu(), src)


# ----------------------------------------------------------------------------- tpu -> tpu

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tpu_to_tpu_copies(dtype):
    x = sample(dtype, seed=3)
    a = x.to("tpu")
    b = a.clone()
    assert b.device == TPU0 and storage_ptr(b) != storage_ptr(a)
    assert_bits_equal(b.cpu(), x)
    c = torch.empty_like(a)
    c.copy_(a)
    assert_bits_equal(c.cpu(), x)
    # into a non-contiguous destination, and from a non-contiguous source
    d = torch.empty(53, 37, dtype=dtype, device="tpu").t()
    d.copy_(a)
    assert_bits_equal(d.cpu(), x)
    e = torch.empty(53, 37, dtype=dtype, device="tpu")
    e.copy_(a.t())
    assert_bits_equal(e.cpu(), x.t())
    # the copies are independent of the original
    a.zero_()
    assert_bits_equal(b.cpu(), x)
    assert_bits_equal(c.cpu(), x)


def test_copy_cpu_into_noncontiguous_tpu_view():
    base = torch.zeros(8, 10, device="tpu")
    src = torch.arange(20, dtype=torch.float32).reshape(5, 4)
    base[1::2, 2:6].copy_(src[1:, :])   # (4, 4) strided cpu source into a strided tpu view
    ref = torch.zeros(8, 10)
    ref[1::2, 2:6].copy_(src[1:, :])
    assert torch.equal(base.cpu(), ref)


# ----------------------------------------------------------------------------- dtype changes

def _conversion_source(dtype):
    g = torch.Generator().manual_seed(4)
    if dtype == torch.bool:
        return torch.randint(0, 2, (41, 17), generator=g).bool()
    if dtype.is_floating_point:
        x = torch.randn(41, 17, generator=g, dtype=torch.float64) * 60
        x[0, :4] = torch.tensor([1e5, -1e5, 0.5, -2.5])   # overflow for f16, ties
        return x.to(dtype)
    if dtype.is_complex:
        return torch.randn(41, 17, generator=g, dtype=dtype)
    return torch.randint(-300, 300, (41, 17), generator=g).to(dtype)


CONVERSIONS = [(torch.float32, torch.bfloat16), (torch.float32, torch.float16),
               (torch.float64, torch.float32), (torch.bfloat16, torch.float32),
               (torch.float32, torch.int32), (torch.int64, torch.float32),
               (torch.int32, torch.int8), (torch.int32, torch.uint8), (torch.bool, torch.float32),
               (torch.float32, torch.bool), (torch.float32, torch.complex64),
               (torch.int16, torch.float64)]


@pytest.mark.parametrize("src_dtype,dst_dtype", CONVERSIONS, ids=str)
def test_copy_between_dtypes(src_dtype, dst_dtype):
    src = _conversion_source(src_dtype)
    ref = torch.empty(src.shape, dtype=dst_dtype).copy_(src)
    # tpu -> tpu with conversion
    dst = torch.empty(src.shape, dtype=dst_dtype, device="tpu")
    dst.copy_(src.to("tpu"))
    assert_bits_equal(dst.cpu(), ref)
    # cpu -> tpu and tpu -> cpu with conversion
    dst2 = torch.empty(src.shape, dtype=dst_dtype, device="tpu")
    dst2.copy_(src)
    assert_bits_equal(dst2.cpu(), ref)
    dst3 = torch.empty(src.shape, dtype=dst_dtype)
    dst3.copy_(src.to("tpu"))
    assert_bits_equal(dst3, ref)
    # .to(dtype) on tpu, and .to(device, dtype) in one call
    assert_bits_equal(src.to("tpu").to(dst_dtype).cpu(), src.to(dst_dtype))
    assert_bits_equal(src.to("tpu", dst_dtype).cpu(), src.to(dst_dtype))


# ----------------------------------------------------------------------------- async, pinned

def test_non_blocking_copies():
    x = torch.randn(512, 1024)
    t = x.to("tpu", non_blocking=True)
    torch.tpu.synchronize()
    assert t.device == TPU0
    assert_bits_equal(t.cpu(), x)
    y = (t * 2).to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    assert_bits_equal(y, x * 2)
    d = torch.empty(512, 1024, device="tpu")
    d.copy_(x, non_blocking=True)
    h = torch.empty(512, 1024)
    h.copy_(d, non_blocking=True)
    torch.tpu.synchronize()
    assert_bits_equal(h, x)


def test_pinned_memory_source():
    x = torch.randn(1000)
    p = x.pin_memory()
    assert torch.equal(p, x)
    t = p.to("tpu", non_blocking=True)
    torch.tpu.synchronize()
    assert_bits_equal(t.cpu(), x)


# ----------------------------------------------------------------------------- factories

def test_factories_match_cpu():
    cases = [
        lambda d: torch.zeros(3, 5, device=d),
        lambda d: torch.ones(4, dtype=torch.int16, device=d),
        lambda d: torch.full((2, 3), -1.5, dtype=torch.bfloat16, device=d),
        lambda d: torch.arange(17, device=d),
        lambda d: torch.arange(0.0, 2.0, 0.125, device=d),
        lambda d: torch.linspace(-1, 1, 11, device=d),
        lambda d: torch.eye(4, 6, device=d),
        lambda d: torch.tensor([[1, 2], [3, 4]], dtype=torch.uint8, device=d),
        lambda d: torch.tensor([True, False, True], device=d),
        lambda d: torch.zeros_like(torch.empty(2, 3, device=d), dtype=torch.float64),
        lambda d: torch.full_like(torch.empty(3, device=d), 7),
    ]
    for f in cases:
        t, c = f("tpu"), f("cpu")
        assert t.device == TPU0
        assert_bits_equal(t.cpu(), c)
    e = torch.empty(6, 7, dtype=torch.float16, device="tpu")
    assert e.shape == (6, 7) and e.dtype == torch.float16 and e.device == TPU0
    es = torch.empty_strided((3, 4), (1, 3), device="tpu")
    assert es.stride() == (1, 3) and es.device == TPU0


def test_item_and_tolist():
    assert torch.tensor(3.5, device="tpu").item() == 3.5
    assert torch.tensor(-7, device="tpu").item() == -7
    assert torch.tensor(True, device="tpu").item() is True
    assert torch.tensor(2 ** 40 + 1, device="tpu").item() == 2 ** 40 + 1
    x = torch.arange(12, device="tpu").reshape(3, 4)
    assert x[2, 1].item() == 9
    assert x.t()[1, 2].item() == 9
    assert x.tolist() == torch.arange(12).reshape(3, 4).tolist()
    assert bits(torch.tensor(float("nan"), device="tpu").cpu()).item() == \
        bits(torch.tensor(float("nan"))).item()
