/* test_kernels_qr.c: the Householder QR kernels (qr.c) and their IR ops GEQRF, GEQRF_TAU
 * and HOUSEHOLDER_PRODUCT (shape rules, hash, serialization, printing).
 *
 * geqrf on batches of random tall, square and wide matrices in f64 and f32: Q (built here
 * from the reflectors with the obvious products I - tau v v^T) is orthogonal and Q R = A,
 * each tau is 0 or in [1, 2] and R's diagonal has the opposite sign of the column it came
 * from (LAPACK's dlarfg convention, which PyTorch's CPU results follow); the packed result
 * and tau from separate calls agree. householder_product gives the same Q's first columns
 * and ignores what is on and above v's diagonal. A 2 x 2 worked by hand, a column already
 * zero (tau = 0), strided operands and a pool (same bits), and the argument errors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir_util.h"
#include "tpu/ir.h"
#include "tpu/kernels.h"
#include "tpu/threadpool.h"

static tpu_pool_t *g_pool2;

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static double drand(void) { /* in [-1, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 4503599627370496.0 - 1.0;
}

/* batch x rows x cols, row-major, or column-major per matrix with |colmajor| */
static tpu_buf_t matrices(void *data, tpu_dtype_t dt, int64_t batch, int64_t rows, int64_t cols,
                          bool colmajor) {
  tpu_buf_t b = {.data = data, .dtype = dt, .rank = 3, .dims = {batch, rows, cols},
                 .strides = {rows * cols, colmajor ? 1 : cols, colmajor ? rows : 1}};
  return b;
}

static tpu_buf_t vectors(void *data, tpu_dtype_t dt, int64_t batch, int64_t k) {
  tpu_buf_t b = {.data = data, .dtype = dt, .rank = 2, .dims = {batch, k}, .strides = {k, 1}};
  return b;
}

static double get(const tpu_buf_t *b, const int64_t *at) {
  int64_t i = 0;
  for (int d = 0; d < b->rank; d++) i += at[d] * b->strides[d];
  return b->dtype == TPU_F64 ? ((const double *)b->data)[i] : ((const float *)b->data)[i];
}

static double m_at(const tpu_buf_t *b, int64_t m, int64_t r, int64_t c) {
  return get(b, (int64_t[]){m, r, c});
}

static double v_at(const tpu_buf_t *b, int64_t m, int64_t i) { return get(b, (int64_t[]){m, i}); }

static void fill(const tpu_buf_t *b) {
  int64_t count = b->dims[0] * b->dims[1] * b->dims[2];
  for (int64_t i = 0; i < count; i++) {
    if (b->dtype == TPU_F64) ((double *)b->data)[i] = drand();
    else ((float *)b->data)[i] = (float)drand();
  }
}

/* Q (m x m, row-major) = H_0 ... H_{k-1} of matrix |b| of the packed result */
static void explicit_q(const tpu_buf_t *packed, const tpu_buf_t *tau, int64_t b, double *q) {
  int64_t m = packed->dims[1], n = packed->dims[2], k = m < n ? m : n;
  double *v = malloc((size_t)m * sizeof *v), *row = malloc((size_t)m * sizeof *row);
  for (int64_t r = 0; r < m; r++) {
    for (int64_t c = 0; c < m; c++) q[r * m + c] = r == c;
  }
  for (int64_t i = 0; i < k; i++) {
    for (int64_t r = 0; r < m; r++) v[r] = r < i ? 0 : r == i ? 1 : m_at(packed, b, r, i);
    double t = v_at(tau, b, i);
    for (int64_t r = 0; r < m; r++) { /* q := q (I - t v v^T) */
      double s = 0;
      for (int64_t c = 0; c < m; c++) s += q[r * m + c] * v[c];
      row[r] = s;
    }
    for (int64_t r = 0; r < m; r++) {
      for (int64_t c = 0; c < m; c++) q[r * m + c] -= t * row[r] * v[c];
    }
  }
  free(v);
  free(row);
}

