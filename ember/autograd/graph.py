"""Graph nodes (``torch.autograd.graph``). A ``Node`` is the backward of one op call: it keeps
what the op's vjp reads (each saved tensor with the version it had, or as packed by
``saved_tensors_hooks``) and an edge ``(node, output_nr)`` per input."""
import itertools
import operator
import re
import sys
import types
import weakref

import numpy as np

from .._memory_format import contiguous_format, dense
from .._size import Size
from .._sparse import strided
from . import grad_mode
from .anomaly_mode import anomaly
# saved tensor hooks (``graph.saved_tensors_hooks`` and friends): their own module
from .saved_hooks import (_Packed, _active_hooks, _pack, _saved_hooks, _unpack,  # noqa: F401
                          disable_saved_tensors_hooks, save_on_cpu, saved_tensors_hooks)

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
        hook = t.grad_fn._retain_grad_hooks.get(t._output_nr)
        if hook is not None:
            del t.grad_fn._retain_grad_hooks[t._output_nr]
            node._retain_hooks()[output_nr] = hook


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


_NO_HOOKS = types.MappingProxyType({})


class Node:
    """Base of backward functions: ``apply(grad_outputs) -> grad_inputs`` (one per edge)."""

    _released = False
    _has_saved = False
    _trace = None
    n_outputs = 1
    _pre_hooks = _hooks = ()        # made a list on the first registration
    # {output_nr: [hook]} and {output_nr: hook}: read-only and shared until a first
    # registration, so recording a node allocates no dicts
    _tensor_pre_hooks = _retain_grad_hooks = _NO_HOOKS

    def __init__(self, inputs):
        # plain loops: a comprehension costs a function object per call (Python 3.11)
        edges, metas = [], []
        for t in inputs:
            # a view may need its history refreshed (edge_of); anything else with a grad_fn
            # takes the shortcut
            edges.append((t.grad_fn, t._output_nr) if t.grad_fn is not None and t._base is None
                         else edge_of(t))
            metas.append(_TUPLE(TensorMeta, (t._data.shape, t.dtype, t.device)))
        self.next_functions, self.input_meta = tuple(edges), metas
        self.seq = next(_seq)       # after the edges: a view refresh above records nodes
        if anomaly.enabled:
            import traceback        # anomaly mode only: kept off ``import ember``
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
        if self._tensor_pre_hooks is _NO_HOOKS:
            self._tensor_pre_hooks = {}
        hooks = self._tensor_pre_hooks.setdefault(output_nr, [])
        hooks.append(fn)
        return _Handle(hooks, fn)

    def _retain_hooks(self):
        """The writable ``{output_nr: hook}`` of ``retain_grad`` (made on first use)."""
        if self._retain_grad_hooks is _NO_HOOKS:
            self._retain_grad_hooks = {}
        return self._retain_grad_hooks

    def release(self):
        """Nothing to free: a node of this kind saves nothing."""

    def __repr__(self):
        return f"<{type(self).__name__} object at {hex(id(self))}>"


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


def _saved_is_read(opdef, i, args):
    """Whether saved argument ``i`` feeds a gradient that will be computed (see
    ``OpDef.vjp(needed_by=)``); if not, it is kept without a version check."""
    users = opdef.needed_by.get(i)
    if users is None:
        return True
    for j in users:         # a loop, not any(): this runs for every recorded mul
        if j < len(args) and getattr(args[j], "_requires_grad", False):
            return True
    return False


_running = None     # the OpNode whose vjp runs, for ``needs_input_grad``


def needs_input_grad(i):
    """Whether argument ``i`` of the op whose vjp is running has an edge, i.e. whether its
    gradient can be used; a vjp may skip the work for one that has none (torch's
    ``ctx.needs_input_grad``). Judged by the graph, not by the saved tensor, which a
    ``saved_tensors_hooks`` pair may have replaced. True outside a node's backward."""
    node = _running
    if node is None:
        return True
    k, edges = 0, node.next_functions
    for j, n in node.tensor_positions:
        if j == i:
            return any(e[0] is not None for e in edges[k:k + (n or 1)])
        k += n or 1
    return False


