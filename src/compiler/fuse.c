/* fuse.c: kernel fusion planning and the fused programs (see fuse.h).
 *
 * Planning is one backward sweep. When a node is reached all its users have been, so we
 * know whether they all sit in one group, and in which roles:
 *   POST  elementwise members of the group's shape (the epilogue, or the whole chain)
 *   HEAD  the REDUCE / DOT_GENERAL / CONVOLUTION whose result the POST members read
 *   PRE   elementwise members computing a REDUCE head's operand (the prologue)
 * Programs are then built per group (registers allocated by remaining uses; bf16 / f16
 * intermediates rounded as the unfused kernels round them, so results are bit for bit
 * those of the unfused ops). A group whose program does not fit the kernel's limits runs
 * unfused.
 */
#include <string.h>

#include "compiler/fuse.h"
#include "compiler/rewrite.h"

/* RESHAPE: a reshape of the head's result (reductions with keepdim) the epilogue reads;
 * it is no instruction, the head writes the same bytes with its own dims. */
enum fuse_role { ROLE_NONE, ROLE_PRE, ROLE_HEAD, ROLE_POST, ROLE_RESHAPE };

#define FUSE_MAX_MEMBERS 28 /* per program: at most 2 instructions each, 64 in all */

static bool f32ish(tpu_dtype_t dt) { return dt == TPU_F32 || dt == TPU_BF16 || dt == TPU_F16; }

static tpu_dtype_t dtype_of(const tpu_graph_t *g, tpu_value_t v) {
  return tpu_graph_node(g, v)->dtype;
}

static bool float_unary(tpu_op_t op) {
  switch (op) {
    case TPU_OP_ABS: case TPU_OP_NEG: case TPU_OP_EXP: case TPU_OP_EXPM1: case TPU_OP_LOG:
    case TPU_OP_LOG1P: case TPU_OP_SQRT: case TPU_OP_RSQRT: case TPU_OP_TANH:
    case TPU_OP_LOGISTIC: case TPU_OP_SIN: case TPU_OP_COS: case TPU_OP_TAN: case TPU_OP_ERF:
    case TPU_OP_FLOOR: case TPU_OP_CEIL: case TPU_OP_ROUND_EVEN: case TPU_OP_SIGN:
      return true;
    default:
      return false;
  }
}

static bool float_binary(tpu_op_t op) {
  switch (op) {
    case TPU_OP_ADD: case TPU_OP_SUB: case TPU_OP_MUL: case TPU_OP_DIV: case TPU_OP_REM:
    case TPU_OP_POW: case TPU_OP_MAX: case TPU_OP_MIN: case TPU_OP_ATAN2:
      return true;
    default:
      return false;
  }
}

bool tpu_fuse_elementwise(const tpu_graph_t *g, const tpu_node_t *n) {
  const tpu_value_t *o = n->operands;
  switch (n->op) {
    case TPU_OP_CONVERT:
      return f32ish(n->dtype) && f32ish(dtype_of(g, o[0]));
    case TPU_OP_COMPARE:
      return f32ish(dtype_of(g, o[0])) && f32ish(dtype_of(g, o[1]));
    case TPU_OP_IS_FINITE: /* a predicate, like COMPARE */
      return f32ish(dtype_of(g, o[0]));
    case TPU_OP_SELECT:
      return f32ish(n->dtype) && dtype_of(g, o[0]) == TPU_BOOL && f32ish(dtype_of(g, o[1])) &&
             f32ish(dtype_of(g, o[2]));
    case TPU_OP_CLAMP:
      return f32ish(n->dtype) && f32ish(dtype_of(g, o[0])) && f32ish(dtype_of(g, o[1])) &&
             f32ish(dtype_of(g, o[2]));
    default:
      if (float_unary(n->op)) return f32ish(n->dtype) && f32ish(dtype_of(g, o[0]));
      if (float_binary(n->op)) {
        return f32ish(n->dtype) && f32ish(dtype_of(g, o[0])) && f32ish(dtype_of(g, o[1]));
      }
      return false;
  }
}

/* A node that can head a group (run first, then the epilogue over its result). */
static bool head_fusible(const tpu_graph_t *g, const tpu_node_t *n) {
  switch (n->op) {
    case TPU_OP_REDUCE:
      return f32ish(n->dtype) && f32ish(dtype_of(g, n->operands[0])) &&
             n->attrs.reduce.kind <= TPU_REDUCE_MIN; /* SUM, PROD, MAX, MIN */
    case TPU_OP_DOT_GENERAL:
    case TPU_OP_CONVOLUTION:
      return f32ish(n->dtype);
    default:
      return false;
  }
}

/* Whether a REDUCE head may take a prologue: a non-empty operand of rank >= 1. */
static bool prologue_ok(const tpu_graph_t *g, const tpu_node_t *head) {
  if (head->op != TPU_OP_REDUCE) return false;
  const tpu_node_t *x = tpu_graph_node(g, head->operands[0]);
  int64_t numel;
  return x->shape.rank >= 1 && tpu_shape_numel(&x->shape, &numel) && numel > 0;
}

/* A splat constant a program can hold in a register: its value as f32. */
static bool const_f32(const tpu_graph_t *g, tpu_value_t v, float *out) {
  const tpu_node_t *k = pass_splat(g, v);
  if (!k || !(f32ish(k->dtype) || k->dtype == TPU_BOOL)) return false;
  if (k->dtype == TPU_BOOL) {
    *out = k->attrs.constant.ivalue ? 1.0f : 0.0f;
    return true;
  }
  uint16_t h[2] = {0, 0};
  float f = 0;
  tpu_shape_t rank0;
  memset(&rank0, 0, sizeof rank0);
  tpu_buf_t b = tpu_buf_dense(k->dtype == TPU_F32 ? (void *)&f : (void *)h, k->dtype, &rank0);
  if (tpu_kernel_fill(&b, k->attrs.constant.value, k->attrs.constant.ivalue, NULL) != TPU_OK) {
    return false;
  }
  if (k->dtype == TPU_BF16) f = tpu_bf16_to_f32(h[0]);
  if (k->dtype == TPU_F16) f = tpu_f16_to_f32(h[0]);
  *out = f;
  return true;
}

static int nonconst_operands(const tpu_graph_t *g, const tpu_node_t *n) {
  int k = 0;
  float f;
  for (int i = 0; i < n->num_operands; i++) k += !const_f32(g, n->operands[i], &f);
  return k;
}

/* ---- planning ----------------------------------------------------------------------- */

typedef struct plan_scratch {
  int *uses;           /* operand slots reading each value */
  int *user_group;     /* -1 unset, -2 users in different groups or unfusible */
  unsigned char *user_role; /* bit 1: a POST user, bit 2: a PRE or HEAD user */
  bool *is_out;
} plan_scratch_t;

