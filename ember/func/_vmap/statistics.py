"""Batching rules of the histograms, quantiles and sorts."""
import ember

from ..._ops.registry import get
from ..._tensor import Tensor
from .batched import _STACK, _level_of, _lifted, _size, _wrap, lift, lower
from .generic import _decomposed, _empty, _loop


def _histc(opdef, level, args, kwargs):
    """Each example's counts by a scatter-add of its bin numbers (its own range where
    ``min == max``)."""
    a = dict(opdef.defaults, **dict(zip(opdef.params, args)), **kwargs)
    if a["input"].numel() == 0:
        return _empty(opdef, level, args, kwargs)
    xv = a["input"]._value.reshape(_size(level), -1)
    bins, lo, hi = a["bins"], a["min"], a["max"]
    if lo == hi:
        lo, hi = xv.amin(1, keepdim=True), xv.amax(1, keepdim=True)
        same = lo == hi
        lo, hi = ember.where(same, lo - 1, lo), ember.where(same, hi + 1, hi)
    inside = (xv >= lo) & (xv <= hi)
    b = ((xv - lo) * bins / (hi - lo)).floor().long().clamp(0, bins - 1)
    out = ember.zeros(xv.shape[0], bins, dtype=xv.dtype, device=xv.device)
    return _wrap(out.scatter_add(1, b, inside.to(xv.dtype)), level)


def _histogram(opdef, level, args, kwargs):
    """Every example's histogram at once (its own range, edges and weights): the examples of
    every vmap level (each example's rows, for ``_histogram_rows`` itself) as the rows of
    ``_histogram_rows``."""
    a = dict(opdef.defaults, **dict(zip(opdef.params, args)), **kwargs)
    x, bins, w = a["input"], a["bins"], a["weight"]
    lead = lift(x).shape[:len(_STACK)]
    rows = tuple(x.shape[:1]) if opdef.name == "_histogram_rows" else ()
    if isinstance(bins, Tensor):
        b = lift(bins)
        bins = b.unsqueeze(-2).expand(*b.shape[:-1], *rows, -1) if rows and bins.dim() == 1 else b
        bins = bins.reshape(-1, bins.shape[-1])
    x, w = (None if t is None else lift(t).reshape(-1, x.shape[-1] if rows else x.numel())
            for t in (x, w))
    h, e = get("_histogram_rows")(x, bins, a["range"], w, a["density"])
    return lower(h.reshape(*lead, *rows, -1)), lower(e.reshape(*lead, *rows, -1))


def _quantile(opdef, level, args, kwargs):
    a = dict(opdef.defaults, **dict(zip(opdef.params, args)), **kwargs)
    x, q, d = a.pop("input"), a.pop("q"), a.pop("dim")
    if x.dim() == 0 and d in (0, -1):
        d = None
    if _level_of(q) == level:
        return _quantile_of_batched_q(opdef, level, x, q, d, **a)
    if x.dim() == 0 and d is not None:
        return _loop(opdef, level, args, kwargs)
    v, keep = x._value, a["keepdim"]
    if d is None:
        out = opdef(v.reshape(v.shape[0], -1), q, 1, **dict(a, keepdim=False))
        many = isinstance(q, Tensor) and q.dim() == 1
        out = out.movedim(0, 1) if many else out
        if keep:
            out = out.reshape(*out.shape, *(1,) * x.dim())
        return _wrap(out, level)
    out = opdef(v, q, d % x.dim() + 1, **a)
    return _wrap(out.movedim(0, 1) if isinstance(q, Tensor) and q.dim() == 1 else out, level)


def _quantile_of_batched_q(opdef, level, x, q, d, keepdim, interpolation):
    """Each example its own q: its slices sorted once, the ranks of its q in them, the values
    there gathered and interpolated, in ember ops (differentiable in the input and in q, as
    the op is)."""
    from ..._ops import statistics as _statistics        # (an op family loaded on first use)
    from ..._ops.sorting import axis_of as _axis_of
    _statistics._quantile_checks(lift(x)._data, lift(q)._data.reshape(-1) if q.dim() < 2 else
                                 lift(q)._data, interpolation)
    n = _size(level)
    xv, qv = _lifted(level, x, q)
    v = xv.reshape(n, -1) if d is None else xv.movedim(_axis_of(d, x.dim()) + 1, -1)
    s = v.sort(-1)[0].unsqueeze(1)                                  # (n, 1, ..., m)
    nans = s.isnan().sum(-1, keepdim=True).to(s.dtype)
    qv = qv.reshape(n, -1, *(1,) * (v.dim() - 1))                   # (n, k, 1, ..., 1)
    below, above, w, scale = _statistics.ranks(ember, qv, v.shape[-1], nans, interpolation,
                                               opdef.name == "nanquantile")
    # a slice ranked without q (one with nan) gives q no gradient, not nan (as the vjp)
    w = ember.where(scale == 0, w.detach(), w)
    s = s.expand(*below.shape[:-1], s.shape[-1])
    lo, hi = (s.gather(-1, r.detach().long()) for r in (below, above))
    out = _statistics._lerp(ember, lo, hi, w) if interpolation in ("linear", "midpoint") else lo
    if not keepdim:
        out = out.squeeze(-1)
    elif d is None:
        out = out.reshape(*out.shape[:2], *(1,) * x.dim())
    else:
        out = out.movedim(-1, _axis_of(d, x.dim()) + 2)
    return _wrap(out if q.dim() else out.squeeze(1), level)


RULES = {"histc": _histc, "histogram": _histogram, "_histogram_rows": _histogram,
         "quantile": _quantile, "nanquantile": _quantile,
         "msort": _decomposed(lambda x: x.sort(0)[0])}
