"""``torch.compile`` and ``torch.compiler``: capture, AOT autograd and C code generation.

``ember.compile(model)`` returns a wrapper that, on the first call for each guard signature
(input shapes, dtypes, devices, requires_grad, grad mode, the module's training flags),
records the call into the graph IR with its backward (``_aot.py``), generates fused C loops for
both (``ember/_graph/cgen.py``, docs/graphs.md), compiles them with the system C compiler
(cached on disk) and from then on runs the compiled program. A call that misses only because an
input's size changed compiles those dims dynamic (``dynamic=None``, torch's automatic dynamic
shapes; ``dynamic=True``: every dim from the first call; ``mark_dynamic``): one program whose
kernels take the sizes at run time (``_graph/dynamic.py``). Python that reads tensor values
(``.item()``, ``if t.sum() > 0``) makes that signature run eagerly (``fullgraph=True``: raises
torch's ``Unsupported``), so a compiled function is never silently wrong;
``ember._dynamo.explain`` lists the graphs and breaks. ``backend="eager"``/``"aot_eager"`` run
the function as written.
"""
import functools
import warnings
import weakref

from .. import nn

__all__ = ["compile", "reset", "disable", "is_compiling", "is_dynamo_compiling", "is_exporting",
           "allow_in_graph", "assume_constant_result", "list_backends", "OptimizedModule",
           "CacheInfo", "config", "cudagraph_mark_step_begin", "get_default_backend",
           "keep_portable_guards_unsafe", "keep_tensor_guards_unsafe", "load_cache_artifacts",
           "load_compiled_function", "save_cache_artifacts", "set_default_backend",
           "set_enable_guard_collectives", "skip_all_guards_unsafe",
           "skip_guard_on_all_nn_modules_unsafe", "skip_guard_on_globals_unsafe",
           "skip_guard_on_inbuilt_nn_modules_unsafe", "substitute_in_graph", "wrap_numpy"]

_BACKENDS = ("inductor", "eager", "aot_eager", "cudagraphs")
_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def list_backends(exclude_tags=("debug", "experimental")):
    """The backend names ``compile`` accepts (``inductor`` and ``cudagraphs`` generate code,
    the debug ones run eagerly).

    Example:
        >>> import ember
        >>> ember.compiler.list_backends()
        ['cudagraphs', 'inductor']
    """
    debug = ("eager", "aot_eager")
    return sorted(b for b in _BACKENDS if not (exclude_tags and "debug" in exclude_tags and
                                               b in debug))


def _check(backend, mode, options):
    if callable(backend):
        raise NotImplementedError("ember.compile cannot hand graphs to a custom backend yet")
    if backend not in _BACKENDS:
        from .._dynamo.exc import InvalidBackend
        raise InvalidBackend(f"Invalid backend: {backend!r}, see torch._dynamo.list_backends() "
                             "for available backends.")
    if mode not in _MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: default, "
                           "reduce-overhead, max-autotune, max-autotune-no-cudagraphs")
    if mode not in (None, "default") and options:
        raise RuntimeError("Either mode or options can be specified, but both can't be "
                           "specified at the same time.")


_MISSING = object()


