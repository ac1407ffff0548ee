/* ew_jit.c: generates the AVX-512 code of a fused elementwise program (ew_jit.h).
 *
 * The generated function, for tpu_ew_jit_args_t *args in rdi:
 *
 *   prologue   push rbx, rbp; a stack frame of 64-byte slots; rbx = args
 *   preheader  every register that holds one value for all elements (constants, broadcast
 *              inputs, instructions reading only those: "uniform") is computed once, as 16
 *              equal lanes, into its own slot: registers 0..23 (inputs, constants) in slots
 *              0..23, instruction j's value in slot 24 + j, so a uniform value never needs
 *              a zmm register in the loops (a program reuses registers, so the register an
 *              early uniform value had may hold a vector later)
 *   stages     the other instructions, split after each one that is not inline (a call);
 *              per stage a loop over the whole vectors (rbp = byte offset): an operand is
 *              loaded into zmm8 + register when first read in the stage (from the input,
 *              or from the register's scratch block if an earlier stage or call wrote it;
 *              an input with one value per row: that row's value, broadcast);
 *              a value read by a later stage or a call is also stored to its scratch block;
 *              the last stage stores the result and the stores. Then the same body once
 *              more on the last m % 16 lanes, k1 (masked loads read nothing past them,
 *              masked stores write nothing past them; whole vectors go unmasked, which is
 *              faster on some CPUs). Between stages: tpu_ew_jit_call_block(call, args,
 *              frame).
 * Scratch: zmm0..zmm2, zmm6, zmm7 (inside one op; erf also zmm4, zmm5), zmm3..zmm5
 * (uniform operands); k2, k3 (compares); rax, rdx (addresses). The constants the loops'
 * exp and erf read live in the zmm of program registers the program does not use, when
 * there are enough of them, loaded before each loop that reads them.
 */
#include "vtpu/kernels/ew_jit.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "vtpu/kernels/ew.h"
#include "vtpu/kernels/jit_x86.h"
#include "vtpu/kernels/vec_consts.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define EW_JIT_AVAILABLE 1
#include <pthread.h>
#include <sys/mman.h>
#else
#define EW_JIT_AVAILABLE 0
#endif

#define VARIANTS 8              /* code per program: one per set of broadcast inputs seen */
#define REGS TPU_EW_PROGRAM_MAX_REGS
#define INSTRS TPU_EW_PROGRAM_MAX_INSTRS
#define CODE_CAP (256 * 1024)   /* bytes: far above the largest program's code */

void tpu_ew_jit_set_count(tpu_ew_jit_args_t *args, int64_t m) {
  args->m = m;
  args->full_bytes = (m / 16) * 64;
  args->tail_mask = (1u << (m % 16)) - 1;
}

#if EW_JIT_AVAILABLE

/* the bit patterns inline ops broadcast: masks, and f32 constants (exp, erf: vec_consts.h) */
enum { POOL_ABS, POOL_SIGN, POOL_ONE, POOL_INF, POOL_ERF_CLAMP, POOL_FOUR, POOL_HALF,
       POOL_QUARTER, POOL_EXP_HI, POOL_EXP_LO, POOL_EXP_MAGIC, POOL_EXP_LOG2E, POOL_EXP_LN2_HI,
       POOL_EXP_LN2_LO, POOL_EXP_P0, POOL_EXP_P1, POOL_EXP_P2, POOL_EXP_P3, POOL_EXP_P4,
       POOL_SIZE };

/* A variant's key: the inputs broadcast over the call (bits 0..7), the inputs holding one
 * value per row (bits 8..15) and log2 of a row's bytes (bits 16..23; 0 without rows). */
_Static_assert(TPU_EW_PROGRAM_MAX_INPUTS <= 8, "input masks fit 8 bits of a key");
static uint32_t variant_key(uint32_t uniform, uint32_t per_row, int row_log2) {
  return uniform | per_row << 8 | (uint32_t)row_log2 << 16;
}

typedef struct variant {
  uint32_t key;
  tpu_ew_jit_code_t code;
  void *mem; /* mmap'd, read + execute */
  size_t size;
  tpu_ew_jit_call_t calls[INSTRS]; /* the calls' descriptors, by instruction */
} variant_t;

struct tpu_ew_jit {
  tpu_ew_program_t p;               /* the program (calls point at its instructions) */
  uint32_t pool[POOL_SIZE];
  pthread_mutex_t mu;               /* held while a variant is generated */
  _Atomic(variant_t *) v[VARIANTS]; /* filled in order; never replaced */
};

/* ---- stack frame ---------------------------------------------------------------------- */

#define SLOT_INSTR(j) (REGS + (j)) /* a uniform instruction's value */
#define SLOTS (REGS + INSTRS)
/* on entry rsp = 8 mod 16; two pushes keep that; the frame makes it 0 mod 16 for calls */
#define FRAME (SLOTS * 64 + 8)
#define Z(r) (8 + (r)) /* program register r's zmm */
enum { ZA = 3, ZB = 4, ZC = 5, ZT = 6, ZU = 7 };

static x86_rm_t slot(int s) { return x86_mem(X86_RSP, -1, 64 * s); }

