"""Process groups: ``ProcessGroup``, ``init_process_group``/``destroy_process_group``,
``new_group`` and the other ways to make groups (subgroups, split, shrink), backend queries,
``breakpoint``."""
import datetime
import os
import sys
import typing
import warnings

from .._device import device as _device
from . import _mpi, _watchdog
from ._collectives import barrier
from ._mpi_engine import _MpiEngine
from ._pg_methods import _Methods
from ._state import (Backend, GroupMember, _default_pg, _resolve, _world, default_pg_timeout,
                     get_backend, get_process_group_ranks, get_rank, get_world_size)
from .store import PrefixStore, TCPStore


class ProcessGroup(_Methods):
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

    def set_timeout(self, timeout):
        self.timeout = timeout

    def get_group_store(self):
        return self.store

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None,
                    device_types=None):
        """This group's ranks ``ranks`` as a new group (every rank of this one calls it);
        None on the others."""
        return split_group(self, [list(ranks)], timeout, opts, group_desc) or None

    def abort(self):
        destroy_process_group(self)

    shutdown = abort

    def _get_backend(self, device=None):
        return self


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


def is_torchelastic_launched():
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


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
    return str(BackendConfig(get_backend(group)))


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
