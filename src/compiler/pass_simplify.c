/* pass_simplify.c: algebraic simplification, one node at a time (see include/tpu/passes.h).
 *
 * Rules look only at a node and its operands' producers in the new graph, so the pass is
 * linear; a chain collapses as it is copied (each link already simplified when the next
 * is seen). Only rewrites that are exact are made:
 *   convert(x) to x's dtype                     -> x
 *   transpose(transpose(x))                     -> one transpose, or x if the identity
 *   reshape(reshape(x)), reshape to x's shape   -> one reshape, or x
 *   broadcast_in_dim(broadcast_in_dim(x))       -> one broadcast; identity broadcast -> x
 *   broadcast_in_dim(convert(x)), f32/bf16/f16 -> convert(broadcast_in_dim(x)) (fusable)
 *   broadcast_in_dim(f(a, b)) of one element, f a fusible float op, every user of the
 *     broadcast fusible elementwise -> f(broadcast(a), broadcast(b)), down a chain of up to
 *     PUSH_MAX ops: the chain joins its users' fused program, where a value that is the
 *     same for every element is computed once per run, instead of running as kernels of
 *     its own (an optimizer step's bias corrections: two small kernels per parameter)
 *   x * 1, 1 * x, x / 1                         -> x
 *   x - 0, x + -0.0, -0.0 + x (ints: x + 0, 0 + x) -> x   (float x + 0.0 is not: -0 + 0 = 0)
 *   neg(neg(x))                                 -> x
 *   select(constant pred, a, b)                 -> a or b
 *   slice of the whole operand (stride 1)       -> the operand
 *   dot_general with batch dim 0 of both operands, one of them reshape(x) that merges x's
 *     leading k dims into that batch dim        -> reshape(dot_general over x with k batch
 *     dims, the other operand's batch dim split alike (a view)): the same products, but a
 *     reshape of a strided x (attention's heads, transposed) needs a copy and the dot
 *     reads x through its strides directly
 *   concatenate along the last dim d of reshape(x_i), each x_i's dims after d merged into
 *     dim d (the same trailing dims in every x_i) -> reshape(concatenate of the x_i along
 *     d): one copy where there were two when the x_i are strided (attention's per-head
 *     gradients, transposed back to (batch, time, features) for the qkv projection)
 * The replacement always has the node's dtype and shape (checked by the caller).
 */
#include <math.h>
#include <string.h>

#include "compiler/fuse.h"
#include "compiler/rewrite.h"

#define PUSH_MAX 8 /* ops of a one-element chain a broadcast is pushed through */

const tpu_node_t *pass_splat(const tpu_graph_t *g, tpu_value_t v) {
  for (int depth = 0; depth < 8; depth++) {
    const tpu_node_t *n = tpu_graph_node(g, v);
    if (!n) return NULL;
    if (n->op == TPU_OP_CONSTANT) return n;
    if (n->op != TPU_OP_BROADCAST_IN_DIM && n->op != TPU_OP_RESHAPE) return NULL;
    v = n->operands[0];
  }
  return NULL;
}

/* Whether splat constant |k| equals |f| (floats, compared with its sign bit too) or |i|
 * (integers and bool). */
static bool splat_is(const tpu_node_t *k, double f, int64_t i) {
  if (!k) return false;
  if (tpu_dtype_is_float(k->dtype)) {
    return k->attrs.constant.value == f && signbit(k->attrs.constant.value) == signbit(f);
  }
  return k->attrs.constant.ivalue == i;
}

/* The dtypes fused programs compute (a convert between them fuses; f64 does not). */
static bool f32ish(tpu_dtype_t dt) { return dt == TPU_F32 || dt == TPU_BF16 || dt == TPU_F16; }

/* Whether new value |v| stands for an output of the source graph. */
static bool is_output(const pass_ctx_t *c, tpu_value_t v) {
  return v >= 0 && v < c->out_cap && c->is_output[v];
}

