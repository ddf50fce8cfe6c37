"""Adam, with AMSGrad and decoupled (AdamW) weight decay (``torch.optim.Adam``)."""
import numpy as np

from .optimizer import Optimizer, _check_common, _scalar, _tick, _zeros_like

__all__ = ["Adam"]


class Adam(Optimizer):
    """Adam: ``p -= lr * m_hat / (sqrt(v_hat) + eps)`` with bias-corrected moments.

    See https://pytorch.org/docs/stable/generated/torch.optim.Adam.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): learning rate. Default: 1e-3.
        betas (tuple[float, float]): decay rates of the moments, each in [0, 1).
            Default: (0.9, 0.999).
        eps (float): added to the denominator. Default: 1e-8.
        weight_decay (float): L2 penalty (or decoupled decay, see below). Default: 0.
        amsgrad (bool): use the running maximum of ``v`` (AMSGrad). Default: False.
        maximize (bool): ascend instead of descend. Default: False.
        decoupled_weight_decay (bool): decay ``p`` directly, as AdamW. Default: False.
        foreach (bool): update all parameters of a dtype at once over flat buffers.
        capturable, differentiable, fused: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0, -1.0]))
        >>> opt = ember.optim.Adam([w], lr=0.1)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> w
        Parameter containing:
        tensor([ 0.9000, -0.9000], requires_grad=True)
        >>> sorted(opt.state[w])
        ['exp_avg', 'exp_avg_sq', 'step']
    """

    _foreach_ok = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        _check_common(lr, eps, betas, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)
        if fused:
            if differentiable:
                raise RuntimeError("`fused` does not support `differentiable`")
            if foreach:
                raise RuntimeError("`fused` and `foreach` cannot be `True` together.")

    def _init_state(self, p, state, group):
        state["step"] = _scalar(0.0)
        state["exp_avg"] = _zeros_like(p)
        state["exp_avg_sq"] = _zeros_like(p)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = _zeros_like(p)

    def _update(self, p, g, state, group):
        step = _tick(state)
        m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
        if group["amsgrad"]:
            vmax = state["max_exp_avg_sq"]._data
            _adam_math(p, g, m, v, vmax, step, group)
        else:
            _adam_math(p, g, m, v, None, step, group)


def _adam_math(p, g, m, v, vmax, step, group):
    """One Adam update on arrays (one parameter, or a flat buffer of many)."""
    beta1, beta2 = group["betas"]
    m += (g - m) * (1 - beta1)                          # m.lerp_(g, 1 - beta1)
    v *= beta2
    v += (1 - beta2) * g * g
    if vmax is not None:
        np.maximum(vmax, v, out=vmax)
        v = vmax
    denom = np.sqrt(v)
    denom /= (1 - beta2 ** step) ** 0.5
    denom += group["eps"]
    np.divide(m, denom, out=denom)
    denom *= group["lr"] / (1 - beta1 ** step)
    p -= denom
