/* shm_group.c: collectives between the processes of one host through a shared memfd
 * segment, with futex waits, liveness checks and descriptor checks (see
 * include/tpu/shm_group.h for the protocol).
 *
 * Segment layout (offsets computed in layout(); every part 64-byte aligned):
 *   header                      magic, sizes, futex word, abort flag and message
 *   rank_area[world]            barrier generation, pid, joined flag, 2 descriptors
 *   counts[2][2][world][world]  all_to_all send and recv byte counts (by sequence parity)
 *   chan[world][world]          send/recv channel state, [src][dst]
 *   slots[2][world]             collective data, slot_bytes each, double-buffered by round
 *   p2p[world][world]           send/recv data, p2p_bytes each
 */
#include "tpu/shm_group.h"

#include "base/spin.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tpu/interconnect.h"

#define SHM_MAGIC 0x3130676d68737074ull /* "tpshmg01" */
#define MSG_LEN 480
#define LABEL_LEN 64

typedef struct desc {
  uint64_t seq;
  int32_t kind, dtype, op, root;
  uint64_t bytes;
  char label[LABEL_LEN]; /* shown in mismatch messages, e.g. "float32[4, 8]" */
} desc_t;

typedef struct rank_area {
  _Atomic uint64_t arrive; /* last barrier generation reached */
  _Atomic int32_t pid;
  _Atomic int32_t joined;
  desc_t desc[2]; /* by sequence parity */
} __attribute__((aligned(64))) rank_area_t;

typedef struct chan {
  _Atomic uint64_t sent;  /* chunks written by the sender */
  _Atomic uint64_t acked; /* chunks consumed by the receiver */
  uint64_t msg_bytes, chunk_bytes;
  int64_t tag;
} __attribute__((aligned(64))) chan_t;

typedef struct header {
  uint64_t magic;
  int32_t world;
  int32_t reserved;
  uint64_t slot_bytes, p2p_bytes, total_bytes;
  _Atomic uint32_t epoch;   /* futex word: bumped by every notify */
  _Atomic uint32_t waiters; /* ranks sleeping on epoch */
  _Atomic int32_t aborted;  /* 0; -1 while the message is written; rank + 1 */
  char abort_msg[MSG_LEN];
} __attribute__((aligned(64))) header_t;

struct tpu_shm_group {
  int rank, world, fd;
  void *base;
  size_t size, slot_bytes, p2p_bytes;
  header_t *hdr;
  rank_area_t *ranks;
  uint64_t *counts;
  chan_t *chans;
  char *slots, *p2p;
  uint64_t barrier_gen, round, seq;
  uint64_t spin_ns;
  double timeout_s;
  const char *cur_op; /* collective in progress, for messages */
  char next_label[LABEL_LEN];
  pthread_mutex_t err_mu;
  _Atomic int broken;
  char err[MSG_LEN];
};

/* ---- layout and size math ------------------------------------------------------------- */

typedef struct layout {
  size_t ranks, counts, chans, slots, p2p, total;
} layout_t;

static bool add_ok(size_t *acc, size_t n) {
  size_t aligned;
  if (__builtin_add_overflow(*acc, (size_t)63, &aligned)) return false;
  aligned &= ~(size_t)63;
  if (__builtin_add_overflow(aligned, n, acc)) return false;
  return true;
}

static bool mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

static tpu_status_t compute_layout(int world, size_t slot, size_t p2p, layout_t *l) {
  size_t w = (size_t)world, n, off = sizeof(header_t);
  bool ok = true;
  l->ranks = (off + 63) & ~(size_t)63;
  ok = ok && mul_ok(w, sizeof(rank_area_t), &n) && add_ok(&off, n);
  l->counts = (off + 63) & ~(size_t)63;
  ok = ok && mul_ok(w * w, 4 * sizeof(uint64_t), &n) && add_ok(&off, n);
  l->chans = (off + 63) & ~(size_t)63;
  ok = ok && mul_ok(w * w, sizeof(chan_t), &n) && add_ok(&off, n);
  off = (off + 4095) & ~(size_t)4095;
  l->slots = off;
  ok = ok && mul_ok(2 * w, slot, &n) && add_ok(&off, n);
  l->p2p = (off + 63) & ~(size_t)63;
  ok = ok && mul_ok(w * w, p2p, &n) && add_ok(&off, n);
  l->total = (off + 4095) & ~(size_t)4095;
  if (!ok)
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "shm group: segment size overflows (world %d, slot %zu, p2p %zu)",
                          world, slot, p2p);
  return TPU_OK;
}

