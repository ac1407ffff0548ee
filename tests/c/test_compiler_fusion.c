/* test_compiler_fusion.c: kernel fusion and memory planning in tpu_compile.
 *
 * Structure: kernel counts and the described steps (tpu_executable_describe) for an
 * elementwise chain, layer norm, softmax, matmul + bias + gelu-ish + residual, with fusion
 * on and off. Numbers: every fused executable against the same graph compiled with all
 * passes disabled, bit for bit (f32, bf16 and f16 chains; reductions whose operand is
 * computed chunk by chunk), plus a randomized sweep of elementwise graphs with broadcasts,
 * constants, compares and selects.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/graph_internal.h"
#include "compile_util.h"
#include "pool_helper.h"

static tpu_pool_t *g_pool;

static char *describe(const tpu_executable_t *exe) {
  char *text = NULL;
  CHECK_OK(tpu_executable_describe(exe, tpu_allocator_system(), &text, NULL));
  return text;
}

static void free_text(char *t) { tpu_allocator_free(tpu_allocator_system(), t); }

static tpu_value_t bcast(tpu_graph_t *g, tpu_value_t x, tpu_shape_t s, const int64_t *dims) {
  return tpu_graph_broadcast_in_dim(g, x, &s, dims);
}

static tpu_value_t kf(tpu_graph_t *g, tpu_dtype_t dt, double v) {
  tpu_shape_t sc = SCALAR;
  return tpu_graph_constant(g, dt, &sc, v);
}

static tpu_value_t splat(tpu_graph_t *g, tpu_dtype_t dt, double v, tpu_shape_t s) {
  int64_t none[1] = {0};
  return bcast(g, kf(g, dt, v), s, none);
}

/* A chain of 5 elementwise ops: ((x * y + 1) -> tanh) * x - y, exp. */
static tpu_graph_t *chain5(tpu_dtype_t dt, tpu_shape_t s) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, dt, s), y = ir_param(g, dt, s);
  tpu_value_t a = tpu_graph_binary(g, TPU_OP_MUL, x, y);
  a = tpu_graph_binary(g, TPU_OP_ADD, a, splat(g, dt, 1.0, s));
  a = tpu_graph_unary(g, TPU_OP_TANH, a);
  a = tpu_graph_binary(g, TPU_OP_MUL, a, x);
  a = tpu_graph_binary(g, TPU_OP_SUB, a, y);
  CHECK_OK(tpu_graph_output(g, a, NULL));
  return g;
}

TEST(elementwise_chain_is_one_kernel) {
  tpu_dtype_t dts[3] = {TPU_F32, TPU_BF16, TPU_F16};
  for (int i = 0; i < 3; i++) {
    tpu_graph_t *g = chain5(dts[i], SHAPE(37, 129));
    tpu_executable_t *on = cu_compile(g, 0), *off = cu_compile(g, TPU_PASS_ALL);
    if (on && off) {
      CHECK(tpu_executable_num_kernels(on) == 1);
      CHECK(tpu_executable_num_fused(on) == 1);
      CHECK(tpu_executable_num_kernels(off) == 6); /* the constant, then 5 ops */
      CHECK(tpu_executable_scratch_bytes(on) == 0);
      CHECK(tpu_executable_unplanned_bytes(off) > tpu_executable_scratch_bytes(off));
      char *t = describe(on);
      CHECK_CONTAINS(t, "0: FUSED(MUL,ADD,TANH,MUL,SUB) ");
      CHECK_CONTAINS(t, "[37,129] -> output 0");
      free_text(t);
    }
    tpu_executable_release(on);
    tpu_executable_release(off);
    CHECK(cu_optimized_vs_plain(g, g_pool) == 0); /* bf16/f16: intermediates rounded as unfused */
    tpu_graph_destroy(g);
  }
}

/* Layer norm over the last dim (as lowered: mean, centred, variance, rsqrt, affine). */
static tpu_graph_t *layer_norm(int64_t rows, int64_t cols) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(rows, cols), r = SHAPE(rows), c = SHAPE(cols);
  tpu_value_t x = ir_param(g, TPU_F32, s), w = ir_param(g, TPU_F32, c), b = ir_param(g, TPU_F32, c);
  bool last[2] = {false, true};
  int64_t d0[1] = {0}, d1[1] = {1};
  tpu_value_t inv_n = splat(g, TPU_F32, 1.0 / (double)cols, r);
  tpu_value_t mean = tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_reduce(g, TPU_REDUCE_SUM, x, last), inv_n);
  tpu_value_t xc = tpu_graph_binary(g, TPU_OP_SUB, x, bcast(g, mean, s, d0));
  tpu_value_t var = tpu_graph_reduce(g, TPU_REDUCE_SUM, tpu_graph_binary(g, TPU_OP_MUL, xc, xc), last);
  var = tpu_graph_binary(g, TPU_OP_MUL, var, inv_n);
  tpu_value_t rstd = tpu_graph_unary(
      g, TPU_OP_RSQRT, tpu_graph_binary(g, TPU_OP_ADD, var, splat(g, TPU_F32, 1e-5, r)));
  tpu_value_t y = tpu_graph_binary(g, TPU_OP_MUL, xc, bcast(g, rstd, s, d0));
  y = tpu_graph_binary(g, TPU_OP_MUL, y, bcast(g, w, s, d1));
  y = tpu_graph_binary(g, TPU_OP_ADD, y, bcast(g, b, s, d1));
  CHECK_OK(tpu_graph_output(g, y, NULL));
  CHECK_OK(tpu_graph_output(g, mean, NULL));
  CHECK_OK(tpu_graph_output(g, rstd, NULL));
  return g;
}

