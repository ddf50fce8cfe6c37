"""The rest of ``torch.export``: building ``dynamic_shapes`` specs (``dims``,
``ShapesCollection``, ``AdditionalInputs``), dataclass inputs (``register_dataclass``),
``draft_export`` (a program and a report instead of an error), ``unflatten`` (the module
hierarchy rebuilt from the graph's module scopes), decomposition tables and the signature
records torch's ExportedProgram carries.
"""
import abc
import copy
import dataclasses
import warnings

from .. import nn
from .._graph.record import DATACLASSES as _DATACLASSES, flatten_tensors
from .._graph.ir import GETITEM, Graph, Node, map_arg, side_effectful_functions
from ..fx.graph_module import GraphModule


def dims(*names, min=None, max=None):
    """One ``Dim`` per name, all with the same range.

    Example:
        >>> from ember.export import dims
        >>> dims("batch", "seq", max=64)
        (Dim('batch', min=0, max=64), Dim('seq', min=0, max=64))
    """
    from . import Dim
    return tuple(Dim(n, min=min, max=max) for n in names)


def _arg_names(m, args, kwargs):
    from ..onnx import _input_names
    return _input_names(m, len(args), None) + list(kwargs or {})


def _tree(a, fn):
    """``a`` with each tensor ``t`` replaced by ``fn(t)``, each other leaf by None; a container
    holding no spec at all collapses to None (ember's export takes specs per tensor)."""
    from .._tensor import Tensor
    if isinstance(a, Tensor):
        return fn(a)
    if type(a) in (tuple, list) or type(a) in _DATACLASSES:
        parts = [_tree(x, fn) for x in (a if type(a) in (tuple, list) else _fields(a))]
        return None if all(p is None for p in parts) else type(a)(parts) \
            if type(a) in (tuple, list) else parts
    if type(a) is dict:
        parts = {k: _tree(v, fn) for k, v in a.items()}
        return None if all(p is None for p in parts.values()) else parts
    return None


class ShapesCollection:
    """``dynamic_shapes`` given per tensor: ``sc[x] = {0: Dim("b")}``, then
    ``sc.dynamic_shapes(model, args, kwargs)`` lays them out as the model's arguments are.

    Example:
        >>> import ember
        >>> from ember.export import Dim, ShapesCollection
        >>> x = ember.ones(2, 3)
        >>> sc = ShapesCollection()
        >>> sc[x] = {0: Dim("b")}
        >>> sc.dynamic_shapes(ember.nn.ReLU(), (x,))
        {'input': {0: Dim('b', min=0)}}
    """

    def __init__(self):
        self._shapes = {}

    def __setitem__(self, t, shape):
        from .._tensor import Tensor
        if not isinstance(t, Tensor):
            raise ValueError(f"Cannot assign shape to non-tensor type {type(t)}")
        self._shapes[id(t)] = (t, shape)

    def __getitem__(self, t):
        return self._shapes.setdefault(id(t), (t, {}))[1]

    def __len__(self):
        return len(self._shapes)

    def dynamic_shapes(self, m, args, kwargs=None):
        found = set()

        def spec(t):
            if id(t) in self._shapes:
                found.add(id(t))
                return self._shapes[id(t)][1]
        out = {n: _tree(a, spec) for n, a in zip(_arg_names(m, args, kwargs),
                                                 list(args) + list((kwargs or {}).values()))}
        if set(self._shapes) - found:
            raise ValueError("Some tensors that were assigned shapes were not found in args. "
                             "Maybe such tensors were copied when passing them as args? Maybe "
                             "such tensors are contained in classes that were not registered "
                             "with pytree?")
        return out


