"""Distributed benchmark: all_reduce bus bandwidth of the "tpu" backend (shared memory between
processes) against PyTorch's Gloo on CPU tensors, 1 MiB to 256 MiB over 2 processes, in the
same run; and the DDP step time of examples/train_ddp.py on 2 processes against 1.

Run: .venv/bin/python bench/bench_dist.py [--sizes-mib 1 4 16 64 256] [--ddp-steps 20]

The workers are started with the env:// variables torchrun sets; both backends live in one
process group "cpu:gloo,tpu:tpu" (cpu tensors go to Gloo, tpu tensors to the tpu backend).
Bus bandwidth = 2 (n-1)/n * bytes / time (NCCL's definition for all_reduce), median of 5-9
calls, the two backends alternating call by call.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(sizes_mib):
    import torch
    import torch.distributed as dist
    dist.init_process_group("cpu:gloo,tpu:tpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    results = []
    for mib in sizes_mib:
        n = mib * (1 << 20) // 4
        tensors = {"tpu": torch.ones(n, device="tpu"), "gloo": torch.ones(n)}
        times = {"tpu": [], "gloo": []}
        iters = 9 if mib <= 16 else 5
        for it in range(iters + 1):
            # The two backends alternate, so that both see the same load on a shared machine.
            for name, t in tensors.items():
                dist.barrier(device_ids=[0])
                t0 = time.perf_counter()
                dist.all_reduce(t)
                if name == "tpu":
                    torch.tpu.synchronize()
                if it:  # the first round is the warm-up (first touch of the memory)
                    times[name].append(time.perf_counter() - t0)
        row = {"mib": mib}
        for name, ts in times.items():
            ts.sort()
            row[name] = 2 * (world - 1) / world * n * 4 / ts[len(ts) // 2] / 1e9  # GB/s
        results.append(row)
        del tensors
    if rank == 0:
        print("@@JSON" + json.dumps(results), flush=True)
    dist.destroy_process_group()


def launch(world, argv, cwd):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable] + argv, env=env, cwd=cwd, text=True,
                                      stdout=subprocess.PIPE))
    out = [p.communicate()[0] for p in procs]
    for p in procs:
        if p.returncode:
            raise SystemExit(f"a worker failed: {argv}")
    line = [ln for o in out for ln in o.splitlines() if ln.startswith("@@JSON")][0]
    return json.loads(line[len("@@JSON"):])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--ddp-steps", type=int, default=20)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.sizes_mib)
        return
    sys.path.insert(0, HERE)
    from common import table

    rows = launch(2, [os.path.abspath(__file__), "--worker", "--sizes-mib",
                      *map(str, args.sizes_mib)], HERE)
    table("all_reduce bus bandwidth, 2 processes (GB/s)",
          ["size", "tpu backend (shm)", "gloo, cpu tensors", "ratio"],
          [[f"{r['mib']} MiB", f"{r['tpu']:.2f}", f"{r['gloo']:.2f}",
            f"{r['tpu'] / r['gloo']:.1f}x"] for r in rows])

    ex = os.path.join(ROOT, "examples")
    cmd = ["train_ddp.py", "--steps", str(args.ddp_steps), "--json"]
    one = subprocess.run([sys.executable] + cmd, cwd=ex, text=True, capture_output=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"), check=True).stdout
    one = json.loads([ln for ln in one.splitlines() if ln.startswith("@@JSON")][0][6:])
    two = launch(2, cmd, ex)
    table("DDP step, GPT example (2 layers, d=64, global batch 8x32), median ms",
          ["processes", "step (ms)", "per-rank batch", "modelled ICI per step (ms)"],
          [["1", f"{one['step_ms']:.1f}", "8", "-"],
           ["2 (tpu backend, shm)", f"{two['step_ms']:.1f}", "4",
            f"{two['modelled_ici_ms'] / args.ddp_steps:.4f}"]])


if __name__ == "__main__":
    main()