TEST(layer_norm_fuses_into_few_kernels) {
  int64_t sizes[3][2] = {{8, 64}, {300, 257}, {4, 70000}}; /* the last: several chunks */
  for (int i = 0; i < 3; i++) {
    tpu_graph_t *g = layer_norm(sizes[i][0], sizes[i][1]);
    tpu_executable_t *on = cu_compile(g, 0), *off = cu_compile(g, TPU_PASS_ALL);
    if (on && off) {
      char *t = describe(on);
      if (i == 0) printf("  layer norm [8,64]: %d kernels fused, %d unfused\n%s",
                         tpu_executable_num_kernels(on), tpu_executable_num_kernels(off), t);
      /* mean (reduce + scale); then per chunk of rows: centred x (side), variance (square +
       * reduce + scale + eps + rsqrt), normalize + affine (tail) */
      CHECK(tpu_executable_num_kernels(on) == 2);
      CHECK(tpu_executable_num_kernels(off) >= 12);
      CHECK_CONTAINS(t, "0: FUSED(REDUCE,MUL) f32[");
      CHECK_CONTAINS(t, "1: FUSED(SUB,MUL,REDUCE,MUL,ADD,RSQRT,MUL,MUL,ADD) f32[");
      CHECK_CONTAINS(t, "-> output 2, side f32[");
      CHECK_CONTAINS(t, "] -> scratch, tail f32[");
      CHECK_CONTAINS(t, "] -> output 0\n");
      /* fusion leaves fewer intermediates and no higher a peak (unfused, most of them wait
       * in output 0, which the last step writes) */
      CHECK(tpu_executable_unplanned_bytes(on) < tpu_executable_unplanned_bytes(off));
      CHECK(tpu_executable_scratch_bytes(on) <= tpu_executable_scratch_bytes(off));
      free_text(t);
    }
    tpu_executable_release(on);
    tpu_executable_release(off);
    CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
    tpu_graph_destroy(g);
  }
}

/* Softmax over the last dim: exp(x - max) / sum. */
static tpu_graph_t *softmax(tpu_dtype_t dt, int64_t rows, int64_t cols) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(rows, cols);
  tpu_value_t x = ir_param(g, dt, s);
  bool last[2] = {false, true};
  int64_t d0[1] = {0};
  tpu_value_t m = tpu_graph_reduce(g, TPU_REDUCE_MAX, x, last);
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, tpu_graph_binary(g, TPU_OP_SUB, x, bcast(g, m, s, d0)));
  tpu_value_t sum = tpu_graph_reduce(g, TPU_REDUCE_SUM, e, last);
  tpu_value_t y = tpu_graph_binary(g, TPU_OP_DIV, e, bcast(g, sum, s, d0));
  CHECK_OK(tpu_graph_output(g, y, NULL));
  return g;
}

TEST(softmax_fuses) {
  tpu_graph_t *g = softmax(TPU_F32, 64, 1000);
  tpu_executable_t *on = cu_compile(g, 0), *off = cu_compile(g, TPU_PASS_ALL);
  if (on && off) {
    char *t = describe(on);
    printf("  softmax [64,1000]: %d kernels fused, %d unfused\n%s", tpu_executable_num_kernels(on),
           tpu_executable_num_kernels(off), t);
    CHECK(tpu_executable_num_kernels(on) == 2); /* max; exp(x - max), sum, divide by rows */
    CHECK(tpu_executable_num_kernels(off) == 5);
    CHECK_CONTAINS(t, "1: FUSED(SUB,EXP,REDUCE,DIV) f32[64] -> scratch, side f32[64,1000] -> "
                      "scratch, tail f32[64,1000] -> output 0");
    free_text(t);
  }
  tpu_executable_release(on);
  tpu_executable_release(off);
  CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
  tpu_graph_destroy(g);
  /* a softmax whose exp feeds only the sum (log-sum-exp): the exp is computed in chunks */
  g = ir_graph();
  tpu_shape_t s = SHAPE(512, 300);
  tpu_value_t x = ir_param(g, TPU_BF16, s);
  bool last[2] = {false, true};
  int64_t d0[1] = {0};
  tpu_value_t m = tpu_graph_reduce(g, TPU_REDUCE_MAX, x, last);
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, tpu_graph_binary(g, TPU_OP_SUB, x, bcast(g, m, s, d0)));
  tpu_value_t lse = tpu_graph_binary(g, TPU_OP_ADD, tpu_graph_unary(g, TPU_OP_LOG, tpu_graph_reduce(g, TPU_REDUCE_SUM, e, last)), m);
  CHECK_OK(tpu_graph_output(g, lse, NULL));
  on = cu_compile(g, 0);
  if (on) {
    char *t = describe(on);
    CHECK(tpu_executable_num_kernels(on) == 2);
    CHECK_CONTAINS(t, "1: FUSED(SUB,EXP,REDUCE,LOG,ADD) bf16[512] -> output 0");
    /* the [512,300] exponentials never exist whole: a chunk of 218 rows */
    CHECK(tpu_executable_scratch_bytes(on) < 512 * 300 * 2);
    free_text(t);
  }
  tpu_executable_release(on);
  CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
  tpu_graph_destroy(g);
}

