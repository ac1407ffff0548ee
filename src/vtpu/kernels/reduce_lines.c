/* reduce_lines.c: the general reduction engine (see reduce_internal.h).
 *
 * For one output, the reduced elements form a sequence (the reduced dims in row-major
 * order, innermost = smallest stride unless the kind is ARGMAX/ARGMIN). The sequence is cut
 * into leaf blocks of at most TPU_RED_BLOCK elements:
 *   direct  the innermost reduced dim is contiguous and long (or is the only reduced
 *           dim), and the dtype is one the
 *           leaf kernels read (f32 and bf16, f64, i64): blocks are pieces of one line,
 *           read in place;
 *   gather  otherwise: blocks of TPU_RED_BLOCK consecutive sequence elements, converted
 *           into a scratch block (f32, f64 or i64; AND/OR are bitwise on integers, on
 *           0/1 truth values for bool and floats).
 * One short contiguous f32 line per output (under 128 elements: softmax and layer-norm
 * rows) goes to the ISA's rows_f32 up to 16 rows at a time, which returns row_f32's bits.
 * AND/OR over one contiguous line of bytes per output (bool, i8, u8) skip the blocks and
 * fold the line eight bytes at a time (exact, so the result is the same).
 * Leaf values are combined as a binary-counter tree (pairwise summation), so an f32 sum of
 * n elements has error O(log n) blocks. Many outputs run in parallel one output per item;
 * few large outputs split their blocks into aligned groups of 2^k blocks, which combine
 * into exactly the same tree, so results never depend on the number of threads.
 */
#include <math.h>

#include "vtpu/kernels/reduce_internal.h"

typedef struct rv {
  float f;      /* class f32 */
  double d;     /* class f64 */
  int64_t i;    /* class i64 */
  int64_t idx;  /* ARGMAX/ARGMIN: position in the reduced sequence */
} rv_t;

typedef struct engine {
  const tpu_reduce_plan_t *p;
  bool direct;
  bool arg;         /* ARGMAX / ARGMIN */
  int64_t n0, s0;   /* innermost reduced dim: length and stride */
  int64_t bpl;      /* direct: blocks per line */
  int64_t nblocks;  /* per output */
  size_t esize;
} engine_t;

/* ---- combining values ------------------------------------------------------------------ */

static bool arg_better(tpu_reduce_kind_t kind, double cand, double best) {
  if (best != best) return false;
  if (cand != cand) return true;
  return kind == TPU_REDUCE_ARGMAX ? cand > best : cand < best;
}

/* a (earlier in the sequence) op b */
static rv_t combine(const engine_t *e, rv_t a, rv_t b) {
  tpu_reduce_kind_t kind = e->p->kind;
  switch (e->p->cls) {
    case TPU_RCLS_F32:
      if (e->arg) return arg_better(kind, b.f, a.f) ? b : a;
      a.f = tpu_reduce_combine_f32(kind, a.f, b.f);
      return a;
    case TPU_RCLS_F64:
      if (e->arg) return arg_better(kind, b.d, a.d) ? b : a;
      switch (kind) {
        case TPU_REDUCE_SUM: a.d += b.d; break;
        case TPU_REDUCE_PROD: a.d *= b.d; break;
        case TPU_REDUCE_MAX: a.d = (a.d != a.d || b.d != b.d) ? a.d + b.d : fmax(a.d, b.d); break;
        case TPU_REDUCE_MIN: a.d = (a.d != a.d || b.d != b.d) ? a.d + b.d : fmin(a.d, b.d); break;
        default: break;
      }
      return a;
    default:
      switch (kind) {
        case TPU_REDUCE_SUM: a.i = (int64_t)((uint64_t)a.i + (uint64_t)b.i); break;
        case TPU_REDUCE_PROD: a.i = (int64_t)((uint64_t)a.i * (uint64_t)b.i); break;
        case TPU_REDUCE_MAX: a.i = b.i > a.i ? b.i : a.i; break;
        case TPU_REDUCE_MIN: a.i = b.i < a.i ? b.i : a.i; break;
        case TPU_REDUCE_AND: a.i &= b.i; break;
        case TPU_REDUCE_OR: a.i |= b.i; break;
        case TPU_REDUCE_ARGMAX: if (b.i > a.i) a = b; break;
        case TPU_REDUCE_ARGMIN: if (b.i < a.i) a = b; break;
        default: break;
      }
      return a;
  }
}