/* vmovups zmm{k}{z}, m / m{k}, zmm; vmovaps zmm, zmm; vbroadcastss zmm, m32 */
static void load(x86_buf_t *b, int z, x86_rm_t m, int k) {
  x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x10, z, -1, m, k, k != 0);
}
static void store(x86_buf_t *b, x86_rm_t m, int z, int k) {
  x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x11, z, -1, m, k, false);
}
static void move(x86_buf_t *b, int dst, int src) {
  if (dst != src) x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x28, dst, -1, x86_zmm(src), 0, false);
}
/* z = the f32 at [base + disp] in every lane */
static void broadcast_at(x86_buf_t *b, int z, int base, int32_t disp) {
  x86_evex(b, X86_MAP_0F38, X86_PP_66, 0x18, z, -1, x86_mem(base, -1, disp), 0, false);
}
static void broadcast(x86_buf_t *b, int z, int base) { broadcast_at(b, z, base, 0); }
static void broadcast_pool(x86_buf_t *b, const tpu_ew_jit_t *j, int z, int which) {
  x86_mov_imm64(b, X86_RAX, (uint64_t)(uintptr_t)&j->pool[which]);
  broadcast(b, z, X86_RAX);
}
/* dst{k} = op(src1, src2) for the 0F-map ps ops (|pp| 66: the dword integer ops) */
static void op3(x86_buf_t *b, int pp, uint8_t opc, int dst, int s1, int s2, int k) {
  x86_evex(b, X86_MAP_0F, pp, opc, dst, s1, x86_zmm(s2), k, false);
}
static void sqrt_ps(x86_buf_t *b, int dst, int src) {
  x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x51, dst, -1, x86_zmm(src), 0, false);
}
static void cmp(x86_buf_t *b, int k, int s1, int s2, uint8_t pred) {
  x86_evex_ib(b, X86_MAP_0F, X86_PP_NONE, 0xc2, k, s1, x86_zmm(s2), 0, false, pred);
}
/* rax = the args field at byte offset |off| (a pointer) */
static void args_ptr(x86_buf_t *b, size_t off) {
  x86_mov_load(b, X86_RAX, X86_RBX, (int32_t)off);
}

/* vcmpps predicates: ordered, quiet (false on NaN), except NEQ_UQ (true on NaN) */
enum { CMP_EQ_OQ = 0x00, CMP_UNORD_Q = 0x03, CMP_NEQ_UQ = 0x04, CMP_LT_OQ = 0x11,
       CMP_LE_OQ = 0x12, CMP_GE_OQ = 0x1d, CMP_GT_OQ = 0x1e };

/* ---- ops -------------------------------------------------------------------------------- */

static int num_operands(tpu_op_t op) {
  if (op == TPU_OP_SELECT) return 3;
  return tpu_op_family(op) == TPU_FAMILY_UNARY ? 1 : 2;
}

static bool is_inline(tpu_op_t op) {
  switch (op) {
    case TPU_OP_ADD: case TPU_OP_SUB: case TPU_OP_MUL: case TPU_OP_DIV: case TPU_OP_MAX:
    case TPU_OP_MIN: case TPU_OP_SQRT: case TPU_OP_RSQRT: case TPU_OP_NEG: case TPU_OP_ABS:
    case TPU_OP_COMPARE: case TPU_OP_SELECT: case TPU_OP_IS_FINITE: case TPU_OP_EXP:
    case TPU_OP_ERF:
      return true;
    default:
      return false;
  }
}

/* max / min as vec_impl.h's v_max / v_min: NaN if either is NaN (a + b); equal operands
 * combined bitwise (max: and, min: or, so that -0 and +0 order) */
static void emit_max_min(x86_buf_t *b, bool max, int d, int a, int c) {
  cmp(b, 2, a, c, CMP_EQ_OQ);
  op3(b, X86_PP_NONE, max ? 0x5f : 0x5d, ZT, a, c, 0);
  op3(b, X86_PP_66, max ? 0xdb : 0xeb, ZT, a, c, 2); /* vpandd / vpord, where equal */
  cmp(b, 3, a, c, CMP_UNORD_Q);
  op3(b, X86_PP_NONE, 0x58, ZT, a, c, 3); /* vaddps, where unordered */
  move(b, d, ZT);
}

/* 1.0 where k2, else 0.0 */
static void emit_predicate(x86_buf_t *b, const tpu_ew_jit_t *j, int d) {
  broadcast_pool(b, j, ZU, POOL_ONE);
  x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x28, d, -1, x86_zmm(ZU), 2, true);
}

/* the FMA-family ops of map 0F38 (66, W0): dst = f(dst, s1, rm) */
enum { VFMADD213 = 0xa8, VFMADD231 = 0xb8, VFNMADD231 = 0xbc, VSCALEF = 0x2c };
static void op38(x86_buf_t *b, uint8_t opc, int dst, int s1, x86_rm_t rm) {
  x86_evex(b, X86_MAP_0F38, X86_PP_66, opc, dst, s1, rm, 0, false);
}

/* Pool constant |w| as an operand: its register creg[w], or (creg[w] < 0) a {1to16} operand
 * off rax, which holds j->pool. */
static x86_rm_t pool_operand(const int *creg, int w) {
  return creg[w] >= 0 ? x86_zmm(creg[w]) : x86_mem_bcst(X86_RAX, (int32_t)(4 * w));
}
/* z = pool constant |w| in every lane (rax = j->pool unless it has a register) */
static void set_const(x86_buf_t *b, const int *creg, int z, int w) {
  if (creg[w] >= 0) move(b, z, creg[w]);
  else broadcast_at(b, z, X86_RAX, (int32_t)(4 * w));
}

