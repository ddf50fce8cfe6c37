"""Factorizations: linalg.cholesky_ex, linalg.qr, geqrf, linalg.svd, linalg.svdvals,
linalg.eigh, linalg.eigvalsh, linalg.eig, linalg.eigvals, linalg.lu_factor_ex. Backwards are
torch's (gauge-invariant for singular and eigen vectors), written in ember ops."""
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
from .solvers import C_INT, P, LinAlgError, check_matrix, lapack_each, lapack_gufunc, \
    lapack_rows, linalg_samples

_CHOL = ("{}The factorization could not be completed because the input is not "
         "positive-definite (the leading minor of order {} is not positive-definite).")


def _real(dtype):
    return np.abs(np.zeros((), dtype)).dtype


def _spd_samples(dev, dt):
    """Hermitian positive-definite matrices: cholesky and eigh read one triangle only, and
    their tests symmetrize (``hermitian_input``), so any well-conditioned A works."""
    out = []
    for s in linalg_samples((3, 3), (2, 4, 4))(dev, dt):
        a = s.args[0]
        out.append(Sample(a @ np.conj(np.swapaxes(a, -1, -2))))
    return out


def _phase_columns(x, *others):
    """Torch-and-ember code: multiply column j of ``x`` by the conjugate phase of its entry
    of largest modulus (so that entry is real positive), and undo it on ``others``' rows."""
    idx = x.abs().argmax(-2, keepdim=True)
    p = x.gather(-2, idx)
    p = p / p.abs()
    return (x * p.conj(),) + tuple(o * p.mT for o in others)


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


# ---- svd, svdvals -----------------------------------------------------------------------------

@op("linalg_svd", function=False, method=False, returns=("U", "S", "Vh"))
def linalg_svd(xp, A, full_matrices=True, *, driver=None):
    """(U, S, Vh) with ``A = U diag(S) Vh``, S descending."""
    check_matrix("linalg.svd", A, square=False)
    return tuple(lapack_gufunc(xp, "svd_f" if full_matrices else "svd_s",
                               lambda a: xp.linalg.svd(a, full_matrices), A))


@linalg_svd.vjp(save=("result",))
def _(grads, A, full_matrices=True, *, driver=None, result=None):
    return svd_backward(*grads, *result)


def _unless_zeros(g):
    """None for the zeros the engine hands for an output the loss did not read (svdvals,
    eigvals, eigvalsh through the vectors' decomposition: torch's grad is undefined there),
    so the backward skips the vectors' O(n^3) terms, as torch's."""
    return None if g is None or (not g.requires_grad and not bool(g.any())) else g


def svd_backward(gU, gS, gVh, U, S, Vh):
    """torch's svd_backward (gauge invariant; defined for distinct nonzero singular values)."""
    m, n, k = U.shape[-2], Vh.shape[-1], S.shape[-1]
    U, Vh = U[..., :k], Vh[..., :k, :]
    gU, gVh = _unless_zeros(gU), _unless_zeros(gVh)
    gU = gU[..., :k] if gU is not None else None
    gVh = gVh[..., :k, :] if gVh is not None else None
    if gU is None and gVh is None:
        return U @ (gS.unsqueeze(-1) * Vh)
    UhgU = (U.mH @ gU) - (U.mH @ gU).mH if gU is not None else None
    VhgV = (Vh @ gVh.mH) - (Vh @ gVh.mH).mH if gVh is not None else None
    S2 = S * S
    E = S2.unsqueeze(-2) - S2.unsqueeze(-1)
    E = E + ember.eye(k, dtype=E.dtype, device=E.device)    # diagonal: 1 (numerators are 0)
    if UhgU is not None and VhgV is not None:
        gA = (UhgU * S.unsqueeze(-2) + S.unsqueeze(-1) * VhgV) / E
    elif UhgU is not None:
        gA = (UhgU / E) * S.unsqueeze(-2)
    else:
        gA = S.unsqueeze(-1) * (VhgV / E)
    if gS is not None:
        gA = gA + ember.diag_embed(gS)
    if U.is_complex() and UhgU is not None:
        gA = gA + ember.diag_embed(UhgU.diagonal(dim1=-2, dim2=-1) / (2 * S))
    if m > n and gU is not None:
        gA = U @ gA
        gUSinv = gU / S.unsqueeze(-2)
        gA = (gA + gUSinv - U @ (U.mH @ gUSinv)) @ Vh
    elif m < n and gVh is not None:
        gA = gA @ Vh
        SinvgVh = gVh / S.unsqueeze(-1)
        gA = U @ (gA + SinvgVh - (SinvgVh @ Vh.mH) @ Vh)
    else:
        gA = U @ gA @ Vh
    return gA


