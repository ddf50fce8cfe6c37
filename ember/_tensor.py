"""Tensor: an array on a device plus dtype, storage (shared by views), version counter and
autograd state. Math methods are attached from the op registry (see ``_ops/__init__.py``)."""
import weakref

import numpy as np

from . import _dtype
from ._C import dispatch as _c_dispatch
from ._backends import backend
from ._device import CPU, to_device
from ._memory_format import _packed
from ._size import Size
from ._sparse import SparseCOO, SparseData, SparseOperand, strided
from ._storage import UntypedStorage, _ptr
from . import autograd
from .autograd import grad_mode
from .autograd.graph import AccumulateGrad

_BY_NP = _dtype._BY_NP
# dtypes whose NumPy scalars aren't Python numbers: tolist() goes through float32
_NO_PY_SCALARS = (_dtype.bfloat16,) + tuple(d for d in _dtype.ALL if d._rank == 0 and
                                             d.category == _dtype._FLOAT)      # (the float8s)
_PY_SCALARS = (float, int, bool, complex)
_new = object.__new__
TF_CLASSES = set()      # Tensor subclasses defining __torch_function__ (ember/overrides)


def _tf_track(t):
    from .overrides import _track
    _track(t)


def _c_ext():
    """The C extension (``ember/_C/dispatch/_dispatch.c``) whose ``TensorBase`` holds a Tensor's hot
    fields, or None when it is not built or ``EMBER_NO_C=1``: then Tensor is a plain class and
    the fields' defaults are class attributes. dispatch's C fast path is used exactly when
    this is not None."""
    ext = _c_dispatch.ext
    if ext is not None:
        ext.tensor_defaults(CPU, Size)
    return ext


_cext = _c_ext()


def _cast(t, dt):
    """``t`` cast to ember dtype ``dt`` by the ``_to_dtype`` op (differentiable)."""
    global _to_dtype_op
    if _to_dtype_op is None:
        from ._ops.pointwise import _to_dtype as _to_dtype_op
    return _to_dtype_op(t, dtype=dt)


_to_dtype_op = None


def parse_to_args(args, dtype=None, device=None):
    """``(dtype, device)`` from the positional forms of ``Tensor.to`` / ``Module.to``:
    a dtype, a device (or its string), both, or a tensor to match."""
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif isinstance(a, _dtype.dtype):
            dtype = a
        elif a is not None:
            device = a
    return dtype, device


def _cast_grad(t):
    """A post-accumulate hook: the gradient to the leaf's ``grad_dtype``."""
    d = t.__dict__["_grad_dtype"]
    if d is not None and t.grad is not None and t.grad.dtype != d:
        t.grad = t.grad.to(d)


