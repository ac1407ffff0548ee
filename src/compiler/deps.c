/* deps.c: the dependencies between an executable's steps (deps.h).
 *
 * Steps are visited in order. Each region (an input, an output, the scratch block) keeps
 * the accesses that may still matter to a later step; a new step depends on every kept
 * access it conflicts with. An access that a later write covers entirely is dropped from
 * its region: whatever conflicts with it also conflicts with the covering write, which
 * already waits for it. That keeps the scratch block's list about as long as the number
 * of live buffers, so the pass is close to linear in the number of steps.
 *
 * The dependencies and a rough cost per step give the two-thread schedule (schedule.c).
 * The executable runs in parallel (exe->parallel) when every step is small (each kernel
 * would run on one thread anyway: big kernels keep the whole thread pool to themselves in
 * the sequential run), there is enough work to pay for a handoff, and the schedule's
 * estimated time is well below the steps' total.
 */
#include <stdlib.h>
#include <string.h>

#include "compiler/deps.h"

/* Above these a kernel splits its own work over the pool (elements touched by a step,
 * multiply-adds of a dot or convolution). */
#define SMALL_STEP_ELEMS ((int64_t)1 << 18)
#define SMALL_STEP_MACS ((int64_t)1 << 23)
/* Estimated work (ns) below which handing steps to a second thread costs more than it
 * saves: a few cache-line handoffs between cores, 0.1-1 us each on a VM. */
#define MIN_PARALLEL_NS 10000
/* Estimated speedup of the two-thread schedule below which the steps run in order on one
 * thread. Measured on the GPT example's compiled step (bench/cached_graphs.c --helper;
 * estimated span / total): backward 0.63, 14-17% faster in parallel; AdamW 0.58, 40%
 * faster; forward 0.96 (a chain). */
#define MIN_PARALLEL_SPEEDUP_PCT 125

typedef struct access {
  int step;
  int64_t lo, hi; /* bytes in the region */
  bool write;
} access_t;

typedef struct region {
  access_t *items;
  int n, cap;
} region_t;

typedef struct deps_state {
  tpu_allocator_t host;
  int num_inputs, num_outputs, num_regions;
  const deps_outputs_t *outs;
  region_t *regions;  /* num_regions: inputs, outputs, scratch */
  int *seen;          /* (num_steps) the last step that added an edge from this one */
  int *preds;         /* edges (pred of, in step order), growing */
  int *pred_step;     /* the step each edge belongs to */
  int num_edges, cap_edges;
} deps_state_t;

void tpu_view_byte_range(const view_t *v, int64_t *lo, int64_t *hi) {
  int64_t es = (int64_t)tpu_dtype_size(v->dtype), mn = 0, mx = 0;
  int64_t base = v->base == BASE_SCRATCH ? (int64_t)v->scratch_offset : 0;
  for (int d = 0; d < v->rank; d++) {
    if (v->dims[d] == 0) {
      *lo = *hi = base;
      return;
    }
    int64_t ext = (v->dims[d] - 1) * v->strides[d];
    if (ext < 0) mn += ext;
    else mx += ext;
  }
  *lo = base + (v->elem_offset + mn) * es;
  *hi = base + (v->elem_offset + mx + 1) * es;
}

static int region_of(const deps_state_t *s, const view_t *v) {
  switch (v->base) {
    case BASE_INPUT: return v->index;
    case BASE_OUTPUT: {
      int p = s->outs->exact_param[v->index];
      return p >= 0 ? p : s->num_inputs + v->index;
    }
    default: return s->num_inputs + s->num_outputs;
  }
}

static bool region_may_alias_inputs(const deps_state_t *s, int r) {
  return r >= s->num_inputs && r < s->num_inputs + s->num_outputs &&
         s->outs->may_alias[r - s->num_inputs];
}

static tpu_status_t add_edge(deps_state_t *s, int from, int to) {
  if (s->seen[from] == to) return TPU_OK;
  s->seen[from] = to;
  if (s->num_edges == s->cap_edges) {
    int cap = s->cap_edges ? s->cap_edges * 2 : 256;
    int *p = NULL, *q = NULL;
    TPU_RETURN_IF_ERROR(tpu_allocator_calloc(s->host, (size_t)cap, sizeof *p, "deps", (void **)&p));
    tpu_status_t st = tpu_allocator_calloc(s->host, (size_t)cap, sizeof *q, "deps", (void **)&q);
    if (st != TPU_OK) {
      tpu_allocator_free(s->host, p);
      return st;
    }
    if (s->num_edges) {
      memcpy(p, s->preds, sizeof *p * (size_t)s->num_edges);
      memcpy(q, s->pred_step, sizeof *q * (size_t)s->num_edges);
    }
    tpu_allocator_free(s->host, s->preds);
    tpu_allocator_free(s->host, s->pred_step);
    s->preds = p;
    s->pred_step = q;
    s->cap_edges = cap;
  }
  s->preds[s->num_edges] = from;
  s->pred_step[s->num_edges] = to;
  s->num_edges++;
  return TPU_OK;
}

