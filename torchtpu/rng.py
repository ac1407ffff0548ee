"""torch.tpu random-number state: one default generator per chip, like torch.cuda."""
from typing import Iterable

import torch

from torchtpu import _C
from torchtpu._device_index import DeviceLike, device_index


def manual_seed(seed: int) -> None:
    """Seeds the current chip's generator."""
    _C._manual_seed(device_index(), int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed: int) -> None:
    """Seeds every chip's generator (torch.manual_seed calls this)."""
    for i in range(_C._device_count()):
        _C._manual_seed(i, int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> None:
    """Seeds the current chip's generator with a non-deterministic number."""
    _C._seed(device_index())


def seed_all() -> None:
    seed_value = _C._seed(0)
    for i in range(1, _C._device_count()):
        _C._manual_seed(i, seed_value)


def initial_seed() -> int:
    return _C._initial_seed(device_index())


def get_rng_state(device: DeviceLike = "tpu") -> torch.Tensor:
    """The generator state of a chip, as a CPU ByteTensor."""
    state = _C._get_rng_state(device_index(device))
    return torch.frombuffer(bytearray(state), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "tpu") -> None:
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError("set_rng_state expects a torch.uint8 tensor from get_rng_state")
    data = bytes(new_state.detach().cpu().contiguous().tolist())
    _C._set_rng_state(device_index(device), data)


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(_C._device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
