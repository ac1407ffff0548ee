/* test_ir_verify.c: tpu_graph_verify accepts every graph the builder makes and rejects
 * corrupted ones (built with the internal raw append or edited in place through
 * src/ir/graph_internal.h) with a message naming the node, the op and the problem. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ir/graph_internal.h"
#include "ir_util.h"
#include "tpu/ir.h"

/* x f32[2,3], y f32[2,3] -> exp(x + y) transposed, with every kind of node the verifier
 * must re-derive. Node numbers are fixed: 0 x, 1 y, 2 add, 3 exp, 4 transpose. */
static tpu_graph_t *small_graph(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_value_t y = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_value_t s = tpu_graph_binary(g, TPU_OP_ADD, x, y);
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, s);
  tpu_value_t t = tpu_graph_transpose(g, e, (int64_t[]){1, 0});
  tpu_graph_output(g, t, NULL);
  return g;
}

/* A graph with every op, as the builder makes it. */
static tpu_graph_t *every_op_graph(void) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t sc = SCALAR, s23 = SHAPE(2, 3), s6 = SHAPE(6), s43 = SHAPE(4, 2, 3);
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_value_t i = ir_param(g, TPU_I64, SCALAR);
  tpu_value_t c = tpu_graph_constant(g, TPU_F32, &sc, 0.5);
  tpu_graph_iota(g, TPU_I32, &s23, 0);
  tpu_graph_rng(g, TPU_RNG_UNIFORM, TPU_F32, &s23, i, i);
  for (int op = 0; op < TPU_OP_COUNT; op++) {
    if (tpu_op_family((tpu_op_t)op) == TPU_FAMILY_UNARY && op != TPU_OP_NOT &&
        op != TPU_OP_CONVERT && op != TPU_OP_BITCAST_CONVERT) {
      tpu_graph_unary(g, (tpu_op_t)op, x);
    }
    if (tpu_op_family((tpu_op_t)op) == TPU_FAMILY_BINARY && tpu_op_arity((tpu_op_t)op) == 2 &&
        op != TPU_OP_AND && op != TPU_OP_OR && op != TPU_OP_XOR && op != TPU_OP_SHIFT_LEFT &&
        op != TPU_OP_SHIFT_RIGHT) {
      tpu_graph_binary(g, (tpu_op_t)op, x, x);
    }
  }
  tpu_value_t b = tpu_graph_compare(g, TPU_CMP_LT, x, x);
  tpu_graph_unary(g, TPU_OP_NOT, b);
  tpu_graph_binary(g, TPU_OP_XOR, b, b);
  tpu_value_t n = ir_param(g, TPU_I32, SHAPE(2, 3));
  tpu_graph_binary(g, TPU_OP_AND, n, n);
  tpu_graph_binary(g, TPU_OP_OR, n, n);
  tpu_graph_binary(g, TPU_OP_SHIFT_LEFT, n, n);
  tpu_graph_binary(g, TPU_OP_SHIFT_RIGHT, n, n);
  tpu_graph_transpose(g, x, (int64_t[]){1, 0});
  tpu_graph_select(g, b, x, x);
  tpu_graph_clamp(g, c, x, c);
  tpu_graph_convert(g, x, TPU_BF16);
  tpu_graph_bitcast_convert(g, x, TPU_I32);
  tpu_graph_broadcast_in_dim(g, x, &s43, (int64_t[]){1, 2});
  tpu_graph_reshape(g, x, &s6);
  tpu_graph_slice(g, x, (int64_t[]){0, 1}, (int64_t[]){2, 3}, NULL);
  tpu_value_t ds = tpu_graph_dynamic_slice(g, x, (tpu_value_t[]){i, i}, (int64_t[]){1, 1});
  tpu_graph_dynamic_update_slice(g, x, ds, (tpu_value_t[]){i, i});
  tpu_graph_concatenate(g, (tpu_value_t[]){x, x}, 2, 0);
  tpu_graph_pad(g, x, c, (int64_t[]){1, 1}, (int64_t[]){0, 0}, (int64_t[]){1, 0});
  tpu_graph_reverse(g, x, (bool[]){true, true});
  tpu_graph_reduce(g, TPU_REDUCE_ARGMAX, x, (bool[]){false, true});
  tpu_reduce_window_attrs_t rw = {.kind = TPU_REDUCE_MAX, .window = {2, 2}, .stride = {1, 1},
                                  .dilation = {1, 1}};
  tpu_graph_reduce_window(g, x, &rw);
  tpu_graph_scan(g, TPU_REDUCE_SUM, x, 1);
  tpu_dot_attrs_t d = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {1}};
  tpu_graph_dot_general(g, x, x, &d, TPU_F32);
  tpu_value_t img = ir_param(g, TPU_F32, SHAPE(1, 4, 4, 2));
  tpu_value_t k = ir_param(g, TPU_F32, SHAPE(3, 3, 2, 5));
  tpu_conv_attrs_t cv = {.num_spatial = 2, .stride = {1, 1}, .lhs_dilation = {1, 1},
                         .rhs_dilation = {1, 1}, .feature_group_count = 1,
                         .batch_group_count = 1, .in_feature = 3, .in_spatial = {1, 2},
                         .k_out_feature = 3, .k_in_feature = 2, .k_spatial = {0, 1},
                         .out_feature = 3, .out_spatial = {1, 2}};
  tpu_graph_convolution(g, img, k, &cv, TPU_F32);
  tpu_value_t ix = ir_param(g, TPU_I32, SHAPE(4, 1));
  tpu_gather_attrs_t ga = {.num_offset_dims = 1, .offset_dims = {1}, .num_collapsed = 1,
                           .collapsed_slice_dims = {0}, .num_start_index_map = 1,
                           .start_index_map = {0}, .index_vector_dim = 1, .slice_sizes = {1, 3}};
  tpu_value_t gathered = tpu_graph_gather(g, x, ix, &ga);
  tpu_scatter_attrs_t sa = {.num_update_window_dims = 1, .update_window_dims = {1},
                            .num_inserted_window_dims = 1, .inserted_window_dims = {0},
                            .num_scatter_dims = 1, .scatter_dims_to_operand_dims = {0},
                            .index_vector_dim = 1};
  tpu_graph_scatter(g, x, ix, gathered, &sa);
  tpu_sort_attrs_t so = {.dim = 1};
  tpu_graph_sort(g, x, &so);
  tpu_value_t last = tpu_graph_argsort(g, x, &so);
  tpu_graph_output(g, last, NULL);
  tpu_value_t m = ir_param(g, TPU_F32, SHAPE(3, 3));
  tpu_triangular_solve_attrs_t ts = {.left_side = true, .lower = true};
  tpu_graph_triangular_solve(g, tpu_graph_cholesky(g, m, true), m, &ts);
  tpu_graph_lu(g, m);
  tpu_graph_lu_pivots_to_permutation(g, tpu_graph_lu_pivots(g, m), 3);
  tpu_value_t qr = tpu_graph_geqrf(g, m);
  tpu_graph_householder_product(g, tpu_graph_slice(g, qr, (int64_t[]){0, 0}, (int64_t[]){3, 3},
                                                   (int64_t[]){1, 1}),
                                tpu_graph_reshape(g, tpu_graph_slice(g, qr, (int64_t[]){3, 0},
                                                                     (int64_t[]){4, 3},
                                                                     (int64_t[]){1, 1}),
                                                  &(tpu_shape_t){1, {3}}));
  tpu_graph_eigh(g, m);
  tpu_graph_svd(g, m);
  return g;
}

