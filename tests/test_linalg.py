"""torch.linalg's compositions and torch's older linear-algebra APIs against torch (the OpDefs
themselves are covered by the registry tests)."""
import functools
import math

import numpy as np
import pytest

import ember
from oracle import same, torch

rng = np.random.default_rng(0)
A = rng.uniform(-1, 1, (3, 3)) + 3 * np.eye(3)
SPD = A @ A.T
BATCH = rng.uniform(-1, 1, (2, 3, 3)) + 3 * np.eye(3)
B = rng.uniform(-1, 1, (3, 2))
RECT = rng.uniform(-1, 1, (4, 3))


def t(lib, x, grad=False):
    return lib.tensor(x, dtype=lib.float64, requires_grad=grad)


CASES = {
    "vector_norm": lambda L: [L.linalg.vector_norm(t(L, RECT), o) for o in (2, 1, math.inf, 0)],
    "vector_norm_dim": lambda L: L.linalg.vector_norm(t(L, RECT), 3, dim=1, keepdim=True),
    "matrix_norm": lambda L: [L.linalg.matrix_norm(t(L, BATCH), o)
                              for o in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)],
    "matrix_norm_keepdim": lambda L: L.linalg.matrix_norm(t(L, RECT), 1, keepdim=True),
    "norm": lambda L: [L.linalg.norm(t(L, RECT)), L.linalg.norm(t(L, RECT), "nuc"),
                       L.linalg.norm(t(L, RECT), 1), L.linalg.norm(t(L, RECT), 3, dim=0)],
    "cond": lambda L: [L.linalg.cond(t(L, A)), L.linalg.cond(t(L, A), "fro"),
                       L.linalg.cond(t(L, BATCH), 1)],
    "matrix_rank": lambda L: [L.linalg.matrix_rank(t(L, RECT @ np.diag([1, 1, 0]))),
                              L.linalg.matrix_rank(t(L, SPD), hermitian=True)],
    "inv_ex": lambda L: L.linalg.inv_ex(t(L, BATCH)),
    "inv_ex_singular": lambda L: L.linalg.inv_ex(t(L, np.stack([A, np.zeros((3, 3))])))[1],
    "solve_ex": lambda L: L.linalg.solve_ex(t(L, A), t(L, B)),
    "cholesky": lambda L: [L.linalg.cholesky(t(L, SPD)), L.linalg.cholesky(t(L, SPD), upper=True)],
    "cholesky_not_pd": lambda L: L.linalg.cholesky(t(L, -np.eye(2))),
    "cholesky_ex_info": lambda L: L.linalg.cholesky_ex(t(L, np.stack([SPD, -SPD])))[1],
    "inv_singular": lambda L: L.linalg.inv(t(L, np.zeros((2, 2)))),
    "lu": lambda L: L.linalg.lu(t(L, RECT)),
    "lu_factor": lambda L: L.linalg.lu_factor(t(L, BATCH)),
    "lu_factor_singular": lambda L: L.linalg.lu_factor(t(L, np.zeros((2, 2)))),
    "lu_solve": lambda L: [L.linalg.lu_solve(*L.linalg.lu_factor(t(L, A)), t(L, x), left=lf,
                                             adjoint=adj)
                           for x, lf in ((B, True), (B.T, False)) for adj in (False, True)],
    "householder_product": lambda L: L.linalg.householder_product(
        t(L, RECT), t(L, np.array([1.2, 0.5, 1.7]))),
    "tensorinv": lambda L: L.linalg.tensorinv(t(L, A.reshape(3, 3, 1)[:, :, 0].reshape(3, 3)
                                                  ).reshape(3, 3), ind=1),
    "tensorsolve": lambda L: L.linalg.tensorsolve(t(L, np.kron(A, A).reshape(3, 3, 3, 3)),
                                                  t(L, A)),
    "vecdot": lambda L: L.linalg.vecdot(t(L, RECT), t(L, RECT[::-1].copy())),
    "cross": lambda L: L.linalg.cross(t(L, RECT[:, :3]), t(L, RECT[::-1, :3].copy())),
    "diagonal": lambda L: L.linalg.diagonal(t(L, BATCH)),
    "logdet": lambda L: [L.logdet(t(L, A)), L.logdet(t(L, -np.eye(3))),
                         L.logdet(t(L, np.zeros((2, 2))))],
    "cholesky_solve": lambda L: [L.cholesky_solve(t(L, B), L.linalg.cholesky(t(L, SPD))),
                                 t(L, B).cholesky_solve(L.linalg.cholesky(t(L, SPD)).mT, True)],
    "cholesky_inverse": lambda L: L.cholesky_inverse(L.linalg.cholesky(t(L, SPD))),
    "old_cholesky": lambda L: t(L, SPD).cholesky(upper=True),
    "pinverse": lambda L: [L.pinverse(t(L, RECT)), t(L, RECT).pinverse()],
    "svd_old": lambda L: [x.abs() for x in L.svd(t(L, RECT))],
    "svd_no_uv": lambda L: L.svd(t(L, RECT), compute_uv=False),
    "qr_old": lambda L: [x.abs() for x in t(L, RECT).qr(some=False)],
    "lu_unpack": lambda L: L.lu_unpack(*L.linalg.lu_factor(t(L, BATCH))),
    "triangular_solve": lambda L: [L.triangular_solve(t(L, B), t(L, A), upper=u, transpose=tr)
                                   for u in (True, False) for tr in (False, True)],
    "chain_matmul": lambda L: L.chain_matmul(t(L, RECT), t(L, A), t(L, B)),
    "methods": lambda L: [t(L, A).det(), t(L, A).inverse(), t(L, A).slogdet(),
                          t(L, A).matrix_exp(), t(L, A).matrix_power(-2), t(L, A).logdet()],
    "einsum_list_and_implicit": lambda L: [L.einsum("ij,jk", [t(L, A), t(L, B)]),
                                           L.einsum("ii->", t(L, A)),
                                           L.einsum("...j,j", t(L, BATCH), t(L, A[0]))],
}


