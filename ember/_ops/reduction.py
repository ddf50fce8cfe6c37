"""Reductions: sum, mean, prod, max/min, var/std, ..."""
import builtins

import numpy as np

import ember

from .meta import empty, reduce_shape
from .registry import op
from .samples import Sample, make, reduce_samples


def _axis(dim, nd):
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return None
    if isinstance(dim, (tuple, list)):
        return tuple(d % max(nd, 1) for d in dim)
    return dim % max(nd, 1)


def _keep(g, input, dim, keepdim):
    """Re-insert reduced dimensions into ``g`` so it broadcasts against ``input``."""
    nd = len(input.shape)
    if keepdim or nd == 0:
        return g
    ax = _axis(dim, nd)
    axes = range(nd) if ax is None else (ax if isinstance(ax, tuple) else (ax,))
    for a in sorted(axes):
        g = g.unsqueeze(a)
    return g


def _reduce_meta(dtype_fn):
    def meta(input, dim=None, keepdim=False, *, dtype=None):
        return empty(reduce_shape(input.shape, dim, keepdim), dtype_fn(input, dtype))
    return meta


def _sum_dtype(x, dtype):
    if dtype is not None:
        return dtype.np
    return np.int64 if x.dtype.kind in "biu" else x.dtype


@op("sum", tags=("reduction",))
def sum_(xp, input, dim=None, keepdim=False, *, dtype=None):
    """Sum over ``dim`` (all dims by default); integers and bools sum as int64."""
    return xp.sum(input, axis=_axis(dim, input.ndim), keepdims=keepdim,
                  dtype=_sum_dtype(input, dtype))


@sum_.vjp()
def _(g, input, dim=None, keepdim=False, *, dtype=None):
    return _keep(g, input, dim, keepdim).expand(input.shape).to(input.dtype)


sum_.meta = _reduce_meta(_sum_dtype)
sum_.samples = reduce_samples


@op("mean", tags=("reduction",))
def mean(xp, input, dim=None, keepdim=False, *, dtype=None):
    """Mean over ``dim`` (floating and complex inputs, or with ``dtype``)."""
    if dtype is None and input.dtype.kind in "biu":
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: {_tname(input.dtype)}")
    dt = dtype.np if dtype is not None else input.dtype
    r = xp.mean(input, axis=_axis(dim, input.ndim), keepdims=keepdim, dtype=dt)
    return r


@mean.vjp()
def _(g, input, dim=None, keepdim=False, *, dtype=None):
    shape = input.shape
    n = ember.Size(shape).numel() // builtins.max(ember.Size(reduce_shape(shape, dim, True)).numel(), 1)
    return _keep(g, input, dim, keepdim).expand(shape) / builtins.max(n, 1)


mean.meta = _reduce_meta(lambda x, d: d.np if d is not None else x.dtype)
mean.samples = lambda dev, dt: reduce_samples(dev, dt) if dt.category >= 2 else []


def _tname(npdt):
    return {"int64": "Long", "int32": "Int", "bool": "Bool", "uint8": "Byte", "int16": "Short",
            "int8": "Char"}.get(str(npdt), str(npdt))


@op("prod", tags=("reduction",))
def prod(xp, input, dim=None, keepdim=False, *, dtype=None):
    """Product over ``dim`` (one dim or all)."""
    return xp.prod(input, axis=_axis(dim, input.ndim), keepdims=keepdim,
                   dtype=_sum_dtype(input, dtype))


@prod.vjp(save=("input", "result"))
def _(g, input, dim=None, keepdim=False, *, dtype=None, result=None):
    # NOTE: prod/x is wrong where x == 0; the product of the others is exact there.
    g, r = _keep(g, input, dim, keepdim), _keep(result, input, dim, keepdim)
    if not bool((input == 0).any()):
        return g * (r / input).conj()
    ax = _axis(dim, input.dim())
    if ax is None:
        flat = input.reshape(-1)
        return (g * _prod_others(flat, 0).reshape(input.shape).conj())
    return g * _prod_others(input, ax).conj()


def _prod_others(x, dim):
    """For each element, the product of the other elements along ``dim``."""
    n = x.shape[dim]
    ones = ember.ones_like(x.narrow(dim, 0, 1))
    left = ember.cat([ones, x.narrow(dim, 0, n - 1)], dim).cumprod(dim)
    right = ember.cat([x.narrow(dim, 1, n - 1), ones], dim).flip(dim).cumprod(dim).flip(dim)
    return left * right


prod.meta = _reduce_meta(_sum_dtype)
prod.samples = lambda dev, dt: [Sample(make((3, 4), dt, 0.5, 1.5)), Sample(make((3, 4), dt), 1),
                                Sample(make((2, 3), dt), -1, True)]


