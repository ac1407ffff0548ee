// lower_matmul.cpp: lowerings of the MXU ops: mm, bmm (also with a result dtype), addmm,
// baddbmm, addbmm, mv, dot.
//
// Each is one dot_general at the current precision (torch.tpu.precision): f32 operands
// take 1/3/6 bf16 passes, bf16 operands one pass; accumulation is f32. Epilogues (beta *
// self + alpha * product) run in f32 and the engine rounds to the output dtype once.
#include "native.h"

namespace torchtpu {
namespace {

// lhs [B..., M, K] x rhs [B..., K, N] with |batch| leading batch dims.
tpu_value_t matmul(LowerCtx &ctx, tpu_value_t a, tpu_value_t b, int batch, tpu_dtype_t acc) {
  tpu_shape_t as = shape_of(ctx.g, a), bs = shape_of(ctx.g, b);
  tpu_dot_attrs_t d{};
  d.num_batch = batch;
  for (int i = 0; i < batch; i++) d.lhs_batch[i] = d.rhs_batch[i] = i;
  d.num_contract = 1;
  d.lhs_contract[0] = as.rank - 1;
  d.rhs_contract[0] = bs.rank == batch + 1 ? batch : bs.rank - 2;
  d.precision = ctx.precision;
  return tpu_graph_dot_general(ctx.g, a, b, &d, acc);
}

// The accumulation/result dtype of a product: f32 for low-precision floats.
tpu_dtype_t product_dtype(const LowerCtx &ctx) { return compute_dtype(ctx.out_dtype()); }

void mm_out(LowerCtx &ctx) { ctx.results = {matmul(ctx, ctx.v(0), ctx.v(1), 0, product_dtype(ctx))}; }
void bmm_out(LowerCtx &ctx) { ctx.results = {matmul(ctx, ctx.v(0), ctx.v(1), 1, product_dtype(ctx))}; }
void mv_out(LowerCtx &ctx) { ctx.results = {matmul(ctx, ctx.v(0), ctx.v(1), 0, product_dtype(ctx))}; }

// mm / bmm with a result dtype (aten::mm.dtype, bmm.dtype): bf16 or f16 operands give an
// f32 result (the MXU's accumulation, not rounded: fused attention's scores), or their own
// dtype. CUDA's rule for out_dtype (the CPU has no kernel).
void mm_dtype(LowerCtx &ctx) {
  const at::ScalarType in = ctx.tensor(0).scalar_type(), out = ctx.out_meta[0].scalar_type();
  TORCH_CHECK(out == in || (out == at::kFloat && (in == at::kHalf || in == at::kBFloat16)),
              "out_dtype must be the same as input dtype or fp32 for fp16/bf16 inputs");
  const int batch = ctx.tensor(0).dim() == 3 ? 1 : 0;
  ctx.results = {matmul(ctx, ctx.v(0), ctx.v(1), batch, product_dtype(ctx))};
}

void dot(LowerCtx &ctx) {  // 1-D . 1-D
  tpu_dot_attrs_t d{};
  d.num_contract = 1;
  d.precision = ctx.precision;
  ctx.results = {tpu_graph_dot_general(ctx.g, ctx.v(0), ctx.v(1), &d, product_dtype(ctx))};
}

// linalg_cross(self, other, dim): a x b along |dim| (size 3), operands broadcast
void linalg_cross(LowerCtx &ctx) {
  tpu_dtype_t dt = product_dtype(ctx);
  tpu_shape_t shape = ctx.out_shape();
  const int dim = static_cast<int>(wrap_dim(ctx.arg(2).toInt(), shape.rank));
  tpu_value_t a = broadcast_to(ctx.g, convert(ctx.g, ctx.v(0), dt), shape);
  tpu_value_t b = broadcast_to(ctx.g, convert(ctx.g, ctx.v(1), dt), shape);
  auto component = [&](tpu_value_t v, int i) {  // v[..., i % 3, ...] along dim, kept as size 1
    int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK], stride[TPU_MAX_RANK];
    for (int d = 0; d < shape.rank; d++) {
      limit[d] = shape.dims[d];
      stride[d] = 1;
    }
    start[dim] = i % 3;
    limit[dim] = i % 3 + 1;
    return tpu_graph_slice(ctx.g, v, start, limit, stride);
  };
  tpu_value_t parts[3];
  for (int i = 0; i < 3; i++) {
    tpu_value_t l = tpu_graph_binary(ctx.g, TPU_OP_MUL, component(a, i + 1), component(b, i + 2));
    tpu_value_t r = tpu_graph_binary(ctx.g, TPU_OP_MUL, component(a, i + 2), component(b, i + 1));
    parts[i] = tpu_graph_binary(ctx.g, TPU_OP_SUB, l, r);
  }
  ctx.results = {tpu_graph_concatenate(ctx.g, parts, 3, dim)};
}

// beta * self + alpha * |p| (the product of args 1 and 2, in dtype |dt|); args (self, m1,
// m2, beta, alpha)
void add_scaled(LowerCtx &ctx, tpu_value_t p, tpu_dtype_t dt) {
  tpu_shape_t shape = ctx.out_shape();
  tpu_value_t alpha = broadcast_to(ctx.g, convert(ctx.g, ctx.v(4), dt), shape);
  tpu_value_t beta = broadcast_to(ctx.g, convert(ctx.g, ctx.v(3), dt), shape);
  tpu_value_t self = broadcast_to(ctx.g, convert(ctx.g, ctx.v(0), dt), shape);
  tpu_value_t scaled = tpu_graph_binary(ctx.g, TPU_OP_MUL, p, alpha);
  // beta == 0 must ignore self entirely (NaN in self does not propagate), as in PyTorch
  tpu_value_t zero = full(ctx.g, dt, shape, 0);
  tpu_value_t bself = tpu_graph_select(ctx.g, tpu_graph_compare(ctx.g, TPU_CMP_EQ, beta, zero),
                                       zero, tpu_graph_binary(ctx.g, TPU_OP_MUL, self, beta));
  ctx.results = {tpu_graph_binary(ctx.g, TPU_OP_ADD, scaled, bself)};
}
void add_product(LowerCtx &ctx, int batch) {
  tpu_dtype_t dt = product_dtype(ctx);
  add_scaled(ctx, matmul(ctx, ctx.v(1), ctx.v(2), batch, dt), dt);
}
void addmm_out(LowerCtx &ctx) { add_product(ctx, 0); }
void baddbmm_out(LowerCtx &ctx) { add_product(ctx, 1); }

// addbmm(self, batch1 [B, M, K], batch2 [B, K, N], beta, alpha): the sum over b of
// batch1[b] @ batch2[b] is one dot_general contracting both b and k
void addbmm(LowerCtx &ctx) {
  tpu_dtype_t dt = product_dtype(ctx);
  tpu_dot_attrs_t d{};
  d.num_contract = 2;
  d.lhs_contract[0] = d.rhs_contract[0] = 0;
  d.lhs_contract[1] = 2;
  d.rhs_contract[1] = 1;
  d.precision = ctx.precision;
  add_scaled(ctx, tpu_graph_dot_general(ctx.g, ctx.v(1), ctx.v(2), &d, dt), dt);
}

LoweringRegistrar registrar({
    {"mm.out", mm_out},
    {"bmm.out", bmm_out},
    {"mm.dtype", mm_dtype},
    {"bmm.dtype", mm_dtype},
    {"mv.out", mv_out},
    {"dot", dot},
    {"vdot", dot},  // of real vectors (complex ones: lower_complex.cpp)
    {"vdot.out", dot},
    {"linalg_cross.out", linalg_cross},
    {"addmm.out", addmm_out},
    {"baddbmm.out", baddbmm_out},
    {"addbmm", addbmm},
    {"addbmm.out", addbmm},
    {"addmv.out", addmm_out},
});

}  // namespace
}  // namespace torchtpu
