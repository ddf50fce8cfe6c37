"""Numerical analysis and statistics written as compositions of ember ops (as torch writes
them, CompositeImplicitAutograd), so autograd flows through: cov, corrcoef, dist, renorm,
trapezoid / trapz / cumulative_trapezoid and gradient. ``ember/__init__.py`` installs the
``FUNCTIONS`` and ``METHODS`` tables.
"""
import warnings

import numpy as np

import ember

from . import _dtype
from .autograd.composite import recorded_as


def _floating(x):
    return x if x.dtype.category >= _dtype._FLOAT else x.to(_dtype.get_default_dtype())


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of the variables in the rows of ``input`` (observations in
    columns), with optional integer frequency and float observation weights.

    Example:
        >>> ember.cov(ember.tensor([[0., 1., 2.], [2., 1., 0.]]))
        tensor([[ 1., -1.],
                [-1.,  1.]])
    """
    if input.dim() > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an "
                           f"input with {input.dim()} dimensions")
    x = input.reshape(1, -1) if input.dim() < 2 else input
    n = x.shape[1]
    w = fweights
    if fweights is not None and fweights.dtype.category != 1:
        raise RuntimeError(f"cov(): expected fweights to have integral dtype but got fweights "
                           f"with {fweights.dtype.name} dtype")
    if aweights is not None:
        w = aweights if w is None else w * aweights
    if w is not None:
        w_sum = w.sum()
        avg = (x * w).sum(1) / w_sum
    else:
        w_sum = n
        avg = _floating(x).mean(1)
    if w is not None and correction != 0 and aweights is not None:
        norm = w_sum - correction * (w * aweights).sum() / w_sum
    else:
        norm = w_sum - correction
    if float(norm) <= 0:
        warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less "
                      "than the number of observations.", RuntimeWarning, stacklevel=2)
        norm = norm * 0
    xm = x - avg.unsqueeze(1)
    c = xm @ (xm * w if w is not None else xm).t().conj()
    return (c / norm).squeeze()


def corrcoef(input):
    """Pearson correlation coefficients of the variables in the rows of ``input``.

    Example:
        >>> ember.corrcoef(ember.tensor([[0., 1., 2.], [2., 1., 0.]]))
        tensor([[ 1., -1.],
                [-1.,  1.]])
    """
    c = cov(input)
    if c.dim() == 0:
        return c / c
    std = c.diagonal().real.sqrt() if c.is_complex() else c.diagonal().sqrt()
    c = c / std.unsqueeze(1) / std.unsqueeze(0)
    # NOTE: as NumPy and torch, clip rounding error so |r| <= 1
    return c.clamp(-1, 1) if not c.is_complex() else c


def dist(input, other, p=2):
    """The ``p``-norm of ``input - other``.

    Example:
        >>> ember.dist(ember.tensor([0., 0.]), ember.tensor([3., 4.]))
        tensor(5.)
    """
    return (input - other).norm(p)


def renorm(input, p, dim, maxnorm):
    """Scale each slice ``input.select(dim, i)`` whose ``p``-norm exceeds ``maxnorm`` down to
    norm ``maxnorm``.

    Example:
        >>> ember.renorm(ember.tensor([[3., 4.], [0.3, 0.4]]), 2, 0, 1.)
        tensor([[0.6000, 0.8000],
                [0.3000, 0.4000]])
    """
    if p <= 0:
        raise RuntimeError(f"renorm: non-positive-norm not supported, got p={p}")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if input.dim() <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.dim()} "
                           f"dimensions")
    others = tuple(d for d in range(input.dim()) if d != dim % input.dim())
    norms = input.norm(p, others, keepdim=True)
    # NOTE: torch divides by norm + 1e-7 and leaves slices under maxnorm untouched
    factor = (maxnorm / (norms + 1e-7)).where(norms > maxnorm, 1.0)
    return input * factor


def renorm_(self, p, dim, maxnorm):
    from .autograd.grad_mode import no_grad
    with no_grad():
        return self.copy_(renorm(self, p, dim, maxnorm))


def _trapezoid_parts(y, x, dx, dim):
    if x is not None and not hasattr(x, "shape"):
        raise TypeError(f"trapezoid(): x must be a Tensor (a spacing goes in dx=), got "
                        f"{type(x).__name__}")
    n = y.shape[dim]
    lo, hi = y.narrow(dim, 0, max(n - 1, 0)), y.narrow(dim, min(1, n), max(n - 1, 0))
    if x is None:
        return (lo + hi) * (0.5 * (1 if dx is None else dx))
    if x.dim() == 1:
        if x.shape[0] != n:
            raise RuntimeError(f"trapezoid: There must be one `x` value for each sample point")
        shape = [1] * y.dim()
        shape[dim] = n - 1 if n else 0
        d = x.diff().reshape(shape)
    else:
        d = x.diff(dim=dim)
    return (lo + hi) * d * 0.5


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoid rule along ``dim``: sample points ``x`` (a tensor) or spacing ``dx``.

    Example:
        >>> ember.trapezoid(ember.tensor([1., 4., 9., 16.]))
        tensor(21.5000)
    """
    parts = _trapezoid_parts(y, x, dx, dim)
    if y.shape[dim] == 0 if y.dim() else True:
        return _floating(y).sum(dim) * 0 if y.dim() else _floating(y) * 0
    return _floating(parts).sum(dim)


