/* test_kernels_rng.c: tpu_kernel_rng: Philox4x32-10 known answers, the documented
 * element -> counter mapping (src/vtpu/kernels/rng.c), the distributions' shapes and
 * statistics, and bit-identical output however the work is split (threads, calls,
 * strided outputs, ISA tables). */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "tpu/kernels.h"
#include "vtpu/kernels/ew.h"
#include "vtpu/kernels/vec.h"

static tpu_pool_t *g_pool;

static tpu_buf_t vec1(void *mem, tpu_dtype_t dt, int64_t n) {
  tpu_shape_t s = {1, {n}};
  return tpu_buf_dense(mem, dt, &s);
}

static void philox_at(uint64_t seed, uint64_t ctr, uint32_t out[4]) {
  const uint32_t c[4] = {(uint32_t)ctr, (uint32_t)(ctr >> 32), 0, 0};
  const uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  tpu_philox4x32_10(c, k, out);
}

/* Random123's kat_vectors for philox4x32 with 10 rounds: counter, key -> output. */
TEST(philox_known_answers) {
  static const struct { uint32_t ctr[4], key[2], want[4]; } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (int i = 0; i < 3; i++) {
    uint32_t out[4];
    tpu_philox4x32_10(kat[i].ctr, kat[i].key, out);
    CHECK(memcmp(out, kat[i].want, sizeof out) == 0);
  }
  /* the SIMD generators: counter {0,0,0,0} key {0,0} is the first answer */
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    uint32_t w[4][1];
    v->philox(0, 0, 1, w[0], w[1], w[2], w[3]);
    CHECK(w[0][0] == 0x6627e8d5 && w[1][0] == 0xe169c58d && w[2][0] == 0xbc57ac4c &&
          w[3][0] == 0x9b00dbd8);
  }
}

TEST(vec_philox_matches_scalar_across_carries) {
  enum { N = 75 };
  const uint64_t starts[] = {0, 0xffffffffull - 30, 0x123456789abcdefull, UINT64_MAX - 40};
  const uint64_t seed = 0x0123456789abcdefull;
  for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
    if (!v) continue;
    for (int s = 0; s < 4; s++) {
      uint32_t w[4][N];
      v->philox(starts[s], seed, N, w[0], w[1], w[2], w[3]);
      int bad = 0;
      for (int i = 0; i < N; i++) {
        uint32_t want[4];
        philox_at(seed, starts[s] + (uint64_t)i, want);
        for (int j = 0; j < 4; j++) bad += w[j][i] != want[j];
      }
      if (bad) fprintf(stderr, "  %s start %d: %d words differ\n", v->name, s, bad);
      CHECK(bad == 0);
      v->philox(starts[s], seed, 5, w[0], NULL, NULL, NULL); /* words not asked for */
      uint32_t want[4];
      philox_at(seed, starts[s] + 4, want);
      CHECK(w[0][4] == want[0]);
    }
  }
}

