/* binary.c: tpu_kernel_binary, the two-operand elementwise ops (include/tpu/kernels.h).
 *
 * out = op(a, b): a, b and out share one dtype; a and b broadcast to out's shape. Contiguous
 * f32 or bf16 rows (either operand may be a broadcast scalar) with a SIMD op run the vec.h
 * loop row by row over the iterator's 2-d segments; so do segments where an operand is
 * transposed (strided along the row, contiguous across rows): its tiles are gathered into
 * row-major order first (ew_tile.h). Everything else goes through blocks.
 */
#include "vtpu/kernels/ew.h"
#include "vtpu/kernels/ew_tile.h"

#define KERNEL "kernel_binary"

typedef struct binary_ctx {
  const tpu_vec_ops_t *v;
  tpu_op_t op;
  tpu_dtype_t dt;
  tpu_ct_t ct;
  bool stream; /* non-temporal stores on the SIMD paths */
  bool simd;   /* f32 or bf16 with a vec.h op */
} binary_ctx;

static void binary_loop(const binary_ctx *c, char *out, const char *a, const char *b,
                        int64_t so, int64_t sa, int64_t sb, int64_t n) {
  tpu_ew_block_t ba, bb, bo;
  for (int64_t i = 0; i < n; i += TPU_EW_BLOCK) {
    int64_t m = n - i < TPU_EW_BLOCK ? n - i : TPU_EW_BLOCK;
    int64_t stepa, stepb;
    const void *x = tpu_ew_load(c->v, c->ct, a + i * sa, sa, c->dt, m, &ba, &stepa);
    const void *y = tpu_ew_load(c->v, c->ct, b + i * sb, sb, c->dt, m, &bb, &stepb);
    char *o = out + i * so;
    int64_t step = stepa | stepb;
    void *dst = step ? tpu_ew_out_dst(c->ct, o, so, c->dt, &bo) : (void *)&bo;
    tpu_ew_binary_compute(c->v, c->op, c->ct, c->dt, x, stepa, y, stepb, dst, step ? m : 1);
    tpu_ew_store(c->v, c->ct, dst, step, o, so, c->dt, m);
  }
}

static void binary_2d(const binary_ctx *c, const char *a, int64_t sa, const char *b,
                      int64_t sb, char *out, const tpu_vec_2d_t *g) {
  if (c->dt == TPU_F32) {
    c->v->binary_f32_2d(c->op, (const float *)a, sa, (const float *)b, sb, (float *)out, g);
  } else {
    c->v->binary_bf16_2d(c->op, (const uint16_t *)a, sa, (const uint16_t *)b, sb,
                         (uint16_t *)out, g);
  }
}

/* A segment with a contiguous output row whose inputs are each contiguous, a scalar per
 * row, or transposed: tiles of up to TPU_EW_BLOCK elements (rows x cols), the transposed
 * inputs gathered row-major into a block first, then the 2-d vector loop on the tile. */
static void binary_tiles(const binary_ctx *c, const tpu_ew_seg_t *s) {
  const int64_t es = (int64_t)tpu_dtype_size(c->dt);
  const int64_t cols = s->n < TPU_EW_BLOCK ? s->n : TPU_EW_BLOCK;
  const int64_t tile_rows = TPU_EW_BLOCK / cols;
  tpu_ew_block_t blk[2];
  bool tr[2];
  for (int k = 0; k < 2; k++) {
    tr[k] = tpu_ew_tile_is_transposed((size_t)es, s->strides[k + 1], s->outer[k + 1]);
  }
  for (int64_t r0 = 0; r0 < s->rows; r0 += tile_rows) {
    int64_t rows = s->rows - r0 < tile_rows ? s->rows - r0 : tile_rows;
    for (int64_t c0 = 0; c0 < s->n; c0 += cols) {
      int64_t m = s->n - c0 < cols ? s->n - c0 : cols;
      const char *in[2];
      int64_t step[2], ld[2];
      for (int k = 0; k < 2; k++) {
        const char *p = s->ptrs[k + 1] + r0 * s->outer[k + 1] + c0 * s->strides[k + 1];
        if (tr[k]) {
          tpu_ew_tile_gather((size_t)es, blk[k].f, m, p, s->outer[k + 1], s->strides[k + 1],
                             rows, m);
          in[k] = (const char *)blk[k].f;
          step[k] = 1;
          ld[k] = m;
        } else {
          in[k] = p;
          step[k] = s->strides[k + 1] / es;
          ld[k] = s->outer[k + 1] / es;
        }
      }
      tpu_vec_2d_t g = {m, rows, {s->outer[0] / es, ld[0], ld[1], 0}};
      binary_2d(c, in[0], step[0], in[1], step[1], s->ptrs[0] + r0 * s->outer[0] + c0 * es, &g);
    }
  }
}

