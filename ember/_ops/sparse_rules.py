"""The sparse rules of the ops that take sparse COO operands (``OpDef.sparse``, run by
``dispatch.sparse_dispatch``), and the products, sums and softmax behind ``torch.sparse``.

Two kinds of rule (see ``_ops/sparse.py`` for the tensor itself):

- *pattern rules* (neg, mul by a number, clone, transpose, add of two sparse tensors, mm...)
  build the result from the parts without autograd, then record the op's own node, whose vjp
  (written in ember ops) takes sparse gradients through these same rules;
- *compositions* (unary functions, sparse.mm, sparse.sum, softmax, sparse * dense) are written
  in ember ops on the coalesced parts from ``_parts``, so the gradient reaching the sparse
  tensor is sparse and masked to its pattern, as torch's is.
"""
import math

import numpy as np

from .. import _dtype
from .._tensor import Tensor
from .._backends import MetaBackend, _add_rows_kernel, add_at
from ..autograd import grad_mode
from . import creation, joining, linalg, pointwise, reduction, shape
from .registry import get, op
from .tangents import PRODUCT
from .sparse import (FUNCTIONS, _find, _gather, _int64, _is_sparse, _linear, _make, _parts, _raw,
                     _record_as, _wrap, coalesce, to_dense)

_NUMBERS = (int, float, bool, complex)
no_grad = grad_mode.no_grad

def _map_values(opdef, fn, keeps_coalesced=True):
    """A pattern rule: ``fn`` applied to the values (indices kept), recorded as ``opdef``."""
    def rule(input, *args, **kwargs):
        if not _is_sparse(input) or any(_is_sparse(a) for a in args):
            raise NotImplementedError(f"{opdef.name}: unsupported mix of sparse and dense operands")
        i, v = _raw(input)
        with no_grad():
            out = _wrap(i, fn(v, *args, **kwargs), input.shape,
                        input._data.coalesced and keeps_coalesced)
        return _record_as(opdef, (input,) + args, out, kwargs)
    return rule


def _scale_rule(opdef, fn):
    """mul/div: by a number keeps the pattern; mul by a tensor is a composition."""
    scaled = _map_values(opdef, fn)

    def rule(input, other, *args, **kwargs):
        if _is_sparse(input) and isinstance(other, _NUMBERS):
            return scaled(input, other, *args, **kwargs)
        if opdef is pointwise.mul and isinstance(input, _NUMBERS):
            return rule(other, input)
        if opdef is pointwise.mul:
            return _mul_tensor(input, other)
        raise NotImplementedError(f"{opdef.name}: a sparse tensor may only be divided by a "
                                  f"number, got {type(other).__name__}")
    return rule


def _mul_tensor(a, b):
    if _is_sparse(a) and _is_sparse(b):
        _same_shape("mul", a, b)
        ia, va = _parts(a)
        ib, vb = _parts(b)
        # NOTE: the product keeps only the indices both share (torch keeps the pattern of one
        # operand with explicit zeros elsewhere; the dense value is the same).
        pos = _find(ib, ia, tuple(a.shape))
        hit = (pos < ib.shape[1]).nonzero().reshape(-1)
        vb = joining.cat([vb, creation.zeros((1,) + tuple(vb.shape[1:]), dtype=vb.dtype,
                                           device=vb.device)])
        val = va.index_select(0, hit) * vb.index_select(0, pos.index_select(0, hit))
        return _make(ia.index_select(1, hit), val, a.shape, True)
    s, d = (a, b) if _is_sparse(a) else (b, a)
    if d.dim():
        _same_shape("mul", s, d)
    idx, val = _parts(s, coalesced=d.dim() > 0)
    coalesced = s._data.coalesced or idx is not s._data.indices
    if d.dim():
        d = _gather(d, idx, tuple(s.shape))
    return _make(idx, val * d, s.shape, coalesced)


def _same_shape(name, a, b):
    if tuple(a.shape) != tuple(b.shape):
        raise RuntimeError(f"{name}: expected sizes of 'self' and 'other' to match, but "
                           f"{list(a.shape)} != {list(b.shape)}")


