# Hugging Face transformers models on tpu: GPT-2, BERT, Llama and ViT, built from tiny
# configs with random weights (no downloads: HF_HUB_OFFLINE=1), forward and backward,
# compared with the same model on the CPU.
#
# Tolerances. A float32 matmul on tpu follows the matmul precision (torch.tpu.precision):
# - HIGHEST (six bf16 passes, about float32): compared tightly, losses to 1e-5 and every
#   gradient to 1e-4 of its own scale;
# - DEFAULT (one bf16 pass, the TPU default: inputs rounded to 8 mantissa bits): compared
#   loosely, losses to 1e-2 and gradients to 5e-2 of their scale.
# A gradient's scale is max(|g|) floored at 1e-3 of the model's largest gradient: some true
# gradients are exactly zero (a key bias, which softmax cancels) and both devices give
# rounding noise there.
#
# The ops that ran through the CPU fallback are printed per model (and must stay within
# the expected list, empty today). The torch.compile(backend="tpu") variant (at HIGHEST)
# runs when that backend is registered and is skipped with the reason otherwise.
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import torchtpu  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

VOCAB, SEQ, BATCH = 128, 16, 2


def _gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg), "lm"


def _bert():
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=VOCAB,
                                  max_position_embeddings=32)
    return transformers.BertForMaskedLM(cfg), "mlm"


def _llama():
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=128, vocab_size=VOCAB,
                                   max_position_embeddings=32, bos_token_id=0, eos_token_id=0,
                                   pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg), "lm"


def _vit():
    cfg = transformers.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                 intermediate_size=128, image_size=32, patch_size=8, num_labels=5)
    return transformers.ViTForImageClassification(cfg), "image"


MODELS = {"gpt2": _gpt2, "bert": _bert, "llama": _llama, "vit": _vit}
# Ops allowed through the CPU fallback per model (none today); a new entry here is a
# regression to explain.
EXPECTED_FALLBACK = {"gpt2": set(), "bert": set(), "llama": set(), "vit": set()}


def make(name, seed=0):
    torch.manual_seed(seed)
    model, kind = MODELS[name]()
    g = torch.Generator().manual_seed(seed + 1)
    if kind == "image":
        batch = {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=g),
                 "labels": torch.tensor([1, 3])}
    else:
        ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
        mask = torch.ones(BATCH, SEQ, dtype=torch.long)
        mask[1, -3:] = 0  # a padded sequence: exercises the attention mask
        batch = {"input_ids": ids, "attention_mask": mask}
        if kind == "lm":
            batch["labels"] = ids.masked_fill(mask == 0, -100)
        else:  # masked LM: predict 4 positions
            labels = torch.full_like(ids, -100)
            labels[:, 2:6] = ids[:, 2:6]
            batch["labels"] = labels
            batch["input_ids"] = ids.clone()
            batch["input_ids"][:, 2:6] = 1  # the "[MASK]" id
    return model, batch


def _compile_available():
    try:
        return "tpu" in torch._dynamo.list_backends()
    except Exception:  # pragma: no cover - dynamo unavailable
        return False


_COMPILE = pytest.mark.skipif(
    not _compile_available(),
    reason='torch.compile(backend="tpu") is not registered (torch._dynamo.list_backends() has '
           'no "tpu")')
# (mode, precision, loss tolerance, gradient tolerance); compile mode is checked at HIGHEST
# only (Dynamo's tracing of each model costs seconds).
RUNS = [
    pytest.param("eager", "highest", 1e-5, 1e-4, id="eager-highest"),
    pytest.param("eager", "default", 1e-2, 5e-2, id="eager-default"),
    pytest.param("compile", "highest", 1e-5, 1e-4, id="compile-highest", marks=_COMPILE),
]


def forward_backward(model, batch, device, mode):
    model = model.to(device)
    batch = {k: v.to(device) for k, v in batch.items()}
    run = torch.compile(model, backend="tpu") if mode == "compile" else model
    out = run(**batch)
    out.loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return out.loss.detach().cpu(), out.logits.detach().cpu(), grads


def _report(capsys, name, what, stats):
    with capsys.disabled():
        listed = ", ".join(f"{k} x{v}" for k, v in stats.items()) or "none"
        print(f"\n[transformers] {name} ({what}): ops on the CPU fallback: {listed}")


def _check_fallback(name, stats):
    ops = {k.split("::", 1)[-1] for k in stats}
    unexpected = ops - EXPECTED_FALLBACK[name]
    assert not unexpected, f"{name}: new ops through the CPU fallback: {sorted(unexpected)}"


