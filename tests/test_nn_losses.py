"""The losses of nn.functional and nn against torch: values and gradients in float64, every
reduction, and torch's argument checks (same exception type and message)."""
import numpy as np
import pytest

import ember
from oracle import assert_close, same, torch

rng = np.random.default_rng(0)
X, X2, X3 = (rng.standard_normal((5, 4)) for _ in range(3))
POS = rng.uniform(0.2, 3.0, (5, 4))
COUNTS = rng.integers(0, 5, (5, 4)).astype(np.float64)
SIGN = np.where(rng.uniform(size=(5,)) > 0.5, 1.0, -1.0)
SIGN4 = np.where(rng.uniform(size=(5, 4)) > 0.5, 1.0, -1.0)
LABELS = rng.integers(0, 2, (5, 4)).astype(np.float64)
CLS = np.array([0, 3, 1, 1, 2])
ML = np.array([[3, 0, -1, 1], [1, -1, 0, 0], [0, 1, 2, 3], [-1, 0, 0, 0], [2, 2, -1, 0]])
K = rng.standard_normal((3, 4, 2, 5))                           # (N, C, d1, d2)
KT = rng.integers(0, 4, (3, 2, 5))
KP = np.exp(rng.standard_normal((3, 4, 2, 5)))
KP /= KP.sum(1, keepdims=True)
W4 = rng.uniform(0.5, 2.0, (4,))

SPECIAL = {"CLS": CLS, "CLS0": CLS[:1], "ML": ML, "KT": KT, "W4": W4, "SIGN": SIGN, "SIGN4": SIGN4,
           "LABELS": LABELS, "KT_IGN": np.where(KT == 2, -100, KT)}

# (function name, differentiable inputs, kwargs); strings in kwargs name SPECIAL arrays
CASES = [
    ("poisson_nll_loss", [X, COUNTS], {}),
    ("poisson_nll_loss", [POS, COUNTS], {"log_input": False, "full": True}),
    ("poisson_nll_loss", [X, COUNTS], {"full": True, "reduction": "none"}),
    ("gaussian_nll_loss", [X, X2, POS], {}),
    ("gaussian_nll_loss", [X, X2, POS[:, :1]], {"full": True, "reduction": "sum"}),
    ("gaussian_nll_loss", [X, X2, POS[:, 0]], {"reduction": "none"}),
    ("gaussian_nll_loss", [X, X2, POS * 1e-7], {"eps": 1e-6}),
    ("margin_ranking_loss", [X[:, 0], X2[:, 0], SIGN], {"margin": 0.3}),
    ("margin_ranking_loss", [X, X2, SIGN4], {"reduction": "none"}),
    ("hinge_embedding_loss", [X], {"target": "SIGN4", "margin": 0.5}),
    ("hinge_embedding_loss", [X], {"target": "SIGN4", "reduction": "sum"}),
    ("soft_margin_loss", [X], {"target": "SIGN4"}),
    ("soft_margin_loss", [X], {"target": "SIGN4", "reduction": "none"}),
    ("hinge_embedding_loss", [X], {"target": "SIGN4", "size_average": False}),
    ("multilabel_soft_margin_loss", [X], {"target": "LABELS"}),
    ("multilabel_soft_margin_loss", [X], {"target": "LABELS", "weight": "W4",
                                          "reduction": "none"}),
    ("multi_margin_loss", [X], {"target": "CLS"}),
    ("multi_margin_loss", [X], {"target": "CLS", "p": 2, "margin": 0.7, "weight": "W4",
                                "reduction": "none"}),
    ("multi_margin_loss", [X[0]], {"target": "CLS0", "reduction": "none"}),
    ("multilabel_margin_loss", [X], {"target": "ML"}),
    ("multilabel_margin_loss", [X], {"target": "ML", "reduction": "none"}),
    ("cosine_embedding_loss", [X, X2], {"target": "SIGN", "margin": 0.1}),
    ("cosine_embedding_loss", [X, X2], {"target": "SIGN", "reduction": "none"}),
    ("triplet_margin_loss", [X, X2, X3], {}),
    ("triplet_margin_loss", [X, X2, X3], {"p": 1, "margin": 2.0, "swap": True,
                                          "reduction": "none"}),
    ("triplet_margin_with_distance_loss", [X, X2, X3], {"margin": 2.0, "swap": True}),
    ("cross_entropy", [K], {"target": "KT"}),
    ("cross_entropy", [K], {"target": "KT_IGN", "weight": "W4", "reduction": "none"}),
    ("cross_entropy", [K], {"target": "KT", "weight": "W4", "label_smoothing": 0.2}),
    ("cross_entropy", [K], {"target": "KT_IGN", "label_smoothing": 0.1, "reduction": "sum"}),
    ("cross_entropy", [K, KP], {"weight": "W4", "label_smoothing": 0.3}),
    ("cross_entropy", [K, KP], {"reduction": "none"}),
]


