"""``ember.library``: user-defined ops, as ``torch.library``.

``custom_op`` (or ``Library.define`` + ``impl``) turns a Python function on tensors into an
ember ``OpDef`` run by the one dispatch: device checks, autograd (``register_autograd``), the
meta device (``register_fake``), ``__torch_function__``, tracing hooks and the profiler see it
like a built-in op. Kernels may differ per device type (``register_kernel``). Registered ops
are reachable as ``ember.ops.<namespace>.<name>`` (``torch.ops``).

Example:
    >>> import ember
    >>> from ember.library import custom_op
    >>> @custom_op("demo::scale", mutates_args=())
    ... def scale(x: ember.Tensor, k: float) -> ember.Tensor:
    ...     return x * k
    >>> @scale.register_fake
    ... def _(x, k):
    ...     return ember.empty_like(x)
    >>> scale(ember.ones(2), 3.0), scale(ember.ones(2, device="meta"), 3.0).shape
    (tensor([3., 3.]), torch.Size([2]))
"""
import contextlib
import inspect
import types
import typing
import warnings

import ember

from .._backends import device_of_array
from .._device import META
from .._ops.registry import OpDef
from .._tensor import Tensor
from ..autograd.function import FunctionCtx

__all__ = ["Library", "infer_schema", "custom_op", "register_kernel", "register_fake",
           "register_autograd", "register_autocast", "register_torch_dispatch", "register_vmap",
           "define", "impl", "impl_abstract", "get_ctx", "get_kernel", "opcheck",
           "fallthrough_kernel"]

_OPS = {}                       # qualname -> CustomOpDef
_CTX = []                       # the fake-impl context while a fake impl runs


def fallthrough_kernel():
    """A dummy kernel: registered for a dispatch key, the call falls through to the next."""
    raise NotImplementedError("fallthrough_kernel() should never be called.")


# ---- schemas ----------------------------------------------------------------------------
_TYPES = {Tensor: "Tensor", int: "SymInt", float: "float", bool: "bool", str: "str",
          ember.dtype: "ScalarType", ember.device: "Device"}


def _type_name(ann, name):
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if ann in _TYPES:
        return _TYPES[ann]
    if origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        return _type_name(next(a for a in args if a is not type(None)), name) + "?"
    if origin in (list, typing.Sequence, tuple) and args:
        return _type_name(args[0], name) + "[]"
    raise ValueError(f"Parameter {name} has unsupported type {ann}. The valid types are: "
                     f"{list(_TYPES)} and their lists and Optionals.")


def infer_schema(prototype_function, /, *, mutates_args, op_name=None):
    """torch's operator schema string of a type-annotated function.

    Example:
        >>> import ember
        >>> from ember.library import infer_schema
        >>> def f(x: ember.Tensor, n: int = 2) -> ember.Tensor: ...
        >>> infer_schema(f, mutates_args=())
        '(Tensor x, SymInt n=2) -> Tensor'
    """
    sig = inspect.signature(prototype_function)
    hints = typing.get_type_hints(prototype_function)
    mutates = set(sig.parameters) if mutates_args == "unknown" else set(mutates_args)
    params, n_mut = [], 0
    for name, p in sig.parameters.items():
        if name not in hints:
            raise ValueError(f"Parameter {name} must have a type annotation.")
        t = _type_name(hints[name], name)
        if name in mutates:
            t, n_mut = t.replace("Tensor", f"Tensor(a{n_mut}!)", 1), n_mut + 1
        d = "" if p.default is p.empty else "=" + (
            "None" if p.default is None else repr(p.default) if not isinstance(
                p.default, str) else f'"{p.default}"')
        params.append(("*, " if p.kind is p.KEYWORD_ONLY and not any(
            "*" in q for q in params) else "") + f"{t} {name}{d}")
    ret = hints.get("return", inspect.Signature.empty)
    if ret is None or ret is type(None):
        out = "()"
    elif typing.get_origin(ret) is tuple:
        out = "(" + ", ".join(_type_name(a, "return") for a in typing.get_args(ret)) + ")"
    else:
        out = _type_name(ret, "return")
    return f"{op_name or ''}({', '.join(params)}) -> {out}"


