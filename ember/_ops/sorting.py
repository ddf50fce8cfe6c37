"""Sorting and selection: sort, argsort, msort, topk, kthvalue, searchsorted, bucketize.

Everything orders through one stable argsort (``stable_order``), so ties keep their input order in
every op, as torch's CPU kernels do.
"""
import math

import numpy as np

import ember

from .._C import kernels as _C
from .meta import empty, moveaxis, reduce_dims, reduce_shape
from .pointwise import reject, type_name
from .tangents import REDUCTION, decomposed, gathered
from .registry import op, overload_if_given
from .samples import ErrorSample, Sample, const, make


def sort_key(x):
    # NOTE: ml_dtypes' bfloat16/float8 sort wrongly in NumPy (and put nan anywhere); their
    # values are exact in float32, so order by that.
    return x.astype(np.float32) if x.dtype.kind == "V" else x


def take_along(xp, x, idx, axis):
    """``take_along_axis(x, idx, axis)``; a 1-D or 2-D NumPy array along its last axis by one
    fancy index (take_along_axis's Python costs more than the gather on a small input)."""
    if xp is np and axis == x.ndim - 1 and x.ndim <= 2:
        return x[idx] if x.ndim == 1 else x[np.arange(x.shape[0])[:, None], idx]
    return xp.take_along_axis(x, idx, axis)


def axis_of(dim, ndim):
    """``dim`` as an axis of an ``ndim``-dim array, with torch's range error (a 0-dim tensor
    takes dims 0 and -1)."""
    axes = reduce_dims(dim, ndim)
    return axes[0] if ndim else 0


_FAST_ORDER_FROM = 1 << 13


def stable_order(xp, x, axis, descending=False):
    """Stable argsort along ``axis`` (nan last ascending, first descending, as torch)."""
    if (r := _radix(xp, x, axis, descending)) is not None:
        return r[1]
    k = sort_key(x)
    # (the fast order's dozen NumPy calls cost more than a small stable sort)
    if xp is np and k.dtype.kind == "f" and k.shape[axis] > 1 and k.size > _FAST_ORDER_FROM:
        return _fast_stable_order(k, axis, descending)
    if not descending:
        return xp.argsort(k, axis=axis, kind="stable")
    # NOTE: sorting the reversed array and reversing back keeps equal elements in input order
    # (negating would not do for unsigned ints, bools or nan).
    n = x.shape[axis]
    return xp.flip(n - 1 - xp.argsort(xp.flip(k, axis), axis=axis, kind="stable"), axis)


