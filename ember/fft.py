"""``ember.fft``: discrete Fourier transforms with torch.fft's names, arguments and dtypes.

The transforms and shifts are OpDefs in ``ember/_ops/fft.py`` (forward, adjoint backward,
meta rule, samples); this module gives them their public names and adds the sample-frequency
helpers, which take no tensor.
"""
import numpy as np

from . import _dtype
from ._tensor import Tensor  # noqa: F401  (torch.fft re-exports Tensor)
from ._ops import _function
from ._ops.creation import _computed
from ._ops.fft import TRANSFORMS as _TRANSFORMS
from ._ops.fft import fftshift as _fftshift
from ._ops.fft import ifftshift as _ifftshift

globals().update({name: _function(d, name) for name, d in _TRANSFORMS.items()})
fftshift, ifftshift = _function(_fftshift, "fftshift"), _function(_ifftshift, "ifftshift")


def _freq(n, values, dtype, device, requires_grad):
    dt = _dtype.get_default_dtype() if dtype is None else dtype
    return _computed((n,), values, dt, device, requires_grad)


def fftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False, **_layout):
    """The sample frequencies of an ``n``-point :func:`fft` with sample spacing ``d``:
    ``[0, 1, ..., (n - 1) // 2, -(n // 2), ..., -1] / (d * n)``. See torch.fft.fftfreq.

    Example:
        >>> ember.fft.fftfreq(5)
        tensor([ 0.0000,  0.2000,  0.4000, -0.4000, -0.2000])
    """
    return _freq(n, lambda: np.fft.fftfreq(n, d), dtype, device, requires_grad)


def rfftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False, **_layout):
    """The sample frequencies of an ``n``-point :func:`rfft`: ``[0, 1, ..., n // 2] / (d * n)``.
    See torch.fft.rfftfreq.

    Example:
        >>> ember.fft.rfftfreq(5, d=0.5)
        tensor([0.0000, 0.4000, 0.8000])
    """
    return _freq(n // 2 + 1, lambda: np.fft.rfftfreq(n, d), dtype, device, requires_grad)


__all__ = sorted(_TRANSFORMS) + ["fftshift", "ifftshift", "fftfreq", "rfftfreq"]
