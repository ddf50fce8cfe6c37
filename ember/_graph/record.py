"""Recording a graph from the dispatch: every op call made while a ``Recorder`` is installed as
``dispatch.hooks.tracer`` becomes a ``call_function`` node on its OpDef.

A tensor argument is a graph input (placeholder), a parameter or buffer of the traced module
(``get_attr`` by its state_dict name), the output of an earlier node, or else a constant (its
value at trace time, ``get_attr`` of ``_tensor_constant<k>``: tensors made by factory calls,
whose shapes the trace bakes in). While recording, Python values taken from traced tensors
(``item``, ``bool``, ``tolist``, ``int``...) raise torch's ``TracerWarning``: the graph cannot
follow them.
"""
import contextlib
import warnings

import numpy as np

from .._tensor import Tensor
from ..autograd.function import Function
from ..autograd.grad_mode import state as _grad
from .._ops import dispatch as _dispatch
from ..nn.modules import module as _module
from .ir import GETITEM, Graph, TensorMeta


class TracerWarning(Warning):
    """A trace may not generalize to other inputs (``torch.jit.TracerWarning``)."""


_CONVERSIONS = {"__bool__": "a Python boolean", "item": "a Python number",
                "tolist": "a Python list", "__int__": "a Python integer",
                "__float__": "a Python float", "__index__": "a Python index",
                "numpy": "a NumPy array"}


