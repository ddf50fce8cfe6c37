"""Dynamic sizes by differencing traces (onnx.export's dynamic_axes, export's
dynamic_shapes): the model is traced again with each dynamic input dim
one larger; every integer argument that changed (a reshape's batch size, B * heads) is
fitted as a function of those dims (affine in one, or a product of several, checked against a
trace with all of them changed) and becomes a ``SymInt``, which the lowering computes at run
time from the inputs' shapes. Fills and aranges made in Python whose shape changed are kept
as patterns (``rec.symbolic``) for the consumer to rebuild; any other tensor made in Python
cannot follow: an error (of the class the caller gives) names it. ``ember.compile`` fits the
nodes' shapes too (``fit_shapes``) and turns the SymInts into ``Sz`` polynomials, which its C
and Python code generation print as expressions of the sizes it is handed at run time.
"""
import math
import operator

import numpy as np

from .ir import Node, TensorMeta

class SymInt(int):
    """An int of the trace that depends on dynamic input dims: ``const + sum(coef * dim)``
    (``prod`` False) or ``const * prod(dims)`` (``prod`` True); ``dims`` maps
    ``(input index, axis)`` to a coefficient (1 in a product)."""

    def __new__(cls, value, const, dims, prod):
        o = int.__new__(cls, value)
        o.const, o.dims, o.prod = const, dims, prod
        return o


class Sz:
    """A size that is a polynomial in the dynamic sizes ``_s0``, ``_s1``... (as compile's
    generated C and Python name them): ``terms`` maps a sorted tuple of size numbers to its
    coefficient. Equal polynomials compare equal; a constant product is an int. Sizes are
    multiplied (strides, row counts), never added: a sum raises TypeError, and the lowering
    that asked for one leaves its op to the OpDef."""
    __slots__ = ("terms",)

    def __init__(self, terms):
        self.terms = {m: c for m, c in terms.items() if c}

    def __mul__(self, o):
        t = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in (o.terms if isinstance(o, Sz) else {(): o}).items():
                m = tuple(sorted(m1 + m2))
                t[m] = t.get(m, 0) + c1 * c2
        t = Sz(t)
        return t.terms.get((), 0) if set(t.terms) <= {()} else t
    __rmul__ = __mul__

    def __eq__(self, o):
        return isinstance(o, Sz) and self.terms == o.terms

    def __hash__(self):
        return hash(tuple(sorted(self.terms.items())))

    def __repr__(self):         # (C and Python alike)
        return "(" + " + ".join("*".join([str(c)] * (c != 1 or not m) + [f"_s{v}" for v in m])
                                for m, c in sorted(self.terms.items())) + ")"

    def value(self, sizes):
        return sum(c * math.prod(sizes[v] for v in m) for m, c in self.terms.items())

    @classmethod
    def of(cls, s, var):
        """The polynomial of SymInt ``s``; ``var`` maps an (input, axis) to its size number."""
        if s.prod:
            return cls({tuple(sorted(var[k] for k in s.dims)): s.const})
        return cls({(): s.const, **{(var[k],): a for k, a in s.dims.items()}})


def grown(t, axes):
    """``t`` one longer along each of ``axes`` (its first slice repeated, so index values stay
    valid), a leaf needing gradients where ``t`` does."""
    import ember
    with ember.no_grad():
        for ax in axes:
            t2 = ember.cat([t, t.narrow(ax, 0, 1)], ax)
            t = t2.requires_grad_() if t.requires_grad else t2
    return t


def retrace(fn, args, kwargs, module, names, keys, error=RuntimeError, tied=None, trace=None):
    """``(base, others)``: the example size of each dynamic ``(input, axis)`` in ``keys``, and
    the recorders of ``fn`` traced again with each one larger (all at once too, for two or
    more), as ``[(changes, recorder)]``. ``tied`` maps a key to all the (input, axis) pairs that
    grow with it (one batch size shared by several inputs). ``trace(args, kwargs)``, where given,
    records instead of ``record`` (compile's joint forward and backward)."""
    from .passes import dead_code
    from .record import _map_out, flatten_tensors, record
    flat = flatten_tensors((args, kwargs or {}))
    base = {k: flat[k[0]].shape[k[1]] for k in keys}
    changes = [{k: base[k] + 1} for k in keys] + \
        ([{k: base[k] + 1 for k in keys}] if len(keys) > 1 else [])
    others = []
    for ch in changes:
        grow = [k2 for k in ch for k2 in (tied or {}).get(k, [k])]
        it = iter([grown(t, [ax for j, ax in grow if j == i]) for i, t in enumerate(flat)])
        a2, k2 = _map_out((args, kwargs or {}), lambda t: next(it))
        try:
            r2 = trace(a2, k2) if trace else record(fn, a2, k2, module=module, names=names)[0]
        except Exception as e:
            raise error("dynamic axes: the model failed when traced again with "
                        f"{', '.join(f'dim {ax} of {names[i]!r}' for i, ax in ch)} one larger "
                        f"(which is how the exporter finds what follows them): {e}") from e
        if trace is None:
            dead_code(r2.graph)
        others.append((ch, r2))
    return base, others


