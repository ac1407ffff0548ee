// nested.cpp: nested tensors on tpu, as far as PyTorch's transformer fast path uses them.
// In inference, nn.TransformerEncoder with a left-aligned src_key_padding_mask packs the
// batch into a nested tensor (a NestedTensorImpl over a tpu buffer: dispatch key
// NestedTensorPrivateUse1), runs every layer on it and pads the result back:
//   _nested_tensor_from_mask_left_aligned(t, mask)   whether each row of the mask is true
//        then false: one synchronizing read of a flag
//   _nested_tensor_from_mask(t, mask, mask_check)    row b's first mask[b].sum() tokens
//        of t, packed into the buffer by one gather; the lengths are read back (one
//        synchronizing read, as on CUDA: a nested tensor's sizes live on the host)
//   _transformer_encoder_layer_fwd on a nested batch: the dense layer
//        (transformer_fastpath.cpp) on the padded batch (B, longest, D), the padding as
//        its key padding mask, then the valid rows gathered back into a buffer; one
//        program with the layer. The CPU runs the projections on the packed tokens
//        instead, which changes no token's result; on a TPU every op but the two gathers
//        keeps the padded batch's static shape, whatever the total length
//   to_padded_tensor(nt, padding, output_size)       one gather of the buffer's rows and
//        a row of |padding| when the constituents share their trailing dims (the
//        transformer's (length, D)), else each constituent padded, then stacked
//   _nested_tensor_size / _strides / _storage_offsets, unbind   metadata (host tensors)
//        and the constituents as views of the buffer, so a tpu nested tensor prints
// Gather indices are built on the host from the nested sizes and copied to the chip.
// Checks and error messages are the CPU kernels'.
#include <ATen/ATen.h>
#include <ATen/NestedTensorImpl.h>
#include <ATen/native/nested/NestedTensorUtils.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "fused.h"
#include "transformer_fastpath.h"

namespace torchtpu {
namespace {

using at::native::get_nested_tensor_impl;
using at::native::NestedTensorImpl;

// |v| as an int64 tensor on |device| (copied from a host tensor the copy owns).
at::Tensor indices_on(const std::vector<int64_t> &v, c10::Device device) {
  at::Tensor host = at::empty({static_cast<int64_t>(v.size())}, at::kLong);
  std::copy(v.begin(), v.end(), host.data_ptr<int64_t>());
  return host.to(device);
}

// A padded (batch, slots) layout whose row b holds constituent b's len[b] rows first:
// the slot b * slots + t of each of those rows, in order.
std::vector<int64_t> valid_slots(const std::vector<int64_t> &len, int64_t slots) {
  std::vector<int64_t> out;
  for (size_t b = 0; b < len.size(); b++) {
    for (int64_t t = 0; t < len[b]; t++) out.push_back(static_cast<int64_t>(b) * slots + t);
  }
  return out;
}

// The same layout filled from a buffer of |packed| rows where constituent b starts at row
// start[b]: per slot, its buffer row, or |packed| for padding.
std::vector<int64_t> slot_sources(const std::vector<int64_t> &len, const std::vector<int64_t> &start,
                                  int64_t batch, int64_t slots, int64_t packed) {
  std::vector<int64_t> out(batch * slots, packed);
  for (size_t b = 0; b < len.size(); b++) {
    for (int64_t t = 0; t < len[b]; t++) out[b * slots + t] = start[b] + t;
  }
  return out;
}

// (packed, width) rows and one row of |fill| below them, gathered into |slot_source|'s order.
at::Tensor gather_padded(const at::Tensor &rows, const at::Tensor &slot_source, double fill) {
  const at::Tensor pad = at::full({1, rows.size(1)}, fill, rows.options());
  return at::cat({rows, pad}).index_select(0, slot_source);
}

// ---- from a dense batch and a mask -------------------------------------------------------

void check_from_mask(const at::Tensor &t, const at::Tensor &mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Expected mask to be of ScalarType Bool, but got ",
              mask.scalar_type(), " instead.");
  TORCH_CHECK(mask.dim() == 2, "Padding mask should be 2D");
  TORCH_CHECK(t.dim() == 3, "Input should be a 3D tensor, N * L * D");
  TORCH_CHECK(t.size(0) == mask.size(0) && t.size(1) == mask.size(1),
              "Mask size should match input size");
}

// () bool: some row of the (N, L) mask has a true after a false
at::Tensor has_gaps(const at::Tensor &mask) {
  const int64_t L = mask.size(1);
  if (L < 2) return at::zeros({}, mask.options());
  return mask.narrow(1, 1, L - 1).logical_and(mask.narrow(1, 0, L - 1).logical_not()).any();
}

bool tpu_nested_tensor_from_mask_left_aligned(const at::Tensor &t, const at::Tensor &mask) {
  check_from_mask(t, mask);
  return !has_gaps(mask).item<bool>();  // the read
}

at::Tensor tpu_nested_tensor_from_mask(const at::Tensor &t, const at::Tensor &mask,
                                       bool mask_check) {
  check_from_mask(t, mask);
  const int64_t N = t.size(0), L = t.size(1), D = t.size(2);
  // (N + 1): the row lengths, then whether the mask has gaps
  const at::Tensor read =
      at::cat({mask.sum(1, false, at::kLong), has_gaps(mask).to(at::kLong).view({1})}).cpu();
  const int64_t *r = read.data_ptr<int64_t>();
  TORCH_CHECK(!mask_check || r[N] == 0, "Mask must be left-aligned without gaps");
  const std::vector<int64_t> len(r, r + N);
  at::Tensor sizes = at::empty({N, 2}, at::kLong);  // (N, 2): (length, D) per row
  int64_t *size = sizes.data_ptr<int64_t>();
  for (int64_t b = 0; b < N; b++) {
    size[2 * b] = len[b];
    size[2 * b + 1] = D;
  }
  const std::vector<int64_t> rows = valid_slots(len, L);  // rows of t (N * L, D)
  at::Tensor buffer = at::empty({0}, t.options());
  if (!rows.empty()) {
    buffer = t.reshape({N * L, D}).index_select(0, indices_on(rows, t.device())).view(-1);
  }
  return at::native::wrap_buffer(buffer, sizes);
}

// ---- back to a padded tensor -------------------------------------------------------------

// Each constituent padded to |shape| with |padding|, stacked.
at::Tensor pad_each(const NestedTensorImpl &nt, const at::Tensor &buffer, double padding,
                    const std::vector<int64_t> &shape) {
  const std::vector<c10::IntArrayRef> sizes = at::native::NestedTensor_get_sizes(&nt);
  const int64_t *offsets = nt.get_storage_offsets().const_data_ptr<int64_t>();
  std::vector<at::Tensor> padded;
  for (size_t b = 0; b < sizes.size(); b++) {
    const int64_t n = c10::multiply_integers(sizes[b]);
    if (n == 0) {
      padded.push_back(at::full(shape, padding, buffer.options()));
      continue;
    }
    std::vector<int64_t> pad;  // constant_pad_nd's (before, after) from the last dim
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; d--) {
      pad.push_back(0);
      pad.push_back(shape[d] - sizes[b][d]);
    }
    padded.push_back(at::constant_pad_nd(buffer.narrow(0, offsets[b], n).view(sizes[b]), pad, padding));
  }
  return at::stack(padded);
}

