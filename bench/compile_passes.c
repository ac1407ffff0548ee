/* compile_passes.c: the compiler's passes and fusion, measured side by side with the same
 * graphs compiled with every pass disabled (TPU_PASS_ALL), in one run.
 *
 *   1. compile time of transformer-like blocks at 1x, 2x, 4x, 8x, 16x the blocks (thread
 *      CPU time, best of 5): nodes, milliseconds, microseconds per node;
 *   2. run time, kernel count and planned scratch of layer norm, softmax, a gelu-like chain
 *      and a matmul with bias + relu + residual, fused vs unfused (best of 10), with ratios.
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/compile_passes.c \
 *      build/release/libtpu.a -pthread -lm -o build/compile_passes && build/compile_passes
 * TORCHTPU_ISA and TORCHTPU_NUM_THREADS apply to the kernels.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpu/compiler.h"
#include "tpu/kernels.h"
#include "tpu/passes.h"

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static tpu_shape_t shape2(int64_t a, int64_t b) { return (tpu_shape_t){2, {a, b}}; }
static tpu_shape_t shape1(int64_t a) { return (tpu_shape_t){1, {a}}; }

static tpu_value_t bc(tpu_graph_t *g, tpu_value_t x, tpu_shape_t s, int64_t d) {
  int64_t dims[1] = {d};
  return tpu_graph_broadcast_in_dim(g, x, &s, dims);
}

static tpu_value_t splat(tpu_graph_t *g, double v, tpu_shape_t s) {
  tpu_shape_t sc = {0, {0}};
  int64_t none[1] = {0};
  return tpu_graph_broadcast_in_dim(g, tpu_graph_constant(g, TPU_F32, &sc, v), &s, none);
}

static tpu_value_t matmul(tpu_graph_t *g, tpu_value_t a, tpu_value_t w) {
  tpu_dot_attrs_t da;
  memset(&da, 0, sizeof da);
  da.num_contract = 1;
  da.lhs_contract[0] = 1;
  return tpu_graph_dot_general(g, a, w, &da, TPU_F32);
}

/* layer norm over the last dim of x: f32[r, c] */
static tpu_value_t layer_norm(tpu_graph_t *g, tpu_value_t x, tpu_value_t w, tpu_value_t b,
                              int64_t r, int64_t c) {
  tpu_shape_t s = shape2(r, c), rs = shape1(r);
  bool last[2] = {false, true};
  tpu_value_t inv = splat(g, 1.0 / (double)c, rs);
  tpu_value_t mean = tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_reduce(g, TPU_REDUCE_SUM, x, last), inv);
  tpu_value_t xc = tpu_graph_binary(g, TPU_OP_SUB, x, bc(g, mean, s, 0));
  tpu_value_t var = tpu_graph_binary(
      g, TPU_OP_MUL, tpu_graph_reduce(g, TPU_REDUCE_SUM, tpu_graph_binary(g, TPU_OP_MUL, xc, xc), last), inv);
  tpu_value_t rstd = tpu_graph_unary(g, TPU_OP_RSQRT, tpu_graph_binary(g, TPU_OP_ADD, var, splat(g, 1e-5, rs)));
  tpu_value_t y = tpu_graph_binary(g, TPU_OP_MUL, xc, bc(g, rstd, s, 0));
  y = tpu_graph_binary(g, TPU_OP_MUL, y, bc(g, w, s, 1));
  return tpu_graph_binary(g, TPU_OP_ADD, y, bc(g, b, s, 1));
}

static tpu_value_t softmax(tpu_graph_t *g, tpu_value_t x, int64_t r, int64_t c) {
  tpu_shape_t s = shape2(r, c);
  bool last[2] = {false, true};
  tpu_value_t m = tpu_graph_reduce(g, TPU_REDUCE_MAX, x, last);
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, tpu_graph_binary(g, TPU_OP_SUB, x, bc(g, m, s, 0)));
  return tpu_graph_binary(g, TPU_OP_DIV, e, bc(g, tpu_graph_reduce(g, TPU_REDUCE_SUM, e, last), s, 0));
}

