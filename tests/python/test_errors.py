# Bad input gives clear errors, and the device keeps working after each of them:
# mixing cpu and tpu tensors in one op raises RuntimeError "Expected all tensors to be on the
# same device" as cuda does (0-dim cpu tensors are scalars and allowed); a bad device index
# raises RuntimeError naming it; bad TORCHTPU_CHIP / TORCHTPU_CHIPS / TORCHTPU_FALLBACK values
# raise errors naming the variable (subprocesses, since they are read at start-up).
# The cpu fallback: default mode "warn" warns once per op (UserWarning naming the op and tpu)
# and counts every call; "silent" counts without warning; "error" (TORCHTPU_FALLBACK=error or
# torchtpu.set_fallback_mode) raises NotImplementedError naming the op, while the structural
# ops (copies, views, .item()) keep working.
import warnings

import pytest
import torch

import torchtpu

from conftest import check_json, fallback_ops, run_python_many

SAME_DEVICE = "Expected all tensors to be on the same device"


def assert_device_works():
    x = torch.arange(6.0, device="tpu").reshape(2, 3)
    assert torch.equal((x * 2 + 1).cpu(), torch.arange(6.0).reshape(2, 3) * 2 + 1)


# ----------------------------------------------------------------------------- cpu + tpu

MIXED = {
    "add": lambda t, c: torch.add(t, c),
    "add_reversed": lambda t, c: torch.add(c, t),
    "mul_operator": lambda t, c: t * c,
    "mm": lambda t, c: torch.mm(t, c),
    "cat": lambda t, c: torch.cat([t, c]),
    "inplace": lambda t, c: t.add_(c),
    "where": lambda t, c: torch.where(t > 0, t, c),
}


@pytest.mark.parametrize("name", list(MIXED))
def test_mixing_cpu_and_tpu_raises(name):
    t = torch.ones(3, 3, device="tpu")
    c = torch.ones(3, 3)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        MIXED[name](t, c)
    assert torch.equal(t.cpu(), torch.ones(3, 3))       # the in-place case left t unchanged
    assert_device_works()


def test_zero_dim_cpu_tensors_are_scalars():
    t = torch.arange(4.0, device="tpu")
    for r, ref in [(torch.add(t, torch.tensor(2.0)), torch.arange(4.0) + 2),
                   (t * torch.tensor(3), torch.arange(4.0) * 3),
                   (torch.tensor(10.0) - t, 10 - torch.arange(4.0)),
                   (t.clone().mul_(torch.tensor(0.5)), torch.arange(4.0) * 0.5)]:
        assert r.device == t.device
        assert torch.equal(r.cpu(), ref)


def test_copy_between_cpu_and_tpu_is_not_mixing():
    t = torch.zeros(3, device="tpu")
    t.copy_(torch.tensor([1.0, 2.0, 3.0]))
    c = torch.zeros(3)
    c.copy_(t)
    assert c.tolist() == [1.0, 2.0, 3.0]


# ----------------------------------------------------------------------------- device index

@pytest.mark.parametrize("make", [
    lambda: torch.zeros(1, device="tpu:5"),
    lambda: torch.empty(2, 2, device=torch.device("tpu", 5)),
    lambda: torch.randn(3).to("tpu:5"),
    lambda: torch.randn(3).tpu(5),
    lambda: torch.tpu.set_device(5),
], ids=["zeros", "empty", "to", "tensor_tpu", "set_device"])
def test_bad_device_index(make):
    with pytest.raises(RuntimeError, match=r"\b5\b"):
        make()
    assert torch.tpu.current_device() == 0
    assert_device_works()


# ----------------------------------------------------------------------------- bad env

_BAD_ENV = """
R = {}
try:
    import torch
    R["import"] = "ok"
except BaseException as e:
    R["import"] = [type(e).__name__, f"{e} | cause: {e.__cause__}"]
    emit(R)
    raise SystemExit(0)
for attempt in ("first_use", "second_use"):
    try:
        torch.zeros(1, device="tpu")
        R[attempt] = "ok"
    except Exception as e:
        R[attempt] = [type(e).__name__, str(e)]
emit(R)
"""