static void check_qr(tpu_dtype_t dtype, int64_t m, int64_t n, bool colmajor_in) {
  const int64_t batch = 3, k = m < n ? m : n;
  const double tol = dtype == TPU_F64 ? 1e-13 : 3e-6;
  double *ma = calloc((size_t)(batch * m * n), 8), *mp = calloc((size_t)(batch * m * n), 8);
  double *mt = calloc((size_t)(batch * k + 1), 8), *mt2 = calloc((size_t)(batch * k + 1), 8);
  double *mp2 = calloc((size_t)(batch * m * n), 8);
  tpu_buf_t a = matrices(ma, dtype, batch, m, n, colmajor_in);
  tpu_buf_t p = matrices(mp, dtype, batch, m, n, false);
  tpu_buf_t p2 = matrices(mp2, dtype, batch, m, n, true);
  tpu_buf_t tau = vectors(mt, dtype, batch, k), tau2 = vectors(mt2, dtype, batch, k);
  fill(&a);
  CHECK_OK(tpu_kernel_geqrf(&a, &p, &tau, NULL));
  /* separately, on a pool, into a column-major packed result: the same bits */
  CHECK_OK(tpu_kernel_geqrf(&a, &p2, NULL, g_pool2));
  CHECK_OK(tpu_kernel_geqrf(&a, NULL, &tau2, g_pool2));
  bool same = memcmp(mt, mt2, (size_t)(batch * k) * tpu_dtype_size(dtype)) == 0;
  double *q = malloc((size_t)(m * m) * sizeof *q);
  double err_qr = 0, err_orth = 0;
  bool tau_ok = true, signs_ok = true;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t r = 0; r < m; r++) {
      for (int64_t c = 0; c < n; c++) same = same && m_at(&p, b, r, c) == m_at(&p2, b, r, c);
    }
    explicit_q(&p, &tau, b, q);
    for (int64_t r = 0; r < m; r++) {
      for (int64_t c = 0; c < n; c++) { /* (Q R)[r][c], R = the upper part of p */
        double s = 0;
        int64_t last = c < m - 1 ? c : m - 1;
        for (int64_t i = 0; i <= last; i++) s += q[r * m + i] * m_at(&p, b, i, c);
        err_qr = fmax(err_qr, fabs(s - m_at(&a, b, r, c)));
      }
      for (int64_t c = 0; c < m; c++) { /* (Q^T Q)[r][c] */
        double s = 0;
        for (int64_t i = 0; i < m; i++) s += q[i * m + r] * q[i * m + c];
        err_orth = fmax(err_orth, fabs(s - (r == c)));
      }
    }
    for (int64_t i = 0; i < k; i++) {
      double t = v_at(&tau, b, i);
      tau_ok = tau_ok && (t == 0 || (t >= 1 && t <= 2 + tol));
      /* R_ii = -sign(x_0) |x|, x_0 = (H_{i-1} ... H_0 a)_ii: with tau > 0 the signs differ,
       * which for column 0 is the input's own a_00 */
      if (i == 0 && t > 0) {
        signs_ok = signs_ok && (m_at(&p, b, 0, 0) > 0) != (m_at(&a, b, 0, 0) > 0);
      }
    }
  }
  if (err_qr > tol || err_orth > tol) {
    fprintf(stderr, "  qr %s %lldx%lld: |QR - A| %g, |Q^T Q - I| %g\n", tpu_dtype_name(dtype),
            (long long)m, (long long)n, err_qr, err_orth);
  }
  CHECK(same);
  CHECK(err_qr <= tol && err_orth <= tol);
  CHECK(tau_ok && signs_ok);
  /* householder_product: Q's first columns from the packed reflectors (v: m x min(m, n)
   * columns of p, with garbage on and above the diagonal) */
  double *mv = malloc((size_t)(batch * m * k) * 8), *mq = malloc((size_t)(batch * m * k) * 8);
  tpu_buf_t v = matrices(mv, dtype, batch, m, k, false);
  tpu_buf_t qb = matrices(mq, dtype, batch, m, k, true);
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t r = 0; r < m; r++) {
      for (int64_t c = 0; c < k; c++) {
        double x = r > c ? m_at(&p, b, r, c) : 7.5;
        int64_t i = b * m * k + r * k + c;
        if (dtype == TPU_F64) mv[i] = x;
        else ((float *)mv)[i] = (float)x;
      }
    }
  }
  CHECK_OK(tpu_kernel_householder_product(&v, &tau, &qb, g_pool2));
  double err_q = 0;
  for (int64_t b = 0; b < batch; b++) {
    explicit_q(&p, &tau, b, q);
    for (int64_t r = 0; r < m; r++) {
      for (int64_t c = 0; c < k; c++) {
        err_q = fmax(err_q, fabs(m_at(&qb, b, r, c) - q[r * m + c]));
      }
    }
  }
  if (err_q > tol) {
    fprintf(stderr, "  householder_product %s %lldx%lld: error %g\n", tpu_dtype_name(dtype),
            (long long)m, (long long)k, err_q);
  }
  CHECK(err_q <= tol);
  free(mv);
  free(mq);
  free(q);
  free(ma);
  free(mp);
  free(mp2);
  free(mt);
  free(mt2);
}