class OpNode(Node):
    """The backward of one OpDef call. Each node is of a subclass named as torch names the
    node (``node_class``): ``OpNode(opdef, ...)`` makes one of the class the call's name gives."""

    multi = False      # the op returned a tuple: its vjp gets a list of output gradients
    _packed, results = False, None      # (results: the saved outputs, if any)

    def __new__(cls, opdef, args, kwargs, inputs, outputs):
        rule = opdef.grad_name_of
        return _new(node_class(OpNode, opdef.grad_name if rule is None else rule(*args, **kwargs)))

    def __init__(self, opdef, args, kwargs, inputs, outputs):
        Node.__init__(self, inputs)
        self.opdef, self.kwargs, self.n_outputs = opdef, kwargs, len(outputs)
        hooks = _active_hooks() if _saved_hooks else None
        if hooks is not None:
            self._save_packed(opdef, args, hooks)
        else:
            save, needed_by, metas, n_in = opdef.save, opdef.needed_by, self.input_meta, len(inputs)
            saved, versions, positions, k = list(args), [], [], 0
            # ``inputs`` are the tensors among ``args`` in order (lists of tensors spread out),
            # so an identity test against the next one finds them without type checks.
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
                    # (an argument no computed gradient reads is kept, but not version-checked)
                    if not needed_by or _saved_is_read(opdef, i, args):
                        for t in ts:
                            versions.append((t, t._version))
                else:       # backward sees only the metadata of what it did not save
                    saved[i] = metas[k] if n is None else metas[k:k + n]
                k += len(ts)
            self.args, self.versions, self.tensor_positions = saved, versions, positions
            # NOTE: as in torch, only a node that saved something refuses a second backward (a
            # Python scalar counts: torch saves it as a wrapped tensor)
            has = (sr := opdef.save_result and _saved_is_read(opdef, -1, args)) or bool(versions)
            if not has and save:
                n_args = len(args)
                for i in save:
                    if i < n_args and (not needed_by or _saved_is_read(opdef, i, args)):
                        has = True
                        break
            self._has_saved = has
        self._outs = [(o._data.shape, o.dtype, o.device) for o in outputs]
        if opdef.save_result and (hooks is not None or sr):
            self.results = [(_Packed(o, hooks), None) if hooks is not None else
                            (o._alias(), o._version) for o in outputs]

    def _save_packed(self, opdef, args, hooks):
        """``_save`` inside ``saved_tensors_hooks``: saved arguments are kept as packed."""
        saved, self.tensor_positions = list(args), []
        for i, a in enumerate(args):
            if hasattr(a, "_data"):
                self.tensor_positions.append((i, None))
            elif isinstance(a, (list, tuple)) and a and hasattr(a[0], "_data"):
                self.tensor_positions.append((i, len(a)))
            if i in opdef.save:
                saved[i] = _pack(a, hooks)
                self._packed = True
            elif hasattr(a, "_data"):
                saved[i] = TensorMeta(a)
            elif isinstance(a, (list, tuple)) and a and hasattr(a[0], "_data"):
                saved[i] = [TensorMeta(t) if hasattr(t, "_data") else t for t in a]
        self.args, self.versions = saved, []
        self._has_saved = opdef.save_result or self._packed or any(
            i < len(args) and _saved_is_read(opdef, i, args) for i in opdef.save)

    @property
    def out_meta(self):
        # made when the engine needs it (a missing output gradient to fill with zeros): the
        # node keeps plain tuples, cheaper to record. A nondifferentiable output (max's
        # indices) stays None: no vjp reads its gradient, and its zeros cost a call each
        nd = self.opdef.nondiff_outputs
        return [None if i in nd else _TUPLE(TensorMeta, m) for i, m in enumerate(self._outs)]

    def name(self):
        n = type(self).__name__
        return _LONG_NAMES.get(n, n)

    def release(self):
        if self._has_saved:
            self.args = self.versions = self.results = None
            self._released = True

    def apply(self, grads):
        if self._released:
            raise RuntimeError(_FREED_MSG)
        for t, v in self.versions:
            if t._version != v:
                check_saved_version(t, v, self)
        kwargs = self.kwargs
        if self.results is not None:
            res, graph = [], grad_mode.state.grad_enabled
            for i, (r, v) in enumerate(self.results):
                if v is None:
                    r = r.unpack()
                elif r._version != v:
                    check_saved_version(r, v, self, i)
                # only a differentiable backward (create_graph) needs the output in the graph
                res.append(r._as_output_of(self, i) if graph else r)
            kwargs = dict(kwargs, result=res[0] if self.n_outputs == 1 else tuple(res))
        g = grads if self.multi else grads[0]
        args = [_unpack(a) for a in self.args] if self._packed else self.args
        global _running
        prev, _running = _running, self
        try:
            out = self.opdef.vjp_fn(g, *args, **kwargs)
        finally:
            _running = prev
        if not isinstance(out, tuple):
            out = (out,)
        pos = self.tensor_positions
        if pos is AT01 and len(out) >= 2:      # dispatch's fast path: the edges' gradients as
            return out                          # they are (the engine zips to the edges)
        if pos is AT0:
            return out
        flat = []         # one gradient per tensor input, in the order of the edges
        for i, n in self.tensor_positions:
            o = out[i] if i < len(out) else None
            if n is None:
                flat.append(o)
            else:
                flat.extend(o if o is not None else [None] * n)
        return flat


