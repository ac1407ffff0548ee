# collectives.py: every collective of the "tpu" backend against Gloo on CPU, in one process
# group "cpu:gloo,tpu:tpu" (cpu tensors go to Gloo, tpu tensors to the tpu backend).
# Run under torchrun (tests/python/test_distributed.py does, on 2 and 4 processes); prints
# "@@OK <rank> <stats json>" at the end, and raises on the first difference.
import torch
import torch.distributed as dist
import torchtpu.distributed as tdist
from rank_result import report

dist.init_process_group("cpu:gloo,tpu:tpu")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(1234 + rank)
tdist.reset_stats()


def same(tpu_t, cpu_t, what, exact=True):
    got = tpu_t.cpu()
    ok = torch.equal(got, cpu_t) if exact else torch.allclose(got, cpu_t, rtol=1e-3, atol=1e-3)
    assert ok, f"rank {rank}: {what}: tpu {got.flatten()[:8]} vs gloo {cpu_t.flatten()[:8]}"


def pair(shape, dtype=torch.float32):
    # Small integers: exact sums in any order, so tpu and gloo must agree bit for bit.
    c = torch.randint(-8, 8, shape).to(dtype)
    return c.to("tpu"), c.clone()


# all_reduce: every op and several dtypes (sum/avg/min/max/product)
for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.float64):
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT):
        t, c = pair((3, 5), dtype)
        dist.all_reduce(t, op=op)
        dist.all_reduce(c, op=op)
        same(t, c, f"all_reduce {op} {dtype}")
t, c = pair((1000,))
dist.all_reduce(t, op=dist.ReduceOp.AVG)
dist.all_reduce(c, op=dist.ReduceOp.SUM)
same(t, c / world, "all_reduce avg", exact=False)
# a large tensor (several rounds of the shared-memory slots) and a non-contiguous one
t, c = pair((3_000_000,))
dist.all_reduce(t)
dist.all_reduce(c)
same(t, c, "all_reduce 12 MB")
t, c = pair((6, 8))
tv, cv = t.t(), c.t()
dist.all_reduce(tv)
dist.all_reduce(cv)
same(t, c, "all_reduce of a transposed view")

# broadcast from every root
for root in range(world):
    t, c = pair((4, 7))
    dist.broadcast(t, src=root)
    dist.broadcast(c, src=root)
    same(t, c, f"broadcast from {root}")

# all_gather (list) and all_gather_into_tensor
t, c = pair((2, 3))
outs_t = [torch.empty(2, 3, device="tpu") for _ in range(world)]
outs_c = [torch.empty(2, 3) for _ in range(world)]
dist.all_gather(outs_t, t)
dist.all_gather(outs_c, c)
for a, b in zip(outs_t, outs_c):
    same(a, b, "all_gather")
t, c = pair((5,))
ot, oc = torch.empty(5 * world, device="tpu"), torch.empty(5 * world)
dist.all_gather_into_tensor(ot, t)
dist.all_gather_into_tensor(oc, c)
same(ot, oc, "all_gather_into_tensor")

# reduce_scatter (list) and reduce_scatter_tensor
ins = [pair((3, 2)) for _ in range(world)]
ot, oc = torch.empty(3, 2, device="tpu"), torch.empty(3, 2)
dist.reduce_scatter(ot, [a for a, _ in ins])
# Gloo has no list reduce_scatter: the reference is all_reduce + pick.
ref = torch.stack([b for _, b in ins])
dist.all_reduce(ref)
same(ot, ref[rank], "reduce_scatter")
t, c = pair((4 * world, 3))
ot, oc = torch.empty(4, 3, device="tpu"), torch.empty(4, 3)
dist.reduce_scatter_tensor(ot, t)
dist.reduce_scatter_tensor(oc, c)
same(ot, oc, "reduce_scatter_tensor")
dist.reduce_scatter_tensor(ot, t, op=dist.ReduceOp.AVG)
same(ot, oc / world, "reduce_scatter_tensor avg", exact=False)

# all_to_all_single (even and uneven splits) and all_to_all (list)
t, c = pair((2 * world, 3))
ot, oc = torch.empty_like(t), torch.empty_like(c)
dist.all_to_all_single(ot, t)
dist.all_to_all_single(oc, c)
same(ot, oc, "all_to_all_single")
in_splits = [r + 1 for r in range(world)]               # rank sends r+1 rows to rank r
out_splits = [rank + 1] * world                          # and receives rank+1 from each
t, c = pair((sum(in_splits), 2))
ot, oc = torch.empty(sum(out_splits), 2, device="tpu"), torch.empty(sum(out_splits), 2)
dist.all_to_all_single(ot, t, out_splits, in_splits)
dist.all_to_all_single(oc, c, out_splits, in_splits)
same(ot, oc, "all_to_all_single uneven")
ins = [pair((2, 2)) for r in range(world)]             # Gloo's list form needs equal sizes
outs_t = [torch.empty(2, 2, device="tpu") for _ in range(world)]
outs_c = [torch.empty(2, 2) for _ in range(world)]
dist.all_to_all(outs_t, [a for a, _ in ins])
dist.all_to_all(outs_c, [b for _, b in ins])
for a, b in zip(outs_t, outs_c):
    same(a, b, "all_to_all")

