"""``torch.onnx``: export a model to ONNX by tracing it into the graph IR and lowering each op.

``export`` records the model's forward from the dispatch (ember/_graph/record.py), folds what
depends only on constants, and lowers every op node with its entry in ``_lowerings.py`` (or
the OpDef's own ``onnx`` attribute). Parameters become initializers named by their state_dict
keys. It needs the ``onnx`` package (``pip install ember[onnx]``); ``import ember.onnx`` does
not, so scripts that only import it (pytorch/examples' word_language_model) start without it.
Whatever ``dynamo=`` says, this one exporter runs (ember has no second one).
"""
import enum
import inspect
import time

import numpy as np

from .. import _dtype
from .._graph.ir import GETITEM, Node
from .._tensor import Tensor
from .._graph.dynamic import SymInt, retrace, symbolize
from .errors import OnnxExporterError, UnsupportedOperatorError
from ._custom import ExportableModule, InputObserver, JitScalarType, custom_symbolic, \
    register_custom_op_symbolic, run_symbolic, select_model_mode_for_export, \
    unregister_custom_op_symbolic
from . import ops  # noqa: F401

__all__ = ["export", "TrainingMode", "OperatorExportTypes", "is_in_onnx_export",
           "UnsupportedOperatorError", "OnnxExporterError", "ONNXProgram", "ExportableModule",
           "InputObserver", "JitScalarType", "ops", "register_custom_op_symbolic",
           "select_model_mode_for_export", "unregister_custom_op_symbolic"]

_exporting = [False]


class TrainingMode(enum.IntEnum):
    """Which mode the model is exported in (torch.onnx.TrainingMode)."""
    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


class OperatorExportTypes(enum.IntEnum):
    ONNX = 0
    ONNX_ATEN = 1
    ONNX_ATEN_FALLBACK = 2
    ONNX_FALLTHROUGH = 3


def is_in_onnx_export():
    """Whether an ``export`` is tracing now."""
    return _exporting[0]


_ONNX_TYPES = {"float32": "FLOAT", "float64": "DOUBLE", "float16": "FLOAT16",
               "bfloat16": "BFLOAT16", "int64": "INT64", "int32": "INT32", "int16": "INT16",
               "int8": "INT8", "uint8": "UINT8", "bool": "BOOL"}


