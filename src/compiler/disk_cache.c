/* disk_cache.c: the on-disk executable cache entries (include/tpu/disk_cache.h).
 *
 * An entry file, native byte order:
 *   "TPUCACHE" | u32 version | u32 0 | u64 build tag | u64 key bytes | u64 extra bytes |
 *   u64 graph bytes | u64 output_may_alias_input | u32 disable_passes | u32 aliases |
 *   u64 checksum of what follows | key | extra | i32 output_alias_param[aliases] |
 *   serialized graph (its own header)
 * (version 1 had no alias table: a warm process compiled in-place outputs as disjoint).
 * Names are "<hash of key and build tag, 16 hex digits>.tpuc"; writes go through
 * ".tmp-<pid>-<n>-<name>" and rename(2), so readers see a whole file or none.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "tpu/disk_cache.h"

#define MAGIC "TPUCACHE"
#define VERSION 2u
#define MAX_ALIASES ((uint32_t)1 << 20)
#define HEADER_BYTES 72
#define MAX_FILE_BYTES ((size_t)1 << 30) /* larger files are not ours */

struct tpu_disk_cache {
  tpu_allocator_t host;
  uint64_t tag;
  char *dir;
  atomic_uint_fast64_t hits, misses, writes, errors, tmp_counter;
};

typedef struct header {
  uint64_t tag, key_len, extra_len, graph_len, alias_mask, checksum;
  uint32_t version, disable_passes, num_alias;
} header_t;

static void put_header(unsigned char *b, const header_t *h) {
  uint32_t zero = 0;
  memcpy(b, MAGIC, 8);
  memcpy(b + 8, &h->version, 4);
  memcpy(b + 12, &zero, 4);
  memcpy(b + 16, &h->tag, 8);
  memcpy(b + 24, &h->key_len, 8);
  memcpy(b + 32, &h->extra_len, 8);
  memcpy(b + 40, &h->graph_len, 8);
  memcpy(b + 48, &h->alias_mask, 8);
  memcpy(b + 56, &h->disable_passes, 4);
  memcpy(b + 60, &h->num_alias, 4);
  memcpy(b + 64, &h->checksum, 8);
}

static bool get_header(const unsigned char *b, size_t len, header_t *h) {
  if (len < HEADER_BYTES || memcmp(b, MAGIC, 8) != 0) return false;
  memcpy(&h->version, b + 8, 4);
  memcpy(&h->tag, b + 16, 8);
  memcpy(&h->key_len, b + 24, 8);
  memcpy(&h->extra_len, b + 32, 8);
  memcpy(&h->graph_len, b + 40, 8);
  memcpy(&h->alias_mask, b + 48, 8);
  memcpy(&h->disable_passes, b + 56, 4);
  memcpy(&h->num_alias, b + 60, 4);
  memcpy(&h->checksum, b + 64, 8);
  return true;
}

/* mkdir -p: every missing component of |path| (a private copy is edited in place). */
static tpu_status_t make_dirs(char *path) {
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char c = *p;
    *p = '\0';
    int rc = mkdir(path, 0777);
    int err = errno;
    *p = c;
    if (rc != 0 && err != EEXIST) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "cache dir %s: cannot create: %s",
                            path, strerror(err));
    }
    if (c == '\0') return TPU_OK;
  }
}

tpu_status_t tpu_disk_cache_open(const char *dir, uint64_t build_tag, tpu_allocator_t host,
                                 tpu_disk_cache_t **out_cache) {
  if (!dir || !*dir || !out_cache) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "cache dir: empty path");
  }
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  tpu_disk_cache_t *c;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, sizeof *c, "disk_cache_open", (void **)&c));
  tpu_status_t st = tpu_allocator_calloc(host, n + 1, 1, "disk_cache_open", (void **)&c->dir);
  if (st != TPU_OK) {
    tpu_allocator_free(host, c);
    return st;
  }
  memcpy(c->dir, dir, n);
  c->host = host;
  c->tag = build_tag;
  st = make_dirs(c->dir);
  if (st == TPU_OK) {
    /* writable? create and remove a probe file */
    char probe[4096];
    int len = snprintf(probe, sizeof probe, "%s/.probe-XXXXXX", c->dir);
    int fd = len > 0 && (size_t)len < sizeof probe ? mkstemp(probe) : -1;
    if (fd < 0) {
      st = tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "cache dir %s: not writable: %s", c->dir,
                          strerror(errno));
    } else {
      close(fd);
      unlink(probe);
    }
  }
  if (st != TPU_OK) {
    tpu_disk_cache_close(c);
    return st;
  }
  *out_cache = c;
  return TPU_OK;
}

