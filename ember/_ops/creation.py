"""Creation functions: tensors from data, constants, ranges, and random tensors."""
import os

import numpy as np

from .. import _dtype
from .._backends import MetaBackend, backend, quietly
from .._device import CPU, META, default_device, to_device
from .._memory_format import laid_out, strides_for
from .._sparse import strided
from .._storage import TypedStorage, UntypedStorage, _ptr
from .._tensor import Tensor


def _T():
    return Tensor


def _size(size, kw=None, name=None):
    """The shape a factory's ``*size`` gives: ints, or one tuple or list of them; ``kw`` is
    its ``size=`` keyword (torch's parser takes ``zeros(size=(2, 3))``), ``name`` the factory."""
    if kw is not None:
        if size:
            raise TypeError(f"{name}() got multiple values for argument 'size'")
        if not isinstance(kw, (tuple, list)):
            raise TypeError(f"{name}(): argument 'size' must be tuple of ints, not "
                            f"{type(kw).__name__}")
        size = (kw,)
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for s in size:              # the common call (rand(1), zeros(n, m)): plain ints, as given
        if type(s) is not int or s < 0:
            break
    else:
        return tuple(size)
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


_PY_SCALARS = (bool, int, float, complex)


def _infer_dtype(data):
    """torch's dtype inference for ``tensor(data)``: Python floats take the default dtype, ints
    int64; NumPy values and tensors keep their dtype; a sequence promotes over its items.
    Returns (dtype or None for an empty sequence, whether a tensor sits inside a sequence)."""
    T = _T()
    if isinstance(data, T):
        return data.dtype, False
    if isinstance(data, (np.ndarray, np.generic)):
        return _dtype.from_numpy_dtype(data.dtype), False
    if type(data) in _PY_SCALARS:
        return _dtype._scalar_dtype(data), False
    if not isinstance(data, (list, tuple, range)):
        raise RuntimeError(f"Could not infer dtype of {type(data).__name__}")
    types = set(map(type, data))
    if types <= set(_PY_SCALARS):       # the common case: a flat list of Python numbers
        return _promote_all(_dtype._scalar_dtype(t()) for t in types), False
    dts, has_tensor = [], False
    for x in data:
        if isinstance(x, T):
            if x.numel() != 1:
                raise TypeError("only integer tensors of a single element can be converted to "
                                "an index")
            dts.append(x.dtype)
            has_tensor = True
        elif isinstance(x, str):
            raise TypeError(f"new(): invalid data type '{type(x).__name__}'")
        else:
            d, t = _infer_dtype(x)
            dts.append(d)
            has_tensor |= t
    return _promote_all(dts), has_tensor


def _promote_all(dts):
    r = None
    for d in dts:
        r = d if r is None else r if d is None else _dtype.promote_types(r, d)
    return r


def _items(data):
    """Nested lists with every one-element tensor replaced by its value, as torch reads
    them."""
    if isinstance(data, _T()):
        return data.item()
    if isinstance(data, (list, tuple)):
        return [_items(x) for x in data]
    return data


def _ragged(data, dim=0):
    """torch's error for a ragged nested list: the first length that differs, or a number where
    a sequence was (TypeError, as in torch)."""
    subs = [x for x in data if isinstance(x, (list, tuple))]
    if subs and len(subs) != len(data):
        if isinstance(data[0], (list, tuple)):
            return TypeError("not a sequence")
        return TypeError(f"'{type(subs[0]).__name__}' object cannot be interpreted as a number")
    for x in subs:
        if len(x) != len(subs[0]):
            return ValueError(f"expected sequence of length {len(subs[0])} at dim {dim + 1} "
                              f"(got {len(x)})")
    for x in subs:
        m = _ragged(x, dim + 1)
        if m:
            return m
    return ValueError("tensor(): nested sequences of different depths") if dim == 0 else None


