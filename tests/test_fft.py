"""ember.fft beyond the registry: the namespace and the frequency helpers (the transforms and
shifts are OpDefs, tested from their samples in test_ops.py and test_gradcheck.py)."""
import pytest

import ember
from oracle import same, torch


def test_namespace_has_every_torch_fft_function():
    missing = [n for n in torch.fft.__all__ if n != "Tensor" and not hasattr(ember.fft, n)]
    assert not missing, f"ember.fft lacks {missing}"


@pytest.mark.parametrize("fn", ["fftfreq", "rfftfreq"])
def test_frequencies_match_torch(fn):
    for n, d in [(1, 1.0), (5, 1.0), (8, 0.1), (7, 2)]:
        same(lambda lib: getattr(lib.fft, fn)(n, d))
    same(lambda lib: getattr(lib.fft, fn)(6, dtype=lib.float64))
    same(lambda lib: getattr(lib.fft, fn)(4, requires_grad=True).requires_grad)


def test_round_trips_and_grad_through_a_spectrum_filter():
    # a low-pass filter in the frequency domain, differentiated end to end against torch
    def f(lib):
        x = lib.linspace(-1, 1, 16, dtype=lib.float64).reshape(2, 8).requires_grad_()
        spec = lib.fft.rfft(x, norm="ortho")
        y = lib.fft.irfft(spec * (lib.fft.rfftfreq(8, dtype=lib.float64) < 0.3), n=8,
                          norm="ortho")
        back = lib.fft.ifftn(lib.fft.fftn(x)).real
        (y.pow(2).sum() + (back * x).sum()).backward()
        return [y, back, x.grad]
    same(f)
