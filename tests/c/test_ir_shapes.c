/* test_ir_shapes.c: the IR graph builder, part 2: data movement, reductions, dot_general,
 * convolution, gather, scatter and sort: inferred shapes for good requests, and for bad ones
 * the error message naming the builder and the problem, including overflow. Part 1 is
 * test_ir_builder.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/graph_internal.h"
#include "ir_util.h"
#include "tpu/ir.h"

/* ---- data movement -------------------------------------------------------------------------- */

TEST(broadcast_reshape_transpose) {
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t v = ir_param(g, TPU_F32, SHAPE(3));
    tpu_value_t m = ir_param(g, TPU_F32, SHAPE(1, 3));
    tpu_value_t s = ir_param(g, TPU_F32, SCALAR);
    tpu_shape_t s23 = SHAPE(2, 3), s43 = SHAPE(4, 3), s32 = SHAPE(3, 2), s6 = SHAPE(6);
    EXPECT_TYPE(g, tpu_graph_broadcast_in_dim(g, v, &s23, (int64_t[]){1}), "f32[2,3]");
    EXPECT_TYPE(g, tpu_graph_broadcast_in_dim(g, m, &s43, (int64_t[]){0, 1}), "f32[4,3]");
    EXPECT_TYPE(g, tpu_graph_broadcast_in_dim(g, s, &s23, NULL), "f32[2,3]");
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3));
    /* dims need not be sorted (StableHLO): a transposing broadcast */
    EXPECT_TYPE(g, tpu_graph_broadcast_in_dim(g, x, &s32, (int64_t[]){1, 0}), "f32[3,2]");
    EXPECT_TYPE(g, tpu_graph_reshape(g, x, &s6), "f32[6]");
    tpu_shape_t sc = SCALAR, s111 = SHAPE(1, 1, 1);
    EXPECT_TYPE(g, tpu_graph_reshape(g, tpu_graph_reshape(g, s, &s111), &sc), "f32[]");
    tpu_value_t t = ir_param(g, TPU_I8, SHAPE(2, 3, 4));
    EXPECT_TYPE(g, tpu_graph_transpose(g, t, (int64_t[]){2, 0, 1}), "i8[4,2,3]");
    EXPECT_TYPE(g, tpu_graph_transpose(g, s, NULL), "f32[]");
    tpu_value_t z = ir_param(g, TPU_F32, SHAPE(0, 4));
    tpu_shape_t s0 = SHAPE(2, 0, 7);
    EXPECT_TYPE(g, tpu_graph_reshape(g, z, &s0), "f32[2,0,7]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  tpu_shape_t s23b = SHAPE(2, 3);
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(3));
    tpu_shape_t s24 = SHAPE(2, 4);
    EXPECT_ERROR(g, tpu_graph_broadcast_in_dim(g, a, &s24, (int64_t[]){1}),
                 "broadcast_in_dim: operand dim 0 has size 3 but result dim 1 has size 4 (must "
                 "be 1 or equal)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_broadcast_in_dim(g, a, &s23b, (int64_t[]){2}),
                 "broadcast_in_dim: dims[0] = 2 is outside 0..1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(1, 1));
    EXPECT_ERROR(g, tpu_graph_broadcast_in_dim(g, a, &s23b, (int64_t[]){1, 1}),
                 "broadcast_in_dim: dims repeats 1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3, 1));
    EXPECT_ERROR(g, tpu_graph_broadcast_in_dim(g, a, &s23b, (int64_t[]){0, 1, 2}),
                 "broadcast_in_dim: operand rank 3 exceeds result rank 2");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_broadcast_in_dim(g, a, &s23b, NULL),
                 "broadcast_in_dim: dims is NULL");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3));
    tpu_shape_t s5 = SHAPE(5);
    EXPECT_ERROR(g, tpu_graph_reshape(g, a, &s5),
                 "reshape: cannot reshape f32[2,3] (6 elements) to f32[5] (5 elements)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3));
    tpu_shape_t bad = SHAPE(-2, -3);
    EXPECT_ERROR(g, tpu_graph_reshape(g, a, &bad), "reshape: result dim 0 has negative size -2");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3, 4));
    EXPECT_ERROR(g, tpu_graph_transpose(g, a, (int64_t[]){0, 2, 0}),
                 "transpose: perm (must be a permutation) repeats 0");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3));
    EXPECT_ERROR(g, tpu_graph_transpose(g, a, (int64_t[]){0, 2}),
                 "transpose: perm (must be a permutation)[1] = 2 is outside 0..1");
    END_CASE;
  }
}

