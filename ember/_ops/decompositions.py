"""Triangular factorizations: linalg.cholesky_ex, linalg.qr, geqrf, linalg.lu_factor_ex,
with their backwards and forward-mode rules, written in ember ops. The singular and eigen
decompositions live in eigen.py, Bunch-Kaufman LDL^T in ldl.py."""
import ctypes
import math

import numpy as np

import ember

from .._backends import blas
from .._C import kernels as _C

from .meta import empty
from .pointwise import _zeroed, triu, type_name
from .tangents import decomposed, fallback_unless
from .registry import op
from .samples import ErrorSample, Sample, const, make
from .solvers import C_INT, P, LinAlgError, check_matrix, lapack_each, lapack_rows, \
    linalg_samples

_CHOL = ("{}The factorization could not be completed because the input is not "
         "positive-definite (the leading minor of order {} is not positive-definite).")


def _spd_samples(dev, dt):
    """Hermitian positive-definite matrices: cholesky and eigh read one triangle only, and
    their tests symmetrize (``hermitian_input``), so any well-conditioned A works."""
    out = []
    for s in linalg_samples((3, 3), (2, 4, 4))(dev, dt):
        a = s.args[0]
        out.append(Sample(a @ np.conj(np.swapaxes(a, -1, -2))))
    return out


# ---- cholesky ---------------------------------------------------------------------------------

@op("linalg_cholesky_ex", function=False, method=False, nondiff_outputs=(1,), returns=("L", "info"))
def linalg_cholesky_ex(xp, A, *, upper=False, check_errors=False):
    """(L, info): ``A = L L^H`` from A's lower triangle; info is 0, or the order of the first
    leading minor that is not positive-definite (L is then unspecified)."""
    check_matrix("linalg.cholesky", A)
    batch, n = A.shape[:-2], A.shape[-1]
    if fn := _small_factor(xp, A):
        L, info = A.copy(), np.empty(batch, np.int32)
        fn(0, blas.ptr(L), 0, 0, blas.ptr(info), 0, info.size, n, n, 0)
        if not (upper or check_errors):
            return L, info
    flat = A.reshape((math.prod(batch),) + A.shape[-2:])
    potrf = not fn and xp is np and blas.lapack("potrf_work", A.dtype, C_INT, ctypes.c_char,
                                                int, P, int)
    if potrf:
        # LAPACK's potrf on the row-major buffer read column-major (A^T = conj(A)) with 'U'
        # leaves L there: no transposes, and info is LAPACK's, as torch's
        L = flat.copy()
        p, step = blas.ptr(L), L.strides[0]
        info = np.array([potrf(102, b"U", n, p + b * step, max(n, 1)) for b in range(len(L))],
                        np.int32)
        np.copyto(L, 0, where=_zeroed(np, n, n, 0, "tril"))     # (tril in place, mask cached)
    elif not fn:
        info = np.zeros(flat.shape[0], np.int32)
        try:
            L = xp.linalg.cholesky(flat)
        except xp.linalg.LinAlgError:
            L = xp.full_like(flat, np.nan)
            for b in range(flat.shape[0]):
                try:
                    L[b] = xp.linalg.cholesky(flat[b])
                except xp.linalg.LinAlgError:
                    info[b] = next(k for k in range(1, n + 1) if not _is_pd(xp, flat[b, :k, :k]))
    if check_errors and info.any():
        b = int(np.flatnonzero(info)[0])
        where = f"(Batch element {b}): " if batch else ""
        raise LinAlgError("linalg.cholesky: " + _CHOL.format(where, info.flat[b]))
    L = L.reshape(A.shape)
    return (L.conj().swapaxes(-1, -2) if upper else L), xp.asarray(info.reshape(batch))


def _small_factor(xp, A):
    """factor.h's kernel for real matrices of up to 32 rows and columns, where the C loops
    beat OpenBLAS's LAPACK calls' setup; None elsewhere (LAPACK, or the NumPy reference)."""
    return xp is np and max(A.shape[-2:]) <= 32 and _C.kernel("factor", A.dtype)


def _is_pd(xp, a):
    try:
        xp.linalg.cholesky(a)
        return True
    except xp.linalg.LinAlgError:
        return False


