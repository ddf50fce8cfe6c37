"""``torch.distributed._tensor``, DTensor's older import path."""
from ..tensor import (  # noqa: F401
    DeviceMesh, DTensor, Placement, Replicate, Shard, distribute_tensor, init_device_mesh)
