"""``ember.cuda.amp``: the older spelling of ``ember.amp`` for cuda (autocast, GradScaler)."""
import functools

from ..amp.autocast_mode import autocast as _autocast
from ..amp.autocast_mode import custom_bwd as _custom_bwd
from ..amp.autocast_mode import custom_fwd as _custom_fwd
from ..amp.grad_scaler import GradScaler as _GradScaler


class autocast(_autocast):
    """``ember.autocast("cuda", ...)``."""

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        kw = {} if dtype is None else {"dtype": dtype}
        super().__init__("cuda", enabled=enabled, cache_enabled=cache_enabled, **kw)


class GradScaler(_GradScaler):
    """``ember.amp.GradScaler("cuda", ...)``."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval,
                         enabled)


custom_fwd = functools.partial(_custom_fwd, device_type="cuda")
custom_bwd = functools.partial(_custom_bwd, device_type="cuda")
