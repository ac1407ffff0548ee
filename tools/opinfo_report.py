"""Runs every OpInfo of PyTorch's op_db on tpu (float32 and bfloat16 samples) against CPU
and prints passed / failed / skipped, plus how many passing ops ran fully natively.

Run:  .venv/bin/python tools/opinfo_report.py [--dtypes float32,bfloat16] [--start N] [--limit N]
      [--verbose] (each failure) [--fallbacks] (the ops each passing OpInfo sent to the CPU)
      [--compile] (float32 only: each sample through torch.compile(backend="tpu"), without
      and with grad, the gradients too; see test_compile_opinfo.py)
An op "passes" when every sample matches CPU; "native" when it also used no CPU fallback.
Random ops are skipped (their numbers differ from the CPU's by design), and so are those
with nothing to compare (uninitialized memory, CUDA-only kernels).
"""
import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))

import torch  # noqa: E402
import torchtpu  # noqa: E402
from opinfo_check import op_db, run_sample, run_sample_compiled  # noqa: E402


# Random ops draw from the chip's counter-based generator: same distributions, different
# numbers than the CPU, so they cannot be compared sample by sample.
RANDOM = ("bernoulli", "normal", "uniform", "rand", "multinomial", "dropout", "exponential",
          "geometric", "cauchy", "log_normal", "poisson", "randint", "randperm", "rrelu")
# Ops with nothing to compare: uninitialized memory (empty, empty_like, new_empty, ...) and
# CUDA-only kernels (jiterator_*, which raise on every other device).
UNCOMPARABLE = ("empty", "jiterator")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--start", type=int, default=0,
                        help="skip the first N OpInfos (to split a long run)")
    parser.add_argument("--limit", type=int, default=0, help="run at most N OpInfos")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--trace", action="store_true", help="print each op before running it")
    parser.add_argument("--compile", action="store_true",
                        help="run each float32 sample compiled, gradients included")
    parser.add_argument("--fallbacks", action="store_true",
                        help="print the ops each passing OpInfo sent to the CPU fallback")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torchtpu.set_fallback_mode("silent")
    dtypes = [torch.float32] if args.compile else [getattr(torch, d) for d in args.dtypes.split(",")]
    counts = {"passed": 0, "failed": 0, "skipped": 0, "native": 0}
    start = time.time()
    ops = op_db[args.start:]
    ops = ops[: args.limit] if args.limit else ops
    for op in ops:
        name = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        for dtype in dtypes:
            if dtype not in op.supported_dtypes("cpu") or any(
                    r in op.name for r in RANDOM + UNCOMPARABLE):
                counts["skipped"] += 1
                continue
            torchtpu.reset_fallback_stats()
            if args.trace:
                print(f"RUN {name} {dtype}", flush=True)
            try:
                if args.compile:
                    for grad in (False, True) if op.supports_autograd else (False,):
                        samples = op.sample_inputs("tpu", dtype, requires_grad=grad)
                        for i, sample in enumerate(samples):
                            run_sample_compiled(op, sample, i)
                else:
                    for sample in op.sample_inputs("tpu", dtype, requires_grad=False):
                        run_sample(op, sample, dtype)
                torch.tpu.synchronize()
            except Exception as e:  # noqa: BLE001 - we count every kind of failure
                counts["failed"] += 1
                if args.verbose:
                    print(f"FAIL {name} {dtype}: {type(e).__name__}: {str(e)[:200]}")
                continue
            counts["passed"] += 1
            fell_back = torchtpu.fallback_stats()
            if not fell_back:
                counts["native"] += 1
            elif args.fallbacks:
                print(f"FALLBACK {name} {dtype}: {' '.join(sorted(fell_back))}")
    print(f"op_db[{args.start}:{args.start + len(ops)}]: {len(ops)} OpInfos x {len(dtypes)} dtypes in {time.time() - start:.0f} s")
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
          f"({counts['native']} of the passed ran with no CPU fallback)")


if __name__ == "__main__":
    main()