class SimpleNode(OpNode):
    """An ``OpNode`` made by ``simple_node`` (dispatch's fast path): the fields every node
    has live in fixed slots, not in an instance dict, so recording and freeing one is cheaper
    (``_C.dispatch._dispatch`` fills them by offset). Anything else set on it (hooks, metadata) still
    goes to its ``__dict__``."""

    __slots__ = ("next_functions", "input_meta", "seq", "opdef", "kwargs", "tensor_positions",
                 "args", "versions", "_has_saved", "_outs", "results", "_released")


_new = object.__new__
_CLASSES = {}
_LONG_NAMES = {}      # a node type's name() where it is not its class name (torch's copies)


def node_class(base, name):
    """The subclass of ``base`` (OpNode or SimpleNode) torch calls ``name``: one per name, so
    ``type(y.grad_fn).__name__`` is torch's (``AddmmBackward0``); it adds nothing to ``base``
    (the C engine reads a SimpleNode's fields by offset and its class defaults on SimpleNode).

    >>> from ember.autograd.graph import node_class, SimpleNode
    >>> node_class(SimpleNode, "MulBackward0")
    <class 'MulBackward0'>
    """
    cls = _CLASSES.get((base, name))
    if cls is None:
        short = name.rpartition("::")[2]
        if short != name:
            _LONG_NAMES[short] = name
        # NOTE: torch's node types are built-in classes: ``<class 'MulBackward0'>``
        cls = _CLASSES[base, name] = type(short, (base,), {"__slots__": (), "__module__": "builtins"})
    return cls


def rename_node(node, name):
    """Make ``node`` (an OpNode, or None) one of the class torch calls ``name`` (None: leave
    it): for a call whose aten op differs from the OpDef's only in name, as an in-place
    form (``leaky_relu_`` is ``LeakyReluBackward1``)."""
    if node is not None and name is not None:
        node.__class__ = node_class(type(node).__bases__[0], name)


def simple_type(opdef):
    """``opdef.simple_type``: the SimpleNode class of ``opdef``'s calls, or where its name
    depends on the call (``opdef.grad_name_of``), a function of the positional arguments giving
    it (dispatch's quick paths pass no keywords)."""
    rule = opdef.grad_name_of
    if rule is None:
        return node_class(SimpleNode, opdef.grad_name)
    classes = {}

    def of(*args):
        name = rule(*args)
        cls = classes.get(name)
        if cls is None:
            cls = classes[name] = node_class(SimpleNode, name)
        return cls
    return of
