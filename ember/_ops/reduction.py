"""Reductions: sums and means, products, extrema, moments, norms, counts."""
import builtins
import math
import sys
import warnings

import numpy as np

import ember

from .._C import kernels as _C
from .dispatch import quick_view
from .meta import empty, reduce_dims, reduce_shape
from .pointwise import PAR_MIN, par_reduce, type_name
from .tangents import LINEAR, REDUCTION, named, pointwise
from .registry import node_name, op, overload_if_given
from .samples import ErrorSample, Sample, const, dim_errors, make, reduce_samples
from .shape import expand as _expand


def _user_level():
    """The ``stacklevel`` of the first caller outside ember (its depth differs between the C
    and the Python dispatch)."""
    frame, level, root = sys._getframe(2), 2, ember.__file__.rpartition("/")[0]
    while frame is not None and frame.f_code.co_filename.startswith(root):
        frame, level = frame.f_back, level + 1
    return level


def _count(shape, dim):
    """How many elements each output of a reduction over ``dim`` gathers."""
    return math.prod(shape[a] for a in reduce_dims(dim, len(shape)))


def _keep(g, input, dim, keepdim):
    """Re-insert reduced dimensions into ``g`` so it broadcasts against ``input``."""
    if keepdim or g is None or len(input.shape) == 0:
        return g
    return g.reshape(reduce_shape(input.shape, dim, True))     # (one view, not one per dim)


def _reduce_meta(dtype_fn):
    def meta(input, dim=None, keepdim=False, *, dtype=None):
        return empty(reduce_shape(input.shape, dim, keepdim), dtype_fn(input, dtype))
    return meta


def _sum_dtype(x, dtype):
    if dtype is not None:
        return np.dtype(dtype.np)
    return np.dtype(np.int64) if x.dtype.kind in "biu" else x.dtype


def _accumulate(f, input, dim, keepdim, dtype):
    """``f(input, axis, keepdims, dtype)`` (a NumPy-style sum, mean, prod) over torch's ``dim``
    in the dtype torch gives the result."""
    # (axis None for all of it: NumPy reduces a tuple of every axis ~30% slower)
    kw = dict(axis=None if dim is None else reduce_dims(dim, input.ndim), keepdims=keepdim)
    dt = _sum_dtype(input, dtype)
    # NOTE: like torch, half and bfloat16 accumulate in float32 and round once at the end;
    # summing in the 8-bit mantissa loses most digits after a few hundred terms.
    if dt.itemsize == 2 and dt.kind in "fV":
        return f(input.astype(np.float32), **kw).astype(dt)
    return f(input, dtype=dt, **kw)

# ---- sums and means ------------------------------------------------------------------------


def _c_reduce(name, xp, input, dim, keepdim, dtype=None, min_size=_C._MIN_ROWS_KERNEL, c=0.0):
    """``_C.reduce`` (a row kernel over trailing or leading axes) of a float32/float64 NumPy
    input reduced in its own dtype; None where it does not apply."""
    if xp is not np or input.dtype.kind != "f" or input.dtype.itemsize < 4 or \
            dtype is not None and np.dtype(dtype.np) != input.dtype:
        return None
    return _C.reduce(name, input, reduce_dims(dim, input.ndim), keepdim, None, c, min_size)


def _sum_like(name, f, doc, complex_ok=True, tags=()):
    # (np.nansum is several passes behind Python: its kernel at any size)
    min_size = 1 if f == "nansum" else _C._MIN_ROWS_KERNEL

    def fwd(xp, input, dim=None, keepdim=False, *, dtype=None):
        # (_C.reduce refuses below min_size: no call, nor reduce_dims, for a small one)
        if input.size >= min_size and \
                (r := _c_reduce(f, xp, input, dim, keepdim, dtype, min_size)) is not None:
            return r
        if dim is None and dtype is None and f == "sum" and xp is np and \
                input.dtype.kind == "f" and input.dtype.itemsize > 2:
            return np.add.reduce(input, None, keepdims=keepdim)    # (loss.sum(): the same bits)
        if not complex_ok and input.dtype.kind == "c":
            raise RuntimeError(f"{name} does not support complex inputs")
        # (np.sum is Python around add.reduce: call that directly, as np.sum does)
        return _accumulate(np.add.reduce if f == "sum" and xp is np else getattr(xp, f), input,
                           dim, keepdim, dtype)
    fwd.__doc__ = doc
    d = op(name, tags=("reduction",) + tags)(fwd)
    d.meta, d.samples = _reduce_meta(_sum_dtype), _reduce_samples
    return d


