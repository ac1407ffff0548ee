/* execute.c: runs one step of an executable by calling its kernel (include/tpu/kernels.h).
 *
 * Views are resolved to tpu_buf_t against this run's input, output and scratch pointers.
 * Data-movement nodes that needed a step (copies into outputs, concatenate, pad, dynamic
 * slices) are copies into or out of strided views; scatter and dynamic_update_slice copy
 * their operand into the output first and update it in place. Scalar operands that steer
 * a step (rng seed and offset, dynamic-slice starts, the pad value) are read at run time.
 * Fused steps run their head kernel and elementwise programs (fused_t in executable.h); a
 * fused reduction's row-wise loop is shared with the pool's helpers when any spin
 * (tpu_pool_help), each thread computing in its own part of the private chunk buffers.
 * Errors are prefixed with the op and node, so a failure names what failed.
 */
#include <stdio.h>
#include <string.h>

#include "compiler/executable.h"

static tpu_buf_t resolve(const view_t *v, void *const *inputs, void *const *outputs,
                         void *scratch) {
  char *base;
  switch (v->base) {
    case BASE_INPUT: base = inputs[v->index]; break;
    case BASE_OUTPUT: base = outputs[v->index]; break;
    default: base = (char *)scratch + v->scratch_offset; break;
  }
  tpu_buf_t b;
  b.data = base + v->elem_offset * (int64_t)tpu_dtype_size(v->dtype);
  b.dtype = v->dtype;
  b.rank = v->rank;
  memcpy(b.dims, v->dims, sizeof b.dims);
  memcpy(b.strides, v->strides, sizeof b.strides);
  return b;
}

static int64_t scalar_i64(const tpu_buf_t *b) {
  switch (b->dtype) {
    case TPU_I64: return *(const int64_t *)b->data;
    case TPU_I32: return *(const int32_t *)b->data;
    case TPU_I16: return *(const int16_t *)b->data;
    case TPU_I8: return *(const int8_t *)b->data;
    case TPU_U8: return *(const uint8_t *)b->data;
    case TPU_BOOL: return *(const uint8_t *)b->data;
    case TPU_F32: return (int64_t)*(const float *)b->data;
    case TPU_F64: return (int64_t)*(const double *)b->data;
    case TPU_F16: return (int64_t)tpu_f16_to_f32(*(const uint16_t *)b->data);
    case TPU_BF16: return (int64_t)tpu_bf16_to_f32(*(const uint16_t *)b->data);
    default: return 0;
  }
}

/* A sub-view of |b| starting at |start| with extent |dims| (same strides). */
static tpu_buf_t window(const tpu_buf_t *b, const int64_t *start, const int64_t *dims) {
  tpu_buf_t w = *b;
  int64_t off = 0;
  for (int d = 0; d < b->rank; d++) {
    off += start[d] * b->strides[d];
    w.dims[d] = dims[d];
  }
  w.data = (char *)b->data + off * (int64_t)tpu_dtype_size(b->dtype);
  return w;
}

static bool same_view(const tpu_buf_t *a, const tpu_buf_t *b) {
  return a->data == b->data && a->rank == b->rank &&
         !memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->rank);
}

/* The value of the pad operand as a fill: double for floats, int for the rest. */
static tpu_status_t fill_with_scalar(const tpu_buf_t *out, const tpu_buf_t *value,
                                     tpu_pool_t *pool) {
  double f = 0;
  switch (value->dtype) {
    case TPU_F32: f = *(const float *)value->data; break;
    case TPU_F64: f = *(const double *)value->data; break;
    case TPU_F16: f = tpu_f16_to_f32(*(const uint16_t *)value->data); break;
    case TPU_BF16: f = tpu_bf16_to_f32(*(const uint16_t *)value->data); break;
    default: f = (double)scalar_i64(value); break;
  }
  return tpu_kernel_fill(out, f, scalar_i64(value), pool);
}

