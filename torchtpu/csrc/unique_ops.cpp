// unique_ops.cpp: tpu kernels of torch.unique and torch.unique_consecutive, flat and along a
// dim (aten::_unique2, unique_consecutive, unique_dim, unique_dim_consecutive), put together
// from native tpu ops around one synchronizing read of the number of unique values or
// slices, as in dynamic_shape_ops.cpp:
//   flat            the values (sorted, for _unique2) in order, the first of each run of
//                   equal neighbours kept (NaN is unequal to itself, so every NaN is its own
//                   run, as on the CPU)
//   along dim d     the slices along d are the rows of an (n, k) matrix. unique_consecutive:
//                   a row starts a run unless each of its k values == the previous row's (a
//                   row holding a NaN is its own run, as the CPU's at::equal makes it).
//                   unique_dim: the rows ranked lexicographically without comparing them in
//                   pairs: the dense rank of the values of each column (one sort along dim
//                   0), then the ranks of each pair of neighbouring columns fused into one
//                   key r0 * n + r1 and ranked again, halving the columns until one is left:
//                   the rank of the row, which is its inverse index; each rank's first row
//                   (a scatter amin) is kept, the counts a scatter-add
// The CPU's unique_dim sorts the rows with std::sort comparing values with < and >: with a
// NaN that is no order at all, and of rows equal but for the sign of a zero it keeps the
// first in an order only its introsort knows (up to 16 rows its insertion sort is stable and
// keeps the first in the input, as here). Those cases (a NaN anywhere; equal rows differing
// in a zero's sign among more than 16) are found in the same read and run through the CPU
// fallback, so the results are always the CPU's. Along a dim the CPU returns the inverse
// and counts whether asked for or not, and so do these.
#include <ATen/ATen.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

#include <algorithm>

#include "dynamic_shape_ops.h"
#include "eager.h"
#include "native.h"

namespace torchtpu {
namespace {

using Results = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The CPU's dtypes for unique (AT_ALL_TYPES, bfloat16, bool, half, the unsigned types); the
// others are its NotImplementedError naming the kernel.
void check_dtype(const at::Tensor &self, const char *kernel) {
  switch (self.scalar_type()) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
    case at::kFloat: case at::kDouble: case at::kBFloat16: case at::kHalf: case at::kBool:
    case at::kUInt16: case at::kUInt32: case at::kUInt64:
      return;
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "\"", kernel, "\" not implemented for '",
                                  c10::toString(self.scalar_type()), "'");
  }
}

// Run lengths from the ascending run starts (int64) of n elements.
at::Tensor run_lengths(const at::Tensor &starts, int64_t n) {
  at::Tensor ends = at::cat({starts.narrow(0, 1, starts.size(0) - 1), at::full({1}, n, starts.options())});
  return ends.sub(starts);
}

// The runs of equal neighbours in |self| taken in the order of the flat |values| (self
// sorted, with the sort's permutation |perm|; or self itself, |perm| undefined): each run's
// first value kept, the inverse the run number of each element of self, the counts the
// gaps between run starts. Not requested: empty int64 tensors, as on the CPU.
Results runs(const at::Tensor &self, const at::Tensor &values, const at::Tensor &perm,
             bool return_inverse, bool return_counts) {
  const at::TensorOptions longs = self.options().dtype(at::kLong);
  const int64_t n = self.numel();
  at::Tensor inverse = at::empty({return_inverse ? n : 0}, longs);
  at::Tensor counts = at::empty({0}, longs);
  if (n == 0) {
    return {at::empty({0}, self.options()), return_inverse ? inverse.reshape(self.sizes()) : inverse,
            counts};
  }
  at::Tensor first = at::ones({n}, self.options().dtype(at::kBool));
  if (n > 1) first.narrow(0, 1, n - 1).copy_(values.narrow(0, 1, n - 1).ne(values.narrow(0, 0, n - 1)));
  at::Tensor starts = true_indices(first);  // the synchronizing read
  at::Tensor out = values.index_select(0, starts);
  if (return_inverse) {
    at::Tensor run = at::cumsum(first, 0, at::kLong).sub_(1);
    inverse = perm.defined() ? inverse.scatter_(0, perm, run) : run;
    inverse = inverse.reshape(self.sizes());
  }
  if (return_counts) counts = run_lengths(starts, n);
  return {out, inverse, counts};
}