def _reduce_samples(dev, dt):
    return reduce_samples(dev, dt) + [Sample(make((0, 3), dt), 1), Sample(make((0, 3), dt))] + \
        [Sample(make((3, 4), dt), 1, dtype=ember.float64)] * (dt.category < 3)


sum_ = _sum_like("sum", "sum", """Sum over ``dim`` (all dims or a tuple); integers and bools
    sum as int64, or as ``dtype``.

    Example:
        >>> ember.sum(ember.tensor([[1, 2], [3, 4]]), (0, 1), keepdim=True)
        tensor([[10]])
        >>> ember.tensor([True, True]).sum()
        tensor(2)
    """, tags=("autocast_fp32_cuda",))
nansum = _sum_like("nansum", "nansum", """Sum over ``dim`` treating nan as zero.

    Example:
        >>> ember.nansum(ember.tensor([1., float("nan"), 2.]))
        tensor(3.)
    """, complex_ok=False)


@sum_.vjp()
def _(g, input, dim=None, keepdim=False, *, dtype=None):
    # a full sum's 0-dim gradient expands as it is (no unsqueeze view per dim)
    return quick_view(_expand, g if g.dim() == 0 else _keep(g, input, dim, keepdim), input._shape)


sum_.errors = dim_errors() + [ErrorSample(Sample(const(3, 4), (0, -2)), RuntimeError,
                                          "dim 0 appears multiple times in the list of dims")]
sum_.grad_name_of = overload_if_given("sum", 1, "dim")


@nansum.vjp(save=("input",))
def _(g, input, dim=None, keepdim=False, *, dtype=None):
    return _keep(g, input, dim, keepdim) * input.isnan().logical_not()


def _float_input(name, input, dtype):
    if dtype is None and input.dtype.kind in "biu":
        raise RuntimeError(f"{name}(): could not infer output dtype. Input dtype must be either "
                           f"a floating point or complex dtype. Got: {type_name(input.dtype)}")


@op("mean", tags=("reduction",))
def mean(xp, input, dim=None, keepdim=False, *, dtype=None):
    """Mean over ``dim`` (floating and complex inputs, or with ``dtype``).

    Example:
        >>> ember.mean(ember.tensor([1, 2]), dtype=ember.float64)
        tensor(1.5000, dtype=torch.float64)
    """
    _float_input("mean", input, dtype)
    count = _count(input.shape, dim)
    if count == 0:          # nan, without NumPy's "Mean of empty slice"
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return _accumulate(xp.mean, input, dim, keepdim, dtype)
    if (r := _c_reduce("mean", xp, input, dim, keepdim, dtype, c=count)) is not None:
        return r
    if xp is np:
        if dtype is None and input.dtype.kind == "f" and input.dtype.itemsize > 2:
            return _mean_of(input, reduce_dims(dim, input.ndim), keepdim, None, count)
        return _accumulate(lambda a, axis, keepdims, dtype=None: _mean_of(
            a, axis, keepdims, dtype, count), input, dim, keepdim, dtype)
    return _accumulate(xp.mean, input, dim, keepdim, dtype)


def _mean_of(a, axis, keepdims, dtype, count):
    """numpy.mean's own steps (the sum in the result dtype, then a division by the count as a
    NumPy integer, which computes in double), without its Python: the same bits. A real
    float sum divides by a Python int below 2^24 in its own dtype instead (cheaper): the
    double quotient rounded to float32 is the float32 quotient (53 >= 2 * 24 + 2 bits: double
    rounding is harmless for a division)."""
    total = np.add.reduce(a, axis, dtype, keepdims=keepdims)
    if total.dtype.kind != "f" or count >= 1 << 24:
        count = np.intp(count)
    if type(total) is np.ndarray:
        return np.true_divide(total, count, out=total, casting="unsafe")
    return total.dtype.type(total / count)


@mean.vjp()
def _(g, input, dim=None, keepdim=False, *, dtype=None):
    # (divided before sum's expand: one division per result element, not one per input
    # element over the expanded view, on one thread)
    return sum_.vjp_fn(g / builtins.max(_count(input.shape, dim), 1), input, dim, keepdim)


