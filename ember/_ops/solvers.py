"""Inverses and solvers: inverse, det, slogdet, logdet, linalg.solve, linalg.solve_triangular,
linalg.pinv, linalg.lstsq, matrix_exp, matrix_power, linalg.multi_dot. Forwards call
``xp.linalg`` (NumPy or CuPy); backwards are the usual formulas written in ember ops."""
import ctypes
import itertools
import math

import numpy as np

import ember
from .._backends import blas

from .linalg import matmul
from .meta import empty
from .pointwise import type_name
from .tangents import PRODUCT, decomposed, reduction
from .registry import op
from .samples import ErrorSample, Sample, const, dtype_error, make


class _LinAlgError(RuntimeError):
    """A linear-algebra routine failed on its input (singular, not positive-definite): torch's
    ``torch.linalg.LinAlgError``, a RuntimeError (named ``_LinAlgError`` as torch's class)."""


LinAlgError = _LinAlgError
C_INT, P = ctypes.c_int, ctypes.c_void_p      # (argument types of blas.lapack's functions)


def _failed(err, flag):
    raise np.linalg.LinAlgError


def lapack_gufunc(xp, name, fallback, *args):
    """NumPy's LAPACK gufunc ``name`` on ``args`` in their own precision, else ``fallback(*args)``
    (the xp.linalg function). NumPy's functions compute float32 in float64, twice LAPACK's time
    and a cast (torch stays in float32); a failure (singular, no convergence) reruns the
    fallback, for NumPy's error; NumPy 1's gufuncs have other names."""
    fn = getattr(np.linalg._umath_linalg, name, None) if xp is np else None
    # (eig's LAPACK is undefined on inf and nan: NumPy's eig refuses them)
    if fn is not None and (name not in ("eig", "eigvals") or np.isfinite(args[0]).all()):
        try:
            with np.errstate(call=_failed, invalid="call", over="ignore", divide="ignore",
                             under="ignore"):
                return fn(*args)
        except np.linalg.LinAlgError:
            pass
    return fallback(*args)


def lapack_each(fn, a, *args, out=np.int32):
    """``fn(column-major, *args, matrix, lda, ipiv)`` (getrf, sytrf; geqrf with ``out`` its
    dtype) on column-major copies of the (b, m, n) ``a``'s matrices: (the factored matrices,
    ``out`` pivots or scales (b, k), infos (b,))."""
    f = np.array(a.swapaxes(-1, -2), order="C")     # a copy: LAPACK writes into it, and a
    # column-major ``a`` (a transposed view) would otherwise be that very memory
    ipiv = np.zeros((len(f), min(a.shape[1:])),
                    np.int64 if blas._ilp64 and out == np.int32 else out)
    info = [fn(102, *args, blas.ptr(f[b:]), max(1, a.shape[1]), blas.ptr(ipiv[b:]))
            for b in range(len(f))]
    return f.swapaxes(-1, -2), ipiv.astype(out, copy=False), np.array(info, np.int32)


def lapack_rows(fn, a, *args, layout=101, work=()):
    """``fn(layout (row-major), *args, matrix, lda, ipiv, *work)`` (getrf, sytrf) on each
    matrix of the C-contiguous (b, m, n) ``a``, in place: LAPACKE transposes in C, where
    lapack_each's NumPy copies cost more than a small factorization. Returns (int32 pivots
    (b, min(m, n)), infos)."""
    ipiv = np.empty((len(a), min(a.shape[1:])), np.int64 if blas._ilp64 else np.int32)
    pa, sa, pi, si = blas.ptr(a), a.strides[0], blas.ptr(ipiv), ipiv.strides[0]
    info = [fn(layout, *args, pa + b * sa, max(1, a.shape[2]), pi + b * si, *work)
            for b in range(len(a))]
    return ipiv.astype(np.int32, copy=False), info


_LAPACK_DTYPES = tuple(map(np.dtype, (np.float32, np.float64, np.complex64, np.complex128)))


def check_matrix(name, a, square=True):
    """torch's checks on a (batch of) matrices: float or complex, 2 or more dims, square."""
    if a.dtype in _LAPACK_DTYPES and a.ndim >= 2 and (not square or a.shape[-1] == a.shape[-2]):
        return          # (the common call, in one test: the ones below cost a µs)
    low = ember._dtype.is_ml_dtypes(a.dtype) or a.dtype == np.float16
    if a.dtype.kind not in "fc" or low:
        if a.dtype.kind in "fc" or low:
            raise RuntimeError(f"{name}: Low precision dtypes not supported. Got "
                               f"{type_name(a.dtype)}")
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. "
                           f"Got {type_name(a.dtype)}")
    if a.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if square and a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are "
                           f"{a.shape[-2]} by {a.shape[-1]} matrices")


