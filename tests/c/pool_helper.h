/* pool_helper.h: a test thread lent to a pool (tpu_pool_help) until stopped, the way a
 * synchronizing thread lends itself while it waits for a stream. */
#ifndef TPU_TESTS_POOL_HELPER_H
#define TPU_TESTS_POOL_HELPER_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "tpu/threadpool.h"

typedef struct pool_helper {
  tpu_pool_t *pool;
  atomic_int stop;
  int delay_us; /* sleeps this long before it starts helping */
  pthread_t thread;
} pool_helper;

static bool pool_helper_stopped(void *arg) { return atomic_load(&((pool_helper *)arg)->stop); }

static void *pool_helper_main(void *arg) {
  pool_helper *h = arg;
  const struct timespec delay = {h->delay_us / 1000000, (long)(h->delay_us % 1000000) * 1000};
  if (h->delay_us > 0) nanosleep(&delay, NULL);
  while (!tpu_pool_help(h->pool, pool_helper_stopped, h, 1000 * 1000, NULL)) {
  }
  return NULL;
}

/* Starts a helper that begins helping |delay_us| microseconds from now, and returns. */
static inline int pool_helper_start_after(pool_helper *h, tpu_pool_t *pool, int delay_us) {
  h->pool = pool;
  h->delay_us = delay_us;
  atomic_store(&h->stop, 0);
  return pthread_create(&h->thread, NULL, pool_helper_main, h) != 0 ? -1 : 0;
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