@op("nanmean", tags=("reduction",))
def nanmean(xp, input, dim=None, keepdim=False, *, dtype=None):
    """Mean over ``dim`` of the elements that are not nan.

    Example:
        >>> ember.nanmean(ember.tensor([1., float("nan"), 2.]))
        tensor(1.5000)
    """
    if input.dtype.kind in "biuc":
        raise RuntimeError("nanmean(): expected input to have floating point dtype "
                           f"but got {type_name(input.dtype)}")
    if (s := _c_reduce("nansum", xp, input, dim, keepdim, dtype, 1)) is not None:
        return np.true_divide(s, _C.reduce("nancount", input, reduce_dims(dim, input.ndim),
                                           keepdim, min_size=1), out=s)
    return _accumulate(xp.nanmean, input, dim, keepdim, dtype)


@nanmean.vjp(save=("input",))
def _(g, input, dim=None, keepdim=False, *, dtype=None):
    keep = input.isnan().logical_not()
    n = keep.sum(reduce_dims(dim, input.dim()), keepdim=True)
    return _keep(g, input, dim, keepdim) * keep / n


mean.meta = nanmean.meta = _reduce_meta(lambda x, d: d.np if d is not None else x.dtype)
mean.samples = lambda dev, dt: _reduce_samples(dev, dt) if dt.category >= 2 else []
mean.errors = dim_errors() + [ErrorSample(Sample(const(3, dtype=np.int64)), RuntimeError,
                                           "mean.*could not infer output dtype.*Long")]
mean.grad_name_of = overload_if_given("mean", 1, "dim")
nanmean.errors = [ErrorSample(Sample(const(3, dtype=np.int64)), RuntimeError, "nanmean.*Long")]
nansum.samples = lambda dev, dt: _reduce_samples(dev, dt) + (
    [Sample(_with_nans(make((3, 4), dt))), Sample(_with_nans(make((3, 4), dt)), 1, True)]
    if dt.category == 2 else [])
nanmean.samples = lambda dev, dt: nansum.samples(dev, dt) if dt.category == 2 else []
nanmean.grad_name = "DivBackward0"


def _with_nans(x):
    x.reshape(-1)[[0, 5, 6]] = np.nan
    return x


@op("prod", tags=("reduction", "autocast_fp32"))
def prod(xp, input, dim=None, keepdim=False, *, dtype=None):
    """Product over one ``dim``, or of all elements."""
    if isinstance(dim, (tuple, list)):
        raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
    if dtype is None and input.size >= _C._MIN_ROWS_KERNEL and \
            (r := _C.prod(input, dim, keepdim)) is not None:
        return r
    if dim is None and dtype is None and xp is np and not keepdim and input.size and \
            (r := _whole("prod", input)) is not None:
        return r        # (the common call: no _accumulate, no NumPy scalar to wrap)
    # (np.prod is Python around multiply.reduce: call that directly, as np.prod does)
    return _accumulate(np.multiply.reduce if xp is np else xp.prod, input, dim, keepdim, dtype)


@prod.vjp(save=("input", "result"))
def _(g, input, dim=None, keepdim=False, *, dtype=None, result=None):
    # NOTE: prod/x is wrong where x == 0; the product of the others is exact there.
    g, r = _keep(g, input, dim, keepdim), _keep(result, input, dim, keepdim)
    if not bool((input == 0).any()):
        return g * (r / input).conj()
    if dim is None:
        return g * _prod_others(input.reshape(-1), 0).reshape(input.shape).conj()
    return g * _prod_others(input, dim).conj()


def _prod_others(x, dim):
    """For each element, the product of the other elements along ``dim``."""
    n = x.shape[dim]
    ones = ember.ones_like(x.narrow(dim, 0, 1))
    left = ember.cat([ones, x.narrow(dim, 0, n - 1)], dim).cumprod(dim)
    right = ember.cat([x.narrow(dim, 1, n - 1), ones], dim).flip(dim).cumprod(dim).flip(dim)
    return left * right


prod.meta = _reduce_meta(_sum_dtype)
prod.samples = lambda dev, dt: [Sample(make((3, 4), dt, 0.5, 1.5)), Sample(make((3, 4), dt), 1),
                                Sample(make((2, 3), dt), -1, True), Sample(make((0, 2), dt))] + \
    ([Sample(make((2, 3), dt), dtype=ember.float64)] if dt.category != 3 else [])
prod.grad_name_of = overload_if_given("prod", 1, "dim")


@op("count_nonzero", tags=("reduction",), differentiable=False)
def count_nonzero(xp, input, dim=None):
    """How many elements (along ``dim``, an int or tuple) are non-zero, as int64.

    Example:
        >>> ember.count_nonzero(ember.tensor([[0, 1], [2, 3]]), 0)
        tensor([1, 2])
    """
    if dim is None:     # (a large one by select.h's count over the threads; NumPy's is one)
        n = _C.count_nonzero(input) if xp is np else None
        return xp.asarray(xp.count_nonzero(input) if n is None else n, dtype=np.int64)
    # (NumPy's count_nonzero along axes is ~4 us of Python around this)
    return xp.sum(input != 0, axis=reduce_dims(dim, input.ndim), dtype=np.int64)


