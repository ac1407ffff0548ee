/* test_ir_serialize.c: tpu_graph_serialize / tpu_graph_deserialize round-trip graphs that
 * use every attribute struct (node by node and by tpu_graph_hash), and turn truncated,
 * bit-flipped, re-sealed-but-corrupted and foreign bytes into error statuses, never a crash
 * or an overread (this file runs under ASan/UBSan in `make ctest-asan`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/graph_internal.h"
#include "ir_util.h"
#include "tpu/ir.h"

/* A graph that touches every op family and attribute struct: strided parameters and
 * outputs, float and int constants, iota, rng, compare, select, clamp, convert, bitcast,
 * broadcast, reshape, transpose, slice, dynamic (update) slice, concatenate, pad, reverse,
 * reduce, reduce_window, scan, dot_general, convolution, gather, scatter, sort, argsort. */
static tpu_graph_t *build_rich(void) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t xs = SHAPE(4, 3);
  int64_t xst[2] = {1, 4};
  tpu_value_t x = tpu_graph_parameter(g, TPU_F32, &xs, xst);
  tpu_value_t w = ir_param(g, TPU_F32, SHAPE(3, 5));
  tpu_value_t seed = ir_param(g, TPU_I64, SCALAR), off = ir_param(g, TPU_I64, SCALAR);
  tpu_dot_attrs_t d = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {0},
                       .precision = TPU_PRECISION_HIGH};
  tpu_value_t h = tpu_graph_dot_general(g, x, w, &d, TPU_F32);
  tpu_shape_t cs = SHAPE(4, 5);
  tpu_value_t c = tpu_graph_constant(g, TPU_F32, &cs, 0.1234567890123);
  tpu_value_t ci = tpu_graph_constant_int(g, TPU_I64, &cs, -1234567890123ll);
  tpu_value_t r = tpu_graph_rng(g, TPU_RNG_NORMAL, TPU_F32, &cs, seed, off);
  tpu_value_t s = tpu_graph_binary(g, TPU_OP_SUB, h, c);
  tpu_value_t m = tpu_graph_compare(g, TPU_CMP_LE, s, r);
  tpu_value_t sel = tpu_graph_select(g, m, s, c);
  tpu_value_t cl = tpu_graph_clamp(g, c, sel, r);
  tpu_value_t cv = tpu_graph_convert(g, ci, TPU_F32);
  tpu_value_t bc = tpu_graph_bitcast_convert(g, cl, TPU_I32);
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_TANH, tpu_graph_binary(g, TPU_OP_ADD, cl, cv));
  tpu_shape_t b3 = SHAPE(2, 4, 5);
  tpu_value_t b = tpu_graph_broadcast_in_dim(g, e, &b3, (int64_t[]){1, 2});
  tpu_shape_t rs = SHAPE(8, 5);
  tpu_value_t rsh = tpu_graph_reshape(g, b, &rs);
  tpu_value_t t = tpu_graph_transpose(g, b, (int64_t[]){2, 0, 1});
  tpu_value_t sl = tpu_graph_slice(g, t, (int64_t[]){0, 0, 1}, (int64_t[]){5, 2, 4},
                                   (int64_t[]){2, 1, 2});
  tpu_value_t i0 = tpu_graph_constant_int(g, TPU_I32, &(tpu_shape_t){0}, 1);
  tpu_value_t ds = tpu_graph_dynamic_slice(g, rsh, (tpu_value_t[]){i0, i0},
                                           (int64_t[]){3, 2});
  tpu_value_t dus = tpu_graph_dynamic_update_slice(g, rsh, ds, (tpu_value_t[]){i0, i0});
  tpu_value_t cat = tpu_graph_concatenate(g, (tpu_value_t[]){rsh, dus}, 2, 0);
  tpu_value_t zero = tpu_graph_constant(g, TPU_F32, &(tpu_shape_t){0}, 0.0);
  tpu_value_t pad = tpu_graph_pad(g, cat, zero, (int64_t[]){1, -1}, (int64_t[]){0, 2},
                                  (int64_t[]){1, 0});
  tpu_value_t rev = tpu_graph_reverse(g, pad, (bool[]){true, false});
  tpu_value_t red = tpu_graph_reduce(g, TPU_REDUCE_ARGMAX, rev, (bool[]){false, true});
  tpu_value_t scan = tpu_graph_scan(g, TPU_REDUCE_PROD, rev, 1);
  tpu_sort_attrs_t so = {.dim = 1, .descending = true, .stable = true};
  tpu_value_t sorted = tpu_graph_sort(g, scan, &so);
  tpu_value_t order = tpu_graph_argsort(g, scan, &so);
  tpu_value_t ix = ir_param(g, TPU_I32, SHAPE(2, 1));
  tpu_gather_attrs_t ga = {.num_offset_dims = 1, .offset_dims = {1}, .num_collapsed = 1,
                           .collapsed_slice_dims = {0}, .num_start_index_map = 1,
                           .start_index_map = {0}, .index_vector_dim = 1,
                           .slice_sizes = {1, 5}, .check_bounds = true};
  tpu_value_t gt = tpu_graph_gather(g, sel, ix, &ga);
  tpu_scatter_attrs_t sa = {.num_update_window_dims = 1, .num_inserted_window_dims = 1,
                            .num_scatter_dims = 1, .update_window_dims = {1},
                            .inserted_window_dims = {0}, .scatter_dims_to_operand_dims = {0},
                            .index_vector_dim = 1, .kind = TPU_SCATTER_ADD,
                            .check_bounds = true};
  tpu_value_t sc = tpu_graph_scatter(g, sel, ix, gt, &sa);
  tpu_value_t img = ir_param(g, TPU_BF16, SHAPE(1, 5, 5, 1));
  tpu_value_t k = ir_param(g, TPU_BF16, SHAPE(2, 2, 1, 1));
  tpu_conv_attrs_t co = {.num_spatial = 2, .stride = {2, 1}, .pad_lo = {1, 0},
                         .pad_hi = {0, 1}, .lhs_dilation = {1, 1}, .rhs_dilation = {1, 2},
                         .feature_group_count = 1, .batch_group_count = 1, .in_feature = 3,
                         .in_spatial = {1, 2}, .k_out_feature = 3, .k_in_feature = 2,
                         .k_spatial = {0, 1}, .out_feature = 3, .out_spatial = {1, 2},
                         .precision = TPU_PRECISION_HIGHEST};
  tpu_value_t conv = tpu_graph_convolution(g, img, k, &co, TPU_F32);
  tpu_reduce_window_attrs_t rw = {.kind = TPU_REDUCE_MAX, .window = {1, 2, 2, 1},
                                  .stride = {1, 2, 1, 1}, .dilation = {1, 1, 2, 1},
                                  .pad_lo = {0, 1, 0, 0}, .pad_hi = {0, 0, 1, 0}};
  tpu_value_t pool = tpu_graph_reduce_window(g, img, &rw);
  tpu_shape_t is = SHAPE(3, 3);
  tpu_value_t io = tpu_graph_iota(g, TPU_I32, &is, 1);
  int64_t ost[2] = {1, 4}; /* column-major f32[4,5] */
  tpu_graph_output(g, sl, NULL);
  tpu_graph_output(g, sel, ost);
  tpu_graph_output(g, bc, NULL);
  tpu_graph_output(g, red, NULL);
  tpu_graph_output(g, sorted, NULL);
  tpu_graph_output(g, order, NULL);
  tpu_graph_output(g, sc, NULL);
  tpu_graph_output(g, conv, NULL);
  tpu_graph_output(g, pool, NULL);
  tpu_graph_output(g, io, NULL);
  tpu_graph_output(g, io, NULL);
  return g;
}