TEST(qr_factors_tall_square_and_wide_batches) {
  static const int64_t shapes[][2] = {{1, 1}, {4, 4}, {7, 3}, {3, 7}, {9, 9}, {12, 5}, {1, 4}};
  for (int dt = 0; dt < 2; dt++) {
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      check_qr(dt ? TPU_F32 : TPU_F64, shapes[s][0], shapes[s][1], s % 2 == 1);
    }
  }
}

TEST(qr_by_hand_and_zero_columns) {
  /* A = [[3, 1], [4, 2]]: x = (3, 4), beta = -5, tau = 8/5, v = (1, 4/8); column 1 gets
   * s = tau (1 + 0.5 * 2) = 3.2: (1 - 3.2, 2 - 0.5 * 3.2) = (-2.2, 0.4); the last column's
   * reflector has nothing below the diagonal: tau = 0 */
  double a[4] = {3, 1, 4, 2}, p[4], t[2];
  tpu_buf_t ab = matrices(a, TPU_F64, 1, 2, 2, false), pb = matrices(p, TPU_F64, 1, 2, 2, false);
  tpu_buf_t tb = vectors(t, TPU_F64, 1, 2);
  CHECK_OK(tpu_kernel_geqrf(&ab, &pb, &tb, NULL));
  CHECK(fabs(p[0] + 5) < 1e-15 && fabs(p[1] + 2.2) < 1e-15 && fabs(p[2] - 0.5) < 1e-15 &&
        fabs(p[3] - 0.4) < 1e-15);
  CHECK(fabs(t[0] - 1.6) < 1e-15 && t[1] == 0);
  /* Q = H_0: [[-0.6, -0.8], [-0.8, 0.6]] */
  double q[4];
  tpu_buf_t qb = matrices(q, TPU_F64, 1, 2, 2, false);
  CHECK_OK(tpu_kernel_householder_product(&pb, &tb, &qb, NULL));
  CHECK(fabs(q[0] + 0.6) < 1e-15 && fabs(q[1] + 0.8) < 1e-15 && fabs(q[2] + 0.8) < 1e-15 &&
        fabs(q[3] - 0.6) < 1e-15);
  /* a column already zero below the diagonal: tau = 0, R keeps the column (even a
   * negative diagonal), and the zero matrix factors to zeros */
  double u[6] = {-2, 1, 0, 3, 0, 0}, up[6], ut[2];
  tpu_buf_t ub = matrices(u, TPU_F64, 1, 3, 2, false);
  tpu_buf_t upb = matrices(up, TPU_F64, 1, 3, 2, false);
  tpu_buf_t utb = vectors(ut, TPU_F64, 1, 2);
  CHECK_OK(tpu_kernel_geqrf(&ub, &upb, &utb, NULL));
  CHECK(ut[0] == 0 && ut[1] == 0 && memcmp(u, up, sizeof u) == 0);
  /* in place: the packed result over its own operand */
  CHECK_OK(tpu_kernel_geqrf(&ab, &ab, NULL, g_pool2));
  CHECK(memcmp(a, p, sizeof a) == 0);
}

