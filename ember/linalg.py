"""torch.linalg: matrix functions, decompositions and solvers (loaded on first use).

The OpDefs live in ``ember/_ops/``'s ``solvers.py``, ``decompositions.py``, ``eigen.py`` and
``ldl.py``; this module names them as torch.linalg does and adds the compositions (norms,
cond, rank, the ``_ex`` variants, LU helpers). See https://pytorch.org/docs/stable/linalg.html

Example:
    >>> import ember
    >>> A = ember.tensor([[4., 1.], [1., 3.]])
    >>> ember.linalg.solve(A, ember.tensor([1., 2.]))
    tensor([0.0909, 0.6364])
"""
import math

import ember

from . import return_types
from ._dtype import _SCALAR_NAMES
from .autograd.composite import recorded_as
from ._ops import _dispatch, _function, decompositions, eigen, ldl, solvers
from ._ops.decompositions import linalg_cholesky_ex, linalg_lu_factor_ex
from ._ops.ldl import linalg_ldl_factor_ex
from ._ops.linalg_functions import lu_unpack
from ._ops.solvers import LinAlgError

__all__ = ["LinAlgError", "inv", "inv_ex", "det", "slogdet", "solve", "solve_ex",
           "solve_triangular", "cholesky", "cholesky_ex", "qr", "svd", "svdvals", "eig",
           "eigvals", "eigh", "eigvalsh", "lstsq", "pinv", "matrix_rank", "matrix_power",
           "matrix_exp", "multi_dot", "cond", "cross", "vecdot", "norm", "vector_norm",
           "matrix_norm", "lu", "lu_factor", "lu_factor_ex", "lu_solve", "householder_product",
           "ldl_factor", "ldl_factor_ex", "ldl_solve", "tensorinv", "tensorsolve", "matmul", "diagonal", "vander"]

inv = _function(ember.inverse.opdef, "inv")
det = ember.det
matrix_power, matrix_exp, matmul = ember.matrix_power, ember.matrix_exp, ember.matmul
# the OpDefs named linalg_<name> (in solvers.py, decompositions.py, eigen.py or ldl.py) under
# torch.linalg's names
for _name in ("solve", "solve_triangular", "cholesky_ex", "qr", "svd", "eig", "eigh", "lstsq",
              "pinv", "multi_dot", "lu_factor_ex", "ldl_factor_ex", "ldl_solve"):
    _mod = next(m for m in (solvers, decompositions, eigen, ldl) if hasattr(m, "linalg_" + _name))
    globals()[_name] = _function(getattr(_mod, "linalg_" + _name), _name)
del _name, _mod


def _values(opdef, vectors, pick):
    """torch.linalg's ``opdef`` (eigvals, eigvalsh, svdvals): where A requires grad, the
    values of ``vectors``' decomposition instead, as torch: their backward needs the vectors
    (LAPACK once, not twice; the vectors' zero gradient is skipped). Not for small A, where
    the second small call costs less than the backward's extra work."""
    def fn(A, *args, out=None, **kwargs):
        if out is None and isinstance(A, ember.Tensor) and A.requires_grad and \
                A.shape[-1] > 32 and ember.is_grad_enabled():
            return pick(vectors(A, *args, **kwargs))
        return _dispatch(opdef, (A,) + args, kwargs if out is None else dict(kwargs, out=out))
    fn.__doc__, fn.opdef, fn.__name__ = opdef.__doc__, opdef, opdef.name[len("linalg_"):]
    return fn


eigvals = _values(eigen.linalg_eigvals, eig, lambda r: r.eigenvalues)
eigvalsh = _values(eigen.linalg_eigvalsh, eigh, lambda r: r.eigenvalues)
svdvals = _values(eigen.linalg_svdvals, lambda A, driver=None: svd(
    A, False, driver=driver), lambda r: r.S)


def ldl_factor(A, *, hermitian=False):
    """(LD, pivots): the Bunch-Kaufman factorization ``A = L D L^T`` (``L D L^H`` when
    ``hermitian``) of A's lower triangle, as LAPACK's sytrf stores it; raises where D is
    singular (see ``ldl_factor_ex``).

    Example:
        >>> LD, pivots = ember.linalg.ldl_factor(ember.tensor([[4., 2.], [2., 3.]]))
        >>> LD, pivots
        (tensor([[4.0000, 0.0000],
                [0.5000, 2.0000]]), tensor([1, 2], dtype=torch.int32))
        >>> ember.linalg.ldl_solve(LD, pivots, ember.tensor([[6.], [5.]]))
        tensor([[1.],
                [1.]])
    """
    LD, pivots, info = linalg_ldl_factor_ex(A, hermitian=hermitian)
    if bool(info.any()):
        # NOTE: torch reports a singular D as an unknown LAPACK code (in an internal assert)
        raise RuntimeError(f"torch.linalg.ldl_factor: Unknown error code: {int(info.max())}.")
    return return_types.linalg_ldl_factor(LD, pivots)


