"""Process groups and collectives, as ``torch.distributed`` (c10d).

Every collective stages its tensors as contiguous arrays on the engine's device (host NumPy
for MPI, CuPy for NCCL), starts one non-blocking engine call, and returns a ``Work``; waiting
on it polls the engine and then writes results back into the caller's tensors (so
non-contiguous and widened tensors come out right). ``async_op=False`` is start + wait.

Reductions of float16, bfloat16 and float8 run in float32 (MPI has no such types), rounded
once to the tensor's dtype at the end; bool reduces as uint8 (SUM is OR, PRODUCT is AND, as
torch).
"""
import datetime
import enum
import os
import pickle
import time

import numpy as np

from .. import _dtype
from .._backends import backend
from .._ops.dispatch import hooks
from ..futures import Future
from . import _mpi, _watchdog
from .store import (DistBackendError, DistNetworkError, DistStoreError, FileStore, PrefixStore,
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
    GLOO, MPI, NCCL, UNDEFINED = "gloo", "mpi", "nccl", "undefined"

    def __new__(cls, name):
        name = name.lower()
        if not all(p.split(":")[-1] in ("gloo", "mpi", "nccl") for p in name.split(",")):
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
        self.store = store
        self.group_name = ""

    def rank(self):
        return self.engine.rank

    def size(self):
        return len(self.ranks)

    def name(self):
        return self._backend

    def __repr__(self):
        return f"ProcessGroup(backend={self._backend!r}, ranks={self.ranks})"


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
        self._rec = hooks.profiler
        name = "nccl" if pg.engine.device_type == "cuda" else pg.name().split(":")[-1]
        self._ev = self._rec and self._rec.begin(f"{name}:{what}", "communication", nest=False)

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
            t = self.pg.timeout if timeout is None else timeout
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
        for c in (self.MPI.COMM_WORLD, self.MPI.COMM_SELF):
            c.Set_errhandler(self.MPI.ERRORS_RETURN)    # a dead peer raises, not aborts

    def stage(self, arr):
        return np.ascontiguousarray(backend_of(arr).to_host(arr))

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def test(self, reqs, statuses=None):
        try:
            return self.MPI.Request.Testall(reqs, statuses)
        except self.MPI.Exception as e:
            _peer_lost("a collective", e)

    def wait(self, reqs, timeout, what, statuses=None):
        try:
            _mpi.wait_all(reqs, timeout, what, statuses, lambda: _check_failed(what))
        except self.MPI.Exception as e:
            _peer_lost(what, e)

    def _b(self, a):
        return [a.reshape(-1).view(np.uint8), self.MPI.BYTE]

    def _op(self, op):
        return getattr(self.MPI, _MPI_OPS[op])

    def allreduce(self, buf, op):
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

    def subgroup(self, ranks):
        comm = self.comm.Create(self.comm.Get_group().Incl(ranks))
        return None if comm == self.MPI.COMM_NULL else _MpiEngine(comm)

    def source(self, status):
        return status.Get_source()

    def close(self):
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


def _rendezvous(init_method, rank, world_size, timeout):
    """The store the ranks meet in, as torch's ``rendezvous`` for env://, tcp:// and file://."""
    if init_method.startswith("file://"):
        return FileStore(init_method[len("file://"):], world_size)
    if init_method.startswith("tcp://"):
        host, _, port = init_method[len("tcp://"):].partition("?")[0].rpartition(":")
    elif init_method.startswith("env://"):
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if var not in os.environ:
                if _mpi.launched_rank_size() is not None:
                    return None         # mpiexec started the ranks: MPI needs no rendezvous
                raise ValueError(f"Error initializing torch.distributed using env:// "
                                 f"rendezvous: environment variable {var} expected, but not set")
        host, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    else:
        raise ValueError(f"No rendezvous handler for {init_method}")
    return TCPStore(host.strip("[]"), int(port), world_size, rank == 0, timeout)


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
    timeout = timeout or default_pg_timeout
    _world.own_store = store is None
    if store is not None:
        if rank < 0 or world_size <= 0:
            raise ValueError("world_size and rank must be given when store is given")
    else:
        method = init_method or "env://"
        rank = _env_int("RANK", rank, method)
        world_size = _env_int("WORLD_SIZE", world_size, method)
        if world_size > 1 or not method.startswith("tcp://"):
            store = _rendezvous(method, rank, world_size, timeout)
    if not 0 <= rank < world_size:
        raise ValueError(f"Invalid rank {rank} for world_size {world_size}")
    _world.generation += 1
    if store is not None:
        store = PrefixStore(f"default_pg/{_world.generation}", store)
        store.set_timeout(timeout)
    if "nccl" in name:
        from . import _nccl
        engine = _nccl.NcclEngine(store, rank, world_size, device_id)
    else:
        engine = _MpiEngine(_mpi.world_comm(store, rank, world_size, timeout.total_seconds()))
    _world.store, _world.pg = store, ProcessGroup(engine, list(range(world_size)), name,
                                                  timeout, store)
    _world.groups = {_world.pg: "default_pg"}
    if world_size > 1:
        _watchdog.start(_world, store, rank)


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
        _world.groups = {}


def _resolve(group, what=""):
    """The ProcessGroup for ``group``; None for a rank outside it."""
    pg = _default_pg(what)
    if group is None:
        return pg
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
    engine = pg.engine.subgroup(ranks)
    _world.group_count += 1                     # on every rank, so names agree
    if engine is None:
        return GroupMember.NON_GROUP_MEMBER
    g = ProcessGroup(engine, ranks, Backend(backend or pg._backend), timeout or pg.timeout,
                     _world.store)
    _world.groups[g] = g.group_name = str(_world.group_count)
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
