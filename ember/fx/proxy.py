"""``Proxy``: the stand-in for a tensor during symbolic tracing; every use records a node."""
import dis
import inspect
import operator

from .._graph.ir import Node


class TraceError(ValueError):
    """Symbolic tracing met something it cannot record (control flow on a traced value)."""


class Proxy:
    """A value flowing through the traced code: methods, attributes and operators on it
    record ``call_method``, ``getattr`` and ``call_function`` nodes and return new proxies.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> gm = fx.symbolic_trace(lambda x: (x + 1).relu())
        >>> [n.op for n in gm.graph.nodes]
        ['placeholder', 'call_function', 'call_method', 'output']
    """

    def __init__(self, node, tracer=None):
        self.node, self.tracer = node, tracer

    def __repr__(self):
        return f"Proxy({self.node.name})"

    def __getattr__(self, k):
        if k.startswith("__") and k.endswith("__"):
            raise AttributeError(k)
        return Attribute(self, k)

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", "__call__", (self,) + args, kwargs)

    def __iter__(self):
        # as torch: unpacking ``a, b = proxy`` reads the count off the caller's bytecode
        frame = inspect.currentframe().f_back
        inst = next((i for i in dis.get_instructions(frame.f_code)
                     if i.offset == frame.f_lasti), None)
        if inst is not None and inst.opname == "UNPACK_SEQUENCE":
            return (self[i] for i in range(inst.argval))
        raise TraceError("Proxy object cannot be iterated. This can be attempted when the Proxy "
                         "is used in a loop or as a *args or **kwargs function argument. See the "
                         "torch.fx docs on pytorch.org for a more detailed explanation of what "
                         "types of control flow can be traced, and check out the Proxy "
                         "docstring for help troubleshooting Proxy iteration errors")

    def __bool__(self):
        raise TraceError("symbolically traced variables cannot be used as inputs to control flow")

    def __len__(self):
        raise RuntimeError("'len' is not supported in symbolic tracing by default. If you want "
                           "this call to be recorded, please call torch.fx.wrap('len') at "
                           "module scope")

    def keys(self):
        return self.tracer.create_proxy("call_method", "keys", (self,), {})


class Attribute(Proxy):
    """``proxy.attr``: a ``getattr`` node when used as a value, a ``call_method`` when called."""

    def __init__(self, root, attr):
        self.root, self.attr, self.tracer, self._node = root, attr, root.tracer, None

    @property
    def node(self):
        if self._node is None:
            self._node = self.tracer.create_proxy("call_function", getattr,
                                                  (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", self.attr, (self.root,) + args, kwargs)


def _magic(fn, reflected=False):
    def impl(self, *rest):
        args = (rest[0], self) if reflected else (self,) + rest
        return self.tracer.create_proxy("call_function", fn, args, {})
    return impl


for _name in ("add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "lshift", "rshift",
              "and_", "or_", "xor", "matmul", "getitem", "eq", "ne", "lt", "gt", "le", "ge",
              "neg", "pos", "invert", "abs"):
    _dunder = f"__{_name.rstrip('_')}__"
    setattr(Proxy, _dunder, _magic(getattr(operator, _name)))
    if _name in ("add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "lshift", "rshift",
                 "and_", "or_", "xor", "matmul"):
        setattr(Proxy, f"__r{_name.rstrip('_')}__", _magic(getattr(operator, _name), True))

__all__ = ["Proxy", "Attribute", "TraceError", "Node"]
