"""Higher-level differentiation of functions: ``vjp``, ``jvp``, ``jacobian``, ``hessian``,
``vhp``, ``hvp``, as in ``torch.autograd.functional``, built on ``autograd.grad``.

Inputs and outputs are a Tensor or a tuple of Tensors; results mirror that structure. Forward
products (``jvp``, ``hvp``) use the double-backward trick, as torch does: the vjp is linear in
its ``grad_outputs``, so differentiating it with respect to them gives the jvp.
See https://pytorch.org/docs/stable/autograd.html#functional-higher-level-api
"""
from . import grad as _grad
from .grad_mode import enable_grad


def _as_tuple(x, arg_name, fn_name):
    from .._tensor import Tensor
    is_tuple = isinstance(x, tuple)
    xs = x if is_tuple else (x,)
    for i, t in enumerate(xs):
        if not isinstance(t, Tensor):
            what = f"The outputs of the user-provided function given to {fn_name}" \
                if arg_name == "outputs" else f"The {arg_name} given to {fn_name}"
            where = f"the value at index {i}" if is_tuple else f"the given {arg_name}" \
                if arg_name != "outputs" else "the given outputs of the user-provided function"
            raise TypeError(f"{what} must be either a Tensor or a tuple of Tensors but {where} "
                            f"has type {type(t)}.")
    return is_tuple, xs


def _unpack(res, is_tuple):
    """Undo ``_as_tuple``: ``is_tuple`` is a bool, or a pair of them for nested results."""
    if isinstance(is_tuple, tuple):
        if not is_tuple[1]:
            res = tuple(r[0] for r in res)
        return res if is_tuple[0] else res[0]
    return res if is_tuple else res[0]


def _prepare(inputs, create_graph, need_graph):
    # NOTE: like torch, with create_graph an input that requires grad gets a view, so the result
    # stays connected to the caller's graph; otherwise a fresh leaf.
    return tuple(t.view_as(t) if create_graph and t.requires_grad else
                 t.detach().requires_grad_(need_graph) for t in inputs)


def _finish(xs, create_graph):
    return tuple(x if create_graph or x is None else x.detach() for x in xs)


def _validate_v(v, other, is_other_tuple):
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got "
                               f"{len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, other)):
        if tuple(a.shape) != tuple(b.shape):
            pre = f"Entry {i} in v has" if is_other_tuple else "v has"
            raise RuntimeError(f"{pre} invalid size: should be {b.shape} but got {a.shape}.")


_NO_GRAD = {
    "outputs": "Output {i} of the user-provided function does not require gradients. The outputs "
               "must be computed in a differentiable manner from the input when running in "
               "strict mode.",
    "grad_inputs": "The gradient with respect to input {i} is independent of the inputs of the "
                   "user-provided function. This is not allowed in strict mode.",
    "jacobian": "While computing the hessian, found that the jacobian of the user-provided "
                "function with respect to input {i} is independent of the input. This is not "
                "allowed in strict mode. You should ensure that your function is twice "
                "differentiable and that the jacobian depends on the inputs (this would be "
                "violated by a linear function for example).",
}


def _check_requires_grad(outputs, kind, strict):
    if not strict:
        return
    for i, o in enumerate(outputs):
        if o is None:
            raise RuntimeError(f"The output of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode.")
        if not o.requires_grad:
            raise RuntimeError(_NO_GRAD[kind].format(i=i))


def _grads(outputs, inputs, grad_outputs, create_graph, strict, what):
    """``autograd.grad`` over the outputs that require grad (the graph is kept: callers
    differentiate the same outputs again)."""
    gos = [None] * len(outputs) if grad_outputs is None else grad_outputs
    pairs = [(o, g) for o, g in zip(outputs, gos) if o is not None and o.requires_grad]
    if not pairs:
        res = (None,) * len(inputs)
    else:
        res = _grad([o for o, _ in pairs], inputs, None if grad_outputs is None else
                    [g for _, g in pairs], retain_graph=True, create_graph=create_graph,
                    allow_unused=True)
    for i, r in enumerate(res):
        if r is None and strict:
            raise RuntimeError(f"The {what} of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode.")
    return res


def _zeros_for_none(grads, refs):
    from .._ops.creation import zeros_like
    return tuple(g if g is not None else zeros_like(r) for g, r in zip(grads, refs))


def _call(func, inputs, fn_name):
    out = func(*inputs)
    return _as_tuple(out, "outputs", fn_name)


