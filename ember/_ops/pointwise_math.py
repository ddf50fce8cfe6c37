"""Pointwise math functions: logs and exponentials, trigonometry, the error function, rounding,
floating-point predicates. Arithmetic with two or more operands lives in pointwise_binary.py."""
import math

import numpy as np

import ember

from .._C import kernels as _C
from .meta import bool_meta, broadcast_meta, same_meta
from .pointwise import _unary, _zero_grad, reject, ufunc_of
from .tangents import LINEAR
from .registry import LIBM_ULP, op, overload_if_given
from .samples import ErrorSample, Sample, const, dtype_error, make, unary_samples

_LN2, _LN10 = math.log(2.0), math.log(10.0)
_SQRT_PI = math.sqrt(math.pi)

# torch's CUDA autocast runs these in float32 (ember.amp)
_FP32_CUDA = ("autocast_fp32_cuda",)

# ---- exponentials, logs, powers -----------------------------------------------------------

reciprocal = _unary("reciprocal", "reciprocal", lambda x, r: -r * r, save="result",
                    grad=("reciprocal",), domain=(0.3, 2.0), tags=_FP32_CUDA)
rsqrt = _unary("rsqrt", lambda xp, input: r if (r := _C.pointwise("rsqrt", input, min_size=4096))
               is not None else xp.reciprocal(xp.sqrt(input)),
               lambda x, r: -0.5 * r * r * r, save="result", grad=("rsqrt",), domain=(0.1, 4.0),
               tags=_FP32_CUDA)
exp2 = _unary("exp2", "exp2", lambda x, r: r * _LN2, save="result", grad=("scale", _LN2))
expm1 = _unary("expm1", "expm1", lambda x, r: r + 1, save="result", grad=("expm1",),
               tags=_FP32_CUDA)
log1p = _unary("log1p", "log1p", lambda x, r: 1 / (x + 1), grad=("log1p",),
               domain=(-0.5, 2.0), tags=_FP32_CUDA)
log2 = _unary("log2", "log2", lambda x, r: 1 / (x * _LN2), grad=("log", _LN2),
              domain=(0.1, 4.0), tags=_FP32_CUDA)
log10 = _unary("log10", "log10", lambda x, r: 1 / (x * _LN10), grad=("log", _LN10),
               domain=(0.1, 4.0), tags=_FP32_CUDA)


def _scale(xp, x, c):
    # ml_dtypes lets a Python float upcast a 0-dim bfloat16 array: cast back
    return ufunc_of(xp, "multiply")(x, c).astype(x.dtype, copy=False)


# ---- trigonometric and hyperbolic ---------------------------------------------------------
# NOTE: complex samples stay inside (-0.9, 0.9)^2 where the inverse functions have branch cuts
# outside; the derivative formulas are torch's (acosh uses (x^2 - 1)^-1/2, not a product form).

tan = _unary("tan", "tan", lambda x, r: 1 + r * r, save="result", grad=("tan",), tags=_FP32_CUDA)
asin = _unary("asin", "arcsin", lambda x, r: (1 - x * x).rsqrt(), grad=("asin", 1.0),
              domain=(-0.9, 0.9), aliases=("arcsin",), tags=_FP32_CUDA)
acos = _unary("acos", "arccos", lambda x, r: -(1 - x * x).rsqrt(), grad=("asin", -1.0),
              domain=(-0.9, 0.9), aliases=("arccos",), tags=_FP32_CUDA)
atan = _unary("atan", "arctan", lambda x, r: 1 / (1 + x * x), grad=("atan",),
              domain=(-0.9, 0.9), aliases=("arctan",))
sinh = _unary("sinh", "sinh", lambda x, r: x.cosh(), grad=("sinh",), tags=_FP32_CUDA)
cosh = _unary("cosh", "cosh", lambda x, r: x.sinh(), grad=("cosh",), tags=_FP32_CUDA)
asinh = _unary("asinh", "arcsinh", lambda x, r: (x * x + 1).rsqrt(),
               domain=(-0.9, 0.9), aliases=("arcsinh",))
acosh = _unary("acosh", "arccosh", lambda x, r: (x * x - 1).rsqrt(),
               domain=(1.2, 4.0), aliases=("arccosh",))
