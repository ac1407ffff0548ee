/* shape_rules.c: one rule per op that checks the operands and attributes of a node and
 * computes its result dtype and shape, following the StableHLO spec's constraints.
 *
 * The builder (builder.c) runs a rule before appending a node and the verifier (verify.c)
 * re-runs it on every node, so both enforce exactly the same invariants. A rule writes
 * "<builder name>: <problem>" on failure, e.g.
 * "binary ADD: operand shapes f32[2,3] and f32[3] differ". Every size computation is
 * overflow-checked and every result is a valid shape: rank <= TPU_MAX_RANK, dims >= 0,
 * element and byte counts within int64.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/graph_internal.h"

/* ---- context and helpers ----------------------------------------------------------------- */

typedef struct rule_ctx {
  const tpu_graph_t *g;
  const tpu_node_t *n;
  char *msg;
  size_t cap;
} rule_ctx_t;

static tpu_status_t fail(rule_ctx_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static tpu_status_t fail(rule_ctx_t *c, const char *fmt, ...) {
  if (c->msg && c->cap) {
    char name[64]; /* formatted only on failure: rules run on the eager hot path */
    tpu_ir_builder_name(c->n->op, &c->n->attrs, name, sizeof(name));
    int n = snprintf(c->msg, c->cap, "%s: ", name);
    size_t len = n > 0 ? (size_t)n : 0;
    if (len < c->cap) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(c->msg + len, c->cap - len, fmt, ap);
      va_end(ap);
    }
  }
  return TPU_ERR_INVALID_ARGUMENT;
}

static const tpu_node_t *arg(const rule_ctx_t *c, int i) {
  return &c->g->nodes[c->n->operands[i]];
}

/* A type string for messages; each call site passes its own buffer. */
#define TYPE_OF(node, buf) tpu_ir_format_type((node)->dtype, &(node)->shape, buf, sizeof(buf))
#define TYPE2(dt, shape, buf) tpu_ir_format_type(dt, shape, buf, sizeof(buf))

static bool add64(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }
static bool mul64(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }

/* dtype classes, as bit masks of what an op accepts */
enum { K_FLOAT = 1, K_SINT = 2, K_UINT = 4, K_BOOL = 8 };
#define K_INT (K_SINT | K_UINT)
#define K_NUM (K_FLOAT | K_INT)
#define K_ANY (K_NUM | K_BOOL)

static unsigned kind_of(tpu_dtype_t d) {
  if (tpu_dtype_is_float(d)) return K_FLOAT;
  if (d == TPU_U8) return K_UINT;
  if (d == TPU_BOOL) return K_BOOL;
  if (tpu_dtype_is_integer(d)) return K_SINT;
  return 0;
}

static const char *kind_desc(unsigned mask) {
  switch (mask) {
    case K_FLOAT: return "a float type";
    case K_FLOAT | K_SINT: return "a float or signed integer type";
    case K_NUM: return "a float or integer type";
    case K_INT: return "an integer type";
    case K_INT | K_BOOL: return "an integer or bool type";
    default: return "a supported type";
  }
}

static tpu_status_t need_kind(rule_ctx_t *c, tpu_dtype_t d, unsigned mask, const char *what) {
  if (kind_of(d) & mask) return TPU_OK;
  return fail(c, "%s dtype %s is not supported (needs %s)", what, tpu_dtype_name(d),
              kind_desc(mask));
}

/* A result or declared shape: rank in range, dims >= 0, elements and bytes fit int64. */
static tpu_status_t check_shape(rule_ctx_t *c, tpu_dtype_t dtype, const tpu_shape_t *s,
                                const char *what) {
  if (s->rank < 0 || s->rank > TPU_MAX_RANK) {
    return fail(c, "%s rank %d is outside 0..%d", what, s->rank, TPU_MAX_RANK);
  }
  for (int d = 0; d < s->rank; d++) {
    if (s->dims[d] < 0) {
      return fail(c, "%s dim %d has negative size %lld", what, d, (long long)s->dims[d]);
    }
  }
  int64_t numel, bytes;
  char t[TPU_IR_TYPE_CAP];
  if (!tpu_shape_numel(s, &numel)) {
    return fail(c, "%s %s: element count overflows int64", what, TYPE2(dtype, s, t));
  }
  if (!mul64(numel, (int64_t)tpu_dtype_size(dtype), &bytes)) {
    return fail(c, "%s %s: byte size overflows int64", what, TYPE2(dtype, s, t));
  }
  return TPU_OK;
}

static tpu_status_t check_dtype(rule_ctx_t *c, tpu_dtype_t d, const char *what) {
  if (tpu_dtype_valid(d)) return TPU_OK;
  return fail(c, "%s dtype %d is invalid", what, (int)d);
}

static tpu_status_t same_dtype(rule_ctx_t *c, const tpu_node_t *a, const tpu_node_t *b,
                               const char *what) {
  if (a->dtype == b->dtype) return TPU_OK;
  return fail(c, "%s dtypes %s and %s differ", what, tpu_dtype_name(a->dtype),
              tpu_dtype_name(b->dtype));
}

static tpu_status_t same_shape(rule_ctx_t *c, const tpu_node_t *a, const tpu_node_t *b,
                               const char *what) {
  if (tpu_shape_equal(&a->shape, &b->shape)) return TPU_OK;
  char ta[TPU_IR_TYPE_CAP], tb[TPU_IR_TYPE_CAP];
  return fail(c, "%s shapes %s and %s differ", what, TYPE_OF(a, ta), TYPE_OF(b, tb));
}

static tpu_status_t integer_scalar(rule_ctx_t *c, const tpu_node_t *x, const char *what,
                                   int i) {
  char t[TPU_IR_TYPE_CAP];
  if (x->shape.rank != 0 || !tpu_dtype_is_integer(x->dtype)) {
    return fail(c, "%s %d must be an integer scalar, got %s", what, i, TYPE_OF(x, t));
  }
  return TPU_OK;
}

/* |n| values in 0..limit-1, each at most once; |increasing|: also strictly increasing. */
static tpu_status_t index_list(rule_ctx_t *c, const int64_t *v, int n, int64_t limit,
                               bool increasing, const char *what) {
  for (int i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= limit) {
      return fail(c, "%s[%d] = %lld is outside 0..%lld", what, i, (long long)v[i],
                  (long long)limit - 1);
    }
    if (increasing && i > 0 && v[i] <= v[i - 1]) {
      return fail(c, "%s must be sorted and unique, but %lld follows %lld", what,
                  (long long)v[i], (long long)v[i - 1]);
    }
    for (int j = 0; j < i; j++) {
      if (v[j] == v[i]) return fail(c, "%s repeats %lld", what, (long long)v[i]);
    }
  }
  return TPU_OK;
}

static tpu_status_t count_in_range(rule_ctx_t *c, int n, int max, const char *what) {
  if (n < 0 || n > max) return fail(c, "%s count %d is outside 0..%d", what, n, max);
  return TPU_OK;
}

static bool contains(const int64_t *v, int n, int64_t x) {
  for (int i = 0; i < n; i++) {
    if (v[i] == x) return true;
  }
  return false;
}

/* ---- leaves ----------------------------------------------------------------------------- */

static tpu_status_t rule_parameter(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_param_attrs_t *p = &c->n->attrs.param;
  TPU_RETURN_IF_ERROR(check_dtype(c, c->n->dtype, "parameter"));
  TPU_RETURN_IF_ERROR(check_shape(c, c->n->dtype, &c->n->shape, "parameter"));
  if (p->index < 0) return fail(c, "index %d is negative", p->index);
  if (p->strided) {
    for (int d = 0; d < c->n->shape.rank; d++) {
      if (p->strides[d] < 0) {
        return fail(c, "stride %lld of dim %d is negative", (long long)p->strides[d], d);
      }
    }
  }
  *dt = c->n->dtype;
  *sh = c->n->shape;
  return TPU_OK;
}

