/* ew_program.c: tpu_kernel_ew_program, fused float elementwise chains (ew_program.h).
 *
 * Per 2-d segment of the iteration (rows of the innermost dim), per block of PROGRAM_BLOCK
 * elements: load the inputs as f32 (contiguous f32 in place, everything else converted into
 * the block), run each instruction through the same compute functions as the unfused
 * kernels (ew_program_loops.c for the four vec.h lacks), store the result register (the
 * last instruction writes a contiguous f32 output directly). Short rows (softmax and layer
 * norm rows of 32 or 64, operands broadcast along them) are packed several to a block, so
 * an instruction's dispatch is paid per block, not per row (an input that is one row for
 * every row, a layer norm's weight, is loaded into its block once); long rows go block by
 * block.
 * A register that only ever depends on broadcast values holds one value (step 0). A
 * program's stores (multi-output fusion) write their registers once the block's
 * instructions are done, so an extra output may overwrite an input it replaces.
 */
#include "vtpu/kernels/ew_program.h"

#include <math.h>

#include "vtpu/kernels/ew.h"
#include "vtpu/kernels/ew_jit.h"

#define KERNEL "kernel_ew_program"
/* Elements per block: registers of 4 KiB, so that the few a chain uses stay in L1 while an
 * instruction's dispatch is paid once per 1024 elements (bench/kernels_fused_rows.c: 512
 * made the layer norm and softmax rows 15-30% slower, 2048 slower still, out of L1). */
#define PROGRAM_BLOCK 1024
_Static_assert(PROGRAM_BLOCK == TPU_EW_JIT_BLOCK, "the JIT's scratch blocks are the registers'");

typedef struct program_ctx {
  const tpu_vec_ops_t *v;
  const tpu_ew_program_t *p;
  tpu_dtype_t in_dt[TPU_EW_PROGRAM_MAX_INPUTS], out_dt;
  int last; /* the final instruction, if it writes the result (else -1) */
  bool stream; /* the final instruction writes out with non-temporal stores */
  tpu_dtype_t store_dt[TPU_EW_PROGRAM_MAX_STORES]; /* extra outputs: operands after the inputs */
  unsigned char kind[TPU_EW_PROGRAM_MAX_INSTRS]; /* instr_kind of each instruction */
  bool unary[TPU_EW_PROGRAM_MAX_INSTRS];         /* a UNARY-family op (CONVERT, IS_FINITE too) */
  tpu_ew_jit_t *jit; /* the program's machine code (ew_jit.h), when it reproduces c->v */
} program_ctx;

/* How an instruction runs, decided once per kernel call rather than once per block:
 * SPECIAL the four ops the vector compute functions do not cover (ew_program.h), through
 * ew_program_loops.c; *_VEC straight to the vec.h loops; UNARY / BINARY through the
 * elementwise compute functions (their scalar loops). */
enum instr_kind { SPECIAL, UNARY, UNARY_VEC, BINARY, BINARY_VEC };

static unsigned char kind_of(tpu_op_t op) {
  if (op == TPU_OP_CONVERT || op == TPU_OP_COMPARE || op == TPU_OP_SELECT ||
      op == TPU_OP_IS_FINITE) {
    return SPECIAL;
  }
  if (tpu_op_family(op) == TPU_FAMILY_UNARY) return tpu_vec_unary_has(op) ? UNARY_VEC : UNARY;
  return tpu_vec_binary_has(op) ? BINARY_VEC : BINARY;
}

/* Runs the instructions over m elements: register r's values at val[r] with step[r] (0: one
 * value for all) on entry for the inputs and constants, on return for every register.
 * |direct|: where the final instruction may write the result (contiguous f32 out), or NULL;
 * |stream|: with non-temporal stores there. */
