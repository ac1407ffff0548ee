/* reduce_window.c: tpu_kernel_reduce_window, StableHLO reduce_window without base dilation
 * (max/avg pooling: SUM, PROD, MAX, MIN over windows with stride, window dilation and
 * padding, any rank).
 *
 * Output dim d: floor((x_d + pad_lo_d + pad_hi_d - ((window_d - 1) * dilation_d + 1)) /
 * stride_d) + 1 (0 if the dilated window does not fit). Output element o reduces
 * x[o_d * stride_d - pad_lo_d + k_d * dilation_d] over k_d < window_d; positions in the
 * padding take the kind's identity, i.e. are skipped, so a window entirely in padding gives
 * the identity (-inf for MAX). Negative padding crops.
 *
 * The work is split into output rows (all output dims but the last) in parallel. Per row,
 * the in-range window taps of the outer dims are computed once; per output element only
 * the last dim's range. Taps are visited in row-major window order and accumulated in f32
 * for f32/f16/bf16, f64 for f64 and i64 (wrapping) for integers; MAX/MIN propagate NaN.
 */
#include <math.h>

#include "vtpu/kernels/strided.h"

typedef struct rw {
  tpu_reduce_kind_t kind;
  const tpu_buf_t *x, *out;
  int rank;                           /* >= 1 (a scalar is run as shape [1]) */
  int64_t xd[TPU_MAX_RANK], xs[TPU_MAX_RANK], od[TPU_MAX_RANK], os[TPU_MAX_RANK];
  int64_t win[TPU_MAX_RANK], str[TPU_MAX_RANK], dil[TPU_MAX_RANK], lo[TPU_MAX_RANK];
  int64_t row_len;                    /* od[rank - 1] */
} rw_t;

/* The taps k in [0, win) with 0 <= start + k * dil < size: first k and count. */
static void tap_range(int64_t start, int64_t size, int64_t win, int64_t dil, int64_t *k0,
                      int64_t *count) {
  int64_t a = 0;
  if (start < 0) a = (-start + dil - 1) / dil;
  int64_t b; /* one past the last valid k */
  if (start > size - 1) {
    b = 0;
  } else {
    b = dil == 1 ? size - start : (size - 1 - start) / dil + 1;
  }
  if (b > win) b = win;
  *k0 = a;
  *count = b > a ? b - a : 0;
}

/* Per row: taps of the outer dims as an odometer (dims with more than one tap). */
typedef struct taps {
  bool empty;
  int n;                               /* odometer dims */
  int64_t cnt[TPU_MAX_RANK], step[TPU_MAX_RANK];
  int64_t base;                        /* x offset of the first tap, outer dims */
  int64_t obase;                       /* out offset of the row */
} taps_t;

static void row_taps(const rw_t *r, int64_t row, taps_t *t) {
  t->empty = false;
  t->n = 0;
  t->base = 0;
  t->obase = 0;
  for (int d = r->rank - 2; d >= 0; d--) {
    int64_t o = row % r->od[d];
    row /= r->od[d];
    t->obase += o * r->os[d];
    int64_t start = o * r->str[d] - r->lo[d], k0, count;
    tap_range(start, r->xd[d], r->win[d], r->dil[d], &k0, &count);
    if (count == 0) t->empty = true;
    t->base += (start + k0 * r->dil[d]) * r->xs[d];
    if (count > 1) { /* filled innermost-first; reversed below */
      t->cnt[t->n] = count;
      t->step[t->n] = r->dil[d] * r->xs[d];
      t->n++;
    }
  }
  for (int i = 0, j = t->n - 1; i < j; i++, j--) {
    int64_t c = t->cnt[i], s = t->step[i];
    t->cnt[i] = t->cnt[j];
    t->step[i] = t->step[j];
    t->cnt[j] = c;
    t->step[j] = s;
  }
}

/* Visits every tap of one output: STMT sees the x element offset in |off_|. */
#define FOR_TAPS(t, off0, cl, sl, STMT)                                                 \
  do {                                                                                 \
    int64_t ctr_[TPU_MAX_RANK] = {0};                                                  \
    int64_t line_ = (off0);                                                            \
    for (;;) {                                                                         \
      for (int64_t k_ = 0; k_ < (cl); k_++) {                                          \
        int64_t off_ = line_ + k_ * (sl);                                              \
        STMT;                                                                          \
      }                                                                                \
      int j_ = (t)->n - 1;                                                             \
      for (; j_ >= 0; j_--) {                                                          \
        if (++ctr_[j_] < (t)->cnt[j_]) {                                               \
          line_ += (t)->step[j_];                                                      \
          break;                                                                       \
        }                                                                              \
        line_ -= ((t)->cnt[j_] - 1) * (t)->step[j_];                                   \
        ctr_[j_] = 0;                                                                  \
      }                                                                                \
      if (j_ < 0) break;                                                               \
    }                                                                                  \
  } while (0)