def _single_element_v(v, xs, what):
    from .._ops.creation import ones_like
    if v is not None:
        return v
    if len(xs) != 1 or xs[0].numel() != 1:
        raise RuntimeError(f"The vector v can only be None if the {what} a single Tensor with a "
                           "single element.")
    return (ones_like(xs[0]),)


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``.

    Example:
        >>> import ember
        >>> from ember.autograd.functional import vjp
        >>> out, g = vjp(lambda x: x ** 2, ember.tensor([1.0, 2.0]), ember.ones(2))
        >>> g
        tensor([2., 4.])
    """
    with enable_grad():
        is_in_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _prepare(inputs, create_graph, True)
        is_out_tuple, outputs = _call(func, inputs, "vjp")
        if v is not None:
            _, v = _as_tuple(v, "v", "vjp")
            _validate_v(v, outputs, is_out_tuple)
        v = _single_element_v(v, outputs, "user-provided function returns")
        if any(o.requires_grad for o in outputs):
            res = _grads(outputs, inputs, v, create_graph, strict, "output")
        else:
            _check_requires_grad(outputs, "outputs", strict)
            res = (None,) * len(inputs)
    res = _zeros_for_none(_finish(res, create_graph), inputs)
    return _unpack(_finish(outputs, create_graph), is_out_tuple), _unpack(res, is_in_tuple)


def _forward_product(outputs, inputs, v, create_graph, strict, what):
    """J v by the double-backward trick: d/du of (u^T J) in the direction v."""
    from .._ops.creation import zeros_like
    us = tuple(zeros_like(o).requires_grad_() for o in outputs)
    grad_in = _grads(outputs, inputs, us, True, strict, what)
    pairs = [(g, t) for g, t in zip(grad_in, v) if g is not None and g.requires_grad]
    if not pairs:
        res = (None,) * len(us)
    else:
        res = _grad([g for g, _ in pairs], us, [t for _, t in pairs], create_graph=create_graph,
                    allow_unused=True)
    return _zeros_for_none(_finish(res, create_graph), outputs)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)``: the Jacobian-vector product at ``inputs``.

    Example:
        >>> import ember
        >>> from ember.autograd.functional import jvp
        >>> out, t = jvp(lambda x: x ** 2, ember.tensor([1.0, 2.0]), ember.ones(2))
        >>> t
        tensor([2., 4.])
    """
    with enable_grad():
        is_in_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _prepare(inputs, create_graph, True)
        if v is not None:
            _, v = _as_tuple(v, "v", "jvp")
            _validate_v(v, inputs, is_in_tuple)
        v = _single_element_v(v, inputs, "input to the user-provided function is")
        is_out_tuple, outputs = _call(func, inputs, "jvp")
        _check_requires_grad(outputs, "outputs", strict)
        res = _forward_product(outputs, inputs, v, create_graph, strict, "output")
    return _unpack(_finish(outputs, create_graph), is_out_tuple), _unpack(res, is_out_tuple)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: for each output and input, a tensor of shape
    ``output.shape + input.shape``. Rows are computed one by one, or with
    ``strategy="forward-mode"`` (which needs ``vectorize=True``) as ``ember.func.jacfwd``:
    forward-mode AD batched by vmap.

    Example:
        >>> import ember
        >>> from ember.autograd.functional import jacobian
        >>> jacobian(lambda x: x ** 2, ember.tensor([1.0, 2.0]))
        tensor([[2., 0.],
                [0., 4.]])
    """
    from .._ops.creation import eye, zeros
    from .._ops.joining import stack
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: '
                         'If your function has more outputs than inputs, "forward-mode" tends '
                         'to be more performant. Otherwise, prefer to use "reverse-mode".')
    if strategy == "forward-mode":
        if not vectorize:
            raise NotImplementedError("torch.autograd.functional.jacobian: `strategy="
                                      "\"forward-mode\"` implies `vectorize=True`.")
        if create_graph:
            raise NotImplementedError("torch.autograd.functional.jacobian: `strategy="
                                      "\"forward-mode\"` does not support `create_graph=True`.")
        from ..func import jacfwd      # forward-mode AD (dual tensors), batched by vmap
        is_in_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        is_out_tuple = isinstance(func(*inputs), tuple)
        jac = jacfwd(func, argnums=tuple(range(len(inputs))))(*inputs)
        jac = jac if is_out_tuple else (jac,)
        return _unpack(tuple(tuple(j) for j in jac), (is_out_tuple, is_in_tuple))
    with enable_grad():
        is_in_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prepare(inputs, create_graph, True)
        is_out_tuple, outputs = _call(func, inputs, "jacobian")
        if vectorize and strict:
            raise RuntimeError("torch.autograd.functional.jacobian: `strict=True` and "
                               "`vectorized=True` are not supported together. Please either "
                               "set `strict=False` or `vectorize=False`.")
        jac = []
        for i, out in enumerate(outputs):
            rows = [[] for _ in inputs]
            flat = out.reshape(-1)
            many = vectorize and out.requires_grad and flat.numel()
            if many:    # as torch: one backward, vmapped over the one-hot rows (stacked as one)
                grads = [_grad([out], inputs, [eye(many, dtype=out.dtype, device=out.device)
                                               .reshape(many, *out.shape)], retain_graph=True,
                               create_graph=create_graph, allow_unused=True,
                               is_grads_batched=True)]
            else:       # a backward per row
                grads = [_grads([flat[j]], inputs, None, create_graph, False, "output")
                         if out.requires_grad else (None,) * len(inputs)
                         for j in range(flat.numel())]
            for g in grads:
                for k, (r, t) in enumerate(zip(g, inputs)):
                    if r is None and strict:
                        raise RuntimeError(f"Output {i} of the user-provided function is "
                                           f"independent of input {k}. This is not allowed in "
                                           "strict mode.")
                    rows[k].append(r if r is not None else zeros(
                        ((many,) if many else ()) + tuple(t.shape), dtype=t.dtype,
                        device=t.device))
            jac.append(tuple(
                (stack(r) if r else zeros((0,) + tuple(t.shape), dtype=t.dtype))
                .reshape(tuple(out.shape) + tuple(t.shape)) for r, t in zip(rows, inputs)))
        jac = tuple(_finish(j, create_graph) for j in jac)
    return _unpack(jac, (is_out_tuple, is_in_tuple))


def _single_output(func, fn_name):
    def f(*inp):
        out = func(*inp)
        is_tuple, t = _as_tuple(out, "outputs", fn_name)
        if is_tuple or not hasattr(out, "shape"):
            raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError(f"The Tensor returned by the function given to {fn_name} should "
                               "contain a single element")
        return out.squeeze()
    return f


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of scalar ``func`` at ``inputs`` (the Jacobian of its gradient).

    Example:
        >>> import ember
        >>> from ember.autograd.functional import hessian
        >>> hessian(lambda x: (x ** 3).sum(), ember.tensor([1.0, 2.0]))
        tensor([[ 6.,  0.],
                [ 0., 12.]])
    """
    is_in_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    scalar = _single_output(func, "hessian")

    def jac_func(*inp):
        jac = jacobian(scalar, inp, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        return jac
    res = jacobian(jac_func, inputs, create_graph=create_graph, strict=strict, vectorize=vectorize)
    return _unpack(res, (is_in_tuple, is_in_tuple))


def _second_order(func, inputs, v, create_graph, strict, fn_name):
    with enable_grad():
        is_in_tuple, inputs = _as_tuple(inputs, "inputs", fn_name)
        inputs = _prepare(inputs, create_graph, True)
        if v is not None:
            _, v = _as_tuple(v, "v", fn_name)
            _validate_v(v, inputs, is_in_tuple)
        v = _single_element_v(v, inputs, "input to the user-provided function is")
        out = _single_output(func, fn_name)(*inputs)
        _check_requires_grad((out,), "outputs", strict)
        jac = _grads([out], inputs, None, True, strict, "output")
        _check_requires_grad(jac, "jacobian", strict)
        if fn_name == "vhp":        # v^T H: differentiate the gradient along v
            pairs = [(j, t) for j, t in zip(jac, v) if j is not None and j.requires_grad]
            res = _grad([j for j, _ in pairs], inputs, [t for _, t in pairs],
                        create_graph=create_graph, allow_unused=True) if pairs else \
                (None,) * len(inputs)
            res = _zeros_for_none(_finish(res, create_graph), inputs)
        else:                       # H v: the forward product of the gradient map
            res = _forward_product(_zeros_for_none(jac, inputs), inputs, v, create_graph, strict,
                                   "jacobian")
    return _finish((out,), create_graph)[0], _unpack(res, is_in_tuple)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T H)`` for scalar ``func``.

    Example:
        >>> import ember
        >>> from ember.autograd.functional import vhp
        >>> vhp(lambda x: (x ** 3).sum(), ember.tensor([1.0, 2.0]), ember.ones(2))[1]
        tensor([ 6., 12.])
    """
    return _second_order(func, inputs, v, create_graph, strict, "vhp")


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)`` for scalar ``func``.

    Example:
        >>> import ember
        >>> from ember.autograd.functional import hvp
        >>> hvp(lambda x: (x ** 3).sum(), ember.tensor([1.0, 2.0]), ember.ones(2))[1]
        tensor([ 6., 12.])
    """
    return _second_order(func, inputs, v, create_graph, strict, "hvp")
