// fused_view.h: tensor geometry (where a tensor's elements sit in its storage) and the
// view solver of the pending graph: a read of a storage through a different geometry than
// the one it was written with becomes IR ops (slice, reshape, transpose, broadcast) on the
// written value when the read is a strided sub-view of the write (split, chunk, narrow,
// select, t(), permute, unsqueeze, expand, view of the whole; the write itself may be a
// permuted contiguous layout, as LAPACK-style column-major results are), and a flush
// otherwise.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

extern "C" {
#include "tpu/ir.h"
}

namespace torchtpu {

struct Geo {
  int64_t offset = 0;  // bytes from the start of the storage
  int8_t rank = 0;
  at::ScalarType dtype = at::kFloat;
  int64_t sizes[TPU_MAX_RANK] = {};
  int64_t strides[TPU_MAX_RANK] = {};  // elements

  bool operator==(const Geo &o) const;
};

Geo geo_of(const at::Tensor &t);

// Number of elements of |g|.
int64_t numel_of(const Geo &g);

// True if |g|'s strides are row-major dense for its sizes.
bool tpu_ir_strides_dense(const Geo &g);

// |base| (a value of |g| laid out as |b|: dense, or a permutation of dense) read through
// geometry |v|, built in |g|; or TPU_NO_VALUE if |v| is not a strided sub-view of |b|
// (nothing is built then).
tpu_value_t view_of(tpu_graph_t *g, tpu_value_t base, const Geo &b, const Geo &v);

}  // namespace torchtpu
