/* test_kernels_reduce_rows.c: short-row f32 reductions (softmax and layer-norm rows) give
 * exactly the row-by-row bits.
 *
 * tpu_kernel_reduce over the last dim of rows of 1..65 (and 127) elements, SUM, PROD, MAX
 * and MIN, odd row counts, rows with gaps, kept dims that do not merge (so that runs of
 * rows end mid-group), strided outputs, on one thread and on two, under every reduce ISA
 * the CPU has (tpu_reduce_isa_force), is compared bit for bit with the ISA's own row
 * kernel called once per row, the path short rows took before they were batched. The
 * data mixes ordinary values with +-0, +-inf and NaN (MAX/MIN of +0 and -0 depend on the
 * fold's operand order; NaN must reach exactly the rows that hold one). Where an ISA has
 * a batched rows kernel, it is also called directly for 1..16 rows.
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "kernel_util.h"
#include "tpu/kernels.h"
#include "tpu/threadpool.h"
#include "vtpu/kernels/reduce_internal.h"

static tpu_pool_t *g_pool2;

static uint64_t g_rng = 0x853c49e6748fea9bull;
static uint64_t next_u64(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

/* |special| in 64: the chance of +-0, +-inf or NaN. PROD data stays near 1 so that the
 * products of 65 values neither overflow nor vanish. */
static float value(tpu_reduce_kind_t kind, int special) {
  if ((int)(next_u64() % 64) < special) {
    switch (next_u64() % 5) {
      case 0: return 0.0f;
      case 1: return -0.0f;
      case 2: return INFINITY;
      case 3: return -INFINITY;
      default: return NAN;
    }
  }
  double u = (double)(next_u64() >> 11) / 9007199254740992.0; /* [0, 1) */
  if (kind == TPU_REDUCE_PROD) return (float)(0.75 + 0.5 * u);
  return (float)(u * 200.0 - 100.0);
}

