"""``parameters_to_vector`` / ``vector_to_parameters``: flatten parameters into one vector and
back, as in ``torch.nn.utils``."""
import ember

from ..._tensor import Tensor


def _check_one_device(parameters):
    devices = {p.device for p in parameters}
    if len(devices) > 1:
        raise TypeError("Found two parameters on different devices, this is currently not "
                        "supported.")


def parameters_to_vector(parameters):
    """One 1-D tensor holding every parameter, flattened, in order.

    Example:
        >>> import ember
        >>> lin = ember.nn.Linear(3, 2)
        >>> ember.nn.utils.parameters_to_vector(lin.parameters()).shape
        torch.Size([8])
    """
    parameters = list(parameters)
    _check_one_device(parameters)
    return ember.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copy slices of the 1-D ``vec`` into ``parameters`` (each becomes a view of ``vec``).

    Example:
        >>> import ember
        >>> lin = ember.nn.Linear(3, 2)
        >>> ember.nn.utils.vector_to_parameters(ember.arange(8.0), lin.parameters())
        >>> lin.bias
        Parameter containing:
        tensor([6., 7.], requires_grad=True)
    """
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    parameters = list(parameters)
    _check_one_device(parameters)
    start = 0
    for p in parameters:
        n = p.numel()
        p.data = vec[start:start + n].view_as(p).data
        start += n