/* Pairwise combining as a binary counter: entries have strictly decreasing levels. */
typedef struct stream {
  int n;
  rv_t v[68];
  int lvl[68];
} stream_t;

static void stream_push(const engine_t *e, stream_t *s, rv_t v, int lvl) {
  s->v[s->n] = v;
  s->lvl[s->n] = lvl;
  s->n++;
  while (s->n >= 2 && s->lvl[s->n - 1] == s->lvl[s->n - 2]) {
    s->v[s->n - 2] = combine(e, s->v[s->n - 2], s->v[s->n - 1]);
    s->lvl[s->n - 2]++;
    s->n--;
  }
}

static rv_t stream_finish(const engine_t *e, const stream_t *s) {
  rv_t r = s->v[s->n - 1];
  for (int i = s->n - 2; i >= 0; i--) r = combine(e, s->v[i], r);
  return r;
}

/* ---- leaf blocks -------------------------------------------------------------------------- */

static rv_t leaf_f64(tpu_reduce_kind_t kind, const double *x, int64_t n) {
  rv_t r = {.d = x[0]};
  switch (kind) {
    case TPU_REDUCE_SUM: { /* 4 lanes, added pairwise */
      double a[4] = {0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        for (int l = 0; l < 4; l++) a[l] += x[i + l];
      }
      for (; i < n; i++) a[0] += x[i];
      r.d = (a[0] + a[1]) + (a[2] + a[3]);
      return r;
    }
    case TPU_REDUCE_PROD:
      for (int64_t i = 1; i < n; i++) r.d *= x[i];
      return r;
    case TPU_REDUCE_MAX:
      for (int64_t i = 1; i < n; i++) {
        if (x[i] > r.d || x[i] != x[i]) r.d = x[i];
      }
      return r;
    case TPU_REDUCE_MIN:
      for (int64_t i = 1; i < n; i++) {
        if (x[i] < r.d || x[i] != x[i]) r.d = x[i];
      }
      return r;
    default: /* ARGMAX, ARGMIN */
      for (int64_t i = 1; i < n && r.d == r.d; i++) {
        if (arg_better(kind, x[i], r.d)) {
          r.d = x[i];
          r.idx = i;
        }
      }
      return r;
  }
}

static rv_t leaf_arg_f32(tpu_reduce_kind_t kind, const float *x, int64_t n) {
  rv_t r = {.f = x[0]};
  for (int64_t i = 1; i < n && r.f == r.f; i++) {
    if (arg_better(kind, x[i], r.f)) {
      r.f = x[i];
      r.idx = i;
    }
  }
  return r;
}

static rv_t leaf_i64(tpu_reduce_kind_t kind, const int64_t *x, int64_t n) {
  rv_t r = {.i = x[0]};
  uint64_t u = (uint64_t)x[0];
  switch (kind) {
    case TPU_REDUCE_SUM:
      for (int64_t i = 1; i < n; i++) u += (uint64_t)x[i];
      r.i = (int64_t)u;
      return r;
    case TPU_REDUCE_PROD:
      for (int64_t i = 1; i < n; i++) u *= (uint64_t)x[i];
      r.i = (int64_t)u;
      return r;
    case TPU_REDUCE_MAX:
      for (int64_t i = 1; i < n; i++) r.i = x[i] > r.i ? x[i] : r.i;
      return r;
    case TPU_REDUCE_MIN:
      for (int64_t i = 1; i < n; i++) r.i = x[i] < r.i ? x[i] : r.i;
      return r;
    case TPU_REDUCE_AND:
      for (int64_t i = 1; i < n; i++) r.i &= x[i];
      return r;
    case TPU_REDUCE_OR:
      for (int64_t i = 1; i < n; i++) r.i |= x[i];
      return r;
    default:
      for (int64_t i = 1; i < n; i++) {
        if (kind == TPU_REDUCE_ARGMAX ? x[i] > r.i : x[i] < r.i) {
          r.i = x[i];
          r.idx = i;
        }
      }
      return r;
  }
}

