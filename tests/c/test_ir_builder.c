/* test_ir_builder.c: the IR graph builder, part 1: the graph object, the op table, shape
 * helpers, leaves (parameter, constant, iota, rng) and elementwise builders with their
 * inferred types and error messages ("<builder>: <problem>"), the sticky first error and
 * TPU_NO_VALUE propagation, outputs, node storage growth, clearing a graph for reuse and
 * out-of-memory handling.
 * Part 2 (data movement, reductions, MXU, indexing) is test_ir_shapes.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/graph_internal.h"
#include "ir_util.h"
#include "tpu/ir.h"

/* ---- graph object, op table, shapes ------------------------------------------------------ */

TEST(graph_create_and_destroy) {
  tpu_graph_t *g = NULL;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  CHECK(g != NULL);
  CHECK(tpu_graph_status(g) == TPU_OK);
  CHECK(strcmp(tpu_graph_error_message(g), "") == 0);
  CHECK(tpu_graph_num_nodes(g) == 0 && tpu_graph_num_params(g) == 0);
  CHECK(tpu_graph_num_outputs(g) == 0);
  CHECK(tpu_graph_node(g, 0) == NULL && tpu_graph_node(g, -1) == NULL);
  CHECK(tpu_graph_output_value(g, 0) == TPU_NO_VALUE);
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_destroy(g);
  tpu_graph_destroy(NULL);
  tpu_allocator_t none = {NULL, NULL, NULL};
  CHECK(tpu_graph_create(none, &g) == TPU_ERR_INVALID_ARGUMENT && g == NULL);
  CHECK(tpu_graph_create(tpu_allocator_system(), NULL) == TPU_ERR_INVALID_ARGUMENT);
  /* builders on a NULL graph do nothing */
  tpu_shape_t s = SHAPE(2);
  CHECK(tpu_graph_parameter(NULL, TPU_F32, &s, NULL) == TPU_NO_VALUE);
  CHECK(tpu_graph_unary(NULL, TPU_OP_EXP, 0) == TPU_NO_VALUE);
  CHECK(tpu_graph_output(NULL, 0, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_graph_status(NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_graph_hash(NULL) == 0);
}

TEST(op_table_comes_from_ops_def) {
  CHECK(strcmp(tpu_op_name(TPU_OP_ADD), "ADD") == 0);
  CHECK(strcmp(tpu_op_printed_name(TPU_OP_ADD), "stablehlo.add") == 0);
  CHECK(strcmp(tpu_op_printed_name(TPU_OP_ERF), "chlo.erf") == 0);
  CHECK(tpu_op_arity(TPU_OP_ADD) == 2 && tpu_op_arity(TPU_OP_SELECT) == 3);
  CHECK(tpu_op_arity(TPU_OP_CONCATENATE) == -1 && tpu_op_arity(TPU_OP_PARAMETER) == 0);
  CHECK(tpu_op_family(TPU_OP_EXP) == TPU_FAMILY_UNARY);
  CHECK(tpu_op_family(TPU_OP_DOT_GENERAL) == TPU_FAMILY_MXU);
  CHECK(tpu_op_family(TPU_OP_GATHER) == TPU_FAMILY_INDEX);
  CHECK(tpu_op_family(TPU_OP_SCAN) == TPU_FAMILY_REDUCE);
  CHECK(strcmp(tpu_op_name(TPU_OP_COUNT), "INVALID_OP") == 0);
  CHECK(strcmp(tpu_op_name((tpu_op_t)-1), "INVALID_OP") == 0);
  for (int op = 0; op < TPU_OP_COUNT; op++) {
    CHECK(tpu_op_name((tpu_op_t)op)[0] != '\0');
    CHECK(strchr(tpu_op_printed_name((tpu_op_t)op), '.') != NULL);
    for (int other = 0; other < op; other++) {
      CHECK(strcmp(tpu_op_name((tpu_op_t)op), tpu_op_name((tpu_op_t)other)) != 0);
    }
  }
}

TEST(shape_numel_and_equal) {
  int64_t n = -1;
  tpu_shape_t s = SCALAR;
  CHECK(tpu_shape_numel(&s, &n) && n == 1);
  s = SHAPE(2, 3, 4);
  CHECK(tpu_shape_numel(&s, &n) && n == 24);
  s = SHAPE(0, 5);
  CHECK(tpu_shape_numel(&s, &n) && n == 0);
  s = SHAPE(INT64_MAX / 2, 3);
  n = 7;
  CHECK(!tpu_shape_numel(&s, &n) && n == 7);
  s = SHAPE(2, -1);
  CHECK(!tpu_shape_numel(&s, &n));
  s.rank = TPU_MAX_RANK + 1;
  CHECK(!tpu_shape_numel(&s, &n));
  tpu_shape_t a = SHAPE(2, 3), b = SHAPE(2, 3), c = SHAPE(3, 2), d = SHAPE(2, 3, 1);
  b.dims[5] = 99; /* entries past the rank do not matter */
  CHECK(tpu_shape_equal(&a, &b) && !tpu_shape_equal(&a, &c) && !tpu_shape_equal(&a, &d));
}

/* ---- leaves --------------------------------------------------------------------------------- */

TEST(parameters_are_numbered_in_call_order) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(2, 3);
  tpu_value_t a = tpu_graph_parameter(g, TPU_F32, &s, NULL);
  tpu_value_t b = tpu_graph_parameter(g, TPU_BF16, &s, (int64_t[]){1, 2});
  tpu_shape_t sc = SCALAR;
  tpu_graph_constant(g, TPU_F32, &sc, 1.0);
  tpu_value_t c = tpu_graph_parameter(g, TPU_I64, &sc, NULL);
  CHECK(tpu_graph_num_params(g) == 3 && tpu_graph_num_nodes(g) == 4);
  CHECK(tpu_graph_node(g, a)->attrs.param.index == 0);
  CHECK(tpu_graph_node(g, b)->attrs.param.index == 1);
  CHECK(tpu_graph_node(g, c)->attrs.param.index == 2);
  CHECK(!tpu_graph_node(g, a)->attrs.param.strided);
  const tpu_param_attrs_t *pb = &tpu_graph_node(g, b)->attrs.param;
  CHECK(pb->strided && pb->strides[0] == 1 && pb->strides[1] == 2 && pb->strides[2] == 0);
  EXPECT_TYPE(g, a, "f32[2,3]");
  EXPECT_TYPE(g, b, "bf16[2,3]");
  EXPECT_TYPE(g, c, "i64[]");
  CHECK(tpu_graph_node(g, a)->num_operands == 0);
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_destroy(g);
}

TEST(parameter_errors) {
  {
    CASE;
    tpu_shape_t s = SHAPE(2);
    EXPECT_ERROR(g, tpu_graph_parameter(g, (tpu_dtype_t)42, &s, NULL),
                 "parameter: parameter dtype 42 is invalid");
    CHECK(tpu_graph_status(g) == TPU_ERR_INVALID_ARGUMENT);
    CHECK(tpu_graph_num_params(g) == 0);
    END_CASE;
  }
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_parameter(g, TPU_F32, NULL, NULL), "parameter: shape is NULL");
    END_CASE;
  }
  {
    CASE;
    tpu_shape_t s = SHAPE(1);
    s.rank = 9;
    EXPECT_ERROR(g, tpu_graph_parameter(g, TPU_F32, &s, NULL), "parameter: rank 9 is outside 0..8");
    END_CASE;
  }
  {
    CASE;
    tpu_shape_t s = SHAPE(2, -3);
    EXPECT_ERROR(g, tpu_graph_parameter(g, TPU_F32, &s, NULL),
                 "parameter: parameter dim 1 has negative size -3");
    END_CASE;
  }
  {
    CASE;
    tpu_shape_t s = SHAPE(1LL << 40, 1LL << 40);
    EXPECT_ERROR(g, tpu_graph_parameter(g, TPU_F32, &s, NULL), "element count overflows int64");
    END_CASE;
  }
  {
    CASE; /* 2^62 elements fit, 2^62 * 4 bytes do not */
    tpu_shape_t s = SHAPE(1LL << 31, 1LL << 31);
    EXPECT_ERROR(g, tpu_graph_parameter(g, TPU_F32, &s, NULL),
                 "parameter: parameter f32[2147483648,2147483648]: byte size overflows int64");
    END_CASE;
  }
  {
    CASE;
    tpu_shape_t s = SHAPE(2, 2);
    EXPECT_ERROR(g, tpu_graph_parameter(g, TPU_F32, &s, (int64_t[]){-1, 1}),
                 "parameter: stride -1 of dim 0 is negative");
    END_CASE;
  }
}

