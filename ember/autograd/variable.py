"""``torch.autograd.Variable``: the pre-0.4 wrapper, now any tensor.

``isinstance(x, Variable)`` is true of every tensor, and ``Variable(t, requires_grad)`` gives a
tensor sharing ``t``'s data, detached from its graph, with ``requires_grad`` set.
"""
import warnings

from .._tensor import Tensor


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """Legacy: ``Variable(data, requires_grad=False)`` is ``data.detach()`` with
    ``requires_grad`` set (``volatile`` has no effect, with torch's warning).

    Example:
        >>> v = ember.autograd.Variable(ember.ones(2), requires_grad=True)
        >>> v.requires_grad, isinstance(ember.ones(1), ember.autograd.Variable)
        (True, True)
    """

    def __new__(cls, data=None, requires_grad=False, volatile=False):
        import ember
        if volatile:
            warnings.warn("volatile was removed and now has no effect. Use `with "
                          "torch.no_grad():` instead.", UserWarning, stacklevel=2)
        if data is None:
            data = ember.empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        return data.detach().requires_grad_(requires_grad)


def variable(*args, **kwargs):
    """Removed in torch: raises, pointing to ``tensor``."""
    raise RuntimeError("torch.autograd.variable(...) is deprecated, use torch.tensor(...) instead")
