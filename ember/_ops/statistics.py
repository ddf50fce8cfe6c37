"""Statistics: medians, modes, quantiles, running extrema, unique values, histograms, diff.

The order statistics (median, quantile, mode) sort once with sorting.stable_order and pick
positions from the sorted order, so their indices are the ones torch's CPU kernels return.
"""
import numpy as np

import ember

from .meta import empty, reduce_shape
from .pointwise import reject, type_name
from .pointwise_binary import logaddexp
from .registry import op
from .samples import ErrorSample, Sample, const, dim_errors, make
from .sorting import (axis_of, distinct, pick, scatter_back, select_backward, select_meta,
                      sort_key, stable_order)


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
    @reject(name, "bc")
    def fwd(xp, input, dim=None, keepdim=False):
        x, axis = _along(input, dim)
        n = x.shape[axis]
        if n == 0:
            if dim is None:
                # NOTE: torch gives nan for the median of nothing, cast to the dtype
                # (INT64_MIN for int64, as x86 casts nan)
                return xp.full((), np.nan if input.dtype.kind in "fV" else
                               np.iinfo(input.dtype).min, input.dtype)
            raise IndexError(f"{name}(): Expected reduction dim {axis} to have non-zero size.")
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
nanmedian = _median("nanmedian", ignore_nan=True)


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
    order = stable_order(xp, x, axis)
    s = xp.moveaxis(xp.take_along_axis(sort_key(x), order, axis), axis, -1)
    # run length so far at each sorted position: the position minus the start of its run
    pos = xp.arange(n)
    starts = xp.concatenate([xp.ones(s.shape[:-1] + (1,), bool), s[..., 1:] != s[..., :-1]], -1)
    run = pos - xp.maximum.accumulate(xp.where(starts, pos, 0), axis=-1)
    # NOTE: the first longest run is the smallest mode; its end is the last occurrence, which
    # is the index torch returns.
    rank = xp.moveaxis(xp.argmax(run, axis=-1)[..., None], -1, axis)
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
    n, nans = x.shape[axis], _nan_count(xp, x, axis)
    qa = xp.asarray(q, dtype=input.dtype).reshape((-1,) + (1,) * x.ndim)
    shape = qa.shape[:1] + nans.shape
    # NOTE: the ranks follow torch's quantile_compute: nanquantile counts the other
    # elements (an all-nan slice ranks 0, a nan); quantile ranks a slice with a nan last.
    if ignore_nan:
        scale = xp.broadcast_to((n - 1 - nans).astype(input.dtype), shape)
        ranks = qa * scale
        scale = xp.where(ranks < 0, 0, scale)
        ranks = xp.maximum(ranks, 0)
    else:
        has_nan = xp.broadcast_to(nans > 0, shape)
        ranks = xp.where(has_nan, n - 1, qa * (n - 1)).astype(input.dtype)
        scale = xp.where(has_nan, 0, n - 1).astype(input.dtype)
    ranks = {"lower": xp.floor, "higher": xp.ceil, "nearest": xp.round}.get(
        interpolation, lambda r: r)(ranks)
    below, above = xp.floor(ranks), xp.ceil(ranks)
    weight = ranks - below if interpolation == "linear" else xp.full(shape, 0.5 * (
        interpolation == "midpoint"), input.dtype)
    order = stable_order(xp, x, axis)[None]
    lo, hi = (xp.take_along_axis(order, r.astype(np.int64), axis + 1) for r in (below, above))
    return lo, hi, weight, scale * (interpolation == "linear")


def _lerp(xp, a, b, w):
    # NOTE: torch's lerp formula, exact at both ends
    return xp.where(w < 0.5, a + w * (b - a), b - (b - a) * (1 - w))


def _quantile(name, ignore_nan):
    @op(name)
    def fwd(xp, input, q, dim=None, keepdim=False, *, interpolation="linear"):
        _quantile_checks(input, q, interpolation)
        lo, hi, w, _ = _quantile_plan.fwd(xp, input, q, dim, interpolation, ignore_nan)
        x, axis = _along(input, dim)
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
    return tuple(np.shape(q)) + reduce_shape(input.shape, dim, keepdim)


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
nanquantile = _quantile("nanquantile", ignore_nan=True)

