"""PyTorch's OpInfo database through torch.compile(backend="tpu"): each op of test_opinfo.py's
subset, its first float32 samples compiled one by one (Dynamo; AOTAutograd with the
core-ATen decompositions, or Dynamo's own graph when nothing needs grad; the capture into
one IR graph; the C compiler's passes, fusion and memory planning) and compared with CPU
eager: the results and, for ops with autograd, the input gradients through the compiled
backward. Whole-graph compilation meets ops in combinations eager never builds (a
decomposition's views and in-place ops, graphs whose values are reused in another order),
which is where this suite has found bugs the eager suite could not.

tools/opinfo_report.py --compile runs all of op_db this way.
"""
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import TestCase, run_tests

from opinfo_check import run_sample_compiled
from test_opinfo import OPS

SAMPLES = 3  # per op, without and with grad: about 2 minutes of CPU for the subset

# Ops whose samples all run op by op under torch.compile, and why: the rest must capture
# at least one sample whole, so that the suite checks the compiler, not eager mode again.
NOT_CAPTURED = {
    # result shapes that depend on the data: Dynamo breaks the graph at them
    "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "equal",
    # pure views or factories of constants: no computation to capture
    "reshape", "view", "transpose", "linspace", "logspace", "eye", "signal.windows.kaiser",
}


class TestTpuCompileOpInfo(TestCase):
    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_compiled_matches_cpu(self, device, dtype, op):
        # without grad, Dynamo's own graph runs (the decompositions applied as it runs);
        # with grad, AOTAutograd's forward and backward graphs
        captured = []
        for grad in (False, True) if op.supports_autograd else (False,):
            samples = list(op.sample_inputs(device, dtype, requires_grad=grad))
            captured += [run_sample_compiled(op, s, i) for i, s in enumerate(samples[:SAMPLES])]
        if op.name not in NOT_CAPTURED and captured:
            self.assertTrue(any(captured), f"{op.name}: no sample compiled into a graph")


instantiate_device_type_tests(TestTpuCompileOpInfo, globals(), only_for="tpu")

if __name__ == "__main__":
    run_tests()
