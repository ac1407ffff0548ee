/* reduce_cols.c: the columns reduction engine (see reduce_internal.h).
 *
 * Applies to f32/bf16 SUM, PROD, MAX, MIN when the innermost kept dim is contiguous in x
 * (C >= 16 columns) and the reduced dims merge into one dim of R rows with stride ld: each
 * output column j is op over i of x[a, i*ld + j] (x.sum(0) of a row-major matrix, bias
 * gradients, mean over the batch).
 *
 * Work unit: (outer index a, tile of up to TPU_RED_COL_WMAX columns; C is split into
 * equal tiles). A tile accumulates TPU_RED_COL_RB rows in sequence with the ISA col kernel
 * (in registers), and those row blocks combine pairwise as a binary counter, so long
 * sums stay accurate. When there are too few units for the threads, each unit's row
 * blocks are split into aligned groups of 2^k blocks whose results combine into the very
 * same tree, so results do not depend on the number of threads.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "vtpu/kernels/reduce_internal.h"

#define RB TPU_RED_COL_RB
/* Below this many input elements a reduction runs on one thread (a pool job costs more). */
#define SPLIT_MIN_ELEMS ((int64_t)1 << 17)

bool tpu_reduce_cols_applies(const tpu_reduce_plan_t *p) {
  if (p->cls != TPU_RCLS_F32 || (unsigned)p->kind > TPU_REDUCE_MIN) return false;
  if (p->x->dtype != TPU_F32 && p->x->dtype != TPU_BF16) return false;
  if (p->red.rank != 1 || p->red.dims[0] < 2 || p->kept.rank < 1) return false;
  int last = p->kept.rank - 1;
  return p->kept.strides[0][last] == 1 && p->kept.dims[last] >= 16;
}

/* A pairwise stream of tiles (|cap| levels of |w| floats in |v|); levels strictly
 * decrease from bottom to top. */
typedef struct tiles {
  int n, cap;
  int64_t w;
  int lvl[72];
  float *v; /* (cap, w) */
} tiles_t;

static float *tile_at(tiles_t *s, int i) { return s->v + (int64_t)i * s->w; }

static void tile_combine(tpu_reduce_kind_t kind, float *a, const float *b, int64_t w) {
  for (int64_t j = 0; j < w; j++) a[j] = tpu_reduce_combine_f32(kind, a[j], b[j]);
}

static void tiles_push(tiles_t *s, tpu_reduce_kind_t kind, const float *v, int lvl) {
  memcpy(tile_at(s, s->n), v, (size_t)s->w * sizeof(float));
  s->lvl[s->n++] = lvl;
  while (s->n >= 2 && s->lvl[s->n - 1] == s->lvl[s->n - 2]) {
    tile_combine(kind, tile_at(s, s->n - 2), tile_at(s, s->n - 1), s->w);
    s->lvl[s->n - 2]++;
    s->n--;
  }
}

/* Collapses the stream right to left into tile 0. */
static const float *tiles_finish(tiles_t *s, tpu_reduce_kind_t kind) {
  for (int i = s->n - 2; i >= 0; i--) tile_combine(kind, tile_at(s, i), tile_at(s, i + 1), s->w);
  s->n = 1;
  return tile_at(s, 0);
}

/* Stream depth for |n| pushes: at most floor(log2 n) + 1 entries, plus the pushed one. */
static int depth_for(int64_t n) {
  int d = 2;
  while (n > 1) {
    n >>= 1;
    d++;
  }
  return d;
}

typedef struct job {
  const tpu_reduce_plan_t *p;
  int64_t c, r, ld;        /* columns, rows, row stride */
  int64_t tw, tiles, units; /* tile width, tiles per outer index, units = outer * tiles */
  int64_t nrb, group, ngroups; /* row blocks; blocks per group (2^lg); groups per unit */
  int lg;
  float *partial;          /* (units, ngroups, tw) when ngroups > 1 */
  atomic_bool oom;
} job_t;

/* x and out offsets of unit |u|'s first column; returns the unit's width. */
static int64_t unit_origin(const job_t *jb, int64_t u, int64_t *xo, int64_t *oo) {
  const tpu_loop_t *kept = &jb->p->kept;
  int last = kept->rank - 1;
  tpu_loop_pos_t pos;
  tpu_loop_seek(kept, last, u / jb->tiles, &pos);
  int64_t j0 = (u % jb->tiles) * jb->tw;
  *xo = pos.off[0] + j0;
  *oo = pos.off[1] + j0 * kept->strides[1][last];
  return jb->c - j0 < jb->tw ? jb->c - j0 : jb->tw;
}

static void store_tile(const job_t *jb, int64_t oo, const float *v, int64_t w) {
  const tpu_buf_t *out = jb->p->out;
  int64_t os = jb->p->kept.strides[1][jb->p->kept.rank - 1];
  if (out->dtype == TPU_F32 && os == 1) {
    memcpy((float *)out->data + oo, v, (size_t)w * sizeof(float));
    return;
  }
  for (int64_t j = 0; j < w; j++) tpu_store_f64(out->data, out->dtype, oo + j * os, v[j]);
}

