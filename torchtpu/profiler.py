"""Profiling on the virtual TPU: host time from torch.profiler, modelled TPU time from the
cost model (include/tpu/cost.h), in one Chrome trace (opens in Perfetto / chrome://tracing).

    with torchtpu.profiler.profile() as prof:          # or torch.profiler.profile(...)
        loss = model(x).sum(); loss.backward()
    prof.export_chrome_trace("trace.json")
    print(prof.device_table())

The trace has the host lanes torch.profiler records (pid "host") and one lane per chip,
"tpu:N modelled (v5e)": every executable the chip ran, back to back on the chip's modelled
clock (the model assumes the host keeps the chip busy), starting where the profile starts.
Each device event's args carry its FLOPs, HBM bytes and the host time of its launch.

Why not ProfilerActivity.PrivateUse1 alone: torch 2.13 accepts it, but its events come
only from a Kineto IActivityProfiler plugin (torch.profiler's PrivateUse1ProfilerRegistry,
REGISTER_PRIVATEUSE1_PROFILER), which torchtpu does not implement yet. Importing torchtpu
therefore extends torch.profiler.profile itself: any torch.profiler session (CPU and/or
PrivateUse1 activity) records the modelled device events, and export_chrome_trace adds the
device lanes. torchtpu.profiler.profile is torch.profiler.profile with CPU activity by default.
"""
import gzip
import json
from collections import defaultdict
from typing import Dict, List, Optional

import torch
import torch.profiler as _tp

from torchtpu import _C

__all__ = ["profile", "device_events", "chrome_trace_events"]

_ORIGIN = "torchtpu::trace_origin"
_MAX_CHIPS = 64  # TPU_COST_MAX_CHIPS


class _Session:
    """Modelled-device recording between a profiler's start and stop."""

    def __init__(self):
        self.was_detail = _C._cost_set_detail(True)
        self.first = _C._cost_timeline_len()
        # every chip's clock, without initializing the runtime (a CPU-only profile must not
        # create the chips: a later fork would make them unusable in the child)
        self.clock0 = [_C._cost_totals(d)["clock"] for d in range(_MAX_CHIPS)]
        with torch.profiler.record_function(_ORIGIN):
            self.origin_ns = _C._cost_host_ns()
        self.events: Optional[List[tuple]] = None

    @property
    def gen(self) -> str:
        """The generation of the process's chips (known once an op has been compiled)."""
        return _C._chip_specs()[_C._cost_active_gen()]["name"]

    def close(self):
        if self.events is None:
            self.events = _C._cost_timeline(self.first)
            if not self.was_detail:
                _C._cost_set_detail(False)

    def current_events(self):
        return self.events if self.events is not None else _C._cost_timeline(self.first)


def device_events(session: _Session) -> List[dict]:
    """The session's modelled device events: device, name, start/end (s from the session
    start on the chip's modelled clock), flops, bytes, host_ns."""
    out = []
    active = _C._cost_active_gen()
    for dev, _eid, name, start, end, flops, nbytes, host_ns in session.current_events():
        base = session.clock0[dev][active] if dev < len(session.clock0) else 0.0
        out.append({"device": dev, "name": name, "start": start - base, "end": end - base,
                    "flops": flops, "bytes": nbytes, "host_ns": host_ns})
    return out


def chrome_trace_events(session: _Session, origin_us: float) -> List[dict]:
    """Chrome trace events for the device lanes, with the session start at |origin_us|."""
    evs = []
    chips = sorted({e["device"] for e in device_events(session)} | {0})
    for d in chips:
        pid = f"tpu:{d} modelled ({session.gen})"
        evs.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                    "args": {"name": pid}})
        evs.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 0,
                    "args": {"name": "modelled device time"}})
    for e in device_events(session):
        pid = f"tpu:{e['device']} modelled ({session.gen})"
        evs.append({
            "ph": "X", "cat": "tpu_modelled", "name": e["name"], "pid": pid, "tid": 0,
            "ts": origin_us + e["start"] * 1e6, "dur": (e["end"] - e["start"]) * 1e6,
            "args": {"flops": e["flops"], "hbm_bytes": e["bytes"],
                     "host_launch_us": origin_us + (e["host_ns"] - session.origin_ns) / 1e3},
        })
    return evs


def _merge_into(path: str, session: _Session) -> None:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    origin = [e for e in events if e.get("name") == _ORIGIN and e.get("ph") == "X"]
    origin_us = float(origin[0]["ts"]) if origin else min(
        (float(e["ts"]) for e in events if "ts" in e), default=0.0)
    events.extend(chrome_trace_events(session, origin_us))
    with opener(path, "wt") as f:
        json.dump(trace, f)


# ---- torch.profiler.profile, extended -------------------------------------------------------

_orig_start = _tp.profile.start
_orig_stop = _tp.profile.stop
_orig_export = _tp.profile.export_chrome_trace


def _start(self):
    _orig_start(self)
    self._tpu_session = _Session()


def _stop(self):
    _orig_stop(self)
    s = getattr(self, "_tpu_session", None)
    if s is not None:
        s.close()


def _export(self, path):
    out = _orig_export(self, path)
    s = getattr(self, "_tpu_session", None)
    if s is not None:
        _merge_into(path, s)
    return out


def _device_table(self, top: int = 15) -> str:
    """Modelled device time per op name over the profile, largest first."""
    s = getattr(self, "_tpu_session", None)
    if s is None:
        return "(no tpu session)"
    agg: Dict[str, list] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for e in device_events(s):
        a = agg[e["name"]]
        a[0] += 1
        a[1] += e["end"] - e["start"]
        a[2] += e["flops"]
        a[3] += e["bytes"]
    total = sum(a[1] for a in agg.values()) or 1.0
    lines = [f"modelled device time on {s.gen} ({len(agg)} ops)",
             f"{'op':<40} {'calls':>6} {'time':>10} {'share':>6} {'GFLOP':>8} {'MB':>8}"]
    for name, (n, t, fl, b) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"{name[:40]:<40} {n:>6} {t * 1e3:>8.3f}ms {100 * t / total:>5.1f}% "
                     f"{fl / 1e9:>8.3f} {b / 1e6:>8.2f}")
    lines.append(f"{'total':<40} {'':>6} {total * 1e3:>8.3f}ms")
    return "\n".join(lines)


def _device_events(self) -> List[dict]:
    s = getattr(self, "_tpu_session", None)
    return device_events(s) if s is not None else []


_tp.profile.start = _start
_tp.profile.stop = _stop
_tp.profile.export_chrome_trace = _export
_tp.profile.device_table = _device_table
_tp.profile.device_events = _device_events


class profile(_tp.profile):
    """torch.profiler.profile with CPU activity by default, plus modelled TPU lanes."""

    def __init__(self, *args, activities=None, **kwargs):
        if activities is None:
            activities = [_tp.ProfilerActivity.CPU]
        super().__init__(*args, activities=activities, **kwargs)
