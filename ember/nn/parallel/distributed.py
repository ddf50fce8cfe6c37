"""DistributedDataParallel: one model replica per process, gradients averaged over the group
during backward, as ``torch.nn.parallel.DistributedDataParallel``.

Parameters go into buckets of about ``bucket_cap_mb`` (the first one 1 MiB, as torch), in
reverse registration order, which is roughly the order backward produces their gradients; a
``distributed.Reducer`` (``self.reducer``, as torch's) reduces them during backward.
"""
import contextlib

from ... import distributed as dist
from ...autograd import grad_mode
from ..modules.module import Module

_FIRST_BUCKET_BYTES = 1024 * 1024


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
        self.gradient_as_bucket_view, self.static_graph = gradient_as_bucket_view, False
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
        # NOTE: the buffers as at construction, as torch's ``modules_buffers``: walking the
        # module tree for them at every forward cost ~50 us of a 3-4 ms step
        self._module_buffers = list(module.buffers())
        self._sync_module_states()
        names = {id(p): n for n, p in module.named_parameters()}
        self.reducer = dist.Reducer(
            params, _bucket_indices(params, self.bucket_bytes_cap), [], self.process_group,
            bucket_bytes_cap=self.bucket_bytes_cap,
            find_unused_parameters=find_unused_parameters,
            gradient_as_bucket_view=gradient_as_bucket_view,
            param_to_name_mapping={i: names.get(id(p), str(i)) for i, p in enumerate(params)})
        self.logger = dist.Logger(self.reducer)
        self.logger.set_construction_data_and_log(
            type(module).__name__, device_ids, output_device, broadcast_buffers,
            any(type(m).__name__ == "SyncBatchNorm" for m in module.modules()), static_graph)
        if static_graph:
            self._set_static_graph()
        self._joining = False

    # ---------------------------------------------------------------- construction
    def _coalesced_broadcast(self, tensors, src=None):
        _broadcast_coalesced(tensors, self.process_group, src)

    def _sync_buffers(self):
        if self.broadcast_buffers and self.require_forward_param_sync and self._module_buffers:
            self._coalesced_broadcast(self._module_buffers)

    def _sync_module_states(self):
        states = [*self.module.parameters(), *self.module.buffers()]
        if states:
            self._coalesced_broadcast(states)

    # ---------------------------------------------------------------- forward/backward
    def forward(self, *inputs, **kwargs):
        if self._joining:
            self._notify_join(1)                # still training: matched by joined ranks' 0
        self._sync_buffers()
        sync = grad_mode.is_grad_enabled() and self.require_backward_grad_sync
        if sync:
            self.reducer.prepare_for_forward()
        out = self.module(*inputs, **kwargs)
        if sync:
            self.reducer.prepare_for_backward(
                list(_tensors(out)) if self.find_unused_parameters or self.static_graph else [])
        return out

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
        """``hook(state, bucket) -> Future`` of the reduced bucket buffer (a
        ``distributed.GradBucket``) replaces the default all-reduce (see
        ``ember.distributed.algorithms.ddp_comm_hooks``)."""
        self.reducer._register_comm_hook(state, hook)

    def register_builtin_comm_hook(self, comm_hook_type):
        """A ``distributed.BuiltinCommHookType``: ALLREDUCE or FP16_COMPRESS."""
        self.reducer._register_builtin_comm_hook(comm_hook_type)

    def _get_ddp_logging_data(self):
        return self.logger._get_ddp_logging_data()

    def _notify_join(self, active):
        from ... import tensor
        t = tensor([active])
        dist.all_reduce(t, group=self.process_group)
        return t.item()

    def _shadow_step(self):
        """What a training rank's step communicates, with zeros: a joined rank runs this
        while others still train, so their collectives find a partner."""
        self._sync_buffers()
        with grad_mode.no_grad():
            futs = [self.reducer._run_comm_hook(b)
                    for b in self.reducer._get_zeros_like_grad_buckets()]
            if self.find_unused_parameters:
                self.reducer._used_anywhere([False] * len(self._params))
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
        self.logger._set_uneven_input_join()
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
        self.reducer._set_static_graph()
        self.logger._set_static_graph()


def _bucket_indices(params, cap):
    """Parameter indices per bucket: reverse registration order, a new bucket when the next
    gradient would pass the cap (1 MiB for the first) or changes dtype."""
    buckets, cur, size, first = [], [], 0, True
    for i in reversed(range(len(params))):
        p = params[i]
        limit = _FIRST_BUCKET_BYTES if first else cap
        if cur and (size + p.numel() * p.element_size() > limit or
                    p.dtype != params[cur[0]].dtype):
            buckets.append(cur)
            cur, size, first = [], 0, False
        cur.append(i)
        size += p.numel() * p.element_size()
    return buckets + [cur]


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
