/* test_kernels_elementwise.c: the elementwise kernels against their references, against
 * hand-computed values, and the SIMD math against libm.
 *
 * - every unary and binary op x every dtype: fast kernel (3-thread pool) == tpu_ref_*
 *   (bitwise; within a few ulp for the SIMD transcendental functions), and the undefined
 *   combinations fail with a message naming the kernel, the op and the dtype;
 * - strided, transposed, reversed and broadcast operands and outputs;
 * - each ISA table (portable, AVX2, AVX-512 when the CPU has them) forced in turn;
 * - the vec.h math within 4 ulp of libm (double) over a dense sweep of f32 bit patterns;
 * - integer, bool, CONVERT, compare/select/clamp, copy/fill/iota semantics by hand;
 * - fused programs (ew_program.h) equal the unfused chains.
 * main() sets TORCHTPU_ISA=avx2 (unless set) before first use and checks the masking.
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "tpu/kernels.h"
#include "vtpu/kernels/ew_program.h"
#include "vtpu/kernels/vec.h"

static tpu_pool_t *g_pool;

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rnd_unit(void) { return (double)(rnd() >> 11) * 0x1p-53; }

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static tpu_buf_t dense(void *mem, tpu_dtype_t dt, int rank, const int64_t *dims) {
  tpu_shape_t s = {rank, {0}};
  for (int d = 0; d < rank; d++) s.dims[d] = dims[d];
  return tpu_buf_dense(mem, dt, &s);
}

static tpu_buf_t vec1(void *mem, tpu_dtype_t dt, int64_t n) { return dense(mem, dt, 1, &n); }

static float rnd_float(void) {
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 0.5f,
                                  1e-40f, -3e-39f, 3e38f, -2.5f, 100.0f, -100.0f, 88.8f, -90.0f};
  if (rnd() % 10 == 0) return special[rnd() % (sizeof special / sizeof special[0])];
  static const float scales[] = {1e-3f, 0.5f, 2.0f, 10.0f, 100.0f, 1e4f};
  return (float)((rnd_unit() * 2 - 1) * scales[rnd() % 6]);
}

/* Random contents of the right kind for |dt| (shift amounts kept mostly small). */
static void fill_random(void *mem, tpu_dtype_t dt, int64_t n, bool small_ints) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    int64_t small = (int64_t)(r % 21) - 5;
    switch (dt) {
      case TPU_F32: ((float *)mem)[i] = rnd_float(); break;
      case TPU_F64: ((double *)mem)[i] = (double)rnd_float() * (1 + rnd_unit() * 1e-9); break;
      case TPU_F16: ((uint16_t *)mem)[i] = tpu_f32_to_f16(rnd_float()); break;
      case TPU_BF16: ((uint16_t *)mem)[i] = tpu_f32_to_bf16(rnd_float()); break;
      case TPU_I64: ((int64_t *)mem)[i] = small_ints || r % 3 == 0 ? small : (int64_t)rnd(); break;
      case TPU_I32: ((int32_t *)mem)[i] = small_ints || r % 3 == 0 ? (int32_t)small : (int32_t)rnd(); break;
      case TPU_I16: ((int16_t *)mem)[i] = small_ints ? (int16_t)small : (int16_t)rnd(); break;
      case TPU_I8: ((int8_t *)mem)[i] = small_ints ? (int8_t)small : (int8_t)rnd(); break;
      case TPU_U8: ((uint8_t *)mem)[i] = small_ints ? (uint8_t)(r % 12) : (uint8_t)rnd(); break;
      default: ((uint8_t *)mem)[i] = (uint8_t)(r & 1); break;
    }
  }
}

static bool is_nan_elem(const void *p, tpu_dtype_t dt) {
  uint16_t h;
  switch (dt) {
    case TPU_F32: { float f; memcpy(&f, p, 4); return f != f; }
    case TPU_F64: { double d; memcpy(&d, p, 8); return d != d; }
    case TPU_F16: memcpy(&h, p, 2); return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    case TPU_BF16: memcpy(&h, p, 2); return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    default: return false;
  }
}

/* Distance in units in the last place between two float elements (sign-magnitude order). */
static double ulp_dist(const void *a, const void *b, tpu_dtype_t dt) {
  if (dt == TPU_F32 || dt == TPU_F64 || dt == TPU_F16 || dt == TPU_BF16) {
    size_t size = tpu_dtype_size(dt);
    uint64_t x = 0, y = 0;
    memcpy(&x, a, size);
    memcpy(&y, b, size);
    uint64_t sign = 1ull << (8 * size - 1);
    double kx = (x & sign) ? -(double)(x & (sign - 1)) : (double)x;
    double ky = (y & sign) ? -(double)(y & (sign - 1)) : (double)y;
    return fabs(kx - ky);
  }
  return memcmp(a, b, tpu_dtype_size(dt)) ? 1e30 : 0;
}

/* Elements at strided positions that differ beyond |tol| ulp (NaN == NaN); prints 3. */
static int count_diffs(const char *what, const tpu_buf_t *x, const tpu_buf_t *y, double tol) {
  int64_t n = 1, idx[TPU_MAX_RANK] = {0};
  for (int d = 0; d < x->rank; d++) n *= x->dims[d];
  size_t size = tpu_dtype_size(x->dtype);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t ox = 0, oy = 0;
    for (int d = 0; d < x->rank; d++) {
      ox += idx[d] * x->strides[d];
      oy += idx[d] * y->strides[d];
    }
    const char *p = (const char *)x->data + ox * (int64_t)size;
    const char *q = (const char *)y->data + oy * (int64_t)size;
    bool same = (is_nan_elem(p, x->dtype) && is_nan_elem(q, x->dtype)) ||
                (tol == 0 ? memcmp(p, q, size) == 0 : ulp_dist(p, q, x->dtype) <= tol);
    if (!same && bad++ < 3) {
      uint64_t u = 0, v = 0;
      memcpy(&u, p, size);
      memcpy(&v, q, size);
      fprintf(stderr, "    %s: element %lld: 0x%llx vs 0x%llx (%s)\n", what, (long long)i,
              (unsigned long long)u, (unsigned long long)v, tpu_dtype_name(x->dtype));
    }
    for (int d = x->rank - 1; d >= 0; d--) {
      if (++idx[d] < x->dims[d]) break;
      idx[d] = 0;
    }
  }
  return bad;
}

static bool is_vec_math(tpu_op_t op) {
  return op == TPU_OP_EXP || op == TPU_OP_LOG || op == TPU_OP_TANH || op == TPU_OP_LOGISTIC ||
         op == TPU_OP_ERF;
}

/* The op x dtype table as PyTorch defines it (written independently of the kernels). */
static bool unary_defined(tpu_op_t op, tpu_dtype_t dt) {
  bool fl = tpu_dtype_is_float(dt), b = dt == TPU_BOOL;
  switch (op) {
    case TPU_OP_ABS: case TPU_OP_NEG: case TPU_OP_FLOOR: case TPU_OP_CEIL: case TPU_OP_ROUND_EVEN:
      return !b;
    case TPU_OP_SIGN: case TPU_OP_IS_FINITE: return true;
    case TPU_OP_NOT: return !fl;
    default: return fl;
  }
}

static bool binary_defined(tpu_op_t op, tpu_dtype_t dt) {
  bool fl = tpu_dtype_is_float(dt), b = dt == TPU_BOOL;
  switch (op) {
    case TPU_OP_ADD: case TPU_OP_MUL: case TPU_OP_MAX: case TPU_OP_MIN: return true;
    case TPU_OP_SUB: case TPU_OP_DIV: case TPU_OP_REM: case TPU_OP_POW: return !b;
    case TPU_OP_AND: case TPU_OP_OR: case TPU_OP_XOR: return !fl;
    case TPU_OP_SHIFT_LEFT: case TPU_OP_SHIFT_RIGHT: return !fl && !b;
    default: return fl; /* ATAN2 */
  }
}

/* ---- CPU features and buffers ---------------------------------------------------------- */

TEST(cpu_features_masked_by_env) {
  const tpu_cpu_features_t *f = tpu_cpu_features(), *d = tpu_cpu_features_detected();
  CHECK(f != NULL && d != NULL);
  CHECK(!f->avx512f || d->avx512f);
  CHECK(!f->avx2_fma || d->avx2_fma);
  CHECK(!f->avx512_bf16 || f->avx512f);
  const char *isa = getenv("TORCHTPU_ISA");
  if (isa && strcmp(isa, "avx2") == 0) {
    CHECK(!f->avx512f && !f->avx512_bf16);
    CHECK(f->avx2_fma == d->avx2_fma);
    CHECK(tpu_vec_ops()->isa == (d->avx2_fma ? TPU_ISA_AVX2 : TPU_ISA_PORTABLE));
  }
  if (isa && strcmp(isa, "portable") == 0) {
    CHECK(!f->avx2_fma && !f->avx512f);
    CHECK(tpu_vec_ops()->isa == TPU_ISA_PORTABLE);
  }
  CHECK(tpu_vec_ops_for(TPU_ISA_PORTABLE) != NULL);
  CHECK((tpu_vec_ops_for(TPU_ISA_AVX512) != NULL) == d->avx512f);
  printf("  cpu: avx2_fma=%d avx512=%d avx512_bf16=%d; kernels use %s\n", d->avx2_fma,
         d->avx512f, d->avx512_bf16, tpu_vec_ops()->name);
}

TEST(buf_dense_and_is_dense) {
  float mem[24];
  int64_t dims[3] = {2, 3, 4};
  tpu_buf_t b = dense(mem, TPU_F32, 3, dims);
  CHECK(b.rank == 3 && b.strides[0] == 12 && b.strides[1] == 4 && b.strides[2] == 1);
  CHECK(b.data == mem && b.dtype == TPU_F32);
  CHECK(tpu_buf_is_dense(&b));
  tpu_buf_t t = b; /* transposed view */
  t.dims[1] = 4; t.dims[2] = 3; t.strides[1] = 1; t.strides[2] = 4;
  CHECK(!tpu_buf_is_dense(&t));
  tpu_buf_t one = b; /* size-1 dims may have any stride */
  one.dims[0] = 1; one.strides[0] = 999;
  CHECK(tpu_buf_is_dense(&one));
  tpu_buf_t empty = b;
  empty.dims[1] = 0; empty.strides[2] = 7;
  CHECK(tpu_buf_is_dense(&empty));
  tpu_buf_t scalar = dense(mem, TPU_F32, 0, NULL);
  CHECK(scalar.rank == 0 && tpu_buf_is_dense(&scalar));
  tpu_buf_t bc = b;
  bc.strides[1] = 0;
  CHECK(!tpu_buf_is_dense(&bc));
}

/* ---- the SIMD math against libm ----------------------------------------------------------- */

static double libm_ref(tpu_op_t op, double x) {
  switch (op) {
    case TPU_OP_EXP: return exp(x);
    case TPU_OP_LOG: return log(x);
    case TPU_OP_TANH: return tanh(x);
    case TPU_OP_LOGISTIC: return 1.0 / (1.0 + exp(-x));
    case TPU_OP_ERF: return erf(x);
    case TPU_OP_RSQRT: return 1.0 / sqrt(x);
    default: return sqrt(x);
  }
}

