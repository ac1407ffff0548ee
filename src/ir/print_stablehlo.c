/* print_stablehlo.c: tpu_graph_print_stablehlo, the graph as StableHLO MLIR text.
 *
 * Output is a module that MLIR's StableHLO parser accepts (and XLA compiles), written in
 * the syntax jax emits: the pretty form for ops that have one, the generic form with
 * properties for reduce_window, sort, gather and scatter.
 *
 *   module @name {
 *     func.func public @main(%arg0: tensor<2x3xf32>, ...) -> (tensor<2x3xf32>) {
 *       %v3 = stablehlo.add %arg0, %v2 : tensor<2x3xf32>
 *       return %v3 : tensor<2x3xf32>
 *     }
 *   }
 *
 * Node i's value is %v<i> (parameters are %arg<index>); helper values are %t<n>. Ops that
 * StableHLO lacks are expanded: ARGMAX/ARGMIN become a variadic reduce over (value, iota)
 * that keeps the first extreme (NaN counts as extreme), SCAN a reduce_window padded by
 * size-1 in front, sort/argsort a comparator that orders NaN last (first when descending),
 * and RNG a PHILOX rng_bit_generator keyed by (seed, offset) converted to the distribution
 * (the bit stream differs from the vTPU kernel's; shapes and ranges match). Parameter and
 * output strides are layout, not part of StableHLO, and are not printed; nor is
 * check_bounds. Unsigned SHIFT_RIGHT prints as shift_right_logical (PyTorch's >> on uint8).
 */
#include <float.h>
#include <math.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_internal.h"

#define REF_CAP 24

typedef struct printer {
  const tpu_graph_t *g;
  tpu_allocator_t host;
  char *buf;
  size_t len, cap;
  bool oom;
  char (*refs)[REF_CAP]; /* (num_nodes) SSA name of each node's value */
  int next_tmp;
} printer_t;

/* ---- text buffer --------------------------------------------------------------------------- */

static bool reserve(printer_t *p, size_t extra) {
  size_t need;
  if (p->oom || !tpu_size_add(p->len, extra, &need) || !tpu_size_add(need, 1, &need)) {
    p->oom = true;
    return false;
  }
  if (need <= p->cap) return true;
  size_t cap = p->cap ? p->cap : 4096;
  while (cap < need) {
    if (!tpu_size_mul(cap, 2, &cap)) {
      p->oom = true;
      return false;
    }
  }
  char *nb = p->host.alloc(p->host.self, cap, 1);
  if (!nb) {
    p->oom = true;
    return false;
  }
  if (p->buf) memcpy(nb, p->buf, p->len + 1);
  tpu_allocator_free(p->host, p->buf);
  p->buf = nb;
  p->cap = cap;
  return true;
}

