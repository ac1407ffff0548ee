/* ew_jit.h: machine code for fused elementwise programs (ew_program.h; internal).
 *
 * The interpreter in ew_program.c runs a program one instruction at a time over blocks of
 * 1024 floats, so every instruction stores its block and the next loads it back. The JIT
 * turns a program into AVX-512 loops instead: 16 elements at a time, each program register
 * in its own zmm register (registers 0..23 in zmm8..zmm31), inputs loaded and outputs
 * stored once per vector. ADD SUB MUL DIV MAX MIN SQRT RSQRT NEG ABS COMPARE SELECT
 * IS_FINITE EXP ERF are emitted inline, computed as the AVX-512 vec.h loops compute them
 * (exp and erf: the same instructions, vec_consts.h). Every other op (LOG, TANH, POW,
 * CONVERT, ...) splits the loop: the code runs the instructions
 * before it over the whole block, keeping in a scratch block each value read later, calls
 * the interpreter's own loop for the op over the block (tpu_ew_jit_call_block), and goes on
 * with a loop for the instructions after it. So results equal the interpreter's with the
 * AVX-512 table bit for bit (a NaN's payload may differ where two NaNs meet).
 *
 * Registers that hold one value for all elements (constants, inputs broadcast over the
 * call, and what is computed only from those) are computed once before the loops, as the
 * interpreter computes them once per block. Which inputs are such is known only per call,
 * so code is generated lazily per set of broadcast inputs (a few variants per program).
 * Short rows packed into a block may also have inputs with one value per row (a layer
 * norm's mean), which the code broadcasts per vector from the values themselves.
 *
 * Available on x86-64 Linux with AVX-512 (F, BW, VL, DQ) and unless TORCHTPU_EW_JIT=0; the
 * kernel uses it only while the vec.h table is the AVX-512 one (TORCHTPU_ISA can force
 * another; tests force others too), since that is whose results it reproduces.
 */
#ifndef TPU_VTPU_KERNELS_EW_JIT_H
#define TPU_VTPU_KERNELS_EW_JIT_H

#include <stdbool.h>
#include <stdint.h>

#include "vtpu/kernels/ew_program.h"

typedef struct tpu_ew_jit tpu_ew_jit_t;

/* Elements per call of code that calls out (tpu_ew_jit_code_t.blocked): its scratch blocks. */
#define TPU_EW_JIT_BLOCK 1024

/* What generated code reads and writes in one call: m elements, 16 per vector. */
typedef struct tpu_ew_jit_args {
  /* per register: the values of inputs (m floats, or 1 where broadcast) and constants (1);
   * other registers unused */
  const float *in[TPU_EW_PROGRAM_MAX_REGS];
  float *out[1 + TPU_EW_PROGRAM_MAX_STORES]; /* m floats each: the result, then the stores */
  int64_t m;
  int64_t full_bytes;  /* 64 * (m / 16): the bytes of whole vectors */
  uint64_t tail_mask;  /* the lanes of the last m % 16 elements; 0 when there are none */
  /* blocked code: TPU_EW_PROGRAM_MAX_REGS blocks of TPU_EW_JIT_BLOCK floats, one per
   * register, for values that cross a call; m <= TPU_EW_JIT_BLOCK */
  float *scratch;
} tpu_ew_jit_args_t;

typedef void (*tpu_ew_jit_fn)(const tpu_ew_jit_args_t *args);

typedef struct tpu_ew_jit_code {
  tpu_ew_jit_fn fn;
  bool blocked; /* calls out for some op: needs args->scratch, m <= TPU_EW_JIT_BLOCK */
} tpu_ew_jit_code_t;

/* A JIT for |p| (copied), or NULL when this machine or build has none, TORCHTPU_EW_JIT=0,
 * or memory runs out: the program is then interpreted. No code is generated yet. */
tpu_ew_jit_t *tpu_ew_jit_new(const tpu_ew_program_t *p);

void tpu_ew_jit_free(tpu_ew_jit_t *j);

/* The code for the program with the inputs in |uniform| (bit k: input k) broadcast,
 * generated on first use (thread safe), or NULL if it cannot be (too many variants, out of
 * memory): interpret then. */
const tpu_ew_jit_code_t *tpu_ew_jit_code(tpu_ew_jit_t *j, uint32_t uniform);

/* The same for m elements that are whole rows of 2^row_log2 bytes (a multiple of 16 floats:
 * row_log2 >= 6), where each input in |per_row| holds one f32 per row, contiguous (lane i
 * reads in[k][(4 * i) >> row_log2]: a softmax's row sums, a layer norm's mean), instead of
 * a block filled with each row's value. NULL also when a per-row input is read by an op the
 * code calls (those read blocks): fill the block and use tpu_ew_jit_code then. */
const tpu_ew_jit_code_t *tpu_ew_jit_code_rows(tpu_ew_jit_t *j, uint32_t uniform,
                                              uint32_t per_row, int row_log2);

/* Fills args' m-dependent fields. */
void tpu_ew_jit_set_count(tpu_ew_jit_args_t *args, int64_t m);

/* ---- internal: the C function generated code calls (ew_jit_calls.c) ---- */

/* Where an operand of a call is: an input's values (args->in), a register's scratch block,
 * or a stack slot of the generated code (a uniform value: 16 equal floats). */
typedef enum { TPU_JIT_SRC_INPUT, TPU_JIT_SRC_SCRATCH, TPU_JIT_SRC_SLOT } tpu_jit_src_t;

typedef struct tpu_ew_jit_call {
  const tpu_ew_instr_t *in;
  int num_operands;            /* 1 or 2 */
  tpu_jit_src_t src[2];
  int index[2];                /* input register, scratch register or slot */
  bool uniform;                /* all operands in slots: one value, into slot |dst| */
  int dst;                     /* the scratch register or slot written, */
  int out;                     /* or >= 0: output |out| (args->out), which nothing else reads */
} tpu_ew_jit_call_t;

/* Runs call |c| over args->m elements (one, broadcast over its slot, when uniform) with the
 * interpreter's functions; |frame| is the generated code's stack frame (its slots). */
void tpu_ew_jit_call_block(const tpu_ew_jit_call_t *c, const tpu_ew_jit_args_t *args,
                           char *frame);

#endif /* TPU_VTPU_KERNELS_EW_JIT_H */
