/* graph.c: the IR graph object: creation, destruction and clearing for reuse, its bump
 * arena, node and output storage, the sticky first error, accessors, the op table (from
 * ops.def) and shape helpers.
 *
 * Builders live in builder.c, shape and dtype rules in shape_rules.c, the verifier in
 * verify.c, the StableHLO printer in print_stablehlo.c and the hash in hash.c.
 */
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/graph_internal.h"

/* ---- the op table -------------------------------------------------------------------- */

static const struct {
  const char *name, *printed;
  int arity;
  tpu_op_family_t family;
} kOps[] = {
#define TPU_OP(name, printed, arity, family) {#name, printed, arity, TPU_FAMILY_##family},
#include "tpu/ops.def"
#undef TPU_OP
};
_Static_assert(sizeof(kOps) / sizeof(kOps[0]) == TPU_OP_COUNT,
               "ops.def and the op table disagree on the number of ops");

static bool op_valid(tpu_op_t op) { return (unsigned)op < TPU_OP_COUNT; }

const char *tpu_op_name(tpu_op_t op) { return op_valid(op) ? kOps[op].name : "INVALID_OP"; }

const char *tpu_op_printed_name(tpu_op_t op) {
  return op_valid(op) ? kOps[op].printed : "invalid.op";
}

int tpu_op_arity(tpu_op_t op) { return op_valid(op) ? kOps[op].arity : 0; }

tpu_op_family_t tpu_op_family(tpu_op_t op) {
  return op_valid(op) ? kOps[op].family : TPU_FAMILY_LEAF;
}

const char *tpu_ir_reduce_kind_name(tpu_reduce_kind_t kind) {
  switch (kind) {
    case TPU_REDUCE_SUM: return "SUM";
    case TPU_REDUCE_PROD: return "PROD";
    case TPU_REDUCE_MAX: return "MAX";
    case TPU_REDUCE_MIN: return "MIN";
    case TPU_REDUCE_AND: return "AND";
    case TPU_REDUCE_OR: return "OR";
    case TPU_REDUCE_ARGMAX: return "ARGMAX";
    case TPU_REDUCE_ARGMIN: return "ARGMIN";
  }
  return "INVALID_KIND";
}

const char *tpu_ir_compare_dir_name(tpu_compare_dir_t dir) {
  switch (dir) {
    case TPU_CMP_EQ: return "EQ";
    case TPU_CMP_NE: return "NE";
    case TPU_CMP_LT: return "LT";
    case TPU_CMP_LE: return "LE";
    case TPU_CMP_GT: return "GT";
    case TPU_CMP_GE: return "GE";
  }
  return "INVALID_DIRECTION";
}

const char *tpu_ir_precision_name(tpu_precision_t precision) {
  switch (precision) {
    case TPU_PRECISION_DEFAULT: return "DEFAULT";
    case TPU_PRECISION_HIGH: return "HIGH";
    case TPU_PRECISION_HIGHEST: return "HIGHEST";
  }
  return "INVALID_PRECISION";
}

/* ---- shapes ------------------------------------------------------------------------- */

bool tpu_shape_numel(const tpu_shape_t *shape, int64_t *out_numel) {
  if (!shape || shape->rank < 0 || shape->rank > TPU_MAX_RANK) return false;
  int64_t n = 1;
  for (int i = 0; i < shape->rank; i++) {
    if (shape->dims[i] < 0 || __builtin_mul_overflow(n, shape->dims[i], &n)) return false;
  }
  *out_numel = n;
  return true;
}

bool tpu_shape_equal(const tpu_shape_t *a, const tpu_shape_t *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank && i < TPU_MAX_RANK; i++) {
    if (a->dims[i] != b->dims[i]) return false;
  }
  return true;
}

bool tpu_ir_strides_are_dense(const tpu_shape_t *shape, const int64_t *strides) {
  int64_t numel, expected = 1;
  if (!tpu_shape_numel(shape, &numel)) return false;
  if (numel == 0) return true;
  for (int d = shape->rank - 1; d >= 0; d--) {
    if (shape->dims[d] != 1 && strides[d] != expected) return false;
    expected *= shape->dims[d]; /* no overflow: bounded by numel */
  }
  return true;
}

const char *tpu_ir_format_type(tpu_dtype_t dtype, const tpu_shape_t *shape, char *buf,
                               size_t cap) {
  if (!buf || cap == 0) return buf;
  size_t len = 0;
  int n = snprintf(buf, cap, "%s[", tpu_dtype_name(dtype));
  if (n > 0) len = (size_t)n;
  int rank = shape->rank < 0 ? 0 : (shape->rank > TPU_MAX_RANK ? TPU_MAX_RANK : shape->rank);
  for (int i = 0; i < rank && len < cap; i++) {
    n = snprintf(buf + len, cap - len, "%s%lld", i ? "," : "", (long long)shape->dims[i]);
    if (n > 0) len += (size_t)n;
  }
  if (len < cap) snprintf(buf + len, cap - len, "]");
  return buf;
}

