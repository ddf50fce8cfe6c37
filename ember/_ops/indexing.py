"""Indexing: ``t[idx]`` reads and writes, gather/scatter, index_add, flip, scans."""
import math

import numpy as np

import ember

from .._C import kernels as _C
from .._backends import add_at, add_flat, grid, multiply_at
from .meta import empty, wrap_dim
from .registry import op
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
            # (min and max first: the masks and the gather cost ~2x as much on 1M indices,
            # which are almost always in range)
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
    if index.dtype != np.int64:
        raise RuntimeError("gather(): Expected dtype int64 for index")
    kernel = _C.along_dim("gather", input, dim, index)
    if kernel is not None:
        out = np.empty(index.shape, input.dtype)
        if not kernel(input, out):
            return out
    pos = scatter_positions(xp, input.shape, dim, index)      # (raises for a bad index)
    return xp.take(xp.ascontiguousarray(input).reshape(-1), pos)


@gather.vjp(save=("index",))
def _(g, input, dim, index, *, sparse_grad=False):
    from .._tensor import Tensor
    from .nn import kernel_grads
    arrays = kernel_grads(g)                # nothing differentiates it: add into fresh zeros
    if arrays is not None:
        out = np.empty(input.shape, g.dtype.np)
        kernel = _C.along_dim("scatter", out, dim, index._data)
        if kernel is not None and not kernel(out, arrays[0], 1, None):
            return Tensor._wrap(out)
    return ember.zeros(input.shape, dtype=g.dtype, device=g.device).scatter_add(dim, index, g)


gather.samples = lambda dev, dt: [Sample(make((3, 4), dt), 1, np.array([[0, 0], [1, 3],
                                                                         [2, 1]])),
                                  Sample(make((3, 4, 2), dt), -2, np.array([[[0], [3]]]))]


