/* test_hbm.c: the HBM arena: alignment, best fit, coalescing, fragmentation,
 * out-of-memory messages, lazy host commit and returning freed pages, threads. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tpu/hbm.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)

static tpu_hbm_t *make_arena(uint64_t capacity) {
  tpu_hbm_t *hbm = NULL;
  CHECK_OK(tpu_hbm_create(capacity, tpu_allocator_system(), &hbm));
  return hbm;
}

/* Resident set size of this process, bytes. */
static uint64_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

TEST(create_rounds_capacity_and_rejects_zero) {
  tpu_hbm_t *hbm = make_arena(1000);
  if (!hbm) return;
  CHECK(tpu_hbm_capacity(hbm) == 1024);
  CHECK(tpu_hbm_used(hbm) == 0);
  CHECK(tpu_hbm_largest_free(hbm) == 1024);
  tpu_hbm_destroy(hbm);
  tpu_hbm_t *none = (tpu_hbm_t *)1;
  CHECK(tpu_hbm_create(0, tpu_allocator_system(), &none) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(none == NULL);
  CHECK(tpu_hbm_create(UINT64_MAX, tpu_allocator_system(), &none) == TPU_ERR_INVALID_ARGUMENT);
  tpu_hbm_destroy(NULL);
}

TEST(alloc_alignment_rounding_and_contains) {
  tpu_hbm_t *hbm = make_arena(1 * MIB);
  if (!hbm) return;
  void *p[10];
  for (int i = 0; i < 10; i++) {
    CHECK_OK(tpu_hbm_alloc(hbm, (size_t)(i * 100 + 1), &p[i]));
    CHECK(((uintptr_t)p[i] % TPU_HBM_ALIGNMENT) == 0);
    CHECK(tpu_hbm_contains(hbm, p[i]));
    memset(p[i], i, (size_t)(i * 100 + 1));
  }
  /* sizes 1..501 round to 512, 601..901 to 1024 */
  CHECK(tpu_hbm_used(hbm) == 6 * 512 + 4 * 1024);
  CHECK(!tpu_hbm_contains(hbm, (char *)p[0] - 1));
  CHECK(!tpu_hbm_contains(hbm, (char *)p[0] + tpu_hbm_capacity(hbm)));
  CHECK(tpu_hbm_contains(hbm, (char *)p[0] + tpu_hbm_capacity(hbm) - 1));
  int x;
  CHECK(!tpu_hbm_contains(hbm, &x));
  for (int i = 0; i < 10; i++) CHECK_OK(tpu_hbm_free(hbm, p[i]));
  CHECK(tpu_hbm_used(hbm) == 0);
  CHECK(tpu_hbm_largest_free(hbm) == tpu_hbm_capacity(hbm));
  void *z = (void *)1;
  CHECK(tpu_hbm_alloc(hbm, 0, &z) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(z == NULL);
  CHECK_OK(tpu_hbm_free(hbm, NULL));
  tpu_hbm_destroy(hbm);
}

TEST(coalescing_and_fragmentation) {
  tpu_hbm_t *hbm = make_arena(4 * KIB);
  if (!hbm) return;
  void *a, *b, *c, *d, *e;
  CHECK_OK(tpu_hbm_alloc(hbm, 1024, &a));
  CHECK_OK(tpu_hbm_alloc(hbm, 1024, &b));
  CHECK_OK(tpu_hbm_alloc(hbm, 1024, &c));
  CHECK_OK(tpu_hbm_alloc(hbm, 1024, &d));
  CHECK((char *)b == (char *)a + 1024 && (char *)d == (char *)c + 1024);
  CHECK(tpu_hbm_largest_free(hbm) == 0);
  /* Free B and D: 2 KiB free in two pieces, so 2 KiB does not fit. */
  CHECK_OK(tpu_hbm_free(hbm, b));
  CHECK_OK(tpu_hbm_free(hbm, d));
  CHECK(tpu_hbm_largest_free(hbm) == 1024);
  CHECK(tpu_hbm_alloc(hbm, 2048, &e) == TPU_ERR_OUT_OF_MEMORY);
  CHECK_CONTAINS(tpu_status_message(),
                 "requested 2048 bytes, 2048 bytes in use of 4096 bytes total");
  /* Free A: A and B merge, and a block of size A+B fits at A. */
  CHECK_OK(tpu_hbm_free(hbm, a));
  CHECK(tpu_hbm_largest_free(hbm) == 2048);
  CHECK_OK(tpu_hbm_alloc(hbm, 2048, &e));
  CHECK(e == a);
  /* Free C: it merges with D after it; then E merges with both. */
  CHECK_OK(tpu_hbm_free(hbm, c));
  CHECK(tpu_hbm_largest_free(hbm) == 2048);
  CHECK_OK(tpu_hbm_free(hbm, e));
  CHECK(tpu_hbm_largest_free(hbm) == 4096);
  CHECK(tpu_hbm_used(hbm) == 0);
  tpu_hbm_destroy(hbm);
}

TEST(best_fit_picks_the_smallest_hole) {
  tpu_hbm_t *hbm = make_arena(16 * KIB);
  if (!hbm) return;
  void *p[6];
  size_t sizes[6] = {2048, 512, 1024, 512, 512, 512};
  for (int i = 0; i < 6; i++) CHECK_OK(tpu_hbm_alloc(hbm, sizes[i], &p[i]));
  CHECK_OK(tpu_hbm_free(hbm, p[0])); /* hole of 2048 */
  CHECK_OK(tpu_hbm_free(hbm, p[2])); /* hole of 1024 */
  void *q;
  CHECK_OK(tpu_hbm_alloc(hbm, 1000, &q));
  CHECK(q == p[2]);
  void *r;
  CHECK_OK(tpu_hbm_alloc(hbm, 1500, &r));
  CHECK(r == p[0]);
  tpu_hbm_destroy(hbm); /* with live blocks: must not leak bookkeeping */
}

TEST(bad_frees_are_errors) {
  tpu_hbm_t *hbm = make_arena(8 * KIB);
  if (!hbm) return;
  void *a;
  CHECK_OK(tpu_hbm_alloc(hbm, 1024, &a));
  CHECK(tpu_hbm_free(hbm, (char *)a + 512) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "not the start of a live block");
  int x;
  CHECK(tpu_hbm_free(hbm, &x) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_hbm_used(hbm) == 1024);
  CHECK_OK(tpu_hbm_free(hbm, a));
  CHECK(tpu_hbm_free(hbm, a) == TPU_ERR_INVALID_ARGUMENT); /* double free */
  CHECK(tpu_hbm_used(hbm) == 0);
  tpu_hbm_destroy(hbm);
}

TEST(oom_message_and_recovery) {
  tpu_hbm_t *hbm = make_arena(1 * MIB);
  if (!hbm) return;
  void *a, *b = (void *)1;
  CHECK_OK(tpu_hbm_alloc(hbm, 768 * KIB, &a));
  CHECK(tpu_hbm_alloc(hbm, 512 * KIB, &b) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(b == NULL);
  CHECK_CONTAINS(tpu_status_message(), "hbm_alloc: out of memory: requested 524288 bytes, "
                                       "786432 bytes in use of 1048576 bytes total");
  CHECK(tpu_hbm_alloc(hbm, SIZE_MAX, &b) == TPU_ERR_OUT_OF_MEMORY);
  CHECK_CONTAINS(tpu_status_message(), "out of memory");
  CHECK(tpu_hbm_alloc(hbm, SIZE_MAX - 100, &b) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(tpu_hbm_alloc(hbm, 2 * MIB, &b) == TPU_ERR_OUT_OF_MEMORY);
  CHECK_OK(tpu_hbm_free(hbm, a));
  CHECK_OK(tpu_hbm_alloc(hbm, 1 * MIB, &b)); /* the whole arena */
  CHECK_OK(tpu_hbm_free(hbm, b));
  tpu_hbm_destroy(hbm);
}

TEST(sixteen_gib_arena_commits_lazily) {
  uint64_t before = rss_bytes();
  tpu_hbm_t *hbm = make_arena(16 * GIB);
  if (!hbm) return;
  CHECK(tpu_hbm_capacity(hbm) == 16 * GIB);
  void *big, *small;
  CHECK_OK(tpu_hbm_alloc(hbm, 12 * GIB, &big));
  CHECK_OK(tpu_hbm_alloc(hbm, 8 * MIB, &small));
  memset(small, 0x5a, 8 * MIB);          /* touch 8 MiB */
  memset(big, 1, 1 * MIB);               /* and the start and end of 12 GiB */
  memset((char *)big + 12 * GIB - MIB, 2, 1 * MIB);
  uint64_t touched = rss_bytes();
  CHECK(touched < before + 64 * MIB);
  CHECK(touched >= before + 8 * MIB);
  /* Freeing returns the pages to the host. */
  CHECK_OK(tpu_hbm_free(hbm, small));
  uint64_t after_free = rss_bytes();
  CHECK(after_free + 6 * MIB <= touched);
  CHECK_OK(tpu_hbm_free(hbm, big));
  tpu_hbm_destroy(hbm);
}

TEST(many_large_arenas_fit_in_address_space) {
  /* 16 chips of v7's 192 GiB: 3 TiB of address space, none of it committed. */
  tpu_hbm_t *arenas[16] = {0};
  int made = 0;
  for (int i = 0; i < 16; i++) {
    if (tpu_hbm_create(192 * GIB, tpu_allocator_system(), &arenas[i]) != TPU_OK) {
      fprintf(stderr, "  arena %d: %s\n", i, tpu_status_message());
      break;
    }
    made++;
  }
  CHECK(made == 16);
  for (int i = 0; i < made; i++) {
    void *p;
    CHECK_OK(tpu_hbm_alloc(arenas[i], 100 * GIB, &p));
    for (int j = 0; j < made; j++) CHECK(tpu_hbm_contains(arenas[j], p) == (i == j));
  }
  for (int i = 0; i < made; i++) tpu_hbm_destroy(arenas[i]);
}

TEST(mapping_failure_is_unavailable) {
#if defined(__SANITIZE_ADDRESS__)
  /* AddressSanitizer needs terabytes of address space: no address-space limit here. */
#else
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) { /* child: cap the address space at 4 GiB, then ask for 16 GiB */
    struct rlimit lim = {4 * GIB, 4 * GIB};
    tpu_hbm_t *hbm = (tpu_hbm_t *)1;
    int ok = setrlimit(RLIMIT_AS, &lim) == 0 &&
             tpu_hbm_create(16 * GIB, tpu_allocator_system(), &hbm) == TPU_ERR_UNAVAILABLE &&
             hbm == NULL && strstr(tpu_status_message(), "cannot reserve 16.00 GiB") &&
             strstr(tpu_status_message(), "ulimit -v");
    _exit(ok ? 0 : 1);
  }
  int wstatus = 0;
  CHECK(waitpid(pid, &wstatus, 0) == pid);
  CHECK(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
#endif
}

TEST(random_alloc_free_keeps_invariants) {
  enum { SLOTS = 512 };
  tpu_hbm_t *hbm = make_arena(64 * MIB);
  if (!hbm) return;
  void *ptrs[SLOTS] = {0};
  size_t sizes[SLOTS] = {0};
  uint64_t expected_used = 0;
  unsigned seed = 7;
  for (int step = 0; step < 20000; step++) {
    seed = seed * 1103515245u + 12345u;
    int i = (int)((seed >> 8) % SLOTS);
    if (ptrs[i]) {
      unsigned char *p = ptrs[i];
      CHECK(p[0] == (unsigned char)i && p[sizes[i] - 1] == (unsigned char)i);
      CHECK_OK(tpu_hbm_free(hbm, ptrs[i]));
      expected_used -= (sizes[i] + 511) / 512 * 512;
      ptrs[i] = NULL;
    } else {
      size_t size = 1 + (seed >> 12) % (256 * KIB);
      if (tpu_hbm_alloc(hbm, size, &ptrs[i]) == TPU_OK) {
        sizes[i] = size;
        expected_used += (size + 511) / 512 * 512;
        ((unsigned char *)ptrs[i])[0] = (unsigned char)i;
        ((unsigned char *)ptrs[i])[size - 1] = (unsigned char)i;
      }
    }
    if (step % 1000 == 0) CHECK(tpu_hbm_used(hbm) == expected_used);
  }
  for (int i = 0; i < SLOTS; i++) CHECK_OK(tpu_hbm_free(hbm, ptrs[i]));
  CHECK(tpu_hbm_used(hbm) == 0);
  CHECK(tpu_hbm_largest_free(hbm) == 64 * MIB);
  tpu_hbm_destroy(hbm);
}

static void *thread_churn(void *arg) {
  tpu_hbm_t *hbm = arg;
  void *mine[64];
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < 64; i++) {
      if (tpu_hbm_alloc(hbm, 512 * (size_t)(1 + (i + round) % 8), &mine[i]) != TPU_OK) {
        mine[i] = NULL;
      } else {
        memset(mine[i], i, 512);
      }
    }
    for (int i = 0; i < 64; i++) tpu_hbm_free(hbm, mine[i]);
  }
  return NULL;
}

TEST(threads_share_an_arena) {
  tpu_hbm_t *hbm = make_arena(64 * MIB);
  if (!hbm) return;
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, thread_churn, hbm) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  CHECK(tpu_hbm_used(hbm) == 0);
  CHECK(tpu_hbm_largest_free(hbm) == 64 * MIB);
  tpu_hbm_destroy(hbm);
}

int main(void) {
  RUN(create_rounds_capacity_and_rejects_zero);
  RUN(alloc_alignment_rounding_and_contains);
  RUN(coalescing_and_fragmentation);
  RUN(best_fit_picks_the_smallest_hole);
  RUN(bad_frees_are_errors);
  RUN(oom_message_and_recovery);
  RUN(sixteen_gib_arena_commits_lazily);
  RUN(many_large_arenas_fit_in_address_space);
  RUN(mapping_failure_is_unavailable);
  RUN(random_alloc_free_keeps_invariants);
  RUN(threads_share_an_arena);
  return check_report();
}
