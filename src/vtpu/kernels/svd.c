/* svd.c: tpu_kernel_svd: the thin singular value decomposition a = U diag(s) V^T of batches
 * of matrices [..., m, n] with m >= n (the IR's SVD; its result layout is in ir.h): the
 * one-sided Jacobi method (Hestenes).
 *
 * Per matrix, the columns of a are loaded into an f64 workspace W (n columns of m, each
 * contiguous; rescaled by a power of two when the largest magnitude is far from 1, so that
 * no squared norm overflows or underflows) and V starts as the identity. A sweep visits every
 * column pair p < q and applies the rotation that makes w_p and w_q orthogonal (Demmel &
 * Veselic 1992: alpha = |w_p|^2, beta = |w_q|^2, gamma = w_p . w_q, zeta = (beta - alpha) /
 * (2 gamma), t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)), c = 1 / sqrt(1 + t^2), s = c t;
 * w_p <- c w_p - s w_q, w_q <- s w_p + c w_q, the same on V's columns). A pair already
 * orthogonal to working precision (|gamma| <= eps sqrt(alpha beta), eps = 2^-53) is skipped;
 * the method has converged when a sweep skips every pair. Then s_j = |w_j| and u_j = w_j /
 * s_j, sorted by s descending; a column whose s_j is zero (a rank-deficient matrix) gets a
 * unit vector orthogonal to the others (Gram-Schmidt of the first unit basis vector that
 * is not in their span), so U always has orthonormal columns, as LAPACK's has. Results are
 * rounded once to the dtype. A matrix with a NaN or an infinity gets NaN everywhere.
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "vtpu/kernels/linalg_util.h"

#define MAX_SWEEPS 60 /* f64 converges in well under 20 (quadratically, once nearly there) */

typedef struct svd_job {
  matrices_t m; /* a (buffer 0) and out (buffer 2) offsets per matrix; m = rows x n */
  const tpu_buf_t *a, *out;
  atomic_bool oom;
} svd_job_t;

/* Loads matrix |a| at |off| (rows x n) as columns into |w| (w + j * rows is column j); false
 * if it holds a NaN or an infinity. *scale: the power of two it was divided by. */
static bool load_columns(double *w, const svd_job_t *j, int64_t off, double *scale) {
  const matrices_t *m = &j->m;
  double big = 0;
  for (int64_t c = 0; c < m->n; c++) {
    for (int64_t r = 0; r < m->rows; r++) {
      double v = tpu_load_f64(j->a->data, j->a->dtype, off + r * m->a_row + c * m->a_col);
      if (!isfinite(v)) return false;
      w[c * m->rows + r] = v;
      big = fmax(big, fabs(v));
    }
  }
  *scale = rescale_pow2(w, m->rows * m->n, big);
  return true;
}

/* x <- c x - s y, y <- s x + c y over |len| elements. */
static void rotate(double *x, double *y, int64_t len, double c, double s) {
  for (int64_t k = 0; k < len; k++) {
    double u = x[k], v = y[k];
    x[k] = c * u - s * v;
    y[k] = s * u + c * v;
  }
}

/* Orthogonalizes columns |w| (n of |rows|) in place, accumulating the rotations in |v|
 * (n x n, column j at v + j * n), which starts as the identity. |d| is scratch for the n
 * squared column norms: computed at the start of each sweep, then updated with each
 * rotation (alpha - t gamma, beta + t gamma), which saves two of every pair's three dot
 * products. */
static void jacobi(double *w, double *v, double *d, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < n * n; i++) v[i] = 0;
  for (int64_t i = 0; i < n; i++) v[i * n + i] = 1;
  for (int sweep = 0; sweep < MAX_SWEEPS; sweep++) {
    bool rotated = false;
    for (int64_t c = 0; c < n; c++) d[c] = dot(w + c * rows, w + c * rows, rows);
    for (int64_t p = 0; p < n; p++) {
      for (int64_t q = p + 1; q < n; q++) {
        double *wp = w + p * rows, *wq = w + q * rows;
        double alpha = d[p], beta = d[q], gamma = dot(wp, wq, rows);
        if (gamma == 0 || fabs(gamma) <= DBL_EPSILON / 2 * sqrt(alpha) * sqrt(beta)) continue;
        double zeta = (beta - alpha) / (2 * gamma);
        /* zeta^2 would overflow: t = 1 / (2 zeta) to working precision */
        double t = fabs(zeta) > 0x1p500
                       ? 0.5 / zeta
                       : copysign(1.0, zeta) / (fabs(zeta) + sqrt(1 + zeta * zeta));
        double c = 1 / sqrt(1 + t * t), s = c * t;
        rotate(wp, wq, rows, c, s);
        rotate(v + p * n, v + q * n, n, c, s);
        d[p] = alpha - t * gamma;
        d[q] = beta + t * gamma;
        rotated = true;
      }
    }
    if (!rotated) return;
  }
}

/* Makes column |j| of |u| (rows long, columns 0..j-1 orthonormal) a unit vector orthogonal
 * to those columns: the first unit basis vector with enough left after two Gram-Schmidt
 * passes (one exists since j < rows). */
static void complete_column(double *u, int64_t rows, int64_t j) {
  double *x = u + j * rows;
  for (int64_t e = 0; e < rows; e++) {
    for (int64_t r = 0; r < rows; r++) x[r] = r == e;
    for (int pass = 0; pass < 2; pass++) {
      for (int64_t k = 0; k < j; k++) sub_scaled(x, u + k * rows, dot(u + k * rows, x, rows), rows);
    }
    double norm = sqrt(dot(x, x, rows));
    if (norm > 0.5) {
      for (int64_t r = 0; r < rows; r++) x[r] /= norm;
      return;
    }
  }
}