def _to_array(data, dtype=None):
    """A host array of ``data`` (numbers, nested lists, NumPy values, tensors) with torch's
    inferred dtype, or ``dtype`` when given. May share memory with ``data``."""
    if isinstance(data, _T()):
        arr = backend(data.device).to_host(data._data)
        return arr if dtype is None or arr.dtype == dtype.np else arr.astype(dtype.np)
    if isinstance(data, str):
        raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
    inferred, has_tensor = _infer_dtype(data)
    inferred = inferred or _dtype.get_default_dtype()
    try:
        # (ints up to 2**64 - 1 fit uint64 exactly; NumPy would infer float64 for a mix)
        arr = np.asarray(_items(data) if has_tensor else data,
                         np.uint64 if dtype is _dtype.uint64 and inferred is _dtype.int64 else None)
    except OverflowError:
        raise RuntimeError("value cannot be converted to type uint64 without overflow") from None
    except ValueError:
        raise _ragged(data) from None
    if (arr.dtype == object or inferred is _dtype.int64 and arr.dtype == np.uint64) and \
            not (dtype is _dtype.uint64 and arr.dtype == np.uint64):   # (uint64 holds them)
        if inferred is _dtype.int64:        # ints beyond int64 (NumPy made uint64 or object)
            raise ValueError("Overflow when unpacking long long")
        raise _ragged(data)
    target = (dtype or inferred).np
    if arr.dtype == target:
        return arr
    if dtype is not None and dtype.category == _dtype._INT and arr.size and \
            not isinstance(data, np.ndarray):
        _check_fits(arr, dtype)
    return quietly(_dtype.cast, arr, target)   # (float64 beyond float16's range becomes inf)


def _check_fits(arr, dtype):
    # NOTE: torch refuses Python numbers that overflow an integer dtype (NaN and inf too), but
    # lets negative ints wrap into unsigned ones down to -max (uint8 takes -255, not -256).
    info = np.iinfo(dtype.np)
    lo = info.min if dtype.is_signed else -int(info.max)
    with np.errstate(invalid="ignore"):
        bad = (arr.dtype.kind in "fc" and not np.isfinite(arr).all()) or \
            arr.real.min() < lo or arr.real.max() > info.max
    if bad:
        raise RuntimeError(f"value cannot be converted to type {dtype.name} without overflow")


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of ``data`` (numbers, nested lists, arrays, tensors).

    Example:
        >>> import ember
        >>> ember.tensor([[1, 2], [3, 4]]).dtype, ember.tensor(2.5).dtype
        (torch.int64, torch.float32)
    """
    if pin_memory:
        from .._composites import pinned_new
        return pinned_new(tensor(data, dtype=dtype, device=device, requires_grad=requires_grad),
                          True)
    d = _dtype.to_dtype(dtype) if dtype is not None else None
    device = default_device() if device is None else device
    if isinstance(data, _T()):
        import warnings
        warnings.warn("To copy construct from a tensor, it is recommended to use "
                      "sourceTensor.detach().clone() or sourceTensor.detach().clone()"
                      ".requires_grad_(True), rather than torch.tensor(sourceTensor).",
                      UserWarning, stacklevel=2)
    if isinstance(data, TypedStorage):     # (its elements, of its dtype, as torch)
        data, d = np.array(data), d or data.dtype
    arr = _to_array(data, d)
    src = data._data if isinstance(data, _T()) else data
    if isinstance(src, np.ndarray) and np.may_share_memory(arr, src):
        arr = arr.copy()
    if device is not None and to_device(device).type == "meta":
        return _make(arr, device, requires_grad)
    return _make(arr, device if device is not None else
                 (data.device if isinstance(data, _T()) else None), requires_grad)


def _legacy_new(args, device=None, dtype=None):
    """What ``Tensor(*args)`` holds, by torch's legacy rules: a tensor is itself (an alias);
    ints or one ``Size`` are a size (uninitialized data); a sequence or array is data copied
    as the default dtype; nothing is an empty 1-D tensor. NOTE: on the cpu unless a device is
    given, whatever the default device, as torch's."""
    from .._tensor import Size
    device = CPU if device is None else device
    T, dt = _T(), _dtype.to_dtype(dtype) if dtype is not None else _dtype.get_default_dtype()
    if len(args) == 1 and isinstance(args[0], T):
        args[0]._get_storage()
        return args[0]
    if len(args) == 1 and isinstance(args[0], (list, tuple, range, np.ndarray)) and \
            not isinstance(args[0], Size):
        return _make(_to_array(args[0], dt).copy(), device)
    if all(isinstance(a, (int, np.integer, Size)) and not isinstance(a, bool) for a in args):
        return empty(*(args or (0,)), dtype=dt, device=device)
    raise TypeError(f"new(): data must be a sequence (got {type(args[0]).__name__})")


