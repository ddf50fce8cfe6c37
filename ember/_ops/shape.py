"""Shape and view ops. Views share their input's storage exactly where torch's do; their
forwards return NumPy/CuPy views, and backward maps the gradient back to the input's shape."""
import math

import numpy as np

import ember

from .._backends import add_at
from .._memory_format import contiguous_format, copy_in
from .._storage import _ptr, _root
from .meta import empty, moveaxis, reduce_dims, wrap_dim
from .tangents import LINEAR, decomposed
from .registry import op
from .samples import ErrorSample, Sample, const, make


def _dims(dims):
    return tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else tuple(dims)


def _infer(shape, numel, opname):
    shape = [int(s) for s in shape]
    if shape.count(-1) > 1:
        raise RuntimeError(f"{opname}: only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            if s < 0:
                raise RuntimeError(f"{opname}: invalid shape dimension {s}")
            known *= s
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"{opname}: shape '{shape}' is invalid for input of size {numel}")
        shape[shape.index(-1)] = numel // known
    elif known != numel:
        raise RuntimeError(f"{opname}: shape '{shape}' is invalid for input of size {numel}")
    return tuple(shape)


@op("view", function=False, view=True)
def view(xp, input, *shape):
    """A view with a new shape (no copy), or a reinterpretation as another dtype."""
    if len(shape) == 1 and isinstance(shape[0], ember.dtype):
        return input.view(shape[0].np)
    v = input.view()
    try:        # the common call in one step (NumPy infers a -1 as torch does)
        v.shape = _dims(shape)
        return v
    except (AttributeError, ValueError, TypeError):
        pass
    shape = _infer(_dims(shape), input.size, "view")    # (raises torch's error for a bad shape)
    try:
        v.shape = shape
    except AttributeError:
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at "
                           "least one dimension spans across two contiguous subspaces). Use "
                           ".reshape(...) instead.") from None
    return v


@view.vjp()
def _(g, input, *shape):
    return None if len(shape) == 1 and isinstance(shape[0], ember.dtype) else g.reshape(input.shape)


view.samples = lambda dev, dt: [Sample(make((3, 4), dt), 12), Sample(make((3, 4), dt), 2, -1),
                                Sample(make((2, 3, 4), dt), (4, 6))]
view.torch_method = True


@op("reshape", view="maybe")
def reshape(xp, input, *shape):
    """``input`` with a new shape: a view when the strides allow it, else a copy."""
    try:        # the common call in one step (NumPy infers a -1 as torch does)
        return input.reshape(_dims(shape))
    except (ValueError, TypeError):
        return input.reshape(_infer(_dims(shape), input.size, "reshape"))


@reshape.vjp()
def _(g, input, *shape):
    return g.reshape(input.shape)


reshape.samples = lambda dev, dt: [Sample(make((3, 4), dt), (12,)), Sample(make((3, 4), dt),
                                   (2, -1)), Sample(make((3, 4), dt, noncontig=True), (-1,))]


def reshape_node(input, *shape):
    """torch's node of reshape: a view of a contiguous input, an alias of another whose strides
    allow it, else a view of a contiguous copy."""
    if input.is_contiguous():
        return "ViewBackward0"
    try:
        view.fwd(None, input._data, *shape)
    except RuntimeError:
        return "UnsafeViewBackward0"
    return "ReshapeAliasBackward0"


reshape.grad_name_of = reshape_node


@op("transpose", view=True, aliases=("swapaxes", "swapdims"))
def transpose(xp, input, dim0, dim1):
    """Swap dimensions ``dim0`` and ``dim1``."""
    if input.ndim == 0:             # (a 0-dim tensor takes dims 0 and -1, as in torch)
        wrap_dim(dim0, 0), wrap_dim(dim1, 0)
        return input.view()
    return input.swapaxes(dim0, dim1)


@transpose.vjp()
def _(g, input, dim0, dim1):
    return g.transpose(dim0, dim1)


transpose.samples = lambda dev, dt: [Sample(make((3, 4), dt), 0, 1),
                                     Sample(make((2, 3, 4), dt), -1, 0)]


@op("permute", view=True)
def permute(xp, input, *dims):
    """Reorder the dimensions."""
    dims = _dims(dims)
    if len(dims) != input.ndim:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {input.ndim} is not equal to len(dims) = {len(dims)}")
    return input.transpose(dims)


