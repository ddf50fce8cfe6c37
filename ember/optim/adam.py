"""Adam, with AMSGrad and decoupled (AdamW) weight decay (``torch.optim.Adam``)."""
import numpy as np

from .._backends import array_module
from .._C import kernels
from .optimizer import (Optimizer, _check_common, _check_lr, _ema_, _ema_sq_, _tick,
                        _zeroed_state)

__all__ = ["Adam"]


def _kernel(p, g):
    """The C Adam update for ``p`` and its gradient ``g`` (same float dtype, contiguous), or
    None."""
    if type(p) is not np.ndarray:       # a cuda array: ember's fused CUDA kernel, if it applies
        from ..cuda import _kernels as cuda_kernels
        return cuda_kernels.adam if cuda_kernels.fusable(p, g) else None
    fn = kernels.kernel("adam", p.dtype)
    ok = fn is not None and g.dtype == p.dtype and p.flags.c_contiguous and g.flags.c_contiguous
    return fn if ok else None


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

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        _check_lr(lr, foreach, capturable)
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

    _init_state = _zeroed_state

    def _state_keys(self, group):
        return ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if group["amsgrad"] else \
            ("exp_avg", "exp_avg_sq")

    def _decay(self, p, g, group):
        # NOTE: with the C kernel, AdamW's ``p *= 1 - lr * weight_decay`` runs inside its one
        # pass (same rounding), so it is not a pass of its own here.
        if group.get("decoupled_weight_decay") and _kernel(p, g) is not None:
            return g
        return super()._decay(p, g, group)

    def _update(self, p, g, state, group):
        if _kernel(p, g) is None:
            return super()._update(p, g, state, group)
        # one kernel call over the whole arrays: it needs no cache-sized blocks nor scratch
        self._math(p, g, *(state[k]._data for k in self._state_keys(group)), None,
                   step=_tick(state), group=group)

    @staticmethod
    def _math(p, g, m, v, *rest, step, group):
        """One Adam update on arrays: ``rest`` is ``(max_exp_avg_sq, scratch)`` for AMSGrad, else
        ``(scratch,)``. The C kernel does it in one pass; the NumPy code below is the
        reference, written as in-place passes so it allocates nothing."""
        xp = array_module(p)
        beta1, beta2 = group["betas"]
        bc2_sqrt = (1 - beta2 ** step) ** 0.5
        step_size = group["lr"] / (1 - beta1 ** step) * bc2_sqrt
        fn = _kernel(p, g)
        decay = 1 - group["lr"] * group["weight_decay"] if fn and group.get(
            "decoupled_weight_decay") else None
        if fn is not None and type(p) is not np.ndarray:       # (the fused CUDA kernel)
            if fn(p, g, m, v, rest[0] if len(rest) == 2 else None, beta1, beta2,
                  group["eps"] * bc2_sqrt, step_size, 1.0 if decay is None else decay):
                return
            fn = None
        if fn and all(a.flags.c_contiguous for a in (m, v) + rest[:-1]):
            # the same operations in the same order as below: bit-equal results
            fn(p.ctypes.data, g.ctypes.data, m.ctypes.data, v.ctypes.data,
               kernels.ptr(rest[0] if len(rest) == 2 else None), p.size, beta1, beta2, 1 - beta2,
               group["eps"] * bc2_sqrt, step_size, 1.0 if decay is None else decay,
               kernels.num_threads())
            return
        if decay is not None:                   # skipped by _decay for the kernel
            p *= decay
        tmp = rest[-1] if rest[-1] is not None else xp.empty_like(p)
        _ema_(m, g, beta1)
        _ema_sq_(xp, v, g, beta2, tmp)
        if len(rest) == 2:
            xp.maximum(rest[0], v, out=rest[0])
            v = rest[0]
        # lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), with sqrt(bc2) moved out of the big arrays
        xp.sqrt(v, out=tmp)
        tmp += group["eps"] * bc2_sqrt
        xp.divide(m, tmp, out=tmp)
        tmp *= step_size
        p -= tmp
