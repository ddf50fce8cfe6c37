"""``ember.overrides``: the ``__torch_function__`` protocol, as ``torch.overrides``.

An object (a Tensor subclass, or any class) that defines ``__torch_function__(cls, func,
types, args, kwargs)`` takes over ember's functions called with it; a ``TorchFunctionMode``
takes over every call inside its ``with`` block. Calls reach them from the one dispatch: while a
mode is entered or an instance of a subclass defining ``__torch_function__`` is alive, a
dispatch hook (its own slot, before vmap's, forward AD's and the profiler's) looks at each op's
operands; a non-tensor operand with
the method is found where the dispatch would reject it. Python-level functions use
``has_torch_function``/``handle_torch_function`` as torch's do. ``func`` is the public function
(``ember.add`` for ``ember.add(x, y)``, ``x.add(y)`` and ``x + y`` alike; ``Tensor.add_`` for
in-place calls).

Example:
    >>> import ember
    >>> class Logged(ember.Tensor):
    ...     @classmethod
    ...     def __torch_function__(cls, func, types, args=(), kwargs=None):
    ...         print("called", func.__name__)
    ...         return super().__torch_function__(func, types, args, kwargs)
    >>> x = ember.ones(2).as_subclass(Logged)
    >>> y = ember.mul(x, 3)
    called mul
    >>> type(y).__name__
    'Logged'
"""
import contextlib
import functools
import warnings
import weakref

from .._ops.dispatch import foreign_tensor

__all__ = ["get_ignored_functions", "get_overridable_functions", "get_testing_overrides",
           "handle_torch_function", "has_torch_function", "resolve_name", "is_tensor_like",
           "is_tensor_method_or_property", "wrap_torch_function", "enable_reentrant_dispatch",
           "TorchFunctionMode", "BaseTorchFunctionMode", "get_default_nowrap_functions",
           "has_torch_function_unary", "has_torch_function_variadic", "redispatch_function"]

_MODES = []                     # the TorchFunctionMode stack, innermost last
_OFF = {"subclass": 0, "all": 0, "skip": 0}     # DisableTorchFunction(Subclass), one hop
_USERS = [0]        # the dispatch hook's holders


def _disabled_torch_function_impl(func, types, args=(), kwargs=None):
    """The ``__torch_function__`` of types that opt out (``Parameter``'s in torch)."""
    return func(*args, **(kwargs or {}))


def _overloaded(relevant_args):
    """Arguments whose types define ``__torch_function__`` (one per type), subclasses before
    their parents, in order of appearance otherwise; [] while dispatch is disabled."""
    if _OFF["all"] or _OFF["subclass"]:
        return []
    from .._tensor import Tensor
    types, out = [], []
    for a in relevant_args:
        t = type(a)
        if t is Tensor or t in types:
            continue
        tf = getattr(t, "__torch_function__", None)
        if tf is None or tf is _disabled_torch_function_impl or (
                getattr(tf, "__func__", None) is Tensor.__torch_function__.__func__) or \
                foreign_tensor(a):      # (refused by dispatch: its default would call back)
            continue
        at = next((i for i, o in enumerate(types) if issubclass(t, o)), len(types))
        types.insert(at, t)
        out.insert(at, a)
    return out


def _flat(args, kwargs=None):
    for a in (*args, *(kwargs or {}).values()):
        if type(a) in (list, tuple):
            yield from a
        else:
            yield a


def _mode_on():
    return bool(_MODES) and not _OFF["all"]


def has_torch_function(relevant_args):
    """Whether a call with ``relevant_args`` must go to ``handle_torch_function``: one of them
    overrides ``__torch_function__`` or a mode is active.

    Example:
        >>> import ember
        >>> from ember.overrides import has_torch_function
        >>> has_torch_function((ember.ones(1), 2))
        False
    """
    if _OFF["skip"]:
        _OFF["skip"] = 0
        return False
    return _mode_on() or bool(_overloaded(relevant_args))


