/* test_kernels_reduce.c: reductions, reduce_window (pooling) and scans on the vTPU kernels.
 *
 * tpu_kernel_reduce is checked against tpu_ref_reduce for every kind x dtype x set of
 * reduced dims, on every ISA table this CPU runs, single- and multi-threaded, on strided
 * inputs and outputs; plus hand values (NaN rules, first-index ties, integer wrapping),
 * empty reductions, long rows and columns (accuracy, thread-count independence) and
 * argument errors. reduce_window and scan are checked against naive loops written here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tpu/kernels.h"
#include "tpu/threadpool.h"
#include "vtpu/kernels/reduce_internal.h"
#include "vtpu/kernels/strided.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static tpu_buf_t mkbuf(void *data, tpu_dtype_t dt, int rank, const int64_t *dims) {
  tpu_buf_t b = {.data = data, .dtype = dt, .rank = rank};
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    b.dims[d] = dims[d];
    b.strides[d] = s;
    s *= dims[d];
  }
  return b;
}

static int64_t numel_of(const tpu_buf_t *b) {
  int64_t n = 1;
  for (int d = 0; d < b->rank; d++) n *= b->dims[d];
  return n;
}

/* Offset of the linear (row-major) element |i| of |b|. */
static int64_t off_of(const tpu_buf_t *b, int64_t i) {
  int64_t off = 0;
  for (int d = b->rank - 1; d >= 0; d--) {
    off += (i % b->dims[d]) * b->strides[d];
    i /= b->dims[d];
  }
  return off;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 9007199254740992.0;
}

typedef enum { FILL_SUM, FILL_PROD, FILL_TIES, FILL_LOGIC } fill_t;

static void fill(const tpu_buf_t *b, fill_t mode) {
  int64_t n = numel_of(b);
  for (int64_t i = 0; i < n; i++) {
    int64_t o = off_of(b, i);
    if (b->dtype == TPU_BOOL) {
      tpu_store_i64(b->data, b->dtype, o, urand() < (mode == FILL_LOGIC ? 0.8 : 0.5));
    } else if (tpu_dtype_is_float(b->dtype)) {
      double v;
      switch (mode) {
        case FILL_SUM: v = urand() * 4 - 2; break;
        case FILL_PROD: v = 0.6 + urand() * 0.8; break;
        case FILL_TIES: v = floor(urand() * 7) - 3; break;
        default: v = urand() < 0.2 ? 0.0 : urand() - 0.5; break;
      }
      tpu_store_f64(b->data, b->dtype, o, v);
    } else {
      int64_t v = (int64_t)floor(urand() * 7) - (b->dtype == TPU_U8 ? 0 : 3);
      if (mode == FILL_LOGIC) v = urand() < 0.2 ? 0 : v;
      tpu_store_i64(b->data, b->dtype, o, v);
    }
  }
}

static bool close_enough(double a, double b, double rtol, double atol) {
  if (a != a || b != b) return a != a && b != b;
  if (a == b) return true;
  return fabs(a - b) <= atol + rtol * fabs(b);
}

static double rtol_of(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_F32: return 2e-5;
    case TPU_F64: return 1e-12;
    case TPU_F16: return 2e-3;
    case TPU_BF16: return 1.6e-2;
    default: return 0;
  }
}

/* Counts elements of |got| not close to |want| (same shape), printing the first few. */
static int64_t mismatches(const char *what, const tpu_buf_t *got, const tpu_buf_t *want,
                          double rtol, double atol) {
  int64_t n = numel_of(want), bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = tpu_load_f64(got->data, got->dtype, off_of(got, i));
    double w = tpu_load_f64(want->data, want->dtype, off_of(want, i));
    bool ok = tpu_dtype_is_float(want->dtype) ? close_enough(g, w, rtol, atol)
                                               : tpu_load_i64(got->data, got->dtype, off_of(got, i)) ==
                                                     tpu_load_i64(want->data, want->dtype, off_of(want, i));
    if (!ok && bad++ < 3) fprintf(stderr, "    %s: element %lld got %.9g want %.9g\n", what,
                                  (long long)i, g, w);
  }
  return bad;
}

static const tpu_dtype_t kAllDtypes[] = {TPU_F32, TPU_F64, TPU_F16, TPU_BF16, TPU_I64,
                                         TPU_I32, TPU_I16, TPU_I8,  TPU_U8,   TPU_BOOL};
static const char *kKinds[] = {"SUM", "PROD", "MAX", "MIN", "AND", "OR", "ARGMAX", "ARGMIN"};

static tpu_pool_t *g_pool2; /* a 2-thread pool, so parallel splits run even on 1 core */

/* Runs kind over x (dims mask) with the fast kernel and the reference; returns mismatches. */
static int64_t compare_reduce(tpu_reduce_kind_t kind, const tpu_buf_t *x, const bool *dims,
                              tpu_dtype_t out_dt, tpu_pool_t *pool, const char *label) {
  int64_t od[TPU_MAX_RANK];
  int orank = 0;
  for (int d = 0; d < x->rank; d++) {
    if (!dims[d]) od[orank++] = x->dims[d];
  }
  tpu_buf_t probe = mkbuf(NULL, out_dt, orank, od);
  int64_t m = numel_of(&probe);
  size_t es = tpu_dtype_size(out_dt);
  void *a = calloc((size_t)m + 1, es), *b = calloc((size_t)m + 1, es);
  tpu_buf_t got = mkbuf(a, out_dt, orank, od), want = mkbuf(b, out_dt, orank, od);
  tpu_status_t s1 = tpu_kernel_reduce(kind, x, dims, &got, pool);
  tpu_status_t s2 = tpu_ref_reduce(kind, x, dims, &want);
  int64_t bad = 0;
  if (s1 != TPU_OK || s2 != TPU_OK) {
    fprintf(stderr, "    %s: status %s / %s: %s\n", label, tpu_status_name(s1),
            tpu_status_name(s2), tpu_status_message());
    bad = 1;
  } else {
    double rtol = rtol_of(out_dt);
    if (kind == TPU_REDUCE_PROD && out_dt != TPU_F64) rtol *= 4;
    bad = mismatches(label, &got, &want, rtol, rtol);
  }
  free(a);
  free(b);
  return bad;
}

