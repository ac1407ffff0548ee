"""torch.compile(backend="tpu"): the examples train compiled with the same losses as eager
(and as the CPU within DEFAULT precision), graph breaks run correctly, whole graphs become
one compiled program whose memory plan reuses buffers, recompiles say what changed, a graph
with collectives is split into plans around them, graphs over tensor subclasses update the
tensors they wrap, and torchtpu.export's StableHLO runs under JAX's XLA with PyTorch's
results.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torchtpu
import torchtpu.compile as tc
import torchtpu.report as report
from conftest import subprocess_env

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import train_cnn  # noqa: E402
import train_gpt  # noqa: E402
import train_mlp  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    tc.graphs.clear()
    yield
    torch._dynamo.reset()


EXAMPLES = {
    "mlp": lambda device, compile: train_mlp.train(5, device, compile=compile),
    "cnn": lambda device, compile: train_cnn.train(4, device, compile=compile),
    "gpt": lambda device, compile: train_gpt.train(5, device, quiet=True, compile=compile),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_examples_train_compiled_like_eager_and_cpu(name):
    cpu = EXAMPLES[name]("cpu", False)
    eager = EXAMPLES[name]("tpu", False)
    torchtpu.reset_fallback_stats()
    tc.graphs.clear()
    compiled = EXAMPLES[name]("tpu", True)
    assert torchtpu.fallback_stats() == {}
    # the core-ATen decompositions reorder a few reductions: f32 rounding only
    np.testing.assert_allclose(compiled, eager, rtol=2e-4, atol=1e-5)
    # DEFAULT precision rounds matmul operands to bf16 (see test_examples.py)
    np.testing.assert_allclose(compiled, cpu, rtol=3e-2, atol=3e-2)
    replayed = {g.kind for g in tc.graphs if g.stats()["plans"] > 0}
    assert replayed >= {"forward", "backward"}, replayed


def test_compiled_optimizer_step_updates_in_the_graph():
    # AdamW's in-place updates of parameters and state are written by the compiled
    # program itself: one launch per step, no eager copy back per mutated tensor
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to("tpu")
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 4)).to("tpu")  # eager optimizer
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    step = torch.compile(opt.step, backend="tpu")
    first_graph = len(tc.graphs)
    x = torch.randn(8, 16)
    for i in range(4):
        model(x.to("tpu")).square().sum().backward()
        ref(x.to("tpu")).square().sum().backward()
        torch.tpu.synchronize()
        before = report.totals()["launches"]
        step()
        torch.tpu.synchronize()
        launches = report.totals()["launches"] - before
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    assert launches == 1
    # the update kernels write parameters and state in place: no temporary of the step
    # (the full_like weights of AdamW's lerp) becomes an output copied into them
    (g,) = [g for g in tc.graphs[first_graph:] if g.stats()["plans"] > 0]
    text = str(g.describe())
    assert "COPY" not in text, text
    # multi-output fusion: each parameter's new moments are stores of its update kernel,
    # one pass over parameter, gradient and moments instead of three
    params = list(model.parameters())
    updates = [line for line in text.splitlines() if ", store " in line]
    assert len(updates) == len(params) and text.count(", store ") == 2 * len(params), text
    for p, q in zip(params, ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu(), rtol=1e-5, atol=1e-6)
        for key in ("exp_avg", "exp_avg_sq"):  # eager lerps, the decomposition does not:
            # f32 results that differ in the last bits, compounding over four steps
            torch.testing.assert_close(opt.state[p][key].cpu(), ref_opt.state[q][key].cpu(),
                                       rtol=2e-4, atol=1e-6)


@pytest.mark.parametrize("flatten", [True, False])
def test_graph_over_tensor_subclasses_updates_the_tensors_they_wrap(flatten, monkeypatch):
    # An optimizer step over FSDP2's DTensor parameters: Dynamo's graph runs on wrapper
    # subclasses that compute on the tensors inside them. The plan binds those inner tensors
    # and writes them in place on every replay (flatten); were they not passed, the plan
    # must be refused, since a replay would write fresh copies (the updates after the first
    # call used to be lost), and the graph runs op by op, still correct.
    from torch.testing._internal.two_tensor import TwoTensor
    if not flatten:
        monkeypatch.setattr(tc, "_inner_tensors", list)
    p = TwoTensor(torch.zeros(4, device="tpu"), torch.ones(4, device="tpu"))
    g = TwoTensor(torch.full((4,), 1.0, device="tpu"), torch.full((4,), 3.0, device="tpu"))

    @torch.compile(backend="tpu")
    def step(p, g):
        p.mul_(2).add_(g)
    for _ in range(3):
        step(p, g)
    assert p.a.cpu().tolist() == [7.0] * 4  # 0 -> 1 -> 3 -> 7
    assert p.b.cpu().tolist() == [29.0] * 4  # 1 -> 5 -> 13 -> 29
    assert [x.stats()["plans"] for x in tc.graphs] == ([1] if flatten else [0])


def test_collectives_split_a_graph_into_plans():
    # A graph that calls a collective (a tensor-parallel layer's all_reduce) is split there:
    # the ops before and after it are plans of their own, the collective runs between them
    # through the process group; forward and backward (funcol's all_reduce has one) alike.
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    dist.init_process_group("tpu", rank=0, world_size=1, store=dist.HashStore())
    try:
        def f(x, w):
            y = torch.relu(x @ w)
            y = funcol.all_reduce(y, "sum", dist.group.WORLD)
            return (y * 2 + 1).sum(0)
        x = torch.randn(4, 8, device="tpu")
        w = torch.randn(8, 8, device="tpu", requires_grad=True)
        w_eager = w.detach().clone().requires_grad_()
        cf = torch.compile(f, backend="tpu")
        for _ in range(3):
            w.grad = w_eager.grad = None
            out = cf(x, w)
            out.sum().backward()
            ref = f(x, w_eager)
            ref.sum().backward()
            torch.testing.assert_close(out.cpu(), ref.cpu())
            torch.testing.assert_close(w.grad.cpu(), w_eager.grad.cpu())
    finally:
        dist.destroy_process_group()
    assert [g.kind for g in tc.graphs] == ["forward", "forward", "backward", "backward"]
    for g in tc.graphs:  # each part replays its plan, and holds no collective
        assert g.stats()["plans"] == 1
        assert not any(tc._is_collective(n) for n in g.gm.graph.nodes)
    assert "DOT_GENERAL" in tc.graphs[0].describe()  # the matmul is before the all_reduce


def test_whole_graph_is_one_program_with_a_memory_plan():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 64)).to("tpu")
    forward = torch.compile(model, backend="tpu")
    x = torch.randn(32, 64, device="tpu")
    for _ in range(3):
        forward(x).sum().backward()
    (bw,) = [g for g in tc.graphs if g.kind == "backward"]
    stats = bw.stats()
    assert stats["plans"] == 1  # captured once, replayed after
    assert stats["nodes"] > 20
    # intermediates share memory: the planned peak is below the sum of all of them
    assert 0 < stats["scratch_bytes"] < stats["unplanned_bytes"], stats
    # each replay counts one run and its host time, alone or with a thread helping
    torch.tpu.synchronize()
    before = bw.stats()
    forward(x).sum().backward()
    torch.tpu.synchronize()
    after = bw.stats()
    runs = lambda st: st["alone_runs"] + st["helped_runs"]  # noqa: E731
    spent = lambda st: st["alone_ns"] + st["helped_ns"]  # noqa: E731
    assert runs(before) >= 2 and runs(after) == runs(before) + 1, (before, after)
    assert spent(after) > spent(before), (before, after)
    assert 0 <= after["joined_runs"] <= after["alone_runs"], after  # joined: begun alone


def test_gpt_backward_and_optimizer_run_on_two_threads_and_the_forward_in_order():
    """The compiled GPT step's backward (weight gradients beside the chain of input
    gradients) and AdamW graph (one update per parameter) have independent steps: their
    schedules take a second thread while a synchronizing thread helps. The forward is one
    chain: its steps run in order."""
    torch.manual_seed(0)
    model = train_gpt.GPT(vocab=64, block_size=32, d_model=64, n_head=4, n_layer=2).to("tpu")
    forward = torch.compile(model, backend="tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    opt_step = torch.compile(opt.step, backend="tpu")
    x = torch.randint(0, 64, (8, 32)).to("tpu")
    y = torch.randint(0, 64, (8, 32)).to("tpu")
    for _ in range(3):
        _, loss = forward(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt_step()
    torch.tpu.synchronize()
    two = {}
    for g in tc.graphs:
        stats = g.stats()
        if stats["plans"] and stats["steps"] > 50:
            two.setdefault(g.kind, []).append(stats["two_threads"])
    assert two.get("forward") == [0], two
    assert two.get("backward") == [1], two
    assert 1 in two.get("inference", []), two  # the optimizer step


def test_graph_breaks_run_the_rest_eagerly():
    class Breaky(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.a(x).relu()
            if h.sum() > 0:  # data-dependent Python control flow: a Dynamo graph break
                h = h * 2
            h = F.interpolate(h[:, None, :], scale_factor=2.0)[:, 0]  # no lowering: CPU
            return self.b(h[:, :8])

    torch.manual_seed(0)
    model = Breaky()
    x = torch.randn(4, 8)
    want = model(x)
    model = model.to("tpu")
    torchtpu.set_fallback_mode("silent")
    try:
        forward = torch.compile(model, backend="tpu")
        with torch.tpu.precision("highest"):
            for _ in range(2):
                got = forward(x.to("tpu"))
    finally:
        torchtpu.set_fallback_mode("warn")
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)


def graph_log_lines(code):
    """The "[torchtpu] compile / recompile ... graph #" lines of |code| run in a fresh
    process with TORCHTPU_LOG_RECOMPILES=1."""
    env = subprocess_env({"TORCHTPU_LOG_RECOMPILES": "1"})
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return [ln for ln in r.stderr.splitlines() if "[torchtpu]" in ln and "graph #" in ln]


def test_recompile_log_names_the_changed_input():
    code = """