def _add_rule(opdef, sign):
    def rule(input, other, alpha=1):
        if not (_is_sparse(input) and _is_sparse(other)):
            # a dense operand makes the result dense
            a = to_dense(input) if _is_sparse(input) else input
            b = to_dense(other) if _is_sparse(other) else other
            return opdef(a, b, alpha=alpha)
        _same_shape(opdef.name, input, other)
        dt = _dtype.promote_types(input.dtype, other.dtype)
        (ia, va), (ib, vb) = _raw(input), _raw(other)
        scale = sign * alpha
        with no_grad():
            if input is other:
                # NOTE: torch adds a tensor to itself by scaling its values, indices untouched
                out = _wrap(ia, (va * (1 + scale)).to(dt), input.shape, input._data.coalesced)
            else:
                vb = vb * scale if scale != 1 else vb
                out = _wrap(joining.cat([ia, ib], 1), joining.cat([va.to(dt), vb.to(dt)]),
                            input.shape, False)
                if input._data.coalesced and other._data.coalesced:
                    out = coalesce(out)
        return _record_as(opdef, (input, other), out, {"alpha": alpha} if alpha != 1 else None)
    return rule


@op("_sparse_coo_mm", function=False, method=False, promote="common", promote_args=(2, 3))
def _coo_mm(xp, rows, cols, values, dense, nrows):
    """``S @ dense`` for the 2-d sparse ``S`` with entries ``values`` at (``rows``, ``cols``)
    and ``nrows`` rows."""
    out = xp.zeros((nrows, dense.shape[1]), np.result_type(values.dtype, dense.dtype))
    if rows.size == 0 or xp is np and _add_rows_kernel(out, rows, dense, cols, values):
        return out      # (the kernel: each entry's scaled dense row added to its output row)
    prod = values[:, None] * dense[cols]
    if xp is not np:
        add_at(xp, out, rows, prod)
        return out
    # NOTE: a segmented sum over rows in order (np.add.reduceat) is faster than the scattered
    # np.add.at; coalesced indices are already in row order.
    if rows.size > 1 and not (rows[1:] >= rows[:-1]).all():
        order = np.argsort(rows, kind="stable")
        rows, prod = rows[order], prod[order]
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    out[rows[starts]] = np.add.reduceat(prod, starts, axis=0)
    return out


@_coo_mm.vjp(save=("rows", "cols", "values", "dense"))
def _(g, rows, cols, values, dense, nrows):
    gv = (g.index_select(0, rows) * dense.index_select(0, cols)).sum(1)
    return None, None, gv, _coo_mm(cols, rows, values, g, dense.shape[0]), None


_coo_mm.meta = lambda rows, cols, values, dense, nrows: MetaBackend.empty(
    (nrows, dense.shape[1]), np.result_type(values.dtype, dense.dtype))


def _spmm(s, d, coalesced):
    """``s @ d`` for 2-d sparse ``s`` (no dense dims) and a dense matrix ``d``."""
    idx, val = _parts(s, coalesced)
    return _coo_mm(idx[0], idx[1], val, d, s.shape[0])


def _check_mm(name, a, b):
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"{name}: expected 2-D matrices, got {a.dim()}-D and {b.dim()}-D")
    if any(x.layout.name != "strided" and x.dense_dim() for x in (a, b)):
        raise RuntimeError(f"{name}: sparse matrices with dense dimensions are not supported")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x"
                           f"{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")


def _mm_rule(input, mat2):
    """torch.mm / matmul / mv with one sparse operand (COO or compressed): a dense result, and
    (as torch) a dense gradient for the sparse operand."""
    if input.dim() == 2 and mat2.dim() == 1:
        return _mm_rule(input, mat2.unsqueeze(1)).squeeze(1)
    _check_mm("mm", input, mat2)
    if input.layout.name != "strided" and mat2.layout.name != "strided":
        return _sparse_product(input, mat2)
    with no_grad():     # (a compressed operand as the COO tensor of its elements)
        a, b = (x.to_sparse_coo() if x.layout.name not in ("strided", "sparse_coo") else x
                for x in (input, mat2))
        out = _spmm(a, b, False) if _is_sparse(a) else _spmm(b.t(), a.t(), False).t().contiguous()
    return _record_as(linalg.mm, (input, mat2), out)


