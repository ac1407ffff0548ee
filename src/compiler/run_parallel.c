/* run_parallel.c: runs an executable's steps on several threads (executable.h).
 *
 * Every thread of the pool (the caller included; or, while threads wait in synchronize,
 * the caller and those helpers: tpu_pool_help) runs the same loop: take the next ready
 * step from a shared queue, run it, and make ready each successor whose last dependency
 * it was (exe->deps, deps.h). The queue is an array with one slot per step, since each
 * step is queued exactly once: a producer claims a slot with an atomic counter and then
 * publishes the step in it; a consumer claims the next slot and waits for its step to
 * appear. Steps start in the order they become ready, which for a graph in node order is
 * close to that order.
 *
 * A thread with nothing ready spins briefly and then yields its core, so a Python thread
 * that shares the machine is not starved while a long chain of steps runs elsewhere. The
 * first error stops every thread from taking new steps; its message is carried back to
 * the caller's thread (status messages are per thread).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/spin.h"
#include "compiler/executable.h"

#define SPINS_BEFORE_YIELD 256

typedef struct run_ctx {
  const tpu_executable_t *exe;
  void *const *inputs;
  void *const *outputs;
  void *scratch;
  tpu_pool_t *pool;
  atomic_int *waiting;   /* (num_steps) dependencies not yet done */
  atomic_int *queue;     /* (num_steps) step per slot, -1 until published */
  atomic_int head, tail; /* next slot to take; slots claimed by producers */
  atomic_int done;
  atomic_int failed;     /* 0, or 1 once a step failed (the first one wrote |error|) */
  tpu_status_t error;
  char message[TPU_STATUS_MESSAGE_CAP]; /* the first error's message */
} run_ctx_t;

static void publish(run_ctx_t *c, int step) {
  int slot = atomic_fetch_add(&c->tail, 1);
  atomic_store(&c->queue[slot], step);
}

static void fail(run_ctx_t *c, tpu_status_t st) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&c->failed, &expected, 1)) {
    c->error = st;
    snprintf(c->message, sizeof c->message, "%s", tpu_status_message());
  }
}

static void worker(void *arg, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  run_ctx_t *c = arg;
  const tpu_executable_t *exe = c->exe;
  const step_deps_t *d = &exe->deps;
  int idle = 0;
  while (!atomic_load(&c->failed) && atomic_load(&c->done) < exe->num_steps) {
    int h = atomic_load(&c->head);
    if (h >= atomic_load(&c->tail) || !atomic_compare_exchange_weak(&c->head, &h, h + 1)) {
      if (++idle < SPINS_BEFORE_YIELD) {
        tpu_cpu_relax();
      } else {
        sched_yield();
      }
      continue;
    }
    idle = 0;
    int s;
    while ((s = atomic_load(&c->queue[h])) < 0) tpu_cpu_relax();
    tpu_status_t st = tpu_step_run(&exe->steps[s], c->inputs, c->outputs, c->scratch, c->pool);
    if (st != TPU_OK) {
      fail(c, st);
      return;
    }
    for (int e = d->succ_start[s]; e < d->succ_start[s + 1]; e++) {
      if (atomic_fetch_sub(&c->waiting[d->succ[e]], 1) == 1) publish(c, d->succ[e]);
    }
    atomic_fetch_add(&c->done, 1);
  }
}

tpu_status_t tpu_run_parallel(const tpu_executable_t *exe, void *const *inputs,
                              void *const *outputs, void *scratch, tpu_pool_t *pool) {
  int n = exe->num_steps;
  run_ctx_t *c = NULL;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(exe->host, 1, sizeof *c, "run_parallel", (void **)&c));
  tpu_status_t st = tpu_allocator_calloc(exe->host, (size_t)n + 1, sizeof *c->waiting,
                                         "run_parallel", (void **)&c->waiting);
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(exe->host, (size_t)n + 1, sizeof *c->queue, "run_parallel",
                              (void **)&c->queue);
  }
  if (st != TPU_OK) {
    tpu_allocator_free(exe->host, c->waiting);
    tpu_allocator_free(exe->host, c);
    return st;
  }
  c->exe = exe;
  c->inputs = inputs;
  c->outputs = outputs;
  c->scratch = scratch;
  c->pool = pool;
  atomic_init(&c->head, 0);
  atomic_init(&c->tail, 0);
  atomic_init(&c->done, 0);
  atomic_init(&c->failed, 0);
  for (int i = 0; i < n; i++) {
    atomic_init(&c->waiting[i], exe->deps.num_preds[i]);
    atomic_init(&c->queue[i], -1);
  }
  for (int i = 0; i < n; i++) {
    if (exe->deps.num_preds[i] == 0) publish(c, i);
  }
  /* helpers spinning in the pool (a thread waiting in synchronize) take part without a
   * wake-up; waking the sleeping workers too would put more threads than cores */
  int helpers = tpu_pool_helpers(pool);
  if (helpers > 0) {
    tpu_pool_parallel_for_helpers(pool, 1 + helpers, 1, worker, c);
  } else {
    tpu_pool_parallel_for(pool, tpu_pool_num_threads(pool), 1, worker, c);
  }
  st = TPU_OK;
  if (atomic_load(&c->failed)) st = tpu_status_set(c->error, "%s", c->message);
  tpu_allocator_free(exe->host, c->queue);
  tpu_allocator_free(exe->host, c->waiting);
  tpu_allocator_free(exe->host, c);
  return st;
}
