"""Writes at indices along a dimension: index_put (``t[idx] = v``), scatter/scatter_add,
scatter_reduce, and index_add/copy/fill/reduce.

Each write has an out-of-place op and the in-place ``<name>_`` method. Checks raise torch's
exception types and texts before anything is computed; selections by mask or flat index
live in selection.py, the reorderings in reorder.py.
"""
import numpy as np

import ember

from .._C import kernels as _C
from .._backends import add_at, add_flat, max_at, min_at, multiply_at
from .indexing import (_check_bounds, _index_put, check_range, index_error, scatter_positions,
                       write_at)
from .meta import moveaxis, same_meta, wrap_dim
from .pointwise import type_name
from .tangents import LINEAR, fallback_unless, linear_with, named
from .registry import op, overload_if_tensor
from .samples import ErrorSample, Sample, const, make

_LONG = np.int64


# ---- index_put ------------------------------------------------------------------------------

def _index_tuple(input, indices, values, check_range=True):
    """``indices`` as a tuple of arrays, with torch's errors for their types, count and
    ``values``' dtype, and (``check_range``) _in_range's."""
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
                           f"{type_name(input.dtype)} for the destination and "
                           f"{type_name(values.dtype)} for the source.")
    if check_range:
        _in_range(input, idx)
    return idx


def _in_range(input, idx):
    """torch's error for indices out of range or masks that do not fit ``input``: a pass over
    every index, which the C scatter makes itself (see _index_put_into)."""
    err = index_error(input.shape, idx)
    if err is not None:
        raise err


def _index_put_into(out, input, indices, values, accumulate=False):
    """``index_put``'s value written into ``out`` (``input`` itself, in place): no copy of
    ``input`` first, and none back. Values that share ``out``'s memory are refused (the
    forward reads them from before the write). A long 1-D index goes to the C scatter,
    which checks every index before it writes; otherwise the indices are checked first, as
    NumPy may stop at a bad one with part of the write done."""
    idx = _index_tuple(input, indices, values, check_range=False)
    if np.may_share_memory(out, values):
        raise ValueError("values overlap the written tensor")
    if add_flat(out, idx, values, add=accumulate):
        return
    _in_range(input, idx)
    write_at(np, out, idx, values, accumulate)


@op("index_put", inplace=True, into=_index_put_into)
def index_put(xp, input, indices, values, accumulate=False):
    """A copy of ``input`` with ``values`` written at ``input[indices]`` (a tuple of index
    tensors); ``accumulate=True`` adds instead, repeated indices adding up.

    Example:
        >>> x = ember.zeros(4)
        >>> x.index_put((ember.tensor([0, 0, 2]),), ember.tensor(1.), accumulate=True)
        tensor([2., 0., 1., 0.])
    """
    # (NumPy raises for a bad index, and the copy it wrote into is dropped: torch's error is
    # looked for then only; CuPy does not check)
    idx = _index_tuple(input, indices, values, check_range=xp is not np)
    try:
        return _index_put.fwd(xp, input, values, idx, accumulate)
    except IndexError:
        _in_range(input, idx)
        raise


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


# ---- scatter, scatter_add, index_add --------------------------------------------------------


def _scatter_into(xp, input, dim, index, src, reduce):
    """A copy of ``input`` with ``src`` written at ``index`` along ``dim``."""
    if not hasattr(src, "shape"):
        src = xp.full(index.shape, src, dtype=input.dtype)
    elif src.shape != index.shape:
        src = src[_corner(index.shape)]
    mode = _MODE.get(reduce, 0 if reduce is None else None)
    if xp is np and mode is not None and (out := _scattered(input, dim, index, src, mode)) \
            is not None:
        return out          # (the kernel copied input into out, a slice per thread)
    out = input.copy()
    pos = scatter_positions(xp, out.shape, dim, index)        # (raises for a bad index)
    flat = out.reshape(-1)
    if reduce is None:
        flat[pos] = src
    elif reduce in ("add", "sum"):         # NOTE: np.add.at is fast on 1-D arrays only
        add_at(xp, flat, pos.reshape(-1), src.reshape(-1))
    elif reduce in ("multiply", "prod"):
        multiply_at(xp, flat, pos.reshape(-1), src.reshape(-1))
    else:
        raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    return out