/* Range of an integer dtype. */
static void int_range(tpu_dtype_t d, int64_t *lo, int64_t *hi) {
  switch (d) {
    case TPU_I32: *lo = INT32_MIN; *hi = INT32_MAX; return;
    case TPU_I16: *lo = INT16_MIN; *hi = INT16_MAX; return;
    case TPU_I8: *lo = INT8_MIN; *hi = INT8_MAX; return;
    case TPU_U8: *lo = 0; *hi = UINT8_MAX; return;
    case TPU_BOOL: *lo = 0; *hi = 1; return;
    default: *lo = INT64_MIN; *hi = INT64_MAX; return;
  }
}

static tpu_status_t rule_constant(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  tpu_dtype_t d = c->n->dtype;
  TPU_RETURN_IF_ERROR(check_dtype(c, d, "constant"));
  TPU_RETURN_IF_ERROR(check_shape(c, d, &c->n->shape, "constant"));
  if (!tpu_dtype_is_float(d)) {
    int64_t lo, hi, v = c->n->attrs.constant.ivalue;
    int_range(d, &lo, &hi);
    if (v < lo || v > hi) {
      return fail(c, "value %lld does not fit in %s", (long long)v, tpu_dtype_name(d));
    }
  }
  *dt = d;
  *sh = c->n->shape;
  return TPU_OK;
}

static tpu_status_t rule_iota(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  tpu_dtype_t d = c->n->dtype;
  TPU_RETURN_IF_ERROR(check_dtype(c, d, "result"));
  TPU_RETURN_IF_ERROR(need_kind(c, d, K_NUM, "result"));
  TPU_RETURN_IF_ERROR(check_shape(c, d, &c->n->shape, "result"));
  int dim = c->n->attrs.iota.dim;
  if (c->n->shape.rank < 1) return fail(c, "result must have rank >= 1");
  if (dim < 0 || dim >= c->n->shape.rank) {
    return fail(c, "dim %d is outside 0..%d", dim, c->n->shape.rank - 1);
  }
  *dt = d;
  *sh = c->n->shape;
  return TPU_OK;
}

static tpu_status_t rule_rng(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  tpu_dtype_t d = c->n->dtype;
  static const char *const what[2] = {"seed", "offset"};
  for (int i = 0; i < 2; i++) {
    const tpu_node_t *x = arg(c, i);
    char t[TPU_IR_TYPE_CAP];
    if (x->dtype != TPU_I64 || x->shape.rank != 0) {
      return fail(c, "%s must be an i64 scalar, got %s", what[i], TYPE_OF(x, t));
    }
  }
  TPU_RETURN_IF_ERROR(check_dtype(c, d, "result"));
  switch (c->n->attrs.rng.dist) {
    case TPU_RNG_UNIFORM:
    case TPU_RNG_NORMAL:
      TPU_RETURN_IF_ERROR(need_kind(c, d, K_FLOAT, "result"));
      break;
    case TPU_RNG_BITS:
      if (d != TPU_I64) return fail(c, "BITS needs an i64 result, got %s", tpu_dtype_name(d));
      break;
    default:
      return fail(c, "distribution %d is invalid", (int)c->n->attrs.rng.dist);
  }
  TPU_RETURN_IF_ERROR(check_shape(c, d, &c->n->shape, "result"));
  *dt = d;
  *sh = c->n->shape;
  return TPU_OK;
}

/* ---- elementwise -------------------------------------------------------------------------- */

static unsigned unary_mask(tpu_op_t op) {
  switch (op) {
    case TPU_OP_ABS:
    case TPU_OP_SIGN: return K_FLOAT | K_SINT;
    case TPU_OP_NEG: return K_NUM;
    case TPU_OP_NOT: return K_INT | K_BOOL;
    case TPU_OP_CONVERT:
    case TPU_OP_BITCAST_CONVERT: return K_ANY; /* bitcast: bool is refused below */
    default: return K_FLOAT; /* transcendental, rounding, IS_FINITE */
  }
}

static tpu_status_t rule_unary(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  tpu_op_t op = c->n->op;
  TPU_RETURN_IF_ERROR(need_kind(c, x->dtype, unary_mask(op), "operand"));
  *sh = x->shape;
  *dt = x->dtype;
  if (op == TPU_OP_IS_FINITE) {
    *dt = TPU_BOOL;
  } else if (op == TPU_OP_CONVERT) {
    TPU_RETURN_IF_ERROR(check_dtype(c, c->n->dtype, "result"));
    *dt = c->n->dtype;
  } else if (op == TPU_OP_BITCAST_CONVERT) {
    tpu_dtype_t to = c->n->dtype;
    TPU_RETURN_IF_ERROR(check_dtype(c, to, "result"));
    if (x->dtype == TPU_BOOL || to == TPU_BOOL) {
      return fail(c, "bool (i1) has no bit layout to reinterpret (%s -> %s)",
                  tpu_dtype_name(x->dtype), tpu_dtype_name(to));
    }
    if (tpu_dtype_size(x->dtype) != tpu_dtype_size(to)) {
      return fail(c, "element sizes differ: %s is %zu bytes, %s is %zu bytes",
                  tpu_dtype_name(x->dtype), tpu_dtype_size(x->dtype), tpu_dtype_name(to),
                  tpu_dtype_size(to));
    }
    *dt = to;
  }
  return TPU_OK;
}

static unsigned binary_mask(tpu_op_t op) {
  switch (op) {
    case TPU_OP_ADD:
    case TPU_OP_MUL:
    case TPU_OP_MAX:
    case TPU_OP_MIN: return K_ANY;
    case TPU_OP_AND:
    case TPU_OP_OR:
    case TPU_OP_XOR: return K_INT | K_BOOL;
    case TPU_OP_SHIFT_LEFT:
    case TPU_OP_SHIFT_RIGHT: return K_INT;
    case TPU_OP_ATAN2: return K_FLOAT;
    default: return K_NUM; /* SUB, DIV, REM, POW */
  }
}

static tpu_status_t rule_binary(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *a = arg(c, 0), *b = arg(c, 1);
  TPU_RETURN_IF_ERROR(same_dtype(c, a, b, "operand"));
  TPU_RETURN_IF_ERROR(same_shape(c, a, b, "operand"));
  TPU_RETURN_IF_ERROR(need_kind(c, a->dtype, binary_mask(c->n->op), "operand"));
  *dt = a->dtype;
  *sh = a->shape;
  return TPU_OK;
}

static tpu_status_t rule_compare(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *a = arg(c, 0), *b = arg(c, 1);
  unsigned dir = (unsigned)c->n->attrs.compare.direction;
  if (dir > TPU_CMP_GE) return fail(c, "direction %u is invalid", dir);
  TPU_RETURN_IF_ERROR(same_dtype(c, a, b, "operand"));
  TPU_RETURN_IF_ERROR(same_shape(c, a, b, "operand"));
  *dt = TPU_BOOL;
  *sh = a->shape;
  return TPU_OK;
}

static tpu_status_t rule_select(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *p = arg(c, 0), *t = arg(c, 1), *f = arg(c, 2);
  if (p->dtype != TPU_BOOL) {
    return fail(c, "pred dtype %s is not bool (i1)", tpu_dtype_name(p->dtype));
  }
  TPU_RETURN_IF_ERROR(same_dtype(c, t, f, "on_true/on_false"));
  TPU_RETURN_IF_ERROR(same_shape(c, t, f, "on_true/on_false"));
  TPU_RETURN_IF_ERROR(same_shape(c, p, t, "pred/on_true"));
  *dt = t->dtype;
  *sh = t->shape;
  return TPU_OK;
}

