"""Pointwise comparisons and logic: eq/ne/lt/le/gt/ge, where, logical_* and bitwise_* (the
Python operators ``==``, ``&``, ``~``... reach them through _tensor_methods.py)."""
import numpy as np

import ember

from .. import _dtype
from .meta import bool_meta, broadcast_meta, empty, same_meta
from .pointwise import par_where, reject, ufunc_of
from .tangents import linear_with
from .registry import op
from .samples import (ErrorSample, Sample, binary_samples, compare_samples, const, dtype_error,
                      unary_samples, where_samples)

# ---- comparisons ----------------------------------------------------------------------------


def _ordered(name, f):
    def fwd(xp, input, other):
        if getattr(input, "dtype", None) is not None and input.dtype.kind == "c":
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for 'ComplexDouble'")
        return f(xp, input, other)
    return fwd


def _compare(name, fwd, aliases=()):
    if name not in ("eq", "ne"):
        fwd = _ordered(name, fwd)
    d = op(name, tags=("pointwise", "comparison"), promote="common", differentiable=False,
           aliases=aliases, inplace=True)(fwd)
    d.__doc__ = f"``{name}`` of each pair of elements, broadcast, as a bool tensor."
    d.meta, d.samples = bool_meta, compare_samples
    return d


def _bytewise(f):
    """``f``, and for two float4_e2m1fn_x2 (void) arrays, ``f`` of their bytes: as torch,
    packed float4 tensors compare byte for byte and support nothing else."""
    def fwd(xp, input, other):
        try:
            return f(xp, input, other)
        except TypeError:
            if getattr(other, "dtype", None) != input.dtype or input.dtype != np.dtype("V1"):
                raise
            return f(xp, input.view(np.uint8), other.view(np.uint8))
    return fwd


eq = _compare("eq", _bytewise(lambda xp, input, other: ufunc_of(xp, "equal")(input, other)))
ne = _compare("ne", _bytewise(lambda xp, input, other: ufunc_of(xp, "not_equal")(input, other)),
              aliases=("not_equal",))
lt = _compare("lt", lambda xp, input, other: ufunc_of(xp, "less")(input, other),
              aliases=("less",))
le = _compare("le", lambda xp, input, other: ufunc_of(xp, "less_equal")(input, other),
              aliases=("less_equal",))
gt = _compare("gt", lambda xp, input, other: ufunc_of(xp, "greater")(input, other), aliases=("greater",))
ge = _compare("ge", lambda xp, input, other: ufunc_of(xp, "greater_equal")(input, other),
              aliases=("greater_equal",))


@op("where", promote="common", promote_args=(1, 2), method=False)   # Tensor.where: _composites
def where(xp, condition, input=None, other=None):
    """``input`` where ``condition`` holds, else ``other``; ``where(condition)`` alone is
    ``condition.nonzero(as_tuple=True)``."""
    if input is None and other is None:
        from .selection import nonzero
        return nonzero.fwd(xp, condition, as_tuple=True)
    if input is None or other is None:
        raise TypeError("missing required argument 'other' (pos 3)")
    if not hasattr(input, "dtype") and not hasattr(other, "dtype"):
        # two Python scalars: torch's scalar promotion (floats to the default dtype)
        return xp.where(condition, input, other).astype(_scalars_dtype(input, other).np)
    return (par_where if xp is np and getattr(condition, "size", 0) + getattr(
        other, "size", 0) > _FEW else xp.where)(condition, input, other)   # (small: NumPy's)


def _scalars_dtype(*scalars):
    return _dtype.result_type_of([], [], [_dtype._scalar_dtype(s) for s in scalars])


@where.vjp(save=("condition",))
def _(g, condition, input, other):
    zero = ember.zeros((), dtype=g.dtype, device=g.device)
    return None, ember.where(condition, g, zero), ember.where(condition, zero, g)


def _where_meta(c, a=None, b=None):
    if a is None and b is None:
        raise NotImplementedError("where(condition): the output shape depends on the values of "
                                  "condition, which the meta device does not have")
    dts = [x.dtype for x in (a, b) if hasattr(x, "dtype")]
    return empty(broadcast_meta(c, a, b).shape, np.result_type(*dts) if dts else
                 _scalars_dtype(a, b).np)


