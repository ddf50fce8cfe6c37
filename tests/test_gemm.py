"""Matrix products through the ``bmm`` kernel (ember/_ops/gemm.py, ember/_C/kernels/gemm.h) and
ember's float32 GEMM (ember/_C/kernels/sgemm.h) against the NumPy path and torch: odd shapes,
transposed and strided operands, broadcast batch dims, empty dims, every dtype matmul takes
(the kernel's float32/float64 and the fallbacks), values and gradients, 1 and 2 threads."""
import numpy as np
import pytest

import ember
from ember._C import kernels
from ember._ops import gemm, linalg

try:
    import torch
except ImportError:          # torch is a test-only oracle
    torch = None

TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float64": dict(rtol=1e-12, atol=1e-12),
       "complex64": dict(rtol=1e-5, atol=1e-5), "complex128": dict(rtol=1e-12, atol=1e-12),
       "int64": dict(rtol=0, atol=0), "int32": dict(rtol=0, atol=0)}


pytestmark = pytest.mark.usefixtures("threads")   # each test at 1 and 2 threads


# the kernels are there (built, and not turned off by EMBER_NO_C=1); OWN: this CPU runs
# ember's float32 GEMM (AVX-512, or AVX2 with FMA: there on several threads only)
BUILT = kernels.kernel("bmm", np.dtype(np.float32)) is not None
OWN = gemm._own_gemm(nt=2) is not None
NEEDS_OWN = "ember's float32 GEMM needs AVX-512 or AVX2 and the built kernels"


def own_at(threads):
    """Whether float32 products on ``threads`` threads may take ember's GEMM here."""
    return gemm._own_gemm(threads) is not None


def _spy(monkeypatch, name):
    calls = []
    real = getattr(gemm, name)

    def spy(*args):
        calls.append(args)
        return real(*args)
    monkeypatch.setattr(gemm, name, spy)
    return calls


@pytest.fixture
def kernel_calls(monkeypatch):
    """How many times the bmm kernel ran (the NumPy path does not count); small products take
    it too, to test its shapes cheaply."""
    monkeypatch.setattr(gemm, "_MIN_WORK", 0)
    return _spy(monkeypatch, "_pinned")


@pytest.fixture
def own_calls(monkeypatch):
    """How many times ember's float32 GEMM ran, small products included."""
    monkeypatch.setattr(gemm, "_MIN_OWN", 0)
    monkeypatch.setattr(gemm, "_MIN_OWN_EACH", 0)
    monkeypatch.setattr(gemm, "_MIN_OWN_THREADED", 0)
    return _spy(monkeypatch, "_own_matmul")


def _array(shape, dtype, seed, view=None):
    """(base array, view function) for an operand of ``shape``: "T" stored transposed (last two
    dims), "step" a strided batch, "col" rows without a unit stride. The view is taken on the
    ember tensor (``ember.tensor`` copies a NumPy view into a contiguous tensor)."""
    rng = np.random.default_rng(seed)
    full = {"T": shape[:-2] + shape[-2:][::-1], "step": (2 * shape[0],) + shape[1:],
            "col": shape[:-1] + (2 * shape[-1] + 1,), None: shape}[view]
    a = rng.standard_normal(full) * 2
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(full)
    return a.astype(dtype), {"T": lambda t: t.transpose(-1, -2), "step": lambda t: t[::2],
                             "col": lambda t: t[..., 1::2], None: lambda t: t}[view]


# (a shape, b shape, a view, b view, the bmm kernel runs at 2 threads; ember's float32 GEMM
# runs where it does, and on the folded case)
CASES = [
    ((4, 3, 5), (4, 5, 7), None, None, True),
    ((8, 33, 17), (8, 17, 65), "T", None, True),
    ((8, 33, 17), (8, 17, 65), None, "T", True),
    ((5, 6, 4), (5, 4, 3), "T", "T", True),
    ((3, 4), (5, 4, 6), None, None, True),                 # a 2-D operand broadcast over b's
    ((6, 2, 3, 4), (4, 5), None, "T", False),              # folds into one (12, 4) GEMM
    ((6, 3, 4), (4, 5), "T", None, True),                   # transposed: does not fold
    ((4, 5, 3), (4, 3, 6), "step", "T", True),
    ((2, 3, 5, 4), (2, 3, 4, 6), "step", None, False),     # strided outer batch: NumPy
    ((4, 5, 7), (4, 7, 3), "col", None, False),            # no unit stride: NumPy
    ((2, 1, 3, 4), (3, 4, 2), None, None, False),          # batch broadcast not flattenable
    ((1, 3, 4), (5, 4, 2), None, None, True),              # a size-1 batch broadcast
    ((6, 1, 5), (6, 5, 1), None, None, True),              # m = n = 1
    ((6, 7, 1), (6, 1, 9), "T", "T", True),                # k = 1
    ((0, 3, 4), (0, 4, 5), None, None, False),             # empty batch
    ((2, 0, 4), (2, 4, 5), None, None, False),
    ((2, 3, 0), (2, 0, 5), None, None, False),             # k = 0: zeros
    ((12, 96, 128), (12, 128, 256), None, "T", True),      # large enough for two threads
]


