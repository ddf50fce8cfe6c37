"""Tensor methods that are not one op each: Python operators, indexing, copies and fills,
the ``new_*`` constructors. Attached to ``Tensor`` by ``ember/__init__.py``."""
import warnings

import numpy as np

from . import _dtype, _memory_format
from ._device import CPU
from ._ops import indexing, linalg, pointwise, registry, shape
from ._ops import pointwise_logic as logic
from ._ops import random as _random
from ._ops.creation import _size, empty, full, ones, zeros
from ._ops.dispatch import (OPERANDS, check_no_overlap, dispatch, dispatch_inplace, hooks,
                            not_operand, view_links)
from ._ops.dispatch import _C
from ._ops.errors import broadcast_clash
from ._tensor import Tensor
from .autograd import grad_mode
from .autograd.graph import _mutation_ctx

_alloc = object.__new__

_add, _sub, _mul, _div, _pow = pointwise.add, pointwise.sub, pointwise.mul, pointwise.div, \
    pointwise.pow
_E = {}


_OPERANDS = OPERANDS       # NotImplemented for anything else (see dispatch.OPERANDS)


def _binary(opdef, reflected=False):
    if _C is not None:          # the same two steps in C (ember/_C/dispatch/_dispatch.c)
        return _C.operator(opdef, reflected)
    if reflected:
        def f(self, other):
            if not isinstance(other, _OPERANDS):
                return not_operand(self, other, opdef)
            return dispatch(opdef, (other, self), _E)
    else:
        def f(self, other):
            if not isinstance(other, _OPERANDS):
                return not_operand(self, other, opdef)
            return dispatch(opdef, (self, other), _E)
    return f


def _inplace(opdef):
    def f(self, other):
        if not isinstance(other, _OPERANDS):
            return not_operand(self, other, opdef)
        return dispatch_inplace(opdef, self, (other,), {})
    return f


def _rsub(self, other):
    if not isinstance(other, _OPERANDS):
        return not_operand(self, other, pointwise.rsub)
    return dispatch(pointwise.rsub, (self, other), _E)


def _by_name(name, reflected=False, inplace=False):
    """An operator for the op ``name``, looked up when called (the op may be added later)."""
    def f(self, other):
        if not isinstance(other, _OPERANDS):
            return not_operand(self, other, name)
        try:
            opdef = registry.get(name)
        except KeyError:
            raise NotImplementedError(f"{name} is not implemented in ember yet") from None
        if inplace:
            return dispatch_inplace(opdef, self, (other,), {})
        return dispatch(opdef, (other, self) if reflected else (self, other), _E)
    return f


def _matmul(reflected):
    def f(self, other):
        if not isinstance(other, Tensor):
            return not_operand(self, other, "matmul")   # (Python raises TypeError, as torch)
        return dispatch(linalg.matmul, (other, self) if reflected else (self, other), _E)
    return f


OPERATORS = {
    "__add__": _binary(_add), "__radd__": _binary(_add, True), "__iadd__": _inplace(_add),
    "__sub__": _binary(_sub), "__rsub__": _rsub, "__isub__": _inplace(_sub),
    # NOTE: as torch, 0.1 * t is t.mul(0.1): a float16 t multiplies by 0.1 in float32, where
    # torch.mul(0.1, t) would round 0.1 to float16 first (see promotion._to_opmath)
    "__mul__": _binary(_mul), "__rmul__": _binary(_mul), "__imul__": _inplace(_mul),
    "__truediv__": _binary(_div), "__rtruediv__": _binary(_div, True),
    "__itruediv__": _inplace(_div),
    "__pow__": _binary(_pow), "__rpow__": _binary(_pow, True), "__ipow__": _inplace(_pow),
    "__matmul__": _matmul(False), "__rmatmul__": _matmul(True),
    "__floordiv__": _by_name("floor_divide"), "__rfloordiv__": _by_name("floor_divide", True),
    "__ifloordiv__": _by_name("floor_divide", inplace=True),
    "__mod__": _by_name("remainder"), "__rmod__": _by_name("remainder", True),
    "__imod__": _by_name("remainder", inplace=True),
    "__lshift__": _by_name("bitwise_left_shift"),
    "__rlshift__": _by_name("bitwise_left_shift", True),
    "__ilshift__": _by_name("bitwise_left_shift", inplace=True),
    "__rshift__": _by_name("bitwise_right_shift"),
    "__rrshift__": _by_name("bitwise_right_shift", True),
    "__irshift__": _by_name("bitwise_right_shift", inplace=True),
    "__eq__": _binary(logic.eq), "__ne__": _binary(logic.ne),
    "__lt__": _binary(logic.lt), "__le__": _binary(logic.le),
    "__gt__": _binary(logic.gt), "__ge__": _binary(logic.ge),
    "__and__": _binary(logic.bitwise_and), "__rand__": _binary(logic.bitwise_and, True),
    "__iand__": _inplace(logic.bitwise_and),
    "__or__": _binary(logic.bitwise_or), "__ror__": _binary(logic.bitwise_or, True),
    "__ior__": _inplace(logic.bitwise_or),
    "__xor__": _binary(logic.bitwise_xor), "__rxor__": _binary(logic.bitwise_xor, True),
    "__ixor__": _inplace(logic.bitwise_xor),
    "__neg__": lambda self: dispatch(pointwise.neg, (self,), _E),
    "__abs__": lambda self: dispatch(pointwise.abs, (self,), _E),
    "__invert__": lambda self: dispatch(logic.bitwise_not, (self,), _E),
    "__pos__": lambda self: self if self.dtype is not _dtype.bool_ else _no_bool_pos(),
}


