#!/usr/bin/env python3
"""stablehlo_check.py: validates the IR's StableHLO printer (src/ir/print_stablehlo.c) with jax.

Not part of `make test` (jax is not in .venv). Run it from the repository root with a scratch
virtual environment outside the repo:

    python3 -m venv /tmp/jaxvenv && /tmp/jaxvenv/bin/pip install jax jaxlib
    /tmp/jaxvenv/bin/python tests/python/stablehlo_check.py            # builds and dumps
    /tmp/jaxvenv/bin/python tests/python/stablehlo_check.py --dump-dir DIR  # use a dump

It builds build/release/tests/test_ir_print, runs it with TPU_STABLEHLO_DUMP_DIR so that it
writes every printed module (<name>.mlir), then for each module:
  1. parses it with jaxlib's MLIR (stablehlo, chlo and func dialects) and verifies it;
  2. compiles it with XLA's CPU client;
  3. for the modules listed in CHECKS, runs it on fixed inputs and compares the outputs
     with values computed by hand / numpy.
A deliberately broken module must fail to parse (negative control). Exits non-zero on any
failure and prints "N passed, N failed".
"""
import argparse
import glob
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dump_modules(dump_dir):
    subprocess.run(["make", "-C", ROOT, "build/release/tests/test_ir_print"], check=True,
                   stdout=subprocess.DEVNULL)
    env = dict(os.environ, TPU_STABLEHLO_DUMP_DIR=dump_dir)
    subprocess.run([os.path.join(ROOT, "build/release/tests/test_ir_print")], check=True,
                   env=env)


# ---- jax plumbing -------------------------------------------------------------------------

def jax_tools():
    import jax  # noqa: F401  (initializes the backends)
    from jax._src import xla_bridge
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
    backend = xla_bridge.get_backend("cpu")
    return jax, backend, jmlir, xc, ir


def parse(text, jmlir, ir):
    ctx = jmlir.make_ir_context()  # registers stablehlo, chlo, func, ...
    with ctx:
        module = ir.Module.parse(text)
        if not module.operation.verify():
            raise RuntimeError("module does not verify")


def compile_and_run(text, inputs, jax, backend, xc):
    dev = backend.devices()[0]
    exe = backend.compile_and_load(text, xc.DeviceList((dev,)), xc.CompileOptions())
    args = [jax.device_put(np.asarray(a), dev) for a in inputs]
    res = exe.execute_sharded(args)
    return [np.asarray(r[0]) for r in res.disassemble_into_single_device_arrays()]


# ---- expected results -----------------------------------------------------------------------

f32 = np.float32


def conv_nhwc_hwio(x, k, pad):
    n, h, w, c = x.shape
    kh, kw, _, o = k.shape
    xp = np.zeros((n, h + 2 * pad, w + 2 * pad, c), np.float64)
    xp[:, pad:pad + h, pad:pad + w, :] = x
    out = np.zeros((n, h + 2 * pad - kh + 1, w + 2 * pad - kw + 1, o))
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            patch = xp[:, i:i + kh, j:j + kw, :]
            out[:, i, j, :] = np.einsum("nhwc,hwco->no", patch, k)
    return out


def check_mlp(run):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(f32) for s in [(4, 3), (3, 5), (5,)])
    (y,) = run([x, w, b])
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    # DEFAULT precision may use bf16 passes on some backends; CPU is f32.
    return np.allclose(y, want, atol=2e-2), "relu(x @ w + b)"


def check_softmax(run):
    x = np.array([[1, 2, 3, 4, 5], [-1, 0, 0, 1, 100]], f32)
    (y,) = run([x])
    e = np.exp(x - x.max(1, keepdims=True))
    return np.allclose(y, e / e.sum(1, keepdims=True), atol=1e-6), "softmax rows"


def check_conv(run):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 5, 2)).astype(f32)
    k = rng.standard_normal((3, 3, 2, 4)).astype(f32)
    (y,) = run([x, k])
    return np.allclose(y, conv_nhwc_hwio(x, k, 1), atol=1e-4), "3x3 conv, pad 1"


def check_gather(run):
    t = np.arange(15, dtype=f32).reshape(5, 3)
    (y,) = run([t, np.array([3, 0], np.int32)])
    return np.array_equal(y, t[[3, 0]]), "rows 3 and 0"


