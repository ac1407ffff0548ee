/* ptr_map.h: an internal hash map from a non-zero address-like key to a pointer.
 *
 * Open addressing with linear probing and backward-shift deletion; the table is at
 * most half full. Used by the HBM arena and the caching allocator to find a block
 * from the address handed to the caller. Not thread-safe: the owner locks.
 */
#ifndef TPU_BASE_PTR_MAP_H
#define TPU_BASE_PTR_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "tpu/allocator.h"
#include "tpu/status.h"

typedef struct tpu_ptr_map_entry {
  uintptr_t key; /* 0 = empty slot */
  void *value;
} tpu_ptr_map_entry_t;

typedef struct tpu_ptr_map {
  tpu_allocator_t host;
  tpu_ptr_map_entry_t *slots; /* (cap) */
  size_t cap;                 /* 0 or a power of two */
  size_t count;               /* live entries */
} tpu_ptr_map_t;

void tpu_ptr_map_init(tpu_ptr_map_t *m, tpu_allocator_t host);
/* Frees the table (not the values). */
void tpu_ptr_map_release(tpu_ptr_map_t *m);
/* Makes room for |count| entries, so that puts up to that count cannot fail. */
tpu_status_t tpu_ptr_map_reserve(tpu_ptr_map_t *m, size_t count);
/* Inserts or replaces |key| (non-zero). */
tpu_status_t tpu_ptr_map_put(tpu_ptr_map_t *m, uintptr_t key, void *value);
/* The value of |key|, or NULL. */
void *tpu_ptr_map_get(const tpu_ptr_map_t *m, uintptr_t key);
/* Removes |key|; returns its value, or NULL if absent. */
void *tpu_ptr_map_remove(tpu_ptr_map_t *m, uintptr_t key);

#endif /* TPU_BASE_PTR_MAP_H */
