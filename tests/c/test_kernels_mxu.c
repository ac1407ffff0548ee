/* test_kernels_mxu.c: the MXU kernels (dot_general, convolution) and their numerics.
 *
 * - numerics: DEFAULT equals a double-precision product of bf16-rounded inputs within f32
 *   accumulation error and differs clearly from exact f32; HIGH is ~2^-16 relative,
 *   HIGHEST ~2^-23; bf16 x bf16 products are exact; inf survives the HIGH split.
 * - fast vs naive reference on batch dims, transposed and strided operands, odd sizes,
 *   K = 0, mixed and narrow dtypes, every GEMM micro-kernel the CPU has, and convolution
 *   with strides, padding, dilations, groups, 1-3 spatial dims and other layouts.
 * Fast and reference may differ only in f32 accumulation order: per element
 * |fast - ref| <= 2 * K' * 2^-23 * sum_k |a_k| |b_k| (K' = K * passes).
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "pool_helper.h"
#include "tpu/kernels.h"
#include "vtpu/kernels/gemm.h"
#include "vtpu/kernels/gemm_kernels.h"

/* ---- helpers ------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

/* A buffer over its own storage: logical dims, laid out with dims permuted by |perm|
 * (storage order: perm[0] outermost), |gap| unused elements after every innermost run,
 * and dims in |rev| reversed (negative strides). Filled with random values. */
typedef struct tbuf {
  tpu_buf_t b;
  void *store;
  int64_t nstore; /* elements of storage */
  int64_t first;  /* element index of b.data in store */
} tbuf;

static size_t esize(tpu_dtype_t dt) { return tpu_dtype_size(dt); }

static void set_elem(void *store, tpu_dtype_t dt, int64_t i, double v) {
  switch (dt) {
    case TPU_F32:
      ((float *)store)[i] = (float)v;
      break;
    case TPU_F64:
      ((double *)store)[i] = v;
      break;
    case TPU_BF16:
      ((uint16_t *)store)[i] = tpu_f32_to_bf16((float)v);
      break;
    case TPU_F16:
      ((uint16_t *)store)[i] = tpu_f32_to_f16((float)v);
      break;
    default:
      break;
  }
}

static double get_at(const tpu_buf_t *b, int64_t off) {
  return tpu_mxu_load_f64(b->data, b->dtype, off);
}

static tbuf make_buf(tpu_dtype_t dt, int rank, const int64_t *dims, const int *perm, int gap,
                     unsigned rev_mask) {
  tbuf t;
  memset(&t, 0, sizeof t);
  int p[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) p[i] = perm ? perm[i] : i;
  int64_t stride = 1;
  int64_t strides[TPU_MAX_RANK];
  for (int j = rank - 1; j >= 0; j--) {
    int d = p[j];
    strides[d] = stride;
    stride *= dims[d] + (j == rank - 1 ? gap : 0);
  }
  t.nstore = stride > 0 ? stride : 1;
  t.store = calloc((size_t)t.nstore, esize(dt));
  int64_t first = 0;
  for (int d = 0; d < rank; d++) {
    if ((rev_mask >> d) & 1 && dims[d] > 0) {
      first += (dims[d] - 1) * strides[d];
      strides[d] = -strides[d];
    }
  }
  for (int64_t i = 0; i < t.nstore; i++) set_elem(t.store, dt, i, urand());
  t.first = first;
  t.b.data = (char *)t.store + first * (int64_t)esize(dt);
  t.b.dtype = dt;
  t.b.rank = rank;
  for (int d = 0; d < rank; d++) {
    t.b.dims[d] = dims[d];
    t.b.strides[d] = strides[d];
  }
  return t;
}

static tbuf dense(tpu_dtype_t dt, int rank, const int64_t *dims) {
  return make_buf(dt, rank, dims, NULL, 0, 0);
}

/* Same layout, storage copied with |x| applied. */
static tbuf abs_copy(const tbuf *s) {
  tbuf t = *s;
  size_t es = esize(s->b.dtype);
  t.store = malloc((size_t)s->nstore * es);
  for (int64_t i = 0; i < s->nstore; i++) {
    double v = tpu_mxu_load_f64(s->store, s->b.dtype, i);
    set_elem(t.store, s->b.dtype, i, fabs(v));
    if (s->b.dtype == TPU_BF16 || s->b.dtype == TPU_F16) { /* keep the exact bits */
      ((uint16_t *)t.store)[i] = ((const uint16_t *)s->store)[i] & 0x7fffu;
    }
  }
  t.b.data = (char *)t.store + s->first * (int64_t)es;
  return t;
}

static tbuf clone_layout(const tbuf *s, tpu_dtype_t dt) { /* same shape and strides, new dtype */
  tbuf t = *s;
  t.store = calloc((size_t)s->nstore, esize(dt));
  t.b.dtype = dt;
  t.b.data = (char *)t.store + s->first * (int64_t)esize(dt);
  return t;
}

static void free_buf(tbuf *t) { free(t->store); }

/* Visits every logical element offset of |b| in row-major order. */
static int64_t numel(const tpu_buf_t *b) {
  int64_t n = 1;
  for (int i = 0; i < b->rank; i++) n *= b->dims[i];
  return n;
}
static int64_t offset_of(const tpu_buf_t *b, int64_t e) {
  int64_t off = 0;
  for (int i = b->rank - 1; i >= 0; i--) {
    off += (e % b->dims[i]) * b->strides[i];
    e /= b->dims[i];
  }
  return off;
}

/* Max over elements of |x - y| / bound (bound = slack * K' * 2^-23 * sum|products| plus
 * the output dtype's half ulp); > 1 means out of tolerance. */
static double worst_ratio(const tpu_buf_t *x, const tpu_buf_t *y, const tpu_buf_t *absref,
                          int64_t kprime, double acc_eps) {
  double worst = 0.0;
  double out_ulp = x->dtype == TPU_BF16  ? 0x1p-8
                   : x->dtype == TPU_F16 ? 0x1p-11
                   : x->dtype == TPU_F64 ? 0x1p-52
                                         : 0x1p-24;
  for (int64_t e = 0; e < numel(x); e++) {
    double a = get_at(x, offset_of(x, e)), b = get_at(y, offset_of(y, e));
    double s = get_at(absref, offset_of(absref, e));
    if (isnan(a) && isnan(b)) continue;
    double bound = 2.0 * (double)(kprime + 1) * acc_eps * s * (1.0 + out_ulp * 4) +
                   2.0 * out_ulp * fabs(b) + 1e-30;
    double r = fabs(a - b) / bound;
    if (!(r <= worst)) worst = r; /* NaN counts as worst */
  }
  return worst;
}

static tpu_dot_attrs_t matmul_attrs(tpu_precision_t p) {
  tpu_dot_attrs_t a;
  memset(&a, 0, sizeof a);
  a.num_contract = 1;
  a.lhs_contract[0] = 1;
  a.rhs_contract[0] = 0;
  a.precision = p;
  return a;
}

static int passes_of(tpu_dtype_t a, tpu_dtype_t b, tpu_precision_t p) {
  tpu_mxu_plan_t plan;
  if (tpu_mxu_plan_make("t", a, b, TPU_F32, p, &plan) != TPU_OK) return 1;
  return plan.mode == TPU_MXU_BF16 ? plan.num_passes : 1;
}

/* f32 accumulation unless an operand is f64 */
static double eps_of(tpu_dtype_t a, tpu_dtype_t b) {
  return a == TPU_F64 || b == TPU_F64 ? 0x1p-52 : 0x1p-23;
}

/* Runs fast and reference dot_general on (lhs, rhs) into two copies of |out|'s layout
 * and checks them against each other. Returns the worst ratio. */