def _parse_schema(schema):
    """(parameter names, defaults, returns-nothing) of a schema ``name(Tensor x, ...) ->
    ...``: enough to build the op's Python signature."""
    head, ret = schema.rsplit("->", 1)
    inner = head[head.index("(") + 1:head.rindex(")")]
    names, defaults = [], {}
    for part in filter(None, (s.strip() for s in inner.split(","))):
        if part == "*":
            continue
        decl, _, default = part.partition("=")
        name = decl.split()[-1]
        names.append(name)
        if default:
            defaults[name] = eval(default.replace("True", "True"), {"None": None})
    return names, defaults, ret.strip() == "()"


# ---- the op ---------------------------------------------------------------------------
class _Ctx(FunctionCtx):
    """``register_autograd``'s ctx: ``setup_context`` saves, ``backward`` reads."""
    to_save = ()

    saved_tensors = property(lambda self: tuple(self.to_save))


class CustomOpDef:
    """A user op made by :func:`custom_op`; call it like the function it wraps.

    Example:
        >>> import ember
        >>> from ember.library import custom_op
        >>> @custom_op("demo::cube", mutates_args=())
        ... def cube(x: ember.Tensor) -> ember.Tensor:
        ...     return x ** 3
        >>> cube.register_autograd(lambda ctx, g: 3 * ctx.saved_tensors[0] ** 2 * g,
        ...                        setup_context=lambda ctx, inputs, output:
        ...                        ctx.save_for_backward(inputs[0]))
        >>> x = ember.tensor([2.0], requires_grad=True)
        >>> cube(x).backward()
        >>> x.grad
        tensor([12.])
    """

    def __init__(self, qualname, fn, schema, mutates_args=(), device_types=None):
        if "::" not in qualname:
            raise ValueError(f"Expected there to be a namespace in {qualname}, i.e. The "
                             "operator name should look something like ns::foo")
        self._qualname, self._init_fn, self._schema = qualname, fn, schema
        self._namespace, self._name = qualname.split("::")
        self._mutates = tuple(mutates_args) if mutates_args != "unknown" else ()
        self._kernels, self._fake, self._backward, self._setup = {}, None, None, None
        self._autocast, self._dispatch_rules, self._disabled = {}, {}, set()
        names, defaults, self._returns_none = _parse_schema(schema)
        self._params = names
        if fn is not None:
            self.register_kernel(device_types, fn)
        d = self._opdef = OpDef(qualname, self._forward_fn(names, defaults), method=False)
        d.grad_name = f"GeneratedBackwardFor_{self._namespace}_{self._name}_defaultBackward"
        d.meta = self._meta
        d.vjp(save=tuple(names) + ("result",))(self._vjp)
        if qualname in _OPS:
            raise RuntimeError(f"Tried to register an operator ({qualname}) but an operator "
                               f"with the same name was already registered.")
        _OPS[qualname] = self

    def __repr__(self):
        return f"<CustomOpDef({self._qualname})>"

    def _forward_fn(self, names, defaults):
        def fwd(xp, *arrays, **kwargs):
            dev = next((device_of_array(a) for a in arrays if hasattr(a, "dtype")), None)
            kernel = self._kernels.get(getattr(dev, "type", None), self._kernels.get(None))
            if kernel is None:
                raise NotImplementedError(f"{self._qualname}: no kernel registered for device "
                                          f"type '{dev.type if dev else None}'")
            with ember.no_grad():
                out = kernel(*(_tensor(a, dev) for a in arrays), **kwargs)
            return _arrays(out)
        params = [inspect.Parameter("xp", inspect.Parameter.POSITIONAL_ONLY)] + [
            inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              default=defaults.get(n, inspect.Parameter.empty)) for n in names]
        fwd.__signature__ = inspect.Signature(params)
        return fwd

    def _meta(self, *arrays, **kwargs):
        if self._fake is None:
            raise RuntimeError(f"There was no fake impl registered for {self}. This is "
                               "necessary for torch.compile/export/fx tracing to work. Please "
                               f"use `{self._init_fn.__name__ if self._init_fn else self._name}"
                               ".register_fake` to add an fake impl.")
        _CTX.append(_FakeCtx())
        try:
            out = self._fake(*(_tensor(a, META) for a in arrays), **kwargs)
        finally:
            _CTX.pop()
        return _arrays(out)

    def _vjp(self, g, *args, result=None, **kwargs):
        if self._backward is None:
            raise RuntimeError(f"Trying to backward through {self._namespace}.{self._name}."
                               "default but no autograd formula was registered. Please use "
                               "register_autograd to add one.")
        ctx = _Ctx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        if self._setup is not None:
            self._setup(ctx, tuple(args) + tuple(kwargs.values()), result)
        grads = self._backward(ctx, *(g if isinstance(g, (tuple, list)) else (g,)))
        return grads if isinstance(grads, tuple) else (grads,)

    def __call__(self, *args, **kwargs):
        for t, rule in self._dispatch_rules.items():
            if any(type(a) is t for a in args):
                return rule(self, (t,), args, kwargs)
        cast = next((c for d, c in self._autocast.items() if ember.is_autocast_enabled(d)), None)
        if cast is not None:
            with ember.autocast(device_type=cast[0], enabled=False):
                return self(*(a.to(cast[1]) if isinstance(a, Tensor) and a.is_floating_point()
                              else a for a in args), **kwargs)
        if self._returns_none:
            kernel = self._kernels.get(args[0].device.type if args and isinstance(
                args[0], Tensor) else None, self._kernels.get(None))
            out = kernel(*args, **kwargs)
        else:
            out = self._opdef(*args, **kwargs)
        for name in self._mutates:
            i = self._params.index(name)
            t = args[i] if i < len(args) else kwargs.get(name)
            if isinstance(t, Tensor):
                t._bump_version()
        return out

    def register_kernel(self, device_types, fn=None):
        """Use ``fn`` for tensors on ``device_types`` ("cpu", "cuda", a list, or None for
        all); a decorator without ``fn``."""
        def deco(f):
            for d in (device_types,) if device_types is None or isinstance(
                    device_types, str) else device_types:
                self._kernels[d] = f
            return f
        return deco if fn is None else deco(fn)

    def register_fake(self, fn, /):
        """``fn`` computes the op's output shapes and dtypes (on meta tensors, ``empty_like``
        and the like): the meta device and tracing run it instead of a kernel."""
        self._fake = fn
        return fn

    def register_autograd(self, backward, /, *, setup_context=None):
        """``setup_context(ctx, inputs, output)`` saves what ``backward(ctx, *grads)`` needs;
        ``backward`` returns a gradient per input (None for non-tensors)."""
        self._backward, self._setup = backward, setup_context

    def register_autocast(self, device_type, cast_inputs):
        """Under autocast on ``device_type``, floating inputs are cast to ``cast_inputs`` and
        the op runs with autocast off."""
        self._autocast[device_type] = (device_type, cast_inputs)

    def register_torch_dispatch(self, torch_dispatch_class, fn=None, /):
        """``fn(op, types, args, kwargs)`` runs the op when an argument is exactly of type
        ``torch_dispatch_class``."""
        def deco(f):
            self._dispatch_rules[torch_dispatch_class] = f
            return f
        return deco if fn is None else deco(fn)

    def register_vmap(self, func=None, /):
        """``func(info, in_dims, *args)`` batches the op under ``ember.func.vmap`` (which
        otherwise loops over the batch)."""
        def deco(f):
            self._vmap = f
            return f
        return deco if func is None else deco(func)

    @contextlib.contextmanager
    def set_kernel_enabled(self, device_type, enabled=True):
        """Within the block the kernel of ``device_type`` is (not) used."""
        saved = self._kernels.get(device_type)
        if not enabled:
            self._kernels.pop(device_type, None)
        try:
            yield
        finally:
            if saved is not None:
                self._kernels[device_type] = saved