_NO_KWARGS = {}
_NO_EDGE = (None, 0)
# the ``tensor_positions`` of dispatch's fast path: one tensor first, one second, or both
AT0, AT1, AT01 = ((0, None),), ((1, None),), ((0, None), (1, None))


def simple_node(opdef, args, tensors, positions, out):
    """``OpNode(opdef, args, {}, tensors, (out,))`` for dispatch's fast path: no keywords, one
    output, each tensor an argument of its own (``positions`` as in ``tensor_positions``).
    The same fields, set without the general path's searches and with no per-call dicts."""
    if _saved_hooks or anomaly.enabled:
        return OpNode(opdef, args, _NO_KWARGS, tensors, (out,))
    cls = opdef.simple_type
    node = _new(cls if type(cls) is type else cls(*args))
    edges, metas = [], []
    for t in tensors:
        fn = t.grad_fn
        if t._base is not None:
            edges.append(edge_of(t))
        elif fn is not None:
            edges.append((fn, t._output_nr))
        elif t._requires_grad:      # a leaf: its accumulator (made on the first use)
            acc = t._grad_acc
            edges.append((acc if acc is not None else t._grad_accumulator(), 0))
        else:
            edges.append(_NO_EDGE)
        metas.append(_TUPLE(TensorMeta, (t._data.shape, t.dtype, t.device)))
    node.next_functions, node.input_meta = tuple(edges), metas
    node.seq = next(_seq)
    node.opdef, node.kwargs, node.tensor_positions = opdef, _NO_KWARGS, positions
    save = opdef.save
    if save:
        needed_by, saved, versions, k = opdef.needed_by, list(args), [], 0
        for i, _ in positions:
            if i in save:
                if not needed_by or _saved_is_read(opdef, i, args):
                    t = tensors[k]
                    versions.append((t, t._version))
            else:
                saved[i] = metas[k]
            k += 1
        has = (sr := opdef.save_result and _saved_is_read(opdef, -1, args)) or bool(versions)
        if not has:     # a saved Python scalar counts (see OpNode)
            for i in save:
                if i < len(args) and (not needed_by or _saved_is_read(opdef, i, args)):
                    has = True
                    break
        node.args, node.versions, node._has_saved = saved, versions, has
    else:
        saved = list(args)
        for (i, _), m in zip(positions, metas):
            saved[i] = m
        node.args, node.versions, node._has_saved = saved, (), (sr := opdef.save_result)
    node._outs = ((out._data.shape, out.dtype, out.device),)
    # (slots have no class default: each is set)
    node.results = [(out._alias(), out._version)] if sr else None
    node._released = False
    return node


class NotImplementedNode(Node):
    """Stands for an op whose derivative is not written; fails only if backward reaches it."""

    def __new__(cls, opdef, inputs, outputs):
        # NOTE: named as torch's node of an op whose derivative formula is "not implemented"
        return _new(node_class(NotImplementedNode, opdef.grad_name))

    def __init__(self, opdef, inputs, outputs):
        super().__init__(inputs)
        self.opdef, self.n_outputs = opdef, len(outputs)

    name = OpNode.name

    def apply(self, grads):
        raise NotImplementedError(f"the derivative for '{self.opdef.name}' is not implemented.")


def _weak(variable):
    """A weak reference of the accumulator's own: with a callback, so that it is never the
    one ``weakref.ref(variable)`` hands a user (swap_tensors refuses tensors others refer to
    weakly)."""
    return weakref.ref(variable, _gone)


def _gone(ref):
    """(``_weak``'s callback: its being there is what counts.)"""