static double check_dot(const tpu_dot_attrs_t *at, const tbuf *lhs, const tbuf *rhs,
                        const tbuf *out, tpu_pool_t *pool) {
  tbuf o1 = clone_layout(out, out->b.dtype), o2 = clone_layout(out, out->b.dtype);
  tbuf al = abs_copy(lhs), ar = abs_copy(rhs);
  tbuf o3 = clone_layout(out, TPU_F64);
  tpu_dot_attrs_t abs_at = *at;
  abs_at.precision = TPU_PRECISION_HIGHEST;
  CHECK_OK(tpu_ref_dot_general(at, &lhs->b, &rhs->b, &o1.b));
  CHECK_OK(tpu_kernel_dot_general(at, &lhs->b, &rhs->b, &o2.b, pool));
  CHECK_OK(tpu_ref_dot_general(&abs_at, &al.b, &ar.b, &o3.b));
  int64_t K = 1;
  for (int i = 0; i < at->num_contract; i++) K *= lhs->b.dims[at->lhs_contract[i]];
  double w =
      worst_ratio(&o2.b, &o1.b, &o3.b, K * passes_of(lhs->b.dtype, rhs->b.dtype, at->precision),
                  eps_of(lhs->b.dtype, rhs->b.dtype));
  if (w > 1.0) fprintf(stderr, "  worst |fast-ref|/bound = %g\n", w);
  free_buf(&o1), free_buf(&o2), free_buf(&o3), free_buf(&al), free_buf(&ar);
  return w;
}

static tpu_pool_t *test_pool(void) {
  static tpu_pool_t *pool;
  if (!pool) tpu_pool_create(2, tpu_allocator_system(), &pool);
  return pool;
}

/* ---- numerics -------------------------------------------------------------------------- */

TEST(plans) {
  tpu_mxu_plan_t p;
  CHECK_OK(tpu_mxu_plan_make("t", TPU_F32, TPU_F32, TPU_F32, TPU_PRECISION_DEFAULT, &p));
  CHECK(p.mode == TPU_MXU_BF16 && p.num_passes == 1);
  CHECK_OK(tpu_mxu_plan_make("t", TPU_F32, TPU_F32, TPU_F32, TPU_PRECISION_HIGH, &p));
  CHECK(p.mode == TPU_MXU_BF16 && p.num_passes == 3);
  CHECK(p.a_comp[1] == 2 && p.b_comp[1] == 1 && p.a_comp[2] == 1 && p.b_comp[2] == 2);
  CHECK_OK(tpu_mxu_plan_make("t", TPU_F32, TPU_F32, TPU_F32, TPU_PRECISION_HIGHEST, &p));
  CHECK(p.mode == TPU_MXU_F32);
  CHECK_OK(tpu_mxu_plan_make("t", TPU_BF16, TPU_BF16, TPU_BF16, TPU_PRECISION_HIGHEST, &p));
  CHECK(p.mode == TPU_MXU_BF16 && p.num_passes == 1);
  CHECK_OK(tpu_mxu_plan_make("t", TPU_BF16, TPU_F32, TPU_F32, TPU_PRECISION_HIGH, &p));
  CHECK(p.mode == TPU_MXU_BF16 && p.num_passes == 2); /* hi*hi, hi*lo */
  CHECK_OK(tpu_mxu_plan_make("t", TPU_F16, TPU_F16, TPU_F16, TPU_PRECISION_DEFAULT, &p));
  CHECK(p.mode == TPU_MXU_F32);
  CHECK_OK(tpu_mxu_plan_make("t", TPU_F64, TPU_F32, TPU_F64, TPU_PRECISION_DEFAULT, &p));
  CHECK(p.mode == TPU_MXU_F64);
  CHECK(tpu_mxu_plan_make("t", TPU_I32, TPU_F32, TPU_F32, TPU_PRECISION_DEFAULT, &p) ==
        TPU_ERR_INVALID_ARGUMENT);
  /* the split: hi + lo carries ~16 bits, and inf keeps a zero low part */
  float x = 1.0f + 0x1p-12f + 0x1p-20f;
  CHECK(tpu_mxu_component(x, 0) == 1.0f);
  CHECK(tpu_mxu_component(x, 1) == 0x1p-12f);
  CHECK(tpu_mxu_component(x, 2) == 1.0f);
  CHECK(tpu_mxu_component(INFINITY, 0) == INFINITY);
  CHECK(tpu_mxu_component(INFINITY, 1) == 0.0f && tpu_mxu_component(INFINITY, 2) == 0.0f);
}

/* Errors of one f32 matmul (M, K) x (K, N) at |prec| against exact (double) products of
 * the f32 inputs and of their bf16 roundings, normalized by sum |a||b|. */
static void matmul_errors(tpu_precision_t prec, int64_t M, int64_t K, int64_t N, double *err_exact,
                          double *err_bf16) {
  int64_t ad[2] = {M, K}, bd[2] = {K, N}, cd[2] = {M, N};
  tbuf a = dense(TPU_F32, 2, ad), b = dense(TPU_F32, 2, bd), c = dense(TPU_F32, 2, cd);
  tpu_dot_attrs_t at = matmul_attrs(prec);
  CHECK_OK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c.b, test_pool()));
  const float *A = a.store, *B = b.store, *C = c.store;
  *err_exact = *err_bf16 = 0.0;
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = 0; j < N; j++) {
      double exact = 0, rounded = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        float x = A[i * K + k], y = B[k * N + j];
        exact += (double)x * y;
        rounded += (double)tpu_mxu_bf16_round(x) * tpu_mxu_bf16_round(y);
        mag += fabs((double)x * y);
      }
      double e1 = fabs(C[i * N + j] - exact) / mag, e2 = fabs(C[i * N + j] - rounded) / mag;
      if (e1 > *err_exact) *err_exact = e1;
      if (e2 > *err_bf16) *err_bf16 = e2;
    }
  }
  free_buf(&a), free_buf(&b), free_buf(&c);
}

TEST(default_is_one_bf16_pass) {
  double ee, eb;
  matmul_errors(TPU_PRECISION_DEFAULT, 37, 300, 45, &ee, &eb);
  CHECK(eb <= 300 * 0x1p-23); /* = bf16 products accumulated in f32 */
  CHECK(ee > 0x1p-12);        /* clearly not f32 */
  CHECK(ee < 0x1p-7);
}

TEST(high_is_three_passes) {
  double ee, eb;
  matmul_errors(TPU_PRECISION_HIGH, 37, 300, 45, &ee, &eb);
  CHECK(ee <= 0x1p-15);
  CHECK(ee > 0x1p-24); /* not exact: lo*lo and the third bf16 chunk are dropped */
  CHECK(eb > 0x1p-12); /* and much better than one pass */
}

TEST(highest_is_f32) {
  double ee, eb;
  matmul_errors(TPU_PRECISION_HIGHEST, 37, 300, 45, &ee, &eb);
  CHECK(ee <= 0x1p-21);
  CHECK(eb > 0x1p-12);
}