def slogdet(A):
    """(sign, logabsdet) with ``det(A) = sign * exp(logabsdet)``, for a (batch of) square
    matrices; as ember.slogdet, in the named tuple torch.linalg.slogdet returns."""
    return return_types.linalg_slogdet(*ember.slogdet(A))


def cholesky(A, *, upper=False):
    """L with ``A = L L^H`` (U with ``A = U^H U`` when ``upper``) for a Hermitian
    positive-definite A; raises LinAlgError otherwise."""
    return linalg_cholesky_ex(A, upper=upper, check_errors=True)[0]


def _info_of(A):
    return linalg_lu_factor_ex(A.detach())[2]


def _ex(fn, A, *args, check_errors=False, **kwargs):
    """(fn(A, ...), info): info is LU's first zero pivot (0 for an invertible A); results
    for singular batch members are nan instead of an error, unless ``check_errors``."""
    info = _info_of(A)
    if check_errors or not bool(info.any()):
        return fn(A, *args, **kwargs), info
    ok = (info == 0)[..., None, None]
    eye = ember.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    out = fn(ember.where(ok, A, eye), *args, **kwargs)
    return ember.where(ok if out.dim() == A.dim() else ok[..., 0], out, math.nan), info


def inv_ex(A, *, check_errors=False):
    """(inverse, info), with no error for a singular A unless ``check_errors``."""
    return return_types.linalg_inv_ex(*_ex(inv, A, check_errors=check_errors))


def solve_ex(A, B, *, left=True, check_errors=False):
    """(solution, info), with no error for a singular A unless ``check_errors``."""
    return return_types.linalg_solve_ex(*_ex(solve, A, B, left=left, check_errors=check_errors))


def lu_factor(A, *, pivot=True):
    """(LU, pivots): LAPACK's packed LU with partial pivoting; raises for a singular A."""
    LU, pivots, info = linalg_lu_factor_ex(A, pivot=pivot)
    if bool(info.any()):
        i = int(info.max())
        raise LinAlgError(f"linalg.lu_factor: U[{i},{i}] is zero and using it on lu_solve "
                          "would result in a division by zero. If you still want to perform "
                          "the factorization, consider calling linalg.lu(A, pivot) or "
                          "linalg.lu_factor_ex(A, pivot)")
    return return_types.linalg_lu_factor(LU, pivots)


def lu(A, *, pivot=True):
    """(P, L, U) with ``A = P L U``."""
    LU, pivots, _ = linalg_lu_factor_ex(A, pivot=pivot)
    return return_types.linalg_lu(*lu_unpack(LU, pivots))


