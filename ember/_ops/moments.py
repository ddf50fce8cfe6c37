"""Moments: var, std, var_mean and std_mean, with torch's ``correction`` (and ``unbiased``)."""
import builtins
import math
import warnings

import numpy as np

import ember

from .._C import kernels as _C
from .meta import empty, reduce_dims, reduce_shape
from .reduction import _count, _keep, _user_level, _whole
from .tangents import REDUCTION
from .registry import op
from .samples import ErrorSample, Sample, const, dim_errors, make


def _moment_args(dim, unbiased, correction):
    """``(dim, correction)`` from torch's two signatures: ``var(input, dim, unbiased, keepdim)``
    (also ``var(input, unbiased)``) and ``var(input, dim, *, correction, keepdim)``."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if unbiased is not None and not isinstance(unbiased, bool):
        raise TypeError("var(): argument 'unbiased' must be bool; pass dims as dim=")
    if correction is not None:
        return dim, correction
    return dim, 0 if unbiased is False else 1


_MOMENT_EXAMPLE = """

    Example:
        >>> x = ember.tensor([1., 2., 3., 4.])
        >>> ember.{name}(x), ember.{name}(x, correction=0)
"""
_MOMENT_RESULTS = {
    "var": "(tensor(1.6667), tensor(1.2500))", "std": "(tensor(1.2910), tensor(1.1180))",
    "var_mean": "((tensor(1.6667), tensor(2.5000)), (tensor(1.2500), tensor(2.5000)))",
    "std_mean": "((tensor(1.2910), tensor(2.5000)), (tensor(1.1180), tensor(2.5000)))"}


def _var_mean(xp, x, ax, c, keepdim):
    """``(var, mean)`` over the axes ``ax``: np.var's two passes, with their mean kept (np.var
    then np.mean cost three, and their argument handling outweighs small inputs)."""
    n = math.prod(x.shape[i] for i in ax)
    m = x.sum(axis=ax, keepdims=True) / n       # (np.mean's steps, without its Python)
    d = x - m
    sq = (d * d.conj()).real if d.dtype.kind == "c" else d * d
    v = sq.sum(axis=ax, keepdims=keepdim) / builtins.max(n - c, 0)
    return v, m if keepdim else m.reshape(v.shape)


def _moments(name, std, with_mean):
    def fwd(xp, input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if input.dtype.kind in "biu":
            raise RuntimeError("std and var only support floating point and complex dtypes")
        dim, c = _moment_args(dim, unbiased, correction)
        ax = reduce_dims(dim, input.ndim)
        # NOTE: computed in float32 for half precision, as torch's accumulation type
        x = input.astype(np.float32) if input.dtype.itemsize == 2 else input
        if (input.size if dim is None else _count(input.shape, dim)) - c <= 0:
            warnings.warn(f"{name.split('_')[0]}(): degrees of freedom is <= 0. Correction "
                          "should be strictly less than the reduction factor (input numel "
                          "divided by output numel).", UserWarning, stacklevel=_user_level())
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                v, m = _var_mean(xp, x, ax, c, keepdim)
        elif xp is np and x is input and (r := _whole("std" if std else "var", x, float(c)) if (
                dim is None and not keepdim) else _C.stats("std" if std else "var", x, ax,
                                                           keepdim, c)) is not None:
            return r if with_mean else r[0]
        else:
            v, m = _var_mean(xp, x, ax, c, keepdim)
        v = (xp.sqrt(v) if std else v).astype(input.real.dtype, copy=False)
        return (v, m.astype(input.dtype)) if with_mean else v
    fwd.__doc__ = (f"{'Standard deviation' if std else 'Variance'} over ``dim`` with "
                   f"``correction`` (1 by default: Bessel's){', and the mean' * with_mean}."
                   + _MOMENT_EXAMPLE.format(name=name) + f"        {_MOMENT_RESULTS[name]}\n    ")
    d = op(name, tags=("reduction",), method=not with_mean)(fwd)

    @d.vjp(save=("input", "result"))
    def _(g, input, dim=None, unbiased=None, keepdim=False, *, correction=None, result=None):
        dim, c = _moment_args(dim, unbiased, correction)
        gv, gm = (g if with_mean else (g, None))
        r = result[0] if with_mean else result
        out = None
        if gv is not None:
            if std:     # d std = d var / (2 std), which torch sets to 0 where std == 0
                gv = ember.where(r == 0, 0.0, gv / (2 * r))
            n = _count(input.shape, dim)
            centered = input - input.mean(reduce_dims(dim, input.dim()), keepdim=True)
            # (one scale, as torch's std_var_backward: 2 / 0 is inf, so 0 * it nan as 0 / 0)
            out = _keep(gv, input, dim, keepdim) * centered * (2 / (n - c) if n > c else math.inf)
        if gm is not None:
            gm = _keep(gm, input, dim, keepdim) / builtins.max(_count(input.shape, dim), 1)
            out = gm if out is None else out + gm
        return out

    def meta(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        dim, _ = _moment_args(dim, unbiased, correction)
        v = empty(reduce_shape(input.shape, dim, keepdim), input.real.dtype)
        return (v, empty(v.shape, input.dtype)) if with_mean else v

    d.meta = meta
    d.samples = lambda dev, dt: [
        Sample(make((3, 4), dt)), Sample(make((3, 4), dt), 1), Sample(make((3, 4), dt), False),
        Sample(make((3, 4), dt), 0, False, True), Sample(make((3, 4, 2), dt), (0, 2),
                                                         correction=0),
        Sample(make((3, 4), dt), 1, keepdim=True, correction=2)] if dt.category >= 2 else []
    return d


var = _moments("var", std=False, with_mean=False)
std = _moments("std", std=True, with_mean=False)
var_mean = _moments("var_mean", std=False, with_mean=True)
std_mean = _moments("std_mean", std=True, with_mean=True)
var.errors = std.errors = dim_errors() + [
    ErrorSample(Sample(const(3, dtype=np.int64)), RuntimeError, "only support floating point")]

for _d in (std, var, std_mean, var_mean):          # (forward mode: tangents.py)
    _d.jvp = REDUCTION
