/* cost_model.c: the modelled time of a graph on a TPU generation (see include/tpu/cost.h).
 *
 * Every formula and constant is from shared/reference/tpu-hardware.md ("ref" below):
 *   section 4 [SB-roof]: T_math = FLOPs / F, T_mem = bytes / BW_hbm, T ~ max(T_math, T_mem);
 *   section 4 (derived): MXU padding efficiency = prod d / (ceil(d/t) t), t = 8 for M and
 *     128 or 256 (the MXU size, chip.h mxu_dim) for K and N;
 *   section 2 [TX-tut][J-prec]: f32 matmul passes DEFAULT 1, HIGH 3, HIGHEST 6;
 *     bf16 inputs take one pass ("These settings affect only f32 inputs");
 *   section 3 [XLA-tile]: minor two dims tiled (8,128) of 32-bit words, bf16 packs two
 *     rows per word ((16,128)), int8 four ((32,128)); second-minor of 1-2 -> 2 rows,
 *     3-4 -> 4 rows (compact 2nd-minor format); PRED takes 4 bytes per element;
 *   section 4 [AMB] (derived): ~1.5 us floor per kernel (TPU_COST_KERNEL_OVERHEAD_S).
 * Fusion follows XLA's: elementwise chains, output fusion of a matmul or reduction into its
 * one elementwise reader, and multi-output fusion (an XLA fusion may have several outputs,
 * openxla/xla#17217): an elementwise graph output whose one reader is an elementwise op of
 * its shape is computed by that reader's kernel and written from it, no kernel of its own.
 * Peak FLOP/s and HBM bandwidth come from the chip table (src/vtpu/chip_specs.c), which
 * cites its sources per value.
 */
#include "tpu/cost.h"

#include <math.h>
#include <string.h>

/* ---- sizes ------------------------------------------------------------------------- */

static double round_up(double d, double t) { return ceil(d / t) * t; }

/* Bytes per element in HBM: PRED (bool) takes 4 bytes (ref section 3 [XLA-tile]). */
static double elem_bytes(tpu_dtype_t dt) {
  if (dt == TPU_BOOL) return 4.0;
  return (double)tpu_dtype_size(dt);
}

/* Rows of the second-minor tile: 8 rows of 32-bit words, packed for narrower types
 * (bf16 (16,128), int8 (32,128)) (ref section 3 [XLA-tile][J]). */
static double sublane_tile(tpu_dtype_t dt) {
  double b = elem_bytes(dt);
  return b >= 4.0 ? 8.0 : 8.0 * (4.0 / b);
}

double tpu_cost_padded_bytes(tpu_dtype_t dtype, const tpu_shape_t *shape) {
  double eb = elem_bytes(dtype);
  if (shape->rank == 0) return eb;
  double n = 1.0;
  for (int d = 0; d < shape->rank - 2; d++) n *= (double)shape->dims[d];
  double minor = (double)shape->dims[shape->rank - 1];
  if (minor == 0.0) return 0.0;
  n *= round_up(minor, 128.0); /* lanes (ref section 3) */
  if (shape->rank >= 2) {
    double second = (double)shape->dims[shape->rank - 2];
    /* compact 2nd-minor tiles for 1-2 and 3-4 rows (ref section 3 [XLA-tile]) */
    double t = second <= 2.0 ? 2.0 : second <= 4.0 ? 4.0 : sublane_tile(dtype);
    n *= round_up(second, t);
  }
  double bytes = n * eb;
  return isfinite(bytes) ? bytes : 0.0;
}

static double unpadded_bytes(const tpu_node_t *node) {
  double n = 1.0;
  for (int d = 0; d < node->shape.rank; d++) n *= (double)node->shape.dims[d];
  return n * (double)tpu_dtype_size(node->dtype);
}

static double numel(const tpu_shape_t *s) {
  double n = 1.0;
  for (int d = 0; d < s->rank; d++) n *= (double)s->dims[d];
  return n;
}

