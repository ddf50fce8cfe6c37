"""``ember.masked``: reductions and normalizations that ignore masked-out elements, and
``MaskedTensor``, as ``torch.masked``.

Each function takes ``mask=`` (a bool tensor broadcastable to the input; True keeps an
element) and computes as torch does: masked-out elements are replaced by the operation's
identity (0 for sum, 1 for prod, -inf for amax and logsumexp, NaN for median...) and the plain
op runs, so a row with nothing kept gives that identity (or NaN where the op divides by the
count: mean, var, std, softmax).
"""
import math

import ember

from .maskedtensor import MaskedTensor, as_masked_tensor, is_masked_tensor, masked_tensor

__all__ = ["amax", "amin", "argmax", "argmin", "as_masked_tensor", "cumprod", "cumsum",
           "is_masked_tensor", "log_softmax", "logaddexp", "logsumexp", "masked_tensor",
           "MaskedTensor", "mean", "median", "norm", "normalize", "prod", "softmax", "softmin",
           "std", "sum", "var"]
_sum = sum


def _dims(dim, ndim):
    if dim is None or dim == ():
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = tuple(d % max(ndim, 1) if ndim else d for d in dims)
    if len(set(out)) != len(out):
        raise RuntimeError("dim appears multiple times in the list of dims")
    return out


def _input_mask(input, mask):
    """``mask`` broadcast to ``input`` as bool (all True for None)."""
    if mask is None:
        return ember.ones(input.shape, dtype=ember.bool, device=input.device)
    if tuple(mask.shape) != tuple(input.shape):
        if mask.dim() > input.dim():
            raise IndexError("_input_mask expected broadcastable mask (got mask dimensionality "
                             "higher than of the input)")
        mask = ember.broadcast_to(mask.clone(), input.shape)
    return mask.to(dtype=ember.bool)


def _identity(op, input, *args):
    dt = input.dtype
    if op in ("sum", "cumsum", "norm", "normalize", "var", "std", "mean"):
        return 0
    if op in ("prod", "cumprod"):
        return 1
    if op in ("amax", "argmax", "logsumexp", "softmax", "log_softmax", "logaddexp"):
        return -math.inf if dt.is_floating_point else ember.iinfo(dt).min
    if op in ("amin", "argmin", "softmin"):
        return math.inf if dt.is_floating_point else ember.iinfo(dt).max
    return math.nan


def _masked(op, input, mask):
    """``input`` with its masked-out elements set to ``op``'s identity (a MaskedTensor gives
    its own data and mask)."""
    if is_masked_tensor(input):
        input, mask = input.get_data(), input.get_mask() if mask is None else mask
    if mask is None:
        return input
    return ember.where(_input_mask(input, mask), input,
                       ember.tensor(_identity(op, input), dtype=input.dtype,
                                    device=input.device))


def _reduction(op):
    """A masked reduction: ``input``'s masked-out elements become the identity, then the plain
    reduction; a MaskedTensor input gives a MaskedTensor whose mask says which results saw
    any element."""
    def wrap(fn):
        def f(input, *args, **kwargs):
            if is_masked_tensor(input):
                if kwargs.get("mask") is not None:
                    raise ValueError(f"masked {op}: a MaskedTensor carries its own mask")
                data, mask = input.get_data(), input.get_mask()
                out = f(data, *args, **dict(kwargs, mask=mask))
                dim = (args[1] if op == "norm" else args[0]) if len(args) > (op == "norm") \
                    else kwargs.get("dim")
                m = mask.any() if dim is None else mask
                if dim is not None:
                    for d in sorted(_dims(dim, data.dim()), reverse=True):
                        m = m.any(d, keepdim=bool(kwargs.get("keepdim", False)))
                return MaskedTensor(out, m.expand(out.shape) if m.dim() else m.expand(out.shape))
            return fn(input, *args, **kwargs)
        f.__name__ = f.__qualname__ = op
        f.__doc__ = fn.__doc__
        return f
    return wrap


def _red(op, plain):
    @_reduction(op)
    def f(input, dim=None, *, keepdim=False, dtype=None, mask=None):
        return plain(_masked(op, input, mask), _dims(dim, input.dim()), bool(keepdim), dtype)
    return f


