// lower_nn.cpp: lowerings of the neural-network ops models train with: softmax and
// log_softmax (and backward), nll_loss and nll_loss2d (forward/backward: cross_entropy), the
// mse, smooth L1 and Huber losses (forward/backward), layer norm (forward/backward),
// embedding (index_select, embedding_dense_backward, embedding_renorm_ for max_norm),
// tril/triu, arange, eye, linspace/logspace, cat.
//
// Statistics (softmax sums, norms) are computed in f32 for bf16/f16 inputs. Index-taking
// ops use gather/scatter with bounds checks: an out-of-range index is an IndexError at the
// next sync (debug mode: at the op), never clamped.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/native/Resize.h>

#include "native.h"

namespace torchtpu {
namespace {

tpu_value_t bcast(LowerCtx &ctx, tpu_value_t v, const tpu_shape_t &s) { return broadcast_to(ctx.g, v, s); }
tpu_value_t bin(LowerCtx &ctx, tpu_op_t op, tpu_value_t a, tpu_value_t b) {
  return tpu_graph_binary(ctx.g, op, a, b);
}

// ---- softmax ----------------------------------------------------------------------------

// (self, dim, half_to_float): max-subtracted exponentials in f32.
void softmax_impl(LowerCtx &ctx, bool log) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  tpu_shape_t s = shape_of(ctx.g, x);
  int64_t dim = ctx.arg(1).toInt();
  tpu_value_t m = reduce_dims(ctx.g, TPU_REDUCE_MAX, x, {dim}, true);
  tpu_value_t finite = tpu_graph_unary(ctx.g, TPU_OP_IS_FINITE, m);
  m = tpu_graph_select(ctx.g, finite, m, full(ctx.g, dt, shape_of(ctx.g, m), 0));
  tpu_value_t z = bin(ctx, TPU_OP_SUB, x, bcast(ctx, m, s));
  tpu_value_t e = tpu_graph_unary(ctx.g, TPU_OP_EXP, z);
  tpu_value_t sum = reduce_dims(ctx.g, TPU_REDUCE_SUM, e, {dim}, true);
  if (log) {
    ctx.results = {bin(ctx, TPU_OP_SUB, z, bcast(ctx, tpu_graph_unary(ctx.g, TPU_OP_LOG, sum), s))};
  } else {
    ctx.results = {bin(ctx, TPU_OP_DIV, e, bcast(ctx, sum, s))};
  }
}
void softmax_out(LowerCtx &ctx) { softmax_impl(ctx, false); }
void log_softmax_out(LowerCtx &ctx) { softmax_impl(ctx, true); }

// (grad_output, output, dim, input_dtype)
void softmax_backward_out(LowerCtx &ctx) {  // y * (g - sum(g * y))
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = convert(ctx.g, ctx.v(0), dt), y = convert(ctx.g, ctx.v(1), dt);
  tpu_shape_t s = shape_of(ctx.g, g);
  tpu_value_t dot = reduce_dims(ctx.g, TPU_REDUCE_SUM, bin(ctx, TPU_OP_MUL, g, y), {ctx.arg(2).toInt()}, true);
  ctx.results = {bin(ctx, TPU_OP_MUL, y, bin(ctx, TPU_OP_SUB, g, bcast(ctx, dot, s)))};
}

void log_softmax_backward_out(LowerCtx &ctx) {  // g - exp(y) * sum(g)
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = convert(ctx.g, ctx.v(0), dt), y = convert(ctx.g, ctx.v(1), dt);
  tpu_shape_t s = shape_of(ctx.g, g);
  tpu_value_t sum = reduce_dims(ctx.g, TPU_REDUCE_SUM, g, {ctx.arg(2).toInt()}, true);
  ctx.results = {bin(ctx, TPU_OP_SUB, g,
                     bin(ctx, TPU_OP_MUL, tpu_graph_unary(ctx.g, TPU_OP_EXP, y), bcast(ctx, sum, s)))};
}

// ---- gathers ------------------------------------------------------------------------------

// (self, dim, index); a 0-d self is gathered from as a 1-element vector (the meta kernel
// checked that the index has one element; the gather checks its value)
void index_select(LowerCtx &ctx) {
  tpu_value_t x = ctx.v(0);
  int64_t dim = ctx.arg(1).toInt();
  if (shape_of(ctx.g, x).rank == 0) {
    const tpu_shape_t one{1, {1}};
    x = tpu_graph_reshape(ctx.g, x, &one);
    dim = 0;
  }
  tpu_value_t r = gather_slices(ctx.g, x, dim, ctx.v(2));
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, r, &out)};
}

