/* vec_impl.h: the SIMD loops of vec.h, written once over a small vector abstraction and
 * included by vec_avx512.c, vec_avx2.c and vec_portable.c (internal; not a normal header).
 *
 * The includer defines, for its ISA:
 *   VEC_W                      lanes per vector
 *   vf, vi, vm                 f32 vector, 32-bit int vector, lane mask
 *   vf_set load store add sub mul div min max sqrt or   (min/max as x86 minps: the second
 *                              operand when either is NaN)
 *   vf_fma(a, b, c) = a*b + c, vf_fnma(a, b, c) = c - a*b
 *   vf_lt le gt ge eq (ordered: false on NaN), vf_ne (true on NaN), unord -> vm;
 *                              vf_sel(m, a, b), vi_sel(m, a, b) = m ? a : b
 *   vm_store_u8(p, m)          VEC_W bytes 0/1; vm_load_u8(p): lanes whose byte is non-zero
 *   vf_load_n / vf_store_n, vi_load_u16_n / vi_store_u16_n: the first m (0 < m < VEC_W)
 *                              lanes (masked: nothing past them is read or written)
 *   vi_set add sub and or xor sll srl sra (by a constant), vf_as_vi, vi_as_vf (bits),
 *   vi_to_vf (value), vi_load_u16 / vi_store_u16 (zero-extend / truncate),
 *   vi_load_u32 / vi_store_u32, vi_mulhilo(a, m, &hi, &lo) (unsigned 32x32 -> 64)
 *   vf_trunc_vi(a)             f32 -> int32 toward zero (NaN / out of range: INT32_MIN)
 *   vf_lut16(t, i)             t[i & 15] per lane, t 16 floats
 *   optionally VEC_HAS_SCALEF and vf_scalef(y, n) = y 2^n rounded once (AVX-512 vscalefps)
 *   VEC_CAN_STREAM, vf_stream / vi_stream_u16 (non-temporal stores of one vector, aligned
 *                              to its size), vec_sfence
 *   VEC_TABLE                  the name of the table getter to define
 *   optionally VEC_TRANSPOSE_U32, the table's transpose_u32 (else a scalar loop)
 *
 * The math (all f32, FMA where the ISA has it):
 *   exp       Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2 (ln2 split 0.693359375 +
 *             -2.12194440e-4 so n*hi is exact), e^r = 1 + r + r^2 P4(r), scaled by 2^n
 *             rounding once (vscalefps, or two exact-then-rounding steps 2^(n>>1)
 *             2^(n-(n>>1))), so overflow and subnormal results come out right.
 *   log       x = 2^e m, m in [sqrt(1/2), sqrt(2)); log = e ln2 + f - f^2/2 + f^3 P7(f), f = m-1;
 *             subnormal inputs are scaled by 2^23 first.
 *   tanh      |x| < 1: x + x^3 P7(x^2); else 1 - 2t/(1+t) with t = e^(-2|x|); sign restored.
 *   logistic  t = e^(-|x|): 1/(1+t) for x >= 0, t/(1+t) below.
 *   erf       piecewise on 16 intervals of width 1/4 (k = floor(4|x|)): |x| < 1/4:
 *             x + x Q4(x^2); else A_k + u P4_k(u), u = 4|x| - k - 1/2, per-lane table
 *             lookups of the coefficients (vf_lut16); |x| clamped to 4 - 1/128 (erf = 1
 *             in f32 from 3.92); sign restored.
 * Coefficients: weighted least-squares fits toward minimax (relative error of the
 * approximated function below 1e-8 before f32 rounding), each coefficient rounded to f32
 * and the rest refitted. NaN inputs give NaN through the arithmetic itself (clamps put the
 * constant first, so minps/maxps pass the NaN on); log alone fixes up its special inputs.
 */
#include <string.h>

#include "vtpu/kernels/vec_consts.h"

/* ---- helpers ------------------------------------------------------------------------- */

static inline vf v_abs(vf x) { return vi_as_vf(vi_and(vf_as_vi(x), vi_set(0x7fffffff))); }
static inline vf v_sign_of(vf x) { return vi_as_vf(vi_and(vf_as_vi(x), vi_set((int32_t)0x80000000u))); }
static inline vf v_neg(vf x) { return vi_as_vf(vi_xor(vf_as_vi(x), vi_set((int32_t)0x80000000u))); }
static inline vf v_nan_through(vf x, vf y) { return vf_sel(vf_unord(x, x), vf_add(x, x), y); }