@permute.vjp()
def _(g, input, *dims):
    return g.permute(tuple(np.argsort([d % max(g.dim(), 1) for d in _dims(dims)])))


permute.samples = lambda dev, dt: [Sample(make((2, 3, 4), dt), (2, 0, 1)),
                                   Sample(make((2, 3, 4), dt), (-1, 0, 1))]


@op("t", view=True)
def t(xp, input):
    """Transpose a tensor of at most 2 dimensions."""
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return input.T


@t.vjp()
def _(g, input):
    return g.t()


t.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((3,), dt))]


@op("expand", function=False, view=True)
def expand(xp, input, *sizes):
    """Broadcast to ``sizes`` without copying (-1 keeps a dimension)."""
    if not sizes:
        raise TypeError('expand() missing 1 required positional arguments: "size"')
    sizes = _dims(sizes)
    if input.ndim == 0 and type(input) is np.ndarray and input.flags.writeable and \
            min(sizes, default=0) >= 0:
        # a 0-dim array (each full sum's gradient) broadcasts with every stride 0
        return np.ndarray(sizes, input.dtype, input, 0, (0,) * len(sizes))
    lead = len(sizes) - input.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater "
                           f"or equal to the number of dimensions in the tensor ({input.ndim})")
    # NOTE: torch's strides, not broadcast_to's: a size-1 dimension kept at size 1 keeps its
    # stride, and a new leading one gets size * stride of the next. The view is writable, as
    # torch's is; in-place ops refuse it where elements overlap (see dispatch_inplace).
    have, steps, n = input.shape, input.strides, len(sizes)
    shape, strides = list(sizes), [0] * n
    for i in range(n - 1, -1, -1):
        s, j = shape[i], i - lead
        if j >= 0:
            d = have[j]
            if s == d or s == -1:
                shape[i], strides[i] = d, steps[j]
                continue
            if d == 1 and s >= 0:
                continue                    # (stride 0)
        elif s == 1:
            strides[i] = shape[i + 1] * strides[i + 1] if i + 1 < n else input.itemsize
            continue
        elif s >= 0:
            continue
        else:
            raise RuntimeError(f"expand: the expanded size of the tensor ({sizes[i]}) isn't "
                               f"allowed in a leading, non-existing dimension {i}")
        raise RuntimeError(f"expand: the expanded size of the tensor ({sizes[i]}) must match the "
                           f"existing size ({have[j]}) at non-singleton dimension {i}.  Target "
                           f"sizes: {list(sizes)}.  Tensor sizes: {list(have)}")
    if type(input) is np.ndarray and input.flags.c_contiguous and input.flags.writeable:
        # the same view as as_strided's, made in C, spared as_strided's Python (every full
        # sum's backward expands; buffer, offset and strides by position: keywords cost 0.4 us)
        return np.ndarray(shape, input.dtype, input, 0, strides)
    return xp.lib.stride_tricks.as_strided(input, shape, strides)


@expand.vjp()
def _(g, input, *sizes):
    return g      # the engine sums the gradient back to the input's shape


expand.samples = lambda dev, dt: [Sample(make((3, 1), dt), 3, 4), Sample(make((4,), dt),
                                  (2, 3, 4)), Sample(make((3, 1), dt), -1, 5)]


@op("broadcast_to", view=True)
def broadcast_to(xp, input, size):
    """``input`` broadcast to ``size``, as a view (like :meth:`Tensor.expand`)."""
    return expand.fwd(xp, input, tuple(size))


broadcast_to.vjp()(lambda g, input, size: g)
broadcast_to.grad_name = "ExpandBackward0"


@op("narrow", view=True)
def narrow(xp, input, dim, start, length):
    """The slice ``start:start+length`` of dimension ``dim``."""
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    start, dim = int(start), wrap_dim(dim, input.ndim)
    n = input.shape[dim]
    if not -n <= start <= n:
        raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but got "
                         f"{start})")
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    start += n if start < 0 else 0
    if start + length > n:
        raise RuntimeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size "
                           f"({n}).")
    idx = [slice(None)] * input.ndim
    idx[dim] = slice(start, start + length)
    return input[tuple(idx)]