def scatter_positions(xp, shape, dim, index):
    """The flat (C-order) positions of ``out[i][index[i][j]]`` along ``dim`` in an array of
    ``shape`` (gather/scatter): ``index`` times the stride of ``dim`` plus the other dims'
    offsets. One flat index rather than a grid per dim, as NumPy's 1-D take, put and ufunc.at
    run 2-6x faster; an index outside ``[0, size)`` raises torch's error (a flat position
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
    if out_of_range(index, n):
        bad = index[(index < 0) | (index >= n)].ravel()[0]
        raise RuntimeError(f"index {int(bad)} is out of bounds for dimension {d} with size {n}")
    stride = math.prod(shape[d + 1:])
    offset = 0
    for k, m in enumerate(index.shape):
        if k != d and m > 1:
            step = math.prod(shape[k + 1:])
            offset = offset + xp.arange(0, m * step, step).reshape(
                (1,) * k + (m,) + (1,) * (index.ndim - k - 1))
    return (index * stride if stride != 1 else index) + offset


def _scatter_into(xp, input, dim, index, src, reduce):
    """A copy of ``input`` with ``src`` written at ``index`` along ``dim``."""
    if not hasattr(src, "shape"):
        src = xp.full(index.shape, src, dtype=input.dtype)
    else:
        src = src[tuple(slice(0, s) for s in index.shape)]
    out = xp.empty(input.shape, input.dtype) if xp is np else input.copy()
    kernel = _C.along_dim("scatter", out, dim, index) \
        if reduce in (None, "add", "sum") and src.dtype == out.dtype else None
    if kernel is not None and not kernel(out, src, reduce is not None, input):
        return out          # (the kernel copied input into out, a slice per thread)
    if xp is np:
        out[...] = input
    pos = scatter_positions(xp, out.shape, dim, index)        # (raises for a bad index)
    flat = out.reshape(-1)
    if reduce is None:
        flat[pos] = src
    elif reduce in ("add", "sum"):         # NOTE: np.add.at is fast on 1-D arrays only
        add_at(xp, flat, pos.reshape(-1), src.reshape(-1))
    elif reduce in ("multiply", "prod"):
        multiply_at(xp, flat, pos.reshape(-1), src.reshape(-1))
    else:
        raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    return out


@op("scatter", inplace=True)
def scatter(xp, input, dim, index, src, *, reduce=None):
    """A copy of ``input`` with ``src`` written at ``index`` along ``dim``."""
    return _scatter_into(xp, input, dim, index, src, reduce)


@scatter.vjp(save=("index",))
def _(g, input, dim, index, src, *, reduce=None):
    if reduce is not None:
        raise RuntimeError("derivative for aten::scatter is not implemented")   # as in torch
    gi = g.scatter(dim, index, 0.0)
    gs = src_grad(g.gather(dim, index), src) if hasattr(src, "shape") else None   # or a number
    return gi, None, None, gs


def src_grad(gs, src):
    """The gradient of a scatter's ``src`` from ``gs`` of the index's shape: scatter reads only
    the leading ``index.shape`` block of ``src``, the rest gets zeros."""
    if tuple(gs.shape) == tuple(src.shape):
        return gs
    from .shape import _index_embed
    return _index_embed(gs, tuple(src.shape), tuple(slice(0, n) for n in gs.shape))


def _scatter_samples(dev, dt, reduces=(None,)):
    x, i = make((3, 4), dt), np.array([[0, 1, 2, 0], [2, 0, 1, 1]])
    out = [Sample(x, 0, i, make((2, 4), dt, seed=1), **({"reduce": r} if r else {}))
           for r in reduces]
    return out + [Sample(x, 1, np.array([[3, 0], [1, 2], [0, 0]])[:, :1], make((3, 2), dt,
                                                                               seed=2))]


scatter.samples = lambda dev, dt: _scatter_samples(dev, dt) + [
    Sample(make((3, 4), dt), -1, np.array([[2], [0], [3]]), 2)] + [
    s.forward_only() for s in _scatter_samples(dev, dt, ("add", "multiply"))[:2]]


@op("scatter_add", tags=("autocast_promote_cuda",), inplace=True)
def scatter_add(xp, input, dim, index, src):
    """A copy of ``input`` with ``src`` added at ``index`` along ``dim``."""
    return _scatter_into(xp, input, dim, index, src, "add")


@scatter_add.vjp(save=("index",))
def _(g, input, dim, index, src):
    return g, None, None, src_grad(g.gather(dim, index), src)


scatter_add.samples = _scatter_samples


@op("index_add", inplace=True, promote="common", promote_args=(0, 3))
def index_add(xp, input, dim, index, source, *, alpha=1):
    """A copy of ``input`` with ``alpha * source`` added at ``index`` along ``dim``."""
    out = input.copy()
    if out.ndim == 0:               # (the one element, at index 0 of dim 0 or -1)
        wrap_dim(dim, 0)
        if getattr(source, "shape", ()) != ():
            raise RuntimeError(f"source tensor shape must match self tensor shape, excluding "
                               f"the specified dimension. Got self.shape = [] source.shape = "
                               f"{list(source.shape)}")
        _add_along(xp, out.reshape(1), index.reshape(-1), source * alpha, 0, 1)
        return out
    moved = xp.moveaxis(out, dim, 0)
    _add_along(xp, moved, index, xp.moveaxis(source * alpha if alpha != 1 else source, dim, 0),
               dim % out.ndim, out.ndim)
    return out


def _check_bounds(index, size, dim, exc=IndexError, prefix="", negative=True):
    """torch's error for an index outside ``[-size, size)`` (``[0, size)`` for gather/scatter,
    which take no negative indices)."""
    if index.size:
        bad = index[(index >= size) | (index < (-size if negative else 0))]
        if bad.size:
            raise exc(f"{prefix}index {int(bad.ravel()[0])} is out of bounds for dimension "
                      f"{dim} with size {size}")


def _add_along(xp, out, index, values, dim, ndim):
    """``out[index] += values`` along ``out``'s first dim (``dim`` of an ``ndim``-dim input)
    with index_add's bounds: no negative indices, torch's error for its input's rank."""
    if xp is np and add_flat(out, index, values):   # (the kernel checks every index first)
        return
    n = out.shape[0]
    if ndim > 1:
        _check_bounds(index, n, dim, RuntimeError, negative=False)
    elif index.size and bool(((index < 0) | (index >= n)).any()):
        # NOTE: torch's 1-D index_add words it as an embedding lookup
        raise IndexError("index out of range in self")
    add_at(xp, out, index, values)


