"""The backward engine: walk the graph from the roots in dependency order, highest sequence
number first (as torch does), summing gradients that meet at a node."""
import itertools
import warnings

import numpy as np

from . import grad_mode
from .anomaly_mode import anomaly
from .graph import AccumulateGrad, GradientEdge


def _dependencies(roots):
    """``{node: number of edges into it}`` over the graph below ``roots``."""
    deps, stack = {}, [n for n in roots if n is not None]
    roots = set(stack)
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is None:
                continue
            if nxt in deps:
                deps[nxt] += 1
            else:               # first reached: walk below it (a root already is walked)
                deps[nxt] = 1
                if nxt not in roots:
                    stack.append(nxt)
    return deps


def _needed(nodes, targets):
    """Nodes from which a target is reachable (only those need to run for ``grad()``)."""
    needed = set(targets)
    changed = True
    order = sorted(nodes, key=lambda n: n.seq)   # children have smaller seq than parents
    while changed:
        changed = False
        for n in order:
            if n not in needed and any(c in needed for c, _ in n.next_functions):
                needed.add(n)
                changed = True
    return needed


def _shape(g):
    try:
        return g._data.shape
    except RuntimeError:    # a gradient batched by vmap (vjp_fn called inside vmap)
        return tuple(g.shape)


def _sum_to(g, meta):
    """Reduce gradient ``g`` to the shape and dtype of the input described by ``meta``."""
    shape = meta._shape
    if _shape(g) == shape and g.dtype is meta.dtype:     # the common case, cheaply
        return g
    if _shape(g) != shape:
        lead = g.dim() - len(shape)
        dims = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape)
                                          if s == 1 and g.shape[i + lead] != 1)
        if dims:
            g = g.sum(dims, keepdim=True)
        if lead:
            g = g.reshape(shape)
    if g.dtype is not meta.dtype:
        if g.dtype.is_complex and not meta.dtype.is_complex:
            g = g.real
        g = g.to(meta.dtype)
    return g


_dispatch = None     # ember._ops.dispatch, once imported
# the innermost backward call running: (task id, nodes below the roots, roots, the nodes that
# run where ``inputs`` restricts them, else None, whether .grad accumulates), or None; each
# call keeps the one it replaced (a nested backward restores it). graph.register_multi_grad_hook
# reads it as torch's ``_current_graph_task_id`` and ``_will_engine_execute_node``.
_task, _task_ids = None, itertools.count()


def current_task_id():
    """The id of the innermost backward call running, -1 outside backward."""
    return _task[0] if _task is not None else -1


def will_execute(node):
    """Whether the innermost running backward call will run ``node``."""
    if _task is None:
        raise RuntimeError("_will_engine_execute_node should only be called during the backward "
                           "pass")
    _, deps, roots, needed, accumulate = _task
    if needed is None:
        return node in deps or node in roots
    if node in needed and not accumulate and type(node) is AccumulateGrad:
        raise RuntimeError("A leaf node was passed to _will_engine_execute_node but we are "
                           "currently running autograd.grad(). This is currently not supported.")
    return node in needed


def grads_in_place(node):
    """The ``.grad`` tensors, by input position, that ``node``'s backward may add its
    gradients into itself, as AccumulateGrad's in-place add would (the compiled backward's
    kernels do, saving a pass over each): in ``backward()`` (not ``autograd.grad``), of leaves
    whose gradient goes straight to their accumulator, without hooks, whose ``.grad`` is a
    NumPy array of their dtype. The caller bumps the version of each it wrote."""
    if _task is None or _task[3] is not None or not _task[4]:
        return {}

    def plain(acc, t):
        g = t.grad if t is not None else None
        return g is not None and not g.requires_grad and type(g._data) is np.ndarray and \
            g.dtype == t.dtype and not (acc._pre_hooks or acc._hooks or acc._tensor_pre_hooks
                                        or t._post_acc_hooks)
    return {p: e[0]._variable().grad for p, e in enumerate(node.next_functions)
            if e is not None and type(e[0]) is AccumulateGrad and plain(e[0], e[0]._variable())}


