"""torch.tpu: the device module, mirroring torch.cuda where it makes sense.

Registered with torch._register_device_module("tpu", ...) by torchtpu/__init__.py.
Devices are the virtual TPU chips of this process (TORCHTPU_CHIP, TORCHTPU_CHIPS).
"""
from typing import Any

import torch

from torchtpu import _C
from torchtpu import device_amp as amp  # noqa: F401  torch.tpu.amp, as torch.cuda.amp
from torchtpu._device_index import DeviceLike, device_index
from torchtpu.amp import get_amp_supported_dtype, is_bf16_supported  # noqa: F401
from torchtpu.memory import (  # noqa: F401
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from torchtpu.precision import Precision, precision  # noqa: F401
from torchtpu.rng import (  # noqa: F401
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from torchtpu.streams import (  # noqa: F401
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)


# torch.cuda.OutOfMemoryError's counterpart (both are torch.OutOfMemoryError)
OutOfMemoryError = torch.OutOfMemoryError

_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode) -> None:
    """What an op that waits for the chip unasked does, as torch.cuda.set_sync_debug_mode:
    "default" or 0 nothing, "warn" or 1 a warning naming the op, "error" or 2 a RuntimeError
    before the op runs. Such ops: Tensor.item() (and so `if tensor:`, print, and x[mask],
    nonzero or unique, whose result's size is read back), a copy to the host (.cpu(),
    .tolist(), .numpy()), an op the CPU fallback runs, and growing a storage that holds
    data. torch.tpu.synchronize() and Stream/Event synchronize never count, nor do copies
    to the chip (queued on its stream)."""
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError(
                "invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    """0 (default), 1 (warn) or 2 (error): see set_sync_debug_mode."""
    return _C._get_sync_debug_mode()


def is_available() -> bool:
    """True if the virtual TPU runtime is configured and has at least one chip."""
    return _C._device_count() > 0


def device_count() -> int:
    return _C._device_count()


def init() -> None:
    """Initializes the runtime now; raises RuntimeError for a bad TORCHTPU_* setting."""
    _C._init()


def is_initialized() -> bool:
    return _C._is_initialized()


def _is_in_bad_fork() -> bool:
    return _C._is_in_bad_fork()


def current_device() -> int:
    return _C._current_device()


def set_device(device: DeviceLike) -> None:
    _C._set_device(device_index(device, optional=False))


def synchronize(device: DeviceLike = None) -> None:
    """Waits for all work queued on the chip; raises a deferred device error naming the op."""
    _C._synchronize(device_index(device))


class device:
    """Context manager that changes the current device: `with torch.tpu.device(1): ...`."""

    def __init__(self, device: DeviceLike):
        self.idx = -1 if device is None else device_index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C._set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor |obj| current (if on tpu)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.is_tpu else None)


class _DeviceProperties:
    """What torch.tpu.get_device_properties returns: the chip's spec."""

    def __init__(self, props: dict):
        self.__dict__.update(props)
        self.name = f"{props['marketing_name']} (virtual)"

    def __repr__(self) -> str:
        return (f"_TpuDeviceProperties(name='{self.name}', chip='{self.chip}', "
                f"total_memory={self.total_memory // 2**20}MB, "
                f"mxu_count={self.mxu_count}, mxu_dim={self.mxu_dim})")


def get_device_properties(device: DeviceLike = None) -> _DeviceProperties:
    return _DeviceProperties(_C._device_properties(device_index(device)))


def get_device_name(device: DeviceLike = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: DeviceLike = None) -> tuple:
    """The chip generation as (major, minor): v5e -> (5, 0), v5p -> (5, 1), v6e -> (6, 0)."""
    chip = get_device_properties(device).chip
    major = int(chip[1])
    return major, 1 if chip.endswith("p") else 0


def _get_device_index(device: Any, optional: bool = False) -> int:
    return device_index(device, optional=optional)