def _fit(v1, others, base, where, error=RuntimeError):
    """The SymInt for value ``v1``, given ``others``: [(changes {key: new size}, value)]."""
    singles = [(c, v) for c, v in others if len(c) == 1]
    moved = {k: v - v1 for c, v in singles for k in c if v != v1}
    prod = len(moved) > 1 and all(v * base[k] == v1 * (base[k] + 1)
                                  for c, v in singles for k in c if k in moved)
    if prod:
        denom = 1
        for k in moved:
            denom *= base[k]
        if v1 % denom:
            prod = False
    s = SymInt(v1, v1 // denom if prod else v1 - sum(a * base[k] for k, a in moved.items()),
               {k: 1 for k in moved} if prod else moved, prod)
    for c, v in others:                # every trace, the joint one included, must agree
        if _value(s, {**base, **c}) != v:
            raise error(f"dynamic axes: {where} changes with the dynamic dims in a "
                                    "way the exporter cannot express (neither affine in one "
                                    "dim nor a product of dims); export with static shapes")
    return s


def _value(s, dims):
    if s.prod:
        out = s.const
        for k in s.dims:
            out *= dims[k]
        return out
    return s.const + sum(a * dims[k] for k, a in s.dims.items())


def symbolize(rec, others, base, names, error=RuntimeError, allow_symbolic=True, shapes=None):
    """Put SymInts into ``rec``'s graph where the traces ``others`` ([(changes, recorder)])
    differ from it; ``base`` maps each dynamic (input, axis) to its example size. ``shapes``
    (compile's), a map of each (input, axis) to a size number, puts ``Sz`` polynomials instead,
    into the nodes' ``meta["val"]`` shapes too, and compares tensors made in Python by value."""
    def sz(a):
        return _map_sym(a, lambda s: Sz.of(s, shapes)) if shapes else a
    def label(k):
        return f"dim {k[1]} of input '{names[k[0]]}'"
    symbolic = {}
    def same(t, t2):        # (compile's values too: a fill of 1 / n made by a vjp)
        return t2 is not None and tuple(t2.shape) == tuple(t.shape) and (
            t is t2 or not shapes or np.array_equal(t._data, t2._data, t.is_floating_point()))
    for k, t in rec.constants.items():
        peers = [(c, r.constants.get(k)) for c, r in others]
        if all(same(t, t2) for _, t2 in peers):
            continue
        kind = _pattern(t)
        if allow_symbolic and kind is not None and all(t2 is not None and _pattern(t2) == kind
                                                       for _, t2 in peers):
            # a fill (zeros(B, H)) or an arange(L) made in Python: rebuilt from its shape
            symbolic[k] = kind + (sz(_merge(tuple(t.shape), [(c, tuple(t2.shape)) for c, t2
                                                             in peers], base, k, error)),)
            continue
        for c, t2 in peers:
            if not same(t, t2):
                raise error(
                    f"dynamic axes: {', '.join(map(label, c))} reaches tensor {k}, made in "
                    f"Python during the trace (shape {tuple(t.shape)}, then "
                    f"{None if t2 is None else tuple(t2.shape)}: e.g. arange(x.shape[1])); "
                    "it cannot be dynamic in this export: mark that axis static")
    for c, r in others:
        if len(r.graph._nodes) != len(rec.graph._nodes):
            raise error(f"dynamic axes: the traced graph changes when "
                                    f"{', '.join(map(label, c))} changes (Python control flow "
                                    "on shapes); export with static shapes")
    new = []
    for i, n in enumerate(rec.graph._nodes):
        peers = [(c, r.graph._nodes[i]) for c, r in others]
        for c, p in peers:
            if p.op != n.op or str(p.target) != str(n.target):
                raise error(f"dynamic axes: node {n.name} differs between traces "
                                        f"({n.target} vs {p.target}); export with static shapes")
        if n.op == "call_function" or shapes:
            new.append((n, _merge(n.args, [(c, p.args) for c, p in peers], base, n.name, error),
                        _merge(n.kwargs, [(c, p.kwargs) for c, p in peers], base, n.name,
                               error), _fit_meta(n.meta.get("val"), [(c, p.meta.get("val")) for
                                                                     c, p in peers], base,
                                                 n.name, error, sz) if shapes else None))
    for n, args, kwargs, meta in new:   # (all or nothing: an error above changed no node)
        n.args, n.kwargs = sz(args), sz(kwargs)
        if shapes:
            n.meta["val"] = meta
    rec.symbolic = symbolic


