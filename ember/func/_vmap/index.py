"""Batching rules of the index, gather/scatter, mask and search ops: indices batched with the
input (expanded where not), or an arange over the batch as the first index."""
import ember

from ..._ops.registry import get
from ..._tensor import Tensor
from .batched import _level_of, _lifted, _map_out, _pad, _size, _wrap, lift_one
from .generic import _loop


def _along(*positions):
    """gather/scatter-like ops (index and source as many dims as the input): every tensor
    operand batched (expanded where not), ``dim`` shifted. Only the input batched: an index
    that is not batched (index_select's) is used as it is."""
    def rule(opdef, level, args, kwargs):
        x, n, args = args[0], _size(level), list(args)
        i = opdef.params.index("dim")
        d = args[i] if i < len(args) else kwargs.get("dim", opdef.defaults.get("dim"))
        if d is None and opdef.name == "take_along_dim":
            return opdef(x.reshape(-1), args[1].reshape(-1), 0)
        if d is None or x.dim() == 0 or isinstance(d, Tensor):
            return _loop(opdef, level, args, kwargs)
        for p in positions:
            if isinstance(args[p], Tensor):
                args[p] = lift_one(args[p], level, n)
        if i < len(args):
            args[i] = d % x.dim() + 1
        else:
            kwargs = dict(kwargs, dim=d % x.dim() + 1)
        return _wrap(opdef(*args, **kwargs), level)
    return rule


def _slice_inverse(opdef, level, args, kwargs):
    """slice_inverse: as a function of values (src with the slice replaced by input, which it
    is where valid: batched examples do not share one storage the strides could reach)."""
    n, a = _size(level), {**opdef.defaults, **dict(zip(opdef.params, args)), **kwargs}
    x, src = (lift_one(a[k], level, n) for k in ("input", "src"))
    dim = a["dim"] % a["src"].dim() + 1
    return _map_out(ember.slice_scatter(src, x, dim, a["start"], a["end"], a["step"]), level)


def _index_expanded(idx, like, d):
    """A batched 1-D index (N, k) shaped and expanded for ``gather``/``scatter`` along physical
    dim ``d`` of ``like`` (N, ...), whose size there becomes k."""
    shape = list(like.shape)
    shape[d] = idx.shape[-1]
    return idx.reshape(idx.shape[0], *(1,) * (d - 1), -1, *(1,) * (len(shape) - d - 1)).expand(
        shape)


def _index_op(opdef, level, args, kwargs):
    """index_select/add/copy/fill/reduce: as gather/scatter along the shifted dim with the
    index expanded per example (a batched index picks per example)."""
    a = dict(zip(opdef.params, args), **kwargs)
    x, idx = a["input"], a["index"]
    if x.dim() == 0 or idx.dim() > 1:
        return _loop(opdef, level, args, kwargs)
    d = a["dim"] % x.dim() + 1
    xv, iv = _lifted(level, x, idx.reshape(-1) if idx.dim() == 0 else idx)
    if opdef.name == "index_select":
        return _wrap(xv.gather(d, _index_expanded(iv, xv, d)), level)
    if opdef.name == "index_fill":
        shape = list(xv.shape)
        shape[d] = iv.shape[-1]
        v = a["value"]
        if isinstance(v, Tensor):
            v = lift_one(v, level, _size(level)).reshape(-1, *(1,) * (xv.dim() - 1)).expand(
                shape).to(xv.dtype)
        return _wrap(xv.scatter(d, _index_expanded(iv, xv, d), v), level)
    (sv,) = _lifted(level, a["source"])
    sv = sv.reshape(sv.shape[0], 1) if a["source"].dim() == 0 else sv
    ie = _index_expanded(iv, sv, d)
    if opdef.name == "index_add":
        return _wrap(xv.scatter_add(d, ie, sv * a.get("alpha", 1) if a.get("alpha", 1) != 1
                                    else sv), level)
    if opdef.name == "index_copy":
        return _wrap(xv.scatter(d, ie, sv), level)
    return _wrap(xv.scatter_reduce(d, ie, sv, a["reduce"], include_self=a.get(
        "include_self", True)), level)


def _index_put(opdef, level, args, kwargs):
    """Advanced-index writes: an arange over the batch as the first index. A mask that is
    not batched as the indices of its set elements; a batched one that writes one value as
    ``where``."""
    a = dict(zip(opdef.params, args), **kwargs)
    x, idx, vals = a["input"], list(a["indices"]), a["values"]
    if len(idx) == 1 and isinstance(idx[0], Tensor) and idx[0].dtype == ember.bool:
        m = idx[0]
        if _level_of(m) != level:
            return _index_put(opdef, level, (x, list(m.nonzero().unbind(1)), vals), {
                "accumulate": a.get("accumulate", False)})
        if vals.numel() == 1:
            m = m.reshape(*m.shape, *(1,) * (x.dim() - m.dim()))
            v = vals.reshape(()).to(x.dtype)
            return x + ember.where(m, v, 0) if a.get("accumulate") else ember.where(m, v, x)
    if any(i is None or i.dtype == ember.bool for i in idx):
        return _loop(opdef, level, args, kwargs)
    n = _size(level)
    rank = max(i.dim() for i in idx)
    ivs = [_pad(i, level, rank) if _level_of(i) == level else i for i in idx]
    ar = ember.arange(n, device=x._value.device if _level_of(x) else x.device)
    xv, vv = _lifted(level, x, vals)
    rest = xv.dim() - 1 - len(idx)
    vv = vv.reshape(n, *(1,) * (rank + rest - vals.dim()), *vv.shape[1:])
    return _wrap(opdef(xv, [ar.reshape(n, *(1,) * rank), *ivs], vv,
                       a.get("accumulate", False)), level)


