"""``ember.distributed.fsdp``: sharded data parallelism, as ``torch.distributed.fsdp``:
FSDP2's ``fully_shard`` (per-parameter DTensor shards) and FSDP1's
``FullyShardedDataParallel`` (a flat parameter per wrapped unit). See docs/distributed.md."""
from . import wrap  # noqa: F401
from ._fully_shard import (  # noqa: F401
    CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, UnshardHandle,
    fully_shard)
from .api import (  # noqa: F401
    BackwardPrefetch, CPUOffload, FullOptimStateDictConfig, FullStateDictConfig,
    LocalOptimStateDictConfig, LocalStateDictConfig, MixedPrecision, OptimStateDictConfig,
    ShardedOptimStateDictConfig, ShardedStateDictConfig, ShardingStrategy, StateDictConfig,
    StateDictSettings, StateDictType)
from .fully_sharded_data_parallel import FlatParameter, FullyShardedDataParallel  # noqa: F401
