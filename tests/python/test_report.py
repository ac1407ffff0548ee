# python -m torchtpu.report and torchtpu.report.run: step time, MFU, HBM against capacity,
# top ops and hints on the GPT example; a step time checked against the formula; the
# largest live tensors named in out-of-memory errors.
import json
import os
import subprocess
import sys

import pytest
import torch

import torchtpu.report
from conftest import run_json, subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT = os.path.join(ROOT, "examples", "train_gpt.py")


def test_report_on_the_gpt_example_compares_generations(tmp_path):
    js, png = tmp_path / "r.json", tmp_path / "roof.png"
    res = subprocess.run(
        [sys.executable, "-m", "torchtpu.report", "--compare", "v5e,v6e,v5p", "--top", "6",
         "--json", str(js), "--plot", str(png), GPT, "--steps", "3", "--plot", ""],
        env=subprocess_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    for g in ("TPU v5e", "TPU v6e", "TPU v5p"):
        assert g in out
    assert "modelled step time" in out and "MFU" in out and "hints:" in out
    assert "aten::mm" in out or "aten::bmm" in out
    assert "would OOM" not in out
    rep = json.load(open(js))
    assert rep["steps"] == 3
    gens = rep["generations"]
    for g in ("v5e", "v6e", "v5p"):
        s = gens[g]
        assert s["step_seconds"] > 0 and 0 < s["mfu"] < 1 and s["fits"]
        assert s["hbm_peak"] > 0
        names = [o["name"] for o in s["ops"]]
        assert any(n.startswith(("aten::mm", "aten::bmm", "aten::addmm")) for n in names)
        # the op times add up to the step (no collectives here)
        assert sum(o["seconds"] for o in s["ops"]) == pytest.approx(s["step_seconds"], rel=1e-6)
        # head dim 16 and d_model 64 are below the MXU size: the report says so
        assert any("MXU" in h and "pads to" in h for h in s["hints"])
    assert gens["v5p"]["step_seconds"] < gens["v5e"]["step_seconds"]
    assert png.stat().st_size > 10000


def test_step_time_of_one_matmul_per_step_matches_the_formula(tmp_path):
    script = tmp_path / "mm.py"
    script.write_text(
        "import torch, torchtpu.report\n"
        "a = torch.randn(2048, 2048, device='tpu').bfloat16()\n"
        "b = torch.randn(2048, 2048, device='tpu').bfloat16()\n"
        "for _ in range(3):\n"
        "    c = a @ b\n"
        "    torchtpu.report.step()\n"
        "print(c.float().sum().item() != 0)\n")
    rep = torchtpu.report.run(str(script), compare=["v5e", "v6e"])
    flops = 2 * 2048 ** 3
    v5e, v6e = rep.summaries["v5e"], rep.summaries["v6e"]
    assert v5e["step_seconds"] == pytest.approx(flops / 197e12 + 1.5e-6, rel=1e-9)
    assert v6e["step_seconds"] == pytest.approx(flops / 918e12 + 1.5e-6, rel=1e-9)
    assert v5e["mfu"] == pytest.approx(flops / (v5e["step_seconds"] * 197e12), rel=1e-9)
    assert v5e["ops"][0]["name"].startswith("aten::mm") and v5e["ops"][0]["bound"] == "compute"
    assert "mean of steps 2-3" in v5e["step_note"]
    assert "TPU v6e" in rep.text()


def test_report_says_which_generation_would_run_out_of_memory(tmp_path):
    script = tmp_path / "big.py"
    script.write_text(
        "import torch, torchtpu.report\n"
        "w = torch.empty(20 * 2**30, dtype=torch.uint8, device='tpu')\n"
        "w[:16].fill_(1)\n"
        "torchtpu.report.step()\n")
    js = tmp_path / "r.json"
    res = subprocess.run(
        [sys.executable, "-m", "torchtpu.report", "--compare", "v5e,v5p", "--json", str(js),
         str(script)], env=subprocess_env(), cwd=ROOT, capture_output=True, text=True,
        timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = json.load(open(js))
    assert rep["steps"] == 1   # the script's torchtpu.report.step() reached the CLI's run
    gens = rep["generations"]
    assert not gens["v5e"]["fits"] and gens["v5p"]["fits"]   # 16 GiB vs 95 GiB
    assert "WOULD NOT FIT" in res.stdout and "NO (would OOM)" in res.stdout


def test_out_of_memory_error_names_the_largest_tensors_and_their_ops():
    msg = run_json("""
        import torch
        big = torch.empty(6 * 2**30, dtype=torch.uint8, device="tpu")
        x = torch.zeros(2**24, device="tpu")          # 64 MiB
        y = x + 1                                     # 64 MiB
        w = torch.randn(1000, 1000, device="tpu")
        try:
            torch.empty(12 * 2**30, dtype=torch.uint8, device="tpu")
            emit("no error")
        except torch.OutOfMemoryError as e:
            emit(str(e))
    """)
    assert "out of memory: tried to allocate 12.00 GiB" in msg
    assert "Largest live tensors on tpu:0:" in msg
    lines = msg.split("Largest live tensors on tpu:0:")[1].strip().splitlines()
    assert lines[0].split() [:3] == ["6.00", "GiB", "Byte[6442450944]"]
    assert "64.00 MiB  Float[16777216]  created by aten::add" in msg
    assert "64.00 MiB  Float[16777216]  created by aten::zero_" in msg
    assert "Float[1000, 1000]  created by aten::normal_" in msg