@linalg_cholesky_ex.vjp(save=("result",))
def _(grads, A, *, upper=False, check_errors=False, result=None):
    gL, L = grads[0], result[0]
    if upper:
        L, gL = L.mH, gL.mH
    # torch's cholesky_backward: gA = L^-H Phi(L^H gL) L^-1, Phi taking the Hermitian part
    gA = (L.mH @ gL).tril()
    gA = 0.5 * (gA + gA.tril(-1).mH)
    solve = ember.linalg.solve_triangular
    gA = solve(L.mH, gA, upper=True, left=True)
    return solve(L, gA, upper=False, left=False)


linalg_cholesky_ex.torch_fn = "linalg.cholesky_ex"
linalg_cholesky_ex.hermitian_input = True
linalg_cholesky_ex.meta = lambda A, **kw: (empty(A.shape, A.dtype), empty(A.shape[:-2], np.int32))
linalg_cholesky_ex.samples = lambda dev, dt: _spd_samples(dev, dt) + [
    Sample(s.args[0], upper=True) for s in _spd_samples(dev, dt)[:1]]
linalg_cholesky_ex.errors = [
    ErrorSample(Sample(-np.eye(2), check_errors=True), RuntimeError,
                r"linalg.cholesky: The factorization could not be completed because the input is "
                r"not positive-definite \(the leading minor of order 1 is not positive-definite\)"),
    ErrorSample(Sample(const(2, 3)), RuntimeError,
                "linalg.cholesky: A must be batches of square matrices")]


# ---- qr ---------------------------------------------------------------------------------------

@op("linalg_qr", function=False, method=False, returns=("Q", "R"))
def linalg_qr(xp, A, mode="reduced"):
    """(Q, R) with ``A = Q R``, Q with orthonormal columns, R upper triangular. ``mode``:
    ``"reduced"`` (k = min(m, n) columns), ``"complete"`` (Q square) or ``"r"`` (Q empty)."""
    check_matrix("linalg.qr", A, square=False)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError("qr received unrecognized mode '" + str(mode) +
                           "' but expected one of 'reduced' (default), 'r', or 'complete'")
    m, n = A.shape[-2:]
    k, batch = min(m, n), A.shape[:-2]
    cols = m if mode == "complete" else k       # (R's rows too)
    if fn := _small_factor(xp, A):      # (R, zeros below it, and Q, in one call)
        a, q = A.copy(), None if mode == "r" else np.empty(batch + (m, cols), A.dtype)
        fn(2, blas.ptr(a), blas.ptr(np.empty(batch + (k,), A.dtype)), 0, 0,
           0 if q is None else blas.ptr(q), math.prod(batch), m, n, cols)
        return (np.zeros((0,), A.dtype) if q is None else q), a[..., :cols, :]
    a, tau = _geqrf(xp, A)
    if a is None:
        return (xp.zeros((0,), A.dtype), xp.linalg.qr(A, mode="r")) if mode == "r" else \
            tuple(xp.linalg.qr(A, mode=mode))
    # as torch: geqrf, then orgqr (ungqr) builds Q's first columns from the reflectors
    R = triu.fwd(np, a[:, :cols]).reshape(batch + (cols, n))
    if mode == "r":
        return np.zeros((0,), A.dtype), R
    if cols == n:       # (then k == n: Q's columns are all of a's, R is copied out above)
        q = a.swapaxes(1, 2)        # (LAPACK's column-major a, C-contiguous: orgqr's in place)
    else:
        q = np.zeros((len(a), cols, m), A.dtype)       # (Q^T: column-major Q)
        q[:, :k] = a.swapaxes(1, 2)[:, :k]
    orgqr = blas.lapack("orgqr" if A.dtype.kind == "f" else "ungqr", A.dtype, C_INT, int, int,
                        int, P, int, P)
    pq, pt = blas.ptr(q), blas.ptr(tau)
    for i in range(len(q)):
        orgqr(102, m, cols, k, pq + i * q.strides[0], max(1, m), pt + i * tau.strides[0])
    return q.swapaxes(1, 2).reshape(batch + (m, cols)), R


