// lower_norm.cpp: lowerings of batch norm and group norm, forward and backward.
// (layer norm is in lower_nn.cpp; F.rms_norm decomposes in PyTorch into pow, mean, add,
// rsqrt and mul, all native, since _fused_rms_norm has no PrivateUse1 kernel.)
//
// F.batch_norm reaches native_batch_norm on a tpu tensor (through _batch_norm_impl_index);
// the _native_batch_norm_legit family (torch.compile / export) shares the lowering.
// _batch_norm_with_update stays on the CPU fallback: PyTorch 2.13's meta kernel for it
// raises a TypeError when bias is None (it hands None to _select_batch_norm_backend), and
// the engine runs the meta kernel before the lowering. Its backward, batch_norm_backward,
// is native. Statistics are computed in f32 for bf16/f16 inputs (f64 for
// f64), two-pass (mean, then centered squares), and the engine rounds each result once.
//
// Training mode normalizes with the batch statistics (biased variance) and updates the
// running statistics in place, as PyTorch does:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)
// (ctx.updates: the engine writes them into the argument tensors). Eval mode normalizes
// with the running statistics. save_mean/save_invstd are (C) (in eval, PyTorch's meta
// kernel says (C) where CPU returns empty ones: we return the running mean and its invstd).
#include <ATen/core/Tensor.h>

#include <limits>
#include <vector>

#include "native.h"

namespace torchtpu {
namespace {

tpu_value_t bin(LowerCtx &ctx, tpu_op_t op, tpu_value_t a, tpu_value_t b) {
  return tpu_graph_binary(ctx.g, op, a, b);
}

// The batch norm geometry of an (N, C, ...) input: statistics over every dim but 1.
struct BnDims {
  tpu_shape_t xs;            // input
  tpu_shape_t c1;            // (1, C, 1, ...): per-channel values, broadcastable
  tpu_shape_t c;             // (C)
  std::vector<int64_t> red;  // reduced dims
  double n;                  // elements per channel
};

BnDims bn_dims(const tpu_shape_t &xs) {
  if (xs.rank < 2) throw Unsupported("batch norm of a rank < 2 input");
  BnDims d{};
  d.xs = xs;
  d.c1 = xs;
  d.n = 1;
  for (int i = 0; i < xs.rank; i++) {
    if (i == 1) continue;
    d.c1.dims[i] = 1;
    d.red.push_back(i);
    d.n *= static_cast<double>(xs.dims[i]);
  }
  d.c = tpu_shape_t{1, {xs.dims[1]}};
  return d;
}

// A (C) value as (1, C, 1, ...) broadcast to the input shape.
tpu_value_t per_channel(LowerCtx &ctx, tpu_value_t v, const BnDims &d) {
  int64_t dims[1] = {1};
  return tpu_graph_broadcast_in_dim(ctx.g, v, &d.xs, dims);
}

tpu_value_t channel_sum(LowerCtx &ctx, tpu_value_t v, const BnDims &d) {
  return reduce_dims(ctx.g, TPU_REDUCE_SUM, v, d.red, false);  // (C)
}

// The arguments of one batch-norm forward overload (indices; -1: absent).
struct BnArgs {
  int running_mean, running_var, training, momentum, eps;
};

void bn_forward(LowerCtx &ctx, const BnArgs &a) {
  tpu_dtype_t dt = compute_dtype(to_tpu_dtype(ctx.tensor(0).scalar_type()));
  if (!tpu_dtype_is_float(dt)) throw Unsupported("batch norm of integers");
  tpu_value_t x = convert(ctx.g, ctx.v(0), dt);
  BnDims d = bn_dims(shape_of(ctx.g, x));
  bool training = a.training >= 0 && ctx.arg(a.training).toBool();
  double eps = ctx.arg(a.eps).toDouble();
  tpu_value_t rm = a.running_mean >= 0 ? ctx.v(a.running_mean) : TPU_NO_VALUE;
  tpu_value_t rv = a.running_var >= 0 ? ctx.v(a.running_var) : TPU_NO_VALUE;
  tpu_value_t mean, var;
  if (training) {
    mean = bin(ctx, TPU_OP_DIV, channel_sum(ctx, x, d), full(ctx.g, dt, d.c, d.n));
    tpu_value_t xc = bin(ctx, TPU_OP_SUB, x, per_channel(ctx, mean, d));
    var = bin(ctx, TPU_OP_DIV, channel_sum(ctx, bin(ctx, TPU_OP_MUL, xc, xc), d), full(ctx.g, dt, d.c, d.n));
  } else {
    if (rm == TPU_NO_VALUE || rv == TPU_NO_VALUE) throw Unsupported("eval batch norm without running stats");
    mean = convert(ctx.g, rm, dt);
    var = convert(ctx.g, rv, dt);
  }
  tpu_value_t invstd = tpu_graph_unary(ctx.g, TPU_OP_RSQRT, bin(ctx, TPU_OP_ADD, var, full(ctx.g, dt, d.c, eps)));
  // y = (x - mean) * (w * invstd) + b, per channel
  tpu_value_t scale = invstd;
  if (ctx.v(1) != TPU_NO_VALUE) scale = bin(ctx, TPU_OP_MUL, scale, convert(ctx.g, ctx.v(1), dt));
  tpu_value_t y = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_SUB, x, per_channel(ctx, mean, d)), per_channel(ctx, scale, d));
  if (ctx.v(2) != TPU_NO_VALUE) y = bin(ctx, TPU_OP_ADD, y, per_channel(ctx, convert(ctx.g, ctx.v(2), dt), d));
  ctx.results.assign(ctx.out_meta.size(), TPU_NO_VALUE);
  ctx.results[0] = y;
  for (size_t r = 1; r < ctx.out_meta.size(); r++) {
    if (!ctx.out_meta[r].defined()) continue;
    tpu_shape_t s = ctx.out_shape(r);
    int64_t numel = 1;
    for (int i = 0; i < s.rank; i++) numel *= s.dims[i];
    if (r <= 2 && numel == d.c.dims[0]) {  // (C); in eval too, as the meta kernel says
      ctx.results[r] = tpu_graph_reshape(ctx.g, r == 1 ? mean : invstd, &s);
    } else if (numel == 0) {
      ctx.results[r] = full(ctx.g, ctx.out_dtype(r), s, 0);
    } else {
      throw Unsupported("batch norm result shape");
    }
  }
  if (training && rm != TPU_NO_VALUE && rv != TPU_NO_VALUE) {
    double m = ctx.arg(a.momentum).toDouble();
    tpu_dtype_t sdt = compute_dtype(dtype_of(ctx.g, rm));
    double unbias = d.n > 1 ? d.n / (d.n - 1) : std::numeric_limits<double>::infinity();
    auto blend = [&](tpu_value_t old, tpu_value_t fresh, double factor) {
      tpu_value_t o = convert(ctx.g, old, sdt);
      tpu_value_t f = convert(ctx.g, fresh, sdt);
      return bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, o, full(ctx.g, sdt, d.c, 1 - m)),
                 bin(ctx, TPU_OP_MUL, f, full(ctx.g, sdt, d.c, m * factor)));
    };
    ctx.updates.push_back({static_cast<size_t>(a.running_mean), blend(rm, mean, 1.0)});
    ctx.updates.push_back({static_cast<size_t>(a.running_var), blend(rv, var, unbias)});
  }
}

