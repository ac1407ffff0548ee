/* compile.c: graph -> executable (see include/tpu/compiler.h).
 *
 * First the graph passes (include/tpu/passes.h) give an optimized graph, and fusion
 * planning (fuse.h) groups its nodes into fused steps. Then one pass over the nodes
 * decides where each value lives:
 *   - parameters are views of inputs (with the graph's strides);
 *   - transpose, broadcast_in_dim, slice, reverse, and reshapes whose strides allow it are
 *     views of their operand (no step, no memory);
 *   - every other node gets a step and a buffer: the output buffer when it is a graph
 *     output that can be written directly, else a dense scratch buffer.
 *   - nodes inside a fused group have no value of their own; the group's root gets one
 *     STEP_FUSED step (reading the group's inputs) and a buffer like any other step;
 *   - with fusion on, nodes no step reads (constants a program holds) get no step.
 * Outputs that are parameters, views, repeated, or may alias inputs get a final COPY step,
 * except an output that exactly overlays a parameter (an in-place update; alias.h): it is
 * written directly once no later step reads the parameter's memory. Steps are listed in
 * node order and the memory planner only places scratch buffers, so no read of the old value
 * moves after that write; a parallel run (deps.h) keeps every such order between steps that
 * share memory.
 * Scratch offsets are then assigned by the memory planning pass (plan_memory.h), which
 * may also put intermediates in outputs not yet written.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/spin.h"
#include "compiler/alias.h"
#include "compiler/deps.h"
#include "compiler/executable.h"
#include "compiler/fuse.h"
#include "compiler/plan_memory.h"
#include "tpu/passes.h"
#include "vtpu/kernels/ew_jit.h"

/* Elements of a prologue chunk (f32: 256 KiB), so a fused reduction's operand stays in the
 * core's cache instead of being written whole. */
#define FUSE_CHUNK_ELEMS ((int64_t)1 << 16)

#define SCRATCH_ALIGN 64

typedef struct value_info {
  view_t view;
  bool has_view;        /* the value is readable through |view| */
  int buffer;           /* scratch buffer backing the view, or -1 */
  int last_use;         /* index of the last node that reads it; num_nodes for outputs */
} value_info_t;

typedef plan_buffer_t buffer_t; /* node positions: defined at |first|, last read at |last| */

typedef struct compile_state {
  const tpu_graph_t *g;
  tpu_allocator_t host;
  int n;
  value_info_t *values;
  buffer_t *buffers;
  int num_buffers, cap_buffers;
  step_t *steps;
  int num_steps, cap_steps;
  fuse_plan_t plan;
  int *out_exact;        /* (num outputs) the parameter an output exactly overlays, or -1 */
  bool *out_may_alias;   /* (num outputs) the output may share memory with inputs */
  int first_final_copy;  /* steps from here on are copy_outputs' copies, at position n */
} compile_state_t;

/* ---- views ------------------------------------------------------------------------------ */

static void dense_strides(const tpu_shape_t *s, int64_t *strides) {
  int64_t st = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    strides[d] = st;
    st *= s->dims[d] > 0 ? s->dims[d] : 1;
  }
}

view_t tpu_view_make(view_base_t base, int index, tpu_dtype_t dtype, const tpu_shape_t *shape,
                     const int64_t *strides) {
  view_t v;
  memset(&v, 0, sizeof v);
  v.base = base;
  v.index = index;
  v.dtype = dtype;
  v.rank = shape->rank;
  memcpy(v.dims, shape->dims, sizeof(int64_t) * (size_t)shape->rank);
  if (strides) {
    memcpy(v.strides, strides, sizeof(int64_t) * (size_t)shape->rank);
  } else {
    dense_strides(shape, v.strides);
  }
  return v;
}

/* Strides for viewing |v| with |shape| without copying (PyTorch's computeStride rule),
 * or false if the layout does not allow it. */
