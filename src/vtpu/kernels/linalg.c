/* linalg.c: tpu_kernel_cholesky, tpu_kernel_triangular_solve (StableHLO's cholesky and
 * triangular_solve), tpu_kernel_lu and tpu_kernel_lu_pivots_to_permutation on batches of
 * matrices [..., n, n].
 *
 * Per matrix, the operands are loaded into an f64 workspace (any float dtype, any strides,
 * so the output may be the input's own buffer), factored or solved there with f64
 * multiply-adds, and stored rounded to the output dtype: f32 results are the f64 answer
 * rounded once, at least as accurate as LAPACK's f32 routines. Matrices run in parallel;
 * within one, dot products keep four partial sums and row updates go two doubles per
 * vector (unblocked: LAPACK's blocked routines are still several times faster on large
 * matrices).
 *
 *   cholesky          unblocked left-looking (Cholesky-Crout) on the chosen triangle:
 *                     L[j][j] = sqrt(a[j][j] - sum_k L[j][k]^2),
 *                     L[i][j] = (a[i][j] - sum_k L[i][k] L[j][k]) / L[j][j]; the other
 *                     triangle is written 0. A pivot that is not > 0 (or NaN) stops the
 *                     factorization as LAPACK's potrf does: that column and the trailing
 *                     block right of and below it become NaN, which is how a caller sees
 *                     which leading minor failed (PyTorch's info).
 *   triangular_solve  substitution, one right-hand side at a time: x op(a) = b is solved as
 *                     op(a)^T x^T = b^T by swapping the row and column strides of b and x,
 *                     and op(a) as a's element (i, j) or (j, i), lower flipped by transpose.
 *   lu                LAPACK's getf2: per column the first row of largest magnitude is the
 *                     pivot (swapped into place), the column below it is divided by it, and
 *                     the trailing block takes the rank-1 update; a zero pivot is left in
 *                     place unscaled (getrf's info then points at it).
 *   pivots -> perm    the swaps applied in order to the identity permutation.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "vtpu/kernels/linalg_util.h"

/* ---- cholesky ------------------------------------------------------------------------------ */

typedef struct cholesky_job {
  matrices_t m;
  const tpu_buf_t *a, *out;
  bool lower;
  atomic_bool oom;
} cholesky_job_t;

/* Factors the n x n lower triangle of |w| (row-major) in place; the upper triangle is
 * ignored. Returns the first failed pivot, or n. */
static int64_t factor_lower(double *w, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    double *wj = w + j * n;
    double d = wj[j] - dot(wj, wj, j);
    if (!(d > 0)) return j;
    d = sqrt(d);
    wj[j] = d;
    for (int64_t i = j + 1; i < n; i++) {
      double *wi = w + i * n;
      wi[j] = (wi[j] - dot(wi, wj, j)) / d;
    }
  }
  return n;
}

static void cholesky_task(void *ctx, int64_t begin, int64_t end) {
  cholesky_job_t *j = ctx;
  const matrices_t *m = &j->m;
  int64_t n = m->n;
  double *w = malloc((size_t)(n * n) * sizeof *w);
  if (!w) {
    atomic_store(&j->oom, true);
    return;
  }
  /* the chosen triangle of a as a lower triangle: upper reads a[j][i] into w[i][j] */
  int64_t rs = j->lower ? m->a_row : m->a_col, cs = j->lower ? m->a_col : m->a_row;
  int64_t ors = j->lower ? m->o_row : m->o_col, ocs = j->lower ? m->o_col : m->o_row;
  tpu_loop_pos_t pos;
  tpu_loop_seek(&m->batch, m->batch.rank, begin, &pos);
  for (int64_t b = begin; b < end; b++) {
    for (int64_t r = 0; r < n; r++) {
      for (int64_t c = 0; c <= r; c++) {
        w[r * n + c] = tpu_load_f64(j->a->data, j->a->dtype, pos.off[0] + r * rs + c * cs);
      }
    }
    int64_t failed = factor_lower(w, n);
    for (int64_t r = 0; r < n; r++) {
      for (int64_t c = 0; c < n; c++) {
        double v = c > r ? 0.0 : (c >= failed ? NAN : w[r * n + c]);
        tpu_store_f64(j->out->data, j->out->dtype, pos.off[2] + r * ors + c * ocs, v);
      }
    }
    tpu_loop_step(&m->batch, m->batch.rank, &pos);
  }
  free(w);
}

