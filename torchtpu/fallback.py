"""The CPU fallback's controls: ops without a native tpu kernel run on the CPU.

Modes (TORCHTPU_FALLBACK, or set_fallback_mode):
  warn    (default) run on the CPU, warn once per op by name
  silent  run on the CPU without warnings
  error   raise NotImplementedError naming the op
Every fallback call is counted per op: fallback_stats() -> {"aten::op.overload": calls}.
"""
import os

from torchtpu import _C

_MODES = {"warn": 0, "silent": 1, "error": 2}
_NAMES = {v: k for k, v in _MODES.items()}


def set_fallback_mode(mode: str) -> None:
    """Sets how ops without a native tpu kernel behave: "warn", "silent" or "error"."""
    if mode not in _MODES:
        raise ValueError(f"fallback mode must be one of {sorted(_MODES)}, got {mode!r}")
    _C._set_fallback_mode(_MODES[mode])


def get_fallback_mode() -> str:
    return _NAMES[_C._get_fallback_mode()]


def fallback_stats() -> dict:
    """Calls per op that ran on the CPU through the fallback since the last reset."""
    return dict(sorted(_C._fallback_stats().items()))


def reset_fallback_stats() -> None:
    _C._reset_fallback_stats()


def _mode_from_env() -> None:
    value = os.environ.get("TORCHTPU_FALLBACK", "")
    if value == "":
        return
    if value.lower() not in _MODES:
        raise ValueError(
            f"TORCHTPU_FALLBACK={value!r}: expected one of warn, silent, error"
        )
    set_fallback_mode(value.lower())


_mode_from_env()
