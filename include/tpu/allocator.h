/* allocator.h: the host-memory allocator interface passed to constructors, and
 * overflow-checked size arithmetic used for every size computation.
 *
 * Objects that need host memory for their own bookkeeping take a tpu_allocator_t
 * and keep it; tpu_allocator_system() is malloc/free. Device (HBM) memory is not
 * allocated through this interface: see hbm.h and caching_allocator.h.
 */
#ifndef TPU_ALLOCATOR_H
#define TPU_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_allocator {
  void *self;
  /* Returns |size| bytes aligned to |align| (a power of two), or NULL. */
  void *(*alloc)(void *self, size_t size, size_t align);
  /* Frees memory from alloc; NULL is ignored. */
  void (*free)(void *self, void *ptr);
} tpu_allocator_t;

/* malloc/free (aligned_alloc for alignments above max_align_t). */
tpu_allocator_t tpu_allocator_system(void);

/* Allocates |count| * |size| bytes, zeroed, failing with TPU_ERR_OUT_OF_MEMORY
 * on overflow or exhaustion (message names |what|). */
tpu_status_t tpu_allocator_calloc(tpu_allocator_t a, size_t count, size_t size,
                                  const char *what, void **out_ptr);
void tpu_allocator_free(tpu_allocator_t a, void *ptr);

/* Overflow-checked arithmetic: return false (and leave *out unchanged) on overflow. */
static inline bool tpu_size_add(size_t a, size_t b, size_t *out) {
  size_t r; /* the builtin stores the wrapped value even on overflow */
  if (__builtin_add_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}
static inline bool tpu_size_mul(size_t a, size_t b, size_t *out) {
  size_t r;
  if (__builtin_mul_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}
/* Rounds |x| up to a multiple of |align| (a power of two). */
static inline bool tpu_size_align_up(size_t x, size_t align, size_t *out) {
  size_t t;
  if (!tpu_size_add(x, align - 1, &t)) return false;
  *out = t & ~(align - 1);
  return true;
}

#ifdef __cplusplus
}
#endif
#endif /* TPU_ALLOCATOR_H */
