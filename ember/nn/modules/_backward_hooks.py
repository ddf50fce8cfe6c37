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
    """Wires one forward call of ``module`` to its backward pre-hooks and hooks."""

    def __init__(self, module):
        self.module, self.grad_output, self.n_inputs, self.inputs_wrapped = module, None, 0, False

    def _wrap(self, values, callback):
        idx = [i for i, v in enumerate(values) if isinstance(v, Tensor) and v.requires_grad]
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
        return tuple(new)

    def setup_output_hook(self, result):
        single = isinstance(result, Tensor)
        new, _ = self._wrap([result] if single else list(result), self._on_grad_output)
        return new[0] if single else type(result)(new)

    def _on_grad_output(self, grads):
        m = self.module
        for hook in m._backward_pre_hooks.values():
            r = hook(m, tuple(grads))
            if r is not None:
                grads = list(r)
        self.grad_output = tuple(grads)
        if not self.inputs_wrapped:
            self._run_hooks((None,) * self.n_inputs)
        return grads

    def _on_grad_input(self, grads):
        return list(self._run_hooks(tuple(grads)))

    def _run_hooks(self, grad_input):
        m = self.module
        for hook in m._backward_hooks.values():
            r = hook(m, grad_input, self.grad_output)
            if r is not None:
                grad_input = tuple(r)
        return grad_input