# ---- scans -----------------------------------------------------------------------------------


def _cumulative_extremum(name, ufunc):
    @op(name, nondiff_outputs=(1,), returns=("values", "indices"))
    @reject(name, "c")
    def fwd(xp, input, dim):
        x, axis = _along(input, dim)
        k = sort_key(x)
        vals = ufunc(xp).accumulate(k, axis=axis) if x.size else k
        pos = xp.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
        # NOTE: torch moves the index to every later element equal to the running extremum
        # (>= for cummax) and to every nan, which then stays the extremum.
        hit = (k == vals) | (xp.isnan(k) if k.dtype.kind == "f" else False)
        idx = xp.maximum.accumulate(xp.where(hit, pos, 0), axis=axis) if x.size else \
            xp.zeros(x.shape, np.int64)
        return vals.astype(input.dtype).reshape(input.shape), \
            idx.astype(np.int64).reshape(input.shape)
    fwd.__doc__ = f"""Running {name[3:]}imum along ``dim`` and the index where it was last
    reached.

    Example:
        >>> ember.{name}(ember.tensor([1., 3., 2., 3.]), 0).indices
        tensor({[0, 1, 1, 3] if name == "cummax" else [0, 0, 0, 0]})
    """
    fwd.vjp(save=("result",))(lambda g, input, dim, result=None:
                              scatter_back(g[0], input, dim, result[1]))
    fwd.meta = lambda input, dim: (empty(input.shape, input.dtype), empty(input.shape, np.int64))
    fwd.samples = lambda dev, dt: [
        Sample(make((3, 4), dt), 1), Sample(make((3, 4), dt), 0), Sample(make((), dt), 0),
        Sample(make((4, 5), dt).round(), -1).at_kink(), Sample(make((0, 3), dt), 0)] + (
        [Sample(_with_nans(make((3, 4), dt)), 1).at_kink()] if dt.category == 2 else []) \
        if dt.category < 3 else []
    fwd.errors = dim_errors() + [ErrorSample(Sample(const(3, dtype=np.complex64), 0),
                                             NotImplementedError, "Complex")]
    return fwd


cummax = _cumulative_extremum("cummax", lambda xp: xp.maximum)
cummin = _cumulative_extremum("cummin", lambda xp: xp.minimum)


@op("logcumsumexp")
@reject("logcumsumexp_out", "biu")
def logcumsumexp(xp, input, dim):
    """``log(cumsum(exp(input), dim))`` without overflow.

    Example:
        >>> ember.logcumsumexp(ember.tensor([1000., 1000.]), 0)
        tensor([1000.0000, 1000.6932])
    """
    x, axis = _along(input, dim)
    if x.dtype.kind != "c":
        # NOTE: half precision accumulates in float32, as torch's kernel does
        k = x.astype(np.float32) if x.dtype.itemsize == 2 else x
        out = xp.logaddexp.accumulate(k, axis=axis) if x.size else k
    else:
        # NOTE: torch adds complex terms one at a time, keeping the imaginary part of the
        # larger one; a log of the whole sum would wrap it into (-pi, pi].
        terms = xp.moveaxis(x, axis, 0)
        out = list(terms[:1])
        for t in terms[1:]:
            out.append(logaddexp.fwd(xp, out[-1], t))
        out = xp.moveaxis(xp.stack(out) if out else terms, 0, axis)
    return out.astype(input.dtype).reshape(input.shape)


@logcumsumexp.vjp(save=("input", "result"))
def _(g, input, dim, result=None):
    if len(input.shape) == 0:
        return g

    def rev_lcse(t):
        return t.flip(dim).logcumsumexp(dim).flip(dim)
    if input.is_complex():      # d out_j / d x_i = exp(x_i - out_j) for j >= i
        return (g * (-result).exp().conj()).flip(dim).cumsum(dim).flip(dim) * input.exp().conj()
    # NOTE: torch's formula: sum_j>=i g_j exp(x_i - out_j) split by the sign of g and summed in
    # log space, so that neither exp(x) nor exp(-out) overflows.
    low = ember.finfo(g.dtype).min
    log_g = ember.where(g != 0, g.abs(), 1.0).log()
    pos = rev_lcse(ember.where(g > 0, log_g, low) - result)
    neg = rev_lcse(ember.where(g < 0, log_g, low) - result)
    return (pos + input).exp() - (neg + input).exp()


