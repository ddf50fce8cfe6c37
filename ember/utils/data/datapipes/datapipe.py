"""DataPipes (``torch.utils.data``'s ``IterDataPipe``, ``MapDataPipe``): datasets composed by
chaining, each step a DataPipe wrapping the one before, reachable as a method of the source
once registered with ``functional_datapipe`` (``dp.map(f).filter(g).batch(4)``).

``IterDataPipe[T]`` declares the element type ``T`` (the class's ``type``), which
``runtime_validation`` checks on each element an ``__iter__`` yields and
``argument_validation`` on DataPipe arguments. NOTE: torch 2.13 keeps these decorators but
its ``IterDataPipe[T]`` no longer records ``T`` (runtime validation fails there with an
AttributeError, argument validation checks nothing); ember's check what they document.
"""
import collections.abc
import functools
import typing

from ..dataset import Dataset, IterableDataset

__all__ = ["DataChunk", "DFIterDataPipe", "IterDataPipe", "MapDataPipe", "functional_datapipe",
           "guaranteed_datapipes_determinism", "non_deterministic", "argument_validation",
           "runtime_validation", "runtime_validation_disabled"]

# ---- element types ------------------------------------------------------------------------


def _issubtype(left, right):
    """Whether type ``left`` is a subtype of ``right`` (``typing`` forms included)."""
    if right is typing.Any or left == right:
        return True
    if left is typing.Any:
        return False
    r_origin, l_origin = typing.get_origin(right), typing.get_origin(left)
    if r_origin is typing.Union:
        return all(_issubtype(a, right) for a in typing.get_args(left)) if \
            l_origin is typing.Union else any(_issubtype(left, a) for a in typing.get_args(right))
    if l_origin is typing.Union:
        return all(_issubtype(a, right) for a in typing.get_args(left))
    lo, ro = l_origin or left, r_origin or right
    if not (isinstance(lo, type) and isinstance(ro, type) and issubclass(lo, ro)):
        return False
    r_args = typing.get_args(right)
    if not r_args:
        return True
    l_args = typing.get_args(left) or (typing.Any,) * len(r_args)
    return len(l_args) == len(r_args) and all(map(_issubtype, l_args, r_args))


def _isinstance(data, t):
    """Whether value ``data`` is of type ``t`` (the elements of containers too)."""
    if t is typing.Any:
        return True
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Union:
        return any(_isinstance(data, a) for a in args)
    if not isinstance(data, origin or t):
        return False
    if not args:
        return True
    if issubclass(origin, collections.abc.Mapping):
        return all(_isinstance(k, args[0]) and _isinstance(v, args[1]) for k, v in data.items())
    if issubclass(origin, tuple):
        return len(args) == len(data) and all(map(_isinstance, data, args)) if \
            args[-1] is not Ellipsis else all(_isinstance(d, args[0]) for d in data)
    return all(_isinstance(d, args[0]) for d in data)


class _DataPipeType:
    """The element type of a DataPipe class (``IterDataPipe[int].type``)."""

    def __init__(self, param):
        self.param = param

    def __repr__(self):
        return typing._type_repr(self.param)

    def __eq__(self, other):
        return isinstance(other, _DataPipeType) and self.param == other.param

    def __hash__(self):
        return hash(self.param)

    def issubtype(self, other):
        if isinstance(other, _DataPipeType):
            other = other.param
        elif not isinstance(other, (type, typing._GenericAlias, type(typing.Any))) and \
                typing.get_origin(other) is None:
            raise TypeError(f"Expected '_DataPipeType' or 'type', but found {type(other)}")
        return _issubtype(self.param, other)

    def issubtype_of_instance(self, other):
        return _isinstance(other, self.param)


def _element_type(cls):
    """``T`` of the ``IterDataPipe[T]`` (or ``MapDataPipe[T]``) base ``cls`` declares."""
    for base in getattr(cls, "__orig_bases__", ()):
        origin = typing.get_origin(base)
        if isinstance(origin, type) and issubclass(origin, (IterDataPipe, MapDataPipe)):
            return _DataPipeType(typing.get_args(base)[0])
    return None


