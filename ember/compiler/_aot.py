"""Capture, AOT autograd and code generation behind ``ember.compile``.

The function runs once under a recorder; where its outputs need gradients, the recorder keeps
running through ``autograd.grad(outputs, leaves, tangents, create_graph=True)``: every backward
formula is written in ember ops, so the backward is recorded too, as one joint graph. The nodes
recorded before the grad call are the forward graph, those after it the backward graph (their
reads of forward values are the saved tensors). Each graph is compiled by ``_graph.cgen``; a
``Function`` runs the forward and hands the backward to the autograd engine. The backward is a
function of the forward graph where only ember's vjps run in it, so a process that records a
forward seen before reads both graphs from the disk cache instead (``_joint_key``).
"""
import functools
import hashlib
import marshal
import os
import pickle
import sys
import tempfile
import warnings

import numpy as np

from .._backends import backend
from .._graph import cgen, toolchain
from .._graph.dynamic import Sz, retrace, symbolize
from .._graph.interpreter import Interpreter, fetch_attr
from .._graph.ir import Graph, TensorMeta, map_arg
from .._graph.passes import dead_code
from .._graph.record import Recorder, TracerWarning, _map_out, flatten_tensors, recording
from .._graph.serialize import _dec, _enc, dumps, loads
from .._ops.registry import OpDef, get
from .._tensor import Tensor
from ..autograd.engine import grads_in_place
from ..autograd.function import Function
from ..autograd.grad_mode import no_grad, state as _grad

compiling = [False]


class _Capture(Recorder):
    """A recorder for compile: tensors the function reads that no recorded op made (globals,
    closures) stay live inputs (``get_attr`` of ``_captured<k>``) rather than copies."""

    def __init__(self, inputs, names, module):
        super().__init__(inputs, names, module)
        self.live, self.aliased, self.wrote, self.symbolic = {}, False, False, {}

    def assigned(self, t, r):
        self.wrote = True           # (an in-place write: the capture's values are not kept)
        super().assigned(t, r)

    def value(self, t):
        if id(t) not in self.values and id(t) not in self.attrs and id(t) not in self.stale:
            if id(t._data) in self.data:        # (an alias made off the dispatch: the graph
                self.aliased = True             # does not show how gradients flow through it)
            elif t.grad_fn is None:
                name = f"_captured{len(self.live)}"
                self.attrs[id(t)], self.live[name] = name, t
        return super().value(t)


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


def capture(fn, module, args, kwargs, dyn=()):
    """Record ``fn(*args, **kwargs)`` (and its backward where outputs need gradients); return
    the ``Compiled`` program. Raises ``Breaks`` for data-dependent Python. A backward another
    process recorded after the same forward is read from the disk cache (``_joint_key``).
    ``dyn``: groups of (input, axis) of one dynamic size each, found by recording again with
    each one larger (``_graph.dynamic``; ``Static`` where the graph cannot follow one)."""
    rec = _record(fn, module, args, kwargs, not dyn)
    if dyn:
        names = [n.name for n in rec.inputs]
        base, others = retrace(None, args, kwargs, None, names, [g[0] for g in dyn], Static,
                               {g[0]: list(g) for g in dyn},
                               lambda a, k: _record(fn, module, a, k, False))
        for r in [rec] + [r for _, r in others]:    # (what a vjp made in Python is live)
            r.constants = {**r.live, **r.constants}
            if repr(_map_out(r.out, lambda t: None)) != repr(_map_out(rec.out, lambda t: None)):
                raise Static("a Python value the function returns follows the sizes")
        symbolize(rec, others, base, names, Static, shapes={k: v for v, g in enumerate(dyn)
                                                             for k in g})
    if (hit := rec.hit) is not None:
        prog = Compiled(hit["graphs"], hit["leaf_slots"], rec.out, len(rec.inputs), rec.diff,
                        {**rec.live, **hit["live"]}, {**rec.constants, **hit["consts"]}, module,
                        [p[:2] + ([get(t["$op"]) if type(t) is dict and "$op" in t else
                                   _dec(t, {}) for t in p[2]],) + p[3:] for p in hit["programs"]])
        prog.saved, prog.code = hit["saved"], hit["code"]
    else:
        prog = Compiled.joint(rec, module, dyn)
        if rec.key is not None:
            _joint_write(rec.key, prog, rec.known)
    prog.watch = list(rec.called.values()), list(prog.live.values())
    if rec.clean:
        _keep_values(prog, rec, rec.outs)
    return prog


class Static(Exception):
    """A dynamic size the graph cannot follow (it changes the graph, or what it computes)."""