/* ---- reduce: every kind x dtype x dims, per ISA and thread count ------------------------- */

static int64_t all_combinations(tpu_pool_t *pool) {
  int64_t dims3[3] = {3, 4, 37};
  int64_t bad = 0;
  for (size_t t = 0; t < sizeof kAllDtypes / sizeof *kAllDtypes; t++) {
    tpu_dtype_t dt = kAllDtypes[t];
    void *data = malloc(3 * 4 * 37 * 8);
    tpu_buf_t x = mkbuf(data, dt, 3, dims3);
    for (int kind = 0; kind <= TPU_REDUCE_ARGMIN; kind++) {
      fill(&x, kind == TPU_REDUCE_SUM ? FILL_SUM
               : kind == TPU_REDUCE_PROD ? FILL_PROD
               : kind <= TPU_REDUCE_MIN || kind >= TPU_REDUCE_ARGMAX ? FILL_TIES
                                                                 : FILL_LOGIC);
      tpu_dtype_t out_dt = kind >= TPU_REDUCE_ARGMAX ? TPU_I64 : dt;
      for (int mask = 0; mask < 8; mask++) {
        bool dims[3] = {mask & 1, (mask >> 1) & 1, (mask >> 2) & 1};
        char label[96];
        snprintf(label, sizeof label, "%s %s mask %d", kKinds[kind], tpu_dtype_name(dt), mask);
        int64_t b = compare_reduce(kind, &x, dims, out_dt, pool, label);
        if (kind == TPU_REDUCE_SUM && !tpu_dtype_is_float(dt)) { /* PyTorch: int sums in i64 */
          b += compare_reduce(kind, &x, dims, TPU_I64, pool, label);
        }
        if (kind == TPU_REDUCE_SUM && dt == TPU_BF16) { /* sum(dtype=float32) */
          b += compare_reduce(kind, &x, dims, TPU_F32, pool, label);
        }
        bad += b;
      }
    }
    free(data);
  }
  return bad;
}

/* Rows and columns long enough for the main vector loops (f32 and bf16), with a NaN. */
static int64_t long_rows_and_cols(tpu_pool_t *pool) {
  enum { R = 3, C = 2000 };
  int64_t d[2] = {R, C}, bad = 0;
  float *x = malloc(sizeof(float) * R * C);
  uint16_t *xb = malloc(sizeof(uint16_t) * R * C);
  tpu_buf_t xf = mkbuf(x, TPU_F32, 2, d), xbf = mkbuf(xb, TPU_BF16, 2, d);
  for (int kind = TPU_REDUCE_SUM; kind <= TPU_REDUCE_MIN; kind++) {
    fill(&xf, kind == TPU_REDUCE_PROD ? FILL_PROD : FILL_SUM);
    if (kind == TPU_REDUCE_PROD) {
      for (int i = 0; i < R * C; i++) x[i] = 1.0f + (x[i] - 1.0f) * 0.02f;
    }
    if (kind >= TPU_REDUCE_MAX) x[C + 1234] = NAN; /* row 1 */
    for (int i = 0; i < R * C; i++) xb[i] = tpu_f32_to_bf16(x[i]);
    for (int mask = 1; mask < 4; mask++) {
      bool dims[2] = {mask & 1, (mask >> 1) & 1};
      bad += compare_reduce(kind, &xf, dims, TPU_F32, pool, "long f32");
      bad += compare_reduce(kind, &xbf, dims, TPU_F32, pool, "long bf16");
    }
  }
  free(x);
  free(xb);
  return bad;
}

TEST(reduce_all_kinds_dtypes_dims_vs_ref) {
  const tpu_reduce_isa_t *isas[3] = {tpu_reduce_isa_portable(), NULL, NULL};
  const tpu_cpu_features_t *f = tpu_cpu_features();
  if (f->avx2_fma) isas[1] = tpu_reduce_isa_avx2();
  if (f->avx512f) isas[2] = tpu_reduce_isa_avx512();
  for (int i = 0; i < 3; i++) {
    if (!isas[i]) continue;
    tpu_reduce_isa_force(isas[i]);
    int64_t bad = all_combinations(NULL) + all_combinations(g_pool2) +
                  long_rows_and_cols(NULL) + long_rows_and_cols(g_pool2);
    if (bad) fprintf(stderr, "  isa %s: %lld mismatches\n", isas[i]->name, (long long)bad);
    CHECK(bad == 0);
  }
  tpu_reduce_isa_force(NULL);
}

/* ---- strided inputs and outputs ------------------------------------------------------------ */

