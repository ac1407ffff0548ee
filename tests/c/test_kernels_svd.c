/* test_kernels_svd.c: the thin singular value decomposition kernel (svd.c) and its IR op
 * SVD (shape rule, hash, serialization, printing).
 *
 * Batches of random tall and square matrices in f64 and f32, row- and column-major: U^T U =
 * I, V^T V = I, A = U diag(s) V^T and s descending and >= 0, within a tolerance of the
 * dtype's epsilon times the size; a pool gives the same bits. Rank-deficient matrices
 * (repeated and zero columns, the zero matrix: U still orthonormal). By hand: a diagonal
 * matrix, entries near f64's overflow and underflow, a NaN or an infinity (NaN throughout),
 * no columns; the argument errors.
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

/* Checks matrix |m| of result |out| against |a| (rows x n): orthonormal U and V columns,
 * A = U S V^T, s descending and >= 0, each within |tol| (times the largest |A_ij| for the
 * reconstruction). */
static void expect_svd(const tpu_buf_t *a, const tpu_buf_t *out, int64_t m, double tol) {
  const int64_t rows = a->dims[1], n = a->dims[2];
  double big = 0, worst_u = 0, worst_v = 0, worst_res = 0;
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < n; c++) big = fmax(big, fabs(at(a, m, r, c)));
  }
  for (int64_t i = 0; i < n; i++) {
    for (int64_t j = 0; j < n; j++) {
      double uu = 0, vv = 0;
      for (int64_t k = 0; k < rows; k++) uu += at(out, m, k, i) * at(out, m, k, j);
      for (int64_t k = 0; k < n; k++) vv += at(out, m, rows + k, i) * at(out, m, rows + k, j);
      worst_u = fmax(worst_u, fabs(uu - (i == j)));
      worst_v = fmax(worst_v, fabs(vv - (i == j)));
    }
    CHECK(at(out, m, rows + n, i) >= 0);
    if (i > 0) CHECK(at(out, m, rows + n, i - 1) >= at(out, m, rows + n, i));
  }
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < n; c++) {
      double usv = 0;
      for (int64_t k = 0; k < n; k++) {
        usv += at(out, m, r, k) * at(out, m, rows + n, k) * at(out, m, rows + c, k);
      }
      worst_res = fmax(worst_res, fabs(usv - at(a, m, r, c)));
    }
  }
  if (worst_u > tol || worst_v > tol || worst_res > tol * (big > 0 ? big : 1)) {
    fprintf(stderr, "  matrix %lld (%lld x %lld): |U^T U - I| %g, |V^T V - I| %g, "
            "|U S V^T - A| %g, tol %g\n", (long long)m, (long long)rows, (long long)n, worst_u,
            worst_v, worst_res, tol);
    CHECK(false);
  }
}

/* Runs the kernel on |batch| matrices of rows x n that |fill| makes, plain and on the pool
 * (same bits), in both dtypes and layouts, and checks each. */
static void check_batches(int64_t batch, int64_t rows, int64_t n,
                          double (*fill)(int64_t m, int64_t r, int64_t c)) {
  for (int d = 0; d < 2; d++) {
    tpu_dtype_t dt = d ? TPU_F32 : TPU_F64;
    size_t es = d ? 4 : 8;
    for (int layout = 0; layout < 2; layout++) {
      void *ad = malloc((size_t)(batch * rows * n) * es + 1);
      void *od = malloc((size_t)(batch * (rows + n + 1) * n) * es + 1);
      void *pd = malloc((size_t)(batch * (rows + n + 1) * n) * es + 1);
      tpu_buf_t a = matrices(ad, dt, batch, rows, n, layout == 1);
      tpu_buf_t out = matrices(od, dt, batch, rows + n + 1, n, layout == 1);
      tpu_buf_t pooled = matrices(pd, dt, batch, rows + n + 1, n, false);
      for (int64_t m = 0; m < batch; m++) {
        for (int64_t r = 0; r < rows; r++) {
          for (int64_t c = 0; c < n; c++) set(&a, m, r, c, fill(m, r, c));
        }
      }
      CHECK_OK(tpu_kernel_svd(&a, &out, NULL));
      CHECK_OK(tpu_kernel_svd(&a, &pooled, g_pool2));
      double eps = d ? 1.2e-7 : 2.3e-16;
      for (int64_t m = 0; m < batch; m++) {
        expect_svd(&a, &out, m, 8 * eps * (double)(rows + n));
        for (int64_t r = 0; r < rows + n + 1; r++) {
          for (int64_t c = 0; c < n; c++) CHECK(at(&out, m, r, c) == at(&pooled, m, r, c));
        }
      }
      free(ad);
      free(od);
      free(pd);
    }
  }
}