int tpu_cost_precision_passes(tpu_dtype_t a, tpu_dtype_t b, tpu_precision_t precision) {
  bool f32 = a == TPU_F32 || a == TPU_F64 || b == TPU_F32 || b == TPU_F64;
  if (!f32) return 1; /* bf16 (and narrower) inputs: one pass (ref section 2) */
  switch (precision) {
    case TPU_PRECISION_HIGH: return 3;     /* bf16_3x (ref section 2 [TX-tut][J-prec]) */
    case TPU_PRECISION_HIGHEST: return 6;  /* 6 passes (ref section 2) */
    default: return 1;                     /* DEFAULT: one bf16 pass */
  }
}

/* ---- node classes ------------------------------------------------------------------- */

/* A kernel root on its own: MXU ops, reductions, indexing, RNG, in-place updates. */
static bool is_heavy(tpu_op_t op) {
  switch (tpu_op_family(op)) {
    case TPU_FAMILY_MXU:
    case TPU_FAMILY_REDUCE:
    case TPU_FAMILY_INDEX:
    case TPU_FAMILY_LINALG:
      return true;
    default:
      return op == TPU_OP_RNG || op == TPU_OP_DYNAMIC_UPDATE_SLICE;
  }
}

static bool is_elementwise(tpu_op_t op) {
  tpu_op_family_t f = tpu_op_family(op);
  return f == TPU_FAMILY_UNARY || f == TPU_FAMILY_BINARY || f == TPU_FAMILY_COMPARE;
}

/* Vector multiply-adds of a linear-algebra node: n^3 / 3 per Cholesky factor, 2 n^3 / 3
 * per LU, n^2 per right-hand side of a triangular solve, 2 n^2 (m - n / 3) per Householder
 * QR of m x n (and as much for its product), about 9 n^3 per symmetric eigendecomposition
 * with vectors, 4 m n^2 + 8 n^3 per thin SVD (LAPACK's counts); on the VPU: unblocked, these
 * kernels have no MXU path. */
static double linalg_work(const tpu_graph_t *g, const tpu_node_t *node) {
  const tpu_node_t *a = tpu_graph_node(g, node->operands[0]);
  int r = a->shape.rank;
  double m = (double)a->shape.dims[r - 2], n = (double)a->shape.dims[r - 1];
  double batches = numel(&a->shape) / (m * n > 0 ? m * n : 1);
  switch (node->op) {
    case TPU_OP_GEQRF:
    case TPU_OP_HOUSEHOLDER_PRODUCT: {
      double k = m < n ? m : n; /* QR of a wide matrix: its first m columns' work, then R's */
      return batches * (2 * k * k * (m - k / 3) + 2 * k * m * (n - k));
    }
    case TPU_OP_CHOLESKY: return batches * n * n * n / 3;
    case TPU_OP_EIGH: return batches * 9 * n * n * n;
    case TPU_OP_SVD: return batches * (4 * m * n * n + 8 * n * n * n); /* LAPACK's, thin U and V */
    case TPU_OP_LU:
    case TPU_OP_LU_PIVOTS: return batches * n * n * n * 2 / 3;
    case TPU_OP_LU_PIVOTS_TO_PERMUTATION: return numel(&node->shape);
    default: return numel(&node->shape) * n; /* TRIANGULAR_SOLVE */
  }
}

typedef struct mxu_work {
  double flops, padded, b, m, k, n;
  int passes;
} mxu_work_t;

/* FLOPs of a dot_general: 2*B*M*N*K; padded: M to 8, K and N to the MXU size
 * (ref section 4, "MXU padding efficiency" and "Matmul [B,D]x[D,F]"). */
