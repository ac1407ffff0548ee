"""F.scaled_dot_product_attention on tpu as one fused program (torchtpu/csrc/sdpa.cpp).

The tpu's _fused_sdp_choice picks PyTorch's "overrideable" backend for dense float inputs
with equal head counts, no dropout and a mask that broadcasts to the scores; the forward
(_scaled_dot_product_fused_attention_overrideable) and its backward are each one program:
one launch per call in strict eager, and the same two ops in compiled graphs, or, where
the weights P are no larger than q, k and v together, torchtpu's attention_keep_probs pair
(the forward saves P for the backward; torchtpu/partition.py). The other calls (dropout,
GQA) take PyTorch's math path as before.

Tolerances, against PyTorch on the CPU (its flash kernel or its math path, both f32):
- HIGHEST (six bf16 passes, about f32): atol 2e-5 / rtol 1e-5 on outputs and gradients of
  order 1. The fused kernel scales the scores after the product (the math path scales q and
  k by sqrt(scale) before it) and divides by the row sum after P v: the same sums
  associated differently, a few f32 ulps apart (measured worst 1.7e-6).
- DEFAULT (one bf16 pass: q, k, P, v rounded to 8 mantissa bits, relative 2^-9 each):
  atol 4e-2 / rtol 2e-2 (measured worst about 1.6e-2 on gradients summed over 16 keys).
- bfloat16 inputs: the CPU computes in f32 and rounds its result; the tpu rounds P and dS to
  bf16 for their products, as flash kernels do: atol 6e-2 / rtol 3e-2 (a few bf16 steps,
  measured worst 3.1e-2).
"""
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

import torchtpu
import torchtpu.compile as tc
import torchtpu.report as report
from conftest import no_fallback, run_json, tpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import train_gpt  # noqa: E402

HIGHEST = dict(rtol=1e-5, atol=2e-5)
DEFAULT = dict(rtol=2e-2, atol=4e-2)
BF16 = dict(rtol=3e-2, atol=6e-2)
FUSED_FWD = "aten._scaled_dot_product_fused_attention_overrideable.default"
FUSED_BWD = "aten._scaled_dot_product_fused_attention_overrideable_backward.default"
KEEP_FWD = "torchtpu.attention_keep_probs.default"
KEEP_BWD = "torchtpu.attention_keep_probs_backward.default"


def gen(seed):
    return torch.Generator().manual_seed(seed)


def qkv(lead=(2, 3), L=6, S=6, E=8, Ev=8, dtype=torch.float32, seed=0):
    """q (lead..., L, E), k (lead..., S, E), v (lead..., S, Ev) on the CPU."""
    g = gen(seed)
    return [torch.randn(*lead, n, e, generator=g).to(dtype)
            for n, e in ((L, E), (S, E), (S, Ev))]


class GptHeads(list):
    """GPT's attention inputs (examples/train_gpt.py): one (B, T, 3 H E) projection, split
    and viewed as (B, T, H, E), transposed to (B, H, T, E): strided, not contiguous views,
    made on the device from the leaf (the gradients compared are the leaf's)."""

    def __init__(self, B=2, H=4, T=16, E=8, dtype=torch.float32, seed=0):
        super().__init__([torch.randn(B, T, 3 * H * E, generator=gen(seed)).to(dtype)])
        self.H, self.E = H, E

    def to(self, dtype):
        out = GptHeads.__new__(GptHeads)
        list.__init__(out, [t.to(dtype) for t in self])
        out.H, out.E = self.H, self.E
        return out

    def views(self, x):
        B, T, _ = x.shape
        return [t.view(B, T, self.H, self.E).transpose(1, 2)
                for t in x.split(self.H * self.E, dim=2)]


def cast(tensors, dtype):
    return tensors.to(dtype) if isinstance(tensors, GptHeads) else [t.to(dtype) for t in tensors]


