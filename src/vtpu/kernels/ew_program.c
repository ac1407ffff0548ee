/* ew_program.c: tpu_kernel_ew_program, fused float elementwise chains (ew_program.h).
 *
 * Per segment of the iteration, per block of PROGRAM_BLOCK elements: load the inputs as f32
 * (contiguous f32 in place, everything else converted into the block), run each instruction
 * through the same compute functions as the unfused kernels, store the result register
 * (the last instruction writes a contiguous f32 output directly).
 * A register that only ever depends on broadcast values holds one value (step 0).
 */
#include "vtpu/kernels/ew_program.h"

#include <math.h>

#include "vtpu/kernels/ew.h"

#define KERNEL "kernel_ew_program"
#define PROGRAM_BLOCK TPU_EW_BLOCK /* registers of 2 KiB: the few a chain uses stay in L1 */

typedef struct program_ctx {
  const tpu_vec_ops_t *v;
  const tpu_ew_program_t *p;
  tpu_dtype_t in_dt[TPU_EW_PROGRAM_MAX_INPUTS], out_dt;
  int last; /* the final instruction, if it writes the result (else -1) */
  bool stream; /* the final instruction writes out with non-temporal stores */
} program_ctx;

/* The instructions the vector compute functions do not cover (see ew_program.h). */
static bool special_op(tpu_op_t op) {
  return op == TPU_OP_CONVERT || op == TPU_OP_COMPARE || op == TPU_OP_SELECT ||
         op == TPU_OP_IS_FINITE;
}

static void special_compute(const tpu_ew_instr_t *in, const float *const *val,
                            const int64_t *step, float *dst, int64_t m) {
  const float *a = val[in->a];
  const int64_t sa = step[in->a];
  switch (in->op) {
    case TPU_OP_CONVERT:
      if (in->aux == TPU_BF16) {
        for (int64_t i = 0; i < m; i++) dst[i] = tpu_bf16_to_f32(tpu_f32_to_bf16(a[i * sa]));
      } else {
        for (int64_t i = 0; i < m; i++) dst[i] = tpu_f16_to_f32(tpu_f32_to_f16(a[i * sa]));
      }
      return;
    case TPU_OP_IS_FINITE:
      for (int64_t i = 0; i < m; i++) dst[i] = isfinite(a[i * sa]) ? 1.0f : 0.0f;
      return;
    case TPU_OP_COMPARE: {
      const float *b = val[in->b];
      const int64_t sb = step[in->b];
      for (int64_t i = 0; i < m; i++) {
        dst[i] = tpu_ew_compare_float((tpu_compare_dir_t)in->aux, a[i * sa], b[i * sb]) ? 1.0f
                                                                                       : 0.0f;
      }
      return;
    }
    default: { /* SELECT */
      const float *t = val[in->b], *f = val[in->c];
      const int64_t st = step[in->b], sf = step[in->c];
      for (int64_t i = 0; i < m; i++) dst[i] = a[i * sa] != 0.0f ? t[i * st] : f[i * sf];
      return;
    }
  }
}

