"""special.h (torch.special's functions in C) against the NumPy references it ports
(ember/_ops/polynomials.py, bessel.py): float32 and float64, edge values (nan, +-inf, +-0,
negative, huge, denormal), odd sizes, non-contiguous and broadcast inputs, 1 and 2 threads."""
import numpy as np
import pytest

import ember
from ember._C import kernels

pytestmark = [pytest.mark.skipif(kernels.kernel("special", np.dtype(np.float64)) is None,
                                 reason="C kernels not built, or EMBER_NO_C set"),
              pytest.mark.usefixtures("threads")]

S = ember.special
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 2.09, -2.09, 5.0, -5.0, 8.0, 1e-6, 1e-3, 30.0,
         -40.0, 103.0, 110.0, 700.0, 800.0, 1e10, -1e10, 1e300, 5e-324, np.nan, np.inf, -np.inf]
# (the polynomials' results, a recurrence of the same roundings, agree bit for bit; the
# Bessel functions call libm's exp, log, sin and cos where NumPy may use its own)
TOL = {"float32": dict(rtol=3e-7, atol=1e-37), "float64": dict(rtol=1e-14, atol=1e-300)}


def _inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    r = np.concatenate([rng.standard_normal(4999) * 6, rng.uniform(-1.2, 1.2, 1001), EDGES])
    with np.errstate(over="ignore"):      # (1e300 is inf in float32)
        return r.astype(dtype)


def _check(fn, *arrays, exact=False):
    fast = fn(*[ember.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays]).numpy()
    with kernels.disabled():
        ref = fn(*[ember.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays]).numpy()
    assert fast.dtype == ref.dtype and fast.shape == ref.shape
    if exact:
        np.testing.assert_array_equal(fast, ref)
    else:
        np.testing.assert_allclose(fast, ref, **TOL[fast.dtype.name])


POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
         "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
         "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
         "laguerre_polynomial_l", "legendre_polynomial_p"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", POLYS)
def test_polynomials(name, dtype):
    fn = getattr(S, name)
    x = _inputs(dtype)
    degrees = np.array([0, 1, 2, 3, 7, 12, 30, -1, -3, 2.7, np.nan, np.inf, -np.inf, 1e19])
    n = np.resize(degrees, x.shape).astype(dtype)
    _check(fn, x, n, exact=True)
    _check(fn, x[::3], n[1::3], exact=True)                    # non-contiguous
    _check(fn, x[:35].reshape(5, 7), n[:7], exact=True)         # broadcast degree
    _check(fn, x[:7], n[:35].reshape(5, 7), exact=True)         # broadcast input
    for k in (0, 1, 5, 40, -2):                                 # a number, a 0-d tensor
        _check(fn, x, k, exact=True)
    _check(fn, x, np.array(6.0, dtype), exact=True)
    _check(fn, x[:0], n[:0], exact=True)


