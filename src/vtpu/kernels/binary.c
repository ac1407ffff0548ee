/* binary.c: tpu_kernel_binary, the two-operand elementwise ops (include/tpu/kernels.h).
 *
 * out = op(a, b): a, b and out share one dtype; a and b broadcast to out's shape. Contiguous
 * f32 or bf16 (either operand may be a broadcast scalar) with a SIMD op runs the vec.h loop
 * over whole segments; everything else goes through blocks.
 */
#include "vtpu/kernels/ew.h"

#define KERNEL "kernel_binary"

typedef struct binary_ctx {
  const tpu_vec_ops_t *v;
  tpu_op_t op;
  tpu_dtype_t dt;
  tpu_ct_t ct;
  bool stream; /* non-temporal stores on the SIMD paths */
} binary_ctx;

static void binary_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                        int64_t pos) {
  (void)pos;
  const binary_ctx *c = arg;
  char *out = ptrs[0];
  const char *a = ptrs[1], *b = ptrs[2];
  const int64_t so = strides[0], sa = strides[1], sb = strides[2];
  if (tpu_vec_binary_has(c->op)) { /* contiguous or scalar operands: whole-segment SIMD */
    if (c->dt == TPU_F32 && so == 4 && (sa == 4 || sa == 0) && (sb == 4 || sb == 0)) {
      (c->stream ? c->v->binary_f32_stream : c->v->binary_f32)(
          c->op, (const float *)a, sa / 4, (const float *)b, sb / 4, (float *)out, n);
      if (c->stream) c->v->stream_fence();
      return;
    }
    if (c->dt == TPU_BF16 && so == 2 && (sa == 2 || sa == 0) && (sb == 2 || sb == 0)) {
      (c->stream ? c->v->binary_bf16_stream : c->v->binary_bf16)(
          c->op, (const uint16_t *)a, sa / 2, (const uint16_t *)b, sb / 2, (uint16_t *)out, n);
      if (c->stream) c->v->stream_fence();
      return;
    }
  }
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
                  tpu_ew_stream_out(it.numel, out->dtype)};
  tpu_ew_iter_run(&it, pool, binary_loop, &c);
  return TPU_OK;
}
