/* ew_iter.c: the N-d iteration of the elementwise kernels (see ew.h). */
#include <stdio.h>

#include "vtpu/kernels/ew.h"
#include "vtpu/kernels/strided.h"

static void format_dims(char *buf, size_t cap, const tpu_buf_t *b) {
  size_t used = 0;
  used += (size_t)snprintf(buf, cap, "(");
  for (int d = 0; d < b->rank && used < cap; d++) {
    used += (size_t)snprintf(buf + used, cap - used, d ? ", %lld" : "%lld", (long long)b->dims[d]);
  }
  if (used < cap) snprintf(buf + used, cap - used, ")");
}

/* |stride| * |esize| and the extent |stride * esize| * (dim - 1) must fit int64. */
static bool extent_fits(int64_t stride, int64_t esize, int64_t dim, int64_t *acc) {
  int64_t bytes, span;
  if (__builtin_mul_overflow(stride, esize, &bytes)) return false;
  if (bytes == INT64_MIN) return false;
  if (__builtin_mul_overflow(bytes < 0 ? -bytes : bytes, dim - 1, &span)) return false;
  return !__builtin_add_overflow(*acc, span, acc);
}

tpu_status_t tpu_ew_iter_init(tpu_ew_iter_t *it, const char *kernel, const tpu_buf_t *out,
                              const tpu_buf_t *const *ins, const char *const *names,
                              int nin, bool keep_order) {
  memset(it, 0, sizeof *it);
  if (nin < 0 || nin >= TPU_EW_MAX_OPERANDS) {
    return tpu_status_set(TPU_ERR_INTERNAL, "%s: %d inputs", kernel, nin);
  }
  int64_t numel;
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, kernel, names[0], &numel));
  for (int k = 0; k < nin; k++) {
    int64_t n_in;
    TPU_RETURN_IF_ERROR(tpu_buf_check(ins[k], kernel, names[k + 1], &n_in));
    bool ok = ins[k]->rank == 0 || ins[k]->rank == out->rank;
    for (int d = 0; ok && ins[k]->rank && d < out->rank; d++) {
      ok = ins[k]->dims[d] == out->dims[d] || ins[k]->dims[d] == 1;
    }
    if (!ok) {
      char a[160], b[160];
      format_dims(a, sizeof a, ins[k]);
      format_dims(b, sizeof b, out);
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: %s has shape %s, which does not broadcast to %s's %s", kernel,
                            names[k + 1], a, names[0], b);
    }
  }
  it->nops = nin + 1;
  it->numel = numel;
  if (numel == 0) return TPU_OK;

  /* gather the non-trivial dims with byte strides; 0 for broadcast inputs */
  int nd = 0;
  int64_t dims[TPU_MAX_RANK], strides[TPU_EW_MAX_OPERANDS][TPU_MAX_RANK];
  int64_t span[TPU_EW_MAX_OPERANDS] = {0};
  for (int d = 0; d < out->rank; d++) {
    if (out->dims[d] == 1) continue;
    if (out->strides[d] == 0) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: %s has stride 0 on dim %d of size %lld (it would write one "
                            "element many times)",
                            kernel, names[0], d, (long long)out->dims[d]);
    }
    dims[nd] = out->dims[d];
    for (int k = 0; k < it->nops; k++) {
      const tpu_buf_t *b = k == 0 ? out : ins[k - 1];
      int64_t s = (b->rank == 0 || b->dims[d] == 1) ? 0 : b->strides[d];
      int64_t esize = (int64_t)tpu_dtype_size(b->dtype);
      if (!extent_fits(s, esize, dims[nd], &span[k])) {
        return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                              "%s: %s's strides reach past the addressable range", kernel,
                              names[k]);
      }
      strides[k][nd] = s * esize;
    }
    nd++;
  }
  for (int k = 0; k < it->nops; k++) it->base[k] = (char *)(k == 0 ? out : ins[k - 1])->data;

  if (!keep_order) {
    /* walk every dim forward in the output; sort by output stride, largest first */
    for (int d = 0; d < nd; d++) {
      if (strides[0][d] < 0) {
        for (int k = 0; k < it->nops; k++) {
          it->base[k] += strides[k][d] * (dims[d] - 1);
          strides[k][d] = -strides[k][d];
        }
      }
    }
    for (int d = 1; d < nd; d++) {
      for (int e = d; e > 0 && strides[0][e - 1] < strides[0][e]; e--) {
        int64_t t = dims[e];
        dims[e] = dims[e - 1];
        dims[e - 1] = t;
        for (int k = 0; k < it->nops; k++) {
          t = strides[k][e];
          strides[k][e] = strides[k][e - 1];
          strides[k][e - 1] = t;
        }
      }
    }
  }

  /* merge dim d into the previous one where every operand is contiguous across them */
  int r = 0;
  for (int d = 0; d < nd; d++) {
    bool merge = r > 0;
    for (int k = 0; merge && k < it->nops; k++) {
      merge = it->strides[k][r - 1] == strides[k][d] * dims[d];
    }
    if (merge) {
      it->dims[r - 1] *= dims[d];
      for (int k = 0; k < it->nops; k++) it->strides[k][r - 1] = strides[k][d];
    } else {
      it->dims[r] = dims[d];
      for (int k = 0; k < it->nops; k++) it->strides[k][r] = strides[k][d];
      r++;
    }
  }
  if (r == 0) { /* a single element */
    it->dims[0] = 1;
    r = 1;
  }
  it->ndim = r;
  return TPU_OK;
}

