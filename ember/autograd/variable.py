"""``ember.autograd.Variable``: the pre-0.4 wrapper, which torch keeps as a function-like class
returning a tensor (every tensor is an instance of it)."""
import warnings

from .._tensor import Tensor


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """``Variable(data, requires_grad=False)``: a new leaf tensor sharing ``data``'s memory,
    with ``requires_grad`` as given (``volatile`` has no effect), as torch's legacy class;
    ``isinstance(t, Variable)`` holds for every tensor.

    Example:
        >>> import ember
        >>> from ember.autograd import Variable
        >>> x = Variable(ember.ones(2), requires_grad=True)
        >>> (x * 3).sum().backward()
        >>> x.grad, isinstance(x, Variable)
        (tensor([3., 3.]), True)
    """

    def __new__(cls, data=None, requires_grad=False, volatile=False):
        if volatile:
            warnings.warn("volatile was removed and now has no effect. Use `with torch.no_grad():`"
                          " instead.", UserWarning, stacklevel=2)
        if data is None:
            from .._ops.creation import empty
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        return data.detach().requires_grad_(requires_grad)
