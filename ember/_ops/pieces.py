"""Splitting a tensor into pieces and joining pieces: split, unbind, chunk, cat, stack."""
import numpy as np

import ember

from .._storage import _root
from .._tensor import Tensor
from .meta import empty, wrap_dim
from .registry import op
from .samples import Sample, make


@op("split", view=True)
def split(xp, input, split_size_or_sections, dim=0):
    """Chunks of ``split_size`` along ``dim`` (or of the listed sizes)."""
    s = split_size_or_sections
    if input.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    if isinstance(s, int) and s < 0:        # (before dim, as torch)
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={s}")
    d = wrap_dim(dim, input.ndim)
    n = input.shape[d]
    if isinstance(split_size_or_sections, int):
        if s == 0 and n:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got "
                               f"dimension size of {n}")
        bounds = (list(range(0, n, s)) if s > 0 and n else [0]) + [n]
    else:
        if sum(split_size_or_sections) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                               f"(input tensor's size at dimension {dim}), but got split_sizes="
                               f"{list(split_size_or_sections)}")
        bounds = [0]
        for b in split_size_or_sections:
            bounds.append(bounds[-1] + int(b))
    return _slices(input, d, bounds)


def _slices(input, d, bounds):
    """The views of ``input`` between consecutive ``bounds`` along dim ``d``."""
    # (basic slices, not numpy.split's Python loop: 3x faster; a list, not a generator: ~1 us)
    lead = (slice(None),) * d
    return tuple([input[lead + (slice(a, b),)] for a, b in zip(bounds, bounds[1:])])


@split.vjp()
def _(g, input, split_size_or_sections, dim=0):
    return _joined(g, dim)


def _joined(g, dim):
    """The pieces' gradients ``g`` joined along ``dim`` (split's and chunk's backward)."""
    joined = _side_by_side(g, dim)
    return ember.cat(list(g), dim) if joined is None else joined


def _side_by_side(g, dim):
    """The gradients' concatenation along ``dim`` as a view, where they are NumPy slices lying
    side by side in one array in that order (as fused attention's dq, dk, dv of a split qkv
    come back) and nothing differentiates the result; else None. A gradient may alias: a
    leaf's accumulator copies what it does not own (``AccumulateGrad``)."""
    from .nn import kernel_grads
    arrays = kernel_grads(*g) if all(t is not None for t in g) else None
    if not arrays or arrays[0].ndim == 0:
        return None
    a0, d = arrays[0], dim % arrays[0].ndim
    root, ptr, n = _root(a0), a0.ctypes.data, 0
    for a in arrays:
        if (_root(a) is not root or a.strides != a0.strides or a.ctypes.data != ptr or
                a.shape[:d] != a0.shape[:d] or a.shape[d + 1:] != a0.shape[d + 1:]):
            return None
        ptr += a.shape[d] * a.strides[d]
        n += a.shape[d]
    shape = a0.shape[:d] + (n,) + a0.shape[d + 1:]
    try:        # (a view of the owner: as_strided's Python costs more, and checks no bounds)
        joined = np.ndarray(shape, a0.dtype, root, a0.ctypes.data - root.ctypes.data, a0.strides)
    except (TypeError, ValueError):     # an owner without a plain buffer
        joined = np.lib.stride_tricks.as_strided(a0, shape, a0.strides)
    return Tensor._wrap(joined)


split.samples = lambda dev, dt: [Sample(make((5, 4), dt), 2), Sample(make((5, 4), dt), [1, 3],
                                 1)]


@op("unbind", view=True)
def unbind(xp, input, dim=0):
    """The slices along ``dim``, without that dimension."""
    if input.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    lead = (slice(None),) * wrap_dim(dim, input.ndim)
    # (..., not a shorter index: a 0-dim piece stays a view, not a NumPy scalar)
    return tuple([input[lead + (i, Ellipsis)] for i in range(input.shape[len(lead)])])


@unbind.vjp()
def _(g, input, dim=0):
    return ember.stack(list(g), dim)


unbind.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((3, 4), dt), 1)]


