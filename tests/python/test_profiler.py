# The Chrome trace from torchtpu.profiler / torch.profiler: valid JSON, host lanes from
# torch.profiler and one modelled-device lane per chip.
import json

import torch
from torch.profiler import ProfilerActivity

import torchtpu.profiler


def step(model, x):
    loss = model(x).square().mean()
    loss.backward()
    torch.tpu.synchronize()


def check_trace(path, model_ops=("aten::addmm", "aten::mm")):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    device = [e for e in events if e.get("cat") == "tpu_modelled"]
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") != "tpu_modelled"]
    assert host and device
    assert {e["pid"] for e in device} == {"tpu:0 modelled (v5e)"}
    names = {e["name"].split(".")[0] for e in device}
    assert any(op in names for op in model_ops), names
    assert all(e["dur"] > 0 for e in device)
    # back to back on the chip's modelled clock
    d = sorted(device, key=lambda e: e["ts"])
    for a, b in zip(d, d[1:]):
        assert abs(a["ts"] + a["dur"] - b["ts"]) < 1e-3
    lanes = [e for e in events if e.get("ph") == "M" and e.get("name") == "process_name"]
    assert any(e["args"]["name"] == "tpu:0 modelled (v5e)" for e in lanes)
    return host, device


def test_torchtpu_profile_exports_host_and_device_lanes(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 8)).to("tpu")
    x = torch.randn(32, 64, device="tpu")
    step(model, x)  # compile outside the profile
    with torchtpu.profiler.profile() as prof:
        step(model, x)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    host, device = check_trace(path)
    # the device lane starts with the profile, after the origin marker on the host
    origin = [e for e in host if e["name"] == "torchtpu::trace_origin"]
    assert len(origin) == 1 and min(e["ts"] for e in device) >= origin[0]["ts"] - 1e-3
    assert "aten::" in prof.device_table()
    evs = prof.device_events()
    assert len(evs) == len(device) and all(e["flops"] >= 0 for e in evs)


def test_torch_profiler_gets_the_device_lanes_too(tmp_path):
    model = torch.nn.Linear(32, 32).to("tpu")
    x = torch.randn(16, 32, device="tpu")
    step(model, x)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU,
                                            ProfilerActivity.PrivateUse1]) as prof:
        step(model, x)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    check_trace(path)

