/* test_compiler_alias.c: outputs that update a parameter in place
 * (tpu_compile_options_t.output_alias_param).
 *
 * Structure: each graph is compiled with exact aliases and run with every aliased output's
 * buffer being its parameter's buffer; the program (kernels, COPY steps in
 * tpu_executable_describe) and the numbers (bit for bit against the same graph compiled
 * without aliases into separate buffers) are checked. Shapes are large enough that the
 * elementwise kernels split over the pool's threads. Cases: SGD (p -= lr * g) fused and
 * unfused, readers of the old value after the update (a reduction, the parameter itself as
 * another output), reads that are not at the written elements (a transpose, a matmul
 * epilogue, a row-wise tail), an AdamW-like chain with three in-place outputs, an
 * unchanged parameter, swapped and transposed parameters (staged through scratch), 70
 * outputs told disjoint or overlapping one by one (past the 64-bit mask), and claims the
 * compiler must refuse (wrong shape, out of range, two outputs on one parameter).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile_util.h"

static tpu_pool_t *g_pool;

#define ROWS 1030
#define COLS 257 /* 264710 elements: more than two TPU_EW_GRAIN chunks, and steps too big to run
                   * beside others (src/compiler/deps.c), so the kernels split over the pool */

static tpu_value_t bcast(tpu_graph_t *g, tpu_value_t x, tpu_shape_t s, const int64_t *dims) {
  return tpu_graph_broadcast_in_dim(g, x, &s, dims);
}

/* A rank-0 f32 parameter broadcast to |s| (a capturable optimizer's tensor scalar). */
static tpu_value_t scalar_param(tpu_graph_t *g, tpu_shape_t s) {
  int64_t none[1] = {0};
  return bcast(g, ir_param(g, TPU_F32, SCALAR), s, none);
}

static tpu_value_t splat(tpu_graph_t *g, double v, tpu_shape_t s) {
  tpu_shape_t sc = SCALAR;
  int64_t none[1] = {0};
  return bcast(g, tpu_graph_constant(g, TPU_F32, &sc, v), s, none);
}

static tpu_value_t bin(tpu_graph_t *g, tpu_op_t op, tpu_value_t a, tpu_value_t b) {
  return tpu_graph_binary(g, op, a, b);
}

/* Steps of |exe| that are copies into outputs. */
static int num_copies(const tpu_executable_t *exe) {
  char *text = NULL;
  CHECK_OK(tpu_executable_describe(exe, tpu_allocator_system(), &text, NULL));
  int k = 0;
  for (const char *p = text; p && (p = strstr(p, "COPY ")) != NULL; p += 5) k++;
  tpu_allocator_free(tpu_allocator_system(), text);
  return k;
}

/* Runs |exe| with output o written into parameter alias[o]'s buffer (alias[o] >= 0) and
 * returns how many outputs differ, bit for bit, from |g| compiled without aliases. */
static int in_place_vs_reference(const tpu_graph_t *g, const tpu_executable_t *exe,
                                 const int32_t *alias) {
  const uint64_t seed = 11;
  tpu_executable_t *ref_exe = cu_compile(g, 0);
  if (!exe || !ref_exe) {
    tpu_executable_release(ref_exe);
    return -1;
  }
  cu_run_t ref, got;
  cu_execute(g, ref_exe, seed, g_pool, &ref);
  memset(&got, 0, sizeof got);
  got.num_in = tpu_graph_num_params(g);
  got.num_out = tpu_graph_num_outputs(g);
  for (int v = 0; v < tpu_graph_num_nodes(g); v++) {
    const tpu_node_t *n = tpu_graph_node(g, v);
    if (n->op != TPU_OP_PARAMETER) continue;
    int i = n->attrs.param.index;
    got.in[i] = aligned_alloc(64, (cu_bytes(n->dtype, &n->shape) + 63) / 64 * 64);
    cu_fill(got.in[i], n->dtype, &n->shape, seed + (uint64_t)i);
  }
  for (int o = 0; o < got.num_out; o++) {
    got.out_bytes[o] = ref.out_bytes[o];
    got.out_dtype[o] = ref.out_dtype[o];
    if (alias[o] >= 0) {
      got.out[o] = got.in[alias[o]];
    } else {
      got.out[o] = aligned_alloc(64, (got.out_bytes[o] + 64 + 63) / 64 * 64);
      memset(got.out[o], 0xAB, got.out_bytes[o]);
    }
  }
  size_t sb = tpu_executable_scratch_bytes(exe);
  void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
  CHECK_OK(tpu_executable_run(exe, got.in, got.out, scratch, g_pool));
  free(scratch);
  int bad = cu_diff_outputs(&ref, &got);
  for (int o = 0; o < got.num_out; o++) {
    if (alias[o] < 0) free(got.out[o]);
  }
  for (int i = 0; i < got.num_in; i++) free(got.in[i]);
  cu_free(&ref);
  tpu_executable_release(ref_exe);
  return bad;
}