sum = _red("sum", lambda x, d, k, dt: x.sum(d, keepdim=k, dtype=dt))
sum.__doc__ = """Sum of the kept elements over ``dim`` (all dims by default).

    Example:
        >>> import ember
        >>> x = ember.tensor([[1., 2., 3.], [4., 5., 6.]])
        >>> m = ember.tensor([[True, False, True], [False, False, False]])
        >>> ember.masked.sum(x, 1, mask=m)
        tensor([4., 0.])
    """


def _prod(x, dims, keepdim, dtype):
    for d in sorted(dims, reverse=True):
        x = x.prod(d, keepdim=keepdim, dtype=dtype)
    return x


prod = _red("prod", _prod)
prod.__doc__ = "Product of the kept elements over ``dim`` (1 where none is kept)."
amax = _red("amax", lambda x, d, k, dt: x.amax(d, keepdim=k).to(dt or x.dtype))
amax.__doc__ = "Largest kept element over ``dim`` (-inf where none is kept)."
amin = _red("amin", lambda x, d, k, dt: x.amin(d, keepdim=k).to(dt or x.dtype))
amin.__doc__ = "Smallest kept element over ``dim`` (inf where none is kept)."
logsumexp = _red("logsumexp", lambda x, d, k, dt: ember.logsumexp(x, d, keepdim=k).to(
    dt or x.dtype))
logsumexp.__doc__ = "``log(sum(exp(x)))`` over the kept elements (-inf where none is kept)."


def _arg(op):
    @_reduction(op)
    def f(input, dim=None, *, keepdim=False, dtype=None, mask=None):
        x = _masked(op, input, mask)
        return getattr(ember, op)(x, dim, bool(keepdim)).to(dtype=dtype or input.dtype)
    f.__doc__ = (f"Index of the {'largest' if op == 'argmax' else 'smallest'} kept element "
                 "over ``dim``, in ``dtype`` (default: the input's, as torch's).")
    return f


argmax, argmin = _arg("argmax"), _arg("argmin")


@_reduction("mean")
def mean(input, dim=None, *, keepdim=False, dtype=None, mask=None):
    """Mean of the kept elements over ``dim`` (NaN where none is kept).

    Example:
        >>> import ember
        >>> x = ember.tensor([[1., 2., 3.], [4., 5., 6.]])
        >>> ember.masked.mean(x, 1, mask=ember.tensor([[True, False, True], [False] * 3]))
        tensor([2., nan])
    """
    dtype = dtype or input.dtype
    if mask is None:
        return ember.mean(input, _dims(dim, input.dim()), keepdim=bool(keepdim), dtype=dtype)
    m = _input_mask(input, mask)
    total = sum(input, dim, keepdim=keepdim, dtype=dtype, mask=m)
    count = sum(m, dim, keepdim=keepdim, dtype=ember.int64)
    return ember.divide(total, count).to(dtype=dtype)


@_reduction("median")
def median(input, dim=-1, *, keepdim=False, dtype=None, mask=None):
    """Median of the kept elements along ``dim`` (NaN where none is kept)."""
    dtype = dtype or input.dtype
    d = _dims(dim, input.dim())[0]
    is_float = input.is_floating_point()
    x = _masked("median", input if is_float else input.to(ember.float32), mask)
    out = ember.nanmedian(x, d, keepdim).values
    if is_float:
        return out
    if ember.isnan(out).any():
        raise ValueError("masked median expects no fully masked out rows if dtype is not "
                         "floating point")
    return out.to(dtype=dtype)


@_reduction("norm")
def norm(input, ord=2.0, dim=None, *, keepdim=False, dtype=None, mask=None):
    """The ``ord``-norm of the kept elements over ``dim`` (``linalg.vector_norm``'s)."""
    x = _masked("norm", input, mask)
    if mask is not None and ord == -math.inf:
        x = ember.where(_input_mask(input, mask), input, math.inf)
    return ember.linalg.vector_norm(x, ord, _dims(dim, input.dim()), bool(keepdim), dtype=dtype)


