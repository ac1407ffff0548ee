/* sort.c: tpu_kernel_sort, a stable sort along one dim with PyTorch's order.
 *
 * Ascending or descending; NaN sorts as the largest value (last ascending, first
 * descending), -0.0 equals +0.0, and equal elements keep their order in both directions
 * (the sort is always stable, so attrs->stable costs nothing). out_values (x's dtype) and
 * out_indices (i64 or i32: the position in x of each sorted element) may each be NULL.
 *
 * Per line: every element becomes a 64-bit key whose unsigned order is the wanted order
 * (floats via their f64 bits with NaN mapped to the maximum, signed integers with the sign
 * bit flipped, descending by complementing), paired with its position, and the pairs are
 * merge sorted (insertion-sorted runs of 32, then ping-pong merges), O(n log n). Values are
 * then copied from a saved copy of the line, so out_values may be x itself. Lines run in
 * parallel.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "vtpu/kernels/strided.h"

static const char *K = "sort";

typedef struct pair {
  uint64_t key;
  int64_t pos;
} pair_t;

typedef struct sort_job {
  const tpu_sort_attrs_t *a;
  const tpu_buf_t *x, *vals, *idx;
  int64_t n, sx, sv, si;   /* line length and strides along dim */
  tpu_loop_t lines;        /* other dims: buffers 0 = x, 1 = values, 2 = indices */
  size_t esize;
  atomic_bool oom;
} sort_job_t;

static uint64_t key_of(const tpu_buf_t *x, int64_t off, bool descending) {
  uint64_t k;
  if (tpu_dtype_is_float(x->dtype)) {
    double v = tpu_load_f64(x->data, x->dtype, off);
    if (v != v) {
      k = UINT64_MAX;
    } else {
      if (v == 0) v = 0; /* -0.0 sorts equal to +0.0 */
      uint64_t bits;
      memcpy(&bits, &v, sizeof bits);
      k = (bits >> 63) ? ~bits : bits | (1ull << 63);
    }
  } else if (x->dtype == TPU_U8 || x->dtype == TPU_BOOL) {
    k = (uint64_t)tpu_load_i64(x->data, x->dtype, off);
  } else {
    k = (uint64_t)tpu_load_i64(x->data, x->dtype, off) ^ (1ull << 63);
  }
  return descending ? ~k : k;
}

/* Stable merge sort of p[0..n) using tmp[0..n); returns the array holding the result. */
static pair_t *merge_sort(pair_t *p, pair_t *tmp, int64_t n) {
  enum { RUN = 32 };
  for (int64_t s = 0; s < n; s += RUN) { /* insertion sort each run */
    int64_t e = s + RUN < n ? s + RUN : n;
    for (int64_t i = s + 1; i < e; i++) {
      pair_t v = p[i];
      int64_t j = i;
      while (j > s && p[j - 1].key > v.key) {
        p[j] = p[j - 1];
        j--;
      }
      p[j] = v;
    }
  }
  pair_t *src = p, *dst = tmp;
  for (int64_t w = RUN; w < n; w *= 2) {
    for (int64_t s = 0; s < n; s += 2 * w) {
      int64_t m = s + w < n ? s + w : n, e = s + 2 * w < n ? s + 2 * w : n;
      int64_t i = s, j = m, o = s;
      if (m == e || src[m - 1].key <= src[m].key) { /* already in order */
        memcpy(dst + s, src + s, (size_t)(e - s) * sizeof *src);
        continue;
      }
      while (i < m && j < e) dst[o++] = src[j].key < src[i].key ? src[j++] : src[i++];
      while (i < m) dst[o++] = src[i++];
      while (j < e) dst[o++] = src[j++];
    }
    pair_t *t = src;
    src = dst;
    dst = t;
  }
  return src;
}