TEST(constants_iota_rng) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(2, 2), sc = SCALAR;
  tpu_value_t f = tpu_graph_constant(g, TPU_BF16, &s, 0.5);
  tpu_value_t i = tpu_graph_constant(g, TPU_I32, &s, -3.0);
  tpu_value_t b = tpu_graph_constant(g, TPU_BOOL, &s, 2.0);
  tpu_value_t fi = tpu_graph_constant_int(g, TPU_F64, &sc, 7);
  tpu_value_t u = tpu_graph_constant_int(g, TPU_U8, &sc, 255);
  EXPECT_TYPE(g, f, "bf16[2,2]");
  EXPECT_TYPE(g, i, "i32[2,2]");
  EXPECT_TYPE(g, b, "i1[2,2]");
  EXPECT_TYPE(g, u, "ui8[]");
  CHECK(tpu_graph_node(g, f)->attrs.constant.value == 0.5);
  CHECK(tpu_graph_node(g, i)->attrs.constant.ivalue == -3);
  CHECK(tpu_graph_node(g, b)->attrs.constant.ivalue == 1);
  CHECK(tpu_graph_node(g, fi)->attrs.constant.value == 7.0);
  tpu_shape_t is = SHAPE(3, 4);
  tpu_value_t io = tpu_graph_iota(g, TPU_I64, &is, 1);
  EXPECT_TYPE(g, io, "i64[3,4]");
  CHECK(tpu_graph_node(g, io)->attrs.iota.dim == 1);
  tpu_value_t seed = ir_param(g, TPU_I64, SCALAR), off = ir_param(g, TPU_I64, SCALAR);
  tpu_shape_t rs = SHAPE(5, 6);
  EXPECT_TYPE(g, tpu_graph_rng(g, TPU_RNG_UNIFORM, TPU_F32, &rs, seed, off), "f32[5,6]");
  EXPECT_TYPE(g, tpu_graph_rng(g, TPU_RNG_NORMAL, TPU_BF16, &rs, seed, off), "bf16[5,6]");
  EXPECT_TYPE(g, tpu_graph_rng(g, TPU_RNG_BITS, TPU_I64, &rs, seed, off), "i64[5,6]");
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_destroy(g);
}