/* Edges into step |a->step| from the kept accesses of region |r| it conflicts with. */
static tpu_status_t edges_from(deps_state_t *s, int r, const access_t *a, bool any_overlap) {
  const region_t *reg = &s->regions[r];
  for (int i = 0; i < reg->n; i++) {
    const access_t *b = &reg->items[i];
    if (!a->write && !b->write) continue;
    if (any_overlap || (b->lo < a->hi && a->lo < b->hi)) {
      TPU_RETURN_IF_ERROR(add_edge(s, b->step, a->step));
    }
  }
  return TPU_OK;
}

static tpu_status_t push_access(deps_state_t *s, int r, const access_t *a) {
  region_t *reg = &s->regions[r];
  if (a->write) { /* drop what this write covers (of earlier steps) */
    int k = 0;
    for (int i = 0; i < reg->n; i++) {
      const access_t *b = &reg->items[i];
      if (b->step == a->step || b->lo < a->lo || b->hi > a->hi) reg->items[k++] = *b;
    }
    reg->n = k;
  }
  if (reg->n == reg->cap) {
    int cap = reg->cap ? reg->cap * 2 : 8;
    access_t *grown = NULL;
    TPU_RETURN_IF_ERROR(
        tpu_allocator_calloc(s->host, (size_t)cap, sizeof *grown, "deps", (void **)&grown));
    if (reg->n) memcpy(grown, reg->items, sizeof *grown * (size_t)reg->n);
    tpu_allocator_free(s->host, reg->items);
    reg->items = grown;
    reg->cap = cap;
  }
  reg->items[reg->n++] = *a;
  return TPU_OK;
}

/* The views step |st| reads and writes, with their regions (at most num_in + 4 +
 * TPU_EW_PROGRAM_MAX_STORES). */
static int step_accesses(const deps_state_t *s, const step_t *st, int step, access_t *acc,
                         int *regions) {
  int n = 0;
  const view_t *writes[4 + TPU_EW_PROGRAM_MAX_STORES];
  int num_writes = 0;
  writes[num_writes++] = &st->out;
  const fused_t *f = st->fused;
  if (f && f->has_pre) writes[num_writes++] = &f->chunk;
  if (f && f->has_side) writes[num_writes++] = &f->side_out;
  if (f && f->has_tail) writes[num_writes++] = &f->tail_out;
  for (int j = 0; f && j < f->num_stores; j++) writes[num_writes++] = &f->store_out[j];
  for (int i = 0; i < st->num_in + num_writes; i++) {
    const view_t *v = i < st->num_in ? &st->in[i] : writes[i - st->num_in];
    acc[n].step = step;
    acc[n].write = i >= st->num_in;
    tpu_view_byte_range(v, &acc[n].lo, &acc[n].hi);
    if (acc[n].lo == acc[n].hi) continue;
    regions[n++] = region_of(s, v);
  }
  return n;
}

static tpu_status_t add_step(deps_state_t *s, const step_t *st, int step) {
  access_t stack_acc[16];
  int stack_reg[16];
  access_t *acc = stack_acc;
  int *reg = stack_reg;
  int cap = st->num_in + 4 + TPU_EW_PROGRAM_MAX_STORES;
  if (cap > 16) {
    TPU_RETURN_IF_ERROR(
        tpu_allocator_calloc(s->host, (size_t)cap, sizeof *acc, "deps", (void **)&acc));
    tpu_status_t e = tpu_allocator_calloc(s->host, (size_t)cap, sizeof *reg, "deps", (void **)&reg);
    if (e != TPU_OK) {
      tpu_allocator_free(s->host, acc);
      return e;
    }
  }
  int n = step_accesses(s, st, step, acc, reg);
  tpu_status_t e = TPU_OK;
  for (int i = 0; i < n && e == TPU_OK; i++) {
    e = edges_from(s, reg[i], &acc[i], false);
    /* an output that may share memory with the inputs conflicts with all of them */
    if (region_may_alias_inputs(s, reg[i])) {
      for (int r = 0; r < s->num_inputs && e == TPU_OK; r++) e = edges_from(s, r, &acc[i], true);
    } else if (reg[i] < s->num_inputs) {
      for (int o = 0; o < s->num_outputs && e == TPU_OK; o++) {
        if (s->outs->may_alias[o]) e = edges_from(s, s->num_inputs + o, &acc[i], true);
      }
    }
  }
  for (int i = 0; i < n && e == TPU_OK; i++) e = push_access(s, reg[i], &acc[i]);
  if (acc != stack_acc) {
    tpu_allocator_free(s->host, acc);
    tpu_allocator_free(s->host, reg);
  }
  return e;
}

