/* test_caching_allocator.c: the caching device allocator: rounding, reuse, stats,
 * out of memory (message, retry after releasing the cache, recovery), a limit below the
 * HBM (torch.tpu.set_per_process_memory_fraction), threads. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "tpu/caching_allocator.h"
#include "tpu/hbm.h"

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)

typedef struct fixture {
  tpu_hbm_t *hbm;
  tpu_caching_allocator_t *ca;
} fixture_t;

static fixture_t setup(uint64_t capacity, int device_index, const char *label) {
  fixture_t f = {0};
  CHECK_OK(tpu_hbm_create(capacity, tpu_allocator_system(), &f.hbm));
  if (f.hbm) {
    CHECK_OK(tpu_caching_allocator_create(f.hbm, device_index, tpu_allocator_system(), &f.ca));
  }
  if (f.ca && label) tpu_caching_allocator_set_label(f.ca, label);
  return f;
}

static void teardown(fixture_t f) {
  tpu_caching_allocator_destroy(f.ca);
  if (f.hbm) CHECK(tpu_hbm_used(f.hbm) == 0); /* everything went back to the arena */
  tpu_hbm_destroy(f.hbm);
}

static tpu_memory_stats_t stats(fixture_t f) {
  tpu_memory_stats_t s;
  tpu_caching_get_stats(f.ca, &s);
  return s;
}

TEST(rounding_and_alignment) {
  fixture_t f = setup(256 * MIB, 0, NULL);
  if (!f.ca) return;
  struct { size_t req, block; } cases[] = {
      {1, 512}, {512, 512}, {513, 1024}, {1000, 1024}, {MIB - 1, MIB}, {MIB, MIB},
      {MIB + 1, MIB + 128 * KIB}, {16 * MIB - 1, 16 * MIB}, {16 * MIB + 1, 18 * MIB},
      {20 * MIB + 1, 22 * MIB},
  };
  void *ptrs[sizeof(cases) / sizeof(cases[0])];
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    CHECK_OK(tpu_caching_alloc(f.ca, cases[i].req, &ptrs[i]));
    CHECK(((uintptr_t)ptrs[i] % 512) == 0);
    CHECK(tpu_caching_block_size(f.ca, ptrs[i]) == cases[i].block);
    memset(ptrs[i], 0x11, cases[i].req);
  }
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) tpu_caching_free(f.ca, ptrs[i]);
  CHECK(tpu_caching_block_size(f.ca, ptrs[0]) == 0); /* cached, not live */
  void *z = (void *)1;
  CHECK_OK(tpu_caching_alloc(f.ca, 0, &z));
  CHECK(z == NULL);
  tpu_caching_free(f.ca, NULL);
  CHECK(tpu_caching_block_size(f.ca, NULL) == 0);
  teardown(f);
}

TEST(freed_block_is_reused) {
  fixture_t f = setup(64 * MIB, 0, NULL);
  if (!f.ca) return;
  void *a, *b;
  CHECK_OK(tpu_caching_alloc(f.ca, 4096, &a));
  tpu_caching_free(f.ca, a);
  CHECK_OK(tpu_caching_alloc(f.ca, 4000, &b));
  CHECK(a == b);
  tpu_memory_stats_t s = stats(f);
  CHECK(s.cache_hits == 1 && s.arena_allocs == 1 && s.alloc_count == 2 && s.free_count == 1);
  CHECK(tpu_hbm_used(f.hbm) == 4096);
  tpu_caching_free(f.ca, b);
  teardown(f);
}

TEST(reuse_is_not_wasteful) {
  fixture_t f = setup(64 * MIB, 0, NULL);
  if (!f.ca) return;
  void *small, *big, *p, *q;
  CHECK_OK(tpu_caching_alloc(f.ca, 2048, &small));
  CHECK_OK(tpu_caching_alloc(f.ca, 4 * MIB, &big));
  tpu_caching_free(f.ca, small);
  tpu_caching_free(f.ca, big);
  CHECK_OK(tpu_caching_alloc(f.ca, 512, &p));     /* 2048 > 2 x 512: not reused */
  CHECK(p != small);
  CHECK_OK(tpu_caching_alloc(f.ca, 1024, &q));    /* 2048 <= 2 x 1024: reused */
  CHECK(q == small);
  void *r, *t;
  CHECK_OK(tpu_caching_alloc(f.ca, 2 * MIB, &r)); /* 4 MiB > 1.25 x 2 MiB: not reused */
  CHECK(r != big);
  CHECK_OK(tpu_caching_alloc(f.ca, 3584 * KIB, &t)); /* 4 MiB <= 1.25 x 3.5 MiB: reused */
  CHECK(t == big);
  CHECK(tpu_caching_block_size(f.ca, t) == 4 * MIB);
  tpu_caching_free(f.ca, p);
  tpu_caching_free(f.ca, q);
  tpu_caching_free(f.ca, r);
  tpu_caching_free(f.ca, t);
  teardown(f);
}

