"""Public functions and Tensor methods with no OpDef of their own: compositions of ops (so
autograd flows through the ops they call) and Python-level plumbing. ``FUNCTIONS`` become
``ember.<name>``, ``METHODS`` become ``Tensor.<name>``, when first reached (a lazy family: see
_ops/lazy.py).
"""
import numpy as np

from . import _dtype
from ._ops import joining
from ._tensor import Tensor

# ---- predicates and small queries -------------------------------------------------------------


def is_signed(input):
    """True for dtypes with negative values (not bool or uint8)."""
    return input.dtype.is_signed


def is_inference(input):
    """ember tensors made under ``inference_mode`` are ordinary tensors: always False."""
    return False


def is_distributed(input):
    return False


def get_device(input):
    """The CUDA device index of ``input``, -1 on the CPU."""
    return input.get_device()


def detach(input):
    """A tensor sharing ``input``'s data with no autograd history."""
    return input.detach()


def ravel(input):
    """The elements as a 1-D tensor (a view where the strides allow).

    Example:
        >>> ember.ravel(ember.tensor([[1, 2], [3, 4]]))
        tensor([1, 2, 3, 4])
    """
    return input.reshape(-1)


def split_with_sizes(input, split_sizes, dim=0):
    """Split into pieces of the given sizes along ``dim`` (as ``split`` with a list)."""
    return joining.split(input, list(split_sizes), dim)


def unravel_index(indices, shape):
    """The coordinates in ``shape`` of flat ``indices``, one tensor per dimension.

    Example:
        >>> ember.unravel_index(ember.tensor([5, 7]), (2, 4))
        (tensor([1, 1]), tensor([1, 3]))
    """
    if indices.dtype.category != 1:
        raise TypeError(f"expected 'indices' to be integer dtype, but got {indices.dtype}")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(s < 0 for s in shape):
        raise ValueError("'shape' cannot have negative values, but got " + str(shape))
    n = int(np.prod(shape))
    if indices.numel() and (int(indices.min()) < -n or int(indices.max()) >= n):
        raise ValueError(f"'indices' must be in range [-{n}, {n - 1}] for shape {shape}")
    idx, out = indices % max(n, 1), []
    for s in reversed(shape):
        out.append(idx % s)
        idx = idx.div(s, rounding_mode="floor")
    return tuple(reversed(out))


def nonzero_static(input, *, size, fill_value=-1):
    """``nonzero()`` padded with ``fill_value`` (or cut) to exactly ``size`` rows.

    Example:
        >>> ember.nonzero_static(ember.tensor([0, 3, 0, 4]), size=3)
        tensor([[ 1],
                [ 3],
                [-1]])
    """
    nz = input.nonzero()
    if nz.shape[0] >= size:
        return nz[:size]
    pad = nz.new_full((size - nz.shape[0], nz.shape[1]), fill_value)
    return pad if nz.shape[0] == 0 else nz.new_tensor(np.concatenate([nz.numpy(), pad.numpy()]))


# ---- views returned as copies, and views written into copies ---------------------------------


def _slice(input, dim=0, start=None, end=None, step=1):
    return input[(slice(None),) * (dim % max(input.dim(), 1)) + (slice(start, end, step),)]


_VIEWS = {"alias": lambda x: x.view_as(x), "as_strided": Tensor.as_strided, "detach": Tensor.detach,
          "diagonal": Tensor.diagonal, "expand": Tensor.expand, "permute": Tensor.permute,
          "select": Tensor.select, "slice": _slice, "split": Tensor.split,
          "split_with_sizes": split_with_sizes, "squeeze": Tensor.squeeze, "t": Tensor.t,
          "transpose": Tensor.transpose, "unbind": Tensor.unbind, "unfold": Tensor.unfold,
          "unsqueeze": Tensor.unsqueeze, "view": Tensor.view, "indices": lambda x: x.indices(),
          "values": lambda x: x.values(), "view_as_real": lambda x: _ember().view_as_real(x),
          "view_as_complex": lambda x: _ember().view_as_complex(x)}


def _ember():
    import ember                # (the functions of lazy families: ember is imported by now)
    return ember


def _copy_of(name, view):
    def f(input, *args, out=None, **kwargs):
        r = view(input, *args, **kwargs)
        r = tuple(t.clone() for t in r) if isinstance(r, (tuple, list)) else r.clone()
        if out is None:
            return r
        if isinstance(r, tuple):
            return tuple(o.copy_(t) for o, t in zip(out, r))
        return out.resize_(r.shape).copy_(r)
    f.__name__ = f.__qualname__ = name + "_copy"
    f.__doc__ = f"``{name}`` returning a new tensor instead of a view."
    return f


