"""Graph nodes (``torch.autograd.graph``). A ``Node`` is the backward of one op call: it keeps
what the op's vjp reads (each saved tensor with the version it had, or as packed by
``saved_tensors_hooks``) and an edge ``(node, output_nr)`` per input."""
import itertools
import re
import traceback

from .anomaly_mode import anomaly

_seq = itertools.count()

_FREED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you "
    "call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors after calling "
    "backward.")


_BACKWARD_SUFFIX = r"Backward\d*$"


def check_saved_version(t, version, node, output_nr=None):
    """Raise torch's error if saved tensor ``t`` was modified in place after it was saved for
    ``node``'s backward; ``output_nr`` is set when ``t`` is an output of ``node``."""
    if t._version == version:
        return
    # NOTE: like torch, name the node that made the tensor (for an input, its current one),
    # without the "Backward0" suffix.
    fn, nr = (node, output_nr) if output_nr is not None else (t.grad_fn, t._output_nr)
    where = "" if fn is None else \
        f", which is output {nr} of {re.sub(_BACKWARD_SUFFIX, '', fn.name())}"
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{t.type()} {list(t.shape)}]{where}, is at version {t._version}; expected "
        f"version {version} instead. Hint: the backward of {node.name()} needs it unchanged; "
        "clone it before modifying it in place.")


class TensorMeta:
    """What backward knows of an input it did not save: shape, dtype, device."""

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, t):
        self.shape, self.dtype, self.device = t.shape, t.dtype, t.device

    def dim(self):
        return len(self.shape)

    def size(self, d=None):
        return self.shape if d is None else self.shape[d]

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n


def edge_of(t):
    """The (node, output_nr) gradients of tensor ``t`` flow into, or (None, 0)."""
    if t._base is not None and getattr(t, "_view_version", None) not in (None, t._version) \
            and t._base._requires_grad:
        _refresh_view(t)
    if t.grad_fn is not None:
        return (t.grad_fn, t._output_nr)
    if t._requires_grad:
        return (t._grad_accumulator(), 0)
    return (None, 0)


def move_retain_grad(t, node, output_nr):
    """``t`` is about to get the history ``(node, output_nr)`` (an in-place write): its
    ``retain_grad`` hook moves along. NOTE: as in torch, ``.grad`` then holds the gradient of
    the newest value; hooks from ``register_hook`` stay with the old one."""
    if t._retains_grad and t.grad_fn is not None:
        hook = t.grad_fn._retain_grad_hooks.pop(t._output_nr, None)
        if hook is not None:
            node._retain_grad_hooks[output_nr] = hook


def _refresh_view(t):
    """Give view ``t`` a history through its base's current one: an in-place write through
    the base or another view (which bumped the shared version) left ``t.grad_fn`` stale.

    NOTE: torch regenerates a view's grad_fn the same way on access; without this, the
    gradient of ``v = a[:2]; a.mul_(2); v.sum()`` would skip the ``mul_``.
    """
    from .grad_mode import enable_grad
    if getattr(t, "_fn_view", None):
        raise RuntimeError(
            f"{t._fn_view} is a view and its base or another view of its base has been modified "
            "inplace. This view was created inside a custom Function (or because an input was "
            "returned as-is) and the autograd logic to handle view+inplace would override the "
            "custom backward associated with the custom Function, leading to incorrect "
            "gradients. This behavior is forbidden. You can fix this by cloning the output of "
            "the custom Function.")
    with enable_grad():
        r = t._view_fn(t._base)
    t.grad_fn, t._output_nr, t._requires_grad = r.grad_fn, r._output_nr, r._requires_grad
    t._view_version = t._version


