"""Pointwise ops on the representation of numbers: gcd/lcm, bit shifts, ldexp/frexp,
nextafter, float_power and heaviside."""
import functools
import math

import numpy as np

import ember

from .._C import kernels as _C
from .meta import broadcast_meta, empty
from .pointwise import _pow_node, par_run, reject, ufunc_of
from .pointwise_logic import _FEW, _NOT_INT, _edges
from .pointwise_binary import _tensor_samples, real_ufunc
from .registry import op
from .samples import ErrorSample, Sample, binary_samples, const, dtype_error, make, unary_samples


def _int_samples(dev, dt):
    return binary_samples(dev, dt) if dt.category == 1 else []


@op("gcd", tags=("pointwise",), promote="common", differentiable=False, inplace=True)
@reject("gcd", "b" + _NOT_INT)
def gcd(xp, input, other):
    """The greatest common divisor of each pair of integers (never negative).

    Example:
        >>> ember.gcd(ember.tensor([12, -9, 0]), ember.tensor([18, 6, 0]))
        tensor([6, 3, 0])
    """
    return xp.gcd(input, other)


@op("lcm", tags=("pointwise",), promote="common", differentiable=False, inplace=True)
@reject("lcm", "b" + _NOT_INT)
def lcm(xp, input, other):
    """The least common multiple of each pair of integers (never negative).

    Example:
        >>> ember.lcm(ember.tensor([4, -6]), ember.tensor([6, 4]))
        tensor([12, 12])
    """
    return xp.lcm(input, other)


def _shift(xp, a, b, left):
    """Shift ``a`` by ``b`` bits. NOTE: torch's kernels define shifts by a negative amount or by
    the bit width or more (undefined in C): left shifts give 0, right shifts fill with the sign
    bit; NumPy leaves them to the machine."""
    a, b = xp.asarray(a), xp.asarray(b)
    bits = a.dtype.itemsize * 8
    out_of_range = (b < 0) | (b >= bits)
    safe = xp.where(out_of_range, 0, b).astype(a.dtype)
    if left:
        # through the unsigned type, as torch does, so the sign bit is shifted out not kept
        u = np.dtype(f"u{a.dtype.itemsize}")
        r = xp.left_shift(a.astype(u), safe.astype(u)).astype(a.dtype)
        return xp.where(out_of_range, xp.zeros((), a.dtype), r)
    return xp.where(out_of_range, xp.right_shift(a, bits - 1), xp.right_shift(a, safe))


@op("bitwise_left_shift", tags=("pointwise",), promote="common", differentiable=False, inplace=True)
@reject("lshift", "bfc")
def bitwise_left_shift(xp, input, other):
    """``input << other`` for integers (as ``<<``); shifts past the width give 0.

    Example:
        >>> ember.tensor([1, 3]) << 2
        tensor([ 4, 12])
    """
    return _shift(xp, input, other, True)


@op("bitwise_right_shift", tags=("pointwise",), promote="common", differentiable=False,
     inplace=True)
@reject("rshift", "bfc")
def bitwise_right_shift(xp, input, other):
    """``input >> other`` for integers (as ``>>``), filling with the sign bit.

    Example:
        >>> ember.tensor([-8, 8]) >> 2
        tensor([-2,  2])
    """
    return _shift(xp, input, other, False)


for _d in (gcd, lcm, bitwise_left_shift, bitwise_right_shift):
    _d.meta, _d.samples = broadcast_meta, _int_samples
gcd.samples = lcm.samples = lambda dev, dt: _tensor_samples(dev, dt) if dt.category == 1 else []
gcd.errors = [dtype_error("gcd", (3,), (3,), dtype=np.float32)]
bitwise_left_shift.errors = [dtype_error("lshift", (3,), (3,), dtype=np.float32)]
bitwise_right_shift.errors = [dtype_error("rshift", (3,), (3,), dtype=bool)]


