"""Shared by test_opinfo.py and tools/opinfo_report.py: run one OpInfo sample on tpu and
on CPU (the same inputs) and compare.

Matmul-like ops run at Precision.HIGHEST here so that float32 results are comparable to
PyTorch's CPU float32 within the OpInfo's own tolerances; DEFAULT-precision numerics
are tested separately (test_native_ops.py).
"""
import torch
from torch.testing._internal.common_methods_invocations import op_db  # noqa: F401


def to_device(x, device):
    if isinstance(x, torch.Tensor):
        return x.detach().to(device).requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    return x


# Ops whose result at an index holds columns unique only up to sign (eigenvectors, as
# PyTorch documents): each column is flipped to agree with the CPU's before comparing.
SIGN_FREE_COLUMNS = {"linalg.eigh": 1}


def aligned_columns(v, ref):
    """v's columns times the sign that makes each one's dot product with ref's positive."""
    signs = torch.sign((v * ref).sum(-2, keepdim=True))
    return v * torch.where(signs == 0, torch.ones_like(signs), signs)


def compare(got, want, atol, rtol):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got)}"
        torch.testing.assert_close(got.cpu(), want, atol=atol, rtol=rtol, equal_nan=True,
                                   check_device=False)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            compare(g, w, atol, rtol)
    else:
        assert got == want or (got != got and want != want), f"{got} != {want}"


def run_sample(op, sample, dtype):
    """Runs |sample| (on tpu) and its CPU copy through |op|; raises on a mismatch."""
    cpu_sample = sample.transform(lambda t: to_device(t, "cpu") if isinstance(t, torch.Tensor) else t)
    want = op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        got = op(sample.input, *sample.args, **sample.kwargs)
    atol, rtol = (1e-5, 1.3e-6) if dtype == torch.float32 else (1e-2, 1.6e-2)
    if op.name in SIGN_FREE_COLUMNS:
        i = SIGN_FREE_COLUMNS[op.name]
        got = list(got)
        got[i] = aligned_columns(got[i].cpu(), want[i])
    compare(got, want, atol=max(atol, 1e-4), rtol=max(rtol, 1e-4))
