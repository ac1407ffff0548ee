"""torch.tpu streams and events, over torch.Stream / torch.Event.

Each chip runs one in-order stream (a worker thread in src/vtpu/stream.c). PyTorch may
create many stream objects (FSDP2 does); they all map onto that queue, so every ordering
they ask for (wait_stream, wait_event) holds. Events are recorded on the queue and carry
host timestamps for elapsed_time.
"""
import torch

from torchtpu._device_index import DeviceLike, device_index


_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, the key "tpu" renames


def _device(device: DeviceLike = None) -> torch.device:
    return torch.device("tpu", device_index(device))


class _TpuKind(type):
    """isinstance(x, torch.tpu.Stream) is true for any torch.Stream on a tpu device (and
    likewise for Event): the objects are plain torch.Stream/torch.Event, because PyTorch's
    C++ methods (elapsed_time, wait_stream) accept only those exact types."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, cls._base) and obj.device.type == "tpu"


class Stream(metaclass=_TpuKind):
    """torch.tpu.Stream(device=None, priority=0): a torch.Stream on a tpu chip."""

    _base = torch.Stream

    def __new__(cls, device: DeviceLike = None, priority: int = 0) -> torch.Stream:
        return torch.Stream(device=_device(device), priority=priority)


class Event(metaclass=_TpuKind):
    """torch.tpu.Event(enable_timing=False, blocking=False, interprocess=False)."""

    _base = torch.Event

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> torch.Event:
        return torch.Event(device="tpu", enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(device: DeviceLike = None) -> torch.Stream:
    return torch._C._accelerator_getStream(device_index(device))


def default_stream(device: DeviceLike = None) -> torch.Stream:
    return torch.Stream(stream_id=0, device_index=device_index(device),
                        device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch._C._accelerator_setStream(stream)


class StreamContext:
    """`with torch.tpu.stream(s):` makes s the current stream of its chip (None: no-op)."""

    def __init__(self, stream):
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is not None:
            self.prev = current_stream(self.stream.device_index)
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.prev is not None:
            set_stream(self.prev)
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)
