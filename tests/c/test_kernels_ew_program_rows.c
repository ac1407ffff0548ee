/* test_kernels_ew_program_rows.c: fused elementwise programs (ew_program.h) on short rows,
 * where the kernel packs several rows into one block, against a scalar reference that
 * evaluates the program element by element from each operand's own index.
 *
 * Shapes (R, N) with N in 1, 3, 17, 31, 33, 511, 513 (packed up to 256, row by row above)
 * and R = 37 rows (the last block of rows is partial); operands: x stepping along the rows,
 * s broadcast along each row (R, 1), w one row repeated for every row (1, N), k broadcast
 * everywhere (rank 0), pred a bool (R, 1); inputs f32 or bf16 (and x transposed), outputs
 * dense, with padded rows (not contiguous), transposed, or bf16; in place (out = x); a
 * result that depends on broadcast values only; each vec.h table forced in turn. The
 * program uses only ops whose f32 result is exact (add, sub, mul, div, compare, select,
 * convert, is_finite), so the reference's C arithmetic gives the kernel's bits; EXP is
 * checked packed against the same rows run one at a time.
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "kernel_util.h"
#include "tpu/kernels.h"
#include "vtpu/kernels/ew_program.h"
#include "vtpu/kernels/vec.h"

enum { ROWS = 37, MAXN = 513, CAP = ROWS * (MAXN + 7) * 4 + 64 };

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { return kernel_splitmix64(&g_rng); }

/* Mostly ordinary values, some zeros, infinities and NaN (bf16 inputs hold them rounded;
 * the reference reads the rounded values). */
static float rnd_val(void) {
  uint64_t r = rnd();
  switch (r % 16) {
    case 0: return 0.0f;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return NAN;
    default: return (float)((int64_t)(r >> 8) % 2001 - 1000) / 64.0f;
  }
}

/* A rank-2 (or rank-0) view; dims of size 1 broadcast. */
static tpu_buf_t view2(void *mem, tpu_dtype_t dt, int64_t d0, int64_t d1, int64_t s0,
                       int64_t s1) {
  const int64_t dims[2] = {d0, d1}, strides[2] = {s0, s1};
  return kernel_view(mem, dt, 2, dims, strides);
}