static tpu_status_t rule_clamp(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *lo = arg(c, 0), *x = arg(c, 1), *hi = arg(c, 2);
  TPU_RETURN_IF_ERROR(same_dtype(c, lo, x, "min/operand"));
  TPU_RETURN_IF_ERROR(same_dtype(c, hi, x, "max/operand"));
  if (lo->shape.rank != 0) TPU_RETURN_IF_ERROR(same_shape(c, lo, x, "min/operand"));
  if (hi->shape.rank != 0) TPU_RETURN_IF_ERROR(same_shape(c, hi, x, "max/operand"));
  *dt = x->dtype;
  *sh = x->shape;
  return TPU_OK;
}

/* ---- data movement ---------------------------------------------------------------------- */

static tpu_status_t rule_broadcast_in_dim(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  const tpu_shape_t *out = &c->n->shape;
  TPU_RETURN_IF_ERROR(check_shape(c, x->dtype, out, "result"));
  if (x->shape.rank > out->rank) {
    return fail(c, "operand rank %d exceeds result rank %d", x->shape.rank, out->rank);
  }
  const int64_t *dims = c->n->attrs.broadcast.dims;
  TPU_RETURN_IF_ERROR(index_list(c, dims, x->shape.rank, out->rank, false, "dims"));
  for (int d = 0; d < x->shape.rank; d++) {
    int64_t s = x->shape.dims[d], r = out->dims[dims[d]];
    if (s != 1 && s != r) {
      return fail(c, "operand dim %d has size %lld but result dim %lld has size %lld "
                  "(must be 1 or equal)", d, (long long)s, (long long)dims[d], (long long)r);
    }
  }
  *dt = x->dtype;
  *sh = *out;
  return TPU_OK;
}

static tpu_status_t rule_reshape(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  TPU_RETURN_IF_ERROR(check_shape(c, x->dtype, &c->n->shape, "result"));
  int64_t a, b;
  char ta[TPU_IR_TYPE_CAP], tb[TPU_IR_TYPE_CAP];
  if (!tpu_shape_numel(&x->shape, &a) || !tpu_shape_numel(&c->n->shape, &b) || a != b) {
    return fail(c, "cannot reshape %s (%lld elements) to %s (%lld elements)", TYPE_OF(x, ta),
                (long long)a, TYPE2(x->dtype, &c->n->shape, tb), (long long)b);
  }
  *dt = x->dtype;
  *sh = c->n->shape;
  return TPU_OK;
}

static tpu_status_t rule_transpose(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  const int64_t *perm = c->n->attrs.transpose.perm;
  int r = x->shape.rank;
  TPU_RETURN_IF_ERROR(index_list(c, perm, r, r, false, "perm (must be a permutation)"));
  sh->rank = r;
  for (int d = 0; d < r; d++) sh->dims[d] = x->shape.dims[perm[d]];
  *dt = x->dtype;
  return TPU_OK;
}

static tpu_status_t rule_slice(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  const tpu_slice_attrs_t *a = &c->n->attrs.slice;
  sh->rank = x->shape.rank;
  for (int d = 0; d < x->shape.rank; d++) {
    int64_t s = a->start[d], l = a->limit[d], st = a->stride[d], n = x->shape.dims[d];
    if (!(0 <= s && s <= l && l <= n)) {
      return fail(c, "dim %d: need 0 <= start (%lld) <= limit (%lld) <= size (%lld)", d,
                  (long long)s, (long long)l, (long long)n);
    }
    if (st < 1) return fail(c, "dim %d: stride %lld must be >= 1", d, (long long)st);
    int64_t len = l - s;
    sh->dims[d] = len / st + (len % st != 0);
  }
  *dt = x->dtype;
  return TPU_OK;
}

static tpu_status_t starts_ok(rule_ctx_t *c, int first, int count) {
  for (int i = 0; i < count; i++) {
    const tpu_node_t *s = arg(c, first + i);
    TPU_RETURN_IF_ERROR(integer_scalar(c, s, "start index", i));
    if (s->dtype != arg(c, first)->dtype) {
      return fail(c, "start indices must share one dtype (%s and %s)",
                  tpu_dtype_name(arg(c, first)->dtype), tpu_dtype_name(s->dtype));
    }
  }
  return TPU_OK;
}

static tpu_status_t rule_dynamic_slice(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  if (c->n->num_operands < 1) return fail(c, "needs an operand");
  const tpu_node_t *x = arg(c, 0);
  int r = x->shape.rank;
  if (c->n->num_operands != 1 + r) {
    return fail(c, "operand of rank %d needs %d start indices, got %d", r, r,
                c->n->num_operands - 1);
  }
  TPU_RETURN_IF_ERROR(starts_ok(c, 1, r));
  const int64_t *sizes = c->n->attrs.dynamic_slice.sizes;
  sh->rank = r;
  for (int d = 0; d < r; d++) {
    if (sizes[d] < 0 || sizes[d] > x->shape.dims[d]) {
      return fail(c, "dim %d: slice size %lld is outside 0..%lld", d, (long long)sizes[d],
                  (long long)x->shape.dims[d]);
    }
    sh->dims[d] = sizes[d];
  }
  *dt = x->dtype;
  return TPU_OK;
}

static tpu_status_t rule_dynamic_update_slice(rule_ctx_t *c, tpu_dtype_t *dt,
                                              tpu_shape_t *sh) {
  if (c->n->num_operands < 2) return fail(c, "needs an operand and an update");
  const tpu_node_t *x = arg(c, 0), *u = arg(c, 1);
  int r = x->shape.rank;
  if (c->n->num_operands != 2 + r) {
    return fail(c, "operand of rank %d needs %d start indices, got %d", r, r,
                c->n->num_operands - 2);
  }
  TPU_RETURN_IF_ERROR(same_dtype(c, x, u, "operand/update"));
  char tx[TPU_IR_TYPE_CAP], tu[TPU_IR_TYPE_CAP];
  if (u->shape.rank != r) {
    return fail(c, "update %s and operand %s ranks differ", TYPE_OF(u, tu), TYPE_OF(x, tx));
  }
  for (int d = 0; d < r; d++) {
    if (u->shape.dims[d] > x->shape.dims[d]) {
      return fail(c, "update %s is larger than operand %s in dim %d", TYPE_OF(u, tu),
                  TYPE_OF(x, tx), d);
    }
  }
  TPU_RETURN_IF_ERROR(starts_ok(c, 2, r));
  *dt = x->dtype;
  *sh = x->shape;
  return TPU_OK;
}

static tpu_status_t rule_concatenate(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  int n = c->n->num_operands, dim = c->n->attrs.concat.dim;
  if (n < 1) return fail(c, "needs at least one operand");
  const tpu_node_t *x0 = arg(c, 0);
  int r = x0->shape.rank;
  if (r < 1) return fail(c, "operands must have rank >= 1");
  if (dim < 0 || dim >= r) return fail(c, "dim %d is outside 0..%d", dim, r - 1);
  *sh = x0->shape;
  for (int i = 1; i < n; i++) {
    const tpu_node_t *x = arg(c, i);
    char t0[TPU_IR_TYPE_CAP], ti[TPU_IR_TYPE_CAP];
    TPU_RETURN_IF_ERROR(same_dtype(c, x0, x, "operand"));
    if (x->shape.rank != r) {
      return fail(c, "operand %d %s and operand 0 %s ranks differ", i, TYPE_OF(x, ti),
                  TYPE_OF(x0, t0));
    }
    for (int d = 0; d < r; d++) {
      if (d != dim && x->shape.dims[d] != x0->shape.dims[d]) {
        return fail(c, "operand %d %s differs from operand 0 %s in dim %d (only dim %d may "
                    "differ)", i, TYPE_OF(x, ti), TYPE_OF(x0, t0), d, dim);
      }
    }
    if (!add64(sh->dims[dim], x->shape.dims[dim], &sh->dims[dim])) {
      return fail(c, "size of dim %d overflows int64", dim);
    }
  }
  *dt = x0->dtype;
  return TPU_OK;
}

