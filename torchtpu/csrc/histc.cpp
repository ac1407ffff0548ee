// histc.cpp: torch.histc on tpu, put together from native tpu ops (no CPU fallback), with
// the CPU kernel's arithmetic so every element lands in the CPU's bin:
//   range    [min, max]; when min == max, the data's smallest and largest values, read
//            back in one synchronizing read (as CUDA's histc does); still equal: widened
//            by 1 each way. The CPU's checks on it (finite, min < max) in double.
//   bin      trunc((x - lo) * bins / (hi - lo)) in the input's dtype, lo and hi rounded
//            to it (the CPU reads them from a linspace of that dtype); x == hi goes to the
//            last bin; x outside [lo, hi] (NaN too) to none
//   counts   ones added into bins + 1 slots (the extra one collects the elements of no
//            bin) by one scatter-add, in the input's dtype
// float32 and float64. bfloat16 and float16 take the CPU fallback: the CPU counts in those
// types, one rounded add at a time, which saturates (a bfloat16 count stops at 256), and a
// scatter-add that sums in float32 would count differently. Integer inputs too (the CPU
// raises its NotImplementedError there).
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>
#include <utility>

#include "eager.h"
#include "native.h"

namespace torchtpu {
namespace {

// The histogram's outer edges as the CPU picks them (Histogram.cpp's
// histc_select_outer_bin_edges), in double.
std::pair<double, double> outer_edges(const at::Tensor &self, const at::Scalar &min,
                                      const at::Scalar &max) {
  double lo = min.to<double>(), hi = max.to<double>();
  if (lo == hi && self.numel() > 0) {
    const at::Tensor range = at::stack({self.min(), self.max()}).to(at::kDouble).cpu();  // the read
    lo = range[0].item<double>();
    hi = range[1].item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(!(std::isinf(lo) || std::isinf(hi) || std::isnan(lo) || std::isnan(hi)),
              "torch.histc: range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
  return {lo, hi};
}

// The counts [bins] of |self| (f32 or f64).
template <typename scalar_t>
at::Tensor histogram(const at::Tensor &self, int64_t bins, double lo_d, double hi_d) {
  const scalar_t lo = static_cast<scalar_t>(lo_d), hi = static_cast<scalar_t>(hi_d);
  const scalar_t width = hi - lo;  // in the input's dtype, as the CPU divides by it
  const at::Tensor x = self.reshape({-1});
  const at::Tensor pos = at::sub(x, lo).mul_(bins).div_(width).to(at::kLong);  // truncates
  const at::Tensor in_range = at::ge(x, lo).logical_and_(at::le(x, hi));
  const at::Tensor bin = at::where(in_range, at::clamp_max(pos, bins - 1), bins);
  return at::zeros({bins + 1}, self.options())
      .scatter_add_(0, bin, at::ones_like(x))
      .narrow(0, 0, bins);
}

bool native_histc(const at::Tensor &self) {
  const at::ScalarType t = self.scalar_type();
  return !native_disabled() && (t == at::kFloat || t == at::kDouble);
}

at::Tensor tpu_histc(const at::Tensor &self, int64_t bins, const at::Scalar &min,
                     const at::Scalar &max) {
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  const auto [lo, hi] = outer_edges(self, min, max);
  return self.scalar_type() == at::kFloat ? histogram<float>(self, bins, lo, hi)
                                          : histogram<double>(self, bins, lo, hi);
}

void histc_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const size_t num_args = op.schema().arguments().size();
  const at::Tensor self = torch::jit::peek(*stack, 0, num_args).toTensor();
  if (!native_histc(self)) {
    run_cpu_fallback(op, stack);
    return;
  }
  const int64_t bins = torch::jit::peek(*stack, 1, num_args).toInt();
  const at::Scalar min = torch::jit::peek(*stack, 2, num_args).toScalar();
  const at::Scalar max = torch::jit::peek(*stack, 3, num_args).toScalar();
  at::Tensor hist = tpu_histc(self, bins, min, max);
  if (num_args == 5) {  // histc.out
    at::Tensor out = torch::jit::peek(*stack, 4, num_args).toTensor();
    TORCH_CHECK(out.scalar_type() == self.scalar_type(), "torch.histc: the output's dtype ",
                out.scalar_type(), " differs from the input's ", self.scalar_type());
    at::native::resize_output(out, hist.sizes());
    out.copy_(hist);
    hist = out;
  }
  torch::jit::drop(*stack, num_args);
  torch::jit::push(*stack, std::move(hist));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histc", torch::CppFunction::makeFromBoxedFunction<&histc_kernel>());
  m.impl("histc.out", torch::CppFunction::makeFromBoxedFunction<&histc_kernel>());
}

}  // namespace
}  // namespace torchtpu
