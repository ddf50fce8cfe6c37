"""``torch.optim.swa_utils``: weight averaging (SWA, EMA), its learning-rate schedule, and the
BatchNorm statistics refresh.

See https://pytorch.org/docs/stable/optim.html#weight-averaging-swa-and-ema.
"""
import itertools
import math
import warnings
from copy import deepcopy

import ember

from ..autograd.grad_mode import no_grad
from ..nn.modules.batchnorm import _BatchNorm
from ..nn.modules.module import Module
from .lr_scheduler import LRScheduler, _format_param

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn",
           "get_swa_multi_avg_fn", "get_ema_avg_fn", "get_swa_avg_fn"]


def _check_decay(decay):
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] "
                         "range.")


def _lerp_all(averaged, current, weight):
    """``a += weight * (c - a)`` for each pair; integer tensors through the plain formula."""
    for a, c in zip(averaged, current):
        if a.is_floating_point() or a.is_complex():
            a.lerp_(c, weight)
        else:
            a.copy_(a * (1 - weight) + c * weight)


def get_ema_multi_avg_fn(decay=0.999):
    """The in-place EMA update ``ema = decay * ema + (1 - decay) * param`` over lists of tensors.

    Example:
        >>> import ember
        >>> ema, p = [ember.zeros(2)], [ember.ones(2)]
        >>> ember.optim.swa_utils.get_ema_multi_avg_fn(0.75)(ema, p, 1)
        >>> ema[0]
        tensor([0.2500, 0.2500])
    """
    _check_decay(decay)

    def ema_update(ema_param_list, current_param_list, _):
        with no_grad():
            if ema_param_list[0].is_floating_point() or ema_param_list[0].is_complex():
                _lerp_all(ema_param_list, current_param_list, 1 - decay)
            else:
                for e, c in zip(ema_param_list, current_param_list):
                    e.copy_(e * decay + c * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn():
    """The in-place running mean ``avg += (param - avg) / (n + 1)`` over lists of tensors."""
    def swa_update(averaged_param_list, current_param_list, num_averaged):
        with no_grad():
            n = num_averaged.item() if isinstance(num_averaged, ember.Tensor) else num_averaged
            _lerp_all(averaged_param_list, current_param_list, 1 / (n + 1))
    return swa_update


def get_ema_avg_fn(decay=0.999):
    """The EMA of one tensor: returns ``decay * ema + (1 - decay) * param``."""
    _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn():
    """The running mean of one tensor: returns ``avg + (param - avg) / (n + 1)``."""
    def swa_update(averaged_param, current_param, num_averaged):
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)
    return swa_update


class AveragedModel(Module):
    """A copy of ``model`` whose parameters are a running average (SWA by default, or EMA) of
    ``model``'s over the calls to :meth:`update_parameters`.

    Args:
        model (Module): the model to average.
        device: where to keep the copy (default: where ``model`` is).
        avg_fn: ``avg_fn(averaged, current, n_averaged) -> new averaged`` for one tensor.
        multi_avg_fn: ``multi_avg_fn(averaged_list, current_list, n_averaged)`` in place.
        use_buffers (bool, default False): average the buffers too (else copy them).

    Example:
        >>> import ember
        >>> from ember.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
        >>> m = ember.nn.Linear(1, 1, bias=False)
        >>> ema = AveragedModel(m, multi_avg_fn=get_ema_multi_avg_fn(0.5))
        >>> for w in (1.0, 3.0):
        ...     with ember.no_grad():
        ...         _ = m.weight.fill_(w)
        ...     ema.update_parameters(m)
        >>> ema.module.weight.item(), int(ema.n_averaged)
        (2.0, 2)
    """

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", ember.tensor(0, dtype=ember.long, device=device))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def update_parameters(self, model):
        """Fold ``model``'s current parameters into the average (the first call copies)."""
        if self.use_buffers:
            mine = itertools.chain(self.module.parameters(), self.module.buffers())
            theirs = itertools.chain(model.parameters(), model.buffers())
        else:
            mine, theirs = self.parameters(), model.parameters()
        averaged, current = [], []
        first = int(self.n_averaged) == 0
        with no_grad():
            for a, c in zip(mine, theirs):
                c = c.detach().to(a.device)
                averaged.append(a.detach())
                current.append(c)
                if first:
                    a.detach().copy_(c)
            if not first:
                self._average(averaged, current)
            if not self.use_buffers:
                for b, c in zip(self.module.buffers(), model.buffers()):
                    b.detach().copy_(c.detach().to(b.device))
            self.n_averaged += 1

    def _average(self, averaged, current):
        if self.avg_fn is not None:
            for a, c in zip(averaged, current):
                a.copy_(self.avg_fn(a, c, self.n_averaged.to(a.device)))
            return
        groups = {}
        for a, c in zip(averaged, current):      # torch groups by device and dtype
            pair = groups.setdefault((str(a.device), a.dtype), ([], []))
            pair[0].append(a)
            pair[1].append(c)
        for (dev, _), (ps, cs) in groups.items():
            n = self.n_averaged.to(dev)
            if self.multi_avg_fn is not None:
                self.multi_avg_fn(ps, cs, n)
            elif dev.startswith("cuda"):
                get_swa_multi_avg_fn()(ps, cs, n)
            else:
                # NOTE: torch has no CPU foreach kernels, so on the CPU it takes the
                # one-tensor formula (rounding differs from lerp's in the last bit)
                swa = get_swa_avg_fn()
                for a, c in zip(ps, cs):
                    a.copy_(swa(a, c, n))


def update_bn(loader, model, device=None):
    """Recompute the BatchNorm running statistics of ``model`` with one pass over ``loader``
    (batches are tensors, or lists/tuples whose first item is the input).

    Example:
        >>> import ember
        >>> m = ember.nn.Sequential(ember.nn.Linear(2, 2), ember.nn.BatchNorm1d(2))
        >>> ember.optim.swa_utils.update_bn([ember.ones(4, 2)], m)
        >>> m[1].num_batches_tracked
        tensor(1)
    """
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None          # cumulative average over the whole pass
    with no_grad():
        for input in loader:
            if isinstance(input, (list, tuple)):
                input = input[0]
            if device is not None:
                input = input.to(device)
            model(input)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's learning rate to ``swa_lr`` over ``anneal_epochs`` steps (cosine or
    linear), then hold it.

    Example:
        >>> import ember
        >>> opt = ember.optim.SGD([ember.nn.Parameter(ember.ones(1))], lr=1.0)
        >>> s = ember.optim.swa_utils.SWALR(opt, swa_lr=0.1, anneal_epochs=2,
        ...                                 anneal_strategy="linear")
        >>> lrs = []
        >>> for _ in range(3):
        ...     opt.step(); s.step(); lrs.append(round(s.get_last_lr()[0], 4))
        >>> lrs
        [0.55, 0.1, 0.1]
    """

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        for lr, group in zip(_format_param("swa_lr", optimizer, swa_lr), optimizer.param_groups):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self):
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use "
                          "`get_last_lr()`.", UserWarning, stacklevel=2)
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        # NOTE: as torch, the lr before annealing is recovered from the current one, so another
        # scheduler (or the user) may have changed it in between
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha)
                    for g in self.optimizer.param_groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha)
                for g, lr in zip(self.optimizer.param_groups, prev_lrs)]

    def _set_anneal_func(self, anneal_strategy):
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
