"""The rest of torch.serialization's API (ember/serialization/_api.py) against torch's."""
import collections
import io
import os
import re
import types
import zipfile

import numpy as np
import pytest

import ember
from ember import serialization as S

torch = pytest.importorskip("torch")
TS = torch.serialization


class Custom:
    def __init__(self):
        self.v = 1


def _checkpoint(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_unsafe_globals_as_torch():
    data = _checkpoint({"w": torch.ones(2), "sd": collections.OrderedDict(a=torch.zeros(1)),
                        "c": collections.Counter("ab"), "x": Custom(), "d": torch.float16,
                        "p": torch.nn.Parameter(torch.ones(1))})
    mine = S.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
    assert mine == sorted(TS.get_unsafe_globals_in_checkpoint(io.BytesIO(data)))
    assert f"{__name__}.Custom" in mine
    # what torch's weights-only load takes, ember's takes too (a Counter included)
    loaded = ember.load(io.BytesIO(_checkpoint({"c": collections.Counter("abb")})))
    assert loaded["c"] == collections.Counter("abb")
    S.add_safe_globals([Custom])
    try:
        assert f"{__name__}.Custom" not in S.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
    finally:
        S.clear_safe_globals()
    for lib in (S, TS):
        with pytest.raises(ValueError, match="Expected input to be a checkpoint returned by "
                                             "torch.save"):
            lib.get_unsafe_globals_in_checkpoint(io.BytesIO(b"not a zip"))


def test_location_tag_and_cuda_validation():
    for obj in (ember.ones(2), ember.ones(2).untyped_storage()):
        assert S.location_tag(obj) == "cpu" == TS.location_tag(torch.ones(2).untyped_storage())
    with pytest.raises(RuntimeError, match="don't know how to determine data location of int"):
        S.location_tag(3)
    if not ember.cuda.is_available():
        for lib in (S, TS):
            with pytest.raises(RuntimeError, match=re.escape(
                    "Attempting to deserialize object on a CUDA device but "
                    "torch.cuda.is_available() is False.")):
                lib.validate_cuda_device("cuda:0")


def _without_byteorder(data):
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for info in src.infolist():
            if not info.filename.endswith("/byteorder"):
                z.writestr(info.filename, src.read(info))
    return out.getvalue()


def test_default_load_endianness_as_torch():
    data = _without_byteorder(_checkpoint(torch.tensor([1.0, 2.5], dtype=torch.float32)))
    assert S.get_default_load_endianness() is None
    try:
        for e in ("LITTLE", "BIG", "NATIVE"):
            S.set_default_load_endianness(getattr(S.LoadEndianness, e))
            TS.set_default_load_endianness(getattr(TS.LoadEndianness, e))
            mine = ember.load(io.BytesIO(data))
            theirs = torch.load(io.BytesIO(data))
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
        assert ember.load(io.BytesIO(data)).tolist() == [1.0, 2.5]     # native: little here
    finally:
        S.set_default_load_endianness(None)
        TS.set_default_load_endianness(None)
    for lib in (S, TS):
        with pytest.raises(TypeError, match="Invalid argument type in function "
                                            "set_default_load_endianness"):
            lib.set_default_load_endianness("big")


def test_small_helpers_as_torch():
    with S.mkdtemp() as d:
        assert os.path.isdir(d)
    assert not os.path.exists(d)
    assert issubclass(S.SourceChangeWarning, Warning)
    for version, req in (("1.26.4", (1, 20)), ("1.26.4", (2,)), ("2.0", (2, 0, 1))):
        mod = types.SimpleNamespace(__version__=version, __name__="m")
        try:
            expected = TS.check_module_version_greater_or_equal(mod, req)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match=re.escape(str(e))):
                S.check_module_version_greater_or_equal(mod, req)
        else:
            assert S.check_module_version_greater_or_equal(mod, req) == expected
    bad = types.SimpleNamespace(__version__="1.x", __name__="m")
    for lib in (S, TS):
        with pytest.raises(RuntimeError, match="'m' module version string is malformed '1.x'"):
            lib.check_module_version_greater_or_equal(bad, (1, 2))
        with pytest.warns(UserWarning, match="but continuing assuming that requirement is met"):
            assert lib.check_module_version_greater_or_equal(bad, (1, 2), False)


def test_default_mmap_options_as_torch(tmp_path):
    import mmap
    path = str(tmp_path / "t.pt")
    torch.save({"w": torch.arange(4.0)}, path)
    assert S.get_default_mmap_options() == TS.get_default_mmap_options() == mmap.MAP_PRIVATE
    private = ember.load(path, mmap=True)
    private["w"][0] = 100.0
    assert torch.load(path)["w"][0].item() == 0.0             # memory only
    with S.set_default_mmap_options(mmap.MAP_SHARED):
        assert S.get_default_mmap_options() == mmap.MAP_SHARED
        shared = ember.load(path, mmap=True)
        shared["w"][1] = 7.0
        del shared
    assert torch.load(path)["w"].tolist() == [0.0, 7.0, 2.0, 3.0]   # the file changed
    assert S.get_default_mmap_options() == mmap.MAP_PRIVATE
    for lib in (S, TS):
        with pytest.raises(ValueError, match="Invalid argument in function "
                                             "set_default_mmap_options, expected "
                                             "mmap.MAP_PRIVATE or mmap.MAP_SHARED, but got 5"):
            lib.set_default_mmap_options(5)
