/* allocator.c: the system host allocator (malloc/free, aligned_alloc for large
 * alignments) and the overflow-checked zeroing allocation helper. */
#include "tpu/allocator.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

static void *system_alloc(void *self, size_t size, size_t align) {
  (void)self;
  if (size == 0) size = 1;
  if (align <= alignof(max_align_t)) return malloc(size);
  /* aligned_alloc wants a size that is a multiple of the alignment. */
  size_t rounded;
  if ((align & (align - 1)) != 0 || !tpu_size_align_up(size, align, &rounded)) return NULL;
  return aligned_alloc(align, rounded);
}

static void system_free(void *self, void *ptr) {
  (void)self;
  free(ptr);
}

tpu_allocator_t tpu_allocator_system(void) {
  tpu_allocator_t a = {NULL, system_alloc, system_free};
  return a;
}

tpu_status_t tpu_allocator_calloc(tpu_allocator_t a, size_t count, size_t size,
                                  const char *what, void **out_ptr) {
  *out_ptr = NULL;
  if (!what) what = "tpu_allocator_calloc";
  size_t total;
  if (!tpu_size_mul(count, size, &total)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY,
                          "%s: size overflow allocating %zu x %zu bytes of host memory",
                          what, count, size);
  }
  void *p = a.alloc(a.self, total, alignof(max_align_t));
  if (!p) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY,
                          "%s: out of host memory allocating %zu bytes", what, total);
  }
  memset(p, 0, total);
  *out_ptr = p;
  return TPU_OK;
}

void tpu_allocator_free(tpu_allocator_t a, void *ptr) {
  if (ptr) a.free(a.self, ptr);
}
