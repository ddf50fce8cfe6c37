"""Counting values: unique and unique_consecutive, bincount, histc, histogram."""
import math

import numpy as np

from .. import _dtype
from .._C import kernels as _C

from .meta import empty, moveaxis, reduce_dims, reduce_shape
from .pointwise import PAR_MIN, type_name
from .registry import op
from .samples import ErrorSample, Sample, const, make
from .sorting import axis_of, sort_key



def _unique_rows(xp, x, dim):
    """``(x, moved)``: ``x`` as a 2-d array of rows along ``dim`` (elements when None)."""
    if dim is None:
        return x.reshape(-1, 1)
    moved = moveaxis(xp, x.reshape(x.shape or (1,)), axis_of(dim, x.ndim), 0)
    if moved.size == 0 and moved.shape[0]:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique "
                           "cannot be applied")
    return moved.reshape(moved.shape[0], moved[:1].size)


def _unique_result(xp, input, rows, keep, inverse, counts, dim, return_inverse, return_counts):
    """Assemble torch's result: the kept rows (reshaped back), then inverse and counts."""
    if dim is None:
        vals = _C.mask_select(rows[:, 0], keep) if xp is np else None
        vals = rows[keep, 0] if vals is None else vals
        inverse = inverse.reshape(input.shape) if return_inverse else None
    else:
        axis = axis_of(dim, input.ndim)
        moved = moveaxis(xp, input, axis, 0)
        vals = moveaxis(xp, rows[keep].reshape((-1,) + moved.shape[1:]), 0, axis)
    out = (vals,) + ((inverse.astype(np.int64),) if return_inverse else ()) + \
        ((counts.astype(np.int64),) if return_counts else ())
    return out if len(out) > 1 else out[0]


def _unique_c(input, sorted, return_inverse, return_counts):
    """unique (``sorted``) or unique_consecutive of all elements of a float NumPy array by
    count.h's one loop (a stable sort, then the runs), as the reference below; None where it
    does not apply."""
    fn = _C.kernel("unique_runs", input.dtype) if type(input) is np.ndarray else None
    if fn is None:
        return None
    x = _C.contiguous(input)
    vals = np.empty(x.size, x.dtype)
    inv = np.empty(x.shape, np.int64) if return_inverse else None
    counts = np.empty(x.size, np.int64) if return_counts else None
    k = fn(_C.ptr(x), x.size, sorted, _C.ptr(vals), _C.ptr(inv), _C.ptr(counts))
    out = (vals[:k],) + ((inv,) if return_inverse else ()) + \
        ((counts[:k],) if return_counts else ())
    return None if k < 0 else out if len(out) > 1 else out[0]


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
    if dim is None and (r := _unique_c(input, 1, return_inverse, return_counts)) is not None:
        return r
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
    if dim is None and (r := _unique_c(input, 0, return_inverse, return_counts)) is not None:
        return r
    rows = _unique_rows(xp, input, dim)
    n = rows.shape[0]
    starts = xp.ones(n, bool)
    # (elements: one comparison of neighbours, without any() over rows of one)
    starts[1:] = rows[1:, 0] != rows[:-1, 0] if dim is None else (rows[1:] != rows[:-1]).any(1)
    # (inverse and counts only when asked for: each is a pass or two over the input)
    counts = xp.diff(xp.append(xp.flatnonzero(starts), n)) if return_counts else None
    inverse = xp.cumsum(starts) - 1 if return_inverse else None
    return _unique_result(xp, input, rows, starts, inverse, counts, dim, return_inverse,
                          return_counts)


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
    if input.ndim != 1 or xp is not np and input.size and input.dtype.kind == "i" and \
            input.min() < 0:        # (NumPy's bincount checks for negatives itself, below)
        raise RuntimeError(_NEGATIVE)
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and weights.shape != input.shape:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    if weights is not None and xp is np and input.dtype == np.int64 and \
            (fn := _C.kernel("bincount_w", weights.dtype)):
        # (count.h: the check, the size and the sums in two calls, the sums in the weights'
        # float32 as torch's; NumPy sums in double, then a cast: four NumPy calls in all)
        x, w = _C.contiguous(input), _C.contiguous(weights)
        if (bins := fn(_C.ptr(x), None, x.size, None)) < 0:
            raise RuntimeError(_NEGATIVE)
        fn(_C.ptr(x), _C.ptr(w), x.size, _C.ptr(out := np.zeros(max(minlength, bins), w.dtype)))
        return out
    # NOTE: torch keeps float32 weights and sums every other dtype as float64
    dt = np.float32 if weights is not None and weights.dtype == np.float32 else np.int64 \
        if weights is None else np.float64
    try:    # (bincount reads float32 weights as float64 itself: no converted copy first)
        return xp.bincount(input, weights if weights is None or dt is np.float32 and xp is np else
                           weights.astype(np.float64), minlength).astype(dt, copy=False)
    except ValueError:      # (NumPy's "must have no negative elements")
        raise RuntimeError(_NEGATIVE) from None