/* Whether a broadcast of new value |v| is pushed down through it: a one-element fusible
 * elementwise op, not a splat constant and not an output. */
static bool pushable(const pass_ctx_t *c, tpu_value_t v) {
  const tpu_graph_t *g = c->rw.dst;
  const tpu_node_t *x = tpu_graph_node(g, v);
  return x->shape.rank == 0 && x->num_operands <= 3 && !pass_splat(g, v) &&
         tpu_fuse_elementwise(g, x) && !is_output(c, v);
}

/* |v| broadcast like |b| (a broadcast of a rank-0 value): through the one-element fusible
 * elementwise ops that compute it, each then computed on the broadcast shape from
 * broadcasts of its operands, while |*budget| ops last; splat constants, outputs (an
 * optimizer's new step count: its users read it once written, rather than computing it
 * again from the count it overwrites, which would need a copy) and other values are
 * broadcast themselves. */
static tpu_value_t push_broadcast(pass_ctx_t *c, const tpu_node_t *b, tpu_value_t v, int *budget) {
  const tpu_graph_t *g = c->rw.dst;
  const tpu_node_t *x = tpu_graph_node(g, v);
  bool push = *budget > 0 && pushable(c, v);
  for (int i = 0; push && i < x->num_operands; i++) {
    push = tpu_graph_node(g, x->operands[i])->shape.rank == 0;
  }
  if (!push) {
    tpu_node_t nb = *b;
    nb.dtype = x->dtype;
    return pass_emit(c, &nb, &v);
  }
  --*budget;
  tpu_node_t n = *x; /* copied: emitting may move the graph's nodes */
  tpu_value_t operands[3];
  memcpy(operands, x->operands, sizeof(tpu_value_t) * (size_t)n.num_operands);
  tpu_value_t pushed[3];
  for (int i = 0; i < n.num_operands; i++) {
    pushed[i] = push_broadcast(c, b, operands[i], budget);
    if (pushed[i] == TPU_NO_VALUE) return TPU_NO_VALUE;
  }
  n.shape = b->shape;
  return pass_emit(c, &n, pushed);
}

static bool identity_perm(const int64_t *perm, int rank) {
  for (int d = 0; d < rank; d++) {
    if (perm[d] != d) return false;
  }
  return true;
}

static tpu_value_t simplify_binary(pass_ctx_t *c, const tpu_node_t *node, const tpu_value_t *ops) {
  const tpu_graph_t *g = c->rw.dst;
  const tpu_node_t *ka = pass_splat(g, ops[0]), *kb = pass_splat(g, ops[1]);
  bool is_float = tpu_dtype_is_float(node->dtype);
  switch (node->op) {
    case TPU_OP_MUL:
      if (node->dtype == TPU_BOOL) return TPU_NO_VALUE;
      if (splat_is(kb, 1.0, 1)) return ops[0];
      if (splat_is(ka, 1.0, 1)) return ops[1];
      return TPU_NO_VALUE;
    case TPU_OP_DIV:
      if (node->dtype != TPU_BOOL && splat_is(kb, 1.0, 1)) return ops[0];
      return TPU_NO_VALUE;
    case TPU_OP_ADD:
      if (node->dtype == TPU_BOOL) return TPU_NO_VALUE;
      if (is_float) {
        if (splat_is(kb, -0.0, 0)) return ops[0];
        if (splat_is(ka, -0.0, 0)) return ops[1];
      } else {
        if (splat_is(kb, 0.0, 0)) return ops[0];
        if (splat_is(ka, 0.0, 0)) return ops[1];
      }
      return TPU_NO_VALUE;
    case TPU_OP_SUB:
      if (node->dtype != TPU_BOOL && splat_is(kb, 0.0, 0)) return ops[0];
      return TPU_NO_VALUE;
    default:
      return TPU_NO_VALUE;
  }
}