TEST(reduce_strided_views_vs_ref) {
  enum { A = 6, B = 7, C = 40 };
  float *base = malloc(sizeof(float) * A * B * C);
  int64_t full[3] = {A, B, C};
  tpu_buf_t dense = mkbuf(base, TPU_F32, 3, full);
  fill(&dense, FILL_TIES);
  tpu_buf_t views[5];
  /* 0: transposed (C, A, B) */
  views[0] = dense;
  views[0].dims[0] = C; views[0].strides[0] = 1;
  views[0].dims[1] = A; views[0].strides[1] = B * C;
  views[0].dims[2] = B; views[0].strides[2] = C;
  /* 1: the last dim reversed */
  views[1] = dense;
  views[1].data = base + C - 1;
  views[1].strides[2] = -1;
  /* 2: a broadcast dim (stride 0) in front: (5, B, C) */
  views[2] = dense;
  views[2].dims[0] = 5; views[2].strides[0] = 0;
  /* 3: every other element of the last dim */
  views[3] = dense;
  views[3].dims[2] = C / 2; views[3].strides[2] = 2;
  /* 4: a bf16 copy, transposed the other way (B, C, A) */
  uint16_t *bb = malloc(sizeof(uint16_t) * A * B * C);
  for (int i = 0; i < A * B * C; i++) bb[i] = tpu_f32_to_bf16(base[i]);
  views[4] = mkbuf(bb, TPU_BF16, 3, full);
  views[4].dims[0] = B; views[4].strides[0] = C;
  views[4].dims[1] = C; views[4].strides[1] = 1;
  views[4].dims[2] = A; views[4].strides[2] = B * C;
  tpu_reduce_kind_t kinds[] = {TPU_REDUCE_SUM, TPU_REDUCE_MAX, TPU_REDUCE_MIN,
                               TPU_REDUCE_ARGMAX, TPU_REDUCE_ARGMIN, TPU_REDUCE_OR};
  int64_t bad = 0;
  for (int v = 0; v < 5; v++) {
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
      for (int mask = 1; mask < 8; mask++) {
        bool dims[3] = {mask & 1, (mask >> 1) & 1, (mask >> 2) & 1};
        tpu_dtype_t odt = kinds[k] >= TPU_REDUCE_ARGMAX ? TPU_I64 : views[v].dtype;
        char label[64];
        snprintf(label, sizeof label, "view %d %s mask %d", v, kKinds[kinds[k]], mask);
        bad += compare_reduce(kinds[k], &views[v], dims, odt, NULL, label);
        bad += compare_reduce(kinds[k], &views[v], dims, odt, g_pool2, label);
      }
    }
  }
  CHECK(bad == 0);

  /* a strided (transposed) output: x (A, B, C) sum over B into out viewed as (A, C) of a
   * (C, A) buffer */
  float got[A * C], want[A * C];
  int64_t od[2] = {A, C};
  tpu_buf_t out = mkbuf(got, TPU_F32, 2, od);
  out.strides[0] = 1;
  out.strides[1] = A;
  tpu_buf_t ref = mkbuf(want, TPU_F32, 2, od);
  bool dims[3] = {false, true, false};
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &dense, dims, &out, g_pool2));
  CHECK_OK(tpu_ref_reduce(TPU_REDUCE_SUM, &dense, dims, &ref));
  CHECK(mismatches("strided out", &out, &ref, 1e-5, 1e-5) == 0);
  free(base);
  free(bb);
}

/* ---- hand values: NaN, ties, wrapping, logic ------------------------------------------ */

static double reduce1_f32(tpu_reduce_kind_t kind, const float *v, int64_t n, tpu_dtype_t odt) {
  tpu_buf_t x = mkbuf((void *)v, TPU_F32, 1, &n);
  bool dims[1] = {true};
  int64_t out[1] = {0};
  tpu_buf_t o = mkbuf(out, odt, 0, NULL);
  tpu_status_t st = tpu_kernel_reduce(kind, &x, dims, &o, NULL);
  if (st != TPU_OK) return -12345;
  return tpu_load_f64(out, odt, 0);
}

TEST(reduce_hand_values) {
  float a[] = {1, 2, 3, 4};
  CHECK(reduce1_f32(TPU_REDUCE_SUM, a, 4, TPU_F32) == 10);
  CHECK(reduce1_f32(TPU_REDUCE_PROD, a, 4, TPU_F32) == 24);
  CHECK(reduce1_f32(TPU_REDUCE_MAX, a, 4, TPU_F32) == 4);
  CHECK(reduce1_f32(TPU_REDUCE_MIN, a, 4, TPU_F32) == 1);
  float ties[] = {1, 3, 3, 2, -1, -1};
  CHECK(reduce1_f32(TPU_REDUCE_ARGMAX, ties, 6, TPU_I64) == 1);
  CHECK(reduce1_f32(TPU_REDUCE_ARGMIN, ties, 6, TPU_I64) == 4);
  float nan1[] = {2, NAN, 1, NAN, 7};
  CHECK(isnan(reduce1_f32(TPU_REDUCE_MAX, nan1, 5, TPU_F32)));
  CHECK(isnan(reduce1_f32(TPU_REDUCE_MIN, nan1, 5, TPU_F32)));
  CHECK(reduce1_f32(TPU_REDUCE_ARGMAX, nan1, 5, TPU_I64) == 1);
  CHECK(reduce1_f32(TPU_REDUCE_ARGMIN, nan1, 5, TPU_I64) == 1);
  float logic[] = {0, NAN, 0};
  CHECK(reduce1_f32(TPU_REDUCE_OR, logic, 3, TPU_BOOL) == 1);
  CHECK(reduce1_f32(TPU_REDUCE_AND, logic, 3, TPU_BOOL) == 0);
  float ones[] = {1, 0.5f, -2};
  CHECK(reduce1_f32(TPU_REDUCE_AND, ones, 3, TPU_BOOL) == 1);
  /* argmax of -inf only: index 0; NaN in a long row found by the vector kernels */
  float *big = malloc(sizeof(float) * 100000);
  for (int i = 0; i < 100000; i++) big[i] = (float)(i % 1000);
  CHECK(reduce1_f32(TPU_REDUCE_ARGMAX, big, 100000, TPU_I64) == 999);
  CHECK(reduce1_f32(TPU_REDUCE_MAX, big, 100000, TPU_F32) == 999);
  big[77777] = NAN;
  CHECK(isnan(reduce1_f32(TPU_REDUCE_MAX, big, 100000, TPU_F32)));
  CHECK(isnan(reduce1_f32(TPU_REDUCE_MIN, big, 100000, TPU_F32)));
  CHECK(reduce1_f32(TPU_REDUCE_ARGMIN, big, 100000, TPU_I64) == 77777);
  free(big);

  /* integer wrapping: i8 sum into i8 wraps, into i64 does not */
  int8_t i8[] = {100, 100};
  int64_t two = 2;
  tpu_buf_t x8 = mkbuf(i8, TPU_I8, 1, &two);
  bool d1[1] = {true};
  int8_t o8 = 0;
  int64_t o64 = 0;
  tpu_buf_t out8 = mkbuf(&o8, TPU_I8, 0, NULL), out64 = mkbuf(&o64, TPU_I64, 0, NULL);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &x8, d1, &out8, NULL));
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &x8, d1, &out64, NULL));
  CHECK(o8 == -56 && o64 == 200);
  uint8_t bools[] = {1, 0, 1, 1, 0};
  int64_t five = 5;
  tpu_buf_t xb = mkbuf(bools, TPU_BOOL, 1, &five);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &xb, d1, &out64, NULL));
  CHECK(o64 == 3);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_ARGMAX, &xb, d1, &out64, NULL));
  CHECK(o64 == 0);
  /* AND/OR: bitwise on integers (StableHLO), logical on bool */
  int32_t bits[3] = {6, 3, 7};
  int64_t three = 3;
  int32_t o32 = 0;
  tpu_buf_t xbits = mkbuf(bits, TPU_I32, 1, &three), out32 = mkbuf(&o32, TPU_I32, 0, NULL);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_AND, &xbits, d1, &out32, g_pool2));
  CHECK(o32 == 2);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_OR, &xbits, d1, &out32, NULL));
  CHECK(o32 == 7);
  CHECK_OK(tpu_ref_reduce(TPU_REDUCE_AND, &xbits, d1, &out32));
  CHECK(o32 == 2);
  uint8_t ob = 9;
  tpu_buf_t outb = mkbuf(&ob, TPU_BOOL, 0, NULL);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_AND, &xb, d1, &outb, NULL));
  CHECK(ob == 0);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_OR, &xb, d1, &outb, NULL));
  CHECK(ob == 1);
  /* reducing no dims converts (copy) */
  bool none[1] = {false};
  float f5[5];
  tpu_buf_t of = mkbuf(f5, TPU_F32, 1, &five);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_MAX, &xb, none, &of, NULL));
  CHECK(f5[0] == 1 && f5[1] == 0 && f5[4] == 0);
}