// (grad_output, indices, num_weights, padding_idx, scale_grad_by_freq): scatter-add rows.
void embedding_dense_backward(LowerCtx &ctx) {
  if (ctx.arg(4).toBool()) throw Unsupported("scale_grad_by_freq");
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t g = convert(ctx.g, ctx.v(0), dt), idx = ctx.v(1);
  tpu_shape_t gs = shape_of(ctx.g, g), is = shape_of(ctx.g, idx);
  int64_t n = 1;
  for (int d = 0; d < is.rank; d++) n *= is.dims[d];
  int64_t width = gs.dims[gs.rank - 1];
  tpu_shape_t g2{2, {n, width}}, i1{1, {n}};
  g = tpu_graph_reshape(ctx.g, g, &g2);
  idx = tpu_graph_reshape(ctx.g, idx, &i1);
  int64_t padding = ctx.arg(3).toInt();
  if (padding >= 0) {  // rows of the padding index get no gradient
    tpu_value_t keep = tpu_graph_compare(ctx.g, TPU_CMP_NE, idx, full(ctx.g, dtype_of(ctx.g, idx), i1, padding));
    int64_t bdims[1] = {0};
    keep = tpu_graph_broadcast_in_dim(ctx.g, keep, &g2, bdims);
    g = tpu_graph_select(ctx.g, keep, g, full(ctx.g, dt, g2, 0));
  }
  tpu_shape_t table = ctx.out_shape();
  tpu_scatter_attrs_t a{};
  a.num_update_window_dims = 1;
  a.update_window_dims[0] = 1;
  a.num_inserted_window_dims = 1;
  a.inserted_window_dims[0] = 0;
  a.num_scatter_dims = 1;
  a.scatter_dims_to_operand_dims[0] = 0;
  a.index_vector_dim = 1;
  a.kind = TPU_SCATTER_ADD;
  a.check_bounds = true;
  ctx.results = {tpu_graph_scatter(ctx.g, full(ctx.g, dt, table, 0), idx, g, &a)};
}

// embedding_renorm_(self, indices, max_norm, norm_type): nn.Embedding(max_norm=...) rescales
// each looked-up row whose norm_type-norm exceeds max_norm by max_norm / (norm + 1e-7), in
// place, as the CPU kernel does (the scale in f64, applied in the row's compute dtype). A
// row looked up twice is written twice with the same values.
void embedding_renorm(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  const double max_norm = ctx.arg(2).toDouble(), p = ctx.arg(3).toDouble();
  tpu_shape_t flat{1, {ctx.tensor(1).numel()}};
  tpu_value_t idx = convert(ctx.g, tpu_graph_reshape(ctx.g, ctx.v(1), &flat), TPU_I64);
  tpu_value_t rows = convert(ctx.g, gather_slices(ctx.g, ctx.v(0), 0, idx), dt);  // (N, D)
  tpu_shape_t rs = shape_of(ctx.g, rows);
  tpu_value_t wide = convert(ctx.g, vector_norm(ctx.g, rows, dt, p, {1}, false), TPU_F64);  // (N)
  tpu_shape_t n1 = shape_of(ctx.g, wide);
  tpu_value_t scale = bin(ctx, TPU_OP_DIV, full(ctx.g, TPU_F64, n1, max_norm),
                          bin(ctx, TPU_OP_ADD, wide, full(ctx.g, TPU_F64, n1, 1e-7)));
  tpu_value_t over = tpu_graph_compare(ctx.g, TPU_CMP_GT, wide, full(ctx.g, TPU_F64, n1, max_norm));
  scale = convert(ctx.g, tpu_graph_select(ctx.g, over, scale, full(ctx.g, TPU_F64, n1, 1)), dt);
  int64_t along_rows[1] = {0};
  rows = bin(ctx, TPU_OP_MUL, rows, tpu_graph_broadcast_in_dim(ctx.g, scale, &rs, along_rows));
  tpu_value_t updates = convert(ctx.g, rows, ctx.out_dtype());
  ctx.results = {scatter_slices(ctx.g, ctx.v(0), 0, idx, updates, false)};
}

// ---- nll_loss (cross_entropy = log_softmax + nll_loss) ---------------------------------------

struct NllSetup {
  tpu_value_t x;       // (N, C) log-probabilities, compute dtype
  tpu_value_t target;  // (N) with ignored entries replaced by 0
  tpu_value_t w;       // (N) weight of each sample, 0 where ignored
  tpu_dtype_t dt;
  int64_t n, c;        // N counts every position: batch x spatial for nll_loss2d
};

