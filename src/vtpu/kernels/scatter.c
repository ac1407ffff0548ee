/* scatter.c: tpu_kernel_scatter, StableHLO scatter (without operand batching dims) with
 * REPLACE or ADD as the update computation.
 *
 * out = x, then for every scatter position s (the updates dims not in update_window_dims,
 * which match indices' dims without index_vector_dim) in row-major order: the index
 * vector indices[s with index_vector_dim inserted, :] gives the window start in the x
 * dims scatter_dims_to_operand_dims (other dims start at 0), and the update window
 * (updates dims update_window_dims, one per x dim not in inserted_window_dims) is written
 * (REPLACE: the last write in scatter order wins) or added (ADD: in scatter order; f16 and
 * bf16 add in f32 and round each time, as PyTorch's index_add on CPU; bool ADD is OR), or
 * combined by MUL, MAX or MIN in scatter order (floats in f64, rounded each time, which is
 * exact for f32; MAX/MIN keep a NaN from either side, as PyTorch's scatter_reduce amax/amin
 * on CPU; integers multiply with wrap-around; bool MUL/MIN are AND, MAX is OR).
 *
 * A window not inside x is an error with check_bounds (TPU_ERR_OUT_OF_RANGE, "scatter:
 * index 7 out of range for dimension 0 of size 5", the first in scatter order, found
 * before out is touched), else skipped entirely, as XLA does.
 *
 * Parallel without races or order changes: when an index entry addresses an x dim where
 * the window is one element wide (the row of index_add / embedding backward, any dim of
 * torch.scatter), each thread owns a range of that dim and applies, in scatter order, the
 * updates that land in it. Else, when some x dim is a window dim no index moves, threads
 * split that dim and each applies every update to its own part of out.
 */
#include <stdatomic.h>

#include "vtpu/kernels/strided.h"
#include "vtpu/kernels/vec.h"

static const char *K = "scatter";

typedef struct sjob {
  const tpu_scatter_attrs_t *a;
  const tpu_buf_t *x, *idx, *upd, *out;
  size_t esize;
  const tpu_vec_ops_t *vec;  /* SIMD loops of the elementwise kernels */
  int nvec;
  int64_t vstride;
  tpu_loop_t batch;          /* scatter dims: buffers 0 = indices, 1 = updates */
  int64_t nbatch;
  int wrank;                 /* window dims, in x order: */
  int64_t wdims[TPU_MAX_RANK], wus[TPU_MAX_RANK], wos[TPU_MAX_RANK]; /* size, strides */
  int64_t wsize[TPU_MAX_RANK]; /* window size per x dim (1 for inserted dims) */
  int own;                   /* index entry whose x dim has window size 1, -1 for none */
  int split;                 /* window dim no index moves, -1 for none */
} sjob_t;

static int64_t load_index(const tpu_buf_t *b, int64_t off) {
  return b->dtype == TPU_I64 ? ((const int64_t *)b->data)[off] : ((const int32_t *)b->data)[off];
}

static bool in_list(const int64_t *v, int n, int64_t x) {
  for (int i = 0; i < n; i++) {
    if (v[i] == x) return true;
  }
  return false;
}

static bool sorted_unique(const int64_t *v, int n, int64_t limit) {
  for (int i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= limit || (i > 0 && v[i] <= v[i - 1])) return false;
  }
  return true;
}

/* The out offset of the window of the batch position at |pos|, false if it is not
 * inside x (then *bad_k is the index vector entry at fault and *bad_v its value). */
static bool window_start(const sjob_t *j, const tpu_loop_pos_t *pos, int64_t *oo, int *bad_k,
                         int64_t *bad_v) {
  const tpu_scatter_attrs_t *a = j->a;
  int64_t off = 0;
  for (int k = 0; k < j->nvec; k++) {
    int d = (int)a->scatter_dims_to_operand_dims[k];
    int64_t v = load_index(j->idx, pos->off[0] + k * j->vstride);
    if (v < 0 || v > j->x->dims[d] - j->wsize[d]) {
      *bad_k = k;
      *bad_v = v;
      return false;
    }
    off += v * j->out->strides[d];
  }
  *oo = off;
  return true;
}