TEST(constant_iota_rng_errors) {
  tpu_shape_t s = SHAPE(2), sc = SCALAR;
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_constant_int(g, TPU_I8, &s, 300),
                 "constant: value 300 does not fit in i8");
    END_CASE;
  }
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_constant_int(g, TPU_U8, &s, -1), "value -1 does not fit in ui8");
    END_CASE;
  }
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_constant(g, TPU_I32, &s, 1.5),
                 "constant: value 1.5 is not an integer (dtype i32)");
    END_CASE;
  }
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_constant(g, TPU_I64, &s, NAN), "is not an integer");
    END_CASE;
  }
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_constant(g, TPU_I64, &s, 1e19), "value 1e+19 does not fit in i64");
    END_CASE;
  }
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_iota(g, TPU_BOOL, &s, 0),
                 "iota: result dtype i1 is not supported (needs a float or integer type)");
    END_CASE;
  }
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_iota(g, TPU_I32, &s, 1), "iota: dim 1 is outside 0..0");
    END_CASE;
  }
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_iota(g, TPU_I32, &sc, 0), "iota: result must have rank >= 1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t seed = ir_param(g, TPU_F32, SCALAR), off = ir_param(g, TPU_I64, SCALAR);
    EXPECT_ERROR(g, tpu_graph_rng(g, TPU_RNG_UNIFORM, TPU_F32, &s, seed, off),
                 "rng: seed must be an i64 scalar, got f32[]");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t seed = ir_param(g, TPU_I64, SCALAR), off = ir_param(g, TPU_I64, SHAPE(1));
    EXPECT_ERROR(g, tpu_graph_rng(g, TPU_RNG_UNIFORM, TPU_F32, &s, seed, off),
                 "rng: offset must be an i64 scalar, got i64[1]");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t seed = ir_param(g, TPU_I64, SCALAR), off = ir_param(g, TPU_I64, SCALAR);
    EXPECT_ERROR(g, tpu_graph_rng(g, TPU_RNG_BITS, TPU_I32, &s, seed, off),
                 "rng: BITS needs an i64 result, got i32");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t seed = ir_param(g, TPU_I64, SCALAR), off = ir_param(g, TPU_I64, SCALAR);
    EXPECT_ERROR(g, tpu_graph_rng(g, TPU_RNG_NORMAL, TPU_I64, &s, seed, off),
                 "rng: result dtype i64 is not supported (needs a float type)");
    END_CASE;
  }
}

