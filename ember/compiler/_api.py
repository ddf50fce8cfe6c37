"""The rest of ``torch.compiler``: guard filters (``options={"guard_filter_fn": ...}``), the
default backend, the disk cache's artifacts, NumPy functions, substitutes for functions the
capture cannot record, and the settings torch exposes there.

ember's guards are the parts of a compiled program's key (compiler/__init__.py ``_guards``):
each input tensor's shape, dtype, device and requires_grad (``TENSOR_MATCH``), grad mode and
autocast (``GLOBAL_STATE``), the Python values among the arguments (``CONSTANT_MATCH``), the
compiled module's and its submodules' training flags and parameters (nn-module sources), and
the modules and tensors a function reached through globals or closures (``is_global``). A
guard filter sees them as torch's ``GuardFilterEntry`` objects and says which to keep; a
dropped guard lets a program run for calls that differ there (unsafe, as in torch: a program
run on inputs of other shapes than it was compiled for raises rather than reads out of bounds).
"""
import contextlib
import dataclasses
import functools
import inspect
import io
import os
import sys
import tempfile
import types
import zipfile
from collections import defaultdict

# ---- guards -------------------------------------------------------------------------------------


class _Source:
    def __init__(self, nn_module, builtin):
        self.is_unspecialized_nn_module = lambda: nn_module
        self.is_unspecialized_builtin_nn_module = lambda: builtin


class Guard:
    """What a guard checks (``source``: where the value came from)."""

    def __init__(self, name, guard_type, source):
        self.name, self.guard_type, self.source = name, guard_type, source

    def __repr__(self):
        return f"Guard({self.name!r}, {self.guard_type})"


@dataclasses.dataclass(frozen=True)
class GuardFilterEntry:
    """One guard as a ``guard_filter_fn`` sees it (torch._dynamo.types.GuardFilterEntry)."""
    name: str
    has_value: bool
    value: object
    guard_type: str
    derived_guard_types: tuple
    is_global: bool
    orig_guard: Guard


def entries(guards):
    """``GuardFilterEntry`` objects of ``guards`` (``(name, type, value, key, is_global,
    nn_module, builtin)`` tuples)."""
    return [GuardFilterEntry(name, value is not None, value, kind, (kind,), glob,
                             Guard(name, kind, _Source(nn_mod, builtin)))
            for name, kind, value, _, glob, nn_mod, builtin in guards]


def skip_all_guards_unsafe(guard_entries):
    """A guard filter dropping every guard: the first compiled program runs for every call.

    Example:
        >>> import ember
        >>> f = ember.compile(lambda x: x * 2,
        ...                   options={"guard_filter_fn": ember.compiler.skip_all_guards_unsafe})
        >>> f(ember.ones(2))
        tensor([2., 2.])
    """
    return [False for _ in guard_entries]


def skip_guard_on_globals_unsafe(guard_entries):
    """A guard filter dropping the guards on what the function reached through globals and
    closures (modules' training flags, tensors' requires_grad)."""
    return [not e.is_global for e in guard_entries]


def skip_guard_on_all_nn_modules_unsafe(guard_entries):
    """A guard filter dropping the guards on modules (training flags, parameters)."""
    return [not e.orig_guard.source.is_unspecialized_nn_module() for e in guard_entries]


def skip_guard_on_inbuilt_nn_modules_unsafe(guard_entries):
    """A guard filter dropping the guards on ember.nn's own modules (``nn.Linear``...), keeping
    those on user-defined modules."""
    return [not e.orig_guard.source.is_unspecialized_builtin_nn_module() for e in guard_entries]


def keep_tensor_guards_unsafe(guard_entries, keep_parameters=False):
    """A guard filter keeping only the tensor guards (parameters' too with
    ``keep_parameters``)."""
    from ..nn import Parameter
    return [e.guard_type == "TENSOR_MATCH" and (keep_parameters or
                                                not isinstance(e.value, Parameter))
            for e in guard_entries]


def keep_portable_guards_unsafe(guard_entries):
    """A guard filter keeping the guards any process can check: global state (grad mode,
    autocast) and the inputs' tensor metadata."""
    return [e.guard_type in ("GLOBAL_STATE", "SHAPE_ENV") or
            (e.guard_type == "TENSOR_MATCH" and not e.is_global) for e in guard_entries]