def _no_bool_pos():
    raise RuntimeError("The `+` operator, on a bool tensor is not supported.")


def __contains__(self, element):
    """``element in t``: whether any entry equals ``element`` (a number or tensor)."""
    if isinstance(element, (Tensor, int, float, complex, np.generic)):
        return bool((element == self).any().item())
    raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you passed in "
                       f"a {type(element)}.")


# ---- indexing -----------------------------------------------------------------------------

def _index_arrays(index, ndim):
    """Tensors and lists inside an index become arrays; returns (index, basic?)."""
    if type(index) is list and _sequence_as_tuple(index):
        index = tuple(index)
    tup = index if isinstance(index, tuple) else (index,)
    out = []
    for i in tup:
        if isinstance(i, Tensor):
            if i.dtype.category > _dtype._INT:
                raise IndexError("tensors used as indices must be long, int, byte or bool "
                                 "tensors")
            if i.dtype is _dtype.uint8:
                # NOTE: torch still reads a uint8 index as a mask (deprecated), not as integers
                warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a "
                              "dtype torch.bool instead.", UserWarning, stacklevel=3)
                i = i.bool()
            i = i._data
        elif isinstance(i, (list, tuple)):
            i = np.asarray([x._data if isinstance(x, Tensor) else x for x in i])
            if i.dtype.kind == "f":
                raise IndexError("tensors used as indices must be long, int, byte or bool "
                                 "tensors")
        elif isinstance(i, np.ndarray) or isinstance(i, np.integer):
            pass
        out.append(i)
    idx = tuple(out) if isinstance(index, tuple) else out[0]
    basic = indexing.is_basic(idx)
    if not basic and any(i is Ellipsis for i in out) and sum(
            0 if i is None or i is Ellipsis else getattr(i, "ndim", 1) if
            getattr(i, "dtype", None) == np.bool_ else 1 for i in out) == ndim:
        # NOTE: an Ellipsis standing for no dimension does not part the tensor indices on
        # either side of it in torch (x[:, i, ..., j] of a 3-D x is (2, n)); in NumPy it does
        idx = tuple(i for i in out if i is not Ellipsis)
    return idx, basic


def _sequence_as_tuple(index):
    # NOTE: torch reads a short list holding tensors, sequences, slices, None or Ellipsis as a
    # tuple of indices (x[[t0, t1]] is x[t0, t1]), where NumPy makes it one array index.
    return len(index) < 32 and any(
        isinstance(x, (Tensor, list, tuple, slice, np.ndarray)) or x is None or x is Ellipsis
        for x in index)


def __getitem__(self, index):
    kind = type(index)
    if kind is int:
        out = _int_view(self, index)
        if out is not None:
            return out
    if kind is slice or kind is tuple and indexing.is_basic(index):
        idx, basic = index, True        # (nothing to convert: the common x[:, 0], x[..., :n])
    else:
        idx, basic = _index_arrays(index, self.ndim)
    if not basic:
        steps = indexing.split_ints(idx)
        if steps is not None:
            return self[steps[0]][steps[1]]
    try:
        return dispatch(indexing.getitem if basic else indexing.index, (self, idx), _E)
    except (IndexError, RuntimeError) as e:
        err = indexing.index_error(tuple(self.shape), idx)
        if err is not None:
            raise err from None
        if "out of bounds" in str(e):
            raise IndexError(str(e)) from None
        raise


