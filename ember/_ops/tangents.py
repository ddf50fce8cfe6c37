"""Forward-mode (jvp) rules: ``opdef.jvp(opdef, args, kwargs, tangents, out)`` returns the
tangent of ``out == opdef(*args, **kwargs)`` (a tuple for several outputs, None where one has
none) from ``tangents``, ``{position or name: tangent}`` of the dual operands (a list for a list
of tensors). Rules are written in ember ops, so autograd records them (reverse over forward).

The op files set each OpDef's rule beside its vjp, mostly one of the shapes below: ``linear``
(the op of the tangents), ``multilinear`` (products: one term per dual factor), ``reduction``
(each input element reaches one output element, so the Jacobian's rows are disjoint and the
vjp at ones holds them), ``gathered`` (outputs picked from the input: sort, topk). Pointwise ops
without a rule derive one from their vjp (a diagonal Jacobian is its own transpose);
``double_vjp`` is the stated fallback for the few ops left (it costs a replay of the op and two
backward passes).
"""
import ember

from .. import _dtype
from .._tensor import Tensor


def _isT(a):
    return isinstance(a, Tensor)


def named(opdef, args, kwargs):
    """The call's arguments by parameter name, defaults filled in."""
    return {**opdef.defaults, **dict(zip(opdef.params, args)), **kwargs}


def _total(terms):
    out = None
    for t in terms:
        if t is not None:
            out = t if out is None else out + t
    return out


def linear_with(*zeroed, fixed=()):
    """Ops linear in their tensor operands jointly: the op of the tangents. A float tensor
    operand without a tangent counts as zeros; so do the operands named in ``zeroed`` (an
    added constant or fill value, a tensor or a number). The ``fixed`` operands (nll_loss's
    class weights) are constant factors: kept as they are, or the fallback where dual."""
    zeroed, fixed = frozenset(zeroed), frozenset(fixed)

    def rule(opdef, args, kwargs, tangents, out):
        args, kwargs = list(args), dict(kwargs)
        for k, a in (*enumerate(args), *kwargs.items()):
            src = args if isinstance(k, int) else kwargs
            name = opdef.params[k] if isinstance(k, int) and k < len(opdef.params) else k
            if name in fixed:
                if k in tangents:
                    return double_vjp(opdef, args, kwargs, tangents, out)
            elif k in tangents:
                t = tangents[k]
                src[k] = [ember.zeros_like(b) if e is None else e for b, e in zip(a, t)] \
                    if isinstance(t, list) else t
            elif name in zeroed:
                src[k] = ember.zeros_like(a) if _isT(a) else 0 if a is not None else None
            elif _isT(a) and a.dtype.category >= _dtype._FLOAT:
                src[k] = ember.zeros_like(a)
        return opdef(*args, **kwargs)
    return rule


LINEAR = linear_with()


def multilinear(*additive):
    """Ops linear in each tensor operand separately (products, ``beta * input + alpha * a @ b``,
    a bias): one term per dual operand, the op with that operand's tangent in its place and
    the others' primal values, the ``additive`` operands (names) zeroed; an additive operand's
    own term zeroes a factor instead."""
    def rule(opdef, args, kwargs, tangents, out):
        terms = []
        keys = [*range(len(args)), *kwargs]
        name = lambda k: opdef.params[k] if isinstance(k, int) else k  # noqa: E731
        for k, t in tangents.items():
            if isinstance(t, list):          # a list of factors (einsum, multi_dot)
                for j, e in enumerate(t):
                    if e is not None:
                        a = list(args)
                        a[k] = [e if i == j else b for i, b in enumerate(args[k])]
                        terms.append(opdef(*a, **kwargs))
                continue
            a, kw = list(args), dict(kwargs)
            put = lambda key, v: (a if isinstance(key, int) else kw).__setitem__(key, v)  # noqa
            get = lambda key: a[key] if isinstance(key, int) else kw[key]  # noqa: E731
            put(k, t)
            if name(k) in additive:
                zero = [next(j for j in keys if _isT(get(j)) and name(j) not in additive)]
            else:
                zero = [j for j in keys if j != k and name(j) in additive]
            for j in zero:
                if _isT(get(j)):
                    put(j, ember.zeros_like(get(j)))
            terms.append(opdef(*a, **kw))
        return _total(terms)
    return rule


PRODUCT = multilinear()


