"""Fused eager mode (TORCHTPU_EAGER=fused): ops are recorded into a pending graph per chip
and run together at a flush. Results must be bit-identical to strict eager (the same
kernels run, only scheduled differently), including views, in-place ops and RNG, and a
repeating training loop must stop compiling after its second step.
"""
import os
import sys

import pytest
import torch

import torchtpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import train_cnn  # noqa: E402
import train_gpt  # noqa: E402
import train_mlp  # noqa: E402


@pytest.fixture
def fused():
    torchtpu.set_eager_mode("fused")
    torchtpu.reset_fused_stats()
    yield
    torchtpu.set_eager_mode("strict")


def in_mode(mode, fn):
    torchtpu.set_eager_mode(mode)
    try:
        return fn()
    finally:
        torchtpu.set_eager_mode("strict")


EXAMPLES = {
    "mlp": lambda: train_mlp.train(6, "tpu"),
    "cnn": lambda: train_cnn.train(4, "tpu"),
    "gpt": lambda: train_gpt.train(6, "tpu", quiet=True),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_examples_train_identically_in_strict_and_fused(name):
    strict = in_mode("strict", EXAMPLES[name])
    torchtpu.reset_fused_stats()
    torchtpu.reset_fallback_stats()
    fused = in_mode("fused", EXAMPLES[name])
    stats = torchtpu.fused_stats()
    assert fused == strict
    assert torchtpu.fallback_stats() == {}
    assert stats["ops_recorded"] > 100 * len(fused) / 6
    # whole steps run as a few graphs, not one per op: cut where the recording thread
    # changes (forward, backward), at the optimizer step, and every TORCHTPU_FUSED_MAX_OPS
    limit = int(os.environ.get("TORCHTPU_FUSED_MAX_OPS", "32"))
    assert stats["graphs_run"] <= 3 * len(fused) + stats["ops_recorded"] / limit, stats
    assert stats["flush:optimizer step"] == len(fused)
    # the backward (recorded inside the autograd engine) is a graph of its own, so the
    # forward runs while it is recorded
    assert stats["flush:forward/backward switch"] >= len(fused), stats


def torture(device):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(6, 8, generator=gen).to(device)
    w = torch.randn(8, 8, generator=gen).to(device)
    torch.manual_seed(7)
    y = x @ w
    a, b = y.split(4, dim=1)                 # views with offsets of a pending value
    z = (a * b.t().t()).relu_()              # in-place on a pending result
    h = y.view(6, 2, 4).transpose(0, 1)      # heads-style view
    z.add_(h.sum(0)[:, :4])
    y[:, 0].mul_(0)                          # in-place write through a strided view
    y[1:3] += 1                              # and through a slice
    d = torch.nn.functional.dropout(y, 0.5)  # RNG: the same masks in every mode
    e = torch.rand(3, 5, device=device)
    m = torch.where(d > 0, d, e.sum() * torch.ones_like(d))
    c = m.clone()
    c[::2] = torch.arange(8.0, device=device)   # index_put / copy into a view
    u = c.unsqueeze(1).expand(6, 3, 8).contiguous()
    return [t.cpu() for t in (y, z, d, e, m, c, u)]


def test_views_inplace_and_rng_match_strict():
    strict = in_mode("strict", lambda: torture("tpu"))
    fused = in_mode("fused", lambda: torture("tpu"))
    for i, (s, f) in enumerate(zip(strict, fused)):
        assert torch.equal(s, f), i
    cpu = torture("cpu")
    # the same program on the CPU, up to the first random op (the generators differ by
    # design); DEFAULT precision rounds the matmul's operands to bf16
    for i in (0, 1):
        assert torch.allclose(strict[i], cpu[i], atol=5e-2, rtol=5e-2), i


def lowered_ops(device):
    """One call each of the gather/scatter/scan-heavy lowerings (sampling, scatter_reduce,
    bags, 3-D pooling, special functions, scans, distances, unfold) and grid_sample's
    backward; every result, and the number of fallback calls."""
    g = torch.Generator().manual_seed(0)
    x, grid = torch.randn(2, 3, 6, 7, generator=g), torch.rand(2, 4, 5, 2, generator=g) * 2.4 - 1.2
    src, idx = torch.randn(10, 4, generator=g), torch.randint(0, 5, (10, 4), generator=g)
    emb, bag = torch.randn(20, 4, generator=g), torch.randint(0, 20, (12,), generator=g)
    clip = torch.rand(2, 3, 4, 5, 6, generator=g)
    xs, gs, src = x.to(device).requires_grad_(), grid.to(device).requires_grad_(), src.to(device)
    torchtpu.reset_fallback_stats()
    out = [torch.nn.functional.grid_sample(xs, gs, align_corners=False),
           torch.zeros(5, 4, device=device).scatter_reduce(0, idx.to(device), src, "amax", include_self=False),
           torch.nn.functional.embedding_bag(bag.to(device), emb.to(device), torch.tensor([0, 3, 3, 8], device=device),
                                             mode="mean"),
           torch.nn.functional.max_pool3d(clip.to(device), 2), torch.lgamma(src.abs() + 0.1),
           torch.logcumsumexp(src, 0), torch.cdist(src, src[:3], p=1.5), torch.nn.functional.unfold(xs, 3),
           torch.cummax(src, 0).indices]
    out[0].sum().backward()
    result = [o.detach().cpu() for o in out + [xs.grad, gs.grad]]
    return result, sum(torchtpu.fallback_stats().values())


def test_lowered_ops_give_the_same_bits_in_fused_mode():
    strict, strict_fallbacks = in_mode("strict", lambda: lowered_ops("tpu"))
    fused, fused_fallbacks = in_mode("fused", lambda: lowered_ops("tpu"))
    assert strict_fallbacks == fused_fallbacks == 0
    for i, (s, f) in enumerate(zip(strict, fused)):
        assert torch.equal(s, f), i


def branchy_loop(device):
    x = torch.zeros(4, device=device)
    taken = []
    for i in range(6):
        x = x + (1 if i % 2 == 0 else -2)
        if x.sum() > 0:  # needs the value: flushes
            taken.append(i)
            x = x * 2
    return taken, x.cpu()


def test_data_dependent_control_flow_in_a_loop(fused):
    taken, x = branchy_loop("tpu")
    assert torchtpu.fused_stats()["flush:item"] == 6
    cpu_taken, cpu_x = branchy_loop("cpu")
    assert taken == cpu_taken == [0, 2, 4] and torch.equal(x, cpu_x)


def test_training_loop_stops_compiling_after_the_second_step(fused):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 16, device="tpu"), torch.randint(0, 4, (8,), device="tpu")
    misses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        misses.append(torchtpu.fused_stats()["graph_cache_misses"])
    assert misses[2] == misses[3] == misses[4], misses
    assert loss.item() < 1.5


