"""Writes and reads by index beyond ``t[idx]``: index_put, scatter_reduce, index_copy/fill/reduce,
masked_select/scatter, take/put, nonzero; and the reorderings roll, fliplr/flipud, rot90, tile.

Each write has an out-of-place op and, where torch has one, the in-place ``<name>_`` method.
Checks raise torch's exception types and texts before anything is computed.
"""
import numpy as np

import ember

from .. import _dtype
from .._backends import add_at, max_at, min_at, multiply_at
from .dispatch import _broadcast_error
from .indexing import flip, index_error, put_values, repeat, scatter_positions, src_grad
from .meta import empty, same_meta
from .registry import op
from .samples import ErrorSample, Sample, const, make
from .shape import narrow

_LONG = np.int64


def _tname(a):
    """torch's C++ name of an array's dtype ("Float", "Long"), as its error messages say."""
    return _dtype._SCALAR_NAMES[_dtype.from_numpy_dtype(a.dtype).name]


def _check_bounds(index, size, dim, exc=IndexError, prefix="", negative=True):
    """torch's error for an index outside ``[-size, size)`` (``[0, size)`` for gather/scatter,
    which take no negative indices)."""
    if index.size:
        bad = index[(index >= size) | (index < (-size if negative else 0))]
        if bad.size:
            raise exc(f"{prefix}index {int(bad.ravel()[0])} is out of bounds for dimension "
                      f"{dim} with size {size}")


def _values_dependent(name):
    def meta(*args, **kwargs):
        raise NotImplementedError(f"{name}: the output shape depends on the values of the input, "
                                  "which the meta device does not have")
    return meta


# ---- index_put ------------------------------------------------------------------------------

def _index_tuple(input, indices, values):
    idx = tuple(indices)
    for i, t in enumerate(idx):
        if not hasattr(t, "dtype"):
            raise TypeError(f"index_put(): expected Tensor as element {i} in argument 1, but got "
                            f"{type(t).__name__}")
        if t.dtype.kind not in "biu":
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    used = sum(t.ndim if t.dtype == np.bool_ else 1 for t in idx)
    if used > input.ndim:
        raise IndexError(f"too many indices for tensor of dimension {input.ndim} (got {used})")
    if values.dtype != input.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{_tname(input)} for the destination and {_tname(values)} for the "
                           "source.")
    err = index_error(input.shape, idx)       # out-of-range indices, mask shapes
    if err is not None:
        raise err
    return idx


@op("index_put", inplace=True)
def index_put(xp, input, indices, values, accumulate=False):
    """A copy of ``input`` with ``values`` written at ``input[indices]`` (a tuple of index
    tensors); ``accumulate=True`` adds instead, repeated indices adding up.

    Example:
        >>> x = ember.zeros(4)
        >>> x.index_put((ember.tensor([0, 0, 2]),), ember.tensor(1.), accumulate=True)
        tensor([2., 0., 1., 0.])
    """
    idx = _index_tuple(input, indices, values)
    out = input.copy()
    if accumulate:
        add_at(xp, out, idx, values)
    else:
        put_values(out, idx, values)
    return out


@index_put.vjp(save=("indices",))
def _(g, input, indices, values, accumulate=False):
    idx = tuple(indices)
    gi = g if accumulate else g.index_put(idx, ember.zeros((), dtype=g.dtype, device=g.device))
    return gi, None, g[idx]         # the engine sums a broadcast ``values`` back to its shape


index_put.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), [np.array([0, 2])], make((2, 4), dt, seed=1)),
    Sample(make((3, 4), dt), [np.array([0, 2]), np.array([3, 1])], make((), dt, seed=1)),
    Sample(make((3, 4), dt), [make((3, 4), ember.bool, seed=5)], make((), dt, seed=2)),
    Sample(make((3, 4), dt), [np.array([1, 1, 0])], make((3, 4), dt, seed=3), True),
    Sample(make((2, 3, 4), dt), [np.array([[0], [1]]), np.array([0, 2, 1])],
           make((4,), dt, seed=4), True)]
