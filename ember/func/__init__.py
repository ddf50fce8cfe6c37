"""``ember.func``: composable function transforms, as ``torch.func``: ``grad``, ``vjp``,
``jacrev``, ``jvp``, ``jacfwd``, ``hessian``, ``linearize``, ``vmap``, ``functional_call``.

The reverse-mode transforms run ember's autograd on the (physical) tensors; inside ``vmap``
they differentiate the whole batch in one pass (see _vmap/). ``jvp`` and ``jacfwd`` are the
double-vjp construction (a vjp of a vjp, linear in its cotangent), so every op with a vjp has
them.
"""
import contextlib
import functools
from collections.abc import Sequence

import ember

from . import _vmap
from ..autograd import forward_ad as fwAD
from ._vmap import lift, lower

from ..nn.utils.stateless import _functional_call


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """Run ``module(*args, **kwargs)`` with its parameters and buffers replaced, for this call
    only, by the tensors in ``parameter_and_buffer_dicts`` (a dict, or a sequence of dicts
    with distinct keys), keyed by dotted name. See
    https://pytorch.org/docs/stable/generated/torch.func.functional_call.html

    Args:
        tie_weights (bool): a value given for one of several tied names is used for all of
            them. Default: True.
        strict (bool): the dicts must name every parameter and buffer, and nothing else.
            Default: False.

    Example:
        >>> import ember
        >>> lin = ember.nn.Linear(2, 1)
        >>> params = {"weight": ember.tensor([[1.0, 2.0]]), "bias": ember.tensor([0.5])}
        >>> ember.func.functional_call(lin, params, (ember.tensor([[1.0, 1.0]]),))
        tensor([[3.5000]])
    """
    if isinstance(parameter_and_buffer_dicts, dict):
        values = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be "
                             "dictionaries")
        keys = [k for d in parameter_and_buffer_dicts for k in d]
        repeated = list(dict.fromkeys(k for k in keys if keys.count(k) > 1))
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of "
                             "functional call is ambiguous")
        values = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError("Expected parameter_and_buffer_dicts to be a dict, or a list/tuple "
                         f"of dicts, but got {type(parameter_and_buffer_dicts)}")
    return _functional_call(module, values, args, kwargs, tie_weights=tie_weights, strict=strict)




# ---- pytrees (tuples, lists, dicts of tensors) ---------------------------------------------

def _flatten(tree):
    if isinstance(tree, (list, tuple)):         # (named tuples too: torch's pytree nodes)
        leaves, specs = [], []
        for t in tree:
            lv, sp = _flatten(t)
            leaves += lv
            specs.append((len(lv), sp))
        return leaves, (type(tree), specs)
    if isinstance(tree, dict):
        leaves, spec = _flatten(list(tree.values()))
        return leaves, (dict, (list(tree), spec))
    return [tree], None


def _unflatten(leaves, spec):
    if spec is None:
        return leaves[0]
    kind, specs = spec
    if kind is dict:
        keys, inner = specs
        return dict(zip(keys, _unflatten(leaves, inner)))
    out, i = [], 0
    for n, sp in specs:
        out.append(_unflatten(leaves[i:i + n], sp))
        i += n
    return kind(*out) if hasattr(kind, "_fields") else kind(out)


def _is_tensor(x):
    return isinstance(x, ember.Tensor)


# ---- reverse mode ------------------------------------------------------------------------

_DEPTH = [0]        # nested transforms: inner ones keep their graphs for the outer ones


@contextlib.contextmanager
def _transform():
    """The body of a reverse-mode transform: one level deeper, with grad enabled."""
    _DEPTH[0] += 1
    try:
        with ember.enable_grad():
            yield
    finally:
        _DEPTH[0] -= 1


