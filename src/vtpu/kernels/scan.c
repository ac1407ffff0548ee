/* scan.c: tpu_kernel_scan, inclusive cumulative SUM / PROD / MAX / MIN along one dim
 * (cumsum, cumprod, cummax, cummin values), O(n).
 *
 * out[..., i, ...] = x[..., 0, ...] op ... op x[..., i, ...], out with x's shape (its dtype
 * may differ: cumsum of int32 or bool into int64). Accumulation: f32 for f16/bf16 (the
 * TPU's vector unit), f64 for f32 and f64 (as PyTorch on CPU, so long f32 cumsums stay
 * accurate), i64 with wrapping for integers and bool. MAX/MIN propagate NaN: once a NaN
 * is seen, every later output is NaN (as torch.cummax).
 *
 * Two shapes of work, both parallel:
 *   lines    the scan dim is the innermost (or no other dim is contiguous): each line is
 *            converted in chunks into a scratch array, scanned with a carry, written back;
 *   columns  another dim is contiguous in x and out: tiles of SCAN_W columns keep their
 *            running values in an array while the scan walks down the rows.
 */
#include <stdlib.h>

#include "vtpu/kernels/strided.h"

#define CHUNK 1024
#define SCAN_W 256

typedef enum acc_class { ACC_F32, ACC_F64, ACC_I64 } acc_class_t;

typedef struct scan {
  tpu_reduce_kind_t kind;
  acc_class_t cls;
  const tpu_buf_t *x, *out;
  int64_t n, sx, so;      /* scan length and strides */
  tpu_loop_t other;       /* the other dims: buffers 0 = x, 1 = out */
  bool columns;
  int64_t c, tiles;       /* columns mode: innermost other dim and its tiles */
} scan_t;

/* ---- conversions between buffers and scratch arrays (switch hoisted out of loops) ----- */

static void load_run(const scan_t *s, int64_t off, int64_t st, int64_t n, void *dst) {
  const void *x = s->x->data;
  tpu_dtype_t dt = s->x->dtype;
  if (s->cls == ACC_F32) {
    float *o = dst;
    if (dt == TPU_BF16) {
      const uint16_t *p = (const uint16_t *)x + off;
      for (int64_t i = 0; i < n; i++) o[i] = tpu_bf16_to_f32(p[i * st]);
    } else {
      const uint16_t *p = (const uint16_t *)x + off;
      for (int64_t i = 0; i < n; i++) o[i] = tpu_f16_to_f32(p[i * st]);
    }
  } else if (s->cls == ACC_F64) {
    double *o = dst;
    if (dt == TPU_F32) {
      const float *p = (const float *)x + off;
      for (int64_t i = 0; i < n; i++) o[i] = p[i * st];
    } else {
      const double *p = (const double *)x + off;
      for (int64_t i = 0; i < n; i++) o[i] = p[i * st];
    }
  } else {
    int64_t *o = dst;
    for (int64_t i = 0; i < n; i++) o[i] = tpu_load_i64(x, dt, off + i * st);
  }
}

static void store_run(const scan_t *s, int64_t off, int64_t st, int64_t n, const void *src) {
  void *y = s->out->data;
  tpu_dtype_t dt = s->out->dtype;
  if (s->cls == ACC_I64) {
    const int64_t *a = src;
    for (int64_t i = 0; i < n; i++) tpu_store_i64(y, dt, off + i * st, a[i]);
  } else if (s->cls == ACC_F32) {
    const float *a = src;
    if (dt == TPU_BF16) {
      uint16_t *p = (uint16_t *)y + off;
      for (int64_t i = 0; i < n; i++) p[i * st] = tpu_f32_to_bf16(a[i]);
    } else {
      for (int64_t i = 0; i < n; i++) tpu_store_f64(y, dt, off + i * st, a[i]);
    }
  } else {
    const double *a = src;
    if (dt == TPU_F32) {
      float *p = (float *)y + off;
      for (int64_t i = 0; i < n; i++) p[i * st] = (float)a[i];
    } else {
      for (int64_t i = 0; i < n; i++) tpu_store_f64(y, dt, off + i * st, a[i]);
    }
  }
}

/* ---- the scan arithmetic ------------------------------------------------------------------
 * step_T:  across columns, acc[j] = acc[j] op v[j], then v[j] = acc[j] (first: acc = v);
 * line_T:  along an array, v[j] = carry = carry op v[j] (first: carry starts at v[0]). */

