/* eigh.c: tpu_kernel_eigh: eigenvalues and eigenvectors of batches of symmetric matrices
 * [..., n, n] (the IR's EIGH; its result layout is in ir.h): the cyclic Jacobi method.
 *
 * Per matrix, the lower triangle is loaded into a full symmetric f64 workspace W (rescaled
 * when its largest magnitude is far from 1, so that no square below overflows or
 * underflows) and V^T starts as the identity. A sweep visits every pair p < q and applies
 * the rotation J that zeroes W[p][q] (Golub & Van Loan, Matrix Computations, sym.schur2:
 * theta = (W_qq - W_pp) / (2 W_pq), t = sign(theta) / (|theta| + sqrt(theta^2 + 1)),
 * c = 1 / sqrt(t^2 + 1), s = t c): W <- J^T W J, with rows p and q updated and mirrored into
 * columns p and q, W_pp -= t W_pq, W_qq += t W_pq and W_pq = 0; and V^T <- J^T V^T (rows
 * p and q). A pair whose W_pq is negligible next to its diagonal (|W_pq| <= eps
 * sqrt(|W_pp W_qq|), eps = 2^-53; or W_pq = 0) is skipped, and the method has converged
 * when a sweep skips every pair: W's diagonal then holds the eigenvalues to about
 * eps ||A|| (Jacobi's accuracy is often better: Demmel & Veselic 1992). The eigenvalues are
 * sorted ascending, their vectors with them, and stored rounded once to the dtype. A
 * matrix with a NaN or infinity gets NaN everywhere (LAPACK reports a failure instead; the
 * lowering turns NaN eigenvalues into PyTorch's error).
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "vtpu/kernels/linalg_util.h"

/* Sweeps before giving up: each sweep about squares the off-diagonal norm once it is small,
 * so f64 converges in well under 20; a matrix still not diagonal after this many is left
 * as it is (its diagonal is then the best estimate there is). */
#define MAX_SWEEPS 60

typedef struct eigh_job {
  matrices_t m; /* a (buffer 0) and out (buffer 2) offsets per matrix; n x n */
  const tpu_buf_t *a, *out;
  atomic_bool oom;
} eigh_job_t;

/* Loads the lower triangle of matrix |a| at |off| into the full symmetric |w| (n x n,
 * row-major); false if it holds a NaN or an infinity. Rescales w by a power of two when
 * its largest magnitude is outside [2^-400, 2^400]; *scale is the factor to undo. */
static bool load_symmetric(double *w, const tpu_buf_t *a, int64_t off, int64_t n, int64_t rs,
                           int64_t cs, double *scale) {
  double big = 0;
  for (int64_t i = 0; i < n; i++) {
    for (int64_t j = 0; j <= i; j++) {
      double v = tpu_load_f64(a->data, a->dtype, off + i * rs + j * cs);
      if (!isfinite(v)) return false;
      w[i * n + j] = w[j * n + i] = v;
      big = fmax(big, fabs(v));
    }
  }
  *scale = rescale_pow2(w, n * n, big);
  return true;
}

/* Rows p and q of the n-column |x| rotated: x_p <- c x_p - s x_q, x_q <- s x_p + c x_q. */
static void rotate_rows(double *x, int64_t n, int64_t p, int64_t q, double c, double s) {
  typedef double v2d __attribute__((vector_size(16))); /* as linalg_util.h's sub_scaled */
  const v2d cv = {c, c}, sv = {s, s};
  double *xp = x + p * n, *xq = x + q * n;
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    v2d u, v;
    memcpy(&u, xp + k, 16);
    memcpy(&v, xq + k, 16);
    const v2d np = cv * u - sv * v, nq = sv * u + cv * v;
    memcpy(xp + k, &np, 16);
    memcpy(xq + k, &nq, 16);
  }
  for (; k < n; k++) {
    double u = xp[k], v = xq[k];
    xp[k] = c * u - s * v;
    xq[k] = s * u + c * v;
  }
}

/* One Jacobi rotation on pair (p, q) of the symmetric |w| and of |vt|; false when the pair
 * is already negligible (nothing done). */
static bool rotate_pair(double *w, double *vt, int64_t n, int64_t p, int64_t q) {
  double apq = w[p * n + q], app = w[p * n + p], aqq = w[q * n + q];
  if (apq == 0 || fabs(apq) <= DBL_EPSILON / 2 * sqrt(fabs(app) * fabs(aqq))) return false;
  double theta = (aqq - app) / (2 * apq);
  /* theta^2 would overflow: t = 1 / (2 theta) to working precision */
  double t = fabs(theta) > 0x1p500 ? 0.5 / theta
                                   : copysign(1.0, theta) / (fabs(theta) + sqrt(theta * theta + 1));
  double c = 1 / sqrt(t * t + 1), s = t * c;
  rotate_rows(w, n, p, q, c, s);
  for (int64_t k = 0; k < n; k++) { /* columns p and q: the rows' mirror */
    w[k * n + p] = w[p * n + k];
    w[k * n + q] = w[q * n + k];
  }
  w[p * n + p] = app - t * apq;
  w[q * n + q] = aqq + t * apq;
  w[p * n + q] = w[q * n + p] = 0;
  rotate_rows(vt, n, p, q, c, s);
  return true;
}

