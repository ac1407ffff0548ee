# faults.py: what the other ranks see when one rank dies, stalls or passes a wrong shape.
# Launched by tests/python/test_distributed.py with RANK/WORLD_SIZE/MASTER_* set directly (not
# torchrun: its agent would SIGTERM the survivors itself as soon as one worker dies, hiding
# the backend's own error). argv[1] is the mode:
#   kill      DDP training; rank 1 SIGKILLs itself at step 3.
#   stall     DDP training; rank 1 sleeps for a minute at step 3.
#   mismatch  all_reduce with a shape that depends on the rank, then a barrier.
# A surviving rank prints "@@ERR <exception type>|<seconds waited>|<message>" and exits 3.
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "examples"))
from train_gpt import GPT, get_batch, synthetic_text  # noqa: E402

mode = sys.argv[1]
dist.init_process_group("tpu")
rank, world = dist.get_rank(), dist.get_world_size()


def report(e, t0):
    msg = str(e).replace("\n", " ")
    print(f"@@ERR {type(e).__name__}|{time.perf_counter() - t0:.2f}|{msg}", flush=True)
    sys.exit(3)


if mode == "mismatch":
    t0 = time.perf_counter()
    try:
        dist.all_reduce(torch.ones(4 + rank, 3, device="tpu"))
    except Exception as e:  # noqa: BLE001
        try:
            dist.barrier()
        except Exception as later:  # noqa: BLE001
            assert "unusable after an earlier error" in str(later), later
            report(e, t0)
        raise SystemExit("the group still worked after a mismatch")
    raise SystemExit("no error for mismatched shapes")

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(GPT(64, 16, 32, 2, 1).to("tpu"))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = synthetic_text(1024, 64, 0)
g = torch.Generator().manual_seed(rank)
for step in range(1, 1000):
    if step == 3 and rank == 1:
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    t0 = time.perf_counter()
    try:
        x, y = get_batch(data, 2, 16, g)
        _, loss = model(x.to("tpu"), y.to("tpu"))
        loss.backward()
        opt.step()
        loss.item()
    except Exception as e:  # noqa: BLE001
        report(e, t0)
raise SystemExit("training went on without rank 1")
