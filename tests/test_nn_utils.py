"""ember.nn.utils and ember.func against torch: gradient clipping, parameter vectors, conv-bn
fusion, packed sequences (and recurrent layers on them), parametrizations and functional_call.
With torch's weights loaded, values, gradients and state_dict keys must agree."""
import math

import numpy as np
import pytest

import ember
from oracle import assert_close, torch

from ember.nn.utils import rnn as ernn

trnn = torch.nn.utils.rnn
rng = np.random.default_rng(0)


def _load_from(e, t):
    """Copy torch module ``t``'s state into ember module ``e`` (keys must match)."""
    sd = t.state_dict()
    assert list(e.state_dict()) == list(sd)
    e.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in sd.items()})


def _pair(build):
    t, e = build(torch.nn).double(), build(ember.nn).double()
    _load_from(e, t)
    return e, t


def _same_error(call):
    """``call(lib, rnn_utils)`` raises the same exception type and message in both."""
    got = []
    for lib, mod in ((ember, ernn), (torch, trnn)):
        with pytest.raises(Exception) as info:  # noqa: B017
            call(lib, mod)
        got.append((type(info.value), str(info.value)))
    assert got[0] == got[1]


def _params_with_grads(shapes, scale=1.0):
    arrays = [rng.standard_normal(s) * scale for s in shapes]
    ep = [ember.nn.Parameter(ember.tensor(a)) for a in arrays]
    tp = [torch.nn.Parameter(torch.tensor(a)) for a in arrays]
    for p, q, a in zip(ep, tp, arrays):
        g = rng.standard_normal(a.shape)
        p.grad, q.grad = ember.tensor(g), torch.tensor(g)
    return ep, tp


# ---- clipping, vectors, fusion ------------------------------------------------------------

@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf, 0.5, 3])
@pytest.mark.parametrize("foreach", [None, False, True])
def test_clip_grad_norm_matches_torch(norm_type, foreach):
    ep, tp = _params_with_grads([(3, 4), (5,), ()])
    te = ember.nn.utils.clip_grad_norm_(ep, 0.7, norm_type, foreach=foreach)
    tt = torch.nn.utils.clip_grad_norm_(tp, 0.7, norm_type, foreach=False)
    assert_close(te, tt)
    assert_close([p.grad for p in ep], [p.grad for p in tp])


def test_clip_grad_norm_generator_single_tensor_and_no_grads():
    ep, tp = _params_with_grads([(4,), (2, 2)], scale=0.01)
    assert_close(ember.nn.utils.clip_grad_norm_(iter(ep), 100.0),
                 torch.nn.utils.clip_grad_norm_(iter(tp), 100.0))
    assert_close([p.grad for p in ep], [p.grad for p in tp])   # coefficient clamps to 1
    assert_close(ember.nn.utils.clip_grad_norm_(ep[0], 0.1),
                 torch.nn.utils.clip_grad_norm_(tp[0], 0.1))
    assert_close(ep[0].grad, tp[0].grad)
    p = ember.nn.Parameter(ember.ones(2))
    assert float(ember.nn.utils.clip_grad_norm_([p], 1.0)) == 0.0