BESSEL = ["i0", "i0e", "i1", "i1e", "modified_bessel_i0", "modified_bessel_i1",
          "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0",
          "scaled_modified_bessel_k1", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
          "airy_ai", "spherical_bessel_j0"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", BESSEL)
def test_bessel(name, dtype):
    fn = getattr(S, name)
    x = _inputs(dtype, seed=1)
    _check(fn, x)
    _check(fn, x[::2])                                          # non-contiguous
    _check(fn, x[:1])
    _check(fn, x[:33].reshape(3, 11).T)
    _check(fn, np.abs(x) * 4)                                   # the K and Y domains, far out


def test_special_kernel_declines():
    """Where special.h does not apply the caller's NumPy code runs (None)."""
    x = np.ones(4, np.float32)
    assert kernels.special("sinc", x) is None                     # not one of its ops
    assert kernels.special("i0", x.astype(np.float16)) is None
    assert kernels.special("chebyshev_polynomial_t", x) is None               # no degree
    assert kernels.special("igamma", x) is None and kernels.special("i0", x, x) is None
    assert kernels.special("chebyshev_polynomial_t", x, np.ones(4)) is None     # other dtype
    assert kernels.special("chebyshev_polynomial_t", x, 2 ** 40 + 1) is None    # not a float32
    np.testing.assert_array_equal(kernels.special("chebyshev_polynomial_t", x, 3), np.ones(4))


NORMAL_GAMMA = ["erfcx", "ndtr", "log_ndtr", "ndtri", "lgamma", "digamma"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NORMAL_GAMMA)
def test_normal_and_gamma(name, dtype):
    if dtype == "float32" and name in ("lgamma", "digamma", "ndtri"):
        pytest.skip("float32 runs pointwise.h's loop (tests/test_kernels.py)")
    fn = getattr(S, name) if hasattr(S, name) else getattr(ember, name)
    x = _inputs(dtype, seed=2)
    x = np.concatenate([x, [-3.0, -2.5, -1e-300, 1.5, 3.0, 6.0, 26.0, 1e9, -1e9]]).astype(dtype)
    _check(fn, x)
    _check(fn, x[::3])
    _check(fn, np.random.default_rng(3).uniform(0, 1, 1001).astype(dtype))     # ndtri's domain
    _check(fn, np.concatenate([x[:9], [0.0, 1.0, 1e-20, 1 - 1e-12]]).astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gamma_family_float64_users(dtype):
    x = np.abs(_inputs(dtype, seed=4))[:3000] + 0.25
    _check(lambda t: ember.mvlgamma(t, 3), x)
    _check(lambda t: ember.polygamma(0, t), x)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_igamma(name, dtype):
    fn = getattr(ember, name)
    rng = np.random.default_rng(5)
    a = np.concatenate([rng.uniform(0, 50, 3000), rng.uniform(0, 3, 1000), [2e6, 3e7, 5e6]])
    x = np.concatenate([rng.uniform(0, 60, 3000), rng.uniform(0, 4, 1000), [2.1e6, 3e7, 4.9e6]])
    # (where the reference's loop keeps stepping converged elements, its last bits follow the
    # other elements of the array; the kernel stops each at convergence)
    tol = dict(rtol=1e-13, atol=1e-300) if dtype == "float64" else dict(rtol=3e-7, atol=1e-37)
    for a_, x_ in ((a, x), (a[:-1:2], x[1::2]), (a[:8].reshape(8, 1), x[:5]), (a[:30], np.array(2.5))):
        a_ = a_.astype(dtype)
        x_ = x_.astype(dtype) if isinstance(x_, np.ndarray) else x_
        fast = fn(ember.tensor(a_), ember.tensor(x_) if isinstance(x_, np.ndarray) else x_)
        with kernels.disabled():
            ref = fn(ember.tensor(a_), ember.tensor(x_) if isinstance(x_, np.ndarray) else x_)
        np.testing.assert_allclose(fast.numpy(), ref.numpy(), **tol)
    edges = np.array([0.0, -1.0, np.inf, -np.inf, np.nan, 1.0, 1e-300, 3.0], dtype)
    _check(fn, *np.meshgrid(edges, edges))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_zeta_and_polygamma(dtype):
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.uniform(0.5, 8, 2000), [1.0, 0.9, 2.0, 3.0, 2.5, 2.0, np.nan, np.inf]])
    q = np.concatenate([rng.uniform(-3, 12, 2000), [1.0, 1.0, 0.0, -2.0, -1.5, 1e-300, 1.0, 2.0]])
    _check(S.zeta, x.astype(dtype), q.astype(dtype))
    _check(S.zeta, x[:-1:2].astype(dtype), q[1::2].astype(dtype))
    _check(S.zeta, x[:6].reshape(6, 1).astype(dtype), q[:7].astype(dtype))
    _check(S.zeta, x.astype(dtype), 2.0)
    v = np.concatenate([rng.uniform(-6, 12, 2000), [0.0, -1.0, -2.5, 1e-8, 30.0, np.nan, np.inf]])
    for n in (1, 2, 3, 6):
        _check(lambda t: ember.polygamma(n, t), v.astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_standard_gamma_grad(dtype):
    rng = np.random.default_rng(7)
    alpha = np.concatenate([rng.uniform(0.05, 50, 3000), [0.0, -1.0, -0.5, 9.0, 10.0, np.nan]])
    x = np.concatenate([rng.uniform(0.01, 60, 3000), [0.5, 0.5, 0.3, 9.0, 10.5, 1.0]])
    _check(ember._standard_gamma_grad, alpha.astype(dtype), x.astype(dtype))
    _check(ember._standard_gamma_grad, alpha[:-1:2].astype(dtype), x[1::2].astype(dtype))


def _ulps(fast, ref):
    """|fast - ref| in units of the last place of float32 at ref (ref: float64 values)."""
    with np.errstate(over="ignore", invalid="ignore"):     # (float64 values beyond float32)
        r32 = ref.astype(np.float32)
        ulp = np.spacing(np.maximum(np.abs(r32), np.float32(2.0 ** -126))).astype(np.float64)
        err = np.abs(fast.astype(np.float64) - ref) / ulp
    same = (fast == r32) | (np.isnan(fast) & np.isnan(ref))
    return np.where(same, 0.0, err)


# float32's own evaluations (vecmath.h's functions in double, fewer Chebyshev terms): the most
# ulps from the float64 values measured on grids of 4M points (0.51: the rounded value, off by
# a hair where the double is within 1e-16 of a tie)
F32_ULPS = {"ndtr": (-16, 10, 2.3), "log_ndtr": (-1e19, 12, 2.3), "i0": (-90, 90, 0.51),
            "i0e": (-1e4, 1e4, 0.51), "i1": (-90, 90, 0.51), "i1e": (-1e4, 1e4, 0.51),
            "bessel_j0": (-1e8, 1e8, 0.51), "bessel_j1": (-200, 200, 0.51),
            "bessel_y0": (0, 200, 0.51), "bessel_y1": (0, 1e8, 0.51),
            "spherical_bessel_j0": (-1e7, 1e7, 0.51), "gammaln": (-1e7, 3e38, 0.51),
            "erfcx": (-12, 3e38, 2.3),
            "digamma": (-1e7, 3e38, 0.51)}


@pytest.mark.parametrize("name", sorted(F32_ULPS))
def test_float32_within_ulps_of_float64(name):
    lo, hi, most = F32_ULPS[name]
    bits = lambda v: np.float32(v).view(np.int32)      # noqa: E731  (a grid dense in ulps)
    x = np.linspace(0, bits(hi), 100_000).astype(np.int32).view(np.float32)
    if lo < 0:
        x = np.concatenate([x, -np.linspace(0, bits(-lo), 100_000).astype(np.int32).view(
            np.float32)])
    edges = [v for v in EDGES if abs(v) < 3e38] + [1e-45, -1e-45, 3e38, -3e38, np.nan, np.inf,
                                                   -np.inf]
    x = np.concatenate([x, np.array(edges, np.float32)])
    fn = getattr(S, name)
    fast = fn(ember.tensor(x)).numpy()
    ref = fn(ember.tensor(x.astype(np.float64))).numpy()
    if name == "gammaln":   # (0 exactly: the float64 Lanczos sum is 1e-15 off there)
        ref = np.where((x == 1) | (x == 2), 0.0, ref)
    assert _ulps(fast, ref).max() <= most
    assert _ulps(fn(ember.tensor(x[::3])).numpy(), ref[::3]).max() <= most     # non-contiguous


def test_mvlgamma_and_polygamma_codes():
    x = np.abs(_inputs("float64", seed=8))[:2000] + 0.25
    for dtype in ("float32", "float64"):
        for p in (1, 2, 5):
            _check(lambda t: ember.mvlgamma(t, p), x.astype(dtype)[::2])
        _check(lambda t: ember.polygamma(4, t), x.astype(dtype).reshape(40, 50).T)
        _check(lambda t: ember.polygamma(2, t), np.array(1.5, dtype))
