"""torch's top-level spellings of nn functions (ember/_aten_nn.py: aten argument order, integer
reductions, flat-weight RNNs) and the newer nn.functional samplers, against torch."""
import numpy as np
import pytest

import ember
from oracle import assert_close, same, torch

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4, 6))
IMG = RNG.standard_normal((2, 4, 5, 6))
W = RNG.standard_normal((3, 4))
K1, K3, PIX = (RNG.standard_normal(s) for s in [(3, 4, 2), (3, 6, 5), (1, 2, 4, 6)])


def _t(lib, a, grad=False):
    return lib.tensor(a, requires_grad=grad)


CALLS = {
    "same_as_F": lambda lib: [
        lib.conv1d(_t(lib, X), _t(lib, K1), None, 1, 1),
        lib.conv_transpose1d(_t(lib, X), _t(lib, np.ones((4, 2, 3)))),
        lib.adaptive_avg_pool1d(_t(lib, X), 3), lib.avg_pool1d(_t(lib, X), 2),
        lib.celu(_t(lib, X), 0.5), lib.selu(_t(lib, X)), lib.threshold(_t(lib, X), 0.1, 20.0),
        lib.hardshrink(_t(lib, X), 0.3), _t(lib, X).hardshrink(),
        lib.prelu(_t(lib, X), _t(lib, np.full(4, 0.2))), _t(lib, X).prelu(_t(lib, np.array([0.1]))),
        lib.layer_norm(_t(lib, X), (6,)), lib.group_norm(_t(lib, X), 2),
        lib.rms_norm(_t(lib, X), [6], None, 1e-5), lib.pixel_shuffle(_t(lib, IMG), 2),
        lib.pixel_unshuffle(_t(lib, PIX), 2),
        lib.channel_shuffle(_t(lib, IMG), 2), lib.cosine_similarity(_t(lib, X), _t(lib, X + 1)),
        lib.pairwise_distance(_t(lib, W), _t(lib, W * 2)), lib.pdist(_t(lib, W)),
        lib.bilinear(_t(lib, W), _t(lib, W), _t(lib, np.ones((2, 4, 4))))],
    "aten_order": lambda lib: [
        lib.dropout(_t(lib, X), 0.3, False), lib.alpha_dropout(_t(lib, X), 0.3, False),
        lib.feature_dropout(_t(lib, X), 0.0, True),
        lib.feature_alpha_dropout(_t(lib, X), 0.5, False),
        lib.batch_norm(_t(lib, X), _t(lib, np.ones(4)), None, _t(lib, np.zeros(4)),
                       _t(lib, np.ones(4)), False, 0.1, 1e-5, False),
        lib.instance_norm(_t(lib, X), None, None, None, None, True, 0.1, 1e-5, False),
        lib.embedding(_t(lib, W), lib.tensor([[0, 2], [1, 1]])),
        lib.embedding(_t(lib, W), lib.tensor([0, 2]), 2),
        lib.rrelu(_t(lib, X)), lib.max_pool1d(_t(lib, X), 2),
        lib.max_pool2d(_t(lib, IMG), 2, 1), lib.max_pool3d(_t(lib, IMG), (1, 2, 2)),
        *lib.max_pool1d_with_indices(_t(lib, X), 3, 2, 1),
        *lib.adaptive_max_pool1d(_t(lib, X), 2),
        lib.conv_tbc(_t(lib, X), _t(lib, K3),
                     _t(lib, np.arange(5.0)), 1),
        lib.nn.functional.conv_tbc(_t(lib, X), _t(lib, np.ones((1, 6, 2))),
                                   _t(lib, np.array([0., 1.])))],
    "int_reductions": lambda lib: [
        lib.kl_div(_t(lib, X), _t(lib, np.abs(X)), 2),
        lib.kl_div(_t(lib, X), _t(lib, X), 0, log_target=True),
        lib.cosine_embedding_loss(_t(lib, W), _t(lib, W + 1), lib.tensor([1, -1, 1]), 0.1, 1),
        lib.hinge_embedding_loss(_t(lib, W), _t(lib, np.sign(W)), 0.5, 0),
        lib.margin_ranking_loss(_t(lib, W[0]), _t(lib, W[1]), _t(lib, np.sign(W[2])), 0.2, 2),
        lib.poisson_nll_loss(_t(lib, W), _t(lib, np.abs(W)), True, True, 1e-8, 1),
        lib.triplet_margin_loss(_t(lib, W), _t(lib, W + 1), _t(lib, W * 2), 1.0, 2, 1e-6, True,
                                0),
        lib.binary_cross_entropy_with_logits(_t(lib, W), _t(lib, (W > 0) * 1.0), None,
                                             _t(lib, np.full(4, 2.0)), 1)],
    "default_and_unknown_reductions": lambda lib: [
        lib.kl_div(_t(lib, X), _t(lib, X), 5), lib.kl_div(_t(lib, X), _t(lib, X)),
        lib.cosine_embedding_loss(_t(lib, W), _t(lib, W + 1), lib.tensor([1, -1, 1])),
        lib.hinge_embedding_loss(_t(lib, W), _t(lib, W)),
        lib.margin_ranking_loss(_t(lib, W[0]), _t(lib, W[1]), _t(lib, W[2])),
        lib.triplet_margin_loss(_t(lib, W), _t(lib, W), _t(lib, W)),
        lib.binary_cross_entropy_with_logits(_t(lib, W), _t(lib, np.abs(W) / 3))],
}