_BAD_FALLBACK_ENV = """
R = {"stage": None}
try:
    import torch
    R["stage"] = "import"
    x = torch.zeros(2, device="tpu")
    R["stage"] = "first_use"
    torch.special.airy_ai(x)
    R["stage"] = "fallback_op"
    import torchtpu
    R["mode"] = torchtpu.get_fallback_mode()
    R["error"] = None
except BaseException as e:
    R["error"] = [type(e).__name__, f"{e} | cause: {e.__cause__}"]
emit(R)
"""

BAD_VALUES = [("TORCHTPU_CHIP", "v9"), ("TORCHTPU_CHIP", "V5E!"), ("TORCHTPU_CHIPS", "0"),
              ("TORCHTPU_CHIPS", "two"), ("TORCHTPU_CHIPS", "-1"), ("TORCHTPU_CHIPS", "2x")]


@pytest.fixture(scope="module")
def bad_env_runs():
    jobs = [(_BAD_ENV, {var: val}) for var, val in BAD_VALUES]
    jobs.append((_BAD_FALLBACK_ENV, {"TORCHTPU_FALLBACK": "loud"}))
    return run_python_many(jobs)


@pytest.mark.parametrize("i", range(len(BAD_VALUES)),
                         ids=[f"{k}={v}" for k, v in BAD_VALUES])
def test_bad_env_value_gives_clear_error_at_first_use(bad_env_runs, i):
    var, val = BAD_VALUES[i]
    out = check_json(bad_env_runs[i])
    assert out["import"] == "ok", f"import torch itself failed: {out['import']}"
    for attempt in ("first_use", "second_use"):
        assert out[attempt] != "ok", f"{var}={val} was accepted"
        kind, msg = out[attempt]
        assert kind == "RuntimeError", out[attempt]
        assert var in msg, msg
        assert val in msg, msg


def test_bad_fallback_mode_env(bad_env_runs):
    out = check_json(bad_env_runs[-1])
    assert out["error"] is not None, f"TORCHTPU_FALLBACK=loud was accepted: {out}"
    assert "TORCHTPU_FALLBACK" in out["error"][1], out


# ----------------------------------------------------------------------------- fallback modes

_WARN_ONCE = """
import warnings
import torch
import torchtpu

out = {"mode": torchtpu.get_fallback_mode()}
x = torch.rand(8, device="tpu") + 0.5
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    a = torch.special.airy_ai(x)
    b = torch.special.airy_ai(x)
    for _ in range(3):
        torch.special.ndtri(x)
out["warnings"] = [[c.category.__name__, str(c.message)] for c in w]
out["stats"] = torchtpu.fallback_stats()
out["equal"] = torch.equal(a.cpu(), torch.special.airy_ai(x.cpu())) and torch.equal(a.cpu(), b.cpu())
torchtpu.reset_fallback_stats()
out["after_reset"] = torchtpu.fallback_stats()
torch.special.airy_ai(x)
out["after_one_more"] = torchtpu.fallback_stats()
emit(out)
"""

_SILENT = """
import warnings
import torch
import torchtpu

out = {"mode": torchtpu.get_fallback_mode()}
x = torch.rand(8, device="tpu") + 0.5
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    a = torch.special.airy_ai(x)
    torch.special.airy_ai(x)
out["warnings"] = [str(c.message) for c in w]
out["stats"] = torchtpu.fallback_stats()
out["equal"] = torch.equal(a.cpu(), torch.special.airy_ai(x.cpu()))
emit(out)
"""

_ERROR = """
import torch
import torchtpu

out = {"mode": torchtpu.get_fallback_mode()}
c = torch.tensor([0.5, 1.5, 2.5, 3.5])
x = c.to("tpu")                                 # structural ops work in error mode
out["structural"] = [x.cpu().tolist(), x.view(2, 2)[1].cpu().tolist(), x[2].item(),
                     x[::2].cpu().tolist()]
try:
    torch.special.airy_ai(x)
    out["raised"] = None
except Exception as e:
    out["raised"] = [type(e).__name__, str(e)]
out["after"] = [x.cpu().tolist(), torch.empty(3, device="tpu").shape[0]]
torchtpu.set_fallback_mode("warn")
out["mode_after_set"] = torchtpu.get_fallback_mode()
out["fallback_works"] = torch.equal(torch.special.airy_ai(x).cpu(), torch.special.airy_ai(c))
emit(out)
"""


