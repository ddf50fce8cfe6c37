"""Special functions (torch.special and their torch.* names): gamma and its logarithmic
derivatives, Hurwitz zeta, incomplete gamma, the normal distribution's functions, and a few
elementary ones (sinc, logit, entr, xlog1py). The Bessel and Airy functions are in bessel.py.

NumPy has none of these and ember may not use scipy: each is a series, recurrence or
asymptotic expansion evaluated in float64 (torch's own algorithms where its results depend on
them, e.g. Cephes' digamma, trigamma and zeta) and rounded to the input's dtype.
"""
import math

import numpy as np

import ember

from .._C import kernels as _C
from .dispatch import dispatch, dispatch_inplace
from .meta import broadcast_meta, same_meta
from .pointwise import _conj, fused_grad, reject, type_name
from .pointwise_binary import _xlogy_node
from .pointwise_math import _erf_erfc, _erfinv
from .registry import LIBM_ULP, op
from .samples import ErrorSample, Sample, const, make, unary_samples

_SQRT_2PI = math.sqrt(2 * math.pi)
_MACHEP = 1.11022302462515654042e-16


def _in_f64(f, bf16=True, low=False):
    """A forward computed on float64 copies of the array operands (at least 1-d, so the
    algorithms may index them) and rounded back to the (promoted) dtype of the first;
    ``bf16=False`` refuses bfloat16 and float16 as torch's CPU kernels do, ``low=True``
    computes them in their own dtype, rounding each step as torch's kernel does."""
    def fwd(xp, *args, **kwargs):
        dt = next(a.dtype for a in args if hasattr(a, "dtype"))
        if dt == np.float16 or dt.kind == "V" and dt.itemsize == 2:       # (bfloat16)
            if not bf16:
                raise NotImplementedError(f"\"{f.__name__.strip('_')}_cpu\" not implemented "
                                          f"for '{type_name(dt)}'")
            if low:
                with np.errstate(all="ignore"):
                    return xp.asarray(f(xp, *args, **kwargs)).astype(dt, copy=False)
        shape = np.broadcast_shapes(*(a.shape for a in args if hasattr(a, "shape")))
        args = [xp.atleast_1d(a.astype(np.float64)) if hasattr(a, "dtype") else a for a in args]
        with np.errstate(all="ignore"):
            r = xp.asarray(f(xp, *args, **kwargs))
        return r.reshape(shape).astype(dt, copy=False)
    fwd.__doc__ = f.__doc__
    return fwd


def _in_c(name, f):
    """``f``, computed by special.h's loop for ``name`` where it applies (float64 here)."""
    return lambda xp, x: r if (r := _C.special(name, x)) is not None else f(xp, x)


def _special(name, f, deriv=None, save=("input",), domain=None, method=True, kinks=(),
             aliases=(), binary=False, complex_ok=False, bf16=True, differentiable=True,
             low=False, kernel=None):
    """Register a pointwise special function. ``deriv(g, *saved)`` gives the gradient(s);
    ``method=False`` for the ones torch has only as ``torch.special.<name>``;
    ``differentiable=False`` for those whose results torch never tracks for autograd;
    ``low=True`` for those torch computes in float16/bfloat16 itself (see _in_f64);
    ``kernel`` names pointwise.h's float32 loop that stands in for ``f``."""
    # (refusals checked on the NumPy path only: the kernels take float32/float64 alone)
    inner = reject(name, "b" if complex_ok else "c", _in_f64(f, bf16, low) if not complex_ok
                   else f)
    if binary:
        def fwd(xp, input, other):
            r = kernel and _C.pointwise(kernel, input, other=other)
            return r if r is not None else inner(xp, input, other)
    else:
        def fwd(xp, input):
            if kernel and (r := _C.pointwise(kernel, input)) is not None or \
                    (r := _C.special(name, input)) is not None:     # (special.h's, if any)
                return r
            return inner(xp, input)
    fwd.__doc__ = f.__doc__
    d = op(name if method else f"special_{name}", tags=("pointwise",), promote="float",
           method=method, function=method, inplace=method and not binary,
           aliases=aliases, differentiable=differentiable, opmath=bf16 and not low)(fwd)
    d.public_name = name
    d.half_ulps = LIBM_ULP
    if not method:
        d.torch_fn = f"special.{name}"
    if deriv is not None:
        d.vjp(save=save)(deriv)
    d.meta = broadcast_meta if binary else same_meta
    d.kinks = kinks
    if not binary:
        d.samples = lambda dev, dt: unary_samples(dev, dt, domain) if dt.category != 3 or \
            complex_ok else []
    return d