def test_clip_grad_norm_nonfinite():
    ep, tp = _params_with_grads([(3,)])
    ep[0].grad[1] = float("nan")
    tp[0].grad[1] = float("nan")
    with pytest.raises(RuntimeError) as te:
        ember.nn.utils.clip_grad_norm_(ep, 1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as tt:
        torch.nn.utils.clip_grad_norm_(tp, 1.0, error_if_nonfinite=True)
    assert str(te.value) == str(tt.value)
    assert_close(ember.nn.utils.clip_grad_norm_(ep, 1.0), torch.nn.utils.clip_grad_norm_(tp, 1.0))
    assert_close(ep[0].grad, tp[0].grad)


def test_get_total_norm_clip_grads_with_norm_and_clip_value():
    ep, tp = _params_with_grads([(3, 2), (4,)])
    ne = ember.nn.utils.get_total_norm([p.grad for p in ep], 3.0)
    nt = torch.nn.utils.get_total_norm([p.grad for p in tp], 3.0)
    assert_close(ne, nt)
    ember.nn.utils.clip_grads_with_norm_(ep, 0.5, ne)
    torch.nn.utils.clip_grads_with_norm_(tp, 0.5, nt)
    assert_close([p.grad for p in ep], [p.grad for p in tp])
    ep, tp = _params_with_grads([(3, 2), (4,)])
    assert ember.nn.utils.clip_grad_value_(ep, 0.3) is None
    torch.nn.utils.clip_grad_value_(tp, 0.3)
    assert_close([p.grad for p in ep], [p.grad for p in tp])


def test_parameters_to_vector_and_back():
    e, t = _pair(lambda nn: nn.Sequential(nn.Linear(3, 4), nn.Conv1d(2, 3, 2)))
    ve = ember.nn.utils.parameters_to_vector(e.parameters())
    vt = torch.nn.utils.parameters_to_vector(t.parameters())
    assert_close(ve, vt)
    new = rng.standard_normal(vt.shape)
    ember.nn.utils.vector_to_parameters(ember.tensor(new), e.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(new), t.parameters())
    assert_close(list(e.parameters()), list(t.parameters()))
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        ember.nn.utils.vector_to_parameters([1.0], e.parameters())


@pytest.mark.parametrize("kind", ["conv", "conv_nobias", "convT", "linear"])
def test_fuse_with_batchnorm_matches_torch(kind):
    def build(nn):
        if kind == "linear":
            layer, bn = nn.Linear(3, 4), nn.BatchNorm1d(4)
        elif kind == "convT":
            layer, bn = nn.ConvTranspose2d(3, 4, 2), nn.BatchNorm2d(4)
        else:
            layer, bn = nn.Conv2d(3, 4, 2, bias=kind == "conv"), nn.BatchNorm2d(4)
        return nn.Sequential(layer, bn)
    e, t = _pair(build)
    sd = {k: v for k, v in t.state_dict().items() if "running" in k or k.startswith("1.")}
    for k, v in sd.items():
        if v.is_floating_point():
            v.copy_(torch.tensor(rng.uniform(0.5, 1.5, tuple(v.shape))))
    _load_from(e, t)
    e.eval(), t.eval()
    if kind == "linear":
        fe = ember.nn.utils.fuse_linear_bn_eval(e[0], e[1])
        ft = torch.nn.utils.fuse_linear_bn_eval(t[0], t[1])
        x = rng.standard_normal((2, 3))
    else:
        tr = kind == "convT"
        fe = ember.nn.utils.fuse_conv_bn_eval(e[0], e[1], transpose=tr)
        ft = torch.nn.utils.fuse_conv_bn_eval(t[0], t[1], transpose=tr)
        x = rng.standard_normal((2, 3, 5, 5))
    assert_close(fe.weight, ft.weight)
    assert_close(fe.bias, ft.bias)
    assert fe.bias.requires_grad == ft.bias.requires_grad
    assert_close(fe(ember.tensor(x)), e(ember.tensor(x)), rtol=1e-9, atol=1e-9)
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        ember.nn.utils.fuse_conv_bn_eval(e[0].train(), e[1])


# ---- packed sequences -------------------------------------------------------------------------

LENGTHS = [3, 5, 2, 4]          # distinct, so sorting order agrees with torch


def _padded(batch_first=False, lengths=LENGTHS, feat=(3,)):
    a = rng.standard_normal((len(lengths), max(lengths), *feat))
    for i, n in enumerate(lengths):
        a[i, n:] = 0
    return a if batch_first else a.swapaxes(0, 1).copy()


def _assert_packed(pe, pt):
    assert isinstance(pe, ernn.PackedSequence)
    assert_close(pe.data, pt.data)
    assert_close(pe.batch_sizes, pt.batch_sizes)
    assert_close(pe.sorted_indices, pt.sorted_indices)
    assert_close(pe.unsorted_indices, pt.unsorted_indices)


@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_and_pad_roundtrip_match_torch(batch_first):
    a = _padded(batch_first)
    xe, xt = ember.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    pe = ernn.pack_padded_sequence(xe, ember.tensor(LENGTHS), batch_first, enforce_sorted=False)
    pt = trnn.pack_padded_sequence(xt, torch.tensor(LENGTHS), batch_first, enforce_sorted=False)
    _assert_packed(pe, pt)
    oe = ernn.pad_packed_sequence(pe, batch_first, padding_value=-2.0, total_length=6)
    ot = trnn.pad_packed_sequence(pt, batch_first, padding_value=-2.0, total_length=6)
    assert_close(oe, ot)
    w = rng.standard_normal(tuple(ot[0].shape))
    (oe[0] * ember.tensor(w)).sum().backward()
    (ot[0] * torch.tensor(w)).sum().backward()
    assert_close(xe.grad, xt.grad)


def test_pack_sorted_and_errors():
    lens = sorted(LENGTHS, reverse=True)
    a = _padded(lengths=lens)
    pe = ernn.pack_padded_sequence(ember.tensor(a), lens)
    pt = trnn.pack_padded_sequence(torch.tensor(a), lens)
    _assert_packed(pe, pt)
    assert pe.sorted_indices is None and pe.batch_sizes.dtype == ember.int64
    assert_close(ernn.pad_packed_sequence(pe), trnn.pad_packed_sequence(pt))
    packed = {ember: pe, torch: pt}
    _same_error(lambda lib, m: m.pack_padded_sequence(lib.tensor(a), LENGTHS))
    _same_error(lambda lib, m: m.pack_padded_sequence(lib.tensor(a), [5, 4, 3, 0]))
    _same_error(lambda lib, m: m.pad_packed_sequence(packed[lib], total_length=2))
    _same_error(lambda lib, m: m.pad_sequence([lib.ones(2)], padding_side="middle"))


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_pad_sequence_pack_sequence_unpack(side, batch_first):
    seqs = [rng.standard_normal((n, 2)) for n in LENGTHS]
    es, ts = [ember.tensor(s) for s in seqs], [torch.tensor(s) for s in seqs]
    assert_close(ernn.pad_sequence(es, batch_first, 7.0, side),
                 trnn.pad_sequence(ts, batch_first, 7.0, side))
    pe, pt = ernn.pack_sequence(es, enforce_sorted=False), trnn.pack_sequence(ts, False)
    _assert_packed(pe, pt)
    assert_close(ernn.unpack_sequence(pe), trnn.unpack_sequence(pt))
    padded = ernn.pad_sequence(es, batch_first)
    assert_close(ernn.unpad_sequence(padded, ember.tensor(LENGTHS), batch_first),
                 trnn.unpad_sequence(trnn.pad_sequence(ts, batch_first), torch.tensor(LENGTHS),
                                     batch_first))


def test_packed_sequence_is_a_tuple_and_moves():
    p = ernn.pack_sequence([ember.tensor([1.0, 2.0]), ember.tensor([3.0])])
    data, batch_sizes, sorted_indices, unsorted_indices = p
    assert p._fields == ("data", "batch_sizes", "sorted_indices", "unsorted_indices")
    assert p.double().data.dtype == ember.float64 and p.to("cpu") is p
    assert p.to(ember.float64).batch_sizes is batch_sizes
    q = ernn.PackedSequence(data, batch_sizes, ember.tensor([1, 0]))
    assert q.unsorted_indices.tolist() == [1, 0]


# ---- recurrent layers on packed input -------------------------------------------------------

@pytest.mark.parametrize("cls,kw", [
    ("RNN", {}), ("RNN", {"nonlinearity": "relu", "num_layers": 2, "bidirectional": True}),
    ("LSTM", {}), ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"proj_size": 2, "batch_first": True}), ("GRU", {"bidirectional": True}),
    ("GRU", {"num_layers": 2, "batch_first": True})])