static bool reshape_strides(const view_t *v, const tpu_shape_t *shape, int64_t *out) {
  int64_t numel = 1;
  for (int d = 0; d < v->rank; d++) numel *= v->dims[d];
  if (numel == 0) {
    dense_strides(shape, out);
    return true;
  }
  int view_d = shape->rank - 1;
  int64_t chunk_base_stride = v->rank ? v->strides[v->rank - 1] : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = v->rank - 1; tensor_d >= 0; tensor_d--) {
    tensor_numel *= v->dims[tensor_d];
    if (tensor_d == 0 ||
        (v->dims[tensor_d - 1] != 1 &&
         v->strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape->dims[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape->dims[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = v->strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

/* The view a layout node gives of its operand's view, or false if it needs a copy. */
static bool layout_view(const tpu_node_t *node, const view_t *in, view_t *out) {
  *out = *in;
  out->dtype = node->dtype;
  out->rank = node->shape.rank;
  memcpy(out->dims, node->shape.dims, sizeof(int64_t) * TPU_MAX_RANK);
  switch (node->op) {
    case TPU_OP_TRANSPOSE:
      for (int d = 0; d < node->shape.rank; d++) {
        out->strides[d] = in->strides[node->attrs.transpose.perm[d]];
      }
      return true;
    case TPU_OP_BROADCAST_IN_DIM:
      for (int d = 0; d < node->shape.rank; d++) out->strides[d] = 0;
      for (int k = 0; k < in->rank; k++) {
        int64_t d = node->attrs.broadcast.dims[k];
        out->strides[d] = (in->dims[k] == 1 && node->shape.dims[d] != 1) ? 0 : in->strides[k];
      }
      return true;
    case TPU_OP_SLICE:
      for (int d = 0; d < in->rank; d++) {
        out->elem_offset += node->attrs.slice.start[d] * in->strides[d];
        out->strides[d] = in->strides[d] * node->attrs.slice.stride[d];
      }
      return true;
    case TPU_OP_REVERSE:
      for (int d = 0; d < in->rank; d++) {
        if (node->attrs.reverse.dims[d] && in->dims[d] > 0) {
          out->elem_offset += (in->dims[d] - 1) * in->strides[d];
          out->strides[d] = -in->strides[d];
        }
      }
      return true;
    case TPU_OP_RESHAPE:
      return reshape_strides(in, &node->shape, out->strides);
    default:
      return false;
  }
}

/* Ops whose kernels write through any output strides (elementwise and fills). Others get
 * a dense buffer and, when the destination is strided, a COPY afterwards. */
static bool writes_strided_output(tpu_op_t op) {
  switch (tpu_op_family(op)) {
    case TPU_FAMILY_UNARY:
    case TPU_FAMILY_BINARY:
    case TPU_FAMILY_COMPARE:
      return true;
    case TPU_FAMILY_LEAF:
      return op == TPU_OP_CONSTANT || op == TPU_OP_IOTA;
    case TPU_FAMILY_SHAPE:
      return op != TPU_OP_DYNAMIC_UPDATE_SLICE && op != TPU_OP_RESHAPE;
    default:
      return false;
  }
}

/* ---- steps and buffers -------------------------------------------------------------------- */

static tpu_status_t push_step(compile_state_t *cs, step_kind_t kind, const tpu_node_t *node,
                              tpu_value_t id, const view_t *out, const tpu_value_t *operands,
                              int num_operands, const view_t *copy_src) {
  if (cs->num_steps == cs->cap_steps) {
    int cap = cs->cap_steps ? cs->cap_steps * 2 : 16;
    step_t *grown;
    TPU_RETURN_IF_ERROR(tpu_allocator_calloc(cs->host, (size_t)cap, sizeof *grown, "compile",
                                             (void **)&grown));
    if (cs->num_steps) memcpy(grown, cs->steps, sizeof *grown * (size_t)cs->num_steps);
    tpu_allocator_free(cs->host, cs->steps);
    cs->steps = grown;
    cs->cap_steps = cap;
  }
  step_t *s = &cs->steps[cs->num_steps];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->node = id;
  s->out = *out;
  if (kind == STEP_COPY) {
    s->op = node ? node->op : TPU_OP_PARAMETER;
    s->num_in = 1;
    TPU_RETURN_IF_ERROR(
        tpu_allocator_calloc(cs->host, 1, sizeof(view_t), "compile", (void **)&s->in));
    s->in[0] = *copy_src;
  } else {
    s->op = node->op;
    s->attrs = node->attrs;
    s->num_in = num_operands;
    if (num_operands) {
      TPU_RETURN_IF_ERROR(tpu_allocator_calloc(cs->host, (size_t)num_operands, sizeof(view_t),
                                               "compile", (void **)&s->in));
    }
    for (int i = 0; i < num_operands; i++) s->in[i] = cs->values[operands[i]].view;
  }
  cs->num_steps++;
  return TPU_OK;
}

static tpu_status_t new_buffer_of(compile_state_t *cs, tpu_dtype_t dtype,
                                  const tpu_shape_t *shape, int def, int *out_index) {
  int64_t numel;
  size_t used, bytes;
  if (!tpu_shape_numel(shape, &numel) ||
      !tpu_size_mul((size_t)numel, tpu_dtype_size(dtype), &used) ||
      !tpu_size_align_up(used ? used : 1, SCRATCH_ALIGN, &bytes)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "compile: buffer size overflows");
  }
  if (cs->num_buffers >= cs->cap_buffers) {
    return tpu_status_set(TPU_ERR_INTERNAL, "compile: more than %d scratch buffers",
                          cs->cap_buffers);
  }
  buffer_t *b = &cs->buffers[cs->num_buffers];
  b->bytes = bytes;
  b->used = used;
  b->elem_bytes = tpu_dtype_size(dtype);
  b->first = def;
  b->last = def;
  *out_index = cs->num_buffers++;
  return TPU_OK;
}

static tpu_status_t new_buffer(compile_state_t *cs, const tpu_node_t *node, int def,
                               int *out_index) {
  return new_buffer_of(cs, node->dtype, &node->shape, def, out_index);
}

/* The arenas (plan_memory.h): dense outputs that share memory with no input, free until
 * the step that first writes them (copy_outputs' copies run after every node). At most
 * MAX_ARENAS, the latest written, keep planning linear in the graph's size. */
#define MAX_ARENAS 64

static void note_write(const view_t *v, int pos, int *first_write) {
  if (v->base == BASE_OUTPUT && pos < first_write[v->index]) first_write[v->index] = pos;
}

static int output_arenas(const compile_state_t *cs, int *first_write, plan_arena_t *arenas,
                         int *arena_output) {
  int num_outputs = tpu_graph_num_outputs(cs->g);
  for (int o = 0; o < num_outputs; o++) first_write[o] = INT_MAX;
  for (int s = 0; s < cs->num_steps; s++) {
    const step_t *st = &cs->steps[s];
    int pos = s >= cs->first_final_copy ? cs->n : st->node;
    note_write(&st->out, pos, first_write);
    const fused_t *f = st->fused;
    if (f && f->has_side) note_write(&f->side_out, pos, first_write);
    if (f && f->has_tail) note_write(&f->tail_out, pos, first_write);
    for (int j = 0; f && j < f->num_stores; j++) note_write(&f->store_out[j], pos, first_write);
  }
  int n = 0;
  for (int o = 0; o < num_outputs; o++) {
    const tpu_node_t *node = tpu_graph_node(cs->g, tpu_graph_output_value(cs->g, o));
    int64_t numel, strides[TPU_MAX_RANK];
    size_t bytes;
    if (cs->out_may_alias[o] || cs->out_exact[o] >= 0 || first_write[o] == INT_MAX ||
        tpu_graph_output_strides(cs->g, o, strides) || !tpu_shape_numel(&node->shape, &numel) ||
        !tpu_size_mul((size_t)numel, tpu_dtype_size(node->dtype), &bytes)) {
      continue;
    }
    plan_arena_t a = {bytes, tpu_dtype_size(node->dtype), first_write[o]};
    /* sorted by first write, latest first; when full, an earlier one makes room */
    if (n == MAX_ARENAS && arenas[n - 1].free_until >= a.free_until) continue;
    int at = n < MAX_ARENAS ? n++ : n - 1;
    for (; at > 0 && arenas[at - 1].free_until < a.free_until; at--) {
      arenas[at] = arenas[at - 1];
      arena_output[at] = arena_output[at - 1];
    }
    arenas[at] = a;
    arena_output[at] = o;
  }
  return n;
}

/* A view of a scratch buffer, at the place planning gave the buffer. */
static void place_view(const compile_state_t *cs, const int *arena_output, view_t *v) {
  if (v->base != BASE_SCRATCH) return;
  const buffer_t *b = &cs->buffers[v->index];
  if (b->arena < 0) {
    v->scratch_offset = b->offset;
    return;
  }
  v->base = BASE_OUTPUT; /* offsets are multiples of SCRATCH_ALIGN: whole elements */
  v->index = arena_output[b->arena];
  v->elem_offset += (int64_t)(b->offset / tpu_dtype_size(v->dtype));
}

/* The memory planning pass, then the planned places into the steps' views. */
static tpu_status_t plan_offsets(compile_state_t *cs, size_t *out_peak, size_t *out_total,
                                 bool *out_in_outputs) {
  int num_outputs = tpu_graph_num_outputs(cs->g);
  int *first_write = NULL;
  tpu_status_t st = tpu_allocator_calloc(cs->host, (size_t)num_outputs + 1, sizeof *first_write,
                                         "compile", (void **)&first_write);
  if (st != TPU_OK) return st;
  plan_arena_t arenas[MAX_ARENAS];
  int arena_output[MAX_ARENAS];
  int num_arenas = output_arenas(cs, first_write, arenas, arena_output);
  tpu_allocator_free(cs->host, first_write);
  /* planning is greedy: taking buffers out of the block can leave it more fragmented, so
   * the plan with arenas stands only if its block is smaller */
  TPU_RETURN_IF_ERROR(tpu_plan_memory(cs->buffers, cs->num_buffers, NULL, 0, cs->host, out_peak,
                                      out_total));
  if (num_arenas > 0 && cs->num_buffers > 0) {
    buffer_t *saved = NULL;
    TPU_RETURN_IF_ERROR(tpu_allocator_calloc(cs->host, (size_t)cs->num_buffers, sizeof *saved,
                                             "compile", (void **)&saved));
    memcpy(saved, cs->buffers, sizeof *saved * (size_t)cs->num_buffers);
    size_t peak = 0;
    st = tpu_plan_memory(cs->buffers, cs->num_buffers, arenas, num_arenas, cs->host, &peak,
                         out_total);
    if (st == TPU_OK && peak < *out_peak) {
      *out_peak = peak;
    } else {
      memcpy(cs->buffers, saved, sizeof *saved * (size_t)cs->num_buffers);
    }
    tpu_allocator_free(cs->host, saved);
    TPU_RETURN_IF_ERROR(st);
  }
  *out_in_outputs = false;
  for (int b = 0; b < cs->num_buffers; b++) *out_in_outputs |= cs->buffers[b].arena >= 0;
  for (int s = 0; s < cs->num_steps; s++) {
    step_t *stp = &cs->steps[s];
    place_view(cs, arena_output, &stp->out);
    for (int i = 0; i < stp->num_in; i++) place_view(cs, arena_output, &stp->in[i]);
    fused_t *f = stp->fused;
    if (f && f->has_pre) place_view(cs, arena_output, &f->chunk);
    if (f && f->has_side) place_view(cs, arena_output, &f->side_out);
    if (f && f->has_tail) place_view(cs, arena_output, &f->tail_out);
    for (int j = 0; f && j < f->num_stores; j++) place_view(cs, arena_output, &f->store_out[j]);
  }
  return TPU_OK;
}

static void free_fused(tpu_allocator_t host, fused_t *f) {
  if (!f) return;
  tpu_allocator_free(host, f->ops);
  tpu_ew_program_t *progs[4] = {f->pre, f->post, f->side, f->tail};
  for (int k = 0; k < 4; k++) {
    if (progs[k]) tpu_ew_jit_free(progs[k]->jit);
  }
  tpu_allocator_free(host, f->pre);
  tpu_allocator_free(host, f->post);
  tpu_allocator_free(host, f->side);
  tpu_allocator_free(host, f->tail);
  tpu_allocator_free(host, f);
}

/* Whether fused step |f| (inputs |inputs|, result dtype |out|) is a DOT_GENERAL whose
 * epilogue only adds one f32 input to the product (out = dot + bias, bias broadcast to the
 * result): the dot kernel then adds it to each tile in cache, instead of a second pass over
 * the result (whether the bias is one value per column is checked when it runs). */
static bool is_bias_epilogue(const tpu_graph_t *g, const tpu_node_t *head, const fused_t *f,
                             const tpu_value_t *inputs, tpu_dtype_t out) {
  const tpu_ew_program_t *p = f->post;
  if (!head || head->op != TPU_OP_DOT_GENERAL || !f->has_post || f->has_pre || f->has_side ||
      f->has_tail || f->head_reshaped || out != TPU_F32 || f->num_post_in != 1 || !p ||
      p->num_inputs != 2 || p->num_consts != 0 || p->num_stores != 0 || p->num_instrs != 1) {
    return false;
  }
  const tpu_ew_instr_t *in = &p->instrs[0];
  bool adds_both = (in->a == 0 && in->b == 1) || (in->a == 1 && in->b == 0);
  return in->op == TPU_OP_ADD && adds_both && in->dst == p->result &&
         tpu_graph_node(g, inputs[f->post_in])->dtype == TPU_F32;
}

/* Slices of dim 0 per chunk of a REDUCE head's row-wise loop (operand |x|): whole rows
 * adding up to about FUSE_CHUNK_ELEMS elements when dim 0 is kept, else all of them. */
static int64_t chunk_rows_of(const tpu_node_t *head, const tpu_node_t *x) {
  int64_t numel = 1, rows = x->shape.dims[0];
  tpu_shape_numel(&x->shape, &numel);
  if (head->attrs.reduce.dims[0] || rows <= 0) return rows;
  int64_t row = numel / rows;
  int64_t k = row >= FUSE_CHUNK_ELEMS ? 1 : FUSE_CHUNK_ELEMS / row;
  return k > rows ? rows : k;
}

/* The view of value |w|, written by the step at position |at| (a fused step's side or tail
 * result): its output buffer if it may be written directly (programs write any strides),
 * else a dense scratch buffer; |chunk_rows| > 0: a private side result, one chunk of rows. */
static tpu_status_t assign_written_view(compile_state_t *cs, tpu_value_t w, int at, int *direct,
                                        int64_t chunk_rows) {
  const tpu_node_t *node = tpu_graph_node(cs->g, w);
  value_info_t *info = &cs->values[w];
  int o = direct[w];
  int64_t ostrides[TPU_MAX_RANK];
  info->buffer = -1;
  if (chunk_rows > 0) {
    tpu_shape_t cshape = node->shape;
    cshape.dims[0] = chunk_rows;
    int b = -1;
    TPU_RETURN_IF_ERROR(new_buffer_of(cs, node->dtype, &cshape, at, &b));
    info->view = tpu_view_make(BASE_SCRATCH, b, node->dtype, &cshape, NULL);
    info->buffer = b;
  } else if (o >= 0) {
    bool ostrided = tpu_graph_output_strides(cs->g, o, ostrides);
    info->view =
        tpu_view_make(BASE_OUTPUT, o, node->dtype, &node->shape, ostrided ? ostrides : NULL);
  } else {
    int b = -1;
    TPU_RETURN_IF_ERROR(new_buffer(cs, node, at, &b));
    info->view = tpu_view_make(BASE_SCRATCH, b, node->dtype, &node->shape, NULL);
    info->buffer = b;
  }
  info->has_view = true;
  return TPU_OK;
}

/* Gives a layout node that comes later in the graph its view now (a tail reads it early). */
static tpu_status_t ensure_view(compile_state_t *cs, tpu_value_t w, int depth) {
  value_info_t *info = &cs->values[w];
  if (info->has_view) return TPU_OK;
  const tpu_node_t *node = tpu_graph_node(cs->g, w);
  if (depth > 16 || tpu_op_family(node->op) != TPU_FAMILY_SHAPE || node->num_operands != 1) {
    return tpu_status_set(TPU_ERR_INTERNAL, "compile: fused tail input %d has no view", (int)w);
  }
  TPU_RETURN_IF_ERROR(ensure_view(cs, node->operands[0], depth + 1));
  const value_info_t *in = &cs->values[node->operands[0]];
  view_t lv;
  if (!layout_view(node, &in->view, &lv)) {
    return tpu_status_set(TPU_ERR_INTERNAL, "compile: fused tail input %d is not a view", (int)w);
  }
  info->view = lv;
  info->has_view = true;
  info->buffer = in->buffer;
  return TPU_OK;
}

/* The STEP_FUSED for the group whose root is |v| (its output view is already decided). */
static tpu_status_t push_fused_step(compile_state_t *cs, const fuse_step_t *fs,
                                    const tpu_node_t *head, tpu_value_t v) {
  const tpu_graph_t *g = cs->g;
  const tpu_node_t *root = tpu_graph_node(g, v);
  fused_t *f = NULL;
  TPU_RETURN_IF_ERROR(
      tpu_allocator_calloc(cs->host, 1, sizeof *f, "compile", (void **)&f));
  *f = fs->f;
  f->ops = NULL;
  tpu_status_t st = tpu_allocator_calloc(cs->host, (size_t)f->num_ops + 1, sizeof *f->ops,
                                         "compile", (void **)&f->ops);
  tpu_ew_program_t **progs[4] = {&f->pre, &f->post, &f->side, &f->tail};
  for (int k = 0; k < 4; k++) {
    *progs[k] = NULL;
    if (st != TPU_OK || fs->prog[k] < 0) continue;
    st = tpu_allocator_calloc(cs->host, 1, sizeof **progs[k], "compile", (void **)progs[k]);
    if (st == TPU_OK) {
      **progs[k] = cs->plan.progs[fs->prog[k]];
      (*progs[k])->jit = tpu_ew_jit_new(*progs[k]); /* NULL: interpreted */
    }
  }
  if (st == TPU_OK) {
    const fuse_group_t *host = &cs->plan.groups[fs->group];
    int order[3] = {host->side, fs->group, host->tail}, k = 0;
    for (int j = 0; j < 3; j++) {
      if (order[j] < 0) continue;
      const fuse_group_t *gr = &cs->plan.groups[order[j]];
      for (int i = 0; i < gr->count && k < f->num_ops; i++) {
        f->ops[k++] = tpu_graph_node(g, cs->plan.members[gr->first + i])->op;
      }
    }
    if (f->has_side) f->side_out = cs->values[fs->side_root].view;
    if (f->has_tail) f->tail_out = cs->values[fs->tail_root].view;
    f->num_stores = fs->num_stores;
    for (int j = 0; j < fs->num_stores; j++) f->store_out[j] = cs->values[fs->stores[j]].view;
  }
  if (st == TPU_OK) {
    f->post_bias = is_bias_epilogue(g, head, f, fs->inputs, cs->values[v].view.dtype);
  }
  if (st == TPU_OK && (f->has_pre || f->has_side || f->has_tail)) {
    /* chunks: whole slices of dim 0 when dim 0 is kept, else everything; the prologue
     * writes each chunk of the reduced operand to a small scratch buffer */
    const tpu_node_t *x = tpu_graph_node(g, head->operands[0]);
    f->rows = x->shape.dims[0];
    f->chunk_rows = chunk_rows_of(head, x);
    int64_t numel = 0;
    tpu_shape_numel(&x->shape, &numel);
    f->row_elems = f->rows > 0 ? numel / f->rows : 0;
    tpu_shape_t cshape = x->shape;
    cshape.dims[0] = f->chunk_rows;
    int b = -1;
    if (f->has_pre) st = new_buffer_of(cs, x->dtype, &cshape, v, &b);
    if (st == TPU_OK && f->has_pre) {
      f->chunk = tpu_view_make(BASE_SCRATCH, b, x->dtype, &cshape, NULL);
    }
  }
  if (st == TPU_OK && fs->side_private) {
    f->side_private = true;
    for (int i = 0; i < fs->num_inputs && i < 64; i++) {
      if (fs->inputs[i] == fs->side_root) f->chunk_inputs |= 1ull << i;
    }
  }
  if (st == TPU_OK) {
    st = push_step(cs, STEP_FUSED, head ? head : root, v, &cs->values[v].view, fs->inputs,
                   fs->num_inputs, NULL);
  }
  if (st != TPU_OK) {
    free_fused(cs->host, f);
    return st;
  }
  cs->steps[cs->num_steps - 1].fused = f;
  return TPU_OK;
}

/* ---- in-place outputs ----------------------------------------------------------------------- */

/* The position of the step that writes value |v|: its own, or its host's when |v| is the
 * root of a side or tail group run inside another group's step, or its group's root when
 * |v| is one of the group's stores. */
static int write_position(const fuse_plan_t *plan, tpu_value_t v) {
  int gi = plan->group_of ? plan->group_of[v] : -1;
  if (tpu_fuse_stored(plan, v)) return plan->groups[gi].root;
  if (gi >= 0 && plan->groups[gi].attached >= 0 && plan->groups[gi].root == v) {
    return plan->groups[plan->groups[gi].attached].root;
  }
  return v;
}

/* Whether the step about to compute |v| (fused step |fs|, or node |node| alone) may write
 * output |o| in place of parameter |p|, which it reads: an elementwise kernel (a fused
 * chain without a head, or one unary / binary / compare / select / clamp node) reading p
 * only at the elements it writes, in the same order. Those kernels load each block of
 * their inputs before storing the block, and threads take disjoint element ranges, so
 * every element of p is read before it is overwritten. */
static bool reads_in_place(const compile_state_t *cs, const fuse_step_t *fs,
                           const tpu_node_t *node, int o, int p) {
  const tpu_value_t *ins = node->operands;
  int num_in = node->num_operands;
  if (fs) {
    if (fs->f.has_head) return false; /* the head writes the output before the epilogue reads */
    ins = fs->inputs;
    num_in = fs->num_inputs;
  } else {
    tpu_op_family_t fam = tpu_op_family(node->op);
    if (fam != TPU_FAMILY_UNARY && fam != TPU_FAMILY_BINARY && fam != TPU_FAMILY_COMPARE) {
      return false;
    }
  }
  int64_t ostrides[TPU_MAX_RANK];
  bool ostrided = tpu_graph_output_strides(cs->g, o, ostrides);
  view_t out = tpu_view_make(BASE_OUTPUT, o, node->dtype, &node->shape, ostrided ? ostrides : NULL);
  for (int i = 0; i < num_in; i++) {
    const value_info_t *in = &cs->values[ins[i]];
    if (!in->has_view) return false;
    if (in->view.base == BASE_INPUT && in->view.index == p &&
        !tpu_alias_same_place(&in->view, &out)) {
      return false;
    }
  }
  return true;
}

/* Value |w|, written by the step about to run (fused step |fs| or |w|'s node alone), goes
 * to the parameter's memory it updates in place when that step reads the parameter only
 * where it writes (direct[w] = inplace[w]). */
static void take_in_place(const compile_state_t *cs, const fuse_step_t *fs, tpu_value_t w,
                          int *direct, const int *inplace, const alias_info_t *al) {
  int o = inplace[w];
  if (direct[w] < 0 && o >= 0 &&
      reads_in_place(cs, fs, tpu_graph_node(cs->g, w), o, al->out_param[o])) {
    direct[w] = o;
  }
}

/* Copies into the outputs not written directly: first those without an exact alias, then
 * those overlaying a parameter, whose writes must follow every read of an old value (the
 * other copies' included). Such a copy whose source reads a parameter that one of them
 * overwrites (a swap, a transposed parameter) goes through a scratch buffer first. */
static tpu_status_t copy_outputs(compile_state_t *cs, const int *direct, const alias_info_t *al) {
  const tpu_graph_t *g = cs->g;
  int num_outputs = tpu_graph_num_outputs(g);
  bool *claimed = NULL;
  view_t *staged = NULL;
  tpu_status_t st = tpu_allocator_calloc(cs->host, (size_t)al->num_params + 1, sizeof *claimed,
                                         "compile", (void **)&claimed);
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(cs->host, (size_t)num_outputs + 1, sizeof *staged, "compile",
                              (void **)&staged);
  }
  for (int o = 0; o < num_outputs && st == TPU_OK; o++) {
    if (al->out_param[o] >= 0) claimed[al->out_param[o]] = true;
  }
  for (int phase = 0; phase < 3 && st == TPU_OK; phase++) {
    for (int o = 0; o < num_outputs && st == TPU_OK; o++) {
      tpu_value_t v = tpu_graph_output_value(g, o);
      int p = al->out_param[o];
      if (direct[v] == o || (phase == 0) != (p < 0)) continue;
      const tpu_node_t *node = tpu_graph_node(g, v);
      int64_t ostrides[TPU_MAX_RANK];
      bool ostrided = tpu_graph_output_strides(g, o, ostrides);
      view_t out = tpu_view_make(BASE_OUTPUT, o, node->dtype, &node->shape,
                             ostrided ? ostrides : NULL);
      const view_t *src = &cs->values[v].view;
      bool reads_param = src->base == BASE_INPUT;
      if (p >= 0 && reads_param && src->index == p && tpu_alias_same_place(src, &out)) {
        continue; /* the parameter itself, unchanged, where the output already is */
      }
      bool stage = p >= 0 && reads_param && src->index >= 0 && src->index < al->num_params &&
                   claimed[src->index];
      if (phase == 1) {
        if (!stage) continue;
        int b = -1;
        st = new_buffer(cs, node, cs->n, &b);
        if (st != TPU_OK) break;
        staged[o] = tpu_view_make(BASE_SCRATCH, b, node->dtype, &node->shape, NULL);
        st = push_step(cs, STEP_COPY, node, v, &staged[o], NULL, 0, src);
        continue;
      }
      st = push_step(cs, STEP_COPY, node, v, &out, NULL, 0, phase == 2 && stage ? &staged[o] : src);
    }
  }
  tpu_allocator_free(cs->host, claimed);
  tpu_allocator_free(cs->host, staged);
  return st;
}

/* ---- the pass ------------------------------------------------------------------------------- */

static tpu_status_t compile_nodes(compile_state_t *cs, const tpu_compile_options_t *opt) {
  const tpu_graph_t *g = cs->g;
  int num_outputs = tpu_graph_num_outputs(g);

  const fuse_plan_t *plan = &cs->plan;
  /* liveness: last reader of each value (a fused step reads its inputs at its root) */
  for (int v = 0; v < cs->n; v++) cs->values[v].last_use = v;
  for (int v = 0; v < cs->n; v++) {
    if (!plan->needed[v] || tpu_fuse_elsewhere(plan, v)) continue;
    const fuse_step_t *fs = tpu_fuse_step_at(plan, v);
    if (fs) {
      for (int i = 0; i < fs->num_inputs; i++) cs->values[fs->inputs[i]].last_use = v;
      continue;
    }
    const tpu_node_t *node = tpu_graph_node(g, v);
    for (int i = 0; i < node->num_operands; i++) cs->values[node->operands[i]].last_use = v;
  }
  for (int o = 0; o < num_outputs; o++) cs->values[tpu_graph_output_value(g, o)].last_use = cs->n;
  /* exact aliases, and the last step reading each parameter's memory */
  alias_info_t al;
  TPU_RETURN_IF_ERROR(tpu_alias_analyze(g, opt, cs->host, &al));
  for (int v = 0; v < cs->n; v++) {
    if (plan->needed[v]) tpu_alias_note_read(&al, v, cs->values[v].last_use);
  }
  /* the output slot each value may be written into directly (first one wins); |inplace|:
   * an output overlaying a parameter its own step reads, decided when the step's input
   * views are known */
  int *direct = NULL, *inplace = NULL;
  tpu_status_t st =
      tpu_allocator_calloc(cs->host, (size_t)cs->n, sizeof(int), "compile", (void **)&direct);
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(cs->host, (size_t)cs->n, sizeof(int), "compile",
                              (void **)&inplace);
  }
  if (st != TPU_OK) {
    tpu_allocator_free(cs->host, direct);
    tpu_alias_free(&al, cs->host);
    return st;
  }
  for (int v = 0; v < cs->n; v++) direct[v] = inplace[v] = -1;
  for (int o = 0; o < num_outputs; o++) {
    tpu_value_t v = tpu_graph_output_value(g, o);
    int p = al.out_param[o];
    cs->out_exact[o] = p;
    if (p >= 0) {
      int at = write_position(plan, v);
      if (direct[v] >= 0 || inplace[v] >= 0) continue;
      if (al.last_read[p] < at) direct[v] = o;
      else if (al.last_read[p] == at && (at == v || tpu_fuse_stored(plan, v))) inplace[v] = o;

      continue;
    }
    bool may_alias = al.out_mode[o] == ALIAS_COPY ||
                     (al.out_mode[o] == ALIAS_BY_BIT &&
                      (o >= 64 || (opt && (opt->output_may_alias_input >> o) & 1u)));
    cs->out_may_alias[o] = may_alias;
    if (direct[v] < 0 && !may_alias) direct[v] = o;
  }

  for (int v = 0; v < cs->n && st == TPU_OK; v++) {
    const tpu_node_t *node = tpu_graph_node(g, v);
    value_info_t *info = &cs->values[v];
    if (node->op != TPU_OP_PARAMETER && tpu_fuse_elsewhere(plan, v) &&
        !tpu_fuse_internal(plan, v)) {
      continue; /* an attached group's root: its host step (before or after) gives the view */
    }
    info->buffer = -1;
    if (tpu_fuse_stored(plan, v)) continue; /* its group's step writes it: view given there */
    if (node->op != TPU_OP_PARAMETER && (!plan->needed[v] || tpu_fuse_internal(plan, v))) {
      direct[v] = -1; /* computed inside a fused step, or read by no step */
      continue;
    }
    if (node->op == TPU_OP_PARAMETER) {
      const tpu_param_attrs_t *p = &node->attrs.param;
      info->view = tpu_view_make(BASE_INPUT, p->index, node->dtype, &node->shape,
                             p->strided ? p->strides : NULL);
      info->has_view = true;
      direct[v] = -1;
      continue;
    }
    if (tpu_op_family(node->op) == TPU_FAMILY_SHAPE && node->num_operands == 1) {
      const value_info_t *in = &cs->values[node->operands[0]];
      view_t lv;
      if (layout_view(node, &in->view, &lv)) {
        info->view = lv;
        info->has_view = true;
        info->buffer = in->buffer;
        direct[v] = -1;
        continue;
      }
    }
    /* a step: into the output buffer if allowed, else a dense scratch buffer */
    const fuse_step_t *fs = tpu_fuse_step_at(plan, v);
    const tpu_node_t *head =
        fs && fs->f.has_head ? tpu_graph_node(g, plan->groups[fs->group].head) : NULL;
    if (fs && fs->side_root != TPU_NO_VALUE) {
      int64_t private_rows = 0;
      if (fs->side_private) {
        private_rows = chunk_rows_of(head, tpu_graph_node(g, head->operands[0]));
        direct[fs->side_root] = -1;
      }
      st = assign_written_view(cs, fs->side_root, v, direct, private_rows);
      if (st != TPU_OK) break;
    }
    take_in_place(cs, fs, v, direct, inplace, &al);
    for (int j = 0; fs && j < fs->num_stores; j++) {
      /* a store goes straight to its output when allowed (in place over the parameter it
       * updates when the step reads that parameter only where it writes), else to scratch
       * and copy_outputs copies it */
      take_in_place(cs, fs, fs->stores[j], direct, inplace, &al);
      st = assign_written_view(cs, fs->stores[j], v, direct, 0);
      if (st != TPU_OK) break;
    }
    if (st != TPU_OK) break;
    int o = direct[v];
    int64_t ostrides[TPU_MAX_RANK];
    bool ostrided = o >= 0 && tpu_graph_output_strides(g, o, ostrides);
    if (o >= 0 && (!ostrided || writes_strided_output(head ? head->op : node->op))) {
      info->view = tpu_view_make(BASE_OUTPUT, o, node->dtype, &node->shape,
                             ostrided ? ostrides : NULL);
    } else {
      direct[v] = -1;
      int b = -1;
      st = new_buffer(cs, node, v, &b);
      if (st != TPU_OK) break;
      info->view = tpu_view_make(BASE_SCRATCH, b, node->dtype, &node->shape, NULL);
      info->buffer = b;
    }
    info->has_view = true;
    if (fs && fs->tail_root != TPU_NO_VALUE) {
      st = assign_written_view(cs, fs->tail_root, v, direct, 0);
      /* the tail reads this step's result through broadcasts that come later in the graph */
      for (int i = 0; st == TPU_OK && i < fs->f.num_tail_in; i++) {
        st = ensure_view(cs, fs->inputs[fs->f.tail_in + i], 0);
      }
      if (st != TPU_OK) break;
    }
    if (fs) {
      st = push_fused_step(cs, fs, head, v);
    } else {
      st = push_step(cs, STEP_NODE, node, v, &info->view, node->operands, node->num_operands,
                     NULL);
    }
  }
  /* buffer lifetimes: a buffer lives until the last read of any value it backs */
  for (int v = 0; v < cs->n && st == TPU_OK; v++) {
    int b = cs->values[v].buffer;
    if (b >= 0 && cs->values[v].last_use > cs->buffers[b].last) {
      cs->buffers[b].last = cs->values[v].last_use;
    }
  }
  cs->first_final_copy = cs->num_steps;
  if (st == TPU_OK) st = copy_outputs(cs, direct, &al);
  tpu_allocator_free(cs->host, direct);
  tpu_allocator_free(cs->host, inplace);
  tpu_alias_free(&al, cs->host);
  return st;
}

static void free_steps(tpu_allocator_t host, step_t *steps, int n) {
  for (int i = 0; i < n; i++) {
    tpu_allocator_free(host, steps[i].in);
    free_fused(host, steps[i].fused);
  }
  tpu_allocator_free(host, steps);
}

/* Compiles a verified (and optimized) graph into *out_exe. */
static tpu_status_t compile_graph(const tpu_graph_t *g, const tpu_compile_options_t *options,
                                  bool fuse, tpu_allocator_t host, tpu_executable_t **out_exe) {
  compile_state_t cs;
  memset(&cs, 0, sizeof cs);
  cs.g = g;
  cs.host = host;
  cs.n = tpu_graph_num_nodes(g);
  int num_outputs = tpu_graph_num_outputs(g);
  tpu_executable_t *exe = NULL;
  tpu_status_t st = tpu_allocator_calloc(host, (size_t)cs.n + 1, sizeof *cs.values, "compile",
                                         (void **)&cs.values);
  if (st == TPU_OK) {
    /* per node at most two (its own, a prologue chunk), per output one (a staged copy) */
    size_t cap = (size_t)cs.n * 2 + (size_t)num_outputs + 1;
    st = tpu_allocator_calloc(host, cap, sizeof *cs.buffers, "compile", (void **)&cs.buffers);
    cs.cap_buffers = (int)cap;
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)num_outputs + 1, sizeof *cs.out_exact, "compile",
                              (void **)&cs.out_exact);
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)num_outputs + 1, sizeof *cs.out_may_alias, "compile",
                              (void **)&cs.out_may_alias);
  }
  if (st == TPU_OK) st = tpu_fuse_plan(g, fuse, host, &cs.plan);
  if (st == TPU_OK) st = compile_nodes(&cs, options);
  tpu_fuse_plan_free(&cs.plan, host);
  size_t peak = 0, total = 0;
  bool scratch_in_outputs = false;
  if (st == TPU_OK) st = plan_offsets(&cs, &peak, &total, &scratch_in_outputs);
  if (st == TPU_OK) st = tpu_allocator_calloc(host, 1, sizeof *exe, "compile", (void **)&exe);
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)num_outputs + 1, sizeof(tpu_dtype_t), "compile",
                              (void **)&exe->out_dtypes);
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)num_outputs + 1, sizeof(tpu_shape_t), "compile",
                              (void **)&exe->out_shapes);
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)num_outputs + 1, sizeof(bool), "compile",
                              (void **)&exe->out_strided);
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)num_outputs + 1, sizeof *exe->out_strides,
                              "compile", (void **)&exe->out_strides);
  }
  if (st != TPU_OK) {
    if (exe) {
      tpu_allocator_free(host, exe->out_strided);
      tpu_allocator_free(host, exe->out_strides);
      tpu_allocator_free(host, exe->out_shapes);
      tpu_allocator_free(host, exe->out_dtypes);
      tpu_allocator_free(host, exe);
    }
    free_steps(host, cs.steps, cs.num_steps);
    tpu_allocator_free(host, cs.values);
    tpu_allocator_free(host, cs.buffers);
    tpu_allocator_free(host, cs.out_exact);
    tpu_allocator_free(host, cs.out_may_alias);
    return st;
  }
  atomic_init(&exe->refcount, 1);
  exe->host = host;
  exe->num_inputs = tpu_graph_num_params(g);
  exe->num_outputs = num_outputs;
  for (int o = 0; o < num_outputs; o++) {
    const tpu_node_t *node = tpu_graph_node(g, tpu_graph_output_value(g, o));
    exe->out_dtypes[o] = node->dtype;
    exe->out_shapes[o] = node->shape;
    exe->out_strided[o] = tpu_graph_output_strides(g, o, exe->out_strides[o]);
  }
  exe->scratch_bytes = peak;
  exe->unplanned_bytes = total;
  exe->scratch_in_outputs = scratch_in_outputs;
  exe->num_steps = cs.num_steps;
  exe->steps = cs.steps;
  deps_outputs_t outs = {cs.out_exact, cs.out_may_alias};
  st = tpu_deps_build(exe, &outs);
  tpu_allocator_free(host, cs.values);
  tpu_allocator_free(host, cs.buffers);
  tpu_allocator_free(host, cs.out_exact);
  tpu_allocator_free(host, cs.out_may_alias);
  if (st != TPU_OK) {
    tpu_executable_release(exe);
    return st;
  }
  *out_exe = exe;
  return TPU_OK;
}

