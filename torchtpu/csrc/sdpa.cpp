// sdpa.cpp: F.scaled_dot_product_attention on tpu as one program forward and one backward,
// through PyTorch's hook for out-of-tree attention kernels, the "overrideable" backend:
//   _fused_sdp_choice (the op, and the DispatchStub that F.scaled_dot_product_attention
//   consults) returns SDPBackend::overrideable when the fused kernel applies, else math
//   _scaled_dot_product_fused_attention_overrideable            forward
//   _scaled_dot_product_fused_attention_overrideable_backward   backward (autograd calls it
//                                                               with the saved logsumexp)
// Each kernel is put together from ops with native lowerings (bmm, amax, exp, sum, ...)
// recorded under one RecordScope: one launch per call in strict mode, part of the pending
// graph in fused mode. Compile mode gets the same two ops: Dynamo's fake tensors report the
// tpu device, so the choice below picks them, and AOTAutograd puts the forward op in the
// forward graph and the backward op in the backward graph; where the weights P are small,
// torchtpu/partition.py swaps the pair for attention_keep_probs and its backward (below),
// so that the forward saves P. The overrideable ops' meta functions are PyTorch's; the
// outputs here have their layouts.
//
// Shapes: q (B, H, L, E), k (B, H, S, E), v (B, H, S, Ev), or 3-D without B; bias
// broadcastable to (B, H, L, S). The flash-attention arithmetic, in f32:
//   scores = q k^T * scale (+ bias; -inf where a bool mask is False, or above the diagonal
//            for is_causal: PyTorch's top-left aligned tril, also when L != S)
//   m = rowmax(scores), P = exp(scores - m), l = rowsum(P)
//   out = (P v) / l                       rounded once to q's dtype
//   logsumexp = m + log l                 f32 (B, H, L) ((1, H, L) for 3-D q, as the meta)
// A row whose keys are all masked (m = -inf; only a mask can do that, so the clamps are
// recorded only with one) gets m = lowest finite and l = 1: weights 0,
// output 0 and logsumexp ~ -3.4e38, as PyTorch's math path (_safe_softmax) gives it, no NaN
// (l >= 1 in every other row, since its largest score contributes exp(0) = 1).
// Backward, from the saved logsumexp (no (L, S) tensor is saved):
//   P = exp(scores - logsumexp), dP = dO v^T, D = rowsum(dO * out), dS = P * (dP - D)
//   dq = dS k * scale, dk = dS^T q * scale, dv = P^T dO, dbias = dS summed to bias's shape
// bf16 / f16: the products multiply the inputs' dtype on the MXU and accumulate in f32
// (bmm.dtype); P and dS are rounded to that dtype for their products, as flash kernels
// do; softmax and the rest are f32; each result is rounded once. f32: f32 products at the
// matmul precision (torch.tpu.precision).
// Dropout, GQA (heads that differ), nested tensors and TORCHTPU_NATIVE=0 take the math path.
// A bool mask: PyTorch's composite converts it to a float bias first; that conversion is
// recorded into the same program (scaled_dot_product_attention below).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "eager.h"
#include "fused.h"
#include "native.h"