/* ---- empty reductions and empty outputs ------------------------------------------------- */

TEST(reduce_empty) {
  int64_t d30[2] = {3, 0}, d3 = 3;
  float dummy[1];
  tpu_buf_t x = mkbuf(dummy, TPU_F32, 2, d30);
  bool dims[2] = {false, true};
  float out[3];
  tpu_buf_t o = mkbuf(out, TPU_F32, 1, &d3);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &x, dims, &o, NULL));
  CHECK(out[0] == 0 && out[2] == 0);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_PROD, &x, dims, &o, NULL));
  CHECK(out[0] == 1 && out[2] == 1);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_MAX, &x, dims, &o, NULL));
  CHECK(isinf(out[1]) && out[1] < 0);
  CHECK_OK(tpu_ref_reduce(TPU_REDUCE_MIN, &x, dims, &o));
  CHECK(isinf(out[1]) && out[1] > 0);
  int32_t oi[3];
  tpu_buf_t x32 = mkbuf(dummy, TPU_I32, 2, d30), o32 = mkbuf(oi, TPU_I32, 1, &d3);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_MAX, &x32, dims, &o32, NULL));
  CHECK(oi[0] == INT32_MIN);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_MIN, &x32, dims, &o32, NULL));
  CHECK(oi[0] == INT32_MAX);
  uint8_t ob[3], ou8[3];
  tpu_buf_t obb = mkbuf(ob, TPU_BOOL, 1, &d3), ou8b = mkbuf(ou8, TPU_U8, 1, &d3);
  tpu_buf_t xu8 = mkbuf(dummy, TPU_U8, 2, d30);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_AND, &xu8, dims, &ou8b, NULL)); /* all ones */
  CHECK(ou8[0] == 255);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_AND, &x, dims, &obb, NULL));
  CHECK(ob[0] == 1);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_OR, &x, dims, &obb, NULL));
  CHECK(ob[0] == 0);
  int64_t oa[3];
  tpu_buf_t oab = mkbuf(oa, TPU_I64, 1, &d3);
  CHECK(tpu_kernel_reduce(TPU_REDUCE_ARGMAX, &x, dims, &oab, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "reduce");
  CHECK_CONTAINS(tpu_status_message(), "ARGMAX");
  CHECK(tpu_ref_reduce(TPU_REDUCE_ARGMIN, &x, dims, &oab) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "ARGMIN");
  /* an empty output: nothing to do, even for ARGMAX */
  int64_t d04[2] = {0, 4}, z = 0;
  tpu_buf_t xe = mkbuf(NULL, TPU_F32, 2, d04), oe = mkbuf(NULL, TPU_I64, 1, &z);
  bool dlast[2] = {false, true};
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_ARGMAX, &xe, dlast, &oe, NULL));
}

