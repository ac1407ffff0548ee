/* compare_select.c: tpu_kernel_compare, tpu_kernel_select, tpu_kernel_clamp
 * (include/tpu/kernels.h).
 *
 * compare: a and b of one dtype -> bool (NaN compares unequal to everything, so only NE
 * is true); f32 and bf16 with dense or broadcast operands run the vec.h compare loops,
 * bool and integer dtypes typed loops in their own width (no widening to i64 blocks).
 * select: pred (bool) picks on_true or on_false, any dtype, bytes copied; 32-bit elements
 * with a dense pred or one broadcast along the row run the vec.h select; for other sizes
 * a row whose pred is broadcast along it is a copy of one operand's row.
 * clamp: min(max(x, lo), hi) in x's dtype with MAX/MIN semantics (NaN propagates);
 * undefined for bool, as in PyTorch. All operands broadcast to out's shape.
 */
#include "vtpu/kernels/ew.h"

/* ---- compare ------------------------------------------------------------------------------ */

typedef struct compare_ctx {
  const tpu_vec_ops_t *v;
  tpu_compare_dir_t dir;
  tpu_dtype_t dt;
  tpu_ct_t ct;
} compare_ctx;

/* One loop per direction, so the comparison is not a switch per element; the common
 * layouts (dense operands, or a broadcast scalar) get their own loops, which vectorize. */
#define CMP_LOOP(OP)                                                                        \
  do {                                                                                      \
    if (so == 1 && sa == 1 && sb == 1) {                                                    \
      for (int64_t j = 0; j < m; j++) o[j] = (char)(x[j] OP y[j]);                          \
    } else if (so == 1 && sa == 1 && sb == 0) {                                             \
      const __typeof__(y[0]) y0 = y[0];                                                     \
      for (int64_t j = 0; j < m; j++) o[j] = (char)(x[j] OP y0);                            \
    } else {                                                                                \
      for (int64_t j = 0; j < m; j++) o[j * so] = (char)(x[j * sa] OP y[j * sb]);           \
    }                                                                                       \
  } while (0)

#define CMP_DIRS(T)                                                                         \
  do {                                                                                      \
    const T *x = a, *y = b;                                                                 \
    switch (c->dir) {                                                                       \
      case TPU_CMP_EQ: CMP_LOOP(==); break;                                                 \
      case TPU_CMP_NE: CMP_LOOP(!=); break;                                                 \
      case TPU_CMP_LT: CMP_LOOP(<); break;                                                  \
      case TPU_CMP_LE: CMP_LOOP(<=); break;                                                 \
      case TPU_CMP_GT: CMP_LOOP(>); break;                                                  \
      default: CMP_LOOP(>=); break;                                                         \
    }                                                                                       \
  } while (0)

static void compare_row(const compare_ctx *c, char *const *ptrs, const int64_t *strides,
                        int64_t n) {
  tpu_ew_block_t ba, bb;
  for (int64_t i = 0; i < n; i += TPU_EW_BLOCK) {
    int64_t m = n - i < TPU_EW_BLOCK ? n - i : TPU_EW_BLOCK;
    int64_t sa, sb;
    const void *a = tpu_ew_load(c->v, c->ct, ptrs[1] + i * strides[1], strides[1], c->dt, m, &ba, &sa);
    const void *b = tpu_ew_load(c->v, c->ct, ptrs[2] + i * strides[2], strides[2], c->dt, m, &bb, &sb);
    char *o = ptrs[0] + i * strides[0];
    const int64_t so = strides[0];
    switch (c->ct) {
      case TPU_CT_F32: CMP_DIRS(float); break;
      case TPU_CT_F64: CMP_DIRS(double); break;
      default: CMP_DIRS(int64_t); break;
    }
  }
}

/* Integer and bool rows with a dense bool out and dense or broadcast (stride 0) operands:
 * typed loops in the operands' own width instead of i64 blocks. Byte dtypes (bool, u8,
 * i8) go 16 at a time through GCC vector extensions (SSE2 on x86-64, so every ISA build
 * has them); bool bytes are normalized to 0/1 first, as tpu_ew_load_i64 does. */
typedef uint8_t cmp_u8x16 __attribute__((vector_size(16)));
typedef int8_t cmp_i8x16 __attribute__((vector_size(16)));

#define CMP_AS_IS(v) (v)
#define CMP_BOOL01(v) ((v) != 0)

/* One row of n bytes: o[j] = NORM(x[j]) OP NORM(y[j]) (ia/ib false: the operand is x[0] or
 * y[0] for every j). VT is the 16-lane vector of the element type T. */
