"""Joining and splitting: cat/stack, split/chunk/unbind, hstack/vstack/dstack/column_stack,
tensor_split and hsplit/vsplit/dsplit, block_diag, cartesian_prod, combinations; the diagonal
ops diag/diag_embed/diagflat/trace; and the plain functions that only reshape and expand
(broadcast_tensors, atleast_*d, meshgrid) or build index tensors (tril/triu_indices).
"""
import itertools
import math
import operator
import warnings

import numpy as np

import ember

from .._C import kernels as _C
from .._storage import _root
from .._tensor import Tensor
from .creation import _computed
from .errors import _broadcast_error
from .meta import empty, wrap_dim
from .pointwise import PAR_MIN, par_copy, type_name
from .tangents import LINEAR
from .registry import op
from .samples import ErrorSample, Sample, const, dtype_error, make
from .shape import _diag_embed_like, _index_embed


# ---- split, unbind, chunk, cat, stack -------------------------------------------------------


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
    # (basic slices, not numpy.split's Python loop; a list, which builds quicker than a generator)
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


split.samples = lambda dev, dt: [Sample(make((5, 4), dt), 2), Sample(make((5, 4), dt), [1, 3], 1)]
split.grad_name_of = lambda input, split_size_or_sections, dim=0: \
    "SplitBackward0" if isinstance(split_size_or_sections, int) else "SplitWithSizesBackward0"


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
# (torch splits an empty dim by sizes)
chunk.grad_name_of = lambda input, chunks, dim=0: \
    "SplitWithSizesBackward0" if input.shape[dim] == 0 else "SplitBackward0"


def _cat_meta(tensors, dim=0):
    shapes = [t.shape for t in tensors if t.shape != (0,)]
    d = dim % len(shapes[0])
    shape = list(shapes[0])
    shape[d] = builtin_sum(s[d] for s in shapes)
    return empty(tuple(shape), np.result_type(*tensors))


builtin_sum, _SIZE = sum, operator.attrgetter("size")


def _par_cat(arrays, dim):
    """``numpy.concatenate(arrays, dim)`` of large arrays of one dtype, each copied into its
    part over threads (pointwise.par_copy); None where that does not apply."""
    a0 = arrays[0] if len(arrays) else None
    if type(a0) is not np.ndarray or _C.num_threads() < 2:
        return None
    try:        # (the size first, by a C-level map: a small cat's checks cost more than it)
        if builtin_sum(map(_SIZE, arrays)) < PAR_MIN:
            return None
    except AttributeError:      # (not arrays: NumPy's concatenate answers)
        return None
    if not 0 < a0.ndim > dim >= -a0.ndim or not all(
            type(a) is np.ndarray and a.dtype == a0.dtype and a.ndim == a0.ndim for a in arrays):
        return None
    d = dim % a0.ndim
    if any(a.shape[:d] != a0.shape[:d] or a.shape[d + 1:] != a0.shape[d + 1:] for a in arrays):
        return None
    at = list(itertools.accumulate((a.shape[d] for a in arrays), initial=0))
    out = np.empty(a0.shape[:d] + (at[-1],) + a0.shape[d + 1:], a0.dtype)
    for a, s, e in zip(arrays, at, at[1:]):
        par_copy(out[(slice(None),) * d + (slice(s, e),)], a, 4096)
    return out


@op("cat", tags=("autocast_promote",), promote="common", aliases=("concat", "concatenate"),
    method=False)
def cat(xp, tensors, dim=0):
    """Join tensors along an existing dimension ``dim``."""
    try:        # the common call in one step: torch's checks below run where NumPy refuses
        r = _par_cat(tensors, dim) if xp is np else None
        return xp.concatenate(tensors, axis=dim) if r is None else r
    except (ValueError, TypeError):
        pass
    # NOTE: like torch, 1-D empty tensors are skipped whatever their dimension count.
    for i, a in enumerate(tensors):
        if a.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
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
    new = shape[:d] + (1,) + shape[d:]
    if xp is np and len(tensors) * math.prod(shape) >= PAR_MIN and \
            (r := _par_cat([a.reshape(new) for a in tensors], d)) is not None:
        return r        # (over threads)
    if d == 0 and xp is np:
        out = np.array(tensors)       # (NumPy's quickest stack along a new first dim)
        if out.dtype == tensors[0].dtype:
            return out
    # (numpy.stack's own way, without its Python: a size-1 dim in each, then one concatenate)
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