def as_tensor(data, dtype=None, device=None):
    """``data`` as a tensor, sharing memory with tensors and NumPy arrays where it can."""
    T = _T()
    device = default_device() if device is None else device
    if isinstance(data, T):
        return data.to(dtype=dtype, device=device)
    if isinstance(data, np.ndarray) and (device is None or to_device(device) is CPU):
        t = from_numpy(data)
        return t if dtype is None else t.to(dtype)
    return tensor(data, dtype=dtype, device=device)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """``obj`` as a tensor: shares memory with a tensor or NumPy array where it can, copies
    when ``copy=True``, and refuses to copy when ``copy=False``.

    Example:
        >>> import ember, numpy as np
        >>> a = np.arange(3.0)
        >>> ember.asarray(a).data_ptr() == a.ctypes.data
        True
    """
    if copy:
        t = tensor(obj, dtype=dtype, device=device)
    else:
        t = as_tensor(obj, dtype=dtype, device=device)
        src = obj._data if isinstance(obj, _T()) else obj
        if copy is False and isinstance(src, np.ndarray) and t.data_ptr() != _ptr(src):
            names = _dtype._SCALAR_NAMES
            raise ValueError(f"can't alias tensor with dtype "
                             f"'{names[_dtype.from_numpy_dtype(src.dtype).name]}' into dtype "
                             f"'{names[t.dtype.name]}'.")
    return t.requires_grad_() if requires_grad else t


