/* test_ir_inline.c: tpu_graph_inline, the splice fused eager and compile mode use to build
 * one graph out of cached per-op graphs: parameters are replaced by the given values, every
 * other node is copied with remapped operands and its type (which the shape rules would
 * give it again: the verifier checks), and a parameter bound to a value of another type
 * becomes the destination graph's error. */
#include <string.h>

#include "check.h"
#include "ir/graph_internal.h"
#include "ir_util.h"
#include "tpu/ir.h"

TEST(inline_splices_a_graph_twice) {
  /* src: (a, b) -> exp(a) + b */
  tpu_graph_t *src = ir_graph();
  tpu_value_t a = ir_param(src, TPU_F32, SHAPE(2, 3));
  tpu_value_t b = ir_param(src, TPU_F32, SHAPE(2, 3));
  tpu_value_t e = tpu_graph_unary(src, TPU_OP_EXP, a);
  tpu_value_t s = tpu_graph_binary(src, TPU_OP_ADD, e, b);
  CHECK_OK(tpu_graph_output(src, s, NULL));

  /* dst: x -> src(src(x, x), x) */
  tpu_graph_t *dst = ir_graph();
  tpu_value_t x = ir_param(dst, TPU_F32, SHAPE(2, 3));
  tpu_value_t map[4];
  tpu_value_t params[2] = {x, x};
  CHECK_OK(tpu_graph_inline(dst, src, params, map));
  CHECK(map[a] == x && map[b] == x);
  tpu_value_t first = map[s];
  params[0] = first;
  CHECK_OK(tpu_graph_inline(dst, src, params, map));
  CHECK_OK(tpu_graph_output(dst, map[s], NULL));
  CHECK_OK(tpu_graph_verify(dst));
  CHECK(tpu_graph_num_params(dst) == 1);
  CHECK(tpu_graph_num_nodes(dst) == 5); /* x, exp, add, exp, add */
  const tpu_node_t *last = tpu_graph_node(dst, map[s]);
  CHECK(last->op == TPU_OP_ADD && last->operands[1] == x);
  CHECK(tpu_graph_node(dst, last->operands[0])->operands[0] == first);
  tpu_graph_destroy(src);
  tpu_graph_destroy(dst);
}

TEST(inline_keeps_attributes) {
  tpu_graph_t *src = ir_graph();
  tpu_value_t a = ir_param(src, TPU_F32, SHAPE(2, 3));
  int64_t perm[2] = {1, 0};
  tpu_value_t t = tpu_graph_transpose(src, a, perm);
  bool dims[2] = {false, true};
  tpu_value_t r = tpu_graph_reduce(src, TPU_REDUCE_MAX, t, dims);
  CHECK_OK(tpu_graph_output(src, r, NULL));
  tpu_graph_t *dst = ir_graph();
  tpu_value_t x = ir_param(dst, TPU_F32, SHAPE(2, 3));
  tpu_value_t map[3];
  CHECK_OK(tpu_graph_inline(dst, src, &x, map));
  EXPECT_TYPE(dst, map[r], "f32[3]");
  CHECK(tpu_graph_node(dst, map[r])->attrs.reduce.kind == TPU_REDUCE_MAX);
  CHECK(tpu_graph_hash(dst) != 0);
  tpu_graph_destroy(src);
  tpu_graph_destroy(dst);
}