class AdditionalInputs:
    """``dynamic_shapes`` inferred from more example inputs: each size that differs between
    them and the export's example is ``Dim.DYNAMIC``; ``verify(ep)`` checks the program
    accepts every example.

    Example:
        >>> import ember
        >>> from ember.export import AdditionalInputs
        >>> ai = AdditionalInputs()
        >>> ai.add((ember.ones(4, 3),))
        >>> ai.dynamic_shapes(ember.nn.ReLU(), (ember.ones(2, 3),))
        {'input': (Dim('DYNAMIC', min=0), None)}
    """

    def __init__(self):
        self._examples = []

    def add(self, args, kwargs=None):
        if not isinstance(args, tuple):
            raise AssertionError(f"Representative args {args} must be a tuple")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise AssertionError(f"Representative kwargs {kwargs} must be None or a dict")
        self._examples.append((args, kwargs))

    def dynamic_shapes(self, m, args, kwargs=None):
        from . import Dim
        from .._tensor import Tensor
        names = _arg_names(m, args, kwargs)

        def leaves(a, kw):
            return dict(zip(names, list(a) + list((kw or {}).values())))
        base, others = leaves(args, kwargs), [leaves(a, k) for a, k in self._examples]

        def mark(v, *vs):
            if not all(type(v) is type(o) for o in vs):
                raise ValueError("The following inputs were found to have differing types, so "
                                 f"they cannot be marked as dynamic: {(v,) + vs}.")
            if isinstance(v, Tensor):
                if any(o.dim() != v.dim() for o in vs):
                    raise ValueError("The following inputs were found to have differing "
                                     "ranks, so they cannot be marked as dynamic: "
                                     f"{tuple(tuple(x.shape) for x in (v,) + vs)}.")
                return tuple(None if all(o.shape[d] == s for o in vs) else Dim.DYNAMIC
                             for d, s in enumerate(v.shape))
            if type(v) in (tuple, list):
                return type(v)(mark(*xs) for xs in zip(v, *vs))
            if type(v) is dict:
                return {k: mark(v[k], *(o[k] for o in vs)) for k in v}
            if isinstance(v, int) and not isinstance(v, bool):
                return None if all(o == v for o in vs) else Dim.DYNAMIC
            if not all(o == v for o in vs):
                raise ValueError("The following inputs were found to have differing values, "
                                 f"but they cannot be marked as dynamic: {(v,) + vs}.")
            return None
        return {n: mark(base[n], *(o[n] for o in others)) for n in names}

    def verify(self, ep):
        """Check that ``ep.module()`` accepts each added example (shapes within the
        program's constraints)."""
        for args, kwargs in self._examples:
            ep._check(flatten_tensors((args, kwargs or {})))


def _resolve_dynamic_shapes(dynamic_shapes, mod, args, kwargs):
    if isinstance(dynamic_shapes, (ShapesCollection, AdditionalInputs)):
        return dynamic_shapes.dynamic_shapes(mod, args, kwargs)
    return dynamic_shapes


# ---- dataclass inputs ---------------------------------------------------------------------------

def _fields(obj):
    return [getattr(obj, f) for f in _DATACLASSES[type(obj)]]


def register_dataclass(cls, *, serialized_type_name=None):
    """Let instances of dataclass ``cls`` be export (and trace) inputs: their fields are
    flattened, tensors becoming graph inputs.

    Example:
        >>> import dataclasses, ember
        >>> @dataclasses.dataclass
        ... class Inp:
        ...     x: ember.Tensor
        ...     y: ember.Tensor
        >>> ember.export.register_dataclass(Inp)
        >>> class M(ember.nn.Module):
        ...     def forward(self, inp):
        ...         return inp.x + inp.y
        >>> ep = ember.export.export(M(), (Inp(ember.ones(2), ember.ones(2)),))
        >>> ep.module()(Inp(ember.ones(2), ember.zeros(2)))
        tensor([1., 1.])
    """
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise ValueError("field_names must be specified with a list of all fields used to "
                         f"initialize {cls}, as it is not a dataclass.")
    _DATACLASSES[cls] = [f.name for f in dataclasses.fields(cls) if f.init]


def check_inputs(args):
    """Refuse an unregistered dataclass among export inputs (its tensors would be baked in)."""
    def visit(a):
        if dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) not in _DATACLASSES:
            raise ValueError(f"Unsupported input type {type(a)}. Export only supports pytree "
                             "containers of basic types (Tensor, int, float, ...) as input. To "
                             "register a custom dataclass, use torch.export.register_dataclass.")
        for x in (a if type(a) in (tuple, list) else a.values() if type(a) is dict else
                  _fields(a) if type(a) in _DATACLASSES else ()):
            visit(x)
    visit(args)