static void resolve_options(const tpu_shm_group_options_t *o, int world, size_t *slot,
                            size_t *p2p, double *timeout) {
  *slot = o && o->slot_bytes ? o->slot_bytes : (size_t)4 << 20;
  *p2p = o && o->p2p_bytes ? o->p2p_bytes : (world > 16 ? (size_t)256 << 10 : (size_t)1 << 20);
  *timeout = o && o->timeout_s > 0 ? o->timeout_s : 60.0;
  /* Every round splits a slot among the ranks; keep room for 16-byte elements each. */
  size_t min_slot = (size_t)world * 64;
  if (*slot < min_slot) *slot = min_slot;
  *slot = (*slot + 63) & ~(size_t)63;
  if (*p2p < 64) *p2p = 64;
}

static tpu_status_t map_group(int fd, int rank, int world, size_t slot, size_t p2p,
                              double timeout, bool create, tpu_shm_group_t **out) {
  layout_t l;
  TPU_RETURN_IF_ERROR(compute_layout(world, slot, p2p, &l));
  if (create && ftruncate(fd, (off_t)l.total) != 0)
    return tpu_status_set(TPU_ERR_UNAVAILABLE, "shm group: cannot size the segment to %zu bytes: %s",
                          l.total, strerror(errno));
  if (!create) {
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != l.total)
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "shm group: segment of rank 0 has %lld bytes, rank %d expected %zu "
                            "(different world size or TORCHTPU_DIST_* settings across ranks?)",
                            (long long)st.st_size, rank, l.total);
  }
  void *base = mmap(NULL, l.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    return tpu_status_set(TPU_ERR_UNAVAILABLE, "shm group: mmap of %zu bytes failed: %s", l.total,
                          strerror(errno));
  tpu_shm_group_t *g = calloc(1, sizeof(*g));
  if (!g) {
    munmap(base, l.total);
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "shm group: out of host memory");
  }
  g->rank = rank;
  g->world = world;
  g->fd = -1;
  g->base = base;
  g->size = l.total;
  g->slot_bytes = slot;
  g->p2p_bytes = p2p;
  g->hdr = (header_t *)base;
  g->ranks = (rank_area_t *)((char *)base + l.ranks);
  g->counts = (uint64_t *)((char *)base + l.counts);
  g->chans = (chan_t *)((char *)base + l.chans);
  g->slots = (char *)base + l.slots;
  g->p2p = (char *)base + l.p2p;
  g->timeout_s = timeout;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  g->spin_ns = (ncpu > 0 && world <= ncpu) ? 30000 : 0;
  g->cur_op = "setup";
  pthread_mutex_init(&g->err_mu, NULL);
  if (create) {
    g->hdr->magic = SHM_MAGIC;
    g->hdr->world = world;
    g->hdr->slot_bytes = slot;
    g->hdr->p2p_bytes = p2p;
    g->hdr->total_bytes = l.total;
  } else if (g->hdr->magic != SHM_MAGIC || g->hdr->world != world ||
             g->hdr->slot_bytes != slot || g->hdr->p2p_bytes != p2p) {
    tpu_shm_group_close(g);
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "shm group: rank %d's settings (world %d, slot %zu, p2p %zu) differ from "
                          "rank 0's segment", rank, world, slot, p2p);
  }
  atomic_store(&g->ranks[rank].pid, (int32_t)getpid());
  atomic_store(&g->ranks[rank].joined, 1);
  *out = g;
  return TPU_OK;
}

static tpu_status_t check_world(int world, int rank) {
  if (world < 1 || world > TPU_SHM_MAX_RANKS)
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "shm group: world size %d not in 1..%d", world,
                          TPU_SHM_MAX_RANKS);
  if (rank < 0 || rank >= world)
    return tpu_status_set(TPU_ERR_OUT_OF_RANGE, "shm group: rank %d not in 0..%d", rank, world - 1);
  return TPU_OK;
}