/* Element (r, j) of |b| broadcast to (ROWS, n) as f32 (bool as 0/1). */
static float at(const tpu_buf_t *b, int64_t r, int64_t j) {
  int64_t off = 0;
  if (b->rank == 2) {
    off = (b->dims[0] == 1 ? 0 : r * b->strides[0]) + (b->dims[1] == 1 ? 0 : j * b->strides[1]);
  }
  const char *p = (const char *)b->data + off * (int64_t)tpu_dtype_size(b->dtype);
  uint16_t h;
  switch (b->dtype) {
    case TPU_BF16: memcpy(&h, p, 2); return tpu_bf16_to_f32(h);
    case TPU_BOOL: return *p ? 1.0f : 0.0f;
    default: {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
  }
}

static void put(void *mem, tpu_dtype_t dt, int64_t i, float f) {
  if (dt == TPU_BF16) {
    ((uint16_t *)mem)[i] = tpu_f32_to_bf16(f);
  } else if (dt == TPU_BOOL) {
    ((uint8_t *)mem)[i] = (uint8_t)(f != 0.0f);
  } else {
    ((float *)mem)[i] = f;
  }
}

/* r0 x, r1 s, r2 w, r3 k, r4 pred; r5 = 0.0, r6 = 2.0:
 *   t = (x - s) * w / k;  c = t > 0;  u = pred ? t : x;  v = c ? u : s;
 *   f = is_finite(v);  b = bf16(v + 2);  result = f ? b : s * x */
static const tpu_ew_program_t kProg = {
    .num_inputs = 5, .num_consts = 2, .consts = {0.0f, 2.0f}, .num_instrs = 11,
    .instrs = {{TPU_OP_SUB, 7, 0, 1},
               {TPU_OP_MUL, 7, 7, 2},
               {TPU_OP_DIV, 7, 7, 3},
               {TPU_OP_COMPARE, 8, 7, 5, 0, TPU_CMP_GT},
               {TPU_OP_SELECT, 9, 4, 7, 0},
               {TPU_OP_SELECT, 9, 8, 9, 1},
               {TPU_OP_IS_FINITE, 10, 9},
               {TPU_OP_ADD, 11, 9, 6},
               {TPU_OP_CONVERT, 11, 11, 0, 0, TPU_BF16},
               {TPU_OP_MUL, 12, 1, 0},
               {TPU_OP_SELECT, 12, 10, 11, 12}},
    .result = 12};

static float ref_prog(float x, float s, float w, float k, float pred) {
  float t = (x - s) * w / k;
  float c = t > 0.0f ? 1.0f : 0.0f;
  float u = pred != 0.0f ? t : x;
  float v = c != 0.0f ? u : s;
  float f = isfinite(v) ? 1.0f : 0.0f;
  float b = tpu_bf16_to_f32(tpu_f32_to_bf16(v + 2.0f));
  return f != 0.0f ? b : s * x;
}

/* Mismatches of |out| (ROWS, n) against |want| (row-major floats), NaN equal to NaN. */
static int64_t diffs(const char *what, int64_t n, const tpu_buf_t *out, const float *want) {
  int64_t bad = 0;
  for (int64_t r = 0; r < ROWS; r++) {
    for (int64_t j = 0; j < n; j++) {
      float got = at(out, r, j), w = want[r * n + j];
      float wr = out->dtype == TPU_BF16 ? tpu_bf16_to_f32(tpu_f32_to_bf16(w)) : w;
      bool same = (isnan(got) && isnan(wr)) || memcmp(&got, &wr, 4) == 0;
      if (!same && bad++ == 0) {
        fprintf(stderr, "  %s n=%lld: (%lld, %lld) got %a want %a\n", what, (long long)n,
                (long long)r, (long long)j, (double)got, (double)wr);
      }
    }
  }
  return bad;
}

typedef struct mems {
  char *x, *s, *w, *k, *p, *o, *x2;
  float *want;
} mems_t;

/* out layouts: dense, padded rows, transposed, bf16, in place */
enum { OUT_DENSE, OUT_PADDED, OUT_TRANSPOSED, OUT_BF16, OUT_IN_PLACE, OUT_COUNT };

/* x layouts: row-major, column-major (a transposed view), rows with a gap between them */
enum { X_DENSE, X_TRANSPOSED, X_PADDED };

static void check_layouts(const mems_t *m, int64_t n, tpu_dtype_t in_dt, int x_layout) {
  const bool x_transposed = x_layout == X_TRANSPOSED;
  for (int64_t i = 0; i < ROWS * (n + 5); i++) put(m->x, in_dt, i, rnd_val());
  for (int64_t i = 0; i < ROWS; i++) {
    put(m->s, in_dt, i, rnd_val());
    put(m->p, TPU_BOOL, i, (float)(rnd() % 2));
  }
  for (int64_t i = 0; i < n; i++) put(m->w, in_dt, i, rnd_val());
  put(m->k, in_dt, 0, 0.5f);
  /* x (ROWS, n), row-major in memory or column-major (a transposed view) */
  tpu_buf_t x = x_transposed            ? view2(m->x, in_dt, ROWS, n, 1, ROWS)
                : x_layout == X_PADDED ? view2(m->x, in_dt, ROWS, n, n + 5, 1)
                                       : view2(m->x, in_dt, ROWS, n, n, 1);
  tpu_buf_t s = view2(m->s, in_dt, ROWS, 1, 1, 1), w = view2(m->w, in_dt, 1, n, n, 1);
  tpu_buf_t k = view2(m->k, in_dt, 1, 1, 1, 1), p = view2(m->p, TPU_BOOL, ROWS, 1, 1, 1);
  k.rank = 0;
  for (int64_t r = 0; r < ROWS; r++) {
    for (int64_t j = 0; j < n; j++) {
      m->want[r * n + j] = ref_prog(at(&x, r, j), at(&s, r, j), at(&w, r, j), at(&k, r, j),
                                    at(&p, r, j));
    }
  }
  for (int lay = 0; lay < OUT_COUNT; lay++) {
    if (lay == OUT_IN_PLACE && (in_dt != TPU_F32 || x_layout != X_DENSE)) continue;
    tpu_buf_t o;
    switch (lay) {
      case OUT_PADDED: o = view2(m->o, TPU_F32, ROWS, n, n + 7, 1); break;
      case OUT_TRANSPOSED: o = view2(m->o, TPU_F32, ROWS, n, 1, ROWS); break;
      case OUT_BF16: o = view2(m->o, TPU_BF16, ROWS, n, n, 1); break;
      case OUT_IN_PLACE:
        memcpy(m->x2, m->x, (size_t)(ROWS * n) * 4);
        o = view2(m->x2, TPU_F32, ROWS, n, n, 1);
        break;
      default: o = view2(m->o, TPU_F32, ROWS, n, n, 1); break;
    }
    tpu_buf_t xin = lay == OUT_IN_PLACE ? o : x;
    const tpu_buf_t *ins[5] = {&xin, &s, &w, &k, &p};
    CHECK_OK(tpu_kernel_ew_program(&kProg, ins, &o, NULL));
    char what[96];
    snprintf(what, sizeof what, "%s in, x layout %d, out layout %d",
             in_dt == TPU_BF16 ? "bf16" : "f32", x_layout, lay);
    CHECK(diffs(what, n, &o, m->want) == 0);
  }
}

static const int64_t kLens[] = {1, 3, 17, 31, 33, 511, 513};

static mems_t alloc_mems(void) {
  mems_t m = {malloc(CAP), malloc(CAP), malloc(CAP), malloc(64), malloc(CAP), malloc(CAP),
              malloc(CAP), malloc(CAP)};
  CHECK(m.x && m.s && m.w && m.k && m.p && m.o && m.x2 && m.want);
  return m;
}

static void free_mems(mems_t *m) {
  free(m->x);
  free(m->s);
  free(m->w);
  free(m->k);
  free(m->p);
  free(m->o);
  free(m->x2);
  free(m->want);
}

TEST(packed_rows_vs_scalar_reference) {
  mems_t m = alloc_mems();
  FOR_EACH_ISA(v, {
    (void)v;
    for (size_t i = 0; i < sizeof kLens / sizeof kLens[0]; i++) {
      check_layouts(&m, kLens[i], TPU_F32, X_DENSE);
      check_layouts(&m, kLens[i], TPU_BF16, X_DENSE);
      check_layouts(&m, kLens[i], TPU_F32, X_TRANSPOSED);
      check_layouts(&m, kLens[i], TPU_F32, X_PADDED);
      check_layouts(&m, kLens[i], TPU_BF16, X_PADDED);
    }
  });
  free_mems(&m);
}

/* A result of broadcast values only (one value per row, or one for all) stored to padded
 * and bf16 rows. */
TEST(packed_rows_broadcast_results) {
  static const tpu_ew_program_t row = {
      .num_inputs = 2, .num_consts = 1, .consts = {3.0f}, .num_instrs = 2,
      .instrs = {{TPU_OP_MUL, 3, 1, 2}, {TPU_OP_ADD, 3, 3, 2}}, .result = 3};
  float x[ROWS * 40], s[ROWS], o[ROWS * 47];
  uint16_t ob[ROWS * 40];
  for (int i = 0; i < ROWS * 40; i++) x[i] = (float)i;
  for (int i = 0; i < ROWS; i++) s[i] = (float)i * 0.25f - 3.0f;
  for (int64_t n = 1; n <= 40; n += 13) {
    tpu_buf_t bx = view2(x, TPU_F32, ROWS, n, n, 1), bs = view2(s, TPU_F32, ROWS, 1, 1, 1);
    tpu_buf_t po = view2(o, TPU_F32, ROWS, n, n + 7, 1), bo = view2(ob, TPU_BF16, ROWS, n, n, 1);
    const tpu_buf_t *ins[2] = {&bx, &bs};
    CHECK_OK(tpu_kernel_ew_program(&row, ins, &po, NULL));
    CHECK_OK(tpu_kernel_ew_program(&row, ins, &bo, NULL));
    int64_t bad = 0;
    for (int64_t r = 0; r < ROWS; r++) {
      float want = s[r] * 3.0f + 3.0f;
      for (int64_t j = 0; j < n; j++) {
        bad += o[r * (n + 7) + j] != want;
        bad += ob[r * n + j] != tpu_f32_to_bf16(want);
      }
    }
    CHECK(bad == 0);
    /* one value for every element: s rank 0 */
    tpu_buf_t s0 = bs;
    s0.rank = 0;
    const tpu_buf_t *ins0[2] = {&bx, &s0};
    CHECK_OK(tpu_kernel_ew_program(&row, ins0, &po, NULL));
    bad = 0;
    for (int64_t r = 0; r < ROWS; r++) {
      for (int64_t j = 0; j < n; j++) bad += o[r * (n + 7) + j] != s[0] * 3.0f + 3.0f;
    }
    CHECK(bad == 0);
  }
}

/* exp(x - s) packed equals the same rows run one at a time (rank-1 buffers: no packing). */
TEST(packed_rows_exp_equals_row_by_row) {
  static const tpu_ew_program_t prog = {
      .num_inputs = 2, .num_instrs = 2,
      .instrs = {{TPU_OP_SUB, 2, 0, 1}, {TPU_OP_EXP, 2, 2, 0}}, .result = 2};
  mems_t m = alloc_mems();
  FOR_EACH_ISA(v, {
    (void)v;
    for (size_t i = 0; i < sizeof kLens / sizeof kLens[0]; i++) {
      int64_t n = kLens[i];
      float *x = (float *)(void *)m.x, *s = (float *)(void *)m.s;
      float *o = (float *)(void *)m.o, *want = m.want;
      for (int64_t e = 0; e < ROWS * n; e++) x[e] = (float)((int64_t)(rnd() % 4001) - 2000) / 100.0f;
      for (int64_t r = 0; r < ROWS; r++) s[r] = (float)((int64_t)(rnd() % 2001) - 1000) / 100.0f;
      tpu_buf_t bx = view2(x, TPU_F32, ROWS, n, n, 1), bs = view2(s, TPU_F32, ROWS, 1, 1, 1);
      tpu_buf_t bo = view2(o, TPU_F32, ROWS, n, n, 1);
      const tpu_buf_t *ins[2] = {&bx, &bs};
      CHECK_OK(tpu_kernel_ew_program(&prog, ins, &bo, NULL));
      for (int64_t r = 0; r < ROWS; r++) {
        tpu_buf_t rx = view2(x + r * n, TPU_F32, n, 1, 1, 1), rs = view2(s + r, TPU_F32, 1, 1, 1, 1);
        tpu_buf_t ro = view2(want + r * n, TPU_F32, n, 1, 1, 1);
        rx.rank = rs.rank = ro.rank = 1;
        rs.dims[0] = 1;
        rs.rank = 0;
        const tpu_buf_t *rins[2] = {&rx, &rs};
        CHECK_OK(tpu_kernel_ew_program(&prog, rins, &ro, NULL));
      }
      CHECK(memcmp(o, want, (size_t)(ROWS * n) * 4) == 0);
    }
  });
  free_mems(&m);
}

int main(void) {
  RUN(packed_rows_vs_scalar_reference);
  RUN(packed_rows_broadcast_results);
  RUN(packed_rows_exp_equals_row_by_row);
  return check_report();
}