def _check_unpickable_fn(fn):
    """A callable, with torch's warning where pickle cannot carry it (to DataLoader workers):
    a lambda or a local function."""
    import warnings
    if not callable(fn):
        raise TypeError(f"A callable function is expected, but {type(fn)} is provided.")
    fn = fn.func if isinstance(fn, functools.partial) else fn
    import inspect
    code = getattr(fn, "__code__", None)
    local = code.co_flags & inspect.CO_NESTED if code is not None else \
        "<locals>" in getattr(fn, "__qualname__", "")
    kind = "Local" if local else "Lambda" if getattr(fn, "__name__", None) == "<lambda>" else None
    if kind:
        warnings.warn(f"{kind} function is not supported by pickle, please use regular python "
                      "function or functools.partial instead.", stacklevel=2)


# ---- the DataPipe classes -----------------------------------------------------------------

class DataChunk(list):
    """A batch of a DataPipe (what ``batch`` yields): a list that prints itself.

    Example:
        >>> from ember.utils.data import DataChunk
        >>> DataChunk([1, 2]).as_str("  ")
        '  [1, 2]'
    """

    def __init__(self, items):
        super().__init__(list(items))

    def as_str(self, indent=""):
        return indent + "[" + ", ".join(str(i) for i in iter(self)) + "]"

    def __iter__(self):
        yield from super().__iter__()

    def raw_iterator(self):
        yield from self


def _resetting(iter_fn):
    """``__iter__`` of an IterDataPipe: ``reset()`` first, as torch's. NOTE: torch documents
    that a new iterator invalidates the older ones of a DataPipe, but 2.13 does not enforce
    it (its check is never reached); neither does ember."""
    @functools.wraps(iter_fn)
    def wrapper(self):
        self.reset()
        return iter_fn(self)
    wrapper._resetting = True
    return wrapper


class _DataPipeBase:
    """What both kinds share: registered functional forms, hooks, printing."""

    functions = {}
    reduce_ex_hook = getstate_hook = str_hook = repr_hook = None
    type = _DataPipeType(typing.Any)
    __class_getitem__ = classmethod(lambda cls, item: typing._GenericAlias(cls, (item,)))

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        t = _element_type(cls)
        if t is not None:
            cls.type = t
        it = cls.__dict__.get("__iter__")
        if "IterDataPipe" in globals() and issubclass(cls, IterDataPipe) and it is not None \
                and not getattr(it, "_resetting", False):
            cls.__iter__ = _resetting(it)

    def __getattr__(self, name):
        kind = IterDataPipe if isinstance(self, IterDataPipe) else MapDataPipe
        f = kind.functions.get(name)
        if f is None:
            raise AttributeError(f"'{self.__class__.__name__}' object has no attribute '{name}")
        return functools.update_wrapper(functools.partial(f, self), f, assigned=("__doc__",))

    @classmethod
    def register_function(cls, function_name, function):
        cls.functions[function_name] = function

    @classmethod
    def register_datapipe_as_function(cls, function_name, cls_to_register,
                                      enable_df_api_tracing=False):
        if function_name in cls.functions:
            raise Exception(f"Unable to add DataPipe function name {function_name} as it is "
                            "already taken")

        def function(source_dp, *args, **kwargs):
            return cls_to_register(source_dp, *args, **kwargs)
        cls.functions[function_name] = functools.update_wrapper(
            function, cls_to_register, assigned=("__doc__",), updated=())

    def __getstate__(self):
        hook = type(self)._hook_base().getstate_hook
        return hook(self.__dict__) if hook is not None else self.__dict__

    def __reduce_ex__(self, *args, **kwargs):
        hook = type(self)._hook_base().reduce_ex_hook
        if hook is not None:
            try:
                return hook(self)
            except NotImplementedError:
                pass
        return super().__reduce_ex__(*args, **kwargs)

    @classmethod
    def _set_hook(cls, name, hook_fn):
        base = cls._hook_base()
        if getattr(base, name) is not None and hook_fn is not None:
            raise RuntimeError(f"Attempt to override existing {name}")
        setattr(base, name, hook_fn)

    @classmethod
    def set_getstate_hook(cls, hook_fn):
        cls._set_hook("getstate_hook", hook_fn)

    @classmethod
    def set_reduce_ex_hook(cls, hook_fn):
        cls._set_hook("reduce_ex_hook", hook_fn)

    def __repr__(self):
        hook = type(self)._hook_base().repr_hook
        return hook(self) if hook is not None else str(self.__class__.__qualname__)

    def __str__(self):
        hook = type(self)._hook_base().str_hook
        return hook(self) if hook is not None else str(self.__class__.__qualname__)

    def __dir__(self):
        return list(super().__dir__()) + list(type(self)._hook_base().functions)


