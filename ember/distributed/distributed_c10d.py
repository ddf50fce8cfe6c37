"""Process groups and collectives, as ``torch.distributed`` (c10d).

Every collective stages its tensors as contiguous arrays on the engine's device (host NumPy
for MPI, CuPy for NCCL), starts one non-blocking engine call, and returns a ``Work``; waiting
on it polls the engine and then writes results back into the caller's tensors (so
non-contiguous and widened tensors come out right). ``async_op=False`` is start + wait.

Reductions of float16, bfloat16 and float8 run in float32 (MPI has no such types), rounded
once to the tensor's dtype at the end; bool reduces as uint8 (SUM is OR, PRODUCT is AND, as
torch).
"""
import contextlib
import datetime
import enum
import hashlib
import os
import pickle
import sys
import time
import typing
import warnings

import numpy as np

from .. import _dtype
from .._backends import backend
from .._ops.dispatch import hooks
from ..futures import Future
from . import _mpi, _watchdog
from .store import (DistBackendError, DistNetworkError, DistStoreError, PrefixStore,
                    TCPStore)

default_pg_timeout = datetime.timedelta(minutes=30)


class RedOpType(enum.IntEnum):
    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7
    PREMUL_SUM = 8


class ReduceOp:
    """The reduction of a collective (``dist.ReduceOp.SUM`` ...), as torch's ``ReduceOp``.

    Example:
        >>> import ember.distributed as dist
        >>> dist.ReduceOp.MAX
        <RedOpType.MAX: 4>
    """
    RedOpType = RedOpType
    SUM, AVG, PRODUCT, MIN, MAX = (RedOpType.SUM, RedOpType.AVG, RedOpType.PRODUCT,
                                   RedOpType.MIN, RedOpType.MAX)
    BAND, BOR, BXOR, PREMUL_SUM = RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR, \
        RedOpType.PREMUL_SUM


reduce_op = ReduceOp


class Backend(str):
    """A backend name, as ``torch.distributed.Backend``: 'gloo' and 'mpi' run on MPI, 'nccl'
    on NCCL."""
    GLOO, MPI, NCCL, UCC, XCCL, UNDEFINED = "gloo", "mpi", "nccl", "ucc", "xccl", "undefined"
    backend_list = ["undefined", "gloo", "nccl", "xccl", "ucc", "mpi"]
    default_device_backend_map = {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl", "mps": "gloo"}
    backend_capability = {"gloo": ["cpu", "cuda"], "nccl": ["cuda"], "xccl": ["xpu"],
                          "ucc": ["cpu", "cuda"], "mpi": ["cpu", "cuda"]}

    def __new__(cls, name):
        name = name.lower()
        if not all(p.split(":")[-1] in cls.backend_list[1:] for p in name.split(",")):
            raise ValueError(f"Invalid backend: '{name}'")
        return str.__new__(cls, name)


class _World:
    pg = None                   # the default ProcessGroup
    store = None
    groups = {}                 # ProcessGroup -> name
    group_count = 0
    generation = 0
    own_store = False           # made by init_process_group (not passed in): closed with it
    watch = None                # the store connection that reports this rank's death
    store_lost = None           # when the store first stopped answering (see _watchdog)
    comm_name = None            # record_comm's profiler name for collectives


_world = _World()


class GroupMember:
    """``GroupMember.WORLD`` (the default group) and ``NON_GROUP_MEMBER`` (what
    ``new_group`` returns to ranks outside it)."""
    NON_GROUP_MEMBER = object()

    class _WorldDescriptor:
        def __get__(self, obj, cls):
            return _world.pg
    WORLD = _WorldDescriptor()


group = GroupMember


class ProcessGroup:
    """A group of ranks sharing one engine communicator.

    ``ranks`` are the global ranks of the members in group-rank order."""

    def __init__(self, engine, ranks, backend_name, timeout, store=None):
        self.engine, self.ranks, self._backend, self.timeout = engine, ranks, backend_name, timeout
        self.store, self.group_name, self.group_desc, self.bound_device_id = store, "", "", None

    def rank(self):
        return self.engine.rank

    def size(self):
        return len(self.ranks)

    def name(self):
        return self._backend

    def __repr__(self):
        return f"ProcessGroup(backend={self._backend!r}, ranks={self.ranks})"

    # torch's ProcessGroup methods: group ranks, a list of tensors (several per process for
    # allreduce, broadcast and allgather, as ProcessGroupGloo; one for the rest) or the plain
    # tensor, an *Options struct or the plain arguments; each returns a Work
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
            if op == RedOpType.AVG:
                # NOTE: gloo divides only the first tensor by the group size: the others keep
                # the sum (torch 2.13); we match it
                _avg(acc._data, self.size(), acc.dtype)
            _write(ts[0], acc._data)
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
        return self._run(reduce, o, _one(tensors, "reduce"), op=o.reduceOp,
                         group_dst=o.rootRank)

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
        out = list(output_tensors) if single else list(output_tensors[0] if output_tensors
                                                           else [])
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

    def set_timeout(self, timeout):
        self.timeout = timeout

    def get_group_store(self):
        return self.store

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None,
                    device_types=None):
        """This group's ranks ``ranks`` as a new group (every rank of this one calls it);
        None on the others."""
        g = split_group(self, [list(ranks)], timeout, opts, group_desc)
        return g or None

    def abort(self):
        destroy_process_group(self)

    shutdown = abort

    def _get_backend(self, device=None):
        return self


def _is_tensor(x):
    from .._tensor import Tensor
    return isinstance(x, Tensor)


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
        for kind, got, want in (("size", shape(t), shape(ts[0])), ("type", t.dtype,
                                                                     ts[0].dtype)):
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


class Work:
    """An operation in flight (``async_op=True``), as ``torch.distributed.Work``.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> t = ember.ones(3); w = dist.all_reduce(t, async_op=True)
        >>> w.wait(), w.is_completed(), t
        (True, True, tensor([1., 1., 1.]))
        >>> dist.destroy_process_group()
    """

    def __init__(self, pg, reqs, finish, outputs, what, statuses=None):
        self.pg, self._reqs, self._finish, self._outputs, self._what = pg, reqs, finish, \
            outputs, what
        self._statuses, self._done, self._exc = statuses, False, None
        # the profiler's "gloo:all_reduce" range runs from the launch to the completion, as
        # torch's trace shows the collective next to the ops it overlaps
        self._rec, self._timeout = hooks.profiler, None
        name = "nccl" if pg.engine.device_type == "cuda" else pg.name().split(":")[-1]
        self._ev = self._rec and self._rec.begin(_world.comm_name or f"{name}:{what}",
                                                 "communication", nest=False)

    def is_completed(self):
        if not self._done and self.pg.engine.test(self._reqs, self._statuses):
            self._complete()
        return self._done

    def is_success(self):
        return self._done and self._exc is None

    def exception(self):
        return self._exc

    def wait(self, timeout=None):
        if not self._done:
            t = timeout if timeout is not None else self._timeout or self.pg.timeout
            t = t.total_seconds() if isinstance(t, datetime.timedelta) else float(t)
            try:
                self.pg.engine.wait(self._reqs, t, self._what, self._statuses)
            except TimeoutError as e:
                self._exc = DistBackendError(f"[Rank {get_rank()}] {e} (group ranks "
                                             f"{self.pg.ranks}){_failed_note(self.pg)}")
                raise self._exc from None
            self._complete()
        return True

    synchronize = wait

    def _complete(self):
        self._done = True
        if self._ev is not None:
            self._rec.end(self._ev)
        if self._finish is not None:
            self._finish()

    def result(self):
        return self._outputs

    def source_rank(self):
        return self._statuses[0].Get_source() if self._statuses else -1

    def get_future(self):
        fut = Future()
        fut._waiter = lambda: (self.wait(), fut.done() or fut.set_result(self._outputs))
        if self._done:
            fut.set_result(self._outputs)
        return fut


def report_failure(exc):
    """Tell the other ranks (through the store) that this one failed with ``exc``: their
    waits then raise naming it instead of running into the timeout. ember's spawn and
    emberrun call this for an exception escaping a worker."""
    store = _world.store
    if store is None or _world.pg is None:
        return
    try:
        store.compare_set("failed_rank", "", str(get_rank()))
        store.compare_set(f"failed_error_{get_rank()}", "", f"{type(exc).__name__}: {exc}"[:500])
        _watchdog.linger(_world)
    except Exception:
        pass                            # the store may be gone with the master


