"""ember.save / ember.load against themselves and against PyTorch (both directions), the
weights-only unpickler, atomic saves, map_location, mmap, the legacy format and safetensors."""
import collections
import io
import mmap
import os
import pickle
import struct
import zipfile
import zlib

import numpy as np
import pytest

import ember
from ember import serialization
from ember.serialization import _save, _unpickler
from helpers import skip_if_cupy

try:
    import torch
except ImportError:
    torch = None
try:
    import safetensors
except ImportError:
    safetensors = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch as the oracle")
needs_safetensors = pytest.mark.skipif(safetensors is None, reason="needs safetensors")
DTYPES = [d.name for d in ember._dtype.ALL]


def sample(name, shape=(3, 4)):
    """An ember tensor of dtype ``name`` with distinct, exactly representable values."""
    a = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 3
    if name == "bool":
        a = a % 2
    elif name == "uint8":
        a = a + 3
    elif name.startswith("float8"):
        a = a / 4
    if name.startswith("complex"):
        a = a + 1j * (a + 0.5)
    return ember.from_numpy(a.astype(ember._dtype._BY_NAME[name].np))


def torch_sample(name, shape=(3, 4)):
    a = sample(name, shape).numpy()
    if name == "bfloat16" or name.startswith("float8"):
        return torch.from_numpy(a.astype(np.float32)).to(getattr(torch, name))
    return torch.from_numpy(a.copy())


def raw_bytes(t):
    """The values of an ember or torch tensor, bit for bit."""
    if isinstance(t, ember.Tensor):
        return np.ascontiguousarray(t.detach().numpy()).reshape(-1).view(np.uint8)
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()


def assert_same(e, t):
    """ember tensor ``e`` matches tensor ``t`` (ember or torch) in everything torch saves."""
    assert str(e.dtype) == str(t.dtype)
    assert tuple(e.shape) == tuple(t.shape)
    assert tuple(e.stride()) == tuple(t.stride())
    assert e.storage_offset() == t.storage_offset()
    assert e.requires_grad == t.requires_grad
    np.testing.assert_array_equal(raw_bytes(e), raw_bytes(t))


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    ember.save(obj, buf)
    buf.seek(0)
    return ember.load(buf, **load_kwargs)


def torch_roundtrip(obj, **save_kwargs):
    """Save with torch, load with ember."""
    buf = io.BytesIO()
    torch.save(obj, buf, **save_kwargs)
    buf.seek(0)
    return ember.load(buf)


class FakeParameter(ember.Tensor):
    """Stands in for ember.nn.Parameter (duck-typed by ``_is_param``) until nn lands."""

    _is_param = True

    def __init__(self, data, requires_grad=True):
        self._data, self.dtype = data._data, data.dtype
        self._requires_grad = requires_grad


# ---- ember -> ember ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", DTYPES)
def test_roundtrip_every_dtype(name):
    x = sample(name)
    out = roundtrip({"x": x, "col": x[:, 1], "t": x.t()})
    for k in ("x", "col", "t"):
        assert_same(out[k], {"x": x, "col": x[:, 1], "t": x.t()}[k])


def test_views_share_one_storage_after_load():
    x = ember.arange(12.0).reshape(3, 4)
    out = roundtrip([x, x[1:, 1:3], x.t(), x[::2, ::3]])
    storage = out[0].untyped_storage()
    assert all(t.untyped_storage() is storage for t in out)
    assert [t.storage_offset() for t in out] == [0, 5, 0, 0]
    assert out[2].stride() == (1, 4) and out[3].stride() == (8, 3)
    out[0][1, 1] = -1.0                      # one write shows through every view
    assert out[1][0, 0].item() == -1.0 and out[2][1, 1].item() == -1.0


def test_shared_storage_is_written_once():
    x = ember.zeros(1000)
    buf = io.BytesIO()
    ember.save([x, x[10:], x[:5]], buf)
    data = [n for n in zipfile.ZipFile(buf).namelist() if "/data/" in n]
    assert data == ["archive/data/0"]


def test_containers_and_primitives():
    obj = collections.OrderedDict(
        a=1, b=2.5, c="s", d=True, e=None, f=[1, (2, 3)], g={"k": {4: b"bytes"}},
        h=ember.float16, i=ember.device("cpu"), j=ember.Size([2, 3]), k=3 + 4j, m={1, 2})
    out = roundtrip(obj)
    assert type(out) is collections.OrderedDict and out == obj
    assert out["h"] is ember.float16 and isinstance(out["j"], ember.Size)


