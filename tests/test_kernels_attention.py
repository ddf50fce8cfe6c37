"""Blockwise attention's kernel path (BLAS GEMMs + the tile kernels of ember/_C/kernels/attention.h)
against its reference path in ember ops: values and q/k/v gradients, float32 and float64,
causal and not, L < S and L > S, odd tile sizes (rows that see no key of a tile), non-contiguous
inputs, grouped-query attention, 1 and 2 threads; and double backward, which always takes the
reference path."""
import numpy as np
import pytest

import ember
from ember._C import kernels
from ember.nn import _attention, _attention_small

pytestmark = pytest.mark.skipif(kernels.kernel("attn_fwd_tile", np.dtype(np.float32)) is None,
                                reason="C kernels not built, or EMBER_NO_C set")

TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-11, atol=1e-12)}


@pytest.fixture(params=[(5, 7), (16, 8), (4, 64)], ids=lambda b: f"tile{b[0]}x{b[1]}")
def tiles(request, monkeypatch):
    monkeypatch.setattr(_attention, "FLASH_MIN_SCORES", 0)
    monkeypatch.setattr(_attention_small, "MAX_KEYS", 0)     # (tests/test_kernels_attention_small)
    monkeypatch.setattr(_attention, "QBLOCK", request.param[0])
    monkeypatch.setattr(_attention, "BLOCK", request.param[1])


def _run(arrays, kw):
    ts = [ember.tensor(a, requires_grad=True) for a in arrays]
    out = ember.nn.functional.scaled_dot_product_attention(*ts, **kw)
    g = np.random.default_rng(9).standard_normal(tuple(out.shape)).astype(arrays[0].dtype)
    out.backward(ember.tensor(g))
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("q_shape,kv_shape,dv,kw", [
    ((2, 3, 37, 8), (2, 3, 37, 8), 8, {"is_causal": True}),
    ((2, 3, 37, 8), (2, 3, 37, 8), 8, {}),
    ((3, 19, 6), (3, 40, 6), 5, {"is_causal": True, "scale": 0.3}),
    ((3, 40, 6), (3, 19, 6), 5, {"is_causal": True}),
    ((23, 4), (31, 4), 9, {}),
    ((2, 4, 21, 4), (2, 2, 21, 4), 4, {"is_causal": True, "enable_gqa": True}),
    ((6, 17, 4), (2, 17, 4), 3, {"enable_gqa": True}),
], ids=str)
def test_kernel_path_matches_reference(tiles, threads, dtype, q_shape, kv_shape, dv, kw):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(q_shape) * 2, rng.standard_normal(kv_shape) * 2,
              rng.standard_normal(kv_shape[:-1] + (dv,))]
    arrays = [a.astype(dtype) for a in arrays]
    assert _attention._forward_kernel(*arrays, 0.5, True) is not None
    fast = _run(arrays, kw)
    with kernels.disabled():
        assert _attention._forward_kernel(*arrays, 0.5, True) is None
        ref = _run(arrays, kw)
    for what, a, b in zip(["out", "dq", "dk", "dv"], fast, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        np.testing.assert_allclose(a, b, err_msg=what, **TOL[dtype])


def test_kernel_path_takes_noncontiguous_inputs(tiles):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((2, 8, 30)).astype("float32").swapaxes(-1, -2)
              for _ in range(3)]                                   # (2, 30, 8), transposed
    fast = _run(arrays, {"is_causal": True})
    ref = _run([np.ascontiguousarray(a) for a in arrays], {"is_causal": True})
    for a, b in zip(fast, ref):
        np.testing.assert_allclose(a, b, **TOL["float32"])


def test_double_backward_takes_reference_path(tiles):
    rng = np.random.default_rng(2)
    inputs = [ember.tensor(rng.standard_normal((1, 12, 3)), requires_grad=True)
              for _ in range(3)]
    inputs[1:] = [t.detach()[:, :7].requires_grad_() for t in inputs[1:]]     # L > S
    fn = lambda q, k, v: ember.nn.functional.scaled_dot_product_attention(  # noqa: E731
        q, k, v, is_causal=True)
    assert ember.autograd.gradgradcheck(fn, inputs)