count_nonzero.meta = lambda input, dim=None: empty(reduce_shape(input.shape, dim, False), np.int64)
count_nonzero.samples = lambda dev, dt: [Sample(make((3, 4), dt).round()),
                                         Sample(make((3, 4, 2), dt).round(), (0, 2)),
                                         Sample(make((3, 4), dt).round(), -1)]
count_nonzero.errors = dim_errors()

# ---- extrema -------------------------------------------------------------------------------


def _nonempty(name, input, dim):
    """Extrema need an ordered dtype and something to choose from."""
    if input.dtype.kind == "c":
        raise RuntimeError(f"{name}(): does not support complex input")
    if input.size == 0:
        if dim is None:
            # NOTE: torch raises RuntimeError for max/min but IndexError for argmax/argmin
            raise (IndexError if name.startswith("arg") else RuntimeError)(
                f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument.")
        for a in reduce_dims(dim, input.ndim):
            if input.shape[a] == 0:
                raise IndexError(f"{name}(): Expected reduction dim {a} to have non-zero size.")


def _even_split(g, input, result, dim, keepdim):
    # NOTE: torch splits the gradient evenly between tied extrema.
    if not keepdim and (dim is None or dim == ()):     # (0-dim g and result broadcast)
        mask = (input == result).to(g.dtype)
        return g * mask / mask.sum()
    r = _keep(result, input, dim, keepdim)
    mask = (input == r).to(g.dtype)
    return _keep(g, input, dim, keepdim) * mask / mask.sum(reduce_dims(dim, input.dim()), True)


_SMALL = 1 << 16


def _whole(name, a, c=0.0):
    """The max, min, prod, median, nanmedian, ``(min, max)``, ``(var, mean)`` or ``(std,
    mean)`` with correction ``c`` (``name``: max, min, prod, median, nanmedian, minmax, var,
    std) of all of a non-empty C-contiguous float array as 0-dim arrays, by rowops'
    reduce_rows, prod_rows or stats_rows or rank.h's quickselect (one row) on one thread:
    NumPy's reduce costs ~1 us of set-up and returns a scalar the dispatch must wrap again,
    and _C.stats' or _C.rank's general shapes ~1 us more. None where it does not apply."""
    if not a.flags.c_contiguous or (fn := _C.kernel(_WHOLE_KERNELS.get(name, "stats_rows"),
                                                    a.dtype)) is None:
        return None
    out = np.empty((), a.dtype)
    if name in ("median", "nanmedian"):     # (its index not returned: a scratch 0-dim)
        return None if fn(_C.ptr(a), 1, a.size, _C._RANK[name], 0, _C.ptr(out),
                          _C.ptr(np.empty((), np.int64)), 1) else out
    if name in ("var", "std", "minmax"):
        fn(_C.ptr(a), _C.ptr(out), _C.ptr(hi := np.empty((), a.dtype)), 1, a.size, c,
           ("var", "std", "minmax").index(name), 1)
        return out, hi
    fn(_C.ptr(a), _C.ptr(out), 1, a.size, 1) if name == "prod" else fn(   # (prod: below 32
        _C._REDUCE[name], _C.ptr(a), None, 0.0, _C.ptr(out), 1, a.size, 1)  # one at a time)
    return out


_WHOLE_KERNELS = {"prod": "prod_rows", "max": "reduce_rows", "min": "reduce_rows",
                  "median": "rank_rows", "nanmedian": "rank_rows"}


def _minmax(name, binary):
    extremum, arg = getattr(np, name + "imum"), getattr(np.ndarray, "arg" + name)

    @op(name, tags=("reduction",), nondiff_outputs=(1,), returns=("values", "indices"))
    def fwd(xp, input, dim=None, keepdim=False):
        if xp is np and input.size and input.dtype.kind != "c":
            if dim is None:     # (x.max(): a large one over the threads)
                r = par_reduce(extremum, input) if input.size >= PAR_MIN else \
                    _whole(name, input)
                return extremum.reduce(input, None) if r is None else r
            if type(dim) is int and -input.ndim <= dim < input.ndim and input.size <= _SMALL:
                # (values by a second reduction, not take_along_axis, whose Python costs more
                # than the pass; both keep the first NaN, as argmax finds it)
                return extremum.reduce(input, dim, keepdims=keepdim), arg(
                    input, dim, keepdims=keepdim).astype(np.int64, copy=False)
        if hasattr(dim, "shape"):            # torch.max(a, b) is torch.maximum(a, b)
            return binary.fwd(xp, input, dim)
        _nonempty(name, input, dim)
        if dim is None:
            return getattr(input, name)()
        if isinstance(dim, (tuple, list)):
            raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
        dim = reduce_dims(dim, input.ndim)[0] if input.ndim else 0
        a = input.reshape(input.shape or (1,))
        idx = getattr(a, "arg" + name)(dim, keepdims=True)
        vals = getattr(a, name)(axis=dim, keepdims=True) if a.size <= _SMALL else \
            xp.take_along_axis(a, idx, axis=dim)
        s = reduce_shape(input.shape, dim, keepdim)
        return vals.reshape(s), idx.reshape(s).astype(np.int64)
    fwd.__doc__ = f"""The {name}imum of all elements, ``(values, indices)`` along ``dim``, or with a
    tensor as second argument, :func:`{name}imum`.

    Example:
        >>> ember.{name}(ember.tensor([[1., 5.], [5., 2.]]), 1).indices
        tensor({[1, 0] if name == "max" else [0, 1]})
    """

    @fwd.vjp(save=("input", "dim", "result"))
    def _(g, input, dim=None, keepdim=False, result=None):
        if isinstance(dim, ember.Tensor):
            return binary.vjp_fn(g, input, dim)
        if dim is None:
            return _even_split(g, input, result, None, False)
        if input.dim() == 0:
            return g[0]
        vals, idx = result
        gk, ik = _keep(g[0], input, dim, keepdim), _keep(idx, input, dim, keepdim)
        return ember.zeros(input.shape, dtype=gk.dtype, device=gk.device).scatter(dim, ik, gk)

    def meta(input, dim=None, keepdim=False):
        if hasattr(dim, "shape"):
            return binary.meta(input, dim)
        if dim is None:
            return empty((), input.dtype)
        s = reduce_shape(input.shape, dim, keepdim)
        return empty(s, input.dtype), empty(s, np.int64)

    fwd.meta = meta
    # torch's max(x) is MaxBackward1, max(x, dim) MaxBackward0, max(x, other) maximum's node
    names = node_name(name), node_name(name, 1)
    fwd.grad_name_of = lambda input, dim=None, keepdim=False: names[dim is None] \
        if not hasattr(dim, "shape") else binary.grad_name
    fwd.samples = lambda dev, dt: [
        Sample(make((3, 4, 5), dt)), Sample(make((3, 4, 5), dt), 1), Sample(make((), dt), 0),
        Sample(make((3, 4), dt), -1, True), Sample(make((3, 4), dt), make((4,), dt, seed=1)),
        Sample(make((0, 4), dt), 1)] if dt.category != 3 else []
    fwd.errors = [ErrorSample(Sample(const(0)), RuntimeError, "Expected reduction dim to be"),
                  ErrorSample(Sample(const(3, 4), (0, 1)), TypeError, "must be int, not tuple"),
                  ErrorSample(Sample(const(0, 3), 0), IndexError, "Expected reduction dim 0"),
                  ErrorSample(Sample(const(3, 4), 2), IndexError, "Dimension out of range"),
                  ErrorSample(Sample(const(3, dtype=np.complex64)), RuntimeError, "complex")]
    return fwd


def _binary_extremum(name):
    from . import pointwise_binary
    return getattr(pointwise_binary, name)


max_ = _minmax("max", _binary_extremum("maximum"))
min_ = _minmax("min", _binary_extremum("minimum"))


def _amax(name, ufunc):
    @op(name, tags=("reduction",))
    def fwd(xp, input, dim=(), keepdim=False):
        if dim != () or xp is not np or not input.size or input.dtype.kind == "c":
            _nonempty(name, input, dim if dim != () else None)
            axis = reduce_dims(dim, input.ndim)
            if len(axis) < input.ndim or xp is not np:
                # (axis None: NumPy's reduce over a tuple of every axis costs ~30% more)
                return (ufunc.reduce if xp is np else getattr(xp, name))(
                    input, axis=axis if len(axis) < input.ndim else None, keepdims=keepdim)
        # (all of it, the common call: no Python helper; over the threads where large)
        r = par_reduce(ufunc, input) if input.size >= PAR_MIN else None
        r = ufunc.reduce(input, None) if r is None else r
        return np.reshape(r, (1,) * input.ndim) if keepdim else r
    fwd.__doc__ = f"""The {name[1:]}imum over ``dim`` (an int or tuple; all dims by default); the
    gradient is shared evenly between tied elements.

    Example:
        >>> ember.{name}(ember.tensor([[1., 5.], [5., 2.]]), 1)
        tensor({"[5., 5.]" if name == "amax" else "[1., 2.]"})
    """
    fwd.vjp(save=("input", "result"))(
        lambda g, input, dim=(), keepdim=False, result=None:
        _even_split(g, input, result, dim, keepdim))
    fwd.meta = lambda input, dim=(), keepdim=False: empty(reduce_shape(input.shape, dim, keepdim),
                                                          input.dtype)
    fwd.samples = lambda dev, dt: reduce_samples(dev, dt) + [
        Sample(make((3, 4), dt).round()).at_kink(),
        Sample(make((4, 3), dt).round(), 1).at_kink()] \
        if dt.category != 3 else []
    return fwd


# (NumPy's max is maximum.reduce behind ~3 us of Python)
amax, amin = _amax("amax", np.maximum), _amax("amin", np.minimum)
amax.errors = amin.errors = dim_errors() + [ErrorSample(Sample(const(0, 3), 0), IndexError,
                                                         "Expected reduction dim 0 to have")]


@op("aminmax", tags=("reduction",), returns=("min", "max"))
def aminmax(xp, input, *, dim=None, keepdim=False):
    """``(amin(input, dim), amax(input, dim))`` in one call (``dim``: an int or None).

    Example:
        >>> ember.aminmax(ember.tensor([[1., 5.], [5., 2.]])).max
        tensor(5.)
    """
    if dim is None and not keepdim and xp is np and 0 < input.size < 1 << 17 and \
            (r := _whole("minmax", input)) is not None:
        return r    # (the common call: one pass of rowops; no kernel for complex, refused below)
    if input.size == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the "
                           "operation has no identity.")
    if input.dtype.kind == "c":    # (_nonempty's other check: the size, done above)
        raise RuntimeError("aminmax(): does not support complex input")
    axis = reduce_dims(dim, input.ndim)
    rows = math.gcd(input.size, 64) if input.size >= 1 << 17 and dim is None and not keepdim \
        and input.flags.c_contiguous else 1
    if xp is np and rows > 1 and (r := _C.stats("minmax", input.reshape(rows, -1), (1,), False)):
        return np.minimum.reduce(r[0]), np.maximum.reduce(r[1])       # (rows over threads)
    if xp is np and (r := _C.stats("minmax", input, axis, keepdim)) is not None:
        return r        # (one pass, where NumPy makes two)
    return amin.fwd(xp, input, axis, keepdim), amax.fwd(xp, input, axis, keepdim)


