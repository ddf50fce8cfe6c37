"""nn.Module system against torch.nn: state dicts, loading, hooks, containers, repr."""
import copy
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import ember
from oracle import assert_close, to_torch, torch


def _pair(build):
    """The same architecture in ember and torch, with torch's weights copied into ember."""
    t = build(torch.nn)
    e = build(ember.nn)
    sd = {k: ember.tensor(v.detach().numpy()) for k, v in t.state_dict().items()}
    e.load_state_dict(sd)
    return e, t


def mlp(nn):
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8, bias=False), nn.Tanh(),
                         nn.LayerNorm(8), nn.Linear(8, 3))


class Net:
    @staticmethod
    def build(nn):
        class N(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(10, 4, padding_idx=0)
                self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
                self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Identity()})
                self.scale = nn.Parameter(torch.ones(1) if nn is torch.nn else ember.ones(1))
                self.register_buffer("steps", (torch if nn is torch.nn else ember).zeros(1))
                self.register_buffer("tmp", (torch if nn is torch.nn else ember).zeros(2),
                                     persistent=False)

            def forward(self, idx):
                x = self.emb(idx)
                for b in self.blocks:
                    x = x + b(x).tanh()
                return self.heads["a"](self.heads["b"](x)) * self.scale
        return N()


@pytest.mark.parametrize("build", [mlp, Net.build], ids=["mlp", "net"])
def test_state_dict_keys_shapes_and_metadata_match_torch(build):
    e, t = build(ember.nn), build(torch.nn)
    es, ts = e.state_dict(), t.state_dict()
    assert list(es) == list(ts)
    assert [tuple(v.shape) for v in es.values()] == [tuple(v.shape) for v in ts.values()]
    assert dict(es._metadata) == dict(ts._metadata)
    assert [n for n, _ in e.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in e.named_modules()] == [n for n, _ in t.named_modules()]
    assert [n for n, _ in e.named_buffers()] == [n for n, _ in t.named_buffers()]


def test_loaded_mlp_matches_torch_forward_and_backward():
    e, t = _pair(mlp)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    y = np.array([0, 2, 1, 1, 0])
    le = ember.nn.functional.cross_entropy(e(ember.tensor(x)), ember.tensor(y))
    lt = torch.nn.functional.cross_entropy(t(torch.tensor(x)), torch.tensor(y))
    le.backward()
    lt.backward()
    assert_close(le, lt)
    for (n, pe), (_, pt) in zip(e.named_parameters(), t.named_parameters()):
        assert_close(pe.grad, pt.grad, rtol=1e-4, atol=1e-6, what=n)


def test_loaded_net_with_embedding_padding_matches_torch():
    e, t = _pair(Net.build)
    idx = np.array([[0, 3, 9], [2, 0, 1]])
    oe, ot = e(ember.tensor(idx)), t(torch.tensor(idx))
    assert_close(oe, ot, rtol=1e-5, atol=1e-6)
    oe.sum().backward()
    ot.sum().backward()
    assert_close(e.emb.weight.grad, t.emb.weight.grad, rtol=1e-5, atol=1e-6)


def test_load_state_dict_reports_all_problems_at_once():
    e, t = mlp(ember.nn), mlp(torch.nn)
    bad = OrderedDict((k, ember.tensor(v.numpy())) for k, v in t.state_dict().items())
    del bad["0.bias"]
    bad["extra"] = ember.zeros(1)
    bad["2.weight"] = ember.zeros(3, 3)
    tbad = OrderedDict((k, to_torch(v)) for k, v in bad.items())
    with pytest.raises(RuntimeError) as te:
        t.load_state_dict(tbad)
    with pytest.raises(RuntimeError) as ee:
        e.load_state_dict(bad)
    assert str(ee.value) == str(te.value)
    with pytest.raises(RuntimeError, match="size mismatch for 2.weight"):
        e.load_state_dict(bad, strict=False)        # shapes are checked even when not strict


def test_non_strict_load_returns_missing_and_unexpected():
    e, t = mlp(ember.nn), mlp(torch.nn)
    sd = {k: v for k, v in e.state_dict().items() if k != "5.bias"}
    sd["zzz"] = ember.zeros(1)
    tsd = {k: to_torch(v) for k, v in sd.items()}
    re_, rt = e.load_state_dict(sd, strict=False), t.load_state_dict(tsd, strict=False)
    assert (re_.missing_keys, re_.unexpected_keys) == (rt.missing_keys, rt.unexpected_keys)


def test_load_state_dict_assign_replaces_parameters():
    e = ember.nn.Linear(2, 2)
    w = ember.ones(2, 2)
    e.load_state_dict({"weight": w, "bias": ember.zeros(2)}, assign=True)
    assert e.weight.data_ptr() == w.data_ptr() and isinstance(e.weight, ember.nn.Parameter)


@pytest.mark.parametrize("build", [mlp, Net.build], ids=["mlp", "net"])
def test_repr_matches_torch(build):
    assert repr(build(ember.nn)) == repr(build(torch.nn))