namespace torchtpu {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLowest = -3.4028234663852886e38;  // the lowest finite float

bool low_precision(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

// Whether |mask| broadcasts to the scores' shape (|lead| dims, L, S). Sizes are SymInts:
// under Dynamo with dynamic shapes the choice sees symbolic sizes (and guards on them).
bool broadcasts(const at::Tensor &mask, const std::vector<c10::SymInt> &scores) {
  const int64_t n = static_cast<int64_t>(scores.size());
  if (mask.dim() > n) return false;
  for (int64_t i = 1; i <= mask.dim(); i++) {
    const c10::SymInt &m = mask.sym_size(-i);
    if (m != 1 && m != scores[n - i]) return false;
  }
  return true;
}

// Whether the fused kernel computes this call (else the math path does).
bool fused_applies(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                   const std::optional<at::Tensor> &mask, double dropout_p) {
  if (native_disabled() || dropout_p != 0.0) return false;
  if (q.is_nested() || k.is_nested() || v.is_nested()) return false;
  const at::ScalarType t = q.scalar_type();
  if (t != at::kFloat && !low_precision(t)) return false;
  if (k.scalar_type() != t || v.scalar_type() != t) return false;
  for (const at::Tensor *x : {&q, &k, &v}) {
    if (x->device().type() != kTpu || x->device() != q.device() || x->layout() != at::kStrided) {
      return false;
    }
  }
  const int64_t d = q.dim();
  if ((d != 3 && d != 4) || k.dim() != d || v.dim() != d) return false;
  for (int64_t i = 0; i < d - 2; i++) {  // batch and heads: equal (GQA and broadcasts: math)
    if (k.sym_size(i) != q.sym_size(i) || v.sym_size(i) != q.sym_size(i)) return false;
  }
  if (k.sym_size(-1) != q.sym_size(-1) || v.sym_size(-2) != k.sym_size(-2)) return false;
  // 3-D with v's head dim not q's: PyTorch's meta function of the fused op fails on it
  // (alloc_with_matching_layout sorts 4 dims), so compiled code could not trace it
  if (d == 3 && v.sym_size(-1) != q.sym_size(-1)) return false;
  if (q.sym_numel() == 0 || k.sym_numel() == 0 || v.sym_numel() == 0) return false;
  if (mask && mask->defined()) {
    const at::Tensor &m = *mask;
    if (m.is_nested() || m.layout() != at::kStrided || m.device() != q.device()) return false;
    if (m.scalar_type() != at::kBool && !at::isFloatingType(m.scalar_type())) return false;
    std::vector<c10::SymInt> scores(q.sym_sizes().begin(), q.sym_sizes().end() - 1);
    scores.push_back(k.sym_size(-2));
    if (!broadcasts(m, scores)) return false;
  }
  return true;
}

// A mask with is_causal=True is an error (the math path raises it, as documented; the
// CPU raises it too unless its flash kernel takes the call). torch.nn.attention.sdpa_kernel
// can rule out either backend, as on CUDA: with neither, the call raises.
int64_t fused_sdp_choice(const at::Tensor &query, const at::Tensor &key, const at::Tensor &value,
                         const std::optional<at::Tensor> &attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> /*scale*/,
                         bool /*enable_gqa*/) {
  const at::Context &ctx = at::globalContext();
  const bool masked = attn_mask && attn_mask->defined();
  if (ctx.userEnabledOverrideableSDP() && !(masked && is_causal) &&
      fused_applies(query, key, value, attn_mask, dropout_p)) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  return static_cast<int64_t>(ctx.userEnabledMathSDP() ? at::SDPBackend::math
                                                       : at::SDPBackend::error);
}

// The checks of the fused ops' own entry (they can be called directly).
void check_inputs(const char *op, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v) {
  const int64_t d = q.dim();
  TORCH_CHECK(d == 3 || d == 4, op, ": query must be 3-D or 4-D, got ", d, "-D");
  TORCH_CHECK(k.dim() == d && v.dim() == d, op, ": query, key and value must have the same "
              "number of dims, got ", d, ", ", k.dim(), " and ", v.dim());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), op,
              ": query, key and value must have the same dtype, got ", q.scalar_type(), ", ",
              k.scalar_type(), " and ", v.scalar_type());
  const at::ScalarType t = q.scalar_type();
  TORCH_CHECK(t == at::kFloat || low_precision(t), op, ": expected float32, bfloat16 or float16 "
              "inputs, got ", t);
  for (int64_t i = 0; i < d - 2; i++) {
    TORCH_CHECK(k.size(i) == q.size(i) && v.size(i) == q.size(i), op, ": query ", q.sizes(),
                ", key ", k.sizes(), " and value ", v.sizes(), " must agree in batch and heads");
  }
  TORCH_CHECK(k.size(-1) == q.size(-1), op, ": query's last dim ", q.size(-1),
              " differs from key's ", k.size(-1));
  TORCH_CHECK(v.size(-2) == k.size(-2), op, ": key has ", k.size(-2), " positions, value ",
              v.size(-2));
}

// A batched product: bf16 / f16 operands give the f32 result of the MXU's accumulation.
at::Tensor product(const at::Tensor &a, const at::Tensor &b) {
  return low_precision(a.scalar_type()) ? at::bmm(a, b, at::kFloat) : at::bmm(a, b);
}