def check_sort(run):
    x = np.array([[3, np.nan, 1, 2], [0, -1, -1, 5]], f32)
    xi = np.array([4, -2, 7, 0, -2], np.int32)
    desc, arg, si = run([x, xi])
    want_desc = np.array([[np.nan, 3, 2, 1], [5, 0, -1, -1]], f32)
    ok = np.array_equal(desc, want_desc, equal_nan=True)
    ok &= np.array_equal(arg, np.array([[2, 3, 0, 1], [1, 2, 0, 3]]))  # NaN last, stable
    ok &= arg.dtype == np.int64 and np.array_equal(si, np.sort(xi))
    return ok, "descending sort with NaN first, stable argsort with NaN last, int sort"


def check_argmax(run):
    x = np.array([[1, 5, 5, 2], [np.nan, 1, np.nan, 3]], f32)
    y = np.array([[3, 1], [1, 1], [0, 4]], np.int32)
    amax, amin = run([x, y])
    ok = np.array_equal(amax, [1, 0]) and np.array_equal(amin, [2, 0])
    return ok and amax.dtype == np.int64, "first index of the max; NaN wins; argmin on i32"


def check_scan(run):
    x = np.array([[1, 2, 3, 4], [4, -1, 5, 0]], f32)
    cs, cm = run([x])
    return (np.array_equal(cs, np.cumsum(x, 1)) and
            np.array_equal(cm, np.maximum.accumulate(x, 1))), "cumsum and cummax"


def check_linalg(run):
    rng = np.random.default_rng(0)
    m = rng.standard_normal((2, 3, 3)).astype(f32)
    a = m @ m.transpose(0, 2, 1) + 3 * np.eye(3, dtype=f32)
    b = rng.standard_normal((2, 3, 2)).astype(f32)
    x, xt = run([a, b])
    lo = np.linalg.cholesky(a.astype(np.float64))
    want = np.linalg.solve(lo, b)
    want_t = np.swapaxes(np.linalg.solve(lo, b), 1, 2)  # b^T L^-T = (L^-1 b)^T
    ok = np.allclose(x, want, rtol=1e-4, atol=1e-5) and np.allclose(xt, want_t, rtol=1e-4, atol=1e-5)
    return ok, "cholesky, then left and right (transposed) triangular solves"


def check_scatter(run):
    x = np.zeros((4, 3), f32)
    idx = np.array([[1], [3]], np.int32)
    upd = np.array([[1, 2, 3], [4, 5, 6]], f32)
    add, rep, mx = run([x + 1, idx, upd])
    want = np.ones((4, 3), f32)
    want[1] += upd[0]
    want[3] += upd[1]
    want_rep = np.ones((4, 3), f32)
    want_rep[1], want_rep[3] = upd[0], upd[1]
    want_max = np.maximum(np.ones((4, 3), f32), want_rep)
    return (np.array_equal(add, want) and np.array_equal(rep, want_rep) and
            np.array_equal(mx, want_max)), "scatter add/replace/max"


def check_pool(run):
    x = np.arange(16, dtype=f32).reshape(1, 4, 4, 1)
    y = np.array([1, 2, 3, 4, 5], f32)
    mp, ws = run([x, y])
    want_mp = np.array([[5, 7], [13, 15]], f32).reshape(1, 2, 2, 1)
    want_ws = np.array([3, 6, 9, 12, 9], f32)
    return np.array_equal(mp, want_mp) and np.array_equal(ws, want_ws), "max pool, padded sum"


def check_rng(run):
    u, n, bits = run([np.int64(42), np.int64(7)])
    u2, _, _ = run([np.int64(42), np.int64(7)])
    u3, _, _ = run([np.int64(43), np.int64(7)])
    ok = u.shape == (2, 3) and ((u >= 0) & (u < 1)).all() and np.array_equal(u, u2)
    ok &= not np.array_equal(u, u3)
    ok &= n.shape == (4, 2) and np.isfinite(n.astype(np.float32)).all()
    ok &= bits.dtype == np.int64 and ((bits >= 0) & (bits < 2 ** 32)).all()
    return ok, "uniform in [0,1) reproducible per seed, normal finite, bits in u32 range"


