"""Adafactor (``torch.optim.Adafactor``) and Muon (``torch.optim.Muon``): optimizers whose
state is not per-element (factored second moments; an orthogonalized matrix update), written
in ember ops over whole tensors, step by step as torch's single-tensor loops."""
import math

from .. import _dtype
from .._tensor import Tensor
from ..autograd.grad_mode import no_grad
from .optimizer import Optimizer, _run_closure, _scalar

__all__ = ["Adafactor", "Muon"]


def _lr_ok(lr):
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= lr:
        raise ValueError(f"Learning rate should be >= 0 but is: {lr}")


def _grads(opt, group):
    """(param, grad) of the group's params with a gradient, checked as torch checks."""
    name = type(opt).__name__
    for p in group["params"]:
        if p.grad is None:
            continue
        if p.is_complex():
            raise RuntimeError(f"{name} does not support complex parameters")
        if p.grad.is_sparse:
            raise RuntimeError(f"{name} does not support sparse gradients")
        yield p, p.grad


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern, 2018, in torch's form): a matrix's second moment is kept as
    its row and column means, the step size is relative to the parameter's RMS and decays as
    ``min(lr, 1/sqrt(t))``, and each update is clipped to RMS ``d``.

    Args:
        params (iterable): parameters or param group dicts.
        lr (float): the cap on the relative step size. Default: 1e-2.
        beta2_decay (float): the second moment's decay is ``1 - t**beta2_decay``. Default: -0.8.
        eps (tuple[float | None, float]): ``eps1`` floors the second moment (None: the dtype's
            eps), ``eps2`` the parameter's RMS. Default: (None, 1e-3).
        d (float): the clipping threshold on the update's RMS. Default: 1.0.
        weight_decay (float): decoupled, ``p *= 1 - lr * weight_decay``. Default: 0.
        maximize (bool): ascend instead of descend. Default: False.
        foreach: accepted for compatibility.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([[1.0, 2.0], [3.0, 4.0]]))
        >>> opt = ember.optim.Adafactor([w])
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> sorted(opt.state[w])
        ['col_var', 'row_var', 'step']
    """

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
                 weight_decay=0.0, *, foreach=None, maximize=False):
        _lr_ok(lr)
        for ok, what, v in ((0.0 >= beta2_decay, "beta2_decay should be <= 0", beta2_decay),
                            (eps[0] is None or 0.0 <= eps[0], "epsilon1 should be >= 0", eps[0]),
                            (0.0 <= eps[1], "epsilon2 should be >= 0", eps[1]),
                            (1.0 <= d, "Clipping threshold d should be >= 1", d),
                            (0.0 <= weight_decay, "weight_decay should be >= 0", weight_decay)):
            if not ok:
                raise ValueError(f"{what} but is: {v}")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        """One Adafactor step over every parameter with a gradient; returns ``closure()``."""
        loss = _run_closure(closure)
        for group in self.param_groups:
            lr, (eps1, eps2), wd = group["lr"], group["eps"], group["weight_decay"]
            lr = lr.item() if isinstance(lr, Tensor) else lr
            for p, g in _grads(self, group):
                g = -g if group["maximize"] else g
                state = self.state[p]
                if not state:
                    state["step"] = _scalar(0.0)
                    if g.dim() > 1:
                        state["row_var"] = g.new_zeros((*g.shape[:-1], 1))
                        state["col_var"] = g.new_zeros((*g.shape[:-2], 1, g.shape[-1]))
                    else:
                        state["variance"] = g.new_zeros(g.shape)
                if eps1 is None:        # NOTE: as torch's loop, set once per group
                    eps1 = _dtype.finfo(p.dtype).eps
                state["step"] += 1
                t = state["step"].item()
                w, rho = t ** group["beta2_decay"], min(lr, 1 / t ** 0.5)
                alpha = max(eps2, p.norm(2).item() / p.numel() ** 0.5) * rho
                if wd != 0:
                    p.mul_(1 - lr * wd)
                if g.dim() > 1:
                    row, col = state["row_var"], state["col_var"]
                    row.lerp_(g.norm(dim=-1, keepdim=True).square_().div_(g.shape[-1]), w)
                    col.lerp_(g.norm(dim=-2, keepdim=True).square_().div_(g.shape[-2]), w)
                    var = (row @ col).div_(row.mean(dim=-2, keepdim=True).clamp_(min=eps1))
                else:
                    state["variance"].lerp_(g * g, w)
                    var = state["variance"].clone()
                update = var.clamp_(min=eps1 * eps1).rsqrt_().mul_(g)
                denom = max(1.0, update.norm(2).item() / (update.numel() ** 0.5 * group["d"]))
                p.add_(update, alpha=-alpha / denom)
        return loss


def _newton_schulz(grad, coefficients, steps, eps):
    """The orthogonal factor ``U V^T`` of ``grad`` by torch's quintic Newton-Schulz iteration,
    in bfloat16 as torch's."""
    if steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if grad.dim() != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = coefficients
    tall = grad.shape[0] > grad.shape[1]
    x = grad.bfloat16().T if tall else grad.bfloat16()
    x = x.div(x.norm().clamp(min=eps))
    for _ in range(steps):
        gram = x @ x.T
        x = x.addmm(gram.addmm(gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


class Muon(Optimizer):
    """Muon: SGD momentum (Nesterov by default) whose update, a 2-d matrix, is replaced by its
    nearest semi-orthogonal matrix (Newton-Schulz iterations) before the step; weight decay is
    decoupled. 2-d parameters only (hidden layers' weights), as torch's.

    Args:
        params (iterable): 2-d parameters or param group dicts.
        lr (float): learning rate. Default: 1e-3.
        weight_decay (float): decoupled, ``p *= 1 - lr * weight_decay``. Default: 0.1.
        momentum (float): Default: 0.95.
        nesterov (bool): Default: True.
        ns_coefficients (tuple[float, float, float]): the iteration's quintic. Default:
            (3.4445, -4.7750, 2.0315).
        eps (float): floors the update's norm. Default: 1e-7.
        ns_steps (int): Newton-Schulz iterations. Default: 5.
        adjust_lr_fn (str | None): ``"original"`` (None) scales lr by ``sqrt(max(1, A/B))``,
            ``"match_rms_adamw"`` by ``0.2 sqrt(max(A, B))``.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.eye(3))
        >>> opt = ember.optim.Muon([w], lr=0.1, weight_decay=0.0)
        >>> (w.sum(1) ** 2).sum().backward()
        >>> opt.step()
        >>> w.shape, list(opt.state[w])
        (torch.Size([3, 3]), ['momentum_buffer'])
    """

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(3.4445, -4.7750, 2.0315), eps=1e-7, ns_steps=5,
                 adjust_lr_fn=None):
        _lr_ok(lr)
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, ns_coefficients=ns_coefficients,
                                      eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn))
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() != 2:
                    raise ValueError("Muon only supports 2D parameters whereas we found a "
                                     f"parameter with size: {p.size()}")

    @no_grad()
    def step(self, closure=None):
        """One Muon step over every parameter with a gradient; returns ``closure()``."""
        loss = _run_closure(closure)
        for group in self.param_groups:
            lr, mom = group["lr"], group["momentum"]
            lr = lr.item() if isinstance(lr, Tensor) else lr
            for p, g in _grads(self, group):
                if g.dim() != 2:
                    raise ValueError("Param gradient must be a 2D matrix")
                buf = self.state[p].setdefault("momentum_buffer", g.new_zeros(g.shape))
                buf.lerp_(g, 1 - mom)
                update = _newton_schulz(g.lerp(buf, mom) if group["nesterov"] else buf,
                                        group["ns_coefficients"], group["ns_steps"], group["eps"])
                A, B = p.shape
                ratio = {None: math.sqrt(max(1, A / B)), "original": math.sqrt(max(1, A / B)),
                         "match_rms_adamw": 0.2 * math.sqrt(max(A, B))}[group["adjust_lr_fn"]]
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update, alpha=-lr * ratio)
        return loss
