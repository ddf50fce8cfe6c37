"""Indexing: ``t[idx]`` reads and writes, gather, index_select, masked_fill, repeat and
repeat_interleave. The writes along a dimension (scatter, index_add...) live in scatter.py."""
import functools
import math
import operator

import numpy as np

import ember

from .._C import kernels as _C
from .._backends import add_at
from .meta import empty, wrap_dim
from .pointwise import PAR_MIN, par_run, par_where
from .tangents import LINEAR, linear_with
from .registry import op, overload_if_tensor
from .samples import ErrorSample, Sample, const, make


def _check_basic(index):
    for i in (index if isinstance(index, tuple) else (index,)):
        if isinstance(i, slice) and i.step is not None and i.step <= 0:
            raise ValueError("step must be greater than zero")


@op("getitem", method=False, function=False, view=True)
def getitem(xp, input, index):
    """``input[index]`` for basic indices (ints, slices, None, Ellipsis): a view."""
    _check_basic(index)
    out = input[index]
    if not isinstance(out, xp.ndarray):     # all-integer index: NumPy gave a scalar copy
        out = input[(index if type(index) is tuple else (index,)) + (Ellipsis,)]
    if index is None or type(index) is tuple and None in index:
        out = _none_strides(xp, input, index, out)
    return out


def _none_strides(xp, input, index, out):
    # NOTE: torch applies the index left to right and a None is unsqueeze at that point, so
    # its stride is size * stride of the input dimension that follows it (NumPy gives 0).
    items = index if type(index) is tuple else (index,)
    consumed = sum(i is not None and i is not Ellipsis for i in items)
    shape, strides, out_strides = list(input.shape), list(input.strides), list(out.strides)
    dim = pos = 0
    for i in items:
        if i is None:
            st = shape[dim] * strides[dim] if dim < len(shape) else input.itemsize
            shape.insert(dim, 1)
            strides.insert(dim, st)
            out_strides[pos] = st
            dim, pos = dim + 1, pos + 1
        elif isinstance(i, int):
            del shape[dim], strides[dim]
        else:
            n = input.ndim - consumed if i is Ellipsis else 1
            dim, pos = dim + n, pos + n
    return xp.lib.stride_tricks.as_strided(out, out.shape, out_strides)


@getitem.vjp()
def _(g, input, index):
    return _index_embed(g, tuple(input.shape), index)


def _getitem_node(input, index):
    """torch's node of ``input[index]`` (basic indices): that of the last view its left-to-right
    indexing makes. A lone slice is sliced; in a tuple, a slice keeping its whole dim makes no
    view; no view at all makes an alias."""
    if type(index) is not tuple:
        return "SliceBackward0" if type(index) is slice else "AliasBackward0" \
            if index is Ellipsis else "UnsqueezeBackward0" if index is None else "SelectBackward0"
    name, dim, shape = "AliasBackward0", 0, input._data.shape
    for i in index:
        if type(i) is slice:
            if i.start or i.step not in (None, 1) or i.stop is not None and i.stop < shape[dim]:
                name = "SliceBackward0"
            dim += 1
        elif i is None:
            name = "UnsqueezeBackward0"
        elif i is Ellipsis:
            dim += len(shape) - sum(j is not None and j is not Ellipsis for j in index)
        else:
            name, dim = "SelectBackward0", dim + 1
    return name


getitem.grad_name_of = _getitem_node


@op("index", method=False, function=False)
def index(xp, input, index):
    """``input[index]`` with tensor, list or boolean indices: a copy (NumPy's layout rules,
    which are torch's)."""
    _check_basic(index)
    if type(index) is np.ndarray and index.dtype == np.bool_ and index.shape == input.shape:
        from .._C import kernels as _C
        out = _C.mask_select(input, index)
        if out is not None:
            return out
    return input[index]


@index.vjp()
def _(g, input, index):
    return _index_embed(g, tuple(input.shape), index, True)


def _index_embed(g, shape, index, accumulate=False):
    from .shape import _index_embed as embed
    return embed(g, shape, index, accumulate)


