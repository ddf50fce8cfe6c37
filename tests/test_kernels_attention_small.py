"""Short-sequence attention's kernels (ember/_C/kernels/attention_small.h: every head in one call)
against the blockwise reference path in ember ops: values and q/k/v gradients, float32 and
float64, causal and not, L < S and L > S, row counts around the kernel's 32-row blocks, odd
head sizes, dv != d, grouped-query attention, strided / transposed / expanded inputs (read in
place), 1 and 2 threads; outputs in the query's memory order, as torch returns them."""
import numpy as np
import pytest

import ember
from ember._C import kernels
from ember.nn import _attention, _attention_small

pytestmark = pytest.mark.skipif(
    kernels.kernel("attn_small_fwd", np.dtype(np.float32)) is None or
    not _attention_small.applies(*[np.zeros((2, 2), np.float32)] * 3),
    reason="C kernels not built, EMBER_NO_C set, or no BLAS found")

TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-11, atol=1e-12)}


@pytest.fixture(autouse=True)
def reference_is_blockwise(monkeypatch):
    # with the kernels off, scaled_dot_product_attention then takes _forward_ops/_backward_ops
    monkeypatch.setattr(_attention, "FLASH_MIN_SCORES", 0)


def _run(tensors, kw):
    ts = [t.detach().requires_grad_() for t in tensors]
    out = ember.nn.functional.scaled_dot_product_attention(*ts, **kw)
    g = np.random.default_rng(9).standard_normal(tuple(out.shape)).astype(out.dtype.np)
    out.backward(ember.tensor(g))
    return [out.detach()] + [t.grad for t in ts]