static tpu_status_t rule_pad(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0), *v = arg(c, 1);
  const tpu_pad_attrs_t *a = &c->n->attrs.pad;
  char t[TPU_IR_TYPE_CAP];
  if (v->shape.rank != 0) return fail(c, "padding value must be a scalar, got %s", TYPE_OF(v, t));
  TPU_RETURN_IF_ERROR(same_dtype(c, x, v, "operand/padding value"));
  sh->rank = x->shape.rank;
  for (int d = 0; d < x->shape.rank; d++) {
    int64_t n = x->shape.dims[d], r;
    if (a->interior[d] < 0) {
      return fail(c, "dim %d: interior padding %lld is negative", d, (long long)a->interior[d]);
    }
    int64_t gaps = n > 0 ? n - 1 : 0;
    if (!mul64(gaps, a->interior[d], &r) || !add64(r, n, &r) || !add64(r, a->lo[d], &r) ||
        !add64(r, a->hi[d], &r)) {
      return fail(c, "dim %d: padded size overflows int64", d);
    }
    if (r < 0) {
      return fail(c, "dim %d: lo %lld + hi %lld + size %lld + interior gives negative size "
                  "%lld", d, (long long)a->lo[d], (long long)a->hi[d], (long long)n,
                  (long long)r);
    }
    sh->dims[d] = r;
  }
  *dt = x->dtype;
  return TPU_OK;
}

static tpu_status_t rule_reverse(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  for (int d = x->shape.rank; d < TPU_MAX_RANK; d++) {
    if (c->n->attrs.reverse.dims[d]) {
      return fail(c, "dims[%d] is set but the operand has rank %d", d, x->shape.rank);
    }
  }
  *dt = x->dtype;
  *sh = x->shape;
  return TPU_OK;
}

/* ---- reductions ------------------------------------------------------------------------- */

static tpu_status_t kind_ok(rule_ctx_t *c, tpu_reduce_kind_t kind, tpu_dtype_t d,
                            bool arg_kinds_allowed, bool logic_kinds_allowed) {
  unsigned mask;
  switch (kind) {
    case TPU_REDUCE_SUM:
    case TPU_REDUCE_PROD: mask = K_NUM; break;
    case TPU_REDUCE_MAX:
    case TPU_REDUCE_MIN: mask = K_ANY; break;
    case TPU_REDUCE_AND:
    case TPU_REDUCE_OR:
      if (!logic_kinds_allowed) return fail(c, "kind %s is not supported here",
                                            tpu_ir_reduce_kind_name(kind));
      mask = K_INT | K_BOOL;
      break;
    case TPU_REDUCE_ARGMAX:
    case TPU_REDUCE_ARGMIN:
      if (!arg_kinds_allowed) return fail(c, "kind %s is only supported by reduce",
                                          tpu_ir_reduce_kind_name(kind));
      mask = K_ANY;
      break;
    default: return fail(c, "kind %d is invalid", (int)kind);
  }
  return need_kind(c, d, mask, "operand");
}

static tpu_status_t rule_reduce(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  const tpu_reduce_attrs_t *a = &c->n->attrs.reduce;
  TPU_RETURN_IF_ERROR(kind_ok(c, a->kind, x->dtype, true, true));
  int reduced = 0;
  sh->rank = 0;
  for (int d = 0; d < TPU_MAX_RANK; d++) {
    if (d >= x->shape.rank) {
      if (a->dims[d]) {
        return fail(c, "dims[%d] is set but the operand has rank %d", d, x->shape.rank);
      }
      continue;
    }
    if (a->dims[d]) {
      reduced++;
    } else {
      sh->dims[sh->rank++] = x->shape.dims[d];
    }
  }
  bool arg_kind = a->kind == TPU_REDUCE_ARGMAX || a->kind == TPU_REDUCE_ARGMIN;
  if (arg_kind && reduced != 1) {
    return fail(c, "%s reduces exactly one dim, got %d (reshape first)",
                tpu_ir_reduce_kind_name(a->kind), reduced);
  }
  *dt = arg_kind ? TPU_I64 : x->dtype;
  return TPU_OK;
}

/* StableHLO's window count: 0 if the dilated window does not fit the padded input. */
static tpu_status_t window_count(rule_ctx_t *c, int d, int64_t padded, int64_t window,
                                 int64_t dilation, int64_t stride, int64_t *out) {
  int64_t dilated;
  if (window == 0) {
    dilated = 0;
  } else if (!mul64(window - 1, dilation, &dilated) || !add64(dilated, 1, &dilated)) {
    return fail(c, "dim %d: dilated window size overflows int64", d);
  }
  if (padded == 0 || dilated > padded) {
    *out = 0;
  } else {
    *out = (padded - dilated) / stride + 1;
  }
  return TPU_OK;
}

static tpu_status_t rule_reduce_window(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  const tpu_reduce_window_attrs_t *a = &c->n->attrs.reduce_window;
  TPU_RETURN_IF_ERROR(kind_ok(c, a->kind, x->dtype, false, false));
  sh->rank = x->shape.rank;
  for (int d = 0; d < x->shape.rank; d++) {
    if (a->window[d] < 1 || a->stride[d] < 1 || a->dilation[d] < 1) {
      return fail(c, "dim %d: window (%lld), stride (%lld) and dilation (%lld) must be >= 1",
                  d, (long long)a->window[d], (long long)a->stride[d],
                  (long long)a->dilation[d]);
    }
    if (a->pad_lo[d] < 0 || a->pad_hi[d] < 0) {
      return fail(c, "dim %d: padding (%lld, %lld) must be >= 0", d, (long long)a->pad_lo[d],
                  (long long)a->pad_hi[d]);
    }
    int64_t padded;
    if (!add64(x->shape.dims[d], a->pad_lo[d], &padded) ||
        !add64(padded, a->pad_hi[d], &padded)) {
      return fail(c, "dim %d: padded size overflows int64", d);
    }
    TPU_RETURN_IF_ERROR(window_count(c, d, padded, a->window[d], a->dilation[d], a->stride[d],
                                     &sh->dims[d]));
  }
  *dt = x->dtype;
  return TPU_OK;
}

static tpu_status_t rule_scan(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  const tpu_scan_attrs_t *a = &c->n->attrs.scan;
  TPU_RETURN_IF_ERROR(kind_ok(c, a->kind, x->dtype, false, false));
  if (a->dim < 0 || a->dim >= x->shape.rank) {
    return fail(c, "dim %d is outside 0..%d", a->dim, x->shape.rank - 1);
  }
  *dt = x->dtype;
  *sh = x->shape;
  return TPU_OK;
}

/* ---- MXU --------------------------------------------------------------------------------- */