/* |gr|'s outside inputs other than |v| into |set| (which may be gr->ext: filtered in
 * place); their count. */
static int ext_without(const fuse_group_t *gr, tpu_value_t v, tpu_value_t *set) {
  int k = 0;
  for (int i = 0; i < gr->num_ext; i++) {
    if (gr->ext[i] != v) set[k++] = gr->ext[i];
  }
  return k;
}

/* Adds |u| to the |*k| distinct values of |set| unless it is there; false when it does
 * not fit FUSE_EXT_CAP. */
static bool ext_add(tpu_value_t *set, int *k, tpu_value_t u) {
  for (int j = 0; j < *k; j++) {
    if (set[j] == u) return true;
  }
  if (*k == FUSE_EXT_CAP) return false;
  set[(*k)++] = u;
  return true;
}

/* The distinct non-constant values a plain group's members read from outside it once |v|
 * (|node|) joins: |gr|'s set without v, plus v's operands, into |set| (which may be
 * gr->ext). The count, or -1 when it does not fit FUSE_EXT_CAP (then only the upper bound
 * post_ext is known). */
static int ext_after(const tpu_graph_t *g, const fuse_group_t *gr, const tpu_node_t *node,
                     tpu_value_t v, tpu_value_t *set) {
  if (gr->num_ext < 0) return -1;
  int k = ext_without(gr, v, set);
  for (int i = 0; i < node->num_operands; i++) {
    float f;
    if (!const_f32(g, node->operands[i], &f) && !ext_add(set, &k, node->operands[i])) return -1;
  }
  return k;
}

/* Whether a head's result |out| (the head, or its keepdim reshape) may be stored in the
 * group's output, of dtype |root_dt|, before the epilogue reads it. The head's kernel
 * accumulates in f32 and rounds once into the buffer it is given: exact when root_dt is
 * the head's own dtype, or when the head is f32 and every user converts it to root_dt
 * first (a bf16 matmul: f32 product, CONVERT). Otherwise a bf16 addmm would round its
 * product before adding beta * self, where unfused kernels round once at the end (and a
 * bf16 head in an f32 output would skip its own rounding). */
static bool head_store_exact(const tpu_graph_t *g, tpu_value_t out, tpu_dtype_t root_dt,
                             int num_nodes) {
  tpu_dtype_t dt = dtype_of(g, out);
  if (dt == root_dt) return true;
  if (dt != TPU_F32) return false;
  for (int u = out + 1; u < num_nodes; u++) {
    const tpu_node_t *un = tpu_graph_node(g, u);
    for (int i = 0; i < un->num_operands; i++) {
      if (un->operands[i] == out && !(un->op == TPU_OP_CONVERT && un->dtype == root_dt)) {
        return false;
      }
    }
  }
  return true;
}

static int new_group(fuse_plan_t *p, tpu_value_t v, tpu_value_t head) {
  int gi = p->num_groups++;
  fuse_group_t *gr = &p->groups[gi];
  memset(gr, 0, sizeof *gr);
  gr->root = v;
  gr->head = head;
  gr->head_out = head;
  gr->reshape = TPU_NO_VALUE;
  gr->fused = -1;
  gr->side = gr->tail = gr->attached = -1;
  gr->num_ext = -1; /* set by the caller for a plain group */
  return gi;
}

static void plan_groups(const tpu_graph_t *g, fuse_plan_t *p, plan_scratch_t *s) {
  for (int v = p->n - 1; v >= 0; v--) {
    const tpu_node_t *node = tpu_graph_node(g, v);
    bool ew = tpu_fuse_elementwise(g, node), head = !ew && head_fusible(g, node);
    int gi = -1;
    unsigned char role = ROLE_NONE;
    int ug = s->user_group[v];
    if ((ew || head) && ug >= 0 && !s->is_out[v]) {
      fuse_group_t *gr = &p->groups[ug];
      const tpu_node_t *root = tpu_graph_node(g, gr->root);
      bool post_users = s->user_role[v] == 1, pre_users = s->user_role[v] == 2;
      int ext = nonconst_operands(g, node);
      if (ew && post_users && tpu_shape_equal(&node->shape, &root->shape) &&
          gr->num_post < FUSE_MAX_MEMBERS &&
          gr->post_ext + ext - s->uses[v] <= TPU_EW_PROGRAM_MAX_INPUTS) {
        gi = ug;
        role = ROLE_POST;
        gr->num_post++;
        gr->post_ext += ext - s->uses[v];
        gr->num_ext = ext_after(g, gr, node, v, gr->ext);
      } else if (ew && pre_users && gr->head != TPU_NO_VALUE &&
                 prologue_ok(g, tpu_graph_node(g, gr->head)) &&
                 tpu_shape_equal(&node->shape,
                                 &tpu_graph_node(g, tpu_graph_node(g, gr->head)->operands[0])->shape) &&
                 gr->num_pre < FUSE_MAX_MEMBERS) {
        int head_refs = tpu_graph_node(g, gr->head)->operands[0] == v;
        int pre_ext = gr->pre_ext + ext - (s->uses[v] - head_refs);
        if (pre_ext <= TPU_EW_PROGRAM_MAX_INPUTS) {
          gi = ug;
          role = ROLE_PRE;
          gr->num_pre++;
          gr->pre_ext = pre_ext;
        }
      } else if (head && post_users && gr->head == TPU_NO_VALUE &&
                 (tpu_shape_equal(&node->shape, &root->shape) ||
                  (gr->reshape != TPU_NO_VALUE &&
                   tpu_graph_node(g, gr->reshape)->operands[0] == v)) &&
                 gr->post_ext + 1 - s->uses[v] <= TPU_EW_PROGRAM_MAX_INPUTS &&
                 head_store_exact(g, gr->reshape != TPU_NO_VALUE ? gr->reshape : v,
                                  root->dtype, p->n)) {
        gi = ug;
        role = ROLE_HEAD;
        gr->num_ext = -1; /* the head reads its own operands */
        gr->head = v;
        gr->head_out = gr->reshape != TPU_NO_VALUE ? gr->reshape : v;
        gr->post_ext += 1 - s->uses[v];
      }
    }
    if (node->op == TPU_OP_RESHAPE && ug >= 0 && !s->is_out[v] && s->user_role[v] == 1) {
      /* keepdim: reduce -> reshape -> epilogue; the reshape joins if its operand may head */
      fuse_group_t *gr = &p->groups[ug];
      const tpu_node_t *x = tpu_graph_node(g, node->operands[0]);
      const tpu_node_t *root = tpu_graph_node(g, gr->root);
      bool rows_kept = x->shape.rank == 0 ||
                       (node->shape.rank >= 1 && node->shape.dims[0] == x->shape.dims[0]);
      if (gr->head == TPU_NO_VALUE && gr->reshape == TPU_NO_VALUE && head_fusible(g, x) &&
          rows_kept && tpu_shape_equal(&node->shape, &root->shape) &&
          gr->post_ext + 1 - s->uses[v] <= TPU_EW_PROGRAM_MAX_INPUTS) {
        gi = ug;
        role = ROLE_RESHAPE;
        gr->num_ext = -1;
        gr->reshape = v;
        gr->post_ext += 1 - s->uses[v];
      }
    }
    if (gi < 0 && ew && f32ish(node->dtype)) {
      gi = new_group(p, v, TPU_NO_VALUE);
      role = ROLE_POST;
      fuse_group_t *gr = &p->groups[gi];
      gr->num_post = 1;
      gr->post_ext = nonconst_operands(g, node);
      gr->num_ext = 0; /* an empty set, then the root's operands */
      gr->num_ext = ext_after(g, gr, node, v, gr->ext);
    } else if (gi < 0 && head) {
      gi = new_group(p, v, v);
      role = ROLE_HEAD;
    }
    p->group_of[v] = gi;
    p->role[v] = role;
    for (int i = 0; i < node->num_operands; i++) {
      tpu_value_t u = node->operands[i];
      if (gi < 0) {
        s->user_group[u] = -2;
        continue;
      }
      if (s->user_group[u] == -1) s->user_group[u] = gi;
      else if (s->user_group[u] != gi) s->user_group[u] = -2;
      s->user_role[u] |= (role == ROLE_POST || role == ROLE_RESHAPE) ? 1 : 2;
    }
  }
}