TEST(slices) {
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(10, 6));
    EXPECT_TYPE(g, tpu_graph_slice(g, x, (int64_t[]){1, 0}, (int64_t[]){8, 6}, (int64_t[]){3, 1}),
                "f32[3,6]");
    EXPECT_TYPE(g, tpu_graph_slice(g, x, (int64_t[]){4, 6}, (int64_t[]){4, 6}, NULL), "f32[0,0]");
    tpu_value_t i = ir_param(g, TPU_I32, SCALAR), j = ir_param(g, TPU_I32, SCALAR);
    tpu_value_t ds = tpu_graph_dynamic_slice(g, x, (tpu_value_t[]){i, j}, (int64_t[]){2, 6});
    EXPECT_TYPE(g, ds, "f32[2,6]");
    CHECK(tpu_graph_node(g, ds)->num_operands == 3);
    EXPECT_TYPE(g, tpu_graph_dynamic_update_slice(g, x, ds, (tpu_value_t[]){i, j}), "f32[10,6]");
    tpu_value_t s = ir_param(g, TPU_F32, SCALAR);
    EXPECT_TYPE(g, tpu_graph_dynamic_slice(g, s, NULL, NULL), "f32[]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(10, 6));
    EXPECT_ERROR(g, tpu_graph_slice(g, a, (int64_t[]){0, 4}, (int64_t[]){10, 7}, NULL),
                 "slice: dim 1: need 0 <= start (4) <= limit (7) <= size (6)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(10, 6));
    EXPECT_ERROR(g, tpu_graph_slice(g, a, (int64_t[]){5, 0}, (int64_t[]){4, 6}, NULL),
                 "slice: dim 0: need 0 <= start (5) <= limit (4)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(10, 6));
    EXPECT_ERROR(g, tpu_graph_slice(g, a, (int64_t[]){0, 0}, (int64_t[]){1, 1}, (int64_t[]){1, 0}),
                 "slice: dim 1: stride 0 must be >= 1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(10, 6));
    EXPECT_ERROR(g, tpu_graph_slice(g, a, NULL, NULL, NULL), "slice: start or limit is NULL");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 4));
    tpu_value_t k = ir_param(g, TPU_I32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_dynamic_slice(g, a, (tpu_value_t[]){k, k}, (int64_t[]){2, 5}),
                 "dynamic_slice: dim 1: slice size 5 is outside 0..4");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 4));
    tpu_value_t k = ir_param(g, TPU_I32, SCALAR), f = ir_param(g, TPU_F32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_dynamic_slice(g, a, (tpu_value_t[]){k, f}, (int64_t[]){2, 2}),
                 "dynamic_slice: start index 1 must be an integer scalar, got f32[]");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 4));
    tpu_value_t k = ir_param(g, TPU_I32, SCALAR), v = ir_param(g, TPU_I32, SHAPE(1));
    EXPECT_ERROR(g, tpu_graph_dynamic_slice(g, a, (tpu_value_t[]){v, k}, (int64_t[]){2, 2}),
                 "start index 0 must be an integer scalar, got i32[1]");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 4));
    tpu_value_t k = ir_param(g, TPU_I32, SCALAR), l = ir_param(g, TPU_I64, SCALAR);
    EXPECT_ERROR(g, tpu_graph_dynamic_slice(g, a, (tpu_value_t[]){k, l}, (int64_t[]){2, 2}),
                 "dynamic_slice: start indices must share one dtype (i32 and i64)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 4)), u = ir_param(g, TPU_F32, SHAPE(5, 1));
    tpu_value_t k = ir_param(g, TPU_I32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_dynamic_update_slice(g, a, u, (tpu_value_t[]){k, k}),
                 "dynamic_update_slice: update f32[5,1] is larger than operand f32[4,4] in dim 0");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 4)), u = ir_param(g, TPU_BF16, SHAPE(1, 1));
    tpu_value_t k = ir_param(g, TPU_I32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_dynamic_update_slice(g, a, u, (tpu_value_t[]){k, k}),
                 "dynamic_update_slice: operand/update dtypes f32 and bf16 differ");
    END_CASE;
  }
}

