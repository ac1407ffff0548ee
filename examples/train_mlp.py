"""Train a small MLP classifier on the virtual TPU (plain PyTorch; only the device differs).

Run:  .venv/bin/python examples/train_mlp.py [--steps 50] [--device tpu]

The data are two interleaved spirals made on the spot; the model learns to separate them.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def spirals(n: int, seed: int):
    """(n, 2) points of two spirals and their labels 0/1."""
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, generator=g) * 3 * math.pi
    label = torch.randint(0, 2, (n,), generator=g)
    r = t / (3 * math.pi)
    angle = t + label * math.pi
    x = torch.stack([r * torch.cos(angle), r * torch.sin(angle)], dim=1)
    return x + 0.02 * torch.randn(n, 2, generator=g), label


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                         nn.Linear(128, 2))


def train(steps: int, device: str, seed: int = 0, batch: int = 128, quiet: bool = True,
          compile: bool = False):
    """Trains for |steps| AdamW steps; returns the per-step losses."""
    torch.manual_seed(seed)
    model = make_model().to(device)
    forward = torch.compile(model, backend="tpu") if compile else model  # compile mode
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = spirals(4096, seed)
    losses = []
    for step in range(steps):
        i = torch.arange(step * batch, (step + 1) * batch) % len(x)
        loss = F.cross_entropy(forward(x[i].to(device)), y[i].to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if not quiet and step % 10 == 0:
            print(f"step {step:3d}  loss {losses[-1]:.4f}")
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--device", default="tpu")
    args = parser.parse_args()
    losses = train(args.steps, args.device, quiet=False)
    print(f"first loss {losses[0]:.4f}, last loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
