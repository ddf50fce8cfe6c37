"""Pointwise ops of two or three operands: rounded division and remainders, two-argument math,
extrema, clamping, interpolation and the fused ``addc*`` updates."""
import math

import numpy as np

import ember

from .._C import kernels as _C
from ..autograd.graph import needs_input_grad
from .meta import broadcast_meta, empty
from .pointwise import _conj, fused_grad, reject, ufunc_of
from .registry import LIBM_ULP, node_name, op, overload_if_tensor
from .samples import (ErrorSample, Sample, binary_samples, broadcast_errors, const, dtype_error,
                      make)

# ---- rounded division and remainders -------------------------------------------------------


_INT64 = np.dtype(np.int64)


def _check_int_divisor(xp, a, b):
    # NOTE: NumPy returns 0 (with a warning) for an integer division by zero; torch raises.
    if getattr(a, "dtype", _INT64).kind not in "iu":
        return
    if type(b) is int:          # (the common ``i // 2``: no array made to compare)
        zero = b == 0
    else:
        zero = getattr(b, "dtype", _INT64).kind in "iu" and bool(xp.any(xp.asarray(b) == 0))
    if zero:
        raise RuntimeError("ZeroDivisionError")


def div_rounded(xp, a, b, mode):
    """``a / b`` rounded toward zero (``"trunc"``) or down (``"floor"``), integers exact."""
    if mode not in ("trunc", "floor"):
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or "
                           f"'floor' but found '{mode}'")
    _check_int_divisor(xp, a, b)
    if mode == "floor" or getattr(a, "dtype", _INT64).kind in "biu" and \
            getattr(b, "dtype", _INT64).kind in "biu":
        q = ufunc_of(xp, "floor_divide")(a, b)
        if mode == "floor":
            return q
        # floor and trunc differ where the exact quotient is negative
        return q + ((q < 0) & (xp.remainder(a, b) != 0)).astype(q.dtype)
    return xp.trunc(xp.true_divide(a, b))


def _nonzero_binary_samples(dev, dt):
    return binary_samples(dev, dt, nonzero_rhs=True) if dt.category in (1, 2) else []


@op("floor_divide", tags=("pointwise",), promote="common", inplace=True, opmath="scalar")
@reject("div_floor", "bc")
def floor_divide(xp, input, other):
    """``input // other``: the quotient rounded down (as ``div(..., rounding_mode="floor")``).

    Example:
        >>> ember.tensor([7, -7]) // 2
        tensor([ 3, -4])
    """
    return div_rounded(xp, input, other, "floor")


floor_divide.vjp()(lambda g, input, other: (g * 0, g * 0))
floor_divide.meta = broadcast_meta
floor_divide.half_ulps = (2, "torch's div_floor and NumPy's floor_divide differ near integers")
floor_divide.samples = _nonzero_binary_samples
floor_divide.errors = [dtype_error("div_floor", (3,), (3,), dtype=bool)]


@op("remainder", tags=("pointwise",), promote="common", inplace=True)
@reject("remainder", "bc")
def remainder(xp, input, other):
    """Python's ``%``: the remainder has the sign of ``other``.

    Example:
        >>> ember.remainder(ember.tensor([-3., 3.]), 2)
        tensor([1., 1.])
    """
    _check_int_divisor(xp, input, other)
    r = _C.pointwise("remainder", input, other=other, min_size=64) if type(other) not in (
        int, float) else _C.pointwise("remainder_scalar", input, other, min_size=64)
    return xp.remainder(input, other) if r is None else r


@remainder.vjp(save=("input", "other"))
def _(g, input, other):
    # (a number divisor has no gradient: the floor division would be thrown away)
    return g, -g * ember.div(input, other, rounding_mode="floor") \
        if isinstance(other, ember.Tensor) and needs_input_grad(1) else None


@op("fmod", tags=("pointwise",), promote="common", inplace=True)
@reject("fmod", "bc")
def fmod(xp, input, other):
    """C's ``fmod``: the remainder has the sign of ``input``.

    Example:
        >>> ember.fmod(ember.tensor([-3., 3.]), 2)
        tensor([-1.,  1.])
    """
    _check_int_divisor(xp, input, other)
    return ufunc_of(xp, "fmod")(input, other)


