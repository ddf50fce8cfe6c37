"""torch.lobpcg: the k largest (or smallest) eigenpairs of a symmetric positive definite
generalized eigenproblem ``A X = B X E`` by LOBPCG, torch's algorithm step for step ("basic":
Knyazev 2001; "ortho": with the orthogonal basis selection of Stathopoulos & Wu 2002 and the
convergence test of Duersch et al. 2018). Loaded on first use of ``ember.lobpcg``."""
import ember


def _mm(A, X):
    return X if A is None else ember.sparse.mm(A, X) if A.is_sparse else A @ X


def _qform(A, S):
    return S.mT @ _mm(A, S)


def _symeig(A, largest=False):
    E, Z = ember.linalg.eigh(A, UPLO="U")
    return (E.flip(-1), Z.flip(-1)) if largest else (E, Z)


class LOBPCG:
    """One run of the iteration on a single (m, m) problem; torch's worker class."""

    def __init__(self, A, B, X, iK, iparams, fparams, bparams, method, tracker):
        self.A, self.B, self.iK, self.method, self.tracker = A, B, iK, method, tracker
        self.iparams, self.fparams, self.bparams = iparams, fparams, bparams
        m, n = iparams["m"], iparams["n"]
        self.X = X
        self.E = ember.zeros(n, dtype=X.dtype, device=X.device)
        self.R = ember.zeros(m, n, dtype=X.dtype, device=X.device)
        self.S = ember.zeros(m, 3 * n, dtype=X.dtype, device=X.device)
        self.tvars, self.ivars, self.fvars, self.bvars = {}, {"istep": 0}, {"_": 0.0}, {"_": False}

    def update(self):
        """Set and update the iteration variables."""
        if self.ivars["istep"] == 0:
            X_norm = float(self.X.norm())
            self.fvars.update(X_norm=X_norm, A_norm=float(_mm(self.A, self.X).norm()) / X_norm,
                              B_norm=float(_mm(self.B, self.X).norm()) / X_norm)
            self.ivars.update(iterations_left=self.iparams["niter"], converged_count=0,
                              converged_end=0)
        (self._update_ortho if self.method == "ortho" else self._update_basic)()
        self.ivars["iterations_left"] -= 1
        self.ivars["istep"] += 1

    def update_residual(self):
        self.R = _mm(self.A, self.X) - _mm(self.B, self.X) * self.E

    def update_converged_count(self):
        """The leading eigenpairs whose backward-stable relative residual is below tol."""
        E, X, R = self.E, self.X, self.R
        rerr = R.norm(2, (0,)) / (X.norm(2, (0,)) * (
            self.fvars["A_norm"] + E[:X.shape[-1]].abs() * self.fvars["B_norm"]))
        count = 0
        for b in (rerr < self.fparams["tol"]).tolist():
            if not b:
                break
            count += 1
        if count < self.ivars["converged_count"]:
            raise AssertionError(f"the number of converged eigenpairs (was "
                                 f"{self.ivars['converged_count']}, got {count}) cannot decrease")
        self.ivars["converged_count"], self.tvars["rerr"] = count, rerr
        return count

    def stop_iteration(self):
        return self.bvars.get("force_stop", False) or self.ivars["iterations_left"] == 0 or \
            self.ivars["converged_count"] >= self.iparams["k"]

    def run(self):
        self.update()
        if self.tracker is not None:
            self.tracker(self)
        while not self.stop_iteration():
            self.update()
            if self.tracker is not None:
                self.tracker(self)

    def _set_search(self, start, W):
        """The search basis after X (and P, from ``start``): the new directions W."""
        ns = self.ivars["converged_end"] = start + W.shape[-1]
        self.S[:, start:ns] = W

    def _update_basic(self):
        ns, nc, n = self.ivars["converged_end"], self.ivars["converged_count"], self.iparams["n"]
        largest = self.bparams["largest"]
        if self.ivars["istep"] == 0:
            Ri = self._get_rayleigh_ritz_transform(self.X)
            E, Z = _symeig(_qform(_qform(self.A, self.X), Ri), largest)
            self.X[:] = self.X @ (Ri @ Z)
            self.E[:] = E
            self.update_residual()
            self.update_converged_count()
            self.S[:, :n] = self.X
            self._set_search(n, _mm(self.iK, self.R))
        else:
            S_ = self.S[:, nc:ns]
            Ri = self._get_rayleigh_ritz_transform(S_)
            E_, Z = _symeig(_qform(_qform(self.A, S_), Ri), largest)
            self.X[:, nc:] = S_ @ (Ri @ Z[:, :n - nc])
            self.E[nc:] = E_[:n - nc]
            P = S_ @ (Ri @ Z[:, n:2 * n - nc])
            self.update_residual()
            nc = self.update_converged_count()
            self.S[:, :n], self.S[:, n:n + P.shape[-1]] = self.X, P
            self._set_search(n + P.shape[-1], _mm(self.iK, self.R[:, nc:]))

    def _update_ortho(self):
        ns, nc, n = self.ivars["converged_end"], self.ivars["converged_count"], self.iparams["n"]
        largest = self.bparams["largest"]
        if self.ivars["istep"] == 0:
            Ri = self._get_rayleigh_ritz_transform(self.X)
            _, Z = _symeig(_qform(_qform(self.A, self.X), Ri), largest)
            # NOTE: as torch's, E stays zero until the first update (the first residual is AX)
            self.X = self.X @ (Ri @ Z)
            self.update_residual()
            self.update_converged_count()
            self.S[:, :n] = self.X
            self._set_search(n, self._get_ortho(self.R, self.X))
        else:
            S_ = self.S[:, nc:ns]
            E_, Z = _symeig(_qform(self.A, S_), largest)
            self.X[:, nc:] = S_ @ Z[:, :n - nc]
            self.E[nc:] = E_[:n - nc]
            P = S_ @ (Z[:, n - nc:] @ ember.linalg.qr(Z[:n - nc, n - nc:].mT).Q)
            self.update_residual()
            nc = self.update_converged_count()
            np_ = P.shape[-1]
            self.S[:, :n], self.S[:, n:n + np_] = self.X, P
            self._set_search(n + np_, self._get_ortho(self.R[:, nc:], self.S[:, :n + np_]))

    def _get_rayleigh_ritz_transform(self, S):
        """Ri with ``Ri^T S^T B S Ri = I`` (upper triangular), reducing the projected problem
        to a standard one."""
        SBS = _qform(self.B, S)
        d_row = SBS.diagonal(0, -2, -1) ** -0.5
        d_col = d_row.reshape(d_row.shape[0], 1)
        R = ember.linalg.cholesky((SBS * d_row) * d_col, upper=True)
        return ember.linalg.solve_triangular(R, d_row.diag_embed(), upper=True, left=False)

    def _get_svqb(self, U, drop, tau):
        """B-orthonormal columns spanning U (those contributing little dropped if ``drop``)."""
        if U.numel() == 0:
            return U
        UBU = _qform(self.B, U)
        d = UBU.diagonal(0, -2, -1)
        nz = ember.where(d.abs() != 0.0)[0]
        if len(nz) < len(d):
            U = U[:, nz]
            if U.numel() == 0:
                return U
            UBU = _qform(self.B, U)
            d = UBU.diagonal(0, -2, -1)
        d_col = (d ** -0.5).reshape(d.shape[0], 1)
        E, Z = _symeig((UBU * d_col) * d_col.mT)
        t = tau * E.abs().max()
        if drop:
            keep = ember.where(E > t)[0]
            E, Z, d_col = E[keep], Z[:, keep], d_col[keep]
        else:
            E[ember.where(E < t)[0]] = t
        return (U * d_col.mT) @ (Z * E ** -0.5)

    def _get_ortho(self, U, V):
        """B-orthonormal columns spanning U, B-orthogonal to V (empty if U lies in V's span)."""
        m, f = self.iparams["m"], self.fparams
        tau_ortho, tau_drop, tau_replace = f["ortho_tol"], f["ortho_tol_drop"], \
            f["ortho_tol_replace"]
        for key in [k for k in self.fvars if k.startswith("ortho_") and k.endswith("_rerr")]:
            self.fvars.pop(key)
        self.ivars.pop("ortho_i", 0)
        self.ivars.pop("ortho_j", 0)
        BV_norm = _mm(self.B, V).norm()
        BU = _mm(self.B, U)
        VBU = V.mT @ BU
        i = j = 0
        for i in range(self.iparams["ortho_i_max"]):
            U = U - V @ VBU
            drop, tau_svqb = False, tau_drop
            for j in range(self.iparams["ortho_j_max"]):
                if self.bparams["ortho_use_drop"]:
                    U = self._get_svqb(U, drop, tau_svqb)
                    drop, tau_svqb = True, tau_replace
                else:
                    U = self._get_svqb(U, False, tau_replace)
                if U.numel() == 0:
                    self.ivars["ortho_i"], self.ivars["ortho_j"] = i, j
                    return U
                BU = _mm(self.B, U)
                UBU = U.mT @ BU
                R = UBU - ember.eye(UBU.shape[-1], device=UBU.device, dtype=UBU.dtype)
                rerr = float(R.norm()) / float(BU.norm() * U.norm())
                self.fvars[f"ortho_UBUmI_rerr[{i}, {j}]"] = rerr
                if rerr < tau_ortho:
                    break
            VBU = V.mT @ BU
            rerr = float(VBU.norm()) / float(BV_norm * U.norm())
            self.fvars[f"ortho_VBU_rerr[{i}]"] = rerr
            if rerr < tau_ortho:
                break
            if m < U.shape[-1] + V.shape[-1]:
                raise ValueError(f"Overdetermined shape of U: #B-cols(={m}) >= #U-cols(="
                                 f"{U.shape[-1]}) + #V-cols(={V.shape[-1]}) must hold")
        self.ivars["ortho_i"], self.ivars["ortho_j"] = i, j
        return U