/* Whether |v| is reshape(x) whose dims are x's with the leading k >= 2 dims merged into its
 * dim 0 (the rest unchanged): x in *x, k in *k. */
static bool merges_leading_dims(const tpu_graph_t *g, tpu_value_t v, tpu_value_t *x, int *k) {
  const tpu_node_t *r = tpu_graph_node(g, v);
  if (!r || r->op != TPU_OP_RESHAPE || r->shape.rank < 1) return false;
  const tpu_node_t *src = tpu_graph_node(g, r->operands[0]);
  int rest = r->shape.rank - 1;
  *k = src ? src->shape.rank - rest : 0;
  if (*k < 2) return false;
  int64_t lead = 1;
  for (int d = 0; d < *k; d++) lead *= src->shape.dims[d];
  if (lead != r->shape.dims[0]) return false;
  for (int d = 0; d < rest; d++) {
    if (src->shape.dims[*k + d] != r->shape.dims[1 + d]) return false;
  }
  *x = r->operands[0];
  return true;
}

/* dot_general(reshape(x) merging k leading dims, y) with batch dim 0 of both: the dot over
 * x with k batch dims (y's dim 0 split into x's leading dims by a reshape, which splitting
 * makes a view), reshaped back to the node's shape. */
static tpu_value_t simplify_dot(pass_ctx_t *c, const tpu_node_t *node, const tpu_value_t *ops) {
  const tpu_graph_t *g = c->rw.dst;
  const tpu_dot_attrs_t *a = &node->attrs.dot;
  if (a->num_batch != 1 || a->lhs_batch[0] != 0 || a->rhs_batch[0] != 0) return TPU_NO_VALUE;
  tpu_value_t x[2];
  int k[2];
  bool merged[2] = {merges_leading_dims(g, ops[0], &x[0], &k[0]),
                    merges_leading_dims(g, ops[1], &x[1], &k[1])};
  if (!merged[0] && !merged[1]) return TPU_NO_VALUE;
  const int m = merged[0] ? 0 : 1; /* the operand whose split the dot takes */
  const tpu_shape_t *split = &tpu_graph_node(g, x[m])->shape;
  const int kk = k[m];
  if (node->shape.rank + kk - 1 > TPU_MAX_RANK) return TPU_NO_VALUE;
  tpu_value_t nops[2];
  for (int i = 0; i < 2; i++) {
    const tpu_shape_t *s = &tpu_graph_node(g, ops[i])->shape;
    if (s->rank + kk - 1 > TPU_MAX_RANK) return TPU_NO_VALUE;
    if (merged[i] && k[i] == kk &&
        !memcmp(tpu_graph_node(g, x[i])->shape.dims, split->dims, sizeof(int64_t) * (size_t)kk)) {
      nops[i] = x[i];
      continue;
    }
    tpu_shape_t r = {.rank = s->rank + kk - 1}; /* ops[i], dim 0 split as x[m]'s */
    for (int d = 0; d < kk; d++) r.dims[d] = split->dims[d];
    for (int d = 1; d < s->rank; d++) r.dims[kk - 1 + d] = s->dims[d];
    nops[i] = pass_emit_shaped(c, TPU_OP_RESHAPE, tpu_graph_node(g, ops[i])->dtype, &r, ops[i]);
    if (nops[i] == TPU_NO_VALUE) return TPU_NO_VALUE;
  }
  tpu_node_t d = *node;
  d.attrs.dot.num_batch = kk;
  for (int b = 0; b < kk; b++) d.attrs.dot.lhs_batch[b] = d.attrs.dot.rhs_batch[b] = b;
  for (int i = 0; i < a->num_contract; i++) {
    d.attrs.dot.lhs_contract[i] = a->lhs_contract[i] + kk - 1;
    d.attrs.dot.rhs_contract[i] = a->rhs_contract[i] + kk - 1;
  }
  d.shape.rank = node->shape.rank + kk - 1;
  for (int b = 0; b < kk; b++) d.shape.dims[b] = split->dims[b];
  for (int i = 1; i < node->shape.rank; i++) d.shape.dims[kk - 1 + i] = node->shape.dims[i];
  tpu_value_t dot = pass_emit(c, &d, nops);
  if (dot == TPU_NO_VALUE) return TPU_NO_VALUE;
  return pass_emit_shaped(c, TPU_OP_RESHAPE, node->dtype, &node->shape, dot);
}