def _ones_cotangents(opdef, out, i):
    outs = out if isinstance(out, (tuple, list)) else None
    if outs is None:
        return ember.ones_like(out)
    return tuple(ember.ones_like(o) if j == i else ember.zeros_like(o) if
                 _isT(o) and o.dtype.category >= _dtype._FLOAT else None
                 for j, o in enumerate(outs))


def reduction(dims_of=None):
    """Ops each of whose input elements reaches one output element (reductions along dims,
    a scalar loss, det over the last two dims): the Jacobian's rows are disjoint, so the vjp
    at ones holds them all, and an output's tangent is the sum of (vjp(1) * tangent) over the
    reduced dims. ``dims_of(a)`` gives ``(dims, keepdim)`` from the named arguments (default:
    their ``dim`` and ``keepdim``; dims None or () is every dim)."""
    def rule(opdef, args, kwargs, tangents, out):
        a = named(opdef, args, kwargs)
        dims, keep = dims_of(a) if dims_of else (a.get("dim"), a.get("keepdim", False))
        kw = dict(kwargs, result=out) if opdef.save_result else kwargs
        outs = out if isinstance(out, (tuple, list)) else (out,)
        res = []
        for i, o in enumerate(outs):
            if i in opdef.nondiff_outputs or not _isT(o) or o.dtype.category < _dtype._FLOAT:
                res.append(None)
                continue
            gs = opdef.vjp_fn(_ones_cotangents(opdef, out, i), *args, **kw)
            gs = gs if isinstance(gs, tuple) else (gs,)
            terms = []
            for k, t in tangents.items():
                g = gs[k] if isinstance(k, int) and k < len(gs) else None
                if g is None:
                    continue
                p = (g * t).to(o.dtype) if g.dtype != o.dtype else g * t
                if dims is None or dims == () or o.numel() == 1 and p.dim() and not keep:
                    p = p.sum().reshape(o.shape)
                else:
                    p = p.sum(dims, keepdim=keep)
                terms.append(p)
            res.append(_total(terms) if terms else ember.zeros_like(o))
        return tuple(res) if isinstance(out, (tuple, list)) else res[0]
    return rule


REDUCTION = reduction()


def _dim_of(a, default=-1):
    d = a.get("dim", default)
    return default if d is None else d


def gathered(dim_of=_dim_of):
    """Ops whose values are picked from the input along a dim, with their indices as an
    output (sort, topk, cummax, max pooling's flattened windows): the tangent picked the
    same way."""
    def rule(opdef, args, kwargs, tangents, out):
        t = tangents.get(0, tangents.get(opdef.params[0]))
        d = dim_of(named(opdef, args, kwargs))
        if d is None:
            return None
        vals, idx = out[0], out[1]
        if d == "pool":           # indices into the pooled trailing dims, flattened
            nd = len(named(opdef, args, kwargs).get("kernel_size") or
                     named(opdef, args, kwargs)["output_size"])
            return t.flatten(-nd).gather(-1, idx.flatten(-nd)).reshape(vals.shape), None
        return (t.clone(), None) if t.dim() == 0 else (t.gather(d, idx), None)
    return rule


def pointwise(opdef, args, kwargs, tangents, out):
    """Elementwise ops of real operands: their Jacobian w.r.t. each operand is diagonal, so
    the vjp at the (expanded) tangent is the jvp. Complex operands take the fallback (a
    diagonal complex Jacobian is not its own adjoint)."""
    if not (_isT(out) and out.dtype.category == _dtype._FLOAT) or any(
            not isinstance(k, int) or isinstance(t, list) for k, t in tangents.items()) or any(
            _isT(a) and a.dtype.category == _dtype._COMPLEX for a in args):
        return double_vjp(opdef, args, kwargs, tangents, out)
    shape = out.shape
    full = [a.expand(shape) if _isT(a) else a for a in args]
    if opdef.save_result:
        kwargs = dict(kwargs, result=out)
    terms = []
    for k, t in tangents.items():
        g = opdef.vjp_fn(t.expand(shape), *full, **kwargs)
        terms.append(g[k] if isinstance(g, tuple) else g)
    return _total(terms)