/* |y - t| in ulps of the f32 result t should round to (subnormal ulp below 2^-126). */
static double f32_ulp_err(float y, double t) {
  if (isnan(t)) return isnan(y) ? 0 : 1e9;
  float tf = (float)t;
  if (isinf(tf)) return y == tf ? 0 : 1e9;
  if (isnan(y) || isinf(y)) return 1e9;
  int e;
  frexp(t, &e);
  double ulp = ldexp(1.0, e - 24);
  if (ulp < 0x1p-149) ulp = 0x1p-149;
  return fabs((double)y - t) / ulp;
}

TEST(vec_math_within_4_ulp_of_libm) {
  static const tpu_op_t ops[] = {TPU_OP_EXP, TPU_OP_LOG, TPU_OP_TANH, TPU_OP_LOGISTIC,
                                 TPU_OP_ERF, TPU_OP_SQRT, TPU_OP_RSQRT};
  static const double limit[] = {4, 4, 4, 4, 4, 0.5, 2};
  static const float edges[] = {
      0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, 88.72283f, 88.72284f, 89.0f,
      -87.33654f, -87.33655f, -103.2789f, -103.97208f, -103.97209f, -104.0f, -150.0f, 1e-45f,
      -1e-45f, 1.1754942e-38f, 1.1754944e-38f, 3.4028235e38f, -3.4028235e38f, 0.70710677f,
      0.7071068f, 1.4142135f, 0.99999994f, 1.0000001f, 0.9999999f, 3.92f, 3.9192059f, 4.0f,
      9.010913f, 9.1f, 0.625f, 2.0f, -2.0f, 1e-20f, -1e-20f, 20.0f, -20.0f, 0x1p-126f,
      0x1.fffffep-127f};
  enum { N = 4096 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
      double worst = 0;
      float worst_x = 0;
      long long tested = 0;
      /* every 4093rd bit pattern (about 1M values, all exponents, both signs), then edges */
      uint64_t u = 0;
      bool edges_done = false;
      while (!edges_done) {
        int n = 0;
        if (u < 0x100000000ull) {
          for (; n < N && u < 0x100000000ull; n++, u += 4093) x[n] = u2f((uint32_t)u);
        } else {
          for (; n < (int)(sizeof edges / sizeof edges[0]); n++) x[n] = edges[n];
          edges_done = true;
        }
        v->unary_f32(ops[k], x, y, n);
        tested += n;
        for (int i = 0; i < n; i++) {
          double e = f32_ulp_err(y[i], libm_ref(ops[k], x[i]));
          if (e > worst) {
            worst = e;
            worst_x = x[i];
          }
        }
      }
      if (worst > limit[k]) {
        fprintf(stderr, "  %s %s: %.2f ulp at %a\n", v->name, tpu_op_name(ops[k]), worst,
                (double)worst_x);
      }
      CHECK(worst <= limit[k]);
      if (isa == TPU_ISA_COUNT - 1 || !tpu_vec_ops_for((tpu_isa_t)(isa + 1))) {
        if (k < 5) {
          printf("  %s %-8s max %.2f ulp over %lld values\n", v->name, tpu_op_name(ops[k]),
                 worst, tested);
        }
      }
    }
  }
  free(x);
  free(y);
}

TEST(vec_neg_abs_bitwise) {
  float x[37], y[37];
  for (int i = 0; i < 37; i++) x[i] = rnd_float();
  x[0] = -0.0f;
  x[1] = NAN;
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    v->unary_f32(TPU_OP_NEG, x, y, 37);
    for (int i = 0; i < 37; i++) CHECK(f2u(y[i]) == (f2u(x[i]) ^ 0x80000000u));
    v->unary_f32(TPU_OP_ABS, x, y, 37);
    for (int i = 0; i < 37; i++) CHECK(f2u(y[i]) == (f2u(x[i]) & 0x7fffffffu));
  }
}

TEST(vec_binary_exact_with_broadcast_and_tails) {
  static const tpu_op_t ops[] = {TPU_OP_ADD, TPU_OP_SUB, TPU_OP_MUL, TPU_OP_DIV, TPU_OP_MAX, TPU_OP_MIN};
  float a[70], b[70], out[70];
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    for (int n = 0; n <= 70; n += (n < 40 ? 1 : 15)) {
      for (int i = 0; i < 70; i++) { a[i] = rnd_float(); b[i] = rnd_float(); }
      for (size_t k = 0; k < 6; k++) {
        for (int sa = 0; sa < 2; sa++) {
          for (int sb = 0; sb < 2; sb++) {
            v->binary_f32(ops[k], a, sa, b, sb, out, n);
            int bad = 0;
            for (int i = 0; i < n; i++) {
              float x = a[i * sa], yb = b[i * sb], e;
              switch (ops[k]) {
                case TPU_OP_ADD: e = x + yb; break;
                case TPU_OP_SUB: e = x - yb; break;
                case TPU_OP_MUL: e = x * yb; break;
                case TPU_OP_DIV: e = x / yb; break;
                case TPU_OP_MAX: e = (x != x || yb != yb) ? NAN : x == yb ? u2f(f2u(x) & f2u(yb)) : (x > yb ? x : yb); break;
                default: e = (x != x || yb != yb) ? NAN : x == yb ? u2f(f2u(x) | f2u(yb)) : (x < yb ? x : yb); break;
              }
              bad += !((e != e && out[i] != out[i]) || f2u(e) == f2u(out[i]));
            }
            if (bad) fprintf(stderr, "  %s %s n=%d sa=%d sb=%d: %d wrong\n", v->name, tpu_op_name(ops[k]), n, sa, sb, bad);
            CHECK(bad == 0);
          }
        }
      }
    }
    float z[2] = {-0.0f, 0.0f}, r[2];
    v->binary_f32(TPU_OP_MAX, z, 1, z + 1, 0, r, 1);
    CHECK(f2u(r[0]) == 0); /* max(-0, +0) = +0 */
    v->binary_f32(TPU_OP_MIN, z + 1, 1, z, 0, r, 1);
    CHECK(f2u(r[0]) == 0x80000000u); /* min(+0, -0) = -0 */
  }
}

TEST(vec_bf16_conversions_match_dtype_h) {
  enum { N = 4099 };
  float *x = malloc(N * sizeof *x), *back = malloc(N * sizeof *back);
  uint16_t *h = malloc(N * sizeof *h);
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    int bad = 0;
    for (uint64_t base = 0; base < 0x100000000ull; base += (uint64_t)N * 997) {
      for (int i = 0; i < N; i++) x[i] = u2f((uint32_t)(base + (uint64_t)i * 997));
      x[0] = u2f(0x3f808000u); /* ties and near-ties */
      x[1] = u2f(0x3f818000u);
      x[2] = u2f(0x7fc00001u);
      x[3] = u2f(0xff800001u);
      v->f32_to_bf16(x, h, N);
      for (int i = 0; i < N; i++) bad += h[i] != tpu_f32_to_bf16(x[i]);
    }
    CHECK(bad == 0);
    uint16_t all[1024];
    for (uint32_t base = 0; base < 65536; base += 1024) {
      for (int i = 0; i < 1024; i++) all[i] = (uint16_t)(base + (uint32_t)i);
      v->bf16_to_f32(all, back, 1024);
      for (int i = 0; i < 1024; i++) bad += f2u(back[i]) != (uint32_t)all[i] << 16;
    }
    CHECK(bad == 0);
  }
  free(x);
  free(back);
  free(h);
}

/* A predicate read into a fused program (tpu_ew_program_load_row, contiguous bool bytes:
 * a select of the bits of 1.0f and 0.0f): any non-zero byte is 1.0, over whole vectors
 * and tails, and nothing past n is written. */
TEST(ew_program_reads_a_predicate_as_one_for_any_nonzero_byte) {
  enum { M = 53 };
  uint8_t b[M];
  float y[M + 1];
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    int bad = 0;
    for (int n = 0; n <= M; n++) {
      for (int i = 0; i < M; i++) b[i] = (uint8_t)((i * 37 + n) % 5 == 0 ? 0 : (i * 53) % 256);
      y[n] = -7.0f;
      tpu_ew_program_load_row(v, (const char *)b, 1, TPU_BOOL, y, n);
      for (int i = 0; i < n; i++) bad += y[i] != (b[i] ? 1.0f : 0.0f);
      bad += y[n] != -7.0f;
    }
    CHECK(bad == 0);
  }
}

/* The bf16 loops equal widen -> f32 loop -> round to nearest even, bit for bit. */
TEST(vec_bf16_loops_match_f32_loops) {
  static const tpu_op_t un[] = {TPU_OP_EXP, TPU_OP_LOG, TPU_OP_TANH, TPU_OP_LOGISTIC, TPU_OP_ERF,
                                TPU_OP_SQRT, TPU_OP_RSQRT, TPU_OP_NEG, TPU_OP_ABS};
  static const tpu_op_t bin[] = {TPU_OP_ADD, TPU_OP_SUB, TPU_OP_MUL, TPU_OP_DIV, TPU_OP_MAX, TPU_OP_MIN};
  enum { M = 75 };
  uint16_t a[M], b[M], o[M], want[M];
  float fa[M], fb[M], fo[M];
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    int bad = 0;
    for (int n = 0; n <= M; n += (n < 40 ? 1 : 7)) {
      for (int i = 0; i < M; i++) {
        a[i] = tpu_f32_to_bf16(rnd_float());
        b[i] = tpu_f32_to_bf16(rnd_float());
      }
      v->bf16_to_f32(a, fa, M);
      v->bf16_to_f32(b, fb, M);
      for (size_t k = 0; k < sizeof un / sizeof un[0]; k++) {
        v->unary_bf16(un[k], a, o, n);
        v->unary_f32(un[k], fa, fo, n);
        v->f32_to_bf16(fo, want, n);
        bad += n && memcmp(o, want, (size_t)n * 2) != 0;
      }
      for (size_t k = 0; k < sizeof bin / sizeof bin[0]; k++) {
        for (int sa = 0; sa < 2; sa++) {
          for (int sb = 0; sb < 2; sb++) {
            v->binary_bf16(bin[k], a, sa, b, sb, o, n);
            v->binary_f32(bin[k], fa, sa, fb, sb, fo, n);
            v->f32_to_bf16(fo, want, n);
            bad += n && memcmp(o, want, (size_t)n * 2) != 0;
          }
        }
      }
    }
    if (bad) fprintf(stderr, "  %s: %d bf16 loops differ\n", v->name, bad);
    CHECK(bad == 0);
  }
}

/* Streaming (non-temporal) entries give the regular entries' results at any alignment. */
TEST(vec_stream_entries_match_regular) {
  enum { M = 300 };
  float fa[M], fb[M], f1[M + 16], f2[M + 16];
  uint16_t ha[M], hb[M], h1[M + 16], h2[M + 16];
  for (int i = 0; i < M; i++) {
    fa[i] = rnd_float();
    fb[i] = rnd_float();
    ha[i] = tpu_f32_to_bf16(rnd_float());
    hb[i] = tpu_f32_to_bf16(rnd_float());
  }
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    int bad = 0;
    for (int off = 0; off < 16; off += 3) {
      for (int n = 0; n < M; n += 37) {
        memset(f1, 0, sizeof f1);
        memset(f2, 0, sizeof f2);
        memset(h1, 0, sizeof h1);
        memset(h2, 0, sizeof h2);
        v->unary_f32(TPU_OP_ERF, fa, f1 + off, n);
        v->unary_f32_stream(TPU_OP_ERF, fa, f2 + off, n);
        bad += memcmp(f1, f2, sizeof f1) != 0;
        v->binary_f32(TPU_OP_SUB, fa, 1, fb, off & 1, f1 + off, n);
        v->binary_f32_stream(TPU_OP_SUB, fa, 1, fb, off & 1, f2 + off, n);
        bad += memcmp(f1, f2, sizeof f1) != 0;
        v->unary_bf16(TPU_OP_EXP, ha, h1 + off, n);
        v->unary_bf16_stream(TPU_OP_EXP, ha, h2 + off, n);
        bad += memcmp(h1, h2, sizeof h1) != 0;
        v->binary_bf16(TPU_OP_MAX, ha, off & 1, hb, 1, h1 + off, n);
        v->binary_bf16_stream(TPU_OP_MAX, ha, off & 1, hb, 1, h2 + off, n);
        bad += memcmp(h1, h2, sizeof h1) != 0;
        v->f32_to_bf16(fa, h1 + off, n);
        v->f32_to_bf16_stream(fa, h2 + off, n);
        bad += memcmp(h1, h2, sizeof h1) != 0;
        v->bf16_to_f32(ha, f1 + off, n);
        v->bf16_to_f32_stream(ha, f2 + off, n);
        v->stream_fence();
        bad += memcmp(f1, f2, sizeof f1) != 0;
      }
    }
    if (bad) fprintf(stderr, "  %s: %d streaming results differ\n", v->name, bad);
    CHECK(bad == 0);
  }
}

