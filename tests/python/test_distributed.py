# The "tpu" torch.distributed backend, on this machine, with 2 and 4 processes of one chip
# each (scripts under tests/python/dist/, launched with torchrun):
# - every collective against Gloo on CPU, over shared memory and over the Gloo transport;
# - the GPT example under DDP and under FSDP2 (parameters sharded) gives the losses of one
#   process with the same global batch, also with TORCHTPU_DIST_TRANSPORT=gloo, and also
#   with the model and the optimizer step compiled (torch.compile(backend="tpu"));
# - a DTensor tensor-parallel MLP (column- then row-parallel) matches the unsharded one,
#   eager and compiled (the compiled forward split at its all_reduce into plans);
# - a killed rank, a stalled rank and mismatched shapes make the others fail with an error
#   naming the rank (within the timeout), and no shared-memory segment is left in /dev/shm;
# - chip collectives within one process (TORCHTPU_CHIPS=4), and the interconnect model.
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import HERE, run_json, subprocess_env

EXAMPLES = os.path.join(HERE, "..", "..", "examples")


def shm_entries():
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:  # pragma: no cover
        return set()


def torchrun(nproc, script, *args, env=None, timeout=240, out_dir=None):
    if out_dir is not None:
        env = dict(env or {}, TORCHTPU_TEST_OUT=str(out_dir))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), "--monitor-interval", "0.1", script, *args]
    p = subprocess.run(cmd, env=subprocess_env(env), cwd=HERE, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"{cmd} failed\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return p.stdout


def oks(out_dir, nproc):
    """The results the ranks wrote to out_dir (see report() in the dist/ scripts)."""
    found = {}
    for r in range(nproc):
        with open(os.path.join(out_dir, f"rank{r}.json")) as f:
            found[r] = json.load(f)
    return found


def json_line(out):
    lines = [ln for ln in out.splitlines() if ln.startswith("@@JSON")]
    assert len(lines) == 1, out[-3000:]
    return json.loads(lines[0][len("@@JSON"):])


@pytest.mark.parametrize("nproc,transport", [(2, "shm"), (4, "shm"), (2, "gloo")])
def test_every_collective_matches_gloo(nproc, transport, tmp_path):
    before = shm_entries()
    torchrun(nproc, "dist/collectives.py", env={"TORCHTPU_DIST_TRANSPORT": transport},
             out_dir=tmp_path)
    res = oks(tmp_path, nproc)
    for r in res.values():
        assert r["transport"] == transport
        s = r["stats"]
        # every kind was counted, with modelled time from the ICI model
        for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
                     "send_recv", "barrier"):
            assert s[kind]["count"] > 0, kind
        assert s["all_reduce"]["modelled_seconds"] > 0
    assert shm_entries() <= before


@pytest.fixture(scope="module")
def single_process_losses():
    p = subprocess.run([sys.executable, "train_ddp.py", "--steps", "4", "--json"],
                       env=subprocess_env(), cwd=EXAMPLES, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-4000:]
    return json_line(p.stdout)["losses"]


@pytest.mark.parametrize("nproc,mode,transport,compiled", [
    (2, "ddp", "shm", False), (4, "ddp", "shm", False), (2, "ddp", "gloo", False),
    (2, "fsdp", "shm", False), (2, "ddp", "shm", True), (2, "fsdp", "shm", True)])
def test_training_matches_one_process(single_process_losses, nproc, mode, transport, compiled):
    out = torchrun(nproc, os.path.join(EXAMPLES, "train_ddp.py"), "--steps", "4", "--json",
                   "--mode", mode, *(["--compile"] if compiled else []),
                   env={"TORCHTPU_DIST_TRANSPORT": transport})
    res = json_line(out)
    assert res["world"] == nproc and res["transport"] == transport
    if mode == "fsdp":
        assert res["sharded"], "FSDP2 did not shard the parameters"
    if compiled:  # the model's forward and backward, and the AdamW step, replayed as plans
        assert set(res["compiled_graphs"]) == {"forward", "backward", "inference"}, res
    # Same global batch, split across ranks: the same losses up to summation order.
    assert res["losses"] == pytest.approx(single_process_losses, rel=2e-3, abs=2e-3), \
        (res["losses"], single_process_losses)
    assert res["losses"][-1] < res["losses"][0]


@pytest.mark.parametrize("nproc,compiled", [(2, False), (2, True)])
def test_tensor_parallel_mlp_matches_unsharded(nproc, compiled, tmp_path):
    torchrun(nproc, "dist/tp_mlp.py", *(["--compile"] if compiled else []), out_dir=tmp_path)
    res = oks(tmp_path, nproc)
    assert all(r["max_output_diff"] < 1e-4 for r in res.values())
    if compiled:  # the forward is split at its all_reduce: the layers before it are a plan
        for r in res.values():
            assert r["plans"]["forward"] >= 1 and r["plans"]["backward"] >= 1, r
            assert r["no_grad_plans"] >= 1, r


