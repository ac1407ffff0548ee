# Shared helpers for the Python tests of the tpu device.
#
# - The pytest process itself runs with the default configuration (one v5e chip, fallback
#   mode "warn"): any TORCHTPU_* variable inherited from the shell is removed before torch is
#   imported, since the backend reads them once at process start.
# - run_python(code, env) runs a short Python program in a fresh interpreter (for what is
#   fixed per process: chip generation, chip count, fallback mode from the environment, bad
#   values), and run_json(code, env) does the same for programs that report with emit(obj).
# - tpu(x) moves a tensor to the tpu; no_fallback(fn) runs fn and asserts no op took the CPU
#   fallback (the native-execution tests use both).
# - bits(t) gives a CPU tensor of integers with the same bit pattern as t, so that NaNs,
#   signed zeros and subnormals can be compared exactly.
import json
import os
import subprocess
import sys
import textwrap

for _name in [k for k in os.environ if k.startswith("TORCHTPU_")]:
    del os.environ[_name]
os.environ.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)

if "torch" in sys.modules:  # pragma: no cover - only if a plugin imported torch first
    import warnings

    warnings.warn("torch was imported before tests/python/conftest.py; TORCHTPU_* from the "
                  "environment may be in effect in the test process")

import pytest  # noqa: E402
import torch  # noqa: E402
import torchtpu  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20

HERE = os.path.dirname(os.path.abspath(__file__))

# Prepended to every subprocess program: emit(obj) prints one JSON line that run_json reads.
_PRELUDE = textwrap.dedent("""
    import json as _json, sys as _sys
    def emit(obj):
        _sys.stdout.write("@@JSON@@" + _json.dumps(obj) + "\\n")
        _sys.stdout.flush()
""")


def subprocess_env(env=None):
    """os.environ without TORCHTPU_* (and autoload switches), updated with env."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("TORCHTPU_")}
    e.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = str(v)
    return e


def _popen(code, env):
    return subprocess.Popen(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(code)],
        env=subprocess_env(env), cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


class Result:
    def __init__(self, code, env, returncode, stdout, stderr):
        self.code, self.env = code, env
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def describe(self):
        return (f"subprocess env={self.env} exited with {self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-6000:]}")

    @property
    def json(self):
        """The objects the program passed to emit(), in order."""
        return [json.loads(line[len("@@JSON@@"):]) for line in self.stdout.splitlines()
                if line.startswith("@@JSON@@")]


def run_python_many(jobs, timeout=120):
    """Run [(code, env), ...] concurrently; return a Result per job, in order."""
    procs = [(_popen(code, env), code, env) for code, env in jobs]
    results = []
    for p, code, env in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err += f"\n[killed after {timeout} s]"
        results.append(Result(code, env, p.returncode, out, err))
    return results


def run_python(code, env=None, timeout=120):
    """Run code in a fresh interpreter with env added to the environment; return a Result."""
    return run_python_many([(code, env)], timeout=timeout)[0]


def check_json(res):
    """Assert the program succeeded and emitted exactly one object; return it."""
    assert res.returncode == 0, res.describe()
    objs = res.json
    assert len(objs) == 1, res.describe()
    return objs[0]


def run_json(code, env=None, timeout=120):
    return check_json(run_python(code, env, timeout))


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t):
    """A CPU integer tensor with the bit pattern of t (complex as (re, im) pairs)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(_BITS[t.element_size()])


def assert_bits_equal(actual, expected):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.equal(bits(actual), bits(expected)), "bit patterns differ"


def storage_ptr(t):
    return t.untyped_storage().data_ptr()


def fallback_ops(stats, name):
    """Calls recorded for op `name` in a fallback_stats() dict, summed over its overloads
    ("aten::special_zeta" and "aten::special_zeta.out" both count for "special_zeta")."""
    total = 0
    for k, v in stats.items():
        base = k.split("::", 1)[-1].split(".", 1)[0]
        if base == name:
            total += v
    return total