typedef struct run_job {
  const tpu_ew_iter_t *it;
  tpu_ew_seg_fn fn;
  void *ctx;
} run_job;

/* Elements [begin, end) as 2-d segments: a partial row alone, then runs of whole rows
 * up to the end of the next-outer dim (or of the range). Offsets, not pointers, are
 * carried between segments, so nothing points outside an operand in between. */
static void run_range(void *arg, int64_t begin, int64_t end) {
  const run_job *job = arg;
  const tpu_ew_iter_t *it = job->it;
  const int nd = it->ndim, last = nd - 1, nops = it->nops;
  const int64_t len = it->dims[last];
  int64_t idx[TPU_MAX_RANK], off[TPU_EW_MAX_OPERANDS] = {0};
  int64_t rem = begin;
  for (int d = last; d >= 0; d--) {
    idx[d] = rem % it->dims[d];
    rem /= it->dims[d];
    for (int k = 0; k < nops; k++) off[k] += idx[d] * it->strides[k][d];
  }
  tpu_ew_seg_t seg;
  for (int k = 0; k < nops; k++) {
    seg.strides[k] = it->strides[k][last];
    seg.outer[k] = nd > 1 ? it->strides[k][last - 1] : 0;
  }
  int64_t pos = begin;
  while (pos < end) {
    for (int k = 0; k < nops; k++) seg.ptrs[k] = it->base[k] + off[k];
    seg.pos = pos;
    if (idx[last] != 0 || nd == 1 || end - pos < len) { /* part of one row */
      seg.n = len - idx[last] < end - pos ? len - idx[last] : end - pos;
      seg.rows = 1;
      idx[last] += seg.n;
      for (int k = 0; k < nops; k++) off[k] += seg.n * seg.strides[k];
    } else { /* whole rows */
      int64_t rows = (end - pos) / len;
      if (rows > it->dims[last - 1] - idx[last - 1]) rows = it->dims[last - 1] - idx[last - 1];
      seg.n = len;
      seg.rows = rows;
      idx[last - 1] += rows;
      for (int k = 0; k < nops; k++) off[k] += rows * seg.outer[k];
    }
    job->fn(job->ctx, &seg);
    pos += seg.n * seg.rows;
    for (int d = last; d > 0; d--) { /* carry (whole rows may fill dim last - 1) */
      if (idx[d] < it->dims[d]) continue;
      idx[d] = 0;
      idx[d - 1]++;
      for (int k = 0; k < nops; k++) {
        off[k] += it->strides[k][d - 1] - it->dims[d] * it->strides[k][d];
      }
    }
  }
}

void tpu_ew_iter_run2(const tpu_ew_iter_t *it, tpu_pool_t *pool, tpu_ew_seg_fn fn, void *ctx) {
  if (it->numel == 0) return;
  run_job job = {it, fn, ctx};
  if (it->numel <= TPU_EW_GRAIN) { /* too short to wake a worker for: helpers only */
    tpu_pool_parallel_for_helpers(pool, it->numel, TPU_EW_HELPER_GRAIN, run_range, &job);
  } else {
    tpu_pool_parallel_for(pool, it->numel, TPU_EW_GRAIN, run_range, &job);
  }
}

/* The 1-d loops over 2-d segments: one call per row. */
typedef struct rows_job {
  tpu_ew_loop_fn fn;
  void *ctx;
  int nops;
} rows_job;

static void rows_loop(void *arg, const tpu_ew_seg_t *seg) {
  const rows_job *job = arg;
  char *ptrs[TPU_EW_MAX_OPERANDS];
  for (int64_t r = 0; r < seg->rows; r++) {
    for (int k = 0; k < job->nops; k++) ptrs[k] = seg->ptrs[k] + r * seg->outer[k];
    job->fn(job->ctx, ptrs, seg->strides, seg->n, seg->pos + r * seg->n);
  }
}

void tpu_ew_iter_run(const tpu_ew_iter_t *it, tpu_pool_t *pool, tpu_ew_loop_fn fn, void *ctx) {
  rows_job job = {fn, ctx, it->nops};
  tpu_ew_iter_run2(it, pool, rows_loop, &job);
}