def trapz(y, x=None, *, dx=None, dim=-1):
    """Alias of :func:`trapezoid` (NumPy's old name)."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoid-rule integral along ``dim`` (one element fewer than ``y``).

    Example:
        >>> ember.cumulative_trapezoid(ember.tensor([1., 4., 9., 16.]))
        tensor([ 2.5000,  9.0000, 21.5000])
    """
    return _floating(_trapezoid_parts(y, x, dx, dim)).cumsum(dim)


def _grad_along(f, d, h, edge_order):
    """``d f / d x`` along dim ``d`` with a scalar step or a 1-D coordinate tensor ``h``, by
    second-order central differences inside and ``edge_order`` one-sided ones at the edges
    (NumPy's formulas)."""
    n = f.shape[d]
    if n < edge_order + 1:
        raise RuntimeError(f"torch.gradient expected each dimension size to be at least "
                           f"edge_order+1")
    s = lambda a, b: f.narrow(d, a % n, b - a % n if b > 0 else n + b - a % n)  # noqa: E731
    shape = [1] * f.dim()

    def col(t):
        shape[d] = t.shape[0]
        return t.reshape(shape)
    if not hasattr(h, "shape"):                      # uniform spacing
        inner = (s(2, n) - s(0, -2)) / (2 * h)
        if edge_order == 1:
            first, last = (s(1, 2) - s(0, 1)) / h, (s(-1, n) - s(-2, -1)) / h
        else:
            first = (-1.5 * s(0, 1) + 2 * s(1, 2) - 0.5 * s(2, 3)) / h
            last = (0.5 * s(-3, -2) - 2 * s(-2, -1) + 1.5 * s(-1, n)) / h
    else:
        dx = h.diff()
        d1, d2 = col(dx[:-1]), col(dx[1:])
        inner = (-d2 / (d1 * (d1 + d2)) * s(0, -2) + (d2 - d1) / (d1 * d2) * s(1, -1) +
                 d1 / (d2 * (d1 + d2)) * s(2, n))
        if edge_order == 1:
            first, last = (s(1, 2) - s(0, 1)) / dx[0], (s(-1, n) - s(-2, -1)) / dx[-1]
        else:
            a, b = dx[0], dx[1]
            first = (-(2 * a + b) / (a * (a + b)) * s(0, 1) + (a + b) / (a * b) * s(1, 2) -
                     a / (b * (a + b)) * s(2, 3))
            a, b = dx[-2], dx[-1]
            last = (b / (a * (a + b)) * s(-3, -2) - (a + b) / (a * b) * s(-2, -1) +
                    (2 * b + a) / (b * (a + b)) * s(-1, n))
    from ._ops.joining import cat
    return cat([first, inner, last], d)


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """The gradient of samples ``input`` along each dim in ``dim`` (all by default): one tensor
    per dim. ``spacing`` is one number, one number per dim, or one coordinate tensor per dim.

    Example:
        >>> ember.gradient(ember.tensor([1., 4., 9., 16.]))
        (tensor([3., 4., 6., 7.]),)
    """
    if edge_order not in (1, 2):
        raise RuntimeError(f"torch.gradient only supports edge_order=1 and edge_order=2.")
    dims = list(range(input.dim())) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = [d % input.dim() for d in dims]
    steps = list(spacing) if isinstance(spacing, (list, tuple)) else [spacing] * len(dims)
    if len(steps) != len(dims):
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar or "
                           f"it's spacing and dim arguments to have the same length, but got a "
                           f"spacing argument of length {len(steps)} and a dim argument of "
                           f"length {len(dims)}.")
    steps = [h.item() if hasattr(h, "shape") and h.dim() == 0 else h for h in steps]
    return tuple(_grad_along(input, d, h, edge_order) for d, h in zip(dims, steps))


