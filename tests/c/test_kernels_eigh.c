/* test_kernels_eigh.c: the symmetric eigendecomposition kernel (eigh.c) and its IR op EIGH
 * (shape rule, hash, serialization, printing).
 *
 * Batches of random symmetric matrices in f64 and f32, row- and column-major, with garbage
 * in the upper triangle (only the lower one is read): V^T V = I, A V = V diag(w) and w
 * ascending, within a tolerance of the dtype's epsilon times n; a pool gives the same bits.
 * By hand: a 2 x 2, a diagonal matrix (eigenvalues sorted, vectors the unit vectors up to
 * sign), repeated eigenvalues, the zero matrix, entries near f64's overflow and underflow,
 * a NaN or an infinity (NaN throughout), no rows; the argument errors.
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

/* A's element (r, c) as the kernel sees it: the lower triangle mirrored */
static double sym(const tpu_buf_t *a, int64_t m, int64_t r, int64_t c) {
  return r >= c ? at(a, m, r, c) : at(a, m, c, r);
}

/* Checks matrix |m| of result |out| against |a|: orthonormal vectors, A V = V diag(w) and w
 * ascending, each within |tol| times the largest |A_ij| (1 for the orthogonality). */
static void expect_eigh(const tpu_buf_t *a, const tpu_buf_t *out, int64_t m, double tol) {
  int64_t n = a->dims[1];
  double big = 0, worst_orth = 0, worst_res = 0;
  for (int64_t r = 0; r < n; r++) {
    for (int64_t c = 0; c < n; c++) big = fmax(big, fabs(sym(a, m, r, c)));
  }
  for (int64_t i = 0; i < n; i++) {
    for (int64_t j = 0; j < n; j++) {
      double vv = 0, av = 0;
      for (int64_t k = 0; k < n; k++) {
        vv += at(out, m, k, i) * at(out, m, k, j);
        av += sym(a, m, i, k) * at(out, m, k, j); /* (A V)_ij */
      }
      worst_orth = fmax(worst_orth, fabs(vv - (i == j)));
      worst_res = fmax(worst_res, fabs(av - at(out, m, i, j) * at(out, m, n, j)));
    }
    if (i > 0) CHECK(at(out, m, n, i - 1) <= at(out, m, n, i));
  }
  if (worst_orth > tol || worst_res > tol * (big > 0 ? big : 1)) {
    fprintf(stderr, "  matrix %lld (n %lld): |V^T V - I| %g, |A V - V W| %g, tol %g\n",
            (long long)m, (long long)n, worst_orth, worst_res, tol);
    CHECK(false);
  }
}

TEST(eigh_random_batches) {
  const int64_t sizes[] = {1, 2, 3, 5, 8, 17, 32};
  for (int d = 0; d < 2; d++) {
    tpu_dtype_t dt = d ? TPU_F32 : TPU_F64;
    size_t es = d ? 4 : 8;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
      int64_t n = sizes[si], batch = 3;
      for (int layout = 0; layout < 2; layout++) {
        void *ad = malloc((size_t)(batch * n * n) * es);
        void *od = malloc((size_t)(batch * (n + 1) * n) * es);
        void *pd = malloc((size_t)(batch * (n + 1) * n) * es);
        tpu_buf_t a = matrices(ad, dt, batch, n, n, layout == 1);
        tpu_buf_t out = matrices(od, dt, batch, n + 1, n, layout == 1);
        tpu_buf_t pooled = matrices(pd, dt, batch, n + 1, n, false);
        for (int64_t m = 0; m < batch; m++) {
          for (int64_t r = 0; r < n; r++) {
            for (int64_t c = 0; c < n; c++) set(&a, m, r, c, r >= c ? drand() : 1e6); /* garbage */
          }
        }
        CHECK_OK(tpu_kernel_eigh(&a, &out, NULL));
        CHECK_OK(tpu_kernel_eigh(&a, &pooled, g_pool2));
        double eps = d ? 1.2e-7 : 2.3e-16;
        for (int64_t m = 0; m < batch; m++) {
          expect_eigh(&a, &out, m, 8 * eps * (double)n);
          for (int64_t r = 0; r <= n; r++) {
            for (int64_t c = 0; c < n; c++) CHECK(at(&out, m, r, c) == at(&pooled, m, r, c));
          }
        }
        free(ad);
        free(od);
        free(pd);
      }
    }
  }
}

/* eigh of the n x n f64 matrix |a| (row-major) into |out| ((n + 1) x n) */
static void eigh_f64(double *a, int64_t n, double *out) {
  tpu_buf_t ab = matrices(a, TPU_F64, 1, n, n, false), ob = matrices(out, TPU_F64, 1, n + 1, n, false);
  CHECK_OK(tpu_kernel_eigh(&ab, &ob, NULL));
}