// native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training,
// momentum, eps); _native_batch_norm_legit has the same arguments.
void native_batch_norm(LowerCtx &ctx) { bn_forward(ctx, {3, 4, 5, 6, 7}); }
// _native_batch_norm_legit.no_stats(input, weight?, bias?, training, momentum, eps)
void batch_norm_no_stats(LowerCtx &ctx) { bn_forward(ctx, {-1, -1, 3, 4, 5}); }
// _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean, running_var,
// momentum, eps)
void batch_norm_no_training(LowerCtx &ctx) { bn_forward(ctx, {3, 4, -1, 5, 6}); }

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
// save_mean?, save_invstd?, train, eps, output_mask); batch_norm_backward (the backward of
// _batch_norm_with_update) has the same first ten arguments (train is called update) and a
// reserve tensor.
void native_batch_norm_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(to_tpu_dtype(ctx.tensor(1).scalar_type()));
  tpu_value_t dy = convert(ctx.g, ctx.v(0), dt), x = convert(ctx.g, ctx.v(1), dt);
  BnDims d = bn_dims(shape_of(ctx.g, x));
  bool train = ctx.arg(7).toBool();
  tpu_value_t mean, invstd;
  if (train) {
    if (ctx.v(5) == TPU_NO_VALUE || ctx.v(6) == TPU_NO_VALUE) throw Unsupported("batch norm backward without saved stats");
    mean = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(5), dt), &d.c);
    invstd = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(6), dt), &d.c);
  } else {
    if (ctx.v(3) == TPU_NO_VALUE || ctx.v(4) == TPU_NO_VALUE) {
      throw Unsupported("eval batch norm backward without running stats");
    }
    mean = convert(ctx.g, ctx.v(3), dt);
    tpu_value_t var = convert(ctx.g, ctx.v(4), dt);
    invstd = tpu_graph_unary(ctx.g, TPU_OP_RSQRT, bin(ctx, TPU_OP_ADD, var, full(ctx.g, dt, d.c, ctx.arg(8).toDouble())));
  }
  tpu_value_t w = ctx.v(2) != TPU_NO_VALUE ? convert(ctx.g, ctx.v(2), dt) : full(ctx.g, dt, d.c, 1);
  tpu_value_t xhat = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_SUB, x, per_channel(ctx, mean, d)), per_channel(ctx, invstd, d));
  tpu_value_t sum_dy = channel_sum(ctx, dy, d);
  tpu_value_t sum_dy_xhat = channel_sum(ctx, bin(ctx, TPU_OP_MUL, dy, xhat), d);
  ctx.results.assign(3, TPU_NO_VALUE);
  if (ctx.out_meta[0].defined()) {
    tpu_value_t scale = per_channel(ctx, bin(ctx, TPU_OP_MUL, w, invstd), d);
    if (train) {  // w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
      tpu_value_t n = full(ctx.g, dt, d.c, d.n);
      tpu_value_t mdy = per_channel(ctx, bin(ctx, TPU_OP_DIV, sum_dy, n), d);
      tpu_value_t mdyx = per_channel(ctx, bin(ctx, TPU_OP_DIV, sum_dy_xhat, n), d);
      tpu_value_t inner = bin(ctx, TPU_OP_SUB, bin(ctx, TPU_OP_SUB, dy, mdy), bin(ctx, TPU_OP_MUL, xhat, mdyx));
      ctx.results[0] = bin(ctx, TPU_OP_MUL, inner, scale);
    } else {
      ctx.results[0] = bin(ctx, TPU_OP_MUL, dy, scale);
    }
  }
  if (ctx.out_meta[1].defined()) ctx.results[1] = sum_dy_xhat;
  if (ctx.out_meta[2].defined()) ctx.results[2] = sum_dy;
}