def test_dead_results_are_never_written_and_memory_is_reused(fused):
    x = torch.randn(256, 256, device="tpu")
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    for _ in range(50):
        x = (x * 1.0001).tanh()  # each old x dies before the flush
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() - base <= 256 * 256 * 4
    assert torchtpu.fused_stats()["ops_recorded"] >= 100


def test_size_limit_and_flush_reasons_are_counted(fused):
    limit = int(os.environ.get("TORCHTPU_FUSED_MAX_OPS", "32"))  # the documented default
    x = torch.ones(4, device="tpu")
    for _ in range(2100):
        x = x + 1
    stats = torchtpu.fused_stats()
    assert stats.get("flush:size limit", 0) == 2100 // limit
    assert x.cpu()[0].item() == 2101
    assert torchtpu.fused_stats()["flush:copy to host"] == 1


def test_a_tensor_re_pointed_before_the_graph_runs_is_read_as_recorded(fused):
    # `p.data = q` (nn.Module.to(dtype) does it to every parameter) re-points p's
    # TensorImpl to q's storage while q's pending value still reads p's old bytes
    x = torch.randn(6)
    p = x.to("tpu")
    torchtpu.flush()
    q = p.to(torch.float16) * 2
    p.data = q
    assert torch.equal(q.cpu(), (x.half() * 2))
    assert torch.equal(p.cpu(), (x.half() * 2))
    model = torch.nn.Linear(4, 3).to("tpu")
    torchtpu.flush()
    want = [t.detach().cpu().bfloat16() for t in model.parameters()]
    model.to(torch.bfloat16)
    for w, t in zip(want, model.parameters()):
        assert t.dtype == torch.bfloat16 and torch.equal(t.detach().cpu(), w)
    # with swap_module_params_on_conversion, Module.to swaps each parameter with its
    # converted copy, which torch.utils.swap_tensors refuses for a tensor referenced
    # elsewhere: the pending graph holds a read parameter's storage, not its tensor
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to(torch.float32)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    for w, t in zip(want, model.parameters()):
        assert t.dtype == torch.float32 and torch.equal(t.detach().cpu(), w.float())