/* Whether binary_tiles takes |s|: a SIMD op, regular stores, a contiguous output row,
 * whole rows, at least one transposed input and no other strided one. */
static bool tiles_fit(const binary_ctx *c, const tpu_ew_seg_t *s) {
  const int64_t es = (int64_t)tpu_dtype_size(c->dt);
  if (!c->simd || c->stream || s->strides[0] != es || s->rows < 2) return false;
  bool any = false;
  for (int k = 1; k <= 2; k++) {
    bool t = tpu_ew_tile_is_transposed((size_t)es, s->strides[k], s->outer[k]);
    if (!t && s->strides[k] != es && s->strides[k] != 0) return false;
    any = any || t;
  }
  return any;
}

/* Rows of contiguous or scalar f32/bf16 operands (with a SIMD op) run the vec.h loop a
 * row at a time; the rest goes through blocks. */
static void binary_seg(void *arg, const tpu_ew_seg_t *s) {
  const binary_ctx *c = arg;
  const int64_t so = s->strides[0], sa = s->strides[1], sb = s->strides[2];
  const int64_t es = (int64_t)tpu_dtype_size(c->dt);
  if (c->simd && so == es && (sa == es || sa == 0) && (sb == es || sb == 0)) {
    if (c->stream) { /* huge outputs: row by row, each aligning its streaming stores */
      for (int64_t r = 0; r < s->rows; r++) {
        char *o = s->ptrs[0] + r * s->outer[0];
        const char *a = s->ptrs[1] + r * s->outer[1], *b = s->ptrs[2] + r * s->outer[2];
        if (c->dt == TPU_F32) {
          c->v->binary_f32_stream(c->op, (const float *)a, sa / 4, (const float *)b, sb / 4,
                                  (float *)o, s->n);
        } else {
          c->v->binary_bf16_stream(c->op, (const uint16_t *)a, sa / 2, (const uint16_t *)b,
                                   sb / 2, (uint16_t *)o, s->n);
        }
      }
      c->v->stream_fence();
      return;
    }
    /* row steps in elements: the iterator's byte steps are multiples of the element size
     * except where there is one row (then unused) */
    tpu_vec_2d_t g = {s->n, s->rows, {s->outer[0] / es, s->outer[1] / es, s->outer[2] / es, 0}};
    if (c->dt == TPU_F32) {
      c->v->binary_f32_2d(c->op, (const float *)s->ptrs[1], sa / 4, (const float *)s->ptrs[2],
                          sb / 4, (float *)s->ptrs[0], &g);
    } else {
      c->v->binary_bf16_2d(c->op, (const uint16_t *)s->ptrs[1], sa / 2,
                           (const uint16_t *)s->ptrs[2], sb / 2, (uint16_t *)s->ptrs[0], &g);
    }
    return;
  }
  if (tiles_fit(c, s)) {
    binary_tiles(c, s);
    return;
  }
  for (int64_t r = 0; r < s->rows; r++) {
    binary_loop(c, s->ptrs[0] + r * s->outer[0], s->ptrs[1] + r * s->outer[1],
                s->ptrs[2] + r * s->outer[2], so, sa, sb, s->n);
  }
}

tpu_status_t tpu_kernel_binary(tpu_op_t op, const tpu_buf_t *a, const tpu_buf_t *b,
                               const tpu_buf_t *out, tpu_pool_t *pool) {
  if ((unsigned)op >= TPU_OP_COUNT || tpu_op_family(op) != TPU_FAMILY_BINARY ||
      tpu_op_arity(op) != 2) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": %s is not a binary op",
                          (unsigned)op < TPU_OP_COUNT ? tpu_op_name(op) : "(invalid op)");
  }
  const tpu_buf_t *ins[2] = {a, b};
  const char *names[3] = {"out", "a", "b"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, KERNEL, out, ins, names, 2, false));
  if (a->dtype != out->dtype || b->dtype != out->dtype) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": %s needs one dtype, got a %s, b %s, out %s",
                          tpu_op_name(op), tpu_dtype_name(a->dtype), tpu_dtype_name(b->dtype),
                          tpu_dtype_name(out->dtype));
  }
  if (!tpu_ew_binary_supported(op, out->dtype)) return tpu_ew_unsupported(KERNEL, op, out->dtype);
  binary_ctx c = {tpu_vec_ops(), op, out->dtype, tpu_ct_of(out->dtype),
                  tpu_ew_stream_out(it.numel, out->dtype),
                  (out->dtype == TPU_F32 || out->dtype == TPU_BF16) && tpu_vec_binary_has(op)};
  tpu_ew_iter_run2(&it, pool, binary_seg, &c);
  return TPU_OK;
}
