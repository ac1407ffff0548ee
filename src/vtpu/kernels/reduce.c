/* reduce.c: tpu_kernel_reduce, the entry point of the reduction kernels.
 *
 * Checks the arguments, handles empty results and empty reductions, and plans the loops:
 * kept dims (one per output) and reduced dims, each with size-1 dims dropped and
 * contiguous dims merged. For kinds whose result does not depend on the visiting order
 * (all but ARGMAX/ARGMIN) dims are first sorted by decreasing |stride|, so the innermost
 * reduced dim is the one with the smallest stride. The plan then runs on the columns
 * engine (reduce_cols.c) when it applies, else the lines engine (reduce_lines.c).
 */
#include <math.h>
#include <stdlib.h>

#include "vtpu/kernels/reduce_internal.h"

static const char *kind_name(tpu_reduce_kind_t kind) {
  static const char *names[] = {"SUM", "PROD", "MAX", "MIN", "AND", "OR", "ARGMAX", "ARGMIN"};
  return (unsigned)kind < sizeof names / sizeof *names ? names[kind] : "?";
}

tpu_status_t tpu_reduce_check(const char *name, tpu_reduce_kind_t kind, const tpu_buf_t *x,
                              const bool *dims, const tpu_buf_t *out, int64_t *out_m,
                              int64_t *out_n) {
  int64_t nx = 0, nout = 0;
  if ((unsigned)kind > TPU_REDUCE_ARGMIN) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: unknown kind %d", name, (int)kind);
  }
  TPU_RETURN_IF_ERROR(tpu_buf_check(x, name, "x", &nx));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, name, "out", &nout));
  if (!dims && x->rank > 0) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: dims is NULL", name);
  }
  int k = 0;
  int64_t n = 1;
  for (int d = 0; d < x->rank; d++) {
    if (dims[d]) {
      if (__builtin_mul_overflow(n, x->dims[d], &n)) {
        return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: reduced size overflows", name);
      }
      continue;
    }
    if (k >= out->rank || out->dims[k] != x->dims[d]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: out dim %d does not match kept x dim %d (%lld)", name, k, d,
                            (long long)x->dims[d]);
    }
    k++;
  }
  if (k != out->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: out has rank %d, expected %d (x rank minus reduced dims)", name,
                          out->rank, k);
  }
  bool arg = kind == TPU_REDUCE_ARGMAX || kind == TPU_REDUCE_ARGMIN;
  if (arg && !tpu_dtype_is_integer(out->dtype)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s writes integer indices, out is %s",
                          name, kind_name(kind), tpu_dtype_name(out->dtype));
  }
  *out_m = nout;
  *out_n = n;
  return TPU_OK;
}

/* The identity of |kind| in |dt|: floats +-inf for MIN/MAX, integers their range ends. */
static void identity_of(tpu_reduce_kind_t kind, tpu_dtype_t dt, double *f, int64_t *i) {
  static const int64_t lo[TPU_DTYPE_COUNT] = {
      [TPU_I64] = INT64_MIN, [TPU_I32] = INT32_MIN, [TPU_I16] = INT16_MIN, [TPU_I8] = INT8_MIN};
  static const int64_t hi[TPU_DTYPE_COUNT] = {[TPU_I64] = INT64_MAX, [TPU_I32] = INT32_MAX,
                                              [TPU_I16] = INT16_MAX, [TPU_I8] = INT8_MAX,
                                              [TPU_U8] = UINT8_MAX,  [TPU_BOOL] = 1};
  switch (kind) {
    case TPU_REDUCE_PROD: *f = 1; *i = 1; return;
    case TPU_REDUCE_AND: *f = 1; *i = dt == TPU_BOOL ? 1 : -1; return; /* all ones */
    case TPU_REDUCE_MAX: *f = -INFINITY; *i = lo[dt]; return;
    case TPU_REDUCE_MIN: *f = INFINITY; *i = hi[dt]; return;
    default: *f = 0; *i = 0; return;
  }
}