# ---- signatures and decomposition tables --------------------------------------------------------

@dataclasses.dataclass
class ExportBackwardSignature:
    """Which outputs of a joint graph are the gradients of which parameters and inputs."""
    gradients_to_parameters: dict
    gradients_to_user_inputs: dict
    loss_output: str


@dataclasses.dataclass
class ModuleCallSignature:
    """A module call's inputs and outputs in the graph (``in_spec``/``out_spec``: the
    arguments' nesting; ember keeps no pytree specs, so these are None)."""
    inputs: list
    outputs: list
    in_spec: object = None
    out_spec: object = None
    forward_arg_names: list = None

    def replace_all_uses_with(self, original_node, new_node):
        for xs in (self.inputs, self.outputs):
            for a in xs:
                if getattr(a, "name", None) == original_node.name:
                    a.name = new_node.name


@dataclasses.dataclass
class ModuleCallEntry:
    """One module of the exported model, by its path (``fqn``); the root carries its call
    signature."""
    fqn: str
    signature: ModuleCallSignature = None


def _op_key(k):
    return getattr(k, "name", str(k)).split("::")[-1].split(".")[0]


class CustomDecompTable(dict):
    """Decompositions for ``ExportedProgram.run_decompositions``: op (an OpDef or its name,
    ``"aten::gelu"``) to a function of the op's arguments written with ember ops. ember's ops
    are already its core set, so the default table is empty: entries added are applied.

    Example:
        >>> import ember
        >>> t = ember.export.default_decompositions()
        >>> t["aten::relu"] = lambda x: ember.clamp(x, min=0)
        >>> ep = ember.export.export(ember.nn.ReLU(), (ember.ones(2),)).run_decompositions(t)
        >>> [n.target.name for n in ep.graph.nodes if n.op == "call_function"]
        ['clamp']
    """

    def __setitem__(self, k, v):
        super().__setitem__(_op_key(k), v)

    def __getitem__(self, k):
        return super().__getitem__(_op_key(k))

    def __contains__(self, k):
        return super().__contains__(_op_key(k))

    def pop(self, k, *default):
        return super().pop(_op_key(k), *default)

    def copy(self):
        return CustomDecompTable(self)

    def materialize(self):
        return dict(self)


def default_decompositions():
    """The default ``CustomDecompTable`` (empty: ember's ops are its core op set).

    Example:
        >>> import ember
        >>> len(ember.export.default_decompositions())
        0
    """
    return CustomDecompTable()


def decompose(graph, table):
    """Replace each node whose op is in ``table`` by the ops its decomposition records (run
    on zeros of the node's input shapes), in place."""
    import ember
    from .._graph.record import record
    for n in list(graph._nodes):
        if n.op != "call_function" or not hasattr(n.target, "name") or n.target not in table:
            continue
        inputs = n.all_input_nodes
        ex = [ember.zeros(a.meta["val"].shape, dtype=a.meta["val"].dtype) for a in inputs]
        sub = {a: i for i, a in enumerate(inputs)}

        def fn(*ts, n=n, sub=sub):
            return table[n.target](*map_arg(n.args, lambda a: ts[sub[a]]),
                                   **map_arg(n.kwargs, lambda a: ts[sub[a]]))
        rec, _ = record(fn, tuple(ex))
        env = dict(zip([p for p in rec.graph._nodes if p.op == "placeholder"], inputs))
        with graph.inserting_before(n):
            for m in rec.graph._nodes:
                if m.op == "output" and not isinstance(m.args[0], Node):
                    raise NotImplementedError("run_decompositions: a decomposition must "
                                              "return one tensor")
                if m.op == "output":
                    n.replace_all_uses_with(env[m.args[0]])
                elif m.op == "get_attr":
                    raise NotImplementedError(f"run_decompositions: the decomposition of "
                                              f"{n.target.name} makes a tensor constant")
                elif m.op != "placeholder":
                    env[m] = graph.node_copy(m, env.__getitem__)
                    env[m].meta.setdefault("scope", n.meta.get("scope", ""))
        graph.erase_node(n)