def lobpcg(A, k=None, B=None, X=None, n=None, iK=None, niter=None, tol=None, largest=None,
           method=None, tracker=None, ortho_iparams=None, ortho_fparams=None, ortho_bparams=None):
    """The ``k`` largest (``largest=False``: smallest) eigenvalues E and eigenvectors X of the
    symmetric positive definite problem ``A X = B X diag(E)`` (B the identity when None), for
    dense, sparse or batched A, by torch's LOBPCG (``method="ortho"``, default, or
    ``"basic"``); ``X`` (m, n) is the first guess (random when None), ``iK`` a
    preconditioner, ``tracker(worker)`` is called after each iteration.

    Gradients reach a dense A (symmetrized first, as torch does) through torch's formulas for
    the eigenvalues and eigenvectors; not through B.

    Example:
        >>> A = ember.diag(ember.arange(1., 13.))
        >>> E, X = ember.lobpcg(A, k=2, X=ember.eye(12, 2) + 0.1)
        >>> E.round()
        tensor([12., 11.])
    """
    if A.shape[-2] != A.shape[-1]:
        raise AssertionError(f"A must be square, got shape {A.shape}")
    if B is not None and A.shape != B.shape:
        raise AssertionError(f"A and B must have same shape, got {A.shape} vs {B.shape}")
    if A.is_sparse or not (A.requires_grad or B is not None and B.requires_grad):
        return _lobpcg(A, k, B, X, n, iK, niter, tol, largest, method, tracker, ortho_iparams,
                       ortho_fparams, ortho_bparams)
    # NOTE: as torch, A (and B) are symmetrized first so that A.grad is symmetric
    return _LOBPCGFunction.apply((A + A.mT) / 2, None if B is None else (B + B.mT) / 2, largest,
                                 (k, X, n, iK, niter, tol, largest, method, tracker,
                                  ortho_iparams, ortho_fparams, ortho_bparams))