_ANY = tuple(range(64))     # promote_args for ops taking any number of tensors (*tensors)


def _atleast_shape(shape, n):
    """``shape`` as torch.atleast_{n}d makes it: (k,) -> (1, k) for 2-D, (1, k, 1) for 3-D."""
    shape = tuple(shape)
    if len(shape) >= n:
        return shape
    if n == 3 and len(shape) == 2:
        return shape + (1,)
    return ((1,) + shape + (1,))[:n] if shape else (1,) * n


def _column_shape(shape):
    return tuple(shape) if len(shape) > 1 else (math.prod(shape), 1)


# ---- hstack, vstack, dstack, column_stack ---------------------------------------------------

def _stack_op(name, shape_of, axis, keep, aliases=()):
    """An op that reshapes each tensor by ``shape_of`` and joins them along ``axis(ndim)``
    (tensors of ``keep`` dims or more as they are)."""
    @op(name, promote="common", method=False, aliases=aliases)
    def f(xp, tensors):
        if not tensors:
            raise RuntimeError(f"{name} expects a non-empty TensorList")
        arrays = [a if a.ndim >= keep else a.reshape(shape_of(a.shape)) for a in tensors]
        d = axis(arrays[0].ndim)
        if builtin_sum([a.size for a in arrays]) < PAR_MIN:
            try:        # (a small join: NumPy's, without cat's thread split tests)
                return xp.concatenate(arrays, d)
            except (ValueError, TypeError):
                pass    # (cat's checks word torch's error)
        return cat.fwd(xp, arrays, d)

    @f.vjp()
    def _(g, tensors):
        shapes = [shape_of(t.shape) for t in tensors]
        d = axis(len(shapes[0]))
        sizes = [s[d] if s != (0,) else 0 for s in shapes]
        return ([p.reshape(t.shape) for p, t in zip(g.split(sizes, d), tensors)],)

    f.samples = lambda dev, dt: [
        Sample([make((3,), dt), make((3,), dt, seed=1)]),
        Sample([make((2, 3), dt), make((2, 3), dt, seed=1), make((2, 3), dt, seed=2)]),
        Sample([make((), dt), make((), dt, seed=1)]),
        Sample([make((2, 3, 2), dt), make((2, 3, 2), dt, seed=1)])]
    return f


hstack = _stack_op("hstack", lambda s: _atleast_shape(s, 1), lambda nd: 0 if nd == 1 else 1, 1)
vstack = _stack_op("vstack", lambda s: _atleast_shape(s, 2), lambda nd: 0, 2,
                   aliases=("row_stack",))
dstack = _stack_op("dstack", lambda s: _atleast_shape(s, 3), lambda nd: 2, 3)
column_stack = _stack_op("column_stack", _column_shape, lambda nd: 1, 2)
hstack.fwd.__doc__ = hstack.__doc__ = """Join tensors column-wise: along dim 1, or dim 0 for 1-D.

    Example:
        >>> ember.hstack([ember.tensor([1, 2]), ember.tensor([3])])
        tensor([1, 2, 3])
    """
hstack.grad_name = "CatBackward0"
vstack.fwd.__doc__ = vstack.__doc__ = "Join tensors row-wise (dim 0), 1-D ones as rows."
vstack.grad_name = "CatBackward0"
dstack.fwd.__doc__ = dstack.__doc__ = "Join tensors depth-wise (dim 2) after atleast_3d."
dstack.grad_name = "CatBackward0"
column_stack.fwd.__doc__ = column_stack.__doc__ = "Join tensors as columns: 1-D ones as (n, 1)."
column_stack.samples = lambda dev, dt: [Sample([make((3,), dt), make((3, 2), dt, seed=1)]),
                                        Sample([make((), dt), make((1,), dt, seed=1)])]