def _argnums(argnums, n, fn):
    nums = (argnums,) if isinstance(argnums, int) else argnums
    if not isinstance(nums, tuple) or not nums or not all(isinstance(i, int) for i in nums):
        raise RuntimeError(f"{fn}: argnums must be int or Tuple[int, ...], got: {argnums}")
    for i in nums:
        if not -n <= i < n:
            raise RuntimeError(f"Got argnum={i}, but only {n} positional inputs")
    return nums


def _track(x):
    """``x`` lifted to the active vmap levels as a tensor autograd tracks, and as seen
    inside the function."""
    if not _is_tensor(x):
        raise RuntimeError(f"Expected tensors as the differentiated inputs, got {type(x)}")
    p = lift(x)
    if p.requires_grad:
        p = p.view_as(p)
    else:
        fw, p = getattr(p, "_fw", None), p.detach().requires_grad_()
        if fw is not None:          # a dual input (jacfwd over jacrev) keeps its tangent
            p._fw = fw
    return p, lower(p)


def _traced(func, args, argnums, fn):
    """Call ``func`` with the args at ``argnums`` tracked: (output, physical inputs, their
    tree, the positions)."""
    nums = _argnums(argnums, len(args), fn)
    leaves, spec = _flatten(tuple(args[i] for i in nums))
    pairs = [_track(x) for x in leaves]
    inner = _unflatten([q for _, q in pairs], spec)
    return _at(func, args, nums)(*inner), [p for p, _ in pairs], spec, isinstance(argnums, int)


def _at(func, args, nums):
    """``func`` as a function of its arguments at ``nums``, the others fixed at ``args``."""
    def g(*values):
        a = list(args)
        for i, v in zip(nums, values):
            a[i] = v
        return func(*a)
    return g


def _graph_needed(args):
    return _DEPTH[0] > 1 or fwAD._LEVEL[0] >= 0 or any(
        _is_tensor(x) and x.requires_grad for x in _flatten(args)[0])


def _out(t, keep):
    return lower(t if keep else t.detach())


def _split_aux(out, has_aux, where):
    """``(output, aux)`` of a function called with ``has_aux`` (aux None without it)."""
    if has_aux and not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{where}: output of function f should be a tuple: (output, aux) if "
                           f"has_aux is True")
    return out if has_aux else (out, None)


