/* pool_helper.h: a test thread lent to a pool (tpu_pool_help) until stopped, the way a
 * synchronizing thread lends itself while it waits for a stream. */
#ifndef TPU_TESTS_POOL_HELPER_H
#define TPU_TESTS_POOL_HELPER_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "tpu/threadpool.h"

typedef struct pool_helper {
  tpu_pool_t *pool;
  atomic_int stop;
  pthread_t thread;
} pool_helper;

static bool pool_helper_stopped(void *arg) { return atomic_load(&((pool_helper *)arg)->stop); }

static void *pool_helper_main(void *arg) {
  pool_helper *h = arg;
  while (!tpu_pool_help(h->pool, pool_helper_stopped, h, 1000 * 1000, NULL)) {
  }
  return NULL;
}

/* Starts the helper and returns once it is spinning in the pool. */
static inline int pool_helper_start(pool_helper *h, tpu_pool_t *pool) {
  h->pool = pool;
  atomic_store(&h->stop, 0);
  int before = tpu_pool_helpers(pool);
  if (pthread_create(&h->thread, NULL, pool_helper_main, h) != 0) return -1;
  while (tpu_pool_helpers(pool) == before) sched_yield();
  return 0;
}

static inline void pool_helper_stop(pool_helper *h) {
  atomic_store(&h->stop, 1);
  pthread_join(h->thread, NULL);
}

#endif /* TPU_TESTS_POOL_HELPER_H */
