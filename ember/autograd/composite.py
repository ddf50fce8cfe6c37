"""One node for a composite: an nn function that ember writes in several ops where torch runs
one aten op (``avg_pool2d``, ``interpolate``, ``glu``, ...) records a single node of torch's
name (``AvgPool2DBackward0``), so printed ``grad_fn``s and ``next_functions`` are torch's.

The composite runs on detached copies of its inputs and its graph is kept inside the node;
backward runs that inner graph down to the copies (a reentrant backward). A differentiable
backward (``create_graph``) recomputes the composite on the real inputs instead, so higher
derivatives reach them.
"""
import functools
import inspect

from . import grad_mode
from .engine import run_backward
from .graph import (_FREED_MSG, Node, OpNode, TensorMeta, _new, _seq, check_saved_version,
                    edge_of, node_class)

_hooks = None


def one_node(name, fn, *args):
    """``fn(*args)``, its tensor outputs recorded as outputs of one node named ``name``.

    Runs ``fn`` as is (its own graph) where no input requires grad, and under vmap, forward
    AD or a tracer (those see the ops inside).

    >>> import ember
    >>> from ember.autograd.composite import one_node
    >>> x = ember.ones(3, requires_grad=True)
    >>> y = one_node("GluBackward0", lambda t: (t * 2).sum(), x)
    >>> y.grad_fn.name(), [type(f).__name__ for f, _ in y.grad_fn.next_functions]
    ('GluBackward0', ['AccumulateGrad'])
    """
    global _hooks
    if _hooks is None:
        from .._ops.dispatch import hooks as _hooks
    tensors = [a for a in args if hasattr(a, "_data")]
    if not grad_mode.state.grad_enabled or _hooks.tracer is not None or \
            _hooks.transform is not None or _hooks.override is not None or \
            not any(t._requires_grad for t in tensors):
        return fn(*args)
    # a leaf per argument (a tensor passed twice has two edges, as in torch)
    leaves = [_Capture.input(t) if t._requires_grad else t for t in tensors]
    it = iter(leaves)
    inner = fn(*(next(it) if hasattr(a, "_data") else a for a in args))
    outs = inner if isinstance(inner, tuple) else (inner,)
    node = CompositeNode(name, fn, args, tensors, leaves, outs)
    wrapped = tuple(o._as_output_of(node, i) if o._requires_grad else o for i, o in enumerate(outs))
    for o in wrapped:
        o._base = o._view_fn = None     # torch's op makes a new tensor, never a view
    return wrapped if isinstance(inner, tuple) else wrapped[0]


class CompositeNode(Node):
    """The node of a ``one_node`` call: edges to the composite's inputs, its inner graph
    (``outs`` made from ``leaves``) differentiated in ``apply``."""

    _has_saved = True

    def __new__(cls, name, *args):
        return _new(node_class(CompositeNode, name))

    def __init__(self, name, fn, args, tensors, leaves, outs):
        Node.__init__(self, tensors)
        self.fn, self.args, self.tensors, self.leaves, self.outs = fn, args, tensors, leaves, outs
        self.versions = [t._version for t in tensors]
        self.n_outputs = len(outs)

    name = OpNode.name

    out_meta = property(lambda self: [TensorMeta(o) for o in self.outs])

    def release(self):
        self.fn = self.args = self.tensors = self.leaves = self.outs = None
        self._released = True

    def apply(self, grads):
        if self._released:
            raise RuntimeError(_FREED_MSG)
        if grad_mode.state.grad_enabled:        # create_graph: through the real inputs
            # (the inner graph checks the inputs it saved, which share the version counters)
            for t, v in zip(self.tensors, self.versions):
                check_saved_version(t, v, self)
            from . import grad as autograd_grad
            outs = self.fn(*self.args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o._requires_grad]
            need = [i for i, t in enumerate(self.tensors) if t._requires_grad]
            res = [None] * len(self.tensors)
            if pairs and need:
                got = autograd_grad([o for o, _ in pairs], [self.tensors[i] for i in need],
                                    [g for _, g in pairs], retain_graph=True, create_graph=True,
                                    allow_unused=True)
                for i, g in zip(need, got):
                    res[i] = g
            return res
        # a plain backward runs the inner graph down to the inputs' _Capture nodes (the
        # engine's C loop), which keep what reaches them
        roots, seeds = [], []
        for o, g in zip(self.outs, grads):
            if g is not None and o._requires_grad:
                roots.append(edge_of(o))
                seeds.append(g)
        if roots:
            run_backward(roots, seeds, retain_graph=True)
        return [leaf.grad_fn.take() if leaf is not t else None
                for leaf, t in zip(self.leaves, self.tensors)]


class _Capture(Node):
    """The history of an input inside a composite: keeps the gradient that reaches it."""

    grad = None

    @classmethod
    def input(cls, t):
        node = _new(cls)
        node.next_functions, node.input_meta, node.seq = (), [], next(_seq)
        x = t.detach()
        x.grad_fn, x._output_nr, x._requires_grad = node, 0, True
        return x

    def apply(self, grads):
        self.grad = grads[0]
        return ()

    def take(self):
        g, self.grad = self.grad, None
        return g


def recorded_as(name):
    """Decorator: the function's calls record one node named ``name`` (or ``name(*args)``,
    its arguments in order) over every tensor argument, however it is passed.

    >>> import ember
    >>> from ember.autograd.composite import recorded_as
    >>> @recorded_as("SoftMarginLossBackward0")
    ... def loss(input, target, *, scale=1.0):
    ...     return (input * target * scale).sum()
    >>> loss(ember.ones(2, requires_grad=True), ember.ones(2), scale=2.0)
    tensor(4., grad_fn=<SoftMarginLossBackward0>)
    """
    def wrap(fn):
        sig = inspect.signature(fn)
        names = list(sig.parameters)

        def call(*values):
            return fn(**dict(zip(names, values)))

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            if not grad_mode.state.grad_enabled:      # (no node to record: skip the binding)
                return fn(*args, **kwargs)
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            values = [bound.arguments[n] for n in names]
            return one_node(name(*values) if callable(name) else name, call, *values)
        return recorded
    return wrap