/* ---- exp ------------------------------------------------------------------------------- */

/* e^x for x in [-104, 89] or NaN (the callers clamp). */
static inline vf v_exp_core(vf xc) {
  const vf magic = vf_set(TPU_EXP_MAGIC);
  vf t = vf_fma(xc, vf_set(TPU_EXP_LOG2E), magic);
  vi n = vi_sub(vf_as_vi(t), vf_as_vi(magic));
  vf nf = vf_sub(t, magic);
  vf r = vf_fnma(nf, vf_set(TPU_EXP_LN2_HI), xc);
  r = vf_fnma(nf, vf_set(TPU_EXP_LN2_LO), r);
  vf p = vf_set(TPU_EXP_P0);
  p = vf_fma(p, r, vf_set(TPU_EXP_P1));
  p = vf_fma(p, r, vf_set(TPU_EXP_P2));
  p = vf_fma(p, r, vf_set(TPU_EXP_P3));
  p = vf_fma(p, r, vf_set(TPU_EXP_P4));
  vf y = vf_add(vf_fma(p, vf_mul(r, r), r), vf_set(1.0f));
#ifdef VEC_HAS_SCALEF
  (void)n;
  return vf_scalef(y, nf); /* y 2^n, rounded once: the same as below */
#else
  vi n1 = vi_sra(n, 1);
  vi n2 = vi_sub(n, n1);
  vf s1 = vi_as_vf(vi_sll(vi_add(n1, vi_set(127)), 23));
  vf s2 = vi_as_vf(vi_sll(vi_add(n2, vi_set(127)), 23));
  return vf_mul(vf_mul(y, s1), s2);
#endif
}

static inline vf v_exp(vf x) {
  /* constants first: minps/maxps return the second operand for NaN, so NaN flows through;
   * below -104 the result rounds to 0, above 89 to inf */
  return v_exp_core(vf_min(vf_set(TPU_EXP_HI), vf_max(vf_set(TPU_EXP_LO), x)));
}

/* ---- log ------------------------------------------------------------------------------- */

static inline vf v_log(vf x) {
  vm sub = vf_lt(x, vf_set(1.17549435e-38f)); /* subnormal, zero or negative */
  vf xs = vf_sel(sub, vf_mul(x, vf_set(8388608.0f)), x);
  vi bias = vi_sel(sub, vi_set(23), vi_set(0));
  vi u = vi_sub(vf_as_vi(xs), vi_set(0x3f3504f3)); /* bits of sqrt(1/2) */
  vi e = vi_sub(vi_sra(u, 23), bias);
  vf m = vi_as_vf(vi_add(vi_and(u, vi_set(0x007fffff)), vi_set(0x3f3504f3)));
  vf f = vf_sub(m, vf_set(1.0f));
  vf ef = vi_to_vf(e);
  vf z = vf_mul(f, f);
  vf p = vf_set(-7.636900246e-02f);
  p = vf_fma(p, f, vf_set(1.276246756e-01f));
  p = vf_fma(p, f, vf_set(-1.315955371e-01f));
  p = vf_fma(p, f, vf_set(1.420154124e-01f));
  p = vf_fma(p, f, vf_set(-1.662341058e-01f));
  p = vf_fma(p, f, vf_set(2.000124305e-01f));
  p = vf_fma(p, f, vf_set(-2.500081956e-01f));
  p = vf_fma(p, f, vf_set(3.333333135e-01f));
  vf y = vf_mul(vf_mul(f, z), p);
  y = vf_fma(ef, vf_set(-2.12194440e-4f), y);
  y = vf_fnma(vf_set(0.5f), z, y);
  vf r = vf_add(f, y);
  r = vf_fma(ef, vf_set(0.693359375f), r);
  const vf inf = vf_set(__builtin_inff());
  r = vf_sel(vf_eq(x, vf_set(0.0f)), v_neg(inf), r);
  r = vf_sel(vf_lt(x, vf_set(0.0f)), vf_set(__builtin_nanf("")), r);
  r = vf_sel(vf_eq(x, inf), inf, r);
  return v_nan_through(x, r);
}

/* ---- tanh, logistic, erf --------------------------------------------------------------- */

