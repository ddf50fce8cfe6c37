"""scaled_dot_product_attention's blockwise (flash-attention style) path: same values and
gradients as torch for causal and unmasked attention, and memory linear in sequence length."""
import tracemalloc

import numpy as np
import pytest

import ember
from ember.nn import _attention
from oracle import assert_close, torch

rng = np.random.default_rng(0)


@pytest.fixture
def blockwise(monkeypatch):
    """Every call takes the blockwise path, with blocks small enough to need several."""
    monkeypatch.setattr(_attention, "FLASH_MIN_SCORES", 0)
    monkeypatch.setattr(_attention, "BLOCK", 7)
    monkeypatch.setattr(_attention, "QBLOCK", 5)


@pytest.mark.parametrize("q_shape,kv_shape,kw", [
    ((2, 3, 20, 4), (2, 3, 20, 4), {}),
    ((2, 3, 20, 4), (2, 3, 20, 4), {"is_causal": True}),
    ((2, 3, 13, 4), (2, 3, 30, 4), {"is_causal": True, "scale": 0.3}),
    ((2, 3, 30, 4), (2, 3, 13, 4), {"is_causal": True}),
    ((3, 16, 6), (3, 21, 6), {"scale": 2.0}),
    ((2, 4, 20, 4), (2, 2, 20, 4), {"is_causal": True, "enable_gqa": True}),
    ((20, 4), (20, 4), {"is_causal": True, "dropout_p": 0.0}),
], ids=str)
def test_blockwise_matches_torch(blockwise, q_shape, kv_shape, kw):
    arrays = [rng.standard_normal(q_shape), rng.standard_normal(kv_shape),
              rng.standard_normal(kv_shape[:-1] + (5,))]
    g = rng.standard_normal(q_shape[:-1] + (5,))
    res = []
    for lib in (ember, torch):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = lib.nn.functional.scaled_dot_product_attention(*ts, **kw)
        (out * lib.tensor(g)).sum().backward()
        res.append([out] + [t.grad for t in ts])
    assert_close(res[0], res[1], rtol=1e-10, atol=1e-12)


def test_blockwise_is_used_for_long_sequences_or_with_kernels(monkeypatch):
    F = ember.nn.functional
    calls = []
    real = _attention.flash_attention
    monkeypatch.setattr(_attention, "flash_attention", lambda *a: calls.append(1) or real(*a))

    def flash(*args, **kwargs):
        calls.clear()
        F.scaled_dot_product_attention(*args, **kwargs)
        return bool(calls)
    small = ember.nn._attention_small.applies(*[np.zeros((2, 2), np.float32)] * 3)
    for L in (64, 128):        # the compiled kernels take short sequences too (all heads at once)
        x = ember.ones(1, L, 8, requires_grad=True)
        assert flash(x, x, x) == (small or L >= 128 and ember._C.kernels.kernel(
            "attn_fwd_tile", np.dtype(np.float32)) is not None)
        with ember._C.kernels.disabled():
            assert not flash(x, x, x)
    y = ember.ones(1, 1024, 8, requires_grad=True)
    assert flash(y, y, y, is_causal=True)
    assert not flash(y, y, y, ember.ones(1024, 1024, dtype=ember.bool))


def _peak_mib(monkeypatch, L, flash):
    for name in ("FLASH_MIN_SCORES", "KERNEL_MIN_SCORES"):
        monkeypatch.setattr(_attention, name, 0 if flash else 1 << 62)
    if not flash:       # (at 2+ threads one head's long keys would take attn_small's split path)
        monkeypatch.setattr(ember.nn._attention_small, "MAX_SPLIT_KEYS", 0)
    ember.manual_seed(0)
    q, k, v = (ember.randn(1, L, 16, requires_grad=True) for _ in range(3))
    tracemalloc.start()
    try:
        ember.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum() \
            .backward()
        return tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()


def test_blockwise_peak_memory_at_seq_2048(monkeypatch):
    naive, flash = _peak_mib(monkeypatch, 2048, False), _peak_mib(monkeypatch, 2048, True)
    # naive holds several (2048, 2048) float32 matrices (16 MiB each); blockwise only tiles
    assert naive > 40 and flash < naive / 4, (naive, flash)
