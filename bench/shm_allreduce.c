/* shm_allreduce.c: times tpu_shm_all_reduce between forked processes (the transport alone,
 * without PyTorch) and prints the bus bandwidth, 2 (n-1)/n * bytes / time, per size.
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude bench/shm_allreduce.c build/release/libtpu.a \
 *      -pthread -lm -o build/shm_allreduce && build/shm_allreduce [ranks] [slot MiB]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tpu/shm_group.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int run(tpu_shm_group_t *g, int rank, int world) {
  const size_t mib[] = {1, 4, 16, 64, 256};
  for (size_t k = 0; k < sizeof(mib) / sizeof(mib[0]); k++) {
    size_t n = mib[k] << 18; /* f32 elements */
    float *x = malloc(n * sizeof(float));
    if (!x) return 1;
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
    double best = 1e9;
    for (int it = 0; it < 5; it++) {
      tpu_shm_barrier(g);
      double t0 = now();
      if (tpu_shm_all_reduce(g, x, x, n, TPU_F32, TPU_RED_SUM) != TPU_OK) return 1;
      double dt = now() - t0;
      if (dt < best) best = dt;
    }
    if (rank == 0)
      printf("%4zu MiB  %6.2f GB/s bus bandwidth (best of 5)\n", mib[k],
             2.0 * (world - 1) / world * (double)(n * 4) / best / 1e9);
    free(x);
  }
  return 0;
}

int main(int argc, char **argv) {
  int world = argc > 1 ? atoi(argv[1]) : 2;
  tpu_shm_group_options_t o = {.slot_bytes = (size_t)(argc > 2 ? atoi(argv[2]) : 4) << 20};
  tpu_shm_group_t *g;
  int fd;
  if (tpu_shm_group_create(world, &o, &g, &fd) != TPU_OK) return 1;
  int parent = getpid();
  for (int r = 1; r < world; r++) {
    if (fork() == 0) {
      tpu_shm_group_t *mine;
      if (tpu_shm_group_attach(parent, fd, r, world, &o, &mine) != TPU_OK) _exit(1);
      tpu_shm_group_seal(mine);
      _exit(run(mine, r, world));
    }
  }
  tpu_shm_group_seal(g);
  int rc = run(g, 0, world);
  while (wait(NULL) > 0) {
  }
  tpu_shm_group_close(g);
  return rc;
}