def _scatter_into(name, view):
    def f(input, src, *args, **kwargs):
        if name == "slice" and args[0:1] and not isinstance(args[0], int):
            raise TypeError("slice_scatter(): argument 'dim' must be int")
        out = input.clone()
        target = view(out, *args, **kwargs)
        if tuple(target.shape) != tuple(src.shape):
            raise RuntimeError(f"{name}_scatter: expected src to have a size equal to the "
                               f"{name} of self. src size = {list(src.shape)}, {name} size = "
                               f"{list(target.shape)}")
        target.copy_(src)
        return out
    f.__name__ = f.__qualname__ = name + "_scatter"
    f.__doc__ = (f"A copy of ``input`` with ``src`` written into its ``{name}(...)`` view "
                 f"(differentiable in both).")
    return f


# ---- Tensor plumbing ----------------------------------------------------------------------------


def where(self, condition, other):
    """``self`` where ``condition`` holds, else ``other`` (``ember.where(condition, self,
    other)``: the tensor is the value, not the condition)."""
    from ._ops.pointwise_logic import where as _where
    return _where(condition, self, other)



def new(self, *args, **kwargs):
    """The legacy constructor ``x.new(...)``: as ``Tensor(...)`` with ``x``'s dtype and device."""
    kwargs.setdefault("dtype", self.dtype)
    kwargs.setdefault("device", self.device)
    if len(args) == 1 and isinstance(args[0], Tensor):
        return args[0].to(kwargs["dtype"])
    return Tensor(*args, **kwargs)


def new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False):
    return self.new_empty(tuple(size), dtype=dtype, device=device,
                          requires_grad=requires_grad).as_strided(tuple(size), tuple(stride)) \
        if not any(s == 0 for s in size) else self.new_empty(tuple(size), dtype=dtype,
                                                             device=device)


def dim_order(self, *, ambiguity_check=False):
    """The dimensions from outermost to innermost in memory (by decreasing stride).

    Example:
        >>> ember.zeros(2, 3, 4).permute(2, 0, 1).dim_order()
        (1, 2, 0)
    """
    st = self.stride()
    return tuple(sorted(range(self.dim()), key=lambda d: -st[d]))


def storage_type(self):
    """The legacy typed storage class name (``torch.FloatStorage`` ...)."""
    from ._ops.pointwise import type_name
    return f"torch.{type_name(self.dtype.name)}Storage"


def fill(input, value):
    """A copy of ``input`` filled with ``value`` (a number or a 0-dim tensor).

    Example:
        >>> ember.fill(ember.ones(2, dtype=ember.int32), 3.7)
        tensor([3, 3], dtype=torch.int32)
    """
    return input.clone().fill_(value)


def _typed_storage(self):
    """The (deprecated) ``TypedStorage`` of ``self``'s dtype over its storage."""
    from ._storage import TypedStorage, _warn_typed_storage_removal
    _warn_typed_storage_removal()
    return TypedStorage(wrap_storage=self.untyped_storage(), dtype=self.dtype, _internal=True)


def _pinning():
    """The cuda backend, which pins host memory, or None without a GPU."""
    from . import cuda
    from ._backends import backend
    from ._device import device
    return backend(device("cuda", 0)) if cuda.is_available() else None


def pin_memory(self, device=None):
    """A copy of this cpu tensor in page-locked memory (itself if it is pinned), from which
    ``to("cuda", non_blocking=True)`` copies asynchronously. Without a GPU there is no pinned
    memory: RuntimeError, as torch.

    Example:
        >>> ember.cuda.is_available() or ember.ones(2).is_pinned()
        False
    """
    if self.device.type != "cpu" or self.is_sparse:
        raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
    pins = _pinning()
    if pins is None:
        raise RuntimeError("Cannot access accelerator device when none is available.")
    if pins.is_pinned(self._data):
        return self
    return Tensor._wrap(pins.pin(self._data)).requires_grad_(self.requires_grad)


def _record_stream(self, stream):
    from .cuda.streams import record_stream
    return record_stream(self, stream)


def pinned_new(t, pin_memory):
    """A factory's result ``t`` with its ``pin_memory`` argument applied."""
    if not pin_memory:
        return t
    if _pinning() is None:
        raise RuntimeError("pin_memory=True requires a CUDA or other accelerator backend; no "
                           "pinned memory allocator is available on this system.")
    return t.pin_memory()


def is_pinned(self, device=None):
    """Whether this tensor lives in page-locked host memory (``pin_memory``'s).

    Example:
        >>> ember.ones(2).is_pinned()
        False
    """
    pins = self.device.type == "cpu" and not self.is_sparse and _pinning()
    return bool(pins) and pins.is_pinned(self._data)


