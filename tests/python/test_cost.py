# Modelled times of single ops on the virtual TPU (default chip: v5e) against formulas worked
# out by hand from shared/reference/tpu-hardware.md: T = max(FLOPs / peak, bytes / HBM BW)
# + 1.5 us per kernel; MXU dims padded to 8 x 128 x 128; f32 passes 1 / 3 / 6; HBM arrays
# padded to (8,128) tiles ((16,128) for bf16). v5e: 197e12 FLOP/s, 819e9 B/s.
import pytest
import torch

from torchtpu import _C

PEAK, BW, FLOOR = 197e12, 819e9, 1.5e-6


def costs_of(fn):
    """Runs fn with the timeline on; returns [(name, cost on v5e)] of the ops it launched."""
    was = _C._cost_set_detail(True)
    first = _C._cost_timeline_len()
    try:
        fn()
        torch.tpu.synchronize()
        events = _C._cost_timeline(first)
    finally:
        _C._cost_set_detail(was)
    entries = {e["id"]: e for e in _C._cost_entries()}
    return [(name, entries[eid]["cost"][1]) for _d, eid, name, *_ in events if eid]


def only(costs, prefix):
    found = [c for name, c in costs if name.startswith(prefix)]
    assert len(found) == 1, costs
    return found[0]


def test_v5e_is_generation_1():
    assert _C._chip_specs()[1]["name"] == "v5e"
    assert _C._chip_specs()[_C._cost_active_gen()]["name"] == "v5e"


def test_big_bf16_matmul_is_at_the_compute_roof():
    a = torch.randn(2048, 2048, device="tpu").bfloat16()
    b = torch.randn(2048, 2048, device="tpu").bfloat16()
    c = only(costs_of(lambda: a @ b), "aten::mm")
    flops = 2 * 2048 ** 3
    nbytes = 3 * 2048 * 2048 * 2
    assert c["flops"] == flops and c["bytes"] == nbytes
    assert c["seconds"] == pytest.approx(flops / PEAK + FLOOR, rel=1e-9)
    assert c["compute_bound_kernels"] == 1 and c["kernels"] == 1


def test_skinny_bf16_matmul_is_at_the_memory_roof():
    a = torch.randn(8, 4096, device="tpu").bfloat16()
    b = torch.randn(4096, 4096, device="tpu").bfloat16()
    c = only(costs_of(lambda: a @ b), "aten::mm")
    # 8 bf16 rows pad to a 16-row packed tile, for the input and the result
    nbytes = 16 * 4096 * 2 + 4096 * 4096 * 2 + 16 * 4096 * 2
    assert c["bytes"] == nbytes
    assert c["seconds"] == pytest.approx(nbytes / BW + FLOOR, rel=1e-9)
    assert c["compute_bound_kernels"] == 0


def test_f32_highest_costs_six_times_default():
    a = torch.randn(1024, 1024, device="tpu")
    b = torch.randn(1024, 1024, device="tpu")
    d = only(costs_of(lambda: a @ b), "aten::mm")
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        h = only(costs_of(lambda: a @ b), "aten::mm")
    with torch.tpu.precision(torch.tpu.Precision.HIGH):
        hi = only(costs_of(lambda: a @ b), "aten::mm")
    assert d["mxu_seconds"] == pytest.approx(2 * 1024 ** 3 / PEAK, rel=1e-9)
    assert h["mxu_seconds"] == pytest.approx(6 * d["mxu_seconds"], rel=1e-9)
    assert hi["mxu_seconds"] == pytest.approx(3 * d["mxu_seconds"], rel=1e-9)
    assert (d["passes"], hi["passes"], h["passes"]) == (1, 3, 6)


def test_minor_dim_64_moves_as_many_bytes_as_128():
    x64 = torch.randn(4096, 64, device="tpu")
    x128 = torch.randn(4096, 128, device="tpu")
    c64 = only(costs_of(lambda: torch.neg(x64)), "aten::neg")
    c128 = only(costs_of(lambda: torch.neg(x128)), "aten::neg")
    assert c64["bytes"] == c128["bytes"] == 2 * 4096 * 128 * 4   # read + write
    assert c64["bytes"] == 2 * c64["bytes_unpadded"]


def test_clock_advances_by_the_launches_and_records():
    x = torch.randn(256, 256, device="tpu")
    torch.tpu.synchronize()
    before = _C._cost_totals(0)
    costs = costs_of(lambda: torch.exp(x) @ x)
    after = _C._cost_totals(0)
    assert after["launches"] - before["launches"] == len(costs)
    assert after["clock"][1] - before["clock"][1] == pytest.approx(
        sum(c["seconds"] for _, c in costs), rel=1e-9)
    # the hook for work modelled elsewhere (collectives): one time, or one per generation
    _C._cost_record(0, "all_reduce", 2e-3, 0, 1e6)
    _C._cost_record(0, "all_gather", 0.0, 0, 1e6, [1e-3, 2e-3, 3e-3, 4e-3, 5e-3])
    end = _C._cost_totals(0)
    assert end["clock"][1] - after["clock"][1] == pytest.approx(4e-3)
    assert end["clock"][4] - after["clock"][4] == pytest.approx(7e-3)
    with pytest.raises(ValueError):
        _C._cost_record(0, "bad", -1.0)


def test_totals_by_generation_name():
    import torchtpu.report
    t = torchtpu.report.totals(0)
    assert set(t["seconds"]) == {"v4", "v5e", "v5p", "v6e", "v7"}
    assert t["seconds"]["v5e"] == _C._cost_totals(0)["clock"][1] and t["launches"] > 0
