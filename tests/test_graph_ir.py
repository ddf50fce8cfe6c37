"""The graph IR (ember/_graph): recording from the dispatch, passes, replay with autograd,
serialization."""
import numpy as np
import pytest

import ember
from ember._graph import Interpreter, PassManager, cse, dead_code, fold_constants, \
    fusion_groups, record
from ember._graph.serialize import dumps, loads


def _ops(g):
    return [n.target.name for n in g.nodes if n.op == "call_function" and
            hasattr(n.target, "name")]


def test_recording_gives_op_nodes_with_meta_from_the_ops():
    rec, _ = record(lambda x: (x.exp() + 1).sum(0), (ember.ones(2, 3),))
    assert _ops(rec.graph) == ["exp", "add", "sum"]
    add = next(n for n in rec.graph.nodes if getattr(n.target, "name", "") == "add")
    assert add.meta["val"].shape == (2, 3) and str(add.meta["val"].dtype) == "torch.float32"
    # the meta device runs the ops' meta rules only: the same shapes and dtypes
    meta, _ = record(lambda x: (x.exp() + 1).sum(0), (ember.empty(2, 3, device="meta"),))
    vals = [(n.meta["val"].shape, n.meta["val"].dtype) for n in rec.graph.nodes if
            n.op == "call_function"]
    assert vals == [(n.meta["val"].shape, n.meta["val"].dtype) for n in meta.graph.nodes
                    if n.op == "call_function"]


def test_cse_dead_code_and_constant_folding():
    w = ember.nn.Parameter(ember.ones(3))
    m = ember.nn.Module()
    m.w = w
    m.register_buffer("scale", ember.full((3,), 2.0))

    def f(x):
        a, b = x.sin(), x.sin()             # the same subexpression twice
        x.cos()                             # read by no one
        k = (m.scale * 3).exp()             # constants only: folded
        return (a + b) * k * m.w
    rec, _ = record(f, (ember.randn(3),), module=m)
    g = rec.graph
    assert _ops(g).count("sin") == 2 and "cos" in _ops(g)
    PassManager([cse, dead_code, lambda g: fold_constants(g, m)])(g)
    assert _ops(g) == ["sin", "add", "mul", "mul"]
    assert any(n.op == "get_attr" and n.target == "w" for n in g.nodes)   # parameters stay
    x = ember.randn(3)
    np.testing.assert_allclose(Interpreter(m, graph=g).run(x).detach().numpy(),
                               f(x).detach().numpy(), rtol=1e-6)


def test_replay_records_autograd():
    lin = ember.nn.Linear(4, 2)
    x = ember.randn(3, 4)
    rec, _ = record(lin, (x,), module=lin)
    out = Interpreter(lin, graph=rec.graph).run(x)
    out.pow(2).sum().backward()
    g1 = lin.weight.grad.clone()
    lin.weight.grad = None
    lin(x).pow(2).sum().backward()
    np.testing.assert_allclose(g1.numpy(), lin.weight.grad.numpy(), rtol=1e-6)


def test_serialize_round_trip_keeps_ops_arguments_and_meta():
    rec, _ = record(lambda x: ember.nn.functional.softmax(x[:, 1:] * float("inf"), dim=-1)
                    .to(ember.float64), (ember.ones(2, 3),))
    g2 = loads(dumps(rec.graph))
    assert [(n.op, n.name, str(n.target), n.args.__repr__(), n.meta.get("val"))
            for n in g2.nodes] == [(n.op, n.name, str(n.target), n.args.__repr__(),
                                    n.meta.get("val")) for n in rec.graph.nodes]
    with pytest.raises(RuntimeError, match="not an ember graph"):
        loads('{"format": "other"}')


def test_fusion_groups_find_pointwise_chains():
    rec, _ = record(lambda x: ((x * 2 + 1).relu() - 3).exp().sum(), (ember.ones(4),))
    groups = fusion_groups(rec.graph)
    assert [[n.target.name for n in grp] for grp in groups] == [["mul", "add", "relu", "sub",
                                                                 "exp"]]


def test_python_code_prints_the_ops():
    rec, _ = record(lambda x: x.relu() + 1, (ember.ones(2),))
    src = rec.graph.python_code().src
    assert "relu = aten.relu(x);  x = None" in src and "add = aten.add(relu, 1)" in src


def test_device_moves_and_detach_are_nodes():
    rec, _ = record(lambda x: x.to("meta").detach() * 2, (ember.ones(2),))
    assert [(n.op, n.target if isinstance(n.target, str) else n.target.name)
            for n in rec.graph.nodes][1:-1] == [("call_method", "to"), ("call_method", "detach"),
                                                ("call_function", "mul")]
    out = Interpreter(ember.nn.Module(), graph=rec.graph).run(ember.ones(3))
    assert out.device.type == "meta" and out.shape == (3,)