/* One template per accumulation type: A acc, LOAD(off) reads x as A, STORE(ooff, acc). */
#define RW_ROWS(NAME, A, LOAD, STORE, IDMAX, IDMIN)                                     \
  static void NAME(const rw_t *r, int64_t row0, int64_t row1) {                        \
    int L = r->rank - 1;                                                               \
    for (int64_t row = row0; row < row1; row++) {                                      \
      taps_t t;                                                                        \
      row_taps(r, row, &t);                                                            \
      for (int64_t o = 0; o < r->row_len; o++) {                                       \
        int64_t start = o * r->str[L] - r->lo[L], k0, cl;                              \
        tap_range(start, r->xd[L], r->win[L], r->dil[L], &k0, &cl);                    \
        int64_t off0 = t.base + (start + k0 * r->dil[L]) * r->xs[L];                   \
        int64_t sl = r->dil[L] * r->xs[L];                                             \
        if (t.empty) cl = 0;                                                           \
        A acc;                                                                         \
        switch (r->kind) {                                                             \
          case TPU_REDUCE_SUM:                                                         \
            acc = 0;                                                                   \
            if (cl) FOR_TAPS(&t, off0, cl, sl, acc += LOAD(off_));                     \
            break;                                                                     \
          case TPU_REDUCE_PROD:                                                        \
            acc = 1;                                                                   \
            if (cl) FOR_TAPS(&t, off0, cl, sl, acc *= LOAD(off_));                     \
            break;                                                                     \
          case TPU_REDUCE_MAX:                                                         \
            acc = IDMAX;                                                               \
            if (cl) FOR_TAPS(&t, off0, cl, sl, {                                       \
                A v_ = LOAD(off_);                                                     \
                if (v_ > acc || v_ != v_) acc = acc != acc ? acc : v_;                 \
              });                                                                      \
            break;                                                                     \
          default:                                                                     \
            acc = IDMIN;                                                               \
            if (cl) FOR_TAPS(&t, off0, cl, sl, {                                       \
                A v_ = LOAD(off_);                                                     \
                if (v_ < acc || v_ != v_) acc = acc != acc ? acc : v_;                 \
              });                                                                      \
            break;                                                                     \
        }                                                                              \
        STORE(t.obase + o * r->os[L], acc);                                            \
      }                                                                                \
    }                                                                                  \
  }

#define XF32(off) (((const float *)r->x->data)[off])
#define XBF16(off) tpu_bf16_to_f32(((const uint16_t *)r->x->data)[off])
#define XF16(off) tpu_f16_to_f32(((const uint16_t *)r->x->data)[off])
#define XF64(off) (((const double *)r->x->data)[off])
#define XINT(off) tpu_load_i64(r->x->data, r->x->dtype, off)
#define STF(ooff, v) tpu_store_f64(r->out->data, r->out->dtype, ooff, v)
#define STF32(ooff, v)                                                                 \
  do {                                                                                 \
    if (r->out->dtype == TPU_F32) {                                                    \
      ((float *)r->out->data)[ooff] = (v);                                             \
    } else {                                                                           \
      tpu_store_f64(r->out->data, r->out->dtype, ooff, (v));                           \
    }                                                                                  \
  } while (0)
#define STI(ooff, v) tpu_store_i64(r->out->data, r->out->dtype, ooff, (int64_t)(v))

RW_ROWS(rows_f32, float, XF32, STF32, -INFINITY, INFINITY)
RW_ROWS(rows_bf16, float, XBF16, STF, -INFINITY, INFINITY)
RW_ROWS(rows_f16, float, XF16, STF, -INFINITY, INFINITY)
RW_ROWS(rows_f64, double, XF64, STF, -INFINITY, INFINITY)

static void rows_int(const rw_t *r, int64_t row0, int64_t row1);

static void rows_task(void *ctx, int64_t begin, int64_t end) {
  const rw_t *r = ctx;
  switch (r->x->dtype) {
    case TPU_F32: rows_f32(r, begin, end); return;
    case TPU_BF16: rows_bf16(r, begin, end); return;
    case TPU_F16: rows_f16(r, begin, end); return;
    case TPU_F64: rows_f64(r, begin, end); return;
    default: rows_int(r, begin, end); return;
  }
}

