/* passes.c: the graph pass driver, tpu_passes_run and the one-pass entry points
 * (include/tpu/passes.h).
 *
 * simplify, fold and cse share one walk over the nodes: each node's operands are remapped,
 * then simplify may replace it by an existing value, fold by a constant, cse by an equal
 * earlier node; otherwise it is copied (and entered in the CSE table). Rules build new
 * nodes through pass_emit, so they are merged too. dce then runs as its own sweep.
 */
#include <string.h>

#include "compiler/fuse.h"
#include "compiler/rewrite.h"

tpu_value_t pass_emit(pass_ctx_t *c, const tpu_node_t *node, const tpu_value_t *operands) {
  tpu_value_t v = pass_cse_find(c, node, operands);
  if (v != TPU_NO_VALUE) return v;
  v = tpu_rewriter_append(&c->rw, node, operands);
  if (v != TPU_NO_VALUE) pass_cse_insert(c, v);
  return v;
}

tpu_value_t pass_emit_shaped(pass_ctx_t *c, tpu_op_t op, tpu_dtype_t dtype, const tpu_shape_t *shape,
                             tpu_value_t x) {
  tpu_node_t n;
  memset(&n, 0, sizeof n);
  n.op = op;
  n.dtype = dtype;
  n.shape = *shape;
  n.num_operands = 1;
  return pass_emit(c, &n, &x);
}

/* A replacement must be a value of the node's dtype and shape. */
static bool fits(const pass_ctx_t *c, const tpu_node_t *node, tpu_value_t v) {
  const tpu_node_t *r = tpu_graph_node(c->rw.dst, v);
  return r && r->dtype == node->dtype && tpu_shape_equal(&r->shape, &node->shape);
}

/* (nodes of |g|) whether every user of each value is elementwise and fusible (a value no
 * node reads, an output only, counts as such). */
static tpu_status_t ew_users_of(const tpu_graph_t *g, tpu_allocator_t host, bool **out) {
  int n = tpu_graph_num_nodes(g);
  bool *ok = NULL;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, (size_t)n + 1, sizeof *ok, "passes",
                                           (void **)&ok));
  for (int v = 0; v < n; v++) ok[v] = true;
  for (int u = 0; u < n; u++) {
    const tpu_node_t *node = tpu_graph_node(g, u);
    if (tpu_fuse_elementwise(g, node)) continue;
    for (int i = 0; i < node->num_operands; i++) ok[node->operands[i]] = false;
  }
  *out = ok;
  return TPU_OK;
}

/* Records that new value |r| stands for a source output (c->is_output, grown as needed). */
static tpu_status_t mark_output(pass_ctx_t *c, tpu_allocator_t host, tpu_value_t r) {
  if (r >= c->out_cap) {
    int cap = c->out_cap ? c->out_cap : 64;
    while (cap <= r) cap *= 2;
    bool *grown = NULL;
    TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, (size_t)cap, sizeof *grown, "passes",
                                             (void **)&grown));
    if (c->out_cap) memcpy(grown, c->is_output, (size_t)c->out_cap * sizeof *grown);
    tpu_allocator_free(host, c->is_output);
    c->is_output = grown;
    c->out_cap = cap;
  }
  c->is_output[r] = true;
  return TPU_OK;
}