/* An output past the streaming threshold (32 MiB) through the kernels. */
TEST(large_outputs_stream) {
  const int64_t n = (33 << 20) / 4 + 7;
  float *a = malloc((size_t)n * 4), *o = malloc((size_t)n * 4);
  uint16_t *h = malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; i++) a[i] = (float)(i % 1000) * 0.25f - 100.0f;
  tpu_buf_t ba = vec1(a, TPU_F32, n), bo = vec1(o, TPU_F32, n), bh = vec1(h, TPU_BF16, n);
  CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, &ba, &ba, &bo, g_pool));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += o[i] != a[i] + a[i];
  CHECK_OK(tpu_kernel_unary(TPU_OP_NEG, &ba, &bo, g_pool));
  for (int64_t i = 0; i < n; i++) bad += o[i] != -a[i];
  CHECK_OK(tpu_kernel_ew_program(&(tpu_ew_program_t){.num_inputs = 1, .num_instrs = 1,
                                                     .instrs = {{TPU_OP_ABS, 1, 0, 0}},
                                                     .result = 1},
                                 (const tpu_buf_t *[]){&ba}, &bo, g_pool));
  for (int64_t i = 0; i < n; i++) bad += o[i] != fabsf(a[i]);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &ba, &bh, g_pool));
  for (int64_t i = 0; i < n; i++) bad += h[i] != tpu_f32_to_bf16(a[i]);
  CHECK(bad == 0);
  free(a);
  free(o);
  free(h);
}

/* ---- every op x dtype against the reference --------------------------------------------- */

enum { NOPS = 1037 };

static void check_unary_vs_ref(tpu_op_t op, tpu_dtype_t dt, const char *isa) {
  size_t size = tpu_dtype_size(dt);
  tpu_dtype_t odt = op == TPU_OP_IS_FINITE ? TPU_BOOL : dt;
  void *x = malloc(NOPS * size), *fast = calloc(NOPS, 8), *ref = calloc(NOPS, 8);
  fill_random(x, dt, NOPS, false);
  tpu_buf_t bx = vec1(x, dt, NOPS), bf = vec1(fast, odt, NOPS), br = vec1(ref, odt, NOPS);
  tpu_status_t st = tpu_kernel_unary(op, &bx, &bf, g_pool);
  if (!unary_defined(op, dt)) {
    CHECK(st == TPU_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(tpu_status_message(), "kernel_unary");
    CHECK_CONTAINS(tpu_status_message(), tpu_op_name(op));
    CHECK_CONTAINS(tpu_status_message(), tpu_dtype_name(dt));
    CHECK(tpu_ref_unary(op, &bx, &br) == TPU_ERR_INVALID_ARGUMENT);
  } else {
    CHECK_OK(st);
    CHECK_OK(tpu_ref_unary(op, &bx, &br));
    double tol = is_vec_math(op) ? (dt == TPU_F32 ? 5 : dt == TPU_F64 ? 0 : 1) : 0;
    char what[96];
    snprintf(what, sizeof what, "%s %s %s", isa, tpu_op_name(op), tpu_dtype_name(dt));
    int bad = count_diffs(what, &bf, &br, tol);
    CHECK(bad == 0);
  }
  free(x);
  free(fast);
  free(ref);
}

static void check_binary_vs_ref(tpu_op_t op, tpu_dtype_t dt, const char *isa) {
  size_t size = tpu_dtype_size(dt);
  bool shift = op == TPU_OP_SHIFT_LEFT || op == TPU_OP_SHIFT_RIGHT || op == TPU_OP_POW;
  void *a = malloc(NOPS * size), *b = malloc(NOPS * size);
  void *fast = calloc(NOPS, size), *ref = calloc(NOPS, size);
  fill_random(a, dt, NOPS, false);
  fill_random(b, dt, NOPS, shift);
  tpu_buf_t ba = vec1(a, dt, NOPS), bb = vec1(b, dt, NOPS);
  tpu_buf_t bf = vec1(fast, dt, NOPS), br = vec1(ref, dt, NOPS);
  tpu_status_t st = tpu_kernel_binary(op, &ba, &bb, &bf, g_pool);
  if (!binary_defined(op, dt)) {
    CHECK(st == TPU_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(tpu_status_message(), "kernel_binary");
    CHECK_CONTAINS(tpu_status_message(), tpu_op_name(op));
    CHECK_CONTAINS(tpu_status_message(), tpu_dtype_name(dt));
    CHECK(tpu_ref_binary(op, &ba, &bb, &br) == TPU_ERR_INVALID_ARGUMENT);
  } else {
    CHECK_OK(st);
    CHECK_OK(tpu_ref_binary(op, &ba, &bb, &br));
    char what[96];
    snprintf(what, sizeof what, "%s %s %s", isa, tpu_op_name(op), tpu_dtype_name(dt));
    CHECK(count_diffs(what, &bf, &br, 0) == 0);
    /* b as a broadcast scalar (stride 0) and as a size-1 dim */
    tpu_buf_t bs = bb;
    bs.strides[0] = 0;
    CHECK_OK(tpu_kernel_binary(op, &ba, &bs, &bf, g_pool));
    CHECK_OK(tpu_ref_binary(op, &ba, &bs, &br));
    CHECK(count_diffs(what, &bf, &br, 0) == 0);
    tpu_buf_t b1 = bb;
    b1.dims[0] = 1;
    CHECK_OK(tpu_kernel_binary(op, &b1, &ba, &bf, g_pool));
    CHECK_OK(tpu_ref_binary(op, &b1, &ba, &br));
    CHECK(count_diffs(what, &bf, &br, 0) == 0);
  }
  free(a);
  free(b);
  free(fast);
  free(ref);
}

TEST(unary_every_op_and_dtype_vs_ref) {
  for (int op = 0; op < TPU_OP_COUNT; op++) {
    if (tpu_op_family((tpu_op_t)op) != TPU_FAMILY_UNARY || op == TPU_OP_CONVERT ||
        op == TPU_OP_BITCAST_CONVERT) {
      continue;
    }
    for (int dt = 0; dt < TPU_DTYPE_COUNT; dt++) check_unary_vs_ref((tpu_op_t)op, (tpu_dtype_t)dt, "auto");
  }
}

TEST(binary_every_op_and_dtype_vs_ref) {
  for (int op = 0; op < TPU_OP_COUNT; op++) {
    if (tpu_op_family((tpu_op_t)op) != TPU_FAMILY_BINARY || tpu_op_arity((tpu_op_t)op) != 2) continue;
    for (int dt = 0; dt < TPU_DTYPE_COUNT; dt++) check_binary_vs_ref((tpu_op_t)op, (tpu_dtype_t)dt, "auto");
  }
}

TEST(convert_every_pair_vs_ref) {
  for (int from = 0; from < TPU_DTYPE_COUNT; from++) {
    for (int to = 0; to < TPU_DTYPE_COUNT; to++) {
      void *x = malloc(NOPS * 8), *fast = calloc(NOPS, 8), *ref = calloc(NOPS, 8);
      fill_random(x, (tpu_dtype_t)from, NOPS, false);
      tpu_buf_t bx = vec1(x, (tpu_dtype_t)from, NOPS);
      tpu_buf_t bf = vec1(fast, (tpu_dtype_t)to, NOPS), br = vec1(ref, (tpu_dtype_t)to, NOPS);
      CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bx, &bf, g_pool));
      CHECK_OK(tpu_ref_unary(TPU_OP_CONVERT, &bx, &br));
      char what[64];
      snprintf(what, sizeof what, "convert %s->%s", tpu_dtype_name((tpu_dtype_t)from), tpu_dtype_name((tpu_dtype_t)to));
      CHECK(count_diffs(what, &bf, &br, 0) == 0);
      bool same_size = tpu_dtype_size((tpu_dtype_t)from) == tpu_dtype_size((tpu_dtype_t)to);
      bool bool_ok = (from == TPU_BOOL) == (to == TPU_BOOL);
      tpu_status_t st = tpu_kernel_unary(TPU_OP_BITCAST_CONVERT, &bx, &bf, g_pool);
      if (same_size && bool_ok) {
        CHECK_OK(st);
        CHECK(memcmp(fast, x, NOPS * tpu_dtype_size((tpu_dtype_t)to)) == 0);
      } else {
        CHECK(st == TPU_ERR_INVALID_ARGUMENT);
        CHECK_CONTAINS(tpu_status_message(), "BITCAST_CONVERT");
      }
      free(x);
      free(fast);
      free(ref);
    }
  }
}

/* Every ISA table forced in turn: the SIMD paths (f32, bf16, scalar operands, tails). */
TEST(each_isa_vs_ref) {
  static const tpu_op_t un[] = {TPU_OP_EXP, TPU_OP_LOG, TPU_OP_TANH, TPU_OP_LOGISTIC, TPU_OP_ERF,
                                TPU_OP_SQRT, TPU_OP_RSQRT, TPU_OP_NEG, TPU_OP_ABS};
  static const tpu_op_t bin[] = {TPU_OP_ADD, TPU_OP_SUB, TPU_OP_MUL, TPU_OP_DIV, TPU_OP_MAX, TPU_OP_MIN};
  static const tpu_dtype_t dts[] = {TPU_F32, TPU_BF16, TPU_F16};
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    tpu_vec_ops_force(v);
    CHECK(tpu_vec_ops() == v);
    for (size_t d = 0; d < 3; d++) {
      for (size_t k = 0; k < sizeof un / sizeof un[0]; k++) check_unary_vs_ref(un[k], dts[d], v->name);
      for (size_t k = 0; k < sizeof bin / sizeof bin[0]; k++) check_binary_vs_ref(bin[k], dts[d], v->name);
    }
    for (int from = 0; from < 2; from++) { /* f32 <-> bf16 */
      tpu_dtype_t a = from ? TPU_BF16 : TPU_F32, b = from ? TPU_F32 : TPU_BF16;
      void *x = malloc(NOPS * 4), *f = calloc(NOPS, 4), *r = calloc(NOPS, 4);
      fill_random(x, a, NOPS, false);
      tpu_buf_t bx = vec1(x, a, NOPS), bf = vec1(f, b, NOPS), br = vec1(r, b, NOPS);
      CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bx, &bf, g_pool));
      CHECK_OK(tpu_ref_unary(TPU_OP_CONVERT, &bx, &br));
      CHECK(count_diffs("convert", &bf, &br, 0) == 0);
      free(x);
      free(f);
      free(r);
    }
  }
  tpu_vec_ops_force(NULL);
}