/* verify fails with INVALID_ARGUMENT and a message containing |needle|. */
#define EXPECT_REJECT(g, needle)                                               \
  do {                                                                         \
    CHECK(tpu_graph_verify(g) == TPU_ERR_INVALID_ARGUMENT);                    \
    CHECK_CONTAINS(tpu_status_message(), needle);                              \
  } while (0)

TEST(built_graphs_verify) {
  tpu_graph_t *g = small_graph();
  CHECK(tpu_graph_status(g) == TPU_OK);
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_destroy(g);
  g = every_op_graph();
  if (tpu_graph_status(g) != TPU_OK) fprintf(stderr, "  %s\n", tpu_graph_error_message(g));
  CHECK(tpu_graph_status(g) == TPU_OK);
  CHECK(tpu_graph_num_nodes(g) > 60);
  CHECK_OK(tpu_graph_verify(g));
  /* every op of ops.def appears */
  bool seen[TPU_OP_COUNT] = {false};
  for (int v = 0; v < tpu_graph_num_nodes(g); v++) seen[tpu_graph_node(g, v)->op] = true;
  for (int op = 0; op < TPU_OP_COUNT; op++) {
    if (!seen[op]) fprintf(stderr, "  op %s not in the graph\n", tpu_op_name((tpu_op_t)op));
    CHECK(seen[op]);
  }
  tpu_graph_destroy(g);
  CHECK(tpu_graph_verify(NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "verify: graph is NULL");
}

TEST(rejects_a_graph_with_a_build_error) {
  tpu_graph_t *g = small_graph();
  tpu_value_t x = 0;
  tpu_graph_unary(g, TPU_OP_NOT, x);
  EXPECT_REJECT(g, "verify: the graph has a build error: unary NOT: operand dtype f32");
  tpu_graph_destroy(g);
}

TEST(rejects_a_wrong_result_shape_or_dtype) {
  tpu_graph_t *g = small_graph();
  tpu_ir_node_mut(g, 2)->shape.dims[1] = 2;
  EXPECT_REJECT(g, "verify: node 2 (ADD): result f32[2,2] differs from the inferred f32[2,3]");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 3)->dtype = TPU_F16;
  EXPECT_REJECT(g, "verify: node 3 (EXP): result f16[2,3] differs from the inferred f32[2,3]");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 4)->shape.rank = 3;
  EXPECT_REJECT(g, "verify: node 4 (TRANSPOSE): result f32[3,2,0] differs from the inferred "
                   "f32[3,2]");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 1)->dtype = TPU_BF16;  /* then ADD's operands disagree */
  EXPECT_REJECT(g, "verify: node 2 (ADD): binary ADD: operand dtypes f32 and bf16 differ");
  tpu_graph_destroy(g);
}