def _svd_meta(A, full_matrices=True, driver=None):
    m, n = A.shape[-2:]
    k, b = min(m, n), A.shape[:-2]
    return (empty(b + (m, m if full_matrices else k), A.dtype), empty(b + (k,), _real(A.dtype)),
            empty(b + (n if full_matrices else k, n), A.dtype))


linalg_svd.torch_fn = "linalg.svd"
linalg_svd.meta = _svd_meta
# (float32 LAPACK here and in torch, in different libraries: vectors differ in the 6th digit)
linalg_svd.tol = {"float32": (1e-4, 1e-5)}
linalg_svd.gauge = lambda out: (lambda U, Vh: (U, out[1], Vh))(*_phase_columns(out[0], out[2]))
linalg_svd.samples = lambda dev, dt: [
    Sample(make((4, 3), dt), False), Sample(make((2, 3, 5), dt), full_matrices=False),
    Sample(make((3, 3), dt))] if dt.category >= 2 and dt.name != "bfloat16" else []
linalg_svd.errors = [ErrorSample(Sample(const(3)), RuntimeError,
                                 "linalg.svd: The input tensor A must have at least 2 dimensions")]


@op("linalg_svdvals", function=False, method=False)
def linalg_svdvals(xp, A, *, driver=None):
    """The singular values of A, descending."""
    check_matrix("linalg.svdvals", A, square=False)
    return lapack_gufunc(xp, "svd", lambda a: xp.linalg.svd(a, compute_uv=False), A)


@linalg_svdvals.vjp(save=("A",))
def _(g, A, *, driver=None):
    U, _, Vh = linalg_svd(A, False)
    return U @ (g.unsqueeze(-1).to(U.dtype) * Vh)


linalg_svdvals.torch_fn = "linalg.svdvals"
linalg_svdvals.meta = lambda A, **kw: _svd_meta(A, False)[1]
linalg_svdvals.samples = lambda dev, dt: [Sample(s.args[0]) for s in linalg_svd.samples(dev, dt)]
linalg_svdvals.grad_name = "LinalgSvdBackward0"


# ---- eigh, eigvalsh, eig, eigvals -------------------------------------------------------------

@op("linalg_eigh", function=False, method=False, returns=("eigenvalues", "eigenvectors"))
def linalg_eigh(xp, A, UPLO="L"):
    """(L, V) of a Hermitian A (only the ``UPLO`` triangle is read), L ascending."""
    check_matrix("linalg.eigh", A)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return tuple(lapack_gufunc(xp, "eigh" + _UPLO[UPLO], lambda a: xp.linalg.eigh(a, UPLO), A))


_UPLO = {"L": "_lo", "U": "_up"}


def eig_backward(gL, gV, L, V, hermitian):
    """torch's linalg_eig_backward: gA = V^-H (diag(gL) + (V^H gV)' / conj(E)) V^H, the prime
    projecting out the gauge; E_ij = L_j - L_i."""
    n = L.shape[-1]
    if (gV := _unless_zeros(gV)) is None:
        ret = ember.diag_embed(gL.to(V.dtype))
    else:
        VhgV = V.mH @ gV
        if hermitian:
            VhgV = 0.5 * (VhgV - VhgV.mH)
        else:
            VhgV = VhgV - V.mH @ (V * VhgV.diagonal(dim1=-2, dim2=-1).real.unsqueeze(-2))
        Lc = L.conj()
        E = Lc.unsqueeze(-2) - Lc.unsqueeze(-1) + ember.eye(n, dtype=L.dtype, device=L.device)
        ret = VhgV / E
        off = 1 - ember.eye(n, dtype=ret.real.dtype if ret.is_complex() else ret.dtype,
                        device=ret.device)
        ret = ret * off + (ember.diag_embed(gL.to(ret.dtype)) if gL is not None else 0)
    return V @ (ret @ V.mH) if hermitian else ember.linalg.solve(V.mH, ret @ V.mH)