TEST(qr_kernel_errors) {
  double m[32];
  int32_t im[8];
  tpu_buf_t wide = matrices(m, TPU_F64, 1, 2, 3, false);
  tpu_buf_t tall = matrices(m, TPU_F64, 1, 3, 2, false);
  tpu_buf_t ints = matrices(im, TPU_I32, 1, 2, 2, false);
  tpu_buf_t tau2 = vectors(m + 16, TPU_F64, 1, 2), tau3 = vectors(m + 16, TPU_F64, 1, 3);
  CHECK(tpu_kernel_geqrf(&ints, &ints, NULL, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "geqrf: a is i32, expected a float dtype");
  CHECK(tpu_kernel_geqrf(&wide, NULL, &tau3, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "geqrf: tau must be f64 [batch dims..., 2]");
  CHECK(tpu_kernel_geqrf(&wide, &tall, NULL, NULL) == TPU_ERR_INVALID_ARGUMENT);
  tpu_buf_t wide_out = wide;
  CHECK(tpu_kernel_householder_product(&wide, &tau2, &wide_out, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "householder_product: v must have at least as many rows");
  tpu_buf_t tall_out = tall;
  CHECK(tpu_kernel_householder_product(&tall, &tau3, &tall_out, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "tau has 3 reflectors, v only 2 columns");
  CHECK(tpu_kernel_householder_product(&tall, NULL, &tall_out, NULL) == TPU_ERR_INVALID_ARGUMENT);
  tpu_buf_t tau_f32 = vectors(m + 16, TPU_F32, 1, 2);
  CHECK(tpu_kernel_householder_product(&tall, &tau_f32, &tall_out, NULL) ==
        TPU_ERR_INVALID_ARGUMENT);
}

TEST(qr_ir_ops) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t tall = ir_param(g, TPU_F32, SHAPE(2, 5, 3));
  tpu_value_t wide = ir_param(g, TPU_F64, SHAPE(3, 5));
  tpu_value_t t_tall = tpu_graph_geqrf_tau(g, tall), t_wide = tpu_graph_geqrf_tau(g, wide);
  CHECK(tpu_graph_status(g) == TPU_OK);
  const tpu_node_t *tt = tpu_graph_node(g, t_tall), *tw = tpu_graph_node(g, t_wide);
  CHECK(tt->shape.rank == 2 && tt->shape.dims[0] == 2 && tt->shape.dims[1] == 3);
  CHECK(tw->shape.rank == 1 && tw->shape.dims[0] == 3 && tw->dtype == TPU_F64);
  tpu_value_t q = tpu_graph_householder_product(g, tpu_graph_geqrf(g, tall), t_tall);
  CHECK_OK(tpu_graph_output(g, q, NULL));
  CHECK_OK(tpu_graph_verify(g));
  /* prints as custom calls, the product with both operands */
  char *text = NULL;
  CHECK_OK(tpu_graph_print_stablehlo(g, "qr", tpu_allocator_system(), &text, NULL));
  CHECK_CONTAINS(text, "call_target_name = \"torchtpu.geqrf\"}> : (tensor<2x5x3xf32>) -> "
                       "tensor<2x5x3xf32>");
  CHECK_CONTAINS(text, "call_target_name = \"torchtpu.geqrf_tau\"}> : (tensor<2x5x3xf32>) -> "
                       "tensor<2x3xf32>");
  CHECK_CONTAINS(text, "call_target_name = \"torchtpu.householder_product\"}> : "
                       "(tensor<2x5x3xf32>, tensor<2x3xf32>) -> tensor<2x5x3xf32>");
  tpu_allocator_free(tpu_allocator_system(), text);
  /* serialized and read back: the same graph */
  unsigned char *bytes = NULL;
  size_t len = 0;
  CHECK_OK(tpu_graph_serialize(g, tpu_allocator_system(), &bytes, &len));
  tpu_graph_t *back = NULL;
  CHECK_OK(tpu_graph_deserialize(bytes, len, tpu_allocator_system(), &back));
  CHECK(back && tpu_graph_hash(back) == tpu_graph_hash(g));
  tpu_graph_destroy(back);
  tpu_allocator_free(tpu_allocator_system(), bytes);
  /* shape rules */
  CHECK(tpu_graph_householder_product(g, wide, t_wide) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(g), "v must have at least as many rows as columns");
  tpu_graph_destroy(g);
  g = ir_graph();
  tpu_value_t v = ir_param(g, TPU_F32, SHAPE(5, 2)), long_tau = ir_param(g, TPU_F32, SHAPE(3));
  CHECK(tpu_graph_householder_product(g, v, long_tau) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(g), "tau has 3 reflectors, v only 2 columns");
  tpu_graph_destroy(g);
  g = ir_graph();
  tpu_value_t bt = ir_param(g, TPU_F32, SHAPE(2, 5, 2));
  tpu_value_t other = ir_param(g, TPU_F32, SHAPE(3, 2));
  CHECK(tpu_graph_householder_product(g, bt, other) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(g), "batch dim 0 differs");
  tpu_graph_destroy(g);
  g = ir_graph();
  CHECK(tpu_graph_geqrf(g, ir_param(g, TPU_I32, SHAPE(3, 3))) == TPU_NO_VALUE);
  tpu_graph_destroy(g);
  g = ir_graph();
  CHECK(tpu_graph_geqrf(g, ir_param(g, TPU_F32, SHAPE(3))) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(g), "operand must have rank >= 2");
  tpu_graph_destroy(g);
}

int main(void) {
  if (tpu_pool_create(2, tpu_allocator_system(), &g_pool2) != TPU_OK) {
    fprintf(stderr, "cannot create a pool: %s\n", tpu_status_message());
    return 1;
  }
  RUN(qr_factors_tall_square_and_wide_batches);
  RUN(qr_by_hand_and_zero_columns);
  RUN(qr_kernel_errors);
  RUN(qr_ir_ops);
  tpu_pool_destroy(g_pool2);
  return check_report();
}