@narrow.vjp()
def _(g, input, dim, start, length):
    return _embed(g, input, _slicer(input.ndim, dim, slice(start % input.shape[dim],
                                                             start % input.shape[dim] + length)))


narrow.samples = lambda dev, dt: [Sample(make((5, 4), dt), 0, 1, 3), Sample(make((5, 4), dt),
                                  -1, -2, 2)]
narrow.grad_name = "SliceBackward0"


def _slicer(nd, dim, s):
    idx = [slice(None)] * nd
    idx[dim] = s
    return tuple(idx)


def _embed(g, input, index):
    """Zeros of ``input``'s shape with ``g`` written at ``index`` (differentiable)."""
    return _index_embed(g, tuple(input.shape), index)


@op("_index_embed", method=False, function=False)
def _index_embed(xp, g, shape, index, accumulate=False):
    out = xp.zeros(shape, dtype=g.dtype)
    if accumulate:
        add_at(xp, out, index, g)
    else:
        out[index] = g
    return out


@_index_embed.vjp()
def _(gg, g, shape, index, accumulate=False):
    return ember._ops.indexing.getitem(gg, index)


@op("select", view=True)
def select(xp, input, dim, index):
    """Dimension ``dim`` at ``index``, removing that dimension."""
    n = input.shape[dim]
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size "
                         f"{list(input.shape)} at dimension {dim}")
    # NOTE: the trailing Ellipsis keeps a 0-dim result a view; NumPy returns a scalar copy
    # for an all-integer index, and writes to it would be lost.
    return input[_slicer(input.ndim, dim, index) + (Ellipsis,)]


@select.vjp()
def _(g, input, dim, index):
    return _embed(g, input, _slicer(len(input.shape), dim, index % input.shape[dim]))


select.samples = lambda dev, dt: [Sample(make((3, 4), dt), 0, 1), Sample(make((3, 4), dt), 1, -1)]


@op("unsqueeze", view=True)
def unsqueeze(xp, input, dim):
    """Insert a dimension of size 1 at ``dim``."""
    d = wrap_dim(dim, input.ndim + 1)
    return input.reshape(input.shape[:d] + (1,) + input.shape[d:])   # (expand_dims' own way)


@unsqueeze.vjp()
def _(g, input, dim):
    return g.reshape(input.shape)


unsqueeze.samples = lambda dev, dt: [Sample(make((3, 4), dt), 0), Sample(make((3, 4), dt), -1),
                                     Sample(make((), dt), 0)]


@op("squeeze", view=True)
def squeeze(xp, input, dim=None):
    """Remove dimensions of size 1 (all, or those in ``dim``)."""
    if dim is None:
        return xp.squeeze(input)
    # (dim=() squeezes nothing, where reduce_dims reads it as every dim)
    dims = () if dim == () or dim == [] else \
        tuple(d for d in reduce_dims(dim, input.ndim) if input.shape[d] == 1)
    return xp.squeeze(input, dims) if dims else input.view()


@squeeze.vjp()
def _(g, input, dim=None):
    return g.reshape(input.shape)


squeeze.samples = lambda dev, dt: [Sample(make((3, 1, 4, 1), dt)), Sample(make((3, 1, 4), dt),
                                   1), Sample(make((3, 1, 4), dt), 0),
                                   Sample(make((1, 3, 1), dt), (0, 2))]
squeeze.grad_name_of = lambda input, dim=None: "SqueezeBackward0" if dim is None else \
    "SqueezeBackward1" if isinstance(dim, int) else "SqueezeBackward2"


@op("flatten", view="maybe")
def flatten(xp, input, start_dim=0, end_dim=-1):
    """Merge dimensions ``start_dim..end_dim`` into one (a view when possible)."""
    if input.ndim == 0:
        return xp.reshape(input, (1,))
    s, e = start_dim % input.ndim, end_dim % input.ndim
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = input.shape[:s] + (-1 if input.size else math.prod(input.shape[s:e + 1]),) + \
        input.shape[e + 1:]
    return input.reshape(shape)


@flatten.vjp()
def _(g, input, start_dim=0, end_dim=-1):
    return g.reshape(input.shape)


flatten.samples = lambda dev, dt: [Sample(make((2, 3, 4), dt)), Sample(make((2, 3, 4), dt), 1),
                                   Sample(make((2, 3, 4), dt, noncontig=True), 0, 1),
                                   Sample(make((), dt))]


