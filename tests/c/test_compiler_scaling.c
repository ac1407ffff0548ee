/* test_compiler_scaling.c: compile time grows linearly with graph size.
 *
 * Builds graphs of B and 4B transformer-like blocks (layer norm, matmuls with bias and
 * activation, softmax, residual adds, reshapes and transposes, duplicated subexpressions
 * and dead code for the passes to remove), compiles each with every pass on (thread CPU
 * time, best of 15 interleaved runs, since the machine is shared) and checks that 4x the
 * nodes costs well under 16x the time (a quadratic pass would): the ratio must stay
 * below 8 (about 3.7 is measured). The sizes (about 150 and 560 nodes) keep both graphs'
 * working sets in the core's L2: past that the per-node time grows with cache misses and
 * page faults, not with an algorithm (callgrind counts 4.95M and 19.7M instructions for
 * three compiles of 283 and 1123 nodes: 3.98x; bench/compile_passes.c prints larger
 * sizes). Prints the numbers.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ir/graph_internal.h"
#include "compile_util.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: a busy machine preempts, it does not bill us */
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static tpu_value_t bc(tpu_graph_t *g, tpu_value_t x, tpu_shape_t s, int64_t d) {
  int64_t dims[1] = {d};
  return tpu_graph_broadcast_in_dim(g, x, &s, dims);
}

static tpu_value_t matmul(tpu_graph_t *g, tpu_value_t a, tpu_value_t w) {
  tpu_dot_attrs_t da;
  memset(&da, 0, sizeof da);
  da.num_contract = 1;
  da.lhs_contract[0] = 1;
  da.rhs_contract[0] = 0;
  return tpu_graph_dot_general(g, a, w, &da, TPU_F32);
}

/* One block over h: f32[T, C] (T = 16, C = 32). */
static tpu_value_t block(tpu_graph_t *g, tpu_value_t h, tpu_value_t w, tpu_value_t bias) {
  const int64_t T = 16, C = 32;
  tpu_shape_t s = SHAPE(T, C), r = SHAPE(T), tt = SHAPE(T, T);
  bool last[2] = {false, true};
  tpu_value_t inv = tpu_graph_broadcast_in_dim(g, tpu_graph_constant(g, TPU_F32, &(tpu_shape_t){0}, 1.0 / 32), &r, NULL);
  tpu_value_t mean = tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_reduce(g, TPU_REDUCE_SUM, h, last), inv);
  tpu_value_t xc = tpu_graph_binary(g, TPU_OP_SUB, h, bc(g, mean, s, 0));
  tpu_value_t var = tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_reduce(g, TPU_REDUCE_SUM, tpu_graph_binary(g, TPU_OP_MUL, xc, xc), last), inv);
  tpu_value_t rstd = tpu_graph_unary(g, TPU_OP_RSQRT, var);
  tpu_value_t ln = tpu_graph_binary(g, TPU_OP_MUL, xc, bc(g, rstd, s, 0));
  tpu_value_t y = matmul(g, ln, w);
  y = tpu_graph_binary(g, TPU_OP_ADD, y, bc(g, bias, s, 1));
  y = tpu_graph_unary(g, TPU_OP_TANH, y);
  /* attention-ish scores: y @ y^T, softmax */
  int64_t perm[2] = {1, 0};
  tpu_value_t yt = tpu_graph_transpose(g, tpu_graph_transpose(g, tpu_graph_transpose(g, y, perm), perm), perm);
  tpu_value_t sc = matmul(g, y, yt);
  tpu_value_t m = tpu_graph_reduce(g, TPU_REDUCE_MAX, sc, last);
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, tpu_graph_binary(g, TPU_OP_SUB, sc, bc(g, m, tt, 0)));
  tpu_value_t e2 = tpu_graph_unary(g, TPU_OP_EXP, tpu_graph_binary(g, TPU_OP_SUB, sc, bc(g, m, tt, 0))); /* CSE */
  tpu_value_t p = tpu_graph_binary(g, TPU_OP_DIV, e, bc(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, e2, last), tt, 0));
  tpu_value_t a = matmul(g, p, y);
  tpu_graph_unary(g, TPU_OP_LOG, a); /* dead */
  tpu_shape_t flat = SHAPE(T * C);
  tpu_value_t back = tpu_graph_reshape(g, tpu_graph_reshape(g, a, &flat), &s);
  return tpu_graph_binary(g, TPU_OP_ADD, h, back);
}

