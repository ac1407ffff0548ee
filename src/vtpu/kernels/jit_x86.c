/* jit_x86.c: instruction encodings for jit_x86.h (Intel SDM vol. 2, sections 2.1-2.7:
 * REX, VEX and EVEX prefixes, ModRM and SIB). Memory operands always take the 32-bit
 * displacement form (ModRM.mod = 10), so EVEX's scaled 8-bit displacements never arise. */
#include "vtpu/kernels/jit_x86.h"

#include <string.h>

/* Appends |n| bytes, or marks the buffer full and appends nothing. */
static void put(x86_buf_t *b, const uint8_t *v, size_t n) {
  if (b->full || n > b->cap - b->len) {
    b->full = true;
    return;
  }
  memcpy(b->bytes + b->len, v, n);
  b->len += n;
}

static void x86_byte(x86_buf_t *b, uint8_t v) { put(b, &v, 1); }

static void put32(uint8_t *p, int32_t v) {
  uint32_t u = (uint32_t)v;
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> (8 * i));
}

/* ModRM (and SIB, disp32) for ModRM.reg = |reg| and |rm| into p; returns the byte count. */
static size_t modrm(uint8_t *p, int reg, x86_rm_t rm) {
  if (!rm.mem) {
    p[0] = (uint8_t)(0xc0 | (reg & 7) << 3 | (rm.reg & 7));
    return 1;
  }
  size_t n = 0;
  if (rm.index < 0 && (rm.base & 7) != X86_RSP) {
    p[n++] = (uint8_t)(0x80 | (reg & 7) << 3 | (rm.base & 7));
  } else { /* SIB: scale 1; index 100 means none */
    p[n++] = (uint8_t)(0x80 | (reg & 7) << 3 | 4);
    p[n++] = (uint8_t)(((rm.index < 0 ? 4 : rm.index) & 7) << 3 | (rm.base & 7));
  }
  put32(p + n, rm.disp);
  return n + 4;
}

static void evex(x86_buf_t *b, int map, int pp, uint8_t opcode, int reg, int vvvv, x86_rm_t rm,
                 int k, bool zero, const uint8_t *imm) {
  uint8_t p[16];
  int v = vvvv < 0 ? 0 : vvvv;
  int rb = rm.mem ? rm.base : rm.reg;                 /* EVEX.B: bit 3 of base / rm zmm */
  int rx = rm.mem ? (rm.index < 0 ? 0 : rm.index >> 3) /* EVEX.X: index bit 3, */
                  : rm.reg >> 4;                       /* or bit 4 of the rm zmm */
  p[0] = 0x62;
  p[1] = (uint8_t)((~reg >> 3 & 1) << 7 | (~rx & 1) << 6 | (~rb >> 3 & 1) << 5 |
                   (~reg >> 4 & 1) << 4 | (map & 3));
  p[2] = (uint8_t)(0 << 7 /* W0 */ | (~v & 15) << 3 | 1 << 2 | (pp & 3));
  p[3] = (uint8_t)((zero ? 1 : 0) << 7 | 2 << 5 /* L'L = 512 */ | (rm.mem && rm.bcst) << 4 |
                   (~v >> 4 & 1) << 3 | (k & 7));
  p[4] = opcode;
  size_t n = 5 + modrm(p + 5, reg, rm);
  if (imm) p[n++] = *imm;
  put(b, p, n);
}

void x86_evex(x86_buf_t *b, int map, int pp, uint8_t opcode, int reg, int vvvv, x86_rm_t rm,
              int k, bool zero) {
  evex(b, map, pp, opcode, reg, vvvv, rm, k, zero, NULL);
}

void x86_evex_ib(x86_buf_t *b, int map, int pp, uint8_t opcode, int reg, int vvvv, x86_rm_t rm,
                 int k, bool zero, uint8_t imm) {
  evex(b, map, pp, opcode, reg, vvvv, rm, k, zero, &imm);
}