index_put.errors = [
    ErrorSample(Sample(const(3, 4), [np.array([0, 5])], const()), IndexError,
                "index 5 is out of bounds for dimension 0 with size 3"),
    ErrorSample(Sample(const(3, 4), [np.array([0.0])], const()), IndexError,
                "tensors used as indices must be long, int, byte or bool tensors"),
    ErrorSample(Sample(const(3, 4), [np.ones(2, bool)], const()), IndexError,
                r"The shape of the mask \[2\] at index 0 does not match the shape of the indexed "
                r"tensor \[3, 4\] at index 0"),
    ErrorSample(Sample(const(3, 4), [np.array([0])] * 3, const()), IndexError,
                r"too many indices for tensor of dimension 2 \(got 3\)"),
    ErrorSample(Sample(const(3, 4), [np.array([0])], const(dtype=np.float64)), RuntimeError,
                "Index put requires the source and destination dtypes match, got Float for the "
                "destination and Double for the source"),
    ErrorSample(Sample(const(3, 4), [np.array([0])], const(2)), RuntimeError,
                r"shape mismatch: value tensor of shape \[2\] cannot be broadcast"),
    ErrorSample(Sample(const(3, 4), [None, np.array([0])], const()), TypeError,
                "expected Tensor as element 0 in argument 1, but got NoneType")]


# ---- scatter_reduce, index_reduce -----------------------------------------------------------

def _check_scatter(input, dim, index, src):
    if index.dtype not in (np.int32, _LONG):
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if hasattr(src, "dtype") and src.dtype != input.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    if index.ndim != input.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    d = dim % max(input.ndim, 1)
    _check_bounds(index, input.shape[d] if input.ndim else 1, d, RuntimeError, negative=False)


def _corner(shape):
    """The leading block of ``shape``: scatter reads only ``src[:index.shape]``."""
    return tuple(slice(0, n) for n in shape)


_AT = {"sum": add_at, "mean": add_at, "prod": multiply_at, "amax": max_at, "amin": min_at}


@op("scatter_reduce", inplace=True)
def scatter_reduce(xp, input, dim, index, src, reduce, *, include_self=True):
    """A copy of ``input`` with ``src`` reduced into it at ``index`` along ``dim`` by ``reduce``
    (``"sum"``, ``"prod"``, ``"mean"``, ``"amax"`` or ``"amin"``); ``include_self=False``
    leaves the old values out of the reduction where something is scattered.

    Example:
        >>> x = ember.tensor([1., 2., 3.])
        >>> x.scatter_reduce(0, ember.tensor([0, 0, 2]), ember.tensor([5., 7., 1.]), "amax")
        tensor([7., 2., 3.])
    """
    if reduce not in _AT:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce}")
    _check_scatter(input, dim, index, src)
    out, src = input.copy(), src[_corner(index.shape)]
    flat, src = out.reshape(-1), src.reshape(-1)    # NOTE: ufunc.at is fast on 1-D arrays only
    idx = scatter_positions(xp, out.shape, dim, index).reshape(-1)
    if not include_self:
        # max/min of (src, src...) is max/min of src, so those may start from src itself
        flat[idx] = src if reduce in ("amax", "amin") else int(reduce == "prod")
    _AT[reduce](xp, flat, idx, src)
    if reduce == "mean":
        n = xp.full(out.shape, int(include_self), dtype=out.dtype)
        add_at(xp, n.reshape(-1), idx, xp.ones(idx.shape, out.dtype))
        n = xp.maximum(n, xp.ones((), out.dtype))
        # NOTE: torch's integer mean rounds down (floor division), as // does
        out = out // n if out.dtype.kind in "iu" else (out / n).astype(out.dtype)
    return out