def put_values(out, index, values):
    """``out[index] = values``, with torch's error where ``values`` does not broadcast."""
    try:
        out[index] = values
    except ValueError:
        target, got = list(out[index].shape), list(getattr(values, "shape", ()))
        if is_basic(index):     # NOTE: torch words a basic-index write as an expand (copy_)
            for d in range(1, min(len(target), len(got)) + 1):
                if got[-d] not in (1, target[-d]):
                    raise RuntimeError(
                        f"The expanded size of the tensor ({target[-d]}) must match the "
                        f"existing size ({got[-d]}) at non-singleton dimension "
                        f"{len(target) - d}.  Target sizes: {target}.  Tensor sizes: {got}"
                    ) from None
        raise RuntimeError(f"shape mismatch: value tensor of shape {got} cannot be broadcast "
                           f"to indexing result of shape {target}") from None


@op("_index_put", tags=("autocast_promote_cuda",), method=False, function=False, promote="common",
    promote_args=(0, 1))
def _index_put(xp, input, values, index, accumulate=False):
    out = input.copy()
    write_at(xp, out, index, values, accumulate)
    return out


def write_at(xp, out, index, values, accumulate):
    """``out[index] = values`` in place, or ``+=`` with repeated indices adding up."""
    if accumulate:
        add_at(xp, out, index, values)
    else:
        put_values(out, index, values)


@_index_put.vjp()
def _(g, input, values, index, accumulate=False):
    gi = g if accumulate else g.clone()
    if not accumulate:
        gi[index] = 0
    # values is not saved, so it arrives as a TensorMeta (shape/dtype), or as a number
    gv = g[index] if hasattr(values, "shape") else None
    return gi, gv


def split_ints(index):
    """``(first, then)`` indices to apply one after the other, or None where one step is right.

    NOTE: torch applies integer indices first (as ``select``) and the tensor indices to what
    remains; NumPy counts an int beside an array as one more advanced index, which moves the
    result's dimensions elsewhere: ``x[0, :, [1, 2]]`` of a 4x5x6 ``x`` is 5x2 in torch, 2x5 in
    NumPy. 0-dim integer tensors count as ints, as in torch.
    """
    if type(index) is not tuple or not any(_is_int(i) for i in index):
        return None
    first, then = [], []
    for i in index:
        if i is None:
            then.append(None)
        elif i is Ellipsis:
            first.append(i)
            then.append(i)
        elif _is_int(i):
            first.append(int(i))
        elif isinstance(i, slice):
            first.append(i)
            then.append(slice(None))
        else:
            first += [slice(None)] * (i.ndim if i.dtype == np.bool_ else 1)
            then.append(i)
    return tuple(first), tuple(then)


def _is_int(i):
    if isinstance(i, (int, np.integer)):
        return not isinstance(i, (bool, np.bool_))
    return getattr(i, "ndim", None) == 0 and i.dtype.kind in "iu"


def index_error(shape, index):
    """torch's IndexError for an ``index`` that does not fit ``shape``, or None. Called only
    once indexing failed, so the common path pays nothing for torch's wording."""
    items = index if type(index) is tuple else (index,)
    arrays = [i.get() if hasattr(i, "get") else np.asarray(i) for i in items]
    used = sum(0 if i is None or i is Ellipsis else a.ndim if a.dtype == np.bool_ else 1
               for i, a in zip(items, arrays))
    if used > len(shape):
        return IndexError(f"too many indices for tensor of dimension {len(shape)}")
    d = adv = 0         # dimension of the input; torch numbers tensor indices' dims apart
    for i, a in zip(items, arrays):
        if i is None or isinstance(i, slice):
            d += i is not None
        elif i is Ellipsis:
            d += len(shape) - used
        elif a.dtype == np.bool_:
            for k in range(a.ndim):
                if a.shape[k] != shape[d + k]:
                    return IndexError(f"The shape of the mask {list(a.shape)} at index {k} does "
                                      f"not match the shape of the indexed tensor {list(shape)} "
                                      f"at index {d + k}")
            d, adv = d + a.ndim, adv + a.ndim
        else:
            # (min and max first, cheaper than the masks and the gather, for indices that are
            # almost always in range)
            fits = a.dtype.kind in "iu" and (a.size == 0 or (
                int(a.max()) < shape[d] and int(a.min()) >= -shape[d]))
            bad = None if fits else a[(a >= shape[d]) | (a < -shape[d])]
            if bad is not None and bad.size:
                where = d if isinstance(i, (int, np.integer)) else adv
                return IndexError(f"index {int(bad.ravel()[0])} is out of bounds for dimension "
                                  f"{where} with size {shape[d]}")
            d, adv = d + 1, adv + 1
    shapes = [(int(a.sum()),) if a.dtype == np.bool_ else a.shape for i, a in zip(items, arrays)
              if not (i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer)))]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        return IndexError("shape mismatch: indexing tensors could not be broadcast together with "
                          "shapes " + ", ".join(str(list(s)) for s in shapes))
    return None