def _minmax(name, f, argf):
    @op(name, tags=("reduction",), nondiff_outputs=(1,))
    def fwd(xp, input, dim=None, keepdim=False):
        if dim is None:
            if input.size == 0:
                raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                                   "input.numel() == 0. Specify the reduction dim with the "
                                   "'dim' argument.")
            return f(input)
        if isinstance(dim, (tuple, list)):
            raise TypeError(f"{name}(): dim must be an int, got {type(dim).__name__}")
        idx = argf(input, axis=dim, keepdims=True)
        vals = xp.take_along_axis(input, idx, axis=dim)
        if not keepdim:
            vals, idx = xp.squeeze(vals, dim), xp.squeeze(idx, dim)
        return vals, idx.astype(np.int64)
    fwd.__doc__ = f"The {name}imum of all elements, or ``(values, indices)`` along ``dim``."

    @fwd.vjp(save=("input", "result"))
    def _(g, input, dim=None, keepdim=False, result=None):
        if dim is None:
            # NOTE: torch splits the gradient evenly between tied extrema.
            mask = (input == result).to(g.dtype)
            return g * mask / mask.sum()
        vals, idx = result
        gk, ik = _keep(g[0], input, dim, keepdim), _keep(idx, input, dim, keepdim)
        return ember.zeros(input.shape, dtype=gk.dtype, device=gk.device).scatter(dim, ik, gk)

    def meta(input, dim=None, keepdim=False):
        if dim is None:
            return empty((), input.dtype)
        s = reduce_shape(input.shape, dim, keepdim)
        return empty(s, input.dtype), empty(s, np.int64)

    fwd.meta = meta
    fwd.samples = lambda dev, dt: [Sample(make((3, 4, 5), dt)), Sample(make((3, 4, 5), dt), 1),
                                   Sample(make((3, 4), dt), -1, True)] if dt.category != 3 else []
    return fwd


max_ = _minmax("max", lambda a: a.max(), lambda a, axis, keepdims: a.argmax(axis, keepdims=True))
min_ = _minmax("min", lambda a: a.min(), lambda a, axis, keepdims: a.argmin(axis, keepdims=True))


@op("var", tags=("reduction",))
def var(xp, input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance over ``dim`` with ``correction`` (1 by default: Bessel's)."""
    c = _correction(unbiased, correction)
    return xp.var(input, axis=_axis(dim, input.ndim), ddof=c, keepdims=keepdim)


def _correction(unbiased, correction):
    if isinstance(unbiased, (int, tuple, list)) and not isinstance(unbiased, bool):
        raise TypeError("var(): unbiased must be a bool; pass dims as dim=")
    if correction is not None:
        return correction
    return 0 if unbiased is False else 1


@var.vjp(save=("input",))
def _(g, input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    c = _correction(unbiased, correction)
    ax = _axis(dim, input.dim())
    axes = range(input.dim()) if ax is None else ax if isinstance(ax, tuple) else (ax,)
    n = 1
    for a in axes:
        n *= input.shape[a]
    centered = input - input.mean(ax, keepdim=True)
    return _keep(g, input, dim, keepdim) * 2 * centered / builtins.max(n - c, 0)


var.meta = lambda input, dim=None, unbiased=None, keepdim=False, *, correction=None: empty(
    reduce_shape(input.shape, dim, keepdim), input.real.dtype)
var.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((3, 4), dt), 1),
                               Sample(make((3, 4), dt), 0, False, True),
                               Sample(make((3, 4, 2), dt), (0, 2), correction=0)] \
    if dt.category == 2 else []


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Standard deviation: ``var(...).sqrt()``."""
    return var(input, dim, unbiased, keepdim, correction=correction).sqrt()


@op("argmax", tags=("reduction",), differentiable=False)
def argmax(xp, input, dim=None, keepdim=False):
    """Index of the maximum (of the flattened input when ``dim`` is None)."""
    if dim is None:
        r = xp.argmax(input)
        return xp.asarray(r, dtype=np.int64).reshape((1,) * input.ndim if keepdim else ())
    return xp.argmax(input, axis=dim, keepdims=keepdim).astype(np.int64)


@op("argmin", tags=("reduction",), differentiable=False)
def argmin(xp, input, dim=None, keepdim=False):
    """Index of the minimum (of the flattened input when ``dim`` is None)."""
    if dim is None:
        r = xp.argmin(input)
        return xp.asarray(r, dtype=np.int64).reshape((1,) * input.ndim if keepdim else ())
    return xp.argmin(input, axis=dim, keepdims=keepdim).astype(np.int64)


argmax.samples = argmin.samples = lambda dev, dt: [Sample(make((3, 4), dt, seed=5)),
                                                   Sample(make((3, 4), dt, seed=5), 1)] \
    if dt.category in (1, 2) else []


@op("all", tags=("reduction",), differentiable=False)
def all_(xp, input, dim=None, keepdim=False):
    """True where every element (along ``dim``) is non-zero."""
    return xp.all(input, axis=_axis(dim, input.ndim), keepdims=keepdim)


@op("any", tags=("reduction",), differentiable=False)
def any_(xp, input, dim=None, keepdim=False):
    """True where some element (along ``dim``) is non-zero."""
    return xp.any(input, axis=_axis(dim, input.ndim), keepdims=keepdim)


all_.samples = any_.samples = reduce_samples
