"""nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell on tpu: PyTorch calls the fused cells
(_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backwards) for accelerator tensors,
which torchtpu lowers natively (torchtpu/csrc/lower_rnn.cpp). Each model is compared with
the same model on CPU, forward and backward, in eager (strict and fused) and compile mode.

Tolerances: the gate matmuls run on the MXU, so these tests set HIGHEST precision (about
f32), and the cell maths is f32 in a different order than the CPU's op-by-op cell (biases
added after the two matmuls, as PyTorch's CUDA kernels do): 1e-5 on results and gradients
of a few steps over 16-wide hidden states. bf16 results are compared between modes bit for
bit, and with the CPU's f32 model within a bf16 tolerance.
"""
import copy

import pytest
import torch
import torch.nn as nn

import torchtpu
from conftest import no_fallback

TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True)
def highest():
    previous = torchtpu.get_matmul_precision()
    torchtpu.set_matmul_precision("highest")
    yield
    torchtpu.set_matmul_precision(previous)


def run_rnn(model, x, h0=None):
    """Output, final state and gradients of sum(output) + sum(final states)."""
    out, state = model(x, h0) if h0 is not None else model(x)
    states = state if isinstance(state, tuple) else (state,)
    (out.sum() + sum(s.sum() for s in states)).backward()
    return [out, *states], [p.grad for p in model.parameters()]


RNNS = {
    "lstm": lambda bias: nn.LSTM(8, 16, num_layers=2, bias=bias, batch_first=True),
    "gru": lambda bias: nn.GRU(8, 16, num_layers=2, bias=bias, batch_first=True),
    "lstm-bidirectional": lambda bias: nn.LSTM(8, 16, bias=bias, bidirectional=True),
    "gru-bidirectional": lambda bias: nn.GRU(8, 16, bias=bias, bidirectional=True),
    "lstm-proj": lambda bias: nn.LSTM(8, 16, bias=bias, proj_size=4),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("name", list(RNNS))
def test_rnn_forward_backward_like_cpu(name, bias):
    torch.manual_seed(0)
    model = RNNS[name](bias)
    x = torch.randn(3, 5, 8)
    want, want_grads = run_rnn(model, x)
    tpu_model = copy.deepcopy(model).to("tpu")
    got, grads = no_fallback(lambda: run_rnn(tpu_model, x.to("tpu")))
    for g, w in zip(got, want):
        torch.testing.assert_close(g.detach().cpu(), w.detach(), **TOL)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g.cpu(), w, **TOL)


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell])
def test_cells_with_a_given_state_like_cpu(cell):
    torch.manual_seed(0)
    model = cell(8, 16)
    x, h = torch.randn(4, 8), torch.randn(4, 16)
    state = (h, torch.randn(4, 16)) if cell is nn.LSTMCell else h

    def step(m, x, state):
        for _ in range(3):
            state = m(x, state)
        outs = state if isinstance(state, tuple) else (state,)
        sum(o.sum() for o in outs).backward()
        return outs, [p.grad for p in m.parameters()]
    want, want_grads = step(model, x, state)
    tpu_state = tuple(s.to("tpu") for s in state) if isinstance(state, tuple) else state.to("tpu")
    got, grads = no_fallback(lambda: step(copy.deepcopy(model).to("tpu"), x.to("tpu"), tpu_state))
    for g, w in zip(list(got) + grads, list(want) + want_grads):
        torch.testing.assert_close(g.detach().cpu(), w.detach(), **TOL)


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_bf16_rnns_agree_across_modes(name):
    # fused mode records the cells into bigger graphs: the same bits as strict
    torch.manual_seed(0)
    model = RNNS[name](True)
    x = torch.randn(3, 5, 8)
    want, _ = run_rnn(model, x)
    results = {}
    for mode in ("strict", "fused"):
        torchtpu.set_eager_mode(mode)
        try:
            tpu_model = copy.deepcopy(model).to("tpu").to(torch.bfloat16)
            results[mode] = run_rnn(tpu_model, x.to("tpu", torch.bfloat16))
            torch.tpu.synchronize()
        finally:
            torchtpu.set_eager_mode("strict")
    for s, f in zip(results["strict"][0] + results["strict"][1], results["fused"][0] + results["fused"][1]):
        assert torch.equal(s.detach().cpu(), f.detach().cpu())
    torch.testing.assert_close(results["strict"][0][0].detach().float().cpu(), want[0].detach(),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_compiled_rnn_trains_like_eager(name):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = RNNS[name](False).to("tpu")
    compiled = copy.deepcopy(model)
    forward = torch.compile(compiled, backend="tpu")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, compiled)]
    x = torch.randn(3, 5, 8, device="tpu")
    for _ in range(3):
        for m, f, opt in zip((model, compiled), (model, forward), opts):
            opt.zero_grad()
            f(x)[0].square().mean().backward()
            opt.step()
    for p, q in zip(model.parameters(), compiled.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach().cpu(), **TOL)


def test_cell_shape_errors_name_the_argument():
    gates, hx = torch.randn(2, 12, device="tpu"), torch.randn(2, 4, device="tpu")
    with pytest.raises(RuntimeError, match="hidden_gates"):
        torch.ops.aten._thnn_fused_gru_cell(gates, gates[:, :9], hx)
    with pytest.raises(RuntimeError, match="prev_hidden"):
        torch.ops.aten._thnn_fused_gru_cell(gates, gates, hx[:, :3])
    with pytest.raises(RuntimeError, match="workspace"):
        torch.ops.aten._thnn_fused_gru_cell_backward(hx, torch.randn(2, 19, device="tpu"), True)
    hy, _ = torch.ops.aten._thnn_fused_gru_cell(gates, gates, hx)  # the device still works
    assert hy.shape == (2, 4)
