"""torch.tpu.amp: the torch.cuda.amp spellings, for code written for CUDA.

`torch.cuda.amp.autocast()` becomes `torch.tpu.amp.autocast()`, and so on for GradScaler,
custom_fwd and custom_bwd. Each is the device-generic torch.amp object for "tpu", and, as
torch.cuda.amp does, warns (FutureWarning) that the torch.amp spelling is the current one.
One difference from CUDA: autocast's dtype defaults to the tpu's autocast dtype, bfloat16
(torchtpu/amp.py), not float16.
"""
import warnings
from typing import Optional

import torch


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"`torch.tpu.amp.{old}` is deprecated. Please use `{new}` instead.",
                  FutureWarning, stacklevel=3)


class autocast(torch.amp.autocast_mode.autocast):
    """torch.autocast("tpu", ...): see torch.autocast."""

    def __init__(self, enabled: bool = True, dtype: Optional[torch.dtype] = None,
                 cache_enabled: bool = True):
        _deprecated("autocast(args...)", "torch.amp.autocast('tpu', args...)")
        super().__init__("tpu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler("tpu", ...): see torch.amp.GradScaler."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        _deprecated("GradScaler(args...)", "torch.amp.GradScaler('tpu', args...)")
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


def custom_fwd(fwd=None, *, cast_inputs: Optional[torch.dtype] = None):
    """torch.amp.custom_fwd(device_type="tpu"): see torch.amp.custom_fwd."""
    _deprecated("custom_fwd(args...)", "torch.amp.custom_fwd(args..., device_type='tpu')")
    return torch.amp.custom_fwd(fwd, device_type="tpu", cast_inputs=cast_inputs)


def custom_bwd(bwd):
    """torch.amp.custom_bwd(device_type="tpu"): see torch.amp.custom_bwd."""
    _deprecated("custom_bwd(args...)", "torch.amp.custom_bwd(args..., device_type='tpu')")
    return torch.amp.custom_bwd(bwd, device_type="tpu")