def _close(x, y, dtype, err_msg=""):
    """x == y to ``TOL``, the absolute part scaled by y's largest value: a sum of k products
    rounds relative to its largest terms, so an element that cancels to near zero carries the
    rounding of the big ones (and BLAS builds order the sums differently per CPU)."""
    tol = dict(TOL[dtype])
    tol["atol"] *= max(1.0, float(np.abs(y).max(initial=0)))
    np.testing.assert_allclose(x, y, err_msg=err_msg, **tol)


def _matmul(a, b, grad):
    """ember's a @ b for operands from ``_array``: the value, and with ``grad`` the gradients of
    the base arrays for a fixed output gradient."""
    (a, va), (b, vb) = a, b
    ta = ember.tensor(a, requires_grad=grad)
    tb = ember.tensor(b, requires_grad=grad)
    out = va(ta) @ vb(tb)
    if not grad:
        return [out.numpy()]
    g = np.random.default_rng(7).standard_normal(tuple(out.shape)).astype(a.dtype)
    out.backward(ember.tensor(g))
    return [out.detach().numpy(), ta.grad.numpy(), tb.grad.numpy()]


def _reference(a, b):
    """a @ b by NumPy and, where installed, by torch, on the same views."""
    (a, va), (b, vb) = a, b
    want = [np.matmul(np.asarray(va(ember.tensor(a))), np.asarray(vb(ember.tensor(b))))]
    if torch is not None:
        want.append((va(torch.from_numpy(a)) @ vb(torch.from_numpy(b))).numpy())
    return want


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}{c[2] or ''}@{c[1]}{c[3] or ''}")
def test_kernel_against_numpy_path(case, dtype, threads, kernel_calls, own_calls):
    sa, sb, va, vb, runs = case
    a, b = _array(sa, dtype, 0, va), _array(sb, dtype, 1, vb)
    _matmul(a, b, grad=False)
    own = own_at(threads) and dtype == "float32"    # the forward took the kernel it should
    assert bool(kernel_calls) == (BUILT and runs and threads > 1 and not own)
    assert bool(own_calls) == (own and (runs or case is CASES[5]))
    got = _matmul(a, b, grad=True)
    with kernels.disabled():
        ref = _matmul(a, b, grad=True)
    for what, x, y in zip(["value", "grad a", "grad b"], got, ref):
        assert x.dtype == y.dtype and x.shape == y.shape, what
        _close(x, y, dtype, what)
    for want in _reference(a, b):
        _close(got[0], want, dtype)


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "int64", "int32"])
@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[7]], ids=str)
def test_other_dtypes_take_numpy(case, dtype, kernel_calls):
    sa, sb, va, vb, _ = case
    a, b = _array(sa, dtype, 0, va), _array(sb, dtype, 1, vb)
    got = _matmul(a, b, grad=False)[0]
    assert not kernel_calls
    for want in _reference(a, b):
        _close(got, want, dtype)


def test_einsum_and_bmm_reach_the_kernel(threads, kernel_calls, own_calls):
    q, k = _array((2, 3, 40, 16), "float32", 0)[0], _array((2, 3, 50, 16), "float32", 1)[0]
    out = ember.einsum("bhqd,bhkd->bhqk", ember.tensor(q), ember.tensor(k)).numpy()
    np.testing.assert_allclose(out, np.einsum("bhqd,bhkd->bhqk", q, k), **TOL["float32"])
    x, y = _array((4, 7, 9), "float64", 2)[0], _array((4, 11, 9), "float64", 3)[0]
    out = ember.bmm(ember.tensor(x), ember.tensor(y).transpose(1, 2)).numpy()
    np.testing.assert_allclose(out, x @ np.swapaxes(y, 1, 2), **TOL["float64"])
    own = own_at(threads)
    assert len(own_calls) == own                              # the float32 einsum
    assert len(kernel_calls) == (2 - own if BUILT and threads > 1 else 0)