/* blocks of layer norm, matmul + bias + tanh, attention-like softmax, residual */
static tpu_graph_t *model(int blocks) {
  tpu_graph_t *g = NULL;
  if (tpu_graph_create(tpu_allocator_system(), &g) != TPU_OK) return NULL;
  const int64_t T = 16, C = 32;
  tpu_shape_t s = shape2(T, C), cs = shape1(C), ws = shape2(C, C);
  tpu_value_t h = tpu_graph_parameter(g, TPU_F32, &s, NULL);
  tpu_value_t w = tpu_graph_parameter(g, TPU_F32, &ws, NULL);
  tpu_value_t b = tpu_graph_parameter(g, TPU_F32, &cs, NULL);
  tpu_value_t lw = tpu_graph_parameter(g, TPU_F32, &cs, NULL);
  for (int i = 0; i < blocks; i++) {
    tpu_value_t ln = layer_norm(g, h, lw, b, T, C);
    tpu_value_t y = tpu_graph_unary(g, TPU_OP_TANH, tpu_graph_binary(g, TPU_OP_ADD, matmul(g, ln, w), bc(g, b, s, 1)));
    int64_t perm[2] = {1, 0};
    tpu_value_t p = softmax(g, matmul(g, y, tpu_graph_transpose(g, y, perm)), T, T);
    h = tpu_graph_binary(g, TPU_OP_ADD, h, matmul(g, p, y));
  }
  tpu_graph_output(g, h, NULL);
  return g;
}

static tpu_executable_t *compile(const tpu_graph_t *g, uint32_t disable, double *seconds) {
  tpu_compile_options_t opt;
  memset(&opt, 0, sizeof opt);
  opt.disable_passes = disable;
  tpu_executable_t *exe = NULL;
  double best = 1e9;
  for (int i = 0; i < 5; i++) {
    tpu_executable_release(exe);
    exe = NULL;
    double t0 = cpu_s();
    if (tpu_compile(g, &opt, tpu_allocator_system(), &exe) != TPU_OK) {
      fprintf(stderr, "compile failed: %s\n", tpu_status_message());
      exit(1);
    }
    double t = cpu_s() - t0;
    if (t < best) best = t;
  }
  if (seconds) *seconds = best;
  return exe;
}