def linalg_samples(*shapes, well_conditioned=True):
    """Sample factory: float32/float64/complex128 matrices, made well conditioned (a multiple
    of the identity added) so gradients are checked away from singular points."""
    def samples(dev, dt):
        if dt.category < 2 or dt.name == "bfloat16":
            return []
        out = []
        for i, shape in enumerate(shapes):
            a = make(shape, dt, seed=i)
            if well_conditioned and shape[-1] == shape[-2]:
                a = a + np.asarray(3 * np.eye(shape[-1]), a.dtype)
            out.append(Sample(a))
        return out
    return samples


def _mT(x):
    return x.swapaxes(-1, -2)


def _singular(name, what="The solver failed because the input matrix is singular."):
    return LinAlgError(f"{name}: {what}")


# ---- inverse, det, slogdet, logdet ------------------------------------------------------------

@op("inverse")
def inverse(xp, input):
    """The inverse of a (batch of) square matrices; torch.linalg.inv."""
    check_matrix("linalg.inv", input)
    try:
        return lapack_gufunc(xp, "inv", xp.linalg.inv, input)
    except xp.linalg.LinAlgError:
        raise _singular("linalg.inv", "The diagonal element is zero, the inversion could "
                        "not be completed because the input matrix is singular.") from None


inverse.vjp(save=("result",))(lambda g, input, result: -(result.mH @ g @ result.mH))
inverse.meta = lambda input, *a, **k: empty(input.shape, input.dtype)
inverse.samples = linalg_samples((3, 3), (2, 4, 4))
inverse.errors = [
    ErrorSample(Sample(np.zeros((2, 2))), RuntimeError, "input matrix is singular"),
    ErrorSample(Sample(const(2, 3)), RuntimeError,
                "linalg.inv: A must be batches of square matrices, but they are 2 by 3"),
    dtype_error("inverse", (2, 2), exc=RuntimeError, match="linalg.inv: Expected a floating "
                "point or complex tensor as input. Got Long")]
inverse.grad_name = "LinalgInvExBackward0"


def _inv_h(a):
    return ember.inverse(a).mH


@op("det")
def det(xp, input):
    """The determinant of a (batch of) square matrices; torch.linalg.det."""
    check_matrix("linalg.det", input)
    return xp.asarray(lapack_gufunc(xp, "det", xp.linalg.det, input))


det.vjp(save=("input", "result"))(
    lambda g, input, result: (g * result.conj())[..., None, None] * _inv_h(input))
det.meta = lambda input: empty(input.shape[:-2], input.dtype)
det.samples = linalg_samples((3, 3), (2, 4, 4), (1, 1))
det.errors = [ErrorSample(Sample(const(2, 3)), RuntimeError,
                          "linalg.det: A must be batches of square matrices")]
det.grad_name = "LinalgDetBackward0"


@op("slogdet", returns=("sign", "logabsdet"))
def slogdet(xp, input):
    """(sign, log|det|) of a (batch of) square matrices; torch.linalg.slogdet."""
    check_matrix("linalg.slogdet", input)
    sign, logabs = lapack_gufunc(xp, "slogdet", xp.linalg.slogdet, input)
    return xp.asarray(sign), xp.asarray(logabs)


@slogdet.vjp(save=("input", "result"))
def _(grads, input, result):
    g_sign, g_log = grads
    g = g_log if g_log is not None else ember.zeros_like(result[1])
    if input.is_complex():
        # d sign = i sign d Im(log det): the sign's gradient enters through Im(conj(sign) g)
        g = g.to(input.dtype)
        if g_sign is not None:
            # i Im(w) as (w - conj(w)) / 2, which has a double backward
            w = result[0].conj() * g_sign
            g = g + 0.5 * (w - w.conj())
    return g[..., None, None] * _inv_h(input)


slogdet.meta = lambda input: (empty(input.shape[:-2], input.dtype),
                              empty(input.shape[:-2], np.abs(np.zeros((), input.dtype)).dtype))
slogdet.samples = linalg_samples((3, 3), (2, 4, 4))
slogdet.grad_name = "LinalgSlogdetBackward0"


@op("logdet")
def logdet(xp, input):
    """log(det(A)): nan where the determinant is negative, -inf where it is 0."""
    check_matrix("linalg.logdet", input)
    sign, logabs = lapack_gufunc(xp, "slogdet", xp.linalg.slogdet, input)
    if input.dtype.kind == "c":
        return xp.log(sign) + logabs
    return xp.where(sign < 0, np.nan, xp.where(sign == 0, -np.inf, logabs)).astype(logabs.dtype)


logdet.vjp(save=("input",))(lambda g, input: g[..., None, None] * _inv_h(input))
logdet.meta = det.meta
logdet.samples = linalg_samples((3, 3), (2, 4, 4))
logdet.grad_name = "WhereBackward0"


# ---- solve, solve_triangular ------------------------------------------------------------------