static void run_instrs(const program_ctx *c, float (*regs)[PROGRAM_BLOCK], const float **val,
                       int64_t *step, int64_t m, float *direct, bool stream) {
  const tpu_ew_program_t *p = c->p;
  for (int j = 0; j < p->num_instrs; j++) {
    const tpu_ew_instr_t *in = &p->instrs[j];
    const unsigned char kind = c->kind[j];
    const bool unary = c->unary[j];
    float *dst = regs[in->dst];
    /* an operand in the destination register that holds one broadcast value while the
     * result is a vector would be overwritten before it is read again: read it from a
     * copy (dst == a with a vector a is fine: element i is read before it is written) */
    float held[3];
    if (!unary) {
      int ops[3] = {in->a, in->b, in->op == TPU_OP_SELECT ? in->c : in->b};
      for (int k = 0; k < 3; k++) {
        if (ops[k] == in->dst && step[ops[k]] == 0 && val[ops[k]] == dst) {
          held[k] = dst[0];
          val[ops[k]] = &held[k];
        }
      }
    }
    if (kind == SPECIAL) {
      int64_t st = step[in->a];
      if (in->op == TPU_OP_COMPARE || in->op == TPU_OP_SELECT) st |= step[in->b];
      if (in->op == TPU_OP_SELECT) st |= step[in->c];
      if (j == c->last && direct && st) dst = direct;
      tpu_ew_program_special(in, val, step, dst, st ? m : 1);
      step[in->dst] = st;
      val[in->dst] = dst;
      continue;
    }
    /* the operands, read before the destination is set (it may be one of them) */
    const float *va = val[in->a], *vb = unary ? NULL : val[in->b];
    const int64_t sa = step[in->a], sb = unary ? 0 : step[in->b], sd = sa | sb;
    if (j == c->last && direct && sd) dst = direct;
    step[in->dst] = sd;
    val[in->dst] = dst;
    if (stream && dst == direct && kind == UNARY_VEC) {
      c->v->unary_f32_stream(in->op, va, dst, m);
    } else if (stream && dst == direct && kind == BINARY_VEC) {
      c->v->binary_f32_stream(in->op, va, sa, vb, sb, dst, m);
    } else if (kind == UNARY_VEC) {
      c->v->unary_f32(in->op, va, dst, sd ? m : 1);
    } else if (kind == BINARY_VEC) {
      c->v->binary_f32(in->op, va, sa, vb, sb, dst, sd ? m : 1);
    } else if (unary) {
      tpu_ew_unary_compute(c->v, in->op, TPU_CT_F32, TPU_F32, va, dst, sd ? m : 1);
    } else {
      tpu_ew_binary_compute(c->v, in->op, TPU_CT_F32, TPU_F32, va, sa, vb, sb, dst,
                            sd ? m : 1);
    }
  }
}

/* The program's machine code for inputs with these steps (0: one value), or NULL. */
static const tpu_ew_jit_code_t *jit_code(const program_ctx *c, const int64_t *step) {
  if (!c->jit) return NULL;
  uint32_t uniform = 0;
  for (int k = 0; k < c->p->num_inputs; k++) uniform |= (step[k] == 0 ? 1u : 0u) << k;
  return tpu_ew_jit_code(c->jit, uniform);
}

/* Runs |code| over m elements: inputs and constants at val (as run_instrs has them), the
 * result to outs[0] and store j to outs[1 + j] (m floats each); |scratch|: the registers'
 * blocks. */
static void jit_call(const program_ctx *c, const tpu_ew_jit_code_t *code, const float *const *val,
                     float *const *outs, float (*scratch)[PROGRAM_BLOCK], int64_t m) {
  tpu_ew_jit_args_t a;
  for (int r = 0; r < c->p->num_inputs + c->p->num_consts; r++) a.in[r] = val[r];
  for (int o = 0; o <= c->p->num_stores; o++) a.out[o] = outs[o];
  a.scratch = scratch[0];
  tpu_ew_jit_set_count(&a, m);
  code->fn(&a);
}

static void set_consts(const tpu_ew_program_t *p, const float **val, int64_t *step) {
  for (int k = 0; k < p->num_consts; k++) {
    int r = p->num_inputs + k;
    val[r] = &p->consts[k];
    step[r] = 0;
  }
}

