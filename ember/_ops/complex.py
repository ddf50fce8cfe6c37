"""Complex numbers: build them (complex, polar), take them apart (angle; real, imag and conj
live with the pointwise ops), test them (isreal), and torch's lazy-conjugate API.

Gradients follow torch's convention for complex values: the gradient reaching ``z = a + ib``
of a real loss L is ``dL/da + i dL/db`` (the conjugate Wirtinger derivative, doubled).
"""
import math

import numpy as np

import ember

from .._C import kernels as _C
from .errors import broadcast_clash
from .meta import bool_meta, broadcast_meta, empty
from .pointwise import type_name
from .tangents import LINEAR, decomposed
from .registry import op
from .samples import ErrorSample, Sample, const, make, unary_samples


@op("angle", tags=("pointwise",), promote="float")
def angle(xp, input):
    """The argument of each element in radians, in (-pi, pi]; for real inputs pi where
    negative, else 0 (nan stays nan).

    Example:
        >>> ember.angle(ember.tensor([1j, -1 + 0j, 1 + 1j]))
        tensor([1.5708, 3.1416, 0.7854])
    """
    if input.dtype.kind == "c":
        return xp.arctan2(input.imag, input.real)
    if (r := _C.pointwise("angle", input)) is not None:
        return r
    # NOTE: torch's real angle is pi only for x < 0: -0.0 gives 0 (NumPy's angle gives pi)
    r = xp.where(input < 0, input.dtype.type(math.pi), input.dtype.type(0))
    return xp.where(xp.isnan(input), input, r)


@angle.vjp(save=("input",))
def _(g, input):
    if not input.is_complex():
        return g * 0
    # d angle = (a db - b da) / |z|^2, so the gradient is g * i z / |z|^2 (0 at z = 0)
    a2 = input.abs().square()
    return ember.where(a2 == 0, 0.0, g * 1j * input / ember.where(a2 == 0, 1.0, a2))


angle.meta = lambda x: empty(x.shape, x.real.dtype)
angle.samples = lambda dev, dt: unary_samples(dev, dt) + (
    [Sample(np.array([-1.0, 0.0, -0.0, 2.0], dt.np))] if dt.category == 2 else [])
angle.kinks = (0.0,)


def _parts_check(name, a, b):
    """torch's checks for two real parts of a complex number; the shape they broadcast to."""
    if a.dtype.char not in "efd" or b.dtype.char not in "efd":     # (float16, 32, 64)
        raise RuntimeError(f"{name}: Expected both inputs to be Half, Float or Double tensors "
                           f"but got {type_name(a.dtype)} and {type_name(b.dtype)}")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{name}: Expected object of scalar type {type_name(a.dtype)} but got "
                           f"scalar type {type_name(b.dtype)} for second argument")
    if a.dtype.char == "e":
        raise NotImplementedError(f"\"{name}_cpu\" not implemented for 'Half'")
    if a.shape == b.shape:
        return a.shape
    clash = broadcast_clash(a.shape, b.shape)
    if clash:
        raise RuntimeError(f"{name}: {clash}")
    return np.broadcast_shapes(a.shape, b.shape)


def _complex_of(a):
    return np.complex64 if a.dtype.char == "f" else np.complex128


def _assembled(xp, re, im, shape, name="interleave"):
    """The complex array of parts ``re`` and ``im`` (broadcast to ``shape``): rowops'
    interleave for contiguous ones of that shape (one pass over threads, where NumPy's .real
    and .imag writes are two strided ones on one thread); with ``name`` "polar", of the
    modulus ``re`` and the argument ``im`` (pointwise.h's polar, float32), else None."""
    out = xp.empty(shape, _complex_of(re))
    fn = _C.kernel(name, re.dtype) if xp is np and re.shape == im.shape == shape and \
        out.size and re.flags.c_contiguous and im.flags.c_contiguous else None
    if fn is not None:
        fn(_C.ptr(re), _C.ptr(im), _C.ptr(out), out.size, _C.num_threads())
    elif name == "polar":
        return None
    else:
        out.real, out.imag = re, im
    return out