// (self, target, weight, reduction, ignore_index, ...). self is (C), (B, C) or, for
// nll_loss2d, (B, C, H, W): the class dim is moved last and the rest flattened to N rows.
NllSetup nll_setup(LowerCtx &ctx, size_t self_arg) {
  NllSetup s{};
  s.dt = compute_dtype(to_tpu_dtype(ctx.tensor(self_arg).scalar_type()));
  s.x = convert(ctx.g, ctx.v(self_arg), s.dt);
  tpu_shape_t xs = shape_of(ctx.g, s.x);
  if (xs.rank > 2) {
    int64_t perm[TPU_MAX_RANK] = {0};
    for (int d = 1; d < xs.rank - 1; d++) perm[d] = d + 1;
    perm[xs.rank - 1] = 1;
    tpu_shape_t rows{2, {numel(xs) / std::max<int64_t>(xs.dims[1], 1), xs.dims[1]}};
    s.x = tpu_graph_reshape(ctx.g, tpu_graph_transpose(ctx.g, s.x, perm), &rows);
    xs = rows;
  }
  if (xs.rank == 1) {
    tpu_shape_t two{2, {1, xs.dims[0]}};
    s.x = tpu_graph_reshape(ctx.g, s.x, &two);
    xs = two;
  }
  s.n = xs.dims[0];
  s.c = xs.dims[1];
  tpu_shape_t n1{1, {s.n}};
  tpu_value_t t = convert(ctx.g, tpu_graph_reshape(ctx.g, ctx.v(self_arg + 1), &n1), TPU_I64);
  int64_t ignore = ctx.arg(self_arg + 4).toInt();
  tpu_value_t keep = tpu_graph_compare(ctx.g, TPU_CMP_NE, t, full(ctx.g, TPU_I64, n1, ignore));
  s.target = tpu_graph_select(ctx.g, keep, t, full(ctx.g, TPU_I64, n1, 0));
  tpu_value_t w = ctx.v(self_arg + 2) != TPU_NO_VALUE
                      ? gather_slices(ctx.g, convert(ctx.g, ctx.v(self_arg + 2), s.dt), 0, s.target)
                      : full(ctx.g, s.dt, n1, 1);
  s.w = tpu_graph_select(ctx.g, keep, w, full(ctx.g, s.dt, n1, 0));
  return s;
}

// x[i, target[i]] for every row, bounds-checked against C.
tpu_value_t pick(LowerCtx &ctx, const NllSetup &s) {
  tpu_shape_t n1{1, {s.n}}, n2{2, {s.n, 1}};
  tpu_value_t rows = tpu_graph_iota(ctx.g, TPU_I64, &n1, 0);
  tpu_value_t pair[2] = {tpu_graph_reshape(ctx.g, rows, &n2), tpu_graph_reshape(ctx.g, s.target, &n2)};
  tpu_value_t idx = tpu_graph_concatenate(ctx.g, pair, 2, 1);  // (N, 2)
  tpu_gather_attrs_t a{};
  a.num_collapsed = 2;
  a.collapsed_slice_dims[0] = 0;
  a.collapsed_slice_dims[1] = 1;
  a.num_start_index_map = 2;
  a.start_index_map[0] = 0;
  a.start_index_map[1] = 1;
  a.index_vector_dim = 1;
  a.slice_sizes[0] = 1;
  a.slice_sizes[1] = 1;
  a.check_bounds = true;
  return tpu_graph_gather(ctx.g, s.x, idx, &a);  // (N)
}

// nll_loss_forward.output(self, target, weight, reduction, ignore_index) -> (output, total_weight)
void nll_loss_forward(LowerCtx &ctx) {
  NllSetup s = nll_setup(ctx, 0);
  int64_t reduction = ctx.arg(3).toInt();
  tpu_value_t loss = tpu_graph_unary(ctx.g, TPU_OP_NEG, bin(ctx, TPU_OP_MUL, pick(ctx, s), s.w));
  tpu_value_t total = reduce_dims(ctx.g, TPU_REDUCE_SUM, s.w, {}, false);
  tpu_value_t out;
  if (reduction == 0) {
    tpu_shape_t shape = ctx.out_shape(0);
    out = tpu_graph_reshape(ctx.g, loss, &shape);
  } else {
    out = reduce_dims(ctx.g, TPU_REDUCE_SUM, loss, {}, false);
    if (reduction == 1) out = bin(ctx, TPU_OP_DIV, out, total);
  }
  ctx.results = {out, total};
}