TEST(bf16_products_exact) {
  /* bf16 x bf16 -> f32: integer-valued data with an exact f32 sum */
  int64_t ad[2] = {9, 64}, bd[2] = {64, 33}, cd[2] = {9, 33};
  tbuf a = dense(TPU_BF16, 2, ad), b = dense(TPU_BF16, 2, bd), c = dense(TPU_F32, 2, cd);
  uint16_t *A = a.store, *B = b.store;
  for (int i = 0; i < 9 * 64; i++) A[i] = tpu_f32_to_bf16((float)((i * 37) % 255 - 127));
  for (int i = 0; i < 64 * 33; i++) B[i] = tpu_f32_to_bf16((float)((i * 11) % 253 - 126));
  tpu_dot_attrs_t at = matmul_attrs(TPU_PRECISION_DEFAULT);
  CHECK_OK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c.b, test_pool()));
  int bad = 0;
  for (int i = 0; i < 9; i++) {
    for (int j = 0; j < 33; j++) {
      double s = 0;
      for (int k = 0; k < 64; k++)
        s += (double)tpu_bf16_to_f32(A[i * 64 + k]) * tpu_bf16_to_f32(B[k * 33 + j]);
      bad += ((float *)c.store)[i * 33 + j] != (float)s;
    }
  }
  CHECK(bad == 0);
  /* bf16 out is the f32 result rounded once */
  tbuf c2 = dense(TPU_BF16, 2, cd);
  CHECK_OK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c2.b, test_pool()));
  bad = 0;
  for (int i = 0; i < 9 * 33; i++) {
    bad += ((uint16_t *)c2.store)[i] != tpu_f32_to_bf16(((float *)c.store)[i]);
  }
  CHECK(bad == 0);
  free_buf(&a), free_buf(&b), free_buf(&c), free_buf(&c2);
}

/* Batched matmuls of |shapes| (batch, M, K, N) at every precision, f32 C (tiles written in
 * place) and bf16 C: the pool's result must be the bits of one thread. */
static void pool_matches_one_thread(const int64_t (*shapes)[4], int count) {
  for (int s = 0; s < count; s++) {
    for (int p = 0; p < 3; p++) {
      for (int o = 0; o < 2; o++) {
        const int64_t *sh = shapes[s];
        int64_t ad[3] = {sh[0], sh[1], sh[2]}, bd[3] = {sh[0], sh[2], sh[3]};
        int64_t cd[3] = {sh[0], sh[1], sh[3]};
        tpu_dtype_t odt = o ? TPU_BF16 : TPU_F32;
        tbuf a = dense(TPU_F32, 3, ad), b = dense(TPU_F32, 3, bd);
        tbuf one = dense(odt, 3, cd), split = dense(odt, 3, cd);
        tpu_dot_attrs_t at = matmul_attrs((tpu_precision_t)p);
        at.num_batch = 1;
        at.lhs_batch[0] = 0, at.rhs_batch[0] = 0;
        at.lhs_contract[0] = 2, at.rhs_contract[0] = 1;
        CHECK_OK(tpu_kernel_dot_general(&at, &a.b, &b.b, &one.b, NULL));
        CHECK_OK(tpu_kernel_dot_general(&at, &a.b, &b.b, &split.b, test_pool()));
        CHECK(memcmp(one.store, split.store, (size_t)(sh[0] * sh[1] * sh[3]) * esize(odt)) == 0);
        free_buf(&a), free_buf(&b), free_buf(&one), free_buf(&split);
      }
    }
  }
}

/* GEMMs from 2^24 multiply-adds split over the pool, C into row blocks finer than the
 * kernel's when there are few column blocks. */
TEST(split_gemms_keep_their_bits) {
  static const int64_t shapes[][4] = {{1, 256, 256, 256}, {1, 300, 700, 80}, {3, 130, 400, 129}};
  pool_matches_one_thread(shapes, 3);
}

/* Matmuls too small to wake a worker (below 2^24 multiply-adds) are still split when a
 * helper spins in the pool: into row and column blocks (64-row dW: columns too), and
 * attention-sized batches of small products. */
TEST(helped_gemms_keep_their_bits) {
  static const int64_t shapes[][4] = {{1, 256, 64, 256}, {1, 64, 256, 256}, {1, 130, 97, 129},
                                      {2, 100, 300, 70}, {32, 32, 16, 32}};
  pool_helper h;
  CHECK(pool_helper_start(&h, test_pool()) == 0);
  pool_matches_one_thread(shapes, 5);
  pool_helper_stop(&h);
}

TEST(inf_and_nan) {
  int64_t ad[2] = {2, 3}, bd[2] = {3, 2}, cd[2] = {2, 2};
  tbuf a = dense(TPU_F32, 2, ad), b = dense(TPU_F32, 2, bd), c = dense(TPU_F32, 2, cd);
  float *A = a.store, *B = b.store, *C = c.store;
  for (int i = 0; i < 6; i++) A[i] = B[i] = 1.0f;
  A[0] = INFINITY;
  A[3] = NAN;
  for (int p = 0; p < 3; p++) {
    tpu_dot_attrs_t at = matmul_attrs((tpu_precision_t)p);
    CHECK_OK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c.b, test_pool()));
    if (!(isinf(C[0]) && C[0] > 0 && isinf(C[1])))
      fprintf(stderr, "  precision %d: %g %g\n", p, C[0], C[1]);
    CHECK(isinf(C[0]) && C[0] > 0 && isinf(C[1]));
    CHECK(isnan(C[2]) && isnan(C[3]));
  }
  free_buf(&a), free_buf(&b), free_buf(&c);
}

/* ---- dot_general: fast vs reference --------------------------------------------------- */

TEST(matmul_odd_sizes) {
  static const int64_t sizes[] = {1, 7, 14, 33, 129};
  tpu_dtype_t dts[] = {TPU_F32, TPU_BF16};
  for (int p = 0; p < 3; p++) {
    for (int d = 0; d < 2; d++) {
      for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 5; j++) {
          int64_t M = sizes[i], K = sizes[(i + j) % 5], N = sizes[j];
          int64_t ad[2] = {M, K}, bd[2] = {K, N}, cd[2] = {M, N};
          tbuf a = dense(dts[d], 2, ad), b = dense(dts[d], 2, bd), c = dense(TPU_F32, 2, cd);
          tpu_dot_attrs_t at = matmul_attrs((tpu_precision_t)p);
          CHECK(check_dot(&at, &a, &b, &c, test_pool()) <= 1.0);
          free_buf(&a), free_buf(&b), free_buf(&c);
        }
      }
    }
  }
}

TEST(matmul_layouts) {
  /* A^T, B^T, both, padded rows, reversed dims, strided output */
  static const int perms[2][2] = {{0, 1}, {1, 0}};
  int64_t M = 45, K = 70, N = 38;
  int64_t ad[2] = {M, K}, bd[2] = {K, N}, cd[2] = {M, N};
  for (int p = 0; p < 3; p++) {
    for (int v = 0; v < 16; v++) {
      tbuf a = make_buf(TPU_F32, 2, ad, perms[v & 1], (v & 4) ? 3 : 0, (v & 8) ? 1u : 0u);
      tbuf b = make_buf(TPU_F32, 2, bd, perms[(v >> 1) & 1], (v & 8) ? 5 : 0, (v & 4) ? 2u : 0u);
      tbuf c = make_buf(TPU_F32, 2, cd, perms[(v >> 2) & 1], (v & 2) ? 1 : 0, 0);
      tpu_dot_attrs_t at = matmul_attrs((tpu_precision_t)p);
      CHECK(check_dot(&at, &a, &b, &c, test_pool()) <= 1.0);
      free_buf(&a), free_buf(&b), free_buf(&c);
    }
  }
}