def run(device, tensors, grad_mask=False, cot_seed=7, **kw):
    """SDPA forward and backward on |device|: (output, grads of the leaves[, dmask]) on the
    CPU, in float32. kw: attn_mask, is_causal, scale, dropout_p, enable_gqa."""
    leaves = [t.detach().to(device).requires_grad_() for t in tensors]
    q, k, v = tensors.views(*leaves) if isinstance(tensors, GptHeads) else leaves
    mask = kw.pop("attn_mask", None)
    if mask is not None:
        mask = mask.detach().to(device).requires_grad_(grad_mask)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    cot = torch.randn(out.shape, generator=gen(cot_seed)).to(out.dtype).to(device)
    out.backward(cot)
    res = [out] + [t.grad for t in leaves] + ([mask.grad] if grad_mask else [])
    return [r.detach().float().cpu() for r in res]


def compare(tensors, tol, precision="highest", grad_mask=False, **kw):
    want = run("cpu", tensors, grad_mask, **dict(kw))
    with torch.tpu.precision(precision):
        got = no_fallback(lambda: run("tpu", tensors, grad_mask, **dict(kw)))
    assert len(got) == len(want)
    for name, w, g in zip(["out", "grad 0", "grad 1", "grad 2", "grad 3"], want, got):
        assert not g.isnan().any(), name
        torch.testing.assert_close(g, w, **tol, msg=lambda m: f"{name}: {m}")
    return got


def bool_mask(L, S, seed=3):
    m = torch.rand(L, S, generator=gen(seed)) > 0.3
    m[:, 0] = True
    return m


