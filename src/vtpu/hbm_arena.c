/* hbm_arena.c: one chip's HBM, an arena of the chip's capacity in host memory.
 *
 * The whole capacity is reserved as address space with one mmap (NORESERVE, so the
 * host commits pages only when they are touched) and handed out best-fit. The
 * bookkeeping lives outside the arena, in host memory from the tpu_allocator_t:
 *   - every block (free or live) is a node in a list in address order, so a freed
 *     block merges with its free neighbours;
 *   - free blocks are also on a free list, scanned for the best fit;
 *   - live blocks are in a hash map from address to node, so free is O(1).
 * Freed ranges that cover whole pages are returned to the host with
 * madvise(MADV_DONTNEED). One mutex guards everything.
 */
#include "tpu/hbm.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/ptr_map.h"
#include "tpu/caching_allocator.h" /* tpu_format_bytes */

typedef struct hbm_block {
  uint64_t offset;                        /* bytes from the arena base */
  uint64_t size;                          /* bytes, a multiple of TPU_HBM_ALIGNMENT */
  struct hbm_block *prev, *next;          /* all blocks, in address order */
  struct hbm_block *free_prev, *free_next; /* free blocks only */
  bool is_free;
} hbm_block_t;

struct tpu_hbm {
  tpu_allocator_t host;
  char *base;            /* start of the mapping, page-aligned */
  uint64_t capacity;     /* bytes, a multiple of TPU_HBM_ALIGNMENT */
  uint64_t page_size;    /* host page, bytes */
  pthread_mutex_t mu;
  hbm_block_t *first;    /* the block at offset 0 */
  hbm_block_t *free_head;
  tpu_ptr_map_t live;    /* address -> hbm_block_t* of live blocks */
  uint64_t used;         /* bytes in live blocks */
};

/* ---- bookkeeping ---------------------------------------------------------- */

static hbm_block_t *block_new(tpu_hbm_t *hbm) {
  hbm_block_t *b = hbm->host.alloc(hbm->host.self, sizeof(*b), alignof(hbm_block_t));
  if (b) memset(b, 0, sizeof(*b));
  return b;
}

static void free_list_push(tpu_hbm_t *hbm, hbm_block_t *b) {
  b->is_free = true;
  b->free_prev = NULL;
  b->free_next = hbm->free_head;
  if (hbm->free_head) hbm->free_head->free_prev = b;
  hbm->free_head = b;
}

static void free_list_remove(tpu_hbm_t *hbm, hbm_block_t *b) {
  if (b->free_prev) b->free_prev->free_next = b->free_next;
  else hbm->free_head = b->free_next;
  if (b->free_next) b->free_next->free_prev = b->free_prev;
  b->free_prev = b->free_next = NULL;
  b->is_free = false;
}

/* Unlinks |b| from the address list and frees its node. */
static void block_delete(tpu_hbm_t *hbm, hbm_block_t *b) {
  if (b->prev) b->prev->next = b->next;
  else hbm->first = b->next;
  if (b->next) b->next->prev = b->prev;
  hbm->host.free(hbm->host.self, b);
}

static uint64_t largest_free_locked(const tpu_hbm_t *hbm) {
  uint64_t best = 0;
  for (const hbm_block_t *f = hbm->free_head; f; f = f->free_next) {
    if (f->size > best) best = f->size;
  }
  return best;
}

static uint64_t align_down_u64(uint64_t x, uint64_t a) { return x & ~(a - 1); }
static uint64_t align_up_u64(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

/* ---- lifetime ------------------------------------------------------------- */

tpu_status_t tpu_hbm_create(uint64_t capacity_bytes, tpu_allocator_t host,
                            tpu_hbm_t **out_hbm) {
  *out_hbm = NULL;
  if (capacity_bytes == 0 || capacity_bytes > (uint64_t)SIZE_MAX - TPU_HBM_ALIGNMENT) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "hbm_create: invalid capacity %llu bytes",
                          (unsigned long long)capacity_bytes);
  }
  uint64_t capacity = align_up_u64(capacity_bytes, TPU_HBM_ALIGNMENT);
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || (page & (page - 1)) != 0) page = 4096;

  void *mem;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, sizeof(tpu_hbm_t), "hbm_create", &mem));
  tpu_hbm_t *hbm = mem;
  hbm->host = host;
  hbm->capacity = capacity;
  hbm->page_size = (uint64_t)page;
  tpu_ptr_map_init(&hbm->live, host);
  hbm->first = block_new(hbm);
  if (!hbm->first) {
    tpu_allocator_free(host, hbm);
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "hbm_create: out of host memory");
  }
  hbm->first->size = capacity;
  free_list_push(hbm, hbm->first);

  void *base = mmap(NULL, (size_t)capacity, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    char human[32];
    host.free(host.self, hbm->first);
    tpu_allocator_free(host, hbm);
    return tpu_status_set(TPU_ERR_UNAVAILABLE,
                          "hbm_create: cannot reserve %s (%llu bytes) of address space for a "
                          "chip's HBM: %s (is the virtual memory limit, ulimit -v, too low "
                          "for this many chips?)",
                          tpu_format_bytes(capacity, human, sizeof(human)),
                          (unsigned long long)capacity, strerror(err));
  }
  hbm->base = base;
  int rc = pthread_mutex_init(&hbm->mu, NULL);
  if (rc != 0) {
    munmap(base, (size_t)capacity);
    host.free(host.self, hbm->first);
    tpu_allocator_free(host, hbm);
    return tpu_status_set(TPU_ERR_UNAVAILABLE, "hbm_create: pthread_mutex_init: %s",
                          strerror(rc));
  }
  *out_hbm = hbm;
  return TPU_OK;
}