def histogramdd(input, bins, *, range=None, weight=None, density=False):
    """The histogram of the points in the rows of ``input`` (..., D): counts (or summed
    ``weight``) in a D-dimensional grid of bins, ``bins`` per dim (an int, one int per dim, or
    one tensor of edges per dim) over ``range`` ([min0, max0, min1, max1, ...], the data's by
    default). Returns ``(hist, bin_edges)``.

    Example:
        >>> h = ember.histogramdd(ember.tensor([[0., 1.], [1., 1.], [2., 3.]]), bins=[2, 2])
        >>> h.hist
        tensor([[1., 0.],
                [1., 1.]])
    """
    from . import return_types
    from ._ops.counting import _linspace
    from ._ops.pointwise import type_name
    from ._ops.sorting import sort_key
    if input.dtype.category != _dtype._FLOAT:
        raise NotImplementedError(f"\"histogramdd\" not implemented for "
                                  f"'{type_name(input.dtype.name)}'")
    if input.dim() < 2:
        raise RuntimeError("torch.histogramdd: input tensor should have at least 2 dimensions")
    d = input.shape[-1]
    bins = [bins] * d if isinstance(bins, int) else list(bins)
    if len(bins) != d:
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost "
                           "dimension of the input.")
    pts = input.detach().cpu().numpy().reshape(-1, d)
    keys = sort_key(pts)
    edges = []
    for k, b in enumerate(bins):
        if hasattr(b, "shape"):
            edges.append(b.detach().cpu().numpy())
            continue
        if b <= 0:
            raise RuntimeError(f"torch.histogramdd(): bins must be > 0, but got {b} for "
                               f"dimension {k}")
        lo, hi = (range[2 * k], range[2 * k + 1]) if range is not None else (
            (float(keys[:, k].min()), float(keys[:, k].max())) if len(pts) else (0.0, 0.0))
        if lo > hi:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {lo} "
                               f"max {hi} for dimension {k}")
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        kt = keys.dtype.type
        edges.append(_linspace(np, kt(lo), kt(hi), b + 1, pts.dtype))
    ekeys = [sort_key(e) for e in edges]
    inside = np.ones(len(pts), bool)
    for k, e in enumerate(ekeys):
        inside &= (keys[:, k] >= e[0]) & (keys[:, k] <= e[-1])
    shape = tuple(len(e) - 1 for e in edges)
    # NOTE: searchsorted finds the bin torch's local search finds; the last bin is closed
    pos = [np.minimum(np.searchsorted(e, keys[inside, k], side="right") - 1, n - 1)
           for k, (e, n) in enumerate(zip(ekeys, shape))]
    w = None if weight is None else \
        sort_key(weight.detach().cpu().numpy()).reshape(-1)[inside].astype(np.float64)
    flat = np.ravel_multi_index(pos, shape) if pos and len(pos[0]) else np.zeros(0, np.int64)
    hist = np.bincount(flat, w, minlength=int(np.prod(shape))).reshape(shape)
    if density:
        widths = np.ix_(*[np.diff(e.astype(np.float64)) for e in edges])
        vol = np.ones(shape)
        for wk in widths:
            vol = vol * wk
        hist = hist / (hist.sum() * vol)
    T = type(input)
    return return_types.histogramdd(
        T._wrap(hist.astype(pts.dtype)).to(input.device),
        tuple(T._wrap(np.array(e, pts.dtype)).to(input.device) for e in edges))