def _record(fn, module, args, kwargs, cached):
    """The recorder of ``fn``'s joint forward and backward, with what ``capture`` needs as its
    attributes; the backward read from the disk cache (``hit``) where ``cached`` allows."""
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
                rec.out = out = fn(*args, **kwargs)
                rec.outs = outs = flatten_tensors(out)
                homes = {id(t): t for t in flat}
                if module is not None:
                    homes.update((id(t), t) for t in list(module.parameters()) +
                                 list(module.buffers()))
                homes.update((id(t), t) for t in rec.live.values())
                leaves = [homes[i] for i in rec.homes if i in homes and
                          homes[i].requires_grad] if _grad.grad_enabled else []
                rec.diff = diff = [j for j, o in enumerate(outs) if o.requires_grad and (
                    o.dtype.is_floating_point or o.dtype.is_complex)] if leaves else []
                rec.split, rec.known = len(rec.graph._nodes), (len(rec.live), len(rec.constants))
                rec.clean = not (rec.wrote or rec.aliased or rec.stale)     # (the forward's)
                rec.key = _joint_key(rec, outs, diff, leaves) if diff and cached else None
                rec.hit = _joint_read(rec.key) if rec.key is not None else None
                if rec.hit is None:
                    tangents, grads = [], ()
                    if diff:
                        from ..autograd import grad
                        for i, j in enumerate(diff):
                            g = Tensor._wrap(backend(outs[j].device).xp.zeros(
                                outs[j].shape, outs[j]._data.dtype), outs[j].device)
                            node = rec.graph.placeholder(f"tangent{i}")
                            node.meta["val"] = TensorMeta.of(g)
                            rec._bind(g, node)
                            tangents.append(g)
                        grads = grad([outs[j] for j in diff], leaves, tangents,
                                     create_graph=True, allow_unused=True)
                    rec.leaf_nodes = [rec.homes[id(t)] for t in leaves]
                    rec.out_nodes = [rec.value(o) for o in outs]
                    rec.grad_nodes = [None if g is None else rec.value(g) for g in grads]
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
    return rec


def _keep_values(prog, rec, outs):
    """Keep the outputs and saved values the capture computed for the call that follows it
    (``Compiled.eager``), which then runs no forward of its own; not where the function wrote
    in place (a value's tensor then holds a later one: BatchNorm's running statistics, restored
    after the capture, must be updated by the compiled forward) or aliased off the dispatch."""
    by_name = {rec.values[id(t)].name: t for t in reversed(rec.keep) if id(t) in rec.values}
    saved = [by_name.get(name) for name in prog.saved]
    if None not in saved:       # (history-less, so the capture's autograd graph is freed)
        prog.eager = [[t._alias() if t.grad_fn is not None else t for t in ts]
                      for ts in (outs, saved)]


# ---- the joint program on disk, keyed by the forward graph -----------------------------------

def _joint_key(rec, outs, diff, leaves):
    """The disk key of the backward that ``autograd.grad`` would record after this forward
    recording, or None where it may run code the forward graph does not show (an
    ``autograd.Function``'s backward, a hook, saved-tensor hooks) or the forward made aliases
    off the dispatch (``as_subclass``). Otherwise the backward is a function of the forward
    graph (ops, arguments, shapes, dtypes), the leaves and outputs differentiated, the default
    dtype and deterministic mode, and ember's own code."""
    from .. import get_default_dtype, are_deterministic_algorithms_enabled
    from ..autograd import graph as ag
    from ._api import config
    if config.force_disable_caches or ag._saved_hooks or rec.aliased:
        return None
    todo, seen = [outs[j].grad_fn for j in diff], set()
    while todo:                 # (every node of the autograd graph: ember's own, no hooks)
        n = todo.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        if not isinstance(n, (ag.OpNode, ag.AccumulateGrad)) or n._pre_hooks or n._hooks or \
                n._tensor_pre_hooks or n._retain_grad_hooks:
            return None
        todo += [e[0] for e in n.next_functions if e is not None]
    out_names = [getattr(rec.values.get(id(o)), "name", None) for o in outs]
    if None in out_names:
        return None
    try:
        fwd = dumps(rec.graph)
    except TypeError:           # (a node calling what is not an op)
        return None
    parts = [_JOINT, sys.version, _ember_files(), config.cache_key_tag, str(get_default_dtype()),
             str(are_deterministic_algorithms_enabled()), fwd, repr(out_names), repr(diff),
             repr([rec.homes[id(t)].name for t in leaves])]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


_JOINT = "ember.compile.joint/2"


