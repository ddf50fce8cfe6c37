"""Random functions called inside vmap, as torch's ``randomness`` option says."""
import ember

from ..._ops import random as _random
from ..._size import Size
from ..._tensor import Tensor
from .batched import (_STACK, BatchedTensor, _level_of, _map_out, _size, _stack_rows, _wrap,
                      lift, lower)


def random_call(kind, f, args, kwargs):
    """A random function called inside vmap (``_ops/random.py``'s hook), as torch's
    ``randomness``: 'error' refuses; 'same' draws one example's numbers for every example;
    'different' draws the whole batch's at once, the batch dims of the levels that ask for it
    leading."""
    modes = [m for _, _, m in _STACK]
    if "error" in modes:
        raise RuntimeError("vmap: called random operation while in randomness error mode. "
                           "Please either use the 'same' or 'different' randomness flags on "
                           "vmap or perform the randomness operation out of vmap")
    if kind == "draw":
        return None
    _random.vmap_random = None          # the draws themselves are plain
    try:
        return _RANDOM[kind](f, args, kwargs, [(lv, n) for lv, n, m in _STACK if m == "different"])
    finally:
        _random.vmap_random = random_call


def _batched_levels(p, diff):
    for lv, _ in diff:
        p = _wrap(p, lv)
    return p


def _sized(f, args, kwargs, diff, where):
    """A factory: the batch sizes prepended to its size (``where``: in ``args`` as all of
    them, in its last one, or in ``size=``)."""
    if not diff:
        return f(*args, **kwargs)
    pre = tuple(n for _, n in diff)
    if "size" in kwargs:
        kwargs = dict(kwargs, size=pre + tuple(kwargs["size"]))
    elif where == "all":
        args = (pre + tuple(args[0] if len(args) == 1 and isinstance(args[0], (
            tuple, list, Size)) else args),)
    else:
        args = (*args[:-1], pre + tuple(args[-1]))
    return _batched_levels(f(*args, **kwargs), diff)


def _drawn_like(f, args, kwargs, diff):
    """Draws shaped as the tensor inputs (poisson, multinomial, gamma): 'different' at every
    level runs on the physical tensors; 'same' runs one example's draw for each example,
    the generator's state restored before each."""
    tensors = [a for a in (*args, *kwargs.values()) if _level_of(a)]
    if not tensors and not diff:
        return f(*args, **kwargs)
    if len(diff) == len(_STACK):
        return lower(f(*[lift(a) if isinstance(a, Tensor) else a for a in args],
                       **{k: lift(v) if isinstance(v, Tensor) else v for k, v in kwargs.items()}))
    if diff:
        raise RuntimeError("vmap: nested vmaps that mix randomness='same' and 'different' "
                           "over this random function are not supported")
    gen = kwargs.get("generator") or next((a for a in args if isinstance(
        a, _random.Generator)), None) or _random.default_generator
    state, n = gen.get_state(), _size(_STACK[-1][0])

    def pick(a, i):
        return a._value[i] if _level_of(a) == _STACK[-1][0] else a
    rows = []
    for i in range(n):
        gen.set_state(state)
        rows.append(f(*[pick(a, i) for a in args], **{k: pick(v, i) for k, v in kwargs.items()}))
    return _map_out(_stack_rows(rows), _STACK[-1][0])


def _fill(f, args, kwargs, diff):
    """An in-place fill: 'different' fills the physical tensor; 'same' fills one example's
    worth and copies it into every example."""
    t = args[0]
    if not diff:
        if not _level_of(t):
            return f(*args, **kwargs)
        one = f(ember.empty(tuple(t.shape), dtype=t.dtype, device=t.device), *args[1:], **kwargs)
        with ember.no_grad():
            _unwrapped(t)[-1]._value.copy_(one)
        return t
    if len(diff) != len(_STACK) or {v._level for v in _unwrapped(t)} != {lv for lv, _ in diff}:
        raise RuntimeError("vmap: Cannot ask for different inplace randomness on an unbatched "
                           "tensor. This will appear like same randomness. If this is "
                           "necessary for your usage, please file an issue with functorch.")
    f(lift(t), *args[1:], **kwargs)
    return t


def _unwrapped(t):
    out = []
    while isinstance(t, BatchedTensor):
        out.append(t)
        t = t._value
    return out


def _per_example(f, args, kwargs, diff):
    if not diff:
        return f(*args, **kwargs)
    n = 1
    for _, m in diff:
        n *= m
    rows = ember.stack([f(*args, **kwargs) for _ in range(n)])
    return _batched_levels(rows.reshape(*(m for _, m in diff), *rows.shape[1:]), diff)


_RANDOM = {"sizes": lambda f, a, k, d: _sized(f, a, k, d, "all"),
           "size_arg": lambda f, a, k, d: _sized(f, a, k, d, "last"),
           "tensor": _drawn_like, "fill": _fill, "loop": _per_example}