/* One row of n elements (any length), block by block. */
static void program_row(const program_ctx *c, char *const *ptrs, const int64_t *strides,
                        int64_t n) {
  const tpu_ew_program_t *p = c->p;
  const bool out_direct = c->out_dt == TPU_F32 && strides[0] == 4;
  _Alignas(64) float regs[TPU_EW_PROGRAM_MAX_REGS][PROGRAM_BLOCK];
  /* inputs not read in place */
  _Alignas(64) float loaded[TPU_EW_PROGRAM_MAX_INPUTS][PROGRAM_BLOCK];
  const float *val[TPU_EW_PROGRAM_MAX_REGS]; /* where each register's values are */
  int64_t step[TPU_EW_PROGRAM_MAX_REGS];
  set_consts(p, val, step);
  /* machine code: where every input is f32 read in place and every output f32 written in
   * place, the whole row in one call (no blocks); else block by block, like the
   * interpreter (streamed outputs stay with the interpreter's non-temporal stores) */
  bool in_place = true;
  for (int k = 0; k < p->num_inputs; k++) {
    step[k] = strides[k + 1] != 0;
    in_place &= c->in_dt[k] == TPU_F32 && (strides[k + 1] == 0 || strides[k + 1] == 4);
  }
  /* output o (the result, then the stores): iteration operand opd[o], written in place by
   * the machine code where f32 and contiguous, else through outb[o] */
  int opd[1 + TPU_EW_PROGRAM_MAX_STORES] = {0};
  bool direct[1 + TPU_EW_PROGRAM_MAX_STORES] = {out_direct};
  bool outs_direct = out_direct;
  for (int j = 0; j < p->num_stores; j++) {
    opd[1 + j] = 1 + p->num_inputs + j;
    direct[1 + j] = c->store_dt[j] == TPU_F32 && strides[opd[1 + j]] == 4;
    outs_direct &= direct[1 + j];
  }
  float *outs[1 + TPU_EW_PROGRAM_MAX_STORES];
  _Alignas(64) float outb[1 + TPU_EW_PROGRAM_MAX_STORES][PROGRAM_BLOCK];
  const tpu_ew_jit_code_t *code = c->stream ? NULL : jit_code(c, step);
  const int64_t block = code && !code->blocked && in_place && outs_direct ? n : PROGRAM_BLOCK;
  /* streaming: a short first block brings the output to a 64-byte boundary, so no cache
   * line is written partly with streaming and partly with regular stores */
  int64_t first = block;
  if (c->stream && out_direct && (uintptr_t)ptrs[0] % 64) {
    first = (int64_t)((64 - (uintptr_t)ptrs[0] % 64) % 64) / 4;
  }
  for (int64_t i = 0, m; i < n; i += m) {
    m = i ? block : first;
    if (m == 0) m = block;
    if (m > n - i) m = n - i;
    for (int k = 0; k < p->num_inputs; k++) {
      int64_t s = strides[k + 1];
      const char *src = ptrs[k + 1] + i * s;
      step[k] = s != 0; /* 0: one value (a broadcast) */
      if (c->in_dt[k] == TPU_F32 && (s == 0 || s == 4)) { /* in place */
        val[k] = (const float *)(const void *)src;
        continue;
      }
      /* converted (bool predicates as 0.0 / 1.0) */
      tpu_ew_program_load_row(c->v, src, s, c->in_dt[k], loaded[k], s ? m : 1);
      val[k] = loaded[k];
    }
    if (code) {
      for (int o = 0; o <= p->num_stores; o++) {
        outs[o] = direct[o] ? (float *)(void *)(ptrs[opd[o]] + i * 4) : outb[o];
      }
      jit_call(c, code, val, outs, regs, m);
      for (int o = 0; o <= p->num_stores; o++) { /* nothing to do where written in place */
        const int k = opd[o];
        const tpu_dtype_t dt = o ? c->store_dt[o - 1] : c->out_dt;
        tpu_ew_store(c->v, TPU_CT_F32, outs[o], 1, ptrs[k] + i * strides[k], strides[k], dt, m);
      }
      continue;
    }
    run_instrs(c, regs, val, step, m, out_direct ? (float *)(void *)(ptrs[0] + i * 4) : NULL,
               c->stream);
    tpu_ew_store(c->v, TPU_CT_F32, val[p->result], step[p->result], ptrs[0] + i * strides[0],
                 strides[0], c->out_dt, m);
    for (int j = 0; j < p->num_stores; j++) {
      int k = 1 + p->num_inputs + j, r = p->stores[j];
      tpu_ew_store(c->v, TPU_CT_F32, val[r], step[r], ptrs[k] + i * strides[k], strides[k],
                   c->store_dt[j], m);
    }
  }
  if (c->stream && out_direct) c->v->stream_fence();
}

