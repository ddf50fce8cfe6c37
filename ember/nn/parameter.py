"""``Parameter``: a Tensor that a Module registers as one of its learnable weights."""
from .._tensor import Tensor


class Parameter(Tensor):
    """A Tensor that is a module parameter: assigning it to a Module attribute registers it.

    Args:
        data (Tensor): the initial value (shared, not copied). Default: an empty tensor.
        requires_grad (bool): default True.

    Example:
        >>> import ember
        >>> p = ember.nn.Parameter(ember.ones(2))
        >>> p
        Parameter containing:
        tensor([1., 1.], requires_grad=True)
    """

    _is_param = True

    def __new__(cls, data=None, requires_grad=True):
        return object.__new__(cls)

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            from .._ops.creation import empty
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): data must be a Tensor, got {type(data).__name__}")
        self._data, self.dtype, self._storage = data._data, data.dtype, data._get_storage()
        if data.device.type != "cpu":
            self.device = data.device
        self.requires_grad = requires_grad

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol):
        return (Parameter, (self.detach(), self.requires_grad))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        p = Parameter(self.detach().clone(), self.requires_grad)
        if self.grad is not None:
            p.grad = self.grad.clone()
        memo[id(self)] = p
        return p


class Buffer(Tensor):
    """Marks a tensor to be registered as a buffer when assigned to a Module attribute."""

    def __new__(cls, data=None, *, persistent=True):
        from .._ops.creation import empty
        t = data if data is not None else empty(0)
        t._buffer_persistent = persistent
        return t