import torch, torchtpu
f = torch.compile(lambda x, w: (x @ w).relu(), backend="tpu", dynamic=False)
w = torch.randn(16, 4, device="tpu")
f(torch.randn(8, 16, device="tpu"), w)
f(torch.randn(8, 16, device="tpu"), w)
f(torch.randn(5, 16, device="tpu"), w)
"""
    lines = graph_log_lines(code)
    assert len(lines) == 2, lines
    assert "recompile" in lines[1] and "shape (8, 16) -> (5, 16)" in lines[1], lines


def run_xla(text, args):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)  # keep i64 inputs (token ids) as i64
    from jax._src import xla_bridge
    from jax._src.lib import xla_client as xc
    backend = xla_bridge.get_backend("cpu")
    dev = backend.devices()[0]
    exe = backend.compile_and_load(text, xc.DeviceList((dev,)), xc.CompileOptions())
    res = exe.execute_sharded([jax.device_put(np.asarray(a), dev) for a in args])
    return [np.asarray(r[0]) for r in res.disassemble_into_single_device_arrays()]


def test_export_gpt_forward_and_backward_runs_under_xla():
    torch.manual_seed(0)
    model = train_gpt.GPT(vocab=64, block_size=16, d_model=32, n_head=4, n_layer=1)
    params = list(model.parameters())
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 64, (2, 16), generator=g)
    y = torch.randint(0, 64, (2, 16), generator=g)

    def step(m):
        def fn(x, y):
            _, loss = m(x, y)
            return (loss, *torch.autograd.grad(loss, list(m.parameters())))
        return fn

    want = [t.detach().numpy() for t in step(model)(x, y)]
    tpu_model = model.to("tpu")
    prog = torchtpu.export(step(tpu_model), (x, y))
    assert prog.text.startswith("module @main") and "stablehlo.dot_general" in prog.text
    got = run_xla(prog.text, prog.arguments(x, y))
    assert len(got) == 1 + len(params)
    # XLA's CPU computes f32 dots exactly; PyTorch too: tight tolerances
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_eager_recompile_log_names_the_changed_argument():
    code = """