@aminmax.vjp(save=("input", "result"))
def _(g, input, *, dim=None, keepdim=False, result=None):
    gs = [_even_split(gi, input, r, dim, keepdim) for gi, r in zip(g, result) if gi is not None]
    return gs[0] if len(gs) == 1 else gs[0] + gs[1]


aminmax.errors = [ErrorSample(Sample(const(0)), RuntimeError, "cannot compute aminmax over an"),
                  ErrorSample(Sample(const(3, dtype=np.complex64)), RuntimeError, "complex")]
aminmax.meta = lambda input, *, dim=None, keepdim=False: (amin.meta(input, dim, keepdim),) * 2
aminmax.samples = lambda dev, dt: [Sample(make((3, 4), dt)), Sample(make((3, 4), dt), dim=1),
                                   Sample(make((3, 4), dt), dim=0, keepdim=True)] \
    if dt.category != 3 else []


def _arg(name, f):
    @op(name, tags=("reduction",), differentiable=False)
    def fwd(xp, input, dim=None, keepdim=False):
        _nonempty(name, input, dim)
        if dim is None:
            r = f(input.reshape(-1), axis=0)
            return xp.asarray(r, dtype=np.int64).reshape((1,) * input.ndim if keepdim else ())
        if input.ndim == 0:
            reduce_dims(dim, 0)
            return xp.zeros((), np.int64)
        return f(input, axis=reduce_dims(dim, input.ndim)[0], keepdims=keepdim).astype(np.int64)
    fwd.__doc__ = f"Index of the {name[3:]}imum (of the flattened input when ``dim`` is None)."
    fwd.meta = lambda input, dim=None, keepdim=False: empty(
        reduce_shape(input.shape, dim, keepdim), np.int64)
    fwd.samples = lambda dev, dt: [Sample(make((3, 4), dt, seed=5)),
                                   Sample(make((3, 4), dt, seed=5), 1),
                                   Sample(make((3, 4), dt, seed=5), 0, True),
                                   Sample(make((3, 4), dt, seed=5), None, True)] \
        if dt.category in (1, 2) else []
    return fwd