def test_cpu_fallback_sees_recorded_values(fused):
    x = torch.arange(6, device="tpu") * 2
    torchtpu.set_fallback_mode("silent")
    try:
        y = torch.gcd(x, torch.tensor(4, device="tpu"))  # no native kernel: the CPU fallback
    finally:
        torchtpu.set_fallback_mode("warn")
    assert y.cpu().tolist() == [4, 2, 4, 2, 4, 2]
    assert torchtpu.fused_stats()["flush:fallback"] >= 1


def test_device_error_surfaces_at_the_next_sync(fused):
    table = torch.randn(4, 3, device="tpu")
    idx = torch.tensor([0, 7], device="tpu")
    out = table[idx] * 2  # recorded: nothing runs yet
    with pytest.raises(IndexError, match="fused graph"):
        out.cpu()
    assert torch.equal((table[torch.tensor([1], device="tpu")] * 0).cpu(), torch.zeros(1, 3))


def reused_graphs(device):
    a = torch.arange(12.0, device=device).reshape(3, 4)
    out = []
    for i in range(4):
        b = torch.empty_like(a)
        b.zero_()  # graphs with a parameter they do not read (self of zero_ and fill_)
        b.fill_(i + 0.5)
        c = a + a  # one tensor bound to both parameters
        torch.mul(c, b, out=b)
        a = b.sin() + torch.pow(1.01, a)  # a host scalar before the tensor input
        out.append(a.sum().item())  # a flush per step: the pending graph is emptied, reused
        out.append(a.t().contiguous()[1:].cpu())
    return out


def test_op_graphs_and_the_pending_graph_are_reused_across_flushes(fused):
    # the same one-op graphs (and what recording computed of them once) serve every step,
    # and each step records into the emptied graph of the step before: bit-identical to
    # strict, and the later steps hit the graph cache
    got = reused_graphs("tpu")
    misses = torchtpu.fused_stats()["graph_cache_misses"]
    assert torchtpu.fused_stats()["graph_cache_hits"] >= 4
    want = in_mode("strict", lambda: reused_graphs("tpu"))
    for g, w in zip(got, want):
        assert torch.equal(torch.as_tensor(g), torch.as_tensor(w))
    torchtpu.set_eager_mode("fused")
    reused_graphs("tpu")
    assert torchtpu.fused_stats()["graph_cache_misses"] == misses


def test_graphs_that_read_the_same_values_in_another_order_are_told_apart(fused):
    # a / b and b / a record the same ops over the same parameters: only which value each
    # operand reads differs, and the graph cache's key must say so (it once did not, and
    # the second flush ran the first graph's executable: b / a gave a / b)
    x = torch.rand(4, device="tpu") + 0.5
    y = torch.rand(4, device="tpu") + 0.5
    torch.tpu.synchronize()  # x and y written: each loop below records the same graph
    for order in ("a, b", "b, a"):
        a, b = x.exp(), y.log()  # values written in the graph
        first, second = (a, b) if order == "a, b" else (b, a)
        got = (first / second).cpu()
        a, b = x.cpu().exp(), y.cpu().log()
        want = a / b if order == "a, b" else b / a
        torch.testing.assert_close(got, want, msg=order)
    for order in ("x, y", "y, x"):  # parameters read before, in either order
        first, second = (x, y) if order == "x, y" else (y, x)
        got = (x * 1 + y * 1 + first - second).cpu()
        want = x.cpu() + y.cpu() + first.cpu() - second.cpu()
        torch.testing.assert_close(got, want, msg=order)