def test_requires_grad_and_identity_kept():
    w = ember.ones(3, requires_grad=True)
    out = roundtrip({"w": w, "again": w, "i": ember.arange(3)})
    assert out["w"].requires_grad and not out["i"].requires_grad
    assert out["again"] is out["w"]            # one object saved twice loads as one object


def test_scalar_empty_and_expanded_tensors():
    e = ember.zeros(0, 3)
    s = ember.tensor(2.5)
    b = ember.arange(3.0).expand(4, 3)          # stride 0
    out = roundtrip([e, s, b])
    assert_same(out[0], e)
    assert_same(out[1], s)
    assert_same(out[2], b)


# (negative strides never reach a tensor: from_numpy refuses them, as torch does)
@pytest.mark.parametrize("make", [lambda a: np.lib.stride_tricks.as_strided(a, (2, 2), (16, 8))],
                         ids=["strided-root"])
def test_numpy_layouts_torch_cannot_express_are_saved_as_copies(make):
    x = ember.from_numpy(make(np.arange(6.0)))
    out = roundtrip([x, x])
    np.testing.assert_array_equal(out[0].numpy(), x.numpy())
    assert out[0].is_contiguous() and out[1] is out[0]


def test_one_storage_as_two_dtypes_is_refused_like_torch():
    x = ember.zeros(4)
    with pytest.raises(RuntimeError, match="view the same data as different types"):
        ember.save([x, x.view(ember.int32)], io.BytesIO())


def test_optimizer_style_state_dict():
    sd = {"state": {0: {"step": ember.tensor(3.0), "exp_avg": ember.zeros(2, 2),
                        "exp_avg_sq": ember.ones(2, 2)}},
          "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "params": [0],
                            "amsgrad": False, "foreach": None}]}
    out = roundtrip(sd)
    assert out["param_groups"] == sd["param_groups"]
    assert_same(out["state"][0]["exp_avg_sq"], sd["state"][0]["exp_avg_sq"])


def test_path_str_pathlib_and_file_object(tmp_path):
    x = sample("float32")
    ember.save(x, str(tmp_path / "a.pt"))
    ember.save(x, tmp_path / "b.pt")
    with open(tmp_path / "c.pt", "wb") as fh:
        ember.save(x, fh)
    for name in ("a.pt", "b.pt", "c.pt"):
        assert_same(ember.load(tmp_path / name), x)
    with open(tmp_path / "a.pt", "rb") as fh:
        assert_same(ember.load(fh), x)


def test_parameter_roundtrip(monkeypatch):
    p = FakeParameter(ember.ones(2, 2))
    buf = io.BytesIO()
    ember.save({"p": p}, buf)
    assert b"_rebuild_parameter" in zipfile.ZipFile(buf).read("archive/data.pkl")
    buf.seek(0)
    out = ember.load(buf)["p"]
    assert out.requires_grad and out.shape == (2, 2)   # a plain tensor while ember.nn is absent
    monkeypatch.setattr(_unpickler, "_parameter_class", lambda: FakeParameter)
    buf.seek(0)
    assert type(ember.load(buf)["p"]) is FakeParameter


def test_archive_layout_matches_torch():
    buf = io.BytesIO()
    ember.save({"x": ember.ones(3)}, buf)
    zf = zipfile.ZipFile(buf)
    assert zf.namelist() == ["archive/data.pkl", "archive/.format_version",
                             "archive/.storage_alignment", "archive/byteorder",
                             "archive/data/0", "archive/version",
                             "archive/.data/serialization_id"]
    assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
    assert zf.read("archive/version") == b"3\n" and zf.read("archive/byteorder") == b"little"
    assert len(zf.read("archive/.data/serialization_id")) == 40


@pytest.mark.parametrize("zip64", [False, True])
def test_data_records_are_64_byte_aligned(zip64, monkeypatch):
    if zip64:       # records past 4 GiB get a zip64 header; shrink the limit to test that
        monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 100)
    obj = [sample(n, (5, 7)) for n in DTYPES]
    buf = io.BytesIO()
    ember.save(obj, buf)
    raw = buf.getvalue()
    for info in zipfile.ZipFile(buf).infolist():
        at = info.header_offset
        n, m = struct.unpack("<HH", raw[at + 26:at + 30])
        assert (at + 30 + n + m) % 64 == 0, info.filename
        extra, ids = raw[at + 30 + n:at + 30 + n + m], []
        while extra:
            field, size = struct.unpack("<HH", extra[:4])
            ids.append(field)
            extra = extra[4 + size:]
        assert (1 in ids) == (zip64 and info.file_size * 1.05 > 100), info.filename
    buf.seek(0)
    for a, b in zip(ember.load(buf), obj):
        assert_same(a, b)
    if torch is not None:
        buf.seek(0)
        for a, b in zip(torch.load(buf, weights_only=True), obj):
            assert_same(b, a)