@op("scatter", inplace=True)
def scatter(xp, input, dim, index, src, *, reduce=None):
    """A copy of ``input`` with ``src`` written at ``index`` along ``dim``."""
    return _scatter_into(xp, input, dim, index, src, reduce)


@scatter.vjp(save=("index",))
def _(g, input, dim, index, src, *, reduce=None):
    if reduce is not None:
        raise RuntimeError("derivative for aten::scatter is not implemented")   # as in torch
    gi = g.scatter(dim, index, 0.0)
    gs = src_grad(g.gather(dim, index), src) if hasattr(src, "shape") else None   # or a number
    return gi, None, None, gs


def src_grad(gs, src):
    """The gradient of a scatter's ``src`` from ``gs`` of the index's shape: scatter reads only
    the leading ``index.shape`` block of ``src``, the rest gets zeros."""
    if tuple(gs.shape) == tuple(src.shape):
        return gs
    from .shape import _index_embed
    return _index_embed(gs, tuple(src.shape), tuple(slice(0, n) for n in gs.shape))


def _scatter_samples(dev, dt, reduces=(None,)):
    x, i = make((3, 4), dt), np.array([[0, 1, 2, 0], [2, 0, 1, 1]])
    out = [Sample(x, 0, i, make((2, 4), dt, seed=1), **({"reduce": r} if r else {}))
           for r in reduces]
    return out + [Sample(x, 1, np.array([[3, 0], [1, 2], [0, 0]])[:, :1], make((3, 2), dt,
                                                                               seed=2))]


scatter.samples = lambda dev, dt: _scatter_samples(dev, dt) + [
    Sample(make((3, 4), dt), -1, np.array([[2], [0], [3]]), 2)] + [
    s.forward_only() for s in _scatter_samples(dev, dt, ("add", "multiply"))[:2]]
scatter.grad_name_of = overload_if_tensor("scatter", 3, "src", 0, 1)


@op("scatter_add", tags=("autocast_promote_cuda",), inplace=True)
def scatter_add(xp, input, dim, index, src):
    """A copy of ``input`` with ``src`` added at ``index`` along ``dim``."""
    return _scatter_into(xp, input, dim, index, src, "add")


@scatter_add.vjp(save=("index",))
def _(g, input, dim, index, src):
    return g, None, None, src_grad(g.gather(dim, index), src)


scatter_add.samples = _scatter_samples


@op("index_add", inplace=True, promote="common", promote_args=(0, 3))
def index_add(xp, input, dim, index, source, *, alpha=1):
    """A copy of ``input`` with ``alpha * source`` added at ``index`` along ``dim``."""
    source = source * alpha if alpha != 1 else source
    if xp is np and (out := _scattered(input, dim, index, source, 1, rows=True)) is not None:
        return out
    out = input.copy()
    if out.ndim == 0:               # (the one element, at index 0 of dim 0 or -1)
        wrap_dim(dim, 0)
        if getattr(source, "shape", ()) != ():
            raise RuntimeError(f"source tensor shape must match self tensor shape, excluding "
                               f"the specified dimension. Got self.shape = [] source.shape = "
                               f"{list(source.shape)}")
        _add_along(xp, out.reshape(1), index.reshape(-1), source, 0, 1)
        return out
    moved = moveaxis(xp, out, dim, 0)
    _add_along(xp, moved, index, moveaxis(xp, source, dim, 0), dim % out.ndim, out.ndim)
    return out


def _add_along(xp, out, index, values, dim, ndim):
    """``out[index] += values`` along ``out``'s first dim (``dim`` of an ``ndim``-dim input)
    with index_add's bounds: no negative indices, torch's error for its input's rank."""
    n = out.shape[0]
    if ndim > 1:
        _check_bounds(index, n, dim, RuntimeError, negative=False)
    else:       # NOTE: torch's 1-D index_add words it as an embedding lookup
        check_range(index, n, lambda bad: IndexError("index out of range in self"))
    add_at(xp, out, index, values)


@index_add.vjp(save=("index",))
def _(g, input, dim, index, source, *, alpha=1):
    gs = g.index_select(dim, index)
    return g, None, None, gs * alpha if alpha != 1 else gs


index_add.samples = lambda dev, dt: [
    Sample(make((4, 3), dt), 0, np.array([0, 2, 2]), make((3, 3), dt, seed=1)),
    Sample(make((2, 3, 4), dt), -1, np.array([3, 0]), make((2, 3, 2), dt, seed=2), alpha=2)]
