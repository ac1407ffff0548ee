/* test_cost_oom.c: allocation tags in the caching allocator, which out-of-memory reports
 * use to name the largest live tensors and the ops that created them. */
#include <string.h>

#include "check.h"
#include "tpu/caching_allocator.h"

TEST(largest_live_blocks_keep_their_tags) {
  tpu_hbm_t *hbm = NULL;
  tpu_caching_allocator_t *ca = NULL;
  CHECK_OK(tpu_hbm_create(64u << 20, tpu_allocator_system(), &hbm));
  CHECK_OK(tpu_caching_allocator_create(hbm, 0, tpu_allocator_system(), &ca));
  tpu_alloc_tag_t mm = {.op = "aten::mm", .dtype = "f32", .rank = 2, .dims = {1024, 2048}};
  tpu_alloc_tag_t add = {.op = "aten::add.Tensor", .dtype = "bf16", .rank = 1, .dims = {7}};
  void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  CHECK_OK(tpu_caching_alloc_tagged(ca, 8u << 20, &mm, &a));
  CHECK_OK(tpu_caching_alloc_tagged(ca, 14, &add, &b));
  CHECK_OK(tpu_caching_alloc(ca, 2u << 20, &c));  /* untagged */
  CHECK_OK(tpu_caching_alloc_tagged(ca, 4u << 20, &mm, &d));
  tpu_caching_free(ca, d);                         /* freed: not live */
  tpu_live_block_t top[2];
  CHECK(tpu_caching_largest_live(ca, top, 2) == 2);
  CHECK(top[0].ptr == a && top[0].requested == (8u << 20));
  CHECK(strcmp(top[0].tag.op, "aten::mm") == 0 && top[0].tag.rank == 2 &&
        top[0].tag.dims[1] == 2048);
  CHECK(top[1].ptr == c && top[1].tag.op == NULL && top[1].tag.rank == -1);
  tpu_live_block_t all[8];
  CHECK(tpu_caching_largest_live(ca, all, 8) == 3);
  CHECK(all[2].ptr == b && strcmp(all[2].tag.dtype, "bf16") == 0);
  /* a cached block reused for a new tagged request takes the new tag */
  void *e = NULL;
  CHECK_OK(tpu_caching_alloc_tagged(ca, 4u << 20, &add, &e));
  CHECK(e == d);
  CHECK(tpu_caching_largest_live(ca, all, 8) == 4);
  CHECK(all[1].ptr == e && strcmp(all[1].tag.op, "aten::add.Tensor") == 0);
  /* an untagged block takes the op of the kernel that fills it; a tagged one keeps its own */
  tpu_caching_set_tag_op(ca, c, "aten::add.out");
  tpu_caching_set_tag_op(ca, a, "aten::add.out");
  tpu_caching_set_tag_op(ca, NULL, "aten::add.out");
  CHECK(tpu_caching_largest_live(ca, all, 8) == 4);
  CHECK(strcmp(all[0].tag.op, "aten::mm") == 0 && strcmp(all[2].tag.op, "aten::add.out") == 0);
  tpu_caching_free(ca, a);
  tpu_caching_free(ca, b);
  tpu_caching_free(ca, c);
  tpu_caching_free(ca, e);
  CHECK(tpu_caching_largest_live(ca, all, 8) == 0);
  tpu_caching_allocator_destroy(ca);
  tpu_hbm_destroy(hbm);
}

int main(void) {
  RUN(largest_live_blocks_keep_their_tags);
  return check_report();
}
