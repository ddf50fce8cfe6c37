"""Gradient clipping: ``clip_grad_norm_``, ``clip_grad_value_``, ``get_total_norm`` and
``clip_grads_with_norm_``, as in ``torch.nn.utils``."""
import ember

from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad


def _as_list(tensors):
    # A generator would be spent by the first pass, and the clip functions walk it twice.
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _grads(parameters):
    return [p.grad for p in _as_list(parameters) if p.grad is not None]


@no_grad()
def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of all ``tensors`` taken together, as if concatenated.

    Args:
        tensors (Tensor or iterable of Tensors): usually gradients.
        norm_type (float): order of the norm; ``inf`` gives the largest magnitude. Default: 2.
        error_if_nonfinite (bool): raise if the norm is nan or inf. Default: False.
        foreach (bool): accepted for torch compatibility; ember has one code path.

    Example:
        >>> import ember
        >>> ember.nn.utils.get_total_norm([ember.tensor([3.0]), ember.tensor([4.0])])
        tensor(5.)
    """
    tensors = _as_list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return ember.tensor(0.0)
    device = tensors[0].device
    norms = [t.norm(norm_type).to(device) for t in tensors]
    total = ember.stack(norms).norm(norm_type)
    if error_if_nonfinite and bool(ember.logical_or(total.isnan(), total.isinf())):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                           "`parameters` is non-finite, so it cannot be clipped. To disable "
                           "this error and scale the gradients by the non-finite norm anyway, "
                           "set `error_if_nonfinite=False`")
    return total


@no_grad()
def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients of ``parameters`` by ``max_norm / (total_norm + 1e-6)`` when that is
    below 1 (``total_norm`` usually comes from :func:`get_total_norm`).

    Example:
        >>> import ember
        >>> p = ember.nn.Parameter(ember.zeros(2)); p.grad = ember.tensor([3.0, 4.0])
        >>> ember.nn.utils.clip_grads_with_norm_([p], 1.0, ember.tensor(5.0))
        >>> p.grad
        tensor([0.6000, 0.8000])
    """
    grads = _grads(parameters)
    if not grads:
        return
    # NOTE: torch multiplies even when the coefficient clamps to 1, avoiding a host sync on
    # the comparison; the result is the same, so ember keeps the branch-free form too.
    coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.to(g.device))


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Clip the gradients of ``parameters`` in place so their total norm is at most
    ``max_norm``; returns the total norm before clipping. See
    https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html

    Example:
        >>> import ember
        >>> p = ember.nn.Parameter(ember.zeros(2)); p.grad = ember.tensor([3.0, 4.0])
        >>> ember.nn.utils.clip_grad_norm_([p], max_norm=1.0)
        tensor(5.)
        >>> p.grad
        tensor([0.6000, 0.8000])
    """
    parameters = _as_list(parameters)
    total = get_total_norm(_grads(parameters), norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient of ``parameters`` in place to ``[-clip_value, clip_value]``.

    Example:
        >>> import ember
        >>> p = ember.nn.Parameter(ember.zeros(3)); p.grad = ember.tensor([-2.0, 0.5, 3.0])
        >>> ember.nn.utils.clip_grad_value_(p, 1.0)
        >>> p.grad
        tensor([-1.0000,  0.5000,  1.0000])
    """
    clip_value = float(clip_value)
    for g in _grads(parameters):
        g.clamp_(min=-clip_value, max=clip_value)


clip_grad_norm = clip_grad_norm_   # torch's deprecated spelling
