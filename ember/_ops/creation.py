"""Creation functions: tensors from data, constants, ranges, and random tensors."""
import numpy as np

from .. import _dtype
from .._backends import backend
from .._device import CPU, to_device


def _T():
    from .._tensor import Tensor
    return Tensor


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for s in size:
        if not isinstance(s, (int, np.integer)) and not hasattr(s, "__index__"):
            raise TypeError(f"expected a sequence of integers as size, got {type(s).__name__}")
        s = int(s.__index__() if hasattr(s, "__index__") else s)
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: "
                               f"{list(size)}")
        out.append(s)
    return tuple(out)


def _make(arr, device, requires_grad=False):
    """Wrap a host array as a tensor on ``device``."""
    dev = to_device(device)
    if dev is not CPU:
        arr = backend(dev).from_host(arr, dev)
    t = _T()._wrap(arr, dev)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _infer_np(data):
    """NumPy array of Python data with torch's dtype inference (floats -> default dtype)."""
    arr = np.asarray(data)
    if arr.dtype == np.float64 and not _has_np_float64(data):
        arr = arr.astype(_dtype.get_default_dtype().np)
    elif arr.dtype == np.complex128 and not isinstance(data, np.ndarray):
        arr = arr.astype(_dtype.get_default_dtype().to_complex().np)
    elif arr.dtype.kind in "iu" and not isinstance(data, np.ndarray) and arr.dtype != np.uint8:
        arr = arr.astype(np.int64)
    elif arr.dtype == object:
        raise TypeError(f"tensor(): could not infer dtype of {type(data).__name__}: ragged "
                        "or non-numeric data")
    return arr


def _has_np_float64(data):
    if isinstance(data, np.ndarray):
        return data.dtype == np.float64
    if isinstance(data, np.floating):
        return isinstance(data, np.float64)
    if isinstance(data, (list, tuple)) and data:
        return _has_np_float64(data[0])
    return hasattr(data, "dtype") and getattr(data.dtype, "name", "") == "float64"


def _to_array(data, dtype=None):
    T = _T()
    if isinstance(data, T):
        arr = backend(data.device).to_host(data._data).copy()
    elif isinstance(data, (list, tuple)) and any(isinstance(x, T) for x in data):
        arr = np.stack([_to_array(x) for x in data]) if data else np.zeros(0)
    elif isinstance(data, str):
        raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
    else:
        arr = _infer_np(data)
    if dtype is not None and arr.dtype != dtype.np:
        arr = arr.astype(dtype.np)
    return arr


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of ``data`` (numbers, nested lists, arrays, tensors).

    Example:
        >>> import ember
        >>> ember.tensor([[1, 2], [3, 4]]).dtype, ember.tensor(2.5).dtype
        (torch.int64, torch.float32)
    """
    d = _dtype.to_dtype(dtype) if dtype is not None else None
    arr = _to_array(data, d)
    if arr.base is not None or not arr.flags.owndata or arr is data:
        arr = arr.copy()
    if device is not None and to_device(device).type == "meta":
        return _make(arr, device, requires_grad)
    return _make(arr, device if device is not None else
                 (data.device if isinstance(data, _T()) else None), requires_grad)


def as_tensor(data, dtype=None, device=None):
    """``data`` as a tensor, sharing memory with tensors and NumPy arrays where it can."""
    T = _T()
    if isinstance(data, T):
        return data.to(dtype=dtype, device=device)
    if isinstance(data, np.ndarray) and (device is None or to_device(device) is CPU):
        t = from_numpy(data)
        return t if dtype is None else t.to(dtype)
    return tensor(data, dtype=dtype, device=device)


asarray = as_tensor


def from_numpy(ndarray):
    """A tensor sharing memory with the NumPy array ``ndarray``."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    _dtype.from_numpy_dtype(ndarray.dtype)
    return _T()._wrap(ndarray)


def _dt(dtype, default=None):
    return (_dtype.to_dtype(dtype) if dtype is not None else default or
            _dtype.get_default_dtype()).np