/* Operands merged into a concatenation this way, at most (a longer list is left as it is). */
#define MAX_CONCAT_SPLIT 16

/* concatenate_d(reshape(x_0), reshape(x_1), ...), d the last dim, each reshape merging x_i's
 * dims from d on: the x_i concatenated along d (their leading dims are the node's, their
 * trailing dims after d equal), reshaped to the node's shape. The concatenation's elements
 * are in the same row-major order: piece i starts at a multiple of the trailing size. */
static tpu_value_t simplify_concat(pass_ctx_t *c, const tpu_node_t *node, const tpu_value_t *ops) {
  const tpu_graph_t *g = c->rw.dst;
  const int d = node->attrs.concat.dim, n = node->num_operands;
  if (d != node->shape.rank - 1 || n < 2 || n > MAX_CONCAT_SPLIT) return TPU_NO_VALUE;
  tpu_value_t xs[MAX_CONCAT_SPLIT];
  tpu_shape_t joined; /* x_0's shape, dim d summed over the x_i */
  for (int i = 0; i < n; i++) {
    const tpu_node_t *r = tpu_graph_node(g, ops[i]);
    if (!r || r->op != TPU_OP_RESHAPE) return TPU_NO_VALUE;
    xs[i] = r->operands[0];
    const tpu_shape_t *x = &tpu_graph_node(g, xs[i])->shape;
    if (x->rank < d + 2 || memcmp(x->dims, r->shape.dims, sizeof(int64_t) * (size_t)d)) {
      return TPU_NO_VALUE;
    }
    if (i == 0) {
      joined = *x;
      joined.dims[d] = 0;
    } else if (x->rank != joined.rank ||
               memcmp(x->dims + d + 1, joined.dims + d + 1,
                      sizeof(int64_t) * (size_t)(x->rank - d - 1))) {
      return TPU_NO_VALUE;
    }
    joined.dims[d] += x->dims[d]; /* no overflow: the node's dim d is larger */
  }
  tpu_node_t cat = *node;
  cat.shape = joined;
  tpu_value_t v = pass_emit(c, &cat, xs);
  if (v == TPU_NO_VALUE) return TPU_NO_VALUE;
  return pass_emit_shaped(c, TPU_OP_RESHAPE, node->dtype, &node->shape, v);
}