logcumsumexp.meta = lambda input, dim: empty(input.shape, input.dtype)
logcumsumexp.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), 1), Sample(make((3, 4), dt), 0), Sample(make((), dt), 0),
    Sample(make((2, 5), dt) * 300, -1), Sample(make((0, 3), dt), 1)] \
    if dt.category >= 2 else []
logcumsumexp.errors = dim_errors() + [ErrorSample(Sample(const(3, dtype=np.int64), 0),
                                                  NotImplementedError, "Long")]

# ---- unique values ---------------------------------------------------------------------------


def _unique_rows(xp, x, dim):
    """``(x, moved)``: ``x`` as a 2-d array of rows along ``dim`` (elements when None)."""
    if dim is None:
        return x.reshape(-1, 1)
    moved = xp.moveaxis(x.reshape(x.shape or (1,)), axis_of(dim, x.ndim), 0)
    if moved.size == 0 and moved.shape[0]:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique "
                           "cannot be applied")
    return moved.reshape(moved.shape[0], moved[:1].size)


def _unique_result(xp, input, rows, keep, inverse, counts, dim, return_inverse, return_counts):
    """Assemble torch's result: the kept rows (reshaped back), then inverse and counts."""
    if dim is None:
        vals = rows[keep, 0]
        inverse = inverse.reshape(input.shape)
    else:
        axis = axis_of(dim, input.ndim)
        moved = xp.moveaxis(input, axis, 0)
        vals = xp.moveaxis(rows[keep].reshape((-1,) + moved.shape[1:]), 0, axis)
    out = (vals,) + (inverse.astype(np.int64),) * return_inverse + \
        (counts.astype(np.int64),) * return_counts
    return out if len(out) > 1 else out[0]


def _no_complex_unique(x):
    if x.dtype.kind == "c":
        raise NotImplementedError(f"\"unique\" not implemented for '{type_name(x.dtype)}'")