@scatter_reduce.vjp(save=("input", "index", "src", "result"))
def _(g, input, dim, index, src, reduce, *, include_self=True, result=None):
    s = src[_corner(index.shape)] if tuple(src.shape) != tuple(index.shape) else src
    ones = ember.ones(index.shape, dtype=g.dtype, device=g.device)
    hit = ember.zeros(input.shape, dtype=g.dtype, device=g.device).scatter_add(dim, index, ones)
    alone = hit == 0            # no src lands here: the output is the input
    if reduce in ("sum", "mean"):
        n = (hit + 1 if include_self else hit.clamp(min=1)) if reduce == "mean" else 1
        gi, gs = (g / n if include_self else g * alone), (g / n).gather(dim, index)
    elif reduce == "prod":
        # NOTE: result / x fails where x is 0; as torch does, a zero input's share is the
        # product of the others (zeros set to 1 first), and so is a zero src's where it is
        # the only zero reduced into its place (two zeros make every share 0).
        kw = {"include_self": include_self}
        ones_in = input.masked_fill(input == 0, 1)
        gi = g * ones_in.scatter_reduce(dim, index, s, "prod", **kw) / ones_in \
            if include_self else g * alone
        zero = s == 0
        zeros_at = ember.zeros(input.shape, dtype=g.dtype, device=g.device).scatter_add(
            dim, index, zero.to(g.dtype)).gather(dim, index)
        single = zero * (zeros_at == 1)
        others = input.scatter_reduce(dim, index, s.masked_fill(single, 1), "prod", **kw)
        gs = ember.where(single, (g * others).gather(dim, index),
                         (g * result).gather(dim, index) / s.masked_fill(zero, 1))
    else:
        # ties share the gradient evenly, as in torch. NOTE: torch counts an input equal to
        # the result among the ties even with include_self=False (then drops its share), so
        # the shares do not add up to g there; we match it.
        self_is = input == result
        src_is = s == result.gather(dim, index)
        n = self_is.to(g.dtype).scatter_add(dim, index, src_is.to(g.dtype))
        gi, gs = g * self_is / n, (g / n).gather(dim, index) * src_is
        gi = gi if include_self else gi * alone
    return gi, None, None, src_grad(gs, src)


def _reduce_samples(dev, dt):
    if dt.category < 1:
        return []
    x, i = make((3, 4), dt, 0.5, 2.0), np.array([[0, 1, 2, 0], [2, 0, 0, 1]])
    src = make((2, 4), dt, 0.5, 2.0, seed=1)
    out = [Sample(x, 0, i, src, r, include_self=inc) for r in _AT for inc in (True, False)
           if dt.category < 3 or r in ("sum", "mean")]
    ties = [Sample(np.array([[1, 2, 2], [3, 1, 0]], dt.np), 0, np.array([[0, 0, 0], [1, 1, 1]]),
                   np.array([[2, 2, 1], [3, 0, 0]], dt.np), r, include_self=inc).at_kink()
            for r in ("amax", "amin", "prod") for inc in (True, False)] if dt.category < 3 else []
    return out + ties + [Sample(x, 1, np.array([[3, 3], [0, 1], [2, 2]]),
                                make((3, 5), dt, 0.5, 2.0), "sum")]


scatter_reduce.samples = _reduce_samples
scatter_reduce.skips = {"grad-complex128": "torch has no gradient for complex scatter_reduce either"}
scatter_reduce.errors = [
    ErrorSample(Sample(const(3, 4), 0, np.array([[0]]), const(1, 1), "foo"), RuntimeError,
                "reduce argument must be either sum, prod, mean, amax or amin, got foo"),
    ErrorSample(Sample(const(3, 4), 0, np.array([[3]]), const(1, 1), "sum"), RuntimeError,
                "index 3 is out of bounds for dimension 0 with size 3"),
    ErrorSample(Sample(const(3, 4), 0, np.array([[0]]), const(1, 1, dtype=np.float64), "sum"),
                RuntimeError, r"scatter\(\): Expected self.dtype to be equal to src.dtype"),
    ErrorSample(Sample(const(3, 4), 0, np.array([[0.0]]), const(1, 1), "sum"), RuntimeError,
                r"scatter\(\): Expected dtype int32/int64 for index"),
    ErrorSample(Sample(const(3, 4), 0, np.array([0]), const(1), "sum"), RuntimeError,
                "Index tensor must have the same number of dimensions as self tensor")]


def _check_index(name, input, dim, index, exc=IndexError):
    if index.dtype != _LONG:
        raise exc(f"{name}(): Expected dtype int64 for index.")
    if index.ndim > 1:
        raise exc(f"{name}(): Index should have dimension 1 or 0 (got {index.ndim})")
    d = dim % max(input.ndim, 1)
    _check_bounds(index, input.shape[d] if input.ndim else 1, d, IndexError, f"{name}(): ")
    return d