// nll_loss_backward.grad_input(grad_output, self, target, weight, reduction, ignore_index,
// total_weight): -w * g (/ total for mean) at each row's target, 0 elsewhere.
void nll_loss_backward(LowerCtx &ctx) {
  NllSetup s = nll_setup(ctx, 1);
  int64_t reduction = ctx.arg(4).toInt();
  tpu_shape_t n1{1, {s.n}}, nc{2, {s.n, s.c}};
  tpu_value_t g = convert(ctx.g, ctx.v(0), s.dt);
  g = reduction == 0 ? tpu_graph_reshape(ctx.g, g, &n1) : bcast(ctx, g, n1);
  tpu_value_t scale = bin(ctx, TPU_OP_MUL, s.w, g);
  if (reduction == 1) scale = bin(ctx, TPU_OP_DIV, scale, bcast(ctx, convert(ctx.g, ctx.v(6), s.dt), n1));
  int64_t rows[1] = {0};
  tpu_value_t cols = tpu_graph_iota(ctx.g, TPU_I64, &nc, 1);
  tpu_value_t hot = tpu_graph_compare(ctx.g, TPU_CMP_EQ, cols, tpu_graph_broadcast_in_dim(ctx.g, s.target, &nc, rows));
  tpu_value_t val = tpu_graph_unary(ctx.g, TPU_OP_NEG, tpu_graph_broadcast_in_dim(ctx.g, scale, &nc, rows));
  tpu_value_t grad = tpu_graph_select(ctx.g, hot, val, full(ctx.g, s.dt, nc, 0));
  tpu_shape_t out = ctx.out_shape();
  if (out.rank > 2) {  // nll_loss2d: (B*H*W, C) -> (B, H, W, C) -> (B, C, H, W)
    tpu_shape_t last{out.rank, {}};
    int64_t perm[TPU_MAX_RANK] = {0};
    last.dims[0] = out.dims[0];
    for (int d = 1; d < out.rank - 1; d++) last.dims[d] = out.dims[d + 1];
    last.dims[out.rank - 1] = out.dims[1];
    perm[1] = out.rank - 1;
    for (int d = 2; d < out.rank; d++) perm[d] = d - 1;
    ctx.results = {tpu_graph_transpose(ctx.g, tpu_graph_reshape(ctx.g, grad, &last), perm)};
    return;
  }
  ctx.results = {tpu_graph_reshape(ctx.g, grad, &out)};
}

// ---- regression losses -----------------------------------------------------------------------

// self - target of a loss (arguments 0 and 1), in the compute dtype; no broadcasting
// (PyTorch warns and broadcasts: that case runs on the CPU fallback).
tpu_value_t loss_diff(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt), y = convert(ctx.g, ctx.v(1), dt);
  tpu_shape_t s = shape_of(ctx.g, x), ys = shape_of(ctx.g, y);
  if (!tpu_shape_equal(&s, &ys)) throw Unsupported("a loss with broadcasting");
  return bin(ctx, TPU_OP_SUB, x, y);
}

// mse_loss.out(self, target, reduction): (x - y)^2, reduced (0 none, 1 mean, 2 sum).
void mse_loss_out(LowerCtx &ctx) {
  tpu_value_t d = loss_diff(ctx);
  ctx.results = {reduce_loss(ctx.g, bin(ctx, TPU_OP_MUL, d, d), ctx.arg(2).toInt())};
}

// mse_loss_backward(grad_output, self, target, reduction): 2 (x - y) g (/ n for mean)
void mse_loss_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_value_t x = convert(ctx.g, ctx.v(1), dt), y = convert(ctx.g, ctx.v(2), dt);
  tpu_shape_t s = ctx.out_shape();
  tpu_value_t g = bcast(ctx, convert(ctx.g, ctx.v(0), dt), s);
  double scale = 2.0;
  if (ctx.arg(3).toInt() == 1) scale /= static_cast<double>(numel(s));
  tpu_value_t d = bin(ctx, TPU_OP_SUB, bcast(ctx, x, s), bcast(ctx, y, s));
  ctx.results = {bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, d, g), full(ctx.g, dt, s, scale))};
}

// smooth_l1_loss.out(self, target, reduction, beta): z = |x - y|;
// z < beta ? 0.5 z^2 / beta : z - 0.5 beta (beta = 0: z).
void smooth_l1_loss_out(LowerCtx &ctx) {
  tpu_value_t z = tpu_graph_unary(ctx.g, TPU_OP_ABS, loss_diff(ctx));
  tpu_dtype_t dt = dtype_of(ctx.g, z);
  tpu_shape_t s = shape_of(ctx.g, z);
  double beta = ctx.arg(3).toDouble();
  tpu_value_t loss = z;
  if (beta != 0) {
    tpu_value_t b = full(ctx.g, dt, s, beta);
    tpu_value_t quad = bin(ctx, TPU_OP_DIV, bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, full(ctx.g, dt, s, 0.5), z), z), b);
    tpu_value_t lin = bin(ctx, TPU_OP_SUB, z, full(ctx.g, dt, s, 0.5 * beta));
    loss = tpu_graph_select(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_LT, z, b), quad, lin);
  }
  ctx.results = {reduce_loss(ctx.g, loss, ctx.arg(2).toInt())};
}

