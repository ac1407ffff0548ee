/* test_kernels_linalg.c: the Cholesky and triangular-solve kernels (linalg.c) and their IR
 * ops (shape rules, hash, serialization).
 *
 * Cholesky: batches of random SPD matrices in f64 and f32, lower and upper, checked by
 * L L^T = A (U^T U = A) and the shape of the factor (zeros in the other triangle, a positive
 * diagonal); only the chosen triangle is read (garbage in the other one changes nothing);
 * a matrix whose second leading minor is not positive definite gives a finite first column
 * and NaN from the failed pivot on; strided and in-place operands, one thread or a pool give
 * the same bits. Triangular solve: all 16 combinations of left/right, lower/upper, unit
 * diagonal and transpose, checked by multiplying back with the triangle written out here
 * (the other triangle and, with unit_diagonal, the diagonal hold garbage). Bad operands give
 * TPU_ERR_INVALID_ARGUMENT naming the kernel. LU: L U = A[perm] with multipliers of at most 1
 * (partial pivoting), the same pivots with or without the factors, a zero pivot left in
 * place, ties to the first row, pivots -> permutation and an out-of-range pivot.
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

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double drand(void) { /* in [-1, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 4503599627370496.0 - 1.0;
}

static tpu_buf_t dense(void *data, tpu_dtype_t dt, int64_t batch, int64_t rows, int64_t cols) {
  tpu_buf_t b = {.data = data, .dtype = dt, .rank = 3, .dims = {batch, rows, cols},
                 .strides = {rows * cols, cols, 1}};
  return b;
}

static double get(const tpu_buf_t *b, int64_t m, int64_t r, int64_t c) {
  int64_t i = m * b->strides[0] + r * b->strides[1] + c * b->strides[2];
  return b->dtype == TPU_F64 ? ((const double *)b->data)[i] : ((const float *)b->data)[i];
}

static void set(const tpu_buf_t *b, int64_t m, int64_t r, int64_t c, double v) {
  int64_t i = m * b->strides[0] + r * b->strides[1] + c * b->strides[2];
  if (b->dtype == TPU_F64) ((double *)b->data)[i] = v;
  else ((float *)b->data)[i] = (float)v;
}

/* batch SPD matrices a = m m^T + n I, rounded to a's dtype */
static void fill_spd(const tpu_buf_t *a) {
  int64_t batch = a->dims[0], n = a->dims[1];
  double *m = malloc((size_t)(n * n) * sizeof *m);
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t i = 0; i < n * n; i++) m[i] = drand();
    for (int64_t r = 0; r < n; r++) {
      for (int64_t c = 0; c < n; c++) {
        double s = r == c ? (double)n : 0.0;
        for (int64_t k = 0; k < n; k++) s += m[r * n + k] * m[c * n + k];
        set(a, b, r, c, s);
      }
    }
  }
  free(m);
}

/* max |(L L^T or U^T U) - a| / max |a| over the batch, and whether the factor has the
 * right shape (zeros in the other triangle, positive diagonal) */
static double factor_error(const tpu_buf_t *a, const tpu_buf_t *f, bool lower, bool *shape_ok) {
  int64_t batch = a->dims[0], n = a->dims[1];
  double err = 0, scale = 0;
  *shape_ok = true;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t r = 0; r < n; r++) {
      for (int64_t c = 0; c < n; c++) {
        bool other = lower ? c > r : c < r;
        if (other && get(f, b, r, c) != 0.0) *shape_ok = false;
        if (r == c && !(get(f, b, r, c) > 0)) *shape_ok = false;
        double s = 0;
        for (int64_t k = 0; k < n; k++) {
          s += lower ? get(f, b, r, k) * get(f, b, c, k) : get(f, b, k, r) * get(f, b, k, c);
        }
        double want = get(a, b, r, c);
        if (fabs(s - want) > err) err = fabs(s - want);
        if (fabs(want) > scale) scale = fabs(want);
      }
    }
  }
  return scale > 0 ? err / scale : err;
}