def check_unary(run):
    x = np.array([0.5, -1.25, 2.5], f32)
    i = np.array([3, -4, 0], np.int32)
    outs = run([x, i])
    with np.errstate(all="ignore"):
        want = [np.abs(x), -x, np.exp(x), np.expm1(x), np.log(x), np.log1p(x), np.sqrt(x),
                1 / np.sqrt(x), np.tanh(x), 1 / (1 + np.exp(-x)), np.sin(x), np.cos(x),
                np.tan(x), np.array([math.erf(v) for v in x]), np.floor(x), np.ceil(x),
                np.round(x), np.sign(x), np.isfinite(x),
                ~i, -i, np.abs(i), x.astype(np.float32), x != 0, i.astype(np.uint8),
                x.view(np.int32), np.ones(3, bool)]
    ok = len(outs) == len(want)
    for k, (o, w) in enumerate(zip(outs, want)):
        good = np.allclose(o.astype(np.float64), np.asarray(w, np.float64), rtol=1e-2,
                           atol=1e-6, equal_nan=True)
        if not good:
            print(f"    unary output {k}: got {o}, want {w}")
        ok &= good
    return ok, "27 unary results vs numpy (incl. round-half-even, erf, not on bool)"


def check_binary(run):
    x = np.array([[5.5, -3], [2, 7]], f32)
    y = np.array([[2, 2], [-4, 0.5]], f32)
    i = np.array([[7, -7], [12, 3]], np.int32)
    u = np.array([[200, 3], [1, 128]], np.uint8)
    outs = run([x, y, i, u])
    tdiv = np.trunc(i / i).astype(np.int32)
    want = [x + y, x - y, x * y, x / y, np.fmod(x, y), x ** y, np.maximum(x, y),
            np.minimum(x, y), np.arctan2(x, y),
            i & i, i | i, i ^ i,
            np.array([[896, 0], [49152, 24]]),  # i << i; a negative count gives 0
            np.array([[0, -1], [0, 0]]),        # i >> i; out-of-range counts fill the sign
            tdiv, np.fmod(i, i),
            None, x < y, i >= i, u != u, (x < y) == (x < y), np.zeros((2, 2), bool),
            np.where(x < y, x, y), np.clip(x, -1, 1), np.minimum(np.maximum(y, x), x)]
    ok = len(outs) == len(want)
    for k, (o, w) in enumerate(zip(outs, want)):
        if w is None:
            continue
        good = np.allclose(o.astype(np.float64), np.asarray(w, np.float64), rtol=1e-5)
        if not good:
            print(f"    binary output {k}: got {o}, want {w}")
        ok &= good
    # u >> u is logical on ui8 (PyTorch's >> on uint8): 200 >> 200 is 0, not 255.
    ok &= np.array_equal(outs[16], np.zeros((2, 2), np.uint8)) and outs[16].dtype == np.uint8
    ok &= outs[12].dtype == np.int32 and outs[13].dtype == np.int32
    return ok, "binary ops, compares, select, clamp vs numpy"


def check_shapes(run):
    x = np.arange(6, dtype=f32).reshape(2, 3)
    outs = run([x, np.int64(1), np.int64(2)])
    ds = x[1:2, 1:3]  # start (1, 2) clamped to (1, 1) for size (1, 2)
    dus = x.copy()
    dus[1:2, 1:3] = ds
    pad = np.zeros((3, 6), f32)
    interior = np.zeros((2, 5), f32)
    interior[:, ::2] = x
    padded = np.concatenate([interior[:, 1:], np.zeros((2, 2), f32)], 1)  # lo -1, hi 2
    pad[1:] = padded
    want = [x.T, x[:, ::2], ds, dus, np.concatenate([x, x, x], 1), pad, x[::-1],
            np.broadcast_to(np.arange(3, dtype=np.int32), (4, 3)),
            np.broadcast_to(x.T[:, :, None], (3, 2, 4)), x.reshape(6), np.float32(0)]
    ok = len(outs) == len(want)
    for k, (o, w) in enumerate(zip(outs, want)):
        good = np.array_equal(o, w)
        if not good:
            print(f"    shapes output {k}: got {o}, want {w}")
        ok &= good
    return ok, "transpose, strided slice, clamped dynamic_slice, DUS, concat, pad, ..."


def check_constants(run):
    outs = run([])
    want = [np.inf, -np.inf, np.nan, np.float32(0.1), 0.1, 0.10009765625, 65504, np.inf,
            -np.inf, np.nan, -0.0, -2 ** 63, 255, -128, 7, True, False]
    ok = True
    for k, w in enumerate(want):
        good = np.array_equal(outs[k].astype(np.float64), np.full(2, w, np.float64),
                              equal_nan=True)
        if not good:
            print(f"    constant {k}: got {outs[k]}, want {w}")
        ok &= good
    ok &= np.signbit(outs[10]).all() and outs[11].dtype == np.int64
    ok &= outs[17].shape == (0, 3)
    return ok, "inf/nan/-0 hex and decimal literals in f32/f64/bf16/f16, int extremes, bool"


