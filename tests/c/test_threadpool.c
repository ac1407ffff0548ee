/* test_threadpool.c: the kernel thread pool covers every item exactly once, in chunks of
 * at least the grain, from concurrent callers, and runs nested calls inline. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "check.h"
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

int main(void) {
  RUN(every_item_once);
  RUN(null_pool_runs_inline);
  RUN(concurrent_callers);
  RUN(nested_calls_run_inline);
  RUN(bad_sizes);
  return check_report();
}
