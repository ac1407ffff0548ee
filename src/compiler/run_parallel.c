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
 * The steps' kernels split their work over a second pool, the run's own (the one whose
 * job this is is busy running it): a thread that waits for the other list helps
 * with the kernel the other thread is running (a weight gradient's matmul while the chain
 * of input gradients waits for it), instead of only spinning. Splits never change a
 * kernel's bits, so a parallel run still gives those of a sequential one.
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
/* How long a waiting thread spins in the kernels' pool for the other thread's kernels
 * between checks that yield its core, ns. */
#define HELP_BEFORE_YIELD_NS 50000

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
  tpu_pool_t *pool;    /* the pool whose job this run is (its kernels run inline there) */
  tpu_pool_t *kernels; /* the pool the steps' kernels split over, or NULL */
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
                                 c->kernels ? c->kernels : c->pool);
  if (st != TPU_OK) {
    fail(c, st);
    *ok = false;
    return true;
  }
  atomic_store_explicit(&c->list[l].done, ++*next, memory_order_release);
  return true;
}

typedef struct waiting {
  run_ctx_t *c;
  int list; /* the other thread's list */
  int done; /* its steps done when the wait began */
} waiting_t;

/* The wait may be over: the other list moved on, or a step failed. */
static bool wait_over(void *arg) {
  const waiting_t *w = arg;
  return atomic_load_explicit(&w->c->list[w->list].done, memory_order_acquire) != w->done ||
         atomic_load(&w->c->failed);
}

/* Helps with the kernels of the thread running list |other| (c->kernels) until it finishes a
 * step, a step fails, or a while has passed with nothing to help with (then yields the
 * core). */
static void help_other(run_ctx_t *c, int other) {
  waiting_t w = {c, other, atomic_load_explicit(&c->list[other].done, memory_order_acquire)};
  int64_t joined = 0;
  if (!tpu_pool_help(c->kernels, wait_over, &w, HELP_BEFORE_YIELD_NS, &joined)) sched_yield();
  if (joined > 0) { /* counted like the runs (compile.c): heap memory, casting away const */
    tpu_executable_t *counted = (tpu_executable_t *)c->exe;
    atomic_fetch_add_explicit(&counted->shared_kernels, (uint64_t)joined, memory_order_relaxed);
  }
}

static void worker(void *arg, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  run_ctx_t *c = arg;
  /* this thread runs a chunk of c->pool's job; its kernels and its help go to c->kernels */
  bool was_in_job = c->kernels ? tpu_pool_swap_in_job(false) : true;
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
    if (!left) { /* this thread's lists are done */
      int other = mine[0] ? 1 : 0;
      if (!c->kernels || mine[other] || !atomic_load(&c->list[other].taken) ||
          atomic_load(&c->failed) ||
          atomic_load_explicit(&c->list[other].done, memory_order_acquire) == len[other]) {
        break;
      }
      help_other(c, other); /* the other thread's list is not: help until it is */
      continue;
    }
    if (ran) {
      idle = 0;
      continue;
    }
    /* waiting: on a list nobody took (run it here), or on the other thread */
    int other = mine[0] ? 1 : 0;
    if (!mine[other] && take(c, other)) {
      mine[other] = true;
    } else if (c->kernels) { /* the other thread has the other list */
      help_other(c, other);
    } else if (++idle < SPINS_BEFORE_YIELD) {
      tpu_cpu_relax();
    } else {
      sched_yield();
    }
  }
  if (c->kernels) tpu_pool_swap_in_job(was_in_job);
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
  /* the pool the two threads' kernels split over, the run's own (no workers: its only
   * threads are the two of the run); without one the kernels run inline */
  if (tpu_pool_create(1, exe->host, &c->kernels) == TPU_OK) {
    tpu_pool_keep_helpers_in_place(c->kernels);
  } else {
    c->kernels = NULL;
  }
  for (int l = 0; l < 2; l++) {
    atomic_init(&c->list[l].done, 0);
    atomic_init(&c->list[l].taken, 0);
  }
  atomic_init(&c->failed, 0);
  tpu_pool_parallel_for_helpers(pool, 2, 1, worker, c);
  tpu_status_t st = TPU_OK;
  if (atomic_load(&c->failed)) st = tpu_status_set(c->error, "%s", c->message);
  tpu_pool_destroy(c->kernels); /* both threads have left it: the job above is over */
  tpu_allocator_free(exe->host, c);
  return st;
}
