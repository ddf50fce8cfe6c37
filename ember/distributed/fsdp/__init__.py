"""``ember.distributed.fsdp``: sharded data parallelism, as ``torch.distributed.fsdp``.

NOTE: not implemented yet. The names exist so that scripts which import them (and then use
DDP or one process) run; constructing them raises NotImplementedError. Use
``ember.nn.parallel.DistributedDataParallel`` meanwhile.
"""
_MSG = ("{} is not implemented in ember yet (sharded training is planned); use "
        "ember.nn.parallel.DistributedDataParallel, which keeps a full replica per rank")


class FullyShardedDataParallel:
    """FSDP1's wrapper class; not implemented yet (raises NotImplementedError)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_MSG.format("FullyShardedDataParallel"))


def fully_shard(module, *args, **kwargs):
    """FSDP2's per-parameter sharding; not implemented yet (raises NotImplementedError)."""
    raise NotImplementedError(_MSG.format("fully_shard"))
