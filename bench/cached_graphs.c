/* cached_graphs.c: times the executables of the graphs a process stored in a
 * TORCHTPU_CACHE_DIR (the persistent cache's entry files, src/compiler/disk_cache.c), on
 * one thread, without Python: the compiled GPT step's forward, backward and optimizer
 * graphs as the compiler builds them, on fixed inputs. Prints per graph its nodes, steps,
 * fused steps, kernels, and us per run (best and median of rounds), so a compiler or kernel
 * change can be measured on the real graphs in isolation (and counted with callgrind).
 *
 * Build and run from the repo root (after `make lib`):
 *   TORCHTPU_CACHE_DIR=/tmp/gpt .venv/bin/python examples/train_gpt.py --steps 3 --compile
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/cached_graphs.c \
 *      build/release/libtpu.a -pthread -lm -o build/cached_graphs
 *   build/cached_graphs /tmp/gpt [min nodes, default 50] [rounds, default 200] [--describe]
 *      [--steps] [--helper | --pool] [--turns]
 * --describe prints each executable's steps; --steps times each step on its own and prints
 * their sum, the longest chain of dependent steps, what the two-thread schedule would take
 * with those times, and the slowest steps; --helper runs the graphs on a pool that a
 * second thread helps, spinning in tpu_pool_help as a thread waiting in
 * tpu_stream_synchronize does (how much of a graph two cores share: the two-thread
 * schedule of the executables that have one, src/compiler/schedule.c, with the kernels a
 * waiting thread shares, run_parallel.c, and the kernels' own splits in the others);
 * --pool runs them on a pool nobody helps (the steps of a loop that does not synchronize,
 * while the thread that would help is busy in Python: what a run posted for a helper that
 * never comes costs);
 * --turns then also runs the entries one after another instead of each many times in a
 * row, as a training step runs its graphs, so each finds its data out of cache, and prints
 * that median over the one alone.
 *
 * Inputs: floats in [-1, 1), integers 0..6 (in range for the example's gathers), bools
 * alternating. Outputs that an entry's alias table ties to a parameter are written in
 * place, as in the process that stored it. Entries of any build are read (the build tag
 * is not checked): this is a measuring tool, not the cache.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "../tests/c/pool_helper.h" /* a thread lent to a pool, as in synchronize */
#include "compiler/executable.h"
#include "tpu/compiler.h"
#include "tpu/ir.h"

#define HEADER_BYTES 72 /* disk_cache.c's entry header */
#define MAX_IO 4096

typedef struct entry {
  tpu_graph_t *graph;
  tpu_compile_options_t options;
  int32_t *alias;
} entry_t;

/* Reads the entry file |path| (format in disk_cache.c): false if it is not one. */
static bool read_entry(const char *path, entry_t *e) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = len > HEADER_BYTES ? malloc((size_t)len) : NULL;
  bool ok = b && fread(b, 1, (size_t)len, f) == (size_t)len && !memcmp(b, "TPUCACHE", 8);
  fclose(f);
  uint64_t key_len = 0, extra_len = 0, graph_len = 0, mask = 0;
  uint32_t disable = 0, num_alias = 0;
  if (ok) {
    memcpy(&key_len, b + 24, 8);
    memcpy(&extra_len, b + 32, 8);
    memcpy(&graph_len, b + 40, 8);
    memcpy(&mask, b + 48, 8);
    memcpy(&disable, b + 56, 4);
    memcpy(&num_alias, b + 60, 4);
    ok = num_alias < MAX_IO && key_len + extra_len + graph_len + 4ull * num_alias ==
                                   (uint64_t)len - HEADER_BYTES;
  }
  memset(e, 0, sizeof *e);
  if (ok) {
    const unsigned char *p = b + HEADER_BYTES + key_len + extra_len;
    if (num_alias) {
      e->alias = malloc(4ull * num_alias);
      memcpy(e->alias, p, 4ull * num_alias);
    }
    p += 4ull * num_alias;
    ok = tpu_graph_deserialize(p, graph_len, tpu_allocator_system(), &e->graph) == TPU_OK;
  }
  free(b);
  e->options.output_may_alias_input = mask;
  e->options.disable_passes = disable;
  e->options.output_alias_param = e->alias;
  e->options.num_output_alias = (int32_t)num_alias;
  if (!ok) free(e->alias);
  return ok;
}