tpu_status_t tpu_compile(const tpu_graph_t *g, const tpu_compile_options_t *options,
                         tpu_allocator_t host, tpu_executable_t **out_exe) {
  if (!g || !out_exe) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "compile: graph or out_exe is NULL");
  }
  if (tpu_graph_status(g) != TPU_OK) {
    return tpu_status_set(tpu_graph_status(g), "compile: the graph has a build error: %s",
                          tpu_graph_error_message(g));
  }
  TPU_RETURN_IF_ERROR(tpu_graph_verify(g));
  uint32_t passes = TPU_PASS_ALL & ~(options ? options->disable_passes : 0u);
  const uint32_t graph_passes = TPU_PASS_SIMPLIFY | TPU_PASS_FOLD | TPU_PASS_CSE | TPU_PASS_DCE;
  tpu_graph_t *opt = NULL;
  tpu_pass_stats_t stats;
  memset(&stats, 0, sizeof stats);
  stats.nodes_in = stats.nodes_out = tpu_graph_num_nodes(g);
  if (passes & graph_passes) {
    TPU_RETURN_IF_ERROR(tpu_passes_run(g, passes, host, &opt, &stats));
  }
  tpu_status_t st = compile_graph(opt ? opt : g, options, (passes & TPU_PASS_FUSE) != 0, host,
                                  out_exe);
  tpu_graph_destroy(opt);
  if (st == TPU_OK) (*out_exe)->pass_stats = stats;
  return st;
}

