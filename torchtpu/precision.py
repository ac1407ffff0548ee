"""Matmul precision on the (virtual) TPU: how float32 matmuls and convolutions use the MXU.

The MXU multiplies bfloat16 and accumulates in float32. For float32 operands:
  Precision.DEFAULT  one bf16 pass (inputs rounded to bf16): the TPU default, fastest
  Precision.HIGH     three bf16 passes (about 16 mantissa bits)
  Precision.HIGHEST  six bf16 passes (about float32)
bfloat16 operands always take one pass. Names follow TorchTPU:

    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        y = x @ w
    torchtpu.set_matmul_precision("highest")      # process-wide: "default" | "high" | "highest"

TORCHTPU_MATMUL_PRECISION=default|high|highest sets the starting value.
The setting is process-wide (like torch.backends' flags), so the backward pass, which
autograd runs on its own threads, uses it too; the context manager restores it on exit.
torch.set_float32_matmul_precision maps onto it when called: "highest" -> HIGHEST,
"high" -> HIGH, "medium" -> DEFAULT. Until someone calls either, the precision is DEFAULT,
as on a TPU (PyTorch's own default, "highest", is not applied implicitly).
"""
import enum
import functools

import torch

from torchtpu import _C


class Precision(enum.IntEnum):
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


_BY_NAME = {"default": Precision.DEFAULT, "high": Precision.HIGH, "highest": Precision.HIGHEST}
_FROM_TORCH = {"medium": Precision.DEFAULT, "high": Precision.HIGH, "highest": Precision.HIGHEST}


def set_matmul_precision(precision) -> None:
    """Sets the process-wide precision: "default", "high", "highest" or a Precision."""
    if isinstance(precision, str):
        if precision.lower() not in _BY_NAME:
            raise ValueError(f"matmul precision must be one of default, high, highest; got {precision!r}")
        precision = _BY_NAME[precision.lower()]
    _C._set_precision(int(Precision(precision)))


def get_matmul_precision() -> str:
    return Precision(_C._get_precision()).name.lower()


class precision:
    """Context manager (and decorator) setting the precision while it is active."""

    def __init__(self, value):
        self.value = Precision(_BY_NAME[value.lower()] if isinstance(value, str) else value)
        self.prev = Precision.DEFAULT

    def __enter__(self):
        self.prev = _C._get_precision()
        _C._set_precision(int(self.value))
        return self

    def __exit__(self, *exc):
        _C._set_precision(int(self.prev))
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with precision(self.value):
                return fn(*args, **kwargs)
        return wrapped


def _hook_torch_precision() -> None:
    """torch.set_float32_matmul_precision also sets the tpu precision."""
    original = torch.set_float32_matmul_precision
    if getattr(original, "_torchtpu_hooked", False):
        return

    @functools.wraps(original)
    def set_float32_matmul_precision(value: str) -> None:
        original(value)
        if isinstance(value, str) and value in _FROM_TORCH:
            _C._set_precision(int(_FROM_TORCH[value]))

    set_float32_matmul_precision._torchtpu_hooked = True
    torch.set_float32_matmul_precision = set_float32_matmul_precision


def _precision_from_env() -> None:
    import os
    value = os.environ.get("TORCHTPU_MATMUL_PRECISION", "")
    if value:
        if value.lower() not in _BY_NAME:
            raise ValueError(f"TORCHTPU_MATMUL_PRECISION={value!r}: expected default, high or highest")
        set_matmul_precision(value)


_hook_torch_precision()
_precision_from_env()
