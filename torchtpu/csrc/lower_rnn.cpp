// lower_rnn.cpp: lowerings of the fused LSTM and GRU cells that nn.LSTM, nn.GRU,
// nn.LSTMCell and nn.GRUCell call on an accelerator (ATen's RNN.cpp calls
// _thnn_fused_*_cell for CUDA, XPU and PrivateUse1 tensors, where the CPU computes the
// cell op by op). Also the Meta kernels of the GRU cell and its backward, which PyTorch
// lacks and our engine needs to size the results (and compile mode to trace them).
//
// The maths is that of PyTorch's CUDA kernels (aten/src/ATen/native/cuda/RNN.cu): gates
// are summed in the order input + hidden + input bias + hidden bias, in f32 for bf16/f16
// tensors, and the workspace saved for the backward holds the activated gates (LSTM:
// [B, 4H] = i, f, g, o; GRU: [B, 5H] = r, z, n, h_prev, hidden n gate + its bias). These
// ops also take bf16, which the CUDA kernels do not.
#include <ATen/Functions.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "native.h"

namespace torchtpu {
namespace {

tpu_value_t bin(LowerCtx &ctx, tpu_op_t op, tpu_value_t a, tpu_value_t b) {
  return tpu_graph_binary(ctx.g, op, a, b);
}
tpu_value_t un(LowerCtx &ctx, tpu_op_t op, tpu_value_t a) { return tpu_graph_unary(ctx.g, op, a); }

// Column block k of |n| columns of a [B, C] value.
tpu_value_t block(LowerCtx &ctx, tpu_value_t x, int64_t k, int64_t n) {
  tpu_shape_t s = shape_of(ctx.g, x);
  const int64_t start[2] = {0, k * n}, limit[2] = {s.dims[0], (k + 1) * n}, stride[2] = {1, 1};
  return tpu_graph_slice(ctx.g, x, start, limit, stride);
}

tpu_value_t concat(LowerCtx &ctx, std::vector<tpu_value_t> parts, tpu_dtype_t dt) {
  for (tpu_value_t &p : parts) p = convert(ctx.g, p, dt);
  return tpu_graph_concatenate(ctx.g, parts.data(), static_cast<int>(parts.size()), 1);
}

// 1 - x
tpu_value_t one_minus(LowerCtx &ctx, tpu_value_t x, tpu_dtype_t dt) {
  return bin(ctx, TPU_OP_SUB, full(ctx.g, dt, shape_of(ctx.g, x), 1), x);
}

// input_gates + hidden_gates (+ input_bias + hidden_bias, broadcast over the batch), f32
// for bf16/f16: arguments 0, 1, 3, 4 of both cells.
tpu_value_t gate_sums(LowerCtx &ctx, tpu_dtype_t dt) {
  tpu_value_t x = bin(ctx, TPU_OP_ADD, convert(ctx.g, ctx.v(0), dt), convert(ctx.g, ctx.v(1), dt));
  tpu_shape_t s = shape_of(ctx.g, x);
  for (size_t b : {3, 4}) {
    if (ctx.v(b) != TPU_NO_VALUE) x = bin(ctx, TPU_OP_ADD, x, broadcast_to(ctx.g, convert(ctx.g, ctx.v(b), dt), s));
  }
  return x;
}

// Sum over the batch of a [B, C] gradient already rounded to its dtype (as PyTorch sums
// the grad_gates tensor it returned).
tpu_value_t batch_sum(LowerCtx &ctx, tpu_value_t rounded) {
  tpu_dtype_t out = dtype_of(ctx.g, rounded);
  return convert(ctx.g, reduce_dims(ctx.g, TPU_REDUCE_SUM, convert(ctx.g, rounded, compute_dtype(out)), {0}, false), out);
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?)
//   -> (hy, cy, workspace)
void lstm_cell(LowerCtx &ctx) {
  tpu_dtype_t out = ctx.out_dtype(0), dt = compute_dtype(out);
  tpu_value_t gates = gate_sums(ctx, dt);
  int64_t h = ctx.out_shape(0).dims[1];
  tpu_value_t i = un(ctx, TPU_OP_LOGISTIC, block(ctx, gates, 0, h));
  tpu_value_t f = un(ctx, TPU_OP_LOGISTIC, block(ctx, gates, 1, h));
  tpu_value_t g = un(ctx, TPU_OP_TANH, block(ctx, gates, 2, h));
  tpu_value_t o = un(ctx, TPU_OP_LOGISTIC, block(ctx, gates, 3, h));
  tpu_value_t cx = convert(ctx.g, ctx.v(2), dt);
  tpu_value_t cy = bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_MUL, f, cx), bin(ctx, TPU_OP_MUL, i, g));
  tpu_value_t hy = bin(ctx, TPU_OP_MUL, o, un(ctx, TPU_OP_TANH, cy));
  ctx.results = {convert(ctx.g, hy, out), convert(ctx.g, cy, out), concat(ctx, {i, f, g, o}, out)};
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias?); all undefined when both gradients are.
void lstm_cell_backward(LowerCtx &ctx) {
  ctx.results.assign(3, TPU_NO_VALUE);
  if (!ctx.out_meta[0].defined()) return;
  tpu_dtype_t out = ctx.out_dtype(0), dt = compute_dtype(out);
  tpu_value_t ws = convert(ctx.g, ctx.v(4), dt);
  tpu_shape_t s = shape_of(ctx.g, ctx.v(3));  // cy: [B, H]
  int64_t h = s.dims[1];
  tpu_value_t i = block(ctx, ws, 0, h), f = block(ctx, ws, 1, h), g = block(ctx, ws, 2, h),
              o = block(ctx, ws, 3, h);
  tpu_value_t go = ctx.v(0) != TPU_NO_VALUE ? convert(ctx.g, ctx.v(0), dt) : full(ctx.g, dt, s, 0);
  tpu_value_t gc = ctx.v(1) != TPU_NO_VALUE ? convert(ctx.g, ctx.v(1), dt) : full(ctx.g, dt, s, 0);
  tpu_value_t cx = convert(ctx.g, ctx.v(2), dt);
  tpu_value_t t = un(ctx, TPU_OP_TANH, convert(ctx.g, ctx.v(3), dt));
  tpu_value_t gog = bin(ctx, TPU_OP_MUL, go, t);
  // d cy: through hy = o tanh(cy), plus the incoming cell gradient
  tpu_value_t gcy = bin(ctx, TPU_OP_ADD,
                        bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, go, o),
                            one_minus(ctx, bin(ctx, TPU_OP_MUL, t, t), dt)),
                        gc);
  tpu_value_t gig = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, gcy, g), one_minus(ctx, i, dt)), i);
  tpu_value_t gfg = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, gcy, cx), one_minus(ctx, f, dt)), f);
  tpu_value_t gcg = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, gcy, i), one_minus(ctx, bin(ctx, TPU_OP_MUL, g, g), dt));
  gog = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, gog, one_minus(ctx, o, dt)), o);
  ctx.results[0] = concat(ctx, {gig, gfg, gcg, gog}, out);
  ctx.results[1] = convert(ctx.g, bin(ctx, TPU_OP_MUL, gcy, f), ctx.out_dtype(1));
  if (ctx.out_meta[2].defined()) ctx.results[2] = batch_sum(ctx, ctx.results[0]);
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?)
//   -> (hy, workspace)
void gru_cell(LowerCtx &ctx) {
  tpu_dtype_t out = ctx.out_dtype(0), dt = compute_dtype(out);
  int64_t h = ctx.out_shape(0).dims[1];
  tpu_value_t in = convert(ctx.g, ctx.v(0), dt), hid = convert(ctx.g, ctx.v(1), dt);
  tpu_shape_t s = shape_of(ctx.g, in);
  tpu_value_t rz = bin(ctx, TPU_OP_ADD, block(ctx, in, 0, 2 * h), block(ctx, hid, 0, 2 * h));
  tpu_value_t in_n = block(ctx, in, 2, h), hid_n = block(ctx, hid, 2, h);
  if (ctx.v(3) != TPU_NO_VALUE) {
    tpu_value_t b1 = broadcast_to(ctx.g, convert(ctx.g, ctx.v(3), dt), s);
    tpu_value_t b2 = broadcast_to(ctx.g, convert(ctx.g, ctx.v(4), dt), s);
    rz = bin(ctx, TPU_OP_ADD, bin(ctx, TPU_OP_ADD, rz, block(ctx, b1, 0, 2 * h)), block(ctx, b2, 0, 2 * h));
    in_n = bin(ctx, TPU_OP_ADD, in_n, block(ctx, b1, 2, h));
    hid_n = bin(ctx, TPU_OP_ADD, hid_n, block(ctx, b2, 2, h));
  }
  rz = un(ctx, TPU_OP_LOGISTIC, rz);
  tpu_value_t r = block(ctx, rz, 0, h), z = block(ctx, rz, 1, h);
  tpu_value_t n = un(ctx, TPU_OP_TANH, bin(ctx, TPU_OP_ADD, in_n, bin(ctx, TPU_OP_MUL, r, hid_n)));
  tpu_value_t hx = convert(ctx.g, ctx.v(2), dt);
  tpu_value_t hy = bin(ctx, TPU_OP_ADD, n, bin(ctx, TPU_OP_MUL, z, bin(ctx, TPU_OP_SUB, hx, n)));
  ctx.results = {convert(ctx.g, hy, out), concat(ctx, {r, z, n, hx, hid_n}, ctx.out_dtype(1))};
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias?, grad_hidden_bias?)
void gru_cell_backward(LowerCtx &ctx) {
  tpu_dtype_t out = ctx.out_dtype(0), dt = compute_dtype(out);
  tpu_value_t go = convert(ctx.g, ctx.v(0), dt), ws = convert(ctx.g, ctx.v(1), dt);
  int64_t h = shape_of(ctx.g, go).dims[1];
  tpu_value_t r = block(ctx, ws, 0, h), z = block(ctx, ws, 1, h), n = block(ctx, ws, 2, h),
              hx = block(ctx, ws, 3, h), hn = block(ctx, ws, 4, h);
  tpu_value_t gz = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, go, bin(ctx, TPU_OP_SUB, hx, n)), one_minus(ctx, z, dt)), z);
  tpu_value_t ghx = bin(ctx, TPU_OP_MUL, go, z);
  tpu_value_t gn = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, go, one_minus(ctx, z, dt)),
                       one_minus(ctx, bin(ctx, TPU_OP_MUL, n, n), dt));
  tpu_value_t ghn = bin(ctx, TPU_OP_MUL, gn, r);
  tpu_value_t gr = bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, bin(ctx, TPU_OP_MUL, gn, hn), one_minus(ctx, r, dt)), r);
  ctx.results = {concat(ctx, {gr, gz, gn}, out), concat(ctx, {gr, gz, ghn}, ctx.out_dtype(1)),
                 convert(ctx.g, ghx, ctx.out_dtype(2)), TPU_NO_VALUE, TPU_NO_VALUE};
  if (ctx.out_meta[3].defined()) ctx.results[3] = batch_sum(ctx, ctx.results[0]);
  if (ctx.out_meta[4].defined()) ctx.results[4] = batch_sum(ctx, ctx.results[1]);
}

