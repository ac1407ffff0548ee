/* test_kernels_ew_jit.c: the machine code of fused elementwise programs (ew_jit.h) against
 * the interpreter (ew_program.c with the AVX-512 vec.h table), bit for bit (any NaN equal
 * to any NaN: two NaNs meeting may keep either payload).
 *
 * Random programs over every op a program may hold (the inline ones, the vec.h calls, the
 * scalar compute calls, CONVERT), with registers reused, some values depending only on
 * broadcast inputs (computed once before the loop), and stores; each run on
 *   - long rows of 1 .. 3000 elements (every vector tail), all f32 in place (one call per
 *     row) and with bf16 inputs, a bf16 output or strided inputs (block by block);
 *   - short rows packed into blocks (37 rows of 1 .. 70), operands broadcast along rows,
 *     one row for every row, or over everything;
 *   - rows of 16 .. 512 floats with inputs holding one value per row, read per vector by
 *     the per-row variant;
 *   - a store into the memory of the input it replaces (an in-place update).
 * Also: the code really runs (variants are generated), and TORCHTPU_EW_JIT=0 turns it off.
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "kernel_util.h"
#include "tpu/kernels.h"
#include "tpu/threadpool.h"
#include "vtpu/kernels/ew_jit.h"
#include "vtpu/kernels/ew_program.h"
#include "vtpu/kernels/ew_scalar.h"
#include "vtpu/kernels/vec.h"

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) { return kernel_splitmix64(&g_rng); }

/* Mostly ordinary values of both signs, some zeros, infinities, NaN and tiny ones. */
static float rnd_val(uint64_t *state) {
  uint64_t r = kernel_splitmix64(state);
  switch (r % 24) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return INFINITY;
    case 3: return -INFINITY;
    case 4: return NAN;
    case 5: return 1e-40f;
    default: return (float)((int64_t)(r >> 8) % 4001 - 2000) / 256.0f;
  }
}

/* ---- random programs ------------------------------------------------------------------ */

static tpu_op_t g_unary[TPU_OP_COUNT], g_binary[TPU_OP_COUNT];
static int g_num_unary, g_num_binary;

static void list_ops(void) {
  g_num_unary = g_num_binary = 0;
  for (int o = 0; o < TPU_OP_COUNT; o++) {
    tpu_op_t op = (tpu_op_t)o;
    if (tpu_op_family(op) == TPU_FAMILY_UNARY && op != TPU_OP_CONVERT &&
        op != TPU_OP_BITCAST_CONVERT && op != TPU_OP_IS_FINITE &&
        tpu_ew_unary_supported(op, TPU_F32)) {
      g_unary[g_num_unary++] = op;
    }
    if (tpu_op_family(op) == TPU_FAMILY_BINARY && tpu_op_arity(op) == 2 &&
        tpu_ew_binary_supported(op, TPU_F32)) {
      g_binary[g_num_binary++] = op;
    }
  }
}

/* A valid program of |ni| inputs: up to 24 instructions writing a few registers again and
 * again (so uniform and vector values share registers over time), 0..2 stores. */
static tpu_ew_program_t random_program(int ni) {
  tpu_ew_program_t p;
  for (;;) {
    memset(&p, 0, sizeof p);
    p.num_inputs = ni;
    p.num_consts = (int)(rnd() % 3);
    uint64_t cs = rnd();
    for (int k = 0; k < p.num_consts; k++) p.consts[k] = rnd_val(&cs);
    const int first = ni + p.num_consts, span = 2 + (int)(rnd() % 6);
    int written[TPU_EW_PROGRAM_MAX_REGS], nw = 0;
    for (int r = 0; r < first; r++) written[nw++] = r;
    p.num_instrs = 1 + (int)(rnd() % 24);
    for (int j = 0; j < p.num_instrs; j++) {
      tpu_ew_instr_t *in = &p.instrs[j];
      in->a = (int8_t)written[rnd() % (uint64_t)nw];
      in->b = (int8_t)written[rnd() % (uint64_t)nw];
      in->c = (int8_t)written[rnd() % (uint64_t)nw];
      switch (rnd() % 8) {
        case 0: case 1: case 2: in->op = g_binary[rnd() % (uint64_t)g_num_binary]; break;
        case 3: case 4: in->op = g_unary[rnd() % (uint64_t)g_num_unary]; break;
        case 5: in->op = TPU_OP_COMPARE; in->aux = (int8_t)(rnd() % 6); break;
        case 6: in->op = TPU_OP_SELECT; break;
        default:
          if (rnd() % 2) {
            in->op = TPU_OP_IS_FINITE;
          } else {
            in->op = TPU_OP_CONVERT;
            in->aux = rnd() % 2 ? TPU_BF16 : TPU_F16;
          }
      }
      in->dst = (int8_t)(first + (int)(rnd() % (uint64_t)span));
      bool seen = false;
      for (int w = 0; w < nw; w++) seen |= written[w] == in->dst;
      if (!seen) written[nw++] = in->dst;
    }
    p.result = p.instrs[p.num_instrs - 1].dst;
    p.num_stores = (int)(rnd() % 3);
    if (ni + p.num_stores > TPU_EW_PROGRAM_MAX_INPUTS) p.num_stores = 0;
    for (int j = 0; j < p.num_stores; j++) {
      p.stores[j] = p.instrs[rnd() % (uint64_t)p.num_instrs].dst;
    }
    if (tpu_ew_program_check(&p) == TPU_OK) return p;
  }
}

