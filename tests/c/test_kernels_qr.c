/* test_kernels_qr.c: the Householder QR kernels (qr.c) and their IR ops GEQRF and
 * HOUSEHOLDER_PRODUCT (shape rules, hash, serialization, printing).
 *
 * geqrf on batches of random tall, square and wide matrices in f64 and f32: Q (built here
 * from the reflectors with the obvious products I - tau v v^T) is orthogonal and Q R = A,
 * each tau is 0 or in [1, 2] and R's diagonal has the opposite sign of the column it came
 * from (LAPACK's dlarfg convention, which PyTorch's CPU results follow); tau's row is zero
 * past min(m, n); a pool and a column-major result give the same bits. householder_product
 * gives the same Q's first columns and ignores what is on and above v's diagonal. A 2 x 2
 * worked by hand, a column already zero (tau = 0), no rows, and the argument errors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir_util.h"
#include "matrix_util.h"
#include "tpu/ir.h"
#include "tpu/kernels.h"
#include "tpu/threadpool.h"

static tpu_pool_t *g_pool2;

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

/* The packed factors of |out| [batch, m + 1, n] as a [batch, m, n] view, and its tau row as
 * [batch, k]. */
static tpu_buf_t packed_part(const tpu_buf_t *out) {
  tpu_buf_t p = *out;
  p.dims[1]--;
  return p;
}

static tpu_buf_t tau_part(const tpu_buf_t *out) {
  int64_t m = out->dims[1] - 1, n = out->dims[2];
  tpu_buf_t t = {.data = (char *)out->data + (size_t)(m * out->strides[1]) *
                                                 tpu_dtype_size(out->dtype),
                 .dtype = out->dtype, .rank = 2, .dims = {out->dims[0], m < n ? m : n},
                 .strides = {out->strides[0], out->strides[2]}};
  return t;
}

static void check_qr(tpu_dtype_t dtype, int64_t m, int64_t n, bool colmajor_in) {
  const int64_t batch = 3, k = m < n ? m : n;
  const double tol = dtype == TPU_F64 ? 1e-13 : 3e-6;
  double *ma = calloc((size_t)(batch * m * n), 8), *mo = calloc((size_t)(batch * (m + 1) * n), 8);
  double *mo2 = calloc((size_t)(batch * (m + 1) * n), 8);
  tpu_buf_t a = matrices(ma, dtype, batch, m, n, colmajor_in);
  tpu_buf_t out = matrices(mo, dtype, batch, m + 1, n, false);
  tpu_buf_t out2 = matrices(mo2, dtype, batch, m + 1, n, true);
  tpu_buf_t p = packed_part(&out), tau = tau_part(&out);
  fill(&a);
  CHECK_OK(tpu_kernel_geqrf(&a, &out, NULL));
  /* on a pool, into a column-major result: the same bits */
  CHECK_OK(tpu_kernel_geqrf(&a, &out2, g_pool2));
  bool same = true, zeros_after_tau = true;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t r = 0; r <= m; r++) {
      for (int64_t c = 0; c < n; c++) same = same && m_at(&out, b, r, c) == m_at(&out2, b, r, c);
    }
    for (int64_t c = k; c < n; c++) zeros_after_tau = zeros_after_tau && m_at(&out, b, m, c) == 0;
  }
  CHECK(same && zeros_after_tau);
  double *q = malloc((size_t)(m * m) * sizeof *q);
  double err_qr = 0, err_orth = 0;
  bool tau_ok = true, signs_ok = true;
  for (int64_t b = 0; b < batch; b++) {
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
  free(mo);
  free(mo2);
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
  double a[4] = {3, 1, 4, 2}, o[6];
  tpu_buf_t ab = matrices(a, TPU_F64, 1, 2, 2, false), ob = matrices(o, TPU_F64, 1, 3, 2, false);
  CHECK_OK(tpu_kernel_geqrf(&ab, &ob, NULL));
  CHECK(fabs(o[0] + 5) < 1e-15 && fabs(o[1] + 2.2) < 1e-15 && fabs(o[2] - 0.5) < 1e-15 &&
        fabs(o[3] - 0.4) < 1e-15);
  CHECK(fabs(o[4] - 1.6) < 1e-15 && o[5] == 0); /* tau */
  /* Q = H_0: [[-0.6, -0.8], [-0.8, 0.6]] */
  double q[4];
  tpu_buf_t pb = packed_part(&ob), tb = tau_part(&ob), qb = matrices(q, TPU_F64, 1, 2, 2, false);
  CHECK_OK(tpu_kernel_householder_product(&pb, &tb, &qb, NULL));
  CHECK(fabs(q[0] + 0.6) < 1e-15 && fabs(q[1] + 0.8) < 1e-15 && fabs(q[2] + 0.8) < 1e-15 &&
        fabs(q[3] - 0.6) < 1e-15);
  /* a column already zero below the diagonal: tau = 0, R keeps the column (even a
   * negative diagonal) */
  double u[6] = {-2, 1, 0, 3, 0, 0}, uo[8];
  tpu_buf_t ub = matrices(u, TPU_F64, 1, 3, 2, false), uob = matrices(uo, TPU_F64, 1, 4, 2, false);
  CHECK_OK(tpu_kernel_geqrf(&ub, &uob, NULL));
  CHECK(uo[6] == 0 && uo[7] == 0 && memcmp(u, uo, sizeof u) == 0);
  /* no rows: only tau's row, all zero */
  double e[2] = {1, 1};
  tpu_buf_t none = matrices(NULL, TPU_F64, 1, 0, 2, false);
  tpu_buf_t eb = matrices(e, TPU_F64, 1, 1, 2, false);
  CHECK_OK(tpu_kernel_geqrf(&none, &eb, g_pool2));
  CHECK(e[0] == 0 && e[1] == 0);
}