TEST(batched_and_multi_contract) {
  /* lhs (3, 5, 4, 6) dims (b0, m, c0, c1); rhs (6, 3, 4, 7) dims (c1, b0, c0, n) */
  int64_t ld[4] = {3, 5, 4, 6}, rd[4] = {6, 3, 4, 7}, od[3] = {3, 5, 7};
  tpu_dot_attrs_t at;
  memset(&at, 0, sizeof at);
  at.num_batch = 1;
  at.lhs_batch[0] = 0;
  at.rhs_batch[0] = 1;
  at.num_contract = 2;
  at.lhs_contract[0] = 2, at.rhs_contract[0] = 2;
  at.lhs_contract[1] = 3, at.rhs_contract[1] = 0;
  static const int lperm[4] = {2, 0, 3, 1};
  for (int p = 0; p < 3; p++) {
    at.precision = (tpu_precision_t)p;
    tbuf l = make_buf(TPU_F32, 4, ld, (p & 1) ? lperm : NULL, p, 0);
    tbuf r = make_buf(TPU_F32, 4, rd, NULL, 0, 5u);
    tbuf o = dense(TPU_F32, 3, od);
    CHECK(check_dot(&at, &l, &r, &o, test_pool()) <= 1.0);
    free_buf(&l), free_buf(&r), free_buf(&o);
  }
  /* [B, M, K] x [B, K, N] with a large batch (several packing groups are not needed, but
   * many small GEMMs), bf16 -> bf16 */
  int64_t a3[3] = {40, 9, 17}, b3[3] = {40, 17, 11}, c3[3] = {40, 9, 11};
  at = matmul_attrs(TPU_PRECISION_DEFAULT);
  at.num_batch = 1;
  at.lhs_contract[0] = 2;
  at.rhs_contract[0] = 1;
  tbuf a = dense(TPU_BF16, 3, a3), b = dense(TPU_BF16, 3, b3), c = dense(TPU_BF16, 3, c3);
  CHECK(check_dot(&at, &a, &b, &c, test_pool()) <= 1.0);
  free_buf(&a), free_buf(&b), free_buf(&c);
}

TEST(batch_groups_and_shared_operands) {
  /* (5, 1, K) x (5, K, 1) with a long K: packed operands of ~5 MiB per batch do not all
   * fit one packing group; the lhs is one matrix broadcast over the batch (stride 0) */
  int64_t K = 60000, ld[3] = {5, 1, K}, rd[3] = {5, K, 1}, od[3] = {5, 1, 1};
  tpu_dot_attrs_t at = matmul_attrs(TPU_PRECISION_DEFAULT);
  at.num_batch = 1;
  at.lhs_contract[0] = 2;
  at.rhs_contract[0] = 1;
  for (int shared = 0; shared < 2; shared++) {
    for (int p = 0; p < 3; p++) {
      at.precision = (tpu_precision_t)p;
      tbuf l = dense(TPU_F32, 3, ld), r = dense(TPU_F32, 3, rd), o = dense(TPU_F32, 3, od);
      if (shared) l.b.strides[0] = 0;
      CHECK(check_dot(&at, &l, &r, &o, test_pool()) <= 1.0);
      free_buf(&l), free_buf(&r), free_buf(&o);
    }
  }
}

TEST(vector_and_outer_products) {
  /* (K) . (K) -> scalar; (M) x (N) outer product (no contraction) */
  int64_t k1[1] = {1000}, m1[1] = {13}, n1[1] = {21}, o2[2] = {13, 21};
  tpu_dot_attrs_t at;
  memset(&at, 0, sizeof at);
  at.num_contract = 1;
  tbuf x = dense(TPU_F32, 1, k1), y = dense(TPU_F32, 1, k1), s = dense(TPU_F32, 0, NULL);
  CHECK(check_dot(&at, &x, &y, &s, test_pool()) <= 1.0);
  memset(&at, 0, sizeof at);
  tbuf u = dense(TPU_F32, 1, m1), v = dense(TPU_F32, 1, n1), w = dense(TPU_F32, 2, o2);
  CHECK(check_dot(&at, &u, &v, &w, test_pool()) <= 1.0);
  free_buf(&x), free_buf(&y), free_buf(&s), free_buf(&u), free_buf(&v), free_buf(&w);
}

TEST(dtypes_mixed_and_narrow) {
  tpu_dtype_t ins[][2] = {{TPU_F16, TPU_F16},  {TPU_F64, TPU_F64}, {TPU_BF16, TPU_F32},
                          {TPU_F32, TPU_BF16}, {TPU_F16, TPU_F32}, {TPU_F64, TPU_BF16}};
  tpu_dtype_t outs[] = {TPU_F32, TPU_BF16, TPU_F16, TPU_F64};
  int64_t ad[2] = {19, 40}, bd[2] = {40, 23}, cd[2] = {19, 23};
  for (int i = 0; i < 6; i++) {
    for (int o = 0; o < 4; o++) {
      for (int p = 0; p < 3; p++) {
        tbuf a = make_buf(ins[i][0], 2, ad, NULL, o, 0);
        tbuf b = make_buf(ins[i][1], 2, bd, (const int[]){1, 0}, 0, 0);
        tbuf c = dense(outs[o], 2, cd);
        tpu_dot_attrs_t at = matmul_attrs((tpu_precision_t)p);
        double w = check_dot(&at, &a, &b, &c, test_pool());
        if (w > 1.0) {
          fprintf(stderr, "  %s x %s -> %s precision %d\n", tpu_dtype_name(ins[i][0]),
                  tpu_dtype_name(ins[i][1]), tpu_dtype_name(outs[o]), p);
        }
        CHECK(w <= 1.0);
        free_buf(&a), free_buf(&b), free_buf(&c);
      }
    }
  }
}

TEST(k_zero_and_empty) {
  int64_t ad[2] = {5, 0}, bd[2] = {0, 6}, cd[2] = {5, 6};
  tbuf a = dense(TPU_F32, 2, ad), b = dense(TPU_F32, 2, bd), c = dense(TPU_F32, 2, cd);
  for (int i = 0; i < 30; i++) ((float *)c.store)[i] = 7.0f;
  tpu_dot_attrs_t at = matmul_attrs(TPU_PRECISION_DEFAULT);
  CHECK_OK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c.b, test_pool()));
  int bad = 0;
  for (int i = 0; i < 30; i++) bad += ((float *)c.store)[i] != 0.0f;
  CHECK(bad == 0);
  for (int i = 0; i < 30; i++) ((float *)c.store)[i] = 7.0f;
  CHECK_OK(tpu_ref_dot_general(&at, &a.b, &b.b, &c.b));
  bad = 0;
  for (int i = 0; i < 30; i++) bad += ((float *)c.store)[i] != 0.0f;
  CHECK(bad == 0);
  /* M = 0: nothing to write */
  int64_t a0[2] = {0, 4}, b0[2] = {4, 3}, c0[2] = {0, 3};
  tbuf x = dense(TPU_F32, 2, a0), y = dense(TPU_F32, 2, b0), z = dense(TPU_F32, 2, c0);
  CHECK_OK(tpu_kernel_dot_general(&at, &x.b, &y.b, &z.b, test_pool()));
  free_buf(&a), free_buf(&b), free_buf(&c), free_buf(&x), free_buf(&y), free_buf(&z);
}

TEST(bad_arguments) {
  int64_t ad[2] = {4, 5}, bd[2] = {6, 3}, cd[2] = {4, 3};
  tbuf a = dense(TPU_F32, 2, ad), b = dense(TPU_F32, 2, bd), c = dense(TPU_F32, 2, cd);
  tpu_dot_attrs_t at = matmul_attrs(TPU_PRECISION_DEFAULT);
  CHECK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c.b, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "dot_general");
  CHECK(tpu_ref_dot_general(&at, &a.b, &b.b, &c.b) == TPU_ERR_INVALID_ARGUMENT);
  at.lhs_contract[0] = 2;
  b.b.dims[0] = 5;
  CHECK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c.b, NULL) == TPU_ERR_INVALID_ARGUMENT);
  at.lhs_contract[0] = 1;
  c.b.dims[1] = 4;
  CHECK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c.b, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "result");
  c.b.dims[1] = 3;
  c.b.dtype = TPU_I32;
  CHECK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c.b, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "i32");
  c.b.dtype = TPU_F32;
  CHECK_OK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c.b, NULL));
  free_buf(&a), free_buf(&b), free_buf(&c);
}

/* ---- every GEMM micro-kernel the CPU has, through the internal entry point ----------- */

