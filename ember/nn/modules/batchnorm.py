"""Normalization over batch, instance and channel groups: BatchNorm1d/2d/3d,
InstanceNorm1d/2d/3d, GroupNorm, LocalResponseNorm. Buffer names and shapes are torch's, so
state_dicts load both ways."""
import sys

from ..._ops.creation import full, ones, tensor, zeros, zeros_like
from ..._ops.joining import cat, stack
from ...autograd.function import Function
from ... import _dtype
from .. import functional as F
from .module import Module
from .normalization import register_affine, reset_affine


class _NormBase(Module):
    """Affine weight/bias and the running statistics buffers shared by batch and instance norm.
    """

    _version = 2
    nd = 2      # spatial dims of the batched input

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        factory = dict(device=device, dtype=dtype)
        register_affine(self, (num_features,), affine, bias, device, dtype)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, **factory))
            self.register_buffer("running_var", ones(num_features, **factory))
            self.register_buffer("num_batches_tracked",
                                 tensor(0, dtype=_dtype.int64, device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        self.reset_parameters()

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        reset_affine(self)

    def _check_input_dim(self, input):
        dims = (2, 3) if self.nd == 0 else (self.nd + 2,)      # BatchNorm1d: (N, C) or (N, C, L)
        if input.dim() not in dims:
            want = " or ".join(f"{d}D" for d in dims)
            raise ValueError(f"expected {want} input (got {input.dim()}D input)")

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:         # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked.item())
        # batch statistics in training, and in eval when there are no running stats
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if keep else None,
                            self.running_var if keep else None, self.weight, self.bias,
                            use_batch, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) input per channel.

    Example:
        >>> import ember
        >>> ember.nn.BatchNorm1d(4)
        BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
    """

    nd = 0


class BatchNorm2d(_BatchNorm):
    r"""Batch normalization of (N, C, H, W) input per channel:
    ``y = (x - mean) / sqrt(var + eps) * weight + bias``.

    Args:
        num_features (int): C.
        eps (float): added to the variance. Default: 1e-5.
        momentum (float or None): running-stat update factor; None for a cumulative average.
            Default: 0.1.
        affine (bool): learn weight (init 1) and bias (init 0). Default: True.
        track_running_stats (bool): keep running_mean/var (used in eval). Default: True.

    Shape:
        Input and output (N, C, H, W).

    Example:
        >>> import ember
        >>> m = ember.nn.BatchNorm2d(3)
        >>> y = m(ember.randn(4, 3, 5, 5))
        >>> [round(v, 4) for v in y.mean((0, 2, 3)).abs().tolist()], int(m.num_batches_tracked)
        ([0.0, 0.0, 0.0], 1)
    """

    nd = 2


class BatchNorm3d(_BatchNorm):
    """Batch normalization of (N, C, D, H, W) input per channel; see :class:`BatchNorm2d`."""

    nd = 3


class _InstanceNorm(_NormBase):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def _check_input_dim(self, input):
        if input.dim() not in (self.nd + 1, self.nd + 2):
            raise ValueError(f"expected {self.nd + 1}D or {self.nd + 2}D input (got "
                             f"{input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        channel = input.dim() - self.nd - 1
        if input.shape[channel] != self.num_features and self.affine:
            raise ValueError(f"expected input's size at dim={channel} to match num_features "
                             f"({self.num_features}), but got: {input.shape[channel]}.")
        batched = input.dim() == self.nd + 2
        x = input if batched else input.unsqueeze(0)
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats,
                              self.momentum if self.momentum is not None else 0.0, self.eps)
        return out if batched else out.squeeze(0)


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of (N, C, L) or (C, L): each channel of each sample over L."""

    nd = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of (N, C, H, W) or (C, H, W); no affine, no running stats by
    default.

    Example:
        >>> import ember
        >>> ember.nn.InstanceNorm2d(3)
        InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=False, bias=False,
                       track_running_stats=False)
    """

    nd = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization of (N, C, D, H, W) or (C, D, H, W)."""

    nd = 3


