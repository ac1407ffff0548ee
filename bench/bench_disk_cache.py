"""Cold vs warm start with TORCHTPU_CACHE_DIR: the first GPT training step (bench_modes'
gpt_step: 2 layers, d_model 64) of a fresh process, in strict eager, fused eager and
torch.compile(backend="tpu"), with no cache directory, with an empty one (the process
lowers, compiles and writes every program) and with the directory the previous process
filled (every program is loaded from disk and compiled from its stored graph).

"torchtpu compile s" is cache_stats()['compile_seconds']: lowering + C compile per miss when
cold, load + C compile per disk hit when warm; PyTorch's meta kernel, which a disk hit also
skips, is not in it. In compile mode nearly all of the first step is Dynamo and
AOTAutograd tracing, which this cache does not hold. Each cell is the best of two runs.

Run: .venv/bin/python bench/bench_disk_cache.py
"""
import json
import os
import subprocess
import sys
import tempfile

from common import table

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = """
import json, sys, time
sys.path.insert(0, {here!r})
import torch, torchtpu
from bench_modes import gpt_step
from common import tpu_sync
mode = {mode!r}
step = gpt_step("tpu", compile=mode == "compile")
t0 = time.perf_counter()
step()
tpu_sync()
first = time.perf_counter() - t0
s = torchtpu.cache_stats()
print("@@" + json.dumps({{"first": first, "torchtpu": s["compile_seconds"],
                         "hits": s.get("disk_hits", 0), "writes": s.get("disk_writes", 0)}}))
"""


def first_step(mode, cache_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHTPU_")}
    if cache_dir:
        env["TORCHTPU_CACHE_DIR"] = cache_dir
    if mode == "fused":
        env["TORCHTPU_EAGER"] = "fused"
    out = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE, mode=mode)], env=env,
                         cwd=HERE, check=True, capture_output=True, text=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("@@")][-1][2:])


def best_of(n, fn):
    """The run with the smallest first-step time of n (the machine is shared)."""
    return min((fn() for _ in range(n)), key=lambda r: r["first"])


def main():
    rows = []
    for mode in ("strict", "fused", "compile"):
        none = best_of(2, lambda: first_step(mode, None))

        def cold_run():
            with tempfile.TemporaryDirectory() as d:
                return first_step(mode, d)

        cold = best_of(2, cold_run)
        with tempfile.TemporaryDirectory() as d:
            first_step(mode, d)
            warm = best_of(2, lambda: first_step(mode, d))
        assert warm["writes"] == 0 and warm["hits"] > 0, warm
        rows.append([mode, f"{none['first']:.3f}", f"{cold['first']:.3f}",
                     f"{warm['first']:.3f}", f"{none['first'] / warm['first']:.2f}x",
                     f"{cold['first'] / warm['first']:.2f}x",
                     f"{cold['torchtpu']:.3f} -> {warm['torchtpu']:.3f}", f"{warm['hits']}"])
    table("First GPT training step of a fresh process (s): no cache dir, empty dir "
          "(writing every entry), warm dir",
          ["mode", "no dir", "cold", "warm", "no dir / warm", "cold / warm",
           "torchtpu compile s (cold -> warm)", "entries loaded"], rows)


if __name__ == "__main__":
    main()
