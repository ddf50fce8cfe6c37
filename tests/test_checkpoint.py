"""ember.utils.checkpoint against plain runs and against torch.utils.checkpoint."""
import warnings

import numpy as np
import pytest
from oracle import torch

import ember
import torch.utils.checkpoint as tck
from ember.utils import checkpoint as eck


def _model(lib, seed=0):
    lib.manual_seed(seed)
    return lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.Dropout(0.3), lib.nn.Tanh(),
                             lib.nn.Linear(8, 8), lib.nn.ReLU(), lib.nn.Dropout(0.2),
                             lib.nn.Linear(8, 2))


def _grads(lib, m, x):
    return [p.grad.numpy().copy() for p in m.parameters()] + [x.grad.numpy().copy()]


def _run(lib, ck, use_reentrant, mode):
    """Gradients of a dropout model, plain (ck=None) or checkpointed in one of a few ways."""
    m = _model(lib)
    x = lib.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    lib.manual_seed(7)
    if ck is None:
        y = m(x)
    elif mode == "whole":
        y = ck.checkpoint(m, x, use_reentrant=use_reentrant)
    elif mode == "kwargs":
        def f(a, scale, *, shift):
            return m(a * scale) + shift
        if use_reentrant:
            y = ck.checkpoint(lambda a, s: f(a, s, shift=1.0), x, 2.0, use_reentrant=True)
        else:
            y = ck.checkpoint(f, x, 2.0, shift=1.0, use_reentrant=False)
        y = y - 1.0
        x2 = x
        del x2
    elif mode == "nested":
        def inner(a):
            return ck.checkpoint(m[3:], a, use_reentrant=use_reentrant)
        y = ck.checkpoint(lambda a: inner(m[:3](a)), x, use_reentrant=use_reentrant)
    elif mode == "sequential":
        y = ck.checkpoint_sequential(m, 3, x, use_reentrant=use_reentrant)
    lib.rand(10)                    # the RNG moves on between forward and backward
    (y.pow(2).sum() if mode != "kwargs" else (y / 2).pow(2).sum()).backward()
    return _grads(lib, m, x)


def _plain_kwargs(lib):
    m = _model(lib)
    x = lib.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    lib.manual_seed(7)
    y = m(x * 2.0) + 1.0 - 1.0
    (y / 2).pow(2).sum().backward()
    return _grads(lib, m, x)


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("mode", ["whole", "kwargs", "nested", "sequential"])
def test_gradients_identical_to_plain_run_with_dropout(use_reentrant, mode):
    want = _plain_kwargs(ember) if mode == "kwargs" else _run(ember, None, None, mode)
    got = _run(ember, eck, use_reentrant, mode)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_matches_torch_without_dropout(use_reentrant):
    res = []
    for lib, ck in ((ember, eck), (torch, tck)):
        lib.manual_seed(0)
        m = lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.Tanh(), lib.nn.Linear(8, 2))
        if lib is torch:                    # ember's weights, so the numbers can be compared
            src = list(_ember_weights())
            with torch.no_grad():
                for p, a in zip(m.parameters(), src):
                    p.copy_(torch.from_numpy(a))
        else:
            src = [p.detach().numpy() for p in m.parameters()]
            _ember_weights.cache = src
        x = lib.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
                       requires_grad=True)
        ck.checkpoint(m, x, use_reentrant=use_reentrant).pow(2).sum().backward()
        res.append(_grads(lib, m, x))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _ember_weights():
    return _ember_weights.cache


def test_non_reentrant_supports_autograd_grad_and_closures():
    w = ember.nn.Parameter(ember.tensor([1.0, 2.0]))
    x = ember.tensor([3.0, 4.0], requires_grad=True)
    y = eck.checkpoint(lambda a: (a * w).exp().sum(), x, use_reentrant=False)
    gx, gw = ember.autograd.grad(y, (x, w))
    tw = torch.tensor([1.0, 2.0], requires_grad=True)
    tx = torch.tensor([3.0, 4.0], requires_grad=True)
    ty = tck.checkpoint(lambda a: (a * tw).exp().sum(), tx, use_reentrant=False)
    tgx, tgw = torch.autograd.grad(ty, (tx, tw))
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gw.numpy(), tgw.numpy(), rtol=1e-6)
    assert w.grad is None


def test_parameters_get_grads_when_no_input_requires_grad():
    # torch: the reentrant variant warns and gives the parameters nothing; the other works
    for lib, ck in ((ember, eck), (torch, tck)):
        lib.manual_seed(0)
        lin = lib.nn.Linear(2, 2)
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
            y = ck.checkpoint(lin, lib.ones(1, 2), use_reentrant=True)
        assert not y.requires_grad
        ck.checkpoint(lin, lib.ones(1, 2), use_reentrant=False).sum().backward()
        assert lin.weight.grad is not None


def test_non_tensor_outputs_and_context_fn():
    calls = []

    class Ctx:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            calls.append(self.name)

        def __exit__(self, *exc):
            return False

    x = ember.ones(2, requires_grad=True)
    out = eck.checkpoint(lambda a: (a * 3, "tag", a.sum()), x, use_reentrant=False,
                         context_fn=lambda: (Ctx("fwd"), Ctx("recompute")))
    assert out[1] == "tag" and calls == ["fwd"]
    (out[0].sum() + out[2]).backward()
    assert calls == ["fwd", "recompute"] and x.grad.tolist() == [4.0, 4.0]


