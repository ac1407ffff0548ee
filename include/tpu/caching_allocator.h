/* caching_allocator.h: the device allocator tensors use, a cache over one chip's HBM.
 *
 * Like PyTorch's CUDA caching allocator: freed blocks are kept for reuse instead of
 * going back to the arena, so steady-state training does no arena work. When the
 * arena is full, the cache is released and the request retried before reporting
 * out of memory. Statistics follow torch.cuda.memory_stats names:
 *   allocated = bytes in blocks handed to callers (rounded block sizes)
 *   reserved  = allocated + cached, i.e. bytes taken from the arena
 * Block sizes are rounded up (512 B below 1 MiB, 128 KiB below 16 MiB, 2 MiB above)
 * and blocks are never split; a cached block is reused for a request when it is at
 * most 2x (small) or 1.25x (>= 1 MiB) the rounded size. Blocks are 512-byte aligned.
 * A limit below the chip's HBM (torch.tpu.set_per_process_memory_fraction) caps the
 * reserved bytes the same way: past it the cache is released, then out of memory.
 * Thread-safe: blocks may be freed from any thread.
 */
#ifndef TPU_CACHING_ALLOCATOR_H
#define TPU_CACHING_ALLOCATOR_H

#include <stddef.h>
#include <stdint.h>

#include "tpu/allocator.h"
#include "tpu/hbm.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_caching_allocator tpu_caching_allocator_t;

typedef struct tpu_memory_stats {
  uint64_t allocated_bytes;       /* current */
  uint64_t allocated_bytes_peak;  /* since creation or last reset_peak */
  uint64_t reserved_bytes;        /* current */
  uint64_t reserved_bytes_peak;
  uint64_t requested_bytes;       /* current, as asked by callers (unrounded) */
  uint64_t active_blocks;         /* blocks handed out and not yet freed */
  uint64_t cached_blocks;         /* blocks kept for reuse */
  uint64_t alloc_count;           /* successful allocations, cumulative */
  uint64_t free_count;            /* frees, cumulative */
  uint64_t cache_hits;            /* allocations served from the cache */
  uint64_t arena_allocs;          /* allocations that went to the arena */
  uint64_t cache_flushes;         /* times the cache was released (OOM retry or empty_cache) */
  uint64_t num_ooms;              /* failed allocations */
  uint64_t capacity_bytes;        /* the chip's HBM */
} tpu_memory_stats_t;

/* |device_index| only labels messages ("tpu:1"). The allocator does not own |hbm|. */
tpu_status_t tpu_caching_allocator_create(tpu_hbm_t *hbm, int device_index,
                                          tpu_allocator_t host,
                                          tpu_caching_allocator_t **out);
/* Names the chip in out-of-memory messages ("TPU v5e"); copied, truncated to 63
 * chars. NULL or "" removes the label. The runtime sets the marketing name. */
void tpu_caching_allocator_set_label(tpu_caching_allocator_t *ca, const char *label);
/* Returns all blocks (cached and live) to the arena. NULL is ignored. */
void tpu_caching_allocator_destroy(tpu_caching_allocator_t *ca);

/* Caps the reserved bytes (live and cached blocks) at |bytes|; at least the chip's HBM
 * (UINT64_MAX, the default): no cap beyond the HBM. Blocks already reserved past a new,
 * lower cap stay; only later allocations are refused. */
void tpu_caching_allocator_set_limit(tpu_caching_allocator_t *ca, uint64_t bytes);
/* The cap in bytes: the chip's HBM when none is set. */
uint64_t tpu_caching_allocator_limit(tpu_caching_allocator_t *ca);

/* |bytes| == 0 returns *out_ptr = NULL and TPU_OK. Out of memory (after
 * releasing the cache) gives TPU_ERR_OUT_OF_MEMORY with a message like
 * "tpu:0 out of memory: tried to allocate 1.00 GiB (1073741824 bytes); 15.50 GiB
 *  in use, 0 B cached, 16.00 GiB total HBM (TPU v5e)". */
tpu_status_t tpu_caching_alloc(tpu_caching_allocator_t *ca, size_t bytes,
                               void **out_ptr);
/* What an allocation is for, kept with the live block for out-of-memory reports: the op
 * that allocated it (a string that lives for the process, or NULL) and the tensor's
 * dtype name (static, or NULL) and shape (rank < 0: unknown). */
#define TPU_ALLOC_TAG_MAX_RANK 8
typedef struct tpu_alloc_tag {
  const char *op;
  const char *dtype;
  int rank;
  int64_t dims[TPU_ALLOC_TAG_MAX_RANK];
} tpu_alloc_tag_t;

/* tpu_caching_alloc that remembers |tag| (copied; NULL: untagged) with the block. */
tpu_status_t tpu_caching_alloc_tagged(tpu_caching_allocator_t *ca, size_t bytes,
                                      const tpu_alloc_tag_t *tag, void **out_ptr);

/* Sets the op of the live block at |ptr| if it has none (an allocation made before the op
 * that fills it was known, e.g. by a composite kernel's empty()). */
void tpu_caching_set_tag_op(tpu_caching_allocator_t *ca, const void *ptr, const char *op);

typedef struct tpu_live_block {
  const void *ptr;
  size_t size;            /* rounded block size */
  size_t requested;       /* bytes asked for */
  tpu_alloc_tag_t tag;    /* op NULL and rank -1 if untagged */
} tpu_live_block_t;

/* The |cap| largest live blocks, largest first, into |out|; returns how many were written.
 * Walks every live block: for error reports, not hot paths. */
size_t tpu_caching_largest_live(tpu_caching_allocator_t *ca, tpu_live_block_t *out, size_t cap);

/* Returns a block to the cache; NULL is ignored. */
void tpu_caching_free(tpu_caching_allocator_t *ca, void *ptr);
/* Size in bytes usable at |ptr| (the rounded block size), 0 if not a live block. */
size_t tpu_caching_block_size(tpu_caching_allocator_t *ca, const void *ptr);

/* Releases every cached block to the arena (torch.tpu.empty_cache). */
void tpu_caching_empty_cache(tpu_caching_allocator_t *ca);
void tpu_caching_get_stats(tpu_caching_allocator_t *ca, tpu_memory_stats_t *out_stats);
/* Sets the peaks to the current values. */
void tpu_caching_reset_peak(tpu_caching_allocator_t *ca);

/* Formats |bytes| as "1.50 GiB" into |buf|; returns |buf|. */
const char *tpu_format_bytes(uint64_t bytes, char *buf, size_t buf_size);

#ifdef __cplusplus
}
#endif
#endif /* TPU_CACHING_ALLOCATOR_H */
