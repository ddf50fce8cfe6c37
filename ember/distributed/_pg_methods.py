"""torch's ``ProcessGroup`` methods (``pg.allreduce([t], opts)`` ...) and their ``*Options``:
group ranks, a list of tensors (several per process for allreduce, broadcast and allgather, as
ProcessGroupGloo; one for the rest) or the plain tensor, an options struct or the plain
arguments; each returns a ``Work``."""
import datetime

from . import _mpi
from ._collectives import (_all_gather_coalesced, _all_reduce_coalesced, _averaged, _coalesced_pairs,
                           _write, all_gather, all_gather_into_tensor, all_reduce, all_to_all,
                           all_to_all_single, barrier, broadcast, gather, monitored_barrier,
                           reduce, reduce_scatter, reduce_scatter_tensor, scatter)
from ._mpi_engine import _MPI_OPS
from ._p2p import irecv, isend
from ._state import RedOpType, ReduceOp, _is_tensor
from ._work import _then


class _Methods:
    """torch's ``ProcessGroup`` methods, for ``ProcessGroup`` (``_groups``) to inherit."""

    def _run(self, fn, opts, *args, **kw):
        w = fn(*args, group=self, async_op=True, **kw)
        if opts.timeout >= datetime.timedelta(0):
            w._timeout = opts.timeout
        return w

    def allreduce(self, tensors, opts=None, timeout=None):
        """The reduction over every tensor of every process, into each tensor."""
        o = _opts(AllreduceOptions, opts, timeout, "reduceOp")
        ts, op = _several(tensors, "allreduce"), RedOpType(o.reduceOp)
        acc = ts[0].clone()
        for t in ts[1:]:
            _mpi.NodeShm.UFUNCS[_MPI_OPS[op]](acc._data, t._data, out=acc._data)

        def finish():
            for t in ts[1:]:
                _write(t, acc._data)
            # NOTE: gloo divides only the first tensor by the group size: the others keep the
            # sum (torch 2.13); we match it
            _write(ts[0], _averaged(acc._data, op, self, acc.dtype))
        return _then(self._run(all_reduce, o, acc, op=RedOpType.SUM if op == RedOpType.AVG
                               else op), finish)

    def allreduce_coalesced(self, tensors, opts=None):
        o = _opts(AllreduceCoalescedOptions, opts)
        return self._run(_all_reduce_coalesced, o, list(tensors), op=o.reduceOp)

    def broadcast(self, tensors, opts=None, timeout=None):
        """The root process's ``tensors[opts.rootTensor]`` into every tensor."""
        o = _opts(BroadcastOptions, opts, timeout, "rootRank")
        ts = _several(tensors, "broadcast")
        if not 0 <= o.rootTensor < len(ts):
            raise RuntimeError(f"ProcessGroupGloo::broadcast: invalid root tensor: "
                               f"{o.rootTensor}")
        src = ts[o.rootTensor]
        return _then(self._run(broadcast, o, src, group_src=o.rootRank),
                     lambda: [_write(t, src._data) for t in ts if t is not src])

    def reduce(self, tensors, opts=None, op=ReduceOp.SUM, timeout=None):
        o = _opts(ReduceOptions, opts, timeout, "rootRank")
        if not isinstance(opts, ReduceOptions):
            o.reduceOp = op
        return self._run(reduce, o, _one(tensors, "reduce"), op=o.reduceOp, group_dst=o.rootRank)

    def allgather(self, output_tensors, input_tensors, opts=None):
        """Each ``output_tensors[i]`` (k lists for k inputs) = every rank's inputs in rank
        order: ``[rank 0's input 0, ..., rank 0's input k-1, rank 1's input 0, ...]``."""
        o = _opts(AllgatherOptions, opts, opts if isinstance(opts, datetime.timedelta) else None)
        if _is_tensor(input_tensors):
            return self._run(all_gather, o, list(output_tensors), input_tensors)
        ins, outs = _several(input_tensors, "allgather"), [list(x) for x in output_tensors]
        k = len(ins)
        if len(outs) != k:
            raise RuntimeError("ProcessGroupGloo::allgather: requires input/output tensor "
                               "lists to have the same length")
        for i, lst in enumerate(outs):
            if len(lst) != k * self.size():
                raise RuntimeError(f"ProcessGroupGloo::allgather: invalid output tensor list "
                                   f"at index {i} (expected length {k * self.size()}, got "
                                   f"{len(lst)})")
        by_rank = [outs[0][r * k:(r + 1) * k] for r in range(self.size())]
        return _then(self._run(_all_gather_coalesced, o, by_rank, ins),
                     lambda: [_write(t, s._data) for x in outs[1:] for t, s in zip(x, outs[0])])

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self._run(_all_gather_coalesced, _opts(AllgatherOptions, opts), output_lists,
                         list(input_list))

    def _allgather_base(self, output, input, opts=None):
        return self._run(all_gather_into_tensor, _opts(AllgatherOptions, opts), output, input)

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._run(_coalesced_pairs, _opts(AllgatherOptions, opts), outputs, inputs,
                         all_gather_into_tensor)

    def gather(self, output_tensors, input_tensors, opts=None, timeout=None):
        o, single = _opts(GatherOptions, opts, timeout, "rootRank"), _is_tensor(input_tensors)
        out = list(output_tensors) if single else list(output_tensors[0] if output_tensors else [])
        return self._run(gather, o, input_tensors if single else _one(input_tensors, "gather"),
                         out or None, group_dst=o.rootRank)

    def scatter(self, output_tensors, input_tensors, opts=None, timeout=None):
        o, single = _opts(ScatterOptions, opts, timeout, "rootRank"), _is_tensor(output_tensors)
        ins = list(input_tensors) if single else list(input_tensors[0] if input_tensors else [])
        return self._run(scatter, o, output_tensors if single else
                         _one(output_tensors, "scatter"), ins or None, group_src=o.rootRank)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None, timeout=None):
        o, single = _opts(ReduceScatterOptions, opts, timeout, "reduceOp"), \
            _is_tensor(output_tensors)
        return self._run(reduce_scatter, o, output_tensors if single else
                         _one(output_tensors, "reduce_scatter"),
                         list(input_tensors if single else _one(input_tensors,
                                                                "reduce_scatter")),
                         op=o.reduceOp)

    def _reduce_scatter_base(self, output, input, opts=None):
        o = _opts(ReduceScatterOptions, opts)
        return self._run(reduce_scatter_tensor, o, output, input, op=o.reduceOp)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        o = _opts(ReduceScatterOptions, opts)
        return self._run(_coalesced_pairs, o, outputs, inputs, reduce_scatter_tensor,
                         op=o.reduceOp)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        return self._run(all_to_all, _opts(AllToAllOptions, opts), list(output_tensors),
                         list(input_tensors))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        o = _opts(AllToAllOptions, opts, opts if isinstance(opts, datetime.timedelta) else None)
        return self._run(all_to_all_single, o, output, input, list(output_split_sizes) or None,
                         list(input_split_sizes) or None)

    all_to_all_single = alltoall_base

    def barrier(self, opts=None):
        return self._run(barrier, _opts(BarrierOptions, opts, opts if isinstance(
            opts, datetime.timedelta) else None))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        monitored_barrier(self, timeout, wait_all_ranks)

    def send(self, tensors, dstRank, tag):
        return isend(_one(tensors, "send"), group=self, tag=tag, group_dst=dstRank)

    def recv(self, tensors, srcRank, tag):
        return irecv(_one(tensors, "send"), group=self, tag=tag, group_src=srcRank)

    def recv_anysource(self, tensors, tag):
        return irecv(_one(tensors, "send"), group=self, tag=tag)


