/* test_threadpool.c: the kernel thread pool covers every item exactly once, in chunks of
 * at least the grain, from concurrent callers, and runs nested calls inline; helpers
 * (tpu_pool_help) join jobs while they spin and leave when done or idle; the workers are
 * named tpu_pool (top -H, perf). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "pool_helper.h"
#include "thread_names.h"
#include "tpu/threadpool.h"

typedef struct {
  atomic_int *hits;
  int64_t grain;
  atomic_int small_chunks;
  tpu_pool_t *pool;
} cover_ctx;

static void cover(void *arg, int64_t begin, int64_t end) {
  cover_ctx *c = arg;
  if (end - begin < c->grain) atomic_fetch_add(&c->small_chunks, 1);
  for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->hits[i], 1);
}

static int run_cover(tpu_pool_t *pool, int64_t n, int64_t grain) {
  atomic_int *hits = calloc((size_t)n, sizeof *hits);
  cover_ctx c = {hits, grain, 0, pool};
  tpu_pool_parallel_for(pool, n, grain, cover, &c);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
  /* only the last chunk may be shorter than the grain */
  bad += atomic_load(&c.small_chunks) > 1;
  free(hits);
  return bad;
}

TEST(every_item_once) {
  tpu_pool_t *pool;
  CHECK_OK(tpu_pool_create(3, tpu_allocator_system(), &pool));
  CHECK(tpu_pool_num_threads(pool) == 3);
  for (int64_t n = 1; n < 2000; n = n * 3 + 1) {
    CHECK(run_cover(pool, n, 1) == 0);
    CHECK(run_cover(pool, n, 64) == 0);
  }
  for (int rep = 0; rep < 200; rep++) CHECK(run_cover(pool, 37, 2) == 0);
  tpu_pool_destroy(pool);
}

TEST(null_pool_runs_inline) { CHECK(run_cover(NULL, 1000, 1) == 0); }

static void *concurrent_caller(void *arg) {
  tpu_pool_t *pool = arg;
  intptr_t bad = 0;
  for (int rep = 0; rep < 100; rep++) bad += run_cover(pool, 513, 4);
  return (void *)bad;
}

TEST(concurrent_callers) {
  tpu_pool_t *pool;
  CHECK_OK(tpu_pool_create(2, tpu_allocator_system(), &pool));
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, concurrent_caller, pool);
  for (int i = 0; i < 3; i++) {
    void *bad;
    pthread_join(t[i], &bad);
    CHECK(bad == NULL);
  }
  tpu_pool_destroy(pool);
}

static void nested(void *arg, int64_t begin, int64_t end) {
  cover_ctx *c = arg;
  for (int64_t i = begin; i < end; i++) {
    /* a kernel inside a chunk calls parallel_for again: must run inline, not deadlock */
    cover_ctx inner = {c->hits + i * 10, 1, 0, c->pool};
    tpu_pool_parallel_for(c->pool, 10, 1, cover, &inner);
  }
}

TEST(nested_calls_run_inline) {
  tpu_pool_t *pool;
  CHECK_OK(tpu_pool_create(2, tpu_allocator_system(), &pool));
  atomic_int *hits = calloc(1000, sizeof *hits);
  cover_ctx c = {hits, 1, 0, pool};
  tpu_pool_parallel_for(pool, 100, 1, nested, &c);
  int bad = 0;
  for (int i = 0; i < 1000; i++) bad += atomic_load(&hits[i]) != 1;
  CHECK(bad == 0);
  free(hits);
  tpu_pool_destroy(pool);
}

TEST(bad_sizes) {
  tpu_pool_t *pool = NULL;
  CHECK(tpu_pool_create(0, tpu_allocator_system(), &pool) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "pool_create");
  tpu_pool_t *def = NULL;
  CHECK_OK(tpu_pool_default(&def));
  CHECK(def != NULL && tpu_pool_num_threads(def) >= 1);
}

/* Chunks record which threads ran them; each waits (bounded) until two threads are in. */
typedef struct {
  atomic_int inside, most, runs, items;
  pthread_t caller;
  atomic_int by_caller;
} meet_ctx;

static void meet(void *arg, int64_t begin, int64_t end) {
  meet_ctx *m = arg;
  atomic_fetch_add(&m->runs, 1);
  atomic_fetch_add(&m->items, (int)(end - begin));
  if (pthread_equal(pthread_self(), m->caller)) atomic_fetch_add(&m->by_caller, 1);
  int now = atomic_fetch_add(&m->inside, 1) + 1;
  for (long spin = 0; spin < 200 * 1000 * 1000L && atomic_load(&m->most) < 2; spin++) {
    if (now > atomic_load(&m->most)) atomic_store(&m->most, now);
  }
  if (now > atomic_load(&m->most)) atomic_store(&m->most, now);
  atomic_fetch_sub(&m->inside, 1);
}