TEST(inline_rejects_a_mistyped_parameter) {
  tpu_graph_t *src = ir_graph();
  tpu_value_t a = ir_param(src, TPU_F32, SHAPE(4));
  CHECK_OK(tpu_graph_output(src, tpu_graph_unary(src, TPU_OP_NEG, a), NULL));
  tpu_graph_t *dst = ir_graph();
  tpu_value_t x = ir_param(dst, TPU_BF16, SHAPE(4));
  tpu_value_t map[2];
  CHECK(tpu_graph_inline(dst, src, &x, map) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(strstr(tpu_graph_error_message(dst), "inline: parameter 0") != NULL);
  /* the error is sticky: a later inline fails at once */
  tpu_value_t y = ir_param(dst, TPU_F32, SHAPE(4));
  CHECK(tpu_graph_inline(dst, src, &y, map) != TPU_OK);
  CHECK(tpu_graph_inline(NULL, src, &y, map) == TPU_ERR_INVALID_ARGUMENT);
  tpu_graph_destroy(src);
  tpu_graph_destroy(dst);
}

TEST(inline_copies_variadic_operands) {
  tpu_graph_t *src = ir_graph();
  tpu_value_t xs[20];
  for (int i = 0; i < 20; i++) xs[i] = ir_param(src, TPU_F32, SHAPE(1, 2));
  tpu_value_t c = tpu_graph_concatenate(src, xs, 20, 0);
  CHECK_OK(tpu_graph_output(src, c, NULL));
  tpu_graph_t *dst = ir_graph();
  tpu_value_t p = ir_param(dst, TPU_F32, SHAPE(1, 2));
  tpu_value_t params[20], map[21];
  for (int i = 0; i < 20; i++) params[i] = p;
  CHECK_OK(tpu_graph_inline(dst, src, params, map));
  EXPECT_TYPE(dst, map[c], "f32[20,2]");
  CHECK_OK(tpu_graph_output(dst, map[c], NULL));
  CHECK_OK(tpu_graph_verify(dst));
  tpu_graph_destroy(src);
  tpu_graph_destroy(dst);
}

TEST(inline_leaves_an_unused_parameter_unbound) {
  /* src: (self, value) -> broadcast(value), as fill_(self, value) lowers: self unused */
  tpu_graph_t *src = ir_graph();
  tpu_value_t self = ir_param(src, TPU_F32, SHAPE(2, 3));
  tpu_value_t value = ir_param(src, TPU_F32, SHAPE(2, 3));
  tpu_value_t n = tpu_graph_unary(src, TPU_OP_NEG, value);
  CHECK_OK(tpu_graph_output(src, n, NULL));
  tpu_graph_t *dst = ir_graph();
  tpu_value_t x = ir_param(dst, TPU_F32, SHAPE(2, 3));
  tpu_value_t params[2] = {TPU_NO_VALUE, x}, map[3];
  CHECK_OK(tpu_graph_inline(dst, src, params, map));
  CHECK(map[self] == TPU_NO_VALUE && map[value] == x);
  CHECK(tpu_graph_node(dst, map[n])->operands[0] == x);
  /* binding the used parameter to nothing is an error naming the reader */
  params[0] = x;
  params[1] = TPU_NO_VALUE;
  CHECK(tpu_graph_inline(dst, src, params, map) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(strstr(tpu_graph_error_message(dst), "NEG (node 2) reads an unbound parameter") != NULL);
  tpu_graph_destroy(src);
  tpu_graph_destroy(dst);
}

/* Checks that node |v| of |src| became a node of |dst| with the same op and type. */
static void expect_same_type(const tpu_graph_t *dst, tpu_value_t d, const tpu_graph_t *src,
                             tpu_value_t v) {
  const tpu_node_t *a = tpu_graph_node(dst, d), *b = tpu_graph_node(src, v);
  CHECK(a && b && a->op == b->op && a->dtype == b->dtype && tpu_shape_equal(&a->shape, &b->shape));
}

TEST(inline_copies_types_the_rules_would_give) {
  /* src: (x f32[2,3], w bf16[3,4], i i32[]) -> a graph of ops whose result types differ
   * from their operands': convert, broadcast, dot, reduce, compare, select, transpose,
   * reshape, slice, concatenate, dynamic_slice */
  tpu_shape_t scalar = SCALAR, s23 = SHAPE(2, 3), s8 = SHAPE(8), s5 = SHAPE(5);
  tpu_graph_t *src = ir_graph();
  tpu_value_t c = tpu_graph_constant(src, TPU_F32, &scalar, 2.0); /* before the parameters */
  tpu_value_t x = ir_param(src, TPU_F32, SHAPE(2, 3));
  tpu_value_t w = ir_param(src, TPU_BF16, SHAPE(3, 4));
  tpu_value_t i = ir_param(src, TPU_I32, SCALAR);
  tpu_value_t cb = tpu_graph_broadcast_in_dim(src, c, &s23, NULL);
  tpu_value_t xb = tpu_graph_convert(src, tpu_graph_binary(src, TPU_OP_MUL, x, cb), TPU_BF16);
  tpu_dot_attrs_t da = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
  tpu_value_t d = tpu_graph_dot_general(src, xb, w, &da, TPU_F32);              /* f32[2,4] */
  tpu_value_t r = tpu_graph_reduce(src, TPU_REDUCE_MAX, d, (bool[]){true, false}); /* [4] */
  tpu_value_t t = tpu_graph_transpose(src, d, (int64_t[]){1, 0});               /* [4,2] */
  tpu_value_t f = tpu_graph_reshape(src, t, &s8);
  tpu_value_t sl = tpu_graph_slice(src, f, (int64_t[]){1}, (int64_t[]){7}, (int64_t[]){2});
  tpu_value_t cat = tpu_graph_concatenate(src, (tpu_value_t[]){r, sl, r}, 3, 0); /* [11] */
  tpu_value_t ds = tpu_graph_dynamic_slice(src, cat, &i, (int64_t[]){5});
  tpu_value_t z = tpu_graph_constant(src, TPU_F32, &s5, 0.0);
  tpu_value_t m = tpu_graph_compare(src, TPU_CMP_GT, ds, z);                    /* pred[5] */
  tpu_value_t out = tpu_graph_select(src, m, ds, z);
  CHECK_OK(tpu_graph_output(src, out, NULL));
  CHECK_OK(tpu_graph_status(src));
  int n = tpu_graph_num_nodes(src);

  tpu_graph_t *dst = ir_graph();
  tpu_value_t dx = ir_param(dst, TPU_F32, SHAPE(2, 3));
  tpu_value_t dw = ir_param(dst, TPU_BF16, SHAPE(3, 4));
  tpu_value_t di = ir_param(dst, TPU_I32, SCALAR);
  tpu_value_t map[32];
  CHECK(n <= 32);
  CHECK_OK(tpu_graph_inline(dst, src, (tpu_value_t[]){dx, dw, di}, map));
  CHECK_OK(tpu_graph_inline(dst, src, (tpu_value_t[]){dx, dw, di}, map));  /* twice */
  for (int v = 0; v < n; v++) {
    if (tpu_graph_node(src, v)->op != TPU_OP_PARAMETER) expect_same_type(dst, map[v], src, v);
  }
  EXPECT_TYPE(dst, map[cat], "f32[11]");
  EXPECT_TYPE(dst, map[m], "i1[5]");
  CHECK_OK(tpu_graph_output(dst, map[out], NULL));
  CHECK_OK(tpu_graph_verify(dst)); /* the verifier re-runs every shape rule */
  CHECK(tpu_graph_num_nodes(dst) == 3 + 2 * (n - 3));
  tpu_graph_destroy(src);
  tpu_graph_destroy(dst);
}

TEST(inline_rejects_a_parameter_of_another_shape) {
  /* same dtype, other shape: rejected, also when nodes come before the parameter */
  tpu_shape_t s4 = SHAPE(4);
  tpu_graph_t *src = ir_graph();
  tpu_value_t c = tpu_graph_constant(src, TPU_F32, &s4, 1.0);
  tpu_value_t a = ir_param(src, TPU_F32, SHAPE(4));
  CHECK_OK(tpu_graph_output(src, tpu_graph_binary(src, TPU_OP_ADD, a, c), NULL));
  tpu_graph_t *dst = ir_graph();
  tpu_value_t x = ir_param(dst, TPU_F32, SHAPE(2, 2));
  tpu_value_t map[3];
  CHECK(tpu_graph_inline(dst, src, &x, map) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(strstr(tpu_graph_error_message(dst), "inline: parameter 0 is bound to value 0") != NULL);
  tpu_graph_destroy(dst);
  /* a value that is not a node of dst */
  dst = ir_graph();
  tpu_value_t nowhere = 7;
  CHECK(tpu_graph_inline(dst, src, &nowhere, map) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_graph_status(dst) == TPU_ERR_INVALID_ARGUMENT);
  tpu_graph_destroy(dst);
  /* a graph into itself: refused (its nodes would move while being copied) */
  CHECK(tpu_graph_inline(src, src, &a, map) == TPU_ERR_INVALID_ARGUMENT);
  tpu_graph_destroy(src);
}

int main(void) {
  RUN(inline_splices_a_graph_twice);
  RUN(inline_keeps_attributes);
  RUN(inline_rejects_a_mistyped_parameter);
  RUN(inline_copies_variadic_operands);
  RUN(inline_leaves_an_unused_parameter_unbound);
  RUN(inline_copies_types_the_rules_would_give);
  RUN(inline_rejects_a_parameter_of_another_shape);
  return check_report();
}
