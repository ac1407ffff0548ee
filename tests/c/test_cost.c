/* test_cost.c: the cost model against formulas worked out by hand here, from
 * shared/reference/tpu-hardware.md (section 4: T = max(FLOPs/F, bytes/BW) + ~1.5 us per
 * kernel; MXU padding to 8 x mxu_dim x mxu_dim; f32 passes 1/3/6; (8,128) tiles, bf16
 * (16,128)), and the per-chip accounting. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "ir_util.h"
#include "tpu/cost.h"

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-15; }

static double pb(tpu_dtype_t dt, tpu_shape_t s) { return tpu_cost_padded_bytes(dt, &s); }

static const tpu_chip_spec_t *chip(tpu_chip_gen_t g) { return tpu_chip_spec(g); }

/* lhs[m,k] x rhs[k,n] of |dt| -> |dt|, precision |p|. */
static tpu_graph_t *matmul_graph(tpu_dtype_t dt, int64_t m, int64_t k, int64_t n,
                                 tpu_precision_t p) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t a = ir_param(g, dt, SHAPE(m, k));
  tpu_value_t b = ir_param(g, dt, SHAPE(k, n));
  tpu_dot_attrs_t at;
  memset(&at, 0, sizeof at);
  at.num_contract = 1;
  at.lhs_contract[0] = 1;
  at.rhs_contract[0] = 0;
  at.precision = p;
  tpu_graph_output(g, tpu_graph_dot_general(g, a, b, &at, dt), NULL);
  return g;
}

TEST(big_bf16_matmul_sits_at_the_compute_roof) {
  tpu_graph_t *g = matmul_graph(TPU_BF16, 4096, 4096, 4096, TPU_PRECISION_DEFAULT);
  tpu_cost_t c;
  CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &c));
  double flops = 2.0 * 4096 * 4096 * 4096;
  double bytes = 3.0 * 4096 * 4096 * 2;          /* no padding: all dims multiples of 128 */
  CHECK(near(c.flops, flops));
  CHECK(near(c.mxu_flops, flops));
  CHECK(near(c.bytes, bytes));
  CHECK(near(c.mxu_seconds, flops / 197e12));     /* v5e peak 197 TFLOP/s */
  CHECK(near(c.hbm_seconds, bytes / 819e9));      /* v5e HBM 819 GB/s */
  CHECK(near(c.seconds, flops / 197e12 + 1.5e-6));
  CHECK(c.kernels == 1 && c.compute_bound_kernels == 1 && c.passes == 1);
  /* arithmetic intensity above the v5e ridge (~240 FLOP/B) */
  CHECK(flops / bytes > 197e12 / 819e9);
  tpu_graph_destroy(g);
}

TEST(skinny_matmul_sits_at_the_memory_roof) {
  tpu_graph_t *g = matmul_graph(TPU_BF16, 8, 4096, 4096, TPU_PRECISION_DEFAULT);
  tpu_cost_t c;
  CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &c));
  /* bf16 rows pad to 16 (packed (16,128) tile): lhs and result take 16 x 4096 x 2 bytes */
  double bytes = 16.0 * 4096 * 2 + 4096.0 * 4096 * 2 + 16.0 * 4096 * 2;
  CHECK(near(c.bytes, bytes));
  CHECK(near(c.bytes_unpadded, 8.0 * 4096 * 2 * 2 + 4096.0 * 4096 * 2));
  CHECK(near(c.seconds, bytes / 819e9 + 1.5e-6));
  CHECK(c.compute_bound_kernels == 0);
  CHECK(near(c.flops, 2.0 * 8 * 4096 * 4096));
  tpu_graph_destroy(g);
}