/* Diagonalizes |w| (n x n symmetric) in place; |vt| gets the eigenvectors as rows. */
static void jacobi(double *w, double *vt, int64_t n) {
  for (int64_t i = 0; i < n * n; i++) vt[i] = 0;
  for (int64_t i = 0; i < n; i++) vt[i * n + i] = 1;
  for (int sweep = 0; sweep < MAX_SWEEPS; sweep++) {
    bool rotated = false;
    for (int64_t p = 0; p < n; p++) {
      for (int64_t q = p + 1; q < n; q++) rotated |= rotate_pair(w, vt, n, p, q);
    }
    if (!rotated) return;
  }
}

/* Stores the eigenvalues (W's diagonal times |scale|) ascending into row n of the output
 * at |off| and their vectors (rows of |vt|) as columns 0..n-1 above it. */
static void store_sorted(const eigh_job_t *j, int64_t off, double *w, double *vt, int64_t n,
                         double scale) {
  const matrices_t *m = &j->m;
  for (int64_t i = 0; i < n; i++) { /* selection sort: n swaps of vectors at most */
    int64_t lo = i;
    for (int64_t k = i + 1; k < n; k++) {
      if (w[k * n + k] < w[lo * n + lo]) lo = k;
    }
    double d = w[lo * n + lo];
    w[lo * n + lo] = w[i * n + i];
    w[i * n + i] = d;
    for (int64_t k = 0; lo != i && k < n; k++) {
      double v = vt[lo * n + k];
      vt[lo * n + k] = vt[i * n + k];
      vt[i * n + k] = v;
    }
    tpu_store_f64(j->out->data, j->out->dtype, off + n * m->o_row + i * m->o_col, d * scale);
    for (int64_t r = 0; r < n; r++) {
      tpu_store_f64(j->out->data, j->out->dtype, off + r * m->o_row + i * m->o_col, vt[i * n + r]);
    }
  }
}

static void eigh_task(void *ctx, int64_t begin, int64_t end) {
  eigh_job_t *j = ctx;
  const matrices_t *m = &j->m;
  int64_t n = m->n;
  double *w = malloc((size_t)(2 * n * n + 1) * sizeof *w); /* + 1: n may be 0 */
  if (!w) {
    atomic_store(&j->oom, true);
    return;
  }
  double *vt = w + n * n;
  tpu_loop_pos_t pos;
  tpu_loop_seek(&m->batch, m->batch.rank, begin, &pos);
  for (int64_t b = begin; b < end; b++) {
    double scale;
    if (load_symmetric(w, j->a, pos.off[0], n, m->a_row, m->a_col, &scale)) {
      jacobi(w, vt, n);
      store_sorted(j, pos.off[2], w, vt, n, scale);
    } else {
      fill_matrix(j->out, pos.off[2], n + 1, n, m->o_row, m->o_col, NAN);
    }
    tpu_loop_step(&m->batch, m->batch.rank, &pos);
  }
  free(w);
}

tpu_status_t tpu_kernel_eigh(const tpu_buf_t *a, const tpu_buf_t *out, tpu_pool_t *pool) {
  static const char *K = "eigh";
  int64_t na, no;
  TPU_RETURN_IF_ERROR(check_matrices(K, a, "a", true, &na));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &no));
  int r = a->rank;
  bool ok = out->rank == r && out->dtype == a->dtype && out->dims[r - 2] == a->dims[r - 2] + 1;
  for (int d = 0; ok && d < r; d++) ok = d == r - 2 || out->dims[d] == a->dims[d];
  if (!ok) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out must be %s [..., n + 1, n] for a "
                          "[..., n, n]", K, tpu_dtype_name(a->dtype));
  }
  if (no == 0) return TPU_OK;
  eigh_job_t j = {.a = a, .out = out};
  j.m.n = a->dims[r - 1];
  j.m.a_row = a->strides[r - 2], j.m.a_col = a->strides[r - 1];
  j.m.o_row = out->strides[r - 2], j.m.o_col = out->strides[r - 1];
  batch_of(&j.m, a, NULL, out);
  atomic_init(&j.oom, false);
  /* a sweep is about 3 n^3 multiply-adds, and there are about ten */
  tpu_pool_parallel_for(pool, batch_count(a), grain_for(j.m.n, j.m.n, 30 * j.m.n), eigh_task, &j);
  if (atomic_load(&j.oom)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: out of host memory for the workspace", K);
  }
  return TPU_OK;
}