/* Node-by-node equality (attributes compared through a one-node hash is too weak: compare
 * the union's bytes of both, which the builders zero-fill, after the fields). */
static bool same_graph(const tpu_graph_t *a, const tpu_graph_t *b) {
  if (tpu_graph_num_nodes(a) != tpu_graph_num_nodes(b)) return false;
  if (tpu_graph_num_params(a) != tpu_graph_num_params(b)) return false;
  if (tpu_graph_num_outputs(a) != tpu_graph_num_outputs(b)) return false;
  for (int i = 0; i < tpu_graph_num_nodes(a); i++) {
    const tpu_node_t *x = tpu_graph_node(a, i), *y = tpu_graph_node(b, i);
    if (x->op != y->op || x->dtype != y->dtype || !tpu_shape_equal(&x->shape, &y->shape) ||
        x->num_operands != y->num_operands) {
      fprintf(stderr, "  node %d differs\n", i);
      return false;
    }
    for (int k = 0; k < x->num_operands; k++) {
      if (x->operands[k] != y->operands[k]) return false;
    }
    if (memcmp(&x->attrs, &y->attrs, sizeof x->attrs) != 0) {
      fprintf(stderr, "  node %d (%s): attributes differ\n", i, tpu_op_name(x->op));
      return false;
    }
  }
  for (int i = 0; i < tpu_graph_num_outputs(a); i++) {
    int64_t sa[TPU_MAX_RANK] = {0}, sb[TPU_MAX_RANK] = {0};
    bool ka = tpu_graph_output_strides(a, i, sa), kb = tpu_graph_output_strides(b, i, sb);
    if (tpu_graph_output_value(a, i) != tpu_graph_output_value(b, i) || ka != kb ||
        memcmp(sa, sb, sizeof sa) != 0) {
      return false;
    }
  }
  return tpu_graph_hash(a) == tpu_graph_hash(b);
}

