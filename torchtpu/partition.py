"""How compile mode splits AOTAutograd's joint graph into a forward and a backward: PyTorch's
default partitioner, after a rewrite that lets the backward reuse what the forward computed.

GELU (exact, the erf form, on f32): the forward runs aten.gelu(x) whole, and its backward,
decomposed by the core-ATen decompositions, computes erf(x / sqrt 2) again, then
0.5 (1 + erf), before the exp of its derivative: on the host the erf is the dearer half of
the backward's largest elementwise kernel (the GPT example's MLP: 46 us of the backward's
1030). Here the forward's gelu becomes the same ops its backward spells out,

    cdf = (erf(x * M_SQRT1_2) + 1) * 0.5,    gelu = x * cdf,

and the backward's copies of those four ops are replaced by the forward's, so the forward
saves cdf (one more tensor the size of x) and the backward only computes the exp. The
values are the same bits as before: x * 0.5 * (1 + erf(...)) and x * (0.5 * (1 + erf(...)))
differ only in where the exact halving happens. (bf16 / f16 GELUs are left alone: aten.gelu
rounds once, the ops one by one would round after each.)

Attention (scaled_dot_product_attention's overrideable pair, torchtpu/csrc/sdpa.cpp): its
backward recomputes the weights P = softmax(q k^T * scale) from q, k and the saved
logsumexp, as flash attention does so that no (L, S) tensor is saved. Where P is no larger
than q, k and v together (short sequences: the GPT example's 32 x 32 per head against
3 x 32 x 16) and the inputs are f32, the pair becomes torchtpu's attention_keep_probs and
its backward, so the forward saves P and the backward skips one product and an exp over
(L, S): 29 us of the GPT example's backward graph per layer on the host. Longer sequences,
masks, dropout, bf16 / f16 and symbolic sizes keep the pair.
"""
import operator

import torch
from torch._functorch.partitioners import default_partition
from torch._guards import detect_fake_mode

aten = torch.ops.aten
M_SQRT1_2 = 0.7071067811865476


def partition(joint, joint_inputs, **kwargs):
    """aot_autograd's partition_fn: default_partition after _share_gelu_cdf and
    _keep_attention_probs (which need the fake tensors the joint graph was traced with, to
    give their new nodes their values)."""
    fake_mode = detect_fake_mode(joint_inputs)
    if fake_mode is not None:
        changed = _share_gelu_cdf(joint.graph, fake_mode)
        changed |= _keep_attention_probs(joint.graph, fake_mode)
        if changed:
            joint.recompile()
    return default_partition(joint, joint_inputs, **kwargs)


def _share_gelu_cdf(graph, fake_mode):
    """Rewrites each exact aten.gelu of |graph| as the ops its backward repeats and merges
    the repeats into them; True if it changed anything."""
    changed = False
    for gelu in [n for n in graph.nodes if n.target is aten.gelu.default]:
        if gelu.kwargs.get("approximate", "none") != "none" or len(gelu.args) != 1:
            continue
        x = gelu.args[0]
        val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.dtype != torch.float32:
            continue  # bf16 / f16: aten.gelu rounds once, the ops would round each time
        with graph.inserting_before(gelu):
            chain = [graph.call_function(aten.mul.Tensor, (x, M_SQRT1_2))]
            chain.append(graph.call_function(aten.erf.default, (chain[-1],)))
            chain.append(graph.call_function(aten.add.Tensor, (chain[-1], 1)))
            chain.append(graph.call_function(aten.mul.Tensor, (chain[-1], 0.5)))  # cdf
            y = graph.call_function(aten.mul.Tensor, (x, chain[-1]))
        for node in chain + [y]:
            _set_val(node, fake_mode)
        y.meta = {**gelu.meta, **y.meta}
        gelu.replace_all_uses_with(y)
        graph.erase_node(gelu)
        _merge_repeats(y, chain)
        changed = True
    return changed


def _merge_repeats(last, chain):
    """Replaces every node after |last| that computes what a node of |chain| computes (same
    op, same arguments once earlier repeats are replaced) by that node."""
    seen = {(n.target, n.args): n for n in chain}
    node = last.next
    while node.op != "root":
        current, node = node, node.next
        if current.op != "call_function" or current.kwargs:
            continue
        try:
            hit = seen.get((current.target, current.args))
        except TypeError:  # an argument that cannot be hashed (a list): not one of ours
            continue
        if hit is not None:
            current.replace_all_uses_with(hit)
            current.graph.erase_node(current)