// ---- group norm ---------------------------------------------------------------------------------

struct GnDims {
  int64_t n, c, hw, g, cg;
  tpu_shape_t x4;  // (N, G, C/G, HxW)
  tpu_shape_t ng;  // (N, G)
};

GnDims gn_dims(const LowerCtx &ctx, size_t n_arg) {
  GnDims d{};
  d.n = ctx.arg(n_arg).toInt();
  d.c = ctx.arg(n_arg + 1).toInt();
  d.hw = ctx.arg(n_arg + 2).toInt();
  d.g = ctx.arg(n_arg + 3).toInt();
  if (d.g <= 0 || d.c % d.g != 0 || d.n * d.c * d.hw == 0) throw Unsupported("group norm geometry");
  d.cg = d.c / d.g;
  d.x4 = tpu_shape_t{4, {d.n, d.g, d.cg, d.hw}};
  d.ng = tpu_shape_t{2, {d.n, d.g}};
  return d;
}

// (N, G) -> (N, G, C/G, HxW)
tpu_value_t per_group(LowerCtx &ctx, tpu_value_t v, const GnDims &d) {
  int64_t dims[2] = {0, 1};
  return tpu_graph_broadcast_in_dim(ctx.g, v, &d.x4, dims);
}

// (C) -> (N, G, C/G, HxW)
tpu_value_t per_channel_g(LowerCtx &ctx, tpu_value_t v, const GnDims &d) {
  tpu_shape_t gc{2, {d.g, d.cg}};
  int64_t dims[2] = {1, 2};
  return tpu_graph_broadcast_in_dim(ctx.g, tpu_graph_reshape(ctx.g, v, &gc), &d.x4, dims);
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd)
void native_group_norm(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(to_tpu_dtype(ctx.tensor(0).scalar_type()));
  GnDims d = gn_dims(ctx, 3);
  tpu_value_t x = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(0), dt), &d.x4);
  double count = static_cast<double>(d.cg * d.hw);
  tpu_value_t mean = bin(ctx, TPU_OP_DIV, reduce_dims(ctx.g, TPU_REDUCE_SUM, x, {2, 3}, false), full(ctx.g, dt, d.ng, count));
  tpu_value_t xc = bin(ctx, TPU_OP_SUB, x, per_group(ctx, mean, d));
  tpu_value_t var = bin(ctx, TPU_OP_DIV, reduce_dims(ctx.g, TPU_REDUCE_SUM, bin(ctx, TPU_OP_MUL, xc, xc), {2, 3}, false),
                        full(ctx.g, dt, d.ng, count));
  tpu_value_t eps = full(ctx.g, dt, d.ng, ctx.arg(7).toDouble());
  tpu_value_t rstd = tpu_graph_unary(ctx.g, TPU_OP_RSQRT, bin(ctx, TPU_OP_ADD, var, eps));
  tpu_value_t y = bin(ctx, TPU_OP_MUL, xc, per_group(ctx, rstd, d));
  if (ctx.v(1) != TPU_NO_VALUE) y = bin(ctx, TPU_OP_MUL, y, per_channel_g(ctx, convert(ctx.g, ctx.v(1), dt), d));
  if (ctx.v(2) != TPU_NO_VALUE) y = bin(ctx, TPU_OP_ADD, y, per_channel_g(ctx, convert(ctx.g, ctx.v(2), dt), d));
  tpu_shape_t out = ctx.out_shape(0), ms = ctx.out_shape(1);
  ctx.results = {tpu_graph_reshape(ctx.g, y, &out), tpu_graph_reshape(ctx.g, mean, &ms),
                 tpu_graph_reshape(ctx.g, rstd, &ms)};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group,
