"""The sharding unit both FSDP APIs are built on: the parameters one ``fully_shard`` or
``FullyShardedDataParallel`` call manages, spread over a process group.

Layout. A unit is a list of *pieces*, each split by rows as ``torch.chunk`` over the group:
FSDP2 has one piece per parameter (dim-0 shards, kept as DTensors); FSDP1 has one piece, the
concatenation of the unit's parameters (the FlatParameter; every rank's shard is padded to the
same length, as torch's). A rank's contribution to a collective is its chunk of every piece,
each padded to the chunk size, back to back; so one unit is one ``all_gather_into_tensor``
before forward (and before backward, if it was freed) and one ``reduce_scatter_tensor`` of
the gradients after backward.

Unsharding fills one persistent leaf ``Parameter`` per original parameter (in the
``param_dtype`` of the mixed-precision policy); resharding swaps its array for an empty one,
so the full values are freed even where autograd saved the leaf (its backward reads the array
the pre-backward all-gather put back). Gradients land in those leaves; a
post-accumulate-grad hook counts them and, when the last arrives, reduce-scatters them (in
``reduce_dtype``), divides by the group size and adds them into the sharded ``.grad``.
"""
import weakref

import numpy as np

from ..._tensor import Tensor
from ...autograd import grad_mode
from ...nn.parameter import Parameter
from .. import distributed_c10d as c10d
from ..tensor import _rows


def _npdt(dtype):
    from ... import empty
    return empty(0, dtype=dtype)._data.dtype


_MANAGED = weakref.WeakValueDictionary()   # id -> original parameter a unit took over


