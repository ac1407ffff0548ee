/* caching_allocator.c: the device allocator tensors use, a cache over one chip's HBM.
 *
 * Policy (like PyTorch's CUDA caching allocator, simplified: blocks are never split):
 *   - sizes are rounded up to 512 B below 1 MiB, to 128 KiB below 16 MiB and to
 *     2 MiB above, so the rounding costs at most 512 B for small tensors and at most
 *     12.5% for large ones, and similar sizes share cached blocks;
 *   - an allocation takes the smallest cached block that is at least the rounded
 *     size and not wastefully larger: at most 2x for small blocks (< 1 MiB, where
 *     the waste is a few hundred KiB at worst) and at most 1.25x for large ones;
 *   - otherwise it asks the arena; if the arena is full, the whole cache is
 *     released to the arena and the request retried once before out of memory;
 *   - with a limit set (tpu_caching_allocator_set_limit), a request that would take
 *     the reserved bytes past it releases the cache first, as a full arena does.
 * Block records (address, size, requested size) live in host memory: live blocks
 * in a hash map by address, cached blocks in an array sorted by (size, address).
 * One mutex guards everything; the arena has its own (always taken second).
 */
#include "tpu/caching_allocator.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdio.h>
#include <string.h>

#include "base/ptr_map.h"

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)

typedef struct ca_block {
  void *ptr;          /* start of the arena block */
  size_t size;        /* rounded block size, bytes */
  size_t requested;   /* bytes the caller asked for (live blocks) */
  tpu_alloc_tag_t tag; /* what the live block is for (out-of-memory reports) */
} ca_block_t;

struct tpu_caching_allocator {
  tpu_hbm_t *hbm;     /* not owned */
  int device_index;
  tpu_allocator_t host;
  char label[64];     /* "TPU v5e" or "" */
  pthread_mutex_t mu;
  tpu_ptr_map_t live; /* ptr -> ca_block_t* */
  ca_block_t **cache; /* (cache_cap), first cache_len sorted by (size, ptr) */
  size_t cache_len, cache_cap;
  uint64_t cached_bytes;
  uint64_t limit_bytes;     /* cap on stats.reserved_bytes (>= the HBM's capacity: none) */
  tpu_memory_stats_t stats; /* capacity_bytes filled in by get_stats */
};

static bool round_size(size_t bytes, size_t *out) {
  size_t granule = bytes < MIB ? 512 : bytes < 16 * MIB ? 128 * KIB : 2 * MIB;
  return tpu_size_align_up(bytes, granule, out);
}

/* Largest cached block size acceptable for a rounded request of |size|. */
static size_t reuse_limit(size_t size) {
  size_t extra = size < MIB ? size : size / 4;
  size_t limit;
  return tpu_size_add(size, extra, &limit) ? limit : SIZE_MAX;
}

static bool block_less(const ca_block_t *a, size_t size, const void *ptr) {
  return a->size < size || (a->size == size && (uintptr_t)a->ptr < (uintptr_t)ptr);
}

/* First index in the cache whose block is not less than (size, ptr). */
static size_t cache_lower_bound(const tpu_caching_allocator_t *ca, size_t size, const void *ptr) {
  size_t lo = 0, hi = ca->cache_len;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (block_less(ca->cache[mid], size, ptr)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void cache_remove_at(tpu_caching_allocator_t *ca, size_t i) {
  ca_block_t *b = ca->cache[i];
  memmove(&ca->cache[i], &ca->cache[i + 1], (ca->cache_len - i - 1) * sizeof(ca->cache[0]));
  ca->cache_len--;
  ca->cached_bytes -= b->size;
  ca->stats.cached_blocks--;
}

/* Returns |b| to the arena and frees its record (|b| is neither cached nor live). */
static void block_release(tpu_caching_allocator_t *ca, ca_block_t *b) {
  tpu_hbm_free(ca->hbm, b->ptr);
  ca->host.free(ca->host.self, b);
}

static void flush_cache_locked(tpu_caching_allocator_t *ca) {
  for (size_t i = 0; i < ca->cache_len; i++) {
    ca->stats.reserved_bytes -= ca->cache[i]->size;
    block_release(ca, ca->cache[i]);
  }
  ca->cache_len = 0;
  ca->cached_bytes = 0;
  ca->stats.cached_blocks = 0;
  ca->stats.cache_flushes++;
}

/* ---- lifetime ------------------------------------------------------------- */

tpu_status_t tpu_caching_allocator_create(tpu_hbm_t *hbm, int device_index,
                                          tpu_allocator_t host,
                                          tpu_caching_allocator_t **out) {
  *out = NULL;
  if (!hbm) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "caching_allocator_create: no HBM");
  void *mem;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, sizeof(tpu_caching_allocator_t),
                                           "caching_allocator_create", &mem));
  tpu_caching_allocator_t *ca = mem;
  ca->hbm = hbm;
  ca->device_index = device_index;
  ca->limit_bytes = UINT64_MAX; /* none */
  ca->host = host;
  tpu_ptr_map_init(&ca->live, host);
  if (pthread_mutex_init(&ca->mu, NULL) != 0) {
    tpu_allocator_free(host, ca);
    return tpu_status_set(TPU_ERR_UNAVAILABLE,
                          "caching_allocator_create: pthread_mutex_init failed");
  }
  *out = ca;
  return TPU_OK;
}