void x86_push(x86_buf_t *b, int r) { x86_byte(b, (uint8_t)(0x50 + (r & 7))); }
void x86_pop(x86_buf_t *b, int r) { x86_byte(b, (uint8_t)(0x58 + (r & 7))); }
void x86_ret(x86_buf_t *b) { x86_byte(b, 0xc3); }

void x86_vzeroupper(x86_buf_t *b) {
  const uint8_t p[] = {0xc5, 0xf8, 0x77};
  put(b, p, sizeof p);
}

void x86_mov_rr(x86_buf_t *b, int dst, int src) {
  const uint8_t p[] = {0x48, 0x89, (uint8_t)(0xc0 | (src & 7) << 3 | (dst & 7))};
  put(b, p, sizeof p);
}

/* REX.W |opcode| reg, [base + disp32] */
static void rex_w_mem(x86_buf_t *b, uint8_t opcode, int reg, int base, int32_t disp) {
  uint8_t p[16] = {0x48, opcode};
  size_t n = 2 + modrm(p + 2, reg, x86_mem(base, -1, disp));
  put(b, p, n);
}

void x86_mov_load(x86_buf_t *b, int dst, int base, int32_t disp) {
  rex_w_mem(b, 0x8b, dst, base, disp);
}

void x86_cmp_load(x86_buf_t *b, int r, int base, int32_t disp) {
  rex_w_mem(b, 0x3b, r, base, disp);
}

void x86_cmp_mem_zero(x86_buf_t *b, int base, int32_t disp) {
  uint8_t p[16] = {0x48, 0x83};
  size_t n = 2 + modrm(p + 2, 7 /* /7: cmp */, x86_mem(base, -1, disp));
  p[n++] = 0; /* imm8 */
  put(b, p, n);
}

void x86_mov_imm64(x86_buf_t *b, int dst, uint64_t v) {
  uint8_t p[10] = {0x48, (uint8_t)(0xb8 + (dst & 7))};
  for (int i = 0; i < 8; i++) p[2 + i] = (uint8_t)(v >> (8 * i));
  put(b, p, sizeof p);
}

void x86_xor32(x86_buf_t *b, int r) {
  const uint8_t p[] = {0x31, (uint8_t)(0xc0 | (r & 7) << 3 | (r & 7))};
  put(b, p, sizeof p);
}

static void alu_imm(x86_buf_t *b, int ext, int r, int32_t v) {
  uint8_t p[7] = {0x48, 0x81, (uint8_t)(0xc0 | ext << 3 | (r & 7))};
  put32(p + 3, v);
  put(b, p, sizeof p);
}

void x86_add_imm(x86_buf_t *b, int r, int32_t v) { alu_imm(b, 0, r, v); }
void x86_sub_imm(x86_buf_t *b, int r, int32_t v) { alu_imm(b, 5, r, v); }
void x86_and_imm(x86_buf_t *b, int r, int32_t v) { alu_imm(b, 4, r, v); }

void x86_shr_imm(x86_buf_t *b, int r, uint8_t v) {
  const uint8_t p[] = {0x48, 0xc1, (uint8_t)(0xe8 | (r & 7)), v}; /* REX.W C1 /5 ib */
  put(b, p, sizeof p);
}

void x86_call(x86_buf_t *b, int r) {
  const uint8_t p[] = {0xff, (uint8_t)(0xd0 | (r & 7))};
  put(b, p, sizeof p);
}

void x86_kmovw_load(x86_buf_t *b, int k, int base, int32_t disp) {
  uint8_t p[16] = {0xc5, 0xf8, 0x90}; /* VEX.L0.0F.W0 90 /r */
  size_t n = 3 + modrm(p + 3, k, x86_mem(base, -1, disp));
  put(b, p, n);
}

size_t x86_jcc(x86_buf_t *b, uint8_t cc) {
  uint8_t p[6] = {0x0f, cc, 0, 0, 0, 0};
  put(b, p, sizeof p);
  return b->len - 4;
}

void x86_patch(x86_buf_t *b, size_t at, size_t target) {
  if (b->full || at + 4 > b->len) return;
  put32(b->bytes + at, (int32_t)((int64_t)target - (int64_t)(at + 4)));
}
