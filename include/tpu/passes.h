/* passes.h: graph -> graph optimization passes of the compiler (src/compiler/pass_*.c).
 *
 * Graphs are immutable append-only node lists, so every pass builds a new graph: it walks
 * the nodes in order and copies each one with its operands remapped, or replaces it by a
 * value it already built. Every pass keeps the parameters (all of them, same indices,
 * dtypes, shapes and strides) and the outputs (same order, dtypes, shapes and strides), so
 * the result binds to the same run-time inputs and outputs as the original. Passes never
 * change results: a rewrite is applied only where it is exact in IEEE arithmetic (x * 1,
 * x - 0.0 and x + -0.0 are; x + 0.0 is not, for x = -0.0), and constant folding computes
 * with the very kernels that would have run.
 *
 * Each pass costs O(nodes + operands) time (CSE is hash-based).
 *
 *   simplify  convert to the same dtype, transpose/reshape/broadcast chains, identity
 *             layout ops (whole slices too), x * 1, x / 1, x - 0, x + -0 (and integer
 *             x + 0), -(-x), select on a constant predicate, a dot_general's batch dim
 *             merged by a reshape read unmerged (no copy of strided heads)
 *   fold      elementwise ops (unary, binary, compare, select, clamp, convert) whose
 *             operands are all splat constants (constants, or broadcasts and reshapes of
 *             them) become one scalar constant broadcast to the result shape
 *   cse       nodes with the same op, dtype, shape, attributes and operands are merged
 *             (never parameters or RNG)
 *   dce       nodes no output depends on are dropped (parameters stay)
 *   fuse      (not a graph pass: tpu_compile's kernel fusion, listed so it can be disabled)
 */
#ifndef TPU_PASSES_H
#define TPU_PASSES_H

#include <stdint.h>

#include "tpu/allocator.h"
#include "tpu/ir.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_pass {
  TPU_PASS_SIMPLIFY = 1u << 0,
  TPU_PASS_FOLD = 1u << 1,
  TPU_PASS_CSE = 1u << 2,
  TPU_PASS_DCE = 1u << 3,
  TPU_PASS_FUSE = 1u << 4,     /* kernel fusion in tpu_compile */
  TPU_PASS_ALL = 0x1fu,
} tpu_pass_t;

/* Statistics of one tpu_passes_run (what each pass changed). */
typedef struct tpu_pass_stats {
  int nodes_in, nodes_out;
  int simplified;   /* nodes replaced by a simpler value */
  int folded;       /* nodes replaced by a constant */
  int merged;       /* nodes merged into an equal earlier node */
  int removed;      /* dead nodes dropped */
} tpu_pass_stats_t;

/* Runs the graph passes selected in |passes| (TPU_PASS_* bits; FUSE is ignored here):
 * simplify, fold and cse in one walk, then dce. *out_graph is a new graph (destroy it with
 * tpu_graph_destroy), also when nothing changed. |stats| may be NULL. |g| must verify. */
tpu_status_t tpu_passes_run(const tpu_graph_t *g, uint32_t passes, tpu_allocator_t host,
                            tpu_graph_t **out_graph, tpu_pass_stats_t *stats);

/* One pass each (the same as tpu_passes_run with one bit). */
tpu_status_t tpu_pass_simplify(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out);
tpu_status_t tpu_pass_fold(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out);
tpu_status_t tpu_pass_cse(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out);
tpu_status_t tpu_pass_dce(const tpu_graph_t *g, tpu_allocator_t host, tpu_graph_t **out);

#ifdef __cplusplus
}
#endif
#endif /* TPU_PASSES_H */
