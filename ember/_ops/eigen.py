"""Singular and eigen decompositions: linalg.svd, linalg.svdvals, linalg.eigh, linalg.eigvalsh,
linalg.eig, linalg.eigvals. Backwards and forward-mode rules are torch's (gauge-invariant
for singular and eigen vectors), written in ember ops."""
import numpy as np

import ember

from .decompositions import _hermitian
from .meta import empty
from .registry import op
from .samples import ErrorSample, Sample, const, make
from .solvers import check_matrix, lapack_gufunc
from .tangents import decomposed, fallback_unless


def _real(dtype):
    return np.abs(np.zeros((), dtype)).dtype


def _phase_columns(x, *others):
    """Torch-and-ember code: multiply column j of ``x`` by the conjugate phase of its entry
    of largest modulus (so that entry is real positive), and undo it on ``others``' rows."""
    idx = x.abs().argmax(-2, keepdim=True)
    p = x.gather(-2, idx)
    p = p / p.abs()
    return (x * p.conj(),) + tuple(o * p.mT for o in others)


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


# ---- forward mode (tangents.py) ----------------------------------------------------------
# eigh reads one triangle of a Hermitian input and its vjp gives Hermitian gradients, so the
# tangent taken is the Hermitian part of the input's.


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


linalg_svd.jvp = fallback_unless(lambda a: not a["A"].is_complex() and (
    not a["full_matrices"] or a["A"].shape[-1] == a["A"].shape[-2]), decomposed(_svd_jvp))
linalg_eigh.jvp = decomposed(_eigh_jvp)
linalg_eigvalsh.jvp = decomposed(lambda a, t, out: _eigh_jvp(
    a, t, ember.linalg.eigh(a["A"], a["UPLO"]))[0])
linalg_svdvals.jvp = decomposed(_svdvals_jvp)
linalg_eigvals.jvp = decomposed(_eigvals_jvp)
