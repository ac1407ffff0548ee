/* rewrite.c: the graph rewriter (rewrite.h): a new graph, the source -> new value map, and
 * node copies with remapped operands. */
#include <stdalign.h>
#include <stddef.h>
#include <string.h>

#include "compiler/rewrite.h"

tpu_status_t tpu_rewriter_init(tpu_rewriter_t *rw, const tpu_graph_t *src, tpu_allocator_t host) {
  memset(rw, 0, sizeof *rw);
  rw->src = src;
  rw->host = host;
  rw->n = tpu_graph_num_nodes(src);
  int max_ops = 1;
  for (int v = 0; v < rw->n; v++) {
    int k = tpu_graph_node(src, v)->num_operands;
    if (k > max_ops) max_ops = k;
  }
  TPU_RETURN_IF_ERROR(tpu_graph_create(host, &rw->dst));
  /* the new graph has at most about as many nodes: size its node array once (graph.c
   * grows it by doubling otherwise, copying every node each time) */
  size_t cap = (size_t)rw->n + 16, bytes;
  tpu_status_t st = TPU_OK;
  if (!tpu_size_mul(cap, sizeof(tpu_node_t), &bytes) ||
      !(rw->dst->nodes = host.alloc(host.self, bytes, alignof(max_align_t)))) {
    st = tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "passes: out of host memory for %zu nodes", cap);
  }
  if (st == TPU_OK) {
    rw->dst->cap_nodes = (int)cap;
    st = tpu_allocator_calloc(host, (size_t)rw->n + 1, sizeof *rw->map, "passes",
                              (void **)&rw->map);
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)max_ops, sizeof *rw->ops, "passes",
                              (void **)&rw->ops);
  }
  if (st != TPU_OK) {
    tpu_rewriter_abort(rw);
    return st;
  }
  for (int v = 0; v < rw->n; v++) rw->map[v] = TPU_NO_VALUE;
  return TPU_OK;
}

void tpu_rewriter_remap(tpu_rewriter_t *rw, const tpu_node_t *node) {
  for (int i = 0; i < node->num_operands; i++) rw->ops[i] = rw->map[node->operands[i]];
}

tpu_value_t tpu_rewriter_append(tpu_rewriter_t *rw, const tpu_node_t *node,
                                const tpu_value_t *operands) {
  if (tpu_graph_status(rw->dst) != TPU_OK) return TPU_NO_VALUE;
  return tpu_ir_append_raw(rw->dst, node, operands, node->num_operands);
}

void tpu_rewriter_abort(tpu_rewriter_t *rw) {
  tpu_graph_destroy(rw->dst);
  tpu_allocator_free(rw->host, rw->map);
  tpu_allocator_free(rw->host, rw->ops);
  memset(rw, 0, sizeof *rw);
}

tpu_status_t tpu_rewriter_finish(tpu_rewriter_t *rw, tpu_graph_t **out_graph) {
  tpu_status_t st = tpu_graph_status(rw->dst);
  for (int o = 0; st == TPU_OK && o < tpu_graph_num_outputs(rw->src); o++) {
    int64_t strides[TPU_MAX_RANK];
    bool strided = tpu_graph_output_strides(rw->src, o, strides);
    tpu_value_t v = rw->map[tpu_graph_output_value(rw->src, o)];
    if (v == TPU_NO_VALUE) {
      st = tpu_status_set(TPU_ERR_INTERNAL, "passes: output %d lost its value", o);
      break;
    }
    st = tpu_graph_output(rw->dst, v, strided ? strides : NULL);
  }
  if (st != TPU_OK) {
    if (tpu_graph_status(rw->dst) != TPU_OK) {
      st = tpu_status_set(tpu_graph_status(rw->dst), "passes: %s",
                          tpu_graph_error_message(rw->dst));
    }
    tpu_rewriter_abort(rw);
    return st;
  }
  *out_graph = rw->dst;
  rw->dst = NULL;
  tpu_rewriter_abort(rw);
  return TPU_OK;
}
