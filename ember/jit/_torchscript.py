"""The rest of ``torch.jit``'s names: TorchScript's settings (fusers, the executor's
optimization switch), ``isinstance`` refinement, ``CompilationUnit`` and the helpers around
traced modules. ember's TorchScript is its tracer (ember/jit/__init__.py), so the settings that
steer TorchScript's C++ fusers are recorded and reported as torch does; the executor switch is
honoured (a traced module replays its graph cleaned by common-subexpression and dead-code passes
while it is on, as traced while off); the flatbuffer format, TorchScript's mobile bytecode,
is refused with a clear error.
"""
import collections.abc
import contextlib
import functools
import inspect
import textwrap
import typing
import warnings

from .._graph import passes as _passes


class Error(Exception):
    """``torch.jit.Error``: what an exception raised inside TorchScript code surfaces as.

    Example:
        >>> import ember
        >>> issubclass(ember.jit.Error, Exception)
        True
    """


class ScriptWarning(Warning):
    """``torch.jit.ScriptWarning``: warnings about scripted code."""


# ---- settings: the executor's optimization switch, the fusers, the fusion strategy --------------

_optimize = [True]          # torch._C._get_graph_executor_optimize()
_last = [None]              # the graph the last traced-module call ran
_FUSERS = {"fuser0": (True, True, False, False, False), "fuser1": (True, True, True, False, False),
           "fuser2": (False, False, False, True, False), "fuser3": (True, False, True, False, True),
           "none": (False, False, False, False, False)}
# (can fuse on cpu, on gpu, NNC (texpr), nvFuser, oneDNN Graph (llga)): torch's defaults
fuser_state = dict(zip(("cpu", "gpu", "texpr", "nvfuser", "llga"), (False, True, True, False,
                                                                   False)))
_strategy = [[("STATIC", 2), ("DYNAMIC", 10)]]


@contextlib.contextmanager
def optimized_execution(should_optimize):
    """Whether traced modules run their graphs optimized (common subexpressions merged, dead
    code removed; the default) or exactly as traced, inside the block.

    Example:
        >>> import ember
        >>> m = ember.jit.trace(lambda x: x.sin() + x.sin(), ember.ones(2))
        >>> with ember.jit.optimized_execution(False):
        ...     _ = m(ember.ones(2))
        >>> len([n for n in ember.jit.last_executed_optimized_graph().nodes
        ...      if n.op == "call_function"])
        3
    """
    old, _optimize[0] = _optimize[0], bool(should_optimize)
    try:
        yield
    finally:
        _optimize[0] = old


def _optimized(graph):
    """``graph`` cleaned as TorchScript's executor cleans before running (a copy)."""
    import copy
    g = copy.deepcopy(graph)
    _passes.PassManager([_passes.cse, _passes.dead_code])(g)
    return g


def last_executed_optimized_graph():
    """The graph the most recent call of a traced module ran (optimized unless inside
    ``optimized_execution(False)``); an empty graph before any call.

    Example:
        >>> import ember
        >>> m = ember.jit.trace(lambda x: x.sin() + x.sin(), ember.ones(2))
        >>> _ = m(ember.ones(2))
        >>> [n.target.name for n in ember.jit.last_executed_optimized_graph().nodes
        ...  if n.op == "call_function"]
        ['sin', 'add']
    """
    from .._graph.ir import Graph
    return _last[0] if _last[0] is not None else Graph()


@contextlib.contextmanager
def fuser(name):
    """Switch TorchScript's fuser (``fuser0`` legacy, ``fuser1`` NNC, ``fuser2`` nvFuser,
    ``fuser3`` oneDNN Graph, ``none``) inside the block. ember records the switches in
    ``ember.jit._torchscript.fuser_state`` as torch sets its flags; its traced modules call
    ember's kernels whichever is chosen (``ember.compile`` is ember's fuser).

    Example:
        >>> import ember
        >>> with ember.jit.fuser("none"):
        ...     ember.jit._torchscript.fuser_state["cpu"]
        False
    """
    if name not in _FUSERS:
        raise Exception(f"unrecognized fuser option (name: {name})")  # noqa: TRY002 (torch's)
    old = dict(fuser_state)
    fuser_state.update(zip(fuser_state, _FUSERS[name]))
    try:
        yield
    finally:
        fuser_state.update(old)