_NEGATIVE = "bincount only supports 1-d non-negative integral inputs."
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


def _hist_c(input, nbins, how, lo=0.0, hi=0.0, edges=None, weight=None):
    """``(hist, edges)`` of each row of a float NumPy ``input`` by count.h's ``hist_rows`` (one
    loop: the range, torch's linspace edges, the bins; ``how`` as there), as the reference's
    NumPy steps; None where it does not apply."""
    fn = _C.kernel("hist_rows", input.dtype) if type(input) is np.ndarray and nbins > 0 and all(
        a is None or a.dtype == input.dtype for a in (edges, weight)) else None
    if fn is None:
        return None
    x, w, e = (None if a is None else _C.contiguous(a) for a in (input, weight, edges))
    hist = np.empty((x.shape[0], nbins), x.dtype)
    out_edges = np.empty((x.shape[0], nbins + 1), x.dtype) if how < 3 else None
    if fn(_C.ptr(x), _C.ptr(w), x.shape[0], x.shape[1], nbins, how, float(lo), float(hi),
          _C.ptr(e), 0 if e is None else e.shape[0], _C.ptr(out_edges), _C.ptr(hist),
          _C.num_threads()):
        return None
    return hist, out_edges


def _count_in(xp, x, edges, weight=None, equal=False):
    """Per row of ``x`` (n, m), the sum of its ``weight`` (or 1) in each bin between its
    ``edges`` (n or 1, E), ``equal`` ones or not; the last bin is closed."""
    (n, m), nbins = x.shape, edges.shape[-1] - 1
    x, edges = sort_key(x), xp.broadcast_to(sort_key(edges), (n, nbins + 1))
    lo, hi = edges[:, :1], edges[:, -1:]
    inside = (x >= lo) & (x <= hi)
    if equal:
        # NOTE: torch's search for equal bins: the bin by arithmetic, then a step down or up
        # where the edges' rounding puts the value in a neighbour
        pos = ((xp.where(inside, x, lo) - lo) * nbins / (hi - lo)).astype(np.int64)
        pos = xp.clip(pos, 0, nbins - 1)
        pos -= x < xp.take_along_axis(edges, pos, 1)
        pos += x >= xp.take_along_axis(edges, pos + 1, 1)
    else:       # (a search per row, as searchsorted's N-d rows: NumPy's has no batch)
        pos = xp.stack([xp.searchsorted(e, r, side="right") for e, r in zip(edges, x)]) - 1
    pos = xp.minimum(pos, nbins - 1) + xp.arange(n)[:, None] * nbins
    w = None if weight is None else sort_key(weight).reshape(n, m)[inside].astype(np.float64)
    return xp.bincount(pos[inside], w, minlength=n * nbins).reshape(n, nbins)


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
    if r := _hist_c(input.reshape(1, -1), bins, 3, lo, hi):
        return r[0][0]
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
    hist, edges = histogram_rows.fwd(xp, input.reshape(1, -1), bins, range, None if weight is
                                     None else weight.reshape(1, -1), density)
    return hist[0], edges[0]