/* Runs |exe| (from |g|, f32 parameters of any shapes) 10 times; best wall seconds. */
static double run(const tpu_graph_t *g, const tpu_executable_t *exe, tpu_pool_t *pool) {
  void *in[8] = {0}, *out[8] = {0};
  int np = 0;
  for (int v = 0; v < tpu_graph_num_nodes(g); v++) {
    const tpu_node_t *n = tpu_graph_node(g, v);
    if (n->op != TPU_OP_PARAMETER) continue;
    int64_t numel = 1;
    tpu_shape_numel(&n->shape, &numel);
    float *p = aligned_alloc(64, ((size_t)numel * 4 + 63) / 64 * 64);
    for (int64_t i = 0; i < numel; i++) p[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    in[np++] = p;
  }
  for (int o = 0; o < tpu_graph_num_outputs(g); o++) {
    const tpu_node_t *n = tpu_graph_node(g, tpu_graph_output_value(g, o));
    int64_t numel = 1;
    tpu_shape_numel(&n->shape, &numel);
    out[o] = aligned_alloc(64, ((size_t)numel * 4 + 63) / 64 * 64);
  }
  size_t sb = tpu_executable_scratch_bytes(exe);
  void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
  double best = 1e9;
  for (int i = 0; i < 10; i++) {
    double t0 = wall_s();
    if (tpu_executable_run(exe, in, out, scratch, pool) != TPU_OK) {
      fprintf(stderr, "run failed: %s\n", tpu_status_message());
      exit(1);
    }
    double t = wall_s() - t0;
    if (t < best) best = t;
  }
  for (int i = 0; i < np; i++) free(in[i]);
  for (int o = 0; o < tpu_graph_num_outputs(g); o++) free(out[o]);
  free(scratch);
  return best;
}

static void side_by_side(const char *name, tpu_graph_t *g, tpu_pool_t *pool) {
  tpu_executable_t *on = compile(g, 0, NULL), *off = compile(g, TPU_PASS_ALL, NULL);
  double t_on = run(g, on, pool), t_off = run(g, off, pool);
  printf("%-34s %3d / %3d kernels  %9.3f / %9.3f ms  %5.2fx  scratch %8.2f / %8.2f MiB\n", name,
         tpu_executable_num_kernels(on), tpu_executable_num_kernels(off), t_on * 1e3,
         t_off * 1e3, t_off / t_on, (double)tpu_executable_scratch_bytes(on) / (1 << 20),
         (double)tpu_executable_scratch_bytes(off) / (1 << 20));
  tpu_executable_release(on);
  tpu_executable_release(off);
  tpu_graph_destroy(g);
}

int main(void) {
  printf("compile time (all passes, thread CPU time, best of 5)\n");
  printf("%8s %8s %10s %10s %12s %12s\n", "blocks", "nodes", "ms", "us/node", "kernels", "unfused");
  for (int b = 16; b <= 256; b *= 2) {
    tpu_graph_t *g = model(b);
    double t;
    tpu_executable_t *on = compile(g, 0, &t), *off = compile(g, TPU_PASS_ALL, NULL);
    printf("%8d %8d %10.2f %10.2f %12d %12d\n", b, tpu_graph_num_nodes(g), t * 1e3,
           t * 1e6 / tpu_graph_num_nodes(g), tpu_executable_num_kernels(on),
           tpu_executable_num_kernels(off));
    tpu_executable_release(on);
    tpu_executable_release(off);
    tpu_graph_destroy(g);
  }
  tpu_pool_t *pool = NULL;
  if (tpu_pool_default(&pool) != TPU_OK) return 1;
  printf("\nfused / unfused (passes off), best of 10 runs\n");
  const int64_t R = 4096, C = 1024;
  {
    tpu_graph_t *g = NULL;
    tpu_graph_create(tpu_allocator_system(), &g);
    tpu_shape_t s = shape2(R, C), cs = shape1(C);
    tpu_value_t x = tpu_graph_parameter(g, TPU_F32, &s, NULL);
    tpu_value_t w = tpu_graph_parameter(g, TPU_F32, &cs, NULL), b = tpu_graph_parameter(g, TPU_F32, &cs, NULL);
    tpu_graph_output(g, layer_norm(g, x, w, b, R, C), NULL);
    side_by_side("layer norm f32[4096,1024]", g, pool);
  }
  {
    tpu_graph_t *g = NULL;
    tpu_graph_create(tpu_allocator_system(), &g);
    tpu_shape_t s = shape2(R, C);
    tpu_value_t x = tpu_graph_parameter(g, TPU_F32, &s, NULL);
    tpu_graph_output(g, softmax(g, x, R, C), NULL);
    side_by_side("softmax f32[4096,1024]", g, pool);
  }
  {
    tpu_graph_t *g = NULL;
    tpu_graph_create(tpu_allocator_system(), &g);
    tpu_shape_t s = shape2(R, C);
    tpu_value_t x = tpu_graph_parameter(g, TPU_F32, &s, NULL);
    /* tanh-gelu: 0.5 x (1 + tanh(0.79788 (x + 0.044715 x^3))) */
    tpu_value_t x3 = tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_binary(g, TPU_OP_MUL, x, x), x);
    tpu_value_t in = tpu_graph_binary(g, TPU_OP_ADD, x, tpu_graph_binary(g, TPU_OP_MUL, x3, splat(g, 0.044715, s)));
    tpu_value_t t = tpu_graph_unary(g, TPU_OP_TANH, tpu_graph_binary(g, TPU_OP_MUL, in, splat(g, 0.7978845608, s)));
    tpu_value_t y = tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_binary(g, TPU_OP_MUL, x, splat(g, 0.5, s)),
                                     tpu_graph_binary(g, TPU_OP_ADD, t, splat(g, 1.0, s)));
    tpu_graph_output(g, y, NULL);
    side_by_side("tanh-gelu chain f32[4096,1024]", g, pool);
  }
  {
    tpu_graph_t *g = NULL;
    tpu_graph_create(tpu_allocator_system(), &g);
    tpu_shape_t as = shape2(1024, 1024), s = shape2(1024, 1024), bs = shape1(1024);
    tpu_value_t a = tpu_graph_parameter(g, TPU_F32, &as, NULL), w = tpu_graph_parameter(g, TPU_F32, &as, NULL);
    tpu_value_t b = tpu_graph_parameter(g, TPU_F32, &bs, NULL), r = tpu_graph_parameter(g, TPU_F32, &s, NULL);
    tpu_value_t y = tpu_graph_binary(g, TPU_OP_ADD, matmul(g, a, w), bc(g, b, s, 1));
    y = tpu_graph_binary(g, TPU_OP_MAX, y, splat(g, 0.0, s));
    tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_ADD, y, r), NULL);
    side_by_side("matmul 1024^3 + bias, relu, residual", g, pool);
  }
  return 0;
}
