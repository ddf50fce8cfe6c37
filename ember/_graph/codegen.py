"""A graph as readable Python: ``def forward(self, x): ...``, one statement per node."""
import operator
import types

from .ir import _fmt, _public_path, _target_name

_BINARY = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
           operator.floordiv: "//", operator.mod: "%", operator.pow: "**",
           operator.matmul: "@", operator.and_: "&", operator.or_: "|", operator.xor: "^",
           operator.lshift: "<<", operator.rshift: ">>", operator.eq: "==", operator.ne: "!=",
           operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">="}
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~"}


class Aten:
    """``aten.<op>``: the OpDef of that name (the namespace generated code calls ops through)."""

    def __getattr__(self, name):
        from .._ops.registry import get
        try:
            return get(name)
        except KeyError:
            raise AttributeError(f"aten has no op '{name}'") from None


aten = Aten()


class PythonCode:
    """Generated source (``src``) and the globals it runs with (``globals``)."""

    def __init__(self, src, globals_):
        self.src, self.globals = src, globals_


class CodeGen:
    """How a graph becomes a Python function (torch.fx.CodeGen): subclass and override
    ``gen_fn_def`` (the ``def`` line), ``generate_output`` (the ``return`` line),
    ``additional_globals`` and, for inputs or outputs the generated code reshapes,
    ``process_inputs``/``process_outputs``; install with ``graph.set_codegen``.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> class AsList(fx.CodeGen):
        ...     def generate_output(self, output_args):
        ...         return f"return [{output_args!r}]"
        >>> gm = fx.symbolic_trace(lambda x: x + 1)
        >>> gm.graph.set_codegen(AsList())
        >>> _ = gm.recompile()
        >>> gm(ember.ones(1))
        [tensor([2.])]
    """

    def __init__(self):
        self._body_transformer, self._func_name = None, "forward"

    def gen_fn_def(self, free_vars, maybe_return_annotation, *, expanded_def=False):
        if not free_vars or free_vars[0] != "self":
            free_vars.insert(0, "self")
        return f"def {self._func_name}({', '.join(free_vars)}){maybe_return_annotation}:"

    def generate_output(self, output_args, *, descs=None, repr_fn=None):
        return f"return {(repr_fn or _fmt)(output_args)}"

    def process_inputs(self, *args):
        return args

    def process_outputs(self, outputs):
        return outputs

    def additional_globals(self):
        return []


def _attr_path(root, path):
    out = root
    for part in path.split("."):
        out = f"{out}.{part}" if part.isidentifier() else f'getattr({out}, "{part}")'
    return out


def python_code(graph, root="self"):
    """``PythonCode`` of ``graph``: its forward's source; a value no later node reads is set to
    None where it was last read (as fx does), so memory is freed early."""
    import ember
    glb, names = {"torch": ember, "aten": aten, "inf": float("inf"), "nan": float("nan"),
                  "device": ember.device}, {}

    def fn_name(fn):
        if fn not in names:
            if type(fn).__name__ == "OpDef":
                names[fn] = _target_name(fn)
            else:
                p = _public_path(fn) if isinstance(fn, types.FunctionType) or \
                    type(fn).__name__ == "builtin_function_or_method" else None
                if p is None and getattr(fn, "__module__", None) == "builtins":
                    p = fn.__name__
                if p is None:
                    p = f"_fn_{len(glb)}_{getattr(fn, '__name__', 'f')}"
                    glb[p] = fn
                names[fn] = p
        return names[fn]

    cg = getattr(graph, "_codegen", None) or CodeGen()
    glb.update(cg.additional_globals())
    last, body, params = {}, [], []
    for n in graph._nodes:
        for a in n.all_input_nodes:
            last[a] = n
    dies = {}
    for a, n in last.items():
        dies.setdefault(n, []).append(a)
    for n in graph._nodes:
        args = [_fmt(a) for a in n.args]
        kwargs = [f"{k} = {_fmt(v)}" for k, v in n.kwargs.items()]
        call = ", ".join(args + kwargs)
        if n.op == "placeholder":
            params.append(n.target if not n.args else f"{n.target} = {_fmt(n.args[0])}")
            if n.name != n.target:      # (a name that shadows a builtin: input -> input_1)
                body.append(f"{n.name} = {n.target}")
            continue
        if n.op == "output":
            body.append(cg.generate_output(n.args[0]))
            continue
        if n.op == "get_attr":
            rhs = _attr_path(root, n.target)
        elif n.op == "call_module":
            rhs = f"{_attr_path(root, n.target)}({call})"
        elif n.op == "call_method":
            rhs = f"{args[0]}.{n.target}({', '.join(args[1:] + kwargs)})"
        elif n.target in _BINARY and len(n.args) == 2 and not n.kwargs:
            rhs = f"{args[0]} {_BINARY[n.target]} {args[1]}"
        elif n.target in _UNARY and len(n.args) == 1:
            rhs = f"{_UNARY[n.target]}{args[0]}"
        elif n.target is getattr and len(n.args) == 2 and isinstance(n.args[1], str):
            rhs = f"{args[0]}.{n.args[1]}"
        elif n.target is operator.getitem and len(n.args) == 2:
            rhs = f"{args[0]}[{args[1]}]"
        else:
            rhs = f"{fn_name(n.target)}({call})"
        dead = [a.name for a in dies.get(n, ()) if a.op != "output"]
        free = f";  {' = '.join(dead)} = None" if dead else ""
        # (a node the traced code ran under no_grad replays under it)
        body.append(("with torch.no_grad(): " if n.meta.get("no_grad") else "") +
                    f"{n.name} = {rhs}{free}")
    src = "\n\n" + cg.gen_fn_def([root] + params, "") + "\n" + \
        "".join(f"    {line}\n" for line in body or ["pass"])
    return PythonCode(src, glb)


def compile_forward(graph, root="self"):
    """The graph's forward as a Python function (its source kept for tracebacks)."""
    import linecache
    code = python_code(graph, root)
    key = f"<eval_with_key>.{id(graph)}.{len(linecache.cache)}"
    linecache.cache[key] = (len(code.src), None, code.src.splitlines(True), key)
    ns = dict(code.globals)
    exec(compile(code.src, key, "exec"), ns)
    return ns["forward"], code.src