#define BYTE_CMP_ROW(T, VT, NORM, IS_BOOL, OP)                                                     \
  do {                                                                                      \
    const T x0 = (T)NORM(x[0]), y0 = (T)NORM(y[0]);                                         \
    int64_t j = 0;                                                                          \
    for (; j + 16 <= n; j += 16) {                                                          \
      VT a, b;                                                                              \
      if (ia) memcpy(&a, x + j, 16); else a = (VT){0} + x0;                                 \
      if (ib) memcpy(&b, y + j, 16); else b = (VT){0} + y0;                                 \
      if (IS_BOOL) { /* any non-zero byte is true: 0/1 */                                     \
        a = (VT)((cmp_u8x16)(a != 0) & 1);                                                  \
        b = (VT)((cmp_u8x16)(b != 0) & 1);                                                  \
      }                                                                                     \
      cmp_u8x16 res = (cmp_u8x16)(a OP b) & 1;                                              \
      memcpy(o + j, &res, 16);                                                                \
    }                                                                                       \
    for (; j < n; j++) {                                                                    \
      o[j] = (uint8_t)((ia ? (T)NORM(x[j]) : x0) OP (ib ? (T)NORM(y[j]) : y0));             \
    }                                                                                       \
  } while (0)

#define WIDE_CMP_ROW(T, NORM, OP)                                                           \
  do {                                                                                      \
    const T x0 = x[0], y0 = y[0];                                                           \
    for (int64_t j = 0; j < n; j++) o[j] = (uint8_t)((ia ? x[j] : x0) OP (ib ? y[j] : y0)); \
  } while (0)

#define INT_CMP_ROWS(T, ROW, OP)                                                            \
  for (int64_t r = 0; r < s->rows; r++) {                                                   \
    const T *x = (const T *)(s->ptrs[1] + r * s->outer[1]);                                 \
    const T *y = (const T *)(s->ptrs[2] + r * s->outer[2]);                                 \
    uint8_t *o = (uint8_t *)(s->ptrs[0] + r * s->outer[0]);                                 \
    ROW;                                                                                    \
  }

#define INT_CMP_DIRS(T, ROW)                                                                \
  do {                                                                                      \
    switch (c->dir) {                                                                       \
      case TPU_CMP_EQ: INT_CMP_ROWS(T, ROW(==), ==); break;                                 \
      case TPU_CMP_NE: INT_CMP_ROWS(T, ROW(!=), !=); break;                                 \
      case TPU_CMP_LT: INT_CMP_ROWS(T, ROW(<), <); break;                                   \
      case TPU_CMP_LE: INT_CMP_ROWS(T, ROW(<=), <=); break;                                 \
      case TPU_CMP_GT: INT_CMP_ROWS(T, ROW(>), >); break;                                   \
      default: INT_CMP_ROWS(T, ROW(>=), >=); break;                                         \
    }                                                                                       \
  } while (0)

#define ROW_BOOL(OP) BYTE_CMP_ROW(uint8_t, cmp_u8x16, CMP_BOOL01, 1, OP)
#define ROW_U8(OP) BYTE_CMP_ROW(uint8_t, cmp_u8x16, CMP_AS_IS, 0, OP)
#define ROW_I8(OP) BYTE_CMP_ROW(int8_t, cmp_i8x16, CMP_AS_IS, 0, OP)
#define ROW_I16(OP) WIDE_CMP_ROW(int16_t, CMP_AS_IS, OP)
#define ROW_I32(OP) WIDE_CMP_ROW(int32_t, CMP_AS_IS, OP)
#define ROW_I64(OP) WIDE_CMP_ROW(int64_t, CMP_AS_IS, OP)

/* Returns false (nothing done) unless the segment fits the typed loops. */
static bool compare_seg_int(const compare_ctx *c, const tpu_ew_seg_t *s) {
  const int64_t es = (int64_t)tpu_dtype_size(c->dt), sa = s->strides[1], sb = s->strides[2];
  if (s->strides[0] != 1 || (sa != es && sa != 0) || (sb != es && sb != 0)) return false;
  const bool ia = sa != 0, ib = sb != 0;
  const int64_t n = s->n;
  switch (c->dt) {
    case TPU_BOOL: INT_CMP_DIRS(uint8_t, ROW_BOOL); return true;
    case TPU_U8: INT_CMP_DIRS(uint8_t, ROW_U8); return true;
    case TPU_I8: INT_CMP_DIRS(int8_t, ROW_I8); return true;
    case TPU_I16: INT_CMP_DIRS(int16_t, ROW_I16); return true;
    case TPU_I32: INT_CMP_DIRS(int32_t, ROW_I32); return true;
    case TPU_I64: INT_CMP_DIRS(int64_t, ROW_I64); return true;
    default: return false;
  }
}

