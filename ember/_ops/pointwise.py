"""Pointwise ops: casts and copies, arithmetic, the common math functions (exp, log, sqrt, sin,
cos, tanh, sigmoid), complex parts and signs, triangles. The other math functions live in
pointwise_math.py, ops of two or more operands in pointwise_binary.py, comparisons and logic in
pointwise_logic.py."""
import builtins
import functools
import math
import operator

import numpy as np

from .._memory_format import copy_in

import ember

from .. import _dtype
from .._C import kernels as _C
from ..autograd.grad_mode import state as _grad_state
from .meta import broadcast_meta, empty, same_meta
from .tangents import LINEAR, PRODUCT, _total, linear_with, named
from .registry import LIBM_ULP, op, overload_if_tensor
from .samples import (ErrorSample, Sample, binary_samples, broadcast_errors, const, make,
                      unary_samples)

# ---- NumPy's loops over ember's threads ------------------------------------------------------
# NumPy runs a ufunc's loop on one thread; torch splits its pointwise loops over its threads.
# parloop.h runs NumPy's own inner loop (the ufunc's legacy loop for the operand types, read
# from its C struct once) on each of ember's OpenMP threads' share of the elements: the values
# are the one NumPy call's, bit for bit. (A pool of Python threads did this before, through the
# GIL: its hand-off cost more than the split saved below 4M elements.) From PAR_MIN elements:
# below, OpenMP's hand-off and these ~5 us of Python cost more than the split saves on a
# memory-bound loop. Without the C library (EMBER_NO_C=1) NumPy's one call runs.
PAR_MIN = 1 << 17
_LOOPS = {}
_SCALARS = (int, float, complex)


def _loop_of(ufunc, key):
    """``(loop address, its data, operand dtypes)``: the first of ``ufunc``'s legacy loops for
    the dtypes NumPy resolves inputs typed ``key`` to (as its legacy resolution picks), or None
    (no such loop, an object or non-native dtype, a NumPy whose struct reads otherwise)."""
    import ctypes
    try:
        dts = ufunc.resolve_dtypes(key + (None,) * ufunc.nout)
    except Exception:       # (no loop: NumPy's own call raises its error)
        return None
    word = ctypes.c_void_p.from_address
    # PyUFuncObject: PyObject_HEAD; int nin, nout, nargs, identity; functions; data; int ntypes,
    # reserved1; char *name; ... (its prefix, the same from NumPy 1.x to 2.4)
    if any(d.kind not in "biufc" or not d.isnative for d in dts) or ctypes.c_int.from_address(
            id(ufunc) + 48).value != ufunc.ntypes or ctypes.c_char_p.from_address(
            id(ufunc) + 56).value != ufunc.__name__.encode():
        return None
    for i, t in enumerate(ufunc.types):
        if all(np.dtype(c) == d for c, d in zip(t.replace("->", ""), dts)):
            fns, data = word(id(ufunc) + 32).value, word(id(ufunc) + 40).value
            return word(fns + 8 * i).value, word(data + 8 * i).value, dts
    return None


def _grid(shape, a):
    """``(step, row step)`` of array ``a`` broadcast to ``shape`` seen as rows of its last
    dim, or None where it does not broadcast so or its leading dims are not one run of rows."""
    k = len(shape) - a.ndim
    if k < 0 or any(m != 1 and m != n for m, n in zip(a.shape, shape[k:])):
        return None
    st = (0,) * k + tuple(0 if m == 1 else t for m, t in zip(a.shape, a.strides))
    r = run = None
    for d in range(len(shape) - 2, -1, -1):
        if shape[d] > 1:
            if r is None:
                r = st[d]
            elif st[d] != run:
                return None
            run = st[d] * shape[d]
    return (st[-1] if shape else 0), r or 0


_SIZE = operator.attrgetter("size")


def par_run(loop, data, args, dts, out=None, column=True, min_size=None):
    """NumPy loop ``loop`` (address; ``data`` its data) over ``args`` (arrays, or numbers of
    their operand dtypes) into new arrays of the remaining ``dts`` (or ``out``, one of them),
    the elements split over ember's threads by parloop.h; None where that does not apply (the
    caller makes its one NumPy call). The largest input (or ``out``) gives the shape; a new
    output is C-contiguous, as NumPy's from C-contiguous operands of that shape beside rows,
    columns or numbers broadcast; ``out`` (any rows of its last dim) shares no memory with an
    input but itself. Not ``column``: no operand broadcast along the rows (NumPy buffers it,
    where a loop may take a step of 0 for a number: power's square roots). A caller giving
    ``min_size`` (a fused loop that beats NumPy's passes) runs it on one thread too."""
    pl, nt, arrays = _C.parloop(), _C.num_threads(), [a for a in args if type(a) is np.ndarray]
    x = out if out is not None else max(arrays, key=_SIZE, default=None)
    if pl is None or nt < 2 and min_size is None or x is None or \
            x.size < (min_size or PAR_MIN) or out is None and not _c_order(x) or \
            out is not None and (
            len(dts) - len(args) != 1 or out.dtype != dts[-1] or
            any(a is not out and np.may_share_memory(a, out) for a in arrays)):
        return None
    ops = [a if type(a) is np.ndarray else np.asarray(a, dt) for a, dt in zip(args, dts)]
    if any(a.dtype != dt for a, dt in zip(ops, dts)):
        return None
    ops += [np.empty(x.shape, d) for d in dts[len(args):]] if out is None else [out]
    if all(a.ndim == 0 or a.shape == x.shape and a.flags.c_contiguous for a in ops):
        rows, cols, steps = 1, x.size, [(a.itemsize if a.ndim else 0, 0) for a in ops]
    elif out is None and any(a.shape == x.shape and not _c_order(a) for a in arrays):
        return None
    else:
        rows, cols, steps = x.size // x.shape[-1], x.shape[-1], [_grid(x.shape, a) for a in ops]
        if None in steps or cols < 16 or not column and any(s == 0 != r for s, r in steps):
            return None
    grid = [v for a, (s, r) in zip(ops, steps) for v in (a, s, r)] + [None, 0, 0] * (4 - len(ops))
    pl[0](loop, data, rows, cols, len(ops), nt, *grid)
    return ops[len(args)] if len(ops) == len(args) + 1 else tuple(ops[len(args):])