TEST(concatenate_pad_reverse) {
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3)), b = ir_param(g, TPU_F32, SHAPE(2, 5));
    EXPECT_TYPE(g, tpu_graph_concatenate(g, (tpu_value_t[]){a, b, a}, 3, 1), "f32[2,11]");
    EXPECT_TYPE(g, tpu_graph_concatenate(g, (tpu_value_t[]){a}, 1, 0), "f32[2,3]");
    tpu_value_t zero = ir_param(g, TPU_F32, SCALAR);
    EXPECT_TYPE(g, tpu_graph_pad(g, a, zero, (int64_t[]){1, 0}, (int64_t[]){2, 0},
                                 (int64_t[]){0, 2}), "f32[5,7]");
    EXPECT_TYPE(g, tpu_graph_pad(g, a, zero, (int64_t[]){-1, -3}, (int64_t[]){0, 0}, NULL),
                "f32[1,0]");
    EXPECT_TYPE(g, tpu_graph_pad(g, a, zero, NULL, NULL, NULL), "f32[2,3]");
    tpu_value_t e = ir_param(g, TPU_F32, SHAPE(0));
    EXPECT_TYPE(g, tpu_graph_pad(g, e, zero, (int64_t[]){1}, (int64_t[]){1}, (int64_t[]){5}),
                "f32[2]");
    tpu_value_t r = tpu_graph_reverse(g, a, (bool[]){false, true});
    EXPECT_TYPE(g, r, "f32[2,3]");
    CHECK(tpu_graph_node(g, r)->attrs.reverse.dims[1]);
    CHECK(!tpu_graph_node(g, r)->attrs.reverse.dims[0]);
    EXPECT_TYPE(g, tpu_graph_reverse(g, a, NULL), "f32[2,3]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3)), y = ir_param(g, TPU_F32, SHAPE(3, 3));
    EXPECT_ERROR(g, tpu_graph_concatenate(g, (tpu_value_t[]){x, y}, 2, 1),
                 "concatenate: operand 1 f32[3,3] differs from operand 0 f32[2,3] in dim 0 (only "
                 "dim 1 may differ)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3));
    EXPECT_ERROR(g, tpu_graph_concatenate(g, (tpu_value_t[]){x}, 1, 2),
                 "concatenate: dim 2 is outside 0..1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2)), y = ir_param(g, TPU_I32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_concatenate(g, (tpu_value_t[]){x, y}, 2, 0),
                 "concatenate: operand dtypes f32 and i32 differ");
    END_CASE;
  }
  {
    CASE;
    EXPECT_ERROR(g, tpu_graph_concatenate(g, NULL, 0, 0),
                 "concatenate: needs at least one operand");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_concatenate(g, (tpu_value_t[]){x, x}, 2, 0),
                 "concatenate: operands must have rank >= 1");
    END_CASE;
  }
  {
    CASE; /* 2^62 + 2^62 bool elements: the dim size overflows int64 */
    tpu_shape_t big = SHAPE(1LL << 62);
    tpu_value_t x = tpu_graph_parameter(g, TPU_BOOL, &big, NULL);
    CHECK(x != TPU_NO_VALUE);
    EXPECT_ERROR(g, tpu_graph_concatenate(g, (tpu_value_t[]){x, x}, 2, 0),
                 "concatenate: size of dim 0 overflows int64");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2)), v = ir_param(g, TPU_F32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_pad(g, x, v, (int64_t[]){-2}, (int64_t[]){-1}, NULL),
                 "pad: dim 0: lo -2 + hi -1 + size 2 + interior gives negative size -1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2)), v = ir_param(g, TPU_F32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_pad(g, x, v, NULL, NULL, (int64_t[]){-1}),
                 "pad: dim 0: interior padding -1 is negative");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2)), v = ir_param(g, TPU_F32, SHAPE(1));
    EXPECT_ERROR(g, tpu_graph_pad(g, x, v, NULL, NULL, NULL),
                 "pad: padding value must be a scalar, got f32[1]");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2)), v = ir_param(g, TPU_F64, SCALAR);
    EXPECT_ERROR(g, tpu_graph_pad(g, x, v, NULL, NULL, NULL),
                 "pad: operand/padding value dtypes f32 and f64 differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(3)), v = ir_param(g, TPU_F32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_pad(g, x, v, NULL, NULL, (int64_t[]){INT64_MAX / 2}),
                 "pad: dim 0: padded size overflows int64");
    END_CASE;
  }
  {
    CASE; /* fits int64 but not as f32 bytes */
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(3)), v = ir_param(g, TPU_F32, SCALAR);
    EXPECT_ERROR(g, tpu_graph_pad(g, x, v, (int64_t[]){1LL << 62}, NULL, NULL),
                 "pad: result f32[4611686018427387907]: byte size overflows int64");
    END_CASE;
  }
}

/* ---- reductions ------------------------------------------------------------------------ */

