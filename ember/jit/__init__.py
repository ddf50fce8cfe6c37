"""``torch.jit``: tracing models into graphs of ops, and saving them without their Python code.

``trace`` runs the model once with the dispatch's tracer installed (ember/_graph/record.py):
every op call becomes a node of the graph IR, parameters and buffers are read by their
state_dict names, and the ``ScriptModule`` it returns replays the graph through the dispatch
(so the replay records autograd). ``save`` writes the graph as data (op names and arguments,
JSON) with the weights in ember's ``.pt`` zip format; ``load`` rebuilds the module in a process
that never saw its class. What the trace cannot follow (Python values read from tensors, data
dependent branches) is warned about as torch does (``TracerWarning``). ember's TorchScript is
Python: ``code`` is the graph printed as Python, and ``script`` traces rather than compiles
source (see its docstring).
"""
import warnings

from .. import nn
from .._graph import passes as _passes
from .._graph.codegen import compile_forward
from .._graph.interpreter import fetch_attr
from .._graph.record import TracerWarning, _active, flatten_tensors, record
from .._tensor import Tensor
from . import _torchscript as _ts
from ._torchscript import CompilationUnit, Error, ONNXTracedModule, RecursiveScriptClass, \
    ScriptWarning, export_opnames, fuser, jit_module_from_flatbuffer, \
    last_executed_optimized_graph, optimized_execution, run_frozen_optimizations, \
    save_jit_module_to_flatbuffer, script_if_tracing, set_fusion_strategy, strict_fusion

__all__ = ["trace", "trace_module", "script", "save", "load", "freeze", "optimize_for_inference",
           "ScriptModule", "ScriptFunction", "TracerWarning", "TracingCheckError", "ignore",
           "unused", "export", "is_scripting", "is_tracing", "annotate", "fork", "wait",
           "Future", "interface", "Attribute", "script_method", "Final", "RecursiveScriptModule",
           "TopLevelTracedModule", "TracedModule", "CompilationUnit", "Error",
           "ONNXTracedModule", "RecursiveScriptClass", "ScriptWarning", "export_opnames", "fuser",
           "isinstance", "jit_module_from_flatbuffer", "last_executed_optimized_graph",
           "optimized_execution", "run_frozen_optimizations", "save_jit_module_to_flatbuffer",
           "script_if_tracing", "set_fusion_strategy", "strict_fusion"]


class TracingCheckError(Exception):
    """``check_trace`` found that tracing the same inputs twice gave different graphs."""

    def __init__(self, graph_diff_error, tensor_compare_error=None, extra_msg=None):
        msg = "Tracing failed sanity checks!\n" + (extra_msg or "") + graph_diff_error
        if tensor_compare_error:
            msg += "\n" + tensor_compare_error
        super().__init__(msg)


class ScriptModule(nn.Module):
    """A module whose methods replay recorded graphs (``graph``, ``code``); its submodules,
    parameters and buffers are the traced module's (shared with it, by the same names).

    Example:
        >>> import ember
        >>> m = ember.jit.trace(ember.nn.Linear(3, 2), ember.ones(1, 3))
        >>> print(m.code.strip())
        def forward(self, x):
            weight = self.weight
            bias = self.bias
            linear = aten.linear(x, weight, bias);  x = weight = bias = None
            return linear
    """

    def __init__(self, original_name="ScriptModule"):
        super().__init__()
        object.__setattr__(self, "_graphs", {})
        object.__setattr__(self, "_fns", {})
        object.__setattr__(self, "_dynamic", {})    # method -> (input, axis) free to vary
        object.__setattr__(self, "original_name", original_name)

    def _get_name(self):
        return self.original_name

    def extra_repr(self):
        return f"original_name={self.original_name}"

    def _define(self, name, graph):
        """Make method ``name`` replay ``graph``."""
        fn, src = compile_forward(graph)
        self._graphs[name], self._fns[name] = graph, (fn, src)
        self._fns.pop(name + ".opt", None)
        if name != "forward":
            object.__setattr__(self, name, lambda *a: self._run(name, a))

    def _run(self, name, args):
        flat = flatten_tensors(args)
        n = sum(1 for nd in self._graphs[name]._nodes if nd.op == "placeholder")
        if len(flat) != n:
            raise RuntimeError(f"{self.original_name}.{name}() expected {n} tensor input(s) "
                               f"(as traced), but got {len(flat)}")
        free = self._dynamic.get(name, ())
        for i, (t, p) in enumerate(zip(flat, self._graphs[name]._nodes)):
            want = p.meta.get("val")
            if want is None:
                continue
            if t.dim() != len(want.shape) or any(
                    a != b and (i, d) not in free for d, (a, b) in enumerate(zip(t.shape,
                                                                                  want.shape))):
                raise RuntimeError(
                    f"{self.original_name}.{name}(): input {i} has shape {tuple(t.shape)}, but "
                    f"the trace fixed it to {want.shape}" + (" (dim 0 may vary)" if (i, 0) in
                                                            free else "") +
                    ": sizes read in Python are baked into a trace; trace again with inputs "
                    "of this shape")
        if _ts._optimize[0]:        # (the executor's optimizations: see optimized_execution)
            if name + ".opt" not in self._fns:
                g = _ts._optimized(self._graphs[name])
                self._fns[name + ".opt"] = (compile_forward(g)[0], g)
            fn, _ts._last[0] = self._fns[name + ".opt"]
        else:
            fn, _ts._last[0] = self._fns[name][0], self._graphs[name]
        return fn(self, *flat)

    def forward(self, *args):
        if "forward" not in self._graphs:
            raise RuntimeError(f"{self.original_name} has no traced forward (a submodule of a "
                               "traced module: call the top-level module)")
        return self._run("forward", args)

    graph = property(lambda self: self._graphs["forward"])

    inlined_graph = graph

    code = property(lambda self: self._fns["forward"][1])

    def save(self, f, _extra_files=None):
        """Write this module to ``f`` (see ``ember.jit.save``)."""
        save(self, f, _extra_files)


