"""One training step of the example models, tpu (native eager) vs PyTorch CPU eager.

Run: .venv/bin/python bench/bench_train.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import train_gpt  # noqa: E402

from common import cpu_sync, table, timeit, tpu_sync  # noqa: E402


def gpt_step(device):
    torch.manual_seed(0)
    model = train_gpt.GPT(vocab=64, block_size=32, d_model=64, n_head=4, n_layer=2).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 64, (8, 32)).to(device)
    y = torch.randint(0, 64, (8, 32)).to(device)

    def step():
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


if __name__ == "__main__":
    tc = timeit(gpt_step("cpu"), cpu_sync, min_time=2)
    tt = timeit(gpt_step("tpu"), tpu_sync, min_time=2)
    table("GPT example training step (ms, lower is better)", ["model", "tpu", "cpu", "cpu/tpu"],
          [["GPT 2x64 d, batch 8x32", f"{tt * 1e3:.1f}", f"{tc * 1e3:.1f}", f"{tc / tt:.2f}x"]])