@op("_histogram_rows", method=False, function=False, differentiable=False)
def histogram_rows(xp, input, bins, range=None, weight=None, density=False):
    """``histogram`` of each row of ``input`` (n, m), each in its own range unless ``range``
    is given; ``bins`` a count, or edges (E,) or one row of them per row (n, E); ``weight``
    (n, m). vmap's rule for ``histogram`` (every example a row). Returns (n, bins) counts
    and (n, bins + 1) edges."""
    _float_only("histogramdd", input)
    if hasattr(bins, "shape"):
        if bins.dtype != input.dtype:
            raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have the "
                               f"same dtype, but got input with dtype "
                               f"{type_name(input.dtype).lower()} and bins for dimension 0 with "
                               f"dtype {type_name(bins.dtype).lower()}")
        edges = bins.reshape(-1, bins.shape[-1])
        r = _hist_c(input, edges.shape[-1] - 1, 0, edges=edges, weight=weight)
    else:
        if input.dtype.kind == "V" and range is None:
            # NOTE: torch has no kernel for the range of bfloat16 data, but bins it in a range
            raise NotImplementedError(f"\"histogramdd\" not implemented for "
                                      f"'{type_name(input.dtype)}'")
        _check_bins(bins)
        if range is not None and range[0] > range[1]:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min "
                               f"{range[0]} max {range[1]} for dimension 0")
        r = _hist_c(input, bins, 2 if range is None else 1, *(range or ()), weight=weight)
        if r is None:
            kt = sort_key(input).dtype       # bfloat16 edges are computed in float32
            lo, hi = (xp.full((input.shape[0], 1), v, kt) for v in range) if range is not None \
                else (sort_key(input).min(1, keepdims=True),
                      sort_key(input).max(1, keepdims=True)) \
                if input.size else (xp.zeros((input.shape[0], 1), kt),) * 2
            lo, hi = xp.where(lo == hi, lo - 0.5, lo), xp.where(lo == hi, hi + 0.5, hi)
            edges = _linspace(xp, lo, hi, bins + 1, input.dtype)
    hist, edges = r or (_count_in(xp, input, edges, weight, not hasattr(bins, "shape")).astype(
        input.dtype), xp.broadcast_to(edges, (input.shape[0], edges.shape[-1])).copy())
    if density:
        hist = hist / (hist.sum(1, keepdims=True) * xp.diff(edges, axis=1))
    return hist, edges


def _histogram_meta(input, bins, range=None, weight=None, density=False):
    n = bins.shape[-1] - 1 if hasattr(bins, "shape") else bins
    return empty((n,), input.dtype), empty((n + 1,), input.dtype)


histogram.meta = _histogram_meta
histogram_rows.meta = lambda input, bins, *args, **kwargs: tuple(
    empty((input.shape[0],) + e.shape, e.dtype) for e in _histogram_meta(input, bins))


def _torch_rows(torch, input, bins, range=None, weight=None, density=False):
    rows = [torch.histogram(r, bins if not hasattr(bins, "dim") or bins.dim() == 1 else bins[i],
                            **({} if range is None else {"range": range}), density=density,
                            weight=None if weight is None else weight[i])
            for i, r in enumerate(input)]
    return tuple(torch.stack(t) for t in zip(*rows))


histogram_rows.torch_ref = _torch_rows
histogram_rows.samples = lambda dev, dt: [
    Sample(make((3, 8), dt), 4), Sample(make((2, 6), dt), np.sort(make((2, 5), dt), 1)),
    Sample(make((3, 5), dt), 3, (-1.0, 1.0), np.abs(make((3, 5), dt, seed=1)), True)] \
    if dt.category == 2 else []
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


