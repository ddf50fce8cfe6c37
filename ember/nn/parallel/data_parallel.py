"""DataParallel: single-process data parallelism, as ``torch.nn.DataParallel``."""
from ..modules.module import Module


class DataParallel(Module):
    """Wraps ``module`` (reachable as ``.module``; state_dict keys gain ``module.``).

    NOTE: as torch's without a GPU, it runs the module in this process: ember has no
    multi-GPU scatter/replicate; use DistributedDataParallel for several devices.

    Example:
        >>> import ember
        >>> dp = ember.nn.DataParallel(ember.nn.Linear(2, 3))
        >>> dp(ember.ones(4, 2)).shape, list(dp.state_dict())
        (torch.Size([4, 3]), ['module.weight', 'module.bias'])
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module, self.device_ids, self.output_device, self.dim = \
            module, device_ids or [], output_device, dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