tpu_status_t tpu_reduce_fill_identity(const char *name, tpu_reduce_kind_t kind,
                                      const tpu_buf_t *out) {
  if (kind == TPU_REDUCE_ARGMAX || kind == TPU_REDUCE_ARGMIN) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: %s over an empty dimension (no elements to pick from)", name,
                          kind_name(kind));
  }
  double f;
  int64_t iv;
  identity_of(kind, out->dtype, &f, &iv);
  tpu_loop_t l = {.rank = out->rank, .nbufs = 1};
  for (int d = 0; d < out->rank; d++) l.dims[d] = out->dims[d];
  tpu_loop_set_buf(&l, 0, out);
  tpu_loop_simplify(&l);
  int64_t m = tpu_loop_numel(&l);
  tpu_loop_pos_t pos;
  tpu_loop_seek(&l, l.rank, 0, &pos);
  bool is_float = tpu_dtype_is_float(out->dtype);
  for (int64_t o = 0; o < m; o++) {
    if (is_float) {
      tpu_store_f64(out->data, out->dtype, pos.off[0], f);
    } else {
      tpu_store_i64(out->data, out->dtype, pos.off[0], iv);
    }
    tpu_loop_step(&l, l.rank, &pos);
  }
  return TPU_OK;
}

/* Stable sort of a loop's dims by decreasing |stride| of buffer 0. */
static void sort_dims(tpu_loop_t *l) {
  for (int i = 1; i < l->rank; i++) {
    for (int j = i; j > 0 && llabs(l->strides[0][j - 1]) < llabs(l->strides[0][j]); j--) {
      int64_t t = l->dims[j];
      l->dims[j] = l->dims[j - 1];
      l->dims[j - 1] = t;
      for (int b = 0; b < l->nbufs; b++) {
        t = l->strides[b][j];
        l->strides[b][j] = l->strides[b][j - 1];
        l->strides[b][j - 1] = t;
      }
    }
  }
}

static tpu_reduce_class_t class_of(tpu_reduce_kind_t kind, tpu_dtype_t dt) {
  if (kind == TPU_REDUCE_AND || kind == TPU_REDUCE_OR) return TPU_RCLS_I64;
  if (dt == TPU_F64) return TPU_RCLS_F64;
  if (tpu_dtype_is_float(dt)) return TPU_RCLS_F32;
  return TPU_RCLS_I64;
}

tpu_status_t tpu_kernel_reduce(tpu_reduce_kind_t kind, const tpu_buf_t *x, const bool *dims,
                               const tpu_buf_t *out, tpu_pool_t *pool) {
  int64_t m, n;
  TPU_RETURN_IF_ERROR(tpu_reduce_check("reduce", kind, x, dims, out, &m, &n));
  if (m == 0) return TPU_OK;
  if (n == 0) return tpu_reduce_fill_identity("reduce", kind, out);

  tpu_reduce_plan_t p = {.kind = kind, .x = x, .out = out, .pool = pool};
  p.cls = class_of(kind, x->dtype);
  p.isa = tpu_reduce_isa();
  p.num_threads = tpu_pool_num_threads(pool);
  p.kept.nbufs = 2;
  p.red.nbufs = 1;
  for (int d = 0, k = 0; d < x->rank; d++) {
    tpu_loop_t *l = dims[d] ? &p.red : &p.kept;
    l->dims[l->rank] = x->dims[d];
    l->strides[0][l->rank] = x->strides[d];
    if (!dims[d]) l->strides[1][l->rank] = out->strides[k++];
    l->rank++;
  }
  tpu_loop_simplify(&p.kept);
  tpu_loop_simplify(&p.red);
  if (kind != TPU_REDUCE_ARGMAX && kind != TPU_REDUCE_ARGMIN) {
    sort_dims(&p.red);
    tpu_loop_simplify(&p.red);
  }
  sort_dims(&p.kept); /* outputs are independent: visit them in memory order of x */
  tpu_loop_simplify(&p.kept);
  if (p.red.rank == 0) { /* every reduced dim has size 1: a line of one element */
    p.red.rank = 1;
    p.red.dims[0] = 1;
    p.red.strides[0][0] = 1;
  }
  p.m = m;
  p.n = n;
  if (tpu_reduce_cols_applies(&p)) return tpu_reduce_cols(&p);
  return tpu_reduce_lines(&p);
}