tpu_status_t tpu_kernel_cholesky(bool lower, const tpu_buf_t *a, const tpu_buf_t *out,
                                 tpu_pool_t *pool) {
  static const char *K = "cholesky";
  int64_t na, no;
  TPU_RETURN_IF_ERROR(check_matrices(K, a, "a", true, &na));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &no));
  TPU_RETURN_IF_ERROR(check_same_dims(K, a, out));
  if (no == 0) return TPU_OK;
  int r = a->rank;
  cholesky_job_t j = {.a = a, .out = out, .lower = lower};
  atomic_init(&j.oom, false);
  j.m.n = a->dims[r - 1];
  j.m.a_row = a->strides[r - 2], j.m.a_col = a->strides[r - 1];
  j.m.o_row = out->strides[r - 2], j.m.o_col = out->strides[r - 1];
  batch_of(&j.m, a, NULL, out);
  tpu_pool_parallel_for(pool, batch_count(a), grain_for(j.m.n, j.m.n, j.m.n / 3 + 1),
                        cholesky_task, &j);
  if (atomic_load(&j.oom)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: out of host memory for a %lld x %lld "
                          "workspace", K, (long long)j.m.n, (long long)j.m.n);
  }
  return TPU_OK;
}

/* ---- triangular_solve ---------------------------------------------------------------------- */

typedef struct solve_job {
  matrices_t m;
  const tpu_buf_t *a, *b, *out;
  bool lower, unit; /* of the matrix solved with, after the transpose */
  atomic_bool oom;
} solve_job_t;

/* Solves t x = w in place for the k columns of |w| (n x k, row-major), t (n x n,
 * row-major) lower or upper triangular. */
static void substitute(const double *t, double *w, int64_t n, int64_t k, bool lower, bool unit) {
  for (int64_t s = 0; s < n; s++) {
    int64_t i = lower ? s : n - 1 - s;
    double *wi = w + i * k;
    const double *ti = t + i * n;
    int64_t lo = lower ? 0 : i + 1, hi = lower ? i : n;
    for (int64_t p = lo; p < hi; p++) sub_scaled(wi, w + p * k, ti[p], k);
    if (!unit) {
      double d = ti[i];
      for (int64_t c = 0; c < k; c++) wi[c] /= d;
    }
  }
}

static void solve_task(void *ctx, int64_t begin, int64_t end) {
  solve_job_t *j = ctx;
  const matrices_t *m = &j->m;
  int64_t n = m->n, k = m->k;
  double *t = malloc((size_t)(n * n + n * k) * sizeof *t);
  if (!t) {
    atomic_store(&j->oom, true);
    return;
  }
  double *w = t + n * n;
  tpu_loop_pos_t pos;
  tpu_loop_seek(&m->batch, m->batch.rank, begin, &pos);
  for (int64_t b = begin; b < end; b++) {
    for (int64_t r = 0; r < n; r++) {
      for (int64_t c = 0; c < n; c++) {
        bool used = j->lower ? c <= r : c >= r;
        t[r * n + c] =
            used ? tpu_load_f64(j->a->data, j->a->dtype, pos.off[0] + r * m->a_row + c * m->a_col)
                 : 0.0;
      }
      for (int64_t c = 0; c < k; c++) {
        int64_t at = pos.off[1] + r * m->b_row + c * m->b_col;
        w[r * k + c] = tpu_load_f64(j->b->data, j->b->dtype, at);
      }
    }
    substitute(t, w, n, k, j->lower, j->unit);
    for (int64_t r = 0; r < n; r++) {
      for (int64_t c = 0; c < k; c++) {
        tpu_store_f64(j->out->data, j->out->dtype, pos.off[2] + r * m->o_row + c * m->o_col,
                      w[r * k + c]);
      }
    }
    tpu_loop_step(&m->batch, m->batch.rank, &pos);
  }
  free(t);
}