TEST(cholesky_factors_spd_batches) {
  static const int64_t sizes[] = {1, 2, 5, 17};
  for (int dt = 0; dt < 2; dt++) {
    tpu_dtype_t dtype = dt ? TPU_F32 : TPU_F64;
    double tol = dt ? 1e-5 : 1e-13;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      int64_t n = sizes[s], batch = 3, count = batch * n * n;
      double *ma = malloc((size_t)count * 8), *mf = malloc((size_t)count * 8);
      tpu_buf_t a = dense(ma, dtype, batch, n, n), f = dense(mf, dtype, batch, n, n);
      fill_spd(&a);
      for (int lower = 0; lower < 2; lower++) {
        CHECK_OK(tpu_kernel_cholesky(lower, &a, &f, g_pool2));
        bool shape_ok;
        double err = factor_error(&a, &f, lower, &shape_ok);
        if (err > tol || !shape_ok) {
          fprintf(stderr, "  cholesky %s n=%lld lower=%d: error %g, shape %d\n",
                  tpu_dtype_name(dtype), (long long)n, lower, err, shape_ok);
        }
        CHECK(err <= tol);
        CHECK(shape_ok);
      }
      free(ma);
      free(mf);
    }
  }
}

TEST(cholesky_reads_one_triangle_strided_inplace_and_threads) {
  enum { B = 4, N = 6 };
  double a[B * N * N], junk[B * N * N], f1[B * N * N], f2[B * N * N];
  tpu_buf_t ab = dense(a, TPU_F64, B, N, N);
  fill_spd(&ab);
  for (int lower = 0; lower < 2; lower++) {
    /* the other triangle replaced by garbage: same factor */
    memcpy(junk, a, sizeof a);
    tpu_buf_t jb = dense(junk, TPU_F64, B, N, N);
    for (int64_t b = 0; b < B; b++) {
      for (int64_t r = 0; r < N; r++) {
        for (int64_t c = 0; c < N; c++) {
          if (lower ? c > r : c < r) set(&jb, b, r, c, 1e6 * drand());
        }
      }
    }
    tpu_buf_t o1 = dense(f1, TPU_F64, B, N, N), o2 = dense(f2, TPU_F64, B, N, N);
    CHECK_OK(tpu_kernel_cholesky(lower, &ab, &o1, NULL));
    CHECK_OK(tpu_kernel_cholesky(lower, &jb, &o2, g_pool2));
    CHECK(memcmp(f1, f2, sizeof f1) == 0);
    /* in place */
    CHECK_OK(tpu_kernel_cholesky(lower, &jb, &jb, g_pool2));
    CHECK(memcmp(f1, junk, sizeof f1) == 0);
    /* a transposed view of the symmetric matrices: the same factor */
    tpu_buf_t t = ab;
    t.strides[1] = ab.strides[2], t.strides[2] = ab.strides[1];
    CHECK_OK(tpu_kernel_cholesky(lower, &t, &o2, NULL));
    CHECK(memcmp(f1, f2, sizeof f1) == 0);
  }
}

TEST(cholesky_not_positive_definite) {
  /* leading minor of order 2 is [[1, 2], [2, 1]]: indefinite */
  double a[9] = {1, 2, 0, 2, 1, 0, 0, 0, 1}, f[9];
  tpu_buf_t ab = dense(a, TPU_F64, 1, 3, 3), fb = dense(f, TPU_F64, 1, 3, 3);
  CHECK_OK(tpu_kernel_cholesky(true, &ab, &fb, NULL));
  CHECK(f[0] == 1 && f[3] == 2 && f[6] == 0);   /* column 0 computed */
  CHECK(isnan(f[4]) && isnan(f[7]) && isnan(f[8]));  /* from the failed pivot on */
  CHECK(f[1] == 0 && f[2] == 0 && f[5] == 0);   /* the upper triangle */
  /* a NaN on the diagonal fails there too */
  double b[4] = {NAN, 0, 0, 1}, g[4];
  tpu_buf_t bb = dense(b, TPU_F64, 1, 2, 2), gb = dense(g, TPU_F64, 1, 2, 2);
  CHECK_OK(tpu_kernel_cholesky(false, &bb, &gb, NULL));
  CHECK(isnan(g[0]) && isnan(g[3]) && isnan(g[1]) && g[2] == 0);
}

