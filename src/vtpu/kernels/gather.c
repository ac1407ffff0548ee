/* gather.c: tpu_kernel_gather, StableHLO gather (without operand batching dims).
 *
 * out has the batch dims (indices' dims without index_vector_dim, in order, at the out
 * positions not in offset_dims) and the offset dims (slice_sizes of the x dims not in
 * collapsed_slice_dims, in order, at offset_dims). For a batch position b, the index
 * vector is indices[b with index_vector_dim inserted, :] (a scalar if index_vector_dim
 * == indices rank); its entry k is the start of the slice in x dim start_index_map[k]
 * (other dims start at 0). out[b, offsets] = x[start + offsets].
 *
 * A start outside [0, x.dims[d] - slice_sizes[d]] is an error with check_bounds
 * (TPU_ERR_OUT_OF_RANGE, "gather: index 7 out of range for dimension 0 of size 5", the
 * first such index in batch order), else clamped into range as StableHLO does.
 *
 * Work: batch positions in parallel (each writes its own slice of out). A slice is copied
 * as runs along its innermost dim (memcpy when contiguous in x and out), so
 * index_select/embedding rows are one memcpy each and torch.gather-style element
 * gathers (iota-concatenated index vectors, all slice sizes 1) one element each.
 */
#include <pthread.h>

#include "vtpu/kernels/strided.h"

static const char *K = "gather";

typedef struct gjob {
  const tpu_gather_attrs_t *a;
  const tpu_buf_t *x, *idx, *out;
  size_t esize;
  int nvec;                 /* index vector length */
  int64_t vstride;          /* indices stride along index_vector_dim (0 if implicit) */
  tpu_loop_t batch;         /* batch dims: buffers 0 = indices, 1 = out */
  tpu_loop_t slice;         /* offset dims: buffers 0 = x, 1 = out */
  int64_t nbatch;
  int64_t hi[TPU_MAX_RANK], xs[TPU_MAX_RANK]; /* per index entry: largest start, x stride */
  /* the first out-of-range index, by batch position */
  pthread_mutex_t mu;
  int64_t err_b, err_value, err_dim;
} gjob_t;

/* Copies |run| elements from x offset xs (stride sx) to out offset os (stride so). */
static void copy_run(const gjob_t *g, int64_t xs, int64_t sx, int64_t os, int64_t so,
                     int64_t run) {
  const char *x = g->x->data;
  char *out = g->out->data;
  size_t es = g->esize;
  if (sx == 1 && so == 1) {
    memcpy(out + os * (int64_t)es, x + xs * (int64_t)es, (size_t)run * es);
  } else {
    for (int64_t i = 0; i < run; i++) tpu_copy_elem(out, os + i * so, x, xs + i * sx, es);
  }
}

/* Copies one slice from x offset xo to out offset oo. */
static void copy_slice(const gjob_t *g, int64_t xo, int64_t oo) {
  const tpu_loop_t *sl = &g->slice;
  if (sl->rank == 0) {
    tpu_copy_elem(g->out->data, oo, g->x->data, xo, g->esize);
    return;
  }
  int in = sl->rank - 1;
  int64_t run = sl->dims[in], sx = sl->strides[0][in], so = sl->strides[1][in];
  if (in == 0) { /* one run (a row of an embedding): no loop machinery */
    copy_run(g, xo, sx, oo, so, run);
    return;
  }
  int64_t nruns = tpu_loop_numel(sl) / run;
  tpu_loop_pos_t pos;
  tpu_loop_seek(sl, in, 0, &pos);
  for (int64_t r = 0; r < nruns; r++) {
    copy_run(g, xo + pos.off[0], sx, oo + pos.off[1], so, run);
    tpu_loop_step(sl, in, &pos);
  }
}

/* Records an out-of-range index at batch position |b| if it is the first so far. */
static void record_error(gjob_t *g, int64_t b, int64_t v, int k) {
  pthread_mutex_lock(&g->mu);
  if (b < g->err_b) {
    g->err_b = b;
    g->err_value = v;
    g->err_dim = g->a->start_index_map[k];
  }
  pthread_mutex_unlock(&g->mu);
}

/* Batch positions [begin, end) as runs along the innermost batch dim; IT is the index
 * type. Returns at the first out-of-range index with check_bounds (later positions of
 * the chunk cannot be the first). */
