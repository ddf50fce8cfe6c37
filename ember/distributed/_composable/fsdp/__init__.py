"""``torch.distributed._composable.fsdp``, FSDP2's older import path (torch 2.4-2.5 scripts)."""
from ...fsdp import (  # noqa: F401
    CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard)