TEST(f32_highest_costs_six_times_default) {
  tpu_cost_t d, h, hi;
  tpu_graph_t *g1 = matmul_graph(TPU_F32, 2048, 2048, 2048, TPU_PRECISION_DEFAULT);
  tpu_graph_t *g2 = matmul_graph(TPU_F32, 2048, 2048, 2048, TPU_PRECISION_HIGHEST);
  tpu_graph_t *g3 = matmul_graph(TPU_F32, 2048, 2048, 2048, TPU_PRECISION_HIGH);
  CHECK_OK(tpu_cost_graph(g1, chip(TPU_CHIP_V5P), &d));
  CHECK_OK(tpu_cost_graph(g2, chip(TPU_CHIP_V5P), &h));
  CHECK_OK(tpu_cost_graph(g3, chip(TPU_CHIP_V5P), &hi));
  CHECK(near(h.mxu_seconds, 6 * d.mxu_seconds));
  CHECK(near(hi.mxu_seconds, 3 * d.mxu_seconds));
  CHECK(near(d.mxu_seconds, 2.0 * 2048 * 2048 * 2048 / 459e12)); /* v5p 459 TFLOP/s */
  CHECK(near(h.flops, d.flops));  /* model FLOPs do not count passes */
  CHECK(h.passes == 6 && d.passes == 1);
  /* bf16 operands ignore the precision */
  tpu_graph_t *g4 = matmul_graph(TPU_BF16, 2048, 2048, 2048, TPU_PRECISION_HIGHEST);
  tpu_cost_t b;
  CHECK_OK(tpu_cost_graph(g4, chip(TPU_CHIP_V5P), &b));
  CHECK(near(b.mxu_seconds, d.mxu_seconds));
  tpu_graph_destroy(g1);
  tpu_graph_destroy(g2);
  tpu_graph_destroy(g3);
  tpu_graph_destroy(g4);
}

TEST(minor_dim_64_costs_twice_the_bytes_of_128) {
  tpu_cost_t c64, c128;
  tpu_graph_t *g = ir_graph();
  tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_NEG, ir_param(g, TPU_F32, SHAPE(1024, 64))), NULL);
  tpu_graph_t *h = ir_graph();
  tpu_graph_output(h, tpu_graph_unary(h, TPU_OP_NEG, ir_param(h, TPU_F32, SHAPE(1024, 128))), NULL);
  CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &c64));
  CHECK_OK(tpu_cost_graph(h, chip(TPU_CHIP_V5E), &c128));
  CHECK(near(c64.bytes, c128.bytes));                 /* 64 lanes pad to 128 */
  CHECK(near(c64.bytes, 2 * c64.bytes_unpadded));     /* = 2x the bytes of the data */
  CHECK(near(c128.bytes, 2.0 * 1024 * 128 * 4));      /* read + write */
  CHECK(near(c64.vpu_flops, 1024.0 * 64));
  tpu_graph_destroy(g);
  tpu_graph_destroy(h);
}

TEST(padded_bytes_tiles) {
  CHECK(near(pb(TPU_F32, SHAPE(3, 5)), 4.0 * 4 * 128));   /* 3 rows -> 4 */
  CHECK(near(pb(TPU_F32, SHAPE(1, 1)), 2.0 * 128 * 4));   /* 1 row -> 2 */
  CHECK(near(pb(TPU_F32, SHAPE(9, 128)), 16.0 * 128 * 4)); /* 9 -> 16 */
  CHECK(near(pb(TPU_BF16, SHAPE(9, 128)), 16.0 * 128 * 2)); /* (16,128) */
  CHECK(near(pb(TPU_BF16, SHAPE(17, 128)), 32.0 * 128 * 2));
  CHECK(near(pb(TPU_I8, SHAPE(33, 128)), 64.0 * 128));      /* (32,128) */
  CHECK(near(pb(TPU_BOOL, SHAPE(8, 128)), 8.0 * 128 * 4));  /* PRED 4 B */
  CHECK(near(pb(TPU_F32, SHAPE(2, 8, 1)), 2.0 * 8 * 128 * 4));
  CHECK(near(pb(TPU_F32, SHAPE(100)), 128.0 * 4));
  CHECK(near(pb(TPU_F32, SCALAR), 4.0));
}

