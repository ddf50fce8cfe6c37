"""NAdam: Adam with Nesterov momentum (``torch.optim.NAdam``)."""
from .._backends import array_module
from .optimizer import Optimizer, _check, _check_common, _scalar, _tick, _zeros_like

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """NAdam, with the momentum schedule ``mu_t = beta1 * (1 - 0.5 * 0.96**(t * psi))``.

    See https://pytorch.org/docs/stable/generated/torch.optim.NAdam.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): learning rate. Default: 2e-3.
        betas (tuple[float, float]): decay rates, each in [0, 1). Default: (0.9, 0.999).
        eps (float): added to the denominator. Default: 1e-8.
        weight_decay (float): weight decay. Default: 0.
        momentum_decay (float): ``psi`` above. Default: 4e-3.
        decoupled_weight_decay (bool): decay as AdamW (NAdamW). Default: False.
        maximize (bool): ascend instead of descend. Default: False.
        foreach, capturable, differentiable: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.NAdam([w], lr=0.1)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> sorted(opt.state[w])
        ['exp_avg', 'exp_avg_sq', 'mu_product', 'step']
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        _check_common(lr, eps, betas, weight_decay)
        _check(0.0 <= momentum_decay, "momentum_decay value", momentum_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    def _init_state(self, p, state, group):
        state["step"] = _scalar(0.0)
        state["mu_product"] = _scalar(1.0)
        state["exp_avg"] = _zeros_like(p)
        state["exp_avg_sq"] = _zeros_like(p)

    def _update(self, p, g, state, group):
        xp = array_module(p)
        step = _tick(state)
        beta1, beta2 = group["betas"]
        lr, psi = group["lr"], group["momentum_decay"]
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * psi))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * psi))
        mu_prod = state["mu_product"]._data
        mu_prod *= mu                  # kept in the scalar dtype (float32), as torch
        mu_prod = float(mu_prod)
        m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
        m += (g - m) * (1 - beta1)
        v *= beta2
        v += (1 - beta2) * g * g
        denom = xp.sqrt(v / (1 - beta2 ** step))
        denom += group["eps"]
        p -= lr * (1.0 - mu) / (1.0 - mu_prod) * g / denom
        p -= lr * mu_next / (1.0 - mu_prod * mu_next) * m / denom
