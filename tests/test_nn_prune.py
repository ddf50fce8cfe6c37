"""nn.utils.prune against torch: masks, reparametrization, containers, remove, errors."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")
import torch.nn.utils.prune  # noqa: E402,F401
R = np.random.default_rng(0)


def _modules(make):
    """the same module (same weights) in ember and torch"""
    e, t = make(ember), make(torch)
    with torch.no_grad():
        for (n, p), (_, q) in zip(t.named_parameters(), e.named_parameters()):
            x = R.standard_normal(tuple(p.shape)).astype(np.float32)
            p.copy_(torch.tensor(x))
            with ember.no_grad():
                q.copy_(ember.tensor(x))
    return e, t


def _same(e, t, names=("weight", "weight_mask", "weight_orig")):
    for n in names:
        np.testing.assert_array_equal(getattr(e, n).detach().numpy(),
                                      getattr(t, n).detach().numpy(), err_msg=n)
    assert sorted(e.state_dict()) == sorted(t.state_dict())
    assert sorted(n for n, _ in e.named_parameters()) == sorted(n for n, _ in t.named_parameters())
    assert sorted(n for n, _ in e.named_buffers()) == sorted(n for n, _ in t.named_buffers())


CONV = lambda L: L.nn.Conv2d(3, 6, 3)  # noqa: E731
LIN = lambda L: L.nn.Linear(7, 5)      # noqa: E731


@pytest.mark.parametrize("amount", [0, 3, 0.3, 1.0, 35])
def test_l1_unstructured(amount):
    e, t = _modules(LIN)
    for L, m in ((ember, e), (torch, t)):
        L.nn.utils.prune.l1_unstructured(m, "weight", amount=amount)
    _same(e, t)
    x = R.standard_normal((4, 7)).astype(np.float32)
    ye, yt = e(ember.tensor(x)), t(torch.tensor(x))
    np.testing.assert_allclose(ye.detach().numpy(), yt.detach().numpy(), rtol=1e-6, atol=1e-6)
    ye.sum().backward(), yt.sum().backward()
    np.testing.assert_allclose(e.weight_orig.grad.numpy(), t.weight_orig.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("n", [1, 2, float("inf"), -float("inf")])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("amount", [2, 0.5])
def test_ln_structured(n, dim, amount):
    e, t = _modules(CONV)
    for L, m in ((ember, e), (torch, t)):
        L.nn.utils.prune.ln_structured(m, "weight", amount=amount, n=n, dim=dim)
    _same(e, t)


def test_importance_scores_and_containers():
    e, t = _modules(CONV)
    scores = R.standard_normal((6, 3, 3, 3)).astype(np.float32)
    for L, m in ((ember, e), (torch, t)):
        P = L.nn.utils.prune
        P.l1_unstructured(m, "weight", amount=20, importance_scores=L.tensor(scores))
        P.ln_structured(m, "weight", amount=1, n=1, dim=0)
        P.l1_unstructured(m, "weight", amount=0.2)
        P.custom_from_mask(m, "bias", L.tensor([1, 0, 1, 1, 0, 1]))
        P.identity(m, "bias")
        hooks = list(m._forward_pre_hooks.values())
        assert [type(h).__name__ for h in hooks] == ["PruningContainer", "PruningContainer"]
        assert [type(p).__name__ for p in hooks[0]] == ["L1Unstructured", "LnStructured",
                                                        "L1Unstructured"] and len(hooks[0]) == 3
    _same(e, t, ("weight", "weight_mask", "bias", "bias_mask"))
    for L, m in ((ember, e), (torch, t)):
        assert L.nn.utils.prune.is_pruned(L.nn.Sequential(m))
        L.nn.utils.prune.remove(m, "weight")
    _same(e, t, ("weight",))
    assert isinstance(e.weight, ember.nn.Parameter) and not hasattr(e, "weight_orig")


def test_global_unstructured_and_prune_method():
    (e1, t1), (e2, t2) = _modules(LIN), _modules(CONV)
    s = R.standard_normal((5, 7)).astype(np.float32)
    for L, a, b in ((ember, e1, e2), (torch, t1, t2)):
        P = L.nn.utils.prune
        P.global_unstructured([(a, "weight"), (b, "weight"), (b, "bias")],
                              pruning_method=P.L1Unstructured, amount=0.4,
                              importance_scores={(a, "weight"): L.tensor(s)})
    _same(e1, t1), _same(e2, t2)
    x = R.standard_normal((4, 6)).astype(np.float32)
    for method in ("L1Unstructured(amount=5)", "LnStructured(amount=1, n=2, dim=1)"):
        outs = [eval(f"L.nn.utils.prune.{method}", {"L": L}).prune(L.tensor(x)).numpy()
                for L in (ember, torch)]
        np.testing.assert_array_equal(*outs)


def test_random_methods_prune_the_right_count():
    ember.manual_seed(0)
    m = ember.nn.Conv2d(3, 8, 3)
    P = ember.nn.utils.prune
    P.random_unstructured(m, "weight", amount=0.25)
    assert int((m.weight_mask == 0).sum()) == round(0.25 * m.weight.numel())
    P.random_structured(m, "weight", amount=3, dim=0)
    channels = (m.weight_mask.sum(dim=(1, 2, 3)) == 0).sum()
    assert int(channels) >= 3 and int((m.weight_mask == 0).sum()) >= 3 * 27
    P.random_structured(m, "bias", amount=0, dim=0) if False else None
    with pytest.raises(ValueError, match="multidimensional"):
        P.random_structured(m, "bias", amount=2, dim=0)


@pytest.mark.parametrize("call, err", [
    ("P.l1_unstructured(m, 'weight', amount=1.5)", ValueError),
    ("P.l1_unstructured(m, 'weight', amount=-1)", ValueError),
    ("P.l1_unstructured(m, 'weight', amount='a')", TypeError),
    ("P.l1_unstructured(m, 'weight', amount=36)", ValueError),
    ("P.ln_structured(m, 'bias', amount=1, n=2, dim=0)", ValueError),
    ("P.ln_structured(m, 'weight', amount=1, n=2, dim=2)", IndexError),
    ("P.remove(m, 'weight')", ValueError),
    ("P.custom_from_mask(m, 'bias', L.ones(3))", AssertionError),
    ("P.l1_unstructured(m, 'weight', 1, importance_scores=L.ones(2))", AssertionError),
    ("P.global_unstructured([(m, 'weight')], P.LnStructured, amount=1, n=1, dim=0)", TypeError),
    ("P.global_unstructured(3, P.L1Unstructured, amount=1)", TypeError),
])
def test_errors_match_torch(call, err):
    msgs = []
    for L in (ember, torch):
        m, P = L.nn.Linear(7, 5), L.nn.utils.prune
        with pytest.raises(err) as info:
            eval(call, {"L": L, "m": m, "P": P})
        msgs.append(str(info.value).replace("torch", "").replace("ember", ""))
        assert "weight_orig" not in dict(m.named_parameters())     # a failed prune undoes
    assert msgs[0] == msgs[1]
