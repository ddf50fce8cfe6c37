"""Storages: the memory behind tensors. Views share one storage and its version counter."""
import numpy as np

from ._C.dispatch import ext as _ext


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
    if isinstance(arr, np.ndarray):     # (the C extension's reads the field: no dict made)
        return arr.__array_interface__["data"][0] if _ext is None else _ext.data_ptr(arr)
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
        from ._backends import backend
        host = np.ascontiguousarray(backend(self.device).to_host(self._array))
        return list(host.view(np.uint8).reshape(-1).tolist())

    is_cuda = property(lambda self: self.device.type == "cuda")

    def cuda(self, device=None, non_blocking=False):
        """This storage's bytes on a GPU (itself when already there), as torch's
        ``storage.cuda()``: what a ``map_location`` callable returns to load onto the GPU.

        Example:
            >>> s = ember.ones(2).untyped_storage()
            >>> s.cpu() is s
            True
        """
        from ._device import to_device
        return self._moved(to_device("cuda" if device is None else device))

    def cpu(self):
        """This storage's bytes in host memory (itself when already there)."""
        from ._device import CPU
        return self._moved(CPU)

    def _moved(self, dev):
        from ._backends import backend
        if dev == self.device:
            return self
        return UntypedStorage(backend(dev).from_host(backend(self.device).to_host(self._array),
                                                     dev), dev)

    def _bytes(self):
        """The owning host memory as flat bytes, or None where it is not one block."""
        owner = _root(self._array)
        if self.device.type != "cpu" or not (owner.flags.c_contiguous or owner.flags.f_contiguous):
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


_warned = [False]


def _warn_typed_storage_removal():
    from ._config import is_warn_always_enabled
    if not _warned[0] or is_warn_always_enabled():
        import warnings
        _warned[0] = True
        warnings.warn("TypedStorage is deprecated. It will be removed in the future and "
                      "UntypedStorage will be the only storage class. This should only matter "
                      "to you if you are using storages directly.  To access UntypedStorage "
                      "directly, use tensor.untyped_storage() instead of tensor.storage()",
                      UserWarning, stacklevel=3)


class TypedStorage:
    """torch's deprecated typed view of an ``UntypedStorage``: its bytes as ``dtype`` elements.

    ``TypedStorage()``, ``TypedStorage(size)`` (uninitialized), ``TypedStorage(data)`` (a
    sequence) or ``TypedStorage(wrap_storage=untyped, dtype=...)``; ``Tensor.storage()`` gives
    the one behind a tensor, so writing to it writes the tensor.

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> x = ember.arange(3.0)
        >>> s = x.storage()
        >>> s[0] = 5
        >>> x, s.dtype, s.size()
        (tensor([5., 1., 2.]), torch.float32, 3)
    """

    is_sparse = False

    def __init__(self, *args, wrap_storage=None, dtype=None, device=None, _internal=False):
        import ember
        if not _internal:
            _warn_typed_storage_removal()
        self.dtype = dtype or ember.get_default_dtype()
        if wrap_storage is not None:
            if args:
                raise RuntimeError("TypedStorage: wrap_storage takes no positional arguments")
            self._untyped_storage = wrap_storage
            return
        if len(args) > 1 or args and isinstance(args[0], (str, bytes)):
            raise TypeError(f"new(): invalid data type '{type(args[-1]).__name__}'")
        t = (ember.empty(args[0] if args else 0, dtype=self.dtype, device=device)
             if not args or isinstance(args[0], int) else
             ember.tensor(args[0], dtype=self.dtype, device=device))
        self._untyped_storage = t.untyped_storage()

    device = property(lambda self: self._untyped_storage.device)

    is_cuda = property(lambda self: self.device.type == "cuda")

    def _array(self):
        s = self._untyped_storage
        if s.device.type == "cuda":     # the GPU's bytes, read and written through CuPy
            return _root(s._array).reshape(-1).view(np.uint8).view(self.dtype.np)
        b = s._bytes()
        if b is None:
            raise RuntimeError(f"TypedStorage: cannot read a {self.device.type} storage's "
                               "elements on the host")
        return b[1].view(self.dtype.np)

    def untyped(self):
        """The ``UntypedStorage`` this views."""
        return self._untyped_storage

    def element_size(self):
        return self.dtype.itemsize

    def nbytes(self):
        return self._untyped_storage.nbytes()

    def size(self):
        """The number of ``dtype`` elements."""
        return self.nbytes() // self.element_size()

    __len__ = size

    def data_ptr(self):
        return self._untyped_storage.data_ptr()

    def type(self):
        from ._dtype import _SCALAR_NAMES
        return f"torch.{'cuda.' if self.is_cuda else ''}{_SCALAR_NAMES[self.dtype.name]}Storage"

    def _index(self, idx):
        if isinstance(idx, slice):
            raise RuntimeError("slices are only supported in UntypedStorage.__getitem__")
        n = self.size()
        if not -n <= idx < n:
            raise IndexError(f"index {idx} out of range for storage of size {n}")
        return idx % n

    def __getitem__(self, idx):
        return self._array()[self._index(idx)].item()

    def __setitem__(self, idx, value):
        self._array()[self._index(idx)] = value

    def __iter__(self):
        return iter(self.tolist())

    def __array__(self, dtype=None, copy=None):
        if self.is_cuda:
            raise TypeError("can't convert a cuda storage to a NumPy array: use .cpu() first")
        a = self._array()
        return a if dtype is None else a.astype(dtype)

    def tolist(self):
        return self._array().tolist()

    def fill_(self, value):
        self._array()[...] = value
        return self

    def __repr__(self):
        body = "".join(f" {v}\n" for v in self.tolist())
        return (f"{body}[torch.storage.TypedStorage(dtype={self.dtype}, device={self.device}) "
                f"of size {self.size()}]")


