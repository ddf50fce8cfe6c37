"""``torch.autograd.forward_ad``: forward-mode AD with dual tensors.

While a dual level is open, dispatch's transform hook sees every op; an op with an operand that
carries a tangent computes its primal as usual and then the tangent of its output(s) by the
OpDef's own jvp rule (``opdef.jvp``, set beside its vjp in ember/_ops; see _ops/tangents.py).
Tangents are computed in ember ops, with autograd recording them where it records, so reverse
over forward works.
"""
import collections
import contextlib

import ember

from .. import _dtype
from .._ops import dispatch as _dispatch
from .._tensor import Tensor

_LEVEL = [-1]               # the open dual level (torch supports one at a time), else -1
_BUSY = [False]             # computing a tangent: its ops are not dual at this level
# Dispatch's transform hook is shared with ember.func.vmap (which sets BATCHED to its
# batching step while a vmap runs), so the two compose in either order: batched calls go to
# their batching rule, whose ops come back through the hook on the physical tensors, where
# tangents live.
BATCHED = BATCHED_INPLACE = None
_USERS = [0]        # how many (dual levels, vmap levels) hold the hook


def install():
    if not _USERS[0]:
        _dispatch.hooks.transform = _hook
    _USERS[0] += 1


def uninstall():
    _USERS[0] -= 1
    if not _USERS[0]:
        _dispatch.hooks.transform = None


class UnpackedDualTensor(collections.namedtuple("UnpackedDualTensor", ["primal", "tangent"])):
    """``unpack_dual``'s result: the primal and its tangent (None where it has none).

    Example:
        >>> import ember
        >>> import ember.autograd.forward_ad as fwAD
        >>> with fwAD.dual_level():
        ...     fwAD.unpack_dual(ember.ones(2)).tangent is None
        True
    """


def enter_dual_level():
    """Open a dual level (one at a time, as torch) and return its number.

    Example:
        >>> import ember.autograd.forward_ad as fwAD
        >>> level = fwAD.enter_dual_level()
        >>> fwAD.exit_dual_level(level=level)
    """
    if _LEVEL[0] >= 0:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _LEVEL[0] = 0
    install()
    return 0


def exit_dual_level(*, level=None):
    """Close the dual level: tangents made in it are dropped.

    Example:
        >>> import ember.autograd.forward_ad as fwAD
        >>> fwAD.exit_dual_level(level=fwAD.enter_dual_level())
    """
    level = _LEVEL[0] if level is None else level
    if level != _LEVEL[0] or level < 0:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that "
                           "was created. This is not supported.")
    _LEVEL[0] = -1
    uninstall()


class dual_level(contextlib.ContextDecorator):
    """Context manager for a dual level: tensors made dual inside carry tangents until it
    exits.

    Example:
        >>> import ember
        >>> import ember.autograd.forward_ad as fwAD
        >>> with fwAD.dual_level():
        ...     x = fwAD.make_dual(ember.tensor([1.0, 2.0]), ember.tensor([1.0, 0.0]))
        ...     fwAD.unpack_dual(x.sin() * x).tangent
        tensor([1.3818, 0.0000])
    """

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()


def make_dual(tensor, tangent, *, level=None):
    """A view of ``tensor`` that carries ``tangent`` (same shape) at the open dual level.

    Example:
        >>> import ember
        >>> import ember.autograd.forward_ad as fwAD
        >>> with fwAD.dual_level():
        ...     y = fwAD.make_dual(ember.tensor(2.0), ember.tensor(1.0)) ** 3
        ...     fwAD.unpack_dual(y).tangent
        tensor(12.)
    """
    level = _LEVEL[0] if level is None else level
    if level < 0 or level != _LEVEL[0]:
        raise RuntimeError("To create a dual Tensor, you need to be inside a dual_level "
                           "context (with fwAD.dual_level(): ...)")
    if not (tensor.dtype.category >= _dtype._FLOAT and tangent.dtype.category >= _dtype._FLOAT):
        raise ValueError(f"Expected primal to be floating point or complex, but got: "
                         f"{tensor.dtype if tensor.dtype.category < _dtype._FLOAT else ''}"
                         f"{tangent.dtype if tangent.dtype.category < _dtype._FLOAT else ''}")
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError(f"Trying to set a forward gradient that has a different size than "
                           f"that of the original Tensor, this is not supported. Tensor is of "
                           f"size {tuple(tensor.shape)} while the given forward gradient is "
                           f"of size {tuple(tangent.shape)}.")
    _BUSY[0] = True
    try:
        out = tensor.view_as(tensor)
    finally:
        _BUSY[0] = False
    out._fw = (level, tangent)
    return out


def unpack_dual(tensor, *, level=None):
    """``(primal, tangent)`` of ``tensor`` at the dual level (tangent None where none).

    Example:
        >>> import ember
        >>> import ember.autograd.forward_ad as fwAD
        >>> with fwAD.dual_level():
        ...     p, t = fwAD.unpack_dual(fwAD.make_dual(ember.ones(1), ember.zeros(1)))
        >>> p, t
        (tensor([1.]), tensor([0.]))
    """
    t = _tangent(tensor)
    if t is None:
        return UnpackedDualTensor(tensor, None)
    _BUSY[0] = True
    try:
        primal = tensor.view_as(tensor)
    finally:
        _BUSY[0] = False
    return UnpackedDualTensor(primal, t)