/* Checks that the three compilations of |g| compute its reference result in place, then
 * releases them. */
static void check_and_release(const tpu_graph_t *g, const int32_t *alias,
                              tpu_executable_t *coarse, tpu_executable_t *exact,
                              tpu_executable_t *unfused) {
  CHECK(in_place_vs_reference(g, coarse, alias) == 0);
  CHECK(in_place_vs_reference(g, exact, alias) == 0);
  CHECK(in_place_vs_reference(g, unfused, alias) == 0);
  tpu_executable_release(coarse);
  tpu_executable_release(exact);
  tpu_executable_release(unfused);
}

/* |g| (outputs 0..2 over params 0..2) compiled with may-alias bits instead of exact
 * aliases, with them, and with them and no passes. */
static void compile_three_ways(const tpu_graph_t *g, const int32_t *alias,
                               tpu_executable_t **coarse, tpu_executable_t **exact,
                               tpu_executable_t **unfused) {
  *coarse = cu_compile_aliased(g, NULL, 0, 7, 0);
  *exact = cu_compile_aliased(g, alias, 3, 0, 0);
  *unfused = cu_compile_aliased(g, alias, 3, 0, TPU_PASS_ALL);
}

/* p = p - lr * g: params (p, g, lr), output 0 over p. */
static tpu_graph_t *sgd(void) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(ROWS, COLS);
  tpu_value_t p = ir_param(g, TPU_F32, s), gr = ir_param(g, TPU_F32, s);
  tpu_value_t lr = scalar_param(g, s);
  CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_SUB, p, bin(g, TPU_OP_MUL, lr, gr)), NULL));
  return g;
}

TEST(sgd_update_is_one_kernel_without_copy) {
  tpu_graph_t *g = sgd();
  const int32_t alias[1] = {0};
  tpu_executable_t *coarse = cu_compile_aliased(g, NULL, 0, 1, 0);
  tpu_executable_t *exact = cu_compile_aliased(g, alias, 1, 1 /* ignored */, 0);
  tpu_executable_t *unfused = cu_compile_aliased(g, alias, 1, 0, TPU_PASS_ALL);
  if (coarse && exact && unfused) {
    CHECK(tpu_executable_num_kernels(coarse) == 2); /* fused chain into scratch, COPY */
    CHECK(num_copies(coarse) == 1);
    CHECK(tpu_executable_num_kernels(exact) == 1);
    CHECK(num_copies(exact) == 0);
    CHECK(tpu_executable_scratch_bytes(exact) == 0);
    CHECK(num_copies(unfused) == 0); /* MUL into scratch, SUB straight into p */
    CHECK(tpu_executable_num_kernels(unfused) == 2);
  }
  check_and_release(g, alias, coarse, exact, unfused);
  tpu_graph_destroy(g);
}