// huber_loss.out(self, target, reduction, delta): z < delta ? 0.5 z^2 : delta (z - 0.5 delta).
void huber_loss_out(LowerCtx &ctx) {
  tpu_value_t z = tpu_graph_unary(ctx.g, TPU_OP_ABS, loss_diff(ctx));
  tpu_dtype_t dt = dtype_of(ctx.g, z);
  tpu_shape_t s = shape_of(ctx.g, z);
  double delta = ctx.arg(3).toDouble();
  tpu_value_t quad = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, full(ctx.g, dt, s, 0.5), z), z);
  tpu_value_t lin = bin(ctx, TPU_OP_MUL, full(ctx.g, dt, s, delta),
                        bin(ctx, TPU_OP_SUB, z, full(ctx.g, dt, s, 0.5 * delta)));
  tpu_value_t loss = tpu_graph_select(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_LT, z, full(ctx.g, dt, s, delta)), quad, lin);
  ctx.results = {reduce_loss(ctx.g, loss, ctx.arg(2).toInt())};
}

// The backward of smooth_l1 and huber losses (grad_output, self, target, reduction, beta or
// delta): x = self - target and norm * grad_output (norm = 1/n for a mean), broadcast.
struct LossGrad {
  tpu_value_t x, g;
  tpu_dtype_t dt;
  tpu_shape_t s;
};
LossGrad loss_grad(LowerCtx &ctx) {
  LossGrad r{};
  r.dt = compute_dtype(ctx.out_dtype());
  r.s = ctx.out_shape();
  r.x = bin(ctx, TPU_OP_SUB, bcast(ctx, convert(ctx.g, ctx.v(1), r.dt), r.s), bcast(ctx, convert(ctx.g, ctx.v(2), r.dt), r.s));
  r.g = bcast(ctx, convert(ctx.g, ctx.v(0), r.dt), r.s);
  if (ctx.arg(3).toInt() == 1) {
    r.g = bin(ctx, TPU_OP_MUL, full(ctx.g, r.dt, r.s, 1.0 / static_cast<double>(numel(r.s))), r.g);
  }
  return r;
}

// |x| < beta ? norm g x / beta : norm g sign(x)
void smooth_l1_loss_backward(LowerCtx &ctx) {
  LossGrad L = loss_grad(ctx);
  tpu_value_t beta = full(ctx.g, L.dt, L.s, ctx.arg(4).toDouble());
  tpu_value_t inner = bin(ctx, TPU_OP_DIV, bin(ctx, TPU_OP_MUL, L.g, L.x), beta);
  tpu_value_t outer = bin(ctx, TPU_OP_MUL, L.g, tpu_graph_unary(ctx.g, TPU_OP_SIGN, L.x));
  tpu_value_t small = tpu_graph_compare(ctx.g, TPU_CMP_LT, tpu_graph_unary(ctx.g, TPU_OP_ABS, L.x), beta);
  ctx.results = {tpu_graph_select(ctx.g, small, inner, outer)};
}

// x < -delta ? -norm g delta : x > delta ? norm g delta : norm g x
void huber_loss_backward(LowerCtx &ctx) {
  LossGrad L = loss_grad(ctx);
  double delta = ctx.arg(4).toDouble();
  tpu_value_t up = bin(ctx, TPU_OP_MUL, L.g, full(ctx.g, L.dt, L.s, delta));
  tpu_value_t down = bin(ctx, TPU_OP_MUL, L.g, full(ctx.g, L.dt, L.s, -delta));
  tpu_value_t mid = bin(ctx, TPU_OP_MUL, L.g, L.x);
  tpu_value_t r = tpu_graph_select(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_GT, L.x, full(ctx.g, L.dt, L.s, delta)), up, mid);
  ctx.results = {tpu_graph_select(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_LT, L.x, full(ctx.g, L.dt, L.s, -delta)), down, r)};
}

// ---- layer norm ---------------------------------------------------------------------------------

struct LayerNormDims {
  std::vector<int64_t> inner;  // normalized dims
  tpu_shape_t stat;            // shape of mean/rstd: outer dims, then 1s
  double count;                // elements per normalized group
};

