"""The rest of torch.jit / onnx / fx / export / compiler's public names, against torch 2.13."""
import io
import pickle
import typing
import warnings
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch

import ember

warnings.filterwarnings("ignore", category=DeprecationWarning)


def E(a):
    return ember.tensor(np.asarray(a))


def close(a, b, tol=1e-5):
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# ---- jit ----------------------------------------------------------------------------------------

ISINSTANCE = [([1, 2], List[int]), ([1, 2.0], List[int]), ([[1], [2]], List[List[int]]),
              ({"a": 1}, Dict[str, int]), ({"a": 1}, Dict[int, int]), ((1, "a"), Tuple[int, str]),
              ((1, 2), Tuple[int]), (None, Optional[int]), (3, Optional[int]),
              ("x", Optional[int]), (3, (str, int)), ((1,), (int, Tuple[int])), ([1], list[int]), (1.0, float),
              ({"a": [1]}, Dict[str, List[int]]), ([1], typing.Union[List[int], int])]


@pytest.mark.parametrize("obj,t", ISINSTANCE)
def test_jit_isinstance(obj, t):
    assert ember.jit.isinstance(obj, t) == torch.jit.isinstance(obj, t)


def test_jit_isinstance_tensors_and_errors():
    assert ember.jit.isinstance({"w": ember.ones(1)}, Dict[str, ember.Tensor])
    assert not ember.jit.isinstance({"w": 1}, Dict[str, ember.Tensor])
    for bad in (list, List, dict, Dict, tuple, Tuple):
        with pytest.raises(RuntimeError) as te:
            torch.jit.isinstance([1], bad)
        with pytest.raises(RuntimeError) as ee:
            ember.jit.isinstance([1], bad)
        assert str(ee.value) == str(te.value)
    with pytest.raises(RuntimeError, match="must be a type or a tuple of types"):
        ember.jit.isinstance([1], [int])
    with pytest.warns(UserWarning, match="inner type of a container is lost"):
        assert ember.jit.isinstance([], List[float])


def test_jit_settings():
    assert ember.jit.set_fusion_strategy([("STATIC", 3)]) == [("STATIC", 2), ("DYNAMIC", 10)]
    assert ember.jit.set_fusion_strategy([("STATIC", 2), ("DYNAMIC", 10)]) == [("STATIC", 3)]
    with pytest.raises(ValueError, match="only supported 'STATIC' or 'DYNAMIC', got: FOO"):
        ember.jit.set_fusion_strategy([("FOO", 2)])
    with pytest.raises(Exception, match=r"unrecognized fuser option \(name: bad\)"):
        with ember.jit.fuser("bad"):
            pass
    from ember.jit._torchscript import fuser_state
    before = dict(fuser_state)
    with ember.jit.fuser("fuser1"):
        assert fuser_state["texpr"] and fuser_state["cpu"]
    with ember.jit.fuser("none"):
        assert not any(fuser_state.values())
    assert fuser_state == before
    with pytest.warns(UserWarning, match="Only works in script mode"):
        with ember.jit.strict_fusion():
            pass
    assert issubclass(ember.jit.Error, Exception) and not issubclass(ember.jit.Error,
                                                                        RuntimeError)
    assert issubclass(ember.jit.ScriptWarning, Warning)


def test_optimized_execution_and_last_graph():
    f = ember.jit.trace(lambda x: x.exp() + x.exp(), ember.ones(3))
    x = ember.tensor([0.0, 1.0, 2.0])
    close(f(x), np.exp([0.0, 1.0, 2.0]) * 2)
    ops = [n.target.name for n in ember.jit.last_executed_optimized_graph().nodes
           if n.op == "call_function"]
    assert ops == ["exp", "add"]            # the executor merged the two exps
    with ember.jit.optimized_execution(False):
        close(f(x), np.exp([0.0, 1.0, 2.0]) * 2)
        ops = [n.target.name for n in ember.jit.last_executed_optimized_graph().nodes
               if n.op == "call_function"]
    assert ops == ["exp", "exp", "add"]


def test_export_opnames_matches_torch():
    tm = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Softmax(-1))
    em = ember.nn.Sequential(ember.nn.Linear(3, 2), ember.nn.ReLU(), ember.nn.Softmax(-1))
    # (ember's ops have no overloads: softmax, where torch lists softmax.int)
    want = [n.split(".")[0] for n in torch.jit.export_opnames(torch.jit.trace(tm, torch.ones(1, 3)))]
    assert ember.jit.export_opnames(ember.jit.trace(em, ember.ones(1, 3))) == want
    with pytest.raises(TypeError):
        ember.jit.export_opnames(em)


def test_compilation_unit():
    src = "def foo(a, b):\n    return a + b * 2\n\ndef bar(x):\n    return torch.relu(x)\n"
    tc, ec = torch.jit.CompilationUnit(src), ember.jit.CompilationUnit(src)
    close(ec.foo(E([1.0, 2.0]), E([3.0, 4.0])), tc.foo(torch.tensor([1.0, 2.0]),
                                                      torch.tensor([3.0, 4.0])))
    close(ec.bar(E([-1.0, 2.0])), [0.0, 2.0])
    assert sorted(f.name for f in ec.get_functions()) == ["bar", "foo"]
    assert ec.find_function("baz") is None and tc.find_function("baz") is None
    with pytest.raises(AttributeError, match="'CompilationUnit' has no attribute 'baz'"):
        ec.baz
    cu = ember.jit.CompilationUnit()
    cu.define("def neg(x):\n    return -x\n")
    close(cu.get_function("neg")(E([1.0])), [-1.0])


