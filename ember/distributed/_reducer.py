"""DDP's gradient reduction, as torch's ``Reducer``, ``GradBucket`` and ``Logger``
(``torch._C._distributed_c10d``); ``nn.parallel.DistributedDataParallel`` builds one Reducer.

The Reducer lays each bucket's gradients out in one flat buffer (``bucket_indices``: the
parameter indices of each bucket, in buffer order). A post-accumulate-grad hook on each
parameter copies its gradient into the buffer (divided by the world size on the way when no
comm hook is registered, as torch's) and counts it ready; when a bucket is full the comm hook
(by default an async all-reduce, a sum) starts, so communication overlaps the rest of
backward. Buckets start strictly in index order on every
rank, as MPI and NCCL match collectives by order. When the last bucket has started, the
hook waits for all of them and writes the averages into ``.grad``.
"""
import enum
import logging
import os
import time

import numpy as np

from .. import _backends
from . import distributed_c10d as c10d
from ._collectives import _write

_log = logging.getLogger("torch.distributed")


class BuiltinCommHookType(enum.IntEnum):
    """The comm hooks ``DistributedDataParallel.register_builtin_comm_hook`` takes.

    Example:
        >>> import ember.distributed as dist
        >>> dist.BuiltinCommHookType.FP16_COMPRESS
        <BuiltinCommHookType.FP16_COMPRESS: 2>
    """
    ALLREDUCE = 1
    FP16_COMPRESS = 2


class GradBucket:
    """The flat gradient buffer a DDP comm hook reduces, as ``torch.distributed.GradBucket``:
    ``buffer()``, ``gradients()`` (views of it, one per parameter), ``parameters()``,
    ``index()``, ``is_last()``, ``set_buffer()``.

    Example:
        >>> import ember, ember.distributed as dist
        >>> p = ember.nn.Parameter(ember.zeros(2, 2))
        >>> b = dist.GradBucket(0, ember.arange(4.), [p], [0], True)
        >>> b.gradients()[0]
        tensor([[0., 1.],
                [2., 3.]])
    """

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


class _Bucket:
    def __init__(self, index, params):
        from .. import zeros
        self.index, self.params = index, params
        self.offsets = [int(o) for o in np.cumsum([0] + [p.numel() for p in params[:-1]])]
        self.buffer = zeros(sum(p.numel() for p in params), dtype=params[0].dtype,
                            device=params[0].device)
        self.views = GradBucket(index, self.buffer, params, self.offsets, False).gradients()
        self.pending, self.future, self.direct = 0, None, False


