"""The pass manager and the passes over the IR: dead code, constant folding, common
subexpressions, and pointwise fusion groups (found, not yet code-generated)."""
from .ir import GETITEM, map_arg


def _is_op(n):
    return n.op == "call_function" and type(n.target).__name__ == "OpDef"


def _random(n):
    return _is_op(n) and ("random" in n.target.tags or n.target.name in _RANDOM)


_RANDOM = frozenset(("bernoulli", "multinomial", "dropout", "native_dropout", "rrelu"))


def dead_code(graph, is_impure_node=None):
    """Remove nodes whose values no one reads (placeholders, outputs and in-place calls stay);
    True if any was removed."""
    impure = is_impure_node or (lambda n: n.is_impure())
    changed = False
    for n in reversed(graph._nodes[:]):
        if not n.users and not impure(n):
            graph.erase_node(n)
            changed = True
    return changed


def fold_constants(graph, module):
    """Compute, once, every op whose inputs are all constants (``get_attr`` of a buffer or
    constant not a parameter, or plain values); the result becomes a constant of ``module``
    (``_folded<k>``). Parameters stay inputs, so training still updates them. True if any
    node was folded."""
    from .._tensor import Tensor
    from .interpreter import fetch_attr
    from ..autograd import grad_mode
    params = {k for k, _ in module.named_parameters()} if hasattr(module, "named_parameters") \
        else set()
    known, changed = {}, False
    for n in graph._nodes:
        if n.op == "get_attr" and n.target not in params:
            known[n] = fetch_attr(module, n.target)
        elif _is_op(n) or (n.op == "call_function" and n.target is GETITEM):
            if all(a in known for a in n.all_input_nodes) and not _random(n) and n.all_input_nodes:
                with grad_mode.no_grad():
                    known[n] = n.target(*map_arg(n.args, known.__getitem__),
                                        **map_arg(n.kwargs, known.__getitem__))
    for n in graph._nodes:
        if n.op == "call_function" and n in known and isinstance(known[n], Tensor) and \
                any(u not in known for u in n.users):
            name = _fresh(module, "_folded")
            setattr_path(module, name, known[n])
            with graph.inserting_before(n):
                c = graph.get_attr(name)
            c.meta = {k: v for k, v in n.meta.items() if k != "scope"}
            n.replace_all_uses_with(c)
            changed = True
    dead_code(graph)
    return changed


def _fresh(module, base):
    i = 0
    while hasattr(module, f"{base}{i}"):
        i += 1
    return f"{base}{i}"


def setattr_path(module, name, value):
    """Store constant ``value`` as ``module.<name>`` (a buffer on an nn.Module, so it moves with
    ``.to()`` and saves with the weights)."""
    if hasattr(module, "register_buffer"):
        module.register_buffer(name, value, persistent=False)
    else:
        setattr(module, name, value)


def _key(a):
    """A hashable key of an argument structure (nodes by identity)."""
    t = type(a)
    if t in (tuple, list):
        return (t.__name__,) + tuple(_key(x) for x in a)
    if t is dict:
        return ("dict",) + tuple((k, _key(v)) for k, v in a.items())
    if t is slice:
        return ("slice", _key(a.start), _key(a.stop), _key(a.step))
    try:
        hash(a)
    except TypeError:
        return ("id", id(a))
    return (t.__name__, a)


def cse(graph):
    """Merge nodes that call the same target on the same arguments (not random or in-place
    ones); True if any was merged."""
    seen, changed = {}, False
    for n in graph._nodes:
        if n.op not in ("call_function", "call_method", "get_attr") or n.is_impure() or \
                _random(n):
            continue
        k = (n.op, n.target if n.op != "call_function" else id(n.target), _key(n.args),
             _key(n.kwargs))
        if k in seen:
            n.replace_all_uses_with(seen[k])
            graph.erase_node(n)
            changed = True
        else:
            seen[k] = n
    return changed


def fusion_groups(graph):
    """Chains of pointwise ops (OpDefs tagged ``pointwise``) where each value but the last is
    read only inside the chain: the groups a code generator would fuse into one loop. A list
    of node lists, in graph order (fx-level graphs give none)."""
    group_of, groups = {}, []
    for n in graph._nodes:
        if not (_is_op(n) and "pointwise" in n.target.tags):
            continue
        prods = [a for a in n.all_input_nodes if a in group_of and len(a.users) == 1]
        if prods:
            g = group_of[prods[0]]
        else:
            g = []
            groups.append(g)
        g.append(n)
        group_of[n] = g
    return [g for g in groups if len(g) > 1]


class PassManager:
    """Runs passes (``fn(graph) -> changed``) in order, repeating the list until none changes
    the graph (at most ``steps`` rounds), then lints it.

    Example:
        >>> from ember._graph.passes import PassManager, cse, dead_code
        >>> PassManager([cse, dead_code]).passes == [cse, dead_code]
        True
    """

    def __init__(self, passes=None, steps=4):
        self.passes, self.steps = list(passes or [cse, dead_code]), steps

    def add_pass(self, p):
        self.passes.append(p)

    def __call__(self, graph):
        for _ in range(self.steps):
            if not any([p(graph) for p in self.passes]):
                break
        graph.lint()
        return graph