def _kw(kwargs, lib):
    return {k: lib.tensor(SPECIAL[v]) if isinstance(v, str) and v in SPECIAL else v
            for k, v in kwargs.items()}


def _run_both(call, arrays):
    outs, grads = [], []
    for lib in (ember, torch):
        ins = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = call(lib, *ins)
        # a non-uniform upstream gradient checks the 'none' reduction's backward fully
        (out * lib.tensor(np.linspace(0.5, 1.5, out.numel()).reshape(tuple(out.shape)))
         ).sum().backward()
        outs.append(out)
        grads.append([t.grad for t in ins])
    assert_close(outs[0], outs[1], rtol=1e-9, atol=1e-12)
    assert_close(grads[0], grads[1], rtol=1e-9, atol=1e-12, what="grad")


@pytest.mark.parametrize("name,arrays,kwargs", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_loss_matches_torch(name, arrays, kwargs):
    _run_both(lambda lib, *ins: getattr(lib.nn.functional, name)(*ins, **_kw(kwargs, lib)),
              arrays)


# ---- CTC --------------------------------------------------------------------------------------

T, N, C = 14, 4, 6
LOGITS = rng.standard_normal((T, N, C))
TARGETS = np.array([[1, 2, 2, 3, 5], [4, 4, 4, 1, 1], [5, 1, 0, 0, 0], [3, 2, 1, 4, 0]])
IN_LENS, TG_LENS = [14, 11, 9, 6], [5, 3, 2, 4]


def _ctc(targets, in_lens, tg_lens, logits=LOGITS, **kw):
    def call(lib, x):
        t = lib.tensor(targets)
        return lib.nn.functional.ctc_loss(x.log_softmax(-1), t, in_lens, tg_lens, **kw)
    _run_both(call, [logits])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_padded_targets(reduction):
    _ctc(TARGETS, IN_LENS, TG_LENS, reduction=reduction)


def test_ctc_concatenated_targets_tensor_lengths_and_blank():
    blank = 2
    tg = np.where(TARGETS == blank, 0, TARGETS)
    flat = np.concatenate([tg[i, :n] for i, n in enumerate(TG_LENS)])
    def call(lib, x):
        return lib.nn.functional.ctc_loss(x.log_softmax(-1), lib.tensor(flat),
                                          lib.tensor(IN_LENS), lib.tensor(TG_LENS), blank=blank)
    _run_both(call, [LOGITS])


def test_ctc_zero_infinity_and_empty_target():
    # sample 0 cannot be aligned (5 labels, 3 of them repeats, in 4 frames): infinite loss
    _ctc(TARGETS, [4, 11, 9, 6], [5, 3, 0, 4], zero_infinity=True, reduction="none")


def test_ctc_unbatched_and_module():
    _run_both(lambda lib, x: lib.nn.CTCLoss(reduction="none")(
        x.log_softmax(-1), lib.tensor(TARGETS[0]), (12,), (5,)), [LOGITS[:, 0]])


@pytest.mark.parametrize("case", [
    lambda lib: lib.nn.functional.ctc_loss(lib.zeros(5, 2, 3), lib.zeros(2, 3).long(), [6, 5],
                                           [2, 2]),
    lambda lib: lib.nn.functional.ctc_loss(lib.zeros(5, 2, 3), lib.zeros(2, 1).long(), [5, 5],
                                           [2, 2]),
    lambda lib: lib.nn.functional.ctc_loss(lib.zeros(5, 2, 3), lib.zeros(2, 3).long(), [5, 5],
                                           [2, 2], blank=3),
    lambda lib: lib.nn.functional.ctc_loss(lib.zeros(5, 2, 3), lib.zeros(2, 3).long(), [5, 5],
                                           [2, 2], reduction="avg"),
], ids=["input_too_long", "targets_too_short", "blank", "reduction"])
def test_ctc_errors_match_torch(case):
    same(case)


# ---- errors -----------------------------------------------------------------------------------

class lib_ones:          # a weight built in whichever library runs the case
    def __init__(self, *shape):
        self.shape = shape


F_ERRORS = [
    ("poisson_nll_loss", lambda lib: (lib.ones(2), lib.ones(2)), {"reduction": "avg"}),
    ("gaussian_nll_loss", lambda lib: (lib.ones(2, 3), lib.ones(2, 3), lib.ones(3, 2)), {}),
    ("gaussian_nll_loss", lambda lib: (lib.ones(2), lib.ones(2), -lib.ones(2)), {}),
    ("gaussian_nll_loss", lambda lib: (lib.ones(2), lib.ones(2), lib.ones(2)),
     {"reduction": "x"}),
    ("margin_ranking_loss", lambda lib: (lib.ones(2), lib.ones(2, 1), lib.ones(2)), {}),
    ("multi_margin_loss", lambda lib: (lib.ones(2, 3), lib.tensor([0, 1])), {"p": 3}),
    ("multi_margin_loss", lambda lib: (lib.ones(2, 3), lib.tensor([0, 1])),
     {"weight": lib_ones(2, 3)}),
    ("multi_margin_loss", lambda lib: (lib.ones(2, 3), lib.tensor([0, 3])), {}),
    ("multi_margin_loss", lambda lib: (lib.ones(2, 3), lib.tensor([0, 1, 1])), {}),
    ("multilabel_margin_loss", lambda lib: (lib.ones(2, 3), lib.tensor([[0, 1, 1]])), {}),
    ("multilabel_soft_margin_loss", lambda lib: (lib.ones(2, 3), lib.ones(2, 3)),
     {"reduction": "x"}),
    ("cosine_embedding_loss", lambda lib: (lib.ones(2, 3), lib.ones(2, 3), lib.ones(2, 1)), {}),
    ("cosine_embedding_loss", lambda lib: (lib.ones(3), lib.ones(3), lib.ones(2)), {}),
    ("triplet_margin_loss", lambda lib: (lib.ones(2, 3), lib.ones(3), lib.ones(2, 3)), {}),
    ("triplet_margin_loss", lambda lib: (lib.ones(2, 3), lib.ones(2, 3), lib.ones(2, 3)),
     {"margin": 0.0}),
    ("triplet_margin_with_distance_loss", lambda lib: (lib.ones(2, 3),) * 3,
     {"margin": -1.0}),
    ("triplet_margin_with_distance_loss", lambda lib: (lib.ones(2, 3),) * 3,
     {"reduction": "avg"}),
    ("cross_entropy", lambda lib: (lib.ones(2, 4, 3), lib.zeros(2, 4).long()), {}),
    ("cross_entropy", lambda lib: (lib.ones(2, 4, 3), lib.zeros(3, 3).long()), {}),
    ("cross_entropy", lambda lib: (lib.ones(2, 4, 3), lib.ones(2, 4, 2)), {}),
]


@pytest.mark.parametrize("name,args,kwargs", F_ERRORS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(F_ERRORS)])
def test_loss_errors_match_torch(name, args, kwargs):
    def call(lib):
        kw = {k: lib.ones(*v.shape) if isinstance(v, lib_ones) else v for k, v in kwargs.items()}
        return getattr(lib.nn.functional, name)(*args(lib), **kw)
    same(call, match=".")
    te, ee = _error(call, torch), _error(call, ember)
    assert str(ee) == str(te), f"ember: {ee}\ntorch: {te}"