# ---- gamma and friends ------------------------------------------------------------------------

_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)


def _sinpi(xp, x):
    """sin(pi x), with x reduced to [-1, 1] first (exact, and a tiny x keeps its digits: a
    reduction to [0, 2) turned -1e-17 into 2)."""
    r = x - 2.0 * xp.rint(x / 2.0)
    return xp.sin(math.pi * r)


def _lgamma(xp, x):
    # Lanczos (g = 7) for x >= 0.5, the reflection log(pi / |sin(pi x)|) - lgamma(1 - x) below
    z = xp.where(x < 0.5, 1.0 - x, x) - 1.0
    a = xp.full(x.shape, _LANCZOS[0])
    for i, c in enumerate(_LANCZOS[1:], 1):
        a = a + c / (z + i)
    t = z + 7.5
    r = 0.5 * math.log(2 * math.pi) + (z + 0.5) * xp.log(t) - t + xp.log(a)
    r = xp.where(x < 0.5, math.log(math.pi) - xp.log(xp.abs(_sinpi(xp, x))) - r, r)
    return xp.where(xp.isinf(x) | ((x <= 0) & (x == xp.floor(x))), xp.inf, r)


_PSI_10 = 2.25175258906672110764
_DIGAMMA_A = (8.33333333333333333333e-2, -2.10927960927960927961e-2, 7.57575757575757575758e-3,
              -4.16666666666666666667e-3, 3.96825396825396825397e-3,
              -8.33333333333333333333e-3, 8.33333333333333333333e-2)


def _digamma(xp, x):
    # NOTE: torch's calc_digamma (Cephes): digamma(+-0) = -+inf, nan at negative integers, the
    # reflection through tan(pi * frac(x)) below 0, then pushed to x >= 10 for the series.
    neg = x < 0
    frac = x - xp.trunc(x)
    y = xp.where(neg, 1 - x, x)
    res = xp.zeros(x.shape)
    for _ in range(10):
        small = y < 10
        res = res - xp.where(small, 1 / xp.where(small, y, 1), 0)
        y = xp.where(small, y + 1, y)
    z = 1 / (y * y)
    poly = _DIGAMMA_A[0]
    for c in _DIGAMMA_A[1:]:
        poly = poly * z + c
    tail = xp.where(y < 1e17, z * poly, 0.0)
    r = xp.where(y == 10, res + _PSI_10, res + xp.log(y) - 0.5 / y - tail)
    r = xp.where(neg, r - math.pi / xp.tan(math.pi * frac), r)
    r = xp.where(neg & (frac == 0), xp.nan, r)
    return xp.where(x == 0, xp.copysign(xp.inf, -x), r)


def _trigamma(xp, x):
    # NOTE: torch's calc_trigamma, term for term (its truncated series sets the last digits)
    refl = x < 0.5
    res = xp.where(refl, -(math.pi ** 2) / _sinpi(xp, x) ** 2, 0.0)
    y = xp.where(refl, 1 - x, x)
    for _ in range(6):
        res = res + 1 / (y * y)
        y = y + 1
    ixx = 1 / (y * y)
    res = res + (1 + 1 / (2 * y) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / y
    return xp.where(refl, -res, res)


_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)


def _zeta(xp, x, q):
    """Hurwitz zeta(x, q) = sum_k (k + q)^-x, Cephes' Euler-Maclaurin summation as torch's."""
    x, q = xp.broadcast_arrays(x, q)
    s = xp.power(q, -x)
    a, b = q.copy(), xp.zeros(x.shape)
    done = xp.zeros(x.shape, bool)
    i = 0
    while True:
        go = ~done & ((i < 9) | (a <= 9.0))
        if not go.any():
            break
        i += 1
        a = xp.where(go, a + 1.0, a)
        b = xp.where(go, xp.power(a, -x), b)
        s = xp.where(go, s + b, s)
        done |= go & (xp.abs(b / s) < _MACHEP)
        if i > 10000:
            break
    w = a
    s = xp.where(done, s, s + b * w / (x - 1.0) - 0.5 * b)
    a, k = xp.ones(x.shape), 0.0
    for c in _ZETA_A:
        a = a * (x + k)
        b = b / w
        t = a * b / c
        s = xp.where(done, s, s + t)
        done |= xp.abs(t / s) < _MACHEP
        k += 1.0
        a = a * (x + k)
        b = b / w
        k += 1.0
    s = xp.where((q <= 0) & (x != xp.floor(x)), xp.nan, s)
    s = xp.where((q <= 0) & (q == xp.floor(q)), xp.inf, s)
    return xp.where(x == 1, xp.inf, xp.where(x < 1, xp.nan, s))


