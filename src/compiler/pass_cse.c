/* pass_cse.c: common-subexpression elimination by hashing (see include/tpu/passes.h).
 *
 * A node's key is its op, dtype, shape, operands (new values) and the bytes of its op's
 * attribute struct: builders zero a node before filling it, so equal attributes have equal
 * bytes (unequal bytes only ever cost a missed merge, never a wrong one). The table is open
 * addressing over new values, sized at four times the source graph's nodes, so lookups are O(1)
 * and the pass is linear. Parameters (distinct inputs) and RNG are never merged.
 */
#include <string.h>

#include "compiler/rewrite.h"

/* Bytes of the attribute struct |op| uses (0: none). */
static size_t attrs_size(tpu_op_t op) {
  const tpu_attrs_t *a = NULL;
  switch (op) {
    case TPU_OP_PARAMETER: return sizeof a->param;
    case TPU_OP_CONSTANT: return sizeof a->constant;
    case TPU_OP_IOTA: return sizeof a->iota;
    case TPU_OP_RNG: return sizeof a->rng;
    case TPU_OP_COMPARE: return sizeof a->compare;
    case TPU_OP_BROADCAST_IN_DIM: return sizeof a->broadcast;
    case TPU_OP_TRANSPOSE: return sizeof a->transpose;
    case TPU_OP_SLICE: return sizeof a->slice;
    case TPU_OP_DYNAMIC_SLICE: return sizeof a->dynamic_slice;
    case TPU_OP_CONCATENATE: return sizeof a->concat;
    case TPU_OP_PAD: return sizeof a->pad;
    case TPU_OP_REVERSE: return sizeof a->reverse;
    case TPU_OP_REDUCE: return sizeof a->reduce;
    case TPU_OP_REDUCE_WINDOW: return sizeof a->reduce_window;
    case TPU_OP_SCAN: return sizeof a->scan;
    case TPU_OP_DOT_GENERAL: return sizeof a->dot;
    case TPU_OP_CONVOLUTION: return sizeof a->conv;
    case TPU_OP_GATHER: return sizeof a->gather;
    case TPU_OP_SCATTER: return sizeof a->scatter;
    case TPU_OP_SORT:
    case TPU_OP_ARGSORT: return sizeof a->sort;
    case TPU_OP_CHOLESKY: return sizeof a->cholesky;
    case TPU_OP_TRIANGULAR_SOLVE: return sizeof a->triangular_solve;
    case TPU_OP_LU_PIVOTS_TO_PERMUTATION: return sizeof a->lu_permutation;
    default: return 0;
  }
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v;
  h *= 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 31);
}

static uint64_t node_hash(const tpu_node_t *node, const tpu_value_t *operands) {
  uint64_t h = mix(0xcbf29ce484222325ull, (uint64_t)node->op);
  h = mix(h, (uint64_t)node->dtype);
  h = mix(h, (uint64_t)node->shape.rank);
  for (int d = 0; d < node->shape.rank; d++) h = mix(h, (uint64_t)node->shape.dims[d]);
  h = mix(h, (uint64_t)node->num_operands);
  for (int i = 0; i < node->num_operands; i++) h = mix(h, (uint64_t)(uint32_t)operands[i]);
  size_t n = attrs_size(node->op);
  const unsigned char *p = (const unsigned char *)&node->attrs;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    memcpy(&w, p + i, n - i < 8 ? n - i : 8);
    h = mix(h, w);
  }
  return h ^ (h >> 29);
}

static bool mergeable(tpu_op_t op) { return op != TPU_OP_PARAMETER && op != TPU_OP_RNG; }

static bool same_node(const tpu_node_t *a, const tpu_node_t *b, const tpu_value_t *b_operands) {
  return a->op == b->op && a->dtype == b->dtype && tpu_shape_equal(&a->shape, &b->shape) &&
         a->num_operands == b->num_operands &&
         (a->num_operands == 0 ||
          !memcmp(a->operands, b_operands, sizeof(tpu_value_t) * (size_t)a->num_operands)) &&
         !memcmp(&a->attrs, &b->attrs, attrs_size(a->op));
}

tpu_status_t pass_cse_init(pass_ctx_t *c) {
  size_t want = (size_t)c->rw.n * 4 + 16, cap = 16;
  while (cap < want) {
    if (cap > SIZE_MAX / 4) return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "cse: table too large");
    cap *= 2;
  }
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(c->rw.host, cap, sizeof *c->cse_slots, "cse",
                                           (void **)&c->cse_slots));
  for (size_t i = 0; i < cap; i++) c->cse_slots[i] = TPU_NO_VALUE;
  c->cse_mask = cap - 1;
  return TPU_OK;
}

void pass_cse_free(pass_ctx_t *c) {
  tpu_allocator_free(c->rw.host, c->cse_slots);
  c->cse_slots = NULL;
  c->cse_mask = 0;
}

tpu_value_t pass_cse_find(const pass_ctx_t *c, const tpu_node_t *node,
                          const tpu_value_t *operands) {
  if (!c->cse_slots || !mergeable(node->op)) return TPU_NO_VALUE;
  size_t i = node_hash(node, operands) & c->cse_mask;
  for (size_t probes = 0; probes <= c->cse_mask; probes++, i = (i + 1) & c->cse_mask) {
    tpu_value_t v = c->cse_slots[i];
    if (v == TPU_NO_VALUE) return TPU_NO_VALUE;
    const tpu_node_t *have = tpu_graph_node(c->rw.dst, v);
    if (have && same_node(have, node, operands)) return v;
  }
  return TPU_NO_VALUE;
}

void pass_cse_insert(pass_ctx_t *c, tpu_value_t v) {
  const tpu_node_t *node = tpu_graph_node(c->rw.dst, v);
  if (!c->cse_slots || !node || !mergeable(node->op)) return;
  size_t i = node_hash(node, node->operands) & c->cse_mask;
  /* at most one entry per new node, and rules add at most two new nodes per source node,
   * so 4n + 16 slots keep the load at or below one half; a full table only loses merges */
  for (size_t probes = 0; probes <= c->cse_mask; probes++, i = (i + 1) & c->cse_mask) {
    if (c->cse_slots[i] == TPU_NO_VALUE) {
      c->cse_slots[i] = v;
      return;
    }
  }
}