def set_fusion_strategy(strategy):
    """Set how many static then dynamic specializations TorchScript's fuser may compile (a list
    of ``("STATIC" | "DYNAMIC", depth)``); returns the previous strategy. Recorded as torch
    does (ember's traced modules do not fuse).

    Example:
        >>> import ember, warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     old = ember.jit.set_fusion_strategy([("STATIC", 3)])
        ...     _ = ember.jit.set_fusion_strategy(old)
        >>> old
        [('STATIC', 2), ('DYNAMIC', 10)]
    """
    warnings.warn("`torch.jit.set_fusion_strategy` is deprecated. Please use `torch.compile` "
                  "instead.", DeprecationWarning, stacklevel=2)
    for kind, depth in strategy:
        if kind not in ("STATIC", "DYNAMIC"):
            raise ValueError(f"FusionBehavior only supported 'STATIC' or 'DYNAMIC', got: {kind}")
    old, _strategy[0] = _strategy[0], [(k, int(d)) for k, d in strategy]
    return old


class strict_fusion:
    """Context manager asking TorchScript to fail when not every node fused; it only works in
    script mode, which ember never is, so it warns as torch's does outside script.

    Example:
        >>> import ember, warnings
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     with ember.jit.strict_fusion():
        ...         pass
        >>> str(w[0].message)
        'Only works in script mode'
    """

    def __init__(self):
        warnings.warn("Only works in script mode", stacklevel=2)

    def __enter__(self):
        """Nothing to do outside script mode."""

    def __exit__(self, type, value, tb):
        """Nothing to do outside script mode."""


# ---- isinstance ---------------------------------------------------------------------------------

_RAW = {list: "list", typing.List: "List", dict: "dict", typing.Dict: "Dict",
        typing.Optional: "Optional", tuple: "tuple", typing.Tuple: "Tuple"}


def _check_args(t):
    name = _RAW.get(t) if isinstance(t, collections.abc.Hashable) else None
    if name is not None and name.endswith("ict"):
        raise RuntimeError(f"Attempted to use {name} without contained types. Please add "
                           f"contained type, e.g. {name}[int, int]")
    if name is not None:
        raise RuntimeError(f"Attempted to use {name} without a contained type. Please add a "
                           f"contained type, e.g. {name}[int]")


def _container(obj, t):
    origin, targs = typing.get_origin(t), typing.get_args(t)
    _check_args(t)

    def one(x, tt):
        return _container(x, tt) if typing.get_origin(tt) else isinstance(x, tt)
    if origin in (list, tuple, dict) and (obj == [] or obj == {} or obj == ()):
        warnings.warn("The inner type of a container is lost when calling torch.jit.isinstance "
                      "in eager mode. For example, List[int] would become list and therefore "
                      "falsely return True for List[float] or List[str].", stacklevel=3)
    if origin is list:
        return isinstance(obj, list) and all(one(x, targs[0]) for x in obj)
    if origin is dict:
        return isinstance(obj, dict) and all(
            isinstance(k, targs[0]) and one(v, targs[1]) for k, v in obj.items())
    if origin is tuple:
        return isinstance(obj, tuple) and len(obj) == len(targs) and \
            all(one(x, tt) for x, tt in zip(obj, targs))
    if origin is typing.Union or type(t).__name__ == "UnionType":      # (Optional too)
        if obj is None:
            return True
        for tt in targs:    # NOTE: torch returns the first nested container's answer
            if typing.get_origin(tt):
                return _container(obj, tt)
            if isinstance(obj, tt):
                return True
    return False


def jit_isinstance(obj, target_type):
    """``isinstance`` that also checks the contents of ``List[T]``, ``Dict[K, V]``,
    ``Tuple[...]`` and ``Optional[T]`` types, as TorchScript refines them.

    Example:
        >>> import ember
        >>> from typing import Dict, List
        >>> ember.jit.isinstance([1, 2], List[int]), ember.jit.isinstance([1, 2.0], List[int])
        (True, False)
        >>> ember.jit.isinstance({"w": ember.ones(1)}, Dict[str, ember.Tensor])
        True
    """
    if isinstance(target_type, collections.abc.Container):
        if not isinstance(target_type, tuple):
            raise RuntimeError("The second argument to `torch.jit.isinstance` must be a type or "
                               "a tuple of types")
        return any(jit_isinstance(obj, t) for t in target_type)
    if typing.get_origin(target_type):
        return _container(obj, target_type)
    _check_args(target_type)
    return isinstance(obj, target_type)


jit_isinstance.__name__ = jit_isinstance.__qualname__ = "isinstance"


# ---- CompilationUnit, script_if_tracing, ONNXTracedModule, RecursiveScriptClass ----------------