@functools.cache
def _ember_files():
    """A hash of the size and modification time of each of ember's Python files."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [os.path.join(d, f) for d, _, fs in sorted(os.walk(root)) for f in sorted(fs)
             if f.endswith(".py")]
    return hashlib.sha256(repr([(p, os.stat(p).st_size, os.stat(p).st_mtime_ns)
                                for p in paths]).encode()).hexdigest()


def _joint_path(key):
    return os.path.join(toolchain.cache_dir(), "codegen", key + ".joint")


def _joint_read(key):
    """The stored joint program of ``key`` (graphs, leaf slots, tensors the backward made), or
    None."""
    try:
        with open(_joint_path(key), "rb") as f:
            d = pickle.load(f)      # (ember's own cache, beside the libraries it loads)
        d["code"] = [marshal.loads(c) for c in d["code"]]   # (Python's version is in the key)
    except Exception:
        return None                 # (none, or unreadable: recorded again and written anew)
    toolchain.used[key + ".joint"] = _joint_path(key)
    return d


def _joint_write(key, prog, known):
    """Store ``prog``'s graphs, its runners' code and the tensors its backward's recording
    made (written aside, renamed into place)."""
    prog.code = [compile(p[0], "<ember.compile>", "exec") for p in prog.programs]
    try:
        entry = pickle.dumps({"graphs": [dumps(g) for g in prog.graphs],
                              "saved": prog.saved, "code": list(map(marshal.dumps, prog.code)),
                              "leaf_slots": prog.leaf_slots, "programs": [  # (ops by name)
                                  p[:2] + ([{"$op": t.name} if isinstance(t, OpDef) else
                                            _enc(t, "") for t in p[2]],) + p[3:]
                                  for p in prog.programs],
                              "live": dict(list(prog.live.items())[known[0]:]),
                              "consts": dict(list(prog.consts.items())[known[1]:])})
    except TypeError:           # (the backward calls what is not an op: not kept)
        return
    os.makedirs(os.path.dirname(_joint_path(key)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=os.path.dirname(_joint_path(key)))
    with os.fdopen(fd, "wb") as f:
        f.write(entry)
    os.replace(tmp, _joint_path(key))
    toolchain.used[key + ".joint"] = _joint_path(key)


class Compiled:
    """A captured function's forward (and backward) graphs, compiled to C and Python."""

    def __init__(self, graphs, leaf_slots, template, n_in, diff, live, consts, module,
                 programs=None, saved=None, dyn=(), made=None):
        self._graphs, self.leaf_slots, self.template, self.n_in, self.diff = \
            graphs, leaf_slots, template, n_in, diff
        # dyn: groups of (input, axis) sharing one dynamic size; made: the tensors made in
        # Python that follow them (a fill or an arange: made again for each call's sizes)
        self.dyn, self.made, self.ranges = dyn, made or {}, [(g, 2, float("inf")) for g in dyn]
        self.live, self.consts, self.module = live, consts, module
        self.programs = programs or [cgen.build(g) for g in self.graphs]
        # (names of the saved nodes: see _keep_values; the runners' code objects, from disk)
        self.saved, self.eager, self.code = saved, None, None

    @property
    def graphs(self):
        """The forward and backward graphs (read from JSON on first use, after the disk)."""
        self._graphs = [loads(g) if type(g) is str else g for g in self._graphs]
        return self._graphs

    @classmethod
    def joint(cls, rec, module, dyn=()):
        """The program of a joint recording (``_record``): the nodes before ``rec.split`` are
        the forward, those after it the backward, whose reads of forward values the forward
        returns (saved)."""
        split, diff, out_nodes, grad_nodes = rec.split, rec.diff, rec.out_nodes, rec.grad_nodes
        nodes = [n for n in rec.graph._nodes if n.op != "output"]
        fwd, bwd = nodes[:split], nodes[split:]
        tangents = [n for n in bwd if n.op == "placeholder"]
        bset = set(bwd)
        saved = list(dict.fromkeys(a for n in bwd for a in n.all_input_nodes if a not in bset))
        saved += [g for g in grad_nodes if g is not None and g not in bset and g not in saved]
        graphs = [_subgraph(fwd, [], (tuple(out_nodes), tuple(saved)))]
        if diff:
            graphs.append(_subgraph([n for n in bwd if n not in tangents], saved + tangents,
                                    tuple(grad_nodes)))
        places = [p for p in fwd if p.op == "placeholder"]
        slots = [("in", places.index(n)) if n.op == "placeholder" else ("attr", n.target)
                 for n in rec.leaf_nodes]
        return cls(graphs, slots, rec.out, len(rec.inputs), diff, rec.live, rec.constants,
                   module, saved=[n.name for n in saved], dyn=dyn, made=rec.symbolic)

    def load(self, buffers=False):
        """Compile (or find in the disk cache) the C source and bind the runners. Where the
        capturing call needs no kernel (it returns the capture's values and its backward is
        interpreted: ``_Run``), a library not on disk is compiled in the background, and bound
        when a call first needs it."""
        blocks = [b for p in self.programs for b in p[1].split("\n\n")]
        self.runs = toolchain.load("\n\n".join(dict.fromkeys(blocks)),    # (kernels both use)
                                   later=self.eager is not None and not self.dyn)
        self.attrs = [p[3] for p in self.programs]
        self.buffers, self.generation = buffers, 0
        if not self.compiling():
            self._bind(self.runs)
        return self

    def compiling(self):
        return type(self.runs) is toolchain.Later

    def _bind(self, lib):
        code = self.code or [p[0] for p in self.programs]
        self.runs = [toolchain.make(c, p[2], p[4], lib, {} if self.buffers else None)
                     for c, p in zip(code, self.programs)]

    def attr(self, target, sz=()):
        if target in self.made:     # (a fill or an arange of this call's sizes)
            (kind, a, *b, shape), t = self.made[target], self.consts[target]
            shape = [d.value(sz) if isinstance(d, Sz) else d for d in shape]
            return Tensor._wrap(backend(t.device).xp.asarray(
                np.full(shape, a) if kind == "fill" else a + b[0] * np.arange(shape[0]),
                t._data.dtype), t.device)
        if target in self.live:
            return self.live[target]
        if target in self.consts:
            return self.consts[target]
        return fetch_attr(self.module, target)

    def _own(self, outs):
        """Outputs the caller may keep: copies of kept buffers (reused by the next call)."""
        return [Tensor._wrap(o._data.copy(), o.device) if self.buffers and
                isinstance(o, Tensor) else o for o in outs]

    def _forward(self, flat, attrs, sz):
        """The forward's outputs and saved values (the capture's on the call right after it)."""
        eager, self.eager = self.eager, None
        if eager is not None:
            return eager
        if self.compiling():
            self._bind(self.runs.result())
        with no_grad():
            return self.runs[0](*flat, *attrs, _s=sz)

    def fits(self, args, kwargs):
        """Whether the inputs' dynamic sizes are what this program takes: one size per group,
        in its range (2 and up, or ``mark_dynamic``'s)."""
        flat = flatten_tensors((args, kwargs))
        return all(len({flat[i].shape[ax] for i, ax in g}) == 1 and
                   lo <= flat[g[0][0]].shape[g[0][1]] <= hi for g, lo, hi in self.ranges)

    def __call__(self, args, kwargs):
        flat = flatten_tensors((args, kwargs))
        sz = [flat[g[0][0]].shape[g[0][1]] for g in self.dyn] if self.dyn else ()
        attrs = [self.attr(t, sz) for t in self.attrs[0]]
        if len(self.programs) == 1:
            outs, _ = self._forward(flat, attrs, sz)
            outs = self._own(outs)
        else:
            leaves = [flat[i] if kind == "in" else self.attr(i) for kind, i in self.leaf_slots]
            outs = _Run.apply(self, flat, attrs, sz, *leaves)
        it = iter(outs)
        return _map_out(self.template, lambda t: next(it))


