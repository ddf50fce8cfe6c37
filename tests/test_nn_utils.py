"""ember.nn.utils and ember.func against torch: gradient clipping, parameter vectors, conv-bn
fusion, packed sequences (and recurrent layers on them), parametrizations and functional_call.
With torch's weights loaded, values, gradients and state_dict keys must agree."""
import math

import numpy as np
import pytest

import ember
from oracle import assert_close, torch

from ember.nn.utils import parametrize
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


# ---- parametrize ------------------------------------------------------------------------------

class _Symmetric:
    def __init__(self, nn):
        class Symmetric(nn.Module):
            def forward(self, X):
                return X.triu() + X.triu(1).mT

            def right_inverse(self, A):
                return A.triu()
        self.cls = Symmetric


class _RankOne:
    def __init__(self, nn):
        class RankOne(nn.Module):
            def forward(self, x, y):
                return x.unsqueeze(-1) @ y.unsqueeze(-2)

            def right_inverse(self, Z):
                return Z[:, 0].clone(), Z[0].clone() / Z[0, 0]
        self.cls = RankOne


def _with(lib, build, param_cls, *param_args):
    m = build(lib.nn)
    lib.nn.utils.parametrize.register_parametrization(m, "weight", param_cls(lib.nn).cls(),
                                                      *param_args)
    return m


def test_register_parametrization_matches_torch():
    build = lambda nn: nn.Linear(3, 3).double()  # noqa: E731
    t = _with(torch, build, _Symmetric)
    e = _with(ember, build, _Symmetric)
    assert type(e).__name__ == type(t).__name__ == "ParametrizedLinear"
    _load_from(e, t)
    assert_close(e.weight, t.weight)
    x = rng.standard_normal((2, 3))
    e(ember.tensor(x)).sum().backward()
    t(torch.tensor(x)).sum().backward()
    assert_close(e.parametrizations.weight.original.grad, t.parametrizations.weight.original.grad)
    orig = e.parametrizations.weight.original
    sym = rng.standard_normal((3, 3))
    sym = sym + sym.T
    e.weight, t.weight = ember.tensor(sym), torch.tensor(sym)
    assert e.parametrizations.weight.original is orig
    assert_close(e.weight, t.weight)
    assert parametrize.is_parametrized(e) and parametrize.is_parametrized(e, "weight")
    assert not parametrize.is_parametrized(e, "bias")
    assert parametrize.type_before_parametrizations(e) is ember.nn.Linear
    with parametrize.cached():
        assert e.weight is e.weight
    assert e.weight is not e.weight
    with pytest.raises(RuntimeError, match="Serialization of parametrized modules"):
        __import__("pickle").dumps(e)


@pytest.mark.parametrize("leave", [True, False])
def test_remove_parametrizations(leave):
    ms = [_with(lib, lambda nn: nn.Linear(3, 3).double(), _Symmetric) for lib in (torch, ember)]
    t, e = ms
    _load_from(e, t)
    torch.nn.utils.parametrize.remove_parametrizations(t, "weight", leave_parametrized=leave)
    ember.nn.utils.parametrize.remove_parametrizations(e, "weight", leave_parametrized=leave)
    assert type(e) is ember.nn.Linear and not hasattr(e, "parametrizations")
    assert list(e.state_dict()) == list(t.state_dict())
    assert isinstance(e.weight, ember.nn.Parameter)
    assert_close(e.weight, t.weight)
    with pytest.raises(ValueError, match="does not have a parametrization on weight"):
        parametrize.remove_parametrizations(e, "weight")