def _geqrf(xp, A):
    """LAPACK's geqrf on the matrices of A, as NumPy's qr in float64 would not: (the (b, m, n)
    column-major factored matrices, their scales tau (b, k)); (None, None) without LAPACKE."""
    fn = xp is np and blas.lapack("geqrf", A.dtype, C_INT, int, int, P, int, P)
    m, n = A.shape[-2:]
    a = A.reshape((math.prod(A.shape[:-2]), m, n))
    if small := _small_factor(xp, A):
        a, tau = a.copy(), np.empty((len(a), min(m, n)), A.dtype)
        small(2, blas.ptr(a), blas.ptr(tau), 0, 0, 0, len(a), m, n, 0)
        return a, tau
    k = min(m, n)
    if fn and k >= 64 and (geqrt := blas.lapack("geqrt", A.dtype, C_INT, int, int, int, P,
                                                   int, P, int)):
        # geqrt, blocks of 64 columns with recursive (GEMM-rich) panels, returns the same
        # reflectors as geqrf, whose unblocked 32-column panels run on one thread: at two
        # threads OpenBLAS's geqrf gains 1.1-1.25x over one, geqrt ~1.3x (MKL's ~1.4x).
        # tau_i is T's diagonal (T: 64 x k, column-major, per matrix; zeros: LAPACKE leaves
        # a matrix with a NaN alone, as it does in geqrf, whose tau is then 0).
        f, t = np.array(a.swapaxes(-1, -2), order="C"), np.zeros((len(a), k, 64), A.dtype)
        for b in range(len(f)):
            geqrt(102, m, n, 64, blas.ptr(f[b]), max(1, m), blas.ptr(t[b]), 64)
        return f.swapaxes(-1, -2), np.ascontiguousarray(t[:, np.arange(k), np.arange(k) % 64])
    return lapack_each(fn, a, m, n, out=A.dtype)[:2] if fn else (None, None)


def _qr_backward(gQ, gR, Q, R):
    """gA = [gQ + Q S(M)] R^-H for m >= n, M = gR R^H - Q^H gQ, where S(M) copies M's strict
    upper triangle onto the lower one (conjugated) and keeps the real part of its diagonal:
    the derivative of Q^H dQ (skew-Hermitian) and dR R^-1 (upper, real diagonal)."""
    M = gR @ R.mH if gR is not None else None
    if gQ is not None:
        M = -(Q.mH @ gQ) if M is None else M - Q.mH @ gQ
    upper = M.triu(1)
    d = M.diagonal(dim1=-2, dim2=-1)
    S = upper + upper.mH + ember.diag_embed(d.real if d.is_complex() else d).to(M.dtype)
    gA = Q @ S
    if gQ is not None:
        gA = gA + gQ
    return ember.linalg.solve_triangular(R.mH, gA, upper=False, left=False)


@linalg_qr.vjp(save=("A", "result"))
def _(grads, A, mode="reduced", result=None):
    gQ, gR = grads
    Q, R = result
    m, n = A.shape[-2], A.shape[-1]
    if mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed "
                           "when mode='r'. Please use linalg.qr(A, mode='reduced') if you are "
                           "going to differentiate through linalg.qr.")
    if mode == "complete" and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' "
                           "and nrows > ncols.")
    if m >= n:
        return _qr_backward(gQ, gR, Q, R)
    # wide: A = [X | Y], R = [U | V]; X = Q U is a square QR, Y = Q V
    X, Y = A[..., :m], A[..., m:]
    U = R[..., :m]
    gV = gR[..., m:] if gR is not None else None
    gU = gR[..., :m] if gR is not None else None
    gY = Q @ gV if gV is not None else ember.zeros_like(Y)
    gQ2 = gQ if gV is None else (Y @ gV.mH if gQ is None else gQ + Y @ gV.mH)
    return ember.cat([_qr_backward(gQ2, gU, Q, U), gY], -1)


linalg_qr.torch_fn = "linalg.qr"
# (triangular solves go through LU here, torch's through trsm: last digits differ)
linalg_qr.tol = {"grad": (1e-8, 1e-10)}
linalg_qr.gauge = lambda out: _phase_diag(*out)


def _phase_diag(Q, R):
    # Q D, D^H R with D the phases of diag(R): R's diagonal becomes real positive
    d = R.diagonal(dim1=-2, dim2=-1)
    p = d / d.abs()
    return (Q[..., :, :p.shape[-1]] * p.unsqueeze(-2) if Q.numel() else Q,
            R * p.conj().unsqueeze(-1))