tpu_status_t tpu_shm_group_create(int world, const tpu_shm_group_options_t *options,
                                  tpu_shm_group_t **out_group, int *out_fd) {
  *out_group = NULL;
  *out_fd = -1;
  TPU_RETURN_IF_ERROR(check_world(world, 0));
  size_t slot, p2p;
  double timeout;
  resolve_options(options, world, &slot, &p2p, &timeout);
  int fd = memfd_create("torchtpu-dist", MFD_CLOEXEC);
  if (fd < 0)
    return tpu_status_set(TPU_ERR_UNAVAILABLE, "shm group: memfd_create failed: %s",
                          strerror(errno));
  tpu_status_t st = map_group(fd, 0, world, slot, p2p, timeout, true, out_group);
  if (st != TPU_OK) {
    close(fd);
    return st;
  }
  (*out_group)->fd = fd;
  *out_fd = fd;
  return TPU_OK;
}

tpu_status_t tpu_shm_group_attach(int owner_pid, int owner_fd, int rank, int world,
                                  const tpu_shm_group_options_t *options,
                                  tpu_shm_group_t **out_group) {
  *out_group = NULL;
  TPU_RETURN_IF_ERROR(check_world(world, rank));
  size_t slot, p2p;
  double timeout;
  resolve_options(options, world, &slot, &p2p, &timeout);
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", owner_pid, owner_fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return tpu_status_set(TPU_ERR_UNAVAILABLE,
                          "shm group: rank %d cannot open rank 0's segment %s: %s (rank 0 exited, "
                          "or it runs on another host or in another container; "
                          "TORCHTPU_DIST_TRANSPORT=gloo avoids shared memory)",
                          rank, path, strerror(errno));
  tpu_status_t st = map_group(fd, rank, world, slot, p2p, timeout, false, out_group);
  close(fd);
  return st;
}

void tpu_shm_group_close(tpu_shm_group_t *g) {
  if (!g) return;
  if (g->fd >= 0) close(g->fd);
  munmap(g->base, g->size);
  pthread_mutex_destroy(&g->err_mu);
  free(g);
}

int tpu_shm_group_rank(const tpu_shm_group_t *g) { return g->rank; }
int tpu_shm_group_world(const tpu_shm_group_t *g) { return g->world; }
void tpu_shm_group_set_timeout(tpu_shm_group_t *g, double timeout_s) {
  if (timeout_s > 0) g->timeout_s = timeout_s;
}

/* ---- waiting, liveness and failure ------------------------------------------------------ */