@op("chunk", view=True)
def chunk(xp, input, chunks, dim=0):
    """Split into ``chunks`` pieces along ``dim`` (the last may be smaller)."""
    if input.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = wrap_dim(dim, input.ndim)
    n = input.shape[d]
    # NOTE: an empty dim gives ``chunks`` empty pieces in torch, not one
    bounds = [0] * (chunks + 1) if n == 0 else list(range(0, n, -(-n // chunks))) + [n]
    return _slices(input, d, bounds)


@chunk.vjp()
def _(g, input, chunks, dim=0):
    return _joined(g, dim)


chunk.samples = lambda dev, dt: [Sample(make((5, 4), dt), 2), Sample(make((5, 4), dt), 3, 1),
                                 Sample(make((4, 6), dt), 4, -1), Sample(make((0, 3), dt), 2)]


def _cat_meta(tensors, dim=0):
    shapes = [t.shape for t in tensors if t.shape != (0,)]
    d = dim % len(shapes[0])
    shape = list(shapes[0])
    shape[d] = builtin_sum(s[d] for s in shapes)
    return empty(tuple(shape), np.result_type(*tensors))


builtin_sum = sum


@op("cat", tags=("autocast_promote",), promote="common", aliases=("concat", "concatenate"),
    method=False)
def cat(xp, tensors, dim=0):
    """Join tensors along an existing dimension ``dim``."""
    try:        # the common call in one step: torch's checks below run where NumPy refuses
        return xp.concatenate(tensors, axis=dim)
    except (ValueError, TypeError):
        pass
    # NOTE: like torch, 1-D empty tensors are skipped whatever their dimension count.
    for i, a in enumerate(tensors):
        if a.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be "
                               f"concatenated")
    arrays = [a for a in tensors if a.shape != (0,)]
    if not arrays:          # (only 1-D empty ones, or none: torch checks no dim either)
        return xp.concatenate(list(tensors))
    if len({a.ndim for a in arrays}) > 1:
        other = next(a.ndim for a in arrays if a.ndim != arrays[0].ndim)
        raise RuntimeError(f"cat: Tensors must have same number of dimensions: got "
                           f"{arrays[0].ndim} and {other}")
    d = wrap_dim(dim, arrays[0].ndim)
    for i, a in enumerate(arrays):
        bad = [k for k in range(a.ndim) if k != d and a.shape[k] != arrays[0].shape[k]]
        if bad:
            raise RuntimeError(f"cat: Sizes of tensors must match except in dimension {d}. "
                               f"Expected size {arrays[0].shape[bad[0]]} but got size "
                               f"{a.shape[bad[0]]} for tensor number {i} in the list.")
    return xp.concatenate(arrays, axis=d)


@cat.vjp()
def _(g, tensors, dim=0):
    sizes = [t.shape[dim] if tuple(t.shape) != (0,) else 0 for t in tensors]
    d = dim % g.dim()
    parts, start = [], 0
    for t, n in zip(tensors, sizes):
        parts.append(g.narrow(d, start, n) if tuple(t.shape) != (0,) else None)
        start += n
    return (parts,)


cat.samples = lambda dev, dt: [Sample([make((2, 3), dt), make((4, 3), dt, seed=1)]),
                               Sample([make((2, 3), dt), make((2, 1), dt, seed=1)], 1),
                               Sample([make((2, 3), dt), make((2, 3), dt, seed=2)], -1)]
cat.meta = _cat_meta


def _stacked(tensors, dim):
    """(the one shape of ``tensors``, the new dim's place), with torch's error where they
    differ."""
    shape = tensors[0].shape
    for i, a in enumerate(tensors):
        if a.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(shape)} at entry 0 and {list(a.shape)} at entry {i}")
    return shape, wrap_dim(dim, len(shape) + 1)


def _stack_meta(tensors, dim=0):
    shape, d = _stacked(tensors, dim)
    return empty(shape[:d] + (len(tensors),) + shape[d:], np.result_type(*tensors))


@op("stack", tags=("autocast_promote",), promote="common", method=False)
def stack(xp, tensors, dim=0):
    """Join tensors of one shape along a new dimension ``dim``."""
    shape, d = _stacked(tensors, dim)
    if d == 0 and xp is np:
        out = np.array(tensors)       # (NumPy's quickest stack along a new first dim)
        if out.dtype == tensors[0].dtype:
            return out
    # (numpy.stack's own way, without its Python: a size-1 dim in each, then one concatenate)
    new = shape[:d] + (1,) + shape[d:]
    return xp.concatenate([a.reshape(new) for a in tensors], axis=d)


@stack.vjp()
def _(g, tensors, dim=0):
    return (list(g.unbind(dim)),)


stack.meta = _stack_meta
stack.samples = lambda dev, dt: [Sample([make((2, 3), dt), make((2, 3), dt, seed=1)]),
                                 Sample([make((2, 3), dt), make((2, 3), dt, seed=1)], -1)]


for _d in (split, unbind):
    _d.meta = None   # views run through NumPy on the meta device's stride-0 arrays for free
del _d