/* max |op(a) x - b| (left) or |x op(a) - b| with op(a) the triangle of a the solve uses */
static double solve_residual(const tpu_triangular_solve_attrs_t *t, const tpu_buf_t *a,
                             const tpu_buf_t *x, const tpu_buf_t *b) {
  int64_t batch = a->dims[0], n = a->dims[1];
  int64_t rows = b->dims[1], cols = b->dims[2];
  double err = 0;
  for (int64_t m = 0; m < batch; m++) {
    for (int64_t r = 0; r < rows; r++) {
      for (int64_t c = 0; c < cols; c++) {
        double s = 0;
        for (int64_t k = 0; k < n; k++) {
          /* op(a)[i][j] */
          int64_t i = t->left_side ? r : k, j = t->left_side ? k : c;
          int64_t ai = t->transpose_a ? j : i, aj = t->transpose_a ? i : j;
          double v = ai == aj ? (t->unit_diagonal ? 1.0 : get(a, m, ai, aj))
                     : ((t->lower ? aj < ai : aj > ai) ? get(a, m, ai, aj) : 0.0);
          s += t->left_side ? v * get(x, m, k, c) : get(x, m, r, k) * v;
        }
        double d = fabs(s - get(b, m, r, c));
        if (d > err) err = d;
      }
    }
  }
  return err;
}

TEST(triangular_solve_all_variants) {
  enum { B = 2, N = 7, K = 3 };
  for (int dt = 0; dt < 2; dt++) {
    tpu_dtype_t dtype = dt ? TPU_F32 : TPU_F64;
    double tol = dt ? 1e-5 : 1e-13;
    for (int v = 0; v < 16; v++) {
      tpu_triangular_solve_attrs_t t = {v & 1, (v >> 1) & 1, (v >> 2) & 1, (v >> 3) & 1};
      double am[B * N * N], bm[B * N * K], xm[B * N * K];
      tpu_buf_t a = dense(am, dtype, B, N, N);
      tpu_buf_t b = t.left_side ? dense(bm, dtype, B, N, K) : dense(bm, dtype, B, K, N);
      tpu_buf_t x = t.left_side ? dense(xm, dtype, B, N, K) : dense(xm, dtype, B, K, N);
      for (int64_t m = 0; m < B; m++) {
        for (int64_t r = 0; r < N; r++) {
          for (int64_t c = 0; c < N; c++) {
            bool used = r == c ? !t.unit_diagonal : (t.lower ? c < r : c > r);
            /* used entries well conditioned (diagonal 2..3); the rest garbage */
            set(&a, m, r, c, used ? (r == c ? 2.5 + 0.5 * drand() : 0.5 * drand()) : 1e3 * drand());
          }
        }
        for (int64_t r = 0; r < b.dims[1]; r++) {
          for (int64_t c = 0; c < b.dims[2]; c++) set(&b, m, r, c, drand());
        }
      }
      CHECK_OK(tpu_kernel_triangular_solve(&t, &a, &b, &x, v % 2 ? g_pool2 : NULL));
      double err = solve_residual(&t, &a, &x, &b);
      if (err > tol) {
        fprintf(stderr, "  triangular_solve %s left=%d lower=%d unit=%d transpose=%d: %g\n",
                tpu_dtype_name(dtype), t.left_side, t.lower, t.unit_diagonal, t.transpose_a,
                err);
      }
      CHECK(err <= tol);
      /* in place into b gives the same bits */
      CHECK_OK(tpu_kernel_triangular_solve(&t, &a, &b, &b, NULL));
      CHECK(memcmp(bm, xm, (size_t)(B * N * K) * tpu_dtype_size(dtype)) == 0);
    }
  }
}