@linalg_eigh.vjp(save=("result",))
def _(grads, A, UPLO="L", result=None):
    return eig_backward(*grads, *result, hermitian=True)


linalg_eigh.torch_fn = "linalg.eigh"
linalg_eigh.hermitian_input = True
linalg_eigh.meta = lambda A, UPLO="L": (empty(A.shape[:-1], _real(A.dtype)),
                                        empty(A.shape, A.dtype))
linalg_eigh.gauge = lambda out: (out[0], _phase_columns(out[1])[0])
linalg_eigh.samples = lambda dev, dt: [Sample(make((3, 3), dt)), Sample(make((2, 4, 4), dt)),
                                       Sample(make((3, 3), dt, seed=1), "U")] \
    if dt.category >= 2 and dt.name != "bfloat16" else []
linalg_eigh.errors = [ErrorSample(Sample(const(2, 3)), RuntimeError,
                                  "linalg.eigh: A must be batches of square matrices")]


@op("linalg_eigvalsh", function=False, method=False)
def linalg_eigvalsh(xp, A, UPLO="L"):
    """The eigenvalues of a Hermitian A, ascending."""
    check_matrix("linalg.eigvalsh", A)
    return lapack_gufunc(xp, "eigvalsh" + _UPLO.get(UPLO, ""),
                         lambda a: xp.linalg.eigvalsh(a, UPLO), A)


@linalg_eigvalsh.vjp(save=("A",))
def _(g, A, UPLO="L"):
    _, V = linalg_eigh(A, UPLO)
    return V @ (g.unsqueeze(-1).to(V.dtype) * V.mH)


linalg_eigvalsh.torch_fn = "linalg.eigvalsh"
linalg_eigvalsh.hermitian_input = True
linalg_eigvalsh.meta = lambda A, UPLO="L": empty(A.shape[:-1], _real(A.dtype))
linalg_eigvalsh.samples = lambda dev, dt: [Sample(*s.args) for s in linalg_eigh.samples(dev, dt)]
linalg_eigvalsh.grad_name = "LinalgEighBackward0"


def _complex(dtype):
    return np.result_type(dtype, np.complex64)


@op("linalg_eig", function=False, method=False, returns=("eigenvalues", "eigenvectors"))
def linalg_eig(xp, A):
    """(L, V) with ``A V = V diag(L)``, always complex; columns of V have unit norm."""
    check_matrix("linalg.eig", A)
    w, v = lapack_gufunc(xp, "eig", xp.linalg.eig, A)
    c = _complex(A.dtype)
    return w.astype(c, copy=False), v.astype(c, copy=False)


@linalg_eig.vjp(save=("result",))
def _(grads, A, result=None):
    return eig_backward(*grads, *result, hermitian=False)


linalg_eig.torch_fn = "linalg.eig"
linalg_eig.meta = lambda A: (empty(A.shape[:-1], _complex(A.dtype)),
                             empty(A.shape, _complex(A.dtype)))
linalg_eig.gauge = lambda out: (out[0], _phase_columns(out[1])[0])
linalg_eig.samples = lambda dev, dt: [Sample(make((3, 3), dt)), Sample(make((2, 4, 4), dt))] \
    if dt.category >= 2 and dt.name != "bfloat16" else []
linalg_eig.errors = [ErrorSample(Sample(const(2, 3)), RuntimeError,
                                 "linalg.eig: A must be batches of square matrices")]


