"""Default initialisation of every layer and every ``nn.init`` function draws from torch's
distribution: a two-sample Kolmogorov-Smirnov test of ember's sample against torch's, at fixed
seeds, on samples of at least ``MIN_SAMPLES`` values (issue #5)."""
import math

import numpy as np
import pytest

import ember
from oracle import torch

MIN_SAMPLES = 6000
P_MIN = 1e-3            # both samples come from one distribution: p < 1e-3 one time in 1000


def ks_2samp(a, b):
    """(D, p): the two-sample KS statistic and its asymptotic two-sided p-value.

    D is the largest gap between the two empirical CDFs, evaluated at every sample point
    (ties handled by ``searchsorted(side="right")``). p uses Kolmogorov's limit distribution
    with Stephens' small-sample correction (Numerical Recipes, ``kstwo``).
    """
    a, b = np.sort(np.ravel(a)), np.sort(np.ravel(b))
    pts = np.concatenate([a, b])
    d = np.max(np.abs(np.searchsorted(a, pts, side="right") / a.size
                      - np.searchsorted(b, pts, side="right") / b.size))
    ne = a.size * b.size / (a.size + b.size)
    lam = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * d
    return d, _kolmogorov_q(lam)


def _kolmogorov_q(lam):
    """P(K > lam) for the Kolmogorov distribution: 2 sum_k (-1)^(k-1) exp(-2 k^2 lam^2)."""
    if lam < 0.2:
        return 1.0
    k = np.arange(1, 101)
    return float(min(1.0, max(0.0, 2 * np.sum((-1.0) ** (k - 1) * np.exp(-2 * k * k * lam ** 2)))))