static void serialize(const tpu_graph_t *g, unsigned char **bytes, size_t *len) {
  *bytes = NULL;
  *len = 0;
  CHECK_OK(tpu_graph_serialize(g, tpu_allocator_system(), bytes, len));
}

static void free_bytes(unsigned char *p) { tpu_allocator_free(tpu_allocator_system(), p); }

static void reseal(unsigned char *b, size_t len) {
  const size_t H = TPU_IR_SERIAL_HEADER_BYTES;
  uint64_t sum = tpu_ir_serial_checksum(b + H, len - H);
  memcpy(b + 28, &sum, 8);
}

TEST(rich_graph_round_trips) {
  tpu_graph_t *g = build_rich();
  CHECK_OK(tpu_graph_status(g));
  CHECK_OK(tpu_graph_verify(g));
  unsigned char *bytes;
  size_t len;
  serialize(g, &bytes, &len);
  tpu_graph_t *back = NULL;
  CHECK_OK(tpu_graph_deserialize(bytes, len, tpu_allocator_system(), &back));
  CHECK(back && same_graph(g, back));
  /* serializing the copy gives the same bytes */
  unsigned char *again;
  size_t len2;
  if (back) {
    serialize(back, &again, &len2);
    CHECK(len2 == len && memcmp(again, bytes, len) == 0);
    free_bytes(again);
  }
  printf("  %d nodes -> %zu bytes\n", tpu_graph_num_nodes(g), len);
  tpu_graph_destroy(back);
  free_bytes(bytes);
  tpu_graph_destroy(g);
}

TEST(empty_and_tiny_graphs_round_trip) {
  tpu_graph_t *g = ir_graph();
  unsigned char *bytes;
  size_t len;
  serialize(g, &bytes, &len);
  tpu_graph_t *back = NULL;
  CHECK_OK(tpu_graph_deserialize(bytes, len, tpu_allocator_system(), &back));
  CHECK(back && same_graph(g, back));
  tpu_graph_destroy(back);
  free_bytes(bytes);
  tpu_value_t p = ir_param(g, TPU_BOOL, SCALAR);
  tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_NOT, p), NULL);
  serialize(g, &bytes, &len);
  CHECK_OK(tpu_graph_deserialize(bytes, len, tpu_allocator_system(), &back));
  CHECK(back && same_graph(g, back));
  tpu_graph_destroy(back);
  free_bytes(bytes);
  tpu_graph_destroy(g);
}

TEST(bad_graph_is_not_serialized) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2));
  tpu_value_t b = ir_param(g, TPU_F32, SHAPE(3));
  tpu_graph_binary(g, TPU_OP_ADD, a, b); /* records an error */
  unsigned char *bytes = NULL;
  size_t len = 0;
  CHECK(tpu_graph_serialize(g, tpu_allocator_system(), &bytes, &len) != TPU_OK);
  CHECK(bytes == NULL);
  tpu_graph_destroy(g);
}

