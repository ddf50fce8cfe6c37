"""``torch._dynamo``: ``explain``, ``reset``, ``config`` and the decorators users call.

``explain(fn)(*args)`` records ``fn`` into the graph IR from the dispatch and reports where it
would break into several graphs: each Python value read from a traced tensor (``.item()``,
``bool(t)``, ``t.tolist()``...) is a break, at the line of user code that read it.
"""
import types
import warnings

from ..compiler import allow_in_graph, assume_constant_result, disable, is_compiling, \
    list_backends, reset  # noqa: F401
from . import exc  # noqa: F401

config = types.SimpleNamespace(suppress_errors=False, verbose=False, cache_size_limit=8,
                               recompile_limit=8, accumulated_cache_size_limit=256,
                               capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False,
                               automatic_dynamic_shapes=True, assume_static_by_default=True)


class BreakReason:
    """One graph break: why, and where in the user's code."""

    def __init__(self, reason, user_stack):
        self.reason, self.user_stack = reason, user_stack

    def __repr__(self):
        return f"BreakReason(reason={self.reason!r}, user_stack={self.user_stack!r})"


class ExplainOutput:
    """What ``explain`` found: ``graphs`` (op-level Graphs, one per piece between breaks),
    ``graph_count``, ``graph_break_count``, ``break_reasons``, ``op_count``,
    ``ops_per_graph``."""

    def __init__(self, graphs, break_reasons):
        self.graphs, self.break_reasons = graphs, break_reasons
        self.graph_count, self.graph_break_count = len(graphs), len(break_reasons)
        self.ops_per_graph = [[n.target for n in g.nodes if n.op == "call_function"]
                              for g in graphs]
        self.op_count = sum(len(o) for o in self.ops_per_graph)
        self.out_guards, self.compile_times = None, None

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: "
                 f"{self.graph_break_count}", f"Op Count: {self.op_count}", "Break Reasons:"]
        for i, r in enumerate(self.break_reasons, 1):
            lines += [f"  Break Reason {i}:", f"    Reason: {r.reason}", "    User Stack:"] + \
                [f"      {s}" for s in r.user_stack]
        lines += ["Ops per Graph:"] + [f"  Ops {i}:\n" + "".join(
            f"    {getattr(t, 'name', t)}\n" for t in ops).rstrip("\n")
            for i, ops in enumerate(self.ops_per_graph, 1)]
        return "\n".join(lines)


def _pieces(graph, cuts):
    """``graph``'s op nodes split before each index in ``cuts`` (node counts at the breaks),
    each piece a Graph whose inputs are the values it reads from earlier pieces."""
    from .._graph.ir import Graph
    ops = [n for n in graph._nodes if n.op == "call_function"]
    bounds = [0] + sorted(set(c for c in cuts if 0 < c < len(ops))) + [len(ops)]
    out = []
    for a, b in zip(bounds, bounds[1:] + [None]):
        if b is None:
            break
        g, env = Graph(), {}

        def ref(n):
            if n not in env:
                env[n] = g.placeholder(n.name) if n.op != "get_attr" else g.get_attr(n.target)
            return env[n]
        for n in ops[a:b]:
            env[n] = g.node_copy(n, ref)
        g.output(tuple(env[n] for n in ops[a:b] if any(u not in ops[a:b] for u in n.users)))
        out.append(g)
    return out


def explain(f, *extra_args, **extra_kwargs):
    """``explain(fn)(*args)``: an ``ExplainOutput`` of ``fn`` run on ``args``.

    Example:
        >>> import ember
        >>> def f(x):
        ...     y = x.sin()
        ...     if y.sum() > 0:
        ...         return y * 2
        ...     return y
        >>> out = ember._dynamo.explain(f)(ember.ones(3))
        >>> out.graph_count, out.graph_break_count, out.op_count
        (2, 1, 4)
    """
    def inner(*args, **kwargs):
        from .._graph.record import TracerWarning, _active, record
        from .. import nn
        cuts, reasons = [], []
        orig = warnings.showwarning

        def seen(message, category, filename, lineno, file=None, line=None):
            if not issubclass(category, TracerWarning):
                return orig(message, category, filename, lineno, file, line)
            rec = _active[0] if _active else None
            cuts.append(sum(1 for n in rec.graph._nodes if n.op == "call_function"))
            what = str(message).split(" might cause")[0].replace("Converting", "converting")
            reasons.append(BreakReason(f"data-dependent: {what}",
                                       [f"File {filename}, line {lineno}"]))
        with warnings.catch_warnings():
            warnings.simplefilter("always", TracerWarning)
            warnings.showwarning = seen
            try:
                module = f if isinstance(f, nn.Module) else None
                rec, _ = record(f, args, kwargs, module=module)
            finally:
                warnings.showwarning = orig
        return ExplainOutput(_pieces(rec.graph, cuts), reasons)
    return inner(*extra_args, **extra_kwargs) if extra_args or extra_kwargs else inner


def mark_dynamic(t, index, min=None, max=None):
    """Compile dim ``index`` (an int or a list) of ``t`` dynamic from its first call, the size
    in ``[min, max]`` (default ``[2, inf]``): a size outside it, or a graph that cannot follow
    the dim, raises ``ConstraintViolationError`` at compile.

    Example:
        >>> import ember
        >>> x = ember.ones(4, 3)
        >>> ember._dynamo.mark_dynamic(x, 0, min=2, max=64)
        >>> ember.compile(lambda x: x * 2)(x).shape
        torch.Size([4, 3])
    """
    for i in [index] if isinstance(index, int) else index:
        t._dynamo_dynamic_range = {**getattr(t, "_dynamo_dynamic_range", {}), i: (
            2 if min is None else min, float("inf") if max is None else max)}


def mark_static(t, index=None):
    """Compile dim ``index`` (an int, a list, or None: every dim) of ``t`` static, even under
    ``dynamic=True`` or after its size changed."""
    idx = range(t.dim()) if index is None else [index] if isinstance(index, int) else index
    t._dynamo_static_indices = getattr(t, "_dynamo_static_indices", set()) | set(idx)


def optimize(backend="inductor", *, nopython=False, **kwargs):
    """``torch._dynamo.optimize(backend)``: ``compile`` as a decorator."""
    from ..compiler import compile
    return lambda fn: compile(fn, backend=backend, fullgraph=nopython)