def _check_source(name, input, d, index, source, exc=IndexError):
    if source.dtype != input.dtype:
        raise RuntimeError(f"{name}(): self and source expected to have the same dtype, but got "
                           f"(self) {_tname(input)} and (source) {_tname(source)}")
    n = source.shape[d] if source.ndim else 1
    if index.size != n:
        # NOTE: torch words this differently (and with another type) for index_reduce
        tail = f" ({n})" if exc is IndexError else f": ({n}), for dim: {d}"
        raise exc(f"{name}(): Number of indices ({index.size}) should be equal to "
                  f"source.size(dim){tail}")


@op("index_reduce", inplace=True)
def index_reduce(xp, input, dim, index, source, reduce, *, include_self=True):
    """Reduce the slices of ``source`` into ``input`` at ``index`` along ``dim`` by ``reduce``
    (``"prod"``, ``"mean"``, ``"amax"`` or ``"amin"``)."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or "
                           f"amin but got {reduce}.")
    d = _check_index("index_reduce_", input, dim, index)
    _check_source("index_reduce_", input, d, index, source, RuntimeError)
    idx = xp.broadcast_to(index.reshape(_spread_view(d, source.ndim)), source.shape)
    return scatter_reduce.fwd(xp, input, d, idx, source, reduce, include_self=include_self)


def _spread_view(d, nd):
    return (1,) * d + (-1,) + (1,) * (nd - d - 1)


@index_reduce.vjp(save=("input", "index", "source", "result"))
def _(g, input, dim, index, source, reduce, *, include_self=True, result=None):
    d = dim % input.dim()
    idx = index.reshape(_spread_view(d, source.dim())).expand(tuple(source.shape))
    return scatter_reduce.vjp_fn(g, input, d, idx, source, reduce, include_self=include_self,
                                 result=result)


index_reduce.samples = lambda dev, dt: [
    Sample(make((3, 4), dt, 0.5, 2.0), d, np.array([0, 2, 0]), make(s, dt, 0.5, 2.0, seed=1), r,
           include_self=inc) for r in ("prod", "mean", "amax", "amin") for inc in (True, False)
    for d, s in ((0, (3, 4)), (-1, (3, 3)))] if dt.category in (1, 2) else []
index_reduce.errors = [
    ErrorSample(Sample(const(3, 4), 0, np.array([0]), const(1, 4), "sum"), RuntimeError,
                "Expected reduce to be one of prod, mean, amax or amin but got sum"),
    ErrorSample(Sample(const(3, 4), 0, np.array([0, 1]), const(3, 4), "amax"), RuntimeError,
                r"Number of indices \(2\) should be equal to source.size\(dim\): \(3\), for "
                "dim: 0")]


# ---- index_copy, index_fill -----------------------------------------------------------------

@op("index_copy", inplace=True)
def index_copy(xp, input, dim, index, source):
    """A copy of ``input`` with the slices of ``source`` written at ``index`` along ``dim``.

    Example:
        >>> ember.zeros(3, 2).index_copy(0, ember.tensor([2, 0]), ember.ones(2, 2))
        tensor([[1., 1.],
                [0., 0.],
                [1., 1.]])
    """
    d = _check_index("index_copy_", input, dim, index)
    _check_source("index_copy_", input, d, index, source)
    out = input.copy()
    if out.ndim:
        xp.moveaxis(out, d, 0)[index] = xp.moveaxis(source, d, 0) if source.ndim else source
    elif index.size:
        out[...] = source
    return out


@index_copy.vjp(save=("index",))
def _(g, input, dim, index, source):
    index = index.reshape(-1)
    return g.index_fill(dim, index, 0), None, None, g.index_select(dim, index).reshape(
        source.shape)


index_copy.samples = lambda dev, dt: [
    Sample(make((4, 3), dt), 0, np.array([3, 0]), make((2, 3), dt, seed=1)),
    Sample(make((4, 3), dt), -1, np.array([2, 1, 0]), make((4, 3), dt, seed=2)),
    Sample(make((2, 3, 4), dt), 1, np.array(1), make((2, 1, 4), dt, seed=3))]
index_copy.errors = [
    ErrorSample(Sample(const(3, 4), 0, np.array([0, 5]), const(2, 4)), IndexError,
                r"index_copy_\(\): index 5 is out of bounds for dimension 0 with size 3"),
    ErrorSample(Sample(const(3, 4), 0, np.array([[0]]), const(1, 4)), IndexError,
                r"Index should have dimension 1 or 0 \(got 2\)"),
    ErrorSample(Sample(const(3, 4), 0, np.array([0, 1]), const(3, 4)), IndexError,
                r"Number of indices \(2\) should be equal to source.size\(dim\) \(3\)"),
    ErrorSample(Sample(const(3, 4), 0, np.array([0]), const(1, 4, dtype=np.float64)),
                RuntimeError, "self and source expected to have the same dtype")]


@op("index_fill", inplace=True)
def index_fill(xp, input, dim, index, value):
    """A copy of ``input`` with the slices at ``index`` along ``dim`` set to ``value`` (a
    number or a 0-dim tensor)."""
    if index.ndim > 1:
        raise RuntimeError("Index has to be a vector/scalar")
    d = _check_index("index_fill_", input, dim, index)
    if hasattr(value, "ndim") and value.ndim:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.ndim} dimension(s).")
    out = input.copy()
    v = value.astype(out.dtype) if hasattr(value, "astype") else value
    if out.ndim:
        xp.moveaxis(out, d, 0)[index] = v
    elif index.size:
        out[...] = v
    return out


@index_fill.vjp(save=("index",))
def _(g, input, dim, index, value):
    gv = g.index_select(dim, index.reshape(-1)).sum() if hasattr(value, "shape") else None
    return g.index_fill(dim, index, 0), None, None, gv


index_fill.samples = lambda dev, dt: [
    Sample(make((4, 3), dt), 0, np.array([3, 0]), 1),
    Sample(make((4, 3), dt), -1, np.array([2, 0]), make((), dt, seed=1)),
    Sample(make((2, 3, 4), dt), 1, np.array(1), -1)]
index_fill.errors = [
    ErrorSample(Sample(const(3, 4), 0, np.array([0, 5]), 1.0), IndexError,
                "index 5 is out of bounds for dimension 0 with size 3"),
    ErrorSample(Sample(const(3, 4), 0, np.array([[0, 1]]), 1.0), RuntimeError,
                "Index has to be a vector/scalar"),
    ErrorSample(Sample(const(3, 4), 0, np.array([0.0]), 1.0), IndexError,
                r"index_fill_\(\): Expected dtype int64 for index"),
    ErrorSample(Sample(const(3, 4), 1, np.array([0, 1]), const(2)), RuntimeError,
                "index_fill_ only supports a 0-dimensional value tensor")]


# ---- masked_select, masked_scatter ----------------------------------------------------------

def _broadcast_shape(name, *arrays):
    try:
        return np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        raise RuntimeError(f"{name}: {_broadcast_error('', arrays)}") from None


def _check_mask(name, mask, message):
    if mask.dtype != np.bool_:
        raise RuntimeError(message.format(name=name, dtype=_tname(mask)))


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
    return xp.broadcast_to(input, shape)[xp.broadcast_to(mask, shape)]


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
                           f"got{_tname(input)} and {_tname(source)}")
    shape = _broadcast_shape("masked_scatter", input, mask)
    out, m = xp.broadcast_to(input, shape).copy(), xp.broadcast_to(mask, shape)
    n = int(m.sum())
    if n > source.size:
        raise RuntimeError("Number of elements of source < number of ones in mask")
    out[m] = source.reshape(-1)[:n]
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
    if index.dtype != _LONG:
        raise RuntimeError(f"{name}(): Expected a long tensor for index, but got "
                           f"{_tname(index)}")
    n = input.size
    if index.size:
        bad = index[(index >= n) | (index < -n)]
        if bad.size:
            raise IndexError(f"out of range: tried to access index {int(bad.ravel()[0])} on a "
                             f"tensor of {n} elements.")


@op("take")
def take(xp, input, index):
    """The elements of ``input`` read as 1-D at ``index`` (negative counts from the end), in
    ``index``'s shape.

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).take(ember.tensor([[0, -1]]))
        tensor([[1, 4]])
    """
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
    _check_flat_index("put_", input, index)
    if source.dtype != input.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got "
                           f"self.dtype = {_tname(input)} and source.dtype = {_tname(source)}")
    if source.size != index.size:
        raise IndexError(f"put_(): Expected source and index to have the same number of "
                         f"elements, but got source.numel() = {source.size}, index.numel() = "
                         f"{index.size}")
    out = xp.ascontiguousarray(input).copy()
    flat, idx, src = out.reshape(-1), index.reshape(-1), source.reshape(-1)
    if accumulate:
        add_at(xp, flat, idx, src)
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
                           f"{_tname(indices)}")
    if dim is None:
        return input.reshape(-1), indices.reshape(-1), 0
    if input.ndim != indices.ndim:
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {input.ndim} dimensions for input, "
                           f"and {indices.ndim} dimensions for indices")
    d = dim % max(input.ndim, 1)
    a, b = list(input.shape), list(indices.shape)
    a[d] = b[d] = 1
    shape = list(_broadcast_shape("take_along_dim", empty(a, np.bool_), empty(b, np.bool_)))
    return (tuple(shape[:d] + [input.shape[d]] + shape[d + 1:]),
            tuple(shape[:d] + [indices.shape[d]] + shape[d + 1:]), d)


@op("take_along_dim")
def take_along_dim(xp, input, indices, dim=None):
    """``input``'s values at ``indices`` along ``dim`` (gather, with broadcasting; the
    flattened input when ``dim`` is None)."""
    a, b, d = _along_dim(input, indices, dim)
    if dim is not None:
        a, b = xp.broadcast_to(input, a), xp.broadcast_to(indices, b)
    _check_bounds(b, a.shape[d], d, RuntimeError, negative=False)
    return xp.take_along_axis(a, b, axis=d)


@take_along_dim.vjp(save=("indices",))
def _(g, input, indices, dim=None):
    if dim is None:
        z = ember.zeros(input.numel(), dtype=g.dtype, device=g.device)
        return z.scatter_add(0, indices.reshape(-1), g).reshape(input.shape), None
    a, b, d = _along_dim(empty(tuple(input.shape), np.bool_), empty(tuple(indices.shape),
                                                                    np.int64), dim)
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
    return xp.argwhere(input).astype(_LONG)


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


# ---- reorderings: roll, fliplr/flipud, rot90, tile, narrow_copy -----------------------------

def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


@op("roll")
def roll(xp, input, shifts, dims=None):
    """Rotate the elements by ``shifts`` along ``dims`` (the flattened tensor if None).

    Example:
        >>> ember.tensor([1, 2, 3, 4]).roll(1)
        tensor([4, 1, 2, 3])
    """
    if dims is not None and len(_tuple(shifts)) != len(_tuple(dims)):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(_tuple(shifts))}, "
                           f"dims:{len(_tuple(dims))}")
    if dims is None and len(_tuple(shifts)) != 1:
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(_tuple(shifts))}, "
                           "dims:0")
    nd = max(input.ndim, 1)
    for d in _tuple(dims) if dims is not None else ():
        if not -nd <= d < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, "
                             f"{nd - 1}], but got {d})")
    return xp.roll(input, shifts, axis=dims)


roll.vjp()(lambda g, input, shifts, dims=None: g.roll(tuple(-s for s in shifts) if isinstance(
    shifts, (tuple, list)) else -shifts, dims))
roll.samples = lambda dev, dt: [Sample(make((3, 4), dt), 1), Sample(make((3, 4), dt), -2, 1),
                                Sample(make((3, 4), dt), (1, 5), (0, 1)),
                                Sample(make((3, 4), dt), (2,), (-1,))]
roll.errors = [
    ErrorSample(Sample(const(3, 4), (1, 2), (0,)), RuntimeError,
                "shifts and dimensions must align. shifts: 2, dims:1"),
    ErrorSample(Sample(const(3, 4), 1, 3), IndexError, "Dimension out of range"),
    ErrorSample(Sample(const(3, 4), (1, 2)), RuntimeError,
                "shifts and dimensions must align. shifts: 2, dims:0")]


def _flip_op(name, axis, least):
    @op(name)
    def f(xp, input):
        if input.ndim < least:
            raise RuntimeError(f"Input must be >= {least}-d.")
        return flip.fwd(xp, input, (axis,))
    f.fwd.__doc__ = f"Reverse the order along dimension {axis} (a copy)."
    f.__doc__ = f.fwd.__doc__
    f.vjp()(lambda g, input: getattr(g, name)())
    f.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((2, 3, 4), dt))]
    f.errors = [ErrorSample(Sample(const(*(3,) * (least - 1))), RuntimeError,
                            f"Input must be >= {least}-d")]
    return f


fliplr = _flip_op("fliplr", 1, 2)
flipud = _flip_op("flipud", 0, 1)


@op("rot90")
def rot90(xp, input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees ``k`` times, from the first of ``dims`` towards the second.

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).rot90()
        tensor([[2, 4],
                [1, 3]])
    """
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
    for d in dims:
        if not -input.ndim <= d < input.ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-input.ndim}, {input.ndim - 1}], but got {d})")
    if dims[0] % input.ndim == dims[1] % input.ndim:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {dims[0]} "
                           f"and dim1 = {dims[1]}")
    return xp.ascontiguousarray(xp.rot90(input, k, axes=dims))