static tpu_status_t run_pad(const step_t *s, const tpu_buf_t *x, const tpu_buf_t *value,
                            const tpu_buf_t *out, tpu_pool_t *pool) {
  TPU_RETURN_IF_ERROR(fill_with_scalar(out, value, pool));
  /* operand element i lands at lo + i * (interior + 1); negative lo/hi crop the operand */
  tpu_buf_t src = *x, dst = *out;
  int64_t src_off = 0, dst_off = 0;
  const tpu_pad_attrs_t *p = &s->attrs.pad;
  for (int d = 0; d < x->rank; d++) {
    int64_t step = p->interior[d] + 1;
    int64_t first = 0; /* first operand index that lands inside the result */
    if (p->lo[d] < 0) first = (-p->lo[d] + step - 1) / step;
    int64_t pos = p->lo[d] + first * step; /* its position in the result */
    int64_t count = 0;
    if (first < x->dims[d] && pos < out->dims[d]) {
      count = (out->dims[d] - 1 - pos) / step + 1;
      if (count > x->dims[d] - first) count = x->dims[d] - first;
    }
    if (count <= 0) return TPU_OK; /* nothing of the operand survives */
    src_off += first * x->strides[d];
    dst_off += pos * out->strides[d];
    src.dims[d] = count;
    dst.dims[d] = count;
    dst.strides[d] = out->strides[d] * step;
  }
  src.data = (char *)x->data + src_off * (int64_t)tpu_dtype_size(x->dtype);
  dst.data = (char *)out->data + dst_off * (int64_t)tpu_dtype_size(out->dtype);
  return tpu_kernel_copy(&src, &dst, pool);
}

/* Start indices of a dynamic slice, clamped into range as StableHLO specifies. */
static void dynamic_starts(const tpu_buf_t *in, int first_operand, int rank,
                           const int64_t *sizes, int64_t *starts) {
  for (int d = 0; d < rank; d++) {
    int64_t s = scalar_i64(&in[first_operand + d]);
    int64_t hi = in[0].dims[d] - sizes[d];
    starts[d] = s < 0 ? 0 : (s > hi ? hi : s);
  }
}

