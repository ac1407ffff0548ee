/* test_status.c: status codes and messages, the host allocator, size arithmetic,
 * byte formatting and the internal pointer map. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/ptr_map.h"
#include "check.h"
#include "tpu/allocator.h"
#include "tpu/caching_allocator.h"
#include "tpu/status.h"

TEST(status_set_returns_code_and_message) {
  tpu_status_clear();
  CHECK(strcmp(tpu_status_message(), "") == 0);
  tpu_status_t st = tpu_status_set(TPU_ERR_OUT_OF_RANGE, "index %d of %s", 7, "x");
  CHECK(st == TPU_ERR_OUT_OF_RANGE);
  CHECK(strcmp(tpu_status_message(), "index 7 of x") == 0);
  tpu_status_clear();
  CHECK(tpu_status_message()[0] == '\0');
}

TEST(status_set_can_wrap_its_own_message) {
  tpu_status_set(TPU_ERR_DEVICE, "inner problem");
  tpu_status_set(TPU_ERR_DEVICE, "outer: %s", tpu_status_message());
  CHECK(strcmp(tpu_status_message(), "outer: inner problem") == 0);
}

TEST(status_long_message_is_truncated) {
  char big[2000];
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  tpu_status_set(TPU_ERR_INTERNAL, "%s", big);
  size_t n = strlen(tpu_status_message());
  CHECK(n > 400 && n < sizeof(big) - 1);
}

static void *set_in_other_thread(void *arg) {
  (void)arg;
  tpu_status_set(TPU_ERR_INTERNAL, "from the other thread");
  return NULL;
}

TEST(status_message_is_thread_local) {
  tpu_status_set(TPU_ERR_INTERNAL, "mine");
  pthread_t t;
  CHECK(pthread_create(&t, NULL, set_in_other_thread, NULL) == 0);
  pthread_join(t, NULL);
  CHECK(strcmp(tpu_status_message(), "mine") == 0);
}

TEST(status_names) {
  CHECK(strcmp(tpu_status_name(TPU_OK), "OK") == 0);
  CHECK(strcmp(tpu_status_name(TPU_ERR_OUT_OF_MEMORY), "OUT_OF_MEMORY") == 0);
  for (int a = 0; a < TPU_STATUS_COUNT; a++) {
    CHECK(strcmp(tpu_status_name((tpu_status_t)a), "UNKNOWN_STATUS") != 0);
    for (int b = a + 1; b < TPU_STATUS_COUNT; b++) {
      CHECK(strcmp(tpu_status_name((tpu_status_t)a), tpu_status_name((tpu_status_t)b)) != 0);
    }
  }
  CHECK(strcmp(tpu_status_name(TPU_STATUS_COUNT), "UNKNOWN_STATUS") == 0);
  CHECK(strcmp(tpu_status_name((tpu_status_t)1234), "UNKNOWN_STATUS") == 0);
}

static tpu_status_t fails_then(int *reached) {
  TPU_RETURN_IF_ERROR(tpu_status_set(TPU_ERR_UNIMPLEMENTED, "nope"));
  *reached = 1;
  return TPU_OK;
}

TEST(return_if_error_propagates) {
  int reached = 0;
  CHECK(fails_then(&reached) == TPU_ERR_UNIMPLEMENTED);
  CHECK(reached == 0);
  CHECK(strcmp(tpu_status_message(), "nope") == 0);
}

/* ---- host allocator ------------------------------------------------------- */

TEST(system_allocator_alignment) {
  tpu_allocator_t a = tpu_allocator_system();
  for (size_t align = 1; align <= 8192; align *= 2) {
    for (size_t size = 1; size <= 5000; size += 1237) {
      unsigned char *p = a.alloc(a.self, size, align);
      CHECK(p != NULL);
      if (!p) continue;
      CHECK(((uintptr_t)p & (align - 1)) == 0);
      memset(p, 0xab, size);
      CHECK(p[size - 1] == 0xab);
      a.free(a.self, p);
    }
  }
  void *z = a.alloc(a.self, 0, 16);
  a.free(a.self, z);
  a.free(a.self, NULL);
  tpu_allocator_free(a, NULL);
}

TEST(calloc_zeroes) {
  tpu_allocator_t a = tpu_allocator_system();
  void *mem = NULL;
  CHECK_OK(tpu_allocator_calloc(a, 1000, sizeof(uint32_t), "test", &mem));
  uint32_t *p = mem;
  CHECK(p != NULL);
  if (!p) return;
  int nonzero = 0;
  for (int i = 0; i < 1000; i++) nonzero += p[i] != 0;
  CHECK(nonzero == 0);
  tpu_allocator_free(a, p);
}