import torch, torchtpu
a = torch.ones(8, 16, device="tpu")
a.sum(1); a.sum(1); a.sum(0); (a.t() * 2)
"""
    env = subprocess_env({"TORCHTPU_LOG_RECOMPILES": "1"})
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    misses = [ln for ln in r.stderr.splitlines() if "cache miss aten::sum" in ln]
    assert len(misses) == 2, r.stderr  # the second a.sum(1) hits
    assert "first signature" in misses[0] and "dim: [1] -> [0]" in misses[1], misses


def compiled_graph(fn, *args):
    forward = torch.compile(fn, backend="tpu")
    with torch.no_grad():
        for _ in range(2):
            out = forward(*args)
    (g,) = [g for g in tc.graphs if g.stats()["plans"] > 0]
    return g, out


def test_an_elementwise_chain_becomes_one_kernel():
    x = torch.randn(64, 128, device="tpu")
    g, out = compiled_graph(lambda x: ((x * 2 + 1).tanh() - 0.5).abs() * 3, x)
    want = ((x.cpu() * 2 + 1).tanh() - 0.5).abs() * 3
    torch.testing.assert_close(out.cpu(), want)
    assert g.stats()["kernels"] == 1, g.describe()
    assert "FUSED" in g.describe()


def test_a_layer_norm_becomes_at_most_two_kernels():
    x = torch.randn(32, 256, device="tpu")
    w, b = torch.randn(256, device="tpu"), torch.randn(256, device="tpu")
    g, out = compiled_graph(lambda x, w, b: F.layer_norm(x, (256,), w, b), x, w, b)
    want = F.layer_norm(x.cpu(), (256,), w.cpu(), b.cpu())
    torch.testing.assert_close(out.cpu(), want, atol=1e-5, rtol=1e-5)
    assert g.stats()["kernels"] <= 2, g.describe()


def test_views_at_an_offset_read_the_base_in_place():
    """q, k and v split from one projection and viewed as heads start at an offset inside
    the projection: the view solver reads them as a slice of the projection's grid, so no
    kernel pads or copies it; an offset from which the view does not fit the grid (a
    window across rows) still gives the right values."""
    qkv = torch.randn(8, 32, 192, device="tpu")

    def heads(qkv):
        q, k, v = qkv.split(64, dim=2)
        q, k, v = (t.view(8, 32, 4, 16).transpose(1, 2) for t in (q, k, v))
        return q * 2 + k * v
    g, out = compiled_graph(heads, qkv)
    torch.testing.assert_close(out.cpu(), heads(qkv.cpu()))
    assert "PAD" not in str(g.describe()) and "COPY" not in str(g.describe()), g.describe()
    assert g.stats()["kernels"] == 1, g.describe()

    x = torch.randn(8, 8, device="tpu")
    for fn in (lambda x: x[2:, 1:5] * 3,                    # from row 2, column 1
               lambda x: x.flatten()[3:63].view(6, 10) + 1):  # rows of 10 from element 3
        tc.graphs.clear()
        g, out = compiled_graph(fn, x)
        torch.testing.assert_close(out.cpu(), fn(x.cpu()))


def test_matmul_with_bias_and_activation_is_one_kernel():
    x = torch.randn(16, 64, device="tpu")
    w, b = torch.randn(64, 32, device="tpu"), torch.randn(32, device="tpu")
    g, out = compiled_graph(lambda x, w, b: torch.relu(x @ w + b), x, w, b)
    # DEFAULT precision: one bf16 pass over the operands, f32 accumulation
    want = torch.relu(x.cpu().bfloat16().float() @ w.cpu().bfloat16().float() + b.cpu())
    torch.testing.assert_close(out.cpu(), want, atol=1e-3, rtol=1e-3)
    assert g.stats()["kernels"] == 1, g.describe()


@pytest.mark.parametrize("approximate,dtype", [("none", torch.float32), ("tanh", torch.float32),
                                               ("none", torch.bfloat16)])
def test_gelu_backward_reuses_the_forward_erf(approximate, dtype):
    """The exact f32 GELU's backward takes 0.5 (1 + erf(x / sqrt 2)) from the forward (which
    saves it) instead of computing the erf again (torchtpu/partition.py); the tanh form and
    a bf16 GELU (rounded once by aten.gelu) are left alone. Gradients as in eager mode: the
    GELU backward's output to a couple of roundings, and the products after it as DEFAULT
    precision computes them from that output."""
    gen = torch.Generator().manual_seed(0)  # the same data whatever ran before in the process
    x = torch.randn(64, 256, generator=gen).to(dtype)
    w = (torch.randn(256, 256, generator=gen) / 16).to(dtype)
    p = torch.zeros(64, 256, dtype=dtype)  # x @ w + 0 is x @ w; p.grad is GELU's backward

    def loss(x, w, p):
        return (F.gelu(x @ w + p, approximate=approximate) ** 2).sum()
    xt, wt, pt = (t.to("tpu").requires_grad_() for t in (x, w, p))
    compiled = torch.compile(loss, backend="tpu")
    for _ in range(2):
        xt.grad = wt.grad = pt.grad = None
        compiled(xt, wt, pt).backward()
    backward = [g for g in tc.graphs if g.kind == "backward" and g.stats()["plans"] > 0]
    assert len(backward) == 1
    text = str(backward[0].describe())
    if approximate == "tanh":
        assert "TANH" in text, text
    else:
        assert ("ERF" in text) == (dtype != torch.float32) and "EXP" in text, text
    xe, we, pe = (t.to("tpu").requires_grad_() for t in (x, w, p))
    loss(xe, we, pe).backward()  # eager: gelu_backward's own formula, erf and all
    # GELU's backward output g: the compiled backward's ops and eager's gelu_backward evaluate
    # the same formula, the tanh form in another order, so they may differ by a couple of
    # roundings of terms no larger than max|g| (seen: under 0.7 eps (|g| + max|g|)).
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(pt.grad.cpu(), pe.grad.cpu(), rtol=2 * eps,
                               atol=2 * eps * pe.grad.abs().max().item())
    # x.grad = g @ w^T, w.grad = x^T @ g. DEFAULT precision rounds the f32 operands to bf16
    # and sums their products (exact in f32) in f32, so one ulp of g can flip a bf16
    # rounding and move the product by a whole bf16 ulp of g (2^-7 of it) times the other
    # operand, summed over K: no f32-level tolerance against eager's product holds for that.
    # Instead each run's gradients are checked against the product of its own g, computed
    # in f64 from the same bf16-rounded operands a, b. What remains is the f32 sum of K
    # terms, off by at most K 2^-24 (|a| @ |b|) in any order (its largest element is the
    # atol), and for bf16 gradients the final rounding to bf16, at most 2^-8 of the sum.
    out_rtol = 0.0 if dtype == torch.float32 else 2.0 ** -8

    def bf(t):  # an operand as a DEFAULT precision matmul reads it
        return t.cpu().bfloat16().double()
    for xg, wg, g in ((xt.grad, wt.grad, pt.grad), (xe.grad, we.grad, pe.grad)):
        for got, a, b in ((xg, bf(g), bf(w).T), (wg, bf(x).T, bf(g))):
            acc = a.shape[1] * 2.0 ** -24 * (a.abs() @ b.abs()).max().item()
            torch.testing.assert_close(got.cpu().double(), a @ b, rtol=out_rtol,
                                       atol=acc * (1 + out_rtol))


def graphs_of(fn, *args, backend="tpu", steps=2, grad=False):
    """Outputs of |steps| calls of fn compiled with |backend|, and the graphs it made."""
    torch._dynamo.reset()
    tc.graphs.clear()
    compiled = torch.compile(fn, backend=backend)
    with torch.set_grad_enabled(grad):
        outs = [compiled(*args) for _ in range(steps)]
    return outs, list(tc.graphs)


def test_graphs_without_autograd_skip_aotautograd_with_the_same_results():
    # a no_grad graph runs as Dynamo traced it, with the decompositions AOTAutograd would
    # apply (layer_norm, gelu, softmax; silu_ through its functional form): bit for bit
    # the results of the AOTAutograd path, captured and replayed as one program
    torch.manual_seed(0)
    x = torch.randn(8, 64, device="tpu")
    w, b = torch.randn(64, device="tpu"), torch.randn(64, device="tpu")

    def fn(x, w, b):
        h = F.gelu(F.layer_norm(x, (64,), w, b))
        return torch.softmax(h, -1), F.silu(h * 2, inplace=True)

    direct, (g,) = graphs_of(fn, x, w, b)
    assert g.direct and g.kind == "inference" and g.stats()["plans"] == 1
    aot, (a,) = graphs_of(fn, x, w, b, backend=tc.aot_backend)
    assert not a.direct
    for got, want in zip(direct[-1], aot[-1]):
        assert torch.equal(got.cpu(), want.cpu())


def test_graphs_without_autograd_run_the_decomposition_table(monkeypatch):
    # a stand-in table (our lowerings of gelu, layer_norm, ... build the same IR as their
    # decompositions, so only a table we control shows that the direct path applies it):
    # the op and the in-place form of it run as the table's entry, captured and replayed
    aten = torch.ops.aten
    monkeypatch.setattr(tc, "_decompositions", {aten.tanh.default: lambda x: x + 1})
    x = torch.zeros(4, device="tpu")
    outs, (g,) = graphs_of(lambda x: (x.tanh(), (x * 2).tanh_()), x, steps=3)
    assert g.direct and g.stats()["plans"] == 1
    for out, inplace in outs:
        assert out.cpu().tolist() == [1.0] * 4 and inplace.cpu().tolist() == [1.0] * 4


def test_compiled_adamw_without_aotautograd_matches_it_bit_for_bit():
    # the step's parameters and state are attributes of Dynamo's graph: lifted as inputs
    # of the plan, so every replay updates them in place (not only the captured first run)
    def train(backend):
        torch._dynamo.reset()
        tc.graphs.clear()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4)).to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
        step = torch.compile(opt.step, backend=backend)
        x = torch.randn(8, 16, device="tpu")
        losses = []
        for _ in range(4):
            loss = model(x).square().sum()
            loss.backward()
            step()
            opt.zero_grad()
            losses.append(loss.item())
        state = [v.cpu() for s in opt.state.values() for v in s.values()]
        return losses, [p.detach().cpu() for p in model.parameters()] + state, list(tc.graphs)

    losses, tensors, graphs = train("tpu")
    (g,) = [g for g in graphs if g.stats()["plans"] > 0]
    assert g.direct
    want_losses, want, graphs = train(tc.aot_backend)
    assert not any(g.direct for g in graphs)
    assert losses == want_losses and len(set(losses)) == 4, losses
    for got, ref in zip(tensors, want):
        assert torch.equal(got, ref)


def test_graphs_that_touch_autograd_keep_aotautograd():
    lin = torch.nn.Linear(8, 8).to("tpu")
    x = torch.randn(4, 8, device="tpu")
    # a training forward (its backward graph is compiled at the first backward)
    _, graphs = graphs_of(lambda x: lin(x).sum(), x, grad=True)
    assert [g.kind for g in graphs] == ["forward"]
    # no_grad, but an output is a view of a parameter (requires_grad, as in eager)
    outs, graphs = graphs_of(lambda x: (lin.weight[0], x * 2), x)
    assert not any(g.direct for g in graphs)
    assert outs[-1][0].requires_grad
    # no_grad outside, grad enabled inside the graph
    def inner_grad(x):
        with torch.enable_grad():
            return lin(x) * 2
    outs, graphs = graphs_of(inner_grad, x)
    assert not any(g.direct for g in graphs)
    assert outs[-1].requires_grad


def mlp_losses(compile_kwargs, steps=3):
    """Losses and final weights of a small GELU/LayerNorm MLP trained |steps| steps on tpu
    with its forward compiled by torch.compile(**compile_kwargs)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 1)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    forward = torch.compile(model, **compile_kwargs)
    x, y = torch.randn(8, 16, device="tpu"), torch.randn(8, 1, device="tpu")
    losses = []
    for _ in range(steps):
        loss = F.mse_loss(forward(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_the_default_backend_compiles_tpu_graphs_here():
    # torch.compile(model) with no backend is Inductor, whose "tpu" needs Google's torch_tpu
    # ("No module named 'torch_tpu'"): a graph on our tpu goes to backend="tpu" instead,
    # bit for bit the same training
    want_losses, want_params = mlp_losses({"backend": "tpu"})
    tc.graphs.clear()
    losses, params = mlp_losses({})
    assert {g.kind for g in tc.graphs} == {"forward", "backward"}, tc.graphs
    assert all(g.stats()["plans"] == 1 for g in tc.graphs)
    assert losses == want_losses
    for p, q in zip(params, want_params):
        assert torch.equal(p, q)


def test_only_graphs_that_compute_on_tpu_leave_inductor():
    from torchtpu.default_compile import computes_on_tpu
    seen = []

    def record(gm, example_inputs):
        seen.append(computes_on_tpu(gm, example_inputs))
        return gm
    torch.compile(lambda x: x.sin() + 1, backend=record)(torch.randn(4))
    torch.compile(lambda x: x.sin() + 1, backend=record)(torch.randn(4, device="tpu"))
    torch.compile(lambda n: torch.ones(n, device="tpu") * 2, backend=record)(3)
    assert seen == [False, True, True]


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
@pytest.mark.parametrize("backend", ["tpu", None])
def test_compile_modes_train_as_the_default_mode(mode, backend):
    # torch.compile passes mode= to the backend; a CUDA program's mode must not fail
    want_losses, want_params = mlp_losses({"backend": "tpu"})
    kwargs = {"mode": mode} if backend is None else {"mode": mode, "backend": backend}
    losses, params = mlp_losses(kwargs)
    assert losses == want_losses
    for p, q in zip(params, want_params):
        assert torch.equal(p, q)


def test_compile_settings_are_checked_as_inductor_checks_them():
    x = torch.randn(2, 4, device="tpu")
    fn = torch.compile(lambda x: x * 2, backend="tpu", options={"epilogue_fusion": False})
    torch.testing.assert_close(fn(x).cpu(), x.cpu() * 2)
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="Unrecognized mode=fastest"):
        torch.compile(lambda x: x * 2, backend="tpu", mode="fastest")(x)
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="unexpected optimization option 'not_an_option'"):
        torch.compile(lambda x: x * 2, backend="tpu", options={"not_an_option": 1})(x)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(lambda x: x + 1, backend="tpu")(x).cpu(),
                               x.cpu() + 1)  # the device still works


