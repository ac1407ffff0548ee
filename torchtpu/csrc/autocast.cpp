// autocast.cpp: torch.autocast("tpu") — the AutocastPrivateUse1 kernels.
//
// PyTorch core registers autocast op lists for CUDA, CPU, XPU, MPS, MTIA and MAIA, but
// none for PrivateUse1, so without this file every op under torch.autocast("tpu") fails
// with "Could not run 'aten::matmul' with arguments from the 'Autocasttpu' backend".
//
// The lists are CUDA's, taken from the macros PyTorch ships in ATen/autocast_mode.h (so
// they follow the installed torch version):
//   lower_precision_fp  matmul, linear, conv, bmm, baddbmm, addmm, einsum, SDPA, ... run in
//                       the autocast dtype (bf16 by default on tpu: the MXU's input type)
//   fp32                exp, log, pow, norms (layer_norm, rms_norm, group_norm), losses,
//                       softplus, ... run in float32
//   fp32_set_opt_dtype  softmax, log_softmax, sum, prod, cumsum, ... run in float32 unless
//                       the caller passed a dtype
//   fp32_append_dtype   norm(...) gets dtype=float32 appended
//   promote             addcmul, addcdiv, atan2, dot, index_put, scatter_add, ... run in
//                       the widest floating input type
// and, as on CUDA, binary_cross_entropy raises under autocast (use the _with_logits form).
// Every other op falls through to the tpu kernels unchanged.
//
// Which dtype "lower precision" means is PyTorch's per-thread autocast dtype for the
// device; torchtpu/amp.py makes bfloat16 the default for "tpu".

#include <ATen/autocast_mode.h>
#include <ATen/Operators.h>
#include <torch/library.h>

namespace torchtpu {
namespace {

using at::Tensor;

// CUDA's message, for the same reason: binary_cross_entropy's backward is unsafe to
// autocast (its log of probabilities loses too much in 16-bit types).
Tensor binary_cross_entropy_banned(const Tensor &, const Tensor &, const std::optional<Tensor> &,
                                   int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\nMany models use a sigmoid layer right before the binary cross "
              "entropy layer.\nIn this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\nor "
              "torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
              "BCEWithLogits are\nsafe to autocast (on tpu as on cuda).");
}

}  // namespace
}  // namespace torchtpu

// Ops without an autocast rule run unchanged (the next key is PrivateUse1's kernels).
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// The KERNEL_* macros expand to unqualified Tensor/Scalar/... in signatures.
namespace {
using at::Tensor;
using c10::IntArrayRef;
using c10::Scalar;
using c10::ScalarType;
}  // namespace

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPU_KERNEL_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TPU_KERNEL_LOWER_PRECISION_FP)
#undef TPU_KERNEL_LOWER_PRECISION_FP

#define TPU_KERNEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TPU_KERNEL_FP32)
#undef TPU_KERNEL_FP32

#define TPU_KERNEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_KERNEL_FP32_SET_OPT_DTYPE)
#undef TPU_KERNEL_FP32_SET_OPT_DTYPE

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define TPU_KERNEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TPU_KERNEL_PROMOTE)
#undef TPU_KERNEL_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN((&torchtpu::binary_cross_entropy_banned)));
}
