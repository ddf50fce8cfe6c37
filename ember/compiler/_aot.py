"""Capture, AOT autograd and code generation behind ``ember.compile``.

The function runs once under a recorder; where its outputs need gradients, the recorder keeps
running through ``autograd.grad(outputs, leaves, tangents, create_graph=True)``: every backward
formula is written in ember ops, so the backward is recorded too, as one joint graph. The nodes
recorded before the grad call are the forward graph, those after it the backward graph (their
reads of forward values are the saved tensors). Each graph is compiled by ``_graph.cgen``; a
``Function`` runs the forward and hands the backward to the autograd engine.
"""
import warnings

import numpy as np

from .._graph import cgen
from .._graph.interpreter import fetch_attr
from .._graph.ir import Graph, TensorMeta, map_arg
from .._graph.passes import dead_code
from .._graph.record import Recorder, TracerWarning, _map_out, flatten_tensors, recording
from .._tensor import Tensor
from ..autograd.function import Function
from ..autograd.grad_mode import no_grad, state as _grad

compiling = [False]


class _Capture(Recorder):
    """A recorder for compile: tensors the function reads that no recorded op made (globals,
    closures) stay live inputs (``get_attr`` of ``_captured<k>``) rather than copies."""

    def __init__(self, inputs, names, module):
        super().__init__(inputs, names, module)
        self.live = {}

    def value(self, t):
        if id(t) not in self.values and id(t._data) not in self.data and \
                id(t) not in self.attrs and id(t) not in self.stale and t.grad_fn is None:
            name = f"_captured{len(self.live)}"
            self.attrs[id(t)], self.live[name] = name, t
        return super().value(t)


def _float(t):
    return t.dtype.is_floating_point or t.dtype.is_complex


def _subgraph(nodes, inputs, outputs):
    g, env = Graph(), {}
    for n in inputs:
        p = g.placeholder(n.name)
        p.meta = dict(n.meta)
        env[n] = p
    for n in nodes:
        if n not in env:
            env[n] = g.node_copy(n, lambda a: env[a])
    g.output(map_arg(outputs, lambda a: env[a]))
    dead_code(g)
    return g


class Breaks(Exception):
    """The function reads Python values from traced tensors: it cannot be one graph."""


def capture(fn, module, args, kwargs):
    """Record ``fn(*args, **kwargs)`` (and its backward where outputs need gradients); return
    the ``Compiled`` program. Raises ``Breaks`` for data-dependent Python."""
    from .. import random as _random
    flat = flatten_tensors((args, kwargs))
    names = [f"x{i}" for i in range(len(flat))]
    saved = [(b, b._data.copy()) for b in module.buffers()] if module is not None else []
    rng = _random.get_rng_state()
    rec = _Capture(flat, names, module)
    compiling[0] = True
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", TracerWarning)
            with recording(rec):
                out = fn(*args, **kwargs)
                outs = flatten_tensors(out)
                homes = {id(t): t for t in flat}
                if module is not None:
                    homes.update((id(t), t) for t in list(module.parameters()) +
                                 list(module.buffers()))
                homes.update((id(t), t) for t in rec.live.values())
                leaves = [homes[i] for i in rec.homes if i in homes and
                          homes[i].requires_grad] if _grad.grad_enabled else []
                diff = [j for j, o in enumerate(outs) if o.requires_grad and _float(o)] \
                    if leaves else []
                split = len(rec.graph._nodes)
                tangents, grads = [], ()
                if diff:
                    from ..autograd import grad
                    for i, j in enumerate(diff):
                        g = Tensor._wrap(np.zeros(outs[j].shape, outs[j]._data.dtype))
                        node = rec.graph.placeholder(f"tangent{i}")
                        node.meta["val"] = TensorMeta.of(g)
                        rec._bind(g, node)
                        tangents.append(g)
                    grads = grad([outs[j] for j in diff], leaves, tangents, create_graph=True,
                                 allow_unused=True)
                leaf_nodes = [rec.homes[id(t)] for t in leaves]
                out_nodes = [rec.value(o) for o in outs]
                grad_nodes = [None if g is None else rec.value(g) for g in grads]
    finally:
        drawn = _random.get_rng_state()
        compiling[0] = False
        with no_grad():
            for b, data in saved:
                b._data[...] = data
        _random.set_rng_state(rng)
    if not np.array_equal(drawn.numpy(), rng.numpy()):
        # NOTE: factory calls (randn, dropout's mask) run off the dispatch, so the graph would
        # replay the first call's draws: a function that draws random numbers runs eagerly
        raise Breaks("the function draws random numbers, which the capture cannot replay")
    breaks = [w for w in seen if issubclass(w.category, TracerWarning)]
    if breaks:
        raise Breaks(f"{breaks[0].message} (at {breaks[0].filename}:{breaks[0].lineno})")
    prog = Compiled(rec, module, out, out_nodes, split, diff, leaf_nodes, grad_nodes, len(flat))
    prog.watch = list(rec.called.values()), list(rec.live.values())
    return prog