TEST(element_mapping_as_documented) {
  enum { N = 1000 };
  const uint64_t seed = 42, offset = 0xfffffff0ull; /* crosses 2^32 */
  int64_t bits[N];
  float f[N];
  double d[N];
  uint16_t h[N], b[N];
  tpu_buf_t bb = vec1(bits, TPU_I64, N), bf = vec1(f, TPU_F32, N), bd = vec1(d, TPU_F64, N);
  tpu_buf_t bh = vec1(h, TPU_F16, N), bbf = vec1(b, TPU_BF16, N);
  CHECK_OK(tpu_kernel_rng(TPU_RNG_BITS, seed, offset, &bb, g_pool));
  CHECK_OK(tpu_kernel_rng(TPU_RNG_UNIFORM, seed, offset, &bf, g_pool));
  CHECK_OK(tpu_kernel_rng(TPU_RNG_UNIFORM, seed, offset, &bd, g_pool));
  CHECK_OK(tpu_kernel_rng(TPU_RNG_UNIFORM, seed, offset, &bh, g_pool));
  CHECK_OK(tpu_kernel_rng(TPU_RNG_UNIFORM, seed, offset, &bbf, g_pool));
  int bad = 0;
  for (int i = 0; i < N; i++) {
    uint32_t w[4];
    philox_at(seed, offset + (uint64_t)i, w);
    bad += bits[i] != (int64_t)w[0];
    bad += f[i] != (float)(w[0] >> 8) * 0x1p-24f;
    bad += d[i] != (double)((((uint64_t)w[0] << 32) | w[1]) >> 11) * 0x1p-53;
    bad += tpu_f16_to_f32(h[i]) != (float)(w[0] >> 21) * 0x1p-11f;
    bad += tpu_bf16_to_f32(b[i]) != (float)(w[0] >> 24) * 0x1p-8f;
    bad += !(f[i] >= 0 && f[i] < 1 && d[i] >= 0 && d[i] < 1);
  }
  CHECK(bad == 0);
  CHECK_OK(tpu_kernel_rng(TPU_RNG_NORMAL, seed, offset, &bf, g_pool));
  CHECK_OK(tpu_kernel_rng(TPU_RNG_NORMAL, seed, offset, &bd, g_pool));
  for (int i = 0; i < N; i++) {
    uint32_t w[4];
    philox_at(seed, offset + (uint64_t)i, w);
    float u1 = (float)((w[0] >> 8) + 1) * 0x1p-24f, u2 = (float)(w[1] >> 8) * 0x1p-24f;
    bad += f[i] != sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
    double v1 = (double)((((uint64_t)w[0] << 32) | w[1]) >> 11) * 0x1p-53 + 0x1p-53;
    double v2 = (double)((((uint64_t)w[2] << 32) | w[3]) >> 11) * 0x1p-53;
    bad += d[i] != sqrt(-2.0 * log(v1)) * cos(6.283185307179586 * v2);
  }
  CHECK(bad == 0);
  /* BITS into narrower integers keeps the low bits */
  int8_t b8[N];
  tpu_buf_t bb8 = vec1(b8, TPU_I8, N);
  CHECK_OK(tpu_kernel_rng(TPU_RNG_BITS, seed, offset, &bb8, g_pool));
  for (int i = 0; i < N; i++) bad += b8[i] != (int8_t)(uint8_t)bits[i];
  CHECK(bad == 0);
}

static void moments(const float *x, int64_t n, double *mean, double *var, double *kurt) {
  double s = 0, s2 = 0, s4 = 0;
  for (int64_t i = 0; i < n; i++) s += x[i];
  *mean = s / (double)n;
  for (int64_t i = 0; i < n; i++) {
    double d = x[i] - *mean;
    s2 += d * d;
    s4 += d * d * d * d;
  }
  *var = s2 / (double)n;
  *kurt = s4 / (double)n / (*var * *var);
}

TEST(distribution_statistics) {
  enum { N = 1 << 20 };
  float *x = malloc(N * sizeof *x);
  tpu_buf_t b = vec1(x, TPU_F32, N);
  double mean, var, kurt;
  CHECK_OK(tpu_kernel_rng(TPU_RNG_UNIFORM, 1234, 0, &b, g_pool));
  moments(x, N, &mean, &var, &kurt);
  printf("  uniform f32: mean %.5f var %.5f (1/12 = %.5f)\n", mean, var, 1.0 / 12);
  CHECK(fabs(mean - 0.5) < 0.002 && fabs(var - 1.0 / 12) < 0.001);
  int buckets[16] = {0};
  for (int i = 0; i < N; i++) buckets[(int)(x[i] * 16)]++;
  double chi2 = 0;
  for (int i = 0; i < 16; i++) chi2 += (buckets[i] - N / 16.0) * (buckets[i] - N / 16.0) / (N / 16.0);
  CHECK(chi2 < 40); /* 15 degrees of freedom: p ~ 5e-4 */
  CHECK_OK(tpu_kernel_rng(TPU_RNG_NORMAL, 1234, 0, &b, g_pool));
  moments(x, N, &mean, &var, &kurt);
  printf("  normal f32: mean %.5f var %.5f kurtosis %.3f\n", mean, var, kurt);
  CHECK(fabs(mean) < 0.005 && fabs(var - 1) < 0.01 && fabs(kurt - 3) < 0.05);
  int64_t *bits = malloc(N * sizeof *bits);
  tpu_buf_t bb = vec1(bits, TPU_I64, N);
  CHECK_OK(tpu_kernel_rng(TPU_RNG_BITS, 99, 7, &bb, g_pool));
  int ones[32] = {0};
  bool in_range = true;
  for (int i = 0; i < N; i++) {
    in_range &= bits[i] >= 0 && bits[i] <= 0xffffffffll;
    for (int k = 0; k < 32; k++) ones[k] += (int)(bits[i] >> k & 1);
  }
  CHECK(in_range);
  for (int k = 0; k < 32; k++) CHECK(fabs(ones[k] / (double)N - 0.5) < 0.003);
  /* another seed gives another stream */
  int64_t other[64];
  tpu_buf_t bo = vec1(other, TPU_I64, 64);
  CHECK_OK(tpu_kernel_rng(TPU_RNG_BITS, 100, 7, &bo, g_pool));
  int same = 0;
  for (int i = 0; i < 64; i++) same += other[i] == bits[i];
  CHECK(same < 2);
  free(x);
  free(bits);
}