static void sort_task(void *ctx, int64_t begin, int64_t end) {
  sort_job_t *j = ctx;
  int64_t n = j->n;
  /* pairs, merge scratch and a copy of the line's values */
  size_t bytes;
  pair_t *mem = NULL;
  if (tpu_size_mul((size_t)n, 2 * sizeof(pair_t) + j->esize, &bytes)) mem = malloc(bytes);
  if (!mem) {
    atomic_store(&j->oom, true);
    return;
  }
  pair_t *p = mem, *tmp = mem + n;
  void *saved = mem + 2 * n;
  tpu_loop_pos_t pos;
  tpu_loop_seek(&j->lines, j->lines.rank, begin, &pos);
  for (int64_t l = begin; l < end; l++) {
    for (int64_t i = 0; i < n; i++) {
      int64_t off = pos.off[0] + i * j->sx;
      p[i].key = key_of(j->x, off, j->a->descending);
      p[i].pos = i;
      tpu_copy_elem(saved, i, j->x->data, off, j->esize);
    }
    const pair_t *r = merge_sort(p, tmp, n);
    if (j->vals) {
      for (int64_t i = 0; i < n; i++) {
        tpu_copy_elem(j->vals->data, pos.off[1] + i * j->sv, saved, r[i].pos, j->esize);
      }
    }
    if (j->idx) {
      for (int64_t i = 0; i < n; i++) {
        tpu_store_i64(j->idx->data, j->idx->dtype, pos.off[2] + i * j->si, r[i].pos);
      }
    }
    tpu_loop_step(&j->lines, j->lines.rank, &pos);
  }
  free(mem);
}

static tpu_status_t check_out(const tpu_buf_t *x, const tpu_buf_t *o, const char *what) {
  int64_t n;
  TPU_RETURN_IF_ERROR(tpu_buf_check(o, K, what, &n));
  if (o->rank != x->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s rank %d != x rank %d", K, what,
                          o->rank, x->rank);
  }
  for (int d = 0; d < x->rank; d++) {
    if (o->dims[d] != x->dims[d]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s dim %d is %lld, x has %lld", K,
                            what, d, (long long)o->dims[d], (long long)x->dims[d]);
    }
  }
  return TPU_OK;
}

tpu_status_t tpu_kernel_sort(const tpu_sort_attrs_t *attrs, const tpu_buf_t *x,
                             const tpu_buf_t *out_values, const tpu_buf_t *out_indices,
                             tpu_pool_t *pool) {
  int64_t nx;
  if (!attrs) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: attrs is NULL", K);
  TPU_RETURN_IF_ERROR(tpu_buf_check(x, K, "x", &nx));
  int dim = attrs->dim;
  if (x->rank == 0 ? dim != 0 : (dim < 0 || dim >= x->rank)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: dim %d out of range for rank %d", K,
                          dim, x->rank);
  }
  if (out_values) {
    TPU_RETURN_IF_ERROR(check_out(x, out_values, "out_values"));
    if (out_values->dtype != x->dtype) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out_values is %s but x is %s", K,
                            tpu_dtype_name(out_values->dtype), tpu_dtype_name(x->dtype));
    }
  }
  if (out_indices) {
    TPU_RETURN_IF_ERROR(check_out(x, out_indices, "out_indices"));
    if (out_indices->dtype != TPU_I64 && out_indices->dtype != TPU_I32) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out_indices is %s, expected i64", K,
                            tpu_dtype_name(out_indices->dtype));
    }
  }
  if (nx == 0 || (!out_values && !out_indices)) return TPU_OK;
  sort_job_t j = {.a = attrs, .x = x, .vals = out_values, .idx = out_indices};
  atomic_init(&j.oom, false);
  j.esize = tpu_dtype_size(x->dtype);
  j.n = x->rank ? x->dims[dim] : 1;
  j.sx = x->rank ? x->strides[dim] : 0;
  j.sv = out_values && x->rank ? out_values->strides[dim] : 0;
  j.si = out_indices && x->rank ? out_indices->strides[dim] : 0;
  j.lines.nbufs = 3;
  for (int d = 0; d < x->rank; d++) {
    if (d == dim) continue;
    int r = j.lines.rank++;
    j.lines.dims[r] = x->dims[d];
    j.lines.strides[0][r] = x->strides[d];
    j.lines.strides[1][r] = out_values ? out_values->strides[d] : 0;
    j.lines.strides[2][r] = out_indices ? out_indices->strides[d] : 0;
  }
  tpu_loop_simplify(&j.lines);
  int64_t lines = nx / j.n;
  int64_t grain = j.n >= 4096 ? 1 : 4096 / j.n;
  tpu_pool_parallel_for(pool, lines, grain, sort_task, &j);
  if (atomic_load(&j.oom)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld elements", K,
                          (long long)j.n);
  }
  return TPU_OK;
}
