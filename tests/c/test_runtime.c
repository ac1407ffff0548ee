/* test_runtime.c: configuration parsing, init (explicit and from the environment,
 * idempotent, thread-safe), devices, pointer lookup, errors, shutdown, and when waiting
 * threads may help the chips' kernels. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tpu/runtime.h"

#define GIB (1024ull * 1024 * 1024)

TEST(config_defaults) {
  tpu_runtime_config_t c;
  CHECK_OK(tpu_runtime_config_parse(NULL, NULL, &c));
  CHECK(c.chip && c.chip->gen == TPU_CHIP_V5E);
  CHECK(c.chip_count == 1 && c.topology_ndim == 1 && c.topology[0] == 1);
  CHECK_OK(tpu_runtime_config_parse("", "", &c));
  CHECK(c.chip->gen == TPU_CHIP_V5E && c.chip_count == 1);
}

TEST(config_topologies) {
  struct {
    const char *chip, *chips;
    tpu_chip_gen_t gen;
    int count, ndim, dims[3];
  } cases[] = {
      {"v5p", "2", TPU_CHIP_V5P, 2, 1, {2, 1, 1}},
      {"V6E", "2x4", TPU_CHIP_V6E, 8, 2, {2, 4, 1}},
      {"v4", "2x2x4", TPU_CHIP_V4, 16, 3, {2, 2, 4}},
      {"tpu7x", "4X4X4", TPU_CHIP_V7, 64, 3, {4, 4, 4}},
      {"v5e", "64", TPU_CHIP_V5E, 64, 1, {64, 1, 1}},
      {"v5litepod", "1x1", TPU_CHIP_V5E, 1, 2, {1, 1, 1}},
      {"v5e", "08", TPU_CHIP_V5E, 8, 1, {8, 1, 1}},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    tpu_runtime_config_t c;
    CHECK_OK(tpu_runtime_config_parse(cases[i].chip, cases[i].chips, &c));
    CHECK(c.chip && c.chip->gen == cases[i].gen);
    CHECK(c.chip_count == cases[i].count && c.topology_ndim == cases[i].ndim);
    for (int d = 0; d < 3; d++) CHECK(c.topology[d] == cases[i].dims[d]);
  }
}

TEST(config_errors) {
  tpu_runtime_config_t c;
  memset(&c, 0x5a, sizeof(c));
  tpu_runtime_config_t untouched = c;
  CHECK(tpu_runtime_config_parse("v9", NULL, &c) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(tpu_status_message(),
               "TORCHTPU_CHIP=\"v9\": unknown TPU generation; valid: v4, v5e, v5p, v6e, v7") == 0);
  CHECK(memcmp(&c, &untouched, sizeof(c)) == 0);
  CHECK(tpu_runtime_config_parse("v5e", "0", &c) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(tpu_status_message(), "TORCHTPU_CHIPS=\"0\": expected a chip count 1..64 or a "
                                     "topology such as 2x4") == 0);
  const char *bad[] = {"65", "-1", "abc", "2x", "x2", "2x0", "0x4", "2xx2", "2x2x2x2",
                       "8x16", "4x4x5", "1.5", " 2", "2 ", "2*4", "+3",
                       "99999999999999999999999", "3x99999999999999999999"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    tpu_status_t st = tpu_runtime_config_parse(NULL, bad[i], &c);
    CHECK(st == TPU_ERR_INVALID_ARGUMENT);
    if (st != TPU_ERR_INVALID_ARGUMENT) fprintf(stderr, "  accepted \"%s\"\n", bad[i]);
    char expect[128];
    snprintf(expect, sizeof(expect), "TORCHTPU_CHIPS=\"%s\"", bad[i]);
    CHECK_CONTAINS(tpu_status_message(), expect);
    CHECK_CONTAINS(tpu_status_message(), "expected a chip count 1..64 or a topology such as 2x4");
  }
  CHECK(memcmp(&c, &untouched, sizeof(c)) == 0);
  CHECK(tpu_runtime_config_parse(NULL, "8x16", &c) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "more than 64 chips");
  CHECK(tpu_runtime_config_parse(NULL, "2x2x2x2", &c) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "at most 3 dimensions");
}

TEST(nothing_before_init) {
  CHECK(tpu_device_count() == 0);
  CHECK(tpu_runtime_config() == NULL);
  tpu_device_t *d = (tpu_device_t *)1;
  CHECK(tpu_device_get(0, &d) == TPU_ERR_OUT_OF_RANGE);
  CHECK(d == NULL);
  CHECK_CONTAINS(tpu_status_message(), "tpu:0 does not exist");
  int x;
  CHECK(tpu_device_of_ptr(&x) == -1);
  CHECK_OK(tpu_runtime_synchronize_all());
  tpu_runtime_shutdown(); /* harmless */
}

static tpu_status_t fail_run(void *arg) {
  (void)arg;
  return tpu_status_set(TPU_ERR_DEVICE, "kernel trap");
}