LayerNormDims layer_norm_dims(const tpu_shape_t &xs, size_t k) {
  LayerNormDims d{};
  d.count = 1;
  d.stat = xs;
  for (int i = xs.rank - static_cast<int>(k); i < xs.rank; i++) {
    d.inner.push_back(i);
    d.count *= static_cast<double>(xs.dims[i]);
    d.stat.dims[i] = 1;
  }
  return d;
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
void native_layer_norm(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype(0));
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  tpu_shape_t xs = shape_of(ctx.g, x);
  LayerNormDims d = layer_norm_dims(xs, ctx.arg(1).toIntVector().size());
  double eps = ctx.arg(4).toDouble();
  tpu_value_t mean = bin(ctx, TPU_OP_DIV, reduce_dims(ctx.g, TPU_REDUCE_SUM, x, d.inner, true),
                         full(ctx.g, dt, d.stat, d.count));
  tpu_value_t xc = bin(ctx, TPU_OP_SUB, x, bcast(ctx, mean, xs));
  tpu_value_t var = bin(ctx, TPU_OP_DIV, reduce_dims(ctx.g, TPU_REDUCE_SUM, bin(ctx, TPU_OP_MUL, xc, xc), d.inner, true),
                        full(ctx.g, dt, d.stat, d.count));
  tpu_value_t rstd = tpu_graph_unary(ctx.g, TPU_OP_RSQRT, bin(ctx, TPU_OP_ADD, var, full(ctx.g, dt, d.stat, eps)));
  tpu_value_t y = bin(ctx, TPU_OP_MUL, xc, bcast(ctx, rstd, xs));
  if (ctx.v(2) != TPU_NO_VALUE) y = bin(ctx, TPU_OP_MUL, y, bcast(ctx, convert(ctx.g, ctx.v(2), dt), xs));
  if (ctx.v(3) != TPU_NO_VALUE) y = bin(ctx, TPU_OP_ADD, y, bcast(ctx, convert(ctx.g, ctx.v(3), dt), xs));
  tpu_shape_t ms = ctx.out_shape(1);
  ctx.results = {y, tpu_graph_reshape(ctx.g, mean, &ms), tpu_graph_reshape(ctx.g, rstd, &ms)};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask) -> (grad_input, grad_weight, grad_bias)
void native_layer_norm_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(to_tpu_dtype(ctx.tensor(1).scalar_type()));
  tpu_value_t dy = convert(ctx.g, ctx.v(0), dt), x = convert(ctx.g, ctx.v(1), dt);
  tpu_shape_t xs = shape_of(ctx.g, x);
  LayerNormDims d = layer_norm_dims(xs, ctx.arg(2).toIntVector().size());
  tpu_value_t mean = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(3), dt), &d.stat);
  tpu_value_t rstd = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(4), dt), &d.stat);
  tpu_value_t xhat = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_SUB, x, bcast(ctx, mean, xs)), bcast(ctx, rstd, xs));
  tpu_value_t g = dy;
  if (ctx.v(5) != TPU_NO_VALUE) g = bin(ctx, TPU_OP_MUL, g, bcast(ctx, convert(ctx.g, ctx.v(5), dt), xs));
  std::vector<int64_t> outer;
  for (int i = 0; i < xs.rank - static_cast<int>(d.inner.size()); i++) outer.push_back(i);
  ctx.results.assign(3, TPU_NO_VALUE);
  if (ctx.out_meta[0].defined()) {
    tpu_value_t mg = bin(ctx, TPU_OP_DIV, reduce_dims(ctx.g, TPU_REDUCE_SUM, g, d.inner, true),
                         full(ctx.g, dt, d.stat, d.count));
    tpu_value_t mgx = bin(ctx, TPU_OP_DIV,
                          reduce_dims(ctx.g, TPU_REDUCE_SUM, bin(ctx, TPU_OP_MUL, g, xhat), d.inner, true),
                          full(ctx.g, dt, d.stat, d.count));
    tpu_value_t inner = bin(ctx, TPU_OP_SUB, bin(ctx, TPU_OP_SUB, g, bcast(ctx, mg, xs)),
                            bin(ctx, TPU_OP_MUL, xhat, bcast(ctx, mgx, xs)));
    ctx.results[0] = bin(ctx, TPU_OP_MUL, inner, bcast(ctx, rstd, xs));
  }
  if (ctx.out_meta[1].defined()) {
    ctx.results[1] = reduce_dims(ctx.g, TPU_REDUCE_SUM, bin(ctx, TPU_OP_MUL, dy, xhat), outer, false);
  }
  if (ctx.out_meta[2].defined()) {
    ctx.results[2] = reduce_dims(ctx.g, TPU_REDUCE_SUM, dy, outer, false);
  }
}