class GroupNorm(Module):
    """Normalize ``num_groups`` groups of channels, then a per-channel affine (1, 0 at init).

    Example:
        >>> import ember
        >>> m = ember.nn.GroupNorm(2, 6)
        >>> m
        GroupNorm(2, 6, eps=1e-05, affine=True, bias=True)
        >>> m(ember.randn(3, 6, 4)).shape
        torch.Size([3, 6, 4])
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                     eps, affine)
        register_affine(self, (num_channels,), affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        reset_affine(self)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class LocalResponseNorm(Module):
    """Normalize each value by its ``size`` neighbouring channels (see nn.functional).

    Example:
        >>> import ember
        >>> ember.nn.LocalResponseNorm(2)
        LocalResponseNorm(2, alpha=0.0001, beta=0.75, k=1.0)
    """

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


def _sync_stats(x, group, world_size):
    """The (N, C, *) input's per-channel mean, biased variance and element count over every
    rank of ``group``: each rank's count, mean and sum of squared deviations, gathered and
    combined as parallel variance (as torch's batch_norm_gather_stats_with_counts)."""
    import ember.distributed as dist
    dims = [0] + list(range(2, x.dim()))
    n = x.numel() // x.shape[1]
    mean = x.mean(dims)
    m2 = ((x - mean.reshape(1, -1, *(1,) * (x.dim() - 2))) ** 2).sum(dims)
    local = cat([full((1,), float(n), dtype=x.dtype, device=x.device), mean, m2])
    parts = [zeros_like(local) for _ in range(world_size)]
    dist.all_gather(parts, local, group=group)
    table = stack(parts)                                    # (world, 1 + 2C)
    counts, means, m2s = table[:, :1], table[:, 1:1 + x.shape[1]], table[:, 1 + x.shape[1]:]
    total = counts.sum()
    g_mean = (counts * means).sum(0) / total
    g_m2 = (m2s + counts * (means - g_mean) ** 2).sum(0)
    return g_mean, g_m2 / total, int(total.item())


class _SyncBatchNormFunction(Function):
    """Batch norm with statistics over all ranks; backward all-reduces the two per-channel
    sums the input gradient needs (the weight and bias gradients stay local, for DDP)."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, group,
                world_size):
        mean, var, total = _sync_stats(input, group, world_size)
        if total <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {list(input.shape)}")
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean * momentum)
            running_var.mul_(1 - momentum).add_(var * (total / (total - 1)) * momentum)
        shape = (1, -1) + (1,) * (input.dim() - 2)
        invstd = (var + eps).rsqrt()
        xhat = (input - mean.reshape(shape)) * invstd.reshape(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.group, ctx.world_size, ctx.total, ctx.has_bias = group, world_size, total, \
            bias is not None
        out = xhat if weight is None else xhat * weight.reshape(shape)
        return out if bias is None else out + bias.reshape(shape)

    @staticmethod
    def backward(ctx, grad):
        import ember.distributed as dist
        xhat, invstd, weight = ctx.saved_tensors
        dims = [0] + list(range(2, grad.dim()))
        shape = (1, -1) + (1,) * (grad.dim() - 2)
        sums = cat([grad.sum(dims), (grad * xhat).sum(dims)])
        grad_w = sums[grad.shape[1]:].clone() if weight is not None else None
        grad_b = sums[:grad.shape[1]].clone() if ctx.has_bias else None
        dist.all_reduce(sums, group=ctx.group)
        mean_dy, mean_dy_xhat = (sums / ctx.total).reshape(2, -1)
        scale = invstd if weight is None else invstd * weight
        grad_in = (grad - mean_dy.reshape(shape) - xhat * mean_dy_xhat.reshape(shape)) * \
            scale.reshape(shape)
        return grad_in, grad_w, grad_b, None, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalization whose training statistics are those of the whole batch across the
    ranks of ``process_group`` (the default group when None), through ember.distributed's
    collectives; outside a process group, in eval mode, or with one rank, it is BatchNorm.

    NOTE: torch syncs only cuda/xpu tensors and raises for cpu ones inside a process group;
    ember's collectives run on the cpu, so ember syncs them.

    Example:
        >>> bn = ember.nn.SyncBatchNorm(3)
        >>> bn(ember.arange(12.).reshape(4, 3)).mean(0).abs().max() < 1e-6
        tensor(True)
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None, device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        dist = sys.modules.get("ember.distributed")     # (never initialized if never loaded)
        world = 1
        if self.training and dist is not None and dist.is_initialized():
            world = dist.get_world_size(self.process_group or dist.group.WORLD)
        if world == 1:
            return super().forward(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked.item())
        keep = self.track_running_stats
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias, self.running_mean if keep else None,
            self.running_var if keep else None, self.eps, factor,
            self.process_group or dist.group.WORLD, world)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every BatchNorm*D in it replaced by a SyncBatchNorm sharing its
        parameters and running statistics."""
        out = module
        if isinstance(module, _BatchNorm):
            out = SyncBatchNorm(module.num_features, module.eps, module.momentum,
                                module.affine, module.track_running_stats, process_group,
                                bias=module.bias is not None)
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out
