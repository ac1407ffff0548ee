/* cost_hooks.c: what the cost model and the OOM attribution add to one eager op's host path
 * (ns per call, best of 9 runs of 1M calls; robust on a loaded machine, unlike an A/B of
 * whole-op dispatch times):
 *   - tpu_cost_launch (detail off): per launch;
 *   - tpu_caching_alloc_tagged + free vs tpu_caching_alloc + free: per allocation;
 *   - tpu_caching_set_tag_op: per op whose output a composite kernel allocated first.
 * Build: cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/cost_hooks.c build/release/libtpu.a -lpthread -lm -o build/cost_hooks
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tpu/caching_allocator.h"
#include "tpu/cost.h"

#define N 1000000

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
  tpu_graph_t *g = NULL;
  tpu_graph_create(tpu_allocator_system(), &g);
  tpu_shape_t s = {.rank = 1, .dims = {8}};
  tpu_value_t x = tpu_graph_parameter(g, TPU_F32, &s, NULL);
  tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_ADD, x, x), NULL);
  tpu_cost_entry_t *e = NULL;
  if (tpu_cost_entry_create(g, "aten::add.out", &e) != TPU_OK) return 1;
  tpu_hbm_t *hbm = NULL;
  tpu_caching_allocator_t *ca = NULL;
  tpu_hbm_create(1u << 30, tpu_allocator_system(), &hbm);
  tpu_caching_allocator_create(hbm, 0, tpu_allocator_system(), &ca);
  tpu_alloc_tag_t tag = {.op = "aten::add.out", .dtype = "Float", .rank = 1, .dims = {8}};
  double best[4] = {1e9, 1e9, 1e9, 1e9};
  for (int rep = 0; rep < 9; rep++) {
    double t = now();
    for (int i = 0; i < N; i++) tpu_cost_launch(0, e);
    double d = (now() - t) / N * 1e9;
    if (d < best[0]) best[0] = d;
    void *p;
    t = now();
    for (int i = 0; i < N; i++) {
      tpu_caching_alloc(ca, 32, &p);
      tpu_caching_free(ca, p);
    }
    d = (now() - t) / N * 1e9;
    if (d < best[1]) best[1] = d;
    t = now();
    for (int i = 0; i < N; i++) {
      tpu_caching_alloc_tagged(ca, 32, &tag, &p);
      tpu_caching_free(ca, p);
    }
    d = (now() - t) / N * 1e9;
    if (d < best[2]) best[2] = d;
    tpu_caching_alloc(ca, 32, &p);
    t = now();
    for (int i = 0; i < N; i++) tpu_caching_set_tag_op(ca, p, "aten::add.out");
    d = (now() - t) / N * 1e9;
    if (d < best[3]) best[3] = d;
    tpu_caching_free(ca, p);
  }
  printf("tpu_cost_launch (detail off)        %6.1f ns\n", best[0]);
  printf("alloc + free, untagged              %6.1f ns\n", best[1]);
  printf("alloc + free, tagged                %6.1f ns  (+%.1f)\n", best[2], best[2] - best[1]);
  printf("tpu_caching_set_tag_op              %6.1f ns\n", best[3]);
  tpu_caching_allocator_destroy(ca);
  tpu_hbm_destroy(hbm);
  tpu_graph_destroy(g);
  return 0;
}