class ScriptFunction(ScriptModule):
    """A traced function: call it like the function (its constants are its buffers)."""


# ---- tracing -----------------------------------------------------------------------------------

def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _check_outputs(out, strict):
    def visit(o):
        if isinstance(o, Tensor):
            return
        if isinstance(o, (list, dict)) and strict:
            kind = "list" if isinstance(o, list) else "dict"
            raise RuntimeError(
                f"Encountering a {kind} at the output of the tracer might cause the trace to be "
                "incorrect, this is only valid if the container structure does not change based "
                "on the module's inputs. Consider using a constant container instead (e.g. for "
                "`list`, use a `tuple` instead. for `dict`, use a `NamedTuple` instead). If you "
                "absolutely need this and know the side effects, pass strict=False to trace() to "
                "allow this behavior.")
        if isinstance(o, (list, tuple)):
            for x in o:
                visit(x)
        elif isinstance(o, dict):
            for x in o.values():
                visit(x)
        else:
            raise RuntimeError("Only tensors, lists, tuples of tensors, or dictionary of tensors "
                               f"can be output from traced functions (got {type(o).__name__})")
    visit(out)


def _record(fn, inputs, module, strict):
    names = [f"x{i}" if len(flatten_tensors(inputs)) > 1 else "x"
             for i in range(len(flatten_tensors(inputs)))]
    rec, out = record(fn, inputs, module=module, names=names)
    _check_outputs(out, strict)
    _passes.dead_code(rec.graph)
    return rec, out


def _signature(g):
    """What must agree between two traces of the same inputs: ops, arguments, constants."""
    def arg(a):
        return a.name if type(a).__name__ == "Node" else repr(a)
    return [(n.op, str(n.target), _passes._key(_passes.map_arg((n.args, n.kwargs), arg)))
            for n in g._nodes]


def _compare(rec, rec2, name):
    s1, s2 = _signature(rec.graph), _signature(rec2.graph)
    if s1 != s2:
        first = next((i for i, (a, b) in enumerate(zip(s1, s2)) if a != b), min(len(s1), len(s2)))
        raise TracingCheckError(
            "ERROR: Graphs differed across invocations!\n"
            f"\tGraph diff: {name} node {first}: first trace {s1[first] if first < len(s1) else '-'}"
            f", second trace {s2[first] if first < len(s2) else '-'}")
    for k, c in rec.constants.items():
        c2 = rec2.constants.get(k)
        if c2 is None or not _same_values(c, c2):
            raise TracingCheckError(
                f"ERROR: Graphs differed across invocations!\n\tConstant {k} (a tensor made during "
                f"the trace, not from its inputs) has different values in two traces of the same "
                f"inputs: the trace baked a nondeterministic value in (random ops such as dropout "
                f"in training mode: did you forget to call .eval() on your model?)")


