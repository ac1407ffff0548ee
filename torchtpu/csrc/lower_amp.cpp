// lower_amp.cpp: the two kernels of torch.amp.GradScaler("tpu"), run natively.
//
// _amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
//                    growth_interval)
//   a lowering: one small graph that computes the new scale (the result, written into
//   `scale`) and the new growth tracker (an update of argument 1), with the rules of
//   PyTorch's CPU/CUDA kernels: an inf/NaN step multiplies the scale by backoff_factor and
//   resets the tracker; `growth_interval` clean steps in a row multiply it by
//   growth_factor (unless that overflows) and reset the tracker.
//
// _amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
//   a PrivateUse1 kernel composed of native ops (the engine's lowerings cannot write into
//   the elements of a tensor list): per gradient g, probe += sum(g * 0), which is 0 when
//   every element is finite and NaN otherwise (no overflow, unlike sum(g)); g *= inv_scale.
//   Then found_inf = max(found_inf, isnan(probe)). Everything stays on the chip's stream:
//   the host does not wait (GradScaler reads found_inf only in step()).
#include <ATen/ops/isnan.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include "native.h"

namespace torchtpu {
namespace {

// args: (self f32 scale, growth_tracker i32, found_inf f32, growth_factor, backoff_factor,
// growth_interval); the three trailing arguments are static (float/int in the schema).
void amp_update_scale(LowerCtx &ctx) {
  tpu_graph_t *g = ctx.g;
  const tpu_shape_t shape = shape_of(g, ctx.v(0));
  const double growth = ctx.arg(3).toDouble();
  const double backoff = ctx.arg(4).toDouble();
  const int64_t interval = ctx.arg(5).toInt();
  tpu_value_t scale = convert(g, ctx.v(0), TPU_F32);
  tpu_value_t tracker = convert(g, ctx.v(1), TPU_I32);
  tpu_value_t found = broadcast_to(g, convert(g, ctx.v(2), TPU_F32), shape);

  tpu_value_t is_inf = tpu_graph_compare(g, TPU_CMP_NE, found, full(g, TPU_F32, shape, 0));
  tpu_value_t successful = tpu_graph_binary(g, TPU_OP_ADD, tracker, full(g, TPU_I32, shape, 1));
  tpu_value_t grow_now =
      tpu_graph_compare(g, TPU_CMP_EQ, successful, full(g, TPU_I32, shape, (double)interval));
  tpu_value_t grown = tpu_graph_binary(g, TPU_OP_MUL, scale, full(g, TPU_F32, shape, growth));
  tpu_value_t grown_ok = tpu_graph_select(g, tpu_graph_unary(g, TPU_OP_IS_FINITE, grown), grown, scale);
  tpu_value_t backed = tpu_graph_binary(g, TPU_OP_MUL, scale, full(g, TPU_F32, shape, backoff));
  tpu_value_t new_scale =
      tpu_graph_select(g, is_inf, backed, tpu_graph_select(g, grow_now, grown_ok, scale));
  tpu_value_t zero = full(g, TPU_I32, shape, 0);
  tpu_value_t new_tracker =
      tpu_graph_select(g, is_inf, zero, tpu_graph_select(g, grow_now, zero, successful));
  ctx.results = {new_scale};
  ctx.updates.push_back({1, new_tracker});
}

LoweringRegistrar registrar({
    {"_amp_update_scale_", amp_update_scale},
});

void amp_unscale(at::TensorList grads, at::Tensor &found_inf, const at::Tensor &inv_scale) {
  TORCH_CHECK(inv_scale.numel() == 1, "inv_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(inv_scale.scalar_type() == at::kFloat, "inv_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
  TORCH_CHECK(inv_scale.device() == found_inf.device(),
              "inv_scale and found_inf must be on the same device, got ", inv_scale.device(),
              " and ", found_inf.device());
  if (grads.empty()) return;
  at::Tensor probe;  // () f32: 0 while every element seen is finite, NaN otherwise
  for (const at::Tensor &g : grads) {
    TORCH_CHECK(g.device() == found_inf.device(),
                "scaled_grads must be on the same device as found_inf (", found_inf.device(),
                "), got a gradient on ", g.device());
    TORCH_CHECK(g.is_floating_point(), "One of scaled_grads was not a floating point tensor.");
    TORCH_CHECK(g.layout() == at::kStrided, "One of scaled_grads was not a strided tensor.");
    if (g.numel() == 0) continue;
    at::Tensor p = at::sum(at::mul(g, 0), at::kFloat);
    probe = probe.defined() ? probe.add(p) : p;
    const_cast<at::Tensor &>(g).mul_(inv_scale);
  }
  if (!probe.defined()) return;
  found_inf.copy_(at::maximum(found_inf, at::isnan(probe).to(at::kFloat)));
}

}  // namespace
}  // namespace torchtpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_",
         TORCH_FN(torchtpu::amp_unscale));
}