void tpu_caching_allocator_set_label(tpu_caching_allocator_t *ca, const char *label) {
  pthread_mutex_lock(&ca->mu);
  snprintf(ca->label, sizeof(ca->label), "%s", label ? label : "");
  pthread_mutex_unlock(&ca->mu);
}

void tpu_caching_allocator_destroy(tpu_caching_allocator_t *ca) {
  if (!ca) return;
  for (size_t i = 0; i < ca->cache_len; i++) block_release(ca, ca->cache[i]);
  for (size_t i = 0; i < ca->live.cap; i++) {
    if (ca->live.slots[i].key) block_release(ca, ca->live.slots[i].value);
  }
  tpu_ptr_map_release(&ca->live);
  tpu_allocator_free(ca->host, ca->cache);
  pthread_mutex_destroy(&ca->mu);
  tpu_allocator_t host = ca->host;
  tpu_allocator_free(host, ca);
}

/* ---- allocation ----------------------------------------------------------- */

/* Whether a limit below the HBM's capacity is set. */
static bool has_limit_locked(const tpu_caching_allocator_t *ca) {
  return ca->limit_bytes < tpu_hbm_capacity(ca->hbm);
}

/* Whether reserving |size| more bytes stays within the limit (if one is set). */
static bool within_limit_locked(const tpu_caching_allocator_t *ca, size_t size) {
  uint64_t limit = ca->limit_bytes, reserved = ca->stats.reserved_bytes;
  return !has_limit_locked(ca) || (reserved <= limit && size <= limit - reserved);
}

/* |rounded| > 0: the arena refused a block of that size (the message then says whether
 * its free space is fragmented); 0: the size or the limit refused it. */
static tpu_status_t oom_locked(tpu_caching_allocator_t *ca, size_t bytes, size_t rounded) {
  uint64_t used = tpu_hbm_used(ca->hbm), total = tpu_hbm_capacity(ca->hbm);
  uint64_t in_use = used > ca->cached_bytes ? used - ca->cached_bytes : 0;
  char req[32], use[32], cached[32], tot[32], largest[32] = "", lim[32];
  char frag[96] = "", label[80] = "", limit[112] = "";
  if (rounded && in_use + rounded <= total) {
    snprintf(frag, sizeof(frag), "; free HBM is fragmented: largest free block %s",
             tpu_format_bytes(tpu_hbm_largest_free(ca->hbm), largest, sizeof(largest)));
  }
  if (has_limit_locked(ca)) {
    snprintf(limit, sizeof(limit), "; this process may reserve %s of it "
             "(set_per_process_memory_fraction)",
             tpu_format_bytes(ca->limit_bytes, lim, sizeof(lim)));
  }
  if (ca->label[0]) snprintf(label, sizeof(label), " (%s)", ca->label);
  ca->stats.num_ooms++;
  return tpu_status_set(TPU_ERR_OUT_OF_MEMORY,
                        "tpu:%d out of memory: tried to allocate %s (%zu bytes); %s in use, "
                        "%s cached, %s total HBM%s%s%s",
                        ca->device_index, tpu_format_bytes(bytes, req, sizeof(req)), bytes,
                        tpu_format_bytes(in_use, use, sizeof(use)),
                        tpu_format_bytes(ca->cached_bytes, cached, sizeof(cached)),
                        tpu_format_bytes(total, tot, sizeof(tot)), label, limit, frag);
}

static const tpu_alloc_tag_t kNoTag = {.op = NULL, .dtype = NULL, .rank = -1, .dims = {0}};