def from_numpy(ndarray):
    """A tensor sharing memory with the NumPy array ``ndarray``."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    _dtype.from_numpy_dtype(ndarray.dtype)
    if any(s < 0 for s in ndarray.strides):
        raise ValueError("At least one stride in the given numpy array is negative, and tensors "
                         "with negative strides are not currently supported. (You can probably "
                         "work around this by making a copy of your array  with array.copy().) ")
    t = _T()._wrap(ndarray)
    t._storage = UntypedStorage(ndarray, CPU, root=False)
    return t


def _dt(dtype, default=None):
    return (_dtype.to_dtype(dtype) if dtype is not None else default or
            _dtype.get_default_dtype()).np


def _filled(shape, np_dtype, fill):
    """A NumPy array of ``shape`` filled with ``fill`` (None: left as it is), as np.full does
    without its Python."""
    arr = np.empty(shape, np_dtype)
    if fill is not None:
        if np_dtype == _dtype.float4_e2m1fn_x2.np:
            if fill != 0:
                raise NotImplementedError("\"fill_cpu\" not implemented for 'Float4_e2m1fn_x2'")
            arr.view(np.uint8).fill(0)
        # (is_ml_dtypes first: reading float8_e8m0fnu.np imports ml_dtypes, ~0.6 s of CPU)
        elif _dtype.is_ml_dtypes(np_dtype) and np_dtype == _dtype.float8_e8m0fnu.np:
            # (torch's conversion: 0 is 2^-127)
            arr.view(np.uint8).fill(_dtype._to_e8m0(np.asarray(fill)).view(np.uint8))
        else:
            arr.fill(fill)
    return arr


def _const(fn_name, fill):
    def f(*sizes, size=None, out=None, dtype=None, layout=None, device=None,
          requires_grad=False, pin_memory=False, memory_format=None):
        shape = _size(sizes, size, fn_name)
        dev = to_device(device)
        if dev.type == "meta":
            from .meta import empty as meta_empty
            t = _T()._wrap(meta_empty(shape, _dt(dtype)), dev)
        else:
            xp = backend(dev).xp
            # (CuPy's full takes no fill of None, as NumPy's does: empty() asks for xp.empty)
            arr = _filled(shape, _dt(dtype), fill) if dev.type == "cpu" else \
                xp.empty(shape, _dt(dtype)) if fill is None else xp.full(shape, fill, _dt(dtype))
            t = _T()._wrap(arr, dev)
        return _done(t, out, pin_memory, requires_grad)
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
        v = fill_value.item() if hasattr(fill_value, "item") else fill_value
        if t.dtype.category == _dtype._INT:
            v = np.asarray(v)
            _check_fits(v, t.dtype)
            v = v.astype(t.dtype.np)
        elif t.dtype is _dtype.float4_e2m1fn_x2:
            raise NotImplementedError("\"fill_cpu\" not implemented for 'Float4_e2m1fn_x2'")
        elif t.dtype is _dtype.float8_e4m3fn and not abs(complex(v)) <= 448:
            if v == v:      # (nan fills nan; a number past the format's range is refused)
                raise RuntimeError("value cannot be converted to type c10::Float8_e4m3fn "
                                   "without overflow")
        t._data[...] = _dtype._to_e8m0(np.asarray(v)) if t.dtype is _dtype.float8_e8m0fnu else v
    return _done(t, out, pin_memory, requires_grad)


_NO_FILL = object()         # (full_like: its fill value is an argument)


def like_strides(input, dev, memory_format):
    """The strides of a tensor made like ``input`` on ``dev`` as torch's ``memory_format``
    asks (by default preserve_format: as ``input``), or None where row-major."""
    if "meta" in (dev.type, input.device.type) or input.layout is not strided:
        return None
    return strides_for(input._data, memory_format)


def _like(fn, fill=_NO_FILL):
    def f(input, *args, dtype=None, layout=None, device=None, requires_grad=False,
          memory_format=None, **kw):
        a, dev = input._data, input.device if device is None else to_device(device)
        if fill is not _NO_FILL and dtype is device is memory_format is None and not (
                args or kw or requires_grad) and dev is CPU and type(a) is np.ndarray and \
                a.flags.c_contiguous and 1 not in a.shape:
            # (the common call, zeros_like(x): one array of x's shape and dtype, without
            # zeros()'s size and device parsing)
            return Tensor._wrap(_filled(a.shape, input.dtype.np, fill))
        st = like_strides(input, dev, memory_format)
        out = fn(a.shape if st is None else (a.size,), *args, dtype=dtype or input.dtype,
                 device=dev, requires_grad=requires_grad, **kw)
        if st is not None:
            out._data = laid_out(backend(dev).xp, out._data, a.shape, st)
        return out
    f.__name__ = fn.__name__ + "_like"
    f.__doc__ = f"Like ``{fn.__name__}`` with the size (and by default dtype, device) of input."
    return f


zeros_like, ones_like, empty_like, full_like = (_like(zeros, 0), _like(ones, 1),
                                                _like(empty, None), _like(full))


_EXACT = 1 << 53         # ints a double holds exactly


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
    if type(start) is int and type(end) is int and type(step) is int and step and \
            (end - start) * step >= 0 and dtype in (None, _dtype.int64) and \
            -_EXACT < start < _EXACT and -_EXACT < end < _EXACT:
        # (Python ints, the common arange(n): NumPy's integer arange gives the values the
        # double-precision formula below gives, in one call instead of five)
        return _finish(_drawn(device, (len(range(start, end, step)),), np.int64,
                              lambda: np.arange(start, end, step, dtype=np.int64)),
                       device, requires_grad, out)
    vals = [v.item() if hasattr(v, "item") else v for v in (start, end, step)]
    if vals[2] == 0:
        raise RuntimeError("step must be nonzero")
    if (vals[1] - vals[0]) / vals[2] < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype is None:
        dtype = _dtype.int64 if all(isinstance(v, (int, np.integer)) for v in vals) else None
    # NOTE: torch computes the length in double, then each value as start + i * step.
    n = int(np.ceil((vals[1] - vals[0]) / vals[2]))
    arr = _drawn(device, (n,), _dt(dtype), lambda: (
        (vals[0] + np.arange(n, dtype=np.float64) * vals[2]).astype(_dt(dtype))
        if np.dtype(_dt(dtype)).kind != "i" else
        (vals[0] + np.arange(n) * vals[2]).astype(_dt(dtype))))
    return _finish(arr, device, requires_grad, out)


def _drawn(device, shape, np_dtype, draw):
    """``draw()``, the host array a factory computes, except on the meta device: an array of
    ``shape`` holding no data, so that a factory never computes (or allocates) what the meta
    device throws away."""
    return MetaBackend.empty(shape, np_dtype) if to_device(device) is META else draw()


def _computed(shape, values, dtype, device, requires_grad=False):
    """``tensor(values(), ...)`` for a factory whose values NumPy computes; on the meta device
    an empty tensor of ``shape``, computing nothing."""
    if to_device(device) is META:
        return empty(shape, dtype=dtype, device=device, requires_grad=requires_grad)
    return tensor(values(), dtype=dtype, device=device, requires_grad=requires_grad)


def _finish(arr, device, requires_grad, out, pin_memory=False):
    return _done(_make(arr, device), out, pin_memory, requires_grad)


def _done(t, out=None, pin_memory=False, requires_grad=False):
    """A new tensor's last steps: written into ``out``, or pinned and made a leaf requiring
    grad as asked."""
    if out is not None:
        return out.resize_(t.shape).copy_(t)
    if pin_memory:
        from .._composites import pinned_new
        t = pinned_new(t, True)
    return t.requires_grad_(True) if requires_grad else t


def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    return _finish(_drawn(device, (steps,), _dt(dtype),
                          lambda: np.linspace(start, end, steps).astype(_dt(dtype))),
                   device, requires_grad, out)


def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """``base ** linspace(start, end, steps)``."""
    return _finish(_drawn(device, (steps,), _dt(dtype),
                          lambda: np.logspace(start, end, steps, base=base).astype(_dt(dtype))),
                   device, requires_grad, out)


def eye(n, m=None, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    """An ``n`` x ``m`` matrix with ones on the diagonal."""
    m = n if m is None else m
    return _finish(_drawn(device, (n, m), _dt(dtype), lambda: np.eye(n, m, dtype=_dt(dtype))),
                   device, requires_grad, out)


# Attributes that are the tensor itself, not user state, and so are not pickled as state.
_NOT_STATE = ("grad", "dtype", "device", "grad_fn", "data")


def _reduce(t):
    """``pickle`` support, as torch's: the storage (pickled once, so tensors sharing it still
    share it after loading), the byte offset, shape and strides; then dtype, device,
    requires_grad, class and the tensor's ``__dict__``. Off the cpu, a copy of the data."""
    if t.layout.name != "strided":
        from .sparse import _reduce_sparse
        return _reduce_sparse(t)
    state = {k: v for k, v in t.__dict__.items() if not k.startswith("_") and k not in
             _NOT_STATE}
    tail = (t.dtype.name, str(t.device), t._requires_grad, type(t), state)
    if t.device.type == "cpu":
        st = t._get_storage()
        b = st._bytes()
        if b is not None:
            off = _ptr(t._data) - _ptr(b[0])
            return (_rebuild_view, (st, off, t._data.shape, t._data.strides) + tail)
    host = None if t.device.type == "meta" else backend(t.device).to_host(t._data)
    return (_rebuild, (host, tuple(t.shape)) + tail)