def grad_and_value(func, argnums=0, has_aux=False):
    """``func``'s gradient w.r.t. the arguments at ``argnums`` and its value: ``(grad,
    value)``, or ``((grad, (value, aux)))`` with ``has_aux``. See
    https://pytorch.org/docs/stable/generated/torch.func.grad_and_value.html

    Example:
        >>> import ember
        >>> ember.func.grad_and_value(lambda x: (x ** 2).sum())(ember.tensor([1.0, 2.0]))
        (tensor([2., 4.]), tensor(5.))
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with _transform():
            out, phys, spec, single = _traced(lambda *a: func(*a, **kwargs), args, argnums,
                                              "grad_and_value")
            out, aux = _split_aux(out, has_aux, "grad_and_value(f)(*args)")
            if not _is_tensor(out):
                raise RuntimeError("grad_and_value(f)(*args): Expected f(*args) to return "
                                   f"a Tensor, got {type(out)}")
            if out.dim() != 0:
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                                   f"scalar Tensor, got tensor with {out.dim()} dims. Maybe "
                                   f"you wanted to use the vjp or jacrev APIs instead?")
            keep = _graph_needed(args)
            p_out = lift(out)
            gs = ember.autograd.grad(p_out, phys, ember.ones_like(p_out), create_graph=keep,
                                     allow_unused=True, materialize_grads=True)
            grads = _unflatten([_out(g, keep) for g in gs], spec)
            value = _out(p_out, keep)
        grads = grads[0] if single else grads
        return (grads, (value, aux)) if has_aux else (grads, value)
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """The gradient of ``func`` (which returns a scalar tensor) w.r.t. the arguments at
    ``argnums``; with ``has_aux``, ``func`` returns ``(output, aux)`` and this returns
    ``(grad, aux)``. See https://pytorch.org/docs/stable/generated/torch.func.grad.html

    Example:
        >>> import ember
        >>> ember.func.grad(lambda x: x.sin().sum())(ember.tensor([0.0, 1.0]))
        tensor([1.0000, 0.5403])
    """
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)``, where ``vjp_fn(cotangents)`` is the vector-Jacobian
    product w.r.t. every primal (a tuple). See
    https://pytorch.org/docs/stable/generated/torch.func.vjp.html

    Example:
        >>> import ember
        >>> out, fn = ember.func.vjp(lambda x: x * 3, ember.tensor([1.0, 2.0]))
        >>> fn(ember.tensor([1.0, 10.0]))
        (tensor([ 3., 30.]),)
    """
    with _transform():
        out, phys, spec, _ = _traced(func, primals, tuple(range(len(primals))), "vjp")
    out, aux = _split_aux(out, has_aux, "vjp(f, *primals)")
    outs, out_spec = _flatten(out)
    if not all(_is_tensor(o) for o in outs):
        raise RuntimeError("vjp(f, *primals): Expected f to be a function that has only "
                           "Tensors or tuples/lists/dicts of Tensors as outputs")
    p_outs = [lift(o) for o in outs]
    keep = _graph_needed(primals)
    levels = len(_vmap._STACK)

    def vjp_fn(cotangents, retain_graph=True, create_graph=None):
        cts, ct_spec = _flatten(cotangents)
        if len(cts) != len(p_outs):
            raise RuntimeError("Expected pytree structure of cotangents to be the same as "
                               "pytree structure of outputs to the function")
        for o, c in zip(outs, cts):
            if tuple(o.shape) != tuple(c.shape):
                raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of "
                                   f"{tuple(c.shape)} and output[0] has a shape of "
                                   f"{tuple(o.shape)}.")
        if len(_vmap._STACK) < levels:
            raise RuntimeError("vjp_fn: calling it under fewer vmap levels than vjp was "
                               "called at is not supported")
        pairs = [(p, _vmap.batched_over(c, levels)) for p, c in zip(p_outs, cts) if p.requires_grad]
        if not pairs:
            return _unflatten([lower(ember.zeros_like(p)) for p in phys], spec)
        gs = ember.autograd.grad([p for p, _ in pairs], phys, [c for _, c in pairs],
                                 retain_graph=retain_graph, allow_unused=True,
                                 create_graph=keep if create_graph is None else create_graph,
                                 materialize_grads=True)
        return _unflatten([_vmap.unbatched_over(g, levels) for g in gs], spec)
    out = _unflatten([_out(p, keep) for p in p_outs], out_spec)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _basis(ts):
    """One-hot tangents for the flattened tensors ``ts``: (n, *shape) each, n in all."""
    sizes = [t.numel() for t in ts]
    eye = ember.eye(sum(sizes), dtype=ts[0].dtype, device=ts[0].device)
    at = _offsets(sizes)
    return [eye[:, i:i + n].reshape(-1, *t.shape) for t, n, i in zip(ts, sizes, at)], sizes