# ---- draft_export -------------------------------------------------------------------------------

class FailureType:
    MISSING_FAKE_KERNEL, DATA_DEPENDENT_ERROR, GUARD_ADDED, MISMATCHED_FAKE_KERNEL = range(1, 5)


_TITLES = {2: "Data dependent error", 3: "Guard Added"}


class FailureReport:
    """One issue ``draft_export`` worked around."""

    def __init__(self, failure_type, data, xfail=False):
        self.failure_type, self.data, self.xfail = failure_type, data, xfail

    def print(self, str_to_filename=None):
        return f"{_TITLES[self.failure_type]}.\n    {self.data['message']}"

    def __repr__(self):
        return f"FailureReport(failure_type={self.failure_type}, data={self.data})"


class DraftExportReport:
    """What ``draft_export`` found: ``failures`` (each a ``FailureReport``), ``successful()``."""

    def __init__(self, failures):
        self.failures, self.op_profiles, self.expressions_created = failures, {}, {}

    def successful(self):
        return not self.failures or all(f.xfail for f in self.failures)

    def __str__(self):
        bar = "#" * 94
        if self.successful():
            return (f"\n{bar}\nCongratulations: No issues are found during export, and it was "
                    f"able to soundly produce a graph.\nYou can now change back to "
                    f"torch.export.export()\n{bar}\n")
        return (f"\n{bar}\nWARNING: {len(self.failures)} issue(s) found during export, and it "
                f"was not able to soundly produce a graph.\nPlease follow the instructions to "
                f"fix the errors.\n{bar}\n\n" +
                "\n".join(f"{i}. {f.print()}" for i, f in enumerate(self.failures, 1)))


def draft_export(mod, args, kwargs=None, *, dynamic_shapes=None,
                 preserve_module_call_signature=(), strict=False, pre_dispatch=True,
                 prefer_deferred_runtime_asserts_over_guards=False):
    """``export`` that returns a program and a report (``ep._report``) instead of raising:
    Python values read from tensors are specialized to the example's (a data-dependent
    failure, with the user's line; the program asserts the value at run time, as torch's),
    and dynamic dims the model cannot follow are fixed to the example's sizes (a guard-added
    failure).

    Example:
        >>> import ember
        >>> class M(ember.nn.Module):
        ...     def forward(self, x):
        ...         return ember.zeros(int(x.sum().item())) + 1
        >>> ep = ember.export.draft_export(M(), (ember.ones(3),))
        >>> ep._report.successful(), ep._report.failures[0].failure_type
        (False, 2)
    """
    from . import Dim, export
    from .._graph.record import TracerWarning
    failures = []
    dynamic_shapes = _resolve_dynamic_shapes(dynamic_shapes, mod, args, kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TracerWarning)
        try:
            ep = export(mod, args, kwargs, dynamic_shapes=dynamic_shapes)
        except Exception as e:
            if dynamic_shapes is None:
                raise
            names = _arg_names(mod, args, kwargs)
            dyn = dynamic_shapes if isinstance(dynamic_shapes, dict) else \
                dict(zip(names, dynamic_shapes))
            keep = {}
            for name, spec in dyn.items():      # (the dims the model follows alone stay)
                items = spec.items() if isinstance(spec, dict) else enumerate(spec or ())
                for ax, d in items:
                    if d is None or d == Dim.STATIC:
                        continue
                    try:
                        export(mod, args, kwargs, dynamic_shapes={name: {ax: d}})
                        keep.setdefault(name, {})[ax] = d
                    except Exception as e2:
                        failures.append(FailureReport(FailureType.GUARD_ADDED, {
                            "expr": f"{name}.shape[{ax}] specialized", "message":
                            f"{name}.shape[{ax}] (Dim {getattr(d, '__name__', d)!r}) was "
                            f"specialized to its example size: {e2}", "error": str(e)}))
            ep = export(mod, args, kwargs, dynamic_shapes=keep or None)
    for w in caught:
        if issubclass(w.category, TracerWarning):
            failures.append(FailureReport(FailureType.DATA_DEPENDENT_ERROR, {
                "message": f"When exporting, a Python value was read from a tensor "
                           f"({str(w.message).split(' might')[0].lower()}), at {w.filename}:"
                           f"{w.lineno}. As a result, it was specialized to the example's "
                           "value: the program gives the example's result there for other "
                           "inputs.", "filename": w.filename, "lineno": w.lineno}))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    # the specialized values, checked at run time (recomputed before the output where dead
    # code elimination dropped the nodes: their values had no reader in the graph)
    g, env = ep._graph, {}
    alive = {n.name: n for n in g._nodes}

    def revive(n):
        if n.name in alive:
            return alive[n.name]
        if n.name not in env:
            env[n.name] = g.node_copy(n, revive)
        return env[n.name]
    with g.inserting_before(g.output_node()):
        for node, value, what in ep._reads:
            g.call_function(_assert_value, (revive(node), value.tolist(), what))
    ep._report = DraftExportReport(failures)
    return ep