void tpu_executable_retain(tpu_executable_t *exe) {
  if (exe) atomic_fetch_add(&exe->refcount, 1);
}

void tpu_executable_release(tpu_executable_t *exe) {
  if (!exe || atomic_fetch_sub(&exe->refcount, 1) != 1) return;
  free_steps(exe->host, exe->steps, exe->num_steps);
  tpu_deps_free(exe);
  tpu_allocator_free(exe->host, exe->out_dtypes);
  tpu_allocator_free(exe->host, exe->out_shapes);
  tpu_allocator_free(exe->host, exe->out_strided);
  tpu_allocator_free(exe->host, exe->out_strides);
  tpu_allocator_free(exe->host, exe);
}

int tpu_executable_num_inputs(const tpu_executable_t *exe) { return exe->num_inputs; }
int tpu_executable_num_outputs(const tpu_executable_t *exe) { return exe->num_outputs; }
size_t tpu_executable_scratch_bytes(const tpu_executable_t *exe) { return exe->scratch_bytes; }
size_t tpu_executable_unplanned_bytes(const tpu_executable_t *exe) {
  return exe->unplanned_bytes;
}
int tpu_executable_num_steps(const tpu_executable_t *exe) { return exe->num_steps; }
tpu_dtype_t tpu_executable_output_dtype(const tpu_executable_t *exe, int i) {
  return exe->out_dtypes[i];
}
const tpu_shape_t *tpu_executable_output_shape(const tpu_executable_t *exe, int i) {
  return &exe->out_shapes[i];
}