/* d = e^a as vec_impl.h's v_exp computes it, instruction for instruction (rounding after
 * each, one rounding per FMA). Constant |which| of the pool is in zmm creg[which] when that
 * is >= 0 (loaded before the loop by load_consts), else read as a {1to16} operand. */
static void emit_exp(x86_buf_t *b, const tpu_ew_jit_t *j, const int *creg, int d, int a) {
  enum { XC = 0, NF = 1, R = 2, P = ZT, RR = ZU };
  x86_mov_imm64(b, X86_RAX, (uint64_t)(uintptr_t)j->pool);
#define C(w) pool_operand(creg, w)
#define SET(z, w) set_const(b, creg, z, w)
  SET(XC, POOL_EXP_LO);
  op3(b, X86_PP_NONE, 0x5f, XC, XC, a, 0); /* max(LO, x): x if NaN */
  SET(NF, POOL_EXP_HI);
  op3(b, X86_PP_NONE, 0x5d, XC, NF, XC, 0); /* xc = min(HI, .) */
  SET(NF, POOL_EXP_MAGIC);
  op38(b, VFMADD231, NF, XC, C(POOL_EXP_LOG2E)); /* t = xc log2e + magic */
  x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x5c, NF, NF, C(POOL_EXP_MAGIC), 0, false); /* nf */
  move(b, R, XC);
  op38(b, VFNMADD231, R, NF, C(POOL_EXP_LN2_HI)); /* r = xc - nf ln2_hi */
  op38(b, VFNMADD231, R, NF, C(POOL_EXP_LN2_LO)); /* r -= nf ln2_lo */
  SET(P, POOL_EXP_P0);
  op38(b, VFMADD213, P, R, C(POOL_EXP_P1)); /* p = p r + P1 */
  op38(b, VFMADD213, P, R, C(POOL_EXP_P2));
  op38(b, VFMADD213, P, R, C(POOL_EXP_P3));
  op38(b, VFMADD213, P, R, C(POOL_EXP_P4));
  op3(b, X86_PP_NONE, 0x59, RR, R, R, 0);       /* r^2 */
  op38(b, VFMADD213, P, RR, x86_zmm(R));        /* p r^2 + r */
  x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x58, P, P, C(POOL_ONE), 0, false); /* + 1 */
  op38(b, VSCALEF, d, P, x86_zmm(NF));          /* y 2^nf */
#undef SET
#undef C
}

/* Whether |op| reads pool constant |w| (exp: ONE and its entries; erf: the masks and its). */
static bool reads_const(tpu_op_t op, int w) {
  if (op == TPU_OP_EXP) return w == POOL_ONE || w >= POOL_EXP_HI;
  if (op == TPU_OP_ERF) {
    return w == POOL_ABS || w == POOL_SIGN || (w >= POOL_ERF_CLAMP && w <= POOL_QUARTER);
  }
  return false;
}

/* d = erf(a) as vec_impl.h's v_erf computes it, instruction for instruction (see emit_exp);
 * the coefficient tables are vec_consts.h's, read as 64-byte operands. Leaves zmm3 alone
 * until d is written (a may be it). */
static void emit_erf(x86_buf_t *b, const tpu_ew_jit_t *j, const int *creg, int d, int a) {
  enum { AX = 0, U = 1, K = 2, V = 4, P = 5, T = 6, SIGN = 7 };
  x86_mov_imm64(b, X86_RAX, (uint64_t)(uintptr_t)j->pool);
#define C(w) pool_operand(creg, w)
#define LUT(z, row)                                                                      \
  x86_evex(b, X86_MAP_0F38, X86_PP_66, 0x16, z, K,                                       \
           x86_mem(X86_RDX, -1, (int32_t)(64 * (row))), 0, false) /* vpermps */
  x86_evex(b, X86_MAP_0F, X86_PP_66, 0xdb, SIGN, a, C(POOL_SIGN), 0, false); /* sign of x */
  x86_evex(b, X86_MAP_0F, X86_PP_66, 0xdb, AX, a, C(POOL_ABS), 0, false);    /* |x| */
  set_const(b, creg, T, POOL_ERF_CLAMP);
  op3(b, X86_PP_NONE, 0x5d, AX, T, AX, 0); /* ax = min(clamp, |x|): NaN stays */
  x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x59, U, AX, C(POOL_FOUR), 0, false); /* s = 4 ax */
  x86_evex(b, X86_MAP_0F, X86_PP_F3, 0x5b, K, -1, x86_zmm(U), 0, false);    /* k = trunc s */
  x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x5b, V, -1, x86_zmm(K), 0, false);  /* float k */
  x86_evex(b, X86_MAP_0F, X86_PP_NONE, 0x58, V, V, C(POOL_HALF), 0, false); /* k + 1/2 */
  op3(b, X86_PP_NONE, 0x5c, U, U, V, 0);                                    /* u = s - . */
  x86_evex_ib(b, X86_MAP_0F, X86_PP_NONE, 0xc2, 2, AX, C(POOL_QUARTER), 0, false,
              CMP_LT_OQ);                                                  /* first */
  op3(b, X86_PP_NONE, 0x59, V, AX, AX, 0);                                  /* ax^2 */
  x86_evex(b, X86_MAP_0F38, X86_PP_66, 0x65, V, U, x86_zmm(V), 2, false);  /* v */
  x86_mov_imm64(b, X86_RDX, (uint64_t)(uintptr_t)tpu_erf_table);
  LUT(P, 5);
  for (int row = 4; row >= 1; row--) {
    LUT(T, row);
    op38(b, VFMADD213, P, V, x86_zmm(T)); /* p = p v + T[row][k] */
  }
  x86_evex(b, X86_MAP_0F38, X86_PP_66, 0x65, U, U, x86_zmm(AX), 2, false); /* first ? ax : u */
  LUT(T, 0);
  x86_evex(b, X86_MAP_0F38, X86_PP_66, 0x65, T, T, x86_zmm(AX), 2, false); /* first ? ax : A */
  op38(b, VFMADD213, U, P, x86_zmm(T));                                    /* y */
  op3(b, X86_PP_66, 0xeb, d, U, SIGN, 0);                                  /* | sign */