/* ---- elementwise ------------------------------------------------------------------------- */

TEST(unary_ops) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F16, SHAPE(2, 3));
  for (int op = 0; op < TPU_OP_COUNT; op++) {
    if (tpu_op_family((tpu_op_t)op) != TPU_FAMILY_UNARY || op == TPU_OP_NOT ||
        op == TPU_OP_CONVERT || op == TPU_OP_BITCAST_CONVERT) {
      continue;
    }
    EXPECT_TYPE(g, tpu_graph_unary(g, (tpu_op_t)op, x),
                op == TPU_OP_IS_FINITE ? "i1[2,3]" : "f16[2,3]");
  }
  tpu_value_t i = ir_param(g, TPU_I8, SHAPE(4));
  EXPECT_TYPE(g, tpu_graph_unary(g, TPU_OP_NEG, i), "i8[4]");
  EXPECT_TYPE(g, tpu_graph_unary(g, TPU_OP_ABS, i), "i8[4]");
  EXPECT_TYPE(g, tpu_graph_unary(g, TPU_OP_SIGN, i), "i8[4]");
  EXPECT_TYPE(g, tpu_graph_unary(g, TPU_OP_NOT, i), "i8[4]");
  tpu_value_t b = tpu_graph_compare(g, TPU_CMP_LT, i, i);
  EXPECT_TYPE(g, tpu_graph_unary(g, TPU_OP_NOT, b), "i1[4]");
  CHECK(tpu_graph_status(g) == TPU_OK);
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_destroy(g);
}

TEST(unary_errors) {
  {
    CASE;
    tpu_value_t i = ir_param(g, TPU_I32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_unary(g, TPU_OP_EXP, i),
                 "unary EXP: operand dtype i32 is not supported (needs a float type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2));
    tpu_value_t b = tpu_graph_compare(g, TPU_CMP_EQ, x, x);
    EXPECT_ERROR(g, tpu_graph_unary(g, TPU_OP_LOG, b), "unary LOG: operand dtype i1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_unary(g, TPU_OP_NOT, x),
                 "unary NOT: operand dtype f32 is not supported (needs an integer or bool type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t u = ir_param(g, TPU_U8, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_unary(g, TPU_OP_ABS, u),
                 "unary ABS: operand dtype ui8 is not supported (needs a float or signed "
                 "integer type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_unary(g, TPU_OP_ADD, x), "unary: ADD is not a unary op");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_unary(g, TPU_OP_CONVERT, x),
                 "unary: CONVERT needs a result dtype (use tpu_graph_convert");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_unary(g, (tpu_op_t)1000, x), "unary: INVALID_OP is not a unary op");
    END_CASE;
  }
}

TEST(convert_and_bitcast) {
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(3));
    tpu_value_t i = ir_param(g, TPU_I16, SHAPE(3));
    for (int d = 0; d < TPU_DTYPE_COUNT; d++) {
      tpu_value_t c = tpu_graph_convert(g, x, (tpu_dtype_t)d);
      CHECK(c != TPU_NO_VALUE && tpu_graph_node(g, c)->dtype == (tpu_dtype_t)d);
      tpu_value_t back = tpu_graph_convert(g, c, TPU_F32);
      EXPECT_TYPE(g, back, "f32[3]");
    }
    EXPECT_TYPE(g, tpu_graph_bitcast_convert(g, x, TPU_I32), "i32[3]");
    EXPECT_TYPE(g, tpu_graph_bitcast_convert(g, i, TPU_BF16), "bf16[3]");
    EXPECT_TYPE(g, tpu_graph_bitcast_convert(g, i, TPU_F16), "f16[3]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t y = ir_param(g, TPU_F32, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_bitcast_convert(g, y, TPU_I16),
                 "bitcast_convert: element sizes differ: f32 is 4 bytes, i16 is 2 bytes");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t y = ir_param(g, TPU_I8, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_bitcast_convert(g, y, TPU_BOOL),
                 "bitcast_convert: bool (i1) has no bit layout to reinterpret (i8 -> i1)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t y = ir_param(g, TPU_I8, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_convert(g, y, TPU_DTYPE_COUNT),
                 "convert: result dtype 10 is invalid");
    END_CASE;
  }
}