TEST(reduce_argument_errors) {
  float x[6], o[3];
  int64_t d23[2] = {2, 3}, d2 = 2, d3 = 3;
  tpu_buf_t xb = mkbuf(x, TPU_F32, 2, d23);
  tpu_buf_t wrong = mkbuf(o, TPU_F32, 1, &d3), right = mkbuf(o, TPU_F32, 1, &d2);
  bool dims[2] = {false, true};
  CHECK(tpu_kernel_reduce(TPU_REDUCE_SUM, &xb, dims, &wrong, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "reduce");
  CHECK(tpu_kernel_reduce(TPU_REDUCE_SUM, &xb, NULL, &right, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_kernel_reduce(TPU_REDUCE_ARGMAX, &xb, dims, &right, NULL) ==
        TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "integer");
  CHECK(tpu_kernel_reduce((tpu_reduce_kind_t)42, &xb, dims, &right, NULL) ==
        TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_kernel_reduce(TPU_REDUCE_SUM, NULL, dims, &right, NULL) == TPU_ERR_INVALID_ARGUMENT);
}

/* ---- long rows and columns: accuracy and thread-count independence ---------------------- */

TEST(reduce_long_rows_accuracy_and_determinism) {
  enum { N = 1 << 22 };
  float *x = malloc(sizeof(float) * N);
  uint16_t *xb = malloc(sizeof(uint16_t) * N);
  double exact = 0, exact_b = 0;
  for (int i = 0; i < N; i++) {
    x[i] = (float)urand();
    xb[i] = tpu_f32_to_bf16(x[i]);
    exact += x[i];
    exact_b += tpu_bf16_to_f32(xb[i]);
  }
  int64_t n = N;
  bool all[1] = {true};
  float s1 = 0, s2 = 0, s3 = 0;
  tpu_buf_t xf = mkbuf(x, TPU_F32, 1, &n);
  tpu_buf_t o1 = mkbuf(&s1, TPU_F32, 0, NULL), o2 = mkbuf(&s2, TPU_F32, 0, NULL);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &xf, all, &o1, NULL));
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &xf, all, &o2, g_pool2));
  CHECK(fabs(s1 - exact) <= 1e-6 * exact); /* pairwise: far better than sequential f32 */
  CHECK(memcmp(&s1, &s2, sizeof s1) == 0);  /* same bits with 1 or 2 threads */
  tpu_buf_t xbf = mkbuf(xb, TPU_BF16, 1, &n), o3 = mkbuf(&s3, TPU_F32, 0, NULL);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &xbf, all, &o3, g_pool2));
  CHECK(fabs(s3 - exact_b) <= 1e-6 * exact_b);

  /* rows of a (4, N/4) matrix, and a (N/4, 4)-shaped view reduced over dim 0 (gather) */
  int64_t d2[2] = {4, N / 4};
  tpu_buf_t xm = mkbuf(x, TPU_F32, 2, d2);
  bool drow[2] = {false, true};
  float r1[4], r2[4];
  int64_t four = 4;
  tpu_buf_t or1 = mkbuf(r1, TPU_F32, 1, &four), or2 = mkbuf(r2, TPU_F32, 1, &four);
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &xm, drow, &or1, NULL));
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &xm, drow, &or2, g_pool2));
  CHECK(memcmp(r1, r2, sizeof r1) == 0);
  tpu_buf_t xt = xm; /* transposed: (N/4, 4) with strides (1, N/4) */
  xt.dims[0] = N / 4; xt.dims[1] = 4; xt.strides[0] = 1; xt.strides[1] = N / 4;
  bool dcol[2] = {true, false};
  CHECK_OK(tpu_kernel_reduce(TPU_REDUCE_SUM, &xt, dcol, &or2, g_pool2));
  CHECK(memcmp(r1, r2, sizeof r1) == 0); /* same blocks, same tree */
  for (int r = 0; r < 4; r++) {
    double e = 0;
    for (int i = 0; i < N / 4; i++) e += x[(int64_t)r * (N / 4) + i];
    CHECK(fabs(r1[r] - e) <= 1e-6 * e);
  }
  free(x);
  free(xb);
}

TEST(reduce_columns_vs_ref_and_determinism) {
  int64_t shapes[][3] = {{1, 3000, 300}, {3, 500, 40}, {2, 70, 1000}, {1, 100000, 17}};
  int64_t bad = 0;
  for (int s = 0; s < 4; s++) {
    int64_t *d = shapes[s];
    int64_t n = d[0] * d[1] * d[2];
    float *x = malloc(sizeof(float) * n);
    uint16_t *xb = malloc(sizeof(uint16_t) * n);
    tpu_buf_t xf = mkbuf(x, TPU_F32, 3, d), xbf = mkbuf(xb, TPU_BF16, 3, d);
    bool dims[3] = {false, true, false};
    for (int kind = TPU_REDUCE_SUM; kind <= TPU_REDUCE_MIN; kind++) {
      fill(&xf, kind == TPU_REDUCE_PROD ? FILL_PROD : FILL_SUM);
      if (kind == TPU_REDUCE_PROD) { /* keep products finite: |x| near 1 */
        for (int64_t i = 0; i < n; i++) x[i] = 1.0f + (x[i] - 1.0f) * 0.01f;
      }
      if (kind >= TPU_REDUCE_MAX) x[(d[1] / 2) * d[2] + 5] = NAN; /* column 5 of a = 0 */
      for (int64_t i = 0; i < n; i++) xb[i] = tpu_f32_to_bf16(x[i]);
      char label[64];
      snprintf(label, sizeof label, "cols %d %s f32", s, kKinds[kind]);
      bad += compare_reduce(kind, &xf, dims, TPU_F32, NULL, label);
      bad += compare_reduce(kind, &xf, dims, TPU_F32, g_pool2, label);
      snprintf(label, sizeof label, "cols %d %s bf16", s, kKinds[kind]);
      bad += compare_reduce(kind, &xbf, dims, TPU_BF16, g_pool2, label);
      /* thread-count independence, bit for bit */
      int64_t m = d[0] * d[2], od[2] = {d[0], d[2]};
      float *a = malloc(sizeof(float) * m), *b = malloc(sizeof(float) * m);
      tpu_buf_t oa = mkbuf(a, TPU_F32, 2, od), ob = mkbuf(b, TPU_F32, 2, od);
      CHECK_OK(tpu_kernel_reduce(kind, &xf, dims, &oa, NULL));
      CHECK_OK(tpu_kernel_reduce(kind, &xf, dims, &ob, g_pool2));
      CHECK(memcmp(a, b, sizeof(float) * m) == 0);
      if (kind >= TPU_REDUCE_MAX) CHECK(isnan(a[5]) && !isnan(a[6]));
      free(a);
      free(b);
    }
    free(x);
    free(xb);
  }
  CHECK(bad == 0);
}

/* ---- reduce_window --------------------------------------------------------------------------- */

