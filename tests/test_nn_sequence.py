"""Recurrent layers, attention and transformers against torch: same state-dict keys, and with
torch's weights loaded, the same outputs and gradients."""
import numpy as np
import pytest

import ember
from oracle import assert_close, torch


def _pair(build):
    t = build(torch.nn).double().eval()
    e = build(ember.nn).double().eval()
    assert list(e.state_dict()) == list(t.state_dict())
    e.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return e, t


def _run(e, t, arrays, call=lambda m, *xs: m(*xs), out_index=None, grads=True, tol=1e-9):
    ei = [ember.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    ti = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    eo, to = call(e, *ei), call(t, *ti)
    if out_index is not None:
        eo, to = eo[out_index], to[out_index]
    assert_close(eo, to, rtol=tol, atol=tol)
    if grads:
        w = np.random.default_rng(9).standard_normal(tuple(to.shape))
        (eo * ember.tensor(w)).sum().backward()
        (to * torch.tensor(w)).sum().backward()
        assert_close([x.grad for x in ei], [x.grad for x in ti], rtol=tol, atol=tol)
        for (n, pe), (_, pt) in zip(e.named_parameters(), t.named_parameters()):
            assert_close(pe.grad, pt.grad, rtol=1e-8, atol=1e-9, what=n)


rng = np.random.default_rng(0)
SEQ = rng.standard_normal((5, 3, 4))


@pytest.mark.parametrize("cls,kw", [
    ("RNN", {}), ("RNN", {"nonlinearity": "relu", "num_layers": 2}),
    ("LSTM", {}), ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"proj_size": 3}), ("GRU", {"batch_first": True}),
    ("GRU", {"bidirectional": True, "bias": False})])
def test_recurrent_layers_match_torch(cls, kw):
    e, t = _pair(lambda nn: getattr(nn, cls)(4, 6, **kw))
    assert repr(e) == repr(t)
    _run(e, t, [SEQ], out_index=0)
    e.zero_grad(), t.zero_grad()
    final = (lambda m, x: m(x)[1][0]) if cls == "LSTM" else (lambda m, x: m(x)[1])
    _run(e, t, [SEQ], call=final)


def test_lstm_with_initial_state_and_unbatched_input():
    e, t = _pair(lambda nn: nn.LSTM(4, 6))
    h0, c0 = rng.standard_normal((1, 3, 6)), rng.standard_normal((1, 3, 6))
    _run(e, t, [SEQ, h0, c0], call=lambda m, x, h, c: m(x, (h, c))[0])
    _run(e, t, [SEQ[:, 0]], call=lambda m, x: m(x)[0], grads=False)


@pytest.mark.parametrize("cls", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_torch(cls):
    e, t = _pair(lambda nn: getattr(nn, cls)(4, 6))
    x = rng.standard_normal((3, 4))
    call = (lambda m, x: m(x)[1]) if cls == "LSTMCell" else (lambda m, x: m(x))
    _run(e, t, [x], call=call)


@pytest.mark.parametrize("kw,mask", [({}, None), ({"batch_first": True}, "causal"),
                                     ({"add_bias_kv": True, "add_zero_attn": True}, None),
                                     ({"kdim": 5, "vdim": 3}, None), ({}, "padding")])
def test_multihead_attention_matches_torch(kw, mask):
    e, t = _pair(lambda nn: nn.MultiheadAttention(8, 2, **kw))
    lead = (2, 4) if kw.get("batch_first") else (4, 2)
    q = rng.standard_normal(lead + (8,))
    k = rng.standard_normal(lead + (kw.get("kdim", 8),))
    v = rng.standard_normal(lead + (kw.get("vdim", 8),))

    def call(m, q, k, v):
        lib = ember if isinstance(m, ember.nn.Module) else torch
        extra = {}
        if mask == "causal":
            extra["attn_mask"] = lib.ones(4, 4, dtype=lib.bool).triu(1)
        if mask == "padding":
            extra["key_padding_mask"] = lib.tensor([[False, False, True, True],
                                                    [False, False, False, True]])
        out, w = m(q, k, v, **extra)
        return lib.cat([out.reshape(-1), w.reshape(-1)])
    _run(e, t, [q, k, v], call=call)


def test_sdpa_matches_torch():
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    mask = rng.standard_normal((5, 5))
    for kw in ({}, {"is_causal": True}, {"scale": 0.3}):
        eo = ember.nn.functional.scaled_dot_product_attention(
            *(ember.tensor(a) for a in (q, k, v)), **kw)
        to = torch.nn.functional.scaled_dot_product_attention(
            *(torch.tensor(a) for a in (q, k, v)), **kw)
        assert_close(eo, to, rtol=1e-10, atol=1e-12)
    eo = ember.nn.functional.scaled_dot_product_attention(
        *(ember.tensor(a) for a in (q, k, v)), attn_mask=ember.tensor(mask))
    to = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a) for a in (q, k, v)), attn_mask=torch.tensor(mask))
    assert_close(eo, to, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_decoder_match_torch(norm_first):
    def build(nn):
        return nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
                              dim_feedforward=16, dropout=0.0, norm_first=norm_first,
                              batch_first=True)
    e, t = _pair(build)
    src, tgt = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 3, 8))

    def call(m, s, g):
        lib = ember if isinstance(m, ember.nn.Module) else torch
        mask = lib.nn.Transformer.generate_square_subsequent_mask(3, dtype=lib.float64)
        return m(s, g, tgt_mask=mask)
    _run(e, t, [src, tgt], call=call, tol=1e-8)
    assert repr(e) == repr(t)


def test_transformer_encoder_layer_gelu_activation():
    e, t = _pair(lambda nn: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                       activation="gelu"))
    _run(e, t, [rng.standard_normal((5, 2, 8))], tol=1e-8)