/* The GEMM micro-kernels this CPU runs (as masked by TORCHTPU_ISA); NULL where it lacks
 * one: portable, AVX2, AVX-512, AVX512-BF16. */
static void cpu_gemm_kernels(const tpu_gemm_kernel_t *kerns[4]) {
  const tpu_cpu_features_t *f = tpu_cpu_features();
  const bool x86 = tpu_gemm_have_x86_kernels();
  kerns[0] = &tpu_gemm_kernel_portable;
  kerns[1] = x86 && f->avx2_fma ? &tpu_gemm_kernel_avx2 : NULL;
  kerns[2] = x86 && f->avx512f ? &tpu_gemm_kernel_avx512 : NULL;
  kerns[3] = x86 && f->avx512_bf16 ? &tpu_gemm_kernel_avx512_bf16 : NULL;
}

TEST(every_gemm_kernel) {
  const tpu_gemm_kernel_t *kerns[4];
  cpu_gemm_kernels(kerns);
  int64_t M = 61, K = 301, N = 75; /* edges in every direction, several K blocks */
  int64_t ad[2] = {M, K}, bd[2] = {K, N}, cd[2] = {M, N};
  for (int kk = 0; kk < 4; kk++) {
    if (!kerns[kk]) continue;
    for (int p = 0; p < 3; p++) {
      for (int v = 0; v < 4; v++) {
        tpu_gemm_t g;
        memset(&g, 0, sizeof g);
        g.what = "t";
        tpu_dtype_t bdt = v & 2 ? TPU_BF16 : TPU_F32;
        CHECK_OK(tpu_mxu_plan_make("t", TPU_F32, bdt, TPU_F32, (tpu_precision_t)p, &g.plan));
        if (g.plan.mode != TPU_MXU_BF16 && kerns[kk]->format == TPU_GEMM_FORMAT_BF16) continue;
        tbuf a = make_buf(TPU_F32, 2, ad, (v & 1) ? (const int[]){1, 0} : NULL, 0, 0);
        tbuf b = make_buf(bdt, 2, bd, (v & 2) ? (const int[]){1, 0} : NULL, 2, 0);
        tbuf c1 = dense(TPU_F32, 2, cd), c2 = make_buf(TPU_F32, 2, cd, NULL, v, 0);
        tbuf am = abs_copy(&a), bm = abs_copy(&b), cm = dense(TPU_F64, 2, cd);
        tpu_gemm_axis_t one = {1, 0, NULL};
        g.a = (tpu_gemm_matrix_t){
            a.b.data, a.b.dtype, one, {M, a.b.strides[0], NULL}, {K, a.b.strides[1], NULL}};
        g.b = (tpu_gemm_matrix_t){
            b.b.data, b.b.dtype, one, {K, b.b.strides[0], NULL}, {N, b.b.strides[1], NULL}};
        g.c =
            (tpu_gemm_matrix_t){c2.b.data, TPU_F32, one, {M, c2.b.strides[0], NULL}, {N, 1, NULL}};
        CHECK_OK(tpu_gemm_run_kernel(&g, kerns[kk], test_pool()));
        g.c.data = c1.b.data;
        g.c.rows.stride = N;
        CHECK_OK(tpu_gemm_ref(&g));
        tpu_gemm_t ga = g;
        ga.plan.mode = TPU_MXU_F64;
        ga.a.data = am.b.data;
        ga.b.data = bm.b.data;
        ga.c.data = cm.b.data;
        ga.c.dtype = TPU_F64;
        CHECK_OK(tpu_gemm_ref(&ga));
        double w = worst_ratio(&c2.b, &c1.b, &cm.b,
                               K * (g.plan.mode == TPU_MXU_BF16 ? g.plan.num_passes : 1), 0x1p-23);
        if (w > 1.0)
          fprintf(stderr, "  kernel %s precision %d variant %d: %g\n", kerns[kk]->name, p, v, w);
        CHECK(w <= 1.0);
        free_buf(&a), free_buf(&b), free_buf(&c1), free_buf(&c2), free_buf(&am), free_buf(&bm),
            free_buf(&cm);
      }
    }
  }
}

TEST(every_gemm_kernel_adds_a_bias) {
  /* each kernel's paths with a bias (the AVX2 direct path's in-register add, its tile for
   * a C with column stride > 1, the blocked driver's per-tile add, the rows after the
   * small-matrix path) give the bits of the same kernel without it, then c += bias[j] */
  const tpu_gemm_kernel_t *kerns[4];
  cpu_gemm_kernels(kerns);
  static const struct {
    int64_t b, m, n, k;
    bool c_t; /* C stored transposed: column stride M */
  } cases[] = {{1, 61, 75, 64, false}, {1, 61, 75, 64, true}, {2, 13, 21, 40, false},
               {1, 256, 64, 64, false}, {32, 32, 32, 16, false}, {1, 70, 90, 700, false}};
  for (int kk = 0; kk < 4; kk++) {
    if (!kerns[kk]) continue;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      int64_t B = cases[c].b, M = cases[c].m, N = cases[c].n, K = cases[c].k;
      int64_t ad[3] = {B, M, K}, bd[3] = {B, K, N}, cd[3] = {B, M, N}, nd[1] = {N};
      const int *perm = cases[c].c_t ? (const int[]){0, 2, 1} : NULL;
      tbuf a = make_buf(TPU_F32, 3, ad, NULL, 0, 0), b = make_buf(TPU_F32, 3, bd, NULL, 0, 0);
      tbuf c1 = make_buf(TPU_F32, 3, cd, perm, 0, 0), c2 = make_buf(TPU_F32, 3, cd, perm, 0, 0);
      tbuf bias = dense(TPU_F32, 1, nd);
      tpu_gemm_t g;
      memset(&g, 0, sizeof g);
      g.what = "t";
      CHECK_OK(tpu_mxu_plan_make("t", TPU_F32, TPU_F32, TPU_F32, TPU_PRECISION_DEFAULT, &g.plan));
      g.a = (tpu_gemm_matrix_t){a.b.data, TPU_F32, {B, M * K, NULL}, {M, K, NULL}, {K, 1, NULL}};
      g.b = (tpu_gemm_matrix_t){b.b.data, TPU_F32, {B, K * N, NULL}, {K, N, NULL}, {N, 1, NULL}};
      const int64_t *cs = c1.b.strides;
      g.c = (tpu_gemm_matrix_t){c1.b.data, TPU_F32, {B, cs[0], NULL}, {M, cs[1], NULL},
                                {N, cs[2], NULL}};
      CHECK_OK(tpu_gemm_run_kernel(&g, kerns[kk], test_pool()));
      const float *bv = bias.b.data;
      float *out = c1.b.data;
      for (int64_t i = 0; i < B * M * N; i++) {
        int64_t bi = i / (M * N), r = i / N % M, j = i % N;
        out[bi * cs[0] + r * cs[1] + j * cs[2]] += bv[j];
      }
      g.c.data = c2.b.data;
      g.bias = bv;
      CHECK_OK(tpu_gemm_run_kernel(&g, kerns[kk], test_pool()));
      if (memcmp(c1.store, c2.store, (size_t)c1.nstore * 4) != 0) {
        fprintf(stderr, "  kernel %s case %zu: the bias differs from adding it after\n",
                kerns[kk]->name, c);
        check_current_failed = 1;
      }
      free_buf(&a), free_buf(&b), free_buf(&c1), free_buf(&c2), free_buf(&bias);
    }
  }
}