/* o combined with u by MUL, MAX or MIN (floats; a NaN on either side wins for MAX/MIN). */
static double combine_f64(tpu_scatter_kind_t kind, double o, double u) {
  switch (kind) {
    case TPU_SCATTER_MUL: return o * u;
    case TPU_SCATTER_MAX: return (u != u || u > o) ? u : o;
    default: return (u != u || u < o) ? u : o;
  }
}

static int64_t combine_i64(tpu_scatter_kind_t kind, int64_t o, int64_t u) {
  switch (kind) {
    case TPU_SCATTER_MUL: return (int64_t)((uint64_t)o * (uint64_t)u); /* wraps */
    case TPU_SCATTER_MAX: return u > o ? u : o;
    default: return u < o ? u : o;
  }
}

/* One run of MUL/MAX/MIN updates, element by element in scatter order. */
static void combine_run(const sjob_t *j, int64_t uo, int64_t su, int64_t oo, int64_t so,
                        int64_t n) {
  const void *u = j->upd->data;
  void *o = j->out->data;
  tpu_dtype_t dt = j->out->dtype;
  tpu_scatter_kind_t kind = j->a->kind;
  for (int64_t i = 0; i < n; i++) {
    int64_t io = oo + i * so, iu = uo + i * su;
    if (tpu_dtype_is_float(dt)) {
      tpu_store_f64(o, dt, io, combine_f64(kind, tpu_load_f64(o, dt, io), tpu_load_f64(u, dt, iu)));
    } else if (dt == TPU_BOOL) {
      bool a = tpu_load_truth(o, dt, io), b = tpu_load_truth(u, dt, iu);
      ((uint8_t *)o)[io] = kind == TPU_SCATTER_MAX ? (a || b) : (a && b);
    } else {
      tpu_store_i64(o, dt, io, combine_i64(kind, tpu_load_i64(o, dt, io), tpu_load_i64(u, dt, iu)));
    }
  }
}

/* Applies one run of |n| updates (stride su) to out (stride so). */
static void apply_run(const sjob_t *j, int64_t uo, int64_t su, int64_t oo, int64_t so,
                      int64_t n) {
  const void *u = j->upd->data;
  void *o = j->out->data;
  if (j->a->kind == TPU_SCATTER_REPLACE) {
    if (su == 1 && so == 1) {
      memcpy((char *)o + oo * (int64_t)j->esize, (const char *)u + uo * (int64_t)j->esize,
             (size_t)n * j->esize);
    } else {
      for (int64_t i = 0; i < n; i++) tpu_copy_elem(o, oo + i * so, u, uo + i * su, j->esize);
    }
    return;
  }
  if (j->a->kind != TPU_SCATTER_ADD) {
    combine_run(j, uo, su, oo, so, n);
    return;
  }
  switch (j->out->dtype) {
    case TPU_F32: {
      float *po = (float *)o + oo;
      const float *pu = (const float *)u + uo;
      if (so == 1 && su == 1 && n >= 16) { /* rows: the elementwise SIMD add */
        j->vec->binary_f32(TPU_OP_ADD, po, 1, pu, 1, po, n);
        return;
      }
      for (int64_t i = 0; i < n; i++) po[i * so] += pu[i * su];
      return;
    }
    case TPU_F64: {
      double *po = (double *)o + oo;
      const double *pu = (const double *)u + uo;
      for (int64_t i = 0; i < n; i++) po[i * so] += pu[i * su];
      return;
    }
    case TPU_BF16: {
      uint16_t *po = (uint16_t *)o + oo;
      const uint16_t *pu = (const uint16_t *)u + uo;
      for (int64_t i = 0; i < n; i++) {
        po[i * so] = tpu_f32_to_bf16(tpu_bf16_to_f32(po[i * so]) + tpu_bf16_to_f32(pu[i * su]));
      }
      return;
    }
    case TPU_F16: {
      uint16_t *po = (uint16_t *)o + oo;
      const uint16_t *pu = (const uint16_t *)u + uo;
      for (int64_t i = 0; i < n; i++) {
        po[i * so] = tpu_f32_to_f16(tpu_f16_to_f32(po[i * so]) + tpu_f16_to_f32(pu[i * su]));
      }
      return;
    }
    case TPU_BOOL: {
      uint8_t *po = (uint8_t *)o + oo;
      const uint8_t *pu = (const uint8_t *)u + uo;
      for (int64_t i = 0; i < n; i++) po[i * so] = po[i * so] | (pu[i * su] != 0);
      return;
    }
    default: /* integers wrap */
      for (int64_t i = 0; i < n; i++) {
        uint64_t s = (uint64_t)tpu_load_i64(o, j->out->dtype, oo + i * so) +
                     (uint64_t)tpu_load_i64(u, j->upd->dtype, uo + i * su);
        tpu_store_i64(o, j->out->dtype, oo + i * so, (int64_t)s);
      }
      return;
  }
}