/* Naive reduce_window in f64 / i64 (the definition, written out). */
static void naive_window(const tpu_reduce_window_attrs_t *a, const tpu_buf_t *x,
                         const tpu_buf_t *out) {
  int64_t m = numel_of(out);
  int r = x->rank;
  for (int64_t o = 0; o < m; o++) {
    int64_t oi[TPU_MAX_RANK], t = o;
    for (int d = r - 1; d >= 0; d--) {
      oi[d] = t % out->dims[d];
      t /= out->dims[d];
    }
    int64_t taps = 1;
    for (int d = 0; d < r; d++) taps *= a->window[d];
    bool isf = tpu_dtype_is_float(x->dtype), any = false;
    double acc = a->kind == TPU_REDUCE_PROD ? 1 : 0;
    for (int64_t k = 0; k < taps; k++) {
      int64_t ki = k, off = 0;
      bool in = true;
      for (int d = r - 1; d >= 0; d--) {
        int64_t kd = ki % a->window[d];
        ki /= a->window[d];
        int64_t p = oi[d] * a->stride[d] - a->pad_lo[d] + kd * a->dilation[d];
        if (p < 0 || p >= x->dims[d]) in = false;
        off += p * x->strides[d];
      }
      if (!in) continue;
      double v = isf ? tpu_load_f64(x->data, x->dtype, off)
                     : (double)tpu_load_i64(x->data, x->dtype, off);
      switch (a->kind) {
        case TPU_REDUCE_SUM: acc += v; break;
        case TPU_REDUCE_PROD: acc *= v; break;
        case TPU_REDUCE_MAX: if (!any || v > acc || v != v) acc = (acc != acc && any) ? acc : v; break;
        default: if (!any || v < acc || v != v) acc = (acc != acc && any) ? acc : v; break;
      }
      any = true;
    }
    if (!any && a->kind == TPU_REDUCE_MAX) acc = isf ? -INFINITY : -2147483648.0;
    if (!any && a->kind == TPU_REDUCE_MIN) acc = isf ? INFINITY : 2147483647.0;
    tpu_store_f64(out->data, out->dtype, off_of(out, o), acc);
  }
}

static int64_t out_dim(int64_t x, int64_t w, int64_t s, int64_t d, int64_t lo, int64_t hi) {
  int64_t padded = x + lo + hi, span = (w - 1) * d + 1;
  return padded >= span ? (padded - span) / s + 1 : 0;
}

/* Pools a (2, 3, H, W) tensor with the given window and compares with the naive loops. */
static int64_t pool2d_case(tpu_dtype_t dt, tpu_reduce_kind_t kind, int64_t H, int64_t W,
                           int64_t k, int64_t s, int64_t dil, int64_t pad) {
  tpu_reduce_window_attrs_t a = {.kind = kind};
  for (int d = 0; d < 4; d++) {
    a.window[d] = d < 2 ? 1 : k;
    a.stride[d] = d < 2 ? 1 : s;
    a.dilation[d] = d < 2 ? 1 : dil;
    a.pad_lo[d] = a.pad_hi[d] = d < 2 ? 0 : pad;
  }
  int64_t xd[4] = {2, 3, H, W};
  int64_t od[4] = {2, 3, out_dim(H, k, s, dil, pad, pad), out_dim(W, k, s, dil, pad, pad)};
  size_t es = tpu_dtype_size(dt);
  void *xdata = malloc(es * 2 * 3 * H * W);
  int64_t m = 2 * 3 * od[2] * od[3];
  void *g = malloc(es * (size_t)(m + 1)), *w = malloc(es * (size_t)(m + 1));
  tpu_buf_t x = mkbuf(xdata, dt, 4, xd), got = mkbuf(g, dt, 4, od), want = mkbuf(w, dt, 4, od);
  fill(&x, kind == TPU_REDUCE_PROD ? FILL_PROD : FILL_SUM);
  int64_t bad = 0;
  if (tpu_kernel_reduce_window(&a, &x, &got, g_pool2) != TPU_OK) {
    fprintf(stderr, "    pool2d: %s\n", tpu_status_message());
    bad = 1;
  } else {
    naive_window(&a, &x, &want);
    char label[80];
    snprintf(label, sizeof label, "pool %s %s k%lld s%lld d%lld p%lld", tpu_dtype_name(dt),
             kKinds[kind], (long long)k, (long long)s, (long long)dil, (long long)pad);
    double rt = rtol_of(dt) * 2;
    bad = mismatches(label, &got, &want, rt, rt);
  }
  free(xdata);
  free(g);
  free(w);
  return bad;
}

TEST(reduce_window_pool2d_vs_naive) {
  int64_t bad = 0;
  tpu_dtype_t dts[] = {TPU_F32, TPU_BF16, TPU_F16, TPU_F64, TPU_I32};
  for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
    for (int kind = TPU_REDUCE_SUM; kind <= TPU_REDUCE_MIN; kind++) {
      bad += pool2d_case(dts[t], kind, 7, 9, 3, 2, 1, 1);   /* max_pool2d(3, 2, padding=1) */
      bad += pool2d_case(dts[t], kind, 8, 8, 2, 2, 1, 0);   /* 2x2 pooling */
      bad += pool2d_case(dts[t], kind, 9, 11, 3, 1, 2, 2);  /* dilation 2 */
      bad += pool2d_case(dts[t], kind, 5, 6, 3, 4, 1, 3);   /* windows wholly in padding */
    }
  }
  CHECK(bad == 0);
}

