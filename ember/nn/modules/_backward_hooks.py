"""Module full backward hooks: identity ops around a module's inputs and outputs whose
backward sees the gradients w.r.t. the outputs and then the inputs."""
from ..._ops.registry import op
from ..._tensor import Tensor


@op("_hook_identity", method=False, function=False)
def _hook_identity(xp, tensors, callback):
    return tuple(a.view() for a in tensors)


@_hook_identity.vjp()
def _(g, tensors, callback):
    return (list(callback(list(g))),)


# forward AD: an identity (the hooks see backward only)
_hook_identity.jvp = lambda opdef, args, kwargs, tangents, out: tuple(
    tangents.get(0) or [None] * len(out))


class BackwardHook:
    """Wires one forward call of ``module`` to backward hooks ``hook(module, grad_input,
    grad_output)`` and pre-hooks ``hook(module, grad_output)`` (``torch.utils.hooks``'s): wrap
    the call's inputs with ``setup_input_hook`` and its outputs with ``setup_output_hook``.
    Without ``user_hooks``/``user_pre_hooks``, the module's registered ones, read at backward.

    Example:
        >>> import ember
        >>> from ember.utils.hooks import BackwardHook
        >>> m, x = ember.nn.Linear(2, 1), ember.ones(1, 2, requires_grad=True)
        >>> bw = BackwardHook(m, [lambda mod, gi, go: print(gi[0].shape, go[0].shape)], [])
        >>> y = bw.setup_output_hook(m(*bw.setup_input_hook((x,))))
        >>> y.sum().backward()
        torch.Size([1, 2]) torch.Size([1, 1])
    """

    def __init__(self, module, user_hooks=None, user_pre_hooks=None):
        self.module, self.grad_output, self.n_inputs, self.inputs_wrapped = module, None, 0, False
        self.user_hooks, self.user_pre_hooks = user_hooks, user_pre_hooks

    def _wrap(self, values, callback):
        idx = self.idx = [i for i, v in enumerate(values)
                          if isinstance(v, Tensor) and v.requires_grad]
        if not idx:
            return values, False
        outs = _hook_identity([values[i] for i in idx], callback)
        values = list(values)
        for i, o in zip(idx, outs):
            values[i] = o
        return values, True

    def setup_input_hook(self, args):
        self.n_inputs = len(args)
        new, self.inputs_wrapped = self._wrap(args, self._on_grad_input)
        self.input_idx = self.idx
        return tuple(new)

    def setup_output_hook(self, result):
        single = isinstance(result, Tensor)
        new, _ = self._wrap([result] if single else list(result), self._on_grad_output)
        return new[0] if single else type(result)(new)

    def _on_grad_output(self, grads):
        m = self.module
        hooks = m._backward_pre_hooks.values() if self.user_pre_hooks is None else \
            self.user_pre_hooks
        for hook in hooks:
            r = hook(m, tuple(grads))
            if r is not None:
                grads = list(r)
        self.grad_output = tuple(grads)
        if not self.inputs_wrapped:
            self._run_hooks((None,) * self.n_inputs)
        return grads

    def _on_grad_input(self, grads):
        # as torch's: the hooks see one entry per input, None where it is no tensor needing grad
        full = [None] * self.n_inputs
        for i, g in zip(self.input_idx, grads):
            full[i] = g
        res = self._run_hooks(tuple(full))
        if len(res) != self.n_inputs:
            raise RuntimeError(f"Backward hook returned an invalid number of grad_input, got "
                               f"{len(res)}, but expected {self.n_inputs}")
        return [res[i] for i in self.input_idx]

    def _run_hooks(self, grad_input):
        m = self.module
        hooks = m._backward_hooks.values() if self.user_hooks is None else self.user_hooks
        for hook in hooks:
            r = hook(m, grad_input, self.grad_output)
            if r is not None:
                grad_input = tuple(r)
        return grad_input