static tpu_status_t mxu_dtypes(rule_ctx_t *c, const tpu_node_t *l, const tpu_node_t *r,
                               tpu_precision_t precision) {
  TPU_RETURN_IF_ERROR(need_kind(c, l->dtype, K_FLOAT, "operand"));
  TPU_RETURN_IF_ERROR(same_dtype(c, l, r, "operand"));
  TPU_RETURN_IF_ERROR(check_dtype(c, c->n->dtype, "result"));
  TPU_RETURN_IF_ERROR(need_kind(c, c->n->dtype, K_FLOAT, "result"));
  if ((unsigned)precision > TPU_PRECISION_HIGHEST) {
    return fail(c, "precision %d is invalid", (int)precision);
  }
  return TPU_OK;
}

static tpu_status_t rule_dot_general(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *l = arg(c, 0), *r = arg(c, 1);
  const tpu_dot_attrs_t *a = &c->n->attrs.dot;
  TPU_RETURN_IF_ERROR(mxu_dtypes(c, l, r, a->precision));
  TPU_RETURN_IF_ERROR(count_in_range(c, a->num_batch, TPU_MAX_RANK, "batch dim"));
  TPU_RETURN_IF_ERROR(count_in_range(c, a->num_contract, TPU_MAX_RANK, "contracting dim"));
  int nb = a->num_batch, nc = a->num_contract;
  if (nb + nc > l->shape.rank || nb + nc > r->shape.rank) {
    return fail(c, "%d batch + %d contracting dims exceed operand ranks %d and %d", nb, nc,
                l->shape.rank, r->shape.rank);
  }
  /* batch ++ contracting must be unique per side */
  int64_t lall[2 * TPU_MAX_RANK], rall[2 * TPU_MAX_RANK];
  memcpy(lall, a->lhs_batch, (size_t)nb * sizeof(int64_t));
  memcpy(lall + nb, a->lhs_contract, (size_t)nc * sizeof(int64_t));
  memcpy(rall, a->rhs_batch, (size_t)nb * sizeof(int64_t));
  memcpy(rall + nb, a->rhs_contract, (size_t)nc * sizeof(int64_t));
  TPU_RETURN_IF_ERROR(index_list(c, lall, nb + nc, l->shape.rank, false,
                                 "lhs batch ++ contracting dims"));
  TPU_RETURN_IF_ERROR(index_list(c, rall, nb + nc, r->shape.rank, false,
                                 "rhs batch ++ contracting dims"));
  char tl[TPU_IR_TYPE_CAP], tr[TPU_IR_TYPE_CAP];
  for (int i = 0; i < nb; i++) {
    if (l->shape.dims[a->lhs_batch[i]] != r->shape.dims[a->rhs_batch[i]]) {
      return fail(c, "batch dim %d: lhs %s dim %lld and rhs %s dim %lld sizes differ", i,
                  TYPE_OF(l, tl), (long long)a->lhs_batch[i], TYPE_OF(r, tr),
                  (long long)a->rhs_batch[i]);
    }
  }
  for (int i = 0; i < nc; i++) {
    if (l->shape.dims[a->lhs_contract[i]] != r->shape.dims[a->rhs_contract[i]]) {
      return fail(c, "contracting dim %d: lhs %s dim %lld and rhs %s dim %lld sizes differ", i,
                  TYPE_OF(l, tl), (long long)a->lhs_contract[i], TYPE_OF(r, tr),
                  (long long)a->rhs_contract[i]);
    }
  }
  int rank = l->shape.rank + r->shape.rank - nb - 2 * nc;
  if (rank > TPU_MAX_RANK) {
    return fail(c, "result rank %d exceeds %d", rank, TPU_MAX_RANK);
  }
  sh->rank = 0;
  for (int i = 0; i < nb; i++) sh->dims[sh->rank++] = l->shape.dims[a->lhs_batch[i]];
  for (int d = 0; d < l->shape.rank; d++) {
    if (!contains(lall, nb + nc, d)) sh->dims[sh->rank++] = l->shape.dims[d];
  }
  for (int d = 0; d < r->shape.rank; d++) {
    if (!contains(rall, nb + nc, d)) sh->dims[sh->rank++] = r->shape.dims[d];
  }
  *dt = c->n->dtype;
  return TPU_OK;
}

static tpu_status_t rule_convolution(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *in = arg(c, 0), *k = arg(c, 1);
  const tpu_conv_attrs_t *a = &c->n->attrs.conv;
  TPU_RETURN_IF_ERROR(mxu_dtypes(c, in, k, a->precision));
  int ns = a->num_spatial;
  if (ns < 1 || ns > 3) return fail(c, "num_spatial %d is outside 1..3", ns);
  int n = ns + 2;
  char ti[TPU_IR_TYPE_CAP], tk[TPU_IR_TYPE_CAP];
  if (in->shape.rank != n || k->shape.rank != n) {
    return fail(c, "input %s and kernel %s must have rank %d for %d spatial dims",
                TYPE_OF(in, ti), TYPE_OF(k, tk), n, ns);
  }
  int64_t dn_in[5], dn_k[5], dn_out[5];
  dn_in[0] = a->in_batch, dn_in[1] = a->in_feature;
  dn_k[0] = a->k_out_feature, dn_k[1] = a->k_in_feature;
  dn_out[0] = a->out_batch, dn_out[1] = a->out_feature;
  for (int i = 0; i < ns; i++) {
    dn_in[2 + i] = a->in_spatial[i];
    dn_k[2 + i] = a->k_spatial[i];
    dn_out[2 + i] = a->out_spatial[i];
  }
  TPU_RETURN_IF_ERROR(index_list(c, dn_in, n, n, false, "input dimension numbers"));
  TPU_RETURN_IF_ERROR(index_list(c, dn_k, n, n, false, "kernel dimension numbers"));
  TPU_RETURN_IF_ERROR(index_list(c, dn_out, n, n, false, "output dimension numbers"));
  int64_t fgc = a->feature_group_count, bgc = a->batch_group_count;
  if (fgc < 1 || bgc < 1) {
    return fail(c, "feature_group_count (%lld) and batch_group_count (%lld) must be >= 1",
                (long long)fgc, (long long)bgc);
  }
  if (fgc > 1 && bgc > 1) {
    return fail(c, "feature_group_count and batch_group_count cannot both exceed 1");
  }
  int64_t batch = in->shape.dims[a->in_batch], feat = in->shape.dims[a->in_feature];
  int64_t kin = k->shape.dims[a->k_in_feature], kout = k->shape.dims[a->k_out_feature];
  if (feat % fgc != 0) {
    return fail(c, "input features %lld are not divisible by feature_group_count %lld",
                (long long)feat, (long long)fgc);
  }
  if (batch % bgc != 0) {
    return fail(c, "input batch %lld is not divisible by batch_group_count %lld",
                (long long)batch, (long long)bgc);
  }
  if (kin != feat / fgc) {
    return fail(c, "kernel input features %lld != input features %lld / feature_group_count "
                "%lld", (long long)kin, (long long)feat, (long long)fgc);
  }
  if (kout % fgc != 0 || kout % bgc != 0) {
    return fail(c, "kernel output features %lld are not divisible by the group counts "
                "(%lld, %lld)", (long long)kout, (long long)fgc, (long long)bgc);
  }
  sh->rank = n;
  sh->dims[a->out_batch] = batch / bgc;
  sh->dims[a->out_feature] = kout;
  for (int i = 0; i < ns; i++) {
    if (a->stride[i] < 1 || a->lhs_dilation[i] < 1 || a->rhs_dilation[i] < 1) {
      return fail(c, "spatial dim %d: stride (%lld), lhs_dilation (%lld) and rhs_dilation "
                  "(%lld) must be >= 1", i, (long long)a->stride[i],
                  (long long)a->lhs_dilation[i], (long long)a->rhs_dilation[i]);
    }
    int64_t size = in->shape.dims[a->in_spatial[i]], dilated = 0, padded;
    if (size > 0 && (!mul64(size - 1, a->lhs_dilation[i], &dilated) ||
                     !add64(dilated, 1, &dilated))) {
      return fail(c, "spatial dim %d: dilated input size overflows int64", i);
    }
    if (!add64(dilated, a->pad_lo[i], &padded) || !add64(padded, a->pad_hi[i], &padded)) {
      return fail(c, "spatial dim %d: padded input size overflows int64", i);
    }
    if (padded < 0) {
      return fail(c, "spatial dim %d: padded input size %lld is negative", i,
                  (long long)padded);
    }
    TPU_RETURN_IF_ERROR(window_count(c, i, padded, k->shape.dims[a->k_spatial[i]],
                                     a->rhs_dilation[i], a->stride[i],
                                     &sh->dims[a->out_spatial[i]]));
  }
  *dt = c->n->dtype;
  return TPU_OK;
}

