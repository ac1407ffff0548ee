/* run_parallel.c: runs an executable's steps on two threads by its two-thread schedule
 * (executable.h; the schedule: schedule.c).
 *
 * The schedule is two lists of steps. A thread takes a list and runs its steps in order;
 * before a step it waits until the other list has done as many steps as the step's wait
 * says; after it, it publishes how many of its list's steps are done. Those two counters,
 * one per cache line, are all the threads share. The caller takes part, and the job goes
 * to the helpers spinning in the pool (tpu_executable_run runs in parallel only when one
 * is: a woken worker would compete with the Python threads for the cores). A thread that
 * finds its step waiting on a list nobody took yet takes that list too and then runs
 * whichever list's next step can run, so a helper that never comes costs only the check.
 *
 * A thread that waits spins briefly and then yields its core, so a Python thread that
 * shares the machine is not starved. The first error stops both threads from starting new
 * steps; its message is carried back to the caller's thread (status messages are per
 * thread).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/spin.h"
#include "compiler/executable.h"

#define SPINS_BEFORE_YIELD 256

typedef struct list_state {
  atomic_int done;  /* steps of the list finished */
  atomic_int taken; /* 0 until a thread takes the list */
  char pad[56];     /* one cache line each */
} list_state_t;

typedef struct run_ctx {
  const tpu_executable_t *exe;
  void *const *inputs;
  void *const *outputs;
  void *scratch;
  tpu_pool_t *pool;
  char pad[64];
  list_state_t list[2];
  atomic_int failed; /* 0, or 1 once a step failed (the first one wrote |error|) */
  tpu_status_t error;
  char message[TPU_STATUS_MESSAGE_CAP]; /* the first error's message */
} run_ctx_t;

static void fail(run_ctx_t *c, tpu_status_t st) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&c->failed, &expected, 1)) {
    c->error = st;
    snprintf(c->message, sizeof c->message, "%s", tpu_status_message());
  }
}

static bool take(run_ctx_t *c, int l) {
  int expected = 0;
  return atomic_compare_exchange_strong(&c->list[l].taken, &expected, 1);
}

/* Runs the next step of list |l| if its wait is over; false if it must wait. A failed
 * step is not counted done, so nothing that waits for it runs. */
static bool try_next(run_ctx_t *c, int l, int *next, bool *ok) {
  const step_deps_t *d = &c->exe->deps;
  int at = (l ? d->len0 : 0) + *next;
  if (atomic_load_explicit(&c->list[1 - l].done, memory_order_acquire) < d->wait[at]) return false;
  tpu_status_t st = tpu_step_run(&c->exe->steps[d->order[at]], c->inputs, c->outputs, c->scratch,
                                 c->pool);
  if (st != TPU_OK) {
    fail(c, st);
    *ok = false;
    return true;
  }
  atomic_store_explicit(&c->list[l].done, ++*next, memory_order_release);
  return true;
}

static void worker(void *arg, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  run_ctx_t *c = arg;
  const step_deps_t *d = &c->exe->deps;
  int len[2] = {d->len0, c->exe->num_steps - d->len0};
  bool mine[2] = {take(c, 0), false};
  if (!mine[0]) mine[1] = take(c, 1);
  int next[2] = {0, 0};
  int idle = 0;
  bool ok = true;
  while (ok && !atomic_load(&c->failed)) {
    bool ran = false, left = false;
    for (int l = 0; l < 2 && ok; l++) {
      if (!mine[l] || next[l] == len[l]) continue;
      left = true;
      while (ok && next[l] < len[l] && try_next(c, l, &next[l], &ok)) ran = true;
    }
    if (!left) break;
    if (ran) {
      idle = 0;
      continue;
    }
    /* waiting: on a list nobody took (run it here), or on the other thread */
    int other = mine[0] ? 1 : 0;
    if (!mine[other] && take(c, other)) {
      mine[other] = true;
    } else if (++idle < SPINS_BEFORE_YIELD) {
      tpu_cpu_relax();
    } else {
      sched_yield();
    }
  }
}

tpu_status_t tpu_run_parallel(const tpu_executable_t *exe, void *const *inputs,
                              void *const *outputs, void *scratch, tpu_pool_t *pool) {
  run_ctx_t *c = NULL;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(exe->host, 1, sizeof *c, "run_parallel", (void **)&c));
  c->exe = exe;
  c->inputs = inputs;
  c->outputs = outputs;
  c->scratch = scratch;
  c->pool = pool;
  for (int l = 0; l < 2; l++) {
    atomic_init(&c->list[l].done, 0);
    atomic_init(&c->list[l].taken, 0);
  }
  atomic_init(&c->failed, 0);
  tpu_pool_parallel_for_helpers(pool, 2, 1, worker, c);
  tpu_status_t st = TPU_OK;
  if (atomic_load(&c->failed)) st = tpu_status_set(c->error, "%s", c->message);
  tpu_allocator_free(exe->host, c);
  return st;
}