/* Stores |g| rows of n values (vals, step 0: one value for all) at dst, rows |oo| bytes
 * apart with byte stride |so| inside a row: one run when the rows follow each other. */
static void store_rows(const program_ctx *c, const float *vals, int64_t step, char *dst,
                       int64_t so, int64_t oo, tpu_dtype_t dt, int64_t g, int64_t n) {
  if (oo == n * so) {
    tpu_ew_store(c->v, TPU_CT_F32, vals, step, dst, so, dt, g * n);
    return;
  }
  for (int64_t r = 0; r < g; r++) {
    tpu_ew_store(c->v, TPU_CT_F32, vals + r * n * step, step, dst + r * oo, so, dt, n);
  }
}

/* |rows| short rows of n elements (2 n <= PROGRAM_BLOCK), packed PROGRAM_BLOCK / n rows to
 * a block so that each instruction runs once per block, not once per row. An input that
 * steps along the rows is copied row by row into the block (or read in place when the rows
 * are contiguous f32); one broadcast along the rows (inner stride 0) fills each row's part
 * with its value (or, f32 values one after another, machine code reads each row's value
 * where it is: tpu_ew_jit_code_rows); one broadcast over the whole segment stays one value
 * (step 0). The result goes to out directly when out's rows are contiguous, else row by
 * row. */