static void dot_work(const tpu_graph_t *g, const tpu_node_t *node, double t, mxu_work_t *w) {
  const tpu_node_t *lhs = tpu_graph_node(g, node->operands[0]);
  const tpu_node_t *rhs = tpu_graph_node(g, node->operands[1]);
  const tpu_dot_attrs_t *a = &node->attrs.dot;
  bool lhs_used[TPU_MAX_RANK] = {false}, rhs_used[TPU_MAX_RANK] = {false};
  double b = 1, k = 1, m = 1, n = 1;
  for (int i = 0; i < a->num_batch; i++) {
    b *= (double)lhs->shape.dims[a->lhs_batch[i]];
    lhs_used[a->lhs_batch[i]] = rhs_used[a->rhs_batch[i]] = true;
  }
  for (int i = 0; i < a->num_contract; i++) {
    k *= (double)lhs->shape.dims[a->lhs_contract[i]];
    lhs_used[a->lhs_contract[i]] = rhs_used[a->rhs_contract[i]] = true;
  }
  for (int d = 0; d < lhs->shape.rank; d++) if (!lhs_used[d]) m *= (double)lhs->shape.dims[d];
  for (int d = 0; d < rhs->shape.rank; d++) if (!rhs_used[d]) n *= (double)rhs->shape.dims[d];
  w->passes = tpu_cost_precision_passes(lhs->dtype, rhs->dtype, a->precision);
  w->b = b, w->m = m, w->k = k, w->n = n;
  w->flops = 2.0 * b * m * n * k;
  w->padded = 2.0 * b * round_up(m, 8.0) * round_up(k, t) * round_up(n, t) * w->passes;
}

/* A convolution as the matmul it is: M = output positions x batch, K = input features per
 * group x kernel window, N = output features per group; per group. */
static void conv_work(const tpu_graph_t *g, const tpu_node_t *node, double t, mxu_work_t *w) {
  const tpu_node_t *in = tpu_graph_node(g, node->operands[0]);
  const tpu_node_t *ker = tpu_graph_node(g, node->operands[1]);
  const tpu_conv_attrs_t *a = &node->attrs.conv;
  double groups = (double)(a->feature_group_count > 1 ? a->feature_group_count : 1);
  double window = 1;
  for (int s = 0; s < a->num_spatial; s++) window *= (double)ker->shape.dims[a->k_spatial[s]];
  double cin = (double)ker->shape.dims[a->k_in_feature];
  double cout = (double)ker->shape.dims[a->k_out_feature] / groups;
  double out_positions = numel(&node->shape) / (double)node->shape.dims[a->out_feature];
  w->passes = tpu_cost_precision_passes(in->dtype, ker->dtype, a->precision);
  w->b = groups, w->m = out_positions, w->k = cin * window, w->n = cout;
  w->flops = 2.0 * numel(&node->shape) * cin * window;
  w->padded = 2.0 * groups * round_up(out_positions, 8.0) * round_up(cin, t) * window *
              round_up(cout, t) * w->passes;
}

/* ---- kernels ---------------------------------------------------------------------- */

typedef struct cost_scratch {
  int n;
  int *users;          /* users per node */
  int *first_user;     /* a user of each node (for single-user checks) */
  bool *output;        /* node is a graph output */
  bool *mat;           /* node's value is in HBM (kernel root or parameter) */
  bool *live;          /* node reaches a graph output (dead nodes cost nothing) */
  bool *store;         /* an output its reader's kernel computes and writes (multi-output) */
  int *mark;           /* kernel id that last visited the node */
  double *read;        /* bytes the current kernel reads of a materialized node */
  int *stack;
} cost_scratch_t;

/* Bytes kernel reads of materialized |x| through consumer |c|: a slice or gather reads
 * only what it selects; everything else reads the whole (padded) array. */
static double edge_read(const tpu_node_t *x, const tpu_node_t *c, int operand) {
  double full = tpu_cost_padded_bytes(x->dtype, &x->shape);
  if (operand == 0 && (c->op == TPU_OP_SLICE || c->op == TPU_OP_DYNAMIC_SLICE ||
                       c->op == TPU_OP_GATHER)) {
    double part = tpu_cost_padded_bytes(x->dtype, &c->shape);
    return part < full ? part : full;
  }
  return full;
}