TEST(reductions) {
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 3, 4));
    EXPECT_TYPE(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, x, (bool[]){false, true, false}),
                "f32[2,4]");
    EXPECT_TYPE(g, tpu_graph_reduce(g, TPU_REDUCE_MAX, x, (bool[]){true, true, true}), "f32[]");
    EXPECT_TYPE(g, tpu_graph_reduce(g, TPU_REDUCE_MIN, x, (bool[]){false, false, false}),
                "f32[2,3,4]");
    EXPECT_TYPE(g, tpu_graph_reduce(g, TPU_REDUCE_ARGMAX, x, (bool[]){false, false, true}),
                "i64[2,3]");
    EXPECT_TYPE(g, tpu_graph_reduce(g, TPU_REDUCE_ARGMIN, x, (bool[]){true, false, false}),
                "i64[3,4]");
    tpu_value_t b = tpu_graph_compare(g, TPU_CMP_GT, x, x);
    EXPECT_TYPE(g, tpu_graph_reduce(g, TPU_REDUCE_AND, b, (bool[]){true, false, true}), "i1[3]");
    EXPECT_TYPE(g, tpu_graph_reduce(g, TPU_REDUCE_OR, b, (bool[]){true, false, true}), "i1[3]");
    tpu_value_t i = ir_param(g, TPU_I16, SHAPE(5));
    EXPECT_TYPE(g, tpu_graph_reduce(g, TPU_REDUCE_PROD, i, (bool[]){true}), "i16[]");
    EXPECT_TYPE(g, tpu_graph_reduce(g, TPU_REDUCE_OR, i, (bool[]){true}), "i16[]");
    tpu_value_t img = ir_param(g, TPU_F32, SHAPE(1, 7, 7, 3));
    tpu_reduce_window_attrs_t pool = {.kind = TPU_REDUCE_MAX, .window = {1, 3, 3, 1},
                                      .stride = {1, 2, 2, 1}, .dilation = {1, 1, 1, 1},
                                      .pad_lo = {0, 1, 1, 0}, .pad_hi = {0, 1, 1, 0}};
    EXPECT_TYPE(g, tpu_graph_reduce_window(g, img, &pool), "f32[1,4,4,3]");
    tpu_reduce_window_attrs_t dil = {.kind = TPU_REDUCE_SUM, .window = {1, 3, 3, 1},
                                     .stride = {1, 1, 1, 1}, .dilation = {1, 2, 3, 1}};
    EXPECT_TYPE(g, tpu_graph_reduce_window(g, img, &dil), "f32[1,3,1,3]");
    tpu_reduce_window_attrs_t big = {.kind = TPU_REDUCE_SUM, .window = {1, 9, 1, 1},
                                     .stride = {1, 1, 1, 1}, .dilation = {1, 1, 1, 1}};
    EXPECT_TYPE(g, tpu_graph_reduce_window(g, img, &big), "f32[1,0,7,3]");
    EXPECT_TYPE(g, tpu_graph_scan(g, TPU_REDUCE_SUM, x, 2), "f32[2,3,4]");
    EXPECT_TYPE(g, tpu_graph_scan(g, TPU_REDUCE_MIN, i, 0), "i16[5]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3));
    EXPECT_ERROR(g, tpu_graph_reduce(g, TPU_REDUCE_ARGMAX, a, (bool[]){true, true}),
                 "reduce ARGMAX: ARGMAX reduces exactly one dim, got 2 (reshape first)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    tpu_value_t b = tpu_graph_compare(g, TPU_CMP_GT, a, a);
    EXPECT_ERROR(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, b, (bool[]){true}),
                 "reduce SUM: operand dtype i1 is not supported (needs a float or integer type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_reduce(g, TPU_REDUCE_AND, a, (bool[]){true}),
                 "reduce AND: operand dtype f32 is not supported (needs an integer or bool type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_reduce(g, (tpu_reduce_kind_t)77, a, (bool[]){true}),
                 "reduce INVALID_KIND: kind 77 is invalid");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
    EXPECT_ERROR(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, a, NULL), "reduce SUM: dims is NULL");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4));
    tpu_reduce_window_attrs_t w = {.kind = TPU_REDUCE_SUM, .window = {2}, .stride = {0},
                                   .dilation = {1}};
    EXPECT_ERROR(g, tpu_graph_reduce_window(g, a, &w),
                 "reduce_window: dim 0: window (2), stride (0) and dilation (1) must be >= 1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4));
    tpu_reduce_window_attrs_t w = {.kind = TPU_REDUCE_SUM, .window = {2}, .stride = {1},
                                   .dilation = {1}, .pad_lo = {-1}};
    EXPECT_ERROR(g, tpu_graph_reduce_window(g, a, &w),
                 "reduce_window: dim 0: padding (-1, 0) must be >= 0");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4));
    tpu_reduce_window_attrs_t w = {.kind = TPU_REDUCE_ARGMAX, .window = {2}, .stride = {1},
                                   .dilation = {1}};
    EXPECT_ERROR(g, tpu_graph_reduce_window(g, a, &w),
                 "reduce_window: kind ARGMAX is only supported by reduce");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_I32, SHAPE(4));
    tpu_reduce_window_attrs_t w = {.kind = TPU_REDUCE_AND, .window = {2}, .stride = {1},
                                   .dilation = {1}};
    EXPECT_ERROR(g, tpu_graph_reduce_window(g, a, &w),
                 "reduce_window: kind AND is not supported here");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4));
    tpu_reduce_window_attrs_t w = {.kind = TPU_REDUCE_SUM, .window = {INT64_MAX},
                                   .stride = {1}, .dilation = {2}};
    EXPECT_ERROR(g, tpu_graph_reduce_window(g, a, &w),
                 "reduce_window: dim 0: dilated window size overflows int64");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4));
    EXPECT_ERROR(g, tpu_graph_reduce_window(g, a, NULL), "reduce_window: attrs is NULL");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4));
    EXPECT_ERROR(g, tpu_graph_scan(g, TPU_REDUCE_SUM, a, 1), "scan SUM: dim 1 is outside 0..0");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4));
    EXPECT_ERROR(g, tpu_graph_scan(g, TPU_REDUCE_ARGMIN, a, 0),
                 "scan ARGMIN: kind ARGMIN is only supported by reduce");
    END_CASE;
  }
}

/* ---- MXU ------------------------------------------------------------------------------------- */

