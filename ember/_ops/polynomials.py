"""Classical orthogonal polynomials of torch.special (Chebyshev T/U/V/W and their shifted
forms, Hermite H and He, Laguerre L, Legendre P) evaluated at ``input`` with degree ``n``, and
the spherical Bessel function j0. torch's outputs for these never require grad; nor do ember's.

Each is its three-term recurrence run up to the largest degree asked for, with torch's values
where the recurrence is not used (negative degree gives 0; torch's shortcuts at |x| = 1).
"""
import numpy as np

from .._C import kernels as _C
from .meta import broadcast_meta, same_meta
from .registry import op
from .samples import Sample, make, unary_samples
from .special import _in_f64


def _recurrence(xp, x, n, p0, p1, step):
    """``P_n(x)`` for each element, from ``P_0 = p0(x)``, ``P_1 = p1(x)`` and
    ``P_(k+1) = step(k, x, P_k, P_(k-1))``."""
    # NOTE: torch casts n to int64 first: nan, inf and out-of-range degrees become INT64_MIN,
    # a negative degree, so they give 0
    n = xp.where(xp.abs(n) < 2.0 ** 63, xp.trunc(n), -1.0)
    x, n = xp.broadcast_arrays(x, n)
    prev, cur = xp.ones(x.shape) * p0(x), xp.ones(x.shape) * p1(x)
    out = xp.where(n == 0, prev, cur)
    top = max(int(n.max()), 1) if n.size else 1       # (CuPy's max has no initial=)
    for k in range(1, min(top, 1 << 16)):
        prev, cur = cur, step(k, x, cur, prev)
        out = xp.where(n == k + 1, cur, out)
    return xp.where(n < 0, 0.0, out)


def _at_one(xp, x, n, plus, minus_even, minus_odd, r):
    """torch's values at x = +-1: ``plus`` at 1, at -1 by the parity of n."""
    even = n % 2 == 0
    return xp.where(x == 1, plus, xp.where(x == -1, xp.where(even, minus_even, minus_odd), r))


def _cheb(kind):
    first = {"t": lambda x: x, "u": lambda x: 2 * x, "v": lambda x: 2 * x - 1,
             "w": lambda x: 2 * x + 1}[kind]

    def f(xp, x, n):
        r = _recurrence(xp, x, n, lambda x: 1.0, first, lambda k, x, c, p: 2 * x * c - p)
        n = xp.broadcast_to(xp.where(xp.abs(n) < 2.0 ** 63, xp.trunc(n), -1.0), r.shape)
        ends = {"t": (1.0, 1.0, -1.0), "u": (n + 1, n + 1, -(n + 1)),
                "v": (1.0, 2 * n + 1, -(2 * n + 1)), "w": (2 * n + 1, 1.0, -1.0)}[kind]
        return xp.where(n < 0, 0.0, _at_one(xp, x, n, *ends, r))
    return f


_POLYS = {
    "chebyshev_polynomial_t": _cheb("t"), "chebyshev_polynomial_u": _cheb("u"),
    "chebyshev_polynomial_v": _cheb("v"), "chebyshev_polynomial_w": _cheb("w"),
    "hermite_polynomial_h": lambda xp, x, n: _recurrence(
        xp, x, n, lambda x: 1.0, lambda x: 2 * x, lambda k, x, c, p: 2 * x * c - 2 * k * p),
    "hermite_polynomial_he": lambda xp, x, n: _recurrence(
        xp, x, n, lambda x: 1.0, lambda x: x, lambda k, x, c, p: x * c - k * p),
    "laguerre_polynomial_l": lambda xp, x, n: _recurrence(
        xp, x, n, lambda x: 1.0, lambda x: 1 - x,
        lambda k, x, c, p: ((2 * k + 1 - x) * c - k * p) / (k + 1)),
    "legendre_polynomial_p": lambda xp, x, n: _recurrence(
        xp, x, n, lambda x: 1.0, lambda x: x,
        lambda k, x, c, p: ((2 * k + 1) * x * c - k * p) / (k + 1)),
}


def _shifted(f):
    return lambda xp, x, n: f(xp, 2 * x - 1, n)      # T*_n(x) = T_n(2x - 1), and so on


for _k in "tuvw":
    _POLYS[f"shifted_chebyshev_polynomial_{_k}"] = _shifted(_POLYS[f"chebyshev_polynomial_{_k}"])


def _poly_samples(dev, dt):
    if dt.category not in (1, 2):
        return []
    degrees = np.array([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 12, -1]]).astype(dt.np)
    lo, hi = (-1.5, 1.5) if dt.category == 2 else (-2, 2)
    return [Sample(make((3, 4), dt, lo, hi), degrees), Sample(make((5,), dt, lo, hi, seed=1), 3),
            Sample(np.array([-1.0, 1.0, 0.0, 0.5]).astype(dt.np), degrees[1])]


def _register(name, f):
    f.__name__ = name                               # (torch's kernel name, for errors)

    def fwd(xp, input, n):
        if (r := _C.special(name, input, n)) is not None:     # (special.h: per element)
            return r
        return _in_f64(f, bf16=False)(xp, input, n)
    fwd.__doc__ = f"``{name.replace('_', ' ')}`` of degree ``n`` at ``input``. " \
        f"See torch.special.{name}."
    # NOTE: not tagged pointwise: at x = nan torch's kernels return 0 for some polynomials and
    # degrees (U, L, P at n = 2) and nan for others, an order of shortcuts not copied here
    d = op(f"special_{name}", promote="float", method=False, function=False,
           differentiable=False)(fwd)
    d.torch_fn, d.public_name = f"special.{name}", name
    d.meta, d.samples = broadcast_meta, _poly_samples
    return d


POLYNOMIALS = [_register(k, v) for k, v in _POLYS.items()]


@op("special_spherical_bessel_j0", tags=("pointwise",), promote="float", method=False,
    function=False, differentiable=False, opmath=False)     # (refuses float16/bfloat16)
def spherical_bessel_j0(xp, input):
    """The spherical Bessel function of the first kind of order 0, ``sin(x) / x`` (1 at 0).
    See torch.special.spherical_bessel_j0."""
    def f(xp, x):
        x2 = x * x      # a series near 0, where sin(x) / x loses digits to cancellation
        series = 1 - x2 / 6 * (1 - x2 / 20 * (1 - x2 / 42 * (1 - x2 / 72 * (1 - x2 / 110))))
        r = xp.where(xp.abs(x) < 0.5, series, xp.sin(x) / xp.where(x == 0, 1.0, x))
        return xp.where(xp.isinf(x), 0.0, r)
    f.__name__ = "spherical_bessel_j0"
    if (r := _C.special("spherical_bessel_j0", input)) is not None:
        return r
    return _in_f64(f, bf16=False)(xp, input)


spherical_bessel_j0.torch_fn = "special.spherical_bessel_j0"
spherical_bessel_j0.public_name = "spherical_bessel_j0"
spherical_bessel_j0.meta = same_meta
spherical_bessel_j0.samples = lambda dev, dt: unary_samples(dev, dt, (-6.0, 6.0)) \
    if dt.category < 3 else []