static tpu_status_t run_node(const step_t *s, tpu_buf_t *in, const tpu_buf_t *out,
                             tpu_pool_t *pool) {
  const tpu_attrs_t *a = &s->attrs;
  switch (s->op) {
    case TPU_OP_CONSTANT:
      return tpu_kernel_fill(out, a->constant.value, a->constant.ivalue, pool);
    case TPU_OP_IOTA:
      return tpu_kernel_iota(out, a->iota.dim, pool);
    case TPU_OP_RNG:
      return tpu_kernel_rng(a->rng.dist, (uint64_t)scalar_i64(&in[0]),
                            (uint64_t)scalar_i64(&in[1]), out, pool);
    case TPU_OP_COMPARE:
      return tpu_kernel_compare(a->compare.direction, &in[0], &in[1], out, pool);
    case TPU_OP_SELECT:
      return tpu_kernel_select(&in[0], &in[1], &in[2], out, pool);
    case TPU_OP_CLAMP:
      return tpu_kernel_clamp(&in[0], &in[1], &in[2], out, pool);
    case TPU_OP_RESHAPE: {
      /* a reshape the layout did not allow as a view: copy in row-major order into the
       * dense result, seen with the operand's dims */
      tpu_buf_t dst = in[0];
      dst.data = out->data;
      int64_t st = 1;
      for (int d = in[0].rank - 1; d >= 0; d--) {
        dst.strides[d] = st;
        st *= in[0].dims[d];
      }
      return tpu_kernel_copy(&in[0], &dst, pool);
    }
    case TPU_OP_CONCATENATE: {
      int64_t start[TPU_MAX_RANK] = {0};
      for (int i = 0; i < s->num_in; i++) {
        tpu_buf_t dst = window(out, start, in[i].dims);
        TPU_RETURN_IF_ERROR(tpu_kernel_copy(&in[i], &dst, pool));
        start[a->concat.dim] += in[i].dims[a->concat.dim];
      }
      return TPU_OK;
    }
    case TPU_OP_PAD:
      return run_pad(s, &in[0], &in[1], out, pool);
    case TPU_OP_DYNAMIC_SLICE: {
      int64_t starts[TPU_MAX_RANK];
      dynamic_starts(in, 1, in[0].rank, a->dynamic_slice.sizes, starts);
      tpu_buf_t src = window(&in[0], starts, a->dynamic_slice.sizes);
      return tpu_kernel_copy(&src, out, pool);
    }
    case TPU_OP_DYNAMIC_UPDATE_SLICE: {
      if (!same_view(&in[0], out)) TPU_RETURN_IF_ERROR(tpu_kernel_copy(&in[0], out, pool));
      int64_t starts[TPU_MAX_RANK];
      dynamic_starts(in, 2, in[0].rank, in[1].dims, starts);
      tpu_buf_t dst = window(out, starts, in[1].dims);
      return tpu_kernel_copy(&in[1], &dst, pool);
    }
    case TPU_OP_REDUCE:
      return tpu_kernel_reduce(a->reduce.kind, &in[0], a->reduce.dims, out, pool);
    case TPU_OP_REDUCE_WINDOW:
      return tpu_kernel_reduce_window(&a->reduce_window, &in[0], out, pool);
    case TPU_OP_SCAN:
      return tpu_kernel_scan(a->scan.kind, a->scan.dim, &in[0], out, pool);
    case TPU_OP_DOT_GENERAL:
      return tpu_kernel_dot_general(&a->dot, &in[0], &in[1], out, pool);
    case TPU_OP_CONVOLUTION:
      return tpu_kernel_convolution(&a->conv, &in[0], &in[1], out, pool);
    case TPU_OP_GATHER:
      return tpu_kernel_gather(&a->gather, &in[0], &in[1], out, pool);
    case TPU_OP_SCATTER:
      if (!same_view(&in[0], out)) TPU_RETURN_IF_ERROR(tpu_kernel_copy(&in[0], out, pool));
      return tpu_kernel_scatter(&a->scatter, out, &in[1], &in[2], out, pool);
    case TPU_OP_SORT:
      return tpu_kernel_sort(&a->sort, &in[0], out, NULL, pool);
    case TPU_OP_ARGSORT:
      return tpu_kernel_sort(&a->sort, &in[0], NULL, out, pool);
    case TPU_OP_CHOLESKY:
      return tpu_kernel_cholesky(a->cholesky.lower, &in[0], out, pool);
    case TPU_OP_TRIANGULAR_SOLVE:
      return tpu_kernel_triangular_solve(&a->triangular_solve, &in[0], &in[1], out, pool);
    case TPU_OP_LU:
      return tpu_kernel_lu(&in[0], out, NULL, pool);
    case TPU_OP_LU_PIVOTS:
      return tpu_kernel_lu(&in[0], NULL, out, pool);
    case TPU_OP_LU_PIVOTS_TO_PERMUTATION:
      return tpu_kernel_lu_pivots_to_permutation(&in[0], out, pool);
    case TPU_OP_GEQRF:
      return tpu_kernel_geqrf(&in[0], out, pool);
    case TPU_OP_HOUSEHOLDER_PRODUCT:
      return tpu_kernel_householder_product(&in[0], &in[1], out, pool);
    case TPU_OP_EIGH:
      return tpu_kernel_eigh(&in[0], out, pool);
    case TPU_OP_SVD:
      return tpu_kernel_svd(&in[0], out, pool);
    default:
      break;
  }
  switch (tpu_op_family(s->op)) {
    case TPU_FAMILY_UNARY:
      return tpu_kernel_unary(s->op, &in[0], out, pool);
    case TPU_FAMILY_BINARY:
      return tpu_kernel_binary(s->op, &in[0], &in[1], out, pool);
    default:
      return tpu_status_set(TPU_ERR_UNIMPLEMENTED, "no kernel for %s", tpu_op_name(s->op));
  }
}

/* ---- fused steps (see fused_t in executable.h) ---------------------------------------- */

/* Program |p| over |bound| (input 0, if any) and ins[0 .. n), into out and, for a program
 * with stores, extra[0 .. p->num_stores). */