/* The most elements any operand of a step has, its output's elements, the ops it computes
 * (a fused step's several) and the multiply-adds of a dot or convolution at its head (0
 * otherwise). */
static void step_size(const step_t *st, int64_t *elems, int64_t *out_elems, int64_t *ops,
                      int64_t *macs) {
  int64_t most = 1;
  const view_t *out = &st->out;
  int64_t out_n = 1;
  for (int d = 0; d < out->rank; d++) out_n *= out->dims[d];
  if (out_n > most) most = out_n;
  for (int i = 0; i < st->num_in; i++) {
    int64_t n = 1;
    for (int d = 0; d < st->in[i].rank; d++) n *= st->in[i].dims[d];
    if (n > most) most = n;
  }
  *elems = most;
  *out_elems = out_n;
  *ops = st->kind == STEP_FUSED ? st->fused->num_ops : 1;
  *macs = 0;
  bool head = st->kind == STEP_NODE || (st->kind == STEP_FUSED && st->fused->has_head);
  if (head && st->op == TPU_OP_DOT_GENERAL) {
    const tpu_dot_attrs_t *d = &st->attrs.dot;
    int64_t k = 1;
    for (int i = 0; i < d->num_contract; i++) k *= st->in[0].dims[d->lhs_contract[i]];
    *macs = out_n * k;
  }
  if (head && st->op == TPU_OP_CONVOLUTION && st->num_in > 1) {
    const view_t *w = &st->in[1];
    int64_t wn = 1;
    for (int d = 0; d < w->rank; d++) wn *= w->dims[d];
    int64_t per_out = wn / (w->dims[st->attrs.conv.k_out_feature] ? w->dims[st->attrs.conv.k_out_feature] : 1);
    *macs = out_n * per_out;
  }
}

/* A rough time for a step on one host core, ns: a fixed cost per step, and per element of
 * its largest operand 0.1 ns plus 0.05 ns per op it computes; for a dot or convolution head
 * 1/95 ns per multiply-add plus 0.1 ns per output element per op (writing the result, each
 * epilogue op). Fitted to the GPT example's steps on this machine's AVX512-BF16 cores with
 * bench/cached_graphs.c --steps (the small attention batches' output and epilogue costs
 * were missing before, putting their chain on the wrong thread); they only need to rank
 * paths through the steps. */
static int64_t step_cost_ns(int64_t elems, int64_t out_elems, int64_t ops, int64_t macs) {
  if (macs) return 200 + macs / 95 + out_elems * ops / 10;
  return 200 + elems / 10 + elems * ops / 20;
}

static void state_free(deps_state_t *s) {
  if (s->regions) {
    for (int r = 0; r < s->num_regions; r++) tpu_allocator_free(s->host, s->regions[r].items);
  }
  tpu_allocator_free(s->host, s->regions);
  tpu_allocator_free(s->host, s->seen);
  tpu_allocator_free(s->host, s->preds);
  tpu_allocator_free(s->host, s->pred_step);
}

/* CSR successor lists from the edges; the two-thread schedule, whose estimated time
 * decides exe->parallel. */
static tpu_status_t finish(deps_state_t *s, tpu_executable_t *exe) {
  int n = exe->num_steps;
  step_deps_t *d = &exe->deps;
  tpu_allocator_t h = s->host;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(h, (size_t)n + 1, sizeof(int), "deps", (void **)&d->num_preds));
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(h, (size_t)n + 2, sizeof(int), "deps", (void **)&d->succ_start));
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(h, (size_t)s->num_edges + 1, sizeof(int), "deps",
                                           (void **)&d->succ));
  for (int e = 0; e < s->num_edges; e++) {
    d->num_preds[s->pred_step[e]]++;
    d->succ_start[s->preds[e] + 1]++;
  }
  for (int i = 0; i < n; i++) d->succ_start[i + 1] += d->succ_start[i];
  int *fill = s->seen; /* reused: next free slot per step */
  for (int i = 0; i < n; i++) fill[i] = d->succ_start[i];
  for (int e = 0; e < s->num_edges; e++) d->succ[fill[s->preds[e]]++] = s->pred_step[e];
  int64_t *cost = NULL, total = 0, span = 0;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(h, (size_t)n + 1, sizeof *cost, "deps", (void **)&cost));
  bool small = true;
  for (int i = 0; i < n; i++) {
    int64_t elems, out_elems, ops, macs;
    step_size(&exe->steps[i], &elems, &out_elems, &ops, &macs);
    small = small && elems <= SMALL_STEP_ELEMS && macs <= SMALL_STEP_MACS;
    cost[i] = step_cost_ns(elems, out_elems, ops, macs);
    total += cost[i];
  }
  tpu_status_t st = tpu_schedule_build(exe, cost, &span);
  tpu_allocator_free(h, cost);
  exe->parallel = st == TPU_OK && small && total >= MIN_PARALLEL_NS &&
                  span * MIN_PARALLEL_SPEEDUP_PCT < total * 100;
  return st;
}