class CompilationUnit:
    """Functions defined from source (``CompilationUnit(src)`` or ``define(src)``), each made a
    script function (``ember.jit.script``: traced on its first call, since ember runs Python
    rather than compiling TorchScript). Names resolve in ``torch`` (ember), ``Tensor``,
    ``typing``'s containers and the caller's globals.

    Example:
        >>> import ember
        >>> cu = ember.jit.CompilationUnit('''
        ... def add(a, b):
        ...     return a + b
        ... ''')
        >>> cu.add(ember.ones(2), ember.ones(2))
        tensor([2., 2.])
        >>> [f.name for f in cu.get_functions()]
        ['add']
    """

    def __init__(self, lang=None, _frames_up=0):
        object.__setattr__(self, "_fns", {})
        if lang is not None:
            self.define(lang, _frames_up=_frames_up + 1)

    def define(self, src, rcb=None, _frames_up=0):
        import ember
        from . import script
        frame = inspect.currentframe().f_back
        for _ in range(_frames_up):
            frame = frame.f_back or frame
        ns = dict(frame.f_globals) if rcb is None else {}
        ns.update(torch=ember, Tensor=ember.Tensor, **{k: getattr(typing, k) for k in (
            "List", "Dict", "Tuple", "Optional", "Union", "Any")})
        before = dict(ns)
        exec(compile(textwrap.dedent(src), "<CompilationUnit>", "exec"), ns)
        for k, v in ns.items():
            if inspect.isfunction(v) and before.get(k) is not v:
                fn = script(v)
                object.__setattr__(fn, "name", k)
                self._fns[k] = fn

    def find_function(self, name):
        return self._fns.get(name)

    def get_function(self, name):
        if name not in self._fns:
            raise RuntimeError(f"attempted to get undefined function {name}")
        return self._fns[name]

    def get_functions(self):
        return list(self._fns.values())

    def __getattr__(self, name):
        fns = self.__dict__["_fns"]
        if name not in fns:
            raise AttributeError(f"'CompilationUnit' has no attribute '{name}'")
        return fns[name]


