"""``torch.export``: a model as an op-level graph with its weights and its input constraints.

``export`` records the forward from the dispatch (the IR of ember/_graph). Sizes given as
``Dim`` in ``dynamic_shapes`` are found by tracing again with them one larger
(ember/_graph/dynamic.py): integers that follow them (a reshape's batch) become graph nodes
reading ``x.size(d)``, so ``module()`` runs at other sizes in the declared range, and checks
every input's shape against the constraints before it runs. ``ExportedProgram.graph_module``
is the lifted form (parameters, buffers and constants as leading inputs, as torch's). ember's
op level is already its decomposition: ``run_decompositions`` returns an equal program.
"""
import copy
import enum

from .. import nn
from .._graph.dynamic import retrace, sizes_as_nodes, symbolize
from .._graph.interpreter import fetch_attr
from .._graph.ir import Graph, Node
from .._graph.passes import dead_code
from .._graph.record import flatten_tensors, record
from ..fx.graph_module import GraphModule

__all__ = ["export", "ExportedProgram", "Dim", "save", "load", "ExportGraphSignature",
           "InputKind", "InputSpec", "OutputKind", "OutputSpec", "AdditionalInputs", "Constraint",
           "CustomDecompTable", "ExportBackwardSignature", "FlatArgsAdapter", "ModuleCallEntry",
           "ModuleCallSignature", "ShapesCollection", "UnflattenedModule",
           "default_decompositions", "dims", "draft_export", "register_dataclass", "unflatten"]


class Dim:
    """A dynamic dimension for ``dynamic_shapes``, with an inclusive range.

    Example:
        >>> from ember.export import Dim
        >>> Dim("batch", min=1, max=64)
        Dim('batch', min=1, max=64)
    """
    AUTO = DYNAMIC = STATIC = None         # (set below: the sentinels torch offers)

    def __init__(self, name, *, min=None, max=None):
        lo, hi = 0 if min is None else min, 2 ** 63 - 1 if max is None else max
        if lo > hi:
            raise ValueError(f"Upper bound ({hi}) must be >= lower bound ({lo}) for Dim {name}")
        self.__name__, self.min, self.max = name, lo, hi

    def __repr__(self):
        return f"Dim({self.__name__!r}, min={self.min}, max={self.max})" if self.max < 2 ** 63 - 1 \
            else f"Dim({self.__name__!r}, min={self.min})"


Dim.AUTO, Dim.DYNAMIC, Dim.STATIC = Dim("AUTO"), Dim("DYNAMIC"), "STATIC"


class InputKind(enum.Enum):
    USER_INPUT = 1
    PARAMETER = 2
    BUFFER = 3
    CONSTANT_TENSOR = 4


class OutputKind(enum.Enum):
    USER_OUTPUT = 1


class InputSpec:
    def __init__(self, kind, arg, target, persistent=None):
        self.kind, self.arg, self.target, self.persistent = kind, arg, target, persistent

    def __repr__(self):
        return f"InputSpec(kind={self.kind.name}, arg={self.arg}, target={self.target!r})"


class OutputSpec:
    def __init__(self, kind, arg, target=None):
        self.kind, self.arg, self.target = kind, arg, target

    def __repr__(self):
        return f"OutputSpec(kind={self.kind.name}, arg={self.arg}, target={self.target!r})"


class ExportGraphSignature:
    """Which inputs of the lifted graph are user inputs, parameters, buffers and constants."""

    def __init__(self, input_specs, output_specs):
        self.input_specs, self.output_specs = input_specs, output_specs

    def _of(self, kind):
        return [s for s in self.input_specs if s.kind is kind]

    parameters = property(lambda self: [s.target for s in self._of(InputKind.PARAMETER)])
    buffers = property(lambda self: [s.target for s in self._of(InputKind.BUFFER)])
    user_inputs = property(lambda self: [s.arg for s in self._of(InputKind.USER_INPUT)])
    user_outputs = property(lambda self: [s.arg for s in self.output_specs])
    inputs_to_parameters = property(lambda self: {s.arg: s.target for s in
                                                  self._of(InputKind.PARAMETER)})
    inputs_to_buffers = property(lambda self: {s.arg: s.target for s in self._of(InputKind.BUFFER)})

    def __repr__(self):
        return "ExportGraphSignature(input_specs=" + repr(self.input_specs) + \
            ", output_specs=" + repr(self.output_specs) + ")"