def _poly_from_roots(roots):
    """(a_0, ..., a_n = 1) with ``prod(x - r_i) = sum a_j x^j`` for each row of ``roots``."""
    n = roots.shape[-1]
    c = ember.zeros(*roots.shape[:-1], n + 2, dtype=roots.dtype, device=roots.device)
    c[..., 0] = c[..., -1] = 1
    for i in range(1, n + 1):
        new = c.clone()
        new[..., n - i:n + 1] -= roots[..., i - 1:i] * c[..., n - i + 1:n + 2]
        c = new
    return c[..., 1:]


def _symeig_backward(gD, gU, A, D, U, largest):
    """torch's gradient of k eigenpairs (D, U) of symmetric A: the complete-eigenspace formula,
    minus, for k < m, the part the unknown eigenvectors would carry, solved on a random basis
    of U's orthogonal complement through D's characteristic polynomial (torch's method)."""
    gD = ember.zeros_like(D) if gD is None else gD
    gU = ember.zeros_like(U) if gU is None else gU
    Fm = D.unsqueeze(-2) - D.unsqueeze(-1)
    Fm = 1 / (Fm + ember.diag_embed(ember.full_like(D, float("inf"))))
    Ut = U.mT
    res = U @ ((ember.diag_embed(gD) + (Ut @ gU) * Fm) @ Ut)
    m, k = U.shape[-2], U.shape[-1]
    if k == m:
        return res
    proj = ember.eye(m, dtype=A.dtype, device=A.device) - U @ Ut
    U_o = proj @ ember.randn((*A.shape[:-1], m - k), dtype=A.dtype, device=A.device)
    poly = _poly_from_roots(D)
    acc, proj_g = ember.zeros_like(gU), gU
    for j in range(1, poly.shape[-1]):         # sum_j (A^(j-1) gU) * q_j(D), Horner's parts
        q = ember.ones_like(D)
        for c in reversed(range(j, poly.shape[-1] - 1)):
            q = poly[..., c].unsqueeze(-1) + D * q
        acc = acc + proj_g * q.unsqueeze(-2)
        proj_g = A @ proj_g
    pA = ember.eye(m, dtype=A.dtype, device=A.device)
    for c in reversed(range(poly.shape[-1] - 1)):   # the characteristic polynomial at A
        pA = A @ pA + poly[..., c, None, None] * ember.eye(m, dtype=A.dtype, device=A.device)
    sign = -1 if largest and k % 2 == 1 else 1
    L = ember.linalg.cholesky(sign * (U_o.mT @ pA @ U_o))
    return res - (U_o @ (sign * ember.cholesky_solve(U_o.mT @ acc, L))) @ Ut