/* Integer windows: i64 accumulation with wrapping sums and products. */
static void rows_int(const rw_t *r, int64_t row0, int64_t row1) {
  int L = r->rank - 1;
  for (int64_t row = row0; row < row1; row++) {
    taps_t t;
    row_taps(r, row, &t);
    for (int64_t o = 0; o < r->row_len; o++) {
      int64_t start = o * r->str[L] - r->lo[L], k0, cl;
      tap_range(start, r->xd[L], r->win[L], r->dil[L], &k0, &cl);
      int64_t off0 = t.base + (start + k0 * r->dil[L]) * r->xs[L];
      int64_t sl = r->dil[L] * r->xs[L];
      if (t.empty) cl = 0;
      uint64_t acc = r->kind == TPU_REDUCE_PROD ? 1 : 0;
      bool first = true;
      if (cl) {
        FOR_TAPS(&t, off0, cl, sl, {
          int64_t v_ = XINT(off_);
          switch (r->kind) {
            case TPU_REDUCE_SUM: acc += (uint64_t)v_; break;
            case TPU_REDUCE_PROD: acc *= (uint64_t)v_; break;
            case TPU_REDUCE_MAX: if (first || v_ > (int64_t)acc) acc = (uint64_t)v_; break;
            default: if (first || v_ < (int64_t)acc) acc = (uint64_t)v_; break;
          }
          first = false;
        });
      }
      if (first && (r->kind == TPU_REDUCE_MAX || r->kind == TPU_REDUCE_MIN)) {
        /* no taps: the identity of the output dtype */
        static const int64_t lo[TPU_DTYPE_COUNT] = {[TPU_I64] = INT64_MIN, [TPU_I32] = INT32_MIN,
                                                    [TPU_I16] = INT16_MIN, [TPU_I8] = INT8_MIN};
        static const int64_t hi[TPU_DTYPE_COUNT] = {[TPU_I64] = INT64_MAX, [TPU_I32] = INT32_MAX,
                                                    [TPU_I16] = INT16_MAX, [TPU_I8] = INT8_MAX,
                                                    [TPU_U8] = UINT8_MAX, [TPU_BOOL] = 1};
        acc = (uint64_t)(r->kind == TPU_REDUCE_MAX ? lo[r->x->dtype] : hi[r->x->dtype]);
      }
      STI(t.obase + o * r->os[L], acc);
    }
  }
}

tpu_status_t tpu_kernel_reduce_window(const tpu_reduce_window_attrs_t *attrs,
                                      const tpu_buf_t *x, const tpu_buf_t *out,
                                      tpu_pool_t *pool) {
  static const char *K = "reduce_window";
  int64_t nx, nout;
  if (!attrs) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: attrs is NULL", K);
  TPU_RETURN_IF_ERROR(tpu_buf_check(x, K, "x", &nx));
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, K, "out", &nout));
  if ((unsigned)attrs->kind > TPU_REDUCE_MIN) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: kind %d is not SUM, PROD, MAX or MIN",
                          K, (int)attrs->kind);
  }
  if (out->rank != x->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: out rank %d != x rank %d", K,
                          out->rank, x->rank);
  }
  if (tpu_dtype_is_float(x->dtype) != tpu_dtype_is_float(out->dtype)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: x is %s but out is %s", K,
                          tpu_dtype_name(x->dtype), tpu_dtype_name(out->dtype));
  }
  rw_t r = {.kind = attrs->kind, .x = x, .out = out, .rank = x->rank};
  for (int d = 0; d < x->rank; d++) {
    int64_t w = attrs->window[d], s = attrs->stride[d], dl = attrs->dilation[d];
    if (w < 1 || s < 1 || dl < 1) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: dim %d has window %lld, stride %lld, dilation %lld (each >= 1)",
                            K, d, (long long)w, (long long)s, (long long)dl);
    }
    int64_t padded, span, expect;
    if (__builtin_add_overflow(x->dims[d], attrs->pad_lo[d], &padded) ||
        __builtin_add_overflow(padded, attrs->pad_hi[d], &padded) ||
        __builtin_mul_overflow(w - 1, dl, &span)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: dim %d sizes overflow", K, d);
    }
    span += 1;
    expect = padded >= span ? (padded - span) / s + 1 : 0;
    if (out->dims[d] != expect) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: out dim %d is %lld, the window gives %lld", K, d,
                            (long long)out->dims[d], (long long)expect);
    }
    r.xd[d] = x->dims[d];
    r.xs[d] = x->strides[d];
    r.od[d] = out->dims[d];
    r.os[d] = out->strides[d];
    r.win[d] = w;
    r.str[d] = s;
    r.dil[d] = dl;
    r.lo[d] = attrs->pad_lo[d];
  }
  if (nout == 0) return TPU_OK;
  if (r.rank == 0) { /* a scalar: one window of one element */
    r.rank = 1;
    r.xd[0] = r.od[0] = r.win[0] = r.str[0] = r.dil[0] = 1;
    r.xs[0] = r.os[0] = r.lo[0] = 0;
  }
  r.row_len = r.od[r.rank - 1];
  int64_t rows = nout / r.row_len;
  int64_t taps = 1;
  for (int d = 0; d < r.rank; d++) taps *= r.win[d] < 64 ? r.win[d] : 64;
  int64_t per_row = r.row_len * taps;
  int64_t grain = per_row >= 16384 ? 1 : 16384 / per_row;
  tpu_pool_parallel_for(pool, rows, grain, rows_task, &r);
  return TPU_OK;
}