/* ---- layouts ------------------------------------------------------------------------------------ */

/* A view of logical |dims| over |mem|: dims laid out in the order |perm| (outermost first),
 * innermost stride |gap|, dims in |flip| reversed, dims in |bcast| with stride 0. */
static tpu_buf_t make_view(void *mem, tpu_dtype_t dt, int rank, const int64_t *dims,
                           const int *perm, unsigned flip, unsigned bcast, int64_t gap) {
  tpu_buf_t b;
  memset(&b, 0, sizeof b);
  b.dtype = dt;
  b.rank = rank;
  int64_t stride = gap, off = 0;
  for (int j = rank - 1; j >= 0; j--) {
    int d = perm[j];
    b.dims[d] = dims[d];
    if (bcast >> d & 1) {
      b.strides[d] = 0;
      continue;
    }
    b.strides[d] = (flip >> d & 1) ? -stride : stride;
    if (flip >> d & 1) off += stride * (dims[d] - 1);
    stride *= dims[d];
  }
  b.data = (char *)mem + off * (int64_t)tpu_dtype_size(dt);
  return b;
}

TEST(strided_transposed_reversed_broadcast_layouts) {
  static const int64_t dims[3] = {5, 7, 9};
  static const int perms[4][3] = {{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {0, 2, 1}};
  static const tpu_dtype_t dts[] = {TPU_F32, TPU_BF16, TPU_I32, TPU_F64, TPU_U8};
  size_t cap = 5 * 7 * 9 * 3 * 8;
  char *ma = malloc(cap), *mb = malloc(cap), *mf = malloc(cap), *mr = malloc(cap);
  for (int c = 0; c < 48; c++) {
    tpu_dtype_t dt = dts[c % 5];
    const int *pa = perms[c % 4], *pb = perms[(c / 4) % 4], *po = perms[(c / 3) % 4];
    unsigned fa = (unsigned)(c % 8), fo = (unsigned)((c / 8) % 8), bc = (unsigned)(c % 3 == 0 ? 2 : c % 5 == 0 ? 5 : 0);
    int64_t gap_a = 1 + c % 3, gap_o = 1 + (c / 2) % 2;
    fill_random(ma, dt, (int64_t)(cap / 8), false);
    fill_random(mb, dt, (int64_t)(cap / 8), false);
    memset(mf, 0, cap);
    memset(mr, 0, cap);
    tpu_buf_t a = make_view(ma, dt, 3, dims, pa, fa, 0, gap_a);
    tpu_buf_t b = make_view(mb, dt, 3, dims, pb, 0, bc, 1);
    tpu_buf_t of = make_view(mf, dt, 3, dims, po, fo, 0, gap_o);
    tpu_buf_t orf = make_view(mr, dt, 3, dims, po, fo, 0, gap_o);
    char what[64];
    snprintf(what, sizeof what, "layout case %d (%s)", c, tpu_dtype_name(dt));
    CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, &a, &b, &of, g_pool));
    CHECK_OK(tpu_ref_binary(TPU_OP_ADD, &a, &b, &orf));
    CHECK(count_diffs(what, &of, &orf, 0) == 0);
    tpu_op_t un = tpu_dtype_is_float(dt) ? TPU_OP_EXP : TPU_OP_NEG;
    CHECK_OK(tpu_kernel_unary(un, &b, &of, g_pool));
    CHECK_OK(tpu_ref_unary(un, &b, &orf));
    CHECK(count_diffs(what, &of, &orf, dt == TPU_F32 ? 5 : dt == TPU_BF16 ? 1 : 0) == 0);
    /* copy into the strided output equals a reference element walk */
    CHECK_OK(tpu_kernel_copy(&a, &of, g_pool));
    CHECK(count_diffs(what, &of, &a, 0) == 0);
    /* convert to f32 through strides */
    tpu_buf_t cf = make_view(mf, TPU_F32, 3, dims, po, fo, 0, 1);
    tpu_buf_t cr = make_view(mr, TPU_F32, 3, dims, po, fo, 0, 1);
    CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &a, &cf, g_pool));
    CHECK_OK(tpu_ref_unary(TPU_OP_CONVERT, &a, &cr));
    CHECK(count_diffs(what, &cf, &cr, 0) == 0);
  }
  free(ma);
  free(mb);
  free(mf);
  free(mr);
}

TEST(rank0_empty_and_in_place) {
  float s = 2.0f, r = 0;
  tpu_buf_t bs = dense(&s, TPU_F32, 0, NULL), br = dense(&r, TPU_F32, 0, NULL);
  CHECK_OK(tpu_kernel_unary(TPU_OP_SQRT, &bs, &br, g_pool));
  CHECK(r == sqrtf(2.0f));
  float v[6] = {1, 2, 3, 4, 5, 6}, o[6];
  int64_t d2[2] = {2, 3};
  tpu_buf_t bv = dense(v, TPU_F32, 2, d2), bo = dense(o, TPU_F32, 2, d2);
  CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, &bv, &bs, &bo, g_pool)); /* rank-0 operand broadcasts */
  for (int i = 0; i < 6; i++) CHECK(o[i] == 2.0f * v[i]);
  CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, &bv, &bv, &bv, g_pool)); /* out is exactly a */
  for (int i = 0; i < 6; i++) CHECK(v[i] == 2.0f * (float)(i + 1));
  int64_t d0[2] = {0, 3};
  tpu_buf_t e = dense(NULL, TPU_F32, 2, d0);
  CHECK_OK(tpu_kernel_unary(TPU_OP_EXP, &e, &e, g_pool));
  CHECK_OK(tpu_kernel_fill(&e, 1.0, 1, g_pool));
  CHECK_OK(tpu_kernel_copy(&e, &e, g_pool));
}

TEST(threads_split_gives_identical_results) {
  enum { N = 300007 };
  float *x = malloc(N * 4), *a = malloc(N * 4), *b = malloc(N * 4);
  fill_random(x, TPU_F32, N, false);
  tpu_buf_t bx = vec1(x, TPU_F32, N), ba = vec1(a, TPU_F32, N), bb = vec1(b, TPU_F32, N);
  static const tpu_op_t ops[] = {TPU_OP_ERF, TPU_OP_TANH, TPU_OP_SIN};
  for (int k = 0; k < 3; k++) {
    CHECK_OK(tpu_kernel_unary(ops[k], &bx, &ba, g_pool));
    CHECK_OK(tpu_kernel_unary(ops[k], &bx, &bb, NULL));
    CHECK(memcmp(a, b, N * 4) == 0);
  }
  CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, &bx, &bx, &ba, g_pool));
  for (int i = 0; i < N; i++) b[i] = x[i] + x[i];
  CHECK(count_diffs("add", &ba, &bb, 0) == 0);
  free(x);
  free(a);
  free(b);
}

/* ---- semantics by hand ------------------------------------------------------------------ */

static void run_i32(tpu_op_t op, int32_t a, int32_t b, int32_t want) {
  int32_t r = 0;
  tpu_buf_t ba = vec1(&a, TPU_I32, 1), bb = vec1(&b, TPU_I32, 1), br = vec1(&r, TPU_I32, 1);
  CHECK_OK(tpu_kernel_binary(op, &ba, &bb, &br, NULL));
  if (r != want) fprintf(stderr, "  %s(%d, %d) = %d, want %d\n", tpu_op_name(op), a, b, r, want);
  CHECK(r == want);
}

TEST(integer_semantics) {
  run_i32(TPU_OP_DIV, -7, 2, -3);
  run_i32(TPU_OP_DIV, 7, -2, -3);
  run_i32(TPU_OP_DIV, 5, 0, -1);
  run_i32(TPU_OP_DIV, INT32_MIN, -1, INT32_MIN);
  run_i32(TPU_OP_REM, -7, 2, -1);
  run_i32(TPU_OP_REM, 7, -2, 1);
  run_i32(TPU_OP_REM, 5, 0, 5);
  run_i32(TPU_OP_REM, INT32_MIN, -1, 0);
  run_i32(TPU_OP_POW, 2, 10, 1024);
  run_i32(TPU_OP_POW, 3, -1, 0);
  run_i32(TPU_OP_POW, -1, -3, -1);
  run_i32(TPU_OP_POW, -1, -4, 1);
  run_i32(TPU_OP_POW, 1, -5, 1);
  run_i32(TPU_OP_POW, 2, 31, INT32_MIN);
  run_i32(TPU_OP_POW, 0, 0, 1);
  run_i32(TPU_OP_ADD, INT32_MAX, 1, INT32_MIN);
  run_i32(TPU_OP_MUL, 65536, 65536, 0);
  run_i32(TPU_OP_SHIFT_LEFT, 1, 31, INT32_MIN);
  run_i32(TPU_OP_SHIFT_LEFT, 1, 32, 0);
  run_i32(TPU_OP_SHIFT_LEFT, 1, -1, 0);
  run_i32(TPU_OP_SHIFT_RIGHT, -8, 1, -4);
  run_i32(TPU_OP_SHIFT_RIGHT, -8, 40, -1);
  run_i32(TPU_OP_SHIFT_RIGHT, 8, -1, 0);
  run_i32(TPU_OP_MAX, -3, 2, 2);
  run_i32(TPU_OP_XOR, 12, 10, 6);
  /* narrow types wrap */
  int8_t a8[4] = {3, -128, 100, -1}, b8[4] = {5, -1, 100, 9}, r8[4];
  tpu_buf_t ba = vec1(a8, TPU_I8, 4), bb = vec1(b8, TPU_I8, 4), br = vec1(r8, TPU_I8, 4);
  CHECK_OK(tpu_kernel_binary(TPU_OP_POW, &ba, &bb, &br, NULL));
  CHECK(r8[0] == -13); /* 243 wraps */
  CHECK_OK(tpu_kernel_binary(TPU_OP_DIV, &ba, &bb, &br, NULL));
  CHECK(r8[1] == -128 && r8[2] == 1 && r8[3] == 0);
  CHECK_OK(tpu_kernel_binary(TPU_OP_SHIFT_LEFT, &ba, &bb, &br, NULL));
  CHECK(r8[0] == 96 && r8[3] == 0); /* -1 << 9 is past the width: 0 */
  CHECK_OK(tpu_kernel_unary(TPU_OP_ABS, &ba, &br, NULL));
  CHECK(r8[0] == 3 && r8[1] == -128 && r8[3] == 1);
  uint8_t u[3] = {1, 200, 0}, ur[3], ush[3] = {1, 1, 7};
  tpu_buf_t bu = vec1(u, TPU_U8, 3), bur = vec1(ur, TPU_U8, 3), bsh = vec1(ush, TPU_U8, 3);
  CHECK_OK(tpu_kernel_unary(TPU_OP_NEG, &bu, &bur, NULL));
  CHECK(ur[0] == 255 && ur[1] == 56 && ur[2] == 0);
  CHECK_OK(tpu_kernel_binary(TPU_OP_SHIFT_RIGHT, &bu, &bsh, &bur, NULL));
  CHECK(ur[1] == 100); /* logical for unsigned */
  CHECK_OK(tpu_kernel_unary(TPU_OP_NOT, &bu, &bur, NULL));
  CHECK(ur[0] == 254 && ur[2] == 255);
  CHECK_OK(tpu_kernel_unary(TPU_OP_SIGN, &bu, &bur, NULL));
  CHECK(ur[0] == 1 && ur[1] == 1 && ur[2] == 0);
  int64_t big[2] = {INT64_MIN, 5}, m1[2] = {-1, 0}, rr[2];
  tpu_buf_t bbig = vec1(big, TPU_I64, 2), bm1 = vec1(m1, TPU_I64, 2), brr = vec1(rr, TPU_I64, 2);
  CHECK_OK(tpu_kernel_binary(TPU_OP_DIV, &bbig, &bm1, &brr, g_pool));
  CHECK(rr[0] == INT64_MIN && rr[1] == -1);
  CHECK_OK(tpu_kernel_unary(TPU_OP_NEG, &bbig, &brr, g_pool));
  CHECK(rr[0] == INT64_MIN && rr[1] == -5);
}