bool tpu_executable_output_strides(const tpu_executable_t *exe, int i,
                                   int64_t out_strides[TPU_MAX_RANK]) {
  if (!exe->out_strided[i]) return false;
  memcpy(out_strides, exe->out_strides[i], sizeof exe->out_strides[i]);
  return true;
}

tpu_status_t tpu_executable_run(const tpu_executable_t *exe, void *const *inputs,
                                void *const *outputs, void *scratch, tpu_pool_t *pool) {
  /* by the two-thread schedule with the helpers of |pool| (threads waiting in synchronize),
   * those spinning now or those that start to while it runs: never a woken worker, which
   * would compete for the cores with the Python threads */
  uint64_t t0 = tpu_now_ns();
  /* the counters, and the help policy, are what a run writes in the executable (heap
   * memory: casting away const is defined) */
  tpu_executable_t *counted = (tpu_executable_t *)exe;
  int helped = tpu_pool_helpers(pool) > 0; /* begun with a helper */
  const bool accepts = tpu_help_policy_accepts(&counted->help);
  if (!accepts && helped) {
    pool = NULL; /* help does not pay now: the run stays on this thread */
    helped = 0;
  }
  bool parallel = exe->parallel && pool && accepts;
  bool disjoint = (parallel || exe->scratch_in_outputs) && tpu_deps_outputs_disjoint(exe, outputs);
  if (exe->scratch_in_outputs && !disjoint) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "executable run: outputs overlap, but the executable keeps "
                          "intermediates in its outputs before writing them");
  }
  tpu_status_t st = TPU_OK;
  int64_t helper_steps = 0; /* run by a thread other than this one */
  if (parallel && disjoint) {
    st = tpu_run_parallel(exe, inputs, outputs, scratch, pool, &helper_steps);
  } else {
    for (int i = 0; i < exe->num_steps && st == TPU_OK; i++) {
      st = tpu_step_run(&exe->steps[i], inputs, outputs, scratch, pool);
    }
  }
  if (st == TPU_OK) {
    const uint64_t ns = tpu_now_ns() - t0;
    atomic_fetch_add_explicit(&counted->runs[helped], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&counted->run_ns[helped], ns, memory_order_relaxed);
    if (!helped && helper_steps > 0) { /* neither kind: the policy compares the two */
      atomic_fetch_add_explicit(&counted->joined_runs, 1, memory_order_relaxed);
    } else {
      tpu_help_policy_note(&counted->help, helped, ns);
    }
  }
  return st;
}

