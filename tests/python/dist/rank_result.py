# rank_result.py: how a rank script under tests/python/dist/ hands its result to the test.
import json
import os

import torch.distributed as dist


def report(result):
    """The result for the test: a file per rank in $TORCHTPU_TEST_OUT (ranks share one stdout
    pipe, where long lines of two ranks can interleave), else a line on stdout."""
    rank = dist.get_rank()
    out = os.environ.get("TORCHTPU_TEST_OUT")
    if out:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    print("@@OK", rank, json.dumps(result), flush=True)