_BASIC = frozenset((int, slice, type(None), type(Ellipsis)))


def is_basic(index):
    """Whether an index holds only ints (not bools), slices, None and Ellipsis. (The exact
    types by one set lookup first: ``x[:, 0]`` asks this on every call.)"""
    for i in (index if isinstance(index, tuple) else (index,)):
        t = type(i)
        if t not in _BASIC and (t is bool or not isinstance(i, (int, slice))):
            return False
    return True


@op("gather")
def gather(xp, input, dim, index, *, sparse_grad=False):
    """``out[i][j] = input[i][index[i][j]]`` along ``dim``."""
    if index.dtype.char not in "lq":       # (int64: a comparison with the type costs more)
        raise RuntimeError("gather(): Expected dtype int64 for index")
    if (out := _C.gather(input, dim, index)) is not None:
        return out
    pos = scatter_positions(xp, input.shape, dim, index)      # (raises for a bad index)
    return xp.take(xp.ascontiguousarray(input).reshape(-1), pos)


def added_into_zeros(g, shape, dim, index, rows=False):
    """``g`` added at ``index`` along ``dim`` into zeros of ``shape`` (scatter_add; with
    ``rows``, index_add) by the C scatter, or None: the gradient of gather and index_select
    where nothing differentiates it (no zeros filled, then copied, first)."""
    from .._tensor import Tensor
    from .nn import kernel_grads
    if (arrays := kernel_grads(g)) is not None and _C.scatter(
            out := np.empty(shape, g.dtype.np), dim, index._data, arrays[0], 1, None, rows=rows):
        return Tensor._wrap(out)
    return None


@gather.vjp(save=("index",))
def _(g, input, dim, index, *, sparse_grad=False):
    if (out := added_into_zeros(g, input.shape, dim, index)) is not None:
        return out
    return ember.zeros(input.shape, dtype=g.dtype, device=g.device).scatter_add(dim, index, g)


gather.samples = lambda dev, dt: [Sample(make((3, 4), dt), 1, np.array([[0, 0], [1, 3],
                                                                         [2, 1]])),
                                  Sample(make((3, 4, 2), dt), -2, np.array([[[0], [3]]]))]


def scatter_positions(xp, shape, dim, index):
    """The flat (C-order) positions of ``out[i][index[i][j]]`` along ``dim`` in an array of
    ``shape`` (gather/scatter): ``index`` times the stride of ``dim`` plus the other dims'
    offsets. One flat index rather than a grid per dim, as NumPy's 1-D take, put and ufunc.at
    run faster; an index outside ``[0, size)`` raises torch's error (a flat position
    would silently land in another row)."""
    shape = tuple(shape) or (1,)        # NOTE: torch takes 0-dim tensors as 1-dim here
    if not -len(shape) <= dim < len(shape):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-len(shape)}, {len(shape) - 1}], but got {dim})")
    d = dim % len(shape)
    n = shape[d]
    if max(index.ndim, 1) != len(shape):
        raise RuntimeError(f"Index tensor must have the same number of dimensions as input "
                           f"tensor (got {index.ndim} and {len(shape)})")
    for k, m in enumerate(index.shape):
        if k != d and m > shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected index "
                               f"{list(index.shape)} to be no larger than self {list(shape)} "
                               f"apart from dimension {d}")
    index = index.astype(np.int64, copy=False)
    _check_bounds(index, n, d, RuntimeError, negative=False)
    stride = math.prod(shape[d + 1:])
    offset = 0
    for k, m in enumerate(index.shape):
        if k != d and m > 1:
            step = math.prod(shape[k + 1:])
            offset = offset + xp.arange(0, m * step, step).reshape(
                (1,) * k + (m,) + (1,) * (index.ndim - k - 1))
    return (index * stride if stride != 1 else index) + offset