/* The value of the |count| elements at |ptr| (a line of x if direct, else scratch). */
static rv_t leaf(const engine_t *e, const void *ptr, int64_t count, int64_t start) {
  const tpu_reduce_plan_t *p = e->p;
  rv_t r;
  switch (p->cls) {
    case TPU_RCLS_F32:
      if (e->arg) {
        r = leaf_arg_f32(p->kind, ptr, count);
      } else if (e->direct && p->x->dtype == TPU_BF16) {
        r.f = p->isa->row_bf16(p->kind, ptr, count);
      } else {
        r.f = p->isa->row_f32(p->kind, ptr, count);
      }
      break;
    case TPU_RCLS_F64: r = leaf_f64(p->kind, ptr, count); break;
    default: r = leaf_i64(p->kind, ptr, count); break;
  }
  if (e->arg) r.idx += start;
  return r;
}

/* Converts |n| elements of x at element offset |off|, stride |s|, into scratch |dst|. */
static void gather_run(const engine_t *e, int64_t off, int64_t s, int64_t n, void *dst) {
  const tpu_reduce_plan_t *p = e->p;
  tpu_dtype_t dt = p->x->dtype;
  const void *x = p->x->data;
  if (p->cls == TPU_RCLS_F32) {
    float *o = dst;
    if (dt == TPU_F32) {
      const float *src = (const float *)x + off;
      for (int64_t i = 0; i < n; i++) o[i] = src[i * s];
    } else if (dt == TPU_BF16) {
      const uint16_t *src = (const uint16_t *)x + off;
      for (int64_t i = 0; i < n; i++) o[i] = tpu_bf16_to_f32(src[i * s]);
    } else if (s == 1) {
      p->isa->f16_to_f32((const uint16_t *)x + off, n, o);
    } else {
      const uint16_t *src = (const uint16_t *)x + off;
      for (int64_t i = 0; i < n; i++) o[i] = tpu_f16_to_f32(src[i * s]);
    }
  } else if (p->cls == TPU_RCLS_F64) {
    const double *src = (const double *)x + off;
    double *o = dst;
    for (int64_t i = 0; i < n; i++) o[i] = src[i * s];
  } else if ((p->kind == TPU_REDUCE_AND || p->kind == TPU_REDUCE_OR) &&
             tpu_dtype_is_float(dt)) { /* floats: truth values (NaN is true) */
    int64_t *o = dst;
    for (int64_t i = 0; i < n; i++) o[i] = tpu_load_truth(x, dt, off + i * s);
  } else {
    int64_t *o = dst;
    switch (dt) {
      case TPU_I64: for (int64_t i = 0; i < n; i++) o[i] = ((const int64_t *)x)[off + i * s]; break;
      case TPU_I32: for (int64_t i = 0; i < n; i++) o[i] = ((const int32_t *)x)[off + i * s]; break;
      case TPU_I16: for (int64_t i = 0; i < n; i++) o[i] = ((const int16_t *)x)[off + i * s]; break;
      case TPU_I8: for (int64_t i = 0; i < n; i++) o[i] = ((const int8_t *)x)[off + i * s]; break;
      default: for (int64_t i = 0; i < n; i++) o[i] = ((const uint8_t *)x)[off + i * s]; break;
    }
  }
}

/* Block |b| of the output whose reduced elements start at x offset |xo|. */
static rv_t block(const engine_t *e, int64_t xo, int64_t b, void *scratch) {
  const tpu_loop_t *red = &e->p->red;
  tpu_loop_pos_t pos;
  if (e->direct) {
    int64_t line = b / e->bpl, k = b % e->bpl;
    tpu_loop_seek(red, red->rank - 1, line, &pos);
    int64_t first = k * TPU_RED_BLOCK;
    int64_t count = e->n0 - first < TPU_RED_BLOCK ? e->n0 - first : TPU_RED_BLOCK;
    const char *ptr = (const char *)e->p->x->data + (xo + pos.off[0] + first) * (int64_t)e->esize;
    return leaf(e, ptr, count, line * e->n0 + first);
  }
  int64_t start = b * TPU_RED_BLOCK;
  int64_t count = e->p->n - start < TPU_RED_BLOCK ? e->p->n - start : TPU_RED_BLOCK;
  size_t ssize = e->p->cls == TPU_RCLS_F32 ? 4 : 8;
  for (int64_t filled = 0; filled < count;) {
    tpu_loop_seek(red, red->rank, start + filled, &pos);
    int64_t run = e->n0 - pos.idx[red->rank - 1];
    if (run > count - filled) run = count - filled;
    gather_run(e, xo + pos.off[0], e->s0, run, (char *)scratch + filled * (int64_t)ssize);
    filled += run;
  }
  return leaf(e, scratch, count, start);
}

