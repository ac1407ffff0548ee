# The torch.tpu device module and its PyTorch integration, checked against torch.cuda's API:
# registration (autoload through `import torch` alone, or `import torchtpu`), availability and
# device count, torch.accelerator, Tensor.tpu()/is_tpu and Module.tpu(), device properties for
# the default chip and for every chip generation (one subprocess per TORCHTPU_CHIP value),
# streams and events, and the per-device random number generator.
import pytest
import torch

from conftest import GiB, check_json, run_python_many

TPU0 = torch.device("tpu", 0)


# ----------------------------------------------------------------------------- registration

_AUTOLOAD = """
import sys
import torch                      # nothing else: the torch.backends entry point loads torchtpu
t = torch.zeros(3, device="tpu")
p = torch.tpu.get_device_properties(0)
emit({
    "backend_name": torch._C._get_privateuse1_backend_name(),
    "device": str(t.device),
    "torchtpu_loaded": "torchtpu" in sys.modules,
    "has_tpu_module": hasattr(torch, "tpu"),
    "count": torch.tpu.device_count(),
    "chip": p.chip, "name": p.name, "total_memory": p.total_memory,
    "value": (t + 1).cpu().tolist(),
})
"""

_EXPLICIT = """
import torch
before = None
try:
    torch.zeros(1, device="tpu")
    before = "worked"
except Exception as e:
    before = type(e).__name__
import torchtpu
t = torch.ones(2, device="tpu")
emit({"before": before, "device": str(t.device), "value": (t * 3).cpu().tolist(),
      "has_tpu_module": hasattr(torch, "tpu")})
"""


@pytest.fixture(scope="module")
def registration_runs():
    return run_python_many([(_AUTOLOAD, None),
                            (_EXPLICIT, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})])


def test_import_torch_alone_registers_tpu_with_default_chip(registration_runs):
    out = check_json(registration_runs[0])
    assert out["backend_name"] == "tpu"
    assert out["device"] == "tpu:0"
    assert out["torchtpu_loaded"] and out["has_tpu_module"]
    assert out["value"] == [1.0, 1.0, 1.0]
    # defaults: one v5e chip with 16 GiB of HBM
    assert out["count"] == 1
    assert out["chip"] == "v5e"
    assert out["total_memory"] == 16 * GiB
    assert out["name"].startswith("TPU v5e") and "virtual" in out["name"]


def test_explicit_import_torchtpu_without_autoload(registration_runs):
    out = check_json(registration_runs[1])
    # with autoload disabled, "tpu" is unknown until torchtpu is imported
    assert out["before"] != "worked"
    assert out["device"] == "tpu:0"
    assert out["value"] == [3.0, 3.0]
    assert out["has_tpu_module"]


# ----------------------------------------------------------------------------- basics

def test_availability_and_current_device():
    assert torch.tpu.is_available() is True
    assert torch.tpu.device_count() == 1          # the test process runs with the defaults
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.set_device("tpu:0")
    torch.tpu.set_device(TPU0)
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    torch.tpu.synchronize()
    torch.tpu.synchronize(0)
    torch.tpu.synchronize("tpu:0")


def test_out_of_memory_error_is_torchs():
    # `except torch.cuda.OutOfMemoryError:` ported as `except torch.tpu.OutOfMemoryError:`
    assert torch.tpu.OutOfMemoryError is torch.OutOfMemoryError is torch.cuda.OutOfMemoryError
    with pytest.raises(torch.tpu.OutOfMemoryError, match="out of memory"):
        torch.empty(1 << 50, dtype=torch.uint8, device="tpu")


def test_default_device_index_is_zero():
    assert torch.zeros(2, device="tpu").device == TPU0
    assert torch.device("tpu").type == "tpu"
    assert str(torch.empty(1, device="tpu:0").device) == "tpu:0"


def test_torch_accelerator_reports_tpu():
    acc = torch.accelerator.current_accelerator()
    assert acc is not None and acc.type == "tpu"
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.current_device_index() == 0
    s = torch.accelerator.current_stream()
    assert s.device.type == "tpu"
    torch.accelerator.synchronize()