def _c_order(a):
    """Whether ``a``'s elements lie in C order, rows of its unit-strided last dim (a slice of
    columns): NumPy's result (order K) is then C-contiguous, as par_run's."""
    st = a.strides
    return a.flags.c_contiguous or st[-1] == a.itemsize and all(s >= t for s, t in zip(st, st[1:]))


def par_ufunc(ufunc, args, out=None):
    """``ufunc(*args, out=out)`` over ember's threads (``par_run``), or None."""
    k = (ufunc, *[a.dtype.num if type(a) is np.ndarray else type(a) for a in args])
    if (loop := _LOOPS.get(k, False)) is False:
        key = tuple(a.dtype if isinstance(a, (np.ndarray, np.generic)) else np.dtype(bool) if
                    type(a) is bool else type(a) if type(a) in _SCALARS else None for a in args)
        loop = _LOOPS[k] = None if len(args) != ufunc.nin or any(
            d is None for d in key) else _loop_of(ufunc, key)    # (a dtype == None: float64)
    return None if loop is None else par_run(loop[0], loop[1], args, loop[2], out,
                                             ufunc is not np.power)


def par_copy(dst, src, min_size=None):
    """``dst[...] = src`` (arrays of one shape) split over threads where they are of one dtype
    (from ``min_size`` elements: a part of a larger copy may ask for fewer than PAR_MIN)."""
    pl = _C.parloop() if dst.dtype == src.dtype else None
    if pl is None or par_run(pl[3], dst.itemsize, (src,), (src.dtype, dst.dtype), dst,
                             min_size=min_size) is None:
        np.copyto(dst, src, "unsafe")
    return dst


def par_zeros(shape, dtype):
    """``numpy.zeros(shape, dtype)``, filled over threads (``par_copy`` of a zero) from PAR_MIN
    elements: calloc memsets reused memory on one thread."""
    if math.prod(shape) < PAR_MIN or _C.num_threads() < 2:
        return np.zeros(shape, dtype)
    return par_copy(np.empty(shape, dtype), np.zeros((), dtype))


def par_reduce(ufunc, x):
    """``ufunc.reduce`` of all of ``x``'s elements (a NumPy scalar) split over threads, for the
    reductions whose result no order changes (maximum, minimum, the logical ones; but between
    -0.0 and 0.0 an extremum may pick either); None where that does not apply."""
    pl, nt = _C.parloop(), _C.num_threads()
    if pl is None or nt < 2 or type(x) is not np.ndarray or x.size < PAR_MIN or \
            not x.flags.c_contiguous or (loop := par_loop(ufunc, x.dtype)) is None:
        return None
    part = np.empty(nt, x.dtype)
    pl[1](loop[0], loop[1], x.size, nt, x, x.itemsize, part, x.itemsize)
    return part[0]


def par_loop(ufunc, dt):
    """``_loop_of`` ``ufunc`` for operands all of dtype ``dt``, cached, or None."""
    k = (ufunc,) + (dt.num,) * ufunc.nin
    if (loop := _LOOPS.get(k, False)) is False:
        loop = _LOOPS[k] = _loop_of(ufunc, (dt,) * ufunc.nin)
    return None if loop is None or any(d != dt for d in loop[2]) else loop


def threaded(ufunc):
    """``ufunc`` (a NumPy ufunc, or ``fused``'s) as a function whose large calls run over
    ember's threads (``par_ufunc``)."""
    if not isinstance(ufunc, np.ufunc):
        return ufunc

    def f(*args, out=None):
        x, y = args[0], args[-1]        # (the larger of the outer operands)
        x = x if type(y) is not np.ndarray or type(x) is np.ndarray and x.size >= y.size else y
        if type(x) is np.ndarray and x.size >= PAR_MIN and _C.num_threads() > 1 and \
                (r := par_ufunc(ufunc, args, out)) is not None:
            return r
        return ufunc(*args) if out is None else ufunc(*args, out=out)   # (frexp: out=None fails)
    f.__name__ = f.__qualname__ = ufunc.__name__
    return f


def par_where(c, a, b):
    """``numpy.where(c, a, b)`` of a bool ``c``, its elements split over threads (parloop.h's
    select loop) where ``a`` and ``b`` are arrays of one dtype or numbers of it."""
    if type(c) is np.ndarray and c.dtype == np.bool_ and builtins.max(
            np.size(c), np.size(a), np.size(b)) >= PAR_MIN:
        dt = np.result_type(a, b)
        pl = _C.parloop() if all(type(v) is not np.ndarray or v.dtype == dt for v in (a, b)) \
            and dt.kind in "biufc" and dt.itemsize in (1, 2, 4, 8) else None
        if pl is not None and (r := par_run(pl[2][dt.itemsize], 0, (c, a, b), (
                c.dtype, dt, dt, dt))) is not None:
            return r
    return np.where(c, a, b)