def real_ufunc(opdef, f):
    """``f(a, b)`` as ``opdef``'s OpDef.ufunc (the C dispatch's call on float operands,
    skipping the forward's frames: reject's, the forward's, its helpers') for an op that
    rejects complex operands: a complex one takes the forward, which raises torch's error."""
    def ufunc(a, b):
        if a.dtype.kind == "c" or getattr(b, "dtype", a.dtype).kind == "c":
            return opdef.fwd(np, a, b)
        return f(a, b)
    return ufunc


fmod.ufunc = real_ufunc(fmod, ufunc_of(np, "fmod"))


@fmod.vjp(save=("input", "other"))
def _(g, input, other):
    return g, -g * ember.div(input, other, rounding_mode="trunc")


remainder.meta = fmod.meta = broadcast_meta
remainder.samples = fmod.samples = _nonzero_binary_samples
remainder.errors = fmod.errors = [
    ErrorSample(Sample(const(3, dtype=np.int64), 0), RuntimeError, "ZeroDivisionError"),
    dtype_error("", (3,), (3,), dtype=bool)]
remainder.grad_name_of = overload_if_tensor("remainder", 1, "other")
fmod.grad_name_of = overload_if_tensor("fmod", 1, "other")

# ---- two-argument math ---------------------------------------------------------------------


def _tensor_samples(dev, dt):
    """binary_samples without a Python-number operand (these torch ops take tensors only)."""
    return [s for s in binary_samples(dev, dt) if all(isinstance(a, np.ndarray) for a in s.args)]


@op("atan2", tags=("pointwise", "autocast_promote_cuda"), promote="float", inplace=True,
     aliases=("arctan2",))
@reject("atan2", "c")
def atan2(xp, input, other):
    """The angle of the point ``(other, input)``, in (-pi, pi].

    Example:
        >>> ember.atan2(ember.tensor([1.]), ember.tensor([-1.]))
        tensor([2.3562])
    """
    return ufunc_of(xp, "arctan2")(input, other)


@atan2.vjp(save=("input", "other"))
def _(g, input, other):
    r2 = input * input + other * other
    d = ember.where(r2 == 0, 0.0, g / r2)         # torch: no gradient at the origin, not nan
    return d * other, -d * input


atan2.meta = broadcast_meta
atan2.half_ulps = LIBM_ULP
atan2.samples = _tensor_samples
atan2.errors = broadcast_errors()


@op("hypot", tags=("pointwise",), promote="common", inplace=True)
@reject("hypot", "biuc")
def hypot(xp, input, other):
    """``sqrt(input**2 + other**2)`` without overflow.

    Example:
        >>> ember.hypot(ember.tensor([3.]), ember.tensor([4.]))
        tensor([5.])
    """
    return ufunc_of(xp, "hypot")(input, other)


@hypot.vjp(save=("input", "other", "result"))
def _(g, input, other, result):
    return g * input / result, g * other / result


hypot.meta = broadcast_meta
hypot.half_ulps = LIBM_ULP
hypot.samples = lambda dev, dt: _tensor_samples(dev, dt) if dt.category == 2 else []
hypot.errors = [dtype_error("hypot", (3,), (3,))]


@op("copysign", tags=("pointwise",), promote="float", inplace=True)
@reject("copysign", "c")
def copysign(xp, input, other):
    """``|input|`` with the sign (sign bit included) of ``other``.

    Example:
        >>> ember.copysign(ember.tensor([1., 2.]), -1)
        tensor([-1., -2.])
    """
    return ufunc_of(xp, "copysign")(input, other)


@copysign.vjp(save=("input", "result"))
def _(g, input, other, result):
    # d/dx copysign(x, y) = sign(x) * sign(y) = result / x, which torch makes 0 at x == 0
    return g * ember.where(input == 0, 0.0, result / input), g * 0