@pytest.mark.parametrize("name", CASES)
def test_linalg_matches_torch(name):
    same(CASES[name])


def test_errors_are_linalg_errors():
    assert issubclass(ember.linalg.LinAlgError, RuntimeError)
    for fn in (lambda: ember.linalg.inv(ember.zeros(2, 2)),
               lambda: ember.linalg.solve(ember.zeros(2, 2), ember.ones(2)),
               lambda: ember.linalg.cholesky(-ember.eye(2)),
               lambda: ember.linalg.lu_factor(ember.zeros(2, 2))):
        with pytest.raises(ember.linalg.LinAlgError):
            fn()
    with pytest.raises(RuntimeError, match=r"linalg.cholesky: \(Batch element 1\): The "
                       r"factorization could not be completed .* order 1"):
        ember.linalg.cholesky(ember.stack([ember.eye(2), -ember.eye(2)]))


def _grads(lib, fn, *arrays):
    xs = [t(lib, a, True) for a in arrays]
    out = fn(lib, *xs)
    w = np.random.default_rng(1).standard_normal(tuple(out.shape))
    return lib.autograd.grad((out * lib.tensor(w)).sum(), xs)


@pytest.mark.parametrize("name,fn,arrays", [
    ("lu_solve", lambda L, a, b: L.linalg.lu_solve(*L.linalg.lu_factor(a), b), (A, B)),
    ("lu", lambda L, a: sum((x * x).sum() for x in L.linalg.lu(a)[1:]), (RECT,)),
    ("cholesky_solve", lambda L, a, b: L.cholesky_solve(b, L.linalg.cholesky(a @ a.mT)),
     (A, B)),
    ("cond", lambda L, a: L.linalg.cond(a), (A,)),
    ("matrix_norm_nuc", lambda L, a: L.linalg.matrix_norm(a, "nuc"), (RECT,)),
    ("householder_product", lambda L, a, tau: L.linalg.householder_product(a, tau),
     (RECT, np.array([1.2, 0.5, 1.7]))),
])
def test_composite_gradients_match_torch(name, fn, arrays):
    e, tg = _grads(ember, fn, *arrays), _grads(torch, fn, *arrays)
    for a, b in zip(e, tg):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_lapack_paths_match_the_numpy_reference(dtype):
    """potrf, getrf, sytrf, gelsy and trsm (blas.lapack) against the NumPy reference path
    (``EMBER_NO_C=1``): batched, non-contiguous, singular and NaN inputs, pivots and infos."""
    r = np.random.default_rng(1)
    x = r.uniform(-1, 1, (3, 70, 70)).astype(dtype)
    if dtype == np.complex128:
        x = x + 1j * r.uniform(-1, 1, x.shape)
    x[1, :, 4] = 0                                          # singular: LU's info
    x[2, 0, 0] = x[2, 1, 1] = 1e-3                          # 2x2 pivots in LDL
    spd = x @ x.conj().swapaxes(-1, -2) + 70 * np.eye(70)
    spd[1, 30, 30] = -1e4                                   # not positive-definite: info 31
    xt = ember.tensor(x).mT                                 # (non-contiguous)
    nan = ember.tensor(np.where(np.eye(5) > 0, np.nan, x[0, :5, :5]))
    chol = ember.linalg.cholesky_ex         # (L is unspecified where info > 0: NaN or partial)
    calls = [lambda: (chol(ember.tensor(spd)).L[[0, 2]], chol(ember.tensor(spd)).info),
             lambda: chol(ember.tensor(spd[[0, 2]]), upper=True),
             lambda: ember.linalg.lu_factor_ex(xt), lambda: ember.linalg.lu_factor_ex(xt[:, :40]),
             lambda: ember.linalg.lu_factor_ex(xt[:, :, :40]),
             lambda: ember.linalg.ldl_factor_ex(xt), lambda: ember.linalg.ldl_factor_ex(nan),
             lambda: ember.linalg.ldl_factor_ex(xt, hermitian=True),
             lambda: ember.linalg.ldl_solve(*ember.linalg.ldl_factor(xt[:, :9, :9]),
                                            xt[:, 9:18, :3]),
             lambda: ember.linalg.ldl_solve(*ember.linalg.ldl_factor(xt[2], hermitian=True),
                                            xt[:, :, :2], hermitian=True),
             lambda: ember.linalg.lstsq(xt[:, :, :40], xt[:1, :, :3]),
             lambda: ember.linalg.lstsq(xt[:2, :30], xt[:2, :30, 0]),
             lambda: ember.linalg.solve_triangular(xt + 9 * ember.eye(70), xt[0], upper=True),
             lambda: ember.linalg.solve_triangular(xt + 9 * ember.eye(70), xt[0, :5], upper=False,
                                                   left=False, unitriangular=True)]
    _match_the_reference(calls, 1e-3 if dtype == np.float32 else 1e-9)