# ---- casts, copies, device moves ----------------------------------------------------------


@op("_to_dtype", method=False, function=False)
def _to_dtype(xp, x, dtype):
    return _dtype.cast(x, dtype.np)


@_to_dtype.vjp()
def _(g, x, dtype):
    return g.to(x.dtype)


_to_dtype.meta = lambda x, dtype: empty(x.shape, dtype.np)
_to_dtype.grad_name = "ToCopyBackward0"


@op("_to_device", method=False, function=False)
def _to_device(xp, x, device):
    # Tensor._move copies between backends and records this op for autograd; the backward
    # moves the gradient back to where the input was.
    raise AssertionError("_to_device is recorded by Tensor._move, never run by a backend")


@_to_device.vjp()
def _(g, x, device):
    return g.to(x.device)
_to_device.grad_name = "ToCopyBackward0"


@op("clone")
def clone(xp, x, memory_format=None):
    """A copy of ``input`` with its own memory, laid out as ``memory_format`` asks (by default
    as ``input`` is, where that is dense); gradients flow back to ``input``."""
    if memory_format is None and type(x) is np.ndarray and x.flags.c_contiguous:
        if x.size >= PAR_MIN:
            return par_copy(np.empty(x.shape, x.dtype), x)
        if 1 not in x.shape or x.strides == (x.itemsize,):  # (copy_in's row-major case)
            return x.copy()
    return copy_in(xp, x, memory_format)


@clone.vjp()
def _(g, x, memory_format=None):
    return g


clone.meta = same_meta
clone.samples = unary_samples


@op("_copy_from", method=False, function=False, into=lambda out, dst, src: np.copyto(out, src))
def _copy_from(xp, dst, src):
    # the value of ``dst.copy_(src)``: src broadcast to dst's shape, in dst's dtype
    return _dtype.cast(xp.broadcast_to(src, dst.shape), dst.dtype)    # (a new array)


@_copy_from.vjp()
def _(g, dst, src):
    return None, g


_copy_from.meta = lambda dst, src: same_meta(dst)


@op("_fill", method=False, function=False, into=lambda out, dst, value: out.fill(value))
def _fill(xp, dst, value):
    return xp.full(dst.shape, value, dtype=dst.dtype)


@_fill.vjp()
def _(g, dst, value):
    return None, (g.sum() if hasattr(value, "shape") else None)


_fill.meta = lambda dst, value: same_meta(dst)

# ---- arithmetic ------------------------------------------------------------------------------


def _scaled(xp, f, input, other, alpha, out=None):
    """``f(input, alpha * other)`` (add, subtract), into ``out`` where given (the C in-place
    path's write: ``x.add_(y, alpha=0.1)``)."""
    return f(input, other if alpha == 1 else xp.multiply(other, alpha), out=out)


@op("add", tags=("pointwise",), promote="common", inplace=True, ufunc=threaded(np.add),
    into=lambda out, input, other, alpha=1: _scaled(np, np.add, input, other, alpha, out))
def add(xp, input, other, alpha=1):
    """``input + alpha * other``, broadcast and type-promoted."""
    return _scaled(xp, ufunc_of(xp, "add"), input, other, alpha)


@add.vjp()
def _(g, input, other, alpha=1):
    return g, (g if alpha == 1 else g * alpha)


add.meta = broadcast_meta
add.samples = binary_samples
add.errors = broadcast_errors()


@op("sub", tags=("pointwise",), promote="common", inplace=True, aliases=("subtract",),
    ufunc=threaded(np.subtract),
    into=lambda out, input, other, alpha=1: _scaled(np, np.subtract, input, other, alpha, out))
def sub(xp, input, other, alpha=1):
    """``input - alpha * other``."""
    try:        # (``input`` may be a Python number: torch.sub(0.5, t))
        return _scaled(xp, ufunc_of(xp, "subtract"), input, other, alpha)
    except TypeError:       # NumPy refuses bool - bool
        if xp.asarray(input).dtype.kind == "b":
            raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                               "supported. Use the `^` or `logical_xor()` operator "
                               "instead.") from None
        raise


@sub.vjp()
def _(g, input, other, alpha=1):
    return g, -g if alpha == 1 else g * -alpha


sub.meta = broadcast_meta
sub.samples = lambda dev, dt: binary_samples(dev, dt) if dt is not ember.bool else []
sub.errors = broadcast_errors() + [ErrorSample(Sample(const(3, dtype=bool), const(3, dtype=bool)),
                                               RuntimeError, "two bool tensors")]


@op("rsub", tags=("pointwise",), promote="common", method=False)
def rsub(xp, input, other, alpha=1):
    """``other - alpha * input`` (what ``2 - t`` calls)."""
    # (large: over threads; small: NumPy's call itself, ~3.5k instructions less than threaded's)
    sub = ufunc_of(xp, "subtract") if getattr(input, "size", 0) + getattr(other, "size", 0) >= \
        PAR_MIN else xp.subtract
    return sub(other, input if alpha == 1 else xp.multiply(input, alpha))


@rsub.vjp()
def _(g, input, other, alpha=1):
    return -g if alpha == 1 else g * -alpha, g


