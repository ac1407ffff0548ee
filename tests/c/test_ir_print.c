/* test_ir_print.c: the StableHLO printer on representative graphs (MLP layer, softmax,
 * convolution, gather, sort/argsort, ARGMAX, SCAN, scatter, RNG, cholesky and
 * triangular_solve, every elementwise op),
 * checked by golden substrings of the text.
 *
 * With TPU_STABLEHLO_DUMP_DIR=<dir> set, each module is also written to <dir>/<name>.mlir;
 * tests/python/stablehlo_check.py uses that to parse, compile and run them with jax.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir_util.h"
#include "tpu/ir.h"

/* ---- graphs ------------------------------------------------------------------------------ */

/* relu(x @ w + b): x f32[4,3], w f32[3,5], b f32[5] */
static tpu_graph_t *build_mlp(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4, 3));
  tpu_value_t w = ir_param(g, TPU_F32, SHAPE(3, 5));
  tpu_value_t b = ir_param(g, TPU_F32, SHAPE(5));
  tpu_dot_attrs_t dot = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
  tpu_value_t h = tpu_graph_dot_general(g, x, w, &dot, TPU_F32);
  tpu_shape_t s = SHAPE(4, 5);
  tpu_value_t bb = tpu_graph_broadcast_in_dim(g, b, &s, (int64_t[]){1});
  tpu_value_t z = tpu_graph_binary(g, TPU_OP_ADD, h, bb);
  tpu_value_t zero = tpu_graph_constant(g, TPU_F32, &s, 0.0);
  tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_MAX, z, zero), NULL);
  return g;
}

/* softmax over dim 1 of f32[2,5] */
static tpu_graph_t *build_softmax(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 5));
  tpu_shape_t s = SHAPE(2, 5);
  bool d1[] = {false, true};
  tpu_value_t m = tpu_graph_reduce(g, TPU_REDUCE_MAX, x, d1);
  tpu_value_t mb = tpu_graph_broadcast_in_dim(g, m, &s, (int64_t[]){0});
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, tpu_graph_binary(g, TPU_OP_SUB, x, mb));
  tpu_value_t sum = tpu_graph_reduce(g, TPU_REDUCE_SUM, e, d1);
  tpu_value_t sb = tpu_graph_broadcast_in_dim(g, sum, &s, (int64_t[]){0});
  tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_DIV, e, sb), NULL);
  return g;
}

/* NHWC x HWIO -> NHWC, 3x3 kernel, pad 1: f32[1,5,5,2] * f32[3,3,2,4] -> f32[1,5,5,4] */
static tpu_graph_t *build_conv(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(1, 5, 5, 2));
  tpu_value_t k = ir_param(g, TPU_F32, SHAPE(3, 3, 2, 4));
  tpu_conv_attrs_t c = {
      .num_spatial = 2, .stride = {1, 1}, .pad_lo = {1, 1}, .pad_hi = {1, 1},
      .lhs_dilation = {1, 1}, .rhs_dilation = {1, 1}, .feature_group_count = 1,
      .batch_group_count = 1, .in_batch = 0, .in_feature = 3, .in_spatial = {1, 2},
      .k_out_feature = 3, .k_in_feature = 2, .k_spatial = {0, 1}, .out_batch = 0,
      .out_feature = 3, .out_spatial = {1, 2}, .precision = TPU_PRECISION_HIGHEST};
  tpu_graph_output(g, tpu_graph_convolution(g, x, k, &c, TPU_F32), NULL);
  return g;
}

/* embedding lookup: table f32[5,3], ids i32[2] -> f32[2,3] */
static tpu_graph_t *build_gather(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t t = ir_param(g, TPU_F32, SHAPE(5, 3));
  tpu_value_t ids = ir_param(g, TPU_I32, SHAPE(2));
  tpu_shape_t s = SHAPE(2, 1);
  tpu_value_t ix = tpu_graph_reshape(g, ids, &s);
  tpu_gather_attrs_t a = {.num_offset_dims = 1, .offset_dims = {1}, .num_collapsed = 1,
                          .collapsed_slice_dims = {0}, .num_start_index_map = 1,
                          .start_index_map = {0}, .index_vector_dim = 1,
                          .slice_sizes = {1, 3}, .check_bounds = true};
  tpu_graph_output(g, tpu_graph_gather(g, t, ix, &a), NULL);
  return g;
}

/* sort descending and argsort ascending of f32[2,4] along dim 1 */
static tpu_graph_t *build_sort(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 4));
  tpu_sort_attrs_t desc = {.dim = 1, .descending = true, .stable = true};
  tpu_sort_attrs_t asc = {.dim = 1, .descending = false, .stable = true};
  tpu_graph_output(g, tpu_graph_sort(g, x, &desc), NULL);
  tpu_graph_output(g, tpu_graph_argsort(g, x, &asc), NULL);
  tpu_value_t xi = ir_param(g, TPU_I32, SHAPE(5));
  tpu_sort_attrs_t a0 = {.dim = 0, .descending = false, .stable = false};
  tpu_graph_output(g, tpu_graph_sort(g, xi, &a0), NULL);
  return g;
}

