"""PyTorch's transformer fast path on tpu (torchtpu/csrc/transformer_fastpath.cpp, nested.cpp).

In eval mode under no_grad, nn.MultiheadAttention calls aten::_native_multi_head_attention
and nn.TransformerEncoderLayer aten::_transformer_encoder_layer_fwd; nn.TransformerEncoder
with a left-aligned src_key_padding_mask packs the batch into a nested tensor
(torch._nested_tensor_from_mask, after torch._nested_tensor_from_mask_left_aligned), runs
the layers on it and pads the result back (to_padded_tensor, zeros at the padding). All of
it runs natively, with no op on the CPU fallback, and gives the CPU's results.

Tolerances. float32 matmuls on tpu follow torch.tpu.precision:
- HIGHEST (six bf16 passes, about float32): outputs (layer-normed, of order 1) and
  attention weights (at most 1) to 2e-5 absolute; measured worst about 1e-6.
- DEFAULT (one bf16 pass: inputs rounded to 8 mantissa bits, a relative error near 2^-9
  per product): 5e-2 absolute on the layer-normed outputs; measured worst 1.4e-2 over
  three layers (the MHA's outputs 2.5e-3, its weights 4.4e-4).
- bfloat16 models: both devices round every op's result to bfloat16; 0.1 absolute (a few
  bfloat16 steps at |x| < 4); measured worst 1.6e-2, one step.
A row whose keys are all masked is NaN on the CPU (its _masked_softmax), and on tpu too.
"""
import copy
import itertools

import pytest
import torch
import torch.nn as nn

import torchtpu
from conftest import no_fallback, run_json, tpu

TIGHT = dict(rtol=0, atol=2e-5, equal_nan=True)
LOOSE = dict(rtol=0, atol=5e-2, equal_nan=True)
B, L, D, H, FF = 3, 10, 32, 4, 64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def padding(kind):
    """(B, L) bool, True at padding: left-aligned (the encoder's nested path), with a gap
    (left-aligned check fails: the layers' dense masked path), or a row all padding."""
    pad = torch.zeros(B, L, dtype=torch.bool)
    if kind == "left":
        pad[1, 7:] = True
        pad[2, 3:] = True
    elif kind == "gap":
        pad[1, 2] = True
        pad[2, 6:] = True
    elif kind == "empty_row":
        pad[0, 5:] = True
        pad[1, :] = True
    return pad


def encoder(norm_first=False, activation="relu", layers=2, seed=0):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, norm_first=norm_first,
                                       activation=activation)
    # norm_first layers cannot use nested tensors (PyTorch warns if asked)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=not norm_first).eval()


def on_tpu(module):
    """A copy of |module| on the tpu (the CPU original stays)."""
    return copy.deepcopy(module).to("tpu")


def run_both(module, *args, tol=TIGHT, precision="highest", **kwargs):
    """module(*args, **kwargs) on the CPU and (a copy) on tpu under no_grad, with no fallback
    on tpu; the results compared; the CPU's returned."""
    moved = {}  # one tpu tensor per CPU tensor: self-attention passes x as q, k and v

    def on(a):
        return moved.setdefault(id(a), tpu(a)) if a is not None else None
    with torch.no_grad():
        want = module(*args, **kwargs)
        twin = on_tpu(module)
        with torch.tpu.precision(precision):
            got = no_fallback(lambda: twin(*map(on, args),
                                           **{k: on(v) for k, v in kwargs.items()}))
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        if w is None:
            assert g is None
        else:
            assert g.device.type == "tpu" and not g.is_nested
            torch.testing.assert_close(g.cpu(), w, **tol)
    return want


@pytest.mark.parametrize("norm_first,activation,pad", [
    (nf, act, pad) for nf, act, pad in itertools.product(
        [False, True], ["relu", "gelu"], ["none", "left", "gap", "empty_row"])])
def test_encoder_matches_cpu(norm_first, activation, pad):
    enc = encoder(norm_first, activation)
    x = torch.randn(B, L, D, generator=gen())
    kwargs = {} if pad == "none" else {"src_key_padding_mask": padding(pad)}
    want = run_both(enc, x, **kwargs)
    if pad in ("left", "empty_row") and not norm_first:  # the nested path: zeros at padding
        assert torch.all(want[padding(pad)] == 0)


def test_encoder_default_precision():
    enc = encoder(activation="gelu", layers=3)
    x = torch.randn(B, L, D, generator=gen(1))
    run_both(enc, x, tol=LOOSE, precision="default")
    run_both(enc, x, tol=LOOSE, precision="default", src_key_padding_mask=padding("left"))