def check_dot(run):
    import ml_dtypes
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 2, 3)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((4, 3, 5)).astype(ml_dtypes.bfloat16)
    u = np.array([1, 2], f32)
    v = np.array([3, 4, 5], f32)
    bmm, outer = run([a, b, u, v])
    want = np.einsum("bij,bjk->bik", a.astype(np.float64), b.astype(np.float64))
    ok = bmm.dtype == np.float32 and np.allclose(bmm, want, atol=1e-2)
    return ok and np.array_equal(outer, np.outer(u, v)), "bf16 batched matmul -> f32, outer"


def check_reduce_kinds(run):
    f = np.array([[1, 2, 3], [4, 5, 6]], f32)
    i = np.array([[1, -2, 3], [4, 5, -6]], np.int32)
    u = np.array([[9, 2, 200], [4, 5, 6]], np.uint8)
    outs = run([f, i, u])
    want = [np.zeros(2, bool), np.zeros(2, bool), i.prod(1), np.bitwise_and.reduce(i, 1),
            u.min(1), i.max(), f, np.zeros(2)]
    ok = True
    for k, (o, w) in enumerate(zip(outs, want)):
        good = np.array_equal(o, w)
        if not good:
            print(f"    reduce output {k}: got {o}, want {w}")
        ok &= good
    return ok, "AND/OR on bool, PROD/AND on i32, MIN on u8, full and empty reductions"


def check_edges(run):
    outs = run([np.float32(2.5), np.zeros((2, 0), f32)])
    ok = all(np.array_equal(o, np.float32(2.5)) for o in outs[:9])
    ok &= outs[9].shape == (2, 0) and outs[11].shape == (2, 0)
    ok &= np.array_equal(outs[10], [0, 0])  # argmax over an empty dim: index 0
    return ok, "rank-0 window/slice/transpose/pad/..., empty scan, argmax, argsort"


CHECKS = {
    "mlp": check_mlp, "softmax": check_softmax, "conv": check_conv, "gather": check_gather,
    "sort": check_sort, "argmax": check_argmax, "scan": check_scan, "scatter": check_scatter,
    "pool": check_pool, "rng": check_rng, "unary": check_unary, "binary": check_binary,
    "shapes": check_shapes, "constants": check_constants, "dot": check_dot,
    "reduce_kinds": check_reduce_kinds, "edges": check_edges, "linalg": check_linalg,
}

BROKEN = """module @broken {
  func.func public @main(%arg0: tensor<2xf32>) -> (tensor<3xf32>) {
    %v1 = stablehlo.add %arg0, %arg0 : tensor<3xf32>
    return %v1 : tensor<3xf32>
  }
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump-dir", help="use modules already dumped here")
    args = ap.parse_args()
    jax, backend, jmlir, xc, ir = jax_tools()
    jax.config.update("jax_enable_x64", True)
    tmp = None
    dump_dir = args.dump_dir
    if not dump_dir:
        tmp = tempfile.TemporaryDirectory()
        dump_dir = tmp.name
        dump_modules(dump_dir)
    passed = failed = 0
    files = sorted(glob.glob(os.path.join(dump_dir, "*.mlir")))
    if not files:
        print("no modules found")
        return 1
    for path in files:
        name = os.path.splitext(os.path.basename(path))[0]
        text = open(path).read()
        try:
            parse(text, jmlir, ir)
            run = lambda inputs, t=text: compile_and_run(t, inputs, jax, backend, xc)
            backend.compile_and_load(text, xc.DeviceList((backend.devices()[0],)),
                                     xc.CompileOptions())
            detail = "parsed, verified, compiled"
            ok = True
            if name in CHECKS:
                ok, what = CHECKS[name](run)
                detail += f"; ran: {what}"
        except Exception as e:  # noqa: BLE001 -- report every failure and go on
            ok, detail = False, f"{type(e).__name__}: {str(e)[:1500]}"
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        passed += ok
        failed += not ok
    try:
        parse(BROKEN, jmlir, ir)
        print("FAIL negative control: a mistyped module parsed")
        failed += 1
    except Exception:  # noqa: BLE001
        print("ok   negative control: a mistyped module is rejected")
        passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