rsub.meta = broadcast_meta
rsub.samples = lambda dev, dt: binary_samples(dev, dt) if dt is not ember.bool else []
rsub.grad_name_of = overload_if_tensor("rsub", 1, "other", 0, 1)


_NO_DT = np.dtype(np.float64)      # stands for a Python number's dtype in mul's bool test


@op("mul", tags=("pointwise",), promote="common", inplace=True, aliases=("multiply",),
    opmath="scalar", ufunc=threaded(np.multiply))
def mul(xp, input, other):
    """``input * other``, broadcast and type-promoted."""
    if getattr(input, "dtype", _NO_DT).kind == "b" and getattr(other, "dtype", _NO_DT).kind == "b":
        return xp.logical_and(input, other)
    return ufunc_of(xp, "multiply")(input, other)


@mul.vjp(save=("input", "other"), needed_by="cross")
def _(g, input, other):
    # a Python number gets no gradient: skip computing one only to drop it
    return (g * _conj(other) if isinstance(input, ember.Tensor) else None,
            g * _conj(input) if isinstance(other, ember.Tensor) else None)


mul.meta = broadcast_meta
mul.samples = binary_samples
mul.errors = broadcast_errors()


def _div_promotion(args, kwargs):
    # NOTE: true division promotes integers to the default float (so -3 is not first wrapped
    # into uint8); rounded division keeps integer dtypes.
    mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
    return "float" if mode is None else "common"


@op("div", tags=("pointwise",), promote=_div_promotion, inplace=True,
    aliases=("divide", "true_divide"), opmath="scalar", ufunc=threaded(np.true_divide))
def div(xp, input, other, rounding_mode=None):
    """``input / other``; ``rounding_mode`` ``"trunc"`` or ``"floor"`` rounds the quotient.

    Example:
        >>> ember.div(ember.tensor([7, -7]), 2)
        tensor([ 3.5000, -3.5000])
        >>> ember.div(ember.tensor([7, -7]), 2, rounding_mode="trunc")
        tensor([ 3, -3])
        >>> ember.div(ember.tensor([7, -7]), 2, rounding_mode="floor")
        tensor([ 3, -4])
    """
    if rounding_mode is not None:
        from .pointwise_binary import div_rounded
        return div_rounded(xp, input, other, rounding_mode)
    # NOTE: promoted as "common", not "float", since rounded integer division stays integer;
    # true division of integers gives the default float.
    dt = _true_div_dtype(input, other)
    return ufunc_of(xp, "true_divide")(input, other).astype(dt, copy=False) if dt is not None \
        else ufunc_of(xp, "true_divide")(input, other)


def _true_div_dtype(input, other):
    # operands arrive promoted to one dtype, so the array among them tells it
    a = input if hasattr(input, "dtype") else other
    return ember.get_default_dtype().np if a.dtype.kind in "biu" else None


@div.vjp(save=("input", "other"), needed_by={"input": "other"})
def _(g, input, other, rounding_mode=None):
    if rounding_mode is not None:
        return g * 0, (g * 0 if isinstance(other, ember.Tensor) else None)
    return g / _conj(other), -g * _conj(input) / _conj(other * other)


def _div_meta(input, other, rounding_mode=None):
    r = broadcast_meta(input, other)
    dt = _true_div_dtype(input, other) if rounding_mode is None else None
    return r if dt is None else r.astype(dt)


div.meta = _div_meta
div.samples = lambda dev, dt: binary_samples(dev, dt, nonzero_rhs=True) + [
    Sample(*s.args, rounding_mode=m) for s in binary_samples(dev, dt, nonzero_rhs=True)[1:3]
    for m in ("trunc", "floor") if dt.category in (1, 2)]
div.errors = broadcast_errors() + [ErrorSample(Sample(const(3), const(3), rounding_mode="round"),
                                               RuntimeError, "expected rounding_mode")]
div.grad_name_of = lambda input, other, rounding_mode=None: \
    "DivBackward0" if rounding_mode is None else "DivBackward2"


def _conj(t):
    if type(t) is complex:              # a Python complex operand: x * 2j has gradient g * -2j
        return t.conjugate()
    return t.conj() if isinstance(t, ember.Tensor) and t.is_complex() else t


@op("neg", tags=("pointwise",), inplace=True, aliases=("negative",),
    ufunc=threaded(np.negative))
def neg(xp, input):
    """``-input``."""
    if input.dtype.kind == "b":
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If "
                           "you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")
    return xp.negative(input)


@neg.vjp()
def _(g, input):
    return -g


neg.meta = same_meta
neg.samples = lambda dev, dt: unary_samples(dev, dt) if dt is not ember.bool else []
neg.errors = [ErrorSample(Sample(const(3, dtype=bool)), RuntimeError, "on a bool tensor")]


_np_power = threaded(np.power)


def _power(input, exponent, out=None):
    """``numpy.power`` but for float32/float64 to a number exponent that _pow_number takes:
    pow's forward and its ``ufunc``, which the C dispatch calls (in place with ``out``)."""
    # (0-dim arrays keep np.power: their products are NumPy scalars, which out= refuses)
    if type(exponent) in (int, float) and input.dtype.kind == "f" and input.dtype.itemsize >= 4 \
            and input.ndim and (r := _pow_number(np, input, exponent)) is not None:
        if out is None:
            return r
        out[...] = r
        return out
    if type(exponent) is np.ndarray and (r := _C.pointwise(      # (NumPy's powf: scalar libm)
            "pow", input, other=exponent, out=out, min_size=256)) is not None:
        return r
    return _np_power(input, exponent, out=out)