/* ---- indexing ------------------------------------------------------------------------- */

static tpu_status_t rule_gather(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0), *ix = arg(c, 1);
  const tpu_gather_attrs_t *a = &c->n->attrs.gather;
  char t[TPU_IR_TYPE_CAP];
  if (!tpu_dtype_is_integer(ix->dtype)) {
    return fail(c, "indices %s must have an integer dtype", TYPE_OF(ix, t));
  }
  int r = x->shape.rank, ir = ix->shape.rank;
  TPU_RETURN_IF_ERROR(count_in_range(c, a->num_offset_dims, TPU_MAX_RANK, "offset_dims"));
  TPU_RETURN_IF_ERROR(count_in_range(c, a->num_collapsed, TPU_MAX_RANK, "collapsed_slice_dims"));
  TPU_RETURN_IF_ERROR(count_in_range(c, a->num_start_index_map, TPU_MAX_RANK,
                                     "start_index_map"));
  if (a->index_vector_dim < 0 || a->index_vector_dim > ir) {
    return fail(c, "index_vector_dim %lld is outside 0..%d", (long long)a->index_vector_dim,
                ir);
  }
  if (a->num_offset_dims + a->num_collapsed != r) {
    return fail(c, "operand rank %d must equal offset_dims (%d) + collapsed_slice_dims (%d)",
                r, a->num_offset_dims, a->num_collapsed);
  }
  TPU_RETURN_IF_ERROR(index_list(c, a->collapsed_slice_dims, a->num_collapsed, r, true,
                                 "collapsed_slice_dims"));
  for (int d = 0; d < r; d++) {
    if (a->slice_sizes[d] < 0 || a->slice_sizes[d] > x->shape.dims[d]) {
      return fail(c, "slice_sizes[%d] = %lld is outside 0..%lld", d,
                  (long long)a->slice_sizes[d], (long long)x->shape.dims[d]);
    }
  }
  for (int i = 0; i < a->num_collapsed; i++) {
    if (a->slice_sizes[a->collapsed_slice_dims[i]] > 1) {
      return fail(c, "collapsed dim %lld has slice size %lld (must be <= 1)",
                  (long long)a->collapsed_slice_dims[i],
                  (long long)a->slice_sizes[a->collapsed_slice_dims[i]]);
    }
  }
  bool explicit_ivd = a->index_vector_dim < ir;
  int64_t index_len = explicit_ivd ? ix->shape.dims[a->index_vector_dim] : 1;
  if (a->num_start_index_map != index_len) {
    return fail(c, "start_index_map has %d entries but the index vector of %s has %lld",
                a->num_start_index_map, TYPE_OF(ix, t), (long long)index_len);
  }
  TPU_RETURN_IF_ERROR(index_list(c, a->start_index_map, a->num_start_index_map, r, false,
                                 "start_index_map"));
  int batch_rank = ir - (explicit_ivd ? 1 : 0);
  int rank = batch_rank + a->num_offset_dims;
  if (rank > TPU_MAX_RANK) return fail(c, "result rank %d exceeds %d", rank, TPU_MAX_RANK);
  TPU_RETURN_IF_ERROR(index_list(c, a->offset_dims, a->num_offset_dims, rank, true,
                                 "offset_dims"));
  sh->rank = rank;
  int next_offset = 0, next_operand = 0, next_batch = 0;
  for (int d = 0; d < rank; d++) {
    if (next_offset < a->num_offset_dims && a->offset_dims[next_offset] == d) {
      while (contains(a->collapsed_slice_dims, a->num_collapsed, next_operand)) next_operand++;
      sh->dims[d] = a->slice_sizes[next_operand++];
      next_offset++;
    } else {
      if (explicit_ivd && next_batch == a->index_vector_dim) next_batch++;
      sh->dims[d] = ix->shape.dims[next_batch++];
    }
  }
  *dt = x->dtype;
  return TPU_OK;
}

static tpu_status_t rule_scatter(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0), *ix = arg(c, 1), *up = arg(c, 2);
  const tpu_scatter_attrs_t *a = &c->n->attrs.scatter;
  char t[TPU_IR_TYPE_CAP], tu[TPU_IR_TYPE_CAP];
  if (!tpu_dtype_is_integer(ix->dtype)) {
    return fail(c, "indices %s must have an integer dtype", TYPE_OF(ix, t));
  }
  TPU_RETURN_IF_ERROR(same_dtype(c, x, up, "operand/updates"));
  if (a->kind == TPU_SCATTER_ADD || a->kind == TPU_SCATTER_MUL || a->kind == TPU_SCATTER_MAX ||
      a->kind == TPU_SCATTER_MIN) {
    TPU_RETURN_IF_ERROR(need_kind(c, x->dtype, K_NUM, "operand"));
  } else if (a->kind != TPU_SCATTER_REPLACE) {
    return fail(c, "kind %d is invalid", (int)a->kind);
  }
  int r = x->shape.rank, ir = ix->shape.rank, ur = up->shape.rank;
  TPU_RETURN_IF_ERROR(count_in_range(c, a->num_update_window_dims, TPU_MAX_RANK,
                                     "update_window_dims"));
  TPU_RETURN_IF_ERROR(count_in_range(c, a->num_inserted_window_dims, TPU_MAX_RANK,
                                     "inserted_window_dims"));
  TPU_RETURN_IF_ERROR(count_in_range(c, a->num_scatter_dims, TPU_MAX_RANK,
                                     "scatter_dims_to_operand_dims"));
  if (a->index_vector_dim < 0 || a->index_vector_dim > ir) {
    return fail(c, "index_vector_dim %lld is outside 0..%d", (long long)a->index_vector_dim,
                ir);
  }
  if (a->num_update_window_dims + a->num_inserted_window_dims != r) {
    return fail(c, "operand rank %d must equal update_window_dims (%d) + "
                "inserted_window_dims (%d)", r, a->num_update_window_dims,
                a->num_inserted_window_dims);
  }
  TPU_RETURN_IF_ERROR(index_list(c, a->update_window_dims, a->num_update_window_dims, ur,
                                 true, "update_window_dims"));
  TPU_RETURN_IF_ERROR(index_list(c, a->inserted_window_dims, a->num_inserted_window_dims, r,
                                 true, "inserted_window_dims"));
  bool explicit_ivd = a->index_vector_dim < ir;
  int64_t index_len = explicit_ivd ? ix->shape.dims[a->index_vector_dim] : 1;
  if (a->num_scatter_dims != index_len) {
    return fail(c, "scatter_dims_to_operand_dims has %d entries but the index vector of %s "
                "has %lld", a->num_scatter_dims, TYPE_OF(ix, t), (long long)index_len);
  }
  TPU_RETURN_IF_ERROR(index_list(c, a->scatter_dims_to_operand_dims, a->num_scatter_dims, r,
                                 false, "scatter_dims_to_operand_dims"));
  int batch_rank = ir - (explicit_ivd ? 1 : 0);
  if (ur != batch_rank + a->num_update_window_dims) {
    return fail(c, "updates %s must have rank %d (%d scatter dims + %d window dims)",
                TYPE_OF(up, tu), batch_rank + a->num_update_window_dims, batch_rank,
                a->num_update_window_dims);
  }
  int next_window = 0, next_operand = 0, next_batch = 0;
  for (int d = 0; d < ur; d++) {
    int64_t size = up->shape.dims[d];
    if (next_window < a->num_update_window_dims && a->update_window_dims[next_window] == d) {
      while (contains(a->inserted_window_dims, a->num_inserted_window_dims, next_operand)) {
        next_operand++;
      }
      int64_t limit = x->shape.dims[next_operand++];
      next_window++;
      if (size > limit) {
        return fail(c, "updates %s dim %d (a window dim) exceeds operand %s dim %d", 
                    TYPE_OF(up, tu), d, TYPE_OF(x, t), next_operand - 1);
      }
    } else {
      if (explicit_ivd && next_batch == a->index_vector_dim) next_batch++;
      int64_t want = ix->shape.dims[next_batch++];
      if (size != want) {
        return fail(c, "updates %s dim %d (a scatter dim) must equal indices %s dim %d",
                    TYPE_OF(up, tu), d, TYPE_OF(ix, t), next_batch - 1);
      }
    }
  }
  *dt = x->dtype;
  *sh = x->shape;
  return TPU_OK;
}

