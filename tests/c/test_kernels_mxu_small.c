/* test_kernels_mxu_small.c: the GEMM paths that skip the blocked driver's panels, against
 * the blocked path, bit for bit: the small-matrix path on AVX512-BF16
 * (gemm_small_avx512.c) and the direct path on AVX2 (gemm_direct_avx2.c).
 *
 * Each must produce exactly the blocked path's bits (same bf16 rounding, same product
 * chain per element). The small path: batch counts 1..33, odd M, N, K (1, 3, 15, 17, 31,
 * 33 and the limits 64, 32, 128), both layouts of each operand (A k- or M-contiguous, B
 * N- or k-contiguous, as attention's q @ k^T and att^T @ dO read them), DEFAULT and HIGH
 * precision, f32 and bf16 operands, batch offset tables, and f32, bf16 and strided
 * results; values include inf, -0 and subnormals. The direct path: the same over sizes
 * around its 6-row blocks, 8-lane vectors, 16-column and 48-row chunks and 32-row
 * conversion items, HIGHEST too, on one thread and on a pool of two. Each must decline
 * (write nothing) what it does not handle. Every GEMM kernel the CPU has (TORCHTPU_ISA
 * masks them) also runs the same small shapes through tpu_gemm_run_kernel against the
 * blocked path, so a kernel a path wrongly claims would show up too.
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "tpu/threadpool.h"
#include "tpu/kernels.h"
#include "vtpu/kernels/gemm.h"
#include "vtpu/kernels/gemm_kernels.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t next_u64(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static int pick(int n) { return (int)(next_u64() % (uint64_t)n); }

/* A random value: mostly in [-4, 4), some special ones. */
static float value(void) {
  switch (pick(64)) {
    case 0: return INFINITY;
    case 1: return -0.0f;
    case 2: return 0x1p-130f; /* subnormal: flushed by the bf16 conversion */
    case 3: return 3e38f;     /* overflows to inf in the products' sums */
    default: return (float)((double)(next_u64() >> 11) / 9007199254740992.0 * 8.0 - 4.0);
  }
}

static void fill(void *p, tpu_dtype_t dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = value();
    if (dt == TPU_BF16) {
      ((uint16_t *)p)[i] = tpu_f32_to_bf16(v);
    } else if (dt == TPU_F16) {
      ((uint16_t *)p)[i] = tpu_f32_to_f16(v);
    } else {
      ((float *)p)[i] = v;
    }
  }
}

/* Bitwise equal, any NaN equal to any NaN. */
static bool same_bits(const void *x, const void *y, tpu_dtype_t dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (dt == TPU_BF16) {
      uint16_t a = ((const uint16_t *)x)[i], b = ((const uint16_t *)y)[i];
      bool an = (a & 0x7fff) > 0x7f80, bn = (b & 0x7fff) > 0x7f80;
      if (an != bn || (!an && a != b)) return false;
    } else {
      float a = ((const float *)x)[i], b = ((const float *)y)[i];
      if (isnan(a) != isnan(b) || (!isnan(a) && memcmp(&a, &b, 4) != 0)) return false;
    }
  }
  return true;
}

typedef struct gcase {
  int64_t B, M, N, K;
  bool a_mc;  /* A stored M-contiguous (transposed) */
  bool b_kc;  /* B stored k-contiguous (transposed) */
  tpu_dtype_t adt, bdt, cdt;
  tpu_precision_t prec;
  int c_gap;  /* unused elements after each row of C (0: dense) */
  bool c_col2; /* C columns at stride 2 */
  bool table; /* batch axes as offset tables (batches stored in reverse) */
} gcase;

typedef enum via {
  VIA_SMALL,  /* tpu_gemm_small_run, against the AVX512-BF16 (or portable) blocked path */
  VIA_DIRECT, /* tpu_gemm_direct_run, against the AVX2 blocked path */
  VIA_KERNEL, /* tpu_gemm_run_kernel with |kern|, against its blocked path */
} via_t;

/* Runs |c| the way |via| says (on |team|: NULL for this thread alone) and through the
 * blocked path; checks the bits. Returns whether the path took the case (always false
 * for VIA_KERNEL). */