_POLES = (-4.0, -3.0, -2.0, -1.0, 0.0)
lgamma = _special("lgamma", _lgamma, lambda g, input: g * ember.digamma(input), kinks=_POLES,
                  kernel="lgamma")
lgamma.half_ulps = (None, "float32 lgammaf differs by many ulps of tiny results near 1, 2")
lgamma.samples = lambda dev, dt: unary_samples(dev, dt, (-3.7, 4.0)) + (
    [Sample(make((6,), dt, 0.5, 30.0, seed=4))] if dt.category == 2 else [])
digamma = _special("digamma", _digamma, lambda g, input: g * ember.polygamma(1, input),
                   kinks=_POLES, kernel="digamma")
digamma.samples = lgamma.samples
lgamma.__doc__ = """``log |Gamma(input)|`` (inf at 0 and the negative integers).

    Example:
        >>> ember.lgamma(ember.tensor([0.5, 3., -1.5]))
        tensor([0.5724, 0.6931, 0.8600])
    """
digamma.__doc__ = """The logarithmic derivative of Gamma, ``Gamma'(x) / Gamma(x)``.

    Example:
        >>> ember.digamma(ember.tensor([1., 0.5]))
        tensor([-0.5772, -1.9635])
    """


@op("polygamma", tags=("pointwise",), promote="float", promote_args=(1,), method=False)
def polygamma(xp, n, input):
    """The ``n``-th derivative of :func:`digamma` (``n = 0`` is digamma itself).

    Example:
        >>> ember.polygamma(1, ember.tensor([1., 2.]))
        tensor([1.6449, 0.6449])
    """
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    # (special.h computes in double and rounds, as _in_f64; order >= 2's factor is libm's there)
    name = "digamma" if n == 0 else "trigamma" if n == 1 else \
        "polygamma" if input.dtype == np.float32 else None
    if n == 0 and (r := _C.pointwise("digamma", input)) is not None:    # (float32's vectorised)
        return r
    if name and (r := _C.special(name, input, n if n > 1 else None)) is not None:
        return r
    return _in_f64(lambda xp, x: _polygamma(xp, n, x))(xp, input)


def _polygamma(xp, n, x):
    if n == 0:
        return _in_c("digamma", _digamma)(xp, x)
    if n == 1:
        return _in_c("trigamma", _trigamma)(xp, x)
    zeta = _C.special("zeta", np.asarray(n + 1.0, x.dtype), x) if type(x) is np.ndarray else None
    return (1.0 if n % 2 else -1.0) * math.exp(math.lgamma(n + 1.0)) * (
        _zeta(xp, n + 1.0, x) if zeta is None else zeta)


polygamma.vjp(save=("input",))(lambda g, n, input: (None, g * ember.polygamma(n + 1, input)))
polygamma.meta = lambda n, x: same_meta(x)
polygamma.samples = lambda dev, dt: [Sample(n, make((3, 4), dt, 0.2, 4.0, seed=n))
                                     for n in (0, 1, 2, 3)] if dt.category == 2 else []
polygamma.errors = [ErrorSample(Sample(-1, const(3)), RuntimeError, "negative n")]


def _polygamma_method(self, n):
    """``ember.polygamma(n, self)`` (the tensor is the second argument of the function).

    Example:
        >>> ember.tensor([1., 2.]).polygamma(1)
        tensor([1.6449, 0.6449])
    """
    return dispatch(polygamma, (n, self), {})


def _polygamma_inplace(self, n):
    """In-place version of :meth:`Tensor.polygamma`."""
    return dispatch_inplace(polygamma, self, (n,), {}, self_at=1)


@op("mvlgamma", tags=("pointwise",), promote="float", inplace=True, promote_args=(0,))
@reject("mvlgamma", "c")
def mvlgamma(xp, input, p):
    """The log of the multivariate gamma function of dimension ``p``:
    ``p(p-1)/4 log(pi) + sum_j lgamma(input - j/2)``.

    Example:
        >>> ember.mvlgamma(ember.tensor([2.5]), 2)
        tensor([0.8570])
    """
    # NOTE: torch no longer checks input > (p - 1) / 2: lgamma's poles give inf there
    if (r := _C.special("mvlgamma", input, p)) is not None:        # (special.h, as below)
        return r
    return _in_f64(lambda xp, x: p * (p - 1) / 4 * math.log(math.pi) + sum(
        _in_c("lgamma", _lgamma)(xp, x - j / 2) for j in range(p)))(xp, input)