def test_shape_errors_keep_torch_messages():
    a, b = ember.ones(2, 3, 4), ember.ones(2, 5, 6)
    with pytest.raises(RuntimeError, match=r"shapes cannot be multiplied \(3x4 and 5x6\)"):
        a @ b
    with pytest.raises(RuntimeError, match=r"shapes cannot be multiplied \(3x4 and 5x6\)"):
        ember.ones(3, 4) @ ember.ones(5, 6)


@pytest.mark.skipif(not OWN, reason=NEEDS_OWN)
def test_small_stacks_keep_blas_unless_b_is_transposed(monkeypatch):
    """A stack of small products (64 x 64 x 32, the GPT's attention heads) runs faster on
    OpenBLAS's small-matrix path, except with B transposed, which that path does not take."""
    calls = _spy(monkeypatch, "_own_matmul")
    a, b = _array((64, 64, 32), "float32", 0)[0], _array((64, 32, 64), "float32", 1)[0]
    ta, tb = ember.tensor(a), ember.tensor(b)
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    assert not calls
    np.testing.assert_allclose((tb.mT @ ta.mT).numpy(), np.swapaxes(a @ b, 1, 2), rtol=1e-5,
                               atol=1e-5)
    assert len(calls) == own_at(ember.get_num_threads())


def test_small_stacks_keep_numpy(monkeypatch):
    calls = []
    monkeypatch.setattr(gemm, "_pinned", lambda *args: calls.append(args))
    a, b = ember.ones(4, 3, 5), ember.ones(4, 5, 7)
    np.testing.assert_array_equal((a @ b).numpy(), np.full((4, 3, 7), 5.0, np.float32))
    assert not calls                # too little work to split: numpy.matmul does it


# (m, k, n): ragged row tiles (m % 8), ragged panels (n % 32, n < 16), k past one 256 block
# and not a multiple of 16 (the transposed-B packing's edges), single rows and columns, rows
# past two blocks of packed A (96 with AVX2) with k's last block one register transpose, rows
# enough for the AVX2 GEMM on one thread, and enough (4x the columns, work for two threads) for
# two threads to split the rows
SHAPES_2D = [(1, 1, 1), (7, 5, 3), (8, 16, 32), (9, 33, 31), (33, 17, 70), (5, 300, 40),
             (64, 257, 48), (17, 520, 100), (130, 64, 1), (1, 64, 130), (40, 1, 33),
             (200, 264, 96), (1030, 40, 24), (1030, 150, 30)]


@pytest.mark.skipif(not OWN, reason=NEEDS_OWN)
@pytest.mark.parametrize("view_b", [None, "T", "col"])
@pytest.mark.parametrize("view_a", [None, "T", "col"])
@pytest.mark.parametrize("shape", SHAPES_2D, ids=str)
def test_own_gemm_2d(shape, view_a, view_b, threads, own_calls):
    """Every micro-tile edge, both layouts of each operand and row strides wider than the
    matrix ("col" views take every other column of a wider array: not unit-stride, so NumPy;
    "T" of those is a transposed matrix with a leading dim)."""
    m, k, n = shape
    a, b = _array((m, k), "float32", 0, view_a), _array((k, n), "float32", 1, view_b)
    _matmul(a, b, grad=False)
    # the forward took the kernel where gemm.own_takes says: not a "col" view without a unit
    # stride (a dim of 1 has none to speak of); on one thread not for A stored transposed and
    # B not (BLAS's packing does that better), with AVX2 only for 1024 rows or more, k below
    # 1024 and A not transposed
    la, lb = (gemm._layout(np.asarray(v(ember.tensor(x)))) for x, v in (a, b))
    assert bool(own_calls) == gemm.own_takes(la, lb, m * n * k, threads, (m, k))
    if OWN and m >= 1024 and la and lb and la[0] == gemm._NO_T:
        assert own_calls
    got = _matmul(a, b, grad=True)
    with kernels.disabled():
        ref = _matmul(a, b, grad=True)
    for what, x, y in zip(["value", "grad a", "grad b"], got, ref):
        np.testing.assert_allclose(x, y, err_msg=what, rtol=1e-5, atol=2e-5 * (1 + k) ** 0.5)
    for want in _reference(a, b):
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=2e-5 * (1 + k) ** 0.5)