TEST(matmul_with_epilogue_is_one_step) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(16, 32);
  tpu_value_t a = ir_param(g, TPU_F32, SHAPE(16, 24)), w = ir_param(g, TPU_F32, SHAPE(24, 32));
  tpu_value_t bias = ir_param(g, TPU_F32, SHAPE(32)), res = ir_param(g, TPU_F32, s);
  tpu_dot_attrs_t da;
  memset(&da, 0, sizeof da);
  da.num_contract = 1;
  da.lhs_contract[0] = 1;
  da.rhs_contract[0] = 0;
  tpu_value_t y = tpu_graph_dot_general(g, a, w, &da, TPU_F32);
  int64_t d1[1] = {1};
  y = tpu_graph_binary(g, TPU_OP_ADD, y, bcast(g, bias, s, d1));
  y = tpu_graph_binary(g, TPU_OP_MAX, y, splat(g, TPU_F32, 0.0, s)); /* relu */
  y = tpu_graph_binary(g, TPU_OP_ADD, y, res);
  CHECK_OK(tpu_graph_output(g, y, NULL));
  tpu_executable_t *on = cu_compile(g, 0), *off = cu_compile(g, TPU_PASS_ALL);
  if (on && off) {
    CHECK(tpu_executable_num_kernels(on) == 1);
    CHECK(tpu_executable_num_kernels(off) == 5);
    char *t = describe(on);
    CHECK_CONTAINS(t, "0: FUSED(DOT_GENERAL,ADD,MAX,ADD) f32[16,32] -> output 0");
    free_text(t);
  }
  tpu_executable_release(on);
  tpu_executable_release(off);
  CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
  tpu_graph_destroy(g);
}

/* A linear layer's bias (the epilogue only adds one f32 input): the dot kernel adds it to
 * each tile of the product in cache. The same bits as the plain executable (dot, then a
 * broadcast ADD) whether the bias runs along the columns (added in the matmul's tiles), along
 * the rows or is a full matrix (added after the product by the same kernel call); with a
 * relu after it the epilogue is a program again. */
TEST(matmul_adds_its_bias) {
  tpu_dot_attrs_t da;
  memset(&da, 0, sizeof da);
  da.num_contract = 1;
  da.lhs_contract[0] = 1;
  da.rhs_contract[0] = 0;
  for (int c = 0; c < 4; c++) {
    /* 0: bias per column; 1: per row; 2: a full matrix; 3: bias then relu */
    tpu_graph_t *g = ir_graph();
    tpu_shape_t s = SHAPE(61, 75);
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(61, 301)), w = ir_param(g, TPU_F32, SHAPE(301, 75));
    tpu_value_t y = tpu_graph_dot_general(g, a, w, &da, TPU_F32), b;
    if (c == 1) {
      int64_t d0[1] = {0};
      b = bcast(g, ir_param(g, TPU_F32, SHAPE(61)), s, d0);
    } else if (c == 2) {
      b = ir_param(g, TPU_F32, s);
    } else {
      int64_t d1[1] = {1};
      b = bcast(g, ir_param(g, TPU_F32, SHAPE(75)), s, d1);
    }
    y = tpu_graph_binary(g, TPU_OP_ADD, y, b);
    if (c == 3) y = tpu_graph_binary(g, TPU_OP_MAX, y, splat(g, TPU_F32, 0.0, s));
    CHECK_OK(tpu_graph_output(g, y, NULL));
    tpu_executable_t *on = cu_compile(g, 0);
    if (on) {
      CHECK(tpu_executable_num_kernels(on) == 1);
      char *t = describe(on);
      if (c == 3) {
        CHECK(!strstr(t, "the matmul adds the bias"));
      } else {
        CHECK_CONTAINS(t, "0: FUSED(DOT_GENERAL,ADD) f32[61,75] -> output 0 (the matmul adds the bias)");
      }
      free_text(t);
    }
    tpu_executable_release(on);
    CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
    tpu_graph_destroy(g);
  }
}

/* An f32 head under a bf16 output: the fused step stores the head's result in the output
 * before its epilogue reads it, which rounds it to bf16. A bf16 addmm (beta * c + alpha *
 * a @ b, rounded once) and a bf16 mean (sum / n) must then run their head on its own; a
 * product only rounded (a bf16 matmul) still fuses. */
