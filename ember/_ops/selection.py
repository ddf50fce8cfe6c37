"""Reads and writes picked by a mask or by flat indices: masked_select/scatter, take/put,
take_along_dim, nonzero/argwhere.

Checks raise torch's exception types and texts before anything is computed.
"""
import numpy as np

import ember

from .._C import kernels as _C
from .._backends import add_at
from .errors import _broadcast_error
from .indexing import bounds, gather, take_rows
from .meta import empty, same_meta
from .pointwise import PAR_MIN, par_copy, type_name
from .tangents import LINEAR
from .registry import op
from .samples import ErrorSample, Sample, const, make
from .scatter import _LONG


def _values_dependent(name):
    def meta(*args, **kwargs):
        raise NotImplementedError(f"{name}: the output shape depends on the values of the input, "
                                  "which the meta device does not have")
    return meta


# ---- masked_select, masked_scatter ----------------------------------------------------------

def _broadcast_shape(name, *arrays):
    if all(a.shape == arrays[0].shape for a in arrays):     # (broadcast_shapes costs ~3 us)
        return arrays[0].shape
    try:
        return np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        raise RuntimeError(f"{name}: {_broadcast_error('', arrays)}") from None


def _broadcast(xp, a, shape):
    """``a`` broadcast to ``shape``; itself where it has it (broadcast_to costs ~5 us)."""
    return a if a.shape == shape else xp.broadcast_to(a, shape)


def _check_mask(name, mask, message):
    if mask.dtype != np.bool_:
        raise RuntimeError(message.format(name=name, dtype=type_name(mask.dtype)))


@op("masked_select")
def masked_select(xp, input, mask):
    """The elements of ``input`` where the bool ``mask`` (broadcast with it) is True, in a 1-D
    tensor.

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).masked_select(ember.tensor([True, False]))
        tensor([1, 3])
    """
    _check_mask("masked_select", mask, "{name}: expected BoolTensor for mask")
    shape = _broadcast_shape("masked_select", input, mask)
    if xp is np and input.shape == mask.shape:
        out = _C.mask_select(input, mask)
        if out is not None:
            return out
    return _broadcast(xp, input, shape)[_broadcast(xp, mask, shape)]


@masked_select.vjp(save=("mask",))
def _(g, input, mask):
    shape = tuple(np.broadcast_shapes(tuple(input.shape), tuple(mask.shape)))
    return ember.zeros(shape, dtype=g.dtype, device=g.device).masked_scatter(mask, g), None


masked_select.meta = _values_dependent("masked_select")
masked_select.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((3, 4), ember.bool, seed=1)),
    Sample(make((3, 4), dt), make((4,), ember.bool, seed=2)),
    Sample(make((4,), dt), make((3, 1), ember.bool, seed=3))]
masked_select.errors = [
    ErrorSample(Sample(const(3, 4), const(4, dtype=np.int64)), RuntimeError,
                "masked_select: expected BoolTensor for mask"),
    ErrorSample(Sample(const(3, 4), const(5, dtype=bool)), RuntimeError,
                r"The size of tensor a \(4\) must match the size of tensor b \(5\)")]


@op("masked_scatter", inplace=True)
def masked_scatter(xp, input, mask, source):
    """A copy of ``input`` with the first elements of ``source`` (in order) written where the
    bool ``mask`` is True."""
    _check_mask("masked_scatter_", mask, "{name} only supports boolean masks, but got mask with "
                "dtype {dtype}")
    if source.dtype != input.dtype:
        # NOTE: torch's message runs "got" into the dtype, and so does ours
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but "
                           f"got{type_name(input.dtype)} and {type_name(source.dtype)}")
    shape = input.shape if input.shape == mask.shape else _broadcast_shape(
        "masked_scatter", input, mask)
    # (the size test first: below it the kernel declines, after a contiguous copy of the mask)
    if xp is np and input.shape == shape and input.size >= _C._MIN_SELECT and (
            out := _C.mask_scatter(input, np.ascontiguousarray(_broadcast(xp, mask, shape)),
                                   source.reshape(-1))) is not None:
        return out
    out, m = _broadcast(xp, input, shape).copy(), _broadcast(xp, mask, shape)
    # (a source as large as the mask needs no count)
    if source.size < m.size and int(xp.count_nonzero(m)) > source.size:
        raise RuntimeError("Number of elements of source < number of ones in mask")
    if xp is np:    # (place takes source's first elements, in order: one call, no slicing)
        np.place(out, m, source)
    else:
        out[m] = source.reshape(-1)[:int(xp.count_nonzero(m))]
    return out


@masked_scatter.vjp(save=("mask",))
def _(g, input, mask, source):
    picked = g.masked_select(mask)
    rest = ember.zeros(source.numel() - picked.numel(), dtype=g.dtype, device=g.device)
    return g.masked_fill(mask, 0), None, ember.cat([picked, rest]).reshape(source.shape)