static tpu_status_t run_program(const tpu_ew_program_t *p, const tpu_buf_t *bound,
                                const tpu_buf_t *ins, int n, const tpu_buf_t *out,
                                const tpu_buf_t *const *extra, tpu_pool_t *pool) {
  const tpu_buf_t *ptrs[TPU_EW_PROGRAM_MAX_INPUTS];
  int k = 0;
  if (bound) ptrs[k++] = bound;
  for (int i = 0; i < n && k < TPU_EW_PROGRAM_MAX_INPUTS; i++) ptrs[k++] = &ins[i];
  return tpu_kernel_ew_program_stores(p, ptrs, out, extra, pool);
}

/* |b| restricted to slices [r0, r0 + nr) of dim 0, if it spans the |rows| of dim 0 (inputs
 * broadcast along dim 0, or of rank 0, are whole in every chunk). */
static tpu_buf_t rows_of(const tpu_buf_t *b, int64_t rows, int64_t r0, int64_t nr) {
  tpu_buf_t w = *b;
  if (b->rank > 0 && b->dims[0] == rows) {
    w.data = (char *)b->data + r0 * b->strides[0] * (int64_t)tpu_dtype_size(b->dtype);
    w.dims[0] = nr;
  }
  return w;
}

/* Slices [r0, r0 + nr) of dim 0 of |b| (a private, chunk-sized buffer: r0 picks a thread's
 * part of it). */
static tpu_buf_t slice_rows(const tpu_buf_t *b, int64_t r0, int64_t nr) {
  tpu_buf_t w = *b;
  w.data = (char *)b->data + r0 * b->strides[0] * (int64_t)tpu_dtype_size(b->dtype);
  w.dims[0] = nr;
  return w;
}

/* A fused REDUCE step's row-wise loop: side -> prologue -> reduce -> epilogue -> tail per
 * chunk of dim-0 slices, so the rows a chunk computes are read back while still in cache. */
typedef struct rows_loop {
  const step_t *s;
  const tpu_buf_t *in, *out;
  tpu_buf_t head_out, chunk, side, tail; /* chunk and a private side: one chunk of rows */
  tpu_pool_t *pool;
  /* shared by threads (rows_slot): parts of part_rows rows */
  int64_t part_rows, num_parts;
  atomic_int_fast64_t next_part;
  atomic_int failed;
  tpu_status_t error;
  char message[TPU_STATUS_MESSAGE_CAP];
} rows_loop_t;

/* Rows [r0, r0 + nr) of the loop; |priv|: the first row of this thread's part of the
 * private buffers. */
static tpu_status_t run_rows(const rows_loop_t *l, int64_t r0, int64_t nr, int64_t priv,
                             tpu_pool_t *pool) {
  const fused_t *f = l->s->fused;
  const tpu_attrs_t *a = &l->s->attrs;
  const tpu_buf_t *in = l->in;
  const int64_t rows = f->rows;
  bool split = !a->reduce.dims[0];
  tpu_buf_t wins[TPU_EW_PROGRAM_MAX_INPUTS];
  tpu_buf_t x, w;
  /* chunk r0 of input i: a private side result holds only the current chunk */
#define CHUNK_OF(i) (((f->chunk_inputs >> (i)) & 1) ? slice_rows(&in[i], priv, nr) \
                                                  : rows_of(&in[i], rows, r0, nr))
  if (f->has_side) {
    w = f->side_private ? slice_rows(&l->side, priv, nr) : rows_of(&l->side, rows, r0, nr);
    for (int i = 0; i < f->num_side_in; i++) wins[i] = CHUNK_OF(f->side_in + i);
    TPU_RETURN_IF_ERROR(run_program(f->side, NULL, wins, f->num_side_in, &w, NULL, pool));
  }
  if (f->has_pre) {
    x = slice_rows(&l->chunk, priv, nr);
    for (int i = 0; i < f->num_pre_in; i++) wins[i] = CHUNK_OF(f->pre_in + i);
    TPU_RETURN_IF_ERROR(run_program(f->pre, NULL, wins, f->num_pre_in, &x, NULL, pool));
  } else if (f->head_reads_side) {
    x = w;
  } else {
    x = CHUNK_OF(0);
  }
  tpu_buf_t ho = split ? rows_of(&l->head_out, rows, r0, nr) : l->head_out;
  TPU_RETURN_IF_ERROR(tpu_kernel_reduce(a->reduce.kind, &x, a->reduce.dims, &ho, pool));
  if (f->has_post) {
    tpu_buf_t o = split ? rows_of(l->out, rows, r0, nr) : *l->out;
    for (int i = 0; i < f->num_post_in; i++) wins[i] = rows_of(&in[f->post_in + i], rows, r0, nr);
    TPU_RETURN_IF_ERROR(run_program(f->post, &o, wins, f->num_post_in, &o, NULL, pool));
  }
  if (f->has_tail) {
    tpu_buf_t t = rows_of(&l->tail, rows, r0, nr);
    for (int i = 0; i < f->num_tail_in; i++) wins[i] = CHUNK_OF(f->tail_in + i);
    TPU_RETURN_IF_ERROR(run_program(f->tail, NULL, wins, f->num_tail_in, &t, NULL, pool));
  }