// ---- shapes and factories ---------------------------------------------------------------------

// tril/triu(self, diagonal): keep elements with col - row <= (>=) diagonal.
void triangle(LowerCtx &ctx, bool lower) {
  tpu_value_t x = ctx.v(0);
  tpu_shape_t s = shape_of(ctx.g, x);
  if (s.rank < 2) throw Unsupported("tril/triu below 2 dims");
  tpu_value_t row = tpu_graph_iota(ctx.g, TPU_I64, &s, s.rank - 2);
  tpu_value_t col = tpu_graph_iota(ctx.g, TPU_I64, &s, s.rank - 1);
  tpu_value_t diff = bin(ctx, TPU_OP_SUB, col, row);
  tpu_value_t k = full(ctx.g, TPU_I64, s, static_cast<double>(ctx.arg(1).toInt()));
  tpu_value_t keep = tpu_graph_compare(ctx.g, lower ? TPU_CMP_LE : TPU_CMP_GE, diff, k);
  ctx.results = {tpu_graph_select(ctx.g, keep, x, full(ctx.g, dtype_of(ctx.g, x), s, 0))};
}
void tril_out(LowerCtx &ctx) { triangle(ctx, true); }
void triu_out(LowerCtx &ctx) { triangle(ctx, false); }

// arange.start_out(start, end, step): start + i * step, computed in f64 / i64.
void arange_out(LowerCtx &ctx) {
  tpu_dtype_t out = ctx.out_dtype();
  tpu_dtype_t dt = tpu_dtype_is_float(out) ? TPU_F64 : TPU_I64;
  tpu_shape_t s = ctx.out_shape();
  tpu_value_t i = tpu_graph_iota(ctx.g, dt, &s, 0);
  tpu_value_t start = bcast(ctx, convert(ctx.g, ctx.v(0), dt), s);
  tpu_value_t step = bcast(ctx, convert(ctx.g, ctx.v(2), dt), s);
  ctx.results = {bin(ctx, TPU_OP_ADD, start, bin(ctx, TPU_OP_MUL, i, step))};
}

// arange's out= tensor sized as PyTorch's arange_out sizes it (its checks and errors too).
void arange_presize(const std::vector<c10::IValue> &args) {
  const at::Tensor &out = args[3].toTensor();
  const at::Scalar start = args[0].toScalar(), end = args[1].toScalar(), step = args[2].toScalar();
  int64_t n = AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "arange", [&] {
    return at::native::compute_arange_size<scalar_t>(start, end, step);
  });
  if (out.numel() != n) at::native::resize_output(out, {n});
}
[[maybe_unused]] const bool arange_presized = (register_presize("arange.start_out", arange_presize), true);

// eye.out(n) / eye.m_out(n, m): 1 on the main diagonal.
void eye_out(LowerCtx &ctx) {
  tpu_shape_t s = ctx.out_shape();
  ctx.results = {convert(ctx.g, main_diagonal(ctx.g, s), ctx.out_dtype())};
}

// torch.eye hands eye.out / eye.m_out an empty out=: sized here, as its kernel would
// resize it, so that every call does not miss the cache once.
void eye_presize(const std::vector<c10::IValue> &args) {
  const bool square = args.size() == 2;
  const int64_t n = args[0].toInt(), m = square ? n : args[1].toInt();
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  const at::Tensor &out = args.back().toTensor();
  if (out.sizes() != c10::IntArrayRef({n, m})) at::native::resize_output(out, {n, m});
}
[[maybe_unused]] const bool eye_presized =
    (register_presize("eye.out", eye_presize), register_presize("eye.m_out", eye_presize), true);

