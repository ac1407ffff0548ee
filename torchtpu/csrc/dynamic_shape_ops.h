// dynamic_shape_ops.h: the tpu kernel of aten::index.Tensor and aten::_index_put_impl_
// (dynamic_shape_ops.cpp), which turns bool and uint8 index tensors into the columns of
// their nonzero() and runs the rest through the ops' lowerings (lower_index.cpp registers
// both); and true_indices, the one synchronizing read the data-dependent ops share
// (unique_ops.cpp uses it too).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchtpu {

// Flat indices (int64, ascending) of the true elements of the 1-D bool tpu |mask|: their
// count is read back (a sync), the indices are computed on the device.
at::Tensor true_indices(const at::Tensor &mask);

void mask_index_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack);

}  // namespace torchtpu