class AccumulateGrad(Node):
    """Sink of a leaf: adds the incoming gradient into ``variable.grad``."""

    # (_variable read by offset in _C/dispatch/nodes.h; _lent: the id of a .grad that shares
    # another tensor's memory, a weak reference a user could see (a reused id costs one
    # out-of-place sum))
    __slots__ = ("_variable", "_lent")
    seq = float("inf")                   # NOTE: like torch, accumulate as soon as ready
    next_functions, input_meta, n_outputs = (), (), 1
    # (the hook dicts stay read-only and shared until a hook is registered: a leaf never
    # retains grad)

    def __init__(self, variable):
        # a sink has no edges or metadata: skip Node.__init__.
        # NOTE: torch's tensor holds its accumulator weakly and the accumulator holds the
        # tensor; here it is the other way round, so a leaf makes one accumulator in its life,
        # not one per graph (recording an op on leaves costs no allocation). What differs:
        # once the leaf itself is gone, backward has nothing to accumulate into, and
        # ``variable`` is None. Hooks registered on a leaf live on the tensor.
        self._variable, self._lent = _weak(variable), None
        hooks = variable.__dict__.get("_leaf_hooks")
        if hooks is not None:
            self._tensor_pre_hooks = hooks

    @property
    def variable(self):
        return self._variable()

    def _register_tensor_hook(self, output_nr, fn):
        self._tensor_pre_hooks = self.variable.__dict__.setdefault("_leaf_hooks", {})
        return Node._register_tensor_hook(self, output_nr, fn)

    def name(self):
        return "torch::autograd::AccumulateGrad"

    def accumulate(self, g, create_graph):
        v = self._variable()
        if v is None:
            return
        if v.grad is None:
            # without create_graph the engine runs in no_grad, so the clone has no history.
            # NOTE: the same gradient object can reach several leaves (add's backward passes
            # g twice), so .grad gets its own buffer: accumulating in place must not alias.
            # Like torch, a gradient nothing else can reach is taken as it is: references
            # from the engine's list and this frame only (3 with getrefcount's own), and an
            # array that owns its memory held by ``g`` alone, or a view (below).
            lay = grad_mode.state.grad_layout
            if create_graph and g.grad_fn is not None:
                v.grad = g
            elif create_graph or sys.getrefcount(g) > 3:
                v.grad = _laid_out(g, v, True)
            elif g._base is not None:
                # NOTE: torch takes a view backward made (a reshape's, a transpose's of the
                # gradient given to backward) where it is laid out as the leaf, though its
                # memory is another tensor's: so does ember (else a copy per reshaped
                # parameter), but its next accumulation is out of place (torch's in-place
                # one writes into that tensor, or into another leaf's .grad sharing it)
                g2 = _laid_out(g, v) if lay else g
                v.grad = g2 if g2 is not g else g.detach()
                self._lent = id(v.grad) if g2 is g else None
            elif _alone(g):
                v.grad = _laid_out(g, v) if lay else g
            else:
                v.grad = _laid_out(g, v, True)
        elif create_graph or v.grad.requires_grad or id(v.grad) == self._lent:
            v.grad = v.grad + g
        else:
            v.grad._inplace_add(g.detach())
        for h in v._post_acc_hooks or ():
            h(v)


def _alone(g):
    """Whether only ``g`` reaches its memory: an array held by ``g`` alone, or a view held so
    of one array nothing else holds (rot90's transposed flip), and no storage another tensor
    shares. (The counts include getrefcount's argument and this frame's names.)"""
    a, s = g._data, g._storage
    b = a.base
    if s is not None and sys.getrefcount(s) > 3:
        return False
    held = s is not None                # (a storage holds the array owning the memory)
    if b is None:
        return sys.getrefcount(a) <= 3 + held
    return type(b) is np.ndarray and b.base is None and sys.getrefcount(a) <= 3 and \
        sys.getrefcount(b) <= 3 + held