def apply_(self, callable):
    """Apply a Python function to each element, in place (slow: CPU only, as torch)."""
    if self.device.type != "cpu":
        raise TypeError("apply_ is only implemented on CPU tensors")
    vals = np.vectorize(callable, otypes=[self.dtype.np])(self.numpy())
    return self.copy_(Tensor._wrap(np.asarray(vals, self.dtype.np)))


def map_(self, tensor, callable):
    """``self[i] = callable(self[i], tensor[i])`` for each element (``tensor`` broadcast)."""
    other = np.broadcast_to(tensor.numpy(), tuple(self.shape))
    vals = np.vectorize(callable, otypes=[self.dtype.np])(self.numpy(), other)
    return self.copy_(Tensor._wrap(np.asarray(vals, self.dtype.np)))


def map2_(self, x, y, callable):
    sh = tuple(self.shape)
    vals = np.vectorize(callable, otypes=[self.dtype.np])(
        self.numpy(), np.broadcast_to(x.numpy(), sh), np.broadcast_to(y.numpy(), sh))
    return self.copy_(Tensor._wrap(np.asarray(vals, self.dtype.np)))


def as_subclass(self, cls):
    """This tensor's data (no copy) as an instance of the Tensor subclass ``cls``, attached to
    the autograd graph as torch's."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError(f"Creating a Tensor subclass from a class that does not inherit from "
                        f"Tensor is not possible. Make sure your class inherits from Tensor.")
    if not self._requires_grad:
        return self._alias(cls)
    from .autograd.graph import rename_node
    src = self.view_as(self)        # stays in the graph, as torch's (an AliasBackward0 node)
    rename_node(src.grad_fn, "AliasBackward0")
    t = src._alias(cls)
    t.grad_fn, t._output_nr, t._requires_grad = src.grad_fn, src._output_nr, True
    return t


def module_load(self, other, assign=False):
    """What ``load_state_dict`` does with ``other`` when loading it into ``self``: ``other``
    itself (``assign=True``) or ``other`` detached."""
    if type(other) is not Tensor and not isinstance(other, Tensor):
        raise RuntimeError(f"module_load expects a Tensor, got {type(other).__name__}")
    return other if assign else other.detach()


def sum_to_size(self, *size):
    """Sum ``self`` down to ``size``, which it must expand to (autograd's reduce of a
    broadcast).

    Example:
        >>> ember.ones(2, 3).sum_to_size(1, 3)
        tensor([[2., 2., 2.]])
    """
    size = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else size
    try:
        np.broadcast_shapes(size, tuple(self.shape))
        ok = len(size) <= self.dim() and np.broadcast_shapes(size, tuple(self.shape)) == \
            tuple(self.shape)
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(f"size {{{', '.join(map(str, size))}}} is not expandable to size "
                           f"{{{', '.join(map(str, self.shape))}}}.")
    lead = self.dim() - len(size)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size)
                                      if s == 1 and self.shape[lead + i] != 1)
    return self.sum(dims, keepdim=True).reshape(size) if dims else self


def resize(self, *sizes):
    """Deprecated out-of-place ``resize``: a resized copy."""
    return self.clone().resize_(*sizes)


def resize_as_(self, tensor, memory_format=None):
    return self.resize_(tuple(tensor.shape))


def resize_as(self, tensor):
    return self.clone().resize_(tuple(tensor.shape))


def fill_diagonal_(self, fill_value, wrap=False):
    """Fill the main diagonal (all indices equal) in place; for tall matrices ``wrap`` starts
    again every ``cols + 1`` rows, as NumPy's ``fill_diagonal``.

    Example:
        >>> ember.zeros(2, 3).fill_diagonal_(5.)
        tensor([[5., 0., 0.],
                [0., 5., 0.]])
    """
    if self.dim() < 2:
        raise RuntimeError("dimensions must larger than 1")
    if self.dim() > 2 and len(set(self.shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    n = min(self.shape)
    if self.dim() == 2 and wrap and self.shape[0] > self.shape[1] + 1:
        rows = [r for r in range(self.shape[0]) if r % (self.shape[1] + 1) < self.shape[1]]
        idx = (Tensor._wrap(np.array(rows)),
               Tensor._wrap(np.array([r % (self.shape[1] + 1) for r in rows])))
    else:
        idx = (Tensor._wrap(np.arange(n)),) * self.dim()
    self[idx] = fill_value
    return self


def powers(x, n):
    """x ** 0, x ** 1, ..., x ** (n - 1) along a new last dim, in ``x``'s dtype (a running
    product, as torch's: integers stay exact; differentiable)."""
    from ._ops.creation import ones
    first = ones(tuple(x.shape) + (min(n, 1),), dtype=x.dtype, device=x.device)
    if n <= 1:
        return first
    return joining.cat([first, x.unsqueeze(-1).expand(*x.shape, n - 1).cumprod(-1)], -1)


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-D ``x``: column j is ``x ** (N - 1 - j)`` (``x ** j``
    when ``increasing``); N defaults to ``len(x)``.

    Example:
        >>> ember.vander(ember.tensor([1, 2, 3]))
        tensor([[1, 1, 1],
                [4, 2, 1],
                [9, 3, 1]])
    """
    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = len(x) if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    # NOTE: integer (and bool) inputs give int64, as in torch
    v = powers(x if x.is_floating_point() or x.is_complex() else x.to(_dtype.int64), n)
    return v if increasing else v.flip(-1)


# ---- the tables ---------------------------------------------------------------------------------

FUNCTIONS = {f.__name__: f for f in (
    is_signed, is_inference, is_distributed, get_device, detach, ravel, split_with_sizes,
    unravel_index, nonzero_static, vander, fill)}
FUNCTIONS.update(unsafe_chunk=Tensor.chunk, unsafe_split=Tensor.split,
                 unsafe_split_with_sizes=split_with_sizes)
FUNCTIONS.update({f"{n}_copy": _copy_of(n, v) for n, v in _VIEWS.items()})
FUNCTIONS.update({f"{n}_scatter": _scatter_into(n, v) for n, v in {
    "diagonal": Tensor.diagonal, "select": Tensor.select, "slice": _slice}.items()})


def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """A copy of ``input`` with ``src`` written where ``input.as_strided(size, stride,
    storage_offset)`` would look (``input`` taken as contiguous).

    Example:
        >>> ember.as_strided_scatter(ember.zeros(4), ember.ones(2), (2,), (2,))
        tensor([1., 0., 1., 0.])
    """
    from ._ops.creation import arange
    # a scatter at the flat positions the strided view covers: differentiable in both
    pos = arange(input.numel(), device=input.device).as_strided(size, stride, storage_offset)
    if tuple(pos.shape) != tuple(src.shape):
        raise RuntimeError(f"as_strided_scatter: expected src to have a size equal to the slice of "
                           f"self. src size = {list(src.shape)}, slice size = {list(pos.shape)}")
    return input.reshape(-1).scatter(0, pos.reshape(-1), src.reshape(-1)).view(input.shape)


FUNCTIONS["as_strided_scatter"] = as_strided_scatter



# ---- torch's in-place function forms ------------------------------------------------------------
# torch.<name>_(input, ...) is input.<name>_(...) for these: torch's list, which
# tests/test_torch_namespace.py checks against torch's namespace; the nn ones (celu_,
# dropout_...) are in _aten_nn.
_INPLACE = """abs_ acos_ acosh_ addmv_ arccos_ arccosh_ arcsin_ arcsinh_ arctan_ arctanh_
    as_strided_ asin_ asinh_ atan_ atanh_ ceil_ clamp_ clamp_max_ clamp_min_ clip_ conj_physical_
    cos_ cosh_ deg2rad_ detach_ erf_ erfc_ exp2_ exp_ expm1_ fill_ fix_ floor_ frac_ gcd_ i0_
    index_put_ lcm_ ldexp_ log10_ log1p_ log2_ log_ logit_ nan_to_num_ neg_ negative_ rad2deg_
    reciprocal_ relu_ resize_as_ round_ rsqrt_ sigmoid_ sin_ sinc_ sinh_ sqrt_ square_ tan_ tanh_
    trunc_ xlogy_ zero_""".split()


def _inplace_function(name):
    def f(input, *args, **kwargs):
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                            f"{type(input).__name__}")
        return getattr(input, name)(*args, **kwargs)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``torch.{name}(input, ...)``: :meth:`Tensor.{name}`, in place, returning input."
    return f


FUNCTIONS.update({n: _inplace_function(n) for n in _INPLACE})
METHODS = {n: FUNCTIONS[n] for n in (
    "is_signed", "is_inference", "is_distributed", "ravel", "split_with_sizes", "nonzero_static",
    "unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes", "as_strided_scatter",
    "diagonal_scatter", "select_scatter", "slice_scatter")}
METHODS.update({f.__name__: f for f in (
    where, new, new_empty_strided, dim_order, storage_type, apply_, map_, map2_, as_subclass,
    module_load, sum_to_size, resize, resize_as, resize_as_, fill_diagonal_)})
def _shared(name):
    def method(self):
        from .multiprocessing import reductions      # loads the shared-memory support on use
        return getattr(reductions, name)(self)
    method.__name__ = name
    return method


METHODS.update(is_pinned=is_pinned, is_shared=_shared("is_shared"), pin_memory=pin_memory,
               share_memory_=_shared("share_memory_"), record_stream=_record_stream,
               const_data_ptr=lambda self: self.data_ptr(), storage=_typed_storage)
