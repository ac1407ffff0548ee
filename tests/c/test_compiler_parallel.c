/* test_compiler_parallel.c: independent steps of one executable run at the same time
 * (src/compiler/deps.c, schedule.c, run_parallel.c).
 *
 * The dependencies are checked against an oracle: for every pair of steps that touch a
 * common byte of the same memory, one of them writing it, the later one must be
 * reachable from the earlier in the dependency graph (so every order the parallel run
 * may take is equivalent to the sequential one). Graphs cover independent matmul
 * branches, scratch memory reused by liveness, fused row-wise steps with side and tail
 * results, in-place parameter updates (exact aliases), and outputs that may alias the
 * inputs. The numbers are then compared bit for bit with the sequential run, many
 * times, on a two-thread pool; outputs that overlap at run time fall back to the
 * sequential order; an error in one branch names its op and leaves the pool working.
 * The two-thread schedule is checked for what the runner relies on: each step once, every
 * dependency ordered (inside a list by position, across lists by a wait), and both lists
 * able to finish on one thread; a thread with nothing to run shares the other's kernels
 * (same bits). Parallel runs need a helper spinning in the pool, as a
 * thread waiting in synchronize does: one spins through the whole test; a run without one
 * (the caller takes both lists) is tested too, and so are the run counters (runs alone
 * and with a helper, failed runs not counted).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile_util.h"
#include "compiler/deps.h"
#include "compiler/executable.h"
#include "pool_helper.h"

static tpu_pool_t *g_pool;       /* one helper spins in it throughout */
static tpu_pool_t *g_lone_pool;  /* nobody helps */
static atomic_bool g_stop;

static bool stopped(void *arg) {
  (void)arg;
  return atomic_load(&g_stop);
}

static void *helper_main(void *arg) {
  (void)arg;
  while (!atomic_load(&g_stop)) tpu_pool_help(g_pool, stopped, NULL, 1000 * 1000 * 1000, NULL);
  return NULL;
}

static tpu_value_t matmul(tpu_graph_t *g, tpu_value_t a, tpu_value_t b) {
  tpu_dot_attrs_t d;
  memset(&d, 0, sizeof d);
  d.num_contract = 1;
  d.lhs_contract[0] = 1;
  d.rhs_contract[0] = 0;
  return tpu_graph_dot_general(g, a, b, &d, TPU_F32);
}

static tpu_value_t row_sum(tpu_graph_t *g, tpu_value_t x) {
  bool dims[2] = {false, true};
  return tpu_graph_reduce(g, TPU_REDUCE_SUM, x, dims);
}

/* x / sum(exp(x), rows) broadcast back: a fused row-wise step with a side and a tail. */
static tpu_value_t softmax_rows(tpu_graph_t *g, tpu_value_t x, tpu_shape_t s) {
  tpu_value_t e = tpu_graph_unary(g, TPU_OP_EXP, x);
  int64_t keep[1] = {0};
  tpu_value_t sb = tpu_graph_broadcast_in_dim(g, row_sum(g, e), &s, keep);
  return tpu_graph_binary(g, TPU_OP_DIV, e, sb);
}

/* Eight independent matmul branches of |rows| x 96, each through a softmax, summed in a
 * chain. */
static tpu_graph_t *branches_graph_of(int64_t rows) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(rows, 96);
  tpu_value_t w = ir_param(g, TPU_F32, SHAPE(96, 96));
  tpu_value_t acc = TPU_NO_VALUE;
  for (int b = 0; b < 8; b++) {
    tpu_value_t x = ir_param(g, TPU_F32, s);
    tpu_value_t y = softmax_rows(g, matmul(g, x, w), s);
    acc = acc == TPU_NO_VALUE ? y : tpu_graph_binary(g, TPU_OP_ADD, acc, y);
  }
  CHECK_OK(tpu_graph_output(g, acc, NULL));
  CHECK_OK(tpu_graph_output(g, row_sum(g, acc), NULL));
  return g;
}

/* 128 rows: each branch some 20 us, worth a second thread */
static tpu_graph_t *branches_graph(void) { return branches_graph_of(128); }

/* A long chain of matmuls with short-lived intermediates (scratch reused by liveness),
 * each also feeding a reduction that is an output. */
