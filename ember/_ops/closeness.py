"""Comparing tensors as wholes or against sets: isclose, isin (ops), and allclose, equal,
is_same_size, is_nonzero (plain functions returning Python values)."""
import numpy as np

from .._C import kernels as _C
from .meta import bool_meta, empty
from .pointwise import par_run
from .registry import op
from .samples import ErrorSample, Sample, const, make


@op("isclose", differentiable=False)
def isclose(xp, input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|input - other| <= atol + rtol * |other|`` elementwise (equal infinities are close; nan
    is close to nan only with ``equal_nan``).

    Example:
        >>> ember.isclose(ember.tensor([1.0, 2.0]), ember.tensor([1.0 + 1e-9, 2.1]))
        tensor([ True, False])
    """
    if input.dtype != other.dtype:
        from .pointwise import type_name
        raise RuntimeError(f"{type_name(input.dtype)} did not match {type_name(other.dtype)}")
    if rtol < 0 or atol < 0:
        raise RuntimeError(f"{'rtol' if rtol < 0 else 'atol'} must be greater than or equal to "
                           f"zero, but got {rtol if rtol < 0 else atol}")
    if xp is np and input.dtype.kind == "f" and (pl := _C.parloop()) and input.itemsize in pl[4] \
            and (r := par_run(pl[4][input.itemsize], np.array([atol, rtol, equal_nan], float), (
                input, other), (input.dtype, input.dtype, np.dtype(bool)), min_size=1024)) \
            is not None:
        return r        # (parloop.h's one pass over threads)
    eq = input == other
    if input.dtype.kind == "b":
        return eq
    wide = np.complex128 if input.dtype.kind == "c" else np.float64
    a, b = input.astype(wide), other.astype(wide)
    with np.errstate(invalid="ignore"):
        close = eq | (xp.isfinite(a) & xp.isfinite(b) & (xp.abs(a - b) <= atol + rtol * xp.abs(b)))
    if equal_nan:
        close = close | (xp.isnan(a) & xp.isnan(b))
    return close


isclose.meta = lambda input, other, *a, **k: bool_meta(input, other)
isclose.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((3, 4), dt) + (make((3, 4), dt, seed=2) * 1e-6).astype(dt.np)
           if dt.category >= 2 else make((3, 4), dt, seed=2)),
    Sample(make((3, 4), dt), make((4,), dt, seed=1), rtol=0.5, atol=0.1),
    Sample(np.array([np.nan, np.inf, -np.inf, 1.0], dt.np),
           np.array([np.nan, np.inf, np.inf, 1.0 + 1e-7], dt.np), equal_nan=True),
    Sample(np.array([np.nan, 1.0], dt.np), np.array([np.nan, 1.5], dt.np), 0.0, 0.5)] \
    if dt.category >= 2 else [Sample(make((3, 4), dt), make((3, 4), dt, seed=2)),
                              Sample(make((5,), dt), make((5,), dt, seed=3), 0.5)]
isclose.errors = [
    ErrorSample(Sample(const(3), const(3, dtype=np.float64)), RuntimeError, "Float did not match "
                "Double"),
    ErrorSample(Sample(const(3), const(3), -1.0), RuntimeError, "rtol must be greater than")]


@op("isin", differentiable=False, promote="common", method=False)
def isin(xp, elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each of ``elements`` is among ``test_elements`` (either may be a number).

    Example:
        >>> ember.isin(ember.tensor([1, 2, 3]), ember.tensor([2, 5]))
        tensor([False,  True, False])
    """
    elements, test_elements = xp.asarray(elements), xp.asarray(test_elements)
    if elements.dtype.kind in "bc":
        from .pointwise import type_name
        raise RuntimeError(f"Unsupported input type encountered for isin(): "
                           f"{type_name(elements.dtype)}")
    if xp is np and test_elements.size <= 64 and elements.size <= 4096:
        if test_elements.dtype == elements.dtype and (fn := _C.kernel("isin", elements.dtype)):
            x, t, out = _C.contiguous(elements), _C.contiguous(test_elements), \
                np.empty(elements.shape, np.bool_)
            fn(_C.ptr(x), x.size, _C.ptr(t), t.size, invert, _C.ptr(out), _C.num_threads())
            return out
        # (NumPy's isin spends ~10 us of Python before this same broadcast comparison; one
        # with the tests leading, reduced over them, iterates cheaper than a (..., k) one and
        # comes in elements' shape)
        out = np.logical_or.reduce(test_elements.reshape((-1,) + (1,) * elements.ndim) ==
                                   elements)
        return ~out if invert else out
    return xp.isin(elements, test_elements, invert=invert)


isin.meta = lambda elements, test_elements, **k: empty(np.shape(elements), np.bool_)
isin.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((5,), dt, seed=0)[[0, 3, 4]]),
    Sample(make((6,), dt), make((2, 2), dt, seed=1), invert=True),
    Sample(make((4,), dt), make((4,), dt)[1].item()),
    Sample(make((4,), dt)[2].item(), make((4,), dt))] if dt.category < 3 else []
isin.errors = [ErrorSample(Sample(const(3, dtype=bool), const(2, dtype=bool)), RuntimeError,
                           "Unsupported input type encountered for isin")]


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when every element of ``input`` is close to ``other`` (see :func:`isclose`).

    Example:
        >>> ember.allclose(ember.tensor([1e10, 1e-7]), ember.tensor([1.00001e10, 1e-8]))
        False
    """
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def equal(input, other):
    """True when both have the same shape and the same elements (after promotion).

    Example:
        >>> ember.equal(ember.tensor([1, 2]), ember.tensor([1., 2.]))
        True
    """
    if not hasattr(other, "shape"):
        raise TypeError(f"equal(): argument 'other' (position 2) must be Tensor, not "
                        f"{type(other).__name__}")
    return tuple(input.shape) == tuple(other.shape) and bool((input == other).all())


def is_same_size(input, other):
    """True when the shapes are equal."""
    return tuple(input.shape) == tuple(other.shape)


def is_nonzero(input):
    """The truth value of a one-element tensor (errors otherwise, as ``bool(input)``)."""
    if input.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous" if
                           input.numel() == 0 else
                           "Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item())


# ember.<name> and Tensor.<name> besides the ops (see lazy.py)
FUNCTIONS = {f.__name__: f for f in (allclose, equal, is_same_size, is_nonzero)}
METHODS = dict(FUNCTIONS)
