"""DLPack, zero-copy, both ways: ember with torch and NumPy (ember.utils.dlpack,
Tensor.__dlpack__)."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "int8", "uint8",
                                   "bool", "complex64"])
def test_torch_reads_and_writes_ember_memory(dtype):
    e = ember.ones(2, 3, dtype=getattr(ember, dtype))
    t = torch.from_dlpack(e)
    assert str(t.dtype) == f"torch.{dtype}" and tuple(t.shape) == (2, 3)
    assert t.data_ptr() == e.data_ptr()
    t[0, 1] = 0
    assert e.tolist() == t.tolist() and e[0, 1].item() == 0


def test_ember_reads_and_writes_torch_and_numpy_memory():
    t = torch.arange(6.0).reshape(2, 3)[:, 1:]       # a strided view
    e = ember.from_dlpack(t)
    assert e.shape == (2, 2) and e.stride() == t.stride() and e.data_ptr() == t.data_ptr()
    e[1, 0] = 40
    assert t[1, 0].item() == 40
    a = np.arange(3, dtype=np.int32)
    n = ember.utils.dlpack.from_dlpack(a)
    n[2] = 9
    assert a.tolist() == [0, 1, 9] and n.dtype is ember.int32
    assert np.from_dlpack(ember.arange(3)).tolist() == [0, 1, 2]


def test_capsules_both_ways():
    e = ember.arange(4.0)
    cap = ember.utils.dlpack.to_dlpack(e)
    t = torch.utils.dlpack.from_dlpack(cap)
    t[0] = 5
    assert e.tolist() == [5.0, 1.0, 2.0, 3.0]
    back = ember.from_dlpack(torch.utils.dlpack.to_dlpack(torch.arange(3.0)))
    assert back.tolist() == [0.0, 1.0, 2.0]          # (read-only: NumPy's rule for bare capsules)
    with pytest.raises(RuntimeError, match="from_dlpack received an invalid capsule"):
        ember.from_dlpack([1, 2])
    with pytest.raises(RuntimeError, match="from_dlpack received an invalid capsule"):
        torch.from_dlpack([1, 2])


def test_device_and_errors_as_torch():
    from ember.utils.dlpack import DLDeviceType
    assert [(d.name, d.value) for d in DLDeviceType] == \
        [(d.name, d.value) for d in torch.utils.dlpack.DLDeviceType]
    assert ember.ones(1).__dlpack_device__() == torch.ones(1).__dlpack_device__() == (1, 0)
    for lib in (ember, torch):
        with pytest.raises(BufferError, match="Can't export tensors that require gradient, use "
                                              "tensor.detach()"):
            lib.ones(2, requires_grad=True).__dlpack__()
    assert ember.from_dlpack(np.ones(2), device="meta").device.type == "meta"