static tpu_graph_t *reuse_graph(void) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t w = ir_param(g, TPU_F32, SHAPE(32, 32));
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(64, 32));
  for (int i = 0; i < 8; i++) {
    x = tpu_graph_unary(g, TPU_OP_TANH, matmul(g, x, w));
    CHECK_OK(tpu_graph_output(g, row_sum(g, x), NULL));
  }
  CHECK_OK(tpu_graph_output(g, x, NULL));
  return g;
}

/* SGD-like in-place updates of NP parameters (outputs 0..NP-1 overlay params 0..NP-1) and
 * a loss-like output; with |may_alias|, the loss may share memory with the inputs. */
#define NP 8
static tpu_graph_t *update_graph(void) {
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(40, 40);
  tpu_value_t p[NP], grad[NP];
  for (int i = 0; i < NP; i++) p[i] = ir_param(g, TPU_F32, s);
  for (int i = 0; i < NP; i++) grad[i] = matmul(g, p[i], p[(i + 1) % NP]);
  tpu_value_t lr = tpu_graph_constant(g, TPU_F32, &s, 0.01);
  for (int i = 0; i < NP; i++) {
    tpu_value_t step = tpu_graph_binary(g, TPU_OP_MUL, lr, grad[i]);
    CHECK_OK(tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_SUB, p[i], step), NULL));
  }
  CHECK_OK(tpu_graph_output(g, row_sum(g, grad[0]), NULL));
  return g;
}

/* ---- the oracle ------------------------------------------------------------------------ */

typedef struct touch {
  int region;
  int64_t lo, hi;
  bool write;
} touch_t;

static int touches(const tpu_executable_t *exe, const step_t *st, const int32_t *alias,
                   int num_alias, touch_t *t) {
  const view_t *views[40];
  bool writes[40];
  int n = 0;
  for (int i = 0; i < st->num_in && n < 36; i++) views[n] = &st->in[i], writes[n++] = false;
  views[n] = &st->out, writes[n++] = true;
  const fused_t *f = st->fused;
  if (f && f->has_pre) views[n] = &f->chunk, writes[n++] = true;
  if (f && f->has_side) views[n] = &f->side_out, writes[n++] = true;
  if (f && f->has_tail) views[n] = &f->tail_out, writes[n++] = true;
  for (int i = 0; i < n; i++) {
    const view_t *v = views[i];
    t[i].write = writes[i];
    tpu_view_byte_range(v, &t[i].lo, &t[i].hi);
    if (v->base == BASE_INPUT) t[i].region = v->index;
    else if (v->base == BASE_OUTPUT) {
      int p = v->index < num_alias ? alias[v->index] : -1;
      t[i].region = p >= 0 ? p : exe->num_inputs + v->index;
    } else {
      t[i].region = exe->num_inputs + exe->num_outputs;
    }
  }
  return n;
}

/* Whether every conflicting pair of steps is ordered by the dependencies; |may_alias|
 * outputs conflict with every input. */
static bool deps_cover_conflicts(const tpu_executable_t *exe, const int32_t *alias,
                                 int num_alias, uint64_t may_alias) {
  int n = exe->num_steps;
  bool *reach = calloc((size_t)n * (size_t)n, 1); /* reach[i * n + j]: j after i */
  touch_t *ti = calloc(40, sizeof *ti), *tj = calloc(40, sizeof *tj);
  bool ok = reach && ti && tj;
  for (int i = n - 1; i >= 0 && ok; i--) {
    const step_deps_t *d = &exe->deps;
    for (int e = d->succ_start[i]; e < d->succ_start[i + 1]; e++) {
      int j = d->succ[e];
      ok = ok && j > i;
      if (!ok) break;
      reach[(size_t)i * n + j] = true;
      for (int k = j + 1; k < n; k++) reach[(size_t)i * n + k] |= reach[(size_t)j * n + k];
    }
  }
  int in = exe->num_inputs;
  for (int i = 0; i < n && ok; i++) {
    int ni = touches(exe, &exe->steps[i], alias, num_alias, ti);
    for (int j = i + 1; j < n && ok; j++) {
      int nj = touches(exe, &exe->steps[j], alias, num_alias, tj);
      for (int a = 0; a < ni && ok; a++) {
        for (int b = 0; b < nj && ok; b++) {
          if (!ti[a].write && !tj[b].write) continue;
          if (ti[a].lo == ti[a].hi || tj[b].lo == tj[b].hi) continue;
          bool ma = ti[a].region >= in && ti[a].region < in + exe->num_outputs &&
                    ((may_alias >> (ti[a].region - in)) & 1u);
          bool mb = tj[b].region >= in && tj[b].region < in + exe->num_outputs &&
                    ((may_alias >> (tj[b].region - in)) & 1u);
          bool conflict = ti[a].region == tj[b].region
                              ? ti[a].lo < tj[b].hi && tj[b].lo < ti[a].hi
                              : (ma && tj[b].region < in) || (mb && ti[a].region < in);
          if (conflict && !reach[(size_t)i * n + j]) {
            fprintf(stderr, "  steps %d and %d conflict but are not ordered\n", i, j);
            ok = false;
          }
        }
      }
    }
  }
  free(reach);
  free(ti);
  free(tj);
  return ok;
}