class _Compiled:
    """The call path of a compiled callable: one compiled program per guard signature (see
    ``_guards``; a ``guard_filter_fn`` may drop guards); a function that reads Python values
    from its tensors runs eagerly (``fullgraph=True``: raises), as does everything where no C
    compiler is found (warned once)."""

    def __init__(self, fn, fullgraph, module=None, backend="inductor", mode=None,
                 guard_filter_fn=None, dynamic=None):
        self.fn, self.fullgraph, self.module, self.mode = fn, fullgraph, module, mode
        # frame: each input's sizes so far, None where one changed (torch's frame state);
        # static: (input, axis) -> the sizes at which it did not follow as a dynamic dim (it
        # is found by tracing with the size one larger: a size at the end of a range, as a
        # GPT's length at its block size, cannot), static from then on after two such sizes
        # (BatchNorm's batch: a float of it); recompile_reasons: the first failed guard of each
        # recompile, as torch logs them
        self.dynamic, self.frame, self.static, self.recompile_reasons = dynamic, {}, {}, []
        self.eager, self.guard_filter_fn = backend in ("eager", "aot_eager"), guard_filter_fn
        # programs by the guards they keep: ((name, value), ...) -> program (False: eager)
        self.programs, self.warned_limit, self.watch = {}, False, ([], [])
        _all.add(self)

    def _guards(self, args, kwargs, dyn=()):
        """What a program's validity depends on, as ``(name, guard type, value, key,
        is_global, from an nn module, from ember.nn's own modules)``: the inputs' tensor
        metadata, grad mode and autocast, the Python values among the arguments (baked into
        the graph), the module's training flags and parameters' requires_grad, and those of
        the modules and tensors a function reached through globals and closures."""
        import ember
        from .._ops import dispatch
        from .._graph.record import _map_out, flatten_tensors
        out = [(f"args[{i}]", "TENSOR_MATCH", t, (_shape(i, t, dyn) if dyn else tuple(t.shape),
                                                  t.dtype, str(t.device), t.requires_grad),
                False, False, False)
               for i, t in enumerate(flatten_tensors((args, kwargs)))]
        out.append(("", "GLOBAL_STATE", None, (ember.is_grad_enabled(),
                                                dispatch.hooks.autocast is None), False, False,
                    False))
        out.append(("args (Python values)", "CONSTANT_MATCH", None,
                    repr(_map_out((args, kwargs), lambda t: None)), False, False, False))
        if self.module is not None:
            for path, m in self.module.named_modules():
                builtin = type(m).__module__.startswith("ember.nn.")
                pre = "self." + path if path else "self"
                out.append((pre + ".training", "CONSTANT_MATCH", m.training, m.training, False,
                            True, builtin))
                out += [(f"{pre}._parameters['{k}']", "TENSOR_MATCH", p, p.requires_grad,
                         False, True, builtin) for k, p in m._parameters.items()
                        if p is not None]
        mods, live = self.watch
        out += [(f"G[module {i}].training", "CONSTANT_MATCH", m.training, m.training, True,
                 True, type(m).__module__.startswith("ember.nn.")) for i, m in enumerate(mods)]
        out += [(f"G[tensor {i}]", "TENSOR_MATCH", t, t.requires_grad, True, False, False)
                for i, t in enumerate(live)]
        return out

    def _find(self, guards, args, kwargs):
        cur = {g[0]: g[3] for g in guards}
        for kept, prog in self.programs.items():
            if all(cur.get(k, _MISSING) == v for k, v in kept) and (
                    prog is False or not prog.ranges or prog.fits(args, kwargs)):
                return prog, kept
        if self.programs:       # (why the last program did not fit)
            bad = [(k, v, cur.get(k)) for k, v in kept if cur.get(k, _MISSING) != v]
            self.recompile_reasons.append(_reason(*bad[0]) if bad else
                                          f"dynamic sizes {[r[0] for r in prog.ranges]} not "
                                          f"equal or outside {[r[1:] for r in prog.ranges]}")
        return None, None

    def __call__(self, *args, **kwargs):
        if _stance[0] == "force_eager" or self.eager:
            return self.fn(*args, **kwargs)
        prog, kept = self._find(self._guards(args, kwargs), args, kwargs)
        if prog is None:
            from .._dynamo import config
            if sum(p is not False for p in self.programs.values()) >= config.cache_size_limit:
                if not self.warned_limit:   # (as torch: past the limit, new signatures run
                    self.warned_limit = True    # eagerly rather than compile without end)
                    warnings.warn(f"ember.compile: {getattr(self.fn, '__name__', self.fn)} "
                                  f"reached cache_size_limit ({config.cache_size_limit}) "
                                  "compiled signatures; new ones run eagerly")
                return self.fn(*args, **kwargs)
            from ._api import substituted
            with substituted(self.fn, self.module):
                prog = self._compile(args, kwargs)
            if prog is not False:
                mods, live = self.watch
                known = set(map(id, mods + live))
                mods += [m for m in prog.watch[0] if id(m) not in known]
                live += [t for t in prog.watch[1] if id(t) not in known]
            self.programs[self._kept(args, kwargs, prog)] = prog
        elif prog is not False and sum(k.startswith("args[") for k, _ in kept) < len(
                prog.in_meta):
            _check_inputs(prog, args, kwargs)       # (input guards were dropped)
        if prog is False:
            return self.fn(*args, **kwargs)
        return prog(args, kwargs)

    def aot_compile(self, example_inputs):
        """Capture and compile now for ``example_inputs`` (``(args, kwargs)``): an
        ``AOTCompiledFunction`` that can be saved and loaded in another process."""
        from ._api import aot_compile
        return aot_compile(self, example_inputs)

    def _kept(self, args, kwargs, prog):
        """The guards ((name, value), ...) the new program keeps: all, or those the filter
        keeps; a dynamic dim's size is not among them (``Compiled.fits`` checks it)."""
        guards = self._guards(args, kwargs, {k for g in getattr(prog, "dyn", ()) for k in g})
        keep = [True] * len(guards)
        if self.guard_filter_fn is not None:
            from ._api import entries
            keep = list(self.guard_filter_fn(entries(guards)))
            if len(keep) != len(guards):
                raise RuntimeError(f"guard_filter_fn returned {len(keep)} flags for "
                                   f"{len(guards)} guards")
        return tuple((g[0], g[3]) for g, k in zip(guards, keep) if k)


    def _compile(self, args, kwargs):
        from . import _aot
        from .._graph import cgen, toolchain
        from .._graph.record import flatten_tensors
        from .._ops import dispatch
        from .._C import kernels
        flat = flatten_tensors((args, kwargs))
        if any(not cgen._fusable(t.device) for t in flat) or \
                dispatch.hooks.autocast is not None or dispatch.hooks.tracer is not None:
            return False
        groups, marked = self._dims(flat)
        try:
            while True:
                try:
                    prog = _aot.capture(self.fn, self.module, args, kwargs, groups)
                    break
                except _aot.Static as e:    # (unmarked groups go static, the last first)
                    if any(k in marked for k in groups[-1]):
                        from .._dynamo.exc import ConstraintViolationError
                        raise ConstraintViolationError(f"Constraints violated: {e}") from None
                    for k in groups.pop():
                        self.static.setdefault(k, set()).add(flat[k[0]].shape[k[1]])
        except _aot.Breaks as e:
            if self.fullgraph:
                from .._dynamo.exc import Unsupported
                raise Unsupported(f"data-dependent: {e} (fullgraph=True: the function must "
                                  "record as one graph)") from None
            return False
        if kernels._off:        # (EMBER_NO_C=1: the Python reference path, no C)
            return False
        if toolchain.compiler() is None:
            if not _warned:
                _warned.append(True)
                warnings.warn("ember.compile: no C compiler found (set CC); compiled functions "
                              "run eagerly")
            return False
        prog.in_meta = [(_shape(i, t, {k for g in groups for k in g}), t.dtype)
                        for i, t in enumerate(flat)]
        prog.ranges = [(g, max(marked.get(k, (2,))[0] for k in g),
                        min(marked.get(k, (0, float("inf")))[1] for k in g)) for g in groups]
        return prog.load(buffers=self.mode == "reduce-overhead")

    def _dims(self, flat):
        """The dims to compile dynamic, as groups of (input, axis) of one size (duck sizing,
        as torch: one size is one symbol), and those ``mark_dynamic`` marked, with their
        ranges. Dynamic: those marked, every one with ``dynamic=True``, those whose size
        changed since the first call with ``dynamic=None`` (automatic dynamic shapes); not
        those ``mark_static`` pinned or found not to follow, nor sizes 0 and 1, which torch
        specializes on (NOTE: a later call with size 1 compiles again, statically)."""
        from .._dynamo import config, exc
        from ._api import config as compiler_config     # (torch.compiler.config's, too)
        auto = self.dynamic is None and config.automatic_dynamic_shapes and \
            compiler_config.automatic_dynamic_shapes
        groups, marked = {}, {}
        for i, t in enumerate(flat):
            old, ranges = self.frame.get(i), getattr(t, "_dynamo_dynamic_range", {})
            self.frame[i] = now = tuple(s if old is None or len(old) != len(t.shape) or
                                        old[d] == s else None for d, s in enumerate(t.shape))
            for d, s in enumerate(t.shape):
                failed = self.static.get((i, d), ())
                if d in ranges:
                    marked[i, d] = lo, hi = ranges[d]
                    if not lo <= s <= hi:
                        raise exc.ConstraintViolationError(
                            f"dim {d} of input {i} is {s}, not in range [{lo}, {hi}] "
                            "(mark_dynamic; sizes 0 and 1 are specialized)")
                elif not (self.dynamic is True or auto and now[d] is None) or s < 2 or s in \
                        failed or len(failed) > 1 or d in getattr(t, "_dynamo_static_indices", ()):
                    continue
                groups.setdefault(s, []).append((i, d))
        return sorted(map(tuple, groups.values()), key=lambda g: not any(
            k in marked for k in g)), marked


