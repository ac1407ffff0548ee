/* compile_util.h: helpers for the compiler tests (test_passes*.c, test_compiler*.c):
 * compile a graph with chosen passes, run it on deterministic random inputs, and compare
 * the outputs of two executables bit for bit or within a tolerance. Include check.h first.
 */
#ifndef TPU_TESTS_COMPILE_UTIL_H
#define TPU_TESTS_COMPILE_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_util.h"
#include "tpu/compiler.h"
#include "tpu/kernels.h"
#include "tpu/passes.h"

/* Compiles |g| with the passes in |disable| turned off; NULL (and a failed check) on error. */
static inline tpu_executable_t *cu_compile(const tpu_graph_t *g, uint32_t disable) {
  tpu_compile_options_t opt;
  memset(&opt, 0, sizeof opt);
  opt.disable_passes = disable;
  tpu_executable_t *exe = NULL;
  CHECK_OK(tpu_compile(g, &opt, tpu_allocator_system(), &exe));
  return exe;
}

/* Compiles |g| with exact output aliases (|alias|, |n| entries, may be NULL), may-alias bits
 * and the passes in |disable| turned off; NULL (and a failed check) on error. */
static inline tpu_executable_t *cu_compile_aliased(const tpu_graph_t *g, const int32_t *alias,
                                                   int n, uint64_t may_alias, uint32_t disable) {
  tpu_compile_options_t opt;
  memset(&opt, 0, sizeof opt);
  opt.output_alias_param = alias;
  opt.num_output_alias = n;
  opt.output_may_alias_input = may_alias;
  opt.disable_passes = disable;
  tpu_executable_t *exe = NULL;
  CHECK_OK(tpu_compile(g, &opt, tpu_allocator_system(), &exe));
  return exe;
}

/* Bytes of a dense |dtype| buffer of |shape|. */
static inline size_t cu_bytes(tpu_dtype_t dtype, const tpu_shape_t *shape) {
  int64_t n = 1;
  tpu_shape_numel(shape, &n);
  return (size_t)n * tpu_dtype_size(dtype) + 64;
}

static inline uint64_t cu_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Fills a parameter buffer: floats in [-2, 2) (a few exact zeros and ones), ints 0..6, bools. */
static inline void cu_fill(void *p, tpu_dtype_t dtype, const tpu_shape_t *shape, uint64_t seed) {
  int64_t n = 1;
  tpu_shape_numel(shape, &n);
  uint64_t s = seed * 2654435761u + 88172645463325252ull;
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = cu_rand(&s);
    float f = (float)((double)(r >> 40) / (double)(1ull << 24) * 4.0 - 2.0);
    if (r % 17 == 0) f = 0.0f;
    if (r % 19 == 0) f = 1.0f;
    switch (dtype) {
      case TPU_F32: ((float *)p)[i] = f; break;
      case TPU_F64: ((double *)p)[i] = f; break;
      case TPU_BF16: ((uint16_t *)p)[i] = tpu_f32_to_bf16(f); break;
      case TPU_F16: ((uint16_t *)p)[i] = tpu_f32_to_f16(f); break;
      case TPU_I64: ((int64_t *)p)[i] = (int64_t)(r % 7); break;
      case TPU_I32: ((int32_t *)p)[i] = (int32_t)(r % 7); break;
      case TPU_BOOL: ((uint8_t *)p)[i] = (uint8_t)(r & 1); break;
      default: ((uint8_t *)p)[i] = (uint8_t)(r % 7); break;
    }
  }
}

/* One run's buffers. Parameters are dense (tests give no strides to parameters). */
typedef struct cu_run {
  int num_in, num_out;
  void *in[16], *out[16];
  size_t out_bytes[16];
  tpu_dtype_t out_dtype[16];
} cu_run_t;