def has_torch_function_unary(a):
    """``has_torch_function((a,))``."""
    return has_torch_function((a,))


def has_torch_function_variadic(*args):
    """``has_torch_function(args)``."""
    return has_torch_function(args)


def resolve_name(f):
    """A readable name for ``f`` as torch spells it (``torch.add``, ``torch.Tensor.add_``).

    Example:
        >>> import ember
        >>> from ember.overrides import resolve_name
        >>> resolve_name(ember.add), resolve_name(ember.Tensor.add_)
        ('torch.add', 'torch.Tensor.add_')
    """
    import ember
    name = getattr(f, "__name__", None)
    if name is None:
        return None
    for prefix, space in (("torch", ember), ("torch.Tensor", ember.Tensor),
                          ("torch.nn.functional", ember.nn.functional),
                          ("torch.linalg", ember.linalg), ("torch.special", ember.special),
                          ("torch.fft", ember.fft)):
        if getattr(space, name, None) is f:
            return f"{prefix}.{name}"
    return f"{getattr(f, '__module__', None)}.{name}"


def handle_torch_function(public_api, relevant_args, *args, **kwargs):
    """Call the active mode's, then each overloaded argument's ``__torch_function__`` for
    ``public_api(*args, **kwargs)`` until one does not return ``NotImplemented``.

    Example:
        >>> import ember
        >>> from ember.overrides import handle_torch_function, has_torch_function
        >>> class Box:
        ...     @classmethod
        ...     def __torch_function__(cls, func, types, args=(), kwargs=None):
        ...         return f"Box handles {func.__name__}"
        >>> def double(x):
        ...     if has_torch_function((x,)):
        ...         return handle_torch_function(double, (x,), x)
        ...     return x * 2
        >>> double(Box()), double(ember.ones(1))
        ('Box handles double', tensor([2.]))
    """
    overloaded = _overloaded(relevant_args)
    types = tuple(type(a) for a in overloaded)
    if _mode_on():
        mode = _MODES.pop()
        try:
            ret = mode.__torch_function__(public_api, types, args, kwargs)
        finally:
            _MODES.append(mode)
        if ret is not NotImplemented:
            return ret
    for a in overloaded:
        tf = type(a).__torch_function__
        if getattr(tf, "__self__", None) is not type(a) and tf is not _disabled_torch_function_impl:
            warnings.warn("Defining your `__torch_function__ as a plain method is deprecated "
                          "and will be an error in future, please define it as a classmethod.",
                          DeprecationWarning, stacklevel=2)
            tf = a.__torch_function__
        ret = tf(public_api, types, args, kwargs)
        if ret is not NotImplemented:
            return ret
    msg = (f"no implementation found for '{resolve_name(public_api)}' on types that implement "
           f"__torch_function__: {[type(a) for a in overloaded]}")
    if _mode_on():
        msg += f" nor in mode {_MODES[-1]}"
    raise TypeError(msg)


def redispatch_function(func, types, args, kwargs):
    """Call ``func`` skipping one level of ``__torch_function__`` dispatch (from inside a
    ``__torch_function__``: ops that ``func`` runs are still intercepted).

    Example:
        >>> import ember
        >>> from ember.overrides import redispatch_function
        >>> redispatch_function(ember.add, (), (ember.ones(1), 1), {})
        tensor([2.])
    """
    _OFF["skip"] = 1
    try:
        return func(*args, **(kwargs or {}))
    finally:
        _OFF["skip"] = 0


def _convert(ret, cls):
    from .._tensor import Tensor
    if cls is Tensor:
        return ret
    if isinstance(ret, Tensor) and not isinstance(ret, cls):
        t = ret._alias(cls)
        t.grad_fn, t._output_nr = ret.grad_fn, ret._output_nr
        t._requires_grad = ret._requires_grad
        return t
    if isinstance(ret, (tuple, list)):
        return type(ret)(_convert(r, cls) for r in ret) if type(ret) in (tuple, list) else \
            type(ret)(*(_convert(r, cls) for r in ret))
    return ret