def _laid_out(g, v, copy=False):
    """``g`` (a copy where ``copy``) with the strides torch's gradient layout contract gives
    ``v.grad``: ``v``'s where ``v`` is dense and non-overlapping, else row-major."""
    if type(v._data) is np.ndarray and type(g._data) is np.ndarray and \
            v._data.flags.c_contiguous:        # the common leaf, row-major: no stride lists
        return g.contiguous() if not g._data.flags.c_contiguous else g.clone() if copy else g
    if g.layout is not strided or v.layout is not strided:     # (sparse: taken as they are)
        return g.clone() if copy else g
    st = v.stride() if v.device.type != "meta" else None
    if st is None or not dense(g.shape, st):
        return g.clone(memory_format=contiguous_format) if copy else g.contiguous()
    if all(a == b or s == 1 for a, b, s in zip(g.stride(), st, g.shape)):
        return g.clone() if copy else g     # (clone keeps a dense tensor's strides)
    from .._ops.creation import empty_strided
    return empty_strided(g.shape, st, dtype=g.dtype, device=g.device).copy_(g)


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


class GradientEdge(tuple):
    """Where the gradient of a tensor is computed: ``(node, output_nr)`` of the graph, as
    ``get_gradient_edge`` gives it. ``autograd.grad`` and ``backward`` take one wherever they
    take a tensor as ``inputs`` (and ``grad`` as ``outputs``, with ``grad_outputs``).

    Example:
        >>> import ember
        >>> from ember.autograd.graph import get_gradient_edge
        >>> x = ember.tensor([1.0, 2.0], requires_grad=True)
        >>> y = x * 2
        >>> ember.autograd.grad((y * y).sum(), get_gradient_edge(y))
        (tensor([4., 8.]),)
    """

    __slots__ = ()
    _fields = ("node", "output_nr", "ownership_token")
    node = property(operator.itemgetter(0))
    output_nr = property(operator.itemgetter(1))
    ownership_token = property(operator.itemgetter(2))

    def __new__(cls, node, output_nr, ownership_token=None):
        return tuple.__new__(cls, (node, output_nr, ownership_token))

    def __repr__(self):
        return (f"GradientEdge(node={self[0]!r}, output_nr={self[1]}, "
                f"ownership_token={self[2]!r})")


def get_gradient_edge(tensor):
    """The ``GradientEdge`` the gradient of ``tensor`` flows into: its ``grad_fn`` and output
    number, or for a leaf its gradient accumulator. ``autograd.grad(loss, edge)`` equals
    ``autograd.grad(loss, tensor)``.

    Example:
        >>> import ember
        >>> x = ember.ones(2, requires_grad=True)
        >>> ember.autograd.graph.get_gradient_edge(x * 3).node.name()
        'MulBackward0'
    """
    if not tensor.requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does "
                           "not require gradients")
    # (ember's nodes are Python objects the edge keeps alive itself: no ownership token)
    return GradientEdge(*edge_of(tensor))


def _edge_meta(edge):
    """The TensorMeta of the gradient ``edge`` receives."""
    node, nr = edge[0], edge[1]
    if isinstance(node, AccumulateGrad):
        return TensorMeta(node.variable)
    return node.out_meta[nr]


def increment_version(tensor):
    """Bump the version counter of ``tensor`` (or of each tensor of an iterable), as an
    in-place write would: a graph that saved it refuses to backward through the old value.
    For writes ember cannot see (through ``data_ptr``, NumPy views of the memory).

    Example:
        >>> import ember
        >>> t = ember.zeros(2)
        >>> ember.autograd.graph.increment_version(t); t._version
        1
    """
    for t in (tensor,) if hasattr(tensor, "_data") else tensor:
        if not grad_mode.state.inference:       # NOTE: as torch, no counter in inference mode
            t._bump_version()