CASES = {
    "plain": lambda: (qkv(), {}),
    "causal": lambda: (qkv(), dict(is_causal=True)),
    "causal_L_gt_S": lambda: (qkv(L=7, S=4), dict(is_causal=True)),  # top-left tril
    "causal_L_lt_S": lambda: (qkv(L=4, S=9), dict(is_causal=True)),
    "bool_mask": lambda: (qkv(L=5, S=7), dict(attn_mask=bool_mask(5, 7))),
    "bool_mask_4d": lambda: (qkv(L=5, S=7),
                             dict(attn_mask=torch.rand(2, 3, 5, 7, generator=gen(4)) > 0.2)),
    "scale": lambda: (qkv(), dict(scale=0.3)),
    "negative_scale": lambda: (qkv(), dict(scale=-0.5)),
    "L_ne_S_and_Ev": lambda: (qkv(L=5, S=11, E=8, Ev=6), {}),
    "3d": lambda: (qkv(lead=(3,), L=5, S=7), dict(is_causal=True)),
    "gpt_views": lambda: (GptHeads(), dict(is_causal=True)),
    "long": lambda: (qkv(lead=(1, 2), L=70, S=130, E=16), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_cpu_at_highest_precision(case):
    tensors, kw = CASES[case]()
    compare(tensors, HIGHEST, **kw)


@pytest.mark.parametrize("shape", [(1, 5, 7), (2, 1, 5, 7), (3, 1, 7), (2, 3, 5, 7), (7,)])
def test_float_mask_gets_its_gradient(shape):
    mask = torch.randn(*shape, generator=gen(5))
    compare(qkv(L=5, S=7), HIGHEST, grad_mask=True, attn_mask=mask)


def test_default_precision_and_bfloat16():
    for case in ("causal", "bool_mask", "gpt_views"):
        tensors, kw = CASES[case]()
        compare(tensors, DEFAULT, precision="default", **kw)
        compare(cast(tensors, torch.bfloat16), BF16, precision="default", **kw)
    tensors, kw = CASES["causal"]()
    compare(cast(tensors, torch.float16), BF16, precision="default", **kw)


def test_a_fully_masked_row_gives_zeros_not_nan():
    # the math path's _safe_softmax gives such a row zero weights: output 0, gradients 0
    mask = bool_mask(5, 7)
    mask[2] = False
    fmask = torch.zeros(2, 1, 5, 7)
    fmask[1, 0, 4] = float("-inf")
    for kw in (dict(attn_mask=mask), dict(attn_mask=fmask)):
        out, dq, _, _ = compare(qkv(L=5, S=7), HIGHEST, **kw)
    assert (out[1, :, 4] == 0).all() and (dq[1, :, 4] == 0).all()
    out, dq, _, _ = compare(qkv(L=5, S=7), HIGHEST, attn_mask=mask)
    assert (out[:, :, 2] == 0).all() and (dq[:, :, 2] == 0).all()


def launches(fn):
    torch.tpu.synchronize()
    before = report.totals()["launches"]
    result = fn()
    torch.tpu.synchronize()
    return report.totals()["launches"] - before, result


@pytest.mark.parametrize("case", ["causal", "gpt_views", "3d", "bool_mask_4d"])
def test_one_launch_forward_and_one_backward(case):
    tensors, kw = CASES[case]()
    kw = {n: tpu(x) for n, x in kw.items()}
    leaves = [tpu(t).requires_grad_() for t in tensors]
    if isinstance(tensors, GptHeads):
        # GPT's heads: strided views of the leaf, made in the forward; the backward of the
        # split is one more launch (a cat of the three gradients), the views' are free
        def forward():
            return F.scaled_dot_product_attention(*tensors.views(*leaves), **kw)
        other = (0, 1)
    else:
        def forward():
            return F.scaled_dot_product_attention(*leaves, **kw)
        # (a bool mask: F.scaled_dot_product_attention turns it into a float bias before it
        # calls the fused op, in the same program)
        other = (0, 0)
    for _ in range(2):  # the second call hits the cache
        n_fwd, out = launches(forward)
        cot = torch.ones_like(out)
        n_bwd, _ = launches(lambda: out.backward(cot))
        assert (n_fwd - other[0], n_bwd - other[1]) == (1, 1)  # math path: 18 and 9 (GPT's)
        assert out.grad_fn.name() == "ScaledDotProductFusedAttentionOverrideableBackward0"
        for t in leaves:
            t.grad = None


def test_the_choice_and_the_outputs_of_the_fused_op(highest):
    q, k, v = [t.to("tpu") for t in qkv(L=5, S=7, Ev=6)]
    overrideable, math = int(SDPBackend.OVERRIDEABLE), int(SDPBackend.MATH)
    assert torch._fused_sdp_choice(q, k, v) == overrideable
    assert torch._fused_sdp_choice(q, k, v, attn_mask=tpu(bool_mask(5, 7))) == overrideable
    assert torch._fused_sdp_choice(q, k, v, dropout_p=0.1) == math
    assert torch._fused_sdp_choice(q, k[:, :1], v[:, :1], enable_gqa=True) == math
    assert torch._fused_sdp_choice(q.double(), k.double(), v.double()) == math
    assert torch._fused_sdp_choice(q, k, v, attn_mask=tpu(torch.zeros(4, 7))) == math
    with torch.nn.attention.sdpa_kernel(SDPBackend.MATH):  # the user's choice holds
        assert torch._fused_sdp_choice(q, k, v) == math
        n, _ = launches(lambda: F.scaled_dot_product_attention(q, k, v))
        assert n > 1
    with torch.nn.attention.sdpa_kernel(SDPBackend.OVERRIDEABLE):
        with pytest.raises(RuntimeError, match="No viable backend"):
            F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    # 3-D with value's head dim not query's: PyTorch's meta function fails on it (its
    # alloc_with_matching_layout assumes 4 dims), so compiled code could not trace the op
    assert torch._fused_sdp_choice(q[0], k[0], v[0]) == math
    assert torch._fused_sdp_choice(q[0], k[0], k[0]) == overrideable
    # every output as PyTorch's meta function gives it, logsumexp's values too
    for args in [(q, k, v), (q[0], k[0], k[0])]:
        got = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(*args)
        want = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            *[a.to("meta") for a in args])
        for g, w in zip(got, want):
            if isinstance(w, torch.Tensor):
                assert (g.shape, g.dtype, g.stride()) == (w.shape, w.dtype, w.stride())
            else:
                assert g == w
        scores = args[0].cpu() @ args[1].cpu().transpose(-2, -1) / 8 ** 0.5
        torch.testing.assert_close(got[1].cpu().view(scores.shape[:-1]),
                                   scores.logsumexp(-1), **HIGHEST)
    # the backward's gradients too, for GPT's strided heads (query's dim order: the
    # gradients' transposes back to (B, T, H, E) are contiguous)
    q, k, v = GptHeads().views(tpu(GptHeads()[0]))
    bias = tpu(torch.randn(16, 16))
    for dev in ("tpu", "meta"):
        a = [t.to(dev) for t in (q, k, v, bias)]
        out, lse, *rest = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            *a, is_causal=True)
        grads = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
            torch.ones_like(out), *a, [True] * 4, out, lse, *rest[:4], 0.0, True, *rest[4:6])
        if dev == "tpu":
            got = grads
    for g, w in zip(got, grads):
        assert (g.shape, g.dtype, g.stride()) == (w.shape, w.dtype, w.stride())