@pytest.mark.skipif(not OWN, reason=NEEDS_OWN)
def test_own_gemm_strided_leading_dims(threads):
    """Matrices inside wider arrays (a row stride larger than the row), a 2-D operand broadcast
    over a stack, and a stack whose batch is a strided view, against float64 NumPy."""
    rng = np.random.default_rng(3)
    big_a = rng.standard_normal((70, 90)).astype(np.float32)
    big_b = rng.standard_normal((6, 80, 81)).astype(np.float32)
    a = ember.tensor(big_a)[3:40, 5:72]                # (37, 67), row stride 90
    b = ember.tensor(big_b)[::2, 2:69, 7:80]            # (3, 67, 73), strided batch
    out = (a @ b).numpy()
    want = big_a[3:40, 5:72].astype(np.float64) @ big_b[::2, 2:69, 7:80]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    out = (b.mT[:, :40] @ a.mT[:, :20]).numpy()        # transposed, leading dims > rows
    want = np.swapaxes(big_b[::2, 2:69, 7:80], 1, 2)[:, :40].astype(np.float64) @ \
        big_a[3:40, 5:72].T[:, :20]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not OWN, reason=NEEDS_OWN)
def test_own_gemm_attention_shapes(threads):
    """The attention's products as einsum spells them (q k^T with k transposed, p v), large
    enough to take the kernel without lowering its threshold, against NumPy and torch."""
    rng = np.random.default_rng(4)
    q, k = (rng.standard_normal((2, 3, 72, 64)).astype(np.float32) for _ in range(2))
    p = rng.standard_normal((2, 3, 72, 72)).astype(np.float32)
    for eq, x, y in (("bhqd,bhkd->bhqk", q, k), ("bhqk,bhkd->bhqd", p, k)):
        got = ember.einsum(eq, ember.tensor(x), ember.tensor(y)).numpy()
        np.testing.assert_allclose(got, np.einsum(eq, x.astype(np.float64), y), rtol=1e-5,
                                   atol=1e-4)
        if torch is not None:
            want = torch.einsum(eq, torch.from_numpy(x), torch.from_numpy(y)).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not OWN, reason=NEEDS_OWN)
def test_2d_products_on_threads_never_reach_blas_threads(threads, monkeypatch):
    """On several threads a float32 product that OpenBLAS would thread (a 256^3 one, a weight
    gradient's A^T @ g) takes ember's GEMM, so OpenBLAS's pool does not wake to spin beside
    OpenMP's; on one thread the CPU's rule holds. The values agree either way."""
    calls = _spy(monkeypatch, "_own_matmul")
    a, b = (np.random.default_rng(s).standard_normal((256, 256)).astype(np.float32) for s in (0, 1))
    for x in (a, a.T):
        calls.clear()
        got = (ember.from_numpy(x) @ ember.from_numpy(b)).numpy()
        takes = gemm.own_takes(gemm._layout(x), gemm._layout(b), 256 ** 3, threads)
        assert bool(calls) == takes and (takes or threads == 1)
        np.testing.assert_allclose(got, x @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not OWN, reason=NEEDS_OWN)
@pytest.mark.parametrize("view_w", [None, "T"])
@pytest.mark.parametrize("shape", SHAPES_2D, ids=str)
def test_own_gemm_adds_linear_bias_as_it_writes(shape, view_w, threads, own_calls):
    """linear's bias added in the GEMM's store (ragged tiles and panels, K past one block, a
    weight stored transposed) against float64 NumPy, with the gradients of all three."""
    m, k, n = shape
    rng = np.random.default_rng(5)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if view_w is None else (k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    xt, bt = ember.tensor(x, requires_grad=True), ember.tensor(b, requires_grad=True)
    wt = ember.tensor(w, requires_grad=True)
    out = ember.nn.functional.linear(xt, wt if view_w is None else wt.t(), bt)
    # (the bias path, where the kernel runs)
    lw = gemm._layout(np.asarray(wt.detach().t() if view_w is None else wt.detach()))
    # (up to linalg._SMALL multiply-adds, small_mm takes the product and the bias first)
    takes = gemm.own_takes(gemm._layout(x), lw, m * n * k, threads, (m, k)) and \
        m * n * k > linalg._SMALL
    assert any(len(c) > 8 and c[8] is not None for c in own_calls) == takes
    wd = (w if view_w is None else w.T).astype(np.float64)
    np.testing.assert_allclose(out.detach().numpy(), x.astype(np.float64) @ wd.T + b,
                               rtol=1e-5, atol=2e-5 * (1 + k) ** 0.5)
    g = rng.standard_normal((m, n)).astype(np.float32)
    out.backward(ember.tensor(g))
    np.testing.assert_allclose(bt.grad.numpy(), g.sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(xt.grad.numpy(), g.astype(np.float64) @ wd, rtol=1e-5,
                               atol=2e-5 * (1 + n) ** 0.5)
