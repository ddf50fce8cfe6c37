"""dispatch's C fast path (ember/_C/dispatch/) against the Python dispatch it copies: the cases
the registry cannot give. tests/test_dispatch_equivalence.py runs every registry sample and
error sample both ways; here are calls no sample makes (Parameters, self as an operand, ops
without samples, hooks, anomaly mode, cached attributes changed), the C pieces called directly
(the node maker, the engine's loop, the tensor-list and several-tensors paths against their
Python copies), Tensor's fields with and without the extension, and the switch itself."""
import re
import subprocess
import sys

import numpy as np
import pytest

import ember

D = sys.modules["ember._ops.dispatch"]
needs_c = pytest.mark.skipif(D._C is None, reason="C dispatch not built or EMBER_NO_C=1")
P = ember._ops.pointwise
I = ember._ops.indexing
R = ember._ops.reduction
C = D._C        # (tests below switch D._C off to run the engine's Python loop)


@pytest.mark.parametrize("c", [True, False] if D._C is not None else [False])
def test_options_by_name_take_the_fast_path(c, monkeypatch):
    # sum(dim=1, keepdim=True) moves its options into place and takes the fast path (C or
    # Python): same result and graph as the general path; what it cannot place goes there
    monkeypatch.setattr(D, "dispatch", D._C.dispatch if c else D.py_dispatch)
    general = []
    monkeypatch.setattr(D, "_dispatch", lambda *a, _d=D._dispatch: general.append(a) or _d(*a))
    x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = D.py_dispatch(R.sum_, (x,), {"keepdim": True, "dim": 1})
    assert y.tolist() == [[3.0], [7.0]] and y.grad_fn.name() == "SumBackward1" and not general
    y.backward(ember.tensor([[1.0], [2.0]]))
    assert x.grad.tolist() == [[1.0, 1.0], [2.0, 2.0]]
    # keyword-only: the quick path, given to the forward by name
    z = D.py_dispatch(R.sum_, (x,), {"dim": 0, "dtype": ember.float64})
    assert z.dtype is ember.float64 and z.grad_fn.name() == "SumBackward1" and not general
    with pytest.raises(TypeError, match="dim"):
        D.py_dispatch(R.sum_, (x, 1), {"dim": 1})       # given twice: the forward says so
    # a view's options by name: the view path, the same view and graph as by position
    v = D.py_dispatch(ember.transpose.opdef, (x,), {"dim1": 1, "dim0": 0})
    assert v._base is x and v.grad_fn.name() == "TransposeBackward0" and not general
    assert v.tolist() == x.t().tolist()


@needs_c
def test_operators_are_c_and_decline_foreign_operands():
    t = ember.tensor([1.0, 2.0])
    assert type(ember.Tensor.__add__) is not type(lambda: 0)
    assert (2 - t).tolist() == [1.0, 0.0] and (2 / t).tolist() == [2.0, 1.0]
    assert ember.Tensor.__mul__(t, 3).tolist() == t.__mul__(3).tolist() == [3.0, 6.0]
    assert t.__add__("x") is NotImplemented and (t == None) is False  # noqa: E711
    with pytest.raises(TypeError, match="unsupported operand"):
        t + "x"
    assert (t + np.array([1.0, 1.0])).tolist() == [2.0, 3.0]


@needs_c
def test_sparse_operand_takes_the_sparse_rules():
    s = ember.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
    np.testing.assert_array_equal(D._C.dispatch(P.mul, (s, 2.0), {}).to_dense().numpy(),
                                  D.py_dispatch(P.mul, (s, 2.0), {}).to_dense().numpy())


