"""ember.autocast and ember.amp.GradScaler against torch's on the CPU."""
import math
import warnings

import numpy as np
import pytest
from oracle import torch

import ember
import ember.nn.functional as EF
import torch.nn.functional as TF


def _lib(t):
    return (ember, EF) if isinstance(t, ember.Tensor) else (torch, TF)


# one case per policy class: lower, fp32 (CPU list), CUDA-only fp32 (stays as is on the CPU),
# promote, and composites that must keep their dtype though built from matmul/conv
CASES = {
    "matmul": (lambda a, b: a @ b, (3, 4), (4, 5)),
    "addmm": (lambda c, a, b: _lib(a)[0].addmm(c, a, b), (3, 5), (3, 4), (4, 5)),
    "linear": (lambda a, w: _lib(a)[1].linear(a, w), (3, 4), (5, 4)),
    "conv2d": (lambda a, w: _lib(a)[1].conv2d(a, w), (1, 2, 4, 4), (3, 2, 3, 3)),
    "sdpa": (lambda q: _lib(q)[1].scaled_dot_product_attention(q, q, q), (1, 2, 4, 8)),
    "prelu": (lambda a, w: _lib(a)[1].prelu(a, w), (3, 4), (1,)),
    "softmax": (lambda a: a.softmax(-1), (3, 4)),
    "log_softmax_of_mm": (lambda a, b: (a @ b).log_softmax(-1), (3, 4), (4, 5)),
    "exp": (lambda a: a.exp(), (3, 4)),
    "pow": (lambda a: a.pow(2), (3, 4)),
    "sum": (lambda a: a.sum(), (3, 4)),
    "cumsum": (lambda a: a.cumsum(0), (3, 4)),
    "prod": (lambda a: a.prod(), (3, 4)),
    "layer_norm": (lambda a: _lib(a)[1].layer_norm(a, (4,)), (3, 4)),
    "mse_loss": (lambda a, b: _lib(a)[1].mse_loss(a @ b, a @ b), (3, 4), (4, 4)),
    "cross_entropy": (lambda a, b: _lib(a)[1].cross_entropy(
        a @ b, _lib(a)[0].tensor([0, 1, 2])), (3, 4), (4, 4)),
    "bce": (lambda a: _lib(a)[1].binary_cross_entropy(a.sigmoid(), a.sigmoid().detach()),
            (3, 4)),
    "avg_pool2d": (lambda a: _lib(a)[1].avg_pool2d(a, 2), (1, 2, 4, 4)),
    "adaptive_avg_pool2d": (lambda a: _lib(a)[1].adaptive_avg_pool2d(a, 3), (1, 2, 5, 5)),
    "interpolate": (lambda a: _lib(a)[1].interpolate(a, scale_factor=2, mode="bilinear"),
                    (1, 2, 4, 4)),
    "bilinear": (lambda a, b, w: _lib(a)[1].bilinear(a, b, w), (2, 3), (2, 4), (5, 3, 4)),
    "cat_mixed": (lambda a, b: _lib(a)[0].cat([a, a @ b]), (3, 3), (3, 3)),
    "stack": (lambda a, b: _lib(a)[0].stack([a, b]), (3, 3), (3, 3)),
}


def _run(lib, fn, arrays, in_dtype, **kw):
    ts = [lib.tensor(a).to(getattr(lib, in_dtype)) for a in arrays]
    with lib.autocast("cpu", **kw):
        try:
            return str(fn(*ts).dtype)
        except RuntimeError as e:
            return "RuntimeError: " + str(e).split(": ")[-1][:40]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("fast", ["bfloat16", "float16"])
def test_autocast_dtypes_match_torch(name, dtype, fast):
    fn, *shapes = CASES[name]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = _run(ember, fn, arrays, dtype, dtype=getattr(ember, fast))
    want = _run(torch, fn, arrays, dtype, dtype=getattr(torch, fast))
    assert got.split(": ")[-1] == want.split(": ")[-1]


def _mlp(lib, seed=0):
    lib.manual_seed(seed)
    return lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.ReLU(), lib.nn.LayerNorm(8),
                             lib.nn.Linear(8, 3))


def test_small_model_matches_torch():
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    y = np.array([0, 1, 2, 1, 0])
    res = {}
    for lib in (ember, torch):
        m = _mlp(lib)
        with torch.no_grad():
            for pe, pt in zip(_mlp(ember).parameters(), m.parameters()):
                if lib is torch:
                    pt.copy_(torch.from_numpy(pe.detach().numpy()))
        with lib.autocast("cpu"):
            out = m(lib.tensor(x))
            loss = lib.nn.functional.cross_entropy(out, lib.tensor(y))
        loss.backward()
        res[lib.__name__] = (out, loss, [p.grad for p in m.parameters()])
    (eo, el, eg), (to, tl, tg) = res["ember"], res["torch"]
    assert str(eo.dtype) == str(to.dtype) == "torch.bfloat16"
    assert str(el.dtype) == str(tl.dtype) == "torch.float32"
    for a, b in zip(eg, tg):
        assert str(a.dtype) == str(b.dtype) == "torch.float32"
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0.05, atol=0.02)
    np.testing.assert_allclose(float(el), float(tl.detach()), rtol=1e-2)


