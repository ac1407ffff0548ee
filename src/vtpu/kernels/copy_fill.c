/* copy_fill.c: tpu_kernel_copy, tpu_kernel_fill, tpu_kernel_iota (include/tpu/kernels.h).
 *
 * copy moves elements of one dtype between any two layouts (x may broadcast); a small copy
 * whose innermost dim is contiguous on both sides runs in one loop over its rows (no per-
 * segment calls); otherwise rows contiguous on both sides are copied whole (short ones
 * inline, long or overlapping ones with memmove; a segment of short rows in one loop
 * without a call per row), transposed inputs (contiguous across the output's rows) by tile
 * gathers straight into the output (ew_tile.h), the rest element by element in the order
 * that writes the output forward. fill writes one value (converted once, with the CONVERT
 * semantics of ew_scalar.h): memset when all its bytes are equal (zero), else a 64-byte
 * pattern copied in pieces. iota writes each element's index along |dim|, converted like
 * an i64 value.
 */
#include <stdio.h>

#include "vtpu/kernels/ew.h"
#include "vtpu/kernels/ew_tile.h"

/* ---- copy ------------------------------------------------------------------------------------ */

typedef struct copy_ctx { size_t size; } copy_ctx;

/* Copies |bytes| between non-overlapping ranges in fixed-size pieces the compiler turns
 * into vector moves: short rows (64 bytes after a head split) skip a libc call each. */
static inline void copy_short(char *dst, const char *src, size_t bytes) {
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) memcpy(dst + i, src + i, 32);
  if (i + 16 <= bytes) { memcpy(dst + i, src + i, 16); i += 16; }
  if (i + 8 <= bytes) { memcpy(dst + i, src + i, 8); i += 8; }
  if (i + 4 <= bytes) { memcpy(dst + i, src + i, 4); i += 4; }
  for (; i < bytes; i++) dst[i] = src[i];
}

void tpu_ew_copy_run(char *dst, const char *src, size_t bytes) {
  if (dst == src) return;
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  bool overlap = d - s < bytes || s - d < bytes;
  if (overlap || bytes > 512) {
    memmove(dst, src, bytes);
  } else {
    copy_short(dst, src, bytes);
  }
}

#define COPY_LOOP(T)                                                    \
  do {                                                                  \
    if (si == 0) {                                                      \
      T v;                                                              \
      memcpy(&v, in, sizeof v);                                         \
      for (int64_t i = 0; i < n; i++) memcpy(out + i * so, &v, sizeof v); \
    } else {                                                            \
      for (int64_t i = 0; i < n; i++) {                                 \
        T v;                                                            \
        memcpy(&v, in + i * si, sizeof v);                              \
        memcpy(out + i * so, &v, sizeof v);                             \
      }                                                                 \
    }                                                                   \
  } while (0)

/* |bytes| at |out| from a 64-byte pattern, in fixed-size pieces (vector stores): a value
 * repeated over a run, for fill and for a copy of a broadcast value. */
static void pattern_run(const unsigned char pat[64], char *out, size_t bytes) {
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) memcpy(out + i, pat, 64);
  if (i < bytes) memcpy(out + i, pat, bytes - i);
}

/* One value of |size| bytes at |in| into the |n| contiguous elements at |out|. */
static void spread_run(size_t size, char *out, const char *in, int64_t n) {
  unsigned char pat[64];
  for (size_t b = 0; b < sizeof pat; b += size) memcpy(pat + b, in, size);
  pattern_run(pat, out, (size_t)n * size);
}

void tpu_ew_copy_row(size_t size, char *out, int64_t so, const char *in, int64_t si,
                     int64_t n) {
  if (so == (int64_t)size && si == (int64_t)size) {
    tpu_ew_copy_run(out, in, (size_t)n * size);
    return;
  }
  if (so == (int64_t)size && si == 0 && 64 % size == 0 && n >= 16) { /* a broadcast value */
    spread_run(size, out, in, n);
    return;
  }
  switch (size) {
    case 1: COPY_LOOP(uint8_t); break;
    case 2: COPY_LOOP(uint16_t); break;
    case 4: COPY_LOOP(uint32_t); break;
    default: COPY_LOOP(uint64_t); break;
  }
}

/* Whether [a, a + an) and [b, b + bn) (byte ranges) are disjoint. */
static bool disjoint(const char *a, int64_t an, const char *b, int64_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x + (uintptr_t)an <= y || y + (uintptr_t)bn <= x;
}

/* The byte span of the elements at p + sum_d i_d * strides[d] (bytes, any sign), i_d <
 * dims[d] for d < nd: its lowest address, and the bytes from there to past the highest. */
