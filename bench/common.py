"""Shared by the benchmarks: timing with warm-up, and a side-by-side table with ratios.

Every benchmark times our path (tpu) and the reference (PyTorch on CPU) in the same run on
the same machine and prints the ratio, since absolute times on shared machines drift.
"""
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
