# torch.save / torch.load of tpu tensors (default weights_only loading): tensors come back on
# tpu with the same bits, dtype, shape and strides; views saved with their base still share
# storage after loading; a tpu model's state_dict round-trips into a fresh tpu model; and
# map_location moves tensors to cpu or to tpu (string, torch.device and dict forms).
import io

import pytest
import torch

from conftest import assert_bits_equal, storage_ptr

TPU0 = torch.device("tpu", 0)


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                   torch.uint8, torch.bool, torch.complex64], ids=str)
def test_save_load_tensor(dtype):
    x = (torch.randn(7, 9) * 50).to(dtype)
    t = x.to("tpu")
    back = roundtrip(t)
    assert back.device == TPU0
    assert_bits_equal(back.cpu(), x)


def test_save_load_to_file_and_noncontiguous(tmp_path):
    x = torch.randn(5, 8)
    t = x.to("tpu")
    path = tmp_path / "t.pt"
    torch.save({"a": t, "b": t.t(), "c": t[1::2, 3:]}, path)
    d = torch.load(path)
    for k, ref in {"a": x, "b": x.t(), "c": x[1::2, 3:]}.items():
        assert d[k].device == TPU0
        assert d[k].stride() == {"a": t, "b": t.t(), "c": t[1::2, 3:]}[k].stride()
        assert_bits_equal(d[k].cpu(), ref)


def test_views_share_storage_after_load():
    t = torch.arange(20.0, device="tpu")
    v = t[4:12].view(2, 4)
    a, b = roundtrip([t, v])
    assert a.device == TPU0 and b.device == TPU0
    assert storage_ptr(a) == storage_ptr(b)
    assert b.storage_offset() == 4
    b.fill_(-1)
    ref = torch.arange(20.0)
    ref[4:12] = -1
    assert torch.equal(a.cpu(), ref)
    assert storage_ptr(a) != storage_ptr(t)       # a new storage, not the saved one


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.BatchNorm1d(10),
                               torch.nn.ReLU(), torch.nn.Linear(10, 3))


def test_state_dict_roundtrip_on_tpu():
    m = _model().tpu()
    m.train()
    m(torch.randn(8, 6, device="tpu"))          # move the BatchNorm running statistics
    sd = m.state_dict()
    assert all(v.device == TPU0 for v in sd.values())
    loaded = roundtrip(sd)
    assert list(loaded) == list(sd)
    for k in sd:
        assert loaded[k].device == TPU0, k
        assert_bits_equal(loaded[k].cpu(), sd[k].cpu())
    fresh = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.BatchNorm1d(10),
                                torch.nn.ReLU(), torch.nn.Linear(10, 3)).tpu()
    fresh.load_state_dict(loaded)
    m.eval()
    fresh.eval()
    x = torch.randn(4, 6, device="tpu")
    assert torch.equal(fresh(x).cpu(), m(x).cpu())


@pytest.mark.parametrize("where", ["cpu", torch.device("cpu"), {"tpu:0": "cpu"}], ids=str)
def test_map_location_cpu(where):
    m = _model().tpu()
    sd = m.state_dict()
    loaded = roundtrip(sd, map_location=where)
    for k in sd:
        assert loaded[k].device.type == "cpu", k
        assert_bits_equal(loaded[k], sd[k].cpu())
    cpu_model = _model()
    cpu_model.load_state_dict(loaded)


@pytest.mark.parametrize("where", ["tpu", "tpu:0", torch.device("tpu", 0), {"cpu": "tpu:0"}],
                         ids=str)
def test_map_location_tpu(where):
    sd = _model().state_dict()                    # saved from cpu
    loaded = roundtrip(sd, map_location=where)
    for k in sd:
        assert loaded[k].device == TPU0, k
        assert_bits_equal(loaded[k].cpu(), sd[k])
    m = _model().tpu()
    m.load_state_dict(loaded)
    assert all(p.device == TPU0 for p in m.parameters())


def test_load_into_cpu_module_then_move():
    sd = _model().tpu().state_dict()
    m = _model()
    m.load_state_dict(roundtrip(sd, map_location="cpu"))
    m.tpu()
    for k, v in m.state_dict().items():
        assert v.device == TPU0
        assert_bits_equal(v.cpu(), sd[k].cpu())
