/* reduce_portable.c: the portable C reduction kernels behind tpu_reduce_isa_t, and the
 * run-time choice between them and the AVX2 / AVX-512 tables.
 *
 * Sums keep 16 independent lanes (which the compiler may vectorize) and add the lanes
 * pairwise at the end of the block; MAX/MIN propagate NaN.
 */
#include <math.h>

#include "vtpu/kernels/reduce_internal.h"

#define LANES 16

static float lanes_fold(tpu_reduce_kind_t kind, float *acc) {
  for (int w = LANES / 2; w >= 1; w /= 2) {
    for (int i = 0; i < w; i++) acc[i] = tpu_reduce_combine_f32(kind, acc[i], acc[i + w]);
  }
  return acc[0];
}

/* One template for f32 and bf16 inputs: LOAD(i) reads element i as f32. */
#define ROW_KERNEL(NAME, T, LOAD)                                                        \
  static float NAME(tpu_reduce_kind_t kind, const T *x, int64_t n) {                    \
    float acc[LANES];                                                                    \
    float id = tpu_reduce_identity_f32(kind);                                           \
    for (int l = 0; l < LANES; l++) acc[l] = id;                                         \
    int64_t i = 0;                                                                       \
    switch (kind) {                                                                      \
      case TPU_REDUCE_SUM:                                                               \
        for (; i + LANES <= n; i += LANES)                                               \
          for (int l = 0; l < LANES; l++) acc[l] += LOAD(i + l);                         \
        for (; i < n; i++) acc[0] += LOAD(i);                                            \
        break;                                                                           \
      case TPU_REDUCE_PROD:                                                              \
        for (; i + LANES <= n; i += LANES)                                               \
          for (int l = 0; l < LANES; l++) acc[l] *= LOAD(i + l);                         \
        for (; i < n; i++) acc[0] *= LOAD(i);                                            \
        break;                                                                           \
      case TPU_REDUCE_MAX:                                                               \
        for (; i + LANES <= n; i += LANES)                                               \
          for (int l = 0; l < LANES; l++) {                                              \
            float v = LOAD(i + l);                                                       \
            acc[l] = (v > acc[l] || v != v) ? v : acc[l];                                \
          }                                                                              \
        for (; i < n; i++) {                                                             \
          float v = LOAD(i);                                                             \
          acc[0] = (v > acc[0] || v != v) ? v : acc[0];                                  \
        }                                                                                \
        break;                                                                           \
      case TPU_REDUCE_MIN:                                                               \
        for (; i + LANES <= n; i += LANES)                                               \
          for (int l = 0; l < LANES; l++) {                                              \
            float v = LOAD(i + l);                                                       \
            acc[l] = (v < acc[l] || v != v) ? v : acc[l];                                \
          }                                                                              \
        for (; i < n; i++) {                                                             \
          float v = LOAD(i);                                                             \
          acc[0] = (v < acc[0] || v != v) ? v : acc[0];                                  \
        }                                                                                \
        break;                                                                           \
      default: break;                                                                    \
    }                                                                                    \
    return lanes_fold(kind, acc);                                                        \
  }

#define LOAD_F32(i) (x[(i)])
#define LOAD_BF16(i) tpu_bf16_to_f32(x[(i)])
ROW_KERNEL(row_f32, float, LOAD_F32)
ROW_KERNEL(row_bf16, uint16_t, LOAD_BF16)

#define COL_KERNEL(NAME, T, LOAD)                                                        \
  static void NAME(tpu_reduce_kind_t kind, const T *x, int64_t ld, int64_t rows,        \
                   int64_t w, float *acc) {                                              \
    for (int64_t r = 0; r < rows; r++) {                                                 \
      const T *row = x + r * ld;                                                         \
      switch (kind) {                                                                    \
        case TPU_REDUCE_SUM:                                                             \
          for (int64_t j = 0; j < w; j++) acc[j] += LOAD(row, j);                        \
          break;                                                                         \
        case TPU_REDUCE_PROD:                                                            \
          for (int64_t j = 0; j < w; j++) acc[j] *= LOAD(row, j);                        \
          break;                                                                         \
        case TPU_REDUCE_MAX:                                                             \
          for (int64_t j = 0; j < w; j++) {                                              \
            float v = LOAD(row, j);                                                      \
            if (v > acc[j] || v != v) acc[j] = v;                                        \
          }                                                                              \
          break;                                                                         \
        case TPU_REDUCE_MIN:                                                             \
          for (int64_t j = 0; j < w; j++) {                                              \
            float v = LOAD(row, j);                                                      \
            if (v < acc[j] || v != v) acc[j] = v;                                        \
          }                                                                              \
          break;                                                                         \
        default: return;                                                                 \
      }                                                                                  \
    }                                                                                    \
  }

#define CLOAD_F32(row, j) ((row)[(j)])
#define CLOAD_BF16(row, j) tpu_bf16_to_f32((row)[(j)])
COL_KERNEL(col_f32, float, CLOAD_F32)
COL_KERNEL(col_bf16, uint16_t, CLOAD_BF16)

static void f16_to_f32(const uint16_t *x, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++) out[i] = tpu_f16_to_f32(x[i]);
}

static const tpu_reduce_isa_t kPortable = {
    .name = "portable",
    .row_f32 = row_f32,
    .row_bf16 = row_bf16,
    .col_f32 = col_f32,
    .col_bf16 = col_bf16,
    .f16_to_f32 = f16_to_f32,
};

const tpu_reduce_isa_t *tpu_reduce_isa_portable(void) { return &kPortable; }

static const tpu_reduce_isa_t *g_forced;

void tpu_reduce_isa_force(const tpu_reduce_isa_t *isa) { g_forced = isa; }

const tpu_reduce_isa_t *tpu_reduce_isa(void) {
  if (g_forced) return g_forced;
  const tpu_cpu_features_t *f = tpu_cpu_features();
  const tpu_reduce_isa_t *t = NULL;
  if (f && f->avx512f) t = tpu_reduce_isa_avx512();
  if (!t && f && f->avx2_fma) t = tpu_reduce_isa_avx2();
  return t ? t : &kPortable;
}