class ExportedProgram:
    """An exported model: ``graph_module`` (lifted), ``graph_signature``, ``state_dict``,
    ``constants``, ``range_constraints``; ``module()`` is the callable form.

    Example:
        >>> import ember
        >>> ep = ember.export.export(ember.nn.Linear(3, 2), (ember.ones(1, 3),))
        >>> ep.graph_signature.parameters
        ['weight', 'bias']
        >>> ep.module()(ember.ones(1, 3)).shape
        torch.Size([1, 2])
    """

    def __init__(self, graph, tensors, kinds, input_names, shapes, dims):
        self._graph, self._tensors, self._kinds = graph, tensors, kinds
        self._input_names, self._shapes, self._dims = input_names, shapes, dims
        self.state_dict = {k: t for k, t in tensors.items() if kinds[k] in ("parameter", "buffer")}
        self.constants = {k: t for k, t in tensors.items() if kinds[k] == "constant"}
        self.range_constraints = {d.__name__: (d.min, d.max) for d in dims.values()}
        self._lifted, self._reads = None, []

    def _lift(self):
        """The graph with parameters, buffers and constants as leading placeholders."""
        g, env = Graph(), {}
        prefix = {"parameter": "p_", "buffer": "b_", "constant": "c_"}
        kinds = {"parameter": InputKind.PARAMETER, "buffer": InputKind.BUFFER,
                 "constant": InputKind.CONSTANT_TENSOR}
        specs = []
        attrs = {n.target for n in self._graph._nodes if n.op == "get_attr"}
        for kind in ("parameter", "buffer", "constant"):
            for k in self._tensors:
                if self._kinds[k] == kind and k in attrs:
                    env[k] = g.placeholder(prefix[kind] + k.replace(".", "_"))
                    specs.append(InputSpec(kinds[kind], env[k].name, k, kind == "buffer" or None))
        for n in self._graph._nodes:
            if n.op == "placeholder":
                env[n] = g.placeholder(n.name)
                env[n].meta = dict(n.meta)
                specs.append(InputSpec(InputKind.USER_INPUT, env[n].name, None))
            elif n.op == "get_attr":
                env[n] = env[n.target]
                env[n].meta = dict(n.meta)
            elif n.op == "output":
                out = g.output(_map(n.args[0], env))
            else:
                env[n] = g.node_copy(n, lambda a: env[a])
        outs = [OutputSpec(OutputKind.USER_OUTPUT, a.name) for a in out.all_input_nodes]
        return GraphModule(nn.Module(), g), ExportGraphSignature(specs, outs)

    @property
    def graph_module(self):
        if self._lifted is None:
            self._lifted = self._lift()
        return self._lifted[0]

    graph = property(lambda self: self.graph_module.graph)

    @property
    def graph_signature(self):
        self.graph_module
        return self._lifted[1]

    def module(self):
        """A ``GraphModule`` running the program on the user inputs, checking their shapes
        against the export's constraints first; it shares this program's tensors."""
        root = {n.target: self._tensors[n.target] for n in self._graph._nodes if n.op == "get_attr"}
        gm = GraphModule(root, copy.deepcopy(self._graph), "GraphModule")
        gm.register_forward_pre_hook(lambda m, args: self._check(args) or
                                     tuple(flatten_tensors(args)))
        return gm

    @property
    def module_call_graph(self):
        """``ModuleCallEntry`` of the root (with its call signature) and of each submodule
        whose ops or weights the program holds."""
        from ._api import ModuleCallEntry, ModuleCallSignature
        paths = {n.meta.get("scope", "") for n in self._graph._nodes} | \
            {k.rpartition(".")[0] for k in self._tensors}
        subs = sorted({".".join(p.split(".")[:i + 1]) for p in paths if p
                       for i in range(p.count(".") + 1)})
        return [ModuleCallEntry("", ModuleCallSignature([], [], None, None,
                                                        list(self._input_names)))] + \
            [ModuleCallEntry(p) for p in subs]

    def _check(self, args):
        flat = flatten_tensors(args)
        if len(flat) != len(self._shapes):
            raise RuntimeError(f"Expected {len(self._shapes)} tensor inputs, but got {len(flat)}")
        for i, (t, want) in enumerate(zip(flat, self._shapes)):
            if t.dim() != len(want):
                raise RuntimeError(f"Unexpected number of dimensions in input at *args[{i}]."
                                   f"shape (expected {list(want)}, got {list(t.shape)})")
            for d, (got, w) in enumerate(zip(t.shape, want)):
                spec = self._dims.get((i, d))
                where = f"input at *args[{i}].shape[{d}]"
                if spec is None and got != w:
                    raise RuntimeError(f"Expected {where} to be equal to {w}, but got {got}")
                if spec is not None and got > spec.max:
                    raise RuntimeError(f"Expected {where} to be <= {spec.max}, but got {got}")
                if spec is not None and got < spec.min:
                    raise RuntimeError(f"Expected {where} to be >= {spec.min}, but got {got}")

    def run_decompositions(self, decomp_table=None, decompose_custom_triton_ops=False):
        """A new program with each op in ``decomp_table`` (a ``CustomDecompTable``: op to a
        function of its arguments) replaced by the ops its function records. ember's graphs
        hold ember's ops, already its core set: without a table the program is equal."""
        from ._api import decompose
        g = copy.deepcopy(self._graph)
        if decomp_table:
            decompose(g, decomp_table)
            g.lint()
        return ExportedProgram(g, self._tensors, self._kinds, self._input_names, self._shapes,
                               self._dims)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Unable to call ExportedProgram directly. You should use "
                           "`exported_program.module()` instead.")

    def __str__(self):
        code = self.graph_module.code.strip("\n").replace("\n", "\n        ")
        return (f"ExportedProgram:\n    class GraphModule(torch.nn.Module):\n        {code}\n\n"
                f"Graph signature: {self.graph_signature}\nRange constraints: "
                f"{self.range_constraints}\n")


