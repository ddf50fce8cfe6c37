"""ember.fx: symbolic tracing, graph editing, generated code, Interpreter/Transformer, ShapeProp,
replace_pattern, wrap, leaf modules; torch.fx as the oracle for the generated code."""
import copy
import operator

import numpy as np
import pytest
import torch

import ember
from ember import fx
from ember.fx.passes.shape_prop import ShapeProp


def _net(T):
    nn = T.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU())
            self.head = nn.Linear(8, 3)
            self.scale = nn.Parameter(T.ones(3))

        def forward(self, x):
            h = self.body(x)
            a, b = h.split(4, dim=1)
            h = T.cat([T.relu(a), b], 1)
            return self.head(h).view(x.shape[0], -1) * self.scale + 1
    T.manual_seed(0)
    return Net()


def _same(a, b, tol=1e-6):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def test_generated_code_and_graph_match_torch_fx():
    for make in (lambda T: T.nn.Sequential(T.nn.Linear(2, 2), T.nn.ReLU()), _net):
        ours, theirs = fx.symbolic_trace(make(ember)), torch.fx.symbolic_trace(make(torch))
        assert ours.code.strip() == theirs.code.strip()
        assert str(ours.graph).strip() == str(theirs.graph).strip()


def test_graph_module_computes_the_module():
    m = _net(ember)
    gm = fx.symbolic_trace(m)
    x = ember.randn(5, 4)
    _same(gm(x), m(x))
    assert type(gm).__name__ == "Net" and "class Net(torch.nn.Module)" in gm.print_readable(False)
    assert set(gm.state_dict()) == set(m.state_dict())


def test_replace_every_relu_with_gelu_by_editing_nodes():
    m = _net(ember)
    gm = fx.symbolic_trace(m)
    mods = dict(gm.named_modules())
    for n in list(gm.graph.nodes):
        relu = (n.op == "call_module" and isinstance(mods[n.target], ember.nn.ReLU)) or \
            (n.op == "call_function" and n.target is ember.relu)
        if relu:
            with gm.graph.inserting_after(n):
                g = gm.graph.call_function(ember.nn.functional.gelu, n.args)
            n.replace_all_uses_with(g)
            gm.graph.erase_node(n)
            if n.op == "call_module":
                assert gm.delete_submodule(n.target)
    gm.graph.lint()
    gm.recompile()
    assert "relu" not in gm.code and gm.code.count("torch.nn.functional.gelu") == 3

    def gelu_net(x):            # the same network with GELU, written out
        F = ember.nn.functional
        h = F.gelu(m.body[2](F.gelu(m.body[0](x))))
        a, b = h.split(4, dim=1)
        return m.head(ember.cat([F.gelu(a), b], 1)) * m.scale + 1
    x = ember.randn(6, 4)
    _same(gm(x), gelu_net(x))
    assert not any(isinstance(s, ember.nn.ReLU) for s in gm.modules())


def test_shape_prop_shapes_equal_the_meta_rules_and_torch():
    m, tm = _net(ember), _net(torch)
    gm, tgm = fx.symbolic_trace(m), torch.fx.symbolic_trace(tm)
    ShapeProp(gm).propagate(ember.randn(2, 4))
    torch.fx.passes.shape_prop.ShapeProp(tgm).propagate(torch.randn(2, 4))
    real = {n.name: n.meta.get("tensor_meta") for n in gm.graph.nodes}
    want = {n.name: n.meta.get("tensor_meta") for n in tgm.graph.nodes}
    for name, t in want.items():
        if hasattr(t, "shape"):
            assert tuple(real[name].shape) == tuple(t.shape), name
            assert str(real[name].dtype) == str(t.dtype)
    meta_gm = copy.deepcopy(gm).to("meta")
    ShapeProp(meta_gm).propagate(ember.empty(2, 4, device="meta"))
    for n in meta_gm.graph.nodes:
        if "tensor_meta" in n.meta and hasattr(n.meta["tensor_meta"], "shape"):
            assert tuple(n.meta["tensor_meta"].shape) == tuple(real[n.name].shape), n.name
            assert n.meta["val"].device.type == "meta"


