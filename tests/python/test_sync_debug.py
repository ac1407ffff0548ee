# torch.tpu.set_sync_debug_mode / get_sync_debug_mode, as torch.cuda's: an op that waits for
# the chip without being asked to (Tensor.item(), a copy to the host, the CPU fallback,
# x[mask], growing a storage that holds data) warns ("warn") or raises RuntimeError before
# it runs ("error"), naming the op; torch.tpu.synchronize(), Event/Stream synchronize and
# copies to the chip never count. The GPT training step makes no such wait in strict, fused
# or compiled mode, so "error" mode catches any that creeps into the hot loop.
import os
import sys
import warnings

import pytest
import torch

import torchtpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

SYNC = "called a synchronizing tpu operation"


@pytest.fixture
def sync_debug():
    """Yields torch.tpu.set_sync_debug_mode and puts the default back (the mode is process
    wide, and other tests in this worker synchronize)."""
    yield torch.tpu.set_sync_debug_mode
    torch.tpu.set_sync_debug_mode("default")
    torchtpu.set_eager_mode("strict")


def sync_warnings(fn):
    """The messages of the sync warnings fn() raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if SYNC in str(w.message)]


# a custom op with only a CPU kernel: a call with tpu tensors goes through the CPU fallback
@torch.library.custom_op("torchtpu_test::cpu_only_double", mutates_args=(), device_types="cpu")
def cpu_only_double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_modes_by_name_and_number(sync_debug):
    assert torch.tpu.get_sync_debug_mode() == 0
    for name, number in [("warn", 1), ("error", 2), ("default", 0), (2, 2), (0, 0)]:
        sync_debug(name)
        assert torch.tpu.get_sync_debug_mode() == number
    with pytest.raises(RuntimeError, match="expected one of `default`, `warn`, `error`"):
        sync_debug("loud")
    with pytest.raises(RuntimeError, match="expected one of 0,1,2, got 3"):
        sync_debug(3)
    assert torch.tpu.get_sync_debug_mode() == 0


def test_warn_names_each_synchronizing_op(sync_debug):
    x = torch.arange(6.0, device="tpu") - 2
    sync_debug("warn")
    assert len(sync_warnings(lambda: x.sum().item())) == 1
    (item,) = sync_warnings(lambda: x.sum().item())
    assert item.startswith("tpu: aten::_local_scalar_dense (Tensor.item())"), item
    (copy,) = sync_warnings(lambda: x.cpu())
    assert "aten::copy_ from tpu:0 to cpu" in copy, copy
    # an aten op with no tpu kernel (as in test_errors.py; a custom op's warnings reach only
    # stderr, since PyTorch calls it outside the handler that turns them into Python's)
    (fallback,) = sync_warnings(lambda: torch.special.airy_ai(x))
    assert "aten::special_airy_ai.out (CPU fallback)" in fallback, fallback
    assert sync_warnings(lambda: x[x > 0])  # its size is read back: it waits
    storage = torch.ones(4, device="tpu").untyped_storage()
    (resize,) = sync_warnings(lambda: storage.resize_(32))
    assert "untyped_storage().resize_" in resize, resize


def test_explicit_waits_and_copies_to_the_chip_do_not_count(sync_debug):
    x = torch.randn(64, 64, device="tpu")
    sync_debug("error")

    def explicit():
        y = torch.randn(64, 64).to("tpu")  # queued on the chip's stream
        start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
        start.record()
        z = x @ y
        end.record()
        end.synchronize()
        torch.tpu.current_stream().synchronize()
        torch.tpu.synchronize()
        z.untyped_storage().resize_(0)  # frees: nothing to keep, nothing to wait for

    assert sync_warnings(explicit) == []


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_error_raises_before_the_op_and_loses_nothing(sync_debug, mode):
    torchtpu.set_eager_mode(mode)
    x = torch.arange(4.0, device="tpu")
    y = x * 3 + 1  # in fused mode still pending: the refused read must not run it
    sync_debug("error")
    for read in (lambda: y.sum().item(), lambda: y.cpu(), lambda: cpu_only_double(y)):
        with pytest.raises(RuntimeError, match=SYNC):
            read()
    sync_debug("default")
    assert y.cpu().tolist() == [1.0, 4.0, 7.0, 10.0]
    assert cpu_only_double(y).cpu().tolist() == [2.0, 8.0, 14.0, 20.0]


@pytest.mark.parametrize("mode,compiled", [("strict", False), ("fused", False), ("strict", True)])
def test_gpt_training_step_never_waits_unasked(sync_debug, mode, compiled):
    import bench_modes

    torchtpu.set_eager_mode(mode)
    step = bench_modes.gpt_step("tpu", compile=compiled)
    step()  # the first step compiles and may read values (Dynamo's guards): not counted
    torch.tpu.synchronize()
    sync_debug("error")
    for _ in range(3):
        step()
    torch.tpu.synchronize()