def _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, sqrt):
    if unbiased is not None and correction is not None:
        raise RuntimeError("Only one of unbiased and correction may be given")
    correction = correction if correction is not None else int(unbiased is None or unbiased)
    compute = dtype or input.dtype
    if not (compute.is_floating_point or compute.is_complex):
        compute = ember.float32
    m = _input_mask(input, mask)
    count = m.sum(dim=_dims(dim, input.dim()), keepdim=True)
    mean_ = ember.divide(sum(input, dim, keepdim=True, dtype=dtype, mask=m), count)
    x = input - mean_
    total = sum(x * x.conj(), dim, keepdim=keepdim, dtype=compute, mask=m)
    if not keepdim:
        count = count.reshape(total.shape)
    if correction != 0:
        count = ember.maximum(count.to(total.real.dtype if total.is_complex() else compute) -
                              correction, ember.zeros((), dtype=compute))
    out = ember.divide(total, count).to(dtype=dtype or total.dtype)
    return ember.sqrt(out) if sqrt else out


@_reduction("var")
def var(input, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None, mask=None):
    """Variance of the kept elements over ``dim`` (``correction`` as torch.var's)."""
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, False)


@_reduction("std")
def std(input, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None, mask=None):
    """Standard deviation of the kept elements over ``dim``.

    Example:
        >>> import ember
        >>> x = ember.tensor([[1., 2., 3.], [4., 5., 6.]])
        >>> ember.masked.std(x, 1, mask=ember.tensor([[True, False, True], [False] * 3]))
        tensor([1.4142,    nan])
    """
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, True)


def _normalization(op, plain):
    def f(input, dim, *, dtype=None, mask=None):
        if is_masked_tensor(input):
            return MaskedTensor(f(input.get_data(), dim, dtype=dtype, mask=input.get_mask()),
                                input.get_mask())
        return plain(_masked(op, input, mask), dim, dtype or input.dtype)
    f.__name__ = f.__qualname__ = op
    return f


cumsum = _normalization("cumsum", lambda x, d, dt: x.cumsum(d, dtype=dt))
cumsum.__doc__ = "Cumulative sum along ``dim`` counting masked-out elements as 0."
cumprod = _normalization("cumprod", lambda x, d, dt: x.cumprod(d, dtype=dt))
cumprod.__doc__ = "Cumulative product along ``dim`` counting masked-out elements as 1."
softmax = _normalization("softmax", lambda x, d, dt: ember.softmax(x.to(dt), d))
softmax.__doc__ = """Softmax along ``dim`` over the kept elements (masked-out ones get 0).

    Example:
        >>> import ember
        >>> ember.masked.softmax(ember.zeros(3), 0, mask=ember.tensor([True, True, False]))
        tensor([0.5000, 0.5000, 0.0000])
    """
log_softmax = _normalization("log_softmax", lambda x, d, dt: ember.log_softmax(x.to(dt), d))
log_softmax.__doc__ = "Log-softmax along ``dim`` over the kept elements (-inf elsewhere)."
softmin = _normalization("softmin", lambda x, d, dt: ember.softmax(-x.to(dt), d))
softmin.__doc__ = "Softmin along ``dim`` over the kept elements (masked-out ones get 0)."


def normalize(input, ord, dim, *, eps=1e-12, dtype=None, mask=None):
    """``input / max(norm, eps)`` along ``dim`` with the norm over the kept elements;
    masked-out elements give 0."""
    if is_masked_tensor(input):
        return MaskedTensor(normalize(input.get_data(), ord, dim, eps=eps, dtype=dtype,
                                      mask=input.get_mask()), input.get_mask())
    dtype = dtype or input.dtype
    nrm = norm(input, ord, dim, keepdim=True, dtype=dtype, mask=mask)
    return ember.divide(_masked("sum", input, mask), ember.maximum(nrm, nrm.new_full([], eps)))


def logaddexp(input, other, *, dtype=None, input_mask=None, other_mask=None):
    """``log(exp(input) + exp(other))`` counting masked-out elements as -inf."""
    dtype = dtype or input.dtype
    a = _masked("logaddexp", input, input_mask)
    b = _masked("logaddexp", other, other_mask)
    return ember.logaddexp(a, b).to(dtype=dtype)
