"""fft.h (the complex64 mixed-radix FFT behind ember.fft's float32 transforms) against the NumPy
reference path (pocketfft) and torch: every transform, lengths of every radix it takes and ones
it leaves to NumPy, zero-padding and cutting, non-contiguous and transposed inputs, each norm,
edge values, forward and backward (the backward's one-pass adjoint included), 1 and 2 threads."""
import numpy as np
import pytest

import ember
from ember._C import kernels

pytestmark = [pytest.mark.skipif(kernels.kernel("fft_c2c", np.dtype(np.float32)) is None,
                                 reason="C kernels not built, or EMBER_NO_C set"),
              pytest.mark.usefixtures("threads")]

FNS = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
HALF = ("irfft", "hfft")                          # complex (one-sided) input


def _input(name, shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    if name.startswith(HALF) or name.startswith(("fft", "ifft")) and seed % 2:
        x = (x + 1j * rng.standard_normal(shape)).astype(np.complex64)
    return x


def _check(fn, x, **kw):
    fast = fn(ember.tensor(x), **kw).numpy()
    with kernels.disabled():
        ref = fn(ember.tensor(x), **kw).numpy()
    assert fast.dtype == ref.dtype and fast.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    np.testing.assert_allclose(fast, ref, rtol=2e-5, atol=2e-6 * scale)
    return fast


# every kind of radix (4, 2, 3, 5, 7, the odd primes to 251 and their mixes), lengths fft.h
# leaves to NumPy (a prime factor above 251, short), 1
LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 16, 17, 30, 61, 64, 67, 105, 840, 1024, 1037,
           1145, 251, 257, 4099]


@pytest.mark.parametrize("name", FNS)
@pytest.mark.parametrize("n", LENGTHS)
def test_lengths_1d(name, n):
    x = _input(name, (3, n), seed=n)
    if n > 1 or name not in HALF:                   # (irfft of one bin: 0 points, an error)
        _check(getattr(ember.fft, name), x)
    _check(getattr(ember.fft, name), x, n=n + 3, norm="ortho")    # zero-padded
    if n > 2:
        _check(getattr(ember.fft, name), x, n=n - 1, norm="forward")      # cut


@pytest.mark.parametrize("name", FNS)
@pytest.mark.parametrize("arity", ["2", "n"])
def test_multi_dim(name, arity):
    fn = getattr(ember.fft, name + arity)
    for shape, kw in [((6, 10), {}), ((3, 5, 12), dict(dim=(0, 2), norm="ortho")),
                      ((4, 7, 6), {}), ((3, 5, 8), dict(dim=(1, 2), norm="forward")),
                      ((2, 45, 64), {}), ((70, 66), dict(s=(64, 70), norm="ortho")),
                      ((4, 6, 9), dict(s=(5, 8), norm="forward")),
                      ((40, 33), dict(dim=(1, 0))), ((2, 7, 16), dict(s=(3, 14))),
                      ((20, 229), {})]:
        if arity == "2" and len(kw.get("dim", (0, 1))) != 2:
            continue
        x = _input(name, shape, seed=len(shape))
        _check(fn, x, **kw)
        _check(fn, np.ascontiguousarray(x.swapaxes(0, -1)).swapaxes(0, -1), **kw)  # strided
        _check(fn, x[..., ::2], **kw)                                               # a view


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft"])
def test_large_and_batched(name):
    # long lines (blocks of fewer lines), many short lines (full blocks and a partial one)
    # and a long prime (Bluestein's convolution of two smooth transforms; of the half of a real
    # transform's 2 * 65537 points)
    for shape in [(2, 1 << 16), (37, 360), (1000, 12), (2, 65537), (2, 131074)]:
        _check(getattr(ember.fft, name), _input(name, shape, seed=3))
        _check(getattr(ember.fft, name), _input(name, shape, seed=3), dim=0)


def test_edge_values():
    x = np.array([0.0, -0.0, 1e-40, -1e-40, 3.4e38, 1.0, np.inf, 2.0], np.float32)
    fast = ember.fft.fft(ember.tensor(x)).numpy()
    with kernels.disabled():
        ref = ember.fft.fft(ember.tensor(x)).numpy()
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(ref))   # inf spreads as NumPy's
    y = np.array([1e-40, -0.0, 5e-39, 0.0], np.float32)               # denormals stay exact
    _check(ember.fft.fft, y)
    _check(ember.fft.rfft, np.full(8, np.nan, np.float32))
    for fn in (ember.fft.rfft, ember.fft.fft, ember.fft.ihfft):      # real transforms' splits
        z = np.stack([x, x[::-1]])
        fast = fn(ember.tensor(z)).numpy()
        with kernels.disabled():
            ref = fn(ember.tensor(z)).numpy()
        for part in (np.real, np.imag):
            np.testing.assert_array_equal(np.isnan(part(fast)), np.isnan(part(ref)))
    z = np.zeros((3, 1400), np.float32)
    z[1, 7] = np.inf                       # a real input's fft2 with an inf: the complex one's
    np.testing.assert_array_equal(ember.fft.fft2(ember.tensor(z)).numpy(),
                                  ember.fft.fft2(ember.tensor(z.astype(np.complex64))).numpy())


@pytest.mark.parametrize("name", FNS)
def test_backward(name):
    # the one-pass adjoint (no create_graph) against the ember-ops one and torch's gradient
    torch = pytest.importorskip("torch")
    x = _input(name, (5, 12), seed=1)
    for kw in [{}, dict(n=9, norm="ortho"), dict(n=16, dim=0, norm="forward")]:
        grads = []
        for create in (False, True):
            t = ember.tensor(x, requires_grad=True)
            y = getattr(ember.fft, name)(t, **kw)
            g = ember.tensor(_input("hfft" if y.is_complex() else "rfft", tuple(y.shape), 2))
            grads.append(ember.autograd.grad(y, t, g, create_graph=create)[0].detach().resolve_conj().numpy())
        tt = torch.tensor(x, requires_grad=True)
        ty = getattr(torch.fft, name)(tt, **kw)
        tg = torch.autograd.grad(ty, tt, torch.tensor(g.numpy()))[0].resolve_conj().numpy()
        np.testing.assert_allclose(grads[0], grads[1], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(grads[0], tg, rtol=1e-4, atol=1e-4)


def test_large_shifts():
    # from PAR_MIN elements a shift is block copies over threads (par_copy): every dim, one dim,
    # a repeated dim, a transposed input, against NumPy's roll
    x = np.arange(700 * 300, dtype=np.float32).reshape(700, 300)
    for a in (x, x.T):
        for dim in (None, 0, (1,), (1, 1), (-1, 0)):
            for name, sign in (("fftshift", 1), ("ifftshift", -1)):
                dims = range(a.ndim) if dim is None else [dim] if isinstance(dim, int) else dim
                ref = np.roll(a, [sign * (a.shape[d] // 2) for d in dims], list(dims))
                out = getattr(ember.fft, name)(ember.tensor(a), dim=dim)
                assert out.is_contiguous()
                np.testing.assert_array_equal(out.numpy(), ref)