// The inputs as batches of matrices (N, rows, cols), N = B * H (a copy only for a view
// whose batch dims cannot merge, such as GPT's heads: it becomes a transpose in the graph).
struct Batched {
  std::vector<int64_t> lead;  // (B, H) or (H)
  int64_t n, L, S, E, Ev;
  at::Tensor q, k, v;         // (N, L, E), (N, S, E), (N, S, Ev)

  Batched(const at::Tensor &q4, const at::Tensor &k4, const at::Tensor &v4)
      : lead(q4.sizes().begin(), q4.sizes().end() - 2),
        n(c10::multiply_integers(lead)), L(q4.size(-2)), S(k4.size(-2)), E(q4.size(-1)),
        Ev(v4.size(-1)), q(q4.reshape({n, L, E})), k(k4.reshape({n, S, E})),
        v(v4.reshape({n, S, Ev})) {}

  std::vector<int64_t> shape(int64_t rows, int64_t cols) const {
    std::vector<int64_t> s = lead;
    s.push_back(rows);
    s.push_back(cols);
    return s;
  }
};

// scores = q k^T * scale, masked and biased: (lead..., L, S) f32
at::Tensor scores(const Batched &x, const at::Tensor &bias, bool is_causal, double scale) {
  at::Tensor s = product(x.q, x.k.transpose(1, 2)).view(x.shape(x.L, x.S)).mul(scale);
  if (bias.defined()) {
    s = bias.scalar_type() == at::kBool ? s.masked_fill(bias.logical_not(), -kInf) : s.add(bias);
  }
  if (is_causal) {  // top-left aligned: query i sees keys 0..i
    const at::Tensor above = at::ones({x.L, x.S}, x.q.options().dtype(at::kBool)).triu(1);
    s = s.masked_fill(above, -kInf);
  }
  return s;
}

