"""``symbolic_trace``: run a module's Python code on ``Proxy`` objects and record what it does.

While tracing, the public functions of ``ember``, ``ember.nn.functional`` and ``math`` (and
those given to ``wrap``) are swapped for wrappers that record one ``call_function`` node when a
Proxy is among their arguments; ``nn.Module.__call__`` records ``call_module`` for leaf modules
(ember's own layers) and runs the others' forward; reading a parameter attribute gives a
``get_attr`` proxy. Everything is put back when the trace ends.
"""
import functools
import inspect
import math
import types

from .. import nn
from .._graph.ir import Graph
from .._tensor import Tensor
from .proxy import Proxy

_wrapped = []       # (globals dict, name) pairs registered by wrap()


def wrap(fn_or_name):
    """Record calls of a module-level function as one node instead of tracing through it (at
    module scope: ``torch.fx.wrap("my_fn")``, or as a decorator).

    Example:
        >>> import ember
        >>> from ember import fx
        >>> def twice(x):
        ...     return x * 2
        >>> _ = fx.wrap(twice)
        >>> [n.op for n in fx.symbolic_trace(lambda x: twice(x)).graph.nodes]
        ['placeholder', 'call_function', 'output']
    """
    frame = inspect.currentframe().f_back
    name = fn_or_name if isinstance(fn_or_name, str) else fn_or_name.__name__
    if frame.f_code.co_name != "<module>" and not isinstance(fn_or_name, types.FunctionType):
        raise NotImplementedError("wrap must be called at the top level of a module")
    glb = frame.f_globals if isinstance(fn_or_name, str) else fn_or_name.__globals__
    _wrapped.append((glb, name))
    return fn_or_name


def _has_proxy(a):
    if isinstance(a, Proxy):
        return True
    if type(a) in (tuple, list):
        return any(_has_proxy(x) for x in a)
    return any(_has_proxy(x) for x in a.values()) if type(a) is dict else False


class ProxyableClassMeta(type):
    """Metaclass whose classes, built from a ``Proxy`` during symbolic tracing, are recorded as
    one ``call_function`` node on the class (torch.fx.ProxyableClassMeta); built from plain
    values they are plain instances.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> class Pair(metaclass=fx.ProxyableClassMeta):
        ...     def __init__(self, a, b):
        ...         self.a, self.b = a, b
        >>> gm = fx.symbolic_trace(lambda x: Pair(x, x))
        >>> [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
        ['Pair']
    """

    def __call__(cls, *args, **kwargs):
        found = [a for a in list(args) + list(kwargs.values()) if _has_proxy(a)]
        if not found:
            return super().__call__(*args, **kwargs)
        proxy = next(iter(_proxies(found)))
        return proxy.tracer.create_proxy("call_function", cls, args, kwargs)


def _proxies(a):
    if isinstance(a, Proxy):
        yield a
    elif type(a) in (tuple, list):
        for x in a:
            yield from _proxies(x)
    elif type(a) is dict:
        for x in a.values():
            yield from _proxies(x)