static inline vf v_tanh(vf x) {
  vf ax = v_abs(x);
  vf x2 = vf_mul(ax, ax);
  vf p = vf_set(1.162086410e-04f);
  p = vf_fma(p, x2, vf_set(-8.212039829e-04f));
  p = vf_fma(p, x2, vf_set(3.048123559e-03f));
  p = vf_fma(p, x2, vf_set(-8.571074344e-03f));
  p = vf_fma(p, x2, vf_set(2.177435532e-02f));
  p = vf_fma(p, x2, vf_set(-5.395071581e-02f));
  p = vf_fma(p, x2, vf_set(1.333317459e-01f));
  p = vf_fma(p, x2, vf_set(-3.333332837e-01f));
  vf small = vf_fma(vf_mul(ax, x2), p, ax);
  vf t = v_exp(vf_mul(ax, vf_set(-2.0f)));
  vf large = vf_fnma(vf_set(2.0f), vf_div(t, vf_add(t, vf_set(1.0f))), vf_set(1.0f));
  vf y = vf_sel(vf_lt(ax, vf_set(1.0f)), small, large); /* NaN: both are NaN */
  return vf_or(y, v_sign_of(x));
}

static inline vf v_logistic(vf x) {
  vf t = v_exp(v_neg(v_abs(x)));
  vf num = vf_sel(vf_lt(x, vf_set(0.0f)), t, vf_set(1.0f));
  return vf_div(num, vf_add(t, vf_set(1.0f))); /* NaN: t is NaN */
}


/* erf (vec_consts.h has the method and its table) */
static inline vf v_erf(vf x) {
  vf ax = vf_min(vf_set(TPU_ERF_CLAMP), v_abs(x)); /* NaN stays NaN */
  vf s = vf_mul(ax, vf_set(4.0f));
  vi k = vf_trunc_vi(s); /* NaN: an index whose lookups are harmless, u is NaN anyway */
  vf u = vf_sub(s, vf_add(vi_to_vf(k), vf_set(0.5f)));
  vm first = vf_lt(ax, vf_set(0.25f));
  vf v = vf_sel(first, vf_mul(ax, ax), u);
  vf p = vf_lut16(tpu_erf_table[5], k);
  p = vf_fma(p, v, vf_lut16(tpu_erf_table[4], k));
  p = vf_fma(p, v, vf_lut16(tpu_erf_table[3], k));
  p = vf_fma(p, v, vf_lut16(tpu_erf_table[2], k));
  p = vf_fma(p, v, vf_lut16(tpu_erf_table[1], k));
  vf y = vf_fma(vf_sel(first, ax, u), p, vf_sel(first, ax, vf_lut16(tpu_erf_table[0], k)));
  return vf_or(y, v_sign_of(x));
}

static inline vf v_sqrt(vf x) { return vf_sqrt(x); }
static inline vf v_rsqrt(vf x) { return vf_div(vf_set(1.0f), vf_sqrt(x)); }

/* ---- binary ------------------------------------------------------------------------------ */

static inline vf v_add(vf a, vf b) { return vf_add(a, b); }
static inline vf v_sub(vf a, vf b) { return vf_sub(a, b); }
static inline vf v_mul(vf a, vf b) { return vf_mul(a, b); }
static inline vf v_div(vf a, vf b) { return vf_div(a, b); }
/* NaN if either is NaN; equal operands (+0 and -0 compare equal) combine bitwise, so
 * max(-0, +0) = +0 (and) and min(-0, +0) = -0 (or). */
static inline vf v_max(vf a, vf b) {
  vf m = vf_sel(vf_eq(a, b), vi_as_vf(vi_and(vf_as_vi(a), vf_as_vi(b))), vf_max(a, b));
  return vf_sel(vf_unord(a, b), vf_add(a, b), m);
}
static inline vf v_min(vf a, vf b) {
  vf m = vf_sel(vf_eq(a, b), vi_as_vf(vi_or(vf_as_vi(a), vf_as_vi(b))), vf_min(a, b));
  return vf_sel(vf_unord(a, b), vf_add(a, b), m);
}

/* ---- bf16 conversions (round to nearest even; NaN stays a quiet NaN, as dtype.h) ---- */

static inline vf v_from_bf16(vi h) { return vi_as_vf(vi_sll(h, 16)); }

static inline vi v_to_bf16(vf x) {
  vi u = vf_as_vi(x);
  vi r = vi_add(u, vi_add(vi_set(0x7fff), vi_and(vi_srl(u, 16), vi_set(1))));
  r = vi_sel(vf_unord(x, x), vi_or(u, vi_set(0x00400000)), r);
  return vi_srl(r, 16);
}