static void program_loop(void *arg, char *const *ptrs, const int64_t *strides, int64_t n,
                         int64_t pos) {
  (void)pos;
  const program_ctx *c = arg;
  const tpu_ew_program_t *p = c->p;
  const bool out_direct = c->out_dt == TPU_F32 && strides[0] == 4;
  float regs[TPU_EW_PROGRAM_MAX_REGS][PROGRAM_BLOCK];
  tpu_ew_block_t loaded[TPU_EW_PROGRAM_MAX_INPUTS];
  const float *val[TPU_EW_PROGRAM_MAX_REGS]; /* where each register's values are */
  int64_t step[TPU_EW_PROGRAM_MAX_REGS];
  for (int k = 0; k < p->num_consts; k++) {
    int r = p->num_inputs + k;
    val[r] = &p->consts[k];
    step[r] = 0;
  }
  /* streaming: a short first block brings the output to a 64-byte boundary, so no cache
   * line is written partly with streaming and partly with regular stores */
  int64_t first = PROGRAM_BLOCK;
  if (c->stream && out_direct && (uintptr_t)ptrs[0] % 64) {
    first = (int64_t)((64 - (uintptr_t)ptrs[0] % 64) % 64) / 4;
  }
  for (int64_t i = 0, m; i < n; i += m) {
    m = i ? PROGRAM_BLOCK : first;
    if (m == 0) m = PROGRAM_BLOCK;
    if (m > n - i) m = n - i;
    for (int k = 0; k < p->num_inputs; k++) {
      int64_t s = strides[k + 1];
      const char *src = ptrs[k + 1] + i * s;
      if (c->in_dt[k] == TPU_BOOL) { /* predicates: 0.0 / 1.0 */
        int64_t cnt = s ? m : 1;
        for (int64_t j = 0; j < cnt; j++) loaded[k].f[j] = src[j * s] ? 1.0f : 0.0f;
        val[k] = loaded[k].f;
        step[k] = s ? 1 : 0;
        continue;
      }
      val[k] = tpu_ew_load(c->v, TPU_CT_F32, src, s, c->in_dt[k], m, &loaded[k], &step[k]);
    }
    for (int j = 0; j < p->num_instrs; j++) {
      const tpu_ew_instr_t *in = &p->instrs[j];
      float *dst = regs[in->dst];
      /* an operand in the destination register that holds one broadcast value while the
       * result is a vector would be overwritten before it is read again: read it from a
       * copy (dst == a with a vector a is fine: element i is read before it is written) */
      float held[3];
      if (tpu_op_family(in->op) != TPU_FAMILY_UNARY) {
        int ops[3] = {in->a, in->b, in->op == TPU_OP_SELECT ? in->c : in->b};
        for (int k = 0; k < 3; k++) {
          if (ops[k] == in->dst && step[ops[k]] == 0 && val[ops[k]] == dst) {
            held[k] = dst[0];
            val[ops[k]] = &held[k];
          }
        }
      }
      if (special_op(in->op)) {
        int64_t st = step[in->a];
        if (in->op == TPU_OP_COMPARE || in->op == TPU_OP_SELECT) st |= step[in->b];
        if (in->op == TPU_OP_SELECT) st |= step[in->c];
        if (j == c->last && out_direct && st) dst = (float *)(void *)(ptrs[0] + i * 4);
        special_compute(in, val, step, dst, st ? m : 1);
        step[in->dst] = st;
        val[in->dst] = dst;
        continue;
      }
      bool unary = tpu_op_family(in->op) == TPU_FAMILY_UNARY;
      bool vector = unary ? step[in->a] : (step[in->a] | step[in->b]);
      if (j == c->last && out_direct && vector) {
        dst = (float *)(void *)(ptrs[0] + i * 4);
        if (c->stream && unary && tpu_vec_unary_has(in->op) && step[in->a]) {
          c->v->unary_f32_stream(in->op, val[in->a], dst, m);
          step[in->dst] = 1;
          val[in->dst] = dst;
          continue;
        }
        if (c->stream && !unary && tpu_vec_binary_has(in->op)) {
          c->v->binary_f32_stream(in->op, val[in->a], step[in->a], val[in->b], step[in->b], dst, m);
          step[in->dst] = 1;
          val[in->dst] = dst;
          continue;
        }
      }
      if (unary) {
        step[in->dst] = step[in->a];
        tpu_ew_unary_compute(c->v, in->op, TPU_CT_F32, TPU_F32, val[in->a], dst,
                             step[in->a] ? m : 1);
      } else {
        step[in->dst] = step[in->a] | step[in->b];
        tpu_ew_binary_compute(c->v, in->op, TPU_CT_F32, TPU_F32, val[in->a], step[in->a],
                              val[in->b], step[in->b], dst, step[in->dst] ? m : 1);
      }
      val[in->dst] = dst;
    }
    tpu_ew_store(c->v, TPU_CT_F32, val[p->result], step[p->result], ptrs[0] + i * strides[0],
                 strides[0], c->out_dt, m);
  }
  if (c->stream && out_direct) c->v->stream_fence();
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
  return TPU_OK;
}

tpu_status_t tpu_kernel_ew_program(const tpu_ew_program_t *p, const tpu_buf_t *const *ins,
                                   const tpu_buf_t *out, tpu_pool_t *pool) {
  TPU_RETURN_IF_ERROR(tpu_ew_program_check(p));
  static const char *const names[TPU_EW_PROGRAM_MAX_INPUTS + 1] = {
      "out", "input 0", "input 1", "input 2", "input 3", "input 4", "input 5", "input 6",
      "input 7"};
  tpu_ew_iter_t it;
  TPU_RETURN_IF_ERROR(tpu_ew_iter_init(&it, KERNEL, out, ins, names, p->num_inputs, false));
  /* the final instruction may write out directly when it produces the result: nothing
   * reads registers after it, so an out that is also an input is still read first */
  int last = p->num_instrs - 1;
  program_ctx c = {tpu_vec_ops(), p, {TPU_F32}, out->dtype,
                   last >= 0 && p->instrs[last].dst == p->result ? last : -1, false};
  for (int k = 0; k <= p->num_inputs; k++) {
    tpu_dtype_t dt = k ? ins[k - 1]->dtype : out->dtype;
    if (!float32ish(dt) && !(k && dt == TPU_BOOL)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, KERNEL ": %s is %s (f32, bf16 or f16; inputs also bool)",
                            names[k], tpu_dtype_name(dt));
    }
    if (k) c.in_dt[k - 1] = dt;
  }
  c.stream = tpu_ew_stream_out(it.numel, out->dtype);
  tpu_ew_iter_run(&it, pool, program_loop, &c);
  return TPU_OK;
}