@pytest.mark.parametrize("name", CALLS)
def test_matches_torch(name):
    same(CALLS[name])


def test_ctc_loss_int_reduction():
    lp = RNG.standard_normal((6, 2, 4))
    def f(lib):
        return lib.ctc_loss(_t(lib, lp).log_softmax(2), lib.tensor([[1, 2], [3, 3]]),
                            lib.tensor([6, 5]), lib.tensor([2, 2]), 0, 2)
    same(f)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("bidirectional, bias", [(False, True), (True, False)])
def test_flat_weight_rnns_and_cells(mode, bidirectional, bias):
    m = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN,
         "rnn_relu": lambda *a, **k: torch.nn.RNN(*a, nonlinearity="relu", **k)}[mode](
        6, 3, num_layers=2, bias=bias, bidirectional=bidirectional, batch_first=True).double()
    dirs = 1 + bidirectional
    h0 = RNG.standard_normal((2 * dirs, 2, 3))

    def run(lib):
        params = [_t(lib, p.detach().numpy(), True) for p in m._flat_weights]
        hx = [_t(lib, h0), _t(lib, h0 * 0.5)] if mode == "lstm" else _t(lib, h0)
        out = getattr(lib, mode)(_t(lib, X), hx, params, bias, 2, 0.0, False, bidirectional,
                                 True)
        sum(o.sum() for o in out).backward()
        cell = getattr(lib, mode + "_cell")(_t(lib, X[:, 0]), (hx[0][0], hx[1][0]) if
                                            mode == "lstm" else hx[0], *params[:4 if bias else 2])
        return list(out) + [p.grad for p in params] + list(cell if mode == "lstm" else [cell])
    for e, t in zip(run(ember), run(torch)):
        assert_close(e, t)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_and_affine_grid(mode, padding_mode, align_corners):
    theta = np.array([[[0.9, 0.3, 0.1], [-0.2, 1.3, 0.2]], [[1.2, 0.0, -0.4], [0.5, 0.8, 0.0]]])

    def run(lib):
        img, th = _t(lib, IMG, True), _t(lib, theta, True)
        grid = lib.nn.functional.affine_grid(th, (2, 4, 3, 7), align_corners)
        out = lib.nn.functional.grid_sample(img, grid, mode, padding_mode, align_corners)
        (out * out).sum().backward()
        return [grid, out, img.grad, th.grad if mode == "bilinear" else None]
    for e, t in zip(run(ember), run(torch)):
        assert_close(e, t)


def test_grid_sampler_3d_and_int_modes():
    vol, grid = RNG.standard_normal((1, 2, 3, 4, 5)), RNG.uniform(-1.1, 1.1, (1, 2, 3, 4, 3))
    same(lambda lib: [lib.grid_sampler(_t(lib, vol), _t(lib, grid), 0, 2, False),
                      lib.grid_sampler_3d(_t(lib, vol), _t(lib, grid), 1, 1, True),
                      lib.grid_sampler_2d(_t(lib, IMG), _t(lib, grid[0, :2, :, :, :2]), 0, 0,
                                          True),
                      lib.affine_grid_generator(_t(lib, np.eye(3, 4)[None]), [1, 1, 2, 3, 2],
                                                False)])