/* ---- multi-output fusion -------------------------------------------------------------- */

static bool plain_group(const fuse_group_t *gr) {
  return gr->head == TPU_NO_VALUE && gr->reshape == TPU_NO_VALUE && gr->num_ext >= 0;
}

static int find_group(int *into, int gi) {
  while (into[gi] != gi) {
    into[gi] = into[into[gi]];
    gi = into[gi];
  }
  return gi;
}

/* The outside inputs of plain group |gr| merged with the plain group |h| whose root |u| it
 * reads, into |set|: their count, or -1 when the merged program's members, inputs and
 * stores do not fit. */
static int merged_inputs(const fuse_group_t *gr, const fuse_group_t *h, tpu_value_t u,
                         tpu_value_t *set) {
  if (gr->num_post + h->num_post > FUSE_MAX_MEMBERS ||
      gr->num_stores + h->num_stores + 1 > TPU_EW_PROGRAM_MAX_STORES) {
    return -1;
  }
  int k = ext_without(gr, u, set);
  for (int i = 0; i < h->num_ext; i++) {
    if (!ext_add(set, &k, h->ext[i])) return -1;
  }
  int stores = gr->num_stores + h->num_stores + 1;
  return k + stores <= TPU_EW_PROGRAM_MAX_INPUTS ? k : -1;
}

/* Multi-output fusion: a plain elementwise group whose root is a graph output read only by
 * another plain group of its shape joins that group, the root becoming one of the step's
 * stores (AdamW: the new moments join the parameter's update, one pass over the four
 * tensors instead of three passes). Run after the sweep, which keeps outputs out of
 * groups; merges go through |into| (n entries) and reach group_of in one pass. */
static void merge_stores(const tpu_graph_t *g, fuse_plan_t *p, const plan_scratch_t *s,
                         int *into) {
  for (int gi = 0; gi < p->num_groups; gi++) into[gi] = gi;
  for (int gi = 0; gi < p->num_groups; gi++) {
    fuse_group_t *gr = &p->groups[gi];
    if (into[gi] != gi || !plain_group(gr)) continue;
    const tpu_node_t *root = tpu_graph_node(g, gr->root);
    for (int i = 0; i < gr->num_ext;) {
      tpu_value_t u = gr->ext[i];
      int hi = p->group_of[u] >= 0 ? find_group(into, p->group_of[u]) : -1;
      int ug = s->user_group[u] >= 0 ? find_group(into, s->user_group[u]) : -1;
      fuse_group_t *h = hi >= 0 ? &p->groups[hi] : NULL;
      tpu_value_t set[FUSE_EXT_CAP];
      int k = -1;
      if (h && hi != gi && ug == gi && h->root == u && s->is_out[u] && plain_group(h) &&
          tpu_shape_equal(&tpu_graph_node(g, u)->shape, &root->shape)) {
        k = merged_inputs(gr, h, u, set);
      }
      if (k < 0) {
        i++;
        continue;
      }
      into[hi] = gi;
      gr->num_post += h->num_post;
      gr->num_stores += h->num_stores + 1;
      gr->post_ext = k;
      gr->num_ext = k;
      memcpy(gr->ext, set, sizeof set[0] * (size_t)k);
      p->stored[u] = true;
      i = 0; /* the merged group's own inputs may be roots of more groups */
    }
  }
  for (int v = 0; v < p->n; v++) {
    if (p->group_of[v] >= 0) p->group_of[v] = find_group(into, p->group_of[v]);
  }
}

/* ---- programs ----------------------------------------------------------------------- */

/* A new program slot in plan->progs (-1 and plan->status set when out of memory). */
static int new_prog(fuse_plan_t *p) {
  if (p->num_progs == p->cap_progs) {
    int cap = p->cap_progs ? p->cap_progs * 2 : 16;
    tpu_ew_program_t *grown = NULL;
    tpu_status_t st = tpu_allocator_calloc(p->host, (size_t)cap, sizeof *grown, "fuse",
                                           (void **)&grown);
    if (st != TPU_OK) {
      if (p->status == TPU_OK) p->status = st;
      return -1;
    }
    if (p->num_progs) memcpy(grown, p->progs, sizeof *grown * (size_t)p->num_progs);
    tpu_allocator_free(p->host, p->progs);
    p->progs = grown;
    p->cap_progs = cap;
  }
  return p->num_progs++;
}

typedef struct prog_build {
  const tpu_graph_t *g;
  const fuse_plan_t *p;
  int gi;
  unsigned char role;
  tpu_value_t bound;         /* value of input register 0 (the head's result), or none */
  int *reg_of;               /* (n) scratch, -1 between builds */
  int *cnt;                  /* (n) scratch, 0 between builds: uses inside the program */
  tpu_ew_program_t *prog;
  tpu_value_t ext[TPU_EW_PROGRAM_MAX_INPUTS];
  int num_ext;
  int reg_uses[TPU_EW_PROGRAM_MAX_REGS];
  bool reg_free[TPU_EW_PROGRAM_MAX_REGS];
} prog_build_t;

static bool in_prog(const prog_build_t *b, tpu_value_t u) {
  return b->p->group_of[u] == b->gi && b->p->role[u] == b->role;
}