def test_dropout_and_gqa_take_the_math_path():
    q, k, v = qkv(lead=(2, 4), L=5, S=5)
    # GQA: 4 query heads over 2 key/value heads
    compare([q, k[:, :2], v[:, :2]], HIGHEST, enable_gqa=True, is_causal=True)
    # dropout: p = 1 drops every weight on both devices (deterministic); p = 0.5 runs and
    # trains through the math path natively
    compare([q, k, v], HIGHEST, dropout_p=1.0)
    out, dq, dk, dv = no_fallback(lambda: run("tpu", [q, k, v], dropout_p=0.5))
    assert out.isfinite().all() and dq.isfinite().all() and dv.abs().sum() > 0


def test_fused_mode_matches_strict():
    tensors, kw = CASES["gpt_views"]()
    strict = run("tpu", tensors, **kw)
    torchtpu.set_eager_mode("fused")
    try:
        fused = no_fallback(lambda: run("tpu", tensors, **kw))
    finally:
        torchtpu.set_eager_mode("strict")
    for a, b in zip(strict, fused):
        assert torch.equal(a, b)


def test_bad_inputs_raise_like_cpu():
    q, k, v = qkv(L=5, S=7)
    cases = [
        (q, k.double(), v, {}),                      # dtypes differ
        (q, k[..., :4], v, {}),                      # E differs
        (q, k, v, dict(attn_mask=torch.zeros(4, 7))),  # a mask that does not broadcast
        # a mask with is_causal: an error, as documented (the CPU's flash kernel accepts it
        # when value's head dim is query's; its math path raises)
        (q, k, v[..., :6], dict(attn_mask=bool_mask(5, 7), is_causal=True)),
        (q[0, 0, 0], k[0, 0, 0], v[0, 0, 0], {}),    # 1-D
    ]
    for a, b, c, kw in cases:
        with pytest.raises(Exception) as cpu:
            F.scaled_dot_product_attention(a, b, c, **kw)
        tkw = {n: tpu(x) for n, x in kw.items()}
        with pytest.raises(Exception) as dev:
            F.scaled_dot_product_attention(tpu(a), tpu(b), tpu(c), **tkw)
        assert type(dev.value) is type(cpu.value), (kw, cpu.value, dev.value)
    # key and value with different lengths: the CPU's flash kernel does not check it (and
    # reads past value's end); the tpu raises the math path's RuntimeError
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(tpu(q), tpu(k), tpu(v[..., :3, :]))
    # the fused op called directly checks what the choice otherwise rules out
    with pytest.raises(RuntimeError, match="dropout"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            tpu(q), tpu(k), tpu(v), dropout_p=0.5)