/* Applies every update in scatter order, restricted to the updates whose index entry
 * |own_k| lies in [own_lo, own_hi) (all of them when own_k < 0) and to [w_lo, w_hi) of
 * window dim |j->split| (all of it when w_lo < 0). */
static void apply_updates(const sjob_t *j, int own_k, int64_t own_lo, int64_t own_hi,
                          int64_t w_lo, int64_t w_hi) {
  /* the window loop: buffers 0 = updates, 1 = out */
  tpu_loop_t w = {.rank = j->wrank, .nbufs = 2};
  int64_t u0 = 0, o0 = 0;
  for (int d = 0; d < j->wrank; d++) {
    w.dims[d] = j->wdims[d];
    w.strides[0][d] = j->wus[d];
    w.strides[1][d] = j->wos[d];
  }
  if (w_lo >= 0) {
    w.dims[j->split] = w_hi - w_lo;
    u0 = w_lo * j->wus[j->split];
    o0 = w_lo * j->wos[j->split];
  }
  tpu_loop_simplify(&w);
  int in = w.rank - 1;
  int64_t run = in >= 0 ? w.dims[in] : 1;
  int64_t su = in >= 0 ? w.strides[0][in] : 0, so = in >= 0 ? w.strides[1][in] : 0;
  int64_t nruns = in >= 0 ? tpu_loop_numel(&w) / run : 1;
  tpu_loop_pos_t bpos, wpos;
  tpu_loop_seek(&j->batch, j->batch.rank, 0, &bpos);
  for (int64_t b = 0; b < j->nbatch; b++, tpu_loop_step(&j->batch, j->batch.rank, &bpos)) {
    if (own_k >= 0) {
      int64_t v = load_index(j->idx, bpos.off[0] + own_k * j->vstride);
      if (v < own_lo || v >= own_hi) continue;
    }
    int64_t oo, bad_v;
    int bad_k;
    if (!window_start(j, &bpos, &oo, &bad_k, &bad_v)) continue; /* skipped window */
    tpu_loop_seek(&w, in > 0 ? in : 0, 0, &wpos);
    for (int64_t r = 0; r < nruns; r++) {
      apply_run(j, bpos.off[1] + u0 + wpos.off[0], su, oo + o0 + wpos.off[1], so, run);
      if (in > 0) tpu_loop_step(&w, in, &wpos);
    }
  }
}

/* Threads own ranges of out along the dim of index entry j->own (window size 1 there). */
static void own_task(void *ctx, int64_t begin, int64_t end) {
  const sjob_t *j = ctx;
  apply_updates(j, j->own, begin, end, -1, -1);
}

/* Threads own ranges of window dim j->split (a dim no index moves). */
static void window_task(void *ctx, int64_t begin, int64_t end) {
  apply_updates(ctx, -1, 0, 0, begin, end);
}