static bool run_case_via(const gcase *c, via_t via, const tpu_gemm_kernel_t *kern,
                         const tpu_gemm_team_t *team) {
  int64_t B = c->B, M = c->M, N = c->N, K = c->K;
  size_t ae = tpu_dtype_size(c->adt), be = tpu_dtype_size(c->bdt), ce = tpu_dtype_size(c->cdt);
  int64_t cstride_col = c->c_col2 ? 2 : 1, cld = N * cstride_col + c->c_gap;
  int64_t cn = B * M * cld;
  void *a = malloc((size_t)(B * M * K) * ae), *b = malloc((size_t)(B * K * N) * be);
  void *c1 = malloc((size_t)cn * ce), *c2 = malloc((size_t)cn * ce);
  int64_t *aoff = malloc((size_t)B * sizeof(int64_t)), *boff = malloc((size_t)B * sizeof(int64_t));
  int64_t *coff = malloc((size_t)B * sizeof(int64_t));
  CHECK(a && b && c1 && c2 && aoff && boff && coff);
  fill(a, c->adt, B * M * K);
  fill(b, c->bdt, B * K * N);
  memset(c1, 0x5a, (size_t)cn * ce); /* the padding must stay untouched by both */
  memset(c2, 0x5a, (size_t)cn * ce);
  for (int64_t i = 0; i < B; i++) {
    aoff[i] = (B - 1 - i) * M * K;
    boff[i] = (B - 1 - i) * K * N;
    coff[i] = (B - 1 - i) * M * cld;
  }
  tpu_gemm_t g;
  memset(&g, 0, sizeof g);
  g.what = "t";
  CHECK_OK(tpu_mxu_plan_make("t", c->adt, c->bdt, c->cdt, c->prec, &g.plan));
  g.a = (tpu_gemm_matrix_t){a, c->adt, {B, M * K, c->table ? aoff : NULL},
                            {M, c->a_mc ? 1 : K, NULL}, {K, c->a_mc ? M : 1, NULL}};
  g.b = (tpu_gemm_matrix_t){b, c->bdt, {B, K * N, c->table ? boff : NULL},
                            {K, c->b_kc ? 1 : N, NULL}, {N, c->b_kc ? K : 1, NULL}};
  g.c = (tpu_gemm_matrix_t){c1, c->cdt, {B, M * cld, c->table ? coff : NULL}, {M, cld, NULL},
                            {N, cstride_col, NULL}};
  bool took = false;
  const tpu_gemm_kernel_t *blocked = kern;
  if (via == VIA_KERNEL) {
    CHECK_OK(tpu_gemm_run_kernel(&g, kern, NULL));
  } else if (via == VIA_SMALL) {
    took = tpu_gemm_small_run(&g, &tpu_gemm_kernel_avx512_bf16, team);
    blocked = g.plan.mode == TPU_MXU_BF16 ? &tpu_gemm_kernel_avx512_bf16
                                          : &tpu_gemm_kernel_portable;
  } else {
    took = tpu_gemm_direct_run(&g, &tpu_gemm_kernel_avx2, team);
    blocked = &tpu_gemm_kernel_avx2;
  }
  g.c.data = c2;
  CHECK_OK(tpu_gemm_run_blocked(&g, blocked, NULL));
  if (took || via == VIA_KERNEL) {
    bool ok = same_bits(c1, c2, c->cdt, cn);
    if (!ok) {
      fprintf(stderr, "  %s B %lld M %lld N %lld K %lld a_mc %d b_kc %d prec %d: bits differ\n",
              via == VIA_KERNEL ? kern->name : via == VIA_SMALL ? "small" : "direct", (long long)B, (long long)M, (long long)N,
              (long long)K, c->a_mc, c->b_kc, (int)c->prec);
    }
    CHECK(ok);
  } else { /* declined: nothing written */
    unsigned char *p = c1;
    bool untouched = true;
    for (int64_t i = 0; i < cn * (int64_t)ce; i++) untouched = untouched && p[i] == 0x5a;
    CHECK(untouched);
  }
  free(a), free(b), free(c1), free(c2), free(aoff), free(boff), free(coff);
  return took;
}

static bool run_case(const gcase *c, const tpu_gemm_kernel_t *kern) {
  return kern ? run_case_via(c, VIA_KERNEL, kern, NULL) : run_case_via(c, VIA_SMALL, NULL, NULL);
}

static bool have_bf16_kernel(void) {
  return tpu_gemm_have_x86_kernels() && tpu_cpu_features()->avx512_bf16;
}