/* ---- arena ------------------------------------------------------------------------- */

#define TPU_IR_FIRST_CHUNK 4096u
#define TPU_IR_MAX_CHUNK (1u << 20)

void *tpu_ir_arena_alloc(tpu_graph_t *g, size_t size, size_t align) {
  if (align == 0 || align > alignof(max_align_t) || (align & (align - 1)) != 0) return NULL;
  if (size == 0) size = 1;
  tpu_ir_chunk_t *c = g->chunks;
  if (c) {
    size_t start, end;
    if (tpu_size_align_up(c->used, align, &start) && tpu_size_add(start, size, &end) &&
        end <= c->size) {
      c->used = end;
      return (char *)c->data + start;
    }
  }
  size_t usable = g->next_chunk_size, total;
  if (usable < size) usable = size;
  if (!tpu_size_add(sizeof(tpu_ir_chunk_t), usable, &total)) return NULL;
  c = g->host.alloc(g->host.self, total, alignof(max_align_t));
  if (!c) return NULL;
  c->next = g->chunks;
  c->size = usable;
  c->used = size;
  g->chunks = c;
  if (g->next_chunk_size < TPU_IR_MAX_CHUNK) g->next_chunk_size *= 2;
  return c->data;
}

/* ---- create / destroy ----------------------------------------------------------------- */

tpu_status_t tpu_graph_create(tpu_allocator_t host, tpu_graph_t **out_graph) {
  if (!out_graph) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "graph_create: out_graph is NULL");
  }
  *out_graph = NULL;
  if (!host.alloc || !host.free) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "graph_create: allocator has no alloc/free");
  }
  tpu_graph_t *g = NULL;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, sizeof(*g), "graph_create", (void **)&g));
  g->host = host;
  g->next_chunk_size = TPU_IR_FIRST_CHUNK;
  g->status = TPU_OK;
  *out_graph = g;
  return TPU_OK;
}

void tpu_graph_destroy(tpu_graph_t *g) {
  if (!g) return;
  tpu_allocator_t host = g->host;
  for (tpu_ir_chunk_t *c = g->chunks; c;) {
    tpu_ir_chunk_t *next = c->next;
    host.free(host.self, c);
    c = next;
  }
  tpu_allocator_free(host, g->nodes);
  tpu_allocator_free(host, g->outputs);
  host.free(host.self, g);
}

/* Storage tpu_graph_clear keeps for reuse: per array, and the arena chunk. */
#define TPU_IR_KEEP_BYTES ((size_t)8 << 20)

/* Frees |*array| unless its |cap| entries of |elem| bytes are worth keeping. */
static void drop_if_large(tpu_allocator_t host, void **array, int *cap, size_t elem) {
  if ((size_t)*cap <= TPU_IR_KEEP_BYTES / elem) return;
  tpu_allocator_free(host, *array);
  *array = NULL;
  *cap = 0;
}

void tpu_graph_clear(tpu_graph_t *g) {
  if (!g) return;
  tpu_allocator_t host = g->host;
  tpu_ir_chunk_t *keep = g->chunks; /* the newest chunk: as large as any but an oversized one */
  if (keep && keep->size > TPU_IR_KEEP_BYTES) keep = NULL;
  for (tpu_ir_chunk_t *c = g->chunks; c;) {
    tpu_ir_chunk_t *next = c->next;
    if (c != keep) host.free(host.self, c);
    c = next;
  }
  if (keep) {
    keep->next = NULL;
    keep->used = 0;
  }
  g->chunks = keep;
  drop_if_large(host, (void **)&g->nodes, &g->cap_nodes, sizeof(tpu_node_t));
  drop_if_large(host, (void **)&g->outputs, &g->cap_outputs, sizeof(tpu_ir_output_t));
  g->num_nodes = g->num_params = g->num_outputs = 0;
  g->status = TPU_OK;
  g->message[0] = '\0';
}

/* ---- errors ------------------------------------------------------------------------ */

tpu_status_t tpu_ir_fail(tpu_graph_t *g, tpu_status_t code, const char *fmt, ...) {
  char msg[TPU_IR_MESSAGE_CAP];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (n < 0) msg[0] = '\0';
  if (g && g->status == TPU_OK) {
    g->status = code;
    memcpy(g->message, msg, sizeof(msg));
  }
  return tpu_status_set(code, "%s", msg);
}

tpu_status_t tpu_graph_status(const tpu_graph_t *g) {
  return g ? g->status : TPU_ERR_INVALID_ARGUMENT;
}

const char *tpu_graph_error_message(const tpu_graph_t *g) {
  if (!g) return "graph is NULL";
  return g->message;
}

/* ---- nodes and outputs --------------------------------------------------------------- */

