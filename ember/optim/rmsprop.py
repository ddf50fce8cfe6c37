"""RMSprop, centered or not, with momentum (``torch.optim.RMSprop``)."""
import numpy as np

from .optimizer import Optimizer, _check, _scalar, _tick, _zeros_like

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop: ``v = alpha * v + (1 - alpha) * g**2``, ``p -= lr * g / (sqrt(v) + eps)``;
    ``centered`` subtracts the squared running mean of ``g`` from ``v``.

    See https://pytorch.org/docs/stable/generated/torch.optim.RMSprop.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): learning rate. Default: 1e-2.
        alpha (float): smoothing constant. Default: 0.99.
        eps (float): added to the denominator. Default: 1e-8.
        weight_decay (float): L2 penalty. Default: 0.
        momentum (float): momentum factor. Default: 0.
        centered (bool): normalize by the estimated variance. Default: False.
        maximize (bool): ascend instead of descend. Default: False.
        capturable, foreach, differentiable: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.RMSprop([w], lr=0.01, centered=True, momentum=0.5)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> sorted(opt.state[w])
        ['grad_avg', 'momentum_buffer', 'square_avg', 'step']
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        _check(0.0 <= lr, "learning rate", lr)
        _check(0.0 <= eps, "epsilon value", eps)
        _check(0.0 <= momentum, "momentum value", momentum)
        _check(0.0 <= weight_decay, "weight_decay value", weight_decay)
        _check(0.0 <= alpha, "alpha value", alpha)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                        maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    def _init_state(self, p, state, group):
        state["step"] = _scalar(0.0)
        state["square_avg"] = _zeros_like(p)
        if group["momentum"] > 0:
            state["momentum_buffer"] = _zeros_like(p)
        if group["centered"]:
            state["grad_avg"] = _zeros_like(p)

    def _update(self, p, g, state, group):
        _tick(state)
        alpha = group["alpha"]
        v = state["square_avg"]._data
        v *= alpha
        v += (1 - alpha) * g * g
        if group["centered"]:
            ga = state["grad_avg"]._data
            ga += (g - ga) * (1 - alpha)
            avg = np.sqrt(v - ga * ga)
        else:
            avg = np.sqrt(v)
        avg += group["eps"]
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]._data
            buf *= group["momentum"]
            buf += g / avg
            p -= group["lr"] * buf
        else:
            p -= group["lr"] * g / avg