def _rebuild_view(storage, offset, shape, strides, dtype_name, device, requires_grad, cls,
                  state):
    arr = np.ndarray(shape, _dtype._by_name(dtype_name).np, buffer=storage._array,
                     offset=offset, strides=strides)
    t = _T()._wrap(arr)
    t._storage = storage
    return _restore(t, requires_grad, cls, state)


def _rebuild(arr, shape, dtype_name, device, requires_grad, cls, state):
    d = _dtype._by_name(dtype_name)
    if arr is None:
        t = empty(shape, dtype=d, device=device)
    else:
        t = _make(np.array(arr, dtype=d.np), device)
    return _restore(t, requires_grad, cls, state)


def _restore(t, requires_grad, cls, state):
    if cls is not _T():
        t = cls(t, requires_grad) if hasattr(cls, "_is_param") else t
    t._requires_grad = requires_grad
    t.__dict__.update(state)
    return t


def _deepcopy(t, memo):
    """``copy.deepcopy`` of a leaf tensor: the pickle recipe copied with ``memo`` (so shared
    storages stay shared), plus a copy of ``.grad``."""
    import copy
    fn, args = _reduce(t)
    new = fn(*copy.deepcopy(args, memo))
    if t.grad is not None:
        new.grad = copy.deepcopy(t.grad, memo)
    return new