static void program_rows(const program_ctx *c, const tpu_ew_seg_t *seg) {
  const tpu_ew_program_t *p = c->p;
  const int64_t n = seg->n, per = PROGRAM_BLOCK / n;
  const int64_t so = seg->strides[0], oo = seg->outer[0];
  const bool out_dense = oo == n * so; /* out's rows follow each other */
  const bool out_direct = c->out_dt == TPU_F32 && so == 4 && out_dense;
  _Alignas(64) float regs[TPU_EW_PROGRAM_MAX_REGS][PROGRAM_BLOCK];
  _Alignas(64) float loaded[TPU_EW_PROGRAM_MAX_INPUTS][PROGRAM_BLOCK];
  _Alignas(64) float outb[1 + TPU_EW_PROGRAM_MAX_STORES][PROGRAM_BLOCK]; /* machine code's */
  const float *val[TPU_EW_PROGRAM_MAX_REGS];
  int64_t step[TPU_EW_PROGRAM_MAX_REGS];
  /* an input that is one row for every row (a layer norm's weight): its block is the same
   * in every block of rows (the last, shorter one uses a prefix), so it is filled once */
  bool same_rows[TPU_EW_PROGRAM_MAX_INPUTS] = {false};
  for (int k = 0; k < p->num_inputs; k++) {
    if (seg->strides[k + 1] == 0 || seg->outer[k + 1] != 0) continue;
    same_rows[k] = true;
    const int64_t g = seg->rows < per ? seg->rows : per;
    tpu_ew_program_load_rows(c->v, seg->ptrs[k + 1], 0, seg->strides[k + 1], c->in_dt[k],
                             loaded[k], g, n);
  }
  /* inputs with one value for the whole segment (bit k: input k), and those with one f32
   * per row, one after another, which machine code can read as they are when rows are a
   * power-of-two multiple of 16 floats, instead of filling blocks */
  uint32_t uniform = 0, per_row = 0;
  for (int k = 0; k < p->num_inputs; k++) {
    const int64_t s = seg->strides[k + 1], o = seg->outer[k + 1];
    if (s == 0 && o == 0) uniform |= 1u << k;
    if (s == 0 && o == 4 && c->in_dt[k] == TPU_F32) per_row |= 1u << k;
  }
  const tpu_ew_jit_code_t *code = NULL; /* the same for every block of rows */
  if (c->jit && per_row && n % 16 == 0 && (n & (n - 1)) == 0) {
    const int row_log2 = 2 + __builtin_ctzll((unsigned long long)n); /* 2^row_log2 = 4 n */
    code = tpu_ew_jit_code_rows(c->jit, uniform, per_row, row_log2);
  }
  if (!code) per_row = 0;
  if (!code && c->jit) code = tpu_ew_jit_code(c->jit, uniform);
  for (int64_t r0 = 0, g; r0 < seg->rows; r0 += g) {
    g = seg->rows - r0 < per ? seg->rows - r0 : per;
    const int64_t m = g * n;
    set_consts(p, val, step);
    for (int k = 0; k < p->num_inputs; k++) {
      const int64_t s = seg->strides[k + 1], o = seg->outer[k + 1];
      const char *src = seg->ptrs[k + 1] + r0 * o;
      const tpu_dtype_t dt = c->in_dt[k];
      float *blk = loaded[k];
      val[k] = blk;
      step[k] = 1;
      if (same_rows[k]) continue; /* filled before the loop */
      if (per_row >> k & 1) { /* one value per row, read by the code as they are */
        val[k] = (const float *)(const void *)src;
      } else if (uniform >> k & 1) { /* one value for the whole block */
        tpu_ew_program_fill_rows(src, 0, dt, blk, 1, 1);
        step[k] = 0;
      } else if (s == 0) { /* one value per row */
        tpu_ew_program_fill_rows(src, o, dt, blk, g, n);
      } else if (dt == TPU_F32 && s == 4 && o == n * 4) { /* contiguous rows, in place */
        val[k] = (const float *)(const void *)src;
      } else if (o == n * s) { /* rows that follow each other: one run */
        tpu_ew_program_load_row(c->v, src, s, dt, blk, m);
      } else {
        tpu_ew_program_load_rows(c->v, src, o, s, dt, blk, g, n);
      }
    }
    char *dst = seg->ptrs[0] + r0 * oo;
    if (code) { /* machine code: every output through a block (the result in place if it can) */
      float *outs[1 + TPU_EW_PROGRAM_MAX_STORES];
      outs[0] = out_direct ? (float *)(void *)dst : outb[0];
      for (int j = 0; j < p->num_stores; j++) outs[1 + j] = outb[1 + j];
      jit_call(c, code, val, outs, regs, m);
      store_rows(c, outs[0], 1, dst, so, oo, c->out_dt, g, n);
      for (int j = 0; j < p->num_stores; j++) {
        int k = 1 + p->num_inputs + j;
        store_rows(c, outs[1 + j], 1, seg->ptrs[k] + r0 * seg->outer[k], seg->strides[k],
                   seg->outer[k], c->store_dt[j], g, n);
      }
      continue;
    }
    run_instrs(c, regs, val, step, m, out_direct ? (float *)(void *)dst : NULL, false);
    store_rows(c, val[p->result], step[p->result], dst, so, oo, c->out_dt, g, n);
    for (int j = 0; j < p->num_stores; j++) {
      int k = 1 + p->num_inputs + j, r = p->stores[j];
      store_rows(c, val[r], step[r], seg->ptrs[k] + r0 * seg->outer[k], seg->strides[k],
                 seg->outer[k], c->store_dt[j], g, n);
    }
  }
}

static void program_seg(void *arg, const tpu_ew_seg_t *seg) {
  const program_ctx *c = arg;
  if (seg->rows > 1 && 2 * seg->n <= PROGRAM_BLOCK) {
    program_rows(c, seg);
    return;
  }
  char *ptrs[TPU_EW_MAX_OPERANDS];
  for (int64_t r = 0; r < seg->rows; r++) {
    for (int k = 0; k <= c->p->num_inputs + c->p->num_stores; k++) {
      ptrs[k] = seg->ptrs[k] + r * seg->outer[k];
    }
    program_row(c, ptrs, seg->strides, seg->n);
  }
}

static bool float32ish(tpu_dtype_t dt) {
  return dt == TPU_F32 || dt == TPU_BF16 || dt == TPU_F16;
}