mvlgamma.vjp(save=("input",))(lambda g, input, p: g * sum(
    ember.digamma(input - j / 2) for j in range(p)))
mvlgamma.meta = same_meta
mvlgamma.samples = lambda dev, dt: [Sample(make((3, 4), dt, 2.0, 5.0), 3),
                                    Sample(make((5,), dt, 0.5, 3.0), 1)] \
    if dt.category == 2 else []


@op("special_zeta", tags=("pointwise",), promote="float", method=False, function=False,
    opmath=False)       # (no float16/bfloat16 kernel to match: _in_f64 refuses them)
def zeta(xp, input, other):
    """The Hurwitz zeta function ``sum_k (k + other)^-input`` (Riemann's at other = 1).
    See torch.special.zeta."""
    if (r := _C.special("zeta", input, other)) is not None:      # (special.h)
        return r
    return _in_f64(_zeta, bf16=False)(xp, input, other)


zeta.torch_fn, zeta.public_name, zeta.meta = "special.zeta", "zeta", broadcast_meta
zeta.samples = lambda dev, dt: [s.forward_only() for s in _zeta_samples(dev, dt)]
_zeta_samples = lambda dev, dt: [  # noqa: E731  (torch has no derivative for zeta)
    Sample(make((3, 4), dt, 1.1, 6.0), make((3, 4), dt, 0.2, 5.0, seed=1)),
    Sample(make((4,), dt, 1.5, 4.0), make((3, 1), dt, -2.5, 3.0, seed=2)),
    Sample(np.array([1.0, 0.5, 2.0, 3.0, 2.0]).astype(dt.np), np.array(
        [1.0, 1.0, 0.0, -2.0, -1.5]).astype(dt.np))] if dt.category == 2 else []


def _iterate(xp, step, state, n):
    """Run ``state = step(i, state) -> (state, done)`` for i = 1..n on the arrays of ``state``
    (their first is what is returned), each element until its ``done``: converged ones leave
    the working set once they are a quarter of it (a converged element's further steps change
    nothing), so the loop's cost follows the slowest elements."""
    out = state[0].copy()
    where = xp.arange(out.shape[0])
    for i in range(1, n + 1):
        state, done = step(i, state)
        ndone = int(done.sum())
        if ndone == done.shape[0]:
            out[where] = state[0]
            return out
        if 4 * ndone >= done.shape[0]:
            out[where[done]] = state[0][done]
            keep = ~done
            where, state = where[keep], tuple(s[keep] for s in state)
    out[where] = state[0]
    return out