def double_vjp(opdef, args, kwargs, tangents, out):
    """The fallback: d/du of vjp(u), the vjp of the op's vjp w.r.t. its cotangent u (linear
    in u), at the tangents."""
    keep = ember.is_grad_enabled() and any(
        _isT(a) and a.requires_grad for a in (*args, *kwargs.values())) or any(
        _isT(t) and t.requires_grad for t in tangents.values())
    with ember.enable_grad():
        args, kwargs = list(args), dict(kwargs)
        prims, tans = [], []
        for k, t in tangents.items():
            src = args if isinstance(k, int) else kwargs
            group = src[k] if isinstance(t, list) else [src[k]]
            tl = t if isinstance(t, list) else [t]
            new = []
            for a, e in zip(group, tl):
                p = a.view_as(a) if a.requires_grad else a.detach().requires_grad_()
                new.append(p)
                if e is not None:
                    prims.append(p)
                    tans.append(e)
            src[k] = new if isinstance(t, list) else new[0]
        res = opdef(*args, **kwargs)
        outs = res if isinstance(res, (tuple, list)) else (res,)
        diff = [i for i, o in enumerate(outs) if _isT(o) and o.requires_grad and
                i not in opdef.nondiff_outputs]
        if not diff:
            return None
        # (any u will do, the vjp being linear in it; ones, as some vjps split on g's sign)
        us = [ember.ones_like(outs[i]).requires_grad_() for i in diff]
        gs = ember.autograd.grad([outs[i] for i in diff], prims, us, create_graph=True,
                                 allow_unused=True)
        pairs = [(g, t) for g, t in zip(gs, tans) if g is not None and g.requires_grad]
        jv = ember.autograd.grad([g for g, _ in pairs], us, [t for _, t in pairs],
                                 create_graph=keep, allow_unused=True,
                                 materialize_grads=True) if pairs else \
            [ember.zeros_like(u) for u in us]
    jv = [j if keep else j.detach() for j in jv]
    full = [None] * len(outs)
    for i, j in zip(diff, jv):
        full[i] = j
    return tuple(full) if isinstance(res, (tuple, list)) else full[0]


def fallback(opdef, args, kwargs, tangents, out):
    """The default rule of an op that sets none and is not pointwise: ``double_vjp``."""
    return double_vjp(opdef, args, kwargs, tangents, out)


def decomposed(fn):
    """A rule that is the jvp of ``fn(primals, tangents)``, given the named arguments and the
    named tangents (zeros for the tensors without one)."""
    def rule(opdef, args, kwargs, tangents, out):
        a = named(opdef, args, kwargs)
        t = {}
        for k, e in tangents.items():
            t[opdef.params[k] if isinstance(k, int) else k] = e
        for k, v in a.items():
            if k not in t and _isT(v) and v.dtype.category >= _dtype._FLOAT:
                t[k] = ember.zeros_like(v)
        return fn(a, t, out)
    return rule


def loss(opdef, args, kwargs, tangents, out):
    """Elementwise losses (mse, huber, binary cross-entropy): pointwise with
    ``reduction='none'``, else one scalar, whose Jacobian row is the vjp at one."""
    none = named(opdef, args, kwargs).get("reduction", "mean") == "none"
    return (pointwise if none else SCALAR)(opdef, args, kwargs, tangents, out)


SCALAR = reduction(lambda a: (None, False))


def fallback_unless(ok, rule):
    """``rule`` where ``ok(named arguments)``, else the double-vjp fallback (scatter's
    multiplying reductions, quantile of several q)."""
    def pick(opdef, args, kwargs, tangents, out):
        r = rule if ok(named(opdef, args, kwargs)) else double_vjp
        return r(opdef, args, kwargs, tangents, out)
    return pick


def normalized(x, tx, dims, eps, centre=True):
    """``(xhat, its tangent)`` of ``xhat = (x - mean) / sqrt(var + eps)`` over ``dims`` (the
    root mean square for ``centre=False``: rms_norm), for layer, group and batch norm."""
    xc = x - x.mean(dims, keepdim=True) if centre else x
    r = ((xc * xc).mean(dims, keepdim=True) + eps).rsqrt()
    xh = xc * r
    if tx is None:
        return xh, None
    tc = tx - tx.mean(dims, keepdim=True) if centre else tx
    return xh, r * (tc - xh * (xh * tc).mean(dims, keepdim=True))


def affine(xh, txh, t, w, b, shape=None):
    """The tangent of ``xh * w + b`` (w, b reshaped to ``shape``; either may be None)."""
    rs = (lambda v: v) if shape is None else (lambda v: v.reshape(shape))  # noqa: E731
    terms = [txh if w is None or txh is None else txh * rs(w)]
    if w is not None and t.get("weight") is not None:
        terms.append(xh * rs(t["weight"]))
    if b is not None and t.get("bias") is not None:
        terms.append(rs(t["bias"]).expand(xh.shape))
    return _total(terms)