argmax = _arg("argmax", lambda a, **kw: a.argmax(**kw))
argmin = _arg("argmin", lambda a, **kw: a.argmin(**kw))
argmax.errors = argmin.errors = dim_errors() + [
    ErrorSample(Sample(const(0)), IndexError, "Expected reduction dim to be specified"),
    ErrorSample(Sample(const(3, dtype=np.complex64), 0), RuntimeError, "complex")]


def _truth(name, f):
    @op(name, tags=("reduction",), differentiable=False)
    def fwd(xp, input, dim=None, keepdim=False):
        # NOTE: over dim=() any/all reduce nothing (an elementwise test) in torch, where sum
        # and the others reduce everything
        r = f(input, axis=() if _no_dims(dim) else reduce_dims(dim, input.ndim), keepdims=keepdim)
        # NOTE: torch keeps uint8 for uint8 inputs (a pre-bool convention), bool otherwise
        return r.astype(np.uint8) if input.dtype == np.uint8 else r
    fwd.__doc__ = f"True where {name} element (along ``dim``) is non-zero."
    fwd.meta = lambda input, dim=None, keepdim=False: empty(
        input.shape if _no_dims(dim) else reduce_shape(input.shape, dim, keepdim),
        np.uint8 if input.dtype == np.uint8 else bool)
    fwd.samples = lambda dev, dt: reduce_samples(dev, dt) + [Sample(make((0, 3), dt), 1)]
    return fwd


