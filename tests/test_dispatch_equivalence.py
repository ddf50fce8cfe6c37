"""dispatch's C fast path (ember/_C/dispatch/) against its Python reference, generated from the
registry: every OpDef's samples, in four dtypes, run through the C extension and, in the same
process, through ``dispatch.python_reference()`` (dispatch, graph recording, view functions
and the backward loop in Python). Each call is made as a function, as a Tensor method, through
the Python operators and as the in-place method where the op has them, with and without inputs
that require grad. Both ways must give the same values (bit for bit: both call the same
forward), dtypes, shapes, strides, storage offsets, views of the same inputs, ``grad_fn`` types,
names and edges, version counters, gradients (after a backward and a second one that
accumulates), and the same exception type and message, for the samples and the error samples.

A new C quick path lands with a case here (a sample on its op) or, for what no sample can
reach, a hand-written one in tests/test_c_dispatch.py (docs/contributing.md).
"""
import re
import sys
import warnings

import numpy as np
import pytest

import ember
from ember._ops.registry import all_ops
from ember._ops.samples import Sample, make

D = sys.modules["ember._ops.dispatch"]
pytestmark = pytest.mark.skipif(D._C is None, reason="C dispatch not built or EMBER_NO_C=1")

DTYPES = [ember.float32, ember.float64, ember.int64, ember.bool]
OPS = [d for d in all_ops() if d.samples is not None]
# Tensor's Python operators (_tensor_methods.OPERATORS) for an op's (self, other) call: the
# operator, the reflected one (other's, called with self as its operand) and the in-place one
OPERATORS = {"add": ("__add__", "__radd__", "__iadd__"), "sub": ("__sub__", "__rsub__", "__isub__"),
             "mul": ("__mul__", "__rmul__", "__imul__"),
             "div": ("__truediv__", "__rtruediv__", "__itruediv__"),
             "pow": ("__pow__", "__rpow__", "__ipow__"), "matmul": ("__matmul__", None, None),
             "floor_divide": ("__floordiv__", None, "__ifloordiv__"),
             "remainder": ("__mod__", None, "__imod__"),
             "eq": ("__eq__",) + (None,) * 2, "ne": ("__ne__",) + (None,) * 2,
             "lt": ("__lt__",) + (None,) * 2, "le": ("__le__",) + (None,) * 2,
             "gt": ("__gt__",) + (None,) * 2, "ge": ("__ge__",) + (None,) * 2,
             "bitwise_and": ("__and__", "__rand__", "__iand__"),
             "bitwise_or": ("__or__", "__ror__", "__ior__"),
             "bitwise_xor": ("__xor__", "__rxor__", "__ixor__")}


def _forms(opdef, args):
    """(name, call(args, kwargs), in_place) for each way the op is reached from user code."""
    name, first = opdef.name, args[0] if args else None
    fn = getattr(ember, name, None) if opdef.function else None
    out = [("function", (lambda a, k: fn(*a, **k)) if getattr(fn, "opdef", None) is opdef
            else (lambda a, k: opdef(*a, **k)), False)]
    if not isinstance(first, np.ndarray):
        return out
    if opdef.method and getattr(getattr(ember.Tensor, name, None), "opdef", None) is opdef:
        out.append(("method", lambda a, k: getattr(a[0], name)(*a[1:], **k), False))
    if opdef.inplace:
        out.append(("in-place", lambda a, k: getattr(a[0], name + "_")(*a[1:], **k), True))
    op, rop, iop = OPERATORS.get(name, (None,) * 3)
    if op and len(args) == 2:
        out.append((op, lambda a, k: getattr(a[0], op)(a[1], **k), False))
        if rop and not isinstance(args[1], np.ndarray):     # other <op> self, reflected
            out.append((rop, lambda a, k: getattr(a[0], rop)(a[1], **k), False))
        if iop:
            out.append((iop, lambda a, k: getattr(a[0], iop)(a[1], **k), True))
    return out


def _make(sample, grad, view):
    """Fresh tensors for one run: arrays become tensors (floating ones leaves requiring grad
    when ``grad``); with ``view`` the first is a strided view into a base (the leaf)."""
    leaves = []

    def tensor(x, view=False):
        if not isinstance(x, np.ndarray):
            return x
        t = ember.tensor(np.stack([x, x], -1) if view else x)
        if grad and (t.is_floating_point() or t.is_complex()):
            leaves.append(t.requires_grad_())
        return t[..., 1] if view else t
    args = tuple([tensor(x) for x in a] if isinstance(a, list) else tensor(a, view and i == 0)
                 for i, a in enumerate(sample.args))
    kwargs = {k: tensor(v) for k, v in sample.kwargs.items()}
    inputs = [x for a in list(args) + list(kwargs.values())
              for x in (a if isinstance(a, list) else [a]) if isinstance(x, ember.Tensor)]
    return args, kwargs, inputs, leaves


