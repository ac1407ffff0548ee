/* disk_cache.h: the persistent layer under the executable cache (TORCHTPU_CACHE_DIR).
 *
 * One file per cache key in a directory: the full key, the compile options, the
 * serialized graph (include/tpu/ir.h) and the caller's own bytes (the bridge keeps what it
 * must know about a program beyond the graph there). A second process that misses in
 * memory loads the graph from here and compiles it (milliseconds) instead of lowering the
 * op again. Executables are not stored: the graph is the portable artifact.
 *
 * Files are written to a temporary name and renamed into place, so concurrent processes
 * see whole entries or none. A file whose key differs (a hash collision), whose build tag
 * differs (another build of the library or the bridge), or that is truncated or corrupted
 * is ignored and counted as an error, never trusted. Thread-safe.
 */
#ifndef TPU_DISK_CACHE_H
#define TPU_DISK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "tpu/allocator.h"
#include "tpu/compiler.h"
#include "tpu/ir.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_disk_cache tpu_disk_cache_t;

typedef struct tpu_disk_cache_stats {
  uint64_t hits;    /* entries loaded */
  uint64_t misses;  /* lookups that found no file */
  uint64_t writes;  /* entries stored */
  uint64_t errors;  /* unreadable, corrupt, foreign or colliding files; failed writes */
} tpu_disk_cache_stats_t;

/* Opens |dir|, creating it (and its parents) if needed, and checks that it is writable.
 * |build_tag| identifies the build that writes and reads entries (entries of another tag
 * are ignored). */
tpu_status_t tpu_disk_cache_open(const char *dir, uint64_t build_tag, tpu_allocator_t host,
                                 tpu_disk_cache_t **out_cache);
void tpu_disk_cache_close(tpu_disk_cache_t *cache); /* NULL ignored */

typedef struct tpu_disk_entry {
  tpu_graph_t *graph;              /* verified; the caller destroys it */
  tpu_compile_options_t options;
  unsigned char *extra;            /* the caller's bytes, allocated with the cache's host */
  size_t extra_len;
  int32_t *alias;                  /* options.output_alias_param's storage, or NULL */
} tpu_disk_entry_t;

/* Loads the entry stored under |key|: true (hit) with |out| filled, or false (a miss, or
 * a bad file, counted as an error). Never fails otherwise. */
bool tpu_disk_cache_load(tpu_disk_cache_t *cache, const void *key, size_t len,
                         tpu_disk_entry_t *out);
void tpu_disk_entry_free(tpu_disk_cache_t *cache, tpu_disk_entry_t *entry);

/* Stores |g| and |options| (and |extra_len| bytes of |extra|) under |key|, atomically
 * replacing any entry there. On failure nothing is left behind and the error is counted. */
tpu_status_t tpu_disk_cache_store(tpu_disk_cache_t *cache, const void *key, size_t len,
                                  const tpu_graph_t *g, const tpu_compile_options_t *options,
                                  const void *extra, size_t extra_len);

void tpu_disk_cache_get_stats(tpu_disk_cache_t *cache, tpu_disk_cache_stats_t *out_stats);

/* The file an entry for |key| lives in: "<dir>/<16 hex digits>.tpuc" into |buf|. */
void tpu_disk_cache_path(const tpu_disk_cache_t *cache, const void *key, size_t len,
                         char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* TPU_DISK_CACHE_H */
