/* help_policy.c: whether an executable's run takes the help of a thread waiting in
 * synchronize (executable.h: help_policy_t).
 *
 * Help pays on a host whose two cores pass cache lines quickly: the GPT step's graphs run
 * 1.4x faster when the waiting thread shares their kernels. On a shared VM there are
 * phases (often after minutes of load on both vCPUs) where a split across the two cores is
 * slower than one thread (bench_modes, 2026-12-07 03:58: the forward 673 us alone, 1039
 * helped; the backward 1191 and 1433), and a loop of compiled steps ran slower back to
 * back (2.79 ms) than synchronized (1.68). So each executable compares, over a window of
 * runs, its fastest run begun alone with its fastest begun with a helper (the fastest, as
 * a run slowed by a preempted thread says nothing about the split): when help lost, its
 * next HELP_DECLINED_RUNS runs take no help (one that begins with a helper spinning runs
 * inline, on the thread that runs it, and counts as begun alone), then a new window
 * measures again. A run begun alone still gets the help of a thread that starts waiting
 * halfway through, and an inline run does not wake the pool's sleeping workers either
 * (which only kernels far larger than a GPT step's use).
 */
#include "compiler/executable.h"

#define HELP_WINDOW 8          /* runs of each kind per verdict */
#define HELP_DECLINED_RUNS 48  /* runs without help after help lost */

bool tpu_help_policy_accepts(help_policy_t *h) {
  int32_t left = atomic_load_explicit(&h->declines_left, memory_order_relaxed);
  while (left > 0) {
    if (atomic_compare_exchange_weak_explicit(&h->declines_left, &left, left - 1,
                                              memory_order_relaxed, memory_order_relaxed)) {
      return false;
    }
  }
  return true;
}

void tpu_help_policy_note(help_policy_t *h, bool helped, uint64_t ns) {
  /* one executable may run on several chips' streams at once: each field is atomic, and
   * a lost update only blurs a window */
  uint64_t best = atomic_load_explicit(&h->min_ns[helped], memory_order_relaxed);
  if (best == 0 || ns < best) atomic_store_explicit(&h->min_ns[helped], ns, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->count[helped], 1, memory_order_relaxed);
  if (atomic_load_explicit(&h->count[0], memory_order_relaxed) < HELP_WINDOW ||
      atomic_load_explicit(&h->count[1], memory_order_relaxed) < HELP_WINDOW) {
    return;
  }
  if (atomic_load_explicit(&h->min_ns[1], memory_order_relaxed) >
      atomic_load_explicit(&h->min_ns[0], memory_order_relaxed)) {
    atomic_store_explicit(&h->declines_left, HELP_DECLINED_RUNS, memory_order_relaxed);
  }
  for (int k = 0; k < 2; k++) { /* a new window */
    atomic_store_explicit(&h->min_ns[k], 0, memory_order_relaxed);
    atomic_store_explicit(&h->count[k], 0, memory_order_relaxed);
  }
}

int tpu_help_policy_declined_runs(void) { return HELP_DECLINED_RUNS; }
int tpu_help_policy_window(void) { return HELP_WINDOW; }