def _flat(out):
    if isinstance(out, (tuple, list)) and not isinstance(out, ember.Size):
        return [x for o in out for x in _flat(o)]
    return [out]


def _bits(t):
    """A tensor's values as (dtype, shape, bytes): equal exactly when bit for bit."""
    if t.is_sparse:
        t = t.to_dense()
    a = np.ascontiguousarray(t.detach().numpy())
    return str(a.dtype), a.shape, a.tobytes()


def _node(fn, inputs):
    """A graph node as what the two paths must agree on: type, name, edges (a leaf's
    accumulator by its input's position), what it saved (inputs by position) and its state."""
    if fn is None:
        return None

    def at(t):
        return [i for i, x in enumerate(inputs) if x is t]

    def edge(e):
        n, nr = e
        return None if n is None else (n.name(), nr, at(getattr(n, "variable", None)))
    return (type(fn).__name__, fn.name(), [edge(e) for e in fn.next_functions],
            [tuple(m) for m in getattr(fn, "input_meta", ())],
            [type(a).__name__ for a in getattr(fn, "args", ())],
            [(at(t), v) for t, v in getattr(fn, "versions", ())],
            getattr(fn, "results", None) is None,
            [getattr(fn, f, None) for f in ("tensor_positions", "_has_saved", "_released",
                                            "n_outputs", "kwargs")])


def _describe(o, inputs):
    if not isinstance(o, ember.Tensor):
        return type(o).__name__, repr(o)
    same = [i for i, t in enumerate(inputs) if t is o]
    shares = [i for i, t in enumerate(inputs) if t._storage is o._storage]
    layout = () if o.is_sparse else (o.stride(), o.storage_offset(), o._base is None)
    view = None
    if o._view_fn is not None:      # a view function that redoes the view from the base
        with ember.no_grad():
            view = (_bits(o._view_fn(o._base)), getattr(o._view_fn, "multi_output", None),
                    o.__dict__.get("_view_version"))
    return (type(o).__name__, o.dtype.name, tuple(o.shape), layout, same, shares,
            o.requires_grad, o.is_leaf, _node(o.grad_fn, inputs), o._version, view, _bits(o))


def _weights(outs):
    rng = np.random.default_rng(1)
    return [ember.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype) for o in outs]


def _raised(e):
    """An exception as the user sees it: type, message, the error shown as its context"""
    shown = e.__context__ if not e.__suppress_context__ else None
    return type(e), str(e), None if shown is None else type(shown)


def _run(call, sample, grad, view):
    """Everything one way of running the call shows: outputs, input versions, errors,
    gradients after one backward and after a second that accumulates."""
    ember.manual_seed(0)
    args, kwargs, inputs, leaves = _make(sample, grad, view)
    try:
        out = call(args, kwargs)
    except Exception as e:      # noqa: BLE001 (the same exception both ways is the check)
        return ["raises", *_raised(e), [t._version for t in inputs]]
    outs = _flat(out)
    got = [_describe(o, inputs) for o in outs] + [[t._version for t in inputs]]
    diff = [o for o in outs if isinstance(o, ember.Tensor) and o.requires_grad and
            not o.is_sparse and (o.is_floating_point() or o.is_complex())]
    if not diff:
        return got
    loss = sum((o * w).sum().real if o.is_complex() else (o * w).sum()
               for o, w in zip(diff, _weights(diff)))
    for retain in (True, False):
        try:
            loss.backward(retain_graph=retain)
        except Exception as e:      # noqa: BLE001
            return got + ["backward raises", *_raised(e)]
        got.append([None if t.grad is None else (t.grad.stride(), _bits(t.grad))
                     for t in leaves])
    return got + [[t._version for t in inputs]]