#undef LUT
#undef C
}

/* d = op(a, c, e) for an inline op; d may be any of the operands (each is read before d is
 * written) */
static void emit_inline(x86_buf_t *b, const tpu_ew_jit_t *j, const int *creg,
                        const tpu_ew_instr_t *in, int d, int a, int c, int e) {
  static const uint8_t kCmp[] = {CMP_EQ_OQ, CMP_NEQ_UQ, CMP_LT_OQ, CMP_LE_OQ, CMP_GT_OQ,
                                 CMP_GE_OQ};
  switch (in->op) {
    case TPU_OP_ADD: op3(b, X86_PP_NONE, 0x58, d, a, c, 0); return;
    case TPU_OP_SUB: op3(b, X86_PP_NONE, 0x5c, d, a, c, 0); return;
    case TPU_OP_MUL: op3(b, X86_PP_NONE, 0x59, d, a, c, 0); return;
    case TPU_OP_DIV: op3(b, X86_PP_NONE, 0x5e, d, a, c, 0); return;
    case TPU_OP_MAX: emit_max_min(b, true, d, a, c); return;
    case TPU_OP_MIN: emit_max_min(b, false, d, a, c); return;
    case TPU_OP_SQRT: sqrt_ps(b, d, a); return;
    case TPU_OP_RSQRT: /* 1 / sqrt(x), two roundings */
      sqrt_ps(b, ZT, a);
      broadcast_pool(b, j, ZU, POOL_ONE);
      op3(b, X86_PP_NONE, 0x5e, d, ZU, ZT, 0);
      return;
    case TPU_OP_NEG: /* flip the sign bit (vpxord) */
      broadcast_pool(b, j, ZU, POOL_SIGN);
      op3(b, X86_PP_66, 0xef, d, a, ZU, 0);
      return;
    case TPU_OP_ABS: /* clear it (vpandd) */
      broadcast_pool(b, j, ZU, POOL_ABS);
      op3(b, X86_PP_66, 0xdb, d, a, ZU, 0);
      return;
    case TPU_OP_IS_FINITE: /* |x| < inf: false for inf and NaN */
      broadcast_pool(b, j, ZU, POOL_ABS);
      op3(b, X86_PP_66, 0xdb, ZT, a, ZU, 0);
      broadcast_pool(b, j, ZU, POOL_INF);
      cmp(b, 2, ZT, ZU, CMP_LT_OQ);
      emit_predicate(b, j, d);
      return;
    case TPU_OP_COMPARE:
      cmp(b, 2, a, c, kCmp[in->aux]);
      emit_predicate(b, j, d);
      return;
    case TPU_OP_EXP: emit_exp(b, j, creg, d, a); return;
    case TPU_OP_ERF: emit_erf(b, j, creg, d, a); return;
    default: /* SELECT: a != 0 (true on NaN, as C's !=) ? c : e (vblendmps takes k ? rm : vvvv) */
      op3(b, X86_PP_66, 0xef, ZU, ZU, ZU, 0); /* vpxord: 0.0 */
      cmp(b, 2, a, ZU, CMP_NEQ_UQ);
      x86_evex(b, X86_MAP_0F38, X86_PP_66, 0x65, d, e, x86_zmm(c), 2, false);
      return;
  }
}

/* tpu_ew_jit_call_block(c, args, frame) */
static void emit_call(x86_buf_t *b, const tpu_ew_jit_call_t *c) {
  x86_mov_imm64(b, X86_RDI, (uint64_t)(uintptr_t)c);
  x86_mov_rr(b, X86_RSI, X86_RBX);
  x86_mov_rr(b, X86_RDX, X86_RSP);
  x86_mov_imm64(b, X86_RAX, (uint64_t)(uintptr_t)&tpu_ew_jit_call_block);
  x86_call(b, X86_RAX);
}

/* ---- the generator ----------------------------------------------------------------------- */

enum { DEF_INPUT = -1 }; /* an operand's value comes from the program's input */

typedef struct gen {
  x86_buf_t b;
  const tpu_ew_jit_t *j;
  const tpu_ew_program_t *p;
  variant_t *v;
  bool uni[INSTRS];          /* instruction j is uniform */
  int opnd_slot[INSTRS][3];  /* its operands: the uniform value's slot, or -1 */
  int opnd_def[INSTRS][3];   /* else the instruction that wrote it, or DEF_INPUT */
  int stage[INSTRS];         /* the stage of a vector instruction (a call: the one it ends) */
  bool kept[INSTRS];         /* a vector value stored to its register's scratch block */
  int num_stages;
  int out_reg[1 + TPU_EW_PROGRAM_MAX_STORES];
  int out_slot[1 + TPU_EW_PROGRAM_MAX_STORES]; /* a uniform output's slot, or -1 */
  int out_def[1 + TPU_EW_PROGRAM_MAX_STORES];
  bool out_by_call[1 + TPU_EW_PROGRAM_MAX_STORES]; /* written by the call that computes it */
  int num_out;
  uint32_t per_row;          /* inputs holding one value per row (bit k: input k) */
  int row_log2;              /* log2 of a row's bytes, when per_row */
  int creg[POOL_SIZE];       /* the zmm holding pool constant w in the loops, or -1 */
  int no_creg[POOL_SIZE];    /* all -1: constants from memory (the preheader) */
} gen_t;

