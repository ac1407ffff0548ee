"""Linear algebra on tpu (lower_linalg.cpp, lower_lu.cpp, lower_qr.cpp, lower_eigh.cpp,
lower_svd.cpp; kernels in src/vtpu/kernels/linalg.c, qr.c, eigh.c and svd.c) vs PyTorch CPU (LAPACK through MKL/OpenBLAS), side by side
in one run: Cholesky, triangular solve, linalg.solve, inv, det, QR, eigh and SVD at a batch of small
matrices and one larger one, plus a MultivariateNormal log_prob step with its backward and
nn.init.orthogonal_ of a 512 x 256 weight. Ratios > 1 mean tpu is faster.

Our kernels are unblocked loops in f64 on one thread per matrix; LAPACK is blocked and
vectorized, so large single matrices are where the gap shows.

Run: .venv/bin/python bench/bench_linalg.py
"""
import torch

import torchtpu  # noqa: F401  (registers the tpu device)
from common import cpu_sync, table, timeit, tpu_sync

GEN = torch.Generator().manual_seed(0)


def spd(batch, n):
    m = torch.randn(batch, n, n, generator=GEN)
    return m @ m.mT + n * torch.eye(n)


def cases():
    for batch, n in ((256, 8), (32, 32), (1, 256)):
        a, b = spd(batch, n), torch.randn(batch, n, 4, generator=GEN)
        l = torch.linalg.cholesky(a)
        yield f"cholesky {batch} x {n}x{n}", lambda a=a: torch.linalg.cholesky(a), (a,)
        yield (f"solve_triangular {batch} x {n}x{n}, 4 rhs",
               lambda l, b: torch.linalg.solve_triangular(l, b, upper=False), (l, b))
        yield f"linalg.solve {batch} x {n}x{n}, 4 rhs", torch.linalg.solve, (a, b)
        yield f"inv {batch} x {n}x{n}", torch.linalg.inv, (a,)
        yield f"det {batch} x {n}x{n}", torch.linalg.det, (a,)
        yield f"linalg.qr {batch} x {n}x{n}", torch.linalg.qr, (a,)
        if n <= 32:  # larger ones take the CPU fallback (lower_eigh.cpp)
            yield f"linalg.eigh {batch} x {n}x{n}", torch.linalg.eigh, (a,)
        yield (f"linalg.svd {batch} x {n}x{n}",
               lambda a: torch.linalg.svd(a, full_matrices=False), (a,))

    def mvn_step(mean, cov, x):
        mean = mean.detach().requires_grad_()
        dist = torch.distributions.MultivariateNormal(mean, covariance_matrix=cov)
        loss = -dist.log_prob(x).mean()
        loss.backward()
        return mean.grad

    yield "MultivariateNormal(16) log_prob + backward, 512 samples", mvn_step, (
        torch.zeros(16), spd(1, 16)[0], torch.randn(512, 16, generator=GEN))
    yield "nn.init.orthogonal_ 512 x 256", torch.nn.init.orthogonal_, (torch.empty(512, 256),)


def main():
    rows = []
    for name, fn, args in cases():
        t_cpu = timeit(lambda: fn(*args), cpu_sync)
        tpu_args = [a.to("tpu") for a in args]
        t_tpu = timeit(lambda: fn(*tpu_args), tpu_sync)
        rows.append([name, f"{t_cpu * 1e6:.0f}", f"{t_tpu * 1e6:.0f}", f"{t_cpu / t_tpu:.2f}x"])
    table("Linear algebra: tpu (native) vs PyTorch CPU (µs per call, synced)",
          ["op", "PyTorch CPU µs", "tpu µs", "tpu speed-up"], rows)


if __name__ == "__main__":
    main()