#define FLOAT_SCAN(T)                                                                  \
  static void step_##T(tpu_reduce_kind_t kind, T *acc, T *v, int64_t n, bool first) {   \
    if (first) {                                                                       \
      for (int64_t j = 0; j < n; j++) acc[j] = v[j];                                   \
      return;                                                                          \
    }                                                                                  \
    switch (kind) {                                                                    \
      case TPU_REDUCE_SUM: for (int64_t j = 0; j < n; j++) v[j] = acc[j] += v[j]; break; \
      case TPU_REDUCE_PROD: for (int64_t j = 0; j < n; j++) v[j] = acc[j] *= v[j]; break; \
      case TPU_REDUCE_MAX:                                                             \
        for (int64_t j = 0; j < n; j++) {                                              \
          if (acc[j] == acc[j] && (v[j] > acc[j] || v[j] != v[j])) acc[j] = v[j];      \
          v[j] = acc[j];                                                               \
        }                                                                              \
        break;                                                                         \
      default:                                                                         \
        for (int64_t j = 0; j < n; j++) {                                              \
          if (acc[j] == acc[j] && (v[j] < acc[j] || v[j] != v[j])) acc[j] = v[j];      \
          v[j] = acc[j];                                                               \
        }                                                                              \
        break;                                                                         \
    }                                                                                  \
  }                                                                                    \
  static void line_##T(tpu_reduce_kind_t kind, T *carry, T *v, int64_t n, bool first) { \
    int64_t j = 0;                                                                     \
    T a = first ? v[j++] : *carry;                                                     \
    switch (kind) {                                                                    \
      case TPU_REDUCE_SUM: for (; j < n; j++) v[j] = a += v[j]; break;                 \
      case TPU_REDUCE_PROD: for (; j < n; j++) v[j] = a *= v[j]; break;                \
      case TPU_REDUCE_MAX:                                                             \
        for (; j < n; j++) {                                                           \
          if (a == a && (v[j] > a || v[j] != v[j])) a = v[j];                          \
          v[j] = a;                                                                    \
        }                                                                              \
        break;                                                                         \
      default:                                                                         \
        for (; j < n; j++) {                                                           \
          if (a == a && (v[j] < a || v[j] != v[j])) a = v[j];                          \
          v[j] = a;                                                                    \
        }                                                                              \
        break;                                                                         \
    }                                                                                  \
    *carry = a;                                                                        \
  }
FLOAT_SCAN(float)
FLOAT_SCAN(double)

static int64_t int_op(tpu_reduce_kind_t kind, int64_t a, int64_t v) {
  switch (kind) {
    case TPU_REDUCE_SUM: return (int64_t)((uint64_t)a + (uint64_t)v);
    case TPU_REDUCE_PROD: return (int64_t)((uint64_t)a * (uint64_t)v);
    case TPU_REDUCE_MAX: return v > a ? v : a;
    default: return v < a ? v : a;
  }
}

static void step_int64_t(tpu_reduce_kind_t kind, int64_t *acc, int64_t *v, int64_t n,
                         bool first) {
  for (int64_t j = 0; j < n; j++) {
    acc[j] = first ? v[j] : int_op(kind, acc[j], v[j]);
    v[j] = acc[j];
  }
}

static void line_int64_t(tpu_reduce_kind_t kind, int64_t *carry, int64_t *v, int64_t n,
                         bool first) {
  int64_t j = 0;
  int64_t a = first ? v[j++] : *carry;
  for (; j < n; j++) v[j] = a = int_op(kind, a, v[j]);
  *carry = a;
}

static void step(const scan_t *s, void *acc, void *v, int64_t n, bool first) {
  switch (s->cls) {
    case ACC_F32: step_float(s->kind, acc, v, n, first); return;
    case ACC_F64: step_double(s->kind, acc, v, n, first); return;
    default: step_int64_t(s->kind, acc, v, n, first); return;
  }
}

static void scan_chunk(const scan_t *s, void *carry, void *v, int64_t n, bool first) {
  switch (s->cls) {
    case ACC_F32: line_float(s->kind, carry, v, n, first); return;
    case ACC_F64: line_double(s->kind, carry, v, n, first); return;
    default: line_int64_t(s->kind, carry, v, n, first); return;
  }
}

/* ---- drivers ----------------------------------------------------------------------------- */