def _radix(xp, x, axis, descending):
    """``(values, indices)`` of a stable sort of float32 ``x`` along ``axis`` by count.h's radix
    sort (rows over threads), or None. Its passes beat NumPy's stable merge sort on rows and the
    fast order's fix-up, not NumPy's SIMD quicksort of one long row, nor 8-byte keys."""
    n = x.shape[axis] if x.ndim else 1
    fn = _C.kernel("sort_rows", x.dtype) if xp is np and x.dtype == np.float32 and n > 1 and \
        x.size > _FAST_ORDER_FROM and (n <= 1 << 17 or x.size > n) else None
    if fn is None:
        return None
    xs = np.ascontiguousarray(moveaxis(np, x, axis, -1))
    v, i = np.empty_like(xs), np.empty(xs.shape, np.int64)
    if fn(_C.ptr(xs), xs.size // n, n, descending, _C.ptr(v), _C.ptr(i), _C.num_threads()):
        return None
    return [np.ascontiguousarray(moveaxis(np, a, -1, axis)) for a in (v, i)]


def _fast_stable_order(k, axis, descending):
    """The stable order of float keys by NumPy's unstable SIMD quicksort (much faster than its
    stable sort): sort, then put each run of equal keys (nans too) back in input order, as a
    stable sort leaves it. Floats rarely tie, so the fix-up touches few elements."""
    order = np.argsort(k, axis=axis)
    if descending:          # ascending puts nan last: reversed, it comes first, as in torch
        order = np.flip(order, axis)
    order = np.ascontiguousarray(moveaxis(np, order, axis, -1))
    s = np.take_along_axis(moveaxis(np, k, axis, -1), order, -1)
    tied = s[..., 1:] == s[..., :-1]                  # position p + 1 ties with p
    if np.isnan(s[..., 0]).any() or np.isnan(s[..., -1]).any():
        tied |= np.isnan(s[..., 1:]) & np.isnan(s[..., :-1])
    if tied.any():
        n = s.shape[-1]
        after = np.zeros(s.shape, bool)               # ties with the element before it
        after[..., 1:] = tied
        member = after.copy()
        member[..., :-1] |= tied                      # in some run of ties
        pos = np.flatnonzero(member)
        flat = order.reshape(-1)
        # a slice's first element ties with nothing before it, so runs never cross slices
        run = np.cumsum(~after.reshape(-1)[pos])
        key = run * n + flat[pos]                     # by run, then by input position
        flat[pos] = flat[pos][np.argsort(key)]
    return moveaxis(np, order, -1, axis)


def _no_complex(name, x):
    if x.dtype.kind == "c":
        raise RuntimeError(f"{name} does not support complex dtypes on CPU")


def scatter_back(g, input, dim, indices):
    """The gradient of values picked from ``input`` at ``indices`` along ``dim``."""
    if len(input.shape) == 0:
        return g.reshape(())
    z = ember.zeros(input.shape, dtype=g.dtype, device=g.device)
    return z.scatter_add(dim, indices, g)


# ---- sort ------------------------------------------------------------------------------------


@op("sort", nondiff_outputs=(1,), returns=("values", "indices"))
def sort(xp, input, dim=-1, descending=False, *, stable=False):
    """Sorted values along ``dim`` and the indices they came from; the sort is always stable.

    Example:
        >>> tuple(ember.sort(ember.tensor([3, 1, 3, 2]), descending=True))
        (tensor([3, 3, 2, 1]), tensor([0, 2, 3, 1]))
    """
    _no_complex("Sort", input)
    nd = input.ndim
    if xp is np and type(dim) is int and -nd <= dim < nd and not descending and \
            input.dtype.kind != "V" and input.size <= _FAST_ORDER_FROM:
        # (a small ascending sort: the stable order and a stable sort of a copy, methods
        # without NumPy's Python wrappers; equal keys keep their order in both)
        idx, vals = input.argsort(dim, kind="stable"), input.copy()
        vals.sort(dim, kind="stable")
        return vals, idx
    axis = axis_of(dim, input.ndim)
    x = input.reshape(input.shape or (1,))
    if (r := _radix(xp, x, axis, descending)) is not None:
        return r[0].reshape(input.shape), r[1].reshape(input.shape)
    idx = stable_order(xp, x, axis, descending)
    return take_along(xp, x, idx, axis).reshape(input.shape), idx.reshape(input.shape)


@sort.vjp(save=("result",))
def _(g, input, dim=-1, descending=False, *, stable=False, result=None):
    return scatter_back(g[0], input, dim, result[1])


sort.meta = lambda input, dim=-1, descending=False, *, stable=False: (
    empty(input.shape, input.dtype), empty(input.shape, np.int64))


def distinct(dt):
    """Distinct values (no ties), so every op picks the same index as torch's."""
    def f(shape, seed=0):
        n = math.prod(shape)
        v = np.random.default_rng(seed).permutation(n) - n // 3
        v = (v > n // 2) if dt.name == "bool" else v * (0.25 if dt.category >= 2 else 1)
        return np.asarray(v).astype(dt.np).reshape(shape)
    return f


def _sort_samples(dev, dt):
    if dt.category == 3:
        return []
    u = distinct(dt)
    return [Sample(make((3, 4), dt)), Sample(make((3, 4), dt), 0),
            Sample(make((3, 4), dt), 1, True), Sample(make((2, 3, 4), dt), -2, True),
            Sample(make((5,), dt), stable=True, descending=True), Sample(make((), dt), 0),
            Sample(u((4, 5)), dim=0, descending=True, stable=True), Sample(make((0, 3), dt), 0)]


sort.samples = _sort_samples
_SORT_ERRORS = [ErrorSample(Sample(const(3, 4), 2), IndexError, "Dimension out of range"),
                ErrorSample(Sample(const(3, dtype=np.complex64)), RuntimeError,
                            "does not support complex")]
sort.errors = _SORT_ERRORS
sort.grad_name_of = overload_if_given("sort", 3, "stable", False)


@op("argsort", differentiable=False)
def argsort(xp, input, dim=-1, descending=False, *, stable=False):
    """The indices that sort ``input`` along ``dim`` (see :func:`sort`).

    Example:
        >>> ember.argsort(ember.tensor([3, 1, 2]))
        tensor([1, 2, 0])
    """
    _no_complex("Sort", input)      # (the order alone: sort's gather of the values unneeded)
    x = input.reshape(input.shape or (1,))
    return stable_order(xp, x, axis_of(dim, input.ndim), descending).reshape(input.shape)


argsort.meta = lambda input, dim=-1, descending=False, *, stable=False: empty(input.shape, np.int64)
argsort.samples = _sort_samples
argsort.errors = _SORT_ERRORS


@op("msort")
def msort(xp, input):
    """``sort(input, dim=0).values``.

    Example:
        >>> ember.msort(ember.tensor([[1, 2], [0, 3]]))
        tensor([[0, 2],
                [1, 3]])
    """
    if xp is np and input.ndim and input.dtype.kind in "fiub" and input.size <= _FAST_ORDER_FROM:
        return np.sort(input, 0, kind="stable")     # (values only: one call, no indices)
    return sort.fwd(xp, input, 0)[0]


@msort.vjp(save=("input",))
def _(g, input):
    return scatter_back(g, input, 0, input.argsort(0, stable=True))


msort.meta = lambda input: empty(input.shape, input.dtype)
msort.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((5,), dt))] \
    if dt.category != 3 else []