TEST(helpers_join_jobs) {
  tpu_pool_t *pool;
  CHECK_OK(tpu_pool_create(1, tpu_allocator_system(), &pool)); /* no workers at all */
  CHECK(tpu_pool_helpers(pool) == 0);
  /* no helper: parallel_for_helpers runs everything on the caller */
  meet_ctx alone = {0};
  alone.caller = pthread_self();
  atomic_store(&alone.most, 1); /* do not wait for a second thread */
  tpu_pool_parallel_for_helpers(pool, 8, 1, meet, &alone);
  CHECK(atomic_load(&alone.runs) == 1 && atomic_load(&alone.by_caller) == 1);

  pool_helper h;
  CHECK(pool_helper_start(&h, pool) == 0);
  CHECK(tpu_pool_helpers(pool) == 1);
  /* A helper can still leave between the check below and the job (after 1 ms idle, or when
   * the scheduler puts it on the poster's CPU twice), and the job then rightly runs inline:
   * every job must be run exactly once, and most of them shared. */
  int shared = 0;
  for (int rep = 0; rep < 20; rep++) {
    while (tpu_pool_helpers(pool) == 0) sched_yield();
    meet_ctx m = {0};
    m.caller = pthread_self();
    tpu_pool_parallel_for_helpers(pool, 2, 1, meet, &m);
    CHECK(atomic_load(&m.items) == 2);
    if (atomic_load(&m.most) == 2) {
      CHECK(atomic_load(&m.runs) == 2 && atomic_load(&m.by_caller) == 1); /* helper ran one */
      shared++;
    }
    CHECK(run_cover(pool, 1000, 7) == 0); /* and every item once, through parallel_for too */
  }
  CHECK(shared >= 10);
  pool_helper_stop(&h);
  CHECK(tpu_pool_helpers(pool) == 0);
  tpu_pool_destroy(pool);
}

static bool never(void *arg) {
  (void)arg;
  return false;
}
static bool always(void *arg) {
  (void)arg;
  return true;
}

TEST(help_returns_when_done_or_idle) {
  tpu_pool_t *pool;
  CHECK_OK(tpu_pool_create(2, tpu_allocator_system(), &pool));
  int64_t jobs = -1;
  CHECK(tpu_pool_help(pool, always, NULL, 1000 * 1000 * 1000, &jobs) == true);
  CHECK(jobs == 0);
  CHECK(tpu_pool_help(pool, never, NULL, 1000, &jobs) == false); /* 1 us without a job */
  CHECK(jobs == 0);
  CHECK(tpu_pool_help(NULL, always, NULL, 0, NULL) == true);
  CHECK(tpu_pool_helpers(pool) == 0);
  tpu_pool_destroy(pool);
}

/* The count of threads named |name| once it equals |want|, or after about a second of
 * polling: a joined thread can linger in /proc/self/task a moment after its join, and a
 * loaded machine can start a new worker late. */
static int threads_named_settled(const char *name, int want) {
  int n = threads_named(name);
  for (int i = 0; i < 1000 && n != want; i++) {
    usleep(1000);
    n = threads_named(name);
  }
  return n;
}

TEST(workers_are_named) {
  int before = threads_named("tpu_pool");
  CHECK(before >= 0);
  tpu_pool_t *pool;
  CHECK_OK(tpu_pool_create(3, tpu_allocator_system(), &pool));
  /* a worker names itself as it starts: run a job that needs both to be sure they have */
  for (int i = 0; i < 1000 && threads_named("tpu_pool") < before + 2; i++) {
    CHECK(run_cover(pool, 4096, 1) == 0);
  }
  CHECK(threads_named_settled("tpu_pool", before + 2) == before + 2);
  tpu_pool_destroy(pool);
  CHECK(threads_named_settled("tpu_pool", before) == before);
}

int main(void) {
  RUN(every_item_once);
  RUN(null_pool_runs_inline);
  RUN(concurrent_callers);
  RUN(nested_calls_run_inline);
  RUN(bad_sizes);
  RUN(helpers_join_jobs);
  RUN(help_returns_when_done_or_idle);
  RUN(workers_are_named);
  return check_report();
}