class Tensor(_cext.TensorBase if _cext is not None else object):
    """A multi-dimensional array with autograd, like ``torch.Tensor``.

    Build one with :func:`ember.tensor`, a creation function, or ``ember.Tensor(data)``.

    Example:
        >>> import ember
        >>> x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        >>> (x * x).sum().backward()
        >>> x.grad
        tensor([[2., 4.],
                [6., 8.]])
    """

    # The hot fields: _data, dtype, device, grad, grad_fn, _requires_grad, _storage, _base,
    # _view_fn, _output_nr, _grad_acc, _post_acc_hooks, _retains_grad, _view_version. With the
    # C extension they are TensorBase's slots (ember/_C/dispatch/tensor.h), which a new tensor gets with
    # these defaults: read and written by offset from C, and in a few instructions from Python.
    # (A class attribute of one of these names would hide the slot.) Without it, the defaults
    # live on the class so a new tensor only stores what differs.
    if _cext is None:
        device = CPU
        grad = None
        grad_fn = None
        _requires_grad = False
        _storage = None
        _base = None
        _view_fn = None
        _output_nr = 0
        _grad_acc = None
        _post_acc_hooks = None
        _retains_grad = False
    __array_priority__ = 1000          # numpy defers to our reflected operators

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """torch's default: run ``func`` with subclass dispatch off and give tensor results
        the subclass's type (see ember.overrides)."""
        from .overrides import _default_torch_function
        return _default_torch_function(cls, func, types, args, kwargs)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__torch_function__" in cls.__dict__:    # the dispatch starts asking overrides
            from .overrides import _subclass_defined
            _subclass_defined(cls)

    def __new__(cls, *args, **kwargs):
        t = object.__new__(cls)
        if cls in TF_CLASSES:       # the dispatch hook stays on while such tensors live
            _tf_track(t)
        return t

    def __init__(self, *args, device=None, dtype=None):
        from ._ops.creation import _legacy_new
        t = _legacy_new(args, device, dtype)
        self._data, self.dtype, self._storage = t._data, t.dtype, t._storage
        if t.device is not CPU:
            self.device = t.device

    @staticmethod
    def _wrap(arr, device=CPU):
        if type(arr) is not np.ndarray and isinstance(arr, np.generic):
            arr = np.asarray(arr)      # numpy returns scalars from 0-dim ufuncs and reductions
        t = object.__new__(Tensor)
        t._data = arr
        t.dtype = _BY_NP.get(arr.dtype) or _dtype.from_numpy_dtype(arr.dtype)
        if device is not CPU:
            t.device = device
        return t

    @staticmethod
    def _dtype_of(arr):
        return _BY_NP.get(arr.dtype) or _dtype.from_numpy_dtype(arr.dtype)

    # ---- storage, views, versions -------------------------------------------------------
    def _get_storage(self):
        s = self._storage
        if s is None:
            s = self._storage = UntypedStorage(self._data, self.device)
        return s

    @property
    def _version(self):
        s = self._storage
        return 0 if s is None else s._version

    def _bump_version(self):
        self._get_storage()._version += 1

    def untyped_storage(self):
        """The storage this tensor (and every view of it) reads and writes."""
        return self._get_storage()

    def data_ptr(self):
        """Address of the first element (0 on the meta device)."""
        return 0 if self.device.type == "meta" else _ptr(self._data)

    def storage_offset(self):
        """Offset of the first element into the storage, in elements."""
        if self.device.type == "meta":
            return 0
        return (self.data_ptr() - self._get_storage().data_ptr()) // self._data.itemsize

    def stride(self, dim=None):
        """Step in elements between neighbours along each dimension."""
        if self.device.type == "meta":
            st = _packed(self._data.shape, range(self._data.ndim - 1, -1, -1))
        else:
            st = tuple(s // self._data.itemsize for s in self._data.strides)
        return st if dim is None else st[dim]

    def is_contiguous(self, memory_format=None):
        if self.device.type == "meta":
            return True
        if memory_format is None:
            return bool(self._data.flags.c_contiguous)
        from ._memory_format import is_in
        return is_in(self._data, memory_format)

    def _alias(self, cls=None):
        """Same data and storage, no autograd history (what a saved output keeps); a
        ``cls`` instance when given (``as_subclass``)."""
        t = _new(cls or Tensor)     # (made field by field: every tanh/exp/sigmoid records one)
        if cls in TF_CLASSES:
            _tf_track(t)
        t._data, t.dtype, t._storage = self._data, self.dtype, self._get_storage()
        if self.device is not CPU:
            t.device = self.device
        if self._base is not None:
            t._base, t._view_fn = self._base, self._view_fn
        return t

    def _as_output_of(self, node, nr):
        t = self._alias()
        if grad_mode.state.grad_enabled:
            t.grad_fn, t._output_nr, t._requires_grad = node, nr, True
        fw = getattr(self, "_fw", None)
        if fw is not None:          # a saved dual output keeps its tangent (forward_ad.py)
            t._fw = fw
        return t

    def _alias_copy(self):
        """A copy of the data that keeps this tensor's place in the graph."""
        t = Tensor._wrap(self._data.copy(), self.device)
        t.grad_fn, t._output_nr, t._requires_grad = self.grad_fn, self._output_nr, \
            self._requires_grad
        return t

    def _assign(self, r, name="copy_"):
        """Write tensor ``r`` (same shape) into this tensor's memory; bump the version and
        take ``r``'s autograd history."""
        from ._ops.dispatch import rebase_history
        if self.device.type != "meta":
            src = r._data
            if r.device != self.device:
                src = backend(self.device).from_host(backend(r.device).to_host(src), self.device)
            if self._data.ndim == 0 and not self._data.flags.writeable:
                raise RuntimeError(f"{name}: the tensor's memory is read-only")
            try:
                self._data[...] = src
            except SparseOperand:
                if not isinstance(self._data, SparseData):
                    raise
                # a sparse tensor's parts are replaced whole (a dense result, as zero_'s,
                # is stored in sparse form)
                from ._ops.sparse import layout_of
                self._data = layout_of(r, self)._data
        self._bump_version()
        rebase_history(self, r)
        return self

    def _inplace_add(self, g):
        try:
            self._data += g._data
        except SparseOperand:
            # NOTE: as torch's AccumulateGrad: sparse + sparse concatenates the entries, and a
            # dense gradient meeting a sparse one makes the sum dense.
            if isinstance(self._data, SparseData):
                self._data = (self + g)._data
            else:
                self._data += g.to_dense()._data
        self._bump_version()

    def _has_nan(self):
        return self.dtype.category >= _dtype._FLOAT and bool(backend(self.device).xp.isnan(
            self._data).any())

    # ---- autograd state -----------------------------------------------------------------
    requires_grad = property(lambda self: self._requires_grad)

    @requires_grad.setter
    def requires_grad(self, value):
        if not value and self.grad_fn is not None:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If "
                               "you want to use a computed variable in a subgraph that doesn't "
                               "require differentiation use var_no_grad = var.detach().")
        if value and self.dtype.category < _dtype._FLOAT:
            raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                               "gradients")
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    is_leaf = property(lambda self: self.grad_fn is None)

    # NOTE: torch's Tensor.name is a read-only attribute that is always None (named tensors'
    # names are ``names``)
    name = property(lambda self: None)

    @property
    def grad_dtype(self):
        """The dtype of the gradient accumulated into this leaf (its own dtype unless set; None
        leaves it as backward computed it).

        Example:
            >>> x = ember.ones(2, requires_grad=True)
            >>> x.grad_dtype = ember.float64
            >>> (x * 2).sum().backward()
            >>> x.grad
            tensor([2., 2.], dtype=torch.float64)
        """
        if self.grad_fn is not None:
            raise RuntimeError("grad_dtype can only be accessed on leaf tensors.")
        return self.__dict__.get("_grad_dtype", self.dtype)

    @grad_dtype.setter
    def grad_dtype(self, value):
        if self.grad_fn is not None:
            raise RuntimeError("grad_dtype can only be set on leaf tensors.")
        if "_grad_dtype" not in self.__dict__:      # (cast before the user's hooks see it)
            if self._post_acc_hooks is None:
                self._post_acc_hooks = []
            self._post_acc_hooks.insert(0, _cast_grad)
        self.__dict__["_grad_dtype"] = value

    def _grad_accumulator(self):
        acc = self._grad_acc
        if acc is None:
            acc = self._grad_acc = AccumulateGrad(self)
        return acc

    def _grad_accumulator_ref(self):
        return self._grad_acc

    def detach(self):
        """A tensor sharing this one's data, cut off from the graph."""
        t = self._alias()
        t._base = t._view_fn = None
        return t

    def detach_(self):
        if self._base is not None and self._base._requires_grad:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self.grad_fn, self._requires_grad, self._output_nr = None, False, 0
        return self

    data = property(lambda self: self.detach())

    @data.setter
    def data(self, other):
        self._data, self.dtype, self._storage = other._data, other.dtype, other._get_storage()
        self.device = other.device

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Compute the gradient of this tensor w.r.t. graph leaves; see ``autograd.backward``."""
        # (the package's attribute: ``from .autograd import`` here would cost an importlib
        # call per backward)
        autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def register_hook(self, hook):
        """``hook(grad)`` runs when this tensor's gradient is computed; it may return a
        replacement."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            return self.grad_fn._register_tensor_hook(self._output_nr, hook)
        return self._grad_accumulator()._register_tensor_hook(0, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """``hook(tensor)`` runs after the gradient was accumulated into this leaf's
        ``.grad``."""
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = []
        self._post_acc_hooks.append(hook)
        from .autograd.graph import _Handle
        return _Handle(self._post_acc_hooks, hook)

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in ``.grad`` after backward."""
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is None or self._retains_grad:
            return
        ref = weakref.ref(self)

        def keep(g):
            t = ref()
            if t is not None:
                t.grad = g.detach().clone() if t.grad is None else t.grad + g.detach()
        self.grad_fn._retain_hooks()[self._output_nr] = keep
        self._retains_grad = True

    retains_grad = property(lambda self: self._retains_grad)

    # ---- metadata ---------------------------------------------------------------------
    if _cext is None:       # (else TensorBase's, in C: ``x.shape[0]`` is common in a forward)
        @property
        def shape(self):
            return Size(self._data.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self._data.shape[dim]

    def dim(self):
        return self._data.ndim

    ndimension = dim

    ndim = property(lambda self: self._data.ndim)

    def numel(self):
        return int(self._data.size)

    nelement = numel

    def element_size(self):
        return self.dtype.itemsize

    itemsize = property(lambda self: self.dtype.itemsize)

    nbytes = property(lambda self: self.numel() * self.dtype.itemsize)

    is_cuda = property(lambda self: self.device.type == "cuda")

    is_meta = property(lambda self: self.device.type == "meta")

    is_cpu = property(lambda self: self.device.type == "cpu")

    is_sparse = property(lambda self: type(self._data) is SparseCOO)

    @property
    def layout(self):
        return self._data.layout if isinstance(self._data, SparseData) else strided

    @property
    def is_sparse_csr(self):
        return self.layout is not strided and self.layout.name == "sparse_csr"

    def is_floating_point(self):
        return self.dtype.category == _dtype._FLOAT

    def is_complex(self):
        return self.dtype.category == _dtype._COMPLEX

    def get_device(self):
        return -1 if self.device.type == "cpu" else (self.device.index or 0)

    def type(self, dtype=None, non_blocking=False, **kwargs):
        """Without an argument, the legacy type name (``torch.FloatTensor``); else a cast to a
        dtype, a legacy type (``ember.DoubleTensor``) or its name (``'torch.cuda.IntTensor'``
        moves to cuda too)."""
        if dtype is None:
            n = _dtype._SCALAR_NAMES[self.dtype.name]
            return (f"torch.{'cuda.' if self.is_cuda else ''}"
                    f"{'sparse.' if self.is_sparse else ''}{n}Tensor")
        from . import _tensor_types
        return _tensor_types.convert(self, dtype, non_blocking)

    # ---- conversion -------------------------------------------------------------------
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule over this tensor's memory, for another library's ``from_dlpack``."""
        from ._dlpack import export
        return export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        """``(DLDeviceType, index)`` of the tensor's device."""
        from ._dlpack import device_of
        return device_of(self)

    def numpy(self, *, force=False):
        """The data as a NumPy array sharing memory: cpu tensors only, and one that requires
        grad only while grad mode is off, as torch.

        >>> p = ember.ones(2, requires_grad=True)
        >>> with ember.no_grad():
        ...     p.numpy()
        array([1., 1.], dtype=float32)
        """
        if self._requires_grad and not force and grad_mode.state.grad_enabled:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        if self.device.type != "cpu":
            if not force:
                raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use "
                                f"Tensor.cpu() to copy the tensor to host memory first.")
            return backend(self.device).to_host(self._data)
        return self._data

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()      # refuses tensors that require grad or live off the cpu, as torch
        return a if dtype is None else a.astype(dtype, copy=False)

    def tolist(self):
        """The data as (nested) Python lists of numbers."""
        return self._host_list(backend(self.device).to_host(self._data))

    def _host_list(self, a):
        if self.dtype in _NO_PY_SCALARS:
            a = a.astype(np.float32)
        return a.tolist()

    def item(self):
        """The value of a one-element tensor as a Python number."""
        a = self._data
        if a.size != 1:
            raise RuntimeError(f"a Tensor with {a.size} elements cannot be converted to Scalar")
        if self.device is CPU and type(a) is np.ndarray:    # no op call: rand(1).item() in a loop
            v = a.item()
            return v if type(v) in _PY_SCALARS else float(v)     # (bfloat16, float8: a float)
        if self.device.type == "meta":
            raise RuntimeError("Tensor.item() cannot be called on meta tensors")
        return self.reshape(()).tolist()

    def __bool__(self):
        if self._data.size != 1:
            raise RuntimeError(f"Boolean value of Tensor with "
                               f"{'no values' if self._data.size == 0 else 'more than one value'}"
                               f" is ambiguous")
        return bool(self.item())

    def _scalar(self, kind):
        if self._data.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        v = self.item()
        if type(v) is complex and kind is not complex:
            raise RuntimeError(f"value cannot be converted to type "
                               f"{'double' if kind is float else 'int64_t'} without overflow")
        return kind(v)

    def __float__(self):
        return self._scalar(float)

    def __int__(self):
        return self._scalar(int)

    def __complex__(self):
        return self._scalar(complex)

    def __index__(self):
        if self.dtype.category > _dtype._INT or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __format__(self, spec):
        if self._data.ndim == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    __hash__ = object.__hash__

    def __repr__(self):
        from ._tensor_str import tensor_repr
        return tensor_repr(self)

    def __reduce_ex__(self, protocol):
        from ._ops.creation import _reduce
        return _reduce(self)

    def __deepcopy__(self, memo):
        if self.grad_fn is not None:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol at the moment.")
        if id(self) not in memo:
            from ._ops.creation import _deepcopy
            memo[id(self)] = _deepcopy(self, memo)
        return memo[id(self)]

    # ---- device and dtype moves ----------------------------------------------------------
    def to(self, *args, dtype=None, device=None, non_blocking=False, copy=False,
           memory_format=None):
        """Return this tensor on another device and/or dtype (itself when nothing changes).

        Accepts ``to(dtype)``, ``to(device)``, ``to(device, dtype)`` and ``to(other)``.
        """
        if len(args) == 1 and dtype is None and device is None and not copy and \
                memory_format is None:
            # the common calls without the parsing below: a batch's x.to(device) each step
            # (cpu to cpu: itself), x.to(ember.float64)
            a = args[0]
            if a is self.dtype or a is self.device or (type(a) is str and a == "cpu" and
                                                       self.device is CPU):
                return self
            if type(a) is _dtype.dtype:
                return _cast(self, a)
        dtype, device = parse_to_args(args, dtype, device)
        dt = _dtype.to_dtype(dtype) if dtype is not None else self.dtype
        dev = to_device(device) if device is not None else self.device
        if memory_format is not None and memory_format.name != "preserve_format":
            t = self.to(dtype=dt, device=dev, copy=copy)
            return t.contiguous(memory_format) if t is self else \
                t.clone(memory_format=memory_format)
        if dt is self.dtype and dev == self.device and not copy:
            return self
        t = self if dt is self.dtype else _cast(self, dt)
        if dev != self.device:
            t = t._move(dev, non_blocking)
        elif copy and t is self:
            t = self.clone()
        return t

    def _move(self, dev, non_blocking=False):
        from ._ops import dispatch, pointwise
        if isinstance(self._data, SparseData):
            from ._ops.sparse_rules import _move
            return _move(self, dev)
        if self.device.type == "meta" and dev.type != "meta":
            raise NotImplementedError("Cannot copy out of meta tensor; no data! Please use "
                                      "torch.nn.Module.to_empty() instead of torch.nn.Module.to()"
                                      " when moving module from meta to a different device.")
        arr = backend(dev).from_host(backend(self.device).to_host(self._data), dev, non_blocking)
        out = Tensor._wrap(arr, dev)
        if self._requires_grad and grad_mode.state.grad_enabled:
            dispatch._record(pointwise._to_device, (self, str(self.device)), {}, [self], [out])
        return out

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None, non_blocking=False):
        return self.to(device if device is not None else "cuda", non_blocking=non_blocking)

    def _as(self, dt):
        # (itself when the dtype is already dt, without to()'s argument parsing)
        return self if self.dtype is dt else _cast(self, dt)

    def float(self):
        return self._as(_dtype.float32)

    def double(self):
        return self._as(_dtype.float64)

    def half(self):
        return self._as(_dtype.float16)

    def bfloat16(self):
        return self._as(_dtype.bfloat16)

    def long(self):
        return self._as(_dtype.int64)

    def int(self):
        return self._as(_dtype.int32)

    def short(self):
        return self._as(_dtype.int16)

    def char(self):
        return self._as(_dtype.int8)

    def byte(self):
        return self._as(_dtype.uint8)

    def bool(self):
        return self._as(_dtype.bool_)

    def cfloat(self):
        return self._as(_dtype.complex64)

    def cdouble(self):
        return self._as(_dtype.complex128)

    def type_as(self, other):
        return self._as(other.dtype)