class Unit:
    """See the module docstring. ``slots``: (owner module, attribute name, index into
    ``params``) for every place a parameter is registered (tied parameters have several)."""

    def __init__(self, params, slots, group, *, flat, reshard_after_forward, param_dtype=None,
                 reduce_dtype=None, replicate=False, replica_group=None):
        self.slots, self.group, self.flat, self.replicate = slots, group, flat, replicate
        self.replica_group = replica_group      # hybrid: gradients all-reduced across it too
        if not isinstance(reshard_after_forward, (bool, type(None))):
            raise NotImplementedError("fully_shard: reshard_after_forward as an int (resharding "
                                      "to a smaller mesh) is not implemented in ember")
        self.reshard_after_forward = reshard_after_forward
        self.world = 1 if replicate else c10d.get_world_size(group)
        self.dp_size = c10d.get_world_size(group) * (
            1 if replica_group is None else c10d.get_world_size(replica_group))
        self.rank = 0 if replicate else c10d.get_rank(group)
        for p in params:
            if _MANAGED.get(id(p)) is p:
                name = next(f"{type(o).__name__}.{n}" for o, n, i in slots if params[i] is p)
                raise ValueError(f"FSDP: parameter {name} is already managed by another FSDP "
                                 "unit (a parameter shared between units); apply the sharding "
                                 "to a module that contains every module using it")
        _MANAGED.update((id(p), p) for p in params)
        dtypes = sorted({str(p.dtype) for p in params})
        if len(dtypes) > 1:
            raise ValueError(f"FSDP: the parameters of one unit must share a dtype (they are "
                             f"all-gathered as one buffer), got {dtypes} for "
                             f"{[n for _, n, _ in slots]}")
        self.dtype = params[0].dtype if params else None
        self.param_dtype = param_dtype or self.dtype
        self.reduce_dtype = reduce_dtype or self.param_dtype
        self.shapes = [tuple(p.shape) for p in params]
        self.numels = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        if flat:
            self.pieces = [(sum(self.numels), 1)]
        else:
            self.pieces = [(s[0] if s else 1, int(np.prod(s[1:], dtype=np.int64))) for s in
                           self.shapes]
        self.chunks = [_rows(n, self.world, 0)[2] for n, _ in self.pieces]
        self.segs = [c * rest for c, (_, rest) in zip(self.chunks, self.pieces)]
        self.offs = list(np.cumsum([0] + self.segs[:-1]))
        self.seg = sum(self.segs)
        self.unsharded = [Parameter(Tensor._wrap(np.empty(0, p._data.dtype), p.device),
                                    p.requires_grad) for p in params]
        self.hooks = [u.register_post_accumulate_grad_hook(self._grad_ready)
                      for u in self.unsharded if u.requires_grad]
        self.is_unsharded, self.sync, self.expected, self.received = False, True, 0, 0
        self.pending = None             # an all-gather in flight: a function that finishes it
        # ... started by prefetch(): unused in its forward and backward, it predates a step
        self.stale = False
        # prefetching: units to all-gather ahead (None: none; ORDER: as the recorded order)
        self.forward_prefetch, self.backward_prefetch, self.prefetch_post = None, ORDER, False
        self.order = {"pre": [], "post": [], "last": []}    # shared by a root's units
        self._full_arrays = [p._data for p in params]     # consumed by the owner's layout

    # ---------------------------------------------------------------- layout
    def local_pieces(self, fulls):
        """This rank's chunk of each piece of the full arrays ``fulls`` (new arrays); FSDP1's
        flat chunk is padded to the chunk size."""
        if self.flat:
            flat = np.concatenate([f.reshape(-1) for f in fulls]) if fulls else np.empty(0)
            a, b, c = _rows(flat.size, self.world, self.rank)
            out = np.zeros(c, flat.dtype)
            out[:b - a] = flat[a:b]
            return [out]
        out = []
        for f, (n, rest) in zip(fulls, self.pieces):
            a, b, _ = _rows(n, self.world, self.rank)
            out.append(np.array(f.reshape((n,) + f.shape[1:] if f.ndim else (1,))[a:b]))
        return out

    def _pack(self, locals_, dtype):
        send = np.zeros(self.seg, dtype)
        for loc, off in zip(locals_, self.offs):
            send[off:off + loc.size] = loc.reshape(-1)
        return send

    def _fulls(self, out):
        """Each parameter's full array from the gathered (world, seg) buffer."""
        pieces = [out[:, off:off + s].reshape(-1)[:n * rest] for off, s, (n, rest) in
                  zip(self.offs, self.segs, self.pieces)]
        if self.flat:
            ends = np.cumsum(self.numels)
            pieces = [pieces[0][e - k:e] for e, k in zip(ends, self.numels)]
        return [p.reshape(s) for p, s in zip(pieces, self.shapes)]

    # ---------------------------------------------------------------- unshard / reshard
    def local_arrays(self):
        raise NotImplementedError       # the owner (FSDP1 or FSDP2 state) says where shards live

    def gather(self, locals_, dtype, async_op=False):
        """The full arrays of the parameters from every rank's ``locals_`` (arrays laid out as
        ``local_arrays()``: the shards, or optimizer state of their shape), in ``dtype``; with
        ``async_op``, the all-gather is started and a function that waits returns them."""
        send = Tensor._wrap(self._pack(locals_, dtype))
        recv, work = send, None
        if self.world > 1:
            recv = Tensor._wrap(np.empty(self.world * self.seg, dtype))
            work = c10d.all_gather_into_tensor(recv, send, group=self.group, async_op=True)

        def finish():
            if work is not None:
                work.wait()
            return self._fulls(recv._data.reshape(self.world, self.seg))
        return finish if async_op else finish()

    def unshard(self, async_op=False):
        """All-gather the parameters into the leaves; with ``async_op``, only start it (the
        next ``unshard()`` waits)."""
        if self.is_unsharded or not self.unsharded:
            return
        if self.pending is None:
            self.pending = self.gather(self.local_arrays(), _npdt(self.param_dtype), True)
        if async_op:
            return
        fulls, self.pending, self.stale = self.pending(), None, False
        for u, f in zip(self.unsharded, fulls):
            u._data, u.dtype = f, Tensor._dtype_of(f)
            u._storage = None
        self.is_unsharded = True
        self.show(True)

    def reshard(self):
        if self.pending is not None:        # a prefetch nobody used: finish it, drop it
            self.pending()
            self.pending, self.stale = None, False
        if not self.is_unsharded:
            return
        for u in self.unsharded:
            # NOTE: a fresh array, not a view: ``a[:0]`` would keep the gathered buffer alive
            u._data, u._storage = np.empty(0, u._data.dtype), None
        self.is_unsharded = False
        self.show(False)

    def show(self, full):
        """Called as the unit unshards (True) and reshards: the owner shows the full
        parameters or the shards on the modules."""

    def prefetch(self, targets, kind):
        """Start the all-gathers of ``targets`` (units, or ORDER: the unit after this one in
        the recorded order of ``kind``: "last" forward's pre-forward hooks, or this forward's
        post-forward hooks reversed, the order of backward)."""
        if targets is ORDER:
            seq = self.order[kind] if kind == "last" else self.order[kind][::-1]
            targets = seq[seq.index(self) + 1:][:1] if self in seq else []
        for u in targets or ():
            u.unshard(async_op=True)
            u.stale = u.pending is not None

    def write_back(self):
        """Copy the unsharded values into this rank's shards (after summon_full_params)."""
        for dst, src in zip(self.local_arrays(), self.local_pieces([u._data for u in
                                                                    self.unsharded])):
            dst[...] = src.reshape(dst.shape)

    # ---------------------------------------------------------------- forward / backward
    def pre_forward(self):
        self.unshard(async_op=True)
        self.prefetch(self.forward_prefetch, "last")
        self.unshard()
        if self.unsharded:
            self.order["pre"].append(self)
        if grad_mode.is_grad_enabled():
            self.expected = sum(u.requires_grad for u in self.unsharded)
            self.received = 0

    def post_forward(self, out, is_root):
        if grad_mode.is_grad_enabled():
            from ...nn.parallel.distributed import _tensors
            for t in _tensors(out):
                if t.requires_grad:
                    t.register_hook(self._pre_backward)
        if self.unsharded:
            self.order["post"].append(self)
        raf = self.reshard_after_forward
        if not grad_mode.is_grad_enabled() or (not is_root if raf is None else raf):
            self.reshard()

    def _pre_backward(self, grad):
        self.unshard(async_op=True)
        if not self.prefetch_post:
            self.prefetch(self.backward_prefetch, "post")
        self.unshard()

    def _grad_ready(self, u):
        self.received += 1
        if self.received == self.expected:
            self.post_backward()

    def post_backward(self):
        self.received = 0          # (expected stays: a retain_graph backward counts again)
        if self.prefetch_post:
            self.prefetch(self.backward_prefetch, "post")
        if self.sync and any(u.grad is not None for u in self.unsharded):
            self.reduce_grads()
        self.reshard()

    def reduce_grads(self):
        rdt = _npdt(self.reduce_dtype)
        buf = np.zeros((self.world, self.seg), rdt)         # each rank's chunks, padded
        if self.flat:               # one piece: the padded rows of buf are the flat gradient
            flat, pos = buf.reshape(-1), 0
            for u, k in zip(self.unsharded, self.numels):
                if u.grad is not None:
                    flat[pos:pos + k] = u.grad._data.reshape(-1)
                pos += k
        else:
            for u, off, c, (n, rest) in zip(self.unsharded, self.offs, self.chunks,
                                             self.pieces):
                g = None if u.grad is None else u.grad._data.reshape(-1)
                for r in range(self.world if g is not None else 0):
                    a, b = min(r * c, n) * rest, min((r + 1) * c, n) * rest
                    buf[r, off:off + b - a] = g[a:b]
        for u in self.unsharded:
            u.grad = None
        t = Tensor._wrap(buf.reshape(-1))
        if self.replicate:
            c10d.all_reduce(t, group=self.group)
        elif self.world > 1:
            t = Tensor._wrap(np.empty(self.seg, rdt))
            c10d.reduce_scatter_tensor(t, Tensor._wrap(buf.reshape(-1)), group=self.group)
        if self.replica_group is not None:
            c10d.all_reduce(t, group=self.replica_group)
        red = t._data
        red /= np.asarray(self.dp_size, rdt)
        locs = []
        for loc, off in zip(self.local_arrays(), self.offs):
            locs.append(red[off:off + loc.size].reshape(loc.shape).astype(loc.dtype))
        self.accumulate_grads(locs)

    def accumulate_grads(self, arrays):
        raise NotImplementedError