copysign.meta = broadcast_meta
copysign.samples = binary_samples
copysign.kinks = (0.0,)
copysign.grad_name_of = overload_if_tensor("copysign", 1, "other", 0, 1)


@op("logaddexp", tags=("pointwise",), promote="common", inplace=False)
@reject("logaddexp", "biu")
def logaddexp(xp, input, other):
    """``log(exp(input) + exp(other))`` without overflow.

    Example:
        >>> ember.logaddexp(ember.tensor([1000.]), ember.tensor([1000.]))
        tensor([1000.6932])
    """
    if input.dtype.kind != "c":
        r = _C.pointwise("logaddexp", input, other=other, min_size=64)
        return xp.logaddexp(input, other) if r is None else r
    # NumPy's logaddexp is real only: factor out the operand of larger real part
    m = xp.where(input.real >= other.real, input, other)
    return m + xp.log(xp.exp(input - m) + xp.exp(other - m))


@logaddexp.vjp(save=("input", "other", "result"))
def _(g, input, other, result):
    return g * _conj((input - result).exp()), g * _conj((other - result).exp())


@op("logaddexp2", tags=("pointwise",), promote="common")
@reject("logaddexp2", "biuc")
def logaddexp2(xp, input, other):
    """``log2(2**input + 2**other)`` without overflow."""
    return ufunc_of(xp, "logaddexp2")(input, other)


@logaddexp2.vjp(save=("input", "other", "result"))
def _(g, input, other, result):
    return g * (input - result).exp2(), g * (other - result).exp2()


logaddexp.meta = logaddexp2.meta = broadcast_meta
logaddexp.half_ulps = logaddexp2.half_ulps = LIBM_ULP
logaddexp.samples = logaddexp2.samples = hypot.samples
logaddexp.errors = [dtype_error("logaddexp", (3,), (3,))] + broadcast_errors()


# NOTE: torch computes xlogy, xlog1py and logit of float16/bfloat16 in that dtype, rounding
# log(y) before the product (no opmath)
@op("xlogy", tags=("pointwise",), promote="float", inplace=True, opmath=False)
def xlogy(xp, input, other):
    """``input * log(other)``, and 0 where ``input == 0`` unless ``other`` is nan.

    Example:
        >>> ember.xlogy(ember.tensor([0., 2.]), ember.tensor([0., 3.]))
        tensor([0.0000, 2.1972])
    """
    r = _C.pointwise("xlogy", input, other=other)     # (float32 alone: refuses nothing)
    return _xlogy(xp, input, other) if r is None else r


@reject("xlogy", "c")
def _xlogy(xp, input, other):
    with np.errstate(divide="ignore", invalid="ignore"):    # log(0), 0 * inf: as torch, quiet
        r = xp.multiply(input, xp.log(other))
    r = xp.where((xp.asarray(input) == 0) & ~xp.isnan(other), 0, r)
    return r.astype(xp.result_type(input, other), copy=False)


@xlogy.vjp(save=("input", "other"))
def _(g, input, other):
    gx = ember.where((input == 0) & (other <= 0), 0.0, ember.xlogy(g, other))
    return gx, g * input / other


xlogy.meta = broadcast_meta
xlogy.half_ulps = LIBM_ULP
xlogy.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((3, 4), dt, 0.1, 3, seed=1)),
    Sample(make((3, 4), dt), make((4,), dt, 0.1, 3, seed=2)),
    Sample(np.array([0.0, 1.0, 0.0, 2.0]).astype(make((1,), dt).dtype),
           make((4,), dt, 0.1, 3, seed=3)),
    Sample(make((3,), dt), 2.5)] if dt.category in (1, 2) else []


def _xlogy_node(name):
    """torch's node of xlogy-like ``name``: a number ``other`` (overload 2), a number ``input``
    (1), else 0."""
    names = [node_name(name, i) for i in range(3)]
    return lambda input, other: names[2 if not hasattr(other, "_data") else 1 if not hasattr(
        input, "_data") else 0]


xlogy.grad_name_of = _xlogy_node("xlogy")


# ---- extrema -------------------------------------------------------------------------------