TEST(f32_heads_under_bf16_outputs_round_once) {
  tpu_shape_t s = SHAPE(16, 32);
  tpu_dot_attrs_t da;
  memset(&da, 0, sizeof da);
  da.num_contract = 1;
  da.lhs_contract[0] = 1;
  da.rhs_contract[0] = 0;
  for (int epilogue = 0; epilogue < 2; epilogue++) {
    tpu_graph_t *g = ir_graph();
    tpu_value_t a = ir_param(g, TPU_BF16, SHAPE(16, 24)), b = ir_param(g, TPU_BF16, SHAPE(24, 32));
    tpu_value_t y = tpu_graph_dot_general(g, a, b, &da, TPU_F32);
    if (epilogue) {
      tpu_value_t c = tpu_graph_convert(g, ir_param(g, TPU_BF16, s), TPU_F32);
      y = tpu_graph_binary(g, TPU_OP_MUL, y, splat(g, TPU_F32, 2.0315, s));
      y = tpu_graph_binary(g, TPU_OP_ADD, y, tpu_graph_binary(g, TPU_OP_MUL, c, splat(g, TPU_F32, -4.775, s)));
    }
    CHECK_OK(tpu_graph_output(g, tpu_graph_convert(g, y, TPU_BF16), NULL));
    tpu_executable_t *on = cu_compile(g, 0);
    if (on) {
      char *t = describe(on);
      if (epilogue) {
        CHECK(tpu_executable_num_kernels(on) == 2);
        CHECK_CONTAINS(t, "0: DOT_GENERAL f32[16,32]");
      } else {
        CHECK(tpu_executable_num_kernels(on) == 1);
        CHECK_CONTAINS(t, "0: FUSED(DOT_GENERAL,CONVERT) bf16[16,32] -> output 0");
      }
      free_text(t);
    }
    tpu_executable_release(on);
    CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
    tpu_graph_destroy(g);
  }
  /* a bf16 product under an f16 output: the kernel would round its f32 sum straight to
   * f16, skipping the product's bf16 rounding, so the product runs on its own */
  for (int scaled = 0; scaled < 2; scaled++) {
    tpu_graph_t *g = ir_graph();
    tpu_value_t a = ir_param(g, TPU_BF16, SHAPE(16, 24)), b = ir_param(g, TPU_BF16, SHAPE(24, 32));
    tpu_value_t y = tpu_graph_dot_general(g, a, b, &da, TPU_BF16);
    if (scaled) y = tpu_graph_binary(g, TPU_OP_MUL, y, splat(g, TPU_BF16, 1e-3, s));
    CHECK_OK(tpu_graph_output(g, tpu_graph_convert(g, y, TPU_F16), NULL));
    tpu_executable_t *on = cu_compile(g, 0);
    if (on) CHECK(tpu_executable_num_kernels(on) == 2);
    tpu_executable_release(on);
    CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
    tpu_graph_destroy(g);
  }
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = tpu_graph_convert(g, ir_param(g, TPU_BF16, SHAPE(16, 33)), TPU_F32);
  const bool axis[2] = {false, true};
  tpu_value_t m = tpu_graph_reduce(g, TPU_REDUCE_SUM, x, axis);
  m = tpu_graph_binary(g, TPU_OP_DIV, m, splat(g, TPU_F32, 33.0, SHAPE(16)));
  CHECK_OK(tpu_graph_output(g, tpu_graph_convert(g, m, TPU_BF16), NULL));
  CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
  tpu_graph_destroy(g);
}

TEST(compare_select_clamp_convert_fuse) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(33, 65);
  tpu_value_t x = ir_param(g, TPU_BF16, s), mask = ir_param(g, TPU_BOOL, s);
  tpu_value_t xf = tpu_graph_convert(g, x, TPU_F32);
  tpu_value_t pos = tpu_graph_compare(g, TPU_CMP_GT, xf, splat(g, TPU_F32, 0.0, s));
  tpu_value_t relu = tpu_graph_select(g, pos, xf, splat(g, TPU_F32, 0.0, s));
  tpu_value_t drop = tpu_graph_select(g, mask, tpu_graph_binary(g, TPU_OP_MUL, relu, splat(g, TPU_F32, 2.0, s)),
                                      splat(g, TPU_F32, 0.0, s));
  tpu_value_t cl = tpu_graph_clamp(g, splat(g, TPU_F32, -0.5, s), drop, splat(g, TPU_F32, 0.75, s));
  tpu_value_t out = tpu_graph_convert(g, cl, TPU_BF16);
  CHECK_OK(tpu_graph_output(g, out, NULL));
  tpu_executable_t *on = cu_compile(g, 0);
  if (on) {
    CHECK(tpu_executable_num_kernels(on) == 1);
    char *t = describe(on);
    CHECK_CONTAINS(t, "FUSED(CONVERT,COMPARE,SELECT,MUL,SELECT,CLAMP,CONVERT) bf16[33,65]");
    free_text(t);
  }
  tpu_executable_release(on);
  CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
  tpu_graph_destroy(g);
}

/* u = log1p(t * x) over t = exp(x), x f32[10,10]; outputs u (0) and t (1). */
static tpu_graph_t *exp_chain(tpu_value_t *t_out) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(10, 10));
  tpu_value_t t = tpu_graph_unary(g, TPU_OP_EXP, x);
  tpu_value_t u = tpu_graph_unary(g, TPU_OP_LOG1P, tpu_graph_binary(g, TPU_OP_MUL, t, x));
  CHECK_OK(tpu_graph_output(g, u, NULL));
  CHECK_OK(tpu_graph_output(g, t, NULL));
  *t_out = t;
  return g;
}

