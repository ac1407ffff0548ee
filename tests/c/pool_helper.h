/* pool_helper.h: a test thread lent to a pool (tpu_pool_help) until stopped, the way a
 * synchronizing thread lends itself while it waits for a stream. */
#ifndef TPU_TESTS_POOL_HELPER_H
#define TPU_TESTS_POOL_HELPER_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "base/spin.h" /* tpu_now_ns */
#include "tpu/threadpool.h"

typedef struct pool_helper {
  tpu_pool_t *pool;
  atomic_int stop;
  atomic_int running;         /* the thread has started (and spins, keeping its core awake) */
  _Atomic uint64_t go_ns;     /* tpu_now_ns() from which it helps; 0: not set yet */
  pthread_t thread;
} pool_helper;

static bool pool_helper_stopped(void *arg) { return atomic_load(&((pool_helper *)arg)->stop); }

static void *pool_helper_main(void *arg) {
  pool_helper *h = arg;
  atomic_store(&h->running, 1);
  /* spinning, not sleeping: a sleeping thread on an idle vCPU wakes hundreds of us late */
  for (;;) {
    uint64_t go = atomic_load(&h->go_ns);
    if (atomic_load(&h->stop) || (go != 0 && tpu_now_ns() >= go)) break;
  }
  while (!tpu_pool_help(h->pool, pool_helper_stopped, h, 1000 * 1000, NULL)) {
  }
  return NULL;
}

/* Starts a helper thread and returns once it runs: it begins helping |delay_us|
 * microseconds from then (a thread that reaches synchronize a while after a run began). */
static inline int pool_helper_start_after(pool_helper *h, tpu_pool_t *pool, int delay_us) {
  h->pool = pool;
  atomic_store(&h->stop, 0);
  atomic_store(&h->running, 0);
  atomic_store(&h->go_ns, 0);
  if (pthread_create(&h->thread, NULL, pool_helper_main, h) != 0) return -1;
  while (!atomic_load(&h->running)) sched_yield();
  atomic_store(&h->go_ns, tpu_now_ns() + (uint64_t)delay_us * 1000);
  return 0;
}

/* Starts the helper and returns once it is spinning in the pool. */
static inline int pool_helper_start(pool_helper *h, tpu_pool_t *pool) {
  int before = tpu_pool_helpers(pool);
  if (pool_helper_start_after(h, pool, 0) != 0) return -1;
  while (tpu_pool_helpers(pool) == before) sched_yield();
  return 0;
}

static inline void pool_helper_stop(pool_helper *h) {
  atomic_store(&h->stop, 1);
  pthread_join(h->thread, NULL);
}

#endif /* TPU_TESTS_POOL_HELPER_H */