/* ---- running a program both ways ------------------------------------------------------- */

/* how input k is laid out over the (rows, n) output */
enum { IN_F32, IN_BF16, IN_STRIDED, IN_ROW_BCAST, IN_ONE_ROW, IN_SCALAR, IN_KINDS };

typedef struct layout {
  int64_t rows, n;
  int kind[TPU_EW_PROGRAM_MAX_INPUTS];
  tpu_dtype_t out_dt;
  bool store_in_place; /* store 0 writes input 0's memory (input 0 is IN_F32) */
} layout_t;

enum { MAXE = 37 * 3000 };

typedef struct run_mem {
  float *in[TPU_EW_PROGRAM_MAX_INPUTS]; /* 2 * MAXE floats each (room for strides) */
  float *out, *extra[TPU_EW_PROGRAM_MAX_STORES];
} run_mem_t;

/* Runs |p| (interpreted if p->jit is NULL) on inputs drawn from |seed|; results in m. */
static void run(const tpu_ew_program_t *p, const layout_t *l, uint64_t seed, run_mem_t *m) {
  const int64_t R = l->rows, N = l->n;
  tpu_buf_t ins[TPU_EW_PROGRAM_MAX_INPUTS], extra[TPU_EW_PROGRAM_MAX_STORES];
  const tpu_buf_t *inp[TPU_EW_PROGRAM_MAX_INPUTS], *exp[TPU_EW_PROGRAM_MAX_STORES];
  uint64_t st = seed;
  for (int k = 0; k < p->num_inputs; k++) {
    float *f = m->in[k];
    uint16_t *h = (uint16_t *)(void *)f;
    for (int64_t i = 0; i < 2 * R * N; i++) {
      float v = rnd_val(&st);
      if (l->kind[k] == IN_BF16) h[i] = tpu_f32_to_bf16(v);
      else f[i] = v;
    }
    int64_t s0 = N, s1 = 1;
    tpu_dtype_t dt = TPU_F32;
    switch (l->kind[k]) {
      case IN_BF16: dt = TPU_BF16; break;
      case IN_STRIDED: s0 = 2 * N; s1 = 2; break;
      case IN_ROW_BCAST: s0 = 1; s1 = 0; break;
      case IN_ONE_ROW: s0 = 0; break;
      case IN_SCALAR: s0 = 0; s1 = 0; break;
      default: break;
    }
    const int64_t dims[2] = {R, N}, strides[2] = {s0, s1};
    ins[k] = kernel_view(f, dt, 2, dims, strides);
    inp[k] = &ins[k];
  }
  const int64_t dims[2] = {R, N}, dense[2] = {N, 1};
  tpu_buf_t out = kernel_view(m->out, l->out_dt, 2, dims, dense);
  for (int j = 0; j < p->num_stores; j++) {
    float *mem = j == 0 && l->store_in_place ? m->in[0] : m->extra[j];
    extra[j] = kernel_view(mem, TPU_F32, 2, dims, dense);
    exp[j] = &extra[j];
  }
  CHECK_OK(tpu_kernel_ew_program_stores(p, inp, &out, exp, NULL));
}

