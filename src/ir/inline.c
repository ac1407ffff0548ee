/* inline.c: tpu_graph_inline, which splices one graph into another.
 *
 * Fused eager and compile mode build one big graph out of the small per-op graphs that
 * eager mode already lowered and cached: each recorded op's graph is inlined into the
 * pending graph, its parameters replaced by values the pending graph already has. Every
 * copied node goes through the same shape rules as the builder, so a splice that does not
 * type-check records the graph's error instead of producing a malformed graph.
 */
#include <stdalign.h>
#include <string.h>

#include "ir/graph_internal.h"

#define INLINE_STACK_OPERANDS 16

tpu_status_t tpu_graph_inline(tpu_graph_t *dst, const tpu_graph_t *src,
                              const tpu_value_t *param_values, tpu_value_t *out_values) {
  if (!dst || !src || (!param_values && src->num_params > 0) || !out_values) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "inline: NULL argument");
  }
  if (dst->status != TPU_OK) return tpu_status_set(dst->status, "%s", dst->message);
  tpu_value_t stack_ops[INLINE_STACK_OPERANDS];
  for (int v = 0; v < src->num_nodes; v++) {
    const tpu_node_t *n = &src->nodes[v];
    if (n->op == TPU_OP_PARAMETER) {
      tpu_value_t to = param_values[n->attrs.param.index];
      if (to == TPU_NO_VALUE) { /* unbound: an error below if a node uses it */
        out_values[v] = TPU_NO_VALUE;
        continue;
      }
      const tpu_node_t *t = tpu_graph_node(dst, to);
      if (!t || t->dtype != n->dtype || !tpu_shape_equal(&t->shape, &n->shape)) {
        return tpu_ir_fail(dst, TPU_ERR_INVALID_ARGUMENT,
                           "inline: parameter %d is bound to value %d of another type",
                           n->attrs.param.index, (int)to);
      }
      out_values[v] = to;
      continue;
    }
    tpu_value_t *ops = stack_ops;
    if (n->num_operands > INLINE_STACK_OPERANDS) {
      size_t bytes;
      if (!tpu_size_mul((size_t)n->num_operands, sizeof(tpu_value_t), &bytes) ||
          !(ops = tpu_ir_arena_alloc(dst, bytes, alignof(tpu_value_t)))) {
        return tpu_ir_fail(dst, TPU_ERR_OUT_OF_MEMORY, "inline: out of memory");
      }
    }
    for (int i = 0; i < n->num_operands; i++) {
      ops[i] = out_values[n->operands[i]];
      if (ops[i] == TPU_NO_VALUE) {
        return tpu_ir_fail(dst, TPU_ERR_INVALID_ARGUMENT,
                           "inline: %s (node %d) reads an unbound parameter",
                           tpu_op_name(n->op), v);
      }
    }
    tpu_node_t copy = *n;
    copy.operands = ops;
    char msg[TPU_IR_MESSAGE_CAP];
    tpu_dtype_t dtype;
    tpu_shape_t shape;
    tpu_status_t st = tpu_ir_infer(dst, &copy, &dtype, &shape, msg, sizeof(msg));
    if (st != TPU_OK) return tpu_ir_fail(dst, st, "inline: %s", msg);
    copy.dtype = dtype;
    copy.shape = shape;
    out_values[v] = tpu_ir_append_raw(dst, &copy, ops, n->num_operands);
    if (out_values[v] == TPU_NO_VALUE) return dst->status;
  }
  return TPU_OK;
}
