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

    def __init__(self, array, device, root=True):
        # from_numpy's storage starts at the array it was given (as torch's does); others at
        # the array that owns the memory.
        self._array, self._version, self.device = _root(array) if root else array, 0, device

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

    def _bytes(self):
        """The owning host memory as flat bytes, or None where it is not one block."""
        owner = _root(self._array)
        if self.device.type != "cpu" or not (owner.flags.c_contiguous or
                                             owner.flags.f_contiguous):
            return None
        return owner, owner.ravel(order="K").view(np.uint8)

    def __reduce__(self):
        # Pickled once per pickle (and deepcopy memo), so tensors that shared this storage
        # share the rebuilt one.
        b = self._bytes()
        if b is None:
            raise TypeError(f"cannot pickle a {self.device.type} storage")
        return (_from_bytes, (b[1].copy(),))

    def __repr__(self):
        return f"ember.UntypedStorage(device={self.device}, nbytes={self.nbytes()})"


def _from_bytes(flat):
    from ._device import CPU
    return UntypedStorage(flat, CPU, root=False)
