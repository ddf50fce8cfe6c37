"""Batching rules of the matrix products and linear algebra: the batch dim as one more
leading (batch) dim of the operands."""
import functools

import ember

from ..._tensor import Tensor
from .batched import _level_of, _map_out, _pad, _size, _wrap, lift_one
from .generic import _decomposed, _empty_batched, _loop, _trailing


def _matmul(opdef, level, args, kwargs):
    a, b = args[:2]
    va, vb = a.dim() == 1, b.dim() == 1
    a, b = (a.unsqueeze(0) if va else a), (b.unsqueeze(-1) if vb else b)
    rank = max(a.dim(), b.dim())
    out = ember.matmul(_pad(a, level, rank), _pad(b, level, rank))
    out = out.squeeze(-1) if vb else out
    return _wrap(out.squeeze(-1 if vb else -2) if va else out, level)


def _einsum(opdef, level, args, kwargs):
    """A new letter for the batch dim, on the batched operands and first in the output (before
    an ellipsis, whose dims follow it as the example's do)."""
    eq, ops = args[0].replace(" ", ""), list(args[1])
    ins, _, out = eq.partition("->")
    ins = ins.split(",")
    if "->" not in eq:
        seen = "".join(ins).replace(".", "")
        out = "..." * ("..." in eq) + "".join(sorted(c for c in set(seen) if seen.count(c) == 1))
    z = next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA" if c not in eq)
    ins = [z + sub if _level_of(o) == level else sub for sub, o in zip(ins, ops)]
    ops = [o._value if _level_of(o) == level else o for o in ops]
    return _wrap(opdef(",".join(ins) + "->" + z + out, ops), level)


def _cross(opdef, level, args, kwargs):
    a, b = args[:2]
    dim = args[2] if len(args) > 2 else kwargs.get("dim")
    if a.dim() != b.dim():
        return _loop(opdef, level, args, kwargs)
    if dim is None:
        shape = [max(p, q) for p, q in zip(a.shape, b.shape)]
        dim = shape.index(3) if 3 in shape else 0
    n = _size(level)
    return _wrap(opdef(lift_one(a, level, n), lift_one(b, level, n), dim % a.dim() + 1), level)


def _all_lifted(opdef, level, args, kwargs):
    """Ops that treat leading dims as batch dims (cdist, solve_triangular, lstsq): every
    tensor operand batched (expanded where not) and padded to the same rank, so that the
    examples' own batch dims broadcast as they do unbatched. An empty per-example result
    (lstsq's residuals) gains the batch dim."""
    n = _size(level)
    ts = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
    if opdef.name == "linalg_solve" and (ts[1].dim() == 1 or ts[1].dim() == ts[0].dim() - 1
                                         and ts[1].shape == ts[0].shape[:-1]):
        # an example's vector B (torch's rule, which the batch dim would change) as a column,
        # a row where left=False
        d = -1 if kwargs.get("left", True) else -2
        return _all_lifted(opdef, level, (ts[0], ts[1].unsqueeze(d)), kwargs).squeeze(d)
    rank = max(t.dim() for t in ts)

    def lift_(a):
        if not isinstance(a, Tensor):
            return a
        v = lift_one(a, level, n)
        return v if rank is None else v.reshape(n, *(1,) * (rank - a.dim()), *v.shape[1:])
    out = opdef(*map(lift_, args), **{k: lift_(v) for k, v in kwargs.items()})
    return _map_out(_empty_batched(out, n), level)


def _ldl_solve(opdef, level, args, kwargs):
    """ldl_solve: LD (..., n, n), pivots (..., n) and B (..., n, k) each batched and given the
    same number of batch dims, so the examples' own batch dims broadcast as unbatched."""
    n, a = _size(level), dict(zip(opdef.params, args), **kwargs)
    ts = [(a["LD"], 2), (a["pivots"], 1), (a["B"], 2)]
    r = max(t.dim() - c for t, c in ts)
    lifted = [lift_one(t, level, n).reshape(n, *(1,) * (r - t.dim() + c), *t.shape) for t, c in ts]
    return _map_out(opdef(*lifted, hermitian=a.get("hermitian", False)), level)