def _capturing(index):
    """Whether ``index`` is a GPU array and a CUDA graph capture is underway.

    NOTE: a capture runs nothing, so the bounds checks are skipped then (an index out of
    range in a captured graph is not caught, where torch's kernels assert on the device)."""
    if isinstance(index, np.ndarray):
        return False
    from ..cuda.graphs import is_current_stream_capturing
    return is_current_stream_capturing()


def check_range(index, n, error, negative=False):
    """Raise ``error(bad)``, the exception for ``bad``, the first index outside ``[0, n)``
    (``[-n, n)`` with ``negative``). A GPU index is checked on the device, as torch's
    kernels do: the error comes at the next copy to the host (``cuda._runtime``)."""
    if type(index) is np.ndarray and 0 < index.size <= 64:
        lo, hi = bounds(index)
        if hi >= n or lo < (-n if negative else 0):
            raise error(next(i for i in index.reshape(-1).tolist() if i >= n or
                             i < (-n if negative else 0)))
        return
    if index.size == 0 or _capturing(index):
        return
    if not isinstance(index, np.ndarray):
        from .._backends import array_module
        from ..cuda._runtime import device_check
        device_check(array_module(index), (index >= n) | (index < (-n if negative else 0)),
                     index, error)
    # ([-n, n) as [0, 2n) after adding n: one reduction; a narrower index could overflow)
    elif (index.dtype != np.int64 or out_of_range(index + n, 2 * n)) if negative else \
            out_of_range(index, n):
        bad = index[(index >= n) | (index < (-n if negative else 0))]
        if bad.size:
            raise error(int(bad.ravel()[0]))


def bounds(index):
    """``(min, max)`` of a NumPy integer array, ``(0, 0)`` when empty. (A small one as a list:
    Python's min and max cost a fraction of NumPy's reductions, most of a small op's time.)"""
    if index.size <= 64:
        v = (index if index.ndim == 1 else index.reshape(-1)).tolist()     # (1-D: no reshape)
        return (min(v), max(v)) if v else (0, 0)
    return int(index.min()), int(index.max())


def _check_bounds(index, size, dim, exc=IndexError, prefix="", negative=True):
    """torch's error for an index outside ``[-size, size)`` (``[0, size)`` for gather/scatter,
    which take no negative indices)."""
    check_range(index, size, lambda bad: exc(f"{prefix}index {bad} is out of bounds for "
                                             f"dimension {dim} with size {size}"), negative)


def take_rows(x, index, dim=0, wrap=False):
    """``x``'s slices along ``dim`` at the int64 ``index`` (any shape) by gather.h's
    take_rows, rows copied over threads (NumPy's take runs on one), negative indices counted
    from the end where ``wrap``; None where it does not apply or an index is out of range (the
    caller's NumPy path then raises torch's error). index_select, take and embedding."""
    if type(x) is not np.ndarray or type(index) is not np.ndarray or \
            index.dtype != np.int64 or x.dtype.kind not in "fiu" or \
            not (fn := _C.kernel("take_rows", _C._WORDS.get(x.itemsize, x.dtype))):
        return None
    x, i = _C.contiguous(x), _C.contiguous(index)
    out = np.empty(x.shape[:dim] + i.shape + x.shape[dim + 1:], x.dtype)
    return None if fn(_C.ptr(x), _C.ptr(i), _C.ptr(out), math.prod(x.shape[:dim]),
                      x.shape[dim], i.size, math.prod(x.shape[dim + 1:]), int(wrap),
                      _C.num_threads()) else out


@op("index_select")
def index_select(xp, input, dim, index):
    """The slices of ``input`` at ``index`` along ``dim``."""
    if input.ndim == 0:
        wrap_dim(dim, 0)
        if index.size != 1:
            raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got "
                               f"{index.size} value(s)")
        return xp.take(input.reshape(1), index.reshape(()))
    if input.ndim == 1 and index.ndim == 1:
        # a 1-D index_select is a gather: the C kernel splits it over the threads (np.take
        # runs on one) and checks the indices as it follows them
        if (out := _C.gather(input, dim, index)) is not None:
            return out
    elif index.ndim == 1 and (out := take_rows(input, index, wrap_dim(dim, input.ndim))) \
            is not None:
        return out
    n = input.shape[dim]
    # (take would wrap negatives) NOTE: torch words it by the dim: along dim 0 as an
    # embedding lookup
    check_range(index, n, (lambda bad: IndexError("index out of range in self")) if
                dim % input.ndim == 0 else lambda bad: RuntimeError(
                    f"INDICES element is out of DATA bounds, id={bad} axis_dim={n}"))
    return input.take(index.reshape(-1) if index.ndim == 0 else index, axis=dim)  # 0-d: 1 row