def _qr_meta(A, mode="reduced"):
    m, n = A.shape[-2:]
    k = m if mode == "complete" else min(m, n)
    q = empty((0,), A.dtype) if mode == "r" else empty(A.shape[:-2] + (m, k), A.dtype)
    return q, empty(A.shape[:-2] + ((m if mode == "complete" else k), n), A.dtype)


linalg_qr.meta = _qr_meta
linalg_qr.samples = lambda dev, dt: [
    Sample(make((4, 3), dt)), Sample(make((2, 3, 3), dt)), Sample(make((3, 5), dt)),
    Sample(make((3, 3), dt), "complete"), Sample(make((4, 3), dt), "r").forward_only()] \
    if dt.category >= 2 and dt.name != "bfloat16" else []
linalg_qr.errors = [ErrorSample(Sample(const(3)), RuntimeError,
                                "linalg.qr: The input tensor A must have at least 2 dimensions")]


@op("geqrf", returns=("a", "tau"))
def geqrf(xp, input):
    """LAPACK's geqrf, the QR factorization as LAPACK stores it: R on and above the diagonal
    of ``a``, the Householder vectors below it, and their scales ``tau``
    (:func:`ember.linalg.householder_product` builds Q from them). See torch.geqrf.

    Example:
        >>> a, tau = ember.geqrf(ember.tensor([[3., 1.], [4., 2.]]))
        >>> a
        tensor([[-5.0000, -2.2000],
                [ 0.5000,  0.4000]])
    """
    if input.dtype.kind not in "fc" or input.dtype.itemsize < 4:
        raise NotImplementedError(f"\"geqrf_cpu\" not implemented for '{type_name(input.dtype)}'")
    if input.ndim < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    a, tau = _geqrf(xp, input)
    if a is not None:   # (column-major, as torch's)
        return a.reshape(input.shape), tau.reshape(input.shape[:-2] + tau.shape[-1:])
    h, tau = xp.linalg.qr(input, mode="raw")        # (h is a^T: LAPACK's column-major a)
    return (xp.ascontiguousarray(h.swapaxes(-1, -2)).astype(input.dtype, copy=False),
            tau.astype(input.dtype, copy=False))


# NOTE: torch has no derivative for geqrf: backward through it raises, as in torch
geqrf.meta = lambda input: (empty(input.shape, input.dtype),
                            empty(input.shape[:-2] + (min(input.shape[-2:]),), input.dtype))
geqrf.samples = lambda dev, dt: [
    Sample(make((4, 3), dt)).forward_only(), Sample(make((2, 3, 5), dt)).forward_only(),
    Sample(make((3, 3), dt)).forward_only()] if dt.category >= 2 and dt.name != "bfloat16" else []
geqrf.errors = [
    ErrorSample(Sample(const(3)), RuntimeError, "torch.geqrf: input must have at least 2 dim"),
    ErrorSample(Sample(const(2, 2, dtype=np.int64)), NotImplementedError,
                "\"geqrf_cpu\" not implemented for 'Long'")]


# ---- LU ---------------------------------------------------------------------------------------

@op("linalg_lu_factor_ex", function=False, method=False, nondiff_outputs=(1, 2),
    returns=("LU", "pivots", "info"))