static tpu_status_t walk(const tpu_graph_t *g, uint32_t passes, tpu_allocator_t host,
                         tpu_graph_t **out, tpu_pass_stats_t *stats) {
  pass_ctx_t c;
  memset(&c, 0, sizeof c);
  c.passes = passes;
  TPU_RETURN_IF_ERROR(tpu_rewriter_init(&c.rw, g, host));
  if (passes & TPU_PASS_CSE) {
    tpu_status_t st = pass_cse_init(&c);
    if (st != TPU_OK) {
      tpu_rewriter_abort(&c.rw);
      return st;
    }
  }
  bool *src_output = NULL; /* (source nodes) SIMPLIFY: the value is an output */
  if (passes & TPU_PASS_SIMPLIFY) {
    tpu_status_t st = ew_users_of(g, host, &c.ew_users);
    if (st == TPU_OK) {
      st = tpu_allocator_calloc(host, (size_t)c.rw.n + 1, sizeof *src_output, "passes",
                                (void **)&src_output);
    }
    if (st != TPU_OK) {
      tpu_allocator_free(host, c.ew_users);
      pass_cse_free(&c);
      tpu_rewriter_abort(&c.rw);
      return st;
    }
    for (int i = 0; i < tpu_graph_num_outputs(g); i++) src_output[tpu_graph_output_value(g, i)] = true;
  }
  tpu_status_t st = TPU_OK;
  for (int v = 0; v < c.rw.n; v++) {
    const tpu_node_t *node = tpu_graph_node(g, v);
    c.cur = v;
    tpu_rewriter_remap(&c.rw, node);
    tpu_value_t r = TPU_NO_VALUE;
    if (node->op != TPU_OP_PARAMETER) {
      if (passes & TPU_PASS_SIMPLIFY) {
        r = pass_simplify_node(&c, node, c.rw.ops);
        if (r != TPU_NO_VALUE && !fits(&c, node, r)) r = TPU_NO_VALUE;
        if (r != TPU_NO_VALUE) stats->simplified++;
      }
      if (r == TPU_NO_VALUE && (passes & TPU_PASS_FOLD)) {
        r = pass_fold_node(&c, node, c.rw.ops);
        if (r != TPU_NO_VALUE && !fits(&c, node, r)) r = TPU_NO_VALUE;
        if (r != TPU_NO_VALUE) stats->folded++;
      }
      if (r == TPU_NO_VALUE) {
        r = pass_cse_find(&c, node, c.rw.ops);
        if (r != TPU_NO_VALUE) stats->merged++;
      }
    }
    if (r == TPU_NO_VALUE) {
      r = tpu_rewriter_append(&c.rw, node, c.rw.ops);
      if (r != TPU_NO_VALUE) pass_cse_insert(&c, r);
    }
    if (r == TPU_NO_VALUE) break; /* out of memory: recorded in the new graph */
    c.rw.map[v] = r;
    if (src_output && src_output[v]) {
      st = mark_output(&c, host, r);
      if (st != TPU_OK) break;
    }
  }
  pass_cse_free(&c);
  tpu_allocator_free(host, c.ew_users);
  tpu_allocator_free(host, c.is_output);
  tpu_allocator_free(host, src_output);
  if (st != TPU_OK) {
    tpu_rewriter_abort(&c.rw);
    return st;
  }
  return tpu_rewriter_finish(&c.rw, out);
}

tpu_status_t tpu_passes_run(const tpu_graph_t *g, uint32_t passes, tpu_allocator_t host,
                            tpu_graph_t **out_graph, tpu_pass_stats_t *stats) {
  if (!g || !out_graph) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "passes: graph or out_graph is NULL");
  }
  *out_graph = NULL;
  if (tpu_graph_status(g) != TPU_OK) {
    return tpu_status_set(tpu_graph_status(g), "passes: the graph has a build error: %s",
                          tpu_graph_error_message(g));
  }
  tpu_pass_stats_t local;
  if (!stats) stats = &local;
  memset(stats, 0, sizeof *stats);
  stats->nodes_in = tpu_graph_num_nodes(g);
  tpu_graph_t *cur = NULL;
  uint32_t walk_passes = passes & (TPU_PASS_SIMPLIFY | TPU_PASS_FOLD | TPU_PASS_CSE);
  TPU_RETURN_IF_ERROR(walk(g, walk_passes, host, &cur, stats));
  if (passes & TPU_PASS_DCE) {
    tpu_graph_t *next = NULL;
    tpu_status_t st = pass_dce_run(cur, host, &next, &stats->removed);
    if (st != TPU_OK || next) tpu_graph_destroy(cur);
    if (st != TPU_OK) return st;
    if (next) cur = next;
  }
  stats->nodes_out = tpu_graph_num_nodes(cur);
  *out_graph = cur;
  return TPU_OK;
}

tpu_status_t tpu_pass_simplify(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out) {
  return tpu_passes_run(g, TPU_PASS_SIMPLIFY, host, out, NULL);
}

tpu_status_t tpu_pass_fold(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out) {
  return tpu_passes_run(g, TPU_PASS_FOLD, host, out, NULL);
}

tpu_status_t tpu_pass_cse(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out) {
  return tpu_passes_run(g, TPU_PASS_CSE, host, out, NULL);
}

tpu_status_t tpu_pass_dce(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out) {
  return tpu_passes_run(g, TPU_PASS_DCE, host, out, NULL);
}