class _Run(Function):
    """The compiled forward as one autograd node whose backward is the compiled backward."""

    @staticmethod
    def forward(ctx, prog, flat, attrs, sz, *leaves):
        outs, saved = prog._forward(flat, attrs, sz)
        prog.generation += 1
        # an output also saved is kept as a history-less alias: the output itself (whose
        # grad_fn is ctx) would make a ctx <-> tensor cycle that only the cyclic GC frees, so
        # each step's activations would outlive it and the heap grow until glibc trims it
        saved = [s._alias() if any(s is o for o in outs) else s for s in saved]
        ctx.prog, ctx.saved, ctx.gen, ctx.sz = prog, saved, prog.generation, sz
        ctx.interpret = prog.compiling()    # (the capturing call, its library still compiling)
        ctx.shapes = [(outs[j].shape, outs[j]._data.dtype, outs[j].device) for j in prog.diff]
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
        # (a gradient of another dtype, which eager casts, would be read as the kernel's)
        tangents = [Tensor._wrap(backend(dev).xp.zeros(s, d) if gs[j] is None
                                 else gs[j]._data.astype(d, copy=False), dev)
                    for j, (s, d, dev) in zip(prog.diff, ctx.shapes)]
        into = {} if ctx.interpret else grads_in_place(ctx)     # (kernels add into these .grad)
        with no_grad():
            if ctx.interpret:       # (the backward graph's OpDefs, as eager code runs them)
                run = Interpreter(None, graph=prog.graphs[1])
                run.fetch_attr = prog.attr
                grads = list(run.run(*ctx.saved, *tangents))
            else:
                grads = list(prog.runs[1](*ctx.saved, *tangents, *[prog.attr(t, ctx.sz) for t in
                                                                     prog.attrs[1]],
                                          _acc=into, _s=ctx.sz))
        for p in [p for p, g in into.items() if getattr(grads[p], "_data", 0) is g._data]:
            into[p]._bump_version()
            grads[p] = None
        return (None,) * 4 + tuple(grads)

