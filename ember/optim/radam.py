"""RAdam: rectified Adam (``torch.optim.RAdam``)."""
from .._backends import array_module
from .optimizer import Optimizer, _check_common, _ema_, _ema_sq_, _zeroed_state

__all__ = ["RAdam"]


class RAdam(Optimizer):
    """RAdam: Adam whose adaptive term is switched on, and rectified, once the variance of
    the adaptive learning rate is tractable (``rho_t > 5``); before that it is SGD with momentum.

    See https://pytorch.org/docs/stable/generated/torch.optim.RAdam.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): learning rate. Default: 1e-3.
        betas (tuple[float, float]): decay rates, each in [0, 1). Default: (0.9, 0.999).
        eps (float): added to the denominator. Default: 1e-8.
        weight_decay (float): weight decay. Default: 0.
        decoupled_weight_decay (bool): decay as AdamW. Default: False.
        maximize (bool): ascend instead of descend. Default: False.
        foreach, capturable, differentiable: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.RAdam([w], lr=0.1)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> round(w.item(), 4)
        0.8
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        _check_common(lr, eps, betas, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    _init_state = _zeroed_state

    def _state_keys(self, group):
        return ("exp_avg", "exp_avg_sq")

    @staticmethod
    def _math(p, g, m, v, tmp, *, step, group):
        xp = array_module(p)
        beta1, beta2 = group["betas"]
        _ema_(m, g, beta1)
        _ema_sq_(xp, v, g, beta2, tmp)
        bc1, bc2 = 1 - beta1 ** step, 1 - beta2 ** step
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * beta2 ** step / bc2
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                    / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            xp.sqrt(v, out=tmp)
            tmp += group["eps"]
            xp.divide(m, tmp, out=tmp)
            tmp *= group["lr"] / bc1 * bc2 ** 0.5 * rect
        else:
            xp.multiply(m, group["lr"] / bc1, out=tmp)
        p -= tmp