def _sparse_product(a, b):
    """``a @ b`` for two sparse matrices, as torch: COO for COO operands (coalesced, the
    structural product: a sum that cancels stays stored), CSR for compressed ones;
    differentiable in both operands' values."""
    if (a.layout.name == "sparse_coo") != (b.layout.name == "sparse_coo"):
        raise RuntimeError(f"mm: computation on CPU is not implemented for {a.layout} @ {b.layout}")
    (ia, va), (ib, vb) = _parts(a.to_sparse_coo()), _parts(b.to_sparse_coo())
    (ar, ac), (br, bc) = ia.cpu().numpy(), ib.cpu().numpy()
    starts = np.searchsorted(br, np.arange(b.shape[0] + 1))     # (coalesced: rows in order)
    n = starts[ac + 1] - starts[ac]             # the entries of b meeting each entry of a
    p = np.repeat(np.arange(ac.size), n)
    q = np.arange(n.sum()) - np.repeat(n.cumsum() - n, n) + np.repeat(starts[ac], n)
    pick = (lambda v, k: v.index_select(0, creation.tensor(k, dtype=_int64, device=v.device)))
    idx = creation.tensor(np.stack([ar[p], bc[q]]), dtype=_int64, device=ia.device)
    out = coalesce(_make(idx, pick(va, p) * pick(vb, q), (a.shape[0], b.shape[1])))
    return out if a.is_sparse else out.to_sparse_csr()


def _addmm_rule(input, mat1, mat2, *, beta=1, alpha=1):
    if input.layout.name != "strided":
        raise NotImplementedError("addmm: a sparse input matrix is not supported")
    with no_grad():
        out = _mm_rule(mat1, mat2)
        out = out * alpha if alpha != 1 else out
        if beta != 0:       # NOTE: as dense addmm, beta == 0 ignores input (nan included)
            out = out + (input * beta if beta != 1 else input)
    return _record_as(linalg.addmm, (input, mat1, mat2), out, dict(beta=beta, alpha=alpha))


def _transpose_rule(input, dim0, dim1):
    n, sd = input.dim(), input.sparse_dim()
    d0, d1 = dim0 % n if n else 0, dim1 % n if n else 0
    if d0 >= sd or d1 >= sd:
        raise RuntimeError(f"sparse transpose: transposed dimensions must be sparse Got "
                           f"sparse_dim: {sd}, d0: {d0}, d1: {d1}")
    perm = list(range(sd))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    size = list(input.shape)
    size[d0], size[d1] = size[d1], size[d0]
    i, v = _raw(input)
    with no_grad():
        out = _wrap(i[perm], v, size, input._data.coalesced and d0 == d1)
    return _record_as(shape.transpose, (input, dim0, dim1), out)


def _t_rule(input):
    sd, dd = input.sparse_dim(), input.dense_dim()
    if sd > 2 or dd:
        raise RuntimeError(f"t() expects a tensor with <= 2 sparse and 0 dense dimensions, but "
                           f"got {sd} sparse and {dd} dense dimensions")
    if input.dim() < 2:
        return _map_values(shape.t, lambda v: v)(input)
    out = _transpose_rule(input.detach(), 0, 1)
    return _record_as(shape.t, (input,), out)


def sparse_sum(input, dim=None, dtype=None):
    """Sum of a sparse tensor over ``dim`` (all by default): dense when every sparse dim is
    summed, else sparse and coalesced (see ``torch.sparse.sum``)."""
    idx, val = _parts(input, coalesced=False)
    if dtype is not None:
        val = val.to(dtype)
    if dim is None:
        return val.sum()
    n, sd = input.dim(), input.sparse_dim()
    dims = sorted({d % n for d in ((dim,) if isinstance(dim, int) else dim)})
    dense = [d - sd + 1 for d in dims if d >= sd]
    if dense:
        val = val.sum(dense)
    keep = [d for d in range(sd) if d not in dims]
    if not keep:
        return val.sum(0)
    size = [s for d, s in enumerate(input.shape) if d not in dims]
    return coalesce(_make(idx[keep], val, size, False))