class _LOBPCGFunction(ember.autograd.Function):
    @staticmethod
    def forward(ctx, A, B, largest, rest):
        D, U = _lobpcg(A, rest[0], B, *rest[1:])
        ctx.save_for_backward(A, D, U)
        ctx.largest, ctx.has_B = largest, B is not None
        return D, U

    @staticmethod
    def backward(ctx, gD, gU):
        A, D, U = ctx.saved_tensors
        if ctx.has_B:
            raise ValueError("lobpcg.backward does not support backward with B != I yet.")
        largest = True if ctx.largest is None else ctx.largest
        return _symeig_backward(gD, gU, A, D, U, largest), None, None, None


def _lobpcg(A, k, B, X, n, iK, niter, tol, largest, method, tracker, ortho_iparams,
            ortho_fparams, ortho_bparams):
    dtype = A.dtype if A.dtype in (ember.float16, ember.float32, ember.float64) else ember.float32
    tol = {ember.float32: 1.2e-07, ember.float64: 2.23e-16}[dtype] ** 0.5 if tol is None else tol
    m = A.shape[-1]
    k = (1 if X is None else X.shape[-1]) if k is None else k
    n = (k if n is None else n) if X is None else X.shape[-1]
    if m < 3 * n:
        raise ValueError(f"LOBPCG algorithm is not applicable when the number of A rows (={m})"
                         f" is smaller than 3 x the number of requested eigenpairs (={n})")
    method = "ortho" if method is None else method
    iparams = {"m": m, "n": n, "k": k, "niter": 1000 if niter is None else niter}
    fparams, bparams = {"tol": tol}, {"largest": True if largest is None else largest}
    if method == "ortho":
        iparams.update(ortho_iparams or {})
        fparams.update(ortho_fparams or {})
        bparams.update(ortho_bparams or {})
        iparams.setdefault("ortho_i_max", 3)
        iparams.setdefault("ortho_j_max", 3)
        for key in ("ortho_tol", "ortho_tol_drop", "ortho_tol_replace"):
            fparams.setdefault(key, tol)
        bparams.setdefault("ortho_use_drop", False)
    batch = tuple(A.shape[:-2])
    N = 1
    for s in batch:
        N *= s
    bA, bB = A.reshape((N, m, m)), None if B is None else B.reshape((N, m, m))
    bX = None if X is None else X.reshape((N,) + tuple(X.shape[-2:]))
    Es, Xs = [], []
    for i in range(N):
        X_ = ember.randn((m, n), dtype=dtype, device=A.device) if bX is None else bX[i]
        if not (X_.dim() == 2 and tuple(X_.shape) == (m, n)):
            raise AssertionError(f"X shape mismatch: got {X_.shape}, expected {(m, n)}")
        iparams["batch_index"] = i
        worker = LOBPCG(bA[i], None if bB is None else bB[i], X_, iK, iparams, fparams, bparams,
                        method, tracker)
        worker.run()
        Es.append(worker.E[:k])
        Xs.append(worker.X[:, :k])
    if not batch:
        return Es[0], Xs[0]
    return ember.stack(Es).reshape(batch + (k,)), ember.stack(Xs).reshape(batch + (m, k))
