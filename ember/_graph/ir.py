"""The graph IR: a ``Graph`` is an ordered list of ``Node``s, each one call, fx's data model.

A node's ``op`` is one of ``placeholder`` (a graph input), ``get_attr`` (a parameter, buffer or
constant of the owning module, by its dotted state_dict name), ``call_function`` (``target`` a
callable: an ``OpDef`` in graphs recorded from the dispatch, any function in fx graphs),
``call_method`` (``target`` a Tensor method name), ``call_module`` (``target`` a submodule's
dotted name) and ``output``. Arguments are nested tuples, lists and dicts of nodes and plain
values. ``node.meta["val"]`` holds the ``TensorMeta`` (shape, dtype, device) of its result (a
list of them for an op with several outputs), ``node.meta["scope"]`` the module path where it
ran. Graphs recorded from the dispatch hold only ``call_function`` nodes on OpDefs (and
``operator.getitem`` taking one output of a multi-output op): that level is what the passes,
the interpreter, ``jit.save`` and the ONNX lowering read.
"""
import builtins
import contextlib
import keyword
import math
import operator
import re

OPS = ("placeholder", "get_attr", "call_function", "call_method", "call_module", "output")


class TensorMeta:
    """Shape, dtype and device of a value, as the meta rules give them."""
    __slots__ = ("shape", "dtype", "device")

    def __init__(self, shape, dtype, device):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device

    @classmethod
    def of(cls, t):
        return cls(t.shape, t.dtype, t.device)

    def __eq__(self, o):
        return isinstance(o, TensorMeta) and (self.shape, self.dtype, str(self.device)) == (
            o.shape, o.dtype, str(o.device))

    def __repr__(self):
        return f"{str(self.dtype).replace('torch.', '')}{list(self.shape)}"


side_effectful_functions = set()       # (fx.has_side_effect adds to it)


def has_side_effect(fn):
    """Register ``fn`` so dead-code elimination keeps its calls even when no one reads them
    (torch.fx.has_side_effect); returns ``fn``.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> @fx.has_side_effect
        ... def log(x):
        ...     pass
        >>> g = fx.Graph()
        >>> x = g.placeholder("x")
        >>> _ = g.call_function(log, (x,))
        >>> _ = g.output(x)
        >>> g.eliminate_dead_code()
        False
    """
    side_effectful_functions.add(fn)
    return fn


def map_arg(a, fn):
    """``a`` with every Node in it (nested tuples, lists, dicts, slices) replaced by ``fn(node)``."""
    t = type(a)
    if t is Node:
        return fn(a)
    if t is tuple or t is list:
        return t(map_arg(x, fn) for x in a)
    if t is dict:
        return {k: map_arg(v, fn) for k, v in a.items()}
    if t is slice:
        return slice(map_arg(a.start, fn), map_arg(a.stop, fn), map_arg(a.step, fn))
    if hasattr(a, "_fields") and isinstance(a, tuple):     # a named tuple
        return t(*(map_arg(x, fn) for x in a))
    return a


def nodes_in(a):
    """The nodes in argument structure ``a``, in order, each once."""
    seen = {}
    map_arg(a, lambda n: seen.setdefault(n))
    return list(seen)


