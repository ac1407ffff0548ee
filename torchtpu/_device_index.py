"""Turns the device arguments torch.tpu functions accept into a chip index."""
from typing import Optional, Union

import torch

DeviceLike = Optional[Union[int, str, torch.device]]


def device_index(device: DeviceLike = None, *, optional: bool = True) -> int:
    """None (if optional) -> the current device; 3, "tpu:3", torch.device("tpu", 3) -> 3;
    "tpu" or torch.device("tpu") -> the current device."""
    from torchtpu import _C

    if device is None:
        if not optional:
            raise ValueError("a tpu device is required")
        return _C._current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return _C._current_device() if device.index is None else device.index
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise TypeError(f"expected a tpu device (int, str or torch.device), got {device!r}")