def test_script_if_tracing_and_onnx_traced_module():
    @ember.jit.script_if_tracing
    def double(x):
        return x * 2
    assert double(ember.ones(1)).item() == 2.0
    tr = ember.jit.trace(lambda x: double(x) + 1, ember.ones(2))
    close(tr(E([1.0, 2.0])), [3.0, 5.0])
    assert ["mul", "add"] == [n.target.name for n in tr.graph.nodes if n.op == "call_function"]
    g, out = ember.jit.ONNXTracedModule(ember.nn.ReLU())(E([-1.0, 2.0]))
    close(out, [0.0, 2.0])
    assert [n.target.name for n in g.nodes if n.op == "call_function"] == ["relu"]
    g, out, ins = ember.jit.ONNXTracedModule(ember.nn.ReLU(), return_inputs=True)(E([1.0]))
    close(ins[0], [1.0])
    with pytest.raises(RuntimeError, match="Expected Tensor argument"):
        ember.jit.ONNXTracedModule(ember.nn.ReLU())(1.0)


def test_run_frozen_optimizations_and_flatbuffer():
    lin = ember.nn.Linear(3, 2).eval()
    x = ember.ones(2, 3)
    f = ember.jit.freeze(ember.jit.trace(lin, x))
    assert ember.jit.run_frozen_optimizations(f) is None
    close(f(x), lin(x))
    with pytest.raises(RuntimeError, match="flatbuffer format"):
        ember.jit.save_jit_module_to_flatbuffer(f, io.BytesIO())
    with pytest.raises(RuntimeError, match="ember.jit.load"):
        ember.jit.jit_module_from_flatbuffer(io.BytesIO())


def test_recursive_script_class():
    class Box:
        def __init__(self):
            self.items = [1, 2]

        def __len__(self):
            return len(self.items)
    r = ember.jit.RecursiveScriptClass(Box())
    assert r.items == [1, 2] and len(r) == 2
    r.items = [3]
    assert r._c.items == [3]
    with pytest.raises(pickle.PickleError, match="ScriptClasses cannot be pickled"):
        pickle.dumps(r)


# ---- fx -----------------------------------------------------------------------------------------

def _codegen_classes(base):
    class ListOut(base):
        def generate_output(self, output_args):
            return f"return [{output_args!r}]"

        def process_outputs(self, outputs):
            return outputs[0]

        def process_inputs(self, *args):
            return args[::-1]
    return ListOut


def test_codegen():
    fn = lambda x, y: x - y    # noqa: E731
    outs = []
    for mod, fx in ((torch, torch.fx), (ember, ember.fx)):
        gm = fx.symbolic_trace(fn)
        gm.graph.set_codegen(_codegen_classes(fx.CodeGen)())
        gm.recompile()
        a, b = mod.tensor([5.0, 1.0]), mod.tensor([2.0, 2.0])
        outs.append((gm(a, b), fx.Interpreter(gm).run(a, b)))
        assert "return [sub]" in gm.code
    close(outs[1][0][0], outs[0][0][0])
    close(outs[1][1], outs[0][1])           # (the Interpreter processed inputs and outputs)
    g = ember.fx.Graph()
    assert "def forward(self):" in g.python_code("self").src


def test_proxyable_class_meta():
    results = []
    for mod, fx in ((torch, torch.fx), (ember, ember.fx)):
        class TensorPair(metaclass=fx.ProxyableClassMeta):
            def __init__(self, left, right):
                self.left, self.right = left, right

            def add(self, other):
                return TensorPair(self.left + other.left, self.right + other.right)

            def mul(self, other):
                return TensorPair(self.left * other.left, self.right * other.right)

        def use(x: TensorPair, y):
            s = x.add(TensorPair(y, y))
            return s.mul(x)
        gm = fx.symbolic_trace(use)
        kinds = [(n.op, getattr(n.target, "__name__", n.target)) for n in gm.graph.nodes]
        x = TensorPair(mod.tensor([1.0, 2.0]), mod.tensor([3.0, 4.0]))
        out = gm(x, mod.tensor([1.0, 1.0]))
        results.append((kinds, out.left, out.right))
        assert isinstance(TensorPair(1, 2), TensorPair)     # plain values: a plain instance
    assert results[0][0] == results[1][0]
    close(results[1][1], results[0][1])
    close(results[1][2], results[0][2])


def test_has_side_effect():
    kept = []
    for fx in (torch.fx, ember.fx):
        def log(x):
            pass
        g = fx.Graph()
        x = g.placeholder("x")
        g.call_function(log, (x,))
        g.output(x)
        before = g.eliminate_dead_code()
        assert fx.has_side_effect(log) is log
        g2 = fx.Graph()
        x = g2.placeholder("x")
        g2.call_function(log, (x,))
        g2.output(x)
        kept.append((before, g2.eliminate_dead_code(), len(g2.nodes)))
    assert kept[0] == kept[1] == (True, False, 3)