def _is_vector(A, B):
    # NOTE: torch reads B as a vector when it is 1-D or has A's batch shape exactly
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def _check_solve(name, A, B, left):
    check_matrix(name, A)
    vec = _is_vector(A, B)
    k = B.shape[-1] if vec else B.shape[-2 if left else -1]
    if k != A.shape[-1]:
        b = (B.shape[-1], 1) if vec else B.shape[-2:]
        raise RuntimeError(f"{name}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({A.shape[-2]}x{A.shape[-1]} and "
                           f"{b[0]}x{b[1]})")
    return vec


def _solve(xp, A, B, left, vec, name):
    if A.dtype != B.dtype:
        raise RuntimeError(f"{name}: Expected A and B to have the same dtype, but found A of type "
                           f"{type_name(A.dtype)} and B of type {type_name(B.dtype)} instead")
    if vec:
        B = B[..., None]
    if not left:     # X A = B  <=>  A^T X^T = B^T
        A, B = _mT(A), _mT(B)
    try:
        X = lapack_gufunc(xp, "solve", xp.linalg.solve, A, B)
    except xp.linalg.LinAlgError:
        raise _singular(name) from None
    X = X if left else _mT(X)
    return X[..., 0] if vec else X


@op("linalg_solve", function=False, method=False, promote="common")
def linalg_solve(xp, A, B, *, left=True):
    """The X with ``A @ X = B`` (``X @ A = B`` when ``left=False``); B may be a vector."""
    vec = _check_solve("linalg.solve", A, B, left)
    return _solve(xp, A, B, left, vec, "torch.linalg.solve")


@linalg_solve.vjp(save=("A", "result"))
def _(g, A, B, *, left=True, result=None):
    gB = linalg_solve(A.mH, g, left=left)
    vec = _is_vector(A, result) and _is_vector(A, gB)
    if vec:
        gA = -(gB.unsqueeze(-1) * result.conj().unsqueeze(-2))
    else:
        gA = -(gB @ result.mH) if left else -(result.mH @ gB)
    return gA, gB


linalg_solve.torch_fn = "linalg.solve"
linalg_solve.meta = lambda A, B, left=True: empty(
    np.broadcast_shapes(A.shape[:-2], B.shape[:-1 if _is_vector(A, B) else -2]) +
    (B.shape[-1:] if _is_vector(A, B) else B.shape[-2:]), A.dtype)


def _solve_samples(dev, dt):
    a = linalg_samples((3, 3), (2, 3, 3))(dev, dt)
    if not a:
        return []
    A, A2 = a[0].args[0], a[1].args[0]
    return [Sample(A, make((3, 2), dt, seed=5)), Sample(A, make((3,), dt, seed=5)),
            Sample(A2, make((3, 4), dt, seed=5)), Sample(A2, make((2, 3), dt, seed=5)),
            Sample(A, make((2, 3), dt, seed=5), left=False)]


linalg_solve.samples = _solve_samples
linalg_solve.errors = [
    ErrorSample(Sample(np.zeros((2, 2)), np.ones(2)), RuntimeError,
                "The solver failed because the input matrix is singular"),
    ErrorSample(Sample(const(2, 2), const(3)), RuntimeError,
                r"Incompatible shapes of A and B for the equation AX = B \(2x2 and 3x1\)")]
linalg_solve.grad_name = "LinalgSolveExBackward0"


def _triangle(A, upper, unitriangular, xp=np):
    T = xp.triu(A) if upper else xp.tril(A)
    if unitriangular:
        n = A.shape[-1]
        T = T * (1 - xp.eye(n, dtype=A.dtype)) + xp.eye(n, dtype=A.dtype)
    return T


@op("linalg_solve_triangular", function=False, method=False, promote="common")
def linalg_solve_triangular(xp, A, B, *, upper, left=True, unitriangular=False):
    """The X with ``A @ X = B`` for a triangular A (only its ``upper`` or lower triangle is
    read; a unit diagonal is assumed when ``unitriangular``)."""
    name = "linalg.solve_triangular"
    if B.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor B must have at least 2 dimensions.")
    _check_solve(name, A, B, left)
    trsm = xp is np and A.dtype == B.dtype and A.dtype.kind == "f" and (
        not blas.kernels._off and _TRSM.get(A.dtype.char) or _trsm(A.dtype))
    if trsm:        # BLAS's trsm, as torch (row-major, so no copies but of B into X)
        if A.ndim + B.ndim == 4:        # (one matrix: a small call's cost, no batch loop)
            X, a = np.array(B, order="C"), A if A.flags.c_contiguous else np.array(A, order="C")
            trsm(101, 141 if left else 142, 121 if upper else 122, 111, 132 if unitriangular
                 else 131, *X.shape, 1.0, blas.ptr(a), max(1, a.shape[0]), blas.ptr(X),
                 max(1, X.shape[-1]))
            return X
        batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) if A.ndim + B.ndim > 4 else ()
        X = np.array(np.broadcast_to(B, batch + B.shape[-2:]) if batch else B, order="C")
        A = np.broadcast_to(A, batch + A.shape[-2:]) if batch else A
        for i in itertools.product(*map(range, batch)):
            a = np.ascontiguousarray(A[i])
            trsm(101, 141 if left else 142, 121 if upper else 122, 111,
                 132 if unitriangular else 131, *X.shape[-2:], 1.0, blas.ptr(a),
                 max(1, a.shape[0]), blas.ptr(X[i]), max(1, X.shape[-1]))
        return X
    # NOTE: NumPy has no triangular solver: solve with the triangle (zeros elsewhere), which
    # is what the triangular solver computes, at LU's cost.
    return _solve(xp, _triangle(A, upper, unitriangular, xp), B, left, False, name)