TEST(stats_move) {
  fixture_t f = setup(64 * MIB, 0, NULL);
  if (!f.ca) return;
  tpu_memory_stats_t s = stats(f);
  CHECK(s.allocated_bytes == 0 && s.reserved_bytes == 0 && s.capacity_bytes == 64 * MIB);
  void *a, *b;
  CHECK_OK(tpu_caching_alloc(f.ca, 1000, &a));
  CHECK_OK(tpu_caching_alloc(f.ca, 3 * MIB, &b));
  s = stats(f);
  CHECK(s.allocated_bytes == 1024 + 3 * MIB);
  CHECK(s.requested_bytes == 1000 + 3 * MIB);
  CHECK(s.reserved_bytes == 1024 + 3 * MIB);
  CHECK(s.allocated_bytes_peak == 1024 + 3 * MIB && s.reserved_bytes_peak == 1024 + 3 * MIB);
  CHECK(s.active_blocks == 2 && s.cached_blocks == 0 && s.alloc_count == 2);
  tpu_caching_free(f.ca, b);
  s = stats(f);
  CHECK(s.allocated_bytes == 1024 && s.requested_bytes == 1000);
  CHECK(s.reserved_bytes == 1024 + 3 * MIB); /* cached blocks stay reserved */
  CHECK(s.allocated_bytes_peak == 1024 + 3 * MIB);
  CHECK(s.active_blocks == 1 && s.cached_blocks == 1 && s.free_count == 1);
  tpu_caching_reset_peak(f.ca);
  s = stats(f);
  CHECK(s.allocated_bytes_peak == 1024 && s.reserved_bytes_peak == 1024 + 3 * MIB);
  tpu_caching_free(f.ca, a);
  tpu_caching_empty_cache(f.ca);
  s = stats(f);
  CHECK(s.reserved_bytes == 0 && s.allocated_bytes == 0 && s.cached_blocks == 0);
  CHECK(s.active_blocks == 0 && s.cache_flushes == 1);
  CHECK(tpu_hbm_used(f.hbm) == 0);
  teardown(f);
}