TEST(dot_general) {
  tpu_dot_attrs_t mm = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 3)), b = ir_param(g, TPU_F32, SHAPE(3, 5));
    EXPECT_TYPE(g, tpu_graph_dot_general(g, a, b, &mm, TPU_F32), "f32[4,5]");
    tpu_value_t q = ir_param(g, TPU_BF16, SHAPE(8, 2, 16, 64));  /* (B, H, T, D) */
    tpu_value_t k = ir_param(g, TPU_BF16, SHAPE(8, 2, 16, 64));
    tpu_dot_attrs_t qk = {.num_batch = 2, .lhs_batch = {0, 1}, .rhs_batch = {0, 1},
                          .num_contract = 1, .lhs_contract = {3}, .rhs_contract = {3},
                          .precision = TPU_PRECISION_HIGHEST};
    tpu_value_t s = tpu_graph_dot_general(g, q, k, &qk, TPU_F32);
    EXPECT_TYPE(g, s, "f32[8,2,16,16]");
    CHECK(tpu_graph_node(g, s)->attrs.dot.precision == TPU_PRECISION_HIGHEST);
    /* batch dims need not lead; free dims keep their order */
    tpu_value_t l = ir_param(g, TPU_F32, SHAPE(3, 7, 2)), r = ir_param(g, TPU_F32, SHAPE(2, 3, 9));
    tpu_dot_attrs_t odd = {.num_batch = 1, .lhs_batch = {2}, .rhs_batch = {0}, .num_contract = 1,
                           .lhs_contract = {0}, .rhs_contract = {1}};
    EXPECT_TYPE(g, tpu_graph_dot_general(g, l, r, &odd, TPU_F16), "f16[2,7,9]");
    tpu_dot_attrs_t outer = {0};
    EXPECT_TYPE(g, tpu_graph_dot_general(g, a, b, &outer, TPU_F32), "f32[4,3,3,5]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4, 3)), y = ir_param(g, TPU_F32, SHAPE(4, 5));
    EXPECT_ERROR(g, tpu_graph_dot_general(g, x, y, &mm, TPU_F32),
                 "dot_general: contracting dim 0: lhs f32[4,3] dim 1 and rhs f32[4,5] dim 0 "
                 "sizes differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 4, 3)), y = ir_param(g, TPU_F32, SHAPE(5, 3, 4));
    tpu_dot_attrs_t bm = {.num_batch = 1, .lhs_batch = {0}, .rhs_batch = {0}, .num_contract = 1,
                          .lhs_contract = {2}, .rhs_contract = {1}};
    EXPECT_ERROR(g, tpu_graph_dot_general(g, x, y, &bm, TPU_F32),
                 "dot_general: batch dim 0: lhs f32[2,4,3] dim 0 and rhs f32[5,3,4] dim 0 sizes "
                 "differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_I32, SHAPE(4, 3)), y = ir_param(g, TPU_I32, SHAPE(3, 5));
    EXPECT_ERROR(g, tpu_graph_dot_general(g, x, y, &mm, TPU_I32),
                 "dot_general: operand dtype i32 is not supported (needs a float type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4, 3)), y = ir_param(g, TPU_BF16, SHAPE(3, 5));
    EXPECT_ERROR(g, tpu_graph_dot_general(g, x, y, &mm, TPU_F32),
                 "dot_general: operand dtypes f32 and bf16 differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4, 3)), y = ir_param(g, TPU_F32, SHAPE(3, 5));
    EXPECT_ERROR(g, tpu_graph_dot_general(g, x, y, &mm, TPU_I64),
                 "dot_general: result dtype i64 is not supported (needs a float type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(3, 3)), y = ir_param(g, TPU_F32, SHAPE(3, 3));
    tpu_dot_attrs_t rep = {.num_batch = 1, .lhs_batch = {0}, .rhs_batch = {0}, .num_contract = 1,
                           .lhs_contract = {0}, .rhs_contract = {1}};
    EXPECT_ERROR(g, tpu_graph_dot_general(g, x, y, &rep, TPU_F32),
                 "dot_general: lhs batch ++ contracting dims repeats 0");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(1, 1, 1, 1, 1));
    tpu_dot_attrs_t none = {0};
    EXPECT_ERROR(g, tpu_graph_dot_general(g, x, x, &none, TPU_F32),
                 "dot_general: result rank 10 exceeds 8");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4, 3));
    tpu_dot_attrs_t bad = {.num_contract = 9};
    EXPECT_ERROR(g, tpu_graph_dot_general(g, x, x, &bad, TPU_F32),
                 "dot_general: contracting dim count 9 is outside 0..8");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4, 3));
    tpu_dot_attrs_t bad = {.precision = (tpu_precision_t)5};
    EXPECT_ERROR(g, tpu_graph_dot_general(g, x, x, &bad, TPU_F32),
                 "dot_general: precision 5 is invalid");
    END_CASE;
  }
}

static tpu_conv_attrs_t nhwc_hwio(int64_t stride, int64_t pad, int64_t rhs_dil) {
  tpu_conv_attrs_t c = {.num_spatial = 2, .stride = {stride, stride}, .pad_lo = {pad, pad},
                        .pad_hi = {pad, pad}, .lhs_dilation = {1, 1},
                        .rhs_dilation = {rhs_dil, rhs_dil}, .feature_group_count = 1,
                        .batch_group_count = 1, .in_batch = 0, .in_feature = 3,
                        .in_spatial = {1, 2}, .k_out_feature = 3, .k_in_feature = 2,
                        .k_spatial = {0, 1}, .out_batch = 0, .out_feature = 3,
                        .out_spatial = {1, 2}};
  return c;
}

