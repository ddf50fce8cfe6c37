"""torch.stft / torch.istft (ember/_ops/spectral.py) against torch: values over the argument
combinations, gradients through both, the round trip, and torch's errors."""
import warnings

import numpy as np
import pytest

import ember
from oracle import assert_close, same, torch

SIG = np.random.default_rng(0).standard_normal((2, 50))
CSIG = SIG + 1j * np.random.default_rng(1).standard_normal((2, 50))


def _stft(lib, x, n_fft, window=None, **kw):
    w = None if window is None else getattr(lib, window + "_window")(
        kw.pop("win_length", n_fft), dtype=lib.float64)
    if w is not None and "win_length" not in kw:
        kw["win_length"] = w.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lib.stft(lib.tensor(x), n_fft, window=w, **kw)


STFT = {
    "1-D, defaults": (SIG[0], 16, None, {}),
    "batch, hann, hop 3": (SIG, 16, "hann", {"hop_length": 3}),
    "short window centred": (SIG, 16, "hann", {"win_length": 9, "hop_length": 4}),
    "not centred": (SIG, 12, "hamming", {"center": False, "hop_length": 5}),
    "constant pad, normalized": (SIG[1], 10, None, {"pad_mode": "constant",
                                                    "normalized": True}),
    "replicate pad": (SIG, 8, "hann", {"pad_mode": "replicate", "hop_length": 2}),
    "two-sided": (SIG, 16, "hann", {"onesided": False}),
    "odd n_fft": (SIG[0], 15, "hann", {"hop_length": 4}),
    "complex signal": (CSIG, 16, "hann", {}),
    "n_fft equals the length": (SIG[0, :16], 16, None, {"center": False}),
    "aligned to the window": (SIG, 16, "hann", {"win_length": 9, "hop_length": 4,
                                                "center": False, "align_to_window": True}),
    "not aligned": (SIG, 16, "hann", {"win_length": 9, "hop_length": 4, "center": False,
                                      "align_to_window": False}),
}


@pytest.mark.parametrize("name", STFT)
@pytest.mark.parametrize("as_complex", [True, False])
def test_stft_matches_torch(name, as_complex):
    x, n_fft, window, kw = STFT[name]
    if not as_complex and np.iscomplexobj(x):
        pytest.skip("a complex signal has no real view to compare")
    e = _stft(ember, x, n_fft, window, return_complex=as_complex, **kw)
    t = _stft(torch, x, n_fft, window, return_complex=as_complex, **kw)
    assert tuple(e.shape) == tuple(t.shape) and e.dtype.is_complex == t.dtype.is_complex
    assert_close(e, t)


ISTFT = {
    "defaults": (SIG[0], 16, None, {}),
    "hann, hop 4, batch": (SIG, 16, "hann", {"hop_length": 4}),
    "length shorter": (SIG, 16, "hann", {"hop_length": 4, "length": 45}),
    "length longer (zero tail)": (SIG[0], 16, "hann", {"hop_length": 4, "length": 60}),
    "short window": (SIG, 16, "hann", {"win_length": 12, "hop_length": 3}),
    "not centred": (SIG, 12, None, {"center": False, "hop_length": 6}),
    "normalized": (SIG, 16, "hann", {"normalized": True, "hop_length": 4}),
    "two-sided input": (SIG, 16, "hann", {"onesided": False, "hop_length": 4}),
}