void tpu_executable_run_stats(const tpu_executable_t *exe, tpu_executable_run_stats_t *out) {
  out->alone_runs = atomic_load_explicit(&exe->runs[0], memory_order_relaxed);
  out->alone_ns = atomic_load_explicit(&exe->run_ns[0], memory_order_relaxed);
  out->helped_runs = atomic_load_explicit(&exe->runs[1], memory_order_relaxed);
  out->helped_ns = atomic_load_explicit(&exe->run_ns[1], memory_order_relaxed);
  out->shared_kernels = atomic_load_explicit(&exe->shared_kernels, memory_order_relaxed);
  out->joined_runs = atomic_load_explicit(&exe->joined_runs, memory_order_relaxed);
}

int tpu_executable_num_kernels(const tpu_executable_t *exe) { return exe->num_steps; }

bool tpu_executable_two_threads(const tpu_executable_t *exe) { return exe->parallel; }

int tpu_executable_num_fused(const tpu_executable_t *exe) {
  int k = 0;
  for (int i = 0; i < exe->num_steps; i++) k += exe->steps[i].kind == STEP_FUSED;
  return k;
}

void tpu_executable_pass_stats(const tpu_executable_t *exe, tpu_pass_stats_t *out_stats) {
  *out_stats = exe->pass_stats;
}