def test_graph_editing_api():
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(operator.add, (x, 1))
    g.output(y)
    with g.inserting_after(x):
        z = g.create_node("call_function", operator.mul, (x, 3))
    y.replace_input_with(x, z)
    assert [n.name for n in g.nodes] == ["x", "mul", "add", "output"]
    assert list(x.users) == [z] and y.all_input_nodes == [z]
    with pytest.raises(RuntimeError, match="still had 1 users"):
        g.erase_node(z)
    gm = fx.GraphModule(ember.nn.Module(), g)
    assert gm(ember.tensor([1.0])).tolist() == [4.0]
    z.append(y)             # (already after it: no change)
    g.eliminate_dead_code()
    g.lint()


def test_interpreter_and_transformer():
    gm = fx.symbolic_trace(lambda x: ember.relu(x) + 2)

    class Negate(fx.Interpreter):
        def call_function(self, target, args, kwargs):
            return -super().call_function(target, args, kwargs) if target is ember.relu else \
                super().call_function(target, args, kwargs)
    assert Negate(gm).run(ember.tensor([3.0])).tolist() == [-1.0]

    class ReluToSigmoid(fx.Transformer):
        def call_function(self, target, args, kwargs):
            return super().call_function(ember.sigmoid if target is ember.relu else target,
                                         args, kwargs)
    new = ReluToSigmoid(gm).transform()
    assert new(ember.tensor([0.0])).tolist() == [2.5]


def test_replace_pattern_and_wrap():
    def f(x, w):
        return ember.relu(x @ w) + ember.relu(w @ x)
    gm = fx.symbolic_trace(f)
    matches = fx.replace_pattern(gm, lambda a, b: ember.relu(a @ b),
                                 lambda a, b: ember.sigmoid(b @ a))
    assert len(matches) == 2
    x, w = ember.randn(3, 3), ember.randn(3, 3)
    _same(gm(x, w), ember.sigmoid(w @ x) + ember.sigmoid(x @ w))
    gm2 = fx.symbolic_trace(lambda x: _wrapped_helper(x) * 2)
    assert [n.target for n in gm2.graph.nodes if n.op == "call_function"][0] is _wrapped_helper
    assert gm2(ember.tensor([1.0, 3.0])).tolist() == [1.0, 3.0]


@fx.wrap
def _wrapped_helper(x):
    return x / x.sum() * len(x)         # (len of a Proxy would fail if traced through)


def test_leaf_modules_and_control_flow_errors():
    m = _net(ember)

    class Deep(fx.Tracer):          # ReLU traced through, Linear kept
        def is_leaf_module(self, mod, name):
            return isinstance(mod, ember.nn.Linear)
    g = Deep().trace(m)
    assert [n.target for n in g.nodes if n.op == "call_module"] == ["body.0", "body.2", "head"]
    assert sum(n.op == "call_method" and n.target == "relu" for n in g.nodes) == 2
    _same(fx.GraphModule(m, g)(ember.ones(2, 4)), m(ember.ones(2, 4)))

    def branchy(x):
        return x if x.sum() > 0 else -x
    with pytest.raises(fx.TraceError, match="cannot be used as inputs to control flow"):
        fx.symbolic_trace(branchy)


def test_fx_lowers_to_the_op_level_ir():
    m = _net(ember).eval()
    gm = fx.symbolic_trace(m)
    x = ember.randn(2, 4)
    low = ember.jit.trace(gm, x)
    ops = {n.target.name for n in low.graph.nodes if n.op == "call_function" and
           hasattr(n.target, "name")}
    assert {"linear", "relu", "cat", "mul", "add"} <= ops
    _same(low(x), m(x))