tpu_status_t tpu_kernel_triangular_solve(const tpu_triangular_solve_attrs_t *attrs,
                                         const tpu_buf_t *a, const tpu_buf_t *b,
                                         const tpu_buf_t *out, tpu_pool_t *pool) {
  static const char *K = "triangular_solve";
  if (!attrs) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: attrs is NULL", K);
  int64_t na, nb, no;
  TPU_RETURN_IF_ERROR(check_matrices(K, a, "a", true, &na));
  TPU_RETURN_IF_ERROR(tpu_buf_check(b, K, "b", &nb));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &no));
  TPU_RETURN_IF_ERROR(check_same_dims(K, b, out));
  int r = a->rank;
  int64_t n = a->dims[r - 1];
  if (b->rank != r || b->dtype != a->dtype ||
      b->dims[attrs->left_side ? r - 2 : r - 1] != n) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: b does not match a (%s, rank %d, "
                          "%lld x %lld matrices)", K, tpu_dtype_name(a->dtype), r, (long long)n,
                          (long long)n);
  }
  for (int d = 0; d < r - 2; d++) {
    if (b->dims[d] != a->dims[d]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: batch dim %d of b is %lld, a has "
                            "%lld", K, d, (long long)b->dims[d], (long long)a->dims[d]);
    }
  }
  if (no == 0) return TPU_OK;
  solve_job_t j = {.a = a, .b = b, .out = out, .unit = attrs->unit_diagonal};
  atomic_init(&j.oom, false);
  matrices_t *m = &j.m;
  m->n = n;
  /* the matrix solved with on the left: op(a) (left side) or op(a)^T (right side) */
  bool transposed = attrs->transpose_a != !attrs->left_side;
  m->a_row = a->strides[transposed ? r - 1 : r - 2];
  m->a_col = a->strides[transposed ? r - 2 : r - 1];
  j.lower = attrs->lower != transposed;
  int rows = attrs->left_side ? r - 2 : r - 1, cols = attrs->left_side ? r - 1 : r - 2;
  m->k = b->dims[cols];
  m->b_row = b->strides[rows], m->b_col = b->strides[cols];
  m->o_row = out->strides[rows], m->o_col = out->strides[cols];
  int64_t ws;
  if (__builtin_mul_overflow(n, m->k, &ws) || __builtin_mul_overflow(ws, 8, &ws)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: b is too large", K);
  }
  batch_of(m, a, b, out);
  tpu_pool_parallel_for(pool, batch_count(a), grain_for(n, n, m->k), solve_task, &j);
  if (atomic_load(&j.oom)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: out of host memory for the workspace", K);
  }
  return TPU_OK;
}

/* ---- LU with partial pivoting -------------------------------------------------------------- */

typedef struct lu_job {
  matrices_t m;
  const tpu_buf_t *a, *lu, *piv;
  int64_t piv_stride;
  atomic_bool oom;
} lu_job_t;

/* Factors |w| (n x n, row-major) in place; pivots[j] = the 0-based row swapped with row j. */
static void factor_lu(double *w, int64_t n, int64_t *pivots) {
  for (int64_t j = 0; j < n; j++) {
    int64_t p = j;
    double best = fabs(w[j * n + j]);
    for (int64_t i = j + 1; i < n; i++) {
      double v = fabs(w[i * n + j]);
      if (v > best) best = v, p = i;
    }
    pivots[j] = p;
    double pivot = w[p * n + j];
    if (pivot != 0.0) {
      if (p != j) {
        for (int64_t c = 0; c < n; c++) {
          double t = w[j * n + c];
          w[j * n + c] = w[p * n + c];
          w[p * n + c] = t;
        }
      }
      for (int64_t i = j + 1; i < n; i++) w[i * n + j] /= pivot;
    }
    for (int64_t i = j + 1; i < n; i++) {
      sub_scaled(w + i * n + j + 1, w + j * n + j + 1, w[i * n + j], n - j - 1);
    }
  }
}

static void lu_task(void *ctx, int64_t begin, int64_t end) {
  lu_job_t *j = ctx;
  const matrices_t *m = &j->m;
  int64_t n = m->n;
  double *w = malloc((size_t)(n * n) * sizeof *w + (size_t)n * sizeof(int64_t));
  if (!w) {
    atomic_store(&j->oom, true);
    return;
  }
  int64_t *pivots = (int64_t *)(w + n * n);
  tpu_loop_pos_t pos;
  tpu_loop_seek(&m->batch, m->batch.rank, begin, &pos);
  for (int64_t b = begin; b < end; b++) {
    for (int64_t r = 0; r < n; r++) {
      for (int64_t c = 0; c < n; c++) {
        int64_t at = pos.off[0] + r * m->a_row + c * m->a_col;
        w[r * n + c] = tpu_load_f64(j->a->data, j->a->dtype, at);
      }
    }
    factor_lu(w, n, pivots);
    if (j->lu) {
      for (int64_t r = 0; r < n; r++) {
        for (int64_t c = 0; c < n; c++) {
          tpu_store_f64(j->lu->data, j->lu->dtype, pos.off[2] + r * m->o_row + c * m->o_col,
                        w[r * n + c]);
        }
      }
    }
    if (j->piv) {
      for (int64_t r = 0; r < n; r++) {
        tpu_store_i64(j->piv->data, TPU_I32, pos.off[1] + r * j->piv_stride, pivots[r] + 1);
      }
    }
    tpu_loop_step(&m->batch, m->batch.rank, &pos);
  }
  free(w);
}

