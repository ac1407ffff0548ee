/* schedule.c: splits an executable's steps into two lists, one per thread, before it runs
 * (deps.h), so that a parallel run (run_parallel.c) needs no shared queue: each thread runs
 * its list in order and waits only where a step needs one of the other list's steps.
 *
 * List scheduling on a simulated two-thread machine: among the steps whose dependencies are
 * all placed, the one with the costliest chain of steps after it (its "bottom level") goes
 * next, on the thread where it can start first. A dependency between the two lists costs
 * kCrossNs more than one inside a list (the wait and the data moving between cores), which
 * keeps chains of small steps together. Within a list, steps keep the order of their
 * simulated start times; a step's wait is the number of steps of the other list that must
 * be done first (the last of its dependencies there, plus one).
 *
 * No deadlock: a step waits only for steps that start earlier in the simulation, so the
 * step that starts first among the two lists' next steps can always run. That also lets
 * one thread run both lists, taking whichever next step can run (run_parallel.c).
 */
#include <string.h>

#include "compiler/deps.h"

/* Waiting for a step of the other thread, and reading its results from the other core's
 * cache, ns (order of magnitude measured on the 2-vCPU VM: 0.1-1 us per cache line
 * handoff, a few per wait, plus the data). */
static const int64_t kCrossNs = 3000;

typedef struct sched_state {
  const int64_t *cost;
  int64_t *level;      /* (n) costliest chain from the step to the end, itself included */
  int64_t *ready_at;   /* (2n) per thread: when the step's placed dependencies allow it */
  int *left;           /* (n) dependencies not placed yet */
  int *thread;         /* (n) 0 or 1 once placed */
  int *pos;            /* (n) position in its thread's list */
  int *ready;          /* (n) heap of the steps whose dependencies are all placed */
  int num_ready;
} sched_state_t;

/* The ready steps are a binary heap, the highest level first (the earliest step on ties),
 * so placing n steps costs O(n log n) however many are ready at once. */
static bool before(const sched_state_t *s, int a, int b) {
  return s->level[a] > s->level[b] || (s->level[a] == s->level[b] && a < b);
}

static void push_ready(sched_state_t *s, int step) {
  int i = s->num_ready++;
  while (i > 0 && before(s, step, s->ready[(i - 1) / 2])) {
    s->ready[i] = s->ready[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  s->ready[i] = step;
}

static int take_ready(sched_state_t *s) {
  int top = s->ready[0], last = s->ready[--s->num_ready], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= s->num_ready) break;
    if (c + 1 < s->num_ready && before(s, s->ready[c + 1], s->ready[c])) c++;
    if (!before(s, s->ready[c], last)) break;
    s->ready[i] = s->ready[c];
    i = c;
  }
  if (s->num_ready > 0) s->ready[i] = last;
  return top;
}

/* Where a placed step stands in exe->deps.order: thread 0's list, then thread 1's. */
static int order_position(const sched_state_t *s, int len0, int step) {
  return s->thread[step] ? len0 + s->pos[step] : s->pos[step];
}

static void place(sched_state_t *s, const step_deps_t *d, int64_t free_at[2], int len[2],
                  int step) {
  int64_t start[2];
  for (int u = 0; u < 2; u++) {
    start[u] = s->ready_at[2 * step + u] > free_at[u] ? s->ready_at[2 * step + u] : free_at[u];
  }
  int t = start[1] < start[0] ? 1 : 0;
  int64_t end = start[t] + s->cost[step];
  s->thread[step] = t;
  s->pos[step] = len[t]++;
  free_at[t] = end;
  for (int e = d->succ_start[step]; e < d->succ_start[step + 1]; e++) {
    int next = d->succ[e];
    for (int u = 0; u < 2; u++) {
      int64_t at = end + (u == t ? 0 : kCrossNs);
      if (at > s->ready_at[2 * next + u]) s->ready_at[2 * next + u] = at;
    }
    if (--s->left[next] == 0) push_ready(s, next);
  }
}

tpu_status_t tpu_schedule_build(tpu_executable_t *exe, const int64_t *cost, int64_t *out_span_ns) {
  step_deps_t *d = &exe->deps;
  int n = exe->num_steps;
  tpu_allocator_t h = exe->host;
  sched_state_t s;
  memset(&s, 0, sizeof s);
  s.cost = cost;
  /* two blocks: level and ready_at (2n); left, thread, pos and ready */
  int64_t *wide = NULL;
  int *narrow = NULL;
  TPU_RETURN_IF_ERROR(
      tpu_allocator_calloc(h, 3 * (size_t)n + 1, sizeof *wide, "schedule", (void **)&wide));
  tpu_status_t st =
      tpu_allocator_calloc(h, 4 * (size_t)n + 1, sizeof *narrow, "schedule", (void **)&narrow);
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(h, (size_t)n + 1, sizeof *d->order, "schedule", (void **)&d->order);
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(h, (size_t)n + 1, sizeof *d->wait, "schedule", (void **)&d->wait);
  }
  if (st != TPU_OK) {
    tpu_allocator_free(h, wide);
    tpu_allocator_free(h, narrow);
    return st;
  }
  s.level = wide;
  s.ready_at = wide + n;
  s.left = narrow;
  s.thread = narrow + n;
  s.pos = narrow + 2 * (size_t)n;
  s.ready = narrow + 3 * (size_t)n;
  /* levels: every successor comes later in step order */
  for (int i = n - 1; i >= 0; i--) {
    int64_t after = 0;
    for (int e = d->succ_start[i]; e < d->succ_start[i + 1]; e++) {
      if (s.level[d->succ[e]] > after) after = s.level[d->succ[e]];
    }
    s.level[i] = cost[i] + after;
  }
  for (int i = 0; i < n; i++) {
    s.left[i] = d->num_preds[i];
    if (s.left[i] == 0) push_ready(&s, i);
  }
  int64_t free_at[2] = {0, 0};
  int len[2] = {0, 0};
  while (s.num_ready > 0) place(&s, d, free_at, len, take_ready(&s));
  /* the lists, in order of position; waits from the dependencies across lists */
  d->len0 = len[0];
  for (int i = 0; i < n; i++) d->order[order_position(&s, len[0], i)] = i;
  for (int i = 0; i < n; i++) {
    for (int e = d->succ_start[i]; e < d->succ_start[i + 1]; e++) {
      int next = d->succ[e], at = order_position(&s, len[0], next);
      if (s.thread[next] != s.thread[i] && s.pos[i] + 1 > d->wait[at]) d->wait[at] = s.pos[i] + 1;
    }
  }
  *out_span_ns = free_at[0] > free_at[1] ? free_at[0] : free_at[1];
  tpu_allocator_free(h, wide);
  tpu_allocator_free(h, narrow);
  return TPU_OK;
}