def test_nesting_state_and_decorator():
    assert not ember.is_autocast_enabled("cpu")
    with ember.autocast("cpu"):
        assert ember.is_autocast_enabled("cpu") and not ember.is_autocast_enabled("cuda")
        with ember.autocast("cpu", dtype=ember.float16):
            assert ember.get_autocast_dtype("cpu") is ember.float16
            with ember.autocast("cpu", enabled=False):
                assert (ember.ones(2, 2) @ ember.ones(2, 2)).dtype is ember.float32
            assert (ember.ones(2, 2) @ ember.ones(2, 2)).dtype is ember.float16
        assert ember.get_autocast_dtype("cpu") is ember.bfloat16
    assert not ember.is_autocast_enabled("cpu")
    from ember._ops.dispatch import hooks
    assert hooks.autocast is None         # code outside autocast pays nothing

    @ember.autocast("cpu")
    def f(a):
        return a @ a
    assert f(ember.ones(2, 2)).dtype is ember.bfloat16
    assert not ember.is_autocast_enabled("cpu")


def test_region_exits_on_exception():
    with pytest.raises(ValueError):
        with ember.autocast("cpu"):
            raise ValueError
    assert not ember.is_autocast_enabled("cpu")


def test_bad_arguments_warn_or_raise_as_torch():
    with pytest.raises(ValueError, match="device_type"):
        ember.autocast(0)
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'tpu'"):
        ember.autocast("tpu")
    with pytest.warns(UserWarning, match="target dtype is not supported"):
        with ember.autocast("cpu", dtype=ember.float64):
            assert not ember.is_autocast_enabled("cpu")


def test_weight_cast_is_cached_within_region():
    from ember.amp import autocast_mode
    w = ember.nn.Parameter(ember.ones(3, 3))
    x = ember.ones(3, 3)
    with ember.autocast("cpu"):
        y1, y2 = x @ w, x @ w
        assert len(autocast_mode._cache) == 1
        assert y1.grad_fn.next_functions[1][0] is y2.grad_fn.next_functions[1][0]
        with ember.autocast("cpu"):
            pass
        assert len(autocast_mode._cache) == 1     # only the outermost exit clears it
        (y1 + y2).float().sum().backward()
    assert not autocast_mode._cache
    assert w.grad.dtype is ember.float32 and float(w.grad[0, 0]) == 6.0
    with ember.autocast("cpu", cache_enabled=False):
        x @ w
        assert not autocast_mode._cache


def test_custom_fwd_bwd():
    seen = {}

    class Sq(ember.autograd.Function):
        @staticmethod
        @ember.amp.custom_fwd(device_type="cpu", cast_inputs=ember.float32)
        def forward(ctx, x):
            seen["fwd"] = ember.is_autocast_enabled("cpu")
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @ember.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            seen["bwd"] = ember.is_autocast_enabled("cpu")
            return 2 * ctx.saved_tensors[0] * g

    x = ember.ones(2, dtype=ember.bfloat16, requires_grad=True)
    with ember.autocast("cpu"):
        y = Sq.apply(x)
    y.sum().backward()
    assert y.dtype is ember.float32 and seen == {"fwd": False, "bwd": False}
    assert x.grad.dtype is ember.bfloat16


# ---- GradScaler -------------------------------------------------------------------------------

OPTIMS = ["SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta",
          "Rprop", "ASGD"]


try:
    from ember.nn.utils import clip_grad_norm_ as _ember_clip
except ImportError:         # nn.utils arrives on another branch
    _ember_clip = None


def _clip_grad_norm_(lib, params, max_norm):
    if lib is torch:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    if _ember_clip is not None:
        return _ember_clip(params, max_norm)
    # clip_grad_norm_'s arithmetic, on the unscaled grads
    total = sum(float(p.grad.double().pow(2).sum()) for p in params) ** 0.5
    coef = min(max_norm / (total + 1e-6), 1.0)
    for p in params:
        p.grad.mul_(coef)


def _scaler_run(lib, opt_name, inf_steps, clip, state=None):
    lib.manual_seed(0)
    w = lib.nn.Parameter(lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)))
    opt = getattr(lib.optim, opt_name)([w], lr=0.01)
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=3)
    if state is not None:
        scaler.load_state_dict(state)
    x = lib.tensor(np.arange(6, dtype=np.float32).reshape(3, 2) / 6)
    scales, skipped = [], []
    for i in range(10):
        opt.zero_grad()
        loss = (w @ x).pow(2).sum()
        if i in inf_steps:
            loss = loss * float("inf") if i % 2 else loss * float("nan")
        scaler.scale(loss).backward()
        if clip:
            scaler.unscale_(opt)
            _clip_grad_norm_(lib, [w], 0.5)
        before = w.detach().clone()
        scaler.step(opt)
        scaler.update()
        skipped.append(bool((w.detach() == before).all()))
        scales.append(scaler.get_scale())
    return scales, skipped, w.detach().numpy(), scaler.state_dict()


