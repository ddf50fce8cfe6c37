"""``replace_pattern``: find every copy of one traced function's graph in another and swap in a
replacement's."""
from typing import NamedTuple

from .._graph.ir import Node, map_arg


class Match(NamedTuple):
    """One match: the node that produced the pattern's output, and pattern -> graph nodes."""
    anchor: Node
    nodes_map: dict


def _graph_of(p):
    from ._symbolic_trace import symbolic_trace
    return p if hasattr(p, "_nodes") else getattr(p, "graph", None) or symbolic_trace(p).graph


def _match(pn, gn, m):
    """Whether pattern node ``pn`` matches graph value ``gn``, extending map ``m``."""
    if pn in m:
        return m[pn] is gn
    if pn.op == "placeholder":
        m[pn] = gn
        return True
    if not isinstance(gn, Node) or gn.op != pn.op or gn.target != pn.target or \
            len(gn.args) != len(pn.args) or set(gn.kwargs) != set(pn.kwargs):
        return False
    m[pn] = gn
    pairs = list(zip(pn.args, gn.args)) + [(pn.kwargs[k], gn.kwargs[k]) for k in pn.kwargs]
    return all(_match_arg(a, b, m) for a, b in pairs)


def _match_arg(a, b, m):
    if isinstance(a, Node):
        return _match(a, b, m)
    if type(a) in (tuple, list):
        return type(b) is type(a) and len(a) == len(b) and \
            all(_match_arg(x, y, m) for x, y in zip(a, b))
    return not isinstance(b, Node) and a == b


def replace_pattern(gm, pattern, replacement):
    """Replace every non-overlapping match of ``pattern``'s graph (a function or GraphModule,
    one output) in ``gm`` by ``replacement``'s, with the pattern's inputs wired to what they
    matched; recompile ``gm`` and return the ``Match`` list.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> gm = fx.symbolic_trace(lambda x: ember.relu(x) + 1)
        >>> _ = fx.replace_pattern(gm, lambda x: ember.relu(x), lambda x: ember.sigmoid(x))
        >>> gm(ember.zeros(1))
        tensor([1.5000])
    """
    pg, rg = _graph_of(pattern), _graph_of(replacement)
    p_out = pg.output_node().args[0]
    if not isinstance(p_out, Node):
        raise ValueError("replace_pattern: the pattern must return one value")
    p_inputs = [n for n in pg._nodes if n.op == "placeholder"]
    r_inputs = [n for n in rg._nodes if n.op == "placeholder"]
    matches, taken = [], set()
    for gn in list(gm.graph._nodes):
        m = {}
        if gn in taken or not _match(p_out, gn, m):
            continue
        inner = [v for k, v in m.items() if k.op != "placeholder"]
        # the pattern's inner values must not be read outside the match
        if any(u not in inner for v in inner if v is not gn for u in v.users) or \
                any(v in taken for v in inner):
            continue
        matches.append(Match(gn, m))
        taken.update(inner)
    g = gm.graph
    for match in matches:
        env = {r: match.nodes_map[p] for r, p in zip(r_inputs, p_inputs)}
        with g.inserting_before(match.anchor):
            for rn in rg._nodes:
                if rn.op == "placeholder":
                    continue
                if rn.op == "output":
                    new = map_arg(rn.args[0], env.__getitem__)
                    break
                env[rn] = g.node_copy(rn, env.__getitem__)
        match.anchor.replace_all_uses_with(new)
        for pn in reversed(pg._nodes):
            gn = match.nodes_map.get(pn)
            if pn.op not in ("placeholder", "output") and gn is not None and not gn.users:
                g.erase_node(gn)
    gm.recompile()
    return matches