TEST(edge_rows_in_place) {
  /* the kernel that writes a panel's last rows in place (ukernel_rows) gives the bits of
   * the full micro-kernel on a local tile, for every count of last rows (M = mr + 1 ..
   * 2 mr), K past one cache block (so later blocks accumulate into C) and an odd N (a
   * column edge too, which still goes through the local tile) */
  const tpu_cpu_features_t *f = tpu_cpu_features();
  if (!tpu_gemm_have_x86_kernels() || !f->avx512_bf16 || !f->avx512f) return;
  const tpu_gemm_kernel_t *kern = &tpu_gemm_kernel_avx512_bf16;
  CHECK(kern->ukernel_rows != NULL);
  tpu_gemm_kernel_t tiles_only = *kern;
  tiles_only.ukernel_rows = NULL;
  int64_t K = 2 * kern->kc * 2 + 6, N = kern->nr + 7; /* three k blocks of packed pairs */
  for (int64_t M = kern->mr + 1; M <= 2 * kern->mr; M++) {
    int64_t ad[2] = {M, K}, bd[2] = {K, N}, cd[2] = {M, N};
    tbuf a = make_buf(TPU_F32, 2, ad, NULL, 0, 0), b = make_buf(TPU_F32, 2, bd, NULL, 0, 0);
    tbuf c1 = dense(TPU_F32, 2, cd), c2 = dense(TPU_F32, 2, cd);
    tpu_gemm_t g;
    memset(&g, 0, sizeof g);
    g.what = "t";
    CHECK_OK(tpu_mxu_plan_make("t", TPU_F32, TPU_F32, TPU_F32, TPU_PRECISION_DEFAULT, &g.plan));
    tpu_gemm_axis_t one = {1, 0, NULL};
    g.a = (tpu_gemm_matrix_t){a.b.data, TPU_F32, one, {M, K, NULL}, {K, 1, NULL}};
    g.b = (tpu_gemm_matrix_t){b.b.data, TPU_F32, one, {K, N, NULL}, {N, 1, NULL}};
    g.c = (tpu_gemm_matrix_t){c1.b.data, TPU_F32, one, {M, N, NULL}, {N, 1, NULL}};
    CHECK_OK(tpu_gemm_run_kernel(&g, kern, NULL));
    g.c.data = c2.b.data;
    CHECK_OK(tpu_gemm_run_kernel(&g, &tiles_only, NULL));
    if (memcmp(c1.b.data, c2.b.data, (size_t)(M * N) * 4) != 0) {
      fprintf(stderr, "  M = %lld: in-place edge rows differ from the local tile's\n",
              (long long)M);
      check_current_failed = 1;
    }
    free_buf(&a), free_buf(&b), free_buf(&c1), free_buf(&c2);
  }
}

TEST(dot_with_bias_matches_dot_then_add) {
  /* dot_general_bias gives the bits of dot_general and then a broadcast ADD: a bias per
   * column (added as each full tile is stored, else on the tile after it: edge tiles,
   * several k blocks, rows kernels, a helped split, a batch), per row and a full matrix
   * (added after the product), and the small-matrix path (batches of 32 x 32); a bf16
   * result is refused */
  static const struct {
    int64_t b, m, n, k;
    int bias; /* 0: per column, 1: per row, 2: full */
    tpu_dtype_t out;
    bool helped;
  } cases[] = {
      {1, 61, 75, 600, 0, TPU_F32, false}, {1, 256, 256, 64, 0, TPU_F32, false},
      {1, 256, 64, 256, 0, TPU_F32, true},  {2, 30, 40, 50, 0, TPU_F32, false},
      {32, 32, 32, 16, 0, TPU_F32, false},  {1, 61, 75, 300, 1, TPU_F32, false},
      {1, 61, 75, 300, 2, TPU_F32, false},  {1, 61, 75, 300, 0, TPU_BF16, false},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int64_t B = cases[c].b, M = cases[c].m, N = cases[c].n, K = cases[c].k;
    int64_t ad[3] = {B, M, K}, bd[3] = {B, K, N}, cd[3] = {B, M, N};
    tbuf a = dense(TPU_F32, 3, ad), b = dense(TPU_F32, 3, bd);
    tbuf c1 = dense(cases[c].out, 3, cd), c2 = dense(cases[c].out, 3, cd);
    int64_t bias_dims[3] = {1, cases[c].bias == 1 ? M : 1, cases[c].bias == 1 ? 1 : N};
    tbuf bias = cases[c].bias == 2 ? dense(TPU_F32, 3, cd) : dense(TPU_F32, 3, bias_dims);
    tpu_buf_t bv = bias.b; /* broadcast to (B, M, N) */
    for (int d = 0; d < 3; d++) {
      if (bv.dims[d] == 1 && cd[d] > 1) bv.strides[d] = 0;
      bv.dims[d] = cd[d];
    }
    tpu_dot_attrs_t at = matmul_attrs(TPU_PRECISION_DEFAULT);
    at.num_batch = 1;
    at.lhs_batch[0] = 0;
    at.rhs_batch[0] = 0;
    at.lhs_contract[0] = 2;
    at.rhs_contract[0] = 1;
    tpu_pool_t *pool = cases[c].helped ? test_pool() : NULL;
    if (cases[c].out != TPU_F32) {
      CHECK(tpu_kernel_dot_general_bias(&at, &a.b, &b.b, &bv, &c2.b, pool) ==
            TPU_ERR_INVALID_ARGUMENT);
      CHECK_CONTAINS(tpu_status_message(), "bias is f32");
      free_buf(&a), free_buf(&b), free_buf(&c1), free_buf(&c2), free_buf(&bias);
      continue;
    }
    CHECK_OK(tpu_kernel_dot_general(&at, &a.b, &b.b, &c1.b, pool));
    CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, &c1.b, &bv, &c1.b, NULL));
    CHECK_OK(tpu_kernel_dot_general_bias(&at, &a.b, &b.b, &bv, &c2.b, pool));
    if (memcmp(c1.b.data, c2.b.data, (size_t)(B * M * N) * esize(cases[c].out)) != 0) {
      fprintf(stderr, "  case %zu: dot with bias differs from dot then add\n", c);
      check_current_failed = 1;
    }
    free_buf(&a), free_buf(&b), free_buf(&c1), free_buf(&c2), free_buf(&bias);
  }
}

