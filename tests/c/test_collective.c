/* test_collective.c: the reduction kernels (every dtype class and op) and the collectives
 * across the chips of one process, against values computed by hand. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "tpu/collective.h"
#include "tpu/dtype.h"

TEST(reduce_f32_ops) {
  float a[4] = {1, -2, 3, NAN}, b[4] = {4, 5, -6, 1};
  float d[4];
  memcpy(d, a, sizeof(d));
  tpu_coll_reduce(TPU_F32, TPU_RED_SUM, d, b, 4);
  CHECK(d[0] == 5 && d[1] == 3 && d[2] == -3 && isnan(d[3]));
  memcpy(d, a, sizeof(d));
  tpu_coll_reduce(TPU_F32, TPU_RED_MAX, d, b, 4);
  CHECK(d[0] == 4 && d[1] == 5 && d[2] == 3 && isnan(d[3])); /* NaN propagates */
  memcpy(d, a, sizeof(d));
  tpu_coll_reduce(TPU_F32, TPU_RED_MIN, d, b, 4);
  CHECK(d[0] == 1 && d[1] == -2 && d[2] == -6 && isnan(d[3]));
  memcpy(d, a, sizeof(d));
  tpu_coll_reduce(TPU_F32, TPU_RED_PRODUCT, d, b, 3);
  CHECK(d[0] == 4 && d[1] == -10 && d[2] == -18);
  tpu_coll_scale(TPU_F32, d, 3, 2);
  CHECK(d[0] == 2 && d[1] == -5 && d[2] == -9);
}

TEST(reduce_integers_wrap_and_bitwise) {
  int32_t a[3] = {INT32_MAX, 6, -7}, b[3] = {1, 3, 2};
  tpu_coll_reduce(TPU_I32, TPU_RED_SUM, a, b, 3);
  CHECK(a[0] == INT32_MIN && a[1] == 9 && a[2] == -5); /* wraps like torch */
  uint8_t u[3] = {0x0f, 0xf0, 0xff}, v[3] = {0x3c, 0x3c, 0x3c};
  tpu_coll_reduce(TPU_U8, TPU_RED_BXOR, u, v, 3);
  CHECK(u[0] == 0x33 && u[1] == 0xcc && u[2] == 0xc3);
  int64_t x[2] = {7, -9};
  tpu_coll_scale(TPU_I64, x, 2, 2);
  CHECK(x[0] == 3 && x[1] == -4); /* truncating, as NCCL's integer average */
  uint8_t p[3] = {1, 0, 1}, q[3] = {1, 1, 0};
  tpu_coll_reduce(TPU_BOOL, TPU_RED_SUM, p, q, 3);
  CHECK(p[0] == 1 && p[1] == 1 && p[2] == 1);
  CHECK(tpu_coll_check(TPU_F32, TPU_RED_BAND) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "band");
  CHECK_OK(tpu_coll_check(TPU_I8, TPU_RED_BOR));
}

TEST(reduce_bf16_rounds_once_per_step) {
  /* 1 + 2^-8 is not representable in bf16 (8 mantissa bits incl. hidden: step 2^-7 at 1):
   * 1 + 2^-8 rounds to even, 1.0. */
  uint16_t d[2] = {tpu_f32_to_bf16(1.0f), tpu_f32_to_bf16(3.0f)};
  uint16_t s[2] = {tpu_f32_to_bf16(0x1p-8f), tpu_f32_to_bf16(-1.0f)};
  tpu_coll_reduce(TPU_BF16, TPU_RED_SUM, d, s, 2);
  CHECK(tpu_bf16_to_f32(d[0]) == 1.0f && tpu_bf16_to_f32(d[1]) == 2.0f);
  tpu_coll_scale(TPU_BF16, d, 2, 2);
  CHECK(tpu_bf16_to_f32(d[0]) == 0.5f && tpu_bf16_to_f32(d[1]) == 1.0f);
}

TEST(local_chip_collectives) {
  enum { N = 3, C = 70000 }; /* more than one 64 KiB block */
  float *bufs[N];
  for (int c = 0; c < N; c++) {
    bufs[c] = malloc(C * sizeof(float));
    for (int i = 0; i < C; i++) bufs[c][i] = (float)(c + 1) * (float)(i % 7);
  }
  CHECK_OK(tpu_local_all_reduce((void *const *)bufs, N, C, TPU_F32, TPU_RED_AVG));
  int ok = 1;
  for (int c = 0; c < N; c++)
    for (int i = 0; i < C; i++) ok &= bufs[c][i] == 2.0f * (float)(i % 7); /* (1+2+3)/3 */
  CHECK(ok);
  bufs[1][5] = 42;
  CHECK_OK(tpu_local_broadcast((void *const *)bufs, N, C * sizeof(float), 1));
  CHECK(bufs[0][5] == 42 && bufs[2][5] == 42);
  CHECK(tpu_local_broadcast((void *const *)bufs, N, 4, 3) == TPU_ERR_OUT_OF_RANGE);
  /* all_gather of 2 floats per chip, reduce_scatter of 2 per chip. */
  float in[N][2 * N], out[N][2 * N];
  for (int c = 0; c < N; c++)
    for (int i = 0; i < 2 * N; i++) in[c][i] = (float)(10 * c + i);
  const void *ins[N] = {in[0], in[1], in[2]};
  void *outs[N] = {out[0], out[1], out[2]};
  CHECK_OK(tpu_local_all_gather(ins, outs, N, 2 * sizeof(float)));
  CHECK(out[2][0] == 0 && out[2][1] == 1 && out[2][2] == 10 && out[2][5] == 21);
  CHECK_OK(tpu_local_reduce_scatter(ins, outs, N, 2, TPU_F32, TPU_RED_SUM));
  /* chip 1 gets sum over k of in[k][2..3] = (2+12+22, 3+13+23) */
  CHECK(out[1][0] == 36 && out[1][1] == 39);
  for (int c = 0; c < N; c++) free(bufs[c]);
}

int main(void) {
  RUN(reduce_f32_ops);
  RUN(reduce_integers_wrap_and_bitwise);
  RUN(reduce_bf16_rounds_once_per_step);
  RUN(local_chip_collectives);
  return check_report();
}