def _match_the_reference(calls, tol, threads=None):
    """Each call's outputs with the C kernels (at ``threads``, default the current number)
    equal those of the NumPy reference path."""
    from ember._C import kernels
    before = ember.get_num_threads()
    ember.set_num_threads(threads or before)
    try:
        for call in calls:
            fast = call()
            with kernels.disabled():
                ref = call()
            for f, e in zip(*((o,) if isinstance(o, ember.Tensor) else o for o in (fast, ref))):
                assert f.shape == e.shape and f.dtype == e.dtype
                if f.dtype in (ember.int32, ember.int64):
                    assert (f == e).all()
                elif f.numel():
                    np.testing.assert_allclose(f.numpy(), e.numpy(), rtol=tol, atol=tol)
    finally:
        ember.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_small_factorizations_match_the_numpy_reference(dtype, threads):
    """factor.h (real matrices up to 32 x 32: cholesky_ex, lu_factor_ex, qr, geqrf,
    ldl_factor_ex, whose pivots must be LAPACK's exactly) against
    the NumPy reference (LAPACK through NumPy): batched, odd, tall and wide shapes, a
    transposed input, singular and non-positive-definite matrices' info."""
    r = np.random.default_rng(2)
    x = r.uniform(-1, 1, (3, 7, 7)).astype(dtype)
    x[1, :, 2] = 0                                          # singular: LU's info 3
    spd = x @ x.swapaxes(-1, -2) + 7 * np.eye(7, dtype=dtype)
    spd[1, 4, 4] = -50                                      # not positive-definite: info 5
    xt = ember.tensor(x).mT                                 # (non-contiguous)
    chol = ember.linalg.cholesky_ex
    calls = [lambda: (chol(ember.tensor(spd)).L[[0, 2]], chol(ember.tensor(spd)).info),
             lambda: chol(ember.tensor(spd[[0, 2]]), upper=True),
             lambda: chol(ember.tensor(spd[0, :1, :1] - 9)).info,
             lambda: ember.linalg.lu_factor_ex(ember.tensor(x)),
             lambda: ember.linalg.lu_factor_ex(xt[:, :5]),
             lambda: ember.linalg.lu_factor_ex(xt[0, :, :3]),
             lambda: ember.linalg.lu_factor_ex(ember.tensor(0 * x[:2, :3, :3])),
             lambda: ember.linalg.qr(xt), lambda: ember.linalg.qr(xt[:, :, :4]),
             lambda: ember.linalg.qr(xt[:, :3], "complete"),
             lambda: ember.linalg.qr(xt[:, :, :4], "complete"),
             lambda: ember.linalg.qr(xt[1, :3], "r")[1],
             lambda: ember.linalg.qr(ember.tensor(x[1])),
             lambda: ember.geqrf(xt[:, :, :4]), lambda: ember.geqrf(xt[0, :3]),
             # (LDL^T: 2x2 pivots from the small diagonal, interchanges, info of a zero column)
             lambda: ember.linalg.ldl_factor_ex(xt + xt.mT - 2 * ember.eye(7) * xt),
             lambda: ember.linalg.ldl_factor_ex(ember.tensor(spd[:2]), hermitian=True),
             lambda: ember.linalg.ldl_factor_ex(xt[1, :5, :5] * xt[1, :5, :5].mT)]
    _match_the_reference(calls, 1e-4 if dtype == np.float32 else 1e-12, threads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_small_products_match_the_numpy_reference(dtype, threads):
    """factor.h's small_mm (addmm, baddbmm, addmv of up to 4096 multiply-adds) against
    numpy.matmul and _scale_add: odd and empty shapes, transposed and strided operands,
    broadcast inputs, nan / inf / -0.0, and an input whose NaNs beta = 0 must not spread."""
    r = np.random.default_rng(5)
    x = ember.tensor(r.uniform(-2, 2, (3, 7, 9)).astype(dtype))
    x[0, 1, 2], x[1, 2, 3], x[2, 0, 0] = float("nan"), float("inf"), -0.0
    v, nan_in = x[0, 0, 1:8], ember.full((7, 7), float("nan"), dtype=x.dtype)
    mm = functools.partial(ember.addmm, beta=0)
    calls = [lambda: mm(v, x[0], x[1].mT), lambda: mm(v[:4], x[1, :, ::2], x[2, :5, :4]),
             lambda: mm(v, x[0, :0], x[1].mT), lambda: mm(x[0, 0], x[0, :, :0], x[1, :0]),
             lambda: mm(v[:1], -0.0 * x[1, :2, 2:4].abs(), x[1, 4:6, 2:3].abs()),
             lambda: ember.baddbmm(x[:, :6, :7], x[:, 1:, ::3], x[:, :3, 2:], beta=0),
             lambda: ember.addmm(x[0, 0, :7], x[1], x[2].mT, beta=0.5, alpha=-2),
             lambda: ember.addmm(x[0, :, :1], x[1], x[2].mT, alpha=3),
             lambda: ember.addmm(nan_in, x[1], x[2].mT, beta=0),
             lambda: ember.baddbmm(x[:, :, :7], x, x.mT, beta=2, alpha=0.25),
             lambda: ember.baddbmm(x[0, :1, :7], x, x.mT[:, :, :7]),
             lambda: ember.addmv(x[0, :, 0], x[1].mT[:7], x[2, 0, :7], beta=-1, alpha=2),
             lambda: ember.addmv(x[0, 0, :1], x[1], x[2, 1], beta=0.5),
             lambda: ember.addmv(x[0, 0, 0], x[1, :, ::2], x[2, 1, :5])]
    _match_the_reference(calls, 1e-5 if dtype == np.float32 else 1e-12, threads)


@pytest.mark.parametrize("fn", [lambda a: ember.linalg.qr(a), lambda a: ember.geqrf(a),
                                lambda a: ember.linalg.lu_factor(a),
                                lambda a: ember.linalg.ldl_factor(a + a.mT)])
def test_factorizations_leave_a_transposed_input_alone(fn):
    # a transposed view is column-major: LAPACK's in-place factorization must get a copy
    z = ember.tensor(np.arange(16.0).reshape(4, 4) + 5 * np.eye(4))
    before = z.clone()
    fn(z.mT)
    assert bool((z == before).all())


@pytest.mark.parametrize("shape", [(0, 0, 3), (0, 3, 0), (2, 0, 3), (3, 0), (0, 2, 2), (2, 3, 0)])
def test_lu_factor_ex_of_empty_matrices_and_batches(shape):
    got, want = ember.linalg.lu_factor_ex(ember.zeros(shape)), torch.linalg.lu_factor_ex(
        torch.zeros(shape))
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape) and str(g.dtype) == str(w.dtype)
    # (and lu_unpack's permutation of them)
    for g, w in zip(ember.lu_unpack(*got[:2]), torch.lu_unpack(*want[:2])):
        assert tuple(g.shape) == tuple(w.shape)