TEST(binary_ops) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_value_t i = ir_param(g, TPU_I64, SHAPE(2, 3));
  tpu_value_t b = tpu_graph_compare(g, TPU_CMP_LT, x, x);
  for (int op = 0; op < TPU_OP_COUNT; op++) {
    if (tpu_op_family((tpu_op_t)op) != TPU_FAMILY_BINARY || tpu_op_arity((tpu_op_t)op) != 2) {
      continue;
    }
    bool logic = op == TPU_OP_AND || op == TPU_OP_OR || op == TPU_OP_XOR ||
                 op == TPU_OP_SHIFT_LEFT || op == TPU_OP_SHIFT_RIGHT;
    if (!logic) EXPECT_TYPE(g, tpu_graph_binary(g, (tpu_op_t)op, x, x), "f32[2,3]");
    if (op != TPU_OP_ATAN2) EXPECT_TYPE(g, tpu_graph_binary(g, (tpu_op_t)op, i, i), "i64[2,3]");
  }
  static const tpu_op_t bool_ops[] = {TPU_OP_ADD, TPU_OP_MUL, TPU_OP_MAX, TPU_OP_MIN,
                                      TPU_OP_AND, TPU_OP_OR, TPU_OP_XOR};
  for (size_t k = 0; k < sizeof(bool_ops) / sizeof(bool_ops[0]); k++) {
    EXPECT_TYPE(g, tpu_graph_binary(g, bool_ops[k], b, b), "i1[2,3]");
  }
  tpu_value_t s = ir_param(g, TPU_F32, SCALAR);
  EXPECT_TYPE(g, tpu_graph_binary(g, TPU_OP_POW, s, s), "f32[]");
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_destroy(g);
}

TEST(binary_errors) {
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3)), b = ir_param(g, TPU_F32, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_ADD, a, b),
                 "binary ADD: operand shapes f32[2,3] and f32[3] differ");
    CHECK(strcmp(tpu_graph_error_message(g),
                 "binary ADD: operand shapes f32[2,3] and f32[3] differ") == 0);
    /* the thread's status message says the same */
    CHECK(strcmp(tpu_status_message(), tpu_graph_error_message(g)) == 0);
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2)), b = ir_param(g, TPU_BF16, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_MUL, a, b),
                 "binary MUL: operand dtypes f32 and bf16 differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_AND, a, a),
                 "binary AND: operand dtype f32 is not supported (needs an integer or bool "
                 "type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    tpu_value_t b = tpu_graph_compare(g, TPU_CMP_EQ, a, a);
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_SHIFT_LEFT, b, b),
                 "binary SHIFT_LEFT: operand dtype i1 is not supported (needs an integer type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    tpu_value_t b = tpu_graph_compare(g, TPU_CMP_EQ, a, a);
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_SUB, b, b), "binary SUB: operand dtype i1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_I32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_ATAN2, a, a), "binary ATAN2: operand dtype i32");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_EXP, a, a), "binary: EXP is not a binary op");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_SELECT, a, a), "binary: SELECT is not a binary op");
    END_CASE;
  }
}