TEST(bool_semantics) {
  uint8_t a[4] = {0, 0, 1, 1}, b[4] = {0, 1, 0, 1}, r[4];
  tpu_buf_t ba = vec1(a, TPU_BOOL, 4), bb = vec1(b, TPU_BOOL, 4), br = vec1(r, TPU_BOOL, 4);
  static const struct { tpu_op_t op; uint8_t want[4]; } cases[] = {
      {TPU_OP_ADD, {0, 1, 1, 1}}, {TPU_OP_MUL, {0, 0, 0, 1}}, {TPU_OP_MAX, {0, 1, 1, 1}},
      {TPU_OP_MIN, {0, 0, 0, 1}}, {TPU_OP_AND, {0, 0, 0, 1}}, {TPU_OP_OR, {0, 1, 1, 1}},
      {TPU_OP_XOR, {0, 1, 1, 0}}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    CHECK_OK(tpu_kernel_binary(cases[k].op, &ba, &bb, &br, g_pool));
    CHECK(memcmp(r, cases[k].want, 4) == 0);
  }
  CHECK_OK(tpu_kernel_unary(TPU_OP_NOT, &ba, &br, g_pool));
  CHECK(r[0] == 1 && r[1] == 1 && r[2] == 0 && r[3] == 0);
  CHECK(tpu_kernel_binary(TPU_OP_SUB, &ba, &bb, &br, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "SUB is not defined for dtype i1");
  CHECK(tpu_kernel_unary(TPU_OP_NEG, &ba, &br, g_pool) == TPU_ERR_INVALID_ARGUMENT);
}

TEST(float_semantics) {
  float x[8] = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, NAN, -0.0f, INFINITY}, r[8];
  tpu_buf_t bx = vec1(x, TPU_F32, 8), br = vec1(r, TPU_F32, 8);
  CHECK_OK(tpu_kernel_unary(TPU_OP_ROUND_EVEN, &bx, &br, g_pool));
  CHECK(r[0] == 0.0f && r[1] == 2.0f && r[2] == 2.0f && f2u(r[3]) == 0x80000000u && r[4] == -2.0f);
  CHECK_OK(tpu_kernel_unary(TPU_OP_SIGN, &bx, &br, g_pool));
  CHECK(r[0] == 1.0f && r[3] == -1.0f && f2u(r[5]) == 0 && f2u(r[6]) == 0 && r[7] == 1.0f);
  uint8_t fin[8];
  tpu_buf_t bfin = vec1(fin, TPU_BOOL, 8);
  CHECK_OK(tpu_kernel_unary(TPU_OP_IS_FINITE, &bx, &bfin, g_pool));
  CHECK(fin[0] == 1 && fin[5] == 0 && fin[6] == 1 && fin[7] == 0);
  CHECK_OK(tpu_kernel_unary(TPU_OP_EXP, &bx, &br, g_pool));
  CHECK(isnan(r[5]) && r[6] == 1.0f && r[7] == INFINITY);
  CHECK_OK(tpu_kernel_unary(TPU_OP_LOG, &bx, &br, g_pool));
  CHECK(isnan(r[3]) && r[6] == -INFINITY && r[7] == INFINITY);
  CHECK_OK(tpu_kernel_unary(TPU_OP_TANH, &bx, &br, g_pool));
  CHECK(f2u(r[6]) == 0x80000000u && r[7] == 1.0f);
  CHECK_OK(tpu_kernel_unary(TPU_OP_ERF, &bx, &br, g_pool));
  CHECK(f2u(r[6]) == 0x80000000u && r[7] == 1.0f && isnan(r[5]));
  CHECK_OK(tpu_kernel_unary(TPU_OP_LOGISTIC, &bx, &br, g_pool));
  CHECK(r[6] == 0.5f && r[7] == 1.0f);
  float y[8] = {1.0f, NAN, 1.0f, 0.0f, 2.0f, 3.0f, 2.0f, 5.0f};
  tpu_buf_t by = vec1(y, TPU_F32, 8);
  CHECK_OK(tpu_kernel_binary(TPU_OP_MAX, &bx, &by, &br, g_pool));
  CHECK(r[0] == 1.0f && isnan(r[1]) && r[2] == 2.5f && isnan(r[5]) && f2u(r[6]) == 0x40000000u);
  CHECK_OK(tpu_kernel_binary(TPU_OP_REM, &bx, &by, &br, g_pool));
  CHECK(r[4] == -0.5f); /* fmod(-2.5, 2) keeps the dividend's sign */
  /* f64 computes in f64 */
  double d[2] = {1e-300, 0.1}, dr[2];
  tpu_buf_t bd = vec1(d, TPU_F64, 2), bdr = vec1(dr, TPU_F64, 2);
  CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, &bd, &bd, &bdr, g_pool));
  CHECK(dr[0] == 0.0 && dr[1] == 0.1 * 0.1);
}

/* bf16 results round once, to nearest even, from the f32 result. */
TEST(bf16_rounding_is_rne) {
  static const struct { uint32_t f; uint16_t h; } cases[] = {
      {0x3f808000u, 0x3f80}, /* 1 + 2^-8: tie, stays even */
      {0x3f818000u, 0x3f82}, /* 1 + 3*2^-8: tie, rounds up to even */
      {0x3f808001u, 0x3f81}, {0x3f80ffffu, 0x3f81}, {0x7f7fffffu, 0x7f80}, /* FLT_MAX -> inf */
      {0x00008000u, 0x0000}, {0x00018000u, 0x0002}, /* subnormal ties */
      {0x80000000u, 0x8000}, {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80}};
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    tpu_vec_ops_force(v);
    enum { N = 10 };
    float x[N * 3];
    uint16_t h[N * 3];
    for (int i = 0; i < N * 3; i++) x[i] = u2f(cases[i % N].f);
    tpu_buf_t bx = vec1(x, TPU_F32, N * 3), bh = vec1(h, TPU_BF16, N * 3);
    CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bx, &bh, g_pool));
    for (int i = 0; i < N * 3; i++) CHECK(h[i] == cases[i % N].h);
    /* bf16 1 + bf16 2^-8 = 1.00390625 in f32, which rounds back to 1 */
    uint16_t one[17], tiny[17], sum[17];
    for (int i = 0; i < 17; i++) {
      one[i] = 0x3f80;
      tiny[i] = 0x3b80; /* 2^-8 */
    }
    tpu_buf_t b1 = vec1(one, TPU_BF16, 17), bt = vec1(tiny, TPU_BF16, 17), bs = vec1(sum, TPU_BF16, 17);
    CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, &b1, &bt, &bs, g_pool));
    for (int i = 0; i < 17; i++) CHECK(sum[i] == 0x3f80);
    tiny[3] = 0x3c40; /* 3*2^-8 -> 1.01171875: tie between 0x3f81 and 0x3f82 -> 0x3f82 */
    CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, &b1, &bt, &bs, g_pool));
    CHECK(sum[3] == 0x3f82);
  }
  tpu_vec_ops_force(NULL);
  /* f16 and f64 -> f16 through f32 */
  double d = 1.0 + 0x1p-11 + 0x1p-40;
  uint16_t h16;
  tpu_buf_t bd = vec1(&d, TPU_F64, 1), bh16 = vec1(&h16, TPU_F16, 1);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bd, &bh16, g_pool));
  CHECK(h16 == 0x3c00); /* as PyTorch: f64 -> f32 (1 + 2^-11) -> f16 tie -> 1.0 */
}

TEST(convert_semantics) {
  float f[10] = {3e9f, -3e9f, NAN, 1e20f, -1.5f, 300.7f, -1.0f, 0.0f, -0.0f, 2.9f};
  tpu_buf_t bf = vec1(f, TPU_F32, 10);
  int32_t i32[10];
  tpu_buf_t b32 = vec1(i32, TPU_I32, 10);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bf, &b32, g_pool));
  CHECK(i32[0] == INT32_MIN && i32[1] == INT32_MIN && i32[2] == INT32_MIN && i32[4] == -1 &&
        i32[5] == 300 && i32[9] == 2);
  int16_t i16[10];
  tpu_buf_t b16 = vec1(i16, TPU_I16, 10);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bf, &b16, g_pool));
  CHECK(i16[0] == 0 && i16[4] == -1 && i16[5] == 300);
  int8_t i8[10];
  tpu_buf_t b8 = vec1(i8, TPU_I8, 10);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bf, &b8, g_pool));
  CHECK(i8[5] == 44 && i8[6] == -1);
  uint8_t u8[10];
  tpu_buf_t bu8 = vec1(u8, TPU_U8, 10);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bf, &bu8, g_pool));
  CHECK(u8[0] == 0 && u8[4] == 255 && u8[5] == 44 && u8[6] == 255);
  int64_t i64[10];
  tpu_buf_t b64 = vec1(i64, TPU_I64, 10);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bf, &b64, g_pool));
  CHECK(i64[0] == 3000000000ll && i64[1] == -3000000000ll && i64[2] == INT64_MIN &&
        i64[3] == INT64_MIN && i64[4] == -1);
  uint8_t bl[10];
  tpu_buf_t bb = vec1(bl, TPU_BOOL, 10);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bf, &bb, g_pool));
  CHECK(bl[2] == 1 && bl[7] == 0 && bl[8] == 0 && bl[9] == 1);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bb, &bf, g_pool));
  CHECK(f[2] == 1.0f && f[7] == 0.0f);
  int64_t big = (1ll << 53) + 1;
  uint16_t h;
  tpu_buf_t bbig = vec1(&big, TPU_I64, 1), bh = vec1(&h, TPU_BF16, 1);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bbig, &bh, g_pool));
  CHECK(h == 0x5a00); /* 2^53 */
  float bits = 1.0f;
  int32_t as_int;
  tpu_buf_t bbits = vec1(&bits, TPU_F32, 1), bint = vec1(&as_int, TPU_I32, 1);
  CHECK_OK(tpu_kernel_unary(TPU_OP_BITCAST_CONVERT, &bbits, &bint, g_pool));
  CHECK(as_int == 0x3f800000);
}

