"""Batching rules of the shape, view and joining ops: the batch dim prepended to the shape,
or the dims shifted past it."""
import ember

from ..._ops.registry import get
from ..._tensor import Tensor
from .batched import _level_of, _lifted, _size, _wrap, lift_one
from .generic import _decomposed, _dims, _loop, _shift, _trailing


def _joined(opdef, level, args, kwargs):
    """cat/stack: every tensor batched (expanded where not), the dim shifted."""
    n = _size(level)
    ts = [lift_one(t, level, n) for t in args[0]]
    rank = args[0][0].dim() + (opdef.name == "stack")
    call = dict(zip(opdef.params[1:], args[1:]), **kwargs)
    call["dim"] = call.get("dim", 0) % max(rank, 1) + 1
    return _wrap(opdef(ts, **call), level)


def _shape(opdef, level, args, kwargs):
    """reshape/view/expand/broadcast_to: the batch dim prepended to the new shape."""
    x, shape = args[0], args[1:]
    if _level_of(x) != level or any(_level_of(a) == level for a in shape):
        return _loop(opdef, level, args, kwargs)
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = shape[0]
    v = x._value
    if opdef.name in ("expand", "broadcast_to"):
        shape = (*(-1 if s == -1 else s for s in shape[:len(shape) - x.dim()]), *shape[
            len(shape) - x.dim():])
        v = v.reshape(v.shape[0], *(1,) * (len(shape) - x.dim()), *v.shape[1:])
    return _wrap(opdef(v, (v.shape[0], *shape), **kwargs), level)


def _permute(opdef, level, args, kwargs):
    x, dims = args[0], args[1:]
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    return _wrap(opdef(x._value, (0, *_shift(tuple(dims), x.dim()))), level)


def _squeeze(opdef, level, args, kwargs):
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if dim is None:
        dim = tuple(i for i, s in enumerate(x.shape) if s == 1)
    return _wrap(opdef(x._value, _shift(dim, x.dim())), level)


def _unsqueeze(opdef, level, args, kwargs):
    x, d = args[0], args[1] if len(args) > 1 else kwargs["dim"]
    return _wrap(opdef(x._value, d % (x.dim() + 1) + 1), level)


def _t(opdef, level, args, kwargs):
    x = args[0]
    return x if x.dim() < 2 else _wrap(x._value.transpose(1, 2), level)


def _getitem(opdef, level, args, kwargs):
    """Basic indexing (ints, slices, None, Ellipsis): a full slice for the batch dim first."""
    x, idx = args
    idx = idx if isinstance(idx, tuple) else (idx,)
    if _level_of(x) != level or not all(i is None or i is Ellipsis or type(i) in (int, slice)
                                        for i in idx):
        return _loop(opdef, level, args, kwargs)
    return _wrap(x._value[(slice(None), *idx)], level)


def _repeat(opdef, level, args, kwargs):
    x, reps = args[0], args[1:]
    reps = tuple(reps[0] if len(reps) == 1 and isinstance(reps[0], (list, tuple)) else reps)
    if opdef.name == "tile":
        reps = (1,) * (x.dim() - len(reps)) + reps
    v = x._value
    v = v.reshape(v.shape[0], *(1,) * (len(reps) - x.dim()), *v.shape[1:])
    return _wrap(get("repeat")(v, 1, *reps), level)


def _view(opdef, level, args, kwargs):
    # NOTE: where the batch dim's stride keeps a view from being one, this copies (reshape)
    try:
        return _shape(opdef, level, args, kwargs)
    except RuntimeError:
        return _shape(get("reshape"), level, args, kwargs)


def _at_least(t, n):
    if t.dim() >= n:
        return t
    if n == 3:
        return t.reshape(1, -1, 1) if t.dim() < 2 else t.unsqueeze(-1)
    return t.reshape(*(1,) * (n - t.dim()), *t.shape)


def _sections(dim_of):
    """hsplit/vsplit/dsplit: tensor_split along their dim, once the op has checked its
    arguments on an empty example (the errors are its own)."""
    def rule(opdef, level, args, kwargs):
        x, sections = args
        opdef(ember.empty(tuple(x.shape), dtype=x.dtype, device="meta"), sections)
        return ember.tensor_split(x, sections, dim_of(x))
    return rule


def _roll(opdef, level, args, kwargs):
    a = dict(opdef.defaults, **dict(zip(opdef.params, args)), **kwargs)
    if a["dims"] not in (None, ()):
        return _dims(opdef, level, args, kwargs)
    v = a["input"]._value
    return _wrap(v.reshape(v.shape[0], -1).roll(a["shifts"], 1).reshape(v.shape), level)


def _repeat_interleave(opdef, level, args, kwargs):
    a = dict(opdef.defaults, **dict(zip(opdef.params, args)), **kwargs)
    x, reps, d = a["input"], a["repeats"], a["dim"]
    if _level_of(reps) == level or not isinstance(x, Tensor) or _level_of(x) != level:
        return _loop(opdef, level, args, kwargs)
    v = x._value
    if d is None:
        v, d = v.reshape(v.shape[0], -1), 0
    return _wrap(opdef(v, reps, d % max(x.dim(), 1) + 1, output_size=None if a[
        "output_size"] is None else a["output_size"]), level)