TEST(convolution) {
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(2, 9, 9, 3));
    tpu_value_t k = ir_param(g, TPU_F32, SHAPE(3, 3, 3, 8));
    tpu_conv_attrs_t c = nhwc_hwio(2, 1, 2);
    EXPECT_TYPE(g, tpu_graph_convolution(g, x, k, &c, TPU_F32), "f32[2,4,4,8]");
    /* NCHW x OIHW, 2 feature groups, lhs dilation 2 (a transposed convolution) */
    tpu_value_t xn = ir_param(g, TPU_BF16, SHAPE(1, 4, 7, 7));
    tpu_value_t kn = ir_param(g, TPU_BF16, SHAPE(6, 2, 3, 3));
    tpu_conv_attrs_t n = {.num_spatial = 2, .stride = {1, 1}, .pad_lo = {2, 2}, .pad_hi = {2, 2},
                          .lhs_dilation = {2, 2}, .rhs_dilation = {1, 1},
                          .feature_group_count = 2, .batch_group_count = 1, .in_batch = 0,
                          .in_feature = 1, .in_spatial = {2, 3}, .k_out_feature = 0,
                          .k_in_feature = 1, .k_spatial = {2, 3}, .out_batch = 0,
                          .out_feature = 1, .out_spatial = {2, 3}};
    EXPECT_TYPE(g, tpu_graph_convolution(g, xn, kn, &n, TPU_F32), "f32[1,6,15,15]");
    /* batch groups (the weight gradient of a grouped convolution) */
    tpu_value_t xb = ir_param(g, TPU_F32, SHAPE(4, 5, 5, 3));
    tpu_value_t kb = ir_param(g, TPU_F32, SHAPE(3, 3, 3, 6));
    tpu_conv_attrs_t bg = nhwc_hwio(1, 0, 1);
    bg.batch_group_count = 2;
    EXPECT_TYPE(g, tpu_graph_convolution(g, xb, kb, &bg, TPU_F32), "f32[2,3,3,6]");
    /* 1-D, window larger than the padded input: no output positions */
    tpu_value_t x1 = ir_param(g, TPU_F32, SHAPE(1, 2, 3));
    tpu_value_t k1 = ir_param(g, TPU_F32, SHAPE(5, 2, 4));
    tpu_conv_attrs_t one = {.num_spatial = 1, .stride = {1}, .lhs_dilation = {1},
                            .rhs_dilation = {1}, .feature_group_count = 1, .batch_group_count = 1,
                            .in_batch = 0, .in_feature = 1, .in_spatial = {2}, .k_out_feature = 2,
                            .k_in_feature = 1, .k_spatial = {0}, .out_batch = 0, .out_feature = 1,
                            .out_spatial = {2}};
    EXPECT_TYPE(g, tpu_graph_convolution(g, x1, k1, &one, TPU_F32), "f32[1,4,0]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(1, 5, 5, 3));
    tpu_value_t w = ir_param(g, TPU_F32, SHAPE(3, 3, 4, 8));
    tpu_conv_attrs_t cc = nhwc_hwio(1, 0, 1);
    EXPECT_ERROR(g, tpu_graph_convolution(g, a, w, &cc, TPU_F32),
                 "convolution: kernel input features 4 != input features 3 / "
                 "feature_group_count 1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(1, 5, 5, 3));
    tpu_value_t w = ir_param(g, TPU_F32, SHAPE(3, 3, 3, 8));
    tpu_conv_attrs_t cc = nhwc_hwio(1, -3, 1);
    EXPECT_ERROR(g, tpu_graph_convolution(g, a, w, &cc, TPU_F32),
                 "convolution: spatial dim 0: padded input size -1 is negative");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 5, 5, 4));
    tpu_value_t w = ir_param(g, TPU_F32, SHAPE(3, 3, 2, 8));
    tpu_conv_attrs_t cc = nhwc_hwio(1, 0, 1);
    cc.feature_group_count = 2;
    cc.batch_group_count = 2;
    EXPECT_ERROR(g, tpu_graph_convolution(g, a, w, &cc, TPU_F32),
                 "convolution: feature_group_count and batch_group_count cannot both exceed 1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(1, 5, 5, 3));
    tpu_value_t w = ir_param(g, TPU_F32, SHAPE(3, 3, 3, 8));
    tpu_conv_attrs_t cc = nhwc_hwio(1, 0, 1);
    cc.in_spatial[1] = 0;
    EXPECT_ERROR(g, tpu_graph_convolution(g, a, w, &cc, TPU_F32),
                 "convolution: input dimension numbers repeats 0");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(1, 5, 5, 3));
    tpu_value_t w = ir_param(g, TPU_F32, SHAPE(3, 3, 3, 8));
    tpu_conv_attrs_t cc = nhwc_hwio(0, 0, 1);
    EXPECT_ERROR(g, tpu_graph_convolution(g, a, w, &cc, TPU_F32),
                 "convolution: spatial dim 0: stride (0), lhs_dilation (1) and rhs_dilation (1) "
                 "must be >= 1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(1, 5, 3));
    tpu_value_t w = ir_param(g, TPU_F32, SHAPE(3, 3, 3, 8));
    tpu_conv_attrs_t cc = nhwc_hwio(1, 0, 1);
    EXPECT_ERROR(g, tpu_graph_convolution(g, a, w, &cc, TPU_F32),
                 "convolution: input f32[1,5,3] and kernel f32[3,3,3,8] must have rank 4 for 2 "
                 "spatial dims");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(1, 5, 5, 3));
    tpu_value_t w = ir_param(g, TPU_F32, SHAPE(3, 3, 3, 8));
    tpu_conv_attrs_t cc = nhwc_hwio(1, 0, 1);
    cc.num_spatial = 4;
    EXPECT_ERROR(g, tpu_graph_convolution(g, a, w, &cc, TPU_F32),
                 "convolution: num_spatial 4 is outside 1..3");
    END_CASE;
  }
}