/* Row blocks [b0, b1) of one tile at x offset xo, combined; acc is scratch of w floats. */
static const float *tile_rows(const job_t *jb, int64_t xo, int64_t b0, int64_t b1,
                              tiles_t *s, float *acc) {
  const tpu_reduce_plan_t *p = jb->p;
  float id = tpu_reduce_identity_f32(p->kind);
  s->n = 0;
  for (int64_t b = b0; b < b1; b++) {
    int64_t rows = jb->r - b * RB < RB ? jb->r - b * RB : RB;
    int64_t off = xo + b * RB * jb->ld;
    for (int64_t j = 0; j < s->w; j++) acc[j] = id;
    if (p->x->dtype == TPU_F32) {
      p->isa->col_f32(p->kind, (const float *)p->x->data + off, jb->ld, rows, s->w, acc);
    } else {
      p->isa->col_bf16(p->kind, (const uint16_t *)p->x->data + off, jb->ld, rows, s->w, acc);
    }
    tiles_push(s, p->kind, acc, 0);
  }
  return tiles_finish(s, p->kind);
}

/* Scratch for one task: a stream of |depth| tiles and one accumulator tile. */
static float *scratch_alloc(const job_t *jb, int depth) {
  float *m = malloc(sizeof(float) * (size_t)jb->tw * (size_t)(depth + 1));
  if (!m) atomic_store(&((job_t *)jb)->oom, true);
  return m;
}

static void rows_task(void *ctx, int64_t begin, int64_t end) {
  const job_t *jb = ctx;
  int depth = depth_for(jb->group);
  float *mem = scratch_alloc(jb, depth);
  if (!mem) return;
  tiles_t s = {.cap = depth, .v = mem + jb->tw};
  for (int64_t t = begin; t < end; t++) {
    int64_t u = t / jb->ngroups, g = t % jb->ngroups;
    int64_t xo, oo;
    s.w = unit_origin(jb, u, &xo, &oo);
    int64_t b1 = (g + 1) * jb->group < jb->nrb ? (g + 1) * jb->group : jb->nrb;
    const float *v = tile_rows(jb, xo, g * jb->group, b1, &s, mem);
    if (jb->ngroups == 1) {
      store_tile(jb, oo, v, s.w);
    } else {
      memcpy(jb->partial + t * jb->tw, v, (size_t)s.w * sizeof(float));
    }
  }
  free(mem);
}

/* Second phase when units were split: combine each unit's group results. */
static void merge_task(void *ctx, int64_t begin, int64_t end) {
  const job_t *jb = ctx;
  int depth = depth_for(jb->ngroups) + 1;
  float *mem = scratch_alloc(jb, depth);
  if (!mem) return;
  tiles_t s = {.cap = depth, .v = mem + jb->tw};
  for (int64_t u = begin; u < end; u++) {
    int64_t xo, oo;
    s.w = unit_origin(jb, u, &xo, &oo);
    s.n = 0;
    for (int64_t g = 0; g < jb->ngroups; g++) {
      bool full = (g + 1) * jb->group <= jb->nrb; /* a partial last group merges with none */
      tiles_push(&s, jb->p->kind, jb->partial + (u * jb->ngroups + g) * jb->tw, full ? jb->lg : -1);
    }
    store_tile(jb, oo, tiles_finish(&s, jb->p->kind), s.w);
  }
  free(mem);
}

tpu_status_t tpu_reduce_cols(const tpu_reduce_plan_t *p) {
  job_t jb = {.p = p};
  atomic_init(&jb.oom, false);
  int last = p->kept.rank - 1;
  jb.c = p->kept.dims[last];
  jb.r = p->red.dims[0];
  jb.ld = p->red.strides[0][0];
  jb.tiles = (jb.c + TPU_RED_COL_WMAX - 1) / TPU_RED_COL_WMAX;
  jb.tw = (jb.c + jb.tiles - 1) / jb.tiles;
  if (jb.tiles > 1) jb.tw = (jb.tw + 15) / 16 * 16;
  jb.units = (p->m / jb.c) * jb.tiles;
  jb.nrb = (jb.r + RB - 1) / RB;
  jb.group = jb.nrb;
  jb.ngroups = 1;
  int64_t threads = p->num_threads;
  /* few outputs: split the reduced rows into groups, if there is enough work to share */
  if (threads > 1 && jb.units < 2 * threads && jb.nrb > 1 && jb.r * p->m >= SPLIT_MIN_ELEMS) {
    int64_t want = (4 * threads + jb.units - 1) / jb.units; /* groups per unit */
    if (want > 64) want = 64;
    jb.group = 1;
    while ((jb.nrb + jb.group - 1) / jb.group > want) {
      jb.group *= 2;
      jb.lg++;
    }
    jb.ngroups = (jb.nrb + jb.group - 1) / jb.group;
  }
  int64_t tasks = jb.units * jb.ngroups;
  int64_t work = jb.group * RB * jb.tw; /* elements per task, about */
  int64_t grain = work >= 32768 ? 1 : 32768 / work;
  tpu_allocator_t host = tpu_allocator_system();
  if (jb.ngroups > 1) {
    TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, (size_t)tasks * (size_t)jb.tw,
                                             sizeof(float), "reduce", (void **)&jb.partial));
  }
  tpu_pool_parallel_for(p->pool, tasks, grain, rows_task, &jb);
  if (jb.ngroups > 1) tpu_pool_parallel_for(p->pool, jb.units, 1, merge_task, &jb);
  tpu_allocator_free(host, jb.partial);
  if (atomic_load(&jb.oom)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "reduce: out of host memory for scratch");
  }
  return TPU_OK;
}
