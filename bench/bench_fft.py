"""torch.fft on tpu (DFT matmuls on the MXU, torchtpu/csrc/lower_fft.cpp) vs PyTorch CPU
(pocketfft) in the same run: host time per call of a batch of 64 signals, and the cost
model's time for a v5e. A DFT does 4 n m multiply-adds per signal where an FFT does about
n log2 n butterflies: the host (the MXU emulated on this CPU) loses to pocketfft as n
grows; the modelled chip runs the products on its MXU.

Run: .venv/bin/python bench/bench_fft.py
"""
import torch

import torchtpu.report as report
from common import cpu_sync, table, timeit, tpu_sync

BATCH = 64


def modelled_us(fn, x):
    fn(x)
    tpu_sync()
    a = report.totals()["seconds"]["v5e"]
    fn(x)
    tpu_sync()
    return (report.totals()["seconds"]["v5e"] - a) * 1e6


def main():
    rows = []
    cases = [("rfft", torch.fft.rfft, False), ("fft", torch.fft.fft, True),
             ("irfft", lambda z: torch.fft.irfft(z, n=2 * (z.shape[-1] - 1)), "half")]
    for n in (64, 256, 1024, 2048):
        for name, fn, kind in cases:
            x = torch.randn(BATCH, n)
            if kind is True:
                x = torch.randn(BATCH, n, dtype=torch.complex64)
            elif kind == "half":
                x = torch.fft.rfft(x)
            xt = x.to("tpu")
            tc = timeit(lambda: fn(x), cpu_sync)
            tt = timeit(lambda: fn(xt), tpu_sync)
            rows.append([f"{name} {BATCH} x {n}", f"{tt * 1e6:.0f}", f"{tc * 1e6:.0f}",
                         f"{tc / tt:.2f}x", f"{modelled_us(fn, xt):.1f}"])
    x = torch.randn(4, 16000)
    window = torch.hann_window(400)

    def stft(t):
        return torch.stft(t, 400, hop_length=160, window=window.to(t.device), return_complex=True)
    xt = x.to("tpu")
    tc, tt = timeit(lambda: stft(x), cpu_sync), timeit(lambda: stft(xt), tpu_sync)
    rows.append(["stft 4 x 16000, n_fft 400, hop 160", f"{tt * 1e6:.0f}", f"{tc * 1e6:.0f}",
                 f"{tc / tt:.2f}x", f"{modelled_us(stft, xt):.1f}"])
    table("torch.fft (us per call; ratio > 1: tpu faster on this host)",
          ["transform", "tpu host", "cpu", "cpu/tpu", "modelled v5e"], rows)


if __name__ == "__main__":
    main()