static tpu_status_t rule_sort(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *x = arg(c, 0);
  int dim = c->n->attrs.sort.dim;
  if (x->shape.rank < 1) return fail(c, "operand must have rank >= 1");
  if (dim < 0 || dim >= x->shape.rank) {
    return fail(c, "dim %d is outside 0..%d", dim, x->shape.rank - 1);
  }
  *dt = c->n->op == TPU_OP_ARGSORT ? TPU_I64 : x->dtype;
  *sh = x->shape;
  return TPU_OK;
}

/* ---- linear algebra ---------------------------------------------------------------------- */

/* |x|: float, rank >= 2 (batches of matrices). */
static tpu_status_t float_matrices(rule_ctx_t *c, const tpu_node_t *x, const char *what) {
  TPU_RETURN_IF_ERROR(need_kind(c, x->dtype, K_FLOAT, what));
  int r = x->shape.rank;
  if (r < 2) return fail(c, "%s must have rank >= 2, got rank %d", what, r);
  return TPU_OK;
}

/* |x|: float, rank >= 2, square in its last two dims. */
static tpu_status_t square_matrices(rule_ctx_t *c, const tpu_node_t *x, const char *what) {
  TPU_RETURN_IF_ERROR(float_matrices(c, x, what));
  int r = x->shape.rank;
  if (x->shape.dims[r - 1] != x->shape.dims[r - 2]) {
    return fail(c, "%s must be square matrices, got %lld x %lld", what,
                (long long)x->shape.dims[r - 2], (long long)x->shape.dims[r - 1]);
  }
  return TPU_OK;
}

static tpu_status_t rule_cholesky(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *a = arg(c, 0);
  TPU_RETURN_IF_ERROR(square_matrices(c, a, "operand"));
  *dt = a->dtype;
  *sh = a->shape;
  return TPU_OK;
}

static tpu_status_t rule_triangular_solve(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *a = arg(c, 0), *b = arg(c, 1);
  TPU_RETURN_IF_ERROR(square_matrices(c, a, "a"));
  TPU_RETURN_IF_ERROR(same_dtype(c, a, b, "b"));
  int r = a->shape.rank;
  if (b->shape.rank != r) return fail(c, "b has rank %d, a has rank %d", b->shape.rank, r);
  for (int d = 0; d < r - 2; d++) {
    if (a->shape.dims[d] != b->shape.dims[d]) {
      return fail(c, "batch dim %d differs: a %lld, b %lld", d, (long long)a->shape.dims[d],
                  (long long)b->shape.dims[d]);
    }
  }
  bool left = c->n->attrs.triangular_solve.left_side;
  int64_t n = a->shape.dims[r - 1], bn = b->shape.dims[left ? r - 2 : r - 1];
  if (bn != n) {
    return fail(c, "b's %s dim is %lld, a is %lld x %lld", left ? "row" : "column",
                (long long)bn, (long long)n, (long long)n);
  }
  *dt = b->dtype;
  *sh = b->shape;
  return TPU_OK;
}

static tpu_status_t rule_lu(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *a = arg(c, 0);
  TPU_RETURN_IF_ERROR(square_matrices(c, a, "operand"));
  *dt = a->dtype;
  *sh = a->shape;
  if (c->n->op == TPU_OP_LU_PIVOTS) {
    *dt = TPU_I32;
    sh->rank--;
  }
  return TPU_OK;
}

static tpu_status_t rule_lu_permutation(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *p = arg(c, 0);
  int64_t size = c->n->attrs.lu_permutation.size;
  if (p->dtype != TPU_I32) return fail(c, "pivots must be i32, got %s", tpu_dtype_name(p->dtype));
  if (p->shape.rank < 1) return fail(c, "pivots must have rank >= 1");
  if (size < p->shape.dims[p->shape.rank - 1]) {
    return fail(c, "size %lld is below the %lld pivots", (long long)size,
                (long long)p->shape.dims[p->shape.rank - 1]);
  }
  *dt = TPU_I32;
  *sh = p->shape;
  sh->dims[sh->rank - 1] = size;
  return TPU_OK;
}

static tpu_status_t rule_geqrf(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *a = arg(c, 0);
  TPU_RETURN_IF_ERROR(float_matrices(c, a, "operand"));
  int r = a->shape.rank;
  *dt = a->dtype;
  *sh = a->shape;
  sh->dims[r - 2]++; /* tau's row */
  return TPU_OK;
}

static tpu_status_t rule_eigh(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *a = arg(c, 0);
  TPU_RETURN_IF_ERROR(square_matrices(c, a, "operand"));
  int r = a->shape.rank;
  *dt = a->dtype;
  *sh = a->shape;
  sh->dims[r - 2]++; /* the eigenvalues' row */
  return TPU_OK;
}

static tpu_status_t rule_svd(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *a = arg(c, 0);
  TPU_RETURN_IF_ERROR(float_matrices(c, a, "operand"));
  int r = a->shape.rank;
  int64_t m = a->shape.dims[r - 2], n = a->shape.dims[r - 1];
  if (m < n) {
    return fail(c, "operand must have at least as many rows as columns, got %lld x %lld",
                (long long)m, (long long)n);
  }
  *dt = a->dtype;
  *sh = a->shape;
  sh->dims[r - 2] = m + n + 1; /* U, V, then s */
  return TPU_OK;
}

