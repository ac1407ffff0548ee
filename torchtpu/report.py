"""What would this training script cost on a real TPU?  python -m torchtpu.report

    python -m torchtpu.report [--compare v5e,v6e,v5p] [--top 10] [--plot roofline.png]
                              [--json out.json] SCRIPT [script args...]
    torchtpu.report.run("train.py", ["--steps", "5"], compare=["v5e", "v6e"])  # -> Report

Runs SCRIPT once on the virtual TPU and prints, per generation (and the process's chip
count, TORCHTPU_CHIPS): the modelled step time, model FLOPs utilization, HBM peak against
the chip's capacity (would it OOM?), the top ops by modelled time with their place on the
roofline (arithmetic intensity against the ridge point, compute- or memory-bound), and hints
where padding wastes the MXU. Every number comes from the cost model (include/tpu/cost.h,
formulas and constants from shared/reference/tpu-hardware.md).

One run serves every generation: the graphs the script runs do not depend on the chip, and
each executable is costed on every generation when it is compiled, so each chip keeps one
modelled clock per generation. The run uses the compared generation with the most HBM
(unless TORCHTPU_CHIP is set), so that a model too large for a smaller chip still runs and
is reported as "would OOM" there.

A step is one optimizer.step() (a global optimizer hook) or one torchtpu.report.step() call
in the script; the report averages the steps after the first (which includes one-time work
such as optimizer state creation). With no steps, the whole run counts as one step.
"""
import argparse
import json
import math
import os
import runpy
import sys
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

__all__ = ["run", "step", "totals", "Report", "main"]

GiB = float(1 << 30)
MiB = float(1 << 20)

def _active():
    """The _Recorder of the run() in progress, or None. Kept on the torchtpu package: under
    `python -m torchtpu.report` this file runs as __main__ while the script imports
    torchtpu.report, a second copy of it."""
    import torchtpu
    return getattr(torchtpu, "_report_recorder", None)


def _set_active(rec) -> None:
    import torchtpu
    torchtpu._report_recorder = rec


def step() -> None:
    """Marks the end of a training step (when the script has no optimizer.step())."""
    rec = _active()
    if rec is not None:
        rec.mark(explicit=True)


def totals(device: int = 0) -> dict:
    """Chip |device|'s modelled totals since start: {"seconds": {gen: s}, "flops", "bytes",
    "launches"} (seconds per generation name, e.g. totals()["seconds"]["v5e"])."""
    from torchtpu import _C
    t = _C._cost_totals(device)
    names = [s["name"] for s in _C._chip_specs()]
    return {"seconds": dict(zip(names, t["clock"])), "flops": t["flops"], "bytes": t["bytes"],
            "launches": t["launches"]}


class _Recorder:
    def __init__(self):
        from torchtpu import _C
        self._C = _C
        self.snaps: List[dict] = []
        self.explicit = False
        self.mark(explicit=False)

    def snapshot(self) -> dict:
        C = self._C
        n = C._device_count()
        return {
            "clock": [C._cost_totals(d)["clock"] for d in range(n)],
            "flops": [C._cost_totals(d)["flops"] for d in range(n)],
            "launches": {e["id"]: e["launches"] for e in C._cost_entries()},
        }

    def mark(self, explicit: bool) -> None:
        if explicit and not self.explicit:  # explicit markers win over optimizer steps
            self.explicit = True
            self.snaps = self.snaps[:1]
        if not explicit and self.explicit:
            return
        self.snaps.append(self.snapshot())