/* argmax of f32[2,4] over dim 1, argmin of i32[3,2] over dim 0 */
static tpu_graph_t *build_argmax(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 4));
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_ARGMAX, x, (bool[]){false, true}), NULL);
  tpu_value_t y = ir_param(g, TPU_I32, SHAPE(3, 2));
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_ARGMIN, y, (bool[]){true, false}), NULL);
  return g;
}

/* cumsum and cummax of f32[2,4] along dim 1 */
static tpu_graph_t *build_scan(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 4));
  tpu_graph_output(g, tpu_graph_scan(g, TPU_REDUCE_SUM, x, 1), NULL);
  tpu_graph_output(g, tpu_graph_scan(g, TPU_REDUCE_MAX, x, 1), NULL);
  return g;
}

/* x f32[4,3]; rows idx i32[2] of x += upd f32[2,3]; also a replacing and a max scatter */
static tpu_graph_t *build_scatter(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4, 3));
  tpu_value_t idx = ir_param(g, TPU_I32, SHAPE(2, 1));
  tpu_value_t upd = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_scatter_attrs_t a = {.num_update_window_dims = 1, .update_window_dims = {1},
                           .num_inserted_window_dims = 1, .inserted_window_dims = {0},
                           .num_scatter_dims = 1, .scatter_dims_to_operand_dims = {0},
                           .index_vector_dim = 1, .kind = TPU_SCATTER_ADD};
  tpu_graph_output(g, tpu_graph_scatter(g, x, idx, upd, &a), NULL);
  a.kind = TPU_SCATTER_REPLACE;
  tpu_graph_output(g, tpu_graph_scatter(g, x, idx, upd, &a), NULL);
  a.kind = TPU_SCATTER_MAX;
  tpu_graph_output(g, tpu_graph_scatter(g, x, idx, upd, &a), NULL);
  return g;
}

/* 2x2 max pool, stride 2, on f32[1,4,4,1]; 3-wide sum window with padding on f32[5] */
static tpu_graph_t *build_pool(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(1, 4, 4, 1));
  tpu_reduce_window_attrs_t a = {.kind = TPU_REDUCE_MAX, .window = {1, 2, 2, 1},
                                 .stride = {1, 2, 2, 1}, .dilation = {1, 1, 1, 1}};
  tpu_graph_output(g, tpu_graph_reduce_window(g, x, &a), NULL);
  tpu_value_t y = ir_param(g, TPU_F32, SHAPE(5));
  tpu_reduce_window_attrs_t b = {.kind = TPU_REDUCE_SUM, .window = {3}, .stride = {1},
                                 .dilation = {1}, .pad_lo = {1}, .pad_hi = {1}};
  tpu_graph_output(g, tpu_graph_reduce_window(g, y, &b), NULL);
  return g;
}

static tpu_graph_t *build_rng(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t seed = ir_param(g, TPU_I64, SCALAR);
  tpu_value_t off = ir_param(g, TPU_I64, SCALAR);
  tpu_shape_t s23 = SHAPE(2, 3), s4 = SHAPE(4, 2), s3 = SHAPE(3);
  tpu_graph_output(g, tpu_graph_rng(g, TPU_RNG_UNIFORM, TPU_F32, &s23, seed, off), NULL);
  tpu_graph_output(g, tpu_graph_rng(g, TPU_RNG_NORMAL, TPU_BF16, &s4, seed, off), NULL);
  tpu_graph_output(g, tpu_graph_rng(g, TPU_RNG_BITS, TPU_I64, &s3, seed, off), NULL);
  return g;
}

/* every unary op on f32[3], the integer/bool ones on i32/bool */
static tpu_graph_t *build_unary(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(3));
  for (int op = 0; op < TPU_OP_COUNT; op++) {
    if (tpu_op_family((tpu_op_t)op) != TPU_FAMILY_UNARY || op == TPU_OP_NOT ||
        op == TPU_OP_CONVERT || op == TPU_OP_BITCAST_CONVERT) {
      continue;
    }
    tpu_graph_output(g, tpu_graph_unary(g, (tpu_op_t)op, x), NULL);
  }
  tpu_value_t i = ir_param(g, TPU_I32, SHAPE(3));
  tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_NOT, i), NULL);
  tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_NEG, i), NULL);
  tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_ABS, i), NULL);
  tpu_graph_output(g, tpu_graph_convert(g, x, TPU_BF16), NULL);
  tpu_graph_output(g, tpu_graph_convert(g, x, TPU_BOOL), NULL);
  tpu_graph_output(g, tpu_graph_convert(g, i, TPU_U8), NULL);
  tpu_graph_output(g, tpu_graph_bitcast_convert(g, x, TPU_I32), NULL);
  tpu_value_t b = tpu_graph_compare(g, TPU_CMP_GT, x, x);
  tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_NOT, b), NULL);
  return g;
}