/* ---- describe ------------------------------------------------------------------------- */

typedef struct text {
  tpu_allocator_t host;
  char *buf;
  size_t len, cap;
  tpu_status_t st;
} text_t;

static void text_put(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_put(text_t *t, const char *fmt, ...) {
  if (t->st != TPU_OK) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->st = tpu_status_set(TPU_ERR_INTERNAL, "describe: format error");
      return;
    }
    if (t->buf && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap : 256;
    while (cap <= t->len + (size_t)n) {
      if (cap > SIZE_MAX / 2) {
        t->st = tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "describe: text too large");
        return;
      }
      cap *= 2;
    }
    char *grown = NULL;
    t->st = tpu_allocator_calloc(t->host, cap, 1, "describe", (void **)&grown);
    if (t->st != TPU_OK) return;
    if (t->buf) memcpy(grown, t->buf, t->len + 1);
    tpu_allocator_free(t->host, t->buf);
    t->buf = grown;
    t->cap = cap;
  }
}

static void text_type(text_t *t, const view_t *v) {
  text_put(t, "%s[", tpu_dtype_name(v->dtype));
  for (int d = 0; d < v->rank; d++) text_put(t, "%s%lld", d ? "," : "", (long long)v->dims[d]);
  text_put(t, "]");
}