_EXTREMUM_NOTE = {"m": " (nan if either is nan)", "f": " (nan only if both are nan)"}
_EXTREMUM_RESULTS = {"maximum": "tensor([2., 5.])", "minimum": "tensor([1., 3.])",
                     "fmax": "tensor([2., 5.])", "fmin": "tensor([1., 3.])"}


def _extremum(name, f, grads):
    def fwd(xp, input, other):
        if input.dtype.kind == "c" or getattr(other, "dtype", input.dtype).kind == "c":
            raise RuntimeError(f"{name} not implemented for complex tensors.")
        return f(xp, input, other)
    fwd.__doc__ = f"""Elementwise ``{name}`` of two tensors{_EXTREMUM_NOTE[name[0]]}.

    Example:
        >>> ember.{name}(ember.tensor([1., 5.]), ember.tensor([2., 3.]))
        {_EXTREMUM_RESULTS[name]}
    """
    d = op(name, tags=("pointwise",), promote="common")(fwd)
    d.vjp(save=("input", "other"))(lambda g, input, other: tuple(
        g * m.to(g.dtype) for m in grads(input, other)))
    d.meta, d.samples = broadcast_meta, _tensor_samples
    d.errors = broadcast_errors() + [ErrorSample(Sample(const(3, dtype=np.complex64), const(3)),
                                                 RuntimeError, f"{name} not implemented")]
    return d


def _split_ties(a, b):
    # NOTE: torch gives each operand half of the gradient where they are equal
    half = (a == b).to(ember.get_default_dtype()) / 2
    return (a > b) + half, (b > a) + half


maximum = _extremum("maximum", lambda xp, a, b: ufunc_of(xp, "maximum")(a, b), _split_ties)
minimum = _extremum("minimum", lambda xp, a, b: ufunc_of(xp, "minimum")(a, b),
                    lambda a, b: _split_ties(b, a))


def _chosen(first):
    # fmax/fmin ignore nan: the gradient goes to the operand chosen (``input`` on ties)
    return first, ~first


fmax = _extremum("fmax", lambda xp, a, b: ufunc_of(xp, "fmax")(a, b),
                 lambda a, b: _chosen((a >= b) | b.isnan()))
fmin = _extremum("fmin", lambda xp, a, b: ufunc_of(xp, "fmin")(a, b),
                 lambda a, b: _chosen((a <= b) | b.isnan()))

# ---- clamping ------------------------------------------------------------------------------


def _clamp_dtype(input, lo, hi):
    # NOTE: keyword bounds reach the forward as Python numbers, outside dispatch's promotion;
    # torch still promotes an integer tensor clamped by a float to the default float.
    if input.dtype.kind in "biu":
        if any(isinstance(v, float) for v in (lo, hi)):
            return ember.get_default_dtype().np
        if input.dtype.kind == "b" and any(type(v) is int for v in (lo, hi)):
            return np.dtype(np.int64)
    return input.dtype


def _need_a_bound(min, max):
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")


def _limit(xp, r, min, max, out=None):
    """``r`` limited to ``[min, max]`` by two ufuncs (written into ``out`` where given)."""
    # NOTE: a bound equal to r (-0.0 against 0.0) gives r, as torch: NumPy's float32/64
    # maximum and minimum return their second operand at a tie
    if min is not None:
        r = ufunc_of(xp, "maximum")(min, r, out=out)
    if max is not None:
        r = ufunc_of(xp, "minimum")(max, r, out=out)
    return r


def _clamp_into(out, input, min=None, max=None):
    """clamp's value written into ``out`` (a float ``input`` itself, bounds of its dtype or
    numbers: the C in-place path's call), by the forward's two ufuncs."""
    _need_a_bound(min, max)
    _limit(np, input, min, max, out)


@op("clamp", tags=("pointwise",), promote="common", promote_args=(0, 1, 2), inplace=True,
    aliases=("clip",), into=_clamp_into)