@pytest.mark.parametrize("mode,precision,loss_tol,grad_tol", RUNS)
@pytest.mark.parametrize("name", list(MODELS))
def test_forward_backward_matches_cpu(name, mode, precision, loss_tol, grad_tol, capsys):
    model, batch = make(name)
    model.eval()  # no dropout: the two devices draw different random numbers
    loss_c, logits_c, grads_c = forward_backward(model, batch, "cpu", "eager")
    model.zero_grad(set_to_none=True)
    torchtpu.reset_fallback_stats()
    with torch.tpu.precision(precision):
        loss_t, logits_t, grads_t = forward_backward(model, batch, "tpu", mode)
    torch.tpu.synchronize()
    stats = torchtpu.fallback_stats()
    _report(capsys, name, f"{mode}, {precision}", stats)

    assert torch.isfinite(loss_t)
    torch.testing.assert_close(loss_t, loss_c, rtol=loss_tol, atol=loss_tol)
    scale = logits_c.abs().max().item()
    assert (logits_t - logits_c).abs().max().item() <= 5 * loss_tol * max(scale, 1.0)
    assert grads_t.keys() == grads_c.keys()
    floor = 1e-3 * max(g.abs().max().item() for g in grads_c.values())
    errors = {n: ((grads_t[n] - g).abs().max() / max(g.abs().max().item(), floor)).item()
              for n, g in grads_c.items()}
    worst = max(errors, key=errors.get)
    assert errors[worst] <= grad_tol, f"{name}: gradient of {worst} off by {errors[worst]:.2e}"
    _check_fallback(name, stats)


@pytest.mark.parametrize("name", list(MODELS))
def test_tied_weights_stay_tied_on_tpu(name):
    """model.to("tpu") moves parameters in place, as on CUDA, so tied weights stay one
    tensor (and get the sum of both gradients)."""
    model, _ = make(name)
    before = {id(p) for p in model.parameters()}
    shared = model.get_output_embeddings()
    model.to("tpu")
    assert {id(p) for p in model.parameters()} == before
    if shared is not None and getattr(model.config, "tie_word_embeddings", False):
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


@pytest.mark.parametrize("name", list(MODELS))
def test_train_step_with_autocast(name, capsys):
    """model.train() (dropout on), bf16 autocast, AdamW with clipping: two steps run on tpu,
    the loss stays close to the float32 loss, and no op leaves the chip."""
    model, batch = make(name)
    model.to("tpu").train()
    batch = {k: v.to("tpu") for k, v in batch.items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torchtpu.reset_fallback_stats()
    losses = []
    for _ in range(2):
        with torch.autocast("tpu", dtype=torch.bfloat16):
            loss = model(**batch).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    stats = torchtpu.fallback_stats()
    _report(capsys, name, "train step, bf16 autocast", stats)
    assert all(torch.isfinite(torch.tensor(losses)))
    model.eval()
    with torch.no_grad():
        ref = model(**batch).loss.item()
        with torch.autocast("tpu", dtype=torch.bfloat16):
            low = model(**batch).loss.item()
    assert abs(low - ref) <= 5e-2 * max(1.0, abs(ref)), (low, ref)
    _check_fallback(name, stats)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_generate_matches_cpu(name, capsys):
    """generate() with the KV cache: the same tokens as on the CPU (at HIGHEST precision),
    with every op native (isin, for the stopping criteria, is lowered)."""
    model, batch = make(name)
    model.eval()
    prompt = batch["input_ids"][:1, :6]
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    ref = model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
    model.to("tpu")
    torchtpu.reset_fallback_stats()
    with torch.tpu.precision("highest"):
        out = model.generate(prompt.to("tpu"), attention_mask=torch.ones_like(prompt).to("tpu"),
                             **kwargs)
    stats = torchtpu.fallback_stats()
    _report(capsys, name, "greedy generate", stats)
    assert torch.equal(out.cpu(), ref)
    _check_fallback(name, stats)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_sampled_generate_runs_natively(name, capsys):
    """generate(do_sample=True) with top-k and top-p: torch.multinomial draws on the chip
    (the chip's generator, so tokens differ from the CPU's): every op native, the same
    tokens again under the same seed, and tokens from the vocabulary."""
    model, batch = make(name)
    model.eval().to("tpu")
    prompt = batch["input_ids"][:2, :6].to("tpu")
    kwargs = dict(max_new_tokens=6, do_sample=True, top_k=20, top_p=0.9, pad_token_id=0,
                  attention_mask=torch.ones_like(prompt))
    torchtpu.reset_fallback_stats()
    torch.manual_seed(7)
    first = model.generate(prompt, **kwargs).cpu()
    stats = torchtpu.fallback_stats()
    _report(capsys, name, "sampled generate", stats)
    _check_fallback(name, stats)
    torch.manual_seed(7)
    assert torch.equal(model.generate(prompt, **kwargs).cpu(), first)
    assert first.shape == (2, 12) and torch.equal(first[:, :6], prompt.cpu())
    assert 0 <= first.min().item() and first.max().item() < VOCAB