@pytest.mark.parametrize("with_hx", [False, True])
def test_recurrent_layers_on_packed_input_match_torch(cls, kw, with_hx):
    e, t = _pair(lambda nn: getattr(nn, cls)(3, 4, **kw))
    bf = kw.get("batch_first", False)
    a = _padded(bf)
    xe, xt = ember.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    pe = ernn.pack_padded_sequence(xe, LENGTHS, bf, enforce_sorted=False)
    pt = trnn.pack_padded_sequence(xt, LENGTHS, bf, enforce_sorted=False)
    args_e, args_t = [pe], [pt]
    if with_hx:
        dirs = 2 if kw.get("bidirectional") else 1
        shape = (kw.get("num_layers", 1) * dirs, len(LENGTHS), kw.get("proj_size") or 4)
        h = rng.standard_normal(shape)
        he, ht = ember.tensor(h, requires_grad=True), torch.tensor(h, requires_grad=True)
        if cls == "LSTM":
            c = rng.standard_normal(shape[:2] + (4,))
            he, ht = (he, ember.tensor(c)), (ht, torch.tensor(c))
        args_e.append(he), args_t.append(ht)
    oe, he_n = e(*args_e)
    ot, ht_n = t(*args_t)
    _assert_packed(oe, ot)
    assert_close(he_n, ht_n, rtol=1e-9, atol=1e-9)
    loss_e = (oe.data * ember.tensor(np.cos(np.arange(oe.data.numel())).reshape(oe.data.shape))
              ).sum()
    loss_t = (ot.data * torch.tensor(np.cos(np.arange(ot.data.numel())).reshape(ot.data.shape))
              ).sum()
    hs_e, hs_t = (he_n if cls == "LSTM" else (he_n,)), (ht_n if cls == "LSTM" else (ht_n,))
    for a_e, a_t in zip(hs_e, hs_t):
        loss_e, loss_t = loss_e + (a_e * 0.3).sum(), loss_t + (a_t * 0.3).sum()
    loss_e.backward(), loss_t.backward()
    assert_close(xe.grad, xt.grad, rtol=1e-9, atol=1e-9)
    for (n, p), (_, q) in zip(e.named_parameters(), t.named_parameters()):
        assert_close(p.grad, q.grad, rtol=1e-8, atol=1e-9, what=n)


def test_packed_output_pads_like_padded_run():
    """Padding a packed run's output equals running each sequence alone."""
    e = ember.nn.GRU(3, 4, bidirectional=True).double()
    a = _padded()
    out, h = e(ernn.pack_padded_sequence(ember.tensor(a), LENGTHS, enforce_sorted=False))
    padded, lens = ernn.pad_packed_sequence(out)
    assert lens.tolist() == LENGTHS
    for i, n in enumerate(LENGTHS):
        oi, hi = e(ember.tensor(a[:n, i:i + 1]))
        assert_close(padded[:n, i:i + 1], oi, rtol=1e-12, atol=1e-12)
        assert_close(h[:, i:i + 1], hi, rtol=1e-12, atol=1e-12)
