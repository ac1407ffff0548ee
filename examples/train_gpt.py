"""Train a small GPT-style decoder on the virtual TPU: the `make demo` job.

Run:  .venv/bin/python examples/train_gpt.py [--steps 200] [--device tpu] [--plot gpt_loss.png]
      (or `make demo`, which creates .venv first)

The model is plain PyTorch (token + position embeddings, causal self-attention, layer
norm, GELU MLP, AdamW); the only TPU-specific thing is the device string. The data is a
synthetic character stream made on the spot (no downloads). It prints a progress bar and
the loss, and writes the loss curve as a PNG if matplotlib is installed.
"""
import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):  # x: (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, C/H)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block_size: int, d_model: int, n_head: int, n_layer: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx, targets=None):  # idx: (B, T) int64
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))  # (B, T, vocab)
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def synthetic_text(n: int, vocab: int, seed: int) -> torch.Tensor:
    """A learnable stream: each token mostly follows from the one before it (10% noise)."""
    g = torch.Generator().manual_seed(seed)
    data = torch.empty(n, dtype=torch.long)
    data[:2] = torch.randint(vocab, (2,), generator=g)
    noise = torch.rand(n, generator=g)
    rand_tok = torch.randint(vocab, (n,), generator=g)
    for i in range(2, n):
        nxt = (5 * data[i - 1] + 3) % vocab
        data[i] = rand_tok[i] if noise[i] < 0.1 else nxt
    return data


def get_batch(data, batch: int, block: int, g: torch.Generator):
    ix = torch.randint(len(data) - block - 1, (batch,), generator=g)
    x = torch.stack([data[i:i + block] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
    return x, y


def progress(step: int, total: int, loss: float, rate: float) -> None:
    width = 30
    done = int(width * step / total)
    bar = "#" * done + "." * (width - done)
    sys.stdout.write(f"\r[{bar}] {step}/{total}  loss {loss:.4f}  {rate:.1f} steps/s")
    sys.stdout.flush()


def plot(losses, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed; not writing {path}")
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("GPT on the virtual TPU")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"loss curve written to {path}")


def train(steps: int, device: str, seed: int = 0, batch: int = 8, block: int = 32,
          d_model: int = 64, n_head: int = 4, n_layer: int = 2, vocab: int = 64,
          lr: float = 1e-2, quiet: bool = False, compile: bool = False):
    """Trains for |steps| and returns the per-step losses (floats). compile: run the model
    (forward and backward) through torch.compile(backend="tpu")."""
    torch.manual_seed(seed)
    model = GPT(vocab, block, d_model, n_head, n_layer).to(device)
    forward = torch.compile(model, backend="tpu") if compile else model
    # compiled, the optimizer step is one graph too: capturable keeps its step on the tpu
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, capturable=compile)
    opt_step = torch.compile(opt.step, backend="tpu") if compile else opt.step
    data = synthetic_text(4096, vocab, seed)
    g = torch.Generator().manual_seed(seed + 1)
    losses = []
    start = time.perf_counter()
    for step in range(1, steps + 1):
        x, y = get_batch(data, batch, block, g)
        _, loss = forward(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt_step()
        losses.append(loss.item())
        if not quiet:
            progress(step, steps, losses[-1], step / (time.perf_counter() - start))
    if not quiet:
        print()
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", default="tpu")
    parser.add_argument("--plot", default="gpt_loss.png", help="PNG path ('' to skip)")
    parser.add_argument("--compile", action="store_true", help='torch.compile(backend="tpu")')
    args = parser.parse_args()
    if args.device.startswith("tpu"):
        props = torch.tpu.get_device_properties(torch.device(args.device))
        print(f"device: {args.device} = {props.name}, "
              f"{props.total_memory / 2**30:.0f} GiB HBM, {props.mxu_count} MXUs "
              f"of {props.mxu_dim}x{props.mxu_dim}")
    losses = train(args.steps, args.device, compile=args.compile)
    print(f"first loss {losses[0]:.4f} (chance: {math.log(64):.4f}), last loss {losses[-1]:.4f}")
    if args.device.startswith("tpu"):
        import torchtpu
        calls = sum(torchtpu.fallback_stats().values())
        print(f"ops that ran through the CPU fallback: {len(torchtpu.fallback_stats())} "
              f"kinds, {calls} calls; peak HBM {torch.tpu.max_memory_allocated() / 2**20:.1f} MiB")
    if args.plot:
        plot(losses, args.plot)


if __name__ == "__main__":
    main()