@pytest.fixture(scope="module")
def mode_runs():
    res = run_python_many([(_WARN_ONCE, None), (_SILENT, {"TORCHTPU_FALLBACK": "silent"}),
                           (_ERROR, {"TORCHTPU_FALLBACK": "error"}),
                           (_WARN_ONCE, {"TORCHTPU_FALLBACK": "warn"})])
    return dict(zip(["warn_default", "silent", "error", "warn_explicit"], res))


@pytest.mark.parametrize("which", ["warn_default", "warn_explicit"])
def test_warn_mode_warns_once_per_op_and_counts_calls(mode_runs, which):
    out = check_json(mode_runs[which])
    assert out["mode"] == "warn"
    j0 = [w for w in out["warnings"] if "special_airy_ai" in w[1]]
    j1 = [w for w in out["warnings"] if "special_ndtri" in w[1]]
    assert len(j0) == 1, out["warnings"]
    assert len(j1) == 1, out["warnings"]
    for category, msg in j0 + j1:
        assert category == "UserWarning"
        assert "tpu" in msg.lower()
    assert out["equal"]
    assert fallback_ops(out["stats"], "special_airy_ai") == 2, out["stats"]
    assert fallback_ops(out["stats"], "special_ndtri") == 3, out["stats"]
    assert sum(out["after_reset"].values()) == 0
    assert fallback_ops(out["after_one_more"], "special_airy_ai") == 1


def test_silent_mode_counts_without_warning(mode_runs):
    out = check_json(mode_runs["silent"])
    assert out["mode"] == "silent"
    assert not [m for m in out["warnings"] if "airy" in m], out["warnings"]
    assert fallback_ops(out["stats"], "special_airy_ai") == 2
    assert out["equal"]


def test_error_mode_from_env(mode_runs):
    out = check_json(mode_runs["error"])
    assert out["mode"] == "error"
    assert out["structural"] == [[0.5, 1.5, 2.5, 3.5], [2.5, 3.5], 2.5, [0.5, 2.5]]
    assert out["raised"] is not None, "a fallback op ran in error mode"
    kind, msg = out["raised"]
    assert kind == "NotImplementedError", out["raised"]
    assert "special_airy_ai" in msg, msg
    assert out["after"] == [[0.5, 1.5, 2.5, 3.5], 3]
    assert out["mode_after_set"] == "warn"
    assert out["fallback_works"]


def test_set_fallback_mode_in_process():
    old = torchtpu.get_fallback_mode()
    assert old == "warn"
    x = torch.rand(6, device="tpu") + 0.5
    try:
        torchtpu.set_fallback_mode("error")
        assert torchtpu.get_fallback_mode() == "error"
        with pytest.raises(NotImplementedError, match="special_airy_ai"):
            torch.special.airy_ai(x)
        assert torch.equal(x.view(2, 3).cpu(), x.cpu().view(2, 3))   # structural ops still work

        torchtpu.set_fallback_mode("silent")
        assert torchtpu.get_fallback_mode() == "silent"
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = torch.special.airy_ai(x)
        assert not [c for c in w if "airy_ai" in str(c.message)]
        assert torch.equal(r.cpu(), torch.special.airy_ai(x.cpu()))

        with pytest.raises((ValueError, RuntimeError)):
            torchtpu.set_fallback_mode("loud")
        assert torchtpu.get_fallback_mode() == "silent"
    finally:
        torchtpu.set_fallback_mode(old)
    assert torchtpu.get_fallback_mode() == "warn"
    assert torch.equal(torch.special.airy_ai(x).cpu(), torch.special.airy_ai(x.cpu()))
    assert_device_works()