_collectives = [False]


def set_enable_guard_collectives(enabled):
    """Whether guard evaluation synchronizes ranks (torch issues a collective per compiled
    call). ember evaluates guards per process and compiles per process, so no rank can wait on
    another's compile: the setting is recorded; returns the previous one.

    Example:
        >>> import ember
        >>> ember.compiler.set_enable_guard_collectives(False)
        False
    """
    old, _collectives[0] = _collectives[0], bool(enabled)
    return old


# ---- backends, steps ----------------------------------------------------------------------------

_default_backend = ["inductor"]


def set_default_backend(backend):
    """The backend ``compile`` uses when none is given (None: back to ``"inductor"``).

    Example:
        >>> import ember
        >>> ember.compiler.set_default_backend("eager")
        >>> ember.compiler.get_default_backend()
        'eager'
        >>> ember.compiler.set_default_backend(None)
    """
    if backend is not None and not isinstance(backend, str) and not callable(backend):
        raise TypeError(f"backend must be a string or callable, got {type(backend)}")
    _default_backend[0] = "inductor" if backend is None else backend


def get_default_backend():
    """The backend ``compile`` uses when none is given (initially ``"inductor"``).

    Example:
        >>> import ember
        >>> ember.compiler.get_default_backend()
        'inductor'
    """
    return _default_backend[0]


_steps = [0]


def cudagraph_mark_step_begin():
    """Mark the start of an iteration for ``mode="reduce-overhead"``. torch frees the previous
    iteration's graph outputs then; ember's reduce-overhead programs hand callers copies of
    their reused buffers, so nothing is freed: the step is counted.

    Example:
        >>> import ember
        >>> ember.compiler.cudagraph_mark_step_begin()
    """
    _steps[0] += 1


# ---- config -------------------------------------------------------------------------------------

class _Config(types.SimpleNamespace):
    """``torch.compiler.config``: torch's fields and defaults. ember honours
    ``force_disable_caches`` (no disk cache: every program is compiled again) and
    ``cache_key_tag`` (part of the disk cache's key); ``patch`` sets fields for a block."""

    @contextlib.contextmanager
    def _patch(self, **changes):
        old = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            if not hasattr(self, k):
                raise AttributeError(f"torch.compiler.config has no field {k!r}")
            setattr(self, k, v)
        try:
            yield
        finally:
            for k, v in old.items():
                setattr(self, k, v)

    def patch(self, arg=None, **changes):
        return self._patch(**(arg or {}), **changes)


config = _Config(job_id=None, pgo_extra_read_key=None, pgo_extra_write_key=None,
                 cache_key_tag="", force_disable_caches=False, dynamic_sources="",
                 dynamic_values="", unbacked_sources="", force_cudagraph_gc=False,
                 dynamic_shapes=True, assume_static_by_default=True,
                 automatic_dynamic_shapes=True, recompile_limit=8,
                 accumulated_recompile_limit=256, verbose=False, capture_scalar_outputs=False,
                 capture_dynamic_output_shape_ops=False, log_file_name=None,
                 fail_on_recompile_limit_hit=False, allow_unspec_int_on_nn_module=False,
                 skip_tensor_guards_with_matching_dict_tags=True,
                 enable_cpp_symbolic_shape_guards=True, wrap_top_frame=False,
                 reorderable_logging_functions=set())


# ---- the disk cache's artifacts -----------------------------------------------------------------

class CacheInfo:
    """What ``save_cache_artifacts``/``load_cache_artifacts`` moved: ``artifacts`` maps a kind
    to the keys; ember's compiled C programs are ``inductor_artifacts``, the joint
    forward/backward programs (what spares a new process the backward's recording)
    ``aot_autograd_artifacts``."""

    def __init__(self, artifacts=None):
        self.artifacts = defaultdict(list, artifacts or {})

    inductor_artifacts, autotune_artifacts, aot_autograd_artifacts, pgo_artifacts, \
        precompile_artifacts = (property(lambda self, k=k: self.artifacts[k]) for k in (
            "inductor", "autotune", "aot_autograd", "pgo", "precompile"))

    def add(self, artifact):
        self.artifacts[artifact.type()].append(artifact.key)

    def clear(self):
        self.artifacts.clear()

    def empty(self):
        return not self.artifacts

    def __repr__(self):
        return f"CacheInfo(artifacts={dict(self.artifacts)})"

    def _add(self, name):
        """Count cache file ``name`` (``<key>.so`` or ``<key>.joint``); False for another."""
        key, ext = os.path.splitext(name)
        kind = {".so": "inductor", ".joint": "aot_autograd"}.get(ext)
        if kind:
            self.artifacts[kind].append(key)
        return bool(kind)