// ---- Meta kernels of the GRU cell (PyTorch registers the LSTM cell's) -----------------------

at::Tensor optional_arg(const c10::IValue &v) { return v.isNone() ? at::Tensor() : v.toTensor(); }

// PyTorch's checks of a fused cell's arguments (CUDA's checkSizes): |factor| gates.
void check_cell_sizes(const char *op, const at::Tensor &input_gates, const at::Tensor &hidden_gates,
                      const at::Tensor &input_bias, const at::Tensor &hidden_bias,
                      int64_t factor, const at::Tensor &prev_hidden) {
  at::TensorArg ig{input_gates, "input_gates", 1}, hg{hidden_gates, "hidden_gates", 2},
      ib{input_bias, "input_bias", 3}, hb{hidden_bias, "hidden_bias", 4},
      ph{prev_hidden, "prev_hidden", 5};
  at::checkDim(op, ig, 2);
  at::checkSameSize(op, ig, hg);
  int64_t gates = input_gates.size(1);
  if (input_bias.defined()) {
    at::checkDim(op, ib, 1);
    at::checkNumel(op, ib, gates);
    at::checkSameSize(op, ib, hb);
  }
  at::checkDim(op, ph, 2);
  at::checkNumel(op, ph, input_gates.size(0) * gates / factor);
}