TEST(reduce_window_hand_values) {
  float x[16], out[4];
  for (int i = 0; i < 16; i++) x[i] = (float)i;
  int64_t xd[4] = {1, 1, 4, 4}, od[4] = {1, 1, 2, 2};
  tpu_buf_t xb = mkbuf(x, TPU_F32, 4, xd), ob = mkbuf(out, TPU_F32, 4, od);
  tpu_reduce_window_attrs_t a = {.kind = TPU_REDUCE_MAX,
                                 .window = {1, 1, 2, 2}, .stride = {1, 1, 2, 2},
                                 .dilation = {1, 1, 1, 1}};
  CHECK_OK(tpu_kernel_reduce_window(&a, &xb, &ob, NULL));
  CHECK(out[0] == 5 && out[1] == 7 && out[2] == 13 && out[3] == 15);
  a.kind = TPU_REDUCE_SUM;
  CHECK_OK(tpu_kernel_reduce_window(&a, &xb, &ob, NULL));
  CHECK(out[0] == 10 && out[1] == 18 && out[2] == 42 && out[3] == 50);
  /* NaN inside a window propagates through MAX */
  x[4] = NAN;
  a.kind = TPU_REDUCE_MAX;
  CHECK_OK(tpu_kernel_reduce_window(&a, &xb, &ob, NULL));
  CHECK(isnan(out[0]) && out[1] == 7);
  /* a window entirely in padding: -inf for MAX, 0 for SUM */
  float one[1] = {3}, o3[3];
  int64_t d1 = 1, d3 = 3;
  tpu_buf_t x1 = mkbuf(one, TPU_F32, 1, &d1), o1 = mkbuf(o3, TPU_F32, 1, &d3);
  tpu_reduce_window_attrs_t p = {.kind = TPU_REDUCE_MAX, .window = {1}, .stride = {1},
                                 .dilation = {1}, .pad_lo = {2}};
  CHECK_OK(tpu_kernel_reduce_window(&p, &x1, &o1, NULL));
  CHECK(isinf(o3[0]) && o3[0] < 0 && isinf(o3[1]) && o3[2] == 3);
  p.kind = TPU_REDUCE_SUM;
  CHECK_OK(tpu_kernel_reduce_window(&p, &x1, &o1, NULL));
  CHECK(o3[0] == 0 && o3[2] == 3);
  /* negative padding crops */
  float five[5] = {1, 2, 3, 4, 5};
  int64_t d5 = 5;
  tpu_buf_t x5 = mkbuf(five, TPU_F32, 1, &d5);
  tpu_reduce_window_attrs_t c = {.kind = TPU_REDUCE_SUM, .window = {1}, .stride = {1},
                                 .dilation = {1}, .pad_lo = {-1}, .pad_hi = {-1}};
  CHECK_OK(tpu_kernel_reduce_window(&c, &x5, &o1, NULL));
  CHECK(o3[0] == 2 && o3[1] == 3 && o3[2] == 4);
  /* errors: a wrong output size, a zero stride */
  c.pad_lo[0] = 0;
  CHECK(tpu_kernel_reduce_window(&c, &x5, &o1, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "reduce_window");
  c.pad_lo[0] = -1;
  c.stride[0] = 0;
  CHECK(tpu_kernel_reduce_window(&c, &x5, &o1, NULL) == TPU_ERR_INVALID_ARGUMENT);
  c.stride[0] = 1;
  c.kind = TPU_REDUCE_ARGMAX;
  CHECK(tpu_kernel_reduce_window(&c, &x5, &o1, NULL) == TPU_ERR_INVALID_ARGUMENT);
}

TEST(reduce_window_strided_input) {
  /* an NHWC tensor viewed as NCHW (channels-last memory) pools like the dense one */
  int64_t N = 2, C = 5, H = 6, W = 7;
  float *nhwc = malloc(sizeof(float) * N * C * H * W), *nchw = malloc(sizeof(float) * N * C * H * W);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < W; w++) {
          float v = (float)urand();
          nhwc[((n * H + h) * W + w) * C + c] = v;
          nchw[((n * C + c) * H + h) * W + w] = v;
        }
  int64_t xd[4] = {N, C, H, W}, od[4] = {N, C, 3, 3};
  tpu_buf_t dense = mkbuf(nchw, TPU_F32, 4, xd), cl = dense;
  cl.data = nhwc;
  cl.strides[0] = H * W * C; cl.strides[1] = 1; cl.strides[2] = W * C; cl.strides[3] = C;
  float a[2 * 5 * 9], b[2 * 5 * 9];
  tpu_buf_t oa = mkbuf(a, TPU_F32, 4, od), ob = mkbuf(b, TPU_F32, 4, od);
  tpu_reduce_window_attrs_t at = {.kind = TPU_REDUCE_MAX, .window = {1, 1, 3, 3},
                                  .stride = {1, 1, 2, 2}, .dilation = {1, 1, 1, 1},
                                  .pad_lo = {0, 0, 1, 1}, .pad_hi = {0, 0, 0, 0}};
  CHECK_OK(tpu_kernel_reduce_window(&at, &dense, &oa, g_pool2));
  CHECK_OK(tpu_kernel_reduce_window(&at, &cl, &ob, g_pool2));
  CHECK(memcmp(a, b, sizeof a) == 0);
  free(nhwc);
  free(nchw);
}

/* ---- scan ------------------------------------------------------------------------------------ */

static void naive_scan(tpu_reduce_kind_t kind, int dim, const tpu_buf_t *x, const tpu_buf_t *out) {
  int64_t n = numel_of(x), len = x->dims[dim], inner = 1;
  for (int d = dim + 1; d < x->rank; d++) inner *= x->dims[d];
  bool isf = tpu_dtype_is_float(x->dtype);
  for (int64_t i = 0; i < n; i++) {
    int64_t pos = (i / inner) % len, base = i - pos * inner;
    double acc = 0;
    int64_t iacc = 0;
    for (int64_t k = 0; k <= pos; k++) {
      int64_t e = base + k * inner;
      double v = tpu_load_f64(x->data, x->dtype, off_of(x, e));
      int64_t iv = tpu_load_i64(x->data, x->dtype, off_of(x, e));
      if (k == 0) {
        acc = v;
        iacc = iv;
        continue;
      }
      switch (kind) {
        case TPU_REDUCE_SUM: acc += v; iacc = (int64_t)((uint64_t)iacc + (uint64_t)iv); break;
        case TPU_REDUCE_PROD: acc *= v; iacc = (int64_t)((uint64_t)iacc * (uint64_t)iv); break;
        case TPU_REDUCE_MAX: if (acc == acc && (v > acc || v != v)) acc = v; iacc = iv > iacc ? iv : iacc; break;
        default: if (acc == acc && (v < acc || v != v)) acc = v; iacc = iv < iacc ? iv : iacc; break;
      }
    }
    if (isf) {
      tpu_store_f64(out->data, out->dtype, off_of(out, i), acc);
    } else {
      tpu_store_i64(out->data, out->dtype, off_of(out, i), iacc);
    }
  }
}

