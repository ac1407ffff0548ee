/* inline.c: tpu_graph_inline, which splices one graph into another.
 *
 * Fused eager and compile mode build one big graph out of the small per-op graphs that
 * eager mode already lowered and cached: each recorded op's graph is inlined into the
 * pending graph, its parameters replaced by values the pending graph already has.
 *
 * A parameter is bound only to a value of its own dtype and shape (else the splice records
 * the graph's error), and nodes come after their operands, so every copied node's operands
 * have the types they have in |src|; the shape rules, which read only those types and the
 * node's attributes, would give each node the type it has in |src|. So nodes are copied
 * with their types as they are, without re-running the rules: |src| is well-typed, as
 * every graph built by the builders, or deserialized (which verifies), is.
 */
#include <stdalign.h>

#include "ir/graph_internal.h"

#define INLINE_STACK_OPERANDS 16

tpu_status_t tpu_graph_inline(tpu_graph_t *dst, const tpu_graph_t *src,
                              const tpu_value_t *param_values, tpu_value_t *out_values) {
  if (!dst || !src || (!param_values && src->num_params > 0) || !out_values) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "inline: NULL argument");
  }
  if (dst == src) { /* appending would move the nodes being copied */
    return tpu_ir_fail(dst, TPU_ERR_INVALID_ARGUMENT, "inline: a graph into itself");
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
    out_values[v] = tpu_ir_append_raw(dst, n, ops, n->num_operands);
    if (out_values[v] == TPU_NO_VALUE) return dst->status;
  }
  return TPU_OK;
}