def clamp(xp, input, min=None, max=None):
    """Limit ``input`` to ``[min, max]`` (either may be None; numbers or tensors).

    Example:
        >>> ember.clamp(ember.tensor([-2., 0.5, 3.]), min=-1, max=1)
        tensor([-1.0000,  0.5000,  1.0000])
        >>> ember.tensor([1, 5]).clamp(max=2.5)
        tensor([1.0000, 2.5000])
    """
    _need_a_bound(min, max)
    if input.dtype.kind == "c":
        raise NotImplementedError("clamp is not supported for complex types")
    dt = _clamp_dtype(input, min, max)
    if all(v is None or type(v) in (int, float) and v == v for v in (min, max)) and \
            (r := _C.pointwise("clamp", input, -math.inf if min is None else min,
                               math.inf if max is None else max)) is not None:
        return r
    return _limit(xp, input.astype(dt, copy=False), min, max).astype(dt, copy=False)


@clamp.vjp(save=("input", "min", "max"))
def _(g, input, min=None, max=None):
    if all(v is None or type(v) in (int, float) for v in (min, max)) and (r := fused_grad(
            "clamp", input, g, -math.inf if min is None else min,
            math.inf if max is None else max)) is not None:
        return r, None, None
    inside = ember.ones((), dtype=ember.bool, device=g.device)
    gmin = gmax = None
    if min is not None:
        inside = inside & (input >= min)
        gmin = g * (input < min).to(g.dtype)
    if max is not None:
        inside = inside & (input <= max)
        gmax = g * (input > max).to(g.dtype)
    return ember.where(inside, g, 0.0), gmin, gmax      # (0 outside, as torch: not g * 0)


def _clamp_meta(input, min=None, max=None):
    arrays = [a for a in (input, min, max) if isinstance(a, np.ndarray)]
    return empty(np.broadcast_shapes(*(a.shape for a in arrays)), _clamp_dtype(input, min, max))


def _clamp_samples(dev, dt):
    if dt.category not in (1, 2):
        return []
    x = make((3, 4), dt, -3, 3)
    lo, hi = make((3, 4), dt, -2, -0.5, seed=1), make((4,), dt, 0.5, 2, seed=2)
    return [Sample(x, -0.5, 0.5), Sample(x, min=-1), Sample(x, max=0.75), Sample(x, lo, hi),
            Sample(x, None, hi), Sample(x, lo), Sample(make((), dt), -0.5, 0.5)]


clamp.meta, clamp.samples = _clamp_meta, _clamp_samples
clamp.errors = [ErrorSample(Sample(const(3, 4)), RuntimeError, "At least one of 'min' or 'max'"),
                ErrorSample(Sample(const(3, 4), const(3, 4), const(2, 4)), RuntimeError,
                            "must match the size of tensor b"),
                ErrorSample(Sample(const(3, dtype=np.complex64), 0.5), RuntimeError, "complex")]
clamp.grad_name_of = lambda input, min=None, max=None: \
    "ClampBackward0" if hasattr(min, "_data") or hasattr(max, "_data") else "ClampBackward1"


def _one_sided(name, side):
    u = "minimum" if side == "max" else "maximum"

    def fwd(xp, input, bound):
        if type(bound) in (int, float) and input.dtype.kind == "f" and input.size <= 4096:
            return ufunc_of(xp, u)(bound, input)    # (one call: clamp's checks, its kernel's)
        return clamp.fwd(xp, input, **{side: bound})
    fwd.__doc__ = f"``clamp(input, {side}={side})``."
    d = op(name, tags=("pointwise",), promote="common", inplace=True)(fwd)

    @d.vjp(save=("input", "bound"))
    def _(g, input, bound):
        gi, gmin, gmax = clamp.vjp_fn(g, input, **{side: bound})
        return gi, gmin if side == "min" else gmax

    d.meta = lambda input, bound: _clamp_meta(input, **{side: bound})
    d.samples = lambda dev, dt: [Sample(*s.args[:2]) for s in _clamp_samples(dev, dt)
                                 if len(s.args) > 1 and s.args[1] is not None]
    return d


