"""Adadelta (``torch.optim.Adadelta``)."""
from .._backends import array_module
from .optimizer import Optimizer, _check, _check_lr, _ema_sq_, _zeroed_state

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """Adadelta: ``delta = sqrt(u + eps) / sqrt(v + eps) * g`` from running averages ``v`` of
    ``g**2`` and ``u`` of ``delta**2``; ``p -= lr * delta``.

    See https://pytorch.org/docs/stable/generated/torch.optim.Adadelta.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): scale of ``delta``. Default: 1.0.
        rho (float): running-average coefficient, in [0, 1]. Default: 0.9.
        eps (float): added inside the square roots. Default: 1e-6.
        weight_decay (float): L2 penalty. Default: 0.
        maximize (bool): ascend instead of descend. Default: False.
        foreach, capturable, differentiable: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.Adadelta([w])
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> round(w.item(), 4)
        0.9968
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        _check_lr(lr)
        _check(0.0 <= rho <= 1.0, "rho value", rho)
        _check(0.0 <= eps, "epsilon value", eps)
        _check(0.0 <= weight_decay, "weight_decay value", weight_decay)
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    _init_state = _zeroed_state

    def _state_keys(self, group):
        return ("square_avg", "acc_delta")

    @staticmethod
    def _math(p, g, v, u, tmp, *, step, group):
        xp = array_module(p)
        rho, eps = group["rho"], group["eps"]
        _ema_sq_(xp, v, g, rho, tmp)
        xp.add(v, eps, out=tmp)
        xp.sqrt(tmp, out=tmp)
        xp.divide(g, tmp, out=tmp)
        delta = xp.sqrt(u + eps)
        delta *= tmp                                    # sqrt(u + eps) / sqrt(v + eps) * g
        u *= rho
        xp.multiply(delta, delta, out=tmp)
        tmp *= 1 - rho
        u += tmp
        delta *= group["lr"]
        p -= delta