def _map(a, env):
    if type(a) is Node:
        return env[a]
    if type(a) in (tuple, list):
        return type(a)(_map(x, env) for x in a)
    return {k: _map(v, env) for k, v in a.items()} if type(a) is dict else a


def _dims_of(dynamic_shapes, names, args, flat):
    """``{(input index, axis): Dim}`` from ``dynamic_shapes`` (by argument name, or a tuple in
    argument order), each checked against the example size."""
    if dynamic_shapes is None:
        return {}
    if isinstance(dynamic_shapes, dict):
        specs = [dynamic_shapes.get(n) for n in names]
        unknown = set(dynamic_shapes) - set(names)
        if unknown:
            raise ValueError(f"dynamic_shapes names {sorted(unknown)}, which are not inputs of "
                             f"the model (its inputs: {names})")
    else:
        specs = list(dynamic_shapes)
    out = {}
    for i, spec in enumerate(specs):
        if spec is None:
            continue
        if len(flatten_tensors(args[i])) != 1:
            raise NotImplementedError("dynamic_shapes for nested inputs is not supported yet")
        items = spec.items() if isinstance(spec, dict) else enumerate(spec)
        for ax, d in items:
            if d is None or d == Dim.STATIC:
                continue
            size = flat[i].shape[ax]
            if not d.min <= size <= d.max:
                raise RuntimeError(f"Constraints violated ({d.__name__})! The example input has "
                                   f"{names[i]}.shape[{ax}] = {size}, outside [{d.min}, {d.max}]")
            out[i, ax] = d
    return out


