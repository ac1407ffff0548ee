/* plan_memory.h: the memory planning pass (internal to src/compiler; plan_memory.c).
 *
 * Every intermediate of an executable is a scratch buffer with a lifetime in step
 * positions [first, last]; planning gives each an offset in one scratch block so that
 * buffers alive at the same time never overlap (buffers whose lifetimes are disjoint share
 * bytes). The block's size is the planned peak; the sum of all buffer sizes is what a plan
 * without reuse would need.
 *
 * Arenas: memory the executable owns before some position, an output that shares memory
 * with nothing else and is first written at that position. A buffer dead before it may
 * live there instead of in the block, so the outputs that a graph fills late hold the
 * intermediates of its early steps (a forward's saved activations, its loss).
 */
#ifndef TPU_COMPILER_PLAN_MEMORY_H
#define TPU_COMPILER_PLAN_MEMORY_H

#include <stddef.h>

#include "tpu/allocator.h"
#include "tpu/status.h"

typedef struct plan_buffer {
  size_t bytes;         /* aligned size */
  size_t used;          /* bytes its views touch (<= bytes): what must fit at an arena's end */
  size_t elem_bytes;    /* its element size: an arena's base must be at least this aligned */
  int first, last;      /* step positions: written at |first|, last read at |last| */
  int arena;            /* the result: -1 the scratch block, else an index into the arenas */
  size_t offset;        /* the result: bytes into the scratch block or the arena */
} plan_buffer_t;

typedef struct plan_arena {
  size_t bytes;         /* usable bytes from its base */
  size_t elem_bytes;    /* the alignment its base is known to have (its element size) */
  int free_until;       /* the position that first writes it: buffers must be dead before */
} plan_arena_t;

/* Assigns places to |buffers| (|n| of them, in nondecreasing |first| order): arenas first,
 * in order of the latest free_until, each taking the buffers that fit and die before it;
 * the rest in the block. Both by first fit, the lowest offset where the buffer fits between
 * the buffers still alive there. Time O((num_arenas + 1) * n * live buffers). *out_peak:
 * the block size; *out_total: the sum of sizes. */
tpu_status_t tpu_plan_memory(plan_buffer_t *buffers, int n, const plan_arena_t *arenas,
                             int num_arenas, tpu_allocator_t host, size_t *out_peak,
                             size_t *out_total);

#endif /* TPU_COMPILER_PLAN_MEMORY_H */