rot90.vjp()(lambda g, input, k=1, dims=(0, 1): g.rot90(-k, dims))
rot90.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((3, 4), dt), 2),
                                 Sample(make((2, 3, 4), dt), -1, (2, 0)),
                                 Sample(make((2, 3, 4), dt), 7, [1, 2])]
rot90.errors = [
    ErrorSample(Sample(const(3, 4), 1, [0]), RuntimeError,
                "expected total rotation dims == 2, but got dims = 1"),
    ErrorSample(Sample(const(3, 4), 1, [0, 0]), RuntimeError,
                "expected rotation dims to be different, but got dim0 = 0 and dim1 = 0"),
    ErrorSample(Sample(const(3), 1, [0, 1]), RuntimeError,
                "expected total dims >= 2, but got total dims = 1"),
    ErrorSample(Sample(const(3, 4), 1, [0, 2]), IndexError, r"Dimension out of range \(expected "
                r"to be in range of \[-2, 1\], but got 2\)")]


def _tile_sizes(input, dims):
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
    return (1,) * (len(input.shape) - len(dims)) + dims


@op("tile")
def tile(xp, input, *dims):
    """Repeat ``input`` ``dims[i]`` times along each dimension; missing leading ``dims`` count
    as 1 (unlike :meth:`Tensor.repeat`).

    Example:
        >>> ember.tensor([1, 2]).tile((2,))
        tensor([1, 2, 1, 2])
    """
    return repeat.fwd(xp, input, _tile_sizes(input, dims))