at::Tensor tpu_to_padded_tensor(const at::Tensor &self, double padding,
                                at::OptionalSymIntArrayRef output_size) {
  const NestedTensorImpl &nt = *get_nested_tensor_impl(self);
  TORCH_CHECK(at::native::nested_tensor_impl_is_contiguous(&nt),
              "for now to_padded_tensor only supports contiguous nested tensor");
  const at::Tensor &sizes = nt.get_nested_sizes();  // (N, k)
  const at::Tensor buffer = nt.get_buffer();
  if (sizes.dim() == 0 || sizes.numel() == 0) return buffer.clone();
  TORCH_CHECK(self.numel() > 0,
              "to_padded_tensor: at least one constituent tensor should have non-zero numel");
  const int64_t N = sizes.size(0), k = sizes.size(1);
  const std::vector<int64_t> longest = at::native::NestedTensor_get_max_size(nt);  // (k)
  std::vector<int64_t> shape{N};  // the padded shape, then the one asked for
  shape.insert(shape.end(), longest.begin(), longest.end());
  std::vector<int64_t> target = shape;
  if (output_size) {
    TORCH_CHECK(output_size->size() == shape.size(),
                "Length of output_size does not match NestedTensor dims. Broadcasting is not supported.");
    for (size_t d = 0; d < shape.size(); d++) {
      target[d] = (*output_size)[d].guard_int(__FILE__, __LINE__);
      TORCH_CHECK(target[d] >= shape[d],
                  "Value in output_size is less than NestedTensor padded size. Truncation is not supported.");
    }
  }
  // Rows: every constituent is (length, rest...) with the same rest, and so is the target.
  const int64_t *s = sizes.const_data_ptr<int64_t>();
  bool rows = true;
  for (int64_t b = 0; b < N && rows; b++) {
    for (int64_t d = 1; d < k; d++) rows = rows && s[b * k + d] == target[d + 1];
  }
  if (!rows) {
    at::Tensor out = pad_each(nt, buffer, padding, longest);
    if (target == shape) return out;
    std::vector<int64_t> pad;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; d--) {
      pad.push_back(0);
      pad.push_back(target[d] - shape[d]);
    }
    return at::constant_pad_nd(out, pad, padding);
  }
  const int64_t width = c10::multiply_integers(target.begin() + 2, target.end());
  const int64_t *offsets = nt.get_storage_offsets().const_data_ptr<int64_t>();
  std::vector<int64_t> len(N), start(N);
  for (int64_t b = 0; b < N; b++) {
    len[b] = s[b * k];
    start[b] = offsets[b] / width;
  }
  const int64_t packed = buffer.numel() / width;
  const at::Tensor slot_source =
      indices_on(slot_sources(len, start, target[0], target[1], packed), self.device());
  return gather_padded(buffer.view({packed, width}), slot_source, padding).view(target);
}