def _int_view(self, i):
    """``self[i]`` for an int, on a cpu tensor outside autograd and dispatch hooks: the view
    the getitem op makes, without the trip through dispatch (a Dataset's ``x[i]``). None
    where the general path must answer (or word the error)."""
    if hooks.profiler or hooks.autocast or hooks.tracer or hooks.transform or hooks.override:
        return None
    a = self._data
    if self.device is not CPU or type(a) is not np.ndarray or not a.ndim or \
            (self._requires_grad and grad_mode.state.grad_enabled) or \
            not -a.shape[0] <= i < a.shape[0]:
        return None
    out = _alloc(Tensor)
    out._data, out.dtype = a[i] if a.ndim > 1 else a[i, ...], self.dtype
    out._storage, out._base, out._view_fn = view_links(indexing.getitem, self, (i,), _E)
    out._view_version = out._storage._version       # see graph.edge_of
    return out


def __setitem__(self, index, value):
    if isinstance(index, Tensor) and index.dtype is _dtype.uint8 and not isinstance(value,
                                                                                   Tensor):
        # NOTE: torch writes a number through a lone mask with masked_fill_, which refuses uint8
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype "
                           "unsigned char")
    idx, basic = _index_arrays(index, self.ndim)
    indexing._check_basic(idx)
    if not basic:
        steps = indexing.split_ints(idx)
        if steps is not None:
            return __setitem__(self[steps[0]], steps[1], value)
    err = None
    try:
        _setitem(self, idx, basic, value)
    except (IndexError, RuntimeError):
        err = indexing.index_error(tuple(self.shape), idx)
        if err is None:
            raise
    if err is not None:
        raise err


def _setitem(self, idx, basic, value):
    v_rg = isinstance(value, Tensor) and value._requires_grad
    if grad_mode.state.grad_enabled and (self._requires_grad or v_rg or (
            self._base is not None and self._base._requires_grad)):
        dispatch_inplace(indexing._index_put, self, (value, idx), {})
        return
    if _mutation_ctx:           # (allow_mutation_on_saved_tensors: clone a saved value first)
        _mutation_ctx[-1].before_write(self)
    if self.device.type != "meta":
        if 0 in self._data.strides:
            check_no_overlap("index_put_", self._data[idx] if basic else self._data)
        v = value._data if isinstance(value, Tensor) else value
        if isinstance(value, Tensor) and value.device != self.device and value._data.ndim:
            raise RuntimeError(f"index_put_: expected value on {self.device}, got "
                               f"{value.device}")
        indexing.put_values(self._data, idx, v)
    self._bump_version()


# ---- copies, fills, shapes ------------------------------------------------------------------

def copy_(self, src, non_blocking=False):
    """Copy ``src`` (broadcast, cast, from any device) into this tensor."""
    if not isinstance(src, Tensor):
        src = Tensor._wrap(np.asarray(src))
    if src._data.shape != self._data.shape:
        _check_broadcasts_to("copy_", src.shape, self.shape)
    if src.device is not self.device and src.device != self.device:
        src = src.to(self.device)
    return dispatch_inplace(pointwise._copy_from, self, (src,), {})


def _check_broadcasts_to(name, src, dst):
    """torch's errors for a source of shape ``src`` written into a tensor of shape ``dst``."""
    if tuple(src) == tuple(dst):        # (the common copy_, spared broadcast_shapes)
        return
    clash = broadcast_clash(dst, src)
    if clash:
        raise RuntimeError(f"{name}: {clash}")
    shape = np.broadcast_shapes(tuple(dst), tuple(src))
    if shape != tuple(dst):
        raise RuntimeError(f"{name}: output with shape {list(dst)} doesn't match the broadcast "
                           f"shape {list(shape)}")


# NOTE: torch lets fill_ write an expanded view (every element gets the same value anyway).
pointwise._fill.writes_overlap = True


def fill_(self, value):
    """Fill with ``value`` (a number or a 0-dim tensor)."""
    if isinstance(value, Tensor) and value.dim() != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                           f"{value.dim()} dimensions.")
    return dispatch_inplace(pointwise._fill, self, (value,), {})


def zero_(self):
    """Fill with zeros."""
    return dispatch_inplace(pointwise._fill, self, (0,), {})


def contiguous(self, memory_format=None):
    """Itself if C-contiguous (or laid out as ``memory_format``), else such a copy."""
    if memory_format is None:
        return self if self.is_contiguous() else dispatch(shape.contiguous, (self,), _E)
    if self.is_contiguous(memory_format):
        return self
    if memory_format is _memory_format.preserve_format:
        raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
    _memory_format._check(memory_format, self.dim())
    return dispatch(shape.contiguous, (self, memory_format), _E)