def _same_values(a, b, tol=0.0):
    """Same shape and values (NaNs equal), within ``tol``."""
    import numpy as np
    x, y = a.detach().numpy(force=True), b.detach().numpy(force=True)
    return x.shape == y.shape and (np.array_equal(x, y) or x.dtype.kind in "fc" and
                                   np.allclose(x, y, rtol=tol, atol=tol, equal_nan=True))


def _compare_outputs(traced, fn, inputs, tol):
    import ember
    with ember.no_grad():
        want = flatten_tensors(fn(*inputs))
        got = flatten_tensors(traced(*inputs))
    for i, (a, b) in enumerate(zip(got, want)):
        if not _same_values(a, b, tol):
            warnings.warn(f"Output nr {i + 1}. of the traced function does not match the "
                          "corresponding output of the Python function. Detailed error:\n"
                          f"Tensor-likes are not close! (shapes {tuple(a.shape)} and "
                          f"{tuple(b.shape)})", TracerWarning, stacklevel=4)


def _module_tree(module, root):
    """Give ``root`` (a ScriptModule) ``module``'s submodules (as ScriptModules), parameters and
    buffers, by the same names and the same tensor objects."""
    for k, p in module._parameters.items():
        root.register_parameter(k, p)
    for k, b in module._buffers.items():
        root.register_buffer(k, b, k not in module._non_persistent_buffers_set)
    for k, m in module._modules.items():
        if m is not None:
            child = ScriptModule(type(m).__name__)
            _module_tree(m, child)
            child.training = m.training
            root._modules[k] = child
    root.training = module.training


def _install_constants(root, rec):
    for k, c in rec.constants.items():
        root.register_buffer(k, c, persistent=False)


def trace_module(mod, inputs, optimize=None, check_trace=True, check_inputs=None,
                 check_tolerance=1e-5, strict=True, _force_outplace=False, _module_class=None,
                 _compilation_unit=None, example_inputs_is_kwarg=False, _store_inputs=True):
    """Trace methods of ``mod``: ``inputs`` maps a method name to its example inputs.

    Example:
        >>> import ember
        >>> m = ember.jit.trace_module(ember.nn.ReLU(), {"forward": ember.ones(2)})
        >>> m(ember.tensor([-1.0, 1.0]))
        tensor([0., 1.])
    """
    if not isinstance(mod, nn.Module):
        raise AttributeError("expected torch.nn.Module as the first argument")
    if not isinstance(inputs, dict):
        raise AttributeError("expected a dictionary of (method_name, input) pairs")
    root = ScriptModule(type(mod).__name__)
    _module_tree(mod, root)
    for i, (name, example) in enumerate(inputs.items()):
        fn = getattr(mod, name) if name != "forward" else mod
        chks = [c[name] if isinstance(c, dict) else c for c in check_inputs] \
            if check_inputs else None
        _method(root, name, fn, _as_tuple(example), mod, strict, check_trace, chks,
                check_tolerance, f"_{name}" if i else "")
    return root


def _method(root, name, fn, example, module, strict, check_trace, check_inputs, tol, prefix):
    """Trace ``fn`` on ``example`` into method ``name`` of ``root``: record, check (trace
    again, compare), let sizes follow the inputs' batch dims, define, compare outputs."""
    rec, _ = _record(fn, example, module, strict)
    for k in list(rec.constants):       # (each method's constants are its own)
        rec.constants[prefix + k] = rec.constants.pop(k)
        for n in rec.graph.find_nodes(op="get_attr", target=k):
            n.target = prefix + k
    if check_trace:
        _compare(rec, _record(fn, example, module, strict)[0], name)
    root._dynamic[name] = _generalize(fn, example, module, rec)
    _install_constants(root, rec)
    root._define(name, rec.graph)
    if check_trace:
        for chk in [example] + [_as_tuple(c) for c in check_inputs or ()]:
            _compare_outputs(getattr(root, name) if name != "forward" else root, fn, chk, tol)