static tpu_status_t plan(sjob_t *j, int64_t nindices) {
  const tpu_scatter_attrs_t *a = j->a;
  const tpu_buf_t *x = j->x, *idx = j->idx, *upd = j->upd, *out = j->out;
  if (idx->dtype != TPU_I64 && idx->dtype != TPU_I32) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: indices are %s, expected i64 or i32",
                          K, tpu_dtype_name(idx->dtype));
  }
  if (upd->dtype != x->dtype || out->dtype != x->dtype) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: x, updates and out dtypes differ", K);
  }
  if ((unsigned)a->kind > TPU_SCATTER_MIN) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: unknown kind %d", K, (int)a->kind);
  }
  if (out->rank != x->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out rank differs from x", K);
  }
  for (int d = 0; d < x->rank; d++) {
    if (out->dims[d] != x->dims[d]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out shape differs from x", K);
    }
  }
  int64_t ivd = a->index_vector_dim;
  if (ivd < 0 || ivd > idx->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: index_vector_dim %lld out of range", K,
                          (long long)ivd);
  }
  j->nvec = ivd < idx->rank ? (int)idx->dims[ivd] : 1;
  j->vstride = ivd < idx->rank ? idx->strides[ivd] : 0;
  if (a->num_scatter_dims != j->nvec || j->nvec > x->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: %d scatter_dims_to_operand_dims for index vectors of %d", K,
                          a->num_scatter_dims, j->nvec);
  }
  for (int k = 0; k < j->nvec; k++) {
    int64_t d = a->scatter_dims_to_operand_dims[k];
    if (d < 0 || d >= x->rank || in_list(a->scatter_dims_to_operand_dims, k, d)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: bad scatter_dims_to_operand_dims[%d] = %lld", K, k, (long long)d);
    }
  }
  if (a->num_inserted_window_dims < 0 || a->num_update_window_dims < 0 ||
      !sorted_unique(a->inserted_window_dims, a->num_inserted_window_dims, x->rank) ||
      a->num_update_window_dims + a->num_inserted_window_dims != x->rank ||
      !sorted_unique(a->update_window_dims, a->num_update_window_dims, upd->rank)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: bad update_window_dims / inserted_window_dims", K);
  }
  int batch_rank = idx->rank - (ivd < idx->rank ? 1 : 0);
  if (upd->rank != batch_rank + a->num_update_window_dims) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: updates rank %d, expected %d", K,
                          upd->rank, batch_rank + a->num_update_window_dims);
  }
  /* window dims: x dims not inserted, in order, matched with update_window_dims */
  int k = 0;
  for (int d = 0; d < x->rank; d++) {
    j->wsize[d] = 1;
    if (in_list(a->inserted_window_dims, a->num_inserted_window_dims, d)) continue;
    int64_t ud = a->update_window_dims[k++];
    int64_t size = upd->dims[ud];
    if (size > x->dims[d] && nindices > 0) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: update window %lld larger than dimension %d of size %lld", K,
                            (long long)size, d, (long long)x->dims[d]);
    }
    j->wsize[d] = size;
    j->wdims[j->wrank] = size;
    j->wus[j->wrank] = upd->strides[ud];
    j->wos[j->wrank] = out->strides[d];
    if (j->split < 0 && !in_list(a->scatter_dims_to_operand_dims, j->nvec, d) && size >= 2) {
      j->split = j->wrank; /* the outermost dim no index moves */
    }
    j->wrank++;
  }
  /* the index entry to split threads over: window size 1 in its dim, the largest dim */
  for (int kk = 0; kk < j->nvec; kk++) {
    int64_t d = a->scatter_dims_to_operand_dims[kk];
    if (j->wsize[d] == 1 && x->dims[d] >= 2 &&
        (j->own < 0 || x->dims[d] > x->dims[a->scatter_dims_to_operand_dims[j->own]])) {
      j->own = kk;
    }
  }
  /* scatter dims of updates match indices' dims without index_vector_dim */
  j->batch.nbufs = 2;
  int bi = 0;
  for (int ud = 0; ud < upd->rank; ud++) {
    if (in_list(a->update_window_dims, a->num_update_window_dims, ud)) continue;
    if (bi == ivd) bi++;
    if (upd->dims[ud] != idx->dims[bi]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: updates dim %d is %lld, indices dim %d is %lld", K, ud,
                            (long long)upd->dims[ud], bi, (long long)idx->dims[bi]);
    }
    j->batch.dims[j->batch.rank] = upd->dims[ud];
    j->batch.strides[0][j->batch.rank] = idx->strides[bi];
    j->batch.strides[1][j->batch.rank] = upd->strides[ud];
    j->batch.rank++;
    bi++;
  }
  j->nbatch = tpu_loop_numel(&j->batch);
  tpu_loop_simplify(&j->batch);
  return TPU_OK;
}

