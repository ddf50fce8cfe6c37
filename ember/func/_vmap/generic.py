"""The batching rules derived from the op: pointwise ops broadcast against the batch dim, ops
with dim options shift them past it, ops on trailing dims run on the batch as it is; an op
without a rule loops over the batch, with torch's performance warning."""
import numbers
import warnings

import ember

from ..._tensor import Tensor
from .batched import (_level_of, _map_out, _map_tensors, _pad, _size, _stack_rows, _wrap,
                      _zip_tensors)


_DIMS = ("dim", "dim0", "dim1", "dim2", "start_dim", "end_dim", "source", "destination")
_DIMS_OPS = ("flip", "roll", "rot90")      # ops whose ``dims`` are dims (tile's are counts)
_REDUCE = ("median", "nanmedian", "quantile", "nanquantile")      # reductions, untagged


def _pointwise(opdef, level, args, kwargs):
    rank = max(a.dim() for a in (*args, *kwargs.values()) if isinstance(a, Tensor))
    args = [_pad(a, level, rank) for a in args]
    kwargs = {k: _pad(v, level, rank) for k, v in kwargs.items()}
    return _map_out(opdef(*args, **kwargs), level)


def _shift(d, rank):
    if isinstance(d, numbers.Integral) and not isinstance(d, bool):
        return d % max(rank, 1) + 1
    if type(d) in (list, tuple) and all(isinstance(e, numbers.Integral) for e in d):
        return type(d)(e % max(rank, 1) + 1 for e in d)
    return d


def _dims(opdef, level, args, kwargs):
    """An op of one tensor (batched, first) whose dims are options: shift them, their
    defaults too, past the batch dim; ``dim=None`` (all dims) reduces the flattened example or
    names every dim."""
    x = args[0]
    if opdef.name in ("max", "min") and len(args) > 1 and isinstance(args[1], Tensor):
        return _pointwise(opdef, level, args, kwargs)           # max(input, other)
    if "unbiased" in opdef.params and len(args) == 2 and isinstance(args[1], bool):
        args, kwargs = args[:1], dict(kwargs, unbiased=args[1])     # var(input, unbiased)
    if _level_of(x) != level or any(isinstance(a, Tensor) or type(a) in (list, tuple) and
                                    any(isinstance(b, Tensor) for b in a)
                                    for a in (*args[1:], *kwargs.values())):
        return _loop(opdef, level, args, kwargs)
    if x.numel() == 0:
        return _empty(opdef, level, args, kwargs)
    rank, v, args, kwargs = x.dim(), x._value, list(args), dict(kwargs)

    def get_(name):
        i = opdef.params.index(name)
        return args[i] if i < len(args) else kwargs.get(name, opdef.defaults.get(name))

    def set_(name, value):
        i = opdef.params.index(name)
        if i < len(args):
            args[i] = value
        else:
            kwargs[name] = value
    names = [n for n in (*_DIMS, *(("dims",) if opdef.name in _DIMS_OPS else ()))
             if n in opdef.params]
    if rank == 0 and any(get_(n) not in (None, ()) for n in names):
        # a 0-d example as a 1-element 1-d one (dims 0 and -1 are its dim), each result
        # then shaped as the op's on a 0-d example (the meta device checks the dims too)
        shaped = opdef(ember.empty((), dtype=x.dtype, device="meta"), *args[1:], **kwargs)
        out = _dims(opdef, level, (_wrap(v.unsqueeze(1), level), *args[1:]), kwargs)
        return _zip_tensors(out, shaped, lambda o, m: _wrap(o._value.reshape(
            v.shape[0], *m.shape), level))
    for name in names:
        d = get_(name)
        if d is None or d == ():
            if name != "dim" or name not in opdef.defaults:
                return _loop(opdef, level, args, kwargs)
            if "reduction" in opdef.tags or opdef.name in _REDUCE:
                set_("dim", 1)
                v = v.reshape(v.shape[0], -1)
                out = opdef(v, *args[1:], **kwargs)
                if isinstance(out, tuple) and opdef.name in ("max", "min", "median", "nanmedian"):
                    out = out[0]
                if get_("keepdim") if "keepdim" in opdef.params else False:
                    out = _map_tensors(out, lambda o: o.reshape(o.shape[0], *(1,) * rank))
                return _map_out(out, level)
            if not opdef.name.startswith("fft_"):
                return _loop(opdef, level, args, kwargs)
            n = ("s" in opdef.params and len(get_("s") or ())) or rank
            set_("dim", tuple(range(rank - n + 1, rank + 1)))
        else:
            set_(name, _shift(d, rank))
    return _map_out(opdef(v, *args[1:], **kwargs), level)


def _empty(opdef, level, args, kwargs):
    """A batched empty input (the first operand, no other batched): every example's result
    is the first one's, which the data cannot change."""
    out = opdef(args[0]._value[0], *args[1:], **kwargs)
    return _map_out(_map_tensors(out, lambda o: o.expand(_size(level), *o.shape).contiguous()),
                    level)


def _trailing(pos):
    """Ops that work on trailing dims and treat any leading ones as batch (layer_norm,
    the linalg ops): the value as it is, where only argument ``pos`` is batched."""
    def rule(opdef, level, args, kwargs):
        if any(_level_of(a) == level for i, a in enumerate((*args, *kwargs.values()))
               if i != pos) or _level_of(args[pos]) != level:
            return _loop(opdef, level, args, kwargs)
        args = list(args)
        args[pos] = args[pos]._value
        return _map_out(_empty_batched(opdef(*args, **kwargs), _size(level)), level)
    return rule


def _empty_batched(out, n):
    """An empty 1-D result (lstsq's residuals, qr's Q of mode 'r') that has no batch dim,
    given it."""
    return _map_tensors(out, lambda o: o.reshape(n, 0) if o.dim() == 1 and o.shape[0] == 0 else o)


def _decomposed(fn):
    """A rule that is the op written in other ops (each batched by its own rule)."""
    return lambda opdef, level, args, kwargs: fn(*args, **kwargs)


LOOPED = set()      # the ops that fell back to the loop so far (the tests report them)


def _loop(opdef, level, args, kwargs):
    """The fallback: the op once per example, the results stacked."""
    warnings.warn(f"There is a performance drop because we have not yet implemented the "
                  f"batching rule for {opdef.name}. Please file us an issue on GitHub so "
                  f"that we can prioritize its implementation.", UserWarning, stacklevel=4)
    LOOPED.add(opdef.name)

    def pick(a, i):
        if _level_of(a) == level:
            return a._value[i]
        return type(a)(pick(b, i) for b in a) if type(a) in (list, tuple) else a
    rows = [opdef(*[pick(a, i) for a in args], **{k: pick(v, i) for k, v in kwargs.items()})
            for i in range(_size(level))]
    return _map_out(_stack_rows(rows), level)


RULES = {"where": lambda opdef, level, args, kwargs: (_loop if len(args) == 1 else _pointwise)(
    opdef, level, args, kwargs)}