class Compiled:
    """A captured function's forward (and backward) graphs, compiled to C and Python."""

    def __init__(self, rec, module, template, out_nodes, split, diff, leaf_nodes, grad_nodes,
                 n_in):
        nodes = [n for n in rec.graph._nodes if n.op != "output"]
        fwd, bwd = nodes[:split], nodes[split:]
        tangents = [n for n in bwd if n.op == "placeholder"]
        bset = set(bwd)
        saved = []
        for n in bwd:
            for a in n.all_input_nodes:
                if a not in bset and a not in saved:
                    saved.append(a)
        saved += [g for g in grad_nodes if g is not None and g not in bset and g not in saved]
        self.template, self.n_in, self.diff = template, n_in, diff
        self.live, self.consts, self.module = rec.live, rec.constants, module
        self.graphs = [_subgraph(fwd, [], (tuple(out_nodes), tuple(saved)))]
        if diff:
            self.graphs.append(_subgraph([n for n in bwd if n not in tangents], saved + tangents,
                                         tuple(grad_nodes)))
        self.leaf_slots = []
        for n in leaf_nodes:
            self.leaf_slots.append(("in", [p for p in fwd if p.op == "placeholder"].index(n))
                                   if n.op == "placeholder" else ("attr", n.target))
        self.programs = [cgen.build(g) for g in self.graphs]

    def load(self, buffers=False):
        """Compile (or find in the disk cache) the C source and bind the runners."""
        blocks = [b for p in self.programs for b in p[1].split("\n\n")]
        lib = cgen.load("\n\n".join(dict.fromkeys(blocks)))     # (kernels both graphs use)
        self.runs = [cgen.make(py, table, sigs, lib, {} if buffers else None)
                     for py, _, table, _, sigs in self.programs]
        self.attrs = [p[3] for p in self.programs]
        self.buffers, self.generation = buffers, 0
        return self

    def attr(self, target):
        if target in self.live:
            return self.live[target]
        if target in self.consts:
            return self.consts[target]
        return fetch_attr(self.module, target)

    def _own(self, outs):
        """Outputs the caller may keep: copies of kept buffers (reused by the next call)."""
        return [Tensor._wrap(o._data.copy()) if self.buffers and isinstance(o, Tensor) else o
                for o in outs]

    def __call__(self, args, kwargs):
        flat = flatten_tensors((args, kwargs))
        attrs = [self.attr(t) for t in self.attrs[0]]
        if len(self.graphs) == 1:
            with no_grad():
                outs, _ = self.runs[0](*flat, *attrs)
            outs = self._own(outs)
        else:
            leaves = [flat[i] if kind == "in" else self.attr(i) for kind, i in self.leaf_slots]
            outs = _Run.apply(self, flat, attrs, *leaves)
        it = iter(outs)
        return _map_out(self.template, lambda t: next(it))


class _Run(Function):
    """The compiled forward as one autograd node whose backward is the compiled backward."""

    @staticmethod
    def forward(ctx, prog, flat, attrs, *leaves):
        with no_grad():
            outs, saved = prog.runs[0](*flat, *attrs)
        prog.generation += 1
        # an output also saved is kept as a history-less alias: the output itself (whose
        # grad_fn is ctx) would make a ctx <-> tensor cycle that only the cyclic GC frees, so
        # each step's activations would outlive it and the heap grow until glibc trims it
        ids = {id(o) for o in outs}
        saved = [s._alias() if id(s) in ids else s for s in saved]
        ctx.prog, ctx.saved, ctx.gen = prog, saved, prog.generation
        ctx.shapes = [(outs[j].shape, outs[j]._data.dtype) for j in prog.diff]
        outs = prog._own(outs)
        ctx.mark_non_differentiable(*[o for j, o in enumerate(outs) if j not in prog.diff])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *gs):
        prog = ctx.prog
        if prog.buffers and ctx.gen != prog.generation:
            raise RuntimeError("ember.compile(mode='reduce-overhead'): the forward ran again "
                               "before this backward, overwriting the buffers it saved; run "
                               "backward before the next call")
        if _grad.grad_enabled:
            raise RuntimeError("ember.compile: a compiled graph's backward is not "
                               "differentiable (create_graph=True)")
        tangents = [gs[j] if gs[j] is not None else Tensor._wrap(np.zeros(s, d))
                    for j, (s, d) in zip(prog.diff, ctx.shapes)]
        battrs = [prog.attr(t) for t in prog.attrs[1]]
        with no_grad():
            grads = prog.runs[1](*ctx.saved, *tangents, *battrs)
        return (None, None, None) + tuple(grads)