/* every binary op, compare of each kind, select, clamp */
static tpu_graph_t *build_binary(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 2));
  tpu_value_t y = ir_param(g, TPU_F32, SHAPE(2, 2));
  tpu_value_t i = ir_param(g, TPU_I32, SHAPE(2, 2));
  tpu_value_t u = ir_param(g, TPU_U8, SHAPE(2, 2));
  static const tpu_op_t fops[] = {TPU_OP_ADD, TPU_OP_SUB, TPU_OP_MUL, TPU_OP_DIV, TPU_OP_REM,
                                  TPU_OP_POW, TPU_OP_MAX, TPU_OP_MIN, TPU_OP_ATAN2};
  for (size_t k = 0; k < sizeof(fops) / sizeof(fops[0]); k++) {
    tpu_graph_output(g, tpu_graph_binary(g, fops[k], x, y), NULL);
  }
  static const tpu_op_t iops[] = {TPU_OP_AND, TPU_OP_OR, TPU_OP_XOR, TPU_OP_SHIFT_LEFT,
                                  TPU_OP_SHIFT_RIGHT, TPU_OP_DIV, TPU_OP_REM};
  for (size_t k = 0; k < sizeof(iops) / sizeof(iops[0]); k++) {
    tpu_graph_output(g, tpu_graph_binary(g, iops[k], i, i), NULL);
  }
  tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_SHIFT_RIGHT, u, u), NULL);
  tpu_value_t lt = tpu_graph_compare(g, TPU_CMP_LT, x, y);
  tpu_graph_output(g, lt, NULL);
  tpu_graph_output(g, tpu_graph_compare(g, TPU_CMP_GE, i, i), NULL);
  tpu_graph_output(g, tpu_graph_compare(g, TPU_CMP_NE, u, u), NULL);
  tpu_graph_output(g, tpu_graph_compare(g, TPU_CMP_EQ, lt, lt), NULL);
  tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_XOR, lt, lt), NULL);
  tpu_graph_output(g, tpu_graph_select(g, lt, x, y), NULL);
  tpu_shape_t sc = SCALAR;
  tpu_value_t lo = tpu_graph_constant(g, TPU_F32, &sc, -1.0);
  tpu_value_t hi = tpu_graph_constant(g, TPU_F32, &sc, 1.0);
  tpu_graph_output(g, tpu_graph_clamp(g, lo, x, hi), NULL);
  tpu_graph_output(g, tpu_graph_clamp(g, x, y, x), NULL);
  return g;
}

/* data movement: transpose, slice, dynamic_slice, dynamic_update_slice, concatenate, pad,
 * reverse, iota, broadcast, reshape */
static tpu_graph_t *build_shapes(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_value_t i0 = ir_param(g, TPU_I64, SCALAR);
  tpu_value_t i1 = ir_param(g, TPU_I64, SCALAR);
  tpu_graph_output(g, tpu_graph_transpose(g, x, (int64_t[]){1, 0}), NULL);
  tpu_graph_output(g, tpu_graph_slice(g, x, (int64_t[]){0, 0}, (int64_t[]){2, 3},
                                      (int64_t[]){1, 2}), NULL);
  tpu_value_t ds = tpu_graph_dynamic_slice(g, x, (tpu_value_t[]){i0, i1}, (int64_t[]){1, 2});
  tpu_graph_output(g, ds, NULL);
  tpu_graph_output(g, tpu_graph_dynamic_update_slice(g, x, ds, (tpu_value_t[]){i0, i1}), NULL);
  tpu_graph_output(g, tpu_graph_concatenate(g, (tpu_value_t[]){x, x, x}, 3, 1), NULL);
  tpu_shape_t sc = SCALAR;
  tpu_value_t zero = tpu_graph_constant(g, TPU_F32, &sc, 0.0);
  tpu_graph_output(g, tpu_graph_pad(g, x, zero, (int64_t[]){1, -1}, (int64_t[]){0, 2},
                                    (int64_t[]){0, 1}), NULL);
  tpu_graph_output(g, tpu_graph_reverse(g, x, (bool[]){true, false}), NULL);
  tpu_shape_t s = SHAPE(4, 3);
  tpu_graph_output(g, tpu_graph_iota(g, TPU_I32, &s, 1), NULL);
  tpu_shape_t b = SHAPE(3, 2, 4);
  tpu_graph_output(g, tpu_graph_broadcast_in_dim(g, tpu_graph_transpose(g, x, (int64_t[]){1, 0}),
                                                 &b, (int64_t[]){0, 1}), NULL);
  tpu_shape_t r = SHAPE(6);
  tpu_graph_output(g, tpu_graph_reshape(g, x, &r), NULL);
  tpu_shape_t sc2 = SCALAR;
  tpu_graph_output(g, tpu_graph_reshape(g, tpu_graph_slice(g, x, (int64_t[]){0, 0},
                                                            (int64_t[]){1, 1}, NULL),
                                        &sc2), NULL);
  return g;
}

