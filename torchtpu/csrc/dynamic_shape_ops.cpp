// dynamic_shape_ops.cpp: tpu kernels of the ops whose result shape depends on the values,
// put together from native tpu ops around one synchronizing read of a count, as CUDA does
// (a compiled graph cannot hold such a shape; in fused mode the read flushes the pending
// graph like any .item()):
//   nonzero          the count of true elements read back; each one's slot in the result
//                    from a cumsum of the mask, its flat index scattered there (the others
//                    to one spare slot past the end, dropped), then unravelled per dim
//   masked_select    the same flat indices, then one native index_select
//   x[mask]          index.Tensor and _index_put_impl_ (x[mask] = values, and x[mask]'s
//                    backward) with bool or uint8 index tensors: each mask replaced by the
//                    columns of its nonzero(), then the native gather or scatter
// Before these, printing a tpu tensor took the CPU fallback (PyTorch's formatter calls
// masked_select).
#include "dynamic_shape_ops.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include "eager.h"
#include "native.h"

namespace torchtpu {
namespace {

// Flat indices (int64, ascending) of the true elements of the 1-D bool |mask|.
at::Tensor true_indices(const at::Tensor &mask) {
  const at::TensorOptions longs = mask.options().dtype(at::kLong);
  if (mask.numel() == 0) return at::empty({0}, longs);
  const int64_t n = mask.sum().item<int64_t>();  // the synchronizing read
  at::Tensor slot = at::where(mask, at::cumsum(mask, 0, at::kLong).sub_(1), n);
  at::Tensor out = at::empty({n + 1}, longs);
  out.scatter_(0, slot, at::arange(mask.numel(), longs));
  return out.narrow(0, 0, n);
}

at::Tensor tpu_nonzero(const at::Tensor &self) {
  at::Tensor flat = self.reshape(-1);
  at::Tensor idx = true_indices(self.scalar_type() == at::kBool ? flat : flat.ne(0));
  const int64_t rank = self.dim();
  if (rank == 0) return at::empty({idx.size(0), 0}, idx.options());
  std::vector<at::Tensor> cols(static_cast<size_t>(rank));
  int64_t stride = 1;
  for (int64_t d = rank - 1; d >= 0; d--) {
    at::Tensor c = stride == 1 ? idx : at::div(idx, stride, "floor");
    cols[static_cast<size_t>(d)] = d == 0 ? c : at::remainder(c, self.size(d));
    stride *= self.size(d);
  }
  return at::stack(cols, 1);
}

at::Tensor tpu_masked_select(const at::Tensor &self, const at::Tensor &mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.device() == mask.device(), "masked_select(): self and mask must be on the ",
              "same device, but got ", self.device(), " and ", mask.device());
  std::vector<int64_t> shape = at::infer_size(mask.sizes(), self.sizes());  // the CPU's order (its message)
  if (c10::multiply_integers(shape) == 0) return at::empty({0}, self.options());
  at::Tensor values = self.expand(shape).reshape(-1);
  return values.index_select(0, true_indices(mask.expand(shape).reshape(-1)));
}

bool is_mask(const std::optional<at::Tensor> &t) {
  return t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte);
}

}  // namespace

void mask_index_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  if (native_disabled()) {
    run_cpu_fallback(op, stack);
    return;
  }
  // index.Tensor(self, indices) or _index_put_impl_(self, indices, values, accumulate, unsafe)
  const size_t first = stack->size() - op.schema().arguments().size();
  const at::Tensor self = (*stack)[first].toTensor();
  const c10::List<std::optional<at::Tensor>> indices = (*stack)[first + 1].toOptionalTensorList();
  bool masks = false, zero_dim = false;
  for (const std::optional<at::Tensor> t : indices) {
    masks = masks || is_mask(t);
    zero_dim = zero_dim || (is_mask(t) && t->dim() == 0);  // x[True] adds a dim: rare
  }
  // x[mask] = v with one value is native as it is (a select, no read of the count)
  bool one_value = op.schema().arguments().size() > 2 && (*stack)[first + 2].toTensor().numel() == 1;
  if (!masks || zero_dim || one_value) {
    run_native(op, stack);
    return;
  }
  c10::List<std::optional<at::Tensor>> expanded;
  int64_t dim = 0;
  for (const std::optional<at::Tensor> t : indices) {
    if (!is_mask(t)) {
      expanded.push_back(t);
      dim++;
      continue;
    }
    TORCH_CHECK_INDEX(dim + t->dim() <= self.dim(), "too many indices for tensor of dimension ",
                      self.dim());
    for (int64_t j = 0; j < t->dim(); j++) {
      TORCH_CHECK_INDEX(t->size(j) == self.size(dim + j), "The shape of the mask ", t->sizes(),
                        " at index ", j, " does not match the shape of the indexed tensor ",
                        self.sizes(), " at index ", dim + j);
    }
    at::Tensor nz = at::nonzero(*t);  // on the mask's device: an index may stay on the CPU
    for (int64_t j = 0; j < t->dim(); j++) expanded.push_back(nz.select(1, j));
    dim += t->dim();
  }
  (*stack)[first + 1] = c10::IValue(expanded);
  op.callBoxed(stack);  // back here without masks: the lowering
}

namespace {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  if (native_disabled()) return;
  m.impl("nonzero", TORCH_FN(tpu_nonzero));
  m.impl("masked_select", TORCH_FN(tpu_masked_select));
}

}  // namespace
}  // namespace torchtpu
