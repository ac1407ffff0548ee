// transformer_fastpath.h: the dense tpu kernels of PyTorch's transformer fast path
// (transformer_fastpath.cpp), which nested.cpp also runs on the padded form of a nested
// batch. Arguments as in the aten schemas of the two ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <tuple>

namespace torchtpu {

// aten::_native_multi_head_attention on dense (B, L, D) tpu tensors: (output (B, L, D),
// attention weights or an undefined tensor when !need_weights).
std::tuple<at::Tensor, at::Tensor> multi_head_attention(
    const at::Tensor &query, const at::Tensor &key, const at::Tensor &value, int64_t embed_dim,
    int64_t num_head, const at::Tensor &qkv_weight, const at::Tensor &qkv_bias,
    const at::Tensor &proj_weight, const at::Tensor &proj_bias,
    const std::optional<at::Tensor> &mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type);

// aten::_transformer_encoder_layer_fwd on a dense (B, L, D) tpu tensor.
at::Tensor encoder_layer(const at::Tensor &src, int64_t embed_dim, int64_t num_heads,
                         const at::Tensor &qkv_weight, const at::Tensor &qkv_bias,
                         const at::Tensor &proj_weight, const at::Tensor &proj_bias, bool use_gelu,
                         bool norm_first, double eps, const at::Tensor &norm_weight_1,
                         const at::Tensor &norm_bias_1, const at::Tensor &norm_weight_2,
                         const at::Tensor &norm_bias_2, const at::Tensor &ffn_weight_1,
                         const at::Tensor &ffn_bias_1, const at::Tensor &ffn_weight_2,
                         const at::Tensor &ffn_bias_2, const std::optional<at::Tensor> &mask,
                         std::optional<int64_t> mask_type);

}  // namespace torchtpu