_SINGLE = {"reduce": "ProcessGroupGloo::reduce: requires a single-element tensor list",
           "gather": "ProcessGroupGloo::gather: requires a single-element input tensor list",
           "scatter": "ProcessGroupGloo::scatter: requires a single-element output tensor list",
           "reduce_scatter": "reduce_scatter only supports 1 output",
           # NOTE: torch's recv and recv_anysource also say "send"
           "send": "ProcessGroupGloo::send takes a single tensor"}


def _one(tensors, what):
    """The tensor of a ProcessGroup method's argument (a tensor, or a list of one)."""
    if _is_tensor(tensors):
        return tensors
    tensors = list(tensors)
    if len(tensors) != 1:
        raise RuntimeError(_SINGLE[what])
    return tensors[0]


def _several(tensors, what):
    """The tensors of a ProcessGroup method that takes several per process (a tensor, or a
    list of tensors of one size and dtype, as ProcessGroupGloo checks)."""
    ts = [tensors] if _is_tensor(tensors) else list(tensors)
    if not ts:
        raise NotImplementedError(f"There were no tensor arguments to this function (e.g., you "
                                  f"passed an empty list of Tensors), c10d::{what}_")
    shape = lambda t: f"({', '.join(map(str, t.shape))})"      # noqa: E731
    # NOTE: gloo's index counts from the second tensor; we match the message
    for i, t in enumerate(ts[1:]):
        for kind, got, want in (("size", shape(t), shape(ts[0])), ("type", t.dtype, ts[0].dtype)):
            if got != want:
                raise RuntimeError(f"ProcessGroupGloo::{what}: invalid tensor {kind} at index "
                                   f"{i} (expected {want}, got {got})")
    return ts


