"""PyTorch's own OpInfo database as a conformance suite: a representative subset of op_db,
instantiated for the tpu device with PyTorch's device-generic test machinery, each sample
compared with the CPU result. tools/opinfo_report.py runs all of op_db.
"""
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

from opinfo_check import run_sample

SUBSET = {
    "add", "sub", "mul", "div", "true_divide", "abs", "neg", "exp", "log", "sqrt", "rsqrt",
    "tanh", "sigmoid", "sin", "cos", "erf", "floor", "ceil", "round", "sign", "clamp",
    "maximum", "minimum", "pow", "where", "lerp", "addcmul", "addcdiv", "eq", "ne", "lt",
    "gt", "le", "ge", "sum", "mean", "amax", "amin", "argmax", "argmin", "var", "std",
    "prod", "logsumexp", "cumsum", "softmax", "log_softmax", "mm", "bmm", "addmm", "matmul",
    "nn.functional.linear", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.layer_norm", "nn.functional.cross_entropy", "nn.functional.mse_loss",
    "cat", "stack", "tril", "triu", "index_select", "transpose", "reshape", "view",
    "nn.functional.embedding", "masked_fill", "xlogy", "sgn", "nn.functional.huber_loss",
    "nn.functional.smooth_l1_loss", "nn.functional.l1_loss",
    "nn.functional.elu", "nn.functional.selu", "nn.functional.celu", "nn.functional.glu",
    "nn.functional.hardtanh", "nn.functional.relu6", "nn.functional.hardswish",
    "nn.functional.hardsigmoid", "nn.functional.mish", "nn.functional.softshrink",
    "nn.functional.hardshrink", "nn.functional.threshold", "logit", "tan", "atan", "asin",
    "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "sinc", "exp2", "log10", "logaddexp",
    "logaddexp2", "signbit", "copysign", "nan_to_num", "frac", "fmax", "fmin", "heaviside",
    "hypot", "erfinv", "nn.functional.adaptive_max_pool2d", "nn.functional.binary_cross_entropy",
    "trace", "dot", "vdot", "nansum", "count_nonzero", "aminmax", "norm", "dist", "linspace", "logspace", "eye",
    "nn.functional.pairwise_distance", "nn.functional.embedding_bag", "take", "put",
    "masked_scatter", "scatter", "scatter_add", "lgamma", "digamma", "erfc", "special.erfcx",
    "special.log_ndtr", "special.entr", "special.xlog1py", "cummax", "cummin", "logcumsumexp",
    "bitwise_left_shift", "bitwise_right_shift", "linalg.cross", "cross", "vdot", "renorm",
    "angle", "nn.functional.channel_shuffle", "equal", "cdist", "nn.functional.pdist",
    "nn.functional.max_pool3d", "nn.functional.avg_pool3d",
    "nn.functional.adaptive_avg_pool3d", "nn.functional.adaptive_max_pool3d", "nn.functional.unfold",
    "nn.functional.max_unpool1d", "nn.functional.max_unpool2d", "nn.functional.max_unpool3d",
    "nn.functional.grid_sample", "grid_sampler_2d", "grid_sampler_3d", "nonzero", "masked_select", "argwhere",
    "unique", "unique_consecutive", "bincount", "repeat_interleave", "searchsorted", "bucketize", "median", "nanmedian",
    "linalg.cholesky", "linalg.cholesky_ex", "linalg.solve_triangular", "triangular_solve",
    "cholesky_solve", "cholesky_inverse", "linalg.solve", "linalg.solve_ex", "linalg.inv",
    "linalg.inv_ex", "linalg.det", "det", "linalg.slogdet", "logdet", "linalg.lu_factor",
    "linalg.lu_factor_ex", "linalg.lu_solve", "linalg.lu", "lu_unpack", "linalg.qr", "qr",
    "geqrf", "linalg.householder_product", "ormqr", "linalg.eigh", "linalg.eigvalsh",
    "histc", "linalg.svd", "svd", "linalg.svdvals", "linalg.pinv", "linalg.matrix_rank",
    "linalg.cond", "addbmm", "cholesky", "kthvalue", "i0", "special.i0e", "special.i1",
    "special.i1e", "special.modified_bessel_i0", "special.modified_bessel_i1",
    "special.modified_bessel_k0", "special.modified_bessel_k1",
    "special.scaled_modified_bessel_k0", "special.scaled_modified_bessel_k1",
    "signal.windows.kaiser", "special.bessel_j0", "special.bessel_j1", "special.bessel_y0",
    "special.bessel_y1", "special.spherical_bessel_j0",
    "fft.fft", "fft.ifft", "fft.rfft", "fft.irfft", "fft.hfft", "fft.ihfft", "fft.fft2",
    "fft.rfft2", "fft.fftn", "fft.ifftn", "fft.rfftn", "fft.irfftn", "fft.fftshift", "stft",
    "istft",
}
# the ops of lower_complex.cpp, lower_complex_math.cpp and lower_fft.cpp, in complex64 too
COMPLEX_SUBSET = {
    "add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "sin", "cos", "abs", "angle",
    "exp2", "log2", "log10", "log1p", "expm1", "rsqrt", "tan", "sinc", "sinh", "cosh", "tanh",
    "asin", "acos", "atan", "asinh", "acosh", "atanh", "sigmoid", "pow", "prod", "cumprod",
    "trace", "dot", "vdot",
    "sgn", "reciprocal", "conj_physical", "sum", "mean", "mm", "bmm", "matmul", "cat",
    "stack", "roll", "flip", "tril", "triu", "index_select", "gather", "where", "eq", "ne",
    "isnan", "view_as_real", "fft.fft", "fft.ifft", "fft.fft2", "fft.fftn", "fft.irfft",
    "fft.hfft",
}
# ops whose named variants are in the subset too: (name, variant_test_name)
VARIANTS = {("nn.functional.pad", "reflect"), ("nn.functional.pad", "replicate"),
            ("nn.functional.pad", "replicate_negative"),
            ("round", "decimals_3"), ("round", "decimals_neg_3"), ("nn.functional.interpolate", "bicubic")}
VARIANTS |= {("scatter_reduce", r) for r in ("sum", "prod", "mean", "amax", "amin")}
VARIANTS |= {("index_reduce", r) for r in ("prod", "mean", "amax", "amin")}
VARIANTS |= {("polygamma", "polygamma_n_0"), ("polygamma", "polygamma_n_1"),
             ("special.polygamma", "special_polygamma_n_0")}
VARIANTS |= {("mvlgamma", f"mvlgamma_p_{p}") for p in (1, 3, 5)}
VARIANTS |= {("max", "reduction_with_dim"), ("min", "reduction_with_dim")}
OPS = [op for op in op_db
       if (op.name in SUBSET and op.variant_test_name == "") or (op.name, op.variant_test_name) in VARIANTS]
COMPLEX_OPS = [op for op in op_db if op.name in COMPLEX_SUBSET and op.variant_test_name == ""]


class TestTpuOpInfo(TestCase):
    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_matches_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            run_sample(op, sample, dtype)

    @ops(COMPLEX_OPS, allowed_dtypes=(torch.complex64,))
    def test_complex_matches_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            run_sample(op, sample, dtype)


instantiate_device_type_tests(TestTpuOpInfo, globals(), only_for="tpu")

if __name__ == "__main__":
    run_tests()
