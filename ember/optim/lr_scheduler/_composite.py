"""Schedulers made of schedulers: one after another (SequentialLR) or all at once
(ChainedScheduler)."""
from bisect import bisect_right

from ._base import LRScheduler, _group_lrs, _set_lr
from ._plateau import ReduceLROnPlateau


class _Composite:
    """state_dict support for schedulers made of schedulers (each saves its own)."""

    def _check_schedulers(self, optimizer, schedulers, what):
        name = type(self).__name__
        if len(schedulers) < 1:
            raise ValueError(f"{name} expects at least one scheduler{what}, but got no scheduler.")
        for i, s in enumerate(schedulers):
            if not hasattr(s, "optimizer"):
                raise TypeError(f"{name} at index {i} should have `optimizer` as its attribute.")
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError(f"{name} does not support `ReduceLROnPlateau` scheduler as it "
                                 f"requires additional kwargs to be specified when calling `step`, "
                                 f"but got one at index {i} in the given schedulers sequence.")
            if optimizer != s.optimizer:
                raise ValueError(f"{name} expects all schedulers to belong to the same "
                                 f"optimizer, but got scheduler {type(s).__name__} at index {i} "
                                 f"has {s.optimizer}, which is different from "
                                 f"{type(optimizer).__name__}.")

    def state_dict(self):
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def load_state_dict(self, state_dict):
        schedulers = state_dict.pop("_schedulers")
        self.__dict__.update(state_dict)
        state_dict["_schedulers"] = schedulers
        for s, saved in zip(self._schedulers, schedulers):
            s.load_state_dict(saved)


class SequentialLR(_Composite, LRScheduler):
    """Run ``schedulers[i]`` between ``milestones[i-1]`` and ``milestones[i]``.

    Example:
        >>> import ember
        >>> from ember.optim import lr_scheduler as S
        >>> opt = ember.optim.SGD([ember.nn.Parameter(ember.zeros(1))], lr=1.0)
        >>> warm = S.ConstantLR(opt, factor=0.5, total_iters=2)
        >>> decay = S.ExponentialLR(opt, gamma=0.5)
        >>> sched = S.SequentialLR(opt, [warm, decay], milestones=[2])
        >>> lrs = sched.get_last_lr()
        >>> for _ in range(4):
        ...     opt.step(); sched.step(); lrs += sched.get_last_lr()
        >>> lrs
        [0.5, 0.5, 1.0, 0.5, 0.25]
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        self._check_schedulers(optimizer, schedulers, "")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be "
                             "one more than the number of milestone points, but got number of "
                             f"schedulers {len(schedulers)} and the number of milestones to be "
                             f"equal to {len(milestones)}")
        self._schedulers, self._milestones = schedulers, milestones
        self.last_epoch, self.optimizer = last_epoch + 1, optimizer
        # NOTE: each sub-scheduler already took its initial step when built; torch undoes
        # those and restarts the first one, so the sequence starts from the initial lr.
        for group in optimizer.param_groups:
            _set_lr(group, group["initial_lr"])
        self.recursive_undo()
        idx = bisect_right(milestones, 0)
        schedulers[idx]._initial_step()
        self._last_lr = schedulers[idx].get_last_lr()

    def recursive_undo(self, sched=None):
        sched = self if sched is None else sched
        if hasattr(sched, "_schedulers"):
            for s in sched._schedulers:
                self.recursive_undo(s)
        elif hasattr(sched, "last_epoch"):
            sched.last_epoch -= 1

    def step(self):
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Composite, LRScheduler):
    """Step every scheduler in ``schedulers`` on each ``step()``, multiplying their effects.

    Example:
        >>> import ember
        >>> from ember.optim import lr_scheduler as S
        >>> opt = ember.optim.SGD([ember.nn.Parameter(ember.zeros(1))], lr=1.0)
        >>> sched = S.ChainedScheduler([S.ExponentialLR(opt, gamma=0.5),
        ...                             S.StepLR(opt, step_size=2, gamma=0.1)])
        >>> lrs = []
        >>> for _ in range(2):
        ...     opt.step(); sched.step(); lrs += sched.get_last_lr()
        >>> [round(x, 6) for x in lrs]
        [0.5, 0.025]
    """

    def __init__(self, schedulers, optimizer=None):
        optimizer = optimizer or schedulers[0].optimizer
        self._check_schedulers(optimizer, schedulers, " to be chained")
        self._schedulers, self.optimizer = schedulers, optimizer
        self._last_lr = _group_lrs(schedulers[-1].optimizer)

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = _group_lrs(self._schedulers[-1].optimizer)