def _tensor(a, dev):
    if hasattr(a, "dtype") and hasattr(a, "shape") and not isinstance(a, Tensor):
        return Tensor._wrap(a, dev)
    if type(a) is list and a and hasattr(a[0], "shape"):
        return [Tensor._wrap(x, dev) for x in a]
    return a


def _arrays(out):
    if isinstance(out, Tensor):
        return out._data
    return tuple(_arrays(o) for o in out) if isinstance(out, (tuple, list)) else out


class _FakeCtx:
    """``get_ctx()`` inside a fake impl."""

    def new_dynamic_size(self, *, min=0, max=None):
        raise NotImplementedError("data-dependent output sizes need symbolic shapes, which "
                                  "ember's meta device does not have")


def get_ctx():
    """The context of the fake impl now running (``new_dynamic_size``)."""
    if not _CTX:
        raise RuntimeError("torch.library.get_ctx() called outside of a fake impl")
    return _CTX[-1]


def custom_op(name, fn=None, /, *, mutates_args, device_types=None, schema=None):
    """Make ``fn`` (type-annotated; ``mutates_args`` names the inputs it writes) the op
    ``"namespace::name"``; a decorator without ``fn``. See :class:`CustomOpDef`.

    Example:
        >>> import ember
        >>> from ember.library import custom_op
        >>> @custom_op("demo::twice", mutates_args=())
        ... def twice(x: ember.Tensor) -> ember.Tensor:
        ...     return 2 * x
        >>> ember.ops.demo.twice(ember.ones(2))
        tensor([2., 2.])
    """
    def deco(f):
        return CustomOpDef(name, f, schema or infer_schema(f, mutates_args=mutates_args),
                           mutates_args, device_types)
    return deco if fn is None else deco(fn)