static tpu_graph_t *build_constants(void) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(2);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F32, &s, INFINITY), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F32, &s, -INFINITY), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F32, &s, NAN), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F32, &s, 0.1), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F64, &s, 0.1), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_BF16, &s, 0.1), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F16, &s, 65504.0), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F16, &s, 1e6), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_BF16, &s, -INFINITY), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F64, &s, NAN), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F32, &s, -0.0), NULL);
  tpu_graph_output(g, tpu_graph_constant_int(g, TPU_I64, &s, INT64_MIN), NULL);
  tpu_graph_output(g, tpu_graph_constant_int(g, TPU_U8, &s, 255), NULL);
  tpu_graph_output(g, tpu_graph_constant_int(g, TPU_I8, &s, -128), NULL);
  tpu_graph_output(g, tpu_graph_constant_int(g, TPU_I16, &s, 7), NULL);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_BOOL, &s, 1.0), NULL);
  tpu_graph_output(g, tpu_graph_constant_int(g, TPU_BOOL, &s, 0), NULL);
  tpu_shape_t z = SHAPE(0, 3);
  tpu_graph_output(g, tpu_graph_constant(g, TPU_F32, &z, 2.0), NULL);
  return g;
}

/* batched bf16 matmul accumulating to f32 at HIGH precision, and an outer product */
static tpu_graph_t *build_dot(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t a = ir_param(g, TPU_BF16, SHAPE(4, 2, 3));
  tpu_value_t b = ir_param(g, TPU_BF16, SHAPE(4, 3, 5));
  tpu_dot_attrs_t d = {.num_batch = 1, .lhs_batch = {0}, .rhs_batch = {0}, .num_contract = 1,
                       .lhs_contract = {2}, .rhs_contract = {1},
                       .precision = TPU_PRECISION_HIGH};
  tpu_graph_output(g, tpu_graph_dot_general(g, a, b, &d, TPU_F32), NULL);
  tpu_value_t u = ir_param(g, TPU_F32, SHAPE(2));
  tpu_value_t v = ir_param(g, TPU_F32, SHAPE(3));
  tpu_dot_attrs_t outer = {.precision = TPU_PRECISION_DEFAULT};
  tpu_graph_output(g, tpu_graph_dot_general(g, u, v, &outer, TPU_F32), NULL);
  return g;
}

/* AND/OR over bool, PROD over i32, MIN over u8, a reduce of nothing and of everything */
static tpu_graph_t *build_reduce_kinds(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t f = ir_param(g, TPU_F32, SHAPE(2, 3));
  tpu_value_t b = tpu_graph_compare(g, TPU_CMP_GT, f, f);
  tpu_value_t i = ir_param(g, TPU_I32, SHAPE(2, 3));
  tpu_value_t u = ir_param(g, TPU_U8, SHAPE(2, 3));
  bool d1[] = {false, true}, none[] = {false, false}, all[] = {true, true};
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_AND, b, d1), NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_OR, b, d1), NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_PROD, i, d1), NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_AND, i, d1), NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_MIN, u, d1), NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_MAX, i, all), NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, f, none), NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_ARGMAX, b, d1), NULL);
  return g;
}

/* a graph with parameters and no outputs, and a strided parameter and output */
static tpu_graph_t *build_strided(void) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(2, 3);
  tpu_value_t x = tpu_graph_parameter(g, TPU_F32, &s, (int64_t[]){1, 2});
  tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_NEG, x), (int64_t[]){1, 2});
  return g;
}

/* rank-0 and zero-size variants of ops whose printed form has lists */
static tpu_graph_t *build_edges(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t s = ir_param(g, TPU_F32, SCALAR);
  tpu_value_t z = ir_param(g, TPU_F32, SHAPE(2, 0));
  tpu_shape_t sc = SCALAR;
  tpu_reduce_window_attrs_t rw = {.kind = TPU_REDUCE_SUM};
  tpu_graph_output(g, tpu_graph_reduce_window(g, s, &rw), NULL);
  tpu_graph_output(g, tpu_graph_slice(g, s, NULL, NULL, NULL), NULL);
  tpu_graph_output(g, tpu_graph_transpose(g, s, NULL), NULL);
  tpu_graph_output(g, tpu_graph_reverse(g, s, NULL), NULL);
  tpu_graph_output(g, tpu_graph_dynamic_slice(g, s, NULL, NULL), NULL);
  tpu_graph_output(g, tpu_graph_dynamic_update_slice(g, s, s, NULL), NULL);
  tpu_graph_output(g, tpu_graph_pad(g, s, s, NULL, NULL, NULL), NULL);
  tpu_graph_output(g, tpu_graph_broadcast_in_dim(g, s, &sc, NULL), NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, s, NULL), NULL);
  tpu_graph_output(g, tpu_graph_scan(g, TPU_REDUCE_SUM, z, 1), NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_ARGMAX, z, (bool[]){false, true}), NULL);
  tpu_sort_attrs_t so = {.dim = 1};
  tpu_graph_output(g, tpu_graph_argsort(g, z, &so), NULL);
  return g;
}