TEST(outputs_feeding_a_chain_are_its_stores) {
  /* t = exp(x) is an output read only by the chain u = log1p(t * x): one kernel computes
   * both and writes t to its output too (multi-output fusion) */
  tpu_value_t t;
  tpu_graph_t *g = exp_chain(&t);
  tpu_value_t u = tpu_graph_output_value(g, 0);
  int64_t st[2] = {1, 10};
  CHECK_OK(tpu_graph_output(g, u, st)); /* the same value again, transposed layout */
  tpu_executable_t *on = cu_compile(g, 0);
  if (on) {
    char *txt = describe(on);
    CHECK(tpu_executable_num_kernels(on) == 2);
    CHECK_CONTAINS(txt, "0: FUSED(EXP,MUL,LOG1P) f32[10,10] -> output 0, store f32[10,10] -> output 1");
    CHECK_CONTAINS(txt, "1: COPY f32[10,10] -> output 2");
    free_text(txt);
  }
  tpu_executable_release(on);
  CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
  tpu_graph_destroy(g);
}

TEST(values_used_outside_stay_materialized) {
  /* t = exp(x) is an output, feeds the chain and a reduction: computed once, then read */
  tpu_value_t t;
  tpu_graph_t *g = exp_chain(&t);
  bool cols[2] = {false, true};
  CHECK_OK(tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_MAX, t, cols), NULL));
  tpu_executable_t *on = cu_compile(g, 0);
  if (on) {
    char *txt = describe(on);
    CHECK(tpu_executable_num_kernels(on) == 3);
    CHECK_CONTAINS(txt, "0: EXP f32[10,10] -> output 1");
    CHECK_CONTAINS(txt, "FUSED(MUL,LOG1P) f32[10,10] -> output 0");
    CHECK(strstr(txt, "store") == NULL);
    free_text(txt);
  }
  tpu_executable_release(on);
  CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
  tpu_graph_destroy(g);
}

/* Random elementwise graphs over one shape with broadcast inputs and constants. */
static tpu_graph_t *random_graph(uint64_t seed, tpu_dtype_t dt) {
  static const tpu_op_t un[] = {TPU_OP_EXP, TPU_OP_TANH, TPU_OP_NEG, TPU_OP_ABS, TPU_OP_LOGISTIC,
                                TPU_OP_SIN, TPU_OP_FLOOR, TPU_OP_ERF};
  static const tpu_op_t bin[] = {TPU_OP_ADD, TPU_OP_SUB, TPU_OP_MUL, TPU_OP_DIV, TPU_OP_MAX,
                                 TPU_OP_MIN, TPU_OP_POW};
  tpu_graph_t *g = ir_graph();
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  tpu_shape_t sh = SHAPE(17, 45), row = SHAPE(45), col = SHAPE(17);
  tpu_value_t vals[64];
  int nv = 0;
  int64_t d1[1] = {1}, d0[1] = {0};
  vals[nv++] = ir_param(g, dt, sh);
  vals[nv++] = bcast(g, ir_param(g, dt, row), sh, d1);
  vals[nv++] = bcast(g, ir_param(g, dt, col), sh, d0);
  vals[nv++] = splat(g, dt, 0.5, sh);
  int n_ops = 4 + (int)(cu_rand(&s) % 24);
  for (int i = 0; i < n_ops && nv < 60; i++) {
    uint64_t r = cu_rand(&s);
    tpu_value_t a = vals[nv - 1 - (int)(r % (uint64_t)(nv < 4 ? nv : 4))];
    tpu_value_t b = vals[(r >> 8) % (uint64_t)nv];
    tpu_value_t c = vals[(r >> 16) % (uint64_t)nv];
    switch ((r >> 24) % 6) {
      case 0: vals[nv++] = tpu_graph_unary(g, un[(r >> 32) % 8], a); break;
      case 1: vals[nv++] = tpu_graph_select(g, tpu_graph_compare(g, (tpu_compare_dir_t)((r >> 32) % 6), a, b), b, c); break;
      case 2: vals[nv++] = tpu_graph_clamp(g, c, a, b); break;
      default: vals[nv++] = tpu_graph_binary(g, bin[(r >> 32) % 7], a, b); break;
    }
  }
  CHECK_OK(tpu_graph_output(g, vals[nv - 1], NULL));
  if (seed % 3 == 0) CHECK_OK(tpu_graph_output(g, vals[nv - 3], NULL));
  if (seed % 5 == 0) CHECK_OK(tpu_graph_output(g, vals[nv / 2], NULL)); /* stores, often */
  if (seed % 4 == 0) {
    bool last[2] = {false, true};
    CHECK_OK(tpu_graph_output(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, vals[nv - 2], last), NULL));
  }
  return g;
}

