"""RMSprop, centered or not, with momentum (``torch.optim.RMSprop``)."""
from .._backends import array_module
from .optimizer import Optimizer, _check, _check_lr, _ema_, _ema_sq_, _zeroed_state

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
        _check_lr(lr)
        _check(0.0 <= eps, "epsilon value", eps)
        _check(0.0 <= momentum, "momentum value", momentum)
        _check(0.0 <= weight_decay, "weight_decay value", weight_decay)
        _check(0.0 <= alpha, "alpha value", alpha)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                        maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    _init_state = _zeroed_state

    def _state_keys(self, group):
        return ("square_avg",) + ("momentum_buffer",) * (group["momentum"] > 0) + \
            ("grad_avg",) * bool(group["centered"])

    @staticmethod
    def _math(p, g, v, *rest, step, group):
        """``rest`` is ``([momentum_buffer], [grad_avg], scratch)`` as the options ask."""
        xp = array_module(p)
        alpha, tmp = group["alpha"], rest[-1]
        _ema_sq_(xp, v, g, alpha, tmp)
        if group["centered"]:
            ga = rest[-2]
            _ema_(ga, g, alpha)
            xp.multiply(ga, ga, out=tmp)
            xp.subtract(v, tmp, out=tmp)
            xp.sqrt(tmp, out=tmp)
        else:
            xp.sqrt(v, out=tmp)
        tmp += group["eps"]
        xp.divide(g, tmp, out=tmp)
        if group["momentum"] > 0:
            buf = rest[0]
            buf *= group["momentum"]
            buf += tmp
            xp.multiply(buf, group["lr"], out=tmp)
        else:
            tmp *= group["lr"]
        p -= tmp