def test_ldl_solve_refuses_pivots_lapack_would_read_past():
    # LAPACK's sytrs trusts its pivots: a 2x2 block cut off by the last row, or a pivot out of
    # range, must not reach it (the reference raises instead; torch reads past LD on the first)
    LD = ember.eye(3)
    with pytest.raises(IndexError):
        ember.linalg.ldl_solve(LD, ember.tensor([1, 2, -3], dtype=ember.int32), ember.ones(3, 1))
    with pytest.raises(RuntimeError, match=r"must all satisfy \|pivot\| <= LD.size\(-2\)"):
        ember.linalg.ldl_solve(LD, ember.tensor([1, 4, 3], dtype=ember.int32), ember.ones(3, 1))
    # (an unpaired -2 in range: the reference's reading, torch's)
    piv = [-2, -3, 3]
    got = ember.linalg.ldl_solve(LD, ember.tensor(piv, dtype=ember.int32), ember.ones(3, 1))
    want = torch.linalg.ldl_solve(torch.eye(3), torch.tensor(piv, dtype=torch.int32),
                                  torch.ones(3, 1))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("eq,sa,sb", [
    ("ij,jk->ik", (3, 4), (4, 5)), ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)),
    ("ij,kj->ki", (3, 4), (5, 4)), ("i,j->ij", (3,), (4,)),
    ("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)), ("ij,jk->ik", (0, 4), (4, 5))])
def test_einsum_pair_plan_equals_the_general_path(eq, sa, sb, monkeypatch):
    # a pair's plan is cached by (equation, shapes): its first and later calls, and the general
    # loop it stands for, give the same bits, strides and gradients
    from ember._ops import einsum as E
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)

    def run():
        x, y = ember.tensor(a, requires_grad=True), ember.tensor(b, requires_grad=True)
        out = ember.einsum(eq, x, y)
        out.sum().backward()
        return out, x.grad, y.grad
    got = [run(), run()]
    monkeypatch.setattr(E, "_PAIRS", {})
    monkeypatch.setattr(E, "_pair_plan", lambda *args: None)
    want = run()
    for g in got:
        for u, v in zip(g, want):
            assert u.stride() == v.stride()
            np.testing.assert_array_equal(u.detach().numpy(), v.detach().numpy())