def _const(fn_name, fill):
    def f(*size, out=None, dtype=None, layout=None, device=None, requires_grad=False,
          pin_memory=False, memory_format=None):
        shape = _size(size)
        dev = to_device(device)
        if dev.type == "meta":
            from .meta import empty as meta_empty
            t = _T()._wrap(meta_empty(shape, _dt(dtype)), dev)
        else:
            t = _T()._wrap(backend(dev).xp.full(shape, fill, dtype=_dt(dtype))
                           if dev.type != "cpu" or fill is not None else
                           np.empty(shape, _dt(dtype)), dev)
        if out is not None:
            return out.resize_(shape).copy_(t)
        return t.requires_grad_(True) if requires_grad else t
    f.__name__ = fn_name
    f.__doc__ = f"A tensor of the given size filled with {fill if fill is not None else 'garbage'}."
    return f


zeros = _const("zeros", 0)
ones = _const("ones", 1)
empty = _const("empty", None)


def full(size, fill_value, *, out=None, dtype=None, layout=None, device=None,
         requires_grad=False, pin_memory=False):
    """A tensor of ``size`` filled with ``fill_value`` (dtype inferred from it)."""
    if dtype is None:
        dtype = _dtype._scalar_dtype(fill_value) if not hasattr(fill_value, "dtype") else \
            fill_value.dtype
    shape = _size((size,) if isinstance(size, int) else tuple(size))
    dev = to_device(device)
    t = zeros(shape, dtype=dtype, device=dev)
    if dev.type != "meta":
        t._data[...] = fill_value.item() if hasattr(fill_value, "item") else fill_value
    if out is not None:
        return out.resize_(shape).copy_(t)
    return t.requires_grad_(True) if requires_grad else t


def _like(fn):
    def f(input, *args, dtype=None, layout=None, device=None, requires_grad=False,
          memory_format=None, **kw):
        return fn(tuple(input.shape), *args, dtype=dtype or input.dtype,
                  device=device or input.device, requires_grad=requires_grad, **kw)
    f.__name__ = fn.__name__ + "_like"
    f.__doc__ = f"Like ``{fn.__name__}`` with the size (and by default dtype, device) of input."
    return f


zeros_like, ones_like, empty_like, full_like = (_like(zeros), _like(ones), _like(empty),
                                                _like(full))


def arange(start=0, end=None, step=1, *, out=None, dtype=None, layout=None, device=None,
           requires_grad=False):
    """Values from ``start`` to ``end`` (exclusive) every ``step``.

    Example:
        >>> import ember
        >>> ember.arange(5), ember.arange(0, 1, 0.25)
        (tensor([0, 1, 2, 3, 4]), tensor([0.0000, 0.2500, 0.5000, 0.7500]))
    """
    if end is None:
        start, end = 0, start
    vals = [v.item() if hasattr(v, "item") else v for v in (start, end, step)]
    if vals[2] == 0:
        raise RuntimeError("step must be nonzero")
    if (vals[1] - vals[0]) / vals[2] < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    if dtype is None:
        dtype = _dtype.int64 if all(isinstance(v, (int, np.integer)) for v in vals) else None
    # NOTE: torch computes the length in double, then each value as start + i * step.
    n = int(np.ceil((vals[1] - vals[0]) / vals[2]))
    arr = (vals[0] + np.arange(n, dtype=np.float64) * vals[2])
    arr = arr.astype(_dt(dtype)) if np.dtype(_dt(dtype)).kind != "i" else \
        (vals[0] + np.arange(n) * vals[2]).astype(_dt(dtype))
    return _finish(arr, device, requires_grad, out)


def _finish(arr, device, requires_grad, out):
    t = _make(arr, device, requires_grad)
    if out is not None:
        return out.resize_(t.shape).copy_(t)
    return t


def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    return _finish(np.linspace(start, end, steps).astype(_dt(dtype)), device, requires_grad, out)


def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """``base ** linspace(start, end, steps)``."""
    return _finish(np.logspace(start, end, steps, base=base).astype(_dt(dtype)), device,
                   requires_grad, out)


def eye(n, m=None, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    """An ``n`` x ``m`` matrix with ones on the diagonal."""
    return _finish(np.eye(n, m if m is not None else n, dtype=_dt(dtype)), device,
                   requires_grad, out)


def _rebuild(arr, dtype_name, device, requires_grad, cls):
    t = _make(np.array(arr, dtype=_dtype._by_name(dtype_name).np), device)
    if cls is not _T():
        t = cls(t, requires_grad) if hasattr(cls, "_is_param") else t
    t._requires_grad = requires_grad
    return t