ATTENTION = aten._scaled_dot_product_fused_attention_overrideable.default
ATTENTION_BACKWARD = aten._scaled_dot_product_fused_attention_overrideable_backward.default
_FORWARD_ARGS = ("query", "key", "value", "attn_bias", "dropout_p", "is_causal",
                 "return_debug_mask")
_BACKWARD_ARGS = ("grad_out", "query", "key", "value", "attn_bias", "grad_input_mask", "out",
                  "logsumexp", "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p",
                  "is_causal", "philox_seed", "philox_offset")


def _named(node, names):
    args = dict(zip(names, node.args))
    args.update(node.kwargs)
    return args


def _keep_attention_probs(graph, fake_mode):
    """Swaps each overrideable attention pair of |graph| whose P may be saved (see the
    module's docstring) for attention_keep_probs and its backward; True if it changed
    anything."""
    changed = False
    for fwd in [n for n in graph.nodes if n.target is ATTENTION]:
        a = _named(fwd, _FORWARD_ARGS)
        if (a.get("attn_bias") is not None or a.get("dropout_p", 0.0) != 0.0
                or a.get("return_debug_mask", False) or not _small_probs(a)):
            continue
        parts = list(fwd.users)  # getitems of its outputs
        if not all(p.target is operator.getitem for p in parts):
            continue
        # its outputs other than the attention's result only feed its backward calls
        backwards = {u for p in parts if p.args[1] != 0 for u in p.users}
        if not backwards or not all(_backward_of(b, a) for b in backwards):
            continue
        q, k, v, causal, scale = a["query"], a["key"], a["value"], a.get("is_causal", False), \
            a.get("scale")
        extra = {} if scale is None else {"scale": scale}
        with graph.inserting_before(fwd):
            pair = graph.call_function(torch.ops.torchtpu.attention_keep_probs.default,
                                       (q, k, v, causal), extra)
            out = graph.call_function(operator.getitem, (pair, 0))
            probs = graph.call_function(operator.getitem, (pair, 1))
        for node in (pair, out, probs):
            _set_val(node, fake_mode)
        for p in parts:
            if p.args[1] == 0:
                p.replace_all_uses_with(out)
        for b in backwards:
            with graph.inserting_before(b):
                grads = graph.call_function(
                    torch.ops.torchtpu.attention_keep_probs_backward.default,
                    (_named(b, _BACKWARD_ARGS)["grad_out"], q, k, v, probs), extra)
            _set_val(grads, fake_mode)
            b.replace_all_uses_with(grads)  # its getitems 0..2: the same grads
            graph.erase_node(b)
        for p in parts:
            graph.erase_node(p)
        graph.erase_node(fwd)
        changed = True
    return changed


def _small_probs(a):
    """Whether P (L, S per batch and head) is no larger than q, k and v together."""
    q, k, v = (a[name].meta.get("val") for name in ("query", "key", "value"))
    if not all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in (q, k, v)):
        return False
    try:
        L, E, S, Ev = int(q.shape[-2]), int(q.shape[-1]), int(k.shape[-2]), int(v.shape[-1])
    except (TypeError, RuntimeError):  # symbolic sizes: keep the pair
        return False
    return L * S <= L * E + S * E + S * Ev


def _backward_of(b, a):
    """Whether |b| is a backward call of the forward call |a| that the swap can replace."""
    if b.target is not ATTENTION_BACKWARD:
        return False
    ba = _named(b, _BACKWARD_ARGS)
    same = all(ba.get(name) is a[name] for name in ("query", "key", "value"))
    return (same and ba.get("attn_bias") is None and ba.get("dropout_p", 0.0) == 0.0
            and ba.get("is_causal", False) == a.get("is_causal", False)
            and ba.get("scale") == a.get("scale")
            and all(u.target is operator.getitem and u.args[1] < 3 for u in b.users))


def _set_val(node, fake_mode):
    """node.meta["val"]: its op run on its arguments' fake values."""
    def val(x):
        return x.meta["val"] if isinstance(x, torch.fx.Node) else x
    args = [val(a) for a in node.args]
    kwargs = {key: val(x) for key, x in node.kwargs.items()}
    with fake_mode:
        node.meta["val"] = node.target(*args, **kwargs)
