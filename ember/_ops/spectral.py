"""Short-time Fourier transforms, ``torch.stft`` and ``torch.istft``, and the windows they take
(hann, hamming, blackman, bartlett, kaiser). The transforms are compositions of OpDefs (pad,
unfold, fft, index_add), so their gradients come from those ops'.

stft frames the signal (``unfold``: views, no copy), windows each frame and transforms it;
istft inverts the frames and adds them back where they overlap, divided by the overlap-added
squared window (the least-squares inverse; it needs that sum nonzero everywhere: NOLA).
"""
import warnings

import numpy as np

import ember

from .. import fft
from .creation import _computed


_RECTANGULAR = {
    "stft": "A window was not provided. A rectangular window will be applied,which is known to "
            "cause spectral leakage. Other windows such as torch.hann_window or "
            "torch.hamming_window are recommended to reduce spectral leakage.To suppress this "
            "warning and use a rectangular window, explicitly set `window=torch.ones(n_fft, "
            "device=<device>)`.",
    "istft": "A window was not provided. A rectangular window will be applied.Please provide "
             "the same window used by stft to make the inversion lossless.To suppress this "
             "warning and use a rectangular window, explicitly set `window=torch.ones(n_fft, "
             "device=<device>)`."}


def _centred(x, n):
    """``x`` zero-padded on both sides of its last dim to ``n`` samples, as torch centres a
    window (or a frame) shorter than ``n_fft``."""
    if x.shape[-1] == n:
        return x
    left = (n - x.shape[-1]) // 2
    return ember.nn.functional.pad(x, (left, n - x.shape[-1] - left))


def _window(window, win_length, n_fft, like, who):
    """The window as ``n_fft`` samples: ``window`` (ones when None, with torch's warning),
    centred."""
    if window is None:
        warnings.warn(_RECTANGULAR[who], UserWarning, stacklevel=3)
        window = ember.ones(win_length, dtype=like.real.dtype if like.is_complex() else
                            like.dtype, device=like.device)
    elif window.dim() != 1 or window.shape[0] != win_length:
        if who == "stft":
            raise RuntimeError(f"stft: expected a 1D window tensor of size equal to "
                               f"win_length={win_length}, but got window with size "
                               f"{list(window.shape)}")
        raise RuntimeError("istft(): Invalid window shape. window has to be 1D and length of "
                           "`win_length`")
    return _centred(window, n_fft)


def stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True,
         pad_mode="reflect", normalized=False, onesided=None, return_complex=None,
         align_to_window=None):
    """The short-time Fourier transform: the spectrum of each ``window``-ed frame of
    ``n_fft`` samples, frames ``hop_length`` apart (default ``n_fft // 4``).

    ``input`` is a signal ``(L,)`` or a batch ``(B, L)``; the result is ``(n_freq,
    n_frames)`` (with ``B`` in front), ``n_freq = n_fft // 2 + 1`` for a real signal and
    window (``onesided``), else ``n_fft``. ``center`` pads ``n_fft // 2`` samples on each side
    (``pad_mode``), so frame ``t`` is centred on sample ``t * hop_length``. ``normalized``
    scales by ``n_fft ** -0.5``. A real input must say ``return_complex``; False returns
    ``view_as_real`` of the result (deprecated in torch too). ``align_to_window`` (with
    ``center=False`` only) frames the signal by the window, not by ``n_fft``: a window
    shorter than ``n_fft`` starts at sample ``t * hop_length``, zero-padded around.

    Example:
        >>> x = ember.arange(8.)
        >>> ember.stft(x, 4, hop_length=2, window=ember.ones(4), return_complex=True).shape
        torch.Size([3, 5])
    """
    hop_length = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    complex_fft = input.is_complex() or (window is not None and window.is_complex())
    if return_complex is None:
        if not complex_fft:
            raise RuntimeError("stft requires the return_complex parameter be given for real "
                               "inputs, and will further require that return_complex=True in a "
                               "future PyTorch release.")
        return_complex = True
    if not return_complex:
        warnings.warn("stft with return_complex=False is deprecated. In a future pytorch "
                      "release, stft will return complex tensors for all inputs, and "
                      "return_complex=False will raise an error.", UserWarning, stacklevel=2)
    if center and align_to_window is not None:
        raise RuntimeError("stft align_to_window should only be set when center = false")
    if input.dim() not in (1, 2):
        raise RuntimeError(f"stft: expected a 1D or 2D tensor, but got {input.dim()}D tensor")
    if center:
        # NOTE: torch pads a (1, 1, L) view: reflect padding wants the batch dims in front
        pad = n_fft // 2
        shape = input.shape
        input = ember.nn.functional.pad(input.reshape((1,) * (3 - input.dim()) + tuple(shape)),
                                        (pad, pad), mode=pad_mode)
        input = input.reshape(input.shape[3 - len(shape):])
    length = input.shape[-1]
    if not 0 < n_fft <= length:     # NOTE: torch's wording, though n_fft == length is allowed
        raise RuntimeError(f"stft: expected 0 < n_fft < {length}, but got n_fft={n_fft}")
    if hop_length <= 0:
        raise RuntimeError(f"stft: expected hop_length > 0, but got hop_length={hop_length}")
    if not 0 < win_length <= n_fft:
        raise RuntimeError(f"stft: expected 0 < win_length <= n_fft, but got "
                           f"win_length={win_length}")
    if onesided and complex_fft:
        raise RuntimeError("Cannot have onesided output if window or input is complex")
    onesided = not complex_fft if onesided is None else onesided
    size = win_length if align_to_window else n_fft     # the samples a frame takes
    frames = _centred(input.unfold(-1, size, hop_length) *
                      _window(window, win_length, size, input, "stft"), n_fft)
    norm = "ortho" if normalized else "backward"
    spec = fft.rfft(frames, dim=-1, norm=norm) if onesided else \
        fft.fft(frames, dim=-1, norm=norm)
    spec = spec.transpose(-1, -2)
    return spec if return_complex else ember.view_as_real(spec)