def _pow_number(xp, x, e):
    """``x ** e`` for the exponents torch's pow kernel takes by products and roots (x * x * x
    for 3, 1 / sqrt(x) for -0.5...), rounding as it does; None for the others."""
    # NOTE: so pow(-0., 0.5) is -0. and pow(-inf, 0.5) nan (sqrt's), as in torch
    mul, div = ufunc_of(xp, "multiply"), ufunc_of(xp, "divide")
    if e in (2, 3, -2):
        r = mul(x, x)
        return r if e == 2 else mul(r, x, out=r) if e == 3 else div(1, r, out=r)
    if e in (0.5, -0.5):
        r = ufunc_of(xp, "sqrt")(x)
        return r if e == 0.5 else div(1, r, out=r)
    return ufunc_of(xp, "reciprocal")(x) if e == -1 else x.copy() if e == 1 else None


@op("pow", tags=("pointwise", "autocast_fp32_cuda"), promote="common", inplace=True,
    opmath=False, ufunc=_power)
def pow(xp, input, exponent):
    """``input ** exponent``."""
    # NOTE: torch's bfloat16 pow by the scalar 3 or -2 is x*x*x or 1/(x*x), rounding x*x to
    # bfloat16 on the way; every other exponent (and float16) rounds pow() once, as NumPy's
    # float16 and ml_dtypes' bfloat16 ufuncs do. (A pinned scalar exponent is a bfloat16 scalar.)
    if type(exponent).__name__ == "bfloat16" and (exponent == 3 or exponent == -2):
        sq = input * input
        return sq * input if exponent == 3 else 1 / sq
    if isinstance(exponent, xp.ndarray) and exponent.dtype.kind in "iu" and \
            getattr(input, "dtype", exponent.dtype).kind in "biu" and (exponent < 0).any():
        # NOTE: torch raises for a negative Python-number exponent of an integer tensor (NumPy's
        # rule) but takes a tensor of them: 1 for base 1, +-1 for base -1, else 0
        neg = exponent < 0
        out = xp.power(input, xp.where(neg, 0, exponent))
        odd = xp.where(exponent % 2 == 0, 1, -1)
        return xp.where(neg, xp.where(input == 1, 1, xp.where(input == -1, odd, 0)),
                        out).astype(out.dtype)
    return pow.ufunc(input, exponent) if xp is np else xp.power(input, exponent)


@pow.vjp(save=("input", "exponent", "result"), needed_by={"result": "exponent"})
def _(g, input, exponent, result=None):
    gi = ge = None
    # (float32 tensors of one shape: the base's gradient one fused pass of the ops below; the
    # exponent's from the saved result, there only where that gradient is wanted)
    if type(exponent) is ember.Tensor and exponent.shape == input.shape and \
            (gi := fused_grad("pow", input, g, other=exponent)) is not None:
        if result is None:
            return gi, None
    elif isinstance(input, ember.Tensor):
        gi = g * _conj(exponent * input ** (exponent - 1))
        if not isinstance(exponent, ember.Tensor) and exponent == 0:
            gi = ember.zeros_like(g)
    if isinstance(exponent, ember.Tensor):
        # NOTE: torch defines d/dexp of 0**e as 0 for e >= 0 instead of 0 * log(0) = nan.
        # (the output is saved only for this gradient: writing into x ** 2 in place is no
        # error, as in torch; torch also saves it for a tensor exponent that needs no grad)
        ge = g * _conj((input ** exponent if result is None else result) * _log_of(input))
        # (a complex exponent counts as >= 0 when it is real and >= 0, as in torch)
        nonneg = exponent >= 0 if not exponent.is_complex() else \
            (exponent.imag == 0) & (exponent.real >= 0)
        if isinstance(input, ember.Tensor):
            ge = ember.where((input == 0) & nonneg, 0.0, ge)
        elif input == 0:
            ge = ember.where(nonneg, 0.0, ge)
    return gi, ge


pow.meta = broadcast_meta


def _pow_samples(dev, dt):
    if dt is ember.bool:
        return []
    if dt.category < 2:
        return [Sample(make((3, 4), dt), 2), Sample(make((3, 4), dt), make((4,), dt, 0, 3))]
    base = make((3, 4), dt, 0.5, 2.0)      # positive real part: off log's branch cut
    return [Sample(base, make((3, 4), dt, -2.0, 2.0, seed=1)), Sample(base, 2.5),
            Sample(base, make((4,), dt, -1.0, 1.0, seed=2)), Sample(make((3,), dt), 2),
            Sample(base, 0)] + [Sample(make((3, 4), dt, -2.0, 2.0), e) for e in (3, 1)] + [
            Sample(base, e) for e in (3.0, -1, -2, 0.5, -0.5)]   # (_pow_number's exponents)


pow.samples = _pow_samples


def _pow_node(input, exponent):
    """torch's node of pow: a number base (overload 2), a tensor exponent (1), or a number (0)."""
    return "PowBackward2" if not hasattr(input, "_data") else "PowBackward1" if hasattr(
        exponent, "_data") else "PowBackward0"


pow.grad_name_of = _pow_node