class Node:
    """One call in a ``Graph`` (fx's ``torch.fx.Node``).

    Example:
        >>> import operator
        >>> from ember.fx import Graph
        >>> g = Graph()
        >>> x = g.placeholder("x")
        >>> y = g.call_function(operator.add, (x, 1))
        >>> y.args, list(x.users)
        ((x, 1), [add])
    """

    def __init__(self, graph, name, op, target, args, kwargs, type_expr=None):
        if op not in OPS:
            raise ValueError(f"Node: op must be one of {OPS}, got {op!r}")
        self.graph, self.name, self.op, self.target, self.type = graph, name, op, target, type_expr
        self.users, self.meta, self._args, self._kwargs = {}, {}, (), {}
        self._input_nodes = []
        self._update(tuple(args), dict(kwargs))

    def _update(self, args, kwargs):
        for n in self._input_nodes:
            n.users.pop(self, None)
        self._args, self._kwargs = args, kwargs
        self._input_nodes = nodes_in((args, kwargs))
        for n in self._input_nodes:
            n.users.setdefault(self)

    args = property(lambda self: self._args,
                    lambda self, a: self._update(tuple(a), self._kwargs),
                    doc="The positional arguments (nodes and plain values).")
    kwargs = property(lambda self: self._kwargs,
                      lambda self, k: self._update(self._args, dict(k)),
                      doc="The keyword arguments.")
    all_input_nodes = property(lambda self: list(self._input_nodes),
                               doc="The nodes this one reads, each once.")

    @property
    def next(self):
        ns = self.graph._nodes
        i = ns.index(self)
        return ns[i + 1] if i + 1 < len(ns) else self.graph._root

    @property
    def prev(self):
        i = self.graph._nodes.index(self)
        return self.graph._nodes[i - 1] if i else self.graph._root

    @property
    def stack_trace(self):
        return self.meta.get("stack_trace")

    def update_arg(self, idx, arg):
        """Set positional argument ``idx``."""
        a = list(self._args)
        a[idx] = arg
        self.args = a

    def update_kwarg(self, key, arg):
        self.kwargs = {**self._kwargs, key: arg}

    def replace_input_with(self, old, new):
        """Read ``new`` wherever this node read ``old``."""
        self._update(*map_arg((self._args, self._kwargs), lambda n: new if n is old else n))

    def replace_all_uses_with(self, replace_with, delete_user_cb=lambda user: True):
        """Make every user of this node read ``replace_with`` instead; return those users."""
        users = [u for u in self.users if delete_user_cb(u)]
        for u in users:
            u.replace_input_with(self, replace_with)
        return users

    def prepend(self, x):
        """Move node ``x`` just before this one."""
        self.graph._move(x, self.graph._nodes.index(self) if x is not self else None)

    def append(self, x):
        """Move node ``x`` just after this one."""
        self.graph._move(x, self.graph._nodes.index(self) + 1, after=self)

    def is_impure(self):
        """Whether dead-code elimination must keep this node even without users."""
        if self.op in ("placeholder", "output"):
            return True
        t = self.target
        if self.op == "call_function" and t in side_effectful_functions:
            return True
        return self.op == "call_function" and getattr(t, "name", "x")[-1:] == "_" or \
            self.op == "call_method" and isinstance(t, str) and t.endswith("_")

    def format_node(self):
        """One line: ``%name : [num_users=n] = op[target=...](args = ..., kwargs = ...)``."""
        if self.op == "placeholder":
            return f"%{self.name} : [num_users={len(self.users)}] = placeholder[target={self.target}]"
        if self.op == "output":
            return f"return {_fmt(self.args[0])}"
        head = f"%{self.name} : [num_users={len(self.users)}] = {self.op}[target="
        if self.op == "get_attr":
            return f"{head}{self.target}]"
        return (f"{head}{_target_name(self.target)}](args = {_farg(self.args)}, kwargs = "
                f"{_farg(self.kwargs)})")

    def __repr__(self):
        return self.name


def _farg(a):
    """An argument as torch.fx prints it in a graph: ``%node``, strings unquoted."""
    t = type(a)
    if t is Node:
        return "%" + a.name
    if t is tuple:
        return "(" + ", ".join(map(_farg, a)) + ("," if len(a) == 1 else "") + ")"
    if t is list:
        return "[" + ", ".join(map(_farg, a)) + "]"
    if t is dict:
        return "{" + ", ".join(f"{k}: {_farg(v)}" for k, v in a.items()) + "}"
    return str(a)


def _target_name(t):
    if isinstance(t, str):
        return t
    name = getattr(t, "name", None)
    if isinstance(name, str) and type(t).__name__ == "OpDef":
        return f"aten.{name}"
    pub = _public_path(t)
    if pub is not None:
        return pub
    owner = getattr(t, "__self__", None)
    if isinstance(owner, type):         # (a classmethod: an autograd.Function's apply)
        return f"{owner.__module__}.{owner.__qualname__}.{t.__name__}"
    mod = getattr(t, "__module__", None)
    q = getattr(t, "__qualname__", getattr(t, "__name__", repr(t)))
    if mod in ("_operator", "operator"):
        return f"operator.{q}"
    if mod is None:
        return q
    return f"{mod.replace('ember', 'torch', 1) if mod.startswith('ember') else mod}.{q}"


def _public_path(fn):
    """``torch.x.y`` for an ember function reachable as ``ember.x.y`` (its shortest public
    home: ``torch.relu``, not ``torch._ops.relu``), else None."""
    import importlib
    mod, name = getattr(fn, "__module__", None) or "", getattr(fn, "__name__", None)
    if not mod.startswith("ember") or name is None or "<" in getattr(fn, "__qualname__", "<"):
        return None
    parts = mod.split(".")
    for k in range(1, len(parts) + 1):
        if any(p.startswith("_") for p in parts[:k]):
            break
        if getattr(importlib.import_module(".".join(parts[:k])), name, None) is fn:
            return ".".join(["torch"] + parts[1:k] + [name])
    return None