def test_encoder_bfloat16():
    enc = encoder(activation="gelu").to(torch.bfloat16)
    x = torch.randn(B, L, D, generator=gen(1)).to(torch.bfloat16)
    bf16 = dict(rtol=0, atol=0.1, equal_nan=True)
    run_both(enc, x, tol=bf16)
    run_both(enc, x, tol=bf16, src_key_padding_mask=padding("left"))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_layer_alone_with_masks(norm_first, activation):
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, norm_first=norm_first,
                                       activation=activation).eval()
    x = torch.randn(B, L, D, generator=gen(2))
    causal = nn.Transformer.generate_square_subsequent_mask(L)  # float, -inf above
    run_both(layer, x)
    run_both(layer, x, src_key_padding_mask=padding("gap"))
    run_both(layer, x, src_mask=causal)
    run_both(layer, x, src_mask=causal, src_key_padding_mask=padding("left"))
    run_both(layer, x, src_mask=causal.isinf())  # bool


def mha(seed=3):
    torch.manual_seed(seed)
    return nn.MultiheadAttention(D, H, batch_first=True).eval()


ATTN_MASKS = {
    "none": None,
    "causal bool": torch.triu(torch.ones(L, L, dtype=torch.bool), 1),
    "causal float": nn.Transformer.generate_square_subsequent_mask(L),
    "per head": torch.rand(B * H, L, L, generator=gen(4)) > 0.6,
}


@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("attn_mask", list(ATTN_MASKS))
@pytest.mark.parametrize("key_padding", ["none", "gap", "empty_row"])
def test_multihead_attention_matches_cpu(need_weights, average, attn_mask, key_padding):
    kpm = None if key_padding == "none" else padding(key_padding)
    m = ATTN_MASKS[attn_mask]
    if m is not None and m.dtype.is_floating_point and kpm is not None:
        m = m.isinf()  # a float attn_mask with a bool key_padding_mask: PyTorch refuses
    x = torch.randn(B, L, D, generator=gen(5))
    want = run_both(mha(), x, x, x, need_weights=need_weights, average_attn_weights=average,
                    key_padding_mask=kpm, attn_mask=m)
    assert (want[1] is None) == (not need_weights)
    if need_weights:
        assert want[1].shape == ((B, L, L) if average else (B, H, L, L))


def test_multihead_attention_separate_inputs_and_default_precision():
    # query, key and value different tensors: not the fast path (nn.MultiheadAttention
    # checks `query is key`), so call the op directly; one projection per third of the weight
    m = mha()
    q, k, v = (torch.randn(B, L, D, generator=gen(s)) for s in (6, 7, 8))
    args = (D, H, m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias)
    with torch.no_grad():
        want = torch._native_multi_head_attention(q, k, v, *args)
        with torch.tpu.precision("highest"):
            got = no_fallback(lambda: torch._native_multi_head_attention(
                tpu(q), tpu(k), tpu(v), *[tpu(a) for a in args]))
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w, **TIGHT)
    x = torch.randn(B, L, D, generator=gen(9))
    run_both(m, x, x, x, tol=LOOSE, precision="default")


@pytest.mark.parametrize("mask_type,mask", [
    (0, torch.rand(L, L, generator=gen(10)) > 0.7),        # (L, L)
    (1, padding("gap")),                                   # (B, L)
    (2, torch.rand(B, H, L, L, generator=gen(11)) > 0.7),  # the scores' shape
])
def test_mask_types_of_the_ops(mask_type, mask):
    torch.manual_seed(12)
    layer = nn.TransformerEncoderLayer(D, H, FF, batch_first=True).eval()
    x = torch.randn(B, L, D, generator=gen(12))
    a = layer.self_attn
    mha_args = (D, H, a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias, mask,
                True, False, mask_type)
    layer_args = (D, H, a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias,
                  False, False, 1e-5, layer.norm1.weight, layer.norm1.bias, layer.norm2.weight,
                  layer.norm2.bias, layer.linear1.weight, layer.linear1.bias,
                  layer.linear2.weight, layer.linear2.bias, mask, mask_type)
    with torch.no_grad():
        want_mha = torch._native_multi_head_attention(x, x, x, *mha_args)
        want_layer = torch._transformer_encoder_layer_fwd(x, *layer_args)
        with torch.tpu.precision("highest"):
            xt = tpu(x)
            got_mha = no_fallback(lambda: torch._native_multi_head_attention(
                xt, xt, xt, *[tpu(a) for a in mha_args]))
            got_layer = no_fallback(lambda: torch._transformer_encoder_layer_fwd(
                xt, *[tpu(a) for a in layer_args]))
    for g, w in zip(got_mha + (got_layer,), want_mha + (want_layer,)):
        torch.testing.assert_close(g.cpu(), w, **TIGHT)