@op("linalg_eigvals", function=False, method=False)
def linalg_eigvals(xp, A):
    """The eigenvalues of A, complex."""
    check_matrix("linalg.eigvals", A)
    w = lapack_gufunc(xp, "eigvals", xp.linalg.eigvals, A)
    return w.astype(_complex(A.dtype), copy=False)


@linalg_eigvals.vjp(save=("A",))
def _(g, A):
    L, V = linalg_eig(A)
    return eig_backward(g, None, L, V, hermitian=False)


linalg_eigvals.torch_fn = "linalg.eigvals"
linalg_eigvals.meta = lambda A: empty(A.shape[:-1], _complex(A.dtype))
linalg_eigvals.samples = linalg_eig.samples
linalg_eigvals.grad_name = "LinalgEigBackward0"


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



def _eigh_jvp(a, t, out):
    w, V = out
    M = V.mH @ _hermitian(t["A"]) @ V
    gap = w.unsqueeze(-2) - w.unsqueeze(-1)           # w_j - w_i
    off = ember.eye(w.shape[-1], dtype=ember.bool, device=w.device).logical_not()
    F = ember.where(off, 1 / gap.where(off, 1), 0).to(M.dtype)
    return M.diagonal(0, -2, -1).real.to(w.dtype), V @ (F * M)


def _svdvals_jvp(a, t, out):
    U, S, Vh = ember.linalg.svd(a["A"], full_matrices=False)
    return (U.conj() * (t["A"] @ Vh.mH)).sum(-2).real.to(out.dtype)


def _eigvals_jvp(a, t, out):
    L, V = ember.linalg.eig(a["A"])
    return ember.linalg.solve(V, t["A"].to(V.dtype) @ V).diagonal(0, -2, -1)


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


def _svd_jvp(a, t, out):
    """Torch's rule (real A, reduced factors): with dP = U^H dA V, dS = diag(dP); the
    off-diagonal of dP over E_ij = S_j^2 - S_i^2 rotates U and V; a tall (wide) A adds dA's
    part outside U's (V's) span."""
    U, S, Vh = out
    m, n = t["A"].shape[-2:]
    V, dA = Vh.mH, t["A"]
    dP = U.mH @ dA @ V
    dS = dP.diagonal(0, -2, -1)
    dP = dP - dS.diag_embed()
    S2 = S * S
    E = S2.unsqueeze(-2) - S2.unsqueeze(-1)
    E = E + ember.eye(S.shape[-1], dtype=E.dtype, device=E.device)
    sym = lambda X: X + X.mH  # noqa: E731
    dU = U @ (sym(dP * S.unsqueeze(-2)) / E)
    dVh = (-sym(S.unsqueeze(-1) * dP) / E) @ Vh
    if m > n:
        dAV = dA @ (V / S.unsqueeze(-2))
        dU = dU + dAV - U @ (U.mH @ dAV)
    elif m < n:
        UdA = (U.mH / S.unsqueeze(-1)) @ dA
        dVh = dVh + UdA - (UdA @ V) @ Vh
    return dU, dS, dVh


linalg_cholesky_ex.jvp = decomposed(_cholesky_jvp)
linalg_svd.jvp = fallback_unless(lambda a: not a["A"].is_complex() and (
    not a["full_matrices"] or a["A"].shape[-1] == a["A"].shape[-2]), decomposed(_svd_jvp))
linalg_qr.jvp = fallback_unless(lambda a: a["A"].shape[-2] >= a["A"].shape[-1] and (
    a["mode"] != "complete" or a["A"].shape[-2] == a["A"].shape[-1]), decomposed(_qr_jvp))
linalg_lu_factor_ex.jvp = fallback_unless(lambda a: a["A"].shape[-1] == a["A"].shape[-2] and
                                          a.get("pivot", True), decomposed(_lu_factor_jvp))
linalg_eigh.jvp = decomposed(_eigh_jvp)
linalg_eigvalsh.jvp = decomposed(lambda a, t, out: _eigh_jvp(
    a, t, ember.linalg.eigh(a["A"], a["UPLO"]))[0])
linalg_svdvals.jvp = decomposed(_svdvals_jvp)
linalg_eigvals.jvp = decomposed(_eigvals_jvp)