static void note_alloc_locked(tpu_caching_allocator_t *ca, ca_block_t *b, size_t bytes,
                              const tpu_alloc_tag_t *tag) {
  tpu_memory_stats_t *s = &ca->stats;
  b->requested = bytes;
  b->tag = tag ? *tag : kNoTag;
  s->allocated_bytes += b->size;
  s->requested_bytes += bytes;
  s->active_blocks++;
  s->alloc_count++;
  if (s->allocated_bytes > s->allocated_bytes_peak) s->allocated_bytes_peak = s->allocated_bytes;
  if (s->reserved_bytes > s->reserved_bytes_peak) s->reserved_bytes_peak = s->reserved_bytes;
}

tpu_status_t tpu_caching_alloc(tpu_caching_allocator_t *ca, size_t bytes, void **out_ptr) {
  return tpu_caching_alloc_tagged(ca, bytes, NULL, out_ptr);
}

tpu_status_t tpu_caching_alloc_tagged(tpu_caching_allocator_t *ca, size_t bytes,
                                      const tpu_alloc_tag_t *tag, void **out_ptr) {
  *out_ptr = NULL;
  if (bytes == 0) return TPU_OK;
  size_t size;
  pthread_mutex_lock(&ca->mu);
  if (!round_size(bytes, &size) || size > tpu_hbm_capacity(ca->hbm)) {
    tpu_status_t st = oom_locked(ca, bytes, 0);
    pthread_mutex_unlock(&ca->mu);
    return st;
  }
  /* Room for the new live entry first, so nothing below fails half-way. */
  tpu_status_t st = tpu_ptr_map_reserve(&ca->live, ca->live.count + 1);
  if (st != TPU_OK) {
    pthread_mutex_unlock(&ca->mu);
    return st;
  }
  size_t i = cache_lower_bound(ca, size, NULL);
  if (i < ca->cache_len && ca->cache[i]->size <= reuse_limit(size)) {
    ca_block_t *b = ca->cache[i];
    cache_remove_at(ca, i); /* stays reserved: it moves from cached to live */
    tpu_ptr_map_put(&ca->live, (uintptr_t)b->ptr, b);
    ca->stats.cache_hits++;
    note_alloc_locked(ca, b, bytes, tag);
    pthread_mutex_unlock(&ca->mu);
    *out_ptr = b->ptr;
    return TPU_OK;
  }
  if (!within_limit_locked(ca, size) && ca->cache_len > 0) flush_cache_locked(ca);
  if (!within_limit_locked(ca, size)) {
    st = oom_locked(ca, bytes, 0);
    pthread_mutex_unlock(&ca->mu);
    return st;
  }
  ca_block_t *b = ca->host.alloc(ca->host.self, sizeof(*b), alignof(ca_block_t));
  if (!b) {
    pthread_mutex_unlock(&ca->mu);
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "tpu:%d: out of host memory for allocator "
                          "bookkeeping", ca->device_index);
  }
  st = tpu_hbm_alloc(ca->hbm, size, &b->ptr);
  if (st == TPU_ERR_OUT_OF_MEMORY && ca->cache_len > 0) {
    flush_cache_locked(ca);
    st = tpu_hbm_alloc(ca->hbm, size, &b->ptr);
  }
  if (st != TPU_OK) {
    ca->host.free(ca->host.self, b);
    if (st == TPU_ERR_OUT_OF_MEMORY) st = oom_locked(ca, bytes, size);
    pthread_mutex_unlock(&ca->mu);
    return st;
  }
  b->size = size;
  tpu_ptr_map_put(&ca->live, (uintptr_t)b->ptr, b);
  ca->stats.reserved_bytes += size;
  ca->stats.arena_allocs++;
  note_alloc_locked(ca, b, bytes, tag);
  pthread_mutex_unlock(&ca->mu);
  *out_ptr = b->ptr;
  return TPU_OK;
}