class Node:
    """Base of backward functions: ``apply(grad_outputs) -> grad_inputs`` (one per edge)."""

    _released = False
    _has_saved = False
    _trace = None

    def __init__(self, inputs):
        self.next_functions = tuple(edge_of(t) for t in inputs)   # may record view refreshes
        self.seq = next(_seq)
        self.input_meta = [TensorMeta(t) for t in inputs]
        self._pre_hooks, self._hooks, self._tensor_pre_hooks = [], [], {}
        self._retain_grad_hooks = {}
        self.metadata = {}
        if anomaly.enabled:
            self._trace = traceback.format_stack()[:-3]

    def name(self):
        return type(self).__name__

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` runs after this node; may return new grad_inputs."""
        self._hooks.append(fn)
        return _Handle(self._hooks, fn)

    def register_prehook(self, fn):
        """``fn(grad_outputs)`` runs before this node; may return new grad_outputs."""
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
        self._container, self.item = container, item

    def remove(self):
        c = self._container
        if any(h is self.item for h in c):
            del c[next(i for i, h in enumerate(c) if h is self.item)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


# ---- saved tensor hooks -----------------------------------------------------------------------

_saved_hooks = []     # stack of (pack_hook, unpack_hook), or a str: hooks disabled, the reason


class saved_tensors_hooks:
    """Within the block, each tensor saved for backward is stored as ``pack_hook(tensor)`` and
    given back to backward as ``unpack_hook(packed)`` (e.g. to offload or recompute it). Saved
    through hooks, a tensor is not checked for later in-place changes, as in torch.

    Example:
        >>> import ember
        >>> x = ember.tensor([1.0, 2.0], requires_grad=True)
        >>> with ember.autograd.graph.saved_tensors_hooks(lambda t: t.tolist(),
        ...                                               lambda v: ember.tensor(v)):
        ...     y = (x * x).sum()
        >>> y.backward()
        >>> x.grad
        tensor([2., 4.])
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        if _saved_hooks and isinstance(_saved_hooks[-1], str):
            raise RuntimeError(_saved_hooks[-1])
        _saved_hooks.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _saved_hooks.pop()


class save_on_cpu(saved_tensors_hooks):
    """Keep tensors saved for backward in cpu memory, moving them back when backward runs."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        super().__init__(lambda t: (t.device, t.to("cpu")), lambda p: p[1].to(p[0]))


class disable_saved_tensors_hooks:
    """Within the block, entering ``saved_tensors_hooks`` raises ``RuntimeError(error_message)``.
    """

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        _saved_hooks.append(self.error_message)

    def __exit__(self, *exc):
        _saved_hooks.pop()


class _Packed:
    """A saved tensor as its pack hook left it."""

    __slots__ = ("value", "unpack_hook")

    def __init__(self, t, hooks):
        self.value, self.unpack_hook = hooks[0](t), hooks[1]

    def unpack(self):
        return self.unpack_hook(self.value)


def _active_hooks():
    return _saved_hooks[-1] if _saved_hooks and not isinstance(_saved_hooks[-1], str) else None


def _pack(a, hooks):
    if hasattr(a, "_data"):
        return _Packed(a, hooks)
    if isinstance(a, (list, tuple)):
        return [_Packed(t, hooks) if hasattr(t, "_data") else t for t in a]
    return a


def _unpack(a):
    if isinstance(a, _Packed):
        return a.unpack()
    if isinstance(a, list) and any(isinstance(t, _Packed) for t in a):
        return [t.unpack() if isinstance(t, _Packed) else t for t in a]
    return a


def _saved_is_read(opdef, i, args):
    """Whether saved argument ``i`` feeds a gradient that will be computed (see
    ``OpDef.vjp(needed_by=)``); if not, it is kept without a version check."""
    users = opdef.needed_by.get(i)
    return users is None or any(getattr(args[j], "_requires_grad", False) for j in users
                                if j < len(args))


class OpNode(Node):
    """The backward of one OpDef call."""

    multi = False      # the op returned a tuple: its vjp gets a list of output gradients
    _packed = False

    def __init__(self, opdef, args, kwargs, inputs, outputs):
        super().__init__(inputs)
        self.opdef, self.kwargs, self.n_outputs = opdef, kwargs, len(outputs)
        saved, versions, self.tensor_positions = list(args), [], []
        hooks = _active_hooks() if _saved_hooks else None
        for i, a in enumerate(args):
            if hasattr(a, "_data"):
                self.tensor_positions.append((i, None))
            elif isinstance(a, (list, tuple)) and a and hasattr(a[0], "_data"):
                self.tensor_positions.append((i, len(a)))
            if i in opdef.save and hooks is not None:
                saved[i] = _pack(a, hooks)
                self._packed = True
            elif i in opdef.save:
                if not _saved_is_read(opdef, i, args):
                    continue        # kept for the vjp to run, but its gradient is dropped
                for t in (a if isinstance(a, (list, tuple)) else (a,)):
                    if hasattr(t, "_version"):
                        versions.append((t, t._version))
            elif hasattr(a, "_data"):
                saved[i] = TensorMeta(a)
            elif isinstance(a, (list, tuple)) and a and hasattr(a[0], "_data"):
                saved[i] = [TensorMeta(t) if hasattr(t, "_data") else t for t in a]
        self.args, self.versions = saved, versions
        # NOTE: as in torch, only a node that saved something refuses a second backward (a
        # Python scalar counts: torch saves it as a wrapped tensor)
        self._has_saved = opdef.save_result or self._packed or any(
            i < len(args) and _saved_is_read(opdef, i, args) for i in opdef.save)
        self.out_meta = [TensorMeta(o) for o in outputs]
        if opdef.save_result:
            self.results = [(_Packed(o, hooks), None) if hooks is not None else
                            (o._alias(), o._version) for o in outputs]

    def name(self):
        return self.opdef.grad_name

    def release(self):
        if self._has_saved:
            self.args = self.versions = self.results = None
            self._released = True

    def apply(self, grads):
        if self._released:
            raise RuntimeError(_FREED_MSG)
        for t, v in self.versions:
            check_saved_version(t, v, self)
        kwargs = self.kwargs
        if self.opdef.save_result:
            res = []
            for i, (r, v) in enumerate(self.results):
                if v is None:
                    r = r.unpack()
                else:
                    check_saved_version(r, v, self, i)
                res.append(r._as_output_of(self, i))
            kwargs = dict(kwargs, result=res[0] if self.n_outputs == 1 else tuple(res))
        g = grads if self.multi else grads[0]
        args = [_unpack(a) for a in self.args] if self._packed else self.args
        out = self.opdef.vjp_fn(g, *args, **kwargs)
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

    def __init__(self, variable):
        super().__init__(())
        self.seq = float("inf")          # NOTE: like torch, accumulate as soon as ready
        self.variable = variable
        self.n_outputs = 1
        # NOTE: the tensor holds its accumulator weakly (as torch does), so hooks registered on
        # a leaf live on the tensor and outlast any one accumulator.
        self._tensor_pre_hooks = variable.__dict__.setdefault("_leaf_hooks", {})

    def name(self):
        return "torch::autograd::AccumulateGrad"

    def accumulate(self, g, create_graph):
        v = self.variable
        if v.grad is None:
            if not create_graph:
                g = g.detach()
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

    def name(self):
        return "torch::autograd::CopySlices"

    def apply(self, grads):
        g = grads[0]
        inside = self.view_fn(g).clone()
        outside = g.clone()
        self.view_fn(outside).zero_()
        return [outside, inside]