static void out(printer_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void out(printer_t *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !reserve(p, (size_t)n)) {
    p->oom = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(p->buf + p->len, p->cap - p->len, fmt, ap);
  va_end(ap);
  p->len += (size_t)n;
}

/* tensor<2x3xf32>; |elem| may be a type the IR lacks (ui32, ui64) for helper values. */
static void out_elem_type(printer_t *p, const char *elem, const tpu_shape_t *s) {
  out(p, "tensor<");
  for (int d = 0; d < s->rank; d++) out(p, "%lldx", (long long)s->dims[d]);
  out(p, "%s>", elem);
}

static void out_type(printer_t *p, tpu_dtype_t dt, const tpu_shape_t *s) {
  out_elem_type(p, tpu_dtype_name(dt), s);
}

static void out_scalar_type(printer_t *p, tpu_dtype_t dt) {
  out(p, "tensor<%s>", tpu_dtype_name(dt));
}

static void out_node_type(printer_t *p, tpu_value_t v) {
  out_type(p, p->g->nodes[v].dtype, &p->g->nodes[v].shape);
}

/* [1, 2] */
static void out_list(printer_t *p, const int64_t *v, int n) {
  out(p, "[");
  for (int i = 0; i < n; i++) out(p, "%s%lld", i ? ", " : "", (long long)v[i]);
  out(p, "]");
}

/* array<i64: 1, 2> (array<i64> when empty) */
static void out_array(printer_t *p, const int64_t *v, int n) {
  out(p, "array<i64");
  for (int i = 0; i < n; i++) out(p, "%s%lld", i ? ", " : ": ", (long long)v[i]);
  out(p, ">");
}

static void out_bool_dims(printer_t *p, const bool *dims, int rank) {
  int64_t v[TPU_MAX_RANK];
  int n = 0;
  for (int d = 0; d < rank; d++) {
    if (dims[d]) v[n++] = d;
  }
  out_list(p, v, n);
}

static const char *ref(const printer_t *p, tpu_value_t v) { return p->refs[v]; }

static const char *new_tmp(printer_t *p, char buf[REF_CAP]) {
  snprintf(buf, REF_CAP, "%%t%d", p->next_tmp++);
  return buf;
}

/* ---- literals ---------------------------------------------------------------------------- */

/* double -> float with IEEE overflow to infinity (a plain cast would be undefined). */
static float to_float(double v) {
  if (isfinite(v) && fabs(v) >= 0x1.ffffffp+127) return v > 0 ? INFINITY : -INFINITY;
  return (float)v;
}

/* |v| rounded to |dt| (as a double) and the bit pattern of that value in |dt|. */
static double round_to(tpu_dtype_t dt, double v, uint64_t *bits, int *hex_digits) {
  switch (dt) {
    case TPU_F64: {
      memcpy(bits, &v, 8);
      *hex_digits = 16;
      return v;
    }
    case TPU_F16: {
      uint16_t h = tpu_f32_to_f16(to_float(v));
      *bits = h;
      *hex_digits = 4;
      return tpu_f16_to_f32(h);
    }
    case TPU_BF16: {
      uint16_t h = tpu_f32_to_bf16(to_float(v));
      *bits = h;
      *hex_digits = 4;
      return tpu_bf16_to_f32(h);
    }
    default: {
      float f = to_float(v);
      uint32_t u;
      memcpy(&u, &f, 4);
      *bits = u;
      *hex_digits = 8;
      return f;
    }
  }
}

/* A float literal MLIR parses back to exactly the |dt| value nearest |v|: decimal for
 * finite values (short form when it round-trips), hex bits for inf and NaN. */
static void out_float_literal(printer_t *p, tpu_dtype_t dt, double v) {
  uint64_t bits, ignored;
  int digits, ignored_digits;
  double r = round_to(dt, v, &bits, &digits);
  if (!isfinite(r)) {
    if (isnan(r)) { /* one canonical quiet NaN per width */
      bits = digits == 16 ? 0x7ff8000000000000ull
                          : digits == 8 ? 0x7fc00000u : (dt == TPU_F16 ? 0x7e00u : 0x7fc0u);
    }
    out(p, "0x%0*llX", digits, (unsigned long long)bits);
    return;
  }
  char s[64];
  snprintf(s, sizeof(s), "%e", r);
  if (round_to(dt, strtod(s, NULL), &ignored, &ignored_digits) != r) {
    snprintf(s, sizeof(s), "%.17e", r);
  }
  out(p, "%s", s);
}

static void out_int_literal(printer_t *p, tpu_dtype_t dt, int64_t v) {
  if (dt == TPU_BOOL) {
    out(p, "%s", v ? "true" : "false");
  } else {
    out(p, "%lld", (long long)v);
  }
}

/* %tN = stablehlo.constant dense<lit> : tensor<...> for a splat of |shape|. */
static const char *emit_splat(printer_t *p, char name[REF_CAP], tpu_dtype_t dt,
                              const tpu_shape_t *shape, double fv, int64_t iv) {
  new_tmp(p, name);
  out(p, "    %s = stablehlo.constant dense<", name);
  if (tpu_dtype_is_float(dt)) {
    out_float_literal(p, dt, fv);
  } else {
    out_int_literal(p, dt, iv);
  }
  out(p, "> : ");
  out_type(p, dt, shape);
  out(p, "\n");
  return name;
}

/* Identity of a reduction kind as a scalar constant of |dt|. */
static const char *emit_identity(printer_t *p, char name[REF_CAP], tpu_reduce_kind_t kind,
                                 tpu_dtype_t dt) {
  tpu_shape_t scalar = {0, {0}};
  double f = 0.0;
  int64_t i = 0;
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  switch (dt) {
    case TPU_I32: lo = INT32_MIN, hi = INT32_MAX; break;
    case TPU_I16: lo = INT16_MIN, hi = INT16_MAX; break;
    case TPU_I8: lo = INT8_MIN, hi = INT8_MAX; break;
    case TPU_U8: lo = 0, hi = UINT8_MAX; break;
    case TPU_BOOL: lo = 0, hi = 1; break;
    default: break;
  }
  switch (kind) {
    case TPU_REDUCE_PROD: f = 1.0, i = 1; break;
    case TPU_REDUCE_AND: i = dt == TPU_BOOL ? 1 : (dt == TPU_U8 ? UINT8_MAX : -1); break;
    case TPU_REDUCE_MAX:
    case TPU_REDUCE_ARGMAX: f = -INFINITY, i = lo; break;
    case TPU_REDUCE_MIN:
    case TPU_REDUCE_ARGMIN: f = INFINITY, i = hi; break;
    default: break; /* SUM, OR: zero */
  }
  return emit_splat(p, name, dt, &scalar, f, i);
}

static const char *combiner(tpu_reduce_kind_t kind) {
  switch (kind) {
    case TPU_REDUCE_PROD: return "stablehlo.multiply";
    case TPU_REDUCE_MAX: return "stablehlo.maximum";
    case TPU_REDUCE_MIN: return "stablehlo.minimum";
    case TPU_REDUCE_AND: return "stablehlo.and";
    case TPU_REDUCE_OR: return "stablehlo.or";
    default: return "stablehlo.add";
  }
}

static const char *compare_type(tpu_dtype_t dt) {
  if (tpu_dtype_is_float(dt)) return "FLOAT";
  if (dt == TPU_U8 || dt == TPU_BOOL) return "UNSIGNED";
  return "SIGNED";
}

/* %r = stablehlo.compare DIR, %a, %b, TYPE : (tensor<dt>, tensor<dt>) -> tensor<i1>, scalars */
static const char *emit_scalar_compare(printer_t *p, char name[REF_CAP], const char *dir,
                                       const char *a, const char *b, tpu_dtype_t dt,
                                       const char *indent) {
  new_tmp(p, name);
  out(p, "%s%s = stablehlo.compare %s, %s, %s, %s : (tensor<%s>, tensor<%s>) -> tensor<i1>\n",
      indent, name, dir, a, b, compare_type(dt), tpu_dtype_name(dt), tpu_dtype_name(dt));
  return name;
}

static const char *emit_scalar_logic(printer_t *p, char name[REF_CAP], const char *op,
                                     const char *a, const char *b, const char *indent) {
  new_tmp(p, name);
  out(p, "%s%s = stablehlo.%s %s, %s : tensor<i1>\n", indent, name, op, a, b);
  return name;
}

/* Scalar "a wins over b": a |better| b (LT or GT) for ints; for floats also the NaN rule.
 * |a_nan_wins|: a NaN beats a number (descending sort, ARGMAX, ARGMIN); otherwise a number
 * beats a NaN (ascending sort, NaN last as in PyTorch). */
static const char *emit_order(printer_t *p, char name[REF_CAP], const char *better,
                              bool a_nan_wins, const char *a, const char *b, tpu_dtype_t dt,
                              const char *ind) {
  char c1[REF_CAP], c2[REF_CAP], c3[REF_CAP], c4[REF_CAP];
  emit_scalar_compare(p, c1, better, a, b, dt, ind);
  if (!tpu_dtype_is_float(dt)) {
    snprintf(name, REF_CAP, "%s", c1);
    return name;
  }
  const char *nan_side = a_nan_wins ? a : b, *num_side = a_nan_wins ? b : a;
  emit_scalar_compare(p, c2, "NE", nan_side, nan_side, dt, ind);
  emit_scalar_compare(p, c3, "EQ", num_side, num_side, dt, ind);
  emit_scalar_logic(p, c4, "and", c2, c3, ind);
  return emit_scalar_logic(p, name, "or", c1, c4, ind);
}

/* ---- per-op printers ------------------------------------------------------------------ */

#define N(v) (&p->g->nodes[v])

static void print_elementwise(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  tpu_value_t x = n->operands[0];
  const char *name = tpu_op_printed_name(n->op);
  if (n->op == TPU_OP_SHIFT_RIGHT && n->dtype == TPU_U8) name = "stablehlo.shift_right_logical";
  out(p, "    %s = %s ", ref(p, i), name);
  for (int k = 0; k < n->num_operands; k++) out(p, "%s%s", k ? ", " : "", ref(p, n->operands[k]));
  out(p, " : ");
  if (n->op == TPU_OP_ERF) { /* chlo's pretty form */
    out_node_type(p, x);
    out(p, " -> ");
    out_node_type(p, i);
  } else if (n->op == TPU_OP_CONVERT || n->op == TPU_OP_BITCAST_CONVERT ||
             n->op == TPU_OP_IS_FINITE) {
    out(p, "(");
    out_node_type(p, x);
    out(p, ") -> ");
    out_node_type(p, i);
  } else {
    out_node_type(p, i);
  }
  out(p, "\n");
}

/* "%v = op %a, %b, ... : (types...) -> type" with an attribute suffix after the operands. */
static void out_operands_and_fn_type(printer_t *p, int i, int first, const char *attrs) {
  const tpu_node_t *n = N(i);
  for (int k = first; k < n->num_operands; k++) {
    out(p, "%s%s", k > first ? ", " : "", ref(p, n->operands[k]));
  }
  out(p, "%s : (", attrs);
  for (int k = 0; k < n->num_operands; k++) {
    if (k) out(p, ", ");
    out_node_type(p, n->operands[k]);
  }
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_compare(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  tpu_dtype_t dt = N(n->operands[0])->dtype;
  out(p, "    %s = stablehlo.compare %s, %s, %s, %s : (", ref(p, i),
      tpu_ir_compare_dir_name(n->attrs.compare.direction), ref(p, n->operands[0]),
      ref(p, n->operands[1]), compare_type(dt));
  out_node_type(p, n->operands[0]);
  out(p, ", ");
  out_node_type(p, n->operands[1]);
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_select(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  out(p, "    %s = stablehlo.select %s, %s, %s : ", ref(p, i), ref(p, n->operands[0]),
      ref(p, n->operands[1]), ref(p, n->operands[2]));
  out_node_type(p, n->operands[0]);
  out(p, ", ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_constant(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  out(p, "    %s = stablehlo.constant dense<", ref(p, i));
  if (tpu_dtype_is_float(n->dtype)) {
    out_float_literal(p, n->dtype, n->attrs.constant.value);
  } else {
    out_int_literal(p, n->dtype, n->attrs.constant.ivalue);
  }
  out(p, "> : ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_shape_op(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_attrs_t *a = &n->attrs;
  int r = n->num_operands > 0 ? N(n->operands[0])->shape.rank : 0;
  out(p, "    %s = %s ", ref(p, i), tpu_op_printed_name(n->op));
  switch (n->op) {
    case TPU_OP_BROADCAST_IN_DIM:
      out(p, "%s, dims = ", ref(p, n->operands[0]));
      out_list(p, a->broadcast.dims, r);
      break;
    case TPU_OP_RESHAPE: out(p, "%s", ref(p, n->operands[0])); break;
    case TPU_OP_TRANSPOSE:
      out(p, "%s, dims = ", ref(p, n->operands[0]));
      out_list(p, a->transpose.perm, r);
      break;
    case TPU_OP_SLICE:
      out(p, "%s [", ref(p, n->operands[0]));
      for (int d = 0; d < r; d++) {
        out(p, "%s%lld:%lld", d ? ", " : "", (long long)a->slice.start[d],
            (long long)a->slice.limit[d]);
        if (a->slice.stride[d] != 1) out(p, ":%lld", (long long)a->slice.stride[d]);
      }
      out(p, "]");
      break;
    case TPU_OP_PAD:
      out(p, "%s, %s, low = ", ref(p, n->operands[0]), ref(p, n->operands[1]));
      out_list(p, a->pad.lo, r);
      out(p, ", high = ");
      out_list(p, a->pad.hi, r);
      out(p, ", interior = ");
      out_list(p, a->pad.interior, r);
      break;
    default: break;
  }
  out(p, " : (");
  for (int k = 0; k < n->num_operands; k++) {
    if (k) out(p, ", ");
    out_node_type(p, n->operands[k]);
  }
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_variadic(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  char attrs[256] = "";
  if (n->op == TPU_OP_CONCATENATE) {
    snprintf(attrs, sizeof(attrs), ", dim = %d", n->attrs.concat.dim);
  } else if (n->op == TPU_OP_DYNAMIC_SLICE) {
    const int64_t *s = n->attrs.dynamic_slice.sizes;
    size_t len = (size_t)snprintf(attrs, sizeof(attrs), ", sizes = [");
    for (int d = 0; d < n->shape.rank && len < sizeof(attrs); d++) {
      len += (size_t)snprintf(attrs + len, sizeof(attrs) - len, "%s%lld", d ? ", " : "",
                              (long long)s[d]);
    }
    if (len < sizeof(attrs)) snprintf(attrs + len, sizeof(attrs) - len, "]");
  }
  out(p, "    %s = %s ", ref(p, i), tpu_op_printed_name(n->op));
  out_operands_and_fn_type(p, i, 0, attrs);
}

static void print_clamp(printer_t *p, int i) {
  out(p, "    %s = stablehlo.clamp ", ref(p, i));
  out_operands_and_fn_type(p, i, 0, "");
}

static void print_reverse(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  out(p, "    %s = stablehlo.reverse %s, dims = ", ref(p, i), ref(p, n->operands[0]));
  out_bool_dims(p, n->attrs.reverse.dims, n->shape.rank);
  out(p, " : ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_iota(printer_t *p, int i) {
  out(p, "    %s = stablehlo.iota dim = %d : ", ref(p, i), N(i)->attrs.iota.dim);
  out_node_type(p, i);
  out(p, "\n");
}

static const char *emit_iota_i64(printer_t *p, char name[REF_CAP], const tpu_shape_t *shape,
                                 int dim) {
  new_tmp(p, name);
  out(p, "    %s = stablehlo.iota dim = %d : ", name, dim);
  out_type(p, TPU_I64, shape);
  out(p, "\n");
  return name;
}

static void print_reduce(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_node_t *x = N(n->operands[0]);
  tpu_reduce_kind_t kind = n->attrs.reduce.kind;
  char init[REF_CAP];
  if (kind != TPU_REDUCE_ARGMAX && kind != TPU_REDUCE_ARGMIN) {
    emit_identity(p, init, kind, x->dtype);
    out(p, "    %s = stablehlo.reduce(%s init: %s) applies %s across dimensions = ", ref(p, i),
        ref(p, n->operands[0]), init, combiner(kind));
    out_bool_dims(p, n->attrs.reduce.dims, x->shape.rank);
    out(p, " : (");
    out_type(p, x->dtype, &x->shape);
    out(p, ", ");
    out_scalar_type(p, x->dtype);
    out(p, ") -> ");
    out_node_type(p, i);
    out(p, "\n");
    return;
  }
  /* ARGMAX/ARGMIN: reduce (value, index) pairs; keep the better value, the lower index on
   * ties. The node's value is the index result, %t#1. */
  int dim = 0;
  while (dim < x->shape.rank && !n->attrs.reduce.dims[dim]) dim++;
  char iota[REF_CAP], init_i[REF_CAP], res[REF_CAP];
  char av[REF_CAP], ai[REF_CAP], bv[REF_CAP], bi[REF_CAP];
  emit_iota_i64(p, iota, &x->shape, dim);
  emit_identity(p, init, kind, x->dtype);
  tpu_shape_t scalar = {0, {0}};
  emit_splat(p, init_i, TPU_I64, &scalar, 0.0, 0);
  new_tmp(p, res);
  tpu_shape_t vshape = n->shape;
  out(p, "    %s:2 = stablehlo.reduce(%s init: %s), (%s init: %s) across dimensions = [%d] : (",
      res, ref(p, n->operands[0]), init, iota, init_i, dim);
  out_type(p, x->dtype, &x->shape);
  out(p, ", ");
  out_type(p, TPU_I64, &x->shape);
  out(p, ", ");
  out_scalar_type(p, x->dtype);
  out(p, ", tensor<i64>) -> (");
  out_type(p, x->dtype, &vshape);
  out(p, ", ");
  out_type(p, TPU_I64, &vshape);
  out(p, ")\n");
  new_tmp(p, av), new_tmp(p, ai), new_tmp(p, bv), new_tmp(p, bi);
  const char *dt = tpu_dtype_name(x->dtype);
  out(p, "     reducer(%s: tensor<%s>, %s: tensor<%s>) (%s: tensor<i64>, %s: tensor<i64>) {\n",
      av, dt, bv, dt, ai, bi);
  const char *ind = "      ";
  char better[REF_CAP], eq[REF_CAP], lt[REF_CAP], tie[REF_CAP], pick[REF_CAP];
  char sv[REF_CAP], si[REF_CAP];
  emit_order(p, better, kind == TPU_REDUCE_ARGMAX ? "GT" : "LT", true, av, bv, x->dtype, ind);
  if (tpu_dtype_is_float(x->dtype)) { /* equal, or both NaN */
    char e1[REF_CAP], an[REF_CAP], bn[REF_CAP], both[REF_CAP];
    emit_scalar_compare(p, e1, "EQ", av, bv, x->dtype, ind);
    emit_scalar_compare(p, an, "NE", av, av, x->dtype, ind);
    emit_scalar_compare(p, bn, "NE", bv, bv, x->dtype, ind);
    emit_scalar_logic(p, both, "and", an, bn, ind);
    emit_scalar_logic(p, eq, "or", e1, both, ind);
  } else {
    emit_scalar_compare(p, eq, "EQ", av, bv, x->dtype, ind);
  }
  emit_scalar_compare(p, lt, "LT", ai, bi, TPU_I64, ind);
  emit_scalar_logic(p, tie, "and", eq, lt, ind);
  emit_scalar_logic(p, pick, "or", better, tie, ind);
  new_tmp(p, sv);
  out(p, "%s%s = stablehlo.select %s, %s, %s : tensor<i1>, tensor<%s>\n", ind, sv, pick, av,
      bv, dt);
  new_tmp(p, si);
  out(p, "%s%s = stablehlo.select %s, %s, %s : tensor<i1>, tensor<i64>\n", ind, si, pick, ai,
      bi);
  out(p, "%sstablehlo.return %s, %s : tensor<%s>, tensor<i64>\n", ind, sv, si, dt);
  out(p, "    }\n");
  snprintf(p->refs[i], REF_CAP, "%.20s#1", res);
}

/* reduce_window with a two-argument combiner region; used by REDUCE_WINDOW and SCAN. */
static void emit_reduce_window(printer_t *p, int i, tpu_reduce_kind_t kind, const int64_t *window,
                               const int64_t *stride, const int64_t *dilation,
                               const int64_t *pad_lo, const int64_t *pad_hi) {
  const tpu_node_t *n = N(i);
  const tpu_node_t *x = N(n->operands[0]);
  int r = x->shape.rank;
  char init[REF_CAP], a[REF_CAP], b[REF_CAP], c[REF_CAP];
  emit_identity(p, init, kind, x->dtype);
  int64_t ones[TPU_MAX_RANK];
  for (int d = 0; d < TPU_MAX_RANK; d++) ones[d] = 1;
  out(p, "    %s = \"stablehlo.reduce_window\"(%s, %s) <{base_dilations = ", ref(p, i),
      ref(p, n->operands[0]), init);
  out_array(p, ones, r);
  out(p, ", padding = dense<");
  if (r == 0) {
    out(p, "> : tensor<0x2xi64>");
  } else {
    out(p, "[");
    for (int d = 0; d < r; d++) {
      out(p, "%s[%lld, %lld]", d ? ", " : "", (long long)pad_lo[d], (long long)pad_hi[d]);
    }
    out(p, "]> : tensor<%dx2xi64>", r);
  }
  out(p, ", window_dilations = ");
  out_array(p, dilation, r);
  out(p, ", window_dimensions = ");
  out_array(p, window, r);
  out(p, ", window_strides = ");
  out_array(p, stride, r);
  new_tmp(p, a), new_tmp(p, b), new_tmp(p, c);
  const char *dt = tpu_dtype_name(x->dtype);
  out(p, "}> ({\n    ^bb0(%s: tensor<%s>, %s: tensor<%s>):\n", a, dt, b, dt);
  out(p, "      %s = %s %s, %s : tensor<%s>\n", c, combiner(kind), a, b, dt);
  out(p, "      stablehlo.return %s : tensor<%s>\n    }) : (", c, dt);
  out_type(p, x->dtype, &x->shape);
  out(p, ", ");
  out_scalar_type(p, x->dtype);
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_reduce_window(printer_t *p, int i) {
  const tpu_reduce_window_attrs_t *a = &N(i)->attrs.reduce_window;
  emit_reduce_window(p, i, a->kind, a->window, a->stride, a->dilation, a->pad_lo, a->pad_hi);
}

static void print_scan(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_shape_t *s = &N(n->operands[0])->shape;
  int64_t window[TPU_MAX_RANK], ones[TPU_MAX_RANK], lo[TPU_MAX_RANK], zeros[TPU_MAX_RANK];
  for (int d = 0; d < TPU_MAX_RANK; d++) window[d] = ones[d] = 1, lo[d] = zeros[d] = 0;
  int dim = n->attrs.scan.dim;
  int64_t size = s->dims[dim];
  window[dim] = size > 0 ? size : 1;
  lo[dim] = size > 0 ? size - 1 : 0;
  emit_reduce_window(p, i, n->attrs.scan.kind, window, ones, ones, lo, zeros);
}

static void print_dot_general(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_dot_attrs_t *a = &n->attrs.dot;
  out(p, "    %s = stablehlo.dot_general %s, %s, ", ref(p, i), ref(p, n->operands[0]),
      ref(p, n->operands[1]));
  if (a->num_batch > 0) {
    out(p, "batching_dims = ");
    out_list(p, a->lhs_batch, a->num_batch);
    out(p, " x ");
    out_list(p, a->rhs_batch, a->num_batch);
    out(p, ", ");
  }
  out(p, "contracting_dims = ");
  out_list(p, a->lhs_contract, a->num_contract);
  out(p, " x ");
  out_list(p, a->rhs_contract, a->num_contract);
  const char *prec = tpu_ir_precision_name(a->precision);
  out(p, ", precision = [%s, %s] : (", prec, prec);
  out_node_type(p, n->operands[0]);
  out(p, ", ");
  out_node_type(p, n->operands[1]);
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

/* [b, 0, 1, f] style dimension labels. */
static void out_conv_labels(printer_t *p, int rank, int64_t first, char first_label,
                            int64_t second, char second_label, const int64_t *spatial, int ns) {
  out(p, "[");
  for (int d = 0; d < rank; d++) {
    if (d) out(p, ", ");
    if (d == first) {
      out(p, "%c", first_label);
    } else if (d == second) {
      out(p, "%c", second_label);
    } else {
      for (int s = 0; s < ns; s++) {
        if (spatial[s] == d) out(p, "%d", s);
      }
    }
  }
  out(p, "]");
}

static void print_convolution(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_conv_attrs_t *a = &n->attrs.conv;
  int ns = a->num_spatial, rank = ns + 2;
  out(p, "    %s = stablehlo.convolution(%s, %s) dim_numbers = ", ref(p, i),
      ref(p, n->operands[0]), ref(p, n->operands[1]));
  out_conv_labels(p, rank, a->in_batch, 'b', a->in_feature, 'f', a->in_spatial, ns);
  out(p, "x");
  out_conv_labels(p, rank, a->k_out_feature, 'o', a->k_in_feature, 'i', a->k_spatial, ns);
  out(p, "->");
  out_conv_labels(p, rank, a->out_batch, 'b', a->out_feature, 'f', a->out_spatial, ns);
  out(p, ", window = {stride = ");
  out_list(p, a->stride, ns);
  out(p, ", pad = [");
  for (int s = 0; s < ns; s++) {
    out(p, "%s[%lld, %lld]", s ? ", " : "", (long long)a->pad_lo[s], (long long)a->pad_hi[s]);
  }
  out(p, "], lhs_dilate = ");
  out_list(p, a->lhs_dilation, ns);
  out(p, ", rhs_dilate = ");
  out_list(p, a->rhs_dilation, ns);
  const char *prec = tpu_ir_precision_name(a->precision);
  out(p, "} {batch_group_count = %lld : i64, feature_group_count = %lld : i64, "
      "precision_config = [#stablehlo<precision %s>, #stablehlo<precision %s>]} : (",
      (long long)a->batch_group_count, (long long)a->feature_group_count, prec, prec);
  out_node_type(p, n->operands[0]);
  out(p, ", ");
  out_node_type(p, n->operands[1]);
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

/* "name = [..], " inside #stablehlo.gather/scatter; empty lists are omitted. */
static void out_dims_field(printer_t *p, const char *name, const int64_t *v, int n) {
  if (n <= 0) return;
  out(p, "%s = ", name);
  out_list(p, v, n);
  out(p, ", ");
}

static void print_gather(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_gather_attrs_t *a = &n->attrs.gather;
  out(p, "    %s = \"stablehlo.gather\"(%s, %s) <{dimension_numbers = #stablehlo.gather<",
      ref(p, i), ref(p, n->operands[0]), ref(p, n->operands[1]));
  out_dims_field(p, "offset_dims", a->offset_dims, a->num_offset_dims);
  out_dims_field(p, "collapsed_slice_dims", a->collapsed_slice_dims, a->num_collapsed);
  out_dims_field(p, "start_index_map", a->start_index_map, a->num_start_index_map);
  out(p, "index_vector_dim = %lld>, indices_are_sorted = false, slice_sizes = ",
      (long long)a->index_vector_dim);
  out_array(p, a->slice_sizes, N(n->operands[0])->shape.rank);
  out(p, "}> : (");
  out_node_type(p, n->operands[0]);
  out(p, ", ");
  out_node_type(p, n->operands[1]);
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_scatter(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_scatter_attrs_t *a = &n->attrs.scatter;
  out(p, "    %s = \"stablehlo.scatter\"(%s, %s, %s) <{indices_are_sorted = false, "
      "scatter_dimension_numbers = #stablehlo.scatter<", ref(p, i), ref(p, n->operands[0]),
      ref(p, n->operands[1]), ref(p, n->operands[2]));
  out_dims_field(p, "update_window_dims", a->update_window_dims, a->num_update_window_dims);
  out_dims_field(p, "inserted_window_dims", a->inserted_window_dims,
                 a->num_inserted_window_dims);
  out_dims_field(p, "scatter_dims_to_operand_dims", a->scatter_dims_to_operand_dims,
                 a->num_scatter_dims);
  out(p, "index_vector_dim = %lld>, unique_indices = false}> ({\n",
      (long long)a->index_vector_dim);
  char x[REF_CAP], u[REF_CAP], s[REF_CAP];
  new_tmp(p, x), new_tmp(p, u);
  const char *dt = tpu_dtype_name(n->dtype);
  out(p, "    ^bb0(%s: tensor<%s>, %s: tensor<%s>):\n", x, dt, u, dt);
  static const char *const combiner[] = {
      [TPU_SCATTER_ADD] = "add", [TPU_SCATTER_MUL] = "multiply", [TPU_SCATTER_MAX] = "maximum",
      [TPU_SCATTER_MIN] = "minimum"};
  if (a->kind != TPU_SCATTER_REPLACE) {
    new_tmp(p, s);
    out(p, "      %s = stablehlo.%s %s, %s : tensor<%s>\n", s, combiner[a->kind], x, u, dt);
    out(p, "      stablehlo.return %s : tensor<%s>\n", s, dt);
  } else {
    out(p, "      stablehlo.return %s : tensor<%s>\n", u, dt);
  }
  out(p, "    }) : (");
  for (int k = 0; k < 3; k++) {
    if (k) out(p, ", ");
    out_node_type(p, n->operands[k]);
  }
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_sort(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_node_t *x = N(n->operands[0]);
  const tpu_sort_attrs_t *a = &n->attrs.sort;
  bool arg = n->op == TPU_OP_ARGSORT;
  char iota[REF_CAP], res[REF_CAP], ca[REF_CAP], cb[REF_CAP], ia[REF_CAP], ib[REF_CAP];
  char r[REF_CAP];
  if (arg) {
    emit_iota_i64(p, iota, &x->shape, a->dim);
    new_tmp(p, res);
    out(p, "    %s:2 = \"stablehlo.sort\"(%s, %s)", res, ref(p, n->operands[0]), iota);
  } else {
    out(p, "    %s = \"stablehlo.sort\"(%s)", ref(p, i), ref(p, n->operands[0]));
  }
  const char *dt = tpu_dtype_name(x->dtype);
  out(p, " <{dimension = %d : i64, is_stable = %s}> ({\n", a->dim, a->stable ? "true" : "false");
  new_tmp(p, ca), new_tmp(p, cb);
  out(p, "    ^bb0(%s: tensor<%s>, %s: tensor<%s>", ca, dt, cb, dt);
  if (arg) {
    new_tmp(p, ia), new_tmp(p, ib);
    out(p, ", %s: tensor<i64>, %s: tensor<i64>", ia, ib);
  }
  out(p, "):\n");
  emit_order(p, r, a->descending ? "GT" : "LT", a->descending, ca, cb, x->dtype, "      ");
  out(p, "      stablehlo.return %s : tensor<i1>\n    }) : (", r);
  out_type(p, x->dtype, &x->shape);
  if (arg) {
    out(p, ", ");
    out_type(p, TPU_I64, &x->shape);
    out(p, ") -> (");
    out_type(p, x->dtype, &x->shape);
    out(p, ", ");
    out_type(p, TPU_I64, &x->shape);
    out(p, ")\n");
    snprintf(p->refs[i], REF_CAP, "%.20s#1", res);
  } else {
    out(p, ") -> ");
    out_type(p, x->dtype, &x->shape);
    out(p, "\n");
  }
}

/* ---- RNG ----------------------------------------------------------------------------- */

/* %t = <op> %a[, %b] : tensor<..xelem> with raw element names. */
static const char *emit_raw(printer_t *p, char name[REF_CAP], const char *op, const char *a,
                            const char *b, const char *elem, const tpu_shape_t *s) {
  new_tmp(p, name);
  out(p, "    %s = stablehlo.%s %s", name, op, a);
  if (b) out(p, ", %s", b);
  out(p, " : ");
  out_elem_type(p, elem, s);
  out(p, "\n");
  return name;
}

static const char *emit_raw_splat(printer_t *p, char name[REF_CAP], const char *literal,
                                  const char *elem, const tpu_shape_t *s) {
  new_tmp(p, name);
  out(p, "    %s = stablehlo.constant dense<%s> : ", name, literal);
  out_elem_type(p, elem, s);
  out(p, "\n");
  return name;
}

static const char *emit_raw_cast(printer_t *p, char name[REF_CAP], const char *op,
                                 const char *a, const char *from, const tpu_shape_t *fs,
                                 const char *to, const tpu_shape_t *ts) {
  new_tmp(p, name);
  out(p, "    %s = stablehlo.%s %s : (", name, op, a);
  out_elem_type(p, from, fs);
  out(p, ") -> ");
  out_elem_type(p, to, ts);
  out(p, "\n");
  return name;
}

/* ui32 bits -> f32 uniform in [0, 1): (bits >> 9 | 0x3f800000) as f32, minus 1. */
static const char *emit_bits_to_unit(printer_t *p, char name[REF_CAP], const char *bits,
                                     const tpu_shape_t *s) {
  char nine[REF_CAP], sh[REF_CAP], exp_bits[REF_CAP], orr[REF_CAP], f[REF_CAP], one[REF_CAP];
  emit_raw_splat(p, nine, "9", "ui32", s);
  emit_raw(p, sh, "shift_right_logical", bits, nine, "ui32", s);
  emit_raw_splat(p, exp_bits, "1065353216", "ui32", s);
  emit_raw(p, orr, "or", sh, exp_bits, "ui32", s);
  emit_raw_cast(p, f, "bitcast_convert", orr, "ui32", s, "f32", s);
  emit_raw_splat(p, one, "1.000000e+00", "f32", s);
  return emit_raw(p, name, "subtract", f, one, "f32", s);
}

static void print_cholesky(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_node_t *a = N(n->operands[0]);
  out(p, "    %s = \"stablehlo.cholesky\"(%s) <{lower = %s}> : (", ref(p, i),
      ref(p, n->operands[0]), n->attrs.cholesky.lower ? "true" : "false");
  out_type(p, a->dtype, &a->shape);
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_triangular_solve(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_node_t *a = N(n->operands[0]), *b = N(n->operands[1]);
  const tpu_triangular_solve_attrs_t *t = &n->attrs.triangular_solve;
  out(p, "    %s = \"stablehlo.triangular_solve\"(%s, %s) <{left_side = %s, lower = %s, "
         "transpose_a = #stablehlo<transpose %s>, unit_diagonal = %s}> : (",
      ref(p, i), ref(p, n->operands[0]), ref(p, n->operands[1]), t->left_side ? "true" : "false",
      t->lower ? "true" : "false", t->transpose_a ? "TRANSPOSE" : "NO_TRANSPOSE",
      t->unit_diagonal ? "true" : "false");
  out_type(p, a->dtype, &a->shape);
  out(p, ", ");
  out_type(p, b->dtype, &b->shape);
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

/* LU, QR and their parts have no StableHLO op (XLA expands them per backend): a custom call
 * named after the IR op, which parses and verifies but needs that target to compile. */
static void print_linalg_custom_call(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  out(p, "    %s = \"stablehlo.custom_call\"(", ref(p, i));
  for (int k = 0; k < n->num_operands; k++) out(p, "%s%s", k ? ", " : "", ref(p, n->operands[k]));
  out(p, ") <{call_target_name = \"%s\"", tpu_op_printed_name(n->op));
  if (n->op == TPU_OP_LU_PIVOTS_TO_PERMUTATION) {
    out(p, ", backend_config = \"permutation_size=%lld\"",
        (long long)n->attrs.lu_permutation.size);
  }
  out(p, "}> : (");
  for (int k = 0; k < n->num_operands; k++) {
    const tpu_node_t *a = N(n->operands[k]);
    if (k) out(p, ", ");
    out_type(p, a->dtype, &a->shape);
  }
  out(p, ") -> ");
  out_node_type(p, i);
  out(p, "\n");
}

static void print_rng(printer_t *p, int i) {
  const tpu_node_t *n = N(i);
  const tpu_shape_t *s = &n->shape;
  tpu_shape_t scalar = {0, {0}}, vec1 = {1, {1}};
  char seed[REF_CAP], off[REF_CAP], seed1[REF_CAP], off1[REF_CAP], state[REF_CAP];
  char gen[REF_CAP], bits[REF_CAP];
  emit_raw_cast(p, seed, "bitcast_convert", ref(p, n->operands[0]), "i64", &scalar, "ui64",
                &scalar);
  emit_raw_cast(p, off, "bitcast_convert", ref(p, n->operands[1]), "i64", &scalar, "ui64",
                &scalar);
  emit_raw_cast(p, seed1, "reshape", seed, "ui64", &scalar, "ui64", &vec1);
  emit_raw_cast(p, off1, "reshape", off, "ui64", &scalar, "ui64", &vec1);
  new_tmp(p, state);
  out(p, "    %s = stablehlo.concatenate %s, %s, dim = 0 : (tensor<1xui64>, tensor<1xui64>) "
      "-> tensor<2xui64>\n", state, seed1, off1);
  /* NORMAL draws two uniforms per element (Box-Muller): bits of shape [2, ...]. */
  bool normal = n->attrs.rng.dist == TPU_RNG_NORMAL;
  int brank = s->rank + (normal ? 1 : 0);
  int64_t bdims[TPU_MAX_RANK + 1];
  for (int d = 0; d < s->rank; d++) bdims[d + (normal ? 1 : 0)] = s->dims[d];
  if (normal) bdims[0] = 2;
  new_tmp(p, gen);
  out(p, "    %s:2 = stablehlo.rng_bit_generator %s, algorithm = PHILOX : (tensor<2xui64>) -> "
      "(tensor<2xui64>, tensor<", gen, state);
  for (int d = 0; d < brank; d++) out(p, "%lldx", (long long)bdims[d]);
  out(p, "ui32>)\n");
  snprintf(bits, sizeof(bits), "%.20s#1", gen);
  char result[REF_CAP];
  if (n->attrs.rng.dist == TPU_RNG_BITS) {
    out(p, "    %s = stablehlo.convert %s : (", ref(p, i), bits);
    out_elem_type(p, "ui32", s);
    out(p, ") -> ");
    out_node_type(p, i);
    out(p, "\n");
    return;
  }
  if (!normal) {
    emit_bits_to_unit(p, result, bits, s);
  } else {
    /* The [2, ...] bits as two [...] halves: reshape to [2, numel], slice rows, reshape. */
    int64_t numel = 1;
    for (int d = 0; d < s->rank; d++) numel *= s->dims[d]; /* verified: no overflow */
    tpu_shape_t flat2 = {2, {2, numel}}, flat1 = {2, {1, numel}};
    char bits2[REF_CAP], r0[REF_CAP], r1[REF_CAP], h0[REF_CAP], h1[REF_CAP];
    char u0[REF_CAP], u1[REF_CAP];
    new_tmp(p, bits2);
    out(p, "    %s = stablehlo.reshape %s : (tensor<", bits2, bits);
    for (int d = 0; d < brank; d++) out(p, "%lldx", (long long)bdims[d]);
    out(p, "ui32>) -> ");
    out_elem_type(p, "ui32", &flat2);
    out(p, "\n");
    new_tmp(p, r0);
    out(p, "    %s = stablehlo.slice %s [0:1, 0:%lld] : (", r0, bits2, (long long)numel);
    out_elem_type(p, "ui32", &flat2);
    out(p, ") -> ");
    out_elem_type(p, "ui32", &flat1);
    out(p, "\n");
    new_tmp(p, r1);
    out(p, "    %s = stablehlo.slice %s [1:2, 0:%lld] : (", r1, bits2, (long long)numel);
    out_elem_type(p, "ui32", &flat2);
    out(p, ") -> ");
    out_elem_type(p, "ui32", &flat1);
    out(p, "\n");
    emit_raw_cast(p, h0, "reshape", r0, "ui32", &flat1, "ui32", s);
    emit_raw_cast(p, h1, "reshape", r1, "ui32", &flat1, "ui32", s);
    emit_bits_to_unit(p, u0, h0, s);
    emit_bits_to_unit(p, u1, h1, s);
    /* z = sqrt(-2 log(1 - u0)) * cos(2 pi u1); 1 - u0 is in (0, 1]. */
    char one[REF_CAP], w[REF_CAP], lg[REF_CAP], m2[REF_CAP], t[REF_CAP], rad[REF_CAP];
    char tp[REF_CAP], th[REF_CAP], cs[REF_CAP];
    emit_raw_splat(p, one, "1.000000e+00", "f32", s);
    emit_raw(p, w, "subtract", one, u0, "f32", s);
    emit_raw(p, lg, "log", w, NULL, "f32", s);
    emit_raw_splat(p, m2, "-2.000000e+00", "f32", s);
    emit_raw(p, t, "multiply", m2, lg, "f32", s);
    emit_raw(p, rad, "sqrt", t, NULL, "f32", s);
    emit_raw_splat(p, tp, "6.28318548e+00", "f32", s);
    emit_raw(p, th, "multiply", tp, u1, "f32", s);
    emit_raw(p, cs, "cosine", th, NULL, "f32", s);
    emit_raw(p, result, "multiply", rad, cs, "f32", s);
  }
  if (n->dtype == TPU_F32) {
    snprintf(p->refs[i], REF_CAP, "%s", result);
  } else {
    out(p, "    %s = stablehlo.convert %s : (", ref(p, i), result);
    out_elem_type(p, "f32", s);
    out(p, ") -> ");
    out_node_type(p, i);
    out(p, "\n");
  }
}

#undef N

/* ---- module ---------------------------------------------------------------------------- */

static void print_node(printer_t *p, int i) {
  const tpu_node_t *n = &p->g->nodes[i];
  switch (n->op) {
    case TPU_OP_PARAMETER: return;
    case TPU_OP_CONSTANT: print_constant(p, i); return;
    case TPU_OP_IOTA: print_iota(p, i); return;
    case TPU_OP_RNG: print_rng(p, i); return;
    case TPU_OP_COMPARE: print_compare(p, i); return;
    case TPU_OP_SELECT: print_select(p, i); return;
    case TPU_OP_CLAMP: print_clamp(p, i); return;
    case TPU_OP_BROADCAST_IN_DIM:
    case TPU_OP_RESHAPE:
    case TPU_OP_TRANSPOSE:
    case TPU_OP_SLICE:
    case TPU_OP_PAD: print_shape_op(p, i); return;
    case TPU_OP_DYNAMIC_SLICE:
    case TPU_OP_DYNAMIC_UPDATE_SLICE:
    case TPU_OP_CONCATENATE: print_variadic(p, i); return;
    case TPU_OP_REVERSE: print_reverse(p, i); return;
    case TPU_OP_REDUCE: print_reduce(p, i); return;
    case TPU_OP_REDUCE_WINDOW: print_reduce_window(p, i); return;
    case TPU_OP_SCAN: print_scan(p, i); return;
    case TPU_OP_DOT_GENERAL: print_dot_general(p, i); return;
    case TPU_OP_CONVOLUTION: print_convolution(p, i); return;
    case TPU_OP_GATHER: print_gather(p, i); return;
    case TPU_OP_SCATTER: print_scatter(p, i); return;
    case TPU_OP_SORT:
    case TPU_OP_ARGSORT: print_sort(p, i); return;
    case TPU_OP_CHOLESKY: print_cholesky(p, i); return;
    case TPU_OP_TRIANGULAR_SOLVE: print_triangular_solve(p, i); return;
    case TPU_OP_LU:
    case TPU_OP_LU_PIVOTS:
    case TPU_OP_LU_PIVOTS_TO_PERMUTATION:
    case TPU_OP_GEQRF:
    case TPU_OP_HOUSEHOLDER_PRODUCT:
    case TPU_OP_EIGH:
    case TPU_OP_SVD: print_linalg_custom_call(p, i); return;
    default: print_elementwise(p, i); return; /* UNARY and two-operand BINARY families */
  }
}

/* A symbol name: bare if it is an MLIR bare identifier, else a quoted string. */
static void out_symbol(printer_t *p, const char *name) {
  bool bare = (name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z') ||
              name[0] == '_';
  for (const char *c = name; *c && bare; c++) {
    bare = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
           *c == '_' || *c == '$' || *c == '.';
  }
  if (bare) {
    out(p, "@%s", name);
    return;
  }
  out(p, "@\"");
  for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
    if (*c == '"' || *c == '\\' || *c < 0x20 || *c >= 0x7f) {
      out(p, "\\%02X", *c);
    } else {
      out(p, "%c", *c);
    }
  }
  out(p, "\"");
}

tpu_status_t tpu_graph_print_stablehlo(const tpu_graph_t *g, const char *name,
                                       tpu_allocator_t host, char **out_text,
                                       size_t *out_len) {
  if (out_text) *out_text = NULL;
  if (out_len) *out_len = 0;
  if (!out_text) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "print_stablehlo: out_text is NULL");
  }
  if (!host.alloc || !host.free) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "print_stablehlo: allocator has no alloc/free");
  }
  tpu_status_t st = tpu_graph_verify(g);
  if (st != TPU_OK) return tpu_status_set(st, "print_stablehlo: %s", tpu_status_message());
  printer_t p;
  memset(&p, 0, sizeof(p));
  p.g = g;
  p.host = host;
  int *param_node = NULL;
  st = tpu_allocator_calloc(host, (size_t)g->num_nodes + 1, REF_CAP, "print_stablehlo",
                            (void **)&p.refs);
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)g->num_params + 1, sizeof(int), "print_stablehlo",
                              (void **)&param_node);
  }
  if (st != TPU_OK) {
    tpu_allocator_free(host, p.refs);
    return st;
  }
  for (int i = 0; i < g->num_nodes; i++) {
    const tpu_node_t *n = &g->nodes[i];
    if (n->op == TPU_OP_PARAMETER) {
      snprintf(p.refs[i], REF_CAP, "%%arg%d", n->attrs.param.index);
      param_node[n->attrs.param.index] = i;
    } else {
      snprintf(p.refs[i], REF_CAP, "%%v%d", i);
    }
  }
  out(&p, "module ");
  out_symbol(&p, name && name[0] ? name : "graph");
  out(&p, " {\n  func.func public @main(");
  for (int k = 0; k < g->num_params; k++) {
    out(&p, "%s%%arg%d: ", k ? ", " : "", k);
    out_node_type(&p, param_node[k]);
  }
  out(&p, ") -> (");
  for (int k = 0; k < g->num_outputs; k++) {
    if (k) out(&p, ", ");
    out_node_type(&p, g->outputs[k].value);
  }
  out(&p, ") {\n");
  for (int i = 0; i < g->num_nodes && !p.oom; i++) print_node(&p, i);
  out(&p, "    return");
  for (int k = 0; k < g->num_outputs; k++) {
    out(&p, "%s%s", k ? ", " : " ", p.refs[g->outputs[k].value]);
  }
  for (int k = 0; k < g->num_outputs; k++) {
    out(&p, "%s", k ? ", " : " : ");
    out_node_type(&p, g->outputs[k].value);
  }
  out(&p, "\n  }\n}\n");
  tpu_allocator_free(host, p.refs);
  tpu_allocator_free(host, param_node);
  if (p.oom) {
    tpu_allocator_free(host, p.buf);
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY,
                          "print_stablehlo: out of host memory for the module text");
  }
  *out_text = p.buf;
  if (out_len) *out_len = p.len;
  return TPU_OK;
}