def _error(fn, lib):
    try:
        fn(lib)
    except Exception as e:      # noqa: BLE001
        return e
    raise AssertionError("no error")


# ---- modules ----------------------------------------------------------------------------------

MODULES = [
    ("PoissonNLLLoss", {"log_input": False, "full": True}, [POS, COUNTS]),
    ("GaussianNLLLoss", {"full": True, "reduction": "sum"}, [X, X2, POS]),
    ("MarginRankingLoss", {"margin": 0.2}, [X[:, 0], X2[:, 0], SIGN]),
    ("HingeEmbeddingLoss", {"margin": 2.0}, [X, "SIGN4"]),
    ("SoftMarginLoss", {"reduction": "sum"}, [X, "SIGN4"]),
    ("MultiLabelSoftMarginLoss", {"weight": "W4"}, [X, LABELS]),
    ("MultiLabelMarginLoss", {}, [X, "ML"]),
    ("MultiMarginLoss", {"p": 2, "margin": 0.5, "weight": "W4"}, [X, "CLS"]),
    ("CosineEmbeddingLoss", {"margin": 0.2, "reduction": "none"}, [X, X2, SIGN]),
    ("TripletMarginLoss", {"margin": 0.5, "p": 3.0, "swap": True}, [X, X2, X3]),
    ("TripletMarginWithDistanceLoss", {"margin": 0.5}, [X, X2, X3]),
    ("CrossEntropyLoss", {"label_smoothing": 0.1}, [K, "KT"]),
]


