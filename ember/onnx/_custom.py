"""User extension points of the ONNX exporter, as torch.onnx names them: symbolic functions
registered per op (``register_custom_op_symbolic``), written against a torch-style graph
context (``g.op("domain::Op", x, alpha_f=1.0)``); ``JitScalarType``; training-mode selection;
``ExportableModule`` (a model that carries its own example inputs); ``InputObserver`` (example
inputs and dynamic shapes collected from real calls).
"""
import abc
import contextlib
import enum
import inspect
import re

import numpy as np

from .. import nn
from .errors import OnnxExporterError

# ---- JitScalarType ------------------------------------------------------------------------------

# per type, in JitScalarType's order: scalar name, torch's C++ name, ONNX TensorProto type (0:
# none), ember's dtype
_TYPES = [(n, c, int(o), None if d == "-" else d) for n, c, o, d in (t.split(":") for t in """
    Byte:uint8_t:2:uint8 Char:int8_t:3:int8 Short:int16_t:5:int16 Int:int:6:int32
    Long:int64_t:7:int64 Half:half:10:float16 Float:float:1:float32 Double:double:11:float64
    ComplexHalf:complex32:0:complex32 ComplexFloat:complex64:14:complex64
    ComplexDouble:complex128:15:complex128 Bool:bool:9:bool QInt8:qint8:3:qint8
    QUInt8:quint8:2:quint8 QInt32:qint32:6:qint32 BFloat16:bfloat16:16:bfloat16
    Float8E5M2:float8_e5m2:19:float8_e5m2 Float8E4M3FN:float8_e4m3fn:17:float8_e4m3fn
    Float8E5M2FNUZ:float8_e5m2fnuz:20:float8_e5m2fnuz
    Float8E4M3FNUZ:float8_e4m3fnuz:18:float8_e4m3fnuz Undefined:-:0:-""".split())]


class JitScalarType(enum.IntEnum):
    """Scalar types as the TorchScript-based exporter numbers them, with conversions to and
    from dtypes, ONNX types and names.

    Example:
        >>> import ember
        >>> from ember.onnx import JitScalarType
        >>> t = JitScalarType.from_dtype(ember.float32)
        >>> t, t.onnx_type(), t.scalar_name(), t.dtype()
        (<JitScalarType.FLOAT: 6>, 1, 'Float', torch.float32)
    """
    UINT8, INT8, INT16, INT, INT64, HALF, FLOAT, DOUBLE, COMPLEX32, COMPLEX64, COMPLEX128, \
        BOOL, QINT8, QUINT8, QINT32, BFLOAT16, FLOAT8E5M2, FLOAT8E4M3FN, FLOAT8E5M2FNUZ, \
        FLOAT8E4M3FNUZ, UNDEFINED = range(21)

    @classmethod
    def from_dtype(cls, dtype):
        for t in cls:
            if dtype is not None and _TYPES[t][3] == getattr(dtype, "name", None):
                return t
        raise OnnxExporterError(f"Unknown dtype: {dtype}")

    @classmethod
    def from_onnx_type(cls, onnx_type):
        # NOTE: as torch's reversed table: the last type of an ONNX type wins (6 is QINT32,
        # 0 COMPLEX32)
        found = [t for t in sorted(cls, key=lambda t: t != cls.UNDEFINED)
                 if _TYPES[t][2] == int(onnx_type)]
        if found:
            return found[-1]
        raise OnnxExporterError(f"Unknown onnx_type: {onnx_type}")

    @classmethod
    def from_value(cls, value, default=None):
        dtype = getattr(value, "dtype", None)
        if dtype is not None:
            return cls.from_dtype(dtype)
        if default is not None:
            return default
        raise OnnxExporterError(f"Cannot determine scalar type for this '{type(value)}' "
                                "instance and a default value was not provided.")

    def scalar_name(self):
        return _TYPES[self][0]

    def torch_name(self):
        return None if _TYPES[self][1] == "-" else _TYPES[self][1]

    def dtype(self):
        import ember
        d = getattr(ember, _TYPES[self][3] or "", None)
        if d is None:
            raise ValueError(f"Scalar type {self.name} has no dtype in ember")
        return d

    def onnx_type(self):
        if not self.onnx_compatible():
            raise OnnxExporterError(f"Scalar type {self} cannot be converted to ONNX")
        return _TYPES[self][2]

    def onnx_compatible(self):
        return self not in (JitScalarType.UNDEFINED, JitScalarType.COMPLEX32)


# ---- custom symbolic functions ------------------------------------------------------------------

_SYMBOLICS = {}         # "domain::name" -> {opset: fn}


