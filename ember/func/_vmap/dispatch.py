"""vmap's dispatch hook: while a vmap runs, dispatch's transform hook (shared with forward-mode
AD: autograd/forward_ad.py) sends every op with a BatchedTensor operand to its batching rule:
one written for it (the ``RULES`` of the op families' modules here), else one derived from its
tags and options (generic.py), else the loop over the batch."""
import ember

from ..._ops import random as _random
from ..._tensor import Tensor
from ...autograd import forward_ad as _fwad
from . import generic, index, linalg, nn, shape, statistics
from .batched import _STACK, _level_of, _levels, _size, _wrap
from .generic import _DIMS, _DIMS_OPS, _dims, _loop, _pointwise
from .randomness import random_call

RULES = {**generic.RULES, **shape.RULES, **linalg.RULES, **nn.RULES, **index.RULES,
         **statistics.RULES}


def _batched(opdef, args, kwargs):
    """forward_ad's shared hook calls this first: the batching rule's result for an op with a
    BatchedTensor operand, else NotImplemented."""
    level = _levels(args, kwargs)
    return _rule(opdef)(opdef, level, args, kwargs) if level else NotImplemented


def _batched_inplace(opdef, target, args, kwargs, self_at):
    """``target.<op>_(*args)`` inside vmap: the op's batched result written into the batched
    target's value (so views of it see the write, and autograd records it as usual)."""
    full = (*args[:self_at], target, *args[self_at:])
    level = _levels(full, kwargs)
    if not level:
        return NotImplemented
    if _level_of(target) != level:
        shape = ember.broadcast_shapes(*(a.shape for a in full if isinstance(a, Tensor)))
        # NOTE: torch's words, which name the batched shape
        raise RuntimeError(f"output with shape {list(target.shape)} doesn't match the "
                           f"broadcast shape {[_size(level), *shape]}")
    src = target
    if ember.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in full):
        src = _wrap(target._value.clone(), level)   # the backward reads the value before
    out = _rule(opdef)(opdef, level, (*args[:self_at], src, *args[self_at:]), kwargs)
    target._value.copy_(out._value if _level_of(out) == level else out)
    return target


def push(n, randomness):
    level = (_STACK[-1][0] if _STACK else 0) + 1
    _STACK.append([level, n, randomness])
    _fwad.BATCHED, _fwad.BATCHED_INPLACE = _batched, _batched_inplace
    _random.vmap_random = random_call
    _fwad.install()
    return level


def pop():
    _STACK.pop()
    _fwad.uninstall()
    if not _STACK:
        _fwad.BATCHED = _fwad.BATCHED_INPLACE = _random.vmap_random = None


# dims of the output (diag_embed), or results whose shape depends on the values: they loop
_NOT_DIMS = ("diag_embed", "unique", "unique_consecutive")


# pointwise in effect (operands broadcast), though not tagged so
_BROADCAST = {"clone", "contiguous", "real", "imag", "complex", "polar", "isclose", "where",
              "masked_fill", "frexp", "_to_dtype", "special_chebyshev_polynomial_t",
              "special_chebyshev_polynomial_u", "special_chebyshev_polynomial_v",
              "special_chebyshev_polynomial_w", "special_hermite_polynomial_h",
              "special_hermite_polynomial_he", "special_laguerre_polynomial_l",
              "special_legendre_polynomial_p", "special_shifted_chebyshev_polynomial_t",
              "special_shifted_chebyshev_polynomial_u", "special_shifted_chebyshev_polynomial_v",
              "special_shifted_chebyshev_polynomial_w"}
_TAGGED = {}


def _rule(opdef):
    r = RULES.get(opdef.name) or _TAGGED.get(opdef.name)
    if r is None:
        if "pointwise" in opdef.tags or "comparison" in opdef.tags or opdef.name in _BROADCAST:
            r = _pointwise
        elif (any(n in opdef.params for n in _DIMS) or opdef.name in _DIMS_OPS) and \
                opdef.name not in _NOT_DIMS:
            r = _dims
        else:
            r = _loop
        _TAGGED[opdef.name] = r
    return r
