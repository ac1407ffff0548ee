/* test_compiler_memory.c: memory planning (src/compiler/plan_memory.c) and the compiler's
 * use of outputs as arenas (compile.c).
 *
 * Structure: tpu_plan_memory on hand-made lifetimes (the places and offsets it gives are
 * checked, not only the peak): the largest buffer goes first, so a small dead buffer's gap
 * is not wasted; arenas take only buffers that die before the arena's first write, fit in
 * it (the last one by the bytes it touches) and need no more alignment than its element;
 * thousands of buffers alive at once fall back to first fit. Then compiled graphs: an
 * unfused chain whose output is written last keeps the chain's intermediates in that output
 * (a smaller scratch block, the same bits as when the output may alias an input and so
 * cannot hold them), and a run whose outputs overlap is refused with an error naming why.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile_util.h"
#include "compiler/plan_memory.h"

static tpu_pool_t *g_pool;

static plan_buffer_t buf(size_t bytes, size_t used, size_t elem, int first, int last) {
  return (plan_buffer_t){.bytes = bytes, .used = used, .elem_bytes = elem, .first = first,
                         .last = last};
}

TEST(largest_first_leaves_no_gap_unused) {
  /* program-order first fit puts c above b (a's 64 dead bytes are too few): 256 B */
  plan_buffer_t b[3] = {buf(64, 64, 4, 0, 1), buf(64, 64, 4, 0, 3), buf(128, 128, 4, 2, 3)};
  size_t peak = 0, total = 0;
  CHECK_OK(tpu_plan_memory(b, 3, NULL, 0, tpu_allocator_system(), &peak, &total));
  CHECK(peak == 192 && total == 256);
  CHECK(b[2].arena == -1 && b[2].offset == 0);
  CHECK(b[0].arena == -1 && b[0].offset == 0); /* shares c's bytes: their lifetimes do not meet */
  CHECK(b[1].arena == -1 && b[1].offset == 128);
}

TEST(arenas_take_what_dies_before_their_first_write) {
  plan_arena_t arena = {.bytes = 228, .elem_bytes = 4, .free_until = 5};
  plan_buffer_t b[5] = {/* in the order they are written */
      buf(128, 128, 4, 0, 2),
      buf(64, 64, 8, 0, 1),   /* needs 8-byte alignment: stays out */
      buf(512, 512, 4, 0, 0), /* larger than the arena */
      buf(128, 100, 4, 1, 4), /* ends at 228: fits by the bytes it touches */
      buf(64, 64, 4, 3, 5),   /* read at the arena's first write: stays out */
  };
  size_t peak = 0, total = 0;
  CHECK_OK(tpu_plan_memory(b, 5, &arena, 1, tpu_allocator_system(), &peak, &total));
  CHECK(b[0].arena == 0 && b[0].offset == 0);
  CHECK(b[3].arena == 0 && b[3].offset == 128);
  CHECK(b[1].arena == -1 && b[2].arena == -1 && b[4].arena == -1);
  CHECK(b[2].offset == 0 && b[4].offset == 0 && b[1].offset == 512);
  CHECK(peak == 576 && total == 896);
  /* one byte less and the fourth buffer does not fit there */
  arena.bytes = 227;
  CHECK_OK(tpu_plan_memory(b, 5, &arena, 1, tpu_allocator_system(), &peak, &total));
  CHECK(b[0].arena == 0 && b[3].arena == -1);
}

TEST(thousands_alive_at_once_fall_back_to_first_fit) {
  enum { N = 1600 }; /* 1.28M overlapping pairs: past the lists' limit */
  plan_buffer_t *b = calloc(N, sizeof *b);
  CHECK(b != NULL);
  if (!b) return;
  for (int i = 0; i < N; i++) b[i] = buf(64, 64, 4, i, N);
  size_t peak = 0, total = 0;
  CHECK_OK(tpu_plan_memory(b, N, NULL, 0, tpu_allocator_system(), &peak, &total));
  CHECK(peak == (size_t)N * 64 && total == (size_t)N * 64);
  bool *used = calloc(N, sizeof *used); /* all alive at N: every offset distinct */
  int clashes = 0;
  for (int i = 0; used && i < N; i++) {
    size_t slot = b[i].offset / 64;
    if (b[i].offset % 64 || slot >= N || used[slot]) clashes++;
    else used[slot] = true;
  }
  CHECK(used != NULL && clashes == 0);
  free(used);
  free(b);
}

