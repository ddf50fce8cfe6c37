"""Graph nodes. A ``Node`` is the backward of one op call: it keeps what the op's vjp reads
(each saved tensor with the version it had) and an edge ``(node, output_nr)`` per input."""
import itertools
import operator
import traceback
import weakref

from .._size import Size
from . import grad_mode
from .anomaly_mode import anomaly

_seq = itertools.count()

_FREED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you "
    "call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors after calling "
    "backward.")


class TensorMeta(tuple):
    """What backward knows of an input it did not save: shape, dtype, device.

    A tuple ``(shape, dtype, device)`` underneath, so the graph can make one without running
    Python code (``_TUPLE(TensorMeta, (shape, dtype, device))``); ``TensorMeta(t)`` also works.
    """

    __slots__ = ()
    _shape = property(operator.itemgetter(0))      # the plain tuple; ``shape`` is a Size
    dtype = property(operator.itemgetter(1))
    device = property(operator.itemgetter(2))

    def __new__(cls, t):
        return tuple.__new__(cls, (t._data.shape, t.dtype, t.device))

    @property
    def shape(self):
        return Size(self[0])

    def dim(self):
        return len(self[0])

    def size(self, d=None):
        return self.shape if d is None else self[0][d]

    @property
    def ndim(self):
        return len(self[0])

    def numel(self):
        n = 1
        for s in self[0]:
            n *= s
        return n

    def __repr__(self):
        return f"TensorMeta(shape={list(self[0])}, dtype={self[1]}, device={self[2]})"


_TUPLE = tuple.__new__


def edge_of(t):
    """The (node, output_nr) gradients of tensor ``t`` flow into, or (None, 0)."""
    if t.grad_fn is not None:
        return (t.grad_fn, t._output_nr)
    if t._requires_grad:
        return (t._grad_accumulator(), 0)
    return (None, 0)