def _check_failed(what):
    store = _world.store
    if store is None:
        return
    try:
        if not store.check(["failed_rank"]):
            _world.store_lost = None
            return
        r = store.get("failed_rank").decode()
        err = store.get(f"failed_error_{r}").decode()
    except (OSError, DistNetworkError):
        # NOTE: a grace period, because rank 0 closes the store at its destroy_process_group
        # while a peer may still be finishing the same last collective
        now = time.monotonic()
        _world.store_lost = _world.store_lost or now
        if now - _world.store_lost < _watchdog.STORE_LOST_GRACE:
            return
        if not _world.own_store:
            raise DistBackendError(f"[Rank {get_rank()}] {what} aborted: the store stopped "
                                   "answering") from None
        r, err = "0", "the store it hosts stopped answering (rank 0 died or exited)"
    except Exception:
        return
    e = DistBackendError(f"[Rank {get_rank()}] {what} aborted: rank {r} failed: {err}")
    e.failed_rank = int(r)
    raise e


def _peer_lost(what, exc):
    """MPI saw a connection to a peer break (it died): name the peer from the store, where
    the watchdog puts it a moment after the kernel closes the dead process's sockets."""
    deadline = time.monotonic() + _watchdog.STORE_LOST_GRACE + 2
    while time.monotonic() < deadline:
        _check_failed(what)
        time.sleep(0.1)
    raise DistBackendError(f"[Rank {get_rank()}] {what} failed in MPI: {exc}") from exc


def _failed_note(pg):
    """Which rank reported a failure in the store, if any did (see ``report_failure``)."""
    store = _world.store
    try:
        if store is not None and store.check(["failed_rank"]):
            return f"; rank {store.get('failed_rank').decode()} failed first"
    except Exception:
        pass
    return ""


# ----------------------------------------------------------------------- the MPI engine
_MPI_OPS = {RedOpType.SUM: "SUM", RedOpType.AVG: "SUM", RedOpType.PRODUCT: "PROD",
            RedOpType.MIN: "MIN", RedOpType.MAX: "MAX", RedOpType.BAND: "BAND",
            RedOpType.BOR: "BOR", RedOpType.BXOR: "BXOR"}


class _MpiEngine:
    """Collectives on host arrays through mpi4py's non-blocking calls."""
    device_type = "cpu"

    def __init__(self, comm):
        self.comm, self.MPI = comm, _mpi.mpi()
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._shm = None        # _mpi.NodeShm; False: the ranks span nodes; None: not asked
        for c in (self.MPI.COMM_WORLD, self.MPI.COMM_SELF):
            c.Set_errhandler(self.MPI.ERRORS_RETURN)    # a dead peer raises, not aborts

    def stage(self, arr):
        return np.ascontiguousarray(backend_of(arr).to_host(arr))

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def _test(self, reqs, statuses=None):
        if self._shm:       # shared-memory all-reduces move only in this rank's calls
            self._shm.poll()
        if reqs and isinstance(reqs[0], _mpi.ShmJob):
            return reqs[0].done
        return self.MPI.Request.Testall(reqs, statuses)

    def test(self, reqs, statuses=None):
        try:
            return self._test(reqs, statuses)
        except self.MPI.Exception as e:
            _peer_lost("a collective", e)

    def wait(self, reqs, timeout, what, statuses=None):
        try:
            _mpi.wait_all(reqs, timeout, what, statuses, lambda: _check_failed(what),
                          lambda: self._test(reqs, statuses))
        except self.MPI.Exception as e:
            _peer_lost(what, e)

    def _b(self, a):
        return [a.reshape(-1).view(np.uint8), self.MPI.BYTE]

    def _op(self, op):
        return getattr(self.MPI, _MPI_OPS[op])

    def allreduce(self, buf, op):
        if buf.nbytes >= _mpi.NodeShm.MIN and self.size > 1:
            if self._shm is None:           # every rank asks at the same collective
                self._shm = _mpi.NodeShm.of(self.comm) or False
            if self._shm:
                return [self._shm.start(buf, _MPI_OPS[op])]
        return [self.comm.Iallreduce(self.MPI.IN_PLACE, buf, self._op(op))]

    def reduce(self, buf, op, root):
        send = self.MPI.IN_PLACE if self.rank == root else buf
        return [self.comm.Ireduce(send, buf if self.rank == root else None, self._op(op), root)]

    def broadcast(self, buf, root):
        return [self.comm.Ibcast(self._b(buf), root)]

    def allgather(self, send, recv):
        return [self.comm.Iallgather(self._b(send), self._b(recv))]

    def reduce_scatter(self, send, recv, op):
        return [self.comm.Ireduce_scatter_block(send, recv, self._op(op))]

    def gather(self, send, recv, root):
        return [self.comm.Igather(self._b(send), self._b(recv) if recv is not None else None,
                                  root)]

    def scatter(self, send, recv, root):
        return [self.comm.Iscatter(self._b(send) if send is not None else None, self._b(recv),
                                   root)]

    def alltoallv(self, send, scounts, recv, rcounts):
        d = lambda c: np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int).tolist()
        return [self.comm.Ialltoallv([send.reshape(-1).view(np.uint8), (scounts, d(scounts)),
                                      self.MPI.BYTE],
                                     [recv.reshape(-1).view(np.uint8), (rcounts, d(rcounts)),
                                      self.MPI.BYTE])]

    def send(self, buf, dst, tag):
        return [self.comm.Isend(self._b(buf), dst, tag)]

    def recv(self, buf, src, tag):
        return [self.comm.Irecv(self._b(buf), self.MPI.ANY_SOURCE if src is None else src, tag)]

    def barrier(self):
        return [self.comm.Ibarrier()]

    def progress(self):
        self.comm.Iprobe(self.MPI.ANY_SOURCE, self.MPI.ANY_TAG)
        if self._shm:
            self._shm.poll()

    def subgroup(self, ranks, collective=True):
        """The members ``ranks`` (of this communicator) as an engine; every rank calls it
        (``MPI_Comm_create``), or with ``collective=False`` only the members do
        (``MPI_Comm_create_group``)."""
        g = self.comm.Get_group().Incl(ranks)
        comm = self.comm.Create(g) if collective else self.comm.Create_group(g)
        return None if comm == self.MPI.COMM_NULL else _MpiEngine(comm)

    def split(self, color, key):
        """``MPI_Comm_split``: one engine per color (None: this rank in none)."""
        comm = self.comm.Split(self.MPI.UNDEFINED if color is None else color, key)
        return None if comm == self.MPI.COMM_NULL else _MpiEngine(comm)

    def source(self, status):
        return status.Get_source()

    def close(self):
        if self._shm:
            self._shm.close()
        if self.comm not in (self.MPI.COMM_NULL, self.MPI.COMM_WORLD):
            self.comm.Free()


def backend_of(arr):
    return backend(_CUDA if type(arr).__module__.split(".")[0] == "cupy" else _CPU)


from .._device import CPU as _CPU, device as _device  # noqa: E402
_CUDA = _device("cuda")


# ----------------------------------------------------------------------- groups and state
def is_available():
    """True when a communication engine (mpi4py, or CuPy's NCCL) can be loaded.

    Example:
        >>> import ember.distributed as dist
        >>> isinstance(dist.is_available(), bool)
        True
    """
    return _mpi.available() or is_nccl_available()


def is_mpi_available():
    return _mpi.available()


is_gloo_available = is_mpi_available


def is_nccl_available():
    from . import _nccl
    return _nccl.available()


def is_initialized():
    """Whether the default process group is set up.

    Example:
        >>> import ember.distributed as dist
        >>> dist.is_initialized()
        False
    """
    return _world.pg is not None


def is_torchelastic_launched():
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


def _default_pg(what="this operation"):
    if _world.pg is None:
        raise ValueError("Default process group has not been initialized, please make sure "
                         "to call init_process_group.")
    return _world.pg


