"""AdamW: Adam with decoupled weight decay (``torch.optim.AdamW``)."""
from .adam import Adam

__all__ = ["AdamW"]


class AdamW(Adam):
    """Adam that decays the weights directly (``p *= 1 - lr * weight_decay``) instead of adding
    an L2 term to the gradient. Arguments as :class:`Adam`; ``weight_decay`` defaults to 1e-2.

    See https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.tensor([1.0]))
        >>> opt = ember.optim.AdamW([w], lr=0.1, weight_decay=0.5)
        >>> (w * w).sum().backward()
        >>> opt.step()
        >>> round(w.item(), 4)
        0.85
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True)

    def __setstate__(self, state):
        # NOTE: as torch, a state dict loaded into AdamW always decays decoupled.
        super().__setstate__(state)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True
