# Several chips in one process (TORCHTPU_CHIPS, read at start-up, so each configuration runs in a
# subprocess): with TORCHTPU_CHIPS=2 there are two devices; tensors live on tpu:1 and keep that
# device through ops (also when the current device is another one); copies tpu:0 <-> tpu:1
# are bit-exact; memory statistics and HBM capacity are per chip; torch.tpu.device(1) and
# set_device switch the current device; each chip has its own generator and streams;
# serialization keeps the device; mixing chips in one op raises RuntimeError as on cuda; a
# foreach op may hold tensors of both chips.
# A topology (TORCHTPU_CHIPS=2x2) gives 4 chips.
import pytest

from conftest import GiB, MiB, run_python_many

_TWO_CHIPS = """
import io
import torch

R = {}
def check(fn):
    try:
        R[fn.__name__] = fn()
    except Exception as e:
        R[fn.__name__] = {"__error__": f"{type(e).__name__}: {e}"}

def exact(a, b):
    a, b = a.cpu().contiguous(), b.cpu().contiguous()
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))

def err(f):
    try:
        f()
        return None
    except Exception as e:
        return [type(e).__name__, str(e)]

@check
def count():
    return {"tpu": torch.tpu.device_count(), "acc": torch.accelerator.device_count(),
            "names": [torch.tpu.get_device_name(i) for i in range(2)],
            "totals": [torch.tpu.get_device_properties(i).total_memory for i in range(2)]}

@check
def placement():
    c = torch.randn(4, 4)
    x = c.to("tpu:1")
    ops = {"add": lambda t: t + t, "mm": lambda t: t @ t, "sum": lambda t: t.sum(),
           "t": lambda t: t.t(), "select": lambda t: t[0], "relu": torch.relu,
           "zeros_like": torch.zeros_like, "clone": lambda t: t.clone(),
           "softmax": lambda t: torch.softmax(t, -1), "inplace": lambda t: t.clone().mul_(2),
           "cpu_scalar": lambda t: t * torch.tensor(3.0), "where": lambda t: torch.where(t > 0, t, -t)}
    out = {"x": str(x.device)}
    for name, f in ops.items():
        with torch.tpu.precision("highest"):  # f32 matmul as on CPU (DEFAULT is one bf16 pass)
            r = f(x)
        out[name] = [str(r.device), bool(torch.allclose(r.cpu(), f(c), rtol=1e-5, atol=1e-5))]
    return out

@check
def copy():
    g = torch.Generator().manual_seed(0)
    c = torch.randint(-2**31, 2**31 - 1, (257, 33), dtype=torch.int32, generator=g).view(torch.float32)
    a0 = c.to("tpu:0")
    a1 = a0.to("tpu:1")
    d1 = torch.empty(257, 33, device="tpu:1")
    d1.copy_(a0)
    e0 = torch.empty(33, 257, device="tpu:0")
    e0.copy_(a1.t())
    nc = a0.t()[::2].to("tpu:1")
    back = a1.to("tpu:0")
    return {"a1_dev": str(a1.device), "a1": exact(a1, c), "d1": exact(d1, c),
            "e0": exact(e0, c.t()), "nc_dev": str(nc.device), "nc": exact(nc, c.t()[::2]),
            "back_dev": str(back.device), "back": exact(back, c),
            "distinct": a1.untyped_storage().data_ptr() != a0.untyped_storage().data_ptr()}

@check
def memory():
    GiB, MiB = 1 << 30, 1 << 20
    torch.tpu.synchronize()
    m0, m1 = torch.tpu.memory_allocated(0), torch.tpu.memory_allocated(1)
    big = torch.empty(64 * MiB, dtype=torch.uint8, device="tpu:1")
    torch.tpu.synchronize(1)
    out = {"d0": torch.tpu.memory_allocated(0) - m0, "d1": torch.tpu.memory_allocated(1) - m1,
           "stats1": torch.tpu.memory_stats(1)["allocated_bytes.all.current"],
           "alloc1": torch.tpu.memory_allocated(1)}
    f0 = torch.empty(12 * GiB, dtype=torch.uint8, device="tpu:0")
    f1 = torch.empty(12 * GiB, dtype=torch.uint8, device="tpu:1")   # chip 1 has its own 16 GiB
    out["oom1"] = err(lambda: torch.empty(6 * GiB, dtype=torch.uint8, device="tpu:1"))
    out["alloc0_after"] = torch.tpu.memory_allocated(0) - m0
    del f0, f1, big
    torch.tpu.synchronize()
    out["alloc1_end"] = torch.tpu.memory_allocated(1) - m1
    return out

@check
def device_ctx():
    x0 = torch.ones(3, device="tpu:0")
    r = {"start": torch.tpu.current_device()}
    with torch.tpu.device(1):
        r["inside"] = torch.tpu.current_device()
        r["inside_acc"] = torch.accelerator.current_device_index()
        r["inside_tensor"] = str(torch.zeros(1, device="tpu").device)
        r["inside_stream"] = str(torch.tpu.current_stream().device)
        y = x0 + 1                                   # operands on tpu:0 decide, not the current device
        r["inside_op_on_0"] = [str(y.device), y.cpu().tolist()]
    r["after"] = torch.tpu.current_device()
    with torch.tpu.device("tpu:1"):
        r["inside_str"] = torch.tpu.current_device()
    torch.tpu.set_device(1)
    r["set"] = torch.tpu.current_device()
    r["set_tensor"] = str(torch.ones(1, device="tpu").device)
    r["set_tpu_method"] = str(torch.ones(1).tpu().device)
    torch.tpu.set_device(0)
    r["reset"] = torch.tpu.current_device()
    return r

@check
def mixing():
    x0, x1 = torch.ones(3, device="tpu:0"), torch.ones(3, device="tpu:1")
    r = {"add": err(lambda: torch.add(x0, x1)), "mul": err(lambda: x1 * x0),
         "mm": err(lambda: x0.view(3, 1) @ x1.view(1, 3)), "cat": err(lambda: torch.cat([x0, x1]))}
    x0.copy_(x1 * 2)                                  # explicit copies across chips are fine
    r["copy"] = [str(x0.device), x0.cpu().tolist()]
    r["works_after"] = (x1 + 1).cpu().tolist()
    return r

@check
def rng():
    torch.tpu.manual_seed_all(3)
    a0, a1 = torch.randn(50, device="tpu:0").cpu(), torch.randn(50, device="tpu:1").cpu()
    torch.tpu.manual_seed_all(3)
    b0, b1 = torch.randn(50, device="tpu:0").cpu(), torch.randn(50, device="tpu:1").cpu()
    torch.tpu.manual_seed_all(1)
    r1 = torch.randn(50, device="tpu:1").cpu()
    torch.tpu.manual_seed_all(1)
    torch.tpu.manual_seed(99)                          # the current device (0) only
    r1b = torch.randn(50, device="tpu:1").cpu()
    st1 = torch.tpu.get_rng_state(1)
    x = torch.randn(50, device="tpu:1").cpu()
    torch.tpu.set_rng_state(st1, 1)
    y = torch.randn(50, device="tpu:1").cpu()
    return {"repro0": torch.equal(a0, b0), "repro1": torch.equal(a1, b1),
            "seed_only_current": torch.equal(r1, r1b), "state1": torch.equal(x, y)}

@check
def streams():
    s = torch.tpu.Stream(device=1)
    r = {"dev": str(s.device), "default1": str(torch.tpu.default_stream(1).device),
         "current1": str(torch.tpu.current_stream(1).device),
         "distinct_defaults": torch.tpu.default_stream(0) != torch.tpu.default_stream(1)}
    with torch.tpu.stream(s):
        r["current_in_ctx"] = torch.tpu.current_stream(1) == s
        y = torch.ones(4, device="tpu:1") * 5
    s.synchronize()
    torch.tpu.synchronize(1)
    r["y"] = y.cpu().tolist()
    e = torch.tpu.Event()
    e.record(s)
    e.synchronize()
    r["query"] = e.query()
    return r

@check
def serialization():
    t = torch.arange(5.0, device="tpu:1")
    buf = io.BytesIO()
    torch.save(t, buf)
    def load(**kw):
        buf.seek(0)
        return torch.load(buf, **kw)
    a, b, c = load(), load(map_location="tpu:0"), load(map_location={"tpu:1": "tpu:0"})
    return {"a": str(a.device), "b": str(b.device), "c": str(c.device),
            "eq": torch.equal(a.cpu(), torch.arange(5.0)) and torch.equal(b.cpu(), torch.arange(5.0))}

@check
def module():
    m = torch.nn.Linear(4, 2).tpu(1)
    out = m(torch.randn(3, 4).to("tpu:1"))
    out.sum().backward()
    return {"param": str(m.weight.device), "out": str(out.device), "grad": str(m.weight.grad.device)}

@check
def foreach_over_two_chips():
    # one foreach op over tensors of both chips (strict mode records the per-tensor ops and
    # flushes every chip), then a strict op reads each result
    xs = [torch.ones(3, device="tpu:0"), torch.ones(3, device="tpu:1")]
    torch._foreach_mul_(xs, 3.0)
    return [(x + 1).cpu().tolist() for x in xs]

@check
def bad_index():
    return err(lambda: torch.zeros(1, device="tpu:2"))

emit(R)
"""

