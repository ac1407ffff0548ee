"""Fine-tune a Hugging Face transformers model on the TPU, the way a transformers training
loop does it: AutoModelForSequenceClassification, AdamW with a linear warmup schedule,
gradient accumulation, gradient clipping, bf16 autocast, an evaluation loop, and
save_pretrained/from_pretrained of the result.

Run:  .venv/bin/python examples/finetune_hf.py                    # BERT, on the accelerator
      .venv/bin/python examples/finetune_hf.py --model llama --epochs 5
      .venv/bin/python examples/finetune_hf.py --device cpu       # the same on the CPU
      options: --no-amp, --dropout 0, --accumulate 2, --save DIR, --steps N (stop early), --json

No download happens (HF_HUB_OFFLINE=1): the model is built from a tiny config with random
weights (2 layers, hidden 64), and the data is synthetic: sequences of token ids labelled 1
when they hold more "positive" tokens (ids below 64) than "negative" ones. A tiny model
learns that in a few epochs. Needs `pip install transformers` (in requirements.txt).
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import transformers  # noqa: E402

VOCAB, SEQ = 128, 24


def tiny_config(name: str, dropout: float = 0.1):
    common = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                  vocab_size=VOCAB, max_position_embeddings=64, num_labels=2)
    if name == "bert":
        return transformers.BertConfig(hidden_dropout_prob=dropout,
                                       attention_probs_dropout_prob=dropout, **common)
    if name == "llama":
        return transformers.LlamaConfig(num_key_value_heads=2, pad_token_id=0,
                                        attention_dropout=dropout, **common)
    if name == "gpt2":
        return transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                       n_positions=64, num_labels=2, pad_token_id=0,
                                       resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    raise ValueError(f"--model must be bert, llama or gpt2, got {name!r}")


def synthetic_dataset(n: int, seed: int) -> TensorDataset:
    """Token ids in [1, VOCAB); label 1 when ids < 64 outnumber the others; padded with 0."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (n, SEQ), generator=g)
    lengths = torch.randint(SEQ // 2, SEQ + 1, (n,), generator=g)
    mask = (torch.arange(SEQ)[None, :] < lengths[:, None]).long()
    ids = ids * mask  # 0 = padding
    positive = ((ids > 0) & (ids < 64)).sum(1)
    negative = (ids >= 64).sum(1)
    labels = (positive > negative).long()
    return TensorDataset(ids, mask, labels)


def to_batch(ids, mask, labels, device):
    return {"input_ids": ids.to(device, non_blocking=True),
            "attention_mask": mask.to(device, non_blocking=True),
            "labels": labels.to(device, non_blocking=True)}


@torch.no_grad()
def evaluate(model, loader, device, amp: bool) -> float:
    model.eval()
    correct = total = 0
    for ids, mask, labels in loader:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(**to_batch(ids, mask, labels, device)).logits
        correct += (logits.argmax(-1).cpu() == labels).sum().item()
        total += labels.numel()
    model.train()
    return correct / total


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="bert", choices=["bert", "llama", "gpt2"])
    p.add_argument("--device", default=None, help="default: the current accelerator")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps", type=int, default=None, help="stop after this many optimizer steps")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--accumulate", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--no-amp", action="store_true", help="train in float32 (default: bf16 autocast)")
    p.add_argument("--save", default=None, help="save_pretrained() the model here, then reload it")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    transformers.logging.set_verbosity_error()

    if args.device:
        device = torch.device(args.device)
    elif torch.accelerator.is_available():
        device = torch.accelerator.current_accelerator()
    else:
        device = torch.device("cpu")
    amp = not args.no_amp
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForSequenceClassification.from_config(tiny_config(args.model, args.dropout))
    model.to(device).train()

    train = DataLoader(synthetic_dataset(1024, args.seed), batch_size=args.batch_size, shuffle=True,
                       generator=torch.Generator().manual_seed(args.seed), pin_memory=True)
    test = DataLoader(synthetic_dataset(256, args.seed + 1), batch_size=128)
    steps_per_epoch = len(train) // args.accumulate
    total = args.epochs * steps_per_epoch if args.steps is None else args.steps
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = transformers.get_linear_schedule_with_warmup(opt, num_warmup_steps=max(1, total // 10),
                                                         num_training_steps=total)
    log = lambda *a: None if args.json else print(*a, flush=True)  # noqa: E731
    log(f"fine-tuning {args.model} ({sum(p.numel() for p in model.parameters()) / 1e3:.0f}k "
        f"parameters) on {device}, {'bf16 autocast' if amp else 'float32'}")

    losses, step, start = [], 0, time.time()
    for epoch in range(args.epochs):
        for i, (ids, mask, labels) in enumerate(train):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                loss = model(**to_batch(ids, mask, labels, device)).loss / args.accumulate
            loss.backward()
            if (i + 1) % args.accumulate:
                continue
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item() * args.accumulate)
            step += 1
            if step % 10 == 0:
                log(f"  step {step:4d}/{total}  loss {losses[-1]:.4f}  lr {sched.get_last_lr()[0]:.2e}")
            if step >= total:
                break
        acc = evaluate(model, test, device, amp)
        log(f"epoch {epoch + 1}: eval accuracy {acc:.3f}  ({time.time() - start:.1f} s)")
        if step >= total:
            break

    result = {"model": args.model, "device": str(device), "losses": losses, "accuracy": acc}
    if args.save:
        model.save_pretrained(args.save)
        reloaded = transformers.AutoModelForSequenceClassification.from_pretrained(args.save).to(device)
        result["reloaded_accuracy"] = evaluate(reloaded, test, device, amp)
        log(f"saved to {args.save}; reloaded model's accuracy {result['reloaded_accuracy']:.3f}")
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