/* Runs |exe| (compiled from |g|) on inputs made from |seed|; outputs in r (cu_free them). */
static inline void cu_execute(const tpu_graph_t *g, const tpu_executable_t *exe, uint64_t seed,
                              tpu_pool_t *pool, cu_run_t *r) {
  memset(r, 0, sizeof *r);
  r->num_in = tpu_graph_num_params(g);
  r->num_out = tpu_graph_num_outputs(g);
  for (int v = 0; v < tpu_graph_num_nodes(g); v++) {
    const tpu_node_t *n = tpu_graph_node(g, v);
    if (n->op != TPU_OP_PARAMETER) continue;
    int i = n->attrs.param.index;
    r->in[i] = aligned_alloc(64, (cu_bytes(n->dtype, &n->shape) + 63) / 64 * 64);
    cu_fill(r->in[i], n->dtype, &n->shape, seed + (uint64_t)i);
  }
  for (int o = 0; o < r->num_out; o++) {
    const tpu_node_t *n = tpu_graph_node(g, tpu_graph_output_value(g, o));
    r->out_bytes[o] = cu_bytes(n->dtype, &n->shape) - 64;
    r->out_dtype[o] = n->dtype;
    r->out[o] = aligned_alloc(64, (r->out_bytes[o] + 64 + 63) / 64 * 64);
    memset(r->out[o], 0xAB, r->out_bytes[o]);
  }
  size_t sb = tpu_executable_scratch_bytes(exe);
  void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
  CHECK_OK(tpu_executable_run(exe, r->in, r->out, scratch, pool));
  free(scratch);
}

static inline void cu_free(cu_run_t *r) {
  for (int i = 0; i < r->num_in; i++) free(r->in[i]);
  for (int o = 0; o < r->num_out; o++) free(r->out[o]);
}

/* Whether element |i| of two float buffers of |dt| is a NaN in both. */
static inline bool cu_both_nan(const void *a, const void *b, tpu_dtype_t dt, size_t i) {
  switch (dt) {
    case TPU_F32: return isnan(((const float *)a)[i]) && isnan(((const float *)b)[i]);
    case TPU_F64: return isnan(((const double *)a)[i]) && isnan(((const double *)b)[i]);
    case TPU_BF16:
      return isnan(tpu_bf16_to_f32(((const uint16_t *)a)[i])) &&
             isnan(tpu_bf16_to_f32(((const uint16_t *)b)[i]));
    case TPU_F16:
      return isnan(tpu_f16_to_f32(((const uint16_t *)a)[i])) &&
             isnan(tpu_f16_to_f32(((const uint16_t *)b)[i]));
    default: return false;
  }
}

/* Number of outputs that differ between two runs, bit for bit, except that any two NaNs
 * are equal (the sign and payload of a NaN depend on which instruction made it: x86's
 * default NaN is negative, some converters make positive ones; PyTorch does not see it). */
static inline int cu_diff_outputs(const cu_run_t *a, const cu_run_t *b) {
  int bad = 0;
  for (int o = 0; o < a->num_out; o++) {
    size_t es = tpu_dtype_size(a->out_dtype[o]), n = es ? a->out_bytes[o] / es : 0;
    bool differ = false;
    for (size_t i = 0; i < n && !differ; i++) {
      differ = memcmp((const char *)a->out[o] + i * es, (const char *)b->out[o] + i * es, es) != 0 &&
               !cu_both_nan(a->out[o], b->out[o], a->out_dtype[o], i);
    }
    bad += differ;
  }
  return bad;
}

/* Max |a - b| over f32 output |o| (NaN in one and not the other counts as infinity). */
static inline double cu_max_abs_diff_f32(const cu_run_t *a, const cu_run_t *b, int o) {
  const float *x = a->out[o], *y = b->out[o];
  double m = 0;
  for (size_t i = 0; i < a->out_bytes[o] / 4; i++) {
    if (isnan(x[i]) != isnan(y[i])) return INFINITY;
    if (isnan(x[i])) continue;
    double d = fabs((double)x[i] - (double)y[i]);
    if (d > m) m = d;
  }
  return m;
}

/* Compiles |g| with all passes and with none, runs both on the same inputs, and returns
 * the number of outputs that differ bitwise. */
static inline int cu_optimized_vs_plain(const tpu_graph_t *g, tpu_pool_t *pool) {
  tpu_executable_t *a = cu_compile(g, 0), *b = cu_compile(g, TPU_PASS_ALL);
  if (!a || !b) {
    tpu_executable_release(a);
    tpu_executable_release(b);
    return -1;
  }
  cu_run_t ra, rb;
  cu_execute(g, a, 7, pool, &ra);
  cu_execute(g, b, 7, pool, &rb);
  int bad = cu_diff_outputs(&ra, &rb);
  cu_free(&ra);
  cu_free(&rb);
  tpu_executable_release(a);
  tpu_executable_release(b);
  return bad;
}

/* Nodes of |g| with op |op|. */
static inline int cu_count_op(const tpu_graph_t *g, tpu_op_t op) {
  int k = 0;
  for (int v = 0; v < tpu_graph_num_nodes(g); v++) k += tpu_graph_node(g, v)->op == op;
  return k;
}

#endif /* TPU_TESTS_COMPILE_UTIL_H */