// _thnn_fused_gru_cell: (hy like hx, workspace [B, 5H])
void gru_cell_meta(const c10::OperatorHandle &, torch::jit::Stack *stack) {
  auto args = torch::jit::last(*stack, 5).vec();
  const at::Tensor &ig = args[0].toTensor(), &hg = args[1].toTensor(), &hx = args[2].toTensor();
  check_cell_sizes("_thnn_fused_gru_cell", ig, hg, optional_arg(args[3]), optional_arg(args[4]), 3, hx);
  at::Tensor hy = at::empty(hx.sizes(), hx.options());
  at::Tensor ws = at::empty({hx.size(0), hx.size(1) * 5}, hx.options());
  torch::jit::drop(*stack, 5);
  torch::jit::push(*stack, hy, ws);
}

// _thnn_fused_gru_cell_backward: (grad_input_gates, grad_hidden_gates [B, 3H], grad_hx like
// grad_hy, the bias gradients [3H] when has_bias)
void gru_cell_backward_meta(const c10::OperatorHandle &, torch::jit::Stack *stack) {
  auto args = torch::jit::last(*stack, 3).vec();
  const at::Tensor &grad_hy = args[0].toTensor(), &ws = args[1].toTensor();
  const char *op = "fused_gru_cell_backward";
  at::TensorArg g{grad_hy, "grad_hy", 1}, w{ws, "workspace", 2};
  at::checkDim(op, g, 2);
  at::checkSize(op, w, {grad_hy.size(0), grad_hy.size(1) * 5});
  int64_t h = ws.size(1) / 5;
  at::Tensor gi = at::empty({ws.size(0), 3 * h}, ws.options());
  at::Tensor gh = at::empty({ws.size(0), 3 * h}, ws.options());
  at::Tensor ghx = at::empty(grad_hy.sizes(), grad_hy.options());
  at::Tensor gib, ghb;
  if (args[2].toBool()) {
    gib = at::empty({3 * h}, ws.options());
    ghb = at::empty({3 * h}, ws.options());
  }
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, gi, gh, ghx, gib, ghb);
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_thnn_fused_gru_cell", torch::CppFunction::makeFromBoxedFunction<&gru_cell_meta>());
  m.impl("_thnn_fused_gru_cell_backward",
         torch::CppFunction::makeFromBoxedFunction<&gru_cell_backward_meta>());
}

LoweringRegistrar registrar({
    {"_thnn_fused_lstm_cell", lstm_cell},
    {"_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward},
    {"_thnn_fused_gru_cell", gru_cell},
    {"_thnn_fused_gru_cell_backward", gru_cell_backward},
});

}  // namespace
}  // namespace torchtpu