#undef CHUNK_OF
  return TPU_OK;
}

/* One thread's share (begin = its slot): parts claimed one at a time, each computed in
 * the thread's own part of the private buffers. The first error stops the others. */
static void rows_slot(void *arg, int64_t begin, int64_t end) {
  rows_loop_t *l = arg;
  (void)end;
  const int64_t rows = l->s->fused->rows;
  for (;;) {
    int64_t p = atomic_fetch_add(&l->next_part, 1);
    if (p >= l->num_parts || atomic_load(&l->failed)) return;
    int64_t r0 = p * l->part_rows;
    int64_t nr = rows - r0 < l->part_rows ? rows - r0 : l->part_rows;
    tpu_status_t st = run_rows(l, r0, nr, begin * l->part_rows, NULL);
    int expected = 0;
    if (st != TPU_OK && atomic_compare_exchange_strong(&l->failed, &expected, 1)) {
      l->error = st;
      snprintf(l->message, sizeof l->message, "%s", tpu_status_message());
    }
  }
}

/* Elements below which a row-wise loop stays on one thread (a few microseconds). */
#define ROWS_SHARE_ELEMS 8192

static tpu_status_t run_rows_loop(rows_loop_t *l) {
  const fused_t *f = l->s->fused;
  int threads = 1 + tpu_pool_helpers(l->pool);
  bool split = !l->s->attrs.reduce.dims[0];
  if (split && threads > 1 && f->chunk_rows >= threads &&
      f->rows * f->row_elems >= ROWS_SHARE_ELEMS) {
    /* helpers are spinning: share the rows, each thread in its own part of the private
     * buffers (their chunk_rows rows hold |threads| parts of part_rows rows) */
    l->part_rows = f->chunk_rows / threads;
    l->num_parts = (f->rows + l->part_rows - 1) / l->part_rows;
    atomic_init(&l->next_part, 0);
    atomic_init(&l->failed, 0);
    tpu_pool_parallel_for_helpers(l->pool, threads, 1, rows_slot, l);
    if (atomic_load(&l->failed)) return tpu_status_set(l->error, "%s", l->message);
    return TPU_OK;
  }
  for (int64_t r0 = 0; r0 < f->rows; r0 += f->chunk_rows) {
    int64_t nr = f->rows - r0 < f->chunk_rows ? f->rows - r0 : f->chunk_rows;
    TPU_RETURN_IF_ERROR(run_rows(l, r0, nr, 0, l->pool));
  }
  return TPU_OK;
}