/* |p|: i32 of rank |rank|, dims |dims| (the last |rank| entries compared). */
static tpu_status_t check_i32(const char *k, const tpu_buf_t *p, const char *what, int rank,
                              const int64_t *dims) {
  int64_t np;
  TPU_RETURN_IF_ERROR(tpu_buf_check(p, k, what, &np));
  bool ok = p->dtype == TPU_I32 && p->rank == rank;
  for (int d = 0; ok && d < rank; d++) ok = p->dims[d] == dims[d];
  if (!ok) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s must be i32 of the batch "
                                 "dims and n", k, what);
  return TPU_OK;
}

tpu_status_t tpu_kernel_lu(const tpu_buf_t *a, const tpu_buf_t *out_lu,
                           const tpu_buf_t *out_pivots, tpu_pool_t *pool) {
  static const char *K = "lu";
  int64_t na, nl;
  TPU_RETURN_IF_ERROR(check_matrices(K, a, "a", true, &na));
  if (out_lu) {
    TPU_RETURN_IF_ERROR(tpu_buf_check(out_lu, K, "out_lu", &nl));
    TPU_RETURN_IF_ERROR(check_same_dims(K, a, out_lu));
  }
  int r = a->rank;
  if (out_pivots) TPU_RETURN_IF_ERROR(check_i32(K, out_pivots, "out_pivots", r - 1, a->dims));
  if (na == 0 || (!out_lu && !out_pivots)) return TPU_OK;
  lu_job_t j = {.a = a, .lu = out_lu, .piv = out_pivots};
  atomic_init(&j.oom, false);
  j.m.n = a->dims[r - 1];
  j.m.a_row = a->strides[r - 2], j.m.a_col = a->strides[r - 1];
  if (out_lu) j.m.o_row = out_lu->strides[r - 2], j.m.o_col = out_lu->strides[r - 1];
  j.piv_stride = out_pivots ? out_pivots->strides[r - 2] : 0;
  batch_of(&j.m, a, out_pivots, out_lu); /* offsets: 0 = a, 1 = pivots, 2 = lu */
  tpu_pool_parallel_for(pool, batch_count(a), grain_for(j.m.n, j.m.n, j.m.n), lu_task, &j);
  if (atomic_load(&j.oom)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: out of host memory for the workspace", K);
  }
  return TPU_OK;
}

tpu_status_t tpu_kernel_lu_pivots_to_permutation(const tpu_buf_t *pivots, const tpu_buf_t *perm,
                                                 tpu_pool_t *pool) {
  static const char *K = "lu_pivots_to_permutation";
  (void)pool; /* O(n) per row: not worth a thread */
  int64_t np, nq;
  TPU_RETURN_IF_ERROR(tpu_buf_check(pivots, K, "pivots", &np));
  TPU_RETURN_IF_ERROR(tpu_buf_check(perm, K, "perm", &nq));
  int r = pivots->rank;
  if (r < 1) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: pivots must have rank >= 1", K);
  if (pivots->dtype != TPU_I32 || perm->dtype != TPU_I32 || perm->rank != r ||
      perm->dims[r - 1] < pivots->dims[r - 1]) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: pivots and perm must be i32 with "
                          "size >= k", K);
  }
  for (int d = 0; d < r - 1; d++) {
    if (perm->dims[d] != pivots->dims[d]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: batch dim %d differs", K, d);
    }
  }
  if (nq == 0) return TPU_OK;
  int64_t k = pivots->dims[r - 1], size = perm->dims[r - 1];
  tpu_loop_t rows = {.nbufs = 2, .rank = r - 1};
  for (int d = 0; d < r - 1; d++) {
    rows.dims[d] = pivots->dims[d];
    rows.strides[0][d] = pivots->strides[d];
    rows.strides[1][d] = perm->strides[d];
  }
  tpu_loop_simplify(&rows);
  const int32_t *pv = pivots->data;
  int32_t *out = perm->data;
  int64_t sp = pivots->strides[r - 1], so = perm->strides[r - 1];
  tpu_loop_pos_t pos;
  tpu_loop_seek(&rows, rows.rank, 0, &pos);
  for (int64_t b = 0; b < nq / size; b++) {
    int32_t *o = out + pos.off[1];
    for (int64_t i = 0; i < size; i++) o[i * so] = (int32_t)i;
    for (int64_t i = 0; i < k; i++) {
      int64_t q = (int64_t)pv[pos.off[0] + i * sp] - 1;
      if (q < 0 || q >= size) {
        return tpu_status_set(TPU_ERR_OUT_OF_RANGE, "%s: pivot %lld is outside 1..%lld", K,
                              (long long)(q + 1), (long long)size);
      }
      int32_t t = o[i * so];
      o[i * so] = o[q * so];
      o[q * so] = t;
    }
    tpu_loop_step(&rows, rows.rank, &pos);
  }
  return TPU_OK;
}