def test_no_c_env_keeps_python_dispatch():
    code = ("import sys, ember; d = sys.modules['ember._ops.dispatch']; "
            "assert d._C is None and d.dispatch is d.py_dispatch; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**__import__("os").environ, "EMBER_NO_C": "1"})
    assert r.stdout.strip() == "ok", r.stderr


# ---- graph recording (_C/dispatch/record.h against graph.simple_node) and the engine's loop
# (_C/dispatch/engine.h against engine.run_backward's Python loop) ---------------------------------------

def _fields(node):
    """What a node recorded, comparable across two graphs (leaves' accumulators by variable)."""
    def edge(e):
        n, nr = e
        if n is None:
            return None, nr
        return (n.name(), nr, id(n.variable) if n.name().endswith("AccumulateGrad") else None)
    return (type(node), node.name(), [edge(e) for e in node.next_functions],
            list(node.input_meta), [type(a) for a in node.args], node._has_saved,
            [(id(t), v) for t, v in node.versions], node._outs, node.results is None,
            node.tensor_positions, node._released)


@needs_c
@pytest.mark.parametrize("case", ["mul_one_leaf", "nonleaf"])
def test_same_node_as_python(case):
    # (what the registry's samples cannot give: one operand without grad, a non-leaf; the
    # node's seq and an attribute set out of its slots)
    x = ember.tensor([0.5, -1.0], requires_grad=True)
    w = ember.tensor([2.0, 3.0], requires_grad=case != "mul_one_leaf")
    calls = {"mul_one_leaf": (P.mul, lambda: (x, w)), "nonleaf": (P.mul, lambda: (x * w, x))}
    opdef, args = calls[case]
    a = args()
    c, p = C.dispatch(opdef, a, {}).grad_fn, D.py_dispatch(opdef, a, {}).grad_fn
    assert type(c).__base__ is ember.autograd.graph.SimpleNode and c.seq == p.seq - 1
    assert _fields(c) == _fields(p)
    c.register_hook(lambda gi, go: None)        # an attribute out of the slots: the dict
    assert len(c._hooks) == 1 and c.metadata == {}


def _graph_run(dispatch_c, engine_c, monkeypatch, *, hook=False, retain=False):
    """Leaf grads of a small graph recorded and run back with the C or Python pieces."""
    monkeypatch.setattr(D, "dispatch", C.dispatch if dispatch_c else D.py_dispatch)
    monkeypatch.setattr(D, "_C", C if engine_c else None)
    x = ember.tensor([0.5, -1.0, 2.0], requires_grad=True)
    w = ember.tensor([2.0, 3.0, -1.0], requires_grad=True)
    d = D.dispatch
    h = d(P.tanh, (d(P.add, (d(P.mul, (x, w), {}), 0.5), {}),), {})
    y = d(P.sub, (d(P.mul, (h, w), {}), x), {})
    seen = []
    if hook:
        h.retain_grad()
        y.register_hook(lambda g: g * 2)
        h.grad_fn.register_hook(lambda gi, go: seen.append(gi[0].tolist()))
    roots = [y.grad_fn, h.grad_fn, None]
    assert C.dependencies(roots) == ember.autograd.engine._dependencies(roots)
    y.sum().backward(retain_graph=retain)
    out = [x.grad.tolist(), w.grad.tolist(), seen, h.grad.tolist() if hook else None]
    if retain:      # the second backward accumulates
        y.sum().backward()
        out.append(x.grad.tolist())
    else:
        with pytest.raises(RuntimeError) as e:
            y.sum().backward()
        out.append(str(e.value))
    return out


@needs_c
@pytest.mark.parametrize("hook", [False, True])
@pytest.mark.parametrize("retain", [False, True])
def test_same_backward_as_python(monkeypatch, hook, retain):
    ref = _graph_run(False, False, monkeypatch, hook=hook, retain=retain)
    for dispatch_c, engine_c in ((True, False), (False, True), (True, True)):
        assert _graph_run(dispatch_c, engine_c, monkeypatch, hook=hook, retain=retain) == ref


@needs_c
@pytest.mark.parametrize("engine_c", [False, True])
def test_version_check_same_error(monkeypatch, engine_c):
    errs = []
    for disp in (C.dispatch, D.py_dispatch):
        monkeypatch.setattr(D, "_C", C if engine_c else None)
        x = ember.tensor([0.5, -1.0], requires_grad=True)
        w = ember.tensor([2.0, 3.0])
        a = x * 1.0
        y = disp(P.mul, (a, w), {})     # saves w (read by a's gradient)
        w.add_(1)
        with pytest.raises(RuntimeError) as e:
            y.sum().backward()
        errs.append(str(e.value))
        monkeypatch.undo()
    assert errs[0] == errs[1] and "modified by an inplace operation" in errs[0]


@needs_c
def test_anomaly_and_saved_hooks_take_python_node():
    x = ember.tensor([0.5, -1.0], requires_grad=True)
    with ember.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        n = C.dispatch(P.mul, (x, x), {}).grad_fn
    assert type(n).__base__ is ember.autograd.graph.OpNode
    with ember.autograd.set_detect_anomaly(True):
        n = C.dispatch(P.mul, (x, x), {}).grad_fn
    assert type(n).__base__ is ember.autograd.graph.OpNode and n._trace is not None


@pytest.mark.parametrize("engine_c", [False, True])
def test_leaf_takes_its_gradient_without_a_copy(monkeypatch, engine_c):
    # the engine must drop its own references before a leaf's AccumulateGrad runs, or the
    # accumulation clones a gradient nothing else can reach (one extra pass per parameter)
    if engine_c and C is None:
        pytest.skip("C dispatch not built or EMBER_NO_C=1")
    monkeypatch.setattr(D, "_C", C if engine_c else None)
    clones = []
    clone = ember.Tensor.clone
    monkeypatch.setattr(ember.Tensor, "clone", lambda t, *a, **k: clones.append(1) or
                        clone(t, *a, **k))
    x = ember.randn(8, 16, requires_grad=True)
    w = ember.randn(4, 16, requires_grad=True)
    ember.nn.functional.linear(x.exp(), w).sum().backward()
    assert clones == [] and x.grad.shape == x.shape and w.grad.shape == w.shape


@needs_c
def test_saved_output_shares_the_outputs_storage():
    # record.h makes tanh's saved output (out._alias() in graph.simple_node) and out's storage
    x = ember.tensor([0.5, -1.0], requires_grad=True)
    errs = []
    for disp in (C.dispatch, D.py_dispatch):
        y = disp(P.tanh, (x,), {})
        (saved, version), = y.grad_fn.results
        assert saved._storage is y._storage and saved._data is y._data and version == 0
        assert saved.grad_fn is None and saved.dtype is y.dtype and saved._base is None
        assert y._storage._array is y._data and y._storage.device is y.device
        y.mul_(2)       # the saved output changed: backward refuses it
        with pytest.raises(RuntimeError) as e:
            y.sum().backward()
        errs.append(str(e.value))
    assert errs[0] == errs[1] and "modified by an inplace operation" in errs[0]


def test_quick_view_is_dispatchs_view():
    # a full sum's backward expands its 0-dim gradient through quick_view
    expand = ember._ops.shape.expand
    for g in (ember.tensor(2.0), ember.tensor([[1.0], [2.0]])[:, 0:1]):
        with ember.no_grad():
            q, d = D.quick_view(expand, g, (2, 3)), D.dispatch(expand, (g, (2, 3)), {})
        assert q.tolist() == d.tolist() and q.stride() == d.stride() and q.dtype is d.dtype
        assert q._base is d._base and q._storage is d._storage is g._storage
        assert q._view_fn(q._base).tolist() == q.tolist()
        g.add_(1)       # one storage: the view sees the write and its version
        assert q.tolist() == d.tolist() and q._version == d._version == 1
    with pytest.raises(RuntimeError, match="expand"):
        D.quick_view(expand, ember.tensor([1.0, 2.0]), (3,))
    x = ember.tensor(1.0, requires_grad=True)
    assert D.quick_view(expand, x, (2,)).grad_fn is not None      # recorded: dispatch's path
    seen = []
    y = x * 1.0
    y.register_hook(lambda g: seen.append(g.stride()))
    y.sum().backward()
    assert seen == [()] and x.grad.item() == 1.0
    z = ember.ones(3, requires_grad=True)
    w = z * 2.0
    w.register_hook(lambda g: seen.append((g.stride(), g._base is not None)))
    w.sum().backward()
    assert seen[1] == ((0,), True) and z.grad.tolist() == [2.0, 2.0, 2.0]


# ---- Tensor's fields: TensorBase's slots (_C/dispatch/tensor.h) against the class defaults of the pure
# Python Tensor (EMBER_NO_C=1) --------------------------------------------------------------------

_FIELDS = ("device", "grad", "grad_fn", "_requires_grad", "_storage", "_base", "_view_fn",
           "_output_nr", "_grad_acc", "_post_acc_hooks", "_retains_grad")

_PROBE = """
import copy, gc, pickle, sys, weakref
import ember
from ember._tensor import Tensor
F = %r
out = []
def fields(t):
    return [repr(getattr(t, f)) if f != "device" else str(t.device) for f in F]
class Sub(Tensor):
    pass
class Slotted(Tensor):
    __slots__ = ("extra",)
p = ember.nn.Parameter(ember.ones(2))
made = [object.__new__(Tensor), Tensor._wrap(ember.ones(2)._data), ember.ones(2), p,
        ember.ones(2).as_subclass(Sub), object.__new__(Slotted), ember.ones(2).detach()]
for t in made:
    out.append((type(t).__name__, fields(t), hasattr(t, "_data")))
x = ember.tensor([1.0, 2.0], requires_grad=True)
y = (x * x).tanh().sum()
y.backward()
out.append((x.grad.tolist(), y.grad_fn.name(), y._requires_grad, y._output_nr, y.is_leaf))
del x.grad
out.append(repr(x.grad))
x.grad = ember.ones(2)
x.note = "mine"                 # an attribute of the user's: the instance dict
r = weakref.ref(x)
out.append((x.note, r() is x, vars(x).get("note")))
for z in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x), pickle.loads(pickle.dumps(p)),
          copy.deepcopy(p)):
    out.append((type(z).__name__, z.tolist(), z.requires_grad, getattr(z, "note", None),
                repr(z.grad)))
d = ember.zeros(3)
d.data = ember.ones(3, dtype=ember.float64)
out.append((d.dtype.name, d.tolist(), str(d.device)))
s = ember.ones(2)
s.__class__ = Sub
out.append((type(s).__name__, s.tolist(), s.grad_fn))
c = ember.ones(2, requires_grad=True)
h = c * 2
h.me = h                        # a cycle through the dict and the slots
ref = weakref.ref(h)
del h
gc.collect()
out.append(ref() is None)
try:
    class Bad(Tensor, flag=1):
        pass
except TypeError as e:
    out.append("TypeError")
print(repr(out))
"""


def _probe(no_c):
    import os
    env = {k: v for k, v in os.environ.items() if k != "EMBER_NO_C"}
    if no_c:
        env["EMBER_NO_C"] = "1"
    r = subprocess.run([sys.executable, "-c", _PROBE % (_FIELDS,)], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_tensor_fields_same_with_and_without_c():
    # defaults of tensors made every way, del/assign, user attributes, weakref, pickle and
    # copy (Parameter too), .data, __class__, a collected cycle, subclass keywords
    c, p = _probe(False), _probe(True)
    assert c == p and "Parameter" in c


@needs_c
def test_tensor_fields_are_slots():
    t = ember.ones(2)
    assert isinstance(t, ember._tensor._cext.TensorBase) and "grad_fn" not in vars(t)
    for f in _FIELDS + ("_data", "dtype"):
        assert type(ember.Tensor.__dict__.get(f, getattr(ember.Tensor, f))).__name__ == \
            "member_descriptor", f
    y = ember.ones(2, requires_grad=True) * 3.0      # the C fast path sets them in place
    assert y._requires_grad is True and y.grad_fn is not None and vars(y) == {}


@needs_c
def test_opdef_attributes_are_read_fresh():
    # _C/dispatch/opattr.h caches an OpDef's attributes against its __dict__'s version: a change is seen
    x = ember.tensor([1.0, 2.0])
    fwd, ufunc = P.mul.fwd, P.mul.ufunc
    try:
        P.mul.ufunc = np.add                    # the fast path calls an op's ufunc itself
        assert C.dispatch(P.mul, (x, x), {}).tolist() == [2.0, 4.0]
        P.mul.ufunc = None
        P.mul.fwd = lambda xp, a, b: fwd(xp, a, b) + 1
        assert C.dispatch(P.mul, (x, x), {}).tolist() == [2.0, 5.0]
    finally:
        P.mul.fwd, P.mul.ufunc = fwd, ufunc
    assert C.dispatch(P.mul, (x, x), {}).tolist() == [1.0, 4.0]
    y = ember.tensor([1.0, 2.0], requires_grad=True)
    P.mul.differentiable = False
    try:
        assert C.dispatch(P.mul, (y, y), {}).grad_fn is None
    finally:
        P.mul.differentiable = True
    assert C.dispatch(P.mul, (y, y), {}).grad_fn is not None
    seen = []
    D.hooks.tracer = lambda *a: seen.append(a[0].name)     # (cached "hooks off" must notice)
    try:
        C.dispatch(P.mul, (x, x), {})
    finally:
        D.hooks.tracer = None
    C.dispatch(P.mul, (x, x), {})
    assert seen == ["mul"]


def _accumulate_cases():
    """Leaf gradients through AccumulateGrad's cases (nodes.h's accumulate_leaf takes some)."""
    out = []
    x = ember.tensor([1.0, 2.0], requires_grad=True)
    w = ember.tensor([3.0, 4.0], requires_grad=True)
    (x + w).sum().backward()            # one gradient object for both leaves: not shared
    out.append((x.grad.tolist(), w.grad.tolist(), x.grad is w.grad,
                x.grad._data is w.grad._data))
    (x * w).sum().backward()            # .grad already there: added in place
    out.append((x.grad.tolist(), w.grad.tolist()))
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    x.grad = None
    (x * 2.0).sum().backward()
    out.append((x.grad.tolist(), seen))
    z = ember.tensor([1.0], requires_grad=True)
    y = z * 3.0
    del z                               # the leaf is gone: nothing to accumulate into
    y.sum().backward()
    return out


@pytest.mark.parametrize("engine_c", [False, True])
def test_accumulate_same_as_python(monkeypatch, engine_c):
    if engine_c and C is None:
        pytest.skip("C dispatch not built or EMBER_NO_C=1")
    ref = _accumulate_cases()
    monkeypatch.setattr(D, "_C", C if engine_c else None)
    assert _accumulate_cases() == ref
    assert ref[0] == ([1.0, 1.0], [1.0, 1.0], False, False)


def test_tensor_list_quick_path_is_the_general_path():
    # cat/stack of one float dtype skip flattening and promotion: same values, dtype and graph;
    # mixed dtypes (promotion) and other calls take the general path
    cat, stack = ember.cat.opdef, ember.stack.opdef
    x = ember.tensor([[1.0, 2.0]], requires_grad=True)
    y = ember.tensor([[3.0, 4.0]])
    for opdef, args in [(cat, ([x, y], 0)), (cat, ((x, y), -1)), (stack, ([x, y], 1)),
                        (stack, ([y, y],))]:
        quick, general = D._tensor_list(opdef, args), D._dispatch(opdef, args, {})
        assert quick.tolist() == general.tolist() and quick.dtype is general.dtype
        assert (quick.grad_fn and quick.grad_fn.name()) == (general.grad_fn and
                                                           general.grad_fn.name())
    assert D._tensor_list(cat, ([x, y.double()], 0)) is None
    assert D._tensor_list(cat, ([x, y], np.int64(0))) is None
    assert ember.cat([x, y.double()]).dtype is ember.float64
    z = ember.cat([x, y], dim=0)
    z.sum().backward()
    assert x.grad.tolist() == [[1.0, 1.0]]


@needs_c
def test_tensor_list_in_c_is_the_general_path():
    # no graph to record (no tensor requires grad, or grad mode is off): C's own list path;
    # the same values, dtype, no graph, and the general path's errors in torch's words
    cat, stack = ember.cat.opdef, ember.stack.opdef
    x = ember.rand(2, 3)
    p = ember.nn.Parameter(ember.rand(2, 3))
    calls = [(cat, ((x, x, x), -1)), (stack, ((x, x), -3))]      # (tuples: samples give lists)
    for grad in (True, False):
        with ember.set_grad_enabled(grad):
            for opdef, args in calls + [(cat, ([p, x],))]:
                got, want = C.dispatch(opdef, args, {}), D._dispatch(opdef, args, {})
                assert got.tolist() == want.tolist() and got.dtype is want.dtype
                assert (got.grad_fn is None) == (want.grad_fn is None)
                assert got.requires_grad == want.requires_grad == (grad and opdef is cat and
                                                                    args[0][0] is p)
    for opdef, args in [(cat, ([x, ember.rand(3, 2)], 0)), (stack, ([x, ember.rand(3)],)),
                        (cat, ([x, x], 2))]:
        with pytest.raises(Exception) as want:
            D._dispatch(opdef, args, {})
        with pytest.raises(want.type, match=re.escape(str(want.value)[:40])):
            C.dispatch(opdef, args, {})


def test_several_tensors_quick_path_is_the_general_path():
    # linear(x, w, b), layer_norm(x, shape, w, b, eps), addmm of one float dtype skip the
    # general path's flattening and promotion: same values and graph; mixed dtypes decline
    x = ember.tensor([[1.0, 2.0], [3.0, -1.0]], requires_grad=True)
    w = ember.tensor([[0.5, -1.0], [2.0, 1.0], [0.0, 3.0]], requires_grad=True)
    b = ember.tensor([0.1, 0.2, 0.3])
    cases = [(ember._ops.nn.linear, (x, w, b)),
             (ember.nn.functional._rows.layer_norm, (x, (2,), x[0], x[1], 1e-3)),
             (ember.addmm.opdef, (b, x, w.T))]
    for opdef, args in cases:
        quick, general = D._tensors(opdef, args), D._dispatch(opdef, args, {})
        np.testing.assert_allclose(quick.detach().numpy(), general.detach().numpy())
        assert quick.grad_fn.name() == general.grad_fn.name()
        quick.sum().backward()
        grads = [t.grad for t in (x, w)]
        x.grad = w.grad = None
        general.sum().backward()
        for g, t in zip(grads, (x, w)):
            assert (g is None) == (t.grad is None)
            if g is not None:
                np.testing.assert_allclose(g.numpy(), t.grad.numpy())
        x.grad = w.grad = None
    # promotion reads where's input and other, not its condition: a bool condition is fine,
    # differing dtypes among the promoted ones go to the general path
    where = ember.where.opdef
    args = (x > 0, x, x * 2)
    np.testing.assert_array_equal(D._tensors(where, args).detach().numpy(),
                                  D._dispatch(where, args, {}).detach().numpy())
    assert D._tensors(where, (x > 0, x, x.double())) is None
    assert D._tensors(ember._ops.nn.linear, (x, w, np.float32(1))) is None
    # an op that promotes nothing sees its operands as they are: its own error
    for run in (lambda: D._tensors(ember._ops.nn.linear, (x, w.double(), b)),
                lambda: D._dispatch(ember._ops.nn.linear, (x, w.double(), b), {})):
        with pytest.raises(RuntimeError, match="same dtype"):
            run()


def test_parameters_take_the_quick_paths():
    # a module's weights are Parameters (a Tensor subclass): linear(x, w, b), a view of a
    # weight and a list of them take the quick paths, with the fast path's node, and match the
    # general path's values, node name, saved tensors and gradients
    lin = ember.nn.Linear(3, 2)
    x = ember.randn(4, 3, requires_grad=True)
    opdef, args = ember._ops.nn.linear, (x, lin.weight, lin.bias)
    quick, general = D._tensors(opdef, args), D._dispatch(opdef, args, {})
    assert type(quick.grad_fn).__base__ is ember.autograd.graph.SimpleNode
    assert quick.grad_fn.name() == general.grad_fn.name() == "AddmmBackward0"
    grads = []
    for out in (quick, general):
        out.square().sum().backward()
        grads.append([t.grad.clone() for t in (x, lin.weight, lin.bias)])
        x.grad = lin.weight.grad = lin.bias.grad = None
    for a, b in zip(*grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    quick, general = D._tensors(opdef, args), D._dispatch(opdef, args, {})
    with ember.no_grad():
        lin.weight.mul_(2)              # the saved weight changed: both nodes refuse
    for out in (quick, general):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
    view = D._view(ember.t.opdef, (lin.weight,))
    assert type(view) is ember.Tensor and view._base is lin.weight
    assert D._tensor_list(ember.cat.opdef, ([lin.weight, lin.weight],)) is not None


@needs_c
@pytest.mark.parametrize("case", ["linear", "embedding", "view", "view_of_view", "saves_result"])
def test_quick_paths_c_node_is_pythons(case):
    # the quick paths' node maker in C (mixed dtypes, views, Parameters) makes the node the
    # Python simple_node makes, field for field; an op saving its result takes the Python one
    from ember.autograd.graph import simple_node
    lin = ember.nn.Linear(3, 2)
    x = ember.randn(4, 3, requires_grad=True)
    idx = ember.tensor([[0, 1], [1, 0]])
    calls = {"linear": (ember._ops.nn.linear, (x, lin.weight, lin.bias)),
             "embedding": (ember._ops.nn.embedding, (lin.weight, idx)),
             "view": (ember.t.opdef, (x,)),
             "view_of_view": (ember.t.opdef, (x[1:],)),
             "saves_result": (ember.exp.opdef, (x,))}
    opdef, args = calls[case]
    tensors = [a for a in args if isinstance(a, ember.Tensor)]
    positions = tuple((i, None) for i, a in enumerate(args) if isinstance(a, ember.Tensor))
    with ember.no_grad():
        out = opdef(*args)
    c = C.simple_node(opdef, args, tensors, positions, out)
    p = simple_node(opdef, args, tensors, positions, out)
    assert c.seq == p.seq - 1 and _fields(c) == _fields(p)


def test_index_arrays_take_the_several_tensors_path():
    # x[idx] passes its index as an array: where the op promotes nothing, the quick path takes
    # it as the general path does (same values, node and gradient); a promoting op declines
    x = ember.randn(5, 3, requires_grad=True)
    idx = np.array([4, 0, 4])
    quick, general = D._tensors(I.index, (x, idx)), D._dispatch(I.index, (x, idx), {})
    np.testing.assert_array_equal(quick.detach().numpy(), general.detach().numpy())
    assert quick.grad_fn.name() == general.grad_fn.name() == "IndexBackward0"
    quick.sum().backward()
    g = x.grad.clone()
    x.grad = None
    general.sum().backward()
    np.testing.assert_array_equal(g.numpy(), x.grad.numpy())
    assert D._tensors(P.add, (x, np.ones(3, np.float32))) is None


def _view_cases():
    # (the registry's view ops run both ways in test_dispatch_equivalence.py; view_as_real has
    # complex samples only, which it does not run)
    return [(ember.view_as_real.opdef, (ember.ones(3, dtype=ember.complex64),))]


@needs_c
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("i", range(len(_view_cases())))
def test_view_path_is_pythons(i, grad):
    # the C view path (view.h) against dispatch._view: values, strides, storage, base, view
    # version, a view function that redoes the view from the base, node and gradient
    opdef, args = _view_cases()[i]
    src = args[0].detach().requires_grad_(grad and args[0].is_floating_point())
    src = src * 1 if grad else src                          # a non-leaf: views may go in place
    args = (src,) + args[1:]
    c, p = C.dispatch(opdef, args, {}), D._view(opdef, args)
    for oc, op in zip(*((r if type(r) is tuple else (r,)) for r in (c, p))):
        assert type(oc) is ember.Tensor and oc.dtype is op.dtype
        np.testing.assert_array_equal(oc.numpy(force=True), op.numpy(force=True))
        assert oc._data.strides == op._data.strides and oc._base is op._base
        assert oc._storage is op._storage and oc._version == op._version
        assert oc.__dict__.get("_view_version") == op.__dict__.get("_view_version")
        assert (oc._view_fn is None) == (op._view_fn is None)
        if oc._view_fn is not None:
            np.testing.assert_array_equal(oc._view_fn(oc._base).numpy(force=True),
                                          oc.numpy(force=True))
            assert getattr(oc._view_fn, "multi_output", None) == \
                getattr(op._view_fn, "multi_output", None)
        assert (oc.grad_fn is None) == (op.grad_fn is None)
        if oc.grad_fn is not None:
            assert oc.grad_fn.name() == op.grad_fn.name()
            gc, = ember.autograd.grad(oc.sum(), src, retain_graph=True)
            gp, = ember.autograd.grad(op.sum(), src, retain_graph=True)
            np.testing.assert_array_equal(gc.numpy(force=True), gp.numpy(force=True))


@needs_c
def test_view_path_in_place_and_errors():
    # a write through a C-made view reaches its base and the gradient through the view
    # function (CopySlices); a view of one of split's outputs keeps multi_output; a view the
    # forward refuses raises dispatch's error
    x = ember.arange(6.0, requires_grad=True)
    h = x * 1
    v = C.dispatch(ember._ops.shape.view, (h, (2, 3)), {})
    v.mul_(2)
    assert h.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    h.sum().backward()
    assert x.grad.tolist() == [2.0] * 6
    part = ember.split(x * 1, 3)[0]
    w = C.dispatch(ember.unsqueeze.opdef, (part, 0), {})
    assert w._view_fn.multi_output == 0
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        w.add_(1)
    with pytest.raises(RuntimeError, match=r"shape '\[4, 4\]' is invalid"):
        C.dispatch(ember._ops.shape.view, (h, (4, 4)), {})


def _several_cases():
    # (linear, layer_norm, addmm, where, embedding and max run both ways on their samples in
    # test_dispatch_equivalence.py; here what samples do not have: Parameters, an index array,
    # NumPy scalars, half operands, where's operands of two dtypes)
    x = ember.tensor([[1.0, 2.0], [3.0, -1.0]])
    w = ember.tensor([[0.5, -1.0], [2.0, 1.0], [0.0, 3.0]])
    lin = ember.nn.Linear(2, 3)
    return [
        (ember._ops.nn.linear, (x, lin.weight, lin.bias)),
        (I.index, (w, np.array([2, 0, 2]))),                    # an index array
        (ember.where.opdef, (x > 0, x, x.double())),            # declined: dtypes differ
        (ember._ops.nn.linear, (x, w, np.float32(1))),          # declined: a NumPy scalar
        (ember._ops.nn.linear, (x.half(), w.half())),           # declined: opmath dtype
    ]


@needs_c
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("i", range(len(_several_cases())))
def test_several_path_is_pythons(i, grad):
    # the C several-tensors path (several.h) against dispatch._tensors, called as the Python
    # dispatch calls it: values, dtypes, node (field for field), gradients; a call _tensors
    # declines goes the general way in both
    opdef, args = _several_cases()[i]
    args = tuple(a.detach().requires_grad_(grad and a.is_floating_point())
                 if isinstance(a, ember.Tensor) else a for a in args)
    c, p = C.dispatch(opdef, args, {}), D.py_dispatch(opdef, args, {})
    for oc, op in zip(*((r if type(r) is tuple else (r,)) for r in (c, p))):
        assert type(oc) is ember.Tensor and oc.dtype is op.dtype
        np.testing.assert_array_equal(oc.numpy(force=True), op.numpy(force=True))
        assert (oc.grad_fn is None) == (op.grad_fn is None)
    if grad and type(c) is ember.Tensor and c.grad_fn is not None:
        if type(c.grad_fn).__base__ is ember.autograd.graph.SimpleNode:
            assert c.grad_fn.seq == p.grad_fn.seq - 1 and _fields(c.grad_fn) == _fields(p.grad_fn)
        ts = [a for a in args if isinstance(a, ember.Tensor) and a.requires_grad]
        gc = ember.autograd.grad(c.square().sum(), ts, allow_unused=True)
        gp = ember.autograd.grad(p.square().sum(), ts, allow_unused=True)
        for a, b in zip(gc, gp):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_array_equal(a.numpy(), b.numpy())


@needs_c
def test_several_path_errors_are_pythons():
    x, w = ember.ones(2, 2), ember.ones(3, 2, dtype=ember.float64)
    for disp in (C.dispatch, D.py_dispatch):
        with pytest.raises(RuntimeError, match="same dtype"):
            disp(ember._ops.nn.linear, (x, w, None), {})
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
            disp(ember._ops.nn.linear, (x, ember.ones(3, 5)), {})


@needs_c
def test_grad_and_anomaly_flags_are_read_fresh():
    # _C/dispatch/opattr.h caches the grad-mode and anomaly flags against their __dict__'s version (and
    # their class's): a change is seen at once, on the instance or as the class's default
    from ember.autograd import anomaly_mode, grad_mode
    x = ember.tensor([1.0, 2.0], requires_grad=True)
    for _ in range(2):
        assert (x + x).requires_grad
        with ember.no_grad():
            assert not (x + x).requires_grad
        assert (x + x).requires_grad
    state = grad_mode.state
    saved = state.__dict__.pop("grad_enabled", None)
    try:
        type(state).grad_enabled = False            # a default on the class
        assert not (x + x).requires_grad
    finally:
        type(state).grad_enabled = True
        if saved is not None:
            state.grad_enabled = saved
    assert (x + x).requires_grad
    assert type((x + x).grad_fn).__base__ is ember.autograd.graph.SimpleNode
    with ember.autograd.detect_anomaly(check_nan=False):
        assert anomaly_mode.anomaly.enabled
        # (Python's node)
        assert type((x + x).grad_fn).__base__ is not ember.autograd.graph.SimpleNode
    assert type((x + x).grad_fn).__base__ is ember.autograd.graph.SimpleNode


@needs_c
def test_leaf_edge_is_kept_while_its_accumulator_is():
    # record.h keeps a leaf's (accumulator, 0) edge on the tensor: two ops share it, a new
    # accumulator gets a new one, and the gradients are the same
    x = ember.tensor([1.0, 2.0], requires_grad=True)
    a, b = x * 2.0, x + 1.0
    assert a.grad_fn.next_functions[0] is b.grad_fn.next_functions[0]
    x._grad_acc = None
    c = x * 3.0
    acc = c.grad_fn.next_functions[0][0]
    assert acc is x._grad_acc and acc is not a.grad_fn.next_functions[0][0]
    (a + b + c).sum().backward()
    assert x.grad.tolist() == [6.0, 6.0]


def _inplace_cases():
    """(name, make self, op, args): in-place calls that inplace.h takes (ufunc or into write,
    fast path's result copied) and declines, beyond the registry's samples (which
    test_dispatch_equivalence.py runs in place, on views too): ops without samples (fill,
    copy), self as an operand, alpha, expanded views, masks."""
    f = lambda: ember.tensor([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]])
    g = ember.tensor([[0.5, 0.25, 1.0], [2.0, -1.0, 0.5]])
    return [
        ("self aliased", f, P.add, ("self",)),
        ("fill", f, P._fill, (2.5,)), ("fill 0-dim", f, P._fill, (ember.tensor(7.0),)),
        ("copy", f, P._copy_from, (g,)), ("copy row", f, P._copy_from, (g[0],)),
        ("expanded fill", lambda: ember.zeros(1).expand(3), P._fill, (1.5,)),
        ("alpha by name", f, P.add, (g, {"alpha": 2})),
        ("sub alpha (into)", f, P.sub, (g, 0.5)), ("add self alpha (into)", f, P.add,
                                                   ("self", {"alpha": -2})),
        ("index_put_ by mask", f, ember.index_put.opdef,
         ((ember.tensor([[True, False, True], [False, False, True]]),), ember.tensor(-1.0))),
        ("index_put_ values overlap (declined)", f, ember.index_put.opdef,
         ((ember.tensor([1, 0]),), "self", {"accumulate": True})),
    ]


@needs_c
@pytest.mark.parametrize("i", range(len(_inplace_cases())))
def test_inplace_path_is_pythons(i):
    # inplace.h against dispatch_inplace: the same values, dtype and strides written into the
    # same tensor, one version bump, the same history
    name, make, opdef, args = _inplace_cases()[i]
    outs = []
    kwargs = args[-1] if args and type(args[-1]) is dict else {}
    args = args[:-1] if kwargs else args
    for disp in (C.dispatch_inplace, D.py_dispatch_inplace):
        t = make()
        a = tuple(t if x == "self" else x for x in args)
        data, version = t._data, t._version
        r = disp(opdef, t, a, kwargs)
        assert r is t and t._data is data and t._version == version + 1, name
        outs.append(t)
    c, p = outs
    assert c.dtype is p.dtype and c._data.strides == p._data.strides
    np.testing.assert_array_equal(c.detach().numpy(), p.detach().numpy())
    assert (c.grad_fn is None) == (p.grad_fn is None)


@needs_c
def test_inplace_path_errors_are_pythons():
    # what NumPy refuses to write (nothing written) goes to the Python reference's errors
    # (broadcast and cast failures, leaves requiring grad, indices out of range: the
    # registry's samples and error samples in test_dispatch_equivalence.py)
    cases = [(ember.zeros(1).expand(3), P.add, (1.0,), "more than one element"),
             (ember.ones(3), P._copy_from, (ember.ones(2),), ""),
             (ember.ones(3), ember.index_put.opdef, ((ember.tensor([0]),), ember.ones(2)),
              "shape mismatch")]
    for t, opdef, args, match in cases:
        errs = []
        for disp in (C.dispatch_inplace, D.py_dispatch_inplace):
            before = t.detach().numpy().copy()
            with pytest.raises(Exception) as e:
                disp(opdef, t, args, {})
            errs.append(e.value)
            np.testing.assert_array_equal(t.detach().numpy(), before)
        assert type(errs[0]) is type(errs[1]) and str(errs[0]) == str(errs[1])
        assert match in str(errs[0])
    ro = np.ones(3, np.float32)
    ro.flags.writeable = False
    t = ember.from_numpy(ro)
    for disp in (C.dispatch_inplace, D.py_dispatch_inplace):
        with pytest.raises((ValueError, RuntimeError)):
            disp(P.add, t, (1.0,), {})
    assert ro.tolist() == [1.0, 1.0, 1.0]


@needs_c
def test_inplace_methods_take_the_c_path(monkeypatch):
    # the methods and operators reach inplace.h (counted by a Python reference that must not
    # run), under no_grad too; a leaf requiring grad still goes to Python
    calls = []
    x, y = ember.ones(2, 3), ember.full((2, 3), 2.0)
    real = D.py_dispatch_inplace

    def spy(*a):
        calls.append(a[0].name)
        return real(*a)
    monkeypatch.setattr(D, "py_dispatch_inplace", spy)
    D._c_dispatch()             # (init again: the C path now declines to the spy)
    try:
        x.add_(y), x.mul_(2.0), x.zero_(), x.fill_(3.0), x.copy_(y), x.abs_()
        x += y
        x *= 2
        assert calls == [] and x.tolist() == [[8.0] * 3] * 2
        w = ember.ones(2, requires_grad=True)
        with ember.no_grad():
            w.mul_(3.0)
        assert calls == [] and w.tolist() == [3.0, 3.0]
        with pytest.raises(RuntimeError, match="leaf Variable"):
            w.mul_(3.0)
        assert calls == ["mul"]
    finally:
        monkeypatch.undo()
        D._c_dispatch()


@needs_c
def test_ufuncs_called_from_c_do_not_warn():
    # NOTE: torch computes 0/0, log(-1) silently; the C path calls its ufuncs under NumPy's
    # errstate(all="ignore") (no filter for ember's modules can catch a warning that names the
    # caller's line), and leaves the caller's own NumPy warnings alone
    import warnings
    x = ember.tensor([0.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan((x / 0)[0].item()) and np.isnan(x.log()[1].item())
        y = x.clone()
        y.sqrt_()
        y.div_(0.0)
        with pytest.warns(RuntimeWarning, match="divide by zero"):
            np.divide(np.ones(1), 0.0)