def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """The X with ``A X = B`` from A's LU factorization (``X A = B`` when not ``left``;
    A^H instead of A when ``adjoint``)."""
    P, L, U = lu_unpack(LU, pivots)
    st = solve_triangular
    if left and not adjoint:        # X = U^-1 L^-1 P^T B
        return st(U, st(L, P.mT @ B, upper=False, unitriangular=True), upper=True)
    if left:                        # A^H = U^H L^H P^T:  X = P L^-H U^-H B
        y = st(U.mH, B, upper=False)
        return P @ st(L.mH, y, upper=True, unitriangular=True)
    if not adjoint:                 # X P L U = B
        y = st(U, B, upper=True, left=False)
        return st(L, y, upper=False, left=False, unitriangular=True) @ P.mT
    y = st(L.mH, B @ P, upper=True, left=False, unitriangular=True)
    return st(U.mH, y, upper=False, left=False)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The vector ``ord``-norm over ``dim`` (all elements when None)."""
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    return ember.norm(x, ord, dim, keepdim, dtype=dtype)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """Matrix norm over the two dims ``dim``: 'fro', 'nuc', inf, -inf, 1, -1, 2, -2."""
    if A.dim() < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 "
                           "dimensions.")
    if dtype is not None:
        A = A.to(dtype)
    d0, d1 = dim[0] % A.dim(), dim[1] % A.dim()
    if ord == "fro":
        return ember.norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        sv = svdvals(A.movedim((d0, d1), (-2, -1)))
        r = sv.sum(-1) if ord == "nuc" else sv.amax(-1) if ord == 2 else sv.amin(-1)
        return r.unsqueeze(min(d0, d1)).unsqueeze(max(d0, d1)) if keepdim else r
    if ord not in (1, -1, math.inf, -math.inf):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    # 1: max column sum (sum over rows d0); inf: max row sum
    s_dim, m_dim = (d0, d1) if abs(ord) == 1 else (d1, d0)
    s = A.abs().sum(s_dim, keepdim=True)
    r = s.amax(m_dim, keepdim=True) if ord > 0 else s.amin(m_dim, keepdim=True)
    return r if keepdim else r.squeeze((d0, d1))


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """A vector norm, or a matrix norm when ``ord`` is a string or ``dim`` has two dims (or
    ``dim`` is None, ``ord`` given and A is 2-D)."""
    if dim is not None and not isinstance(dim, int) and len(dim) == 2 or \
            isinstance(ord, str) or (dim is None and ord is not None and A.dim() == 2):
        return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim,
                           keepdim, dtype=dtype)
    return vector_norm(A.flatten() if dim is None and ord is not None else A,
                       2 if ord is None else ord, dim, keepdim, dtype=dtype)


def cond(A, p=None):
    """The condition number of A in the ``p`` norm (2 by default: largest / smallest
    singular value)."""
    if p in (None, 2, -2):
        s = svdvals(A)
        r = s[..., 0] / s[..., -1]
        return r if p != -2 else 1 / r
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, tol=None):
    """The number of singular values above ``max(atol, rtol * largest)``."""
    if tol is not None:
        atol, rtol = tol, 0.0
    s = eigvalsh(A).abs() if hermitian else svdvals(A)
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else \
            ember.finfo(s.dtype).eps * max(A.shape[-2:])
    smax = s.amax(-1, keepdim=True) if s.shape[-1] else s
    thresh = ember.clamp(smax * rtol, min=atol or 0.0)
    return (s > thresh).sum(-1)


def cross(input, other, *, dim=-1):
    """Cross product of 3-vectors along ``dim``, broadcasting the others."""
    return ember.cross(input, other, dim)


def vecdot(x, y, *, dim=-1):
    """``sum(conj(x) * y, dim)``."""
    return (x.conj() * y).sum(dim)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """The diagonal of the last two dims (a view)."""
    return A.diagonal(offset, dim1, dim2)


@recorded_as("LinalgHouseholderProductBackward0")
def householder_product(A, tau):
    """The first n columns of ``H_1 ... H_k``, ``H_i = I - tau_i v_i v_i^H`` with ``v_i`` the
    unit-diagonal lower part of column i of A (LAPACK's orgqr)."""
    name = "torch.linalg.householder_product"
    if A.dim() < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if A.shape[-2] < A.shape[-1]:
        raise RuntimeError(f"{name}: input.shape[-2] must be greater than or equal to "
                           "input.shape[-1]")
    if A.shape[-1] < tau.shape[-1]:
        raise RuntimeError(f"{name}: input.shape[-1] must be greater than or equal to "
                           "tau.shape[-1]")
    if A.dim() - tau.dim() != 1:
        raise RuntimeError(f"{name}: Expected tau to have one dimension less than input, but got "
                           f"tau.ndim equal to {tau.dim()} and input.ndim is equal to {A.dim()}")
    if tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"{name}: Expected batch dimensions of tau to be equal to "
                           f"input.shape[:-2], but got {list(tau.shape[:-1])}")
    if tau.dtype != A.dtype:
        raise RuntimeError(f"{name}: tau dtype {_SCALAR_NAMES[tau.dtype.name]} does not match "
                           f"input dtype {_SCALAR_NAMES[A.dtype.name]}")
    m, n = A.shape[-2], A.shape[-1]
    k = tau.shape[-1]
    eye = ember.eye(m, dtype=A.dtype, device=A.device)
    q = eye.expand(*A.shape[:-2], m, m)
    rows = ember.arange(m, device=A.device)
    for i in range(k):
        v = A[..., :, i] * (rows > i).to(A.dtype) + (rows == i).to(A.dtype)
        q = q - (q @ v.unsqueeze(-1)) * (tau[..., i, None, None] * v.conj().unsqueeze(-2))
    return q[..., :, :n]


def tensorinv(A, ind=2):
    """The inverse of A read as a matrix of its first ``ind`` dims by the rest."""
    out_shape, in_shape = A.shape[:ind], A.shape[ind:]
    n = math.prod(out_shape)
    return inv(A.reshape(n, -1)).reshape(tuple(in_shape) + tuple(out_shape))


def tensorsolve(A, B, dims=None):
    """The X with ``tensordot(A, X, X.ndim) = B``."""
    if dims is not None:
        A = A.movedim(dims, tuple(range(A.dim() - len(dims), A.dim())))
    x_shape = A.shape[B.dim():]
    return solve(A.reshape(B.numel(), -1), B.reshape(-1)).reshape(x_shape)


def vander(x, *, N=None):
    """The Vandermonde matrices of ``x`` (..., n): ``[..., i, j] = x[..., i] ** j`` for j < N
    (N defaults to n), in ``x``'s dtype.

    Example:
        >>> ember.linalg.vander(ember.tensor([1, 2, 3]))
        tensor([[1, 1, 1],
                [1, 2, 4],
                [1, 3, 9]])
    """
    from ._composites import powers
    n = x.shape[-1] if x.dim() and N is None else N
    if x.dim() == 0 or n is None or n <= 1:
        raise RuntimeError("N must be greater than 1.")
    return powers(x, n)