atanh = _unary("atanh", "arctanh", lambda x, r: 1 / (1 - x * x), grad=("atanh",),
               domain=(-0.9, 0.9), aliases=("arctanh",))
deg2rad = _unary("deg2rad", lambda xp, input: _scale(xp, input, math.pi / 180),
                 lambda x, r: math.pi / 180, save="none", kinds="c")
rad2deg = _unary("rad2deg", lambda xp, input: _scale(xp, input, 180 / math.pi),
                 lambda x, r: 180 / math.pi, save="none", kinds="c")

def _document(docs):
    """Set the docstrings of ops made by ``_unary`` (their forwards are lambdas)."""
    for d, doc in docs.items():
        d.__doc__ = doc


_document({
    reciprocal: "``1 / input``; integers give the default float.",
    rsqrt: "``1 / sqrt(input)``.",
    exp2: """``2 ** input``.

    Example:
        >>> ember.exp2(ember.tensor([3]))
        tensor([8.])
    """,
    expm1: "``exp(input) - 1``, accurate for small ``input``.",
    log1p: "``log(1 + input)``, accurate for small ``input``.",
    log2: """The base-2 logarithm.

    Example:
        >>> ember.log2(ember.tensor([8.]))
        tensor([3.])
    """,
    log10: "The base-10 logarithm.",
    tan: "The tangent.", asin: "The arcsine.", acos: "The arccosine.", atan: "The arctangent.",
    sinh: "The hyperbolic sine.", cosh: "The hyperbolic cosine.",
    asinh: "The inverse hyperbolic sine.", acosh: "The inverse hyperbolic cosine.",
    atanh: "The inverse hyperbolic tangent.",
    deg2rad: """Degrees to radians.

    Example:
        >>> ember.deg2rad(ember.tensor([180.]))
        tensor([3.1416])
    """,
    rad2deg: "Radians to degrees.",
})


# ---- the error function -------------------------------------------------------------------
# NumPy has no erf, and ember may not use scipy. In float64: erf is a series for |x| < 1.5 and
# erfc a continued fraction above (the split CPython's math module once used). Each runs only
# on its own elements, with the fewest terms that reach full precision on its band of |x|.

# 2^k / (1 * 3 * ... * (2k + 1)), the series' coefficients, highest first for Horner's rule
_SERIES = [2.0 ** k / math.prod(range(1, 2 * k + 2, 2)) for k in range(25, -1, -1)]
_FRACTION_BANDS = ((1.5, 3.0, 120), (3.0, 6.0, 30), (6.0, 30.0, 15))


def _exp_neg_square(xp, a):
    """``exp(-a*a)`` without the error of rounding ``a*a``: with ``a = h + l`` where ``h`` has
    few bits, ``h*h`` is exact and ``exp(-h*h) * exp(-l*(a+h))`` keeps full precision."""
    h = xp.floor(a * 16.0) / 16.0
    return xp.exp(-h * h) * xp.exp(-(a - h) * (a + h))


def _erf_series(xp, a):
    # erf(a) = 2a/sqrt(pi) exp(-a^2) sum_k (2a^2)^k / (1*3*...*(2k+1)): all terms positive
    a2, s = a * a, xp.full(a.shape, _SERIES[0])
    for c in _SERIES[1:]:
        s *= a2
        s += c
    return (2.0 / _SQRT_PI) * a * _exp_neg_square(xp, a) * s


def _erfc_fraction(xp, a, terms):
    # erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...)))), for a >= 1.5
    t = a.copy()
    for k in range(terms, 0, -1):
        xp.divide(k / 2.0, t, out=t)
        t += a
    return _exp_neg_square(xp, a) / (_SQRT_PI * t)