# ---- linalg.ldl_factor_ex, linalg.ldl_solve (LAPACK's ?sytrf / ?hetrf and ?sytrs / ?hetrs) ---
# The factor calls LAPACK's sytrf / hetrf where blas.lapack finds it. The reference (NumPy has
# no sytrf) is LAPACK's unblocked Bunch-Kaufman (?sytf2 / ?hetf2, lower), step for step, so the
# pivots (1-based; a 2x2 block stores -p twice) are LAPACK's. For n > 64 LAPACK runs the
# blocked ?lasyf, the same factorization with its rounding in another order.
_BK_ALPHA = (1 + 17 ** 0.5) / 8


def _sytf2(xp, a, herm):
    """Factor the n x n array ``a`` (lower triangle read) in place; return (pivots, info)."""
    n, cplx = a.shape[0], a.dtype.kind == "c"
    herm = herm and cplx
    # NOTE: LAPACK ranks complex entries by |re| + |im| (cabs1), the Hermitian diagonal by |re|
    cabs = (lambda v: xp.abs(v.real) + xp.abs(v.imag)) if cplx else xp.abs
    dabs = (lambda v: abs(float(v.real))) if herm else (lambda v: float(cabs(v)))
    cj = xp.conj if herm else (lambda v: v)
    piv, info, k = np.zeros(n, np.int32), 0, 0
    while k < n:
        kstep, absakk = 1, dabs(a[k, k])
        imax, colmax = k, 0.0
        if k < n - 1:
            col = cabs(a[k + 1:, k])
            imax = k + 1 + int(xp.argmax(col))
            colmax = float(col[imax - k - 1])
        if max(absakk, colmax) == 0 or absakk != absakk:
            info, kp = info or k + 1, k
            if herm:
                a[k, k] = a[k, k].real
        else:
            kp = k
            if absakk < _BK_ALPHA * colmax:
                rowmax = float(cabs(a[imax, k:imax]).max())
                if imax < n - 1:
                    rowmax = max(rowmax, float(cabs(a[imax + 1:, imax]).max()))
                if absakk >= _BK_ALPHA * colmax * (colmax / rowmax):
                    kp = k
                elif dabs(a[imax, imax]) >= _BK_ALPHA * rowmax:
                    kp = imax
                else:
                    kp, kstep = imax, 2
            kk = k + kstep - 1
            if kp != kk:        # swap rows and columns kk and kp of the trailing matrix
                a[kp + 1:, [kk, kp]] = a[kp + 1:, [kp, kk]]
                t = cj(a[kk + 1:kp, kk]).copy()
                a[kk + 1:kp, kk] = cj(a[kp, kk + 1:kp])
                a[kp, kk + 1:kp] = t
                a[kp, kk] = cj(a[kp, kk])
                # (fancy indexing copies: a CuPy scalar index is a view)
                a[[kk, kp], [kk, kp]] = a[[kp, kk], [kp, kk]]
                if kstep == 2:
                    a[[k + 1, kp], k] = a[[kp, k + 1], k]
            if herm:
                a[k, k] = a[k, k].real
                a[kk, kk] = a[kk, kk].real
            if kstep == 1 and k < n - 1:
                r1 = 1 / (a[k, k].real if herm else a[k, k])
                x = a[k + 1:, k].copy()
                a[k + 1:, k + 1:] -= r1 * x[:, None] * cj(x)[None, :]
                a[k + 1:, k] = x * r1
            elif kstep == 2 and k < n - 2:
                c0, c1 = a[k + 2:, k].copy(), a[k + 2:, k + 1].copy()
                if herm:
                    d = abs(a[k + 1, k])
                    d11, d22 = a[k + 1, k + 1].real / d, a[k, k].real / d
                    d21, d = a[k + 1, k] / d, 1 / (d11 * d22 - 1) / d
                    wk, wkp1 = d * (d11 * c0 - d21 * c1), d * (d22 * c1 - xp.conj(d21) * c0)
                else:
                    d21 = a[k + 1, k]
                    d11, d22 = a[k + 1, k + 1] / d21, a[k, k] / d21
                    d21 = 1 / (d11 * d22 - 1) / d21
                    wk, wkp1 = d21 * (d11 * c0 - c1), d21 * (d22 * c1 - c0)
                a[k + 2:, k + 2:] -= c0[:, None] * cj(wk)[None, :] + c1[:, None] * cj(wkp1)[None, :]
                a[k + 2:, k], a[k + 2:, k + 1] = wk, wkp1
            if herm:
                d = xp.arange(n)
                a[d, d] = a[d, d].real
        piv[k:k + kstep] = kp + 1 if kstep == 1 else -(kp + 1)
        k += kstep
    return piv, info