#undef ROW_BOOL
#undef ROW_U8
#undef ROW_I8
#undef ROW_I16
#undef ROW_I32
#undef ROW_I64
#undef CMP_BOOL01
#undef CMP_AS_IS
#undef INT_CMP_DIRS
#undef INT_CMP_ROWS
#undef BYTE_CMP_ROW
#undef WIDE_CMP_ROW

/* f32 and bf16 rows with a dense bool out and dense or broadcast operands: the vec.h
 * loops over the whole 2-d segment; the rest row by row through blocks. */
static void compare_seg(void *arg, const tpu_ew_seg_t *s) {
  const compare_ctx *c = arg;
  const int64_t es = (int64_t)tpu_dtype_size(c->dt), sa = s->strides[1], sb = s->strides[2];
  if ((c->dt == TPU_F32 || c->dt == TPU_BF16) && s->strides[0] == 1 &&
      (sa == es || sa == 0) && (sb == es || sb == 0)) {
    tpu_vec_2d_t g = {s->n, s->rows, {s->outer[0], s->outer[1] / es, s->outer[2] / es, 0}};
    if (c->dt == TPU_F32) {
      c->v->compare_f32(c->dir, (const float *)s->ptrs[1], sa / es, (const float *)s->ptrs[2],
                        sb / es, (uint8_t *)s->ptrs[0], &g);
    } else {
      c->v->compare_bf16(c->dir, (const uint16_t *)s->ptrs[1], sa / es,
                         (const uint16_t *)s->ptrs[2], sb / es, (uint8_t *)s->ptrs[0], &g);
    }
    return;
  }
  if (compare_seg_int(c, s)) return;
  char *ptrs[3];
  for (int64_t r = 0; r < s->rows; r++) {
    for (int k = 0; k < 3; k++) ptrs[k] = s->ptrs[k] + r * s->outer[k];
    compare_row(c, ptrs, s->strides, s->n);
  }
}

#undef CMP_DIRS
#undef CMP_LOOP


tpu_status_t tpu_kernel_compare(tpu_compare_dir_t dir, const tpu_buf_t *a, const tpu_buf_t *b,
                                const tpu_buf_t *out, tpu_pool_t *pool) {
  const tpu_buf_t *ins[2] = {a, b};
  const char *names[3] = {"out", "a", "b"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, "kernel_compare", out, ins, names, 2, false));
  if ((unsigned)dir > TPU_CMP_GE) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "kernel_compare: direction %d", (int)dir);
  }
  if (a->dtype != b->dtype || out->dtype != TPU_BOOL) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "kernel_compare: COMPARE needs a and b of one dtype and a bool out, "
                          "got a %s, b %s, out %s",
                          tpu_dtype_name(a->dtype), tpu_dtype_name(b->dtype),
                          tpu_dtype_name(out->dtype));
  }
  compare_ctx c = {tpu_vec_ops(), dir, a->dtype, tpu_ct_of(a->dtype)};
  tpu_ew_iter_run2(&it, pool, compare_seg, &c);
  return TPU_OK;
}

/* ---- select --------------------------------------------------------------------------------- */

typedef struct select_ctx {
  const tpu_vec_ops_t *v;
  size_t size;
} select_ctx;

#define SELECT_LOOP(T)                                                                \
  for (int64_t i = 0; i < n; i++) {                                                   \
    const char *src = p[i * sp] ? t + i * st : f + i * sf;                            \
    T v;                                                                              \
    memcpy(&v, src, sizeof v);                                                        \
    memcpy(o + i * so, &v, sizeof v);                                                 \
  }

/* One row, element by element (any layout). */
static void select_row(size_t size, char *o, const char *p, const char *t, const char *f,
                       const int64_t *strides, int64_t n) {
  const int64_t so = strides[0], sp = strides[1], st = strides[2], sf = strides[3];
  switch (size) {
    case 1: SELECT_LOOP(uint8_t); break;
    case 2: SELECT_LOOP(uint16_t); break;
    case 4: SELECT_LOOP(uint32_t); break;
    default: SELECT_LOOP(uint64_t); break;
  }
}