/* Blocks [b0, b1) of one output, combined pairwise. */
static rv_t span(const engine_t *e, int64_t xo, int64_t b0, int64_t b1, void *scratch) {
  if (b1 - b0 == 1) return block(e, xo, b0, scratch);
  stream_t s = {0};
  for (int64_t b = b0; b < b1; b++) stream_push(e, &s, block(e, xo, b, scratch), 0);
  return stream_finish(e, &s);
}

static void store(const engine_t *e, int64_t oo, rv_t v) {
  const tpu_buf_t *out = e->p->out;
  if (e->arg) {
    tpu_store_i64(out->data, out->dtype, oo, v.idx);
  } else if (e->p->cls == TPU_RCLS_F32) {
    tpu_store_f64(out->data, out->dtype, oo, v.f);
  } else if (e->p->cls == TPU_RCLS_F64) {
    tpu_store_f64(out->data, out->dtype, oo, v.d);
  } else {
    tpu_store_i64(out->data, out->dtype, oo, v.i);
  }
}

/* ---- parallel drivers ------------------------------------------------------------------- */

/* AND/OR of the n bytes at x, eight at a time (bitwise, so the order does not matter),
 * as the i64 the general path computes: sign-extended for i8, zero-extended else. */
static int64_t line_bytes_andor(tpu_reduce_kind_t kind, tpu_dtype_t dt, const uint8_t *x,
                                int64_t n) {
  uint64_t acc, w;
  int64_t i = 0;
  if (kind == TPU_REDUCE_AND) {
    for (acc = ~(uint64_t)0; i + 8 <= n; i += 8) {
      memcpy(&w, x + i, 8);
      acc &= w;
    }
    for (; i < n; i++) acc &= (uint64_t)x[i] | ~(uint64_t)0xff; /* the low byte only */
    acc &= acc >> 32;
    acc &= acc >> 16;
    acc &= acc >> 8;
  } else {
    for (acc = 0; i + 8 <= n; i += 8) {
      memcpy(&w, x + i, 8);
      acc |= w;
    }
    for (; i < n; i++) acc |= x[i];
    acc |= acc >> 32;
    acc |= acc >> 16;
    acc |= acc >> 8;
  }
  uint8_t r = (uint8_t)acc;
  return dt == TPU_I8 ? (int64_t)(int8_t)r : (int64_t)r;
}

/* Outputs [begin, end), one after the other. */
static void outputs_task(void *ctx, int64_t begin, int64_t end) {
  const engine_t *e = ctx;
  _Alignas(64) unsigned char scratch[TPU_RED_BLOCK * 8];
  tpu_loop_pos_t pos;
  tpu_loop_seek(&e->p->kept, e->p->kept.rank, begin, &pos);
  const tpu_reduce_plan_t *p = e->p;
  if (e->direct && e->nblocks == 1 && !e->arg && p->x->dtype == TPU_F32 &&
      p->out->dtype == TPU_F32) {
    /* one short f32 line per output (softmax, layer norm rows): its single leaf block
     * is the result, stored directly (the same value the general path computes) */
    const float *x = p->x->data;
    float *out = p->out->data;
    if (p->isa->rows_f32 && e->n0 < 128 && p->kept.rank >= 1) {
      /* up to 16 rows per call along the innermost kept dim (the same values) */
      int d = p->kept.rank - 1;
      int64_t sx = p->kept.strides[0][d], so = p->kept.strides[1][d];
      for (int64_t o = begin; o < end;) {
        int64_t run = p->kept.dims[d] - pos.idx[d];
        int k = (int)(run < 16 ? run : 16);
        if (k > end - o) k = (int)(end - o);
        p->isa->rows_f32(p->kind, x + pos.off[0], sx, k, e->n0, out + pos.off[1], so);
        o += k;
        pos.idx[d] += k - 1;
        pos.off[0] += (k - 1) * sx;
        pos.off[1] += (k - 1) * so;
        tpu_loop_step(&p->kept, p->kept.rank, &pos);
      }
      return;
    }
    for (int64_t o = begin; o < end; o++) {
      out[pos.off[1]] = p->isa->row_f32(p->kind, x + pos.off[0], e->n0);
      tpu_loop_step(&p->kept, p->kept.rank, &pos);
    }
    return;
  }
  if ((p->kind == TPU_REDUCE_AND || p->kind == TPU_REDUCE_OR) && e->esize == 1 &&
      !tpu_dtype_is_float(p->x->dtype) && p->red.rank == 1 && e->s0 == 1) {
    /* one contiguous line of bytes per output (bool all/any over the last dim) */
    const uint8_t *x = p->x->data;
    for (int64_t o = begin; o < end; o++) {
      rv_t v = {.i = line_bytes_andor(p->kind, p->x->dtype, x + pos.off[0], e->n0)};
      store(e, pos.off[1], v);
      tpu_loop_step(&p->kept, p->kept.rank, &pos);
    }
    return;
  }
  for (int64_t o = begin; o < end; o++) {
    store(e, pos.off[1], span(e, pos.off[0], 0, e->nblocks, scratch));
    tpu_loop_step(&e->p->kept, e->p->kept.rank, &pos);
  }
}