TEST(later_reader_of_the_old_value_keeps_the_copy) {
  tpu_shape_t s = SHAPE(ROWS, COLS);
  bool all[2] = {true, true};
  const int32_t alias[2] = {0, -1};
  /* order 0: the reduction of the old p comes after the update; 1: before it */
  for (int order = 0; order < 2; order++) {
    tpu_graph_t *g = ir_graph();
    tpu_value_t p = ir_param(g, TPU_F32, s), gr = ir_param(g, TPU_F32, s);
    tpu_value_t lr = scalar_param(g, s);
    tpu_value_t sum = order ? tpu_graph_reduce(g, TPU_REDUCE_SUM, p, all) : TPU_NO_VALUE;
    tpu_value_t upd = bin(g, TPU_OP_SUB, p, bin(g, TPU_OP_MUL, lr, gr));
    if (!order) sum = tpu_graph_reduce(g, TPU_REDUCE_SUM, p, all);
    CHECK_OK(tpu_graph_output(g, upd, NULL));
    CHECK_OK(tpu_graph_output(g, sum, NULL));
    tpu_executable_t *exe = cu_compile_aliased(g, alias, 2, 0, 0);
    if (exe) CHECK(num_copies(exe) == (order ? 0 : 1));
    CHECK(in_place_vs_reference(g, exe, alias) == 0);
    tpu_executable_release(exe);
    tpu_graph_destroy(g);
  }
  /* the old p is itself another output (copied at the end): the update must copy too */
  tpu_graph_t *g = ir_graph();
  tpu_value_t p = ir_param(g, TPU_F32, s), gr = ir_param(g, TPU_F32, s);
  CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_ADD, p, gr), NULL));
  CHECK_OK(tpu_graph_output(g, p, NULL));
  tpu_executable_t *exe = cu_compile_aliased(g, alias, 2, 0, 0);
  if (exe) CHECK(num_copies(exe) == 2);
  CHECK(in_place_vs_reference(g, exe, alias) == 0);
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

TEST(swapped_and_transposed_parameters_are_staged) {
  /* (p, q) = (q, p): each copy reads what the other overwrites */
  tpu_shape_t s = SHAPE(ROWS, COLS);
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t p = ir_param(g, TPU_F32, s), q = ir_param(g, TPU_F32, s);
    CHECK_OK(tpu_graph_output(g, q, NULL));
    CHECK_OK(tpu_graph_output(g, p, NULL));
    const int32_t alias[2] = {0, 1};
    tpu_executable_t *exe = cu_compile_aliased(g, alias, 2, 0, 0);
    if (exe) CHECK(num_copies(exe) == 4);
    CHECK(in_place_vs_reference(g, exe, alias) == 0);
    tpu_executable_release(exe);
    tpu_graph_destroy(g);
  }
  /* p = p^T (square) */
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t p = ir_param(g, TPU_F32, SHAPE(COLS, COLS));
    int64_t perm[2] = {1, 0};
    CHECK_OK(tpu_graph_output(g, tpu_graph_transpose(g, p, perm), NULL));
    const int32_t alias[1] = {0};
    tpu_executable_t *exe = cu_compile_aliased(g, alias, 1, 0, 0);
    if (exe) CHECK(num_copies(exe) == 2);
    CHECK(in_place_vs_reference(g, exe, alias) == 0);
    tpu_executable_release(exe);
    tpu_graph_destroy(g);
  }
}