class Recorder:
    """Installed as the dispatch's tracer: builds ``graph`` from the op calls it sees.

    ``inputs`` are the tensors that become placeholders (in order, named by ``names``);
    ``module`` the root whose parameters and buffers are read by name.
    """

    def __init__(self, inputs, names, module=None):
        self.graph, self.values, self.keep = Graph(), {}, []
        self.grad0 = _grad.grad_enabled
        self.constants, self.data, self.stale, self.scope = {}, {}, set(), [""]
        self.attrs, self.homes = {}, {}      # homes: inputs and attributes, by tensor id
        self.called = {}                     # the modules that ran, by id
        self.reads = []                      # (node, value, what) read in Python
        self.calls = {}                      # calls of each module so far, by id
        if module is not None:
            for prefix, m in module.named_modules(remove_duplicate=False):
                for k, t in list(m._parameters.items()) + list(m._buffers.items()):
                    if t is not None:
                        self.attrs.setdefault(id(t), (prefix + "." if prefix else "") + k)
            self.paths = {}         # a module reachable by several paths: one per call, in order
            for p, m in module.named_modules(remove_duplicate=False):
                self.paths.setdefault(id(m), []).append(p)
        else:
            self.paths = {}
        self.inputs = []
        for t, n in zip(inputs, names):
            node = self.graph.placeholder(n)
            node.meta["val"] = TensorMeta.of(t)
            self.inputs.append(node)
            self._bind(t, node)
            self.homes[id(t)] = node

    def _bind(self, t, node):
        self.values[id(t)] = node
        self.data[id(t._data)] = node
        self.keep.append(t)
        self.stale.discard(id(t))

    def value(self, t):
        """The node standing for tensor ``t`` (made on first sight for parameters and
        constants)."""
        if id(t) in self.stale:
            raise RuntimeError("tracing: a tensor was written in place through a view and then "
                               "read; ember's tracer cannot record writes into views yet")
        n = self.values.get(id(t))
        if n is None:
            n = self.data.get(id(t._data))          # an alias made off the dispatch (detach)
        if n is None:
            name = self.attrs.get(id(t))
            if name is None and t.grad_fn is not None:
                raise RuntimeError(f"tracing: a tensor made off the dispatch (by "
                                   f"{t.grad_fn.name()}) was read; ember cannot record how it "
                                   "was computed")
            if name is None:
                name = f"_tensor_constant{len(self.constants)}"
                self.constants[name] = Tensor._wrap(t._data.copy(), t.device)  # (no op call)
            n = self.graph.get_attr(name)
            n.meta["val"] = TensorMeta.of(t)
            self._bind(t, n)
            if not name.startswith("_tensor_constant"):
                self.homes[id(t)] = n
        return n

    def arg(self, a):
        t = type(a)
        if isinstance(a, Tensor):
            return self.value(a)
        if t is tuple or t is list:
            return t(self.arg(x) for x in a)
        if t is np.ndarray:                 # (index arrays x[idx] hands to its op)
            return self.value(Tensor._wrap(a))
        return a

    def _node(self, kind, target, args, kwargs):
        node = self.graph.create_node(kind, target, self.arg(tuple(args)),
                                      {k: self.arg(v) for k, v in kwargs.items()})
        node.meta["scope"] = self.scope[-1]
        if self.grad0 and not _grad.grad_enabled:     # (the code turned grad off: no_grad)
            node.meta["no_grad"] = True
        return node

    def __call__(self, opdef, args, kwargs, outs):
        node = self._node("call_function", opdef, args, kwargs)
        if type(outs) is tuple:             # the op returned several tensors
            node.meta["val"] = [TensorMeta.of(o) for o in outs]
            for i, o in enumerate(outs):
                g = self.graph.call_function(GETITEM, (node, i))
                g.meta["val"], g.meta["scope"] = node.meta["val"][i], node.meta["scope"]
                self._bind(o, g)
        else:
            node.meta["val"] = TensorMeta.of(outs[0])
            self._bind(outs[0], node)

    def function(self, apply, args, kwargs, out):
        """An ``autograd.Function`` ran: where its outputs are not values the graph already
        made (its forward computed off the dispatch), one node calls its ``apply``."""
        outs = out if type(out) is tuple else (out,)
        if all(id(o) in self.values for o in outs if isinstance(o, Tensor)):
            return
        node = self._node("call_function", apply, args, kwargs)
        if type(out) is tuple:
            for i, o in enumerate(out):
                if isinstance(o, Tensor):
                    g = self.graph.call_function(GETITEM, (node, i))
                    g.meta["val"] = TensorMeta.of(o)
                    self._bind(o, g)
        elif isinstance(out, Tensor):
            node.meta["val"] = TensorMeta.of(out)
            self._bind(out, node)

    def assigned(self, t, r):
        """``t`` now holds ``r``'s value (an in-place op); its base, if any, went stale. A
        write into a graph input, parameter or buffer (BatchNorm's running stats) is a
        ``copy_`` node, so the replay makes it too."""
        if id(r) in self.values:
            if id(t) not in self.values and self.attrs.get(id(t)) is not None:
                self.value(t)
            home = self.homes.get(id(t))
            if home is not None:
                self._node("call_method", "copy_", (home, r), {})
            self._bind(t, self.values[id(r)])

    def method(self, name, t, d, *args):
        """``d = t.<name>(*args)``, made off the dispatch (``detach``: the replay must cut the
        gradient there too; ``to``: a move to another device): a ``call_method`` node."""
        if id(t) in self.values or id(t._data) in self.data:
            node = self._node("call_method", name, (t,) + args, {})
            node.meta["val"] = TensorMeta.of(d)
            self._bind(d, node)
        if t._base is not None:
            self.stale.add(id(t._base))
            self.values.pop(id(t._base), None)
            self.data.pop(id(t._base._data), None)

    def warn(self, t, what):
        if id(t) in self.values and self.values[id(t)].op != "get_attr":
            # (the value Python read, which the graph bakes in: draft_export asserts it)
            self.reads.append((self.values[id(t)], np.array(t._data), what))
            warnings.warn(f"Converting a tensor to {what} might cause the trace to be incorrect. "
                          "We can't record the data flow of Python values, so this value will "
                          "be treated as a constant in the future. This means that the trace "
                          "might not generalize to other inputs!", TracerWarning, stacklevel=3)

    def output(self, out):
        return self.graph.output(_map_out(out, self.value))


DATACLASSES = {}        # export.register_dataclass: type -> the fields its instances flatten to