@index_add.vjp(save=("index",))
def _(g, input, dim, index, source, *, alpha=1):
    gs = g.index_select(dim, index)
    return g, None, None, gs * alpha if alpha != 1 else gs


index_add.samples = lambda dev, dt: [
    Sample(make((4, 3), dt), 0, np.array([0, 2, 2]), make((3, 3), dt, seed=1)),
    Sample(make((2, 3, 4), dt), -1, np.array([3, 0]), make((2, 3, 2), dt, seed=2), alpha=2)]
index_add.errors = [
    ErrorSample(Sample(const(3, 4), 0, np.array([0, 3]), const(2, 4)), RuntimeError,
                "index 3 is out of bounds for dimension 0 with size 3"),
    ErrorSample(Sample(const(3, 4), 1, np.array([-1]), const(3, 1)), RuntimeError,
                "index -1 is out of bounds for dimension 1 with size 4"),
    ErrorSample(Sample(const(5), 0, np.array([0, 5]), const(2)), IndexError,
                "index out of range in self")]


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
        kernel = _C.along_dim("gather", input, dim, index)
        if kernel is not None:
            out = np.empty(index.shape, input.dtype)
            if not kernel(input, out):
                return out
    n = input.shape[dim]
    if out_of_range(index, n):                      # (take would wrap negatives)
        # NOTE: torch words it by the dim: along dim 0 as an embedding lookup
        if dim % input.ndim == 0:
            raise IndexError("index out of range in self")
        bad = (index < 0) | (index >= n)
        raise RuntimeError(f"INDICES element is out of DATA bounds, id={int(index[bad][0])} "
                           f"axis_dim={n}")
    return input.take(index, axis=dim)


def out_of_range(index, n):
    """Whether an integer array holds an index outside ``[0, n)``, in one reduction: seen as
    unsigned, a negative index is past any ``n``."""
    return index.size > 0 and int(index.view(index.dtype.str.replace("i", "u")).max()) >= n


@index_select.vjp(save=("index",))
def _(g, input, dim, index):
    z = ember.zeros(input.shape, dtype=g.dtype, device=g.device)
    return z.index_add(dim, index, g)


index_select.samples = lambda dev, dt: [Sample(make((4, 3), dt), 0, np.array([0, 2, 2])),
                                        Sample(make((5,), dt), 0, np.array([4, 0, 0, 3]))]
index_select.errors = [
    ErrorSample(Sample(const(5), 0, np.array([0, -1])), IndexError, "index out of range in self"),
    ErrorSample(Sample(const(5), 0, np.array([5])), IndexError, "index out of range in self"),
    ErrorSample(Sample(const(3, 4), 1, np.array([-2])), RuntimeError,
                "INDICES element is out of DATA bounds, id=-2 axis_dim=4"),
    ErrorSample(Sample(const(3, 4), 0, np.array([3])), IndexError, "index out of range in self")]