/* out = x (when they are not the same view). */
static void copy_x(const sjob_t *j, int64_t n) {
  const tpu_buf_t *x = j->x, *out = j->out;
  bool same = x->data == out->data;
  for (int d = 0; same && d < x->rank; d++) same = x->strides[d] == out->strides[d];
  if (same || n == 0) return;
  tpu_loop_t l = {.rank = x->rank, .nbufs = 2};
  for (int d = 0; d < x->rank; d++) l.dims[d] = x->dims[d];
  tpu_loop_set_buf(&l, 0, x);
  tpu_loop_set_buf(&l, 1, out);
  tpu_loop_simplify(&l);
  int in = l.rank - 1;
  if (in < 0) {
    tpu_copy_elem(out->data, 0, x->data, 0, j->esize);
    return;
  }
  int64_t run = l.dims[in], nruns = n / run;
  tpu_loop_pos_t pos;
  tpu_loop_seek(&l, in, 0, &pos);
  for (int64_t r = 0; r < nruns; r++) {
    if (l.strides[0][in] == 1 && l.strides[1][in] == 1) {
      memcpy((char *)out->data + pos.off[1] * (int64_t)j->esize,
             (const char *)x->data + pos.off[0] * (int64_t)j->esize, (size_t)run * j->esize);
    } else {
      for (int64_t i = 0; i < run; i++) {
        tpu_copy_elem(out->data, pos.off[1] + i * l.strides[1][in], x->data,
                      pos.off[0] + i * l.strides[0][in], j->esize);
      }
    }
    tpu_loop_step(&l, in, &pos);
  }
}

tpu_status_t tpu_kernel_scatter(const tpu_scatter_attrs_t *attrs, const tpu_buf_t *x,
                                const tpu_buf_t *indices, const tpu_buf_t *updates,
                                const tpu_buf_t *out, tpu_pool_t *pool) {
  int64_t nx, ni, nu, nout;
  if (!attrs) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: attrs is NULL", K);
  TPU_RETURN_IF_ERROR(tpu_buf_check(x, K, "x", &nx));
  TPU_RETURN_IF_ERROR(tpu_buf_check(indices, K, "indices", &ni));
  TPU_RETURN_IF_ERROR(tpu_buf_check(updates, K, "updates", &nu));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &nout));
  sjob_t j = {.a = attrs, .x = x, .idx = indices, .upd = updates, .out = out, .own = -1,
             .split = -1};
  j.esize = tpu_dtype_size(x->dtype);
  j.vec = tpu_vec_ops();
  TPU_RETURN_IF_ERROR(plan(&j, ni));
  bool empty_window = false;
  for (int d = 0; d < j.wrank; d++) empty_window |= j.wdims[d] == 0;
  if (attrs->check_bounds && !empty_window) { /* every window inside x, before any write */
    tpu_loop_pos_t pos;
    tpu_loop_seek(&j.batch, j.batch.rank, 0, &pos);
    for (int64_t b = 0; b < j.nbatch; b++) {
      int64_t oo, v;
      int k;
      if (!window_start(&j, &pos, &oo, &k, &v)) {
        int64_t d = attrs->scatter_dims_to_operand_dims[k];
        if (j.wsize[d] == 1) {
          return tpu_status_set(TPU_ERR_OUT_OF_RANGE,
                                "%s: index %lld out of range for dimension %lld of size %lld",
                                K, (long long)v, (long long)d, (long long)x->dims[d]);
        }
        return tpu_status_set(TPU_ERR_OUT_OF_RANGE,
                              "%s: index %lld out of range for dimension %lld of size %lld "
                              "(window of %lld)",
                              K, (long long)v, (long long)d, (long long)x->dims[d],
                              (long long)j.wsize[d]);
      }
      tpu_loop_step(&j.batch, j.batch.rank, &pos);
    }
  }
  copy_x(&j, nout);
  if (j.nbatch == 0 || empty_window || nout == 0) return TPU_OK;
  int threads = tpu_pool_num_threads(pool);
  if (threads == 1 || nu < 32768 || (j.own < 0 && j.split < 0)) {
    apply_updates(&j, -1, 0, 0, -1, -1);
    return TPU_OK;
  }
  if (j.own >= 0) { /* each thread applies the updates landing in its range of rows */
    int64_t d = attrs->scatter_dims_to_operand_dims[j.own];
    tpu_pool_parallel_for(pool, x->dims[d], 1, own_task, &j);
    return TPU_OK;
  }
  /* split the window dim in pieces of at least 64 bytes of out per window row */
  int64_t per = nu / j.nbatch / j.wdims[j.split]; /* elements per step of the split dim */
  int64_t grain = per * (int64_t)j.esize >= 64 ? 1 : 64 / (per * (int64_t)j.esize) + 1;
  tpu_pool_parallel_for(pool, j.wdims[j.split], grain, window_task, &j);
  return TPU_OK;
}