static tpu_graph_t *build_empty(void) {
  tpu_graph_t *g = ir_graph();
  ir_param(g, TPU_F32, SHAPE(2));
  return g;
}

/* a = L L^T: L^-1 b and b^T L^-T (a f32[2,3,3], b f32[2,3,2]) */
static tpu_graph_t *build_linalg(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3, 3));
  tpu_value_t b = ir_param(g, TPU_F32, SHAPE(2, 3, 2));
  tpu_value_t l = tpu_graph_cholesky(g, a, true);
  tpu_triangular_solve_attrs_t left = {.left_side = true, .lower = true};
  tpu_graph_output(g, tpu_graph_triangular_solve(g, l, b, &left), NULL);
  int64_t perm[3] = {0, 2, 1};
  tpu_triangular_solve_attrs_t right = {.lower = true, .transpose_a = true};
  tpu_value_t bt = tpu_graph_transpose(g, b, perm);
  tpu_graph_output(g, tpu_graph_triangular_solve(g, l, bt, &right), NULL);
  return g;
}

/* ---- the table of graphs and golden substrings -------------------------------------------- */

typedef struct print_case {
  const char *name;
  tpu_graph_t *(*build)(void);
  const char *golden[12];
} print_case_t;

static const print_case_t kCases[] = {
    {"mlp", build_mlp, {
        "module @mlp {",
        "func.func public @main(%arg0: tensor<4x3xf32>, %arg1: tensor<3x5xf32>, "
        "%arg2: tensor<5xf32>) -> (tensor<4x5xf32>) {",
        "%v3 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], "
        "precision = [DEFAULT, DEFAULT] : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>",
        "%v4 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<5xf32>) -> "
        "tensor<4x5xf32>",
        "%v5 = stablehlo.add %v3, %v4 : tensor<4x5xf32>",
        "%v6 = stablehlo.constant dense<0.000000e+00> : tensor<4x5xf32>",
        "%v7 = stablehlo.maximum %v5, %v6 : tensor<4x5xf32>",
        "return %v7 : tensor<4x5xf32>\n  }\n}\n"}},
    {"softmax", build_softmax, {
        "stablehlo.constant dense<0xFF800000> : tensor<f32>",
        "stablehlo.reduce(%arg0 init: %t0) applies stablehlo.maximum across dimensions = [1] "
        ": (tensor<2x5xf32>, tensor<f32>) -> tensor<2xf32>",
        "stablehlo.broadcast_in_dim %v1, dims = [0] : (tensor<2xf32>) -> tensor<2x5xf32>",
        "stablehlo.subtract %arg0, %v2 : tensor<2x5xf32>",
        "%v4 = stablehlo.exponential %v3 : tensor<2x5xf32>",
        "dense<0.000000e+00> : tensor<f32>",
        "applies stablehlo.add across dimensions = [1]",
        "stablehlo.divide %v4, %v6 : tensor<2x5xf32>"}},
    {"conv", build_conv, {
        "%v2 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->"
        "[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], "
        "rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, "
        "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : "
        "(tensor<1x5x5x2xf32>, tensor<3x3x2x4xf32>) -> tensor<1x5x5x4xf32>"}},
    {"gather", build_gather, {
        "%v2 = stablehlo.reshape %arg1 : (tensor<2xi32>) -> tensor<2x1xi32>",
        "%v3 = \"stablehlo.gather\"(%arg0, %v2) <{dimension_numbers = #stablehlo.gather<"
        "offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], "
        "index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 3>}> : "
        "(tensor<5x3xf32>, tensor<2x1xi32>) -> tensor<2x3xf32>"}},
    {"sort", build_sort, {
        "%v1 = \"stablehlo.sort\"(%arg0) <{dimension = 1 : i64, is_stable = true}> ({",
        "stablehlo.compare GT, %t0, %t1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>",
        "stablehlo.compare NE, %t0, %t0, FLOAT",
        "stablehlo.return %t6 : tensor<i1>\n    }) : (tensor<2x4xf32>) -> tensor<2x4xf32>",
        "%t7 = stablehlo.iota dim = 1 : tensor<2x4xi64>",
        "%t8:2 = \"stablehlo.sort\"(%arg0, %t7) <{dimension = 1 : i64, is_stable = true}>",
        "^bb0(%t9: tensor<f32>, %t10: tensor<f32>, %t11: tensor<i64>, %t12: tensor<i64>):",
        "(tensor<2x4xf32>, tensor<2x4xi64>) -> (tensor<2x4xf32>, tensor<2x4xi64>)",
        "stablehlo.compare LT, %t18, %t19, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>",
        "is_stable = false",
        "return %v1, %t8#1, %v4 : tensor<2x4xf32>, tensor<2x4xi64>, tensor<5xi32>"}},
    {"argmax", build_argmax, {
        "%t0 = stablehlo.iota dim = 1 : tensor<2x4xi64>",
        "%t1 = stablehlo.constant dense<0xFF800000> : tensor<f32>",
        "%t2 = stablehlo.constant dense<0> : tensor<i64>",
        "%t3:2 = stablehlo.reduce(%arg0 init: %t1), (%t0 init: %t2) across dimensions = [1] : "
        "(tensor<2x4xf32>, tensor<2x4xi64>, tensor<f32>, tensor<i64>) -> (tensor<2xf32>, "
        "tensor<2xi64>)",
        "reducer(%t4: tensor<f32>, %t6: tensor<f32>) (%t5: tensor<i64>, %t7: tensor<i64>) {",
        "stablehlo.return",
        "dense<2147483647> : tensor<i32>",
        "stablehlo.compare LT, %t", 
        "return %t3#1, %t"}},
    {"scan", build_scan, {
        "%v1 = \"stablehlo.reduce_window\"(%arg0, %t0) <{base_dilations = array<i64: 1, 1>, "
        "padding = dense<[[0, 0], [3, 0]]> : tensor<2x2xi64>, window_dilations = "
        "array<i64: 1, 1>, window_dimensions = array<i64: 1, 4>, window_strides = "
        "array<i64: 1, 1>}> ({",
        "^bb0(%t1: tensor<f32>, %t2: tensor<f32>):",
        "%t3 = stablehlo.add %t1, %t2 : tensor<f32>",
        "stablehlo.return %t3 : tensor<f32>\n    }) : (tensor<2x4xf32>, tensor<f32>) -> "
        "tensor<2x4xf32>",
        "stablehlo.maximum %t5, %t6 : tensor<f32>"}},
    {"scatter", build_scatter, {
        "%v3 = \"stablehlo.scatter\"(%arg0, %arg1, %arg2) <{indices_are_sorted = false, "
        "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], "
        "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, "
        "unique_indices = false}> ({",
        "%t2 = stablehlo.add %t0, %t1 : tensor<f32>",
        "stablehlo.return %t4 : tensor<f32>",
        "%t7 = stablehlo.maximum %t5, %t6 : tensor<f32>"}},
    {"pool", build_pool, {
        "window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>",
        "-> tensor<1x2x2x1xf32>",
        "padding = dense<[[1, 1]]> : tensor<1x2xi64>",
        "(tensor<5xf32>, tensor<f32>) -> tensor<5xf32>"}},
    {"rng", build_rng, {
        "stablehlo.bitcast_convert %arg0 : (tensor<i64>) -> tensor<ui64>",
        "stablehlo.concatenate %t2, %t3, dim = 0 : (tensor<1xui64>, tensor<1xui64>) -> "
        "tensor<2xui64>",
        "stablehlo.rng_bit_generator %t4, algorithm = PHILOX : (tensor<2xui64>) -> "
        "(tensor<2xui64>, tensor<2x3xui32>)",
        "stablehlo.shift_right_logical",
        "(tensor<2xui64>, tensor<2x4x2xui32>)",
        "stablehlo.cosine",
        "-> tensor<4x2xbf16>",
        "-> tensor<3xi64>"}},
    {"unary", build_unary, {
        "stablehlo.abs %arg0 : tensor<3xf32>",
        "chlo.erf %arg0 : tensor<3xf32> -> tensor<3xf32>",
        "stablehlo.is_finite %arg0 : (tensor<3xf32>) -> tensor<3xi1>",
        "stablehlo.round_nearest_even %arg0 : tensor<3xf32>",
        "stablehlo.not %arg1 : tensor<3xi32>",
        "stablehlo.convert %arg0 : (tensor<3xf32>) -> tensor<3xbf16>",
        "stablehlo.convert %arg1 : (tensor<3xi32>) -> tensor<3xui8>",
        "stablehlo.bitcast_convert %arg0 : (tensor<3xf32>) -> tensor<3xi32>",
        "stablehlo.not %v"}},
    {"binary", build_binary, {
        "stablehlo.remainder %arg0, %arg1 : tensor<2x2xf32>",
        "stablehlo.atan2 %arg0, %arg1 : tensor<2x2xf32>",
        "stablehlo.shift_right_arithmetic %arg2, %arg2 : tensor<2x2xi32>",
        "stablehlo.shift_right_logical %arg3, %arg3 : tensor<2x2xui8>",
        "stablehlo.compare LT, %arg0, %arg1, FLOAT : (tensor<2x2xf32>, tensor<2x2xf32>) -> "
        "tensor<2x2xi1>",
        "stablehlo.compare GE, %arg2, %arg2, SIGNED",
        "stablehlo.compare NE, %arg3, %arg3, UNSIGNED",
        "stablehlo.xor %v",
        "stablehlo.select %v",
        "stablehlo.clamp %v",
        ": (tensor<f32>, tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>"}},
    {"shapes", build_shapes, {
        "stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>",
        "stablehlo.slice %arg0 [0:2, 0:3:2] : (tensor<2x3xf32>) -> tensor<2x2xf32>",
        "stablehlo.dynamic_slice %arg0, %arg1, %arg2, sizes = [1, 2] : (tensor<2x3xf32>, "
        "tensor<i64>, tensor<i64>) -> tensor<1x2xf32>",
        "stablehlo.dynamic_update_slice %arg0, %v5, %arg1, %arg2 : (tensor<2x3xf32>, "
        "tensor<1x2xf32>, tensor<i64>, tensor<i64>) -> tensor<2x3xf32>",
        "stablehlo.concatenate %arg0, %arg0, %arg0, dim = 1 : (tensor<2x3xf32>, "
        "tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x9xf32>",
        "stablehlo.pad %arg0, %v8, low = [1, -1], high = [0, 2], interior = [0, 1] : "
        "(tensor<2x3xf32>, tensor<f32>) -> tensor<3x6xf32>",
        "stablehlo.reverse %arg0, dims = [0] : tensor<2x3xf32>",
        "stablehlo.iota dim = 1 : tensor<4x3xi32>",
        "dims = [0, 1] : (tensor<3x2xf32>) -> tensor<3x2x4xf32>",
        "stablehlo.slice %arg0 [0:1, 0:1] : (tensor<2x3xf32>) -> tensor<1x1xf32>",
        "stablehlo.reshape %v15 : (tensor<1x1xf32>) -> tensor<f32>"}},
    {"constants", build_constants, {
        "dense<0x7F800000> : tensor<2xf32>",
        "dense<0xFF800000> : tensor<2xf32>",
        "dense<0x7FC00000> : tensor<2xf32>",
        "%v3 = stablehlo.constant dense<1.000000e-01> : tensor<2xf32>",
        "dense<1.000000e-01> : tensor<2xf64>",
        "dense<1.000977e-01> : tensor<2xbf16>",
        "dense<6.550400e+04> : tensor<2xf16>",
        "dense<0x7C00> : tensor<2xf16>",
        "dense<0xFF80> : tensor<2xbf16>",
        "dense<0x7FF8000000000000> : tensor<2xf64>",
        "dense<-9223372036854775808> : tensor<2xi64>",
        "dense<-0.000000e+00> : tensor<2xf32>"}},
    {"constants2", build_constants, {
        "dense<255> : tensor<2xui8>",
        "dense<-128> : tensor<2xi8>",
        "dense<7> : tensor<2xi16>",
        "dense<true> : tensor<2xi1>",
        "dense<false> : tensor<2xi1>",
        "dense<2.000000e+00> : tensor<0x3xf32>"}},
    {"dot", build_dot, {
        "stablehlo.dot_general %arg0, %arg1, batching_dims = [0] x [0], contracting_dims = "
        "[2] x [1], precision = [HIGH, HIGH] : (tensor<4x2x3xbf16>, tensor<4x3x5xbf16>) -> "
        "tensor<4x2x5xf32>",
        "stablehlo.dot_general %arg2, %arg3, contracting_dims = [] x [], precision = "
        "[DEFAULT, DEFAULT] : (tensor<2xf32>, tensor<3xf32>) -> tensor<2x3xf32>"}},
    {"reduce_kinds", build_reduce_kinds, {
        "dense<true> : tensor<i1>",
        "applies stablehlo.and across dimensions = [1] : (tensor<2x3xi1>, tensor<i1>)",
        "applies stablehlo.or",
        "applies stablehlo.multiply",
        "dense<-1> : tensor<i32>",
        "dense<255> : tensor<ui8>",
        "dense<-2147483648> : tensor<i32>",
        "across dimensions = [0, 1] : (tensor<2x3xi32>, tensor<i32>) -> tensor<i32>",
        "across dimensions = [] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>",
        "stablehlo.compare GT, %t", 
        "UNSIGNED"}},
    {"strided", build_strided, {
        "func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>)",
        "%v1 = stablehlo.negate %arg0 : tensor<2x3xf32>"}},
    {"edges", build_edges, {
        "padding = dense<> : tensor<0x2xi64>, window_dilations = array<i64>, "
        "window_dimensions = array<i64>, window_strides = array<i64>}>",
        "stablehlo.slice %arg0 [] : (tensor<f32>) -> tensor<f32>",
        "stablehlo.transpose %arg0, dims = [] : (tensor<f32>) -> tensor<f32>",
        "stablehlo.dynamic_slice %arg0, sizes = [] : (tensor<f32>) -> tensor<f32>",
        "window_dimensions = array<i64: 1, 1>",
        "-> (tensor<2xf32>, tensor<2xi64>)"}},
    {"linalg", build_linalg, {
        "%v2 = \"stablehlo.cholesky\"(%arg0) <{lower = true}> : (tensor<2x3x3xf32>) -> "
        "tensor<2x3x3xf32>",
        "\"stablehlo.triangular_solve\"(%v2, %arg1) <{left_side = true, lower = true, "
        "transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false}> : "
        "(tensor<2x3x3xf32>, tensor<2x3x2xf32>) -> tensor<2x3x2xf32>",
        "<{left_side = false, lower = true, transpose_a = #stablehlo<transpose TRANSPOSE>, "
        "unit_diagonal = false}> : (tensor<2x3x3xf32>, tensor<2x2x3xf32>) -> tensor<2x2x3xf32>"}},
    {"empty", build_empty, {
        "func.func public @main(%arg0: tensor<2xf32>) -> () {\n    return\n  }"}},
};