def sparse_softmax(input, dim, dtype=None, log=False):
    """(Log-)softmax over ``dim`` of the stored entries of sparse ``input``; entries that are
    not stored count as -inf, so they stay absent (``torch.sparse.softmax``)."""
    idx, val = _parts(input)
    if dtype is not None:
        val = val.to(dtype)
    n, sd = input.dim(), input.sparse_dim()
    d = dim % n
    if d >= sd:                 # over a dense dim: each stored block on its own
        out = val.log_softmax(d - sd + 1) if log else val.softmax(d - sd + 1)
        return _make(idx, out, input.shape, True)
    others = [k for k in range(sd) if k != d]
    groups = [input.shape[k] for k in others]
    key = _linear(idx[others], groups) if others else creation.zeros(idx.shape[1], dtype=_int64)
    rows = (math.prod(groups),) + tuple(val.shape[1:])
    # the max of each group only shifts the exponent (no gradient flows through it)
    top = creation.full(rows, float("-inf"), dtype=val.dtype, device=val.device).index_reduce(
        0, key, val.detach(), "amax", include_self=False)
    z = val - top.index_select(0, key)
    e = z.exp()
    total = creation.zeros(rows, dtype=val.dtype, device=val.device).index_add(0, key, e)
    out = z - total.log().index_select(0, key) if log else e / total.index_select(0, key)
    return _make(idx, out, input.shape, True)


def _sum_rule(input, dim=None, keepdim=False, *, dtype=None):
    if keepdim:
        raise NotImplementedError("sum: keepdim=True is not supported for sparse tensors")
    return sparse_sum(input, dim, dtype)


def _move(t, dev):
    """``t.to(dev)`` for a sparse tensor (no device copy of the placeholder)."""
    if not _is_sparse(t):
        from .sparse_compressed import _move as move
        return move(t, dev)
    i, v = _raw(t)
    out = _wrap(i._move(dev), v._move(dev), t.shape, t._data.coalesced)
    return _record_as(pointwise._to_device, (t, str(t.device)), out)


def _values_fn(opdef):
    """A composition for a function with f(0) == 0: applied to the coalesced values (so
    repeated indices are summed first), the pattern kept."""
    def rule(input, *args, **kwargs):
        if any(_is_sparse(a) for a in args):
            raise NotImplementedError(f"{opdef.name}: only the first operand may be sparse")
        idx, val = _parts(input)
        return _make(idx, opdef(val, *args, **kwargs), input.shape, True)
    return rule


def _pow_rule(input, exponent):
    if not (_is_sparse(input) and isinstance(exponent, _NUMBERS) and exponent > 0):
        raise NotImplementedError("pow: a sparse tensor takes only a positive number as "
                                  "exponent (the result must stay zero where it is not stored)")
    return _values_fn(pointwise.pow)(input, exponent)


def _norm_rule(input, p="fro", dim=None, keepdim=False, dtype=None):
    if dim is not None:
        raise NotImplementedError("norm: a sparse tensor's norm is taken over all its elements")
    # the absent entries are zeros: they add nothing to a p-norm with p > 0
    return _parts(input)[1].norm(2 if p == "fro" else p, dtype=dtype)


# f(0) == 0 for each: the result stays sparse with the input's (coalesced) pattern
ZERO_PRESERVING = ("abs", "sqrt", "sin", "tan", "tanh", "asin", "atan", "sinh", "asinh", "atanh",
                   "expm1", "log1p", "ceil", "floor", "trunc", "round", "frac", "erf", "erfinv",
                   "deg2rad", "rad2deg", "sign", "sgn", "relu", "square", "nan_to_num")
for _name in ZERO_PRESERVING:
    get(_name).sparse = _values_fn(get(_name))
pointwise.pow.sparse = _pow_rule
reduction.norm.sparse = _norm_rule
pointwise.neg.sparse = _map_values(pointwise.neg, lambda v: -v)
pointwise.clone.sparse = _map_values(pointwise.clone, lambda v, memory_format=None: v.clone())
pointwise._to_dtype.sparse = _map_values(pointwise._to_dtype, lambda v, dtype: v.to(dtype))
pointwise.mul.sparse = _scale_rule(pointwise.mul, lambda v, o: v * o)
pointwise.div.sparse = _scale_rule(pointwise.div, lambda v, o, rounding_mode=None:
                                   pointwise.div(v, o, rounding_mode=rounding_mode))
pointwise.add.sparse = _add_rule(pointwise.add, 1)
pointwise.sub.sparse = _add_rule(pointwise.sub, -1)
linalg.mm.sparse = linalg.matmul.sparse = _mm_rule
linalg.addmm.sparse = _addmm_rule
shape.transpose.sparse = _transpose_rule
shape.t.sparse = _t_rule
reduction.sum_.sparse = _sum_rule
_coo_mm.jvp = PRODUCT      # (forward mode: bilinear in the values and the dense operand)


# ---- the legacy products of torch's sparse COO API ----------------------------------------------