static const int64_t kM[] = {1, 3, 15, 17, 31, 32, 33, 64};
static const int64_t kN[] = {1, 3, 15, 16, 17, 31, 32};
static const int64_t kK[] = {1, 2, 3, 15, 16, 17, 31, 33, 64, 127, 128};

TEST(small_matches_blocked) {
  if (!have_bf16_kernel()) return;
  int taken = 0, cases = 0;
  for (int mi = 0; mi < 8; mi++) {
    for (int ni = 0; ni < 7; ni++) {
      for (int ki = 0; ki < 11; ki++) {
        gcase c = {0};
        c.M = kM[mi];
        c.N = kN[ni];
        c.K = kK[ki];
        c.B = 1 + cases % 33;
        if (c.M * c.N * c.K > 8192) c.B = 1 + cases % 3; /* keep the big ones quick */
        c.a_mc = pick(2);
        c.b_kc = pick(2);
        c.adt = pick(4) ? TPU_F32 : TPU_BF16;
        c.bdt = pick(4) ? TPU_F32 : TPU_BF16;
        c.cdt = pick(5) ? TPU_F32 : TPU_BF16;
        c.prec = pick(4) ? TPU_PRECISION_DEFAULT : TPU_PRECISION_HIGH;
        c.c_gap = pick(3) == 0 ? 5 : 0;
        c.c_col2 = pick(6) == 0;
        c.table = pick(4) == 0;
        int passes = c.prec == TPU_PRECISION_HIGH ? (c.adt == TPU_F32) + (c.bdt == TPU_F32) + 1 : 1;
        bool fits = passes * (c.K + (c.K & 1)) / 2 <= 64;
        bool took = run_case(&c, NULL);
        CHECK(took == fits); /* every case within the limits is the small path's */
        taken += took;
        cases++;
      }
    }
  }
  CHECK(taken > cases / 2);
}

TEST(small_attention_shapes) {
  /* the attention batch (32 heads of 32 x 32, head dim 16) in all four layouts, 1..33
   * batches, DEFAULT f32 */
  if (!have_bf16_kernel()) return;
  static const int64_t shapes[3][3] = {{32, 32, 16}, {32, 16, 32}, {32, 16, 16}};
  for (int64_t B = 1; B <= 33; B++) {
    for (int s = 0; s < 3; s++) {
      for (int l = 0; l < 4; l++) {
        gcase c = {B, shapes[s][0], shapes[s][1], shapes[s][2], l & 1, l >> 1,
                   TPU_F32, TPU_F32, TPU_F32, TPU_PRECISION_DEFAULT, 0, false, false};
        CHECK(run_case(&c, NULL));
      }
    }
  }
}

/* (3, 5) x (5, 4) -> (3, 4) f32 at DEFAULT, A at strides (10, 2): no unit stride. */
static tpu_gemm_t gemm_3x5x4(float *a, float *b, float *out) {
  tpu_gemm_t g;
  memset(&g, 0, sizeof g);
  g.what = "t";
  CHECK_OK(tpu_mxu_plan_make("t", TPU_F32, TPU_F32, TPU_F32, TPU_PRECISION_DEFAULT, &g.plan));
  g.a = (tpu_gemm_matrix_t){a, TPU_F32, {1, 0, NULL}, {3, 10, NULL}, {5, 2, NULL}};
  g.b = (tpu_gemm_matrix_t){b, TPU_F32, {1, 0, NULL}, {5, 4, NULL}, {4, 1, NULL}};
  g.c = (tpu_gemm_matrix_t){out, TPU_F32, {1, 0, NULL}, {3, 4, NULL}, {4, 1, NULL}};
  return g;
}