static tpu_graph_t *model(int blocks) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t h = ir_param(g, TPU_F32, SHAPE(16, 32));
  tpu_value_t w = ir_param(g, TPU_F32, SHAPE(32, 32));
  tpu_value_t b = ir_param(g, TPU_F32, SHAPE(32));
  for (int i = 0; i < blocks; i++) h = block(g, h, w, b);
  CHECK_OK(tpu_graph_output(g, h, NULL));
  return g;
}

static double best_compile_s(const tpu_graph_t *g, int reps) {
  double best = 1e9;
  for (int i = 0; i < reps; i++) {
    double t0 = now_s();
    tpu_executable_t *e = cu_compile(g, 0);
    double t = now_s() - t0;
    tpu_executable_release(e);
    if (t < best) best = t;
  }
  return best;
}

TEST(compile_time_is_linear_in_graph_size) {
  const int B = 4;
  tpu_graph_t *small = model(B), *big = model(4 * B);
  int n1 = tpu_graph_num_nodes(small), n4 = tpu_graph_num_nodes(big);
  best_compile_s(small, 1); /* warm up */
  /* interleaved, best of 15 each: a busy neighbour slows both, not one */
  double t1 = 1e9, t4 = 1e9;
  for (int i = 0; i < 15; i++) {
    double a = best_compile_s(small, 1), b = best_compile_s(big, 1);
    if (a < t1) t1 = a;
    if (b < t4) t4 = b;
  }
  tpu_executable_t *e = cu_compile(big, 0), *plain = cu_compile(big, TPU_PASS_ALL);
  if (e && plain) {
    tpu_pass_stats_t st;
    tpu_executable_pass_stats(e, &st);
    printf("  compile %d nodes: %.2f ms; %d nodes: %.2f ms (ratio %.2f for 4x the nodes)\n", n1,
           t1 * 1e3, n4, t4 * 1e3, t4 / t1);
    printf("  %d nodes -> %d after passes (simplified %d, folded %d, merged %d, removed %d); "
           "%d kernels fused vs %d unfused; scratch %zu B planned, %zu B unplanned\n",
           st.nodes_in, st.nodes_out, st.simplified, st.folded, st.merged, st.removed,
           tpu_executable_num_kernels(e), tpu_executable_num_kernels(plain),
           tpu_executable_scratch_bytes(e), tpu_executable_unplanned_bytes(e));
    CHECK(st.removed > 0 && st.merged > 0 && st.simplified > 0);
    CHECK(tpu_executable_num_kernels(e) < tpu_executable_num_kernels(plain));
    CHECK(tpu_executable_scratch_bytes(e) < tpu_executable_unplanned_bytes(e));
  }
  tpu_executable_release(e);
  tpu_executable_release(plain);
  CHECK(t4 / t1 < 8.0);
  tpu_graph_destroy(small);
  tpu_graph_destroy(big);
}

TEST(scaled_model_runs_like_the_unoptimized_one) {
  tpu_graph_t *g = model(3);
  tpu_executable_t *a = cu_compile(g, 0), *b = cu_compile(g, TPU_PASS_ALL);
  if (a && b) {
    cu_run_t ra, rb;
    cu_execute(g, a, 3, NULL, &ra);
    cu_execute(g, b, 3, NULL, &rb);
    /* reductions of fused operands keep the unfused order here: bit for bit */
    CHECK(cu_diff_outputs(&ra, &rb) == 0);
    cu_free(&ra);
    cu_free(&rb);
  }
  tpu_executable_release(a);
  tpu_executable_release(b);
  tpu_graph_destroy(g);
}

int main(void) {
  RUN(compile_time_is_linear_in_graph_size);
  RUN(scaled_model_runs_like_the_unoptimized_one);
  return check_report();
}