def istft(input, n_fft, hop_length=None, win_length=None, window=None, center=True,
          normalized=False, onesided=None, length=None, return_complex=False):
    """The inverse of :func:`stft`: each frame's inverse transform, windowed and added where
    frames overlap, divided by the overlap-added squared window.

    ``input`` is ``stft(..., return_complex=True)``'s ``(n_freq, n_frames)`` or ``(B,
    n_freq, n_frames)``; the arguments are stft's. ``length`` trims (or zero-pads) the
    signal to that many samples. The window's overlap-added square must be nonzero wherever
    the signal is kept (NOLA), else RuntimeError.

    Example:
        >>> x = ember.randn(64)
        >>> w = ember.hann_window(16)
        >>> s = ember.stft(x, 16, hop_length=4, window=w, return_complex=True)
        >>> bool((ember.istft(s, 16, hop_length=4, window=w, length=64) - x).abs().max() < 1e-5)
        True
    """
    hop_length = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    if not input.is_complex():
        raise RuntimeError("istft requires a complex-valued input tensor matching the output "
                           "from stft with return_complex=True.")
    if input.numel() == 0:
        raise RuntimeError("istft(): input tensor cannot be empty.")
    if input.dim() not in (2, 3):
        # NOTE: torch counts the dims of view_as_real(input)
        raise RuntimeError(f"istft(): expected a tensor with 3 or 4 dimensions, but got "
                           f"{input.dim() + 1}")
    n_freq, n_frames = input.shape[-2:]
    onesided = n_freq != n_fft if onesided is None else onesided
    want = n_fft // 2 + 1 if onesided else n_fft
    if n_freq != want:
        raise RuntimeError(f"istft(): expected the frequency dimension (3rd to the last) of the "
                           f"input tensor to match n_fft{' / 2 + 1' if onesided else ''} when "
                           f"onesided={onesided}, but got {n_freq}")
    if not 0 < hop_length <= win_length:
        raise RuntimeError("istft(): expected 0 < hop_length <= win_length")
    if not 0 < win_length <= n_fft:
        raise RuntimeError("istft(): expected 0 < win_length <= n_fft")
    window = _window(window, win_length, n_fft, input, "istft")
    frames = input.transpose(-1, -2)                    # (..., n_frames, n_freq)
    norm = "ortho" if normalized else "backward"
    if return_complex:
        if onesided:
            raise RuntimeError("Cannot have onesided output if window or input is complex")
        frames = fft.ifft(frames, dim=-1, norm=norm)
    else:
        if window.is_complex():
            raise RuntimeError("Complex windows are incompatible with return_complex=False")
        if not onesided:
            frames = frames[..., :n_fft // 2 + 1]
        frames = fft.irfft(frames, n=n_fft, dim=-1, norm=norm)
    total = n_fft + hop_length * (n_frames - 1)
    y = _overlap_add(frames * window, hop_length, total)
    envelope = _overlap_add((window * window).expand(n_frames, n_fft), hop_length, total)
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else total - n_fft // 2 if center else total
    y, envelope = y[..., start:end], envelope[start:end]
    if bool((envelope.abs() < 1e-11).any()):
        raise RuntimeError(f"istft(): window overlap add min: "
                           f"{float(envelope.abs().min()):g}")
    y = y / envelope
    if end > total:
        warnings.warn("The length of signal is shorter than the length parameter. Result is "
                      "being padded with zeros in the tail. Please check your center and "
                      "hop_length settings.", UserWarning, stacklevel=2)
        y = ember.nn.functional.pad(y, (0, end - total))
    return y


def _overlap_add(frames, hop, total):
    """``(..., n_frames, n)`` frames added into a ``(..., total)`` signal, frame ``t`` at
    sample ``t * hop`` (unfold's adjoint)."""
    n_frames, n = frames.shape[-2:]
    pos = (ember.arange(n_frames, device=frames.device).unsqueeze(1) * hop +
           ember.arange(n, device=frames.device)).reshape(-1)
    lead = frames.shape[:-2]
    out = ember.zeros(lead + (total,), dtype=frames.dtype, device=frames.device)
    return out.index_add(-1, pos, frames.reshape(lead + (n_frames * n,)))


# ---- windows ----------------------------------------------------------------------------------


def _window_fn(name, formula):
    """``ember.<name>(window_length, periodic=True, *params, dtype=None, layout=None,
    device=None, requires_grad=False)``: ``formula(n, N, *params)`` over the sample numbers
    ``n`` of a symmetric window of ``N`` samples, computed in float64 (NumPy). A periodic
    window is the symmetric one of ``window_length + 1`` samples without its last, as an FFT
    frame wants."""
    def window(window_length, periodic=True, *params, dtype=None, layout=None, device=None,
               pin_memory=False, requires_grad=False):
        dt = ember.get_default_dtype() if dtype is None else dtype
        if not dt.is_floating_point:
            raise RuntimeError(f"{name} expects floating point dtypes, got: {dt}")
        if window_length < 0:
            raise RuntimeError(f"{name} requires non-negative window_length, got "
                               f"window_length={window_length}")
        N = window_length + 1 if periodic else window_length
        return _computed((window_length,), lambda: np.ones(window_length) if window_length <= 1
                         else formula(np.arange(N, dtype=np.float64), N, *params)[:window_length],
                         dt, device, requires_grad)
    window.__name__ = window.__qualname__ = name
    return window


def _hamming(n, N, alpha=0.54, beta=0.46):
    return alpha - beta * np.cos(2 * np.pi * n / (N - 1))


def _kaiser(n, N, beta=12.0):
    half = (N - 1) / 2
    return np.i0(beta * np.sqrt(np.maximum(1 - ((n - half) / half) ** 2, 0))) / np.i0(beta)


hann_window = _window_fn("hann_window", lambda n, N: _hamming(n, N, 0.5, 0.5))
hann_window.__doc__ = """The Hann window, ``0.5 - 0.5 cos(2 pi n / (N - 1))``.

    Example:
        >>> ember.hann_window(4)
        tensor([0.0000, 0.5000, 1.0000, 0.5000])
    """
hamming_window = _window_fn("hamming_window", _hamming)
hamming_window.__doc__ = """The generalised Hamming window, ``alpha - beta cos(2 pi n / (N -
    1))`` (``alpha=0.54, beta=0.46`` after ``periodic``)."""
blackman_window = _window_fn("blackman_window", lambda n, N: 0.42 - 0.5 * np.cos(
    2 * np.pi * n / (N - 1)) + 0.08 * np.cos(4 * np.pi * n / (N - 1)))
blackman_window.__doc__ = """The Blackman window, ``0.42 - 0.5 cos(2 pi n / (N - 1)) + 0.08
    cos(4 pi n / (N - 1))``."""
bartlett_window = _window_fn("bartlett_window", lambda n, N: 1 - np.abs(2 * n / (N - 1) - 1))
bartlett_window.__doc__ = """The Bartlett (triangular) window, ``1 - |2 n / (N - 1) - 1|``."""
kaiser_window = _window_fn("kaiser_window", _kaiser)
kaiser_window.__doc__ = """The Kaiser window, ``I0(beta sqrt(1 - ((n - c) / c)^2)) / I0(beta)``
    with ``c = (N - 1) / 2`` (``beta=12.0`` after ``periodic``)."""


FUNCTIONS = {f.__name__: f for f in (stft, istft, hann_window, hamming_window, blackman_window,
                                     bartlett_window, kaiser_window)}
METHODS = {"stft": stft, "istft": istft}
