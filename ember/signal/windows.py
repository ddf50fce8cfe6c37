"""``ember.signal.windows``: window functions, as ``torch.signal.windows`` (same formulas in
the same ops, so the same float32/float64 values as torch's). ``sym=False`` gives the periodic
window (for spectral analysis), ``sym=True`` the symmetric one (for filter design)."""
import math
from collections.abc import Iterable

import ember

__all__ = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine",
           "general_hamming", "hamming", "hann", "kaiser", "nuttall"]


def _check(name, M, dtype, layout):
    dtype = ember.get_default_dtype() if dtype is None else dtype
    if M < 0:
        raise ValueError(f"{name} requires non-negative window length, got M={M}")
    if layout is not ember.strided:
        raise ValueError(f"{name} is implemented for strided tensors only, got: {layout}")
    if dtype not in (ember.float32, ember.float64):
        raise ValueError(f"{name} expects float32 or float64 dtypes, got: {dtype}")
    return dtype


def _window(name, M, dtype, layout, device, requires_grad, one=True):
    """(dtype, the trivial window for M == 0 (or M == 1 where ``one``), else None)"""
    dtype = _check(name, M, dtype, layout)
    if M == 0 or (M == 1 and one):
        return dtype, (ember.empty if M == 0 else ember.ones)(
            (M,), dtype=dtype, device=device, requires_grad=requires_grad)
    return dtype, None


def _lin(start, end, M, dtype, device, requires_grad):
    return ember.linspace(start, end, M, dtype=dtype, device=device, requires_grad=requires_grad)


def exponential(M, *, center=None, tau=1.0, sym=True, dtype=None, layout=ember.strided,
                device=None, requires_grad=False):
    """``exp(-|n - center| / tau)`` over ``M`` points (``center`` only for ``sym=False``).

    Example:
        >>> import ember
        >>> ember.signal.windows.exponential(3)
        tensor([0.3679, 1.0000, 0.3679])
    """
    dtype, w = _window("exponential", M, dtype, layout, device, requires_grad, one=False)
    if tau <= 0:
        raise ValueError(f"Tau must be positive, got: {tau} instead.")
    if sym and center is not None:
        raise ValueError("Center must be None for symmetric windows")
    if w is not None:
        return w
    center = (M if not sym and M > 1 else M - 1) / 2.0 if center is None else center
    k = _lin(-center / tau, (-center + (M - 1)) / tau, M, dtype, device, requires_grad)
    return ember.exp(-ember.abs(k))


def cosine(M, *, sym=True, dtype=None, layout=ember.strided, device=None, requires_grad=False):
    """The sine window, ``sin(pi (n + 1/2) / M)``.

    Example:
        >>> import ember
        >>> ember.signal.windows.cosine(3)
        tensor([0.5000, 1.0000, 0.5000])
    """
    dtype, w = _window("cosine", M, dtype, layout, device, requires_grad, one=False)
    if w is not None:
        return w
    c = math.pi / (M + 1 if not sym and M > 1 else M)
    return ember.sin(_lin(0.5 * c, (0.5 + (M - 1)) * c, M, dtype, device, requires_grad))


def gaussian(M, *, std=1.0, sym=True, dtype=None, layout=ember.strided, device=None,
             requires_grad=False):
    """``exp(-n^2 / (2 std^2))`` centred on the window.

    Example:
        >>> import ember
        >>> ember.signal.windows.gaussian(3)
        tensor([0.6065, 1.0000, 0.6065])
    """
    dtype, w = _window("gaussian", M, dtype, layout, device, requires_grad, one=False)
    if std <= 0:
        raise ValueError(f"Standard deviation must be positive, got: {std} instead.")
    if w is not None:
        return w
    start, c = -(M if not sym and M > 1 else M - 1) / 2.0, 1 / (std * math.sqrt(2))
    k = _lin(start * c, (start + (M - 1)) * c, M, dtype, device, requires_grad)
    return ember.exp(-(k ** 2))


def kaiser(M, *, beta=12.0, sym=True, dtype=None, layout=ember.strided, device=None,
           requires_grad=False):
    """The Kaiser window, ``I0(beta sqrt(1 - (2n/(M-1) - 1)^2)) / I0(beta)``.

    Example:
        >>> import ember
        >>> ember.signal.windows.kaiser(3, beta=2.0)
        tensor([0.4387, 1.0000, 0.4387])
    """
    dtype, w = _window("kaiser", M, dtype, layout, device, requires_grad)
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got: {beta} instead.")
    if w is not None:
        return w
    beta = ember.tensor(beta, dtype=dtype, device=device)
    end = ember.minimum(beta, -beta + (M - 1) * (2.0 * beta / (M if not sym else M - 1)))
    k = _lin(-beta, end, M, dtype, device, requires_grad)
    return ember.i0(ember.sqrt(beta * beta - ember.pow(k, 2))) / ember.i0(beta)