class V:
    """A value in the ONNX graph: its name, and the shape and dtype ember's meta rules gave."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), dtype

    def __repr__(self):
        return f"V({self.name})"

    def type(self):
        """Its type as torch's graph values give it (``sizes()``, ``scalarType()``), for
        registered symbolic functions."""
        from ._custom import _Type
        return _Type(self)


class _Builder:
    """What a lowering writes with: ``op``, ``const``, ``scalar``, ``ints``, ``cast``,
    ``promote``; ``node`` and ``out`` are the op node being lowered and its result's meta."""

    def __init__(self, onnx, opset):
        self.onnx, self.opset, self.nodes, self.inits = onnx, opset, [], {}
        self.count, self.node, self.out, self.inputs, self.dims = 0, None, None, [], {}
        self.domains = {}           # custom domains the nodes use -> opset version

    def fresh(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def onnx_type(self, dt):
        name = _ONNX_TYPES.get(dt.name)
        if name is None:
            self.unsupported(f"dtype {dt}")
        return getattr(self.onnx.TensorProto, name)

    def np(self, dt):
        return dt.np

    def op(self, op_type, *inputs, outs=1, **attrs):
        names = [self.fresh(op_type) for _ in range(outs)]
        ins = [i.name if isinstance(i, V) else "" if i is None else i for i in inputs]
        self.nodes.append(self.onnx.helper.make_node(op_type, ins, names, name=names[0], **attrs))
        return names[0] if outs == 1 else names

    def const(self, array, name=None):
        array = np.asarray(array, order="C")     # (ascontiguousarray makes 0-D 1-D)
        name = name or self.fresh("const")
        self.inits[name] = self.onnx.numpy_helper.from_array(array, name)
        return name

    def scalar(self, v, dt):
        return self.const(np.array(v, dt.np))

    def ints(self, v):
        """A 1-D int64 value of ``v`` (ints, or SymInts computed from the inputs' shapes)."""
        vals = list(v) if isinstance(v, (tuple, list)) else np.ravel(v).tolist() \
            if isinstance(v, np.ndarray) else [v]
        if not any(isinstance(x, SymInt) for x in vals):
            return self.const(np.array(vals, np.int64))
        parts = [self.sym(x) if isinstance(x, SymInt) else self.const(np.array([x], np.int64))
                 for x in vals]
        return parts[0] if len(parts) == 1 else self.op("Concat", *parts, axis=0)

    def sym(self, s):
        """SymInt ``s`` as a 1-element int64 value computed from the inputs' shapes."""
        def c(v):
            return self.const(np.array([v], np.int64))
        terms = []
        for (i, ax), a in s.dims.items():
            if (i, ax) not in self.dims:
                self.dims[i, ax] = self.op("Gather", self.op("Shape", self.inputs[i]), c(ax),
                                           axis=0)
            terms.append(self.dims[i, ax] if a == 1 else self.op("Mul", self.dims[i, ax], c(a)))
        out = terms[0]
        for t in terms[1:]:
            out = self.op("Mul" if s.prod else "Add", out, t)
        if s.prod:
            return out if s.const == 1 else self.op("Mul", out, c(s.const))
        return out if s.const == 0 else self.op("Add", out, c(s.const))

    def cast(self, v, dt):
        if not isinstance(v, V):
            return self.scalar(v, dt) if not isinstance(v, str) else v
        return v if v.dtype is dt else V(self.op("Cast", v, to=self.onnx_type(dt)), v.shape, dt)

    def promote(self, *vals, compare=False):
        """The operands in one dtype: the result's, or for a comparison the widest tensor's
        (Python numbers follow the tensors)."""
        dt = None if compare or self.out is None else self.out.dtype
        if dt is None or dt is _dtype.bool_:
            for t in vals:
                if isinstance(t, V) and (dt is None or dt is _dtype.bool_ or
                                         (t.dtype.category, t.dtype.itemsize) >
                                         (dt.category, dt.itemsize)):
                    dt = t.dtype
        return [self.cast(v, dt) if isinstance(v, V) else self.scalar(v, dt) for v in vals]

    def reduce(self, op, x, axes, keepdims):
        """``op`` (ReduceMean, ReduceMax...) over ``axes``: an attribute before opset 18 (an
        input for ReduceSum from 13), an input from 18."""
        if not axes:            # (a 0-dim input: nothing to reduce)
            return self.op("Identity", x)
        if op == "ReduceSum" or self.opset >= 18:
            return self.op(op, x, self.ints(axes), keepdims=int(keepdims))
        return self.op(op, x, axes=list(axes), keepdims=int(keepdims))

    def unsupported(self, what):
        raise UnsupportedOperatorError(_where(self.node, f"{what} is not supported by ember's "
                                                         "ONNX exporter"))


def _where(node, msg):
    scope = node.meta.get("scope", "") if node is not None else ""
    return f"{msg} (in {('model.' + scope) if scope else 'model'})"


class ONNXProgram:
    """The exported model: ``model_proto`` (an ``onnx.ModelProto``) and ``save(path)``."""

    def __init__(self, model_proto):
        self.model_proto = model_proto

    def save(self, destination):
        import onnx
        onnx.save(self.model_proto, destination)


def _input_names(model, n, given):
    if given:
        return list(given) + [f"input_{i}" for i in range(len(given), n)]
    fn = model.forward if hasattr(model, "forward") else model
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    return names[:n] if len(names) >= n else [f"input_{i}" for i in range(n)]


def _axes_of(dynamic_shapes, names):
    """``dynamic_axes`` from the dynamo exporter's ``dynamic_shapes`` (by input name or in
    order; each ``{axis: Dim or name}``)."""
    if not dynamic_shapes:
        return {}
    items = dynamic_shapes.items() if isinstance(dynamic_shapes, dict) else \
        zip(names, dynamic_shapes)
    return {k: {ax: getattr(d, "__name__", d) if not isinstance(d, str) else d
                for ax, d in (v.items() if isinstance(v, dict) else enumerate(v))
                if d is not None} for k, v in items if v}


def _check_deterministic(rec, again):
    from ..jit import _same_values
    for k, c in rec.constants.items():
        if k not in again.constants or not _same_values(c, again.constants[k]):
            raise OnnxExporterError(
                f"training=TrainingMode.TRAINING: tensor {k}, made in Python during the trace, "
                "differs between two traces (a random mask, as dropout's in training mode): "
                "the ONNX graph would fix one draw. Export in eval mode.")


def _named(axes):
    """``{axis: name}`` of a ``dynamic_axes`` entry (``{0: "batch"}`` or ``[0]``)."""
    return {a: f"dim_{a}" for a in axes} if isinstance(axes, (list, tuple)) else dict(axes)


def _dims(shape, axes):
    """ONNX dims of a value: ints, or names for its dynamic axes."""
    axes = _named(axes or {})
    return [axes.get(i, s) for i, s in enumerate(shape)]


def _moved(j, shape, others, base, labels, name):
    """``{axis: name}`` of output ``j``'s dims that changed between the traces: the input
    dim's name where they moved with exactly one, else ``<output>_dim<axis>``."""
    out = {}
    for d, size in enumerate(shape):
        seen = [tuple(_collect_meta(r)[j].shape)[d] for _, r in others]
        if all(x == size for x in seen):
            continue
        out[d] = next((labels[k] for k in labels if base[k] == size and all(
            c.get(k, base[k]) == x for (c, _), x in zip(others, seen))), f"{name}_dim{d}")
    return out


def _collect_meta(rec):
    nodes = []
    _collect(rec.graph.output_node().args[0], nodes)
    return [n.meta["val"] for n in nodes]


def _symbolic(g, kind, meta):
    """A fill or arange constant whose shape follows dynamic axes, rebuilt at run time."""
    onnx, shape, dt = g.onnx, kind[-1], meta.dtype
    if kind[0] == "fill":
        value = onnx.helper.make_tensor("value", g.onnx_type(dt), [1], [kind[1]])
        return V(g.op("ConstantOfShape", g.ints(shape), value=value), meta.shape, dt)
    start, step = (g.const(np.array(v, dt.np)) for v in kind[1:3])
    n = g.cast(V(g.ints(shape), (1,), _dtype.int64), dt)
    limit = g.op("Squeeze", g.op("Add", g.op("Mul", n, step), start), g.ints([0]))
    return V(g.op("Range", start, limit, step), meta.shape, dt)


def _lower(g, graph, module, values, do_constant_folding, params_as_inputs, symbolic):
    from .._graph.interpreter import fetch_attr
    from ..autograd import grad_mode
    from ._lowerings import LOWERINGS
    known, params = {}, {}
    if module is not None:
        params = {k: p for k, p in module.named_parameters()}

    def val(n):
        if n in values:
            return values[n]
        if n in known:              # a constant first read here: an initializer
            t = known[n]
            values[n] = V(g.const(t.detach().numpy() if isinstance(t, Tensor) else t,
                                  n.target if n.op == "get_attr" else n.name),
                          t.shape, t.dtype)
            return values[n]
        raise KeyError(n)
    for n in graph._nodes:
        if n.op == "get_attr" and n.target in symbolic:
            values[n] = _symbolic(g, symbolic[n.target], n.meta["val"])
        elif n.op == "get_attr":
            t = fetch_attr(module, n.target)
            if n.target in params and params_as_inputs:
                values[n] = V(n.target, t.shape, t.dtype)
            elif n.target in params:
                values[n] = V(g.const(t.detach().numpy(), n.target), t.shape, t.dtype)
            else:
                known[n] = t
        elif n.op == "call_method" and n.target in ("detach", "to"):
            values[n] = val(n.args[0])
        elif n.op == "call_method":         # (copy_: a write into a buffer or input)
            g.node = n
            g.unsupported(f"the in-place write into {n.args[0].target} (export in eval mode)")
        elif n.op == "call_function":
            if do_constant_folding and n.all_input_nodes and not _has_sym(n.args) and \
                    all(a in known for a in n.all_input_nodes) and hasattr(n.target, "name"):
                with grad_mode.no_grad():
                    known[n] = n.target(*_map(n.args, known.__getitem__),
                                        **_map(n.kwargs, known.__getitem__))
                continue
            if n.target is GETITEM:
                src = val(n.args[0])
                part = src[n.args[1]]
                if part is None:
                    g.node = n
                    g.unsupported(f"output {n.args[1]} of {getattr(n.args[0].target, 'name', '')}"
                                  " (its indices or saved state)")
                values[n] = V(part, n.meta["val"].shape, n.meta["val"].dtype)
                continue
            custom = custom_symbolic(n.target, g.opset)
            fn = (lambda g, *a, _f=custom, **k: run_symbolic(_f, g, a, k)) if custom else \
                getattr(n.target, "onnx", None) or LOWERINGS.get(getattr(n.target, "name", ""))
            if fn is None:
                name = getattr(n.target, "name", getattr(n.target, "__qualname__", n.target))
                raise UnsupportedOperatorError(_where(
                    n, f"Exporting the operator 'aten::{name}' to ONNX opset version "
                       f"{g.opset} is not supported"))
            g.node, g.out = n, n.meta.get("val")
            out = fn(g, *_map(n.args, val), **_map(n.kwargs, val))
            if isinstance(out, (tuple, list)):
                values[n] = list(out)
            else:
                values[n] = V(out, g.out.shape, g.out.dtype)


def _has_sym(a):
    if isinstance(a, SymInt):
        return True
    return type(a) in (tuple, list) and any(_has_sym(x) for x in a)


def _map(a, fn):
    t = type(a)
    if t is Node:
        return fn(a)
    if t in (tuple, list):
        return t(_map(x, fn) for x in a)
    return {k: _map(v, fn) for k, v in a.items()} if t is dict else a


def export(model, args=(), f=None, *, kwargs=None, export_params=True, verbose=False,
           input_names=None, output_names=None, opset_version=None, dynamic_axes=None,
           keep_initializers_as_inputs=False, dynamo=True, external_data=True, dynamic_shapes=None,
           training=TrainingMode.EVAL, do_constant_folding=True, operator_export_type=None,
           custom_opsets=None, report=False, optimize=False, verify=False, profile=False,
           dump_exported_program=False, artifacts_dir=".", fallback=False, **_ignored):
    """Export ``model`` (a module or function) called on ``args`` to ONNX, written to ``f`` (a
    path or file) when given; returns an ``ONNXProgram``.

    Parameters are initializers named by their state_dict keys (graph inputs with
    ``export_params=False``); ``dynamic_axes`` (``{"x": {0: "batch"}}``) names the dims that
    may change. The graph is the trace of one call: Python control flow and shapes read in
    Python are fixed, as in torch's TorchScript-based exporter. An op without a lowering
    raises ``UnsupportedOperatorError`` naming the op and the module path where it ran.

    Example:
        >>> import ember, io
        >>> buf = io.BytesIO()
        >>> m = ember.nn.Linear(3, 2)
        >>> p = ember.onnx.export(m, (ember.ones(1, 3),), buf)  # doctest: +SKIP
    """
    try:
        import onnx
    except ImportError:
        raise ImportError("ember.onnx.export needs the onnx package: pip install ember[onnx] "
                          "(or pip install onnx)") from None
    from .. import nn
    from .._graph.passes import dead_code
    from .._graph.record import flatten_tensors, record
    from ..autograd import grad_mode
    t0 = time.perf_counter()
    if isinstance(model, ExportableModule) and args == () and kwargs is None:
        args, kwargs = model.example_arguments()
        input_names = input_names or model.input_names()
        output_names = output_names or model.output_names()
        dynamic_shapes = dynamic_shapes or model.dynamic_shapes()
    opset = opset_version or 17
    if not 13 <= opset <= 21:
        raise ValueError(f"ember.onnx.export writes opset versions 13 to 21, not {opset}")
    args = args if isinstance(args, tuple) else (args,)
    if isinstance(args[-1], dict) and kwargs is None and len(args) > 1:
        args, kwargs = args[:-1], args[-1]
    module = model if isinstance(model, nn.Module) else None
    was_training = module.training if module is not None else False
    if module is not None and training == TrainingMode.EVAL:
        module.train(False)
    elif module is not None and training == TrainingMode.TRAINING:
        module.train(True)
    flat = flatten_tensors((args, kwargs or {}))
    names = _input_names(model, len(flat), input_names)
    dyn = dynamic_axes or _axes_of(dynamic_shapes, names)
    keys = [(names.index(k), ax) for k, axes in dyn.items() if k in names for ax in axes]
    _exporting[0] = True
    try:
        with grad_mode.no_grad():
            rec, out = record(model, args, kwargs, module=module, names=names)
            base, others = retrace(model, args, kwargs, module, names, keys, OnnxExporterError)
            if training == TrainingMode.TRAINING:       # random masks would be fixed
                again = record(model, args, kwargs, module=module, names=names)[0]
                _check_deterministic(rec, again)
    finally:
        _exporting[0] = False
        if module is not None:
            module.train(was_training)
    graph = rec.graph
    dead_code(graph)
    if others:
        symbolize(rec, others, base, names, OnnxExporterError)

    holder = _Merged(module, rec.constants)
    g = _Builder(onnx, opset)
    g.inputs, values, dyn = names, {}, dict(dyn)
    inputs = []
    for n, name in zip([n for n in graph._nodes if n.op == "placeholder"], names):
        m = n.meta["val"]
        values[n] = V(name, m.shape, m.dtype)
        inputs.append(onnx.helper.make_tensor_value_info(name, g.onnx_type(m.dtype),
                                                         _dims(m.shape, dyn.get(name))))
    _lower(g, graph, holder, values, do_constant_folding, not export_params,
           getattr(rec, "symbolic", {}))
    if not export_params and module is not None:
        for k, p in module.named_parameters():
            if any(n.op == "get_attr" and n.target == k for n in graph._nodes):
                inputs.append(onnx.helper.make_tensor_value_info(k, g.onnx_type(p.dtype),
                                                                 list(p.shape)))
    outs = flatten_tensors(out)
    out_nodes = []
    _collect(graph.output_node().args[0], out_nodes)
    onames = list(output_names or []) + [f"output_{i}" for i in range(len(output_names or ()),
                                                                         len(outs))]
    outputs = []
    labels = {(names.index(k), ax): lab for k, axes in dyn.items() if k in names
              for ax, lab in _named(axes).items()}
    for j, (node, name, t) in enumerate(zip(out_nodes, onames, outs)):
        if name not in dyn and others:      # dims that moved with the inputs' are dynamic
            dyn[name] = _moved(j, t.shape, others, base, labels, name)
        v = values.get(node)
        if v is None:           # an output that only depends on constants
            v = V(g.const(t.numpy()), t.shape, t.dtype)
        g.nodes.append(onnx.helper.make_node("Identity", [v.name], [name], name=f"out_{name}"))
        outputs.append(onnx.helper.make_tensor_value_info(name, g.onnx_type(t.dtype),
                                                          _dims(t.shape, dyn.get(name))))
    gp = onnx.helper.make_graph(g.nodes, type(model).__name__ if module is not None else
                                getattr(model, "__name__", "main_graph"), inputs, outputs,
                                list(g.inits.values()))
    domains = {**g.domains, **{d: v for d, v in (custom_opsets or {}).items()}}
    proto = onnx.helper.make_model(gp, opset_imports=[onnx.helper.make_opsetid("", opset)] + [
        onnx.helper.make_opsetid(d, v) for d, v in domains.items()], producer_name="ember")
    proto.ir_version = min(proto.ir_version, 10)
    onnx.checker.check_model(proto)
    if f is not None:
        onnx.save(proto, f) if isinstance(f, str) or hasattr(f, "__fspath__") else \
            f.write(proto.SerializeToString())
    if verbose:
        print(f"ember.onnx.export: {len(g.nodes)} nodes, {len(g.inits)} initializers, "
              f"{time.perf_counter() - t0:.2f} s")
    return ONNXProgram(proto)


class _Merged:
    """The module's attributes, and the trace's constants by their ``_tensor_constant<k>``
    names."""

    def __init__(self, module, constants):
        self._m, self._c = module, constants

    def named_parameters(self):
        return self._m.named_parameters() if self._m is not None else iter(())

    def __getattr__(self, k):
        c = self.__dict__["_c"]
        return c[k] if k in c else getattr(self.__dict__["_m"], k)


def _collect(a, out):
    if type(a) is Node:
        out.append(a)
    elif type(a) in (tuple, list):
        for x in a:
            _collect(x, out)
    elif type(a) is dict:
        for x in a.values():
            _collect(x, out)