def test_ks_helper_is_calibrated():
    rng = np.random.default_rng(0)
    same = [ks_2samp(rng.normal(size=2000), rng.normal(size=3000))[1] for _ in range(200)]
    # under the null the p-values are ~uniform: about 10% fall below 0.1
    assert 0.04 < np.mean(np.array(same) < 0.1) < 0.18
    d, p = ks_2samp(rng.normal(size=5000), rng.normal(0.1, 1, size=5000))
    assert p < 1e-4 and 0.02 < d < 0.08
    assert ks_2samp(rng.uniform(-1, 1, 5000), rng.normal(0, 0.577, 5000))[1] < 1e-4
    assert ks_2samp([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == (0.0, 1.0)


def _assert_same_distribution(e, t, what):
    e, t = np.ravel(e).astype(np.float64), np.ravel(t).astype(np.float64)
    assert e.size == t.size, f"{what}: {e.size} values vs torch's {t.size}"
    if np.ptp(t) == 0:                          # a constant init (zeros, ones, 0.25)
        np.testing.assert_array_equal(e, t, err_msg=what)
        return
    d, p = ks_2samp(e, t)
    assert p > P_MIN, (f"{what}: KS D={d:.4f} p={p:.2e} over {e.size} values "
                       f"(ember mean {e.mean():.4g} std {e.std():.4g}, "
                       f"torch mean {t.mean():.4g} std {t.std():.4g})")


def _collect(lib, make, seed, cap=1000):
    """{name: values} of parameters and buffers pooled over enough fresh instances (at most
    ``cap``) that the smallest one has ``MIN_SAMPLES`` values."""
    lib.manual_seed(seed)
    pooled = {}
    for _ in range(cap):
        m = make(lib.nn)
        for name, p in list(m.named_parameters()) + list(m.named_buffers()):
            if p.dtype is (ember.int64 if lib is ember else torch.int64):
                continue                                  # num_batches_tracked
            pooled.setdefault(name, []).append(p.detach().numpy().ravel().copy())
        if min(sum(v.size for v in vs) for vs in pooled.values()) >= MIN_SAMPLES:
            break
    return {k: np.concatenate(v) for k, v in pooled.items()}


LAYERS = {
    "Linear": lambda nn: nn.Linear(96, 64),
    "Linear-narrow": lambda nn: nn.Linear(3, 7),
    "Bilinear": lambda nn: nn.Bilinear(12, 9, 40),
    "Conv1d": lambda nn: nn.Conv1d(8, 32, 5),
    "Conv2d": lambda nn: nn.Conv2d(6, 32, 3, groups=2),
    "Conv3d": lambda nn: nn.Conv3d(4, 16, (2, 3, 3)),
    "ConvTranspose1d": lambda nn: nn.ConvTranspose1d(8, 24, 4),
    "ConvTranspose2d": lambda nn: nn.ConvTranspose2d(12, 8, 3, groups=4),
    "ConvTranspose3d": lambda nn: nn.ConvTranspose3d(4, 6, 3),
    "Embedding": lambda nn: nn.Embedding(500, 16, padding_idx=3),
    "EmbeddingBag": lambda nn: nn.EmbeddingBag(400, 16),
    "RNN": lambda nn: nn.RNN(10, 24, num_layers=2, nonlinearity="relu"),
    "LSTM": lambda nn: nn.LSTM(10, 20, bidirectional=True, proj_size=8),
    "GRU": lambda nn: nn.GRU(12, 16, num_layers=2, batch_first=True),
    "RNNCell": lambda nn: nn.RNNCell(10, 24),
    "LSTMCell": lambda nn: nn.LSTMCell(10, 24),
    "GRUCell": lambda nn: nn.GRUCell(10, 24),
    "MultiheadAttention": lambda nn: nn.MultiheadAttention(32, 4),
    "MultiheadAttention-kdim": lambda nn: nn.MultiheadAttention(32, 4, kdim=12, vdim=20,
                                                                add_bias_kv=True),
    "TransformerEncoderLayer": lambda nn: nn.TransformerEncoderLayer(32, 4, 64),
    "LayerNorm": lambda nn: nn.LayerNorm((4, 25)),
    "RMSNorm": lambda nn: nn.RMSNorm(50),
    "GroupNorm": lambda nn: nn.GroupNorm(4, 100),
    "BatchNorm1d": lambda nn: nn.BatchNorm1d(100),
    "BatchNorm2d": lambda nn: nn.BatchNorm2d(100, momentum=None),
    "InstanceNorm2d-affine": lambda nn: nn.InstanceNorm2d(100, affine=True,
                                                           track_running_stats=True),
    "PReLU": lambda nn: nn.PReLU(),
    "PReLU-channels": lambda nn: nn.PReLU(64, init=0.1),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_default_init_matches_torch(name):
    e, t = _collect(ember, LAYERS[name], 0), _collect(torch, LAYERS[name], 0)
    assert sorted(e) == sorted(t)
    for key in t:
        _assert_same_distribution(e[key][:t[key].size], t[key][:e[key].size], f"{name}.{key}")


def test_embedding_padding_row_is_zero():
    m = ember.nn.Embedding(50, 8, padding_idx=3)
    assert m.weight[3].abs().sum().item() == 0 and m.weight[4].abs().sum().item() > 0


# name -> (shape, kwargs); every function with the modes and gains that change its math
INITS = [
    ("uniform_", (128, 64), {}),
    ("uniform_", (128, 64), dict(a=-3.0, b=0.5)),
    ("normal_", (128, 64), dict(mean=1.5, std=0.2)),
    ("trunc_normal_", (128, 64), {}),
    ("trunc_normal_", (128, 64), dict(mean=0.5, std=2.0, a=-1.0, b=3.0)),
    ("trunc_normal_", (128, 64), dict(std=0.02, a=-0.04, b=0.04)),
    ("xavier_uniform_", (128, 64), {}),
    ("xavier_uniform_", (32, 16, 3, 3), dict(gain=math.sqrt(2))),
    ("xavier_normal_", (128, 64), {}),
    ("xavier_normal_", (16, 32, 5), dict(gain=5 / 3)),
    ("kaiming_uniform_", (128, 64), {}),
    ("kaiming_uniform_", (128, 64), dict(a=math.sqrt(5))),
    ("kaiming_uniform_", (32, 16, 3, 3), dict(mode="fan_out", nonlinearity="relu")),
    ("kaiming_uniform_", (128, 64), dict(nonlinearity="tanh")),
    ("kaiming_normal_", (128, 64), {}),
    ("kaiming_normal_", (128, 64), dict(a=0.2, mode="fan_out")),
    ("kaiming_normal_", (32, 16, 3, 3), dict(nonlinearity="selu")),
    ("kaiming_normal_", (128, 64), dict(nonlinearity="linear", mode="fan_in")),
    ("orthogonal_", (128, 64), {}),
    ("orthogonal_", (48, 160), dict(gain=2.0)),
    ("orthogonal_", (32, 8, 3, 3), {}),
]


@pytest.mark.parametrize("fn,shape,kw", INITS, ids=lambda v: str(v).replace(" ", ""))
def test_init_function_matches_torch(fn, shape, kw):
    vals = {}
    for lib in (ember, torch):
        lib.manual_seed(1)
        w = lib.empty(*shape)
        assert getattr(lib.nn.init, fn)(w, **kw) is w
        vals[lib.__name__] = w.numpy().copy()
    _assert_same_distribution(vals["ember"], vals["torch"], f"{fn}{shape} {kw}")
    if fn == "trunc_normal_":
        lo, hi = kw.get("a", -2.0), kw.get("b", 2.0)
        assert lo <= vals["ember"].min() and vals["ember"].max() <= hi
    if fn == "orthogonal_":
        q = vals["ember"].reshape(shape[0], -1).astype(np.float64)
        gram = q @ q.T if q.shape[0] < q.shape[1] else q.T @ q
        np.testing.assert_allclose(gram, kw.get("gain", 1.0) ** 2 * np.eye(len(gram)),
                                   atol=1e-5)


def test_init_generator_argument_is_reproducible():
    for fn in ("uniform_", "normal_", "xavier_uniform_", "kaiming_normal_", "orthogonal_",
               "trunc_normal_"):
        a, b = ember.empty(16, 8), ember.empty(16, 8)
        getattr(ember.nn.init, fn)(a, generator=ember.Generator().manual_seed(5))
        getattr(ember.nn.init, fn)(b, generator=ember.Generator().manual_seed(5))
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=fn)


@pytest.mark.parametrize("sparsity", [0.1, 0.5])
def test_sparse_matches_torch(sparsity):
    vals = {}
    for lib in (ember, torch):
        lib.manual_seed(2)
        w = lib.empty(100, 120)
        lib.nn.init.sparse_(w, sparsity, std=0.05)
        vals[lib.__name__] = w.numpy().copy()
    e, t = vals["ember"], vals["torch"]
    # exactly ceil(sparsity * rows) zeros in every column, as torch
    np.testing.assert_array_equal((e == 0).sum(0), (t == 0).sum(0))
    assert ((e == 0).sum(0) == math.ceil(sparsity * 100)).all()
    _assert_same_distribution(e[e != 0][:t[t != 0].size], t[t != 0], f"sparse_({sparsity})")


@pytest.mark.parametrize("fn,shape,kw", [
    ("eye_", (5, 7), {}), ("eye_", (6, 3), {}),
    ("dirac_", (6, 4, 3), {}), ("dirac_", (4, 6, 3, 3), {}), ("dirac_", (8, 2, 3, 3), dict(groups=2)),
    ("dirac_", (3, 3, 2, 4, 5), {}),
    ("constant_", (4, 5), dict(val=0.3)), ("ones_", (3, 2), {}), ("zeros_", (3, 2), {}),
])
def test_deterministic_inits_equal_torch(fn, shape, kw):
    e, t = ember.full(shape, 7.0), torch.full(shape, 7.0)
    getattr(ember.nn.init, fn)(e, **kw)
    getattr(torch.nn.init, fn)(t, **kw)
    np.testing.assert_array_equal(e.numpy(), t.numpy())


def test_init_errors_match_torch():
    cases = [("xavier_uniform_", (5,), {}, ValueError, "fewer than 2 dimensions"),
             ("kaiming_normal_", (4, 4), dict(mode="fan_avg"), ValueError, "Mode fan_avg"),
             ("kaiming_uniform_", (4, 4), dict(nonlinearity="swish"), ValueError,
              "Unsupported nonlinearity swish"),
             ("orthogonal_", (5,), {}, ValueError, "2 or more dimensions"),
             ("eye_", (2, 2, 2), {}, ValueError, "Only tensors with 2 dimensions"),
             ("dirac_", (2, 2), {}, ValueError, "Only tensors with 3, 4, or 5 dimensions")]
    for fn, shape, kw, exc, msg in cases:
        for lib in (ember, torch):
            with pytest.raises(exc, match=msg):
                getattr(lib.nn.init, fn)(lib.empty(*shape), **kw)
