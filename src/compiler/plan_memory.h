/* plan_memory.h: the memory planning pass (internal to src/compiler; plan_memory.c).
 *
 * Every intermediate of an executable is a scratch buffer with a lifetime in step
 * positions [first, last]; planning gives each an offset in one scratch block so that
 * buffers alive at the same time never overlap (buffers whose lifetimes are disjoint share
 * bytes). The block's size is the planned peak; the sum of all buffer sizes is what a plan
 * without reuse would need.
 */
#ifndef TPU_COMPILER_PLAN_MEMORY_H
#define TPU_COMPILER_PLAN_MEMORY_H

#include <stddef.h>

#include "tpu/allocator.h"
#include "tpu/status.h"

typedef struct plan_buffer {
  size_t bytes;         /* aligned size */
  int first, last;      /* step positions: written at |first|, last read at |last| */
  size_t offset;        /* bytes into the scratch block (the result) */
} plan_buffer_t;

/* Assigns offsets to |buffers| (|n| of them, in nondecreasing |first| order): first fit,
 * the lowest offset where the buffer fits between the buffers still alive. Time
 * O(n * live buffers). *out_peak: the block size; *out_total: the sum of sizes. */
tpu_status_t tpu_plan_memory(plan_buffer_t *buffers, int n, tpu_allocator_t host,
                             size_t *out_peak, size_t *out_total);

#endif /* TPU_COMPILER_PLAN_MEMORY_H */