def test_a_plan_replays_only_for_inputs_on_its_chip():
    # replay checks the inputs' devices itself (the Python check was 30 us per call of
    # AdamW's step): the same signature on the CPU runs the graph eagerly there
    x = torch.randn(4, 8, device="tpu")
    g, out = compiled_graph(lambda x: (x * 2).exp(), x)
    hits = report.totals()["launches"]
    torch.testing.assert_close(g([x])[0].cpu(), (x.cpu() * 2).exp())
    assert report.totals()["launches"] == hits + 1  # one replayed plan
    assert torchtpu._C._replay(g.fn_id, [x.cpu()]) is None
    y = g([x.cpu()])[0]
    assert y.device.type == "cpu"
    torch.testing.assert_close(y, (x.cpu() * 2).exp())


def test_a_plan_replays_only_for_inputs_aliased_as_when_captured():
    # the signature records which inputs share a storage, and at what offset: a plan
    # captured for separate inputs must not replay when they alias (the graph writes x
    # before it reads y), and a plan captured for aliased inputs replays for aliased ones
    def fn(x, y):
        x.mul_(2)
        return x + y
    a, b = torch.randn(8, device="tpu"), torch.randn(8, device="tpu")
    g, _ = compiled_graph(fn, a, b)
    plans = g.stats()["plans"]
    for same in (torch.randn(8, device="tpu") for _ in range(2)):
        want = same.cpu() * 4  # y is x, already doubled
        torch.testing.assert_close(g([same, same])[0].cpu(), want)
    assert g.stats()["plans"] == plans + 1  # captured once, then replayed
    for base in (torch.randn(16, device="tpu") for _ in range(2)):
        x, y = base[:8], base[8:]  # one storage at two offsets: a third signature
        want = x.cpu() * 2 + y.cpu()
        torch.testing.assert_close(g([x, y])[0].cpu(), want)
        torch.testing.assert_close(base[:8].cpu(), want - y.cpu())  # x doubled in place
    p, q = torch.randn(8, device="tpu"), torch.randn(8, device="tpu")
    want = p.cpu() * 2 + q.cpu()
    hits = report.totals()["launches"]
    out = g([p, q])[0]
    assert report.totals()["launches"] == hits + 1  # the first plan, replayed
    torch.testing.assert_close(out.cpu(), want)