column_stack.grad_name = "CatBackward0"


# ---- tensor_split, hsplit, vsplit, dsplit ---------------------------------------------------

def _split_bounds(input, sections, dim):
    """The start of every piece after the first, for ``tensor_split``."""
    if input.ndim == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a "
                           "tensor with 0 dims")
    if hasattr(sections, "dtype"):
        if sections.dtype != np.int64:
            raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to have dtype "
                               f"of long, but got {type_name(sections.dtype)}")
        sections = int(sections) if sections.ndim == 0 else [int(i) for i in sections]
    n = input.shape[dim]
    if isinstance(sections, int):
        if sections <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
        q, r = divmod(n, sections)
        return [i * q + min(i, r) for i in range(1, sections)]
    return [min(max(i + n if i < 0 else i, 0), n) for i in sections]


@op("tensor_split", view=True)
def tensor_split(xp, input, indices_or_sections, dim=0):
    """Views of ``input`` split along ``dim`` into ``n`` near-equal pieces (the first ``size %
    n`` one longer), or at the given indices.

    Example:
        >>> [t.tolist() for t in ember.arange(5).tensor_split(2)]
        [[0, 1, 2], [3, 4]]
    """
    d = wrap_dim(dim, input.ndim)
    bounds = _split_bounds(input, indices_or_sections, d)
    starts, stops = [0] + bounds, bounds + [input.shape[d]]
    return tuple(input[(slice(None),) * d + (slice(a, max(a, b)),)] for a, b in zip(starts, stops))


def _split_meta(input, indices_or_sections, dim=0):
    if hasattr(indices_or_sections, "dtype"):
        raise NotImplementedError("tensor_split: the output depends on the values of the "
                                  "indices tensor, which the meta device does not have")
    return tensor_split.fwd(np, input, indices_or_sections, dim)


@tensor_split.vjp(save=("indices_or_sections",))
def _(g, input, indices_or_sections, dim=0):
    # NOTE: pieces may overlap (indices need not increase), so their gradients add up
    d = dim % len(input.shape)
    if isinstance(indices_or_sections, ember.Tensor):
        indices_or_sections = indices_or_sections.tolist()
    bounds = _split_bounds(empty(input.shape, np.bool_), indices_or_sections, d)
    if all(x is not None for x in g) and bounds == sorted(bounds):
        return _joined(g, d)        # (the pieces tile the input: one copy, not a sum per piece)
    total = None
    for x, a, b in zip(g, [0] + bounds, bounds + [input.shape[d]]):
        if x is not None:
            x = _index_embed(x, tuple(input.shape), (slice(None),) * d + (slice(a, max(a, b)),))
            total = x if total is None else total + x
    return total


tensor_split.meta = _split_meta
tensor_split.samples = lambda dev, dt: [
    Sample(make((7, 2), dt), 3), Sample(make((2, 7), dt), [1, 4], 1),
    Sample(make((5,), dt), [3, 1, 9]), Sample(make((4, 3), dt), np.array(2), -1),
    Sample(make((6,), dt), np.array([-2, 2]))]
tensor_split.errors = [
    ErrorSample(Sample(const(3, 4), 0), RuntimeError,
                "number of sections must be larger than 0, got 0"),
    ErrorSample(Sample(const(), 1), RuntimeError, "tensor_split expected at least a "
                "1-dimensional tensor, but got a tensor with 0 dims"),
    ErrorSample(Sample(const(3, 4), np.array([1.5])), RuntimeError,
                "tensor_split expected tensor_indices_or_sections to have dtype of long")]
tensor_split.grad_name = "SliceBackward0"