TEST(rejects_operands_that_do_not_precede_their_user) {
  tpu_graph_t *g = small_graph();
  tpu_node_t n = *tpu_graph_node(g, 2);
  /* an ADD that uses itself (node 5) and one that uses a later node */
  tpu_ir_append_raw(g, &n, (tpu_value_t[]){0, 5}, 2);
  EXPECT_REJECT(g, "verify: node 5 (ADD): operand 1 (value 5) does not precede its user");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 2)->operands = (const tpu_value_t *)(tpu_value_t[]){0, 3};
  EXPECT_REJECT(g, "verify: node 2 (ADD): operand 1 (value 3) does not precede its user");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 2)->operands = (const tpu_value_t *)(tpu_value_t[]){-1, 0};
  EXPECT_REJECT(g, "verify: node 2 (ADD): operand 0 (value -1) does not precede its user");
  tpu_graph_destroy(g);
}

TEST(rejects_wrong_arity_and_unknown_ops) {
  tpu_graph_t *g = small_graph();
  tpu_node_t n = *tpu_graph_node(g, 2);
  tpu_ir_append_raw(g, &n, (tpu_value_t[]){0}, 1);
  EXPECT_REJECT(g, "verify: node 5 (ADD): has 1 operands, the op takes 2");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 3)->op = (tpu_op_t)999;
  EXPECT_REJECT(g, "verify: node 3: invalid op 999");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 3)->operands = NULL;
  EXPECT_REJECT(g, "verify: node 3 (EXP): operand list is missing");
  tpu_graph_destroy(g);
  g = small_graph();  /* a dynamic_slice of a rank-2 operand with one start index */
  tpu_node_t ds;
  memset(&ds, 0, sizeof(ds));
  ds.op = TPU_OP_DYNAMIC_SLICE;
  tpu_shape_t sc = SCALAR;
  tpu_value_t i = tpu_graph_constant_int(g, TPU_I32, &sc, 0);
  tpu_ir_append_raw(g, &ds, (tpu_value_t[]){0, i}, 2);
  EXPECT_REJECT(g, "dynamic_slice: operand of rank 2 needs 2 start indices, got 1");
  tpu_graph_destroy(g);
}