def region_activation_memory_budget(budget):
    """Set the activation memory budget (a ratio in ``[0, 1]``) for the region of a compiled
    forward traced under it. As in torch, it has meaning only while ``compile`` traces; ember's
    compiler has no min-cut partitioner to read it, so outside that it raises torch's error.

    Example:
        >>> import ember
        >>> ember.autograd.graph.region_activation_memory_budget(0.5)
        Traceback (most recent call last):
        RuntimeError: torch.autograd.graph.region_activation_memory_budget can only be used inside a torch.compile region; it has no effect in eager mode.
    """
    name = "torch.autograd.graph.region_activation_memory_budget"
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise TypeError(f"{name}: expects a float, got {type(budget).__name__}")
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"{name}: must be in [0, 1], got {budget}")
    from ..compiler import is_compiling
    if not is_compiling():
        raise RuntimeError(f"{name} can only be used inside a torch.compile region; it has no "
                           "effect in eager mode.")
    import contextlib
    return contextlib.nullcontext()


_stream_flags = {"warn_on_accumulate_grad_stream_mismatch": True,
                 "override_stale_capture_stream": False}


def set_warn_on_accumulate_grad_stream_mismatch(enabled):
    """Whether to warn when a leaf's accumulation stream differs from the stream of the node
    that made the gradient. Ember's backward runs on one stream per device, so no mismatch
    arises; the setting is kept as torch keeps it.

    Example:
        >>> import ember
        >>> ember.autograd.graph.set_warn_on_accumulate_grad_stream_mismatch(False)
    """
    _stream_flags["warn_on_accumulate_grad_stream_mismatch"] = bool(enabled)


def set_override_stale_capture_stream(enabled):
    """Whether backward replaces a stale non-capturing stream by the capturing one during CUDA
    graph capture. Ember captures no CUDA graphs; the setting is kept as torch keeps it.

    Example:
        >>> import ember
        >>> ember.autograd.graph.set_override_stale_capture_stream(True)
    """
    _stream_flags["override_stale_capture_stream"] = bool(enabled)


class _MultiHandle:
    """The handle of ``register_multi_grad_hook``: ``remove()`` removes every hook."""

    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()

    def __getstate__(self):
        return self.handles

    def __setstate__(self, state):
        self.handles = state


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """Call ``fn`` once per backward when the gradients of ``tensors`` are computed.

    ``mode="all"``: after every tensor's gradient that this backward computes (tensors outside
    the graph, or not needed for its ``inputs``, are not waited for), with the list of the
    gradients (``None`` where not computed). ``mode="any"``: at the first gradient, with it.

    Example:
        >>> import ember
        >>> a, b = ember.ones(2, requires_grad=True), ember.ones(2, requires_grad=True)
        >>> c = a * b
        >>> h = ember.autograd.graph.register_multi_grad_hook(
        ...     (a, b, c), lambda gs: print([g is not None for g in gs]))
        >>> c.sum().backward(inputs=(a,))
        [True, False, True]
        >>> h.remove()
    """
    from . import engine
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    if mode == "any":
        ran = set()

        def wrapped(grad):
            task = engine.current_task_id()
            if task not in ran:
                ran.add(task)
                fn(grad)
        return _MultiHandle(tuple(t.register_hook(wrapped) for t in tensors if t.requires_grad))
    nodes = [edge_of(t)[0] for t in tensors]
    if None in nodes:
        raise AssertionError("Expected gradient function to be set")
    count, buffers, expected = {}, {}, {}

    def inner(i):
        def hook(grad):
            task = engine.current_task_id()
            seen = count.get(task, 0)
            if seen == 0:       # the first call of this backward: how many will come
                expected[task] = sum(map(engine.will_execute, nodes))
                buffers[task] = [None] * len(nodes)
            count[task] = seen + 1
            buffers[task][i] = grad
            if seen == expected[task] - 1:
                gs = buffers.pop(task)
                del count[task], expected[task]
                fn(gs)
        return hook
    return _MultiHandle(tuple(t.register_hook(inner(i)) for i, t in enumerate(tensors)))


