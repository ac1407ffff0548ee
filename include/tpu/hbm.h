/* hbm.h: one chip's HBM, an arena of exactly the chip's capacity in host memory.
 *
 * The arena reserves |capacity| bytes of address space up front (mmap, NORESERVE)
 * and the host commits pages only when they are touched, so a 16 GiB chip costs
 * nothing until tensors are written. Allocation is best-fit over an address-ordered
 * block list with coalescing; bookkeeping lives outside the arena. A request that
 * does not fit fails with TPU_ERR_OUT_OF_MEMORY even when the host has room.
 * Freed ranges of at least one page are returned to the host (madvise DONTNEED).
 * Thread-safe.
 */
#ifndef TPU_HBM_H
#define TPU_HBM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/allocator.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_HBM_ALIGNMENT 512 /* bytes: every block starts and ends on this */

typedef struct tpu_hbm tpu_hbm_t;

/* Creates an arena of |capacity_bytes| (rounded up to TPU_HBM_ALIGNMENT);
 * |host| allocates the bookkeeping. */
tpu_status_t tpu_hbm_create(uint64_t capacity_bytes, tpu_allocator_t host,
                            tpu_hbm_t **out_hbm);
/* Unmaps the arena; outstanding blocks become invalid. NULL is ignored. */
void tpu_hbm_destroy(tpu_hbm_t *hbm);

/* Allocates |bytes| (> 0, rounded up to TPU_HBM_ALIGNMENT). On failure returns
 * TPU_ERR_OUT_OF_MEMORY with a message naming requested, used and total bytes. */
tpu_status_t tpu_hbm_alloc(tpu_hbm_t *hbm, size_t bytes, void **out_ptr);
/* Frees a block returned by tpu_hbm_alloc; NULL is ignored. Freeing a pointer that
 * is not the start of a live block fails with TPU_ERR_INVALID_ARGUMENT. */
tpu_status_t tpu_hbm_free(tpu_hbm_t *hbm, void *ptr);

uint64_t tpu_hbm_capacity(const tpu_hbm_t *hbm);  /* bytes */
uint64_t tpu_hbm_used(tpu_hbm_t *hbm);            /* bytes in live blocks */
/* Size in bytes of the largest block that could be allocated now. */
uint64_t tpu_hbm_largest_free(tpu_hbm_t *hbm);
/* True if |ptr| lies inside the arena's address range. */
bool tpu_hbm_contains(const tpu_hbm_t *hbm, const void *ptr);

#ifdef __cplusplus
}
#endif
#endif /* TPU_HBM_H */
