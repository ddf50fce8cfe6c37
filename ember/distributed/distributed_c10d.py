"""Process groups and collectives, as ``torch.distributed`` (c10d): the names torch's
``torch.distributed.distributed_c10d`` holds, gathered from the modules that implement them,
one topic each:

- ``_state``: ``ReduceOp``, ``Backend``, ``GroupMember``, the default group, rank queries,
  the debug level, ``record_comm``
- ``_groups``: ``ProcessGroup``, ``init_process_group``, ``new_group``, subgroups, split,
  shrink, backend queries
- ``_pg_methods``: ``ProcessGroup``'s torch methods and their ``*Options``
- ``_work``: ``Work``, and telling ranks of a failed one
- ``_collectives``: the collectives; ``_p2p``: point to point; ``_objects``: the object
  collectives
- ``_mpi_engine``: the MPI engine (``_nccl``: the NCCL one)
"""
from ._state import *  # noqa: F401,F403
from ._state import _default_pg, _is_tensor, _resolve, _world  # noqa: F401
from ._work import Work, _check_failed, report_failure  # noqa: F401
from ._collectives import *  # noqa: F401,F403
from ._collectives import _all_gather_base, _reduce_scatter_base  # noqa: F401
from ._p2p import *  # noqa: F401,F403
from ._objects import *  # noqa: F401,F403
from ._pg_methods import *  # noqa: F401,F403
from ._groups import *  # noqa: F401,F403
from ._groups import _register, _split_engine  # noqa: F401