def _nonzero_rows(mat1, mat2, name):
    """The rows of sparse ``mat1`` holding entries, and those rows of ``mat1 @ mat2``."""
    if not _is_sparse(mat1):
        raise RuntimeError(f"{name}: expected 'mat1' to have sparse layout, got 'mat1' with "
                           f"layout {'Strided' if mat1.layout.name == 'strided' else 'SparseCsr'}")
    _check_mm(name, mat1, mat2)
    rows = _parts(mat1.detach())[0][0].unique_consecutive()
    return rows, _spmm(mat1, mat2, True).index_select(0, rows)


def _into(out, res):
    """``out=``: ``out`` takes the result's parts."""
    if out is None:
        return res
    out._data = res.detach()._data
    return out


def hspmm(mat1, mat2, *, out=None):
    """``mat1 @ mat2`` for a sparse COO ``mat1``, as a hybrid COO tensor: one sparse dim (the
    rows of ``mat1`` holding entries), each a dense row of the product.

    Example:
        >>> import ember
        >>> s = ember.sparse_coo_tensor([[1], [0]], [2.], (3, 2))
        >>> ember.hspmm(s, ember.ones(2, 2))
        tensor(indices=tensor([[1]]),
               values=tensor([[2., 2.]]),
               size=(3, 2), nnz=1, layout=torch.sparse_coo)
    """
    if not _is_sparse(mat1):
        from .sparse import _no_kernel
        _no_kernel(mat1, "hspmm")
    rows, vals = _nonzero_rows(mat1, mat2, "hspmm")
    res = _make(rows.unsqueeze(0), vals, (mat1.shape[0], mat2.shape[1]), False)
    return _into(out, res)


def sspaddmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * (mat1 @ mat2)`` for sparse COO ``input`` and ``mat1``, a sparse
    COO result (uncoalesced: ``input``'s entries, then the product's rows holding entries).

    Example:
        >>> import ember
        >>> s = ember.sparse_coo_tensor([[0], [1]], [3.], (2, 2))
        >>> ember.sspaddmm(s, s, ember.ones(2, 2)).to_dense()
        tensor([[3., 6.],
                [0., 0.]])
    """
    if not _is_sparse(input):
        raise RuntimeError("tensor.sspaddmm(...) can only be called on sparse tensors")
    rows, vals = _nonzero_rows(mat1, mat2, "sspaddmm")
    n, p = mat1.shape[0], mat2.shape[1]
    for d, want in ((0, n), (1, p)):
        if input.shape[d] != want:
            raise RuntimeError(f"sspaddmm: Argument #1: Expected dim {d} size {want}, got "
                               f"{input.shape[d]}")
    cols = creation.arange(p, device=rows.device)
    idx = joining.stack([rows.repeat_interleave(p), cols.repeat(rows.shape[0])])
    ii, iv = _parts(input, coalesced=False)
    res = _make(joining.cat([ii, idx], 1), joining.cat([iv * beta, vals.reshape(-1) * alpha]),
                (n, p), False)
    return _into(out, res)


def smm(input, mat):
    """``input @ mat`` for a sparse COO ``input``, as a sparse COO tensor (the rows of
    ``input`` holding entries, each a dense row of the product).

    Example:
        >>> import ember
        >>> s = ember.sparse_coo_tensor([[1], [0]], [2.], (2, 2))
        >>> ember.smm(s, ember.ones(2, 2)).to_dense()
        tensor([[0., 0.],
                [2., 2.]])
    """
    if not _is_sparse(input):
        raise RuntimeError("tensor.sspaddmm(...) can only be called on sparse tensors")
    empty = _wrap(creation.zeros((2, 0), dtype=_int64, device=input.device),
                  creation.zeros(0, dtype=input.dtype, device=input.device),
                  (input.shape[0], mat.shape[1]), True)
    return sspaddmm(empty, input, mat)


def spmm(input, mat2):
    """``torch.spmm``: ``torch.mm`` under its sparse name (dense result).

    Example:
        >>> import ember
        >>> ember.spmm(ember.eye(2).to_sparse(), ember.ones(2, 1))
        tensor([[1.],
                [1.]])
    """
    return linalg.mm(input, mat2)


FUNCTIONS.update(hspmm=hspmm, hsmm=hspmm, sspaddmm=sspaddmm, saddmm=sspaddmm, smm=smm,
                 spmm=spmm, dsmm=spmm)
Tensor.smm, Tensor.sspaddmm = smm, sspaddmm
