"""Mixed precision on tpu: torch.autocast("tpu") and torch.amp.GradScaler("tpu").

    with torch.autocast("tpu", dtype=torch.bfloat16):
        loss = model(x)          # matmul/linear/conv/bmm in bf16, softmax/norms/losses in f32
    loss.backward()

The op lists are CUDA's (torchtpu/csrc/autocast.cpp registers them for PyTorch's
AutocastPrivateUse1 key). bfloat16 is the TPU's native MXU input type and the default
autocast dtype for "tpu" (PyTorch's default for a PrivateUse1 device would be float16):
importing torchtpu sets it for the importing thread; PyTorch keeps the autocast dtype per
thread, so code that enters autocast on other threads should pass dtype= explicitly.

bfloat16 has float32's exponent range, so gradients do not underflow and bf16 training
needs no loss scaling. torch.amp.GradScaler("tpu") works all the same (for float16
autocast, or code written for CUDA): its two kernels, the unscale/inf-check and the scale
update, run natively on the chip (torchtpu/csrc/lower_amp.cpp).
"""
from typing import List

import torch


def get_amp_supported_dtype() -> List[torch.dtype]:
    """The dtypes torch.autocast("tpu", dtype=...) accepts."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 is native on every TPU generation (MXU inputs, storage)."""
    return True


def _default_autocast_dtype() -> None:
    torch.set_autocast_dtype("tpu", torch.bfloat16)