def linalg_lu_factor_ex(xp, A, *, pivot=True, check_errors=False):
    """LAPACK's getrf: (LU, pivots, info) with ``A = P L U``, L unit lower triangular packed
    below U; pivots are 1-based row swaps (int32); info the first zero pivot (1-based) or 0."""
    if A.ndim < 2:
        raise RuntimeError("torch.lu_factor: Expected tensor with 2 or more dimensions. Got "
                           f"size: {list(A.shape)} instead")
    check_matrix("linalg.lu_factor", A, square=False)
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    (m, n), batch = A.shape[-2:], A.shape[:-2]
    k = min(m, n)
    if small := _small_factor(xp, A):
        a, piv, info = A.copy(), np.empty(batch + (k,), np.int32), np.empty(batch, np.int32)
        small(1, blas.ptr(a), 0, blas.ptr(piv), blas.ptr(info), 0, info.size, m, n, 0)
    else:
        a = A.reshape((math.prod(batch), m, n)).copy()  # (-1 is ambiguous for an empty A)
        getrf = xp is np and blas.lapack("getrf_work", A.dtype, C_INT, int, int, P, int, P)
        if getrf:       # LAPACK's getrf, as torch: its pivots, blocked with GEMM updates
            piv, info = lapack_rows(getrf, a, m, n)
            info = np.array(info, np.int32)
        else:
            piv, info = xp.zeros((a.shape[0], k), np.int32), xp.zeros(a.shape[0], np.int32)
        rows = xp.arange(a.shape[0])
        for j in range(0 if not getrf else k, k):
            col = a[:, j:, j]
            # NOTE: LAPACK's i?amax ranks complex entries by |re| + |im|, not the modulus
            mag = xp.abs(col.real) + xp.abs(col.imag) if a.dtype.kind == "c" else xp.abs(col)
            p = j + xp.argmax(mag, axis=1)
            piv[:, j] = p + 1
            row_j, row_p = a[rows, j].copy(), a[rows, p].copy()
            a[rows, j], a[rows, p] = row_p, row_j
            d = a[:, j, j]
            zero = d == 0
            info = xp.where(zero & (info == 0), j + 1, info)
            a[:, j + 1:, j] /= xp.where(zero, 1, d)[:, None]
            a[:, j + 1:, j + 1:] -= a[:, j + 1:, j, None] * a[:, j, None, j + 1:]
        a, piv, info = a.reshape(A.shape), piv.reshape(batch + (k,)), info.reshape(batch)
    if check_errors and bool(info.any()):
        raise LinAlgError(f"torch.linalg.lu_factor_ex: U[{int(info.max())},{int(info.max())}] is "
                          f"zero and using it on lu_solve would result in a division by zero.")
    return a, piv, info


def _order(pivots, m, inverse=False):
    """perm (batch..., m) from LAPACK pivots: A = P L U with P[perm[i], i] = 1; ``inverse``:
    its inverse, so that P X = X[..., perm, :] (the swaps applied last to first)."""
    perm = np.empty((math.prod(pivots.shape[:-1]), m), np.int64)
    for b, row in enumerate(pivots.reshape(len(perm), pivots.shape[-1]).tolist()):
        order = list(range(m))      # (Python swaps: a NumPy call each costs more)
        for j in range(len(row) - 1, -1, -1) if inverse else range(len(row)):
            p = row[j] - 1
            order[j], order[p] = order[p], order[j]
        perm[b] = order
    return perm.reshape(tuple(pivots.shape[:-1]) + (m,))


def permutation(pivots, m, like):
    """P (m x m) from LAPACK pivots, so that A = P L U."""
    P = (_order(pivots, m)[..., None, :] == np.arange(m)[:, None]).astype(np.float64)
    return ember.tensor(P, dtype=like.dtype, device=like.device)


@linalg_lu_factor_ex.vjp(save=("result",))
def _(grads, A, *, pivot=True, check_errors=False, result=None):
    g, (LU, pivots, _) = grads[0], result
    m, n = LU.shape[-2:]
    k = min(m, n)
    if m == n:      # L^-H (tril(L^H gL, -1) + triu(gU U^H)) U^-H, as torch's linalg_lu_backward
        # L^H gL = L0^H gL + gL (L0 = tril(LU, -1)); each solve reads only its triangle of LU
        gL, st, LUh = g.tril(-1), ember.linalg.solve_triangular, LU.mH
        phi = (LUh.triu(1) @ gL).tril(-1) + gL + (g.triu() @ LUh.tril()).triu()
        gA = st(LUh, st(LUh, phi, upper=True, unitriangular=True), upper=False, left=False)
    else:
        L = LU[..., :, :k].tril(-1) + ember.eye(m, k, dtype=LU.dtype, device=LU.device)
        gA = lu_backward(g[..., :, :k].tril(-1), g[..., :k, :].triu(), L, LU[..., :k, :].triu())
    # P gA: row perm[i] of the result is row i of gA (a gather, not a product with P)
    inv = _order(pivots, m, inverse=True)
    if inv.ndim == 1:
        return gA[inv.tolist()]
    return gA.take_along_dim(ember.tensor(inv[..., None], device=gA.device), -2)


