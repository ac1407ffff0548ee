// dynamic_shape_ops.cpp: tpu kernels of the ops whose result shape depends on the values,
// put together from native tpu ops around one synchronizing read of a count, as CUDA does
// (a compiled graph cannot hold such a shape; in fused mode the read flushes the pending
// graph like any .item()):
//   nonzero          the count of true elements read back; each one's slot in the result
//                    from a cumsum of the mask, its flat index scattered there (the others
//                    to one spare slot past the end, dropped), then unravelled per dim
//   masked_select    the same flat indices, then one native index_select
//   unique           torch.unique and unique_consecutive, flat and along a dim: unique_ops.cpp
//   bincount         the largest value read back, then a scatter-add into that many bins
//   repeat_interleave (with a tensor of repeats) the total read back, then the running
//                    sum of a 1 at each index's first slot
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

at::Tensor true_indices(const at::Tensor &mask) {
  const at::TensorOptions longs = mask.options().dtype(at::kLong);
  if (mask.numel() == 0) return at::empty({0}, longs);
  const int64_t n = mask.sum().item<int64_t>();  // the synchronizing read
  at::Tensor slot = at::where(mask, at::cumsum(mask, 0, at::kLong).sub_(1), n);
  at::Tensor out = at::empty({n + 1}, longs);
  out.scatter_(0, slot, at::arange(mask.numel(), longs));
  return out.narrow(0, 0, n);
}

namespace {

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

// torch.bincount: the largest value read back (with the smallest, for the CPU's check),
// then ones or the weights added into that many bins. Without weights the counts are
// int64; with f32 weights f32, with any other weights f64, as on the CPU.
at::Tensor tpu_bincount(const at::Tensor &self, const std::optional<at::Tensor> &weights,
                        int64_t minlength) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isIntegralType(self.scalar_type(), /*includeBool=*/false),
                              "\"bincount_cpu\" not implemented for '",
                              c10::toString(self.scalar_type()), "'");
  TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  const bool weighted = weights && weights->defined();
  TORCH_CHECK(!weighted || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  at::ScalarType dtype = !weighted ? at::kLong
                         : weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  at::TensorOptions opts = self.options().dtype(dtype);
  if (self.numel() == 0) return at::zeros({minlength}, opts);
  at::Tensor range = at::stack({self.min(), self.max()}).to(at::kLong).cpu();  // the read
  TORCH_CHECK(range[0].item<int64_t>() >= 0, "bincount only supports 1-d non-negative integral inputs.");
  const int64_t bins = std::max(minlength, range[1].item<int64_t>() + 1);
  at::Tensor src = weighted ? weights->to(dtype) : at::ones({self.size(0)}, opts);
  return at::zeros({bins}, opts).scatter_add_(0, self.to(at::kLong), src);
}

// repeat_interleave(repeats): index i repeated repeats[i] times. The total (and the
// smallest repeat, for the CPU's check) read back unless output_size is given; a 1 added
// at each index's first slot, and the running sum of those is the index.
at::Tensor tpu_repeat_interleave(const at::Tensor &repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
              "repeats has to be Long or Int tensor");
  const at::TensorOptions longs = repeats.options().dtype(at::kLong);
  if (repeats.numel() == 0) return at::empty({0}, longs);
  at::Tensor r = repeats.to(at::kLong);
  int64_t total;
  if (output_size) {
    total = output_size->guard_int(__FILE__, __LINE__);
  } else {
    at::Tensor read = at::stack({r.sum(), r.min()}).cpu();
    TORCH_CHECK(read[1].item<int64_t>() >= 0, "repeats can not be negative");
    total = read[0].item<int64_t>();
  }
  at::Tensor starts = at::cumsum(r, 0).sub_(r);  // may equal total: a spare last slot
  at::Tensor marks = at::zeros({total + 1}, longs).scatter_add_(0, starts, at::ones_like(r));
  return at::cumsum(marks, 0).sub_(1).narrow(0, 0, total);
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
  m.impl("bincount", TORCH_FN(tpu_bincount));
  m.impl("repeat_interleave.Tensor", TORCH_FN(tpu_repeat_interleave));
}

}  // namespace
}  // namespace torchtpu
