"""torch.* linear-algebra functions that are compositions of OpDefs (their gradients come from
the OpDefs'): the older APIs torch keeps beside torch.linalg (svd with V, qr with ``some``,
cholesky, triangular_solve, lu...). Each is also a Tensor method where torch has one."""
import ember

from .. import return_types
from .._tensor import Tensor
from .decompositions import linalg_cholesky_ex, linalg_lu_factor_ex, linalg_qr, permutation
from .eigen import linalg_svd, linalg_svdvals
from .solvers import LinAlgError, linalg_multi_dot, linalg_pinv, linalg_solve_triangular


def cholesky(input, upper=False):
    """``A = L L^H`` (``U^H U`` when ``upper``); torch.cholesky, see torch.linalg.cholesky."""
    return linalg_cholesky_ex(input, upper=upper, check_errors=True)[0]


def cholesky_solve(B, L, upper=False):
    """The X with ``A X = B`` given A's Cholesky factor ``L`` (or ``U`` when ``upper``)."""
    if upper:
        L = L.mH
    y = linalg_solve_triangular(L, B, upper=False)
    return linalg_solve_triangular(L.mH, y, upper=True)


def cholesky_inverse(L, upper=False):
    """inv(A) from A's Cholesky factor."""
    eye = ember.eye(L.shape[-1], dtype=L.dtype, device=L.device)
    return cholesky_solve(eye.expand(L.shape), L, upper)


def pinverse(input, rcond=1e-15):
    """The pseudo-inverse, singular values below ``rcond`` times the largest dropped."""
    return linalg_pinv(input, rtol=rcond)


def svd(input, some=True, compute_uv=True):
    """(U, S, V) with ``A = U diag(S) V^H`` (V, not Vh: torch's older API).

    Example:
        >>> [tuple(t.shape) for t in ember.svd(ember.ones(4, 3))]
        [(4, 3), (3,), (3, 3)]
    """
    if not compute_uv:
        # NOTE: torch returns zero-filled U (m, m) and V (n, n) then
        m, n = input.shape[-2:]
        S = linalg_svdvals(input)
        return return_types.svd(input.new_zeros(input.shape[:-2] + (m, m)), S,
                                input.new_zeros(input.shape[:-2] + (n, n)))
    U, S, Vh = linalg_svd(input, full_matrices=not some)
    return return_types.svd(U, S, Vh.mH)


def qr(input, some=True):
    """(Q, R); ``some=False`` is linalg.qr's ``mode="complete"``."""
    return return_types.qr(*linalg_qr(input, "reduced" if some else "complete"))


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """(P, L, U) from lu_factor's packed output, so that ``A = P L U``."""
    m, n = LU_data.shape[-2:]
    k = min(m, n)
    P = permutation(LU_pivots, m, LU_data) if unpack_pivots else LU_data.new_empty(0)
    if not unpack_data:
        return return_types.lu_unpack(P, LU_data.new_empty(0), LU_data.new_empty(0))
    eye = ember.eye(m, k, dtype=LU_data.dtype, device=LU_data.device)
    return return_types.lu_unpack(P, LU_data[..., :, :k].tril(-1) + eye,
                                  LU_data[..., :k, :].triu())


def lu(A, pivot=True, get_infos=False):
    """(LU, pivots[, infos]): torch.lu, see torch.linalg.lu_factor."""
    LU, pivots, info = linalg_lu_factor_ex(A, pivot=pivot)
    if get_infos:
        return LU, pivots, info
    if bool(info.any()):
        raise LinAlgError("torch.lu: U is singular (a zero pivot)")
    return LU, pivots


def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """(solution, A) solving ``A X = b`` (``A^T X = b`` when ``transpose``) for a triangular A."""
    M = A.mT if transpose else A
    X = linalg_solve_triangular(M, b, upper=upper != transpose, unitriangular=unitriangular)
    return return_types.triangular_solve(X, A.clone())


def chain_matmul(*matrices):
    """The product of matrices, multiplied in the cheapest order (torch.linalg.multi_dot)."""
    if len(matrices) == 1:
        return matrices[0].clone()
    return linalg_multi_dot(list(matrices))


def lu_solve(b, LU_data, LU_pivots):
    """The X with ``A X = b`` from A's ``lu_factor`` (torch's older argument order; see
    torch.linalg.lu_solve)."""
    return ember.linalg.lu_solve(LU_data, LU_pivots, b)


def adjoint(input):
    """The conjugate transpose of the last two dims, a view (``input.mH``).

    Example:
        >>> ember.adjoint(ember.tensor([[1, 2], [3, 4]]))
        tensor([[1, 3],
                [2, 4]])
    """
    if input.dim() < 2:
        raise RuntimeError(f"tensor.adjoint() is only supported on matrices or batches of "
                           f"matrices. Got {input.dim()}-D tensor.")
    return input.mH


def frobenius_norm(input, dim=(-2, -1), keepdim=False):
    """The 2-norm of the elements over ``dim`` (torch's older API; see torch.linalg.norm)."""
    return ember.linalg.vector_norm(input, 2, dim, keepdim)


def nuclear_norm(input, dim=None, keepdim=False):
    """The sum of the singular values of the matrices in ``dim`` (the last two when None)."""
    if isinstance(dim, bool):                       # nuclear_norm(input, keepdim)
        dim, keepdim = None, dim
    return ember.linalg.matrix_norm(input, "nuc", (-2, -1) if dim is None else dim, keepdim)


def norm_except_dim(v, pow=2, dim=0):
    """The ``pow``-norm of ``v`` over every dim but ``dim``, kept as size-1 dims (weight
    normalization's g); over all of ``v`` when ``dim`` is -1."""
    if dim == -1:
        return ember.linalg.vector_norm(v, pow)
    others = tuple(d for d in range(v.dim()) if d != dim % v.dim())
    return ember.linalg.vector_norm(v, pow, others, keepdim=True)


FUNCTIONS = {f.__name__: f for f in (cholesky, cholesky_solve, cholesky_inverse, pinverse, svd,
                                     qr, lu_unpack, lu, triangular_solve, chain_matmul, lu_solve,
                                     adjoint, frobenius_norm, nuclear_norm, norm_except_dim)}
for _name in ("cholesky", "cholesky_solve", "cholesky_inverse", "pinverse", "svd", "qr", "lu",
              "triangular_solve", "lu_solve", "adjoint"):
    setattr(Tensor, _name, FUNCTIONS[_name])