def _igamma(xp, a, x, upper):
    """Regularized incomplete gamma P(a, x) (``upper``: Q = 1 - P): the series where
    x < a + 1, Lentz's continued fraction for Q elsewhere, Temme's expansion for huge a; each
    on its own elements."""
    shape = xp.broadcast_shapes(a.shape, x.shape)
    a, x = (xp.broadcast_to(v, shape).ravel() for v in (a, x))
    r = xp.where(xp.isnan(a) | xp.isnan(x), xp.nan, 0.0)
    ok = (a > 0) & (x > 0) & xp.isfinite(a) & xp.isfinite(x)
    huge = ok & (a > 1e6)
    series, frac = ok & ~huge & (x < a + 1), ok & ~huge & ~(x < a + 1)

    def pref(a, x):
        return xp.exp(a * xp.log(x) - x - _lgamma(xp, a))
    # series: P = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1)...(a + n))
    sa, sx = a[series], x[series]

    def series_step(i, s):
        total, term = s[0], s[1] * s[2] / (s[3] + i)
        return (total + term, term, s[2], s[3]), xp.abs(term) <= xp.abs(total + term) * 1e-17
    p = _iterate(xp, series_step, (1.0 / sa, 1.0 / sa, sx, sa), 500) * pref(sa, sx)
    r[series] = 1 - p if upper else p
    # continued fraction for Q (modified Lentz)
    tiny = 1e-300
    fa, fx = a[frac], x[frac]
    b = fx + 1 - fa

    def frac_step(i, s):
        h, b, c, d, fa = s
        an, b = -i * (i - fa), b + 2
        d = 1 / xp.where(xp.abs(an * d + b) < tiny, tiny, an * d + b)
        c = b + an / c
        c = xp.where(xp.abs(c) < tiny, tiny, c)
        return (h * d * c, b, c, d, fa), xp.abs(d * c - 1) < 1e-16
    d = 1 / xp.where(b == 0, tiny, b)
    q = _iterate(xp, frac_step, (d, b, xp.full(fa.shape, 1 / tiny), d, fa), 499) * pref(fa, fx)
    r[frac] = q if upper else 1 - q
    # Temme's uniform expansion to first order for huge a, where the loops above would need
    # ~sqrt(a) steps: Q = erfc(eta sqrt(a/2)) / 2 + exp(-a eta^2/2) / sqrt(2 pi a) * c0
    ha, hx = a[huge], x[huge]
    lam = hx / ha
    eta = xp.sign(lam - 1) * xp.sqrt(2 * xp.abs(lam - 1 - xp.log(lam)))
    near = xp.abs(lam - 1) < 1e-6
    c0 = xp.where(near, -1 / 3, 1 / xp.where(near, 1, lam - 1) - 1 / xp.where(near, 1, eta))
    q = 0.5 * _erf_erfc(xp, eta * xp.sqrt(ha / 2), "erfc") + xp.exp(-ha * eta * eta / 2) / \
        xp.sqrt(2 * math.pi * ha) * c0
    r[huge] = q if upper else 1 - q
    # NOTE: torch's edge values (calc_igamma): a = 0 is a step at x = 0, infinite a gives 0
    lo, hi = (1.0, 0.0) if upper else (0.0, 1.0)
    r = xp.where(xp.isinf(x), hi, r)
    r = xp.where(xp.isinf(a), xp.where(xp.isinf(x), xp.nan, lo), r)
    r = xp.where(x == 0, lo, r)
    r = xp.where(a == 0, xp.where(x > 0, hi, xp.nan), r)
    return xp.where((a < 0) | (x < 0), xp.nan, r).reshape(shape)


def _igamma_op(name, upper):
    def fwd(xp, input, other):
        if (r := _C.special(name, input, other)) is not None:     # (special.h)
            return r
        return reject(name, "c", _in_f64(lambda xp, a, x: _igamma(xp, a, x, upper)))(
            xp, input, other)       # (refusals on the NumPy path only: the kernel's are real)
    fwd.__doc__ = f"""The regularized {"upper" if upper else "lower"} incomplete gamma function
    {"Q" if upper else "P"}(input, other).

    Example:
        >>> ember.{name}(ember.tensor([1.]), ember.tensor([2.]))
        tensor([{"0.1353" if upper else "0.8647"}])
    """
    d = op(name, tags=("pointwise",), promote="float", inplace=True)(fwd)

    # NOTE: as torch, only ``other`` (x) has a gradient: d/dx P(a, x) = x^(a-1) e^-x / Gamma(a)
    @d.vjp(save=("input", "other"))
    def _(g, input, other):
        dx = ((input - 1) * other.log() - other - input.lgamma()).exp()
        return None, g * (-dx if upper else dx)

    d.meta = broadcast_meta
    d.samples = lambda dev, dt: [
        Sample(make((3, 4), dt, 0.5, 5.0), make((3, 4), dt, 0.1, 8.0, seed=1)),
        Sample(make((4,), dt, 0.5, 3.0), make((3, 1), dt, 0.1, 3.0, seed=2)),
        Sample(make((5,), dt, 20.0, 40.0), make((5,), dt, 10.0, 50.0, seed=3))] \
        if dt.category == 2 else []
    d.samples = _x_only(d.samples)
    # NOTE: torch switches to Temme's asymptotic expansion for large a and x, good to ~3e-10
    # there; the series and continued fraction here are closer to the true value.
    d.tol = {"float64": (5e-9, 1e-12)}
    return d


def _x_only(samples):
    return lambda dev, dt: [s.differentiable_in(1) for s in samples(dev, dt)]


igamma, igammac = _igamma_op("igamma", False), _igamma_op("igammac", True)
igamma.half_ulps = igammac.half_ulps = LIBM_ULP


# ---- elementary ones --------------------------------------------------------------------------


def _sinc(xp, input):
    # NOTE: in the input's precision, as torch's (a float64 detour would round differently)
    px = input * input.dtype.type(math.pi) if input.dtype.kind in "fc" else input * math.pi
    safe = xp.where(input == 0, input.dtype.type(1), px)
    return xp.where(input == 0, input.dtype.type(1), xp.sin(safe) / safe).astype(input.dtype)