/* L U == a[perm] with |L| <= 1 below the diagonal (partial pivoting), for random matrices */
TEST(lu_factors_with_partial_pivoting) {
  static const int64_t sizes[] = {1, 4, 9};
  for (int dt = 0; dt < 2; dt++) {
    tpu_dtype_t dtype = dt ? TPU_F32 : TPU_F64;
    double tol = dt ? 1e-5 : 1e-13;
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
      int64_t n = sizes[z], batch = 3, count = batch * n * n;
      double *ma = malloc((size_t)count * 8), *ml = malloc((size_t)count * 8);
      int32_t *piv = malloc((size_t)(batch * n) * 4), *perm = malloc((size_t)(batch * n) * 4);
      tpu_buf_t a = dense(ma, dtype, batch, n, n), lu = dense(ml, dtype, batch, n, n);
      for (int64_t b = 0; b < batch; b++) {
        for (int64_t r = 0; r < n; r++) {
          for (int64_t c = 0; c < n; c++) set(&a, b, r, c, drand());
        }
      }
      tpu_buf_t pb = {.data = piv, .dtype = TPU_I32, .rank = 2, .dims = {batch, n},
                      .strides = {n, 1}};
      tpu_buf_t qb = pb;
      qb.data = perm;
      CHECK_OK(tpu_kernel_lu(&a, &lu, &pb, g_pool2));
      CHECK_OK(tpu_kernel_lu_pivots_to_permutation(&pb, &qb, NULL));
      double err = 0, biggest = 0;
      for (int64_t b = 0; b < batch; b++) {
        for (int64_t r = 0; r < n; r++) {
          for (int64_t c = 0; c < n; c++) {
            double s = 0;
            for (int64_t k = 0; k <= (r < c ? r : c); k++) {
              s += (k == r ? 1.0 : get(&lu, b, r, k)) * get(&lu, b, k, c);
            }
            double d = fabs(s - get(&a, b, perm[b * n + r], c));
            if (d > err) err = d;
            if (c < r && fabs(get(&lu, b, r, c)) > biggest) biggest = fabs(get(&lu, b, r, c));
          }
        }
      }
      if (err > tol) {
        fprintf(stderr, "  lu %s n=%lld: error %g\n", tpu_dtype_name(dtype), (long long)n, err);
      }
      CHECK(err <= tol);
      CHECK(biggest <= 1.0);
      /* the pivots alone are the same */
      int32_t *piv2 = malloc((size_t)(batch * n) * 4);
      tpu_buf_t p2 = pb;
      p2.data = piv2;
      CHECK_OK(tpu_kernel_lu(&a, NULL, &p2, NULL));
      CHECK(memcmp(piv, piv2, (size_t)(batch * n) * 4) == 0);
      free(piv2);
      free(ma);
      free(ml);
      free(piv);
      free(perm);
    }
  }
}

