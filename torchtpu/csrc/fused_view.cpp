// fused_view.cpp: geometry and the view solver (fused_view.h).
//
// A read |v| of a storage last written densely as |b| reads elements d + sum(i_k * s_k) of
// b's flat array. When v's strides, sorted, are nested (each divides the one before, and a
// dim's extent fits in its parent's stride, so no element is read twice), that set is a
// grid: take the flat array from d, pad it to size_0 * s_0 elements, reshape it to
// (size_0, s_0/s_1, ..., s_last), keep the first size_i of each dim (element 0 of the
// last), then transpose into v's dim order and broadcast (stride-0 and size-1 dims). When
// d is a grid position from which v fits (q, k and v split from one qkv projection), the
// whole array is the grid instead, sliced from that position: no pad, so the compiler
// keeps the read a view rather than copying the base. This covers split, chunk, narrow,
// select, t(), permute, the heads view of attention, unsqueeze, expand and flatten.
// Anything else flushes.
#include "fused_view.h"

#include "native.h"

#include <c10/util/accumulate.h>

#include <algorithm>

namespace torchtpu {

namespace {

// Sorts a[0..n) (n <= TPU_MAX_RANK) by |before|; std::sort on these tiny arrays trips
// GCC 12's -Warray-bounds.
template <typename T, typename Before>
void small_sort(T *a, int n, Before before) {
  for (int i = 1; i < n; i++) {
    T x = a[i];
    int j = i - 1;
    for (; j >= 0 && before(x, a[j]); j--) a[j + 1] = a[j];
    a[j + 1] = x;
  }
}

}  // namespace

bool Geo::operator==(const Geo &o) const {
  if (offset != o.offset || rank != o.rank || dtype != o.dtype) return false;
  for (int i = 0; i < rank; i++) {
    if (sizes[i] != o.sizes[i] || strides[i] != o.strides[i]) return false;
  }
  return true;
}

Geo geo_of(const at::Tensor &t) {
  Geo g;
  g.offset = t.storage_offset() * static_cast<int64_t>(t.itemsize());
  g.rank = static_cast<int8_t>(t.dim());
  g.dtype = t.scalar_type();
  // a complex tensor is its real view, as in the graph (IrLayout): the same geometry as
  // torch.view_as_real of it, so that view reads the value the tensor was written with
  const bool pair = is_complex_pair(g.dtype) && g.rank < TPU_MAX_RANK;
  for (int i = 0; i < g.rank; i++) {
    g.sizes[i] = t.sizes()[i];
    g.strides[i] = t.strides()[i] * (pair ? 2 : 1);
  }
  if (pair) {
    g.dtype = g.dtype == at::kComplexFloat ? at::kFloat : at::kDouble;
    g.sizes[g.rank] = 2;
    g.strides[g.rank] = 1;
    g.rank++;
  }
  return g;
}

int64_t numel_of(const Geo &g) {
  return c10::multiply_integers(g.sizes, g.sizes + g.rank);
}

bool tpu_ir_strides_dense(const Geo &g) {
  int64_t expected = 1;
  for (int i = g.rank - 1; i >= 0; i--) {
    if (g.sizes[i] != 1 && g.strides[i] != expected) return false;
    expected *= g.sizes[i];
  }
  return true;
}

namespace {

// Where a read |v| starts in a dense write |b| and the dims of |v| that walk memory.
struct Walk {
  int64_t d = 0;  // v's first element, in elements from b's
  int dims[TPU_MAX_RANK] = {};
  int m = 0;
};

// True if |v| is a strided sub-view of the dense write |b| (see view_of), with its walk.
bool plan_walk(const Geo &b, const Geo &v, Walk *w) {
  if (b.dtype != v.dtype || !tpu_ir_strides_dense(b)) return false;
  int64_t esize = static_cast<int64_t>(c10::elementSize(b.dtype));
  int64_t d = v.offset - b.offset;
  if (d < 0 || d % esize) return false;
  d /= esize;
  int64_t n = numel_of(b);
  // the dims of v that walk memory, by decreasing stride
  int *dims = w->dims;
  int m = 0;
  int64_t last = d;  // offset of v's last element
  for (int k = 0; k < v.rank; k++) {
    if (v.sizes[k] == 0 || v.strides[k] < 0) return false;
    if (v.sizes[k] > 1 && v.strides[k] > 0) {
      dims[m++] = k;
      last += (v.sizes[k] - 1) * v.strides[k];
    }
  }
  if (last >= n) return false;
  small_sort(dims, m, [&](int x, int y) { return v.strides[x] > v.strides[y]; });
  // nested strides: each divides the one before, and a dim fits inside its parent's step
  for (int i = 0; i + 1 < m; i++) {
    int64_t outer = v.strides[dims[i]], inner = v.strides[dims[i + 1]];
    if (outer % inner || v.sizes[dims[i + 1]] > outer / inner) return false;
  }
  w->d = d;
  w->m = m;
  return true;
}

// |b|'s dims in memory order (decreasing stride; size-1 dims first) as |dense| with
// row-major strides, and perm[i] = the dim of |b| at position i: true if that layout is
// dense, i.e. |b| is a permuted contiguous tensor (a transpose, or LAPACK's column-major
// matrices).
bool memory_order(const Geo &b, Geo *dense, int64_t perm[TPU_MAX_RANK]) {
  int order[TPU_MAX_RANK];
  for (int k = 0; k < b.rank; k++) order[k] = k;
  auto key = [&](int k) { return b.sizes[k] == 1 ? INT64_MAX : b.strides[k]; };
  small_sort(order, b.rank, [&](int x, int y) { return key(x) > key(y); });
  *dense = b;
  int64_t stride = 1;
  for (int i = b.rank - 1; i >= 0; i--) {
    perm[i] = order[i];
    dense->sizes[i] = b.sizes[order[i]];
    if (dense->sizes[i] != 1 && b.strides[order[i]] != stride) return false;
    dense->strides[i] = stride;
    stride *= dense->sizes[i];
  }
  return true;
}

// Where the walk |w| of |v| starts in |grid| (dim i < m steps by v's i-th walked stride,
// dim m by 1), when its first element is a position of the grid from which every dim fits
// (q, k and v split from one projection): start[0 .. m] = that position; dim 0 is checked
// against the n / s_0 whole rows of the base's |n| elements. False (|start| untouched): no
// such position.
bool grid_start(const Walk &w, const Geo &v, const tpu_shape_t &grid, const int64_t *limit,
                int64_t n, int64_t *start) {
  if (w.m == 0 || w.d == 0) return false;
  const int64_t row = v.strides[w.dims[0]];
  if (n / row < w.d / row + limit[0]) return false;
  int64_t at[TPU_MAX_RANK + 1];
  int64_t left = w.d;
  for (int i = 0; i < w.m; i++) {
    int64_t s_i = v.strides[w.dims[i]];
    at[i] = left / s_i;
    left -= at[i] * s_i;
    if (i > 0 && at[i] + limit[i] > grid.dims[i]) return false;
  }
  at[w.m] = left;  // < s_last: the innermost grid dim has room for it
  std::copy(at, at + w.m + 1, start);
  return true;
}

}  // namespace

tpu_value_t view_of(tpu_graph_t *g, tpu_value_t base, const Geo &b, const Geo &v) {
  Walk w;
  if (!tpu_ir_strides_dense(b)) {  // written permuted: read it back in memory order first
    Geo dense;
    int64_t perm[TPU_MAX_RANK];
    if (!memory_order(b, &dense, perm) || !plan_walk(dense, v, &w)) return TPU_NO_VALUE;
    return view_of(g, tpu_graph_transpose(g, base, perm), dense, v);
  }
  if (!plan_walk(b, v, &w)) return TPU_NO_VALUE;
  const int64_t d = w.d, n = numel_of(b);
  const int *dims = w.dims;
  const int m = w.m;
  tpu_shape_t flat{};
  flat.rank = 1;
  flat.dims[0] = n;
  tpu_value_t x = tpu_graph_reshape(g, base, &flat);
  int64_t rows = m ? v.sizes[dims[0]] : 1;
  int64_t row = m ? v.strides[dims[0]] : 1;
  // the grid (rows, s_0/s_1, ..., s_last): its dim i steps by s_i, the last by 1
  tpu_shape_t grid{};
  grid.dims[grid.rank++] = rows;
  for (int i = 0; i + 1 < m; i++) {
    grid.dims[grid.rank++] = v.strides[dims[i]] / v.strides[dims[i + 1]];
  }
  grid.dims[grid.rank++] = m ? v.strides[dims[m - 1]] : 1;
  int64_t start[TPU_MAX_RANK + 1] = {}, limit[TPU_MAX_RANK + 1], step[TPU_MAX_RANK + 1];
  for (int i = 0; i < grid.rank; i++) {
    limit[i] = i < m ? v.sizes[dims[i]] : 1;
    step[i] = 1;
  }
  // 1. the flat array as the grid: all its whole rows, when v starts at a position of the
  //    grid (no copy); else from v's first element, padded to a whole number of rows
  if (grid_start(w, v, grid, limit, n, start)) {
    grid.dims[0] = n / row;
    for (int i = 0; i <= m; i++) limit[i] += start[i];
    if (grid.dims[0] * row != n) {
      int64_t lo = 0, hi = grid.dims[0] * row, one = 1;
      x = tpu_graph_slice(g, x, &lo, &hi, &one);
    }
  } else {
    int64_t span = rows * row;  // elements the reshape below needs from d
    int64_t lo = d, hi = std::min(n, d + span);
    if (lo != 0 || hi != n) {
      int64_t one = 1;
      x = tpu_graph_slice(g, x, &lo, &hi, &one);
    }
    if (hi - lo < span) {
      tpu_shape_t scalar{};
      tpu_dtype_t dt = tpu_graph_node(g, base)->dtype;
      tpu_value_t zero = !tpu_dtype_is_integer(dt) ? tpu_graph_constant(g, dt, &scalar, 0.0)
                                                : tpu_graph_constant_int(g, dt, &scalar, 0);
      int64_t pad_lo = 0, pad_hi = span - (hi - lo), interior = 0;
      x = tpu_graph_pad(g, x, zero, &pad_lo, &pad_hi, &interior);
    }
  }
  // 2. the grid, keeping each dim's size from the start and one element of the innermost
  x = tpu_graph_reshape(g, x, &grid);
  x = tpu_graph_slice(g, x, start, limit, step);
  tpu_shape_t walked{};
  for (int i = 0; i < m; i++) walked.dims[walked.rank++] = v.sizes[dims[i]];
  x = tpu_graph_reshape(g, x, &walked);
  // 3. transpose into v's dim order, then broadcast into v's shape
  int64_t perm[TPU_MAX_RANK];
  for (int i = 0; i < m; i++) perm[i] = i;
  small_sort(perm, m, [&](int64_t p, int64_t q) { return dims[p] < dims[q]; });
  bool trivial = true;
  for (int i = 0; i < m; i++) trivial = trivial && perm[i] == i;
  if (!trivial) x = tpu_graph_transpose(g, x, perm);
  tpu_shape_t out{};
  out.rank = v.rank;
  int64_t bdims[TPU_MAX_RANK];
  int r = 0;
  for (int k = 0; k < v.rank; k++) {
    out.dims[k] = v.sizes[k];
    if (v.sizes[k] > 1 && v.strides[k] > 0) bdims[r++] = k;
  }
  return tpu_graph_broadcast_in_dim(g, x, &out, bdims);
}

}  // namespace torchtpu
