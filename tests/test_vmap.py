"""vmap, generated from the op registry: every op's float64 samples, batched along dim 0, 1
and -1 (and with only the first tensor batched), equal the per-example results stacked; plus
per-sample gradients of an MLP, a CNN and an LSTM against a loop of backward passes."""
import warnings

import numpy as np
import pytest

import ember
from ember import func
from ember._ops.registry import all_ops
from ember.func import _vmap

OPS = [d for d in all_ops() if d.samples is not None]
# ops that still run the loop fallback, and why: asserted exact below
LOOPING = {
    "argwhere": "each example's result has its own length (data-dependent shape)",
    "nonzero": "each example's result has its own length (data-dependent shape)",
    "masked_select": "a batched mask: each example's result has its own length "
                     "(data-dependent shape); a shared mask batches",
    "unique": "each example's result has its own length (data-dependent shape)",
    "unique_consecutive": "each example's result has its own length (data-dependent shape)",
    "bincount": "the result's length is each example's largest value + 1, or minlength "
                "where larger (data-dependent shape)",
    "where": "where(condition) is nonzero(as_tuple=True): each example's own length "
             "(data-dependent shape); where(condition, input, other) batches",
    "repeat_interleave": "a batched repeats tensor: each example's length is the sum of its "
                         "repeats (data-dependent shape); shared repeats batch",
    "tensor_split": "a batched tensor of sections or indices: each example's pieces have "
                    "their own sizes (data-dependent shapes); a shared one batches",
}


def _variant(x):
    return x * 0.75 if x.dtype.kind in "fc" else x


def _batch(a, bdim):
    """The sample argument ``a`` (array, list of arrays or option) as two examples stacked
    along ``bdim``, or None where it is no tensor."""
    if isinstance(a, np.ndarray):
        d = bdim % (a.ndim + 1)
        return ember.tensor(np.stack([a, _variant(a)], d)), d
    if isinstance(a, list) and a and isinstance(a[0], np.ndarray):
        # (one in_dim for every tensor of the list: a negative one counts from each one's end)
        d = bdim if bdim < 0 else min(bdim, *(x.ndim for x in a))
        return [ember.tensor(np.stack([x, _variant(x)], d % (x.ndim + 1))) for x in a], d
    return a, None


def _example(a, i):
    if isinstance(a, np.ndarray):
        return ember.tensor(a if i == 0 else _variant(a))
    if isinstance(a, list) and a and isinstance(a[0], np.ndarray):
        return [ember.tensor(x if i == 0 else _variant(x)) for x in a]
    return a


def _same(got, want, what):
    if isinstance(want, ember.Tensor):
        assert isinstance(got, ember.Tensor), what
        assert got.shape == want.shape and got.dtype == want.dtype, \
            f"{what}: {got.shape} {got.dtype} != {want.shape} {want.dtype}"
        g, w = got.detach().numpy(), want.detach().numpy()
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=1e-7, atol=1e-10, equal_nan=True, err_msg=what)
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)
    else:
        assert len(got) == len(want), what
        for g, w in zip(got, want):
            _same(g, w, what)


def _stacked(outs):
    if isinstance(outs[0], ember.Tensor):
        return ember.stack(outs)
    return type(outs[0])(_stacked([o[i] for o in outs]) for i in range(len(outs[0])))


def _tensors_only(out):
    return isinstance(out, ember.Tensor) or isinstance(out, (tuple, list)) and out and all(
        isinstance(o, ember.Tensor) for o in out)


@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_vmap_matches_stacked_examples(opdef):
    samples = opdef.samples("cpu", ember.float64)
    if not samples:
        pytest.skip(f"{opdef.name} has no float64 samples")
    looped, checked = set(), 0
    for s in samples:
        args, kwargs = s.args, s.kwargs
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = [opdef(*[_example(a, i) for a in args], **kwargs) for i in range(2)]
        except Exception:           # noqa: BLE001  (a sample the per-example call refuses)
            continue
        if not _tensors_only(want[0]):
            continue
        want = _stacked(want)
        tensor_at = [i for i, a in enumerate(args) if _batch(a, 0)[1] is not None]
        for bdim, only_first in ((0, False), (1, False), (-1, False), (0, True)):
            if only_first and len(tensor_at) < 2:
                continue
            batched, dims = zip(*[_batch(a, bdim) if not only_first or i == tensor_at[0] else
                                  (_example(a, 0) if i in tensor_at else a, None)
                                  for i, a in enumerate(args)]) if args else ((), ())
            if only_first:
                expect = _stacked([opdef(*[_example(a, i) if j == tensor_at[0] else
                                           _example(a, 0) for j, a in enumerate(args)],
                                         **kwargs) for i in range(2)])
            else:
                expect = want
            _vmap.LOOPED.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = func.vmap(lambda *a: opdef(*a, **kwargs), in_dims=tuple(dims))(*batched)
            looped |= _vmap.LOOPED
            _same(got, expect, f"{opdef.name}({s}) bdim={bdim} only_first={only_first}")
            checked += 1
    if not checked:
        pytest.skip(f"no sample of {opdef.name} gives tensors per example")
    assert (opdef.name in looped) == (opdef.name in LOOPING), \
        f"{opdef.name}: loops={opdef.name in looped}, listed={opdef.name in LOOPING}"