static bool same_bits(float a, float b) {
  return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* Mismatches between two runs' outputs (reported once). */
static int64_t compare(const char *what, const tpu_ew_program_t *p, const layout_t *l,
                       const run_mem_t *a, const run_mem_t *b) {
  const int64_t numel = l->rows * l->n;
  int64_t bad = 0;
  for (int o = 0; o <= p->num_stores; o++) {
    const float *x = o == 0 ? a->out : (o == 1 && l->store_in_place ? a->in[0] : a->extra[o - 1]);
    const float *y = o == 0 ? b->out : (o == 1 && l->store_in_place ? b->in[0] : b->extra[o - 1]);
    const bool half = o == 0 && l->out_dt == TPU_BF16;
    for (int64_t i = 0; i < numel; i++) {
      float u, v;
      if (half) {
        u = tpu_bf16_to_f32(((const uint16_t *)(const void *)x)[i]);
        v = tpu_bf16_to_f32(((const uint16_t *)(const void *)y)[i]);
      } else {
        u = x[i];
        v = y[i];
      }
      if (!same_bits(u, v) && bad++ == 0) {
        fprintf(stderr, "  %s (%lldx%lld) output %d at %lld: interpreter %a, jit %a\n", what,
                (long long)l->rows, (long long)l->n, o, (long long)i, (double)u, (double)v);
      }
    }
  }
  return bad;
}

static run_mem_t g_a, g_b;

static bool alloc_mem(run_mem_t *m) {
  bool ok = true;
  for (int k = 0; k < TPU_EW_PROGRAM_MAX_INPUTS; k++) {
    ok &= (m->in[k] = malloc(2 * MAXE * 4)) != NULL;
  }
  for (int j = 0; j < TPU_EW_PROGRAM_MAX_STORES; j++) {
    ok &= (m->extra[j] = malloc(MAXE * 4)) != NULL;
  }
  ok &= (m->out = malloc(MAXE * 4)) != NULL;
  return ok;
}

static void free_mem(run_mem_t *m) {
  for (int k = 0; k < TPU_EW_PROGRAM_MAX_INPUTS; k++) free(m->in[k]);
  for (int j = 0; j < TPU_EW_PROGRAM_MAX_STORES; j++) free(m->extra[j]);
  free(m->out);
}

/* Program |p| on layout |l|: interpreted, then through its machine code; 1 if they differ. */
static int64_t both_ways(const char *what, tpu_ew_program_t *p, const layout_t *l) {
  uint64_t seed = rnd();
  p->jit = NULL;
  run(p, l, seed, &g_a);
  p->jit = tpu_ew_jit_new(p);
  CHECK(p->jit != NULL);
  run(p, l, seed, &g_b);
  tpu_ew_jit_free(p->jit);
  p->jit = NULL;
  if (!compare(what, p, l, &g_a, &g_b)) return 0;
  fprintf(stderr, "  program: %d inputs (kinds", p->num_inputs);
  for (int k = 0; k < p->num_inputs; k++) fprintf(stderr, " %d", l->kind[k]);
  fprintf(stderr, "), consts");
  for (int k = 0; k < p->num_consts; k++) fprintf(stderr, " %a", (double)p->consts[k]);
  fprintf(stderr, "\n");
  for (int j = 0; j < p->num_instrs; j++) {
    const tpu_ew_instr_t *in = &p->instrs[j];
    fprintf(stderr, "    r%d = %s r%d r%d r%d (aux %d)\n", in->dst, tpu_op_name(in->op), in->a,
            in->b, in->c, in->aux);
  }
  fprintf(stderr, "    result r%d, %d stores\n", p->result, p->num_stores);
  return 1;
}

static bool have_jit(void) { return tpu_vec_ops_for(TPU_ISA_AVX512) != NULL; }

TEST(jit_long_rows_match_interpreter) {
  if (!have_jit()) return;
  static const int64_t lens[] = {1, 2, 15, 16, 17, 31, 33, 64, 100, 1023, 1024, 1025, 3000};
  int64_t bad = 0;
  for (int t = 0; t < 300; t++) {
    int ni = 1 + (int)(rnd() % 6);
    tpu_ew_program_t p = random_program(ni);
    layout_t l = {.rows = 1, .n = lens[rnd() % (sizeof lens / sizeof lens[0])],
                  .out_dt = rnd() % 5 ? TPU_F32 : TPU_BF16};
    const bool plain = rnd() % 2; /* all f32 in place: one call per row */
    for (int k = 0; k < ni; k++) {
      int r = (int)(rnd() % 8);
      l.kind[k] = r < 4 || plain ? IN_F32 : r == 4 ? IN_SCALAR : r == 5 ? IN_BF16 : IN_STRIDED;
      if (rnd() % 4 == 0) l.kind[k] = IN_SCALAR;
    }
    if (plain) l.out_dt = TPU_F32;
    bad += both_ways("long rows", &p, &l);
  }
  CHECK(bad == 0);
}

TEST(jit_packed_short_rows_match_interpreter) {
  if (!have_jit()) return;
  int64_t bad = 0;
  for (int t = 0; t < 300; t++) {
    int ni = 1 + (int)(rnd() % 6);
    tpu_ew_program_t p = random_program(ni);
    layout_t l = {.rows = 37, .n = 1 + (int64_t)(rnd() % 70),
                  .out_dt = rnd() % 4 ? TPU_F32 : TPU_BF16};
    for (int k = 0; k < ni; k++) l.kind[k] = (int)(rnd() % IN_KINDS);
    bad += both_ways("short rows", &p, &l);
  }
  CHECK(bad == 0);
}

/* Rows of a power-of-two multiple of 16 floats (a layer norm's 64, a softmax's 32), inputs
 * broadcast along them mostly: an f32 one with one value per row is read as it is by the
 * per-row variant (tpu_ew_jit_code_rows), unless an op the code calls reads it. */
TEST(jit_per_row_inputs_match_interpreter) {
  if (!have_jit()) return;
  static const int64_t lens[] = {16, 32, 64, 128, 256, 512};
  int64_t bad = 0;
  for (int t = 0; t < 300; t++) {
    int ni = 1 + (int)(rnd() % 6);
    tpu_ew_program_t p = random_program(ni);
    layout_t l = {.rows = 1 + (int64_t)(rnd() % 40),
                  .n = lens[rnd() % (sizeof lens / sizeof lens[0])],
                  .out_dt = rnd() % 4 ? TPU_F32 : TPU_BF16};
    for (int k = 0; k < ni; k++) {
      l.kind[k] = rnd() % 2 ? IN_ROW_BCAST : (int)(rnd() % IN_KINDS);
    }
    bad += both_ways("per-row inputs", &p, &l);
  }
  CHECK(bad == 0);
}

/* The per-row variant itself: a layer norm's tail, (x - mean) * rstd, over 3 rows of 32
 * called directly, reads mean and rstd once per row; refused where a call reads a per-row
 * input, for a row under 16 floats, and for an input both uniform and per row. */
TEST(jit_per_row_variant_reads_one_value_per_row) {
  if (!have_jit()) return;
  const tpu_ew_program_t tail = {
      .num_inputs = 3, .num_instrs = 2,
      .instrs = {{TPU_OP_SUB, 3, 0, 1}, {TPU_OP_MUL, 3, 3, 2}}, .result = 3};
  tpu_ew_jit_t *j = tpu_ew_jit_new(&tail);
  CHECK(j != NULL);
  if (!j) return;
  const tpu_ew_jit_code_t *code = tpu_ew_jit_code_rows(j, 0, 6, 7); /* 128-byte rows */
  CHECK(code != NULL && code != tpu_ew_jit_code(j, 0));
  CHECK(tpu_ew_jit_code_rows(j, 0, 6, 7) == code);
  CHECK(tpu_ew_jit_code_rows(j, 0, 6, 5) == NULL); /* 8 floats */
  CHECK(tpu_ew_jit_code_rows(j, 2, 6, 7) == NULL);
  CHECK(tpu_ew_jit_code_rows(j, 0, 0, 7) == NULL);
  if (!code) {
    tpu_ew_jit_free(j);
    return;
  }
  float x[96], y[97], mean[3] = {1.0f, -2.0f, 0.5f}, rstd[3] = {2.0f, 0.25f, -1.0f};
  for (int i = 0; i < 96; i++) x[i] = (float)(i % 7) - 3.0f;
  y[96] = 42.0f;
  tpu_ew_jit_args_t a = {.in = {x, mean, rstd}, .out = {y}};
  tpu_ew_jit_set_count(&a, 96);
  code->fn(&a);
  for (int i = 0; i < 96; i++) CHECK(y[i] == (x[i] - mean[i / 32]) * rstd[i / 32]);
  CHECK(y[96] == 42.0f);
  tpu_ew_jit_free(j);
  tpu_ew_program_t with_log = tail; /* LOG reads input 1 itself: the code would call it */
  with_log.instrs[1] = (tpu_ew_instr_t){.op = TPU_OP_LOG, .dst = 3, .a = 1};
  tpu_ew_jit_t *jl = tpu_ew_jit_new(&with_log);
  CHECK(jl != NULL);
  CHECK(tpu_ew_jit_code_rows(jl, 0, 2, 7) == NULL);
  CHECK(tpu_ew_jit_code_rows(jl, 0, 1, 7) != NULL); /* input 0 is read inline only */
  tpu_ew_jit_free(jl);
}

/* EXP and ERF are emitted inline (the vec.h functions' instructions): over a sweep of 2^20
 * bit patterns spanning every exponent, both signs, infinities and NaNs, as the vec.h loop. */
static void check_inline_sweep(tpu_op_t op) {
  enum { N = 1 << 20 };
  const tpu_ew_program_t prog = {.num_inputs = 1, .num_instrs = 1, .instrs = {{op, 1, 0}},
                                 .result = 1};
  float *x = malloc(N * 4), *want = malloc(N * 4), *got = malloc(N * 4);
  if (!x || !want || !got) {
    CHECK(!"out of memory");
    free(x);
    free(want);
    free(got);
    return;
  }
  for (uint32_t i = 0; i < N; i++) {
    uint32_t u = i * 4099u + (i >> 9); /* 4099 * 2^20 wraps the 32-bit range once */
    memcpy(&x[i], &u, 4);
  }
  /* the functions' own edges: interval ends of erf, exp's clamps, and their neighbours */
  static const float kEdges[] = {0.0f, 0.25f, 0.5f, 1.0f, 3.9921875f, 4.0f, 88.5f, 89.0f,
                                 104.0f, 1e-30f, INFINITY, NAN};
  int n = 0;
  for (size_t e = 0; e < sizeof kEdges / sizeof kEdges[0]; e++) {
    for (int sign = 0; sign < 2; sign++) {
      float v = sign ? -kEdges[e] : kEdges[e];
      x[n++] = v;
      x[n++] = nextafterf(v, INFINITY);
      x[n++] = nextafterf(v, -INFINITY);
    }
  }
  tpu_ew_program_t p = prog;
  const int64_t dims[1] = {N}, unit[1] = {1};
  tpu_buf_t bx = kernel_view(x, TPU_F32, 1, dims, unit);
  tpu_buf_t bw = kernel_view(want, TPU_F32, 1, dims, unit);
  tpu_buf_t bg = kernel_view(got, TPU_F32, 1, dims, unit);
  const tpu_buf_t *ins[1] = {&bx};
  CHECK_OK(tpu_kernel_unary(op, &bx, &bw, NULL));
  p.jit = tpu_ew_jit_new(&p);
  CHECK(p.jit != NULL);
  CHECK_OK(tpu_kernel_ew_program(&p, ins, &bg, NULL));
  tpu_ew_jit_free(p.jit);
  int64_t bad = 0;
  for (int64_t i = 0; i < N; i++) {
    if (!same_bits(want[i], got[i]) && bad++ == 0) {
      fprintf(stderr, "  %s(%a): vec.h %a, jit %a\n", tpu_op_name(op), (double)x[i],
              (double)want[i], (double)got[i]);
    }
  }
  CHECK(bad == 0);
  free(x);
  free(want);
  free(got);
}

TEST(jit_inline_exp_and_erf_match_vec_loops_everywhere) {
  if (!have_jit()) return;
  check_inline_sweep(TPU_OP_EXP);
  check_inline_sweep(TPU_OP_ERF);
}

/* Every input broadcast over everything: the whole program runs before the loop. */
TEST(jit_all_uniform_inputs_match_interpreter) {
  if (!have_jit()) return;
  int64_t bad = 0;
  for (int t = 0; t < 100; t++) {
    int ni = 1 + (int)(rnd() % 4);
    tpu_ew_program_t p = random_program(ni);
    layout_t l = {.rows = t % 2 ? 37 : 1, .n = 1 + (int64_t)(rnd() % 1500), .out_dt = TPU_F32};
    for (int k = 0; k < ni; k++) l.kind[k] = IN_SCALAR;
    bad += both_ways("uniform", &p, &l);
  }
  CHECK(bad == 0);
}

/* An optimizer-like update: store 0 writes the memory of input 0, which it replaces. */
TEST(jit_store_in_place_matches_interpreter) {
  if (!have_jit()) return;
  int64_t bad = 0;
  for (int t = 0; t < 100; t++) {
    int ni = 1 + (int)(rnd() % 5);
    tpu_ew_program_t p;
    do p = random_program(ni); while (p.num_stores == 0);
    layout_t l = {.rows = t % 2 ? 37 : 1, .n = 1 + (int64_t)(rnd() % 2100), .out_dt = TPU_F32,
                  .store_in_place = true};
    for (int k = 0; k < ni; k++) l.kind[k] = k == 0 || rnd() % 2 ? IN_F32 : IN_SCALAR;
    bad += both_ways("in place", &p, &l);
  }
  CHECK(bad == 0);
}

/* gelu over 17 elements, called directly: the code for one set of broadcast inputs is
 * generated once and reused, a second set gets a second variant; with a LOG (a call, which
 * splits the loop) the code is blocked (uses the scratch blocks), without it not. */
TEST(jit_generates_code_per_broadcast_set) {
  if (!have_jit()) return;
  const tpu_ew_program_t gelu = {
      .num_inputs = 1, .num_consts = 3, .consts = {0.70710678f, 1.0f, 0.5f},
      .num_instrs = 5, .instrs = {{TPU_OP_MUL, 4, 0, 1}, {TPU_OP_ERF, 4, 4, 0},
                                  {TPU_OP_ADD, 4, 4, 2}, {TPU_OP_MUL, 4, 4, 0},
                                  {TPU_OP_MUL, 4, 4, 3}}, .result = 4};
  tpu_ew_jit_t *j = tpu_ew_jit_new(&gelu);
  CHECK(j != NULL);
  if (!j) return;
  const tpu_ew_jit_code_t *vec = tpu_ew_jit_code(j, 0), *one = tpu_ew_jit_code(j, 1);
  CHECK(vec != NULL && one != NULL && vec != one);
  if (!vec || !one) return;
  CHECK(tpu_ew_jit_code(j, 0) == vec);
  CHECK(!vec->blocked && !one->blocked);
  tpu_ew_program_t with_log = gelu;
  with_log.instrs[with_log.num_instrs++] = (tpu_ew_instr_t){.op = TPU_OP_LOG, .dst = 4, .a = 4};
  tpu_ew_jit_t *jl = tpu_ew_jit_new(&with_log);
  const tpu_ew_jit_code_t *lv = jl ? tpu_ew_jit_code(jl, 0) : NULL;
  const tpu_ew_jit_code_t *l1 = jl ? tpu_ew_jit_code(jl, 1) : NULL;
  CHECK(lv && lv->blocked);
  CHECK(l1 && !l1->blocked); /* with x broadcast, log runs once, before the loop */
  tpu_ew_jit_free(jl);
  static float scratch[TPU_EW_PROGRAM_MAX_REGS * TPU_EW_JIT_BLOCK];
  float x[20], y[20];
  for (int i = 0; i < 20; i++) x[i] = (float)(i - 10) / 4.0f;
  tpu_ew_jit_args_t a = {.in = {x, &gelu.consts[0], &gelu.consts[1], &gelu.consts[2]},
                         .out = {y}, .scratch = scratch};
  y[17] = 42.0f;
  tpu_ew_jit_set_count(&a, 17);
  vec->fn(&a);
  for (int i = 0; i < 17; i++) {
    float want = x[i] * 0.5f * (1.0f + erff(x[i] * 0.70710678f));
    CHECK(fabsf(y[i] - want) <= 1e-6f * (1.0f + fabsf(want)));
  }
  CHECK(y[17] == 42.0f); /* the tail's masked store stops at 17 */
  x[0] = 1.5f;
  one->fn(&a);
  for (int i = 0; i < 17; i++) CHECK(y[i] == y[0]);
  CHECK(fabsf(y[0] - 1.5f * 0.5f * (1.0f + erff(1.5f * 0.70710678f))) < 1e-6f);
  tpu_ew_jit_free(j);
}

/* A pool of 4 threads splits one call of a new program's JIT: every thread asks for the
 * same variant at once; one generates it, the others wait for it and run it (results as
 * the interpreter's, one thread). Then again with more broadcast sets than a program keeps
 * variants for (8): the ones beyond are interpreted, with the same results. */
TEST(jit_threads_share_variants) {
  if (!have_jit()) return;
  tpu_pool_t *pool = NULL;
  CHECK_OK(tpu_pool_create(4, tpu_allocator_system(), &pool));
  if (!pool) return;
  static const tpu_ew_program_t prog = {
      .num_inputs = 8, .num_consts = 1, .consts = {0.5f}, .num_instrs = 8,
      .instrs = {{TPU_OP_MUL, 9, 0, 8}, {TPU_OP_ADD, 9, 9, 1}, {TPU_OP_EXP, 10, 2},
                 {TPU_OP_SUB, 9, 9, 10}, {TPU_OP_MAX, 9, 9, 3}, {TPU_OP_MUL, 10, 4, 5},
                 {TPU_OP_ADD, 9, 9, 10}, {TPU_OP_DIV, 9, 9, 6}},
      .result = 9};
  enum { N = 37 * 3000 };
  int64_t bad = 0;
  tpu_ew_jit_t *jit = tpu_ew_jit_new(&prog);
  CHECK(jit != NULL);
  for (uint32_t set = 0; set < 12; set++) { /* inputs 0..3 broadcast as the bits of set */
    tpu_ew_program_t p = prog;
    layout_t l = {.rows = 37, .n = 3000, .out_dt = TPU_F32};
    for (int k = 0; k < 8; k++) l.kind[k] = (k < 4 && (set >> k & 1)) ? IN_SCALAR : IN_F32;
    uint64_t seed = rnd();
    run(&p, &l, seed, &g_a);
    p.jit = jit;
    /* the same call through the pool */
    const int64_t dims[2] = {37, 3000}, dense[2] = {3000, 1};
    tpu_buf_t ins[8], out = kernel_view(g_b.out, TPU_F32, 2, dims, dense);
    const tpu_buf_t *inp[8];
    uint64_t st = seed;
    for (int k = 0; k < 8; k++) {
      for (int64_t i = 0; i < 2 * N; i++) g_b.in[k][i] = rnd_val(&st);
      const int64_t s[2] = {l.kind[k] == IN_SCALAR ? 0 : 3000, l.kind[k] == IN_SCALAR ? 0 : 1};
      ins[k] = kernel_view(g_b.in[k], TPU_F32, 2, dims, s);
      inp[k] = &ins[k];
    }
    CHECK_OK(tpu_kernel_ew_program(&p, inp, &out, pool));
    bad += compare("pool", &p, &l, &g_a, &g_b) ? 1 : 0;
    CHECK((tpu_ew_jit_code(jit, set) != NULL) == (set < 8)); /* 8 variants kept */
  }
  tpu_ew_jit_free(jit);
  CHECK(bad == 0);
  tpu_pool_destroy(pool);
}

TEST(jit_off_with_env) {
  const tpu_ew_program_t neg = {.num_inputs = 1, .num_instrs = 1,
                                .instrs = {{TPU_OP_NEG, 1, 0}}, .result = 1};
  setenv("TORCHTPU_EW_JIT", "0", 1);
  CHECK(tpu_ew_jit_new(&neg) == NULL);
  unsetenv("TORCHTPU_EW_JIT");
  tpu_ew_jit_t *j = tpu_ew_jit_new(&neg);
  CHECK((j != NULL) == have_jit());
  tpu_ew_jit_free(j);
}

int main(void) {
  list_ops();
  if (!alloc_mem(&g_a) || !alloc_mem(&g_b)) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  RUN(jit_long_rows_match_interpreter);
  RUN(jit_packed_short_rows_match_interpreter);
  RUN(jit_per_row_inputs_match_interpreter);
  RUN(jit_per_row_variant_reads_one_value_per_row);
  RUN(jit_inline_exp_and_erf_match_vec_loops_everywhere);
  RUN(jit_all_uniform_inputs_match_interpreter);
  RUN(jit_store_in_place_matches_interpreter);
  RUN(jit_generates_code_per_broadcast_set);
  RUN(jit_threads_share_variants);
  RUN(jit_off_with_env);
  free_mem(&g_a);
  free_mem(&g_b);
  return check_report();
}