_MAGIC = "ember.compiler.cache/1"


def save_cache_artifacts():
    """The disk cache entries this process compiled or loaded (``~/.cache/ember/codegen``: C
    programs and joint forward/backward programs) as bytes, with a ``CacheInfo``; None if
    there are none. ``load_cache_artifacts`` in another process (same compiler and flags, and
    the same ember: they are part of the keys) fills its cache, so its first calls skip the C
    compiler and the backward's recording.

    Example:
        >>> import ember
        >>> out = ember.compiler.save_cache_artifacts()
        >>> out is None or isinstance(out[0], bytes)
        True
    """
    import threading
    from .._graph import toolchain
    for t in threading.enumerate():         # (libraries still compiling in the background)
        if isinstance(t, toolchain.Later):
            t.join()
    if not toolchain.used:
        return None
    buf, info = io.BytesIO(), CacheInfo()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("format", _MAGIC)
        for name, path in toolchain.used.items():
            if os.path.exists(path) and info._add(name):
                z.write(path, f"codegen/{name}")
    return buf.getvalue(), info


def load_cache_artifacts(serialized_artifacts):
    """Put the entries ``save_cache_artifacts`` serialized into this process's disk cache
    (those already there are kept); returns their ``CacheInfo``, None for no artifacts.

    Example:
        >>> import ember
        >>> ember.compiler.load_cache_artifacts(b"")
    """
    from .._graph import toolchain
    if not serialized_artifacts:
        return None
    try:
        z = zipfile.ZipFile(io.BytesIO(serialized_artifacts))
        ok = z.read("format").decode() == _MAGIC
    except (zipfile.BadZipFile, KeyError):
        ok = False
    if not ok:
        raise RuntimeError("load_cache_artifacts: not artifacts save_cache_artifacts wrote")
    info = CacheInfo()
    folder = os.path.join(toolchain.cache_dir(), "codegen")
    os.makedirs(folder, exist_ok=True)
    for name in z.namelist():
        base = os.path.basename(name)
        if not name.startswith("codegen/") or not info._add(base):
            continue
        path = os.path.join(folder, base)
        if not os.path.exists(path):        # (written aside, renamed into place: atomic)
            fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=folder)
            with os.fdopen(fd, "wb") as f:
                f.write(z.read(name))
            os.replace(tmp, path)
    return info


_AOT = "ember.compiler.aot/1"