TEST(calloc_overflow_is_clean_error) {
  tpu_allocator_t a = tpu_allocator_system();
  void *p = (void *)1;
  CHECK(tpu_allocator_calloc(a, SIZE_MAX / 2, 3, "big table", &p) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(p == NULL);
  CHECK_CONTAINS(tpu_status_message(), "big table");
  CHECK_CONTAINS(tpu_status_message(), "overflow");
}

static void *failing_alloc(void *self, size_t size, size_t align) {
  (void)self, (void)size, (void)align;
  return NULL;
}
static void noop_free(void *self, void *ptr) { (void)self, (void)ptr; }

TEST(calloc_exhaustion_is_clean_error) {
  tpu_allocator_t a = {NULL, failing_alloc, noop_free};
  void *p = (void *)1;
  CHECK(tpu_allocator_calloc(a, 4, 4, "thing", &p) == TPU_ERR_OUT_OF_MEMORY);
  CHECK(p == NULL);
  CHECK_CONTAINS(tpu_status_message(), "thing");
}

TEST(size_arithmetic) {
  size_t out = 7;
  CHECK(tpu_size_add(1, 2, &out) && out == 3);
  out = 7;
  CHECK(!tpu_size_add(SIZE_MAX, 1, &out) && out == 7);
  CHECK(tpu_size_mul(1000, 1000, &out) && out == 1000000);
  CHECK(!tpu_size_mul(SIZE_MAX / 2 + 1, 2, &out) && out == 1000000);
  CHECK(tpu_size_align_up(0, 512, &out) && out == 0);
  CHECK(tpu_size_align_up(1, 512, &out) && out == 512);
  CHECK(tpu_size_align_up(512, 512, &out) && out == 512);
  CHECK(tpu_size_align_up(513, 512, &out) && out == 1024);
  CHECK(!tpu_size_align_up(SIZE_MAX - 10, 512, &out) && out == 1024);
}

TEST(format_bytes) {
  char buf[32];
  CHECK(strcmp(tpu_format_bytes(0, buf, sizeof(buf)), "0 B") == 0);
  CHECK(strcmp(tpu_format_bytes(512, buf, sizeof(buf)), "512 B") == 0);
  CHECK(strcmp(tpu_format_bytes(1023, buf, sizeof(buf)), "1023 B") == 0);
  CHECK(strcmp(tpu_format_bytes(1024, buf, sizeof(buf)), "1.00 KiB") == 0);
  CHECK(strcmp(tpu_format_bytes(1536, buf, sizeof(buf)), "1.50 KiB") == 0);
  CHECK(strcmp(tpu_format_bytes(3ull << 20, buf, sizeof(buf)), "3.00 MiB") == 0);
  CHECK(strcmp(tpu_format_bytes(16ull << 30, buf, sizeof(buf)), "16.00 GiB") == 0);
  CHECK(strcmp(tpu_format_bytes(31ull << 29, buf, sizeof(buf)), "15.50 GiB") == 0);
  CHECK(strcmp(tpu_format_bytes(2ull << 40, buf, sizeof(buf)), "2.00 TiB") == 0);
  CHECK(strstr(tpu_format_bytes(UINT64_MAX, buf, sizeof(buf)), "EiB") != NULL);
  char small[4];
  CHECK(strcmp(tpu_format_bytes(1536, small, sizeof(small)), "1.5") == 0);
}

/* ---- internal pointer map ------------------------------------------------- */

TEST(ptr_map_matches_reference) {
  enum { N = 4000 };
  static void *ref[N]; /* ref[i] = value stored under key (i + 1) * 64, or NULL */
  memset(ref, 0, sizeof(ref));
  tpu_ptr_map_t m;
  tpu_ptr_map_init(&m, tpu_allocator_system());
  CHECK(tpu_ptr_map_get(&m, 64) == NULL);
  CHECK(tpu_ptr_map_remove(&m, 64) == NULL);
  unsigned seed = 12345;
  size_t live = 0;
  for (int step = 0; step < 60000; step++) {
    seed = seed * 1103515245u + 12345u;
    size_t i = (seed >> 8) % N;
    uintptr_t key = (uintptr_t)(i + 1) * 64;
    void *value = (void *)(uintptr_t)(step * 8 + 8);
    if ((seed >> 4) & 1) {
      CHECK_OK(tpu_ptr_map_put(&m, key, value));
      if (!ref[i]) live++;
      ref[i] = value;
    } else {
      CHECK(tpu_ptr_map_remove(&m, key) == ref[i]);
      if (ref[i]) live--;
      ref[i] = NULL;
    }
    CHECK(m.count == live);
  }
  int mismatches = 0;
  for (size_t i = 0; i < N; i++) mismatches += tpu_ptr_map_get(&m, (i + 1) * 64) != ref[i];
  CHECK(mismatches == 0);
  CHECK(tpu_ptr_map_put(&m, 0, NULL) == TPU_ERR_INTERNAL);
  tpu_ptr_map_release(&m);
}

int main(void) {
  RUN(status_set_returns_code_and_message);
  RUN(status_set_can_wrap_its_own_message);
  RUN(status_long_message_is_truncated);
  RUN(status_message_is_thread_local);
  RUN(status_names);
  RUN(return_if_error_propagates);
  RUN(system_allocator_alignment);
  RUN(calloc_zeroes);
  RUN(calloc_overflow_is_clean_error);
  RUN(calloc_exhaustion_is_clean_error);
  RUN(size_arithmetic);
  RUN(format_bytes);
  RUN(ptr_map_matches_reference);
  return check_report();
}