TEST(lu_zero_pivot_and_permutations) {
  /* column 0 is zero: no swap, no scaling, U[0][0] = 0 (getrf's info 1) */
  double a[4] = {0, 2, 0, 3}, f[4];
  int32_t piv[2];
  tpu_buf_t ab = dense(a, TPU_F64, 1, 2, 2), fb = dense(f, TPU_F64, 1, 2, 2);
  tpu_buf_t pb = {.data = piv, .dtype = TPU_I32, .rank = 2, .dims = {1, 2}, .strides = {2, 1}};
  CHECK_OK(tpu_kernel_lu(&ab, &fb, &pb, NULL));
  CHECK(piv[0] == 1 && piv[1] == 2);
  CHECK(f[0] == 0 && f[1] == 2 && f[2] == 0 && f[3] == 3);
  /* the first row of largest magnitude: rows 1 and 2 tie at |3| */
  double t[9] = {1, 0, 0, -3, 1, 0, 3, 0, 1}, tf[9];
  int32_t tp[3];
  tpu_buf_t tb = dense(t, TPU_F64, 1, 3, 3), tfb = dense(tf, TPU_F64, 1, 3, 3);
  tpu_buf_t tpb = {.data = tp, .dtype = TPU_I32, .rank = 2, .dims = {1, 3}, .strides = {3, 1}};
  CHECK_OK(tpu_kernel_lu(&tb, &tfb, &tpb, NULL));
  CHECK(tp[0] == 2);
  /* pivots (1-based swaps in order) -> permutation */
  int32_t pv[3] = {3, 3, 3}, perm[3];
  tpu_buf_t pvb = {.data = pv, .dtype = TPU_I32, .rank = 1, .dims = {3}, .strides = {1}};
  tpu_buf_t qb = pvb;
  qb.data = perm;
  CHECK_OK(tpu_kernel_lu_pivots_to_permutation(&pvb, &qb, NULL));
  CHECK(perm[0] == 2 && perm[1] == 0 && perm[2] == 1);
  pv[1] = 4;
  CHECK(tpu_kernel_lu_pivots_to_permutation(&pvb, &qb, NULL) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "lu_pivots_to_permutation: pivot 4 is outside 1..3");
  tpu_buf_t wrong = fb;
  CHECK(tpu_kernel_lu(&ab, &fb, &wrong, NULL) == TPU_ERR_INVALID_ARGUMENT);
}

