"""Adamax: Adam with the infinity norm (``torch.optim.Adamax``)."""
from .._backends import array_module
from .optimizer import Optimizer, _check_common, _ema_, _zeroed_state

__all__ = ["Adamax"]


class Adamax(Optimizer):
    """Adamax: ``u = max(beta2 * u, |g| + eps)``, ``p -= lr / (1 - beta1**t) * m / u``.

    See https://pytorch.org/docs/stable/generated/torch.optim.Adamax.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): learning rate. Default: 2e-3.
        betas (tuple[float, float]): decay rates, each in [0, 1). Default: (0.9, 0.999).
        eps (float): added to ``|g|``. Default: 1e-8.
        weight_decay (float): L2 penalty. Default: 0.
        maximize (bool): ascend instead of descend. Default: False.
        foreach, differentiable, capturable: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.Adamax([w], lr=0.1)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> round(w.item(), 4)
        0.9
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        _check_common(lr, eps, betas, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    _init_state = _zeroed_state

    def _state_keys(self, group):
        return ("exp_avg", "exp_inf")

    @staticmethod
    def _math(p, g, m, u, tmp, *, step, group):
        xp = array_module(p)
        beta1, beta2 = group["betas"]
        _ema_(m, g, beta1)
        u *= beta2
        xp.abs(g, out=tmp)
        tmp += group["eps"]
        xp.maximum(u, tmp, out=u)
        xp.divide(m, u, out=tmp)
        tmp *= group["lr"] / (1 - beta1 ** step)
        p -= tmp