def _split_op(name, least, dim_of):
    @op(name, view=True)
    def f(xp, input, indices_or_sections):
        if input.ndim < least:
            raise RuntimeError(f"torch.{name} requires a tensor with at least {least} dimension, "
                               f"but got a tensor with {input.ndim} dimensions!")
        d = dim_of(input.ndim)
        if isinstance(indices_or_sections, int) and (
                indices_or_sections == 0 or input.shape[d] % indices_or_sections):
            raise RuntimeError(f"torch.{name} attempted to split along dimension {d}, but the "
                               f"size of the dimension {input.shape[d]} is not divisible by the "
                               f"split_size {indices_or_sections}!")
        n = input.shape[d]
        if type(indices_or_sections) is int and indices_or_sections > 0 and n:   # (equal parts)
            q, pre = n // indices_or_sections, (slice(None),) * d
            return tuple(input[pre + (slice(i, i + q),)] for i in range(0, n, q))
        return tensor_split.fwd(xp, input, indices_or_sections, d)
    f.fwd.__doc__ = f.__doc__ = (f"Split along dimension {dim_of(3)} (``tensor_split``), into "
                                 "equal pieces or at the given indices.")
    f.vjp()(lambda g, input, ios: tensor_split.vjp_fn(g, input, ios, dim_of(len(input.shape))))
    f.samples = lambda dev, dt: [Sample(make((4, 6, 2), dt), 2), Sample(make((4, 6, 2), dt),
                                                                       [1, 3])]
    f.errors = [ErrorSample(Sample(const(*(3,) * (least - 1)), 1), RuntimeError,
                            f"torch.{name} requires a tensor with at least {least} dimension")
                if least > 1 else ErrorSample(Sample(const(4, 6), 5), RuntimeError,
                                              "is not divisible by the split_size 5")]
    return f


hsplit = _split_op("hsplit", 1, lambda nd: 1 if nd > 1 else 0)
hsplit.grad_name = "SliceBackward0"
vsplit = _split_op("vsplit", 2, lambda nd: 0)
vsplit.grad_name = "SliceBackward0"
dsplit = _split_op("dsplit", 3, lambda nd: 2)
dsplit.grad_name = "SliceBackward0"


# ---- block_diag, cartesian_prod, combinations -----------------------------------------------

def _block_shape(shape):
    return (1,) * (2 - len(shape)) + tuple(shape)


@op("block_diag", promote="common", promote_args=_ANY, method=False)
def block_diag(xp, *tensors):
    """A block-diagonal matrix of the given tensors (0-D and 1-D ones as one-row blocks).

    Example:
        >>> ember.block_diag(ember.tensor([[1, 2]]), ember.tensor(3))
        tensor([[1, 2, 0],
                [0, 0, 3]])
    """
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {i} has {t.ndim} dimensions")
    mats = [t.reshape(_block_shape(t.shape)) for t in tensors]
    out = xp.zeros((sum(m.shape[0] for m in mats), sum(m.shape[1] for m in mats)),
                   dtype=mats[0].dtype)
    r = c = 0
    for m in mats:
        out[r:r + m.shape[0], c:c + m.shape[1]] = m
        r, c = r + m.shape[0], c + m.shape[1]
    return out


@block_diag.vjp()
def _(g, *tensors):
    out, r, c = [], 0, 0
    for t in tensors:
        h, w = _block_shape(t.shape)
        out.append(g[r:r + h, c:c + w].reshape(t.shape))
        r, c = r + h, c + w
    return tuple(out)


block_diag.samples = lambda dev, dt: [
    Sample(make((2, 2), dt), make((1, 3), dt, seed=1)),
    Sample(make((2,), dt), make((), dt, seed=1), make((3, 1), dt, seed=2))]
block_diag.errors = [ErrorSample(Sample(const(2, 2, 2)), RuntimeError,
                                 "Input tensors must have 2 or fewer dimensions. Input 0 has 3")]


def _check_vectors(tensors):
    for t in tensors:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")