static inline void bf16_to_f32_body(const uint16_t *x, float *y, int64_t n, bool stream) {
  int64_t i = 0;
  for (; i + VEC_W <= n; i += VEC_W) {
    vf v = v_from_bf16(vi_load_u16(x + i));
    if (stream) vf_stream(y + i, v);
    else vf_store(y + i, v);
  }
  for (; i < n; i++) y[i] = tpu_bf16_to_f32(x[i]);
}

static inline void f32_to_bf16_body(const float *x, uint16_t *y, int64_t n, bool stream) {
  int64_t i = 0;
  for (; i + VEC_W <= n; i += VEC_W) {
    vi v = v_to_bf16(vf_load(x + i));
    if (stream) vi_stream_u16(y + i, v);
    else vi_store_u16(y + i, v);
  }
  for (; i < n; i++) y[i] = tpu_f32_to_bf16(x[i]);
}

/* ---- array loops ------------------------------------------------------------------------ */

/* Element access per storage type: load a vector, store one (regular or streaming, i.e.
 * non-temporal: aligned, bypassing the caches), broadcast one element. */
#define VEC_LD_f32(p) vf_load(p)
#define VEC_ST_f32(p, v) vf_store((p), (v))
#define VEC_NT_f32(p, v) vf_stream((p), (v))
#define VEC_SET_f32(p) vf_set(*(p))
#define VEC_LD_bf16(p) v_from_bf16(vi_load_u16(p))
#define VEC_ST_bf16(p, v) vi_store_u16((p), v_to_bf16(v))
#define VEC_NT_bf16(p, v) vi_stream_u16((p), v_to_bf16(v))
#define VEC_SET_bf16(p) vf_set(tpu_bf16_to_f32(*(p)))
/* the first m (0 < m < VEC_W) elements: other lanes load as 0 and are not stored */
#define VEC_LDN_f32(p, m) vf_load_n((p), (m))
#define VEC_STN_f32(p, v, m) vf_store_n((p), (v), (m))
#define VEC_LDN_bf16(p, m) v_from_bf16(vi_load_u16_n((p), (m)))
#define VEC_STN_bf16(p, v, m) vi_store_u16_n((p), v_to_bf16(v), (m))
#define VEC_OUT(S, p, v)          \
  do {                            \
    vf out_v_ = (v);              \
    if (stream) VEC_NT_##S(p, out_v_); \
    else VEC_ST_##S(p, out_v_);   \
  } while (0)

