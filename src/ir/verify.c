/* verify.c: tpu_graph_verify, which re-checks every invariant the builder enforces.
 *
 * For each node, in order: the op is known, the operand count matches ops.def, every operand
 * precedes its user, and the shape rule (shape_rules.c, the builder's own) accepts the node
 * and re-derives exactly the node's dtype and shape. Then: parameter indices are 0..n-1, each
 * once; outputs name nodes and have non-negative strides. A graph built only through the
 * builder always verifies; a graph with a recorded build error never does.
 *
 * Errors come back as a status with the thread's message set, e.g.
 * "verify: node 3 (ADD): result f32[2,2] differs from the inferred f32[2,3]".
 */
#include <stdio.h>
#include <string.h>

#include "ir/graph_internal.h"

static tpu_status_t verify_node(const tpu_graph_t *g, int i, bool *param_seen) {
  const tpu_node_t *n = &g->nodes[i];
  if ((unsigned)n->op >= TPU_OP_COUNT) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "verify: node %d: invalid op %d", i,
                          (int)n->op);
  }
  const char *op = tpu_op_name(n->op);
  int arity = tpu_op_arity(n->op);
  if (n->num_operands < 0 || (arity >= 0 && n->num_operands != arity)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "verify: node %d (%s): has %d operands, the op takes %d", i, op,
                          n->num_operands, arity);
  }
  if (n->num_operands > 0 && !n->operands) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "verify: node %d (%s): operand list is missing", i, op);
  }
  for (int k = 0; k < n->num_operands; k++) {
    tpu_value_t v = n->operands[k];
    if (v < 0 || v >= i) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "verify: node %d (%s): operand %d (value %d) does not precede "
                            "its user", i, op, k, (int)v);
    }
  }
  char msg[TPU_IR_MESSAGE_CAP];
  tpu_dtype_t dt;
  tpu_shape_t sh;
  tpu_status_t st = tpu_ir_infer(g, n, &dt, &sh, msg, sizeof(msg));
  if (st != TPU_OK) {
    return tpu_status_set(st, "verify: node %d (%s): %s", i, op, msg);
  }
  if (dt != n->dtype || !tpu_shape_equal(&sh, &n->shape)) {
    char have[TPU_IR_TYPE_CAP], want[TPU_IR_TYPE_CAP];
    tpu_ir_format_type(n->dtype, &n->shape, have, sizeof(have));
    tpu_ir_format_type(dt, &sh, want, sizeof(want));
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "verify: node %d (%s): result %s differs from the inferred %s", i,
                          op, have, want);
  }
  if (n->op == TPU_OP_PARAMETER) {
    int idx = n->attrs.param.index;
    if (idx < 0 || idx >= g->num_params) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "verify: node %d (PARAMETER): index %d is outside 0..%d", i, idx,
                            g->num_params - 1);
    }
    if (param_seen[idx]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "verify: node %d (PARAMETER): index %d is used twice", i, idx);
    }
    param_seen[idx] = true;
  }
  return TPU_OK;
}

tpu_status_t tpu_graph_verify(const tpu_graph_t *g) {
  if (!g) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "verify: graph is NULL");
  if (g->status != TPU_OK) {
    return tpu_status_set(g->status, "verify: the graph has a build error: %s", g->message);
  }
  int params = 0;
  for (int i = 0; i < g->num_nodes; i++) params += g->nodes[i].op == TPU_OP_PARAMETER;
  if (params != g->num_params) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "verify: the graph counts %d parameters but has %d parameter nodes",
                          g->num_params, params);
  }
  bool *seen = NULL;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(g->host, (size_t)params + 1, sizeof(bool),
                                           "verify", (void **)&seen));
  tpu_status_t st = TPU_OK;
  for (int i = 0; i < g->num_nodes && st == TPU_OK; i++) st = verify_node(g, i, seen);
  tpu_allocator_free(g->host, seen);
  TPU_RETURN_IF_ERROR(st);
  for (int i = 0; i < g->num_outputs; i++) {
    const tpu_ir_output_t *o = &g->outputs[i];
    if (o->value < 0 || o->value >= g->num_nodes) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "verify: output %d names value %d, which is not a node (%d nodes)",
                            i, (int)o->value, g->num_nodes);
    }
    if (!o->strided) continue;
    for (int d = 0; d < g->nodes[o->value].shape.rank; d++) {
      if (o->strides[d] < 0) {
        return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                              "verify: output %d: stride %lld of dim %d is negative", i,
                              (long long)o->strides[d], d);
      }
    }
  }
  return TPU_OK;
}