def collect(module, is_unit, ignored=()):
    """The parameters ``module`` manages: its own and its descendants', except those under a
    descendant that is already a unit (``is_unit(m)``) and ``ignored``. Returns (params,
    slots) with one entry per distinct parameter and one slot per registration."""
    params, slots, index, ignored = [], [], {}, {id(p) for p in ignored}
    # NOTE: a loop, not a recursive closure: that would be a reference cycle holding the
    # original full parameters until the next garbage collection
    stack = [module]
    while stack:
        m = stack.pop()
        for name, p in m._parameters.items():
            if p is None or id(p) in ignored:
                continue
            if id(p) not in index:
                index[id(p)] = len(params)
                params.append(p)
            slots.append((m, name, index[id(p)]))
        stack.extend(c for c in reversed(list(m._modules.values()))
                     if c is not None and not is_unit(c))
    return params, slots


def cast_floats(obj, dtype):
    """``obj`` with its floating-point tensors cast to ``dtype`` (mixed-precision inputs)."""
    if isinstance(obj, Tensor):
        return obj.to(dtype) if obj.is_floating_point() and obj.dtype != dtype else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(cast_floats(o, dtype) for o in obj)
    if isinstance(obj, dict):
        return {k: cast_floats(v, dtype) for k, v in obj.items()}
    return obj


DEPTH = [0]         # FSDP forwards in progress: the outermost is the root of this forward
ORDER = "order"     # prefetch the next unit in the recorded order (see Unit.prefetch)


def enter_forward(root_module, units):
    """Called at each FSDP forward; the root's also finishes the backward of units whose
    parameters did not all receive a gradient (unused parameters), so they reshard and
    reduce-scatter what they got, on every rank in the same order."""
    is_root = DEPTH[0] == 0
    DEPTH[0] += 1
    if is_root:
        mine = units(root_module)
        order = {"pre": [], "post": [], "last": mine[0].order["pre"] if mine else []}
        for u in mine:
            if u.received:
                u.post_backward()
            if u.stale:
                u.reshard()
            u.order = order
    return is_root
