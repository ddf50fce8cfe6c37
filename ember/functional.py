"""``ember.functional``: the module torch exposes as ``torch.functional`` (``einsum``, ``norm``,
``split``, ``stft``...), which tutorials import; each name is ember's own function. The low-rank
SVD and PCA (Halko et al. 2009, as torch's ``_lowrank``) live here.

Example:
    >>> import ember
    >>> from ember.functional import einsum
    >>> einsum("ij->j", ember.ones(2, 3))
    tensor([2., 2., 2.])
"""
import ember

__all__ = ["atleast_1d", "atleast_2d", "atleast_3d", "block_diag", "broadcast_shapes",
           "broadcast_tensors", "cartesian_prod", "cdist", "chain_matmul", "einsum", "istft",
           "lu", "meshgrid", "norm", "pca_lowrank", "split", "stft", "svd_lowrank", "tensordot",
           "unique", "unique_consecutive", "unravel_index"]


def _approximate_basis(A, q, niter, M):
    """An orthonormal basis of ``q`` columns approximating the range of ``A - M``: a random
    projection refined by ``niter`` subspace (power) iterations."""
    R = ember.randn(A.shape[-1], q, dtype=A.dtype, device=A.device)

    def apply(X, Y):
        return X @ Y if M is None else X @ Y - (M if X is A else M.mH) @ Y
    Q = ember.linalg.qr(apply(A, R)).Q
    for _ in range(niter):
        Q = ember.linalg.qr(apply(A.mH, Q)).Q
        Q = ember.linalg.qr(apply(A, Q)).Q
    return Q


def svd_lowrank(A, q=6, niter=2, M=None):
    """An approximate rank-``q`` SVD ``(U, S, V)`` of ``A - M`` (``A ~ U diag(S) V^H``) by
    randomized subspace iteration, as ``torch.svd_lowrank``; batched, differentiable.

    Example:
        >>> import ember
        >>> A = ember.randn(20, 3) @ ember.randn(3, 10)         # rank 3
        >>> U, S, V = ember.svd_lowrank(A, q=3)
        >>> bool(ember.allclose(U @ ember.diag(S) @ V.mT, A, atol=1e-4))
        True
    """
    q = 6 if q is None else q
    m, n = A.shape[-2:]
    if M is not None:
        M = M.broadcast_to(A.shape)
    if m < n:
        A, M = A.mH, (None if M is None else M.mH)
    Q = _approximate_basis(A, q, 2 if niter is None else niter, M)
    B = Q.mH @ A if M is None else Q.mH @ A - Q.mH @ M
    U, S, Vh = ember.linalg.svd(B, full_matrices=False)
    U, V = Q @ U, Vh.mH
    return (V, S, U) if m < n else (U, S, V)


def pca_lowrank(A, q=None, center=True, niter=2):
    """The principal components of ``A``'s rows: ``svd_lowrank`` of ``A`` less its column
    means (``center``), with ``q = min(6, m, n)`` by default, as ``torch.pca_lowrank``.

    Example:
        >>> import ember
        >>> U, S, V = ember.pca_lowrank(ember.randn(50, 4), q=2)
        >>> tuple(U.shape), tuple(S.shape), tuple(V.shape)
        ((50, 2), (2,), (4, 2))
    """
    m, n = A.shape[-2:]
    if q is None:
        q = min(6, m, n)
    elif not 0 <= q <= min(m, n):
        raise ValueError(f"q(={q}) must be non-negative integer and not greater than "
                         f"min(m, n)={min(m, n)}")
    if not niter >= 0:
        raise ValueError(f"niter(={niter}) must be non-negative integer")
    return svd_lowrank(A - A.mean(dim=-2, keepdim=True) if center else A, q, niter=niter)


def __getattr__(name):
    if name in __all__:
        return getattr(ember, name)
    raise AttributeError(f"module 'ember.functional' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(__all__))