/* Whether exe->deps' two lists hold every step once, order every dependency (inside a
 * list by position, across lists by the later step's wait), and can be run to the end by
 * one thread taking whichever list's next step may run (no deadlock). */
static bool schedule_is_valid(const tpu_executable_t *exe) {
  const step_deps_t *d = &exe->deps;
  int n = exe->num_steps;
  int *list = calloc((size_t)n + 1, sizeof *list), *pos = calloc((size_t)n + 1, sizeof *pos);
  bool ok = list && pos && d->len0 >= 0 && d->len0 <= n;
  for (int i = 0; i < n && ok; i++) list[i] = -1;
  for (int at = 0; at < n && ok; at++) {
    int s = d->order[at];
    ok = s >= 0 && s < n && list[s] < 0;
    if (!ok) break;
    list[s] = at >= d->len0;
    pos[s] = at >= d->len0 ? at - d->len0 : at;
  }
  for (int i = 0; i < n && ok; i++) {
    for (int e = d->succ_start[i]; e < d->succ_start[i + 1] && ok; e++) {
      int j = d->succ[e], at_j = list[j] ? d->len0 + pos[j] : pos[j];
      ok = list[i] == list[j] ? pos[i] < pos[j] : d->wait[at_j] > pos[i];
      if (!ok) fprintf(stderr, "  dependency %d -> %d not ordered by the schedule\n", i, j);
    }
  }
  int next[2] = {0, 0}, len[2] = {d->len0, n - d->len0};
  while (ok && (next[0] < len[0] || next[1] < len[1])) {
    bool ran = false;
    for (int l = 0; l < 2; l++) {
      int at = (l ? d->len0 : 0) + next[l];
      if (next[l] < len[l] && next[1 - l] >= d->wait[at]) next[l]++, ran = true;
    }
    ok = ran;
    if (!ok) fprintf(stderr, "  the lists deadlock at %d and %d\n", next[0], next[1]);
  }
  free(list);
  free(pos);
  return ok;
}

/* ---- runs ---------------------------------------------------------------------------- */

/* Runs |exe| |reps| times on the pool (in place when |alias| says so) and compares every
 * run bit for bit with one sequential run; returns the number of differing runs. */