void tpu_hbm_destroy(tpu_hbm_t *hbm) {
  if (!hbm) return;
  hbm_block_t *b = hbm->first;
  while (b) {
    hbm_block_t *next = b->next;
    hbm->host.free(hbm->host.self, b);
    b = next;
  }
  tpu_ptr_map_release(&hbm->live);
  munmap(hbm->base, (size_t)hbm->capacity);
  pthread_mutex_destroy(&hbm->mu);
  tpu_allocator_t host = hbm->host;
  tpu_allocator_free(host, hbm);
}

/* ---- allocation ----------------------------------------------------------- */

static tpu_status_t oom_locked(const tpu_hbm_t *hbm, size_t bytes) {
  return tpu_status_set(TPU_ERR_OUT_OF_MEMORY,
                        "hbm_alloc: out of memory: requested %zu bytes, %llu bytes in use of "
                        "%llu bytes total (largest free block %llu bytes)",
                        bytes, (unsigned long long)hbm->used,
                        (unsigned long long)hbm->capacity,
                        (unsigned long long)largest_free_locked(hbm));
}

tpu_status_t tpu_hbm_alloc(tpu_hbm_t *hbm, size_t bytes, void **out_ptr) {
  *out_ptr = NULL;
  if (bytes == 0) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "hbm_alloc: size must be > 0");
  }
  size_t size;
  bool fits = tpu_size_align_up(bytes, TPU_HBM_ALIGNMENT, &size);
  pthread_mutex_lock(&hbm->mu);
  hbm_block_t *best = NULL;
  if (fits) {
    for (hbm_block_t *f = hbm->free_head; f; f = f->free_next) {
      if (f->size < size) continue;
      if (!best || f->size < best->size || (f->size == best->size && f->offset < best->offset)) {
        best = f;
      }
    }
  }
  if (!best) {
    tpu_status_t st = oom_locked(hbm, bytes);
    pthread_mutex_unlock(&hbm->mu);
    return st;
  }
  /* Make every bookkeeping allocation before changing anything. */
  tpu_status_t st = tpu_ptr_map_reserve(&hbm->live, hbm->live.count + 1);
  hbm_block_t *rest = NULL;
  if (st == TPU_OK && best->size > size) {
    rest = block_new(hbm);
    if (!rest) st = tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "hbm_alloc: out of host memory");
  }
  if (st != TPU_OK) {
    pthread_mutex_unlock(&hbm->mu);
    return st;
  }
  free_list_remove(hbm, best);
  if (rest) { /* split: |best| keeps the front, |rest| is the free tail */
    rest->offset = best->offset + size;
    rest->size = best->size - size;
    rest->prev = best;
    rest->next = best->next;
    if (best->next) best->next->prev = rest;
    best->next = rest;
    best->size = size;
    free_list_push(hbm, rest);
  }
  char *ptr = hbm->base + best->offset;
  tpu_ptr_map_put(&hbm->live, (uintptr_t)ptr, best); /* cannot fail: reserved */
  hbm->used += best->size;
  pthread_mutex_unlock(&hbm->mu);
  *out_ptr = ptr;
  return TPU_OK;
}

tpu_status_t tpu_hbm_free(tpu_hbm_t *hbm, void *ptr) {
  if (!ptr) return TPU_OK;
  pthread_mutex_lock(&hbm->mu);
  hbm_block_t *b = tpu_ptr_map_remove(&hbm->live, (uintptr_t)ptr);
  if (!b) {
    bool inside = tpu_hbm_contains(hbm, ptr);
    pthread_mutex_unlock(&hbm->mu);
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "hbm_free: %p is not the start of a live block %s", ptr,
                          inside ? "(double free or interior pointer)" : "of this arena");
  }
  hbm->used -= b->size;
  uint64_t freed_lo = b->offset, freed_hi = b->offset + b->size;
  if (b->next && b->next->is_free) { /* merge the free block after */
    hbm_block_t *n = b->next;
    free_list_remove(hbm, n);
    b->size += n->size;
    block_delete(hbm, n);
  }
  if (b->prev && b->prev->is_free) { /* merge into the free block before */
    hbm_block_t *p = b->prev;
    p->size += b->size;
    block_delete(hbm, b);
    b = p;
  } else {
    free_list_push(hbm, b);
  }
  /* Return the pages that touch the freed range and now lie wholly in free space. */
  uint64_t pg = hbm->page_size;
  uint64_t lo = align_down_u64(freed_lo, pg), hi = align_up_u64(freed_hi, pg);
  if (lo < b->offset) lo = align_up_u64(b->offset, pg);
  if (hi > b->offset + b->size) hi = align_down_u64(b->offset + b->size, pg);
  if (hi > lo) madvise(hbm->base + lo, (size_t)(hi - lo), MADV_DONTNEED);
  pthread_mutex_unlock(&hbm->mu);
  return TPU_OK;
}

/* ---- queries -------------------------------------------------------------- */

uint64_t tpu_hbm_capacity(const tpu_hbm_t *hbm) { return hbm->capacity; }

uint64_t tpu_hbm_used(tpu_hbm_t *hbm) {
  pthread_mutex_lock(&hbm->mu);
  uint64_t used = hbm->used;
  pthread_mutex_unlock(&hbm->mu);
  return used;
}

uint64_t tpu_hbm_largest_free(tpu_hbm_t *hbm) {
  pthread_mutex_lock(&hbm->mu);
  uint64_t largest = largest_free_locked(hbm);
  pthread_mutex_unlock(&hbm->mu);
  return largest;
}

bool tpu_hbm_contains(const tpu_hbm_t *hbm, const void *ptr) {
  uintptr_t p = (uintptr_t)ptr, base = (uintptr_t)hbm->base;
  return p >= base && p - base < hbm->capacity;
}
