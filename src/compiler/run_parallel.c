/* run_parallel.c: runs an executable's steps on two threads by its two-thread schedule
 * (executable.h; the schedule: schedule.c).
 *
 * The schedule is two lists of steps, one per thread. A list's steps run in order, one at
 * a time: a thread claims the list's next step (a counter of claimed steps), runs it once
 * the list's previous step is done and the other list has done as many steps as the step's
 * wait says, and publishes how many of the list's steps are done. Those counters, one
 * cache line per list, are all the threads share. The caller takes part, and the job goes
 * to the helpers spinning in the pool, or to a thread that starts spinning there while the
 * run goes on (a Python thread that reaches synchronize a little after the run began: no
 * worker is woken, it would compete with the Python threads for the cores). Each thread
 * has a list of its own; while the other list's thread has not come, a thread whose own
 * step must wait runs the other list's next step, so a helper that never comes costs only
 * the checks, and one that comes late takes its list over from where it stands.
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
#include <pthread.h>
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
  atomic_int done;    /* steps of the list finished (its first |done| steps) */
  atomic_int claimed; /* steps of the list a thread has claimed to run */
  atomic_int present; /* 1 once the list's own thread runs */
  char pad[52];       /* one cache line each */
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
  pthread_t caller;         /* the thread that began the run */
  atomic_long helper_steps; /* steps run by another thread */
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

static int list_len(const run_ctx_t *c, int l) {
  return l ? c->exe->num_steps - c->exe->deps.len0 : c->exe->deps.len0;
}

static int done_of(run_ctx_t *c, int l) {
  return atomic_load_explicit(&c->list[l].done, memory_order_acquire);
}

/* Runs the next step of list |l| if it can start now (the list's previous step done, the
 * other list as far as the step's wait says) and this thread claims it: 1. 0: it must
 * wait, or the other thread claimed it. -1: every step of the list is claimed. A failed
 * step is not counted done, so nothing that waits for it runs. */
static int run_next(run_ctx_t *c, int l) {
  const step_deps_t *d = &c->exe->deps;
  int k = atomic_load_explicit(&c->list[l].claimed, memory_order_acquire);
  if (k == list_len(c, l)) return -1;
  int at = (l ? d->len0 : 0) + k;
  if (done_of(c, l) != k || done_of(c, 1 - l) < d->wait[at]) return 0;
  if (!atomic_compare_exchange_strong(&c->list[l].claimed, &k, k + 1)) return 0;
  tpu_status_t st = tpu_step_run(&c->exe->steps[d->order[at]], c->inputs, c->outputs,
                                 c->scratch, c->kernels ? c->kernels : c->pool);
  if (st != TPU_OK) {
    fail(c, st);
    return 1;
  }
  atomic_store_explicit(&c->list[l].done, k + 1, memory_order_release);
  if (!pthread_equal(pthread_self(), c->caller)) atomic_fetch_add(&c->helper_steps, 1);
  return 1;
}

typedef struct waiting {
  run_ctx_t *c;
  int list; /* the list waited for, which the other thread runs */
  int done; /* its steps done when the wait began */
} waiting_t;

/* The wait may be over: the list moved on, or a step failed. */
static bool wait_over(void *arg) {
  const waiting_t *w = arg;
  return atomic_load_explicit(&w->c->list[w->list].done, memory_order_acquire) != w->done ||
         atomic_load(&w->c->failed);
}

/* Helps with the kernels of the other thread (c->kernels), which runs a step of |list|,
 * until that list finishes a step, a step fails, or a while has passed with nothing to help
 * with (then yields the core). */
static void help_other(run_ctx_t *c, int list) {
  waiting_t w = {c, list, atomic_load_explicit(&c->list[list].done, memory_order_acquire)};
  int64_t joined = 0;
  if (!tpu_pool_help(c->kernels, wait_over, &w, HELP_BEFORE_YIELD_NS, &joined)) sched_yield();
  if (joined > 0) { /* counted like the runs (compile.c): heap memory, casting away const */
    tpu_executable_t *counted = (tpu_executable_t *)c->exe;
    atomic_fetch_add_explicit(&counted->shared_kernels, (uint64_t)joined, memory_order_relaxed);
  }
}

/* Chunk |begin| of the pool's job: list |begin| is this thread's own (one call with both
 * chunks, inline: list 0, the other run as it can). Returns once both lists are done or a
 * step failed. */
static void worker(void *arg, int64_t begin, int64_t end) {
  (void)end;
  run_ctx_t *c = arg;
  /* this thread runs a chunk of c->pool's job; its kernels and its help go to c->kernels */
  bool was_in_job = c->kernels ? tpu_pool_swap_in_job(false) : true;
  const int own = begin ? 1 : 0, other = 1 - own;
  atomic_store(&c->list[own].present, 1);
  int idle = 0;
  while (!atomic_load(&c->failed)) {
    if (run_next(c, own) == 1) {
      idle = 0;
      continue;
    }
    /* the other list's next step, while its own thread has not come */
    if (!atomic_load(&c->list[other].present) && run_next(c, other) == 1) {
      idle = 0;
      continue;
    }
    if (done_of(c, own) == list_len(c, own) && done_of(c, other) == list_len(c, other)) break;
    /* waiting: for this list's step the other thread runs, or for the other list */
    int k = atomic_load_explicit(&c->list[own].claimed, memory_order_acquire);
    int waited = done_of(c, own) != k ? own : other;
    if (c->kernels) {
      help_other(c, waited);
    } else if (++idle < SPINS_BEFORE_YIELD) {
      tpu_cpu_relax();
    } else {
      sched_yield();
    }
  }
  if (c->kernels) tpu_pool_swap_in_job(was_in_job);
}

tpu_status_t tpu_run_parallel(const tpu_executable_t *exe, void *const *inputs,
                              void *const *outputs, void *scratch, tpu_pool_t *pool,
                              int64_t *helper_steps) {
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
    atomic_init(&c->list[l].claimed, 0);
    atomic_init(&c->list[l].present, 0);
  }
  atomic_init(&c->failed, 0);
  c->caller = pthread_self();
  atomic_init(&c->helper_steps, 0);
  tpu_pool_parallel_for_joinable(pool, 2, 1, worker, c);
  tpu_status_t st = TPU_OK;
  if (atomic_load(&c->failed)) st = tpu_status_set(c->error, "%s", c->message);
  if (helper_steps) *helper_steps = atomic_load(&c->helper_steps);
  tpu_pool_destroy(c->kernels); /* both threads have left it: the job above is over */
  tpu_allocator_free(exe->host, c);
  return st;
}