def _sinc_grad(g, input):
    px = input * math.pi
    d = (px.cos() * px - px.sin()) / (px * input)
    return g * _conj(ember.where(input == 0, 0.0, d))


sinc = _special("sinc", _sinc, _sinc_grad, complex_ok=True, kinks=(0.0,), kernel="sinc")
sinc.__doc__ = """``sin(pi x) / (pi x)``, 1 at 0.

    Example:
        >>> ember.sinc(ember.tensor([0., 0.5, 1.]))
        tensor([ 1.0000e+00,  6.3662e-01, -2.7828e-08])
    """


def _entr(xp, x):
    r = -x * xp.log(xp.where(x > 0, x, x.dtype.type(1)))
    return xp.where(x < 0, -xp.inf, xp.where(x == 0, 0.0, r))


# NOTE: torch rounds log(x) to float16/bfloat16 before the product in entr and xlog1py
entr = _special("entr", _entr, lambda g, input: g * -(1 + input.log()), method=False, low=True,
               kernel="entr")
entr.__doc__ = """``-x log(x)``, 0 at 0 and -inf below. See torch.special.entr."""
entr.samples = lambda dev, dt: unary_samples(dev, dt, (0.1, 3.0)) if dt.category < 3 else []


def _xlog1py(xp, input, other):
    r = input * xp.log1p(other)
    return xp.where((input == 0) & ~xp.isnan(other), 0.0, r)


def _xlog1py_grad(g, input, other):
    if not isinstance(other, ember.Tensor):
        return g * math.log1p(other), None
    return (ember.where((input == 0) & (other <= -1), 0.0, g * other.log1p()),
            g * input / (other + 1))


xlog1py = _special("xlog1py", _xlog1py, _xlog1py_grad, save=("input", "other"), method=False,
                   binary=True, low=True, kernel="xlog1py")
xlog1py.__doc__ = """``input * log1p(other)``, 0 where ``input == 0`` unless ``other`` is nan.
    See torch.special.xlog1py."""
xlog1py.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((3, 4), dt, -0.5, 3, seed=1)),
    Sample(make((3, 4), dt), make((4,), dt, -0.5, 3, seed=2)),
    Sample(np.array([0.0, 1.0, 0.0, 2.0]).astype(dt.np), make((4,), dt, -0.5, 3, seed=3)),
    Sample(make((3,), dt), 2.5)] if dt.category == 2 else []
xlog1py.grad_name_of = _xlogy_node("special_xlog1py")


@op("logit", tags=("pointwise",), promote="float", inplace=True, opmath=False)  # as xlogy
@reject("logit", "c")
def logit(xp, input, eps=None):
    """``log(x / (1 - x))``, with ``x`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given.

    Example:
        >>> ember.logit(ember.tensor([0.25, 0.5]))
        tensor([-1.0986,  0.0000])
    """
    if (r := _C.pointwise("logit", input, *_logit_bounds(eps))) is not None:
        return r
    x = input if eps is None else xp.clip(input, eps, 1 - eps).astype(input.dtype)
    return xp.log(x / (1 - x)).astype(input.dtype, copy=False)


def _logit_bounds(eps):
    return (-math.inf, math.inf) if eps is None else (eps, 1 - eps)


@logit.vjp(save=("input",))
def _(g, input, eps=None):
    if (r := fused_grad("logit", input, g, *_logit_bounds(eps))) is not None:
        return r
    d = g / (input * (1 - input))
    return d if eps is None else ember.where((input < eps) | (input > 1 - eps), 0.0, d)


logit.meta = same_meta
logit.samples = lambda dev, dt: unary_samples(dev, dt, (0.05, 0.95)) + [
    Sample(make((3, 4), dt, -0.2, 1.2), 0.1)] if dt.category < 3 else []
logit.kinks = (0.1, 0.9)

# ---- the normal distribution ------------------------------------------------------------------


def _erfcx(xp, x):
    """``exp(x^2) erfc(x)``: a continued fraction where exp(x^2) would overflow."""
    a = xp.abs(x)
    small = xp.exp(a * a) * _erf_erfc(xp, xp.minimum(a, 5.0), "erfc")
    t = a.copy()                      # exp(a^2) erfc(a) = 1/sqrt(pi) / (a + (1/2)/(a + ...))
    for k in range(60, 0, -1):
        t = a + (k / 2.0) / t
    big = xp.where(a > 1e8, 1 / (a * math.sqrt(math.pi)), 1 / (math.sqrt(math.pi) * t))
    pos = xp.where(a < 5.0, small, big)
    return xp.where(x < 0, 2 * xp.exp(x * x) - pos, pos)