def export(mod, args, kwargs=None, *, dynamic_shapes=None, strict=False,
           preserve_module_call_signature=(), prefer_deferred_runtime_asserts_over_guards=False):
    """Record ``mod(*args, **kwargs)`` into an ``ExportedProgram``; ``dynamic_shapes`` maps
    argument names (or positions) to ``{axis: Dim(...)}``.

    Example:
        >>> import ember
        >>> from ember.export import Dim, export
        >>> m = ember.nn.Sequential(ember.nn.Linear(4, 2), ember.nn.Flatten(0))
        >>> ep = export(m, (ember.ones(3, 4),), dynamic_shapes={"input": {0: Dim("b", max=8)}})
        >>> ep.module()(ember.ones(5, 4)).shape
        torch.Size([10])
    """
    from ..autograd import grad_mode
    from ..onnx import _input_names
    from ._api import _resolve_dynamic_shapes, check_inputs
    if not isinstance(args, tuple):
        raise ValueError(f"Expecting `args` to be a tuple of example positional inputs, got "
                         f"{type(args)}")
    check_inputs((args, kwargs or {}))
    dynamic_shapes = _resolve_dynamic_shapes(dynamic_shapes, mod, args, kwargs)
    module = mod if isinstance(mod, nn.Module) else None
    flat = flatten_tensors((args, kwargs or {}))
    names = _input_names(mod, len(flat), None)
    dims = _dims_of(dynamic_shapes, names, args, flat)
    with grad_mode.no_grad():
        rec, _ = record(mod, args, kwargs, module=module, names=names)
        # (draft_export asserts the values Python read: their nodes, before dead code goes)
        before = copy.deepcopy(rec.graph) if rec.reads else None
        dead_code(rec.graph)
        if dims:
            # dims of one Dim (or, for Dim.DYNAMIC/AUTO, of one example size) grow together
            groups = {}
            for k, d in dims.items():
                auto = d is Dim.DYNAMIC or d is Dim.AUTO
                groups.setdefault((auto, flat[k[0]].shape[k[1]] if auto else d.__name__),
                                  []).append(k)
            tied = {g[0]: g for g in groups.values()}
            base, others = retrace(mod, args, kwargs, module, names, list(tied), tied=tied)
            symbolize(rec, others, base, names)
            if rec.symbolic:
                k = next(iter(rec.symbolic))
                raise NotImplementedError(f"export: tensor {k}, made in Python, follows a "
                                          "dynamic dim; ember's export cannot rebuild it yet")
    sizes_as_nodes(rec.graph)
    rec.graph.lint()
    tensors, kinds = {}, {}
    params = dict(module.named_parameters()) if module is not None else {}
    buffers = dict(module.named_buffers()) if module is not None else {}
    for n in rec.graph._nodes:
        if n.op == "get_attr":
            k = n.target
            if k in rec.constants:
                tensors[k], kinds[k] = rec.constants[k], "constant"
            else:
                tensors[k] = fetch_attr(module, k)
                kinds[k] = "parameter" if k in params else "buffer" if k in buffers else "constant"
    ep = ExportedProgram(rec.graph, tensors, kinds, names, [tuple(t.shape) for t in flat], dims)
    if before is not None:
        nodes = {n.name: n for n in before._nodes}
        ep._reads = [(nodes[n.name], v, what) for n, v, what in rec.reads]
    return ep


_ARCHIVE = "ember.export/1"


def save(ep, f, *, extra_files=None, opset_version=None, pickle_protocol=2):
    """Write ``ep`` to ``f`` (a ``.pt2`` path or a file): the graph as data (JSON), its tensors
    in ember's ``.pt`` zip format, its constraints.

    Example:
        >>> import ember, io
        >>> buf = io.BytesIO()
        >>> ember.export.save(ember.export.export(ember.nn.ReLU(), (ember.ones(2),)), buf)
        >>> _ = buf.seek(0)
        >>> ember.export.load(buf).module()(ember.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """
    from .._graph.serialize import dumps
    from ..serialization import save as _save
    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"save() expects an ExportedProgram but got {type(ep)}")
    _save({"format": _ARCHIVE, "graph": dumps(ep._graph), "tensors": dict(ep._tensors),
           "kinds": ep._kinds, "names": ep._input_names, "shapes": [list(s) for s in ep._shapes],
           "dims": [[i, ax, d.__name__, d.min, d.max] for (i, ax), d in ep._dims.items()],
           "extra_files": dict(extra_files or {})}, f)


def load(f, *, extra_files=None, expected_opset_version=None):
    """The ``ExportedProgram`` ``save`` wrote."""
    from .._graph.serialize import loads
    from ..serialization import load as _load
    d = _load(f, weights_only=True)
    if not isinstance(d, dict) or d.get("format") != _ARCHIVE:
        raise RuntimeError("ember.export.load: not an archive ember.export.save wrote")
    dims = {(i, ax): Dim(name, min=lo, max=hi) for i, ax, name, lo, hi in d["dims"]}
    if extra_files is not None:
        extra_files.update({k: v for k, v in d["extra_files"].items() if k in extra_files})
    return ExportedProgram(loads(d["graph"]), d["tensors"], d["kinds"], d["names"],
                           [tuple(s) for s in d["shapes"]], dims)


from ._api import AdditionalInputs, CustomDecompTable, ExportBackwardSignature, \
    FlatArgsAdapter, ModuleCallEntry, ModuleCallSignature, ShapesCollection, \
    UnflattenedModule, default_decompositions, dims, draft_export, register_dataclass, \
    unflatten  # noqa: E402

# NOTE: torch's Constraint is a typing Union of its internal constraint classes, made from
# Dims; ember's constraints are the Dims themselves.
Constraint = Dim