static tpu_status_t rule_householder_product(rule_ctx_t *c, tpu_dtype_t *dt, tpu_shape_t *sh) {
  const tpu_node_t *v = arg(c, 0), *tau = arg(c, 1);
  TPU_RETURN_IF_ERROR(float_matrices(c, v, "v"));
  TPU_RETURN_IF_ERROR(same_dtype(c, v, tau, "tau"));
  int r = v->shape.rank;
  int64_t m = v->shape.dims[r - 2], n = v->shape.dims[r - 1];
  if (m < n) return fail(c, "v must have at least as many rows as columns, got %lld x %lld",
                         (long long)m, (long long)n);
  if (tau->shape.rank != r - 1) {
    return fail(c, "tau has rank %d, expected %d", tau->shape.rank, r - 1);
  }
  for (int d = 0; d < r - 2; d++) {
    if (tau->shape.dims[d] != v->shape.dims[d]) {
      return fail(c, "batch dim %d differs: v %lld, tau %lld", d, (long long)v->shape.dims[d],
                  (long long)tau->shape.dims[d]);
    }
  }
  if (tau->shape.dims[r - 2] > n) {
    return fail(c, "tau has %lld reflectors, v only %lld columns",
                (long long)tau->shape.dims[r - 2], (long long)n);
  }
  *dt = v->dtype;
  *sh = v->shape;
  return TPU_OK;
}

/* ---- dispatch ---------------------------------------------------------------------------- */

const char *tpu_ir_builder_name(tpu_op_t op, const tpu_attrs_t *attrs, char *buf, size_t cap) {
  if (!buf || cap == 0) return buf;
  if ((unsigned)op >= TPU_OP_COUNT) {
    snprintf(buf, cap, "op %d", (int)op);
    return buf;
  }
  tpu_op_family_t fam = tpu_op_family(op);
  if (fam == TPU_FAMILY_UNARY && op != TPU_OP_CONVERT && op != TPU_OP_BITCAST_CONVERT) {
    snprintf(buf, cap, "unary %s", tpu_op_name(op));
  } else if (fam == TPU_FAMILY_BINARY && tpu_op_arity(op) == 2) {
    snprintf(buf, cap, "binary %s", tpu_op_name(op));
  } else if (op == TPU_OP_REDUCE && attrs) {
    snprintf(buf, cap, "reduce %s", tpu_ir_reduce_kind_name(attrs->reduce.kind));
  } else if (op == TPU_OP_SCAN && attrs) {
    snprintf(buf, cap, "scan %s", tpu_ir_reduce_kind_name(attrs->scan.kind));
  } else {
    const char *name = tpu_op_name(op);
    size_t i = 0;
    for (; name[i] && i + 1 < cap; i++) {
      char ch = name[i];
      buf[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
    }
    buf[i] = '\0';
  }
  return buf;
}

tpu_status_t tpu_ir_infer(const tpu_graph_t *g, const tpu_node_t *node, tpu_dtype_t *out_dtype,
                          tpu_shape_t *out_shape, char *msg, size_t cap) {
  rule_ctx_t c = {g, node, msg, cap};
  if (msg && cap) msg[0] = '\0';
  if ((unsigned)node->op >= TPU_OP_COUNT) return fail(&c, "invalid op");
  int arity = tpu_op_arity(node->op);
  if (arity >= 0 && node->num_operands != arity) {
    return fail(&c, "takes %d operands, got %d", arity, node->num_operands);
  }
  if (node->num_operands < 0 || (node->num_operands > 0 && !node->operands)) {
    return fail(&c, "operand list is missing");
  }
  for (int i = 0; i < node->num_operands; i++) {
    tpu_value_t v = node->operands[i];
    if (v < 0 || v >= g->num_nodes) {
      return fail(&c, "operand %d (value %d) is not a value of this graph", i, (int)v);
    }
    const tpu_node_t *o = &g->nodes[v];
    if (!tpu_dtype_valid(o->dtype) || o->shape.rank < 0 || o->shape.rank > TPU_MAX_RANK) {
      return fail(&c, "operand %d (value %d) has an invalid type", i, (int)v);
    }
  }
  tpu_dtype_t dt = TPU_F32;
  tpu_shape_t sh;
  memset(&sh, 0, sizeof(sh));
  tpu_status_t st;
  switch (node->op) {
    case TPU_OP_PARAMETER: st = rule_parameter(&c, &dt, &sh); break;
    case TPU_OP_CONSTANT: st = rule_constant(&c, &dt, &sh); break;
    case TPU_OP_IOTA: st = rule_iota(&c, &dt, &sh); break;
    case TPU_OP_RNG: st = rule_rng(&c, &dt, &sh); break;
    case TPU_OP_COMPARE: st = rule_compare(&c, &dt, &sh); break;
    case TPU_OP_SELECT: st = rule_select(&c, &dt, &sh); break;
    case TPU_OP_CLAMP: st = rule_clamp(&c, &dt, &sh); break;
    case TPU_OP_BROADCAST_IN_DIM: st = rule_broadcast_in_dim(&c, &dt, &sh); break;
    case TPU_OP_RESHAPE: st = rule_reshape(&c, &dt, &sh); break;
    case TPU_OP_TRANSPOSE: st = rule_transpose(&c, &dt, &sh); break;
    case TPU_OP_SLICE: st = rule_slice(&c, &dt, &sh); break;
    case TPU_OP_DYNAMIC_SLICE: st = rule_dynamic_slice(&c, &dt, &sh); break;
    case TPU_OP_DYNAMIC_UPDATE_SLICE: st = rule_dynamic_update_slice(&c, &dt, &sh); break;
    case TPU_OP_CONCATENATE: st = rule_concatenate(&c, &dt, &sh); break;
    case TPU_OP_PAD: st = rule_pad(&c, &dt, &sh); break;
    case TPU_OP_REVERSE: st = rule_reverse(&c, &dt, &sh); break;
    case TPU_OP_REDUCE: st = rule_reduce(&c, &dt, &sh); break;
    case TPU_OP_REDUCE_WINDOW: st = rule_reduce_window(&c, &dt, &sh); break;
    case TPU_OP_SCAN: st = rule_scan(&c, &dt, &sh); break;
    case TPU_OP_DOT_GENERAL: st = rule_dot_general(&c, &dt, &sh); break;
    case TPU_OP_CONVOLUTION: st = rule_convolution(&c, &dt, &sh); break;
    case TPU_OP_GATHER: st = rule_gather(&c, &dt, &sh); break;
    case TPU_OP_SCATTER: st = rule_scatter(&c, &dt, &sh); break;
    case TPU_OP_SORT:
    case TPU_OP_ARGSORT: st = rule_sort(&c, &dt, &sh); break;
    case TPU_OP_CHOLESKY: st = rule_cholesky(&c, &dt, &sh); break;
    case TPU_OP_TRIANGULAR_SOLVE: st = rule_triangular_solve(&c, &dt, &sh); break;
    case TPU_OP_LU:
    case TPU_OP_LU_PIVOTS: st = rule_lu(&c, &dt, &sh); break;
    case TPU_OP_LU_PIVOTS_TO_PERMUTATION: st = rule_lu_permutation(&c, &dt, &sh); break;
    case TPU_OP_GEQRF: st = rule_geqrf(&c, &dt, &sh); break;
    case TPU_OP_HOUSEHOLDER_PRODUCT: st = rule_householder_product(&c, &dt, &sh); break;
    case TPU_OP_EIGH: st = rule_eigh(&c, &dt, &sh); break;
    case TPU_OP_SVD: st = rule_svd(&c, &dt, &sh); break;
    default:
      switch (tpu_op_family(node->op)) {
        case TPU_FAMILY_UNARY: st = rule_unary(&c, &dt, &sh); break;
        case TPU_FAMILY_BINARY: st = rule_binary(&c, &dt, &sh); break;
        default: st = fail(&c, "no shape rule for this op"); break;
      }
      break;
  }
  if (st != TPU_OK) return st;
  TPU_RETURN_IF_ERROR(check_shape(&c, dt, &sh, "result"));
  *out_dtype = dt;
  *out_shape = sh;
  return TPU_OK;
}