def _flatten_node(input, start_dim=0, end_dim=-1):
    if input.dim() == 0:
        return "ViewBackward0"
    s, e, shape = start_dim % input.dim(), end_dim % input.dim(), tuple(input.shape)
    return reshape_node(input, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])


flatten.grad_name_of = _flatten_node


@op("unflatten", view=True)
def unflatten(xp, input, dim, sizes):
    """Split dimension ``dim`` into ``sizes``."""
    if input.ndim == 0:
        raise RuntimeError(f"unflatten got an unexpected error:\nDimension specified as {dim} "
                           f"but tensor has no dimensions")
    dim = wrap_dim(dim, input.ndim)
    sizes = _infer(sizes, input.shape[dim], "unflatten")
    # (the method: np.reshape's Python wrapper cost as much as the view)
    return input.reshape(input.shape[:dim] + sizes + input.shape[dim + 1:])


@unflatten.vjp()
def _(g, input, dim, sizes):
    return g.reshape(input.shape)


unflatten.samples = lambda dev, dt: [Sample(make((2, 12), dt), 1, (3, 4)),
                                     Sample(make((2, 12), dt), -1, (-1, 2))]
unflatten.grad_name = "ViewBackward0"


@op("movedim", view=True, aliases=("moveaxis",))
def movedim(xp, input, source, destination):
    """Move dimension(s) ``source`` to position(s) ``destination``."""
    if input.ndim == 0:             # (dims 0 and -1 name the one place there is)
        for d in (source, destination):
            reduce_dims(d, 0)
        return input.view()
    return moveaxis(xp, input, source, destination)


@movedim.vjp()
def _(g, input, source, destination):
    return g.movedim(destination, source)


movedim.samples = lambda dev, dt: [Sample(make((2, 3, 4), dt), 0, 2),
                                   Sample(make((2, 3, 4), dt), (0, 1), (2, 0))]
movedim.grad_name = "PermuteBackward0"


@op("diagonal", view=True)
def diagonal(xp, input, offset=0, dim1=0, dim2=1):
    """The diagonal over ``dim1``, ``dim2`` as a (writable) view, moved to the last dim."""
    nd = input.ndim
    d1, d2 = wrap_dim(dim1, nd), wrap_dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    # NumPy's view has torch's shape and strides, but is read-only: torch's is writable
    d = input.diagonal(offset, d1, d2)
    if getattr(input.flags, "writeable", False):
        d.flags.writeable = True
    return d


@diagonal.vjp()
def _(g, input, offset=0, dim1=0, dim2=1):
    return _diag_embed_like(g, tuple(input.shape), offset, dim1, dim2)


@op("_diag_embed_like", method=False, function=False)
def _diag_embed_like(xp, g, shape, offset, dim1, dim2):
    out = xp.zeros(shape, dtype=g.dtype)
    if xp is np:    # (NumPy's diagonal view, made writable: a fancy-index write costs ~4x it)
        view = out.diagonal(offset, dim1, dim2)
        view.flags.writeable = True
        view[...] = g
        return out
    moved = moveaxis(xp, out, (dim1 % len(shape), dim2 % len(shape)), (-2, -1))
    i = xp.arange(g.shape[-1])
    moved[..., i + max(-offset, 0), i + max(offset, 0)] = g
    return out


@_diag_embed_like.vjp()
def _(gg, g, shape, offset, dim1, dim2):
    return gg.diagonal(offset, dim1, dim2)


diagonal.samples = lambda dev, dt: [Sample(make((4, 4), dt)), Sample(make((3, 5), dt), 1),
                                    Sample(make((2, 3, 4), dt), -1, 0, 2)]


def _offset(xp, a):
    """``a``'s storage offset in elements (0 on CuPy, whose arrays do not say)."""
    if xp is not np or a.base is None:
        return 0
    return (_ptr(a) - _ptr(_root(a))) // a.itemsize