static bool is_call(const gen_t *g, int j) {
  return !g->uni[j] && !is_inline(g->p->instrs[j].op);
}

/* Which values are uniform, where every operand comes from, the stages, and which vector
 * values must be kept in scratch (read by a call, or by a later stage). */
static void analyse(gen_t *g, uint32_t uniform) {
  const tpu_ew_program_t *p = g->p;
  int cur_slot[REGS], cur_def[REGS]; /* per register: its value's slot if uniform, writer */
  for (int r = 0; r < REGS; r++) {
    cur_slot[r] = -1;
    cur_def[r] = DEF_INPUT;
  }
  for (int k = 0; k < p->num_inputs; k++) cur_slot[k] = (uniform >> k & 1) ? k : -1;
  for (int k = 0; k < p->num_consts; k++) cur_slot[p->num_inputs + k] = p->num_inputs + k;
  int stage = 0;
  for (int j = 0; j < p->num_instrs; j++) {
    const tpu_ew_instr_t *in = &p->instrs[j];
    const int regs[3] = {in->a, in->b, in->c}, n = num_operands(in->op);
    bool uni = true;
    for (int k = 0; k < 3; k++) {
      g->opnd_slot[j][k] = k < n ? cur_slot[regs[k]] : -1;
      g->opnd_def[j][k] = k < n ? cur_def[regs[k]] : DEF_INPUT;
      if (k < n && g->opnd_slot[j][k] < 0) uni = false;
    }
    g->uni[j] = uni;
    cur_slot[in->dst] = uni ? SLOT_INSTR(j) : -1;
    cur_def[in->dst] = j;
    g->stage[j] = stage;
    if (is_call(g, j)) stage++;
  }
  g->num_stages = stage + 1;
  for (int j = 0; j < p->num_instrs; j++) {
    if (g->uni[j]) continue;
    for (int k = 0; k < num_operands(p->instrs[j].op); k++) {
      const int d = g->opnd_def[j][k];
      if (g->opnd_slot[j][k] >= 0 || d == DEF_INPUT) continue;
      if (is_call(g, j) || g->stage[d] != g->stage[j] || is_call(g, d)) g->kept[d] = true;
    }
  }
  g->num_out = 1 + p->num_stores;
  for (int o = 0; o < g->num_out; o++) {
    const int r = o ? p->stores[o - 1] : p->result, d = cur_def[r];
    g->out_reg[o] = r;
    g->out_slot[o] = cur_slot[r];
    g->out_def[o] = cur_slot[r] >= 0 ? DEF_INPUT : d;
    if (cur_slot[r] < 0 && d != DEF_INPUT && g->stage[d] != g->num_stages - 1) g->kept[d] = true;
  }
  /* the last vector instruction, if a call whose value is one output and nothing else,
   * writes that output itself (earlier, it might overwrite an input read later: an extra
   * output may be the memory of the input it replaces) */
  int last = p->num_instrs - 1;
  while (last >= 0 && g->uni[last]) last--;
  for (int o = 0; o < g->num_out; o++) { /* an output that is an input is read after it */
    if (g->out_slot[o] < 0 && g->out_def[o] == DEF_INPUT) last = -1;
  }
  for (int o = 0; o < g->num_out; o++) {
    const int d = g->out_def[o];
    if (g->out_slot[o] >= 0 || d == DEF_INPUT || d != last || !is_call(g, d)) continue;
    int uses = 0;
    for (int i = 0; i < g->num_out; i++) uses += g->out_slot[i] < 0 && g->out_def[i] == d;
    for (int j = 0; j < p->num_instrs; j++) {
      for (int k = 0; k < num_operands(p->instrs[j].op); k++) {
        uses += g->opnd_slot[j][k] < 0 && g->opnd_def[j][k] == d;
      }
    }
    g->out_by_call[o] = uses == 1;
  }
}

/* Gives the constants the loops' exp and erf read the zmm registers of program registers the
 * program never uses, if there are enough (else they are read from memory). */
static void assign_consts(gen_t *g) {
  const tpu_ew_program_t *p = g->p;
  bool used[REGS] = {false};
  for (int r = 0; r < p->num_inputs + p->num_consts; r++) used[r] = true;
  for (int j = 0; j < p->num_instrs; j++) used[p->instrs[j].dst] = true;
  int free_regs[REGS], nfree = 0, need = 0;
  for (int r = 0; r < REGS; r++) {
    if (!used[r]) free_regs[nfree++] = r;
  }
  bool wanted[POOL_SIZE] = {false};
  for (int w = 0; w < POOL_SIZE; w++) {
    g->creg[w] = g->no_creg[w] = -1;
    for (int j = 0; j < p->num_instrs; j++) {
      wanted[w] |= !g->uni[j] && reads_const(p->instrs[j].op, w);
    }
    need += wanted[w];
  }
  if (nfree < need) return;
  for (int w = 0, i = 0; w < POOL_SIZE; w++) {
    if (wanted[w]) g->creg[w] = Z(free_regs[i++]);
  }
}