/* out0 = sin(cos(exp(x)) * 2) + x, out1 = exp(x) * 3, x f32[N]: unfused, the chain's
 * intermediates die before the outputs' steps */
static tpu_graph_t *chain(int64_t n) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(n), sc = {0};
  tpu_value_t x = ir_param(g, TPU_F32, s);
  tpu_value_t two = tpu_graph_broadcast_in_dim(g, tpu_graph_constant(g, TPU_F32, &sc, 2.0), &s, NULL);
  tpu_value_t three = tpu_graph_broadcast_in_dim(g, tpu_graph_constant(g, TPU_F32, &sc, 3.0), &s, NULL);
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, x);
  tpu_value_t c = tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_unary(g, TPU_OP_COS, e), two);
  tpu_value_t out0 = tpu_graph_binary(g, TPU_OP_ADD, tpu_graph_unary(g, TPU_OP_SIN, c), x);
  CHECK_OK(tpu_graph_output(g, out0, NULL));
  CHECK_OK(tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_MUL, e, three), NULL));
  return g;
}

TEST(an_output_written_last_holds_the_intermediates) {
  tpu_graph_t *g = chain(4096);
  tpu_executable_t *in_out = cu_compile_aliased(g, NULL, 0, 0, TPU_PASS_ALL);
  tpu_executable_t *aliased = cu_compile_aliased(g, NULL, 0, 1, TPU_PASS_ALL); /* out0 may alias */
  if (in_out && aliased) {
    char *t = NULL;
    CHECK_OK(tpu_executable_describe(in_out, tpu_allocator_system(), &t, NULL));
    printf("  scratch %zu B with the outputs as arenas, %zu B when out0 may alias the input\n%s",
           tpu_executable_scratch_bytes(in_out), tpu_executable_scratch_bytes(aliased), t);
    /* out1 (written last) holds cos and sin, out0 (written before out1) the product */
    CHECK_CONTAINS(t, "COS f32[4096] -> output 1\n4: MUL f32[4096] -> output 0\n5: SIN");
    tpu_allocator_free(tpu_allocator_system(), t);
    CHECK(tpu_executable_scratch_bytes(in_out) < tpu_executable_scratch_bytes(aliased));
    cu_run_t a, b;
    cu_execute(g, in_out, 7, g_pool, &a);
    cu_execute(g, aliased, 7, g_pool, &b);
    CHECK(cu_diff_outputs(&a, &b) == 0);
    /* the same buffer as both outputs: refused before any step runs */
    void *outs[2] = {a.out[0], a.out[0]};
    size_t sb = tpu_executable_scratch_bytes(in_out);
    void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
    tpu_status_t st = tpu_executable_run(in_out, a.in, outs, scratch, g_pool);
    CHECK(st == TPU_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(tpu_status_message(), "outputs overlap");
    free(scratch);
    cu_free(&a);
    cu_free(&b);
  }
  tpu_executable_release(in_out);
  tpu_executable_release(aliased);
  tpu_graph_destroy(g);
}

int main(void) {
  CHECK_OK(tpu_pool_create(2, tpu_allocator_system(), &g_pool));
  RUN(largest_first_leaves_no_gap_unused);
  RUN(arenas_take_what_dies_before_their_first_write);
  RUN(thousands_alive_at_once_fall_back_to_first_fit);
  RUN(an_output_written_last_holds_the_intermediates);
  tpu_pool_destroy(g_pool);
  return check_report();
}
