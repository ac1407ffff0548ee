/* spin.h: what spin-waits share (internal): the monotonic clock in nanoseconds, and the
 * CPU's pause hint for each turn of a spin loop. */
#ifndef TPU_BASE_SPIN_H
#define TPU_BASE_SPIN_H

#include <stdint.h>
#include <time.h>

static inline uint64_t tpu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void tpu_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

#endif /* TPU_BASE_SPIN_H */