TEST(random_elementwise_graphs_match_unfused_bitwise) {
  tpu_dtype_t dts[3] = {TPU_F32, TPU_BF16, TPU_F16};
  int fused_steps = 0, bad = 0, stores = 0;
  for (uint64_t seed = 1; seed <= 90; seed++) {
    tpu_graph_t *g = random_graph(seed, dts[seed % 3]);
    CHECK(tpu_graph_status(g) == TPU_OK);
    tpu_executable_t *on = cu_compile(g, 0);
    if (on) {
      fused_steps += tpu_executable_num_fused(on);
      char *t = describe(on);
      for (const char *p = t; (p = strstr(p, ", store ")); p++) stores++;
      free_text(t);
    }
    tpu_executable_release(on);
    int d = cu_optimized_vs_plain(g, g_pool);
    if (d != 0) {
      fprintf(stderr, "  seed %llu: %d outputs differ\n", (unsigned long long)seed, d);
      bad++;
    }
    tpu_graph_destroy(g);
  }
  printf("  random elementwise graphs: %d fused steps, %d stores\n", fused_steps, stores);
  CHECK(bad == 0);
  CHECK(fused_steps > 60 && stores > 5);
}

/* Random graphs mixing elementwise ops with row reductions broadcast back over the rows
 * (the patterns row-wise fusion attaches: sides, prologues, epilogues, tails), several
 * outputs, sometimes several chunks of rows. */
static tpu_graph_t *random_rowwise_graph(uint64_t seed, tpu_dtype_t dt, int64_t rows, int64_t cols) {
  static const tpu_op_t un[] = {TPU_OP_EXP, TPU_OP_TANH, TPU_OP_NEG, TPU_OP_ABS, TPU_OP_RSQRT};
  static const tpu_op_t bin[] = {TPU_OP_ADD, TPU_OP_SUB, TPU_OP_MUL, TPU_OP_DIV, TPU_OP_MAX};
  static const tpu_reduce_kind_t kinds[] = {TPU_REDUCE_SUM, TPU_REDUCE_MAX, TPU_REDUCE_MIN};
  tpu_graph_t *g = ir_graph();
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 3;
  tpu_shape_t sh = SHAPE(rows, cols), rs = SHAPE(rows), cs = SHAPE(cols);
  int64_t d0[1] = {0}, d1[1] = {1};
  bool last[2] = {false, true};
  tpu_value_t full[64], red[64];
  int nf = 0, nr = 0;
  full[nf++] = ir_param(g, dt, sh);
  full[nf++] = bcast(g, ir_param(g, dt, cs), sh, d1);
  red[nr++] = ir_param(g, dt, rs);
  int n_ops = 6 + (int)(cu_rand(&s) % 20);
  for (int i = 0; i < n_ops && nf < 60 && nr < 60; i++) {
    uint64_t r = cu_rand(&s);
    tpu_value_t a = full[nf - 1 - (int)(r % (uint64_t)(nf < 3 ? nf : 3))];
    tpu_value_t b = full[(r >> 8) % (uint64_t)nf];
    switch ((r >> 16) % 6) {
      case 0: full[nf++] = tpu_graph_unary(g, un[(r >> 24) % 5], a); break;
      case 1: full[nf++] = tpu_graph_binary(g, bin[(r >> 24) % 5], a, b); break;
      case 2: red[nr++] = tpu_graph_reduce(g, kinds[(r >> 24) % 3], a, last); break;
      case 3: /* elementwise on a reduced value */
        red[nr] = tpu_graph_binary(g, bin[(r >> 24) % 5], red[nr - 1], red[(r >> 32) % (uint64_t)nr]);
        nr++;
        break;
      default: /* a reduced value broadcast back over its rows */
        full[nf++] = tpu_graph_binary(g, bin[(r >> 24) % 5], a, bcast(g, red[nr - 1 - (int)((r >> 32) % (uint64_t)(nr < 2 ? nr : 2))], sh, d0));
        break;
    }
  }
  CHECK_OK(tpu_graph_output(g, full[nf - 1], NULL));
  CHECK_OK(tpu_graph_output(g, red[nr - 1], NULL));
  if (seed % 2) CHECK_OK(tpu_graph_output(g, full[nf / 2], NULL));
  if (seed % 3 == 0) CHECK_OK(tpu_graph_output(g, red[nr / 2], NULL));
  return g;
}

TEST(random_rowwise_graphs_match_unfused_bitwise) {
  tpu_dtype_t dts[3] = {TPU_F32, TPU_BF16, TPU_F16};
  int bad = 0, sides = 0, tails = 0;
  for (uint64_t seed = 1; seed <= 120; seed++) {
    int64_t rows = seed % 4 == 0 ? 300 : 13, cols = seed % 4 == 0 ? 301 : 37;
    tpu_graph_t *g = random_rowwise_graph(seed, dts[seed % 3], rows, cols);
    CHECK(tpu_graph_status(g) == TPU_OK);
    tpu_executable_t *on = cu_compile(g, 0);
    if (on) {
      char *t = describe(on);
      for (const char *p = t; (p = strstr(p, ", side ")); p++) sides++;
      for (const char *p = t; (p = strstr(p, ", tail ")); p++) tails++;
      free_text(t);
    }
    tpu_executable_release(on);
    int d = cu_optimized_vs_plain(g, g_pool);
    if (d != 0) {
      fprintf(stderr, "  seed %llu: %d outputs differ\n", (unsigned long long)seed, d);
      bad++;
    }
    tpu_graph_destroy(g);
  }
  printf("  random row-wise graphs: %d sides, %d tails attached\n", sides, tails);
  CHECK(bad == 0);
  CHECK(sides > 10 && tails > 10);
}