double softmax_scale(const at::Tensor &q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

// An output laid out as the meta kernel lays it out for |query| (alloc_with_matching_layout
// in torch/_meta_registrations.py): query's strides if the shapes agree, else query's dim
// order.
at::Tensor like_query(const at::Tensor &query, at::IntArrayRef shape, at::ScalarType dtype) {
  if (query.sizes() == shape) return at::empty_like(query, query.options().dtype(dtype));
  std::vector<int64_t> order(query.dim()), strides(query.dim());
  for (int64_t i = 0; i < query.dim(); i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= shape[*it];
  }
  return at::empty_strided(shape, strides, query.options().dtype(dtype));
}

// |value| (f32 or the result dtype) as a tensor of |like|'s dtype and empty_like's layout:
// itself when it already is one, else one copy (which also rounds).
at::Tensor as_result(const at::Tensor &value, const at::Tensor &like) {
  at::Tensor out = at::empty_like(like);
  if (value.scalar_type() == out.scalar_type() && value.strides() == out.strides()) return value;
  return out.copy_(value);
}

// The forward's arithmetic; writes |out|, returns logsumexp (lead..., L) f32. With |probs|,
// also the normalized weights P = exp(scores - m) / l (lead..., L, S) f32 into *probs, and
// out = P v (the P the backward then reads) instead of (exp(scores - m) v) / l. Its
// intermediates die when it returns, before the scope's flush: they are never written.
at::Tensor attend(const at::Tensor &query, const at::Tensor &key, const at::Tensor &value,
                  const at::Tensor &bias, bool is_causal, double scale, at::Tensor out,
                  at::Tensor *probs = nullptr) {
  const Batched x(query, key, value);
  const at::Tensor s = scores(x, bias, is_causal, scale);           // (lead..., L, S) f32
  // only a mask can mask every key of a row (is_causal leaves each row its first key):
  // without one the clamps are not recorded (each recorded op costs the host ~4 us)
  at::Tensor m = s.amax(-1);                                        // (lead..., L)
  if (bias.defined()) m = m.clamp_min(kLowest);
  const at::Tensor e = s.sub(m.unsqueeze(-1)).exp();                // (lead..., L, S)
  at::Tensor l = e.sum(-1);                                         // (lead..., L)
  if (bias.defined()) l = l.clamp_min(1.0);
  const at::Tensor w = probs ? (*probs = e.div(l.unsqueeze(-1))) : e;  // the weights v takes
  const at::Tensor pv =
      product(w.to(value.scalar_type()).view({x.n, x.L, x.S}), x.v).view(out.sizes());
  if (probs) {
    out.copy_(pv);                                                  // rounded once
  } else {
    at::div_out(out, pv, l.unsqueeze(-1));                          // rounded once
  }
  return m.add(l.log());
}

// P's shape, (lead..., L, S); and the output's, query's with value's last dim.
std::vector<int64_t> probs_shape(const at::Tensor &query, const at::Tensor &key) {
  std::vector<int64_t> shape(query.sizes().begin(), query.sizes().end() - 1);
  shape.push_back(key.size(-2));
  return shape;
}

std::vector<int64_t> out_shape_of(const at::Tensor &query, const at::Tensor &value) {
  std::vector<int64_t> shape(query.sizes().begin(), query.sizes().end());
  shape.back() = value.size(-1);
  return shape;
}

using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
                                 c10::SymInt, at::Tensor, at::Tensor, at::Tensor>;

ForwardResult forward(const at::Tensor &query, const at::Tensor &key, const at::Tensor &value,
                      const std::optional<at::Tensor> &attn_bias, double dropout_p,
                      bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  constexpr const char *op = "_scaled_dot_product_fused_attention_overrideable";
  check_inputs(op, query, key, value);
  TORCH_CHECK(dropout_p == 0.0, op, ": dropout is not supported on tpu (dropout_p = ",
              dropout_p, "); scaled_dot_product_attention takes the math path for it");
  TORCH_CHECK(!return_debug_mask, op, ": return_debug_mask is not supported on tpu");
  const at::Tensor bias = attn_bias ? *attn_bias : at::Tensor();
  const int64_t L = query.size(-2);
  const std::vector<int64_t> lse_shape =
      query.dim() == 4 ? std::vector<int64_t>{query.size(0), query.size(1), L}
                       : std::vector<int64_t>{1, query.size(0), L};
  at::Tensor out = like_query(query, out_shape_of(query, value), query.scalar_type());
  at::Tensor lse;
  if (out.numel() == 0 || key.size(-2) == 0) {  // nothing to attend to: zeros, as math gives
    out.zero_();
    lse = at::full(lse_shape, kLowest, query.options().dtype(at::kFloat));
  } else {
    RecordScope record(query.device().index(), "fused attention", /*whole=*/true);
    lse = attend(query, key, value, bias, is_causal, softmax_scale(query, scale), out)
              .view(lse_shape);
    record.finish();
  }
  const at::Tensor seed = at::empty({}, query.options().dtype(at::kLong));
  const at::Tensor offset = at::empty({}, query.options().dtype(at::kLong));
  return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(L), c10::SymInt(key.size(-2)),
          seed, offset, at::Tensor()};
}

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The backward's arithmetic (intermediates die on return, as in attend).
Grads attend_backward(const at::Tensor &grad_out, const at::Tensor &query, const at::Tensor &key,
                      const at::Tensor &value, const at::Tensor &bias, bool want_bias,
                      const at::Tensor &out, const at::Tensor &logsumexp, bool is_causal,
                      double scale, const at::Tensor &probs = at::Tensor()) {
  const Batched x(query, key, value);
  const at::ScalarType t = query.scalar_type();
  // P (lead..., L, S) f32: the forward's, or recomputed from the scores and logsumexp
  const at::Tensor p = probs.defined()
                           ? probs.view(x.shape(x.L, x.S))
                           : scores(x, bias, is_causal, scale)
                                 .sub(logsumexp.view(x.shape(x.L, 1)))
                                 .exp();
  const at::Tensor dout = grad_out.reshape({x.n, x.L, x.Ev});
  const at::Tensor dp = product(dout, x.v.transpose(1, 2)).view(x.shape(x.L, x.S));
  // D = rowsum(P * dP) = rowsum(dO * out): with the forward's P, the first (a softmax
  // backward over rows of S, one fused kernel with dS below); else the second, over rows of
  // Ev (flash attention's, no (L, S) product for it)
  const at::Tensor d =
      probs.defined()
          ? p.mul(dp).sum(-1)
          : (low_precision(t) ? grad_out.to(at::kFloat) : grad_out).mul(out).sum(-1);
  const at::Tensor ds = p.mul(dp.sub(d.unsqueeze(-1)));                     // f32
  const at::Tensor ds_scaled = ds.mul(scale).to(t).view({x.n, x.L, x.S});
  const at::Tensor p_t = p.to(t).view({x.n, x.L, x.S}).transpose(1, 2);      // (N, S, L)
  // each product is rounded once to the inputs' dtype (bf16 operands accumulate in f32)
  const at::Tensor dq = at::bmm(ds_scaled, x.k).view(x.shape(x.L, x.E));
  const at::Tensor dk = at::bmm(ds_scaled.transpose(1, 2), x.q).view(x.shape(x.S, x.E));
  const at::Tensor dv = at::bmm(p_t, dout).view(x.shape(x.S, x.Ev));
  at::Tensor grad_bias;
  if (want_bias) grad_bias = as_result(ds.sum_to_size(bias.sizes()), bias);
  return {as_result(dq, query), as_result(dk, key), as_result(dv, value), grad_bias};
}