@op("cartesian_prod", method=False, view="maybe")
def cartesian_prod(xp, *tensors):
    """Every tuple of one element from each 1-D tensor, as the rows of a matrix (one tensor:
    itself).

    Example:
        >>> ember.cartesian_prod(ember.tensor([1, 2]), ember.tensor([3, 4]))
        tensor([[1, 3],
                [1, 4],
                [2, 3],
                [2, 4]])
    """
    _check_vectors(tensors)
    if len({t.dtype for t in tensors}) > 1:
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    if len(tensors) == 1:       # (torch returns the tensor itself: here a view of it)
        return tensors[0].view()
    # (each column written once from its broadcast vector: meshgrid's grids are copied twice)
    k = len(tensors)
    out = xp.empty(tuple(t.shape[0] for t in tensors) + (k,), tensors[0].dtype)
    for i, t in enumerate(tensors):
        out[..., i] = t.reshape((1,) * i + (-1,) + (1,) * (k - 1 - i))
    return out.reshape(-1, k)


@cartesian_prod.vjp()
def _(g, *tensors):
    if len(tensors) == 1:
        return (g,)
    n = len(tensors)
    gg = g.reshape([t.shape[0] for t in tensors] + [n])
    return tuple(gg[..., i].sum(tuple(j for j in range(n) if j != i)) for i in range(n))


cartesian_prod.samples = lambda dev, dt: [
    Sample(make((2,), dt), make((3,), dt, seed=1)),
    Sample(make((2,), dt), make((1,), dt, seed=1), make((3,), dt, seed=2)),
    Sample(make((4,), dt))]
cartesian_prod.errors = [
    ErrorSample(Sample(const(2, 2), const(3)), RuntimeError,
                r"Expect a 1D vector, but got shape \[2, 2\]"),
    ErrorSample(Sample(const(2), const(3, dtype=np.int64)), RuntimeError,
                "meshgrid expects all tensors to have the same dtype")]
cartesian_prod.grad_name = "StackBackward0"


def _combination_index(n, r, with_replacement):
    """Rows of ``r`` indices into ``range(n)`` in ``itertools.combinations`` order, built a
    column at a time: each row is repeated once per value its next column can take (pairs:
    NumPy's triu_indices, in that order, in a tenth of the time)."""
    if r == 2:
        return np.stack(np.triu_indices(n, 0 if with_replacement else 1), 1)
    rows, last = np.zeros((1, 0), np.int64), np.array([0 if with_replacement else -1])
    for _ in range(r):
        start = last if with_replacement else last + 1
        counts = np.maximum(n - start, 0)
        offsets = np.repeat(np.cumsum(counts) - counts, counts)
        last = np.arange(offsets.size, dtype=np.int64) - offsets + np.repeat(start, counts)
        rows = np.concatenate([np.repeat(rows, counts, axis=0), last[:, None]], axis=1)
    return rows


def _combinations_meta(input, r=2, with_replacement=False):
    _check_vectors((input,))
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    n = input.shape[0]
    rows = math.comb(n + r - 1, r) if with_replacement else math.comb(n, r)
    return empty((rows, r) if r > 0 else (0,), input.dtype)


@op("combinations", method=False)
def combinations(xp, input, r=2, with_replacement=False):
    """The length-``r`` combinations of a 1-D tensor's elements, as rows (Python's
    ``itertools.combinations`` order).

    Example:
        >>> ember.combinations(ember.tensor([1, 2, 3]))
        tensor([[1, 2],
                [1, 3],
                [2, 3]])
    """
    _check_vectors((input,))
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return xp.empty((0,), input.dtype)
    return input[xp.asarray(_combination_index(input.shape[0], r, with_replacement))]


@combinations.vjp()
def _(g, input, r=2, with_replacement=False):
    if r == 0:
        return None
    idx = ember.as_tensor(_combination_index(input.shape[0], r, with_replacement),
                          device=g.device)
    z = ember.zeros(input.shape, dtype=g.dtype, device=g.device)
    return z.index_add(0, idx.reshape(-1), g.reshape(-1))


combinations.meta = _combinations_meta
combinations.samples = lambda dev, dt: [
    Sample(make((4,), dt)), Sample(make((4,), dt), 3), Sample(make((3,), dt), 2, True),
    Sample(make((3,), dt), 0), Sample(make((2,), dt), 3)]