def test_dynamic_shapes_get_a_plan_per_size(monkeypatch):
    # a graph traced with dynamic shapes takes its sizes as int arguments: each size is
    # captured once and replayed after (not run op by op on every call), with the results
    # of the CPU, forward and backward
    runs = []  # graph runs in Python: a capture, or op by op; a replay runs none
    run = tc._TpuGraph._run
    monkeypatch.setattr(tc._TpuGraph, "_run", lambda g, args: runs.append(g.kind) or run(g, args))
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4)).to("tpu")
    model.load_state_dict(cpu.state_dict())
    forward = torch.compile(model, backend="tpu", dynamic=True)
    with torch.tpu.precision("highest"):
        for rows in (8, 5, 8, 5, 3, 3):
            x = torch.randn(rows, 16)
            want = cpu(x).square().sum()
            want.backward()
            got = forward(x.to("tpu")).square().sum()
            got.backward()
            torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
            for p, q in zip(model.parameters(), cpu.parameters()):
                torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)
                p.grad, q.grad = None, None
    # one capture of forward and backward per size (8, 5, 3), every other call replayed
    assert runs == ["forward", "backward"] * 3, runs
    fw, bw = (next(g for g in tc.graphs if g.kind == kind) for kind in ("forward", "backward"))
    assert len(fw.variants) == len(bw.variants) == 3
    assert not fw.eager and not bw.eager