// linspace.out(start, end, steps) and logspace.out(start, end, steps, base): as ATen's CPU
// kernel, step = (end - start) / (steps - 1) in the result's compute dtype; the first half of
// the points is start + i * step and the second half end - (steps - 1 - i) * step, so that
// both ends are exact. The CPU kernel is compiled with fused multiply-adds: for f32 and
// narrower, the multiply-add runs in f64 and rounds once, as a fused one does (f64 results
// may differ from the CPU's in the last bit). logspace raises base to those points.
// Integer results are computed in f64 and truncated.
void spaced(LowerCtx &ctx, bool log) {
  tpu_dtype_t out = ctx.out_dtype();
  tpu_dtype_t dt = tpu_dtype_is_float(out) ? compute_dtype(out) : TPU_F64;
  tpu_shape_t s = ctx.out_shape();
  const int64_t steps = ctx.arg(2).toInt();
  tpu_value_t start = bcast(ctx, convert(ctx.g, ctx.v(0), dt), s);
  tpu_value_t end = bcast(ctx, convert(ctx.g, ctx.v(1), dt), s);
  tpu_value_t points = start;
  if (steps > 1) {
    auto k = [&](double v) { return full(ctx.g, TPU_F64, s, v); };
    auto wide = [&](tpu_value_t v) { return convert(ctx.g, v, TPU_F64); };
    tpu_value_t step = wide(bin(ctx, TPU_OP_DIV, bin(ctx, TPU_OP_SUB, end, start),
                                full(ctx.g, dt, s, static_cast<double>(steps - 1))));
    tpu_value_t i = tpu_graph_iota(ctx.g, TPU_F64, &s, 0);
    tpu_value_t from_end = bin(ctx, TPU_OP_SUB, k(static_cast<double>(steps - 1)), i);
    tpu_value_t first = tpu_graph_compare(ctx.g, TPU_CMP_LT, i, k(static_cast<double>(steps / 2)));
    points = tpu_graph_select(ctx.g, first, bin(ctx, TPU_OP_ADD, wide(start), bin(ctx, TPU_OP_MUL, step, i)),
                              bin(ctx, TPU_OP_SUB, wide(end), bin(ctx, TPU_OP_MUL, step, from_end)));
    points = convert(ctx.g, points, dt);
  }
  if (log) points = bin(ctx, TPU_OP_POW, full(ctx.g, dt, s, ctx.arg(3).toDouble()), points);
  ctx.results = {points};
}
void linspace_out(LowerCtx &ctx) { spaced(ctx, false); }
void logspace_out(LowerCtx &ctx) { spaced(ctx, true); }

// cat.out(tensors, dim): legacy empty 1-D tensors are skipped, as in PyTorch.
void cat_out(LowerCtx &ctx) {
  tpu_dtype_t dt = ctx.out_dtype();
  tpu_shape_t out = ctx.out_shape();
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), out.rank);
  std::vector<tpu_value_t> parts;
  for (tpu_value_t v : ctx.list[0]) {
    tpu_shape_t s = shape_of(ctx.g, v);
    if (s.rank == 1 && s.dims[0] == 0 && out.rank != 1) continue;
    if (s.dims[dim] == 0) continue;
    parts.push_back(convert(ctx.g, v, dt));
  }
  if (parts.empty()) {
    ctx.results = {full(ctx.g, dt, out, 0)};
    return;
  }
  ctx.results = {tpu_graph_concatenate(ctx.g, parts.data(), static_cast<int>(parts.size()),
                                       static_cast<int>(dim))};
}

LoweringRegistrar registrar({
    {"_softmax.out", softmax_out},
    {"_log_softmax.out", log_softmax_out},
    {"_softmax_backward_data.out", softmax_backward_out},
    {"_log_softmax_backward_data.out", log_softmax_backward_out},
    {"index_select", index_select},
    {"index_select.out", index_select},
    {"embedding_dense_backward", embedding_dense_backward},
    {"embedding_renorm_", embedding_renorm},
    {"nll_loss_forward.output", nll_loss_forward},
    {"nll_loss_backward.grad_input", nll_loss_backward},
    {"nll_loss2d_forward", nll_loss_forward},
    {"nll_loss2d_forward.output", nll_loss_forward},
    {"nll_loss2d_backward", nll_loss_backward},
    {"nll_loss2d_backward.grad_input", nll_loss_backward},
    {"mse_loss.out", mse_loss_out},
    {"mse_loss_backward", mse_loss_backward},
    {"mse_loss_backward.grad_input", mse_loss_backward},
    {"smooth_l1_loss.out", smooth_l1_loss_out},
    {"smooth_l1_loss_backward.grad_input", smooth_l1_loss_backward},
    {"huber_loss", huber_loss_out},
    {"huber_loss.out", huber_loss_out},
    {"huber_loss_backward.out", huber_loss_backward},
    {"native_layer_norm", native_layer_norm},
    {"native_layer_norm_backward", native_layer_norm_backward},
    {"tril.out", tril_out},
    {"triu.out", triu_out},
    {"arange.start_out", arange_out},
    {"eye.out", eye_out},
    {"eye.m_out", eye_out},
    {"linspace.out", linspace_out},
    {"logspace.out", logspace_out},
    {"cat.out", cat_out},
});

}  // namespace
}  // namespace torchtpu