# Numerical Recipes' erfc (Chebyshev fit, relative error < 1.2e-7), highest power of t last.
_NR_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
            -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erf_erfc_single(xp, x, want):
    """erf/erfc for float32 and narrower: a fixed ~25 array operations instead of the float64
    path's band-by-band series. Accurate to float32 rounding: a Taylor series for |x| < 0.5
    (where 1 - erfc would lose erf's relative precision), the Chebyshev fit elsewhere."""
    x64 = x.astype(np.float64)
    a = xp.abs(x64)
    t = 1.0 / (1.0 + 0.5 * a)
    poly = _NR_ERFC[-1]
    for c in _NR_ERFC[-2::-1]:
        poly = poly * t + c
    erfc_a = t * xp.exp(-a * a + poly)                      # erfc(|x|)
    z = x64 * x64                                          # erf(x) = 2/sqrt(pi) sum ...
    series = x64 * (1.1283791670955126 * (1 + z * (-1 / 3 + z * (1 / 10 + z * (
        -1 / 42 + z * (1 / 216 + z * (-1 / 1320 + z / 9360)))))))
    erf = xp.where(a < 0.5, series, xp.where(x64 < 0, erfc_a - 1.0, 1.0 - erfc_a))
    if want == "erf":
        return erf.astype(x.dtype)
    return xp.where(a < 0.5, 1.0 - series, xp.where(x64 < 0, 2.0 - erfc_a, erfc_a)).astype(x.dtype)


def _erf_erfc(xp, x, want):
    """``erf(x)`` (want="erf") or ``erfc(x)`` (want="erfc"), computed in float64 and returned
    in the dtype of ``x``."""
    if x.dtype.itemsize <= 4 and x.dtype.kind != "c":
        fn = _C.kernel("pointwise", x.dtype) if xp is np and x.size else None
        if fn is None:
            return _erf_erfc_single(xp, x, want)
        # (float32: the same method in one pass, pointwise.h's erf / erfc, called directly:
        # _C.pointwise's checks of operands erf has not cost ~15% of a small call)
        x = _C.contiguous(x)
        out = np.empty(x.shape, x.dtype)
        fn(_C._POINTWISE[want], _C.ptr(x), 0, 0, _C.ptr(out), x.size, 0.0, 0.0, 0.0,
           _C.num_threads())
        return out
    x64 = x.astype(np.float64)
    a = xp.abs(x64)
    r = xp.zeros_like(a) if want == "erf" else xp.where(a >= 30.0, 0.0, 1.0)  # |x| >= 30
    r[xp.isnan(a)] = xp.nan
    small = a < 1.5
    if small.any():
        s = _erf_series(xp, a[small])
        r[small] = s if want == "erf" else 1.0 - s
    for lo, hi, terms in _FRACTION_BANDS:
        band = (a >= lo) & (a < hi)
        if band.any():           # bands are often empty: skip their hundreds of array calls
            c = _erfc_fraction(xp, a[band], terms)
            r[band] = 1.0 - c if want == "erf" else c
    if want == "erf":
        r[a >= 30.0] = 1.0
        r = xp.where(x64 < 0, -r, r)
    else:
        r = xp.where(x64 < 0, 2.0 - r, r)
    return r.astype(x.dtype, copy=False)


# Giles' single-precision erfinv ("Approximating the erfinv function", 2010): polynomials in
# w = -log(1 - y^2), about 1e-7 relative; highest coefficient first.
_GILES_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                  0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_GILES_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
               -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _horner(coefs, w):
    p = coefs[0]
    for c in coefs[1:]:
        p = p * w + c
    return p


def _halley(xp, x, a):
    """One Halley step (cubic convergence) towards ``erf(x) = a`` for ``a`` in [0, 1): on
    ``erfc(x) = 1 - a`` for a > 0.5, where ``1 - a`` is exact and erf(x) too flat."""
    tail = a > 0.5
    f = xp.empty_like(x)
    f[~tail] = _erf_erfc(xp, x[~tail], "erf") - a[~tail]
    f[tail] = (1 - a[tail]) - _erf_erfc(xp, x[tail], "erfc")
    d = 2 / _SQRT_PI * _exp_neg_square(xp, x)      # d/dx erf; d2/dx2 = -2x d
    return x - f / (d + x * f)


