"""``ember.distributed``: process groups, collectives and stores, as ``torch.distributed``.

Collectives run on an existing engine: MPI (through mpi4py) for CPU tensors, under the names
'gloo' and 'mpi', and NCCL (through CuPy) for CUDA tensors. ``import ember.distributed`` loads
neither; MPI starts at ``init_process_group``. See docs/distributed.md.
"""
from .distributed_c10d import (  # noqa: F401
    AllgatherOptions, AllreduceCoalescedOptions, AllreduceOptions, AllToAllOptions, Backend,
    BackendConfig, BarrierOptions, BroadcastOptions, DebugLevel, GatherOptions, GroupMember,
    GroupName, P2POp, ProcessGroup, ProcessGroupGloo, ReduceOp, ReduceOptions,
    ReduceScatterOptions, ScatterOptions, Work, all_gather, all_gather_coalesced,
    all_gather_into_tensor, all_gather_object, all_gather_single, all_reduce,
    all_reduce_coalesced, all_to_all, all_to_all_single, barrier, batch_isend_irecv,
    breakpoint, broadcast, broadcast_object_list, default_pg_timeout, destroy_process_group,
    gather, gather_object, get_backend, get_backend_config, get_debug_level,
    get_default_backend_for_device, get_global_rank, get_group_rank, get_node_local_rank,
    get_pg_count, get_process_group_ranks, get_rank, get_world_size, group, init_process_group,
    irecv, is_available, is_backend_available, is_gloo_available, is_initialized,
    is_mpi_available, is_nccl_available, is_torchelastic_launched, is_ucc_available,
    is_xccl_available, isend, monitored_barrier, new_group, new_subgroups,
    new_subgroups_by_enumeration, record_comm, recv, recv_object_list, reduce, reduce_op,
    reduce_scatter, reduce_scatter_single, reduce_scatter_tensor, scatter, scatter_object_list,
    send, send_object_list, set_debug_level, set_debug_level_from_env, shrink_group,
    split_group, supports_complex, _all_gather_base, _reduce_scatter_base)
from .store import (  # noqa: F401
    DistBackendError, DistError, DistNetworkError, DistStoreError, FileStore, HashStore,
    PrefixStore, QueueEmptyError, Store, TCPStore)
from .rendezvous import register_rendezvous_handler, rendezvous  # noqa: F401
from ._reducer import BuiltinCommHookType, GradBucket, Logger, Reducer  # noqa: F401
from .device_mesh import DeviceMesh, init_device_mesh  # noqa: F401