@pytest.mark.parametrize("name", ISTFT)
def test_istft_matches_torch_and_inverts(name):
    x, n_fft, window, kw = ISTFT[name]
    skw = {k: v for k, v in kw.items() if k not in ("length",)}
    results = []
    for lib in (ember, torch):
        spec = _stft(lib, x, n_fft, window, return_complex=True, **skw)
        ikw = dict(kw)
        win_length = ikw.pop("win_length", n_fft)
        w = None if window is None else getattr(lib, window + "_window")(
            win_length, dtype=lib.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results.append(lib.istft(spec, n_fft, window=w, win_length=win_length, **ikw))
    e, t = results
    assert tuple(e.shape) == tuple(t.shape)
    assert_close(e, t)
    keep = min(x.shape[-1], e.shape[-1])
    if kw.get("center", True) and "length" not in kw or kw.get("length", 0) <= x.shape[-1]:
        np.testing.assert_allclose(e.numpy()[..., :keep], x[..., :keep], atol=1e-10)


def test_istft_complex_output():
    spec = _stft(ember, CSIG, 16, "hann", return_complex=True)
    y = ember.istft(spec, 16, window=ember.hann_window(16, dtype=ember.float64),
                    return_complex=True, length=50)
    np.testing.assert_allclose(y.numpy(), CSIG, atol=1e-10)


def test_gradients_through_stft_and_istft():
    w = ember.hann_window(8, dtype=ember.float64)

    def f(x):
        s = ember.stft(x, 8, hop_length=2, window=w, return_complex=True)
        return (s.abs() ** 2).sum(-1), ember.istft(s * 1.5, 8, hop_length=2, window=w)

    x = ember.tensor(SIG[:, :20], requires_grad=True)
    assert ember.autograd.gradcheck(lambda x: f(x)[0], (x,))
    assert ember.autograd.gradcheck(lambda x: f(x)[1], (x,))
    tx = torch.tensor(SIG[:, :20], requires_grad=True)
    tw = torch.hann_window(8, dtype=torch.float64)
    ts = torch.stft(tx, 8, hop_length=2, window=tw, return_complex=True)
    ((ts.abs() ** 2).sum() + torch.istft(ts * 1.5, 8, hop_length=2, window=tw).sum()).backward()
    ex = ember.tensor(SIG[:, :20], requires_grad=True)
    a, b = f(ex)
    (a.sum() + b.sum()).backward()
    assert_close(ex.grad, tx.grad)


def test_methods_and_the_rectangular_window_warning():
    x = ember.tensor(SIG[0])
    with pytest.warns(UserWarning, match="window was not provided"):
        s = x.stft(16, return_complex=True)
    with pytest.warns(UserWarning, match="window was not provided"):
        assert s.istft(16).shape == (48,)


ERRORS = {
    "return_complex missing": (lambda T: T.stft(T.ones(20), 8), "return_complex parameter"),
    "n_fft too long": (lambda T: T.stft(T.ones(10), 20, center=False, return_complex=True),
                       r"expected 0 < n_fft < 10, but got n_fft=20"),
    "hop 0": (lambda T: T.stft(T.ones(50), 8, hop_length=0, return_complex=True),
              "expected hop_length > 0, but got hop_length=0"),
    "win_length": (lambda T: T.stft(T.ones(50), 8, win_length=9, return_complex=True),
                   r"expected 0 < win_length <= n_fft, but got win_length=9"),
    "window size": (lambda T: T.stft(T.ones(50), 8, window=T.ones(3), return_complex=True),
                    r"window tensor of size equal to win_length=8, but got window with size "
                    r"\[3\]"),
    "align with center": (lambda T: T.stft(T.ones(50), 8, align_to_window=True,
                                           return_complex=True), "only be set when center"),
    "3-D signal": (lambda T: T.stft(T.ones(2, 2, 50), 8, return_complex=True),
                   "expected a 1D or 2D tensor"),
    "onesided complex": (lambda T: T.stft(T.ones(50, dtype=T.complex64), 8, onesided=True),
                         "Cannot have onesided output"),
    "istft of real": (lambda T: T.istft(T.ones(5, 4), 8), "complex-valued input"),
    "istft freq bins": (lambda T: T.istft(T.ones(4, 4, dtype=T.complex64), 8),
                        r"match n_fft / 2 \+ 1 when onesided=True, but got 4"),
    "istft hop": (lambda T: T.istft(T.ones(5, 4, dtype=T.complex64), 8, hop_length=9),
                  r"expected 0 < hop_length <= win_length"),
    "istft NOLA": (lambda T: T.istft(T.ones(5, 4, dtype=T.complex64), 8, window=T.zeros(8)),
                   "window overlap add min"),
    "istft dims": (lambda T: T.istft(T.ones(1, 2, 5, 4, dtype=T.complex64), 8),
                   r"expected a tensor with 3 or 4 dimensions"),
}


@pytest.mark.parametrize("name", ERRORS)
def test_errors_match_torch(name):
    fn, match = ERRORS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(fn, match)


WINDOWS = {
    "hann": lambda T: [T.hann_window(9), T.hann_window(8, periodic=False), T.hann_window(1),
                       T.hann_window(0), T.hann_window(5, dtype=T.float64)],
    "hamming": lambda T: [T.hamming_window(7), T.hamming_window(7, False),
                          T.hamming_window(6, True, 0.6, 0.3)],
    # (float64: torch's float32 sums round its zero ends to -3e-8, ember's to -1e-17)
    "blackman": lambda T: [T.blackman_window(10, dtype=T.float64),
                           T.blackman_window(10, False, dtype=T.float64)],
    "bartlett": lambda T: [T.bartlett_window(5), T.bartlett_window(6, False),
                           T.bartlett_window(1)],
    "kaiser": lambda T: [T.kaiser_window(8), T.kaiser_window(7, False, 5.0),
                         T.kaiser_window(1)],
    "requires_grad": lambda T: T.hann_window(4, requires_grad=True).requires_grad,
    "int dtype": lambda T: T.hann_window(4, dtype=T.int64),
    "negative length": lambda T: T.kaiser_window(-1),
}


@pytest.mark.parametrize("name", WINDOWS)
def test_windows_match_torch(name):
    same(WINDOWS[name])
