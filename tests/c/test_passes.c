/* test_passes.c: the graph passes (include/tpu/passes.h) on small graphs.
 *
 * Each pass is checked on the structure of the graph it returns (node counts and ops, that
 * parameters and outputs keep their indices, dtypes, shapes and strides, that the result
 * verifies) and on numbers: the optimized executable against the graph compiled with every
 * pass disabled, bit for bit (every rewrite is exact).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/graph_internal.h"
#include "compile_util.h"
#include "compiler/rewrite.h"

static tpu_graph_t *run_passes(const tpu_graph_t *g, uint32_t passes, tpu_pass_stats_t *stats) {
  tpu_graph_t *out = NULL;
  CHECK_OK(tpu_passes_run(g, passes, tpu_allocator_system(), &out, stats));
  if (out) CHECK_OK(tpu_graph_verify(out));
  return out;
}

static tpu_value_t k_f32(tpu_graph_t *g, double v, tpu_shape_t s) {
  return tpu_graph_constant(g, TPU_F32, &s, v);
}

static tpu_value_t bcast_scalar(tpu_graph_t *g, tpu_value_t x, tpu_shape_t s) {
  int64_t none[1] = {0};
  return tpu_graph_broadcast_in_dim(g, x, &s, none);
}

TEST(simplify_layout_chains) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3, 4));
  int64_t p1[3] = {2, 0, 1}, p2[3] = {1, 2, 0}, p3[3] = {1, 0, 2};
  tpu_value_t t = tpu_graph_transpose(g, tpu_graph_transpose(g, x, p1), p2); /* identity */
  tpu_value_t u = tpu_graph_transpose(g, tpu_graph_transpose(g, x, p1), p3); /* one transpose */
  tpu_shape_t s6 = SHAPE(6, 4), s24 = SHAPE(24), s234 = SHAPE(2, 3, 4);
  tpu_value_t r = tpu_graph_reshape(g, tpu_graph_reshape(g, tpu_graph_reshape(g, x, &s6), &s24), &s234);
  tpu_value_t r2 = tpu_graph_reshape(g, tpu_graph_reshape(g, x, &s6), &s24);
  tpu_value_t c = tpu_graph_convert(g, x, TPU_F32);
  tpu_shape_t s4 = SHAPE(4), s34 = SHAPE(3, 4);
  tpu_value_t v = ir_param(g, TPU_F32, s4);
  int64_t d1[1] = {1}, d12[2] = {1, 2};
  tpu_value_t bb = tpu_graph_broadcast_in_dim(g, tpu_graph_broadcast_in_dim(g, v, &s34, d1), &s234, d12);
  int64_t id[3] = {0, 1, 2};
  tpu_value_t same = tpu_graph_broadcast_in_dim(g, x, &s234, id);
  tpu_value_t outs[] = {t, u, r, r2, c, bb, same};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) CHECK_OK(tpu_graph_output(g, outs[i], NULL));
  tpu_pass_stats_t st;
  tpu_graph_t *o = run_passes(g, TPU_PASS_SIMPLIFY | TPU_PASS_DCE, &st);
  CHECK(o != NULL);
  if (o) {
    CHECK(tpu_graph_output_value(o, 0) == 0);                 /* t -> x */
    CHECK(tpu_graph_node(o, tpu_graph_output_value(o, 1))->op == TPU_OP_TRANSPOSE);
    CHECK(tpu_graph_node(o, tpu_graph_node(o, tpu_graph_output_value(o, 1))->operands[0])->op ==
          TPU_OP_PARAMETER);
    CHECK(tpu_graph_output_value(o, 2) == 0);                 /* reshape back -> x */
    const tpu_node_t *r2n = tpu_graph_node(o, tpu_graph_output_value(o, 3));
    CHECK(r2n->op == TPU_OP_RESHAPE && r2n->operands[0] == 0); /* one reshape of x */
    CHECK(tpu_graph_output_value(o, 4) == 0);                 /* convert f32 -> f32 */
    const tpu_node_t *bn = tpu_graph_node(o, tpu_graph_output_value(o, 5));
    CHECK(bn->op == TPU_OP_BROADCAST_IN_DIM && bn->attrs.broadcast.dims[0] == 2);
    CHECK(tpu_graph_node(o, bn->operands[0])->op == TPU_OP_PARAMETER);
    CHECK(tpu_graph_output_value(o, 6) == 0);
    CHECK(cu_count_op(o, TPU_OP_TRANSPOSE) == 1);
    CHECK(cu_count_op(o, TPU_OP_RESHAPE) == 1);
    CHECK(cu_count_op(o, TPU_OP_BROADCAST_IN_DIM) == 1);
    CHECK(tpu_graph_num_params(o) == 2 && tpu_graph_num_outputs(o) == 7);
    CHECK(st.simplified >= 6 && st.removed > 0);
  }
  CHECK(cu_optimized_vs_plain(g, NULL) == 0);
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(simplify_arithmetic_identities_are_exact) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(5, 7);
  tpu_value_t x = ir_param(g, TPU_F32, s);
  tpu_value_t one = bcast_scalar(g, k_f32(g, 1.0, SCALAR), s);
  tpu_value_t zero = bcast_scalar(g, k_f32(g, 0.0, SCALAR), s);
  tpu_value_t nzero = bcast_scalar(g, k_f32(g, -0.0, SCALAR), s);
  tpu_value_t a = tpu_graph_binary(g, TPU_OP_MUL, x, one);   /* -> x */
  tpu_value_t b = tpu_graph_binary(g, TPU_OP_MUL, one, x);   /* -> x */
  tpu_value_t c = tpu_graph_binary(g, TPU_OP_DIV, x, one);   /* -> x */
  tpu_value_t d = tpu_graph_binary(g, TPU_OP_SUB, x, zero);  /* -> x */
  tpu_value_t e = tpu_graph_binary(g, TPU_OP_ADD, x, nzero); /* -> x */
  tpu_value_t f = tpu_graph_binary(g, TPU_OP_ADD, x, zero);  /* stays: -0 + 0 = +0 */
  tpu_value_t n = tpu_graph_unary(g, TPU_OP_NEG, tpu_graph_unary(g, TPU_OP_NEG, x)); /* -> x */
  tpu_value_t xi = ir_param(g, TPU_I32, s);
  tpu_value_t zi = bcast_scalar(g, tpu_graph_constant_int(g, TPU_I32, &(tpu_shape_t){0}, 0), s);
  tpu_value_t i = tpu_graph_binary(g, TPU_OP_ADD, zi, xi);   /* -> xi */
  tpu_value_t outs[] = {a, b, c, d, e, f, n, i};
  for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) CHECK_OK(tpu_graph_output(g, outs[k], NULL));
  tpu_graph_t *o = run_passes(g, TPU_PASS_SIMPLIFY | TPU_PASS_DCE, NULL);
  CHECK(o != NULL);
  if (o) {
    for (int k = 0; k < 5; k++) CHECK(tpu_graph_output_value(o, k) == 0);
    CHECK(tpu_graph_node(o, tpu_graph_output_value(o, 5))->op == TPU_OP_ADD);
    CHECK(tpu_graph_output_value(o, 6) == 0);
    CHECK(tpu_graph_node(o, tpu_graph_output_value(o, 7))->op == TPU_OP_PARAMETER);
    CHECK(cu_count_op(o, TPU_OP_MUL) == 0 && cu_count_op(o, TPU_OP_DIV) == 0 &&
          cu_count_op(o, TPU_OP_SUB) == 0 && cu_count_op(o, TPU_OP_NEG) == 0);
  }
  CHECK(cu_optimized_vs_plain(g, NULL) == 0);
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(simplify_moves_converts_after_broadcasts) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(6, 5);
  tpu_value_t x = ir_param(g, TPU_F32, s);
  tpu_value_t w = ir_param(g, TPU_BF16, SHAPE(5));
  tpu_value_t d = ir_param(g, TPU_F64, SHAPE(5));
  int64_t d1[1] = {1};
  tpu_value_t wb = tpu_graph_broadcast_in_dim(g, tpu_graph_convert(g, w, TPU_F32), &s, d1);
  tpu_value_t db = tpu_graph_broadcast_in_dim(g, tpu_graph_convert(g, d, TPU_F32), &s, d1);
  CHECK_OK(tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_binary(g, TPU_OP_MUL, x, wb), db), NULL));
  tpu_graph_t *o = run_passes(g, TPU_PASS_ALL, NULL);
  CHECK(o != NULL);
  if (o) {
    int moved = 0, kept = 0;
    for (int v = 0; v < tpu_graph_num_nodes(o); v++) {
      const tpu_node_t *n = tpu_graph_node(o, v);
      if (n->op != TPU_OP_CONVERT) continue;
      const tpu_node_t *src = tpu_graph_node(o, n->operands[0]);
      if (src->op == TPU_OP_BROADCAST_IN_DIM && src->dtype == TPU_BF16) moved++;
      if (src->op == TPU_OP_PARAMETER && src->dtype == TPU_F64) kept++;
    }
    CHECK(moved == 1 && kept == 1); /* bf16 -> f32 fuses after the broadcast; f64 stays small */
  }
  tpu_executable_t *e = cu_compile(g, 0);
  if (e) CHECK(tpu_executable_num_kernels(e) == 2); /* the f64 convert, then one fused step */
  tpu_executable_release(e);
  CHECK(cu_optimized_vs_plain(g, NULL) == 0);
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(simplify_pushes_broadcasts_down_one_element_chains) {
  /* an optimizer's bias correction: a chain of ops on the one-element step count, broadcast
   * into the update of a parameter; the chain moves into the update's fused program (its
   * values computed once per run) up to the new count, an output, which it reads; the same
   * chain broadcast into a matmul stays small */
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(4, 8), r0 = SCALAR;
  tpu_value_t step = tpu_graph_binary(g, TPU_OP_ADD, ir_param(g, TPU_F32, r0), k_f32(g, 1.0, r0));
  CHECK_OK(tpu_graph_output(g, step, NULL));
  tpu_value_t x = ir_param(g, TPU_F32, s);
  tpu_value_t w = ir_param(g, TPU_F32, SHAPE(8, 3));
  tpu_value_t corr = tpu_graph_binary(
      g, TPU_OP_DIV, k_f32(g, 1e-3, r0),
      tpu_graph_binary(g, TPU_OP_SUB, k_f32(g, 1.0, r0),
                       tpu_graph_binary(g, TPU_OP_POW, k_f32(g, 0.9, r0), step)));
  tpu_value_t upd = tpu_graph_binary(g, TPU_OP_SUB, x,
                                     tpu_graph_binary(g, TPU_OP_MUL, x, bcast_scalar(g, corr, s)));
  CHECK_OK(tpu_graph_output(g, upd, NULL));
  tpu_value_t sq = tpu_graph_unary(g, TPU_OP_SQRT, step);
  tpu_dot_attrs_t d;
  memset(&d, 0, sizeof d);
  d.num_contract = 1;
  d.lhs_contract[0] = 1;
  d.rhs_contract[0] = 0;
  CHECK_OK(tpu_graph_output(g, tpu_graph_dot_general(g, bcast_scalar(g, sq, s), w, &d, TPU_F32),
                            NULL));
  tpu_graph_t *o = run_passes(g, TPU_PASS_ALL, NULL);
  CHECK(o != NULL);
  if (o) {
    int pow_big = 0, pow_small = 0, sqrt_small = 0, add_big = 0, add_small = 0;
    for (int v = 0; v < tpu_graph_num_nodes(o); v++) {
      const tpu_node_t *n = tpu_graph_node(o, v);
      if (n->op == TPU_OP_POW) *(n->shape.rank == 0 ? &pow_small : &pow_big) += 1;
      if (n->op == TPU_OP_ADD) *(n->shape.rank == 0 ? &add_small : &add_big) += 1;
      if (n->op == TPU_OP_SQRT && n->shape.rank == 0) sqrt_small++;
    }
    CHECK(pow_big == 1 && pow_small == 0); /* pushed: POW on (4, 8) broadcasts */
    CHECK(add_big == 0 && add_small == 1); /* the output is not computed again */
    CHECK(sqrt_small == 1);                /* the matmul's operand: not pushed */
  }
  tpu_executable_t *e = cu_compile(g, 0);
  /* the count's 1 and its add, the update (chain included) in one fused kernel, the sqrt
   * and the matmul */
  if (e) CHECK(tpu_executable_num_kernels(e) == 5);
  tpu_executable_release(e);
  CHECK(cu_optimized_vs_plain(g, NULL) == 0); /* the same bits as the unfused chain */
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(fold_splat_constants_with_the_kernels) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(3, 4);
  tpu_value_t x = ir_param(g, TPU_F32, s);
  /* exp(0.5) * 3 - 1, in f32, broadcast: folded into one scalar constant */
  tpu_value_t k = tpu_graph_unary(g, TPU_OP_EXP, k_f32(g, 0.5, SCALAR));
  k = tpu_graph_binary(g, TPU_OP_MUL, k, k_f32(g, 3.0, SCALAR));
  k = tpu_graph_binary(g, TPU_OP_SUB, k, k_f32(g, 1.0, SCALAR));
  tpu_value_t kb = bcast_scalar(g, k, s);
  tpu_value_t y = tpu_graph_binary(g, TPU_OP_MUL, x, kb);
  /* on broadcast constants too, and converts / compares / selects */
  tpu_value_t c2 = bcast_scalar(g, k_f32(g, 2.0, SCALAR), s);
  tpu_value_t sq = tpu_graph_binary(g, TPU_OP_MUL, c2, c2);
  tpu_value_t h = tpu_graph_convert(g, sq, TPU_BF16);
  tpu_value_t gt = tpu_graph_compare(g, TPU_CMP_GT, c2, bcast_scalar(g, k_f32(g, 1.0, SCALAR), s));
  tpu_value_t sel = tpu_graph_select(g, gt, x, sq); /* select(true, x, .) -> x (simplify) */
  CHECK_OK(tpu_graph_output(g, y, NULL));
  CHECK_OK(tpu_graph_output(g, h, NULL));
  CHECK_OK(tpu_graph_output(g, sel, NULL));
  tpu_pass_stats_t st;
  tpu_graph_t *o = run_passes(g, TPU_PASS_ALL, &st);
  CHECK(o != NULL);
  if (o) {
    CHECK(cu_count_op(o, TPU_OP_EXP) == 0 && cu_count_op(o, TPU_OP_SUB) == 0 &&
          cu_count_op(o, TPU_OP_COMPARE) == 0 && cu_count_op(o, TPU_OP_CONVERT) == 0 &&
          cu_count_op(o, TPU_OP_SELECT) == 0);
    CHECK(cu_count_op(o, TPU_OP_MUL) == 1); /* x * k only */
    const tpu_node_t *m = tpu_graph_node(o, tpu_graph_output_value(o, 0));
    const tpu_node_t *kn = pass_splat(o, m->operands[1]);
    CHECK(kn != NULL);
    if (kn) CHECK((float)kn->attrs.constant.value == expf(0.5f) * 3.0f - 1.0f);
    const tpu_node_t *hn = pass_splat(o, tpu_graph_output_value(o, 1));
    CHECK(hn && hn->dtype == TPU_BF16 && hn->attrs.constant.value == 4.0);
    CHECK(tpu_graph_output_value(o, 2) == 0);
    CHECK(st.folded >= 5);
  }
  CHECK(cu_optimized_vs_plain(g, NULL) == 0);
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(fold_integer_and_division_by_zero_like_the_kernels) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(4);
  tpu_value_t a = tpu_graph_constant_int(g, TPU_I32, &s, 7);
  tpu_value_t b = tpu_graph_constant_int(g, TPU_I32, &s, 0);
  tpu_value_t q = tpu_graph_binary(g, TPU_OP_DIV, a, b);      /* the kernel's answer, whatever it is */
  tpu_value_t f = tpu_graph_binary(g, TPU_OP_DIV, k_f32(g, 1.0, s), k_f32(g, 0.0, s)); /* inf */
  tpu_value_t nan = tpu_graph_binary(g, TPU_OP_DIV, k_f32(g, 0.0, s), k_f32(g, 0.0, s));
  CHECK_OK(tpu_graph_output(g, q, NULL));
  CHECK_OK(tpu_graph_output(g, f, NULL));
  CHECK_OK(tpu_graph_output(g, nan, NULL));
  tpu_graph_t *o = run_passes(g, TPU_PASS_ALL, NULL);
  CHECK(o && cu_count_op(o, TPU_OP_DIV) == 0);
  CHECK(cu_optimized_vs_plain(g, NULL) == 0);
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(cse_merges_equal_nodes_but_not_parameters_or_rng) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(8);
  tpu_value_t x = ir_param(g, TPU_F32, s), y = ir_param(g, TPU_F32, s);
  tpu_value_t e1 = tpu_graph_unary(g, TPU_OP_EXP, x), e2 = tpu_graph_unary(g, TPU_OP_EXP, x);
  tpu_value_t a1 = tpu_graph_binary(g, TPU_OP_ADD, e1, y), a2 = tpu_graph_binary(g, TPU_OP_ADD, e2, y);
  tpu_value_t a3 = tpu_graph_binary(g, TPU_OP_ADD, y, e2); /* operand order matters: kept */
  tpu_value_t k1 = k_f32(g, 2.0, s), k2 = k_f32(g, 2.0, s), k3 = k_f32(g, -2.0, s);
  tpu_value_t m1 = tpu_graph_binary(g, TPU_OP_MUL, a1, k1), m2 = tpu_graph_binary(g, TPU_OP_MUL, a2, k2);
  tpu_value_t m3 = tpu_graph_binary(g, TPU_OP_MUL, a2, k3);
  tpu_shape_t sc = SCALAR;
  tpu_value_t seed = tpu_graph_parameter(g, TPU_I64, &sc, NULL), off = tpu_graph_parameter(g, TPU_I64, &sc, NULL);
  tpu_value_t r1 = tpu_graph_rng(g, TPU_RNG_UNIFORM, TPU_F32, &s, seed, off);
  tpu_value_t r2 = tpu_graph_rng(g, TPU_RNG_UNIFORM, TPU_F32, &s, seed, off);
  tpu_value_t outs[] = {m1, m2, m3, a3, r1, r2};
  for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) CHECK_OK(tpu_graph_output(g, outs[k], NULL));
  tpu_pass_stats_t st;
  tpu_graph_t *o = run_passes(g, TPU_PASS_CSE | TPU_PASS_DCE, &st);
  CHECK(o != NULL);
  if (o) {
    CHECK(tpu_graph_output_value(o, 0) == tpu_graph_output_value(o, 1));
    CHECK(tpu_graph_output_value(o, 2) != tpu_graph_output_value(o, 1));
    CHECK(cu_count_op(o, TPU_OP_EXP) == 1);
    CHECK(cu_count_op(o, TPU_OP_ADD) == 2);
    CHECK(cu_count_op(o, TPU_OP_CONSTANT) == 2);
    CHECK(cu_count_op(o, TPU_OP_RNG) == 2);
    CHECK(tpu_graph_num_params(o) == 4);
    CHECK(st.merged == 4);
  }
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(dce_drops_dead_nodes_and_keeps_every_parameter) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(2, 2);
  tpu_value_t x = ir_param(g, TPU_F32, s);
  tpu_value_t unused = ir_param(g, TPU_BF16, SHAPE(3));
  (void)unused;
  tpu_value_t dead = tpu_graph_unary(g, TPU_OP_TANH, x);
  tpu_graph_unary(g, TPU_OP_LOG, dead);
  tpu_value_t z = ir_param(g, TPU_F32, s);
  tpu_value_t live = tpu_graph_binary(g, TPU_OP_ADD, x, z);
  int64_t strides[2] = {1, 2};
  CHECK_OK(tpu_graph_output(g, live, strides));
  CHECK_OK(tpu_graph_output(g, x, NULL));
  tpu_pass_stats_t st;
  tpu_graph_t *o = run_passes(g, TPU_PASS_DCE, &st);
  CHECK(o != NULL);
  if (o) {
    CHECK(tpu_graph_num_nodes(o) == 4 && st.removed == 2);
    CHECK(tpu_graph_num_params(o) == 3);
    const tpu_node_t *p1 = tpu_graph_node(o, 1);
    CHECK(p1->op == TPU_OP_PARAMETER && p1->attrs.param.index == 1 && p1->dtype == TPU_BF16);
    CHECK(tpu_graph_node(o, 2)->attrs.param.index == 2);
    int64_t got[TPU_MAX_RANK];
    CHECK(tpu_graph_output_strides(o, 0, got) && got[0] == 1 && got[1] == 2);
    CHECK(!tpu_graph_output_strides(o, 1, got));
    CHECK(tpu_graph_output_value(o, 1) == 0);
    CHECK(tpu_graph_hash(o) != tpu_graph_hash(g));
  }
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(simplify_drops_whole_slices_and_dots_read_unmerged_batches) {
  /* attention's products as matmul decomposes them: heads transposed out of a projection,
   * their (batch, head) dims merged by a reshape (a copy: the heads are strided) and an
   * identity slice between reshapes; the other operand a plain (B*H, ...) value */
  tpu_graph_t *g = ir_graph();
  tpu_value_t qkv = ir_param(g, TPU_F32, SHAPE(2, 5, 3, 4));  /* (B, T, H, D) */
  tpu_value_t k = ir_param(g, TPU_F32, SHAPE(6, 4, 5));       /* (B*H, D, T) */
  int64_t perm[4] = {0, 2, 1, 3};
  tpu_value_t q = tpu_graph_transpose(g, qkv, perm);          /* (B, H, T, D) */
  tpu_shape_t s4 = SHAPE(6, 5, 4, 1), s3 = SHAPE(6, 5, 4), s_out = SHAPE(2, 3, 5, 5);
  int64_t st[4] = {0, 0, 0, 0}, lim[4] = {6, 5, 4, 1};
  tpu_value_t qm = tpu_graph_reshape(g, tpu_graph_slice(g, tpu_graph_reshape(g, q, &s4), st, lim, NULL), &s3);
  tpu_dot_attrs_t d;
  memset(&d, 0, sizeof d);
  d.num_batch = 1;
  d.num_contract = 1;
  d.lhs_contract[0] = 2;
  d.rhs_contract[0] = 1;
  tpu_value_t scores = tpu_graph_dot_general(g, qm, k, &d, TPU_F32);  /* (B*H, T, T) */
  CHECK_OK(tpu_graph_output(g, tpu_graph_reshape(g, scores, &s_out), NULL));
  /* the merged operand on the right */
  tpu_value_t p = ir_param(g, TPU_F32, SHAPE(6, 7, 5));
  tpu_value_t pv = tpu_graph_dot_general(g, p, qm, &d, TPU_F32);      /* (B*H, 7, D) */
  CHECK_OK(tpu_graph_output(g, pv, NULL));
  tpu_pass_stats_t stats;
  tpu_graph_t *o = run_passes(g, TPU_PASS_SIMPLIFY | TPU_PASS_DCE, &stats);
  CHECK(o != NULL);
  if (o) {
    CHECK(cu_count_op(o, TPU_OP_SLICE) == 0);
    int dots = 0;
    for (int v = 0; v < tpu_graph_num_nodes(o); v++) {
      const tpu_node_t *n = tpu_graph_node(o, v);
      if (n->op != TPU_OP_DOT_GENERAL) continue;
      dots++;
      CHECK(n->attrs.dot.num_batch == 2 && n->shape.dims[0] == 2 && n->shape.dims[1] == 3);
      /* q is read through the transpose, not through a reshape copy */
      const tpu_node_t *q_op = tpu_graph_node(o, n->operands[dots == 1 ? 0 : 1]);
      CHECK(q_op->op == TPU_OP_TRANSPOSE);
    }
    CHECK(dots == 2);
    /* the first output: the product (B, H, T, T) itself, its reshapes cancelled */
    CHECK(tpu_graph_node(o, tpu_graph_output_value(o, 0))->op == TPU_OP_DOT_GENERAL);
  }
  CHECK(cu_optimized_vs_plain(g, NULL) == 0);
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(simplify_concatenates_strided_heads_before_merging_them) {
  /* attention's per-head gradients (B, H, T, D), each transposed to (B, T, H, D) and
   * reshaped to (B, T, H*D) (a copy: the heads are strided), then concatenated along the
   * features for the qkv projection: one concatenation of the transposes instead */
  tpu_graph_t *g = ir_graph();
  int64_t perm[4] = {0, 2, 1, 3};
  tpu_shape_t merged = SHAPE(2, 5, 12), odd = SHAPE(2, 6, 10);
  tpu_value_t parts[3], kept[2];
  for (int i = 0; i < 3; i++) {
    tpu_value_t heads = ir_param(g, TPU_F32, SHAPE(2, 3, 5, 4));
    parts[i] = tpu_graph_reshape(g, tpu_graph_transpose(g, heads, perm), &merged);
  }
  CHECK_OK(tpu_graph_output(g, tpu_graph_concatenate(g, parts, 3, 2), NULL));
  /* left alone: trailing dims that differ ((3, 4) and (6, 2) both merge to 12), and a
   * concatenation along a dim that is not the last */
  tpu_value_t other = ir_param(g, TPU_F32, SHAPE(2, 5, 6, 2));
  kept[0] = parts[0];
  kept[1] = tpu_graph_reshape(g, other, &merged);
  CHECK_OK(tpu_graph_output(g, tpu_graph_concatenate(g, kept, 2, 2), NULL));
  kept[0] = tpu_graph_reshape(g, ir_param(g, TPU_F32, SHAPE(2, 60)), &odd);
  kept[1] = tpu_graph_reshape(g, ir_param(g, TPU_F32, SHAPE(2, 1, 60)), &odd);
  CHECK_OK(tpu_graph_output(g, tpu_graph_concatenate(g, kept, 2, 1), NULL));
  tpu_pass_stats_t stats;
  tpu_graph_t *o = run_passes(g, TPU_PASS_SIMPLIFY | TPU_PASS_DCE, &stats);
  CHECK(o != NULL);
  if (o) {
    const tpu_node_t *out = tpu_graph_node(o, tpu_graph_output_value(o, 0));
    CHECK(out->op == TPU_OP_RESHAPE);
    const tpu_node_t *cat = tpu_graph_node(o, out->operands[0]);
    CHECK(cat->op == TPU_OP_CONCATENATE && cat->attrs.concat.dim == 2);
    CHECK(cat->shape.rank == 4 && cat->shape.dims[2] == 9 && cat->shape.dims[3] == 4);
    for (int i = 0; i < cat->num_operands; i++) {
      CHECK(tpu_graph_node(o, cat->operands[i])->op == TPU_OP_TRANSPOSE);
    }
    for (int k = 1; k < 3; k++) {
      const tpu_node_t *left = tpu_graph_node(o, tpu_graph_output_value(o, k));
      CHECK(left->op == TPU_OP_CONCATENATE && left->shape.rank == 3);
      CHECK(tpu_graph_node(o, left->operands[1])->op == TPU_OP_RESHAPE);
    }
    /* parts[1] and parts[2] are dead; parts[0] stays for the second output: with the
     * first output's reshape and the three reshapes left alone, 5 */
    CHECK(cu_count_op(o, TPU_OP_RESHAPE) == 5);
  }
  CHECK(cu_optimized_vs_plain(g, NULL) == 0);
  tpu_graph_destroy(o);
  tpu_graph_destroy(g);
}

TEST(passes_leave_an_optimal_graph_alone) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4));
  CHECK_OK(tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_EXP, x), NULL));
  tpu_pass_stats_t st;
  tpu_graph_t *o = run_passes(g, TPU_PASS_ALL, &st);
  CHECK(o && tpu_graph_hash(o) == tpu_graph_hash(g));
  CHECK(st.nodes_in == 2 && st.nodes_out == 2 && st.simplified == 0 && st.folded == 0 &&
        st.merged == 0 && st.removed == 0);
  tpu_graph_destroy(o);
  /* a graph with a build error is refused */
  tpu_graph_unary(g, TPU_OP_ADD, x);
  tpu_graph_t *bad = NULL;
  CHECK(tpu_passes_run(g, TPU_PASS_ALL, tpu_allocator_system(), &bad, NULL) != TPU_OK);
  CHECK(bad == NULL);
  tpu_graph_destroy(g);
}

int main(void) {
  RUN(simplify_layout_chains);
  RUN(simplify_arithmetic_identities_are_exact);
  RUN(simplify_moves_converts_after_broadcasts);
  RUN(simplify_pushes_broadcasts_down_one_element_chains);
  RUN(fold_splat_constants_with_the_kernels);
  RUN(fold_integer_and_division_by_zero_like_the_kernels);
  RUN(cse_merges_equal_nodes_but_not_parameters_or_rng);
  RUN(dce_drops_dead_nodes_and_keeps_every_parameter);
  RUN(simplify_drops_whole_slices_and_dots_read_unmerged_batches);
  RUN(simplify_concatenates_strided_heads_before_merging_them);
  RUN(passes_leave_an_optimal_graph_alone);
  return check_report();
}
