#!/usr/bin/env python3
"""run_c_tests.py: runs the C test binaries given as arguments and totals their results.

Each binary's output is streamed as it runs; its last "N passed, N failed" line is
its result. Prints "C tests: N passed, N failed" at the end and exits non-zero if
any binary failed, crashed, timed out or printed no summary line.

    python3 tests/c/run_c_tests.py build/release/tests/test_status ...
"""
import os
import re
import subprocess
import sys
import threading

SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed\s*$")
TIMEOUT_S = 300


def run_one(path):
    """Runs one binary; returns (passed, failed, problem or None)."""
    name = os.path.basename(path)
    print(f"== {name}", flush=True)
    try:
        proc = subprocess.Popen([path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", bufsize=1)
    except OSError as e:
        return 0, 0, f"cannot run: {e}"
    timer = threading.Timer(TIMEOUT_S, proc.kill)
    timer.start()
    summary = None
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            m = SUMMARY.match(line)
            if m:
                summary = (int(m.group(1)), int(m.group(2)))
        rc = proc.wait()
    finally:
        timer.cancel()
    if summary is None:
        return 0, 0, f"no summary line (exit code {rc})"
    passed, failed = summary
    if rc < 0:
        return passed, failed, f"killed by signal {-rc}"
    if rc != 0 and failed == 0:
        return passed, failed, f"exit code {rc} with no failed test (sanitizer report?)"
    if rc != 0 or failed:
        return passed, failed, f"{failed} failed (exit code {rc})"
    return passed, failed, None


def main(argv):
    if not argv:
        print("usage: run_c_tests.py TEST_BINARY...", file=sys.stderr)
        return 2
    total_passed = total_failed = 0
    problems = []
    for path in argv:
        passed, failed, problem = run_one(path)
        total_passed += passed
        total_failed += failed
        if problem:
            problems.append(f"{os.path.basename(path)}: {problem}")
    for p in problems:
        print(f"PROBLEM {p}")
    print(f"C tests: {total_passed} passed, {total_failed} failed")
    return 1 if problems or total_failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