static int alloc_reg(prog_build_t *b, int first_temp) {
  for (int r = first_temp; r < TPU_EW_PROGRAM_MAX_REGS; r++) {
    if (b->reg_free[r]) {
      b->reg_free[r] = false;
      return r;
    }
  }
  return -1;
}

static void release_reads(prog_build_t *b, const tpu_node_t *node, int first_temp) {
  for (int i = 0; i < node->num_operands; i++) {
    int r = b->reg_of[node->operands[i]];
    if (r >= first_temp && --b->reg_uses[r] == 0) b->reg_free[r] = true;
  }
}

static bool emit(tpu_ew_program_t *p, tpu_op_t op, int dst, int a, int bb, int c, int aux) {
  if (p->num_instrs >= TPU_EW_PROGRAM_MAX_INSTRS) return false;
  tpu_ew_instr_t *in = &p->instrs[p->num_instrs++];
  in->op = op; /* registers < TPU_EW_PROGRAM_MAX_REGS and aux < 16 fit int8_t */
  in->dst = (int8_t)dst;
  in->a = (int8_t)a;
  in->b = (int8_t)bb;
  in->c = (int8_t)c;
  in->aux = (int8_t)aux;
  return true;
}

/* Builds the program of the members with |b->role| in group |b->gi| (|mem|, node order;
 * the last one is the result). False if it does not fit. Leaves reg_of / cnt clean. */
static bool build_program(prog_build_t *b, const int *mem, int count) {
  const tpu_graph_t *g = b->g;
  tpu_ew_program_t *p = b->prog;
  memset(p, 0, sizeof *p);
  b->num_ext = 0;
  float consts[TPU_EW_PROGRAM_MAX_REGS];
  int num_consts = 0;
  bool ok = true;
  int nin = b->bound != TPU_NO_VALUE ? 1 : 0;
  /* pass A: classify operands, count uses of members */
  for (int k = 0; k < count && ok; k++) {
    const tpu_node_t *node = tpu_graph_node(g, mem[k]);
    for (int i = 0; i < node->num_operands && ok; i++) {
      tpu_value_t u = node->operands[i];
      float f;
      if (u == b->bound) continue;
      if (in_prog(b, u)) {
        b->cnt[u]++;
      } else if (b->reg_of[u] != -1) {
        continue; /* seen: an input or a constant */
      } else if (const_f32(g, u, &f)) {
        int j = 0;
        while (j < num_consts && memcmp(&consts[j], &f, sizeof f)) j++;
        if (j == num_consts) {
          if (num_consts == TPU_EW_PROGRAM_MAX_REGS) { ok = false; break; }
          consts[num_consts++] = f;
        }
        b->reg_of[u] = -(2 + j); /* constant j, numbered once the inputs are known */
      } else {
        if (b->num_ext == TPU_EW_PROGRAM_MAX_INPUTS - nin) { ok = false; break; }
        b->reg_of[u] = -(100 + b->num_ext);
        b->ext[b->num_ext++] = u;
      }
    }
  }
  int ni = nin + b->num_ext;
  int first_temp = ni + num_consts;
  if (ni == 0 || first_temp >= TPU_EW_PROGRAM_MAX_REGS) ok = false;
  /* final numbers of inputs and constants */
  for (int k = 0; k < count; k++) {
    const tpu_node_t *node = tpu_graph_node(g, mem[k]);
    for (int i = 0; i < node->num_operands; i++) {
      tpu_value_t u = node->operands[i];
      int r = b->reg_of[u];
      if (r <= -100) b->reg_of[u] = nin + (-r - 100);
      else if (r <= -2) b->reg_of[u] = ni + (-r - 2);
    }
  }
  if (b->bound != TPU_NO_VALUE) b->reg_of[b->bound] = 0;
  p->num_inputs = ni;
  p->num_consts = num_consts;
  memcpy(p->consts, consts, sizeof(float) * (size_t)num_consts);
  for (int r = 0; r < TPU_EW_PROGRAM_MAX_REGS; r++) {
    b->reg_free[r] = r >= first_temp;
    b->reg_uses[r] = 0;
  }
  /* pass B: instructions */
  tpu_value_t result = count ? mem[count - 1] : TPU_NO_VALUE;
  if (result != TPU_NO_VALUE) b->cnt[result]++; /* pinned: stored at the end */
  for (int k = 0; k < count - 1; k++) {
    if (b->p->stored[mem[k]]) b->cnt[mem[k]]++; /* pinned too: a store */
  }
  for (int k = 0; k < count && ok; k++) {
    tpu_value_t m = mem[k];
    const tpu_node_t *node = tpu_graph_node(g, m);
    int r[3] = {0, 0, 0};
    for (int i = 0; i < node->num_operands && i < 3; i++) r[i] = b->reg_of[node->operands[i]];
    int dst = -1;
    bool round = (node->dtype == TPU_BF16 || node->dtype == TPU_F16) && m != result;
    if (node->op == TPU_OP_CONVERT) {
      tpu_dtype_t from = dtype_of(g, node->operands[0]);
      if (node->dtype == TPU_F32 || node->dtype == from) { /* exact: same register */
        dst = r[0];
        if (dst >= first_temp) {
          b->reg_uses[dst] += b->cnt[m] - 1;
        }
        b->reg_of[m] = dst;
        continue;
      }
      release_reads(b, node, first_temp);
      dst = alloc_reg(b, first_temp);
      ok = dst >= 0 && emit(p, TPU_OP_CONVERT, dst, r[0], 0, 0, (int)node->dtype);
      round = false;
    } else if (tpu_op_family(node->op) == TPU_FAMILY_UNARY) {
      release_reads(b, node, first_temp); /* in place is safe: dst has the operand's step */
      dst = alloc_reg(b, first_temp);
      ok = dst >= 0 && emit(p, node->op, dst, r[0], 0, 0, 0);
    } else {
      /* never in place: a broadcast operand register holds one value the loop reads
       * while writing the whole block */
      dst = alloc_reg(b, first_temp);
      ok = dst >= 0;
      if (ok && node->op == TPU_OP_COMPARE) {
        ok = emit(p, TPU_OP_COMPARE, dst, r[0], r[1], 0, (int)node->attrs.compare.direction);
        round = false;
      } else if (ok && node->op == TPU_OP_SELECT) {
        ok = emit(p, TPU_OP_SELECT, dst, r[0], r[1], r[2], 0);
        round = false;
      } else if (ok && node->op == TPU_OP_CLAMP) { /* min(max(x, lo), hi), as the kernel */
        int t = alloc_reg(b, first_temp); /* not dst: max(x, lo) may be one broadcast value */
        ok = t >= 0 && emit(p, TPU_OP_MAX, t, r[1], r[0], 0, 0) &&
             emit(p, TPU_OP_MIN, dst, t, r[2], 0, 0);
        if (t >= 0) b->reg_free[t] = true;
        round = false;
      } else if (ok) {
        ok = emit(p, node->op, dst, r[0], r[1], 0, 0);
      }
      release_reads(b, node, first_temp);
      if (ok) b->reg_free[dst] = false;
    }
    if (ok && round) ok = emit(p, TPU_OP_CONVERT, dst, dst, 0, 0, (int)node->dtype);
    if (!ok) break;
    b->reg_of[m] = dst;
    b->reg_uses[dst] = b->cnt[m];
  }
  if (ok && result != TPU_NO_VALUE) p->result = b->reg_of[result];
  for (int k = 0; ok && k < count - 1; k++) {
    if (!b->p->stored[mem[k]]) continue;
    int r = b->reg_of[mem[k]];
    /* a store is an instruction's register, and takes an operand slot like an input */
    ok = r >= first_temp && p->num_stores < TPU_EW_PROGRAM_MAX_STORES &&
         p->num_inputs + p->num_stores < TPU_EW_PROGRAM_MAX_INPUTS;
    if (ok) p->stores[p->num_stores++] = (int8_t)r;
  }
  /* clean the scratch */
  for (int k = 0; k < count; k++) {
    const tpu_node_t *node = tpu_graph_node(g, mem[k]);
    for (int i = 0; i < node->num_operands; i++) b->reg_of[node->operands[i]] = -1;
    b->reg_of[mem[k]] = -1;
    b->cnt[mem[k]] = 0;
  }
  if (b->bound != TPU_NO_VALUE) b->reg_of[b->bound] = -1;
  return ok && result != TPU_NO_VALUE && tpu_ew_program_check(p) == TPU_OK;
}