class Node:
    """Base of backward functions: ``apply(grad_outputs) -> grad_inputs`` (one per edge)."""

    _released = False
    _has_saved = False
    _trace = None
    _pre_hooks = _hooks = ()        # made a list on the first registration

    def __init__(self, inputs):
        self.seq = next(_seq)
        # plain loops: a comprehension costs a function object per call (Python 3.11)
        edges, metas = [], []
        for t in inputs:
            edges.append((t.grad_fn, t._output_nr) if t.grad_fn is not None else edge_of(t))
            metas.append(_TUPLE(TensorMeta, (t._data.shape, t.dtype, t.device)))
        self.next_functions, self.input_meta = tuple(edges), metas
        self._tensor_pre_hooks, self._retain_grad_hooks = {}, {}
        if anomaly.enabled:
            self._trace = traceback.format_stack()[:-3]

    @property
    def metadata(self):
        d = self.__dict__.get("_metadata")
        if d is None:
            d = self._metadata = {}
        return d

    def name(self):
        return type(self).__name__

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` runs after this node; may return new grad_inputs."""
        if type(self._hooks) is tuple:
            self._hooks = []
        self._hooks.append(fn)
        return _Handle(self._hooks, fn)

    def register_prehook(self, fn):
        """``fn(grad_outputs)`` runs before this node; may return new grad_outputs."""
        if type(self._pre_hooks) is tuple:
            self._pre_hooks = []
        self._pre_hooks.append(fn)
        return _Handle(self._pre_hooks, fn)

    def _register_tensor_hook(self, output_nr, fn):
        hooks = self._tensor_pre_hooks.setdefault(output_nr, [])
        hooks.append(fn)
        return _Handle(hooks, fn)

    def release(self):
        pass

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"


class _Handle:
    """Removable handle returned by the register_*hook methods."""

    def __init__(self, container, item):
        self._ref, self.item = weakref.ref(container) if isinstance(container, list) else \
            (lambda: container), item

    def remove(self):
        c = self._ref()
        if c is not None and self.item in c:
            c.remove(self.item)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class OpNode(Node):
    """The backward of one OpDef call."""

    def __init__(self, opdef, args, kwargs, inputs, outputs):
        Node.__init__(self, inputs)
        self.opdef, self.kwargs, self.n_outputs = opdef, kwargs, len(outputs)
        save, metas, n_in = opdef.save, self.input_meta, len(inputs)
        saved, versions, positions, k = list(args), [], [], 0
        # ``inputs`` are the tensors among ``args`` in order (lists of tensors spread out), so
        # an identity test against the next one finds them without type checks.
        for i, a in enumerate(args):
            if k == n_in:
                break
            if a is inputs[k]:
                n, ts = None, (a,)
            elif type(a) in (list, tuple) and a and a[0] is inputs[k]:
                n, ts = len(a), a
            else:
                continue
            positions.append((i, n))
            if i in save:
                for t in ts:
                    versions.append((t, t._version))
            else:           # backward sees only the metadata of what it did not save
                saved[i] = metas[k] if n is None else metas[k:k + n]
            k += len(ts)
        self.args, self.versions, self.tensor_positions = saved, versions, positions
        self._has_saved = bool(versions) or opdef.save_result
        self.out_meta = metas = []
        for o in outputs:
            metas.append(_TUPLE(TensorMeta, (o._data.shape, o.dtype, o.device)))
        if opdef.save_result:
            self.results = [(o._alias(), o._version) for o in outputs]

    def name(self):
        return self.opdef.grad_name

    def release(self):
        self.args = self.versions = self.results = None
        self._released = True

    def _check_version(self, t, v, what):
        if t._version != v:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{t.type()} {list(t.shape)}]{what}, is at version "
                f"{t._version}; expected version {v} instead. Hint: the backward of "
                f"{self.name()} needs it unchanged; clone it before modifying it in place.")

    def apply(self, grads):
        if self._released:
            raise RuntimeError(_FREED_MSG)
        for t, v in self.versions:
            if t._version != v:
                self._check_version(t, v, "")
        kwargs = self.kwargs
        if self.opdef.save_result:
            res, graph = [], grad_mode.state.grad_enabled
            for i, (r, v) in enumerate(self.results):
                if r._version != v:
                    self._check_version(r, v, f", which is output {i} of {self.name()}")
                # only a differentiable backward (create_graph) needs the output in the graph
                res.append(r._as_output_of(self, i) if graph else r)
            kwargs = dict(kwargs, result=res[0] if self.n_outputs == 1 else tuple(res))
        g = grads[0] if self.n_outputs == 1 else grads
        out = self.opdef.vjp_fn(g, *self.args, **kwargs)
        if not isinstance(out, tuple):
            out = (out,)
        flat = []         # one gradient per tensor input, in the order of the edges
        for i, n in self.tensor_positions:
            o = out[i] if i < len(out) else None
            if n is None:
                flat.append(o)
            else:
                flat.extend(o if o is not None else [None] * n)
        return flat


class NotImplementedNode(Node):
    """Stands for an op whose derivative is not written; fails only if backward reaches it."""

    def __init__(self, opdef, inputs, outputs):
        super().__init__(inputs)
        self.opdef, self.n_outputs = opdef, len(outputs)

    def name(self):
        return self.opdef.grad_name

    def apply(self, grads):
        raise NotImplementedError(f"the derivative for '{self.opdef.name}' is not implemented.")


class AccumulateGrad(Node):
    """Sink of a leaf: adds the incoming gradient into ``variable.grad``."""

    seq = float("inf")                   # NOTE: like torch, accumulate as soon as ready
    next_functions, input_meta, n_outputs = (), (), 1

    def __init__(self, variable):
        # a sink has no edges or metadata: skip Node.__init__, it is made once per leaf use
        self.variable = variable
        self._tensor_pre_hooks, self._retain_grad_hooks = {}, {}

    def accumulate(self, g, create_graph):
        v = self.variable
        if v.grad is None:
            # without create_graph the engine runs in no_grad, so the clone has no history.
            # NOTE: the same gradient object can reach several leaves (add's backward passes
            # g twice), so .grad gets its own buffer: accumulating in place must not alias.
            v.grad = g if create_graph and g.grad_fn is not None else g.clone()
        elif create_graph or v.grad.requires_grad:
            v.grad = v.grad + g
        else:
            v.grad._inplace_add(g.detach())
        for h in v._post_acc_hooks or ():
            h(v)


class CopySlices(Node):
    """Backward of an in-place op on a view: the base's gradient splits into the part outside
    the view (to the base's old history) and the part inside (to the in-place op)."""

    def __init__(self, base, view_fn, op_node_edge, op_meta):
        super().__init__((base,))
        self.next_functions = self.next_functions + (op_node_edge,)
        self.input_meta.append(op_meta)
        self.view_fn, self.n_outputs = view_fn, 1

    def apply(self, grads):
        g = grads[0]
        inside = self.view_fn(g).clone()
        outside = g.clone()
        self.view_fn(outside).zero_()
        return [outside, inside]
