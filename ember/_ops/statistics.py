"""Order statistics: medians, modes, quantiles.

They sort once with sorting.stable_order and pick positions from the sorted order, so their
indices are the ones torch's CPU kernels return. Scans (running sums, products, extrema) and
diff live in scans.py, unique values and histograms in counting.py.
"""
import numpy as np

import ember

from .._backends import accumulate
from .meta import empty, moveaxis, reduce_shape
from .._C import kernels as _C
from .pointwise import reject, type_name
from .reduction import _whole
from . import tangents as tangents_
from .tangents import REDUCTION, named
from .registry import op, overload_if_given
from .samples import ErrorSample, Sample, const, dim_errors, make
from .sorting import (axis_of, by_rank, distinct, pick, select_backward, select_meta, sort_key,
                      stable_order)


def _along(input, dim):
    """``(x, axis)``: the input flattened when ``dim`` is None, else with 0-dim made 1-d."""
    if dim is None:
        return input.reshape(-1), 0
    return input.reshape(input.shape or (1,)), axis_of(dim, input.ndim)


def _nan_count(xp, x, axis):
    if x.dtype.kind not in "fV":
        return xp.zeros(x.shape[:axis] + (1,) + x.shape[axis + 1:], np.int64)
    return xp.isnan(sort_key(x)).sum(axis, keepdims=True)


def _with_nans(x):
    x = x.copy()
    x.reshape(-1)[[1, 6]] = np.nan
    return x

# ---- median and mode -------------------------------------------------------------------------