static int parallel_vs_sequential(const tpu_graph_t *g, const tpu_executable_t *exe,
                                  const int32_t *alias, int num_alias, int reps) {
  cu_run_t seq;
  cu_execute(g, exe, 11, NULL, &seq);
  if (num_alias) { /* in place: the aliased outputs' buffers are the parameters' */
    cu_free(&seq);
    memset(&seq, 0, sizeof seq);
  }
  int bad = 0;
  for (int r = 0; r < reps; r++) {
    cu_run_t par;
    if (!num_alias) {
      cu_execute(g, exe, 11, g_pool, &par);
      bad += cu_diff_outputs(&seq, &par) != 0;
      cu_free(&par);
      continue;
    }
    /* fresh inputs each time; aliased outputs point at their parameter */
    cu_run_t a, b;
    for (int k = 0; k < 2; k++) {
      cu_run_t *x = k ? &b : &a;
      cu_execute(g, exe, 11, NULL, x); /* allocates and fills buffers (result unused) */
      for (int i = 0; i < x->num_in; i++) cu_fill(x->in[i], TPU_F32,
                                                   &tpu_graph_node(g, i)->shape, 11 + (uint64_t)i);
      void *outs[16];
      for (int o = 0; o < x->num_out; o++) {
        outs[o] = o < num_alias && alias[o] >= 0 ? x->in[alias[o]] : x->out[o];
      }
      size_t sb = tpu_executable_scratch_bytes(exe);
      void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
      CHECK_OK(tpu_executable_run(exe, x->in, outs, scratch, k ? g_pool : NULL));
      free(scratch);
      for (int o = 0; o < x->num_out; o++) {
        if (outs[o] != x->out[o]) memcpy(x->out[o], outs[o], x->out_bytes[o]);
      }
    }
    bad += cu_diff_outputs(&a, &b) != 0;
    cu_free(&a);
    cu_free(&b);
  }
  cu_free(&seq);
  return bad;
}

TEST(independent_branches_run_in_parallel) {
  tpu_graph_t *g = branches_graph();
  tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, 0);
  if (exe) {
    CHECK(tpu_executable_two_threads(exe));
    int roots = 0;
    for (int i = 0; i < exe->num_steps; i++) roots += exe->deps.num_preds[i] == 0;
    /* matmuls wait for nothing, except for the readers of scratch memory they reuse */
    CHECK(roots >= 4);
    CHECK(deps_cover_conflicts(exe, NULL, 0, 0));
    CHECK(schedule_is_valid(exe));
    /* the branches are shared out: each list has matmuls */
    CHECK(exe->deps.len0 > 0 && exe->deps.len0 < exe->num_steps);
    CHECK(parallel_vs_sequential(g, exe, NULL, 0, 200) == 0);
  }
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

TEST(a_waiting_thread_shares_the_other_threads_kernels) {
  /* thread 0: exp, then a matmul; thread 1: one cheap step, then nothing to do until the
   * run ends: it helps with the matmul, which splits its work with it, same bits */
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(256, 256)), w = ir_param(g, TPU_F32, SHAPE(256, 128));
  tpu_value_t y = ir_param(g, TPU_F32, SHAPE(8, 8));
  tpu_value_t m = matmul(g, tpu_graph_unary(g, TPU_OP_EXP, x), w);
  CHECK_OK(tpu_graph_output(g, m, NULL));
  CHECK_OK(tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_TANH, y), NULL));
  tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, 0);
  if (exe) {
    exe->parallel = true; /* the runner under test, whatever the cost estimate decided */
    CHECK(schedule_is_valid(exe));
    CHECK(exe->deps.len0 > 0 && exe->deps.len0 < exe->num_steps);
    /* the helper joins before the matmul in most runs, but a loaded host may deschedule it
     * for many short runs in a row: batches of 50 until it has shared once */
    tpu_executable_run_stats_t st;
    int runs = 0;
    do {
      CHECK(parallel_vs_sequential(g, exe, NULL, 0, 50) == 0);
      runs += 50;
      tpu_executable_run_stats(exe, &st);
    } while (st.shared_kernels == 0 && runs < 2000);
    CHECK(st.helped_runs == (uint64_t)runs);
    CHECK(st.shared_kernels > 0);
  }
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

TEST(a_costly_chain_with_cheap_side_steps_runs_in_order) {
  /* 20 dependent matmuls and two cheap independent steps: steps could overlap, but the
   * chain is nearly all the cost, so running in parallel would only add overhead */
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(64, 64), small = SHAPE(4);
  tpu_value_t x = ir_param(g, TPU_F32, s), w = ir_param(g, TPU_F32, s);
  tpu_value_t y = ir_param(g, TPU_F32, small);
  for (int i = 0; i < 20; i++) x = tpu_graph_unary(g, TPU_OP_TANH, matmul(g, x, w));
  CHECK_OK(tpu_graph_output(g, x, NULL));
  CHECK_OK(tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_NEG, y), NULL));
  CHECK_OK(tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_EXP, y), NULL));
  tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, 0);
  if (exe) {
    CHECK(exe->num_steps >= 20);
    CHECK(!tpu_executable_two_threads(exe));
  }
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