_TRSM = {}      # (blas.lapack's look-up by dtype.char: building its arguments costs ~0.6 us)


def _trsm(dtype):
    fn = _TRSM[dtype.char] = blas.lapack("cblas_trsm", dtype, *[C_INT] * 5, int, int, float, P,
                                         int, P, int)
    return fn


@linalg_solve_triangular.vjp(save=("A", "result"))
def _(g, A, B, *, upper, left=True, unitriangular=False, result=None):
    gB = linalg_solve_triangular(A.mH, g, upper=not upper, left=left, unitriangular=unitriangular)
    gA = -(gB @ result.mH) if left else -(result.mH @ gB)
    gA = gA.triu(int(unitriangular)) if upper else gA.tril(-int(unitriangular))
    return gA, gB


linalg_solve_triangular.torch_fn = "linalg.solve_triangular"
linalg_solve_triangular.meta = lambda A, B, **kw: empty(
    np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + B.shape[-2:], A.dtype)


def _solve_triangular_samples(dev, dt):
    if dt.category < 2 or dt.name == "bfloat16":
        return []
    A = make((3, 3), dt) + np.asarray(3 * np.eye(3), dt.np)
    return [Sample(A, make((3, 2), dt, seed=1), upper=True),
            Sample(A, make((2, 3, 4), dt, seed=1), upper=False, unitriangular=True),
            Sample(A, make((2, 3), dt, seed=1), upper=False, left=False)]


linalg_solve_triangular.samples = _solve_triangular_samples
linalg_solve_triangular.errors = [
    ErrorSample(Sample(const(2, 2), const(3, 1), upper=True), RuntimeError,
                r"Incompatible shapes of A and B for the equation AX = B \(2x2 and 3x1\)")]


# ---- pinv, lstsq ------------------------------------------------------------------------------

def _pinv(xp, A, atol, rtol, hermitian):
    if hermitian:
        s, u = lapack_gufunc(xp, "eigh_lo", xp.linalg.eigh, A)
        vh = u.conj().swapaxes(-1, -2)
        a = xp.abs(s)
    else:
        u, s, vh = lapack_gufunc(xp, "svd_s", lambda a: xp.linalg.svd(a, False), A)
        a = s
    smax = a.max(axis=-1, keepdims=True) if a.shape[-1] else a[..., :1]
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else np.finfo(a.dtype).eps * max(A.shape[-2:])
    tol = xp.maximum(atol or 0.0, rtol * smax)
    sinv = xp.where(a > tol, 1 / xp.where(a > tol, s, 1), 0).astype(A.dtype)
    return (vh.conj().swapaxes(-1, -2) * sinv[..., None, :]) @ u.conj().swapaxes(-1, -2)


@op("linalg_pinv", function=False, method=False)
def linalg_pinv(xp, input, *, atol=None, rtol=None, hermitian=False):
    """The Moore-Penrose pseudo-inverse, by SVD (eigh when ``hermitian``): singular values
    at most ``max(atol, rtol * largest)`` are treated as zero."""
    if input.ndim < 2 or input.dtype.kind not in "fc":
        raise RuntimeError(f"linalg.pinv({type_name(input.dtype)}{{{list(input.shape)}}}): "
                           "expected a tensor with 2 or more dimensions of float, double, "
                           "cfloat or cdouble types")
    return _pinv(xp, input, atol, rtol, hermitian)


def pinv_backward(g, pinvA, A):
    """torch's pinv_backward: valid where the rank of A does not change."""
    m, n = A.shape[-2], A.shape[-1]
    pinvAh, gh = pinvA.mH, g.mH
    if m <= n:
        K = gh @ pinvA
        KpinvAh = K @ pinvAh
        return -(pinvA @ K).mH + KpinvAh - (A @ pinvA) @ KpinvAh + (pinvAh @ pinvA) @ (gh - K @ A)
    K = pinvA @ gh
    pinvAhK = pinvAh @ K
    return -(K @ pinvA).mH + (gh - A @ K) @ pinvA @ pinvAh + pinvAhK - pinvAhK @ pinvA @ A


linalg_pinv.vjp(save=("input", "result"))(
    lambda g, input, atol=None, rtol=None, hermitian=False, result=None:
    pinv_backward(g, result, input))