def _put(opdef, level, args, kwargs):
    a = dict(zip(opdef.params, args), **kwargs)
    xv, iv, sv = _lifted(level, a["input"], a["index"], a["source"])
    n, m = xv.shape[0], a["input"].numel()
    flat, iv = xv.reshape(n, -1), iv.reshape(n, -1)
    iv = ember.where(iv < 0, iv + m, iv)
    out = flat.scatter_add(1, iv, sv.reshape(n, -1)) if a.get("accumulate") else \
        flat.scatter(1, iv, sv.reshape(n, -1))
    return _wrap(out.reshape(xv.shape), level)


def _take(opdef, level, args, kwargs):
    xv, iv = _lifted(level, *args)
    m = args[0].numel()
    flat = iv.reshape(iv.shape[0], -1)
    return _wrap(xv.reshape(xv.shape[0], -1).gather(1, ember.where(flat < 0, flat + m, flat))
                 .reshape(iv.shape), level)


def _masked_scatter(opdef, level, args, kwargs):
    """Each example takes its source's elements in order where its mask is set."""
    x, mask, src = args
    shape = ember.broadcast_shapes(x.shape, mask.shape)
    n = _size(level)
    xv, mv, sv = _lifted(level, x, mask, src)
    mv = mv.reshape(n, *(1,) * (len(shape) - mask.dim()), *mv.shape[1:]).expand(n, *shape)
    xv = xv.reshape(n, *(1,) * (len(shape) - x.dim()), *xv.shape[1:]).expand(n, *shape)
    pos = (mv.reshape(n, -1).long().cumsum(1) - 1).clamp(min=0)
    picked = sv.reshape(n, -1).gather(1, pos.clamp(max=max(src.numel() - 1, 0))).reshape(n, *shape)
    return _wrap(ember.where(mv, picked, xv), level)


def _masked_select(opdef, level, args, kwargs):
    """A shared mask picks as many elements from every example: the batch kept, the mask's
    broadcast picking from the rest. A batched mask loops (each example's own length)."""
    x, mask = args
    if _level_of(mask) == level or mask.dtype != ember.bool:
        return _loop(opdef, level, args, kwargs)
    shape = ember.broadcast_shapes(x.shape, mask.shape)
    return _wrap(_pad(x, level, len(shape)).expand(-1, *shape)[:, mask.expand(shape)], level)


def _isin(opdef, level, args, kwargs):
    a = dict(zip(opdef.params, args), **kwargs)
    e, t = a["elements"], a["test_elements"]
    if not isinstance(t, Tensor) or _level_of(t) != level:
        return _map_out(opdef(_lifted(level, e)[0], t, invert=a.get("invert", False)), level)
    ev, tv = _lifted(level, e, t)
    n = tv.shape[0]
    if not isinstance(e, Tensor):                   # a scalar: one element per example
        hit = (tv.reshape(n, -1) == e).any(-1)
    else:
        hit = (ev.reshape(n, -1, 1) == tv.reshape(n, 1, -1)).any(-1).reshape(ev.shape)
    return _wrap(hit.logical_not() if a.get("invert") else hit, level)


def _searchsorted(opdef, level, args, kwargs):
    """Sorted rows: every operand batched; a 1-D sequence per example searches its values
    flattened."""
    a = dict(zip(opdef.params, args), **kwargs)
    seq, vals = a.pop("sorted_sequence"), a.pop("input")
    if not isinstance(vals, Tensor):        # a scalar: the 0-d result of a 1-D sequence
        return _searchsorted(opdef, level, (seq, ember.tensor(vals, device=seq.device)), a)
    sv, vv, so = _lifted(level, seq, vals, a.pop("sorter", None))
    if seq.dim() == 1:
        out = opdef(sv, vv.reshape(vv.shape[0], -1), sorter=so, **a).reshape(vv.shape)
    else:
        out = opdef(sv, vv, sorter=so, **a)
    return _wrap(out, level)


def _bucketize(opdef, level, args, kwargs):
    a = dict(zip(opdef.params, args), **kwargs)
    x, b = a.pop("input"), a.pop("boundaries")
    if _level_of(b) != level:
        return _wrap(opdef(x._value, b, **a), level)
    return _searchsorted(get("searchsorted"), level, (b, x), a)


RULES = {"gather": _along(0, 2), "take_along_dim": _along(0, 1), "scatter": _along(0, 2, 3),
         "scatter_add": _along(0, 2, 3), "scatter_reduce": _along(0, 2, 3),
         "slice_inverse": _slice_inverse, "index_put": _index_put, "put": _put, "take": _take,
         "masked_scatter": _masked_scatter, "masked_select": _masked_select, "isin": _isin,
         "searchsorted": _searchsorted, "bucketize": _bucketize,
         **dict.fromkeys(("index_select", "index_add", "index_copy", "index_fill",
                          "index_reduce"), _index_op)}