def _op(op):
    if isinstance(op, CustomOpDef):
        return op
    if isinstance(op, _Packet):
        return op._op
    if isinstance(op, str) and op in _OPS:
        return _OPS[op]
    raise ValueError(f"register: expected a CustomOpDef or an operator name 'ns::op' that was "
                     f"defined, got {op!r}")


def register_kernel(op, device_types, func=None, /, *, lib=None):
    """``op.register_kernel(device_types, func)`` for an op or its qualified name."""
    return _op(op).register_kernel(device_types, func)


def register_fake(op, func=None, /, *, lib=None, _stacklevel=1, allow_override=False):
    """Register ``func`` as ``op``'s fake (meta) implementation; a decorator without it.

    Example:
        >>> import ember
        >>> from ember import library
        >>> @library.custom_op("demo::rows", mutates_args=())
        ... def rows(x: ember.Tensor) -> ember.Tensor:
        ...     return x.sum(1)
        >>> _ = library.register_fake("demo::rows", lambda x: x.new_empty(x.shape[0]))
        >>> rows(ember.ones(3, 4, device="meta")).shape
        torch.Size([3])
    """
    def deco(f):
        return _op(op).register_fake(f)
    return deco if func is None else deco(func)


def impl_abstract(qualname, func=None, *, lib=None, _stacklevel=1):
    """The old name of :func:`register_fake` (warns, as torch's)."""
    warnings.warn("torch.library.impl_abstract was renamed to torch.library.register_fake. "
                  "Please use that instead; we will remove torch.library.impl_abstract in a "
                  "future version of PyTorch.", DeprecationWarning, stacklevel=2)
    return register_fake(qualname, func, lib=lib)


def register_autograd(op, backward, /, *, setup_context=None, lib=None):
    """``op.register_autograd(backward, setup_context=...)`` for an op or its name."""
    _op(op).register_autograd(backward, setup_context=setup_context)


def register_autocast(op, device_type, cast_inputs, /, *, lib=None):
    """``op.register_autocast(device_type, cast_inputs)`` for an op or its name."""
    _op(op).register_autocast(device_type, cast_inputs)


def register_torch_dispatch(op, torch_dispatch_class, func=None, /, *, lib=None):
    """``op.register_torch_dispatch(cls, func)`` for an op or its name."""
    return _op(op).register_torch_dispatch(torch_dispatch_class, func)


def register_vmap(op, func=None, /, *, lib=None):
    """``op.register_vmap(func)`` for an op or its name."""
    return _op(op).register_vmap(func)


def get_kernel(op, dispatch_key):
    """The function that runs ``op`` for ``dispatch_key`` ("CPU", "CUDA", "Meta")."""
    o = _op(op)
    key = str(dispatch_key).split(".")[-1].lower()
    if key == "meta":
        return o._fake
    return o._kernels.get({"cpu": "cpu", "cuda": "cuda"}.get(key), o._kernels.get(None))