@op("hash_tensor", tags=("reduction",), differentiable=False)
def hash_tensor(xp, input, dim=(), *, keepdim=False, mode=0):
    """The xor of the elements' 64-bit patterns over ``dim`` (all by default), as uint64: floats
    are first made float64, integers and bool int64 (``mode=0``, torch's only mode).

    Example:
        >>> ember.hash_tensor(ember.tensor([1, 2, 7]))
        tensor(4, dtype=torch.uint64)
    """
    if mode != 0:
        raise RuntimeError(f"Unknown hash_tensor mode: {mode}")
    if dim == () and not keepdim and input.size and input.dtype.kind in "fi" and xp is np:
        # (the common call: the checks below pass for it. parloop.h's xor_wide widens and
        # xors in one pass, over threads from PAR_MIN elements; NumPy's are three calls)
        if input.dtype.char in "fdbhil" and input.flags.c_contiguous and \
                (pl := _C.parloop()) is not None:
            out = np.empty((), np.uint64)
            pl[6](input, input.size, ord(input.dtype.char), out,
                  _C.num_threads() if input.size >= PAR_MIN else 1)
            return out[()]
        return np.bitwise_xor.reduce(input.astype(
            np.float64 if input.dtype.kind == "f" else np.int64).view(np.uint64), axis=None)
    ml = _dtype.is_ml_dtypes(input.dtype)
    if input.dtype.kind not in "biuf" and not ml or input.dtype.itemsize == 1 and ml or \
            input.dtype.kind == "u" and input.dtype.itemsize > 1:
        raise NotImplementedError(f"\"xor_sum_cpu\" not implemented for '{type_name(input.dtype)}'")
    axes = reduce_dims(dim, input.ndim)
    if input.size == 0 and (dim is None or dim == ()):
        raise RuntimeError("hash_tensor: Expected reduction dim to be specified for input.numel() "
                           "== 0. Specify the reduction dim with the 'dim' argument.")
    for a in axes:
        if input.shape[a] == 0:
            raise IndexError(f"hash_tensor: Expected reduction dim {a} to have non-zero size.")
    wide = input.astype(np.float64 if input.dtype.kind == "f" or ml else np.int64)
    kept = [a for a in range(input.ndim) if a not in axes]
    if not kept and xp is np:   # (every dim, the common call: one reduction, no reshaping)
        x = np.bitwise_xor.reduce(wide.view(np.uint64).reshape(-1))
        return np.asarray(x).reshape((1,) * input.ndim if keepdim else ())
    x = wide.view(np.uint64).transpose(kept + list(axes)).reshape(
        [input.shape[a] for a in kept] + [math.prod(input.shape[a] for a in axes)])
    x = np.bitwise_xor.reduce(x, axis=-1, keepdims=True) if xp is np else x
    while x.shape[-1] > 1:      # (a pairwise fold: CuPy has no bitwise_xor.reduce)
        half = x.shape[-1] // 2
        x = xp.concatenate([x[..., :half] ^ x[..., half:2 * half], x[..., 2 * half:]], -1)
    return x.reshape([1 if a in axes else n for a, n in enumerate(input.shape)] if keepdim
                     else [input.shape[a] for a in kept])


hash_tensor.meta = lambda input, dim=(), *, keepdim=False, mode=0: empty(
    reduce_shape(input.shape, () if dim is None else dim, keepdim), np.uint64)
hash_tensor.samples = lambda dev, dt: [] if dt.name.startswith(("float8", "complex")) else [
    Sample(make((3, 4), dt)), Sample(make((3, 4), dt), 1), Sample(make((2, 3, 4), dt), (0, 2),
                                                                keepdim=True),
    Sample(make((), dt)), Sample(make((0, 3), dt), 1)]
hash_tensor.errors = [
    ErrorSample(Sample(const(2, 2), mode=1), RuntimeError, "Unknown hash_tensor mode: 1"),
    ErrorSample(Sample(const(0, 3)), RuntimeError, "Expected reduction dim to be specified"),
    ErrorSample(Sample(const(0, 3), 0), IndexError, "Expected reduction dim 0 to have non-zero"),
    ErrorSample(Sample(const(2, dtype=np.complex64)), NotImplementedError,
                "\"xor_sum_cpu\" not implemented for 'ComplexFloat'")]