@pytest.mark.parametrize("opt_name", OPTIMS)
@pytest.mark.parametrize("clip", [False, True])
def test_grad_scaler_matches_torch(opt_name, clip):
    infs = {2, 3, 7}
    es, ek, ew, ed = _scaler_run(ember, opt_name, infs, clip)
    ts, tk, tw, td = _scaler_run(torch, opt_name, infs, clip)
    assert es == ts
    assert ek == tk and [i for i, s in enumerate(ek) if s] == sorted(infs)
    assert ed == td
    np.testing.assert_allclose(ew, tw, rtol=1e-5, atol=1e-6)


def test_grad_scaler_state_dict_round_trip():
    state = {"scale": 8.0, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 2,
             "_growth_tracker": 1}
    es, _, _, ed = _scaler_run(ember, "SGD", {4}, False, dict(state))
    ts, _, _, td = _scaler_run(torch, "SGD", {4}, False, dict(state))
    assert es == ts and ed == td


def test_grad_scaler_disabled_and_errors():
    w = ember.nn.Parameter(ember.ones(2))
    opt = ember.optim.SGD([w], lr=0.1)
    off = ember.amp.GradScaler("cpu", enabled=False)
    loss = (w * 2).sum()
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    loss.backward()
    off.step(opt)
    off.update()
    assert w.tolist() == [0.8, 0.8] or np.allclose(w.tolist(), 0.8)
    s = ember.amp.GradScaler("cpu")
    with pytest.raises(AssertionError, match="_scale is None"):
        s.step(opt)
    s.scale((w * 2).sum()).backward()
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        s.unscale_(opt)
    s.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        s.step(opt)
    with pytest.raises(RuntimeError, match="source state dict is empty"):
        s.load_state_dict({})
    with pytest.raises(AssertionError, match="growth factor"):
        ember.amp.GradScaler("cpu", growth_factor=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not ember.amp.GradScaler("cuda").is_enabled() or math.isfinite(1.0)


def test_grad_scaler_scales_iterables():
    s = ember.amp.GradScaler("cpu", init_scale=4.0)
    a, b = s.scale([ember.ones(1), (ember.ones(1) * 2,)])
    assert float(a) == 4.0 and float(b[0]) == 8.0


def test_inplace_ops_are_not_autocast_like_torch():
    out = []
    for lib in (ember, torch):
        a = lib.ones(2, 2) * 0.1
        with lib.autocast("cpu"):
            a.addmm_(lib.full((2, 3), 1 / 3), lib.full((3, 2), 1 / 3))
        out.append((str(a.dtype), a[0, 0].item()))
    # (float32 sums in any order: a bfloat16 product would be ~1e-3 off)
    assert out[0][0] == out[1][0] and out[0][1] == pytest.approx(out[1][1], rel=1e-6)


class _TinyTransformer(ember.nn.Module):
    """Token + learned position embeddings, a 2-layer encoder, a linear head."""

    def __init__(self, vocab, d=32, seq=8):
        super().__init__()
        nn = ember.nn
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(ember.randn(seq, d))
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.enc(self.tok(x) + self.pos))


def _train_tiny_transformer(amp, steps=45, vocab=12, noise=0.2):
    """Learn y[t] = x[t-1] with 20% of labels replaced at random, so the loss has a floor
    (~0.92 nats) to compare at rather than a value near zero. Returns the mean of the last
    10 training losses and the dtype of the logits."""
    ember.manual_seed(0)
    rng = np.random.default_rng(0)
    model = _TinyTransformer(vocab)
    opt = ember.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        x = rng.integers(0, vocab, (16, 8))
        y = np.roll(x, 1, axis=1)
        flip = rng.random(y.shape) < noise
        y[flip] = rng.integers(0, vocab, flip.sum())
        with ember.autocast("cpu", dtype=ember.bfloat16, enabled=amp):
            logits = model(ember.tensor(x))
            loss = EF.cross_entropy(logits.reshape(-1, vocab), ember.tensor(y).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 2.4                      # ~log(12) at the start: it really learned
    return float(np.mean(losses[-10:])), logits.dtype


def test_mixed_precision_training_reaches_float32_loss():
    loss32, dt32 = _train_tiny_transformer(amp=False)
    loss16, dt16 = _train_tiny_transformer(amp=True)
    assert dt32 is ember.float32 and dt16 is ember.bfloat16
    assert loss32 < 1.1, f"float32 run did not train: final loss {loss32:.3f}"
    assert abs(loss16 - loss32) <= 0.02 * loss32, (loss16, loss32)
