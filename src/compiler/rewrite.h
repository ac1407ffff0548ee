/* rewrite.h: the machinery the graph passes share (internal to src/compiler).
 *
 * A rewriter copies a source graph into a new one node by node: map[v] is the value in the
 * new graph that stands for source value v. pass_ctx_t adds what the one-walk passes
 * (simplify, fold, cse) need: the selected passes, the CSE table, and statistics. New nodes
 * go through pass_emit, so a node a rule creates is itself merged with an equal one.
 */
#ifndef TPU_COMPILER_REWRITE_H
#define TPU_COMPILER_REWRITE_H

#include "ir/graph_internal.h"
#include "tpu/passes.h"

typedef struct tpu_rewriter {
  const tpu_graph_t *src;
  tpu_graph_t *dst;
  tpu_allocator_t host;
  int n;                /* source nodes */
  tpu_value_t *map;     /* (n) source value -> new value, TPU_NO_VALUE if dropped */
  tpu_value_t *ops;     /* (max operands) remapped operands of the node being copied */
} tpu_rewriter_t;

/* Creates the new graph and the map. On error nothing is left to free. */
tpu_status_t tpu_rewriter_init(tpu_rewriter_t *rw, const tpu_graph_t *src, tpu_allocator_t host);
/* rw->ops = the node's operands through the map. */
void tpu_rewriter_remap(tpu_rewriter_t *rw, const tpu_node_t *node);
/* Appends a copy of |node| with |operands| (new values), unchecked: the node's dtype,
 * shape and attributes are kept. TPU_NO_VALUE (error recorded in the graph) when out of
 * memory. */
tpu_value_t tpu_rewriter_append(tpu_rewriter_t *rw, const tpu_node_t *node,
                                const tpu_value_t *operands);
/* Marks the outputs (mapped, same strides), checks the new graph's sticky status and hands
 * it over; frees the rewriter either way. */
tpu_status_t tpu_rewriter_finish(tpu_rewriter_t *rw, tpu_graph_t **out_graph);
void tpu_rewriter_abort(tpu_rewriter_t *rw);

typedef struct pass_ctx {
  tpu_rewriter_t rw;
  uint32_t passes;
  tpu_value_t *cse_slots;  /* open addressing over new values, TPU_NO_VALUE = empty */
  size_t cse_mask;         /* slots - 1 (a power of two minus one), 0 without CSE */
  tpu_pass_stats_t stats;
  /* SIMPLIFY: (source nodes) whether every user of the value is an elementwise node a
   * fused program computes (tpu_fuse_elementwise); the source value being rewritten;
   * (out_cap new values) whether the value stands for an output of the source graph */
  bool *ew_users;
  tpu_value_t cur;
  bool *is_output;
  int out_cap;
} pass_ctx_t;

/* A new node |node| over |operands|: an equal existing node when CSE is on, else appended. */
tpu_value_t pass_emit(pass_ctx_t *c, const tpu_node_t *node, const tpu_value_t *operands);

/* A node of |op| with zeroed attributes (a reshape, or a broadcast of a scalar) over |x|,
 * of |dtype| and |shape|, through pass_emit. */
tpu_value_t pass_emit_shaped(pass_ctx_t *c, tpu_op_t op, tpu_dtype_t dtype, const tpu_shape_t *shape,
                             tpu_value_t x);

/* pass_cse.c: table setup, lookup and insert (values of c->rw.dst). */
tpu_status_t pass_cse_init(pass_ctx_t *c);
void pass_cse_free(pass_ctx_t *c);
tpu_value_t pass_cse_find(const pass_ctx_t *c, const tpu_node_t *node,
                          const tpu_value_t *operands);
void pass_cse_insert(pass_ctx_t *c, tpu_value_t v);

/* pass_simplify.c / pass_fold.c: the value that replaces |node| (whose operands are
 * |ops|, new values), possibly built with pass_emit, or TPU_NO_VALUE if no rule applies. */
tpu_value_t pass_simplify_node(pass_ctx_t *c, const tpu_node_t *node, const tpu_value_t *ops);
tpu_value_t pass_fold_node(pass_ctx_t *c, const tpu_node_t *node, const tpu_value_t *ops);

/* If |v| (of |g|) is a splat constant, directly or through broadcast_in_dim / reshape
 * chains, its constant node; else NULL. */
const tpu_node_t *pass_splat(const tpu_graph_t *g, tpu_value_t v);

/* pass_dce.c: *out is the graph without dead nodes, or NULL if none is dead. */
tpu_status_t pass_dce_run(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out,
                          int *removed);

#endif /* TPU_COMPILER_REWRITE_H */
