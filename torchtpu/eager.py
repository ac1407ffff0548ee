"""Eager execution modes: strict (default), debug and fused (TORCHTPU_EAGER).

In fused mode ops on tpu tensors are recorded into a pending graph per chip and compiled
together when a value is needed; `fused_stats()` says how many ops were recorded, how many
graphs ran, how often the graph cache missed, and why each flush happened. A training
loop is cut after every `optimizer.step()` so that each step records the same graph and
hits the cache.
"""
import torch

from torchtpu import _C

_MODES = {"strict": 0, "debug": 1, "fused": 2}


def get_eager_mode() -> str:
    """The current eager mode: "strict", "debug" or "fused"."""
    return {v: k for k, v in _MODES.items()}[_C._eager_mode()]


def set_eager_mode(mode: str) -> None:
    """Switches the eager mode for the whole process (pending work runs first)."""
    if mode not in _MODES:
        raise ValueError(f"eager mode {mode!r}: expected one of {sorted(_MODES)}")
    flush("mode change")
    _C._set_eager_mode(_MODES[mode])


def flush(reason: str = "flush", device: int = -1) -> None:
    """Runs the pending graph of chip `device` (every chip by default) without waiting."""
    if _C._is_initialized():
        _C._flush(device, reason)


def fused_stats() -> dict:
    """ops_recorded, graphs_run, graph_cache_hits/misses, and flush:<reason> counts."""
    return _C._fused_stats()


def reset_fused_stats() -> None:
    _C._reset_fused_stats()


def _after_optimizer_step(optimizer, args, kwargs) -> None:
    # A repeating loop boundary: every step records the same graph, so the cache hits.
    # (Inside torch.compile the whole step is one graph already.)
    if torch.compiler.is_compiling():
        return
    if _C._eager_mode() == _MODES["fused"]:
        flush("optimizer step")


def _install_optimizer_hook() -> None:
    # torch.optim may still be importing when the backend autoload imports torchtpu.
    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(_after_optimizer_step)


_install_optimizer_hook()