tpu_status_t tpu_deps_build(tpu_executable_t *exe, const deps_outputs_t *outs) {
  deps_state_t s;
  memset(&s, 0, sizeof s);
  s.host = exe->host;
  s.num_inputs = exe->num_inputs;
  s.num_outputs = exe->num_outputs;
  s.num_regions = exe->num_inputs + exe->num_outputs + 1;
  s.outs = outs;
  tpu_status_t st = tpu_allocator_calloc(s.host, (size_t)s.num_regions, sizeof *s.regions, "deps",
                                         (void **)&s.regions);
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(s.host, (size_t)exe->num_steps + 1, sizeof *s.seen, "deps",
                              (void **)&s.seen);
  }
  for (int i = 0; st == TPU_OK && i < exe->num_steps; i++) s.seen[i] = -1;
  for (int i = 0; st == TPU_OK && i < exe->num_steps; i++) st = add_step(&s, &exe->steps[i], i);
  if (st == TPU_OK) st = finish(&s, exe);
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(s.host, (size_t)exe->num_outputs + 1, sizeof *exe->deps.out_range,
                              "deps", (void **)&exe->deps.out_range);
  }
  for (int o = 0; st == TPU_OK && o < exe->num_outputs; o++) {
    view_t v = tpu_view_make(BASE_OUTPUT, o, exe->out_dtypes[o], &exe->out_shapes[o],
                             exe->out_strided[o] ? exe->out_strides[o] : NULL);
    tpu_view_byte_range(&v, &exe->deps.out_range[o][0], &exe->deps.out_range[o][1]);
  }
  state_free(&s);
  if (st != TPU_OK) tpu_deps_free(exe);
  return st;
}

void tpu_deps_free(tpu_executable_t *exe) {
  tpu_allocator_free(exe->host, exe->deps.num_preds);
  tpu_allocator_free(exe->host, exe->deps.succ_start);
  tpu_allocator_free(exe->host, exe->deps.succ);
  tpu_allocator_free(exe->host, exe->deps.out_range);
  tpu_allocator_free(exe->host, exe->deps.order);
  tpu_allocator_free(exe->host, exe->deps.wait);
  memset(&exe->deps, 0, sizeof exe->deps);
  exe->parallel = false;
}

static int by_start(const void *a, const void *b) {
  uintptr_t x = ((const uintptr_t *)a)[0], y = ((const uintptr_t *)b)[0];
  return x < y ? -1 : x > y;
}

bool tpu_deps_outputs_disjoint(const tpu_executable_t *exe, void *const *outputs) {
  int n = exe->num_outputs;
  if (n < 2) return true;
  uintptr_t local[64][2]; /* most executables: no allocation per run */
  uintptr_t(*iv)[2] = local; /* [start, end) addresses of the nonempty outputs */
  if (n > 64 &&
      tpu_allocator_calloc(exe->host, (size_t)n, sizeof *iv, "deps", (void **)&iv) != TPU_OK) {
    return false; /* the sequential run needs no memory */
  }
  int k = 0;
  for (int o = 0; o < n; o++) {
    const int64_t *r = exe->deps.out_range[o];
    if (r[0] == r[1]) continue;
    iv[k][0] = (uintptr_t)outputs[o] + (uintptr_t)r[0];
    iv[k][1] = (uintptr_t)outputs[o] + (uintptr_t)r[1];
    k++;
  }
  qsort(iv, (size_t)k, sizeof *iv, by_start);
  bool ok = true;
  for (int i = 1; i < k && ok; i++) ok = iv[i][0] >= iv[i - 1][1];
  if (iv != local) tpu_allocator_free(exe->host, iv);
  return ok;
}
