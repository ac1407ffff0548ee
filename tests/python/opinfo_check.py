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


def column_signs(v, ref):
    """Per column of v, the sign (for complex vectors the phase) that makes its dot product
    with ref's column real and positive."""
    dot = (v.conj() * ref).sum(-2, keepdim=True)
    signs = torch.sgn(dot) if dot.is_complex() else torch.sign(dot)
    return torch.where(signs == 0, torch.ones_like(signs), signs)


def aligned_eigh(got, want):
    w, v = got
    return w, v.cpu() * column_signs(v.cpu(), want[1])


def aligned_svd(got, want, v_transposed):
    """(U, S, V or Vh) with U's columns and V's the signs that align U's with the CPU's."""
    u, s, v = (t.cpu() for t in got)
    if u.numel() == 0:  # compute_uv=False
        return u, s, v
    signs = column_signs(u, want[0])
    k = s.shape[-1]  # pairs of singular vectors; full U or V has more (exactly the CPU's)
    vsigns = torch.ones(*signs.shape[:-1], v.shape[-2] if v_transposed else v.shape[-1],
                        dtype=signs.dtype)
    vsigns[..., :k] = signs[..., :k]
    return u * signs, s, v * (vsigns.conj().mT if v_transposed else vsigns)


# Ops whose results hold vectors unique only up to sign (eigenvectors, singular vectors, as
# PyTorch documents): each is flipped to agree with the CPU's before comparing.
SIGN_FREE = {
    "linalg.eigh": aligned_eigh,
    "linalg.svd": lambda got, want: aligned_svd(got, want, True),
    "svd": lambda got, want: aligned_svd(got, want, False),
}


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
    if op.name in SIGN_FREE:
        got = SIGN_FREE[op.name](got, want)
    compare(got, want, atol=max(atol, 1e-4), rtol=max(rtol, 1e-4))


def _tensors(x):
    return [t for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


# Gradient tolerances (absolute and relative) for ops whose float32 backward is
# ill-conditioned: logcumsumexp's subtracts exponentials of running sums, and PyTorch's own
# CPU float32 gradient differs from float64 by 2.8e-3 on OpInfo's samples (ours by 4.4e-3).
GRAD_TOLERANCE = {"logcumsumexp": (1e-2, 1e-2)}


def run_sample_compiled(op, sample, index):
    """Runs float32 |sample| through torch.compile(backend="tpu") of |op| and its CPU copy
    through |op| in eager mode; raises on a mismatch of the results or, when the sample
    requires grad, of the input gradients (through the compiled backward) for a seeded
    random cotangent. Returns whether a graph was captured (an op that Dynamo or the
    capture cannot take whole, e.g. one with a data-dependent result shape, runs op by op:
    still compared, but not through the compiler)."""
    import torch._dynamo
    import torchtpu.compile as tc

    cpu_sample = sample.transform(lambda t: to_device(t, "cpu") if isinstance(t, torch.Tensor) else t)
    want = op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
    torch._dynamo.reset()  # each sample compiles anew: a capture per sample, no recompile limit
    captures = len(tc._seen)
    fn = torch.compile(lambda x, *a, **k: op(x, *a, **k), backend="tpu", dynamic=False)
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        got = fn(sample.input, *sample.args, **sample.kwargs)
        if op.name in SIGN_FREE:  # only the values: the vectors' signs are free
            compare(SIGN_FREE[op.name](got, want), want, atol=1e-4, rtol=1e-4)
            return len(tc._seen) > captures
        compare(got, want, atol=1e-4, rtol=1e-4)
        want_out = [t for t in _tensors(want) if t.requires_grad]
        got_out = [t for t in _tensors(got) if t.requires_grad]
        want_in = [t for t in _tensors([cpu_sample.input, cpu_sample.args, cpu_sample.kwargs])
                   if t.requires_grad]
        got_in = [t for t in _tensors([sample.input, sample.args, sample.kwargs]) if t.requires_grad]
        if want_out and want_in:
            assert len(got_out) == len(want_out), "outputs that require grad differ"
            gen = torch.Generator().manual_seed(index)
            cotangents = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in want_out]
            try:
                want_grads = torch.autograd.grad(want_out, want_in, cotangents, allow_unused=True)
            except RuntimeError as e:
                # the CPU refuses this cotangent as ill-defined (linalg.eig's loss depends on
                # the eigenvectors' free phases): no gradient to compare with
                if "ill-defined" in str(e):
                    return len(tc._seen) > captures
                raise
            got_grads = torch.autograd.grad(got_out, got_in, [c.to("tpu") for c in cotangents],
                                            allow_unused=True)
            atol, rtol = GRAD_TOLERANCE.get(op.name, (1e-4, 1e-4))
            for g, w in zip(got_grads, want_grads):
                assert (g is None) == (w is None), "gradients defined for different inputs"
                if w is not None:
                    compare(g, w, atol=atol, rtol=rtol)
    return len(tc._seen) > captures