static tpu_status_t run_fused(const step_t *s, tpu_buf_t *in, const tpu_buf_t *out,
                              void *const *inputs, void *const *outputs, void *scratch,
                              tpu_pool_t *pool) {
  const fused_t *f = s->fused;
  const tpu_attrs_t *a = &s->attrs;
  if (!f->has_head) { /* a chain: its program, and the stores of a multi-output fusion */
    tpu_buf_t extra[TPU_EW_PROGRAM_MAX_STORES];
    const tpu_buf_t *xs[TPU_EW_PROGRAM_MAX_STORES];
    for (int j = 0; j < f->num_stores && j < TPU_EW_PROGRAM_MAX_STORES; j++) {
      extra[j] = resolve(&f->store_out[j], inputs, outputs, scratch);
      xs[j] = &extra[j];
    }
    return run_program(f->post, NULL, in + f->post_in, f->num_post_in, out, xs, pool);
  }
  /* the head's result: out itself, or out's (dense) bytes with the head's dims when the
   * epilogue reads a reshape of it */
  tpu_buf_t head_out = *out;
  if (f->head_reshaped) {
    head_out.rank = f->head_rank;
    memcpy(head_out.dims, f->head_dims, sizeof head_out.dims);
    int64_t st = 1;
    for (int d = f->head_rank - 1; d >= 0; d--) {
      head_out.strides[d] = st;
      st *= f->head_dims[d];
    }
  }
  if (f->has_pre || f->has_side || f->has_tail) {
    rows_loop_t l = {.s = s, .in = in, .out = out, .head_out = head_out, .pool = pool};
    if (f->has_pre) l.chunk = resolve(&f->chunk, inputs, outputs, scratch);
    if (f->has_side) l.side = resolve(&f->side_out, inputs, outputs, scratch);
    if (f->has_tail) l.tail = resolve(&f->tail_out, inputs, outputs, scratch);
    return run_rows_loop(&l);
  }
  switch (s->op) {
    case TPU_OP_REDUCE:
      TPU_RETURN_IF_ERROR(tpu_kernel_reduce(a->reduce.kind, &in[0], a->reduce.dims, &head_out, pool));
      break;
    case TPU_OP_DOT_GENERAL:
      if (f->post_bias) { /* the epilogue is out = dot + bias: the kernel adds it */
        const tpu_buf_t *bias = &in[f->post_in];
        return tpu_kernel_dot_general_bias(&a->dot, &in[0], &in[1], bias, out, pool);
      }
      TPU_RETURN_IF_ERROR(tpu_kernel_dot_general(&a->dot, &in[0], &in[1], &head_out, pool));
      break;
    case TPU_OP_CONVOLUTION:
      TPU_RETURN_IF_ERROR(tpu_kernel_convolution(&a->conv, &in[0], &in[1], &head_out, pool));
      break;
    default:
      return tpu_status_set(TPU_ERR_INTERNAL, "fused step: %s cannot head a fusion",
                            tpu_op_name(s->op));
  }
  if (!f->has_post) return TPU_OK;
  return run_program(f->post, out, in + f->post_in, f->num_post_in, out, NULL, pool);
}

tpu_status_t tpu_step_run(const step_t *s, void *const *inputs, void *const *outputs,
                          void *scratch, tpu_pool_t *pool) {
  tpu_buf_t in[TPU_MAX_RANK + 2];
  tpu_buf_t *ins = in;
  tpu_buf_t many[64];
  if (s->num_in > (int)(sizeof in / sizeof in[0])) {
    if (s->num_in > (int)(sizeof many / sizeof many[0])) {
      return tpu_status_set(TPU_ERR_UNIMPLEMENTED, "%s: more than 64 operands",
                            tpu_op_name(s->op));
    }
    ins = many;
  }
  for (int i = 0; i < s->num_in; i++) ins[i] = resolve(&s->in[i], inputs, outputs, scratch);
  tpu_buf_t out = resolve(&s->out, inputs, outputs, scratch);
  tpu_status_t st = s->kind == STEP_COPY    ? tpu_kernel_copy(&ins[0], &out, pool)
                    : s->kind == STEP_FUSED ? run_fused(s, ins, &out, inputs, outputs, scratch, pool)
                                            : run_node(s, ins, &out, pool);
  if (st != TPU_OK) {
    char msg[TPU_STATUS_MESSAGE_CAP];
    snprintf(msg, sizeof msg, "%s", tpu_status_message());
    return tpu_status_set(st, "%s (node %d): %s", tpu_op_printed_name(s->op), (int)s->node,
                          msg);
  }
  return TPU_OK;
}