TEST(reads_elsewhere_than_the_written_elements_copy) {
  const int32_t alias[1] = {0};
  /* p = p - lr * p^T (square): the transpose reads elements not yet written */
  {
    tpu_graph_t *g = ir_graph();
    tpu_shape_t s = SHAPE(COLS, COLS);
    tpu_value_t p = ir_param(g, TPU_F32, s);
    int64_t perm[2] = {1, 0};
    tpu_value_t pt = tpu_graph_transpose(g, p, perm);
    tpu_value_t lr = scalar_param(g, s);
    CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_SUB, p, bin(g, TPU_OP_MUL, lr, pt)), NULL));
    tpu_executable_t *exe = cu_compile_aliased(g, alias, 1, 0, 0);
    tpu_executable_t *unfused = cu_compile_aliased(g, alias, 1, 0, TPU_PASS_ALL);
    if (exe && unfused) {
      CHECK(num_copies(exe) == 1);
      /* unfused, the MUL step reads p^T whole before the SUB step writes p in place */
      CHECK(num_copies(unfused) == 0);
    }
    CHECK(in_place_vs_reference(g, exe, alias) == 0);
    CHECK(in_place_vs_reference(g, unfused, alias) == 0);
    tpu_executable_release(exe);
    tpu_executable_release(unfused);
    tpu_graph_destroy(g);
  }
  /* p = p + a @ w: the matmul head writes the output before its epilogue reads p */
  {
    tpu_graph_t *g = ir_graph();
    tpu_shape_t s = SHAPE(64, 96);
    tpu_value_t p = ir_param(g, TPU_F32, s);
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(64, 32)), w = ir_param(g, TPU_F32, SHAPE(32, 96));
    tpu_dot_attrs_t da;
    memset(&da, 0, sizeof da);
    da.num_contract = 1;
    da.lhs_contract[0] = 1;
    da.rhs_contract[0] = 0;
    tpu_value_t y = tpu_graph_dot_general(g, a, w, &da, TPU_F32);
    CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_ADD, y, p), NULL));
    tpu_executable_t *exe = cu_compile_aliased(g, alias, 1, 0, 0);
    if (exe) {
      CHECK(tpu_executable_num_fused(exe) == 1);
      CHECK(num_copies(exe) == 1);
    }
    CHECK(in_place_vs_reference(g, exe, alias) == 0);
    tpu_executable_release(exe);
    tpu_graph_destroy(g);
  }
  /* x = x - mean(x) over rows: the tail writes row chunks while the host still reads x */
  {
    tpu_graph_t *g = ir_graph();
    tpu_shape_t s = SHAPE(ROWS, COLS), r = SHAPE(ROWS);
    tpu_value_t x = ir_param(g, TPU_F32, s);
    bool last[2] = {false, true};
    int64_t d0[1] = {0};
    tpu_value_t mean = bin(g, TPU_OP_MUL, tpu_graph_reduce(g, TPU_REDUCE_SUM, x, last),
                           splat(g, 1.0 / COLS, r));
    CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_SUB, x, bcast(g, mean, s, d0)), NULL));
    tpu_executable_t *exe = cu_compile_aliased(g, alias, 1, 0, 0);
    if (exe) CHECK(num_copies(exe) == 1);
    CHECK(in_place_vs_reference(g, exe, alias) == 0);
    tpu_executable_release(exe);
    tpu_graph_destroy(g);
  }
}

/* AdamW with tensor hyperparameters (capturable): params (p, m, v, g, lr, b1, b2, eps, wd);
 * outputs p, m, v over params 0, 1, 2. */
static tpu_graph_t *adamw(void) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(ROWS, COLS);
  tpu_value_t p = ir_param(g, TPU_F32, s), m = ir_param(g, TPU_F32, s);
  tpu_value_t v = ir_param(g, TPU_F32, s), gr = ir_param(g, TPU_F32, s);
  tpu_value_t lr = scalar_param(g, s), b1 = scalar_param(g, s), b2 = scalar_param(g, s);
  tpu_value_t eps = scalar_param(g, s), wd = scalar_param(g, s);
  tpu_value_t one = splat(g, 1.0, s);
  p = bin(g, TPU_OP_MUL, p, bin(g, TPU_OP_SUB, one, bin(g, TPU_OP_MUL, lr, wd)));
  m = bin(g, TPU_OP_ADD, bin(g, TPU_OP_MUL, b1, m),
          bin(g, TPU_OP_MUL, bin(g, TPU_OP_SUB, one, b1), gr));
  v = bin(g, TPU_OP_ADD, bin(g, TPU_OP_MUL, b2, v),
          bin(g, TPU_OP_MUL, bin(g, TPU_OP_SUB, one, b2), bin(g, TPU_OP_MUL, gr, gr)));
  tpu_value_t den = bin(g, TPU_OP_ADD, tpu_graph_unary(g, TPU_OP_SQRT, v), eps);
  p = bin(g, TPU_OP_SUB, p, bin(g, TPU_OP_MUL, lr, bin(g, TPU_OP_DIV, m, den)));
  CHECK_OK(tpu_graph_output(g, p, NULL));
  CHECK_OK(tpu_graph_output(g, m, NULL));
  CHECK_OK(tpu_graph_output(g, v, NULL));
  return g;
}