/* Builds group |gi|'s programs into |st|; false if they do not fit. */
static bool build_group(const tpu_graph_t *g, fuse_plan_t *p, int gi, int *reg_of, int *cnt,
                        int *tmp, fuse_step_t *st) {
  const fuse_group_t *gr = &p->groups[gi];
  memset(st, 0, sizeof *st);
  for (int k = 0; k < 4; k++) st->prog[k] = -1;
  fused_t *f = &st->f;
  prog_build_t b;
  memset(&b, 0, sizeof b);
  b.g = g;
  b.p = p;
  b.gi = gi;
  b.reg_of = reg_of;
  b.cnt = cnt;
  f->has_head = gr->head != TPU_NO_VALUE;
  f->has_pre = gr->num_pre > 0;
  f->has_post = gr->num_post > 0;
  if (f->has_head && gr->head_out != gr->head) {
    const tpu_node_t *h = tpu_graph_node(g, gr->head);
    f->head_reshaped = true;
    f->head_rank = h->shape.rank;
    memcpy(f->head_dims, h->shape.dims, sizeof f->head_dims);
  }
  if (f->has_head && !f->has_pre) {
    const tpu_node_t *h = tpu_graph_node(g, gr->head);
    if (h->num_operands > FUSE_MAX_HEAD_IN) return false;
    for (int i = 0; i < h->num_operands; i++) st->inputs[st->num_inputs++] = h->operands[i];
    f->num_head_in = h->num_operands;
  }
  if (f->has_pre) {
    int k = 0;
    for (int i = 0; i < gr->count; i++) {
      tpu_value_t m = p->members[gr->first + i];
      if (p->role[m] == ROLE_PRE) tmp[k++] = m;
    }
    b.role = ROLE_PRE;
    b.bound = TPU_NO_VALUE;
    int idx = new_prog(p);
    if (idx < 0) return false;
    b.prog = &p->progs[idx];
    st->prog[FUSE_PRE] = idx;
    if (!build_program(&b, tmp, k)) return false;
    f->pre_in = st->num_inputs;
    f->num_pre_in = b.num_ext;
    for (int i = 0; i < b.num_ext; i++) st->inputs[st->num_inputs++] = b.ext[i];
  }
  if (f->has_post) {
    int k = 0;
    for (int i = 0; i < gr->count; i++) {
      tpu_value_t m = p->members[gr->first + i];
      if (p->role[m] == ROLE_POST) tmp[k++] = m;
    }
    b.role = ROLE_POST;
    b.bound = gr->head_out;
    int idx = new_prog(p);
    if (idx < 0) return false;
    b.prog = &p->progs[idx];
    st->prog[FUSE_POST] = idx;
    if (!build_program(&b, tmp, k)) return false;
    f->post_in = st->num_inputs;
    f->num_post_in = b.num_ext;
    for (int i = 0; i < b.num_ext; i++) st->inputs[st->num_inputs++] = b.ext[i];
    for (int i = 0; i < k - 1; i++) {
      if (p->stored[tmp[i]]) st->stores[st->num_stores++] = tmp[i]; /* the program's order */
    }
  }
  f->num_ops = gr->count;
  st->group = gi;
  st->side_root = st->tail_root = TPU_NO_VALUE;
  return true;
}


/* ---- row-wise fusion (side and tail groups of a REDUCE) ------------------------------- */

static bool layout_op(tpu_op_t op) {
  return op == TPU_OP_BROADCAST_IN_DIM || op == TPU_OP_RESHAPE || op == TPU_OP_TRANSPOSE ||
         op == TPU_OP_SLICE || op == TPU_OP_REVERSE;
}

/* The value whose memory |w| views (through layout ops), or |w|. */
static tpu_value_t view_base(const tpu_graph_t *g, tpu_value_t w) {
  for (int d = 0; d < 16; d++) {
    const tpu_node_t *n = tpu_graph_node(g, w);
    if (!layout_op(n->op) || n->num_operands != 1) return w;
    w = n->operands[0];
  }
  return w;
}

/* Whether |w| reads |root| (f32[rows, ...]) broadcast so that row r of |w| reads only row
 * r of |root|: broadcast_in_dim(root or reshape(root), dims[0] = 0), dim 0 kept. */
static bool aligned_view(const tpu_graph_t *g, tpu_value_t w, tpu_value_t root, int64_t rows) {
  const tpu_node_t *n = tpu_graph_node(g, w);
  if (n->op != TPU_OP_BROADCAST_IN_DIM || n->shape.rank < 1 || n->shape.dims[0] != rows) {
    return false;
  }
  tpu_value_t zv = n->operands[0];
  const tpu_node_t *z = tpu_graph_node(g, zv), *r = tpu_graph_node(g, root);
  if (z->shape.rank < 1 || n->attrs.broadcast.dims[0] != 0 || z->shape.dims[0] != rows ||
      r->shape.rank < 1 || r->shape.dims[0] != rows) {
    return false;
  }
  return zv == root || (z->op == TPU_OP_RESHAPE && z->operands[0] == root);
}