#define MAX_GROUPS 256

typedef struct groups {
  const engine_t *e;
  int64_t xo, group; /* blocks per group, a power of two */
  rv_t vals[MAX_GROUPS];
} groups_t;

static void groups_task(void *ctx, int64_t begin, int64_t end) {
  groups_t *g = ctx;
  _Alignas(64) unsigned char scratch[TPU_RED_BLOCK * 8];
  for (int64_t i = begin; i < end; i++) {
    int64_t b1 = (i + 1) * g->group;
    if (b1 > g->e->nblocks) b1 = g->e->nblocks;
    g->vals[i] = span(g->e, g->xo, i * g->group, b1, scratch);
  }
}

tpu_status_t tpu_reduce_lines(const tpu_reduce_plan_t *p) {
  engine_t e = {.p = p};
  e.arg = p->kind == TPU_REDUCE_ARGMAX || p->kind == TPU_REDUCE_ARGMIN;
  e.esize = tpu_dtype_size(p->x->dtype);
  e.n0 = p->red.dims[p->red.rank - 1];
  e.s0 = p->red.strides[0][p->red.rank - 1];
  tpu_dtype_t dt = p->x->dtype;
  bool readable = (p->cls == TPU_RCLS_F32 && (dt == TPU_F32 || (dt == TPU_BF16 && !e.arg))) ||
                  (p->cls == TPU_RCLS_F64) ||
                  (p->cls == TPU_RCLS_I64 && dt == TPU_I64);
  /* one line per output: its blocks are the same either way, so short lines (softmax over
   * 32 keys) read in place too instead of paying a gather per output */
  e.direct = readable && e.s0 == 1 && (e.n0 >= 256 || p->red.rank == 1);
  if (e.direct) {
    e.bpl = (e.n0 + TPU_RED_BLOCK - 1) / TPU_RED_BLOCK;
    e.nblocks = (p->n / e.n0) * e.bpl;
  } else {
    e.nblocks = (p->n + TPU_RED_BLOCK - 1) / TPU_RED_BLOCK;
  }

  int threads = p->num_threads;
  if (threads == 1 || p->m >= 2 * threads || e.nblocks < 2) {
    int64_t grain = p->n >= 65536 ? 1 : 65536 / p->n;
    tpu_pool_parallel_for(p->pool, p->m, grain, outputs_task, &e);
    return TPU_OK;
  }
  /* Few outputs, many blocks each: split every output's blocks into aligned groups. */
  int64_t want = 4 * (int64_t)threads < MAX_GROUPS ? 4 * (int64_t)threads : MAX_GROUPS;
  groups_t g = {.e = &e, .group = 1};
  int lg = 0;
  while ((e.nblocks + g.group - 1) / g.group > want) {
    g.group *= 2;
    lg++;
  }
  int64_t ngroups = (e.nblocks + g.group - 1) / g.group;
  tpu_loop_pos_t pos;
  tpu_loop_seek(&p->kept, p->kept.rank, 0, &pos);
  for (int64_t o = 0; o < p->m; o++) {
    g.xo = pos.off[0];
    tpu_pool_parallel_for(p->pool, ngroups, 1, groups_task, &g);
    stream_t s = {0};
    for (int64_t i = 0; i < ngroups; i++) {
      bool full = (i + 1) * g.group <= e.nblocks; /* a partial last group merges with none */
      stream_push(&e, &s, g.vals[i], full ? lg : -1);
    }
    store(&e, pos.off[1], stream_finish(&e, &s));
    tpu_loop_step(&p->kept, p->kept.rank, &pos);
  }
  return TPU_OK;
}