def _default_torch_function(cls, func, types, args=(), kwargs=None):
    # NOTE: ember calls no argument's __torch_function__ while this block below runs, so a
    # call arriving then comes from another library's dispatch (torch's, for
    # `torch.add(torch_tensor, ember_tensor)`) that running `func` again would loop through:
    # NotImplemented lets that library raise its TypeError.
    if _OFF["subclass"] or _OFF["all"] or not all(issubclass(cls, t) for t in types):
        return NotImplemented
    with DisableTorchFunctionSubclass():
        ret = func(*args, **(kwargs or {}))
    return ret if func in get_default_nowrap_functions() else _convert(ret, cls)


class DisableTorchFunctionSubclass:
    """Within the block, arguments' ``__torch_function__`` are not called (modes still are).

    Example:
        >>> import ember
        >>> with ember.DisableTorchFunctionSubclass():
        ...     ember.ones(1) + 1
        tensor([2.])
    """

    def __enter__(self):
        _OFF["subclass"] += 1
        return self

    def __exit__(self, *exc):
        _OFF["subclass"] -= 1


class DisableTorchFunction(DisableTorchFunctionSubclass):
    """Within the block, neither arguments' ``__torch_function__`` nor modes are called."""

    def __enter__(self):
        _OFF["all"] += 1
        return self

    def __exit__(self, *exc):
        _OFF["all"] -= 1


# ---- the dispatch hook ------------------------------------------------------------------
class _Hook:
    """On dispatch's hook slot while overrides are live: an op whose operands override
    ``__torch_function__``, or any op under a mode, goes to ``handle_torch_function``."""

    def __call__(self, opdef, args, kwargs, run):
        func = self._wanted(opdef, args, kwargs, None)
        if func is not None:
            return handle_torch_function(func, tuple(_flat(args, kwargs)), *args, **kwargs)
        return run(opdef, args, kwargs)

    def inplace(self, opdef, target, args, kwargs, self_at):
        full = (*args[:self_at], target, *args[self_at:])
        func = self._wanted(opdef, full, kwargs, True)
        if func is not None:
            return handle_torch_function(func, tuple(_flat(full, kwargs)), *full, **kwargs)
        return NotImplemented

    @staticmethod
    def _wanted(opdef, args, kwargs, inplace):
        if _OFF["all"]:
            return None
        if _OFF["skip"]:
            _OFF["skip"] = 0
            return None
        if not _MODES and not _overloaded(_flat(args, kwargs)):
            return None
        return _public(opdef, inplace)


_hook = _Hook()


def _public(opdef, inplace=None):
    from .. import _ops
    from .._tensor import Tensor
    return getattr(Tensor, opdef.name + "_") if inplace else _ops._function(opdef, opdef.name)


def _install():
    from .._ops import dispatch
    if not _USERS[0]:
        dispatch.hooks.override = _hook
    _USERS[0] += 1


def _uninstall():
    from .._ops import dispatch
    _USERS[0] -= 1
    if not _USERS[0]:
        dispatch.hooks.override = None


def _subclass_defined(cls):
    """A Tensor subclass defines ``__torch_function__``: its instances are counted as they
    are made (``_track``), and the hook is on while any lives (a class that stays defined, as
    ember.masked.MaskedTensor, so costs nothing until it is used)."""
    tf = cls.__dict__["__torch_function__"]
    if getattr(tf, "__func__", tf) is not _disabled_torch_function_impl:
        from .._tensor import TF_CLASSES
        TF_CLASSES.add(cls)


def _track(t):
    """``t`` is an instance of such a subclass: the hook is on until it is freed."""
    _install()
    weakref.finalize(t, _uninstall).atexit = False