TEST(mxu_tile_is_256_on_v6e) {
  /* K = N = 128: fills a 128x128 MXU, half of each 256 dim on v6e -> 4x the MXU work */
  tpu_graph_t *g = matmul_graph(TPU_BF16, 1024, 128, 128, TPU_PRECISION_DEFAULT);
  tpu_cost_t a, b;
  CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &a));
  CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V6E), &b));
  CHECK(near(a.mxu_flops, a.flops));
  CHECK(near(b.mxu_flops, 4 * b.flops));
  CHECK(b.pad_k == 128 && b.pad_n == 128 && b.pad_m == 1024);
  CHECK(near(b.pad_waste_flops, 3 * b.flops));
  /* head dim 64 contraction on v5e: K pads 64 -> 128 */
  tpu_graph_t *h = matmul_graph(TPU_BF16, 256, 64, 256, TPU_PRECISION_DEFAULT);
  tpu_cost_t c;
  CHECK_OK(tpu_cost_graph(h, chip(TPU_CHIP_V5E), &c));
  CHECK(near(c.mxu_flops, 2 * c.flops));
  CHECK(c.pad_k == 64);
  tpu_graph_destroy(g);
  tpu_graph_destroy(h);
}

TEST(fusion_into_kernels) {
  /* exp(neg(x)) + y: one loop fusion reading x, y and writing the result */
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(256, 256));
  tpu_value_t y = ir_param(g, TPU_F32, SHAPE(256, 256));
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, tpu_graph_unary(g, TPU_OP_NEG, x));
  tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_ADD, e, y), NULL);
  tpu_cost_t c;
  CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &c));
  CHECK(c.kernels == 1);
  CHECK(near(c.bytes, 3.0 * 256 * 256 * 4));
  CHECK(near(c.vpu_flops, 3.0 * 256 * 256));
  tpu_graph_destroy(g);

  /* dot + broadcast bias: the add fuses the dot (output fusion); a reduction of a
   * second output is its own kernel, reading the first output from HBM */
  g = ir_graph();
  tpu_value_t a = ir_param(g, TPU_F32, SHAPE(128, 256));
  tpu_value_t w = ir_param(g, TPU_F32, SHAPE(256, 512));
  tpu_value_t bias = ir_param(g, TPU_F32, SHAPE(512));
  tpu_dot_attrs_t at;
  memset(&at, 0, sizeof at);
  at.num_contract = 1;
  at.lhs_contract[0] = 1;
  at.rhs_contract[0] = 0;
  tpu_value_t d = tpu_graph_dot_general(g, a, w, &at, TPU_F32);
  int64_t bdims[1] = {1};
  tpu_shape_t out = SHAPE(128, 512);
  tpu_value_t z = tpu_graph_binary(g, TPU_OP_ADD, d, tpu_graph_broadcast_in_dim(g, bias, &out, bdims));
  bool red[TPU_MAX_RANK] = {true, false};
  tpu_graph_output(g, z, NULL);
  tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, z, red), NULL);
  CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &c));
  CHECK(c.kernels == 2 && c.mxu_kernels == 1);
  double k1 = (128.0 * 256 + 256.0 * 512 + 512 + 128.0 * 512) * 4;  /* a, w, bias, z */
  CHECK(near(c.bytes, k1 + 128.0 * 512 * 4 + 512.0 * 4));
  CHECK(near(c.flops, 2.0 * 128 * 256 * 512));
  CHECK(near(c.overhead_seconds, 2 * 1.5e-6));
  tpu_graph_destroy(g);
}