def test_outputs_that_follow_from_shapes_replay_per_shape(monkeypatch):
    # a graph whose outputs include a size of its tensor input (an int): the plans of two
    # input shapes return different ints, so each replays its own and never the other's
    gm = torch.fx.symbolic_trace(lambda a: (a * 2, a.shape[0]))
    g = tc._TpuGraph(gm, "forward")
    runs = []
    run = tc._TpuGraph._run
    monkeypatch.setattr(tc._TpuGraph, "_run", lambda g, args: runs.append(1) or run(g, args))
    for rows in (4, 5, 5, 4, 5, 4):
        x = torch.arange(rows, dtype=torch.float32)
        doubled, size = g([x.to("tpu")])
        assert size == rows
        torch.testing.assert_close(doubled.cpu(), x * 2)
    # captures: 4 and 5 under the graph's id (the second returns another int), then each
    # once more under an id of its own; every later call replays
    assert len(runs) == 4, runs
    assert g.by_signature and not g.eager


def test_outputs_a_plan_cannot_replay_run_op_by_op():
    # a float among the outputs: the capture's plan cannot return it, so the graph runs op
    # by op for that input (and never replays the plan without its template)
    gm = torch.fx.symbolic_trace(lambda a: (a * 2, 1.5))
    g = tc._TpuGraph(gm, "forward")
    for _ in range(3):
        doubled, value = g([torch.ones(3, device="tpu")])
        assert value == 1.5
        torch.testing.assert_close(doubled.cpu(), torch.full((3,), 2.0))
    assert g.by_signature and len(g.eager) == 1


