"""The enums and configs of FSDP1, as ``torch.distributed.fsdp.api``."""
from dataclasses import dataclass
from enum import Enum, auto


class ShardingStrategy(Enum):
    """FULL_SHARD: parameters, gradients (and so optimizer state) sharded, parameters freed
    after forward; SHARD_GRAD_OP: kept unsharded from forward to the end of backward;
    NO_SHARD: replicated, gradients all-reduced (DDP); HYBRID_SHARD / _HYBRID_SHARD_ZERO2:
    FULL_SHARD / SHARD_GRAD_OP within a shard group, replicated across groups (gradients
    reduce-scattered within, then all-reduced across).

    Example:
        >>> from ember.distributed.fsdp import ShardingStrategy
        >>> ShardingStrategy.FULL_SHARD
        <ShardingStrategy.FULL_SHARD: 1>
    """
    FULL_SHARD = auto()
    SHARD_GRAD_OP = auto()
    NO_SHARD = auto()
    HYBRID_SHARD = auto()
    _HYBRID_SHARD_ZERO2 = auto()


class BackwardPrefetch(Enum):
    """When a unit's backward starts the all-gather of the next unit to run backward: before
    computing its own gradients (PRE) or after (POST)."""
    BACKWARD_PRE = auto()
    BACKWARD_POST = auto()


class StateDictType(Enum):
    """What ``state_dict()`` of an FSDP module returns: FULL (plain tensors, original names),
    SHARDED (DTensors sharded along dim 0), LOCAL (the flat parameter shards)."""
    FULL_STATE_DICT = auto()
    LOCAL_STATE_DICT = auto()
    SHARDED_STATE_DICT = auto()


@dataclass
class MixedPrecision:
    """FSDP1's dtypes: compute in ``param_dtype``, reduce gradients in ``reduce_dtype``
    (default: ``param_dtype``), buffers in ``buffer_dtype``.

    Example:
        >>> import ember
        >>> from ember.distributed.fsdp import MixedPrecision
        >>> MixedPrecision(param_dtype=ember.float16).cast_root_forward_inputs
        True
    """
    param_dtype: object = None
    reduce_dtype: object = None
    buffer_dtype: object = None
    keep_low_precision_grads: bool = False
    cast_forward_inputs: bool = False
    cast_root_forward_inputs: bool = True
    _module_classes_to_ignore: tuple = ()


@dataclass
class CPUOffload:
    """Offload parameters to the CPU (ember's CPU modules are there already)."""
    offload_params: bool = False


@dataclass
class StateDictConfig:
    offload_to_cpu: bool = False


@dataclass
class FullStateDictConfig(StateDictConfig):
    """FULL_STATE_DICT options: ``rank0_only`` gives other ranks an empty dict."""
    rank0_only: bool = False


@dataclass
class ShardedStateDictConfig(StateDictConfig):
    _use_dtensor: bool = True


@dataclass
class LocalStateDictConfig(StateDictConfig):
    pass


@dataclass
class OptimStateDictConfig:
    offload_to_cpu: bool = True


@dataclass
class FullOptimStateDictConfig(OptimStateDictConfig):
    rank0_only: bool = False


@dataclass
class ShardedOptimStateDictConfig(OptimStateDictConfig):
    _use_dtensor: bool = True


@dataclass
class LocalOptimStateDictConfig(OptimStateDictConfig):
    offload_to_cpu: bool = False


@dataclass
class StateDictSettings:
    state_dict_type: StateDictType
    state_dict_config: StateDictConfig
    optim_state_dict_config: OptimStateDictConfig