def _fallback(opdef, args, kwargs):
    """dispatch's last resort for a call it cannot run (no tensor, or an operand it does not
    know): a non-tensor operand overriding ``__torch_function__`` takes it; else
    NotImplemented."""
    relevant = tuple(_flat(args, kwargs))
    if _OFF["all"] or not _overloaded(relevant):
        return NotImplemented
    return handle_torch_function(_public(opdef), relevant, *args, **(kwargs or {}))


# ---- modes ------------------------------------------------------------------------------
class TorchFunctionMode:
    """Base of modes: inside ``with mode:``, every ember function call goes to
    ``mode.__torch_function__(func, types, args, kwargs)`` (with the mode itself off while
    it runs, so calling ``func`` there runs it).

    Example:
        >>> import ember
        >>> from ember.overrides import TorchFunctionMode
        >>> class Count(TorchFunctionMode):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.calls = []
        ...     def __torch_function__(self, func, types, args=(), kwargs=None):
        ...         self.calls.append(func.__name__)
        ...         return func(*args, **(kwargs or {}))
        >>> with Count() as mode:
        ...     y = ember.ones(2).exp().sum()
        >>> mode.calls
        ['exp', 'sum']
    """

    def __init__(self):
        """(No state: a subclass's ``__init__`` may call it, as torch's.)"""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        raise NotImplementedError

    def __enter__(self):
        _MODES.append(self)
        _install()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        _MODES.remove(self)
        _uninstall()

    @classmethod
    def push(cls, *args, **kwargs):
        """A mode instance to enter (deprecated in torch: use ``with cls(...)``)."""
        warnings.warn("`Mode.push()` is no longer necessary and can be replaced with just "
                      "`with Mode()`")
        return cls(*args, **kwargs)


class BaseTorchFunctionMode(TorchFunctionMode):
    """A mode that runs every function as is (a base for modes overriding a few).

    Example:
        >>> import ember
        >>> from ember.overrides import BaseTorchFunctionMode
        >>> with BaseTorchFunctionMode():
        ...     ember.ones(1) * 2
        tensor([2.])
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def enable_reentrant_dispatch():
    """torch's context for re-entering its C++ dispatcher from Python; ember's dispatch is
    reentrant as is, so the block just runs.

    Example:
        >>> from ember.overrides import enable_reentrant_dispatch
        >>> with enable_reentrant_dispatch():
        ...     pass
    """
    yield


# ---- the function lists -----------------------------------------------------------------
@functools.lru_cache(None)
def _overridable():
    """({namespace: [functions]}, {function: name}) over ember's public functions."""
    import ember
    from .._ops import public_functions
    from .._ops.registry import all_ops
    ops = all_ops()
    spaces = {ember: sorted(public_functions(ops).values(), key=lambda f: f.__name__)}
    methods = [getattr(ember.Tensor, n) for n in dir(ember.Tensor) if not n.startswith("_") and
               callable(getattr(ember.Tensor, n, None))]
    spaces[ember.Tensor] = methods
    for mod in (ember.nn.functional, ember.linalg, ember.fft, ember.special):
        spaces[mod] = [getattr(mod, n) for n in getattr(mod, "__all__", dir(mod))
                       if not n.startswith("_") and callable(getattr(mod, n, None)) and
                       not isinstance(getattr(mod, n), type)]
    names = {}
    for space, fns in spaces.items():
        for f in fns:
            names.setdefault(f, resolve_name(f))
    return spaces, names


def get_overridable_functions():
    """``{namespace: [functions]}``: the public functions ``__torch_function__`` can override
    (ember, Tensor's methods, nn.functional, linalg, fft, special).

    Example:
        >>> import ember
        >>> from ember.overrides import get_overridable_functions
        >>> ember.add in get_overridable_functions()[ember]
        True
    """
    return _overridable()[0]