def test_tensor_methods():
    c = torch.arange(6, dtype=torch.float32)
    t = c.tpu()
    assert t.device == TPU0
    assert t.is_tpu and not c.is_tpu
    assert not t.is_cpu
    assert c.tpu(0).device == TPU0
    assert t.tpu() is t                       # already there: no copy, like .cuda()
    assert t.untyped_storage().device.type == "tpu"
    assert torch.equal(t.cpu(), c)


def test_module_tpu_moves_parameters_and_buffers():
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    ref = [p.detach().clone() for p in m.parameters()]
    assert m.tpu() is m
    for p, r in zip(m.parameters(), ref):
        assert p.device == TPU0
        assert torch.equal(p.detach().cpu(), r)
    for b in m.buffers():
        assert b.device == TPU0
    m.eval()
    x = torch.randn(5, 4)
    with torch.tpu.precision("highest"):  # f32 matmul as on CPU (DEFAULT is one bf16 pass)
        out = m(x.tpu())
    assert out.device == TPU0
    m_cpu = m.cpu()
    torch.testing.assert_close(out.cpu(), m_cpu(x), rtol=1e-5, atol=1e-5)


def test_device_properties_of_the_test_process_chip():
    p = torch.tpu.get_device_properties(0)
    assert p.chip == "v5e"
    assert p.name.startswith("TPU v5e") and "virtual" in p.name
    assert p.total_memory == 16 * GiB
    assert torch.tpu.get_device_name() == p.name
    assert torch.tpu.get_device_name(0) == p.name
    assert torch.tpu.get_device_properties(TPU0).name == p.name
    assert torch.tpu.get_device_properties("tpu:0").total_memory == p.total_memory


# ----------------------------------------------------------------------------- generations

# (HBM bytes choices, HBM B/s range, peak bf16 FLOP/s choices, MXU dim, MXU count choices)
# from shared/reference/tpu-hardware.md; where sources disagree every published value is
# accepted. v7 may be modelled per chip (2 TensorCores) or per TensorCore device.
_GENERATIONS = {
    "v4":  dict(hbm=[32 * GiB], bw=(1.15e12, 1.25e12), peak=[275e12], dim=128, mxus=[4, 8]),
    "v5e": dict(hbm=[16 * GiB], bw=(0.79e12, 0.87e12), peak=[197e12], dim=128, mxus=[4]),
    "v5p": dict(hbm=[95 * GiB, 96 * GiB], bw=(2.4e12, 2.85e12), peak=[459e12], dim=128,
                mxus=[4, 8]),
    "v6e": dict(hbm=[32 * GiB], bw=(1.6e12, 1.66e12), peak=[918e12, 920e12], dim=256,
                mxus=[2]),
    "v7":  dict(hbm=[192 * GiB, 96 * GiB], bw=(7.2e12, 7.45e12), peak=[2307e12, 1153.5e12],
                dim=256, mxus=[2, 4]),
}

_PROPS = """
import torch
p = torch.tpu.get_device_properties(0)
out = {k: getattr(p, k, None)
       for k in ["name", "total_memory", "hbm_bandwidth", "peak_bf16_flops", "mxu_count",
                 "mxu_dim", "chip"]}
out["device_name"] = torch.tpu.get_device_name(0)
out["count"] = torch.tpu.device_count()
x = torch.arange(6.0, device="tpu")
out["compute"] = (x * 2).cpu().tolist()
try:
    torch.empty(p.total_memory + (1 << 30), dtype=torch.uint8, device="tpu")
    out["oom"] = None
except torch.OutOfMemoryError as e:
    out["oom"] = str(e)
emit(out)
"""


@pytest.fixture(scope="module")
def generation_runs():
    names = list(_GENERATIONS)
    res = run_python_many([(_PROPS, {"TORCHTPU_CHIP": g}) for g in names])
    return dict(zip(names, res))


