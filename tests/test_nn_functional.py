"""nn.functional and activation/loss modules against torch: values and gradients."""
import numpy as np
import pytest

import ember
from oracle import assert_close, torch

rng = np.random.default_rng(0)
X = rng.standard_normal((4, 6)) * 2
P = rng.uniform(0.05, 0.95, (4, 6))
Y = rng.uniform(0, 1, (4, 6))
T = np.array([0, 5, 2, 5])

# (function name, inputs as arrays (differentiable first), kwargs)
CASES = [
    ("relu", [X], {}), ("relu6", [X * 4], {}), ("leaky_relu", [X], {"negative_slope": 0.2}),
    ("elu", [X], {}), ("selu", [X], {}), ("celu", [X], {"alpha": 0.5}), ("gelu", [X], {}),
    ("gelu", [X], {"approximate": "tanh"}), ("silu", [X], {}), ("mish", [X], {}),
    ("softplus", [X], {}), ("softplus", [X * 20], {"beta": 2.0, "threshold": 5.0}),
    ("softsign", [X], {}), ("softshrink", [X], {}), ("hardshrink", [X], {}),
    ("tanhshrink", [X], {}), ("hardtanh", [X], {}), ("hardsigmoid", [X * 2], {}),
    ("hardswish", [X * 2], {}), ("logsigmoid", [X * 10], {}), ("sigmoid", [X], {}),
    ("tanh", [X], {}), ("glu", [X], {}), ("softmax", [X], {"dim": 1}),
    ("log_softmax", [X], {"dim": 0}), ("softmin", [X], {"dim": 1}),
    ("threshold", [X], {"threshold": 0.5, "value": -1.0}),
    (lambda F, x, w, b: F.layer_norm(x, (6,), w, b), [X, Y[0], P[0]], {}),
    (lambda F, x, w: F.rms_norm(x, (6,), w, 1e-6), [X, Y[0]], {}),
    ("linear", [X, Y, P[:, 0]], {}),
    ("mse_loss", [X, Y], {}), ("l1_loss", [X, Y], {"reduction": "sum"}),
    ("smooth_l1_loss", [X, Y], {"beta": 0.5}), ("huber_loss", [X, Y], {"delta": 0.7}),
    ("binary_cross_entropy", [P, Y], {}),
    ("binary_cross_entropy_with_logits", [X, Y], {}),
    ("binary_cross_entropy_with_logits", [X, Y], {"pos_weight": "P0"}),
    ("kl_div", [np.log(P), Y], {"reduction": "batchmean"}),
    ("cross_entropy", [X], {"target": "T"}),
    ("cross_entropy", [X], {"target": "T", "label_smoothing": 0.1}),
    ("cross_entropy", [X], {"target": "T", "weight": "P0", "label_smoothing": 0.2}),
    ("cross_entropy", [X, P / P.sum(1, keepdims=True)], {}),
    ("nll_loss", [np.log(P)], {"target": "T", "reduction": "sum"}),
]


def _kw(kwargs, lib):
    special = {"T": T, "P0": P[0]}
    return {k: lib.tensor(special[v]) if isinstance(v, str) and v in special else v
            for k, v in kwargs.items()}


@pytest.mark.parametrize("name,arrays,kwargs", CASES,
                         ids=[f"{getattr(c[0], '__name__', c[0])}-{i}"
                              for i, c in enumerate(CASES)])
def test_functional_matches_torch(name, arrays, kwargs):
    outs, grads = [], []
    for lib in (ember, torch):
        ins = [lib.tensor(a, requires_grad=True) for a in arrays]
        fn = getattr(lib.nn.functional, name) if isinstance(name, str) else \
            (lambda *a, **k: name(lib.nn.functional, *a, **k))
        out = fn(*ins, **_kw(kwargs, lib))
        out.sum().backward()
        outs.append(out)
        grads.append([t.grad for t in ins])
    # NOTE: rtol 1e-7: torch's float64 hardsigmoid backward uses a float32 constant 1/6.
    assert_close(outs[0], outs[1], rtol=1e-7, atol=1e-10, what=str(name))
    assert_close(grads[0], grads[1], rtol=1e-7, atol=1e-10, what=f"grad {name}")


@pytest.mark.parametrize("cls,args", [
    ("ReLU", ()), ("LeakyReLU", (0.1,)), ("ELU", ()), ("GELU", ()), ("Softplus", (2.0, 10.0)),
    ("Hardtanh", (-2.0, 2.0)), ("Softmax", (1,)), ("LogSoftmax", (1,)), ("PReLU", ()),
    ("Threshold", (0.1, 20.0)), ("SiLU", ()), ("Tanh", ()), ("Identity", ()),
    ("Flatten", ()), ("LayerNorm", (6,)), ("Dropout", (0.3,)), ("Softmax2d", ())])
def test_modules_match_torch_in_eval_and_repr(cls, args):
    x = (X.reshape(4, 6, 1, 1) if cls == "Softmax2d" else X).astype(np.float32)
    e, t = getattr(ember.nn, cls)(*args).eval(), getattr(torch.nn, cls)(*args).eval()
    assert repr(e) == repr(t)
    assert_close(e(ember.tensor(x)), t(torch.tensor(x)), what=cls)


def test_dropout_trains_with_scaling_and_mask():
    ember.manual_seed(0)
    x = ember.ones(1000, 100)
    y = ember.nn.functional.dropout(x, 0.3)
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.7) < 0.01
    assert_close(y[y != 0], ember.full((int((y != 0).sum()),), 1 / 0.7))


def test_one_hot_and_embedding():
    t = torch.tensor([0, 3, 1])
    assert_close(ember.nn.functional.one_hot(ember.tensor([0, 3, 1])),
                 torch.nn.functional.one_hot(t))
    assert_close(ember.nn.functional.one_hot(ember.tensor([0, 1]), 4),
                 torch.nn.functional.one_hot(torch.tensor([0, 1]), 4))


@pytest.mark.parametrize("name", ["xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
                                  "kaiming_normal_", "orthogonal_", "trunc_normal_"])
def test_init_distributions_have_torchs_scale(name):
    w = ember.empty(256, 128)
    getattr(ember.nn.init, name)(w)
    tw = torch.empty(256, 128)
    getattr(torch.nn.init, name)(tw)
    assert abs(w.std().item() / tw.std().item() - 1) < 0.05
    if name == "orthogonal_":
        assert_close((w.T @ w), ember.eye(128), rtol=1e-4, atol=1e-4)


def test_calculate_gain_matches_torch():
    for nl, p in [("relu", None), ("tanh", None), ("leaky_relu", 0.2), ("selu", None),
                  ("conv2d", None), ("sigmoid", None)]:
        assert ember.nn.init.calculate_gain(nl, p) == pytest.approx(
            torch.nn.init.calculate_gain(nl, p))
