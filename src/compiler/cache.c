/* cache.c: the executable cache, keyed by the bytes of a program signature.
 *
 * Every way in (eager op, fused graph, compiled graph) builds a key holding everything
 * that changes the program (ops, shapes, dtypes, strides, attributes, precision) and asks
 * here before compiling. Open addressing over a power-of-two table, full key comparison on
 * every probe hit, one mutex. Entries are never evicted (programs are small; clear() drops
 * them all).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "tpu/compiler.h"

typedef struct entry {
  uint64_t hash;
  size_t len;
  unsigned char *key;           /* NULL: empty slot */
  tpu_executable_t *exe;
} entry_t;

struct tpu_cache {
  tpu_allocator_t host;
  pthread_mutex_t mu;
  entry_t *slots;
  size_t capacity, count;       /* capacity is a power of two */
  uint64_t hits, misses, compile_ns;
};

uint64_t tpu_cache_hash(const void *key, size_t len) {
  const unsigned char *p = key;
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (len * 0xff51afd7ed558ccdull);
  while (len >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
    p += 8;
    len -= 8;
  }
  uint64_t tail = 0;
  memcpy(&tail, p, len);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 32);
}

tpu_status_t tpu_cache_create(tpu_allocator_t host, tpu_cache_t **out_cache) {
  tpu_cache_t *c;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, sizeof *c, "cache_create", (void **)&c));
  c->host = host;
  c->capacity = 256;
  tpu_status_t st = tpu_allocator_calloc(host, c->capacity, sizeof *c->slots, "cache_create",
                                         (void **)&c->slots);
  if (st != TPU_OK) {
    tpu_allocator_free(host, c);
    return st;
  }
  pthread_mutex_init(&c->mu, NULL);
  *out_cache = c;
  return TPU_OK;
}

static void clear_slots(tpu_cache_t *c) {
  for (size_t i = 0; i < c->capacity; i++) {
    entry_t *e = &c->slots[i];
    if (!e->key) continue;
    tpu_allocator_free(c->host, e->key);
    tpu_executable_release(e->exe);
    memset(e, 0, sizeof *e);
  }
  c->count = 0;
}

void tpu_cache_destroy(tpu_cache_t *c) {
  if (!c) return;
  clear_slots(c);
  tpu_allocator_free(c->host, c->slots);
  pthread_mutex_destroy(&c->mu);
  tpu_allocator_free(c->host, c);
}

/* The slot holding |key| or the empty slot where it would go. Caller holds mu. */
static entry_t *probe(entry_t *slots, size_t capacity, const void *key, size_t len,
                      uint64_t hash) {
  size_t mask = capacity - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    entry_t *e = &slots[i];
    if (!e->key) return e;
    if (e->hash == hash && e->len == len && !memcmp(e->key, key, len)) return e;
  }
}

tpu_executable_t *tpu_cache_lookup(tpu_cache_t *c, const void *key, size_t len,
                                   uint64_t hash) {
  pthread_mutex_lock(&c->mu);
  entry_t *e = probe(c->slots, c->capacity, key, len, hash);
  tpu_executable_t *exe = e->key ? e->exe : NULL;
  if (exe) {
    tpu_executable_retain(exe);
    c->hits++;
  } else {
    c->misses++;
  }
  pthread_mutex_unlock(&c->mu);
  return exe;
}

static tpu_status_t grow(tpu_cache_t *c) {
  size_t capacity;
  if (!tpu_size_mul(c->capacity, 2, &capacity)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "cache: too many entries");
  }
  entry_t *slots;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(c->host, capacity, sizeof *slots, "cache_insert",
                                           (void **)&slots));
  for (size_t i = 0; i < c->capacity; i++) {
    entry_t *e = &c->slots[i];
    if (e->key) *probe(slots, capacity, e->key, e->len, e->hash) = *e;
  }
  tpu_allocator_free(c->host, c->slots);
  c->slots = slots;
  c->capacity = capacity;
  return TPU_OK;
}

tpu_status_t tpu_cache_insert(tpu_cache_t *c, const void *key, size_t len, uint64_t hash,
                              tpu_executable_t *exe, uint64_t compile_ns) {
  unsigned char *copy;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(c->host, len ? len : 1, 1, "cache_insert",
                                           (void **)&copy));
  memcpy(copy, key, len);
  pthread_mutex_lock(&c->mu);
  tpu_status_t st = TPU_OK;
  if ((c->count + 1) * 2 > c->capacity) st = grow(c);
  if (st == TPU_OK) {
    entry_t *e = probe(c->slots, c->capacity, key, len, hash);
    if (e->key) {
      tpu_allocator_free(c->host, copy); /* another thread got there first */
    } else {
      e->hash = hash;
      e->len = len;
      e->key = copy;
      e->exe = exe;
      tpu_executable_retain(exe);
      c->count++;
      c->compile_ns += compile_ns;
    }
  } else {
    tpu_allocator_free(c->host, copy);
  }
  pthread_mutex_unlock(&c->mu);
  return st;
}

void tpu_cache_get_stats(tpu_cache_t *c, tpu_cache_stats_t *out) {
  pthread_mutex_lock(&c->mu);
  out->hits = c->hits;
  out->misses = c->misses;
  out->entries = c->count;
  out->compile_ns = c->compile_ns;
  pthread_mutex_unlock(&c->mu);
}

void tpu_cache_clear(tpu_cache_t *c) {
  pthread_mutex_lock(&c->mu);
  clear_slots(c);
  pthread_mutex_unlock(&c->mu);
}