@op("unique", differentiable=False)
def unique(xp, input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct elements (or slices along ``dim``) in ascending order, with optionally the
    index of each input element in them and how often each occurs. Always sorted, as torch's
    CPU kernel.

    Example:
        >>> ember.unique(ember.tensor([3, 1, 3, 2]), return_counts=True)
        (tensor([1, 2, 3]), tensor([1, 1, 2]))
    """
    _no_complex_unique(input)
    rows = _unique_rows(xp, input, dim)
    n = rows.shape[0]
    # rows in lexicographic order (lexsort takes the most significant key last)
    order = xp.lexsort(sort_key(rows).T[::-1]) if rows.shape[1] else xp.arange(n)
    s = rows[order]
    starts = xp.ones(n, bool)
    starts[1:] = (s[1:] != s[:-1]).any(1)
    group = xp.cumsum(starts) - 1
    inverse = xp.empty(n, np.int64)
    inverse[order] = group
    counts = xp.diff(xp.append(xp.flatnonzero(starts), n))
    return _unique_result(xp, input, rows, order[starts], inverse, counts, dim, return_inverse,
                          return_counts)


@op("unique_consecutive", differentiable=False)
def unique_consecutive(xp, input, return_inverse=False, return_counts=False, dim=None):
    """Collapse each run of equal consecutive elements (or slices along ``dim``) to one.

    Example:
        >>> ember.unique_consecutive(ember.tensor([1, 1, 2, 2, 1]))
        tensor([1, 2, 1])
    """
    _no_complex_unique(input)
    rows = _unique_rows(xp, input, dim)
    n = rows.shape[0]
    starts = xp.ones(n, bool)
    starts[1:] = (rows[1:] != rows[:-1]).any(1)
    counts = xp.diff(xp.append(xp.flatnonzero(starts), n))
    return _unique_result(xp, input, rows, starts, xp.cumsum(starts) - 1, counts, dim,
                          return_inverse, return_counts)


def _values_meta(*args, **kwargs):
    raise NotImplementedError("the output shape depends on the values of the input")


def _unique_samples(dev, dt):
    if dt.category == 3:
        return []
    x = make((4, 5), dt).round()
    rows = x[[0, 1, 0, 2, 1]]
    return [Sample(x), Sample(x, return_inverse=True, return_counts=True),
            Sample(rows, dim=0, return_inverse=True, return_counts=True), Sample(rows.T, dim=1),
            Sample(make((), dt)), Sample(make((0, 3), dt), return_counts=True),
            Sample(make((0, 3), dt), dim=0, return_inverse=True)]


unique.meta = unique_consecutive.meta = _values_meta
unique.samples = _unique_samples
unique_consecutive.samples = lambda dev, dt: [
    Sample(*s.args, **{k: v for k, v in s.kwargs.items() if k != "sorted"})
    for s in _unique_samples(dev, dt)]
unique.errors = unique_consecutive.errors = [
    ErrorSample(Sample(const(3, dtype=np.complex64)), NotImplementedError, "Complex"),
    ErrorSample(Sample(const(3, 4), dim=2), IndexError, "Dimension out of range"),
    ErrorSample(Sample(const(0, 3), dim=1), RuntimeError, "0 sized dimensions")]

# ---- counting --------------------------------------------------------------------------------


@op("bincount", differentiable=False)
def bincount(xp, input, weights=None, minlength=0):
    """How often each value ``0..max(input)`` occurs in the 1-d non-negative int ``input`` (or
    the sum of their ``weights``), with at least ``minlength`` bins.

    Example:
        >>> ember.bincount(ember.tensor([1, 3, 3]))
        tensor([0, 1, 0, 2])
    """
    if input.dtype.kind not in "iu":
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for "
                                  f"'{type_name(input.dtype)}'")
    if input.ndim != 1 or (input.size and input.min() < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is None:
        return xp.bincount(input, minlength=minlength).astype(np.int64)
    if weights.shape != input.shape:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    # NOTE: torch keeps float32 weights and sums every other dtype as float64
    dt = np.float32 if weights.dtype == np.float32 else np.float64
    return xp.bincount(input, weights.astype(np.float64), minlength).astype(dt)


bincount.meta = _values_meta
bincount.samples = lambda dev, dt: [
    Sample(np.array([1, 3, 3, 0, 7]), make((5,), dt)), Sample(np.array([2, 2]), minlength=5),
    Sample(np.array([], np.int64)), Sample(np.array([4, 0]), make((2,), dt), 2)] + \
    [Sample(np.abs(make((6,), dt))), Sample(np.abs(make((6,), dt)), minlength=3)] * (
        dt.category == 1) if dt.category in (1, 2) else []
bincount.errors = [
    ErrorSample(Sample(np.array([[1]])), RuntimeError, "1-d non-negative integral"),
    ErrorSample(Sample(np.array([-1])), RuntimeError, "1-d non-negative integral"),
    ErrorSample(Sample(const(2)), NotImplementedError, "not implemented for 'Float'"),
    ErrorSample(Sample(np.array([1]), minlength=-1), RuntimeError, "minlength should be >= 0"),
    ErrorSample(Sample(np.array([1]), const(2)), RuntimeError, "weights should be 1-d")]


def _float_only(name, x):
    if x.dtype.kind not in "fV":
        raise NotImplementedError(f"\"{name}\" not implemented for '{type_name(x.dtype)}'")


def _check_bins(bins):
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")


def _linspace(xp, lo, hi, steps, dtype):
    # NOTE: torch's linspace steps from both ends, so the last edge is exactly ``hi``
    i = xp.arange(steps)
    step = (hi - lo) / max(steps - 1, 1)
    return xp.where(i < steps // 2, lo + i * step, hi - (steps - 1 - i) * step).astype(dtype)


def _count_in(xp, x, edges, weight=None):
    """Sum of ``weight`` (or 1) per bin between ``edges``; the last bin is closed."""
    nbins = edges.shape[0] - 1
    x, edges = sort_key(x).reshape(-1), sort_key(edges)
    inside = (x >= edges[0]) & (x <= edges[-1])
    pos = xp.minimum(xp.searchsorted(edges, x[inside], side="right") - 1, nbins - 1)
    w = None if weight is None else sort_key(weight).reshape(-1)[inside].astype(np.float64)
    return xp.bincount(pos, w, minlength=nbins)


@op("histc", differentiable=False)
def histc(xp, input, bins=100, min=0, max=0):
    """Counts in ``bins`` equal bins from ``min`` to ``max`` (the data's range when both are
    equal); elements outside are ignored.

    Example:
        >>> ember.histc(ember.tensor([1., 2., 1.]), bins=4, min=0, max=3)
        tensor([0., 2., 1., 0.])
    """
    _float_only("histogram_cpu", input)
    _check_bins(bins)
    lo, hi = float(min), float(max)
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    if lo == hi and input.size:
        k = sort_key(input)
        lo, hi = float(k.min()), float(k.max())
    if lo == hi:        # NOTE: torch widens an empty range by 1 each way (histogram by 0.5)
        lo, hi = lo - 1, hi + 1
    x = sort_key(input).reshape(-1)

    def rounded(v):     # each step in the input's dtype (bfloat16 through float32)
        return xp.asarray(v).astype(input.dtype).astype(x.dtype)
    lo, hi = rounded(lo), rounded(hi)
    x = x[(x >= lo) & (x <= hi)]
    # NOTE: torch bins by (x - min) * bins / (max - min), rounding each step, not by comparing
    # with the edges; elements near an edge fall where torch's do.
    pos = rounded(rounded(rounded(x - lo) * bins) / rounded(hi - lo)).astype(np.int64)
    return xp.bincount(xp.minimum(pos, bins - 1), minlength=bins).astype(input.dtype)


histc.meta = lambda input, bins=100, min=0, max=0: empty((bins,), input.dtype)
histc.samples = lambda dev, dt: [
    Sample(make((20,), dt)), Sample(make((3, 4), dt), 5), Sample(make((3, 4), dt), 4, -1, 1),
    Sample(make((10,), dt), 6, 0.5, 0.5), Sample(np.full((3,), 2, dt.np), 3),
    Sample(make((0,), dt), 3)] if dt.category == 2 else []
histc.errors = [
    ErrorSample(Sample(const(3, dtype=np.int64)), NotImplementedError, "not implemented for"),
    ErrorSample(Sample(const(3), 0), RuntimeError, "bins must be > 0"),
    ErrorSample(Sample(const(3), 4, 3, 1), RuntimeError, "max must be larger than min")]


@op("histogram", differentiable=False, returns=("hist", "bin_edges"))
def histogram(xp, input, bins, range=None, weight=None, density=False):
    """Counts (or summed ``weight``) of ``input`` in ``bins`` equal bins over ``range`` (the
    data's by default), or between the edges of a 1-d tensor ``bins``; ``density`` divides by
    the total times the bin width.

    Example:
        >>> tuple(ember.histogram(ember.tensor([1., 2., 1.]), bins=2))
        (tensor([2., 1.]), tensor([1.0000, 1.5000, 2.0000]))
    """
    _float_only("histogramdd", input)
    if hasattr(bins, "shape"):
        if bins.dtype != input.dtype:
            raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have the "
                               f"same dtype, but got input with dtype "
                               f"{type_name(input.dtype).lower()} and bins for dimension 0 with "
                               f"dtype {type_name(bins.dtype).lower()}")
        edges = bins
    else:
        if input.dtype.kind == "V" and range is None:
            # NOTE: torch has no kernel for the range of bfloat16 data, but bins it in a range
            raise NotImplementedError(f"\"histogramdd\" not implemented for "
                                      f"'{type_name(input.dtype)}'")
        _check_bins(bins)
        lo, hi = range if range is not None else (
            (float(input.min()), float(input.max())) if input.size else (0.0, 0.0))
        if lo > hi:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {lo} "
                               f"max {hi} for dimension 0")
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        kt = sort_key(input).dtype.type       # bfloat16 edges are computed in float32
        edges = _linspace(xp, kt(lo), kt(hi), bins + 1, input.dtype)
    hist = _count_in(xp, input, edges, weight).astype(input.dtype)
    if density:
        hist = hist / (hist.sum() * xp.diff(edges))
    return hist, edges.copy()


def _histogram_meta(input, bins, range=None, weight=None, density=False):
    n = bins.shape[0] - 1 if hasattr(bins, "shape") else bins
    return empty((n,), input.dtype), empty((n + 1,), input.dtype)


histogram.meta = _histogram_meta
histogram.samples = lambda dev, dt: [
    Sample(make((20,), dt), 4), Sample(make((3, 4), dt), 5, range=(-1.0, 1.0)),
    Sample(make((3, 4), dt), np.array([-2, -0.5, 0, 1.5], dt.np)),
    Sample(make((3, 4), dt), 3, density=True),
    Sample(np.full((3,), 2, dt.np), 2)] if dt.category == 2 else []
histogram.errors = [
    ErrorSample(Sample(const(3, dtype=np.int64), 3), NotImplementedError, "not implemented for"),
    ErrorSample(Sample(const(3), 0), RuntimeError, "bins must be > 0"),
    ErrorSample(Sample(const(3), 2, range=(2.0, 1.0)), RuntimeError, "min should not exceed"),
    ErrorSample(Sample(const(3), const(2, dtype=np.float64)), RuntimeError, "same dtype")]

# ---- differences -----------------------------------------------------------------------------


@op("diff", promote="common", promote_args=(0, 3, 4))
def diff(xp, input, n=1, dim=-1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim`` (xor for bools), after joining
    ``prepend`` and ``append`` to ``input``.

    Example:
        >>> ember.diff(ember.tensor([1, 4, 9, 16]), n=2)
        tensor([2, 2])
    """
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    axis = axis_of(dim, input.ndim)
    parts = [p for p in (prepend, input, append) if p is not None]
    x = xp.concatenate(parts, axis) if len(parts) > 1 else input
    return xp.diff(x, n, axis) if n else x.copy()


@diff.vjp()
def _(g, input, n=1, dim=-1, prepend=None, append=None):
    sizes = [p.shape[dim] if hasattr(p, "shape") else 0 for p in (prepend, input, append)]
    # y = x[1:] - x[:-1] has the transpose g -> [0, g] - [g, 0]
    for _ in range(min(n, sum(sizes))):
        shape = list(g.shape)
        shape[dim] = 1
        z = ember.zeros(shape, dtype=g.dtype, device=g.device)
        g = ember.cat([z, g], dim) - ember.cat([g, z], dim)
    gp, gi, ga = g.split(sizes, dim)
    return gi, None, None, gp if sizes[0] else None, ga if sizes[2] else None


def _diff_meta(input, n=1, dim=-1, prepend=None, append=None):
    axis = axis_of(dim, input.ndim)
    shape = list(input.shape)
    shape[axis] = max(sum(p.shape[axis] for p in (prepend, input, append) if p is not None) - n,
                      0)
    return empty(shape, input.dtype)


diff.meta = _diff_meta
diff.samples = lambda dev, dt: [
    Sample(make((3, 5), dt)), Sample(make((3, 5), dt), 2, 0), Sample(make((4,), dt), 0),
    Sample(make((3, 4), dt), 1, 1, make((3, 2), dt, seed=1), make((3, 1), dt, seed=2)),
    Sample(make((3, 4), dt), 2, 0, None, make((1, 4), dt, seed=3)),
    Sample(make((2,), dt), 3), Sample(make((3, 2), dt), 1, 0, make((1, 2), dt, seed=4))]
diff.errors = [
    ErrorSample(Sample(const()), RuntimeError, "at least one-dimensional"),
    ErrorSample(Sample(const(3), -1), RuntimeError, "order must be non-negative"),
    ErrorSample(Sample(const(3, 4), 1, 2), IndexError, "Dimension out of range")]