def _reason(k, v, c):
    """A failed guard as torch's recompile reasons put it."""
    d = next((d for d, (a, b) in enumerate(zip(v[0], c[0])) if a is not None and a != b),
             None) if k.startswith("args[") and c is not None and len(v[0]) == len(c[0]) else None
    return f"{k}: expected {v!r}, actual {c!r}" if d is None else \
        f"tensor '{k}' size mismatch at index {d}. expected {v[0][d]}, actual {c[0][d]}"


def _shape(i, t, dyn):
    """Input ``i``'s shape as guarded: a ``_Dims`` where ``dyn`` holds some of its dims."""
    return _Dims(None if (i, d) in dyn else s for d, s in enumerate(t.shape))


class _Dims(tuple):
    """An input's shape among a program's guards; None, a dynamic dim, matches any size."""
    __hash__ = tuple.__hash__

    def __eq__(self, o):
        return len(o) == len(self) and all(a is None or a == b for a, b in zip(self, o))


def _check_inputs(prog, args, kwargs):
    """A program picked with its input guards dropped: the inputs must still have the shapes
    and dtypes it was compiled for (its kernels' loops are sized to them)."""
    from .._graph.record import flatten_tensors
    for i, (t, (shape, dtype)) in enumerate(zip(flatten_tensors((args, kwargs)), prog.in_meta)):
        if not (shape == tuple(t.shape) and t.dtype == dtype):      # (a _Dims: its __eq__)
            raise AssertionError(f"ember.compile: input {i} has shape {tuple(t.shape)} and "
                                 f"dtype {t.dtype}, but the program chosen with dropped guards "
                                 f"was compiled for {shape} and {dtype}")