def test_nested_tensor_ops_match_cpu():
    x = torch.randn(B, L, D, generator=gen(13))
    keep = padding("left").logical_not()
    gappy = padding("gap").logical_not()
    xt, kt, gt = tpu(x), tpu(keep), tpu(gappy)
    assert no_fallback(lambda: torch._nested_tensor_from_mask_left_aligned(xt, kt)) is True
    assert no_fallback(lambda: torch._nested_tensor_from_mask_left_aligned(xt, gt)) is False
    for mask, mt in ((keep, kt), (padding("empty_row").logical_not(), tpu(padding("empty_row").logical_not()))):
        want = torch._nested_tensor_from_mask(x, mask)
        got = no_fallback(lambda: torch._nested_tensor_from_mask(xt, mt))
        assert got.is_nested and got.device.type == "tpu"
        assert torch.equal(got._nested_tensor_size(), want._nested_tensor_size())
        for g, w in zip(no_fallback(got.unbind), want.unbind()):  # printing unbinds
            assert torch.equal(g.cpu(), w)
        assert "nested_tensor" in no_fallback(lambda: repr(got))
        for args in [(0.0,), (-1.5,), (0.0, (B, L, D)), (2.0, (B + 1, L + 2, D + 3))]:
            torch.testing.assert_close(no_fallback(lambda: got.to_padded_tensor(*args)).cpu(),
                                       want.to_padded_tensor(*args), rtol=0, atol=0)
    # mask_check=False takes each row's first mask.sum() tokens, gaps or not
    want = torch._nested_tensor_from_mask(x, gappy, mask_check=False)
    got = no_fallback(lambda: torch._nested_tensor_from_mask(xt, gt, mask_check=False))
    assert torch.equal(got._nested_tensor_size(), want._nested_tensor_size())
    torch.testing.assert_close(got.to_padded_tensor(0.0).cpu(), want.to_padded_tensor(0.0),
                               rtol=0, atol=0)


def test_encoder_layer_on_a_nested_batch():
    torch.manual_seed(14)
    layer = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, activation="gelu").eval()
    x = torch.randn(B, L, D, generator=gen(14))
    keep = padding("left").logical_not()
    with torch.no_grad():
        want = layer(torch._nested_tensor_from_mask(x, keep))
        twin = on_tpu(layer)
        with torch.tpu.precision("highest"):
            got = no_fallback(lambda: twin(torch._nested_tensor_from_mask(tpu(x), tpu(keep))))
    assert got.is_nested and torch.equal(got._nested_tensor_size(), want._nested_tensor_size())
    torch.testing.assert_close(got.to_padded_tensor(0.0).cpu(), want.to_padded_tensor(0.0), **TIGHT)


def _raises_like_cpu(fn, *args):
    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(Exception) as dev:
        fn(*[tpu(a) for a in args])
        torch.tpu.synchronize()
    assert type(dev.value) is type(cpu.value), (dev.value, cpu.value)
    return dev.value