def _assert_value(t, expected, what):
    """The runtime assert ``draft_export`` inserts where the trace read ``t`` as ``what``."""
    got = t.tolist()
    if got != expected:
        raise RuntimeError(f"Runtime assertion failed: the exported program was specialized to "
                           f"{expected} where the model converted a tensor to {what}, but got "
                           f"{got}; export again with this input or rewrite the model so the "
                           "value stays in tensors")


side_effectful_functions.add(_assert_value)


# ---- unflatten ----------------------------------------------------------------------------------

class FlatArgsAdapter(abc.ABC):
    """Adapts the flat inputs an ``UnflattenedModule`` is called with to those the program
    expects (``adapt``), where they differ."""

    @abc.abstractmethod
    def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
        """The flat inputs the program takes, from ``input_args``."""

    def get_flat_arg_paths(self):
        return []


def _scopes(graph):
    """Each node's module path: recorded ones as recorded; nodes made after recording (size
    reads, attribute reads) take their first user's."""
    out = {}
    for n in reversed(graph._nodes):
        s = n.meta.get("scope") if n.op not in ("placeholder", "output") else ""
        if s is None:
            s = next((out[u] for u in n.users if u in out), "")
        out[n] = s
    return out


def _inside(scope, path):
    return scope == path or scope.startswith(path + ".")


def _build(nodes, path, scope, originals, used):
    """The graph of module ``path`` from ``nodes`` (in order, all inside ``path``): its own
    nodes copied, each run of a child's nodes one ``call_module``; returns (graph, inputs,
    outputs), the outer nodes the graph takes and gives."""
    g, env, inputs = Graph(), {}, []
    pre = path + "." if path else ""

    def ref(a):
        if a in env:
            return env[a]
        if a.op == "get_attr" and (not path or a.target.startswith(pre)):
            env[a] = g.get_attr(a.target[len(pre):])
        else:
            inputs.append(a)
            env[a] = g.placeholder(a.name)
        env[a].meta = dict(a.meta)
        return env[a]
    inner, i = set(nodes), 0
    while i < len(nodes):
        n = nodes[i]
        if scope[n] == path or n.op in ("placeholder", "output", "get_attr"):
            if n.op == "placeholder":
                ref(n)
            elif n.op not in ("get_attr", "output"):
                env[n] = g.node_copy(n, ref)
            i += 1
            continue
        child = scope[n][len(pre):].split(".")[0]
        j = i
        while j < len(nodes) and (nodes[j].op == "get_attr" or
                                  _inside(scope[nodes[j]], pre + child)):
            j += 1
        run = [m for m in nodes[i:j] if m.op != "get_attr"]
        sub, sub_in, sub_out = _build(run, pre + child, scope, originals, used)
        k = used[pre + child] = used.get(pre + child, -1) + 1
        name = child if not k else f"{child}_{k}"   # (a second call of one submodule)
        originals[path]._modules[name] = _interpreter(originals[pre + child], sub)
        call = g.call_module(name, tuple(ref(a) for a in sub_in))
        for o, v in zip(sub_out, [call] if len(sub_out) == 1 else
                        [g.call_function(GETITEM, (call, k)) for k in range(len(sub_out))]):
            env[o] = v
        i = j
    out_node = next((n for n in nodes if n.op == "output"), None)
    if out_node is not None:
        g.output(map_arg(out_node.args[0], env.__getitem__))
        return g, inputs, []
    outs = [n for n in nodes if any(u not in inner for u in n.users)]
    g.output(env[outs[0]] if len(outs) == 1 else tuple(env[o] for o in outs))
    return g, inputs, outs


