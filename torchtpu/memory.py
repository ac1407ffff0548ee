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


def memory_summary(device: DeviceLike = None) -> str:
    """A short human-readable table of the chip's memory statistics."""
    stats = memory_stats(device)
    width = max(len(k) for k in stats)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in stats.items())