def test_warnings_and_errors_as_torch():
    x = ember.ones(2, requires_grad=True)
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        eck.checkpoint(lambda a: a * 2, x)
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        eck.checkpoint_sequential([lambda a: a * 2], 1, x)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: foo"):
        eck.checkpoint(lambda a: a, x, use_reentrant=True, foo=1)
    with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
        eck.checkpoint(lambda a: a, x, use_reentrant=True, context_fn=lambda: (None, None))
    with pytest.raises(ValueError, match="determinism_check should be one of"):
        eck.checkpoint(lambda a: a, x, use_reentrant=False, determinism_check="bad")
    with pytest.raises(ValueError, match="Unexpected keyword arguments: foo"):
        eck.checkpoint_sequential([lambda a: a * 2], 1, x, use_reentrant=True, foo=1)
    # a recomputation that changes shape is caught (torch: CheckpointError)
    n = [2]

    def grow(a):
        n[0] += 1
        return a.sum() * ember.ones(n[0])
    y = eck.checkpoint(grow, x, use_reentrant=False)
    with pytest.raises(eck.CheckpointError, match="different metadata"):
        y.sum().backward()
    n[0] = 2
    y = eck.checkpoint(grow, x, use_reentrant=False, determinism_check="none")
    with pytest.raises(RuntimeError):
        y.sum().backward()            # unchecked: the gradient has the wrong shape
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eck.checkpoint(lambda a: a * 2, x, use_reentrant=False).sum().backward()


def test_autocast_state_is_replayed():
    w = ember.nn.Parameter(ember.ones(3, 3))
    x = ember.ones(2, 3, requires_grad=True)
    dtypes = []

    def f(a):
        r = a @ w
        dtypes.append(r.dtype)
        return r
    with ember.autocast("cpu"):
        y = eck.checkpoint(f, x, use_reentrant=False)
    y.float().sum().backward()
    assert dtypes == [ember.bfloat16, ember.bfloat16]
    assert w.grad.dtype is ember.float32


def test_non_reentrant_closure_over_non_leaf():
    # the gradient stops at the captured h and reaches w once through h's own history
    res = []
    for lib, ck in ((ember, eck), (torch, tck)):
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        h = w * 3
        x = lib.tensor([0.5, 1.5], requires_grad=True)
        ck.checkpoint(lambda a: (a * h * w).sum(), x, use_reentrant=False).backward()
        res.append((w.grad.numpy(), x.grad.numpy()))
        assert h.grad_fn is not None and not h.is_leaf
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b)


def _deep_mlp(width=32, depth=32):
    # each layer keeps two activations (the Linear output LayerNorm saves and Tanh's output),
    # so checkpointing every layer can halve what the plain run keeps
    ember.manual_seed(0)
    nn = ember.nn
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.Tanh())
                           for _ in range(depth)])


def _train_step(model, x, mode):
    if mode == "plain":
        y = model(x)
    elif mode == "sequential":
        y = eck.checkpoint_sequential(model, 6, x, use_reentrant=False)
    else:
        y = x
        for layer in model:
            y = eck.checkpoint(layer, y, use_reentrant=mode == "per-layer-reentrant")
    y.pow(2).mean().backward()


def _peak_and_grads(model, x, mode):
    import tracemalloc
    model.zero_grad()
    x.grad = None
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        _train_step(model, x, mode)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, [p.grad.numpy().copy() for p in model.parameters()] + [x.grad.numpy().copy()]


def test_checkpointing_a_32_layer_mlp_cuts_peak_memory():
    # numpy reports its buffers to tracemalloc, so the peak counts every saved activation
    modes = ("plain", "sequential", "per-layer", "per-layer-reentrant")
    warm = _deep_mlp(depth=6)                     # lazy imports must not count in a peak
    for mode in modes:
        _train_step(warm, ember.randn(4, 32, requires_grad=True), mode)
    model = _deep_mlp()
    x = ember.randn(512, 32, requires_grad=True)
    runs = {mode: _peak_and_grads(model, x, mode) for mode in modes}
    plain_peak, plain_grads = runs["plain"]
    assert plain_peak > 32 * 2 * x.numel() * 4          # two float32 activations a layer
    for mode in modes[1:]:
        peak, grads = runs[mode]
        # checkpoint_sequential keeps 6 segment inputs: >= 40% lower, as the issue asks. A
        # checkpoint around every layer still keeps each layer's input (one of the ~2.5
        # activations a plain layer saves), so its bound is looser: ~38% lower with the NumPy
        # layer_norm (EMBER_NO_C=1), ~42% with the C kernels.
        bound = 0.6 if mode == "sequential" else 0.65
        assert peak <= bound * plain_peak, f"{mode}: peak {peak:,} B vs plain {plain_peak:,} B"
        for a, b in zip(grads, plain_grads):
            np.testing.assert_array_equal(a, b)
