/* cost_account.c: per-chip modelled clocks, totals and timeline (see include/tpu/cost.h).
 *
 * Each chip has a modelled clock per generation: a launch of an executable adds the
 * executable's modelled time on that generation, so one run gives the time on every
 * generation (the graphs do not depend on it). Ops on a chip run back to back in launch
 * order (the stream is in order), i.e. the model assumes the host keeps the chip busy.
 * A spinlock per chip guards its totals; the timeline (on only while detail is on: a
 * profiler or a report) is one growable array under a mutex. Entries (one per
 * executable) are interned in a lock-free list and never freed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tpu/cost.h"

typedef struct chip_acc {
  atomic_flag lock;
  tpu_cost_chip_totals_t t;
} chip_acc_t;

static chip_acc_t g_chips[TPU_COST_MAX_CHIPS];
static _Atomic(tpu_cost_entry_t *) g_entries;
static atomic_uint_fast64_t g_next_id = 1;
static atomic_int g_active_gen = TPU_CHIP_V5E;
static atomic_bool g_detail;

static pthread_mutex_t g_tl_mu = PTHREAD_MUTEX_INITIALIZER;
static tpu_cost_event_t *g_tl;      /* (g_tl_cap) */
static size_t g_tl_len, g_tl_cap;

uint64_t tpu_cost_host_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void chip_lock(chip_acc_t *c) {
  while (atomic_flag_test_and_set_explicit(&c->lock, memory_order_acquire)) {
  }
}
static void chip_unlock(chip_acc_t *c) { atomic_flag_clear_explicit(&c->lock, memory_order_release); }

/* ---- entries ------------------------------------------------------------------------ */

tpu_status_t tpu_cost_entry_create(const tpu_graph_t *g, const char *name,
                                   tpu_cost_entry_t **out_entry) {
  *out_entry = NULL;
  tpu_allocator_t host = tpu_allocator_system();
  void *mem = NULL;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, sizeof(tpu_cost_entry_t),
                                           "tpu_cost_entry_create", &mem));
  tpu_cost_entry_t *e = mem;
  snprintf(e->name, sizeof e->name, "%s", name ? name : "?");
  for (int gen = 0; gen < TPU_CHIP_GEN_COUNT; gen++) {
    tpu_status_t st = tpu_cost_graph(g, tpu_chip_spec((tpu_chip_gen_t)gen), &e->cost[gen]);
    if (st != TPU_OK) {
      tpu_allocator_free(host, e);
      return st;
    }
  }
  e->id = atomic_fetch_add(&g_next_id, 1);
  tpu_cost_entry_t *head = atomic_load(&g_entries);
  do {
    e->next = head;
  } while (!atomic_compare_exchange_weak(&g_entries, &head, e));
  *out_entry = e;
  return TPU_OK;
}

tpu_cost_entry_t *tpu_cost_entries(void) { return atomic_load(&g_entries); }

void tpu_cost_set_active_gen(tpu_chip_gen_t gen) {
  if ((int)gen >= 0 && gen < TPU_CHIP_GEN_COUNT) atomic_store(&g_active_gen, (int)gen);
}
tpu_chip_gen_t tpu_cost_active_gen(void) { return (tpu_chip_gen_t)atomic_load(&g_active_gen); }

void tpu_cost_set_detail(bool on) { atomic_store(&g_detail, on); }
bool tpu_cost_detail(void) { return atomic_load_explicit(&g_detail, memory_order_relaxed); }

/* ---- the timeline ------------------------------------------------------------------ */

/* Appends |ev|; drops it if the array cannot grow (the totals stay right). */
static void timeline_push(const tpu_cost_event_t *ev) {
  pthread_mutex_lock(&g_tl_mu);
  if (g_tl_len == g_tl_cap) {
    size_t cap = g_tl_cap ? g_tl_cap * 2 : 4096, bytes;
    void *mem = NULL;
    if (tpu_size_mul(cap, sizeof(tpu_cost_event_t), &bytes) &&
        tpu_allocator_calloc(tpu_allocator_system(), cap, sizeof(tpu_cost_event_t),
                             "cost timeline", &mem) == TPU_OK) {
      if (g_tl_len) memcpy(mem, g_tl, g_tl_len * sizeof(tpu_cost_event_t));
      tpu_allocator_free(tpu_allocator_system(), g_tl);
      g_tl = mem;
      g_tl_cap = cap;
    }
  }
  if (g_tl_len < g_tl_cap) g_tl[g_tl_len++] = *ev;
  pthread_mutex_unlock(&g_tl_mu);
}