# NOTE: torch's ldexp is input * 2**other, each rounded to the input's dtype (no opmath)
@op("ldexp", tags=("pointwise",), promote="float", inplace=True, opmath=False)
def ldexp(xp, input, other):
    """``input * 2**other``.

    Example:
        >>> ember.ldexp(ember.tensor([1., 3.]), ember.tensor([2, -1]))
        tensor([4.0000, 1.5000])
    """
    # (2^other by exp2 where other is of input's float dtype: NumPy's power of a scalar base is
    # a scalar libm loop, its exp2 pointwise.h's vector one; both exact at integers)
    p = ufunc_of(xp, "exp2")(other) if other.dtype == input.dtype and input.dtype.kind == "f" \
        else ufunc_of(xp, "power")(input.dtype.type(2), other)
    return ufunc_of(xp, "multiply")(input, p.astype(input.dtype, copy=False))


@ldexp.vjp(save=("other", "result"))
def _(g, input, other, result):
    return g * ember.exp2(other), g * result * math.log(2.0)


ldexp.meta = broadcast_meta
ldexp.samples = lambda dev, dt: _tensor_samples(dev, dt) if dt.category == 2 else []


@op("frexp", differentiable=False, returns=("mantissa", "exponent"))
def frexp(xp, input):
    """Split each float into a mantissa in (-1, 1) (0.5 <= |m| except at 0) and an int32
    exponent, with ``input == mantissa * 2**exponent``.

    Example:
        >>> tuple(ember.frexp(ember.tensor([3., 0.5])))
        (tensor([0.7500, 0.5000]), tensor([2, 0], dtype=torch.int32))
    """
    if input.dtype.kind not in "fV":
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    if input.dtype.kind == "V":         # bfloat16: NumPy has no frexp loop for ml_dtypes
        m, e = xp.frexp(input.astype(np.float32))
        return m.astype(input.dtype), e.astype(np.int32)
    m, e = ufunc_of(xp, "frexp")(input)
    return m, e.astype(np.int32, copy=False)


frexp.meta = lambda input: (empty(input.shape, input.dtype), empty(input.shape, np.int32))
frexp.samples = lambda dev, dt: unary_samples(dev, dt) + [
    Sample(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30], dt.np))] \
    if dt.category == 2 else []
frexp.errors = [ErrorSample(Sample(const(3, dtype=np.int64)), RuntimeError,
                            "frexp.. only supports floating-point dtypes")]


@op("nextafter", tags=("pointwise",), promote="common", differentiable=False, inplace=True,
    opmath=False)
@reject("nextafter", "biuc")
def nextafter(xp, input, other):
    """The next float after ``input`` in the direction of ``other``.

    Example:
        >>> bool(ember.nextafter(ember.tensor([1.]), ember.tensor([2.])) > 1)
        True
    """
    if input.dtype.kind == "V":
        # NOTE: NumPy has no nextafter for bfloat16; step the bit pattern as C's nextafter does
        return _nextafter_bits(xp, input, other)
    out = _C.words("nextafter", input, other)     # (NumPy's loop: libm's, element by element)
    return xp.nextafter(input, other) if out is None else out


nextafter.ufunc = real_ufunc(nextafter, functools.partial(nextafter.fwd.__wrapped__, np))


def _nextafter_bits(xp, a, b):
    bits = a.view(np.uint16).astype(np.int32)
    step = xp.where((b > a) == (a >= 0), 1, -1)
    zero = a == 0
    nxt = xp.where(zero, xp.where(b > a, 1, 0x8001), bits + step).astype(np.uint16)
    return xp.where((a == b) | xp.isnan(a) | xp.isnan(b), xp.where(xp.isnan(a), a, b),
                    nxt.view(a.dtype))


nextafter.meta = broadcast_meta
nextafter.samples = lambda dev, dt: _tensor_samples(dev, dt) + [
    Sample(make((3,), dt), make((3,), dt)), Sample(np.zeros(2, dt.np), np.array([1, -1], dt.np))] \
    if dt.category == 2 else []
nextafter.errors = [dtype_error("nextafter", (3,), (3,))]