_SEGMENT_REDUCE = {"sum": "sum", "prod": "prod", "mean": "mean", "max": "amax", "amax": "amax",
                   "min": "amin", "amin": "amin"}


def _reduce_segment(part, how, ax, initial):
    n = part.shape[ax]
    if how in ("amax", "amin"):
        if n == 0:
            fill = initial if initial is not None else \
                (-float("inf") if how == "amax" else float("inf"))
            return part.sum(ax) * 0 + fill
        r = getattr(part, how)(ax)
        if initial is not None:
            r = r.clamp(min=initial) if how == "amax" else r.clamp(max=initial)
        return r
    if how == "prod":
        return part.prod(ax) * (1 if initial is None else initial)
    total = part.sum(ax) + (0 if initial is None else initial)
    if how == "sum":
        return total
    if n == 0:      # NOTE: torch's mean of an empty segment is ``initial``, else nan
        return total * 0 + (float("nan") if initial is None else initial)
    return total / n


def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    """Reduce consecutive segments of ``data`` along ``axis``, of sizes ``lengths`` (or between
    ``offsets``), by ``"sum"``, ``"prod"``, ``"mean"``, ``"amax"`` or ``"amin"``, starting from
    ``initial``. ``lengths`` with more dims gives each leading index its own segments.

    Example:
        >>> ember.segment_reduce(ember.tensor([1., 2., 3., 4.]), "sum",
        ...                      lengths=ember.tensor([1, 0, 3]))
        tensor([1., 0., 9.])
    """
    import ember
    stack = ember.stack
    if reduce not in _SEGMENT_REDUCE:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce}")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    how, axis = _SEGMENT_REDUCE[reduce], axis % max(data.dim(), 1)
    sizes = (lengths if lengths is not None else offsets.diff(dim=-1)).cpu().numpy()
    if axis != sizes.ndim - 1:
        raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of "
                           f"lengths but got {axis}.")
    if not unsafe and (sizes.sum(-1) != data.shape[sizes.ndim - 1]).any():
        raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to sum to "
                           "data.size(lengths.dim()-1) when !unsafe.")

    def segments(x, ls, ax):
        starts = [0] + list(ls.cumsum()[:-1])
        return stack([_reduce_segment(x.narrow(ax, int(a), int(n)), how, ax, initial)
                      for a, n in zip(starts, ls)], ax)
    if sizes.ndim == 1:
        return segments(data, sizes, axis)
    lead = sizes.shape[:-1]
    rows = [segments(data[i], sizes[i], axis - len(lead)) for i in np.ndindex(*lead)]
    return stack(rows).reshape(tuple(lead) + tuple(rows[0].shape))


def orgqr(input, tau):
    """The first n columns of Q from ``geqrf``'s Householder form (``linalg.householder_product``).

    Example:
        >>> a, tau = ember.geqrf(ember.tensor([[3., 1.], [4., 2.]]))
        >>> ember.orgqr(a, tau)
        tensor([[-0.6000, -0.8000],
                [-0.8000,  0.6000]])
    """
    from .linalg import householder_product
    return householder_product(input, tau)