combinations.errors = [
    ErrorSample(Sample(const(3, 4)), RuntimeError, r"Expect a 1D vector, but got shape \[3, 4\]"),
    ErrorSample(Sample(const(3), -1), RuntimeError, "Expect a non-negative number, but got -1")]
combinations.grad_name = "StackBackward0"


# ---- diag, diag_embed, diagflat, trace ------------------------------------------------------

def _dim(d, nd):
    if not -nd <= d < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, "
                         f"{nd - 1}], but got {d})")
    return d % nd


@op("diag")
def diag(xp, input, diagonal=0):
    """A 1-D tensor as the ``diagonal``-th diagonal of a square matrix, or a matrix's
    ``diagonal``-th diagonal as a 1-D tensor.

    Example:
        >>> ember.diag(ember.tensor([1, 2]))
        tensor([[1, 0],
                [0, 2]])
    """
    if input.ndim == 1:
        n = input.shape[0] + abs(diagonal)
        return _diag_embed_like.fwd(xp, input, (n, n), diagonal, 0, 1)
    if input.ndim != 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
    return xp.diagonal(input, diagonal).copy()


@diag.vjp()
def _(g, input, diagonal=0):
    if len(input.shape) == 1:
        return g.diagonal(diagonal)
    return _diag_embed_like(g, tuple(input.shape), diagonal, 0, 1)


diag.samples = lambda dev, dt: [Sample(make((3,), dt)), Sample(make((3,), dt), -1),
                                Sample(make((3, 4), dt)), Sample(make((3, 4), dt), 2),
                                Sample(make((3, 4), dt), -1)]
diag.errors = [ErrorSample(Sample(const(2, 2, 2)), RuntimeError,
                           r"diag\(\): Supports 1D or 2D tensors. Got 3D")]
diag.grad_name_of = lambda input, diagonal=0: \
    "DiagEmbedBackward0" if input.dim() == 1 else "DiagonalBackward0_copy"


@op("diag_embed")
def diag_embed(xp, input, offset=0, dim1=-2, dim2=-1):
    """A tensor whose diagonals (``offset``, over ``dim1`` and ``dim2``) are the last dimension
    of ``input``; zeros elsewhere."""
    return _diag_embed_like.fwd(xp, input, *_embedded(input, offset, dim1, dim2))


def _embedded(input, offset, dim1, dim2):
    """diag_embed's result shape and its two diagonal dims."""
    nd = input.ndim + 1
    d1, d2 = _dim(dim1, nd), _dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    shape = list(input.shape[:-1])
    for d in sorted((d1, d2)):
        shape.insert(d, input.shape[-1] + abs(offset))
    return tuple(shape), offset, d1, d2


# (the meta device: the shapes alone, never the zeros a diagonal is written into)
diag.meta = lambda input, diagonal=0: diag.fwd(np, input, diagonal) if input.ndim != 1 else \
    empty((input.shape[0] + abs(diagonal),) * 2, input.dtype)
diag_embed.meta = lambda input, offset=0, dim1=-2, dim2=-1: \
    empty(_embedded(input, offset, dim1, dim2)[0], input.dtype)
diag_embed.vjp()(lambda g, input, offset=0, dim1=-2, dim2=-1: g.diagonal(offset, dim1, dim2))
diag_embed.samples = lambda dev, dt: [
    Sample(make((2, 3), dt)), Sample(make((2, 3), dt), 1), Sample(make((3,), dt), -2),
    Sample(make((2, 3), dt), 0, 0, 2), Sample(make((2, 3), dt), -1, 2, 0)]
diag_embed.errors = [
    ErrorSample(Sample(const(2, 2), 0, 0, 0), RuntimeError,
                "diagonal dimensions cannot be identical 0, 0"),
    ErrorSample(Sample(const(2, 2), 0, 0, 3), IndexError, r"expected to be in range of "
                r"\[-3, 2\], but got 3")]


@op("diagflat")
def diagflat(xp, input, offset=0):
    """The flattened ``input`` as the ``offset``-th diagonal of a square matrix."""
    return diag.fwd(xp, input.reshape(-1), offset)