@op("complex", method=False)
def complex_(xp, real, imag):
    """The complex tensor ``real + i * imag`` (broadcast; float32 parts give complex64).

    Example:
        >>> ember.complex(ember.tensor([1., 2.]), ember.tensor([0.5, -1.]))
        tensor([1.+0.5000j, 2.-1.0000j])
    """
    return _assembled(xp, real, imag, _parts_check("complex", real, imag))


complex_.vjp()(lambda g, real, imag: (g.real, g.imag))


@op("polar", method=False)
def polar(xp, abs, angle):
    """The complex tensor with modulus ``abs`` and argument ``angle``:
    ``abs * (cos(angle) + i sin(angle))``.

    Example:
        >>> ember.polar(ember.tensor([2.]), ember.tensor([0.]))
        tensor([2.+0.j])
    """
    shape = _parts_check("polar", abs, angle)
    if (r := _assembled(xp, abs, angle, shape, "polar")) is not None:
        return r
    return _assembled(xp, abs * xp.cos(angle), abs * xp.sin(angle), shape)


@polar.vjp(save=("result",))
def _(g, abs, angle, result):
    # dz/d abs = e^(i angle), dz/d angle = i z; a real input's gradient is Re(conj(g) * dz).
    # NOTE: torch writes e^(i angle) as sgn(z), which flips the sign for abs < 0 and gives 0
    # at abs = 0; we match it (the samples keep abs > 0, where both agree).
    gc = g.conj()
    return (gc * result.sgn()).real, (gc * result * 1j).real


def _parts_meta(a, b):
    return empty(broadcast_meta(a, b).shape, _complex_of(a))


def _parts_samples(dev, dt):
    if dt.category != 2:
        return []           # refused, as in torch: see the error samples
    return [Sample(make(a, dt, 0.1, 2.0), make(b, dt, -3.0, 3.0, seed=1))
            for a, b in [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (5,))]]


def _parts_errors(name):
    return [ErrorSample(Sample(const(3, dtype=np.int64), const(3, dtype=np.int64)),
                        RuntimeError, "Expected both inputs to be Half, Float or Double tensors "
                                      "but got Long and Long"),
            ErrorSample(Sample(const(3), const(3, dtype=np.float64)), RuntimeError,
                        "Expected object of scalar type Float but got scalar type Double"),
            ErrorSample(Sample(const(2, 3), const(4)), RuntimeError, "must match the size")]


for _d in (complex_, polar):
    _d.meta, _d.samples, _d.errors = _parts_meta, _parts_samples, _parts_errors(_d.name)


@op("isreal", tags=("pointwise",), differentiable=False)
def isreal(xp, input):
    """True where an element has no imaginary part (every element of a real tensor).

    Example:
        >>> ember.isreal(ember.tensor([1 + 0j, 1j]))
        tensor([ True, False])
    """
    return xp.ones(input.shape, np.bool_) if input.dtype.kind != "c" else input.imag == 0


isreal.meta = bool_meta
isreal.samples = lambda dev, dt: unary_samples(dev, dt) + (
    [Sample(np.array([1 + 0j, 1j, -0.0 + 0j, 2 - 3j], dt.np))] if dt.category == 3 else [])


# ---- torch's lazy conjugate and negative bits -------------------------------------------------
# NOTE: ember's conj() computes the conjugate (torch returns a view with a conjugate bit that
# later ops resolve). No tensor carries a conj or neg bit, so is_conj/is_neg are False and the
# resolve functions return the tensor itself, which is what torch gives for a resolved tensor.


def is_conj(input):
    """False: ember never defers a conjugation (see torch.is_conj)."""
    return False


def is_neg(input):
    """False: ember never defers a negation (see torch.is_neg)."""
    return False


def resolve_conj(input):
    """``input`` itself: its conjugation, if any, was computed when asked for."""
    return input


def resolve_neg(input):
    """``input`` itself: its negation, if any, was computed when asked for."""
    return input


# ember.<name> and Tensor.<name> besides the ops (see lazy.py)
FUNCTIONS = {f.__name__: f for f in (is_conj, is_neg, resolve_conj, resolve_neg)}
METHODS = dict(FUNCTIONS)


# ---- forward mode (tangents.py)
complex_.jvp = LINEAR
polar.jvp = decomposed(lambda a, t, out: ember.polar(t["abs"], a["angle"]) + out * ember.complex(
    ember.zeros_like(t["angle"]), t["angle"]))