def script_if_tracing(fn):
    """Decorator: ``fn`` for library code that must also work inside ``trace``. TorchScript
    compiles it when called during a trace; ember's trace records the ops ``fn`` calls
    instead (a Python value read from a traced tensor warns, as everywhere in a trace).

    Example:
        >>> import ember
        >>> @ember.jit.script_if_tracing
        ... def double(x):
        ...     return x * 2
        >>> ember.jit.trace(lambda x: double(x) + 1, ember.ones(2))(ember.ones(2))
        tensor([3., 3.])
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    wrapper.__original_fn = fn                      # (the attributes torch's wrapper has)
    wrapper.__script_if_tracing_wrapper = True
    return wrapper


class ONNXTracedModule:
    """Traces ``inner`` on the call's tensors: returns ``(graph, outputs)`` (and the inputs
    with ``return_inputs``), the graph being ember's op-level IR; torch's ONNX exporter used it
    to trace (ember.onnx records the same way).

    Example:
        >>> import ember
        >>> g, out = ember.jit.ONNXTracedModule(ember.nn.ReLU())(ember.tensor([-1.0, 2.0]))
        >>> [n.target.name for n in g.nodes if n.op == "call_function"], out
        (['relu'], tensor([0., 2.]))
    """

    def __init__(self, inner, strict=True, force_outplace=False, return_inputs=False,
                 return_inputs_states=False):
        self.inner, self.strict, self._return_inputs = inner, strict, return_inputs
        self._return_inputs_states = return_inputs_states

    def __call__(self, *args):
        from .. import Tensor, nn
        from .._graph.record import record
        if not all(isinstance(a, Tensor) for a in args):
            raise RuntimeError("Expected Tensor argument")
        inputs = tuple(a.clone() for a in args) if self._return_inputs else None
        module = self.inner if isinstance(self.inner, nn.Module) else None
        rec, out = record(self.inner, args, module=module)
        _passes.dead_code(rec.graph)
        if self._return_inputs:
            return rec.graph, out, inputs
        return (rec.graph, out, args) if self._return_inputs_states else (rec.graph, out)

    forward = __call__


class RecursiveScriptClass:
    """A scripted class instance seen from Python: attribute reads and writes, properties
    (``cpp_class._properties()`` where the object lists them) and magic methods go to the
    wrapped object. TorchScript's instances are C++ objects; ember's are the Python objects
    themselves, wrapped the same way. Like torch's, it cannot be pickled.

    Example:
        >>> import ember
        >>> class Pair:
        ...     def __init__(self):
        ...         self.a = 1
        >>> ember.jit.RecursiveScriptClass(Pair()).a
        1
    """

    def __init__(self, cpp_class):
        self.__dict__["_initializing"] = True
        self._c = cpp_class
        self._props = {p.name: property(p.getter, p.setter)
                       for p in getattr(cpp_class, "_properties", lambda: [])()}
        self.__dict__["_initializing"] = False

    def __getattr__(self, attr):
        if self.__dict__.get("_initializing"):
            raise AttributeError(attr)
        if attr in self.__dict__["_props"]:
            return self._props[attr].fget()
        return getattr(self.__dict__["_c"], attr)

    def __setattr__(self, attr, value):
        if self.__dict__.get("_initializing"):
            self.__dict__[attr] = value
        elif attr in self._props:
            self._props[attr].fset(value)
        else:
            setattr(self._c, attr, value)

    def forward_magic_method(self, method_name, *args, **kwargs):
        if not hasattr(self._c, method_name):
            raise TypeError
        return getattr(self._c, method_name)(*args, **kwargs)

    def __getstate__(self):
        import pickle
        raise pickle.PickleError("ScriptClasses cannot be pickled")

    def __iadd__(self, other):
        if hasattr(self._c, "__iadd__"):
            return self.forward_magic_method("__iadd__", other)
        return self.forward_magic_method("__add__", other)


for _m in ("__len__", "__iter__", "__contains__", "__getitem__", "__setitem__", "__delitem__",
           "__add__", "__sub__", "__mul__", "__truediv__", "__eq__", "__lt__", "__le__",
           "__gt__", "__ge__", "__neg__"):
    setattr(RecursiveScriptClass, _m, lambda self, *a, _m=_m, **kw:
            self.forward_magic_method(_m, *a, **kw))


# ---- operations on traced modules ---------------------------------------------------------------

def export_opnames(m):
    """The operators traced module ``m``'s graphs call, as ``aten::<op>`` names (sorted; ember's
    ops have no overloads, so ``aten::softmax`` where torch lists ``aten::softmax.int``).

    Example:
        >>> import ember
        >>> nn = ember.nn
        >>> m = ember.jit.trace(nn.Sequential(nn.Linear(3, 2), nn.ReLU()), ember.ones(1, 3))
        >>> ember.jit.export_opnames(m)
        ['aten::linear', 'aten::relu']
    """
    from . import ScriptModule
    if not isinstance(m, ScriptModule):
        raise TypeError(f"export_opnames(): expected a ScriptModule, got {type(m).__name__}")
    return sorted({f"aten::{n.target.name}" for g in m._graphs.values() for n in g._nodes
                   if n.op == "call_function" and hasattr(n.target, "name")})


def run_frozen_optimizations(mod, optimize_numerics=True, preserved_methods=None):
    """Run the freezing passes (common subexpressions, dead code, constant folding) again on
    ``mod``'s graphs, in place; ``mod`` is usually what ``freeze`` returned.

    Example:
        >>> import ember
        >>> m = ember.jit.trace(ember.nn.Linear(2, 1).eval(), ember.ones(1, 2))
        >>> f = ember.jit.freeze(m)
        >>> ember.jit.run_frozen_optimizations(f)
        >>> f(ember.ones(1, 2)).shape
        torch.Size([1, 1])
    """
    for name, g in list(mod._graphs.items()):
        _passes.PassManager([_passes.cse, _passes.dead_code,
                             lambda g: _passes.fold_constants(g, mod)])(g)
        mod._define(name, g)


def _flatbuffer(what):
    raise RuntimeError(f"ember.jit.{what}: the flatbuffer format holds TorchScript mobile "
                       "bytecode for torch's C++ runtime, which ember does not have; save "
                       "traced modules with ember.jit.save and read them with ember.jit.load")


def save_jit_module_to_flatbuffer(m, f, _extra_files=None):
    """Refused: TorchScript's flatbuffer (mobile bytecode) needs torch's C++ runtime; use
    ``ember.jit.save``."""
    from . import ScriptModule
    if not isinstance(m, ScriptModule):
        raise TypeError(f"save_jit_module_to_flatbuffer(): expected a ScriptModule, got "
                        f"{type(m).__name__}")
    _flatbuffer("save_jit_module_to_flatbuffer")


def jit_module_from_flatbuffer(f):
    """Refused: TorchScript's flatbuffer (mobile bytecode) needs torch's C++ runtime; use
    ``ember.jit.load``."""
    _flatbuffer("jit_module_from_flatbuffer")