static void lines_task(void *ctx, int64_t begin, int64_t end) {
  const scan_t *s = ctx;
  _Alignas(64) unsigned char buf[CHUNK * 8];
  _Alignas(8) unsigned char carry[8] = {0};
  tpu_loop_pos_t pos;
  tpu_loop_seek(&s->other, s->other.rank, begin, &pos);
  for (int64_t l = begin; l < end; l++) {
    for (int64_t i = 0; i < s->n; i += CHUNK) {
      int64_t cnt = s->n - i < CHUNK ? s->n - i : CHUNK;
      load_run(s, pos.off[0] + i * s->sx, s->sx, cnt, buf);
      scan_chunk(s, carry, buf, cnt, i == 0);
      store_run(s, pos.off[1] + i * s->so, s->so, cnt, buf);
    }
    tpu_loop_step(&s->other, s->other.rank, &pos);
  }
}

static void columns_task(void *ctx, int64_t begin, int64_t end) {
  const scan_t *s = ctx;
  _Alignas(64) unsigned char acc[SCAN_W * 8], row[SCAN_W * 8];
  int last = s->other.rank - 1;
  for (int64_t t = begin; t < end; t++) {
    tpu_loop_pos_t pos;
    tpu_loop_seek(&s->other, last, t / s->tiles, &pos);
    int64_t j0 = (t % s->tiles) * SCAN_W;
    int64_t w = s->c - j0 < SCAN_W ? s->c - j0 : SCAN_W;
    for (int64_t i = 0; i < s->n; i++) {
      load_run(s, pos.off[0] + j0 + i * s->sx, 1, w, row);
      step(s, acc, row, w, i == 0);
      store_run(s, pos.off[1] + j0 + i * s->so, 1, w, row);
    }
  }
}

tpu_status_t tpu_kernel_scan(tpu_reduce_kind_t kind, int dim, const tpu_buf_t *x,
                             const tpu_buf_t *out, tpu_pool_t *pool) {
  static const char *K = "scan";
  int64_t nx, nout;
  TPU_RETURN_IF_ERROR(tpu_buf_check(x, K, "x", &nx));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &nout));
  if ((unsigned)kind > TPU_REDUCE_MIN) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: kind %d is not SUM, PROD, MAX or MIN",
                          K, (int)kind);
  }
  if (x->rank == 0 ? dim != 0 : (dim < 0 || dim >= x->rank)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: dim %d out of range for rank %d", K,
                          dim, x->rank);
  }
  if (out->rank != x->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out rank %d != x rank %d", K,
                          out->rank, x->rank);
  }
  for (int d = 0; d < x->rank; d++) {
    if (out->dims[d] != x->dims[d]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out dim %d is %lld, x has %lld", K,
                            d, (long long)out->dims[d], (long long)x->dims[d]);
    }
  }
  if (nx == 0) return TPU_OK;
  scan_t s = {.kind = kind, .x = x, .out = out};
  if (x->dtype == TPU_BF16 || x->dtype == TPU_F16) {
    s.cls = ACC_F32;
  } else if (x->dtype == TPU_F32 || x->dtype == TPU_F64) {
    s.cls = ACC_F64;
  } else {
    s.cls = ACC_I64;
  }
  s.n = x->rank ? x->dims[dim] : 1;
  s.sx = x->rank ? x->strides[dim] : 0;
  s.so = x->rank ? out->strides[dim] : 0;
  s.other.nbufs = 2;
  for (int d = 0; d < x->rank; d++) {
    if (d == dim) continue;
    s.other.dims[s.other.rank] = x->dims[d];
    s.other.strides[0][s.other.rank] = x->strides[d];
    s.other.strides[1][s.other.rank] = out->strides[d];
    s.other.rank++;
  }
  tpu_loop_simplify(&s.other);
  int64_t lines = nx / s.n;
  int last = s.other.rank - 1;
  s.columns = last >= 0 && s.other.strides[0][last] == 1 && s.other.strides[1][last] == 1 &&
              s.other.dims[last] >= 8 && s.sx != 1;
  if (s.columns) {
    s.c = s.other.dims[last];
    s.tiles = (s.c + SCAN_W - 1) / SCAN_W;
    int64_t units = (lines / s.c) * s.tiles;
    int64_t per = s.n * SCAN_W;
    tpu_pool_parallel_for(pool, units, per >= 16384 ? 1 : 16384 / per, columns_task, &s);
  } else {
    tpu_pool_parallel_for(pool, lines, s.n >= 16384 ? 1 : 16384 / s.n, lines_task, &s);
  }
  return TPU_OK;
}
