"""SGD with momentum, dampening and Nesterov momentum (``torch.optim.SGD``)."""
from .._backends import add_at, array_module, backend, device_of_array
from .._tensor import Tensor
from .optimizer import Optimizer, _check, _check_lr

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with momentum.

    ``buf = momentum * buf + (1 - dampening) * g`` (``buf = g`` on the first step), then
    ``p -= lr * (g + momentum * buf if nesterov else buf)``.
    See https://pytorch.org/docs/stable/generated/torch.optim.SGD.html.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): learning rate. Default: 1e-3.
        momentum (float): momentum factor. Default: 0.
        dampening (float): dampening of the momentum. Default: 0.
        weight_decay (float): L2 penalty added to the gradient. Default: 0.
        nesterov (bool): Nesterov momentum. Default: False.
        maximize (bool): ascend instead of descend. Default: False.
        foreach, differentiable, fused: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.SGD([w], lr=0.1, momentum=0.9)
        >>> for _ in range(2):
        ...     opt.zero_grad()
        ...     (w * w).sum().backward()
        ...     opt.step()
        >>> round(w.item(), 4)
        0.46
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 *, maximize=False, foreach=None, differentiable=False, fused=None):
        _check_lr(lr)
        _check(0.0 <= momentum, "momentum value", momentum)
        _check(0.0 <= weight_decay, "weight_decay value", weight_decay)
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach,
                        differentiable=differentiable, fused=fused)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)

    def _step_param(self, p, group):
        g = p.grad
        if g.is_sparse and group["momentum"] == 0 and not group["weight_decay"]:
            # NOTE: torch adds a sparse gradient entry by entry (param.add_(grad, alpha=-lr)),
            # repeated indices one after another; so does add_at, touching only those rows.
            idx, val = g._indices(), g._values()
            lr = -group["lr"] if not group["maximize"] else group["lr"]
            add_at(backend(p.device).xp, p._data, tuple(idx._data), val._data * lr)
            p._bump_version()
            return
        super()._step_param(p, group)

    def _sparse_grad(self, g):
        # with momentum or weight decay the math is the dense one (torch's sparse buffer holds
        # the same numbers)
        return g.to_dense()

    def _state_keys(self, group):
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _update(self, p, g, state, group):
        if group["momentum"] != 0 and state.get("momentum_buffer") is None:
            # NOTE: torch keeps no buffer until the first step, and then it is the gradient
            # itself (undampened), so a state dict from step 0 has no momentum_buffer key.
            state["momentum_buffer"] = Tensor._wrap(g.copy(), device_of_array(g))
            p -= group["lr"] * (1 + group["momentum"]) * g if group["nesterov"] else group["lr"] * g
            return
        super()._update(p, g, state, group)

    @staticmethod
    def _math(p, g, *rest, step, group):
        """``rest`` is ``(momentum_buffer, scratch)`` with momentum, else ``(scratch,)``."""
        xp = array_module(p)
        tmp, lr, momentum = rest[-1], group["lr"], group["momentum"]
        if len(rest) == 1:
            xp.multiply(g, lr, out=tmp)
        else:
            buf = rest[0]
            buf *= momentum
            xp.multiply(g, 1 - group["dampening"], out=tmp)
            buf += tmp
            if group["nesterov"]:
                xp.multiply(buf, momentum, out=tmp)
                tmp += g
                tmp *= lr
            else:
                xp.multiply(buf, lr, out=tmp)
        p -= tmp