def test_bad_input_raises_like_cpu():
    m = mha()
    w = (m.in_proj_weight.detach(), m.in_proj_bias.detach(), m.out_proj.weight.detach(),
         m.out_proj.bias.detach())
    x = torch.randn(B, L, D, generator=gen(15))
    op = torch._native_multi_head_attention
    with torch.no_grad():
        _raises_like_cpu(lambda q, *a: op(q, q, q, D, H, *a), x[..., :16], *w)  # embed_dim
        _raises_like_cpu(lambda q, *a: op(q, q, q, D, H, *a), x[0], *w)  # not batched
        _raises_like_cpu(lambda q, k, *a: op(q, k, k, D, H, *a), x, x[:, :5], *w)  # q/k/v shapes
        _raises_like_cpu(lambda q, *a: op(q, q, q, D, 5, *a), x, *w)  # heads do not divide D
        _raises_like_cpu(lambda q, wi, *a: op(q, q, q, D, H, wi[:D], *a), x, *w)  # qkv_weight
        _raises_like_cpu(lambda q, wi, bi, *a: op(q, q, q, D, H, wi, bi[:D], *a), x, *w)
        _raises_like_cpu(lambda q, m, *a: op(q, q, q, D, H, *a, m, True, True, 1),
                         x, torch.zeros(B, L + 1, dtype=torch.bool), *w)  # mask shape
        _raises_like_cpu(lambda q, m, *a: op(q, q, q, D, H, *a, m, True, True, 2),
                         x, torch.zeros(B, L, dtype=torch.bool), *w)
        enc = encoder()
        err = _raises_like_cpu(lambda e, q: e.to(q.device)(q), enc, x[..., :16])  # wrong width
        assert isinstance(err, RuntimeError)
        keep = padding("left").logical_not()
        f = torch._nested_tensor_from_mask
        _raises_like_cpu(f, x, keep[:, :5])           # mask and input sizes
        _raises_like_cpu(f, x[0], keep)               # input not 3-D
        _raises_like_cpu(f, x, keep[0])               # mask not 2-D
        _raises_like_cpu(f, x, keep.int())            # mask not bool
        _raises_like_cpu(f, x, padding("gap").logical_not())  # not left-aligned
        _raises_like_cpu(torch._nested_tensor_from_mask_left_aligned, x, keep[:1])
        # to_padded_tensor to a smaller size, or to another number of dims
        nt, nt_tpu = f(x, keep), f(tpu(x), tpu(keep))
        for size in [(B, 2, D), (B, L)]:
            with pytest.raises(RuntimeError) as cpu:
                nt.to_padded_tensor(0.0, size)
            with pytest.raises(RuntimeError) as dev:
                nt_tpu.to_padded_tensor(0.0, size)
            assert str(dev.value).split("\n")[0] == str(cpu.value).split("\n")[0]


def test_fused_mode():
    enc = encoder(activation="gelu")
    x = torch.randn(B, L, D, generator=gen(16))
    torchtpu.set_eager_mode("fused")
    try:
        torchtpu.reset_fused_stats()
        run_both(enc, x, src_key_padding_mask=padding("left"))
        run_both(enc, x)
        assert "flush:fallback" not in torchtpu.fused_stats()
    finally:
        torchtpu.set_eager_mode("strict")


def test_compile_eval_no_grad():
    torch._dynamo.reset()  # a fresh recompile budget: past it Dynamo runs frames eagerly
    try:
        _compile_eval_no_grad()
    finally:
        torch._dynamo.reset()


def _compile_eval_no_grad():
    enc = encoder()
    x = torch.randn(B, L, D, generator=gen(17))
    pad = padding("left")
    compiled = torch.compile(on_tpu(enc), backend="tpu")
    with torch.no_grad():
        want = enc(x)
        want_padded = enc(x, src_key_padding_mask=pad)
        # under torch.compile PyTorch skips the nested path (its mask check cannot be
        # traced): every layer runs densely with the padding mask, so positions at padding
        # hold values instead of the eager path's zeros. The CPU's layers run that way:
        dense = x
        for layer in enc.layers:
            dense = layer(dense, src_key_padding_mask=pad)
        with torch.tpu.precision("highest"):
            for _ in range(2):  # capture, then replay
                got = no_fallback(lambda: compiled(tpu(x)))
                got_padded = no_fallback(lambda: compiled(tpu(x), src_key_padding_mask=tpu(pad)))
                torch.testing.assert_close(got.cpu(), want, **TIGHT)
                torch.testing.assert_close(got_padded.cpu(), dense, **TIGHT)
                torch.testing.assert_close(got_padded.cpu()[~pad], want_padded[~pad], **TIGHT)


def test_fallback_error_mode_runs_the_encoder():
    # the user-facing report: the default encoder with a padding mask crashed on tpu
    # ("NestedTensorImpl doesn't support strides"), and without one ran on the fallback
    out = run_json("""
        import torch, torch.nn as nn, torchtpu
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        enc = nn.TransformerEncoder(layer, 2).eval()
        x = torch.randn(2, 10, 32)
        pad = torch.zeros(2, 10, dtype=torch.bool)
        pad[1, 7:] = True
        with torch.no_grad():
            want, want_plain = enc(x, src_key_padding_mask=pad), enc(x)
            enc.to("tpu")
            got = enc(x.to("tpu"), src_key_padding_mask=pad.to("tpu")).cpu()
            got_plain = enc(x.to("tpu")).cpu()
        emit([(got - want).abs().max().item(), (got_plain - want_plain).abs().max().item(),
              torchtpu.fallback_stats()])
    """, env={"TORCHTPU_FALLBACK": "error"})
    assert out[0] < 5e-2 and out[1] < 5e-2 and out[2] == {}
