"""Runs every benchmark in bench/ and prints their tables (the README's numbers).

Run: make bench   (or .venv/bin/python bench/run_all.py)
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

for script in ("bench_ops.py", "bench_train.py", "bench_modes.py", "bench_disk_cache.py",
               "bench_dist.py", "bench_fft.py"):
    subprocess.run([sys.executable, os.path.join(HERE, script)], check=True, cwd=HERE)