def test_sampler_errors():
    same(lambda lib: lib.nn.functional.grid_sample(_t(lib, IMG), _t(lib, IMG[..., :2]),
                                                   padding_mode="wrap"))
    same(lambda lib: lib.nn.functional.channel_shuffle(_t(lib, IMG), 3))
    same(lambda lib: lib.nn.functional.pdist(_t(lib, X)))


def test_pdist_norms_and_grads():
    for p in (0, 1, 1.5, 2, float("inf")):
        def run(lib):
            x = _t(lib, W, True)
            y = lib.nn.functional.pdist(x, p)
            if p == 0:          # a count: ember records no graph, torch a zero gradient
                return [y]
            y.sum().backward()
            return [y, x.grad]
        for e, t in zip(run(ember), run(torch)):
            assert_close(e, t, what=f"pdist p={p}")


def test_gumbel_softmax_and_feature_alpha_dropout():
    ember.manual_seed(0)
    logits = ember.tensor(W, requires_grad=True)
    y = ember.nn.functional.gumbel_softmax(logits, tau=0.5)
    assert_close(y.sum(-1), torch.ones(3, dtype=torch.float64))
    h = ember.nn.functional.gumbel_softmax(logits, hard=True)
    assert set(h.detach().numpy().ravel().tolist()) == {0.0, 1.0}
    assert_close(h.sum(-1), torch.ones(3, dtype=torch.float64))
    (h * ember.tensor(W)).sum().backward()
    assert logits.grad is not None and float(logits.grad.abs().sum()) > 0
    d = ember.nn.functional.feature_alpha_dropout(ember.ones(8, 16, 5), 0.5, True)
    per_channel = d.numpy().reshape(8 * 16, 5)
    assert (per_channel == per_channel[:, :1]).all()     # whole channels kept or dropped
    assert len(np.unique(per_channel)) == 2


@pytest.mark.parametrize("n, shape, kernel, out", [
    (2, (2, 3, 9, 7), 2, (4, 5)), (2, (3, 8, 8), (3, 2), None), (3, (1, 2, 6, 7, 5), 2, 3)])
def test_fractional_max_pool_with_fixed_samples(n, shape, kernel, out):
    x = RNG.standard_normal(shape)
    nb = shape[0] if len(shape) == n + 2 else 1
    u = RNG.uniform(0, 1, (nb, shape[-n - 1], n))

    def run(lib):
        t = _t(lib, x, True)
        f = getattr(lib.nn.functional, f"fractional_max_pool{n}d")
        y, i = f(t, kernel, output_size=out, output_ratio=None if out else (0.5, 0.5),
                 return_indices=True, _random_samples=_t(lib, u))
        (y * y).sum().backward()
        return [y, i, t.grad]
    for e, t in zip(run(ember), run(torch)):
        assert_close(e, t)
    y = ember.nn.functional.fractional_max_pool2d(ember.ones(1, 1, 5, 5), 2, output_ratio=0.5)
    assert tuple(y.shape) == (1, 1, 2, 2)


def test_linear_cross_entropy():
    x, w, b = RNG.standard_normal((4, 3)), RNG.standard_normal((5, 3)), RNG.standard_normal(5)
    w3 = RNG.standard_normal((5, 2, 3))
    same(lambda lib: [
        lib.nn.functional.linear_cross_entropy(_t(lib, x), _t(lib, w), lib.tensor([0, 4, 2, 1])),
        lib.nn.functional.linear_cross_entropy(_t(lib, x), _t(lib, w), lib.tensor([0, 4, 2, 1]),
                                               linear_bias=_t(lib, b), reduction="sum",
                                               label_smoothing=0.1, ignore_index=2),
        lib.nn.functional.linear_cross_entropy(_t(lib, x), _t(lib, w3),
                                               lib.tensor([[0, 1]] * 4), reduction="none")])