def _verify(name):
    if name.startswith("::"):
        name = "aten" + name
    if not re.match(r"^[a-zA-Z0-9-_]+::[a-zA-Z-_]+[a-zA-Z0-9-_]*$", name):
        raise OnnxExporterError(f"Failed to register operator {name}. The symbolic name must "
                                "match the format domain::name, and should start with a letter "
                                "and contain only alphanumeric characters")
    if name.split("::")[0] == "onnx":
        raise ValueError(f"Failed to register operator {name}. onnx domain cannot be modified.")
    return name


def register_custom_op_symbolic(symbolic_name, symbolic_fn, opset_version):
    """Export op ``symbolic_name`` (``"aten::<op>"``, ``"::<op>"`` or a ``custom_op``'s
    ``"ns::name"``) with ``symbolic_fn(g, *args, **kwargs)`` from ``opset_version`` on; it wins
    over ember's own lowering. ``g.op("Op", ...)`` / ``g.op("domain::Op", ..., attr_f=1.0)``
    adds nodes (suffixes ``_i``, ``_f``, ``_s``, ``_t`` type attributes, as torch's); tensor
    arguments arrive as graph values, others as the Python values the op was called with.

    Example:
        >>> import ember
        >>> ember.onnx.register_custom_op_symbolic(
        ...     "aten::logaddexp",
        ...     lambda g, a, b: g.op("Log", g.op("Add", g.op("Exp", a), g.op("Exp", b))), 17)
        >>> ember.onnx.unregister_custom_op_symbolic("aten::logaddexp", 17)
    """
    _SYMBOLICS.setdefault(_verify(symbolic_name), {})[int(opset_version)] = symbolic_fn


def unregister_custom_op_symbolic(symbolic_name, opset_version):
    """Forget the symbolic registered for ``symbolic_name`` at ``opset_version``."""
    _SYMBOLICS.get(_verify(symbolic_name), {}).pop(int(opset_version), None)


def custom_symbolic(target, opset):
    """The registered symbolic for op ``target`` at ``opset`` (the newest at or below it)."""
    name = getattr(target, "name", "")
    fns = _SYMBOLICS.get(name if "::" in name else f"aten::{name}", {})
    usable = [v for v in fns if v <= opset]
    return fns[max(usable)] if usable else None


class _Type:
    def __init__(self, v):
        self._v = v

    def sizes(self):
        return list(self._v.shape)

    def dim(self):
        return len(self._v.shape)

    def scalarType(self):
        return JitScalarType.from_dtype(self._v.dtype).scalar_name()

    def dtype(self):
        return self._v.dtype


class GraphContext:
    """What a registered symbolic function gets as ``g``: ``op``, ``opset``, ``original_node``
    (torch's ``GraphContext``), writing into ember's ONNX builder."""

    def __init__(self, b):
        self._b, self.opset, self.original_node = b, b.opset, b.node

    def op(self, opname, *raw_args, outputs=1, **kwargs):
        from . import V
        domain, _, op_type = opname.rpartition("::")
        domain = "" if domain in ("", "onnx") else domain
        if domain:
            self._b.domains.setdefault(domain, 1)
        attrs = {}
        for k, v in kwargs.items():
            name, suffix = (k[:-2], k[-1]) if re.search(r"_[ifstg]$", k) else (k, None)
            if suffix == "t" or hasattr(v, "numpy"):
                v = self._b.onnx.numpy_helper.from_array(np.asarray(v.numpy()
                                                                    if hasattr(v, "numpy") else v))
            attrs[name] = v
        ins = [a if isinstance(a, (V, str)) or a is None else self._b.const(np.asarray(a))
               for a in raw_args]
        names = self._b.op(op_type, *ins, outs=outputs, domain=domain or None, **attrs)
        out = self._b.out
        metas = out if isinstance(out, list) else [out] * outputs
        vals = [V(n, getattr(m, "shape", ()), getattr(m, "dtype", None))
                for n, m in zip([names] if outputs == 1 else names, metas)]
        return vals[0] if outputs == 1 else vals


def _names(out):
    from . import V
    if isinstance(out, V):
        return out.name
    return [_names(o) for o in out] if isinstance(out, (tuple, list)) else out


def run_symbolic(fn, g, args, kwargs):
    """Call a registered symbolic; its result as the output name(s) the lowering returns."""
    return _names(fn(GraphContext(g), *args, **kwargs))


# ---- modes, exportable modules, observed inputs ------------------------------------------------

@contextlib.contextmanager
def select_model_mode_for_export(model, mode):
    """Put ``model`` in the training mode ``mode`` (a ``TrainingMode``) for the block and
    restore it after (unless ``PRESERVE``).

    Example:
        >>> import ember
        >>> m = ember.nn.Dropout()
        >>> with ember.onnx.select_model_mode_for_export(m, ember.onnx.TrainingMode.EVAL):
        ...     m.training
        False
        >>> m.training
        True
    """
    from . import TrainingMode
    if not isinstance(mode, TrainingMode):
        raise TypeError(f"'mode' should be a torch.onnx.TrainingMode enum, but got '{type(mode)}'.")
    was = getattr(model, "training", False)
    if hasattr(model, "training") and mode != TrainingMode.PRESERVE:
        model.train(mode == TrainingMode.TRAINING)
    try:
        yield
    finally:
        if hasattr(model, "training") and mode != TrainingMode.PRESERVE:
            model.train(was)


