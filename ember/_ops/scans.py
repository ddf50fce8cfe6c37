"""Scans and differences along a dimension: cumsum/cumprod, cummax/cummin, logcumsumexp,
diff."""
import math

import numpy as np

import ember

from .._backends import accumulate
from .._C import kernels as _C
from .meta import empty, moveaxis
from .pointwise import type_name
from .pointwise_binary import logaddexp
from .tangents import LINEAR, decomposed, gathered
from .registry import op
from .samples import ErrorSample, Sample, const, dim_errors, make
from .sorting import axis_of, scatter_back, sort_key
from .statistics import _along, _with_nans


# ---- cumsum, cumprod ------------------------------------------------------------------------


def _scan_kernel(x, axis, prod, reverse=False):
    """The scan of the NumPy array ``x`` along ``axis`` by the C kernel, or None where none
    applies (not float32/float64, or the library is not there)."""
    fn = _C.kernel("scan", x.dtype) if type(x) is np.ndarray and x.size else None
    if fn is None:
        return None
    if not x.flags.c_contiguous:
        x = x.copy()
    out = np.empty(x.shape, x.dtype)
    n = x.shape[axis]
    outer = math.prod(x.shape[:axis])
    fn(_C.ptr(x), _C.ptr(out), outer, n, x.size // max(outer * n, 1), prod, reverse,
       _C.num_threads())
    return out


def _scan(xp, input, dim, dtype, prod):
    out_dtype = dtype.np if dtype is not None else np.int64 if input.dtype.kind in "biu" else \
        input.dtype
    if not input.ndim:
        return input.astype(out_dtype)
    axis = dim % input.ndim
    if input.dtype is out_dtype or input.dtype == out_dtype:    # (identity first: no dtype ==)
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
    return Tensor._wrap(out) if out is not None else g.flip(dim).cumsum(dim).flip(dim)


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


cumprod.samples = lambda dev, dt: [Sample(make((3, 4), dt, 0.5, 1.5), 1), Sample(make((5,), dt), 0)]


