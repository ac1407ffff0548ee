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
}
OPS = [op for op in op_db if op.name in SUBSET and op.variant_test_name == ""]


class TestTpuOpInfo(TestCase):
    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_matches_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            run_sample(op, sample, dtype)


instantiate_device_type_tests(TestTpuOpInfo, globals(), only_for="tpu")

if __name__ == "__main__":
    run_tests()