_TOPOLOGY = """
import torch
R = {"count": torch.tpu.device_count()}
R["chips"] = [torch.tpu.get_device_properties(i).chip for i in range(R["count"])]
x = torch.arange(4.0, device="tpu:3")
R["x3"] = [str(x.device), (x * 2).cpu().tolist()]
y = x.to("tpu:0")
R["y"] = [str(y.device), y.cpu().tolist()]
try:
    torch.zeros(1, device="tpu:4")
    R["bad"] = None
except Exception as e:
    R["bad"] = [type(e).__name__, str(e)]
emit(R)
"""

SAME_DEVICE = "Expected all tensors to be on the same device"


@pytest.fixture(scope="module")
def procs():
    two, topo = run_python_many([(_TWO_CHIPS, {"TORCHTPU_CHIPS": "2"}),
                                 (_TOPOLOGY, {"TORCHTPU_CHIPS": "2x2", "TORCHTPU_CHIP": "v6e"})])
    return {"two": two, "topology": topo}


@pytest.fixture(scope="module")
def runs(procs):
    # the checks' results, even if the process then failed to exit cleanly (tested apart)
    out = {}
    for k, res in procs.items():
        objs = res.json
        assert len(objs) == 1, res.describe()
        out[k] = objs[0]
    return out


def test_processes_exit_cleanly(procs):
    for res in procs.values():
        assert res.returncode == 0, res.describe()