/* Bytes spanned by a |dtype| buffer of |shape| with |strides| (NULL: dense), plus slack. */
static size_t span_bytes(tpu_dtype_t dtype, const tpu_shape_t *shape, const int64_t *strides) {
  int64_t n = 1, last = 0;
  for (int d = 0; d < shape->rank; d++) {
    n *= shape->dims[d];
    if (strides && shape->dims[d] > 0) last += (shape->dims[d] - 1) * llabs(strides[d]);
  }
  if (strides) n = n ? last + 1 : 0;
  return ((size_t)n * tpu_dtype_size(dtype) + 64 + 63) / 64 * 64;
}

static void fill(void *p, tpu_dtype_t dtype, size_t bytes, uint64_t seed) {
  size_t n = bytes / tpu_dtype_size(dtype);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    float f = (float)((seed >> 40) & 0xffff) / 32768.0f - 1.0f;
    switch (dtype) {
      case TPU_F32: ((float *)p)[i] = f; break;
      case TPU_F64: ((double *)p)[i] = f; break;
      case TPU_BF16: ((uint16_t *)p)[i] = tpu_f32_to_bf16(f); break;
      case TPU_F16: ((uint16_t *)p)[i] = tpu_f32_to_f16(f); break;
      case TPU_I64: ((int64_t *)p)[i] = (int64_t)((seed >> 33) % 7); break;
      case TPU_I32: ((int32_t *)p)[i] = (int32_t)((seed >> 33) % 7); break;
      case TPU_BOOL: ((uint8_t *)p)[i] = (uint8_t)(i & 1); break;
      default: ((uint8_t *)p)[i] = (uint8_t)((seed >> 33) % 7); break;
    }
  }
}

/* --helper: a second thread lends itself to the pool (g_pool) while the runs are timed, as
 * a thread waiting in tpu_stream_synchronize does; --pool: nobody does */
static tpu_pool_t *g_pool;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The makespan of |exe|'s two-thread schedule (executable.h's deps.order and deps.wait) if
 * its steps took |us| each and a wait across threads cost |cross_us|. */
static double schedule_makespan(const tpu_executable_t *exe, const double *us, double cross_us) {
  const step_deps_t *d = &exe->deps;
  int len[2] = {d->len0, exe->num_steps - d->len0}, next[2] = {0, 0};
  double *done_at = calloc((size_t)exe->num_steps + 1, sizeof *done_at); /* by position */
  double clock[2] = {0, 0};
  while (next[0] < len[0] || next[1] < len[1]) {
    bool moved = false;
    for (int l = 0; l < 2; l++) {
      if (next[l] == len[l]) continue;
      int at = (l ? d->len0 : 0) + next[l], w = d->wait[at];
      if (w > next[1 - l]) continue; /* the other list has not got there yet */
      double start = clock[l];
      if (w > 0) {
        double ready = done_at[(l ? 0 : d->len0) + w - 1] + cross_us;
        if (ready > start) start = ready;
      }
      clock[l] = done_at[at] = start + us[d->order[at]];
      next[l]++;
      moved = true;
    }
    if (!moved) break; /* cannot happen: schedule.c's lists never deadlock */
  }
  free(done_at);
  return clock[0] > clock[1] ? clock[0] : clock[1];
}

typedef struct step_time {
  double us; /* best of the rounds */
  int index;
} step_time_t;

static int cmp_step_time(const void *a, const void *b) {
  double x = ((const step_time_t *)a)->us, y = ((const step_time_t *)b)->us;
  return (x < y) - (x > y);
}

