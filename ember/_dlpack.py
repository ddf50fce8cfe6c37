"""DLPack exchange, zero-copy: ``Tensor.__dlpack__``/``__dlpack_device__`` and ``from_dlpack``
(``ember.utils.dlpack``), through NumPy's DLPack support on the CPU and CuPy's on CUDA."""
import enum

import numpy as np

from ._tensor import Tensor


class DLDeviceType(enum.IntEnum):
    """DLPack's device types (the first of ``__dlpack_device__``'s pair), as torch numbers
    them."""
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17


def export(t, stream=None, max_version=None, dl_device=None, copy=None):
    """``t.__dlpack__(...)``: a capsule over ``t``'s memory (the versioned kind when the
    consumer asks with ``max_version``)."""
    if t.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    if t.device.type == "meta":
        raise BufferError("meta tensors have no data to export")
    kwargs = {k: v for k, v in (("stream", stream), ("max_version", max_version),
                                ("dl_device", dl_device), ("copy", copy)) if v is not None}
    return t._data.__dlpack__(**kwargs)


def device_of(t):
    if t.device.type == "cuda":
        return DLDeviceType.kDLCUDA, t.device.index or 0
    return DLDeviceType.kDLCPU, 0


class _Capsule:
    """A bare capsule (``to_dlpack``'s) dressed as a producer for ``numpy.from_dlpack``."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return DLDeviceType.kDLCPU, 0


def from_dlpack(ext_tensor, *, device=None, copy=None):
    """A tensor sharing memory with ``ext_tensor``: an object with ``__dlpack__`` (a torch
    tensor, NumPy or CuPy array, JAX array...) or a DLPack capsule (CPU only).

    NOTE: NumPy marks an array made from a bare legacy capsule read-only, so such a tensor
    cannot be written; objects with ``__dlpack__`` give writable tensors, as in torch.

    Example:
        >>> import numpy as np
        >>> a = np.arange(3.0)
        >>> t = ember.from_dlpack(a)
        >>> t[0] = 7
        >>> a
        array([7., 1., 2.])
    """
    import ember
    if not hasattr(ext_tensor, "__dlpack__"):
        if type(ext_tensor).__name__ != "PyCapsule":
            raise RuntimeError("from_dlpack received an invalid capsule. Note that DLTensor "
                               "capsules can be consumed only once, so you might have already "
                               "constructed a tensor from it once.")
        ext_tensor = _Capsule(ext_tensor)
    kind, index = ext_tensor.__dlpack_device__()
    if kind == DLDeviceType.kDLCUDA:
        import cupy
        t = Tensor._wrap(cupy.from_dlpack(ext_tensor), ember.device("cuda", index))
    elif kind == DLDeviceType.kDLCPU:
        arr = np.from_dlpack(ext_tensor, copy=copy) if copy is not None else \
            np.from_dlpack(ext_tensor)
        t = ember.from_numpy(arr) if arr.flags.writeable else Tensor._wrap(arr)
    else:
        raise BufferError(f"from_dlpack: ember has no device for DLPack device type {kind}")
    return t if device is None else t.to(device)


def to_dlpack(tensor):
    """A DLPack capsule over ``tensor``'s memory, for one consumer (``from_dlpack`` of torch,
    CuPy, JAX...)."""
    return export(tensor)
