"""Rprop: resilient backpropagation (``torch.optim.Rprop``)."""
from .._backends import array_module
from .optimizer import Optimizer, _check_lr, _scalar, _zeros_like

__all__ = ["Rprop"]


class Rprop(Optimizer):
    """Rprop: each element's step size grows by ``etas[1]`` while its gradient keeps its sign
    and shrinks by ``etas[0]`` when it flips (skipping that update); ``p -= sign(g) * step``.

    See https://pytorch.org/docs/stable/generated/torch.optim.Rprop.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): initial step size. Default: 1e-2.
        etas (tuple[float, float]): (decrease, increase) factors, ``0 < etaminus < 1 <
            etaplus``. Default: (0.5, 1.2).
        step_sizes (tuple[float, float]): (min, max) step size. Default: (1e-6, 50).
        maximize (bool): ascend instead of descend. Default: False.
        capturable, foreach, differentiable: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.Rprop([w], lr=0.1)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> round(w.item(), 4)
        0.9
    """

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _check_lr(lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    def _init_state(self, p, state, group):
        state["step"] = _scalar(0.0)
        state["prev"] = _zeros_like(p)
        state["step_size"] = _zeros_like(p, group["lr"])

    def _state_keys(self, group):
        return ("prev", "step_size")

    @staticmethod
    def _math(p, g, prev, size, tmp, *, step, group):
        xp = array_module(p)
        etaminus, etaplus = group["etas"]
        xp.multiply(g, prev, out=tmp)
        xp.sign(tmp, out=tmp)
        size *= xp.where(tmp > 0, etaplus, xp.where(tmp < 0, etaminus, 1.0))
        xp.clip(size, *group["step_sizes"], out=size)
        # NOTE: where the gradient changed sign the update is skipped and the gradient is
        # remembered as 0, so the next step neither grows nor shrinks that step size.
        g = xp.where(tmp < 0, 0, g)
        xp.sign(g, out=tmp)
        tmp *= size
        p -= tmp
        prev[...] = g
