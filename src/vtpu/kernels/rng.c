/* rng.c: tpu_kernel_rng, counter-based random numbers (include/tpu/kernels.h, ir.h RNG).
 *
 * Generator: Philox4x32-10 (Salmon et al., SC'11), multipliers 0xD2511F53, 0xCD9E8D57,
 * Weyl key increments 0x9E3779B9, 0xBB67AE85.
 *
 * Mapping (fixed; the same however the work is split over threads or segments):
 *   element i, the row-major index into out's shape, uses the 128-bit counter
 *     c = offset + i (mod 2^64):  ctr = {lo32(c), hi32(c), 0, 0},
 *   with key {lo32(seed), hi32(seed)}, giving words w0, w1, w2, w3. Element i then is
 *   UNIFORM   in [0, 1) with as many random bits as the dtype holds exactly:
 *             f32 (w0 >> 8) 2^-24, bf16 (w0 >> 24) 2^-8, f16 (w0 >> 21) 2^-11,
 *             f64 ((w0 << 32 | w1) >> 11) 2^-53.
 *   NORMAL    Box-Muller, one value per element: sqrt(-2 log u1) cos(2 pi u2) with
 *             u1 in (0, 1] and u2 in [0, 1): for f32, bf16 and f16 u1 = ((w0 >> 8) + 1)
 *             2^-24, u2 = (w1 >> 8) 2^-24, computed in f32 (then rounded to nearest even
 *             for bf16/f16); for f64 u1 = (((w0 << 32 | w1) >> 11) + 1) 2^-53 and u2 from
 *             w2, w3 the same way, computed in f64.
 *   BITS      w0 zero-extended into an integer dtype (i64 holds it whole; narrower
 *             integers keep the low bits).
 * Callers advance offset by the element count between calls so draws never share a
 * counter.
 */
#include <math.h>

#include "vtpu/kernels/ew.h"

#define KERNEL "kernel_rng"

void tpu_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

typedef struct rng_ctx {
  const tpu_vec_ops_t *v;
  tpu_rng_dist_t dist;
  tpu_dtype_t dt;
  uint64_t seed, offset;
} rng_ctx;

static double u53(uint32_t hi, uint32_t lo) {
  return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1p-53;
}

static void rng_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                     int64_t pos) {
  const rng_ctx *c = arg;
  uint32_t w[4][TPU_EW_BLOCK];
  tpu_ew_block_t blk;
  const bool f64 = c->dt == TPU_F64;
  for (int64_t i = 0; i < n; i += TPU_EW_BLOCK) {
    int64_t m = n - i < TPU_EW_BLOCK ? n - i : TPU_EW_BLOCK;
    bool four = f64 && c->dist == TPU_RNG_NORMAL;
    c->v->philox(c->offset + (uint64_t)(pos + i), c->seed, m, w[0],
                 (f64 || c->dist == TPU_RNG_NORMAL) ? w[1] : NULL, four ? w[2] : NULL,
                 four ? w[3] : NULL);
    tpu_ct_t ct;
    if (c->dist == TPU_RNG_BITS) {
      ct = TPU_CT_I64;
      for (int64_t j = 0; j < m; j++) blk.i[j] = w[0][j];
    } else if (f64) {
      ct = TPU_CT_F64;
      if (c->dist == TPU_RNG_UNIFORM) {
        for (int64_t j = 0; j < m; j++) blk.d[j] = u53(w[0][j], w[1][j]);
      } else {
        for (int64_t j = 0; j < m; j++) {
          double u1 = u53(w[0][j], w[1][j]) + 0x1p-53, u2 = u53(w[2][j], w[3][j]);
          blk.d[j] = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        }
      }
    } else {
      ct = TPU_CT_F32;
      if (c->dist == TPU_RNG_UNIFORM) {
        int shift = c->dt == TPU_BF16 ? 24 : c->dt == TPU_F16 ? 21 : 8;
        float scale = c->dt == TPU_BF16 ? 0x1p-8f : c->dt == TPU_F16 ? 0x1p-11f : 0x1p-24f;
        for (int64_t j = 0; j < m; j++) blk.f[j] = (float)(w[0][j] >> shift) * scale;
      } else {
        for (int64_t j = 0; j < m; j++) {
          float u1 = (float)((w[0][j] >> 8) + 1) * 0x1p-24f;
          float u2 = (float)(w[1][j] >> 8) * 0x1p-24f;
          blk.f[j] = sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
        }
      }
    }
    tpu_ew_store(c->v, ct, &blk, 1, ptrs[0] + i * strides[0], strides[0], c->dt, m);
  }
}

tpu_status_t tpu_kernel_rng(tpu_rng_dist_t dist, uint64_t seed, uint64_t offset,
                            const tpu_buf_t *out, tpu_pool_t *pool) {
  const char *names[1] = {"out"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, KERNEL, out, NULL, names, 0, true));
  bool ok;
  switch (dist) {
    case TPU_RNG_UNIFORM: case TPU_RNG_NORMAL: ok = tpu_dtype_is_float(out->dtype); break;
    case TPU_RNG_BITS: ok = tpu_dtype_is_integer(out->dtype); break;
    default:
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": distribution %d", (int)dist);
  }
  if (!ok) {
    static const char *const kDist[] = {"UNIFORM", "NORMAL", "BITS"};
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": RNG %s is not defined for dtype %s",
                          kDist[dist], tpu_dtype_name(out->dtype));
  }
  rng_ctx c = {tpu_vec_ops(), dist, out->dtype, seed, offset};
  tpu_ew_iter_run(&it, pool, rng_loop, &c);
  return TPU_OK;
}