def _log_of(v):
    """log of a tensor, or of a Python number base (``2 ** t``, ``1j ** t``)."""
    if isinstance(v, ember.Tensor):
        return ember.log(v)
    if type(v) is complex:
        import cmath            # (here: a complex base is rare, and cmath adds to the import)
        return cmath.log(v) if v else complex(-math.inf)
    return math.log(v) if v > 0 else -math.inf if v == 0 else math.nan


@op("abs", tags=("pointwise",), inplace=True, aliases=("absolute",),
    ufunc=threaded(np.abs))
def abs(xp, input):
    """``|input|``."""
    if input.dtype.kind == "b":
        raise NotImplementedError("\"abs_cpu\" not implemented for 'Bool'")
    return xp.abs(input)


@abs.vjp(save=("input",))
def _(g, input):
    return g * input.sgn() if input.is_complex() else g * input.sign()


abs.meta = lambda x: empty(x.shape, x.real.dtype)
abs.samples = unary_samples
abs.kinks = (0.0,)

# ---- unary math: f(x) and df/dx in ember ops --------------------------------------------------


def type_name(npdt):
    """torch's C++ name of a NumPy dtype (``Long``, ``ComplexDouble``), as its kernel errors
    say it."""
    return _dtype._SCALAR_NAMES.get(str(npdt), str(npdt))


def reject(name, kinds, fwd=None):
    """Wrap ``fwd`` so array operands of NumPy kinds in ``kinds`` (``"b"`` bool, ``"iu"``
    integers, ``"c"`` complex) raise torch's NotImplementedError for a missing kernel.
    Without ``fwd``, a decorator."""
    if fwd is None:
        return lambda f: reject(name, kinds, f)
    @functools.wraps(fwd)
    def f(xp, *args, **kwargs):
        for a in args:
            dt = getattr(a, "dtype", None)
            if dt is not None and dt.kind in kinds:
                raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{type_name(dt)}'")
        return fwd(xp, *args, **kwargs)
    return f


def _calling(ufunc_name):
    """``fwd(xp, input)``: the array module's ufunc of that name (NumPy's through ``fused``)."""
    return lambda xp, input: ufunc_of(xp, ufunc_name)(input)


def ufunc_of(xp, name):
    """The array module's ufunc ``name``; NumPy's through pointwise.h where ``fused`` has it,
    else ``threaded``."""
    if xp is not np:
        return getattr(xp, name)
    if (f := _THREADED.get(name)) is None:
        u = getattr(np, name)
        f = _THREADED[name] = fused(u) if name in _FUSED else threaded(u)
    return f


_THREADED = {}


# NumPy ufuncs that pointwise.h computes in one threaded float32 pass (its name for them): the
# scalar libm loops (expm1, tan...) at ~15x the time, and the SIMD ones (exp, log) on threads
_FUSED = {"exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
          "tanh": "tanh", "arcsinh": "asinh", "log10": "log10", "log1p": "log1p", "sinh": "sinh", "cosh": "cosh", "tan": "tan",
          "arctan": "atan", "arcsin": "asin", "arccos": "acos", "arctanh": "atanh",
          "reciprocal": "reciprocal", "arctan2": "atan2", "logaddexp2": "logaddexp2",
          "hypot": "hypot", "fmod": "fmod", "floor_divide": "floor_divide", "copysign": "copysign"}
# ones whose NumPy loop is SIMD already: the call pays only from a few threads' worth
_SIMD = ("exp", "log", "reciprocal", "tanh")
_FUSED_FNS = {}


def fused(ufunc):
    """``ufunc`` (a NumPy ufunc named in ``_FUSED``) computed by pointwise.h's float32 loop
    where that applies (a C-contiguous float32 array, a same-shaped one or a number beside it,
    ``out`` too): an op's ``ufunc`` and its forward's. The loops' accuracy is docs/kernels.md's.

    Example:
        >>> import numpy
        >>> from ember._ops.pointwise import fused
        >>> float(fused(numpy.expm1)(numpy.zeros(2048, numpy.float32))[0])
        0.0
    """
    name, kernel = ufunc.__name__, _FUSED[ufunc.__name__]
    if name in _FUSED_FNS:
        return _FUSED_FNS[name]
    min_size, slow = 1 << 14 if name in _SIMD else 1024, threaded(ufunc)

    def f(*args, out=None):
        x = args[0]
        if type(x) is not np.ndarray or x.size < min_size:
            return ufunc(*args, out=out)
        if len(args) == 1:
            r = _C.pointwise(kernel, x, out=out, min_size=min_size)
        elif type(args[1]) in (int, float) and kernel in ("fmod", "floor_divide"):
            r = _C.pointwise(kernel + "_scalar", x, args[1], out=out, min_size=min_size)
        else:
            r = _C.pointwise(kernel, x, other=args[1], out=out, min_size=min_size)
        return slow(*args, out=out) if r is None else r
    f.__name__ = f.__qualname__ = name
    _FUSED_FNS[name] = f
    return f


