"""An op-level graph as plain data (JSON: op names and arguments, no code), and back."""
import json
import math
import operator

from .. import _dtype, _memory_format
from .._device import device as _device
from .._size import Size
from .ir import Graph, Node, TensorMeta, _target_name

FORMAT = "ember.graph/1"
_FNS = {f"operator.{k}": getattr(operator, k) for k in (
    "getitem", "add", "sub", "mul", "truediv", "floordiv", "neg", "pow", "matmul", "eq")}


def _enc(a, where):
    t = type(a)
    if t is Node:
        return {"$node": a.name}
    if a is None or t in (bool, int, str):
        return a
    if t is float:
        return a if math.isfinite(a) else {"$float": repr(a)}
    if t is tuple or t is list:
        items = [_enc(x, where) for x in a]
        return items if t is list else {"$tuple": items}
    if t is dict:
        return {"$dict": [[k, _enc(v, where)] for k, v in a.items()]}
    if t is Size:               # (a vjp's reshape to a saved tensor's shape)
        return {"$size": list(a)}
    if t is slice:
        return {"$slice": [_enc(a.start, where), _enc(a.stop, where), _enc(a.step, where)]}
    if a is Ellipsis:
        return {"$ellipsis": 1}
    if t is complex:
        return {"$complex": [a.real, a.imag]}
    if t is _dtype.dtype:
        return {"$dtype": a.name}
    if t is _device:
        return {"$device": str(a)}
    if t is _memory_format.memory_format:
        return {"$memory_format": a.name}
    raise TypeError(f"cannot save a graph: node '{where}' has an argument of type "
                    f"{t.__name__} ({a!r:.60}), which the archive format does not hold")


def _dec(a, env):
    if type(a) is list:
        return [_dec(x, env) for x in a]
    if type(a) is not dict:
        return a
    (k, v), = a.items()
    if k == "$node":
        return env[v]
    if k == "$tuple":
        return tuple(_dec(x, env) for x in v)
    if k == "$dict":
        return {kk: _dec(vv, env) for kk, vv in v}
    if k == "$slice":
        return slice(*(_dec(x, env) for x in v))
    return {"$float": float, "$ellipsis": lambda _: Ellipsis, "$complex": lambda v: complex(*v),
            "$dtype": _dtype._by_name, "$device": _device, "$size": Size,
            "$memory_format": _memory_format._by_name}[k](v)


def _target(n):
    t = n.target
    if n.op != "call_function":
        return t
    if type(t).__name__ == "OpDef":
        return {"op": t.name}
    name = _target_name(t)
    if name in _FNS:
        return {"fn": name}
    raise TypeError(f"cannot save a graph: node '{n.name}' calls {name}, which is not an op "
                    "(only graphs recorded from the dispatch, as jit.trace makes, can be saved)")


def _meta(v):
    if isinstance(v, list):
        return [_meta(x) for x in v]
    return {"shape": list(v.shape), "dtype": v.dtype.name, "device": str(v.device)} \
        if isinstance(v, TensorMeta) else None


def dumps(graph):
    """``graph`` as a JSON string (each node: name, op, target, args, kwargs, result meta)."""
    nodes = [{"name": n.name, "op": n.op, "target": _target(n), "args": _enc(n.args, n.name),
              "kwargs": _enc(n.kwargs, n.name), "meta": _meta(n.meta.get("val")),
              "scope": n.meta.get("scope", ""), "no_grad": bool(n.meta.get("no_grad"))}
             for n in graph._nodes]
    return json.dumps({"format": FORMAT, "nodes": nodes})


def _unmeta(m):
    if m is None:
        return None
    if isinstance(m, list):
        return [_unmeta(x) for x in m]
    return TensorMeta(m["shape"], _dtype._by_name(m["dtype"]), _device(m["device"]))


def loads(s):
    """The graph ``dumps`` wrote; ops are looked up in the registry by name."""
    from .._ops.registry import get
    d = json.loads(s)
    if d.get("format") != FORMAT:
        raise RuntimeError(f"not an ember graph archive (format {d.get('format')!r}, expected "
                           f"{FORMAT!r})")
    g, env = Graph(), {}
    for r in d["nodes"]:
        t = r["target"]
        if isinstance(t, dict):
            try:
                t = get(t["op"]) if "op" in t else _FNS[t["fn"]]
            except KeyError:
                raise RuntimeError(f"the archive calls {t}, which this ember has no op "
                                   "for") from None
        n = g.create_node(r["op"], t, _dec(r["args"], env), _dec(r["kwargs"], env), r["name"])
        n.meta["val"], n.meta["scope"] = _unmeta(r["meta"]), r["scope"]
        if r.get("no_grad"):
            n.meta["no_grad"] = True
        env[r["name"]] = n
    return g