tpu_status_t tpu_executable_describe(const tpu_executable_t *exe, tpu_allocator_t host,
                                     char **out_text, size_t *out_len) {
  if (!exe || !out_text) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "describe: exe or out_text is NULL");
  }
  text_t t = {host, NULL, 0, 0, TPU_OK};
  text_put(&t, "%s", "");
  for (int i = 0; i < exe->num_steps; i++) {
    const step_t *s = &exe->steps[i];
    text_put(&t, "%d: ", i);
    if (s->kind == STEP_COPY) {
      text_put(&t, "COPY ");
    } else if (s->kind == STEP_FUSED) {
      text_put(&t, "FUSED(");
      for (int k = 0; k < s->fused->num_ops; k++) {
        text_put(&t, "%s%s", k ? "," : "", tpu_op_name(s->fused->ops[k]));
      }
      text_put(&t, ") ");
    } else {
      text_put(&t, "%s ", tpu_op_name(s->op));
    }
    const view_t *outs[3 + TPU_EW_PROGRAM_MAX_STORES] = {&s->out, NULL, NULL};
    if (s->fused && s->fused->has_side) outs[1] = &s->fused->side_out;
    if (s->fused && s->fused->has_tail) outs[2] = &s->fused->tail_out;
    for (int j = 0; s->fused && j < s->fused->num_stores; j++) outs[3 + j] = &s->fused->store_out[j];
    for (int k = 0; k < 3 + TPU_EW_PROGRAM_MAX_STORES; k++) {
      if (!outs[k]) continue;
      if (k) text_put(&t, ", %s ", k == 1 ? "side" : k == 2 ? "tail" : "store");
      text_type(&t, outs[k]);
      if (outs[k]->base == BASE_OUTPUT) {
        text_put(&t, " -> output %d", outs[k]->index);
      } else {
        text_put(&t, " -> scratch");
      }
    }
    if (s->fused && s->fused->post_bias) {
      text_put(&t, " (the matmul adds the bias)");
    }
    text_put(&t, "\n");
  }
  if (t.st != TPU_OK) {
    tpu_allocator_free(host, t.buf);
    return t.st;
  }
  *out_text = t.buf;
  if (out_len) *out_len = t.len;
  return TPU_OK;
}