TEST(adamw_updates_three_tensors_in_place) {
  tpu_graph_t *g = adamw();
  const int32_t alias[3] = {0, 1, 2};
  tpu_executable_t *coarse, *exact, *unfused;
  compile_three_ways(g, alias, &coarse, &exact, &unfused);
  if (coarse && exact && unfused) {
    printf("  AdamW: %d kernels (%d copies) with may-alias bits, %d (%d) with exact aliases\n",
           tpu_executable_num_kernels(coarse), num_copies(coarse),
           tpu_executable_num_kernels(exact), num_copies(exact));
    CHECK(num_copies(coarse) == 3);
    CHECK(num_copies(exact) == 0);
    CHECK(tpu_executable_num_kernels(exact) == tpu_executable_num_kernels(coarse) - 3);
    CHECK(num_copies(unfused) == 0);
  }
  check_and_release(g, alias, coarse, exact, unfused);
  tpu_graph_destroy(g);
}

/* AdamW as torch.compile hands it over (capturable, float hyperparameters): params (p, m,
 * v, g, step_size, bias_correction2_sqrt); outputs p, m, v over params 0, 1, 2. */
static tpu_graph_t *adamw_constants(void) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(ROWS, COLS);
  tpu_value_t p = ir_param(g, TPU_F32, s), m = ir_param(g, TPU_F32, s);
  tpu_value_t v = ir_param(g, TPU_F32, s), gr = ir_param(g, TPU_F32, s);
  tpu_value_t step_size = scalar_param(g, s), bc2 = scalar_param(g, s);
  p = bin(g, TPU_OP_MUL, p, splat(g, 0.99999, s));
  m = bin(g, TPU_OP_ADD, m, bin(g, TPU_OP_MUL, bin(g, TPU_OP_SUB, gr, m), splat(g, 0.1, s)));
  v = bin(g, TPU_OP_ADD, bin(g, TPU_OP_MUL, v, splat(g, 0.999, s)),
          bin(g, TPU_OP_MUL, bin(g, TPU_OP_MUL, gr, gr), splat(g, 0.001, s)));
  tpu_value_t den = bin(g, TPU_OP_ADD, bin(g, TPU_OP_DIV, tpu_graph_unary(g, TPU_OP_SQRT, v), bc2),
                        splat(g, 1e-8, s));
  p = bin(g, TPU_OP_ADD, p, bin(g, TPU_OP_MUL, bin(g, TPU_OP_DIV, m, den), step_size));
  CHECK_OK(tpu_graph_output(g, p, NULL));
  CHECK_OK(tpu_graph_output(g, m, NULL));
  CHECK_OK(tpu_graph_output(g, v, NULL));
  return g;
}

TEST(adamw_moments_are_stores_of_the_update) {
  /* the new moments are outputs read only by the parameter's update: one kernel writes all
   * three in place, each block read before its stores (multi-output fusion, fuse.c) */
  tpu_graph_t *g = adamw_constants();
  const int32_t alias[3] = {0, 1, 2};
  tpu_executable_t *coarse, *exact, *unfused;
  compile_three_ways(g, alias, &coarse, &exact, &unfused);
  if (coarse && exact && unfused) {
    char *text = NULL;
    CHECK_OK(tpu_executable_describe(exact, tpu_allocator_system(), &text, NULL));
    printf("  AdamW, float hyperparameters, exact aliases:\n%s", text);
    CHECK(tpu_executable_num_kernels(exact) == 1);
    CHECK_CONTAINS(text, "-> output 0, store f32[1030,257] -> output 1, store f32[1030,257] -> output 2");
    tpu_allocator_free(tpu_allocator_system(), text);
    /* outputs that may alias the inputs: the stores go to scratch, then copies */
    CHECK(tpu_executable_num_kernels(coarse) == 4);
    CHECK(num_copies(coarse) == 3);
    CHECK(tpu_executable_num_kernels(unfused) > 3);
  }
  check_and_release(g, alias, coarse, exact, unfused);
  tpu_graph_destroy(g);
}

TEST(unchanged_parameter_needs_no_step) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(ROWS, COLS);
  tpu_value_t p = ir_param(g, TPU_F32, s), q = ir_param(g, TPU_F32, s);
  CHECK_OK(tpu_graph_output(g, p, NULL));
  CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_ADD, q, q), NULL));
  const int32_t alias[2] = {0, 1};
  tpu_executable_t *exe = cu_compile_aliased(g, alias, 2, 0, 0);
  if (exe) {
    CHECK(tpu_executable_num_kernels(exe) == 1);
    CHECK(num_copies(exe) == 0);
  }
  CHECK(in_place_vs_reference(g, exe, alias) == 0);
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