void tpu_disk_cache_close(tpu_disk_cache_t *c) {
  if (!c) return;
  tpu_allocator_free(c->host, c->dir);
  tpu_allocator_free(c->host, c);
}

void tpu_disk_cache_path(const tpu_disk_cache_t *c, const void *key, size_t len, char *buf,
                         size_t cap) {
  uint64_t h = tpu_cache_hash(key, len) ^ (c->tag * 0x9e3779b97f4a7c15ull);
  snprintf(buf, cap, "%s/%016llx.tpuc", c->dir, (unsigned long long)h);
}

static uint64_t payload_checksum(const unsigned char *p, size_t len) {
  return tpu_cache_hash(p, len);
}

/* Reads all of |path| (at most MAX_FILE_BYTES) into a host buffer. 1 = read, 0 = no such
 * file, -1 = error. */
static int read_file(tpu_disk_cache_t *c, const char *path, unsigned char **out, size_t *out_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : -1;
  struct stat sb;
  int result = -1;
  unsigned char *buf = NULL;
  if (fstat(fd, &sb) == 0 && sb.st_size >= HEADER_BYTES &&
      (uint64_t)sb.st_size <= MAX_FILE_BYTES &&
      tpu_allocator_calloc(c->host, (size_t)sb.st_size, 1, "disk_cache_load", (void **)&buf) ==
          TPU_OK) {
    size_t want = (size_t)sb.st_size, got = 0;
    while (got < want) {
      ssize_t r = read(fd, buf + got, want - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (got == want) {
      *out = buf;
      *out_len = want;
      buf = NULL;
      result = 1;
    }
  }
  tpu_allocator_free(c->host, buf);
  close(fd);
  return result;
}

/* Parses a file read whole; false if it is not a valid entry for |key|. */
static bool parse_entry(tpu_disk_cache_t *c, const unsigned char *b, size_t len, const void *key,
                        size_t key_len, tpu_disk_entry_t *out) {
  header_t h;
  if (!get_header(b, len, &h) || h.version != VERSION || h.tag != c->tag) return false;
  size_t body = len - HEADER_BYTES, alias_len = (size_t)h.num_alias * 4;
  if (h.num_alias > MAX_ALIASES || h.key_len > body || h.extra_len > body - h.key_len ||
      alias_len > body - h.key_len - h.extra_len ||
      h.graph_len != body - h.key_len - h.extra_len - alias_len) {
    return false;
  }
  const unsigned char *p = b + HEADER_BYTES;
  if (payload_checksum(p, body) != h.checksum) return false;
  if (h.key_len != key_len || memcmp(p, key, key_len) != 0) return false; /* a collision */
  memset(out, 0, sizeof *out);
  if (h.extra_len) {
    if (tpu_allocator_calloc(c->host, h.extra_len, 1, "disk_cache_load",
                             (void **)&out->extra) != TPU_OK) {
      return false;
    }
    memcpy(out->extra, p + key_len, h.extra_len);
    out->extra_len = h.extra_len;
  }
  if (h.num_alias) {
    if (tpu_allocator_calloc(c->host, h.num_alias, sizeof *out->alias, "disk_cache_load",
                             (void **)&out->alias) != TPU_OK) {
      tpu_disk_entry_free(c, out);
      return false;
    }
    memcpy(out->alias, p + key_len + h.extra_len, alias_len);
  }
  if (tpu_graph_deserialize(p + key_len + h.extra_len + alias_len, h.graph_len, c->host,
                            &out->graph) != TPU_OK) {
    tpu_disk_entry_free(c, out);
    return false;
  }
  out->options.output_may_alias_input = h.alias_mask;
  out->options.output_alias_param = out->alias;
  out->options.num_output_alias = (int32_t)h.num_alias;
  out->options.disable_passes = h.disable_passes;
  return true;
}

bool tpu_disk_cache_load(tpu_disk_cache_t *c, const void *key, size_t len,
                         tpu_disk_entry_t *out) {
  char path[4096];
  tpu_disk_cache_path(c, key, len, path, sizeof path);
  unsigned char *buf = NULL;
  size_t n = 0;
  int r = read_file(c, path, &buf, &n);
  if (r == 0) {
    atomic_fetch_add(&c->misses, 1);
    return false;
  }
  bool ok = r > 0 && parse_entry(c, buf, n, key, len, out);
  tpu_allocator_free(c->host, buf);
  atomic_fetch_add(ok ? &c->hits : &c->errors, 1);
  return ok;
}

void tpu_disk_entry_free(tpu_disk_cache_t *c, tpu_disk_entry_t *e) {
  if (!e) return;
  tpu_graph_destroy(e->graph);
  tpu_allocator_free(c->host, e->extra);
  tpu_allocator_free(c->host, e->alias);
  memset(e, 0, sizeof *e);
}

static bool write_all(int fd, const unsigned char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

tpu_status_t tpu_disk_cache_store(tpu_disk_cache_t *c, const void *key, size_t len,
                                  const tpu_graph_t *g, const tpu_compile_options_t *options,
                                  const void *extra, size_t extra_len) {
  unsigned char *graph = NULL, *file = NULL;
  size_t graph_len = 0, total = 0;
  uint32_t num_alias = 0;
  if (options && options->output_alias_param && options->num_output_alias > 0) {
    num_alias = (uint32_t)options->num_output_alias;
  }
  size_t alias_len = (size_t)num_alias * 4;
  tpu_status_t st = tpu_graph_serialize(g, c->host, &graph, &graph_len);
  if (st == TPU_OK && (num_alias > MAX_ALIASES || !tpu_size_add(HEADER_BYTES, len, &total) ||
                       !tpu_size_add(total, extra_len, &total) ||
                       !tpu_size_add(total, alias_len, &total) ||
                       !tpu_size_add(total, graph_len, &total) || total > MAX_FILE_BYTES)) {
    st = tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "cache entry too large");
  }
  if (st == TPU_OK) st = tpu_allocator_calloc(c->host, total, 1, "disk_cache_store", (void **)&file);
  if (st == TPU_OK) {
    unsigned char *p = file + HEADER_BYTES;
    if (len) memcpy(p, key, len);
    if (extra_len) memcpy(p + len, extra, extra_len);
    if (alias_len) memcpy(p + len + extra_len, options->output_alias_param, alias_len);
    memcpy(p + len + extra_len + alias_len, graph, graph_len);
    header_t h = {.tag = c->tag, .key_len = len, .extra_len = extra_len, .graph_len = graph_len,
                  .num_alias = num_alias,
                  .alias_mask = options ? options->output_may_alias_input : 0,
                  .checksum = payload_checksum(p, total - HEADER_BYTES), .version = VERSION,
                  .disable_passes = options ? options->disable_passes : 0};
    put_header(file, &h);
    char path[4096], tmp[4096 + 64];
    tpu_disk_cache_path(c, key, len, path, sizeof path);
    const char *name = strrchr(path, '/') + 1;
    snprintf(tmp, sizeof tmp, "%s/.tmp-%d-%llu-%s", c->dir, (int)getpid(),
             (unsigned long long)atomic_fetch_add(&c->tmp_counter, 1), name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      st = tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "cache dir %s: cannot write %s: %s",
                          c->dir, tmp, strerror(errno));
    } else {
      bool ok = write_all(fd, file, total);
      int err = errno;
      ok = (close(fd) == 0) && ok;
      if (ok && rename(tmp, path) != 0) {
        ok = false;
        err = errno;
      }
      if (!ok) {
        unlink(tmp);
        st = tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "cache dir %s: cannot write %s: %s",
                            c->dir, path, strerror(err));
      }
    }
  }
  tpu_allocator_free(c->host, graph);
  tpu_allocator_free(c->host, file);
  atomic_fetch_add(st == TPU_OK ? &c->writes : &c->errors, 1);
  return st;
}

void tpu_disk_cache_get_stats(tpu_disk_cache_t *c, tpu_disk_cache_stats_t *out) {
  out->hits = atomic_load(&c->hits);
  out->misses = atomic_load(&c->misses);
  out->writes = atomic_load(&c->writes);
  out->errors = atomic_load(&c->errors);
}