class _LSTM(ember.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.fc = ember.nn.LSTM(3, 4, batch_first=True), ember.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.lstm(x)[0][:, -1])


def _mlp():
    nn = ember.nn
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


class _Text(ember.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.norm = ember.nn.Embedding(7, 4), ember.nn.LayerNorm(4)
        self.fc = ember.nn.Linear(4, 2)

    def forward(self, idx):
        return self.fc(self.norm(self.emb(idx)).mean(1))


def _cnn():
    nn = ember.nn
    return nn.Sequential(nn.Conv2d(2, 3, 3), nn.Tanh(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3 * 2 * 2, 3))


def _deconv():
    nn = ember.nn
    return nn.Sequential(nn.ConvTranspose2d(2, 4, 3, stride=2, groups=2), nn.Tanh(),
                         nn.Flatten(), nn.Linear(4 * 7 * 7, 3))


@pytest.mark.parametrize("make,shape", [(_mlp, (5, 6)), (_cnn, (4, 2, 6, 6)),
                                        (_deconv, (3, 2, 3, 3)), (_LSTM, (3, 5, 3)),
                                        (_Text, (3, 5))],
                         ids=["mlp", "cnn", "conv-transpose", "lstm", "embedding-layernorm"])
def test_per_sample_grads_match_a_loop_of_backward_passes(make, shape):
    ember.manual_seed(0)
    model = make().double()
    x = ember.randint(0, 7, shape) if make is _Text else ember.randn(*shape, dtype=ember.float64)
    y = ember.randint(0, 2, (shape[0],))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        out = func.functional_call(model, p, (xi.unsqueeze(0),))
        return ember.nn.functional.cross_entropy(out, yi.unsqueeze(0))
    _vmap.LOOPED.clear()
    grads = func.vmap(func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    assert not _vmap.LOOPED, f"looped over the batch: {_vmap.LOOPED}"
    for i in range(shape[0]):
        model.zero_grad()
        ember.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for k, p in model.named_parameters():
            np.testing.assert_allclose(grads[k][i].numpy(), p.grad.numpy(), rtol=1e-10,
                                       atol=1e-10, err_msg=f"{k}, example {i}")


@pytest.mark.parametrize("make,shape", [(_deconv, (3, 2, 3, 3)), (_LSTM, (3, 5, 3))],
                         ids=["conv-transpose", "lstm"])
def test_per_example_models_gradients_batch(make, shape):
    """An ensemble, every example its own parameters (grouped weights: a batched product
    per LSTM step, a grouped transposed convolution): vmap(grad) equals grad per example."""
    ember.manual_seed(0)
    model = make().double()
    x = ember.randn(*shape, dtype=ember.float64)
    y = ember.randint(0, 2, (shape[0],))
    params = {k: ember.stack([v.detach() * (1 + 0.2 * i) for i in range(shape[0])])
              for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        out = func.functional_call(model, p, (xi.unsqueeze(0),))
        return ember.nn.functional.cross_entropy(out, yi.unsqueeze(0))
    _vmap.LOOPED.clear()
    grads = func.vmap(func.grad(loss))(params, x, y)
    assert not _vmap.LOOPED, f"looped over the batch: {_vmap.LOOPED}"
    for i in range(shape[0]):
        want = func.grad(loss)({k: v[i] for k, v in params.items()}, x[i], y[i])
        for k, w in want.items():
            np.testing.assert_allclose(grads[k][i].numpy(), w.numpy(), rtol=1e-10,
                                       atol=1e-12, err_msg=f"{k}, example {i}")


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_transpose_over_per_example_weights_batches(nd):
    """conv_transpose1d/2d/3d vmapped over weights and bias (one grouped transposed
    convolution, the batch folded into the groups) equal each example's."""
    F, g = ember.nn.functional, np.random.default_rng(nd)
    x = ember.tensor(g.standard_normal((3, 4) + (3,) * nd))
    w = ember.tensor(g.standard_normal((5, 4, 3) + (2,) * nd))
    b = ember.tensor(g.standard_normal((5, 6)))
    conv = getattr(F, f"conv_transpose{nd}d")
    _vmap.LOOPED.clear()
    got = func.vmap(lambda wi, bi: conv(x, wi, bi, stride=2, padding=1, output_padding=1,
                                        groups=2), in_dims=(0, 0))(w, b)
    assert not _vmap.LOOPED
    want = ember.stack([conv(x, w[i], b[i], stride=2, padding=1, output_padding=1, groups=2)
                        for i in range(5)])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_per_sample_grads_forward_mode_and_second_order_as_torch():
    """The per-sample layers (expanded weights: one plain convolution / matrix product, each
    example's weight gradient apart): a jvp through the per-sample gradients and each
    example's Hessian block (jacrev of grad inside vmap), against torch.func."""
    import torch

    def run(t):
        t.manual_seed(0)
        nn = t.nn
        m = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, stride=2), nn.Tanh(), nn.Flatten(),
                          nn.Linear(27, 4)).double()
        g = np.random.default_rng(0)
        p, tp = ({k: t.tensor(g.standard_normal(tuple(v.shape))) for k, v in
                  m.named_parameters()} for _ in range(2))
        x, y = t.tensor(g.standard_normal((5, 2, 6, 6))), t.tensor(g.integers(0, 4, 5))

        def loss(p, xi, yi):
            return t.nn.functional.cross_entropy(t.func.functional_call(m, p, (
                xi.unsqueeze(0),)), yi.unsqueeze(0))
        grads, jv = t.func.jvp(lambda p: t.func.vmap(t.func.grad(loss), (None, 0, 0))(
            p, x, y), (p,), (tp,))
        hess = t.func.vmap(t.func.jacrev(t.func.grad(loss)), (None, 0, 0))(p, x, y)
        return [d[k].detach().numpy() for d in (grads, jv) for k in sorted(d)] + [
            hess[k][k].detach().numpy() for k in ("0.weight", "3.weight")]
    for got, want in zip(run(ember), run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# random functions inside vmap, written once for ember and torch (``m``)
_RANDOM_FNS = {
    "dropout": lambda m, t: m.nn.functional.dropout(t, 0.5),
    "rand": lambda m, t: t + m.rand(3),
    "randn_like": lambda m, t: m.randn_like(t),
    "randint": lambda m, t: m.randint(0, 1000, (3,)).to(t.dtype) + t,
    "normal": lambda m, t: m.normal(t, 1.0),
    "bernoulli": lambda m, t: m.bernoulli(t * 0.5),
    "uniform_": lambda m, t: t.clone().uniform_(),
    "poisson": lambda m, t: m.poisson(t * 50),
    "multinomial": lambda m, t: m.multinomial(t, 2).to(t.dtype),
    "randperm": lambda m, t: m.randperm(3).to(t.dtype) * t,
}


@pytest.mark.parametrize("name", list(_RANDOM_FNS))
def test_randomness_same_different_error_as_torch(name):
    """'same': every example draws the same numbers; 'different': each its own (rows differ,
    as torch's); 'error': torch's error."""
    import torch
    fn, x = _RANDOM_FNS[name], ember.ones(6, 3)
    ember.manual_seed(0)
    same = func.vmap(lambda t: fn(ember, t), randomness="same")(x)
    diff = func.vmap(lambda t: fn(ember, t), randomness="different")(x)
    want = torch.vmap(lambda t: fn(torch, t), randomness="different")(torch.ones(6, 3))
    assert tuple(same.shape) == tuple(diff.shape) == tuple(want.shape) and same.dtype == diff.dtype
    assert all(bool((same[i] == same[0]).all()) for i in range(6))
    assert any(not bool((diff[i] == diff[0]).all()) for i in range(6))
    with pytest.raises(RuntimeError) as err:
        func.vmap(lambda t: fn(ember, t))(x)
    with pytest.raises(RuntimeError) as terr:
        torch.vmap(lambda t: fn(torch, t))(torch.ones(6, 3))
    assert str(err.value) == str(terr.value)


def test_randomness_different_draws_are_the_batch_at_once_and_nested():
    ember.manual_seed(0)
    got = func.vmap(lambda t: t + ember.rand(2), randomness="different")(ember.zeros(5, 2))
    ember.manual_seed(0)
    assert bool((got == ember.rand(5, 2)).all())          # one draw of the batch's shape
    nested = func.vmap(func.vmap(lambda t: t + ember.rand(()), randomness="same"),
                       randomness="different")(ember.zeros(4, 3))
    assert all(len(set(r.tolist())) == 1 for r in nested)
    assert len({r[0].item() for r in nested}) > 1
    with pytest.raises(RuntimeError, match="different inplace randomness on an unbatched"):
        func.vmap(lambda t: ember.zeros(3).uniform_(), randomness="different")(ember.ones(2, 3))
    keep = func.vmap(lambda t: ember.nn.functional.dropout(t, 0.3), randomness="different")(
        ember.ones(200, 50))
    assert abs(float((keep != 0).double().mean()) - 0.7) < 0.02


def test_vmap_and_forward_ad_under_the_profiler():
    """vmap and forward AD hold dispatch's transform hook, apart from the profiler's: the
    profiler records the physical ops (the tangent's too), and the hook is gone after."""
    import ember.autograd.forward_ad as fwAD
    from ember._ops.dispatch import hooks
    x = ember.randn(4, 3, dtype=ember.float64)
    with ember.profiler.profile() as prof:
        y = func.vmap(lambda t: t.sin() @ ember.ones(3, dtype=ember.float64))(x)
        with fwAD.dual_level():
            tangent = fwAD.unpack_dual(fwAD.make_dual(x, ember.ones_like(x)).exp()).tangent
    np.testing.assert_allclose(y.numpy(), x.sin().sum(1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(tangent.numpy(), x.exp().numpy(), rtol=1e-12)
    keys = {e.key for e in prof.key_averages()}
    assert {"aten::sin", "aten::matmul", "aten::exp"} <= keys
    assert hooks.transform is None and hooks.profiler is None


@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
def test_quantile_of_a_batched_q_batches(name):
    """Each example its own q (the slices sorted once, the ranks per example): values for
    every interpolation, dim and keepdim, slices with nans, and the gradients in the input
    and in q, equal each example's; nothing loops."""
    f, g = getattr(ember, name), np.random.default_rng(0)
    x = ember.tensor(g.standard_normal((4, 3, 5)))
    x[1, 0, 2], x[2, 1] = float("nan"), float("nan")
    _vmap.LOOPED.clear()
    for interp in ("linear", "lower", "higher", "midpoint", "nearest"):
        for q, dim, keep in ((g.uniform(size=4), None, True), (g.uniform(size=(4, 3)), 1, False),
                             (g.uniform(size=(4, 2)), -1, True), (g.uniform(size=4), 0, False)):
            q = ember.tensor(q)
            got = func.vmap(lambda xi, qi: f(xi, qi, dim, keep, interpolation=interp))(x, q)
            want = ember.stack([f(x[i], q[i], dim, keep, interpolation=interp)
                                for i in range(4)])
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, equal_nan=True)
    q = ember.tensor(g.uniform(size=(4, 2)))
    grad = func.grad(lambda xi, qi: f(xi, qi, 1).sum(), argnums=(0, 1))
    gx, gq = func.vmap(grad)(x, q)
    for i in range(4):
        for got, want in zip((gx[i], gq[i]), grad(x[i], q[i])):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    assert not _vmap.LOOPED


def test_histogram_batches_with_per_example_ranges_edges_weights_and_density():
    """Each example's own range (a constant one's widened), edges, weights and density, and
    nested vmap: one ``_histogram_rows`` call, equal to each example's histogram."""
    g = np.random.default_rng(0)
    x = ember.tensor(g.standard_normal((3, 4, 5)))
    x[1] = 0.25
    edges = ember.tensor(np.sort(g.standard_normal((3, 6)), 1))
    w = ember.tensor(g.uniform(size=(3, 4, 5)))
    calls = [(lambda xi, ei, wi: ember.histogram(xi, 4), (0, None, None)),
             (lambda xi, ei, wi: ember.histogram(xi, 3, range=(-1.0, 1.0), weight=wi,
                                                 density=True), (0, None, 0)),
             (lambda xi, ei, wi: ember.histogram(xi, ei, weight=wi), (0, 0, 0)),
             (lambda xi, ei, wi: ember.histogram(xi, ei), (None, 0, None)),
             (lambda xi, ei, wi: ember.histogram(xi, ei[0], density=True), (0, None, None))]
    _vmap.LOOPED.clear()
    for f, dims in calls:
        got = func.vmap(f, in_dims=dims)(x, edges, w)
        for i in range(3):
            want = f(*[t if d is None else t[i] for t, d in zip((x, edges, w), dims)])
            for a, b in zip(got, want):
                np.testing.assert_allclose(a[i].numpy(), b.numpy(), rtol=1e-12)
    nested = func.vmap(func.vmap(lambda r: ember.histogram(r, 3)))(x)
    for i in range(3):
        for j in range(4):
            for a, b in zip(nested, ember.histogram(x[i, j], 3)):
                np.testing.assert_allclose(a[i, j].numpy(), b.numpy(), rtol=1e-12)
    assert not _vmap.LOOPED
