/* unary.c: tpu_kernel_unary, the one-operand elementwise ops (include/tpu/kernels.h).
 *
 * out = op(x) with x broadcast to out's shape. The result dtype is x's, except CONVERT
 * (out's dtype, ew_scalar.h semantics), BITCAST_CONVERT (out's dtype of the same size:
 * the bytes are copied) and IS_FINITE (bool). Contiguous f32 or bf16 with a SIMD op, and
 * contiguous f32 <-> bf16 CONVERT, run the vec.h loop over whole segments; everything else
 * goes through blocks.
 */
#include "vtpu/kernels/ew.h"

#define KERNEL "kernel_unary"

typedef struct unary_ctx {
  const tpu_vec_ops_t *v;
  tpu_op_t op;
  tpu_dtype_t in_dt, out_dt;
  tpu_ct_t in_ct, out_ct;
  bool stream; /* non-temporal stores on the SIMD paths */
} unary_ctx;

static void unary_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                       int64_t pos) {
  (void)pos;
  const unary_ctx *c = arg;
  char *out = ptrs[0];
  const char *in = ptrs[1];
  const int64_t so = strides[0], si = strides[1];
  if (c->in_dt == c->out_dt && tpu_vec_unary_has(c->op)) { /* contiguous: whole-segment SIMD */
    if (c->in_dt == TPU_F32 && so == 4 && si == 4) {
      (c->stream ? c->v->unary_f32_stream : c->v->unary_f32)(c->op, (const float *)in,
                                                              (float *)out, n);
      if (c->stream) c->v->stream_fence();
      return;
    }
    if (c->in_dt == TPU_BF16 && so == 2 && si == 2) {
      (c->stream ? c->v->unary_bf16_stream : c->v->unary_bf16)(c->op, (const uint16_t *)in,
                                                                (uint16_t *)out, n);
      if (c->stream) c->v->stream_fence();
      return;
    }
  }
  if (c->op == TPU_OP_CONVERT && c->in_dt == TPU_F32 && c->out_dt == TPU_BF16 && si == 4 && so == 2) {
    (c->stream ? c->v->f32_to_bf16_stream : c->v->f32_to_bf16)((const float *)in,
                                                                (uint16_t *)out, n);
    if (c->stream) c->v->stream_fence();
    return;
  }
  if (c->op == TPU_OP_CONVERT && c->in_dt == TPU_BF16 && c->out_dt == TPU_F32 && si == 2 && so == 4) {
    (c->stream ? c->v->bf16_to_f32_stream : c->v->bf16_to_f32)((const uint16_t *)in,
                                                                (float *)out, n);
    if (c->stream) c->v->stream_fence();
    return;
  }
  tpu_ew_block_t bin, bout;
  for (int64_t i = 0; i < n; i += TPU_EW_BLOCK) {
    int64_t m = n - i < TPU_EW_BLOCK ? n - i : TPU_EW_BLOCK;
    int64_t step;
    const void *x = tpu_ew_load(c->v, c->in_ct, in + i * si, si, c->in_dt, m, &bin, &step);
    char *o = out + i * so;
    if (c->op == TPU_OP_CONVERT) {
      tpu_ew_store(c->v, c->in_ct, x, step, o, so, c->out_dt, m);
      continue;
    }
    void *dst = step ? tpu_ew_out_dst(c->out_ct, o, so, c->out_dt, &bout) : (void *)&bout;
    tpu_ew_unary_compute(c->v, c->op, c->in_ct, c->in_dt, x, dst, step ? m : 1);
    tpu_ew_store(c->v, c->out_ct, dst, step, o, so, c->out_dt, m);
  }
}

typedef struct bitcast_ctx { size_t size; } bitcast_ctx;

static void bitcast_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                         int64_t pos) {
  (void)pos;
  const size_t size = ((const bitcast_ctx *)arg)->size;
  char *out = ptrs[0];
  const char *in = ptrs[1];
  if (strides[0] == (int64_t)size && strides[1] == (int64_t)size) {
    if (out != in) memcpy(out, in, (size_t)n * size); /* in place: nothing to do */
    return;
  }
  for (int64_t i = 0; i < n; i++) memcpy(out + i * strides[0], in + i * strides[1], size);
}

tpu_status_t tpu_kernel_unary(tpu_op_t op, const tpu_buf_t *x, const tpu_buf_t *out,
                              tpu_pool_t *pool) {
  if ((unsigned)op >= TPU_OP_COUNT || tpu_op_family(op) != TPU_FAMILY_UNARY) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": %s is not a unary op",
                          (unsigned)op < TPU_OP_COUNT ? tpu_op_name(op) : "(invalid op)");
  }
  const tpu_buf_t *ins[1] = {x};
  const char *names[2] = {"out", "x"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, KERNEL, out, ins, names, 1, false));
  if (op == TPU_OP_BITCAST_CONVERT) {
    size_t size = tpu_dtype_size(x->dtype);
    if (size != tpu_dtype_size(out->dtype) || (x->dtype == TPU_BOOL) != (out->dtype == TPU_BOOL)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            KERNEL ": BITCAST_CONVERT from %s to %s (needs equal sizes, bool "
                            "only to bool)",
                            tpu_dtype_name(x->dtype), tpu_dtype_name(out->dtype));
    }
    bitcast_ctx bc = {size};
    tpu_ew_iter_run(&it, pool, bitcast_loop, &bc);
    return TPU_OK;
  }
  unary_ctx c = {tpu_vec_ops(), op, x->dtype, out->dtype, tpu_ct_of(x->dtype), tpu_ct_of(out->dtype),
                 tpu_ew_stream_out(it.numel, out->dtype)};
  if (op == TPU_OP_CONVERT) {
    tpu_ew_iter_run(&it, pool, unary_loop, &c);
    return TPU_OK;
  }
  if (!tpu_ew_unary_supported(op, x->dtype)) return tpu_ew_unsupported(KERNEL, op, x->dtype);
  tpu_dtype_t want = op == TPU_OP_IS_FINITE ? TPU_BOOL : x->dtype;
  if (out->dtype != want) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": %s of %s writes %s, not %s",
                          tpu_op_name(op), tpu_dtype_name(x->dtype), tpu_dtype_name(want),
                          tpu_dtype_name(out->dtype));
  }
  if (op == TPU_OP_IS_FINITE) c.out_ct = TPU_CT_I64;
  tpu_ew_iter_run(&it, pool, unary_loop, &c);
  return TPU_OK;
}