linalg_pinv.torch_fn = "linalg.pinv"
linalg_pinv.meta = lambda input, **kw: empty(input.shape[:-2] + input.shape[-1:-3:-1], input.dtype)
linalg_pinv.samples = lambda dev, dt: linalg_samples((3, 3), (2, 4, 3), (3, 5))(dev, dt) + (
    [Sample(make((3, 4), dt) @ np.diag([1, 1, 1, 0]).astype(dt.np), rtol=1e-5).at_kink()]
    if dt.category >= 2 and dt.name != "bfloat16" else [])
linalg_pinv.errors = [ErrorSample(Sample(const(3)), RuntimeError,
                                  "expected a tensor with 2 or more dimensions")]


@op("linalg_lstsq", function=False, method=False, nondiff_outputs=(2, 3),
    returns=("solution", "residuals", "rank", "singular_values"))
def linalg_lstsq(xp, A, B, rcond=None, *, driver=None):
    """Least-squares solution of ``A @ X = B`` (via the pseudo-inverse). As torch on cpu, the
    default driver ``"gelsy"`` returns the rank but no residuals or singular values."""
    check_matrix("torch.linalg.lstsq", A, square=False)
    if not 0 <= A.ndim - B.ndim <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to "
                           "other.dim() and (input.dim() - other.dim()) <= 1")
    vec = B.ndim == A.ndim - 1
    if (B[..., None] if vec else B).shape[-2] != A.shape[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    driver = driver or "gelsy"
    m, n = A.shape[-2:]
    rtol = np.finfo(A.dtype).eps * max(m, n) if rcond is None or rcond < 0 else rcond
    gelsy = driver == "gelsy" and xp is np and A.dtype == B.dtype and blas.lapack(
        "gelsy", A.dtype, C_INT, int, int, int, P, int, P, int, P, float, P)
    if gelsy:       # LAPACK's gelsy (QR with column pivoting), torch's default driver on cpu
        Bm = B[..., None] if vec else B
        batch, k = np.broadcast_shapes(A.shape[:-2], Bm.shape[:-2]), Bm.shape[-1]
        Ab, Bb = np.broadcast_to(A, batch + (m, n)), np.broadcast_to(Bm, batch + (m, k))
        X, rank = np.empty(batch + (n, k), A.dtype), np.zeros(batch, np.int64)
        jpvt = np.zeros(n + 1, np.int64 if blas._ilp64 else np.int32)
        for i in itertools.product(*map(range, batch)):
            a = np.array(Ab[i].T, order="C")        # (the column-major buffers LAPACK reads)
            b = np.zeros((k, max(m, n)), A.dtype)
            b[:, :m], jpvt[:] = Bb[i].T, 0
            if gelsy(102, m, n, k, blas.ptr(a), max(1, m), blas.ptr(b), max(1, m, n),
                     blas.ptr(jpvt), rtol, blas.ptr(jpvt[n:])) < 0:
                break       # (an argument LAPACK refuses: the NumPy path runs)
            X[i], rank[i] = b[:, :n].T, jpvt[n]
        else:
            real = np.zeros((0,), A.real.dtype)
            return X[..., 0] if vec else X, real, rank, real
    s = xp.linalg.svd(A, compute_uv=False)
    X = _pinv(xp, A, None, rtol, False) @ (B[..., None] if vec else B)
    smax = s[..., :1] if s.shape[-1] else s
    rank = (s > rtol * smax).sum(-1).astype(np.int64)
    real = s.dtype
    resid = xp.zeros((0,), real)
    if driver != "gelsy" and m > n and bool((rank == n).all()):
        r = (B[..., None] if vec else B) - A @ X
        resid = (xp.abs(r) ** 2).sum(-2)
    X = X[..., 0] if vec else X
    return (X, resid, rank if driver != "gels" else xp.zeros((0,), np.int64),
            s if driver in ("gelsd", "gelss") else xp.zeros((0,), real))


@linalg_lstsq.vjp(save=("A", "B", "result"))
def _(grads, A, B, rcond=None, *, driver=None, result=None):
    # X = pinv(A) B
    g, g_res = grads[0], grads[1]
    vec = B.dim() == A.dim() - 1
    X = result[0]
    if vec:
        B, X = B.unsqueeze(-1), X.unsqueeze(-1)
        g = g.unsqueeze(-1) if g is not None else None
    P = linalg_pinv(A)
    gA = pinv_backward(g @ B.mH, P, A) if g is not None else 0
    gB = P.mH @ g if g is not None else 0
    if g_res is not None and g_res.numel():
        # residuals |B - A X|^2 are minimal in X, so only their explicit A and B count
        r2 = 2 * (B - A @ X) * g_res.unsqueeze(-2)
        gA, gB = gA - r2 @ X.mH, gB + r2
    return gA, gB.squeeze(-1) if vec else gB


linalg_lstsq.torch_fn = "linalg.lstsq"


def _lstsq_meta(A, B, rcond=None, *, driver=None):
    # NOTE: the residuals' shape depends on the rank; assumed full here
    vec = B.ndim == A.ndim - 1
    m, n = A.shape[-2:]
    batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-1 if vec else -2])
    real = np.abs(np.zeros((), A.dtype)).dtype
    driver = driver or "gelsy"
    return (empty(batch + ((n,) if vec else (n, B.shape[-1])), A.dtype),
            empty(batch + ((1,) if vec else (B.shape[-1],)) if driver != "gelsy" and m > n
                  else (0,), real),
            empty(batch if driver != "gels" else (0,), np.int64),
            empty(batch + (min(m, n),) if driver in ("gelsd", "gelss") else (0,), real))