void tpu_caching_free(tpu_caching_allocator_t *ca, void *ptr) {
  if (!ptr) return;
  pthread_mutex_lock(&ca->mu);
  ca_block_t *b = tpu_ptr_map_remove(&ca->live, (uintptr_t)ptr);
  if (!b) { /* not ours or already freed: nothing to return */
    pthread_mutex_unlock(&ca->mu);
    return;
  }
  tpu_memory_stats_t *s = &ca->stats;
  s->allocated_bytes -= b->size;
  s->requested_bytes -= b->requested;
  s->active_blocks--;
  s->free_count++;
  b->requested = 0;
  if (ca->cache_len == ca->cache_cap) { /* grow; if we cannot, skip the cache */
    size_t cap = ca->cache_cap ? ca->cache_cap * 2 : 64;
    void *mem = NULL;
    if (cap > ca->cache_cap &&
        tpu_allocator_calloc(ca->host, cap, sizeof(ca->cache[0]), "caching_free", &mem) == TPU_OK) {
      if (ca->cache_len) memcpy(mem, ca->cache, ca->cache_len * sizeof(ca->cache[0]));
      tpu_allocator_free(ca->host, ca->cache);
      ca->cache = mem;
      ca->cache_cap = cap;
    }
  }
  if (ca->cache_len < ca->cache_cap) {
    size_t i = cache_lower_bound(ca, b->size, b->ptr);
    memmove(&ca->cache[i + 1], &ca->cache[i], (ca->cache_len - i) * sizeof(ca->cache[0]));
    ca->cache[i] = b;
    ca->cache_len++;
    ca->cached_bytes += b->size;
    s->cached_blocks++;
  } else {
    s->reserved_bytes -= b->size;
    block_release(ca, b);
  }
  pthread_mutex_unlock(&ca->mu);
}

size_t tpu_caching_block_size(tpu_caching_allocator_t *ca, const void *ptr) {
  if (!ptr) return 0;
  pthread_mutex_lock(&ca->mu);
  const ca_block_t *b = tpu_ptr_map_get(&ca->live, (uintptr_t)ptr);
  size_t size = b ? b->size : 0;
  pthread_mutex_unlock(&ca->mu);
  return size;
}

void tpu_caching_set_tag_op(tpu_caching_allocator_t *ca, const void *ptr, const char *op) {
  if (!ptr) return;
  pthread_mutex_lock(&ca->mu);
  ca_block_t *b = tpu_ptr_map_get(&ca->live, (uintptr_t)ptr);
  if (b && !b->tag.op) b->tag.op = op;
  pthread_mutex_unlock(&ca->mu);
}

size_t tpu_caching_largest_live(tpu_caching_allocator_t *ca, tpu_live_block_t *out, size_t cap) {
  size_t n = 0;
  pthread_mutex_lock(&ca->mu);
  for (size_t i = 0; i < ca->live.cap && cap > 0; i++) {
    const ca_block_t *b = ca->live.slots[i].value;
    if (!ca->live.slots[i].key || !b) continue;
    /* insertion into the sorted top-|cap| list */
    size_t j = n < cap ? n++ : cap;
    if (j == cap) {
      if (b->size <= out[cap - 1].size) continue;
      j = cap - 1;
    }
    while (j > 0 && out[j - 1].size < b->size) {
      out[j] = out[j - 1];
      j--;
    }
    out[j].ptr = b->ptr;
    out[j].size = b->size;
    out[j].requested = b->requested;
    out[j].tag = b->tag;
  }
  pthread_mutex_unlock(&ca->mu);
  return n;
}

/* ---- cache control and statistics ----------------------------------------- */

void tpu_caching_allocator_set_limit(tpu_caching_allocator_t *ca, uint64_t bytes) {
  pthread_mutex_lock(&ca->mu);
  ca->limit_bytes = bytes;
  pthread_mutex_unlock(&ca->mu);
}

uint64_t tpu_caching_allocator_limit(tpu_caching_allocator_t *ca) {
  pthread_mutex_lock(&ca->mu);
  uint64_t limit = ca->limit_bytes, total = tpu_hbm_capacity(ca->hbm);
  pthread_mutex_unlock(&ca->mu);
  return limit < total ? limit : total;
}

void tpu_caching_empty_cache(tpu_caching_allocator_t *ca) {
  pthread_mutex_lock(&ca->mu);
  flush_cache_locked(ca);
  pthread_mutex_unlock(&ca->mu);
}

void tpu_caching_get_stats(tpu_caching_allocator_t *ca, tpu_memory_stats_t *out_stats) {
  pthread_mutex_lock(&ca->mu);
  *out_stats = ca->stats;
  pthread_mutex_unlock(&ca->mu);
  out_stats->capacity_bytes = tpu_hbm_capacity(ca->hbm);
}

void tpu_caching_reset_peak(tpu_caching_allocator_t *ca) {
  pthread_mutex_lock(&ca->mu);
  ca->stats.allocated_bytes_peak = ca->stats.allocated_bytes;
  ca->stats.reserved_bytes_peak = ca->stats.reserved_bytes;
  pthread_mutex_unlock(&ca->mu);
}
