"""``ember.distributed``: process groups, collectives and stores, as ``torch.distributed``.

Collectives run on an existing engine: MPI (through mpi4py) for CPU tensors, under the names
'gloo' and 'mpi', and NCCL (through CuPy) for CUDA tensors. ``import ember.distributed`` loads
neither; MPI starts at ``init_process_group``. See docs/distributed.md.
"""
from .distributed_c10d import (  # noqa: F401
    Backend, GroupMember, P2POp, ProcessGroup, ReduceOp, Work, all_gather, all_gather_into_tensor,
    all_gather_object, all_reduce, all_to_all, all_to_all_single, barrier, batch_isend_irecv,
    broadcast, broadcast_object_list, default_pg_timeout, destroy_process_group, gather,
    gather_object, get_backend, get_global_rank, get_group_rank, get_process_group_ranks,
    get_rank, get_world_size, group, init_process_group, irecv, is_available, is_gloo_available,
    is_initialized, is_mpi_available, is_nccl_available, is_torchelastic_launched, isend,
    monitored_barrier, new_group, recv, reduce, reduce_op, reduce_scatter, reduce_scatter_tensor,
    scatter, scatter_object_list, send, _all_gather_base, _reduce_scatter_base)
from .store import (  # noqa: F401
    DistBackendError, DistError, DistNetworkError, DistStoreError, FileStore, HashStore,
    PrefixStore, Store, TCPStore)