@pytest.mark.parametrize("cls,kwargs,inputs", MODULES, ids=[m[0] for m in MODULES])
def test_loss_modules_match_torch(cls, kwargs, inputs):
    def call(lib, *ins):
        it = iter(ins)
        args = [lib.tensor(SPECIAL[a]) if isinstance(a, str) else next(it) for a in inputs]
        return getattr(lib.nn, cls)(**_kw(kwargs, lib))(*args)
    _run_both(call, [a for a in inputs if not isinstance(a, str)])
    assert repr(getattr(ember.nn, cls)()) == repr(getattr(torch.nn, cls)())


@pytest.mark.parametrize("case", [
    lambda lib: lib.nn.MultiMarginLoss(p=3),
    lambda lib: lib.nn.MultiMarginLoss(weight=lib.ones(2, 2)),
    lambda lib: lib.nn.TripletMarginLoss(margin=0),
    lambda lib: lib.nn.TripletMarginWithDistanceLoss(margin=-1.0),
])
def test_loss_module_constructor_errors(case):
    same(case, match="margin|p ==|weight")


def test_ctc_float32_long_sequences():
    r = np.random.default_rng(3)
    t, n, c, s = 60, 8, 12, 20
    x = r.standard_normal((t, n, c)).astype(np.float32)
    tg, il, tl = r.integers(1, c, (n, s)), r.integers(45, t + 1, n), r.integers(5, s + 1, n)
    res = []
    for lib in (ember, torch):
        xt = lib.tensor(x, requires_grad=True)
        loss = lib.nn.functional.ctc_loss(xt.log_softmax(-1), lib.tensor(tg), lib.tensor(il),
                                          lib.tensor(tl))
        loss.backward()
        res.append((loss, xt.grad))
    assert_close(res[0], res[1], rtol=1e-5, atol=1e-6)


def test_cross_entropy_label_smoothing_bounds_and_fused_op():
    """label_smoothing: torch refuses only values above 1; with class indices and no weight it
    is the cross_entropy_loss op's argument (one node, AddBackward0 as torch's)."""
    import torch
    x = np.random.default_rng(0).standard_normal((5, 7))
    t = np.array([0, 6, -100, 2, 6])
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0. Got: 1.5"):
        ember.nn.functional.cross_entropy(ember.tensor(x), ember.tensor(t), label_smoothing=1.5)
    for ls in (-0.1, 0.0, 0.3, 1.0):
        for reduction in ("mean", "sum", "none"):
            xe, xt = ember.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
            le = ember.nn.functional.cross_entropy(xe, ember.tensor(t), reduction=reduction,
                                                   label_smoothing=ls)
            lt = torch.nn.functional.cross_entropy(xt, torch.tensor(t), reduction=reduction,
                                                   label_smoothing=ls)
            le.sum().backward()
            lt.sum().backward()
            np.testing.assert_allclose(le.detach().numpy(), lt.detach().numpy(), rtol=1e-12)
            np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)
            assert le.grad_fn.name() == lt.grad_fn.name()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nll_loss_numpy_backward_is_the_ember_ops_one(reduction, dtype):
    """Without create_graph nll_loss's input gradient is made in NumPy; it is the ember-op
    backward's bit for bit, and torch's: ignored targets, weights, 1-D and 4-D inputs, every
    target ignored."""
    import torch
    cases = [(X, CLS, None), (X, np.where(CLS == 1, -100, CLS), W4), (K, KT, None),
             (K, np.where(KT == 2, -100, KT), W4), (X[0], CLS[0], None),
             (X, np.full(5, -100), None)]
    for x, t, w in cases:
        x, w = x.astype(dtype), None if w is None else w.astype(dtype)
        g = rng.standard_normal(x.shape[:1] + x.shape[2:] if reduction == "none" and x.ndim > 1
                                else ()).astype(dtype)
        grads = []
        for lib, graph in ((ember, False), (ember, True), (torch, False)):
            xt = lib.tensor(x, requires_grad=True)
            loss = lib.nn.functional.nll_loss(xt, lib.tensor(t), None if w is None else
                                              lib.tensor(w), reduction=reduction)
            (gx,) = lib.autograd.grad(loss, xt, lib.tensor(g), create_graph=graph)
            grads.append(gx.detach().numpy())
        np.testing.assert_array_equal(grads[0], grads[1])
        np.testing.assert_allclose(grads[0], grads[2], rtol=1e-6, atol=1e-7)