@op("flip")
def flip(xp, input, dims):
    """Reverse the order along ``dims`` (a copy, as in torch)."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if input.ndim == 0:
        for d in dims:
            wrap_dim(d, 0)
        return input.copy()
    if len(dims) == 1 and -input.ndim <= dims[0] < input.ndim:
        # one dim (an image's horizontal flip): a reversed slice, copied; np.flip's argument
        # checks cost more than the copy of a small array
        return input[(slice(None),) * (dims[0] % input.ndim) + (slice(None, None, -1),)].copy()
    return xp.ascontiguousarray(xp.flip(input, dims)) if dims else input.copy()


flip.vjp()(lambda g, input, dims: g.flip(dims))
flip.samples = lambda dev, dt: [Sample(make((3, 4), dt), (0,)), Sample(make((3, 4), dt), [0, 1])]


def _scan_dtype(x, dtype):
    if dtype is not None:
        return dtype.np
    return np.int64 if x.dtype.kind in "biu" else x.dtype


def _scan_kernel(x, axis, prod, reverse=False):
    """The scan of the NumPy array ``x`` along ``axis`` by the C kernel, or None where none
    applies (not float32/float64, or the library is not there)."""
    from .._C import kernels as _C
    fn = _C.kernel("scan", x.dtype) if type(x) is np.ndarray and x.size else None
    if fn is None:
        return None
    x = _C.contiguous(x)
    out = np.empty(x.shape, x.dtype)
    n = x.shape[axis]
    outer = math.prod(x.shape[:axis])
    fn(x.ctypes.data, out.ctypes.data, outer, n, x.size // max(outer * n, 1), prod, reverse,
       _C.num_threads())
    return out


def _scan(xp, input, dim, dtype, prod):
    out_dtype = _scan_dtype(input, dtype)
    if not input.ndim:
        return input.astype(out_dtype)
    axis = dim % input.ndim
    if input.dtype == out_dtype:
        out = _scan_kernel(input, axis, prod)
        if out is not None:
            return out
    return (xp.cumprod if prod else xp.cumsum)(input, axis=axis, dtype=out_dtype)


def _reversed_cumsum(g, dim):
    """``g.flip(dim).cumsum(dim).flip(dim)``: by the kernel in one pass where nothing will
    differentiate it (see nn.kernel_grads), else in ember ops."""
    from .._tensor import Tensor
    from .nn import kernel_grads
    arrays = kernel_grads(g)
    out = _scan_kernel(arrays[0], dim % g.dim(), 0, True) if arrays else None
    if out is not None:
        return Tensor._wrap(out)
    return g.flip(dim).cumsum(dim).flip(dim)


@op("cumsum", tags=("autocast_fp32_cuda",), inplace=True)
def cumsum(xp, input, dim, *, dtype=None):
    """Running sum along ``dim``."""
    return _scan(xp, input, dim, dtype, 0)


cumsum.vjp()(lambda g, input, dim, *, dtype=None: _reversed_cumsum(g, dim) if g.dim() else g)
cumsum.samples = lambda dev, dt: [Sample(make((3, 4), dt), 1), Sample(make((3, 4), dt), 0),
                                  Sample(make((5,), dt), -1)]


@op("cumprod", tags=("autocast_fp32_cuda",), inplace=True)
def cumprod(xp, input, dim, *, dtype=None):
    """Running product along ``dim``."""
    return _scan(xp, input, dim, dtype, 1)


@cumprod.vjp(save=("input", "result"))
def _(g, input, dim, *, dtype=None, result=None):
    if not bool((input == 0).any()):
        return _reversed_cumsum(g * result.conj(), dim) / input.conj()
    # With zeros, prod/x fails: d out_j / d x_i = prod_{k <= j, k != i} x_k for i <= j, built
    # densely along dim ([..., i, j, k]); scans are short in practice.
    n = input.shape[dim]
    x, gm = input.movedim(dim, -1), g.movedim(dim, -1)
    ar = ember.arange(n, device=g.device)
    i, j, k = ar.view(n, 1, 1), ar.view(1, n, 1), ar.view(1, 1, n)
    m = ember.where((k <= j) * (k != i), x[..., None, None, :], 1.0).prod(-1)
    m = ember.where(i[..., 0] <= j[..., 0], m, 0.0)
    return (m.conj() * gm[..., None, :]).sum(-1).movedim(-1, dim)


cumprod.samples = lambda dev, dt: [Sample(make((3, 4), dt, 0.5, 1.5), 1),
                                   Sample(make((5,), dt), 0)]


@op("masked_fill", inplace=True)
def masked_fill(xp, input, mask, value):
    """``input`` with ``value`` where the bool ``mask`` (broadcast) is True."""
    if mask.dtype != np.bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{mask.dtype}")
    v = value.astype(input.dtype) if hasattr(value, "astype") else value
    out = xp.where(mask, v, input)
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


@op("repeat", function=False)
def repeat(xp, input, *sizes):
    """Tile ``input`` ``sizes[i]`` times along each dimension (leading new dims allowed)."""
    if not sizes:
        raise TypeError('repeat() missing 1 required positional arguments: "repeats"')
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    if len(sizes) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    return xp.tile(input, sizes) if input.ndim or sizes else input.copy()


@repeat.vjp()
def _(g, input, *sizes):
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    shape = tuple(input.shape)
    lead = len(sizes) - len(shape)
    full = (1,) * lead + shape
    split = []
    for r, s in zip(sizes, full):
        split += [r, s]
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
    reps = repeats if isinstance(repeats, ember.Tensor) else ember.full((n,), repeats)
    idx = ember.arange(n, device=g.device).repeat_interleave(reps)
    gg = g.reshape(-1) if dim is None else g
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