def _erfinv(xp, y):
    """Giles' estimate and one Halley step (1e-7 becomes 1e-21); beyond float32's range
    (1 - |y| < 1e-7), where the estimate is poor, Newton steps on the logarithm."""
    if (r := _C.pointwise("erfinv", y)) is not None:
        return r
    y64 = y.astype(np.float64)
    a = xp.abs(y64)
    inside = a < 1
    a = xp.where(inside, a, 0.5)
    w = -xp.log((1 - a) * (1 + a))
    x = a * xp.where(w < 5, _horner(_GILES_CENTRAL, w - 2.5), _horner(_GILES_TAIL, xp.sqrt(w) - 3))
    x = _halley(xp, x, a)
    far = w > 16
    if bool(far.any()):
        # NOTE: erfc falls like exp(-x^2) out here, so steps on erfc(x) itself crawl in from a
        # poor start: Newton on log(erfc(x)) = log(1 - a), which is nearly quadratic in x.
        xf, log_t = x[far], xp.log(1 - a[far])
        for _ in range(5):
            c = _erf_erfc(xp, xf, "erfc")
            xf = xf + c * (xp.log(c) - log_t) / (2 / _SQRT_PI * _exp_neg_square(xp, xf))
        x[far] = xf
    x = xp.where(inside, x, xp.where(xp.abs(y64) == 1, xp.inf, xp.nan))   # nan stays nan
    return xp.where(y64 < 0, -x, x).astype(y.dtype, copy=False)


erf = _unary("erf", lambda xp, input: _erf_erfc(xp, input, "erf"),
             lambda x, r: 2 / _SQRT_PI * (-x * x).exp(), kinds="c")
erfc = _unary("erfc", lambda xp, input: _erf_erfc(xp, input, "erfc"),
              lambda x, r: -2 / _SQRT_PI * (-x * x).exp(), kinds="c")
erfinv = _unary("erfinv", lambda xp, input: _erfinv(xp, input),
                lambda x, r: _SQRT_PI / 2 * (r * r).exp(), save="result", kinds="c",
                domain=(-0.9, 0.9), tags=_FP32_CUDA)
_document({
    erf: """The error function ``2/sqrt(pi) * integral_0^x exp(-t^2) dt``.

    Example:
        >>> ember.erf(ember.tensor([0., 0.5, -1.]))
        tensor([ 0.0000,  0.5205, -0.8427])
    """,
    erfc: "``1 - erf(x)``, accurate where erf(x) is close to 1.",
    erfinv: """The inverse of :func:`erf` on (-1, 1); +-inf at +-1, nan outside.

    Example:
        >>> ember.erfinv(ember.tensor([0., 0.5, -1.]))
        tensor([0.0000, 0.4769,   -inf])
    """,
})
erf.errors = [dtype_error("erf", (3,), dtype=np.complex64)]
for _d in (rsqrt, exp2, expm1, log1p, log2, log10, tan, asin, acos, atan, sinh, cosh, asinh,
           acosh, atanh, erf, erfc, erfinv):
    _d.half_ulps = LIBM_ULP
erfinv.errors = [dtype_error("erfinv", (3,), dtype=np.complex128)]

# ---- rounding -----------------------------------------------------------------------------


def _rounding(name, f, aliases=()):
    """An op rounding floats by ``f`` that leaves integers as they are; its gradient is 0."""
    def fwd(xp, input):
        return input.copy() if input.dtype.kind in "iu" else f(xp, input)
    fwd.__doc__ = f"``{name}`` of each element (integers are returned unchanged)."
    d = op(name, tags=("pointwise",), inplace=True, aliases=aliases)(reject(name, "bc", fwd))
    d.vjp()(_zero_grad)     # NOTE: zeros where g is nan too, as torch's zeros_like(grad)
    d.meta, d.samples = same_meta, _rounding_samples
    return d


def _rounding_samples(dev, dt):
    return unary_samples(dev, dt, domain=(-4.0, 4.0)) if dt.category in (1, 2) else []


floor = _rounding("floor", lambda xp, x: ufunc_of(xp, "floor")(x))
ceil = _rounding("ceil", lambda xp, x: ufunc_of(xp, "ceil")(x))
trunc = _rounding("trunc", lambda xp, x: ufunc_of(xp, "trunc")(x), aliases=("fix",))


@op("round", tags=("pointwise",), inplace=True)
@reject("round", "bc")
def round(xp, input, *, decimals=0):
    """Round half to even, to ``decimals`` decimal places (negative: to tens, hundreds...).

    Example:
        >>> ember.round(ember.tensor([0.5, 1.5, 2.5]))
        tensor([0., 2., 2.])
        >>> ember.round(ember.tensor([1.2345, -2.5]), decimals=2)
        tensor([ 1.2300, -2.5000])
    """
    if input.dtype.kind in "iu":
        return input.copy()
    if decimals == 0:
        return ufunc_of(xp, "rint")(input)
    # NOTE: torch scales by 10**|decimals| and divides or multiplies, as NumPy's round does.
    p = 10.0 ** abs(decimals)
    if decimals > 0:
        return (xp.rint(input * p) / p).astype(input.dtype, copy=False)
    return (xp.rint(input / p) * p).astype(input.dtype, copy=False)