@op("linalg_ldl_factor_ex", function=False, method=False, returns=("LD", "pivots", "info"))
def linalg_ldl_factor_ex(xp, A, *, hermitian=False, check_errors=False):
    """LAPACK's sytrf (hetrf when ``hermitian``): (LD, pivots, info) with the Bunch-Kaufman
    factorization ``A = L D L^T`` (``L D L^H``) of A's lower triangle, D block diagonal with
    1x1 and 2x2 blocks, packed in LD's lower triangle."""
    check_matrix("torch.linalg.ldl_factor_ex", A)
    n, batch = A.shape[-1], A.shape[:-2]
    if small := _small_factor(xp, A):     # (sytf2 in C: LAPACK's sytrf too runs it to n = 64)
        a, piv, info = A.copy(), np.empty(batch + (n,), np.int32), np.empty(batch, np.int32)
        small(3, blas.ptr(a), 0, blas.ptr(piv), blas.ptr(info), 0, info.size, n, n, 0)
        if check_errors and info.any():
            raise RuntimeError(f"torch.linalg.ldl_factor_ex: Unknown error code: {info.max()}.")
        return a, piv, info
    a = A.reshape((math.prod(batch), n, n))
    sytrf = xp is np and blas.lapack("hetrf_work" if hermitian and A.dtype.kind == "c" else
                                     "sytrf_work", A.dtype, C_INT, ctypes.c_char, int, P, int, P,
                                     P, int)
    if sytrf:   # (column-major on a copy of A^T, which is A to LAPACK: LAPACKE's row-major
        # sytrf queried the workspace, then copied and transposed the matrix in and out)
        w, a = np.empty(64 * n + 1, A.dtype), a.swapaxes(1, 2).copy()
        piv, info = lapack_rows(sytrf, a, b"L", n, layout=102, work=(blas.ptr(w), len(w)))
        a = a.swapaxes(1, 2)
    else:
        a, piv, info = a.copy(), np.zeros((a.shape[0], n), np.int32), [-1] * a.shape[0]
    for b in range(a.shape[0]):
        if info[b] < 0:         # (the NumPy reference)
            piv[b], info[b] = _sytf2(xp, a[b], hermitian)
    if check_errors and any(info):
        raise RuntimeError(f"torch.linalg.ldl_factor_ex: Unknown error code: {max(info)}.")
    xp.copyto(a, 0, where=_zeroed(xp, n, n, 0, "tril"))    # (tril in place: a is ours)
    return (a.reshape(A.shape), xp.asarray(piv.reshape(batch + (n,))),
            xp.asarray(np.array(info, np.int32).reshape(batch)))


# NOTE: torch has no derivative for ldl_factor_ex or ldl_solve: backward raises, as in torch
linalg_ldl_factor_ex.torch_fn = "linalg.ldl_factor_ex"
linalg_ldl_factor_ex.grad_name = "torch::autograd::NotImplemented"
linalg_ldl_factor_ex.meta = lambda A, **kw: (
    empty(A.shape, A.dtype), empty(A.shape[:-1], np.int32), empty(A.shape[:-2], np.int32))


