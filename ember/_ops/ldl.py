"""linalg.ldl_factor_ex and linalg.ldl_solve: the Bunch-Kaufman factorization ``A = L D L^T``
(``L D L^H`` for a Hermitian A) by LAPACK's ?sytrf / ?hetrf, and its solves by ?sytrs /
?hetrs."""
import ctypes
import math

import numpy as np

from .._backends import blas
from .decompositions import _small_factor
from .meta import empty
from .pointwise import _zeroed, type_name
from .registry import op
from .samples import ErrorSample, Sample, const, make
from .solvers import C_INT, P, check_matrix, lapack_rows

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