static bool same_bits(float a, float b) {
  return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

static const tpu_reduce_kind_t kKinds[4] = {TPU_REDUCE_SUM, TPU_REDUCE_PROD, TPU_REDUCE_MAX,
                                            TPU_REDUCE_MIN};

/* x (A, R, n) with row stride ld = n + gap and an extra gap between the A blocks (so A and
 * R do not merge), reduced over n into out (A, R) with element stride os. Returns the
 * number of outputs whose bits differ from isa->row_f32 on the row. */
static int64_t one_case(const tpu_reduce_isa_t *isa, tpu_reduce_kind_t kind, int64_t A,
                        int64_t R, int64_t n, int64_t gap, int64_t os, int special,
                        tpu_pool_t *pool) {
  int64_t ld = n + gap, lda = R * ld + 3;
  float *x = malloc((size_t)(A * lda) * sizeof(float));
  float *out = malloc((size_t)(A * R * os) * sizeof(float));
  CHECK(x && out);
  for (int64_t i = 0; i < A * lda; i++) x[i] = value(kind, special);
  for (int64_t i = 0; i < A * R * os; i++) out[i] = 12345.0f; /* gaps must stay */
  int64_t xd[3] = {A, R, n}, xs[3] = {lda, ld, 1};
  int64_t od[2] = {A, R}, ost[2] = {R * os, os};
  tpu_buf_t xb = kernel_view(x, TPU_F32, 3, xd, xs), ob = kernel_view(out, TPU_F32, 2, od, ost);
  bool dims[3] = {false, false, true};
  CHECK_OK(tpu_kernel_reduce(kind, &xb, dims, &ob, pool));
  int64_t bad = 0;
  for (int64_t a = 0; a < A; a++) {
    for (int64_t r = 0; r < R; r++) {
      float want = isa->row_f32(kind, x + a * lda + r * ld, n);
      float got = out[(a * R + r) * os];
      if (!same_bits(got, want)) {
        if (bad == 0) {
          fprintf(stderr, "  %s kind %d A %lld R %lld n %lld: row (%lld, %lld) %a, want %a\n",
                  isa->name, (int)kind, (long long)A, (long long)R, (long long)n, (long long)a,
                  (long long)r, (double)got, (double)want);
        }
        bad++;
      }
      for (int64_t k = 1; k < os; k++) bad += out[(a * R + r) * os + k] != 12345.0f;
    }
  }
  free(x);
  free(out);
  return bad;
}

static int isas(const tpu_reduce_isa_t *list[3]) {
  const tpu_cpu_features_t *f = tpu_cpu_features(); /* as masked by TORCHTPU_ISA */
  int k = 0;
  list[k++] = tpu_reduce_isa_portable();
  if (f->avx2_fma && tpu_reduce_isa_avx2()) list[k++] = tpu_reduce_isa_avx2();
  if (f->avx512f && tpu_reduce_isa_avx512()) list[k++] = tpu_reduce_isa_avx512();
  return k;
}

TEST(short_rows_match_row_by_row) {
  const tpu_reduce_isa_t *list[3];
  int ni = isas(list);
  static const int64_t kRows[] = {1, 3, 15, 16, 17, 33, 47};
  for (int i = 0; i < ni; i++) {
    tpu_reduce_isa_force(list[i]);
    int64_t bad = 0, cases = 0;
    for (int64_t n = 1; n <= 66; n++) {
      int64_t len = n == 66 ? 127 : n;
      for (int k = 0; k < 4; k++) {
        int64_t R = kRows[cases % 7], A = 1 + cases % 3;
        int64_t gap = cases % 4 == 1 ? 5 : 0, os = cases % 5 == 2 ? 2 : 1;
        int special = (int)(cases % 3) * 3; /* none, some, more */
        tpu_pool_t *pool = cases % 2 ? g_pool2 : NULL;
        bad += one_case(list[i], kKinds[k], A, R, len, gap, os, special, pool);
        cases++;
      }
    }
    /* the attention shapes themselves: (8*4, 32, 32) and (8, 32, 64) */
    for (int k = 0; k < 4; k++) {
      bad += one_case(list[i], kKinds[k], 32, 32, 32, 0, 1, 2, NULL);
      bad += one_case(list[i], kKinds[k], 8, 32, 64, 0, 1, 2, g_pool2);
    }
    if (bad) fprintf(stderr, "  isa %s: %lld mismatches\n", list[i]->name, (long long)bad);
    CHECK(bad == 0);
  }
  tpu_reduce_isa_force(NULL);
}

TEST(signed_zeros_and_nan_rows) {
  /* rows of only +-0 (MAX/MIN pick a sign by operand order), and NaN in exactly one row
   * of a group of 16 at every position */
  const tpu_reduce_isa_t *list[3];
  int ni = isas(list);
  float x[16 * 24];
  for (int i = 0; i < ni; i++) {
    tpu_reduce_isa_force(list[i]);
    for (int k = 0; k < 4; k++) {
      for (int pos = 0; pos < 16; pos++) {
        for (int j = 0; j < 16 * 24; j++) x[j] = ((j * 7 + pos) % 3) ? 0.0f : -0.0f;
        if (k >= 2) x[pos * 24 + (pos % 24)] = NAN;
        float out[16];
        int64_t xd[2] = {16, 24}, xs[2] = {24, 1}, od[1] = {16}, ost[1] = {1};
        tpu_buf_t xb = kernel_view(x, TPU_F32, 2, xd, xs);
        tpu_buf_t ob = kernel_view(out, TPU_F32, 1, od, ost);
        bool dims[2] = {false, true};
        CHECK_OK(tpu_kernel_reduce(kKinds[k], &xb, dims, &ob, NULL));
        for (int r = 0; r < 16; r++) {
          CHECK(same_bits(out[r], list[i]->row_f32(kKinds[k], x + r * 24, 24)));
          if (k >= 2) CHECK((r == pos) == (bool)isnan(out[r]));
        }
      }
    }
  }
  tpu_reduce_isa_force(NULL);
}

TEST(rows_kernel_direct) {
  /* the batched kernel itself, where an ISA has one: 1..16 rows of 1..127 */
  const tpu_reduce_isa_t *list[3];
  int ni = isas(list);
  float x[16 * 130], out[16 * 3];
  int tested = 0;
  for (int i = 0; i < ni; i++) {
    if (!list[i]->rows_f32) continue;
    tested++;
    for (int64_t n = 1; n < 128; n += (n < 40 ? 1 : 11)) {
      for (int nrows = 1; nrows <= 16; nrows++) {
        tpu_reduce_kind_t kind = kKinds[(n + nrows) % 4];
        for (int j = 0; j < 16 * 130; j++) x[j] = value(kind, 4);
        for (int j = 0; j < 16 * 3; j++) out[j] = 7.0f;
        int64_t os = nrows % 3 == 0 ? 3 : 1;
        list[i]->rows_f32(kind, x, 130, nrows, n, out, os);
        for (int r = 0; r < 16; r++) {
          if (r < nrows) {
            CHECK(same_bits(out[r * os], list[i]->row_f32(kind, x + r * 130, n)));
          } else if (r * os < 16 * 3) {
            CHECK(out[r * os] == 7.0f); /* past nrows: untouched */
          }
        }
      }
    }
  }
  /* every SIMD ISA the CPU runs has one */
  CHECK(tested == ni - 1);
}

int main(void) {
  if (tpu_pool_create(2, tpu_allocator_system(), &g_pool2) != TPU_OK) {
    fprintf(stderr, "cannot create a pool\n");
    return 1;
  }
  RUN(short_rows_match_row_by_row);
  RUN(signed_zeros_and_nan_rows);
  RUN(rows_kernel_direct);
  tpu_pool_destroy(g_pool2);
  return check_report();
}
