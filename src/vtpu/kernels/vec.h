/* vec.h: the SIMD inner loops of the elementwise kernels, one table per ISA (internal).
 *
 * Each table holds contiguous 1-d loops over f32 and bf16 arrays (and the bf16 <-> f32
 * conversions, compares to bool, 32-bit selects and the Philox generator) written once in vec_impl.h and compiled three times:
 * vec_avx512.c (AVX-512 F/BW/VL/DQ), vec_avx2.c (AVX2 + FMA) and vec_portable.c (plain C).
 * The kernels (unary.c, binary.c, ...) take the table that tpu_vec_ops() picks for this
 * CPU, masked by TORCHTPU_ISA; tests reach every table through tpu_vec_ops_for().
 *
 * Accuracy of the transcendental loops (measured by tests/c/test_kernels_elementwise.c
 * against libm in double): exp, log, tanh, logistic, erf within 4 ulp over all finite
 * f32 inputs, including subnormal inputs and results; NaN in gives NaN out, +-inf give
 * the limits. sqrt, add, sub, mul, div are correctly rounded; rsqrt is 1/sqrt(x) with two
 * roundings; max/min propagate NaN and order -0 below +0.
 */
#ifndef TPU_VTPU_KERNELS_VEC_H
#define TPU_VTPU_KERNELS_VEC_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/ir.h"
#include "tpu/kernels.h"

typedef enum tpu_isa { TPU_ISA_PORTABLE, TPU_ISA_AVX2, TPU_ISA_AVX512, TPU_ISA_COUNT } tpu_isa_t;

/* The rows of a 2-d loop: |rows| rows of n elements; row r of operand k starts ld[k]
 * elements (of that operand's type) after row r - 1. Operand 0 is the output, then the
 * inputs in argument order. */
typedef struct tpu_vec_2d {
  int64_t n, rows;
  int64_t ld[4];
} tpu_vec_2d_t;