static void notify(tpu_shm_group_t *g) {
  atomic_fetch_add(&g->hdr->epoch, 1);
  if (atomic_load(&g->hdr->waiters) > 0)
    syscall(SYS_futex, (uint32_t *)&g->hdr->epoch, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A process that exited (or is a zombie its parent has not reaped yet) is dead. */
static bool pid_alive(int pid) {
  if (pid <= 0) return true; /* not known yet */
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return true;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  if (p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X')) return false;
  return true;
}

/* Records the first error of this rank, marks the group aborted for its peers, and returns
 * |code| with the message as the thread's status. */
static tpu_status_t fail(tpu_shm_group_t *g, tpu_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tpu_status_t fail(tpu_shm_group_t *g, tpu_status_t code, const char *fmt, ...) {
  char msg[MSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g->err_mu);
  if (!atomic_load(&g->broken)) {
    snprintf(g->err, sizeof(g->err), "%s", msg);
    atomic_store(&g->broken, 1);
  }
  pthread_mutex_unlock(&g->err_mu);
  int32_t expected = 0;
  if (atomic_compare_exchange_strong(&g->hdr->aborted, &expected, -1)) {
    snprintf(g->hdr->abort_msg, MSG_LEN, "%s", msg);
    atomic_store(&g->hdr->aborted, g->rank + 1);
  }
  notify(g);
  return tpu_status_set(code, "%s", msg);
}

void tpu_shm_group_abort(tpu_shm_group_t *g, const char *reason) {
  if (g) (void)fail(g, TPU_ERR_UNAVAILABLE, "tpu process group: rank %d aborted: %s", g->rank,
                    reason ? reason : "abort()");
}

static tpu_status_t fail_if_broken(tpu_shm_group_t *g) {
  if (!atomic_load(&g->broken)) return TPU_OK;
  pthread_mutex_lock(&g->err_mu);
  tpu_status_t st = tpu_status_set(TPU_ERR_UNAVAILABLE,
                                   "tpu process group is unusable after an earlier error: %s",
                                   g->err);
  pthread_mutex_unlock(&g->err_mu);
  return st;
}

/* Returns true when ready; otherwise sets *blockers to the ranks waited for. */
typedef bool (*ready_fn)(tpu_shm_group_t *g, const void *ctx, uint64_t *blockers);

static void format_ranks(uint64_t mask, char *buf, size_t n) {
  buf[0] = 0;
  size_t len = 0;
  for (int r = 0; r < 64 && len + 8 < n; r++) {
    if (!(mask >> r & 1)) continue;
    len += (size_t)snprintf(buf + len, n - len, "%s%d", len ? ", " : "", r);
  }
}

static tpu_status_t wait_for(tpu_shm_group_t *g, ready_fn ready, const void *ctx,
                             const char *what) {
  uint64_t blockers = 0;
  if (ready(g, ctx, &blockers)) return TPU_OK;
  uint64_t t0 = tpu_now_ns();
  while (tpu_now_ns() - t0 < g->spin_ns) {
    for (int i = 0; i < 32; i++) tpu_cpu_relax();
    if (ready(g, ctx, &blockers)) return TPU_OK;
  }
  uint64_t timeout_ns = (uint64_t)(g->timeout_s * 1e9);
  for (;;) {
    atomic_fetch_add(&g->hdr->waiters, 1);
    uint32_t e = atomic_load(&g->hdr->epoch);
    bool ok = ready(g, ctx, &blockers);
    int32_t ab = atomic_load(&g->hdr->aborted);
    if (!ok && ab <= 0) {
      struct timespec ts = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
      syscall(SYS_futex, (uint32_t *)&g->hdr->epoch, FUTEX_WAIT, e, &ts, NULL, 0);
    }
    atomic_fetch_sub(&g->hdr->waiters, 1);
    if (ok || ready(g, ctx, &blockers)) return TPU_OK;
    ab = atomic_load(&g->hdr->aborted);
    if (ab > 0) {
      if (ab - 1 == g->rank) return fail_if_broken(g);
      return fail(g, TPU_ERR_UNAVAILABLE, "tpu process group: rank %d failed in %s: %s", ab - 1,
                  what, g->hdr->abort_msg);
    }
    /* |blockers| was read before the liveness checks, so a rank in it may since have done
     * its part (say, arrived at the last barrier) and exited normally. A dead process writes
     * nothing more: readiness read again after its death was seen is final, and only a rank
     * that still blocks then died without doing its part. */
    for (int r = 0; r < g->world; r++) {
      if (!(blockers >> r & 1)) continue;
      int pid = atomic_load(&g->ranks[r].pid);
      if (pid_alive(pid)) continue;
      atomic_thread_fence(memory_order_seq_cst);
      if (ready(g, ctx, &blockers)) return TPU_OK;
      if (blockers >> r & 1)
        return fail(g, TPU_ERR_UNAVAILABLE,
                    "tpu process group: rank %d (pid %d) exited while rank %d was waiting for it "
                    "in %s", r, pid, g->rank, what);
    }
    if (tpu_now_ns() - t0 > timeout_ns) {
      char list[256];
      format_ranks(blockers, list, sizeof(list));
      return fail(g, TPU_ERR_UNAVAILABLE,
                  "tpu process group: timed out after %.1f s in %s on rank %d waiting for "
                  "rank(s) %s (stalled or desynchronized; the timeout is init_process_group's "
                  "timeout or TORCHTPU_DIST_TIMEOUT)", g->timeout_s, what, g->rank, list);
    }
  }
}

/* ---- barrier and descriptors ------------------------------------------------------------ */

static bool all_arrived(tpu_shm_group_t *g, const void *ctx, uint64_t *blockers) {
  uint64_t gen = *(const uint64_t *)ctx, mask = 0;
  for (int r = 0; r < g->world; r++)
    if (atomic_load(&g->ranks[r].arrive) < gen) mask |= 1ull << r;
  *blockers = mask;
  return mask == 0;
}

static tpu_status_t barrier_raw(tpu_shm_group_t *g) {
  uint64_t gen = ++g->barrier_gen;
  atomic_store(&g->ranks[g->rank].arrive, gen);
  notify(g);
  char what[64];
  snprintf(what, sizeof(what), "%s #%llu", g->cur_op, (unsigned long long)g->seq);
  return wait_for(g, all_arrived, &gen, what);
}

static bool all_joined(tpu_shm_group_t *g, const void *ctx, uint64_t *blockers) {
  (void)ctx;
  uint64_t mask = 0;
  for (int r = 0; r < g->world; r++)
    if (!atomic_load(&g->ranks[r].joined)) mask |= 1ull << r;
  *blockers = mask;
  return mask == 0;
}

tpu_status_t tpu_shm_group_seal(tpu_shm_group_t *g) {
  notify(g);
  tpu_status_t st = wait_for(g, all_joined, NULL, "joining the shared-memory group");
  if (st == TPU_OK && g->fd >= 0) {
    close(g->fd);
    g->fd = -1;
  }
  return st;
}

void tpu_shm_group_set_next_label(tpu_shm_group_t *g, const char *label) {
  snprintf(g->next_label, sizeof(g->next_label), "%s", label ? label : "");
}

static tpu_status_t begin(tpu_shm_group_t *g, tpu_collective_kind_t kind, int dtype, int op,
                          int root, uint64_t bytes) {
  TPU_RETURN_IF_ERROR(fail_if_broken(g));
  g->seq++;
  g->cur_op = tpu_collective_kind_name(kind);
  desc_t *d = &g->ranks[g->rank].desc[g->seq & 1];
  d->seq = g->seq;
  d->kind = (int32_t)kind;
  d->dtype = dtype;
  d->op = op;
  d->root = root;
  d->bytes = bytes;
  memcpy(d->label, g->next_label, LABEL_LEN);
  g->next_label[0] = 0;
  return TPU_OK;
}

static const char *dtype_label(int dtype) {
  return dtype >= 0 ? tpu_dtype_name((tpu_dtype_t)dtype) : "bytes";
}

/* After the first barrier of a collective: every rank compares every descriptor with rank
 * 0's, so all ranks find the same first mismatch and fail with the same message. */
static tpu_status_t check_descs(tpu_shm_group_t *g) {
  const desc_t *a = &g->ranks[0].desc[g->seq & 1];
  const char *name = g->cur_op;
  for (int r = 1; r < g->world; r++) {
    const desc_t *b = &g->ranks[r].desc[g->seq & 1];
    if (b->seq != a->seq || b->kind != a->kind)
      return fail(g, TPU_ERR_INVALID_ARGUMENT,
                  "tpu process group: collective mismatch: rank 0 called %s (#%llu) while rank %d "
                  "called %s (#%llu)", tpu_collective_kind_name((tpu_collective_kind_t)a->kind),
                  (unsigned long long)a->seq, r,
                  tpu_collective_kind_name((tpu_collective_kind_t)b->kind),
                  (unsigned long long)b->seq);
    if (b->dtype != a->dtype)
      return fail(g, TPU_ERR_INVALID_ARGUMENT,
                  "tpu process group: %s #%llu: dtype mismatch across ranks: rank 0 has %s %s, "
                  "rank %d has %s %s", name, (unsigned long long)a->seq, dtype_label(a->dtype),
                  a->label, r, dtype_label(b->dtype), b->label);
    if (b->bytes != a->bytes)
      return fail(g, TPU_ERR_INVALID_ARGUMENT,
                  "tpu process group: %s #%llu: tensor size mismatch across ranks: rank 0 has "
                  "%s (%llu bytes), rank %d has %s (%llu bytes)", name,
                  (unsigned long long)a->seq, a->label, (unsigned long long)a->bytes, r, b->label,
                  (unsigned long long)b->bytes);
    if (b->op != a->op)
      return fail(g, TPU_ERR_INVALID_ARGUMENT,
                  "tpu process group: %s #%llu: reduce op mismatch: rank 0 uses %s, rank %d %s",
                  name, (unsigned long long)a->seq, tpu_coll_op_name((tpu_coll_op_t)a->op), r,
                  tpu_coll_op_name((tpu_coll_op_t)b->op));
    if (b->root != a->root)
      return fail(g, TPU_ERR_INVALID_ARGUMENT,
                  "tpu process group: %s #%llu: root mismatch: rank 0 uses root %d, rank %d uses "
                  "root %d", name, (unsigned long long)a->seq, a->root, r, b->root);
  }
  return TPU_OK;
}

/* The first barrier of a collective also checks the descriptors. */
static tpu_status_t first_barrier(tpu_shm_group_t *g) {
  TPU_RETURN_IF_ERROR(barrier_raw(g));
  return check_descs(g);
}

static char *slot(tpu_shm_group_t *g, uint64_t set, int r) {
  return g->slots + ((size_t)(set & 1) * (size_t)g->world + (size_t)r) * g->slot_bytes;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ---- collectives ----------------------------------------------------------------------- */

tpu_status_t tpu_shm_barrier(tpu_shm_group_t *g) {
  TPU_RETURN_IF_ERROR(begin(g, TPU_COLL_BARRIER, -1, -1, -1, 0));
  return first_barrier(g);
}

tpu_status_t tpu_shm_all_reduce(tpu_shm_group_t *g, const void *in, void *out, size_t count,
                                tpu_dtype_t dtype, tpu_coll_op_t op) {
  TPU_RETURN_IF_ERROR(tpu_coll_check(dtype, op));
  size_t es = tpu_dtype_size(dtype), bytes;
  if (!mul_ok(count, es, &bytes))
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "all_reduce: size overflows");
  TPU_RETURN_IF_ERROR(begin(g, TPU_COLL_ALL_REDUCE, (int)dtype, (int)op, -1, bytes));
  size_t per_round = g->slot_bytes / es, w = (size_t)g->world, r = (size_t)g->rank;
  /* Each round: every rank r copies the segments the others own (q != r) into its slot;
   * barrier; rank r reduces its own segment, in rank order, from its input and the others'
   * slots, in cache-sized blocks, into its own slot (where the others read the result) and its
   * output; barrier; every rank copies the others' results out. About 2 reads and 2 writes of
   * the tensor per rank, instead of 3 and 2.5 for copy-everything-in-and-out. */
  const size_t block = ((size_t)64 << 10) / es;
  bool first = true;
  for (size_t off = 0; first || off < count;) {
    size_t n = min_sz(per_round, count - off);
    uint64_t set = g->round++;
    char *mine = slot(g, set, g->rank);
    const char *src = (const char *)in + off * es;
    char *dst = (char *)out + off * es;
    for (size_t q = 0; q < w; q++) {
      size_t qlo = n * q / w, qhi = n * (q + 1) / w;
      if (q != r && qhi > qlo) memcpy(mine + qlo * es, src + qlo * es, (qhi - qlo) * es);
    }
    TPU_RETURN_IF_ERROR(first ? first_barrier(g) : barrier_raw(g));
    first = false;
    size_t lo = n * r / w, hi = n * (r + 1) / w;
    for (size_t b = lo; b < hi; b += block) {
      size_t m = min_sz(block, hi - b);
      char *acc = mine + b * es;
      const char *own = src + b * es;
      memcpy(acc, r == 0 ? own : slot(g, set, 0) + b * es, m * es);
      for (size_t q = 1; q < w; q++)
        tpu_coll_reduce(dtype, op, acc, q == r ? own : slot(g, set, (int)q) + b * es, m);
      if (op == TPU_RED_AVG) tpu_coll_scale(dtype, acc, m, g->world);
      memcpy(dst + b * es, acc, m * es);
    }
    TPU_RETURN_IF_ERROR(barrier_raw(g));
    for (size_t q = 0; q < w; q++) {
      size_t qlo = n * q / w, qhi = n * (q + 1) / w;
      if (q != r && qhi > qlo)
        memcpy(dst + qlo * es, slot(g, set, (int)q) + qlo * es, (qhi - qlo) * es);
    }
    off += n;
  }
  return TPU_OK;
}

tpu_status_t tpu_shm_broadcast(tpu_shm_group_t *g, void *buf, size_t bytes, int root) {
  if (root < 0 || root >= g->world)
    return tpu_status_set(TPU_ERR_OUT_OF_RANGE, "broadcast: root %d not in 0..%d", root,
                          g->world - 1);
  TPU_RETURN_IF_ERROR(begin(g, TPU_COLL_BROADCAST, -1, -1, root, bytes));
  /* The root uses the whole buffer set of a round. */
  size_t per_round = g->slot_bytes * (size_t)g->world;
  bool first = true;
  for (size_t off = 0; first || off < bytes;) {
    size_t n = min_sz(per_round, bytes - off);
    char *area = slot(g, g->round++, 0);
    if (g->rank == root && n) memcpy(area, (char *)buf + off, n);
    TPU_RETURN_IF_ERROR(first ? first_barrier(g) : barrier_raw(g));
    first = false;
    if (g->rank != root && n) memcpy((char *)buf + off, area, n);
    off += n;
  }
  return TPU_OK;
}

tpu_status_t tpu_shm_all_gather(tpu_shm_group_t *g, const void *in, void *out, size_t bytes) {
  TPU_RETURN_IF_ERROR(begin(g, TPU_COLL_ALL_GATHER, -1, -1, -1, bytes));
  bool first = true;
  for (size_t off = 0; first || off < bytes;) {
    size_t n = min_sz(g->slot_bytes, bytes - off);
    uint64_t set = g->round++;
    if (n) memcpy(slot(g, set, g->rank), (const char *)in + off, n);
    TPU_RETURN_IF_ERROR(first ? first_barrier(g) : barrier_raw(g));
    first = false;
    for (int q = 0; q < g->world && n; q++)
      memcpy((char *)out + (size_t)q * bytes + off, slot(g, set, q), n);
    off += n;
  }
  return TPU_OK;
}

tpu_status_t tpu_shm_reduce_scatter(tpu_shm_group_t *g, const void *in, void *out,
                                    size_t count, tpu_dtype_t dtype, tpu_coll_op_t op) {
  TPU_RETURN_IF_ERROR(tpu_coll_check(dtype, op));
  size_t es = tpu_dtype_size(dtype), bytes;
  if (!mul_ok(count, es, &bytes))
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "reduce_scatter: size overflows");
  TPU_RETURN_IF_ERROR(begin(g, TPU_COLL_REDUCE_SCATTER, (int)dtype, (int)op, -1, bytes));
  /* A round carries up to |c| elements for each destination rank. */
  size_t c = g->slot_bytes / (size_t)g->world / es;
  bool first = true;
  for (size_t off = 0; first || off < count;) {
    size_t n = min_sz(c, count - off);
    uint64_t set = g->round++;
    char *mine = slot(g, set, g->rank);
    for (int d = 0; d < g->world && n; d++)
      memcpy(mine + (size_t)d * c * es, (const char *)in + ((size_t)d * count + off) * es, n * es);
    TPU_RETURN_IF_ERROR(first ? first_barrier(g) : barrier_raw(g));
    first = false;
    if (n) {
      char *dst = (char *)out + off * es;
      size_t mine_off = (size_t)g->rank * c * es;
      memcpy(dst, slot(g, set, 0) + mine_off, n * es);
      for (int q = 1; q < g->world; q++) tpu_coll_reduce(dtype, op, dst, slot(g, set, q) + mine_off, n);
      if (op == TPU_RED_AVG) tpu_coll_scale(dtype, dst, n, g->world);
    }
    off += n;
  }
  return TPU_OK;
}

/* counts[parity][0 send | 1 recv][rank][peer] */
static uint64_t *count_row(tpu_shm_group_t *g, uint64_t parity, int which, int r) {
  size_t w = (size_t)g->world;
  return g->counts + (((parity & 1) * 2 + (size_t)which) * w + (size_t)r) * w;
}

tpu_status_t tpu_shm_all_to_all(tpu_shm_group_t *g, const void *in, const size_t *send_bytes,
                                const size_t *send_offsets, void *out,
                                const size_t *recv_bytes, const size_t *recv_offsets) {
  TPU_RETURN_IF_ERROR(begin(g, TPU_COLL_ALL_TO_ALL, -1, -1, -1, 0));
  int w = g->world;
  uint64_t *srow = count_row(g, g->seq, 0, g->rank), *rrow = count_row(g, g->seq, 1, g->rank);
  for (int p = 0; p < w; p++) {
    srow[p] = send_bytes[p];
    rrow[p] = recv_bytes[p];
  }
  TPU_RETURN_IF_ERROR(first_barrier(g));
  size_t c = g->slot_bytes / (size_t)w, rounds = 0;
  for (int i = 0; i < w; i++) {
    const uint64_t *si = count_row(g, g->seq, 0, i);
    for (int j = 0; j < w; j++) {
      uint64_t expect = count_row(g, g->seq, 1, j)[i];
      if (si[j] != expect)
        return fail(g, TPU_ERR_INVALID_ARGUMENT,
                    "tpu process group: all_to_all #%llu: split size mismatch: rank %d sends %llu "
                    "bytes to rank %d, which expects %llu bytes from it",
                    (unsigned long long)g->seq, i, (unsigned long long)si[j], j,
                    (unsigned long long)expect);
      size_t r = (size_t)((si[j] + c - 1) / c);
      if (r > rounds) rounds = r;
    }
  }
  for (size_t k = 0; k < rounds; k++) {
    uint64_t set = g->round++;
    size_t lo = k * c;
    char *mine = slot(g, set, g->rank);
    for (int p = 0; p < w; p++)
      if (lo < send_bytes[p])
        memcpy(mine + (size_t)p * c, (const char *)in + send_offsets[p] + lo,
               min_sz(c, send_bytes[p] - lo));
    TPU_RETURN_IF_ERROR(barrier_raw(g));
    for (int q = 0; q < w; q++)
      if (lo < recv_bytes[q])
        memcpy((char *)out + recv_offsets[q] + lo, slot(g, set, q) + (size_t)g->rank * c,
               min_sz(c, recv_bytes[q] - lo));
  }
  return TPU_OK;
}

/* ---- point to point ------------------------------------------------------------------- */

typedef struct p2p_wait {
  chan_t *ch;
  uint64_t value;
  int peer;
} p2p_wait_t;

static bool chan_free(tpu_shm_group_t *g, const void *ctx, uint64_t *blockers) {
  (void)g;
  const p2p_wait_t *w = ctx;
  *blockers = 1ull << w->peer;
  return atomic_load(&w->ch->acked) == w->value;
}

static bool chan_full(tpu_shm_group_t *g, const void *ctx, uint64_t *blockers) {
  (void)g;
  const p2p_wait_t *w = ctx;
  *blockers = 1ull << w->peer;
  return atomic_load(&w->ch->sent) > w->value;
}

static tpu_status_t check_peer(tpu_shm_group_t *g, int peer, const char *what) {
  if (peer < 0 || peer >= g->world || peer == g->rank)
    return tpu_status_set(TPU_ERR_OUT_OF_RANGE, "%s: peer rank %d is not another rank of 0..%d",
                          what, peer, g->world - 1);
  return fail_if_broken(g);
}

tpu_status_t tpu_shm_send(tpu_shm_group_t *g, const void *buf, size_t bytes, int dst, int tag) {
  TPU_RETURN_IF_ERROR(check_peer(g, dst, "send"));
  size_t idx = (size_t)g->rank * (size_t)g->world + (size_t)dst;
  chan_t *ch = &g->chans[idx];
  char *data = g->p2p + idx * g->p2p_bytes, what[64];
  snprintf(what, sizeof(what), "send to rank %d", dst);
  bool first = true;
  for (size_t off = 0; first || off < bytes;) {
    p2p_wait_t w = {ch, atomic_load(&ch->sent), dst};
    TPU_RETURN_IF_ERROR(wait_for(g, chan_free, &w, what));
    size_t n = min_sz(g->p2p_bytes, bytes - off);
    if (n) memcpy(data, (const char *)buf + off, n);
    ch->msg_bytes = bytes;
    ch->chunk_bytes = n;
    ch->tag = tag;
    atomic_store(&ch->sent, w.value + 1);
    notify(g);
    off += n;
    first = false;
  }
  return TPU_OK;
}

tpu_status_t tpu_shm_recv(tpu_shm_group_t *g, void *buf, size_t bytes, int src, int tag) {
  TPU_RETURN_IF_ERROR(check_peer(g, src, "recv"));
  size_t idx = (size_t)src * (size_t)g->world + (size_t)g->rank;
  chan_t *ch = &g->chans[idx];
  const char *data = g->p2p + idx * g->p2p_bytes;
  char what[64];
  snprintf(what, sizeof(what), "recv from rank %d", src);
  bool first = true;
  for (size_t off = 0; first || off < bytes;) {
    p2p_wait_t w = {ch, atomic_load(&ch->acked), src};
    TPU_RETURN_IF_ERROR(wait_for(g, chan_full, &w, what));
    if (ch->msg_bytes != bytes || ch->tag != tag)
      return fail(g, TPU_ERR_INVALID_ARGUMENT,
                  "tpu process group: rank %d expected %zu bytes with tag %d from rank %d, which "
                  "sent %llu bytes with tag %lld", g->rank, bytes, tag, src,
                  (unsigned long long)ch->msg_bytes, (long long)ch->tag);
    size_t n = ch->chunk_bytes;
    if (n) memcpy((char *)buf + off, data, n);
    atomic_store(&ch->acked, w.value + 1);
    notify(g);
    off += n;
    first = false;
  }
  return TPU_OK;
}
