"""The GPT example's training step in every way of running it: PyTorch CPU eager (the
reference), tpu strict eager, tpu fused eager, and torch.compile(backend="tpu"); compile
time of the step at 1x, 2x and 4x layers (compiled: model and optimizer step, the latter
with capturable=True); peak memory compiled vs eager; a loop of tiny
ops, fused vs strict.

Run: .venv/bin/python bench/bench_modes.py
"""
import os
import sys
import time

import torch

import torchtpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import train_gpt  # noqa: E402

from common import cpu_sync, table, timeit, tpu_sync  # noqa: E402


def gpt_step(device, compile=False, n_layer=2, mode="strict"):
    torch.manual_seed(0)
    model = train_gpt.GPT(vocab=64, block_size=32, d_model=64, n_head=4, n_layer=n_layer).to(device)
    forward = torch.compile(model, backend="tpu") if compile else model
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


def step_times():
    t_cpu = timeit(gpt_step("cpu"), cpu_sync, min_time=2)
    t_strict = timeit(gpt_step("tpu"), tpu_sync, min_time=2)
    t_fused = in_mode("fused", lambda: timeit(gpt_step("tpu"), tpu_sync, min_time=2))
    t_compiled = timeit(gpt_step("tpu", compile=True), tpu_sync, min_time=2)
    ms = lambda t: f"{t * 1e3:.2f}"  # noqa: E731
    table("GPT training step (ms; ratios > 1 mean the first is faster)",
          ["mode", "ms", "vs strict", "vs CPU eager"],
          [["PyTorch CPU eager", ms(t_cpu), "", "1.00x"],
           ["tpu strict eager", ms(t_strict), "1.00x", f"{t_cpu / t_strict:.2f}x"],
           ["tpu fused eager", ms(t_fused), f"{t_strict / t_fused:.2f}x", f"{t_cpu / t_fused:.2f}x"],
           ["tpu compiled", ms(t_compiled), f"{t_strict / t_compiled:.2f}x",
            f"{t_cpu / t_compiled:.2f}x"]])
    print(f"\nfused vs compiled: {t_fused / t_compiled:.2f}x (target within 1.2x)")


def compile_times():
    rows = []
    for n_layer in (1, 2, 4):
        torch._dynamo.reset()
        step = gpt_step("tpu", compile=True, n_layer=n_layer)
        t0 = time.perf_counter()
        step()  # Dynamo + AOTAutograd + capture + C compile of forward and backward
        tpu_sync()
        first = time.perf_counter() - t0
        torchtpu.reset_fused_stats()
        t_steady = timeit(step, tpu_sync, min_time=0.5)
        rows.append([f"{n_layer}", f"{first:.2f}", f"{t_steady * 1e3:.2f}"])
    table("Compile time of the GPT training step (first call, s) by layers",
          ["layers", "first step (s)", "steady step (ms)"], rows)


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


def tiny_ops():
    def loop():
        x = torch.ones(8, device="tpu")
        for _ in range(200):
            x = x * 1.0001 + 0.5
        return x
    t_strict = timeit(loop, tpu_sync, min_time=1)
    t_fused = in_mode("fused", lambda: timeit(loop, tpu_sync, min_time=1))
    table("A loop of 400 tiny ops (µs per op)", ["mode", "µs/op", "strict/fused"],
          [["strict", f"{t_strict / 400 * 1e6:.2f}", "1.00x"],
           ["fused", f"{t_fused / 400 * 1e6:.2f}", f"{t_strict / t_fused:.2f}x"]])


if __name__ == "__main__":
    step_times()
    tiny_ops()
    peak_memory()
    compile_times()