static double random_fill(int64_t m, int64_t r, int64_t c) {
  (void)m, (void)r, (void)c;
  return drand();
}

/* rank-deficient: column 1 repeats column 0, column 2 is zero (where they exist); matrix 2
 * is all zeros */
static double deficient_fill(int64_t m, int64_t r, int64_t c) {
  static double col0[64];
  if (m == 2 || c == 2) return 0;
  if (c == 0) return col0[r] = drand();
  if (c == 1) return col0[r];
  return drand();
}

TEST(svd_random_batches) {
  const int64_t shapes[][2] = {{1, 1}, {2, 2}, {3, 1}, {5, 3}, {8, 8}, {17, 9}, {32, 32}, {40, 7}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    check_batches(3, shapes[i][0], shapes[i][1], random_fill);
  }
}

TEST(svd_rank_deficient) {
  const int64_t shapes[][2] = {{3, 3}, {6, 4}, {9, 9}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    check_batches(3, shapes[i][0], shapes[i][1], deficient_fill);
  }
}

/* svd of the rows x n f64 matrix |a| (row-major) into |out| ((rows + n + 1) x n) */
static void svd_f64(double *a, int64_t rows, int64_t n, double *out) {
  tpu_buf_t ab = matrices(a, TPU_F64, 1, rows, n, false);
  tpu_buf_t ob = matrices(out, TPU_F64, 1, rows + n + 1, n, false);
  CHECK_OK(tpu_kernel_svd(&ab, &ob, NULL));
}

TEST(svd_by_hand) {
  double out[32];
  /* diag(1, -3) in a 3 x 2: s = (3, 1), the unit vectors up to sign */
  svd_f64((double[]){1, 0, 0, -3, 0, 0}, 3, 2, out);
  CHECK(out[10] == 3 && out[11] == 1);
  CHECK(fabs(out[0 * 2 + 1]) == 1 && fabs(out[1 * 2 + 0]) == 1); /* U's columns */
  CHECK(out[0 * 2 + 1] * out[(3 + 0) * 2 + 1] == 1);             /* u_2 v_2 = sign of 1 */
  CHECK(out[1 * 2 + 0] * out[(3 + 1) * 2 + 0] == -1);            /* u_1 v_1 = sign of -3 */
  /* near overflow and underflow: [[s, s], [s, s]] has 2 s and 0 */
  const double scales[] = {1e300, 1e-300};
  for (int i = 0; i < 2; i++) {
    double s = scales[i];
    svd_f64((double[]){s, s, s, s}, 2, 2, out);
    CHECK(fabs(out[8] / (2 * s) - 1) < 1e-15 && fabs(out[9]) <= 1e-15 * s);
    CHECK(fabs(out[0] * out[0] + out[2] * out[2] - 1) < 1e-15); /* u's stay unit */
    CHECK(fabs(out[1] * out[1] + out[3] * out[3] - 1) < 1e-15);
  }
  /* a NaN or an infinity anywhere: NaN throughout */
  svd_f64((double[]){1, 0, 0, NAN}, 2, 2, out);
  for (int i = 0; i < 10; i++) CHECK(isnan(out[i]));
  svd_f64((double[]){INFINITY, 0, 0, 1}, 2, 2, out);
  CHECK(isnan(out[8]));
  /* no columns: nothing to write */
  tpu_buf_t none = matrices(NULL, TPU_F64, 1, 3, 0, false);
  tpu_buf_t rows = matrices(out, TPU_F64, 1, 4, 0, false);
  CHECK_OK(tpu_kernel_svd(&none, &rows, g_pool2));
}

