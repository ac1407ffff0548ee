"""Op-level benchmarks, tpu (native eager, strict mode) vs PyTorch CPU in the same run:
dispatch overhead on tiny tensors, matmul throughput at DEFAULT and HIGHEST precision,
elementwise and reduction bandwidth on 64 MiB tensors.

Run: .venv/bin/python bench/bench_ops.py
"""
import torch
import torch.nn.functional as F

from common import cpu_sync, table, timeit, tpu_sync


def dispatch_overhead():
    rows = []
    for name, fn in [("add", lambda a: a + a), ("mul scalar", lambda a: a * 2.0),
                     ("relu", torch.relu), ("sum", torch.sum)]:
        xc = torch.randn(8)
        xt = xc.to("tpu")
        n = 2000

        def loop(x):
            def run():
                for _ in range(n):
                    fn(x)
            return run

        tc = timeit(loop(xc), cpu_sync) / n * 1e6
        tt = timeit(loop(xt), tpu_sync) / n * 1e6
        rows.append([name, f"{tt:.2f}", f"{tc:.2f}", f"{tc / tt:.2f}x"])
    table("Dispatch overhead, 8-element tensors (us/op, lower is better)",
          ["op", "tpu", "cpu", "cpu/tpu"], rows)


def matmul():
    rows = []
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        at, bt = a.to("tpu"), b.to("tpu")
        flops = 2 * n ** 3
        tc = timeit(lambda: a @ b, cpu_sync)
        for prec in ("DEFAULT", "HIGHEST"):
            with torch.tpu.precision(getattr(torch.tpu.Precision, prec)):
                tt = timeit(lambda: at @ bt, tpu_sync)
            rows.append([f"{n}^3 f32", prec, f"{flops / tt / 1e9:.0f}", f"{flops / tc / 1e9:.0f}",
                         f"{tc / tt:.2f}x"])
    table("Matmul (GFLOP/s, higher is better; cpu is PyTorch float32)",
          ["size", "tpu precision", "tpu", "cpu", "tpu/cpu"], rows)


def bandwidth():
    n = 16 * 2 ** 20  # 64 MiB of f32
    xc, yc = torch.randn(n), torch.randn(n)
    xt, yt = xc.to("tpu"), yc.to("tpu")
    rows = []
    for name, fn, bytes_moved in [("add", lambda x, y: x + y, 3 * 4 * n),
                                  ("gelu", lambda x, y: F.gelu(x), 2 * 4 * n),
                                  ("sum", lambda x, y: x.sum(), 4 * n)]:
        tc = timeit(lambda: fn(xc, yc), cpu_sync)
        tt = timeit(lambda: fn(xt, yt), tpu_sync)
        rows.append([name, f"{bytes_moved / tt / 1e9:.1f}", f"{bytes_moved / tc / 1e9:.1f}",
                     f"{tc / tt:.2f}x"])
    table("Elementwise and reduction on 64 MiB f32 (GB/s, higher is better)",
          ["op", "tpu", "cpu", "tpu/cpu"], rows)


if __name__ == "__main__":
    torch.manual_seed(0)
    dispatch_overhead()
    matmul()
    bandwidth()