def out_of_range(index, n):
    """Whether an integer array holds an index outside ``[0, n)``, in one reduction: seen as
    unsigned, a negative index is past any ``n``. (A GPU index's answer waits for the GPU:
    ``check_range`` does not.)"""
    return index.size > 0 and not _capturing(index) and \
        int(index.view(index.dtype.str.replace("i", "u")).max()) >= n


@index_select.vjp(save=("index",))
def _(g, input, dim, index):
    index = index.reshape(-1) if index.dim() == 0 else index
    if (out := added_into_zeros(g, input.shape, dim, index, True)) is not None:
        return out
    return ember.zeros(input.shape, dtype=g.dtype, device=g.device).index_add(dim, index, g)


index_select.samples = lambda dev, dt: [Sample(make((4, 3), dt), 0, np.array([0, 2, 2])),
                                        Sample(make((5,), dt), 0, np.array([4, 0, 0, 3]))]
index_select.errors = [
    ErrorSample(Sample(const(5), 0, np.array([0, -1])), IndexError, "index out of range in self"),
    ErrorSample(Sample(const(5), 0, np.array([5])), IndexError, "index out of range in self"),
    ErrorSample(Sample(const(3, 4), 1, np.array([-2])), RuntimeError,
                "INDICES element is out of DATA bounds, id=-2 axis_dim=4"),
    ErrorSample(Sample(const(3, 4), 0, np.array([3])), IndexError, "index out of range in self")]


@op("masked_fill", inplace=True)
def masked_fill(xp, input, mask, value):
    """``input`` with ``value`` where the bool ``mask`` (broadcast) is True."""
    if mask.dtype != np.bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{mask.dtype}")
    v = value.astype(input.dtype) if hasattr(value, "astype") else value
    # (par_where's own checks cost more than NumPy's where of a few hundred elements)
    out = (par_where if xp is np and max(input.size, mask.size) >= PAR_MIN else xp.where)(
        mask, v, input)
    if out.shape != input.shape:
        raise RuntimeError(f"masked_fill: the mask shape {list(mask.shape)} does not broadcast "
                           f"to the input shape {list(input.shape)}")
    return out.astype(input.dtype, copy=False)


@masked_fill.vjp(save=("mask",))
def _(g, input, mask, value):
    gv = g.masked_fill(~mask, 0).sum() if hasattr(value, "shape") else None   # tensor value
    return g.masked_fill(mask, 0), None, gv


masked_fill.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), make((3, 4), ember.bool, seed=3), 0.5 if dt.category >= 2 else 1),
    Sample(make((3, 4), dt), make((4,), ember.bool, seed=4), np.asarray(2, dt.np))] \
    if dt.category >= 1 else []
masked_fill.grad_name_of = overload_if_tensor("masked_fill", 2, "value")


def _repeat_dims(sizes, shape):
    """``shape`` with 1s for ``sizes``' new leading dims, and the dims ``sizes`` repeats."""
    return (1,) * (len(sizes) - len(shape)) + tuple(shape), [
        i for i, r in enumerate(sizes) if r > 1]


