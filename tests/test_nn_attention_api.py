"""nn.attention (sdpa_kernel, SDPBackend) and nn.attention.flex_attention against torch."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")
import torch.nn.attention.flex_attention as tflex  # noqa: E402

from ember.nn.attention import flex_attention as eflex  # noqa: E402

tflex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True     # torch's eager reference, not a compile
R = np.random.default_rng(0)


def _pair(*shape, dtype=np.float32):
    x = R.standard_normal(shape).astype(dtype)
    return ember.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def test_sdp_backend_enum():
    for name, member in torch.nn.attention.SDPBackend.__members__.items():
        assert int(getattr(ember.nn.attention.SDPBackend, name)) == int(member)
    assert ember.nn.attention.WARN_FOR_UNFUSED_KERNELS is False


@pytest.mark.parametrize("backends", [["MATH"], ["FLASH_ATTENTION"], ["MATH", "FLASH_ATTENTION"],
                                      ["EFFICIENT_ATTENTION"]])
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_sdpa_kernel_picks_torch_backend(backends, dropout):
    (eq, tq) = _pair(2, 3, 5, 8)
    outs = []
    for L, q in ((ember, eq), (torch, tq)):
        A = L.nn.attention
        with A.sdpa_kernel([getattr(A.SDPBackend, b) for b in backends]):
            try:
                with pytest.warns(UserWarning) if backends == ["FLASH_ATTENTION"] and dropout \
                        else _nothing():
                    y = L.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=dropout)
                outs.append(type(y.grad_fn).__name__ if dropout else (y, y.grad_fn.name()))
            except RuntimeError as e:
                outs.append(str(e))
        assert L.backends.cuda.math_sdp_enabled() and L.backends.cuda.flash_sdp_enabled()
    if dropout or isinstance(outs[0], str):
        assert outs[0] == outs[1]
    else:
        _close(outs[0][0], outs[1][0])
        assert outs[0][1] == outs[1][1]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_sdpa_kernel_priority_and_bad_input():
    A = ember.nn.attention
    with A.sdpa_kernel([A.SDPBackend.MATH, A.SDPBackend.FLASH_ATTENTION], set_priority=True):
        assert A._current(with_priority=True)[:2] == [A.SDPBackend.MATH,
                                                      A.SDPBackend.FLASH_ATTENTION]
    with pytest.raises(AssertionError, match="got str"):
        with A.sdpa_kernel("MATH"):
            pass
    with pytest.raises(ValueError, match="Unknown flash attention impl 'FA9'"):
        A.activate_flash_attention_impl("FA9")


def test_flash_attention_impl_registry():
    A, removed = ember.nn.attention, []

    class Handle:
        def remove(self):
            removed.append(1)
    A.register_flash_attention_impl("Test", register_fn=Handle)
    A.activate_flash_attention_impl("Test")
    assert A.current_flash_attention_impl() == "Test" and "Test" in A.list_flash_attention_impls()
    A.restore_flash_attention_impl()
    assert removed == [1] and A.current_flash_attention_impl() is None


def causal(b, h, q, kv):
    return q >= kv


def sliding(b, h, q, kv):
    return (q - kv).abs() < 40


def doc_mask(b, h, q, kv):     # uses a captured tensor indexed by the indices
    return (DOCS[q] == DOCS[kv]) & (b + h >= 0)


DOCS = None


@pytest.mark.parametrize("mod", [causal, sliding, doc_mask, "and", "or", "noop"])
@pytest.mark.parametrize("B,H,Q,KV,bs", [(2, 3, 200, 200, 128), (1, 1, 100, 260, (32, 64)),
                                         (None, None, 64, 64, 16)])
def test_create_block_mask_tables(mod, B, H, Q, KV, bs):
    global DOCS
    fns = []
    for L, F in ((ember, eflex), (torch, tflex)):
        DOCS = L.arange(max(Q, KV)) // 50
        fn = {"and": F.and_masks(causal, sliding), "or": F.or_masks(causal, sliding),
              "noop": F.noop_mask}.get(mod, mod)
        bm = F.create_block_mask(fn, B, H, Q, KV, "cpu", BLOCK_SIZE=bs)
        fns.append((bm, F.create_mask(fn, B, H, Q, KV, "cpu")))
    (e, em), (t, tm) = fns
    assert em.dtype == ember.bool and np.array_equal(em.numpy(), tm.numpy())
    for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                 "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices"):
        a, b = getattr(e, name), getattr(t, name)
        assert str(a.dtype) == str(b.dtype), name
        # past kv_num_blocks the index order is argsort's tie order: compare the used part
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    assert e.shape == t.shape and e.BLOCK_SIZE == t.BLOCK_SIZE and e.numel() == t.numel()
    assert e.sparsity() == pytest.approx(t.sparsity())
    np.testing.assert_array_equal(e.to_dense().numpy(), t.to_dense().numpy())
    if B:
        np.testing.assert_array_equal(e[0, -1].kv_indices.numpy(), t[0, -1].kv_indices.numpy())
        assert e[1:].shape == t[1:].shape
    assert e.as_tuple()[:2] == t.as_tuple()[:2] and e.as_tuple()[-1] is t.as_tuple()[-1] or mod in ("and", "or", "noop")
    assert repr(e).splitlines()[:11] == repr(t).splitlines()[:11]


def rel_bias(score, b, h, q, kv):
    return score + (q - kv) * 0.1


def head_bias(score, b, h, q, kv):
    return score * HEAD[h] + ember.where(q >= kv, 0.0, -0.5) if isinstance(score, ember.Tensor) \
        else score * HEAD_T[h] + torch.where(q >= kv, 0.0, -0.5)


def softcap(score, b, h, q, kv):
    return 5 * (score / 5).tanh()


HEAD, HEAD_T = ember.tensor([1.0, 0.5, 2.0, 1.5]), torch.tensor([1.0, 0.5, 2.0, 1.5])


def _torch_reference(q, k, v, score_mod, mask, scale):
    """the eager formula in torch ops (torch's flex_attention has no cpu backward)"""
    B, H, Lq, Lk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    s = (q @ k.transpose(-2, -1)) * scale
    idx = (torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1),
           torch.arange(Lq).view(1, 1, Lq, 1), torch.arange(Lk).view(1, 1, 1, Lk))
    s = score_mod(s, *idx) if score_mod else s
    if mask is not None:
        s = s.masked_fill(~tflex.create_mask(mask, B, H, Lq, Lk, "cpu"), -float("inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v


@pytest.mark.parametrize("score_mod", [None, rel_bias, head_bias, softcap])
@pytest.mark.parametrize("mask", [None, causal, sliding, "empty_rows"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flex_attention_values_and_grads(score_mod, mask, dtype):
    (eq, tq), (ek, tk), (ev, tv) = (_pair(2, 4, 70, 16, dtype=dtype) for _ in range(3))
    res = []
    m = (lambda b, h, qi, kv: qi < 60) if mask == "empty_rows" else mask
    for L, F, q, k, v in ((ember, eflex, eq, ek, ev), (torch, tflex, tq, tk, tv)):
        bm = None if m is None else F.create_block_mask(m, None, 4, 70, 70, "cpu", BLOCK_SIZE=32)
        with L.no_grad():
            out, aux = F.flex_attention(q.detach(), k.detach(), v.detach(), score_mod=score_mod, block_mask=bm, scale=0.3,
                                        return_aux=F.AuxRequest(lse=True))
        res.append((out, aux.lse))
    tol = 1e-5 if dtype == np.float32 else 1e-10
    for a, b in zip(*res):
        _close(a, b, tol)
    # ember differentiates its eager path (torch's cpu flex_attention refuses backward)
    bm = None if m is None else eflex.create_block_mask(m, None, 4, 70, 70, "cpu", BLOCK_SIZE=32)
    (eflex.flex_attention(eq, ek, ev, score_mod, bm, scale=0.3) ** 2).sum().backward()
    (_torch_reference(tq, tk, tv, score_mod, m, 0.3) ** 2).sum().backward()
    for a, b in ((eq, tq), (ek, tk), (ev, tv)):
        _close(a.grad, b.grad, tol * 10)


def test_flex_attention_gqa_lse_and_errors():
    (eq, tq), (ek, tk) = _pair(1, 4, 8, 16), _pair(1, 2, 8, 16)
    tq, tk = tq.detach(), tk.detach()
    with pytest.warns(FutureWarning, match="return_lse is deprecated"):
        e = eflex.flex_attention(eq, ek, ek, enable_gqa=True, return_lse=True)
    t = tflex.flex_attention(tq, tk, tk, enable_gqa=True, return_lse=True)
    _close(e[0], t[0]), _close(e[1], t[1])
    for L, F, q, k in ((ember, eflex, eq, ek), (torch, tflex, tq, tk)):
        with pytest.raises(ValueError, match="Hq=4 and Hkv=2"):
            F.flex_attention(q, k, k)
    with pytest.raises(ValueError, match="Cannot specify both return_lse and return_aux"):
        eflex.flex_attention(eq, eq, eq, return_lse=True, return_aux=eflex.AuxRequest())
    with pytest.raises(RuntimeError, match="callable mask_mods"):
        eflex.and_masks(causal, 3)
