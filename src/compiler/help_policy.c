/* help_policy.c: whether an executable's run takes the help of a thread waiting in
 * synchronize (executable.h: help_policy_t).
 *
 * Help pays on a host whose two cores pass cache lines quickly: the GPT step's graphs run
 * 1.5x faster when the waiting thread shares their kernels. On a shared VM there are
 * phases where a line moving between the two vCPUs takes up to a microsecond, and then a
 * run split across the cores is slower than on one (bench_modes, 2026-12-07: the forward
 * 810 us alone, 1172 helped; the backward 1320 and 1645), which made a loop of compiled
 * steps slower back to back than synchronized. So each executable keeps moving averages of
 * its runs begun alone and begun with a helper; when the helped ones are the slower, its
 * next HELP_DECLINED_RUNS runs take no help (one that begins with a helper spinning runs
 * inline, on the thread that runs it, and counts as begun alone), and the run after that
 * takes it again, measuring whether the phase is over. (A run begun alone still gets the
 * help of a thread that starts waiting halfway through; and an inline run does not wake
 * the pool's sleeping workers either, which only kernels far larger than a GPT step's
 * use.)
 */
#include "compiler/executable.h"

#define HELP_MIN_SAMPLES 4     /* runs of each kind before a verdict */
#define HELP_DECLINED_RUNS 16  /* runs without help once help was the slower */

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
   * a lost update only blurs an average */
  const uint64_t old = atomic_load_explicit(&h->avg_ns[helped], memory_order_relaxed);
  atomic_store_explicit(&h->avg_ns[helped], old ? old - old / 4 + ns / 4 : ns,
                        memory_order_relaxed);
  if (atomic_load_explicit(&h->samples[helped], memory_order_relaxed) < HELP_MIN_SAMPLES) {
    atomic_fetch_add_explicit(&h->samples[helped], 1, memory_order_relaxed);
  }
  if (!helped || atomic_load_explicit(&h->samples[0], memory_order_relaxed) < HELP_MIN_SAMPLES ||
      atomic_load_explicit(&h->samples[1], memory_order_relaxed) < HELP_MIN_SAMPLES) {
    return;
  }
  if (atomic_load_explicit(&h->avg_ns[1], memory_order_relaxed) >
      atomic_load_explicit(&h->avg_ns[0], memory_order_relaxed)) {
    atomic_store_explicit(&h->declines_left, HELP_DECLINED_RUNS, memory_order_relaxed);
  }
}

int tpu_help_policy_declined_runs(void) { return HELP_DECLINED_RUNS; }