def _ldl_samples(dev, dt):
    if dt.category < 2 or dt.name == "bfloat16":
        return []
    # (a small diagonal forces 2x2 pivots and interchanges; the last matrix is singular)
    pivoting = make((5, 5), dt, seed=3) * np.asarray([.01, 1, 1, 1, 1], dt.np)
    out = [Sample(make((4, 4), dt)), Sample(make((2, 3, 6, 6), dt, seed=1)), Sample(pivoting),
           Sample(make((5, 5), dt, seed=2), hermitian=True), Sample(np.zeros((3, 3), dt.np))]
    return [s.forward_only() for s in out]


linalg_ldl_factor_ex.samples = _ldl_samples
linalg_ldl_factor_ex.errors = [
    ErrorSample(Sample(const(3)), RuntimeError, "must have at least 2 dimensions"),
    ErrorSample(Sample(const(3, 4)), RuntimeError, "A must be batches of square matrices, but "
                "they are 3 by 4 matrices"),
    ErrorSample(Sample(const(2, 2, dtype=np.int64)), RuntimeError,
                "Expected a floating point or complex tensor as input. Got Long"),
    ErrorSample(Sample(np.zeros((2, 2), np.float32), check_errors=True), RuntimeError,
                "Unknown error code: 1")]


def _sytrs(xp, a, piv, b, herm):
    """Solve with one factored matrix ``a`` (pivots ``piv``) for the rows of ``b``, in place."""
    n, herm = a.shape[0], herm and a.dtype.kind == "c"
    cj = xp.conj if herm else (lambda v: v)

    def swap(i, p):
        if p != i:
            b[[i, p]] = b[[p, i]]
    k = 0
    while k < n:            # L D y = P b, going down
        pk = int(piv[k])
        if pk > 0:
            swap(k, pk - 1)
            b[k + 1:] -= a[k + 1:, k, None] * b[k]
            b[k] /= a[k, k].real if herm else a[k, k]
            k += 1
        else:
            swap(k + 1, -pk - 1)
            b[k + 2:] -= a[k + 2:, k, None] * b[k] + a[k + 2:, k + 1, None] * b[k + 1]
            akm1k = a[k + 1, k]
            akm1, ak = a[k, k] / cj(akm1k), a[k + 1, k + 1] / akm1k
            denom = akm1 * ak - 1
            bkm1, bk = b[k] / cj(akm1k), b[k + 1] / akm1k
            b[k], b[k + 1] = (ak * bkm1 - bk) / denom, (akm1 * bk - bkm1) / denom
            k += 2
    k = n - 1
    while k >= 0:           # L^T x = y (L^H), going up
        b[k] -= cj(a[k + 1:, k]) @ b[k + 1:]
        pk = int(piv[k])
        if pk > 0:
            swap(k, pk - 1)
            k -= 1
        else:
            b[k - 1] -= cj(a[k + 1:, k - 1]) @ b[k + 1:]
            swap(k, -pk - 1)
            k -= 2


@op("linalg_ldl_solve", function=False, method=False)
def linalg_ldl_solve(xp, LD, pivots, B, *, hermitian=False):
    """LAPACK's sytrs (hetrs): the X with ``A X = B`` from ``ldl_factor``'s (LD, pivots)."""
    check_matrix("torch.linalg.ldl_solve", LD)
    if B.ndim < 2:
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got -2)")
    if B.dtype != LD.dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type "
                           f"{type_name(B.dtype)} and A of type {type_name(LD.dtype)} instead.")
    n = LD.shape[-1]
    if B.shape[-2] != n:
        raise RuntimeError(f"Incompatible matrix sizes for torch.linalg.ldl_solve: each A matrix "
                           f"is {n} by {n} but each b matrix is {B.shape[-2]} by {B.shape[-1]}")
    if pivots.dtype.kind != "i" or pivots.shape[-1:] != (n,):
        raise RuntimeError("torch.linalg.ldl_solve: Expected pivots to be an integer tensor of "
                           f"shape (*, {n}), got {pivots.dtype} of shape {tuple(pivots.shape)}")
    batch = np.broadcast_shapes(LD.shape[:-2], pivots.shape[:-1], B.shape[:-2])
    count, k = math.prod(batch), B.shape[-1]
    def flat(t, shape):     # (broadcast_to's Python costs more than a small solve)
        t = t if t.shape == shape else xp.broadcast_to(t, shape)
        return t.reshape((count,) + shape[len(batch):])
    a, p, x = flat(LD, batch + (n, n)), flat(pivots, batch + (n,)), flat(B, batch + (n, k)).copy()
    sytrs = xp is np and _bk_pivots(p, n) and blas.lapack(
        "hetrs_work" if hermitian and LD.dtype.kind == "c" else "sytrs_work", LD.dtype, C_INT,
        ctypes.c_char, int, int, P, int, P, P, int)
    if sytrs:       # (row-major: LAPACKE transposes in C)
        a = np.ascontiguousarray(a)
        p = np.ascontiguousarray(p, np.int64 if blas._ilp64 else np.int32)   # (not astype: a
        # broadcast p would come back batch-fastest)
        pa, pp, px = blas.ptr(a), blas.ptr(p), blas.ptr(x)
        for i in range(count):
            sytrs(101, b"L", n, k, pa + i * a.strides[0], max(1, n), pp + i * p.strides[0],
                  px + i * x.strides[0], max(1, k))
    else:
        for i in range(count):
            _sytrs(xp, a[i], p[i], x[i], hermitian)
    return x.reshape(batch + B.shape[-2:])