def legacy_range(start=0, end=None, step=1, *, out=None, dtype=None, layout=None, device=None,
                 requires_grad=False):
    """Deprecated ``torch.range``: values from ``start`` to ``end`` *inclusive* every ``step``,
    of the default float dtype unless ``dtype`` says otherwise (``arange`` excludes ``end``).

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> ember.range(0, 3), ember.range(1, 2, 0.5, dtype=ember.float64)
        (tensor([0., 1., 2., 3.]), tensor([1.0000, 1.5000, 2.0000], dtype=torch.float64))
    """
    import warnings
    if end is None:
        raise TypeError('range() missing 1 required positional arguments: "end"')
    warnings.warn("torch.range is deprecated and will be removed in a future release because "
                  "its behavior is inconsistent with Python's range builtin. Instead, use "
                  "torch.arange, which produces values in [start, end).", UserWarning,
                  stacklevel=2)
    start, end, step = (v.item() if hasattr(v, "item") else v for v in (start, end, step))
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) / step < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    n = int(np.floor((end - start) / step)) + 1
    return _finish((start + np.arange(n, dtype=np.float64) * step).astype(_dt(dtype)), device,
                   requires_grad, out)


def scalar_tensor(s, *, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False):
    """A 0-dim tensor holding the number ``s``, of the default float dtype unless ``dtype``.

    Example:
        >>> ember.scalar_tensor(3), ember.scalar_tensor(2, dtype=ember.int32)
        (tensor(3.), tensor(2, dtype=torch.int32))
    """
    if isinstance(s, Tensor) or not isinstance(s, (int, float, complex, np.number, np.bool_)):
        raise TypeError(f"scalar_tensor(): argument 's' (position 1) must be Number, not "
                        f"{type(s).__name__}")
    dt = _dtype.to_dtype(dtype) if dtype is not None else _dtype.get_default_dtype()
    if isinstance(s, complex) and dt.category != _dtype._COMPLEX:
        raise RuntimeError(f"value cannot be converted to type {dt.name.rstrip('0123456789')}"
                           " without overflow")
    return tensor(s, dtype=dt, device=device, requires_grad=requires_grad)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False):
    """An uninitialized tensor with the given ``size`` and ``stride``, over a storage just big
    enough for them.

    Example:
        >>> ember.empty_strided((2, 3), (1, 2)).stride()
        (1, 2)
    """
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise RuntimeError(f"dimensionality of sizes ({len(size)}) must match dimensionality of "
                           f"strides ({len(stride)})")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(size)} and "
                           f"strides={list(stride)}")
    n = 0 if 0 in size else 1 + sum((n - 1) * s for n, s in zip(size, stride))
    return empty(n, dtype=dtype, device=device).as_strided(size, stride).requires_grad_(
        requires_grad)


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None,
                   requires_grad=False, pin_memory=False):
    """An uninitialized tensor of ``size`` laid out in memory in the dimension order
    ``physical_layout`` (outermost first): ``(0, 2, 3, 1)`` is channels-last for NCHW.

    Example:
        >>> ember.empty_permuted((2, 3, 4), (0, 2, 1)).stride()
        (12, 1, 3)
    """
    size, order = tuple(size), tuple(physical_layout)
    if len(size) != len(order):
        raise RuntimeError(f"Number of dimensions in size does not match the length of the "
                           f"physical_layout; i.e. len(size) = {len(size)} is not equal to "
                           f"len(physical_layout) = {len(order)}")
    if sorted(order) != list(range(len(size))):
        raise RuntimeError("Duplicate dim not allowed")
    t = empty(tuple(size[d] for d in order), dtype=dtype, device=device)
    return t.permute(tuple(order.index(d) for d in range(len(size)))).requires_grad_(
        requires_grad)