/* Before a stage's loop: the constants given registers, if the stage reads any. */
static void load_consts(gen_t *g, int s) {
  bool any = false;
  for (int j = 0; j < g->p->num_instrs; j++) {
    for (int w = 0; w < POOL_SIZE; w++) {
      any |= !g->uni[j] && g->stage[j] == s && g->creg[w] >= 0 &&
             reads_const(g->p->instrs[j].op, w);
    }
  }
  if (!any) return;
  x86_mov_imm64(&g->b, X86_RAX, (uint64_t)(uintptr_t)g->j->pool);
  for (int w = 0; w < POOL_SIZE; w++) {
    if (g->creg[w] >= 0) broadcast_at(&g->b, g->creg[w], X86_RAX, (int32_t)(4 * w));
  }
}

/* The descriptor of call j: operands from slots (uniform), inputs or scratch blocks. */
static const tpu_ew_jit_call_t *describe_call(gen_t *g, int j) {
  const tpu_ew_instr_t *in = &g->p->instrs[j];
  tpu_ew_jit_call_t *c = &g->v->calls[j];
  const int regs[3] = {in->a, in->b, in->c};
  c->in = in;
  c->num_operands = num_operands(in->op);
  c->uniform = g->uni[j];
  c->dst = g->uni[j] ? SLOT_INSTR(j) : in->dst;
  c->out = -1;
  for (int o = 0; o < g->num_out; o++) {
    if (g->out_by_call[o] && g->out_def[o] == j) c->out = o;
  }
  for (int k = 0; k < c->num_operands; k++) {
    if (g->opnd_slot[j][k] >= 0) {
      c->src[k] = TPU_JIT_SRC_SLOT;
      c->index[k] = g->opnd_slot[j][k];
    } else {
      c->src[k] = g->opnd_def[j][k] == DEF_INPUT ? TPU_JIT_SRC_INPUT : TPU_JIT_SRC_SCRATCH;
      c->index[k] = regs[k];
    }
  }
  return c;
}

static void emit_preheader(gen_t *g, uint32_t uniform) {
  x86_buf_t *b = &g->b;
  const tpu_ew_program_t *p = g->p;
  const int regs_end = p->num_inputs + p->num_consts;
  for (int r = 0; r < regs_end; r++) { /* uniform inputs and constants into their slots */
    if (r < p->num_inputs && !(uniform >> r & 1)) continue;
    args_ptr(b, offsetof(tpu_ew_jit_args_t, in) + 8 * (size_t)r);
    broadcast(b, ZA, X86_RAX);
    store(b, slot(r), ZA, 0);
  }
  for (int j = 0; j < p->num_instrs; j++) {
    if (!g->uni[j]) continue;
    const tpu_ew_instr_t *in = &p->instrs[j];
    if (!is_inline(in->op)) {
      emit_call(b, describe_call(g, j));
      continue;
    }
    const int n = num_operands(in->op), z[3] = {ZA, ZB, ZC};
    for (int k = 0; k < n; k++) load(b, z[k], slot(g->opnd_slot[j][k]), 0);
    emit_inline(b, g->j, g->no_creg, in, ZA, ZA, ZB, ZC);
    store(b, slot(SLOT_INSTR(j)), ZA, 0);
  }
}

/* Register r's vector value written by |def| (or the input) at offset rbp, into its zmm. An
 * input with one value per row: the value of the row the vector is in (rows are a multiple
 * of 16 floats, so no vector spans two), at in[r] + 4 * (rbp >> row_log2). */
static void load_value(gen_t *g, int r, int def, int k) {
  x86_buf_t *b = &g->b;
  if (def == DEF_INPUT && (g->per_row >> r & 1)) {
    x86_mov_rr(b, X86_RAX, X86_RBP);
    x86_shr_imm(b, X86_RAX, (uint8_t)(g->row_log2 - 2));
    x86_and_imm(b, X86_RAX, -4);
    x86_mov_load(b, X86_RDX, X86_RBX, (int32_t)(offsetof(tpu_ew_jit_args_t, in) + 8 * (size_t)r));
    x86_evex(b, X86_MAP_0F38, X86_PP_66, 0x18, Z(r), -1, x86_mem(X86_RDX, X86_RAX, 0), 0, false);
  } else if (def == DEF_INPUT) {
    args_ptr(b, offsetof(tpu_ew_jit_args_t, in) + 8 * (size_t)r);
    load(b, Z(r), x86_mem(X86_RAX, X86_RBP, 0), k);
  } else {
    args_ptr(b, offsetof(tpu_ew_jit_args_t, scratch));
    load(b, Z(r), x86_mem(X86_RAX, X86_RBP, r * TPU_EW_JIT_BLOCK * 4), k);
  }
}

/* One vector of stage |s| at byte offset rbp: a whole one (k 0), or the lanes of k1 (k 1:
 * masked loads and stores, slower on some CPUs, so only for the tail) as |mask| says. */