msort.grad_name = "SortBackward0"

# ---- selection -------------------------------------------------------------------------------


@op("topk", nondiff_outputs=(1,), returns=("values", "indices"))
def topk(xp, input, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices. Unsorted
    results come sorted too (torch leaves their order unspecified).

    Example:
        >>> tuple(ember.topk(ember.tensor([3., 1., 2., 5.]), 2))
        (tensor([5., 3.]), tensor([3, 0]))
    """
    if xp is np and type(dim) is int and input.ndim and dim in (-1, input.ndim - 1) and \
            (r := _C.topk(input, k, largest)) is not None:
        return r    # (the common call, by rank.h: no kernel for the dtypes and k refused below)
    if input.dtype.kind == "b":
        raise RuntimeError("topk does not support bool dtypes on CPU")
    _no_complex("topk", input)
    axis = axis_of(dim, input.ndim)
    x = input.reshape(input.shape or (1,))
    if not 0 <= k <= x.shape[axis]:
        raise RuntimeError(f"selected index k out of range (k = {k}, size along dim = "
                           f"{x.shape[axis]})")
    out, idx = _top_order(xp, x, k, axis, largest)
    shape = input.shape if input.ndim else ()
    # (the kernel's values are the keys': bfloat16's in float32)
    out = take_along(xp, x, idx, axis) if out is None else out.astype(x.dtype, copy=False)
    return (out, idx) if input.ndim else (out.reshape(shape), idx.reshape(shape))


_SHORT_ROWS = 1024       # rows up to this long: topk sorts them whole (see _top_order)


def _top_order(xp, x, k, axis, largest):
    """(None or their values, the indices) of the ``k`` largest (smallest) of ``x`` along
    ``axis``, best first, ties in input order: a selection (``partition``) of the ``k``, then a
    sort of those ``k`` only."""
    key, n, last = sort_key(x), x.shape[axis], axis == x.ndim - 1
    if xp is np and key.dtype.kind == "f" and (r := _C.topk(
            key if last else moveaxis(np, key, axis, -1), k, largest)) is not None:
        return r if last else tuple(moveaxis(np, a, -1, axis) for a in r)
    if not 0 < k < n or key.dtype.kind == "f" and xp.isnan(key).any():
        # nan compares unequal to the threshold below; a full sort places it as torch does
        return None, xp.take(stable_order(xp, x, axis, largest), xp.arange(k), axis=axis)
    if key.dtype.kind == "f" and n <= _SHORT_ROWS:
        # short rows (a batch's class scores): one stable sort of the (negated) keys is
        # cheaper than the selection's dozen NumPy calls; equal keys keep input order either way
        order = xp.argsort(-key if largest else key, axis=axis, kind="stable")
        if axis == order.ndim - 1:      # (a copy: torch's indices are contiguous)
            return None, order[..., :k].copy()
        return None, xp.take(order, xp.arange(k), axis=axis)
    key = moveaxis(xp, key, axis, -1)
    kth = n - k if largest else k - 1
    t = xp.partition(key, kth, axis=-1)[..., kth:kth + 1]
    chosen, tied = (key > t, key == t) if largest else (key < t, key == t)
    short = k - chosen.sum(-1, keepdims=True)        # how many of the ties each row needs
    if (tied.sum(-1, keepdims=True) == short).all():
        chosen |= tied
    else:   # NOTE: the first ties in input order win, as in a stable sort (torch leaves it open)
        chosen |= tied & (xp.cumsum(tied, -1) <= short)
    idx = xp.nonzero(chosen)[-1].reshape(key.shape[:-1] + (k,))   # row-major: input order
    best = stable_order(xp, xp.take_along_axis(key, idx, -1), -1, largest)
    return None, moveaxis(xp, xp.take_along_axis(idx, best, -1), -1, axis)


@topk.vjp(save=("result",))
def _(g, input, k, dim=-1, largest=True, sorted=True, result=None):
    return scatter_back(g[0], input, dim, result[1])


def _topk_meta(input, k, dim=-1, largest=True, sorted=True):
    shape = list(input.shape)
    if shape:
        shape[axis_of(dim, input.ndim)] = k
    return empty(shape, input.dtype), empty(shape, np.int64)


topk.meta = _topk_meta
topk.samples = lambda dev, dt: [
    Sample(distinct(dt)((3, 5)), 2), Sample(distinct(dt)((3, 5)), 3, 0),
    Sample(distinct(dt)((3, 5)), 2, largest=False), Sample(distinct(dt)((4,)), 1, sorted=False),
    Sample(distinct(dt)((3, 5)), 0, 1), Sample(make((), dt), 1)] if dt.category in (1, 2) else []
topk.errors = [ErrorSample(Sample(const(3, 4), 5), RuntimeError, "selected index k out of range"),
               ErrorSample(Sample(const(3, 4), 1, 2), IndexError, "Dimension out of range"),
               ErrorSample(Sample(const(3, dtype=np.bool_), 1), RuntimeError, "bool dtypes")]


@op("kthvalue", nondiff_outputs=(1,), returns=("values", "indices"))
@reject("kthvalue", "bc")
def kthvalue(xp, input, k, dim=-1, keepdim=False):
    """The ``k``-th smallest element along ``dim`` (``k`` counts from 1) and its index.

    Example:
        >>> tuple(ember.kthvalue(ember.tensor([3., 1., 2.]), 2))
        (tensor(2.), tensor(2))
    """
    axis = axis_of(dim, input.ndim)
    x = input.reshape(input.shape or (1,))
    if x.shape[axis] == 0:
        raise IndexError(f"kthvalue(): Expected reduction dim {axis} to have non-zero size.")
    if not 1 <= k <= x.shape[axis]:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {axis}")
    return by_rank(xp, x, axis, "kth", k - 1, input.ndim, keepdim) or \
        pick(xp, x, stable_order(xp, x, axis), axis, k - 1, input.ndim, keepdim)


def by_rank(xp, x, axis, what, k, ndim, keepdim):
    """``pick``'s ``(values, indices)`` by the C quickselect (``_C.rank``) for a NumPy float
    ``x``; None where it does not apply."""
    r = _C.rank(x, axis, what, k) if xp is np and x.dtype.kind == "f" else None
    if r is None or not ndim:
        return None if r is None else (r[0].reshape(()), r[1].reshape(()))
    return (r[0][(slice(None),) * axis + (None,)], r[1][(slice(None),) * axis + (None,)]) \
        if keepdim else r


def pick(xp, x, order, axis, rank, ndim, keepdim):
    """``(values, indices)`` at sorted position ``rank`` (an int, or an array with size 1
    along ``axis``) of ``x`` along ``axis``, given the sorting ``order``."""
    if isinstance(rank, int):
        rank = xp.full(x.shape[:axis] + (1,) + x.shape[axis + 1:], rank, np.int64)
    idx = take_along(xp, order, rank, axis).astype(np.int64)
    vals = take_along(xp, x, idx, axis)
    if keepdim and ndim:
        return vals, idx
    shape = x.shape[:axis] + x.shape[axis + 1:] if ndim else ()
    return vals.reshape(shape), idx.reshape(shape)


@kthvalue.vjp(save=("result",))
def _(g, input, k, dim=-1, keepdim=False, result=None):
    return select_backward(g[0], input, dim, keepdim, result[1])


def select_backward(g, input, dim, keepdim, indices):
    """Gradient of a reduction that picks one element per slice along ``dim`` (kthvalue,
    median, mode)."""
    if len(input.shape) == 0:
        return g.reshape(())
    if not keepdim:
        g, indices = g.unsqueeze(dim), indices.unsqueeze(dim)
    return scatter_back(g, input, dim, indices)


def select_meta(input, dim=-1, keepdim=False):
    s = reduce_shape(input.shape, axis_of(dim, input.ndim), keepdim) if input.ndim else ()
    return empty(s, input.dtype), empty(s, np.int64)


kthvalue.meta = lambda input, k, dim=-1, keepdim=False: select_meta(input, dim, keepdim)
kthvalue.samples = lambda dev, dt: [
    Sample(distinct(dt)((3, 5)), 2), Sample(distinct(dt)((3, 5)), 3, 0),
    Sample(distinct(dt)((3, 5)), 5, 1, True), Sample(make((), dt), 1),
    Sample(make((7,), dt), 4)] if dt.category in (1, 2) else []
kthvalue.errors = [ErrorSample(Sample(const(3, 4), 5), RuntimeError, "k out of range"),
                   ErrorSample(Sample(const(3, 4), 1, 2), IndexError, "Dimension out of range"),
                   ErrorSample(Sample(const(3, dtype=np.bool_), 1), NotImplementedError,
                               "not implemented for 'Bool'")]

# ---- searching -------------------------------------------------------------------------------


@op("searchsorted", differentiable=False, method=False)
def searchsorted(xp, sorted_sequence, input, out_int32=False, right=False, side=None, sorter=None):
    """For each value of ``input``, the index where it would go in ``sorted_sequence`` (the
    last dim of an N-d sequence, matched row by row with ``input``'s leading dims).

    Example:
        >>> ember.searchsorted(ember.tensor([1, 3, 5]), ember.tensor([3, 6]), right=True)
        tensor([2, 3])
    """
    seq = sorted_sequence
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but "
                               f"got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, "
                               "got side of left while right was True")
        right = side == "right"
    values = input if hasattr(input, "dtype") else xp.asarray(input)
    for a in (seq, values):
        if a.dtype.kind in "bc":
            raise NotImplementedError(f"\"searchsorted_out_cpu\" not implemented for "
                                      f"'{type_name(a.dtype)}'")
    if seq.ndim > 1 and seq.shape[:-1] != values.shape[:-1]:
        raise RuntimeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or the "
                           f"first N-1 dimensions of boundaries tensor and input value tensor "
                           f"must match, but we got boundaries tensor {list(seq.shape)} and "
                           f"input value tensor {list(values.shape)}")
    if sorter is not None:
        seq = xp.take_along_axis(seq, sorter, -1)
    # NOTE: compare in the promoted dtype (an int sequence against float values), in float32
    # for bfloat16 (see sort_key).
    common = seq.dtype if seq.dtype == values.dtype and seq.dtype.kind != "V" else \
        np.result_type(sort_key(seq).dtype, sort_key(values).dtype)
    seq, values = seq.astype(common, copy=False), values.astype(common, copy=False)
    how = "right" if right else "left"
    # (count.h's branch-free search over threads: NumPy's branches mispredict on random values)
    fn = _C.kernel("search_rows", common) if xp is np and seq.ndim and values.size >= 4096 \
        else None
    if fn is not None:
        s, v, out = _C.contiguous(seq), _C.contiguous(values), np.empty(values.shape, np.int64)
        fn(_C.ptr(v), v.size, v.shape[-1], _C.ptr(s), math.prod(s.shape[:-1]), s.shape[-1],
           right, _C.ptr(out), _C.num_threads())
    elif seq.ndim <= 1:     # (NumPy's method: its function's dispatch costs ~1 us more)
        out = seq.searchsorted(values, how) if xp is np else xp.searchsorted(seq, values, how)
    else:
        r = math.prod(seq.shape[:-1])       # (not -1: a last dim of 0 leaves it ambiguous)
        rows = [xp.searchsorted(s, v, side=how) for s, v in
                zip(seq.reshape(r, seq.shape[-1]), values.reshape(r, values.shape[-1]))]
        out = xp.stack(rows).reshape(values.shape) if rows else xp.zeros(values.shape, np.int64)
    return xp.asarray(out).astype(np.int32 if out_int32 else np.int64, copy=False)


searchsorted.meta = lambda seq, input, out_int32=False, right=False, side=None, sorter=None: \
    empty(np.shape(input), np.int32 if out_int32 else np.int64)


def _search_samples(dev, dt):
    if dt.category not in (1, 2):
        return []
    seq = np.sort(make((6,), dt), kind="stable")
    rows = np.sort(make((2, 5), dt, seed=1), -1, kind="stable")
    return [Sample(seq, make((3, 4), dt, seed=2)), Sample(seq, make((4,), dt, seed=3), right=True),
            Sample(seq, seq, side="right"), Sample(seq, seq, out_int32=True),
            Sample(rows, make((2, 3), dt, seed=4)), Sample(seq, 1), Sample(rows[:, :0], rows)]


searchsorted.samples = _search_samples
searchsorted.errors = [
    ErrorSample(Sample(const(3), const(2), right=True, side="left"), RuntimeError,
                "side and right can't be set to opposites"),
    ErrorSample(Sample(const(2, 3), const(3, 3)), RuntimeError, "first N-1 dimensions"),
    ErrorSample(Sample(const(3), const(2), side="up"), RuntimeError, "side can only be"),
    ErrorSample(Sample(const(3, dtype=np.bool_), const(2, dtype=np.bool_)), NotImplementedError,
                "not implemented for 'Bool'")]


@op("bucketize", differentiable=False, method=False)
def bucketize(xp, input, boundaries, *, out_int32=False, right=False):
    """The bucket of each value of ``input`` between the 1-d ``boundaries``:
    ``searchsorted(boundaries, input, right=right)``.

    Example:
        >>> ember.bucketize(ember.tensor([1, 5, 9]), ember.tensor([1, 3, 5, 7]))
        tensor([0, 2, 4])
    """
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    if type(input) is np.ndarray and input.dtype is boundaries.dtype and input.ndim and \
            input.dtype.kind in "fiu" and input.size < 4096:     # (searchsorted's own pick)
        return boundaries.searchsorted(input, "right" if right else "left").astype(
            np.int32 if out_int32 else np.int64, copy=False)
    return searchsorted.fwd(xp, boundaries, input, out_int32=out_int32, right=right)


bucketize.meta = lambda input, boundaries, *, out_int32=False, right=False: empty(
    np.shape(input), np.int32 if out_int32 else np.int64)
bucketize.samples = lambda dev, dt: [
    Sample(s.args[1], s.args[0], **{k: v for k, v in s.kwargs.items() if k != "side"})
    for s in _search_samples(dev, dt)[:4]]
bucketize.errors = [ErrorSample(Sample(const(3), const(2, 2)), RuntimeError,
                                "boundaries tensor must be 1 dimension")]


# ---- forward mode (tangents.py)
sort.jvp = topk.jvp = gathered()
kthvalue.jvp = REDUCTION
msort.jvp = decomposed(lambda a, t, out: t["input"].gather(0, a["input"].sort(0)[1])
                       if a["input"].dim() else t["input"].clone())