TEST(eigh_by_hand) {
  double out[20];
  /* [[2, 1], [1, 2]]: 1 with (1, -1) / sqrt 2, 3 with (1, 1) / sqrt 2 */
  eigh_f64((double[]){2, 1, 1, 2}, 2, out);
  CHECK(fabs(out[4] - 1) < 1e-15 && fabs(out[5] - 3) < 1e-15);
  CHECK(fabs(fabs(out[0]) - sqrt(0.5)) < 1e-15 && fabs(out[0] + out[2]) < 1e-15);
  CHECK(fabs(out[1] - out[3]) < 1e-15);
  /* a diagonal matrix: its diagonal sorted, unit vectors */
  eigh_f64((double[]){3, 0, 0, 0, -1, 0, 0, 0, 2}, 3, out);
  CHECK(out[9] == -1 && out[10] == 2 && out[11] == 3);
  CHECK(fabs(out[3 * 1 + 0]) == 1 && fabs(out[3 * 2 + 1]) == 1 && fabs(out[3 * 0 + 2]) == 1);
  /* repeated eigenvalues: 2 I; the zero matrix */
  eigh_f64((double[]){2, 0, 0, 2}, 2, out);
  CHECK(out[4] == 2 && out[5] == 2 && out[0] * out[0] + out[2] * out[2] == 1);
  eigh_f64((double[]){0, 0, 0, 0}, 2, out);
  CHECK(out[4] == 0 && out[5] == 0);
  /* near overflow and underflow: [[s, s], [s, s]] has 0 and 2 s */
  const double scales[] = {1e300, 1e-300};
  for (int i = 0; i < 2; i++) {
    double s = scales[i];
    eigh_f64((double[]){s, s, s, s}, 2, out);
    CHECK(fabs(out[4]) <= 1e-15 * s && fabs(out[5] / (2 * s) - 1) < 1e-15);
  }
  /* a NaN or an infinity in the lower triangle: NaN throughout; in the upper one: ignored */
  eigh_f64((double[]){1, 0, NAN, 1}, 2, out);
  for (int i = 0; i < 6; i++) CHECK(isnan(out[i]));
  eigh_f64((double[]){INFINITY, 0, 0, 1}, 2, out);
  CHECK(isnan(out[4]));
  eigh_f64((double[]){1, NAN, 0, 1}, 2, out);
  CHECK(out[4] == 1 && out[5] == 1);
  /* no rows: nothing to write */
  tpu_buf_t none = matrices(NULL, TPU_F64, 1, 0, 0, false), one_row = matrices(out, TPU_F64, 1, 1, 0, false);
  CHECK_OK(tpu_kernel_eigh(&none, &one_row, g_pool2));
}

TEST(eigh_kernel_errors) {
  double m[32];
  int32_t im[8];
  tpu_buf_t wide = matrices(m, TPU_F64, 1, 2, 3, false);
  tpu_buf_t ints = matrices(im, TPU_I32, 1, 2, 2, false);
  tpu_buf_t sq = matrices(m, TPU_F64, 1, 2, 2, false);
  tpu_buf_t out = matrices(m + 8, TPU_F64, 1, 3, 2, false);
  CHECK(tpu_kernel_eigh(&ints, &out, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "eigh: a is i32, expected a float dtype");
  CHECK(tpu_kernel_eigh(&wide, &out, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "eigh: a must be square matrices");
  tpu_buf_t same = sq;
  CHECK(tpu_kernel_eigh(&sq, &same, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "eigh: out must be f64 [..., n + 1, n]");
  tpu_buf_t f32_out = matrices(m + 8, TPU_F32, 1, 3, 2, false);
  CHECK(tpu_kernel_eigh(&sq, &f32_out, NULL) == TPU_ERR_INVALID_ARGUMENT);
}

TEST(eigh_ir_op) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 4, 4));
  tpu_value_t e = tpu_graph_eigh(g, a);
  CHECK(tpu_graph_status(g) == TPU_OK);
  const tpu_node_t *n = tpu_graph_node(g, e);
  CHECK(n->dtype == TPU_F32 && n->shape.rank == 3 && n->shape.dims[0] == 2 &&
        n->shape.dims[1] == 5 && n->shape.dims[2] == 4);
  CHECK_OK(tpu_graph_output(g, e, NULL));
  CHECK_OK(tpu_graph_verify(g));
  char *text = NULL;
  CHECK_OK(tpu_graph_print_stablehlo(g, "eigh", tpu_allocator_system(), &text, NULL));
  CHECK_CONTAINS(text, "call_target_name = \"torchtpu.eigh\"}> : (tensor<2x4x4xf32>) -> "
                       "tensor<2x5x4xf32>");
  tpu_allocator_free(tpu_allocator_system(), text);
  expect_serialize_round_trip(g);
  tpu_graph_t *h = ir_graph();
  CHECK_OK(tpu_graph_output(h, tpu_graph_eigh(h, ir_param(h, TPU_F64, SHAPE(2, 4, 4))), NULL));
  CHECK(tpu_graph_hash(g) != tpu_graph_hash(h));
  tpu_graph_destroy(h);
  tpu_graph_destroy(g);
  /* shape rules */
  g = ir_graph();
  CHECK(tpu_graph_eigh(g, ir_param(g, TPU_F32, SHAPE(3, 4))) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(g), "operand must be square matrices, got 3 x 4");
  tpu_graph_destroy(g);
  g = ir_graph();
  CHECK(tpu_graph_eigh(g, ir_param(g, TPU_F32, SHAPE(3))) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(g), "operand must have rank >= 2");
  tpu_graph_destroy(g);
  g = ir_graph();
  CHECK(tpu_graph_eigh(g, ir_param(g, TPU_I32, SHAPE(3, 3))) == TPU_NO_VALUE);
  tpu_graph_destroy(g);
}

int main(void) {
  if (tpu_pool_create(2, tpu_allocator_system(), &g_pool2) != TPU_OK) {
    fprintf(stderr, "cannot create a pool: %s\n", tpu_status_message());
    return 1;
  }
  RUN(eigh_random_batches);
  RUN(eigh_by_hand);
  RUN(eigh_kernel_errors);
  RUN(eigh_ir_op);
  tpu_pool_destroy(g_pool2);
  return check_report();
}