static const char *span(const char *p, int nd, const int64_t *dims, const int64_t *strides,
                        size_t size, int64_t *bytes) {
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < nd; d++) {
    int64_t e = (dims[d] - 1) * strides[d]; /* in range: the iterator checked the extents */
    if (e < 0) lo += e;
    else hi += e;
  }
  *bytes = hi - lo + (int64_t)size;
  return p + lo;
}

/* The span of |rows| rows of |n| elements (row step outer, element step s). */
static const char *seg_span(const char *p, int64_t s, int64_t outer, int64_t n, int64_t rows,
                            size_t size, int64_t *bytes) {
  const int64_t dims[2] = {n, rows}, strides[2] = {s, outer};
  return span(p, 2, dims, strides, size, bytes);
}

static void copy_seg(void *arg, const tpu_ew_seg_t *s) {
  const size_t size = ((const copy_ctx *)arg)->size;
  const int64_t es = (int64_t)size, so = s->strides[0], si = s->strides[1];
  const bool tr = tpu_ew_tile_is_transposed(size, si, s->outer[1]);
  /* short dense rows from 8 rows on (below, the span check costs more than it saves) */
  const bool short_rows = si == es && s->n * es <= 512 && s->rows >= 8;
  if ((tr || short_rows) && s->rows > 1 && so == es && s->outer[0] % es == 0) {
    int64_t ob, ib;
    const char *o = seg_span(s->ptrs[0], so, s->outer[0], s->n, s->rows, size, &ob);
    const char *i = seg_span(s->ptrs[1], si, s->outer[1], s->n, s->rows, size, &ib);
    if (disjoint(o, ob, i, ib)) {
      if (tr) {
        tpu_ew_tile_gather(size, s->ptrs[0], s->outer[0] / es, s->ptrs[1], s->outer[1], si,
                           s->rows, s->n);
        return;
      }
      if (short_rows) { /* no call, no checks per row */
        for (int64_t r = 0; r < s->rows; r++) {
          copy_short(s->ptrs[0] + r * s->outer[0], s->ptrs[1] + r * s->outer[1],
                     (size_t)(s->n * es));
        }
        return;
      }
    }
  }
  for (int64_t r = 0; r < s->rows; r++) {
    tpu_ew_copy_row(size, s->ptrs[0] + r * s->outer[0], s->strides[0],
                    s->ptrs[1] + r * s->outer[1], s->strides[1], s->n);
  }
}

/* A small copy whose innermost dim is contiguous on both sides (a layout change: attention
 * heads to (batch, time, features) and back, the parts of a concatenation): the runs are
 * copied in one loop over the outer dims, instead of one iterator segment per row or two
 * (at 4 rows of 16 floats, 8x the time of the copy itself); the runs along the next dim in
 * a loop of their own, without a carry per run (2-3x faster on the GPT step's 64-byte
 * runs: a concatenation's part, [8, 4, 32, 16] floats into a [8, 32, 12, 16] buffer, in
 * 1.5 us, 3.1-5.1 before). False if |it| is not that. */
static bool copy_runs(const tpu_ew_iter_t *it, size_t size) {
  const int last = it->ndim - 1;
  const int64_t es = (int64_t)size, run = it->dims[last] * es;
  if (last < 1 || it->numel > TPU_EW_HELPER_GRAIN || run < 16 ||
      it->strides[0][last] != es || it->strides[1][last] != es) {
    return false;
  }
  int64_t ob, ib;
  const char *o = span(it->base[0], it->ndim, it->dims, it->strides[0], size, &ob);
  const char *i = span(it->base[1], it->ndim, it->dims, it->strides[1], size, &ib);
  if (!disjoint(o, ob, i, ib)) return false;
  /* the runs along dim last - 1 in one loop (a run of 64 bytes, the common case, as one
   * fixed-size copy), the dims outside it by carrying */
  const int inner = last - 1;
  const int64_t rows = it->dims[inner], so = it->strides[0][inner], si = it->strides[1][inner];
  int64_t idx[TPU_MAX_RANK] = {0};
  char *dst = it->base[0];
  const char *src = it->base[1];
  for (int64_t left = it->numel / it->dims[last] / rows; left > 0; left--) {
    if (run == 64) {
      for (int64_t r = 0; r < rows; r++) memcpy(dst + r * so, src + r * si, 64);
    } else {
      for (int64_t r = 0; r < rows; r++) {
        if (run <= 512) copy_short(dst + r * so, src + r * si, (size_t)run);
        else memcpy(dst + r * so, src + r * si, (size_t)run);
      }
    }
    for (int d = inner - 1; d >= 0; d--) { /* next rows: carry through the outer dims */
      dst += it->strides[0][d];
      src += it->strides[1][d];
      if (++idx[d] < it->dims[d]) break;
      idx[d] = 0;
      dst -= it->dims[d] * it->strides[0][d];
      src -= it->dims[d] * it->strides[1][d];
    }
  }
  return true;
}