/* --steps: times each step of |exe| on its own (best of |rounds|, in program order so every
 * step reads what the steps before it wrote; with --helper its kernel may split across the
 * helper); prints their sum, the longest chain of dependent steps, the makespan of the
 * two-thread schedule with these times, and the slowest steps with their lines of the
 * executable's description. */
static void time_steps(const tpu_executable_t *exe, void *const *in, void *const *out,
                       void *scratch, int rounds) {
  int n = exe->num_steps;
  step_time_t *t = calloc((size_t)n, sizeof *t);
  for (int i = 0; i < n; i++) t[i] = (step_time_t){1e30, i};
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < n; i++) {
      double t0 = bench_now_s();
      if (tpu_step_run(&exe->steps[i], in, out, scratch, g_pool) != TPU_OK) {
        fprintf(stderr, "step %d: %s\n", i, tpu_status_message());
        free(t);
        return;
      }
      double us = (bench_now_s() - t0) * 1e6;
      if (us < t[i].us) t[i].us = us;
    }
  }
  char *text = NULL;
  if (tpu_executable_describe(exe, tpu_allocator_system(), &text, NULL) != TPU_OK) text = NULL;
  char **line = calloc((size_t)n, sizeof *line);
  for (char *p = text, *end; p && *p; p = end ? end + 1 : NULL) {
    end = strchr(p, '\n');
    if (end) *end = '\0';
    int i = atoi(p);
    if (i >= 0 && i < n && strchr(p, ':')) line[i] = p;
    if (!end) break;
  }
  /* the longest chain of dependent steps (deps.h: a step's successors come after it) */
  double sum = 0, longest = 0;
  double *finish = calloc((size_t)n, sizeof *finish);
  for (int i = 0; i < n; i++) {
    sum += t[i].us;
    finish[i] += t[i].us;
    if (finish[i] > longest) longest = finish[i];
    for (int e = exe->deps.succ_start[i]; e < exe->deps.succ_start[i + 1]; e++) {
      int j = exe->deps.succ[e];
      if (finish[i] > finish[j]) finish[j] = finish[i];
    }
  }
  free(finish);
  printf("steps timed one at a time%s: %.1f us in all, %.1f us on the longest chain of "
         "dependent steps (the bound of any two-thread schedule without split kernels)\n",
         g_pool ? " (kernels split with the helper)" : "", sum, longest);
  if (exe->deps.order) {
    double *us = calloc((size_t)n, sizeof *us);
    for (int i = 0; i < n; i++) us[i] = t[i].us; /* t is still in step order */
    printf("its two-thread schedule (%s) with these times: %.1f us, %.1f us with 3 us per wait "
           "across threads\n", exe->parallel ? "used" : "not used", schedule_makespan(exe, us, 0),
           schedule_makespan(exe, us, 3));
    free(us);
  }
  qsort(t, (size_t)n, sizeof *t, cmp_step_time);
  printf("the slowest steps:\n");
  for (int i = 0; i < n && i < 40; i++) {
    printf("%8.1f us  %s\n", t[i].us, line[t[i].index] ? line[t[i].index] : "");
  }
  free(line);
  free(text);
  free(t);
}

/* An entry compiled, with its inputs filled and its outputs and scratch allocated. */
typedef struct loaded {
  char name[64];
  const entry_t *e;
  tpu_executable_t *exe;
  void **in, **out;
  void *scratch;
  double alone_us; /* median of its runs on its own (time_entry), 0 before */
} loaded_t;

static bool output_is_input(const entry_t *e, int o, int nin) {
  int32_t p = o < e->options.num_output_alias ? e->alias[o] : TPU_OUTPUT_ALIAS_NONE;
  return p >= 0 && p < nin;
}