TEST(every_truncation_is_an_error) {
  tpu_graph_t *g = build_rich();
  unsigned char *bytes;
  size_t len;
  serialize(g, &bytes, &len);
  int failures = 0;
  for (size_t n = 0; n < len; n++) {
    /* a fresh copy of exactly n bytes, so ASan sees any read past the end */
    unsigned char *cut = malloc(n ? n : 1);
    memcpy(cut, bytes, n);
    tpu_graph_t *back = NULL;
    if (tpu_graph_deserialize(n ? cut : NULL, n, tpu_allocator_system(), &back) == TPU_OK) {
      failures++;
    }
    CHECK(back == NULL);
    /* and re-sealed, to reach the decoder past the checksum */
    if (n >= TPU_IR_SERIAL_HEADER_BYTES) {
      uint64_t body = n - TPU_IR_SERIAL_HEADER_BYTES;
      memcpy(cut + 20, &body, 8);
      reseal(cut, n);
      if (tpu_graph_deserialize(cut, n, tpu_allocator_system(), &back) == TPU_OK) {
        tpu_graph_destroy(back); /* a cut between outputs can still be a valid graph */
        back = NULL;
      }
    }
    free(cut);
  }
  CHECK(failures == 0);
  free_bytes(bytes);
  tpu_graph_destroy(g);
}

TEST(every_bit_flip_is_an_error) {
  tpu_graph_t *g = build_rich();
  unsigned char *bytes;
  size_t len;
  serialize(g, &bytes, &len);
  unsigned char *copy = malloc(len);
  int accepted = 0;
  for (size_t i = 0; i < len; i++) {
    for (int bit = 0; bit < 8; bit++) {
      memcpy(copy, bytes, len);
      copy[i] ^= (unsigned char)(1u << bit);
      tpu_graph_t *back = NULL;
      if (tpu_graph_deserialize(copy, len, tpu_allocator_system(), &back) == TPU_OK) {
        accepted++;
        tpu_graph_destroy(back);
      }
    }
  }
  CHECK(accepted == 0); /* the checksum catches every single-bit flip */
  free(copy);
  free_bytes(bytes);
  tpu_graph_destroy(g);
}

TEST(resealed_corruption_is_decoded_safely) {
  tpu_graph_t *g = build_rich();
  unsigned char *bytes;
  size_t len;
  serialize(g, &bytes, &len);
  unsigned char *copy = malloc(len);
  static const unsigned char patterns[] = {0x01, 0x80, 0xff, 0x7f, 0x10};
  int accepted = 0, rejected = 0;
  for (size_t i = TPU_IR_SERIAL_HEADER_BYTES; i < len; i++) {
    for (size_t p = 0; p < sizeof patterns; p++) {
      memcpy(copy, bytes, len);
      copy[i] ^= patterns[p];
      reseal(copy, len);
      tpu_graph_t *back = NULL;
      if (tpu_graph_deserialize(copy, len, tpu_allocator_system(), &back) == TPU_OK) {
        CHECK_OK(tpu_graph_verify(back)); /* anything accepted is a valid graph */
        accepted++;
        tpu_graph_destroy(back);
      } else {
        CHECK(back == NULL);
        rejected++;
      }
    }
  }
  printf("  re-sealed corruptions: %d rejected, %d still valid graphs\n", rejected, accepted);
  CHECK(rejected > 0);
  free(copy);
  free_bytes(bytes);
  tpu_graph_destroy(g);
}

TEST(foreign_header_is_refused) {
  tpu_graph_t *g = build_rich();
  unsigned char *bytes;
  size_t len;
  serialize(g, &bytes, &len);
  tpu_graph_t *back = NULL;
  bytes[12] ^= 1; /* the ABI tag */
  CHECK(tpu_graph_deserialize(bytes, len, tpu_allocator_system(), &back) != TPU_OK);
  CHECK_CONTAINS(tpu_status_message(), "incompatible build");
  bytes[12] ^= 1;
  bytes[8] ^= 2; /* the format version */
  CHECK(tpu_graph_deserialize(bytes, len, tpu_allocator_system(), &back) != TPU_OK);
  bytes[8] ^= 2;
  bytes[0] = 'X'; /* the magic */
  CHECK(tpu_graph_deserialize(bytes, len, tpu_allocator_system(), &back) != TPU_OK);
  CHECK(back == NULL);
  free_bytes(bytes);
  tpu_graph_destroy(g);
}

int main(void) {
  RUN(rich_graph_round_trips);
  RUN(empty_and_tiny_graphs_round_trip);
  RUN(bad_graph_is_not_serialized);
  RUN(every_truncation_is_an_error);
  RUN(every_bit_flip_is_an_error);
  RUN(resealed_corruption_is_decoded_safely);
  RUN(foreign_header_is_refused);
  return check_report();
}