round.vjp()(lambda g, input, *, decimals=0: _zero_grad(g))     # NOTE: as floor's
round.meta = same_meta
round.samples = lambda dev, dt: _rounding_samples(dev, dt) + (
    [Sample(make((3, 4), dt, -40, 40), decimals=1), Sample(make((5,), dt, -400, 400),
                                                            decimals=-1)]
    if dt.category == 2 else [])
round.errors = [dtype_error("round", (3,), dtype=bool)]
round.grad_name_of = overload_if_given("round", 1, "decimals", 0)


@op("frac", tags=("pointwise",), inplace=True)
@reject("frac", "biuc")
def frac(xp, input):
    """``input - trunc(input)``, the fractional part with the sign of ``input``.

    Example:
        >>> ember.frac(ember.tensor([1.5, -2.25]))
        tensor([ 0.5000, -0.2500])
    """
    r = _C.pointwise("frac", input, min_size=64)
    return input - xp.trunc(input) if r is None else r


frac.vjp()(lambda g, input: g)
frac.meta = same_meta
frac.samples = lambda dev, dt: unary_samples(dev, dt, (-4.0, 4.0)) if dt.category == 2 else []
frac.kinks = tuple(float(k) for k in range(-4, 5))
frac.errors = [dtype_error("frac", (3,)), dtype_error("frac", (3,), dtype=bool)]


@op("positive", tags=("pointwise",), view=True)
def positive(xp, input):
    """``input`` itself (as a view), for ``+tensor``; bool tensors are rejected like torch."""
    if input.dtype == np.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input.view()


positive.vjp()(lambda g, input: g)
positive.samples = unary_samples
positive.errors = [ErrorSample(Sample(const(3, dtype=bool)), RuntimeError, "on a bool tensor")]


@op("square", tags=("pointwise",), inplace=True)
def square(xp, input):
    """``input * input``; bool tensors square to int64 like torch.

    Example:
        >>> ember.square(ember.tensor([True, False]))
        tensor([1, 0])
    """
    return ufunc_of(xp, "square")(input.astype(np.int64) if input.dtype == np.bool_ else input)


square.vjp(save=("input",))(lambda g, input: g * 2 * input.conj())
square.meta = lambda x: same_meta(x).astype(np.int64) if x.dtype == np.bool_ else same_meta(x)
square.samples = unary_samples
square.grad_name = "PowBackward0"


@op("relu", tags=("pointwise",), inplace=True)
def relu(xp, input):
    """``max(input, 0)``."""
    if input.dtype == np.bool_:
        raise RuntimeError("Boolean inputs not supported for relu")
    if input.dtype.kind == "c":
        raise NotImplementedError("clamp is not supported for complex types")
    # (NumPy's maximum against a scalar takes a branchy loop: ~4x the C clamp on random signs)
    if (r := _C.pointwise("clamp", input, 0.0, math.inf, min_size=64)) is not None:
        return r
    return xp.maximum(xp.zeros((), input.dtype), input)     # NOTE: -0.0 stays, as torch's (clamp)


relu.vjp(save=("result",))(lambda g, input, result: threshold_backward(g, result, 0))


@op("threshold_backward", tags=("pointwise",), promote="common", method=False, function=False)
def threshold_backward(xp, grad_output, input, threshold):
    """``grad_output`` where ``input > threshold``, else 0: relu's gradient as one op (torch's
    ``aten::threshold_backward``). A multiply by the mask: ``g * result.sign()`` made four
    passes (sign's NaN rule among them), and ``numpy.where`` on a random mask is much slower
    than the multiply (a branch per element)."""
    if (r := _C.pointwise("threshold_bwd", input, threshold, other=grad_output,
                          min_size=64)) is not None:
        return r
    return xp.multiply(grad_output, input > threshold)


# NOTE: the mask is constant: the second derivative through ``input`` is zero, as torch's
threshold_backward.vjp(save=("input",))(
    lambda g, grad_output, input, threshold: (threshold_backward(g, input, threshold), None))