def _no_dims(dim):
    return isinstance(dim, (tuple, list)) and not dim


all_ = _truth("all", lambda a, **kw: a.all(**kw))
any_ = _truth("any", lambda a, **kw: a.any(**kw))

# ---- logsumexp and norms -------------------------------------------------------------------


@op("logsumexp", tags=("reduction", "autocast_fp32_cuda"), promote="float", promote_args=(0,))
def logsumexp(xp, input, dim, keepdim=False):
    """``log(sum(exp(input), dim))``, computed without overflow.

    Example:
        >>> ember.logsumexp(ember.tensor([1000., 1000.]), 0)
        tensor(1000.6932)
    """
    if (r := _c_reduce("logsumexp", xp, input, dim, keepdim, min_size=1)) is not None:
        return r
    ax = reduce_dims(dim, input.ndim)
    m = xp.max(input, axis=ax, keepdims=True) if input.size else xp.zeros((), input.dtype)
    # NOTE: shift by the maximum so exp cannot overflow; an infinite maximum shifts by 0 so
    # that inf - inf does not make nan.
    m = xp.where(xp.isfinite(m), m, xp.zeros((), m.dtype))
    s = xp.sum(xp.exp(input - m), axis=ax, keepdims=True)
    with np.errstate(divide="ignore"):
        r = xp.log(s) + m
    return (r if keepdim else r.reshape(reduce_shape(input.shape, dim, False))).astype(
        input.dtype, copy=False)


@logsumexp.vjp(save=("input", "result"))
def _(g, input, dim, keepdim=False, result=None):
    return _keep(g, input, dim, keepdim) * (input - _keep(result, input, dim, keepdim)).exp()


logsumexp.meta = lambda input, dim, keepdim=False: empty(reduce_shape(input.shape, dim, keepdim),
                                                         input.dtype)
logsumexp.samples = lambda dev, dt: [
    Sample(make((3, 4), dt), 1), Sample(make((3, 4), dt), -1, True),
    Sample(make((2, 3, 4), dt, -50, 50), (0, 2)), Sample(make((3, 4), dt) * 1000, 0)] \
    if dt.category in (1, 2) else []
logsumexp.errors = dim_errors()