TEST(compare_select_clamp) {
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t x = ir_param(g, TPU_BF16, SHAPE(4, 1));
    tpu_value_t y = ir_param(g, TPU_BF16, SHAPE(4, 1));
    tpu_value_t p = tpu_graph_compare(g, TPU_CMP_GE, x, y);
    EXPECT_TYPE(g, p, "i1[4,1]");
    CHECK(tpu_graph_node(g, p)->attrs.compare.direction == TPU_CMP_GE);
    EXPECT_TYPE(g, tpu_graph_select(g, p, x, y), "bf16[4,1]");
    tpu_value_t lo = ir_param(g, TPU_BF16, SCALAR);
    EXPECT_TYPE(g, tpu_graph_clamp(g, lo, x, lo), "bf16[4,1]");
    EXPECT_TYPE(g, tpu_graph_clamp(g, x, y, x), "bf16[4,1]");
    EXPECT_TYPE(g, tpu_graph_clamp(g, lo, x, y), "bf16[4,1]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2)), b = ir_param(g, TPU_F32, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_compare(g, TPU_CMP_EQ, a, b),
                 "compare: operand shapes f32[2] and f32[3] differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_compare(g, (tpu_compare_dir_t)9, a, a),
                 "compare: direction 9 is invalid");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_select(g, a, a, a), "select: pred dtype f32 is not bool (i1)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    tpu_value_t s = ir_param(g, TPU_F32, SCALAR);
    tpu_value_t p0 = tpu_graph_compare(g, TPU_CMP_EQ, s, s);
    EXPECT_ERROR(g, tpu_graph_select(g, p0, a, a),
                 "select: pred/on_true shapes i1[] and f32[2] differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2)), b = ir_param(g, TPU_F16, SHAPE(2));
    tpu_value_t p0 = tpu_graph_compare(g, TPU_CMP_EQ, a, a);
    EXPECT_ERROR(g, tpu_graph_select(g, p0, a, b),
                 "select: on_true/on_false dtypes f32 and f16 differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 2)), b = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_clamp(g, b, a, b),
                 "clamp: min/operand shapes f32[2] and f32[2,2] differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2)), b = ir_param(g, TPU_I32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_clamp(g, b, a, b), "clamp: min/operand dtypes i32 and f32 differ");
    END_CASE;
  }
}

/* ---- errors are sticky; TPU_NO_VALUE propagates -------------------------------------------- */

TEST(first_error_is_sticky_and_no_value_propagates) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_value_t y = ir_param(g, TPU_F32, SHAPE(3));
  tpu_value_t bad = tpu_graph_binary(g, TPU_OP_ADD, x, y);
  CHECK(bad == TPU_NO_VALUE);
  const char *first = "binary ADD: operand shapes f32[2,3] and f32[3] differ";
  CHECK(strcmp(tpu_graph_error_message(g), first) == 0);
  int nodes = tpu_graph_num_nodes(g);
  /* every builder given TPU_NO_VALUE returns TPU_NO_VALUE and adds nothing */
  tpu_shape_t s = SHAPE(6);
  CHECK(tpu_graph_unary(g, TPU_OP_EXP, bad) == TPU_NO_VALUE);
  CHECK(tpu_graph_binary(g, TPU_OP_MUL, bad, x) == TPU_NO_VALUE);
  CHECK(tpu_graph_reshape(g, bad, &s) == TPU_NO_VALUE);
  CHECK(tpu_graph_transpose(g, bad, (int64_t[]){1, 0}) == TPU_NO_VALUE);
  CHECK(tpu_graph_reduce(g, TPU_REDUCE_SUM, bad, (bool[]){true, true}) == TPU_NO_VALUE);
  CHECK(tpu_graph_dynamic_slice(g, bad, NULL, NULL) == TPU_NO_VALUE);
  CHECK(tpu_graph_concatenate(g, (tpu_value_t[]){x, bad}, 2, 0) == TPU_NO_VALUE);
  CHECK(tpu_graph_select(g, bad, x, x) == TPU_NO_VALUE);
  tpu_gather_attrs_t ga = {0};
  tpu_scatter_attrs_t sa = {0};
  CHECK(tpu_graph_gather(g, x, bad, &ga) == TPU_NO_VALUE);
  CHECK(tpu_graph_scatter(g, x, bad, x, &sa) == TPU_NO_VALUE);
  CHECK(tpu_graph_num_nodes(g) == nodes);
  /* a later, different error does not replace the first */
  CHECK(tpu_graph_unary(g, TPU_OP_NOT, x) == TPU_NO_VALUE);
  CHECK(strcmp(tpu_graph_error_message(g), first) == 0);
  CHECK(tpu_graph_status(g) == TPU_ERR_INVALID_ARGUMENT);
  /* but the thread's status message names the latest problem */
  CHECK_CONTAINS(tpu_status_message(), "unary NOT");
  /* output of TPU_NO_VALUE reports the graph's error */
  CHECK(tpu_graph_output(g, bad, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(tpu_status_message(), first) == 0);
  CHECK(tpu_graph_num_outputs(g) == 0);
  /* valid requests still build */
  EXPECT_TYPE(g, tpu_graph_unary(g, TPU_OP_EXP, x), "f32[2,3]");
  CHECK(tpu_graph_verify(g) == TPU_ERR_INVALID_ARGUMENT);
  tpu_graph_destroy(g);
}

TEST(no_value_in_a_clean_graph_is_an_error) {
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_unary(g, TPU_OP_EXP, TPU_NO_VALUE),
                 "unary EXP: operand 0 is TPU_NO_VALUE");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_ADD, x, 5),
                 "binary ADD: operand 1 (value 5) is not a value of this graph (1 nodes)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_binary(g, TPU_OP_ADD, x, -7), "operand 1 (value -7) is not a value");
    END_CASE;
  }
  {
    CASE;
    CHECK(tpu_graph_output(g, TPU_NO_VALUE, NULL) == TPU_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(tpu_graph_error_message(g), "output: value is TPU_NO_VALUE");
    END_CASE;
  }
  {
    CASE;
    CHECK(tpu_graph_output(g, 3, NULL) == TPU_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(tpu_graph_error_message(g), "output: value 3 is not a node of this graph");
    END_CASE;
  }
}

TEST(outputs_with_and_without_strides) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_value_t y = tpu_graph_unary(g, TPU_OP_NEG, x);
  CHECK_OK(tpu_graph_output(g, y, NULL));
  CHECK_OK(tpu_graph_output(g, x, (int64_t[]){1, 2}));
  CHECK_OK(tpu_graph_output(g, y, NULL));
  CHECK(tpu_graph_num_outputs(g) == 3);
  CHECK(tpu_graph_output_value(g, 0) == y && tpu_graph_output_value(g, 1) == x);
  CHECK(tpu_graph_output_value(g, 3) == TPU_NO_VALUE);
  CHECK(tpu_graph_output_value(g, -1) == TPU_NO_VALUE);
  int64_t st[TPU_MAX_RANK] = {9, 9, 9, 9, 9, 9, 9, 9};
  CHECK(!tpu_graph_output_strides(g, 0, st) && st[0] == 9);
  CHECK(tpu_graph_output_strides(g, 1, st) && st[0] == 1 && st[1] == 2 && st[2] == 0);
  CHECK(!tpu_graph_output_strides(g, 5, st));
  CHECK(tpu_graph_output(g, y, (int64_t[]){-3, 1}) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_graph_error_message(g), "output: stride -3 of dim 0 is negative");
  tpu_graph_destroy(g);
}