TEST(scan_vs_naive) {
  int64_t d[3] = {4, 5, 33};
  tpu_dtype_t dts[] = {TPU_F32, TPU_BF16, TPU_F16, TPU_F64, TPU_I32, TPU_I64, TPU_BOOL};
  int64_t bad = 0;
  for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
    tpu_dtype_t dt = dts[t];
    tpu_dtype_t odt = dt == TPU_BOOL || dt == TPU_I32 ? TPU_I64 : dt;
    void *xd = malloc(8 * 4 * 5 * 33), *g = malloc(8 * 4 * 5 * 33), *w = malloc(8 * 4 * 5 * 33);
    tpu_buf_t x = mkbuf(xd, dt, 3, d), got = mkbuf(g, odt, 3, d), want = mkbuf(w, odt, 3, d);
    for (int kind = TPU_REDUCE_SUM; kind <= TPU_REDUCE_MIN; kind++) {
      fill(&x, kind == TPU_REDUCE_PROD ? FILL_PROD : FILL_SUM);
      for (int dim = 0; dim < 3; dim++) {
        for (int threads = 0; threads < 2; threads++) {
          if (tpu_kernel_scan(kind, dim, &x, &got, threads ? g_pool2 : NULL) != TPU_OK) {
            fprintf(stderr, "    scan: %s\n", tpu_status_message());
            bad++;
            continue;
          }
          naive_scan(kind, dim, &x, &want);
          char label[64];
          snprintf(label, sizeof label, "scan %s %s dim %d", tpu_dtype_name(dt), kKinds[kind], dim);
          double rt = dt == TPU_F32 ? 1e-6 : rtol_of(dt) * 2;
          bad += mismatches(label, &got, &want, rt, rt);
        }
      }
    }
    free(xd);
    free(g);
    free(w);
  }
  CHECK(bad == 0);
}

TEST(scan_strided_columns_and_hand_values) {
  /* columns mode: cumsum over dim 0 of (300, 260), and a transposed input */
  int64_t d[2] = {300, 260};
  float *x = malloc(sizeof(float) * 300 * 260), *g = malloc(sizeof(float) * 300 * 260),
        *w = malloc(sizeof(float) * 300 * 260);
  tpu_buf_t xb = mkbuf(x, TPU_F32, 2, d), gb = mkbuf(g, TPU_F32, 2, d), wb = mkbuf(w, TPU_F32, 2, d);
  fill(&xb, FILL_SUM);
  CHECK_OK(tpu_kernel_scan(TPU_REDUCE_SUM, 0, &xb, &gb, g_pool2));
  naive_scan(TPU_REDUCE_SUM, 0, &xb, &wb);
  CHECK(mismatches("cumsum dim 0", &gb, &wb, 1e-6, 1e-6) == 0);
  tpu_buf_t xt = xb; /* (260, 300) transposed view, scanned along dim 1 */
  xt.dims[0] = 260; xt.dims[1] = 300; xt.strides[0] = 1; xt.strides[1] = 260;
  int64_t dt2[2] = {260, 300};
  tpu_buf_t gt = mkbuf(g, TPU_F32, 2, dt2), wt = mkbuf(w, TPU_F32, 2, dt2);
  CHECK_OK(tpu_kernel_scan(TPU_REDUCE_MAX, 1, &xt, &gt, NULL));
  naive_scan(TPU_REDUCE_MAX, 1, &xt, &wt);
  CHECK(mismatches("cummax transposed", &gt, &wt, 0, 0) == 0);
  free(x);
  free(g);
  free(w);

  float h[5] = {1, 2, NAN, 0, 5}, o[5];
  int64_t five = 5;
  tpu_buf_t hb = mkbuf(h, TPU_F32, 1, &five), ob = mkbuf(o, TPU_F32, 1, &five);
  CHECK_OK(tpu_kernel_scan(TPU_REDUCE_SUM, 0, &hb, &ob, NULL));
  CHECK(o[0] == 1 && o[1] == 3 && isnan(o[2]) && isnan(o[4]));
  CHECK_OK(tpu_kernel_scan(TPU_REDUCE_MAX, 0, &hb, &ob, NULL));
  CHECK(o[0] == 1 && o[1] == 2 && isnan(o[2]) && isnan(o[3]) && isnan(o[4]));
  CHECK_OK(tpu_kernel_scan(TPU_REDUCE_MIN, 0, &hb, &ob, NULL));
  CHECK(o[0] == 1 && o[1] == 1 && isnan(o[3]));
  h[2] = 3;
  CHECK_OK(tpu_kernel_scan(TPU_REDUCE_PROD, 0, &hb, &ob, NULL));
  CHECK(o[2] == 6 && o[3] == 0 && o[4] == 0);

  /* a long f32 cumsum stays accurate (f64 accumulation) */
  enum { L = 1000000 };
  float *ones = malloc(sizeof(float) * L), *cs = malloc(sizeof(float) * L);
  for (int i = 0; i < L; i++) ones[i] = 0.1f;
  int64_t l = L;
  tpu_buf_t lb = mkbuf(ones, TPU_F32, 1, &l), cb = mkbuf(cs, TPU_F32, 1, &l);
  CHECK_OK(tpu_kernel_scan(TPU_REDUCE_SUM, 0, &lb, &cb, g_pool2));
  CHECK(fabs(cs[L - 1] - 0.1f * (double)L) <= 1e-6 * L * 0.1);
  free(ones);
  free(cs);

  /* errors */
  CHECK(tpu_kernel_scan(TPU_REDUCE_SUM, 1, &hb, &ob, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "scan");
  CHECK(tpu_kernel_scan(TPU_REDUCE_ARGMAX, 0, &hb, &ob, NULL) == TPU_ERR_INVALID_ARGUMENT);
}

int main(void) {
  if (tpu_pool_create(2, tpu_allocator_system(), &g_pool2) != TPU_OK) {
    fprintf(stderr, "cannot create a pool: %s\n", tpu_status_message());
    return 1;
  }
  RUN(reduce_all_kinds_dtypes_dims_vs_ref);
  RUN(reduce_strided_views_vs_ref);
  RUN(reduce_hand_values);
  RUN(reduce_empty);
  RUN(reduce_argument_errors);
  RUN(reduce_long_rows_accuracy_and_determinism);
  RUN(reduce_columns_vs_ref_and_determinism);
  RUN(reduce_window_pool2d_vs_naive);
  RUN(reduce_window_hand_values);
  RUN(reduce_window_strided_input);
  RUN(scan_vs_naive);
  RUN(scan_strided_columns_and_hand_values);
  tpu_pool_destroy(g_pool2);
  return check_report();
}