static bool load(const char *name, const entry_t *e, loaded_t *l) {
  memset(l, 0, sizeof *l);
  snprintf(l->name, sizeof l->name, "%s", name);
  l->e = e;
  if (tpu_compile(e->graph, &e->options, tpu_allocator_system(), &l->exe) != TPU_OK) {
    fprintf(stderr, "%s: %s\n", name, tpu_status_message());
    return false;
  }
  tpu_executable_t *exe = l->exe;
  int nin = tpu_executable_num_inputs(exe), nout = tpu_executable_num_outputs(exe);
  void **in = calloc((size_t)nin + 1, sizeof *in), **out = calloc((size_t)nout + 1, sizeof *out);
  for (int v = 0; v < tpu_graph_num_nodes(e->graph); v++) {
    const tpu_node_t *n = tpu_graph_node(e->graph, v);
    if (n->op != TPU_OP_PARAMETER || n->attrs.param.index >= nin) continue;
    size_t bytes = span_bytes(n->dtype, &n->shape,
                              n->attrs.param.strided ? n->attrs.param.strides : NULL);
    in[n->attrs.param.index] = aligned_alloc(64, bytes);
    fill(in[n->attrs.param.index], n->dtype, bytes, 1234 + (uint64_t)v);
  }
  for (int o = 0; o < nout; o++) {
    if (output_is_input(e, o, nin)) continue; /* written into its parameter, below */
    int64_t strides[TPU_MAX_RANK];
    bool strided = tpu_executable_output_strides(exe, o, strides);
    out[o] = aligned_alloc(64, span_bytes(tpu_executable_output_dtype(exe, o),
                                          tpu_executable_output_shape(exe, o),
                                          strided ? strides : NULL));
  }
  for (int o = 0; o < nout; o++) {
    if (output_is_input(e, o, nin)) out[o] = in[e->alias[o]];
  }
  size_t sb = tpu_executable_scratch_bytes(exe);
  l->in = in;
  l->out = out;
  l->scratch = aligned_alloc(64, (sb + 64 + 63) / 64 * 64);
  return true;
}

static void unload(loaded_t *l) {
  if (!l->exe) return;
  int nin = tpu_executable_num_inputs(l->exe), nout = tpu_executable_num_outputs(l->exe);
  free(l->scratch);
  for (int o = 0; o < nout; o++) {
    if (!output_is_input(l->e, o, nin)) free(l->out[o]);
  }
  for (int i = 0; i < nin; i++) free(l->in[i]);
  free(l->in);
  free(l->out);
  tpu_executable_release(l->exe);
}

static tpu_status_t run(const loaded_t *l) {
  return tpu_executable_run(l->exe, l->in, l->out, l->scratch, g_pool);
}

static void print_line(const loaded_t *l, double best_us, double median_us) {
  printf("%-22s %6d %6d %6d %7d %9.1f %9.1f\n", l->name, tpu_graph_num_nodes(l->e->graph),
         tpu_executable_num_steps(l->exe), tpu_executable_num_fused(l->exe),
         tpu_executable_num_kernels(l->exe), best_us, median_us);
}

/* Times one loaded entry on its own, |rounds| runs in a row; prints its line and keeps
 * its median. */
static void time_entry(loaded_t *l, int rounds, bool describe, bool steps) {
  double *t = calloc((size_t)rounds, sizeof *t);
  tpu_status_t st = run(l); /* warm-up */
  for (int r = 0; r < rounds && st == TPU_OK; r++) {
    double t0 = bench_now_s();
    st = run(l);
    t[r] = (bench_now_s() - t0) * 1e6;
  }
  if (st != TPU_OK) {
    fprintf(stderr, "%s: %s\n", l->name, tpu_status_message());
  } else {
    qsort(t, (size_t)rounds, sizeof *t, cmp_double);
    print_line(l, t[0], t[rounds / 2]);
    l->alone_us = t[rounds / 2];
    if (steps) time_steps(l->exe, l->in, l->out, l->scratch, rounds);
  }
  if (describe) {
    char *text = NULL;
    if (tpu_executable_describe(l->exe, tpu_allocator_system(), &text, NULL) == TPU_OK) {
      printf("%s\n", text);
      free(text);
    }
  }
  free(t);
}