def part(runs, name):
    r = runs["two"][name]
    assert not (isinstance(r, dict) and "__error__" in r), r
    return r


def test_two_chips_are_counted(runs):
    r = part(runs, "count")
    assert r["tpu"] == 2 and r["acc"] == 2
    assert r["names"][0] == r["names"][1] and r["names"][0].startswith("TPU v5e")
    assert r["totals"] == [16 * GiB, 16 * GiB]


def test_tensors_on_tpu1_stay_there(runs):
    r = part(runs, "placement")
    assert r.pop("x") == "tpu:1"
    for name, (dev, ok) in r.items():
        assert dev == "tpu:1", (name, dev)
        assert ok, f"{name}: value differs from cpu"


def test_copies_between_chips_exact(runs):
    r = part(runs, "copy")
    assert r["a1_dev"] == "tpu:1" and r["nc_dev"] == "tpu:1" and r["back_dev"] == "tpu:0"
    for k in ["a1", "d1", "e0", "nc", "back", "distinct"]:
        assert r[k] is True, k


def test_foreach_op_over_two_chips(runs):
    assert part(runs, "foreach_over_two_chips") == [[4.0] * 3, [4.0] * 3]


def test_memory_is_per_chip(runs):
    r = part(runs, "memory")
    assert r["d0"] == 0
    assert r["d1"] >= 64 * MiB
    assert r["stats1"] == r["alloc1"]
    assert r["oom1"] is not None and r["oom1"][0] == "OutOfMemoryError", r["oom1"]
    assert r["alloc0_after"] == 12 * GiB
    assert r["alloc1_end"] == 0


def test_device_context_and_set_device(runs):
    r = part(runs, "device_ctx")
    assert r["start"] == 0
    assert r["inside"] == 1 and r["inside_acc"] == 1 and r["inside_str"] == 1
    assert r["inside_tensor"] == "tpu:1"
    assert r["inside_stream"] == "tpu:1"
    assert r["inside_op_on_0"] == ["tpu:0", [2.0, 2.0, 2.0]]
    assert r["after"] == 0
    assert r["set"] == 1 and r["set_tensor"] == "tpu:1" and r["set_tpu_method"] == "tpu:1"
    assert r["reset"] == 0


def test_mixing_chips_raises_like_cuda(runs):
    r = part(runs, "mixing")
    for op in ["add", "mul", "mm", "cat"]:
        assert r[op] is not None, f"{op} across tpu:0 and tpu:1 did not raise"
        kind, msg = r[op]
        assert kind == "RuntimeError", (op, kind, msg)
        assert SAME_DEVICE in msg, (op, msg)
    assert r["copy"] == ["tpu:0", [2.0, 2.0, 2.0]]
    assert r["works_after"] == [2.0, 2.0, 2.0]


def test_generators_per_chip(runs):
    r = part(runs, "rng")
    assert r == {"repro0": True, "repro1": True, "seed_only_current": True, "state1": True}


def test_streams_per_chip(runs):
    r = part(runs, "streams")
    assert r["dev"] == r["default1"] == r["current1"] == "tpu:1"
    assert r["distinct_defaults"] and r["current_in_ctx"]
    assert r["y"] == [5.0] * 4
    assert r["query"] is True


def test_serialization_keeps_chip(runs):
    r = part(runs, "serialization")
    assert (r["a"], r["b"], r["c"]) == ("tpu:1", "tpu:0", "tpu:0")
    assert r["eq"]


def test_module_on_tpu1(runs):
    assert part(runs, "module") == {"param": "tpu:1", "out": "tpu:1", "grad": "tpu:1"}


def test_bad_index_with_two_chips(runs):
    r = part(runs, "bad_index")
    assert r is not None and r[0] == "RuntimeError" and "2" in r[1], r


def test_topology_2x2(runs):
    r = runs["topology"]
    assert r["count"] == 4
    assert r["chips"] == ["v6e"] * 4
    assert r["x3"] == ["tpu:3", [0.0, 2.0, 4.0, 6.0]]
    assert r["y"] == ["tpu:0", [0.0, 1.0, 2.0, 3.0]]
    assert r["bad"] is not None and r["bad"][0] == "RuntimeError", r["bad"]