#define GATHER_TASK(NAME, IT)                                                          \
  static void NAME(gjob_t *g, int64_t begin, int64_t end) {                            \
    const IT *ix = g->idx->data;                                                       \
    const tpu_loop_t *bl = &g->batch;                                                  \
    int in = bl->rank - 1;                                                             \
    int64_t is = in >= 0 ? bl->strides[0][in] : 0, os = in >= 0 ? bl->strides[1][in] : 0; \
    bool elem = g->slice.rank == 0, check = g->a->check_bounds;                        \
    tpu_loop_pos_t pos;                                                                \
    tpu_loop_seek(bl, bl->rank, begin, &pos);                                          \
    for (int64_t b = begin; b < end;) {                                                \
      int64_t run = in >= 0 ? bl->dims[in] - pos.idx[in] : 1;                          \
      if (run > end - b) run = end - b;                                                \
      for (int64_t i = 0; i < run; i++) {                                              \
        const IT *v = ix + pos.off[0] + i * is;                                        \
        int64_t xo = 0;                                                                \
        for (int k = 0; k < g->nvec; k++) {                                            \
          int64_t val = v[k * g->vstride];                                             \
          if ((uint64_t)val > (uint64_t)g->hi[k]) {                                    \
            if (check) {                                                               \
              record_error(g, b + i, val, k);                                          \
              return;                                                                  \
            }                                                                          \
            val = val < 0 ? 0 : g->hi[k];                                              \
          }                                                                            \
          xo += val * g->xs[k];                                                        \
        }                                                                              \
        if (elem) {                                                                    \
          tpu_copy_elem(g->out->data, pos.off[1] + i * os, g->x->data, xo, g->esize);  \
        } else {                                                                       \
          copy_slice(g, xo, pos.off[1] + i * os);                                      \
        }                                                                              \
      }                                                                                \
      b += run;                                                                        \
      if (b < end) tpu_loop_seek(bl, bl->rank, b, &pos);                               \
    }                                                                                  \
  }
GATHER_TASK(task_i64, int64_t)
GATHER_TASK(task_i32, int32_t)

static void gather_task(void *ctx, int64_t begin, int64_t end) {
  gjob_t *g = ctx;
  if (g->idx->dtype == TPU_I64) {
    task_i64(g, begin, end);
  } else {
    task_i32(g, begin, end);
  }
}

static bool sorted_unique(const int64_t *v, int n, int64_t limit) {
  for (int i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= limit || (i > 0 && v[i] <= v[i - 1])) return false;
  }
  return true;
}

static bool in_list(const int64_t *v, int n, int64_t x) {
  for (int i = 0; i < n; i++) {
    if (v[i] == x) return true;
  }
  return false;
}

