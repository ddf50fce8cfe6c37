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


class UninitializedTensorMixin:
    """A parameter or buffer of a lazy module, without a shape until ``materialize``."""

    def materialize(self, shape, device=None, dtype=None):
        """Give the tensor ``shape`` (uninitialized values) and become ``cls_to_become``."""
        from .._ops.creation import empty
        self.data = empty(shape, device=self.device if device is None else device,
                          dtype=self.dtype if dtype is None else dtype)
        self.__class__ = self.cls_to_become

    @property
    def shape(self):
        raise RuntimeError(
            "Can't access the shape of an uninitialized parameter or buffer. This error usually "
            "happens in `load_state_dict` when trying to load an uninitialized parameter into "
            "an initialized one. Call `forward` to initialize the parameters before accessing "
            "their attributes.")

    def share_memory_(self):
        raise RuntimeError("Can't share memory on an uninitialized parameter or buffer. Call "
                           "`forward` to initialize the parameters before calling "
                           "`module.share_memory()`.")

    def __repr__(self):
        return f"<{self.__class__.__name__}>"

    def __reduce_ex__(self, proto):
        return (self.__class__, (self.requires_grad,))


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A Parameter whose shape a lazy module sets on its first forward (``materialize``);
    it then becomes a plain :class:`Parameter`.

    Example:
        >>> import ember
        >>> p = ember.nn.UninitializedParameter()
        >>> p
        <UninitializedParameter>
        >>> p.materialize((2, 3))
        >>> type(p).__name__, p.shape
        ('Parameter', torch.Size([2, 3]))
    """
    cls_to_become = Parameter

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        return object.__new__(cls)

    def __init__(self, requires_grad=True, device=None, dtype=None):
        from .._ops.creation import empty
        super().__init__(empty(0, device=device, dtype=dtype), requires_grad)

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self.device, self.dtype)
        return memo[id(self)]


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer whose shape a lazy module sets on its first forward; it then becomes a plain
    Tensor.

    Example:
        >>> import ember
        >>> b = ember.nn.UninitializedBuffer()
        >>> b.materialize(4)
        >>> type(b).__name__, b.shape
        ('Tensor', torch.Size([4]))
    """
    cls_to_become = Tensor

    def __new__(cls, requires_grad=False, device=None, dtype=None, persistent=True):
        from .._ops.creation import empty
        t = empty(0, device=device, dtype=dtype)._alias(cls)
        t.requires_grad_(requires_grad)
        t._buffer_persistent = t.persistent = persistent
        return t

    def __init__(self, *args, **kwargs):
        """(``__new__`` made the buffer; Tensor's ``__init__`` would take its arguments.)"""


def is_lazy(param):
    """Whether ``param`` is an uninitialized (lazy) parameter or buffer.

    Example:
        >>> import ember
        >>> from ember.nn.parameter import is_lazy
        >>> is_lazy(ember.nn.UninitializedParameter()), is_lazy(ember.nn.Parameter())
        (True, False)
    """
    return isinstance(param, UninitializedTensorMixin)