tpu_status_t tpu_ew_program_check(const tpu_ew_program_t *p) {
  if (!p || p->num_inputs < 1 || p->num_inputs > TPU_EW_PROGRAM_MAX_INPUTS ||
      p->num_consts < 0 || p->num_inputs + p->num_consts > TPU_EW_PROGRAM_MAX_REGS ||
      p->num_instrs < 0 || p->num_instrs > TPU_EW_PROGRAM_MAX_INSTRS) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          KERNEL ": bad program sizes (inputs 1..%d, registers <= %d, "
                          "instructions <= %d)",
                          TPU_EW_PROGRAM_MAX_INPUTS, TPU_EW_PROGRAM_MAX_REGS,
                          TPU_EW_PROGRAM_MAX_INSTRS);
  }
  int first_free = p->num_inputs + p->num_consts;
  bool written[TPU_EW_PROGRAM_MAX_REGS] = {false};
  for (int r = 0; r < first_free; r++) written[r] = true;
  for (int j = 0; j < p->num_instrs; j++) {
    const tpu_ew_instr_t *in = &p->instrs[j];
    bool unary = (unsigned)in->op < TPU_OP_COUNT && tpu_op_family(in->op) == TPU_FAMILY_UNARY;
    bool binary = (unsigned)in->op < TPU_OP_COUNT && tpu_op_family(in->op) == TPU_FAMILY_BINARY &&
                  tpu_op_arity(in->op) == 2;
    bool ok = (unary && in->op != TPU_OP_CONVERT && in->op != TPU_OP_BITCAST_CONVERT &&
               in->op != TPU_OP_IS_FINITE && tpu_ew_unary_supported(in->op, TPU_F32)) ||
              (binary && tpu_ew_binary_supported(in->op, TPU_F32)) ||
              (in->op == TPU_OP_CONVERT && (in->aux == TPU_BF16 || in->aux == TPU_F16)) ||
              (in->op == TPU_OP_COMPARE && in->aux >= TPU_CMP_EQ && in->aux <= TPU_CMP_GE) ||
              in->op == TPU_OP_IS_FINITE ||
              in->op == TPU_OP_SELECT;
    bool ternary = in->op == TPU_OP_SELECT;
    if (!ok) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            KERNEL ": instruction %d: %s is not a float elementwise op", j,
                            (unsigned)in->op < TPU_OP_COUNT ? tpu_op_name(in->op) : "(invalid)");
    }
    bool regs_ok = in->dst >= first_free && in->dst < TPU_EW_PROGRAM_MAX_REGS && in->a >= 0 &&
                   in->a < TPU_EW_PROGRAM_MAX_REGS && written[in->a] &&
                   (unary || in->op == TPU_OP_CONVERT ||
                    (in->b >= 0 && in->b < TPU_EW_PROGRAM_MAX_REGS && written[in->b])) &&
                   (!ternary || (in->c >= 0 && in->c < TPU_EW_PROGRAM_MAX_REGS && written[in->c]));
    if (!regs_ok) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            KERNEL ": instruction %d (%s) reads an unset register or writes "
                            "an input or constant",
                            j, tpu_op_name(in->op));
    }
    written[in->dst] = true;
  }
  if (p->result < 0 || p->result >= TPU_EW_PROGRAM_MAX_REGS || !written[p->result]) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": result register %d is not set",
                          p->result);
  }
  if (p->num_stores < 0 || p->num_stores > TPU_EW_PROGRAM_MAX_STORES ||
      p->num_inputs + p->num_stores > TPU_EW_PROGRAM_MAX_INPUTS) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          KERNEL ": %d stores with %d inputs (stores <= %d, inputs + stores "
                          "<= %d)",
                          p->num_stores, p->num_inputs, TPU_EW_PROGRAM_MAX_STORES,
                          TPU_EW_PROGRAM_MAX_INPUTS);
  }
  for (int j = 0; j < p->num_stores; j++) {
    int r = p->stores[j];
    if (r < first_free || r >= TPU_EW_PROGRAM_MAX_REGS || !written[r]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            KERNEL ": store %d reads register %d, which no instruction sets", j,
                            r);
    }
  }
  return TPU_OK;
}

