"""``ember.nn.parallel``: DistributedDataParallel and DataParallel, as ``torch.nn.parallel``."""
from .data_parallel import DataParallel  # noqa: F401
from .distributed import DistributedDataParallel  # noqa: F401