clamp_min = _one_sided("clamp_min", "min")
clamp_min.grad_name_of = overload_if_tensor("clamp_min", 1, "bound")
clamp_max = _one_sided("clamp_max", "max")
clamp_max.grad_name_of = overload_if_tensor("clamp_max", 1, "bound")

# ---- interpolation and fused updates -------------------------------------------------------


def _lerp_into(out, input, end, weight):
    """lerp's value written into ``out`` for a number ``weight`` by the forward's steps in its
    order (the same roundings), with one temporary: ``ema.lerp_(p, 0.01)``."""
    if type(weight) not in (int, float):
        raise TypeError("lerp's write into its input takes a number weight")
    d = np.subtract(end, input)
    if abs(weight) < 0.5:
        return np.add(input, np.multiply(d, weight, out=d), out=out)
    return np.subtract(end, np.multiply(d, 1 - weight, out=d), out=out)


@op("lerp", tags=("pointwise",), promote="common", promote_args=(0, 1, 2), inplace=True,
    opmath="scalar", into=_lerp_into)
def lerp(xp, input, end, weight):
    """``input + weight * (end - input)``, exact at ``weight == 1``.

    Example:
        >>> ember.lerp(ember.tensor([0., 10.]), ember.tensor([10., 20.]), 0.25)
        tensor([ 2.5000, 12.5000])
    """
    # NOTE: torch's formula: from ``end`` backwards when |weight| >= 0.5, so lerp(a, b, 1) == b
    if type(weight) in (int, float) and (r := _C.pointwise(
            "lerp", input, weight, 1 - weight, abs(weight) < 0.5, other=end)) is not None:
        return r        # (float32 alone: refuses nothing)
    return _lerp(xp, input, end, weight)


@reject("lerp", "biu")
def _lerp(xp, input, end, weight):
    d = xp.subtract(end, input)
    if type(weight) in (int, float):      # (one side of the formula: no where over both)
        r = input + weight * d if abs(weight) < 0.5 else end - d * (1 - weight)
    else:
        r = xp.where(xp.abs(weight) < 0.5, input + weight * d, end - d * (1 - weight))
    return r.astype(xp.result_type(input, end), copy=False)


@lerp.vjp(save=("input", "end", "weight"))
def _(g, input, end, weight):
    # (a number weight has no gradient: end - input would be two passes thrown away)
    return g * _conj(1 - weight), g * _conj(weight), \
        g * _conj(end - input) if isinstance(weight, ember.Tensor) else None


lerp.meta = broadcast_meta
lerp.half_ulps = (None, "torch's vectorized lerp fuses the multiply-add (FMA): where end - input "
                  "cancels, a result near 0 differs in every dtype")
lerp.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((3, 4), dt, seed=1), 0.3),
    Sample(make((3, 4), dt), make((4,), dt, seed=1), 0.8),
    Sample(make((3, 4), dt), make((3, 4), dt, seed=1), make((3, 4), dt, 0, 1, seed=2)),
    Sample(make((2, 1), dt), make((3,), dt, seed=1), make((2, 3), dt, -1, 2, seed=3))] \
    if dt.category >= 2 else []
lerp.errors = [ErrorSample(Sample(const(3, 4), const(5), 0.5), RuntimeError, "must match the size of tensor b")]
lerp.grad_name_of = overload_if_tensor("lerp", 2, "weight")


def _addc(xp, f, input, tensor1, tensor2, value, out=None):
    """``input + value * f(tensor1, tensor2)`` (multiply, true_divide) in the operands' common
    dtype, into ``out`` where given (the C in-place path's write: an optimizer's
    ``v.addcmul_(g, g, value=1 - beta2)``)."""
    if xp is np and type(value) in (int, float) and (r := _C.pointwise(
            "addcmul" if f is np.multiply else "addcdiv", input, value, other=tensor1,
            third=tensor2, out=out, min_size=4096 if value == 1 else 1)) is not None:
        return r        # (the kernel's operands share one float dtype)
    if f is not xp.multiply:
        _int_division(tensor1, tensor2)
    r = f(tensor1, tensor2)
    if type(r) is np.ndarray and r.dtype is input.dtype and r.shape == input.shape and \
            r.dtype.kind in "fc" and type(value) in (int, float) and value == 1:
        # (in place: below 4096 elements quicker than the kernel's call; NumPy's in-place
        # multiply by a Python number costs ~0.8 us, so other values take the kernel)
        return xp.add(r, input, r if out is None else out)
    r = xp.add(input, xp.multiply(r, value), out=out)
    return r if out is not None else r.astype(xp.result_type(input, tensor1, tensor2), copy=False)