tpu_value_t pass_simplify_node(pass_ctx_t *c, const tpu_node_t *node, const tpu_value_t *ops) {
  const tpu_graph_t *g = c->rw.dst;
  switch (node->op) {
    case TPU_OP_CONVERT: {
      const tpu_node_t *x = tpu_graph_node(g, ops[0]);
      return x && x->dtype == node->dtype ? ops[0] : TPU_NO_VALUE;
    }
    case TPU_OP_NEG: {
      const tpu_node_t *x = tpu_graph_node(g, ops[0]);
      return x && x->op == TPU_OP_NEG ? x->operands[0] : TPU_NO_VALUE;
    }
    case TPU_OP_TRANSPOSE: {
      int rank = node->shape.rank;
      const tpu_node_t *x = tpu_graph_node(g, ops[0]);
      if (identity_perm(node->attrs.transpose.perm, rank)) return ops[0];
      if (!x || x->op != TPU_OP_TRANSPOSE) return TPU_NO_VALUE;
      tpu_node_t t = *node;
      for (int d = 0; d < rank; d++) {
        t.attrs.transpose.perm[d] = x->attrs.transpose.perm[node->attrs.transpose.perm[d]];
      }
      tpu_value_t inner = x->operands[0];
      if (identity_perm(t.attrs.transpose.perm, rank)) return inner;
      return pass_emit(c, &t, &inner);
    }
    case TPU_OP_RESHAPE: {
      const tpu_node_t *x = tpu_graph_node(g, ops[0]);
      if (x && tpu_shape_equal(&x->shape, &node->shape)) return ops[0];
      if (!x || x->op != TPU_OP_RESHAPE) return TPU_NO_VALUE;
      tpu_value_t inner = x->operands[0];
      const tpu_node_t *xi = tpu_graph_node(g, inner);
      if (xi && tpu_shape_equal(&xi->shape, &node->shape)) return inner;
      return pass_emit(c, node, &inner);
    }
    case TPU_OP_BROADCAST_IN_DIM: {
      const tpu_node_t *x = tpu_graph_node(g, ops[0]);
      if (!x) return TPU_NO_VALUE;
      if (tpu_shape_equal(&x->shape, &node->shape) &&
          identity_perm(node->attrs.broadcast.dims, x->shape.rank)) {
        return ops[0];
      }
      if (c->ew_users && c->ew_users[c->cur] && pushable(c, ops[0])) {
        int budget = PUSH_MAX;
        return push_broadcast(c, node, ops[0], &budget);
      }
      if (x->op == TPU_OP_CONVERT && f32ish(x->dtype) &&
          f32ish(tpu_graph_node(g, x->operands[0])->dtype)) {
        /* broadcast(convert(v)) -> convert(broadcast(v)): the convert becomes elementwise
         * on the broadcast shape, where fusion folds it into its consumer */
        tpu_value_t v = x->operands[0];
        tpu_node_t b = *node;
        b.dtype = tpu_graph_node(g, v)->dtype;
        tpu_value_t bv = pass_emit(c, &b, &v);
        if (bv == TPU_NO_VALUE) return TPU_NO_VALUE;
        tpu_node_t cv = *x;
        cv.shape = node->shape;
        return pass_emit(c, &cv, &bv);
      }
      if (x->op != TPU_OP_BROADCAST_IN_DIM) return TPU_NO_VALUE;
      tpu_value_t inner = x->operands[0];
      const tpu_node_t *xi = tpu_graph_node(g, inner);
      if (!xi) return TPU_NO_VALUE;
      tpu_node_t b = *node;
      memset(&b.attrs.broadcast, 0, sizeof b.attrs.broadcast);
      for (int k = 0; k < xi->shape.rank; k++) {
        b.attrs.broadcast.dims[k] = node->attrs.broadcast.dims[x->attrs.broadcast.dims[k]];
      }
      return pass_emit(c, &b, &inner);
    }
    case TPU_OP_SLICE: {
      const tpu_node_t *x = tpu_graph_node(g, ops[0]);
      if (!x || !tpu_shape_equal(&x->shape, &node->shape)) return TPU_NO_VALUE;
      for (int d = 0; d < node->shape.rank; d++) {
        if (node->attrs.slice.start[d] != 0 || node->attrs.slice.stride[d] != 1) return TPU_NO_VALUE;
      }
      return ops[0];
    }
    case TPU_OP_DOT_GENERAL:
      return simplify_dot(c, node, ops);
    case TPU_OP_CONCATENATE:
      return simplify_concat(c, node, ops);
    case TPU_OP_SELECT: {
      const tpu_node_t *p = pass_splat(g, ops[0]);
      if (!p) return TPU_NO_VALUE;
      return p->attrs.constant.ivalue ? ops[1] : ops[2];
    }
    default:
      if (tpu_op_family(node->op) == TPU_FAMILY_BINARY && node->num_operands == 2) {
        return simplify_binary(c, node, ops);
      }
      return TPU_NO_VALUE;
  }
}
