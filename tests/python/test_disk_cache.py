# TORCHTPU_CACHE_DIR: a second process starts warm. The GPT example's training step runs
# in a fresh process with an empty cache directory, then again in another fresh process:
# the second lowers and compiles nothing from scratch (every in-memory miss is served from
# disk), writes nothing, and computes the same losses, in strict eager, fused eager and
# torch.compile(backend="tpu"). Corrupt, foreign and unwritable cases are ignored, counted
# and warned about once, never fatal.
import os

import pytest

from conftest import check_json, run_json, run_python

STEP = """
    import os, sys, warnings
    sys.path.insert(0, os.path.join({root!r}, "examples"))
    import torch, torchtpu, train_gpt
    mode = {mode!r}
    compiled = mode == "compile"
    torch.manual_seed(0)
    model = train_gpt.GPT(vocab=32, block_size=16, d_model=32, n_head=2, n_layer=1).to("tpu")
    forward = torch.compile(model, backend="tpu") if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=compiled)
    opt_step = torch.compile(opt.step, backend="tpu") if compiled else opt.step
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 32, (4, 16), generator=g).to("tpu")
    y = torch.randint(0, 32, (4, 16), generator=g).to("tpu")
    losses = []
    for _ in range(3):
        _, loss = forward(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt_step()
        losses.append(loss.item())
    emit({{"losses": losses, "stats": torchtpu.cache_stats()}})
"""

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_step(mode, cache_dir, extra_env=None):
    env = {"TORCHTPU_CACHE_DIR": cache_dir}
    if mode == "fused":
        env["TORCHTPU_EAGER"] = "fused"
    env.update(extra_env or {})
    return run_json(STEP.format(root=ROOT, mode=mode), env, timeout=300)


def entries(cache_dir):
    return sorted(f for f in os.listdir(cache_dir) if f.endswith(".tpuc"))


@pytest.mark.parametrize("mode", ["strict", "fused", "compile"])
def test_second_process_is_warm(tmp_path, mode):
    cache_dir = str(tmp_path / "cache")
    cold = run_step(mode, cache_dir)
    s = cold["stats"]
    assert s["disk"] and s["disk_writes"] > 0 and s["disk_hits"] == 0 and s["disk_errors"] == 0
    assert len(entries(cache_dir)) == s["disk_writes"]
    assert not [f for f in os.listdir(cache_dir) if f.startswith(".tmp")]
    warm = run_step(mode, cache_dir)
    w = warm["stats"]
    # every program came from disk: no lowering, no compile from scratch (a compile from
    # scratch writes an entry). The only misses are keys that never compile (an out=
    # tensor resized by the meta kernel changes the key), as in the cold run.
    assert w["disk_writes"] == 0 and w["disk_errors"] == 0, w
    assert w["disk_hits"] == s["disk_writes"], (s, w)
    assert w["disk_misses"] == s["disk_misses"] - s["disk_writes"], (s, w)
    assert warm["losses"] == cold["losses"]


def test_corrupt_entries_are_ignored(tmp_path):
    cache_dir = str(tmp_path / "cache")
    cold = run_step("fused", cache_dir)
    files = entries(cache_dir)
    for i, name in enumerate(files):  # truncate one third, flip a byte in another third
        path = os.path.join(cache_dir, name)
        data = bytearray(open(path, "rb").read())
        if i % 3 == 0:
            data = data[: len(data) // 2]
        elif i % 3 == 1:
            data[len(data) // 2] ^= 0x20
        open(path, "wb").write(bytes(data))
    bad = sum(1 for i in range(len(files)) if i % 3 != 2)
    warm = run_step("fused", cache_dir)
    w = warm["stats"]
    assert warm["losses"] == cold["losses"]
    assert w["disk_errors"] == bad and w["disk_writes"] == bad  # recompiled and rewritten
    assert w["disk_hits"] == len(files) - bad
    again = run_step("fused", cache_dir)["stats"]  # the rewritten entries are good again
    assert again["disk_errors"] == 0 and again["disk_writes"] == 0


def test_foreign_files_and_log(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    run_step("strict", str(cache_dir))
    name = entries(str(cache_dir))[0]
    data = bytearray((cache_dir / name).read_bytes())
    data[16] ^= 1  # the build tag: an entry written by another build
    (cache_dir / name).write_bytes(bytes(data))
    res = run_python(STEP.format(root=ROOT, mode="strict"),
                     {"TORCHTPU_CACHE_DIR": str(cache_dir), "TORCHTPU_LOG_RECOMPILES": "1"},
                     timeout=300)
    w = check_json(res)["stats"]
    assert w["disk_errors"] == 1 and w["disk_writes"] == 1
    assert "loaded aten::" in res.stderr and "from the disk cache" in res.stderr


def test_unusable_directory_warns_once(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    res = run_python(STEP.format(root=ROOT, mode="strict"),
                     {"TORCHTPU_CACHE_DIR": str(blocker / "cache")}, timeout=300)
    out = check_json(res)
    assert out["stats"]["disk"] is False and out["stats"]["disk_writes"] == 0
    assert res.stderr.count("TORCHTPU_CACHE_DIR") == 1, res.stderr
    assert len(out["losses"]) == 3