def test_multi_tensor_and_chained_parametrizations():
    build = lambda nn: nn.Linear(3, 3).double()  # noqa: E731
    t, e = _with(torch, build, _RankOne), _with(ember, build, _RankOne)
    assert list(e.state_dict()) == list(t.state_dict())
    _load_from(e, t)
    assert_close(e.weight, t.weight)
    with pytest.raises(ValueError, match="Cannot leave unparametrized"):
        parametrize.remove_parametrizations(e, "weight", leave_parametrized=False)
    for lib, m in ((torch, t), (ember, e)):
        lib.nn.utils.parametrize.register_parametrization(m, "weight", _Symmetric(lib.nn).cls())
    assert list(e.state_dict()) == list(t.state_dict())
    assert_close(e.weight, t.weight)
    parametrize.remove_parametrizations(e, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(t, "weight")
    assert_close(e.weight, t.weight)


def test_register_parametrization_errors():
    class Twice(ember.nn.Module):
        def forward(self, x):
            return ember.cat([x, x])
    with pytest.raises(ValueError, match="may not change the shape of the tensor"):
        parametrize.register_parametrization(ember.nn.Linear(2, 2), "weight", Twice())
    m = parametrize.register_parametrization(ember.nn.Linear(2, 2), "weight", Twice(),
                                             unsafe=True)
    assert m.weight.shape == (4, 2)
    with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a"):
        parametrize.register_parametrization(ember.nn.Linear(2, 2), "nope", Twice())


# ---- weight norm, spectral norm, orthogonal -------------------------------------------------

def _check_grads(e, t, x, names):
    ye, yt = e(ember.tensor(x)), t(torch.tensor(x))
    assert_close(ye, yt, rtol=1e-9, atol=1e-10)
    w = rng.standard_normal(tuple(yt.shape))
    (ye * ember.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    pe, pt = dict(e.named_parameters()), dict(t.named_parameters())
    assert list(pe) == list(pt)
    for n in names or pt:
        assert_close(pe[n].grad, pt[n].grad, rtol=1e-8, atol=1e-10, what=n)


@pytest.mark.parametrize("dim", [0, 1, None, -1])
@pytest.mark.parametrize("legacy", [False, True])
def test_weight_norm_matches_torch(dim, legacy):
    def build(nn):
        m = nn.Conv1d(3, 4, 2).double()
        return (nn.utils.weight_norm if legacy else nn.utils.parametrizations.weight_norm)(
            m, dim=dim)
    e, t = _pair(build)
    _check_grads(e, t, rng.standard_normal((2, 3, 5)), None)
    assert_close(e.weight, t.weight, rtol=1e-12, atol=1e-12)   # legacy: set by the forward
    if legacy:
        ember.nn.utils.remove_weight_norm(e)
        torch.nn.utils.remove_weight_norm(t)
        assert list(e.state_dict()) == list(t.state_dict())
        assert_close(e.weight, t.weight, rtol=1e-12, atol=1e-12)
        with pytest.raises(ValueError, match="weight_norm of 'weight' not found in"):
            ember.nn.utils.remove_weight_norm(e)


def test_weight_norm_loads_legacy_checkpoint():
    old = torch.nn.utils.weight_norm(torch.nn.Linear(3, 2).double())
    new = ember.nn.utils.parametrizations.weight_norm(ember.nn.Linear(3, 2).double())
    new.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in old.state_dict().items()})
    assert_close(new.weight, old.weight, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("layer", ["linear", "conv", "convT"])
def test_spectral_norm_matches_torch(legacy, layer):
    def build(nn):
        m = {"linear": lambda: nn.Linear(5, 4), "conv": lambda: nn.Conv2d(2, 3, 2),
             "convT": lambda: nn.ConvTranspose2d(2, 3, 2)}[layer]().double()
        return (nn.utils.spectral_norm if legacy else nn.utils.parametrizations.spectral_norm)(
            m, n_power_iterations=2)
    e, t = _pair(build)     # copies u and v too, so power iteration starts the same
    x = rng.standard_normal((2, 5) if layer == "linear" else (2, 2, 4, 4))
    _check_grads(e, t, x, None)                 # training: power iteration runs
    assert_close(list(e.state_dict().values()), list(t.state_dict().values()),
                 rtol=1e-10, atol=1e-12)
    e.eval(), t.eval()
    assert_close(e(ember.tensor(x)), t(torch.tensor(x)), rtol=1e-9, atol=1e-10)
    if legacy:
        ember.nn.utils.remove_spectral_norm(e)
        torch.nn.utils.remove_spectral_norm(t)
        assert list(e.state_dict()) == list(t.state_dict())
        assert_close(e.weight, t.weight, rtol=1e-10, atol=1e-12)


def test_spectral_norm_sigma_is_largest_singular_value():
    # seeded: 30 power iterations converge to 1e-6 unless the top two singular values are
    # close, which ~4% of random 5x6 weights have (torch's power iteration alike)
    ember.manual_seed(0)
    m = ember.nn.utils.parametrizations.spectral_norm(ember.nn.Linear(6, 5).double())
    for _ in range(30):
        m(ember.zeros(1, 6, dtype=ember.float64))
    assert abs(np.linalg.svd(m.weight.detach().numpy(), compute_uv=False)[0] - 1) < 1e-6
    with pytest.raises(IndexError, match="Dimension out of range"):
        ember.nn.utils.parametrizations.spectral_norm(ember.nn.Linear(2, 2), dim=2)


@pytest.mark.parametrize("shape,orth_map", [((4, 4), None), ((5, 3), None), ((3, 5), None),
                                            ((4, 4), "householder"), ((5, 3), "matrix_exp"),
                                            ((4, 4), "cayley"), ((5, 3), "cayley"),
                                            ((3, 5), "cayley")])
def test_orthogonal_matches_torch(shape, orth_map):
    def build(nn):
        m = nn.Linear(shape[1], shape[0]).double()
        return nn.utils.parametrizations.orthogonal(m, orthogonal_map=orth_map)
    e, t = _pair(build)
    w = e.weight.detach().numpy()
    small = w if shape[0] >= shape[1] else w.T
    np.testing.assert_allclose(small.T @ small, np.eye(min(shape)), atol=1e-12)
    assert_close(e.weight, t.weight, rtol=1e-10, atol=1e-12)
    # Move the original away from -Id so the maps' gradients are exercised off the identity.
    o = t.parametrizations.weight.original
    with torch.no_grad():
        o.add_(torch.tensor(rng.standard_normal(tuple(o.shape)) * 0.3))
    _load_from(e, t)
    assert_close(e.weight, t.weight, rtol=1e-9, atol=1e-11)
    _check_grads(e, t, rng.standard_normal((2, shape[1])), None)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
def test_orthogonal_householder_without_trivialization(shape):
    def build(nn):
        m = nn.Linear(shape[1], shape[0]).double()
        return nn.utils.parametrizations.orthogonal(m, orthogonal_map="householder",
                                                    use_trivialization=False)
    t = build(torch.nn)
    e = build(ember.nn)
    assert list(e.state_dict()) == list(t.state_dict())
    w = rng.standard_normal(shape)
    t.weight, e.weight = torch.tensor(w), ember.tensor(w)   # right_inverse by geqrf
    assert_close(e.parametrizations.weight.original, t.parametrizations.weight.original,
                 rtol=1e-9, atol=1e-12)
    assert_close(e.weight, t.weight, rtol=1e-9, atol=1e-12)
    _load_from(e, t)                                         # the bias
    _check_grads(e, t, rng.standard_normal((2, shape[1])), None)


def test_orthogonal_assignment_and_errors():
    m = ember.nn.utils.parametrizations.orthogonal(ember.nn.Linear(3, 3).double())
    q = np.linalg.qr(rng.standard_normal((3, 3)))[0]
    m.weight = ember.tensor(q)
    assert_close(m.weight, ember.tensor(q), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="Expected a matrix or batch of matrices. Got a tensor"):
        ember.nn.utils.parametrizations.orthogonal(ember.nn.Linear(3, 3), "bias")
    with pytest.raises(ValueError, match='orthogonal_map has to be one of'):
        ember.nn.utils.parametrizations.orthogonal(ember.nn.Linear(3, 3), orthogonal_map="x")


# ---- functional_call -------------------------------------------------------------------------

def test_functional_call_matches_torch():
    e, t = _pair(lambda nn: nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)))
    names = [n for n, _ in t.named_parameters()]
    arrays = {n: rng.standard_normal(tuple(p.shape)) for n, p in t.named_parameters()}
    pe = {n: ember.tensor(a, requires_grad=True) for n, a in arrays.items()}
    pt = {n: torch.tensor(a, requires_grad=True) for n, a in arrays.items()}
    x = rng.standard_normal((5, 3))
    be = {"1.running_mean": ember.zeros(4, dtype=ember.float64)}
    bt = {"1.running_mean": torch.zeros(4, dtype=torch.float64)}
    ye = ember.func.functional_call(e, (pe, be), (ember.tensor(x),))
    yt = torch.func.functional_call(t, (pt, bt), (torch.tensor(x),))
    assert_close(ye, yt)
    ye.pow(2).sum().backward()
    yt.pow(2).sum().backward()
    assert_close([pe[n].grad for n in names], [pt[n].grad for n in names])
    assert all(p.grad is None for p in e.parameters())     # module's own weights untouched
    # buffers updated like torch's
    assert_close(list(e.state_dict().values()), list(t.state_dict().values()))
    assert_close(be["1.running_mean"], bt["1.running_mean"])