def _diag_embed(opdef, level, args, kwargs):
    a = dict(opdef.defaults, **dict(zip(opdef.params, args)), **kwargs)
    r = a["input"].dim() + 1
    return _wrap(opdef(a["input"]._value, a["offset"], a["dim1"] % r + 1, a["dim2"] % r + 1), level)


def _embedded(opdef, level, args, kwargs):
    """getitem's and diagonal's backward (``g`` written into zeros of the input's shape): the
    batch dim prepended to the shape, a full slice to a basic index or to advanced ones next
    to each other (whose dims stay in place), the diagonal's dims shifted."""
    g, shape, rest = args[0], tuple(args[1]), list(args[2:])
    if any(_level_of(a) for a in (*args[1:], *kwargs.values())) or _level_of(g) != level:
        return _loop(opdef, level, args, kwargs)
    if opdef.name == "_diag_embed_like":
        rest[1:] = [d % len(shape) + 1 for d in rest[1:]]
    else:
        idx = rest[0] if isinstance(rest[0], tuple) else (rest[0],)
        adv = [i for i, x in enumerate(idx) if not (x is None or x is Ellipsis or
                                                     type(x) in (int, slice))]
        adv = adv and [i for i, x in enumerate(idx) if i in adv or type(x) is int]
        if adv and adv[-1] - adv[0] != len(adv) - 1 or any(_level_of(x) for x in idx):
            return _loop(opdef, level, args, kwargs)
        rest[0] = (slice(None), *idx)
    return _wrap(opdef(g._value, (_size(level), *shape), *rest, **kwargs), level)


def _diff(opdef, level, args, kwargs):
    """prepend and append (as many dims as the input) batched too, the dim shifted."""
    a = dict(opdef.defaults, **dict(zip(opdef.params, args)), **kwargs)
    x = a.pop("input")
    if x.dim() == 0:
        return _loop(opdef, level, args, kwargs)
    xv, pv, av = _lifted(level, x, a.pop("prepend"), a.pop("append"))
    return _wrap(opdef(xv, a["n"], a["dim"] % x.dim() + 1, pv, av), level)


def _tensor_split(opdef, level, args, kwargs):
    """A tensor of sections or indices that is not batched read as its numbers; a batched one
    loops (each example's pieces their own sizes)."""
    a = dict(opdef.defaults, **dict(zip(opdef.params, args)), **kwargs)
    s = a["indices_or_sections"]
    if isinstance(s, Tensor) and _level_of(s) != level:
        s = s.tolist()
    return _dims(opdef, level, (a["input"], s, a["dim"]), {})


def _unfold(opdef, level, args, kwargs):
    x, d, size, step = args
    if x.dim() == 0:        # (each example's one window: (B,) -> (B, 1))
        return _wrap(opdef(x._value.unsqueeze(-1), 1, size, step).squeeze(1), level)
    return _wrap(opdef(x._value, d % x.dim() + 1, size, step), level)


RULES = {"cat": _joined, "stack": _joined, "reshape": _shape, "expand": _shape,
         "broadcast_to": _shape, "permute": _permute, "squeeze": _squeeze,
         "unsqueeze": _unsqueeze, "t": _t, "getitem": _getitem, "repeat": _repeat,
         "tile": _repeat, "view": _view,
         "fliplr": _decomposed(lambda x: x.flip(1)),
         "flipud": _decomposed(lambda x: x.flip(0)),
         "hstack": _decomposed(lambda ts: ember.cat(
             [_at_least(t, 1) for t in ts], 0 if _at_least(ts[0], 1).dim() == 1 else 1)),
         "vstack": _decomposed(lambda ts: ember.cat([_at_least(t, 2) for t in ts], 0)),
         "dstack": _decomposed(lambda ts: ember.cat([_at_least(t, 3) for t in ts], 2)),
         "column_stack": _decomposed(lambda ts: ember.cat(
             [t.reshape(-1, 1) if t.dim() < 2 else t for t in ts], 1)),
         "roll": _roll, "repeat_interleave": _repeat_interleave, "diag_embed": _diag_embed,
         "diff": _diff, "tensor_split": _tensor_split, "unfold": _unfold,
         "_index_embed": _embedded, "_diag_embed_like": _embedded,
         "diag": _decomposed(lambda x, diagonal=0: x.diagonal(diagonal) if x.dim() == 2 else
                             ember.diag_embed(x, diagonal)),
         "diagflat": _decomposed(lambda x, offset=0: ember.diag_embed(x.reshape(-1), offset)),
         "hsplit": _sections(lambda x: 1 if x.dim() > 1 else 0),
         "vsplit": _sections(lambda x: 0), "dsplit": _sections(lambda x: 2),
         "view_as_complex": lambda opdef, level, args, kwargs: _wrap(
             opdef(args[0]._value.contiguous()), level),
         **dict.fromkeys(("tril", "triu", "constant_pad_nd", "view_as_real"), _trailing(0))}