TEST(packers_agree) {
  /* every vector packer this CPU runs (contiguous, transposed and gathered sources) writes
   * the same bits as the portable one; the BF16-format one flushes subnormals, which this
   * data avoids */
  const tpu_cpu_features_t *f = tpu_cpu_features(); /* the packers follow TORCHTPU_ISA */
  if (!tpu_gemm_have_x86_kernels()) return;
  const tpu_gemm_kernel_t *kerns[3] = {
      f->avx512_bf16 && f->avx512f ? &tpu_gemm_kernel_avx512_bf16 : NULL,
      f->avx512f ? &tpu_gemm_kernel_avx512 : NULL, f->avx2_fma ? &tpu_gemm_kernel_avx2 : NULL};
  int64_t W = 23, K = 37;
  static const int8_t comps[3][3] = {{0}, {0, 2, 1}, {0, 1, 2}};
  int64_t dims[2] = {W, K};
  for (int v = 0; v < 9; v++) {
    tpu_dtype_t dt = v % 3 == 0 ? TPU_F32 : v % 3 == 1 ? TPU_BF16 : TPU_F16;
    int layout = v / 3; /* 0: k contiguous, 1: w contiguous, 2: gathered (padded + reversed) */
    tbuf s = make_buf(dt, 2, dims, layout >= 1 ? (const int[]){1, 0} : NULL, layout == 2 ? 3 : 0,
                      layout == 2 ? 1u : 0u);
    int64_t *woff = NULL;
    tpu_gemm_axis_t wax = {W, s.b.strides[0], NULL}, kax = {K, s.b.strides[1], NULL};
    if (layout == 2) { /* an offset table for w */
      woff = malloc((size_t)W * sizeof *woff);
      for (int64_t i = 0; i < W; i++) woff[i] = i * s.b.strides[0];
      wax.offsets = woff;
    }
    for (int cv = -1; cv < 3; cv++) {
      int passes = cv <= 0 ? 1 : 3;
      tpu_gemm_panel_src_t src = {s.b.data, dt, &wax, &kax, passes, cv < 0 ? NULL : comps[cv]};
      for (int kk = 0; kk < 3; kk++) {
        const tpu_gemm_kernel_t *kern = kerns[kk];
        if (!kern) continue;
        bool bf16 = kern->format == TPU_GEMM_FORMAT_BF16;
        if (bf16 && cv < 0) continue;
        /* the kernel's own panel widths, and tails of 5, 6 and 7 (8 lanes) or 13, 6, 15 (16) */
        const int widths[5] = {kern->mr, kern->nr, 13, 22, 31};
        for (int wi = 0; wi < 5; wi++) {
          int width = widths[wi];
          for (int64_t w0 = 0; w0 < W; w0 += width) {
            int64_t kpass = K + bf16, n = passes * kpass / (bf16 ? 2 : 1) * width;
            uint32_t *p1 = calloc((size_t)n, 4), *p2 = calloc((size_t)n, 4);
            /* the portable packer in one go, the vector one in two k ranges */
            int64_t mid = kpass / 4 * 2;
            tpu_gemm_pack_panel(kern->format, &src, w0, width, kpass, 0, kpass, p1);
            bool packed = true;
            for (int h = 0; h < 2; h++) {
              int64_t kb = h ? mid : 0, ke = h ? kpass : mid;
              packed = kern->pack_panel(&src, w0, width, kpass, kb, ke, p2) && packed;
            }
            /* the AVX2 packer and the bf16 one leave f16 sources to the portable packer */
            CHECK(packed == (dt != TPU_F16 || kern == &tpu_gemm_kernel_avx512));
            if (packed && memcmp(p1, p2, (size_t)n * 4) != 0) {
              fprintf(stderr, "  packers differ: %s %s layout %d comps %d width %d\n",
                      kern->name, tpu_dtype_name(dt), layout, cv, width);
              check_current_failed = 1;
            }
            free(p1), free(p2);
          }
        }
        if (layout == 1) { /* the whole-row packer: all panels at once, widths of whole
                              * vectors (16, 32) and, for the BF16 format, any (14: mr) */
          static const int row_widths[4] = {16, 32, 14, 13};
          for (int rw = 0; rw < (bf16 ? 4 : 2); rw++) {
            int width = row_widths[rw];
            int64_t kpass = K + bf16, steps = passes * kpass / (bf16 ? 2 : 1);
            int64_t np = (W + width - 1) / width, n = np * steps * width;
            uint32_t *p1 = calloc((size_t)n, 4), *p2 = calloc((size_t)n, 4);
            for (int64_t pi = 0; pi < np; pi++) {
              tpu_gemm_pack_panel(kern->format, &src, pi * width, width, kpass, 0, kpass,
                                  p1 + pi * steps * width);
            }
            bool packed = kern->pack_rows(&src, width, np, kpass, 0, 2, p2, steps * width);
            packed = kern->pack_rows(&src, width, np, kpass, 2, kpass, p2, steps * width) &&
                     packed;
            CHECK(packed == (dt != TPU_F16 || kern == &tpu_gemm_kernel_avx512));
            if (packed && memcmp(p1, p2, (size_t)n * 4) != 0) {
              fprintf(stderr, "  row packer differs: %s %s comps %d width %d\n", kern->name,
                      tpu_dtype_name(dt), cv, width);
              check_current_failed = 1;
            }
            free(p1), free(p2);
          }
        }
      }
    }
    free(woff);
    free_buf(&s);
  }
}

/* ---- convolution: fast vs reference ---------------------------------------------------- */

typedef struct conv_case {
  int ns;
  int64_t n, c, o, in[3], win[3];
  int64_t stride[3], pad_lo[3], pad_hi[3], ldil[3], rdil[3];
  int64_t fgc, bgc;
  int layout; /* 0: NCHW / OIHW / NCHW; 1: NHWC / HWIO / NHWC; 2: CNHW / IOHW / HWCN */
} conv_case;

static tpu_conv_attrs_t conv_attrs(const conv_case *cc, tpu_precision_t p) {
  tpu_conv_attrs_t a;
  memset(&a, 0, sizeof a);
  int ns = cc->ns;
  a.num_spatial = ns;
  for (int i = 0; i < ns; i++) {
    a.stride[i] = cc->stride[i] ? cc->stride[i] : 1;
    a.pad_lo[i] = cc->pad_lo[i];
    a.pad_hi[i] = cc->pad_hi[i];
    a.lhs_dilation[i] = cc->ldil[i] ? cc->ldil[i] : 1;
    a.rhs_dilation[i] = cc->rdil[i] ? cc->rdil[i] : 1;
  }
  a.feature_group_count = cc->fgc ? cc->fgc : 1;
  a.batch_group_count = cc->bgc ? cc->bgc : 1;
  a.precision = p;
  if (cc->layout == 0) {
    a.in_batch = 0, a.in_feature = 1, a.k_out_feature = 0, a.k_in_feature = 1;
    a.out_batch = 0, a.out_feature = 1;
    for (int i = 0; i < ns; i++) a.in_spatial[i] = a.k_spatial[i] = a.out_spatial[i] = 2 + i;
  } else if (cc->layout == 1) {
    a.in_batch = 0, a.in_feature = ns + 1, a.k_out_feature = ns + 1, a.k_in_feature = ns;
    a.out_batch = 0, a.out_feature = ns + 1;
    for (int i = 0; i < ns; i++) a.in_spatial[i] = a.out_spatial[i] = 1 + i, a.k_spatial[i] = i;
  } else {
    a.in_batch = 1, a.in_feature = 0, a.k_out_feature = 1, a.k_in_feature = 0;
    a.out_batch = ns + 1, a.out_feature = ns;
    for (int i = 0; i < ns; i++) a.in_spatial[i] = a.k_spatial[i] = 2 + i, a.out_spatial[i] = i;
  }
  return a;
}

static double check_conv(const conv_case *cc, tpu_precision_t p, tpu_dtype_t dt, tpu_dtype_t odt) {
  tpu_conv_attrs_t a = conv_attrs(cc, p);
  int ns = cc->ns, r = ns + 2;
  int64_t fgc = a.feature_group_count, bgc = a.batch_group_count;
  int64_t idims[5], kdims[5], odims[5];
  idims[a.in_batch] = cc->n;
  idims[a.in_feature] = cc->c;
  kdims[a.k_out_feature] = cc->o;
  kdims[a.k_in_feature] = cc->c / fgc;
  odims[a.out_batch] = cc->n / bgc;
  odims[a.out_feature] = cc->o;
  for (int i = 0; i < ns; i++) {
    idims[a.in_spatial[i]] = cc->in[i];
    kdims[a.k_spatial[i]] = cc->win[i];
    int64_t di = cc->in[i] ? (cc->in[i] - 1) * a.lhs_dilation[i] + 1 : 0;
    int64_t dw = cc->win[i] ? (cc->win[i] - 1) * a.rhs_dilation[i] + 1 : 0;
    int64_t pd = di + a.pad_lo[i] + a.pad_hi[i];
    odims[a.out_spatial[i]] = pd <= 0 || dw > pd ? 0 : (pd - dw) / a.stride[i] + 1;
  }
  tbuf in = dense(dt, r, idims), k = dense(dt, r, kdims), o1 = dense(odt, r, odims);
  tbuf o2 = dense(odt, r, odims), o3 = dense(TPU_F64, r, odims);
  tbuf ia = abs_copy(&in), ka = abs_copy(&k);
  CHECK_OK(tpu_ref_convolution(&a, &in.b, &k.b, &o1.b));
  CHECK_OK(tpu_kernel_convolution(&a, &in.b, &k.b, &o2.b, test_pool()));
  tpu_conv_attrs_t aa = a;
  aa.precision = TPU_PRECISION_HIGHEST;
  CHECK_OK(tpu_ref_convolution(&aa, &ia.b, &ka.b, &o3.b));
  int64_t K = cc->c / fgc;
  for (int i = 0; i < ns; i++) K *= cc->win[i];
  double w = worst_ratio(&o2.b, &o1.b, &o3.b, K * passes_of(dt, dt, p), eps_of(dt, dt));
  free_buf(&in), free_buf(&k), free_buf(&o1), free_buf(&o2), free_buf(&o3), free_buf(&ia),
      free_buf(&ka);
  return w;
}