/* Grows a host-allocated array of |elem| bytes to hold at least |need| entries. */
static bool grow_array(tpu_allocator_t host, void **array, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int new_cap = *cap ? *cap : 16;
  while (new_cap < need) {
    if (new_cap > INT32_MAX / 2) return false;
    new_cap *= 2;
  }
  size_t bytes;
  if (!tpu_size_mul((size_t)new_cap, elem, &bytes)) return false;
  void *p = host.alloc(host.self, bytes, alignof(max_align_t));
  if (!p) return false;
  if (*array) memcpy(p, *array, (size_t)*cap * elem);
  tpu_allocator_free(host, *array);
  *array = p;
  *cap = new_cap;
  return true;
}

tpu_value_t tpu_ir_append_raw(tpu_graph_t *g, const tpu_node_t *node,
                              const tpu_value_t *operands, int num_operands) {
  if (g->num_nodes == INT32_MAX ||
      !grow_array(g->host, (void **)&g->nodes, &g->cap_nodes, g->num_nodes + 1,
                  sizeof(tpu_node_t))) {
    tpu_ir_fail(g, TPU_ERR_OUT_OF_MEMORY, "%s: out of host memory growing the node array",
                tpu_op_name(node->op));
    return TPU_NO_VALUE;
  }
  tpu_value_t *ops = NULL;
  if (num_operands > 0) {
    size_t bytes;
    if (!tpu_size_mul((size_t)num_operands, sizeof(tpu_value_t), &bytes) ||
        !(ops = tpu_ir_arena_alloc(g, bytes, alignof(tpu_value_t)))) {
      tpu_ir_fail(g, TPU_ERR_OUT_OF_MEMORY, "%s: out of host memory for %d operands",
                  tpu_op_name(node->op), num_operands);
      return TPU_NO_VALUE;
    }
    memcpy(ops, operands, bytes);
  }
  tpu_node_t *n = &g->nodes[g->num_nodes];
  *n = *node;
  n->num_operands = num_operands < 0 ? 0 : num_operands;
  n->operands = ops;
  if (n->op == TPU_OP_PARAMETER) g->num_params++;
  return g->num_nodes++;
}

tpu_node_t *tpu_ir_node_mut(tpu_graph_t *g, tpu_value_t v) {
  if (!g || v < 0 || v >= g->num_nodes) return NULL;
  return &g->nodes[v];
}

int tpu_graph_num_nodes(const tpu_graph_t *g) { return g ? g->num_nodes : 0; }

const tpu_node_t *tpu_graph_node(const tpu_graph_t *g, tpu_value_t v) {
  if (!g || v < 0 || v >= g->num_nodes) return NULL;
  return &g->nodes[v];
}

int tpu_graph_num_params(const tpu_graph_t *g) { return g ? g->num_params : 0; }

int tpu_graph_num_outputs(const tpu_graph_t *g) { return g ? g->num_outputs : 0; }

tpu_value_t tpu_graph_output_value(const tpu_graph_t *g, int i) {
  if (!g || i < 0 || i >= g->num_outputs) return TPU_NO_VALUE;
  return g->outputs[i].value;
}

bool tpu_graph_output_strides(const tpu_graph_t *g, int i, int64_t out_strides[TPU_MAX_RANK]) {
  if (!g || i < 0 || i >= g->num_outputs || !g->outputs[i].strided) return false;
  if (out_strides) memcpy(out_strides, g->outputs[i].strides, sizeof(g->outputs[i].strides));
  return true;
}

tpu_status_t tpu_graph_output(tpu_graph_t *g, tpu_value_t v, const int64_t *strides) {
  if (!g) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "output: graph is NULL");
  if (v == TPU_NO_VALUE) {
    if (g->status != TPU_OK) return tpu_status_set(g->status, "%s", g->message);
    return tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT, "output: value is TPU_NO_VALUE");
  }
  if (v < 0 || v >= g->num_nodes) {
    return tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT,
                       "output: value %d is not a node of this graph (%d nodes)", (int)v,
                       g->num_nodes);
  }
  const tpu_node_t *n = &g->nodes[v];
  tpu_ir_output_t out;
  memset(&out, 0, sizeof(out));
  out.value = v;
  if (strides && !tpu_ir_strides_are_dense(&n->shape, strides)) {
    out.strided = true;
    for (int d = 0; d < n->shape.rank; d++) {
      if (strides[d] < 0) {
        return tpu_ir_fail(g, TPU_ERR_INVALID_ARGUMENT,
                           "output: stride %lld of dim %d is negative",
                           (long long)strides[d], d);
      }
      out.strides[d] = strides[d];
    }
  }
  if (g->num_outputs == INT32_MAX ||
      !grow_array(g->host, (void **)&g->outputs, &g->cap_outputs, g->num_outputs + 1,
                  sizeof(tpu_ir_output_t))) {
    return tpu_ir_fail(g, TPU_ERR_OUT_OF_MEMORY, "output: out of host memory");
  }
  g->outputs[g->num_outputs++] = out;
  return TPU_OK;
}
