// transformer_fastpath.cpp: the tpu kernels of the two fused ops of PyTorch's transformer
// fast path, which nn.MultiheadAttention and nn.TransformerEncoderLayer (so also
// nn.TransformerEncoder) call in inference (eval mode, no grad, batch_first):
//   _native_multi_head_attention     self-attention with packed in-projection weights
//   _transformer_encoder_layer_fwd   one encoder layer: attention, feed-forward, two norms
// Both are put together from ops with native lowerings (addmm, bmm, softmax, masked_fill,
// layer_norm, relu / gelu, add) recorded as one program (a RecordScope: one launch per
// call in strict mode), so neither takes the CPU fallback. The arithmetic is that of
// PyTorch's CPU kernels (ATen's transformers/attention.cpp and transformer.cpp):
//   projection  qkv = x W_in^T + b_in split into heads, q scaled by 1/sqrt(head_dim)
//               before the q k^T product
//   mask        bool, or float where every nonzero value masks (the merged masks PyTorch
//               passes are 0 / -inf); mask_type 0: (L, L), 1: (B, L) key padding, 2: the
//               scores' shape (B, H, L, L); other ranks are type 2. Masked keys leave the
//               softmax; a row whose keys are all masked gets NaN weights, as the CPU's
//               _masked_softmax gives it
//   weights     need_weights: (B, H, L, L), averaged over the heads if average_attn_weights
//   layer       norm_first: x += attn(norm1(x)); x += ffn(norm2(x))
//               otherwise:  x = norm1(x + attn(x)); x = norm2(x + ffn(x))
//               ffn(x) = W2 act(W1 x + b1) + b2, act the exact GELU (use_gelu) or ReLU
// Bad shapes raise the CPU kernels' RuntimeErrors. Nested inputs (nn.TransformerEncoder
// with a padding mask): nested.cpp. TORCHTPU_NATIVE=0 sends both ops to the CPU fallback.
#include "transformer_fastpath.h"

#include <ATen/ATen.h>
#include <ATen/core/boxing/KernelFunction.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "eager.h"
#include "fused.h"
#include "native.h"