def _generalize(fn, example, module, rec):
    """Let the graph's sizes follow the batch (dim 0) of its inputs, found by tracing again
    with it one larger (ember/_graph/dynamic.py; inputs of one batch size grow together):
    ints that follow it become ``x.size(0)`` nodes. Returns the (input, axis) pairs that may
    vary; none where the model refuses or the graph cannot follow (every size stays fixed,
    and the traced module checks its inputs' shapes)."""
    from .._graph.dynamic import retrace, sizes_as_nodes, symbolize
    flat = flatten_tensors(example)
    groups = {}
    for i, t in enumerate(flat):
        if t.dim():
            groups.setdefault(t.shape[0], []).append((i, 0))
    tied = {g[0]: g for g in groups.values()}
    names = [n.name for n in rec.graph._nodes if n.op == "placeholder"]
    state = {k: b.clone() for k, b in module.state_dict().items()} if module is not None else {}
    for keys in ([list(tied)] + ([[(0, 0)]] if len(tied) > 1 and (0, 0) in tied else [])):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TracerWarning)
                base, others = retrace(fn, example, None, module, names, keys, tied=tied)
            symbolize(rec, others, base, names, allow_symbolic=False)
        except Exception:
            continue
        finally:
            if state:       # (the extra runs must not move BatchNorm's statistics)
                module.load_state_dict(state)
        sizes_as_nodes(rec.graph)
        return {k2 for k in keys for k2 in tied[k]}
    return set()


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None,
          check_tolerance=1e-5, strict=True, _force_outplace=False, _module_class=None,
          _compilation_unit=None, example_kwarg_inputs=None, _store_inputs=True):
    """Run ``func`` (a module or function) on ``example_inputs`` and record the ops it calls;
    return a ``ScriptModule`` (``ScriptFunction`` for a function) that replays them.

    With ``check_trace``, the inputs are traced a second time and the graphs compared (a
    ``TracingCheckError`` when they differ: a nondeterministic trace), and the traced outputs
    are compared with the Python function's (a ``TracerWarning`` when they differ). The graph
    is specialized to what the trace saw: shapes read in Python and branches taken are baked
    in (reading a Python value from a traced tensor warns).

    Example:
        >>> import ember
        >>> f = ember.jit.trace(lambda x: x * 2 + 1, ember.ones(3))
        >>> f(ember.tensor([1.0, 2.0, 3.0]))
        tensor([3., 5., 7.])
    """
    if example_inputs is None and example_kwarg_inputs is not None:
        raise NotImplementedError("ember.jit.trace: example_kwarg_inputs is not supported; pass "
                                  "the inputs positionally as example_inputs")
    if isinstance(func, nn.Module):
        return trace_module(func, {"forward": example_inputs}, None, check_trace,
                            [{"forward": c} for c in check_inputs] if check_inputs else None,
                            check_tolerance, strict)
    if isinstance(func, ScriptModule):
        return func
    out = ScriptFunction(getattr(func, "__name__", "function"))
    _method(out, "forward", func, _as_tuple(example_inputs), None, strict, check_trace,
            check_inputs, check_tolerance, "")
    return out


def is_tracing():
    """Whether a trace is recording now."""
    return bool(_active) and _active[-1] is not None


def is_scripting():
    """False: ember never compiles Python source (``script`` traces)."""
    return False


def annotate(the_type, the_value):
    """``the_value`` (a type hint for TorchScript's compiler, which ember does not need)."""
    return the_value


def ignore(drop=False, **kwargs):
    """Decorator: leave a function to Python. Accepted as torch's; traces see through it."""
    if callable(drop):
        return drop
    return lambda fn: fn


def unused(fn):
    """Decorator: a method TorchScript's compiler should skip. Accepted as torch's."""
    return fn


def export(fn):
    """Decorator: a method TorchScript's compiler should compile too. Accepted as torch's."""
    return fn


RecursiveScriptModule = TopLevelTracedModule = TracedModule = ScriptModule
Final = __import__("typing").Final


class Future:
    """What ``fork`` returns: the call's result, computed at once (ember runs it inline)."""

    def __init__(self, value):
        self._value = value

    def wait(self):
        return self._value


def fork(func, *args, **kwargs):
    """Run ``func(*args, **kwargs)`` (inline: ember has no TorchScript interpreter threads).

    Example:
        >>> import ember
        >>> ember.jit.wait(ember.jit.fork(lambda x: x + 1, 1))
        2
    """
    return Future(func(*args, **kwargs))


def wait(future):
    """The value of a ``fork``."""
    return future.wait()


def interface(obj):
    """Decorator accepted as torch's (an interface type for TorchScript's compiler)."""
    return obj


def Attribute(value, type=None):
    """``value`` (TorchScript's attribute type hint)."""
    return value


def script_method(fn):
    """Decorator accepted as torch's (methods of ScriptModule subclasses)."""
    return fn


# ---- script: traces, refusing data-dependent control flow --------------------------------------