TEST(node_storage_grows) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4));
  tpu_value_t acc = x;
  for (int i = 0; i < 20000; i++) {
    acc = tpu_graph_binary(g, i % 2 ? TPU_OP_ADD : TPU_OP_MUL, acc, x);
  }
  tpu_value_t parts[300];
  for (int i = 0; i < 300; i++) parts[i] = acc;
  tpu_value_t cat = tpu_graph_concatenate(g, parts, 300, 0);
  EXPECT_TYPE(g, cat, "f32[1200]");
  CHECK_OK(tpu_graph_output(g, cat, NULL));
  CHECK(tpu_graph_num_nodes(g) == 20002);
  CHECK(tpu_graph_node(g, 20000)->operands[0] == 19999);
  CHECK(tpu_graph_node(g, cat)->num_operands == 300);
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_destroy(g);
}

/* x -> (x * x + x) summed over dim 1, an output; |n| more MUL nodes first. */
static void build_small(tpu_graph_t *g, int n) {
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4, 3));
  tpu_value_t acc = x;
  for (int i = 0; i < n; i++) acc = tpu_graph_binary(g, TPU_OP_MUL, acc, x);
  tpu_value_t s = tpu_graph_binary(g, TPU_OP_ADD, tpu_graph_binary(g, TPU_OP_MUL, x, x), acc);
  CHECK_OK(tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, s, (bool[]){false, true}),
                            NULL));
}