# ---- ember <-> torch ------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("name", DTYPES)
def test_torch_reads_ember_files(name):
    x = sample(name)
    obj = {"x": x, "col": x[:, 1], "t": x.t(), "step": x[::2, 1::2]}
    buf = io.BytesIO()
    ember.save(obj, buf)
    buf.seek(0)
    out = torch.load(buf, weights_only=True)
    for k, v in obj.items():
        assert_same(v, out[k])
    ptrs = {t.untyped_storage().data_ptr() for t in out.values()}
    assert len(ptrs) == 1                      # the views still share one storage in torch


@needs_torch
@pytest.mark.parametrize("name", DTYPES)
def test_ember_reads_torch_files(name):
    x = torch_sample(name)
    obj = {"x": x, "col": x[:, 1], "t": x.t(), "step": x[::2, 1::2]}
    out = torch_roundtrip(obj)
    for k, v in obj.items():
        assert_same(out[k], v)
    assert all(t.untyped_storage() is out["x"].untyped_storage() for t in out.values())


@needs_torch
def test_torch_reads_requires_grad_parameters_and_metadata():
    obj = collections.OrderedDict(w=ember.ones(2, requires_grad=True),
                                  p=FakeParameter(ember.zeros(3)), dt=ember.bfloat16,
                                  dev=ember.device("cpu"), size=ember.Size([4, 5]), n=[1, "a"])
    buf = io.BytesIO()
    ember.save(obj, buf)
    buf.seek(0)
    out = torch.load(buf, weights_only=True)
    assert type(out) is collections.OrderedDict
    assert out["w"].requires_grad and type(out["p"]) is torch.nn.Parameter
    assert out["dt"] is torch.bfloat16 and out["dev"] == torch.device("cpu")
    assert out["size"] == torch.Size([4, 5]) and out["n"] == [1, "a"]