TEST(multi_output_fusion) {
  /* m' = m * 0.9 + g (an output) read only by p' = p - m' (an output): one kernel reads p,
   * m, g and writes m' and p' (XLA's multi-output fusion); m' read by a reduction too
   * stays its own kernel */
  for (int reduced = 0; reduced < 2; reduced++) {
    tpu_graph_t *g = ir_graph();
    tpu_shape_t s = SHAPE(256, 256);
    tpu_value_t p = ir_param(g, TPU_F32, s), m = ir_param(g, TPU_F32, s);
    tpu_value_t gr = ir_param(g, TPU_F32, s);
    int64_t none[1] = {0};
    tpu_shape_t sc = SCALAR;
    tpu_value_t k = tpu_graph_broadcast_in_dim(g, tpu_graph_constant(g, TPU_F32, &sc, 0.9), &s, none);
    tpu_value_t m2 = tpu_graph_binary(g, TPU_OP_ADD, tpu_graph_binary(g, TPU_OP_MUL, m, k), gr);
    tpu_value_t p2 = tpu_graph_binary(g, TPU_OP_SUB, p, m2);
    tpu_graph_output(g, p2, NULL);
    tpu_graph_output(g, m2, NULL);
    bool red[TPU_MAX_RANK] = {true, true};
    if (reduced) tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, m2, red), NULL);
    tpu_cost_t c;
    CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &c));
    double tile = 256.0 * 256 * 4;
    if (!reduced) {
      CHECK(c.kernels == 1);
      CHECK(near(c.bytes, 5 * tile)); /* p, m, g in; p', m' out */
      CHECK(near(c.vpu_flops, 3.0 * 256 * 256));
    } else {
      CHECK(c.kernels == 3); /* m'; p' reading it; the sum reading it */
    }
    tpu_graph_destroy(g);
  }
}

TEST(an_input_returned_as_output_is_a_copy) {
  /* a same-dtype host-to-device copy_ graph: parameter -> output */
  tpu_graph_t *g = ir_graph();
  tpu_graph_output(g, ir_param(g, TPU_F32, SHAPE(64, 256)), NULL);
  tpu_cost_t c;
  CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &c));
  CHECK(c.kernels == 1);
  CHECK(near(c.bytes, 2.0 * 64 * 256 * 4));
  CHECK(near(c.seconds, 2.0 * 64 * 256 * 4 / 819e9 + 1.5e-6));
  tpu_graph_destroy(g);
}

TEST(accounting_advances_every_generation) {
  tpu_cost_reset();
  tpu_graph_t *g = matmul_graph(TPU_BF16, 4096, 4096, 4096, TPU_PRECISION_DEFAULT);
  tpu_cost_entry_t *e = NULL;
  CHECK_OK(tpu_cost_entry_create(g, "aten::mm", &e));
  CHECK(e && strcmp(e->name, "aten::mm") == 0 && tpu_cost_entries() == e);
  tpu_cost_set_active_gen(TPU_CHIP_V5P);
  tpu_cost_set_detail(true);
  tpu_cost_launch(1, e);
  tpu_cost_launch(1, e);
  double ici[TPU_CHIP_GEN_COUNT] = {1e-3, 2e-3, 3e-3, 4e-3, 5e-3};
  CHECK_OK(tpu_cost_record(1, "all_reduce", 0, 0, 1e6, ici));
  CHECK(tpu_cost_record(1, "bad", -1.0, 0, 0, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_cost_record(99, "bad", 1.0, 0, 0, NULL) == TPU_ERR_OUT_OF_RANGE);
  tpu_cost_chip_totals_t t;
  tpu_cost_chip_totals(1, &t);
  for (int gen = 0; gen < TPU_CHIP_GEN_COUNT; gen++) {
    CHECK(near(t.clock[gen], 2 * e->cost[gen].seconds + ici[gen]));
  }
  CHECK(t.launches == 3 && e->launches == 2);
  CHECK(near(t.flops, 2 * 2.0 * 4096 * 4096 * 4096));
  tpu_cost_chip_totals(0, &t);
  CHECK(t.launches == 0);
  tpu_cost_event_t ev[4];
  CHECK(tpu_cost_timeline(0, ev, 4) == 3);
  CHECK(ev[0].entry == e && ev[0].device == 1 && ev[0].start == 0.0);
  CHECK(near(ev[1].start, e->cost[TPU_CHIP_V5P].seconds));
  CHECK(near(ev[2].end - ev[2].start, 3e-3) && strcmp(ev[2].name, "all_reduce") == 0);
  CHECK(ev[0].host_ns <= ev[2].host_ns);
  tpu_cost_set_detail(false);
  tpu_cost_launch(1, e);   /* totals only */
  CHECK(tpu_cost_timeline(0, ev, 4) == 3 && e->launches == 2);
  tpu_cost_reset();
  tpu_cost_chip_totals(1, &t);
  CHECK(t.launches == 0 && t.clock[TPU_CHIP_V5P] == 0.0 && tpu_cost_timeline(0, ev, 4) == 0);
  tpu_graph_destroy(g);
}

TEST(bad_graph_fails) {
  tpu_cost_t c;
  CHECK(tpu_cost_graph(NULL, chip(TPU_CHIP_V5E), &c) == TPU_ERR_INVALID_ARGUMENT);
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(4));
  tpu_graph_binary(g, TPU_OP_ADD, x, ir_param(g, TPU_F32, SHAPE(5)));  /* records an error */
  CHECK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &c) != TPU_OK);
  CHECK(c.kernels == 0);
  tpu_graph_destroy(g);
}