erfcx = _special("erfcx", _erfcx, lambda g, input, result: g * (
    2 * input * result - 2 / math.sqrt(math.pi)), save=("input", "result"), method=False,
                bf16=False)
erfcx.__doc__ = """The scaled complementary error function ``exp(x^2) erfc(x)``.
    See torch.special.erfcx."""


def _ndtr(xp, x):
    return 0.5 * _erf_erfc(xp, -x / math.sqrt(2), "erfc")


def _log_ndtr(xp, x):
    low = xp.log(_erfcx(xp, -x / math.sqrt(2)) / 2) - x * x / 2
    return xp.where(x < -1, low, xp.log1p(-0.5 * _erf_erfc(xp, x / math.sqrt(2), "erfc")))


# Cephes' ndtri (torch's calc_ndtri): rational approximations in (p - 1/2)^2 for the centre
# (exp(-2) < p < 1 - exp(-2)) and in 1 / sqrt(-2 log p) for each tail, to ~5e-16 relative;
# highest power first, the denominators' leading 1 written out
_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0)
_NDTRI_Q0 = (1.0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
             -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
             1.59056225126211695515E1, -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
             1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
             -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_NDTRI_Q2 = (1.0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
             2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
             2.89247864745380683936E-6, 6.79019408009981274425E-9)
_EXP_M2 = 0.13533528323661269189


def _polevl(x, coefs):
    r = coefs[0] + 0 * x
    for c in coefs[1:]:
        r = r * x + c
    return r


def _ndtri(xp, p):
    """The inverse of ndtr, as Cephes: each branch computed on its own elements only."""
    out = xp.full(p.shape, xp.nan)
    mid = (p > _EXP_M2) & (p <= 1 - _EXP_M2)
    w = p[mid] - 0.5
    w2 = w * w
    out[mid] = (w + w * (w2 * _polevl(w2, _NDTRI_P0) / _polevl(w2, _NDTRI_Q0))) * _SQRT_2PI
    tail = ~mid & (p > 0) & (p < 1)
    pt = p[tail]
    upper = pt > 1 - _EXP_M2
    t = xp.sqrt(-2 * xp.log(xp.where(upper, 1 - pt, pt)))
    z = 1 / t
    x = t - xp.log(t) / t - xp.where(t < 8, z * _polevl(z, _NDTRI_P1) / _polevl(z, _NDTRI_Q1),
                                     z * _polevl(z, _NDTRI_P2) / _polevl(z, _NDTRI_Q2))
    out[tail] = xp.where(upper, x, -x)
    out[p == 0] = -xp.inf
    out[p == 1] = xp.inf
    return out


ndtr = _special("ndtr", _ndtr, lambda g, input: g * (-input * input / 2).exp() / _SQRT_2PI,
                method=False)
ndtr.__doc__ = "The standard normal CDF. See torch.special.ndtr."
ndtr.half_ulps = (None, "torch's (1 + erf(x / sqrt 2)) / 2 in float16 cancels to 0 below -3")
ndtr.grad_name = "MulBackward1"
log_ndtr = _special("log_ndtr", _log_ndtr, lambda g, input, result: g * (
    -input * input / 2 - result).exp() / _SQRT_2PI, save=("input", "result"), method=False,
                    bf16=False)
log_ndtr.__doc__ = "The log of the standard normal CDF, accurate far in the lower tail. " \
    "See torch.special.log_ndtr."
log_ndtr.samples = lambda dev, dt: unary_samples(dev, dt, (-8.0, 4.0)) if dt.category < 3 else []
ndtri = _special("ndtri", _ndtri, lambda g, input, result: g * _SQRT_2PI * (
    result * result / 2).exp(), save=("result",), method=False, domain=(0.02, 0.98), bf16=False,
                 kernel="ndtri")
ndtri.__doc__ = "The inverse of the standard normal CDF. See torch.special.ndtri."


# ember.<name> comes from the op; the methods put the tensor second (see lazy.py)
METHODS = {"polygamma": _polygamma_method, "polygamma_": _polygamma_inplace}


# ---- the reparameterised gradient of Gamma samples --------------------------------------------

# bivariate rational approximation of d x / d alpha in (log(x / alpha), log(alpha)), torch's
# standard_gamma_grad_one (Jankowiak & Obermeyer, "Pathwise derivatives beyond the
# reparameterization trick", 2018)
_GAMMA_GRAD_UV = np.array([
    [0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089,
     0.0014179084],
    [0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113,
     -0.0035938915, -0.00058392623],
    [0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326,
     0.00085092367, -1.5247877e-07]])


def _gamma_grad(xp, alpha, x):
    """d x / d alpha of a standard Gamma(alpha) sample x at fixed CDF value (the implicit
    reparameterisation gradient): a Taylor series for small x, Rice's saddle point expansion
    for large alpha, a rational approximation elsewhere, as torch's kernel."""
    # small x: minus d/dalpha of the series of the regularised lower incomplete gamma over pdf
    numer, denom = xp.ones_like(x), alpha.copy()
    s1, s2 = numer / denom, numer / (denom * denom)
    for i in range(1, 6):
        numer = numer * -x / i
        denom = denom + 1
        s1, s2 = s1 + numer / denom, s2 + numer / (denom * denom)
    pow_x_alpha = x ** alpha
    # NOTE: torch's digamma_one here is +inf at zero and the negative integers
    dg = xp.where((alpha <= 0) & (alpha == xp.floor(alpha)), xp.inf, _digamma(xp, alpha))
    cdf_alpha = (xp.log(x) - dg) * pow_x_alpha * s1 - pow_x_alpha * s2
    small = -cdf_alpha / (x ** (alpha - 1) * xp.exp(-x))
    small = xp.where(xp.isnan(small), 0.0, small)
    # large alpha: Rice's saddle point expansion (a polynomial near the mode)
    near = (1 + 24 * alpha * (1 + 12 * alpha)) * (
        1440 * alpha * alpha + 6 * x * (53 - 120 * x) - 65 * x * x / alpha +
        alpha * (107 + 3600 * x)) / (1244160 * alpha ** 4)
    d = xp.sqrt(8 * alpha)
    t2 = d / (alpha - x)
    t3 = (x - alpha - alpha * xp.log(x / alpha)) ** -1.5
    t1 = xp.log(x / alpha) * xp.where(x < alpha, t2 - t3, t2 + t3) - \
        xp.sqrt(2 / alpha) * (alpha + x) / ((alpha - x) * (alpha - x))
    stirling = 1 + 1 / (12 * alpha) * (1 + 1 / (24 * alpha))
    far = -stirling * x * t1 / d
    large = xp.where((0.9 * alpha <= x) & (x <= 1.1 * alpha), near, far)
    u, v = xp.log(x / alpha), xp.log(alpha)
    c = [_GAMMA_GRAD_UV[0, i] + u * (_GAMMA_GRAD_UV[1, i] + u * _GAMMA_GRAD_UV[2, i])
         for i in range(8)]
    p = c[0] + v * (c[1] + v * (c[2] + v * c[3]))
    q = c[4] + v * (c[5] + v * (c[6] + v * c[7]))
    return xp.where(x < 0.8, small, xp.where(alpha > 8.0, large, xp.exp(p / q)))


@op("_standard_gamma_grad", tags=("pointwise",), promote="float", method=False,
    differentiable=False, opmath=False)
def _standard_gamma_grad(xp, input, output):
    """The derivative of a ``Gamma(input, 1)`` sample ``output`` with respect to the
    concentration ``input``, holding its CDF value fixed (what ``_standard_gamma``'s backward
    uses; torch has no gradient of it either).

    Example:
        >>> ember._standard_gamma_grad(ember.tensor([2.]), ember.tensor([1.5]))
        tensor([0.9366])
    """
    if (r := _C.special("_standard_gamma_grad", input, output)) is not None:     # (special.h)
        return r
    return _in_f64(_gamma_grad, bf16=False)(xp, input, output)


_standard_gamma_grad.meta = broadcast_meta
_standard_gamma_grad.samples = lambda dev, dt: [
    Sample(make((3, 4), dt, 0.2, 6.0), make((3, 4), dt, 0.05, 0.79, seed=1)),
    Sample(make((3, 4), dt, 0.2, 7.9), make((3, 4), dt, 0.8, 12.0, seed=2)),
    Sample(make((6,), dt, 8.5, 40.0), make((6,), dt, 8.0, 44.0, seed=3)),
    Sample(np.array([10.0, 20.0, 30.0]).astype(dt.np), np.array([10.5, 19.0, 40.0]).astype(
        dt.np))] if dt.category == 2 else []