typedef struct free_arg {
  tpu_caching_allocator_t *ca;
  void *ptr;
} free_arg_t;

static tpu_status_t free_on_stream(void *arg) {
  free_arg_t *f = arg;
  tpu_caching_free(f->ca, f->ptr);
  return TPU_OK;
}

TEST(two_v5p_chips) {
  tpu_runtime_config_t c;
  CHECK_OK(tpu_runtime_config_parse("v5p", "2", &c));
  CHECK_OK(tpu_runtime_init_with_config(&c));
  CHECK(tpu_device_count() == 2);
  const tpu_runtime_config_t *active = tpu_runtime_config();
  CHECK(active && active->chip_count == 2 && active->chip->gen == TPU_CHIP_V5P);
  tpu_device_t *d[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    CHECK_OK(tpu_device_get(i, &d[i]));
    if (!d[i]) return;
    CHECK(tpu_device_index(d[i]) == i);
    CHECK(tpu_device_spec(d[i])->gen == TPU_CHIP_V5P);
    CHECK(tpu_hbm_capacity(tpu_device_hbm(d[i])) == 95 * GIB);
    CHECK(tpu_device_allocator(d[i]) && tpu_device_stream(d[i]));
  }
  /* Memory: each pointer maps back to its chip. */
  void *p0, *p1;
  CHECK_OK(tpu_caching_alloc(tpu_device_allocator(d[0]), 1 << 20, &p0));
  CHECK_OK(tpu_caching_alloc(tpu_device_allocator(d[1]), 1 << 20, &p1));
  CHECK(tpu_device_of_ptr(p0) == 0 && tpu_device_of_ptr(p1) == 1);
  CHECK(tpu_device_of_ptr((char *)p1 + 100) == 1);
  int x;
  CHECK(tpu_device_of_ptr(&x) == -1 && tpu_device_of_ptr(NULL) == -1);
  /* Out of memory names the chip. */
  void *huge;
  CHECK(tpu_caching_alloc(tpu_device_allocator(d[1]), 96 * GIB, &huge) == TPU_ERR_OUT_OF_MEMORY);
  CHECK_CONTAINS(tpu_status_message(), "tpu:1 out of memory: tried to allocate 96.00 GiB");
  CHECK_CONTAINS(tpu_status_message(), "95.00 GiB total HBM (TPU v5p)");
  /* Out-of-range indices. */
  tpu_device_t *none;
  CHECK(tpu_device_get(2, &none) == TPU_ERR_OUT_OF_RANGE);
  CHECK(strcmp(tpu_status_message(),
               "tpu:2 does not exist; this process has 2 chips (TORCHTPU_CHIPS=2)") == 0);
  CHECK(tpu_device_get(-1, &none) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "tpu:-1 does not exist");
  /* Stream errors name the chip and surface at synchronize_all. */
  tpu_task_t bad = {fail_run, NULL, NULL, "all_reduce"};
  CHECK_OK(tpu_stream_enqueue(tpu_device_stream(d[1]), &bad));
  CHECK(tpu_runtime_synchronize_all() == TPU_ERR_DEVICE);
  CHECK(strcmp(tpu_status_message(), "all_reduce failed on tpu:1: kernel trap") == 0);
  CHECK_OK(tpu_runtime_synchronize_all());
  /* Already initialized: init_with_config refuses, init returns the first result. */
  CHECK(tpu_runtime_init_with_config(&c) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "already initialized");
  CHECK_OK(tpu_runtime_init());
  CHECK(tpu_device_count() == 2);
  /* Shutdown runs queued work (which frees memory) and frees everything. */
  static free_arg_t fa;
  fa.ca = tpu_device_allocator(d[0]);
  fa.ptr = p0;
  tpu_task_t free_task = {free_on_stream, NULL, &fa, "free"};
  CHECK_OK(tpu_stream_enqueue(tpu_device_stream(d[0]), &free_task));
  tpu_runtime_shutdown();
  CHECK(tpu_device_count() == 0 && tpu_runtime_config() == NULL);
  CHECK(tpu_device_of_ptr(p1) == -1);
}