class AOTCompiledFunction:
    """A function compiled ahead of time (``ember.compile(fn, fullgraph=True)
    .aot_compile(((args...), {kwargs}))``): callable, checked against the example's guards
    (tensor shapes, dtypes, requires_grad; grad mode), ``save_compiled_function(path)`` writes
    it and ``load_compiled_function`` reads it in another process without ``fn``'s source:
    the file holds the forward and backward graphs (op names and arguments), the tensors the
    function read (constants, and globals or closures by their value at compile time), and
    the C programs are found in (or rebuilt into) the disk cache."""

    def __init__(self, prog, guards, name="fn"):
        self._prog, self._guards, self.__name__ = prog, guards, name
        self._guard_check_enabled = True

    def guard_check(self, *args, **kwargs):
        return _aot_guards(args, kwargs) == self._guards

    def disable_guard_check(self):
        self._guard_check_enabled = False

    def __call__(self, *args, **kwargs):
        if self._guard_check_enabled and not self.guard_check(*args, **kwargs):
            raise RuntimeError(f"GuardManager check failed: {self.__name__} was compiled for "
                               f"{self._guards}, called with {_aot_guards(args, kwargs)}")
        return self._prog(args, kwargs)

    def serialize(self):
        import ember
        from .._graph.record import _map_out
        from .._graph.serialize import dumps
        p, buf = self._prog, io.BytesIO()
        ember.save({"format": _AOT, "name": self.__name__, "guards": repr(self._guards),
                    "graphs": [dumps(g) for g in p.graphs], "n_in": p.n_in,
                    "diff": list(p.diff), "leaf_slots": [list(x) for x in p.leaf_slots],
                    "template": _map_out(p.template, lambda t: ember.zeros(())),
                    "consts": dict(p.consts), "live": dict(p.live)}, buf)
        return buf.getvalue()

    @classmethod
    def deserialize(cls, data, f_globals=None, external_data=None):
        import ember
        from .._graph.serialize import loads
        from ._aot import Compiled
        try:
            d = ember.load(io.BytesIO(data), weights_only=True)
        except Exception:
            d = None
        if not isinstance(d, dict) or d.get("format") != _AOT:
            raise RuntimeError("load_compiled_function: not a function ember's "
                               "save_compiled_function wrote (torch's AOT-compiled functions "
                               "hold dynamo bytecode and inductor kernels ember cannot run)")
        p = Compiled([loads(g) for g in d["graphs"]], [tuple(x) for x in d["leaf_slots"]],
                     d["template"], d["n_in"], d["diff"], d["live"], d["consts"], None)
        out = cls(p.load(), None, d["name"])
        out._guards = d["guards"]
        out.guard_check = lambda *a, **k: repr(_aot_guards(a, k)) == out._guards
        return out

    def save_compiled_function(self, path, external_data=None):
        with open(path, "wb") as f:
            f.write(self.serialize())


def _aot_guards(args, kwargs):
    import ember
    from .._graph.record import flatten_tensors
    return (ember.is_grad_enabled(), tuple((tuple(t.shape), str(t.dtype), str(t.device),
                                            t.requires_grad)
                                           for t in flatten_tensors((args, kwargs))))


def aot_compile(compiled, example_inputs):
    """``compiled`` (a ``compile`` wrapper of a function, ``fullgraph=True``) captured and
    compiled now for ``example_inputs`` (``(args, kwargs)``)."""
    from ._aot import Breaks, capture
    if config.force_disable_caches:
        raise RuntimeError("Cannot precompile with force_disable_caches=True; caching is "
                           "required.")
    if not compiled.fullgraph:
        raise RuntimeError("Graph breaks are not supported with aot compile. Please use "
                           "torch.compile(fullgraph=True).")
    if compiled.module is not None:
        raise NotImplementedError("ember: aot_compile of a module is not supported; compile a "
                                  "function of its inputs (functional_call) instead")
    args, kwargs = example_inputs
    try:
        with substituted(compiled.fn, None):
            prog = capture(compiled.fn, None, args, kwargs)
        prog.eager = None           # (the first call is not the example's)
    except Breaks as e:
        from .._dynamo.exc import Unsupported
        raise Unsupported(f"data-dependent: {e} (aot_compile needs one graph)") from None
    return AOTCompiledFunction(prog.load(), _aot_guards(args, kwargs),
                               getattr(compiled.fn, "__name__", "fn"))


def load_compiled_function(file, *, f_globals=None, external_data=None):
    """The ``AOTCompiledFunction`` ``save_compiled_function`` wrote to ``file`` (an open
    binary file).

    Example:
        >>> import ember, io, tempfile, os
        >>> f = ember.compile(lambda x: x.sin() * 2, fullgraph=True)
        >>> aot = f.aot_compile(((ember.zeros(3),), {}))
        >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
        >>> aot.save_compiled_function(path)
        >>> with open(path, "rb") as fh:
        ...     g = ember.compiler.load_compiled_function(fh)
        >>> g(ember.zeros(3))
        tensor([0., 0., 0.])
    """
    return AOTCompiledFunction.deserialize(file.read(), f_globals, external_data)


# ---- NumPy functions, substitutes ---------------------------------------------------------------