def conj(self):
    """The complex conjugate; a real tensor is returned itself, as torch does (no copy).

    Example:
        >>> x = ember.tensor([1.0, 2.0])
        >>> ember.conj(x) is x, ember.conj(ember.tensor([1 + 2j]))
        (True, tensor([1.-2.j]))
    """
    return self if not self.is_complex() else dispatch(pointwise.conj, (self,), _E)


def conj_physical_(self):
    """Conjugate the elements of a complex tensor in place (a real tensor is left as it is)."""
    return self if not self.is_complex() else dispatch_inplace(pointwise.conj, self, (), _E)


def resize_(self, *sizes):
    """Resize in place; existing elements are kept in flat order where they fit."""
    shape_ = _size(sizes)
    if tuple(shape_) == tuple(self.shape):
        return self
    if self._requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    flat = self._data.reshape(-1)
    new = np.zeros(shape_, self._data.dtype) if self.device.type == "cpu" else \
        type(self._data)(shape_, self._data.dtype)
    n = min(flat.size, new.size)
    new.reshape(-1)[:n] = flat[:n]
    self._data, self._storage = new, None
    self._bump_version()
    return self


def view_as(self, other):
    return self.view(tuple(other.shape))


def reshape_as(self, other):
    return self.reshape(tuple(other.shape))


def expand_as(self, other):
    return self.expand(tuple(other.shape))


def _new(fn):
    def f(self, *sizes, size=None, dtype=None, device=None, requires_grad=False, **kw):
        return fn(_size(sizes, size, f.__name__), dtype=dtype or self.dtype,
                  device=device or self.device, requires_grad=requires_grad, **kw)
    f.__name__ = "new_" + fn.__name__
    return f


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device,
                requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    from ._ops.creation import tensor
    return tensor(data, dtype=dtype or self.dtype, device=device or self.device,
                  requires_grad=requires_grad)


def _matrix_transpose(self):
    if self.dim() == 1:
        raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. Got "
                           "1-D tensor.")
    return self.transpose(-2, -1) if self.dim() else self.transpose(0, -1)   # (a 0-dim: itself)


PROPERTIES = {
    "T": lambda self: self.permute(tuple(range(self.dim() - 1, -1, -1))),
    "mT": lambda self: _matrix_transpose(self),
    "H": lambda self: self.T.conj(),
    "mH": lambda self: self.mT.conj(),
    "real": lambda self: self if not self.is_complex() else pointwise.real(self),
    "imag": lambda self: pointwise.imag(self),
}
# ``t.real = v`` and ``t.imag = v`` copy ``v`` (broadcast) into that view of ``t``, as torch's
SETTERS = {"real": lambda self, v: self.real.copy_(v), "imag": lambda self, v: self.imag.copy_(v)}


RESTRIDE = ("squeeze", "unsqueeze", "t", "transpose", "swapaxes", "swapdims", "as_strided")


def install():
    for name in RESTRIDE:
        setattr(Tensor, name + "_", _restride(name))
    for name, f in OPERATORS.items():
        setattr(Tensor, name, f)
    for name, f in PROPERTIES.items():
        setattr(Tensor, name, property(f, SETTERS.get(name)))
    for f in (__contains__, __getitem__, __setitem__, copy_, fill_, zero_, contiguous, conj,
              conj_physical_, resize_, view_as, reshape_as, expand_as, new_full,
              new_tensor):
        setattr(Tensor, f.__name__, f)
    Tensor.conj_physical = conj
    Tensor.new_zeros, Tensor.new_ones, Tensor.new_empty = _new(zeros), _new(ones), _new(empty)
    for name, f in _random.TENSOR_METHODS.items():
        setattr(Tensor, name, f)


# ---- in-place view ops: change this tensor's shape/strides, keep its storage --------------------

def _restride(name):
    def f(self, *args, **kwargs):
        if self._requires_grad and grad_mode.state.grad_enabled and self.grad_fn is not None:
            # NOTE: an in-place view op on a non-leaf is recorded like the out-of-place view
            v = getattr(self, name)(*args, **kwargs)
            self._data, self.grad_fn, self._output_nr = v._data, v.grad_fn, v._output_nr
            return self
        self._data = getattr(self.detach(), name)(*args, **kwargs)._data
        return self
    f.__name__ = name + "_"
    f.__doc__ = f"In-place version of :meth:`Tensor.{name}` (same storage, new shape/strides)."
    return f

