"""Train a small CNN with batch norm on 32x32 images on the virtual TPU.

Run:  .venv/bin/python examples/train_cnn.py [--steps 20] [--device tpu]

The images are synthetic (made on the spot, no downloads): the class decides which
quadrant holds a bright blob, so a CNN learns it in a few steps.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def blobs(n: int, seed: int):
    """(n, 3, 32, 32) images and labels 0..3 (the quadrant of the blob)."""
    g = torch.Generator().manual_seed(seed)
    label = torch.randint(0, 4, (n,), generator=g)
    img = 0.3 * torch.randn(n, 3, 32, 32, generator=g)
    for q in range(4):
        r, c = (q // 2) * 16, (q % 2) * 16
        img[label == q, :, r + 4:r + 12, c + 4:c + 12] += 1.0
    return img, label


class CNN(nn.Module):
    def __init__(self, classes: int = 4):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.head = nn.Linear(32 * 2 * 2, classes)

    def forward(self, x):  # x: (B, 3, 32, 32)
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)   # (B, 16, 16, 16)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)   # (B, 32, 8, 8)
        x = F.adaptive_avg_pool2d(x, 2).flatten(1)             # (B, 32 * 2 * 2)
        return self.head(x)


def train(steps: int, device: str, seed: int = 0, batch: int = 32, quiet: bool = True,
          compile: bool = False):
    """Trains for |steps| SGD-with-momentum steps; returns the per-step losses."""
    torch.manual_seed(seed)
    model = CNN().to(device)
    forward = torch.compile(model, backend="tpu") if compile else model  # compile mode
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = blobs(batch * steps, seed)
    losses = []
    for step in range(steps):
        xb, yb = x[step * batch:(step + 1) * batch], y[step * batch:(step + 1) * batch]
        loss = F.cross_entropy(forward(xb.to(device)), yb.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if not quiet:
            print(f"step {step:3d}  loss {losses[-1]:.4f}")
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="tpu")
    args = parser.parse_args()
    losses = train(args.steps, args.device, quiet=False)
    print(f"first loss {losses[0]:.4f}, last loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