/* ---- tests ------------------------------------------------------------------------------- */

static void dump(const char *name, const char *text) {
  const char *dir = getenv("TPU_STABLEHLO_DUMP_DIR");
  if (!dir || !dir[0]) return;
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s.mlir", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "  cannot write %s\n", path);
    return;
  }
  fputs(text, f);
  fclose(f);
}

TEST(print_golden_graphs) {
  for (size_t c = 0; c < sizeof(kCases) / sizeof(kCases[0]); c++) {
    const print_case_t *pc = &kCases[c];
    tpu_graph_t *g = pc->build();
    CHECK(g != NULL);
    if (!g) continue;
    if (tpu_graph_status(g) != TPU_OK) {
      fprintf(stderr, "  %s: build error: %s\n", pc->name, tpu_graph_error_message(g));
    }
    CHECK(tpu_graph_status(g) == TPU_OK);
    CHECK_OK(tpu_graph_verify(g));
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(tpu_graph_print_stablehlo(g, pc->name, tpu_allocator_system(), &text, &len));
    CHECK(text != NULL && strlen(text) == len);
    if (text) {
      for (int k = 0; k < 12 && pc->golden[k]; k++) {
        if (!strstr(text, pc->golden[k])) {
          fprintf(stderr, "  graph %s lacks: %s\n", pc->name, pc->golden[k]);
          check_current_failed = 1;
        }
      }
      if (check_current_failed && getenv("TPU_IR_PRINT_VERBOSE")) fprintf(stderr, "%s\n", text);
      dump(pc->name, text);
    }
    tpu_allocator_free(tpu_allocator_system(), text);
    tpu_graph_destroy(g);
  }
}