linalg_lstsq.meta = _lstsq_meta
linalg_lstsq.samples = lambda dev, dt: [
    Sample(make((5, 3), dt), make((5, 2), dt, seed=1)),
    Sample(make((2, 4, 3), dt), make((2, 4, 2), dt, seed=1)),
    Sample(make((3, 5), dt), make((3, 2), dt, seed=1)),
    Sample(make((5, 3), dt), make((5, 2), dt, seed=1), driver="gelsd")] \
    if dt.category >= 2 and dt.name != "bfloat16" else []
linalg_lstsq.errors = [ErrorSample(Sample(const(3, 2), const(4, 1)), RuntimeError,
                                   r"input.size\(-2\) should match other.size\(-2\)"),
                       ErrorSample(Sample(const(3, 2), const(5, 3, 4)), RuntimeError,
                                   r"input.dim\(\) must be greater or equal to other.dim\(\)")]


# ---- matrix_exp, matrix_power -----------------------------------------------------------------

@op("matrix_exp")
def matrix_exp(xp, input):
    """exp(A) of a (batch of) square matrices, by scaling and squaring a Taylor series."""
    check_matrix("linalg.matrix_exp", input)
    norm = float(xp.abs(input).sum(-2).max()) if input.size else 0.0
    # NOTE: scale to ||A|| <= theta, where degree 18's remainder (theta^19 / 19!) is under the
    # dtype's eps; square back after
    theta = 1.0 if input.dtype.itemsize in (8, 16) else 2.0
    squarings = max(0, math.ceil(math.log2(norm / theta))) if norm > theta else 0
    a = input / 2 ** squarings
    # Paterson-Stockmeyer: sum_j B_j (A^4)^j, B_j in I, A, A^2, A^3: 7 products, not 18
    P = [xp.broadcast_to(xp.eye(a.shape[-1], dtype=a.dtype), a.shape), a]
    for _ in range(3):
        P.append(matmul.fwd(xp, P[-1], a))
    out = 0
    for j in range(4, -1, -1):
        B = sum(P[i] / math.factorial(4 * j + i) for i in range(4) if 4 * j + i <= 18)
        out = B if j == 4 else matmul.fwd(xp, out, P[4]) + B
    for _ in range(squarings):
        out = matmul.fwd(xp, out, out)
    return out.astype(input.dtype, copy=False)


@matrix_exp.vjp(save=("input",))
def _(g, input):
    # NOTE: exp([[A^H, G], [0, A^H]]) holds the derivative of exp at A applied to G in its
    # upper-right block (Mathias 1996); the block matrix keeps it differentiable.
    n = input.shape[-1]
    ah = input.mH
    top = ember.cat([ah, g], -1)
    bottom = ember.cat([ember.zeros_like(ah), ah], -1)
    return matrix_exp(ember.cat([top, bottom], -2))[..., :n, n:]


matrix_exp.meta = inverse.meta
matrix_exp.samples = lambda dev, dt: linalg_samples((3, 3), (2, 4, 4), well_conditioned=False)(
    dev, dt) + ([Sample(make((3, 3), dt, -3, 3, seed=4))] if dt.category >= 2 and
                dt.name != "bfloat16" else [])
matrix_exp.errors = [ErrorSample(Sample(const(2, 3)), RuntimeError,
                                 "linalg.matrix_exp: A must be batches of square matrices")]
matrix_exp.grad_name = "LinalgMatrixExpBackward0"


@op("matrix_power")
def matrix_power(xp, input, n):
    """A^n for an integer n (A^-n is inv(A)^n; A^0 the identity)."""
    if input.ndim < 2 or input.shape[-1] != input.shape[-2]:
        check_matrix("linalg.matrix_power", input.astype(np.float64))
    if n < 0:
        input = inverse.fwd(xp, input)
    out, base, k = None, input, abs(n)
    while k:        # binary powering, through matmul (bfloat16 rounds like torch's)
        if k & 1:
            out = base if out is None else matmul.fwd(xp, out, base)
        k >>= 1
        if k:
            base = matmul.fwd(xp, base, base)
    if out is None:     # (broadcast_to's Python costs more than the eye of a matrix)
        eye = xp.eye(input.shape[-1], dtype=input.dtype)
        return eye if input.ndim == 2 else xp.broadcast_to(eye, input.shape).copy()
    return out.copy() if out is input else out