def test_native_off_takes_the_math_path():
    out = run_json("""
        import torch, torchtpu
        q = torch.randn(1, 2, 4, 8, device="tpu")
        emit(torch._fused_sdp_choice(q, q, q))
    """, env={"TORCHTPU_NATIVE": "0", "TORCHTPU_FALLBACK": "silent"})
    assert out == 0


def graph_targets(kind):
    return {str(n.target) for g in tc.graphs if g.kind == kind
            for n in g.gm.graph.nodes if n.op == "call_function"}


def test_compiled_graphs_hold_the_fused_ops_and_train_like_eager():
    def train(compile):
        torch.manual_seed(0)
        model = train_gpt.GPT(vocab=64, block_size=16, d_model=32, n_head=4, n_layer=2).to("tpu")
        forward = torch.compile(model, backend="tpu") if compile else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = gen(1)
        losses = []
        for _ in range(4):
            x = torch.randint(0, 64, (4, 16), generator=g).to("tpu")
            y = torch.randint(0, 64, (4, 16), generator=g).to("tpu")
            _, loss = forward(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return [v.item() for v in losses]

    torch._dynamo.reset()
    tc.graphs.clear()
    try:
        with torch.tpu.precision("highest"):
            eager = no_fallback(lambda: train(False))
            compiled = no_fallback(lambda: train(True))
        fwd, bwd = graph_targets("forward"), graph_targets("backward")
    finally:
        torch._dynamo.reset()
    # P (16 x 16 per head) is smaller than q, k and v (3 x 16 x 8): the forward saves it
    # (torchtpu/partition.py), the backward does not recompute it
    assert KEEP_FWD in fwd and KEEP_BWD in bwd, (fwd, bwd)
    assert not (fwd | bwd) & {FUSED_FWD, FUSED_BWD}, (fwd, bwd)
    # (the loss's log_softmax is the graphs' only other softmax: _log_softmax and its
    # backward's exp)
    math = {"aten._safe_softmax.default", "aten._softmax.default", "aten.amax.default",
            "aten.bmm.default", "aten._softmax_backward_data.default"}
    assert not (fwd | bwd) & math, (fwd | bwd) & math
    # the core-ATen decompositions reorder a few reductions elsewhere: f32 rounding only
    torch.testing.assert_close(compiled, eager, rtol=2e-5, atol=1e-5)
    assert {g.kind for g in tc.graphs if g.stats()["plans"] > 0} >= {"forward", "backward"}


KEEP_CASES = {  # name: (inputs, SDPA kwargs, whether the compiled graphs keep P)
    "causal": (lambda: qkv(L=6, S=6), dict(is_causal=True), True),
    "scale_L_ne_S": (lambda: qkv(L=5, S=9, E=8, Ev=6), dict(scale=0.3), True),
    "3d": (lambda: qkv(lead=(3,), L=5, S=7), dict(is_causal=True), True),
    "gpt_views": (lambda: GptHeads(T=16, E=8), dict(is_causal=True), True),
    # P (64 x 64) larger than q, k and v (3 x 64 x 8): the flash-style recompute
    "long": (lambda: qkv(L=64, S=64, E=8, Ev=8), dict(is_causal=True), False),
    # a mask (and its gradient) stays with the overrideable pair
    "bool_mask": (lambda: qkv(L=5, S=7), dict(attn_mask=bool_mask(5, 7)), False),
}


@pytest.mark.parametrize("case", list(KEEP_CASES))
def test_compiled_training_keeps_small_attention_weights(case):
    make, kw, keeps = KEEP_CASES[case]
    tensors = make()

    def step(device, compile):
        leaves = [t.detach().to(device).requires_grad_() for t in tensors]
        views = tensors.views if isinstance(tensors, GptHeads) else (lambda *x: list(x))

        def attend(*leaves):
            q, k, v = views(*leaves)
            args = {key: (a.to(device) if isinstance(a, torch.Tensor) else a)
                    for key, a in kw.items()}
            return F.scaled_dot_product_attention(q, k, v, **args)

        fn = torch.compile(attend, backend="tpu") if compile else attend
        out = fn(*leaves)
        out.backward(torch.randn(out.shape, generator=gen(7)).to(device))
        return [r.detach().cpu() for r in [out] + [t.grad for t in leaves]]

    torch._dynamo.reset()
    tc.graphs.clear()
    try:
        want = step("cpu", False)
        with torch.tpu.precision("highest"):
            got = no_fallback(lambda: step("tpu", True))
        fwd, bwd = graph_targets("forward"), graph_targets("backward")
    finally:
        torch._dynamo.reset()
    assert (KEEP_FWD in fwd and KEEP_BWD in bwd) == keeps, (fwd, bwd)
    assert (FUSED_FWD in fwd and FUSED_BWD in bwd) != keeps, (fwd, bwd)
    for name, w, g in zip(["out", "grad 0", "grad 1", "grad 2"], want, got):
        torch.testing.assert_close(g, w, **HIGHEST, msg=lambda m: f"{name}: {m}")


def test_keep_probs_ops_check_their_inputs():
    q, k, v = (tpu(t) for t in qkv(L=4, S=5))
    out, probs = torch.ops.torchtpu.attention_keep_probs(q, k, v, False)
    assert probs.shape == (2, 3, 4, 5) and probs.dtype == torch.float32
    torch.testing.assert_close(probs.sum(-1).cpu(), torch.ones(2, 3, 4), **HIGHEST)
    with pytest.raises(RuntimeError, match="attention_keep_probs_backward: probs must be float32"):
        torch.ops.torchtpu.attention_keep_probs_backward(out, q, k, v, probs[..., :4])
    with pytest.raises(RuntimeError, match="attention_keep_probs: query's last dim"):
        torch.ops.torchtpu.attention_keep_probs(q, k[..., :4], v, False)
    # the device still works
    dq, dk, dv = torch.ops.torchtpu.attention_keep_probs_backward(out, q, k, v, probs)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


def test_compiled_inference_and_masks():
    # graphs without autograd run Dynamo's graph directly (torchtpu/compile.py, _direct);
    # a bool and a float mask, and dynamic shapes (the choice sees symbolic sizes)
    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    torch._dynamo.reset()
    tc.graphs.clear()
    try:
        for dynamic in (False, True):
            compiled = torch.compile(attend, backend="tpu", dynamic=dynamic)
            for L in (5, 9):
                q, k, v = qkv(L=L, S=7)
                for mask in (bool_mask(L, 7), torch.randn(1, L, 7, generator=gen(L))):
                    want = attend(q, k, v, mask)
                    with torch.no_grad(), torch.tpu.precision("highest"):
                        got = no_fallback(lambda: compiled(*map(tpu, (q, k, v, mask))))
                    torch.testing.assert_close(got.cpu(), want, **HIGHEST)
    finally:
        torch._dynamo.reset()


def test_products_with_a_result_dtype():
    # aten::mm.dtype / bmm.dtype (the CPU has no kernel; CUDA's rule): bf16 operands, the
    # f32 accumulation unrounded; the fused kernels' products use bmm.dtype
    a = torch.randn(3, 5, 64, generator=gen(8)).bfloat16()
    b = torch.randn(3, 64, 7, generator=gen(9)).bfloat16()
    want = a.double() @ b.double()
    got = no_fallback(lambda: torch.bmm(tpu(a), tpu(b), out_dtype=torch.float32))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-6, atol=1e-5)
    got = no_fallback(lambda: torch.mm(tpu(a[0]), tpu(b[0]), out_dtype=torch.float32))
    torch.testing.assert_close(got.cpu().double(), want[0], rtol=1e-6, atol=1e-5)
    with pytest.raises(RuntimeError, match="out_dtype"):
        torch.bmm(tpu(a).float(), tpu(b).float(), out_dtype=torch.bfloat16)
