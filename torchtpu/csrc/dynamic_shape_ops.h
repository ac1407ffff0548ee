// dynamic_shape_ops.h: the tpu kernel of aten::index.Tensor and aten::_index_put_impl_
// (dynamic_shape_ops.cpp), which turns bool and uint8 index tensors into the columns of
// their nonzero() and runs the rest through the ops' lowerings (lower_index.cpp registers
// both).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchtpu {

void mask_index_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack);

}  // namespace torchtpu
