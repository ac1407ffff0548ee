"""torchtpu.distributed: the "tpu" backend of torch.distributed, collectives across the chips of
one process, and the interconnect (ICI) model's statistics.

    import torch.distributed as dist
    dist.init_process_group("tpu")            # or "cpu:gloo,tpu:tpu", or no backend at all

Importing torchtpu registers the backend (for tpu tensors, and for cpu tensors when it is the
only backend). The backend is a C++ c10d::Backend (torchtpu/csrc/process_group.cpp):

- transport: processes on one host exchange tensors through a shared-memory segment (a memfd:
  nothing is ever left in /dev/shm); processes on several hosts go through Gloo over the same
  rendezvous store. TORCHTPU_DIST_TRANSPORT=shm|gloo|auto (default auto) forces one.
- faults: a rank that exits makes the others raise torch.distributed.DistBackendError naming it
  at once; a rank that stalls, after the timeout: TORCHTPU_DIST_TIMEOUT (seconds), else
  init_process_group's timeout when given, else 60 s. Mismatched shapes, dtypes or collectives
  across ranks raise RuntimeError on every rank, naming the ranks and shapes.
- interconnect model: every collective adds its modelled ICI time on the chip (TORCHTPU_CHIP)
  and topology (TORCHTPU_DIST_TOPOLOGY, e.g. "2x2"; default a ring of the group's ranks) to
  stats().
"""
import datetime
import os
import socket
from typing import Dict, List, Optional, Sequence

import torch
import torch.distributed as dist

from torchtpu import _C

_D = _C._dist_module()

__all__ = [
    "stats", "reset_stats", "collective_seconds", "TpuBackend", "DEFAULT_TIMEOUT_SECONDS",
    "all_reduce_chips", "broadcast_chips", "all_gather_chips", "reduce_scatter_chips",
]

TpuBackend = _D.TpuBackend
DEFAULT_TIMEOUT_SECONDS = 60.0

_OPS = {"sum": 0, "avg": 1, "product": 2, "min": 3, "max": 4, "band": 5, "bor": 6, "bxor": 7}


def _op_code(op) -> int:
    """A torch.distributed.ReduceOp (or its name) as the C op code."""
    if isinstance(op, str):
        name = op.lower()
    else:
        name = str(op).split(".")[-1].lower()
        name = {"premul_sum": "premul_sum"}.get(name, name)
    if name not in _OPS:
        raise ValueError(f"reduce op {op} is not supported by tpu collectives")
    return _OPS[name]


def _timeout_seconds(timeout: Optional[datetime.timedelta]) -> float:
    env = os.environ.get("TORCHTPU_DIST_TIMEOUT")
    if env:
        try:
            value = float(env)
        except ValueError:
            raise ValueError(f"TORCHTPU_DIST_TIMEOUT={env!r} is not a number of seconds") from None
        if value <= 0:
            raise ValueError(f"TORCHTPU_DIST_TIMEOUT={env!r} must be positive")
        return value
    default = getattr(dist.constants, "default_pg_timeout", None)
    if timeout is None or timeout == default:
        return DEFAULT_TIMEOUT_SECONDS
    return timeout.total_seconds()


def _host_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}|{boot}"


def _transport(store, rank: int, size: int) -> str:
    mode = os.environ.get("TORCHTPU_DIST_TRANSPORT", "auto").strip().lower() or "auto"
    if mode not in ("auto", "shm", "gloo"):
        raise ValueError(f"TORCHTPU_DIST_TRANSPORT={mode!r}: expected auto, shm or gloo")
    if mode != "auto":
        return mode
    # Shared memory when every rank is on this host (same hostname and boot), else Gloo.
    me = _host_id()
    store.set(f"torchtpu/host/{rank}", me)
    for r in range(size):
        if store.get(f"torchtpu/host/{r}").decode() != me:
            return "gloo"
    return "shm"


def _create_backend(dist_opts, backend_opts=None):
    store, rank, size = dist_opts.store, dist_opts.group_rank, dist_opts.group_size
    timeout = _timeout_seconds(dist_opts.timeout)
    gloo = None
    if _transport(store, rank, size) == "gloo":
        gloo = dist.ProcessGroupGloo(store, rank, size, datetime.timedelta(seconds=timeout))
    return TpuBackend(store, rank, size, timeout, gloo, str(dist_opts.group_id or ""))


def _register() -> None:
    if not dist.is_available() or "tpu" in dist.Backend.backend_list:
        return
    # "cpu" too: with init_process_group("tpu") alone, cpu tensors (barrier, object
    # collectives) take the same shared-memory path. Gloo stays the default for cpu.
    dist.Backend.register_backend("tpu", _create_backend, extended_api=True,
                                  devices=["cpu", "tpu"])