where.meta = _where_meta
where.samples = lambda dev, dt: where_samples(dev, dt)
where.errors = [ErrorSample(Sample(const(3, 4, dtype=bool), const(3, 4), const(2, 4)), RuntimeError,
                            "must match the size of tensor b"),
                ErrorSample(Sample(const(3, 4, dtype=bool), const(3, 4)), TypeError,
                            "missing required argument 'other'")]

# ---- logic and bits --------------------------------------------------------------------------

_NOT_INT = "fcV"        # NumPy kinds of float, complex, and ml_dtypes' bfloat16 and float8


def _logical(name, f):
    d = op(name, tags=("pointwise",), differentiable=False, inplace=True)(f)
    d.__doc__ = f"Elementwise ``{name}``, treating non-zero as True; a bool tensor."
    d.meta = bool_meta
    d.samples = lambda dev, dt: compare_samples(dev, dt)[:2] + _edges(dt, 2)
    return d


def _edges(dt, n):
    """Floats that are all true or false on their own terms: signed zeros, nan, infinities, a
    denormal (``n`` operands: the values and them reversed)."""
    if dt.category != 2:
        return []
    e = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, 2.0], dt.np)
    # (tiled: past _FEW, the truth-casts' path)
    return [Sample(e, e[::-1].copy()), Sample(np.tile(e, 40), np.tile(e[::-1], 40))] \
        if n == 2 else [Sample(e)]


def _is_bool(x):
    return getattr(x, "dtype", None) == bool


def _truth(x, xp):
    # (NumPy's logical ufuncs on floats run a scalar loop ~5x slower than comparing with 0, a
    # SIMD one; nan is true either way)
    return x if _is_bool(x) else ufunc_of(xp, "not_equal")(x, 0)


# operands' elements up to which NumPy's logical ufunc (one call, a scalar loop on floats)
# beats the truth-casts and a bitwise op (three SIMD calls, ~1 us each)
_FEW = 256


def _logic(name, large):
    u = getattr(np, name)
    return _logical(name, lambda xp, input, other: u(input, other) if xp is np and getattr(
        input, "size", 1) + getattr(other, "size", 1) <= _FEW else large(xp, input, other))


logical_and = _logic("logical_and", lambda xp, input, other: ufunc_of(xp, "bitwise_and")(
    _truth(input, xp), _truth(other, xp)))
logical_or = _logic("logical_or", lambda xp, input, other: ufunc_of(xp, "bitwise_or")(
    _truth(input, xp), _truth(other, xp)))
logical_xor = _logic("logical_xor", lambda xp, input, other: _truth(input, xp) !=
                     _truth(other, xp))
logical_not = _logical("logical_not", lambda xp, input: xp.logical_not(input) if _is_bool(input)
                       else input == 0)
logical_not.samples = lambda dev, dt: unary_samples(dev, dt) + _edges(dt, 1)


def _bitwise(name, f):
    f = reject(name, _NOT_INT, f)
    d = op(name, tags=("pointwise",), differentiable=False, promote="common", inplace=True)(f)
    d.__doc__ = f"Elementwise ``{name}`` of integer or bool tensors."
    d.meta = broadcast_meta
    d.samples = lambda dev, dt: binary_samples(dev, dt) if dt.category <= 1 else []
    return d


bitwise_and, bitwise_or, bitwise_xor = (_bitwise(n, lambda xp, input, other, n=n: ufunc_of(
    xp, n)(input, other)) for n in ("bitwise_and", "bitwise_or", "bitwise_xor"))
bitwise_and.errors = [dtype_error("bitwise_and", (3,), (3,), dtype=np.float32)]


@op("bitwise_not", tags=("pointwise",), differentiable=False, inplace=True)
def bitwise_not(xp, input):
    """``~input`` for integer and bool tensors."""
    if input.dtype.kind in "fc":
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type "
                        "tensors")
    return xp.invert(input)


bitwise_not.meta = same_meta

where.jvp = linear_with("input", "other")
