"""Learning-rate schedulers with ``torch.optim.lr_scheduler``'s API and arithmetic.

Each scheduler's ``get_lr`` is torch's chainable form (the new lr from the group's current lr),
so schedulers compose (``ChainedScheduler``) and the float sequence matches torch's exactly;
``step(epoch)`` uses the closed form where torch has one.
See https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate.

By family: ``_base.py`` (LRScheduler), ``_decay.py`` (fixed functions of the epoch),
``_composite.py`` (SequentialLR, ChainedScheduler), ``_plateau.py`` (ReduceLROnPlateau),
``_cyclic.py`` (CyclicLR, CosineAnnealingWarmRestarts, OneCycleLR).
"""
from ._base import (EPOCH_DEPRECATION_WARNING, LRScheduler, _format_param,  # noqa: F401
                    _LRScheduler)
from ._composite import ChainedScheduler, SequentialLR
from ._cyclic import CosineAnnealingWarmRestarts, CyclicLR, OneCycleLR
from ._decay import (ConstantLR, CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR,
                     MultiplicativeLR, MultiStepLR, PolynomialLR, StepLR)
from ._plateau import ReduceLROnPlateau

__all__ = ["LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR",
           "ExponentialLR", "SequentialLR", "CosineAnnealingLR", "ChainedScheduler",
           "ReduceLROnPlateau", "CyclicLR", "CosineAnnealingWarmRestarts", "OneCycleLR",
           "PolynomialLR", "LRScheduler"]

# NOTE: every class says it lives here, as torch's all live in torch.optim.lr_scheduler, so a
# pickled scheduler names the public path (and one torch pickled maps onto it).
for _cls in (LRScheduler, LambdaLR, MultiplicativeLR, StepLR, MultiStepLR, ConstantLR, LinearLR,
             ExponentialLR, SequentialLR, CosineAnnealingLR, ChainedScheduler, ReduceLROnPlateau,
             CyclicLR, CosineAnnealingWarmRestarts, OneCycleLR, PolynomialLR):
    _cls.__module__ = __name__
del _cls