TEST(small_declines) {
  if (!have_bf16_kernel()) return;
  gcase base = {3, 32, 32, 16, false, false, TPU_F32, TPU_F32, TPU_F32,
                TPU_PRECISION_DEFAULT, 0, false, false};
  gcase c = base;
  c.M = 65; /* too many rows */
  CHECK(!run_case(&c, NULL));
  c = base;
  c.N = 33; /* too many columns */
  CHECK(!run_case(&c, NULL));
  c = base;
  c.K = 129; /* too many k steps */
  CHECK(!run_case(&c, NULL));
  c = base;
  c.K = 50;
  c.prec = TPU_PRECISION_HIGH; /* 3 passes x 25 pairs */
  CHECK(!run_case(&c, NULL));
  c = base;
  c.prec = TPU_PRECISION_HIGHEST; /* exact f32: not bf16 passes */
  CHECK(!run_case(&c, NULL));

  /* no unit stride along either dim of A */
  float a[2 * 3 * 5 * 2] = {0}, b[5 * 4] = {0}, out[3 * 4];
  tpu_gemm_t g = gemm_3x5x4(a, b, out); /* A strided along both dims */
  CHECK(!tpu_gemm_small_run(&g, &tpu_gemm_kernel_avx512_bf16, NULL));
  g.a.cols.stride = 1; /* now k-contiguous */
  CHECK(tpu_gemm_small_run(&g, &tpu_gemm_kernel_avx512_bf16, NULL));
  /* a kernel other than AVX512-BF16 is never the small path's */
  CHECK(!tpu_gemm_small_run(&g, &tpu_gemm_kernel_portable, NULL));
}

TEST(every_kernel_small_shapes) {
  /* every GEMM kernel the CPU has, through the public per-kernel entry point (small path
   * included where it applies), against its blocked path */
  const tpu_cpu_features_t *f = tpu_cpu_features(); /* as masked by TORCHTPU_ISA */
  const tpu_gemm_kernel_t *kerns[4] = {&tpu_gemm_kernel_portable, NULL, NULL, NULL};
  if (tpu_gemm_have_x86_kernels() && f->avx2_fma) kerns[1] = &tpu_gemm_kernel_avx2;
  if (tpu_gemm_have_x86_kernels() && f->avx512f) kerns[2] = &tpu_gemm_kernel_avx512;
  if (have_bf16_kernel()) kerns[3] = &tpu_gemm_kernel_avx512_bf16;
  for (int kk = 0; kk < 4; kk++) {
    if (!kerns[kk]) continue;
    for (int t = 0; t < 40; t++) {
      gcase c = {1 + t % 33, kM[pick(8)], kN[pick(7)], kK[pick(8)], pick(2), pick(2),
                 TPU_F32, pick(3) ? TPU_F32 : TPU_BF16, TPU_F32,
                 pick(3) ? TPU_PRECISION_DEFAULT : TPU_PRECISION_HIGH, 0, false, pick(2)};
      run_case(&c, kerns[kk]);
    }
  }
}

static bool have_avx2_kernel(void) {
  return tpu_gemm_have_x86_kernels() && tpu_cpu_features()->avx2_fma;
}

/* Whether one batch of |c| fits the direct path: 512 KiB of converted operands, 2^22
 * multiply-adds. */
static bool direct_fits(const gcase *c) {
  int passes = 1;
  if (c->prec != TPU_PRECISION_HIGHEST) {
    passes = c->prec == TPU_PRECISION_HIGH ? (c->adt == TPU_F32) + (c->bdt == TPU_F32) + 1 : 1;
  } else if (c->adt == TPU_BF16 && c->bdt == TPU_BF16) {
    passes = 1; /* bf16 x bf16 is one bf16 pass at every precision */
  }
  int64_t Q = passes * c->K, ldb = (c->N + 7) / 8 * 8;
  int64_t a = (c->M * Q + 15) / 16 * 16, b = (Q * ldb + 15) / 16 * 16;
  return (a + b) * 4 <= 512 * 1024 && c->M * c->N * Q <= (1 << 22);
}

static const int64_t kDM[] = {1, 2, 5, 6, 7, 13, 47, 48, 49, 97, 256};
static const int64_t kDN[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100};
static const int64_t kDK[] = {1, 2, 7, 8, 9, 31, 32, 33, 64, 200};

/* A random direct-path case of the given sizes. */
static gcase direct_case(int64_t M, int64_t N, int64_t K, int n) {
  gcase c = {0};
  c.M = M, c.N = N, c.K = K;
  c.B = M * N * K > 20000 ? 1 + n % 2 : 1 + n % 9;
  c.a_mc = pick(2);
  c.b_kc = pick(2);
  c.adt = pick(4) ? TPU_F32 : TPU_BF16;
  c.bdt = pick(4) ? TPU_F32 : TPU_BF16;
  c.cdt = pick(5) ? TPU_F32 : TPU_BF16;
  int p = pick(6);
  c.prec = p < 3 ? TPU_PRECISION_DEFAULT : p < 5 ? TPU_PRECISION_HIGH : TPU_PRECISION_HIGHEST;
  c.c_gap = pick(3) == 0 ? 5 : 0;
  c.c_col2 = pick(6) == 0;
  c.table = pick(4) == 0;
  return c;
}