def from_file(filename, shared=None, size=0, *, dtype=None, layout=None, device=None,
              pin_memory=False):
    """A 1-D tensor of the first ``size`` elements of ``dtype`` in the file ``filename``:
    ``shared=True`` maps the file (writes to the tensor write the file), else a copy is read.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "data.bin")
        >>> ember.arange(4.0).numpy().tofile(path)
        >>> ember.from_file(path, size=3)
        tensor([0., 1., 2.])
    """
    np_dtype = np.dtype(_dt(dtype))
    have, need = os.path.getsize(filename), size * np_dtype.itemsize
    if need > have:
        raise RuntimeError(f"file <{filename}> size <{have}> is smaller than the required "
                           f"mapping size <{need}>")
    if size == 0:
        arr = np.empty(0, np_dtype)
    elif shared:
        arr = np.memmap(filename, dtype=np_dtype, mode="r+", shape=(size,))
    else:
        arr = np.fromfile(filename, dtype=np_dtype, count=size)
    t = from_numpy(arr)
    return t if device is None else t.to(device)


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """A 1-D tensor sharing memory with an object of the buffer protocol (``bytearray``,
    ``memoryview``, ``array.array``...): ``count`` elements of ``dtype`` from byte ``offset``
    (all that fit when ``count`` is -1).

    Example:
        >>> b = bytearray(b"\\x01\\x00\\x02\\x00")
        >>> t = ember.frombuffer(b, dtype=ember.int16)
        >>> t[0] = 7
        >>> t, b[0]
        (tensor([7, 2], dtype=torch.int16), 7)
    """
    import warnings
    try:
        mem = memoryview(buffer)
    except TypeError:
        raise ValueError("object does not implement Python buffer protocol.") from None
    length, size = mem.nbytes, _dtype.to_dtype(dtype).itemsize
    if length <= 0 or count == 0:
        raise ValueError(f"both buffer length ({length}) and count ({count}) must not be 0")
    if not 0 <= offset < length:
        raise ValueError(f"offset ({offset} bytes) must be non-negative and no greater than "
                         f"buffer length ({length} bytes) minus 1")
    if count < 0:
        if (length - offset) % size:
            raise ValueError(f"buffer length ({length - offset} bytes) after offset ({offset} "
                             f"bytes) must be a multiple of element size ({size})")
        count = (length - offset) // size
    elif offset + count * size > length:
        raise ValueError(f"requested buffer length ({count} * {size} bytes) after offset "
                         f"({offset} bytes) must not be greater than actual buffer length "
                         f"({length} bytes)")
    if mem.readonly:
        # NOTE: torch warns and lets the tensor write to the read-only buffer; ember's tensor
        # stays read-only (NumPy refuses the writes)
        warnings.warn("The given buffer is not writable, and PyTorch does not support "
                      "non-writable tensors. In ember the tensor is read-only: copy the buffer, "
                      "or make it writable, to write to it.", UserWarning, stacklevel=2)
    arr = np.frombuffer(mem.cast("B"), dtype=_dt(dtype), count=count, offset=offset)
    return from_numpy(arr).requires_grad_(requires_grad)