def run_backward(roots, grad_roots, retain_graph=False, create_graph=False, inputs=None,
                 allow_unused=True, accumulate=True):
    """Run backward from ``roots`` (list of (node, output_nr)) seeded with ``grad_roots``.

    With ``inputs`` (list of tensors), return the gradient reaching each of them; when
    ``accumulate`` is False nothing is written into ``.grad``.
    """
    buffers = {}
    for (node, nr), g in zip(roots, grad_roots):
        if node is None:
            continue
        buf = buffers.setdefault(node, [None] * node.n_outputs)
        buf[nr] = g if buf[nr] is None else buf[nr] + g
    root_nodes = list(buffers)
    global _dispatch
    if _dispatch is None:       # (not at the top: dispatch imports autograd)
        from .._ops import dispatch as _dispatch
    _C, prof = _dispatch._C, _dispatch.hooks.profiler
    deps = _dependencies(root_nodes) if _C is None else _C.dependencies(root_nodes)

    captures, capture_at = None, {}
    if inputs is not None:
        captures = [None] * len(inputs)
        for i, t in enumerate(inputs):
            if type(t) is GradientEdge:
                key = t[:2]
            elif t.grad_fn is not None:
                key = (t.grad_fn, t._output_nr)
            else:
                acc = t._grad_accumulator_ref()
                key = (acc, 0) if acc is not None else (None, 0)
            capture_at.setdefault(key[0], []).append((key[1], i))
        needed = _needed(set(deps).union(root_nodes), [n for n in capture_at if n is not None])
    else:
        needed = None

    ready = [n for n in root_nodes if deps.get(n, 0) == 0]
    prev = grad_mode.state.grad_enabled
    grad_mode.state.grad_enabled = create_graph
    global _task
    outer, _task = _task, (next(_task_ids), deps, root_nodes, needed, accumulate)
    if _C is not None and inputs is None and prof is None and not anomaly.enabled:
        # the plain case: the same loop in C (ember/_C/dispatch/engine.h), this one is the reference
        try:
            _C.backward_loop(ready, buffers, deps, retain_graph, create_graph, accumulate)
        finally:
            grad_mode.state.grad_enabled = prev
            _task = outer
        return None
    import heapq        # (here: the C loop above is the common case, and import ember skips it)
    heap, pop, push = [], heapq.heappop, heapq.heappush
    for n in ready:
        push(heap, _Ready(n))
    try:
        while heap:
            node = pop(heap).node
            grads = buffers.pop(node, None) or [None] * node.n_outputs
            if needed is not None and node not in needed:
                continue        # NOTE: as torch, a node that does not run runs no tensor hooks
            if node._tensor_pre_hooks or node._retain_grad_hooks:
                _run_tensor_hooks(node, grads)
            if capture_at and node in capture_at:
                for nr, i in capture_at[node]:
                    captures[i] = grads[nr]
            if type(node) is AccumulateGrad:
                if accumulate and grads[0] is not None:   # with inputs=, only those get here
                    _accumulate(node, grads, create_graph, prof)
                continue
            if needed is not None and not any(c in needed for c, _ in node.next_functions):
                continue
            plain = prof is None and not (node._pre_hooks or node._hooks or
                                          node._trace is not None or anomaly.enabled)
            for g in grads:             # (``None in grads`` would call Tensor.__eq__)
                if g is None:
                    plain = False
                    break
            if plain:                   # the common case of _apply, inlined
                grad_inputs = node.apply(grads)
                if not retain_graph:
                    node.release()
            elif prof is None:
                grad_inputs = _apply(node, grads, retain_graph)
            else:
                with prof.backward(node):
                    grad_inputs = _apply(node, grads, retain_graph)
            for (nxt, nr), g, meta in zip(node.next_functions, grad_inputs, node.input_meta):
                if nxt is None:
                    continue
                if g is not None:
                    # (TensorMeta is a tuple (shape, dtype, device): index it, no properties)
                    if _shape(g) != meta[0] or g.dtype is not meta[1]:
                        g = _sum_to(g, meta)
                    buf = buffers.get(nxt)
                    if buf is None:
                        buf = buffers[nxt] = [None] * nxt.n_outputs
                    buf[nr] = g if buf[nr] is None else buf[nr] + g
                left = deps[nxt] - 1
                deps[nxt] = left
                if left == 0 and (needed is None or nxt in needed):     # (as torch's queue)
                    push(heap, _Ready(nxt))
            # drop this frame's references: a leaf's AccumulateGrad takes a gradient nothing
            # else holds without cloning it (see AccumulateGrad.accumulate)
            grad_inputs = grads = g = buf = None
    finally:
        grad_mode.state.grad_enabled = prev
        _task = outer
    if inputs is None:
        return None
    if accumulate:          # leaves were accumulated by their AccumulateGrad above
        for t, g in zip(inputs, captures):
            if g is not None and type(t) is not GradientEdge and t.grad_fn is not None:
                g = g if create_graph else g.detach()
                t.grad = g.clone() if t.grad is None else t.grad + g
        return None
    for i, g in enumerate(captures):
        if g is None and not allow_unused:
            raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have been "
                               "used in the graph. Set allow_unused=True if this is the desired "
                               "behavior.")
    return captures