def _compare(tensors, kw, dtype):
    arrays = [t._data for t in tensors]
    assert _attention_small.forward(*arrays, 0.5, True) is not None
    fast = _run(tensors, kw)
    with kernels.disabled():
        assert _attention_small.forward(*arrays, 0.5, True) is None
        ref = _run(tensors, kw)
    for what, a, b in zip(["out", "dq", "dk", "dv"], fast, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        np.testing.assert_allclose(a.numpy(), b.numpy(), err_msg=what, **TOL[dtype])
    return fast


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("q_shape,kv_shape,dv,kw", [
    ((2, 3, 37, 8), (2, 3, 37, 8), 8, {"is_causal": True}),
    ((2, 3, 64, 32), (2, 3, 64, 32), 32, {"is_causal": True}),
    ((2, 3, 37, 8), (2, 3, 37, 8), 8, {}),
    ((3, 19, 6), (3, 40, 6), 5, {"is_causal": True, "scale": 0.3}),
    ((3, 70, 6), (3, 19, 6), 5, {"is_causal": True}),       # rows past the last key
    ((1, 1, 3), (1, 1, 3), 1, {"is_causal": True}),
    ((23, 4), (31, 4), 9, {}),
    ((2, 4, 33, 4), (2, 2, 33, 4), 4, {"is_causal": True, "enable_gqa": True}),
    ((6, 17, 4), (2, 17, 4), 3, {"enable_gqa": True}),
], ids=str)
def test_matches_reference(threads, dtype, q_shape, kv_shape, dv, kw):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(q_shape) * 2, rng.standard_normal(kv_shape) * 2,
              rng.standard_normal(kv_shape[:-1] + (dv,))]
    _compare([ember.tensor(a.astype(dtype)) for a in arrays], kw, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_qkv_views_read_in_place(threads, dtype):
    """The GPT layout: q, k, v are (B, H, L, d) views of one (B, L, 3C) projection; out comes
    back in (B, L, H, d) memory order, as torch returns it, and the gradients as the same
    slices of one new (B, L, 3C) array, which split's backward takes without a copy."""
    B, L, H, d = 2, 45, 3, 8
    x = ember.tensor(np.random.default_rng(1).standard_normal((B, L, 3 * H * d)).astype(dtype))
    q, k, v = (t.view(B, L, H, d).transpose(1, 2) for t in x.split(H * d, dim=2))
    out = _compare([q, k, v], {"is_causal": True}, dtype)[0]
    assert out.transpose(1, 2).is_contiguous()
    arrays = [t._data for t in (q, k, v)]
    o, lse = _attention_small.forward(*arrays, 0.5, True)
    grads = _attention_small.backward(np.ones_like(o), *arrays, o, lse, 0.5, True)
    for a, g in zip(arrays, grads):
        assert g.strides == a.strides
        assert g.ctypes.data - grads[0].ctypes.data == a.ctypes.data - arrays[0].ctypes.data
    with ember.no_grad():           # (as in a backward without create_graph)
        joined = ember._ops.joining._side_by_side(
            [ember.Tensor._wrap(g.swapaxes(1, 2).reshape(B, L, H * d)) for g in grads], 2)
    assert joined.is_contiguous() and joined._data.ctypes.data == grads[0].ctypes.data
    # inputs that are not one array's disjoint slices get arrays of their own
    for a in _attention_small.backward(np.ones_like(o), *arrays[:2], arrays[1], o, lse, 0.5,
                                       True):
        assert a.swapaxes(1, 2).flags.c_contiguous


def test_transposed_and_expanded_inputs(threads):
    rng = np.random.default_rng(2)
    q = ember.tensor(rng.standard_normal((2, 8, 30)).astype("float32")).transpose(-1, -2)
    k = ember.tensor(rng.standard_normal((1, 30, 8)).astype("float32")).expand(2, 30, 8)
    v = ember.tensor(rng.standard_normal((2, 30, 16)).astype("float32"))[:, :, ::2]
    _compare([q, k, v], {"is_causal": True}, "float32")


def test_matches_torch_and_its_strides():
    torch = pytest.importorskip("torch")
    B, L, H, d = 2, 40, 2, 8
    x = np.random.default_rng(3).standard_normal((B, L, 3 * H * d)).astype("float32")
    outs = []
    for T in (ember, torch):
        xt = T.tensor(x, requires_grad=True)
        q, k, v = (t.view(B, L, H, d).transpose(1, 2) for t in xt.split(H * d, dim=2))
        y = T.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        (y * y).sum().backward()
        outs.append((y.detach().numpy(), xt.grad.numpy(), tuple(y.stride())))
    (ye, ge, se), (yt, gt, st) = outs
    np.testing.assert_allclose(ye, yt, **TOL["float32"])
    np.testing.assert_allclose(ge, gt, **TOL["float32"])
    assert se == st


def test_double_backward_takes_reference_path():
    rng = np.random.default_rng(4)
    inputs = [ember.tensor(rng.standard_normal((1, 9, 3)), requires_grad=True)
              for _ in range(3)]
    fn = lambda q, k, v: ember.nn.functional.scaled_dot_product_attention(  # noqa: E731
        q, k, v, is_causal=True)
    assert ember.autograd.gradgradcheck(fn, inputs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("q_shape,kv_shape,dv,kw", [
    ((1, 150, 16), (1, 150, 16), 16, {"is_causal": True}),
    ((1, 2, 97, 12), (1, 1, 160, 12), 12, {"is_causal": True, "enable_gqa": True}),
    ((200, 16), (64, 16), 16, {"is_causal": True}),          # rows past the last key
    ((130, 32), (70, 32), 32, {}),
], ids=str)
def test_long_keys_split_query_blocks(monkeypatch, dtype, q_shape, kv_shape, dv, kw):
    """Keys beyond MAX_KEYS with fewer key/value heads than threads: threads take query blocks
    (the causal triangle's longest first) and sum dk, dv of their own. MAX_KEYS is lowered so
    that small shapes take that path; at 1 thread it does not apply."""
    monkeypatch.setattr(_attention_small, "MAX_KEYS", 16)
    before = ember.get_num_threads()
    try:
        ember.set_num_threads(1)
        assert not _attention_small.applies(*[np.zeros(kv_shape, np.float32)] * 3)
        ember.set_num_threads(2)
        rng = np.random.default_rng(3)
        arrays = [rng.standard_normal(q_shape) * 2, rng.standard_normal(kv_shape) * 2,
                  rng.standard_normal(kv_shape[:-1] + (dv,))]
        _compare([ember.tensor(a.astype(dtype)) for a in arrays], kw, dtype)
        # a fused qkv's strided views, read in place
        x = ember.tensor(rng.standard_normal((1, 150, 3 * 16)).astype(dtype))
        q, k, v = (t.view(1, 150, 1, 16).transpose(1, 2) for t in x.split(16, dim=2))
        _compare([q, k, v], {"is_causal": True}, dtype)
    finally:
        ember.set_num_threads(before)