TEST(reused_scratch_orders_writes_after_reads) {
  tpu_graph_t *g = reuse_graph();
  for (int unfused = 0; unfused < 2; unfused++) {
    tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, unfused ? TPU_PASS_ALL : 0);
    if (!exe) continue;
    /* the planner reuses memory: less scratch than the sum of all intermediates */
    CHECK(tpu_executable_scratch_bytes(exe) < tpu_executable_unplanned_bytes(exe));
    exe->parallel = true; /* the runner under test, whatever the cost estimate decided */
    CHECK(deps_cover_conflicts(exe, NULL, 0, 0));
    CHECK(schedule_is_valid(exe));
    CHECK(parallel_vs_sequential(g, exe, NULL, 0, 200) == 0);
    tpu_executable_release(exe);
  }
  tpu_graph_destroy(g);
}

TEST(in_place_updates_and_may_alias_outputs_are_ordered) {
  tpu_graph_t *g = update_graph();
  int32_t alias[NP + 1];
  for (int i = 0; i < NP; i++) alias[i] = i;
  alias[NP] = TPU_OUTPUT_ALIAS_NONE;
  for (int unfused = 0; unfused < 2; unfused++) {
    tpu_executable_t *exe = cu_compile_aliased(g, alias, NP + 1, 0, unfused ? TPU_PASS_ALL : 0);
    if (exe) {
      exe->parallel = true; /* the runner under test, whatever the cost estimate decided */
      CHECK(deps_cover_conflicts(exe, alias, NP + 1, 0));
      CHECK(schedule_is_valid(exe));
      CHECK(parallel_vs_sequential(g, exe, alias, NP + 1, 100) == 0);
    }
    tpu_executable_release(exe);
    /* the loss may share memory with the inputs: its write waits for every input read */
    exe = cu_compile_aliased(g, NULL, 0, 1u << NP, unfused ? TPU_PASS_ALL : 0);
    if (exe) {
      CHECK(deps_cover_conflicts(exe, NULL, 0, 1u << NP));
      CHECK(schedule_is_valid(exe));
      CHECK(parallel_vs_sequential(g, exe, NULL, 0, 100) == 0);
    }
    tpu_executable_release(exe);
  }
  tpu_graph_destroy(g);
}

TEST(overlapping_outputs_run_in_order) {
  /* two outputs given one buffer: the run falls back to step order (last write wins) */
  enum { NOUT = 16 };
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(64, 64); /* steps costly enough for the schedule to be used */
  tpu_value_t a = ir_param(g, TPU_F32, s), b = ir_param(g, TPU_F32, s);
  tpu_value_t ab = matmul(g, a, b);
  for (int o = 0; o < NOUT; o++) { /* independent steps, each writing its output directly */
    tpu_value_t k = tpu_graph_constant(g, TPU_F32, &s, 1.0 + o);
    CHECK_OK(tpu_graph_output(g, tpu_graph_unary(g, TPU_OP_TANH, tpu_graph_binary(g, TPU_OP_MUL, ab, k)), NULL));
  }
  tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, 0);
  if (exe) {
    CHECK(exe->parallel);
    cu_run_t r;
    cu_execute(g, exe, 3, NULL, &r);
    void *outs[NOUT];
    for (int o = 0; o < NOUT; o++) outs[o] = r.out[o];
    CHECK(tpu_deps_outputs_disjoint(exe, outs));
    outs[NOUT - 1] = r.out[NOUT - 2];
    CHECK(!tpu_deps_outputs_disjoint(exe, outs));
    float *want = malloc(r.out_bytes[NOUT - 1]);
    size_t sb = tpu_executable_scratch_bytes(exe);
    void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
    if (want && (scratch || !sb)) {
      memcpy(want, r.out[NOUT - 1], r.out_bytes[NOUT - 1]);
      for (int rep = 0; rep < 50; rep++) {
        CHECK_OK(tpu_executable_run(exe, r.in, outs, scratch, g_pool));
        CHECK(memcmp(r.out[NOUT - 2], want, r.out_bytes[NOUT - 1]) == 0);
      }
    }
    free(want);
    free(scratch);
    cu_free(&r);
  }
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