// torch.unique (the CPU's _unique2 sorts whether asked to or not).
Results tpu_unique2(const at::Tensor &self, bool sorted, bool return_inverse, bool return_counts) {
  (void)sorted;
  check_dtype(self, "unique");
  if (self.numel() == 0) return runs(self, self, at::Tensor(), return_inverse, return_counts);
  auto [values, perm] = self.reshape(-1).sort();
  return runs(self, values, perm, return_inverse, return_counts);
}

// ---- along a dim ---------------------------------------------------------------------------

// The CPU's checks of unique along |dim|, in its order; |dim| wrapped.
int64_t check_dim(const at::Tensor &self, int64_t dim) {
  check_dtype(self, "unique_dim");
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/false);
  if (self.numel() == 0) {
    const auto sizes = self.sizes();
    TORCH_CHECK(std::count(sizes.begin(), sizes.end(), 0) == 1,
                "Number of zero sized dimensions is more than one, so unique cannot be applied ");
    TORCH_CHECK(self.size(d) == 0,
                "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  }
  return d;
}

// An empty self's results: an empty tensor of its shape, an empty inverse and counts.
Results empty_results(const at::Tensor &self) {
  const at::TensorOptions longs = self.options().dtype(at::kLong);
  return {at::empty(self.sizes(), self.options()), at::empty({0}, longs), at::empty({0}, longs)};
}

// The slices of |self| along |d| as the rows of an (n, k) matrix, and back: |rows| (u, k)
// as u slices along d of a tensor otherwise shaped like self.
at::Tensor as_rows(const at::Tensor &self, int64_t d) {
  return self.movedim(d, 0).reshape({self.size(d), -1});
}
at::Tensor from_rows(const at::Tensor &rows, const at::Tensor &self, int64_t d) {
  std::vector<int64_t> shape = self.movedim(d, 0).sizes().vec();
  shape[0] = rows.size(0);
  return rows.reshape(shape).movedim(0, d);
}

Results tpu_unique_dim_consecutive(const at::Tensor &self, int64_t dim, bool return_inverse,
                                   bool return_counts) {
  (void)return_inverse, (void)return_counts;  // both computed, as on the CPU
  const int64_t d = check_dim(self, dim);
  if (self.numel() == 0) return empty_results(self);
  at::Tensor rows = as_rows(self, d);  // (n, k)
  const int64_t n = rows.size(0);
  at::Tensor first = at::ones({n}, self.options().dtype(at::kBool));  // (n,) a run starts here
  if (n > 1) {
    first.narrow(0, 1, n - 1).copy_(rows.narrow(0, 1, n - 1).ne(rows.narrow(0, 0, n - 1)).any(1));
  }
  at::Tensor starts = true_indices(first);  // the synchronizing read
  at::Tensor inverse = at::cumsum(first, 0, at::kLong).sub_(1);
  return {from_rows(rows.index_select(0, starts), self, d), inverse, run_lengths(starts, n)};
}

// Dense ranks (int64) of the values in each column of |keys| (n, k): values that compare
// equal share a rank, a smaller value has a smaller rank.
at::Tensor column_ranks(const at::Tensor &keys) {
  const int64_t n = keys.size(0);
  auto [sorted, order] = keys.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
  at::Tensor fresh = at::ones(keys.sizes(), keys.options().dtype(at::kBool));  // a new value
  if (n > 1) fresh.narrow(0, 1, n - 1).copy_(sorted.narrow(0, 1, n - 1).ne(sorted.narrow(0, 0, n - 1)));
  at::Tensor rank = at::cumsum(fresh, 0, at::kLong).sub_(1);
  return at::empty(keys.sizes(), rank.options()).scatter_(0, order, rank);
}

// The lexicographic dense rank (int64, (n,)) of each row of |rows| (n, k), k >= 1: equal rows
// share a rank. The ranks of columns 2j and 2j+1 fuse into r0 * n + r1 < n^2 (an odd last
// column pairs with a column of zeros), ranked again until one column is left.
at::Tensor row_ranks(const at::Tensor &rows) {
  const int64_t n = rows.size(0);
  at::Tensor r = column_ranks(rows.scalar_type() == at::kBool ? rows.to(at::kByte) : rows);
  while (r.size(1) > 1) {
    if (r.size(1) % 2 == 1) r = at::cat({r, at::zeros({n, 1}, r.options())}, 1);
    const int64_t k = r.size(1);
    r = column_ranks(r.slice(1, 0, k, 2).mul(n).add_(r.slice(1, 1, k, 2)));
  }
  return r.select(1, 0);
}

// torch.unique(dim=) (the CPU's unique_dim sorts whether asked to or not); boxed, for the
// fallback of the cases named at the top.
void unique_dim_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  auto args = torch::jit::last(*stack, 5);  // self, dim, sorted, return_inverse, return_counts
  const at::Tensor self = args[0].toTensor();
  const int64_t d = check_dim(self, args[1].toInt());
  Results res;
  if (self.numel() == 0) {
    res = empty_results(self);
  } else {
    at::Tensor rows = as_rows(self, d);  // (n, k)
    const int64_t n = rows.size(0);
    const at::TensorOptions longs = self.options().dtype(at::kLong);
    at::Tensor rank = row_ranks(rows);  // (n,) the inverse
    // (n,) the first row of each rank (n past the last rank)
    at::Tensor rep = at::full({n}, n, longs).scatter_reduce_(0, rank, at::arange(n, longs), "amin");
    at::Tensor counts = at::zeros({n}, longs).scatter_add_(0, rank, at::ones({n}, longs));
    std::vector<at::Tensor> read = {rank.max().add(1)};  // the number of unique rows
    if (at::isFloatingType(self.scalar_type())) {
      read.push_back(rows.isnan().any().to(at::kLong));
      if (n > 16) {
        at::Tensor sign = rows.signbit();
        read.push_back(sign.ne(sign.index_select(0, rep.index_select(0, rank))).any().to(at::kLong));
      }
    }
    at::Tensor got = at::stack(read).cpu();  // the synchronizing read
    const int64_t *v = got.const_data_ptr<int64_t>();
    if (std::any_of(v + 1, v + got.numel(), [](int64_t x) { return x != 0; })) {
      run_cpu_fallback(op, stack);
      return;
    }
    const int64_t u = v[0];
    res = {from_rows(rows.index_select(0, rep.narrow(0, 0, u)), self, d), rank,
           counts.narrow(0, 0, u)};
  }
  torch::jit::drop(*stack, 5);
  torch::jit::push(*stack, std::get<0>(res), std::get<1>(res), std::get<2>(res));
}

