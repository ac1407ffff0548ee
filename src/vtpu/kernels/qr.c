/* qr.c: tpu_kernel_geqrf and tpu_kernel_householder_product: Householder QR of batches of
 * matrices [..., m, n] as LAPACK's geqr2 and org2r compute it (the IR's GEQRF, GEQRF_TAU
 * and HOUSEHOLDER_PRODUCT; the conventions are in ir.h: geqrf writes tau as one more row
 * under the packed factors, so one factorization gives both).
 *
 * Per matrix, the operand is loaded transposed into an f64 workspace, so that each column
 * of the matrix is a contiguous row there (every reflector works on columns), processed
 * with f64 multiply-adds, and stored rounded once to the output dtype.
 *
 *   geqrf                for each column i < min(m, n): the reflector that maps
 *                        x = a[i:, i] onto beta e_0, beta = -sign(x_0) |x| (dlarfg:
 *                        tau = (beta - x_0) / beta, v = x / (x_0 - beta) with v_0 = 1;
 *                        tau = 0 when x is already zero below x_0), applied to the columns
 *                        right of it: a_j -= tau (v . a_j) v.
 *   householder_product  org2r: start from the unit columns, apply H_{k-1} .. H_0 in turn,
 *                        each to the columns right of its own, and build column i of
 *                        H_i's result in place (-tau v below the diagonal, 1 - tau on it).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "vtpu/kernels/linalg_util.h"

typedef struct qr_job {
  matrices_t m;       /* a (buffer 0) is m.rows x m.n; tau is buffer 1; out buffer 2 */
  const tpu_buf_t *a, *out, *tau; /* geqrf: no tau buffer (its row of out) */
  int64_t tau_stride; /* along tau's last dim */
  atomic_bool oom;
} qr_job_t;

/* |x| over n elements without overflow or underflow in the squares (LAPACK's dnrm2 scales
 * too): the plain sum of squares when it is a normal number, else rescaled by the largest
 * magnitude (NaN stays NaN). */
static double norm2(const double *x, int64_t n) {
  double s = dot(x, x, n);
  if (isnormal(s) || isnan(s)) return sqrt(s);
  double big = 0;
  for (int64_t i = 0; i < n; i++) big = fmax(big, fabs(x[i]));
  if (big == 0 || isinf(big)) return big;
  double t = 0;
  for (int64_t i = 0; i < n; i++) t += (x[i] / big) * (x[i] / big);
  return big * sqrt(t);
}

/* Loads matrix |a| at |off| (rows x cols, element strides rs and cs) transposed into |w|
 * (cols x rows, row-major). */
static void load_transposed(double *w, const tpu_buf_t *a, int64_t off, int64_t rows,
                            int64_t cols, int64_t rs, int64_t cs) {
  for (int64_t c = 0; c < cols; c++) {
    for (int64_t r = 0; r < rows; r++) {
      w[c * rows + r] = tpu_load_f64(a->data, a->dtype, off + r * rs + c * cs);
    }
  }
}

static void store_transposed(const tpu_buf_t *o, int64_t off, const double *w, int64_t rows,
                             int64_t cols, int64_t rs, int64_t cs) {
  for (int64_t c = 0; c < cols; c++) {
    for (int64_t r = 0; r < rows; r++) {
      tpu_store_f64(o->data, o->dtype, off + r * rs + c * cs, w[c * rows + r]);
    }
  }
}

/* Householder QR of the m x n matrix whose column j is w + j * m, in place; tau[k]. */
static void factor_qr(double *w, int64_t m, int64_t n, double *tau) {
  int64_t k = m < n ? m : n;
  for (int64_t i = 0; i < k; i++) {
    double *col = w + i * m, *x = col + i + 1;
    int64_t len = m - i - 1;
    double alpha = col[i], xnorm = norm2(x, len);
    tau[i] = 0;
    if (xnorm == 0) continue; /* H_i = I */
    double beta = -copysign(hypot(alpha, xnorm), alpha);
    tau[i] = (beta - alpha) / beta;
    double scale = 1 / (alpha - beta);
    for (int64_t r = 0; r < len; r++) x[r] *= scale;
    col[i] = beta;
    for (int64_t j = i + 1; j < n; j++) {
      double *cj = w + j * m;
      double s = tau[i] * (cj[i] + dot(x, cj + i + 1, len));
      cj[i] -= s;
      sub_scaled(cj + i + 1, x, s, len);
    }
  }
}

/* The first n columns of H_0 ... H_{k-1} (m x n, column j at w + j * m) from the
 * reflectors below the diagonal of w's first k columns, in place. */
static void form_q(double *w, int64_t m, int64_t n, int64_t k, const double *tau) {
  for (int64_t j = k; j < n; j++) {
    double *cj = w + j * m;
    for (int64_t r = 0; r < m; r++) cj[r] = r == j ? 1.0 : 0.0;
  }
  for (int64_t i = k - 1; i >= 0; i--) {
    double *ci = w + i * m;
    ci[i] = 1;
    for (int64_t j = i + 1; j < n; j++) {
      double *cj = w + j * m;
      sub_scaled(cj + i, ci + i, tau[i] * dot(ci + i, cj + i, m - i), m - i);
    }
    for (int64_t r = i + 1; r < m; r++) ci[r] *= -tau[i];
    ci[i] = 1 - tau[i];
    for (int64_t r = 0; r < i; r++) ci[r] = 0;
  }
}

/* Per matrix of the batch: geqrf (no tau buffer: out gets the packed factors and tau's row)
 * or householder_product (a holds the reflectors, tau their scales). */