TEST(print_refuses_a_graph_with_a_build_error) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2));
  tpu_value_t y = ir_param(g, TPU_F32, SHAPE(3));
  tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_ADD, x, y), NULL);
  char *text = (char *)1;
  CHECK(tpu_graph_print_stablehlo(g, "bad", tpu_allocator_system(), &text, NULL) ==
        TPU_ERR_INVALID_ARGUMENT);
  CHECK(text == NULL);
  CHECK_CONTAINS(tpu_status_message(), "print_stablehlo: verify:");
  CHECK_CONTAINS(tpu_status_message(), "binary ADD: operand shapes f32[2] and f32[3] differ");
  tpu_graph_destroy(g);
}

TEST(print_quotes_names_that_are_not_identifiers) {
  tpu_graph_t *g = ir_graph();
  tpu_graph_output(g, ir_param(g, TPU_F32, SHAPE(1)), NULL);
  char *text = NULL;
  CHECK_OK(tpu_graph_print_stablehlo(g, "aten::add \"x\"", tpu_allocator_system(), &text, NULL));
  CHECK_CONTAINS(text, "module @\"aten::add \\22x\\22\" {");
  CHECK_CONTAINS(text, "return %arg0 : tensor<1xf32>");
  tpu_allocator_free(tpu_allocator_system(), text);
  CHECK_OK(tpu_graph_print_stablehlo(g, NULL, tpu_allocator_system(), &text, NULL));
  CHECK_CONTAINS(text, "module @graph {");
  tpu_allocator_free(tpu_allocator_system(), text);
  tpu_graph_destroy(g);
}

/* An allocator that fails after |budget| allocations, to exercise the out-of-memory path. */
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

TEST(print_reports_out_of_memory) {
  tpu_graph_t *g = build_softmax();
  /* The printer allocates the name table, the parameter table and the text buffer. */
  for (int budget = 0; budget < 3; budget++) {
    limited_t l = {budget};
    tpu_allocator_t a = {&l, limited_alloc, limited_free};
    char *text = (char *)1;
    CHECK(tpu_graph_print_stablehlo(g, "m", a, &text, NULL) == TPU_ERR_OUT_OF_MEMORY);
    CHECK(text == NULL);
    CHECK_CONTAINS(tpu_status_message(), "print_stablehlo");
  }
  limited_t l = {3};
  tpu_allocator_t a = {&l, limited_alloc, limited_free};
  char *text = NULL;
  CHECK_OK(tpu_graph_print_stablehlo(g, "m", a, &text, NULL));
  tpu_allocator_free(a, text);
  tpu_graph_destroy(g);
}

int main(void) {
  RUN(print_golden_graphs);
  RUN(print_refuses_a_graph_with_a_build_error);
  RUN(print_quotes_names_that_are_not_identifiers);
  RUN(print_reports_out_of_memory);
  return check_report();
}
