"""DistributedDataParallel: one model replica per process, gradients averaged over the group
during backward, as ``torch.nn.parallel.DistributedDataParallel``.

Parameters go into buckets of about ``bucket_cap_mb`` (the first one 1 MiB, as torch), in
reverse registration order, which is roughly the order backward produces their gradients.
A post-accumulate-grad hook on each parameter counts it ready; when a bucket is full its
gradients are copied into one flat buffer and the comm hook (by default an async all-reduce
of buffer / world_size) starts, so communication overlaps the rest of backward. Buckets start
strictly in index order on every rank, as MPI and NCCL need collectives in the same order.
When the last bucket has started, the hook waits for all of them and writes the averages back
into ``.grad``.
"""
import contextlib

import numpy as np

from ... import distributed as dist
from ...autograd import grad_mode
from ..modules.module import Module

_FIRST_BUCKET_BYTES = 1024 * 1024


class GradBucket:
    """The flat gradient buffer a comm hook reduces, as ``torch.distributed.GradBucket``."""

    def __init__(self, index, buffer, params, offsets, is_last):
        self._index, self._buffer, self._params, self._offsets, self._last = \
            index, buffer, params, offsets, is_last

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def set_buffer(self, buffer):
        self._buffer.copy_(buffer)

    def is_last(self):
        return self._last

    def parameters(self):
        return list(self._params)

    def gradients(self):
        return [self._buffer[o:o + p.numel()].view(p.shape)
                for p, o in zip(self._params, self._offsets)]


def _allreduce_avg(process_group, bucket):
    from ...distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    return allreduce_hook(process_group, bucket)


class _Bucket:
    def __init__(self, index, params):
        self.index, self.params = index, params
        self.offsets = list(np.cumsum([0] + [p.numel() for p in params[:-1]]))
        self.numel = sum(p.numel() for p in params)
        self.buffer = None
        self.pending = 0
        self.future = None


def _broadcast_coalesced(tensors, group, src=None):
    """Broadcast ``tensors`` in place from global rank ``src`` (default: the group's first),
    one broadcast per dtype. (Also FSDP's ``sync_module_states`` and ZeRO's step.)"""
    by_dtype = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    with grad_mode.no_grad():
        for ts in by_dtype.values():
            from ... import cat
            flat = cat([t.detach().reshape(-1) for t in ts])
            dist.broadcast(flat, src=group.ranks[0] if src is None else src, group=group)
            off = 0
            for t in ts:
                t.copy_(flat[off:off + t.numel()].view(t.shape))
                off += t.numel()