def general_cosine(M, *, a, sym=True, dtype=None, layout=ember.strided, device=None,
                   requires_grad=False):
    """``sum_i (-1)^i a_i cos(2 pi i n / (M - 1))``: the cosine-sum family (Hann, Hamming,
    Blackman, Nuttall are members).

    Example:
        >>> import ember
        >>> ember.signal.windows.general_cosine(3, a=[0.5, 0.5])
        tensor([0., 1., 0.])
    """
    dtype, w = _window("general_cosine", M, dtype, layout, device, requires_grad)
    if w is not None:
        return w
    if not isinstance(a, Iterable):
        raise TypeError("Coefficients must be a list/tuple")
    if not a:
        raise ValueError("Coefficients cannot be empty")
    k = _lin(0, (M - 1) * (2 * math.pi / (M if not sym else M - 1)), M, dtype, device,
             requires_grad)
    a_i = ember.tensor([(-1) ** i * w for i, w in enumerate(a)], device=device, dtype=dtype,
                       requires_grad=requires_grad)
    i = ember.arange(a_i.shape[0], dtype=dtype, device=device, requires_grad=requires_grad)
    return (a_i.unsqueeze(-1) * ember.cos(i.unsqueeze(-1) * k)).sum(0)


def general_hamming(M, *, alpha=0.54, sym=True, dtype=None, layout=ember.strided, device=None,
                    requires_grad=False):
    """``alpha - (1 - alpha) cos(2 pi n / (M - 1))``.

    Example:
        >>> import ember
        >>> ember.signal.windows.general_hamming(3, alpha=0.6)
        tensor([0.2000, 1.0000, 0.2000])
    """
    return general_cosine(M, a=[alpha, 1.0 - alpha], sym=sym, dtype=dtype, layout=layout,
                          device=device, requires_grad=requires_grad)


def hamming(M, *, sym=True, dtype=None, layout=ember.strided, device=None, requires_grad=False):
    """The Hamming window (``general_hamming`` with ``alpha=0.54``).

    Example:
        >>> import ember
        >>> ember.signal.windows.hamming(3)
        tensor([0.0800, 1.0000, 0.0800])
    """
    return general_hamming(M, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)


def hann(M, *, sym=True, dtype=None, layout=ember.strided, device=None, requires_grad=False):
    """The Hann window (``general_hamming`` with ``alpha=0.5``).

    Example:
        >>> import ember
        >>> ember.signal.windows.hann(4, sym=False)
        tensor([0.0000, 0.5000, 1.0000, 0.5000])
    """
    return general_hamming(M, alpha=0.5, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)


def blackman(M, *, sym=True, dtype=None, layout=ember.strided, device=None, requires_grad=False):
    """The Blackman window (cosine sum with ``a = [0.42, 0.5, 0.08]``).

    Example:
        >>> import ember
        >>> ember.signal.windows.blackman(3)
        tensor([-1.4901e-08,  1.0000e+00, -1.4901e-08])
    """
    _check("blackman", M, dtype, layout)
    return general_cosine(M, a=[0.42, 0.5, 0.08], sym=sym, dtype=dtype, layout=layout,
                          device=device, requires_grad=requires_grad)


def bartlett(M, *, sym=True, dtype=None, layout=ember.strided, device=None, requires_grad=False):
    """The triangular window ``1 - |2n / (M - 1) - 1|``.

    Example:
        >>> import ember
        >>> ember.signal.windows.bartlett(5)
        tensor([0.0000, 0.5000, 1.0000, 0.5000, 0.0000])
    """
    dtype, w = _window("bartlett", M, dtype, layout, device, requires_grad)
    if w is not None:
        return w
    k = _lin(-1, -1 + (M - 1) * (2 / (M if not sym else M - 1)), M, dtype, device, requires_grad)
    return 1 - ember.abs(k)


def nuttall(M, *, sym=True, dtype=None, layout=ember.strided, device=None, requires_grad=False):
    """The minimum 4-term Blackman-Harris window of Nuttall.

    Example:
        >>> import ember
        >>> ember.signal.windows.nuttall(3)
        tensor([3.6280e-04, 1.0000e+00, 3.6280e-04])
    """
    return general_cosine(M, a=[0.3635819, 0.4891775, 0.1365995, 0.0106411], sym=sym,
                          dtype=dtype, layout=layout, device=device, requires_grad=requires_grad)