TEST(linalg_kernel_errors) {
  double m[24];
  int32_t im[4];
  tpu_buf_t rect = dense(m, TPU_F64, 1, 2, 3), sq = dense(m, TPU_F64, 1, 2, 2);
  tpu_buf_t ints = dense(im, TPU_I32, 1, 2, 2);
  CHECK(tpu_kernel_cholesky(true, &rect, &rect, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "cholesky: a must be square");
  CHECK(tpu_kernel_cholesky(true, &ints, &ints, NULL) == TPU_ERR_INVALID_ARGUMENT);
  tpu_buf_t f32 = dense(m, TPU_F32, 1, 2, 2);
  CHECK(tpu_kernel_cholesky(true, &sq, &f32, NULL) == TPU_ERR_INVALID_ARGUMENT);
  tpu_triangular_solve_attrs_t t = {true, true, false, false};
  tpu_buf_t b3 = dense(m + 8, TPU_F64, 1, 3, 2);
  CHECK(tpu_kernel_triangular_solve(&t, &sq, &b3, &b3, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "triangular_solve: b does not match a");
  tpu_buf_t b2 = dense(m + 8, TPU_F64, 2, 2, 1);
  CHECK(tpu_kernel_triangular_solve(&t, &sq, &b2, &b2, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "batch dim 0");
  CHECK(tpu_kernel_triangular_solve(NULL, &sq, &b2, &b2, NULL) == TPU_ERR_INVALID_ARGUMENT);
}

TEST(linalg_ir_ops) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 4, 4));
  tpu_value_t b = ir_param(g, TPU_F32, SHAPE(2, 3, 4));
  tpu_value_t l = tpu_graph_cholesky(g, a, true);
  tpu_triangular_solve_attrs_t right = {false, true, false, true};
  tpu_value_t x = tpu_graph_triangular_solve(g, l, b, &right);
  CHECK(tpu_graph_status(g) == TPU_OK);
  CHECK(tpu_graph_node(g, x)->shape.dims[1] == 3 && tpu_graph_node(g, x)->shape.dims[2] == 4);
  CHECK_OK(tpu_graph_output(g, x, NULL));
  CHECK_OK(tpu_graph_verify(g));
  /* the attributes are part of the hash */
  tpu_graph_t *h = ir_graph();
  tpu_value_t ha = ir_param(h, TPU_F32, SHAPE(2, 4, 4));
  tpu_value_t hb = ir_param(h, TPU_F32, SHAPE(2, 3, 4));
  right.transpose_a = false;
  tpu_value_t hx = tpu_graph_triangular_solve(h, tpu_graph_cholesky(h, ha, true), hb, &right);
  CHECK_OK(tpu_graph_output(h, hx, NULL));
  CHECK(tpu_graph_hash(g) != tpu_graph_hash(h));
  /* serialized and read back: the same graph */
  expect_serialize_round_trip(g);
  /* LU prints as custom calls (StableHLO has no LU op) */
  tpu_graph_t *u = ir_graph();
  tpu_value_t ua = ir_param(u, TPU_F64, SHAPE(5, 5));
  tpu_value_t piv = tpu_graph_lu_pivots(u, ua);
  CHECK(tpu_graph_node(u, piv)->dtype == TPU_I32 && tpu_graph_node(u, piv)->shape.rank == 1);
  CHECK_OK(tpu_graph_output(u, tpu_graph_lu(u, ua), NULL));
  CHECK_OK(tpu_graph_output(u, tpu_graph_lu_pivots_to_permutation(u, piv, 5), NULL));
  char *text = NULL;
  CHECK_OK(tpu_graph_print_stablehlo(u, "lu", tpu_allocator_system(), &text, NULL));
  CHECK_CONTAINS(text, "\"stablehlo.custom_call\"(%arg0) <{call_target_name = \"torchtpu.lu\"}> : "
                       "(tensor<5x5xf64>) -> tensor<5x5xf64>");
  CHECK_CONTAINS(text, "call_target_name = \"torchtpu.lu_pivots_to_permutation\", backend_config = "
                       "\"permutation_size=5\"}> : (tensor<5xi32>) -> tensor<5xi32>");
  tpu_allocator_free(tpu_allocator_system(), text);
  CHECK(tpu_graph_lu_pivots_to_permutation(u, piv, 4) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(u), "size 4 is below the 5 pivots");
  tpu_graph_destroy(u);
  /* shape rules */
  tpu_value_t r = ir_param(h, TPU_F32, SHAPE(3, 4));
  CHECK(tpu_graph_cholesky(h, r, true) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(h), "operand must be square matrices");
  tpu_graph_destroy(h);
  h = ir_graph();
  tpu_value_t sq = ir_param(h, TPU_F32, SHAPE(3, 3)), wide = ir_param(h, TPU_F32, SHAPE(4, 2));
  tpu_triangular_solve_attrs_t left = {true, true, false, false};
  CHECK(tpu_graph_triangular_solve(h, sq, wide, &left) == TPU_NO_VALUE);
  CHECK_CONTAINS(tpu_graph_error_message(h), "b's row dim is 4");
  tpu_graph_destroy(h);
  h = ir_graph();
  tpu_value_t i32 = ir_param(h, TPU_I32, SHAPE(3, 3));
  CHECK(tpu_graph_cholesky(h, i32, false) == TPU_NO_VALUE);
  tpu_graph_destroy(h);
  tpu_graph_destroy(g);
}

int main(void) {
  if (tpu_pool_create(2, tpu_allocator_system(), &g_pool2) != TPU_OK) {
    fprintf(stderr, "cannot create a pool: %s\n", tpu_status_message());
    return 1;
  }
  RUN(cholesky_factors_spd_batches);
  RUN(cholesky_reads_one_triangle_strided_inplace_and_threads);
  RUN(cholesky_not_positive_definite);
  RUN(triangular_solve_all_variants);
  RUN(lu_factors_with_partial_pivoting);
  RUN(lu_zero_pivot_and_permutations);
  RUN(linalg_kernel_errors);
  RUN(linalg_ir_ops);
  tpu_pool_destroy(g_pool2);
  return check_report();
}