TEST(rejects_bad_attributes) {
  tpu_graph_t *g = small_graph();
  tpu_ir_node_mut(g, 4)->attrs.transpose.perm[0] = 0;
  EXPECT_REJECT(g, "verify: node 4 (TRANSPOSE): transpose: perm (must be a permutation) repeats 0");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_value_t r = tpu_graph_reduce(g, TPU_REDUCE_SUM, 0, (bool[]){true, false});
  tpu_ir_node_mut(g, r)->attrs.reduce.dims[4] = true;
  EXPECT_REJECT(g, "verify: node 5 (REDUCE): reduce SUM: dims[4] is set but the "
                   "operand has rank 2");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_shape_t sc = SCALAR;
  tpu_value_t c = tpu_graph_constant_int(g, TPU_I8, &sc, 5);
  tpu_ir_node_mut(g, c)->attrs.constant.ivalue = 1000;
  EXPECT_REJECT(g, "verify: node 5 (CONSTANT): constant: value 1000 does not fit in i8");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_value_t cmp = tpu_graph_compare(g, TPU_CMP_EQ, 0, 1);
  tpu_ir_node_mut(g, cmp)->attrs.compare.direction = (tpu_compare_dir_t)17;
  EXPECT_REJECT(g, "verify: node 5 (COMPARE): compare: direction 17 is invalid");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_value_t rev = tpu_graph_reverse(g, 0, NULL);
  tpu_ir_node_mut(g, rev)->attrs.reverse.dims[7] = true;
  EXPECT_REJECT(g, "reverse: dims[7] is set but the operand has rank 2");
  tpu_graph_destroy(g);
}

TEST(rejects_bad_parameters) {
  tpu_graph_t *g = small_graph();
  tpu_ir_node_mut(g, 1)->attrs.param.index = 0;
  EXPECT_REJECT(g, "verify: node 1 (PARAMETER): index 0 is used twice");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 1)->attrs.param.index = 5;
  EXPECT_REJECT(g, "verify: node 1 (PARAMETER): index 5 is outside 0..1");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 0)->shape.dims[0] = -4;
  EXPECT_REJECT(g, "verify: node 0 (PARAMETER): parameter: parameter dim 0 has negative size -4");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_node_t *p = tpu_ir_node_mut(g, 0);
  p->attrs.param.strided = true;
  p->attrs.param.strides[1] = -1;
  EXPECT_REJECT(g, "verify: node 0 (PARAMETER): parameter: stride -1 of dim 1 is negative");
  tpu_graph_destroy(g);
  g = small_graph();
  g->num_params = 3;
  EXPECT_REJECT(g, "verify: the graph counts 3 parameters but has 2 parameter nodes");
  tpu_graph_destroy(g);
  g = small_graph();
  tpu_ir_node_mut(g, 0)->dtype = (tpu_dtype_t)-3;
  EXPECT_REJECT(g, "verify: node 0 (PARAMETER): parameter: parameter dtype -3 is invalid");
  tpu_graph_destroy(g);
}

TEST(rejects_bad_outputs) {
  tpu_graph_t *g = small_graph();
  g->outputs[0].value = 99;
  EXPECT_REJECT(g, "verify: output 0 names value 99, which is not a node (5 nodes)");
  tpu_graph_destroy(g);
  g = small_graph();
  g->outputs[0].strided = true;
  g->outputs[0].strides[1] = -2;
  EXPECT_REJECT(g, "verify: output 0: stride -2 of dim 1 is negative");
  tpu_graph_destroy(g);
}

TEST(raw_append_of_a_valid_node_verifies) {
  tpu_graph_t *g = small_graph();
  tpu_node_t n = *tpu_graph_node(g, 3);  /* EXP of node 2 */
  tpu_value_t v = tpu_ir_append_raw(g, &n, (tpu_value_t[]){4}, 1);
  CHECK(v == 5);
  tpu_ir_node_mut(g, v)->shape = tpu_graph_node(g, 4)->shape;
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_destroy(g);
}

int main(void) {
  RUN(built_graphs_verify);
  RUN(rejects_a_graph_with_a_build_error);
  RUN(rejects_a_wrong_result_shape_or_dtype);
  RUN(rejects_operands_that_do_not_precede_their_user);
  RUN(rejects_wrong_arity_and_unknown_ops);
  RUN(rejects_bad_attributes);
  RUN(rejects_bad_parameters);
  RUN(rejects_bad_outputs);
  RUN(raw_append_of_a_valid_node_verifies);
  return check_report();
}