def _interpreter(holder, graph):
    """A submodule of an ``UnflattenedModule``: the ops that ran in it, as a GraphModule
    holding its parameters and buffers (and the children it never called)."""
    gm = GraphModule(holder, graph, "InterpreterModule")
    for k, m in holder._modules.items():
        gm._modules.setdefault(k, m)
    return gm


def _holder(tensors, kinds, scope):
    """Modules at every path, holding the program's parameters, buffers and constants."""
    root = nn.Module()
    order = dict.fromkeys(scope[n] for n in reversed(list(scope)))  # (in call order)

    def at(path):
        m = root
        for p in path:
            if p not in m._modules:
                m._modules[p] = nn.Module()
            m = m._modules[p]
        return m
    for s in order:
        at(s.split(".") if s else [])
    for k, t in tensors.items():
        *path, leaf = k.split(".")
        if kinds[k] == "parameter":
            at(path).register_parameter(leaf, t if isinstance(t, nn.Parameter) else
                                        nn.Parameter(t, t.requires_grad))
        else:
            at(path).register_buffer(leaf, t, kinds[k] == "buffer")
    return root


class UnflattenedModule(GraphModule):
    """An ``ExportedProgram`` as a module tree again: each submodule of the exported model is
    an ``InterpreterModule`` (a GraphModule) of the ops that ran in it, called from its
    parent's graph (``call_module``) and holding its parameters and buffers by their original
    names. A module reachable by several paths is one submodule per path (in call order);
    one path called twice gets a second module (``name_1``) sharing its weights."""

    def __init__(self, export_module, flat_args_adapter=None):
        ep = export_module
        graph = copy.deepcopy(ep._graph)
        scope = _scopes(graph)
        holder = _holder(ep._tensors, ep._kinds, scope)
        originals = dict(holder.named_modules())
        g, _, _ = _build(list(graph._nodes), "", scope, originals, {})
        super().__init__(holder, g, "UnflattenedModule")
        for k, m in holder._modules.items():
            self._modules.setdefault(k, m)
        n_in = len(ep._shapes)
        self.flat_args_adapter = flat_args_adapter

        def pre(m, args):
            flat = flatten_tensors(args)
            if len(flat) != n_in:
                if flat_args_adapter is None:
                    raise TypeError("There is no flat args adapter specified. Are you sure you "
                                    "are calling this with the right arguments? ")
                flat = flat_args_adapter.adapt(None, None, flat)
            ep._check(flat)
            return tuple(flat)
        self.register_forward_pre_hook(pre)


def unflatten(module, flat_args_adapter=None):
    """The module hierarchy of an exported model, rebuilt from ``module`` (an
    ``ExportedProgram``): an ``UnflattenedModule`` whose submodules (by their original paths)
    each run the ops recorded in them.

    Example:
        >>> import ember
        >>> nn = ember.nn
        >>> m = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 1)))
        >>> u = ember.export.unflatten(ember.export.export(m, (ember.ones(1, 3),)))
        >>> sorted(u.state_dict())
        ['0.bias', '0.weight', '1.1.bias', '1.1.weight']
        >>> [n.op for n in u.graph.nodes]
        ['placeholder', 'call_module', 'call_module', 'output']
    """
    return UnflattenedModule(module, flat_args_adapter)