static void qr_task(void *ctx, int64_t begin, int64_t end) {
  qr_job_t *j = ctx;
  const matrices_t *m = &j->m;
  const bool product = j->tau != NULL;
  int64_t rows = m->rows, cols = m->n, k = product ? m->k : rows < cols ? rows : cols;
  double *w = malloc((size_t)(rows * cols + k + 1) * sizeof *w); /* + 1: m may be 0 */
  if (!w) {
    atomic_store(&j->oom, true);
    return;
  }
  double *tau = w + rows * cols;
  tpu_loop_pos_t pos;
  tpu_loop_seek(&m->batch, m->batch.rank, begin, &pos);
  for (int64_t b = begin; b < end; b++) {
    if (product) {
      load_transposed(w, j->a, pos.off[0], rows, k, m->a_row, m->a_col); /* v's k columns */
      for (int64_t i = 0; i < k; i++) {
        tau[i] = tpu_load_f64(j->tau->data, j->tau->dtype, pos.off[1] + i * j->tau_stride);
      }
      form_q(w, rows, cols, k, tau);
    } else {
      load_transposed(w, j->a, pos.off[0], rows, cols, m->a_row, m->a_col);
      factor_qr(w, rows, cols, tau);
      for (int64_t c = 0; c < cols; c++) { /* tau's row */
        tpu_store_f64(j->out->data, j->out->dtype, pos.off[2] + rows * m->o_row + c * m->o_col,
                      c < k ? tau[c] : 0.0);
      }
    }
    store_transposed(j->out, pos.off[2], w, rows, cols, m->o_row, m->o_col);
    tpu_loop_step(&m->batch, m->batch.rank, &pos);
  }
  free(w);
}

/* |tau|: a valid buffer of |dtype|, rank |rank|, batch dims those of |dims|, |k| long. */
static tpu_status_t check_tau(const char *K, const tpu_buf_t *tau, tpu_dtype_t dtype, int rank,
                              const int64_t *dims, int64_t k) {
  int64_t nt;
  TPU_RETURN_IF_ERROR(tpu_buf_check(tau, K, "tau", &nt));
  bool ok = tau->dtype == dtype && tau->rank == rank && tau->dims[rank - 1] == k;
  for (int d = 0; ok && d < rank - 1; d++) ok = tau->dims[d] == dims[d];
  if (!ok) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: tau must be %s [batch dims..., %lld]",
                          K, tpu_dtype_name(dtype), (long long)k);
  }
  return TPU_OK;
}

static tpu_status_t run(const char *K, qr_job_t *j, const tpu_buf_t *a, tpu_pool_t *pool) {
  int r = a->rank;
  j->m.rows = a->dims[r - 2], j->m.n = a->dims[r - 1];
  j->m.a_row = a->strides[r - 2], j->m.a_col = a->strides[r - 1];
  if (j->out) j->m.o_row = j->out->strides[r - 2], j->m.o_col = j->out->strides[r - 1];
  j->tau_stride = j->tau ? j->tau->strides[r - 2] : 0;
  batch_of(&j->m, a, j->tau, j->out); /* offsets: 0 = a, 1 = tau, 2 = out */
  atomic_init(&j->oom, false);
  tpu_pool_parallel_for(pool, batch_count(a), grain_for(j->m.rows, j->m.n, j->m.n), qr_task, j);
  if (atomic_load(&j->oom)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: out of host memory for the workspace", K);
  }
  return TPU_OK;
}

tpu_status_t tpu_kernel_geqrf(const tpu_buf_t *a, const tpu_buf_t *out, tpu_pool_t *pool) {
  static const char *K = "geqrf";
  int64_t na, no;
  TPU_RETURN_IF_ERROR(check_matrices(K, a, "a", false, &na));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &no));
  int r = a->rank;
  bool ok = out->rank == r && out->dtype == a->dtype && out->dims[r - 2] == a->dims[r - 2] + 1;
  for (int d = 0; ok && d < r; d++) ok = d == r - 2 || out->dims[d] == a->dims[d];
  if (!ok) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out must be %s [..., m + 1, n] for a "
                          "[..., m, n]", K, tpu_dtype_name(a->dtype));
  }
  if (no == 0) return TPU_OK;
  qr_job_t j = {.a = a, .out = out};
  return run(K, &j, a, pool);
}

tpu_status_t tpu_kernel_householder_product(const tpu_buf_t *v, const tpu_buf_t *tau,
                                            const tpu_buf_t *out, tpu_pool_t *pool) {
  static const char *K = "householder_product";
  int64_t nv, no;
  TPU_RETURN_IF_ERROR(check_matrices(K, v, "v", false, &nv));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &no));
  TPU_RETURN_IF_ERROR(check_same_dims(K, v, out));
  int r = v->rank;
  int64_t m = v->dims[r - 2], n = v->dims[r - 1];
  if (m < n) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: v must have at least as many rows as "
                          "columns, got %lld x %lld", K, (long long)m, (long long)n);
  }
  int64_t k = tau && tau->rank == r - 1 ? tau->dims[r - 2] : -1;
  if (k > n) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: tau has %lld reflectors, v only %lld "
                          "columns", K, (long long)k, (long long)n);
  }
  TPU_RETURN_IF_ERROR(check_tau(K, tau, v->dtype, r - 1, v->dims, k));
  if (nv == 0) return TPU_OK;
  qr_job_t j = {.a = v, .out = out, .tau = tau};
  j.m.k = k;
  return run(K, &j, v, pool);
}
