/* core_to_core.c: how fast the machine's first two CPUs hand data to each other, the cost
 * that decides whether a graph split across two threads (the compiled step's backward and
 * AdamW, a synchronize's helper) beats one thread. Prints:
 *   round trip   ns for a cache line to go to the other CPU and back (median of 9 batches
 *                of 20000 ping-pongs);
 *   other core   GB/s reading 256 KiB the other CPU has just written (an activation one
 *                thread produced and the other reads), best of 200.
 * On the 2-vCPU VMs this project runs on, the round trip is 55-90 ns most of the time and
 * 320-345 ns in other spells (the vCPUs then sit on cores that share no cache: another
 * CCD of the host); in those spells a split across the vCPUs runs slower than one thread
 * (README, "Host timing spells"). bench/bench_modes.py builds and runs this before and
 * after its timings, so each table says which spell it ran in.
 *
 * Build and run from the repo root:
 *   cc -std=c11 -O2 -D_GNU_SOURCE -pthread bench/core_to_core.c -o build/core_to_core
 *   build/core_to_core
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PINGS 20000
#define BATCHES 9
#define READ_FLOATS (256 * 1024 / 4)
#define READ_ROUNDS 200

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Pins the calling thread to |cpu|; false if it cannot (then the numbers mean less). */
static bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

/* The line the two threads pass back and forth, and the turns of the read test. */
static _Alignas(64) atomic_int g_ball;
static _Alignas(64) atomic_int g_turn;
static float *g_buf; /* (READ_FLOATS) */

/* The other CPU: returns each ping (odd) as the next even number, PINGS * BATCHES times;
 * then writes the buffer on its turns (even), READ_ROUNDS times. */
static void *partner(void *arg) {
  (void)arg;
  pin(1);
  for (int i = 0; i < PINGS * BATCHES; i++) {
    while (atomic_load_explicit(&g_ball, memory_order_acquire) != 2 * i + 1) {
    }
    atomic_store_explicit(&g_ball, 2 * i + 2, memory_order_release);
  }
  for (int r = 0; r < READ_ROUNDS; r++) {
    while (atomic_load_explicit(&g_turn, memory_order_acquire) != 2 * r) {
    }
    for (int i = 0; i < READ_FLOATS; i++) g_buf[i] = (float)(r + i);
    atomic_store_explicit(&g_turn, 2 * r + 1, memory_order_release);
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sums the buffer (integer view, so the loop vectorizes); the seconds it took. */
static double timed_read(unsigned *sum) {
  const unsigned *u = (const unsigned *)(const void *)g_buf;
  double t0 = now_s();
  unsigned s = 0;
  for (int i = 0; i < READ_FLOATS; i++) s += u[i];
  double t = now_s() - t0;
  *sum += s;
  return t;
}

int main(void) {
  g_buf = aligned_alloc(64, READ_FLOATS * sizeof(float));
  if (!g_buf) return 1;
  memset(g_buf, 0, READ_FLOATS * sizeof(float));
  bool pinned = pin(0);
  pthread_t t;
  if (pthread_create(&t, NULL, partner, NULL) != 0) return 1;
  double batch_ns[BATCHES];
  for (int b = 0; b < BATCHES; b++) {
    double t0 = now_s();
    for (int i = b * PINGS; i < (b + 1) * PINGS; i++) {
      atomic_store_explicit(&g_ball, 2 * i + 1, memory_order_release);
      while (atomic_load_explicit(&g_ball, memory_order_acquire) != 2 * i + 2) {
      }
    }
    batch_ns[b] = (now_s() - t0) / PINGS * 1e9;
  }
  qsort(batch_ns, BATCHES, sizeof *batch_ns, cmp_double);
  unsigned sum = 0;
  double other = 1e30;
  for (int r = 0; r < READ_ROUNDS; r++) {
    while (atomic_load_explicit(&g_turn, memory_order_acquire) != 2 * r + 1) {
    }
    double s = timed_read(&sum);
    if (s < other) other = s;
    atomic_store_explicit(&g_turn, 2 * r + 2, memory_order_release);
  }
  pthread_join(t, NULL);
  const double bytes = READ_FLOATS * sizeof(float);
  printf("round trip %.0f ns, other core %.1f GB/s%s (checksum %u)\n", batch_ns[BATCHES / 2],
         bytes / other / 1e9, pinned ? "" : " (threads not pinned)", sum);
  free(g_buf);
  return 0;
}