class ExportableModule(nn.Module, abc.ABC):
    """A module that says how to export itself: ``example_arguments()`` (required:
    ``(args, kwargs)``), ``dynamic_shapes()``, ``input_names()``, ``output_names()``;
    ``to_onnx(**kwargs)`` (or ``ember.onnx.export(module)``) exports with them.

    Example:
        >>> import ember
        >>> class Double(ember.onnx.ExportableModule):
        ...     def forward(self, x):
        ...         return x * 2
        ...     def example_arguments(self):
        ...         return (ember.ones(2, 3),), None
        ...     def input_names(self):
        ...         return ("x",)
        >>> Double().input_names()
        ('x',)
    """

    @abc.abstractmethod
    def example_arguments(self):
        """``(args, kwargs)`` to trace the forward with."""
        raise NotImplementedError

    def dynamic_shapes(self):
        return None

    def input_names(self):
        return None

    def output_names(self):
        return None

    def to_onnx(self, **kwargs):
        from . import export
        return export(self, **kwargs)


class InputObserver:
    """Records the inputs of a model's calls (``with observer(model): ...``) to infer export
    arguments (``infer_arguments``) and dynamic shapes (``infer_dynamic_shapes``: the dims
    that differed between calls).

    Example:
        >>> import ember
        >>> m, obs = ember.nn.ReLU(), ember.onnx.InputObserver()
        >>> with obs(m):
        ...     _ = m(ember.ones(2, 3)); _ = m(ember.ones(4, 3))
        >>> obs.num_obs(), obs.infer_dynamic_shapes()
        (2, ({0: Dim('DYNAMIC', min=0)},))
    """

    def __init__(self, value_if_missing=None):
        self.info, self.value_if_missing = None, dict(value_if_missing or {})

    def num_obs(self):
        return len(self.info) if self.info else 0

    @contextlib.contextmanager
    def __call__(self, model, store_n_calls=3, method_name="forward"):
        if not hasattr(model, method_name):
            raise ValueError(f"Model type {model} does not have a method {method_name!r}.")
        method = getattr(model, method_name)
        self.info = self.info if self.info is not None else []
        limit = len(self.info) + store_n_calls

        def observed(*args, **kwargs):
            if len(self.info) < limit:
                self.info.append((args, kwargs))
            return method(*args, **kwargs)
        observed.__signature__ = inspect.signature(method)
        object.__setattr__(model, method_name, observed) if isinstance(model, nn.Module) \
            else setattr(model, method_name, observed)
        try:
            yield self
        finally:
            model.__dict__.pop(method_name, None)

    def _check_captured(self):
        if not self.info:
            raise RuntimeError("No inputs were captured.")

    def infer_arguments(self, index_or_args_or_kwargs=None, flat=False, as_args_kwargs=False):
        """The inputs of the first observed call (or call ``index``): its positional args as
        a tuple, or its kwargs as a dict where it had no positional ones."""
        from .._graph.record import flatten_tensors
        self._check_captured()
        i = index_or_args_or_kwargs if isinstance(index_or_args_or_kwargs, int) else 0
        args, kwargs = self.info[i]
        kwargs = {**{k: v for k, v in self.value_if_missing.items() if isinstance(k, str)},
                  **kwargs}
        if flat:
            return flatten_tensors((args, kwargs))
        if as_args_kwargs:
            return args, kwargs
        return args if args or not kwargs else kwargs

    def infer_dynamic_shapes(self, set_batch_dimension_for=None):
        """Per input, ``{axis: Dim.DYNAMIC}`` for the dims that differed between the observed
        calls (and dim 0 of the inputs named in ``set_batch_dimension_for``, all if True)."""
        from ..export import Dim
        self._check_captured()
        args0, kw0 = self.info[0]

        def dims(key, t, others):
            if not hasattr(t, "shape"):
                return None
            out = {d: Dim.DYNAMIC for d, s in enumerate(t.shape)
                   if any(o is not None and o.shape[d] != s for o in others)}
            if set_batch_dimension_for is True or key in (set_batch_dimension_for or ()):
                out.setdefault(0, Dim.DYNAMIC)
            return dict(sorted(out.items()))
        pos = tuple(dims(i, a, [c[0][i] if i < len(c[0]) else None for c in self.info[1:]])
                    for i, a in enumerate(args0))
        kw = {k: dims(k, v, [c[1].get(k) for c in self.info[1:]]) for k, v in kw0.items()}
        return pos if not kw else kw if not pos else pos + (kw,)