TEST(dead_nodes_cost_nothing) {
  /* a fused eager graph keeps values that died before the flush: a matmul and a
   * reduction no output reads must not add kernels, FLOPs or bytes */
  tpu_graph_t *live = matmul_graph(TPU_BF16, 256, 256, 256, TPU_PRECISION_DEFAULT);
  tpu_graph_t *g = ir_graph();
  tpu_value_t a = ir_param(g, TPU_BF16, SHAPE(256, 256));
  tpu_value_t b = ir_param(g, TPU_BF16, SHAPE(256, 256));
  tpu_dot_attrs_t at;
  memset(&at, 0, sizeof at);
  at.num_contract = 1;
  at.lhs_contract[0] = 1;
  at.rhs_contract[0] = 0;
  tpu_value_t dead = tpu_graph_dot_general(g, a, b, &at, TPU_BF16);
  tpu_value_t dead2 = tpu_graph_unary(g, TPU_OP_EXP, dead);
  bool dims[2] = {true, false};
  (void)tpu_graph_reduce(g, TPU_REDUCE_SUM, dead2, dims);
  tpu_graph_output(g, tpu_graph_dot_general(g, a, b, &at, TPU_BF16), NULL);
  tpu_cost_t c, want;
  CHECK_OK(tpu_cost_graph(g, chip(TPU_CHIP_V5E), &c));
  CHECK_OK(tpu_cost_graph(live, chip(TPU_CHIP_V5E), &want));
  CHECK(c.kernels == 1);
  CHECK(near(c.flops, want.flops) && near(c.bytes, want.bytes));
  CHECK(near(c.vpu_flops, 0) && near(c.seconds, want.seconds));
  tpu_graph_destroy(g);
  tpu_graph_destroy(live);
}

int main(void) {
  RUN(big_bf16_matmul_sits_at_the_compute_roof);
  RUN(skinny_matmul_sits_at_the_memory_roof);
  RUN(f32_highest_costs_six_times_default);
  RUN(minor_dim_64_costs_twice_the_bytes_of_128);
  RUN(padded_bytes_tiles);
  RUN(mxu_tile_is_256_on_v6e);
  RUN(fusion_into_kernels);
  RUN(multi_output_fusion);
  RUN(an_input_returned_as_output_is_a_copy);
  RUN(accounting_advances_every_generation);
  RUN(bad_graph_fails);
  RUN(dead_nodes_cost_nothing);
  return check_report();
}