/* --turns: the loaded entries run one after another, |rounds| times, as a training step
 * runs its graphs, so each finds its data where the others left it (out of this core's
 * caches, often out of the host's L3); prints each one's line and its median over its
 * median alone (time_entry, run before). */
static void time_in_turns(const loaded_t *ls, int n, int rounds) {
  double *t = calloc((size_t)n * (size_t)rounds, sizeof *t);
  if (!t) return;
  for (int i = 0; i < n; i++) {
    if (run(&ls[i]) != TPU_OK) { /* warm-up */
      fprintf(stderr, "%s: %s\n", ls[i].name, tpu_status_message());
      free(t);
      return;
    }
  }
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < n; i++) {
      double t0 = bench_now_s();
      (void)run(&ls[i]);
      t[(size_t)i * (size_t)rounds + (size_t)r] = (bench_now_s() - t0) * 1e6;
    }
  }
  for (int i = 0; i < n; i++) {
    double *ti = t + (size_t)i * (size_t)rounds;
    qsort(ti, (size_t)rounds, sizeof *ti, cmp_double);
    printf("in turns: ");
    print_line(&ls[i], ti[0], ti[rounds / 2]);
    if (ls[i].alone_us > 0) {
      printf("          %.2fx its median alone\n", ti[rounds / 2] / ls[i].alone_us);
    }
  }
  free(t);
}

#define MAX_ENTRIES 64

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CACHE_DIR [min nodes] [rounds] [--describe] [--steps] "
            "[--helper | --pool] [--turns]\n", argv[0]);
    return 2;
  }
  int min_nodes = argc > 2 ? atoi(argv[2]) : 50, rounds = argc > 3 ? atoi(argv[3]) : 200;
  bool describe = false, helper = false, steps = false, turns = false, lone_pool = false;
  for (int i = 4; i < argc; i++) {
    turns |= !strcmp(argv[i], "--turns");
    describe |= !strcmp(argv[i], "--describe");
    steps |= !strcmp(argv[i], "--steps");
    helper |= !strcmp(argv[i], "--helper");
    lone_pool |= !strcmp(argv[i], "--pool");
  }
  if ((helper || lone_pool) && tpu_pool_create(1, tpu_allocator_system(), &g_pool) != TPU_OK) {
    return 1;
  }
  pool_helper helper_thread;
  if (helper && pool_helper_start(&helper_thread, g_pool) != 0) return 1;
  if (rounds < 1) rounds = 1;
  DIR *dir = opendir(argv[1]);
  if (!dir) {
    perror(argv[1]);
    return 1;
  }
  printf("%-22s %6s %6s %6s %7s %9s %9s\n", "entry", "nodes", "steps", "fused", "kernels",
         "best us", "median us");
  static entry_t es[MAX_ENTRIES];
  static loaded_t ls[MAX_ENTRIES];
  int n = 0;
  struct dirent *d;
  while ((d = readdir(dir)) && n < MAX_ENTRIES) {
    size_t len = strlen(d->d_name);
    if (len < 5 || strcmp(d->d_name + len - 5, ".tpuc") != 0) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[1], d->d_name);
    if (!read_entry(path, &es[n])) continue;
    if (tpu_graph_num_nodes(es[n].graph) < min_nodes || !load(d->d_name, &es[n], &ls[n])) {
      tpu_graph_destroy(es[n].graph);
      free(es[n].alias);
      continue;
    }
    time_entry(&ls[n], rounds, describe, steps);
    n++;
  }
  closedir(dir);
  if (turns) time_in_turns(ls, n, rounds);
  for (int i = 0; i < n; i++) {
    unload(&ls[i]);
    tpu_graph_destroy(es[i].graph);
    free(es[i].alias);
  }
  if (helper) pool_helper_stop(&helper_thread);
  tpu_pool_destroy(g_pool);
  return 0;
}