def _offsets(sizes):
    return [sum(sizes[:i]) for i in range(len(sizes))]


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None):
    """The Jacobian of ``func`` w.r.t. the arguments at ``argnums`` by reverse mode: a vjp
    per output element, batched by vmap. See
    https://pytorch.org/docs/stable/generated/torch.func.jacrev.html

    Example:
        >>> import ember
        >>> ember.func.jacrev(lambda x: x ** 2)(ember.tensor([1.0, 2.0]))
        tensor([[2., 0.],
                [0., 4.]])
    """
    @functools.wraps(func)
    def wrapper(*args):
        nums = _argnums(argnums, len(args), "jacrev")
        # as torch: one forward, then the vjp's backward vmapped over the one-hot cotangents
        res = vjp(_at(func, args, nums), *(args[i] for i in nums), has_aux=has_aux)
        outs, out_spec = _flatten(res[0])
        basis, sizes = _basis(outs)
        rows = vmap(lambda *cts: res[1](_unflatten(list(cts), out_spec)),
                    chunk_size=chunk_size)(*basis)          # per arg: (n_out, *arg)
        leaves, arg_spec = _flatten(rows)
        jac = []        # per output i: J_ij, its n_out_i rows of arg j's, as (*out_i, *arg_j)
        for o, n, i in zip(outs, sizes, _offsets(sizes)):
            r = _unflatten([lv[i:i + n].reshape(*o.shape, *lv.shape[1:]) for lv in leaves],
                           arg_spec)
            jac.append(r[0] if isinstance(argnums, int) else r)
        jac = _unflatten(jac, out_spec)
        return (jac, res[2]) if has_aux else jac
    return wrapper


# ---- forward mode --------------------------------------------------------------------------