static void select_seg(void *arg, const tpu_ew_seg_t *s) {
  const select_ctx *c = arg;
  const int64_t es = (int64_t)c->size;
  const int64_t so = s->strides[0], sp = s->strides[1], st = s->strides[2], sf = s->strides[3];
  if (es == 4 && so == 4 && (sp == 1 || sp == 0) && (st == 4 || st == 0) && (sf == 4 || sf == 0)) {
    tpu_vec_2d_t g = {s->n, s->rows, {s->outer[0] / 4, s->outer[1], s->outer[2] / 4, s->outer[3] / 4}};
    c->v->select_u32((const uint8_t *)s->ptrs[1], sp, (const uint32_t *)s->ptrs[2], st / 4,
                     (const uint32_t *)s->ptrs[3], sf / 4, (uint32_t *)s->ptrs[0], &g);
    return;
  }
  for (int64_t r = 0; r < s->rows; r++) {
    char *o = s->ptrs[0] + r * s->outer[0];
    const char *p = s->ptrs[1] + r * s->outer[1];
    const char *t = s->ptrs[2] + r * s->outer[2], *f = s->ptrs[3] + r * s->outer[3];
    if (sp == 0) {
      bool take_t = *p != 0; /* the row is a copy of one operand's row */
      tpu_ew_copy_row(c->size, o, so, take_t ? t : f, take_t ? st : sf, s->n);
    } else {
      select_row(c->size, o, p, t, f, s->strides, s->n);
    }
  }
}

tpu_status_t tpu_kernel_select(const tpu_buf_t *pred, const tpu_buf_t *on_true,
                               const tpu_buf_t *on_false, const tpu_buf_t *out,
                               tpu_pool_t *pool) {
  const tpu_buf_t *ins[3] = {pred, on_true, on_false};
  const char *names[4] = {"out", "pred", "on_true", "on_false"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, "kernel_select", out, ins, names, 3, false));
  if (pred->dtype != TPU_BOOL || on_true->dtype != out->dtype || on_false->dtype != out->dtype) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "kernel_select: SELECT needs a bool pred and on_true, on_false, out "
                          "of one dtype, got pred %s, on_true %s, on_false %s, out %s",
                          tpu_dtype_name(pred->dtype), tpu_dtype_name(on_true->dtype),
                          tpu_dtype_name(on_false->dtype), tpu_dtype_name(out->dtype));
  }
  select_ctx c = {tpu_vec_ops(), tpu_dtype_size(out->dtype)};
  tpu_ew_iter_run2(&it, pool, select_seg, &c);
  return TPU_OK;
}

/* ---- clamp ------------------------------------------------------------------------------------ */

typedef struct clamp_ctx {
  const tpu_vec_ops_t *v;
  tpu_dtype_t dt;
  tpu_ct_t ct;
} clamp_ctx;

static void clamp_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                       int64_t pos) {
  (void)pos;
  const clamp_ctx *c = arg;
  tpu_ew_block_t blo, bx, bhi, bt, bo;
  for (int64_t i = 0; i < n; i += TPU_EW_BLOCK) {
    int64_t m = n - i < TPU_EW_BLOCK ? n - i : TPU_EW_BLOCK;
    int64_t slo, sx, shi;
    const void *lo = tpu_ew_load(c->v, c->ct, ptrs[1] + i * strides[1], strides[1], c->dt, m, &blo, &slo);
    const void *x = tpu_ew_load(c->v, c->ct, ptrs[2] + i * strides[2], strides[2], c->dt, m, &bx, &sx);
    const void *hi = tpu_ew_load(c->v, c->ct, ptrs[3] + i * strides[3], strides[3], c->dt, m, &bhi, &shi);
    char *o = ptrs[0] + i * strides[0];
    void *dst = tpu_ew_out_dst(c->ct, o, strides[0], c->dt, &bo);
    tpu_ew_binary_compute(c->v, TPU_OP_MAX, c->ct, c->dt, x, sx, lo, slo, &bt, m);
    tpu_ew_binary_compute(c->v, TPU_OP_MIN, c->ct, c->dt, &bt, 1, hi, shi, dst, m);
    tpu_ew_store(c->v, c->ct, dst, 1, o, strides[0], c->dt, m);
  }
}

tpu_status_t tpu_kernel_clamp(const tpu_buf_t *lo, const tpu_buf_t *x, const tpu_buf_t *hi,
                              const tpu_buf_t *out, tpu_pool_t *pool) {
  const tpu_buf_t *ins[3] = {lo, x, hi};
  const char *names[4] = {"out", "lo", "x", "hi"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, "kernel_clamp", out, ins, names, 3, false));
  if (lo->dtype != out->dtype || x->dtype != out->dtype || hi->dtype != out->dtype) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "kernel_clamp: CLAMP needs one dtype, got lo %s, x %s, hi %s, out %s",
                          tpu_dtype_name(lo->dtype), tpu_dtype_name(x->dtype),
                          tpu_dtype_name(hi->dtype), tpu_dtype_name(out->dtype));
  }
  if (out->dtype == TPU_BOOL) return tpu_ew_unsupported("kernel_clamp", TPU_OP_CLAMP, TPU_BOOL);
  clamp_ctx c = {tpu_vec_ops(), out->dtype, tpu_ct_of(out->dtype)};
  tpu_ew_iter_run(&it, pool, clamp_loop, &c);
  return TPU_OK;
}
