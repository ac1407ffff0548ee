/* pass_dce.c: dead-code elimination (see include/tpu/passes.h).
 *
 * One backward sweep marks what the outputs read (operands precede users, so a node's mark
 * is final when the sweep reaches it); one forward sweep copies the marked nodes and every
 * parameter (run-time inputs keep their indices even when unused). With nothing dead, no
 * copy is made (*out is NULL).
 */
#include "compiler/rewrite.h"

tpu_status_t pass_dce_run(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out,
                          int *removed) {
  int n = tpu_graph_num_nodes(g);
  bool *live = NULL;
  TPU_RETURN_IF_ERROR(
      tpu_allocator_calloc(host, (size_t)n + 1, sizeof *live, "dce", (void **)&live));
  for (int o = 0; o < tpu_graph_num_outputs(g); o++) live[tpu_graph_output_value(g, o)] = true;
  int dead = 0;
  for (int v = n - 1; v >= 0; v--) {
    const tpu_node_t *node = tpu_graph_node(g, v);
    if (node->op == TPU_OP_PARAMETER) live[v] = true;
    if (!live[v]) {
      dead++;
      continue;
    }
    for (int i = 0; i < node->num_operands; i++) live[node->operands[i]] = true;
  }
  if (removed) *removed = dead;
  *out = NULL;
  if (dead == 0) { /* nothing to drop: the caller keeps |g| */
    tpu_allocator_free(host, live);
    return TPU_OK;
  }
  tpu_rewriter_t rw;
  tpu_status_t st = tpu_rewriter_init(&rw, g, host);
  if (st != TPU_OK) {
    tpu_allocator_free(host, live);
    return st;
  }
  for (int v = 0; v < rw.n; v++) {
    if (!live[v]) continue;
    const tpu_node_t *node = tpu_graph_node(g, v);
    tpu_rewriter_remap(&rw, node);
    rw.map[v] = tpu_rewriter_append(&rw, node, rw.ops);
  }
  tpu_allocator_free(host, live);
  return tpu_rewriter_finish(&rw, out);
}