@op("as_strided", view=True)
def as_strided(xp, input, size, stride, storage_offset=None):
    """A view of ``input``'s storage with the given size, strides (elements) and offset."""
    root = _root(input).reshape(-1)
    item = input.itemsize
    if storage_offset is None:
        storage_offset = _offset(xp, input)
    need = storage_offset + sum((s - 1) * st for s, st in zip(size, stride)) + 1
    if min(size, default=1) > 0 and need > root.size:
        raise RuntimeError(f"as_strided: setStorage: sizes {list(size)}, strides {list(stride)},"
                           f" storage offset {storage_offset} require {need * item} bytes but "
                           f"the storage has {root.size * item}")
    size, stride = tuple(size), tuple(s * item for s in stride)
    if type(root) is np.ndarray and root.flags.writeable:
        # the view as_strided makes, made in C (as_strided's Python was most of the call)
        return np.ndarray(size, root.dtype, buffer=root, offset=storage_offset * item,
                          strides=stride)
    return xp.lib.stride_tricks.as_strided(root[storage_offset:], size, stride)


@as_strided.vjp()
def _(g, input, size, stride, storage_offset=None):
    raise NotImplementedError("the derivative for 'as_strided' is not implemented.")


@op("slice_inverse", view=True)
def slice_inverse(xp, input, src, dim=0, start=None, end=None, step=1):
    """The inverse of ``src.slice(dim, start, end, step)``, for functionalization: ``input``
    (that slice) viewed with ``src``'s size, strides and offset, so it reads the base it was
    cut from.

    Example:
        >>> base = ember.arange(6.)
        >>> ember.slice_inverse(base[2:4], base, 0, 2, 4)
        tensor([0., 1., 2., 3., 4., 5.])
    """
    root = _root(input)
    if type(root) is np.ndarray and root.flags.c_contiguous and src.dtype == input.dtype:
        try:    # (the view made directly: as_strided's checks were most of the call)
            return np.ndarray(src.shape, src.dtype, root, _ptr(src) - _ptr(_root(src)),
                              src.strides)
        except TypeError:   # (beyond the storage: as_strided raises torch's error)
            pass
    return as_strided.fwd(xp, input, src.shape, [s // src.itemsize for s in src.strides],
                          _offset(xp, src))


@slice_inverse.vjp()
def _(g, input, src, dim=0, start=None, end=None, step=1):
    sl = (slice(None),) * wrap_dim(dim, g.dim()) + (slice(start, end, step),)
    # NOTE: as torch's formula, src gets the gradient outside the slice (its base's part);
    # (a clone, over threads, with the slice filled: no copy of a zeros array on one thread)
    rest = g.clone()
    rest[sl] = 0
    return g[sl], rest


# (as a function of values: src with the slice replaced by input, which it is where valid)
slice_inverse.jvp = decomposed(lambda a, t, out: ember.slice_scatter(
    t["src"], t["input"], a["dim"], a["start"], a["end"], a["step"]))
slice_inverse.meta = lambda input, src, *a, **k: empty(src.shape, input.dtype)
slice_inverse.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((3, 4), dt)), Sample(make((3, 4), dt), make((3, 4), dt), 1, 0, 4)]


@op("unfold", function=False, view=True)
def unfold(xp, input, dimension, size, step):
    """Windows of ``size`` every ``step`` along ``dimension``, as a new last dimension."""
    d = wrap_dim(dimension, input.ndim)
    if input.ndim == 0:             # (one window of the one element)
        if size > 1:
            raise RuntimeError(f"maximum size for tensor at dimension 0 is 1 but size is {size}")
        return input.reshape(size)
    have, steps = input.shape, input.strides      # (each read makes a tuple)
    if size > have[d]:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {have[d]} but "
                           f"size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    shape = have[:d] + ((have[d] - size) // step + 1,) + have[d + 1:] + (size,)
    strides = steps[:d] + (steps[d] * step,) + steps[d + 1:] + (steps[d],)
    # the view made in C: NumPy's as_strided helper (Python) was ~2/3 of the call (a
    # contiguous input is a buffer of its own: NumPy makes its owner the view's base)
    if type(input) is np.ndarray and input.flags.c_contiguous and input.size:
        return np.ndarray(shape, input.dtype, input, 0, strides)
    root = _root(input)
    if type(root) is np.ndarray and root.flags.c_contiguous and input.size:
        return np.ndarray(shape, input.dtype, root, _ptr(input) - _ptr(root), strides)
    return xp.lib.stride_tricks.as_strided(input, shape, strides)