# ---- statistics and the interconnect model -------------------------------------------------

def stats() -> Dict[str, Dict[str, float]]:
    """Per collective kind (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,
    send_recv, barrier): count, bytes (V: the full array), modelled_seconds (ICI model) and
    wall_seconds (measured here), summed over every tpu process group and chip collective of
    this process since the last reset_stats(); plus "total" sums."""
    out = _D.stats()
    out["total"] = {k: sum(v[k] for v in out.values())
                    for k in ("count", "bytes", "modelled_seconds", "wall_seconds")}
    return out


def reset_stats() -> None:
    _D.reset_stats()


def collective_seconds(kind: str, nbytes: int, chip: Optional[str] = None,
                       topology: Sequence[int] = (2,)) -> float:
    """Modelled ICI seconds of one collective (the pure C function of include/tpu/interconnect.h):
    kind as in stats(), nbytes = V, chip name (default TORCHTPU_CHIP), topology dims."""
    return _D.collective_seconds(kind, int(nbytes), chip or "", [int(d) for d in topology])


# ---- collectives across the chips of this process (TORCHTPU_CHIPS=N) ---------------------------

def _chip_tensors(tensors: Sequence[torch.Tensor], what: str) -> List[torch.Tensor]:
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what}: need one tensor per chip")
    seen = set()
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type != "tpu":
            raise TypeError(f"{what}: every tensor must be a tpu tensor")
        if t.device.index in seen:
            raise ValueError(f"{what}: two tensors on {t.device}; give one tensor per chip")
        seen.add(t.device.index)
        if not t.is_contiguous():
            raise ValueError(f"{what}: tensors must be contiguous")
    first = tensors[0]
    for t in tensors[1:]:
        if t.dtype != first.dtype:
            raise TypeError(f"{what}: dtypes differ ({first.dtype} and {t.dtype})")
    for t in tensors:
        torch.tpu.synchronize(t.device)
    return tensors


def all_reduce_chips(tensors: Sequence[torch.Tensor], op="sum") -> None:
    """In place: every tensor (one per chip, same shape) becomes the reduction over chips."""
    ts = _chip_tensors(tensors, "all_reduce_chips")
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise RuntimeError(f"all_reduce_chips: shapes differ ({tuple(ts[0].shape)} on "
                               f"{ts[0].device}, {tuple(t.shape)} on {t.device})")
    _D.all_reduce_chips([t.data_ptr() for t in ts], ts[0].numel(), str(ts[0].dtype), _op_code(op))


def broadcast_chips(tensors: Sequence[torch.Tensor], src: int = 0) -> None:
    """In place: every tensor becomes a copy of tensors[src]."""
    ts = _chip_tensors(tensors, "broadcast_chips")
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise RuntimeError("broadcast_chips: shapes differ")
    _D.broadcast_chips([t.data_ptr() for t in ts], ts[0].nbytes, int(src))


def all_gather_chips(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Returns, per chip, the concatenation along dim 0 of every chip's tensor."""
    ts = _chip_tensors(tensors, "all_gather_chips")
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise RuntimeError("all_gather_chips: shapes differ")
    n = len(ts)
    shape = (n * ts[0].shape[0],) + tuple(ts[0].shape[1:]) if ts[0].dim() else (n,)
    outs = [torch.empty(shape, dtype=t.dtype, device=t.device) for t in ts]
    _D.all_gather_chips([t.data_ptr() for t in ts], [o.data_ptr() for o in outs], ts[0].nbytes)
    return outs


def reduce_scatter_chips(tensors: Sequence[torch.Tensor], op="sum") -> List[torch.Tensor]:
    """Returns, per chip c, the reduction over chips of block c (dim 0 split in len(tensors))."""
    ts = _chip_tensors(tensors, "reduce_scatter_chips")
    n = len(ts)
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise RuntimeError("reduce_scatter_chips: shapes differ")
    if ts[0].dim() == 0 or ts[0].shape[0] % n:
        raise ValueError(f"reduce_scatter_chips: dim 0 must be divisible by {n} chips")
    shape = (ts[0].shape[0] // n,) + tuple(ts[0].shape[1:])
    outs = [torch.empty(shape, dtype=t.dtype, device=t.device) for t in ts]
    _D.reduce_scatter_chips([t.data_ptr() for t in ts], [o.data_ptr() for o in outs],
                            outs[0].numel(), str(ts[0].dtype), _op_code(op))
    return outs


_register()