TEST(init_from_environment_remembers_the_first_result) {
  setenv("TORCHTPU_CHIP", "v9", 1);
  unsetenv("TORCHTPU_CHIPS");
  CHECK(tpu_runtime_init() == TPU_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(tpu_status_message(),
               "TORCHTPU_CHIP=\"v9\": unknown TPU generation; valid: v4, v5e, v5p, v6e, v7") == 0);
  setenv("TORCHTPU_CHIP", "v5e", 1);
  tpu_status_clear();
  CHECK(tpu_runtime_init() == TPU_ERR_INVALID_ARGUMENT); /* same result and message */
  CHECK_CONTAINS(tpu_status_message(), "TORCHTPU_CHIP=\"v9\"");
  CHECK(tpu_device_count() == 0);
  tpu_runtime_shutdown(); /* forgets the failure */

  setenv("TORCHTPU_CHIP", "v6e", 1);
  setenv("TORCHTPU_CHIPS", "2x2", 1);
  CHECK_OK(tpu_runtime_init());
  CHECK(tpu_device_count() == 4);
  const tpu_runtime_config_t *c = tpu_runtime_config();
  CHECK(c && c->chip->gen == TPU_CHIP_V6E && c->topology_ndim == 2);
  tpu_device_t *none;
  CHECK(tpu_device_get(4, &none) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "this process has 4 chips (TORCHTPU_CHIPS=2x2)");
  tpu_runtime_shutdown();

  setenv("TORCHTPU_CHIPS", "0", 1);
  CHECK(tpu_runtime_init() == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "TORCHTPU_CHIPS=\"0\": expected a chip count 1..64");
  tpu_runtime_shutdown();
  unsetenv("TORCHTPU_CHIP");
  unsetenv("TORCHTPU_CHIPS");
}

static void *init_in_thread(void *arg) {
  *(tpu_status_t *)arg = tpu_runtime_init();
  return NULL;
}

TEST(concurrent_init_creates_devices_once) {
  setenv("TORCHTPU_CHIPS", "3", 1);
  pthread_t t[8];
  tpu_status_t st[8];
  for (int i = 0; i < 8; i++) CHECK(pthread_create(&t[i], NULL, init_in_thread, &st[i]) == 0);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 8; i++) CHECK(st[i] == TPU_OK);
  CHECK(tpu_device_count() == 3);
  tpu_device_t *d;
  CHECK_OK(tpu_device_get(0, &d));
  CHECK(d && tpu_device_spec(d)->gen == TPU_CHIP_V5E);
  tpu_runtime_shutdown();
  unsetenv("TORCHTPU_CHIPS");
}

TEST(sixty_four_v7_chips) {
  /* 64 x 192 GiB = 12 TiB of address space, committed only when touched. */
  tpu_runtime_config_t c;
  CHECK_OK(tpu_runtime_config_parse("v7", "4x4x4", &c));
  CHECK_OK(tpu_runtime_init_with_config(&c));
  CHECK(tpu_device_count() == 64);
  for (int i = 0; i < tpu_device_count(); i += 9) {
    tpu_device_t *d;
    CHECK_OK(tpu_device_get(i, &d));
    if (!d) continue;
    void *p;
    CHECK_OK(tpu_caching_alloc(tpu_device_allocator(d), 150 * GIB, &p));
    CHECK(tpu_device_of_ptr(p) == i);
    memset(p, 1, 4096);
  }
  tpu_runtime_shutdown(); /* also frees the live blocks */
  CHECK(tpu_device_count() == 0);
}

/* A chip's waiters help its kernels, and its idle worker spins, only while every stream and
 * the waiter have a core. */
static void check_helping(const char *chips, bool allowed) {
  tpu_runtime_config_t c;
  CHECK_OK(tpu_runtime_config_parse("v5e", chips, &c));
  tpu_runtime_set_helping(allowed);
  CHECK_OK(tpu_runtime_init_with_config(&c));
  tpu_pool_t *pool = NULL;
  CHECK_OK(tpu_pool_default(&pool));
  bool spare = c.chip_count + 1 <= sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 0; i < c.chip_count; i++) {
    tpu_device_t *d = NULL;
    CHECK_OK(tpu_device_get(i, &d));
    CHECK(tpu_stream_helper_pool(tpu_device_stream(d)) == (allowed && spare ? pool : NULL));
    CHECK(tpu_stream_idle_spin(tpu_device_stream(d)) == (allowed && spare));
  }
  if (allowed && c.chip_count == 1 && spare) { /* turned off (a process group) and on again */
    tpu_device_t *d = NULL;
    CHECK_OK(tpu_device_get(0, &d));
    tpu_runtime_set_helping(false);
    CHECK(tpu_stream_helper_pool(tpu_device_stream(d)) == NULL);
    CHECK(!tpu_stream_idle_spin(tpu_device_stream(d)));
    tpu_runtime_set_helping(true);
    CHECK(tpu_stream_helper_pool(tpu_device_stream(d)) == pool);
    CHECK(tpu_stream_idle_spin(tpu_device_stream(d)));
  }
  tpu_runtime_shutdown();
  tpu_runtime_set_helping(true);
}

TEST(waiters_help_only_with_a_spare_core) {
  check_helping("1", true);
  check_helping("1", false);
  check_helping("64", true); /* more chips than cores */
}

int main(void) {
  RUN(config_defaults);
  RUN(config_topologies);
  RUN(config_errors);
  RUN(nothing_before_init);
  RUN(two_v5p_chips);
  RUN(init_from_environment_remembers_the_first_result);
  RUN(concurrent_init_creates_devices_once);
  RUN(sixty_four_v7_chips);
  RUN(waiters_help_only_with_a_spare_core);
  return check_report();
}
