"""torchtpu: PyTorch on TPUs, natively, with a built-in virtual TPU.

`import torch` is enough: PyTorch's backend autoload calls `_autoload()` through the
`torch.backends` entry point. Importing torchtpu registers the `tpu` device (PyTorch's
PrivateUse1 backend renamed), the `torch.tpu` module, and the `Tensor.tpu()`,
`Tensor.is_tpu`, `Module.tpu()` methods. The device behind `tpu` is the virtual TPU
chosen by TORCHTPU_CHIP / TORCHTPU_CHIPS (see README).
"""
import atexit
import sys
import time


def _autoload() -> None:
    """Entry point of PyTorch's device-backend autoload; importing did the work. Defined
    before `import torch` so that `import torchtpu` (or `python -m torchtpu.report`) before
    torch works: torch's autoload then finds this module half-imported and calls this."""


import torch  # noqa: E402

from torchtpu import _C  # noqa: F401  (loads the bridge: allocator, guard, hooks, kernels)
from torchtpu import amp, device_module
from torchtpu.precision import (
    Precision,
    get_matmul_precision,
    precision,
    set_matmul_precision,
)
from torchtpu.eager import (
    flush,
    fused_stats,
    get_eager_mode,
    reset_fused_stats,
    set_eager_mode,
)
from torchtpu.fallback import (
    fallback_stats,
    get_fallback_mode,
    reset_fallback_stats,
    set_fallback_mode,
)

from torchtpu.export import ExportedProgram, export

__all__ = [
    "export", "ExportedProgram",
    "Precision", "precision", "set_matmul_precision", "get_matmul_precision",
    "fallback_stats", "reset_fallback_stats", "set_fallback_mode", "get_fallback_mode",
    "cache_stats", "get_eager_mode", "set_eager_mode", "flush", "fused_stats",
    "reset_fused_stats",
]


def cache_stats() -> dict:
    """The executable cache: hits, misses, entries, compile_seconds; and its persistent
    layer (TORCHTPU_CACHE_DIR): disk (on or off), disk_hits (in-memory misses served from
    disk), disk_misses, disk_writes (compiles from scratch stored), disk_errors (unreadable,
    corrupt or foreign entries ignored, failed writes)."""
    return _C._cache_stats()


def _register() -> None:
    if torch._C._get_privateuse1_backend_name() == "tpu":
        return  # already registered in this process
    torch.utils.rename_privateuse1_backend("tpu")
    torch._register_device_module("tpu", device_module)
    sys.modules["torch.tpu.amp"] = device_module.amp  # from torch.tpu.amp import GradScaler
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )


def _let_autograd_threads_settle() -> None:
    """PyTorch's autograd engine starts one thread per tpu chip at the first backward, and
    each takes the GIL once to initialize. A process that exits right after its first
    backward could finalize Python under a thread still waiting for the GIL, which aborts
    the process (the race of pytorch/pytorch#38230). Releasing the GIL briefly at exit
    lets those threads finish starting."""
    if _C._is_initialized():
        time.sleep(0.02)


def _backward_on_calling_thread() -> None:
    """PyTorch's autograd engine runs the backward of a device other than the CPU on a
    thread of its own per device, and the thread that called backward() sleeps until it is
    done: two thread hand-offs per backward (tens of microseconds each on a busy host), and
    a compiled step's backward is one call into a graph already queued on the chip's
    stream. The tpu kernels run on that stream whatever thread queues them, so torchtpu
    turns the engine's device threads off for the importing thread (thread-local, as
    torch.autograd.set_multithreading_enabled always is): its backward runs where it is
    called, as a CPU backward does. Undo it with
    torch.autograd.set_multithreading_enabled(True)."""
    torch.autograd.set_multithreading_enabled(False)


_register()
_backward_on_calling_thread()
amp._default_autocast_dtype()
from torchtpu import distributed  # noqa: E402,F401  (registers the "tpu" process-group backend)
atexit.register(_let_autograd_threads_settle)

from torchtpu import profiler  # noqa: E402,F401  (torch.profiler gains the modelled TPU lanes)
from torchtpu import default_compile, meta_fixes  # noqa: E402

default_compile.install()  # torch.compile(model) with no backend compiles tpu graphs here
meta_fixes.install()  # meta kernels that tpu programs reach fixed (meta_fixes.py)