_all, _warned = weakref.WeakSet(), []


class OptimizedModule(nn.Module):
    """What ``compile`` returns for a module: it calls the original (``_orig_mod``) and
    forwards attribute reads to it; its state_dict keys carry the ``_orig_mod.`` prefix, as
    torch's do."""

    def __init__(self, mod, call):
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_call", call)

    def forward(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)


def compile(model=None, *, fullgraph=False, dynamic=None, backend=None, mode=None,
            options=None, disable=False, **kwargs):
    """``torch.compile``: ``model`` wrapped to run as generated C (fused pointwise and row
    reduction loops; GEMMs by ember's kernels) forward and backward; ``mode="reduce-overhead"``
    also keeps each kernel's output buffers between calls. Usable as a decorator, with or
    without arguments.

    Example:
        >>> import ember
        >>> f = ember.compile(lambda x: x.sin() + 1)
        >>> f(ember.zeros(2))
        tensor([1., 1.])
    """
    from ._api import get_default_backend
    backend = get_default_backend() if backend is None else backend
    options = dict(options or {})
    guard_filter_fn = options.pop("guard_filter_fn", None)
    _check(backend, mode, options)
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                 mode=mode, options=dict(options, guard_filter_fn=guard_filter_fn)
                                 if guard_filter_fn else options, disable=disable)
    if disable:
        return model
    if isinstance(model, nn.Module):
        return OptimizedModule(model, _Compiled(model, fullgraph, model, backend, mode,
                                                guard_filter_fn, dynamic))
    if not callable(model):
        raise RuntimeError("torch.compile: the first argument must be callable")
    return functools.wraps(model)(_Compiled(model, fullgraph, None, backend, mode,
                                            guard_filter_fn, dynamic))


_stance = ["default"]


def reset():
    """Forget every compiled program and the sizes seen (the next call of a compiled function
    captures and compiles again, static; the disk cache stays)."""
    for c in _all:
        for state in (c.programs, c.frame, c.static):
            state.clear()


def disable(fn=None, recursive=True, *, reason=None):
    """Decorator accepted as torch's (a function called inside a compiled one is recorded op
    by op; ember does not capture Python frames, so there is nothing to turn off)."""
    return fn if fn is not None else (lambda f: f)


def set_stance(stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
    """``"force_eager"`` skips the fullgraph checks; ``"default"`` restores them."""
    _stance[0] = stance


def is_compiling():
    """Whether ``compile`` is capturing a function now."""
    from ._aot import compiling
    return compiling[0]


is_dynamo_compiling = is_compiling


def is_exporting():
    """Whether ``ember.onnx.export`` is tracing now."""
    from ..onnx import is_in_onnx_export
    return is_in_onnx_export()


def allow_in_graph(fn):
    """Decorator accepted as torch's (ember's capture records every op call anyway)."""
    return fn


def assume_constant_result(fn):
    """Decorator accepted as torch's."""
    return fn


from ._api import CacheInfo, config, cudagraph_mark_step_begin, get_default_backend, \
    keep_portable_guards_unsafe, keep_tensor_guards_unsafe, load_cache_artifacts, \
    load_compiled_function, save_cache_artifacts, set_default_backend, \
    set_enable_guard_collectives, skip_all_guards_unsafe, skip_guard_on_all_nn_modules_unsafe, \
    skip_guard_on_globals_unsafe, skip_guard_on_inbuilt_nn_modules_unsafe, \
    substitute_in_graph, wrap_numpy  # noqa: E402
