"""``GradScaler``: loss scaling for float16 training, step by step as torch's.

See https://pytorch.org/docs/stable/amp.html#gradient-scaling.
"""
import warnings
from collections import defaultdict
from enum import Enum

import numpy as np

from .. import _dtype
from .._tensor import Tensor
from ..autograd.grad_mode import no_grad

__all__ = ["GradScaler", "OptState"]


class OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state():
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class GradScaler:
    """Scale the loss up so float16 gradients do not underflow, unscale them before the step,
    skip steps whose gradients hold inf or NaN, and adapt the scale.

    Args:
        device (str, default "cuda"): where the scale lives.
        init_scale (float, default 2**16): the first scale.
        growth_factor (float, default 2.0): scale multiplier after ``growth_interval`` steps in
            a row without inf/NaN gradients.
        backoff_factor (float, default 0.5): scale multiplier after a step with inf/NaN.
        growth_interval (int, default 2000): clean steps between growths.
        enabled (bool, default True): False makes every method a pass-through.

    Example:
        >>> import ember
        >>> w = ember.nn.Parameter(ember.ones(2))
        >>> opt = ember.optim.SGD([w], lr=0.1)
        >>> scaler = ember.amp.GradScaler("cpu", init_scale=4.0, growth_interval=1)
        >>> scaler.scale((w * 3).sum()).backward()
        >>> w.grad
        tensor([12., 12.])
        >>> scaler.step(opt); scaler.update()
        >>> w, scaler.get_scale()
        (Parameter containing:
        tensor([0.7000, 0.7000], requires_grad=True), 8.0)
    """

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled:
            from .autocast_mode import _cuda_available
            if not _cuda_available():
                warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not "
                              "available.  Disabling.")
                self._enabled = False
        if self._enabled:
            if not growth_factor > 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if not backoff_factor < 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale = None              # a float32 0-dim tensor, made on first use
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker = None
            self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _check_scale_growth_tracker(self, funcname):
        fix = "This may indicate your script did not use scaler.scale(loss or outputs) earlier " \
              "in the iteration."
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + fix)
        return self._scale, self._growth_tracker

    def _lazy_init(self, device):
        import ember
        self._scale = ember.full((), self._init_scale, dtype=_dtype.float32, device=device)
        self._growth_tracker = self._init_growth_tracker

    def scale(self, outputs):
        """Multiply ``outputs`` (a tensor, or tensors in lists, tuples and other iterables) by
        the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            if self._scale is None:
                self._lazy_init(outputs.device)
            return outputs * self._scale.to(device=outputs.device)

        def apply(val):
            if isinstance(val, Tensor):
                return self.scale(val)
            if isinstance(val, (list, tuple)):
                return type(val)(apply(v) for v in val)
            if hasattr(val, "__iter__"):
                return map(apply, val)
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")
        return apply(outputs)

    def _unscale_grads_(self, optimizer, inv_scale, allow_fp16):
        """Multiply every gradient by ``inv_scale``; return {device: 1.0 if any was not
        finite else 0.0}."""
        from .._backends import array_module
        finite = defaultdict(list)
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    if not allow_fp16 and g.dtype is _dtype.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    a = g._data
                    # NOTE: as torch's _amp_foreach_non_finite_check_and_unscale_, the gradient
                    # is scaled even when it holds an inf, and the step is skipped later.
                    # (the check stays on the gradient's device: one read back per device)
                    finite[g.device].append(array_module(a).isfinite(a).all())
                    g.mul_(inv_scale)
        return {d: 0.0 if bool(array_module(fs[0]).stack(fs).all()) else 1.0
                for d, fs in finite.items()}

    def unscale_(self, optimizer):
        """Divide ``optimizer``'s gradients by the scale (in place), e.g. before clipping."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # torch: the reciprocal in double, rounded to float32
        inv_scale = float(np.float32(1.0 / np.float64(self._scale.item())))
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, False)
        state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale the gradients (unless :meth:`unscale_` did) and run ``optimizer.step`` when
        they are all finite; returns what ``step`` returned, or None when skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if not state["found_inf_per_device"]:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = None
        if not sum(state["found_inf_per_device"].values()):
            retval = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale=None):
        """Back the scale off if any step this iteration saw inf/NaN, else grow it every
        ``growth_interval`` clean steps; or set it to ``new_scale``."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("update")
        if new_scale is not None:
            self._set_scale(new_scale)
        else:
            found = [f for s in self._per_optimizer_states.values()
                     for f in s["found_inf_per_device"].values()]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            self._update_scale(sum(found) > 0)
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _set_scale(self, new_scale):
        if isinstance(new_scale, float):
            self._scale.fill_(new_scale)
            return
        reason = "new_scale should be a float or a 1-element torch.cuda.FloatTensor or " \
                 "torch.FloatTensor with requires_grad=False."
        if new_scale.device.type != self._device or new_scale.numel() != 1 or \
                new_scale.requires_grad:
            raise AssertionError(reason)
        self._scale.copy_(new_scale.reshape(()))

    def _update_scale(self, found_inf):
        # torch's _amp_update_scale_, in float32 as its kernel
        scale = np.float32(self._scale.item())
        if found_inf:
            self._scale.fill_(float(scale * np.float32(self._backoff_factor)))
            self._growth_tracker = 0
            return
        successful = self._growth_tracker + 1
        if successful == self._growth_interval:
            grown = np.float32(scale * np.float32(self._growth_factor))
            if np.isfinite(grown):
                self._scale.fill_(float(grown))
            successful = 0
        self._growth_tracker = successful

    def get_scale(self):
        """The current scale as a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else self._scale.item()

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = new_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = new_factor

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = new_interval

    def _get_growth_tracker(self):
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else self._growth_tracker

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        """The scale and its schedule, as torch's keys; empty when disabled."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale.fill_(self._init_scale)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._growth_tracker = self._init_growth_tracker