TEST(svd_kernel_errors) {
  double m[64];
  int32_t im[8];
  tpu_buf_t wide = matrices(m, TPU_F64, 1, 2, 3, false);
  tpu_buf_t ints = matrices(im, TPU_I32, 1, 2, 2, false);
  tpu_buf_t sq = matrices(m, TPU_F64, 1, 2, 2, false);
  tpu_buf_t out = matrices(m + 8, TPU_F64, 1, 5, 2, false);
  CHECK(tpu_kernel_svd(&ints, &out, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "svd: a is i32, expected a float dtype");
  CHECK(tpu_kernel_svd(&wide, &out, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "svd: a must have at least as many rows as columns");
  tpu_buf_t same = sq;
  CHECK(tpu_kernel_svd(&sq, &same, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "svd: out must be f64 [..., m + n + 1, n]");
  tpu_buf_t f32_out = matrices(m + 8, TPU_F32, 1, 5, 2, false);
  CHECK(tpu_kernel_svd(&sq, &f32_out, NULL) == TPU_ERR_INVALID_ARGUMENT);
}

TEST(svd_ir_op) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 5, 3));
  tpu_value_t e = tpu_graph_svd(g, a);
  CHECK(tpu_graph_status(g) == TPU_OK);
  const tpu_node_t *n = tpu_graph_node(g, e);
  CHECK(n->dtype == TPU_F32 && n->shape.rank == 3 && n->shape.dims[0] == 2 &&
        n->shape.dims[1] == 9 && n->shape.dims[2] == 3);
  CHECK_OK(tpu_graph_output(g, e, NULL));
  CHECK_OK(tpu_graph_verify(g));
  char *text = NULL;
  CHECK_OK(tpu_graph_print_stablehlo(g, "svd", tpu_allocator_system(), &text, NULL));
  CHECK_CONTAINS(text, "call_target_name = \"torchtpu.svd\"}> : (tensor<2x5x3xf32>) -> "
                       "tensor<2x9x3xf32>");
  tpu_allocator_free(tpu_allocator_system(), text);
  expect_serialize_round_trip(g);
  tpu_graph_t *h = ir_graph();
  CHECK_OK(tpu_graph_output(h, tpu_graph_eigh(h, ir_param(h, TPU_F32, SHAPE(2, 5, 5))), NULL));
  CHECK(tpu_graph_hash(g) != tpu_graph_hash(h));
  tpu_graph_destroy(h);
  tpu_graph_destroy(g);
  /* shape rules */
  g = ir_graph();
  CHECK(tpu_graph_svd(g, ir_param(g, TPU_F32, SHAPE(3, 4))) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(g), "operand must have at least as many rows as "
                                             "columns, got 3 x 4");
  tpu_graph_destroy(g);
  g = ir_graph();
  CHECK(tpu_graph_svd(g, ir_param(g, TPU_F32, SHAPE(3))) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(g), "operand must have rank >= 2");
  tpu_graph_destroy(g);
  g = ir_graph();
  CHECK(tpu_graph_svd(g, ir_param(g, TPU_I32, SHAPE(3, 3))) == TPU_NO_VALUE);
  tpu_graph_destroy(g);
}

int main(void) {
  if (tpu_pool_create(2, tpu_allocator_system(), &g_pool2) != TPU_OK) {
    fprintf(stderr, "cannot create a pool: %s\n", tpu_status_message());
    return 1;
  }
  RUN(svd_random_batches);
  RUN(svd_rank_deficient);
  RUN(svd_by_hand);
  RUN(svd_kernel_errors);
  RUN(svd_ir_op);
  tpu_pool_destroy(g_pool2);
  return check_report();
}