@matrix_power.vjp(save=("input",))
def _(g, input, n):
    a = ember.inverse(input) if n < 0 else input
    k = abs(n)
    # d(A^k) = sum_i A^i dA A^(k-1-i)
    powers = [ember.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand(a.shape)]
    for _ in range(k - 1):
        powers.append(powers[-1] @ a)
    ga = g * 0
    for i in range(k):
        ga = ga + powers[i].mH @ g @ powers[k - 1 - i].mH
    if n < 0:
        ga = -(a.mH @ ga @ a.mH)
    return ga, None


matrix_power.meta = lambda input, n: empty(input.shape, input.dtype)
matrix_power.samples = lambda dev, dt: [
    Sample(make((3, 3), dt) + (3 * np.eye(3)).astype(dt.np) if dt.category >= 2 else
           make((3, 3), dt), n) for n in (0, 1, 3)] + (
    [Sample(make((2, 3, 3), dt) + (3 * np.eye(3)).astype(dt.np), -2)]
    if dt.category >= 2 and dt.name != "bfloat16" else []) if dt.category >= 1 else []
matrix_power.errors = [ErrorSample(Sample(const(2, 3), 2), RuntimeError,
                                   "linalg.matrix_power: A must be batches of square matrices")]


def _matrix_power_node(input, n):
    """torch's node of matrix_power: a copy (n = 0), a clone (1), an inverse (-1), else the
    last product: mm, or a batched matmul's view."""
    return {0: "torch::autograd::CopyBackwards", 1: "CloneBackward0",
            -1: "LinalgInvExBackward0"}.get(n, "MmBackward0" if input.dim() == 2 else
                                            "UnsafeViewBackward0")


matrix_power.grad_name_of = _matrix_power_node


# ---- multi_dot --------------------------------------------------------------------------------

def _chain_order(shapes):
    """The cheapest parenthesization of a matrix chain (dynamic programming): split[i][j]."""
    n = len(shapes)
    dims = [shapes[0][0]] + [s[1] for s in shapes]
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for span in range(1, n):
        for i in range(n - span):
            j = i + span
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


@op("linalg_multi_dot", function=False, method=False)
def linalg_multi_dot(xp, tensors):
    """The product of a chain of matrices in the cheapest order (the first and last may be
    vectors)."""
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    a, b = tensors[0], tensors[-1]      # (two matrices, the most common chain: one product)
    if len(tensors) == 2 and a.ndim == 2 == b.ndim and a.shape[1] == b.shape[0]:
        return matmul.fwd(xp, a, b)
    ms = []
    for i, t in enumerate(tensors):
        edge = i in (0, len(tensors) - 1)
        if t.ndim != 2 and not (edge and t.ndim == 1):
            which = "the first tensor" if i == 0 else "the last tensor" if edge else f"tensor {i}"
            raise RuntimeError(f"multi_dot(): {which} must be "
                               f"{'1D or 2D' if edge else '2D'} but got {t.ndim}D")
        ms.append(t[None] if t.ndim == 1 and i == 0 else t[:, None] if t.ndim == 1 else t)
    for i in range(len(ms) - 1):
        if ms[i].shape[1] != ms[i + 1].shape[0]:
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes "
                               f"{list(tensors[i].shape)} and {list(tensors[i + 1].shape)} "
                               "cannot be multiplied")
    split = _chain_order([m.shape for m in ms]) if len(ms) > 2 else [[0, 0]]   # (one order)

    def prod(i, j):
        return ms[i] if i == j else matmul.fwd(xp, prod(i, split[i][j]), prod(split[i][j] + 1, j))
    out = prod(0, len(ms) - 1)
    drop = (0,) * (tensors[0].ndim == 1) + (1,) * (tensors[-1].ndim == 1)
    return out.reshape([n for k, n in enumerate(out.shape) if k not in drop]) if drop else out


@linalg_multi_dot.vjp(save=("tensors",))
def _(g, tensors):
    ms = [t.unsqueeze(0) if t.dim() == 1 and i == 0 else t.unsqueeze(-1) if t.dim() == 1
          else t for i, t in enumerate(tensors)]
    g = g.reshape(ms[0].shape[0], ms[-1].shape[1])
    left, right = [None] * len(ms), [None] * len(ms)
    for i in range(1, len(ms)):
        left[i] = ms[i - 1] if i == 1 else left[i - 1] @ ms[i - 1]
    for i in range(len(ms) - 2, -1, -1):
        right[i] = ms[i + 1] if i == len(ms) - 2 else ms[i + 1] @ right[i + 1]
    grads = []
    for i, t in enumerate(tensors):
        if not t.requires_grad:
            grads.append(None)
            continue
        gi = g if left[i] is None else left[i].mH @ g
        gi = gi if right[i] is None else gi @ right[i].mH
        grads.append(gi.reshape(t.shape))
    return (grads,)