def _pattern(t):
    """``("fill", v)`` for a tensor of one value, ``("arange", start, step)`` for a 1-D
    arithmetic progression, else None."""
    a = t.numpy().reshape(-1) if t.numel() else None
    if a is None:
        return None
    if (a == a[0]).all() and (t.dim() != 1 or len(a) < 2):
        return ("fill", a[0].item())
    if t.dim() == 1 and len(a) >= 2:
        step = a[1] - a[0]
        if (a == a[0] + step * np.arange(len(a))).all():
            return ("arange", a[0].item(), step.item())
    return ("fill", a[0].item()) if (a == a[0]).all() else None


def _merge(a, others, base, where, error=RuntimeError):
    t = type(a)
    if t is Node:
        return a
    if t in (tuple, list) or isinstance(a, tuple) and not hasattr(a, "_fields"):
        out = [_merge(x, [(c, o[j]) for c, o in others], base, where, error)
               for j, x in enumerate(a)]      # (a Size that changed: a tuple of SymInts)
        return list(out) if t is list else a if t is not tuple and not any(
            isinstance(x, SymInt) for x in out) else tuple(out)
    if t is dict:
        return {k: _merge(v, [(c, o[k]) for c, o in others], base, where, error)
                for k, v in a.items()}
    if t is slice:
        parts = [_merge(getattr(a, f), [(c, getattr(o, f)) for c, o in others], base, where,
                        error) for f in ("start", "stop", "step")]
        return slice(*parts)
    if t is int and any(o != a for _, o in others):
        return _fit(a, others, base, f"an argument of {where}", error)
    if t is float and any(o != a and o == o for _, o in others):
        raise error(f"dynamic axes: a float argument of {where} changes with the dynamic dims "
                    f"({a} in the example); it cannot follow them")
    return a


def _fit_meta(m, peers, base, where, error, sz):
    """Meta ``m`` (a TensorMeta, or a list of them) with the dims that follow the dynamic ones
    fitted (``sz`` of the SymInts), given the same node's metas in the traces ``peers``."""
    if isinstance(m, list):
        return [_fit_meta(x, [(c, p[j]) for c, p in peers], base, where, error, sz)
                for j, x in enumerate(m)]
    return TensorMeta(sz(_merge(m.shape, [(c, p.shape) for c, p in peers], base,
                                f"the shape of {where}", error)), m.dtype, m.device) \
        if isinstance(m, TensorMeta) else m


def _map_sym(a, fn):
    t = type(a)
    if isinstance(a, SymInt):
        return fn(a)
    if t in (tuple, list):
        return t(_map_sym(x, fn) for x in a)
    if t is dict:
        return {k: _map_sym(v, fn) for k, v in a.items()}
    if t is slice:
        return slice(_map_sym(a.start, fn), _map_sym(a.stop, fn), _map_sym(a.step, fn))
    return a


def sizes_as_nodes(graph):
    """Replace each SymInt argument by nodes computing it from ``x.size(d)``."""
    inputs = [n for n in graph._nodes if n.op == "placeholder"]
    sizes = {}
    for n in list(graph._nodes):
        if n.op != "call_function":
            continue

        def build(s):
            with graph.inserting_before(n):
                terms = []
                for (i, ax), a in s.dims.items():
                    if (i, ax) not in sizes:
                        with graph.inserting_after(inputs[-1]):
                            sizes[i, ax] = graph.call_method("size", (inputs[i], ax))
                    d = sizes[i, ax]
                    terms.append(d if a == 1 else graph.call_function(operator.mul, (d, a)))
                out = terms[0]
                for t in terms[1:]:
                    out = graph.call_function(operator.mul if s.prod else operator.add, (out, t))
                if s.prod and s.const != 1:
                    out = graph.call_function(operator.mul, (out, s.const))
                elif not s.prod and s.const:
                    out = graph.call_function(operator.add, (out, s.const))
                return out
        n.args, n.kwargs = _map_sym(n.args, build), _map_sym(n.kwargs, build)