def _env_int(name, given, method):
    if given is not None and given >= 0:
        return given
    if name in os.environ:
        return int(os.environ[name])
    launched = _mpi.launched_rank_size()
    if launched is not None:
        return launched[0 if name == "RANK" else 1]
    raise ValueError(f"Error initializing torch.distributed using {method} rendezvous: "
                     f"environment variable {name} expected, but not set")


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Join this process to the default process group, as ``torch.distributed``'s.

    ``backend``: 'gloo' or 'mpi' (collectives through MPI, on CPU) or 'nccl' (through NCCL on
    CUDA tensors). Ranks meet through ``store`` or ``init_method`` (``env://``, the default,
    reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; ``tcp://host:port``; ``file://path``);
    under ``mpiexec`` rank and world size come from MPI.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> dist.get_rank(), dist.get_world_size(), dist.get_backend()
        (0, 1, 'gloo')
        >>> dist.destroy_process_group()
    """
    if _world.pg is not None:
        raise ValueError("trying to initialize the default process group twice!")
    name = Backend(backend or ("nccl" if device_id is not None and getattr(
        device_id, "type", "") == "cuda" else "gloo"))
    for b in ("ucc", "xccl"):
        if b in name:
            raise RuntimeError(f"Distributed package doesn't have {b.upper()} built in")
    timeout = timeout or default_pg_timeout
    _world.own_store = store is None
    if store is not None:
        if rank < 0 or world_size <= 0:
            raise ValueError("world_size and rank must be given when store is given")
    else:
        method = init_method or "env://"
        rank = _env_int("RANK", rank, method)
        world_size = _env_int("WORLD_SIZE", world_size, method)
        env_mpi = method.startswith("env://") and _mpi.launched_rank_size() is not None and \
            not {"MASTER_ADDR", "MASTER_PORT"} <= set(os.environ)
        if (world_size > 1 or not method.startswith("tcp://")) and not env_mpi:
            # NOTE: under mpiexec env:// needs no MASTER_ADDR: MPI itself is the rendezvous
            from .rendezvous import rendezvous
            store, rank, world_size = next(rendezvous(method, rank, world_size, timeout=timeout))
    if not 0 <= rank < world_size:
        raise ValueError(f"Invalid rank {rank} for world_size {world_size}")
    _world.generation += 1
    if store is not None:
        store = PrefixStore(f"default_pg/{_world.generation}", store)
        store.set_timeout(timeout)
    if world_size > 1:
        # (before the engine's collective start-up: no rank leaves init, and may exit, while
        # another is still leaving its failure keys with the store's server)
        _watchdog.start(_world, store, rank)
    if "nccl" in name:
        from . import _nccl
        engine = _nccl.NcclEngine(store, rank, world_size, device_id)
    else:
        engine = _MpiEngine(_mpi.world_comm(store, rank, world_size, timeout.total_seconds()))
    _world.store, _world.pg = store, ProcessGroup(engine, list(range(world_size)), name,
                                                  timeout, store)
    _world.pg.group_name, _world.pg.group_desc, _world.pg.bound_device_id = "0", "default_pg", \
        device_id
    _world.groups, _world.group_count = {_world.pg: "0"}, 1


def destroy_process_group(group=None):
    """Tear down ``group`` (default: every group, and the default one).

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> dist.destroy_process_group(); dist.is_initialized()
        False
    """
    groups = list(_world.groups) if group is None or group is _world.pg else [group]
    for g in groups:
        if g is not GroupMember.NON_GROUP_MEMBER:
            g.engine.close()
        _world.groups.pop(g, None)
    if group is None or group is _world.pg:
        _watchdog.stop(_world)
        base = _world.store.underlying_store if _world.store is not None else None
        if isinstance(base, TCPStore) and _world.own_store:
            base.close()
        _world.pg = _world.store = None
        _world.groups, _world.group_count = {}, 0


def _resolve(group, what=""):
    """The ProcessGroup for ``group``; None for a rank outside it."""
    if group is None:
        return _default_pg(what)
    if group is GroupMember.NON_GROUP_MEMBER:
        return None
    return group


def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization=False, group_desc=None, device_id=None):
    """A group of ``ranks`` (sorted, as torch); every rank of the default group must call it.
    Ranks outside get ``GroupMember.NON_GROUP_MEMBER``.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> g = dist.new_group([0]); dist.get_process_group_ranks(g)
        [0]
        >>> dist.destroy_process_group()
    """
    pg = _default_pg("new_group")
    ranks = sorted(range(pg.size()) if ranks is None else ranks)
    for r in ranks:
        if not 0 <= r < pg.size():
            raise ValueError(f"new_group: rank {r} is not in the world of size {pg.size()}")
    return _register(pg.engine.subgroup(ranks), ranks, backend or pg._backend,
                     timeout or pg.timeout, group_desc)


def _register(engine, ranks, backend, timeout, desc=None):
    """The ProcessGroup of ``engine`` (None: this rank is outside it), named as torch names
    them: the default group "0", then one number per group made, counted on every rank."""
    name = str(_world.group_count)
    _world.group_count += 1
    if engine is None:
        return GroupMember.NON_GROUP_MEMBER
    g = ProcessGroup(engine, ranks, Backend(backend), timeout, _world.store)
    g.group_desc, g.bound_device_id = desc or "undefined", _world.pg.bound_device_id
    _world.groups[g] = g.group_name = name
    return g


def get_rank(group=None):
    """This process's rank in ``group`` (-1 when outside it).

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> dist.get_rank()
        0
        >>> dist.destroy_process_group()
    """
    pg = _resolve(group)
    return -1 if pg is None else pg.rank()


def get_world_size(group=None):
    """The number of ranks in ``group`` (-1 when outside it)."""
    pg = _resolve(group)
    return -1 if pg is None else pg.size()


def get_backend(group=None):
    """The backend name of ``group``."""
    pg = _resolve(group)
    if pg is None:
        raise ValueError("Invalid process group specified")
    return pg._backend


def get_process_group_ranks(group):
    """The global ranks of ``group``'s members, in group-rank order."""
    return list(_resolve(group).ranks)


def get_global_rank(group, group_rank):
    return _resolve(group).ranks[group_rank]


def get_group_rank(group, global_rank):
    pg = _resolve(group)
    if global_rank not in pg.ranks:
        raise ValueError(f"Global rank {global_rank} is not part of group {pg}")
    return pg.ranks.index(global_rank)


def _group_rank(pg, rank, group_rank, what):
    if group_rank is not None:
        return group_rank
    if rank not in pg.ranks:
        raise ValueError(f"{what}: global rank {rank} is not part of group {pg}")
    return pg.ranks.index(rank)


# ----------------------------------------------------------------------- staging helpers
def _check(what, tensors, pg):
    from .._tensor import Tensor
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected a Tensor, got {type(t).__name__}")
    devices = {t.device.type for t in tensors}
    if len(devices) > 1:
        raise ValueError(f"{what}: tensors must all be on the same device, got "
                         f"{sorted(devices)}")
    if devices == {"meta"}:
        raise RuntimeError(f"{what}: meta tensors have no data to communicate")
    if _world.debug == DebugLevel.DETAIL and tensors and pg.engine.device_type == "cpu" and \
            what not in ("isend", "irecv"):
        _verify(pg, what, tensors[0])


def _write(t, arr):
    """Copy ``arr`` (engine array of ``t``'s size) into ``t``, unless it already is ``t``'s
    memory."""
    if arr is not t._data:
        arr = arr.reshape(t.shape).astype(t._data.dtype, copy=False)
        t._data[...] = backend(t.device).from_host(arr, t.device) if t.device.type != \
            "cpu" and isinstance(arr, np.ndarray) else arr
    t._bump_version()


def _inplace(pg, t):
    """An engine buffer for ``t``: its own memory when contiguous on the engine's device."""
    d = t._data
    if pg.engine.device_type == t.device.type and d.flags.c_contiguous and d.ndim > 0:
        return d
    return pg.engine.stage(d)


_LOW = (_dtype.float16, _dtype.bfloat16, _dtype.float8_e4m3fn, _dtype.float8_e5m2)


def _red_buf(pg, t, op, what):
    """``(buffer, op)`` to reduce ``t`` with on this engine (see the module docstring)."""
    op = RedOpType(op)
    if op == RedOpType.PREMUL_SUM:
        raise NotImplementedError(f"{what}: ReduceOp.PREMUL_SUM is not supported")
    dt = t.dtype
    if op in (RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR) and \
            (dt.is_floating_point or dt.is_complex):
        raise RuntimeError(f"{what}: ReduceOp.{op.name} is not defined for {dt}")
    if op in (RedOpType.MIN, RedOpType.MAX) and dt.is_complex:
        raise RuntimeError(f"{what}: ReduceOp.{op.name} is not defined for complex {dt}")
    if dt in _LOW and pg.engine.device_type == "cpu":
        return pg.engine.stage(t._data).astype(np.float32), op
    if dt is _dtype.bool_:
        # 0/1 bytes: MAX is OR, MIN is AND (NCCL has no bitwise reductions)
        op = {RedOpType.SUM: RedOpType.MAX, RedOpType.AVG: RedOpType.MAX,
              RedOpType.PRODUCT: RedOpType.MIN}.get(op, op)
        return pg.engine.stage(t._data).view(np.uint8), op
    return _inplace(pg, t), op


def _avg(buf, n, dt):
    if dt is _dtype.bool_:
        return                          # the mean of booleans, as their OR
    if buf.dtype.kind in "iu":
        buf[...] = (buf / n).astype(buf.dtype)
    else:
        buf /= n


def _finish(pg, reqs, finish, outputs, what, async_op, statuses=None):
    w = Work(pg, reqs, finish, outputs, what, statuses)
    if async_op:
        return w
    w.wait()
    return None


# ----------------------------------------------------------------------- collectives
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` over the group; every rank gets the result in place.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> t = ember.tensor([1., 2.]); dist.all_reduce(t, op=dist.ReduceOp.MAX); t
        tensor([1., 2.])
        >>> dist.destroy_process_group()
    """
    pg = _resolve(group, "all_reduce")
    if pg is None:
        return None
    _check("all_reduce", [tensor], pg)
    buf, mop = _red_buf(pg, tensor, op, "all_reduce")
    reqs = pg.engine.allreduce(buf, mop)

    def finish():
        if op == RedOpType.AVG:
            _avg(buf, pg.size(), tensor.dtype)
        _write(tensor, buf)
    return _finish(pg, reqs, finish, [tensor], "all_reduce", async_op)


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Reduce ``tensor`` over the group into rank ``dst``'s ``tensor``."""
    pg = _resolve(group, "reduce")
    if pg is None:
        return None
    _check("reduce", [tensor], pg)
    root = _group_rank(pg, 0 if dst is None else dst, group_dst, "reduce")
    buf, mop = _red_buf(pg, tensor, op, "reduce")
    reqs = pg.engine.reduce(buf, mop, root)

    def finish():
        if pg.rank() == root:
            if op == RedOpType.AVG:
                _avg(buf, pg.size(), tensor.dtype)
            _write(tensor, buf)
    return _finish(pg, reqs, finish, [tensor], "reduce", async_op)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Copy rank ``src``'s ``tensor`` into every rank's ``tensor``.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> t = ember.arange(3); dist.broadcast(t, src=0); t
        tensor([0, 1, 2])
        >>> dist.destroy_process_group()
    """
    pg = _resolve(group, "broadcast")
    if pg is None:
        return None
    _check("broadcast", [tensor], pg)
    root = _group_rank(pg, 0 if src is None else src, group_src, "broadcast")
    buf = _inplace(pg, tensor)
    reqs = pg.engine.broadcast(buf, root)
    return _finish(pg, reqs, lambda: _write(tensor, buf), [tensor], "broadcast", async_op)


def _same_size(what, ref, tensors):
    for t in tensors:
        if t.numel() != ref.numel() or t.dtype != ref.dtype:
            raise ValueError(f"{what}: every tensor must have {ref.numel()} elements of "
                             f"{ref.dtype} like the input, got {t.numel()} of {t.dtype}")


def _split_write(tensors, buf):
    n = buf.size // max(len(tensors), 1)
    for i, t in enumerate(tensors):
        _write(t, buf.reshape(-1)[i * n:(i + 1) * n])


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """``tensor_list[i]`` = rank i's ``tensor``, on every rank.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = [ember.zeros(2)]; dist.all_gather(out, ember.ones(2)); out
        [tensor([1., 1.])]
        >>> dist.destroy_process_group()
    """
    pg = _resolve(group, "all_gather")
    if pg is None:
        return None
    _check("all_gather", list(tensor_list) + [tensor], pg)
    if len(tensor_list) != pg.size():
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors, expected "
                         f"one per rank ({pg.size()})")
    _same_size("all_gather", tensor, tensor_list)
    send = pg.engine.stage(tensor._data)
    recv = pg.engine.empty((pg.size(),) + send.shape, send.dtype)
    reqs = pg.engine.allgather(send, recv)
    return _finish(pg, reqs, lambda: _split_write(tensor_list, recv), tensor_list,
                   "all_gather", async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Rank i's ``input_tensor`` into the i-th slice (along dim 0, or of the flat tensor)
    of ``output_tensor``."""
    pg = _resolve(group, "all_gather_into_tensor")
    if pg is None:
        return None
    _check("all_gather_into_tensor", [output_tensor, input_tensor], pg)
    if output_tensor.numel() != input_tensor.numel() * pg.size() or \
            output_tensor.dtype != input_tensor.dtype:
        raise ValueError("all_gather_into_tensor: output tensor size must be equal to "
                         f"world_size ({pg.size()}) times input tensor size "
                         f"({input_tensor.numel()}), got {output_tensor.numel()}; dtypes "
                         f"{output_tensor.dtype} and {input_tensor.dtype}")
    send, recv = pg.engine.stage(input_tensor._data), _inplace(pg, output_tensor)
    reqs = pg.engine.allgather(send, recv)
    return _finish(pg, reqs, lambda: _write(output_tensor, recv), [output_tensor],
                   "all_gather_into_tensor", async_op)


_all_gather_base = all_gather_into_tensor


def _concat(pg, tensors):
    return np.concatenate([pg.engine.stage(t._data).reshape(-1) for t in tensors]) \
        if pg.engine.device_type == "cpu" else pg.engine.concat([t._data for t in tensors])


def _reduce_scatter(pg, output, send, op, what, async_op):
    buf, mop = _red_buf(pg, output, op, what)
    if buf.dtype != send.dtype:
        send = send.astype(buf.dtype)
    reqs = pg.engine.reduce_scatter(send, buf, mop)

    def finish():
        if op == RedOpType.AVG:
            _avg(buf, pg.size(), output.dtype)
        _write(output, buf)
    return _finish(pg, reqs, finish, [output], what, async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """``output`` = the reduction over ranks of their ``input_list[my rank]``."""
    pg = _resolve(group, "reduce_scatter")
    if pg is None:
        return None
    _check("reduce_scatter", [output] + list(input_list), pg)
    if len(input_list) != pg.size():
        raise ValueError(f"reduce_scatter: input_list has {len(input_list)} tensors, "
                         f"expected {pg.size()}")
    _same_size("reduce_scatter", output, input_list)
    return _reduce_scatter(pg, output, _concat(pg, input_list), op, "reduce_scatter",
                           async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """``output`` = the reduction over ranks of slice (my rank) of their ``input``."""
    pg = _resolve(group, "reduce_scatter_tensor")
    if pg is None:
        return None
    _check("reduce_scatter_tensor", [output, input], pg)
    if input.numel() != output.numel() * pg.size() or input.dtype != output.dtype:
        raise ValueError("reduce_scatter_tensor: input tensor must be the same size as "
                         f"output size ({output.numel()}) times world size ({pg.size()}), "
                         f"got {input.numel()}")
    return _reduce_scatter(pg, output, pg.engine.stage(input._data), op,
                           "reduce_scatter_tensor", async_op)


_reduce_scatter_base = reduce_scatter_tensor


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """Rank ``dst`` gets every rank's ``tensor`` in ``gather_list``."""
    pg = _resolve(group, "gather")
    if pg is None:
        return None
    root = _group_rank(pg, 0 if dst is None else dst, group_dst, "gather")
    me = pg.rank() == root
    if me and (not gather_list or len(gather_list) != pg.size()):
        raise ValueError(f"gather: gather_list on the destination rank must hold "
                         f"{pg.size()} tensors")
    if not me and gather_list:
        raise ValueError("Argument ``gather_list`` must NOT be specified on non-destination "
                         "ranks.")
    _check("gather", [tensor] + list(gather_list or []), pg)
    _same_size("gather", tensor, gather_list or [])
    send = pg.engine.stage(tensor._data)
    recv = pg.engine.empty((pg.size(),) + send.shape, send.dtype) if me else None
    reqs = pg.engine.gather(send, recv, root)
    return _finish(pg, reqs, (lambda: _split_write(gather_list, recv)) if me else None,
                   gather_list or [], "gather", async_op)


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """Every rank's ``tensor`` = rank ``src``'s ``scatter_list[rank]``."""
    pg = _resolve(group, "scatter")
    if pg is None:
        return None
    root = _group_rank(pg, 0 if src is None else src, group_src, "scatter")
    me = pg.rank() == root
    if me and (not scatter_list or len(scatter_list) != pg.size()):
        raise ValueError(f"scatter: scatter_list on the source rank must hold {pg.size()} "
                         "tensors")
    if not me and scatter_list:
        raise ValueError("Argument ``scatter_list`` must NOT be specified on non-source "
                         "ranks.")
    _check("scatter", [tensor] + list(scatter_list or []), pg)
    _same_size("scatter", tensor, scatter_list or [])
    send = _concat(pg, scatter_list) if me else None
    recv = _inplace(pg, tensor)
    reqs = pg.engine.scatter(send, recv, root)
    return _finish(pg, reqs, lambda: _write(tensor, recv), [tensor], "scatter", async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """``output_tensor_list[i]`` = rank i's ``input_tensor_list[my rank]`` (sizes may
    differ per pair)."""
    pg = _resolve(group, "all_to_all")
    if pg is None:
        return None
    _check("all_to_all", list(output_tensor_list) + list(input_tensor_list), pg)
    if len(output_tensor_list) != pg.size() or len(input_tensor_list) != pg.size():
        raise ValueError(f"all_to_all: both lists must hold {pg.size()} tensors")
    send = _concat(pg, input_tensor_list)
    recv = pg.engine.empty((sum(t.numel() for t in output_tensor_list),), send.dtype)
    item = send.dtype.itemsize
    reqs = pg.engine.alltoallv(send, [t.numel() * item for t in input_tensor_list], recv,
                               [t.numel() * item for t in output_tensor_list])

    def finish():
        off = 0
        for t in output_tensor_list:
            _write(t, recv[off:off + t.numel()])
            off += t.numel()
    return _finish(pg, reqs, finish, output_tensor_list, "all_to_all", async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    """Split ``input`` along dim 0 (``input_split_sizes`` rows to each rank, or equally),
    send the pieces, and concatenate what arrives into ``output``."""
    pg = _resolve(group, "all_to_all_single")
    if pg is None:
        return None
    _check("all_to_all_single", [output, input], pg)
    n = pg.size()

    def counts(t, splits, name):
        rows = t.shape[0] if t.dim() else 1
        row = t.numel() // max(rows, 1)
        if not splits:
            if rows % n:
                raise ValueError(f"all_to_all_single: {name} dim 0 ({rows}) is not divisible "
                                 f"by the world size ({n})")
            splits = [rows // n] * n
        if len(splits) != n or sum(splits) != rows:
            raise ValueError(f"all_to_all_single: {name}_split_sizes {list(splits)} must have "
                             f"{n} entries summing to dim 0 ({rows})")
        return [int(s) * row * t.element_size() for s in splits]
    sc, rc = counts(input, input_split_sizes, "input"), counts(output, output_split_sizes,
                                                                "output")
    send, recv = pg.engine.stage(input._data), _inplace(pg, output)
    reqs = pg.engine.alltoallv(send, sc, recv, rc)
    return _finish(pg, reqs, lambda: _write(output, recv), [output], "all_to_all_single",
                   async_op)


def barrier(group=None, async_op=False, device_ids=None):
    """Wait until every rank of the group reaches this call.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> dist.barrier()
        >>> dist.destroy_process_group()
    """
    pg = _resolve(group, "barrier")
    if pg is None:
        return None
    return _finish(pg, pg.engine.barrier(), None, [], "barrier", async_op)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier through the store in which rank 0 names the ranks that did not arrive
    within ``timeout``, as torch's."""
    pg = _resolve(group, "monitored_barrier")
    if pg is None:
        return None
    store, t = _world.store, timeout or pg.timeout
    secs = t.total_seconds() if isinstance(t, datetime.timedelta) else float(t)
    if store is None:
        return barrier(group)
    pg.barriers = getattr(pg, "barriers", 0) + 1
    key = f"monitored_barrier/{pg.group_name}/{pg.barriers}"
    if pg.rank() == 0:
        missing = []
        for r in pg.ranks[1:]:
            try:
                _store_wait(pg, store, f"{key}/{r}", 0 if missing and not wait_all_ranks else
                            secs)
            except Exception:
                missing.append(r)
                if not wait_all_ranks:
                    break
        if missing:
            raise RuntimeError(
                f"Rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} failed "
                f"to pass monitoredBarrier in {int(secs * 1000)} ms")
        store.set(f"{key}/done", b"1")
    else:
        store.set(f"{key}/{get_rank()}", b"1")
        _store_wait(pg, store, f"{key}/done", secs)


def _store_wait(pg, store, key, secs):
    """``store.wait`` in short slices that keep the engine progressing: a peer may still be
    finishing an earlier collective that needs this rank's progress engine to complete."""
    deadline = time.monotonic() + secs
    while True:
        try:
            return store.wait([key], min(0.05, max(0.0, deadline - time.monotonic())))
        except DistStoreError:
            if time.monotonic() >= deadline:
                raise
            pg.engine.progress()


# ----------------------------------------------------------------------- point to point
def _p2p(what, tensor, peer, group, tag, group_peer, is_send):
    pg = _resolve(group, what)
    if pg is None:
        return None
    _check(what, [tensor], pg)
    if peer is None and group_peer is None:
        if is_send:
            raise ValueError(f"{what}: dst must be given")
        r = None
    else:
        r = _group_rank(pg, peer, group_peer, what)
    if is_send:
        if r == pg.rank():
            raise ValueError("Invalid destination rank: should not be the same as rank of "
                             "the current process.")
        buf = pg.engine.stage(tensor._data)
        return Work(pg, pg.engine.send(buf, r, tag), None, [tensor], what)
    buf = _inplace(pg, tensor)
    statuses = [_mpi.mpi().Status()] if pg.engine.device_type == "cpu" else None
    return Work(pg, pg.engine.recv(buf, r, tag), lambda: _write(tensor, buf), [tensor], what,
                statuses)


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Start sending ``tensor`` to rank ``dst``; returns a Work."""
    return _p2p("isend", tensor, dst, group, tag, group_dst, True)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    """Start receiving into ``tensor`` from rank ``src`` (any rank when None)."""
    return _p2p("irecv", tensor, src, group, tag, group_src, False)


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Send ``tensor`` to rank ``dst`` and wait until it has left."""
    w = isend(tensor, dst, group, tag, group_dst)
    if w is not None:
        w.wait()


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receive into ``tensor`` from ``src`` (any rank when None); returns the sender's
    global rank."""
    w = irecv(tensor, src, group, tag, group_src)
    if w is None:
        return -1
    w.wait()
    if src is None and group_src is None:
        return w.pg.ranks[w.source_rank()]
    return src if src is not None else w.pg.ranks[group_src]


class P2POp:
    """One send or receive for ``batch_isend_irecv``: ``P2POp(dist.isend, tensor, peer)``."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise ValueError("Invalid ``op``. Expected ``op`` to be of type "
                             "``torch.distributed.isend`` or ``torch.distributed.irecv``.")
        self.op, self.tensor, self.peer, self.group, self.tag, self.group_peer = \
            op, tensor, peer, group, tag, group_peer


def batch_isend_irecv(p2p_op_list):
    """Start every send/receive of ``p2p_op_list``; returns their Works."""
    if not p2p_op_list or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise ValueError("Invalid ``p2p_op_list``. Each op is expected to to be of type "
                         "``torch.distributed.P2POp``.")
    return [p.op(p.tensor, p.peer, p.group, p.tag, p.group_peer) for p in p2p_op_list]


# ----------------------------------------------------------------------- Python objects
def _obj_tensors(objs):
    from .._tensor import Tensor
    blobs = [np.frombuffer(pickle.dumps(o), np.uint8) for o in objs]
    return [Tensor._wrap(b.copy()) for b in blobs]


def _load(t, n):
    return pickle.loads(t._data[:n].tobytes())


def _gather_sizes(pg, n, group):
    from .._tensor import Tensor
    sizes = [Tensor._wrap(np.zeros(1, np.int64)) for _ in range(pg.size())]
    all_gather(sizes, Tensor._wrap(np.array([n], np.int64)), group)
    return [int(s._data[0]) for s in sizes]


def all_gather_object(object_list, obj, group=None):
    """``object_list[i]`` = rank i's picklable ``obj``, on every rank.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = [None]; dist.all_gather_object(out, {"a": 1}); out
        [{'a': 1}]
        >>> dist.destroy_process_group()
    """
    from .._tensor import Tensor
    pg = _resolve(group, "all_gather_object")
    if pg is None:
        return
    (t,) = _obj_tensors([obj])
    sizes = _gather_sizes(pg, t.numel(), group)
    m = max(sizes)
    padded = Tensor._wrap(np.zeros(m, np.uint8))
    padded._data[:t.numel()] = t._data
    out = [Tensor._wrap(np.zeros(m, np.uint8)) for _ in sizes]
    all_gather(out, padded, group)
    object_list[:] = [_load(o, n) for o, n in zip(out, sizes)]


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    """Rank ``dst`` gets every rank's ``obj`` in ``object_gather_list``."""
    pg = _resolve(group, "gather_object")
    if pg is None:
        return
    root = _group_rank(pg, 0 if dst is None else dst, group_dst, "gather_object")
    tmp = [None] * pg.size()
    all_gather_object(tmp, obj, group)     # sizes differ per rank: gather them all
    if pg.rank() == root:
        object_gather_list[:] = tmp


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Every rank's ``object_list`` = rank ``src``'s (its entries pickled and broadcast)."""
    from .._tensor import Tensor
    pg = _resolve(group, "broadcast_object_list")
    if pg is None:
        return
    root = _group_rank(pg, 0 if src is None else src, group_src, "broadcast_object_list")
    mine = pg.rank() == root
    blobs = _obj_tensors(object_list) if mine else None
    sizes = Tensor._wrap(np.array([b.numel() for b in blobs] if mine else
                                  [0] * len(object_list), np.int64))
    broadcast(sizes, group=group, group_src=root)
    data = Tensor._wrap(np.concatenate([b._data for b in blobs]) if mine else
                        np.empty(int(sizes._data.sum()), np.uint8))
    broadcast(data, group=group, group_src=root)
    if not mine:
        off = 0
        for i, n in enumerate(sizes._data.tolist()):
            object_list[i] = pickle.loads(data._data[off:off + n].tobytes())
            off += n


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                        group=None, group_src=None):
    """``scatter_object_output_list[0]`` = rank ``src``'s ``scatter_object_input_list[rank]``."""
    pg = _resolve(group, "scatter_object_list")
    if pg is None:
        return
    root = _group_rank(pg, 0 if src is None else src, group_src, "scatter_object_list")
    objs = [list(scatter_object_input_list) if pg.rank() == root else None]
    broadcast_object_list(objs, group=group, group_src=root)
    scatter_object_output_list[0] = objs[0][pg.rank()]


# ----------------------------------------------------------------------- more of torch's API
GroupName = typing.NewType("GroupName", str)
SHRINK_DEFAULT, SHRINK_ABORT = 0, 1


class BackendConfig:
    """The backend that serves each device type, parsed from a backend string, as torch's.

    Example:
        >>> import ember.distributed as dist
        >>> dist.BackendConfig(dist.Backend("gloo")), dist.BackendConfig("cpu:gloo,cuda:nccl")
        (cpu:gloo,cuda:gloo, cpu:gloo,cuda:nccl)
    """

    def __init__(self, backend):
        backend = str(backend)
        if backend == Backend.UNDEFINED:
            backend = Backend.default_device_backend_map["cpu"]      # ember's accelerator: cpu
        if backend.lower() in Backend.backend_list:
            self.device_backend_map = dict.fromkeys(Backend.backend_capability[backend.lower()],
                                                    Backend(backend))
            return
        self.device_backend_map = {}
        for pair in backend.lower().split(","):
            device, sep, name = pair.partition(":")
            if not sep or ":" in name:
                raise ValueError(f"Invalid device:backend pairing: {pair}. The custom backend "
                                 f"string argument is invalid: {backend}.")
            if device in self.device_backend_map:
                raise ValueError(f"Duplicate device type {device} in backend string: {backend}.")
            self.device_backend_map[device] = Backend(name)

    def __repr__(self):
        return ",".join(f"{d}:{b}" for d, b in self.device_backend_map.items())

    def get_device_backend_map(self):
        return self.device_backend_map


def get_backend_config(group=None):
    """The ``device:backend`` pairs of ``group`` (default: the default group).

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> dist.get_backend_config()
        'cpu:gloo,cuda:gloo'
        >>> dist.destroy_process_group()
    """
    pg = _resolve(group, "get_backend_config")
    if pg is None:
        raise ValueError("Invalid process group specified")
    return str(BackendConfig(pg._backend))


def get_default_backend_for_device(device):
    """'gloo' for cpu, 'nccl' for cuda, as torch.

    Example:
        >>> import ember.distributed as dist
        >>> dist.get_default_backend_for_device("cuda:1")
        'nccl'
    """
    kind = device.type if hasattr(device, "type") else _device(device).type
    if kind not in Backend.default_device_backend_map:
        raise ValueError(f"Default backend not registered for device : {device}")
    return Backend.default_device_backend_map[kind]


def is_backend_available(backend):
    """Whether ``backend`` (a name, or ``device:backend`` pairs) can run here.

    Example:
        >>> import ember.distributed as dist
        >>> dist.is_backend_available("ucc")
        False
    """
    names = BackendConfig(Backend(backend)).get_device_backend_map().values() if ":" in \
        backend else [backend.lower()]
    avail = {"gloo": is_gloo_available, "mpi": is_mpi_available, "nccl": is_nccl_available}
    return all(n in avail and avail[n]() for n in names)


def is_ucc_available():
    """False: ember has no UCC backend (collectives go through MPI or NCCL).

    Example:
        >>> import ember.distributed as dist
        >>> dist.is_ucc_available()
        False
    """
    return False


def is_xccl_available():
    """False: ember has no XCCL (Intel GPU) backend.

    Example:
        >>> import ember.distributed as dist
        >>> dist.is_xccl_available()
        False
    """
    return False


def supports_complex(reduceOp):
    """Whether ``reduceOp`` is defined on complex tensors (SUM, AVG, PREMUL_SUM).

    Example:
        >>> import ember.distributed as dist
        >>> dist.supports_complex(dist.ReduceOp.SUM), dist.supports_complex(dist.ReduceOp.MAX)
        (True, False)
    """
    return reduceOp not in (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT, ReduceOp.BAND,
                            ReduceOp.BOR, ReduceOp.BXOR)


def get_pg_count():
    """How many process groups this process has made (the default group counts one).

    Example:
        >>> import ember.distributed as dist
        >>> dist.get_pg_count()
        0
    """
    return _world.group_count


def get_node_local_rank(fallback_rank=None):
    """This process's rank on its machine: ``LOCAL_RANK`` (set by emberrun and torchrun),
    else ``fallback_rank``.

    Example:
        >>> import ember.distributed as dist
        >>> dist.get_node_local_rank(fallback_rank=0)
        0
    """
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("LOCAL_RANK is not in the environment. Consider passing fallback_rank "
                       "to allow `get_node_local_rank` to work, assuming you are not running "
                       "in a multi-device context and want the code to run locally instead.")


@contextlib.contextmanager
def record_comm(name):
    """Inside, every collective's profiler range is named ``name`` (instead of
    ``gloo:all_reduce`` ...).

    Example:
        >>> import ember, ember.distributed as dist
        >>> with dist.record_comm("grads"):
        ...     pass
    """
    prev, _world.comm_name = _world.comm_name, name
    try:
        yield
    finally:
        _world.comm_name = prev


class DebugLevel(enum.IntEnum):
    """``TORCH_DISTRIBUTED_DEBUG``'s levels. At DETAIL, every collective first checks that all
    ranks of the group called the same one on the same shapes and dtypes (torch's
    ProcessGroupWrapper check), raising on a mismatch instead of hanging or mixing data.

    Example:
        >>> import ember.distributed as dist
        >>> dist.DebugLevel.DETAIL
        <DebugLevel.DETAIL: 2>
    """
    OFF = 0
    INFO = 1
    DETAIL = 2


def set_debug_level(level):
    """Set the debug level (a ``DebugLevel``).

    Example:
        >>> import ember.distributed as dist
        >>> dist.set_debug_level(dist.DebugLevel.INFO); dist.get_debug_level()
        <DebugLevel.INFO: 1>
        >>> dist.set_debug_level(dist.DebugLevel.OFF)
    """
    _world.debug = DebugLevel(level)


def get_debug_level():
    """The debug level (``TORCH_DISTRIBUTED_DEBUG`` when ember.distributed was imported, or
    what ``set_debug_level`` set).

    Example:
        >>> import ember.distributed as dist
        >>> dist.get_debug_level() in tuple(dist.DebugLevel)
        True
    """
    return _world.debug


def set_debug_level_from_env():
    """Read the level from ``TORCH_DISTRIBUTED_DEBUG`` (OFF, INFO or DETAIL; unset: OFF).

    Example:
        >>> import ember.distributed as dist, os
        >>> os.environ["TORCH_DISTRIBUTED_DEBUG"] = "info"
        >>> dist.set_debug_level_from_env(); dist.get_debug_level()
        <DebugLevel.INFO: 1>
        >>> del os.environ["TORCH_DISTRIBUTED_DEBUG"]; dist.set_debug_level_from_env()
    """
    v = os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF").upper()
    if v not in DebugLevel.__members__:
        raise ValueError("The value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO, or DETAIL.")
    _world.debug = DebugLevel[v]


_world.debug = DebugLevel.OFF
with contextlib.suppress(ValueError):       # a bad value raises at set_debug_level_from_env()
    set_debug_level_from_env()


def _verify(pg, what, t):
    """DETAIL: all-gather a fingerprint of this call (the op, and the dtype and shape of the
    tensor that is alike on every rank; all-to-all's sizes may differ) and compare."""
    fp = (what, str(t.dtype), None if what.startswith("all_to_all") else tuple(t.shape))
    got = np.zeros(pg.size() * 16, np.uint8)
    mine = np.frombuffer(hashlib.sha1(repr(fp).encode()).digest()[:16], np.uint8)
    pg.engine.wait(pg.engine.allgather(mine.copy(), got), pg.timeout.total_seconds(), what)
    bad = [pg.ranks[i] for i, h in enumerate(got.reshape(-1, 16)) if (h != mine).any()]
    if bad:
        raise RuntimeError(f"Detected mismatch between collectives on ranks. Rank "
                           f"{get_rank()} is running collective {what} with tensor "
                           f"{fp[1:]}, but ranks {bad} ran a different collective or other "
                           "shapes/dtypes (TORCH_DISTRIBUTED_DEBUG=DETAIL)")


def _deprecated(name):
    warnings.warn(f"`torch.distributed.{name}` will be deprecated. If you must use it, please "
                  "revisit our documentation later at https://pytorch.org/docs/main/"
                  "distributed.html#collective-functions", FutureWarning, stacklevel=3)


def _then(w, after):
    """Run ``after`` once ``w`` completes (its results written)."""
    first = w._finish
    w._finish = lambda: (first and first(), after())
    return w


def _flat(tensors, what):
    from .. import cat
    if len({t.dtype for t in tensors}) > 1:
        raise ValueError(f"{what}: Invalid usage of tensors with different dtypes. Found "
                         f"{sorted({str(t.dtype) for t in tensors})}.")
    return cat([t.detach().reshape(-1) for t in tensors])


def _unflat(flat, tensors):
    off = 0
    for t in tensors:
        _write(t, flat._data[off:off + t.numel()])
        off += t.numel()


def _all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op=False):
    """One all-reduce of ``tensors`` packed into one buffer, results written back."""
    if _resolve(group, "all_reduce_coalesced") is None:
        return None
    if any(t.dtype.is_complex for t in tensors) and not supports_complex(op):
        raise ValueError(f"all_reduce does not support {op} on complex tensors")
    flat = _flat(tensors, "all_reduce_coalesced")
    w = _then(all_reduce(flat, op, group, async_op=True), lambda: _unflat(flat, tensors))
    w._outputs = tensors
    return w if async_op else w.wait() and None


def all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op=False):
    """All-reduce every tensor of ``tensors`` (one dtype) in one collective (deprecated in
    torch, with its FutureWarning); ``async_op`` returns a Future, as torch's.

    Example:
        >>> import ember, ember.distributed as dist, warnings
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> ts = [ember.ones(2), ember.ones(1, 2)]
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore"); dist.all_reduce_coalesced(ts)
        >>> ts[1]
        tensor([[1., 1.]])
        >>> dist.destroy_process_group()
    """
    _deprecated("all_reduce_coalesced")
    tensors = [tensors] if _is_tensor(tensors) else list(tensors)
    w = _all_reduce_coalesced(tensors, op, group, async_op)
    return w.get_future() if async_op and w is not None else None


def _all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op=False):
    pg = _resolve(group, "all_gather_coalesced")
    if pg is None:
        return None
    if not isinstance(output_tensor_lists, list):
        raise TypeError("Invalid function argument: output_tensor_lists should be a list")
    if len(output_tensor_lists) != pg.size():
        raise ValueError(f"all_gather_coalesced: output_tensor_lists has "
                         f"{len(output_tensor_lists)} lists, expected one per rank "
                         f"({pg.size()})")
    flat = _flat(input_tensor_list, "all_gather_coalesced")
    out = _flat([t for lst in output_tensor_lists for t in lst], "all_gather_coalesced")
    w = _then(all_gather_into_tensor(out, flat, group, async_op=True),
              lambda: _unflat(out, [t for lst in output_tensor_lists for t in lst]))
    w._outputs = output_tensor_lists
    return w if async_op else w.wait() and None


def all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op=False):
    """``output_tensor_lists[i][j]`` = rank i's ``input_tensor_list[j]``, in one collective
    (deprecated in torch, with its FutureWarning); ``async_op`` returns a Future.

    Example:
        >>> import ember, ember.distributed as dist, warnings
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = [[ember.zeros(2), ember.zeros(1)]]
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     dist.all_gather_coalesced(out, [ember.ones(2), ember.tensor([3.])])
        >>> out
        [[tensor([1., 1.]), tensor([3.])]]
        >>> dist.destroy_process_group()
    """
    _deprecated("all_gather_coalesced")
    w = _all_gather_coalesced(output_tensor_lists, input_tensor_list, group, async_op)
    return w.get_future() if async_op and w is not None else None


def _coalesced_pairs(outputs, inputs, fn, group=None, async_op=True, **kw):
    """``fn(outputs[i], inputs[i])`` for each i, as one Work."""
    works = [fn(o, i, group=group, async_op=True, **kw) for o, i in zip(outputs, inputs)]
    w = Work(works[0].pg, [r for x in works for r in x._reqs], None, list(outputs), fn.__name__)
    w._finish = lambda: [x._complete() for x in works]
    return w if async_op else w.wait() and None


def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
    """``all_gather_into_tensor`` under torch's functional-collective name.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = ember.zeros(2); dist.all_gather_single(out, ember.ones(2)); out
        tensor([1., 1.])
        >>> dist.destroy_process_group()
    """
    return all_gather_into_tensor(output_tensor, input_tensor, group, async_op)


def reduce_scatter_single(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """``reduce_scatter_tensor`` under torch's functional-collective name.

    Example:
        >>> import ember, ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> out = ember.zeros(2); dist.reduce_scatter_single(out, ember.ones(2)); out
        tensor([1., 1.])
        >>> dist.destroy_process_group()
    """
    return reduce_scatter_tensor(output, input, op, group, async_op)


def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None,
                     use_batch=False):
    """Send the picklable objects of ``object_list`` to rank ``dst`` (their sizes, then their
    bytes), as torch's; the receiver calls ``recv_object_list`` with a list of as many.

    Example:
        >>> import ember.distributed as dist
        >>> callable(dist.send_object_list)
        True
    """
    pg = _resolve(group, "send_object_list")
    if pg is None:
        return
    peer = pg.ranks[_group_rank(pg, dst, group_dst, "send_object_list")]
    if peer == pg.ranks[pg.rank()]:
        raise ValueError("Invalid destination rank: destination rank should not be the same "
                         "as the rank of the current process.")
    from .._tensor import Tensor
    blobs = _obj_tensors(object_list)
    send(Tensor._wrap(np.array([b.numel() for b in blobs], np.int64)), peer, group)
    send(Tensor._wrap(np.concatenate([b._data for b in blobs])), peer, group)


def recv_object_list(object_list, src=None, group=None, device=None, group_src=None,
                     use_batch=False):
    """Fill ``object_list`` with the objects rank ``src`` (any rank when None) sent with
    ``send_object_list``; returns the sender's rank.

    Example:
        >>> import ember.distributed as dist
        >>> callable(dist.recv_object_list)
        True
    """
    pg = _resolve(group, "recv_object_list")
    if pg is None:
        return -1
    if src is not None or group_src is not None:
        src = pg.ranks[_group_rank(pg, src, group_src, "recv_object_list")]
        if src == pg.ranks[pg.rank()]:
            raise ValueError("Invalid source rank: source rank should not be the same as the "
                             "rank of the current process.")
    from .._tensor import Tensor
    sizes = Tensor._wrap(np.empty(len(object_list), np.int64))
    sender = recv(sizes, src, group)
    data = Tensor._wrap(np.empty(int(sizes._data.sum()), np.uint8))
    recv(data, sender, group)
    off = 0
    for i, n in enumerate(sizes._data.tolist()):
        object_list[i] = pickle.loads(data._data[off:off + n].tobytes())
        off += n
    return sender


def new_subgroups_by_enumeration(ranks_per_subgroup_list, timeout=None, backend=None,
                                 pg_options=None, group_desc=None):
    """A group for each list of global ranks (every rank calls this); returns ``(the group
    this rank is in or None, all of them)``.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> cur, all_ = dist.new_subgroups_by_enumeration([[0]]); dist.get_world_size(cur)
        1
        >>> dist.destroy_process_group()
    """
    if not ranks_per_subgroup_list:
        raise ValueError("The arg 'ranks_per_subgroup_list' cannot be empty")
    seen, subgroups, cur = {}, [], None
    for ranks in ranks_per_subgroup_list:
        for r in ranks:
            if r in seen:
                raise ValueError(f"Rank {r} has appeared in both subgroup {seen[r]} and "
                                 f"{ranks}")
            seen[r] = ranks
    for ranks in ranks_per_subgroup_list:
        g = new_group(ranks, timeout, backend, pg_options, group_desc=group_desc)
        subgroups.append(g)
        cur = g if get_rank() in ranks else cur
    return cur, subgroups


def new_subgroups(group_size=None, group=None, timeout=None, backend=None, pg_options=None,
                  group_desc=None):
    """Consecutive subgroups of ``group_size`` ranks of ``group`` (default: the world); returns
    ``(this rank's subgroup, all of them)``.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> cur, all_ = dist.new_subgroups(1); dist.get_process_group_ranks(cur)
        [0]
        >>> dist.destroy_process_group()
    """
    if group_size is None:
        from .. import cuda
        if not cuda.is_available():
            raise ValueError("Default group size only takes effect when CUDA is available.If "
                             "your subgroup using a backend that does not depend on CUDA,"
                             "please pass in 'group_size' correctly.")
        group_size = cuda.device_count()
    if group_size <= 0:
        raise ValueError(f"The arg 'group_size' ({group_size}) must be positive")
    world = get_world_size(group)
    if world < group_size:
        raise ValueError(f"The arg 'group_size' ({group_size}) must not exceed the world size "
                         f"({world})")
    if world % group_size:
        raise ValueError(f"The world size ({world}) must be divisible by '{group_size=}'")
    ranks = get_process_group_ranks(group)
    return new_subgroups_by_enumeration([ranks[i:i + group_size] for i in
                                         range(0, len(ranks), group_size)], timeout, backend,
                                        pg_options, group_desc)


def _split_engine(pg, color, key, what):
    if not hasattr(pg.engine, "split"):
        raise NotImplementedError(f"{what}: splitting an NCCL group is not implemented in "
                                  "ember")
    return pg.engine.split(color, key)


def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None,
                group_desc=None, backend=None):
    """Split ``parent_pg`` (default: the world) into disjoint groups, each a list of parent
    group ranks, in one ``MPI_Comm_split``; every rank of the parent calls it. Returns this
    rank's group, or None when it is in none.

    Example:
        >>> import ember.distributed as dist
        >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0,
        ...                         world_size=1)
        >>> g = dist.split_group(split_ranks=[[0]]); dist.get_process_group_ranks(g)
        [0]
        >>> dist.destroy_process_group()
    """
    if not split_ranks:
        raise ValueError("split_ranks cannot be None or empty")
    parent = parent_pg or _default_pg("split_group")
    if parent not in _world.groups:
        raise ValueError(f"Group {parent} is not registered")
    me, mine, color = parent.rank(), sorted(split_ranks[0]), None
    for i, ranks in enumerate(split_ranks):
        if not ranks:
            raise ValueError("the split group cannot be empty")
        if len(ranks) > _world.pg.size():
            raise ValueError("the split group's size should be less or equal to the "
                             "world_size set by init_process_group")
        if len(ranks) != len(set(ranks)):
            raise ValueError("the split group cannot have duplicate ranks")
        if me in ranks:
            mine, color = sorted(ranks), i
    # NOTE: torch splits only NCCL groups (gloo raises); MPI splits any communicator
    g = _register(_split_engine(parent, color, me, "split_group"),
                  [parent.ranks[r] for r in mine], backend or parent._backend,
                  timeout or parent.timeout, group_desc)
    return None if g is GroupMember.NON_GROUP_MEMBER else g


def shrink_group(ranks_to_exclude, group=None, shrink_flags=SHRINK_DEFAULT, pg_options=None):
    """A new group of ``group``'s ranks (default: the world) but ``ranks_to_exclude`` (group
    ranks); only the remaining ranks call it (``MPI_Comm_create_group``), so it works when
    the excluded ranks have failed or left. Shrinking the default group destroys the other
    groups and makes the new one the default, its ranks renumbered 0..n-1.

    Example:
        >>> import ember.distributed as dist
        >>> callable(dist.shrink_group)
        True
    """
    if not isinstance(ranks_to_exclude, list):
        raise TypeError(f"ranks_to_exclude must be a list, but got "
                        f"{type(ranks_to_exclude).__name__}. Example: [1, 3, 5] to exclude "
                        "ranks 1, 3, and 5.")
    if not ranks_to_exclude:
        raise ValueError("ranks_to_exclude cannot be empty. To shrink a group, you must "
                         "specify at least one rank to exclude. Example: [failed_rank_id]")
    if shrink_flags not in (SHRINK_DEFAULT, SHRINK_ABORT):
        raise ValueError(f"Invalid shrink_flags value: {shrink_flags}. Must be one of: "
                         f"SHRINK_DEFAULT ({SHRINK_DEFAULT}) or SHRINK_ABORT ({SHRINK_ABORT}).")
    pg = _resolve(group, "shrink_group")
    n, default = pg.size(), pg is _world.pg
    if n <= 1:
        raise ValueError(f"Cannot shrink a process group with size {n}. Group must have at "
                         "least 2 ranks to support shrinking.")
    for i, r in enumerate(ranks_to_exclude):
        if not isinstance(r, int):
            raise TypeError(f"All elements in ranks_to_exclude must be integers. Element at "
                            f"index {i} is {type(r).__name__}: {r}")
        if not 0 <= r < n:
            raise ValueError(f"Rank {r} at index {i} is out of bounds for group size {n}. "
                             f"Valid ranks are in range [0, {n - 1}].")
        if r in ranks_to_exclude[:i]:
            raise ValueError(f"Duplicate rank {r} found in ranks_to_exclude at index {i}. "
                             "Each rank can only be excluded once.")
    if len(ranks_to_exclude) >= n:
        raise ValueError(f"Cannot exclude all {n} ranks from process group. At least one rank "
                         f"must remain. Excluding {len(ranks_to_exclude)} ranks.")
    if pg.rank() in ranks_to_exclude:
        raise RuntimeError(f"Current rank {pg.rank()} is in the exclusion list and should not "
                           "call shrink_group(). Only non-excluded ranks should participate "
                           "in the shrinking operation. Excluded ranks should terminate their "
                           "processes instead.")
    if not hasattr(pg.engine, "split"):
        raise TypeError(f"Process group backend for '{pg.group_name}' does not support "
                        "shrinking operations.")
    keep = [r for r in range(n) if r not in ranks_to_exclude]
    engine = pg.engine.subgroup(keep, collective=False)
    if not default:
        return _register(engine, [pg.ranks[r] for r in keep], pg._backend, pg.timeout)
    for g in [g for g in _world.groups if g is not pg]:
        destroy_process_group(g)
    new = ProcessGroup(engine, list(range(len(keep))), pg._backend, pg.timeout, pg.store)
    new.group_name, new.group_desc, new.bound_device_id = str(_world.group_count), \
        pg.group_desc, pg.bound_device_id
    _world.group_count += 1
    pg.engine.close()
    _world.groups, _world.pg = {new: new.group_name}, new
    return new


_breakpoint_cache = {}


def breakpoint(rank=0, skip=0, timeout_s=3600):
    """Stop in the debugger on rank ``rank`` only (reading the terminal, not the pipe a
    launcher gave the process); the other ranks wait at a barrier until it continues. The
    groups' timeouts become ``timeout_s`` so the wait does not time out.

    Example:
        >>> import ember.distributed as dist
        >>> callable(dist.breakpoint)
        True
    """
    import traceback
    if skip > 0:
        key = hash(str(traceback.format_exc()))
        _breakpoint_cache[key] = _breakpoint_cache.get(key, 0) + 1
        if _breakpoint_cache[key] <= skip:
            warnings.warn(f"Skip the breakpoint, counter={_breakpoint_cache[key]}")
            return
    if timeout_s is not None:
        for g in _world.groups:
            g.timeout = datetime.timedelta(seconds=timeout_s)
    if get_rank() == rank:
        import pdb

        class _DistributedPdb(pdb.Pdb):
            def interaction(self, *args, **kwargs):
                _stdin = sys.stdin          # a spawned rank's stdin is not the terminal
                try:
                    sys.stdin = open("/dev/stdin")
                    super().interaction(*args, **kwargs)
                finally:
                    sys.stdin = _stdin
        dbg = _DistributedPdb()
        dbg.message("\n!!! ATTENTION !!!\n\nType 'up' to get to the frame that called "
                    f"dist.breakpoint(rank={rank})\n")
        dbg.set_trace()
    barrier()


class ProcessGroupGloo(ProcessGroup):
    """A CPU process group made straight from a store, as torch's ``ProcessGroupGloo(store,
    rank, size, timeout)``: every one of ``size`` processes calls it with the same store.
    ember serves it with MPI, like ``init_process_group("gloo")``; no default group needed.

    Example:
        >>> import ember, ember.distributed as dist
        >>> pg = dist.ProcessGroupGloo(dist.HashStore(), 0, 1)
        >>> t = ember.ones(2); pg.allreduce([t]).wait(); t
        True
        tensor([1., 1.])
    """

    def __init__(self, store, rank, size, timeout=datetime.timedelta(seconds=1800)):
        timeout = timeout if isinstance(timeout, datetime.timedelta) else \
            datetime.timedelta(seconds=timeout)
        super().__init__(_MpiEngine(_mpi.world_comm(store, rank, size, timeout.total_seconds())),
                         list(range(size)), Backend("gloo"), timeout, store)
        self.group_desc = "ProcessGroupGloo"