TEST(with_no_helper_the_caller_runs_both_lists) {
  /* given a pool nobody helps, the runner runs the second list's steps whenever the first
   * list's next one waits for them, and gives the bits of a sequential run */
  tpu_graph_t *g = branches_graph();
  tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, 0);
  if (exe) {
    CHECK(exe->parallel && exe->deps.len0 < exe->num_steps);
    cu_run_t seq, lone;
    cu_execute(g, exe, 7, NULL, &seq);
    cu_execute(g, exe, 7, NULL, &lone);
    for (int o = 0; o < lone.num_out; o++) memset(lone.out[o], 0, lone.out_bytes[o]);
    size_t sb = tpu_executable_scratch_bytes(exe);
    void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
    CHECK_OK(tpu_run_parallel(exe, lone.in, lone.out, scratch, g_lone_pool, NULL));
    CHECK(cu_diff_outputs(&seq, &lone) == 0);
    free(scratch);
    cu_free(&seq);
    cu_free(&lone);
  }
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

/* A thread that starts helping a while after the run began (as Python reaches
 * synchronize just after the stream began the backward): the run, begun alone, was posted
 * to the pool all the same, so the late helper joins and takes over the list not yet run
 * (counted as a joined run, begun alone); the bits are a sequential run's. */
TEST(a_helper_that_comes_late_takes_over_its_list) {
  /* runs of about 20 ms, so that a helper starting 50 .. 230 us in comes while the run
   * goes on, but never before it began (where it would count as helped, or, between the
   * run's two looks at the pool, join a run posted only because it came). Not shorter: a
   * helper on the run's CPU moves to the other one, and when a process runs there (pip,
   * as make test installs the venv meanwhile) the helper may wait milliseconds for it.
   * With 1024 rows (runs of 2 ms) under pip, 1 run in 200 .. 600 was joined, and CI once
   * saw none in 1256 runs; with 8192, 180 of 180 (80 of them with two CPU hogs too). */
  tpu_graph_t *g = branches_graph_of(8192);
  tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, 0);
  tpu_pool_t *pool = NULL;
  CHECK_OK(tpu_pool_create(1, tpu_allocator_system(), &pool));
  if (exe && pool) {
    exe->parallel = true; /* the runner under test, whatever the cost estimate decided */
    CHECK(exe->deps.len0 > 0 && exe->deps.len0 < exe->num_steps);
    cu_run_t seq, r; /* the same inputs; r's buffers are run again and again */
    cu_execute(g, exe, 9, NULL, &seq);
    cu_execute(g, exe, 9, NULL, &r);
    size_t sb = tpu_executable_scratch_bytes(exe);
    void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
    tpu_executable_run_stats_t st;
    int runs = 0, bad = 0;
    /* until some run was joined, for up to 5 s: a VM may keep the helper's vCPU from it
     * for a while */
    const uint64_t give_up_ns = tpu_now_ns() + 5000000000ull;
    do { /* the helper starts 50 .. 230 us after the run */
      pool_helper h;
      for (int o = 0; o < r.num_out; o++) memset(r.out[o], 0, r.out_bytes[o]);
      CHECK(pool_helper_start_after(&h, pool, 50 + 20 * (runs % 10)) == 0);
      CHECK_OK(tpu_executable_run(exe, r.in, r.out, scratch, pool));
      pool_helper_stop(&h);
      bad += cu_diff_outputs(&seq, &r) != 0;
      tpu_executable_run_stats(exe, &st);
    } while (++runs < 10 || (st.joined_runs == 0 && tpu_now_ns() < give_up_ns));
    CHECK(bad == 0);
    CHECK(st.joined_runs > 0);
    if (st.joined_runs == 0) {
      fprintf(stderr, "  %d runs: %llu begun alone, %llu helped, none joined\n", runs,
              (unsigned long long)st.alone_runs, (unsigned long long)st.helped_runs);
    }
    CHECK(st.joined_runs <= st.alone_runs);
    free(scratch);
    cu_free(&seq);
    cu_free(&r);
  }
  tpu_pool_destroy(pool);
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