typedef struct tpu_vec_ops {
  const char *name; /* "portable", "avx2", "avx512" */
  tpu_isa_t isa;
  /* y[i] = op(x[i]), i < n, for the ops tpu_vec_unary_has(op); y may equal x. */
  void (*unary_f32)(tpu_op_t op, const float *x, float *y, int64_t n);
  /* out[i] = op(a[i * sa], b[i * sb]) with sa, sb in {0, 1}, for tpu_vec_binary_has(op);
   * out may equal a or b (when that operand's step is 1). */
  void (*binary_f32)(tpu_op_t op, const float *a, int64_t sa, const float *b, int64_t sb,
                     float *out, int64_t n);
  /* The same on bf16 arrays: widened to f32, computed as above, rounded to nearest even. */
  void (*unary_bf16)(tpu_op_t op, const uint16_t *x, uint16_t *y, int64_t n);
  void (*binary_bf16)(tpu_op_t op, const uint16_t *a, int64_t sa, const uint16_t *b,
                      int64_t sb, uint16_t *out, int64_t n);
  void (*bf16_to_f32)(const uint16_t *x, float *y, int64_t n);
  void (*f32_to_bf16)(const float *x, uint16_t *y, int64_t n); /* nearest even, as dtype.h */
  /* Philox4x32-10 on counters ctr + i (i < n; 64-bit counter in words 0 and 1, words 2
   * and 3 zero) under key (lo32(key), hi32(key)): output word j of counter i goes to
   * wj[i]. w1, w2, w3 may be NULL when not needed. */
  void (*philox)(uint64_t ctr, uint64_t key, int64_t n, uint32_t *w0, uint32_t *w1,
                 uint32_t *w2, uint32_t *w3);
  /* The same six loops with non-temporal (cache-bypassing) stores for the output, for
   * outputs too large to stay in cache (TPU_EW_STREAM_BYTES); same results. Call
   * stream_fence after the last of a run of them, before the data is handed on. */
  void (*unary_f32_stream)(tpu_op_t op, const float *x, float *y, int64_t n);
  void (*binary_f32_stream)(tpu_op_t op, const float *a, int64_t sa, const float *b,
                            int64_t sb, float *out, int64_t n);
  void (*unary_bf16_stream)(tpu_op_t op, const uint16_t *x, uint16_t *y, int64_t n);
  void (*binary_bf16_stream)(tpu_op_t op, const uint16_t *a, int64_t sa, const uint16_t *b,
                             int64_t sb, uint16_t *out, int64_t n);
  void (*bf16_to_f32_stream)(const uint16_t *x, float *y, int64_t n);
  void (*f32_to_bf16_stream)(const float *x, uint16_t *y, int64_t n);
  void (*stream_fence)(void);
  /* binary_f32 / binary_bf16 over the rows of |g| (ld: out, a, b): a row with sa or sb
   * 0 repeats that row's first element. */
  void (*binary_f32_2d)(tpu_op_t op, const float *a, int64_t sa, const float *b, int64_t sb,
                        float *out, const tpu_vec_2d_t *g);
  void (*binary_bf16_2d)(tpu_op_t op, const uint16_t *a, int64_t sa, const uint16_t *b,
                         int64_t sb, uint16_t *out, const tpu_vec_2d_t *g);
  /* out[i] = a[i * sa] DIR b[i * sb] as bool bytes (0/1), sa, sb in {0, 1}, over the rows
   * of |g| (ld: out, a, b); IEEE semantics: NaN compares false except NE, -0 == +0. bf16
   * compares its f32 values. */
  void (*compare_f32)(tpu_compare_dir_t dir, const float *a, int64_t sa, const float *b,
                      int64_t sb, uint8_t *out, const tpu_vec_2d_t *g);
  void (*compare_bf16)(tpu_compare_dir_t dir, const uint16_t *a, int64_t sa,
                       const uint16_t *b, int64_t sb, uint8_t *out, const tpu_vec_2d_t *g);
  /* out[i] = pred[i * sp] ? t[i * st] : f[i * sf] on 32-bit elements, sp, st, sf in
   * {0, 1} (a pred byte is true when non-zero), over the rows of |g| (ld: out, pred, t,
   * f); out may equal t or f where its step is 1. */
  void (*select_u32)(const uint8_t *pred, int64_t sp, const uint32_t *t, int64_t st,
                     const uint32_t *f, int64_t sf, uint32_t *out, const tpu_vec_2d_t *g);
  /* dst[r * ld + c] = src[r + c * s_col] for r < rows, c < cols (32-bit elements, ld and
   * s_col in elements): a tile whose columns are contiguous written row by row (the
   * transposing gather of ew_tile.h). dst and src must not overlap. */
  void (*transpose_u32)(uint32_t *dst, int64_t ld, const uint32_t *src, int64_t s_col,
                        int64_t rows, int64_t cols);
} tpu_vec_ops_t;

bool tpu_vec_unary_has(tpu_op_t op);  /* EXP LOG TANH LOGISTIC ERF SQRT RSQRT NEG ABS */
bool tpu_vec_binary_has(tpu_op_t op); /* ADD SUB MUL DIV MAX MIN */

/* The table the kernels use: the widest ISA tpu_cpu_features() allows, unless a test
 * forced one with tpu_vec_ops_force. Never NULL. */
const tpu_vec_ops_t *tpu_vec_ops(void);

/* The table for |isa| if this build has it and this CPU runs it (ignoring TORCHTPU_ISA),
 * else NULL. */
const tpu_vec_ops_t *tpu_vec_ops_for(tpu_isa_t isa);

/* Tests: make every kernel use |ops| (NULL goes back to the automatic choice). Not for
 * use while kernels run on other threads. */
void tpu_vec_ops_force(const tpu_vec_ops_t *ops);

/* What the CPU has, before TORCHTPU_ISA masks it (cpu_features.c). */
const tpu_cpu_features_t *tpu_cpu_features_detected(void);

/* transpose_u32 in 8 x 8 blocks of AVX registers (vec_avx2.c; the AVX-512 table uses it
 * too). */
void tpu_vec_transpose_u32_avx2(uint32_t *dst, int64_t ld, const uint32_t *src, int64_t s_col,
                                int64_t rows, int64_t cols);

/* Per-ISA tables (NULL when the build cannot target that ISA). */
const tpu_vec_ops_t *tpu_vec_ops_portable(void);
const tpu_vec_ops_t *tpu_vec_ops_avx2(void);
const tpu_vec_ops_t *tpu_vec_ops_avx512(void);

#endif /* TPU_VTPU_KERNELS_VEC_H */