TEST(compare_select_clamp) {
  float a[5] = {1, NAN, 3, -0.0f, 5}, b[5] = {2, NAN, 3, 0.0f, 4};
  uint8_t r[5];
  tpu_buf_t ba = vec1(a, TPU_F32, 5), bb = vec1(b, TPU_F32, 5), br = vec1(r, TPU_BOOL, 5);
  static const struct { tpu_compare_dir_t dir; uint8_t want[5]; } cases[] = {
      {TPU_CMP_EQ, {0, 0, 1, 1, 0}}, {TPU_CMP_NE, {1, 1, 0, 0, 1}}, {TPU_CMP_LT, {1, 0, 0, 0, 0}},
      {TPU_CMP_LE, {1, 0, 1, 1, 0}}, {TPU_CMP_GT, {0, 0, 0, 0, 1}}, {TPU_CMP_GE, {0, 0, 1, 1, 1}}};
  for (int k = 0; k < 6; k++) {
    CHECK_OK(tpu_kernel_compare(cases[k].dir, &ba, &bb, &br, g_pool));
    CHECK(memcmp(r, cases[k].want, 5) == 0);
  }
  int64_t ia[3] = {-5, 7, INT64_MAX}, ib[3] = {-5, -7, INT64_MIN};
  tpu_buf_t bia = vec1(ia, TPU_I64, 3), bib = vec1(ib, TPU_I64, 3), bir = vec1(r, TPU_BOOL, 3);
  CHECK_OK(tpu_kernel_compare(TPU_CMP_GT, &bia, &bib, &bir, g_pool));
  CHECK(r[0] == 0 && r[1] == 1 && r[2] == 1);
  CHECK(tpu_kernel_compare(TPU_CMP_EQ, &ba, &bia, &br, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_kernel_compare(TPU_CMP_EQ, &ba, &bb, &ba, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "kernel_compare");

  /* every direction over dense operands, a broadcast scalar, and a strided output: the
   * kernel's per-layout loops against the scalar definition (NaN, signed zeros, inf) */
  {
    enum { N = 1500 };
    static float x[N], y[N];
    static uint8_t got[2 * N];
    for (int i = 0; i < N; i++) x[i] = rnd_float(), y[i] = rnd_float();
    for (int k = 0; k < 6; k++) {
      tpu_compare_dir_t dir = cases[k].dir;
      for (int layout = 0; layout < 3; layout++) {
        tpu_buf_t bx = vec1(x, TPU_F32, N), by = vec1(y, TPU_F32, N), bo = vec1(got, TPU_BOOL, N);
        if (layout == 1) by.strides[0] = 0;  /* y[0] broadcast */
        if (layout == 2) bo.strides[0] = 2;  /* every other byte */
        CHECK_OK(tpu_kernel_compare(dir, &bx, &by, &bo, g_pool));
        for (int i = 0; i < N; i++) {
          float u = x[i], v = layout == 1 ? y[0] : y[i];
          bool want = dir == TPU_CMP_EQ ? u == v : dir == TPU_CMP_NE ? u != v
                    : dir == TPU_CMP_LT ? u < v : dir == TPU_CMP_LE ? u <= v
                    : dir == TPU_CMP_GT ? u > v : u >= v;
          CHECK(got[layout == 2 ? 2 * i : i] == want);
        }
      }
    }
  }

  /* select with a broadcast column predicate over a (2, 3) i16 */
  uint8_t pred[2] = {1, 0};
  int16_t t[6] = {1, 2, 3, 4, 5, 6}, f[6] = {-1, -2, -3, -4, -5, -6}, o[6];
  int64_t d23[2] = {2, 3}, d21[2] = {2, 1};
  tpu_buf_t bp = dense(pred, TPU_BOOL, 2, d21), bt = dense(t, TPU_I16, 2, d23);
  tpu_buf_t bf = dense(f, TPU_I16, 2, d23), bo = dense(o, TPU_I16, 2, d23);
  CHECK_OK(tpu_kernel_select(&bp, &bt, &bf, &bo, g_pool));
  CHECK(o[0] == 1 && o[2] == 3 && o[3] == -4 && o[5] == -6);
  CHECK(tpu_kernel_select(&bt, &bt, &bf, &bo, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "kernel_select");
  for (int dt = 0; dt < TPU_DTYPE_COUNT; dt++) { /* every dtype, strided on_false */
    size_t size = tpu_dtype_size((tpu_dtype_t)dt);
    char tm[64], fm[128], om[64], want[64];
    uint8_t pm[8];
    fill_random(tm, (tpu_dtype_t)dt, 8, false);
    fill_random(fm, (tpu_dtype_t)dt, 16, false);
    fill_random(pm, TPU_BOOL, 8, false);
    tpu_buf_t s_t = vec1(tm, (tpu_dtype_t)dt, 8), s_f = vec1(fm, (tpu_dtype_t)dt, 8);
    s_f.strides[0] = 2;
    tpu_buf_t s_p = vec1(pm, TPU_BOOL, 8), s_o = vec1(om, (tpu_dtype_t)dt, 8);
    CHECK_OK(tpu_kernel_select(&s_p, &s_t, &s_f, &s_o, g_pool));
    for (int i = 0; i < 8; i++) memcpy(want + i * size, pm[i] ? tm + i * size : fm + 2 * i * size, size);
    CHECK(memcmp(om, want, 8 * size) == 0);
  }

  /* clamp: NaN propagates, lo > hi gives hi, scalars broadcast */
  float x[5] = {-3, 0.5f, 7, NAN, 2}, lo = 0, hi = 1, cr[5];
  tpu_buf_t bx = vec1(x, TPU_F32, 5), bl = dense(&lo, TPU_F32, 0, NULL), bh = dense(&hi, TPU_F32, 0, NULL);
  tpu_buf_t bcr = vec1(cr, TPU_F32, 5);
  CHECK_OK(tpu_kernel_clamp(&bl, &bx, &bh, &bcr, g_pool));
  CHECK(cr[0] == 0 && cr[1] == 0.5f && cr[2] == 1 && isnan(cr[3]) && cr[4] == 1);
  CHECK_OK(tpu_kernel_clamp(&bh, &bx, &bl, &bcr, g_pool)); /* lo = 1 > hi = 0 */
  CHECK(cr[0] == 0 && cr[1] == 0 && cr[2] == 0);
  int32_t xi[4] = {-10, 5, 20, 0}, loi[4] = {0, 0, 0, 0}, hii[4] = {10, 10, 10, -1}, ri[4];
  tpu_buf_t bxi = vec1(xi, TPU_I32, 4), bli = vec1(loi, TPU_I32, 4), bhi = vec1(hii, TPU_I32, 4);
  tpu_buf_t bri = vec1(ri, TPU_I32, 4);
  CHECK_OK(tpu_kernel_clamp(&bli, &bxi, &bhi, &bri, g_pool));
  CHECK(ri[0] == 0 && ri[1] == 5 && ri[2] == 10 && ri[3] == -1);
  uint16_t hx[3] = {tpu_f32_to_bf16(-2.0f), tpu_f32_to_bf16(0.3f), tpu_f32_to_bf16(9.0f)}, hr[3];
  uint16_t hlo = tpu_f32_to_bf16(-1.0f), hhi = tpu_f32_to_bf16(1.0f);
  tpu_buf_t bhx = vec1(hx, TPU_BF16, 3), bhr = vec1(hr, TPU_BF16, 3);
  tpu_buf_t bhlo = dense(&hlo, TPU_BF16, 0, NULL), bhhi = dense(&hhi, TPU_BF16, 0, NULL);
  CHECK_OK(tpu_kernel_clamp(&bhlo, &bhx, &bhhi, &bhr, g_pool));
  CHECK(hr[0] == hlo && hr[1] == hx[1] && hr[2] == hhi);
  uint8_t bo8[2] = {0, 1};
  tpu_buf_t bbool = vec1(bo8, TPU_BOOL, 2);
  CHECK(tpu_kernel_clamp(&bbool, &bbool, &bbool, &bbool, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "CLAMP is not defined for dtype i1");
}

TEST(copy_transpose_reverse_broadcast) {
  /* (4, 5, 6) i16: all 6 permutations into a dense out, and reversed */
  enum { A = 4, B = 5, C = 6 };
  int16_t src[A * B * C], dst[A * B * C];
  for (int i = 0; i < A * B * C; i++) src[i] = (int16_t)i;
  static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  const int64_t sdims[3] = {A, B, C}, sstr[3] = {B * C, C, 1};
  for (int p = 0; p < 6; p++) {
    for (int rev = 0; rev < 2; rev++) {
      tpu_buf_t x;
      memset(&x, 0, sizeof x);
      x.dtype = TPU_I16;
      x.rank = 3;
      x.data = src;
      for (int d = 0; d < 3; d++) {
        x.dims[d] = sdims[perms[p][d]];
        x.strides[d] = sstr[perms[p][d]];
      }
      if (rev) { /* reverse the middle dim */
        x.data = src + (x.dims[1] - 1) * x.strides[1];
        x.strides[1] = -x.strides[1];
      }
      tpu_buf_t o = dense(dst, TPU_I16, 3, x.dims);
      CHECK_OK(tpu_kernel_copy(&x, &o, g_pool));
      int bad = 0;
      for (int64_t i = 0; i < x.dims[0]; i++)
        for (int64_t j = 0; j < x.dims[1]; j++)
          for (int64_t k = 0; k < x.dims[2]; k++) {
            int64_t jj = rev ? x.dims[1] - 1 - j : j;
            int64_t want_idx = i * x.strides[0] + jj * (rev ? -x.strides[1] : x.strides[1]) + k * x.strides[2];
            bad += dst[(i * x.dims[1] + j) * x.dims[2] + k] != src[want_idx];
          }
      CHECK(bad == 0);
    }
  }
  /* broadcast a row into a strided (every other column) output */
  double row[3] = {1.5, 2.5, 3.5}, out[2 * 3 * 2];
  memset(out, 0, sizeof out);
  int64_t d23[2] = {2, 3};
  tpu_buf_t br = dense(row, TPU_F64, 2, d23);
  br.strides[0] = 0;
  tpu_buf_t bo = dense(out, TPU_F64, 2, d23);
  bo.strides[0] = 6;
  bo.strides[1] = 2;
  CHECK_OK(tpu_kernel_copy(&br, &bo, g_pool));
  CHECK(out[0] == 1.5 && out[1] == 0 && out[2] == 2.5 && out[4] == 3.5 && out[6] == 1.5 && out[10] == 3.5);
  tpu_buf_t bad_out = bo;
  bad_out.strides[1] = 0;
  CHECK(tpu_kernel_copy(&br, &bad_out, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "stride 0");
  tpu_buf_t wrong = dense(row, TPU_F32, 2, d23);
  CHECK(tpu_kernel_copy(&wrong, &bo, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  /* large dense copy takes the memcpy path on both threads */
  enum { N = 200000 };
  float *big = malloc(N * 4), *big2 = malloc(N * 4);
  fill_random(big, TPU_F32, N, false);
  tpu_buf_t bbig = vec1(big, TPU_F32, N), bbig2 = vec1(big2, TPU_F32, N);
  CHECK_OK(tpu_kernel_copy(&bbig, &bbig2, g_pool));
  CHECK(memcmp(big, big2, N * 4) == 0);
  free(big);
  free(big2);
}

TEST(fill_and_iota) {
  for (int dt = 0; dt < TPU_DTYPE_COUNT; dt++) {
    char mem[7 * 8 * 2];
    memset(mem, 0x5a, sizeof mem);
    tpu_buf_t b = vec1(mem, (tpu_dtype_t)dt, 7);
    b.strides[0] = 2;
    CHECK_OK(tpu_kernel_fill(&b, -2.75, -3, g_pool));
    size_t size = tpu_dtype_size((tpu_dtype_t)dt);
    for (int i = 0; i < 7; i++) {
      const char *p = mem + 2 * i * size;
      switch (dt) {
        case TPU_F32: { float v; memcpy(&v, p, 4); CHECK(v == -2.75f); break; }
        case TPU_F64: { double v; memcpy(&v, p, 8); CHECK(v == -2.75); break; }
        case TPU_F16: { uint16_t v; memcpy(&v, p, 2); CHECK(tpu_f16_to_f32(v) == -2.75f); break; }
        case TPU_BF16: { uint16_t v; memcpy(&v, p, 2); CHECK(tpu_bf16_to_f32(v) == -2.75f); break; }
        case TPU_I64: { int64_t v; memcpy(&v, p, 8); CHECK(v == -3); break; }
        case TPU_I32: { int32_t v; memcpy(&v, p, 4); CHECK(v == -3); break; }
        case TPU_I16: { int16_t v; memcpy(&v, p, 2); CHECK(v == -3); break; }
        case TPU_I8: CHECK(*(const int8_t *)p == -3); break;
        case TPU_U8: CHECK(*(const uint8_t *)p == 253); break;
        default: CHECK(*(const uint8_t *)p == 1); break;
      }
      CHECK((unsigned char)mem[(2 * i + 1) * size] == 0x5a); /* gaps untouched */
    }
  }
  /* iota over (3, 4, 5) along each dim, i32, and into a transposed output */
  int32_t io[60];
  int64_t d[3] = {3, 4, 5};
  tpu_buf_t bi = dense(io, TPU_I32, 3, d);
  for (int dim = 0; dim < 3; dim++) {
    CHECK_OK(tpu_kernel_iota(&bi, dim, g_pool));
    int bad = 0;
    for (int i = 0; i < 60; i++) {
      int idx[3] = {i / 20, (i / 5) % 4, i % 5};
      bad += io[i] != idx[dim];
    }
    CHECK(bad == 0);
  }
  tpu_buf_t bt = bi; /* logical (3, 4, 5) stored as (5, 4, 3) */
  bt.strides[0] = 1;
  bt.strides[1] = 3;
  bt.strides[2] = 12;
  CHECK_OK(tpu_kernel_iota(&bt, 2, g_pool));
  CHECK(io[0] == 0 && io[12] == 1 && io[48] == 4 && io[1] == 0);
  CHECK(tpu_kernel_iota(&bi, 3, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  /* bf16 iota rounds: 257 -> 256, 259 -> 260 */
  enum { N = 70000 };
  uint16_t *h = malloc(N * 2);
  tpu_buf_t bh = vec1(h, TPU_BF16, N);
  CHECK_OK(tpu_kernel_iota(&bh, 0, g_pool));
  CHECK(h[257] == tpu_f32_to_bf16(256.0f) && h[259] == tpu_f32_to_bf16(260.0f) && h[3] == tpu_f32_to_bf16(3.0f));
  CHECK(h[N - 1] == tpu_f32_to_bf16((float)(N - 1)));
  free(h);
}

static const tpu_ew_program_t kGelu = {
    .num_inputs = 1, .num_consts = 3, .consts = {0.70710678f, 1.0f, 0.5f}, .num_instrs = 5,
    .instrs = {{TPU_OP_MUL, 4, 0, 1}, {TPU_OP_ERF, 4, 4, 0}, {TPU_OP_ADD, 4, 4, 2},
               {TPU_OP_MUL, 4, 4, 0}, {TPU_OP_MUL, 4, 4, 3}},
    .result = 4};

/* The unfused gelu chain through the ordinary kernels (f32 in, f32 out). */
static void gelu_chain(tpu_buf_t *x, tpu_buf_t *o) {
  float c[3] = {0.70710678f, 1.0f, 0.5f};
  tpu_buf_t k[3];
  for (int i = 0; i < 3; i++) k[i] = dense(&c[i], TPU_F32, 0, NULL);
  CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, x, &k[0], o, g_pool));
  CHECK_OK(tpu_kernel_unary(TPU_OP_ERF, o, o, g_pool));
  CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, o, &k[1], o, g_pool));
  CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, o, x, o, g_pool));
  CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, o, &k[2], o, g_pool));
}

TEST(ew_program_fuses_chains) {
  enum { N = 100003 };
  float *x = malloc(N * 4), *f = malloc(N * 4), *u = malloc(N * 4);
  uint16_t *h = malloc(N * 2), *hf = malloc(N * 2), *hu = malloc(N * 2);
  fill_random(x, TPU_F32, N, false);
  tpu_buf_t bx = vec1(x, TPU_F32, N), bf = vec1(f, TPU_F32, N), bu = vec1(u, TPU_F32, N);
  const tpu_buf_t *ins[1] = {&bx};
  CHECK_OK(tpu_kernel_ew_program(&kGelu, ins, &bf, g_pool));
  gelu_chain(&bx, &bu);
  CHECK(count_diffs("gelu f32", &bf, &bu, 0) == 0);
  memcpy(u, x, N * 4); /* in place: out is the input's view */
  const tpu_buf_t *uins[1] = {&bu};
  CHECK_OK(tpu_kernel_ew_program(&kGelu, uins, &bu, g_pool));
  CHECK(count_diffs("gelu in place", &bf, &bu, 0) == 0);
  /* bf16 in and out: f32 inside, one rounding at the end */
  tpu_buf_t bh = vec1(h, TPU_BF16, N), bhf = vec1(hf, TPU_BF16, N), bhu = vec1(hu, TPU_BF16, N);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bx, &bh, g_pool));
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bh, &bx, g_pool));
  const tpu_buf_t *hins[1] = {&bh};
  CHECK_OK(tpu_kernel_ew_program(&kGelu, hins, &bhf, g_pool));
  gelu_chain(&bx, &bu);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &bu, &bhu, g_pool));
  CHECK(count_diffs("gelu bf16", &bhf, &bhu, 0) == 0);
  /* two inputs, one a broadcast row over a transposed output: tanh(a) * b + a */
  static const tpu_ew_program_t two = {
      .num_inputs = 2, .num_instrs = 3,
      .instrs = {{TPU_OP_TANH, 2, 0, 0}, {TPU_OP_MUL, 2, 2, 1}, {TPU_OP_ADD, 3, 2, 0}},
      .result = 3};
  int64_t d[2] = {300, 333};
  tpu_buf_t a = dense(x, TPU_F32, 2, d), b = dense(x, TPU_F32, 2, d), o = dense(f, TPU_F32, 2, d);
  b.strides[0] = 0;
  o.strides[0] = 1;
  o.strides[1] = 300;
  const tpu_buf_t *ins2[2] = {&a, &b};
  CHECK_OK(tpu_kernel_ew_program(&two, ins2, &o, g_pool));
  tpu_buf_t t = dense(u, TPU_F32, 2, d);
  CHECK_OK(tpu_kernel_unary(TPU_OP_TANH, &a, &t, g_pool));
  CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, &t, &b, &t, g_pool));
  CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, &t, &a, &t, g_pool));
  CHECK(count_diffs("two inputs", &o, &t, 0) == 0);
  /* bad programs */
  tpu_ew_program_t bad = kGelu;
  bad.instrs[1].op = TPU_OP_CONVERT;
  CHECK(tpu_kernel_ew_program(&bad, ins, &bf, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "instruction 1: CONVERT");
  bad = kGelu;
  bad.instrs[0].a = 9; /* never written */
  CHECK(tpu_kernel_ew_program(&bad, ins, &bf, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  bad = kGelu;
  bad.instrs[0].dst = 1; /* a constant */
  CHECK(tpu_kernel_ew_program(&bad, ins, &bf, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  bad = kGelu;
  bad.instrs[2].op = TPU_OP_AND;
  CHECK(tpu_kernel_ew_program(&bad, ins, &bf, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  int32_t iv[4] = {0};
  tpu_buf_t bi = vec1(iv, TPU_I32, 4), b4 = vec1(f, TPU_F32, 4);
  const tpu_buf_t *iins[1] = {&bi};
  CHECK(tpu_kernel_ew_program(&kGelu, iins, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "kernel_ew_program: input 0 is i32");
  free(x);
  free(f);
  free(u);
  free(h);
  free(hf);
  free(hu);
}

/* Long rows cross the program's blocks (1024 elements) with every kind of input load: a
 * bool predicate, a strided bf16 input, a broadcast f16 value and an f32 input read in place:
 * where(p, a * b, c + a), against the unfused kernels on the same inputs widened to f32. */
TEST(ew_program_long_rows_load_every_input_kind) {
  enum { N = 2500 };
  static const tpu_ew_program_t prog = {
      .num_inputs = 4, .num_instrs = 3,
      .instrs = {{TPU_OP_MUL, 4, 1, 2}, {TPU_OP_ADD, 5, 3, 1}, {TPU_OP_SELECT, 4, 0, 4, 5}},
      .result = 4};
  uint8_t *p = malloc(N);
  uint16_t *a16 = malloc(2 * N * 2), bh = tpu_f32_to_f16(1.5f);
  float *c = malloc(N * 4), *a = malloc(N * 4), *b = malloc(N * 4), *o = malloc(N * 4);
  float *t = malloc(N * 4), *u = malloc(N * 4), *ref = malloc(N * 4);
  fill_random(c, TPU_F32, N, false);
  fill_random(a, TPU_F32, N, false);
  for (int i = 0; i < N; i++) {
    p[i] = (uint8_t)((i * 7) % 3 == 0);
    a16[2 * i] = tpu_f32_to_bf16(a[i]);
    a16[2 * i + 1] = 0xffff; /* between the strided elements: never read */
    a[i] = tpu_bf16_to_f32(a16[2 * i]);
    b[i] = 1.5f;
  }
  tpu_buf_t bp = vec1(p, TPU_BOOL, N), ba = vec1(a16, TPU_BF16, N), bc = vec1(c, TPU_F32, N);
  tpu_buf_t bb = vec1(&bh, TPU_F16, N), bo = vec1(o, TPU_F32, N);
  ba.strides[0] = 2;
  bb.strides[0] = 0;
  const tpu_buf_t *ins[4] = {&bp, &ba, &bb, &bc};
  CHECK_OK(tpu_kernel_ew_program(&prog, ins, &bo, g_pool));
  tpu_buf_t fa = vec1(a, TPU_F32, N), fb = vec1(b, TPU_F32, N), ft = vec1(t, TPU_F32, N);
  tpu_buf_t fu = vec1(u, TPU_F32, N), fr = vec1(ref, TPU_F32, N);
  CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, &fa, &fb, &ft, g_pool));
  CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, &bc, &fa, &fu, g_pool));
  CHECK_OK(tpu_kernel_select(&bp, &ft, &fu, &fr, g_pool));
  CHECK(count_diffs("long rows, every input kind", &bo, &fr, 0) == 0);
  free(p);
  free(a16);
  free(c);
  free(a);
  free(b);
  free(o);
  free(t);
  free(u);
  free(ref);
}

/* A register that holds one broadcast value and is then overwritten by a vector result of
 * it (r2 = k * k, one value; r2 = r2 - x for every x; r2 = pow(r2, x)): each op must read
 * its broadcast operand as one value (a bug read it as a vector of garbage past the value),
 * for the vec.h ops and the scalar ones. Against the unfused kernels; each table in turn. */
TEST(ew_program_vector_result_over_broadcast_operand) {
  enum { N = 1500 };
  static const tpu_ew_program_t prog = {
      .num_inputs = 2, .num_instrs = 4,
      .instrs = {{TPU_OP_MUL, 2, 1, 1}, {TPU_OP_SUB, 2, 2, 0}, {TPU_OP_MUL, 3, 1, 1},
                 {TPU_OP_POW, 3, 3, 2}},
      .result = 3};
  float *x = malloc(N * 4), *o = malloc(N * 4), *t = malloc(N * 4), *ref = malloc(N * 4);
  float k = 1.25f, kk = 0.0f;
  for (int i = 0; i < N; i++) x[i] = (float)(i % 11) / 4.0f - 1.0f;
  tpu_buf_t bx = vec1(x, TPU_F32, N), bk = vec1(&k, TPU_F32, N), bo = vec1(o, TPU_F32, N);
  tpu_buf_t bt = vec1(t, TPU_F32, N), br = vec1(ref, TPU_F32, N);
  bk.strides[0] = 0;
  tpu_buf_t bkk = dense(&kk, TPU_F32, 0, NULL), bk0 = dense(&k, TPU_F32, 0, NULL);
  const tpu_buf_t *ins[2] = {&bx, &bk};
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    tpu_vec_ops_force(v);
    CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, &bk0, &bk0, &bkk, g_pool));
    CHECK_OK(tpu_kernel_binary(TPU_OP_SUB, &bkk, &bx, &bt, g_pool));
    CHECK_OK(tpu_kernel_binary(TPU_OP_POW, &bkk, &bt, &br, g_pool));
    CHECK_OK(tpu_kernel_ew_program(&prog, ins, &bo, g_pool));
    CHECK(count_diffs("vector result over a broadcast operand", &bo, &br, 0) == 0);
  }
  tpu_vec_ops_force(NULL);
  free(x);
  free(o);
  free(t);
  free(ref);
}