TEST(direct_matches_blocked) {
  if (!have_avx2_kernel()) return;
  int taken = 0, cases = 0;
  for (int mi = 0; mi < 11; mi++) {
    for (int ni = 0; ni < 12; ni++) {
      for (int ki = 0; ki < 10; ki++) {
        if ((mi + ni + ki) % 2) continue; /* half the grid keeps the test quick */
        gcase c = direct_case(kDM[mi], kDN[ni], kDK[ki], cases);
        bool took = run_case_via(&c, VIA_DIRECT, NULL, NULL);
        CHECK(took == direct_fits(&c));
        taken += took;
        cases++;
      }
    }
  }
  CHECK(taken > cases * 3 / 4);
}

TEST(direct_on_a_pool) {
  /* tasks split by rows and columns over two threads: the same bits */
  if (!have_avx2_kernel()) return;
  tpu_pool_t *pool;
  CHECK_OK(tpu_pool_create(2, tpu_allocator_system(), &pool));
  tpu_gemm_team_t team = {pool, false, tpu_pool_num_threads(pool)};
  static const int64_t shapes[][3] = {{256, 64, 64}, {64, 256, 256}, {32, 32, 16},
                                      {97, 33, 9},   {1, 100, 200},  {256, 17, 31}};
  for (int s = 0; s < 6; s++) {
    for (int t = 0; t < 4; t++) {
      gcase c = direct_case(shapes[s][0], shapes[s][1], shapes[s][2], t);
      c.B = 1 + t * 5;
      CHECK(run_case_via(&c, VIA_DIRECT, NULL, &team) == direct_fits(&c));
    }
  }
  tpu_pool_destroy(pool);
}

TEST(direct_declines) {
  if (!have_avx2_kernel()) return;
  gcase base = {2, 32, 32, 16, false, false, TPU_F32, TPU_F32, TPU_F32,
                TPU_PRECISION_DEFAULT, 0, false, false};
  gcase c = base;
  CHECK(run_case_via(&c, VIA_DIRECT, NULL, NULL));
  c.M = 1024, c.K = 128; /* 512 KiB of A alone */
  CHECK(!run_case_via(&c, VIA_DIRECT, NULL, NULL));
  c = base;
  c.M = 256, c.N = 128, c.K = 129; /* 2^22 + 2^15 multiply-adds */
  CHECK(!run_case_via(&c, VIA_DIRECT, NULL, NULL));
  c.K = 128;
  CHECK(run_case_via(&c, VIA_DIRECT, NULL, NULL));
  c = base;
  c.adt = TPU_F16; /* f16: the blocked path's */
  CHECK(!run_case_via(&c, VIA_DIRECT, NULL, NULL));

  /* no unit stride along either dim of A; then a row offset table */
  float a[2 * 3 * 5 * 2] = {0}, b[5 * 4] = {0}, out[3 * 4];
  int64_t rows[3] = {0, 20, 10};
  tpu_gemm_t g = gemm_3x5x4(a, b, out); /* A strided along both dims */
  CHECK(!tpu_gemm_direct_run(&g, &tpu_gemm_kernel_avx2, NULL));
  g.a.cols.stride = 1; /* now k-contiguous */
  CHECK(tpu_gemm_direct_run(&g, &tpu_gemm_kernel_avx2, NULL));
  g.a.rows.offsets = rows;
  CHECK(!tpu_gemm_direct_run(&g, &tpu_gemm_kernel_avx2, NULL));
  g.a.rows.offsets = NULL;
  /* another kernel is never the direct path's */
  CHECK(!tpu_gemm_direct_run(&g, &tpu_gemm_kernel_portable, NULL));
}

int main(void) {
  RUN(small_matches_blocked);
  RUN(small_attention_shapes);
  RUN(small_declines);
  RUN(direct_matches_blocked);
  RUN(direct_on_a_pool);
  RUN(direct_declines);
  RUN(every_kernel_small_shapes);
  return check_report();
}
