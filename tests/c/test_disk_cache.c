/* test_disk_cache.c: the on-disk cache stores and loads entries (graph, options with
 * their exact output aliases, extra bytes) across handles, and ignores (counting an error) missing, truncated, corrupted,
 * foreign-build and colliding files; an unwritable directory fails to open. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ir_util.h"
#include "tpu/disk_cache.h"

static tpu_graph_t *small_graph(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_shape_t s = SHAPE(2, 3);
  tpu_value_t c = tpu_graph_constant(g, TPU_F32, &s, 2.5);
  tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_MUL, x, c), NULL);
  return g;
}

static char g_dir[256];

static tpu_disk_cache_t *open_cache(uint64_t tag) {
  tpu_disk_cache_t *c = NULL;
  CHECK_OK(tpu_disk_cache_open(g_dir, tag, tpu_allocator_system(), &c));
  return c;
}

static tpu_disk_cache_stats_t stats(tpu_disk_cache_t *c) {
  tpu_disk_cache_stats_t s;
  tpu_disk_cache_get_stats(c, &s);
  return s;
}

static const char KEY[] = "key of an op";
static const char KEY2[] = "another key";

TEST(store_then_load_in_another_handle) {
  tpu_graph_t *g = small_graph();
  tpu_disk_cache_t *a = open_cache(7);
  /* exact aliases too: a warm process must compile an in-place update as one */
  const int32_t alias[3] = {0, TPU_OUTPUT_ALIAS_OVERLAP, TPU_OUTPUT_ALIAS_DISJOINT};
  tpu_compile_options_t opts = {.output_may_alias_input = 5, .disable_passes = 2,
                                .output_alias_param = alias, .num_output_alias = 3};
  CHECK_OK(tpu_disk_cache_store(a, KEY, sizeof KEY, g, &opts, "xyz", 3));
  CHECK(stats(a).writes == 1);
  tpu_disk_cache_close(a);
  tpu_disk_cache_t *b = open_cache(7);
  tpu_disk_entry_t e;
  CHECK(tpu_disk_cache_load(b, KEY, sizeof KEY, &e));
  CHECK(e.graph && tpu_graph_hash(e.graph) == tpu_graph_hash(g));
  CHECK(e.options.output_may_alias_input == 5 && e.options.disable_passes == 2);
  CHECK(e.options.num_output_alias == 3 && e.options.output_alias_param &&
        memcmp(e.options.output_alias_param, alias, sizeof alias) == 0);
  CHECK(e.extra_len == 3 && e.extra && memcmp(e.extra, "xyz", 3) == 0);
  tpu_disk_entry_free(b, &e);
  CHECK(!tpu_disk_cache_load(b, KEY2, sizeof KEY2, &e)); /* no file: a miss */
  tpu_disk_cache_stats_t s = stats(b);
  CHECK(s.hits == 1 && s.misses == 1 && s.errors == 0);
  tpu_disk_cache_close(b);
  tpu_graph_destroy(g);
}

TEST(bad_files_are_ignored_and_counted) {
  tpu_graph_t *g = small_graph();
  tpu_disk_cache_t *c = open_cache(7);
  CHECK_OK(tpu_disk_cache_store(c, KEY, sizeof KEY, g, NULL, NULL, 0));
  char path[4096], path2[4096];
  tpu_disk_cache_path(c, KEY, sizeof KEY, path, sizeof path);
  FILE *f = fopen(path, "rb");
  unsigned char buf[8192];
  size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  CHECK(n > 100 && n < sizeof buf);
  tpu_disk_entry_t e;
  /* every truncation, then a flip in each region (header, key, graph) */
  for (size_t cut = 0; cut < n; cut += 7) {
    f = fopen(path, "wb");
    fwrite(buf, 1, cut, f);
    fclose(f);
    CHECK(!tpu_disk_cache_load(c, KEY, sizeof KEY, &e));
  }
  size_t flips[] = {3, 20, 80, n - 10};
  for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
    buf[flips[i]] ^= 0x40;
    f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    CHECK(!tpu_disk_cache_load(c, KEY, sizeof KEY, &e));
    buf[flips[i]] ^= 0x40;
  }
  /* a whole, valid file under another key's name: a collision, not a hit */
  tpu_disk_cache_path(c, KEY2, sizeof KEY2, path2, sizeof path2);
  f = fopen(path2, "wb");
  fwrite(buf, 1, n, f);
  fclose(f);
  CHECK(!tpu_disk_cache_load(c, KEY2, sizeof KEY2, &e));
  /* the intact file loads again */
  f = fopen(path, "wb");
  fwrite(buf, 1, n, f);
  fclose(f);
  CHECK(tpu_disk_cache_load(c, KEY, sizeof KEY, &e));
  tpu_disk_entry_free(c, &e);
  tpu_disk_cache_stats_t s = stats(c);
  CHECK(s.hits == 1 && s.misses == 0 && s.errors > 10);
  tpu_disk_cache_close(c);
  /* another build tag never reads it (its files are named apart, and checked) */
  tpu_disk_cache_t *other = open_cache(8);
  CHECK(!tpu_disk_cache_load(other, KEY, sizeof KEY, &e));
  f = fopen(path, "rb");
  tpu_disk_cache_path(other, KEY, sizeof KEY, path2, sizeof path2);
  FILE *o = fopen(path2, "wb");
  fwrite(buf, 1, n, o);
  fclose(o);
  fclose(f);
  CHECK(!tpu_disk_cache_load(other, KEY, sizeof KEY, &e));
  CHECK(stats(other).errors == 1);
  tpu_disk_cache_close(other);
  tpu_graph_destroy(g);
}

TEST(unusable_directory_fails_to_open) {
  tpu_disk_cache_t *c = NULL;
  CHECK(tpu_disk_cache_open("/proc/no/such/dir", 1, tpu_allocator_system(), &c) != TPU_OK);
  CHECK(c == NULL);
  CHECK_CONTAINS(tpu_status_message(), "cache dir");
  CHECK(tpu_disk_cache_open("", 1, tpu_allocator_system(), &c) != TPU_OK);
  /* nested directories are created */
  char nested[512];
  snprintf(nested, sizeof nested, "%s/a/b/", g_dir);
  CHECK_OK(tpu_disk_cache_open(nested, 1, tpu_allocator_system(), &c));
  tpu_disk_cache_close(c);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/tpu_disk_cache_test_XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  RUN(store_then_load_in_another_handle);
  RUN(bad_files_are_ignored_and_counted);
  RUN(unusable_directory_fails_to_open);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return check_report();
}