# send/recv around a ring, blocking and async, and batch_isend_irecv (coalesced p2p)
nxt, prv = (rank + 1) % world, (rank - 1) % world
t, c = pair((300_000,))                                  # more than one 1 MiB channel chunk
rt, rc = torch.empty_like(t), torch.empty_like(c)
works = [dist.isend(t, nxt), dist.irecv(rt, prv)]
for w in works:
    w.wait()
works = [dist.isend(c, nxt), dist.irecv(rc, prv)]
for w in works:
    w.wait()
same(rt, rc, "isend/irecv ring")
ops = [dist.P2POp(dist.isend, t, nxt), dist.P2POp(dist.irecv, rt, prv)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
same(rt, rc, "batch_isend_irecv")
if rank == 0:
    dist.send(t[:10], 1)
elif rank == 1:
    r = torch.empty(10, device="tpu")
    dist.recv(r, 0)
    assert torch.equal(r.cpu(), rc[:10] if world == 2 else r.cpu()), "blocking send/recv"

# async_op, Work.wait() and get_future(); coalesced all_reduce
t, c = pair((64,))
w = dist.all_reduce(t, async_op=True)
fut = w.get_future()
assert w.wait() is True
vals = fut.wait()
assert isinstance(vals, list) and vals[0].device.type == "tpu", vals
dist.all_reduce(c)
same(t, c, "async all_reduce")
assert w.is_completed() and w.is_success()
ts = [pair((n,)) for n in (3, 5, 7)]
with dist._coalescing_manager(device=torch.device("tpu"), async_ops=True) as cm:
    for a, _ in ts:
        dist.all_reduce(a)
cm.wait()
for a, b in ts:
    dist.all_reduce(b)
    same(a, b, "coalesced all_reduce")

# reduce, gather, scatter (used by DTensor's distribute_tensor)
t, c = pair((6,))
dist.reduce(t, dst=0)
dist.reduce(c, dst=0)
if rank == 0:
    same(t, c, "reduce")
t, c = pair((4,))
gt = [torch.empty(4, device="tpu") for _ in range(world)] if rank == 0 else None
gc = [torch.empty(4) for _ in range(world)] if rank == 0 else None
dist.gather(t, gt, dst=0)
dist.gather(c, gc, dst=0)
if rank == 0:
    for a, b in zip(gt, gc):
        same(a, b, "gather")
src_c = [torch.full((3,), float(10 * r + 1)) for r in range(world)] if rank == 0 else None
src_t = [s.to("tpu") for s in src_c] if rank == 0 else None
ot, oc = torch.empty(3, device="tpu"), torch.empty(3)
dist.scatter(ot, src_t, src=0)
dist.scatter(oc, src_c, src=0)
same(ot, oc, "scatter")

# barrier, objects through the cpu backend, and the functional collectives DTensor uses
dist.barrier()                       # "cpu:gloo,tpu:tpu" sends barriers to Gloo...
dist.barrier(device_ids=[0])         # ...unless a tpu device is named
tpu_only = dist.new_group(backend="tpu")  # a group of the tpu backend alone: cpu tensors too
dist.barrier(group=tpu_only)
t, c = pair((33,))
ct = c.clone()
dist.all_reduce(ct, group=tpu_only)
dist.all_reduce(c)
assert torch.equal(ct, c), "all_reduce of a cpu tensor through the tpu backend"
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank})
assert [o["rank"] for o in objs] == list(range(world))
import torch.distributed._functional_collectives as fc  # noqa: E402
t, c = pair((8,))
ft = fc.all_reduce(t, "sum", dist.group.WORLD)
dist.all_reduce(c)
same(ft, c, "functional all_reduce")
ft = fc.all_gather_tensor(t, 0, dist.group.WORLD)
oc = torch.empty(8 * world)
dist.all_gather_into_tensor(oc, t.cpu())
same(ft, oc, "functional all_gather_tensor")

backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("tpu"))
s = tdist.stats()
assert s["all_reduce"]["count"] > 0 and s["all_reduce"]["modelled_seconds"] > 0, s
report({"transport": backend.transport, "stats": s})
dist.destroy_process_group()