index_add.errors = [
    ErrorSample(Sample(const(3, 4), 0, np.array([0, 3]), const(2, 4)), RuntimeError,
                "index 3 is out of bounds for dimension 0 with size 3"),
    ErrorSample(Sample(const(3, 4), 1, np.array([-1]), const(3, 1)), RuntimeError,
                "index -1 is out of bounds for dimension 1 with size 4"),
    ErrorSample(Sample(const(5), 0, np.array([0, 5]), const(2)), IndexError,
                "index out of range in self")]


# ---- scatter_reduce, index_reduce -----------------------------------------------------------

def _check_scatter(input, index, src):
    if index.dtype.char not in "ilq":      # (int32, int64: a comparison with the types costs more)
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if hasattr(src, "dtype") and src.dtype != input.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    if index.ndim != input.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")


def _corner(shape):
    """The leading block of ``shape``: scatter reads only ``src[:index.shape]``."""
    return tuple(slice(0, n) for n in shape)


_AT = {"sum": add_at, "mean": add_at, "prod": multiply_at, "amax": max_at, "amin": min_at}
# gather.h's scatter modes (mean: a sum, then divided)
_MODE = {"add": 1, "sum": 1, "mean": 1, "amax": 2, "amin": 3, "multiply": 4, "prod": 4}


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
    _check_scatter(input, index, src)
    src = src if src.shape == index.shape else src[_corner(index.shape)]
    if xp is np and (out := _reduced(input, dim, index, src, reduce, include_self)) is not None:
        return out
    d = dim % max(input.ndim, 1)
    _check_bounds(index, input.shape[d] if input.ndim else 1, d, RuntimeError, negative=False)
    out = input.copy()
    flat, src = out.reshape(-1), src.reshape(-1)    # NOTE: ufunc.at is fast on 1-D arrays only
    idx = scatter_positions(xp, out.shape, dim, index).reshape(-1)
    if not include_self:
        # max/min of (src, src...) is max/min of src, so those may start from src itself
        flat[idx] = src if reduce in ("amax", "amin") else int(reduce == "prod")
    _AT[reduce](xp, flat, idx, src)
    return out if reduce != "mean" else _mean(xp, out, include_self, lambda hits: add_at(
        xp, hits.reshape(-1), idx, xp.ones(idx.shape, out.dtype)))


def _mean(xp, total, include_self, count):
    """The mean from the sums ``total``; ``count(hits)`` adds 1 to ``hits`` (zeros) for each
    value summed into a place."""
    hits = xp.zeros(total.shape, total.dtype)
    count(hits)
    n = xp.maximum(hits + int(include_self), xp.ones((), total.dtype))
    # NOTE: torch's integer mean rounds down (floor division), as // does
    return total // n if total.dtype.kind in "iu" else (total / n).astype(total.dtype)


def _scattered(input, dim, index, src, mode, fresh=False, rows=False):
    """A copy of ``input`` with ``src`` combined into it at ``index`` along ``dim`` by the C
    scatter (``_C.scatter``'s ``mode``, ``fresh`` and ``rows``: index_copy, index_add and
    index_reduce's slices), in one call that checks the indices; None where it does not
    apply or an index is out of range: the NumPy path then raises torch's error."""
    out = np.empty(input.shape, input.dtype)
    return out if _C.scatter(out, dim, index, src, mode, input, fresh, rows) else None


def _reduced(input, dim, index, src, reduce, include_self, rows=False):
    """scatter_reduce (``rows``: index_reduce) by ``_scattered``, a mean as a sum and a
    count; None where it does not apply."""
    out = _scattered(input, dim, index, src, _MODE[reduce], not include_self, rows)
    return out if out is None or reduce != "mean" else _mean(np, out, include_self, lambda hits: (
        _C.scatter(hits, dim, index, np.ones(src.shape, out.dtype), 1, hits, rows=rows)))


@scatter_reduce.vjp(save=("input", "index", "src", "result"))
def _(g, input, dim, index, src, reduce, *, include_self=True, result=None):
    s = src[_corner(index.shape)] if tuple(src.shape) != tuple(index.shape) else src
    gi, gs = _reduce_grads(
        g, input, s, reduce, include_self, result, lambda t: t.gather(dim, index),
        lambda t, v: t.scatter_add(dim, index, v),
        lambda x, v: x.scatter_reduce(dim, index, v, "prod", include_self=include_self))
    return gi, None, None, src_grad(gs, src)