masked_scatter.meta = lambda input, mask, source: empty(
    np.broadcast_shapes(input.shape, mask.shape), input.dtype)
masked_scatter.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((3, 4), ember.bool, seed=1), make((12,), dt, seed=2)),
    Sample(make((3, 4), dt), make((4,), ember.bool, seed=2), make((4, 4), dt, seed=3))]
masked_scatter.errors = [
    ErrorSample(Sample(const(3, 4), const(4), const(12)), RuntimeError,
                "masked_scatter_ only supports boolean masks, but got mask with dtype Float"),
    ErrorSample(Sample(const(3, 4), np.ones(4, bool), const(5)), RuntimeError,
                "Number of elements of source < number of ones in mask"),
    ErrorSample(Sample(const(3, 4), np.ones(4, bool), const(12, dtype=np.float64)),
                RuntimeError, "expected self and source to have same dtypes but gotFloat and "
                "Double")]


# ---- take, put, take_along_dim --------------------------------------------------------------

def _check_flat_index(name, input, index):
    """torch's errors for a flat ``index`` into ``input``; whether it has negative entries."""
    if index.dtype != _LONG:
        raise RuntimeError(f"{name}(): Expected a long tensor for index, but got "
                           f"{type_name(index.dtype)}")
    n = input.size
    lo, hi = bounds(index)
    if index.size and (lo < -n or hi >= n):
        bad = index[(index >= n) | (index < -n)]
        raise IndexError(f"out of range: tried to access index {int(bad.ravel()[0])} on a "
                         f"tensor of {n} elements.")
    return lo < 0


@op("take")
def take(xp, input, index):
    """The elements of ``input`` read as 1-D at ``index`` (negative counts from the end), in
    ``index``'s shape.

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).take(ember.tensor([[0, -1]]))
        tensor([[1, 4]])
    """
    if index.dtype == _LONG and index.size < 16384:    # (NumPy's take wins until threads do)
        try:
            return input.take(index)
        except IndexError:      # (torch's error below)
            pass
    elif (out := take_rows(input.reshape(-1), index, wrap=True)) is not None:
        return out
    _check_flat_index("take", input, index)
    return input.reshape(-1)[index]


@take.vjp(save=("index",))
def _(g, input, index):
    z = ember.zeros(input.shape, dtype=g.dtype, device=g.device)
    return z.put(index, g, accumulate=True), None


take.meta = lambda input, index: empty(index.shape, input.dtype)
take.samples = lambda dev, dt: [Sample(make((3, 4), dt), np.array([[0, 11], [-1, 5]])),
                                Sample(make((5,), dt), np.array([1, 1, 4])),
                                Sample(make((), dt), np.array(0))]
take.errors = [
    ErrorSample(Sample(const(3, 4), np.array([0, 12])), IndexError,
                "out of range: tried to access index 12 on a tensor of 12 elements"),
    ErrorSample(Sample(const(3, 4), np.array([0.0])), RuntimeError,
                r"take\(\): Expected a long tensor for index, but got Double")]


@op("put", inplace=True)
def put(xp, input, index, source, accumulate=False):
    """A copy of ``input`` with ``source`` written at the flat positions ``index`` (added,
    repeats included, with ``accumulate=True``)."""
    negative = _check_flat_index("put_", input, index)
    if source.dtype != input.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got "
                           f"self.dtype = {type_name(input.dtype)} and source.dtype = "
                           f"{type_name(source.dtype)}")
    if source.size != index.size:
        raise IndexError(f"put_(): Expected source and index to have the same number of "
                         f"elements, but got source.numel() = {source.size}, index.numel() = "
                         f"{index.size}")
    out = par_copy(np.empty(input.shape, input.dtype), input) if type(input) is np.ndarray \
        and input.size >= PAR_MIN else input.copy()     # (C order; over threads when large)
    flat, idx, src = out.reshape(-1), index.reshape(-1), source.reshape(-1)
    if accumulate:          # (negatives counted from the end for the C scatter's add)
        add_at(xp, flat, idx + input.size * (idx < 0) if negative else idx, src)
    else:
        flat[idx] = src
    return out


@put.vjp(save=("index",))
def _(g, input, index, source, accumulate=False):
    gi = g if accumulate else g.put(index, ember.zeros(index.shape, dtype=g.dtype,
                                                       device=g.device))
    return gi, None, g.take(index).reshape(source.shape)


put.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), np.array([[0, 11], [-2, 5]]), make((4,), dt, seed=1)),
    Sample(make((3, 4), dt), np.array([1, 1, 4]), make((3,), dt, seed=2), True)]
put.errors = [
    ErrorSample(Sample(const(3, 4), np.array([0, 1]), const(1)), IndexError,
                r"put_\(\): Expected source and index to have the same number of elements"),
    ErrorSample(Sample(const(3, 4), np.array([12]), const(1)), IndexError,
                "out of range: tried to access index 12 on a tensor of 12 elements"),
    ErrorSample(Sample(const(3, 4), np.array([0]), const(1, dtype=np.float64)), RuntimeError,
                "self and source expected to have the same dtype")]