class Reducer:
    """Averages the gradients of ``params`` over ``process_group`` during backward, bucket by
    bucket (``bucket_indices``), as torch's ``Reducer``. Call ``prepare_for_forward()``
    before a forward whose backward should sync and ``prepare_for_backward(outputs)`` after
    it (``outputs``: to find parameters they do not depend on; ``[]`` when
    ``find_unused_parameters`` is off).

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> lin = ember.nn.Linear(2, 1); params = list(lin.parameters())
        >>> r = dist.Reducer(params, [[1, 0]], [2 ** 20], dist.group.WORLD)
        >>> r.prepare_for_forward(); out = lin(ember.ones(3, 2)); r.prepare_for_backward([])
        >>> out.sum().backward(); lin.bias.grad
        tensor([3.])
        >>> dist.destroy_process_group()
    """

    def __init__(self, params, bucket_indices, per_bucket_size_limits, process_group,
                 expect_sparse_gradients=(), bucket_bytes_cap=25 * 2 ** 20,
                 find_unused_parameters=False, gradient_as_bucket_view=False,
                 param_to_name_mapping=None, first_bucket_bytes_cap=2 ** 20,
                 skip_all_reduce_unused_params=False, use_python_reducer=False,
                 bucket_bytes_cap_list=(), batched_grad_copy=False):
        self._params, self.process_group = list(params), process_group
        self.find_unused_parameters, self.gradient_as_bucket_view, self.bucket_bytes_cap = \
            find_unused_parameters, gradient_as_bucket_view, bucket_bytes_cap
        self.per_bucket_size_limits = list(per_bucket_size_limits)
        self.param_names = dict(param_to_name_mapping or {})
        self._buckets = [_Bucket(i, [self._params[j] for j in idx])
                         for i, idx in enumerate(bucket_indices)]
        self._bucket_of = {id(p): (b, i) for b in self._buckets for i, p in enumerate(b.params)}
        missing = [i for i, p in enumerate(self._params) if id(p) not in self._bucket_of]
        if missing:
            raise ValueError(f"Reducer: parameters {missing} are in no bucket of "
                             "bucket_indices")
        if gradient_as_bucket_view:
            for b in self._buckets:
                for p, v in zip(b.params, b.views):
                    if p.grad is not None:
                        v.copy_(p.grad)
                    p.grad = v
        self._comm_hook, self._comm_state = None, None
        self._syncing = self._started = self.static_graph = False
        self._next, self._unused, self._logger, self.num_iterations = 0, set(), None, 0
        self._times = dict.fromkeys(("fwd", "bwd", "bwd_end", "comm", "comm_end"), 0)
        self._ready_ns = [0] * len(self._params)
        self._index = {id(p): i for i, p in enumerate(self._params)}
        self._hooks = [p.register_post_accumulate_grad_hook(self._autograd_hook)
                       for p in self._params]

    # ---------------------------------------------------------------- torch's API
    def prepare_for_forward(self):
        if self._logger is not None and self.num_iterations and not self._syncing:
            self._logger.set_runtime_stats_and_log()    # the last iteration, now complete
        self.num_iterations += 1
        self._times["fwd"] = time.perf_counter_ns()

    def prepare_for_backward(self, outputs):
        """Arm the hooks for the next backward; parameters ``outputs`` do not depend on count
        as ready at once (zeros), as torch's ``find_unused_parameters``."""
        if self._started and self._syncing:
            raise RuntimeError(
                "Expected to have finished reduction in the prior iteration before starting a "
                "new one. This error indicates that your module has parameters that were not "
                "used in producing loss. You can enable unused parameter detection by passing "
                "the keyword argument `find_unused_parameters=True` to "
                "`torch.nn.parallel.DistributedDataParallel`. Parameters that did not receive "
                f"a gradient on rank {c10d.get_rank()}: " + ", ".join(
                    self.param_names.get(i, str(i)) for i, p in enumerate(self._params)
                    if self._bucket_of[id(p)][0].index >= self._next and self._ready_ns[i] == 0))
        self._syncing, self._started, self._next, self._unused = True, False, 0, set()
        self._ready_ns = [0] * len(self._params)
        self._times["bwd"] = time.perf_counter_ns()
        # the shared-memory all-reduce reads the gradients themselves (and scales the
        # results): the built-in reduction of a large enough bucket skips the copy-in
        shm = self._comm_hook is None and getattr(
            c10d._resolve(self.process_group).engine, "_shm", None)
        for b in self._buckets:
            b.pending, b.future = len(b.params), None
            b.direct = bool(shm) and b.buffer._data.nbytes >= shm.MIN
        outputs = list(outputs) if not c10d._is_tensor(outputs) else [outputs]
        if outputs and (self.find_unused_parameters or self.static_graph):
            self._mark_unused(outputs)

    def get_backward_stats(self):
        """Per parameter: nanoseconds from ``prepare_for_backward`` to its gradient being
        ready in the last backward (0: not ready, or unused)."""
        return [t - self._times["bwd"] if t else 0 for t in self._ready_ns]

    def set_logger(self, logger):
        self._logger = logger

    # ---------------------------------------------------------------- ember's internals
    def _register_comm_hook(self, state, hook):
        if self._comm_hook is not None:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be "
                               "called once.")
        self._comm_hook, self._comm_state = hook, state
        if self._logger is not None:
            self._logger._set_comm_hook_name(getattr(hook, "__qualname__", str(hook)))

    def _register_builtin_comm_hook(self, comm_hook_type):
        from .algorithms.ddp_comm_hooks import default_hooks as h
        hook = {BuiltinCommHookType.ALLREDUCE: h.allreduce_hook,
                BuiltinCommHookType.FP16_COMPRESS: h.fp16_compress_hook}[
                    BuiltinCommHookType(comm_hook_type)]
        self._register_comm_hook(self.process_group, hook)

    def _set_static_graph(self):
        self.static_graph = True

    def _remove_autograd_hooks(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _reset_state(self):
        self._syncing = self._started = False

    def _get_local_used_map(self):
        from .. import tensor
        return tensor([int(id(p) not in self._unused) for p in self._params])

    def _get_zeros_like_grad_buckets(self):
        """A bucket of zeros per bucket: what a rank that has joined (run out of inputs)
        reduces while the others still train."""
        from .. import zeros_like
        return [GradBucket(b.index, zeros_like(b.buffer), b.params, b.offsets,
                           b.index == len(self._buckets) - 1) for b in self._buckets]

    def _run_comm_hook(self, bucket):
        if self._comm_hook is not None:
            return self._comm_hook(self._comm_state, bucket)
        # NOTE: no hook registered: the copy-in has divided by the world size, the all-reduce
        # sums, as torch's built-in path (``_AllReduceBySumCommHook``)
        return c10d.all_reduce(bucket.buffer(), group=self.process_group, async_op=True)

    def _check_reducer_finalized(self):
        if self._syncing:
            raise RuntimeError("Expected to have finished reduction in the prior iteration "
                               "before starting a new one.")

    def _mark_unused(self, outputs):
        from ..nn.parallel.distributed import _tensors
        ts = list(_tensors(outputs))            # an output may be a parameter itself
        seen, stack, used = set(), [t.grad_fn for t in ts], {id(t) for t in ts}
        while stack:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            used.add(id(getattr(node, "variable", None)))
            stack.extend(n for n, _ in node.next_functions)
        for p in self._params:
            if id(p) not in used:
                self._unused.add(id(p))
                b, j = self._bucket_of[id(p)]
                self._copy_in(b, j)
                b.pending -= 1

    def _autograd_hook(self, p):
        if not self._syncing:
            return
        self._started = True
        self._ready_ns[self._index[id(p)]] = time.perf_counter_ns()
        b, j = self._bucket_of[id(p)]
        if not b.direct:
            self._copy_in(b, j)
        b.pending -= 1
        if self._next:              # MPI moves started buckets only while some call polls it
            c10d._resolve(self.process_group).engine.progress()
        self._launch_ready()

    def _copy_in(self, b, j):
        """Parameter ``j`` of bucket ``b`` is ready: its gradient into the bucket. Without a
        registered comm hook the copy also divides by the world size, as torch's (one pass
        over the gradient; the all-reduce then sums)."""
        p, v = b.params[j], b.views[j]
        n = 1 if self._comm_hook is not None else c10d.get_world_size(self.process_group)
        if p.grad is v:                             # gradient_as_bucket_view: in place
            v._data /= n
        else:
            g = 0 if p.grad is None or id(p) in self._unused else p.grad._data
            _backends.array_module(v._data).multiply(g, 1.0 / n, out=v._data)

    def _launch_ready(self):
        from ..autograd import grad_mode
        while self._next < len(self._buckets) and self._buckets[self._next].pending == 0:
            b = self._buckets[self._next]
            if not self._next:
                self._times["comm"] = time.perf_counter_ns()
            src = self._grad_pieces(b) if b.direct else None
            if src is not None:
                pg = c10d._resolve(self.process_group)
                b.future = c10d.Work(pg, [pg.engine._shm.start(
                    b.buffer._data, "SUM", src, 1.0 / pg.size())], None, [b.buffer], "all_reduce")
            else:
                for j in range(len(b.params)) if b.direct else ():
                    self._copy_in(b, j)
                with grad_mode.no_grad():
                    b.future = self._run_comm_hook(GradBucket(
                        b.index, b.buffer, b.params, b.offsets, b is self._buckets[-1]))
            self._next += 1
        if self._next == len(self._buckets):
            self._finalize()

    def _used_anywhere(self, used):
        from .. import tensor
        flags = tensor([int(u) for u in used])
        c10d.all_reduce(flags, op=c10d.ReduceOp.MAX, group=self.process_group)
        return flags.tolist()

    def _finalize(self):
        from ..autograd import grad_mode
        self._syncing, used_anywhere = False, None
        self._times["bwd_end"] = time.perf_counter_ns()
        if self.find_unused_parameters:         # on every rank: collectives match by order
            used_anywhere = self._used_anywhere([id(p) not in self._unused for p in self._params])
        with grad_mode.no_grad():
            # every bucket's output before any wait: a wait advances all of them
            direct = [self._into_grads(b, used_anywhere) for b in self._buckets]
            for b, into_grads in zip(self._buckets, direct):
                result = b.future.wait()
                if not isinstance(b.future, c10d.Work) and result is not b.buffer:
                    b.buffer.copy_(result.reshape(-1))
                # this bucket's .grad while the later buckets' all-reduces run on
                for p, v in zip(b.params, b.views):
                    if used_anywhere is not None and not used_anywhere[self._index[id(p)]]:
                        continue                # unused on every rank: .grad stays as it was
                    if into_grads:
                        p.grad._bump_version()
                    elif self.gradient_as_bucket_view:
                        p.grad = v
                    elif p.grad is None:
                        p.grad = v.clone()
                    else:
                        _write(p.grad, v._data)
            self._times["comm_end"] = time.perf_counter_ns()

    def _grad_pieces(self, b):
        """``(offset, flat array)`` of each gradient of bucket ``b``, or None if one is
        missing, unused, not contiguous or of another dtype."""
        gs = [p.grad for p in b.params]
        ok = all(g is not None and id(p) not in self._unused and g._data.flags.c_contiguous
                 and g._data.dtype == b.buffer._data.dtype for p, g in zip(b.params, gs))
        return [(o, g._data.reshape(-1)) for o, g in zip(b.offsets, gs)] if ok else None

    def _into_grads(self, b, used_anywhere):
        """Have the built-in all-reduce of bucket ``b``, if its results are not written yet,
        write them straight into the parameters' ``.grad`` (in place, as the copy would)."""
        redirect = getattr((getattr(b.future, "_reqs", None) or [None])[0], "redirect", None)
        out = None if redirect is None or self.gradient_as_bucket_view or \
            used_anywhere is not None else self._grad_pieces(b)
        return out is not None and redirect(out)


class Logger:
    """DDP's logging data, as torch's ``Logger(reducer)``: construction settings, and the
    timings (nanoseconds) of the last finished iteration, recorded at the next forward as
    torch does: forward compute, backward compute (from ``prepare_for_backward`` to the last
    gradient), backward communication (first bucket launched to all reduced) and their
    overlap. ``DistributedDataParallel.
    _get_ddp_logging_data()`` returns them. At ``DebugLevel.INFO`` or above, the settings are
    also logged (logger ``torch.distributed``).

    Example:
        >>> import ember, ember.distributed as dist
        >>> from ember.nn.parallel import DistributedDataParallel as DDP
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> m = DDP(ember.nn.Linear(3, 2))
        >>> for _ in range(2):
        ...     m(ember.ones(4, 3)).sum().backward()
        >>> d = m._get_ddp_logging_data(); d["module_name"], d["iteration"], d["bucket_sizes"]
        ('Linear', 1, '32')
        >>> dist.destroy_process_group()
    """

    def __init__(self, reducer):
        self.reducer, self.data, self._n = reducer, {}, 0
        reducer.set_logger(self)

    def set_construction_data_and_log(self, module_name, device_ids, output_device,
                                      broadcast_buffers, has_sync_bn, static_graph):
        r, pg = self.reducer, self.reducer.process_group
        params = r._params
        self.data.update(
            module_name=module_name, device_ids=", ".join(map(str, device_ids or [])),
            output_device=-1 if output_device is None else output_device,
            broadcast_buffers=int(broadcast_buffers), has_sync_bn=int(has_sync_bn),
            world_size=c10d.get_world_size(pg),
            rank=c10d.get_rank(pg), backend_name=c10d.get_backend(pg),
            bucket_cap_bytes=r.bucket_bytes_cap,
            find_unused_parameters=int(r.find_unused_parameters),
            gradient_as_bucket_view=int(r.gradient_as_bucket_view),
            num_parameter_tensors=len(params), is_multi_device_module=0,
            total_parameter_size_bytes=sum(p.numel() * p.element_size() for p in params),
            dtypes=", ".join(sorted({str(p.dtype).split(".")[-1] for p in params})),
            bucket_sizes=", ".join(str(b.buffer._data.nbytes) for b in r._buckets),
            master_addr=os.environ.get("MASTER_ADDR", "N/A"),
            master_port=os.environ.get("MASTER_PORT", "N/A"),
            torch_distributed_debug=os.environ.get("TORCH_DISTRIBUTED_DEBUG", "N/A"))
        if c10d.get_debug_level() >= c10d.DebugLevel.INFO:
            _log.info("DDP construction: %s", self.data)

    def set_error_and_log(self, error):
        self.data["error"] = str(error)
        _log.error("DDP error: %s", error)

    def set_runtime_stats_and_log(self):
        """Record the last iteration's timings and the running averages."""
        t, r = self.reducer._times, self.reducer
        if not t["comm_end"]:
            return
        self._n += 1
        now = dict(forward_compute_time=t["bwd"] - t["fwd"],
                   backward_compute_time=t["bwd_end"] - t["bwd"],
                   backward_comm_time=t["comm_end"] - t["comm"],
                   backward_compute_comm_overlap_time=max(0, t["bwd_end"] - t["comm"]))
        for k, v in now.items():
            self.data[k] = v
            self.data["avg_" + k] = (self.data.get("avg_" + k, 0) * (self._n - 1) + v) // self._n
        self.data.update(
            iteration=r.num_iterations, num_buckets_reduced=len(r._buckets),
            unused_parameter_size=sum(p.numel() * p.element_size() for p in r._params
                                      if id(p) in r._unused),
            forward_compute_time_start=t["fwd"], backward_compute_time_start=t["bwd"],
            backward_compute_time_end=t["bwd_end"], backward_comm_time_start=t["comm"],
            backward_comm_time_end=t["comm_end"])
        if c10d.get_debug_level() >= c10d.DebugLevel.INFO:
            _log.info("DDP iteration %d: %s", r.num_iterations, now)

    def _set_comm_hook_name(self, name):
        self.data["comm_hook"] = name

    def _set_uneven_input_join(self):
        self.data["join_uneven_inputs"] = 1

    def _set_static_graph(self):
        self.data["static_graph"] = 1

    def _get_ddp_logging_data(self):
        return dict(self.data)