@unfold.vjp()
def _(g, input, dimension, size, step):
    if not input.shape:
        return g.sum()
    d, n = dimension % len(input.shape), g.shape[dimension % len(input.shape)]
    out, lead = ember.zeros(input.shape, dtype=g.dtype, device=g.device), (slice(None),) * d
    # one strided add per window tap, or per window where there are fewer windows: where an
    # int64 index and index_add cost several passes (4x torch's time on 1M elements)
    if size <= n:
        for k in range(size):
            out[lead + (slice(k, k + (n - 1) * step + 1, step),)].add_(g[..., k])
    else:
        for j in range(n):
            out[lead + (slice(j * step, j * step + size),)].add_(g.select(d, j).movedim(-1, d))
    return out


unfold.samples = lambda dev, dt: [
    Sample(make((7,), dt), 0, 2, 1), Sample(make((3, 8), dt), 1, 3, 2),
    Sample(make((2, 9), dt), 1, 6, 2), Sample(make((), dt), 0, 1, 1)]
unfold.errors = [ErrorSample(Sample(const(5), 0, 2, 0), RuntimeError, "step is 0 but must be > 0")]


@op("view_as_real", view=True, method=False)
def view_as_real(xp, input):
    """A complex tensor's view as real pairs in a new last dimension."""
    if input.dtype.kind != "c":
        raise RuntimeError("view_as_real is only supported for complex tensors")
    # a strided view of the real parts, stepping into the imaginary parts along a new last
    # dim: works for any strides (and 0-dim), where ndarray.view(dtype) does not
    re = input.real
    return xp.lib.stride_tricks.as_strided(re, input.shape + (2,), re.strides + (re.itemsize,))


@view_as_real.vjp()
def _(g, input):
    return ember.view_as_complex(g.contiguous())


@op("view_as_complex", view=True, method=False)
def view_as_complex(xp, input):
    """A real tensor whose last dimension is 2 viewed as complex."""
    if input.shape[-1:] != (2,) or input.strides[-1] != input.itemsize:
        raise RuntimeError("Tensor must have a last dimension of size 2 with stride 1")
    if input.dtype not in (np.float32, np.float64):
        raise RuntimeError(f"view_as_complex is only supported for float and double tensors, "
                           f"but got a tensor of scalar type: {input.dtype}")
    return input.view(np.complex64 if input.dtype == np.float32 else np.complex128)[..., 0]


@view_as_complex.vjp()
def _(g, input):
    return ember.view_as_real(g)


view_as_complex.meta = lambda x: empty(x.shape[:-1], np.result_type(x.dtype, np.complex64))
view_as_real.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((5,), dt)),
                                        Sample(make((), dt))] if dt.category == 3 else []
view_as_complex.samples = lambda dev, dt: [Sample(make((3, 2), dt)), Sample(make((2, 4, 2), dt)),
                                           Sample(make((2,), dt))] if dt.category == 2 else []
view_as_real.errors = [ErrorSample(Sample(const(3)), RuntimeError,
                                   "only supported for complex tensors")]
view_as_complex.errors = [ErrorSample(Sample(const(3, 3)), RuntimeError,
                                      "last dimension of size 2"),
                          ErrorSample(Sample(const(3, 2, dtype=np.int64)), RuntimeError,
                                      "only supported for float and double")]


@op("contiguous", function=False)
def contiguous(xp, input, memory_format=None):
    """``input`` in C-contiguous memory (itself if it already is), or as ``memory_format``."""
    if memory_format is None or memory_format is contiguous_format:
        return xp.ascontiguousarray(input)
    return copy_in(xp, input, memory_format)


@contiguous.vjp()
def _(g, input, memory_format=None):
    return g
contiguous.grad_name = "CloneBackward0"


for _d in (view, reshape, transpose, permute, t, expand, narrow, select, unsqueeze, squeeze,
           flatten, unflatten, movedim, diagonal, unfold):
    _d.meta = None   # views run through NumPy on the meta device's stride-0 arrays for free
del _d


# ---- forward mode (tangents.py): every shape op is linear
for _d in (as_strided, broadcast_to, contiguous, diagonal, expand, flatten, movedim, narrow,
           permute, reshape, select, squeeze, t, transpose, unflatten, unfold, unsqueeze, view,
           view_as_complex, view_as_real, _index_embed, _diag_embed_like):
    _d.jvp = LINEAR