def _bk_pivots(p, n):
    """Whether each row of the (b, n) pivots ``p`` is one sytrf makes: 1 <= |pivot| <= n, a
    negative one the first of an equal pair (a 2x2 block). LAPACK's sytrs trusts them and would
    read or write past the matrices; other pivots take _sytrs, which raises or runs in bounds.
    A pivot past n raises torch's error."""
    ok = True
    for row in p.tolist():
        k = 0
        while k < n:
            if abs(row[k]) > n:
                raise RuntimeError("Pivots given to ldl_solve must all satisfy |pivot| <= "
                                   "LD.size(-2). Did you properly pass the result of ldl_factor?")
            if row[k] == 0 or (row[k] < 0 and (k + 1 == n or row[k + 1] != row[k])):
                ok = False
            k += 1 if row[k] >= 0 else 2
    return ok


linalg_ldl_solve.torch_fn = "linalg.ldl_solve"
linalg_ldl_solve.grad_name = "torch::autograd::NotImplemented"
linalg_ldl_solve.meta = lambda LD, pivots, B, **kw: empty(
    np.broadcast_shapes(LD.shape[:-2], pivots.shape[:-1], B.shape[:-2]) + B.shape[-2:], B.dtype)


def _ldl_solve_samples(dev, dt):
    if dt.category < 2 or dt.name == "bfloat16":
        return []
    out = []
    for i, s in enumerate(_ldl_samples(dev, dt)[:4]):
        a, herm = s.args[0], s.kwargs.get("hermitian", False)
        ld = a.reshape((-1,) + a.shape[-2:]).copy()
        piv = np.stack([_sytf2(np, m, herm)[0] for m in ld]).reshape(a.shape[:-1])
        b = make(a.shape[:-1] + (2,), dt, seed=i)
        out.append(Sample(np.tril(ld).reshape(a.shape), piv, b, hermitian=herm).forward_only())
    return out + [Sample(np.eye(3, dtype=dt.np), np.arange(1, 4), make((2, 3, 1), dt))
                  .forward_only()]


linalg_ldl_solve.samples = _ldl_solve_samples
linalg_ldl_solve.errors = [
    ErrorSample(Sample(const(3, 3), np.arange(1, 4, dtype=np.int32), const(3)), IndexError,
                "Dimension out of range"),
    ErrorSample(Sample(const(3, 3), np.arange(1, 4, dtype=np.int32), const(4, 1)), RuntimeError,
                "each A matrix is 3 by 3 but each b matrix is 4 by 1"),
    ErrorSample(Sample(const(3, 3), np.arange(1, 4, dtype=np.int32), const(3, 1, dtype=np.float64)),
                RuntimeError, "Expected b and A to have the same dtype, but found b of type "
                "Double and A of type Float instead.")]