linalg_multi_dot.torch_fn = "linalg.multi_dot"
linalg_multi_dot.samples = lambda dev, dt: [
    Sample([make((3, 4), dt), make((4, 2), dt, seed=1)]),
    Sample([make((4,), dt), make((4, 6), dt, seed=1), make((6, 2), dt, seed=2),
            make((2, 5), dt, seed=3)]),
    Sample([make((2, 3), dt), make((3, 1), dt, seed=1), make((1,), dt, seed=2)]),
    Sample([make((3,), dt), make((3,), dt, seed=1)])] if dt.category >= 1 else []
linalg_multi_dot.errors = [
    ErrorSample(Sample([const(2, 3)]), RuntimeError, "expected at least 2 tensors but got 1"),
    ErrorSample(Sample([const(2, 3), const(4, 5)]), RuntimeError,
                r"tensors 0 and 1 with shapes \[2, 3\] and \[4, 5\] cannot be multiplied")]
linalg_multi_dot.grad_name = "ViewBackward0"


# ---- forward mode (tangents.py) ----------------------------------------------------------


def _solve_jvp(a, t, out, tri=False):
    A, X, left = a["A"], out, a["left"]
    tA = t["A"]
    if tri:
        tA = tA.triu(int(a["unitriangular"])) if a["upper"] else tA.tril(-int(a["unitriangular"]))
        solve = lambda M, R: ember.linalg.solve_triangular(  # noqa: E731
            M, R, upper=a["upper"], left=left, unitriangular=a["unitriangular"])
    else:
        solve = lambda M, R: ember.linalg.solve(M, R, left=left)  # noqa: E731
    vec = not tri and left and (X.dim() == 1 or X.dim() == A.dim() - 1 and
                                X.shape == a["B"].shape and a["B"].shape[-1] == A.shape[-1] and
                                X.shape[:-1] == A.shape[:-2])
    if vec:
        return solve(A, (t["B"] - (tA @ X.unsqueeze(-1)).squeeze(-1)).unsqueeze(-1)).squeeze(-1)
    return solve(A, t["B"] - (tA @ X if left else X @ tA))


def _matrix_exp_jvp(a, t, out):
    A, n = a["input"], a["input"].shape[-1]
    if n == 0:
        return out.clone()
    top, bottom = ember.cat([A, t["input"]], -1), ember.cat([ember.zeros_like(A), A], -1)
    return ember.matrix_exp(ember.cat([top, bottom], -2))[..., :n, n:]


def _matrix_power_jvp(a, t, out):
    A, tA, n = a["input"], t["input"], a["n"]
    if n < 0:
        A = ember.linalg.inv(A)
        tA, n = -A @ tA @ A, -n
    powers = [ember.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(A.shape)]
    for _ in range(n - 1):
        powers.append(powers[-1] @ A)
    terms = [powers[k] @ tA @ powers[n - 1 - k] for k in range(n)]
    return sum(terms[1:], terms[0]) if terms else ember.zeros_like(out)


def _pinv_tangent(A, P, tA):
    """The tangent of ``P = pinv(A)`` along ``tA`` (constant rank: Golub and Pereyra)."""
    eye = lambda n: ember.eye(n, dtype=A.dtype, device=A.device)  # noqa: E731
    tH = tA.mH
    return (-P @ tA @ P + P @ P.mH @ tH @ (eye(A.shape[-2]) - A @ P) +
            (eye(A.shape[-1]) - P @ A) @ tH @ P.mH @ P)


def _lstsq_jvp(a, t, out):
    """solution = pinv(A) B; residuals (full column rank, m > n) = |A X - B|^2 per column,
    whose tangent loses the A dX term (A^H r = 0 at the solution)."""
    A, B, X = a["A"], a["B"], out[0]
    dX = _pinv_tangent(A, ember.linalg.pinv(A), t["A"]) @ B + ember.linalg.pinv(A) @ t["B"]
    res = out[1]
    if res.numel():
        r = A @ X - B
        res = (2 * (r.conj() * (t["A"] @ X - t["B"])).real).sum(-2).to(res.dtype)
    else:
        res = ember.zeros_like(res)
    return dX, res, None, None


for _d in (det, logdet, slogdet):       # one output element per matrix
    _d.jvp = reduction(lambda a: ((-2, -1), False))
inverse.jvp = decomposed(lambda a, t, out: -out @ t["input"] @ out)
linalg_multi_dot.jvp = PRODUCT
linalg_pinv.jvp = decomposed(lambda a, t, out: _pinv_tangent(a["input"], out, t["input"]))
linalg_lstsq.jvp = decomposed(_lstsq_jvp)
linalg_solve.jvp = decomposed(_solve_jvp)
linalg_solve_triangular.jvp = decomposed(lambda a, t, out: _solve_jvp(a, t, out, tri=True))
matrix_exp.jvp, matrix_power.jvp = decomposed(_matrix_exp_jvp), decomposed(_matrix_power_jvp)
