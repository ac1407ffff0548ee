# Device memory: the chip's HBM capacity is enforced (allocating past it raises
# torch.OutOfMemoryError naming the requested, in-use and total bytes and the chip, even though
# the host has room), the device recovers once tensors are freed, host memory is committed
# lazily (an unwritten 3 GiB tensor costs no host RAM), and the caching allocator's statistics
# (memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved, memory_stats,
# reset_peak_memory_stats, empty_cache) move as tensors are created and freed.
import gc
import re

import pytest
import torch

from conftest import GiB, MiB, run_json

TPU0 = torch.device("tpu", 0)


def byte_forms(n):
    forms = {str(n), f"{n:,}", f"{n:_}"}
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("GB", 1e9)):
        v = n / size
        for f in (f"{v:.2f}", f"{v:.1f}", f"{v:g}"):
            forms |= {f"{f} {unit}", f"{f}{unit}"}
    return forms


def mentions_bytes(msg, n):
    """msg names the byte count n, as an integer or in GiB/MiB/GB."""
    return any(re.search(r"(?<![\d.,_])" + re.escape(f) + r"(?![\d])", msg)
               for f in byte_forms(n))


def settle():
    gc.collect()
    torch.tpu.synchronize()


@pytest.fixture
def clean():
    settle()
    torch.tpu.empty_cache()
    yield
    settle()
    torch.tpu.empty_cache()


def test_mentions_bytes_helper():
    assert mentions_bytes("requested 15032385536 bytes", 14 * GiB)
    assert mentions_bytes("Tried to allocate 14.00 GiB", 14 * GiB)
    assert not mentions_bytes("13 GiB in use", 3 * GiB)
    assert not mentions_bytes("150323855360 bytes", 14 * GiB)


# ----------------------------------------------------------------------------- OOM

_PRECISE_OOM = """
import torch
GiB = 1 << 30

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

out = {}
torch.zeros(1, device="tpu")
torch.tpu.synchronize()
out["base"] = torch.tpu.memory_allocated()
r0 = rss()
a = torch.empty(3 * GiB, dtype=torch.uint8, device="tpu")      # never written
torch.tpu.synchronize()
out["rss_growth"] = rss() - r0
out["alloc_a"] = torch.tpu.memory_allocated()
try:
    torch.empty(14 * GiB, dtype=torch.uint8, device="tpu")
    out["msg"] = None
except torch.OutOfMemoryError as e:
    out["msg"] = str(e)
    out["is_runtime_error"] = isinstance(e, RuntimeError)
out["num_ooms"] = torch.tpu.memory_stats()["num_ooms"]
out["alloc_after_oom"] = torch.tpu.memory_allocated()
del a
b = torch.empty(14 * GiB, dtype=torch.uint8, device="tpu")
out["alloc_b"] = torch.tpu.memory_allocated()
x = torch.arange(10.0, device="tpu")
out["works"] = (x * 2).sum().item()
emit(out)
"""


def test_oom_message_names_requested_in_use_total_and_chip():
    out = run_json(_PRECISE_OOM)
    base = out["base"]
    assert base < MiB
    assert out["alloc_a"] - base == 3 * GiB
    assert out["rss_growth"] < 256 * MiB, "an unwritten tensor committed host memory"
    msg = out["msg"]
    assert msg is not None, "3 GiB + 14 GiB on a 16 GiB v5e did not run out of memory"
    assert out["is_runtime_error"]
    assert mentions_bytes(msg, 14 * GiB), f"requested bytes missing: {msg}"
    assert mentions_bytes(msg, 3 * GiB) or mentions_bytes(msg, out["alloc_a"]), \
        f"in-use bytes missing: {msg}"
    assert mentions_bytes(msg, 16 * GiB), f"total bytes missing: {msg}"
    assert "TPU v5e" in msg, msg
    assert out["num_ooms"] == 1
    assert out["alloc_after_oom"] == out["alloc_a"]
    assert out["alloc_b"] - base == 14 * GiB
    assert out["works"] == 90.0


