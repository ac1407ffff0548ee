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
"""
import torch
from torch._functorch.partitioners import default_partition
from torch._guards import detect_fake_mode

aten = torch.ops.aten
M_SQRT1_2 = 0.7071067811865476


def partition(joint, joint_inputs, **kwargs):
    """aot_autograd's partition_fn: default_partition after _share_gelu_cdf (which needs the
    fake tensors the joint graph was traced with, to give its new nodes their values)."""
    fake_mode = detect_fake_mode(joint_inputs)
    if fake_mode is not None and _share_gelu_cdf(joint.graph, fake_mode):
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


def _set_val(node, fake_mode):
    """node.meta["val"]: its op run on its arguments' fake values."""
    args = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in node.args]
    with fake_mode:
        node.meta["val"] = node.target(*args)
