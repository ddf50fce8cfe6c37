"""torch's legacy tensor types (``torch.FloatTensor``, ``torch.LongTensor``...), ``typename`` and
``set_default_tensor_type``.

A legacy type is not a Tensor subclass (nor is torch's): ``isinstance(x, ember.FloatTensor)``
asks whether ``x`` is a dense float32 CPU tensor, and calling it makes one:
``FloatTensor(2, 3)`` (uninitialized, of that size), ``FloatTensor([1, 2])`` (from data),
``FloatTensor()`` (empty), ``FloatTensor(t)`` (``t`` itself, aliased, when it has the dtype).
``Tensor.type()`` names them; ``Tensor.type('torch.DoubleTensor')`` converts by name.
"""
import warnings

from . import _dtype
from ._tensor import Tensor

# the legacy names torch has at the top level, and their dtypes
_NAMES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
          "Byte": "uint8", "Char": "int8", "Short": "int16", "Int": "int32", "Long": "int64",
          "Bool": "bool"}


class _TensorType(type):
    """The metaclass of the legacy types: ``isinstance`` by dtype and device, construction."""

    def __instancecheck__(cls, obj):
        return (isinstance(obj, Tensor) and obj.dtype is cls.dtype and
                obj.is_cuda == cls.is_cuda and obj.is_sparse == cls.is_sparse)

    def __call__(cls, *args, device=None, **kwargs):
        import ember
        if cls.is_sparse:
            return _new_sparse(cls, args, device)
        if kwargs:
            raise TypeError(f"new() received an invalid combination of arguments - got "
                            f"{', '.join(kwargs)} as keywords; {cls.__name__} takes a size, "
                            "data, a tensor, and device")
        device = device or ("cuda" if cls.is_cuda else "cpu")
        if len(args) == 1 and isinstance(args[0], Tensor):
            t = args[0]
            if t.dtype is not cls.dtype or t.device.type != ember.device(device).type:
                raise TypeError(f"expected {cls.__name__} (dtype {cls.dtype}, device "
                                f"{device}), got a tensor of {t.dtype} on {t.device}")
            return t.view_as(t)
        # NOTE: as torch, a Size is a size but a tuple is data (FloatTensor((2, 3)) is [2., 3.])
        size = args[0] if len(args) == 1 and isinstance(args[0], ember.Size) else args
        if all(isinstance(n, int) and not isinstance(n, bool) for n in size):
            return ember.empty(tuple(size) or (0,), dtype=cls.dtype, device=device)
        if len(args) == 1 and not isinstance(args[0], (str, bytes, float, complex, bool)):
            return ember.tensor(args[0], dtype=cls.dtype, device=device)
        if len(args) == 1 and isinstance(args[0], (str, bytes)):
            raise TypeError(f"new(): invalid data type '{type(args[0]).__name__}'")
        raise TypeError(f"new(): data must be a sequence (got {type(args[0]).__name__})"
                        if len(args) == 1 else
                        f"new(): argument 'size' must be tuple of ints, but found element of "
                        f"type {type(next(n for n in size if not isinstance(n, int))).__name__}")

    def __repr__(cls):
        return f"<class '{cls.__module__}.{cls.__name__}'>"


def _new_sparse(cls, args, device):
    """``torch.sparse.FloatTensor(indices, values[, size])`` or ``(*size)``."""
    import ember
    if args and isinstance(args[0], Tensor):
        # NOTE: as torch, the values keep their own dtype (LongTensor values stay int64)
        return ember.sparse_coo_tensor(*args[:3], device=device)
    size = tuple(args[0]) if len(args) == 1 and isinstance(args[0], ember.Size) else args
    indices = ember.zeros(len(size) or 1, 0, dtype=ember.int64, device=device)
    return ember.sparse_coo_tensor(indices, ember.zeros(0, dtype=cls.dtype, device=device),
                                   size or (0,))


def _legacy_type(prefix, dtype_name, cuda, sparse=False):
    name = prefix + "Tensor"
    dtype = _dtype._BY_NAME[dtype_name]
    module = "torch" + (".cuda" if cuda else "") + (".sparse" if sparse else "")
    doc = (f"``{module}.{name}``: a {dtype} {'sparse ' if sparse else ''}"
           f"{'CUDA' if cuda else 'CPU'} tensor, as a constructor and an ``isinstance`` target.")
    return _TensorType(name, (), {"dtype": dtype, "is_cuda": cuda, "is_sparse": sparse,
                                  "__doc__": doc, "__module__": module})


TYPES = {n + "Tensor": _legacy_type(n, d, False) for n, d in _NAMES.items()}
CUDA_TYPES = {n + "Tensor": _legacy_type(n, d, True) for n, d in _NAMES.items()}
# (torch.sparse has no BoolTensor)
SPARSE_TYPES = {n + "Tensor": _legacy_type(n, d, False, True) for n, d in _NAMES.items()
                if n != "Bool"}


def _by_name(name):
    """The dtype and device type of a legacy type name, ``'torch.FloatTensor'`` or
    ``'torch.cuda.LongTensor'``; ValueError for another name."""
    short = name[len("torch."):] if name.startswith("torch.") else None
    cuda = short is not None and short.startswith("cuda.")
    kind = (short[5:] if cuda else short) or ""
    # NOTE: as torch's Tensor.type, a sparse name converts dtype and device, not the layout
    kind = kind[len("sparse."):] if kind.startswith("sparse.") else kind
    names = {short + "Tensor": n for n, short in _dtype._SCALAR_NAMES.items()}
    if kind not in names:
        raise ValueError(f"invalid type: '{name}'")
    return _dtype._BY_NAME[names[kind]], "cuda" if cuda else "cpu"


def convert(tensor, dtype, non_blocking=False):
    """``Tensor.type(dtype)``: to a dtype, a legacy type, or a legacy type's name."""
    if isinstance(dtype, str):
        dtype, device = _by_name(dtype)
    elif isinstance(dtype, _TensorType):
        dtype, device = dtype.dtype, "cuda" if dtype.is_cuda else "cpu"
    else:
        device = tensor.device
    return tensor.to(device=device, dtype=dtype, non_blocking=non_blocking)


def typename(obj):
    """The type name of ``obj``: a tensor's legacy type (``torch.FloatTensor``), else the
    class's qualified name.

    Example:
        >>> ember.typename(ember.ones(2)), ember.typename(3)
        ('torch.FloatTensor', 'int')
    """
    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        qualname = type(obj).__qualname__
        module = type(obj).__module__ or ""
    return qualname if module in ("", "builtins") else f"{module}.{qualname}"


def set_default_tensor_type(t):
    """Deprecated torch spelling of ``set_default_dtype``: the dtype of a floating legacy type
    (``ember.DoubleTensor`` or ``'torch.DoubleTensor'``) becomes the default.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     ember.set_default_tensor_type("torch.DoubleTensor")
        >>> ember.ones(1).dtype
        torch.float64
        >>> ember.set_default_dtype(ember.float32)
    """
    warnings.warn("torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
                  "torch.set_default_dtype() and torch.set_default_device() as alternatives.",
                  UserWarning, stacklevel=2)
    dtype = _by_name(t)[0] if isinstance(t, str) else t.dtype
    if not dtype.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    _dtype.set_default_dtype(dtype)
