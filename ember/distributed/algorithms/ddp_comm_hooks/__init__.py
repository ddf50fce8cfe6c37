"""DDP communication hooks (``register_comm_hook``), as ``torch.distributed.algorithms.ddp_comm_hooks``."""
from . import default_hooks  # noqa: F401