def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """A ``ScriptModule`` for ``obj`` (a module or function), made by tracing, since ember does
    not compile Python source: with ``example_inputs`` (a list of argument tuples) traced at
    once, else on the first call. Tracing each example must give the same graph, and the
    forward must not read Python values from tensors (``if x.sum() > 0``): such code depends
    on data, so script raises and points at ``trace`` (and at writing the branch with
    ``torch.where``). A ScriptModule passes through.

    Example:
        >>> import ember
        >>> m = ember.jit.script(ember.nn.Linear(2, 1), example_inputs=[(ember.ones(1, 2),)])
        >>> m.original_name
        'Linear'
    """
    if isinstance(obj, ScriptModule):
        return obj
    if example_inputs is None:
        return _LazyScript(obj)
    first = None
    for ex in example_inputs:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            m = trace(obj, _as_tuple(ex), check_trace=False, strict=False)
        data_dependent = [x for x in w if issubclass(x.category, TracerWarning)]
        for x in w:
            if x not in data_dependent:
                warnings.showwarning(x.message, x.category, x.filename, x.lineno)
        if data_dependent:
            x = data_dependent[0]
            raise RuntimeError(f"ember.jit.script: {getattr(obj, '__name__', type(obj).__name__)} "
                               f"reads a Python value from a tensor at {x.filename}:{x.lineno} "
                               f"(its control flow may depend on data), and ember's script traces "
                               f"rather than compiles Python. Use ember.jit.trace if the branch "
                               f"never changes, or compute both sides and pick with torch.where.")
        if first is None:
            first = m
        elif _signature(m.graph) != _signature(first.graph):
            raise RuntimeError("ember.jit.script: the forward records different graphs for the "
                               "example inputs (control flow depends on their shapes); trace "
                               "each case with ember.jit.trace instead")
    return first


class _LazyScript(nn.Module):
    """``script(obj)`` without example inputs: scripts on the first call, then replays."""

    def __init__(self, obj):
        super().__init__()
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_scripted", None)
        if isinstance(obj, nn.Module):
            self._modules["_obj"] = obj

    def forward(self, *args):
        if self._scripted is None:
            object.__setattr__(self, "_scripted", script(self._obj, example_inputs=[args]))
        return self._scripted(*args)

    def save(self, f, _extra_files=None):
        if self._scripted is None:
            raise RuntimeError("ember.jit.script without example_inputs traces on the first call;"
                               " call the module once (or pass example_inputs) before save")
        save(self._scripted, f, _extra_files)

    def __getattr__(self, name):
        s = self.__dict__.get("_scripted")
        if name in ("graph", "code") and s is not None:
            return getattr(s, name)
        return super().__getattr__(name)


# ---- freezing ----------------------------------------------------------------------------------

def freeze(mod, preserved_attrs=None, optimize_numerics=True):
    """A copy of ``mod`` (a traced module in eval mode) whose parameters and buffers are
    constants of the graph, with constant subexpressions folded: no state_dict, no training.

    Example:
        >>> import ember
        >>> m = ember.jit.trace(ember.nn.Linear(2, 1).eval(), ember.ones(1, 2))
        >>> list(ember.jit.freeze(m).state_dict())
        []
    """
    if not isinstance(mod, ScriptModule):
        raise RuntimeError("Freezing expects a ScriptModule as input. Please use torch.jit.script "
                           "or torch.jit.trace to script your 'nn.Module'.")
    if mod.training:
        raise RuntimeError("Freezing is currently only implemented for modules in eval mode. "
                           "Please call .eval() on your module before freezing.")
    import copy
    keep = set(preserved_attrs or ())
    out = ScriptModule(mod.original_name)
    out.training = False
    for name, g in mod._graphs.items():
        g = copy.deepcopy(g)
        for n in g._nodes:
            if n.op == "get_attr" and n.target not in keep:
                new = "_frozen_" + n.target.replace(".", "_")
                if not hasattr(out, new):
                    out.register_buffer(new, fetch_attr(mod, n.target).detach(), persistent=False)
                n.target = new
        _passes.PassManager([_passes.cse, _passes.dead_code,
                             lambda g: _passes.fold_constants(g, out)])(g)
        out._define(name, g)
        out._dynamic[name] = set(mod._dynamic.get(name, ()))
    return out