/* Sorts the columns of |w| and |v| by norm descending, makes w's columns unit (completing
 * the zero ones), and stores U, V and s (times |scale|) into the output at |off|. |s| is
 * scratch for n norms. */
static void store_sorted(const svd_job_t *j, int64_t off, double *w, double *v, double *s,
                         double scale) {
  const matrices_t *m = &j->m;
  const int64_t rows = m->rows, n = m->n;
  for (int64_t c = 0; c < n; c++) s[c] = sqrt(dot(w + c * rows, w + c * rows, rows));
  for (int64_t i = 0; i < n; i++) { /* selection sort: n swaps of columns at most */
    int64_t hi = i;
    for (int64_t k = i + 1; k < n; k++) {
      if (s[k] > s[hi]) hi = k;
    }
    if (hi == i) continue;
    double t = s[hi];
    s[hi] = s[i];
    s[i] = t;
    for (int64_t r = 0; r < rows; r++) {
      t = w[hi * rows + r], w[hi * rows + r] = w[i * rows + r], w[i * rows + r] = t;
    }
    for (int64_t r = 0; r < n; r++) {
      t = v[hi * n + r], v[hi * n + r] = v[i * n + r], v[i * n + r] = t;
    }
  }
  /* a column whose norm is this small next to the largest is rounding noise: rank-deficient */
  const double tiny = s[0] * DBL_EPSILON * (double)rows;
  for (int64_t c = 0; c < n; c++) {
    if (s[c] > tiny && s[c] > 0) {
      for (int64_t r = 0; r < rows; r++) w[c * rows + r] /= s[c];
    } else { /* s[c] is kept (LAPACK reports such values too); u_c is w_c's noise */
      complete_column(w, rows, c);
    }
  }
  const tpu_buf_t *o = j->out;
  for (int64_t c = 0; c < n; c++) {
    for (int64_t r = 0; r < rows; r++) {
      tpu_store_f64(o->data, o->dtype, off + r * m->o_row + c * m->o_col, w[c * rows + r]);
    }
    for (int64_t r = 0; r < n; r++) {
      tpu_store_f64(o->data, o->dtype, off + (rows + r) * m->o_row + c * m->o_col, v[c * n + r]);
    }
    tpu_store_f64(o->data, o->dtype, off + (rows + n) * m->o_row + c * m->o_col, s[c] * scale);
  }
}

static void svd_task(void *ctx, int64_t begin, int64_t end) {
  svd_job_t *j = ctx;
  const matrices_t *m = &j->m;
  const int64_t rows = m->rows, n = m->n;
  /* W (rows x n), V (n x n), the n norms; + 1: n may be 0 */
  double *w = malloc((size_t)(rows * n + n * n + n + 1) * sizeof *w);
  if (!w) {
    atomic_store(&j->oom, true);
    return;
  }
  double *v = w + rows * n, *s = v + n * n; /* s: the norms, in jacobi and store_sorted */
  tpu_loop_pos_t pos;
  tpu_loop_seek(&m->batch, m->batch.rank, begin, &pos);
  for (int64_t b = begin; b < end; b++) {
    double scale;
    if (load_columns(w, j, pos.off[0], &scale)) {
      jacobi(w, v, s, rows, n);
      store_sorted(j, pos.off[2], w, v, s, scale);
    } else {
      fill_matrix(j->out, pos.off[2], rows + n + 1, n, m->o_row, m->o_col, NAN);
    }
    tpu_loop_step(&m->batch, m->batch.rank, &pos);
  }
  free(w);
}

tpu_status_t tpu_kernel_svd(const tpu_buf_t *a, const tpu_buf_t *out, tpu_pool_t *pool) {
  static const char *K = "svd";
  int64_t na, no;
  TPU_RETURN_IF_ERROR(check_matrices(K, a, "a", false, &na));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &no));
  const int r = a->rank;
  const int64_t rows = a->dims[r - 2], n = a->dims[r - 1];
  if (rows < n) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: a must have at least as many rows as "
                          "columns, got %lld x %lld", K, (long long)rows, (long long)n);
  }
  bool ok = out->rank == r && out->dtype == a->dtype && out->dims[r - 2] == rows + n + 1 &&
            out->dims[r - 1] == n;
  for (int d = 0; ok && d < r - 2; d++) ok = out->dims[d] == a->dims[d];
  if (!ok) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out must be %s [..., m + n + 1, n] for "
                          "a [..., m, n]", K, tpu_dtype_name(a->dtype));
  }
  if (no == 0) return TPU_OK;
  svd_job_t j = {.a = a, .out = out};
  j.m.n = n;
  j.m.rows = rows;
  j.m.a_row = a->strides[r - 2], j.m.a_col = a->strides[r - 1];
  j.m.o_row = out->strides[r - 2], j.m.o_col = out->strides[r - 1];
  batch_of(&j.m, a, NULL, out);
  atomic_init(&j.oom, false);
  /* a sweep is about 3 m n^2 multiply-adds, and there are about ten */
  tpu_pool_parallel_for(pool, batch_count(a), grain_for(rows, n, 30 * n), svd_task, &j);
  if (atomic_load(&j.oom)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: out of host memory for the workspace", K);
  }
  return TPU_OK;
}