class Tracer:
    """Records a module's forward as a ``Graph`` (torch.fx.Tracer); override
    ``is_leaf_module`` to choose which submodules stay ``call_module`` nodes.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> class NoLeaves(fx.Tracer):
        ...     def is_leaf_module(self, m, qualname):
        ...         return False
        >>> g = NoLeaves().trace(ember.nn.Sequential(ember.nn.ReLU()))
        >>> [n.op for n in g.nodes]
        ['placeholder', 'call_method', 'output']
    """

    def __init__(self, autowrap_modules=(math,), autowrap_functions=(),
                 param_shapes_constant=False):
        self.autowrap_modules, self.autowrap_functions = tuple(autowrap_modules), \
            tuple(autowrap_functions)
        self.graph, self.root, self._consts = None, None, 0

    def is_leaf_module(self, m, module_qualified_name):
        """ember's own layers (not containers) are leaves: one ``call_module`` node each."""
        return (type(m).__module__.startswith("ember.nn") or
                type(m).__module__.startswith("torch.nn")) and \
            not isinstance(m, nn.Sequential)

    def path_of_module(self, mod):
        for name, m in self.root.named_modules():
            if m is mod:
                return name
        raise NameError("module is not installed as a submodule")

    def call_module(self, m, forward, args, kwargs):
        path = self.path_of_module(m)
        if not self.is_leaf_module(m, path):
            return forward(*args, **kwargs)
        return self.create_proxy("call_module", path, args, kwargs)

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        if isinstance(attr_val, nn.Parameter):
            for name, p in self.root.named_parameters():
                if p is attr_val:
                    if name not in parameter_proxy_cache:
                        parameter_proxy_cache[name] = self.create_proxy("get_attr", name, (), {})
                    return parameter_proxy_cache[name]
        return attr_val

    def create_arg(self, a):
        """``a`` with proxies turned into their nodes and tensors into ``get_attr`` nodes (a
        parameter or buffer by name, any other tensor as a new constant attribute)."""
        if isinstance(a, Proxy):
            return a.node
        t = type(a)
        if t in (tuple, list):
            return t(self.create_arg(x) for x in a)
        if t is dict:
            return {k: self.create_arg(v) for k, v in a.items()}
        if t is slice:
            return slice(self.create_arg(a.start), self.create_arg(a.stop), self.create_arg(a.step))
        if isinstance(a, Tensor):
            for name, p in list(self.root.named_parameters()) + list(self.root.named_buffers()):
                if p is a:
                    return self.graph.get_attr(name)
            name = f"_tensor_constant{self._consts}"
            self._consts += 1
            setattr(self.root, name, a) if not isinstance(self.root, nn.Module) else \
                self.root.register_buffer(name, a, persistent=False)
            return self.graph.get_attr(name)
        if isinstance(a, nn.Module):
            raise TraceError_(a)
        return a

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        return self.graph.create_node(kind, target, args, kwargs, name, type_expr)

    def proxy(self, node):
        return Proxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None,
                     proxy_factory_fn=None):
        node = self.create_node(kind, target, self.create_arg(tuple(args)),
                                self.create_arg(dict(kwargs)), name, type_expr)
        return proxy_factory_fn(node) if proxy_factory_fn else self.proxy(node)

    def _wrapper(self, fn):
        @functools.wraps(fn)
        def f(*args, **kwargs):
            if _has_proxy(args) or _has_proxy(kwargs):
                return self.create_proxy("call_function", fn, args, kwargs)
            return fn(*args, **kwargs)
        return f

    def trace(self, root, concrete_args=None):
        """The graph of ``root`` (a module or function); arguments named in ``concrete_args``
        are fixed to the given values (no placeholder)."""
        import ember
        from ember.nn import functional
        self.graph = Graph(tracer_cls=type(self))
        if isinstance(root, nn.Module):
            self.root, fn = root, type(root).forward
        else:
            self.root, fn = nn.Module(), root
        self.graph.owning_module = self.root
        concrete = dict(concrete_args or {})
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())[1 if isinstance(root, nn.Module) else 0:]
        call_args = [root] if isinstance(root, nn.Module) else []
        for p in params:
            if p.name in concrete:
                call_args.append(concrete[p.name])
            elif p.kind == p.VAR_POSITIONAL:
                raise TraceError_(None, "symbolic_trace: *args in forward needs concrete_args")
            else:
                default = () if p.default is p.empty else (p.default,)
                call_args.append(self.create_proxy("placeholder", p.name, default, {}))
        from .._ops import lazy
        lazy.load_all()         # (so every ember.<op> is in the module's globals to wrap)
        patches = []
        for mod in (ember, functional) + self.autowrap_modules:
            for k, v in list(vars(mod).items()):
                if not k.startswith("_") and (isinstance(v, types.FunctionType) or
                                              isinstance(v, types.BuiltinFunctionType)):
                    patches.append((vars(mod), k, v))
        for glb, k in _wrapped:
            if k in glb:
                patches.append((glb, k, glb[k]))
        for fn_ in self.autowrap_functions:
            patches.append((fn_.__globals__, fn_.__name__, fn_))
        cache, tracer = {}, self
        orig_call, orig_getattr = nn.Module.__call__, nn.Module.__getattr__

        def module_call(m, *a, **kw):
            return tracer.call_module(m, lambda *a, **kw: orig_call(m, *a, **kw), a, kw)

        def module_getattr(m, name):
            return tracer.getattr(name, orig_getattr(m, name), cache)
        try:
            for glb, k, v in patches:
                glb[k] = self._wrapper(v)
            nn.Module.__call__, nn.Module.__getattr__ = module_call, module_getattr
            out = fn(*call_args)
        finally:
            nn.Module.__call__, nn.Module.__getattr__ = orig_call, orig_getattr
            for glb, k, v in patches:
                glb[k] = v
        self.graph.output(self.create_arg(out))
        return self.graph


def TraceError_(m, msg=None):
    from .proxy import TraceError
    return TraceError(msg or f"symbolic_trace: a module ({type(m).__name__}) cannot be an "
                      "argument of a traced call")


def symbolic_trace(root, concrete_args=None):
    """Trace ``root`` (a module or function) with ``Proxy`` objects; return a ``GraphModule``.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> m = ember.nn.Sequential(ember.nn.Linear(2, 2), ember.nn.ReLU())
        >>> print(fx.symbolic_trace(m).code.strip())
        def forward(self, input):
            input_1 = input
            _0 = getattr(self, "0")(input_1);  input_1 = None
            _1 = getattr(self, "1")(_0);  _0 = None
            return _1
    """
    from .graph_module import GraphModule
    tracer = Tracer()
    graph = tracer.trace(root, concrete_args)
    name = type(root).__name__ if isinstance(root, nn.Module) else root.__name__
    return GraphModule(tracer.root, graph, name)