class Report:
    """The result of run(): per generation summaries (dicts) and a text rendering."""

    def __init__(self, script, gens, chips, summaries, oom_error, steps_total):
        self.script = script
        self.gens = gens
        self.chips = chips
        self.summaries: Dict[str, dict] = summaries
        self.oom_error = oom_error
        self.steps_total = steps_total

    def to_dict(self) -> dict:
        return {"script": self.script, "chips": self.chips, "steps": self.steps_total,
                "oom_error": self.oom_error, "generations": self.summaries}

    def text(self, top: int = 10) -> str:
        out = []
        if self.oom_error:
            out.append(f"the script ran out of memory: {self.oom_error.splitlines()[0]}")
        if len(self.gens) > 1:
            out.append(self._compare_table())
        for g in self.gens:
            out.append(self._gen_text(self.summaries[g], top))
        return "\n\n".join(out)

    def _compare_table(self) -> str:
        rows = [("", [f"{g} x{self.chips}" for g in self.gens])]
        S = [self.summaries[g] for g in self.gens]
        rows.append(("step time", [f"{s['step_seconds'] * 1e3:.3f} ms" for s in S]))
        rows.append(("MFU", [f"{100 * s['mfu']:.2f}%" for s in S]))
        rows.append(("HBM peak / capacity",
                     [f"{s['hbm_peak'] / MiB:.1f} MiB / {s['hbm_capacity'] / GiB:.0f} GiB" for s in S]))
        rows.append(("fits in HBM", ["yes" if s["fits"] else "NO (would OOM)" for s in S]))
        rows.append(("time MXU/HBM/overhead",
                     ["/".join(f"{100 * s['split'][k]:.0f}%" for k in ("mxu", "hbm", "overhead"))
                      for s in S]))
        base = S[0]["step_seconds"]
        rows.append((f"speed vs {self.gens[0]}", [f"{base / s['step_seconds']:.2f}x" for s in S]))
        w0 = max(len(r[0]) for r in rows)
        w = max(len(c) for r in rows for c in r[1]) + 2
        lines = [f"Modelled on {len(self.gens)} generations ({self.script}, "
                 f"{self.steps_total} steps run):"]
        for name, cells in rows:
            lines.append(f"  {name:<{w0}}" + "".join(f"{c:>{w}}" for c in cells))
        return "\n".join(lines)

    def _gen_text(self, s: dict, top: int) -> str:
        spec = s["spec"]
        lines = [f"== {spec['marketing_name']} x{self.chips} chip{'s' if self.chips > 1 else ''}: "
                 f"{spec['peak_bf16_flops'] / 1e12:.0f} TFLOP/s bf16, "
                 f"{spec['hbm_bytes_per_s'] / 1e9:.0f} GB/s HBM, {spec['hbm_bytes'] / GiB:.0f} GiB, "
                 f"MXU {spec['mxu_count']}x {spec['mxu_dim']}x{spec['mxu_dim']} ==",
                 f"modelled step time  {s['step_seconds'] * 1e3:.3f} ms  ({s['step_note']}; "
                 f"{s['kernels_per_step']:.0f} kernels per step)",
                 f"MFU                 {100 * s['mfu']:.2f}%  ({s['flops_per_step'] / 1e9:.3f} "
                 f"model GFLOP per step over {self.chips} chip(s))",
                 f"HBM peak            {s['hbm_peak'] / MiB:.1f} MiB of {s['hbm_capacity'] / GiB:.0f}"
                 f" GiB ({100 * s['hbm_peak'] / s['hbm_capacity']:.2f}%): "
                 f"{'fits' if s['fits'] else 'WOULD NOT FIT (out of memory)'}",
                 f"time split          MXU-bound {100 * s['split']['mxu']:.0f}%, HBM-bound "
                 f"{100 * s['split']['hbm']:.0f}%, per-kernel overhead "
                 f"{100 * s['split']['overhead']:.0f}%  (ridge point {s['ridge']:.0f} FLOP/B)",
                 f"top ops by modelled time, per step:",
                 f"  {'op':<34}{'calls':>6}{'time':>11}{'share':>7}{'FLOP/B':>9}  roofline"]
        for o in s["ops"][:top]:
            bound = ("overhead-bound" if o["bound"] == "overhead" else f"{o['bound']}-bound")
            calls = f"{o['calls']:.0f}" if abs(o["calls"] - round(o["calls"])) < 1e-9 else \
                f"{o['calls']:.1f}"
            lines.append(f"  {o['name'][:34]:<34}{calls:>6}{o['seconds'] * 1e6:>9.1f}us"
                         f"{100 * o['share']:>6.1f}%{o['intensity']:>9.1f}  {bound}")
        lines.append("hints:")
        lines.extend(f"  - {h}" for h in s["hints"] or ["none: no padding waste found"])
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """Writes a roofline PNG: one roof per generation, one point per executable."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, g in enumerate(self.gens):
            s = self.summaries[g]
            spec = s["spec"]
            c = colors[i % len(colors)]
            xs = [10 ** (k / 10) for k in range(-40, 41)]
            ax.plot(xs, [min(spec["peak_bf16_flops"], x * spec["hbm_bytes_per_s"]) for x in xs],
                    color=c, label=f"{g} roof (ridge {s['ridge']:.0f} FLOP/B)")
            pts = [p for p in s["points"] if p["intensity"] > 0 and p["achieved"] > 0]
            if pts:
                total = sum(p["seconds"] for p in pts) or 1.0
                ax.scatter([p["intensity"] for p in pts], [p["achieved"] for p in pts],
                           s=[10 + 300 * p["seconds"] / total for p in pts], color=c, alpha=0.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)")
        ax.set_ylabel("modelled FLOP/s")
        ax.set_title(f"Roofline: {os.path.basename(self.script)} (point size = share of step)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


# ---- analysis ------------------------------------------------------------------------------

def _hints(gen: str, spec: dict, entries: List[tuple], step_s: float, split: dict) -> List[str]:
    """entries: (entry, calls per step). Concrete hints where padding, precision, kernel
    count or batch size waste the chip (tile sizes and ridge point from the chip table)."""
    t = spec["mxu_dim"]
    ridge = spec["peak_bf16_flops"] / spec["hbm_bytes_per_s"]
    out = []
    waste: Dict[tuple, list] = defaultdict(lambda: [0.0, 0.0])  # key -> [waste s, efficiency]
    passes_time = mxu_op_time = mxu_op_flops = mxu_op_bytes = 0.0
    for e, calls in entries:
        c = e["cost"][spec["index"]]
        if c["passes"] > 1:
            passes_time += c["mxu_seconds"] * calls * (1 - 1 / c["passes"])
        if c["mxu_kernels"]:
            mxu_op_time += c["seconds"] * calls
            mxu_op_flops += c["flops"] * calls
            mxu_op_bytes += c["bytes"] * calls
        if c["pad_waste_flops"] <= 0 or c["mxu_flops"] <= 0:
            continue
        frac = c["pad_waste_flops"] / c["mxu_flops"]
        w = waste[(e["name"], c["pad_m"], c["pad_k"], c["pad_n"])]
        w[0] += c["mxu_seconds"] * frac * calls
        w[1] = 1 - frac
    small = False
    for (name, m, k, n), (ws, eff) in sorted(waste.items(), key=lambda kv: -kv[1][0])[:3]:
        pads = [f"{d}={v} pads to {math.ceil(v / q) * q}" for d, v, q in
                (("M", m, 8), ("K", k, t), ("N", n, t)) if v % q]
        if not pads:
            continue
        small = small or k < t or n < t
        out.append(f"{name} [M={m}, K={k}, N={n}]: MXU {100 * eff:.0f}% utilised "
                   f"({', '.join(pads)})")
    if out:
        total = sum(w[0] for w in waste.values())
        advice = (f"dims below {t} cannot fill the {t}x{t} MXU of {gen}: use attention head_dim "
                  f"{t} and hidden/FFN/vocab sizes that are multiples of {t}" if small else
                  f"make hidden/FFN/vocab sizes multiples of {t}")
        if t == 128:
            advice += " (256 is safe on every generation)"
        out.append(f"{advice}; MXU padding costs {100 * total / step_s:.1f}% of this step "
                   f"(more as the model grows and MXU time dominates)")
    if passes_time > 0.05 * step_s:
        out.append(f"f32 matmuls at HIGH/HIGHEST precision take 3x/6x the MXU passes "
                   f"({100 * passes_time / step_s:.0f}% of the step is extra passes): use bf16 "
                   f"(autocast) or DEFAULT precision where accuracy allows")
    if split["overhead"] > 0.5:
        out.append(f"{100 * split['overhead']:.0f}% of the step is the ~1.5 us fixed cost of "
                   f"{'many small kernels'}: fuse them (torch.compile(model, backend='tpu') or "
                   f"TORCHTPU_EAGER=fused) and give each kernel more work (a larger batch)")
    if mxu_op_bytes > 0 and mxu_op_time > 0.1 * step_s:
        ai = mxu_op_flops / mxu_op_bytes
        if ai < ridge:
            out.append(f"matmuls run at {ai:.0f} FLOP/byte, below the {gen} ridge point "
                       f"({ridge:.0f}): they are memory-bound; bf16 operands (autocast) halve "
                       f"their bytes and more tokens per chip per step raise their FLOP/byte")
    return out


def _analyze(rec: _Recorder, gens: Sequence[str], oom_error: Optional[str], script: str) -> Report:
    from torchtpu import _C
    import torch
    specs = _C._chip_specs()
    by_name = {s["name"]: dict(s, index=i) for i, s in enumerate(specs)}
    final = rec.snapshot()
    snaps = rec.snaps
    k = len(snaps) - 1  # steps marked; work after the last step (evaluation) is left out
    if k >= 2:
        a, b, n_steps_used = snaps[1], snaps[k], k - 1
        note = f"mean of steps 2-{k} of {k}"
    elif k == 1:
        a, b, n_steps_used = snaps[0], snaps[1], 1
        note = "the only step"
    else:
        a, b, n_steps_used = snaps[0], final, 1
        note = "no optimizer.step() or report.step(): the whole run as one step"
    chips = len(final["clock"])
    entries = {e["id"]: e for e in _C._cost_entries()}
    per_step = []
    for eid, e in entries.items():
        calls = (b["launches"].get(eid, 0) - a["launches"].get(eid, 0)) / n_steps_used
        if calls > 0:
            per_step.append((e, calls))
    peak = max(torch.tpu.max_memory_allocated(d) for d in range(chips))
    summaries = {}
    for g in gens:
        spec = by_name[g]
        gi = spec["index"]
        step_s = max(b["clock"][d][gi] - a["clock"][d][gi] for d in range(chips)) / n_steps_used
        flops = sum(b["flops"][d] - a["flops"][d] for d in range(chips)) / n_steps_used
        step_s = max(step_s, 1e-30)
        ops: Dict[str, dict] = {}
        split = {"mxu": 0.0, "hbm": 0.0, "overhead": 0.0}
        points = []
        kernels = 0.0
        for e, calls in per_step:
            c = e["cost"][gi]
            kernels += c["kernels"] * calls / chips
            o = ops.setdefault(e["name"], {"name": e["name"], "calls": 0.0, "seconds": 0.0,
                                          "flops": 0.0, "bytes": 0.0, "mxu": 0.0, "hbm": 0.0,
                                          "overhead": 0.0})
            o["calls"] += calls / chips
            o["seconds"] += c["seconds"] * calls / chips
            o["flops"] += (c["flops"] + c["vpu_flops"]) * calls / chips
            o["bytes"] += c["bytes"] * calls / chips
            body = c["seconds"] - c["overhead_seconds"]
            o["overhead"] += c["overhead_seconds"] * calls / chips
            if c["mxu_seconds"] >= c["hbm_seconds"]:
                o["mxu"] += body * calls / chips
            else:
                o["hbm"] += body * calls / chips
            points.append({"name": e["name"], "intensity": (c["flops"] + c["vpu_flops"]) /
                           max(c["bytes"], 1.0), "achieved": (c["flops"] + c["vpu_flops"]) /
                           max(c["seconds"], 1e-30), "seconds": c["seconds"] * calls})
        for o in ops.values():
            split["mxu"] += o["mxu"]
            split["hbm"] += o["hbm"]
            split["overhead"] += o["overhead"]
            o["share"] = o["seconds"] / step_s
            o["intensity"] = o["flops"] / max(o["bytes"], 1.0)
            parts = {"mxu": o["mxu"], "memory": o["hbm"], "overhead": o["overhead"]}
            o["bound"] = {"mxu": "compute", "memory": "memory", "overhead": "overhead"}[
                max(parts, key=parts.get)]
        tot = sum(split.values()) or 1.0
        split = {k: v / tot for k, v in split.items()}
        summaries[g] = {
            "spec": spec, "step_seconds": step_s, "step_note": note,
            "flops_per_step": flops,
            "mfu": flops / (step_s * spec["peak_bf16_flops"] * chips),
            "hbm_peak": peak, "hbm_capacity": spec["hbm_bytes"],
            "fits": peak <= spec["hbm_bytes"] and not oom_error,
            "ridge": spec["peak_bf16_flops"] / spec["hbm_bytes_per_s"],
            "split": split, "kernels_per_step": kernels,
            "ops": sorted(ops.values(), key=lambda o: -o["seconds"]),
            "points": points,
            "hints": _hints(g, spec, per_step, step_s, split),
        }
    return Report(script, list(gens), chips, summaries, oom_error, len(rec.snaps) - 1)


# ---- running a script ------------------------------------------------------------------------

def run(script: str, args: Sequence[str] = (), compare: Optional[Sequence[str]] = None) -> Report:
    """Runs |script| with |args| in this process and returns its Report for the generations
    in |compare| (default: the process's generation)."""
    import torch
    import torchtpu  # noqa: F401
    from torchtpu import _C
    specs = [s["name"] for s in _C._chip_specs()]
    marketing = {s["marketing_name"]: s["name"] for s in _C._chip_specs()}
    active = marketing.get(torch.tpu.get_device_properties(0).name.split(" (")[0], specs[1])
    gens = list(compare) if compare else [os.environ.get("TORCHTPU_CHIP") or active]
    for g in gens:
        if g not in specs:
            raise ValueError(f"unknown TPU generation {g!r}; valid: {', '.join(specs)}")
    was_detail = _C._cost_set_detail(True)
    for d in range(_C._device_count()):
        torch.tpu.reset_peak_memory_stats(d)
    if _active() is not None:
        raise RuntimeError("torchtpu.report.run: a report is already running")
    rec = _Recorder()
    _set_active(rec)
    from torch.optim.optimizer import register_optimizer_step_post_hook
    handle = register_optimizer_step_post_hook(
        lambda *a, **k: rec.mark(explicit=False))
    argv = sys.argv
    sys.argv = [script] + list(args)
    oom = None
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    except torch.OutOfMemoryError as e:
        oom = str(e)
    finally:
        sys.argv = argv
        handle.remove()
        _set_active(None)
        _C._cost_set_detail(was_detail)
    return _analyze(rec, gens, oom, script)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torchtpu.report",
                                description=__doc__.splitlines()[0])
    p.add_argument("--compare", help="generations side by side, e.g. v5e,v6e,v5p")
    p.add_argument("--top", type=int, default=10, help="ops listed per generation")
    p.add_argument("--plot", help="write a roofline PNG here")
    p.add_argument("--json", help="write the report as JSON here")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    compare = [g.strip() for g in a.compare.split(",")] if a.compare else None
    if compare and "TORCHTPU_CHIP" not in os.environ:
        # run on the compared chip with the most HBM, so the largest one decides whether
        # the script can run at all (the others report "would OOM")
        os.environ["TORCHTPU_CHIP"] = max(compare, key=_hbm_of)
    sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
    rep = run(a.script, a.args, compare)
    print(rep.text(a.top))
    if a.plot:
        rep.plot(a.plot)
        print(f"\nroofline plot written to {a.plot}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep.to_dict(), f, indent=1, default=str)
    return 0


def _hbm_of(gen: str) -> float:
    from torchtpu import _C
    for s in _C._chip_specs():
        if s["name"] == gen:
            return s["hbm_bytes"]
    return 0.0


if __name__ == "__main__":
    sys.exit(main())