tile.vjp()(lambda g, input, *dims: repeat.vjp_fn(g, input, _tile_sizes(input, dims)))
tile.samples = lambda dev, dt: [Sample(make((2, 3), dt), (2,)), Sample(make((2, 3), dt), (2, 1)),
                                Sample(make((2, 3), dt), [1, 2, 2]),
                                Sample(make((3,), dt), (2, 1, 2)), Sample(make((), dt), (3,))]


@op("narrow_copy")
def narrow_copy(xp, input, dim, start, length):
    """The slice ``start:start+length`` of dimension ``dim``, as a new tensor."""
    return narrow.fwd(xp, input, dim, start, length).copy()


narrow_copy.vjp()(narrow.vjp_fn)
narrow_copy.samples = narrow.samples
narrow_copy.errors = [ErrorSample(Sample(const(3, 4), 0, 2, 3), RuntimeError,
                                  r"start \(2\) \+ length \(3\) exceeds dimension size \(3\)")]


# NOTE: these forwards copy their input, which on the meta device would allocate the full size;
# their output is shaped like the input, so the meta rule says just that.
for _d in (index_put, scatter_reduce, index_reduce, index_copy, index_fill, put, roll, fliplr,
           flipud):
    _d.meta = same_meta
narrow_copy.meta = lambda input, *args: narrow.fwd(np, input, *args)
del _d