TEST(oom_message_then_recovery) {
  fixture_t f = setup(64 * MIB, 3, "TPU v5e");
  if (!f.ca) return;
  void *a, *b = (void *)1;
  CHECK_OK(tpu_caching_alloc(f.ca, 48 * MIB, &a));
  CHECK(tpu_caching_alloc(f.ca, 32 * MIB, &b) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(b == NULL);
  CHECK_CONTAINS(tpu_status_message(),
                 "tpu:3 out of memory: tried to allocate 32.00 MiB (33554432 bytes); "
                 "48.00 MiB in use, 0 B cached, 64.00 MiB total HBM (TPU v5e)");
  tpu_memory_stats_t s = stats(f);
  CHECK(s.num_ooms == 1 && s.alloc_count == 1 && s.allocated_bytes == 48 * MIB);
  tpu_caching_free(f.ca, a);
  CHECK_OK(tpu_caching_alloc(f.ca, 32 * MIB, &b)); /* works again after the free */
  tpu_caching_free(f.ca, b);
  teardown(f);
}

TEST(oom_retries_after_releasing_the_cache) {
  fixture_t f = setup(64 * MIB, 0, NULL);
  if (!f.ca) return;
  void *a, *b;
  CHECK_OK(tpu_caching_alloc(f.ca, 40 * MIB, &a));
  tpu_caching_free(f.ca, a); /* 40 MiB cached: the arena has 24 MiB left */
  CHECK_OK(tpu_caching_alloc(f.ca, 48 * MIB, &b));
  tpu_memory_stats_t s = stats(f);
  CHECK(s.cache_flushes == 1 && s.num_ooms == 0 && s.cached_blocks == 0);
  CHECK(s.reserved_bytes == 48 * MIB && s.allocated_bytes == 48 * MIB);
  CHECK(s.reserved_bytes_peak == 48 * MIB);
  tpu_caching_free(f.ca, b);
  teardown(f);
}

TEST(oom_reports_fragmentation) {
  fixture_t f = setup(64 * MIB, 1, "TPU v6e");
  if (!f.ca) return;
  void *p[4], *q;
  for (int i = 0; i < 4; i++) CHECK_OK(tpu_caching_alloc(f.ca, 16 * MIB, &p[i]));
  tpu_caching_free(f.ca, p[0]);
  tpu_caching_free(f.ca, p[2]);
  CHECK(tpu_caching_alloc(f.ca, 32 * MIB, &q) == TPU_ERR_OUT_OF_MEMORY);
  CHECK_CONTAINS(tpu_status_message(), "tpu:1 out of memory: tried to allocate 32.00 MiB");
  CHECK_CONTAINS(tpu_status_message(),
                 "32.00 MiB in use, 0 B cached, 64.00 MiB total HBM (TPU v6e)");
  CHECK_CONTAINS(tpu_status_message(), "largest free block 16.00 MiB");
  CHECK(stats(f).cache_flushes == 1);
  tpu_caching_free(f.ca, p[1]);
  tpu_caching_free(f.ca, p[3]);
  teardown(f);
}

TEST(a_limit_caps_reserved_bytes) {
  fixture_t f = setup(64 * MIB, 2, "TPU v5e");
  if (!f.ca) return;
  CHECK(tpu_caching_allocator_limit(f.ca) == 64 * MIB); /* none set: the HBM */
  tpu_caching_allocator_set_limit(f.ca, 24 * MIB);
  CHECK(tpu_caching_allocator_limit(f.ca) == 24 * MIB);
  void *a, *b = (void *)1, *c;
  CHECK_OK(tpu_caching_alloc(f.ca, 16 * MIB, &a));
  /* 16 + 16 > 24, though the HBM has room: refused, naming the limit */
  CHECK(tpu_caching_alloc(f.ca, 16 * MIB, &b) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(b == NULL);
  CHECK_CONTAINS(tpu_status_message(),
                 "tpu:2 out of memory: tried to allocate 16.00 MiB (16777216 bytes); "
                 "16.00 MiB in use, 0 B cached, 64.00 MiB total HBM (TPU v5e); this process "
                 "may reserve 24.00 MiB of it (set_per_process_memory_fraction)");
  CHECK(stats(f).num_ooms == 1);
  CHECK_OK(tpu_caching_alloc(f.ca, 8 * MIB, &b)); /* 24 of 24: fits exactly */
  tpu_caching_free(f.ca, b);
  CHECK_OK(tpu_caching_alloc(f.ca, 8 * MIB, &b)); /* from the cache: nothing more reserved */
  CHECK(stats(f).cache_hits == 1 && stats(f).cache_flushes == 0);
  tpu_caching_free(f.ca, b);
  tpu_caching_free(f.ca, a); /* 16 + 8 cached: 24 reserved */
  /* no cached block serves 20 MiB and 24 + 20 > 24: the cache is released first, as when
   * the arena is full */
  CHECK_OK(tpu_caching_alloc(f.ca, 20 * MIB, &c));
  tpu_memory_stats_t s = stats(f);
  CHECK(s.cache_flushes == 1 && s.reserved_bytes == 20 * MIB && s.cached_blocks == 0);
  /* a lower limit leaves what is reserved; 0 lets nothing more in; none lets all in */
  tpu_caching_allocator_set_limit(f.ca, 8 * MIB);
  CHECK(tpu_caching_alloc(f.ca, 1 * MIB, &b) == TPU_ERR_OUT_OF_MEMORY);
  tpu_caching_allocator_set_limit(f.ca, 0);
  CHECK(tpu_caching_alloc(f.ca, 512, &b) == TPU_ERR_OUT_OF_MEMORY);
  CHECK_CONTAINS(tpu_status_message(), "this process may reserve 0 B of it");
  tpu_caching_allocator_set_limit(f.ca, UINT64_MAX);
  CHECK(tpu_caching_allocator_limit(f.ca) == 64 * MIB);
  CHECK_OK(tpu_caching_alloc(f.ca, 40 * MIB, &b));
  tpu_caching_free(f.ca, b);
  tpu_caching_allocator_set_limit(f.ca, 1000 * MIB); /* above the HBM: the HBM bounds */
  CHECK(tpu_caching_allocator_limit(f.ca) == 64 * MIB);
  CHECK(tpu_caching_alloc(f.ca, 48 * MIB, &b) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(strstr(tpu_status_message(), "set_per_process_memory_fraction") == NULL);
  tpu_caching_free(f.ca, c);
  teardown(f);
}

TEST(huge_requests_are_clean_errors) {
  fixture_t f = setup(16 * MIB, 0, "TPU v5e");
  if (!f.ca) return;
  void *p = (void *)1;
  CHECK(tpu_caching_alloc(f.ca, SIZE_MAX, &p) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(p == NULL);
  CHECK_CONTAINS(tpu_status_message(), "tpu:0 out of memory: tried to allocate");
  CHECK(tpu_caching_alloc(f.ca, SIZE_MAX - 4096, &p) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(tpu_caching_alloc(f.ca, 17 * MIB, &p) == TPU_ERR_OUT_OF_MEMORY);
  CHECK_CONTAINS(tpu_status_message(), "(17825792 bytes)");
  CHECK(stats(f).num_ooms == 3);
  teardown(f);
}

TEST(unknown_and_double_frees_are_ignored) {
  fixture_t f = setup(16 * MIB, 0, NULL);
  if (!f.ca) return;
  void *a;
  CHECK_OK(tpu_caching_alloc(f.ca, 100, &a));
  int x;
  tpu_caching_free(f.ca, &x);
  tpu_caching_free(f.ca, (char *)a + 64);
  tpu_caching_free(f.ca, a);
  tpu_caching_free(f.ca, a);
  tpu_memory_stats_t s = stats(f);
  CHECK(s.free_count == 1 && s.cached_blocks == 1 && s.allocated_bytes == 0);
  teardown(f);
}

TEST(destroy_returns_live_and_cached_blocks) {
  fixture_t f = setup(16 * MIB, 0, NULL);
  if (!f.ca) return;
  void *a, *b;
  CHECK_OK(tpu_caching_alloc(f.ca, 1 * MIB, &a));
  CHECK_OK(tpu_caching_alloc(f.ca, 2 * MIB, &b));
  tpu_caching_free(f.ca, a);
  CHECK(tpu_hbm_used(f.hbm) == 3 * MIB);
  teardown(f); /* checks the arena is empty again */
}

static void *thread_churn(void *arg) {
  tpu_caching_allocator_t *ca = arg;
  void *mine[32];
  for (int round = 0; round < 300; round++) {
    for (int i = 0; i < 32; i++) {
      size_t size = (size_t)(64 + ((i * 7919 + round * 31) % 20000));
      if (tpu_caching_alloc(ca, size, &mine[i]) != TPU_OK) mine[i] = NULL;
      else memset(mine[i], i, 64);
    }
    for (int i = 0; i < 32; i++) tpu_caching_free(ca, mine[i]);
  }
  return NULL;
}

TEST(threads_share_an_allocator) {
  fixture_t f = setup(64 * MIB, 0, NULL);
  if (!f.ca) return;
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, thread_churn, f.ca) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  tpu_memory_stats_t s = stats(f);
  CHECK(s.active_blocks == 0 && s.allocated_bytes == 0 && s.requested_bytes == 0);
  CHECK(s.alloc_count == s.free_count && s.alloc_count == 4 * 300 * 32);
  CHECK(s.cache_hits + s.arena_allocs == s.alloc_count && s.cache_hits > s.arena_allocs);
  CHECK(s.reserved_bytes == tpu_hbm_used(f.hbm));
  teardown(f);
}

int main(void) {
  RUN(rounding_and_alignment);
  RUN(freed_block_is_reused);
  RUN(reuse_is_not_wasteful);
  RUN(stats_move);
  RUN(oom_message_then_recovery);
  RUN(oom_retries_after_releasing_the_cache);
  RUN(oom_reports_fragmentation);
  RUN(a_limit_caps_reserved_bytes);
  RUN(huge_requests_are_clean_errors);
  RUN(unknown_and_double_frees_are_ignored);
  RUN(destroy_returns_live_and_cached_blocks);
  RUN(threads_share_an_allocator);
  return check_report();
}