/* With a helper spinning in the pool, a row-wise loop shares its chunks (each thread in its
 * own part of the private chunk buffers): the same bits as on one thread. */
TEST(rowwise_loops_shared_with_helpers_keep_their_bits) {
  static const int64_t shapes[][2] = {{64, 128}, {300, 301}, {8, 2048}};
  tpu_dtype_t dts[3] = {TPU_F32, TPU_BF16, TPU_F16};
  pool_helper h;
  CHECK(pool_helper_start(&h, g_pool) == 0);
  int bad = 0, sides = 0;
  for (uint64_t seed = 1; seed <= 60; seed++) {
    const int64_t *sh = shapes[seed % 3];
    tpu_graph_t *g = random_rowwise_graph(seed, dts[seed % 3], sh[0], sh[1]);
    tpu_executable_t *on = cu_compile(g, 0);
    CHECK(on != NULL);
    if (!on) {
      tpu_graph_destroy(g);
      continue;
    }
    char *t = describe(on);
    for (const char *p = t; (p = strstr(p, ", side ")); p++) sides++;
    free_text(t);
    cu_run_t alone, shared;
    cu_execute(g, on, 7, NULL, &alone);
    cu_execute(g, on, 7, g_pool, &shared);
    int d = cu_diff_outputs(&alone, &shared);
    if (d != 0) {
      fprintf(stderr, "  seed %llu: %d outputs differ\n", (unsigned long long)seed, d);
      bad++;
    }
    cu_free(&alone);
    cu_free(&shared);
    tpu_executable_release(on);
    tpu_graph_destroy(g);
  }
  pool_helper_stop(&h);
  printf("  row-wise loops shared with a helper: %d sides\n", sides);
  CHECK(bad == 0);
  CHECK(sides > 5);
}

/* The graphs the eager bridge lowers (torchtpu/csrc/lower_nn.cpp): reductions with keepdim
 * reshapes, softmax's guard against infinite maxima, f32 statistics of bf16 tensors. */
static tpu_value_t reduce_keep(tpu_graph_t *g, tpu_reduce_kind_t k, tpu_value_t x) {
  bool last[2] = {false, true};
  const tpu_node_t *n = tpu_graph_node(g, x);
  tpu_shape_t kept = n->shape;
  kept.dims[1] = 1;
  return tpu_graph_reshape(g, tpu_graph_reduce(g, k, x, last), &kept);
}

static tpu_value_t bcast_keep(tpu_graph_t *g, tpu_value_t v, tpu_shape_t s) {
  int64_t d[2] = {0, 1};
  return tpu_graph_broadcast_in_dim(g, v, &s, d);
}

TEST(eager_lowerings_fuse) {
  tpu_dtype_t dts[2] = {TPU_F32, TPU_BF16};
  for (int k = 0; k < 2; k++) {
    /* softmax */
    tpu_graph_t *g = ir_graph();
    tpu_shape_t s = SHAPE(300, 301), st = SHAPE(300, 1);
    tpu_value_t x = tpu_graph_convert(g, ir_param(g, dts[k], s), TPU_F32);
    tpu_value_t m = reduce_keep(g, TPU_REDUCE_MAX, x);
    m = tpu_graph_select(g, tpu_graph_unary(g, TPU_OP_IS_FINITE, m), m,
                         tpu_graph_constant(g, TPU_F32, &st, 0.0));
    tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, tpu_graph_binary(g, TPU_OP_SUB, x, bcast_keep(g, m, s)));
    tpu_value_t y = tpu_graph_binary(g, TPU_OP_DIV, e, bcast_keep(g, reduce_keep(g, TPU_REDUCE_SUM, e), s));
    CHECK_OK(tpu_graph_output(g, tpu_graph_convert(g, y, dts[k]), NULL));
    tpu_executable_t *on = cu_compile(g, 0);
    if (on) {
      char *t = describe(on);
      if (k == 1) printf("  eager softmax (bf16 [300,301]):\n%s", t);
      CHECK(tpu_executable_num_kernels(on) == 2);
      CHECK_CONTAINS(t, "REDUCE,RESHAPE,IS_FINITE,SELECT) f32[300,1] -> scratch");
      CHECK_CONTAINS(t, "1: FUSED(SUB,EXP,REDUCE,DIV");
      /* the exponentials only this step reads: one chunk of 217 rows (65536 / 301) */
      CHECK_CONTAINS(t, "side f32[217,301] -> scratch, tail ");
      free_text(t);
    }
    tpu_executable_release(on);
    CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
    tpu_graph_destroy(g);
    /* native_layer_norm: (y, mean, rstd) */
    g = ir_graph();
    tpu_shape_t cs = SHAPE(301);
    x = tpu_graph_convert(g, ir_param(g, dts[k], s), TPU_F32);
    tpu_value_t w = tpu_graph_convert(g, ir_param(g, dts[k], cs), TPU_F32);
    tpu_value_t b = tpu_graph_convert(g, ir_param(g, dts[k], cs), TPU_F32);
    tpu_value_t n = tpu_graph_constant(g, TPU_F32, &st, 301.0);
    tpu_value_t mean = tpu_graph_binary(g, TPU_OP_DIV, reduce_keep(g, TPU_REDUCE_SUM, x), n);
    tpu_value_t xc = tpu_graph_binary(g, TPU_OP_SUB, x, bcast_keep(g, mean, s));
    tpu_value_t var = tpu_graph_binary(g, TPU_OP_DIV, reduce_keep(g, TPU_REDUCE_SUM, tpu_graph_binary(g, TPU_OP_MUL, xc, xc)), n);
    tpu_value_t rstd = tpu_graph_unary(g, TPU_OP_RSQRT, tpu_graph_binary(g, TPU_OP_ADD, var, tpu_graph_constant(g, TPU_F32, &st, 1e-5)));
    int64_t d1[1] = {1};
    y = tpu_graph_binary(g, TPU_OP_MUL, xc, bcast_keep(g, rstd, s));
    y = tpu_graph_binary(g, TPU_OP_MUL, y, bcast(g, w, s, d1));
    y = tpu_graph_binary(g, TPU_OP_ADD, y, bcast(g, b, s, d1));
    tpu_shape_t ms = SHAPE(300, 1);
    CHECK_OK(tpu_graph_output(g, tpu_graph_convert(g, y, dts[k]), NULL));
    CHECK_OK(tpu_graph_output(g, tpu_graph_reshape(g, mean, &ms), NULL));
    CHECK_OK(tpu_graph_output(g, tpu_graph_reshape(g, rstd, &ms), NULL));
    on = cu_compile(g, 0);
    if (on) {
      char *t = describe(on);
      if (k == 1) printf("  eager layer norm (bf16 [300,301]):\n%s", t);
      CHECK(tpu_executable_num_fused(on) == 2);
      CHECK(tpu_executable_num_kernels(on) == 2);
      CHECK_CONTAINS(t, "REDUCE,RESHAPE,DIV) f32[300,1] -> output 1");
      CHECK_CONTAINS(t, "1: FUSED(SUB,MUL,REDUCE,RESHAPE,DIV,ADD,RSQRT,MUL,");
      CHECK_CONTAINS(t, "tail " );
      free_text(t);
    }
    tpu_executable_release(on);
    CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
    tpu_graph_destroy(g);
  }
}