class _AllowMutationOnSavedContext:
    """What ``allow_mutation_on_saved_tensors`` keeps: each saved tensor by a handle the graph
    holds, its clone once it was written, and the saved tensors of each (storage, version)."""

    def __init__(self):
        self.cloned, self.original = weakref.WeakKeyDictionary(), weakref.WeakKeyDictionary()
        self.tid_to_weakhandle = weakref.WeakValueDictionary()
        self.sid_to_tid = {}

    def clear(self):
        for d in (self.cloned, self.original, self.tid_to_weakhandle, self.sid_to_tid):
            d.clear()

    def _ids(self, t):
        # NOTE: torch keys aliasing by data_ptr; keyed here by the storage, so a write through
        # any view of a saved tensor's memory clones it first
        sid = (id(t._get_storage()), t._version)
        return (id(t),) + sid, sid

    def pack(self, t):
        tid, sid = self._ids(t)
        self.sid_to_tid.setdefault(sid, set()).add(tid)
        handle = self.tid_to_weakhandle.get(tid)
        if handle is None:      # the same tensor at the same version saved again: one handle
            handle = self.tid_to_weakhandle[tid] = _SavedHandle()
            self.original[handle] = t
        return handle

    def unpack(self, handle):
        if not _mutation_ctx or handle not in self.cloned and handle not in self.original:
            raise AssertionError("Trying to backward outside of the 'allow_mutation_on_saved_"
                                 "tensors' contextin which the graph was originally recorded.")
        return self.cloned[handle] if handle in self.cloned else self.original[handle]

    def before_write(self, t):
        for tid in self.sid_to_tid.get(self._ids(t)[1], ()):
            handle = self.tid_to_weakhandle.get(tid)
            # (a tensor saved, then freed by a backward, before the write has no handle)
            if handle is not None and handle not in self.cloned:
                self.cloned[handle] = self.original.pop(handle).clone()


class _SavedHandle:
    """A saved tensor's key in the context: only its identity matters."""


_mutation_ctx = []


class _CloneBeforeWrite:
    """Dispatch's transform hook inside ``allow_mutation_on_saved_tensors``: sees every
    in-place call first, and hands the rest to the transform it replaced (vmap, forward AD)."""

    def __init__(self, ctx, prev):
        self.ctx, self.prev = ctx, prev

    def __call__(self, opdef, args, kwargs, run):
        return run(opdef, args, kwargs) if self.prev is None else \
            self.prev(opdef, args, kwargs, run)

    def inplace(self, opdef, self_, args, kwargs, self_at):
        self.ctx.before_write(self_)
        inner = getattr(self.prev, "inplace", None)
        return NotImplemented if inner is None else inner(opdef, self_, args, kwargs, self_at)


class allow_mutation_on_saved_tensors:
    """Within the block, writing in place into a tensor saved for backward is allowed: the
    saved value is cloned before the write, and backward reads the clone. Forward and
    backward both run inside the block; it gives the context's state
    (``_AllowMutationOnSavedContext``), cleared on exit.

    Example:
        >>> import ember
        >>> with ember.autograd.graph.allow_mutation_on_saved_tensors():
        ...     a = ember.ones(2, requires_grad=True)
        ...     b = a.clone()
        ...     out = (b ** 2).sum()
        ...     _ = b.sin_()
        ...     out.backward()
        >>> a.grad
        tensor([2., 2.])
    """

    def __enter__(self):
        from .._ops.dispatch import hooks
        if _mutation_ctx:
            raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
        ctx = self.ctx = _AllowMutationOnSavedContext()
        self._hooks = saved_tensors_hooks(ctx.pack, ctx.unpack)
        self._hooks.__enter__()
        self._prev, hooks.transform = hooks.transform, _CloneBeforeWrite(ctx, hooks.transform)
        _mutation_ctx.append(ctx)
        return ctx

    def __exit__(self, *exc):
        from .._ops.dispatch import hooks
        hooks.transform = self._prev
        self._hooks.__exit__(*exc)
        _mutation_ctx.pop()
        self.ctx.clear()