TEST(clear_empties_a_graph_for_reuse) {
  tpu_graph_t *fresh = ir_graph(), *g = ir_graph();
  build_small(fresh, 0);
  /* a large graph with an error, cleared, then rebuilt: the same graph as a fresh one */
  build_small(g, 5000);
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2));
  CHECK(tpu_graph_unary(g, TPU_OP_NOT, x) == TPU_NO_VALUE);
  CHECK(tpu_graph_status(g) != TPU_OK);
  tpu_graph_clear(g);
  CHECK(tpu_graph_status(g) == TPU_OK);
  CHECK(strcmp(tpu_graph_error_message(g), "") == 0);
  CHECK(tpu_graph_num_nodes(g) == 0 && tpu_graph_num_params(g) == 0);
  CHECK(tpu_graph_num_outputs(g) == 0 && tpu_graph_node(g, 0) == NULL);
  CHECK_OK(tpu_graph_verify(g));
  for (int round = 0; round < 3; round++) {
    build_small(g, 0);
    CHECK(tpu_graph_num_nodes(g) == tpu_graph_num_nodes(fresh));
    CHECK(tpu_graph_num_params(g) == 1 && tpu_graph_num_outputs(g) == 1);
    CHECK(tpu_graph_hash(g) == tpu_graph_hash(fresh));
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_clear(g);
  }
  /* a graph past the kept storage (arrays of more than 8 MiB) clears too, and regrows */
  tpu_value_t p = ir_param(g, TPU_F32, SHAPE(2));
  tpu_value_t parts[300];
  for (int i = 0; i < 300; i++) parts[i] = p;
  for (int i = 0; i < 100; i++) tpu_graph_concatenate(g, parts, 300, 0);
  size_t big = (((size_t)8 << 20) / sizeof(tpu_node_t)) + 1;
  for (size_t i = 0; i < big; i++) tpu_graph_unary(g, TPU_OP_NEG, p);
  CHECK_OK(tpu_graph_status(g));
  tpu_graph_clear(g);
  build_small(g, 0);
  CHECK(tpu_graph_hash(g) == tpu_graph_hash(fresh));
  tpu_graph_clear(NULL);
  tpu_graph_clear(g);
  tpu_graph_clear(g);  /* an empty graph clears */
  CHECK(tpu_graph_num_nodes(g) == 0);
  tpu_graph_destroy(g);
  tpu_graph_destroy(fresh);
}

/* An allocator that fails after |budget| allocations. */
typedef struct { int budget; } limited_t;
static void *limited_alloc(void *self, size_t size, size_t align) {
  limited_t *l = self;
  if (l->budget-- <= 0) return NULL;
  return tpu_allocator_system().alloc(NULL, size, align);
}
static void limited_free(void *self, void *p) {
  (void)self;
  tpu_allocator_system().free(NULL, p);
}

TEST(out_of_memory_is_recorded) {
  for (int budget = 0; budget < 6; budget++) {
    limited_t l = {budget};
    tpu_allocator_t a = {&l, limited_alloc, limited_free};
    tpu_graph_t *g = NULL;
    tpu_status_t st = tpu_graph_create(a, &g);
    if (budget == 0) {
      CHECK(st == TPU_ERR_OUT_OF_MEMORY && g == NULL);
      continue;
    }
    CHECK_OK(st);
    tpu_shape_t s = SHAPE(3);
    tpu_value_t x = tpu_graph_parameter(g, TPU_F32, &s, NULL);
    tpu_value_t v = x;
    for (int i = 0; i < 100 && v != TPU_NO_VALUE; i++) v = tpu_graph_binary(g, TPU_OP_ADD, v, x);
    tpu_status_t out = tpu_graph_output(g, v, NULL);
    for (int i = 0; i < 100 && out == TPU_OK; i++) out = tpu_graph_output(g, v, NULL);
    CHECK(tpu_graph_status(g) == TPU_ERR_OUT_OF_MEMORY);
    CHECK_CONTAINS(tpu_graph_error_message(g), "out of host memory");
    tpu_graph_destroy(g);
  }
}

int main(void) {
  RUN(graph_create_and_destroy);
  RUN(op_table_comes_from_ops_def);
  RUN(shape_numel_and_equal);
  RUN(parameters_are_numbered_in_call_order);
  RUN(parameter_errors);
  RUN(constants_iota_rng);
  RUN(constant_iota_rng_errors);
  RUN(unary_ops);
  RUN(unary_errors);
  RUN(convert_and_bitcast);
  RUN(binary_ops);
  RUN(binary_errors);
  RUN(compare_select_clamp);
  RUN(first_error_is_sticky_and_no_value_propagates);
  RUN(no_value_in_a_clean_graph_is_an_error);
  RUN(outputs_with_and_without_strides);
  RUN(node_storage_grows);
  RUN(clear_empties_a_graph_for_reuse);
  RUN(out_of_memory_is_recorded);
  return check_report();
}