def wrap_numpy(fn):
    """A function of tensors made from ``fn``, a function of NumPy arrays: tensor arguments
    (nested in tuples, lists, dicts too) are passed as arrays and array results come back as
    tensors (a tensor that requires grad is refused, as torch's eager call refuses it).
    ember runs the NumPy code as NumPy (no gradients through it; inside
    ``ember.compile`` it is a graph break: the function reads tensor values).

    Example:
        >>> import ember, numpy as np
        >>> f = ember.compiler.wrap_numpy(lambda a: np.sum(a * a))
        >>> f(ember.arange(4.0))
        tensor(14.)
    """
    import numpy as np
    from .._tensor import Tensor

    def conv(a, to_np):
        if to_np and isinstance(a, Tensor):
            return a.numpy()
        if not to_np and isinstance(a, (np.ndarray, np.generic)):
            import ember
            return ember.from_numpy(np.array(a))
        if type(a) in (tuple, list):
            return type(a)(conv(x, to_np) for x in a)
        if type(a) is dict:
            return {k: conv(v, to_np) for k, v in a.items()}
        return a

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        return conv(fn(*conv(args, True), **conv(kwargs, True)), False)
    return wrapped


SUBSTITUTES = {}        # original function -> the substitute the capture calls


def _is_function(f):
    return isinstance(f, (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                          types.BuiltinMethodType, functools.partial))


def _sig(f):
    return tuple((p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values())


def substitute_in_graph(original_fn, *, can_constant_fold_through=False,
                        skip_signature_check=False):
    """Decorator: ``ember.compile`` captures the decorated function where the code calls
    ``original_fn`` (a function the capture cannot record: one reading tensor values, or
    computing off ember's ops); eager calls still run ``original_fn``. The capture finds the
    calls through the function's globals, the compiled modules' forward globals and
    ``original_fn``'s own module attribute.

    Example:
        >>> import ember
        >>> def scale_by_max(x):
        ...     return x / x.max().item()
        >>> @ember.compiler.substitute_in_graph(scale_by_max)
        ... def _scale_by_max(x):
        ...     return x / x.max()
        >>> f = ember.compile(lambda x: scale_by_max(x) + 1, fullgraph=True)
        >>> f(ember.tensor([1.0, 4.0]))
        tensor([1.2500, 2.0000])
    """
    if not _is_function(original_fn):
        raise TypeError(f"substitute_in_graph expects a function but got {type(original_fn)!r}")

    def wrapper(traceable_fn):
        if not _is_function(traceable_fn):
            raise TypeError(f"@substitute_in_graph(...) expects a function but got "
                            f"{type(traceable_fn)!r}")
        if not skip_signature_check:
            try:
                a, b = _sig(original_fn), _sig(traceable_fn)
            except ValueError:
                a = b = None
            if a != b:
                raise TypeError(f"Signature mismatch between {original_fn} and {traceable_fn}: "
                                f"{inspect.signature(original_fn)} != "
                                f"{inspect.signature(traceable_fn)}")
        if original_fn in SUBSTITUTES:
            raise ValueError(f"Duplicate polyfill handlers for {original_fn}: already handled "
                             f"by {SUBSTITUTES[original_fn]}")

        @functools.wraps(traceable_fn)
        def wrapped(*args, **kwargs):
            return original_fn(*args, **kwargs)
        SUBSTITUTES[original_fn] = SUBSTITUTES[wrapped] = traceable_fn
        wrapped.__torch_dynamo_original__ = original_fn
        wrapped.__torch_dynamo_polyfill__ = traceable_fn
        wrapped.__torch_dynamo_can_constant_fold_through__ = can_constant_fold_through
        return wrapped
    return wrapper


@contextlib.contextmanager
def substituted(fn, module):
    """While capturing ``fn`` (and ``module``): the names bound to a substituted function in
    the globals the code reads call its substitute."""
    if not SUBSTITUTES:
        yield
        return
    spaces = [getattr(fn, "__globals__", None)]
    if module is not None:
        spaces += [getattr(type(m).forward, "__globals__", None) for m in module.modules()]
    spaces += [vars(sys.modules[f.__module__]) for f in SUBSTITUTES
               if getattr(f, "__module__", None) in sys.modules]
    patches, seen = [], set()
    for ns in spaces:
        if ns is None or id(ns) in seen:
            continue
        seen.add(id(ns))
        for k, v in list(ns.items()):
            try:
                sub = SUBSTITUTES.get(v)
            except TypeError:           # (unhashable values)
                continue
            if sub is not None:
                patches.append((ns, k, v))
                ns[k] = sub
    try:
        yield
    finally:
        for ns, k, v in patches:
            ns[k] = v