/* A REDUCE group that can host row-wise fusion: dim 0 kept and split into chunks. */
static bool host_ok(const tpu_graph_t *g, const fuse_plan_t *p, int gi) {
  const fuse_group_t *gr = &p->groups[gi];
  if (gr->head == TPU_NO_VALUE || gr->attached >= 0) return false;
  const tpu_node_t *h = tpu_graph_node(g, gr->head);
  return h->op == TPU_OP_REDUCE && head_fusible(g, h) && prologue_ok(g, h) &&
         !h->attrs.reduce.dims[0] && (gr->fused >= 0 || gr->count == 1);
}

/* A plain elementwise group that can be attached (fused, or one node). */
static bool guest_ok(const fuse_plan_t *p, int gi) {
  const fuse_group_t *gr = &p->groups[gi];
  return gr->head == TPU_NO_VALUE && gr->attached < 0 && gr->side < 0 && gr->tail < 0 &&
         gr->num_stores == 0 && (gr->fused >= 0 || gr->count == 1);
}

/* The step inputs of a plain group (its program's inputs, or its one node's operands). */
static int guest_inputs(const tpu_graph_t *g, const fuse_plan_t *p, int gi, const tpu_value_t **out) {
  const fuse_group_t *gr = &p->groups[gi];
  if (gr->fused >= 0) {
    *out = p->fused[gr->fused].inputs;
    return p->fused[gr->fused].num_inputs;
  }
  const tpu_node_t *n = tpu_graph_node(g, gr->root);
  *out = n->operands;
  return n->num_operands;
}

typedef struct attach_scratch {
  int *pre_reader;    /* (n) the one group whose PRE / HEAD nodes read a value, -2: several */
  int *min_other;     /* (n) the first other reader's position */
} attach_scratch_t;

static void attach_sides(const tpu_graph_t *g, fuse_plan_t *p, attach_scratch_t *a) {
  for (int v = 0; v < p->n; v++) {
    a->pre_reader[v] = -1;
    a->min_other[v] = INT32_MAX;
  }
  for (int w = 0; w < p->n; w++) {
    const tpu_node_t *n = tpu_graph_node(g, w);
    if (p->role[w] != ROLE_PRE && p->role[w] != ROLE_HEAD) continue;
    for (int i = 0; i < n->num_operands; i++) {
      int *pr = &a->pre_reader[n->operands[i]];
      *pr = *pr == -1 || *pr == p->group_of[w] ? p->group_of[w] : -2;
    }
  }
  for (int w = 0; w < p->n; w++) {
    const tpu_node_t *n = tpu_graph_node(g, w);
    for (int i = 0; i < n->num_operands; i++) {
      tpu_value_t u = n->operands[i];
      bool host_read = (p->role[w] == ROLE_PRE || p->role[w] == ROLE_HEAD) &&
                       p->group_of[w] == a->pre_reader[u];
      if (!host_read && w < a->min_other[u]) a->min_other[u] = w;
    }
  }
  for (int gi = 0; gi < p->num_groups; gi++) {
    if (!host_ok(g, p, gi)) continue;
    fuse_group_t *gr = &p->groups[gi];
    const tpu_node_t *h = tpu_graph_node(g, gr->head);
    const tpu_node_t *hx = tpu_graph_node(g, h->operands[0]);
    const fuse_step_t *fs = gr->fused >= 0 ? &p->fused[gr->fused] : NULL;
    const tpu_value_t *cand = h->operands;
    int num_cand = 1;
    if (gr->num_pre > 0) {
      cand = fs->inputs + fs->f.pre_in;
      num_cand = fs->f.num_pre_in;
    }
    for (int k = 0; k < num_cand; k++) {
      tpu_value_t c = cand[k];
      int sg = p->group_of[c];
      if (sg < 0 || sg == gi || p->groups[sg].root != c || !guest_ok(p, sg) ||
          !tpu_shape_equal(&tpu_graph_node(g, c)->shape, &hx->shape) ||
          a->pre_reader[c] != gi || a->min_other[c] <= gr->root) {
        continue;
      }
      bool clean = true; /* the host reads c only whole and row-aligned */
      for (int i = 0; fs && i < fs->num_inputs; i++) {
        if (fs->inputs[i] != c && view_base(g, fs->inputs[i]) == c) clean = false;
      }
      if (!clean) continue;
      gr->side = sg;
      p->groups[sg].attached = gi;
      break;
    }
  }
}

static void attach_tails(const tpu_graph_t *g, fuse_plan_t *p) {
  for (int ti = 0; ti < p->num_groups; ti++) {
    if (!guest_ok(p, ti) || tpu_graph_node(g, p->groups[ti].root)->shape.rank < 1) continue;
    const tpu_value_t *ins;
    int nin = guest_inputs(g, p, ti, &ins);
    int gi = -1;
    for (int i = 0; i < nin && gi < 0; i++) {
      const tpu_node_t *n = tpu_graph_node(g, ins[i]);
      if (n->op != TPU_OP_BROADCAST_IN_DIM) continue;
      tpu_value_t r = n->operands[0];
      if (tpu_graph_node(g, r)->op == TPU_OP_RESHAPE) r = tpu_graph_node(g, r)->operands[0];
      int cg = p->group_of[r];
      if (cg >= 0 && p->groups[cg].root == r && p->groups[cg].tail < 0 && host_ok(g, p, cg)) gi = cg;
    }
    if (gi < 0) continue;
    const fuse_group_t *gr = &p->groups[gi];
    const tpu_node_t *hx = tpu_graph_node(g, tpu_graph_node(g, gr->head)->operands[0]);
    if (!tpu_shape_equal(&tpu_graph_node(g, p->groups[ti].root)->shape, &hx->shape)) continue;
    tpu_value_t side = gr->side >= 0 ? p->groups[gr->side].root : TPU_NO_VALUE;
    bool ok = p->groups[ti].root > gr->root;
    for (int i = 0; i < nin && ok; i++) {
      tpu_value_t w = ins[i];
      if (aligned_view(g, w, gr->root, hx->shape.dims[0]) || w == side) continue;
      /* anything else must exist when the host runs: a value at or before it, or views
       * (never copies) of one, which the compiler gives their view early */
      tpu_value_t base = w;
      while (base > gr->root) {
        const tpu_node_t *n = tpu_graph_node(g, base);
        if (n->op != TPU_OP_BROADCAST_IN_DIM && n->op != TPU_OP_TRANSPOSE &&
            n->op != TPU_OP_SLICE && n->op != TPU_OP_REVERSE) {
          break;
        }
        base = n->operands[0];
      }
      int bg = p->group_of[base];
      ok = base <= gr->root && base != gr->root && view_base(g, base) != side &&
           !(bg >= 0 && p->groups[bg].attached >= 0);
    }
    if (!ok) continue;
    p->groups[gi].tail = ti;
    p->groups[ti].attached = gi;
  }
}

