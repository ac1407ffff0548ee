"""A device-generic training script: written against torch.accelerator, it runs unchanged on
tpu, cuda, xpu, mps or cpu. Nothing in it names the tpu.

Run:  .venv/bin/python examples/device_generic.py                 # on the accelerator (tpu)
      .venv/bin/python examples/device_generic.py --device cpu    # the same on the CPU
      .venv/bin/python examples/device_generic.py --epochs 4 --stop-after 2 --checkpoint ck.pt
      .venv/bin/python examples/device_generic.py --epochs 4 --resume ck.pt   # finishes the run
      options: --amp (bf16 autocast), --matmul-precision highest, --dropout 0.1, --json

What it uses, as a typical training script does:
  - the device from torch.accelerator.current_accelerator() (cpu if there is none);
  - torch.manual_seed, and a seeded shuffle per epoch so a resumed run sees the same batches;
  - a DataLoader with pin_memory=True and non_blocking host-to-device copies;
  - torch.autocast(device.type) when --amp is given;
  - torch.utils.checkpoint activation checkpointing on every residual block (recomputed in
    backward, with the device's RNG state restored so dropout masks match);
  - AdamW, gradient clipping (clip_grad_norm_), a OneCycleLR learning-rate schedule;
  - checkpoints with torch.save/torch.load of model, optimizer, scheduler and RNG states, so
    that an interrupted run resumes with the same losses as an uninterrupted one.
The data is synthetic (made on the spot): a 4-class labelling of 32-dim Gaussian points.
"""
import argparse
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    """Pre-norm residual MLP block: x + W2 dropout(gelu(W1 norm(x)))."""

    def __init__(self, dim: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return x + self.fc2(self.drop(F.gelu(self.fc1(self.norm(x)))))


class Net(nn.Module):
    def __init__(self, dim_in=32, dim=64, depth=3, classes=4, dropout=0.0, ckpt=True):
        super().__init__()
        self.inp = nn.Linear(dim_in, dim)
        self.blocks = nn.ModuleList(Block(dim, dropout) for _ in range(depth))
        self.head = nn.Linear(dim, classes)
        self.ckpt = ckpt

    def forward(self, x):  # x: (B, dim_in) -> logits (B, classes)
        h = self.inp(x)
        for block in self.blocks:
            if self.ckpt and self.training:
                h = checkpoint(block, h, use_reentrant=False)
            else:
                h = block(h)
        return self.head(h)


def pick_device(name=None) -> torch.device:
    if name:
        return torch.device(name)
    if torch.accelerator.is_available():
        return torch.accelerator.current_accelerator()
    return torch.device("cpu")


def make_dataset(seed: int, n=512, dim_in=32, classes=4) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim_in, generator=g)
    w = torch.randn(dim_in, classes, generator=g)
    y = (x @ w).argmax(1)
    return TensorDataset(x, y)


def rng_states(device):
    states = {"cpu": torch.get_rng_state()}
    if device.type != "cpu":
        states["device"] = torch.get_device_module(device.type).get_rng_state(device)
    return states


def set_rng_states(states, device):
    # RNG states are CPU byte tensors (torch.load's map_location moved them to the device)
    torch.set_rng_state(states["cpu"].cpu())
    if "device" in states:
        torch.get_device_module(device.type).set_rng_state(states["device"].cpu(), device)


def train(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="default: the current accelerator")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--amp", action="store_true", help="bfloat16 autocast")
    p.add_argument("--no-activation-checkpointing", action="store_true")
    p.add_argument("--matmul-precision", choices=["highest", "high", "medium"], default=None)
    p.add_argument("--checkpoint", default=None, help="save a checkpoint here after each epoch")
    p.add_argument("--resume", default=None, help="resume from this checkpoint")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this epoch (as if killed)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = p.parse_args(argv)

    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    if args.matmul_precision:
        torch.set_float32_matmul_precision(args.matmul_precision)

    data = make_dataset(args.seed)
    steps_per_epoch = -(-len(data) // args.batch_size)
    model = Net(dropout=args.dropout, ckpt=not args.no_activation_checkpointing).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr,
                                                total_steps=args.epochs * steps_per_epoch)
    start_epoch, losses = 0, []
    if args.resume:
        state = torch.load(args.resume, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        set_rng_states(state["rng"], device)
        start_epoch = state["epoch"]

    for epoch in range(start_epoch, args.epochs):
        model.train()
        shuffle = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, generator=shuffle,
                            pin_memory=True)
        epoch_losses = []
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
            sched.step()
            epoch_losses.append(loss.detach())
        epoch_losses = [float(v) for v in torch.stack(epoch_losses).cpu()]
        losses.extend(epoch_losses)
        if not args.json:
            print(f"epoch {epoch + 1}/{args.epochs}  loss {sum(epoch_losses) / len(epoch_losses):.4f}"
                  f"  lr {sched.get_last_lr()[0]:.2e}  on {device}")
        if args.checkpoint:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(), "rng": rng_states(device),
                        "epoch": epoch + 1}, args.checkpoint)
        if args.stop_after is not None and epoch + 1 >= args.stop_after:
            break

    model.eval()
    with torch.no_grad():
        x, y = data.tensors
        acc = (model(x.to(device)).argmax(1).cpu() == y).float().mean().item()
    result = {"device": str(device), "losses": losses, "accuracy": acc}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"accuracy {acc:.3f}")
    return result


if __name__ == "__main__":
    train(sys.argv[1:])