def _unary(name, fwd, deriv, save="input", kinks=(), domain=None, aliases=(), kinds="",
           doc=None, tags=(), grad=None):
    """Register a floating unary op ``fwd`` with derivative ``deriv(x, result)`` (None: the
    caller registers its own vjp); inputs of the NumPy kinds in ``kinds`` are rejected as torch
    rejects them. ``fwd`` may name a ufunc of the array module (``"exp"``), which is then also
    the op's ``ufunc``. ``grad``: pointwise.h's fused backward for it, ``(name, *params)``
    (``fused_grad``)."""
    ufunc = None
    if isinstance(fwd, str):
        ufunc = getattr(np, fwd) if "c" not in kinds else None    # (kinds must reject first)
        ufunc = ufunc if ufunc is None else fused(ufunc) if fwd in _FUSED else threaded(ufunc)
        fwd = _calling(fwd)
    fwd = reject(name, kinds, fwd) if kinds else fwd
    d = op(name, tags=("pointwise",) + tags, promote="float", inplace=True, aliases=aliases,
           ufunc=ufunc)(fwd)
    d.__doc__ = doc or f"``{name}`` of each element; integers give the default float."
    saves = {"input": ("input",), "result": ("result",), "both": ("input", "result"),
             "none": ()}[save]
    if deriv is not None:
        @d.vjp(save=saves)
        def _(g, input, result=None):
            if grad and (r := fused_grad(grad[0], result if save == "result" else input, g,
                                         *grad[1:])) is not None:
                return r
            return g * _conj(deriv(input, result))

    d.meta, d.kinks = same_meta, kinks
    d.samples = lambda dev, dt: unary_samples(dev, dt, domain=domain)
    return d


exp = _unary("exp", "exp", lambda x, r: r, save="result", tags=("autocast_fp32_cuda",))
log = _unary("log", "log", lambda x, r: 1 / x, domain=(0.1, 4), grad=("log", 1.0),
            tags=("autocast_fp32_cuda",))
sqrt = _unary("sqrt", "sqrt", lambda x, r: 0.5 / r, save="result", domain=(0.1, 4))
sin = _unary("sin", "sin", lambda x, r: x.cos())
cos = _unary("cos", "cos", lambda x, r: -x.sin())
tanh = _unary("tanh", "tanh", None)


@tanh.vjp(save=("result",))
def _(g, input, result=None):
    if result.is_complex():
        return g * (1 - result * result).conj()
    return tanh_backward(g, result)       # one op instead of three


@op("tanh_backward", tags=("pointwise",), promote="common", method=False, function=False)
def tanh_backward(xp, grad_output, output):
    """tanh's gradient ``grad_output * (1 - output**2)`` for real dtypes, as one op (torch's
    ``aten::tanh_backward``)."""
    # NOTE: the 1 has the array's dtype: ml_dtypes would let a Python 1 upcast bfloat16
    mul = ufunc_of(xp, "multiply")
    return mul(grad_output, ufunc_of(xp, "subtract")(output.dtype.type(1), mul(output, output)))


@tanh_backward.vjp(save=("grad_output", "output"))
def _(g, grad_output, output):
    return tanh_backward(g, output), g * grad_output * output * -2


tanh_backward.meta = broadcast_meta
sigmoid = _unary("sigmoid", lambda xp, input: _sigmoid(xp, input), None)


def fused_grad(name, x, g, *params, other=None):
    """``g`` times the derivative at ``x`` (a saved input or result) of pointwise.h's op
    ``name`` by its fused C backward, as a Tensor; None where that does not apply (grad mode on:
    the backward is itself differentiated; or arrays the kernel does not take)."""
    if _grad_state.grad_enabled or x.shape != g.shape or type(g) is not ember.Tensor:
        return None         # (a BatchedTensor g: vmap of a vjp, batched by the ops instead)
    r = _C.pointwise(name + "_bwd", x._data, *params, other=g._data) if other is None else \
        _C.pointwise(name + "_bwd", x._data, *params, other=other._data, third=g._data)
    return None if r is None else ember.Tensor._wrap(r)


@sigmoid.vjp(save=("result",))
def _(g, input, result=None):
    gx = fused_grad("sigmoid", result, g)
    return gx if gx is not None else g * _conj(result * (1 - result))

for _d in (exp, log, sin, cos, tanh, sigmoid, pow):
    _d.half_ulps = LIBM_ULP


def _sigmoid(xp, x):
    # NOTE: split by sign so exp never overflows (1/(1+exp(-x)) warns for x < -88 in float32).
    if x.dtype.kind == "c":
        return 1 / (1 + xp.exp(-x))
    if (r := _C.pointwise("sigmoid", x)) is not None:
        return r
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


# ---- complex parts and signs ----------------------------------------------------------------


@op("conj", tags=("pointwise",), aliases=("conj_physical",))
def conj(xp, input):
    """Complex conjugate (real tensors are returned unchanged by ``Tensor.conj``)."""
    return xp.conj(input) if input.dtype.kind == "c" else input.copy()   # (bool stays bool)


conj.vjp()(lambda g, input: g.conj())
conj.meta = same_meta
conj.samples = unary_samples


@op("real", view=True)
def real(xp, input):
    """The real part (a view for complex tensors; the tensor itself for real ones)."""
    return input.real


real.vjp()(lambda g, input: g.to(input.dtype) if input.dtype.is_complex else g)
real.samples = unary_samples


@op("imag", view=True)
def imag(xp, input):
    """The imaginary part of a complex tensor, as a view."""
    if input.dtype.kind != "c":
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return input.imag


imag.vjp()(lambda g, input: g.to(input.dtype) * 1j)
imag.samples = lambda dev, dt: unary_samples(dev, dt) if dt.category == 3 else []
imag.errors = [ErrorSample(Sample(const(3)), RuntimeError, "non-complex dtypes")]