TEST(run_stats_count_runs_alone_and_with_a_helper) {
  tpu_graph_t *g = branches_graph();
  tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, 0);
  if (exe) {
    tpu_executable_run_stats_t st;
    tpu_executable_run_stats(exe, &st);
    CHECK(st.alone_runs == 0 && st.helped_runs == 0 && st.alone_ns == 0 && st.helped_ns == 0);
    for (int k = 0; k < 5; k++) {
      cu_run_t r;
      /* no pool, a pool nobody helps, then the pool a helper spins in */
      cu_execute(g, exe, 3, k == 0 ? NULL : k < 3 ? g_lone_pool : g_pool, &r);
      cu_free(&r);
    }
    tpu_executable_run_stats(exe, &st);
    CHECK(st.alone_runs == 3 && st.helped_runs == 2);
    CHECK(st.alone_ns > 0 && st.helped_ns > 0);
  }
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

/* The help policy (help_policy.c): a verdict once a window holds enough runs of each kind;
 * when the fastest helped run was slower than the fastest alone, help is declined for a
 * number of runs, counted down by every run; a slow outlier among fast helped runs does
 * not count against help; and once help wins again it is kept. */
TEST(help_is_declined_while_helped_runs_are_slower) {
  const int w = tpu_help_policy_window();
  help_policy_t h;
  memset(&h, 0, sizeof h);
  /* helped runs fast but one slowed by a preemption, alone runs steady: help wins */
  for (int i = 0; i < w; i++) {
    CHECK(tpu_help_policy_accepts(&h));
    tpu_help_policy_note(&h, false, 100 * 1000);
    tpu_help_policy_note(&h, true, i == 2 ? 5000 * 1000 : 70 * 1000);
  }
  CHECK(tpu_help_policy_accepts(&h));
  /* a window where help loses: no verdict before it is full, then the declines */
  for (int i = 0; i < w; i++) {
    CHECK(tpu_help_policy_accepts(&h));
    tpu_help_policy_note(&h, false, 100 * 1000);
    if (i < w - 1) tpu_help_policy_note(&h, true, 150 * 1000);
  }
  CHECK(tpu_help_policy_accepts(&h)); /* w alone, w - 1 helped: not yet */
  tpu_help_policy_note(&h, true, 150 * 1000);
  for (int i = 0; i < tpu_help_policy_declined_runs(); i++) CHECK(!tpu_help_policy_accepts(&h));
  CHECK(tpu_help_policy_accepts(&h)); /* a new window measures again */
  for (int i = 0; i < w; i++) {
    tpu_help_policy_note(&h, false, 100 * 1000);
    tpu_help_policy_note(&h, true, 60 * 1000);
  }
  for (int i = 0; i < 4 * w; i++) CHECK(tpu_help_policy_accepts(&h));
}

/* An executable whose helped runs were the slower runs the next one on its own thread,
 * with a helper spinning: counted as begun alone, no kernel shared, the same bits. */
TEST(a_run_declines_help_that_did_not_pay) {
  tpu_graph_t *g = branches_graph();
  tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, 0);
  if (exe) {
    for (int i = 0; i < tpu_help_policy_window(); i++) {
      tpu_help_policy_note(&exe->help, false, 1000);
      tpu_help_policy_note(&exe->help, true, 1000 * 1000);
    }
    tpu_executable_run_stats_t before, after;
    tpu_executable_run_stats(exe, &before);
    cu_run_t seq, declined;
    cu_execute(g, exe, 5, NULL, &seq);
    cu_execute(g, exe, 5, g_pool, &declined);
    tpu_executable_run_stats(exe, &after);
    CHECK(after.helped_runs == before.helped_runs);
    CHECK(after.alone_runs == before.alone_runs + 2);
    CHECK(after.shared_kernels == before.shared_kernels);
    CHECK(cu_diff_outputs(&seq, &declined) == 0);
    cu_free(&seq);
    cu_free(&declined);
  }
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