namespace torchtpu {
namespace {

void check_attention_args(const at::Tensor &query, const at::Tensor &key, const at::Tensor &value,
                          int64_t embed_dim, int64_t num_head, const at::Tensor &qkv_weight,
                          const at::Tensor &qkv_bias) {
  const int64_t D = embed_dim;
  TORCH_CHECK(query.dim() == 3, "expected 3-D `query`, got ", query.dim(), "-D tensor");
  TORCH_CHECK(query.size(2) == D, "passed-in embed_dim ", D, " didn't match last dim of query ",
              query.size(2));
  TORCH_CHECK(key.dim() == 3, "expected 3-D `key`, got ", key.dim(), "-D tensor");
  TORCH_CHECK(value.dim() == 3, "expected 3-D `value`, got ", value.dim(), "-D tensor");
  TORCH_CHECK(query.sizes() == key.sizes() && key.sizes() == value.sizes(),
              "expected `query`/`key`/`value` shapes to match");
  TORCH_CHECK(qkv_weight.dim() == 2, "expected 2-D `qkv_weight`, got ", qkv_weight.dim(),
              "-D tensor");
  TORCH_CHECK(qkv_weight.size(0) == 3 * D, "expected `qkv_weight` first dim to be 3x embed_dim");
  TORCH_CHECK(qkv_weight.size(1) == D, "expected `qkv_weight` second dim to be embed_Dim");
  TORCH_CHECK(qkv_bias.dim() == 1, "expected 1-D `qkv_bias`, got ", qkv_bias.dim(), "-D tensor");
  TORCH_CHECK(qkv_bias.size(0) == 3 * D,
              "expected `qkv_bias` first dim and first dim of query to be equal");
  TORCH_CHECK(num_head > 0 && D % num_head == 0, "`embed_dim` must divide evenly by `num_heads`");
}

// (B, L, D) -> (B, H, L, D / H)
at::Tensor heads(const at::Tensor &x, int64_t num_head) {
  return x.unflatten(-1, {num_head, x.size(-1) / num_head}).transpose(1, 2);
}

// q, k, v as (B, H, L, head_dim): one product with the packed weight for self-attention
// (query, key and value the same tensor), else one per third of it.
std::array<at::Tensor, 3> project_qkv(const at::Tensor &query, const at::Tensor &key,
                                      const at::Tensor &value, const at::Tensor &w,
                                      const at::Tensor &b, int64_t num_head) {
  std::vector<at::Tensor> qkv;
  if (query.is_same(key) && key.is_same(value)) {
    qkv = at::linear(query, w, b).chunk(3, -1);  // (B, L, 3 D)
  } else {
    const std::vector<at::Tensor> ws = w.chunk(3, 0), bs = b.chunk(3, 0);
    qkv = {at::linear(query, ws[0], bs[0]), at::linear(key, ws[1], bs[1]),
           at::linear(value, ws[2], bs[2])};
  }
  return {heads(qkv[0], num_head), heads(qkv[1], num_head), heads(qkv[2], num_head)};
}

// The mask as bool (true: masked) broadcasting to the scores (B, H, L, L), read by
// mask_type as the CPU's _masked_softmax reads it, with its shape checks.
at::Tensor bool_mask(const at::Tensor &mask, std::optional<int64_t> mask_type,
                     const at::Tensor &scores) {
  const at::Tensor m = mask.scalar_type() == at::kBool ? mask : mask.ne(0);
  const int64_t type = m.dim() == 2 ? mask_type.value_or(2) : 2;
  const int64_t B = scores.size(0), L = scores.size(2);
  if (type == 1) {
    TORCH_CHECK(m.size(0) == B && m.size(1) == L, "For mask_type == 1 mask shape should be (B, L)");
    return m.reshape({B, 1, 1, L});
  }
  if (type == 0) {
    TORCH_CHECK(m.size(0) == L && m.size(1) == L, "For mask_type == 0 mask shape should be (L, L)");
    return m.reshape({1, 1, L, L});
  }
  TORCH_CHECK(m.sizes() == scores.sizes(), "For mask_type == 2 mask shape should match input shape");
  return m;
}

// softmax over the last dim without the masked scores (all masked: NaN)
at::Tensor masked_softmax(const at::Tensor &scores, const at::Tensor &mask) {
  return at::softmax(scores.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
}

std::tuple<at::Tensor, at::Tensor> attention(
    const at::Tensor &query, const at::Tensor &key, const at::Tensor &value, int64_t embed_dim,
    int64_t num_head, const at::Tensor &qkv_weight, const at::Tensor &qkv_bias,
    const at::Tensor &proj_weight, const at::Tensor &proj_bias,
    const std::optional<at::Tensor> &mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
  auto [q, k, v] = project_qkv(query, key, value, qkv_weight, qkv_bias, num_head);
  q = q.mul(1.0 / std::sqrt(static_cast<double>(embed_dim / num_head)));
  const at::Tensor scores = at::matmul(q, k.transpose(-2, -1));  // (B, H, L, L)
  at::Tensor weights = mask && mask->defined()
                           ? masked_softmax(scores, bool_mask(*mask, mask_type, scores))
                           : at::softmax(scores, -1);
  const at::Tensor context = at::matmul(weights, v).transpose(1, 2).flatten(2);  // (B, L, D)
  at::Tensor out = at::linear(context, proj_weight, proj_bias);
  if (!need_weights) return {out, at::Tensor()};
  if (average_attn_weights) weights = weights.sum(1).div_(num_head);  // (B, L, L)
  return {out, weights};
}

// The tpu kernel of an op whose native form is |fn| (unboxed); TORCHTPU_NATIVE=0 runs
// the op on the CPU fallback instead.
template <class Fn, Fn *fn>
void native_or_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  if (native_disabled()) {
    run_cpu_fallback(op, stack);
    return;
  }
  static const c10::KernelFunction native =
      c10::KernelFunction::makeFromUnboxedFunction(c10::CompileTimeFunctionPointer<Fn, fn>());
  native.callBoxed(op, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), stack);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> multi_head_attention(
    const at::Tensor &query, const at::Tensor &key, const at::Tensor &value, int64_t embed_dim,
    int64_t num_head, const at::Tensor &qkv_weight, const at::Tensor &qkv_bias,
    const at::Tensor &proj_weight, const at::Tensor &proj_bias,
    const std::optional<at::Tensor> &mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
  check_attention_args(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias);
  if (query.numel() == 0) return {at::empty_like(query), at::Tensor()};
  RecordScope scope(query.device().index(), "multi-head attention");
  auto result = attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                          proj_weight, proj_bias, mask, need_weights, average_attn_weights,
                          mask_type);
  scope.finish();
  return result;
}

at::Tensor encoder_layer(const at::Tensor &src, int64_t embed_dim, int64_t num_heads,
                         const at::Tensor &qkv_weight, const at::Tensor &qkv_bias,
                         const at::Tensor &proj_weight, const at::Tensor &proj_bias, bool use_gelu,
                         bool norm_first, double eps, const at::Tensor &norm_weight_1,
                         const at::Tensor &norm_bias_1, const at::Tensor &norm_weight_2,
                         const at::Tensor &norm_bias_2, const at::Tensor &ffn_weight_1,
                         const at::Tensor &ffn_bias_1, const at::Tensor &ffn_weight_2,
                         const at::Tensor &ffn_bias_2, const std::optional<at::Tensor> &mask,
                         std::optional<int64_t> mask_type) {
  if (src.numel() == 0) return src.clone();
  check_attention_args(src, src, src, embed_dim, num_heads, qkv_weight, qkv_bias);
  TORCH_CHECK(ffn_weight_1.dim() == 2 && ffn_weight_2.dim() == 2, "2d weights expected");
  RecordScope scope(src.device().index(), "transformer encoder layer");
  auto norm = [&](const at::Tensor &x, const at::Tensor &w, const at::Tensor &b) {
    return at::layer_norm(x, {embed_dim}, w, b, eps);
  };
  at::Tensor x = norm_first ? norm(src, norm_weight_1, norm_bias_1) : src;
  x = std::get<0>(attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                            proj_bias, mask, false, true, mask_type))
          .add_(src);
  if (!norm_first) x = norm(x, norm_weight_1, norm_bias_1);
  at::Tensor h = at::linear(norm_first ? norm(x, norm_weight_2, norm_bias_2) : x, ffn_weight_1,
                            ffn_bias_1);
  h = use_gelu ? at::gelu(h) : at::relu(h);
  x = at::linear(h, ffn_weight_2, ffn_bias_2).add_(x);
  if (!norm_first) x = norm(x, norm_weight_2, norm_bias_2);
  scope.finish();
  return x;
}

namespace {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_native_multi_head_attention",
         torch::CppFunction::makeFromBoxedFunction<
             &native_or_fallback<decltype(multi_head_attention), multi_head_attention>>());
  m.impl("_transformer_encoder_layer_fwd",
         torch::CppFunction::makeFromBoxedFunction<
             &native_or_fallback<decltype(encoder_layer), encoder_layer>>());
}

}  // namespace
}  // namespace torchtpu