@op("norm", tags=("reduction", "autocast_fp32_cuda"))
def norm(xp, input, p="fro", dim=None, keepdim=False, dtype=None):
    """The vector ``p``-norm over ``dim`` (all elements by default): ``p`` is a number,
    ``inf``, ``-inf`` or ``"fro"`` (the 2-norm).

    Example:
        >>> ember.norm(ember.tensor([3., -4.])), ember.norm(ember.tensor([3., -4.]), 1)
        (tensor(5.), tensor(7.))
    """
    if input.dtype.kind in "biu":
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as "
                           f"input. Got {type_name(input.dtype)}")
    if dtype is not None:
        input = input.astype(dtype.np)
    # (a real 2-norm squares the elements as they are: |x| * |x| == x * x)
    a = input if input.dtype.kind == "f" and p in ("fro", 2, 2.0) else xp.abs(input)
    return _vector_norm(xp, a.astype(np.float32) if a.dtype.itemsize == 2 else a, p,
                        reduce_dims(dim, input.ndim), keepdim).astype(a.dtype, copy=False)


def _vector_norm(xp, a, p, ax, keepdim):
    # (a is real: the kernel at any size; ax is already wrapped, so no _c_reduce)
    if p in ("fro", 2, 2.0) and xp is np and \
            (r := _C.reduce("sumsq", a, ax, keepdim, min_size=1)) is not None:
        return np.sqrt(r, out=r)
    if p in ("fro", 2, 2.0):     # (add.reduce: np.sum is Python around it)
        return xp.sqrt((np.add.reduce if xp is np else xp.sum)(a * a, axis=ax, keepdims=keepdim))
    if not isinstance(p, (int, float)):
        raise NotImplementedError(f"norm: p={p!r} is not supported (matrix norms: use "
                                  "torch.linalg.matrix_norm)")
    if p == math.inf:
        return xp.max(a, axis=ax, keepdims=keepdim)
    if p == -math.inf:
        return xp.min(a, axis=ax, keepdims=keepdim)
    if p == 0:
        return xp.sum(a != 0, axis=ax, keepdims=keepdim).astype(a.dtype)
    if p == 1:
        return xp.sum(a, axis=ax, keepdims=keepdim)
    return xp.sum(a ** p, axis=ax, keepdims=keepdim) ** (1.0 / p)


@norm.vjp(save=("input", "result"))
def _(g, input, p="fro", dim=None, keepdim=False, dtype=None, result=None):
    g, r = _keep(g, input, dim, keepdim), _keep(result, input, dim, keepdim)
    sgn = input.sgn()
    if p in ("fro", 2, 2.0):
        return ember.where(r == 0, 0.0, g / r) * input
    if p in (math.inf, -math.inf):
        return sgn * _even_split(g, input.abs(), r, dim, True)
    if p == 0:
        return g * 0
    if p == 1:
        return g * sgn
    # d/dx (sum |x|^p)^(1/p) = sgn(x) |x|^(p-1) / norm^(p-1); 0 at x = 0, as torch's (for
    # p < 1 the power is infinite there)
    scaled = sgn * input.abs() ** (p - 1)
    if p < 1:
        scaled = ember.where(input == 0, 0.0, scaled)
    return ember.where(r == 0, 0.0, g / r ** (p - 1)) * scaled


def _norm_meta(input, p="fro", dim=None, keepdim=False, dtype=None):
    dt = np.dtype(dtype.np) if dtype is not None else input.dtype
    return empty(reduce_shape(input.shape, dim, keepdim), np.abs(np.zeros((), dt)).dtype)


norm.meta = _norm_meta
norm.errors = [ErrorSample(Sample(const(3, dtype=np.int64)), RuntimeError,
                            "Expected a floating point or complex tensor as input. Got Long"),
               ErrorSample(Sample(const(3, 4), 2, 2), IndexError, "Dimension out of range")]
norm.samples = lambda dev, dt: [
    Sample(make((3, 4), dt)), Sample(make((3, 4), dt), 2, 1), Sample(make((3, 4), dt), 1, 0),
    Sample(make((3, 4), dt), math.inf, 1, True), Sample(make((3, 4), dt), -math.inf, 1),
    Sample(make((3, 4), dt), 3, (0, 1)), Sample(make((3, 4), dt), "fro", (0, 1), True),
    Sample(make((3, 4), dt), 0.5, 1)] if dt.category >= 2 else []
norm.grad_name = "LinalgVectorNormBackward0"


# ---- forward mode (tangents.py) ----------------------------------------------------------
for _d in (sum_, mean, nansum):
    _d.jvp = LINEAR
for _d in (amax, amin, aminmax, logsumexp, nanmean, norm, prod):
    _d.jvp = REDUCTION
# max(input, other) is maximum's, elementwise
max_.jvp = min_.jvp = lambda opdef, args, kwargs, tangents, out: (
    pointwise if isinstance(named(opdef, args, kwargs)["dim"], ember.Tensor) else REDUCTION)(
    opdef, args, kwargs, tangents, out)