Grads backward(const at::Tensor &grad_out, const at::Tensor &query, const at::Tensor &key,
               const at::Tensor &value, const at::Tensor &attn_bias,
               std::array<bool, 4> grad_input_mask, const at::Tensor &out,
               const at::Tensor &logsumexp, const at::Tensor & /*cum_seq_q*/,
               const at::Tensor & /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
               double dropout_p, bool is_causal, const at::Tensor & /*philox_seed*/,
               const at::Tensor & /*philox_offset*/, std::optional<double> scale) {
  constexpr const char *op = "_scaled_dot_product_fused_attention_overrideable_backward";
  check_inputs(op, query, key, value);
  TORCH_CHECK(dropout_p == 0.0, op, ": dropout is not supported on tpu");
  const bool want_bias = grad_input_mask[3] && attn_bias.defined();
  if (query.numel() == 0 || key.numel() == 0 || value.numel() == 0 || !grad_out.defined()) {
    at::Tensor gb = want_bias ? at::zeros_like(attn_bias) : at::Tensor();
    return {at::zeros_like(query), at::zeros_like(key), at::zeros_like(value), gb};
  }
  RecordScope record(query.device().index(), "fused attention backward", /*whole=*/true);
  Grads grads = attend_backward(grad_out, query, key, value, attn_bias, want_bias, out,
                                logsumexp, is_causal, softmax_scale(query, scale));
  record.finish();
  return grads;
}

// ---- Attention that keeps its weights (compile mode) ------------------------------------
// torchtpu::attention_keep_probs returns P beside the output, and
// torchtpu::attention_keep_probs_backward takes that P instead of recomputing it from q, k
// and the logsumexp (so it needs neither, nor the mask or the output: D = rowsum(P dP)):
// one product and an exp over (L, S) fewer per backward (the GPT
// example's backward graph: 29 us of about 1000 per layer on the host). Compile mode
// swaps the overrideable pair in a joint graph for these when P is no larger than q, k and
// v together (torchtpu/partition.py), so the forward saves P; longer sequences keep the
// flash-style recompute. No bias (a mask's gradient stays with the overrideable pair).
std::tuple<at::Tensor, at::Tensor> forward_keep_probs(const at::Tensor &query,
                                                      const at::Tensor &key,
                                                      const at::Tensor &value, bool is_causal,
                                                      std::optional<double> scale) {
  check_inputs("attention_keep_probs", query, key, value);
  at::Tensor out = like_query(query, out_shape_of(query, value), query.scalar_type());
  at::Tensor probs;
  if (out.numel() == 0 || key.size(-2) == 0) {  // nothing to attend to: zeros
    out.zero_();
    return {out, at::zeros(probs_shape(query, key), query.options().dtype(at::kFloat))};
  }
  RecordScope record(query.device().index(), "fused attention", /*whole=*/true);
  attend(query, key, value, at::Tensor(), is_causal, softmax_scale(query, scale), out, &probs);
  record.finish();
  return {out, probs};
}

std::tuple<at::Tensor, at::Tensor> forward_keep_probs_meta(const at::Tensor &query,
                                                           const at::Tensor &key,
                                                           const at::Tensor &value,
                                                           bool /*is_causal*/,
                                                           std::optional<double> /*scale*/) {
  return {like_query(query, out_shape_of(query, value), query.scalar_type()),
          at::empty(probs_shape(query, key), query.options().dtype(at::kFloat))};
}