/* Checks the dimension numbers and shapes; fills the loops of |g|. */
static tpu_status_t plan(gjob_t *g, int64_t nindices) {
  const tpu_gather_attrs_t *a = g->a;
  const tpu_buf_t *x = g->x, *idx = g->idx, *out = g->out;
  if (idx->dtype != TPU_I64 && idx->dtype != TPU_I32) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: indices are %s, expected i64 or i32",
                          K, tpu_dtype_name(idx->dtype));
  }
  if (out->dtype != x->dtype) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out is %s but x is %s", K,
                          tpu_dtype_name(out->dtype), tpu_dtype_name(x->dtype));
  }
  int64_t ivd = a->index_vector_dim;
  if (ivd < 0 || ivd > idx->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: index_vector_dim %lld out of range", K,
                          (long long)ivd);
  }
  g->nvec = ivd < idx->rank ? (int)idx->dims[ivd] : 1;
  g->vstride = ivd < idx->rank ? idx->strides[ivd] : 0;
  if (a->num_start_index_map != g->nvec || a->num_start_index_map > x->rank ||
      a->num_collapsed < 0 || a->num_collapsed > x->rank || a->num_offset_dims < 0 ||
      a->num_offset_dims > TPU_MAX_RANK) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: %d start_index_map entries for index vectors of %d", K,
                          a->num_start_index_map, g->nvec);
  }
  for (int k = 0; k < a->num_start_index_map; k++) {
    int64_t d = a->start_index_map[k];
    if (d < 0 || d >= x->rank || in_list(a->start_index_map, k, d)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: bad start_index_map[%d] = %lld", K,
                            k, (long long)d);
    }
    g->hi[k] = x->dims[d] - a->slice_sizes[d];
    g->xs[k] = x->strides[d];
  }
  if (!sorted_unique(a->collapsed_slice_dims, a->num_collapsed, x->rank)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: bad collapsed_slice_dims", K);
  }
  for (int d = 0; d < x->rank; d++) {
    int64_t s = a->slice_sizes[d];
    bool collapsed = in_list(a->collapsed_slice_dims, a->num_collapsed, d);
    /* (a slice larger than its dim is fine when there are no indices: x[empty]) */
    if (s < 0 || (s > x->dims[d] && nindices > 0) || (collapsed && s != 1)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: slice size %lld for dimension %d of size %lld", K,
                            (long long)s, d, (long long)x->dims[d]);
    }
  }
  int batch_rank = idx->rank - (ivd < idx->rank ? 1 : 0);
  if (a->num_offset_dims != x->rank - a->num_collapsed ||
      out->rank != batch_rank + a->num_offset_dims ||
      !sorted_unique(a->offset_dims, a->num_offset_dims, out->rank)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: bad offset_dims for out rank %d", K,
                          out->rank);
  }
  /* out dims: offset dims take slice sizes, batch dims take indices dims */
  int k = 0, bi = 0;
  g->batch.nbufs = 2;
  g->slice.nbufs = 2;
  for (int od = 0; od < out->rank; od++) {
    int64_t want;
    if (in_list(a->offset_dims, a->num_offset_dims, od)) {
      while (in_list(a->collapsed_slice_dims, a->num_collapsed, k)) k++;
      want = a->slice_sizes[k];
      g->slice.dims[g->slice.rank] = want;
      g->slice.strides[0][g->slice.rank] = x->strides[k];
      g->slice.strides[1][g->slice.rank] = out->strides[od];
      g->slice.rank++;
      k++;
    } else {
      if (bi == ivd) bi++;
      want = idx->dims[bi];
      g->batch.dims[g->batch.rank] = want;
      g->batch.strides[0][g->batch.rank] = idx->strides[bi];
      g->batch.strides[1][g->batch.rank] = out->strides[od];
      g->batch.rank++;
      bi++;
    }
    if (out->dims[od] != want) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out dim %d is %lld, expected %lld", K,
                            od, (long long)out->dims[od], (long long)want);
    }
  }
  g->nbatch = tpu_loop_numel(&g->batch);
  tpu_loop_simplify(&g->batch);
  tpu_loop_simplify(&g->slice);
  return TPU_OK;
}

tpu_status_t tpu_kernel_gather(const tpu_gather_attrs_t *attrs, const tpu_buf_t *x,
                               const tpu_buf_t *indices, const tpu_buf_t *out,
                               tpu_pool_t *pool) {
  int64_t nx, ni, nout;
  if (!attrs) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: attrs is NULL", K);
  TPU_RETURN_IF_ERROR(tpu_buf_check(x, K, "x", &nx));
  TPU_RETURN_IF_ERROR(tpu_buf_check(indices, K, "indices", &ni));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &nout));
  gjob_t g = {.a = attrs, .x = x, .idx = indices, .out = out};
  g.esize = tpu_dtype_size(x->dtype);
  TPU_RETURN_IF_ERROR(plan(&g, ni));
  if (nout == 0) return TPU_OK;
  g.err_b = INT64_MAX;
  pthread_mutex_init(&g.mu, NULL);
  int64_t per = nout / g.nbatch; /* elements per slice */
  int64_t grain = per >= 32768 ? 1 : 32768 / (per ? per : 1); /* elements per chunk, about */
  tpu_pool_parallel_for(pool, g.nbatch, grain, gather_task, &g);
  pthread_mutex_destroy(&g.mu);
  if (g.err_b != INT64_MAX) {
    int64_t d = g.err_dim, size = x->dims[d], slice = attrs->slice_sizes[d];
    if (slice == 1) {
      return tpu_status_set(TPU_ERR_OUT_OF_RANGE,
                            "%s: index %lld out of range for dimension %lld of size %lld", K,
                            (long long)g.err_value, (long long)d, (long long)size);
    }
    return tpu_status_set(TPU_ERR_OUT_OF_RANGE,
                          "%s: index %lld out of range for dimension %lld of size %lld "
                          "(slice of %lld)",
                          K, (long long)g.err_value, (long long)d, (long long)size,
                          (long long)slice);
  }
  return TPU_OK;
}
