// lower_eigh.cpp: torch.linalg.eigh and eigvalsh natively, through aten::_linalg_eigh (both
// reach it) onto the IR's EIGH (the Jacobi method; kernel in eigh.c): one node gives the
// eigenvectors and, as one more row, the eigenvalues in ascending order. UPLO="U" factors
// A^T, whose lower triangle is A's upper one. The eigenvalues match the CPU's to rounding;
// the eigenvectors are the same up to sign (each is unique only up to sign, and within a
// repeated eigenvalue up to rotation), which PyTorch documents: the backward formula
// (linalg_eig_backward: matmuls and elementwise ops, all native) does not depend on it.
//
// Errors: the CPU raises torch.linalg.LinAlgError when LAPACK fails to converge, which a
// NaN or infinity in the matrix makes it do; the kernel gives NaN eigenvalues for those.
// The tpu kernel of _linalg_eigh checks them after it runs (one synchronizing read, as
// CUDA's eigh does for its info) and raises the CPU's error through _linalg_check_errors.
// Compiled graphs and exported programs have no such check (it would read a value on the
// host): there the eigenvalues are NaN.
//
// Matrices up to kEighNativeSize and f32/f64 only; others take the CPU fallback (LAPACK).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "eager.h"
#include "fused.h"
#include "lower_linalg.h"

namespace torchtpu {
namespace {

// Past this order the Jacobi method (about 30 n^3 multiply-adds in f64) loses to LAPACK's
// tridiagonal reduction by more than the fallback's round trip costs (bench/bench_linalg.py).
constexpr int64_t kEighNativeSize = 32;

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors)
void eigh(LowerCtx &ctx) {
  tpu_dtype_t dt = linalg_operand(ctx, 0, "linalg.eigh");
  const std::string &uplo = ctx.arg(1).toStringRef();
  if (uplo != "L" && uplo != "U") throw Unsupported("linalg.eigh UPLO " + uplo);  // CPU: error
  const bool compute_v = ctx.arg(2).toBool();
  tpu_graph_t *g = ctx.g;
  tpu_shape_t s = shape_of(g, ctx.v(0));
  const int64_t n = s.dims[s.rank - 1];
  if (n > kEighNativeSize) throw Unsupported("linalg.eigh of matrices above the native size");
  ctx.results = {full(g, dt, ctx.out_shape(0), 0), full(g, dt, ctx.out_shape(1), 0)};
  if (numel(s) == 0) return;
  tpu_value_t a = uplo == "L" ? ctx.v(0) : transposed(g, ctx.v(0));
  tpu_value_t e = tpu_graph_eigh(g, a);
  const tpu_shape_t w_shape = ctx.out_shape(0);
  ctx.results[0] = tpu_graph_reshape(g, rows_of(g, e, n, 1), &w_shape);
  if (compute_v) ctx.results[1] = rows_of(g, e, 0, n);
}

// The tpu kernel of _linalg_eigh(.eigenvalues): the native run, then the CPU's error for
// the matrices whose eigenvalues came out NaN.
void eigh_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const at::Tensor a = torch::jit::peek(*stack, 0, op.schema().arguments().size()).toTensor();
  const bool is_matrix = a.dim() == 2;
  if (native_disabled()) {
    run_cpu_fallback(op, stack);
    return;
  }
  run_native(op, stack);
  if (capturing(a.device().index())) return;  // a compiled graph or an export: no host read
  const at::Tensor w = torch::jit::peek(*stack, 0, op.schema().returns().size()).toTensor();
  if (w.numel() == 0) return;
  const at::Tensor info = at::isnan(w).sum(-1, false, at::kInt);
  at::_linalg_check_errors(info, "linalg.eigh", is_matrix);
}

struct Registrar {
  Registrar() {
    static torch::Library *lib = new torch::Library(torch::Library::IMPL, "aten",
                                                    c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    for (const char *name : {"_linalg_eigh", "_linalg_eigh.eigenvalues"}) {
      register_lowering_only(name, eigh);
      lib->impl(name, torch::CppFunction::makeFromBoxedFunction<&eigh_kernel>());
    }
  }
};
Registrar registrar;

}  // namespace
}  // namespace torchtpu