_KEYS = {"CPU": "cpu", "CUDA": "cuda", "Meta": "meta", "": None,
         "CompositeExplicitAutograd": None, "CompositeImplicitAutograd": "composite",
         "Autograd": "autograd", "AutogradCPU": "autograd", "AutogradCUDA": "autograd"}


def _impl(o, fn, key):
    where = _KEYS.get(key)
    if key not in _KEYS:
        raise ValueError(f"impl: dispatch key {key!r} is not one ember runs (one of "
                         f"{sorted(_KEYS)})")
    if fn is fallthrough_kernel:
        return
    if where == "meta":
        o.register_fake(fn)
    elif where == "composite":      # runs as is, so autograd goes through its ops
        _OPS[o._qualname] = _Composite(o, fn)
    elif where == "autograd":
        raise NotImplementedError("impl(..., 'Autograd'): register the formula with "
                                  "register_autograd")
    else:
        o.register_kernel(where, fn)


class _Composite(CustomOpDef):
    """An op whose implementation is a composition of ember ops
    (``CompositeImplicitAutograd``): it is called directly."""

    def __init__(self, op, fn):
        self.__dict__.update(op.__dict__)
        self._fn = fn

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


class Library:
    """A namespace of ops: ``kind`` "DEF" defines new ones (``define``), "IMPL" and
    "FRAGMENT" add kernels to existing ones (``impl``).

    Example:
        >>> import ember
        >>> lib = ember.library.Library("demo2", "DEF")
        >>> lib.define("add_one(Tensor x) -> Tensor")
        'add_one'
        >>> lib.impl("add_one", lambda x: x + 1, "CPU")
        >>> ember.ops.demo2.add_one(ember.zeros(2))
        tensor([1., 1.])
    """

    def __init__(self, ns, kind, dispatch_key=""):
        if kind not in ("IMPL", "DEF", "FRAGMENT"):
            raise ValueError(f"Unsupported kind: {kind}")
        if ns in ("prim",) and kind in ("DEF", "FRAGMENT"):
            raise ValueError(f"{ns} is a reserved namespace. Please try creating a library with "
                             "another name.")
        self.ns, self.kind, self.dispatch_key, self._defined = ns, kind, dispatch_key, []

    def __repr__(self):
        return f"Library(kind={self.kind}, ns={self.ns}, dispatch_key={self.dispatch_key})>"

    def define(self, schema, alias_analysis="", *, tags=()):
        """Define the op of ``schema`` (``"name(Tensor x, int n=1) -> Tensor"``) in this
        namespace; returns its name."""
        if self.kind == "IMPL":
            raise RuntimeError("define() is not allowed for a Library of kind IMPL")
        name = schema[:schema.index("(")].split(".")[0]
        mutates = [p.split()[-1].split("=")[0] for p in schema[schema.index("(") + 1:
                                                               schema.rindex("->")].split(",")
                   if "!" in p]
        CustomOpDef(f"{self.ns}::{name}", None, schema, mutates)
        self._defined.append(f"{self.ns}::{name}")
        return name

    def impl(self, op_name, fn, dispatch_key="", *, with_keyset=False, allow_override=False):
        """Register ``fn`` as ``op_name``'s kernel for ``dispatch_key`` ("CPU", "CUDA",
        "Meta", "CompositeImplicitAutograd", "" for every device)."""
        name = op_name if isinstance(op_name, str) else op_name._qualname
        qual = name if "::" in name else f"{self.ns}::{name.split('.')[0]}"
        _impl(_op(qual), fn, dispatch_key or self.dispatch_key)

    def fallback(self, fn, dispatch_key="", *, with_keyset=False):
        """A namespace-wide fallback kernel: only ``fallthrough_kernel`` is meaningful in
        ember (there is no per-key dispatcher to fall back through)."""
        if fn is not fallthrough_kernel:
            raise NotImplementedError("Library.fallback: ember's dispatch has no per-key "
                                      "fallbacks; register kernels per op with impl()")

    def _destroy(self):
        for q in self._defined:
            _OPS.pop(q, None)
        self._defined = []