@needs_torch
def test_ember_reads_torch_module_and_optimizer_state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    ck = {"model": model.state_dict(), "opt": opt.state_dict(), "epoch": 3,
          "param": torch.nn.Parameter(torch.ones(2)), "meta": torch.empty(2, 3, device="meta")}
    out = torch_roundtrip(ck)
    for k, v in model.state_dict().items():
        assert_same(out["model"][k], v)
    assert out["model"]._metadata == model.state_dict()._metadata   # set through BUILD
    assert_same(out["opt"]["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert out["opt"]["param_groups"][0]["lr"] == 0.1 and out["epoch"] == 3
    assert out["param"].requires_grad
    assert out["meta"].device == ember.device("meta") and out["meta"].shape == (2, 3)


@needs_torch
def test_ember_reads_python_attributes_of_tensors_and_parameters():
    t = torch.ones(2)
    t.note = "kept"
    p = torch.nn.Parameter(torch.zeros(2))
    p.tag = 3
    out = torch_roundtrip({"t": t, "p": p})
    assert out["t"].note == "kept" and out["p"].tag == 3 and out["p"].requires_grad


@needs_torch
def test_ember_state_dict_loads_into_torch_module():
    sd = collections.OrderedDict(weight=ember.randn(2, 3), bias=ember.zeros(2))
    buf = io.BytesIO()
    ember.save(sd, buf)
    buf.seek(0)
    lin = torch.nn.Linear(3, 2)
    lin.load_state_dict(torch.load(buf, weights_only=True))
    np.testing.assert_array_equal(lin.weight.detach().numpy(), sd["weight"].numpy())


# ---- weights_only ---------------------------------------------------------------------------
class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned_by_ember_load",))


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


def _archive_with(pkl):
    """A zip archive in torch's layout whose data.pkl is ``pkl``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pkl)
        zf.writestr("archive/version", "3\n")
    buf.seek(0)
    return buf


def test_weights_only_refuses_os_system_without_running_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    buf = _archive_with(pickle.dumps({"a": _Evil()}, protocol=2))
    with pytest.raises(pickle.UnpicklingError,
                       match=r"Weights only load failed(.|\n)*Unsupported global: GLOBAL "
                             r"(posix|nt|os)\.system"):
        ember.load(buf)
    assert not (tmp_path / "pwned_by_ember_load").exists()


def test_weights_only_refuses_build_on_ember_objects():
    # GLOBAL torch float32, then BUILD with slot state: would rewrite ember.float32.name.
    pkl = b"\x80\x02ctorch\nfloat32\nN}X\x04\x00\x00\x00nameX\x04\x00\x00\x00evils\x86b."
    with pytest.raises(pickle.UnpicklingError, match="Can only build"):
        ember.load(_archive_with(pkl))
    assert ember.float32.name == "float32"


def test_safe_globals_allow_a_class():
    buf = io.BytesIO()
    ember.save({"pt": Point(1, ember.ones(2))}, buf)
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL test_serialization.Point"):
        ember.load(io.BytesIO(buf.getvalue()))
    with serialization.safe_globals([Point]):
        out = ember.load(io.BytesIO(buf.getvalue()))
    assert out["pt"].x == 1 and out["pt"].y.tolist() == [1.0, 1.0]
    assert serialization.get_safe_globals() == []
    serialization.add_safe_globals([Point])
    try:
        assert ember.load(io.BytesIO(buf.getvalue()))["pt"].x == 1
    finally:
        serialization.clear_safe_globals()


def test_weights_only_false_loads_anything():
    out = roundtrip({"pt": Point(2, 3)}, weights_only=False)
    assert (out["pt"].x, out["pt"].y) == (2, 3)


def test_explicit_pickle_module_needs_weights_only_false():
    with pytest.raises(RuntimeError, match="explicit pickle_module"):
        ember.load(io.BytesIO(), pickle_module=pickle, weights_only=True)
    # NOTE: as torch, a pickle module given with weights_only left unset means False
    assert roundtrip({"pt": Point(2, 3)}, pickle_module=pickle)["pt"].x == 2


@needs_torch
def test_force_weights_only_environment_switches(tmp_path, monkeypatch):
    # pytorch/examples' time_sequence_prediction: torch.save a NumPy array, torch.load it
    path = tmp_path / "traindata.pt"
    torch.save(np.arange(3.0), path)
    for L in (ember, torch):
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
            L.load(path)
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
        with pytest.warns(UserWarning, match="forcing weights_only=False"):
            assert L.load(path).tolist() == [0.0, 1.0, 2.0]
        with pytest.raises(pickle.UnpicklingError):      # an explicit True still wins
            L.load(path, weights_only=True)
        monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "true")
        with pytest.raises(RuntimeError, match="Only one of `TORCH_FORCE_WEIGHTS_ONLY_LOAD`"):
            L.load(path)
        monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
        with pytest.raises(pickle.UnpicklingError):      # forced even over an explicit False
            L.load(path, weights_only=False)
        monkeypatch.delenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD")


# ---- atomic saves ------------------------------------------------------------------------------
def test_failed_save_keeps_previous_file(tmp_path):
    path = tmp_path / "ck.pt"
    ember.save({"x": ember.ones(3)}, path)
    before = path.read_bytes()
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        ember.save({"x": ember.zeros(3), "f": lambda: 0}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ck.pt"]


def test_save_failing_while_writing_data_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "ck.pt"
    ember.save({"x": ember.ones(3)}, path)
    before = path.read_bytes()
    real = _save._write_record

    def fail_on_data(zf, name, data, *crc):
        if "/data/" in name:
            raise OSError("disk full")
        return real(zf, name, data, *crc)
    monkeypatch.setattr(_save, "_write_record", fail_on_data)
    with pytest.raises(OSError, match="disk full"):
        ember.save({"x": ember.zeros(3)}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["ck.pt"]


class _LateCrc:
    """A CRC that is never ready when asked: the writer must patch the header later."""

    def __init__(self, view):
        self.view = view

    def done(self):
        return False

    def result(self):
        return zlib.crc32(self.view)


@pytest.mark.parametrize("late", [False, True])
@pytest.mark.parametrize("zip64", [False, True])
def test_record_crcs_are_right_when_computed_aside(late, zip64, tmp_path, monkeypatch):
    if zip64:
        monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 100)
    if late:
        monkeypatch.setattr(_save, "_crcs", lambda arrays: (
            [_LateCrc(memoryview(a).cast("B")) for a in arrays], None))
    obj = {"big": ember.randn(1100, 1000), "small": ember.arange(5.0), "b": ember.ones(3) > 0}
    path = tmp_path / "ck.pt"
    ember.save(obj, path)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None                # every CRC checks out
    out = ember.load(path)
    for k, v in obj.items():
        assert_same(out[k], v)
    if torch is not None:
        np.testing.assert_array_equal(torch.load(path, weights_only=True)["big"].numpy(),
                                      obj["big"].numpy())


def test_big_storages_read_aside_come_back_whole_and_shared(tmp_path):
    x = ember.randn(600, 1000)                      # 2.4 MB: read by the loader's threads
    obj = {"x": x, "col": x[:, 3], "t": x.t(), "y": ember.randn(700, 500).double(),
           "small": ember.arange(4)}
    path = tmp_path / "big.pt"
    ember.save(obj, path)
    out = ember.load(path)
    for k, v in obj.items():
        assert_same(out[k], v)
    assert out["col"].untyped_storage() is out["x"].untyped_storage()
    ember.save({"x": x, "pt": Point(1, 2)}, path)   # refused half-way: no reader left behind
    with pytest.raises(pickle.UnpicklingError, match="Point"):
        ember.load(path)
    out = ember.load(path, map_location="cpu", weights_only=False)  # read in line
    assert_same(out["x"], x)
    assert out["pt"].x == 1


def test_save_into_missing_directory(tmp_path):
    with pytest.raises(RuntimeError, match="Parent directory .* does not exist"):
        ember.save(ember.ones(1), tmp_path / "nope" / "x.pt")


# ---- map_location ----------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["cpu", ember.device("cpu"), {"cpu": "cpu"},
                                   lambda storage, loc: storage, lambda storage, loc: None])
def test_map_location_to_cpu(where):
    x = ember.arange(6.0).reshape(2, 3)
    out = roundtrip([x, x[1]], map_location=where)
    assert_same(out[0], x)
    assert out[1].untyped_storage() is out[0].untyped_storage()


@pytest.mark.parametrize("where", ["meta", ember.device("meta"), {"cpu": "meta"}])
def test_map_location_to_meta(where):
    out = roundtrip({"x": ember.ones(2, 3, dtype=ember.float16, requires_grad=True)},
                    map_location=where)
    x = out["x"]
    assert x.device.type == "meta" and x.shape == (2, 3) and x.dtype is ember.float16
    assert x.requires_grad


def test_map_location_callable_sees_location():
    seen = []
    roundtrip([ember.ones(1), ember.ones(2)], map_location=lambda s, loc: seen.append(loc))
    assert seen == ["cpu", "cpu"]


def _edited_archive(obj, edit):
    """ember.save(obj), with ``edit(name, data) -> data`` applied to every record."""
    buf = io.BytesIO()
    ember.save(obj, buf)
    zf, out = zipfile.ZipFile(buf), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name in zf.namelist():
            dst.writestr(name, edit(name, zf.read(name)))
    out.seek(0)
    return out


def _saved_on_cuda(obj):
    """An ember file whose storages say they were saved on cuda:0."""
    # BINUNICODE 'cpu' -> 'cuda:0' in the pickle; protocol 2 has no byte offsets to fix up.
    return _edited_archive(obj, lambda name, data: data.replace(
        b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0"))


def test_map_location_dict_remaps_cuda_to_cpu():
    x = ember.arange(4.0)
    buf = _saved_on_cuda([x, x[1:]])
    out = ember.load(buf, map_location={"cuda:0": "cpu"})
    assert_same(out[1], x[1:])
    assert out[1].untyped_storage() is out[0].untyped_storage()


def test_cuda_file_without_cuda_says_how_to_fix():
    skip_if_cupy("a GPU stack is installed")
    with pytest.raises(RuntimeError, match="map_location='cpu'"):
        ember.load(_saved_on_cuda([ember.ones(2)]))


@pytest.mark.cuda
def test_cuda_tensors_save_and_map_back_and_forth():
    x = ember.arange(6.0, device="cuda").reshape(2, 3)
    buf = io.BytesIO()
    ember.save({"x": x, "row": x[1]}, buf)
    buf.seek(0)
    on_cpu = ember.load(buf, map_location="cpu")
    assert_same(on_cpu["row"], x[1].cpu())
    assert on_cpu["row"].untyped_storage() is on_cpu["x"].untyped_storage()
    buf.seek(0)
    on_gpu = ember.load(buf)
    assert on_gpu["x"].device == ember.device("cuda:0")
    assert on_gpu["row"].cpu().tolist() == [3.0, 4.0, 5.0]


def test_bad_map_location():
    with pytest.raises(TypeError, match="map_location"):
        roundtrip(ember.ones(1), map_location=3)


# ---- mmap ------------------------------------------------------------------------------------
def test_mmap_maps_storages_and_never_writes_the_file(tmp_path):
    path = tmp_path / "m.pt"
    x = ember.arange(12.0).reshape(3, 4)
    ember.save({"x": x, "v": x[1:]}, path)
    before = path.read_bytes()
    out = ember.load(path, mmap=True)
    assert_same(out["x"], x)
    assert out["v"].untyped_storage() is out["x"].untyped_storage()
    assert isinstance(out["x"].untyped_storage()._array.base, mmap.mmap)
    out["x"][0, 0] = 100.0
    assert out["v"].untyped_storage() is out["x"].untyped_storage()
    assert path.read_bytes() == before


@needs_torch
def test_mmap_reads_torch_files(tmp_path):
    path = tmp_path / "t.pt"
    x = torch_sample("float64")
    torch.save({"x": x, "t": x.t()}, path)
    out = ember.load(path, mmap=True)
    assert_same(out["x"], x)
    assert_same(out["t"], x.t())


@needs_torch
def test_torch_maps_ember_files(tmp_path):
    x = sample("float64")
    ember.save({"x": x, "t": x.t()}, tmp_path / "e.pt", _disable_byteorder_record=True)
    out = torch.load(tmp_path / "e.pt", mmap=True, weights_only=True)
    assert_same(x, out["x"])
    assert_same(x.t(), out["t"])
    assert_same(ember.load(tmp_path / "e.pt")["t"], out["t"])


def test_mmap_needs_a_real_file():
    buf = io.BytesIO()
    ember.save(ember.ones(1), buf)
    buf.seek(0)
    with pytest.raises(ValueError, match="mmap"):
        ember.load(buf, mmap=True)


# ---- legacy format ---------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("name", DTYPES)
def test_legacy_format_every_dtype(name):
    x = torch_sample(name)
    out = torch_roundtrip({"x": x, "col": x[:, 1], "t": x.t()},
                          _use_new_zipfile_serialization=False)
    assert_same(out["x"], x)
    assert_same(out["col"], x[:, 1])
    assert_same(out["t"], x.t())
    assert out["col"].untyped_storage() is out["x"].untyped_storage()


@pytest.mark.parametrize("name", DTYPES)
def test_ember_writes_the_legacy_format(name):
    x = sample(name)
    obj = {"x": x, "col": x[:, 1], "n": [1, "a"]}
    buf = io.BytesIO()
    ember.save(obj, buf, _use_new_zipfile_serialization=False)
    assert not buf.getvalue().startswith(b"PK")
    # NOTE: torch 2.13 cannot read float8 or uint16/32/64 (dtypes without a typed storage
    # class) from legacy files, not even its own (its legacy loader asks UntypedStorage for a
    # dtype); ember reads them.
    by_torch = torch is not None and not name.startswith(("float8", "uint16", "uint32",
                                                           "uint64"))
    readers = [ember.load] + ([lambda f: torch.load(f, weights_only=True)] if by_torch else [])
    for load in readers:
        buf.seek(0)
        out = load(buf)
        assert_same(out["x"], x)
        assert_same(out["col"], x[:, 1])
        assert out["n"] == [1, "a"]


@needs_torch
def test_legacy_format_map_location_and_weights_only(tmp_path):
    x = torch.ones(2, 3, requires_grad=True)
    p = torch.nn.Parameter(torch.zeros(4))
    torch.save({"x": x, "p": p}, tmp_path / "l.pt", _use_new_zipfile_serialization=False)
    out = ember.load(tmp_path / "l.pt", map_location="meta")
    assert out["x"].device.type == "meta" and out["x"].requires_grad
    assert out["p"].device.type == "meta" and out["p"].shape == (4,)
    with pytest.raises(RuntimeError, match="mmap can only be used"):
        ember.load(tmp_path / "l.pt", mmap=True)
    torch.save({"pt": Point(1, 2)}, tmp_path / "e.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(pickle.UnpicklingError, match="Unsupported global"):
        ember.load(tmp_path / "e.pt")


def test_big_endian_files_are_swapped_on_load():
    x = sample("float64")

    def to_big(name, data):
        if name.endswith("byteorder"):
            return b"big"
        if "/data/" in name:
            return np.frombuffer(data, "<f8").astype(">f8").tobytes()
        return data
    out = ember.load(_edited_archive([x, x[1]], to_big))
    assert_same(out[0], x)
    assert_same(out[1], x[1])


def test_corrupt_files_raise_clear_errors():
    short = _edited_archive([ember.ones(4)], lambda n, d: d[:8] if "/data/" in n else d)
    with pytest.raises(RuntimeError, match="storage 0 holds 8 bytes, the pickle said 16"):
        ember.load(short)
    # storage offset 2 -> 3: a 2-element view that would run past the 4-element storage
    oob = _edited_archive([ember.ones(4)[2:]],
                          lambda n, d: d.replace(b"QK\x02K\x02", b"QK\x03K\x02"))
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 16"):
        ember.load(oob)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(RuntimeError, match="is not a checkpoint: neither a zip archive"):
        ember.load(io.BytesIO(pickle.dumps(12345)))
    for name, data in [("notes.txt", b"hello world"), ("empty.pt", b"")]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(RuntimeError, match=rf"ember.load: '.*{name}' is not a checkpoint"):
            ember.load(tmp_path / name)


@pytest.mark.parametrize("legacy", [False, True])
def test_truncated_file_says_so_and_names_it(tmp_path, legacy):
    buf = io.BytesIO()
    ember.save({"w": ember.ones(100)}, buf, _use_new_zipfile_serialization=not legacy)
    path = tmp_path / "cut.pt"
    path.write_bytes(buf.getvalue()[:300])
    with pytest.raises(RuntimeError, match=r"ember.load: '.*cut.pt' is truncated or damaged"):
        ember.load(str(path))
    with open(path, "rb") as fh, pytest.raises(RuntimeError, match="'.*cut.pt' is truncated"):
        ember.load(fh)


# ---- safetensors -----------------------------------------------------------------------------
ST_DTYPES = [n for n in DTYPES if n != "complex128"]


def test_safetensors_roundtrip(tmp_path):
    tensors = {n: sample(n) for n in ST_DTYPES}
    tensors["view"] = tensors["float32"].t()
    path = tmp_path / "a.safetensors"
    serialization.save_safetensors(tensors, path, metadata={"format": "pt"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0 and b'"__metadata__":{"format":"pt"}' in raw[8:8 + n]
    out = serialization.load_safetensors(path)
    assert set(out) == set(tensors)
    for k, v in tensors.items():
        assert out[k].dtype is v.dtype and out[k].shape == v.shape
        np.testing.assert_array_equal(raw_bytes(out[k]), raw_bytes(v.contiguous()))


def test_safetensors_errors(tmp_path):
    with pytest.raises(TypeError, match="complex128"):
        serialization.save_safetensors({"c": sample("complex128")}, tmp_path / "c.st")
    with pytest.raises(TypeError, match="metadata"):
        serialization.save_safetensors({}, tmp_path / "m.st", metadata={"a": 1})
    bad = tmp_path / "bad.st"
    bad.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(ValueError, match="too large"):
        serialization.load_safetensors(bad)
    header = b'{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}'
    bad.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(ValueError, match="do not fit"):
        serialization.load_safetensors(bad)


def test_safetensors_meta_device(tmp_path):
    serialization.save_safetensors({"w": ember.ones(2, 2)}, tmp_path / "w.st")
    w = serialization.load_safetensors(tmp_path / "w.st", device="meta")["w"]
    assert w.device.type == "meta" and w.shape == (2, 2)


@needs_safetensors
def test_safetensors_numpy_interop(tmp_path):
    from safetensors.numpy import load_file, save_file
    names = [n for n in ST_DTYPES if not n.startswith(("bfloat", "float8", "complex"))]
    ours = {n: sample(n) for n in names}
    serialization.save_safetensors(ours, tmp_path / "e.st", metadata={"k": "v"})
    theirs = load_file(str(tmp_path / "e.st"))
    for n in names:
        np.testing.assert_array_equal(theirs[n], ours[n].numpy())
    save_file({n: ours[n].numpy() for n in names}, str(tmp_path / "s.st"))
    back = serialization.load_safetensors(tmp_path / "s.st")
    for n in names:
        assert_same(back[n], ours[n])


@needs_safetensors
@needs_torch
def test_safetensors_torch_interop(tmp_path):
    from safetensors.torch import load_file, save_file
    names = [n for n in ST_DTYPES if n != "complex64"]
    serialization.save_safetensors({n: sample(n) for n in names}, tmp_path / "e.st")
    theirs = load_file(str(tmp_path / "e.st"))
    save_file({n: torch_sample(n) for n in names}, str(tmp_path / "t.st"))
    ours = serialization.load_safetensors(tmp_path / "t.st")
    for n in names:
        assert_same(sample(n), theirs[n])
        assert_same(ours[n], torch_sample(n))


# ---- training state through files, both ways ---------------------------------------------------
def _net(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.Tanh(), lib.nn.Linear(8, 1)).double()


def _train(lib, model, opt, data, steps):
    """Losses of ``steps`` optimizer steps on ``data`` (float64 numpy arrays x, y)."""
    x, y = (lib.from_numpy(a) for a in data)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


_OPTIMIZERS = {"adamw": lambda lib, p: lib.optim.AdamW(p, lr=0.05, weight_decay=0.1),
               "sgd_momentum": lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9,
                                                            nesterov=True)}


@needs_torch
@pytest.mark.parametrize("opt_name", sorted(_OPTIMIZERS))
@pytest.mark.parametrize("src_name", ["torch", "ember"])
def test_training_continues_identically_after_a_checkpoint(src_name, opt_name, tmp_path):
    """One library trains, checkpoints model and optimizer to a file; the other loads both
    and continues: its losses match the first library continuing on its own."""
    libs = {"torch": torch, "ember": ember}
    src, dst = libs[src_name], libs["ember" if src_name == "torch" else "torch"]
    make_opt = _OPTIMIZERS[opt_name]
    rng = np.random.default_rng(0)
    data = rng.standard_normal((16, 4)), rng.standard_normal((16, 1))
    model = _net(src)
    opt = make_opt(src, model.parameters())
    _train(src, model, opt, data, 3)
    path = tmp_path / "ck.pt"
    src.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}, path)
    expected = _train(src, model, opt, data, 4)

    ck = dst.load(path, weights_only=True)
    other = _net(dst)
    other.load_state_dict(ck["model"])
    other_opt = make_opt(dst, other.parameters())
    other_opt.load_state_dict(ck["optim"])
    assert ck["epoch"] == 3
    np.testing.assert_allclose(_train(dst, other, other_opt, data, 4), expected, rtol=1e-12)
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12,
                                   atol=1e-15, err_msg=name)


# ---- weights_only refuses crafted pickles without running them -------------------------------
def _touch(path):
    """What a malicious pickle would call; the tests check it never runs."""
    open(path, "w").close()


class _Reducer:
    """A custom class whose ``__reduce__`` calls a module function."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (_touch, (self.path,))


def _crafted(kind, marker):
    cmd = f"touch {marker}".encode()
    if kind == "os_system_reduce":          # GLOBAL os system, an argument tuple, REDUCE
        return b"cos\nsystem\n(X" + struct.pack("<I", len(cmd)) + cmd + b"tR."
    if kind == "builtins_eval":
        src = f"__import__('os').system('touch {marker}')".encode()
        return b"\x80\x02c__builtin__\neval\nX" + struct.pack("<I", len(src)) + src + b"\x85R."
    if kind == "stack_global":              # protocol 4 names the global with STACK_GLOBAL
        return pickle.dumps({"a": _Reducer(str(marker))}, protocol=4)
    if kind == "custom_reduce_nested":
        return pickle.dumps({"model": {"layers": [1, {"w": _Reducer(str(marker))}]}},
                            protocol=2)
    raise ValueError(kind)


_REFUSED = {"os_system_reduce": r"GLOBAL (os|posix|nt)\.system",
            "builtins_eval": r"GLOBAL builtins\.eval",
            "stack_global": r"GLOBAL test_serialization\._touch",
            "custom_reduce_nested": r"GLOBAL test_serialization\._touch"}


@pytest.mark.parametrize("kind", sorted(_REFUSED))
@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_crafted_pickles_are_refused_without_running(kind, layout, tmp_path):
    marker = tmp_path / "pwned"
    pkl = _crafted(kind, marker)
    if layout == "zip":
        f = _archive_with(pkl)
    else:
        f = io.BytesIO()
        for header in (_save._LEGACY_MAGIC, _save._LEGACY_PROTOCOL,
                       {"protocol_version": _save._LEGACY_PROTOCOL,
                        "little_endian": True, "type_sizes": {}}):
            pickle.dump(header, f, protocol=2)
        f.write(pkl)
        pickle.dump([], f, protocol=2)
        f.seek(0)
    with pytest.raises(pickle.UnpicklingError, match=r"Weights only load failed(.|\n)*"
                                                     r"Unsupported global: " + _REFUSED[kind]):
        ember.load(f)
    assert not marker.exists()
    if kind == "custom_reduce_nested":      # the same bytes do run without weights_only
        f.seek(0)
        ember.load(f, weights_only=False)
        assert marker.exists()