static void emit_body(gen_t *g, int s, int mask) {
  x86_buf_t *b = &g->b;
  const tpu_ew_program_t *p = g->p;
  bool in_zmm[REGS] = {false}; /* the register's current value is in its zmm */
  for (int j = 0; j < p->num_instrs; j++) {
    if (g->uni[j] || g->stage[j] != s || is_call(g, j)) continue;
    const tpu_ew_instr_t *in = &p->instrs[j];
    const int regs[3] = {in->a, in->b, in->c}, n = num_operands(in->op), zu[3] = {ZA, ZB, ZC};
    int z[3] = {0, 0, 0};
    for (int k = 0; k < n; k++) {
      if (g->opnd_slot[j][k] >= 0) {
        load(b, zu[k], slot(g->opnd_slot[j][k]), 0);
        z[k] = zu[k];
        continue;
      }
      if (!in_zmm[regs[k]]) load_value(g, regs[k], g->opnd_def[j][k], mask);
      in_zmm[regs[k]] = true;
      z[k] = Z(regs[k]);
    }
    emit_inline(b, g->j, g->creg, in, Z(in->dst), z[0], z[1], z[2]);
    in_zmm[in->dst] = true;
    if (g->kept[j]) {
      args_ptr(b, offsetof(tpu_ew_jit_args_t, scratch));
      store(b, x86_mem(X86_RAX, X86_RBP, in->dst * TPU_EW_JIT_BLOCK * 4), Z(in->dst), mask);
    }
  }
  if (s != g->num_stages - 1) return;
  for (int o = 0; o < g->num_out; o++) {
    if (g->out_by_call[o]) continue;
    const int r = g->out_reg[o];
    int z = Z(r);
    if (g->out_slot[o] >= 0) {
      load(b, ZA, slot(g->out_slot[o]), 0);
      z = ZA;
    } else if (!in_zmm[r]) {
      load_value(g, r, g->out_def[o], mask);
      in_zmm[r] = true;
    }
    args_ptr(b, offsetof(tpu_ew_jit_args_t, out) + 8 * (size_t)o);
    store(b, x86_mem(X86_RAX, X86_RBP, 0), z, mask);
  }
}

/* The loop of stage s over whole vectors, then the masked tail. */
static void emit_stage(gen_t *g, int s) {
  x86_buf_t *b = &g->b;
  const int32_t full = (int32_t)offsetof(tpu_ew_jit_args_t, full_bytes);
  const int32_t tmask = (int32_t)offsetof(tpu_ew_jit_args_t, tail_mask);
  load_consts(g, s);
  x86_xor32(b, X86_RBP);
  x86_cmp_load(b, X86_RBP, X86_RBX, full);
  size_t to_tail = x86_jcc(b, X86_JGE);
  size_t top = b->len;
  emit_body(g, s, 0);
  x86_add_imm(b, X86_RBP, 64);
  x86_cmp_load(b, X86_RBP, X86_RBX, full);
  x86_patch(b, x86_jcc(b, X86_JL), top);
  x86_patch(b, to_tail, b->len);
  x86_cmp_mem_zero(b, X86_RBX, tmask);
  size_t to_done = x86_jcc(b, X86_JE);
  x86_kmovw_load(b, 1, X86_RBX, tmask);
  emit_body(g, s, 1);
  x86_patch(b, to_done, b->len);
}

static void generate(gen_t *g, uint32_t uniform) { /* g->per_row, g->row_log2 set */
  x86_buf_t *b = &g->b;
  const tpu_ew_program_t *p = g->p;
  analyse(g, uniform);
  assign_consts(g);
  x86_push(b, X86_RBX);
  x86_push(b, X86_RBP);
  x86_sub_imm(b, X86_RSP, FRAME);
  x86_mov_rr(b, X86_RBX, X86_RDI);
  emit_preheader(g, uniform);
  for (int s = 0, j = 0; s < g->num_stages; s++) {
    bool any = false; /* the last stage stores the outputs */
    for (int o = 0; o < g->num_out; o++) any |= s == g->num_stages - 1 && !g->out_by_call[o];
    for (int i = 0; i < p->num_instrs; i++) {
      any |= !g->uni[i] && g->stage[i] == s && !is_call(g, i);
    }
    if (any) emit_stage(g, s);
    for (; j < p->num_instrs; j++) { /* the call that ends stage s */
      if (is_call(g, j) && g->stage[j] == s) {
        emit_call(b, describe_call(g, j));
        g->v->code.blocked = true;
        j++;
        break;
      }
    }
  }
  x86_vzeroupper(b);
  x86_add_imm(b, X86_RSP, FRAME);
  x86_pop(b, X86_RBP);
  x86_pop(b, X86_RBX);
  x86_ret(b);
}