class _Options:
    timeout = datetime.timedelta(milliseconds=-1)   # unset: the group's timeout
    asyncOp = True

    def __init__(self):
        for k, v in type(self)._defaults.items():
            setattr(self, k, list(v) if isinstance(v, list) else v)

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._defaults)
        return f"{type(self).__name__}({fields})"


def _options(name, **fields):
    doc = f"""The options of ``ProcessGroup.{name[:-7].lower()}``-style calls, as torch's
    ``{name}``: ``timeout`` (unset: -1 ms, the group's), ``asyncOp``{''.join(', ``%s``' % f
                                                                         for f in fields)}.

    Example:
        >>> import ember.distributed as dist
        >>> o = dist.{name}(); o.asyncOp, o.timeout.total_seconds()
        (True, -0.001)
    """
    fields = dict(timeout=_Options.timeout, asyncOp=True, **fields)
    return type(name, (_Options,), {"_defaults": fields, "__doc__": doc})


AllreduceOptions = _options("AllreduceOptions", reduceOp=ReduceOp.SUM)
AllreduceCoalescedOptions = _options("AllreduceCoalescedOptions", reduceOp=ReduceOp.SUM)
ReduceOptions = _options("ReduceOptions", reduceOp=ReduceOp.SUM, rootRank=0, rootTensor=0)
BroadcastOptions = _options("BroadcastOptions", rootRank=0, rootTensor=0)
AllgatherOptions = _options("AllgatherOptions")
GatherOptions = _options("GatherOptions", rootRank=0)
ScatterOptions = _options("ScatterOptions", rootRank=0)
ReduceScatterOptions = _options("ReduceScatterOptions", reduceOp=ReduceOp.SUM)
AllToAllOptions = _options("AllToAllOptions")
BarrierOptions = _options("BarrierOptions", device_ids=[], device=None)


def _opts(cls, opts, timeout=None, field=None):
    """``opts`` when it is a ``cls``; else a ``cls`` with ``field`` = ``opts`` (the plain
    overload, e.g. ``pg.broadcast(t, root)``) and ``timeout``."""
    if isinstance(opts, cls):
        return opts
    if opts is not None and not isinstance(opts, datetime.timedelta) and \
            (field is None or isinstance(opts, _Options)):
        raise TypeError(f"expected {cls.__name__}, got {type(opts).__name__}")
    o = cls()
    if field is not None and opts is not None and not isinstance(opts, datetime.timedelta):
        setattr(o, field, opts)
    if timeout is not None:
        o.timeout = timeout
    return o