def _ormqr_checks(input, tau, other, left):
    side = -2 if left else -1
    for name, t in (("input", input), ("other", other)):
        if t.dim() < 2:
            raise RuntimeError(f"torch.ormqr: {name} must have at least 2 dimensions.")
    if other.dtype != input.dtype:
        raise RuntimeError(f"torch.ormqr: Expected input and other to have the same dtype, but "
                           f"input has dtype{_dtype._SCALAR_NAMES[input.dtype.name]} and other "
                           f"has dtype {_dtype._SCALAR_NAMES[other.dtype.name]}")
    if other.shape[side] != input.shape[-2]:
        raise RuntimeError(f"torch.ormqr: other.shape[{side}] must be equal to input.shape[-2]")
    if tau.shape[-1] != min(other.shape[side], input.shape[-1]):
        raise RuntimeError(f"torch.ormqr: tau.shape[-1] must be equal to min(other.shape"
                           f"[{side}], input.shape[-1])")
    if input.dim() - tau.dim() != 1:
        raise RuntimeError("torch.ormqr: Expected tau to have one dimension less than input, but "
                           f"got tau.ndim equal to {tau.dim()} and input.ndim is equal to "
                           f"{input.dim()}")
    if input.dim() != other.dim():
        raise RuntimeError("torch.ormqr: Expected other to have the same number of dimensions as "
                           f"input, but got other.ndim equal to {other.dim()} and input.ndim is "
                           f"equal to {input.dim()}")
    for name, t, batch in (("tau", tau, tau.shape[:-1]), ("other", other, other.shape[:-2])):
        if tuple(batch) != tuple(input.shape[:-2]):
            raise RuntimeError(f"torch.ormqr: Expected batch dimensions of {name} to be equal to "
                               f"input.shape[:-2], but got {list(batch)}")
    if tau.dtype != input.dtype:
        raise RuntimeError(f"torch.ormqr: Expected input and tau to have the same dtype, but "
                           f"input has dtype{_dtype._SCALAR_NAMES[input.dtype.name]} and tau "
                           f"has dtype {_dtype._SCALAR_NAMES[tau.dtype.name]}")
    if input.dtype.category < _dtype._FLOAT:
        raise NotImplementedError(f"\"ormqr_cpu\" not implemented for "
                                  f"'{_dtype._SCALAR_NAMES[input.dtype.name]}'")


def ormqr(input, tau, other, left=True, transpose=False):
    """``op(Q) @ other`` (``other @ op(Q)`` when not ``left``) for Q given by ``geqrf``'s
    Householder reflectors ``(input, tau)``, without forming Q; ``op`` is the conjugate
    transpose when ``transpose``.

    Example:
        >>> a, tau = ember.geqrf(ember.tensor([[3., 1.], [4., 2.]]))
        >>> ember.ormqr(a, tau, ember.eye(2))
        tensor([[-0.6000, -0.8000],
                [-0.8000,  0.6000]])
    """
    _ormqr_checks(input, tau, other, left)
    return _ormqr(input, tau, other, left, transpose)


def _householder_apply(input, tau, other, left, transpose):
    m, k = input.shape[-2], tau.shape[-1]
    rows = ember.arange(m, device=input.device)
    # Q = H_1 ... H_k, H_i = I - tau_i v_i v_i^H; Q C applies H_k first, Q^H C H_1^H first
    order = range(k) if left == transpose else range(k - 1, -1, -1)
    c = other
    for i in order:
        v = input[..., :, i] * (rows > i).to(input.dtype) + (rows == i).to(input.dtype)
        t = tau[..., i, None, None]
        t = t.conj() if transpose else t
        if left:
            c = c - (t * v.unsqueeze(-1)) * (v.conj().unsqueeze(-2) @ c)
        else:
            c = c - ((c @ v.unsqueeze(-1)) * t) * v.conj().unsqueeze(-2)
    return c


_ormqr = recorded_as("OrmqrBackward0")(_householder_apply)


FUNCTIONS = {f.__name__: f for f in (cov, corrcoef, dist, renorm, trapezoid, trapz,
                                     cumulative_trapezoid, gradient, histogramdd,
                                     segment_reduce, orgqr, ormqr)}
METHODS = {f.__name__: f for f in (cov, corrcoef, dist, renorm, renorm_, orgqr, ormqr)}