class _LegacyStorageMeta(type):
    """``ember.FloatStorage`` & co. (and ``ember.cuda.FloatStorage``): make a ``TypedStorage``
    of their dtype on their device, and are ``isinstance`` targets for typed storages of it."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, TypedStorage) and obj.dtype is cls.dtype and \
            obj.is_cuda == cls.is_cuda

    def __call__(cls, *args, wrap_storage=None, **kwargs):
        if kwargs:
            raise RuntimeError(f"{cls!r}.__new__ received an invalid combination of arguments. "
                               f"Keyword argument '{next(iter(kwargs))}' cannot be specified")
        if wrap_storage is not None and wrap_storage.is_cuda != cls.is_cuda:
            raise RuntimeError("Device of 'wrap_storage' must be "
                               f"{'cuda' if cls.is_cuda else 'cpu'}, but got "
                               f"{wrap_storage.device.type}")
        return TypedStorage(*args, wrap_storage=wrap_storage, dtype=cls.dtype,
                            device="cuda" if cls.is_cuda and wrap_storage is None else None)

    def __repr__(cls):
        return f"<class '{cls.__module__}.{cls.__name__}'>"


def legacy_storage_types(cuda=False):
    """``{'FloatStorage': class, ...}`` for torch's legacy storage names (``torch.cuda``'s
    with ``cuda``)."""
    from ._dtype import _BY_NAME, _SCALAR_NAMES
    mod = "torch.cuda" if cuda else "torch"
    return {f"{short}Storage": _LegacyStorageMeta(f"{short}Storage", (), {
        "dtype": _BY_NAME[name], "is_cuda": cuda, "__module__": mod,
        "__doc__": f"``{mod}.{short}Storage``: a {name} TypedStorage"
                   f"{' on the GPU' if cuda else ''}."})
        for name, short in _SCALAR_NAMES.items()
        if not name.startswith("float8") and (not cuda or short in _CUDA_NAMES)}


# the legacy storage classes torch.cuda has (torch.cuda has no UInt16Storage & co.)
_CUDA_NAMES = ("Float", "Double", "Half", "BFloat16", "Byte", "Char", "Short", "Int", "Long",
               "Bool", "ComplexFloat", "ComplexDouble")


def is_storage(obj):
    """True for an ``UntypedStorage`` or a ``TypedStorage``.

    Example:
        >>> ember.is_storage(ember.ones(2).untyped_storage()), ember.is_storage(ember.ones(2))
        (True, False)
    """
    return isinstance(obj, (UntypedStorage, TypedStorage))