TEST(conv_cases) {
  /* fields: ns, n, c, o, in, win, stride, pad_lo, pad_hi, lhs_dil, rhs_dil, fgc, bgc, layout */
  static const conv_case cases[] = {
      /* 3x3 "same" */
      {2, 2, 3, 8, {9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0}, {0}, 0, 0, 0},
      /* strided, valid */
      {2, 3, 5, 7, {12, 10}, {3, 2}, {2, 3}, {0}, {0}, {0}, {0}, 0, 0, 0},
      /* 1x1 */
      {2, 1, 4, 6, {8, 8}, {1, 1}, {0}, {0}, {0}, {0}, {0}, 0, 0, 0},
      /* depthwise, dilated */
      {2, 2, 6, 6, {10, 9}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {0}, {2, 2}, 6, 0, 0},
      /* feature groups, NHWC */
      {2, 2, 4, 6, {7, 7}, {3, 3}, {2, 2}, {1, 0}, {0, 1}, {0}, {0}, 2, 0, 1},
      /* batch groups (weight gradients), swapped layout */
      {2, 4, 3, 6, {6, 5}, {2, 2}, {0}, {0}, {0}, {0}, {0}, 0, 2, 2},
      /* lhs dilation (input gradients of strided convs) */
      {2, 2, 3, 4, {5, 6}, {3, 3}, {0}, {2, 2}, {2, 2}, {2, 2}, {0}, 0, 0, 0},
      /* negative padding */
      {2, 2, 3, 4, {9, 9}, {2, 3}, {1, 2}, {-1, -2}, {-2, 1}, {0}, {0}, 0, 0, 0},
      /* 1d, and 1d depthwise NWC */
      {1, 3, 5, 4, {30}, {5}, {2}, {2}, {1}, {0}, {3}, 0, 0, 0},
      {1, 2, 4, 4, {17}, {3}, {1}, {1}, {1}, {0}, {0}, 4, 0, 1},
      /* 3d, and 3d NDHWC with dilations */
      {3, 2, 3, 5, {5, 6, 4}, {2, 3, 2}, {1, 2, 1}, {1, 0, 1}, {0, 1, 1}, {0}, {0}, 0, 0, 0},
      {3, 1, 2, 3, {4, 4, 4}, {2, 2, 2}, {0}, {0}, {0}, {1, 2, 1}, {1, 1, 2}, 0, 0, 1},
      /* no input features (K = 0), and an empty output */
      {2, 2, 0, 4, {5, 5}, {3, 3}, {0}, {1, 1}, {1, 1}, {0}, {0}, 0, 0, 0},
      {2, 2, 3, 4, {2, 2}, {3, 3}, {0}, {0}, {0}, {0}, {0}, 0, 0, 0},
      /* a larger batch of small images (one GEMM with N = batch x pixels) */
      {2, 16, 16, 32, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0}, {0}, 0, 0, 0},
      /* big images: one GEMM per image and group */
      {2, 3, 4, 6, {20, 17}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0}, {0}, 0, 0, 0},
      {2, 2, 4, 8, {18, 16}, {3, 3}, {1, 1}, {1, 0}, {1, 0}, {0}, {0}, 2, 0, 1},
      {2, 4, 3, 6, {17, 16}, {2, 2}, {0}, {0}, {0}, {0}, {0}, 0, 2, 2},
      {1, 2, 3, 5, {300}, {4}, {1}, {0}, {0}, {0}, {0}, 0, 0, 0},
  };

  int n = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; i++) {
    for (int p = 0; p < 3; p++) {
      double w = check_conv(&cases[i], (tpu_precision_t)p, TPU_F32, TPU_F32);
      if (w > 1.0) fprintf(stderr, "  conv case %d precision %d: %g\n", i, p, w);
      CHECK(w <= 1.0);
    }
    double w = check_conv(&cases[i], TPU_PRECISION_DEFAULT, TPU_BF16, TPU_BF16);
    if (w > 1.0) fprintf(stderr, "  conv case %d bf16: %g\n", i, w);
    CHECK(w <= 1.0);
  }
  CHECK(check_conv(&cases[0], TPU_PRECISION_DEFAULT, TPU_F16, TPU_F32) <= 1.0);
  CHECK(check_conv(&cases[3], TPU_PRECISION_HIGH, TPU_F64, TPU_F64) <= 1.0);
}

TEST(conv_bad_arguments) {
  conv_case cc = {2, 2, 4, 6, {5, 5}, {3, 3}, {0}, {0}, {0}, {0}, {0}, 0, 0, 0};
  tpu_conv_attrs_t a = conv_attrs(&cc, TPU_PRECISION_DEFAULT);
  int64_t id[4] = {2, 4, 5, 5}, kd[4] = {6, 4, 3, 3}, od[4] = {2, 6, 3, 3};
  tbuf in = dense(TPU_F32, 4, id), k = dense(TPU_F32, 4, kd), o = dense(TPU_F32, 4, od);
  CHECK_OK(tpu_kernel_convolution(&a, &in.b, &k.b, &o.b, test_pool()));
  o.b.dims[2] = 4;
  CHECK(tpu_kernel_convolution(&a, &in.b, &k.b, &o.b, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "convolution");
  o.b.dims[2] = 3;
  a.feature_group_count = 3; /* 4 features do not split in 3 */
  CHECK(tpu_kernel_convolution(&a, &in.b, &k.b, &o.b, NULL) == TPU_ERR_INVALID_ARGUMENT);
  a.feature_group_count = 1;
  a.in_spatial[0] = 1; /* not a permutation */
  CHECK(tpu_ref_convolution(&a, &in.b, &k.b, &o.b) == TPU_ERR_INVALID_ARGUMENT);
  a.in_spatial[0] = 2;
  a.stride[0] = 0;
  CHECK(tpu_kernel_convolution(&a, &in.b, &k.b, &o.b, NULL) == TPU_ERR_INVALID_ARGUMENT);
  free_buf(&in), free_buf(&k), free_buf(&o);
}

int main(void) {
  RUN(plans);
  RUN(default_is_one_bf16_pass);
  RUN(high_is_three_passes);
  RUN(highest_is_f32);
  RUN(bf16_products_exact);
  RUN(split_gemms_keep_their_bits);
  RUN(helped_gemms_keep_their_bits);
  RUN(inf_and_nan);
  RUN(matmul_odd_sizes);
  RUN(matmul_layouts);
  RUN(batched_and_multi_contract);
  RUN(batch_groups_and_shared_operands);
  RUN(vector_and_outer_products);
  RUN(dtypes_mixed_and_narrow);
  RUN(k_zero_and_empty);
  RUN(bad_arguments);
  RUN(every_gemm_kernel);
  RUN(edge_rows_in_place);
  RUN(dot_with_bias_matches_dot_then_add);
  RUN(every_gemm_kernel_adds_a_bias);
  RUN(packers_agree);
  RUN(conv_cases);
  RUN(conv_bad_arguments);
  tpu_pool_destroy(test_pool());
  return check_report();
}