threshold_backward.meta = broadcast_meta
relu.meta = same_meta
relu.samples = unary_samples
relu.kinks = (0.0,)
relu.errors = [ErrorSample(Sample(const(3, dtype=bool)), RuntimeError, "Boolean inputs"),
               ErrorSample(Sample(const(3, dtype=np.complex64)), NotImplementedError, "complex")]

# ---- floating-point predicates and repairs -----------------------------------------------


def _predicate(name, f, complex_ok=True, on_int=False):
    """A bool-valued test of floats; integer (and bool) inputs give ``on_int``: a constant, or
    a function of the array."""
    def fwd(xp, input):
        if input.dtype.kind == "c" and not complex_ok:
            raise RuntimeError(f"{name} does not support complex inputs.")
        if input.dtype.kind in "biu":
            return on_int(xp, input) if callable(on_int) else xp.full(input.shape, on_int)
        return f(xp, input)
    fwd.__doc__ = f"``{name}`` of each element, as a bool tensor."
    d = op(name, tags=("pointwise",), differentiable=False)(fwd)
    d.meta, d.samples = bool_meta, _special_samples
    return d


def _special_samples(dev, dt):
    x = make((3, 4), dt, -3, 3)
    if dt.category >= 2:
        x.reshape(-1)[[1, 4, 6, 9]] = [np.inf, -np.inf, np.nan, -0.0]
    return [Sample(x), Sample(make((), dt))]


isnan = _predicate("isnan", lambda xp, x: ufunc_of(xp, "isnan")(x))
isinf = _predicate("isinf", lambda xp, x: xp.isinf(x))
isfinite = _predicate("isfinite", lambda xp, x: ufunc_of(xp, "isfinite")(x), on_int=True)
isposinf = _predicate("isposinf", lambda xp, x: x == xp.inf, complex_ok=False)
isneginf = _predicate("isneginf", lambda xp, x: x == -xp.inf, complex_ok=False)
signbit = _predicate("signbit", lambda xp, x: xp.signbit(x), complex_ok=False,
                     on_int=lambda xp, x: x < 0)
signbit.skips = {"bfloat16": "the oracle's float32 -> bfloat16 cast sets the sign bit of nan"}


@op("nan_to_num", tags=("pointwise",), inplace=True)
def nan_to_num(xp, input, nan=0.0, posinf=None, neginf=None):
    """Replace nan by ``nan``, +inf by ``posinf`` and -inf by ``neginf`` (default: the
    largest and lowest finite values of the dtype).

    Example:
        >>> ember.nan_to_num(ember.tensor([float("nan"), float("inf"), 1.]), posinf=9.)
        tensor([0., 9., 1.])
    """
    if input.dtype.kind in "biu":
        return input.copy()
    if input.dtype.kind == "c":
        re, im = (nan_to_num.fwd(xp, p, nan, posinf, neginf) for p in (input.real, input.imag))
        return (re + 1j * im).astype(input.dtype, copy=False)
    # (NumPy's finfo is cached; ml_dtypes' builds one per call: only for its own dtypes)
    fi = (np.finfo if input.dtype.type in (np.float16, np.float32, np.float64) else
          ember._dtype.ml_dtypes().finfo)(input.dtype)
    hi, lo = fi.max if posinf is None else posinf, fi.min if neginf is None else neginf
    if (r := _C.pointwise("nan_to_num", input, nan, hi, lo)) is not None:
        return r
    r = xp.where(xp.isnan(input), nan, input)
    r = xp.where(r == xp.inf, hi, xp.where(r == -xp.inf, lo, r))
    return r.astype(input.dtype, copy=False)


@nan_to_num.vjp(save=("input",))
def _(g, input, nan=0.0, posinf=None, neginf=None):
    if input.is_complex():
        # NOTE: as torch: no gradient formula for complex outputs of nan_to_num
        raise RuntimeError("nan_to_num does not support automatic differentiation for outputs "
                           "with complex dtype.")
    return g * input.isfinite().to(g.dtype)


nan_to_num.skips = {"grad-complex128": "torch has no gradient for complex nan_to_num either"}
nan_to_num.meta = same_meta
nan_to_num.samples = lambda dev, dt: _special_samples(dev, dt) + [
    Sample(_special_samples(dev, dt)[0].args[0], 1.5, 100.0, -100.0)]

positive.jvp = LINEAR
