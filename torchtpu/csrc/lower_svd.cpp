// lower_svd.cpp: torch.linalg.svd, svdvals and torch.svd natively, through
// aten::_linalg_svd (all of them reach it) onto the IR's SVD (the one-sided Jacobi method;
// kernel in svd.c): one node gives U, V and, as one more row, the singular values in
// descending order. A wide matrix is decomposed as its transpose (A^T = U' S V'^T gives
// U = V' and Vh = U'^T). The singular values match the CPU's to rounding; each pair of
// singular vectors is the CPU's up to a common sign (PyTorch documents that they are unique
// only up to sign), which the backward formula (svd_backward: matmuls and elementwise ops,
// all native) does not depend on for losses that are themselves sign-free.
//
// Errors: the CPU raises torch.linalg.LinAlgError for a matrix with a NaN (naming the batch
// element in a batch); an infinity gives NaN results. The tpu kernel checks the same before
// it runs (one synchronizing read, as CUDA's svd reads its info); compiled graphs and
// exported programs have no such check (it would read a value on the host): there the
// results are NaN.
//
// Native: f32/f64, reduced U and V (full_matrices=False, or square matrices, or no vectors
// at all), up to kSvdNativeWork; full U or V of a non-square matrix, a driver (CUDA
// only), and larger matrices take the CPU fallback (LAPACK).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <string>

#include "eager.h"
#include "fused.h"
#include "lower_linalg.h"

namespace torchtpu {
namespace {

// Past m n min(m, n) multiply-adds per matrix (32 x 32) the Jacobi method (about ten
// sweeps of 3 m n^2) loses to LAPACK's bidiagonalization by more than the fallback's round
// trip costs (bench/bench_linalg.py: a 32 x 32 matrix 0.4x, a 256 x 256 one 0.02x).
constexpr double kSvdNativeWork = 32 * 32 * 32;

// _linalg_svd(A, full_matrices, compute_uv, *, driver) -> (U, S, Vh)
void svd(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg.svd");
  const bool full_matrices = ctx.arg(1).toBool(), compute_uv = ctx.arg(2).toBool();
  if (!ctx.arg(3).isNone()) throw Unsupported("linalg.svd with a driver");  // CPU: an error
  tpu_graph_t *g = ctx.g;
  const tpu_shape_t s = shape_of(g, ctx.v(0));
  const int64_t m = s.dims[s.rank - 2], n = s.dims[s.rank - 1], k = std::min(m, n);
  if (static_cast<double>(m) * n * k > kSvdNativeWork) {
    throw Unsupported("linalg.svd of matrices above the native size");
  }
  if (compute_uv && full_matrices && m != n) {
    throw Unsupported("linalg.svd with full U or V of a non-square matrix");
  }
  ctx.results = {full(g, dt, ctx.out_shape(0), 0), full(g, dt, ctx.out_shape(1), 0),
                 full(g, dt, ctx.out_shape(2), 0)};
  if (numel(s) == 0) return;
  const bool wide = m < n;
  const int64_t rows = wide ? n : m;  // of the matrix decomposed: rows x k
  tpu_value_t e = tpu_graph_svd(g, wide ? transposed(g, ctx.v(0)) : ctx.v(0));
  const tpu_shape_t s_shape = ctx.out_shape(1);
  ctx.results[1] = tpu_graph_reshape(g, rows_of(g, e, rows + k, 1), &s_shape);
  if (!compute_uv) return;
  tpu_value_t u = rows_of(g, e, 0, rows), v = rows_of(g, e, rows, k);  // rows x k, k x k
  ctx.results[0] = wide ? v : u;
  ctx.results[2] = transposed(g, wide ? u : v);
}

// The tpu kernel of _linalg_svd(.U): the CPU's error for a matrix with a NaN (found in one
// synchronizing read of a flag per matrix; an infinity gives NaN results without an error,
// as on the CPU), then the native run.
void svd_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const at::Tensor a = torch::jit::peek(*stack, 0, op.schema().arguments().size()).toTensor();
  if (native_disabled()) {
    run_cpu_fallback(op, stack);
    return;
  }
  if (a.dim() >= 2 && a.numel() > 0 && !capturing(a.device().index())) {
    const at::Tensor has_nan = at::isnan(a).flatten(-2).any(-1).reshape({-1}).cpu();  // the read
    const bool *flags = has_nan.const_data_ptr<bool>();
    for (int64_t i = 0; i < has_nan.numel(); i++) {
      TORCH_CHECK_LINALG(!flags[i], "linalg.svd: ",
                         a.dim() > 2 ? "(Batch element " + std::to_string(i) + "): " : "",
                         "The algorithm failed to converge because the input matrix contained "
                         "non-finite values.");
    }
  }
  run_native(op, stack);
}

struct Registrar {
  Registrar() {
    static torch::Library *lib = new torch::Library(torch::Library::IMPL, "aten",
                                                    c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    for (const char *name : {"_linalg_svd", "_linalg_svd.U"}) {
      register_lowering_only(name, svd);
      lib->impl(name, torch::CppFunction::makeFromBoxedFunction<&svd_kernel>());
    }
  }
};
Registrar registrar;

}  // namespace
}  // namespace torchtpu
