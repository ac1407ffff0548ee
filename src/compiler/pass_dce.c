/* pass_dce.c: dead-code elimination (see include/tpu/passes.h).
 *
 * One backward sweep marks what the outputs read (operands precede users, so a node's mark
 * is final when the sweep reaches it); one forward sweep copies the marked nodes and every
 * parameter (run-time inputs keep their indices even when unused).
 */
#include "compiler/rewrite.h"

tpu_status_t pass_dce_run(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out,
                          int *removed) {
  tpu_rewriter_t rw;
  TPU_RETURN_IF_ERROR(tpu_rewriter_init(&rw, g, host));
  bool *live = NULL;
  tpu_status_t st = tpu_allocator_calloc(host, (size_t)rw.n + 1, sizeof *live, "dce",
                                         (void **)&live);
  if (st != TPU_OK) {
    tpu_rewriter_abort(&rw);
    return st;
  }
  for (int o = 0; o < tpu_graph_num_outputs(g); o++) live[tpu_graph_output_value(g, o)] = true;
  int dead = 0;
  for (int v = rw.n - 1; v >= 0; v--) {
    const tpu_node_t *node = tpu_graph_node(g, v);
    if (node->op == TPU_OP_PARAMETER) live[v] = true;
    if (!live[v]) {
      dead++;
      continue;
    }
    for (int i = 0; i < node->num_operands; i++) live[node->operands[i]] = true;
  }
  for (int v = 0; v < rw.n; v++) {
    if (!live[v]) continue;
    const tpu_node_t *node = tpu_graph_node(g, v);
    tpu_rewriter_remap(&rw, node);
    rw.map[v] = tpu_rewriter_append(&rw, node, rw.ops);
  }
  tpu_allocator_free(host, live);
  if (removed) *removed = dead;
  return tpu_rewriter_finish(&rw, out);
}