/* A rows x cols buffer of |dt| at |mem| stored column by column. */
static tpu_buf_t column_major(void *mem, tpu_dtype_t dt, const int64_t dims[2]) {
  tpu_buf_t b = dense(mem, dt, 2, dims);
  b.strides[0] = 1;
  b.strides[1] = dims[0];
  return b;
}

/* t = x * y (stored), result t * 0.5 + x: the unfused chain, into t_ref and o_ref. */
static void stores_chain(tpu_buf_t *x, tpu_buf_t *y, tpu_buf_t *t_ref, tpu_buf_t *o_ref) {
  float half = 0.5f;
  tpu_buf_t k = dense(&half, TPU_F32, 0, NULL);
  CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, x, y, t_ref, g_pool));
  CHECK_OK(tpu_kernel_binary(TPU_OP_MUL, t_ref, &k, o_ref, g_pool));
  CHECK_OK(tpu_kernel_binary(TPU_OP_ADD, o_ref, x, o_ref, g_pool));
}

TEST(ew_program_stores_extra_outputs) {
  /* registers 0 x, 1 y, 2 the constant 0.5; r3 = x * y is stored, r4 = r3 * 0.5 + x */
  static const tpu_ew_program_t prog = {
      .num_inputs = 2, .num_consts = 1, .consts = {0.5f}, .num_instrs = 3,
      .instrs = {{TPU_OP_MUL, 3, 0, 1}, {TPU_OP_MUL, 4, 3, 2}, {TPU_OP_ADD, 4, 4, 0}},
      .result = 4, .num_stores = 1, .stores = {3}};
  enum { R = 301, C = 333, N = R * C };
  float *x = malloc(N * 4), *y = malloc(N * 4), *o = malloc(N * 4), *t = malloc(N * 4);
  float *o_ref = malloc(N * 4), *t_ref = malloc(N * 4), *xc = malloc(N * 4);
  uint16_t *th = malloc(N * 2), *th_ref = malloc(N * 2);
  fill_random(x, TPU_F32, N, false);
  fill_random(y, TPU_F32, N, false);
  memcpy(xc, x, N * 4);
  int64_t d[2] = {R, C};
  tpu_buf_t bx = dense(x, TPU_F32, 2, d), by = dense(y, TPU_F32, 2, d);
  tpu_buf_t bo = dense(o, TPU_F32, 2, d), bt = dense(t, TPU_F32, 2, d);
  tpu_buf_t bor = dense(o_ref, TPU_F32, 2, d), btr = dense(t_ref, TPU_F32, 2, d);
  stores_chain(&bx, &by, &btr, &bor);
  const tpu_buf_t *ins[2] = {&bx, &by};
  const tpu_buf_t *extra[1] = {&bt};
  CHECK_OK(tpu_kernel_ew_program_stores(&prog, ins, &bo, extra, g_pool));
  CHECK(count_diffs("stores: result", &bo, &bor, 0) == 0);
  CHECK(count_diffs("stores: stored register", &bt, &btr, 0) == 0);
  /* the store over its own input x (an in-place update), the result over y: each block
   * is read whole before its stores */
  memcpy(o, y, N * 4);
  const tpu_buf_t *ins_io[2] = {&bx, &bo};
  const tpu_buf_t *extra_io[1] = {&bx};
  CHECK_OK(tpu_kernel_ew_program_stores(&prog, ins_io, &bo, extra_io, g_pool));
  CHECK(count_diffs("stores in place: result", &bo, &bor, 0) == 0);
  CHECK(count_diffs("stores in place: stored register", &bx, &btr, 0) == 0);
  memcpy(x, xc, N * 4);
  /* a bf16 store into a transposed buffer, with a row broadcast input (short rows too) */
  int64_t ds[2] = {R, 12};
  tpu_buf_t sx = dense(x, TPU_F32, 2, ds), sy = dense(y, TPU_F32, 2, ds);
  sy.strides[0] = 0;
  tpu_buf_t so = dense(o, TPU_F32, 2, ds), sor = dense(o_ref, TPU_F32, 2, ds);
  tpu_buf_t stf = dense(t_ref, TPU_F32, 2, ds);
  tpu_buf_t sth = column_major(th, TPU_BF16, ds), sthr = column_major(th_ref, TPU_BF16, ds);
  stores_chain(&sx, &sy, &stf, &sor);
  CHECK_OK(tpu_kernel_unary(TPU_OP_CONVERT, &stf, &sthr, g_pool));
  const tpu_buf_t *sins[2] = {&sx, &sy};
  const tpu_buf_t *sextra[1] = {&sth};
  CHECK_OK(tpu_kernel_ew_program_stores(&prog, sins, &so, sextra, g_pool));
  CHECK(count_diffs("short rows: result", &so, &sor, 0) == 0);
  CHECK(count_diffs("short rows: bf16 store, transposed", &sth, &sthr, 0) == 0);
  /* bad uses */
  CHECK(tpu_kernel_ew_program(&prog, ins, &bo, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "needs its extra outputs");
  CHECK(tpu_kernel_ew_program_stores(&prog, ins, &bo, NULL, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  tpu_buf_t wrong = dense(t, TPU_F32, 2, ds);
  const tpu_buf_t *bad_extra[1] = {&wrong};
  CHECK(tpu_kernel_ew_program_stores(&prog, ins, &bo, bad_extra, g_pool) ==
        TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "extra output 0");
  tpu_buf_t bcast = bt;
  bcast.strides[0] = 0;
  bad_extra[0] = &bcast;
  CHECK(tpu_kernel_ew_program_stores(&prog, ins, &bo, bad_extra, g_pool) ==
        TPU_ERR_INVALID_ARGUMENT);
  tpu_ew_program_t bad = prog;
  bad.stores[0] = 0; /* an input register */
  CHECK(tpu_kernel_ew_program_stores(&bad, ins, &bo, extra, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "store 0 reads register 0");
  bad = prog;
  bad.num_stores = TPU_EW_PROGRAM_MAX_INPUTS; /* no operand slots left */
  CHECK(tpu_kernel_ew_program_stores(&bad, ins, &bo, extra, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  free(x);
  free(y);
  free(o);
  free(t);
  free(o_ref);
  free(t_ref);
  free(xc);
  free(th);
  free(th_ref);
}

TEST(bad_arguments_name_the_kernel) {
  float x[4] = {0}, y[6] = {0};
  tpu_buf_t b4 = vec1(x, TPU_F32, 4), b6 = vec1(y, TPU_F32, 6);
  CHECK(tpu_kernel_binary(TPU_OP_ADD, &b4, &b6, &b6, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "kernel_binary: a has shape (4)");
  CHECK(tpu_kernel_unary(TPU_OP_ADD, &b4, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "ADD is not a unary op");
  CHECK(tpu_kernel_binary(TPU_OP_EXP, &b4, &b4, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_kernel_binary(TPU_OP_SELECT, &b4, &b4, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_kernel_unary(TPU_OP_EXP, NULL, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  tpu_buf_t nul = b4;
  nul.data = NULL;
  CHECK(tpu_kernel_unary(TPU_OP_EXP, &nul, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  tpu_buf_t deep = b4;
  deep.rank = 9;
  CHECK(tpu_kernel_unary(TPU_OP_EXP, &deep, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  tpu_buf_t huge = b4;
  huge.strides[0] = INT64_MAX / 2;
  CHECK(tpu_kernel_unary(TPU_OP_EXP, &huge, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "addressable");
  int32_t i[4] = {0};
  tpu_buf_t bi = vec1(i, TPU_I32, 4);
  CHECK(tpu_kernel_unary(TPU_OP_EXP, &bi, &bi, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "kernel_unary: EXP is not defined for dtype i32");
  CHECK(tpu_kernel_unary(TPU_OP_EXP, &b4, &bi, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_kernel_unary(TPU_OP_IS_FINITE, &b4, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_kernel_binary(TPU_OP_ADD, &b4, &bi, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "one dtype");
  CHECK(tpu_kernel_binary(TPU_OP_AND, &b4, &b4, &b4, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "AND is not defined for dtype f32");
  tpu_buf_t bad_dt = b4;
  bad_dt.dtype = (tpu_dtype_t)99;
  CHECK(tpu_kernel_fill(&bad_dt, 0, 0, g_pool) == TPU_ERR_INVALID_ARGUMENT);
}

int main(void) {
  if (!getenv("TORCHTPU_ISA")) setenv("TORCHTPU_ISA", "avx2", 1);
  CHECK_OK(tpu_pool_create(3, tpu_allocator_system(), &g_pool));
  RUN(cpu_features_masked_by_env);
  RUN(buf_dense_and_is_dense);
  RUN(vec_math_within_4_ulp_of_libm);
  RUN(vec_neg_abs_bitwise);
  RUN(vec_binary_exact_with_broadcast_and_tails);
  RUN(vec_bf16_conversions_match_dtype_h);
  RUN(ew_program_reads_a_predicate_as_one_for_any_nonzero_byte);
  RUN(vec_bf16_loops_match_f32_loops);
  RUN(vec_stream_entries_match_regular);
  RUN(unary_every_op_and_dtype_vs_ref);
  RUN(binary_every_op_and_dtype_vs_ref);
  RUN(convert_every_pair_vs_ref);
  RUN(each_isa_vs_ref);
  RUN(strided_transposed_reversed_broadcast_layouts);
  RUN(rank0_empty_and_in_place);
  RUN(threads_split_gives_identical_results);
  RUN(integer_semantics);
  RUN(bool_semantics);
  RUN(float_semantics);
  RUN(bf16_rounding_is_rne);
  RUN(convert_semantics);
  RUN(compare_select_clamp);
  RUN(copy_transpose_reverse_broadcast);
  RUN(fill_and_iota);
  RUN(ew_program_fuses_chains);
  RUN(ew_program_stores_extra_outputs);
  RUN(ew_program_long_rows_load_every_input_kind);
  RUN(ew_program_vector_result_over_broadcast_operand);
  RUN(large_outputs_stream);
  RUN(bad_arguments_name_the_kernel);
  tpu_pool_destroy(g_pool);
  return check_report();
}