size_t tpu_cost_timeline(size_t first, tpu_cost_event_t *out, size_t cap) {
  pthread_mutex_lock(&g_tl_mu);
  size_t avail = first < g_tl_len ? g_tl_len - first : 0;
  size_t n = avail < cap ? avail : cap;
  if (n && out) memcpy(out, g_tl + first, n * sizeof(tpu_cost_event_t));
  pthread_mutex_unlock(&g_tl_mu);
  return avail;
}

/* ---- launches and records ------------------------------------------------------------ */

static void advance(int device, const tpu_cost_entry_t *e, const char *name,
                    const double *seconds, double flops, double bytes) {
  chip_acc_t *c = &g_chips[device];
  int gen = atomic_load_explicit(&g_active_gen, memory_order_relaxed);
  bool detail = tpu_cost_detail();
  chip_lock(c);
  double start = c->t.clock[gen];
  for (int i = 0; i < TPU_CHIP_GEN_COUNT; i++) c->t.clock[i] += seconds[i];
  double end = c->t.clock[gen];
  c->t.flops += flops;
  c->t.bytes += bytes;
  c->t.launches++;
  chip_unlock(c);
  if (!detail) return;
  tpu_cost_event_t ev;
  memset(&ev, 0, sizeof ev);
  ev.device = device;
  ev.entry = e;
  if (name) snprintf(ev.name, sizeof ev.name, "%s", name);
  ev.start = start;
  ev.end = end;
  ev.flops = flops;
  ev.bytes = bytes;
  ev.host_ns = tpu_cost_host_ns();
  timeline_push(&ev);
}

void tpu_cost_launch(int device, tpu_cost_entry_t *e) {
  if (!e || device < 0 || device >= TPU_COST_MAX_CHIPS) return;
  double seconds[TPU_CHIP_GEN_COUNT];
  for (int i = 0; i < TPU_CHIP_GEN_COUNT; i++) seconds[i] = e->cost[i].seconds;
  if (tpu_cost_detail()) {
    __atomic_fetch_add(&e->launches, 1, __ATOMIC_RELAXED);
  }
  int gen = atomic_load_explicit(&g_active_gen, memory_order_relaxed);
  advance(device, e, NULL, seconds, e->cost[gen].flops, e->cost[gen].bytes);
}

tpu_status_t tpu_cost_record(int device, const char *name, double seconds, double flops,
                             double bytes, const double *seconds_per_gen) {
  if (device < 0 || device >= TPU_COST_MAX_CHIPS) {
    return tpu_status_set(TPU_ERR_OUT_OF_RANGE, "tpu_cost_record: no chip %d", device);
  }
  double s[TPU_CHIP_GEN_COUNT];
  for (int i = 0; i < TPU_CHIP_GEN_COUNT; i++) s[i] = seconds_per_gen ? seconds_per_gen[i] : seconds;
  for (int i = 0; i < TPU_CHIP_GEN_COUNT; i++) {
    if (!(s[i] >= 0.0)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "tpu_cost_record: %s: time must be >= 0 seconds", name ? name : "?");
    }
  }
  advance(device, NULL, name ? name : "record", s, flops, bytes);
  return TPU_OK;
}

void tpu_cost_chip_totals(int device, tpu_cost_chip_totals_t *out) {
  memset(out, 0, sizeof *out);
  if (device < 0 || device >= TPU_COST_MAX_CHIPS) return;
  chip_acc_t *c = &g_chips[device];
  chip_lock(c);
  *out = c->t;
  chip_unlock(c);
}

void tpu_cost_reset(void) {
  for (int d = 0; d < TPU_COST_MAX_CHIPS; d++) {
    chip_lock(&g_chips[d]);
    memset(&g_chips[d].t, 0, sizeof g_chips[d].t);
    chip_unlock(&g_chips[d]);
  }
  pthread_mutex_lock(&g_tl_mu);
  g_tl_len = 0;
  pthread_mutex_unlock(&g_tl_mu);
  for (tpu_cost_entry_t *e = tpu_cost_entries(); e; e = e->next) {
    __atomic_store_n(&e->launches, 0, __ATOMIC_RELAXED);
  }
}