static void add_kernel(const tpu_graph_t *g, const tpu_chip_spec_t *spec, cost_scratch_t *s,
                       int root, tpu_cost_t *out) {
  const double t = (double)spec->mxu_dim;
  double flops = 0, mxu_flops = 0, vpu = 0, bytes = 0, raw = 0;
  int sp = 0;
  s->stack[sp++] = root;
  s->mark[root] = root;
  while (sp > 0) {
    int v = s->stack[--sp];
    const tpu_node_t *node = tpu_graph_node(g, v);
    /* this node's work */
    if (node->op == TPU_OP_DOT_GENERAL || node->op == TPU_OP_CONVOLUTION) {
      mxu_work_t w;
      if (node->op == TPU_OP_DOT_GENERAL) dot_work(g, node, t, &w);
      else conv_work(g, node, t, &w);
      flops += w.flops;
      mxu_flops += w.padded;
      if (w.passes > out->passes) out->passes = w.passes;
      double waste = w.padded - w.flops * w.passes;
      if (waste > out->pad_waste_flops) {
        out->pad_waste_flops = waste;
        out->pad_batch = (int64_t)w.b, out->pad_m = (int64_t)w.m;
        out->pad_k = (int64_t)w.k, out->pad_n = (int64_t)w.n;
      }
    } else if (is_elementwise(node->op)) {
      vpu += numel(&node->shape);
    } else if (tpu_op_family(node->op) == TPU_FAMILY_LINALG) {
      vpu += linalg_work(g, node);
    } else if (tpu_op_family(node->op) == TPU_FAMILY_REDUCE && node->num_operands > 0) {
      const tpu_node_t *x = tpu_graph_node(g, node->operands[0]);
      double per = 1;
      if (node->op == TPU_OP_REDUCE_WINDOW) {
        for (int d = 0; d < x->shape.rank; d++) per *= (double)node->attrs.reduce_window.window[d];
        vpu += numel(&node->shape) * per;
      } else {
        vpu += numel(&x->shape);
      }
    }
    /* its operands: read from HBM if materialized, else fused (walked) */
    for (int i = 0; i < node->num_operands; i++) {
      int u = node->operands[i];
      const tpu_node_t *un = tpu_graph_node(g, u);
      if (s->store[u] && s->mark[u] != root) { /* computed here, and written from here */
        s->mark[u] = root;
        s->stack[sp++] = u;
        bytes += tpu_cost_padded_bytes(un->dtype, &un->shape);
        raw += unpadded_bytes(un);
      } else if (s->store[u]) {
        continue;
      } else if (s->mat[u]) {
        double r = edge_read(un, node, i);
        if (s->mark[u] != root) {
          s->mark[u] = root;
          s->read[u] = 0;
          raw += unpadded_bytes(un);
        }
        if (r > s->read[u]) {
          bytes += r - s->read[u];
          s->read[u] = r;
        }
      } else if (s->mark[u] != root) {
        s->mark[u] = root;
        s->stack[sp++] = u;
      }
    }
  }
  const tpu_node_t *rn = tpu_graph_node(g, root);
  bytes += tpu_cost_padded_bytes(rn->dtype, &rn->shape); /* the kernel's result */
  raw += unpadded_bytes(rn);
  if (rn->op == TPU_OP_PARAMETER) { /* an input returned as an output: a copy reads it too */
    bytes += tpu_cost_padded_bytes(rn->dtype, &rn->shape);
    raw += unpadded_bytes(rn);
  }
  /* T_math = FLOPs / F and T_mem = bytes / BW_hbm; T = max + per-kernel floor
   * (ref section 4 [SB-roof], [AMB]) */
  double t_mxu = mxu_flops / spec->peak_bf16_flops;
  double t_hbm = bytes / spec->hbm_bytes_per_s;
  out->kernels++;
  if (mxu_flops > 0) out->mxu_kernels++;
  if (t_mxu > t_hbm) out->compute_bound_kernels++;
  out->flops += flops;
  out->mxu_flops += mxu_flops;
  out->vpu_flops += vpu;
  out->bytes += bytes;
  out->bytes_unpadded += raw;
  out->mxu_seconds += t_mxu;
  out->hbm_seconds += t_hbm;
  out->overhead_seconds += TPU_COST_KERNEL_OVERHEAD_S;
  out->seconds += (t_mxu > t_hbm ? t_mxu : t_hbm) + TPU_COST_KERNEL_OVERHEAD_S;
}

