"""``ember.func``: function transforms over modules, as ``torch.func`` (so far
``functional_call``)."""
from collections.abc import Sequence

from ..nn.utils.stateless import _functional_call


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """Run ``module(*args, **kwargs)`` with its parameters and buffers replaced, for this call
    only, by the tensors in ``parameter_and_buffer_dicts`` (a dict, or a sequence of dicts
    with distinct keys), keyed by dotted name. See
    https://pytorch.org/docs/stable/generated/torch.func.functional_call.html

    Args:
        tie_weights (bool): a value given for one of several tied names is used for all of
            them. Default: True.
        strict (bool): the dicts must name every parameter and buffer, and nothing else.
            Default: False.

    Example:
        >>> import ember
        >>> lin = ember.nn.Linear(2, 1)
        >>> params = {"weight": ember.tensor([[1.0, 2.0]]), "bias": ember.tensor([0.5])}
        >>> ember.func.functional_call(lin, params, (ember.tensor([[1.0, 1.0]]),))
        tensor([[3.5000]])
    """
    if isinstance(parameter_and_buffer_dicts, dict):
        values = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be "
                             "dictionaries")
        keys = [k for d in parameter_and_buffer_dicts for k in d]
        repeated = list(dict.fromkeys(k for k in keys if keys.count(k) > 1))
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of "
                             "functional call is ambiguous")
        values = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError("Expected parameter_and_buffer_dicts to be a dict, or a list/tuple "
                         f"of dicts, but got {type(parameter_and_buffer_dicts)}")
    return _functional_call(module, values, args, kwargs, tie_weights=tie_weights,
                            strict=strict)


__all__ = ["functional_call"]