def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``(func(*primals), J @ tangents)``: the Jacobian-vector product, by forward-mode AD
    (dual tensors, :mod:`ember.autograd.forward_ad`); inside another jvp, whose dual level is
    still open, as the vjp of a vjp (linear in its cotangent). See
    https://pytorch.org/docs/stable/generated/torch.func.jvp.html

    Example:
        >>> import ember
        >>> ember.func.jvp(lambda x: x ** 2, (ember.tensor([1.0, 2.0]),),
        ...                (ember.tensor([1.0, 1.0]),))
        (tensor([1., 4.]), tensor([2., 4.]))
    """
    if not isinstance(primals, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals to be a tuple. E.g. "
                           "it should be valid to call f(*primals).")
    if not isinstance(tangents, tuple) or len(tangents) != len(primals):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have "
                           "the same python structure.")
    p_leaves, t_leaves = _flatten(primals)[0], _flatten(tangents)[0]
    for p, t in zip(p_leaves, t_leaves):
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(f"jvp(f, primals, tangents): Expected primals and tangents to have "
                               f"the same shape, got {tuple(p.shape)} and {tuple(t.shape)}")
    if fwAD._LEVEL[0] >= 0:
        return _jvp_double_vjp(func, primals, t_leaves, has_aux)
    keep = _graph_needed((primals, tangents))
    with fwAD.dual_level():
        leaves, spec = _flatten(primals)
        duals = [lower(fwAD.make_dual(lift(p), lift(t))) for p, t in zip(leaves, t_leaves)]
        res = func(*_unflatten(duals, spec))
        out, aux = res if has_aux else (res, None)
        outs, out_spec = _flatten(out)
        pairs = [fwAD.unpack_dual(lift(o)) for o in outs]
        prim = [_out(p, keep) for p, _ in pairs]
        tang = [_out(ember.zeros_like(p) if t is None else t, keep) for p, t in pairs]
    out, jv = _unflatten(prim, out_spec), _unflatten(tang, out_spec)
    return (out, jv, aux) if has_aux else (out, jv)


def _jvp_double_vjp(func, primals, t_leaves, has_aux):
    """jvp as the vjp of a vjp: the vjp is linear in its cotangent u, so its vjp w.r.t. u
    at the tangents is J @ tangents."""
    with _transform():
        res, us, gs, out_spec = _vjp_of_vjp(func, primals, has_aux)
        keep = _graph_needed((primals, t_leaves))
        jv = _jv([lift(g) for g in gs], us, [lift(t) for t in t_leaves], create_graph=keep)
    jv = _unflatten([_out(j, keep) for j in jv], out_spec)
    return (res[0], jv, res[2]) if has_aux else (res[0], jv)


def _vjp_of_vjp(func, primals, has_aux=False):
    """``func``'s vjp at ``primals`` and, with a graph, its vjp function's result ``gs`` at
    cotangents ``us`` that require grad: linear in ``us``, so the vjp of ``gs`` w.r.t. ``us``
    at the tangents is J @ tangents (``_jv``). Returns (vjp's result, us, gs, out_spec)."""
    res = vjp(func, *primals, has_aux=has_aux)
    outs, out_spec = _flatten(res[0])
    us = [lift(o).detach().requires_grad_() for o in outs]
    gs = _flatten(res[1](_unflatten([lower(u) for u in us], out_spec), create_graph=True))[0]
    return res, us, gs, out_spec


def _jv(gs, us, ts, **kwargs):
    """J @ ``ts`` from ``_vjp_of_vjp``'s ``gs`` and ``us`` (physical tensors)."""
    pairs = [(g, t) for g, t in zip(gs, ts) if g.requires_grad]
    if not pairs:
        return [ember.zeros_like(u) for u in us]
    return ember.autograd.grad([g for g, _ in pairs], us, [t for _, t in pairs],
                               allow_unused=True, materialize_grads=True, **kwargs)


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian of ``func`` w.r.t. the arguments at ``argnums`` by forward mode: a jvp
    per input element, batched by vmap. See
    https://pytorch.org/docs/stable/generated/torch.func.jacfwd.html

    Example:
        >>> import ember
        >>> ember.func.jacfwd(lambda x: x.sin())(ember.tensor([0.0, 0.0]))
        tensor([[1., 0.],
                [0., 1.]])
    """
    @functools.wraps(func)
    def wrapper(*args):
        nums = _argnums(argnums, len(args), "jacfwd")
        sub = tuple(args[i] for i in nums)
        leaves, spec = _flatten(sub)
        basis, sizes = _basis(leaves)
        g = _at((lambda *a: func(*a)[0]) if has_aux else func, args, nums)

        def col(*ts):
            return jvp(g, sub, _unflatten(list(ts), spec))[1]
        cols = vmap(col, randomness=randomness)(*basis)         # per out: (n_in, *out)
        out_leaves, out_spec = _flatten(cols)
        res = []
        for c in out_leaves:
            r = _unflatten([c[i:i + n].movedim(0, -1).reshape(*c.shape[1:], *x.shape)
                            for x, n, i in zip(leaves, sizes, _offsets(sizes))], spec)
            res.append(r[0] if isinstance(argnums, int) else r)
        jac = _unflatten(res, out_spec)
        return (jac, func(*args)[1]) if has_aux else jac
    return wrapper


def hessian(func, argnums=0):
    """The Hessian of ``func`` (a scalar function) w.r.t. the arguments at ``argnums``:
    ``jacfwd(jacrev(func))``. See
    https://pytorch.org/docs/stable/generated/torch.func.hessian.html

    Example:
        >>> import ember
        >>> ember.func.hessian(lambda x: (x ** 3).sum())(ember.tensor([1.0, 2.0]))
        tensor([[ 6.,  0.],
                [ 0., 12.]])
    """
    return jacfwd(jacrev(func, argnums), argnums)


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)``: ``jvp_fn(*tangents)`` is the Jacobian-vector product at
    ``primals``, reusing one recorded graph. See
    https://pytorch.org/docs/stable/generated/torch.func.linearize.html

    Example:
        >>> import ember
        >>> out, jvp_fn = ember.func.linearize(lambda x: x.exp(), ember.tensor([0.0, 1.0]))
        >>> jvp_fn(ember.tensor([1.0, 1.0]))
        tensor([1.0000, 2.7183])
    """
    with ember.enable_grad():
        res, us, gs, out_spec = _vjp_of_vjp(func, primals)

    def jvp_fn(*tangents):
        with ember.enable_grad():
            jv = _jv(gs, us, [lift(t) for t in _flatten(tangents)[0]], retain_graph=True)
        return _unflatten([lower(j.detach()) for j in jv], out_spec)
    return _unflatten([o.detach() for o in _flatten(res[0])[0]], out_spec), jvp_fn


# ---- vmap ----------------------------------------------------------------------------------

def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``func`` mapped over a dim of its inputs (``in_dims``: an int, None for an unmapped
    argument, or a structure matching the args), the results stacked along ``out_dims``. Ops
    run once on the whole batch through their batching rules. See
    https://pytorch.org/docs/stable/generated/torch.func.vmap.html

    Example:
        >>> import ember
        >>> ember.func.vmap(ember.dot)(ember.ones(3, 2), ember.ones(3, 2))
        tensor([2., 2., 2.])
    """
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or "
                           f"'same'. Got {randomness}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        leaves, spec = _flatten(args)
        dims = _in_dims(in_dims, args, func)
        sizes = {x.shape[d] for x, d in zip(leaves, dims) if d is not None}
        if not sizes:
            raise ValueError(f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): at least one "
                             f"input must be a Tensor mapped over a dim (in_dims not all None)")
        if len(sizes) > 1:
            raise ValueError(f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): "
                             "Expected all tensors to have the same size in the mapped "
                             f"dimension, got sizes {sorted(sizes)} for the mapped dimension")
        n = sizes.pop()
        if chunk_size is not None and chunk_size < n:
            parts = [wrapper_chunk(leaves, dims, spec, kwargs, i, min(i + chunk_size, n))
                     for i in range(0, n, chunk_size)]
            return _cat_outs(parts, out_dims, func)
        return _run_vmap(func, leaves, dims, spec, kwargs, n, out_dims, randomness)[0]

    def wrapper_chunk(leaves, dims, spec, kwargs, lo, hi):
        part = [x if d is None else x.narrow(d, lo, hi - lo) for x, d in zip(leaves, dims)]
        return _run_vmap(func, part, dims, spec, kwargs, hi - lo, out_dims, randomness)
    return wrapper


def _name(func):
    return getattr(func, "__name__", repr(func))


def _in_dims(in_dims, args, func):
    """One dim (or None) per leaf of ``args``."""
    if isinstance(in_dims, int) or in_dims is None:
        dims = [in_dims] * len(_flatten(args)[0])
    else:
        if not isinstance(in_dims, tuple) or len(in_dims) != len(args):
            raise ValueError(f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): in_dims is "
                             f"not compatible with the structure of `inputs`. in_dims has "
                             f"structure {in_dims} but inputs has structure of {len(args)} args")
        dims = []
        for a, d in zip(args, in_dims):
            n = len(_flatten(a)[0])
            dims += [d] * n if d is None or isinstance(d, int) else _flatten(d)[0]
    leaves = _flatten(args)[0]
    for x, d in zip(leaves, dims):
        if d is None:
            continue
        if not _is_tensor(x):
            raise ValueError(f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): Got "
                             f"in_dim={d} for an input but the input is of type {type(x)}. "
                             "We cannot vmap over non-Tensor arguments, please use None as "
                             "the respective in_dim")
        if not -x.dim() <= d < x.dim():
            raise ValueError(f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): Got "
                             f"in_dim={d} for some input, but that input is a Tensor of "
                             f"dimensionality {x.dim()} so expected in_dim to satisfy "
                             f"-{x.dim()} <= in_dim < {x.dim()}.")
    return [None if d is None else d % leaves[i].dim() for i, d in enumerate(dims)]


def _run_vmap(func, leaves, dims, spec, kwargs, n, out_dims, randomness):
    level = _vmap.push(n, randomness)
    try:
        inner = [x if d is None else _vmap._wrap(x.movedim(d, 0) if d else x, level)
                 for x, d in zip(leaves, dims)]
        out = func(*_unflatten(inner, spec), **kwargs)
        outs, out_spec = _flatten(out)
        odims = [out_dims] * len(outs) if isinstance(out_dims, int) or out_dims is None \
            else _flatten(out_dims)[0]
        res = []
        for o, d in zip(outs, odims):
            if not _is_tensor(o):
                raise ValueError(f"vmap({_name(func)}, ...): `{_name(func)}` must only "
                                 f"return Tensors, got type {type(o)}. Did you mean to set "
                                 "out_dims= to None for output?")
            if _vmap._level_of(o) == level:
                v = o._value
                if d is None:
                    raise ValueError(f"vmap({_name(func)}, ...): `{_name(func)}` can not "
                                     "return a BatchedTensor when out_dim is None")
                res.append(v.movedim(0, d % v.dim()) if d % v.dim() else v)
            elif d is None:
                res.append(o)
            else:
                res.append(o.unsqueeze(d % (o.dim() + 1)).expand(
                    *(n if i == d % (o.dim() + 1) else -1 for i in range(o.dim() + 1))))
    finally:
        _vmap.pop()
    return _unflatten(res, out_spec), odims


def _cat_outs(parts, out_dims, func):
    outs = [_flatten(p[0]) for p in parts]
    spec, odims = outs[0][1], parts[0][1]
    cols = [ember.cat([o[0][i] for o in outs], d) if d is not None else outs[0][0][i]
            for i, d in enumerate(odims)]
    return _unflatten(cols, spec)


# ---- debugging and einops-style rearrange --------------------------------------------------

def debug_unwrap(tensor, *, recurse=True):
    """The tensor a vmap's ``BatchedTensor`` holds (every level with ``recurse``, else one);
    other tensors as they are. See
    https://pytorch.org/docs/stable/generated/torch.func.debug_unwrap.html

    Example:
        >>> import ember
        >>> f = lambda x: ember.func.debug_unwrap(x).sum()     # the whole batch's sum
        >>> ember.func.vmap(f, out_dims=None)(ember.ones(3, 2))
        tensor(6.)
    """
    while isinstance(tensor, _vmap.BatchedTensor):
        tensor = tensor._value
        if not recurse:
            break
    return tensor


def _axes(side):
    """``"b (h w) c"`` -> [["b"], ["h", "w"], ["c"]] (``...`` a group of its own)."""
    groups, cur = [], None
    for tok in side.replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(":
            if cur is not None:
                raise ValueError("rearrange: nested parentheses are not allowed")
            cur = []
        elif tok == ")":
            groups.append(cur)
            cur = None
        elif cur is not None:
            cur.append(tok)
        else:
            groups.append([tok])
    return groups


def rearrange(tensor, pattern, **axes_lengths):
    """einops' ``rearrange``: split, reorder and merge dims by a pattern such as
    ``"b (h w) c -> b h w c"`` (``...`` for the dims not named). See
    https://pytorch.org/docs/stable/generated/torch.func.rearrange.html

    Example:
        >>> import ember
        >>> ember.func.rearrange(ember.zeros(2, 6, 3), "b (h w) c -> b c h w", h=2).shape
        torch.Size([2, 3, 2, 3])
    """
    left, arrow, right = pattern.partition("->")
    if not arrow:
        raise ValueError(f"rearrange: pattern must contain '->', got {pattern!r}")
    lg, rg = _axes(left), _axes(right)
    names = [a for g in lg for a in g]
    if sorted(names) != sorted(a for g in rg for a in g) or len(set(names)) != len(names):
        raise ValueError(f"rearrange: the two sides of {pattern!r} name different axes")
    n_ell = tensor.dim() - (len(lg) - (["..."] in lg))
    if n_ell < 0 or (["..."] not in lg and n_ell):
        raise ValueError(f"rearrange: {pattern!r} does not match a tensor of {tensor.dim()} dims")
    sizes, dims = dict(axes_lengths), iter(tensor.shape)
    for g in lg:
        if g == ["..."]:
            sizes["..."] = [next(dims) for _ in range(n_ell)]
            continue
        total, unknown = next(dims), [a for a in g if a not in sizes]
        known = 1
        for a in g:
            known *= sizes.get(a, 1)
        if len(unknown) > 1 or total % known:
            raise ValueError(f"rearrange: cannot split a dim of size {total} into {g}")
        for a in unknown:
            sizes[a] = total // known
    flat = [x for a in names for x in (sizes[a] if a == "..." else [sizes[a]])]
    span, i = {}, 0
    for a in names:
        k = len(sizes[a]) if a == "..." else 1
        span[a], i = list(range(i, i + k)), i + k
    out = tensor.reshape(*flat).permute(*[d for g in rg for a in g for d in span[a]])
    new = []
    for g in rg:
        if g == ["..."]:
            new += sizes["..."]
        else:
            size = 1
            for a in g:
                size *= sizes[a]
            new.append(size)
    return out.reshape(*new)


# ---- modules -------------------------------------------------------------------------------

def stack_module_state(models):
    """The parameters and buffers of ``models`` (alike modules), each stacked along a new
    first dim: ``(params, buffers)`` dicts for ``vmap(functional_call)`` over an ensemble.
    See https://pytorch.org/docs/stable/generated/torch.func.stack_module_state.html

    Example:
        >>> import ember
        >>> ms = [ember.nn.Linear(3, 2) for _ in range(4)]
        >>> params, buffers = ember.func.stack_module_state(ms)
        >>> tuple(params["weight"].shape)
        (4, 2, 3)
    """
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or all(not m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same "
                           "training/eval mode.")
    if len({type(m) for m in models}) > 1:
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")

    def stacked(named):
        names = [dict(named(m)) for m in models]
        return {k: ember.stack([d[k] for d in names]).detach().requires_grad_(
            names[0][k].requires_grad) for k in names[0]}
    params = stacked(lambda m: m.named_parameters())
    with ember.no_grad():
        buffers = {k: v.detach() for k, v in stacked(lambda m: m.named_buffers()).items()}
    return params, buffers


def functionalize(func, *, remove="mutations"):
    """``func`` with its in-place ops on the inputs replayed as copies. ember runs eagerly
    and its in-place ops already keep autograd exact, so the function's results and its
    writes to the inputs are those of ``func`` itself. See
    https://pytorch.org/docs/stable/generated/torch.func.functionalize.html

    Example:
        >>> import ember
        >>> def f(x):
        ...     y = x.clone()
        ...     y.add_(1)
        ...     return y
        >>> ember.func.functionalize(f)(ember.zeros(2))
        tensor([1., 1.])
    """
    if remove not in ("mutations", "mutations_and_views"):
        raise RuntimeError(f"functionalize(f, remove='mutations'): received invalid argument "
                           f"for remove={remove}. Valid options are:\n     remove='mutations'"
                           ": all inplace and out= operators will be removed from the program, "
                           "and replaced with their out-of-place equivalents.\n     remove='"
                           "mutations_and_views': In addition to the above, all aliasing "
                           "operators {view} will be replaced with their non-aliasing "
                           "counterparts, {view}_copy.\n")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


def replace_all_batch_norm_modules_(root):
    """In place: every batch norm module under ``root`` stops using and updating running
    statistics (so it can run under vmap); returns ``root``. See
    https://pytorch.org/docs/stable/generated/torch.func.replace_all_batch_norm_modules_.html

    Example:
        >>> import ember
        >>> net = ember.func.replace_all_batch_norm_modules_(ember.nn.BatchNorm1d(3))
        >>> net.running_mean is None, net.track_running_stats
        (True, False)
    """
    from ..nn.modules.batchnorm import _NormBase
    for m in root.modules():
        if isinstance(m, _NormBase):
            m.running_mean = m.running_var = m.num_batches_tracked = None
            m.track_running_stats = False
    return root


__all__ = ["debug_unwrap", "rearrange", "functional_call", "grad", "grad_and_value", "vjp",
           "jvp", "jacrev", "jacfwd", "hessian", "linearize", "vmap", "stack_module_state",
           "functionalize", "replace_all_batch_norm_modules_"]