@pytest.mark.parametrize("gen", list(_GENERATIONS))
def test_properties_per_generation(generation_runs, gen):
    out = check_json(generation_runs[gen])
    exp = _GENERATIONS[gen]
    assert out["chip"] == gen
    assert out["name"].startswith(f"TPU {gen}") and "virtual" in out["name"], out["name"]
    assert out["device_name"] == out["name"]
    assert out["count"] == 1
    assert out["total_memory"] in exp["hbm"], out["total_memory"]
    lo, hi = exp["bw"]
    assert lo <= out["hbm_bandwidth"] <= hi, out["hbm_bandwidth"]
    assert any(abs(out["peak_bf16_flops"] - v) <= 0.01 * v for v in exp["peak"]), \
        out["peak_bf16_flops"]
    if gen == "v7":  # per chip or per TensorCore, but consistently
        per_chip = out["total_memory"] == 192 * GiB
        assert (abs(out["peak_bf16_flops"] - 2307e12) <= 0.01 * 2307e12) == per_chip
    assert out["mxu_dim"] == exp["dim"]
    assert out["mxu_count"] in exp["mxus"]
    assert out["compute"] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    # the HBM capacity is the chip's: one GiB more is out of memory, naming the chip
    assert out["oom"] is not None, "allocating total_memory + 1 GiB did not fail"
    assert f"TPU {gen}" in out["oom"], out["oom"]


# ----------------------------------------------------------------------------- streams/events

def test_default_and_current_stream():
    ds = torch.tpu.default_stream()
    cs = torch.tpu.current_stream()
    assert isinstance(ds, torch.Stream)
    assert cs == ds
    assert ds.device == TPU0
    assert torch.tpu.current_stream(0) == ds
    assert torch.tpu.default_stream(TPU0) == ds


def test_stream_context_switches_current_stream():
    ds = torch.tpu.default_stream()
    s1 = torch.tpu.Stream()
    s2 = torch.tpu.Stream()
    assert s1.device == TPU0
    assert s1 != ds and s2 != s1
    x = torch.arange(1000, dtype=torch.float32, device="tpu")
    with torch.tpu.stream(s1):
        assert torch.tpu.current_stream() == s1
        y = x * 2
        with torch.tpu.stream(s2):
            assert torch.tpu.current_stream() == s2
        assert torch.tpu.current_stream() == s1
    assert torch.tpu.current_stream() == ds
    s1.synchronize()
    assert s1.query()
    assert torch.equal(y.cpu(), torch.arange(1000, dtype=torch.float32) * 2)


def test_event_record_synchronize_query():
    x = torch.randn(64, 64, device="tpu")
    e = torch.tpu.Event()
    with torch.tpu.precision("highest"):
        y = x @ x
    e.record()
    e.synchronize()
    assert e.query() is True
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-5, atol=1e-4)


def test_event_elapsed_time():
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    x = torch.randn(128, 128, device="tpu")
    start.record()
    for _ in range(5):
        x = torch.tanh(x @ x)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float)
    assert ms >= 0.0


def test_cross_stream_wait_orders_work():
    s = torch.tpu.Stream()
    x = torch.arange(4096, dtype=torch.float32, device="tpu")
    with torch.tpu.stream(s):
        y = (x + 1) * 3
        e = torch.tpu.Event()
        e.record(s)
    # the default stream waits for s, through the event and through the stream
    e.wait(torch.tpu.current_stream())
    torch.tpu.current_stream().wait_event(e)
    torch.tpu.current_stream().wait_stream(s)
    z = y - 3
    ev = torch.tpu.current_stream().record_event()
    ev.synchronize()
    assert ev.query()
    assert torch.equal(z.cpu(), (torch.arange(4096, dtype=torch.float32) + 1) * 3 - 3)
    torch.tpu.synchronize()
    assert s.query()


# ----------------------------------------------------------------------------- RNG

