/* pass_fold.c: constant folding of splat constants (see include/tpu/passes.h).
 *
 * An elementwise node (unary, binary, compare, select, clamp, convert, bitcast_convert)
 * whose operands are all splat constants is computed once at compile time, on one-element
 * buffers through the very kernels the executable would run (include/tpu/kernels.h), so
 * the folded value is bit for bit what running would give. The node becomes a scalar
 * constant broadcast to its shape (a view: no memory, no step).
 */
#include <stdalign.h>
#include <string.h>

#include "compiler/rewrite.h"
#include "tpu/kernels.h"

static bool foldable(const tpu_node_t *node) {
  switch (tpu_op_family(node->op)) {
    case TPU_FAMILY_UNARY:
    case TPU_FAMILY_BINARY:
    case TPU_FAMILY_COMPARE:
      return node->num_operands >= 1;
    default:
      return false;
  }
}

typedef struct scalar {
  alignas(8) unsigned char bytes[16];
} scalar_t;

static tpu_buf_t scalar_buf(scalar_t *s, tpu_dtype_t dtype) {
  tpu_shape_t rank0;
  memset(&rank0, 0, sizeof rank0);
  return tpu_buf_dense(s->bytes, dtype, &rank0);
}

/* The constant node for the one value in |b| (canonical, as the builders make it). */
static tpu_node_t constant_of(const tpu_buf_t *b) {
  tpu_node_t k;
  memset(&k, 0, sizeof k);
  k.op = TPU_OP_CONSTANT;
  k.dtype = b->dtype;
  const void *p = b->data;
  int64_t i = 0;
  switch (b->dtype) {
    case TPU_F32: { float f; memcpy(&f, p, 4); k.attrs.constant.value = f; return k; }
    case TPU_F64: { double d; memcpy(&d, p, 8); k.attrs.constant.value = d; return k; }
    case TPU_F16: { uint16_t h; memcpy(&h, p, 2); k.attrs.constant.value = tpu_f16_to_f32(h); return k; }
    case TPU_BF16: { uint16_t h; memcpy(&h, p, 2); k.attrs.constant.value = tpu_bf16_to_f32(h); return k; }
    case TPU_I64: memcpy(&i, p, 8); break;
    case TPU_I32: { int32_t v; memcpy(&v, p, 4); i = v; break; }
    case TPU_I16: { int16_t v; memcpy(&v, p, 2); i = v; break; }
    case TPU_I8: i = *(const int8_t *)p; break;
    case TPU_U8: i = *(const uint8_t *)p; break;
    default: i = *(const uint8_t *)p != 0; break; /* bool */
  }
  k.attrs.constant.ivalue = i;
  k.attrs.constant.value = (double)i;
  return k;
}

tpu_value_t pass_fold_node(pass_ctx_t *c, const tpu_node_t *node, const tpu_value_t *ops) {
  if (!foldable(node) || node->num_operands > 3) return TPU_NO_VALUE;
  scalar_t in_s[3], out_s;
  tpu_buf_t in[3];
  for (int i = 0; i < node->num_operands; i++) {
    const tpu_node_t *k = pass_splat(c->rw.dst, ops[i]);
    if (!k) return TPU_NO_VALUE;
    in[i] = scalar_buf(&in_s[i], k->dtype);
    if (tpu_kernel_fill(&in[i], k->attrs.constant.value, k->attrs.constant.ivalue, NULL) != TPU_OK) {
      return TPU_NO_VALUE;
    }
  }
  tpu_buf_t out = scalar_buf(&out_s, node->dtype);
  tpu_status_t st;
  switch (node->op) {
    case TPU_OP_COMPARE:
      st = tpu_kernel_compare(node->attrs.compare.direction, &in[0], &in[1], &out, NULL);
      break;
    case TPU_OP_SELECT: st = tpu_kernel_select(&in[0], &in[1], &in[2], &out, NULL); break;
    case TPU_OP_CLAMP: st = tpu_kernel_clamp(&in[0], &in[1], &in[2], &out, NULL); break;
    default:
      st = tpu_op_family(node->op) == TPU_FAMILY_UNARY
               ? tpu_kernel_unary(node->op, &in[0], &out, NULL)
               : tpu_kernel_binary(node->op, &in[0], &in[1], &out, NULL);
      break;
  }
  if (st != TPU_OK) return TPU_NO_VALUE; /* e.g. an op the dtype lacks: leave it to run */
  tpu_node_t k = constant_of(&out);
  tpu_value_t v = pass_emit(c, &k, NULL);
  if (v == TPU_NO_VALUE || node->shape.rank == 0) return v;
  return pass_emit_shaped(c, TPU_OP_BROADCAST_IN_DIM, node->dtype, &node->shape, v);
}
