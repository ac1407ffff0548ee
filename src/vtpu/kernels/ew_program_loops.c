/* ew_program_loops.c: the loops of the fused-program kernel (ew_program.c) that vec.h does
 * not have, written for the compiler to vectorize:
 * - the instructions CONVERT, IS_FINITE, COMPARE and SELECT (ew_program.h), branch free; a
 *   broadcast operand (step 0) is spread over a block first, so each loop walks unit-stride
 *   arrays; every element's result is the scalar definition's;
 * - packing short rows into a block: one value repeated over a row, a row copied or
 *   converted to f32. */
#pragma GCC optimize("O3")

/* Each loop function is also compiled for AVX2 and AVX-512 and picked for the CPU at load
 * time; every one of these loops gives the same bits on any of them. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LOOPS __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LOOPS
#endif

#include "vtpu/kernels/ew_program.h"

#include <math.h>

#include "vtpu/kernels/ew.h"

/* |x| with step |s| as an array of m values: itself, or |tmp| filled with its one value. */
static const float *spread(const float *x, int64_t s, float *tmp, int64_t m) {
  if (s || m == 1) return x;
  const float v = x[0];
  for (int64_t i = 0; i < m; i++) tmp[i] = v;
  return tmp;
}

#define CMP_LOOP(expr)                \
  for (int64_t i = 0; i < m; i++) {   \
    const float x = a[i], y = b[i];   \
    dst[i] = (expr) ? 1.0f : 0.0f;    \
  }

/* m <= TPU_EW_BLOCK values of instruction |in| into dst */
LOOPS static void special_block(const tpu_ew_instr_t *in, const float *const *opd,
                          const int64_t *step, float *dst, int64_t m) {
  float tmp[3][TPU_EW_BLOCK];
  const float *a = spread(opd[0], step[0], tmp[0], m);
  switch (in->op) {
    case TPU_OP_CONVERT:
      if (in->aux == TPU_BF16) {
        for (int64_t i = 0; i < m; i++) dst[i] = tpu_bf16_to_f32(tpu_f32_to_bf16(a[i]));
      } else {
        for (int64_t i = 0; i < m; i++) dst[i] = tpu_f16_to_f32(tpu_f32_to_f16(a[i]));
      }
      return;
    case TPU_OP_IS_FINITE:
      for (int64_t i = 0; i < m; i++) dst[i] = isfinite(a[i]) ? 1.0f : 0.0f;
      return;
    case TPU_OP_COMPARE: {
      const float *b = spread(opd[1], step[1], tmp[1], m);
      switch ((tpu_compare_dir_t)in->aux) {
        case TPU_CMP_EQ: CMP_LOOP(x == y) return;
        case TPU_CMP_NE: CMP_LOOP(x != y) return;
        case TPU_CMP_LT: CMP_LOOP(x < y) return;
        case TPU_CMP_LE: CMP_LOOP(x <= y) return;
        case TPU_CMP_GT: CMP_LOOP(x > y) return;
        default: CMP_LOOP(x >= y) return;
      }
    }
    default: { /* SELECT: both sides are read for every element, so the loop has no branch */
      const float *t = spread(opd[1], step[1], tmp[1], m);
      const float *f = spread(opd[2], step[2], tmp[2], m);
      for (int64_t i = 0; i < m; i++) {
        const float tv = t[i], fv = f[i];
        dst[i] = a[i] != 0.0f ? tv : fv;
      }
      return;
    }
  }
}
#undef CMP_LOOP

void tpu_ew_program_special(const tpu_ew_instr_t *in, const float *const *val,
                            const int64_t *step, float *dst, int64_t m) {
  const int regs[3] = {in->a, in->b, in->c};
  const int nops = in->op == TPU_OP_SELECT ? 3 : in->op == TPU_OP_COMPARE ? 2 : 1;
  for (int64_t i = 0, n; i < m; i += n) { /* one block at a time (the kernel's are one) */
    n = m - i < TPU_EW_BLOCK ? m - i : TPU_EW_BLOCK;
    const float *opd[3] = {NULL, NULL, NULL};
    int64_t st[3] = {0, 0, 0};
    for (int k = 0; k < nops; k++) {
      st[k] = step[regs[k]];
      opd[k] = val[regs[k]] + i * st[k];
    }
    special_block(in, opd, st, dst + i, n);
  }
}

LOOPS void tpu_ew_program_fill_rows(const char *src, int64_t outer, tpu_dtype_t dt, float *dst,
                              int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; r++) {
    const char *p = src + r * outer;
    const float x = dt == TPU_BOOL ? (*p ? 1.0f : 0.0f) : tpu_ew_load_f32(p, dt);
    float *d = dst + r * n;
    for (int64_t j = 0; j < n; j++) d[j] = x;
  }
}

LOOPS void tpu_ew_program_load_rows(const tpu_vec_ops_t *v, const char *src, int64_t outer,
                                    int64_t s, tpu_dtype_t dt, float *dst, int64_t rows,
                                    int64_t n) {
  if (dt == TPU_F32 && s == 4) { /* an inline copy per row: a call per row cost more */
    for (int64_t r = 0; r < rows; r++) {
      const float *x = (const float *)(const void *)(src + r * outer);
      float *d = dst + r * n;
      for (int64_t j = 0; j < n; j++) d[j] = x[j];
    }
    return;
  }
  for (int64_t r = 0; r < rows; r++) tpu_ew_program_load_row(v, src + r * outer, s, dt, dst + r * n, n);
}

LOOPS void tpu_ew_program_load_row(const tpu_vec_ops_t *v, const char *src, int64_t s,
                             tpu_dtype_t dt, float *dst, int64_t n) {
  if (dt == TPU_F32 && s == 4) {
    memcpy(dst, src, (size_t)n * 4);
  } else if (dt == TPU_BF16 && s == 2) {
    v->bf16_to_f32((const uint16_t *)(const void *)src, dst, n);
  } else if (dt == TPU_BOOL && s == 1) { /* a vector at a time: the bits of 1.0f or 0.0f */
    const uint32_t one = 0x3f800000u, zero = 0;
    const tpu_vec_2d_t row = {.n = n, .rows = 1};
    v->select_u32((const uint8_t *)src, 1, &one, 0, &zero, 0, (uint32_t *)(void *)dst, &row);
  } else if (dt == TPU_BOOL) {
    for (int64_t j = 0; j < n; j++) dst[j] = src[j * s] ? 1.0f : 0.0f;
  } else {
    for (int64_t j = 0; j < n; j++) dst[j] = tpu_ew_load_f32(src + j * s, dt);
  }
}