/* ---- indexing --------------------------------------------------------------------------- */

static const tpu_gather_attrs_t kEmbedding = {
    .num_offset_dims = 1, .offset_dims = {1}, .num_collapsed = 1, .collapsed_slice_dims = {0},
    .num_start_index_map = 1, .start_index_map = {0}, .index_vector_dim = 1,
    .slice_sizes = {1, 3}};

TEST(gather) {
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t t = ir_param(g, TPU_F32, SHAPE(5, 3));
    tpu_value_t ix = ir_param(g, TPU_I32, SHAPE(2, 1));
    EXPECT_TYPE(g, tpu_graph_gather(g, t, ix, &kEmbedding), "f32[2,3]");
    /* index_vector_dim == rank: an implicit trailing index vector of size 1 */
    tpu_value_t ids = ir_param(g, TPU_I64, SHAPE(7, 2));
    tpu_gather_attrs_t implicit = kEmbedding;
    implicit.index_vector_dim = 2;
    implicit.offset_dims[0] = 2;
    EXPECT_TYPE(g, tpu_graph_gather(g, t, ids, &implicit), "f32[7,2,3]");
    /* torch.gather style: full coordinates, every operand dim collapsed */
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(3, 4));
    tpu_value_t coords = ir_param(g, TPU_I32, SHAPE(3, 4, 2));
    tpu_gather_attrs_t full = {.num_collapsed = 2, .collapsed_slice_dims = {0, 1},
                               .num_start_index_map = 2, .start_index_map = {0, 1},
                               .index_vector_dim = 2, .slice_sizes = {1, 1}};
    EXPECT_TYPE(g, tpu_graph_gather(g, x, coords, &full), "f32[3,4]");
    /* offset dims around the batch dim */
    tpu_value_t y = ir_param(g, TPU_F32, SHAPE(5, 6, 7));
    tpu_value_t iy = ir_param(g, TPU_I32, SHAPE(4, 1));
    tpu_gather_attrs_t mid = {.num_offset_dims = 2, .offset_dims = {0, 2}, .num_collapsed = 1,
                              .collapsed_slice_dims = {1}, .num_start_index_map = 1,
                              .start_index_map = {1}, .index_vector_dim = 1,
                              .slice_sizes = {5, 1, 7}};
    EXPECT_TYPE(g, tpu_graph_gather(g, y, iy, &mid), "f32[5,4,7]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(5, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_gather_attrs_t bad = kEmbedding;
    bad.slice_sizes[1] = 4;
    EXPECT_ERROR(g, tpu_graph_gather(g, a, i, &bad), "gather: slice_sizes[1] = 4 is outside 0..3");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(5, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_gather_attrs_t bad = kEmbedding;
    bad.slice_sizes[0] = 2;
    EXPECT_ERROR(g, tpu_graph_gather(g, a, i, &bad),
                 "gather: collapsed dim 0 has slice size 2 (must be <= 1)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(5, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 2));
    EXPECT_ERROR(g, tpu_graph_gather(g, a, i, &kEmbedding),
                 "gather: start_index_map has 1 entries but the index vector of i32[2,2] has 2");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(5, 3)), i = ir_param(g, TPU_F32, SHAPE(2, 1));
    EXPECT_ERROR(g, tpu_graph_gather(g, a, i, &kEmbedding),
                 "gather: indices f32[2,1] must have an integer dtype");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(5, 3, 2)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    EXPECT_ERROR(g, tpu_graph_gather(g, a, i, &kEmbedding),
                 "gather: operand rank 3 must equal offset_dims (1) + collapsed_slice_dims (1)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(5, 6, 7)), i = ir_param(g, TPU_I32, SHAPE(4, 1));
    tpu_gather_attrs_t bad = {.num_offset_dims = 2, .offset_dims = {2, 0}, .num_collapsed = 1,
                              .collapsed_slice_dims = {1}, .num_start_index_map = 1,
                              .start_index_map = {1}, .index_vector_dim = 1,
                              .slice_sizes = {5, 1, 7}};
    EXPECT_ERROR(g, tpu_graph_gather(g, a, i, &bad),
                 "gather: offset_dims must be sorted and unique, but 0 follows 2");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(5, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_gather_attrs_t bad = kEmbedding;
    bad.index_vector_dim = 3;
    EXPECT_ERROR(g, tpu_graph_gather(g, a, i, &bad), "gather: index_vector_dim 3 is outside 0..2");
    END_CASE;
  }
}

static const tpu_scatter_attrs_t kRows = {
    .num_update_window_dims = 1, .update_window_dims = {1}, .num_inserted_window_dims = 1,
    .inserted_window_dims = {0}, .num_scatter_dims = 1, .scatter_dims_to_operand_dims = {0},
    .index_vector_dim = 1, .kind = TPU_SCATTER_ADD};

TEST(scatter) {
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4, 3));
    tpu_value_t ix = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_value_t up = ir_param(g, TPU_F32, SHAPE(2, 3));
    EXPECT_TYPE(g, tpu_graph_scatter(g, x, ix, up, &kRows), "f32[4,3]");
    tpu_value_t part = ir_param(g, TPU_F32, SHAPE(2, 2));  /* windows may be smaller */
    EXPECT_TYPE(g, tpu_graph_scatter(g, x, ix, part, &kRows), "f32[4,3]");
    tpu_value_t coords = ir_param(g, TPU_I64, SHAPE(5, 2));
    tpu_value_t vals = ir_param(g, TPU_F32, SHAPE(5));
    tpu_scatter_attrs_t elems = {.num_inserted_window_dims = 2, .inserted_window_dims = {0, 1},
                                 .num_scatter_dims = 2, .scatter_dims_to_operand_dims = {0, 1},
                                 .index_vector_dim = 1, .kind = TPU_SCATTER_REPLACE,
                                 .check_bounds = true};
    tpu_value_t sc = tpu_graph_scatter(g, x, coords, vals, &elems);
    EXPECT_TYPE(g, sc, "f32[4,3]");
    CHECK(tpu_graph_node(g, sc)->attrs.scatter.check_bounds);
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_value_t u = ir_param(g, TPU_F32, SHAPE(2, 4));
    EXPECT_ERROR(g, tpu_graph_scatter(g, a, i, u, &kRows),
                 "scatter: updates f32[2,4] dim 1 (a window dim) exceeds operand f32[4,3] dim 1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_value_t u = ir_param(g, TPU_F32, SHAPE(3, 3));
    EXPECT_ERROR(g, tpu_graph_scatter(g, a, i, u, &kRows),
                 "scatter: updates f32[3,3] dim 0 (a scatter dim) must equal indices i32[2,1] "
                 "dim 0");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_value_t u = ir_param(g, TPU_F32, SHAPE(2, 3, 1));
    EXPECT_ERROR(g, tpu_graph_scatter(g, a, i, u, &kRows),
                 "scatter: updates f32[2,3,1] must have rank 2 (1 scatter dims + 1 window dims)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_value_t u = ir_param(g, TPU_F32, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_scatter(g, a, i, u, &kRows),
                 "scatter: update_window_dims[0] = 1 is outside 0..0");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_value_t u = ir_param(g, TPU_F16, SHAPE(2, 3));
    EXPECT_ERROR(g, tpu_graph_scatter(g, a, i, u, &kRows),
                 "scatter: operand/updates dtypes f32 and f16 differ");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t f = ir_param(g, TPU_F32, SHAPE(4, 3));
    tpu_value_t a = tpu_graph_compare(g, TPU_CMP_GT, f, f);
    tpu_value_t i = ir_param(g, TPU_I32, SHAPE(1, 1));
    tpu_value_t u = tpu_graph_slice(g, a, (int64_t[]){0, 0}, (int64_t[]){1, 3}, NULL);
    EXPECT_ERROR(g, tpu_graph_scatter(g, a, i, u, &kRows),
                 "scatter: operand dtype i1 is not supported (needs a float or integer type)");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(4, 3)), i = ir_param(g, TPU_I32, SHAPE(2, 1));
    tpu_value_t u = ir_param(g, TPU_F32, SHAPE(2, 3));
    tpu_scatter_attrs_t bad = kRows;
    bad.scatter_dims_to_operand_dims[0] = 2;
    EXPECT_ERROR(g, tpu_graph_scatter(g, a, i, u, &bad),
                 "scatter: scatter_dims_to_operand_dims[0] = 2 is outside 0..1");
    END_CASE;
  }
}