def _reduce_grads(g, input, s, reduce, include_self, result, take, add, prod):
    """The gradients of scatter_reduce or index_reduce (reducing ``s`` into ``input``, giving
    ``result``), for the input and for ``s``: ``take(t)`` reads ``t`` at the index (gather,
    index_select), ``add(t, v)`` adds ``v`` there (scatter_add, index_add), ``prod(x, v)``
    is the forward's product of ``v`` into ``x``."""
    if reduce == "sum" and include_self:
        return g, take(g)
    # how many of ``s`` land at each place of the input; none: the output is the input there
    hits = add(ember.zeros(input.shape, dtype=g.dtype, device=g.device),
               ember.ones(s.shape, dtype=g.dtype, device=g.device)) \
        if reduce == "mean" or not include_self else None
    alone = None if include_self else hits == 0
    if reduce in ("sum", "mean"):
        n = 1 if reduce == "sum" else hits + 1 if include_self else hits.clamp(min=1)
        return (g / n if include_self else g * alone), take(g / n)
    if reduce == "prod":
        # NOTE: result / x fails where x is 0; as torch does, a zero input's share is the
        # product of the others (zeros set to 1 first), and so is a zero src's where it is
        # the only zero reduced into its place (two zeros make every share 0).
        ones_in = input.masked_fill(input == 0, 1)
        gi = g * prod(ones_in, s) / ones_in if include_self else g * alone
        zero = s == 0
        zeros_at = take(add(ember.zeros(input.shape, dtype=g.dtype, device=g.device),
                            zero.to(g.dtype)))
        single = zero * (zeros_at == 1)
        gs = ember.where(single, take(g * prod(input, s.masked_fill(single, 1))),
                         take(g * result) / s.masked_fill(zero, 1))
        return gi, gs
    # ties share the gradient evenly, as in torch. NOTE: torch counts an input equal to the
    # result among the ties even with include_self=False (then drops its share), so the
    # shares do not add up to g there; we match it.
    self_is = input == result
    src_is = s == take(result)
    n = add(self_is.to(g.dtype), src_is.to(g.dtype))
    gi, gs = g * self_is / n, take(g / n) * src_is
    return (gi if include_self else gi * alone), gs


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


def _check_index(name, input, dim, index, bounds=True):
    if index.dtype.char not in "lq":       # (int64: a comparison with the type costs more)
        raise IndexError(f"{name}(): Expected dtype int64 for index.")
    if index.ndim > 1:
        raise IndexError(f"{name}(): Index should have dimension 1 or 0 (got {index.ndim})")
    d = dim % max(input.ndim, 1)
    if bounds:      # NOTE: torch's index_fill takes negative indices, index_copy does not
        _check_bounds(index, input.shape[d] if input.ndim else 1, d, IndexError, f"{name}(): ",
                      negative=name == "index_fill_")
    return d


def _check_source(name, input, d, index, source, exc=IndexError):
    if source.dtype != input.dtype:
        raise RuntimeError(f"{name}(): self and source expected to have the same dtype, but got "
                           f"(self) {type_name(input.dtype)} and (source) "
                           f"{type_name(source.dtype)}")
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
    if xp is np and (out := _reduced(input, dim, index, source, reduce, include_self, True)) \
            is not None:
        return out
    d = _check_index("index_reduce_", input, dim, index, bounds=False)
    _check_source("index_reduce_", input, d, index, source, RuntimeError)
    check_range(index, input.shape[d] if input.ndim else 1,
                lambda bad: IndexError("index out of range in self"))
    spread = (1,) * d + (-1,) + (1,) * (source.ndim - d - 1)    # (the index along d)
    idx = xp.broadcast_to(index.reshape(spread), source.shape)
    return scatter_reduce.fwd(xp, input, d, idx, source, reduce, include_self=include_self)


