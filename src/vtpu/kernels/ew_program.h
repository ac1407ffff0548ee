/* ew_program.h: a fused chain of float elementwise ops in one pass over memory (internal,
 * for the compiler's fusion of elementwise nodes; not yet in include/tpu/kernels.h).
 *
 * A program is straight-line code over f32 registers. Registers 0 .. num_inputs-1 hold the
 * inputs (f32, bf16 or f16, broadcast to out's shape like the other elementwise kernels)
 * widened to f32; the next num_consts registers hold constants; instructions write the
 * rest. The kernel runs the program block by block (1024 elements, kept in L1)
 * and rounds the result register once into out (f32, bf16 or f16). Intermediate values
 * stay f32: on f32 tensors the result equals the unfused chain bit for bit; on bf16/f16
 * tensors the fused chain rounds once where the unfused chain rounds after every op.
 *
 *   gelu(x) = x * 0.5 * (1 + erf(x / sqrt2)):
 *   tpu_ew_program_t p = {.num_inputs = 1, .num_consts = 3,
 *                         .consts = {0.70710678f, 1.0f, 0.5f},   // r1, r2, r3
 *                         .num_instrs = 5, .instrs = {{TPU_OP_MUL, 4, 0, 1},
 *                         {TPU_OP_ERF, 4, 4, 0}, {TPU_OP_ADD, 4, 4, 2},
 *                         {TPU_OP_MUL, 4, 4, 0}, {TPU_OP_MUL, 4, 4, 3}}, .result = 4};
 *
 * Ops: the UNARY and BINARY float ops of ew_scalar.h (BITCAST_CONVERT, NOT and the
 * integer-only ops are not allowed), computed exactly as tpu_kernel_unary /
 * tpu_kernel_binary compute them on f32 (SIMD loops where vec.h has them), and three
 * more, so that the compiler can fuse what PyTorch programs are made of bit for bit:
 *   CONVERT  aux = TPU_BF16 or TPU_F16: rounds a to that dtype (nearest even) and widens it
 *            back, the rounding an unfused bf16/f16 intermediate goes through;
 *   COMPARE  aux = a tpu_compare_dir_t: 1.0 where compare(a, b) holds, else 0.0;
 *   SELECT   a != 0 ? b : c (a predicate register, i.e. a COMPARE result or a bool input);
 *   IS_FINITE 1.0 where a is finite, else 0.0 (a predicate).
 * Inputs may also be bool tensors (loaded as 0.0 / 1.0) for SELECT predicates.
 * Stores: registers (other than inputs and constants) stored, besides the result, into
 * extra outputs of out's shape, rounded once like the result.
 */
#ifndef TPU_VTPU_KERNELS_EW_PROGRAM_H
#define TPU_VTPU_KERNELS_EW_PROGRAM_H

#include "tpu/kernels.h"
#include "vtpu/kernels/vec.h"

#define TPU_EW_PROGRAM_MAX_REGS 24
#define TPU_EW_PROGRAM_MAX_INSTRS 64
#define TPU_EW_PROGRAM_MAX_INPUTS 8 /* TPU_EW_MAX_OPERANDS - 1 */
#define TPU_EW_PROGRAM_MAX_STORES 4 /* extra outputs; inputs + stores <= MAX_INPUTS */

typedef struct tpu_ew_instr {
  tpu_op_t op;
  int8_t dst, a, b; /* registers; b is ignored by unary ops */
  int8_t c;         /* SELECT: the on_false register */
  int8_t aux;       /* CONVERT: the dtype rounded to; COMPARE: the direction */
} tpu_ew_instr_t;

typedef struct tpu_ew_program {
  int num_inputs;                           /* 1 .. TPU_EW_PROGRAM_MAX_INPUTS */
  int num_consts;
  float consts[TPU_EW_PROGRAM_MAX_REGS];    /* registers num_inputs .. + num_consts - 1 */
  int num_instrs;
  tpu_ew_instr_t instrs[TPU_EW_PROGRAM_MAX_INSTRS];
  int result;                               /* the register stored to out */
  int num_stores;                           /* 0 .. TPU_EW_PROGRAM_MAX_STORES */
  int8_t stores[TPU_EW_PROGRAM_MAX_STORES]; /* registers also stored to extra outputs */
  struct tpu_ew_jit *jit; /* machine code for it (ew_jit.h; the owner frees it), or NULL */
} tpu_ew_program_t;

/* TPU_OK if |p| is well formed (sizes, ops, registers written before read), else the error
 * tpu_kernel_ew_program would give; the compiler checks the programs it builds. */
tpu_status_t tpu_ew_program_check(const tpu_ew_program_t *p);

/* out = program(ins[0], ..., ins[num_inputs - 1]). Errors name "kernel_ew_program" and the
 * offending instruction, register or dtype. A program with stores needs
 * tpu_kernel_ew_program_stores. */
tpu_status_t tpu_kernel_ew_program(const tpu_ew_program_t *p, const tpu_buf_t *const *ins,
                                   const tpu_buf_t *out, tpu_pool_t *pool);

/* The same, and register stores[j] also into extra[j] (out's dims; f32, bf16 or f16) for
 * j < num_stores: a multi-output fusion (an optimizer step's new moments and parameter in
 * one pass). Each block's stores follow all its instructions, so an extra output may be
 * the memory of an input it replaces (an in-place update) as long as both are read and
 * written at the same elements. */
tpu_status_t tpu_kernel_ew_program_stores(const tpu_ew_program_t *p, const tpu_buf_t *const *ins,
                                          const tpu_buf_t *out, const tpu_buf_t *const *extra,
                                          tpu_pool_t *pool);

/* ---- internal to the kernel (ew_program_loops.c) ---- */

/* m results of a CONVERT, IS_FINITE, COMPARE
 * or SELECT instruction into dst, register r's values at val[r] with step[r] (0: one value
 * for all, 1: m values); dst may be one of the operands' arrays. */
void tpu_ew_program_special(const tpu_ew_instr_t *in, const float *const *val,
                            const int64_t *step, float *dst, int64_t m);

/* Row r < rows of dst (n floats at dst + r * n) = the one |dt| value at src + r * outer. */
void tpu_ew_program_fill_rows(const char *src, int64_t outer, tpu_dtype_t dt, float *dst,
                              int64_t rows, int64_t n);

/* dst[j] = n values of |dt| (f32, bf16, f16 or bool as 0/1) at src (byte stride s) as f32. */
void tpu_ew_program_load_row(const tpu_vec_ops_t *v, const char *src, int64_t s,
                             tpu_dtype_t dt, float *dst, int64_t n);

/* The same for |rows| rows of n values, row r at src + r * outer (bytes), into dst + r * n. */
void tpu_ew_program_load_rows(const tpu_vec_ops_t *v, const char *src, int64_t outer, int64_t s,
                              tpu_dtype_t dt, float *dst, int64_t rows, int64_t n);

#endif /* TPU_VTPU_KERNELS_EW_PROGRAM_H */