def _fmt(a, prefix=""):
    """``a`` as source text: nodes by name, dtypes as ``torch.float32``, containers recursively."""
    t = type(a)
    if t is Node:
        return prefix + a.name
    if t is tuple:
        return "(" + ", ".join(_fmt(x, prefix) for x in a) + ("," if len(a) == 1 else "") + ")"
    if t is list:
        return "[" + ", ".join(_fmt(x, prefix) for x in a) + "]"
    if t is dict:
        return "{" + ", ".join(f"{k!r}: {_fmt(v, prefix)}" for k, v in a.items()) + "}"
    if t is slice:
        return f"slice({_fmt(a.start, prefix)}, {_fmt(a.stop, prefix)}, {_fmt(a.step, prefix)})"
    if t is float and not math.isfinite(a):
        return f"float('{a}')"
    return repr(a)


class _Root:
    """The sentinel before the first node and after the last (fx's root node)."""
    op, name = "root", "root"


class Graph:
    """An ordered list of nodes (fx's ``torch.fx.Graph``); ``print(graph)`` shows one per line.

    Example:
        >>> import operator
        >>> from ember.fx import Graph
        >>> g = Graph()
        >>> x = g.placeholder("x")
        >>> _ = g.output(g.call_function(operator.mul, (x, 2)))
        >>> print(g.python_code("self").src.strip())
        def forward(self, x):
            mul = x * 2;  x = None
            return mul
    """

    def __init__(self, owning_module=None, tracer_cls=None, tracer_extras=None):
        self._nodes, self._names, self._insert = [], set(), None
        self._taken = {}        # base -> k: base, base_1... base_k are all names (see _unique)
        self._root, self.owning_module = _Root(), owning_module
        self._codegen_globals, self._codegen = {}, None

    def set_codegen(self, codegen):
        """Generate this graph's code with ``codegen`` (an ``fx.CodeGen``)."""
        self._codegen = codegen

    @property
    def nodes(self):
        return _NodeList(self._nodes)

    def find_nodes(self, *, op, target=None, sort=True):
        return [n for n in self._nodes if n.op == op and (target is None or n.target == target)]

    def _unique(self, candidate):
        base = re.sub(r"[^0-9a-zA-Z_]+", "_", candidate).strip("_") or "_"
        base = "_" + base if base[0].isdigit() else base
        base = base + "_1" if keyword.iskeyword(base) or hasattr(builtins, base) else base
        name, i = base, 0
        m = re.match(r"(.*)_(\d+)$", base)
        if m:
            base, i = m.group(1), int(m.group(2))
        if name in self._names:     # (from the run of taken names: a scan from 1 is quadratic)
            k = self._taken.get(base, 0)
            i, run = max(i, k), i <= k
            while name in self._names:
                i += 1
                name = f"{base}_{i}"
            if run:
                self._taken[base] = i
        self._names.add(name)
        return name

    def create_node(self, op, target, args=None, kwargs=None, name=None, type_expr=None):
        """A new node, inserted at the insertion point (default: the end)."""
        if name is None:
            name = target if isinstance(target, str) else getattr(target, "__name__", None) or \
                getattr(target, "name", "node")
        n = Node(self, self._unique(str(name)), op, target, args or (), kwargs or {}, type_expr)
        if self._insert is None:
            self._nodes.append(n)
        else:
            where, after = self._insert
            i = self._nodes.index(where) + (1 if after else 0)
            self._nodes.insert(i, n)
            if after:
                self._insert = (n, True)      # successive inserts keep their order
        return n

    def placeholder(self, name, type_expr=None, default_value=None):
        n = self.create_node("placeholder", name, name=name, type_expr=type_expr)
        if default_value is not None:
            n.args = (default_value,)
        return n

    def get_attr(self, qualified_name, type_expr=None):
        return self.create_node("get_attr", qualified_name, type_expr=type_expr,
                                name=qualified_name.replace(".", "_"))

    def call_function(self, the_function, args=None, kwargs=None, type_expr=None):
        return self.create_node("call_function", the_function, args, kwargs, type_expr=type_expr)

    def call_method(self, method_name, args=None, kwargs=None, type_expr=None):
        return self.create_node("call_method", method_name, args, kwargs, type_expr=type_expr)

    def call_module(self, module_name, args=None, kwargs=None, type_expr=None):
        return self.create_node("call_module", module_name, args, kwargs, type_expr=type_expr,
                                name=module_name.replace(".", "_"))

    def output(self, result, type_expr=None):
        return self.create_node("output", "output", (result,), type_expr=type_expr)

    def output_node(self):
        for n in reversed(self._nodes):
            if n.op == "output":
                return n
        raise RuntimeError("the graph has no output node")

    def erase_node(self, to_erase):
        """Remove a node that no other node reads."""
        if to_erase.users:
            raise RuntimeError(f"Tried to erase Node {to_erase} but it still had "
                               f"{len(to_erase.users)} users in the graph: {to_erase.users}!")
        to_erase._update((), {})
        self._nodes.remove(to_erase)
        self._names.discard(to_erase.name)
        self._taken.pop(re.sub(r"_\d+$", "", to_erase.name), None)

    def _move(self, x, i, after=None):
        if i is None:
            return
        j = self._nodes.index(x)
        self._nodes.pop(j)
        if after is not None:
            i = self._nodes.index(after) + 1
        elif j < i:
            i -= 1
        self._nodes.insert(i, x)

    @contextlib.contextmanager
    def inserting_before(self, n=None):
        """New nodes go before ``n`` (default: at the start) inside the ``with`` block."""
        prev, self._insert = self._insert, ((n, False) if n is not None else
                                            (self._nodes[0], False) if self._nodes else None)
        try:
            yield
        finally:
            self._insert = prev

    @contextlib.contextmanager
    def inserting_after(self, n=None):
        """New nodes go after ``n`` (default: at the end), in the order they are made."""
        prev, self._insert = self._insert, ((n, True) if n is not None else None)
        try:
            yield
        finally:
            self._insert = prev

    def node_copy(self, node, arg_transform=lambda x: x):
        """A copy of ``node`` (of another graph) here, its node arguments mapped by
        ``arg_transform``."""
        args, kwargs = map_arg((node.args, node.kwargs), arg_transform)
        n = self.create_node(node.op, node.target, args, kwargs, node.name, node.type)
        n.meta = dict(node.meta)
        return n

    def graph_copy(self, g, val_map, return_output_node=False):
        """Copy every node of ``g`` but its output here; return the output's value."""
        for n in g._nodes:
            if n.op == "output":
                out = map_arg(n.args[0], val_map.__getitem__)
                return (out, n) if return_output_node else out
            val_map[n] = self.node_copy(n, val_map.__getitem__)
        return None

    def __deepcopy__(self, memo=None):
        g = Graph(self.owning_module)
        g._codegen = self._codegen
        out = g.graph_copy(self, {})
        g.output(out)
        return g

    def eliminate_dead_code(self, is_impure_node=None):
        """Remove nodes whose values no one reads; True if any was removed."""
        from .passes import dead_code
        return dead_code(self, is_impure_node)

    def lint(self):
        """Check the graph is well formed: arguments defined before use, one output, names
        unique."""
        seen, names = set(), set()
        for n in self._nodes:
            if n.graph is not self:
                raise RuntimeError(f"Node {n} does not belong to this Graph")
            for a in n.all_input_nodes:
                if a not in seen:
                    raise RuntimeError(f"Argument '{a}' of Node '{n}' was used before it has "
                                       "been defined! Please check that Nodes in the graph are "
                                       "topologically ordered")
            if n.name in names:
                raise RuntimeError(f"Node redefined name {n.name}!")
            seen.add(n)
            names.add(n.name)

    def python_code(self, root_module="self", *, verbose=False):
        """The graph as the source of ``def forward(self, ...)`` (``.src``) and the globals it
        needs (``.globals``)."""
        from .codegen import python_code
        return python_code(self, root_module)

    def __str__(self):
        lines = ["graph():"] + ["    " + n.format_node() for n in self._nodes]
        return "\n".join(lines)

    def print_tabular(self):
        """One row per node: opcode, name, target, args, kwargs."""
        rows = [("opcode", "name", "target", "args", "kwargs")] + [
            (n.op, n.name, _target_name(n.target), _fmt(n.args), _fmt(n.kwargs))
            for n in self._nodes]
        w = [max(len(r[i]) for r in rows) for i in range(5)]
        print("\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows))


class _NodeList:
    """``graph.nodes``: iterable (forwards, ``reversed``), sized, a snapshot safe to edit under."""

    def __init__(self, nodes):
        self._nodes = nodes

    def __iter__(self):
        return iter(list(self._nodes))

    def __reversed__(self):
        return iter(self._nodes[::-1])

    def __len__(self):
        return len(self._nodes)


GETITEM = operator.getitem
