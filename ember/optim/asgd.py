"""ASGD: averaged stochastic gradient descent (``torch.optim.ASGD``)."""
from .optimizer import Optimizer, _check, _check_lr, _scalar, _tick, _zeros_like

__all__ = ["ASGD"]


class ASGD(Optimizer):
    """ASGD: SGD with a decaying step ``eta`` and a running average ``ax`` of the parameters
    that starts after ``t0`` steps.

    See https://pytorch.org/docs/stable/generated/torch.optim.ASGD.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): learning rate. Default: 1e-2.
        lambd (float): decay term. Default: 1e-4.
        alpha (float): power for the eta update. Default: 0.75.
        t0 (float): step at which averaging starts. Default: 1e6.
        weight_decay (float): L2 penalty. Default: 0.
        maximize (bool): ascend instead of descend. Default: False.
        foreach, differentiable, capturable: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.ASGD([w], lr=0.1)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> sorted(opt.state[w])
        ['ax', 'eta', 'mu', 'step']
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        _check_lr(lr)
        _check(0.0 <= weight_decay, "weight_decay value", weight_decay)
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _init_state(self, p, state, group):
        state["step"] = _scalar(0.0)
        state["eta"] = _scalar(group["lr"])
        state["mu"] = _scalar(1.0)
        state["ax"] = _zeros_like(p)

    def _update(self, p, g, state, group):
        step = _tick(state)
        lr, lambd = group["lr"], group["lambd"]
        # NOTE: eta and mu live in float32 state tensors, as torch, and are read back rounded.
        eta, mu = float(state["eta"]._data), float(state["mu"]._data)
        p *= 1 - lambd * eta
        p -= eta * g
        ax = state["ax"]._data
        if mu != 1:
            ax += (p - ax) * mu
        else:
            ax[...] = p
        state["eta"]._data[...] = lr / (1 + lambd * lr * step) ** group["alpha"]
        state["mu"]._data[...] = 1 / max(1, step - group["t0"])