using QkvGrads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

QkvGrads backward_keep_probs(const at::Tensor &grad_out, const at::Tensor &query,
                             const at::Tensor &key, const at::Tensor &value,
                             const at::Tensor &probs, std::optional<double> scale) {
  constexpr const char *op = "attention_keep_probs_backward";
  check_inputs(op, query, key, value);
  TORCH_CHECK(probs.scalar_type() == at::kFloat &&
                  probs.sizes() == at::IntArrayRef(probs_shape(query, key)),
              op, ": probs must be float32 of shape ", at::IntArrayRef(probs_shape(query, key)),
              " (attention_keep_probs's second output), got ", probs.scalar_type(), " ",
              probs.sizes());
  if (query.numel() == 0 || key.numel() == 0 || value.numel() == 0) {
    return {at::zeros_like(query), at::zeros_like(key), at::zeros_like(value)};
  }
  RecordScope record(query.device().index(), "fused attention backward", /*whole=*/true);
  // (the mask, the output and the logsumexp are what recomputing P would read)
  Grads g = attend_backward(grad_out, query, key, value, at::Tensor(), false, at::Tensor(),
                            at::Tensor(), false, softmax_scale(query, scale), probs);
  record.finish();
  return {std::get<0>(g), std::get<1>(g), std::get<2>(g)};
}

QkvGrads backward_keep_probs_meta(const at::Tensor & /*grad_out*/, const at::Tensor &query,
                                  const at::Tensor &key, const at::Tensor &value,
                                  const at::Tensor & /*probs*/, std::optional<double> /*scale*/) {
  return {at::empty_like(query), at::empty_like(key), at::empty_like(value)};
}

// F.scaled_dot_product_attention itself (PyTorch's composite), recorded as one program when
// it will call the fused op with a bool mask: the composite first turns the mask into a
// float bias (zeros_like, logical_not, masked_fill_), three more launches in strict mode
// otherwise. Registered for AutogradPrivateUse1 (and PrivateUse1, for inference mode): the
// composite's ops dispatch from the top, so autograd records them as it would.
at::Tensor scaled_dot_product_attention(const at::Tensor &query, const at::Tensor &key,
                                        const at::Tensor &value,
                                        const std::optional<at::Tensor> &attn_mask,
                                        double dropout_p, bool is_causal,
                                        std::optional<double> scale, bool enable_gqa) {
  const bool bool_mask = attn_mask && attn_mask->defined() &&
                         attn_mask->scalar_type() == at::kBool;
  if (!bool_mask || query.device().type() != kTpu ||
      fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) !=
          static_cast<int64_t>(at::SDPBackend::overrideable)) {
    return at::native::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
                                                    is_causal, scale, enable_gqa);
  }
  RecordScope record(query.device().index(), "fused attention", /*whole=*/true);
  at::Tensor out = at::native::scaled_dot_product_attention(query, key, value, attn_mask,
                                                           dropout_p, is_causal, scale,
                                                           enable_gqa);
  record.finish();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(forward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(backward));
  m.impl("scaled_dot_product_attention", TORCH_FN(scaled_dot_product_attention));
}

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def("attention_keep_probs(Tensor query, Tensor key, Tensor value, bool is_causal, "
        "float? scale=None) -> (Tensor, Tensor)");
  m.def("attention_keep_probs_backward(Tensor grad_out, Tensor query, Tensor key, "
        "Tensor value, Tensor probs, float? scale=None) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("attention_keep_probs", TORCH_FN(forward_keep_probs));
  m.impl("attention_keep_probs_backward", TORCH_FN(backward_keep_probs));
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("attention_keep_probs", TORCH_FN(forward_keep_probs_meta));
  m.impl("attention_keep_probs_backward", TORCH_FN(backward_keep_probs_meta));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("scaled_dot_product_attention", TORCH_FN(scaled_dot_product_attention));
}

}  // namespace torchtpu

namespace at::native {
// What F.scaled_dot_product_attention consults (a DispatchStub by device type, not the op).
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchtpu::fused_sdp_choice);
}  // namespace at::native