def test_oom_past_capacity_then_recovers(clean):
    props = torch.tpu.get_device_properties(0)
    total = props.total_memory
    ooms = torch.tpu.memory_stats()["num_ooms"]
    before = torch.tpu.memory_allocated()
    n = total + GiB
    with pytest.raises(torch.OutOfMemoryError) as ei:
        torch.empty(n, dtype=torch.uint8, device="tpu")
    msg = str(ei.value)
    assert isinstance(ei.value, RuntimeError)
    assert mentions_bytes(msg, n), msg
    assert mentions_bytes(msg, total), msg
    assert props.name.split(" (")[0] in msg, msg           # "TPU v5e"
    assert torch.tpu.memory_stats()["num_ooms"] == ooms + 1
    assert torch.tpu.memory_allocated() == before
    # a float32 tensor whose bytes (not elements) exceed the capacity
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(total // 4 + MiB, dtype=torch.float32, device="tpu")
    # the device still works, including a large allocation
    big = torch.empty(GiB, dtype=torch.uint8, device="tpu")
    assert big.device == TPU0
    x = torch.randn(100, device="tpu")
    assert torch.equal((x + 1).cpu(), x.cpu() + 1)
    del big


_FILL_THEN_FREE_ONE = """
import torch
MiB = 1 << 20

def fits(nbytes):
    try:
        torch.empty(nbytes, dtype=torch.uint8, device="tpu")  # freed at once
        return True
    except torch.OutOfMemoryError:
        return False

out = {}
free = torch.tpu.get_device_properties(0).total_memory - torch.tpu.memory_reserved()
chunk = int(free * 0.3) // MiB * MiB
held = [torch.empty(chunk, dtype=torch.uint8, device="tpu") for _ in range(3)]  # 90 %
torch.tpu.synchronize()
out["held"] = torch.tpu.memory_allocated() >= 3 * chunk
out["fits_20_full"] = fits(int(free * 0.2))
del held[0]
torch.tpu.synchronize()
extra = torch.empty(int(free * 0.2), dtype=torch.uint8, device="tpu")
out["fits_25_after"] = fits(int(free * 0.25))
del held, extra
torch.tpu.synchronize()
out["fits_90_freed"] = fits(int(free * 0.9))
x = torch.arange(10.0, device="tpu")
out["works"] = (x * 2).sum().item()
emit(out)
"""


def test_fill_hbm_then_free_one():
    # in a fresh process: tensors other tests leave alive may split this one's free HBM
    out = run_json(_FILL_THEN_FREE_ONE)
    assert out["held"]
    assert not out["fits_20_full"], "20 % more fit in a chip 90 % full"
    assert not out["fits_25_after"], "25 % fit beside 80 % in use"
    assert out["fits_90_freed"], "90 % did not fit once everything was freed"
    assert out["works"] == 90.0


def fill_hbm_leaving_no_block_of(nbytes):
    """Unwritten tensors filling the chip's HBM until no free block of nbytes is left.

    Tensors other tests left alive may sit anywhere in HBM, splitting its free space, so one
    tensor of (total - reserved - a little) need not fit: fill greedily, halving the size
    after each allocation that does not fit, until one of nbytes does not fit."""
    held = []
    size = torch.tpu.get_device_properties(0).total_memory - torch.tpu.memory_reserved()
    while size >= nbytes:
        try:
            held.append(torch.empty(size, dtype=torch.uint8, device="tpu"))
        except torch.OutOfMemoryError:
            if size == nbytes:
                break
            size = max(size // 2, nbytes)
    return held


def test_compiled_call_out_of_memory_then_recovers(clean):
    # a compiled call whose outputs do not fit raises torch.OutOfMemoryError from its
    # replay (torchtpu._C._replay), like an eager op, and replays once memory is free
    x = torch.randn(1024, 1024, device="tpu")  # 4 MiB, as is the result
    f = torch.compile(lambda x: x * 2 + 1, backend="tpu")
    f(x)
    torch.testing.assert_close(f(x).cpu(), x.cpu() * 2 + 1)  # a replay
    settle()
    torch.tpu.empty_cache()
    held = fill_hbm_leaving_no_block_of(2 * MiB)  # the result needs 4 MiB
    with pytest.raises(torch.OutOfMemoryError) as ei:
        f(x)
    first_line = str(ei.value).splitlines()[0]      # not the live tensors' list below it
    assert first_line.startswith("compiled fused graph of 2 ops"), first_line  # the plan
    del held
    settle()
    torch.testing.assert_close(f(x).cpu(), x.cpu() * 2 + 1)


# ----------------------------------------------------------------------------- statistics

def test_memory_allocated_tracks_tensors(clean):
    a0 = torch.tpu.memory_allocated()
    nbytes = 4 * MiB
    x = torch.empty(nbytes // 4, dtype=torch.float32, device="tpu")
    settle()
    a1 = torch.tpu.memory_allocated()
    assert nbytes <= a1 - a0 <= nbytes + 2 * MiB
    y = x * 2                                   # an op result is allocated too
    settle()
    a2 = torch.tpu.memory_allocated()
    assert a2 - a1 >= nbytes
    assert torch.tpu.memory_reserved() >= a2
    v = x.view(-1, 4)                           # a view allocates nothing
    settle()
    assert torch.tpu.memory_allocated() == a2
    del x, v
    settle()
    assert torch.tpu.memory_allocated() == a2 - (a1 - a0)
    del y
    settle()
    assert torch.tpu.memory_allocated() == a0


def test_device_argument_forms():
    x = torch.empty(MiB, dtype=torch.uint8, device="tpu")
    settle()
    m = torch.tpu.memory_allocated()
    assert torch.tpu.memory_allocated(0) == m
    assert torch.tpu.memory_allocated("tpu:0") == m
    assert torch.tpu.memory_allocated(TPU0) == m
    assert torch.tpu.memory_reserved(0) == torch.tpu.memory_reserved()
    assert torch.tpu.memory_stats(0)["allocated_bytes.all.current"] == m
    del x


def test_reserved_is_cached_until_empty_cache(clean):
    r0 = torch.tpu.memory_reserved()
    nbytes = 64 * MiB
    x = torch.empty(nbytes, dtype=torch.uint8, device="tpu")
    settle()
    r1 = torch.tpu.memory_reserved()
    assert r1 - r0 >= nbytes
    del x
    settle()
    r2 = torch.tpu.memory_reserved()
    assert r2 == r1, "freed block was not kept in the cache"
    # the cached block is reused: reserved does not grow for a same-size tensor
    y = torch.empty(nbytes, dtype=torch.uint8, device="tpu")
    settle()
    assert torch.tpu.memory_reserved() == r2
    del y
    settle()
    torch.tpu.empty_cache()
    r3 = torch.tpu.memory_reserved()
    assert r3 <= r2 - nbytes
    assert r3 >= torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_reserved() >= r1


def test_peak_and_reset_peak(clean):
    torch.tpu.reset_peak_memory_stats()
    cur = torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() == cur
    nbytes = 32 * MiB
    x = torch.empty(nbytes, dtype=torch.uint8, device="tpu")
    del x
    settle()
    assert torch.tpu.memory_allocated() == cur
    peak = torch.tpu.max_memory_allocated()
    assert peak >= cur + nbytes
    assert torch.tpu.max_memory_reserved() >= peak
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == cur
    assert torch.tpu.max_memory_reserved() == torch.tpu.memory_reserved()


def test_memory_stats_keys_agree_with_functions(clean):
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="tpu")
    settle()
    s = torch.tpu.memory_stats()
    assert isinstance(s, dict)
    for key in ["allocated_bytes.all.current", "allocated_bytes.all.peak",
                "reserved_bytes.all.current", "reserved_bytes.all.peak", "num_ooms"]:
        assert key in s, key
        assert isinstance(s[key], int), key
    assert s["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert s["allocated_bytes.all.peak"] == torch.tpu.max_memory_allocated()
    assert s["reserved_bytes.all.current"] == torch.tpu.memory_reserved()
    assert s["reserved_bytes.all.peak"] == torch.tpu.max_memory_reserved()
    assert s["allocated_bytes.all.current"] >= 8 * MiB
    del x


def test_per_process_memory_fraction_caps_what_the_process_reserves(clean):
    # torch.tpu.set_per_process_memory_fraction, as torch.cuda's: the cap counts reserved
    # bytes (live and cached); past it the cache is released, then torch.OutOfMemoryError
    # names the cap; the device works on, and 1.0 lifts the cap
    total = torch.tpu.get_device_properties(0).total_memory
    assert torch.tpu.get_per_process_memory_fraction() == 1.0
    fraction = (torch.tpu.memory_reserved() + 64 * MiB) / total  # 64 MiB more than now
    try:
        torch.tpu.set_per_process_memory_fraction(fraction, "tpu:0")
        assert torch.tpu.get_per_process_memory_fraction(0) == pytest.approx(fraction, abs=1e-9)
        x = torch.empty(48 * MiB, dtype=torch.uint8, device="tpu")
        with pytest.raises(torch.OutOfMemoryError, match=r"may reserve [0-9.]+ [GM]iB of it "
                           r"\(set_per_process_memory_fraction\)") as err:
            torch.empty(32 * MiB, dtype=torch.uint8, device="tpu")
        assert mentions_bytes(str(err.value), 32 * MiB), err.value
        del x  # cached: 48 + 32 is past the cap, so the cache is released for the next one
        flushes = torch.tpu.memory_stats()["num_alloc_retries"]
        y = torch.ones(8 * MiB, device="tpu")  # 32 MiB
        assert y.sum().item() == 8 * MiB
        assert torch.tpu.memory_stats()["num_alloc_retries"] == flushes + 1
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    assert torch.tpu.get_per_process_memory_fraction() == 1.0
    del y
    z = torch.empty(256 * MiB, dtype=torch.uint8, device="tpu")  # uncapped again
    del z
    with pytest.raises(TypeError, match="must be `float`"):
        torch.tpu.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="Allowed range: 0~1"):
        torch.tpu.set_per_process_memory_fraction(1.5)