def lu_backward(gL, gU, L, U):
    """torch's linalg_lu_backward for A = P L U without P, wide and tall."""
    m, n = L.shape[-2], U.shape[-1]
    st = ember.linalg.solve_triangular
    if m < n:       # wide: U = [U1 | U2]
        U1 = U[..., :m]
        gA = st(U1.mH, (L.mH @ gL - gU @ U.mH).tril(-1), upper=False, left=False)
        gA = ember.cat([gA + gU[..., :m].triu(), gU[..., m:]], -1)
        return st(L.mH, gA, upper=True, unitriangular=True)
    L1 = L[..., :n, :]      # tall: L = [L1; L2]
    gA = st(L1.mH, (gU @ U.mH - L.mH @ gL).triu(), upper=True, unitriangular=True)
    gA = ember.cat([gA + gL[..., :n, :].tril(-1), gL[..., n:, :]], -2)
    return st(U.mH, gA, upper=False, left=False)


linalg_lu_factor_ex.torch_fn = "linalg.lu_factor_ex"
linalg_lu_factor_ex.meta = lambda A, **kw: (
    empty(A.shape, A.dtype), empty(A.shape[:-2] + (min(A.shape[-2:]),), np.int32),
    empty(A.shape[:-2], np.int32))
linalg_lu_factor_ex.samples = lambda dev, dt: linalg_samples((3, 3), (2, 4, 4))(dev, dt) + (
    [Sample(make((4, 3), dt)), Sample(make((2, 5), dt))]
    if dt.category >= 2 and dt.name != "bfloat16" else [])
linalg_lu_factor_ex.errors = [ErrorSample(Sample(const(3)), RuntimeError,
                                          "Expected tensor with 2 or more dimensions")]


# ---- forward mode (tangents.py) ----------------------------------------------------------
# These ops read one triangle of a Hermitian input and their vjps give Hermitian gradients,
# so the tangent taken is the Hermitian part of the input's.


def _hermitian(t):
    return (t + t.mH) / 2


def _cholesky_jvp(a, t, out):
    L = out[0].mH if a["upper"] else out[0]
    inv = ember.linalg.solve_triangular(L, _hermitian(t["A"]), upper=False)
    X = ember.linalg.solve_triangular(L, inv.mH, upper=False).mH      # L^-1 tA L^-H
    phi = X.tril(-1) + X.diagonal(0, -2, -1).diag_embed() / 2
    dL = L @ phi
    return (dL.mH if a["upper"] else dL), None


def _lu_factor_jvp(a, t, out):
    """Square A = P L U: with X = L^-1 P^T dA U^-1, dL = L tril(X, -1) and dU = triu(X) U,
    packed as LU is."""
    P, L, U = ember.lu_unpack(out[0], out[1])
    X = ember.linalg.solve_triangular(L, P.mT.to(t["A"].dtype) @ t["A"], upper=False,
                                      unitriangular=True)
    X = ember.linalg.solve_triangular(U, X, upper=True, left=False)
    return L @ X.tril(-1) + X.triu() @ U, None, None


def _qr_jvp(a, t, out):
    """m >= n: Q^H dA R^-1 = Q^H dQ + dR R^-1, a skew-Hermitian plus an upper triangular
    part, so dR R^-1 is the upper triangle (real diagonal halved) of its Hermitian part."""
    Q, R = ember.linalg.qr(a["A"]) if a["mode"] == "r" else out
    X = ember.linalg.solve_triangular(R, Q.mH @ t["A"], upper=True, left=False)
    S = (X + X.mH).triu()
    S = S - S.diagonal(0, -2, -1).real.diag_embed().to(S.dtype) / 2
    dQ = ember.linalg.solve_triangular(R, t["A"], upper=True, left=False) - Q @ S
    return (ember.zeros_like(out[0]) if a["mode"] == "r" else dQ), S @ R


linalg_cholesky_ex.jvp = decomposed(_cholesky_jvp)
linalg_qr.jvp = fallback_unless(lambda a: a["A"].shape[-2] >= a["A"].shape[-1] and (
    a["mode"] != "complete" or a["A"].shape[-2] == a["A"].shape[-1]), decomposed(_qr_jvp))
linalg_lu_factor_ex.jvp = fallback_unless(lambda a: a["A"].shape[-1] == a["A"].shape[-2] and
                                          a.get("pivot", True), decomposed(_lu_factor_jvp))