def _tangent(t):
    fw = getattr(t, "_fw", None) if isinstance(t, Tensor) else None
    return fw[1] if fw is not None and fw[0] == _LEVEL[0] >= 0 else None


# ---- the dispatch hook -------------------------------------------------------------------

def _tangents(args, kwargs):
    """{position or name: tangent} of the dual operands (lists of tensors: a list)."""
    found = {}
    for k, a in (*enumerate(args), *kwargs.items()):
        if type(a) in (list, tuple) and a and isinstance(a[0], Tensor):
            ts = [_tangent(b) for b in a]
            if any(t is not None for t in ts):
                found[k] = ts
        else:
            t = _tangent(a)
            if t is not None:
                found[k] = t
    return found


class _Hook:
    def __call__(self, opdef, args, kwargs, run):
        if BATCHED is not None:
            out = BATCHED(opdef, args, kwargs)
            if out is not NotImplemented:
                return out
        if _BUSY[0] or _LEVEL[0] < 0:
            # nothing dual (the physical ops of vmap's rules): the plain dispatch, its C fast
            # path included; nothing it runs has a batched operand
            hooks = _dispatch.hooks
            hooks.transform = None
            try:
                return _dispatch.dispatch(opdef, args, kwargs)
            finally:
                hooks.transform = self
        tangents = _tangents(args, kwargs)
        out = run(opdef, args, kwargs)
        if tangents and opdef.differentiable:
            _BUSY[0] = True
            try:
                jv = jvp_of(opdef, args, kwargs, tangents, out)
            finally:
                _BUSY[0] = False
            outs = out if isinstance(out, (tuple, list)) else (out,)
            jvs = jv if isinstance(out, (tuple, list)) else (jv,)
            for i, (o, t) in enumerate(zip(outs, jvs)):
                if t is not None and isinstance(o, Tensor) and i not in opdef.nondiff_outputs \
                        and o.dtype.category >= _dtype._FLOAT:
                    o._fw = (_LEVEL[0], t)
                    _saved_result(o, opdef, i)
        return out

    def inplace(self, opdef, target, args, kwargs, self_at):
        """``target.<op>_(*args)``: a batched one to vmap (BATCHED_INPLACE); with dual operands,
        the write as usual (re-entering with the hook quiet), then the tangent of the result."""
        if BATCHED is not None:
            out = BATCHED_INPLACE(opdef, target, args, kwargs, self_at)
            if out is not NotImplemented:
                return out
        if _BUSY[0] or _LEVEL[0] < 0:
            return NotImplemented
        full = (*args[:self_at], target, *args[self_at:])
        tangents = _tangents(full, kwargs)
        if not tangents:
            return NotImplemented
        _BUSY[0] = True
        try:
            jv = jvp_of(opdef, full, kwargs, tangents, opdef(*full, **kwargs))
            _dispatch.dispatch_inplace(opdef, target, args, kwargs, self_at)
        finally:
            _BUSY[0] = False
        target._fw = (_LEVEL[0], jv)
        return target


_hook = _Hook()


def _saved_result(o, opdef, i):
    """The alias of ``o`` its graph node saved for the backward (exp's vjp reads its result)
    gets the tangent too, so reverse over forward sees it."""
    node = o.grad_fn
    if opdef.save_result and getattr(node, "opdef", None) is opdef and node.results:
        r = node.results[i][0]
        if isinstance(r, Tensor):
            r._fw = o._fw


def function_jvp(cls, ctx, args, out):
    """A custom ``autograd.Function`` with dual inputs: ``cls.jvp(ctx, *tangents)`` (zeros
    for tensor inputs without one) gives its outputs' tangents."""
    ts = [_tangent(a) for a in args]
    if all(t is None for t in ts):
        return
    ts = [ember.zeros_like(a) if t is None and isinstance(a, Tensor) else t
          for a, t in zip(args, ts)]
    _BUSY[0] = True
    try:
        with ember.enable_grad() if ember.is_grad_enabled() else contextlib.nullcontext():
            jv = cls.jvp(ctx, *ts)
    finally:
        _BUSY[0] = False
    outs = out if isinstance(out, tuple) else (out,)
    jvs = jv if isinstance(jv, tuple) else (jv,)
    for o, t in zip(outs, jvs):
        if t is not None and isinstance(o, Tensor):
            o._fw = (_LEVEL[0], t)


def jvp_of(opdef, args, kwargs, tangents, out):
    """The tangent(s) of ``opdef(*args, **kwargs) == out`` given the operands' tangents
    (``{position or name: tangent}``)."""
    return opdef.jvp(opdef, args, kwargs, tangents, out)


__all__ = ["UnpackedDualTensor", "dual_level", "enter_dual_level", "exit_dual_level",
           "make_dual", "unpack_dual"]