TEST(sort_and_argsort) {
  tpu_sort_attrs_t a = {.dim = 1, .descending = true, .stable = true};
  {
    tpu_graph_t *g = ir_graph();
    tpu_value_t x = ir_param(g, TPU_BF16, SHAPE(3, 5));
    tpu_value_t s = tpu_graph_sort(g, x, &a);
    EXPECT_TYPE(g, s, "bf16[3,5]");
    CHECK(tpu_graph_node(g, s)->attrs.sort.descending && tpu_graph_node(g, s)->attrs.sort.stable);
    EXPECT_TYPE(g, tpu_graph_argsort(g, x, &a), "i64[3,5]");
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_destroy(g);
  }
  {
    CASE;
    tpu_value_t y = ir_param(g, TPU_F32, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_sort(g, y, &a), "sort: dim 1 is outside 0..0");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t y = ir_param(g, TPU_F32, SCALAR);
    tpu_sort_attrs_t z = {0};
    EXPECT_ERROR(g, tpu_graph_argsort(g, y, &z), "argsort: operand must have rank >= 1");
    END_CASE;
  }
  {
    CASE;
    tpu_value_t y = ir_param(g, TPU_F32, SHAPE(3));
    EXPECT_ERROR(g, tpu_graph_sort(g, y, NULL), "sort: attrs is NULL");
    END_CASE;
  }
}

int main(void) {
  RUN(broadcast_reshape_transpose);
  RUN(slices);
  RUN(concatenate_pad_reverse);
  RUN(reductions);
  RUN(dot_general);
  RUN(convolution);
  RUN(gather);
  RUN(scatter);
  RUN(sort_and_argsort);
  return check_report();
}
