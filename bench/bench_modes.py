"""The GPT example's training step in every way of running it: PyTorch CPU eager (the
reference), tpu strict eager, tpu fused eager, and torch.compile(backend="tpu") (model and
AdamW step with capturable=True, or model with AdamW(fused=True)); compile time of the step
at 1x, 2x and 4x layers; peak memory compiled vs eager; a loop of tiny ops, fused vs strict;
which thread bounds each mode (CPU time per step of the Python and the kernel threads); the
host time of each compiled graph's runs, on one core and with a helping thread. The
host's core-to-core speed is probed between rounds (bench/core_to_core.c), since the VM
has spells in which work split across its two vCPUs runs slower than on one.

The step time is measured on the host (the virtual TPU runs on this machine's CPU) and
modelled for a real v5e by the cost model (include/tpu/cost.h), which also shows what
fewer launches and fused intermediates would save on the chip.

Run: .venv/bin/python bench/bench_modes.py
"""
import os
import sys
import threading
import time

import torch

import torchtpu
import torchtpu.report as report

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import train_gpt  # noqa: E402

from common import core_to_core, cpu_sync, spells, table, timeit, tpu_sync  # noqa: E402


def gpt_step(device, compile=False, n_layer=2, mode="strict", fused_adamw=False):
    """One training step. compile: the model, and the AdamW step with capturable=True (or,
    with fused_adamw, AdamW(fused=True), whose step PyTorch keeps out of Dynamo: it runs
    as the native fused kernel, one program)."""
    torch.manual_seed(0)
    model = train_gpt.GPT(vocab=64, block_size=32, d_model=64, n_head=4, n_layer=n_layer).to(device)
    forward = torch.compile(model, backend="tpu") if compile else model
    if fused_adamw:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=compile)
    opt_step = torch.compile(opt.step, backend="tpu") if compile else opt.step
    x = torch.randint(0, 64, (8, 32)).to(device)
    y = torch.randint(0, 64, (8, 32)).to(device)

    def step():
        _, loss = forward(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt_step()
    return step


def in_mode(mode, fn):
    torchtpu.set_eager_mode(mode)
    try:
        return fn()
    finally:
        torchtpu.set_eager_mode("strict")


MODES = {  # name: (device, eager mode, compiled, AdamW(fused=True))
    "PyTorch CPU eager": ("cpu", "strict", False, False),
    "tpu strict eager": ("tpu", "strict", False, False),
    "tpu fused eager": ("tpu", "fused", False, False),
    "tpu compiled": ("tpu", "strict", True, False),
    "tpu compiled, AdamW(fused=True)": ("tpu", "strict", True, True),
}


BLOCK = 20  # steps per back-to-back timing
SYNC_RUN = 10  # synchronized steps of one mode before the next mode's turn


def step_times(rounds=60):
    """Median wall time of a GPT step per mode, synchronized after each step and back to back
    (BLOCK steps, one sync). The tpu modes take turns (SYNC_RUN synchronized steps or one
    block each), so a change in the machine's load hits them all alike. Also per mode: the
    step's modelled time on a v5e (the cost model) and the executables launched per step;
    and which spells of the host the timings ran in (common.spells)."""
    steps, modelled, launches = {}, {}, {}
    for name, (device, mode, compiled, fused_adamw) in MODES.items():
        step = in_mode(mode, lambda: gpt_step(device, compile=compiled, fused_adamw=fused_adamw))
        in_mode(mode, lambda: [step() for _ in range(3)])
        tpu_sync()
        if device == "tpu":
            a = report.totals()
            in_mode(mode, lambda: [step() for _ in range(5)])
            tpu_sync()
            b = report.totals()
            modelled[name] = (b["seconds"]["v5e"] - a["seconds"]["v5e"]) / 5
            launches[name] = (b["launches"] - a["launches"]) / 5
        steps[name] = (mode, step, tpu_sync if device == "tpu" else cpu_sync)
    # The CPU reference runs on its own first: PyTorch's OpenMP threads spin for a while
    # after each parallel op, which would steal a core from the tpu step that follows.
    # Synchronized steps are timed one by one, in runs of SYNC_RUN steps of a mode taking
    # turns across the modes: a training loop runs one model step after step, while
    # switching models every step would time each step with the other models' weights
    # and activations in the caches.
    times = {name: [] for name in steps}
    probes = []  # the host's spell (common.core_to_core) between rounds of the tpu modes
    for group in (["PyTorch CPU eager"], [n for n in steps if n != "PyTorch CPU eager"]):
        for _ in range(rounds // SYNC_RUN):
            if "tpu strict eager" in group:
                probes.append(core_to_core())
            for name in group:
                mode, step, sync = steps[name]
                torchtpu.set_eager_mode(mode)
                for _ in range(SYNC_RUN):
                    t0 = time.perf_counter()
                    step()
                    sync()
                    times[name].append(time.perf_counter() - t0)
    # back to back: blocks of steps with one sync at the end (a loop that does not read the
    # loss every step), blocks taking turns across the tpu modes; 15 blocks, since a block's
    # median moves with the machine's load more than a single step's
    blocks = {name: [] for name in steps}
    for group in (["PyTorch CPU eager"], [n for n in steps if n != "PyTorch CPU eager"]):
        for block in range(15):
            if "tpu strict eager" in group and block % 3 == 0:
                probes.append(core_to_core())
            for name in group:
                mode, step, sync = steps[name]
                torchtpu.set_eager_mode(mode)
                sync()
                t0 = time.perf_counter()
                for _ in range(BLOCK):
                    step()
                sync()
                blocks[name].append((time.perf_counter() - t0) / BLOCK)
    torchtpu.set_eager_mode("strict")
    t = {name: sorted(v)[len(v) // 2] for name, v in times.items()}
    tb = {name: sorted(v)[len(v) // 2] for name, v in blocks.items()}
    strict, cpu = t["tpu strict eager"], t["PyTorch CPU eager"]
    m_strict = modelled["tpu strict eager"]
    rows = []
    for name in steps:
        row = [name, f"{t[name] * 1e3:.2f}", f"{strict / t[name]:.2f}x", f"{cpu / t[name]:.2f}x",
               f"{tb[name] * 1e3:.2f}", f"{tb['tpu strict eager'] / tb[name]:.2f}x",
               f"{tb['PyTorch CPU eager'] / tb[name]:.2f}x"]
        if name in modelled:
            row += [f"{modelled[name] * 1e6:.0f}", f"{m_strict / modelled[name]:.2f}x",
                    f"{launches[name]:.0f}"]
        else:
            row += ["", "", ""]
        rows.append(row)
    table("GPT training step (ms; ratios > 1 mean the mode is faster)",
          ["mode", "host ms, synced", "vs strict", "vs CPU eager", f"host ms, {BLOCK} back to back",
           "vs strict", "vs CPU eager", "modelled v5e µs", "modelled vs strict", "launches"], rows)
    print(f"\n{spells(probes)}")
    fused, compiled = t["tpu fused eager"], t["tpu compiled"]
    fb, cb = tb["tpu fused eager"], tb["tpu compiled"]
    print(f"\nfused vs compiled: {fused / compiled:.2f}x on the host synced, {fb / cb:.2f}x back "
          f"to back (target within 1.2x), "
          f"{modelled['tpu fused eager'] / modelled['tpu compiled']:.2f}x modelled")


def graph_times():
    """Per compiled graph of the step_times runs (both compiled modes): the host time of its
    runs on the virtual TPU, begun alone (one core: Python was still issuing the step; some
    of them joined by that thread once it reached synchronize) or with the thread waiting
    in synchronize helping (two cores), from the executables' own counters
    (_TpuGraph.stats)."""
    import torchtpu.compile as tc
    rows = []
    for g in tc.graphs:
        st = g.stats()
        if st["steps"] < 20 or st["alone_runs"] + st["helped_runs"] == 0:
            continue
        alone = st["alone_ns"] / st["alone_runs"] / 1e3 if st["alone_runs"] else None
        helped = st["helped_ns"] / st["helped_runs"] / 1e3 if st["helped_runs"] else None
        rows.append([g.kind, f"{st['steps']}", "yes" if st["two_threads"] else "no",
                     f"{st['alone_runs']}", f"{st['joined_runs']}", f"{alone:.0f}" if alone else "",
                     f"{st['helped_runs']}", f"{helped:.0f}" if helped else "",
                     f"{alone / helped:.2f}x" if alone and helped else ""])
    table("Compiled graphs: host µs per run (mean), alone and with a thread helping",
          ["graph", "steps", "two-thread schedule", "runs alone", "of them joined later",
           "µs alone", "runs helped", "µs helped", "alone / helped"], rows)


def _thread_cpu_s():
    """CPU seconds (user + system) of each thread of this process, by thread id: (name, s).
    The C core names its threads (tpu_stream: a chip's queue, tpu_pool: the kernels' pool)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def thread_cpu(steps=200):
    """Per tpu mode, CPU ms per step of the Python side (the main thread while it issues
    |steps| steps back to back, before the sync, and autograd's device thread) and of the
    kernel threads (through the sync), with the wall ms per step: the thread whose CPU time
    is close to the wall time is the one that bounds the step. /proc counts in clock ticks
    (10 ms), so |steps| steps make the error about 0.1 ms per step."""
    main = str(threading.get_native_id())
    rows = []
    for name, (device, mode, compiled, fused_adamw) in MODES.items():
        if device != "tpu" or fused_adamw:
            continue
        step = in_mode(mode, lambda: gpt_step(device, compile=compiled))
        in_mode(mode, lambda: [step() for _ in range(5)])
        tpu_sync()
        torchtpu.set_eager_mode(mode)
        before = _thread_cpu_s()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        issued = _thread_cpu_s()
        tpu_sync()
        wall = time.perf_counter() - t0
        after = _thread_cpu_s()
        torchtpu.set_eager_mode("strict")

        def spent(named):  # CPU ms per step of the threads |named| accepts, through the sync
            return sum(cpu - before.get(tid, (n, 0.0))[1] for tid, (n, cpu) in after.items()
                       if named(n)) / steps * 1e3
        rows.append([name, f"{wall / steps * 1e3:.2f}",
                     f"{(issued[main][1] - before[main][1]) / steps * 1e3:.2f}",
                     f"{spent(lambda n: n.startswith('pt_autograd')):.2f}",
                     f"{spent(lambda n: n == 'tpu_stream'):.2f}",
                     f"{spent(lambda n: n == 'tpu_pool'):.2f}"])
    table(f"CPU ms per GPT step, {steps} steps back to back (a step is bound by its busiest "
          f"thread, or by the sum over the {os.cpu_count()} cores)",
          ["mode", "wall", "main thread (Python, before the sync)", "autograd thread",
           "tpu_stream (kernels)", "tpu_pool (kernel workers)"], rows)


def compile_times():
    rows = []
    for n_layer in (1, 2, 4):
        row = [f"{n_layer}"]
        for fused_adamw in (False, True):
            torch._dynamo.reset()
            step = gpt_step("tpu", compile=True, n_layer=n_layer, fused_adamw=fused_adamw)
            t0 = time.perf_counter()
            step()  # Dynamo + AOTAutograd + capture + C compile of forward and backward
            tpu_sync()
            first = time.perf_counter() - t0
            torchtpu.reset_fused_stats()
            t_steady = timeit(step, tpu_sync, min_time=0.5)
            row += [f"{first:.2f}", f"{t_steady * 1e3:.2f}"]
        rows.append(row)
    table("Compile time of the GPT training step (first call, s) by layers",
          ["layers", "first step (s), capturable AdamW compiled", "steady step (ms)",
           "first step (s), AdamW(fused=True)", "steady step (ms)"], rows)


def peak_memory():
    rows = []
    for name, kw in [("strict eager", {}), ("compiled", {"compile": True})]:
        step = gpt_step("tpu", **kw)
        step()
        tpu_sync()
        torch.tpu.reset_peak_memory_stats()
        base = torch.tpu.memory_allocated()
        step()
        tpu_sync()
        rows.append([name, f"{(torch.tpu.max_memory_allocated() - base) / 2**20:.2f}"])
    table("Peak HBM during one GPT step above the model and optimizer state (MiB)",
          ["mode", "MiB"], rows)


def tiny_ops(rounds=7):
    """A loop of 400 tiny ops, strict and fused taking turns (|rounds| of 0.3 s each, so that
    a change in the machine's load hits both), median µs per op of each."""
    def loop():
        x = torch.ones(8, device="tpu")
        for _ in range(200):
            x = x * 1.0001 + 0.5
        return x
    strict, fused = [], []
    for _ in range(rounds):
        strict.append(timeit(loop, tpu_sync, min_time=0.3))
        fused.append(in_mode("fused", lambda: timeit(loop, tpu_sync, min_time=0.3)))
    t_strict, t_fused = sorted(strict)[rounds // 2], sorted(fused)[rounds // 2]
    table("A loop of 400 tiny ops (µs per op)", ["mode", "µs/op", "strict/fused"],
          [["strict", f"{t_strict / 400 * 1e6:.2f}", "1.00x"],
           ["fused", f"{t_fused / 400 * 1e6:.2f}", f"{t_strict / t_fused:.2f}x"]])


if __name__ == "__main__":
    step_times()
    graph_times()
    thread_cpu()
    tiny_ops()
    peak_memory()
    compile_times()