/* Extra output j is out's shape, written at every element (no stride 0 where out has none). */
static tpu_status_t check_extra(const tpu_buf_t *out, const tpu_buf_t *x, int j) {
  bool ok = x && x->rank == out->rank && float32ish(x->dtype);
  for (int d = 0; ok && d < out->rank; d++) {
    ok = x->dims[d] == out->dims[d] && (x->strides[d] != 0 || x->dims[d] == 1);
  }
  if (!ok) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          KERNEL ": extra output %d is not an f32, bf16 or f16 tensor of "
                          "out's dims, one element per position", j);
  }
  return TPU_OK;
}

tpu_status_t tpu_kernel_ew_program(const tpu_ew_program_t *p, const tpu_buf_t *const *ins,
                                   const tpu_buf_t *out, tpu_pool_t *pool) {
  if (p && p->num_stores != 0) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          KERNEL ": a program with stores needs its extra outputs "
                          "(tpu_kernel_ew_program_stores)");
  }
  return tpu_kernel_ew_program_stores(p, ins, out, NULL, pool);
}

tpu_status_t tpu_kernel_ew_program_stores(const tpu_ew_program_t *p, const tpu_buf_t *const *ins,
                                          const tpu_buf_t *out, const tpu_buf_t *const *extra,
                                          tpu_pool_t *pool) {
  TPU_RETURN_IF_ERROR(tpu_ew_program_check(p));
  static const char *const kInputs[TPU_EW_PROGRAM_MAX_INPUTS] = {
      "input 0", "input 1", "input 2", "input 3", "input 4", "input 5", "input 6", "input 7"};
  static const char *const kExtra[TPU_EW_PROGRAM_MAX_STORES] = {
      "extra output 0", "extra output 1", "extra output 2", "extra output 3"};
  const char *names[TPU_EW_MAX_OPERANDS] = {"out"}; /* iteration operands: out, ins, extra */
  const tpu_buf_t *ops[TPU_EW_MAX_OPERANDS - 1];
  for (int k = 0; k < p->num_inputs; k++) {
    ops[k] = ins[k];
    names[1 + k] = kInputs[k];
  }
  for (int j = 0; j < p->num_stores; j++) {
    names[1 + p->num_inputs + j] = kExtra[j];
    if (!extra) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": %d stores but no extra outputs",
                            p->num_stores);
    }
    TPU_RETURN_IF_ERROR(check_extra(out, extra[j], j));
    ops[p->num_inputs + j] = extra[j];
  }
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, KERNEL, out, ops, names,
                                       p->num_inputs + p->num_stores, false));
  /* the final instruction may write out directly when it produces the result: nothing
   * reads registers after it, so an out that is also an input is still read first */
  int last = p->num_instrs - 1;
  program_ctx c = {.v = tpu_vec_ops(), .p = p, .out_dt = out->dtype,
                   .last = last >= 0 && p->instrs[last].dst == p->result ? last : -1};
  c.jit = c.v->isa == TPU_ISA_AVX512 ? p->jit : NULL;
  for (int j = 0; j < p->num_stores; j++) c.store_dt[j] = extra[j]->dtype;
  for (int j = 0; j < p->num_instrs; j++) {
    c.kind[j] = kind_of(p->instrs[j].op);
    c.unary[j] = tpu_op_family(p->instrs[j].op) == TPU_FAMILY_UNARY;
  }
  for (int k = 0; k <= p->num_inputs; k++) {
    tpu_dtype_t dt = k ? ins[k - 1]->dtype : out->dtype;
    if (!float32ish(dt) && !(k && dt == TPU_BOOL)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": %s is %s (f32, bf16 or f16; inputs also bool)",
                            names[k], tpu_dtype_name(dt));
    }
    if (k) c.in_dt[k - 1] = dt;
  }
  c.stream = tpu_ew_stream_out(it.numel, out->dtype);
  tpu_ew_iter_run2(&it, pool, program_seg, &c);
  return TPU_OK;
}