class DistributedDataParallel(Module):
    """Data parallelism over processes: wrap the model, train as usual, and every rank ends
    backward with the same averaged gradients.

    Example:
        >>> import ember, ember.distributed as dist
        >>> from ember.nn.parallel import DistributedDataParallel as DDP
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> model = DDP(ember.nn.Linear(2, 1))
        >>> model(ember.ones(4, 2)).sum().backward()
        >>> model.module.weight.grad.shape, list(model.state_dict())[0]
        (torch.Size([1, 2]), 'module.weight')
        >>> dist.destroy_process_group()
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False,
                 delay_all_reduce_named_params=None, param_to_hook_all_reduce=None,
                 mixed_precision=None, device_mesh=None):
        super().__init__()
        if not dist.is_initialized() and process_group is None:
            raise ValueError("Default process group has not been initialized, please make "
                             "sure to call init_process_group.")
        self.module = module
        self.process_group = process_group or dist.group.WORLD
        self.device_ids, self.output_device, self.dim = device_ids, output_device, dim
        self.broadcast_buffers, self.find_unused_parameters = broadcast_buffers, \
            find_unused_parameters
        self.gradient_as_bucket_view, self.static_graph = gradient_as_bucket_view, static_graph
        self.require_backward_grad_sync = self.require_forward_param_sync = True
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 2 ** 20)
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't "
                               "have any parameter that requires a gradient.")
        devices = {p.device.type for p in params}
        if len(devices) > 1:
            raise ValueError("DistributedDataParallel's input module must be on the same type "
                             f"of devices, but input module parameters are on {devices}")
        self._params = params
        self._sync_module_states()
        self._buckets = self._make_buckets(params)
        self._bucket_of = {id(p): (b, i) for b in self._buckets for i, p in enumerate(b.params)}
        self._comm_hook, self._comm_state = _allreduce_avg, None
        self._syncing, self._next, self._unused, self._joining = False, 0, set(), False
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in params]

    # ---------------------------------------------------------------- construction
    def _coalesced_broadcast(self, tensors, src=None):
        _broadcast_coalesced(tensors, self.process_group, src)

    def _sync_module_states(self):
        states = [*self.module.parameters(), *self.module.buffers()]
        if states:
            self._coalesced_broadcast(states)

    def _make_buckets(self, params):
        buckets, cur, size, cap = [], [], 0, _FIRST_BUCKET_BYTES
        for p in reversed(params):
            if cur and (size + p.numel() * p.element_size() > cap or p.dtype != cur[0].dtype):
                buckets.append(_Bucket(len(buckets), cur))
                cur, size, cap = [], 0, self.bucket_bytes_cap
            cur.append(p)
            size += p.numel() * p.element_size()
        buckets.append(_Bucket(len(buckets), cur))
        from ... import zeros
        for b in buckets:
            b.buffer = zeros(b.numel, dtype=b.params[0].dtype, device=b.params[0].device)
            b.views = [b.buffer[o:o + p.numel()].view(p.shape)
                       for p, o in zip(b.params, b.offsets)]
            if self.gradient_as_bucket_view:
                for p, v in zip(b.params, b.views):
                    if p.grad is not None:
                        v.copy_(p.grad)
                    p.grad = v
        return buckets

    # ---------------------------------------------------------------- forward/backward
    def forward(self, *inputs, **kwargs):
        if self._joining:
            self._notify_join(1)                # still training: matched by joined ranks' 0
        if self.broadcast_buffers and self.require_forward_param_sync:
            bufs = list(self.module.buffers())
            if bufs:
                self._coalesced_broadcast(bufs)
        sync = grad_mode.is_grad_enabled() and self.require_backward_grad_sync
        if sync:
            self._prepare()
        out = self.module(*inputs, **kwargs)
        if sync and (self.find_unused_parameters or self.static_graph):
            self._mark_unused(out)
        return out

    def _prepare(self):
        self._syncing, self._next, self._unused = True, 0, set()
        for b in self._buckets:
            b.pending, b.future = len(b.params), None

    def _mark_unused(self, out):
        """Parameters the output does not depend on: their share of the buckets counts as
        ready now (zeros), as torch's ``find_unused_parameters``."""
        seen, stack, used = set(), [], set()
        for t in _tensors(out):
            if t.grad_fn is not None:
                stack.append(t.grad_fn)
            elif t.requires_grad:
                used.add(id(t))
        while stack:
            node = stack.pop()
            if id(node) in seen or node is None:
                continue
            seen.add(id(node))
            var = getattr(node, "variable", None)
            if var is not None:
                used.add(id(var))
            stack.extend(n for n, _ in node.next_functions)
        for p in self._params:
            if id(p) not in used:
                self._unused.add(id(p))
                self._bucket_of[id(p)][0].pending -= 1

    def _grad_ready(self, p):
        if not self._syncing:
            return
        b, _ = self._bucket_of[id(p)]
        b.pending -= 1
        if self._next:              # MPI moves started buckets only while some call polls it
            dist.distributed_c10d._resolve(self.process_group).engine.progress()
        self._launch_ready()

    def _launch_ready(self):
        while self._next < len(self._buckets) and self._buckets[self._next].pending == 0:
            b = self._buckets[self._next]
            with grad_mode.no_grad():
                for p, v in zip(b.params, b.views):
                    if p.grad is v:
                        continue                # gradient_as_bucket_view: already in place
                    if p.grad is None or id(p) in self._unused:
                        v.zero_()
                    else:
                        v.copy_(p.grad)
                gb = GradBucket(b.index, b.buffer, b.params, b.offsets,
                                b.index == len(self._buckets) - 1)
                b.future = self._comm_hook(self._comm_state if self._comm_hook is not
                                           _allreduce_avg else self.process_group, gb)
            self._next += 1
        if self._next == len(self._buckets):
            self._finalize()

    def _finalize(self):
        self._syncing = False
        used_anywhere = None
        if self.find_unused_parameters:         # on every rank: collectives match by order
            used_anywhere = self._used_anywhere([id(p) not in self._unused for p in self._params])
        with grad_mode.no_grad():
            for b in self._buckets:
                result = b.future.wait()
                if result is not b.buffer:
                    b.buffer.copy_(result.reshape(-1))
        with grad_mode.no_grad():
            for i, p in enumerate(self._params):
                if used_anywhere is not None and not used_anywhere[i]:
                    continue                    # unused on every rank: .grad stays as it was
                b, j = self._bucket_of[id(p)]
                if self.gradient_as_bucket_view:
                    p.grad = b.views[j]
                elif p.grad is None:
                    p.grad = b.views[j].clone()
                else:
                    p.grad.copy_(b.views[j])

    # ---------------------------------------------------------------- public API
    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward accumulates gradients locally without communicating; the first
        backward after it averages the accumulated gradients."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def register_comm_hook(self, state, hook):
        """``hook(state, bucket) -> Future`` of the reduced bucket buffer replaces the
        default all-reduce (see ``ember.distributed.algorithms.ddp_comm_hooks``)."""
        if self._comm_hook is not _allreduce_avg:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be "
                               "called once.")
        self._comm_hook, self._comm_state = hook, state

    def _used_anywhere(self, used):
        from ... import tensor
        flags = tensor([int(u) for u in used])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.process_group)
        return flags.tolist()

    def _notify_join(self, active):
        from ... import tensor
        t = tensor([active])
        dist.all_reduce(t, group=self.process_group)
        return t.item()

    def _shadow_step(self):
        """What a training rank's step communicates, with zeros: a joined rank runs this
        while others still train, so their collectives find a partner."""
        if self.broadcast_buffers and self.require_forward_param_sync:
            bufs = list(self.module.buffers())
            if bufs:
                self._coalesced_broadcast(bufs)
        with grad_mode.no_grad():
            futs = []
            for b in self._buckets:
                b.buffer.zero_()
                gb = GradBucket(b.index, b.buffer, b.params, b.offsets,
                                b.index == len(self._buckets) - 1)
                futs.append(self._comm_hook(self._comm_state if self._comm_hook is not
                                            _allreduce_avg else self.process_group, gb))
            if self.find_unused_parameters:
                self._used_anywhere([False] * len(self._params))
            for f in futs:
                f.wait()

    @contextlib.contextmanager
    def join(self, divide_by_initial_world_size=True, enable=True,
             throw_on_early_termination=False):
        """Train on uneven inputs: a rank that runs out of batches leaves the ``with`` block
        and, until every rank has, takes part in the others' steps with zero gradients (the
        average stays divided by the initial world size, torch's default). Then every rank
        takes the parameters of a rank that finished last.

        NOTE: only ``divide_by_initial_world_size=True`` is implemented."""
        if not enable:
            yield
            return
        if not divide_by_initial_world_size:
            raise NotImplementedError("DistributedDataParallel.join(divide_by_initial_"
                                      "world_size=False) is not implemented in ember yet")
        self._joining = True
        try:
            yield
            shadowed = 0
            while self._notify_join(0) > 0:
                if throw_on_early_termination:
                    raise RuntimeError(f"Rank {dist.get_rank()} exhausted all inputs.")
                self._shadow_step()
                shadowed += 1
        finally:
            self._joining = False
        from ... import tensor
        last = tensor([dist.get_rank(self.process_group) if shadowed == 0 else -1])
        dist.all_reduce(last, op=dist.ReduceOp.MAX, group=self.process_group)
        src = self.process_group.ranks[int(last.item())]
        self._coalesced_broadcast([*self.module.parameters(), *self.module.buffers()], src)

    def _set_static_graph(self):
        self.static_graph = True


def _tensors(out):
    from ..._tensor import Tensor
    if isinstance(out, Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for o in out:
            yield from _tensors(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _tensors(o)