/* The host's step with its side and tail programs and all inputs in fused_t's order. */
static bool build_host(const tpu_graph_t *g, fuse_plan_t *p, int gi, int *reg_of, int *cnt,
                       fuse_step_t *out) {
  /* |out| may not alias p->fused: the old step is read while the new one is written */
  const fuse_group_t *gr = &p->groups[gi];
  fuse_step_t old;
  memset(&old, 0, sizeof old);
  for (int k = 0; k < 4; k++) old.prog[k] = -1;
  if (gr->fused >= 0) old = p->fused[gr->fused];
  fuse_step_t *st = out;
  memset(st, 0, sizeof *st);
  st->group = gi;
  st->f = old.f;
  memcpy(st->prog, old.prog, sizeof st->prog);
  st->side_root = st->tail_root = TPU_NO_VALUE;
  fused_t *f = &st->f;
  f->has_head = true;
  const tpu_node_t *h = tpu_graph_node(g, gr->head);
  tpu_value_t side = gr->side >= 0 ? p->groups[gr->side].root : TPU_NO_VALUE;
  f->head_reads_side = gr->num_pre == 0 && h->operands[0] == side;
  f->num_head_in = 0;
  if (gr->num_pre == 0 && !f->head_reads_side) {
    st->inputs[st->num_inputs++] = h->operands[0];
    f->num_head_in = 1;
  }
  int at = st->num_inputs;
  f->pre_in = at;
  for (int i = 0; i < f->num_pre_in; i++) st->inputs[st->num_inputs++] = old.inputs[old.f.pre_in + i];
  f->post_in = st->num_inputs;
  for (int i = 0; i < f->num_post_in; i++) st->inputs[st->num_inputs++] = old.inputs[old.f.post_in + i];
  int guests[2] = {gr->side, gr->tail};
  for (int k = 0; k < 2; k++) {
    int ti = guests[k];
    if (ti < 0) continue;
    const fuse_group_t *tg = &p->groups[ti];
    const tpu_value_t *ins = NULL;
    int nin = 0;
    prog_build_t b; /* its ext list outlives the branch */
    if (tg->fused >= 0) {
      st->prog[k == 0 ? FUSE_SIDE : FUSE_TAIL] = p->fused[tg->fused].prog[FUSE_POST];
      ins = p->fused[tg->fused].inputs;
      nin = p->fused[tg->fused].num_inputs;
    } else {
      int idx = new_prog(p);
      if (idx < 0) return false;
      st->prog[k == 0 ? FUSE_SIDE : FUSE_TAIL] = idx;
      tpu_ew_program_t *prog = &p->progs[idx];
      memset(&b, 0, sizeof b);
      b.g = g;
      b.p = p;
      b.gi = ti;
      b.role = ROLE_POST;
      b.bound = TPU_NO_VALUE;
      b.reg_of = reg_of;
      b.cnt = cnt;
      b.prog = prog;
      if (!build_program(&b, &tg->root, 1)) return false;
      ins = b.ext;
      nin = b.num_ext;
    }
    if (k == 0) {
      f->has_side = true;
      f->side_in = st->num_inputs;
      f->num_side_in = nin;
      st->side_root = tg->root;
    } else {
      f->has_tail = true;
      f->tail_in = st->num_inputs;
      f->num_tail_in = nin;
      st->tail_root = tg->root;
    }
    for (int i = 0; i < nin; i++) st->inputs[st->num_inputs++] = ins[i];
  }
  f->num_ops = gr->count + (gr->side >= 0 ? p->groups[gr->side].count : 0) +
               (gr->tail >= 0 ? p->groups[gr->tail].count : 0);
  return true;
}

/* ---- the plan ------------------------------------------------------------------------ */

void tpu_fuse_plan_free(fuse_plan_t *plan, tpu_allocator_t host) {
  tpu_allocator_free(host, plan->group_of);
  tpu_allocator_free(host, plan->role);
  tpu_allocator_free(host, plan->groups);
  tpu_allocator_free(host, plan->members);
  tpu_allocator_free(host, plan->fused);
  tpu_allocator_free(host, plan->needed);
  tpu_allocator_free(host, plan->stored);
  tpu_allocator_free(host, plan->progs);
  memset(plan, 0, sizeof *plan);
}

const fuse_step_t *tpu_fuse_step_at(const fuse_plan_t *plan, tpu_value_t v) {
  int gi = plan->group_of ? plan->group_of[v] : -1;
  if (gi < 0 || plan->groups[gi].fused < 0 || plan->groups[gi].root != v ||
      plan->groups[gi].attached >= 0) {
    return NULL;
  }
  return &plan->fused[plan->groups[gi].fused];
}

bool tpu_fuse_internal(const fuse_plan_t *plan, tpu_value_t v) {
  int gi = plan->group_of ? plan->group_of[v] : -1;
  return gi >= 0 && (plan->groups[gi].fused >= 0 || plan->groups[gi].attached >= 0) &&
         plan->groups[gi].root != v;
}

bool tpu_fuse_stored(const fuse_plan_t *plan, tpu_value_t v) {
  return plan->stored && plan->stored[v] && tpu_fuse_internal(plan, v);
}

bool tpu_fuse_elsewhere(const fuse_plan_t *plan, tpu_value_t v) {
  int gi = plan->group_of ? plan->group_of[v] : -1;
  return gi >= 0 && (plan->groups[gi].attached >= 0 || tpu_fuse_internal(plan, v));
}

#define ALLOC(ptr, count)                                                                  \
  if (st == TPU_OK) {                                                                      \
    st = tpu_allocator_calloc(host, (size_t)(count) + 1, sizeof *(ptr), "fuse",            \
                              (void **)&(ptr));                                            \
  }