// torch.unique_consecutive: flat without dim (or with dim 0 of a 1-D self, as on the CPU),
// else along the dim.
void unique_consecutive_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  (void)op;
  auto args = torch::jit::last(*stack, 4);  // self, return_inverse, return_counts, dim
  const at::Tensor self = args[0].toTensor();
  const bool return_inverse = args[1].toBool(), return_counts = args[2].toBool();
  Results res;
  if (args[3].isNone() || (args[3].toInt() == 0 && self.dim() == 1)) {
    check_dtype(self, "unique");
    res = runs(self, self.reshape(-1), at::Tensor(), return_inverse, return_counts);
  } else {
    res = tpu_unique_dim_consecutive(self, args[3].toInt(), return_inverse, return_counts);
  }
  torch::jit::drop(*stack, 4);
  torch::jit::push(*stack, std::get<0>(res), std::get<1>(res), std::get<2>(res));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  if (native_disabled()) return;
  m.impl("_unique2", TORCH_FN(tpu_unique2));
  m.impl("unique_consecutive",
         torch::CppFunction::makeFromBoxedFunction<&unique_consecutive_kernel>());
  m.impl("unique_dim", torch::CppFunction::makeFromBoxedFunction<&unique_dim_kernel>());
  m.impl("unique_dim_consecutive", TORCH_FN(tpu_unique_dim_consecutive));
}

}  // namespace
}  // namespace torchtpu