def test_manual_seed_reproducible_and_seed_dependent():
    torch.tpu.manual_seed(1234)
    a = torch.randn(1000, device="tpu")
    assert a.device == TPU0
    torch.tpu.manual_seed(1234)
    b = torch.randn(1000, device="tpu")
    torch.tpu.manual_seed(1235)
    c = torch.randn(1000, device="tpu")
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(a.cpu(), c.cpu())
    assert abs(a.mean().item()) < 0.2 and 0.8 < a.std().item() < 1.2
    assert torch.tpu.initial_seed() == 1235


def test_tpu_generator_is_its_own():
    # like CUDA: the CPU generator does not drive tpu random numbers, and vice versa
    torch.tpu.manual_seed(7)
    a = torch.rand(500, device="tpu")
    torch.tpu.manual_seed(7)
    torch.default_generator.manual_seed(99)  # a different cpu generator state ...
    torch.randn(10_000)                      # ... moved on further
    b = torch.rand(500, device="tpu")
    assert torch.equal(a.cpu(), b.cpu())


def test_torch_manual_seed_seeds_tpu():
    torch.tpu.manual_seed(2024)
    ref = torch.randn(100, device="tpu").cpu()
    torch.tpu.manual_seed(1)
    torch.randn(100, device="tpu")          # move the tpu generator somewhere else
    torch.manual_seed(2024)
    got = torch.randn(100, device="tpu").cpu()
    assert torch.equal(ref, got)


def test_manual_seed_all_and_seed():
    torch.tpu.manual_seed_all(5)
    a = torch.randint(0, 1000, (200,), device="tpu").cpu()
    torch.tpu.manual_seed_all(5)
    b = torch.randint(0, 1000, (200,), device="tpu").cpu()
    assert torch.equal(a, b)
    assert torch.tpu.initial_seed() == 5
    torch.tpu.seed()
    s1 = torch.tpu.initial_seed()
    torch.tpu.seed()
    s2 = torch.tpu.initial_seed()
    assert isinstance(s1, int) and s1 != s2


def test_rng_state_roundtrip():
    torch.tpu.manual_seed(42)
    torch.randn(10, device="tpu")
    st = torch.tpu.get_rng_state()
    assert st.dtype == torch.uint8 and st.device.type == "cpu" and st.dim() == 1
    assert torch.equal(st, torch.tpu.get_rng_state(device="tpu:0"))
    assert torch.equal(st, torch.tpu.get_rng_state(0))
    x = torch.randn(300, device="tpu").cpu()
    y = torch.randint(0, 1 << 30, (300,), device="tpu").cpu()
    z = torch.bernoulli(torch.full((300,), 0.5, device="tpu")).cpu()
    assert not torch.equal(torch.tpu.get_rng_state(), st)
    torch.tpu.set_rng_state(st)
    assert torch.equal(torch.randn(300, device="tpu").cpu(), x)
    assert torch.equal(torch.randint(0, 1 << 30, (300,), device="tpu").cpu(), y)
    assert torch.equal(torch.bernoulli(torch.full((300,), 0.5, device="tpu")).cpu(), z)
    torch.tpu.set_rng_state(st, device=0)
    assert torch.equal(torch.randn(300, device="tpu").cpu(), x)


def test_dropout_draws_from_the_tpu_generator():
    # training reproducibility: dropout on tpu follows torch.tpu's seed and state, not the
    # cpu generator's
    def drop():
        return torch.nn.functional.dropout(torch.ones(400, device="tpu"), 0.5).cpu()

    torch.tpu.manual_seed(11)
    torch.default_generator.manual_seed(1)
    a = drop()
    torch.tpu.manual_seed(11)
    torch.default_generator.manual_seed(2)       # only the cpu generator differs
    b = drop()
    assert torch.equal(a, b), "dropout on tpu depends on the cpu generator"
    torch.tpu.manual_seed(12)
    torch.default_generator.manual_seed(2)       # only the tpu generator differs
    c = drop()
    assert not torch.equal(b, c), "dropout on tpu ignores the tpu generator"
    st = torch.tpu.get_rng_state()
    d = drop()
    torch.tpu.set_rng_state(st)
    torch.randn(5)                                # cpu draws in between
    assert torch.equal(drop(), d)
