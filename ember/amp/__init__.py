"""``torch.amp``: autocast regions, cast policies and the gradient scaler.

See https://pytorch.org/docs/stable/amp.html.
"""
from .autocast_mode import (autocast, custom_bwd, custom_fwd, get_autocast_dtype,  # noqa: F401
                            is_autocast_enabled)
from .grad_scaler import GradScaler  # noqa: F401


def is_autocast_available(device_type):
    """Whether autocast can run on ``device_type`` (cpu and cuda)."""
    return device_type in ("cpu", "cuda")
