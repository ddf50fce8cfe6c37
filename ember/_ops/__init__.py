"""Op families, and the code that turns the registry into ``ember.<op>`` functions and
``Tensor.<op>`` methods (including in-place ``<op>_`` variants and Python operators)."""
import warnings

from . import (creation, indexing, joining, linalg, pointwise, pointwise_binary,  # noqa: F401
               moments, pointwise_logic, random, reduction, shape)
# (aliased: the name ``dispatch`` stays the submodule, which `from . import dispatch` expects)
from .dispatch import dispatch as _dispatch
from .dispatch import dispatch_inplace as _dispatch_inplace
from .registry import loaded_ops

# NOTE: torch computes log(0) = -inf, 0/0 = nan silently; NumPy warns. Silence the warnings that
# NumPy raises inside ember's code only (an errstate per call would cost about a small op); the C
# path calls its ufuncs under an errstate set in C (_dispatch.c's call_ufunc).
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"ember(\.|$)")


def _function(opdef, name):
    """``ember.<name>`` for ``opdef``; ``Tensor.<name>`` is the same function (made once: the
    ~450 functions are a noticeable part of ``import ember``)."""
    f = _made.get((opdef, name))
    if f is not None:
        return f
    if opdef.returns is not None:
        def f(*args, **kwargs):
            r = _dispatch(opdef, args, kwargs)
            # (tuple.__new__: the named tuple's own __new__ is a Python frame around it)
            return tuple.__new__(opdef.return_type, r) if type(r) is tuple else r
    else:
        def f(*args, **kwargs):
            return _dispatch(opdef, args, kwargs)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = opdef.__doc__
    f.opdef = opdef
    _made[opdef, name] = f
    return f


_made = {}


def _inplace(opdef):
    def f(self, *args, **kwargs):
        return _dispatch_inplace(opdef, self, args, kwargs)
    f.__name__ = opdef.name + "_"
    f.__doc__ = f"In-place version of :meth:`Tensor.{opdef.name}`."
    return f


def public_functions(ops=None):
    """``{name: function}`` for every op (default: those loaded) exposed as ``ember.<name>``."""
    out = {}
    for d in loaded_ops() if ops is None else ops:
        if d.function:
            for n in (d.name,) + tuple(d.aliases):
                out[n] = _function(d, n)
    return out


def install_methods(Tensor, ops=None, over=()):
    """Attach the ops (default: those loaded) to ``Tensor`` as methods, replacing the
    attributes named in ``over`` (lazy.py's stubs) and leaving others be."""
    # what hasattr(Tensor, n) would find, read once: a failing hasattr on a class costs as much
    # as making the method (it formats an AttributeError)
    have = set(dir(type(Tensor)))
    for klass in Tensor.__mro__:
        have.update(klass.__dict__)
    have.difference_update(over)
    for d in loaded_ops() if ops is None else ops:
        names = (d.name,) + tuple(d.aliases)
        for n in names:
            if d.method and n not in have:
                setattr(Tensor, n, _function(d, n))
                have.add(n)
            if d.inplace and n + "_" not in have:
                setattr(Tensor, n + "_", _inplace(d))
                have.add(n + "_")


# after the helpers above, which lazy.py uses
from . import lazy  # noqa: E402,F401  (the families that load on first use)
