"""Storages: the memory behind tensors. Views share one storage and its version counter."""
import numpy as np


def _root(arr):
    """The array that owns the memory ``arr`` views (NumPy or CuPy)."""
    kinds = (np.ndarray, type(arr))
    while True:
        b = getattr(arr, "base", None)
        if b is not None and not isinstance(b, kinds):
            b = getattr(b, "base", None)    # as_strided's DummyArray wraps the real base
        if not isinstance(b, kinds):
            return arr
        arr = b


def _ptr(arr):
    if isinstance(arr, np.ndarray):
        return arr.__array_interface__["data"][0]
    return arr.data.ptr          # cupy


class UntypedStorage:
    """The bytes behind one or more tensors, with the version counter their in-place ops bump.

    ``ember`` creates a storage on first need (a view, an in-place op, a saved tensor), so
    plain op results cost nothing extra.
    """

    __slots__ = ("_array", "_version", "device", "__weakref__")

    def __init__(self, array, device):
        self._array, self._version, self.device = _root(array), 0, device

    def data_ptr(self):
        return 0 if self.device.type == "meta" else _ptr(self._array)

    def nbytes(self):
        return int(self._array.nbytes)

    size = nbytes

    def element_size(self):
        return 1

    def __len__(self):
        return self.nbytes()

    def tolist(self):
        return list(np.asarray(self._array).view(np.uint8).reshape(-1).tolist())

    def __repr__(self):
        return f"ember.UntypedStorage(device={self.device}, nbytes={self.nbytes()})"
