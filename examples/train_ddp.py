"""Data-parallel training of the GPT example on virtual TPU chips, one process per chip.

Run:  .venv/bin/torchrun --nproc-per-node 2 examples/train_ddp.py [--mode ddp|fsdp] [--steps 50]
          [--compile]
      .venv/bin/python examples/train_ddp.py        (no torchrun: one process, the reference)

Each process drives one chip (tpu:0 of its own virtual TPU) and joins the process group with
`dist.init_process_group("tpu")`: gradients are averaged through shared memory between the
processes (TORCHTPU_DIST_TRANSPORT=gloo sends them through Gloo instead, as across hosts).
--mode ddp wraps the model in DistributedDataParallel; --mode fsdp shards every parameter with
FSDP2 (`fully_shard`). --compile runs the wrapped model (forward and backward) and the AdamW
step (capturable=True) through torch.compile(backend="tpu"), as a CUDA program would: under DDP,
Dynamo splits the graph at the gradient buckets so each bucket's all-reduce starts as its part
of the backward is done; under FSDP2 the sharding hooks run eagerly between compiled graphs.
The global batch (--batch) is split evenly across the ranks, so the
losses match a one-process run with the same global batch. Rank 0 prints the loss per step, the
time per step and the modelled ICI time of the collectives (torchtpu.distributed.stats()).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_gpt import GPT, get_batch, synthetic_text  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=8, help="global batch, split across ranks")
    p.add_argument("--block", type=int, default=32)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--compile", action="store_true", help='torch.compile(backend="tpu")')
    p.add_argument("--json", action="store_true", help="print one JSON line with the results")
    args = p.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("tpu")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} is not divisible by {world} ranks")
    device = torch.device("tpu", 0)
    torch.tpu.set_device(device)

    vocab = 64
    torch.manual_seed(0)  # the same initial weights on every rank
    model = GPT(vocab, args.block, args.d_model, 4, args.layers).to(device)
    sharded = False
    if distributed and args.mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    elif distributed and args.mode == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("tpu", (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        sharded = all(hasattr(q, "to_local") and q.to_local().numel() < q.numel()
                      for q in model.parameters() if q.numel() >= world)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01,
                            capturable=args.compile)
    forward = torch.compile(model, backend="tpu") if args.compile else model
    opt_step = torch.compile(opt.step, backend="tpu") if args.compile else opt.step

    data = synthetic_text(4096, vocab, 0)
    g = torch.Generator().manual_seed(1)  # every rank draws the same global batch
    local = args.batch // world
    if distributed:
        import torchtpu.distributed as tdist
        tdist.reset_stats()
    losses, times = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        x, y = get_batch(data, args.batch, args.block, g)
        x, y = x[rank * local:(rank + 1) * local], y[rank * local:(rank + 1) * local]
        _, loss = forward(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt_step()
        loss = loss.detach()
        if distributed:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)  # the global batch's loss
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        if rank == 0 and not args.json:
            print(f"step {step + 1:3d}  loss {losses[-1]:.4f}  {times[-1] * 1e3:.1f} ms", flush=True)

    result = {"rank": rank, "world": world, "mode": args.mode if distributed else "single",
              "losses": losses, "step_ms": 1e3 * sorted(times[1:] or times)[len(times[1:] or times) // 2],
              "sharded": sharded}
    if args.compile:  # the graphs the tpu backend compiled and replayed, by kind
        import torchtpu.compile as tc
        result["compiled_graphs"] = {}
        for g in tc.graphs:
            if g.stats()["plans"]:
                result["compiled_graphs"][g.kind] = result["compiled_graphs"].get(g.kind, 0) + 1
    if distributed:
        import torchtpu.distributed as tdist
        backend = dist.distributed_c10d._get_default_group()._get_backend(device)
        result["transport"] = backend.transport
        s = tdist.stats()
        result["modelled_ici_ms"] = 1e3 * s["total"]["modelled_seconds"]
        result["collectives"] = s["total"]["count"]
    if rank == 0:
        if args.json:
            print("@@JSON" + json.dumps(result), flush=True)
        else:
            print(f"median step {result['step_ms']:.1f} ms on {world} process(es)"
                  + (f"; {result['collectives']} collectives over {result['transport']}, modelled "
                     f"ICI time {result['modelled_ici_ms']:.3f} ms" if distributed else ""))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