diagflat.vjp()(lambda g, input, offset=0: g.diagonal(offset).reshape(input.shape))
diagflat.samples = lambda dev, dt: [Sample(make((2, 2), dt)), Sample(make((3,), dt), 1),
                                    Sample(make((), dt), -2)]
diagflat.grad_name = "DiagEmbedBackward0"


@op("trace")
def trace(xp, input):
    """The sum of a matrix's main diagonal (integers sum as int64).

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).trace()
        tensor(5)
    """
    if xp is np and input.ndim == 2 and input.dtype.kind == "f" and \
            (fn := _C.kernel("diag_sum", input.dtype)):
        # (the common call: diag_sum is add.reduce of the diagonal, bit for bit, without the
        # diagonal view, NumPy's reduce set-up or a scalar to wrap)
        (r, c), (sr, sc) = input.shape, input.strides
        if not (sr + sc) % input.itemsize:
            fn(_C.ptr(input), r if r < c else c, (sr + sc) // input.itemsize,
               _C.ptr(out := np.empty((), input.dtype)))
            return out
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    if (kind := input.dtype.kind) == "b":
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    # (np.diagonal: +0.6 us; add.reduce: sum's Python wrapper and asarray cost ~1.5 us; a
    # float sums in its own dtype with no dtype given, which NumPy resolves faster)
    return (np.add.reduce if xp is np else xp.sum)(input.diagonal(),
                                                   dtype=np.int64 if kind in "iu" else None)


@trace.vjp()
def _(g, input):
    n = min(input.shape)
    return _diag_embed_like(g.expand(n), tuple(input.shape), 0, 0, 1)


trace.samples = lambda dev, dt: [Sample(make((3, 3), dt)), Sample(make((2, 4), dt)),
                                 Sample(make((4, 2), dt))]
trace.errors = [ErrorSample(Sample(const(2, 2, 2)), RuntimeError,
                            "trace: expected a matrix, but got tensor with dim 3"),
                dtype_error("trace", (2, 2), dtype=bool, match="\"trace\" not implemented for "
                            "'Bool'")]


# ---- functions of other ops: broadcast_*, atleast_*d, meshgrid, tril/triu_indices -----------

def broadcast_shapes(*shapes):
    """The shape tensors of ``shapes`` broadcast to (ints count as 1-D shapes).

    Example:
        >>> ember.broadcast_shapes((2, 1), (3,))
        torch.Size([2, 3])
    """
    out = []
    for i, s in enumerate(shapes):
        s = (s,) if isinstance(s, int) else tuple(s)
        out = [1] * (len(s) - len(out)) + out
        for k in range(1, len(s) + 1):
            if s[-k] != out[-k] and 1 not in (s[-k], out[-k]):
                raise RuntimeError(f"Attempting to broadcast a dimension of length {s[-k]} at "
                                   f"{-k}! Mismatching argument at index {i} had {s}; but "
                                   f"expected shape should be broadcastable to {out}")
            out[-k] = out[-k] if s[-k] == 1 else s[-k]
    return ember.Size(out)


def broadcast_tensors(*tensors):
    """Views of ``tensors`` expanded to their common broadcast shape.

    Example:
        >>> [tuple(t.shape) for t in ember.broadcast_tensors(ember.ones(2, 1), ember.ones(3))]
        [(2, 3), (2, 3)]
    """
    try:
        shape = np.broadcast_shapes(*(tuple(t.shape) for t in tensors))
    except ValueError:
        raise RuntimeError(_broadcast_error("", tensors)) from None
    return tuple(t.expand(shape) for t in tensors)


def _atleast(n):
    def f(*tensors):
        one = len(tensors) == 1 and not isinstance(tensors[0], (list, tuple))
        ts = tensors if len(tensors) != 1 or one else tuple(tensors[0])
        out = tuple(t.reshape(_atleast_shape(t.shape, n)) for t in ts)
        return out[0] if one else out
    f.__name__ = f.__qualname__ = f"atleast_{n}d"
    f.__doc__ = (f"Each tensor viewed with at least {n} dimensions (a tuple for several).\n\n"
                 f"    Example:\n        >>> ember.atleast_{n}d(ember.tensor(1.)).shape\n"
                 f"        torch.Size([{', '.join(['1'] * n)}])\n")
    return f


