"""torch.tpu memory statistics, with torch.cuda's names and keys.

Each chip has a caching allocator over its HBM arena (src/vtpu/caching_allocator.c):
"allocated" counts bytes in live tensors' blocks, "reserved" adds the blocks kept in the
cache; empty_cache() returns cached blocks to the arena (and their pages to the host).
"""
from collections import OrderedDict
from typing import Any, Dict

from torchtpu import _C
from torchtpu._device_index import DeviceLike, device_index


def memory_stats(device: DeviceLike = None) -> Dict[str, Any]:
    """The chip's allocator statistics under torch.cuda.memory_stats keys."""
    raw = _C._memory_stats(device_index(device))
    stats = {
        "allocated_bytes.all.current": raw["allocated_bytes"],
        "allocated_bytes.all.peak": raw["allocated_bytes_peak"],
        "reserved_bytes.all.current": raw["reserved_bytes"],
        "reserved_bytes.all.peak": raw["reserved_bytes_peak"],
        "requested_bytes.all.current": raw["requested_bytes"],
        "active.all.current": raw["active_blocks"],
        "inactive_split.all.current": raw["cached_blocks"],
        "allocation.all.allocated": raw["alloc_count"],
        "allocation.all.freed": raw["free_count"],
        "num_alloc_retries": raw["cache_flushes"],
        "num_ooms": raw["num_ooms"],
        "num_cache_hits": raw["cache_hits"],
        "num_device_alloc": raw["arena_allocs"],
        "hbm_capacity_bytes": raw["capacity_bytes"],
    }
    return OrderedDict(sorted(stats.items()))


def memory_allocated(device: DeviceLike = None) -> int:
    return _C._memory_stats(device_index(device))["allocated_bytes"]


def max_memory_allocated(device: DeviceLike = None) -> int:
    return _C._memory_stats(device_index(device))["allocated_bytes_peak"]


def memory_reserved(device: DeviceLike = None) -> int:
    return _C._memory_stats(device_index(device))["reserved_bytes"]


def max_memory_reserved(device: DeviceLike = None) -> int:
    return _C._memory_stats(device_index(device))["reserved_bytes_peak"]


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(device_index(device))


def reset_max_memory_allocated(device: DeviceLike = None) -> None:
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Returns every chip's cached blocks to its HBM arena."""
    _C._empty_cache()


def mem_get_info(device: DeviceLike = None) -> tuple:
    """(free, total) bytes of the chip's HBM, as torch.cuda.mem_get_info."""
    raw = _C._memory_stats(device_index(device))
    return raw["capacity_bytes"] - raw["reserved_bytes"], raw["capacity_bytes"]


def set_per_process_memory_fraction(fraction: float, device: DeviceLike = None) -> None:
    """Caps what this process may reserve on the chip at fraction x its HBM, as
    torch.cuda's: an allocation past the cap releases the cached blocks, then raises
    torch.OutOfMemoryError naming the cap. Already reserved memory is kept; 1.0 lifts it."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    index = device_index(device)
    capacity = _C._memory_stats(index)["capacity_bytes"]
    _C._set_memory_limit(index, int(fraction * capacity))


def get_per_process_memory_fraction(device: DeviceLike = None) -> float:
    """The fraction of the chip's HBM this process may reserve (1.0 unless capped)."""
    index = device_index(device)
    return _C._memory_limit(index) / _C._memory_stats(index)["capacity_bytes"]


def memory_summary(device: DeviceLike = None) -> str:
    """A short human-readable table of the chip's memory statistics."""
    stats = memory_stats(device)
    width = max(len(k) for k in stats)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in stats.items())
