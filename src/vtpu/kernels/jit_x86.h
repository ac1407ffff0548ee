/* jit_x86.h: a small x86-64 machine-code assembler for the elementwise JIT (ew_jit.c;
 * internal).
 *
 * Instructions are appended to a fixed-capacity byte buffer; one that does not fit sets
 * |full| and is dropped, so a caller checks |full| once at the end instead of after every
 * instruction. Only the forms ew_jit.c needs exist: AVX-512 (EVEX.512) on zmm registers
 * with register or [base + index + disp32] memory operands and opmask registers, and a few
 * 64-bit integer instructions (moves, stack, compare-and-branch, calls).
 *
 * Registers are numbered as the hardware does: integer 0 rax, 1 rcx, 2 rdx, 3 rbx, 4 rsp,
 * 5 rbp, 6 rsi, 7 rdi (r8..r15 are not needed); zmm 0..31; opmask k0..k7.
 */
#ifndef TPU_VTPU_KERNELS_JIT_X86_H
#define TPU_VTPU_KERNELS_JIT_X86_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { X86_RAX = 0, X86_RCX = 1, X86_RDX = 2, X86_RBX = 3, X86_RSP = 4, X86_RBP = 5,
       X86_RSI = 6, X86_RDI = 7 };

typedef struct x86_buf {
  uint8_t *bytes;
  size_t len, cap;
  bool full; /* an instruction did not fit: the code is incomplete */
} x86_buf_t;

/* A zmm register or a memory operand [base + index + disp] (index < 0: none). */
typedef struct x86_rm {
  bool mem;
  bool bcst;        /* mem: one f32 broadcast to all 16 lanes ({1to16}, EVEX.b) */
  int reg;          /* !mem: zmm number */
  int base, index;  /* mem: integer registers (index never rsp) */
  int32_t disp;
} x86_rm_t;

static inline x86_rm_t x86_zmm(int r) { return (x86_rm_t){.mem = false, .reg = r, .index = -1}; }
static inline x86_rm_t x86_mem(int base, int index, int32_t disp) {
  return (x86_rm_t){.mem = true, .base = base, .index = index, .disp = disp};
}
static inline x86_rm_t x86_mem_bcst(int base, int32_t disp) {
  return (x86_rm_t){.mem = true, .bcst = true, .base = base, .index = -1, .disp = disp};
}

/* EVEX.512 maps and prefixes */
enum { X86_MAP_0F = 1, X86_MAP_0F38 = 2 };
enum { X86_PP_NONE = 0, X86_PP_66 = 1, X86_PP_F3 = 2 };

/* One EVEX.512 instruction: ModRM.reg = |reg| (a zmm, or an opmask for compares), the
 * second source |vvvv| (a zmm, or -1 when the instruction has none), ModRM.rm = |rm|,
 * write mask k|k| (0: none) with zeroing when |zero|. */
void x86_evex(x86_buf_t *b, int map, int pp, uint8_t opcode, int reg, int vvvv, x86_rm_t rm,
              int k, bool zero);
/* The same with a trailing immediate byte (vcmpps). */
void x86_evex_ib(x86_buf_t *b, int map, int pp, uint8_t opcode, int reg, int vvvv, x86_rm_t rm,
                 int k, bool zero, uint8_t imm);

void x86_push(x86_buf_t *b, int r);
void x86_pop(x86_buf_t *b, int r);
void x86_ret(x86_buf_t *b);
void x86_vzeroupper(x86_buf_t *b);
void x86_mov_rr(x86_buf_t *b, int dst, int src);                /* mov dst, src (64-bit) */
void x86_mov_load(x86_buf_t *b, int dst, int base, int32_t disp); /* mov dst, [base + disp] */
void x86_mov_imm64(x86_buf_t *b, int dst, uint64_t v);           /* movabs dst, v */
void x86_xor32(x86_buf_t *b, int r);                            /* xor r32, r32: r = 0 */
void x86_add_imm(x86_buf_t *b, int r, int32_t v);               /* add r, v (64-bit) */
void x86_sub_imm(x86_buf_t *b, int r, int32_t v);               /* sub r, v (64-bit) */
void x86_and_imm(x86_buf_t *b, int r, int32_t v);               /* and r, v (64-bit) */
void x86_shr_imm(x86_buf_t *b, int r, uint8_t v);               /* shr r, v (64-bit) */
void x86_cmp_load(x86_buf_t *b, int r, int base, int32_t disp);  /* cmp r, [base + disp] */
void x86_cmp_mem_zero(x86_buf_t *b, int base, int32_t disp);     /* cmp qword [base + disp], 0 */
void x86_call(x86_buf_t *b, int r);                             /* call r */
void x86_kmovw_load(x86_buf_t *b, int k, int base, int32_t disp); /* kmovw k, [base + disp] */

/* Conditional and plain jumps with a 32-bit displacement: each returns where the
 * displacement sits, for x86_patch once the target is known. */
enum { X86_JE = 0x84, X86_JL = 0x8c, X86_JGE = 0x8d };
size_t x86_jcc(x86_buf_t *b, uint8_t cc);
/* Points the jump whose displacement is at |at| to |target| (both offsets in the buffer). */
void x86_patch(x86_buf_t *b, size_t at, size_t target);

#endif /* TPU_VTPU_KERNELS_JIT_X86_H */