def get_ignored_functions():
    """The public functions that ``__torch_function__`` cannot override (they take no tensor,
    or ask about types): factories, dtype and default settings, ``is_tensor``...

    Example:
        >>> import ember
        >>> from ember.overrides import get_ignored_functions
        >>> ember.is_tensor in get_ignored_functions()
        True
    """
    import ember
    names = ("typename", "is_tensor", "is_storage", "set_default_tensor_type", "set_default_dtype",
             "get_default_dtype", "set_default_device", "get_default_device", "set_rng_state",
             "get_rng_state", "manual_seed", "seed", "initial_seed", "set_printoptions",
             "compiled_with_cxx11_abi", "tensor", "as_tensor", "from_numpy", "frombuffer", "empty",
             "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange", "range",
             "linspace", "logspace", "eye", "empty_strided", "scalar_tensor", "tril_indices",
             "triu_indices", "hann_window", "hamming_window", "bartlett_window", "blackman_window",
             "kaiser_window", "promote_types", "result_type", "can_cast", "finfo", "iinfo",
             "is_grad_enabled", "set_grad_enabled", "no_grad", "enable_grad", "inference_mode",
             "load", "save", "use_deterministic_algorithms", "set_num_threads", "get_num_threads")
    return {getattr(ember, n) for n in names if hasattr(ember, n)}


def get_default_nowrap_functions():
    """Functions whose results the default ``__torch_function__`` returns unconverted (the
    getters of ``grad`` and ``_base``, as torch's).

    Example:
        >>> from ember.overrides import get_default_nowrap_functions
        >>> isinstance(get_default_nowrap_functions(), set)
        True
    """
    from .._tensor import Tensor
    return {p.__get__ for p in (Tensor.__dict__.get("grad"), Tensor.__dict__.get("_base"))
            if hasattr(p, "__get__") and hasattr(p, "__set__")}


def get_testing_overrides():
    """``{function: dummy}``: for every overridable function a lambda taking any arguments and
    returning -1 (what tests of a ``__torch_function__`` implementation substitute).

    Example:
        >>> import ember
        >>> from ember.overrides import get_testing_overrides
        >>> get_testing_overrides()[ember.add](1, 2)
        -1
    """
    return {f: (lambda *args, **kwargs: -1) for fns in get_overridable_functions().values()
            for f in fns}


def is_tensor_like(inp):
    """Whether ``inp`` is a Tensor or acts like one (its type defines ``__torch_function__``).

    Example:
        >>> import ember
        >>> from ember.overrides import is_tensor_like
        >>> is_tensor_like(ember.ones(1)), is_tensor_like(1.0)
        (True, False)
    """
    from .._tensor import Tensor
    return type(inp) is Tensor or hasattr(type(inp), "__torch_function__")


def is_tensor_method_or_property(func):
    """Whether ``func`` is a Tensor method or property getter (its ``__torch_function__``
    calls then receive the tensor as first argument).

    Example:
        >>> import ember
        >>> from ember.overrides import is_tensor_method_or_property
        >>> is_tensor_method_or_property(ember.Tensor.add_), is_tensor_method_or_property(len)
        (True, False)
    """
    from .._tensor import Tensor
    return getattr(func, "__name__", None) == "__get__" or any(
        getattr(Tensor, n, None) is func for n in (getattr(func, "__name__", ""),))


def wrap_torch_function(dispatcher):
    """Decorator making a Python function overridable: ``dispatcher(*args, **kwargs)`` returns
    the arguments that may carry ``__torch_function__``.

    Example:
        >>> import ember
        >>> from ember.overrides import wrap_torch_function
        >>> @wrap_torch_function(lambda x: (x,))
        ... def triple(x):
        ...     return x * 3
        >>> triple(ember.ones(1))
        tensor([3.])
    """
    def inner(func):
        @functools.wraps(func)
        def wrapped(*args, **kwargs):
            relevant = dispatcher(*args, **kwargs)
            if has_torch_function(relevant):
                return handle_torch_function(wrapped, relevant, *args, **kwargs)
            return func(*args, **kwargs)
        return wrapped
    return inner