# NOTE: ``value`` may come by position here, as add's ``alpha`` may (torch takes both by name
# only): options by name are moved into their places, so the quick paths take the call
@op("addcmul", tags=("pointwise", "autocast_promote_cuda"), promote="common", inplace=True,
    into=lambda out, input, t1, t2, value=1: _addc(np, np.multiply, input, t1, t2, value, out))
def addcmul(xp, input, tensor1, tensor2, value=1):
    """``input + value * tensor1 * tensor2``.

    Example:
        >>> ember.addcmul(ember.ones(2), ember.tensor([2., 3.]), ember.tensor([4., 5.]), value=0.5)
        tensor([5.0000, 8.5000])
    """
    return _addc(xp, xp.multiply, input, tensor1, tensor2, value)


@addcmul.vjp(save=("tensor1", "tensor2"))
def _(g, input, tensor1, tensor2, value=1):
    return g, g * value * _conj(tensor2), g * value * _conj(tensor1)


def _int_division(tensor1, tensor2):
    """addcdiv's refusal of two integer (or bool) operands, in torch's words."""
    if tensor1.dtype.kind in "biu" and tensor2.dtype.kind in "biu":
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a "
                           "future release addcdiv will perform a true division of tensor1 and "
                           "tensor2. The current addcdiv behavior can be replicated using "
                           "floor_divide for integral inputs (self + value * tensor1 // tensor2)"
                           " and division for float inputs (self + value * tensor1 / tensor2)."
                           " The new addcdiv behavior can be implemented with true_divide "
                           "(self + value * torch.true_divide(tensor1, tensor2).")


def _addcdiv_into(out, input, tensor1, tensor2, value=1):
    _addc(np, np.true_divide, input, tensor1, tensor2, value, out)


@op("addcdiv", tags=("pointwise", "autocast_promote_cuda"), promote="common", inplace=True,
    into=_addcdiv_into)
def addcdiv(xp, input, tensor1, tensor2, value=1):
    """``input + value * tensor1 / tensor2`` (floating and complex tensors only).

    Example:
        >>> ember.addcdiv(ember.ones(2), ember.tensor([2., 3.]), ember.tensor([4., 5.]), value=2)
        tensor([2.0000, 2.2000])
    """
    return _addc(xp, xp.true_divide, input, tensor1, tensor2, value)


@addcdiv.vjp(save=("tensor1", "tensor2"))
def _(g, input, tensor1, tensor2, value=1):
    t2 = _conj(tensor2)
    return g, g * value / t2, -g * value * _conj(tensor1) / (t2 * t2)


def _addc_samples(dev, dt):
    if dt.category == 0:
        return []
    t2 = make((3, 4), dt, 0.5, 2, seed=2)
    return [Sample(make((3, 4), dt), make((3, 4), dt, seed=1), t2),
            Sample(make((4,), dt), make((3, 1), dt, seed=1), t2, value=0.5 if dt.category >= 2
                   else 2),
            Sample(make((3, 4), dt, noncontig=True), make((3, 4), dt, seed=1), t2, value=-1),
            Sample(make((), dt), make((), dt, seed=1), make((), dt, 0.5, 2, seed=2))]


addcmul.meta = addcdiv.meta = broadcast_meta
addcmul.samples = _addc_samples
addcdiv.samples = lambda dev, dt: _addc_samples(dev, dt) if dt.category >= 2 else []
addcmul.errors = broadcast_errors(3)
addcdiv.errors = broadcast_errors(3) + [ErrorSample(
    Sample(*[const(3, dtype=np.int64)] * 3), RuntimeError, "Integer division with addcdiv")]