tpu_status_t tpu_kernel_copy(const tpu_buf_t *x, const tpu_buf_t *out, tpu_pool_t *pool) {
  const tpu_buf_t *ins[1] = {x};
  const char *names[2] = {"out", "x"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, "kernel_copy", out, ins, names, 1, false));
  if (x->dtype != out->dtype) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "kernel_copy: x is %s but out is %s (copy keeps the dtype; CONVERT "
                          "changes it)",
                          tpu_dtype_name(x->dtype), tpu_dtype_name(out->dtype));
  }
  copy_ctx c = {tpu_dtype_size(out->dtype)};
  if (it.numel > 0 && copy_runs(&it, c.size)) return TPU_OK;
  tpu_ew_iter_run2(&it, pool, copy_seg, &c);
  return TPU_OK;
}

/* ---- fill --------------------------------------------------------------------------------------- */

typedef struct fill_ctx {
  size_t size;
  bool bytewise;          /* every byte of the value is the same: memset */
  unsigned char pat[64];  /* the value repeated over 64 bytes */
} fill_ctx;

/* A contiguous run of |bytes| (a multiple of the element size): memset, or the 64-byte
 * pattern. */
static void fill_run(const fill_ctx *c, char *out, size_t bytes) {
  if (c->bytewise) {
    memset(out, c->pat[0], bytes);
    return;
  }
  pattern_run(c->pat, out, bytes);
}

static void fill_seg(void *arg, const tpu_ew_seg_t *s) {
  const fill_ctx *c = arg;
  const int64_t so = s->strides[0];
  for (int64_t r = 0; r < s->rows; r++) {
    char *out = s->ptrs[0] + r * s->outer[0];
    if (so == (int64_t)c->size) {
      fill_run(c, out, (size_t)s->n * c->size);
    } else {
      for (int64_t i = 0; i < s->n; i++) memcpy(out + i * so, c->pat, c->size);
    }
  }
}

tpu_status_t tpu_kernel_fill(const tpu_buf_t *out, double value, int64_t ivalue,
                             tpu_pool_t *pool) {
  const char *names[1] = {"out"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, "kernel_fill", out, NULL, names, 0, false));
  fill_ctx c;
  memset(&c, 0, sizeof c);
  c.size = tpu_dtype_size(out->dtype);
  if (tpu_dtype_is_float(out->dtype)) {
    tpu_ew_store_f64(c.pat, out->dtype, value);
  } else {
    tpu_ew_store_i64(c.pat, out->dtype, ivalue);
  }
  c.bytewise = true;
  for (size_t i = 1; i < c.size; i++) c.bytewise = c.bytewise && c.pat[i] == c.pat[0];
  for (size_t i = c.size; i < sizeof c.pat; i += c.size) memcpy(c.pat + i, c.pat, c.size);
  tpu_ew_iter_run2(&it, pool, fill_seg, &c);
  return TPU_OK;
}

/* ---- iota ---------------------------------------------------------------------------------------- */

typedef struct iota_ctx {
  const tpu_vec_ops_t *v;
  tpu_dtype_t dt;
  int64_t inner; /* elements per step of the index along dim (product of later dims) */
  int64_t extent; /* size of dim */
} iota_ctx;

static void iota_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                      int64_t pos) {
  const iota_ctx *c = arg;
  int64_t k = (pos / c->inner) % c->extent, r = pos % c->inner;
  tpu_ew_block_t blk;
  for (int64_t i = 0; i < n; i += TPU_EW_BLOCK) {
    int64_t m = n - i < TPU_EW_BLOCK ? n - i : TPU_EW_BLOCK;
    for (int64_t j = 0; j < m; j++) {
      blk.i[j] = k;
      if (++r == c->inner) {
        r = 0;
        if (++k == c->extent) k = 0;
      }
    }
    tpu_ew_store(c->v, TPU_CT_I64, blk.i, 1, ptrs[0] + i * strides[0], strides[0], c->dt, m);
  }
}

tpu_status_t tpu_kernel_iota(const tpu_buf_t *out, int dim, tpu_pool_t *pool) {
  const char *names[1] = {"out"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, "kernel_iota", out, NULL, names, 0, true));
  if (dim < 0 || dim >= out->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "kernel_iota: dim %d for a rank-%d out",
                          dim, out->rank);
  }
  iota_ctx c = {tpu_vec_ops(), out->dtype, 1, out->dims[dim]};
  for (int d = dim + 1; d < out->rank; d++) c.inner *= out->dims[d]; /* <= numel: no overflow */
  tpu_ew_iter_run(&it, pool, iota_loop, &c);
  return TPU_OK;
}