def _both(call, sample, grad=False, view=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = _run(call, sample, grad, view)
        with D.python_reference():
            p = _run(call, sample, grad, view)
    return c, p


def _compare(c, p, what):
    if c == p:
        return
    assert len(c) == len(p), f"{what}: C {c[:3]}... != Python {p[:3]}..."
    for i, (a, b) in enumerate(zip(c, p)):
        assert a == b, f"{what}: item {i} differs:\n  C:      {a}\n  Python: {b}"


def _samples(opdef, dt):
    if dt.name in opdef.skips:
        return []
    return opdef.samples("cpu", dt) or []


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_samples_same_both_ways(opdef, dt):
    samples = _samples(opdef, dt)
    if not samples:
        pytest.skip(f"{opdef.name} has no samples for {dt.name}")
    grad = opdef.differentiable and dt.is_floating_point
    for s in samples:
        for form, call, in_place in _forms(opdef, s.args):
            # a view of a view, an in-place write into a view (the base's history is rewritten)
            for view in (False, True) if in_place or opdef.view else (False,):
                for g in (False, True) if grad else (False,):
                    c, p = _both(call, s, g, view)
                    _compare(c, p, f"{opdef.name} {form} ({s})" + " with grad" * g +
                             " on a view" * view)


# what a pointwise op's operands may be beside a sample's (one dtype, same-kind numbers): every
# kind of number (bool, int beyond the dtype's range, float, complex, NumPy scalars) and
# tensors of other dtypes, for the quick paths' bail-outs (promotion, opmath, wrapping ints)
NUMBERS = [True, 3, 300, 2 ** 62, 2.5, 1j, np.float64(2.0), np.float32(0.5), np.int64(3)]
SELF_DTYPES = [(ember.uint8, 255), (ember.uint8, 300), (ember.int32, -3), (ember.float16, 0.5),
               (ember.bfloat16, 2.0), (ember.complex64, 2.0)]
OTHER_DTYPES = [ember.float64, ember.int64, ember.bfloat16, ember.float16, ember.bool]


def _operand_kinds(opdef):
    """Samples of a pointwise op with operands of other kinds than its float32 samples'."""
    samples = _samples(opdef, ember.float32)
    unary = next((s for s in samples if len(s.args) == 1 and not s.kwargs), None)
    binary = next((s for s in samples if len(s.args) == 2 and not s.kwargs and
                   isinstance(s.args[0], np.ndarray) and s.args[0].ndim), None)
    if 1 not in (opdef.promote_args or ()):     # a degree, a count: not an operand to vary
        binary = None
    out = [Sample(make(unary.args[0].shape, dt)) for dt, _ in SELF_DTYPES] if unary else []
    if binary is not None:
        x, shape = binary.args[0], binary.args[0].shape
        out += [Sample(x, n) for n in NUMBERS]
        out += [Sample(x, make(shape, dt, seed=3)) for dt in OTHER_DTYPES]
        out += [Sample(make(shape, dt), n) for dt, n in SELF_DTYPES]
    return out


@pytest.mark.parametrize("opdef", [d for d in OPS if "pointwise" in d.tags], ids=str)
def test_operand_kinds_same_both_ways(opdef):
    samples = _operand_kinds(opdef)
    if not samples:
        pytest.skip(f"{opdef.name} has no plain float32 sample to vary")
    for s in samples:
        # (with grad where the quick paths record: float32 first, the others decline)
        grad = opdef.differentiable and s.args[0].dtype == np.float32
        for form, call, in_place in _forms(opdef, s.args):
            for g in (False, True) if grad else (False,):
                c, p = _both(call, s, g)
                _compare(c, p, f"{opdef.name} {form} ({s})" + " with grad" * g)


@pytest.mark.parametrize("opdef", [d for d in all_ops() if d.errors], ids=str)
def test_error_samples_same_both_ways(opdef):
    for e in opdef.errors:
        for form, call, in_place in _forms(opdef, e.sample.args):
            c, p = _both(call, e.sample)
            _compare(c, p, f"{opdef.name} {form} ({e.sample})")
            if form == "function":      # (and it is the error the sample expects)
                assert c[0] == "raises" and issubclass(c[1], e.exc_type), (opdef.name, c)
                assert re.search(e.match, c[2]), (opdef.name, e.match, c[2])


def test_python_reference_switches_every_c_piece(monkeypatch):
    """Inside the block the C dispatch, in-place dispatch and operators hand every call to the
    Python ones (spied on here), and views, nodes and the backward loop are Python's; the C
    path is back after it, also after an error."""
    seen = []
    for name in ("py_dispatch", "py_dispatch_inplace"):
        real = getattr(D, name)
        monkeypatch.setattr(D, name, lambda *a, _r=real, _n=name: seen.append(_n) or _r(*a))
    D._c_dispatch()                 # (init again: the C path declines to the spies)
    try:
        x = ember.tensor([[1.0, 2.0]], requires_grad=True)
        with D.python_reference():
            assert D._C is None and D._quick_node is ember.autograd.graph.simple_node
            y = (x * 2.0).t()
            z = y.clone()
            z.add_(1.0)
            (z + y).sum().backward()
        assert seen.count("py_dispatch") >= 4 and seen.count("py_dispatch_inplace") == 1
        assert type(y._view_fn).__name__ == "function"
        assert type(y.grad_fn).__base__ is type(z.grad_fn).__base__ is \
            ember.autograd.graph.SimpleNode
        with pytest.raises(RuntimeError, match="size"):
            with D.python_reference():
                x + ember.ones(3)
        seen.clear()
        assert D._C is not None and type(((x * 2.0).t())._view_fn).__name__ == "ViewFn"
        ember.ones(2).add_(1.0)
        assert seen == [] and x.grad.tolist() == [[4.0, 4.0]]
    finally:
        monkeypatch.undo()
        D._c_dispatch()