// output_mask) -> (grad_input, grad_weight, grad_bias)
void native_group_norm_backward(LowerCtx &ctx) {
  tpu_dtype_t dt = compute_dtype(to_tpu_dtype(ctx.tensor(1).scalar_type()));
  GnDims d = gn_dims(ctx, 5);
  tpu_value_t dy = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(0), dt), &d.x4);
  tpu_value_t x = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(1), dt), &d.x4);
  tpu_value_t mean = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(2), dt), &d.ng);
  tpu_value_t rstd = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(3), dt), &d.ng);
  tpu_value_t xhat = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_SUB, x, per_group(ctx, mean, d)), per_group(ctx, rstd, d));
  tpu_shape_t c{1, {d.c}};
  ctx.results.assign(3, TPU_NO_VALUE);
  if (ctx.out_meta[0].defined()) {
    tpu_value_t g = dy;
    if (ctx.v(4) != TPU_NO_VALUE) g = bin(ctx, TPU_OP_MUL, g, per_channel_g(ctx, convert(ctx.g, ctx.v(4), dt), d));
    tpu_value_t count = full(ctx.g, dt, d.ng, static_cast<double>(d.cg * d.hw));
    tpu_value_t mg = bin(ctx, TPU_OP_DIV, reduce_dims(ctx.g, TPU_REDUCE_SUM, g, {2, 3}, false), count);
    tpu_value_t gx = bin(ctx, TPU_OP_MUL, g, xhat);
    tpu_value_t mgx = bin(ctx, TPU_OP_DIV, reduce_dims(ctx.g, TPU_REDUCE_SUM, gx, {2, 3}, false), count);
    tpu_value_t inner = bin(ctx, TPU_OP_SUB, bin(ctx, TPU_OP_SUB, g, per_group(ctx, mg, d)),
                            bin(ctx, TPU_OP_MUL, xhat, per_group(ctx, mgx, d)));
    tpu_value_t dx = bin(ctx, TPU_OP_MUL, inner, per_group(ctx, rstd, d));
    tpu_shape_t out = ctx.out_shape(0);
    ctx.results[0] = tpu_graph_reshape(ctx.g, dx, &out);
  }
  if (ctx.out_meta[1].defined()) {
    tpu_value_t gw = reduce_dims(ctx.g, TPU_REDUCE_SUM, bin(ctx, TPU_OP_MUL, dy, xhat), {0, 3}, false);
    ctx.results[1] = tpu_graph_reshape(ctx.g, gw, &c);
  }
  if (ctx.out_meta[2].defined()) {
    ctx.results[2] = tpu_graph_reshape(ctx.g, reduce_dims(ctx.g, TPU_REDUCE_SUM, dy, {0, 3}, false), &c);
  }
}

LoweringRegistrar registrar({
    {"native_batch_norm", native_batch_norm},
    {"native_batch_norm.out", native_batch_norm},
    {"_native_batch_norm_legit", native_batch_norm},
    {"_native_batch_norm_legit.out", native_batch_norm},
    {"_native_batch_norm_legit.no_stats", batch_norm_no_stats},
    {"_native_batch_norm_legit.no_stats_out", batch_norm_no_stats},
    {"_native_batch_norm_legit_no_training", batch_norm_no_training},
    {"native_batch_norm_backward", native_batch_norm_backward},
    {"native_batch_norm_backward.out", native_batch_norm_backward},
    {"batch_norm_backward", native_batch_norm_backward},
    {"native_group_norm", native_group_norm},
    {"native_group_norm_backward", native_group_norm_backward},
});

}  // namespace
}  // namespace torchtpu