def test_dynamic_shapes_beyond_the_plan_limit_run_op_by_op(monkeypatch):
    monkeypatch.setattr(tc, "MAX_SIZE_VARIANTS", 2)
    f = torch.compile(lambda x: (x * 2).exp().sum(0), backend="tpu", dynamic=True)
    with torch.no_grad():
        for rows in (4, 6, 7, 9):
            x = torch.randn(rows, 3)
            torch.testing.assert_close(f(x.to("tpu")).cpu(), (x * 2).exp().sum(0))
    (g,) = tc.graphs
    assert len(g.variants) == 2
    torch.testing.assert_close(f(torch.ones(4, 3, device="tpu")).cpu(),
                               torch.full((3,), 4 * np.exp(2.0), dtype=torch.float32))


def test_recompile_log_names_a_changed_size():
    code = """
import torch, torchtpu
f = torch.compile(lambda x, w: (x @ w).relu(), backend="tpu", dynamic=True)
w = torch.randn(16, 4, device="tpu")
f(torch.randn(8, 16, device="tpu"), w)
f(torch.randn(5, 16, device="tpu"), w)
"""
    lines = graph_log_lines(code)
    assert len(lines) == 2, lines
    assert "recompile" in lines[1] and "int 8 -> 5" in lines[1], lines


def test_rng_state_functions_run_eagerly_inside_a_compiled_function():
    # as for torch.cuda's, Dynamo calls torch.tpu's seed and state functions instead of
    # tracing them: torch.testing's freeze_rng_state (which reads and restores the state
    # with dispatch disabled, around OpInfo's seeded ops such as item) compiles, and a state
    # read, restored and drawn from again gives the same numbers
    from torch.testing._utils import wrapper_set_seed

    # first: in this order the test fails without the skip (after the redraw below, the
    # seeded call passed either way)
    def seeded(x):
        return wrapper_set_seed(torch.Tensor.item, x)

    x = torch.randn((), device="tpu")
    assert torch.compile(seeded, backend="tpu")(x) == x.item()

    def redraw(x):
        state = torch.tpu.get_rng_state()
        a = torch.rand(3, device="tpu")
        torch.tpu.set_rng_state(state)
        return x + a - torch.rand(3, device="tpu")

    zeros = torch.zeros(3, device="tpu")
    assert torch.equal(torch.compile(redraw, backend="tpu")(zeros).cpu(), zeros.cpu())