@index_reduce.vjp(save=("input", "index", "source", "result"))
def _(g, input, dim, index, source, reduce, *, include_self=True, result=None):
    d, index = dim % max(input.dim(), 1), index.reshape(-1)
    gi, gs = _reduce_grads(
        g, input, source, reduce, include_self, result, lambda t: t.index_select(d, index),
        lambda t, v: t.index_add(d, index, v),
        lambda x, v: x.index_reduce(d, index, v, "prod", include_self=include_self))
    return gi, None, None, gs


index_reduce.samples = lambda dev, dt: [
    Sample(make((3, 4), dt, 0.5, 2.0), d, np.array([0, 2, 0]), make(s, dt, 0.5, 2.0, seed=1), r,
           include_self=inc) for r in ("prod", "mean", "amax", "amin") for inc in (True, False)
    for d, s in ((0, (3, 4)), (-1, (3, 3)))] if dt.category in (1, 2) else []
index_reduce.errors = [
    ErrorSample(Sample(const(3, 4), 0, np.array([0]), const(1, 4), "sum"), RuntimeError,
                "Expected reduce to be one of prod, mean, amax or amin but got sum"),
    ErrorSample(Sample(const(3, 4), 0, np.array([0, 1]), const(3, 4), "amax"), RuntimeError,
                r"Number of indices \(2\) should be equal to source.size\(dim\): \(3\), for "
                "dim: 0"),
    ErrorSample(Sample(const(3, 4), 0, np.array([0, -1]), const(2, 4), "amax"), IndexError,
                "index out of range in self")]


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
    if xp is np and (out := _scattered(input, dim, index, source, 0, rows=True)) is not None:
        return out
    d = _check_index("index_copy_", input, dim, index)
    _check_source("index_copy_", input, d, index, source)
    out = input.copy()
    if out.ndim:
        # (a 0-d index is one slice, as torch's: source keeps that dim of size 1; one array
        # among slices keeps its place, so source lines up without moving axes)
        out[(slice(None),) * d + (index.reshape(-1),) if d else index.reshape(-1)] = source
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
    ErrorSample(Sample(const(3, 4), 0, np.array([0, -1]), const(2, 4)), IndexError,
                r"index_copy_\(\): index -1 is out of bounds for dimension 0 with size 3"),
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
    d = _check_index("index_fill_", input, dim, index, bounds=not input.ndim)
    if hasattr(value, "ndim") and value.ndim:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.ndim} dimension(s).")
    out = input.copy()
    v = value.astype(out.dtype) if hasattr(value, "astype") else value
    if out.ndim:
        try:    # (NumPy checks the bounds, [-n, n) as torch's index_fill: only a failure pays)
            out[(slice(None),) * d + (index,)] = v
        except IndexError:
            _check_index("index_fill_", input, dim, index)      # (torch's error)
            raise
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
index_fill.grad_name_of = overload_if_tensor("index_fill", 3, "value")


# NOTE: these forwards copy their input, which on the meta device would allocate the full size;
# their output is shaped like the input, so the meta rule says just that.
for _d in (index_put, scatter_reduce, index_reduce, index_copy, index_fill):
    _d.meta = same_meta
del _d


# ---- forward mode (tangents.py): linear, but for the multiplying and extremal reductions
for _d in (index_add, scatter_add, index_copy, index_put):
    _d.jvp = LINEAR
index_fill.jvp = linear_with("value")
scatter.jvp = fallback_unless(lambda a: a.get("reduce") in (None, "add"), linear_with("src"))


def _weighted(add):
    """prod/amax/amin reductions: each element reaches one output element, so its weight is
    the vjp at ones and the tangent adds up the weighted tangents as the reduction does."""
    def rule(opdef, args, kwargs, tangents, out):
        a = named(opdef, args, kwargs)
        if a["reduce"] in ("sum", "mean"):
            return LINEAR(opdef, args, kwargs, tangents, out)
        gx, _, _, gs = opdef.vjp_fn(ember.ones_like(out), *args, **kwargs, result=out)[:4]
        tx, ts = tangents.get(0, tangents.get("input")), tangents.get(3, tangents.get(
            "src", tangents.get("source")))
        x, src = a["input"], a.get("src", a.get("source"))
        base = ember.zeros_like(x) if tx is None or gx is None else gx * tx
        part = ember.zeros_like(src) if ts is None or gs is None else gs * ts
        return add(base, a["dim"], a["index"], part)
    return rule


scatter_reduce.jvp = _weighted(ember.scatter_add)
index_reduce.jvp = _weighted(ember.index_add)