class _Ready:
    """A node in the engine's heap, ordered by sequence number alone. heapq's steps are
    libstdc++ priority_queue's, which torch's ready queue is: nodes of one number (leaves'
    AccumulateGrads, pushed together by one backward) leave it in torch's order."""
    __slots__ = ("key", "node")

    def __init__(self, node):
        self.key, self.node = -node.seq, node

    def __lt__(self, other):
        return self.key < other.key


def _accumulate(node, grads, create_graph, prof=None):
    """A leaf's step: its AccumulateGrad's pre-hooks, the accumulation into ``.grad`` (and the
    tensor's post-accumulate hooks), then the node's post hooks, which get no gradient
    inputs as torch's AccumulateGrad has no edges."""
    for h in node._pre_hooks:
        r = h(tuple(grads))
        grads = list(r) if r is not None else grads
    if prof is None:
        node.accumulate(grads[0], create_graph)
    else:
        with prof.backward(node):
            node.accumulate(grads[0], create_graph)
    for h in node._hooks:
        h((), tuple(grads))


def _run_tensor_hooks(node, grads):
    for nr, hooks in node._tensor_pre_hooks.items():
        for h in list(hooks):
            if grads[nr] is not None:
                r = h(grads[nr])
                if r is not None:
                    grads[nr] = r
    for nr, h in node._retain_grad_hooks.items():
        if grads[nr] is not None:
            h(grads[nr])


def _materialize(node, grads):
    from .._ops.creation import zeros
    return [g if g is not None or m is None else zeros(m.shape, dtype=m.dtype, device=m.device)
            for g, m in zip(grads, node.out_meta)]


def _apply(node, grads, retain_graph):
    for h in node._pre_hooks:
        r = h(tuple(grads))
        if r is not None:
            grads = list(r)
    for g in grads:
        if g is None:
            if getattr(node, "out_meta", None) is not None:
                grads = _materialize(node, grads)
            break
    try:
        out = node.apply(grads)
        if anomaly.enabled and anomaly.check_nan:
            for i, g in enumerate(out):
                if g is not None and g._has_nan():
                    raise RuntimeError(f"Function '{node.name()}' returned nan values in its "
                                       f"{i}th output.")
    except Exception:
        if node._trace is not None:
            warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that "
                          "caused the error:\n" + "".join(node._trace), stacklevel=2)
        raise
    for h in node._hooks:
        r = h(tuple(out), tuple(grads))
        if r is not None:
            out = list(r)
    if not retain_graph:
        node.release()
    return out
