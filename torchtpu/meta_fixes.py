"""Fixes of PyTorch meta kernels that a tpu program reaches and a CUDA program in eager mode
does not: torchtpu's engine runs an op's meta kernel to size its results (CUDA kernels
size their own), and compile mode traces with fake tensors, which use the same kernels.

* The meta kernel of _thnn_fused_lstm_cell (the cell of nn.LSTM and nn.LSTMCell on an
  accelerator) checks the device of every argument, including biases that are None when the
  LSTM has bias=False: "'NoneType' object has no attribute 'device'". `install` replaces
  the check it calls with the same checks that skip absent biases.
* The meta kernels of linalg.eigh, eigvals, cholesky and the other square-matrix ops
  check the rank with `raise AssertionError` where the CPU raises RuntimeError ("The input
  tensor A must have at least 2 dimensions."). `install` replaces that check with the
  CPU's (`square_check_inputs`).
* torch.geqrf has no meta kernel at all ("attempted to run this operator with Meta
  tensors"). `install` registers one with the CPU's result layout (batches of column-major
  matrices, LAPACK's) and its rank check; dtypes are left to the kernel that runs, as the
  CPU's NotImplementedError names the device.
* grid_sampler_2d's meta kernel is its decomposition, which checks the grid's last dimension
  with `raise AssertionError` and the batch sizes not at all (a reshape fails instead), and
  grid_sampler_3d's checks print sizes as torch.Size([...]). `install` puts the CPU's checks
  and messages (check_grid_sampler_common, check_grid_sampler_2d) in front of both.
"""
import functools

import torch
import torch._decomp.decompositions as decompositions
import torch._meta_registrations as meta_registrations
from torch._prims_common import make_contiguous_strides_for

_library = None  # the torch.library.Library holding the meta kernels registered here


def rnn_cell_check_sizes(input_gates, hidden_gates, input_bias, hidden_bias, factor,
                         prev_hidden):
    """PyTorch's checks of a fused RNN cell's arguments (its CUDA kernels' checkSizes),
    with input_bias and hidden_bias allowed to be None."""
    torch._check(input_gates.ndim == 2, lambda: f"{input_gates.ndim} != 2")
    torch._check(input_gates.shape == hidden_gates.shape,
                 lambda: f"{input_gates.shape} != {hidden_gates.shape}")
    gates_size = input_gates.size(1)
    if input_bias is not None:
        torch._check(input_bias.ndim == 1, lambda: f"{input_bias.ndim} != 1")
        torch._check(input_bias.numel() == gates_size,
                     lambda: f"{input_bias.numel()} != {gates_size}")
        torch._check(hidden_bias is not None and input_bias.shape == hidden_bias.shape,
                     lambda: f"{input_bias.shape} != {getattr(hidden_bias, 'shape', None)}")
    torch._check(prev_hidden.ndim == 2, lambda: f"{prev_hidden.ndim} != 2")
    expected = input_gates.size(0) * gates_size // factor
    torch._check(prev_hidden.numel() == expected,
                 lambda: f"{prev_hidden.numel()} != {input_gates.size(0)} * {gates_size} // "
                         f"{factor} (aka {expected})")
    others = [t for t in (hidden_gates, input_bias, hidden_bias, prev_hidden) if t is not None]
    torch._check(all(t.device == input_gates.device for t in others),
                 lambda: "expected all inputs to be same device")


def square_check_inputs(self, f_name):
    """PyTorch's squareCheckInputs with the CPU's RuntimeError for a rank below 2."""
    torch._check(self.dim() >= 2,
                 lambda: f"{f_name}: The input tensor A must have at least 2 dimensions.")
    torch._check(self.size(-1) == self.size(-2),
                 lambda: f"{f_name}: A must be batches of square matrices, "
                         f"but they are {self.size(-2)} by {self.size(-1)} matrices")


def geqrf_meta(input):
    """torch.geqrf's results: (a, tau), a [..., m, n] in batches of column-major matrices,
    tau [..., min(m, n)] contiguous, as the CPU returns them."""
    torch._check(input.dim() >= 2, lambda: "torch.geqrf: input must have at least 2 dimensions.")
    *batch, m, n = input.shape
    a = torch.empty_strided(input.shape, make_contiguous_strides_for(input.shape, row_major=False), dtype=input.dtype,
                            device=input.device)
    return a, input.new_empty((*batch, min(m, n)))


def _sizes(t):
    return "[" + ", ".join(str(int(d)) for d in t.shape) + "]"


def check_grid_sampler_common(input, grid):
    """PyTorch's check_grid_sampler_common with the CPU's messages."""
    torch._check(input.device == grid.device,
                 lambda: f"grid_sampler(): expected input and grid to be on same device, but input "
                         f"is on {input.device} and grid is on {grid.device}")
    torch._check(input.layout == torch.strided and grid.layout == torch.strided,
                 lambda: f"grid_sampler(): expected input and grid to have torch.strided layout, but "
                         f"input has {input.layout} and grid has {grid.layout}")
    torch._check(input.shape[0] == grid.shape[0],
                 lambda: f"grid_sampler(): expected grid and input to have same batch size, but got "
                         f"input with sizes {_sizes(input)} and grid with sizes {_sizes(grid)}")
    torch._check(grid.shape[-1] == input.ndim - 2,
                 lambda: f"grid_sampler(): expected grid to have size {input.ndim - 2} in last "
                         f"dimension, but got grid with sizes {_sizes(grid)}")
    for i in range(2, input.ndim):
        torch._check(input.shape[i] > 0,
                     lambda: f"grid_sampler(): expected input to have non-empty spatial dimensions, "
                             f"but input has sizes {_sizes(input)} with dimension {i} being empty")


def checked_grid_sampler_2d(decomposition):
    """grid_sampler_2d's decomposition behind the CPU's checks."""
    @functools.wraps(decomposition)
    def grid_sampler_2d(a, grid, *args, **kwargs):
        check_grid_sampler_common(a, grid)
        torch._check(a.ndim == 4 and a.ndim == grid.ndim,
                     lambda: f"grid_sampler(): expected 4D input and grid with same number of dimensions, "
                             f"but got input with sizes {_sizes(a)} and grid with sizes {_sizes(grid)}")
        return decomposition(a, grid, *args, **kwargs)
    grid_sampler_2d.checked = True
    return grid_sampler_2d


def install() -> None:
    """Idempotent; changes nothing if this PyTorch has no such check or has its own
    geqrf meta kernel."""
    global _library
    if hasattr(meta_registrations, "rnn_cell_checkSizes"):
        meta_registrations.rnn_cell_checkSizes = rnn_cell_check_sizes
    if hasattr(meta_registrations, "squareCheckInputs"):
        meta_registrations.squareCheckInputs = square_check_inputs
    if hasattr(meta_registrations, "check_grid_sampler_common"):
        meta_registrations.check_grid_sampler_common = check_grid_sampler_common
    original = getattr(decompositions, "_grid_sampler_2d", None)
    if original is not None and not getattr(original, "checked", False):
        decompositions._grid_sampler_2d = checked_grid_sampler_2d(original)
    if _library is None and not torch._C._dispatch_has_kernel_for_dispatch_key(
            "aten::geqrf", "Meta"):
        _library = torch.library.Library("aten", "IMPL")
        _library.impl("geqrf", geqrf_meta, "Meta")
