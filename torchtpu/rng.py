"""torch.tpu random-number state: one default generator per chip, like torch.cuda.

As for torch.cuda's, Dynamo calls get_rng_state and set_rng_state instead of tracing them
(torch._disable_dynamo): they are not ATen ops, so a graph could not record them, and
tracing them under a dispatch-disabling mode (torch.testing's freeze_rng_state) fails.
The decorator imports Dynamo at the first call (about a second, unless torch.optim has
already); the seeding functions go without it, since torch.manual_seed calls
manual_seed_all in every script (Dynamo breaks the graph at their C call anyway).
"""
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


@torch._disable_dynamo
def get_rng_state(device: DeviceLike = "tpu") -> torch.Tensor:
    """The generator state of a chip, as a CPU ByteTensor."""
    state = _C._get_rng_state(device_index(device))
    return torch.frombuffer(bytearray(state), dtype=torch.uint8)


@torch._disable_dynamo
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
