"""Shared by the benchmarks: timing with warm-up, a side-by-side table with ratios, and a
probe of the host's core-to-core speed (which spell of the VM a timing ran in).

Every benchmark times our path (tpu) and the reference (PyTorch on CPU) in the same run on
the same machine and prints the ratio, since absolute times on shared machines drift.
"""
import os
import re
import subprocess
import time

import torch


def timeit(fn, sync, min_time=0.5, warmup=2):
    """Median seconds per call of fn(), after |warmup| calls; sync() ends each timing."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > min_time and len(times) >= 3:
            break
    times.sort()
    return times[len(times) // 2]


def tpu_sync():
    torch.tpu.synchronize()


def cpu_sync():
    pass


def table(title, header, rows):
    """Prints a markdown table; rows are lists of already formatted cells."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PROBE_SRC = os.path.join(_ROOT, "bench", "core_to_core.c")
_PROBE_BIN = os.path.join(_ROOT, "build", "core_to_core")
FAST_ROUND_TRIP_NS = 150  # below: the two CPUs share a cache (bench/core_to_core.c)


def core_to_core():
    """(round trip ns, GB/s reading what the other CPU wrote) from bench/core_to_core.c,
    built on first use; None where it cannot be built or run."""
    try:
        if (not os.path.exists(_PROBE_BIN) or
                os.path.getmtime(_PROBE_BIN) < os.path.getmtime(_PROBE_SRC)):
            os.makedirs(os.path.dirname(_PROBE_BIN), exist_ok=True)
            subprocess.run(["cc", "-std=c11", "-O2", "-D_GNU_SOURCE", "-pthread", _PROBE_SRC,
                            "-o", _PROBE_BIN], check=True, capture_output=True)
        out = subprocess.run([_PROBE_BIN], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    m = re.match(r"round trip (\d+) ns, other core ([\d.]+) GB/s", out)
    return (int(m.group(1)), float(m.group(2))) if m else None


def spells(probes):
    """One line on the host's spells from core_to_core() samples taken during a timing."""
    probes = [p for p in probes if p]
    if not probes:
        return "host spells: not probed (bench/core_to_core.c could not be built)"
    fast = [p for p in probes if p[0] < FAST_ROUND_TRIP_NS]
    slow = [p for p in probes if p[0] >= FAST_ROUND_TRIP_NS]
    part = []
    for name, group in (("fast", fast), ("slow", slow)):
        if group:
            ns = [p[0] for p in group]
            part.append(f"{len(group)} {name} ({min(ns)}-{max(ns)} ns)")
    return (f"host spells: {len(probes)} probes of the core-to-core round trip during the "
            f"timings, " + ", ".join(part) + " (bench/core_to_core.c; slow: the vCPUs share "
            "no cache, and work split across them runs slower than on one)")