// ---- the encoder layer on a nested batch -------------------------------------------------

at::Tensor tpu_nested_encoder_layer(
    const at::Tensor &src, int64_t embed_dim, int64_t num_heads, const at::Tensor &qkv_weight,
    const at::Tensor &qkv_bias, const at::Tensor &proj_weight, const at::Tensor &proj_bias,
    bool use_gelu, bool norm_first, double eps, const at::Tensor &norm_weight_1,
    const at::Tensor &norm_bias_1, const at::Tensor &norm_weight_2, const at::Tensor &norm_bias_2,
    const at::Tensor &ffn_weight_1, const at::Tensor &ffn_bias_1, const at::Tensor &ffn_weight_2,
    const at::Tensor &ffn_bias_2, const std::optional<at::Tensor> &mask,
    std::optional<int64_t> /*mask_type*/) {
  TORCH_CHECK(!mask || !mask->defined(), "NestedTensor with mask is not supported yet");
  const NestedTensorImpl &nt = *get_nested_tensor_impl(src);
  const at::Tensor &sizes = nt.get_nested_sizes();  // (N, 2): (length, D)
  const at::Tensor buffer = nt.get_buffer();
  if (buffer.numel() == 0) return at::native::wrap_buffer(buffer, sizes);
  TORCH_CHECK(src.dim() == 3, "expected 3-D `query`, got ", src.dim(), "-D tensor");
  const int64_t N = sizes.size(0), D = embed_dim;
  const int64_t *s = sizes.const_data_ptr<int64_t>();
  std::vector<int64_t> len(N), start(N);
  int64_t longest = 0, packed = 0;
  for (int64_t b = 0; b < N; b++) {
    TORCH_CHECK(s[2 * b + 1] == D, "passed-in embed_dim ", D, " didn't match last dim of query ",
                s[2 * b + 1]);
    len[b] = s[2 * b];
    start[b] = packed;
    packed += len[b];
    longest = std::max(longest, len[b]);
  }
  const at::Tensor slot_source = indices_on(slot_sources(len, start, N, longest, packed), src.device());
  const at::Tensor packed_slot = indices_on(valid_slots(len, longest), src.device());
  RecordScope scope(src.device().index(), "transformer encoder layer");
  const at::Tensor x = gather_padded(buffer.view({packed, D}), slot_source, 0).view({N, longest, D});
  const at::Tensor padding = slot_source.eq(packed).view({N, longest});  // key padding mask
  const at::Tensor y = encoder_layer(
      x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first,
      eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
      ffn_weight_2, ffn_bias_2, padding, 1);
  at::Tensor out = y.view({N * longest, D}).index_select(0, packed_slot).view(-1);
  scope.finish();
  return at::native::wrap_buffer(out, sizes);
}

// ---- metadata and constituents ----------------------------------------------------------

at::Tensor tpu_nested_tensor_size(const at::Tensor &self) {
  return get_nested_tensor_impl(self)->get_nested_sizes().clone();
}
at::Tensor tpu_nested_tensor_strides(const at::Tensor &self) {
  return get_nested_tensor_impl(self)->get_nested_strides().clone();
}
at::Tensor tpu_nested_tensor_storage_offsets(const at::Tensor &self) {
  return get_nested_tensor_impl(self)->get_storage_offsets().clone();
}

// The constituents as views of the buffer (printing a nested tensor unbinds it).
std::vector<at::Tensor> tpu_nested_unbind(const at::Tensor &self, int64_t dim) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(dim == 0, "NestedTensor can only be unbound along dimension 0 got dimension ", dim,
              " instead.");
  const NestedTensorImpl &nt = *get_nested_tensor_impl(self);
  const at::Tensor storage = nt.get_unsafe_storage_as_tensor();
  const std::vector<c10::IntArrayRef> sizes = at::native::NestedTensor_get_sizes(&nt);
  const std::vector<c10::IntArrayRef> strides = at::native::NestedTensor_get_strides(&nt);
  const int64_t *offsets = nt.get_storage_offsets().const_data_ptr<int64_t>();
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < sizes.size(); i++) out.push_back(storage.as_strided(sizes[i], strides[i], offsets[i]));
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_nested_tensor_from_mask", TORCH_FN(tpu_nested_tensor_from_mask));
  m.impl("_nested_tensor_from_mask_left_aligned", TORCH_FN(tpu_nested_tensor_from_mask_left_aligned));
}

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("to_padded_tensor", TORCH_FN(tpu_to_padded_tensor));
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(tpu_nested_encoder_layer));
  m.impl("_nested_tensor_size", TORCH_FN(tpu_nested_tensor_size));
  m.impl("_nested_tensor_strides", TORCH_FN(tpu_nested_tensor_strides));
  m.impl("_nested_tensor_storage_offsets", TORCH_FN(tpu_nested_tensor_storage_offsets));
  m.impl("unbind.int", TORCH_FN(tpu_nested_unbind));
}

}  // namespace
}  // namespace torchtpu