@op("float_power", tags=("pointwise",), inplace=True)
def float_power(xp, input, exponent):
    """``input ** exponent`` computed in double precision (complex128 for complex operands).

    Example:
        >>> ember.float_power(ember.tensor([2, 3]), 2)
        tensor([4., 9.], dtype=torch.float64)
    """
    cplx = any(a.dtype.kind == "c" if hasattr(a, "dtype") else isinstance(a, complex) for a in
               (input, exponent))
    dt = np.complex128 if cplx else np.float64
    # float32 operands: parloop.h's pow of the widened values in one pass over threads, not two
    # casts on one thread and a pow. (Not one exponent: NumPy takes square roots for 0.5, as
    # torch does: pow(-0., 0.5) is -0.; not a small exponent, for the small calls' sake)
    if type(exponent) is np.ndarray and exponent.size >= 4096 and xp is np and \
            exponent.dtype == np.float32 == getattr(input, "dtype", None) and (
            pl := _C.parloop()) and (r := par_run(pl[7], 0, (input, exponent), _F32_F64,
                                                  min_size=4096)) is not None:
        return r
    return ufunc_of(xp, "power")(xp.asarray(input).astype(dt), xp.asarray(exponent).astype(dt))


_F32_F64 = (np.dtype(np.float32),) * 2 + (np.dtype(np.float64),)


@float_power.vjp(save=("input", "exponent", "result"))
def _(g, input, exponent, result):
    from .pointwise import pow
    dt = result.dtype
    a = input.to(dt) if isinstance(input, ember.Tensor) else input
    b = exponent.to(dt) if isinstance(exponent, ember.Tensor) else exponent
    if dt.is_complex:
        # pow's real-only guards (exponent >= 0) do not apply: the plain chain rule
        grads = (g * (b * a ** (b - 1)).conj() if isinstance(a, ember.Tensor) else None,
                 g * (result * ember.log(a)).conj() if isinstance(b, ember.Tensor) else None)
    else:
        grads = pow.vjp_fn(g, a, b, result)
    return tuple(gr.to(x.dtype) if isinstance(x, ember.Tensor) and gr is not None else gr
                 for gr, x in zip(grads, (input, exponent)))


def _float_power_meta(input, exponent):
    cplx = any(np.asarray(a).dtype.kind == "c" for a in (input, exponent))
    shape = np.broadcast_shapes(*(np.shape(a) for a in (input, exponent)))
    return empty(shape, np.complex128 if cplx else np.float64)


float_power.meta = _float_power_meta
def _float_power_samples(dev, dt):
    s = [Sample(make((3, 4), dt, 0.5, 2), make((3, 4), dt, seed=1)),
         Sample(make((3, 4), dt, 0.5, 2), make((4,), dt, seed=2)),
         Sample(make((3,), dt, 0.5, 2), 2), Sample(make((3,), dt, 0.5, 2), 0.5)]
    # pow's double backward guards (exponent >= 0) are real-only: complex is checked forward
    return [x.forward_only() for x in s] if dt.category == 3 else s


float_power.samples = _float_power_samples
float_power.grad_name_of = _pow_node


@op("heaviside", tags=("pointwise",), differentiable=False, inplace=True)
def heaviside(xp, input, values):
    """The step function: 0 where ``input < 0``, ``values`` where it is 0, 1 above (nan gives 0,
    as torch's kernel does).

    Example:
        >>> ember.heaviside(ember.tensor([-1., 0., 2.]), ember.tensor([0.5]))
        tensor([0.0000, 0.5000, 1.0000])
    """
    if xp is np and input.dtype.kind == "f" and values.dtype == input.dtype and \
            input.size + values.size <= _FEW:
        # (one call and fmax's: NumPy's heaviside, a scalar loop, gives nan for nan, made -1)
        return np.heaviside(np.fmax(input, input.dtype.type(-1)), values)
    return _heaviside(xp, input, values)


@reject("heaviside", "c")
def _heaviside(xp, input, values):
    if input.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    return xp.where(input == 0, values, (input > 0).astype(input.dtype))


heaviside.meta = broadcast_meta
heaviside.samples = lambda dev, dt: _tensor_samples(dev, dt) + [
    Sample(np.array([-1, 0, 2, 0], dt.np), make((4,), dt, seed=3))] + _edges(dt, 2)
heaviside.errors = [ErrorSample(Sample(const(3), const(3, dtype=np.float64)), RuntimeError,
                                "different dtypes")]