/* y[i] = F(x[i]): full vectors, then the tail through partial (masked) loads and stores. */
#define VEC_MAP1(T, S, F)                                                 \
  do {                                                                    \
    int64_t i = 0;                                                        \
    for (; i + VEC_W <= n; i += VEC_W) VEC_OUT(S, y + i, F(VEC_LD_##S(x + i))); \
    if (i < n) VEC_STN_##S(y + i, F(VEC_LDN_##S(x + i, n - i)), n - i);   \
  } while (0)

#define VEC_UNARY_SWITCH(T, S)                                            \
  switch (op) {                                                           \
    case TPU_OP_EXP: VEC_MAP1(T, S, v_exp); break;                        \
    case TPU_OP_LOG: VEC_MAP1(T, S, v_log); break;                        \
    case TPU_OP_TANH: VEC_MAP1(T, S, v_tanh); break;                      \
    case TPU_OP_LOGISTIC: VEC_MAP1(T, S, v_logistic); break;              \
    case TPU_OP_ERF: VEC_MAP1(T, S, v_erf); break;                        \
    case TPU_OP_SQRT: VEC_MAP1(T, S, v_sqrt); break;                      \
    case TPU_OP_RSQRT: VEC_MAP1(T, S, v_rsqrt); break;                    \
    case TPU_OP_NEG: VEC_MAP1(T, S, v_neg); break;                        \
    case TPU_OP_ABS: VEC_MAP1(T, S, v_abs); break;                        \
    default: break; /* not a vec op: the caller checked tpu_vec_unary_has */ \
  }

static inline void unary_f32_body(tpu_op_t op, const float *x, float *y, int64_t n,
                                  bool stream) {
  VEC_UNARY_SWITCH(float, f32)
}

static inline void unary_bf16_body(tpu_op_t op, const uint16_t *x, uint16_t *y, int64_t n,
                                   bool stream) {
  VEC_UNARY_SWITCH(uint16_t, bf16)
}

/* out[i] = F(A(i), B(i)) with A, B loading a vector at i or repeating one value; two
 * vectors per step, then one, then the tail through partial (masked) loads and stores. */
#define VEC_LOOP2(T, S, F, A, B)                                          \
  do {                                                                    \
    vf av = VEC_SET_##S(a), bv = VEC_SET_##S(b);                          \
    (void)av;                                                             \
    (void)bv;                                                             \
    int64_t i = 0;                                                        \
    for (; i + 2 * VEC_W <= n; i += 2 * VEC_W) {                          \
      vf r0 = F(A(T, S, a, i), B(T, S, b, i));                            \
      vf r1 = F(A(T, S, a, i + VEC_W), B(T, S, b, i + VEC_W));            \
      VEC_OUT(S, out + i, r0);                                            \
      VEC_OUT(S, out + i + VEC_W, r1);                                    \
    }                                                                     \
    if (i + VEC_W <= n) {                                                 \
      VEC_OUT(S, out + i, F(A(T, S, a, i), B(T, S, b, i)));               \
      i += VEC_W;                                                         \
    }                                                                     \
    if (i < n) {                                                          \
      int64_t m = n - i;                                                  \
      VEC_STN_##S(out + i, F(sa ? VEC_LDN_##S(a + i, m) : av,             \
                             sb ? VEC_LDN_##S(b + i, m) : bv), m);        \
    }                                                                     \
  } while (0)

#define VEC_ARG_VEC(T, S, p, i) VEC_LD_##S(p + (i))
#define VEC_ARG_ONE_a(T, S, p, i) av
#define VEC_ARG_ONE_b(T, S, p, i) bv

/* The rows of |g|, the layout of a and b (vector or repeated value) chosen once. */
#define VEC_MAP2(T, S, F)                                                 \
  do {                                                                    \
    if (sa && sb) VEC_ROWS(g, VEC_LOOP2(T, S, F, VEC_ARG_VEC, VEC_ARG_VEC));           \
    else if (sa) VEC_ROWS(g, VEC_LOOP2(T, S, F, VEC_ARG_VEC, VEC_ARG_ONE_b));          \
    else if (sb) VEC_ROWS(g, VEC_LOOP2(T, S, F, VEC_ARG_ONE_a, VEC_ARG_VEC));          \
    else VEC_ROWS(g, VEC_LOOP2(T, S, F, VEC_ARG_ONE_a, VEC_ARG_ONE_b));                \
  } while (0)

/* Runs BODY once per row of |g| with out, a, b (and pred, t, f) at that row: the
 * dispatch around the row loop happens once per 2-d segment. */
#define VEC_ROWS(g, BODY)                                                 \
  do {                                                                    \
    for (int64_t r_ = 0; r_ < (g)->rows; r_++) {                          \
      if (r_) { /* no pointer moves past the last row */                  \
        out += (g)->ld[0];                                                \
        a += (g)->ld[1];                                                  \
        b += (g)->ld[2];                                                  \
      }                                                                   \
      BODY;                                                               \
    }                                                                     \
  } while (0)

#define VEC_BINARY_SWITCH(T, S)                                           \
  if (n <= 0) return;                                                     \
  switch (op) {                                                           \
    case TPU_OP_ADD: VEC_MAP2(T, S, v_add); break;                        \
    case TPU_OP_SUB: VEC_MAP2(T, S, v_sub); break;                        \
    case TPU_OP_MUL: VEC_MAP2(T, S, v_mul); break;                        \
    case TPU_OP_DIV: VEC_MAP2(T, S, v_div); break;                        \
    case TPU_OP_MAX: VEC_MAP2(T, S, v_max); break;                        \
    case TPU_OP_MIN: VEC_MAP2(T, S, v_min); break;                        \
    default: break;                                                       \
  }

static inline void binary_f32_rows(tpu_op_t op, const float *a, int64_t sa, const float *b,
                                   int64_t sb, float *out, const tpu_vec_2d_t *g,
                                   bool stream) {
  const int64_t n = g->n;
  VEC_BINARY_SWITCH(float, f32)
}

static inline void binary_bf16_rows(tpu_op_t op, const uint16_t *a, int64_t sa,
                                    const uint16_t *b, int64_t sb, uint16_t *out,
                                    const tpu_vec_2d_t *g, bool stream) {
  const int64_t n = g->n;
  VEC_BINARY_SWITCH(uint16_t, bf16)
}

static inline void binary_f32_body(tpu_op_t op, const float *a, int64_t sa, const float *b,
                                   int64_t sb, float *out, int64_t n, bool stream) {
  tpu_vec_2d_t g = {n, 1, {0, 0, 0, 0}};
  binary_f32_rows(op, a, sa, b, sb, out, &g, stream);
}

static inline void binary_bf16_body(tpu_op_t op, const uint16_t *a, int64_t sa,
                                    const uint16_t *b, int64_t sb, uint16_t *out, int64_t n,
                                    bool stream) {
  tpu_vec_2d_t g = {n, 1, {0, 0, 0, 0}};
  binary_bf16_rows(op, a, sa, b, sb, out, &g, stream);
}

static void binary_f32_2d(tpu_op_t op, const float *a, int64_t sa, const float *b, int64_t sb,
                          float *out, const tpu_vec_2d_t *g) {
  binary_f32_rows(op, a, sa, b, sb, out, g, false);
}

static void binary_bf16_2d(tpu_op_t op, const uint16_t *a, int64_t sa, const uint16_t *b,
                           int64_t sb, uint16_t *out, const tpu_vec_2d_t *g) {
  binary_bf16_rows(op, a, sa, b, sb, out, g, false);
}

/* ---- compare and select ------------------------------------------------------------------ */

/* out[i] = a[i * sa] DIR b[i * sb] as 0/1 bytes; IEEE: NaN compares false except NE. */
#define VEC_CMP_LOOP(T, S, C, A, B)                                       \
  do {                                                                    \
    vf av = VEC_SET_##S(a), bv = VEC_SET_##S(b);                          \
    (void)av;                                                             \
    (void)bv;                                                             \
    int64_t i = 0;                                                        \
    for (; i + VEC_W <= n; i += VEC_W) vm_store_u8(out + i, C(A(T, S, a, i), B(T, S, b, i))); \
    if (i < n) {                                                          \
      int64_t m = n - i;                                                  \
      uint8_t t[VEC_W];                                                   \
      vm_store_u8(t, C(sa ? VEC_LDN_##S(a + i, m) : av, sb ? VEC_LDN_##S(b + i, m) : bv)); \
      for (int64_t j = 0; j < m; j++) out[i + j] = t[j];                  \
    }                                                                     \
  } while (0)

#define VEC_CMP_MAP(T, S, C)                                              \
  do {                                                                    \
    if (sa && sb) VEC_ROWS(g, VEC_CMP_LOOP(T, S, C, VEC_ARG_VEC, VEC_ARG_VEC));        \
    else if (sa) VEC_ROWS(g, VEC_CMP_LOOP(T, S, C, VEC_ARG_VEC, VEC_ARG_ONE_b));       \
    else if (sb) VEC_ROWS(g, VEC_CMP_LOOP(T, S, C, VEC_ARG_ONE_a, VEC_ARG_VEC));       \
    else VEC_ROWS(g, VEC_CMP_LOOP(T, S, C, VEC_ARG_ONE_a, VEC_ARG_ONE_b));             \
  } while (0)

#define VEC_COMPARE_SWITCH(T, S)                                          \
  const int64_t n = g->n;                                                 \
  if (n <= 0) return;                                                     \
  switch (dir) {                                                          \
    case TPU_CMP_EQ: VEC_CMP_MAP(T, S, vf_eq); break;                     \
    case TPU_CMP_NE: VEC_CMP_MAP(T, S, vf_ne); break;                     \
    case TPU_CMP_LT: VEC_CMP_MAP(T, S, vf_lt); break;                     \
    case TPU_CMP_LE: VEC_CMP_MAP(T, S, vf_le); break;                     \
    case TPU_CMP_GT: VEC_CMP_MAP(T, S, vf_gt); break;                     \
    default: VEC_CMP_MAP(T, S, vf_ge); break;                             \
  }

static void compare_f32(tpu_compare_dir_t dir, const float *a, int64_t sa, const float *b,
                        int64_t sb, uint8_t *out, const tpu_vec_2d_t *g) {
  VEC_COMPARE_SWITCH(float, f32)
}

static void compare_bf16(tpu_compare_dir_t dir, const uint16_t *a, int64_t sa,
                         const uint16_t *b, int64_t sb, uint8_t *out, const tpu_vec_2d_t *g) {
  VEC_COMPARE_SWITCH(uint16_t, bf16)
}

/* out[i] = pred[i * sp] ? t[i * st] : f[i * sf] on 32-bit elements (pred bytes: non-zero
 * is true). */
#define VEC_SEL_LOOP(T, F)                                                \
  do {                                                                    \
    int64_t i = 0;                                                        \
    for (; i + VEC_W <= n; i += VEC_W) vi_store_u32(out + i, vi_sel(sp ? vm_load_u8(pred + i) : pm, T(i), F(i))); \
    if (i < n) {                                                          \
      int64_t m = n - i;                                                  \
      uint8_t tp[VEC_W] = {0};                                            \
      uint32_t tt[VEC_W] = {0}, tf[VEC_W] = {0}, to[VEC_W];               \
      for (int64_t j = 0; j < m; j++) {                                   \
        tp[j] = pred[(i + j) * sp];                                       \
        tt[j] = t[(i + j) * st];                                          \
        tf[j] = f[(i + j) * sf];                                          \
      }                                                                   \
      vi_store_u32(to, vi_sel(vm_load_u8(tp), vi_load_u32(tt), vi_load_u32(tf))); \
      for (int64_t j = 0; j < m; j++) out[i + j] = to[j];                 \
    }                                                                     \
  } while (0)

#define VEC_SEL_T(i) vi_load_u32(t + (i))
#define VEC_SEL_F(i) vi_load_u32(f + (i))
#define VEC_SEL_T1(i) tv
#define VEC_SEL_F1(i) fv

static void select_u32(const uint8_t *pred, int64_t sp, const uint32_t *t, int64_t st,
                       const uint32_t *f, int64_t sf, uint32_t *out, const tpu_vec_2d_t *g) {
  const int64_t n = g->n;
  if (n <= 0) return;
  for (int64_t r = 0; r < g->rows; r++) {
    if (r) {
      out += g->ld[0];
      pred += g->ld[1];
      t += g->ld[2];
      f += g->ld[3];
    }
    vi tv = vi_set((int32_t)t[0]), fv = vi_set((int32_t)f[0]);
    uint8_t p0[VEC_W];
    memset(p0, pred[0], sizeof p0);
    vm pm = vm_load_u8(p0); /* the row's one pred when sp is 0 */
    (void)tv;
    (void)fv;
    (void)pm;
    if (st && sf) VEC_SEL_LOOP(VEC_SEL_T, VEC_SEL_F);
    else if (st) VEC_SEL_LOOP(VEC_SEL_T, VEC_SEL_F1);
    else if (sf) VEC_SEL_LOOP(VEC_SEL_T1, VEC_SEL_F);
    else VEC_SEL_LOOP(VEC_SEL_T1, VEC_SEL_F1);
  }
}

/* ---- table entries: regular, and streaming (output head up to a vector boundary with
 * regular stores, the rest non-temporal; the caller fences once when done) -------------- */

static inline int64_t vec_head(const void *y, size_t elem, int64_t n) {
  size_t bytes = VEC_W * elem, mis = (uintptr_t)y % bytes;
  int64_t h = mis ? (int64_t)((bytes - mis) / elem) : 0;
  return h < n ? h : n;
}

#define VEC_ENTRIES(NAME, ELEM, PARAMS, ARGS, ARGS_SHIFTED)                  \
  static void NAME PARAMS {                                                  \
    const bool stream = false;                                               \
    NAME##_body ARGS;                                                        \
  }                                                                          \
  static void NAME##_stream PARAMS {                                         \
    bool stream = false;                                                     \
    if (!VEC_CAN_STREAM || (uintptr_t)OUTPTR % ELEM) {                       \
      NAME##_body ARGS;                                                      \
      return;                                                                \
    }                                                                        \
    int64_t h = vec_head(OUTPTR, ELEM, n), nn = n;                           \
    n = h;                                                                   \
    NAME##_body ARGS;                                                        \
    stream = true;                                                           \
    n = nn - h;                                                              \
    NAME##_body ARGS_SHIFTED;                                                \
  }

#define OUTPTR y
VEC_ENTRIES(unary_f32, 4, (tpu_op_t op, const float *x, float *y, int64_t n),
            (op, x, y, n, stream), (op, x + h, y + h, n, stream))
VEC_ENTRIES(unary_bf16, 2, (tpu_op_t op, const uint16_t *x, uint16_t *y, int64_t n),
            (op, x, y, n, stream), (op, x + h, y + h, n, stream))
VEC_ENTRIES(bf16_to_f32, 4, (const uint16_t *x, float *y, int64_t n),
            (x, y, n, stream), (x + h, y + h, n, stream))
VEC_ENTRIES(f32_to_bf16, 2, (const float *x, uint16_t *y, int64_t n),
            (x, y, n, stream), (x + h, y + h, n, stream))
#undef OUTPTR
#define OUTPTR out
VEC_ENTRIES(binary_f32, 4,
            (tpu_op_t op, const float *a, int64_t sa, const float *b, int64_t sb, float *out,
             int64_t n),
            (op, a, sa, b, sb, out, n, stream),
            (op, a + h * sa, sa, b + h * sb, sb, out + h, n, stream))
VEC_ENTRIES(binary_bf16, 2,
            (tpu_op_t op, const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb,
             uint16_t *out, int64_t n),
            (op, a, sa, b, sb, out, n, stream),
            (op, a + h * sa, sa, b + h * sb, sb, out + h, n, stream))
#undef OUTPTR

/* ---- Philox4x32-10 ------------------------------------------------------------------------ */

static void philox(uint64_t ctr, uint64_t key, int64_t n, uint32_t *w0, uint32_t *w1,
                   uint32_t *w2, uint32_t *w3) {
  for (int64_t i = 0; i < n; i += VEC_W) {
    uint32_t lo[VEC_W], hi[VEC_W], o[4][VEC_W];
    for (int l = 0; l < VEC_W; l++) {
      uint64_t c = ctr + (uint64_t)(i + l);
      lo[l] = (uint32_t)c;
      hi[l] = (uint32_t)(c >> 32);
    }
    vi c0 = vi_load_u32(lo), c1 = vi_load_u32(hi), c2 = vi_set(0), c3 = vi_set(0);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
      vi hi0, lo0, hi1, lo1;
      vi_mulhilo(c0, 0xD2511F53u, &hi0, &lo0);
      vi_mulhilo(c2, 0xCD9E8D57u, &hi1, &lo1);
      c0 = vi_xor(vi_xor(hi1, c1), vi_set((int32_t)k0));
      c1 = lo1;
      c2 = vi_xor(vi_xor(hi0, c3), vi_set((int32_t)k1));
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    vi_store_u32(o[0], c0);
    vi_store_u32(o[1], c1);
    vi_store_u32(o[2], c2);
    vi_store_u32(o[3], c3);
    int64_t m = n - i < VEC_W ? n - i : VEC_W;
    size_t bytes = (size_t)m * sizeof(uint32_t);
    memcpy(w0 + i, o[0], bytes);
    if (w1) memcpy(w1 + i, o[1], bytes);
    if (w2) memcpy(w2 + i, o[2], bytes);
    if (w3) memcpy(w3 + i, o[3], bytes);
  }
}

/* ---- transposed tiles ---------------------------------------------------------------------- */

#ifndef VEC_TRANSPOSE_U32
/* Strips of 8 columns down all rows, so that the rows read and the rows written each stay
 * within 8 cache lines at a time. */
static void transpose_u32(uint32_t *dst, int64_t ld, const uint32_t *src, int64_t s_col,
                          int64_t rows, int64_t cols) {
  for (int64_t c0 = 0; c0 < cols; c0 += 8) {
    int64_t c1 = c0 + 8 < cols ? c0 + 8 : cols;
    for (int64_t r = 0; r < rows; r++) {
      for (int64_t c = c0; c < c1; c++) dst[r * ld + c] = src[r + c * s_col];
    }
  }
}
#define VEC_TRANSPOSE_U32 transpose_u32
#endif

/* ---- the table ------------------------------------------------------------------------------ */

const tpu_vec_ops_t *VEC_TABLE(void) {
  static const tpu_vec_ops_t ops = {
      .name = VEC_NAME,
      .isa = VEC_ISA,
      .unary_f32 = unary_f32,
      .binary_f32 = binary_f32,
      .unary_bf16 = unary_bf16,
      .binary_bf16 = binary_bf16,
      .bf16_to_f32 = bf16_to_f32,
      .f32_to_bf16 = f32_to_bf16,
      .unary_f32_stream = unary_f32_stream,
      .binary_f32_stream = binary_f32_stream,
      .unary_bf16_stream = unary_bf16_stream,
      .binary_bf16_stream = binary_bf16_stream,
      .bf16_to_f32_stream = bf16_to_f32_stream,
      .f32_to_bf16_stream = f32_to_bf16_stream,
      .stream_fence = vec_sfence,
      .philox = philox,
      .binary_f32_2d = binary_f32_2d,
      .binary_bf16_2d = binary_bf16_2d,
      .compare_f32 = compare_f32,
      .compare_bf16 = compare_bf16,
      .select_u32 = select_u32,
      .transpose_u32 = VEC_TRANSPOSE_U32,
  };
  return &ops;
}
