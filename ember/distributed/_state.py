"""The process-wide state of ``torch.distributed`` and its small types: ``ReduceOp``,
``Backend``, ``GroupMember``, the default group (``_world``), rank queries, the debug level
and ``record_comm``. Every other c10d module reads the default group from here.
"""
import contextlib
import datetime
import enum
import os

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


def _is_tensor(x):
    from .._tensor import Tensor
    return isinstance(x, Tensor)


def is_initialized():
    """Whether the default process group is set up.

    Example:
        >>> import ember.distributed as dist
        >>> dist.is_initialized()
        False
    """
    return _world.pg is not None


def _default_pg(what="this operation"):
    if _world.pg is None:
        raise ValueError("Default process group has not been initialized, please make sure "
                         "to call init_process_group.")
    return _world.pg


def _resolve(group, what=""):
    """The ProcessGroup for ``group``; None for a rank outside it."""
    if group is None:
        return _default_pg(what)
    if group is GroupMember.NON_GROUP_MEMBER:
        return None
    return group


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
