"""The optimizers' kernels on tpu: torch._foreach_* ops (one program each) and Adam/AdamW with
fused=True (the native _fused_adam(w)_ kernel) against PyTorch's CPU kernels on the same
tensors, their launches per optimizer step, and a fused step under torch.compile."""
import pytest
import torch

import torchtpu
import torchtpu.report as report
from conftest import no_fallback


@pytest.mark.parametrize("name,call", [
    ("add_ scalar", lambda xs, ys: torch._foreach_add_(xs, 1.5)),
    ("mul list", lambda xs, ys: torch._foreach_mul(xs, ys)),
    ("lerp_", lambda xs, ys: torch._foreach_lerp_(xs, ys, 0.25)),
    ("addcdiv_ scalar list", lambda xs, ys: torch._foreach_addcdiv_(xs, ys, ys, [0.1, 0.2, 0.3])),
    ("exp", lambda xs, ys: torch._foreach_exp(ys)),
    ("norm", lambda xs, ys: torch._foreach_norm(xs)),
])
def test_foreach_op_is_one_program(name, call):
    def inputs(device):
        g = torch.Generator().manual_seed(0)
        return [[torch.randn(s, generator=g).to(device) for s in [(7, 5), (33,), (4, 3, 2)]]
                for _ in range(2)]
    call(*inputs("tpu"))  # the first call compiles the program
    torch.tpu.synchronize()
    cpu, dev = inputs("cpu"), inputs("tpu")
    want = call(*cpu)
    before = report.totals()["launches"]
    got = no_fallback(lambda: call(*dev))  # synchronizes
    assert report.totals()["launches"] - before == 1
    if want is None:  # in place: the updated list
        want, got = cpu[0], dev[0]
    for w, d in zip(want, got):
        torch.testing.assert_close(d.cpu(), w, rtol=1e-6, atol=1e-6)


def state(n=3, seed=0, amsgrad=False):
    """params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs (empty without amsgrad), steps
    on the CPU."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (33,), (4, 3, 2)][:n]
    params = [torch.randn(s, generator=g) for s in shapes]
    grads = [torch.randn(s, generator=g) for s in shapes]
    exp_avgs = [torch.randn(s, generator=g) * 0.1 for s in shapes]
    exp_avg_sqs = [torch.rand(s, generator=g) * 0.1 for s in shapes]
    max_sqs = [v + torch.rand(s, generator=g) * 0.05 for v, s in zip(exp_avg_sqs, shapes)]
    if not amsgrad:
        max_sqs = []
    steps = [torch.tensor(float(k + 3)) for k in range(n)]
    return [params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps]


def to_tpu(lists):
    return [[t.to("tpu") for t in ts] for ts in lists]


@pytest.mark.parametrize("op", [torch._fused_adam_, torch._fused_adamw_])
@pytest.mark.parametrize("amsgrad,maximize,weight_decay", [
    (False, False, 0.0), (False, False, 0.1), (True, False, 0.1), (False, True, 0.05)])
def test_matches_the_cpu_kernel(op, amsgrad, maximize, weight_decay):
    cpu = state(amsgrad=amsgrad)
    dev = to_tpu(cpu)
    kw = dict(lr=1e-2, beta1=0.9, beta2=0.99, weight_decay=weight_decay, eps=1e-8,
              amsgrad=amsgrad, maximize=maximize)
    op(*cpu, **kw)
    no_fallback(lambda: op(*dev, **kw))
    # f32 math in both; they differ only in rounding order (a few ulp of the update)
    for want, got in zip(cpu[:5], dev[:5]):
        for w, g in zip(want, got):
            torch.testing.assert_close(g.cpu(), w, rtol=1e-6, atol=1e-6)


def test_tensor_lr_grad_scale_and_found_inf():
    kw = dict(beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
              maximize=False)
    for found in (0.0, 1.0):
        cpu = state(seed=1)
        dev = to_tpu(cpu)
        scale, inf = torch.tensor(4.0), torch.tensor(found)
        torch._fused_adamw_(*cpu, lr=torch.tensor(1e-3), grad_scale=scale, found_inf=inf, **kw)
        torch._fused_adamw_(*dev, lr=torch.tensor(1e-3, device="tpu"),
                            grad_scale=scale.to("tpu"), found_inf=inf.to("tpu"), **kw)
        before = state(seed=1)
        for k, (want, got) in enumerate(zip(cpu[:4], dev[:4])):  # grads are unscaled too
            for w, g, b in zip(want, got, before[k]):
                torch.testing.assert_close(g.cpu(), w, rtol=1e-6, atol=1e-6)
                if found:  # an inf step changes nothing
                    assert torch.equal(g.cpu(), b)


def test_bad_lists_raise_and_the_device_still_works():
    params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps = to_tpu(state())
    with pytest.raises(RuntimeError, match="_fused_adamw_: .*same length"):
        torch._fused_adamw_(params, grads[:2], exp_avgs, exp_avg_sqs, max_sqs, steps, lr=1e-3,
                            beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False,
                            maximize=False)
    with pytest.raises(RuntimeError, match="grad 1 has shape"):
        torch._fused_adamw_(params, [grads[0], grads[2], grads[1]], exp_avgs, exp_avg_sqs,
                            max_sqs, steps, lr=1e-3, beta1=0.9, beta2=0.99, weight_decay=0.0,
                            eps=1e-8, amsgrad=False, maximize=False)
    assert (params[0] * 2).sum().item() == pytest.approx((state()[0][0] * 2).sum().item(),
                                                         rel=1e-5)


def model_and_data(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(device)
    return model, torch.randn(8, 16)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_optimizer_step_is_one_program(mode):
    model, x = model_and_data("tpu")
    ref, _ = model_and_data("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, foreach=True)
    torchtpu.reset_fallback_stats()
    torchtpu.set_eager_mode(mode)
    try:
        for _ in range(3):
            for m, o in ((model, opt), (ref, ref_opt)):
                m(x.to("tpu")).square().sum().backward()
            torch.tpu.synchronize()
            before = report.totals()["launches"]
            opt.step()
            torch.tpu.synchronize()
            launches = report.totals()["launches"] - before
            ref_opt.step()
            opt.zero_grad()
            ref_opt.zero_grad()
    finally:
        torchtpu.set_eager_mode("strict")
    # strict: the step counters' increment (a foreach op) and the update, one program each
    assert launches == (2 if mode == "strict" else 1), launches
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu(), rtol=1e-5, atol=1e-6)
    assert torchtpu.fallback_stats() == {}


def test_compiled_fused_step_runs_natively():
    # PyTorch keeps Dynamo out of the fused optimizers (torch.compiler.disable, "don't
    # trace into fused optimizer"), so a compiled fused step runs this kernel eagerly
    model, x = model_and_data("tpu")
    ref, _ = model_and_data("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, fused=True)
    step = torch.compile(opt.step, backend="tpu")
    torchtpu.reset_fallback_stats()
    for _ in range(3):
        for m in (model, ref):
            m(x.to("tpu")).square().sum().backward()
        step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu(), rtol=0, atol=0)
    assert torchtpu.fallback_stats() == {}