@op("sign", tags=("pointwise",), inplace=True)
def sign(xp, input):
    """-1, 0 or 1 by the sign of each element (0 for nan, as torch)."""
    if input.dtype.kind == "b":
        return input.copy()
    if (r := _C.pointwise("sign", input)) is not None:
        return r
    r = xp.sign(input)
    # NOTE: torch's sign(nan) is 0 (it computes (0 < x) - (x < 0)); NumPy's is nan
    return xp.where(xp.isnan(r), xp.zeros((), r.dtype), r) if r.dtype.kind != "i" else r


def _zero_grad(g, *args):
    """sign's gradient, and sgn's of a real input: zeros like ``g``."""
    # NOTE: zeros, not g * 0: torch's gradient of sign is zero where g is nan too
    # (np.zeros: calloc's untouched zero pages where the memory is fresh; torch's gradient
    # here is a lazy zero tensor)
    return ember.Tensor._wrap(par_zeros(g.shape, g._data.dtype)) if type(
        g) is ember.Tensor and type(g._data) is np.ndarray else ember.zeros_like(g)


sign.vjp()(_zero_grad)
sign.meta = same_meta
sign.samples = lambda dev, dt: unary_samples(dev, dt) if dt.category < 3 else []


@op("sgn", tags=("pointwise",), inplace=True)
def sgn(xp, input):
    """``x / |x|`` (0 at 0); the sign for real tensors."""
    if input.dtype.kind != "c":
        return sign.fwd(xp, input)
    a = xp.abs(input)
    return xp.where(a == 0, 0, input / xp.where(a == 0, 1, a)).astype(input.dtype)


@sgn.vjp(save=("input", "result"))
def _(g, input, result):
    if not input.is_complex():
        return _zero_grad(g)
    a = input.abs()
    return ember.where(a == 0, 0.0, (g - (g * result.conj()).real * result) / ember.where(
        a == 0, 1.0, a))


sgn.meta = same_meta
sgn.samples = unary_samples
sgn.kinks = (0.0,)

# ---- triangles -------------------------------------------------------------------------------


@op("tril", inplace=True)
def tril(xp, input, diagonal=0):
    """The lower triangle (elements on and below the ``diagonal``-th diagonal)."""
    return _triangle(xp, "tril", input, diagonal)


def _triangle(xp, name, input, diagonal):
    """A copy of ``input`` with the other triangle zeroed by a mask (NumPy's tril and triu run
    where(), ~3x slower on this); select.h's tri_rows (a copy and a zero fill per row, rows
    over threads) for a C-contiguous one."""
    if input.ndim < 2:       # (NumPy would make a 1-D input a matrix)
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    n, m = input.shape[-2:]
    if type(input) is np.ndarray and input.size and input.flags.c_contiguous and (
            pl := _C.parloop()) is not None:
        out = np.empty(input.shape, input.dtype)
        pl[5](input, out, input.size // m, n, m, max(-n, min(diagonal, m)), name == "triu",
              input.itemsize, _C.num_threads())
        return out
    mask = (_zeroed if n * m <= 4096 else _zeroed_big if n * m <= 1 << 22 else
            _zeroed.__wrapped__)(xp, n, m, diagonal, name)
    out = input.copy()
    xp.copyto(out, out.dtype.type(0), where=mask)      # (broadcast over the batch)
    return out


@functools.lru_cache(maxsize=64)        # (a small matrix's mask costs more than the copy)
def _zeroed(xp, n, m, diagonal, name):
    """Where tril (triu) of an n x m matrix is zero."""
    if name == "triu":
        return xp.tri(n, m, diagonal - 1, dtype=bool)
    return ~xp.tri(n, m, diagonal, dtype=bool)


# a few masks up to 4 MB kept too (a causal mask's size repeats): making one costs half the op
_zeroed_big = functools.lru_cache(maxsize=4)(_zeroed.__wrapped__)


tril.vjp()(lambda g, input, diagonal=0: g.tril(diagonal))
tril.samples = lambda dev, dt: [Sample(make((4, 4), dt)), Sample(make((2, 3, 4), dt), -1)]


@op("triu", inplace=True)
def triu(xp, input, diagonal=0):
    """The upper triangle (elements on and above the ``diagonal``-th diagonal)."""
    return _triangle(xp, "triu", input, diagonal)


triu.vjp()(lambda g, input, diagonal=0: g.triu(diagonal))
triu.samples = lambda dev, dt: [Sample(make((4, 4), dt)), Sample(make((2, 3, 4), dt), 1)]
tril.errors = [ErrorSample(Sample(const(3)), RuntimeError, "at least 2 dimensions")]
triu.errors = [ErrorSample(Sample(const(3)), RuntimeError, "at least 2 dimensions")]


# ---- forward mode (tangents.py) ----------------------------------------------------------


def _div_jvp(opdef, args, kwargs, tangents, out):
    a = named(opdef, args, kwargs)
    if a.get("rounding_mode") is not None:    # piecewise constant
        return ember.zeros_like(out)
    ta, tb = tangents.get(0, tangents.get("input")), tangents.get(1, tangents.get("other"))
    terms = [None if ta is None else opdef(ta, a["other"]),
             None if tb is None else -(out * tb) / a["other"]]
    return _total(terms)


for _d in (_to_dtype, _to_device, _copy_from, clone, conj, imag, real, neg, tril, triu):
    _d.jvp = LINEAR
_fill.jvp = linear_with("value")
add.jvp = sub.jvp = linear_with("input", "other")
mul.jvp, div.jvp = PRODUCT, _div_jvp