def define(qualname, schema, *, lib=None, tags=()):
    """Define the op ``qualname`` ("ns::name") with ``schema`` ("(Tensor x) -> Tensor").

    Example:
        >>> import ember
        >>> ember.library.define("demo3::neg2", "(Tensor x) -> Tensor")
        >>> ember.library.impl("demo3::neg2", "cpu", lambda x: -2 * x)
        >>> ember.ops.demo3.neg2(ember.ones(1))
        tensor([-2.])
    """
    ns, name = qualname.split("::")
    (lib or Library(ns, "FRAGMENT")).define(name + schema)


def impl(qualname, types, func=None, *, lib=None):
    """Register ``func`` for the op ``qualname`` on device ``types`` ("cpu", "cuda",
    "CompositeImplicitAutograd"...); a decorator without ``func``."""
    def deco(f):
        o = _op(qualname)
        for t in (types,) if isinstance(types, str) else types:
            _impl(o, f, {"cpu": "CPU", "cuda": "CUDA", "meta": "Meta", "default": ""}.get(t, t))
        return f
    if func is None:
        return deco
    deco(func)


def opcheck(op, args, kwargs=None, *, test_utils=("test_schema", "test_autograd_registration",
                                                   "test_faketensor"), raise_exception=True,
            atol=None, rtol=None):
    """Check a custom op's registrations on sample ``args``: the fake impl's shapes and
    dtypes equal the kernel's, and an op taking tensors that require grad has an autograd
    formula. Returns ``{test: "SUCCESS" or the exception}``.

    Example:
        >>> import ember
        >>> from ember.library import custom_op, opcheck
        >>> @custom_op("demo::sq", mutates_args=())
        ... def sq(x: ember.Tensor) -> ember.Tensor:
        ...     return x * x
        >>> _ = sq.register_fake(lambda x: ember.empty_like(x))
        >>> opcheck(sq, (ember.ones(2),))["test_faketensor"]
        'SUCCESS'
    """
    o, kwargs = _op(op), kwargs or {}
    if isinstance(test_utils, str):
        test_utils = (test_utils,)
    out = {}
    for test in test_utils:
        try:
            if test == "test_faketensor":
                real = o(*args, **kwargs)
                fake = o(*(a.to("meta") if isinstance(a, Tensor) else a for a in args), **kwargs)
                for r, f in zip(*((x,) if isinstance(x, Tensor) else x for x in (real, fake))):
                    if r.shape != f.shape or r.dtype != f.dtype:
                        raise RuntimeError(f"opcheck: the fake impl gives {f.shape} "
                                           f"{f.dtype}, the kernel {r.shape} {r.dtype}")
            elif test == "test_autograd_registration":
                if any(isinstance(a, Tensor) and a.requires_grad for a in args) and \
                        o._backward is None:
                    raise RuntimeError(f"{o._qualname}: inputs require grad but no autograd "
                                       "formula was registered (register_autograd)")
            elif test == "test_schema":
                infer_schema(o._init_fn, mutates_args=o._mutates) if o._init_fn else None
            else:
                raise ValueError(f"opcheck: unknown test {test!r}")
            out[test] = "SUCCESS"
        except Exception as e:  # noqa: BLE001  (reported per test, as torch's)
            if raise_exception:
                raise
            out[test] = e
    return out


class _Packet:
    """``ember.ops.ns.name``: the op, callable, with ``.default`` as torch's overload."""

    def __init__(self, op):
        self._op = op
        self.default = self

    def __call__(self, *args, **kwargs):
        return _OPS[self._op._qualname](*args, **kwargs)

    def __repr__(self):
        return f"{self._op._namespace}.{self._op._name}"


class _Namespace:
    def __init__(self, ns):
        self._ns = ns

    def __getattr__(self, name):
        op = _OPS.get(f"{self._ns}::{name}")
        if op is None:
            raise AttributeError(f"'_OpNamespace' '{self._ns}' object has no attribute '{name}'")
        return _Packet(op)


class _Ops:
    """``ember.ops``: registered ops by namespace (``ember.ops.mylib.foo``)."""

    def __getattr__(self, ns):
        if ns.startswith("__"):
            raise AttributeError(ns)
        return _Namespace(ns)


ops = _Ops()