TEST(an_error_in_one_branch_names_its_op_and_the_pool_still_works) {
  tpu_graph_t *g = ir_graph();
  tpu_value_t x = ir_param(g, TPU_F32, SHAPE(8, 16));
  tpu_value_t idx = ir_param(g, TPU_I64, SHAPE(4, 1));
  tpu_gather_attrs_t ga;
  memset(&ga, 0, sizeof ga);
  ga.num_offset_dims = 1;
  ga.offset_dims[0] = 1;
  ga.num_collapsed = 1;
  ga.collapsed_slice_dims[0] = 0;
  ga.num_start_index_map = 1;
  ga.start_index_map[0] = 0;
  ga.index_vector_dim = 1;
  ga.slice_sizes[0] = 1;
  ga.slice_sizes[1] = 16;
  ga.check_bounds = true;
  tpu_value_t w = ir_param(g, TPU_F32, SHAPE(16, 16));
  for (int i = 0; i < 12; i++) { /* distinct branches (no common subexpressions) */
    tpu_shape_t xs = SHAPE(8, 16);
    tpu_value_t xi = tpu_graph_binary(g, TPU_OP_MUL, x, tpu_graph_constant(g, TPU_F32, &xs, 1.0 + i));
    CHECK_OK(tpu_graph_output(g, matmul(g, tpu_graph_unary(g, TPU_OP_TANH, xi), w), NULL));
  }
  CHECK_OK(tpu_graph_output(g, tpu_graph_gather(g, x, idx, &ga), NULL));
  CHECK_OK(tpu_graph_output(g, matmul(g, matmul(g, x, w), w), NULL));
  tpu_executable_t *exe = cu_compile_aliased(g, NULL, 0, 0, 0);
  if (exe) {
    exe->parallel = true; /* the runner under test, whatever the cost estimate decided */
    cu_run_t r;
    cu_execute(g, exe, 5, g_pool, &r); /* indices 0..6: in range */
    ((int64_t *)r.in[1])[2] = 99;
    size_t sb = tpu_executable_scratch_bytes(exe);
    void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
    tpu_executable_run_stats_t before, after;
    tpu_executable_run_stats(exe, &before);
    tpu_status_t st = tpu_executable_run(exe, r.in, r.out, scratch, g_pool);
    CHECK(st == TPU_ERR_OUT_OF_RANGE);
    CHECK_CONTAINS(tpu_status_message(), "gather");
    CHECK_CONTAINS(tpu_status_message(), "99");
    tpu_executable_run_stats(exe, &after); /* a failed run is not counted */
    CHECK(after.helped_runs == before.helped_runs && after.helped_ns == before.helped_ns);
    ((int64_t *)r.in[1])[2] = 1;
    CHECK_OK(tpu_executable_run(exe, r.in, r.out, scratch, g_pool));
    tpu_executable_run_stats(exe, &after);
    CHECK(after.helped_runs == before.helped_runs + 1 && after.helped_ns > before.helped_ns);
    free(scratch);
    cu_free(&r);
  }
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
}

int main(void) {
  CHECK_OK(tpu_pool_create(2, tpu_allocator_system(), &g_pool));
  CHECK_OK(tpu_pool_create(2, tpu_allocator_system(), &g_lone_pool));
  pthread_t helper;
  CHECK(pthread_create(&helper, NULL, helper_main, NULL) == 0);
  while (tpu_pool_helpers(g_pool) == 0) sched_yield();
  RUN(independent_branches_run_in_parallel);
  RUN(a_waiting_thread_shares_the_other_threads_kernels);
  RUN(a_costly_chain_with_cheap_side_steps_runs_in_order);
  RUN(reused_scratch_orders_writes_after_reads);
  RUN(in_place_updates_and_may_alias_outputs_are_ordered);
  RUN(overlapping_outputs_run_in_order);
  RUN(with_no_helper_the_caller_runs_both_lists);
  RUN(a_helper_that_comes_late_takes_over_its_list);
  RUN(run_stats_count_runs_alone_and_with_a_helper);
  RUN(help_is_declined_while_helped_runs_are_slower);
  RUN(a_run_declines_help_that_did_not_pay);
  RUN(an_error_in_one_branch_names_its_op_and_the_pool_still_works);
  atomic_store(&g_stop, true);
  pthread_join(helper, NULL);
  tpu_pool_destroy(g_lone_pool);
  tpu_pool_destroy(g_pool);
  return check_report();
}