def _cumulative_extremum(name, ufunc):
    @op(name, nondiff_outputs=(1,), returns=("values", "indices"))
    def fwd(xp, input, dim):
        if input.dtype.kind == "c":     # (reject's test, without its wrapper's frame)
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for "
                                      f"'{type_name(input.dtype)}'")
        nd = input.ndim       # (a plain dim of an n-dim array: no reshape, no dim helpers)
        x, axis = (input, dim % nd) if type(dim) is int and -nd <= dim < nd else \
            _along(input, dim)
        fn = _C.kernel("cumext", x.dtype) if xp is np and type(x) is np.ndarray and x.size else None
        if fn is not None:      # (the C loop: a running select per element, no NumPy passes)
            if not x.flags.c_contiguous:
                x = x.copy()
            vals, idx = np.empty(x.shape, x.dtype), np.empty(x.shape, np.int64)
            outer = math.prod(x.shape[:axis])
            fn(_C.ptr(x), _C.ptr(vals), _C.ptr(idx), outer, x.shape[axis],
               x.size // (outer * x.shape[axis]), name == "cummax", _C.num_threads())
            return (vals, idx) if input.ndim else (vals.reshape(()), idx.reshape(()))
        k = sort_key(x)
        vals = accumulate(xp, ufunc(xp), k, axis) if x.size else k
        pos = xp.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
        # NOTE: torch moves the index to every later element equal to the running extremum
        # (>= for cummax) and to every nan, which then stays the extremum.
        hit = (k == vals) | (xp.isnan(k) if k.dtype.kind == "f" else False)
        idx = accumulate(xp, xp.maximum, xp.where(hit, pos, 0), axis) if x.size else \
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
def logcumsumexp(xp, input, dim):
    """``log(cumsum(exp(input), dim))`` without overflow.

    Example:
        >>> ember.logcumsumexp(ember.tensor([1000., 1000.]), 0)
        tensor([1000.0000, 1000.6932])
    """
    nd, kind = input.ndim, input.dtype.kind
    if kind in "biu":       # (reject's test, without its wrapper's frame)
        raise NotImplementedError(f"\"logcumsumexp_out_cpu\" not implemented for "
                                  f"'{type_name(input.dtype)}'")
    x, axis = (input, dim % nd) if type(dim) is int and -nd <= dim < nd else _along(input, dim)
    if kind != "c":
        # NOTE: half precision accumulates in float32, as torch's kernel does
        k = x.astype(np.float32) if x.dtype.itemsize == 2 else x
        fn = _C.kernel("logcumsumexp", k.dtype) if xp is np and x.size else None
        if fn is not None:      # (pointwise.h's loop: NumPy's runs libm's exp and log1p)
            k, out = _C.contiguous(k), np.empty(k.shape, k.dtype)
            outer = math.prod(k.shape[:axis])
            fn(_C.ptr(k), _C.ptr(out), outer, k.shape[axis], k.size // (outer * k.shape[axis]),
               _C.num_threads())
        else:
            out = (np.logaddexp.accumulate(k, axis) if xp is np else accumulate(
                xp, xp.logaddexp, k, axis)) if x.size else k
    else:
        # NOTE: torch adds complex terms one at a time, keeping the imaginary part of the
        # larger one; a log of the whole sum would wrap it into (-pi, pi].
        terms = moveaxis(xp, x, axis, 0)
        out = list(terms[:1])
        for t in terms[1:]:
            out.append(logaddexp.fwd(xp, out[-1], t))
        out = moveaxis(xp, xp.stack(out) if out else terms, 0, axis)
    # (the scan's result is new unless there was nothing to scan: no second copy)
    return out.astype(input.dtype, copy=not x.size).reshape(input.shape)


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
    fn = _C.kernel("diff_rows", x.dtype) if n == 1 and axis == x.ndim - 1 and xp is np and \
        x.flags.c_contiguous and x.shape[-1] > 1 else None
    if fn is not None:      # (one pass, where NumPy's row views run ~3x slower than flat)
        out = np.empty(x.shape[:-1] + (x.shape[-1] - 1,), x.dtype)
        fn(_C.ptr(x), _C.ptr(out), x.size // x.shape[-1], x.shape[-1], _C.num_threads())
        return out
    if n == 1 and axis == x.ndim - 1 and xp is np and x.flags.c_contiguous and \
            x.dtype != bool and x.size >= 1 << 14 and x.shape[-1] > 1:
        # NumPy subtracts 2-D row views ~3x slower than flat arrays: the flat difference
        # (the last of each row spans two rows), then each row's first columns
        flat, buf = x.reshape(-1), np.empty(x.shape, x.dtype)
        np.subtract(flat[1:], flat[:-1], out=buf.reshape(-1)[:-1])
        return buf[..., :-1].copy()
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
    shape[axis] = max(sum(p.shape[axis] for p in (prepend, input, append) if p is not None) - n, 0)
    return empty(shape, input.dtype)


diff.meta = _diff_meta
diff.samples = lambda dev, dt: [
    Sample(make((3, 5), dt)), Sample(make((3, 5), dt), 2, 0), Sample(make((4,), dt), 0),
    Sample(make((3, 4), dt), 1, 1, make((3, 2), dt, seed=1), make((3, 1), dt, seed=2)),
    Sample(make((3, 4), dt), 2, 0, None, make((1, 4), dt, seed=3)),
    Sample(make((2,), dt), 3), Sample(make((3, 2), dt), 1, 0, make((1, 2), dt, seed=4)),
    Sample(make((4, 4099), dt)).forward_only()]        # (the flat path from 16384 elements)
diff.errors = [
    ErrorSample(Sample(const()), RuntimeError, "at least one-dimensional"),
    ErrorSample(Sample(const(3), -1), RuntimeError, "order must be non-negative"),
    ErrorSample(Sample(const(3, 4), 1, 2), IndexError, "Dimension out of range")]
# (n = 0: torch's copy of the input)
diff.grad_name_of = lambda input, n=1, *_: "torch::autograd::CopyBackwards" if n == 0 else \
    "SubBackward0"


# ---- forward mode (tangents.py) ----------------------------------------------------------


def _cumprod_jvp(a, t, out):
    x, d, tx = a["input"], a["dim"], t["input"]
    if x.dim() == 0:
        return tx.clone()
    if (x == 0).any():      # d out_j = sum_{i<=j} t_i prod_{k<=j, k!=i} x_k, by masking x_i
        n = x.shape[d]
        eye = ember.eye(n, dtype=x.dtype, device=x.device).bool()
        xs = x.movedim(d, -1).unsqueeze(-2).expand(*x.movedim(d, -1).shape[:-1], n, n)
        terms = xs.masked_fill(eye, 1).cumprod(-1) * tx.movedim(d, -1).unsqueeze(-1)
        lower = eye.logical_not().tril().logical_not().tril()     # i <= j
        return (terms * lower.transpose(0, 1)).sum(-2).movedim(-1, d).to(out.dtype)
    return (out * (tx / x).cumsum(d)).to(out.dtype)


def _logcumsumexp_jvp(a, t, out):
    x, d = a["input"], a["dim"]
    if x.dim() == 0:
        return t["input"].clone()
    c = x.amax(d, keepdim=True).detach()
    return (t["input"] * (x - c).exp()).cumsum(d) * (c - out).exp()


for _d in (cumsum, diff):
    _d.jvp = LINEAR
cummax.jvp = cummin.jvp = gathered()
cumprod.jvp, logcumsumexp.jvp = decomposed(_cumprod_jvp), decomposed(_logcumsumexp_jvp)