def _map_out(out, fn):
    if isinstance(out, Tensor):
        return fn(out)
    fields = DATACLASSES.get(type(out))
    if fields is not None:
        return type(out)(**{f: _map_out(getattr(out, f), fn) for f in fields})
    if isinstance(out, (tuple, list)):
        return type(out)(_map_out(o, fn) for o in out) if not hasattr(out, "_fields") else \
            type(out)(*(_map_out(o, fn) for o in out))
    if isinstance(out, dict):
        return {k: _map_out(v, fn) for k, v in out.items()}
    return out


_active = []


def _warning(name, what):
    orig = getattr(Tensor, name)
    own = Tensor.__dict__.get(name)

    def f(self, *a, **k):
        rec = _active[-1] if _active else None
        if rec is None:
            return orig(self, *a, **k)
        rec.warn(self, what)
        _active.append(None)       # one warning per conversion (bool reads item)
        try:
            return orig(self, *a, **k)
        finally:
            _active.pop()
    return own, f


@contextlib.contextmanager
def recording(rec):
    """Install ``rec`` as the dispatch's tracer (and module scope tracking, conversion
    warnings, in-place rebinding) for the ``with`` block."""
    hooks, prev = _dispatch.hooks, _dispatch.hooks.tracer
    if prev is not None:
        raise RuntimeError("tracing: another tracer is already active")
    patched = {n: _warning(n, w) for n, w in _CONVERSIONS.items()}
    assign = Tensor._assign

    def _assign(self, r, name="copy_"):
        out = assign(self, r, name)
        if _active and _active[-1] is rec:
            rec.assigned(self, r)
        return out

    def detach(self):
        out = tdetach(self)
        if _active and _active[-1] is rec:
            rec.method("detach", self, out)
        return out

    def move(self, dev, non_blocking=False):
        out = tmove(self, dev, non_blocking)
        if _active and _active[-1] is rec:
            rec.method("to", self, out, str(dev))
        return out
    tdetach, tmove = Tensor.detach, Tensor._move

    def pre(m, args):
        rec.called.setdefault(id(m), m)
        paths = rec.paths.get(id(m))
        k = rec.calls[id(m)] = rec.calls.get(id(m), -1) + 1
        rec.scope.append(paths[min(k, len(paths) - 1)] if paths else type(m).__name__)

    def post(m, args, result):
        if len(rec.scope) > 1:
            rec.scope.pop()

    def apply(cls, *args, **kwargs):
        out = fapply.__func__(cls, *args, **kwargs)
        if _active and _active[-1] is rec:
            rec.function(fapply.__get__(None, cls), args, kwargs, out)
        return out
    fapply = Function.__dict__["apply"]
    Function.apply = classmethod(apply)
    key = object()
    _module._global_forward_pre_hooks[key] = pre
    _module._global_forward_hooks[key] = post
    for n, (_, f) in patched.items():
        setattr(Tensor, n, f)
    Tensor._assign, Tensor.detach, Tensor._move = _assign, detach, move
    hooks.tracer = rec
    _active.append(rec)
    try:
        yield rec
    finally:
        _active.pop()
        hooks.tracer = None
        Tensor._assign, Tensor.detach, Tensor._move = assign, tdetach, tmove
        Function.apply = fapply
        for n, (own, _) in patched.items():
            setattr(Tensor, n, own) if own is not None else delattr(Tensor, n)
        _module._global_forward_pre_hooks.pop(key, None)
        _module._global_forward_hooks.pop(key, None)


def flatten_tensors(x):
    """The tensors in nested tuples/lists/dicts ``x``, in order."""
    out = []
    _map_out(x, lambda t: out.append(t) or t)
    return out


def record(fn, args, kwargs=None, module=None, names=None):
    """Run ``fn(*args, **kwargs)`` once under a ``Recorder``; return ``(recorder, result)``.
    The tensors in ``args`` (nested tuples, lists and dicts too) are the graph's inputs."""
    flat = flatten_tensors((args, kwargs or {}))
    names = names or [f"x{i}" if len(flat) > 1 else "x" for i in range(len(flat))]
    rec = Recorder(flat, names, module)
    with recording(rec):
        out = fn(*args, **(kwargs or {}))
        rec.output(out)
    return rec, out