tpu_status_t tpu_fuse_plan(const tpu_graph_t *g, bool enabled, tpu_allocator_t host,
                           fuse_plan_t *plan) {
  memset(plan, 0, sizeof *plan);
  plan->host = host;
  int n = plan->n = tpu_graph_num_nodes(g);
  tpu_status_t st = TPU_OK;
  ALLOC(plan->needed, n);
  if (st != TPU_OK) return st;
  if (!enabled) {
    for (int v = 0; v < n; v++) plan->needed[v] = true;
    return TPU_OK;
  }
  plan_scratch_t s;
  memset(&s, 0, sizeof s);
  attach_scratch_t a;
  memset(&a, 0, sizeof a);
  int *reg_of = NULL, *cnt = NULL, *tmp = NULL, *fill = NULL;
  ALLOC(plan->group_of, n);
  ALLOC(plan->stored, n);
  ALLOC(plan->role, n);
  ALLOC(plan->groups, n);
  ALLOC(plan->members, n);
  ALLOC(s.uses, n);
  ALLOC(s.user_group, n);
  ALLOC(s.user_role, n);
  ALLOC(s.is_out, n);
  ALLOC(reg_of, n);
  ALLOC(cnt, n);
  ALLOC(tmp, n);
  ALLOC(fill, n);
  if (st == TPU_OK) {
    for (int v = 0; v < n; v++) {
      const tpu_node_t *node = tpu_graph_node(g, v);
      for (int i = 0; i < node->num_operands; i++) s.uses[node->operands[i]]++;
      s.user_group[v] = -1;
      reg_of[v] = -1;
    }
    for (int o = 0; o < tpu_graph_num_outputs(g); o++) s.is_out[tpu_graph_output_value(g, o)] = true;
    plan_groups(g, plan, &s);
    /* a reshape whose head did not join stays a plain view */
    for (int gi = 0; gi < plan->num_groups; gi++) {
      fuse_group_t *gr = &plan->groups[gi];
      if (gr->reshape != TPU_NO_VALUE && gr->head_out != gr->reshape) {
        plan->group_of[gr->reshape] = -1;
        plan->role[gr->reshape] = ROLE_NONE;
        gr->reshape = TPU_NO_VALUE;
      }
    }
    merge_stores(g, plan, &s, tmp);
    /* members of each group in node order (a counting sort) */
    for (int v = 0; v < n; v++) {
      if (plan->group_of[v] >= 0) plan->groups[plan->group_of[v]].count++;
    }
    int at = 0;
    for (int gi = 0; gi < plan->num_groups; gi++) {
      plan->groups[gi].first = at;
      at += plan->groups[gi].count;
    }
    for (int v = 0; v < n; v++) {
      int gi = plan->group_of[v];
      if (gi >= 0) plan->members[plan->groups[gi].first + fill[gi]++] = v;
    }
    /* groups worth a fused step: a head with a program, or two or more elementwise ops */
    int cap = 0;
    for (int gi = 0; gi < plan->num_groups; gi++) {
      const fuse_group_t *gr = &plan->groups[gi];
      if (gr->count > 1 || gr->head != TPU_NO_VALUE) cap++; /* hosts may become fused */
    }
    ALLOC(plan->fused, cap);
    ALLOC(a.pre_reader, n);
    ALLOC(a.min_other, n);
  }
  if (st == TPU_OK) {
    int k = 0;
    for (int gi = 0; gi < plan->num_groups; gi++) {
      fuse_group_t *gr = &plan->groups[gi];
      if (gr->count <= 1) continue;
      if (build_group(g, plan, gi, reg_of, cnt, tmp, &plan->fused[k])) gr->fused = k++;
    }
    plan->num_fused = k;
    /* row-wise fusion: sides, then tails (which may read a side) */
    attach_sides(g, plan, &a);
    attach_tails(g, plan);
    for (int gi = 0; gi < plan->num_groups; gi++) {
      fuse_group_t *gr = &plan->groups[gi];
      if (gr->side < 0 && gr->tail < 0) continue;
      fuse_step_t built;
      if (build_host(g, plan, gi, reg_of, cnt, &built)) {
        int slot = gr->fused >= 0 ? gr->fused : plan->num_fused++;
        plan->fused[slot] = built;
        gr->fused = slot;
      } else { /* a guest's program does not fit: undo */
        if (gr->side >= 0) plan->groups[gr->side].attached = -1;
        if (gr->tail >= 0) plan->groups[gr->tail].attached = -1;
        gr->side = gr->tail = -1;
      }
    }
    if (plan->status != TPU_OK) st = plan->status;
  }
  if (st == TPU_OK) {
    /* a side result only its host reads (its reduction, prologue and tail) lives in one
     * chunk instead of a whole tensor */
    for (int k = 0; k < plan->num_fused; k++) {
      fuse_step_t *fs = &plan->fused[k];
      fs->side_private = fs->side_root != TPU_NO_VALUE && !s.is_out[fs->side_root];
    }
    for (int w = 0; w < n; w++) {
      const tpu_node_t *node = tpu_graph_node(g, w);
      for (int i = 0; i < node->num_operands; i++) {
        tpu_value_t u = node->operands[i];
        int sg = plan->group_of[u];
        if (sg < 0 || plan->groups[sg].attached < 0 || plan->groups[sg].root != u) continue;
        int hi = plan->groups[sg].attached;
        const fuse_group_t *hg = &plan->groups[hi];
        if (hg->side != sg) continue;
        bool inside = (plan->group_of[w] == hi &&
                       (plan->role[w] == ROLE_PRE || plan->role[w] == ROLE_HEAD)) ||
                      (hg->tail >= 0 && plan->group_of[w] == hg->tail);
        if (!inside) plan->fused[hg->fused].side_private = false;
      }
    }
  }
  if (st == TPU_OK) {
    /* which values a step reads (backward: a reader's need is known first) */
    for (int o = 0; o < tpu_graph_num_outputs(g); o++) {
      plan->needed[tpu_graph_output_value(g, o)] = true;
    }
    for (int v = n - 1; v >= 0; v--) {
      if (!plan->needed[v] || tpu_fuse_internal(plan, v)) continue;
      int gi = plan->group_of[v];
      if (gi >= 0 && plan->groups[gi].attached >= 0) {
        /* an attached group's root: its inputs are read by the host (at or before here) */
        const fuse_group_t *hg = &plan->groups[plan->groups[gi].attached];
        const fuse_step_t *hs = &plan->fused[hg->fused];
        bool side = hg->side == gi;
        int first = side ? hs->f.side_in : hs->f.tail_in;
        int count = side ? hs->f.num_side_in : hs->f.num_tail_in;
        for (int i = 0; i < count; i++) plan->needed[hs->inputs[first + i]] = true;
        continue;
      }
      const fuse_step_t *fs = tpu_fuse_step_at(plan, v);
      if (fs) {
        for (int i = 0; i < fs->num_inputs; i++) plan->needed[fs->inputs[i]] = true;
      } else {
        const tpu_node_t *node = tpu_graph_node(g, v);
        for (int i = 0; i < node->num_operands; i++) plan->needed[node->operands[i]] = true;
      }
    }
  }
  tpu_allocator_free(host, s.uses);
  tpu_allocator_free(host, s.user_group);
  tpu_allocator_free(host, s.user_role);
  tpu_allocator_free(host, s.is_out);
  tpu_allocator_free(host, reg_of);
  tpu_allocator_free(host, cnt);
  tpu_allocator_free(host, tmp);
  tpu_allocator_free(host, fill);
  tpu_allocator_free(host, a.pre_reader);
  tpu_allocator_free(host, a.min_other);
  if (st != TPU_OK) tpu_fuse_plan_free(plan, host);
  return st;
}