class IterDataPipe(_DataPipeBase, IterableDataset):
    """An iterable-style DataPipe: subclasses define ``__iter__`` (and may define ``reset``,
    called as each iteration starts).

    Example:
        >>> from ember.utils.data import IterDataPipe, functional_datapipe
        >>> class Numbers(IterDataPipe):
        ...     def __init__(self, n):
        ...         self.n = n
        ...     def __iter__(self):
        ...         yield from range(self.n)
        >>> @functional_datapipe("times")
        ... class Times(IterDataPipe):
        ...     def __init__(self, source, k):
        ...         self.source, self.k = source, k
        ...     def __iter__(self):
        ...         for x in self.source:
        ...             yield x * self.k
        >>> list(Numbers(4).times(10).filter(lambda x: x > 0).batch(2))
        [[10, 20], [30]]
        >>> del IterDataPipe.functions["times"]
    """

    functions = {}
    reduce_ex_hook = getstate_hook = str_hook = repr_hook = None

    @classmethod
    def _hook_base(cls):
        return IterDataPipe

    def reset(self):
        """Called as each new iteration starts; override to reset buffers and counters."""


class DFIterDataPipe(IterDataPipe):
    """An IterDataPipe of data frames."""

    def _is_dfpipe(self):
        return True


class MapDataPipe(_DataPipeBase, Dataset):
    """A map-style DataPipe: subclasses define ``__getitem__`` (and usually ``__len__``).

    Example:
        >>> from ember.utils.data.datapipes.map import SequenceWrapper
        >>> dp = SequenceWrapper(range(5)).map(lambda x: x * x)
        >>> [dp[i] for i in range(len(dp))]
        [0, 1, 4, 9, 16]
    """

    functions = {}
    reduce_ex_hook = getstate_hook = str_hook = repr_hook = None

    @classmethod
    def _hook_base(cls):
        return MapDataPipe


# ---- decorators ---------------------------------------------------------------------------

class functional_datapipe:
    """Register a DataPipe class as a method of its kind of DataPipe: ``dp.<name>(*args)``
    is ``cls(dp, *args)`` (see ``IterDataPipe``'s example)."""

    def __init__(self, name, enable_df_api_tracing=False):
        self.name, self.enable_df_api_tracing = name, enable_df_api_tracing

    def __call__(self, cls):
        target = cls.cls if isinstance(cls, non_deterministic) else cls
        if isinstance(target, type) and issubclass(target, IterDataPipe):
            IterDataPipe.register_datapipe_as_function(self.name, cls, self.enable_df_api_tracing)
        elif isinstance(target, type) and issubclass(target, MapDataPipe):
            MapDataPipe.register_datapipe_as_function(self.name, cls)
        elif isinstance(cls, non_deterministic) or not isinstance(cls, type):
            raise TypeError("`functional_datapipe` can only decorate IterDataPipe")
        return cls


_determinism, _runtime_validation = [False], [True]


class _Switch:
    """Sets a module flag ``_flag[0]`` to ``_on`` from construction (so a call or a ``with``
    block) until the block exits."""

    def __init__(self):
        self.prev, self._flag[0] = self._flag[0], self._on

    def __enter__(self):
        """(The flag was set on construction, as torch's is.)"""

    def __exit__(self, *exc):
        self._flag[0] = self.prev


class guaranteed_datapipes_determinism(_Switch):
    """Within the block (or from the call on), making a ``non_deterministic`` DataPipe raises.

    Example:
        >>> from ember.utils.data import IterDataPipe, non_deterministic
        >>> from ember.utils.data import guaranteed_datapipes_determinism
        >>> @non_deterministic
        ... class Racy(IterDataPipe):
        ...     def __iter__(self):
        ...         yield 1
        >>> with guaranteed_datapipes_determinism():
        ...     Racy()
        Traceback (most recent call last):
        TypeError: Racy is non-deterministic, but you set 'guaranteed_datapipes_determinism'. You can turn off determinism for this DataPipe if that is acceptable for your application
    """
    _flag, _on = _determinism, True