TEST(split_anyhow_is_bit_identical) {
  enum { R = 300, C = 701, N = R * C };
  float *a = malloc(N * 4), *b = malloc(N * 4), *t = malloc(N * 4);
  tpu_buf_t ba = vec1(a, TPU_F32, N), bb = vec1(b, TPU_F32, N);
  for (int dist = 0; dist < 2; dist++) {
    CHECK_OK(tpu_kernel_rng((tpu_rng_dist_t)dist, 5, 1000, &ba, g_pool));
    CHECK_OK(tpu_kernel_rng((tpu_rng_dist_t)dist, 5, 1000, &bb, NULL));
    CHECK(memcmp(a, b, N * 4) == 0);
    /* two calls with offsets offset and offset + k */
    tpu_buf_t lo = vec1(b, TPU_F32, 12345), hi = vec1(b + 12345, TPU_F32, N - 12345);
    CHECK_OK(tpu_kernel_rng((tpu_rng_dist_t)dist, 5, 1000, &lo, g_pool));
    CHECK_OK(tpu_kernel_rng((tpu_rng_dist_t)dist, 5, 1000 + 12345, &hi, g_pool));
    CHECK(memcmp(a, b, N * 4) == 0);
    /* a transposed output gets the value of its row-major logical index */
    tpu_buf_t tr;
    memset(&tr, 0, sizeof tr);
    tr.data = t;
    tr.dtype = TPU_F32;
    tr.rank = 2;
    tr.dims[0] = R;
    tr.dims[1] = C;
    tr.strides[0] = 1;
    tr.strides[1] = R;
    CHECK_OK(tpu_kernel_rng((tpu_rng_dist_t)dist, 5, 1000, &tr, g_pool));
    int bad = 0;
    for (int i = 0; i < R; i++)
      for (int j = 0; j < C; j++) bad += t[j * R + i] != a[i * C + j];
    CHECK(bad == 0);
    /* every ISA table gives the same numbers */
    for (int isa = 0; isa < TPU_ISA_COUNT; isa++) {
      const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa);
      if (!v) continue;
      tpu_vec_ops_force(v);
      CHECK_OK(tpu_kernel_rng((tpu_rng_dist_t)dist, 5, 1000, &bb, g_pool));
      CHECK(memcmp(a, b, N * 4) == 0);
    }
    tpu_vec_ops_force(NULL);
  }
  free(a);
  free(b);
  free(t);
}

TEST(rng_errors) {
  int32_t i[4];
  float f[4];
  tpu_buf_t bi = vec1(i, TPU_I32, 4), bf = vec1(f, TPU_F32, 4);
  CHECK(tpu_kernel_rng(TPU_RNG_UNIFORM, 1, 0, &bi, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "kernel_rng: RNG UNIFORM is not defined for dtype i32");
  CHECK(tpu_kernel_rng(TPU_RNG_BITS, 1, 0, &bf, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "BITS");
  CHECK(tpu_kernel_rng((tpu_rng_dist_t)7, 1, 0, &bf, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_kernel_rng(TPU_RNG_UNIFORM, 1, 0, NULL, g_pool) == TPU_ERR_INVALID_ARGUMENT);
  tpu_buf_t empty = vec1(NULL, TPU_F32, 0);
  CHECK_OK(tpu_kernel_rng(TPU_RNG_NORMAL, 1, 0, &empty, g_pool));
}

int main(void) {
  CHECK_OK(tpu_pool_create(3, tpu_allocator_system(), &g_pool));
  RUN(philox_known_answers);
  RUN(vec_philox_matches_scalar_across_carries);
  RUN(element_mapping_as_documented);
  RUN(distribution_statistics);
  RUN(split_anyhow_is_bit_identical);
  RUN(rng_errors);
  tpu_pool_destroy(g_pool);
  return check_report();
}