@pytest.fixture(scope="session", autouse=True)
def _tpu_works():
    """Fail early and clearly if the device cannot even make a tensor."""
    t = torch.zeros(1, device="tpu")
    assert t.device.type == "tpu"


def tpu(x):
    """x moved to the tpu if it is a tensor (other arguments pass through)."""
    return x.to("tpu") if isinstance(x, torch.Tensor) else x


def no_fallback(fn):
    """Runs fn() and asserts that no op went through the CPU fallback; returns its result."""
    torchtpu.reset_fallback_stats()
    out = fn()
    torch.tpu.synchronize()
    stats = torchtpu.fallback_stats()
    assert not stats, f"ran through the CPU fallback: {stats}"
    return out


@pytest.fixture
def highest():
    """Matmuls and convolutions at full f32 precision for the test (the default is the MXU's
    bf16 passes), as a model compared with the CPU over several steps needs."""
    previous = torchtpu.get_matmul_precision()
    torchtpu.set_matmul_precision("highest")
    yield
    torchtpu.set_matmul_precision(previous)


def sgd_losses(opt, loss_of_step, steps):
    """|steps| optimizer steps on the loss that loss_of_step() computes; the losses as floats
    (read once at the end, so the steps run without a sync)."""
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of_step()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [v.item() for v in losses]


def assert_trains_like_cpu(train, rtol=1e-4, atol=1e-4):
    """train(device) -> (losses, parameters on the CPU): on tpu at HIGHEST precision and with
    no fallback, the same losses and parameters as on the CPU."""
    want_losses, want_params = train("cpu")
    with torch.tpu.precision("highest"):
        got_losses, got_params = no_fallback(lambda: train("tpu"))
    assert got_losses == pytest.approx(want_losses, rel=rtol, abs=atol)
    for w, g in zip(want_params, got_params):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol)


def compare_with_cpu(fn, *args, rtol=1e-5, atol=1e-5, grad=True, nograd=()):
    """fn on CPU and on tpu (natively, no fallback): results agree in dtype, shape and value
    within rtol/atol, and so do the gradients of the float tensor arguments (except the
    positions in nograd) for a random cotangent (the same in every run)."""
    def prepare(convert):
        return [convert(a.detach().clone()).requires_grad_(grad and a.is_floating_point() and i not in nograd)
                if isinstance(a, torch.Tensor) else a for i, a in enumerate(args)]
    cpu_args, tpu_args = prepare(lambda t: t), prepare(tpu)
    want = fn(*cpu_args)
    got = no_fallback(lambda: fn(*tpu_args))
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    for w, g in zip(want, got):
        assert g.device.type == "tpu" and g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g.detach().cpu(), w.detach(), rtol=rtol, atol=atol, equal_nan=True)
    pairs = [(w, g) for w, g in zip(want, got) if w.requires_grad]
    if not grad or not pairs:
        return
    seeded = torch.Generator().manual_seed(0)
    cots = [torch.randn(w.shape, generator=seeded).to(w.dtype) for w, _ in pairs]
    torch.autograd.backward([w for w, _ in pairs], cots)
    no_fallback(lambda: torch.autograd.backward([g for _, g in pairs], [tpu(c) for c in cots]))
    for a, b in zip(cpu_args, tpu_args):
        if isinstance(a, torch.Tensor) and a.grad is not None:
            torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=rtol, atol=atol, equal_nan=True)


def same_error(fn, *args, upto=None):
    """fn raises the same exception type and message on tpu as on the CPU (the message up to
    |upto| if given)."""
    with pytest.raises(Exception) as want:
        fn(*args)
    with pytest.raises(Exception) as got:
        fn(*[tpu(a) for a in args])
    assert type(got.value) is type(want.value)
    assert str(got.value).split(upto)[0] == str(want.value).split(upto)[0]