def _launch_ranks(mode, world, timeout_s=3):
    """Starts |world| ranks of dist/faults.py with the env:// variables torchrun would set."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(world):
        env = {"RANK": r, "WORLD_SIZE": world, "LOCAL_RANK": r, "LOCAL_WORLD_SIZE": world,
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
               "TORCHTPU_DIST_TIMEOUT": timeout_s}
        procs.append(subprocess.Popen([sys.executable, "dist/faults.py", mode],
                                      env=subprocess_env(env), cwd=HERE, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return procs


def _error_of(proc, timeout=90):
    out, err = proc.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("@@ERR ")]
    assert proc.returncode == 3 and lines, f"exit {proc.returncode}\n{out[-2000:]}\n{err[-4000:]}"
    kind, waited, msg = lines[0][len("@@ERR "):].split("|", 2)
    return kind, float(waited), msg


def test_killed_rank_is_named_and_nothing_is_left_in_dev_shm():
    before = shm_entries()
    procs = _launch_ranks("kill", 2)
    for r in (0,):
        kind, waited, msg = _error_of(procs[r])
        assert kind == "DistBackendError", msg
        assert "rank 1 (pid" in msg and "exited" in msg, msg
        assert waited < 3.0, (waited, msg)  # found dead at once, not at the timeout
    procs[1].wait(timeout=30)
    assert procs[1].returncode == -9
    assert shm_entries() <= before, shm_entries() - before


def test_stalled_rank_is_named_within_the_timeout():
    before = shm_entries()
    procs = _launch_ranks("stall", 2, timeout_s=2)
    try:
        kind, waited, msg = _error_of(procs[0])
    finally:
        procs[1].kill()
        procs[1].communicate()
    assert kind == "DistBackendError", msg
    assert "timed out after 2.0 s" in msg and "waiting for rank(s) 1" in msg, msg
    assert 2.0 <= waited < 6.0, waited
    assert shm_entries() <= before


def test_mismatched_shapes_raise_on_every_rank():
    procs = _launch_ranks("mismatch", 2)
    for p in procs:
        kind, _, msg = _error_of(p)
        assert kind == "RuntimeError"
        assert ("tensor size mismatch across ranks: rank 0 has float32[4, 3] (48 bytes), "
                "rank 1 has float32[5, 3] (60 bytes)") in msg, msg


def test_collectives_across_the_chips_of_one_process():
    res = run_json("""
        import torch, torchtpu.distributed as tdist
        tdist.reset_stats()
        xs = [torch.full((6, 2), float(c + 1), device=f"tpu:{c}") for c in range(4)]
        tdist.all_reduce_chips(xs)
        out = {"sum": [x.cpu()[0, 0].item() for x in xs], "dev": [str(x.device) for x in xs]}
        tdist.all_reduce_chips(xs, op="max")
        ys = [torch.arange(8.0, device=f"tpu:{c}") * (c + 1) for c in range(4)]
        g = tdist.all_gather_chips([y[:2] for y in ys])
        out["gather"] = g[3].cpu().tolist()
        rs = tdist.reduce_scatter_chips(ys)
        out["rs"] = [r.cpu().tolist() for r in rs]
        ys[2].fill_(7)
        tdist.broadcast_chips(ys, src=2)
        out["bcast"] = ys[0].cpu().tolist()
        try:
            tdist.all_reduce_chips([xs[0], xs[0]])
        except ValueError as e:
            out["err"] = str(e)
        s = tdist.stats()
        out["ar"] = s["all_reduce"]
        out["model"] = tdist.collective_seconds("all_reduce", 48, "v5e", [2, 2])
        emit(out)
    """, env={"TORCHTPU_CHIPS": "2x2"})
    assert res["sum"] == [10.0] * 4 and res["dev"] == [f"tpu:{c}" for c in range(4)]
    assert res["gather"] == [0, 1, 0, 2, 0, 3, 0, 4]
    assert res["rs"] == [[0, 10], [20, 30], [40, 50], [60, 70]]  # (1+2+3+4) * arange
    assert res["bcast"] == [7.0] * 8
    assert "two tensors on tpu:0" in res["err"]
    # 2 all_reduces of 48 bytes on a 2x2 v5e: latency-bound, 2 * (1+1) hops * 1 us each
    assert res["ar"]["count"] == 2 and res["ar"]["bytes"] == 96
    assert res["model"] == pytest.approx(4e-6)
    assert res["ar"]["modelled_seconds"] == pytest.approx(8e-6)


def test_interconnect_model_from_python():
    import torchtpu.distributed as tdist
    # v5e ring of 4 (no wraparound): 2 * 64 MiB / 50 GB/s
    assert tdist.collective_seconds("all_reduce", 64 << 20, "v5e", [4]) == pytest.approx(
        2 * (64 << 20) / 50e9)
    # full 16x16 v5e pod: wraparound on both axes, V / (2 axes * W_bi)
    assert tdist.collective_seconds("all_gather", 10**9, "v5e", [16, 16]) == pytest.approx(5e-3)
    with pytest.raises(ValueError, match="unknown collective kind"):
        tdist.collective_seconds("all_sum", 1)
    with pytest.raises(ValueError, match="unknown TPU generation"):
        tdist.collective_seconds("all_reduce", 1, "v9", [2])