/* Generates and maps the variant for |key|, or NULL. */
static variant_t *make_variant(const tpu_ew_jit_t *j, uint32_t key) {
  gen_t *g = calloc(1, sizeof *g);
  uint8_t *bytes = malloc(CODE_CAP);
  variant_t *v = calloc(1, sizeof *v);
  if (!g || !bytes || !v) goto fail;
  g->b = (x86_buf_t){.bytes = bytes, .cap = CODE_CAP};
  g->j = j;
  g->p = &j->p;
  g->v = v;
  g->per_row = key >> 8 & 0xff;
  g->row_log2 = (int)(key >> 16 & 0xff);
  generate(g, key & 0xff);
  if (g->b.full) goto fail;
  v->key = key;
  v->size = g->b.len;
  v->mem = mmap(NULL, v->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (v->mem == MAP_FAILED) goto fail;
  memcpy(v->mem, bytes, v->size);
  if (mprotect(v->mem, v->size, PROT_READ | PROT_EXEC) != 0) {
    munmap(v->mem, v->size);
    goto fail;
  }
  memcpy(&v->code.fn, &v->mem, sizeof v->code.fn); /* object to function pointer, as dlsym's
                                                    * users do */
  free(g);
  free(bytes);
  return v;
fail:
  free(g);
  free(bytes);
  free(v);
  return NULL;
}

static bool jit_enabled(void) {
  const char *env = getenv("TORCHTPU_EW_JIT");
  if (env && strcmp(env, "0") == 0) return false;
  const tpu_vec_ops_t *v = tpu_vec_ops_for(TPU_ISA_AVX512);
  return v != NULL;
}

tpu_ew_jit_t *tpu_ew_jit_new(const tpu_ew_program_t *p) {
  if (!p || tpu_ew_program_check(p) != TPU_OK || !jit_enabled()) return NULL;
  tpu_ew_jit_t *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  if (pthread_mutex_init(&j->mu, NULL) != 0) {
    free(j);
    return NULL;
  }
  j->p = *p;
  j->p.jit = NULL;
  static const float kExp[] = {TPU_EXP_HI, TPU_EXP_LO, TPU_EXP_MAGIC, TPU_EXP_LOG2E,
                               TPU_EXP_LN2_HI, TPU_EXP_LN2_LO, TPU_EXP_P0, TPU_EXP_P1,
                               TPU_EXP_P2, TPU_EXP_P3, TPU_EXP_P4};
  _Static_assert(sizeof kExp / sizeof kExp[0] == POOL_SIZE - POOL_EXP_HI, "one per entry");
  j->pool[POOL_ABS] = 0x7fffffffu;
  j->pool[POOL_SIGN] = 0x80000000u;
  j->pool[POOL_ONE] = 0x3f800000u;
  j->pool[POOL_INF] = 0x7f800000u;
  const float erf[] = {TPU_ERF_CLAMP, 4.0f, 0.5f, 0.25f};
  memcpy(&j->pool[POOL_ERF_CLAMP], erf, sizeof erf);
  memcpy(&j->pool[POOL_EXP_HI], kExp, sizeof kExp);
  for (int i = 0; i < VARIANTS; i++) atomic_init(&j->v[i], NULL);
  return j;
}

void tpu_ew_jit_free(tpu_ew_jit_t *j) {
  if (!j) return;
  for (int i = 0; i < VARIANTS; i++) {
    variant_t *v = atomic_load(&j->v[i]);
    if (!v) break;
    munmap(v->mem, v->size);
    free(v);
  }
  pthread_mutex_destroy(&j->mu);
  free(j);
}

static const tpu_ew_jit_code_t *code_for(tpu_ew_jit_t *j, uint32_t key) {
  for (int i = 0; i < VARIANTS; i++) {
    variant_t *v = atomic_load_explicit(&j->v[i], memory_order_acquire);
    if (!v) break;
    if (v->key == key) return &v->code;
  }
  const tpu_ew_jit_code_t *code = NULL;
  pthread_mutex_lock(&j->mu);
  for (int i = 0; i < VARIANTS; i++) {
    variant_t *v = atomic_load_explicit(&j->v[i], memory_order_acquire);
    if (v && v->key != key) continue;
    if (!v) { /* the first free slot: generate (another thread may have meanwhile) */
      v = make_variant(j, key);
      if (!v) break;
      atomic_store_explicit(&j->v[i], v, memory_order_release);
    }
    code = &v->code;
    break;
  }
  pthread_mutex_unlock(&j->mu);
  return code;
}

const tpu_ew_jit_code_t *tpu_ew_jit_code(tpu_ew_jit_t *j, uint32_t uniform) {
  return code_for(j, variant_key(uniform, 0, 0));
}

const tpu_ew_jit_code_t *tpu_ew_jit_code_rows(tpu_ew_jit_t *j, uint32_t uniform,
                                              uint32_t per_row, int row_log2) {
  const tpu_ew_program_t *p = &j->p;
  const uint32_t inputs = (1u << p->num_inputs) - 1;
  if (!per_row || (per_row & ~inputs) || (uniform & per_row) || row_log2 < 6 ||
      row_log2 > 30) {
    return NULL;
  }
  /* an op the code calls reads its operands' blocks (m floats), which a per-row input is not */
  for (int k = 0; k < p->num_instrs; k++) {
    const tpu_ew_instr_t *in = &p->instrs[k];
    if (is_inline(in->op)) continue;
    const int regs[3] = {in->a, in->b, in->c};
    for (int o = 0; o < num_operands(in->op); o++) {
      if (regs[o] < p->num_inputs && (per_row >> regs[o] & 1)) return NULL;
    }
  }
  return code_for(j, variant_key(uniform, per_row, row_log2));
}

#else /* no JIT on this platform */

tpu_ew_jit_t *tpu_ew_jit_new(const tpu_ew_program_t *p) {
  (void)p;
  return NULL;
}
void tpu_ew_jit_free(tpu_ew_jit_t *j) { (void)j; }
const tpu_ew_jit_code_t *tpu_ew_jit_code(tpu_ew_jit_t *j, uint32_t uniform) {
  (void)j;
  (void)uniform;
  return NULL;
}
const tpu_ew_jit_code_t *tpu_ew_jit_code_rows(tpu_ew_jit_t *j, uint32_t uniform,
                                              uint32_t per_row, int row_log2) {
  (void)j;
  (void)uniform;
  (void)per_row;
  (void)row_log2;
  return NULL;
}

#endif