def test_hooks_run_in_order_and_can_replace_values():
    for lib in (ember, torch):
        m = lib.nn.Linear(3, 2)
        calls = []
        h1 = m.register_forward_pre_hook(lambda mod, args: (calls.append("pre"),
                                                            (args[0] * 2,))[1])
        m.register_forward_hook(lambda mod, args, out: calls.append("post") or out * 0)
        m.register_forward_pre_hook(lambda mod, args, kwargs: calls.append("pre_kw"),
                                    with_kwargs=True)
        out = m(lib.ones(1, 3))
        assert calls == ["pre", "pre_kw", "post"] and float(out.abs().sum()) == 0
        h1.remove()
        calls.clear()
        m(lib.ones(1, 3))
        assert calls == ["pre_kw", "post"]


def test_full_backward_hooks_match_torch():
    seen = {}
    for lib in (ember, torch):
        m = lib.nn.Linear(3, 2)
        with (ember.no_grad() if lib is ember else torch.no_grad()):
            m.weight.copy_(lib.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]))
        log = []
        m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", go[0].tolist())))
        m.register_full_backward_hook(lambda mod, gi, go: log.append(
            ("post", [g.tolist() if g is not None else None for g in gi], go[0].tolist())))
        x = lib.ones(1, 3, requires_grad=True)
        (m(x) * lib.tensor([[1.0, 2.0]])).sum().backward()
        m(lib.ones(1, 3)).sum().backward()            # input without grad: grad_input (None,)
        seen[lib.__name__] = log
    assert seen["ember"] == seen["torch"]


def test_train_eval_zero_grad_requires_grad_and_apply():
    m = mlp(ember.nn)
    m.eval()
    assert not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    m(ember.ones(2, 4)).sum().backward()
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    names = []
    m.apply(lambda mod: names.append(type(mod).__name__))
    assert names[-1] == "Sequential" and names[0] == "Linear"


def test_to_dtype_keeps_parameter_objects():
    m = ember.nn.Linear(2, 2)
    w = m.weight
    m.double()
    assert m.weight is w and w.dtype is ember.float64 and isinstance(w, ember.nn.Parameter)
    with pytest.raises(TypeError, match="floating point"):
        m.to(ember.int64)


def test_setattr_rules_match_torch():
    for lib in (ember, torch):
        m = lib.nn.Linear(2, 2)
        with pytest.raises(TypeError):
            m.weight = lib.zeros(2, 2)          # plain tensor over a parameter
        m.bias = None
        assert "bias" in dict(m._parameters) and m.bias is None
        with pytest.raises(AttributeError):
            m.nonexistent
        m.sub = lib.nn.ReLU()
        assert "sub" in m._modules
        del m.sub
        assert "sub" not in m._modules
    q = ember.nn.Parameter(ember.ones(2))
    q.grad_fn = (ember.ones(2, requires_grad=True) * 2).grad_fn      # a non-leaf Parameter
    with pytest.raises(ValueError, match="non-leaf"):
        ember.nn.Linear(2, 2).register_parameter("w", q)


def test_containers_behave_like_torch():
    for lib in (ember, torch):
        s = lib.nn.Sequential(lib.nn.ReLU(), lib.nn.Tanh(), lib.nn.Sigmoid())
        assert type(s[1:]).__name__ == "Sequential" and len(s[1:]) == 2
        s.append(lib.nn.Identity())
        s.insert(0, lib.nn.Identity())
        assert [type(x).__name__ for x in s] == ["Identity", "ReLU", "Tanh", "Sigmoid",
                                                 "Identity"]
        del s[0]
        assert list(s._modules) == ["0", "1", "2", "3"]
        ml = lib.nn.ModuleList([lib.nn.ReLU()])
        ml += [lib.nn.Tanh()]
        assert len(ml) == 2 and type(ml[-1]).__name__ == "Tanh"
        pl = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(2)), lib.zeros(3)])
        assert [n for n, _ in pl.named_parameters()] == ["0", "1"]
        pd = lib.nn.ParameterDict({"a": lib.nn.Parameter(lib.ones(1))})
        assert list(pd.keys()) == ["a"] and len(list(pd.parameters())) == 1


def test_deepcopy_and_pickle_round_trip():
    m = mlp(ember.nn)
    x = ember.randn(2, 4)
    for c in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert_close(c(x), m(x))
        assert c[0].weight is not m[0].weight
        assert isinstance(c[0].weight, ember.nn.Parameter)


def test_shared_parameters_are_listed_once():
    for lib in (ember, torch):
        a = lib.nn.Linear(2, 2)
        s = lib.nn.Sequential(a, a)
        assert len(list(s.parameters())) == 2
        assert len(list(s.named_parameters(remove_duplicate=False))) == 4


def test_get_submodule_parameter_buffer():
    m = Net.build(ember.nn)
    assert m.get_submodule("blocks.1") is m.blocks[1]
    assert m.get_parameter("blocks.0.weight") is m.blocks[0].weight
    assert m.get_buffer("steps") is m.steps
    with pytest.raises(AttributeError):
        m.get_submodule("blocks.7")


def test_lazy_linear_infers_in_features():
    m = ember.nn.LazyLinear(3)
    out = m(ember.ones(2, 5))
    assert type(m) is ember.nn.Linear and tuple(m.weight.shape) == (3, 5)
    assert tuple(out.shape) == (2, 3)