def _tensordot(a, b, dims=2):
    if isinstance(dims, int):
        da, db = list(range(a.dim() - dims, a.dim())), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    da, db = [d % max(a.dim(), 1) for d in da], [d % max(b.dim(), 1) for d in db]
    la = "abcdefghijklm"[:a.dim()]
    lb = list("nopqrstuvwxyz"[:b.dim()])
    for i, j in zip(da, db):
        lb[j] = la[i]
    lb = "".join(lb)
    out = "".join(c for i, c in enumerate(la) if i not in da) + "".join(
        c for j, c in enumerate(lb) if j not in db)
    return ember.einsum(f"{la},{lb}->{out}", a, b)


def _kron(a, b):
    r = max(a.dim(), b.dim())
    a, b = a.reshape(*(1,) * (r - a.dim()), *a.shape), b.reshape(*(1,) * (r - b.dim()), *b.shape)
    ai = a.reshape(*(s for n in a.shape for s in (n, 1)))
    bi = b.reshape(*(s for n in b.shape for s in (1, n)))
    return (ai * bi).reshape(*(p * q for p, q in zip(a.shape, b.shape)))


def _block_diag(*ts):
    ts = [t.reshape(1, -1) if t.dim() < 2 else t for t in ts]
    width = sum(t.shape[1] for t in ts)
    dt = functools.reduce(ember.promote_types, [t.dtype for t in ts])
    rows, left = [], 0
    for t in ts:
        z = lambda w: ember.zeros(t.shape[0], w, dtype=dt, device=t.device)  # noqa: E731
        rows.append(ember.cat([z(left), t.to(dt), z(width - left - t.shape[1])], 1))
        left += t.shape[1]
    return ember.cat(rows, 0) if rows else ember.zeros(0, 0)


def _cartesian_prod(*ts):
    if len(ts) == 1:
        return ts[0]
    k = len(ts)
    sizes = [t.shape[0] for t in ts]
    grid = [t.reshape(*(1,) * i, -1, *(1,) * (k - i - 1)).expand(*sizes) for i, t in enumerate(ts)]
    return ember.stack(grid, -1).reshape(-1, k)


def _combinations(x, r=2, with_replacement=False):
    idx = ember.combinations(ember.arange(x.shape[0], device=x.device), r, with_replacement)
    return x.index_select(0, idx.reshape(-1)).reshape(idx.shape)


_addmm = _decomposed(lambda i, a, b, beta=1, alpha=1: beta * i + alpha * (a @ b))
RULES = {"matmul": _matmul, "mm": _matmul, "bmm": _matmul, "mv": _matmul, "dot": _matmul,
         "addmm": _addmm, "addmv": _addmm, "baddbmm": _addmm,
         "addbmm": _decomposed(lambda i, a, b, beta=1, alpha=1:
                               beta * i + alpha * (a @ b).sum(0)),
         "addr": _decomposed(lambda i, a, b, beta=1, alpha=1:
                             beta * i + alpha * a.unsqueeze(-1) * b),
         "outer": _decomposed(lambda a, b: a.unsqueeze(-1) * b),
         "vdot": _decomposed(lambda a, b: (a.conj() * b).sum()),
         "trace": _decomposed(lambda x: x.diagonal().sum()),
         "einsum": _einsum, "cross": _cross,
         "cdist": _all_lifted, "linalg_solve": _all_lifted,
         "linalg_solve_triangular": _all_lifted, "linalg_lstsq": _all_lifted,
         "linalg_ldl_solve": _ldl_solve,
         "tensordot": _decomposed(_tensordot), "kron": _decomposed(_kron),
         "inner": _decomposed(lambda a, b: a * b if a.dim() == 0 or b.dim() == 0 else
                              _tensordot(a, b, ([-1], [-1]))),
         "linalg_multi_dot": _decomposed(lambda ts: functools.reduce(ember.matmul, ts)),
         "block_diag": _decomposed(_block_diag), "cartesian_prod": _decomposed(_cartesian_prod),
         "combinations": _decomposed(_combinations),
         **dict.fromkeys(("det", "inverse", "slogdet", "logdet", "matrix_exp", "matrix_power",
                          "linalg_cholesky_ex", "linalg_eig", "linalg_eigh", "linalg_eigvals",
                          "linalg_eigvalsh", "linalg_pinv", "linalg_qr", "linalg_svd",
                          "linalg_svdvals", "linalg_lu_factor_ex", "linalg_ldl_factor_ex",
                          "geqrf"), _trailing(0))}