TEST(qr_kernel_errors) {
  double m[32];
  int32_t im[8];
  tpu_buf_t wide = matrices(m, TPU_F64, 1, 2, 3, false);
  tpu_buf_t tall = matrices(m, TPU_F64, 1, 3, 2, false);
  tpu_buf_t ints = matrices(im, TPU_I32, 1, 2, 2, false);
  tpu_buf_t tau2 = vectors(m + 16, TPU_F64, 1, 2), tau3 = vectors(m + 16, TPU_F64, 1, 3);
  CHECK(tpu_kernel_geqrf(&ints, &ints, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "geqrf: a is i32, expected a float dtype");
  tpu_buf_t same_rows = wide;
  CHECK(tpu_kernel_geqrf(&wide, &same_rows, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "geqrf: out must be f64 [..., m + 1, n]");
  CHECK(tpu_kernel_geqrf(&wide, &tall, NULL) == TPU_ERR_INVALID_ARGUMENT);
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
  tpu_value_t f_tall = tpu_graph_geqrf(g, tall), f_wide = tpu_graph_geqrf(g, wide);
  CHECK(tpu_graph_status(g) == TPU_OK);
  const tpu_node_t *ft = tpu_graph_node(g, f_tall), *fw = tpu_graph_node(g, f_wide);
  CHECK(ft->shape.rank == 3 && ft->shape.dims[0] == 2 && ft->shape.dims[1] == 6 &&
        ft->shape.dims[2] == 3);
  CHECK(fw->shape.rank == 2 && fw->shape.dims[0] == 4 && fw->dtype == TPU_F64);
  tpu_value_t v = tpu_graph_slice(g, f_tall, (int64_t[]){0, 0, 0}, (int64_t[]){2, 5, 3},
                                  (int64_t[]){1, 1, 1});
  tpu_value_t t = tpu_graph_reshape(g, tpu_graph_slice(g, f_tall, (int64_t[]){0, 5, 0},
                                                       (int64_t[]){2, 6, 3}, (int64_t[]){1, 1, 1}),
                                    &(tpu_shape_t){2, {2, 3}});
  tpu_value_t q = tpu_graph_householder_product(g, v, t);
  CHECK_OK(tpu_graph_output(g, q, NULL));
  CHECK_OK(tpu_graph_verify(g));
  /* prints as custom calls, the product with both operands */
  char *text = NULL;
  CHECK_OK(tpu_graph_print_stablehlo(g, "qr", tpu_allocator_system(), &text, NULL));
  CHECK_CONTAINS(text, "call_target_name = \"torchtpu.geqrf\"}> : (tensor<2x5x3xf32>) -> "
                       "tensor<2x6x3xf32>");
  CHECK_CONTAINS(text, "call_target_name = \"torchtpu.householder_product\"}> : "
                       "(tensor<2x5x3xf32>, tensor<2x3xf32>) -> tensor<2x5x3xf32>");
  tpu_allocator_free(tpu_allocator_system(), text);
  /* serialized and read back: the same graph */
  expect_serialize_round_trip(g);
  /* shape rules */
  CHECK(tpu_graph_householder_product(g, wide, ir_param(g, TPU_F64, SHAPE(3))) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(g), "v must have at least as many rows as columns");
  tpu_graph_destroy(g);
  g = ir_graph();
  tpu_value_t v2 = ir_param(g, TPU_F32, SHAPE(5, 2)), long_tau = ir_param(g, TPU_F32, SHAPE(3));
  CHECK(tpu_graph_householder_product(g, v2, long_tau) == TPU_NO_VALUE);
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