class non_deterministic:
    """Mark an IterDataPipe class as non-deterministic, or (given a function of the
    constructor's arguments returning whether this instance is) conditionally so: under
    ``guaranteed_datapipes_determinism`` making one raises TypeError."""

    cls = None

    def __init__(self, arg):
        if isinstance(arg, type):
            if not issubclass(arg, IterDataPipe):
                raise TypeError("Only `IterDataPipe` can be decorated with `non_deterministic`"
                                f", but {arg.__name__} is found")
            self.cls = arg
        elif callable(arg):
            self.deterministic_fn = arg
        else:
            raise TypeError(f"{arg} can not be decorated by non_deterministic")

    def __call__(self, *args, **kwargs):
        if self.cls is not None:
            if _determinism[0]:
                raise TypeError(f"{self.cls.__name__} is non-deterministic, but you set "
                                f"'guaranteed_datapipes_determinism'. You can turn off determinism "
                                f"for this DataPipe if that is acceptable for your application")
            return self.cls(*args, **kwargs)
        if not (isinstance(args[0], type) and issubclass(args[0], IterDataPipe)):
            raise TypeError(f"Only `IterDataPipe` can be decorated, but {args[0].__name__} is "
                            "found")
        self.cls = args[0]
        return self.deterministic_wrapper_fn

    def deterministic_wrapper_fn(self, *args, **kwargs):
        res = self.deterministic_fn(*args, **kwargs)
        if not isinstance(res, bool):
            raise TypeError("deterministic_fn of `non_deterministic` decorator is required to "
                            f"return a boolean value, but {type(res)} is found")
        if _determinism[0] and res:
            raise TypeError(f"{self.cls.__name__} is non-deterministic with the inputs, but you "
                            f"set 'guaranteed_datapipes_determinism'. You can turn off determinism "
                            f"for this DataPipe if that is acceptable for your application")
        return self.cls(*args, **kwargs)


def argument_validation(f):
    """Check, at each call of ``f``, the arguments annotated as a DataPipe type
    (``IterDataPipe[int]``): a DataPipe, whose element type is a subtype of the hint's.

    Example:
        >>> from ember.utils.data import IterDataPipe, argument_validation
        >>> @argument_validation
        ... def total(dp: IterDataPipe[int]):
        ...     return sum(dp)
        >>> total([1, 2])
        Traceback (most recent call last):
        TypeError: Expected argument 'dp' as a IterDataPipe, but found <class 'list'>
    """
    import inspect
    signature, hints = inspect.signature(f), typing.get_type_hints(f)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        for name, value in signature.bind(*args, **kwargs).arguments.items():
            hint = hints.get(name)
            origin = typing.get_origin(hint) or hint
            if not (isinstance(origin, type) and issubclass(origin, _DataPipeBase)):
                continue
            if not isinstance(value, IterDataPipe):
                raise TypeError(f"Expected argument '{name}' as a IterDataPipe, but found "
                                f"{type(value)}")
            want = _DataPipeType(typing.get_args(hint)[0]) if typing.get_args(hint) else origin.type
            if not value.type.issubtype(want):
                raise TypeError(f"Expected type of argument '{name}' as a subtype of hint "
                                f"{want}, but found {value.type}")
        return f(*args, **kwargs)
    return wrapper


class runtime_validation_disabled(_Switch):
    """Within the block, ``runtime_validation`` checks nothing (see ``runtime_validation``)."""
    _flag, _on = _runtime_validation, False


def runtime_validation(f):
    """Decorate an IterDataPipe's ``__iter__``: each element yielded must be of the class's
    element type (``IterDataPipe[T]``), else RuntimeError.

    Example:
        >>> from ember.utils.data import IterDataPipe, runtime_validation
        >>> from ember.utils.data import runtime_validation_disabled
        >>> class Ints(IterDataPipe[int]):
        ...     @runtime_validation
        ...     def __iter__(self):
        ...         yield from (1, "two")
        >>> list(Ints())
        Traceback (most recent call last):
        RuntimeError: Expected an instance as subtype of int, but found two(<class 'str'>)
        >>> with runtime_validation_disabled():
        ...     list(Ints())
        [1, 'two']
    """
    if f.__name__ != "__iter__":
        raise TypeError(f"Can not decorate function {f.__name__} with 'runtime_validation'")

    @functools.wraps(f)
    def wrapper(self):
        for d in f(self):
            if _runtime_validation[0] and not self.type.issubtype_of_instance(d):
                raise RuntimeError(f"Expected an instance as subtype of {self.type}, but found "
                                   f"{d}({type(d)})")
            yield d
    return wrapper