@op("repeat", function=False)
def repeat(xp, input, *sizes):
    """Tile ``input`` ``sizes[i]`` times along each dimension (leading new dims allowed)."""
    if not sizes:
        raise TypeError('repeat() missing 1 required positional arguments: "repeats"')
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    if len(sizes) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    full, d = _repeat_dims(sizes, input.shape)
    if xp is np and len(d) == 1 and input.size >= PAR_MIN // 2 and _C.num_threads() > 1 and (
            pl := _C.parloop()):
        # parloop.h's tile_loop: one pass over threads, each source row segment read once for
        # all its copies (numpy.tile's repeat copies on one thread: tile's (838, 1257) by 2 at
        # two threads, wall, 1.65 -> 1.09x torch)
        pre, r = math.prod(full[:d[0]]), sizes[d[0]]
        out, dt = np.empty((pre, r, input.size // pre), input.dtype), (input.dtype,) * 2
        spec = np.array([r, out.strides[1], input.itemsize])
        if par_run(pl[8], spec.ctypes.data, (input.reshape(pre, -1),), dt, out[:, 0]) is not None:
            return out.reshape([r * n for r, n in zip(sizes, full)])
    return xp.tile(input, sizes) if input.ndim or sizes else input.copy()


@repeat.vjp()
def _(g, input, *sizes):
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    shape = tuple(input.shape)
    full, d = _repeat_dims(sizes, shape)
    split = [v for r, s in zip(sizes, full) for v in (r, s)]
    if len(d) == 1 and sizes[d[0]] <= 8 and type(g._data) is np.ndarray and \
            _C.num_threads() > 1 and _C.parloop():
        # the copies added in turn to 0 (-0.0 + -0.0 is 0, as torch's and NumPy's sums), as
        # NumPy's sum along a middle axis adds them: a pass over threads each (that sum is one
        # slow NumPy pass: tile's (838, 2514) at two threads 410 -> 230-300 us; on one, NumPy's
        # add of strided halves is slower than its sum)
        parts = g.reshape(split).unbind(2 * d[0])
        return functools.reduce(operator.add, parts, 0.0).reshape(shape)
    return g.reshape(split).sum(tuple(range(0, 2 * len(sizes), 2))).reshape(shape)


repeat.samples = lambda dev, dt: [Sample(make((2, 3), dt), 2, 1), Sample(make((3,), dt),
                                  (2, 2, 1))]


@op("repeat_interleave")
def repeat_interleave(xp, input, repeats, dim=None, *, output_size=None):
    """Repeat each element ``repeats`` times (an int or a per-element int tensor)."""
    if dim is None:
        input, dim = input.reshape(-1), 0
    return xp.repeat(input, repeats, axis=dim)


@repeat_interleave.vjp(save=("repeats",))
def _(g, input, repeats, dim=None, *, output_size=None):
    d = 0 if dim is None else dim % len(input.shape)
    n = input.shape[d] if dim is not None else input.numel()
    gg = g.reshape(-1) if dim is None else g
    if not isinstance(repeats, ember.Tensor):   # (an input's copies side by side: summed)
        shape = tuple(gg.shape)
        return gg.reshape(shape[:d] + (n, repeats) + shape[d + 1:]).sum(d + 1).reshape(
            input.shape), None
    idx = ember.arange(n, device=g.device).repeat_interleave(repeats)
    z = ember.zeros((n,) + tuple(gg.shape[d + 1:]) if dim is None else
                    tuple(input.shape), dtype=g.dtype, device=g.device)
    return z.index_add(d, idx, gg).reshape(input.shape), None


def _repeat_interleave_meta(input, repeats, dim=None, *, output_size=None):
    if hasattr(repeats, "shape") and output_size is None:
        raise NotImplementedError("repeat_interleave: the output size depends on the values of "
                                  "repeats; pass output_size on the meta device")
    n = (input.size if dim is None else input.shape[dim]) * (repeats if isinstance(
        repeats, int) else 1)
    shape = (output_size or n,) if dim is None else \
        input.shape[:dim % input.ndim] + (output_size or n,) + input.shape[dim % input.ndim + 1:]
    return empty(shape, input.dtype)


repeat_interleave.meta = _repeat_interleave_meta
repeat_interleave.samples = lambda dev, dt: [Sample(make((2, 3), dt), 2),
                                             Sample(make((2, 3), dt), 3, 1),
                                             Sample(make((3,), dt), np.array([1, 0, 2]), 0)]
repeat_interleave.grad_name_of = lambda input, repeats, *_: \
    "IndexSelectBackward0" if hasattr(repeats, "_data") else "ViewBackward0"

for _d in (gather, getitem, index, index_select, repeat, repeat_interleave, _index_put):
    # (forward mode: linear)
    _d.jvp = LINEAR
masked_fill.jvp = linear_with("value")
