"""ember._backends.blas: direct GEMM calls into NumPy's BLAS, checked against ``@``."""
import numpy as np
import pytest

from ember._backends import blas

pytestmark = pytest.mark.skipif(not blas.available(), reason="NumPy's BLAS not reachable")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_matches_matmul_on_views(dtype, ta, tb):
    rng = np.random.default_rng(0)
    big_a, big_b = rng.standard_normal((9, 13)).astype(dtype), rng.standard_normal(
        (11, 17)).astype(dtype)
    a = big_a[1:6, 2:9]                     # (5, 7) with a leading dim of 13
    b = big_b[2:9, 3:14]                    # (7, 11) with a leading dim of 17
    a = np.ascontiguousarray(a.T).T if ta else a    # column-major storage
    b = np.ascontiguousarray(b.T).T if tb else b
    out = rng.standard_normal((5, 11)).astype(dtype)
    start = out.copy()
    assert blas.gemm(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    out[...] = start
    assert blas.gemm(a, b, out, beta=1.0)
    np.testing.assert_allclose(out, start + a @ b, rtol=1e-5)


def test_gemm_declines_what_blas_cannot_take():
    a = np.ones((4, 4), np.float32)
    out = np.zeros((4, 4), np.float32)
    assert not blas.gemm(a[::2, ::2], a[:2, :2], out[:2, :2].copy())   # no unit stride
    assert not blas.gemm(a.astype(np.float16), a.astype(np.float16), out.astype(np.float16))
    assert not blas.gemm(a, a.astype(np.float64), out)
    assert not blas.gemm(a, a, out.T)                                  # output not C-ordered
    assert (out == 0).all()
