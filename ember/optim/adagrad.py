"""Adagrad (``torch.optim.Adagrad``)."""
from .._backends import array_module
from .optimizer import Optimizer, _check, _check_lr, _scalar, _zeros_like

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """Adagrad: ``sum += g**2``, ``p -= clr * g / (sqrt(sum) + eps)`` with
    ``clr = lr / (1 + (step - 1) * lr_decay)``.

    See https://pytorch.org/docs/stable/generated/torch.optim.Adagrad.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): learning rate. Default: 1e-2.
        lr_decay (float): learning rate decay. Default: 0.
        weight_decay (float): L2 penalty. Default: 0.
        initial_accumulator_value (float): starting value of ``sum``. Default: 0.
        eps (float): added to the denominator. Default: 1e-10.
        maximize (bool): ascend instead of descend. Default: False.
        foreach, differentiable, fused: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.Adagrad([w], lr=0.5)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> round(w.item(), 4)
        0.5
    """

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, foreach=None, *, maximize=False, differentiable=False, fused=None):
        _check_lr(lr)
        _check(0.0 <= lr_decay, "lr_decay value", lr_decay)
        _check(0.0 <= weight_decay, "weight_decay value", weight_decay)
        _check(0.0 <= initial_accumulator_value, "initial_accumulator_value value",
               initial_accumulator_value)
        _check(0.0 <= eps, "epsilon value", eps)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        # NOTE: unlike the others, Adagrad builds its state at construction, as torch does, so
        # a state dict taken before the first step already lists every parameter.
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, self.state[p], group)

    def _init_state(self, p, state, group):
        state["step"] = _scalar(0.0)
        state["sum"] = _zeros_like(p, group["initial_accumulator_value"])

    def _state_keys(self, group):
        return ("sum",)

    @staticmethod
    def _math(p, g, total, tmp, *, step, group):
        xp = array_module(p)
        clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
        xp.multiply(g, g, out=tmp)
        total += tmp
        xp.sqrt(total, out=tmp)
        tmp += group["eps"]
        xp.divide(g, tmp, out=tmp)
        tmp *= clr
        p -= tmp