def _along_dim(input, indices, dim):
    """``input`` and ``indices`` broadcast against each other except along ``dim``."""
    if indices.dtype != _LONG:
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got "
                           f"{type_name(indices.dtype)}")
    if dim is None:
        return input.reshape(-1), indices.reshape(-1), 0
    return _along_shapes(tuple(input.shape), tuple(indices.shape), dim)


def _along_shapes(input, indices, dim):
    """The shapes ``input`` and ``indices`` (shapes) broadcast to except along ``dim``."""
    if len(input) != len(indices):
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {len(input)} dimensions for input, "
                           f"and {len(indices)} dimensions for indices")
    d = dim % max(len(input), 1)
    a, b = list(input), list(indices)
    a[d] = b[d] = 1
    try:
        shape = a if a == b else list(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:      # (torch's message, from arrays of those shapes)
        _broadcast_shape("take_along_dim", empty(a, np.bool_), empty(b, np.bool_))
    return (tuple(shape[:d] + [input[d]] + shape[d + 1:]),
            tuple(shape[:d] + [indices[d]] + shape[d + 1:]), d)


@op("take_along_dim")
def take_along_dim(xp, input, indices, dim=None):
    """``input``'s values at ``indices`` along ``dim`` (gather, with broadcasting; the
    flattened input when ``dim`` is None)."""
    a, b, d = _along_dim(input, indices, dim)
    if dim is not None:         # (broadcast_to costs more than the gather at small sizes)
        a, b = _broadcast(xp, input, a), _broadcast(xp, indices, b)
    return gather.fwd(xp, a, d, b)     # (its C kernel; its errors are take_along_dim's)


@take_along_dim.vjp(save=("indices",))
def _(g, input, indices, dim=None):
    if dim is None:
        z = ember.zeros(input.numel(), dtype=g.dtype, device=g.device)
        return z.scatter_add(0, indices.reshape(-1), g).reshape(input.shape), None
    a, b, d = _along_shapes(tuple(input.shape), tuple(indices.shape), dim)
    z = ember.zeros(a, dtype=g.dtype, device=g.device)
    return z.scatter_add(d, indices.expand(b), g), None      # summed back to input's shape


take_along_dim.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), np.array([[0, 3], [1, 1], [2, 0]]), 1),
    Sample(make((3, 4), dt), np.array([[0], [2]]).reshape(2, 1), 0),
    Sample(make((3, 1), dt), np.array([[0, 2, 1, 0]]), 0),
    Sample(make((3, 4), dt), np.array([5, 0, 11]))]
take_along_dim.errors = [
    ErrorSample(Sample(const(3, 4), np.array([0]), 1), RuntimeError,
                "input and indices should have the same number of dimensions, but got 2 "
                "dimensions for input, and 1 dimensions for indices"),
    ErrorSample(Sample(const(3, 4), np.array([[0.0]]), 1), RuntimeError,
                "dtype of indices should be Long but got Double")]
take_along_dim.grad_name = "GatherBackward0"
# NOTE: torch 2.x reads out of bounds silently here on the cpu; ember raises gather's error.


# ---- nonzero, argwhere ----------------------------------------------------------------------

@op("nonzero", differentiable=False)
def nonzero(xp, input, *, as_tuple=False):
    """The indices of the nonzero elements: an ``(n, input.dim())`` tensor, or with
    ``as_tuple=True`` one 1-D tensor per dimension (a 0-dim input counts as 1-D).

    Example:
        >>> ember.tensor([[0, 1], [2, 0]]).nonzero()
        tensor([[0, 1],
                [1, 0]])
    """
    if as_tuple:
        return tuple(i.astype(_LONG) for i in xp.nonzero(input.reshape(-1) if input.ndim == 0
                                                          else input))
    if input.ndim == 0:
        return xp.argwhere(input.reshape(1))[:, :0].astype(_LONG)
    if xp is not np:
        return xp.argwhere(input).astype(_LONG, copy=False)
    out = _C.nonzero(input)
    # (np.argwhere's result, the transposed stack of the indices, without its Python wrapper)
    return np.array(input.nonzero()).T if out is None else out


nonzero.meta = _values_dependent("nonzero")
nonzero.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((5,), dt)),
                                   Sample(make((), dt)), Sample(make((2, 3), dt), as_tuple=True),
                                   Sample(make((), dt), as_tuple=True)]


@op("argwhere", differentiable=False)
def argwhere(xp, input):
    """The indices of the nonzero elements, as ``input.nonzero()``."""
    return nonzero.fwd(xp, input)


argwhere.meta = _values_dependent("argwhere")
argwhere.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((), dt))]


put.meta = same_meta     # (the forward copies its input: see scatter.py)

for _d in (masked_scatter, masked_select, put, take, take_along_dim):   # (forward mode)
    _d.jvp = LINEAR