def test_matrix_vector_products_at_two_threads_equal_one_thread():
    """At two threads a large matrix-vector product runs BLAS on one thread (its threads cost
    more than they gain there): the result is the one-thread result, forward and backward."""
    rng = np.random.default_rng(0)
    a, v, u = (ember.tensor(rng.standard_normal(s, dtype=np.float32), requires_grad=True)
               for s in ((300, 257), (257,), (300,)))
    outs, prev = [], ember.get_num_threads()
    for nt in (1, 2):
        ember.set_num_threads(nt)
        try:
            y = ember.mv(a, v) + ember.addmv(u, a, v)
            z = u @ a
            grads = ember.autograd.grad(y.sum() + z.sum(), (a, v, u))
            outs.append([t.detach().numpy() for t in (y, z) + grads])
        finally:
            ember.set_num_threads(prev)
    for x1, x2 in zip(*outs):
        np.testing.assert_array_equal(x1, x2)
    an, vn, un = (t.detach().numpy() for t in (a, v, u))
    np.testing.assert_allclose(outs[0][0], an @ vn * 2 + un, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[0][1], un @ an, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dot_over_threads_matches_the_reference(dtype):
    """factor.h's dot (contiguous, from 2^16 elements, at several threads) against NumPy's,
    with a nan, an inf, and a strided operand left to NumPy."""
    x = np.random.default_rng(1).uniform(-1, 1, (2, 1 << 17)).astype(dtype)
    a, b = ember.tensor(x[0]), ember.tensor(x[1])
    calls = [lambda: ember.dot(a, b), lambda: ember.vdot(a, b),
             lambda: ember.dot(a[::2], b[1::2]),
             lambda: ember.dot(a * ember.tensor(x[1] > 0.9) * float("inf"), b)]
    _match_the_reference(calls, 1e-4 if dtype == np.float32 else 1e-12, threads=2)


@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_qr_of_64_columns_and_more_matches_the_numpy_reference(threads):
    """geqrf and qr of matrices with min(m, n) >= 64 run LAPACK's geqrt (tau from T's
    diagonal) against NumPy's qr: tall, wide, batched, transposed, complex, a zero column
    (tau 0) and a last block narrower than 64."""
    r = np.random.default_rng(3)
    x = r.uniform(-1, 1, (2, 150, 131)).astype(np.float32)
    x[1, :, 70] = 0
    xt = ember.tensor(x).mT                                 # (2, 131, 150), non-contiguous
    z = ember.tensor(r.standard_normal((97, 64)) + 1j * r.standard_normal((97, 64)))
    calls = [lambda: ember.geqrf(ember.tensor(x)), lambda: ember.geqrf(xt[:, :, :65]),
             lambda: ember.geqrf(xt[0]), lambda: ember.geqrf(z),
             lambda: ember.linalg.qr(ember.tensor(x)), lambda: ember.linalg.qr(xt, "complete"),
             lambda: ember.linalg.qr(xt[1].double(), "r")[1], lambda: ember.linalg.qr(z)]
    _match_the_reference(calls, 1e-4, threads)


@pytest.mark.parametrize("name", ["svdvals", "eigvalsh", "eigvals"])
def test_values_of_large_matrices_differentiate_through_the_vectors_as_torch(name):
    """From 33 columns, values that require grad come from the vectors' decomposition (the
    vectors' zero gradient skipped): torch's gradients, a batch, a wide matrix for svdvals."""
    r = np.random.default_rng(6)
    shapes = [(2, 40, 40)] + ([(35, 50)] if name == "svdvals" else [])
    for shape in shapes:
        a = r.standard_normal(shape)
        grads = []
        for lib in (ember, torch):
            t = lib.tensor(a, requires_grad=True)
            out = getattr(lib.linalg, name)(t)
            (out.real if out.is_complex() else out).pow(2).sum().backward()
            grads.append(t.grad.numpy())
        np.testing.assert_allclose(*grads, rtol=1e-8, atol=1e-8)
        with ember.no_grad():       # (and the values alone without grad)
            vals = getattr(ember.linalg, name)(ember.tensor(a, requires_grad=True))
        assert vals.grad_fn is None and vals.shape[-1] == min(shape[-2:])


@pytest.mark.parametrize("shape", [(40, 20), (20, 40), (70, 66)])
def test_qr_of_a_nan_matrix_spreads_the_nan_as_torch(shape):
    """A NaN goes through LAPACK's geqrf (geqrt from 64 columns) as in torch, which calls
    LAPACK itself: LAPACKE's NaN check, which would skip the call and hand the input back
    unfactored, is off. The columns from the NaN's on come out NaN, tau's entries too."""
    a = np.random.default_rng(7).uniform(-1, 1, shape)
    a[5, 3] = np.nan
    (qa, tau), (ta, ttau) = ember.geqrf(ember.tensor(a)), torch.geqrf(torch.tensor(a))
    np.testing.assert_array_equal(np.isnan(qa.numpy()).any(0), ta.isnan().numpy().any(0))
    np.testing.assert_array_equal(np.isnan(tau.numpy()), ttau.isnan().numpy())
    R = ember.linalg.qr(ember.tensor(a))[1].numpy()
    np.testing.assert_array_equal(np.isnan(R).any(0), torch.linalg.qr(torch.tensor(a))[1]
                                  .isnan().numpy().any(0))