def optimize_for_inference(mod, other_methods=None):
    """``freeze(mod)`` (in eval mode) with its graph cleaned (common subexpressions merged,
    dead code removed, constants folded). ember fuses nothing yet: no kernel changes.

    Example:
        >>> import ember
        >>> m = ember.jit.trace(ember.nn.Linear(2, 1).eval(), ember.ones(1, 2))
        >>> ember.jit.optimize_for_inference(m).training
        False
    """
    if mod.training:
        mod = mod.eval()
    frozen = mod if not any(True for _ in mod.parameters()) and not mod.training else \
        freeze(mod, optimize_numerics=True)
    return frozen


# ---- archives ----------------------------------------------------------------------------------

_ARCHIVE = "ember.jit/1"


def save(m, f, _extra_files=None):
    """Write traced module ``m`` to ``f`` (a path or file): its graphs as data (op names and
    arguments, JSON; no Python code, no pickled classes) and its tensors in ember's ``.pt``
    zip format. ``load`` reads it in any process.

    Example:
        >>> import ember, io
        >>> buf = io.BytesIO()
        >>> ember.jit.save(ember.jit.trace(ember.nn.ReLU(), ember.ones(2)), buf)
        >>> _ = buf.seek(0)
        >>> ember.jit.load(buf)(ember.tensor([-1.0, 3.0]))
        tensor([0., 3.])
    """
    from .._graph.serialize import dumps
    from ..serialization import save as _save
    if not isinstance(m, ScriptModule):
        if isinstance(m, _LazyScript):
            return m.save(f, _extra_files)
        raise TypeError("ember.jit.save: expected a ScriptModule (from ember.jit.trace or "
                        f"ember.jit.script), got {type(m).__name__}")
    tensors, kinds = {}, {}
    for prefix, sub in m.named_modules(remove_duplicate=False):
        pre = prefix + "." if prefix else ""
        for k, p in sub._parameters.items():
            if p is not None:
                tensors[pre + k], kinds[pre + k] = p.detach(), "parameter"
        for k, b in sub._buffers.items():
            if b is not None:
                tensors[pre + k] = b
                kinds[pre + k] = "constant" if k in sub._non_persistent_buffers_set else "buffer"
    modules = [[p, getattr(s, "original_name", type(s).__name__), s.training]
               for p, s in m.named_modules(remove_duplicate=False)]
    _save({"format": _ARCHIVE, "graphs": {k: dumps(g) for k, g in m._graphs.items()},
           "modules": modules, "kinds": kinds, "tensors": tensors,
           "dynamic": {k: sorted(v) for k, v in m._dynamic.items()},
           "extra_files": dict(_extra_files or {}), "function": isinstance(m, ScriptFunction)}, f)


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    """The module ``save`` wrote, rebuilt without its Python class.

    Example:
        >>> import ember, io
        >>> buf = io.BytesIO()
        >>> ember.jit.trace(ember.nn.Linear(2, 2), ember.ones(1, 2)).save(buf)
        >>> _ = buf.seek(0)
        >>> sorted(ember.jit.load(buf).state_dict())
        ['bias', 'weight']
    """
    from .._graph.serialize import loads
    from ..serialization import load as _load
    d = _load(f, map_location=map_location, weights_only=True)
    if not isinstance(d, dict) or d.get("format") != _ARCHIVE:
        raise RuntimeError("ember.jit.load: not an archive ember.jit.save wrote (TorchScript "
                           "archives from torch.jit.save hold TorchScript code ember cannot run)")
    subs = {}
    for path, name, training in d["modules"]:
        s = (ScriptFunction if d["function"] and not path else ScriptModule)(name)
        s.training = training
        subs[path] = s
        if path:
            parent, _, leaf = path.rpartition(".")
            subs[parent]._modules[leaf] = s
    for k, t in d["tensors"].items():
        parent, _, leaf = k.rpartition(".")
        kind = d["kinds"][k]
        if kind == "parameter":
            subs[parent].register_parameter(leaf, nn.Parameter(t, t.dtype.is_floating_point))
        else:
            subs[parent].register_buffer(leaf, t, kind == "buffer")
    root = subs[""]
    for k, g in d["graphs"].items():
        root._define(k, loads(g))
        root._dynamic[k] = {tuple(x) for x in d.get("dynamic", {}).get(k, ())}
    if _extra_files is not None:
        _extra_files.update({k: v for k, v in d["extra_files"].items() if k in _extra_files})
    return root


def __getattr__(name):
    # (jit.isinstance is served here so the builtin stays the one this module's code calls)
    if name == "isinstance":
        return _ts.jit_isinstance
    raise AttributeError(f"module 'ember.jit' has no attribute '{name}'")