atleast_1d, atleast_2d, atleast_3d = _atleast(1), _atleast(2), _atleast(3)


def meshgrid(*tensors, indexing=None):
    """Coordinate grids from 0-D or 1-D tensors, as expanded views: ``indexing="ij"`` (the
    default) puts tensor i on dimension i, ``"xy"`` swaps the first two.

    Example:
        >>> x, y = ember.meshgrid(ember.tensor([1, 2]), ember.tensor([3, 4, 5]), indexing="ij")
        >>> x.shape, y[0]
        (torch.Size([2, 3]), tensor([3, 4, 5]))
    """
    ts = tuple(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) \
        else tensors
    if indexing is None:
        # NOTE: torch warns that the argument will become required, and so do we
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the "
                      "indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but '
                           f"received: {indexing}")
    for t in ts:
        if t.dim() > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list "
                               f"but got: {t}")
        if t.dtype != ts[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    order = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1:
        order[0], order[1] = 1, 0
    shape = [0] * len(ts)
    for i, t in enumerate(ts):
        shape[order[i]] = t.numel()
    out = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[order[i]] = -1
        out.append(t.reshape(view).expand(shape))
    return tuple(out)


def _tril_size(row, col, offset):
    """How many elements of a ``row`` x ``col`` matrix lie on or below diagonal ``offset``:
    row i holds ``clamp(i + offset + 1, 0, col)``, summed in closed form."""
    lo, hi = max(0, -offset), min(row, col - offset - 1)      # the rows partly inside
    part = (hi - lo) * (lo + hi + 2 * offset + 1) // 2 if hi > lo else 0
    return part + max(0, row - max(0, col - offset - 1)) * col


def _tri_indices(name, np_fn):
    def f(row, col, offset=0, *, dtype=None, device=None, layout=None):
        dtype = dtype or ember.int64
        if dtype.category != 1:
            raise NotImplementedError(f'"{name}" not implemented for '
                                      f"'{ember._dtype._SCALAR_NAMES[dtype.name]}'")
        for what, n in (("row", row), ("col", col)):
            if n < 0:
                raise RuntimeError(f"{what} must be non-negative, got{n}")
        n = _tril_size(row, col, offset) if name == "tril_indices" else \
            row * col - _tril_size(row, col, offset - 1)
        return _computed((2, n), lambda: np.stack(np_fn(row, offset, col)) if row and col else
                         np.zeros((2, 0), np.int64), dtype, device)
    f.__name__ = f.__qualname__ = name
    part = "lower" if name == "tril_indices" else "upper"
    f.__doc__ = (f"The (row, column) indices of the {part} triangle of a ``row`` x ``col`` "
                 "matrix (``offset``: which diagonal bounds it), as a 2 x N tensor.\n\n"
                 f"    Example:\n        >>> ember.{name}(2, 2)\n        tensor("
                 + ("[[0, 1, 1],\n                [0, 0, 1]])\n" if part == "lower" else
                    "[[0, 0, 1],\n                [0, 1, 1]])\n"))
    return f


tril_indices = _tri_indices("tril_indices", np.tril_indices)
triu_indices = _tri_indices("triu_indices", np.triu_indices)

# ember.<name> besides the ops (ember/__init__.py installs them)
FUNCTIONS = {f.__name__: f for f in (atleast_1d, atleast_2d, atleast_3d, broadcast_shapes,
                                     broadcast_tensors, meshgrid, tril_indices, triu_indices)}


# ---- forward mode (tangents.py): joining and splitting are linear
for _d in (block_diag, cartesian_prod, cat, chunk, column_stack, combinations, diag, diag_embed,
           diagflat, dsplit, dstack, hsplit, hstack, split, stack, tensor_split, trace, unbind,
           vsplit, vstack):
    _d.jvp = LINEAR