tpu_status_t tpu_cost_graph(const tpu_graph_t *g, const tpu_chip_spec_t *spec, tpu_cost_t *out) {
  memset(out, 0, sizeof *out);
  if (!g || !spec) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "tpu_cost_graph: NULL argument");
  TPU_RETURN_IF_ERROR(tpu_graph_verify(g));
  int n = tpu_graph_num_nodes(g);
  if (n == 0) return TPU_OK;
  tpu_allocator_t host = tpu_allocator_system();
  cost_scratch_t s = {.n = n};
  void *mem = NULL;
  /* one block: 4 int arrays, 4 bool arrays, 1 double array, each n long */
  size_t per = 4 * sizeof(int) + 4 * sizeof(bool) + sizeof(double), total;
  if (!tpu_size_mul((size_t)n, per, &total) || !tpu_size_add(total, 64, &total)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "tpu_cost_graph: graph too large");
  }
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, total, "tpu_cost_graph", &mem));
  double *dbl = mem;
  s.read = dbl;
  int *ints = (int *)(dbl + n);
  s.users = ints;
  s.first_user = ints + n;
  s.mark = ints + 2 * n;
  s.stack = ints + 3 * n;
  bool *bools = (bool *)(ints + 4 * n);
  s.output = bools;
  s.mat = bools + n;
  s.live = bools + 2 * n;
  s.store = bools + 3 * n;

  /* liveness: operands precede their users, so one backward sweep from the outputs (a
   * fused eager graph holds values that died before the flush; they are never computed) */
  for (int i = 0; i < tpu_graph_num_outputs(g); i++) {
    s.output[tpu_graph_output_value(g, i)] = true;
    s.live[tpu_graph_output_value(g, i)] = true;
  }
  for (int v = n - 1; v >= 0; v--) {
    if (!s.live[v]) continue;
    const tpu_node_t *node = tpu_graph_node(g, v);
    for (int i = 0; i < node->num_operands; i++) s.live[node->operands[i]] = true;
  }
  for (int v = 0; v < n; v++) {
    const tpu_node_t *node = tpu_graph_node(g, v);
    s.mark[v] = -1;
    if (!s.live[v]) continue;
    for (int i = 0; i < node->num_operands; i++) {
      int u = node->operands[i];
      if (s.users[u]++ == 0) s.first_user[u] = v;
    }
  }
  for (int v = 0; v < n; v++) {
    const tpu_node_t *node = tpu_graph_node(g, v);
    if (!s.live[v]) continue;
    bool heavy = is_heavy(node->op);
    /* A matmul or reduction read only by one elementwise op fuses into it (output fusion);
     * the consumer's kernel then does its work. */
    if (heavy && !s.output[v] && s.users[v] == 1 &&
        (tpu_op_family(node->op) == TPU_FAMILY_MXU || tpu_op_family(node->op) == TPU_FAMILY_REDUCE) &&
        is_elementwise(tpu_graph_node(g, s.first_user[v])->op)) {
      heavy = false;
    }
    s.mat[v] = node->op == TPU_OP_PARAMETER || s.output[v] || heavy;
    if (s.output[v] && !heavy && is_elementwise(node->op) && s.users[v] == 1) {
      const tpu_node_t *reader = tpu_graph_node(g, s.first_user[v]);
      s.store[v] = is_elementwise(reader->op) && tpu_shape_equal(&reader->shape, &node->shape);
    }
  }
  for (int v = 0; v < n; v++) {
    /* kernel roots; a parameter that is also an output is copied (one copy kernel) */
    if (s.mat[v] && !s.store[v] && (tpu_graph_node(g, v)->op != TPU_OP_PARAMETER || s.output[v])) {
      add_kernel(g, spec, &s, v, out);
    }
  }
  tpu_allocator_free(host, mem);
  return TPU_OK;
}