def test_functional_call_tied_weights_and_strict():
    def build(nn):
        m = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
        m[1].weight = m[0].weight
        return m.double()
    e, t = _pair(build)
    w, x = rng.standard_normal((2, 2)), rng.standard_normal((1, 2))
    for tie in (True, False):
        ye = ember.func.functional_call(e, {"0.weight": ember.tensor(w)}, ember.tensor(x),
                                        tie_weights=tie)
        yt = torch.func.functional_call(t, {"0.weight": torch.tensor(w)}, torch.tensor(x),
                                        tie_weights=tie)
        assert_close(ye, yt)
    models = {ember: e, torch: t}
    _same_error(lambda lib, _: lib.func.functional_call(
        models[lib], {"0.weight": lib.tensor(w), "1.weight": lib.tensor(w + 1)}, lib.tensor(x)))
    _same_error(lambda lib, _: lib.func.functional_call(
        models[lib], {"0.weight": lib.tensor(w), "x": lib.ones(1)}, lib.tensor(x),
        tie_weights=False, strict=True))
    _same_error(lambda lib, _: lib.func.functional_call(
        models[lib], ({"a": lib.ones(1)}, {"a": lib.ones(1)}), lib.tensor(x)))


def test_stateless_functional_call_is_deprecated():
    lin = ember.nn.Linear(2, 1)
    params = {"weight": ember.ones(1, 2), "bias": ember.zeros(1)}
    with pytest.warns(FutureWarning, match="stateless.functional_call` is deprecated"):
        y = ember.nn.utils.stateless.functional_call(lin, params, ember.ones(1, 2))
    assert y.tolist() == [[2.0]]