def _median(name, ignore_nan):
    @op(name, nondiff_outputs=(1,), returns=("values", "indices"))
    def fwd(xp, input, dim=None, keepdim=False):
        if input.dtype.kind in "bc":        # (reject's check, without its layer)
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for "
                                      f"'{type_name(input.dtype)}'")
        if dim is None and xp is np and input.size and (v := _whole(name, input)) is not None:
            return v    # (the common call: rank.h's quickselect as one row into a 0-dim value)
        x, axis = _along(input, dim)
        n = x.shape[axis]
        if n == 0:
            if dim is None:
                # NOTE: torch gives nan for the median of nothing, cast to the dtype
                # (INT64_MIN for int64, as x86 casts nan)
                return xp.full((), np.nan if input.dtype.kind in "fV" else
                               np.iinfo(input.dtype).min, input.dtype)
            raise IndexError(f"{name}(): Expected reduction dim {axis} to have non-zero size.")
        if r := by_rank(xp, x, axis, name, 0, input.ndim, keepdim):
            return r[0].reshape(()) if dim is None else r
        nans = _nan_count(xp, x, axis)
        if ignore_nan:      # the lower median of the others; all nan: the first nan
            rank = xp.maximum(n - nans - 1, 0) // 2
        else:               # a nan anywhere makes the median nan (the first nan, sorted last)
            rank = xp.where(nans > 0, n - nans, (n - 1) // 2)
        vals, idx = pick(xp, x, stable_order(xp, x, axis), axis, rank, input.ndim, keepdim)
        return vals.reshape(()) if dim is None else (vals, idx)
    fwd.__doc__ = f"""The lower median{" ignoring nan" * ignore_nan} of all elements, or
    ``(values, indices)`` along ``dim``{"" if ignore_nan else "; nan if any element is nan"}.

    Example:
        >>> tuple(ember.{name}(ember.tensor([[1., 4., 2., 3.]]), 1))
        (tensor([2.]), tensor([2]))
    """

    @fwd.vjp(save=("input", "result"))
    def _(g, input, dim=None, keepdim=False, result=None):
        if dim is not None:
            return select_backward(g[0], input, dim, keepdim, result[1])
        # NOTE: torch shares the gradient of the global median between the elements equal to
        # it (between the nans when it is nan).
        mask = ember.where(result.isnan(), input.isnan(), input == result).to(g.dtype)
        return g * mask / mask.sum()

    def meta(input, dim=None, keepdim=False):
        return empty((), input.dtype) if dim is None else select_meta(input, dim, keepdim)

    fwd.meta = meta
    fwd.samples = lambda dev, dt: [
        Sample(make((3, 4), dt)), Sample(make((3, 5), dt).round()).at_kink(),
        Sample(distinct(dt)((3, 4)), 1), Sample(distinct(dt)((4, 5)), 0, True),
        Sample(make((), dt)), Sample(make((), dt), 0), Sample(make((0, 3), dt), 1),
        Sample(make((0,), dt))] + ([
            Sample(_with_nans(make((3, 4), dt))).at_kink(),
            Sample(_with_nans(make((3, 4), dt)), 1).at_kink(),
            Sample(np.full((2, 3), np.nan, dt.np), 1).at_kink()]
            if dt.category == 2 else []) if dt.category in (1, 2) else []
    fwd.errors = dim_errors() + [
        ErrorSample(Sample(const(0, 3), 0), IndexError, "Expected reduction dim 0"),
        ErrorSample(Sample(const(3, dtype=np.complex64)), NotImplementedError, "Complex")]
    return fwd


median = _median("median", ignore_nan=False)
median.grad_name_of = overload_if_given("median", 1, "dim")
nanmedian = _median("nanmedian", ignore_nan=True)
nanmedian.grad_name_of = overload_if_given("nanmedian", 1, "dim")


@op("mode", nondiff_outputs=(1,), returns=("values", "indices"))
@reject("mode", "c")
def mode(xp, input, dim=-1, keepdim=False):
    """The most frequent value along ``dim`` (the smallest of equally frequent ones) and the
    index of its last occurrence.

    Example:
        >>> tuple(ember.mode(ember.tensor([3, 1, 3, 1, 2])))
        (tensor(1), tensor(3))
    """
    x, axis = _along(input, dim)
    n = x.shape[axis]
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {axis} to have non-zero size.")
    if r := by_rank(xp, x, axis, "mode", 0, input.ndim, keepdim):
        return r
    order = stable_order(xp, x, axis)
    s = moveaxis(xp, xp.take_along_axis(sort_key(x), order, axis), axis, -1)
    # run length so far at each sorted position: the position minus the start of its run
    pos = xp.arange(n)
    starts = xp.concatenate([xp.ones(s.shape[:-1] + (1,), bool), s[..., 1:] != s[..., :-1]], -1)
    run = pos - accumulate(xp, xp.maximum, xp.where(starts, pos, 0), -1)
    # NOTE: the first longest run is the smallest mode; its end is the last occurrence, which
    # is the index torch returns.
    rank = moveaxis(xp, xp.argmax(run, axis=-1)[..., None], -1, axis)
    return pick(xp, x, order, axis, rank, input.ndim, keepdim)


mode.vjp(save=("result",))(lambda g, input, dim=-1, keepdim=False, result=None:
                           select_backward(g[0], input, dim, keepdim, result[1]))
mode.meta = select_meta
mode.samples = lambda dev, dt: [
    Sample(make((3, 6), dt).round()).at_kink(), Sample(make((4, 5), dt).round(), 0).at_kink(),
    Sample(make((4, 5), dt).round(), 1, True).at_kink(), Sample(make((), dt)),
    Sample(distinct(dt)((2, 3))), Sample(make((0, 3), dt), 1)] if dt.category < 3 else []
mode.errors = dim_errors() + [
    ErrorSample(Sample(const(0, 3), 0), IndexError, "Expected reduction dim 0"),
    ErrorSample(Sample(const(3, dtype=np.complex64)), NotImplementedError, "Complex")]

# ---- quantiles -------------------------------------------------------------------------------

_MODES = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_checks(input, q, interpolation):
    if input.dtype not in (np.float32, np.float64):
        raise RuntimeError("quantile() input tensor must be either float or double dtype")
    if input.size == 0:
        raise RuntimeError("quantile() input tensor must be non-empty")
    if interpolation not in _MODES:
        raise RuntimeError("quantile() interpolation must be one of linear, lower, higher, "
                           f"midpoint or nearest, but got {interpolation}")
    if hasattr(q, "dtype"):
        if q.ndim > 1:
            raise RuntimeError("quantile() q must be a scalar or 1D tensor")
        if q.dtype != input.dtype:
            raise RuntimeError("quantile() q tensor must be same dtype as the input tensor")
        if not bool(((q >= 0) & (q <= 1)).all()):
            raise RuntimeError("quantile() q values must be in the range [0, 1]")
    elif not 0 <= q <= 1:
        raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {q}")


@op("_quantile_plan", method=False, function=False, differentiable=False)
def _quantile_plan(xp, input, q, dim=None, interpolation="linear", ignore_nan=False):
    """Where each quantile comes from: the input indices below and above it along the
    reduced axis, the weight of the one above, and d(weight)/dq. Shapes: ``(len(q),)`` +
    the input's (flattened when ``dim`` is None) with the axis reduced to 1."""
    x, axis = _along(input, dim)
    nans = _nan_count(xp, x, axis).astype(input.dtype)
    qa = xp.asarray(q, dtype=input.dtype).reshape((-1,) + (1,) * x.ndim)
    below, above, weight, scale = ranks(xp, qa, x.shape[axis], nans, interpolation, ignore_nan)
    if xp is np and x.ndim == 1 and below.size == 1:
        # one q over one slice (dim=None): the stable order's two entries by selection, not a
        # whole stable sort (1M float32: ~14 ms against ~45; torch's backward reuses its sort)
        lo, hi = (np.full(below.shape, i, np.int64) for i in _stable_at(x, int(below.item()),
                                                                           int(above.item())))
    else:
        order = stable_order(xp, x, axis)[None]
        lo, hi = (xp.take_along_axis(order, r.astype(np.int64), axis + 1) for r in (below, above))
    return lo, hi, weight, xp.broadcast_to(scale, weight.shape) * (interpolation == "linear")


def _stable_at(x, *ranks):
    """The indices at ``ranks`` of the 1-d float x's stable ascending order (nan last):
    the value there (np.partition, nan last too), then its occurrence among equal ones."""
    part, nan = np.partition(x, ranks), np.isnan(x)
    for r in ranks:
        v = part[r]
        same, before = (nan, x.size - np.count_nonzero(nan)) if v != v else (
            x == v, np.count_nonzero(x < v))
        yield int(np.flatnonzero(same)[r - before])


def ranks(xp, q, n, nans, interpolation, ignore_nan):
    """Where q falls in sorted slices of ``n`` holding ``nans`` nans (a float array, q one
    that broadcasts with it; or tensors, with ``xp`` ember: vmap's rule for a batched q,
    differentiable in q): the ranks below and above, the weight of the one above, and
    d(rank)/dq."""
    full = nans * 0 + (n - 1)
    # NOTE: the ranks follow torch's quantile_compute: nanquantile counts the other
    # elements (an all-nan slice ranks 0, a nan); quantile ranks a slice with a nan last.
    if ignore_nan:
        scale = xp.where(nans < n, full - nans, 0)
        r = q * scale
    else:
        scale = xp.where(nans > 0, 0, full)
        r = q * scale + (full - scale)
    r = {"lower": xp.floor, "higher": xp.ceil, "nearest": xp.round}.get(
        interpolation, lambda r: r)(r)
    below, above = xp.floor(r), xp.ceil(r)
    weight = r - below if interpolation == "linear" else r * 0 + 0.5 * (interpolation == "midpoint")
    return below, above, weight, scale


def _lerp(xp, a, b, w):
    # NOTE: torch's lerp formula, exact at both ends
    return xp.where(w < 0.5, a + w * (b - a), b - (b - a) * (1 - w))


def _quantile(name, ignore_nan):
    @op(name)
    def fwd(xp, input, q, dim=None, keepdim=False, *, interpolation="linear"):
        _quantile_checks(input, q, interpolation)
        x, axis = _along(input, dim)
        if xp is np and np.ndim(q) == 0:    # one q and no nan (sorted last): its ranks are
            s = np.sort(x, axis, kind="stable")     # numbers, the same ops as ranks' arrays
            if not np.isnan(s.take(-1, axis)).any():
                dt = input.dtype.type
                lo, hi, w, _ = ranks(np, dt(q), x.shape[axis], dt(0), interpolation, ignore_nan)
                a, b = (s.take(int(i), axis) for i in (lo, hi))
                if interpolation in ("linear", "midpoint"):     # (_lerp's branch)
                    a = a + w * (b - a) if w < 0.5 else b - (b - a) * (1 - w)
                return a.reshape(_quantile_shape(input, q, dim, keepdim))
        lo, hi, w, _ = _quantile_plan.fwd(xp, input, q, dim, interpolation, ignore_nan)
        a, b = (xp.take_along_axis(x[None], i, axis + 1) for i in (lo, hi))
        out = _lerp(xp, a, b, w) if interpolation in ("linear", "midpoint") else a
        return out.reshape(_quantile_shape(input, q, dim, keepdim))
    fwd.__doc__ = f"""The ``q``-th quantiles (a number, or a 0-d or 1-d tensor: a leading dim
    of results){" ignoring nan" * ignore_nan} over ``dim`` (all elements when None), between
    neighbouring values by ``interpolation``.

    Example:
        >>> ember.{name}(ember.tensor([1., 2., 3., 4.]), 0.5, interpolation="lower")
        tensor(2.)
    """

    @fwd.vjp(save=("input", "q"))
    def _(g, input, q, dim=None, keepdim=False, *, interpolation="linear"):
        qc = q.detach() if isinstance(q, ember.Tensor) else q
        lo, hi, w, dw = _quantile_plan(input.detach(), qc, dim, interpolation, ignore_nan)
        x, axis = (input.reshape(-1), 0) if dim is None else (
            input.reshape(tuple(input.shape) or (1,)), axis_of(dim, input.dim()))
        g = g.reshape(lo.shape)
        if isinstance(q, ember.Tensor):
            # NOTE: the weight's value with its derivative in q, so that double backward
            # sees d(grad input)/dq
            qb = q.reshape([-1] + [1] * x.dim())
            w = w + (qb - qb.detach()) * dw
        z = ember.zeros((lo.shape[0],) + tuple(x.shape), dtype=g.dtype, device=g.device)
        gx = z.scatter_add(axis + 1, lo, g * (1 - w)).scatter_add(axis + 1, hi, g * w)
        gq = None
        if isinstance(q, ember.Tensor) and interpolation == "linear":
            xs = x.unsqueeze(0).expand(z.shape)
            # a slice ranked without q (one with nan) has dw = 0 and no gradient, not nan
            gq = ember.where(dw == 0, 0.0, g * (xs.gather(axis + 1, hi) -
                                                xs.gather(axis + 1, lo)) * dw)
            gq = gq.reshape(lo.shape[0], -1).sum(1).reshape(q.shape)
        return gx.sum(0).reshape(input.shape), gq

    fwd.meta = lambda input, q, dim=None, keepdim=False, *, interpolation="linear": empty(
        _quantile_shape(input, q, dim, keepdim), input.dtype)
    fwd.samples = lambda dev, dt: _quantile_samples(dt) if dt.category == 2 else []
    fwd.errors = [
        ErrorSample(Sample(const(3, dtype=np.int64), 0.5), RuntimeError, "float or double"),
        ErrorSample(Sample(const(3), 1.5), RuntimeError, r"in the range \[0, 1\] but got 1.5"),
        ErrorSample(Sample(const(3), const(2, 2)), RuntimeError, "scalar or 1D tensor"),
        ErrorSample(Sample(const(3), const(2, dtype=np.float64)), RuntimeError, "same dtype"),
        ErrorSample(Sample(const(0), 0.5), RuntimeError, "must be non-empty"),
        ErrorSample(Sample(const(3), 0.5, interpolation="cubic"), RuntimeError, "but got cubic"),
        ErrorSample(Sample(const(3, 4), 0.5, 2), IndexError, "Dimension out of range")]
    return fwd


def _quantile_shape(input, q, dim, keepdim):
    return tuple(getattr(q, "shape", ())) + reduce_shape(input.shape, dim, keepdim)


def _quantile_samples(dt):
    x, q = make((3, 4), dt), np.array([0.1, 0.25, 0.6, 0.9], dt.np)
    # q at 0 and 1: finite differences would step out of range, so check the input's only
    ends = np.array([0.0, 0.5, 1.0], dt.np)
    out = [Sample(x, 0.3), Sample(x, q, 1), Sample(x, q, 0, True), Sample(x, 0.5, None, True),
           Sample(x, ends, 1).differentiable_in(0), Sample(x, 0.0), Sample(x, 1.0, 0),
           Sample(make((5,), dt), np.array(0.7, dt.np)), Sample(make((), dt), 0.2)]
    out += [Sample(x, q, 1, interpolation=m).at_kink() for m in _MODES[1:]]
    out += [Sample(make((4, 3), dt), 0.1, 0, interpolation="linear")]
    nan = _with_nans(x)
    return out + [Sample(nan, q, 1).at_kink(), Sample(nan, 0.5).at_kink(),
                  Sample(np.full((2, 3), np.nan, dt.np), q, 1).at_kink()]


quantile = _quantile("quantile", ignore_nan=False)
quantile.grad_name = "SqueezeBackward4"
nanquantile = _quantile("nanquantile", ignore_nan=True)
nanquantile.grad_name = "SqueezeBackward4"

# (forward mode, tangents.py; several q at once reach several outputs per element)
median.jvp = nanmedian.jvp = mode.jvp = REDUCTION


def _quantile_jvp(opdef, args, kwargs, tangents, out):
    """One q: a reduction. Several: each q's row is one, its Jacobian rows the vjp at a
    cotangent of ones on that row alone. A dual q takes the fallback."""
    a = named(opdef, args, kwargs)
    if 1 in tangents or "q" in tangents:     # (each element's slope in q: not written yet)
        return tangents_.double_vjp(opdef, args, kwargs, tangents, out)
    if not isinstance(a["q"], ember.Tensor) or a["q"].dim() == 0:
        return REDUCTION(opdef, args, kwargs, tangents, out)
    t, rows = tangents.get(0, tangents.get("input")), []
    for j in range(out.shape[0]):
        g = ember.zeros_like(out)
        g[j] = 1
        p = opdef.vjp_fn(g, *args, **kwargs)
        p = (p[0] if isinstance(p, tuple) else p) * t
        rows.append(p.sum().reshape(out.shape[1:]) if a["dim"] is None else
                    p.sum(a["dim"], keepdim=a["keepdim"]))
    return ember.stack(rows)


quantile.jvp = nanquantile.jvp = _quantile_jvp