TEST(many_outputs_say_disjoint_or_overlap) {
  /* 70 outputs x_i + 1: past the 64-bit may-alias mask only the per-output modes speak */
  enum { N = 70 };
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(16);
  tpu_value_t x = ir_param(g, TPU_F32, s);
  for (int i = 0; i < N; i++) {
    CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_ADD, x, splat(g, (double)i, s)), NULL));
  }
  int32_t modes[N];
  for (int i = 0; i < N; i++) {
    modes[i] = i % 2 ? TPU_OUTPUT_ALIAS_DISJOINT : TPU_OUTPUT_ALIAS_OVERLAP;
  }
  tpu_executable_t *bits = cu_compile_aliased(g, NULL, 0, 0, 0);
  tpu_executable_t *per = cu_compile_aliased(g, modes, N, ~0ull /* ignored */, 0);
  if (bits && per) {
    CHECK(num_copies(bits) == N - 64);
    CHECK(num_copies(per) == N / 2);
  }
  /* numbers (cu_run_t holds 16 outputs): out_i = x + i */
  float xs[16], outs[N][16];
  void *ins[1] = {xs}, *ptrs[N];
  for (int j = 0; j < 16; j++) xs[j] = (float)j * 0.5f;
  for (int i = 0; i < N; i++) ptrs[i] = outs[i];
  size_t sb = per ? tpu_executable_scratch_bytes(per) : 0;
  void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
  if (per) CHECK_OK(tpu_executable_run(per, ins, ptrs, scratch, g_pool));
  int bad = 0;
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < 16; j++) bad += outs[i][j] != xs[j] + (float)i;
  }
  CHECK(bad == 0);
  free(scratch);
  tpu_executable_release(bits);
  tpu_executable_release(per);
  tpu_graph_destroy(g);
}

TEST(refused_claims_copy) {
  tpu_shape_t s = SHAPE(ROWS, COLS);
  /* output 0 claims parameter 1, whose shape differs; out-of-range parameter */
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t p = ir_param(g, TPU_F32, s);
    ir_param(g, TPU_F32, SHAPE(COLS, ROWS));
    CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_ADD, p, p), NULL));
    const int32_t wrong[1] = {1}, beyond[1] = {7};
    tpu_executable_t *a = cu_compile_aliased(g, wrong, 1, 0, 0), *b = cu_compile_aliased(g, beyond, 1, 0, 0);
    if (a && b) {
      CHECK(num_copies(a) == 1);
      CHECK(num_copies(b) == 1);
    }
    tpu_executable_release(a);
    tpu_executable_release(b);
    tpu_graph_destroy(g);
  }
  /* two outputs claim one parameter */
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t p = ir_param(g, TPU_F32, s);
    CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_ADD, p, p), NULL));
    CHECK_OK(tpu_graph_output(g, bin(g, TPU_OP_MUL, p, p), NULL));
    const int32_t twice[2] = {0, 0};
    tpu_executable_t *exe = cu_compile_aliased(g, twice, 2, 0, 0);
    if (exe) CHECK(num_copies(exe) == 2);
    tpu_executable_release(exe);
    tpu_graph_destroy(g);
  }
}

int main(void) {
  CHECK_OK(tpu_pool_create(2, tpu_allocator_system(), &g_pool));
  RUN(sgd_update_is_one_kernel_without_copy);
  RUN(later_reader_of_the_old_value_keeps_the_copy);
  RUN(swapped_and_transposed_parameters_are_staged);
  RUN(reads_elsewhere_than_the_written_elements_copy);
  RUN(adamw_updates_three_tensors_in_place);
  RUN(adamw_moments_are_stores_of_the_update);
  RUN(unchanged_parameter_needs_no_step);
  RUN(many_outputs_say_disjoint_or_overlap);
  RUN(refused_claims_copy);
  tpu_pool_destroy(g_pool);
  return check_report();
}