TEST(disable_fusion_only) {
  tpu_graph_t *g = chain5(TPU_F32, SHAPE(4, 4));
  tpu_executable_t *e = cu_compile(g, TPU_PASS_FUSE);
  if (e) {
    CHECK(tpu_executable_num_fused(e) == 0);
    CHECK(tpu_executable_num_kernels(e) == 6); /* the constant's fill, then the 5 ops */
    tpu_pass_stats_t st;
    tpu_executable_pass_stats(e, &st);
    CHECK(st.nodes_in == st.nodes_out);
  }
  tpu_executable_release(e);
  tpu_graph_destroy(g);
}

TEST(memory_planning_reuses_buffers) {
  /* a long unfused chain: two buffers alive at a time, whatever the length */
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(1000);
  tpu_value_t x = ir_param(g, TPU_F32, s);
  tpu_value_t v = x;
  for (int i = 0; i < 50; i++) v = tpu_graph_unary(g, i % 2 ? TPU_OP_TANH : TPU_OP_SIN, v);
  CHECK_OK(tpu_graph_output(g, v, NULL));
  tpu_executable_t *off = cu_compile(g, TPU_PASS_ALL), *on = cu_compile(g, 0);
  if (off && on) {
    printf("  50-op chain of f32[1000]: unfused peak %zu B of %zu B unplanned; fused %d kernel(s), "
           "peak %zu B\n", tpu_executable_scratch_bytes(off), tpu_executable_unplanned_bytes(off),
           tpu_executable_num_kernels(on), tpu_executable_scratch_bytes(on));
    CHECK(tpu_executable_scratch_bytes(off) == 2 * 4032);
    CHECK(tpu_executable_unplanned_bytes(off) == 49 * 4032);
    CHECK(tpu_executable_num_kernels(on) == 2); /* 28 ops per program at most */
    CHECK(tpu_executable_scratch_bytes(on) == 4032);
  }
  tpu_executable_release(off);
  tpu_executable_release(on);
  CHECK(cu_optimized_vs_plain(g, g_pool) == 0);
  tpu_graph_destroy(g);
}

int main(void) {
  CHECK_OK(tpu_pool_create(2, tpu_allocator_system(), &g_pool));
  RUN(elementwise_chain_is_one_kernel);
  RUN(layer_norm_fuses_into_few_kernels);
  RUN(softmax_fuses);
  RUN(rowwise_loops_shared_with_helpers_keep_their_bits);
  RUN(matmul_with_epilogue_is_one_step);
  RUN(matmul_adds_its_bias);
  RUN(f32_heads_under_bf16_outputs_round_once);
  RUN(compare_select_clamp_convert_fuse);
  RUN(outputs_feeding_a_chain_are_its_stores);
  RUN(values_used_outside_stay_materialized);
  RUN(random_elementwise_graphs_match_unfused_bitwise);
  RUN(random_rowwise_graphs_match_unfused_bitwise);
  RUN(eager_lowerings_fuse);
  RUN(disable_fusion_only);
  RUN(memory_planning_reuses_buffers);
  tpu_pool_destroy(g_pool);
  return check_report();
}
